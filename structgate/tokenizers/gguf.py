"""GGUF files (vocab-only or full models, ``.gguf.gz`` too): the metadata reader (no ``gguf``
package needed; format: ggml ``docs/gguf.md``), the tokenizer's token bytes, and the conversion to a
Hugging Face ``tokenizer.json`` (the exact encoder of a GGUF vocabulary)."""
from __future__ import annotations

import gzip
import json
import mmap
import pathlib
import struct
from typing import Any, Sequence

import numpy as np

from ..errors import VocabularyError
from ._common import (_BYTE_PIECE, _PAD_RE, EOG_TOKEN_NAMES, VocabParts, _assemble, _bytelevel_bytes)
from .hf import _TokenizersEncoder, _bytelevel_tokenizer_json
from .spm import _spm_merges, _spm_tokenizer_json


_LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


_QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")


# DeepSeek Coder: llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_CODER splits, applied in sequence
_DEEPSEEK_CODER_PATS = ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}")


# GGUF ``tokenizer.ggml.pre`` → (split regexes applied in sequence, or None for GPT-2's ByteLevel
# regex; NFC normalizer; ignore_merges). Checked against llama.cpp's test vectors: llama-bpe,
# qwen2, gpt-2, deepseek-coder.
_GGUF_PRE: dict[str, tuple[tuple[str, ...] | None, bool, bool]] = {
    "llama-bpe": ((_LLAMA3_PAT,), False, True),
    "llama3": ((_LLAMA3_PAT,), False, True),
    "smaug-bpe": ((_LLAMA3_PAT,), False, False),
    "qwen2": ((_QWEN2_PAT,), True, False),
    "deepseek-coder": (_DEEPSEEK_CODER_PATS, False, False),
    "gpt-2": (None, False, False),
    "gpt2": (None, False, False),
    "default": (None, False, False),
}


def _added_token(i: int, content: str, special: bool) -> dict:
    return {"id": int(i), "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": bool(special)}


_GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


_GGUF_NP = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1",
            10: "<u8", 11: "<i8", 12: "<f8"}


_GGUF_STRING, _GGUF_ARRAY = 8, 9


# gguf.TokenType
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6


def read_gguf_metadata(path, *, prefix: str | None = None) -> dict[str, Any]:
    """The key/value metadata of a GGUF file (format v2/v3; gzipped files too), without its tensors.

    Strings are returned as ``str``; string arrays as ``list[bytes]`` (raw UTF-8, so malformed
    entries survive); numeric arrays as read-only numpy arrays; scalars as Python numbers.
    ``prefix`` keeps only keys starting with it (others are skipped, but still parsed).
    Format: ggml ``docs/gguf.md``. Plain files are memory-mapped (only the metadata pages of a
    model file are read); gzipped files are decompressed in memory.

    Raises
    ------
    VocabularyError
        Missing file, not a GGUF file, unsupported version, truncated metadata.
    """
    p = pathlib.Path(path)
    try:
        with open(p, "rb") as f:
            magic = f.read(2)
            f.seek(0)
            if magic == b"\x1f\x8b":
                data = gzip.decompress(f.read())
            else:  # map, so a multi-GB model file costs only its metadata pages
                try:
                    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                except ValueError:  # empty file
                    data = b""
    except (EOFError, gzip.BadGzipFile) as e:
        raise VocabularyError(f"{p}: corrupt gzip data ({e})") from e
    except FileNotFoundError:
        raise VocabularyError(f"GGUF file {p} does not exist") from None
    except IsADirectoryError:
        raise VocabularyError(f"{p} is a directory, not a GGUF file") from None
    except OSError as e:
        raise VocabularyError(f"cannot read GGUF file {p}: {e}") from e
    if len(data) < 24 or data[:4] != b"GGUF":
        raise VocabularyError(f"{p} is not a GGUF file (magic {data[:4]!r}, expected b'GGUF')")
    version = struct.unpack_from("<I", data, 4)[0]
    if version not in (2, 3):
        raise VocabularyError(f"{p}: unsupported GGUF version {version} (2 or 3 supported)")
    _, nkv = struct.unpack_from("<QQ", data, 8)
    off = 24
    out: dict[str, Any] = {}
    u64 = struct.Struct("<Q").unpack_from
    try:
        for _ in range(nkv):
            (n,) = u64(data, off)
            key = data[off + 8: off + 8 + n].decode("utf-8")
            off += 8 + n
            (t,) = struct.unpack_from("<I", data, off)
            off += 4
            if t == _GGUF_STRING:
                (n,) = u64(data, off)
                v: Any = data[off + 8: off + 8 + n].decode("utf-8", "replace")
                off += 8 + n
            elif t == _GGUF_ARRAY:
                et, cnt = struct.unpack_from("<IQ", data, off)
                off += 12
                if et == _GGUF_STRING:
                    v = []
                    ap = v.append
                    for _ in range(cnt):
                        (n,) = u64(data, off)
                        off += 8
                        ap(data[off: off + n])
                        off += n
                    if off > len(data):
                        raise struct.error("truncated")
                elif et in _GGUF_NP:
                    dt = np.dtype(_GGUF_NP[et])
                    v = np.frombuffer(data, dt, cnt, off).copy()
                    off += cnt * dt.itemsize
                else:
                    raise VocabularyError(f"{p}: unsupported GGUF array element type {et} for key {key!r}")
            elif t in _GGUF_SCALAR:
                fmt = _GGUF_SCALAR[t]
                (v,) = struct.unpack_from(fmt, data, off)
                off += struct.calcsize(fmt)
            else:
                raise VocabularyError(f"{p}: unknown GGUF value type {t} for key {key!r}")
            if prefix is None or key.startswith(prefix):
                out[key] = v
    except (struct.error, ValueError) as e:
        raise VocabularyError(f"{p}: truncated or corrupt GGUF metadata ({e})") from e
    finally:
        if isinstance(data, mmap.mmap):
            data.close()
    return out


