"""Hugging Face tokenizers (``tokenizer.json``, ``tokenizers.Tokenizer``, ``transformers``): byte-level
BPE (GPT-2, Llama 3, Qwen2, DeepSeek), SentencePiece-style (``Metaspace`` / byte fallback) and raw
models, their exact encoders (no dummy prefix, special-token text as text), and the byte-level BPE
``tokenizer.json`` document the GGUF converter writes."""
from __future__ import annotations

import gzip
import json
import os
import pathlib
import re
import threading
from typing import Any, Mapping, Sequence

from ..errors import VocabularyError
from ._common import (EOG_TOKEN_NAMES, _PAD_RE, VocabParts, _assemble, _bytelevel_translate, _spm_bytes)


def _bytelevel_tokenizer_json(vocab: Mapping[str, int], merges: Sequence[str], added: Sequence[dict],
                              split_regexes: Sequence[str] | None, *, nfc: bool = False,
                              ignore_merges: bool = False, bos: tuple[str, int] | None = None) -> dict:
    """A ``tokenizer.json`` document for a byte-level BPE tokenizer.

    ``split_regexes=None`` uses the GPT-2 ``ByteLevel(use_regex=True)`` pre-tokenizer, otherwise
    one ``Split(regex, Isolated)`` per regex then ``ByteLevel(use_regex=False)`` as in Meta's
    Llama 3 and Qwen2 files. ``bos`` adds a ``TemplateProcessing`` post-processor that prepends it.
    """
    if split_regexes is None:
        pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    else:
        pre = {"type": "Sequence", "pretokenizers": [
            *({"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False}
              for r in split_regexes),
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    post: dict = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    if bos is not None:
        post = {"type": "Sequence", "processors": [post, {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos[0], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos[0], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos[0], "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos[0]: {"id": bos[0], "ids": [bos[1]], "tokens": [bos[0]]}}}]}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": list(added),
        "normalizer": {"type": "NFC"} if nfc else None,
        "pre_tokenizer": pre,
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": dict(vocab), "merges": list(merges)},
    }


def _strip_dummy_prefix(js: str) -> str:
    """Remove the dummy-prefix space from a ``tokenizer.json`` text: drop ``Prepend`` normalizers,
    set ``Metaspace`` pre-tokenizers to ``prepend_scheme: never`` and ``ByteLevel`` ones to
    ``add_prefix_space: false``. Encoding with the result gives ids whose bytes are exactly the
    text's (``"Hi"`` → ``H``, ``i``; SentencePiece's original gives ``▁Hi``, i.e. ``" Hi"``)."""
    if not _has_dummy_prefix(js):
        return js
    doc = json.loads(js)

    def norm(n):
        if not n:
            return n
        if n.get("type") == "Prepend":
            return None
        if n.get("type") == "Sequence":
            n["normalizers"] = [m for m in (norm(m) for m in n.get("normalizers", [])) if m]
        return n

    def pre(n):
        if not n:
            return n
        if n.get("type") == "Metaspace":
            n["prepend_scheme"] = "never"
            if "add_prefix_space" in n:
                n["add_prefix_space"] = False
        if n.get("type") == "ByteLevel":
            n["add_prefix_space"] = False
        if n.get("type") == "Sequence":
            for m in n.get("pretokenizers", []):
                pre(m)
        return n

    try:
        doc["normalizer"] = norm(doc.get("normalizer"))
        doc["pre_tokenizer"] = pre(doc.get("pre_tokenizer"))
    finally:
        norm = pre = None  # (recursive: no reference cycle left for the collector, returned or raised)
    return json.dumps(doc, ensure_ascii=False)


def _encoding_tokenizer(js: str):
    """A ``tokenizers.Tokenizer`` for exact encoding from ``tokenizer.json`` text: no dummy prefix
    (reparsed through :func:`_strip_dummy_prefix` only when the file has one), special-token text
    encoded as text."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(js)
    if _reusable(tok) is None:
        tok = Tokenizer.from_str(_strip_dummy_prefix(js))
    tok.encode_special_tokens = True
    return tok


class _TokenizersEncoder:
    """Text → ids with a ``tokenizers.Tokenizer``: no special tokens added, special-token text
    encoded as ordinary text, no SentencePiece dummy prefix (see :func:`_strip_dummy_prefix`), so
    the ids' bytes concatenate to exactly ``text.encode()``. Pickles as its ``tokenizer.json``
    source (a path or JSON string)."""

    def __init__(self, *, path: str | None = None, json_str: str | None = None, gz: bool = False,
                 tokenizer: Any = None, builder: Any = None):
        self._path, self._json, self._gz, self._builder = path, json_str, gz, builder
        self._tok = tokenizer
        self._lock = threading.Lock()

    def _get(self):
        if self._tok is None:
            with self._lock:
                if self._tok is None:
                    if self._json is not None:
                        js = self._json
                    elif self._builder is not None:
                        js = self._builder()
                    elif self._gz:
                        js = gzip.decompress(pathlib.Path(self._path).read_bytes()).decode("utf-8")
                    else:
                        js = pathlib.Path(self._path).read_text("utf-8")
                    self._tok = _encoding_tokenizer(js)
        return self._tok

    def __call__(self, text: str) -> list[int]:
        return self._get().encode(text, add_special_tokens=False).ids

    def __getstate__(self):
        st = dict(self.__dict__)
        st["_lock"] = None
        if self._path is None and self._json is None and self._builder is None:
            st["_json"] = self._get().to_str()
        st["_tok"] = None
        return st

    def __setstate__(self, st):
        self.__dict__.update(st)
        self._lock = threading.Lock()


class _UserTokenizersEncoder(_TokenizersEncoder):
    """Encoder over a caller's ``tokenizers.Tokenizer``: copied before ``encode_special_tokens``
    is set, so the caller's object is never modified."""

    def __init__(self, tokenizer):
        super().__init__()
        self._user = tokenizer

    def _get(self):
        if self._tok is None:
            with self._lock:
                if self._tok is None:
                    self._tok = _encoding_tokenizer(self._user.to_str())
        return self._tok

    def __getstate__(self):
        return {"_path": None, "_json": self._get().to_str(), "_gz": False, "_builder": None,
                "_tok": None, "_lock": None}


class _HFCallEncoder:
    """A ``transformers`` tokenizer without a fast backend: ``tokenizer.encode(text, add_special_tokens=False)``."""

    def __init__(self, tokenizer):
        self._tok = tokenizer

    def __call__(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))


def _kind_of(tok) -> str:
    """``"bytelevel"``, ``"spm"`` or ``"raw"`` for a ``tokenizers.Tokenizer``."""
    model = type(tok.model).__name__
    if model == "WordPiece":
        raise VocabularyError("WordPiece tokenizers are not supported: a token's bytes depend on its "
                              "neighbours (## continuation), so they have no exact per-token bytes")
    parts = []
    for comp in (tok.decoder, tok.pre_tokenizer, tok.normalizer):
        if comp is not None:
            try:
                parts.append(comp.__getstate__().decode("utf-8", "replace"))
            except Exception:  # pragma: no cover - exotic custom components
                parts.append(type(comp).__name__)
    desc = " ".join(parts)
    if '"ByteLevel"' in desc or "ByteLevel" in parts:
        return "bytelevel"
    if model == "Unigram" or "Metaspace" in desc or "\u2581" in desc or getattr(tok.model, "byte_fallback", False):
        return "spm"
    return "raw"


def _as_tokenizers(obj) -> tuple[Any, pathlib.Path | None, Any]:
    """(``tokenizers.Tokenizer`` or None, folder or None, transformers tokenizer or None)."""
    if isinstance(obj, (str, os.PathLike)):
        p = pathlib.Path(obj)
        if p.is_dir():
            f = p / "tokenizer.json"
            if not f.is_file():
                raise VocabularyError(f"{p} has no tokenizer.json (a fast Hugging Face tokenizer folder is needed)")
            return None, p, None
        if p.is_file():
            return None, p.parent, None
        raise VocabularyError(f"tokenizer path {p} does not exist")
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover
        Tokenizer = None
    if Tokenizer is not None and isinstance(obj, Tokenizer):
        return obj, None, None
    backend = getattr(obj, "backend_tokenizer", None) or getattr(obj, "_tokenizer", None)
    if Tokenizer is not None and isinstance(backend, Tokenizer):
        return backend, _folder_of(obj), obj
    if hasattr(obj, "convert_ids_to_tokens") and hasattr(obj, "encode"):
        return None, _folder_of(obj), obj
    raise VocabularyError(f"cannot read a vocabulary from {type(obj).__name__}: pass a transformers "
                          "tokenizer, a tokenizers.Tokenizer, a folder or a tokenizer.json path")


def _folder_of(hf) -> pathlib.Path | None:
    p = getattr(hf, "name_or_path", None)
    if p and pathlib.Path(p).is_dir():
        return pathlib.Path(p)
    return None


def _config_eos(folder: pathlib.Path | None, token_to_id) -> list[int]:
    """EOS ids named in ``tokenizer_config.json`` / ``generation_config.json`` / ``config.json``."""
    out: list[int] = []
    if folder is None:
        return out
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file():
        try:
            eos = json.loads(cfg.read_text("utf-8")).get("eos_token")
        except (OSError, ValueError) as e:
            raise VocabularyError(f"cannot read {cfg}: {e}") from e
        if isinstance(eos, dict):
            eos = eos.get("content")
        if isinstance(eos, str):
            i = token_to_id(eos)
            if i is not None:
                out.append(int(i))
    for name in ("generation_config.json", "config.json"):
        f = folder / name
        if f.is_file():
            try:
                e = json.loads(f.read_text("utf-8")).get("eos_token_id")
            except (OSError, ValueError):
                continue
            if isinstance(e, int):
                out.append(e)
            elif isinstance(e, list):
                out.extend(int(x) for x in e if isinstance(x, int))
    return out


def _has_dummy_prefix(js: str) -> bool:
    return '"Prepend"' in js or '"Metaspace"' in js or re.search(r'"add_prefix_space":\s*true', js) is not None


def _reusable(tok):
    """``tok`` if the encoder can use it as is (no dummy prefix to strip), else None (reparse)."""
    parts = [c.__getstate__().decode("utf-8", "replace") for c in (tok.normalizer, tok.pre_tokenizer)
             if c is not None]
    return None if any(_has_dummy_prefix(p) for p in parts) else tok


def _vocab_from_tokenizers(tok, *, folder, hf, vocab_size, name, encoder, extra_eos=()) -> VocabParts:
    kind = _kind_of(tok)
    model_vocab: dict[str, int] = tok.get_vocab(with_added_tokens=False)
    added = tok.get_added_tokens_decoder()
    entries: dict[int, bytes] = {}
    names: dict[int, str] = {}
    specials: set[int] = set()
    if kind == "bytelevel":
        tr = _bytelevel_translate()
        for s, i in model_vocab.items():
            t = s.translate(tr)
            try:
                entries[i] = t.encode("latin-1")
            except UnicodeEncodeError:
                entries[i] = s.encode("utf-8")
            names[i] = s
    elif kind == "spm":
        for s, i in model_vocab.items():
            entries[i] = _spm_bytes(s)
            names[i] = s
        unk = getattr(tok.model, "unk_token", None)
        if isinstance(unk, str) and unk in model_vocab:
            specials.add(model_vocab[unk])
        elif type(tok.model).__name__ == "Unigram":
            uid = json.loads(tok.model.__getstate__()).get("unk_id")
            if isinstance(uid, int):
                specials.add(uid)
    else:
        for s, i in model_vocab.items():
            entries[i] = s.encode("utf-8")
            names[i] = s
    for i, at in added.items():
        names[i] = at.content
        if at.special or at.content in EOG_TOKEN_NAMES:
            specials.add(i)
        else:
            entries[i] = at.content.encode("utf-8")
    eos: list[int] = list(extra_eos)
    if hf is not None and getattr(hf, "eos_token_id", None) is not None:
        e = hf.eos_token_id
        eos.extend(e if isinstance(e, list) else [e])
    eos.extend(_config_eos(folder, tok.token_to_id))
    eos.extend(i for i in specials if names.get(i) in EOG_TOKEN_NAMES)
    n = max(max(entries, default=-1), max(specials, default=-1)) + 1
    if hf is not None:
        try:
            n = max(n, len(hf))
        except TypeError:
            pass
    width = n
    while n > 0 and _PAD_RE.match(names.get(n - 1, "")):  # trailing [PADn] fillers are padding
        n -= 1
    if vocab_size is None and n < width:
        vocab_size = width
    return _assemble(entries, specials, names, eos, n_tokens=n, vocab_size=vocab_size, name=name, encoder=encoder)


def read_hf(tokenizer, *, vocab_size: int | None = None, name: str | None = None,
            eos_token_ids: Sequence[int] = ()) -> VocabParts:
    """The :class:`VocabParts` of :func:`structgate.tokenizers.from_hf` (same arguments and errors)."""
    tok, folder, hf = _as_tokenizers(tokenizer)
    if tok is None and hf is None:  # a path
        from tokenizers import Tokenizer

        path = folder / "tokenizer.json" if not str(tokenizer).endswith(".json") else pathlib.Path(tokenizer)
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises a bare Exception on bad JSON
            raise VocabularyError(f"cannot read tokenizer file {path}: {e}") from e
        tok.encode_special_tokens = True
        enc = _TokenizersEncoder(path=str(path), tokenizer=_reusable(tok))
        return _vocab_from_tokenizers(tok, folder=folder, hf=None, vocab_size=vocab_size,
                                      name=name or str(tokenizer), encoder=enc, extra_eos=eos_token_ids)
    if tok is None:  # slow transformers tokenizer
        return _from_slow_hf(hf, vocab_size=vocab_size, name=name, extra_eos=eos_token_ids)
    nm = name or (getattr(hf, "name_or_path", None) if hf is not None else None) or "tokenizer"
    return _vocab_from_tokenizers(tok, folder=folder, hf=hf, vocab_size=vocab_size, name=nm,
                                  encoder=_UserTokenizersEncoder(tok), extra_eos=eos_token_ids)


def _from_slow_hf(hf, *, vocab_size, name, extra_eos) -> VocabParts:
    sp = getattr(hf, "sp_model", None)
    if sp is None:
        raise VocabularyError(f"{type(hf).__name__} is a slow tokenizer without a SentencePiece model; "
                              "load it with use_fast=True")
    n = len(hf)
    entries, names, specials = {}, {}, set()
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        names[i] = piece
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i):
            specials.add(i)
        elif sp.is_byte(i):
            entries[i] = _spm_bytes(piece)
        else:
            entries[i] = piece.replace("\u2581", " ").encode("utf-8")
    for i, at in getattr(hf, "added_tokens_decoder", {}).items():
        names[i] = str(at)
        if getattr(at, "special", True):
            specials.add(i)
        else:
            entries[i] = str(at).encode("utf-8")
    eos = list(extra_eos)
    if hf.eos_token_id is not None:
        eos.append(hf.eos_token_id)
    eos.extend(i for i in specials if names.get(i) in EOG_TOKEN_NAMES)
    return _assemble(entries, specials, names, eos, n_tokens=n, vocab_size=vocab_size,
                     name=name or getattr(hf, "name_or_path", "tokenizer"), encoder=_HFCallEncoder(hf))
