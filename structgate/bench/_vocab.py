"""Vocabulary loading for the benchmarks.

:func:`load_bench_vocabulary` prefers :func:`structgate.load_vocabulary` (the project's tokenizer
module). When that module is not importable (early checkouts), it falls back to a small GGUF reader
for byte-level BPE vocabularies (``llama3`` = ``ggml-vocab-llama-bpe.gguf``): token bytes through the
GPT-2 ``bytes_to_unicode`` table, control tokens without bytes, and an encoder built with the
``tokenizers`` library (Llama 3 pre-tokenizer regex, ``ignore_merges=True`` as in Meta's
``tokenizer.json``). The converted ``tokenizer.json`` is cached under ``~/.cache/structgate/bench``.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..errors import VocabularyError
from ..vocab import Vocabulary

__all__ = ["load_bench_vocabulary", "vocabulary_info"]

#: bundled names the fallback understands → GGUF file names searched in the data folders
_FALLBACK_GGUF = {"llama3": "ggml-vocab-llama-bpe.gguf", "qwen2": "ggml-vocab-qwen2.gguf",
                  "gpt2": "ggml-vocab-gpt-2.gguf"}
_SEARCH_DIRS = ("/work/shared/data/tokenizers",)

_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _cache_dir() -> Path:
    d = Path(os.environ.get("STRUCTGATE_CACHE", Path.home() / ".cache" / "structgate")) / "bench"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _gguf_path(spec: str) -> Path:
    if spec in _FALLBACK_GGUF:
        for d in _SEARCH_DIRS:
            p = Path(d) / _FALLBACK_GGUF[spec]
            if p.exists():
                return p
        raise VocabularyError(f"tokenizer {spec!r}: {_FALLBACK_GGUF[spec]} not found in {_SEARCH_DIRS}")
    p = Path(spec)
    if p.suffix == ".gguf" and p.exists():
        return p
    raise VocabularyError(f"cannot load tokenizer {spec!r} (structgate.tokenizers is not available and "
                          f"the fallback reads only {sorted(_FALLBACK_GGUF)} or a byte-level BPE .gguf)")


def _from_gguf_fallback(spec: str) -> Vocabulary:
    path = _gguf_path(spec)
    key = hashlib.sha256(f"{path.resolve()}:{path.stat().st_size}:{path.stat().st_mtime}".encode()).hexdigest()[:16]
    cached = _cache_dir() / f"{path.stem}-{key}.json"
    if cached.exists():
        data = json.loads(cached.read_text())
    else:
        import gguf

        r = gguf.GGUFReader(str(path))

        def arr(name):
            f = r.fields[name]
            return [f.parts[i] for i in f.data]

        def scalar(name):
            f = r.fields.get(name)
            return None if f is None else f.parts[f.data[0]].tolist()[0]

        model = bytes(arr("tokenizer.ggml.model")[0]).decode()
        if model != "gpt2":
            raise VocabularyError(f"fallback vocabulary reader handles byte-level BPE only, {path.name} is {model!r}")
        pre = bytes(r.fields["tokenizer.ggml.pre"].parts[r.fields["tokenizer.ggml.pre"].data[0]]).decode() \
            if "tokenizer.ggml.pre" in r.fields else "gpt2"
        data = {
            "tokens": [bytes(t).decode("utf-8") for t in arr("tokenizer.ggml.tokens")],
            "types": [int(t[0]) for t in arr("tokenizer.ggml.token_type")],
            "merges": [bytes(m).decode("utf-8") for m in arr("tokenizer.ggml.merges")],
            "eos": scalar("tokenizer.ggml.eos_token_id"),
            "pre": pre,
        }
        cached.write_text(json.dumps(data))
    return _build(data, name=spec)


def _build(data: dict, name: str) -> Vocabulary:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tokens, types = data["tokens"], data["types"]
    u2b = {c: b for b, c in _bytes_to_unicode().items()}
    token_bytes, specials = [], []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (3, 5):  # control / unused → no bytes
            token_bytes.append(b"")
            specials.append(i)
            continue
        try:
            token_bytes.append(bytes(u2b[c] for c in t))
        except KeyError:
            token_bytes.append(t.encode("utf-8"))
    pre = data.get("pre", "gpt2")
    split = {"llama-bpe": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT}.get(pre, _GPT2_SPLIT)
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ", 1)) for m in data["merges"]]
    bpe = models.BPE(vocab=vocab, merges=merges, ignore_merges=(pre == "llama-bpe"))
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()

    def encoder(text: str, _tok=tok) -> list[int]:
        return _tok.encode(text, add_special_tokens=False).ids

    eos = [int(data["eos"])]
    if name == "llama3":
        eos = sorted({*eos, 128001, 128008, 128009} & set(range(len(tokens))))
    return Vocabulary(token_bytes=token_bytes, eos_token_ids=eos, special_token_ids=frozenset(specials),
                      vocab_size=len(tokens), name=name, encoder=encoder, token_names=tokens)


def load_bench_vocabulary(spec: str) -> Vocabulary:
    """The vocabulary ``spec`` names (``llama3``, a folder, a ``tokenizer.json``, ``.gguf``...).

    Uses :func:`structgate.load_vocabulary` when the tokenizer module exists, else the GGUF fallback.

    Raises
    ------
    VocabularyError
        Unknown spec, unreadable file, or no encoder (the benchmarks tokenise text).
    """
    import importlib.util

    if importlib.util.find_spec("structgate.tokenizers") is None:
        vocab = _from_gguf_fallback(spec)
    else:
        from ..vocab import load_vocabulary

        vocab = load_vocabulary(spec)
    if vocab.encoder is None:
        raise VocabularyError(f"tokenizer {spec!r} has no encoder; benchmarks need one to tokenise instances")
    return vocab


def vocabulary_info(vocab: Vocabulary) -> dict:
    """JSON-able description of a vocabulary for benchmark metadata."""
    return {"name": vocab.name, "n_tokens": vocab.n_tokens, "vocab_size": vocab.vocab_size,
            "eos_token_ids": list(vocab.eos_token_ids), "n_special": len(vocab.special_token_ids),
            "fingerprint": vocab.fingerprint[:16]}