def _gguf_tokens(path) -> dict[str, Any]:
    kv = read_gguf_metadata(path, prefix="tokenizer.")
    if "tokenizer.ggml.tokens" not in kv:
        raise VocabularyError(f"{path}: GGUF file has no tokenizer.ggml.tokens (not a model/vocab file)")
    return kv


def read_gguf(path, *, vocab_size: int | None = None, eos_token_ids: Sequence[int] = ()) -> VocabParts:
    """The :class:`VocabParts` of :func:`structgate.tokenizers.from_gguf` (same arguments and errors)."""
    path = pathlib.Path(path)
    kv = _gguf_tokens(path)
    model = kv.get("tokenizer.ggml.model", "llama")
    tokens: list[bytes] = kv["tokenizer.ggml.tokens"]
    n_slots = len(tokens)
    types = kv.get("tokenizer.ggml.token_type")
    types = np.asarray(types, dtype=np.int64) if types is not None else np.ones(n_slots, dtype=np.int64)
    if len(types) != n_slots:
        raise VocabularyError(f"{path}: {len(types)} token types for {n_slots} tokens")
    if model == "gpt2":
        kind = "bytelevel"
    elif model in ("llama", "gemma4", "gemma3", "gemma"):
        kind = "spm"
    else:
        raise VocabularyError(f"{path}: unsupported GGUF tokenizer model {model!r} (supported: gpt2, llama, gemma4)")
    # drop trailing [PADn] filler slots
    n = n_slots
    while n > 0 and types[n - 1] != TOKEN_NORMAL and _PAD_RE.match(tokens[n - 1].decode("utf-8", "replace")):
        n -= 1
    entries: dict[int, bytes] = {}
    names: dict[int, str] = {}
    specials: set[int] = set()
    type_list = types.tolist()
    for i in range(n):
        s = tokens[i].decode("utf-8", "replace")
        names[i] = s
        t = type_list[i]
        if s in EOG_TOKEN_NAMES:
            specials.add(i)  # llama.cpp overrides EOG-named tokens to CONTROL
        elif t == TOKEN_NORMAL:
            if kind == "bytelevel":
                b = _bytelevel_bytes(s)
                entries[i] = b if b is not None else tokens[i]
            else:
                entries[i] = s.replace("\u2581", " ").encode("utf-8")
        elif t == TOKEN_BYTE:
            m = _BYTE_PIECE.match(s)
            if m:
                entries[i] = bytes([int(m.group(1), 16)])
            elif kind == "bytelevel":
                b = _bytelevel_bytes(s)
                entries[i] = b if b is not None else tokens[i]
            else:
                entries[i] = tokens[i]
        elif t == TOKEN_USER_DEFINED:
            entries[i] = tokens[i]
        else:  # CONTROL, UNKNOWN, UNUSED (and unknown type codes)
            specials.add(i)
    eos = list(eos_token_ids)
    for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        if k in kv:
            eos.append(int(kv[k]))
    eos.extend(i for i in specials if names[i] in EOG_TOKEN_NAMES)
    if vocab_size is None:
        vocab_size = n_slots
    enc = None
    if kind == "spm" or kv.get("tokenizer.ggml.pre", "default") in _GGUF_PRE:
        enc = _TokenizersEncoder(builder=_GGUFJsonBuilder(str(path)))
    return _assemble(entries, specials, names, eos, n_tokens=n, vocab_size=vocab_size, name=str(path), encoder=enc)


class _GGUFJsonBuilder:
    """Builds a ``tokenizer.json`` string from a GGUF file on demand (picklable)."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self) -> str:
        return json.dumps(gguf_to_tokenizer_json(self.path), ensure_ascii=False)


def gguf_to_tokenizer_json(path, *, with_bos: bool = False) -> dict:
    """Convert a GGUF tokenizer to a Hugging Face ``tokenizer.json`` document.

    Byte-level files: BPE over ``tokenizer.ggml.tokens`` / ``merges`` with the pre-tokenizer of
    ``tokenizer.ggml.pre`` (Llama 3: ``ignore_merges=true``, as in Meta's file; Qwen2: NFC + its
    split regex). SentencePiece files: BPE with byte fallback and merges derived from
    ``tokenizer.ggml.scores``. Only real token slots are included (no ``[PADn]`` fillers, no extra
    ``<|endoftext|>`` as ``transformers``' converter appends for Llama 3). ``with_bos`` adds a
    post-processor prepending ``tokenizer.ggml.bos_token_id`` (``add_special_tokens=True``).

    Raises
    ------
    VocabularyError
        Unsupported model or pre-tokenizer.
    """
    kv = _gguf_tokens(path)
    model = kv.get("tokenizer.ggml.model", "llama")
    tokens = [t.decode("utf-8", "replace") for t in kv["tokenizer.ggml.tokens"]]
    types = np.asarray(kv.get("tokenizer.ggml.token_type", np.ones(len(tokens))), dtype=np.int64)
    n = len(tokens)
    while n > 0 and types[n - 1] != TOKEN_NORMAL and _PAD_RE.match(tokens[n - 1]):
        n -= 1
    vocab: dict[str, int] = {}
    added: list[dict] = []
    for i in range(n):
        t = int(types[i])
        if t in (TOKEN_NORMAL, TOKEN_BYTE):
            vocab.setdefault(tokens[i], i)
        elif t == TOKEN_USER_DEFINED and tokens[i] not in EOG_TOKEN_NAMES:
            added.append(_added_token(i, tokens[i], False))
        else:
            added.append(_added_token(i, tokens[i], True))
    # ``tokenizers`` gives an added token that is not in the model vocabulary the next free id,
    # ignoring its declared id; so added tokens that sit among the model's ids (Llama 2's <s> at 1)
    # must also be model entries. Trailing ones (Llama 3's 128000+) stay out, as in Meta's file.
    top = max(vocab.values(), default=-1)
    model_vocab = dict(vocab)
    for a in added:
        if a["id"] < top:
            model_vocab.setdefault(a["content"], a["id"])
    bos = None
    if with_bos and "tokenizer.ggml.bos_token_id" in kv:
        b = int(kv["tokenizer.ggml.bos_token_id"])
        bos = (tokens[b], b)
    if model == "gpt2":
        pre = kv.get("tokenizer.ggml.pre", "default")
        if pre not in _GGUF_PRE:
            raise VocabularyError(f"{path}: no encoder for GGUF pre-tokenizer {pre!r} "
                                  f"(known: {', '.join(sorted(_GGUF_PRE))})")
        regex, nfc, ignore = _GGUF_PRE[pre]
        merges = [m.decode("utf-8", "replace") for m in kv.get("tokenizer.ggml.merges", [])]
        return _bytelevel_tokenizer_json(model_vocab, merges, added, regex, nfc=nfc, ignore_merges=ignore, bos=bos)
    if model in ("llama", "gemma4", "gemma3", "gemma"):
        scores = kv.get("tokenizer.ggml.scores")
        if scores is None:
            raise VocabularyError(f"{path}: SentencePiece GGUF without tokenizer.ggml.scores")
        normal = {tokens[i]: float(scores[i]) for i in range(n) if types[i] == TOKEN_NORMAL}
        unk_id = kv.get("tokenizer.ggml.unknown_token_id")
        unk = tokens[int(unk_id)] if unk_id is not None and int(unk_id) < n else None
        if unk is not None:
            model_vocab.setdefault(unk, int(unk_id))
        merges = _spm_merges(vocab, normal)
        asp = bool(kv.get("tokenizer.ggml.add_space_prefix", model == "llama"))
        return _spm_tokenizer_json(model_vocab, merges, added, add_space_prefix=asp, unk=unk, bos=bos)
    raise VocabularyError(f"{path}: unsupported GGUF tokenizer model {model!r}")
