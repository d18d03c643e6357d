"""The tokenizers bundled with the package (:data:`BUNDLED`), their fast-load token tables
(``vocab.npz``), and the format dispatch behind :func:`structgate.load_vocabulary` (a bundled name,
a folder, ``tokenizer.json``, ``.gguf``, ``.tiktoken``)."""
from __future__ import annotations

import gzip
import hashlib
import os
import pathlib
import tempfile
from typing import Any

import numpy as np

from ..errors import VocabularyError
from ._common import VocabParts
from .gguf import read_gguf
from .hf import _TokenizersEncoder, _reusable, _vocab_from_tokenizers, read_hf
from .tiktoken_bpe import read_tiktoken


_DATA = pathlib.Path(__file__).parent.parent / "data" / "tokenizers"


#: Tokenizers shipped as package data. ``kind`` says how :func:`load` reads ``path`` (relative to
#: ``structgate/data/tokenizers``).
BUNDLED: dict[str, dict[str, Any]] = {
    "llama3": {
        "description": "Llama 3 / 3.1 byte-level BPE, 128,256 tokens "
                       "(tokenizer.json, EOS <|eot_id|> + <|end_of_text|>)",
        "kind": "hf",
        "path": "llama3",
        "n_tokens": 128256,
    },
    "llama2": {
        "description": "Llama 2 SentencePiece BPE with byte fallback, 32,000 tokens (tokenizer.json, EOS </s>)",
        "kind": "hf",
        "path": "llama2",
        "n_tokens": 32000,
    },
    "cl100k": {
        "description": "tiktoken cl100k_base (GPT-3.5/GPT-4), 100,256 BPE ranks + 5 specials, width 100,277",
        "kind": "tiktoken",
        "path": "cl100k/cl100k_base.tiktoken.gz",
        "n_tokens": 100277,
    },
}


def _cache_root() -> pathlib.Path:
    env = os.environ.get("STRUCTGATE_CACHE_DIR")
    return pathlib.Path(env) if env else pathlib.Path.home() / ".cache" / "structgate"


def bundled_tokenizer_dir(name: str) -> pathlib.Path:
    """A folder with ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``
    of a bundled tokenizer, usable as ``transformers.AutoTokenizer.from_pretrained(folder)`` or as
    vLLM's ``tokenizer=`` argument.

    The package stores ``tokenizer.json`` gzipped; the first call unpacks the folder under
    ``$STRUCTGATE_CACHE_DIR`` (default ``~/.cache/structgate``)``/tokenizers/<name>-<hash>/``
    (falling back to the system temp dir if that is not writable). Later calls return it as is.

    Raises
    ------
    VocabularyError
        Unknown name or a bundled tokenizer that is not a Hugging Face folder (``cl100k``).
    """
    spec = BUNDLED.get(name)
    if spec is None:
        raise VocabularyError(f"no bundled tokenizer named {name!r}; bundled: {', '.join(sorted(BUNDLED))}")
    if spec["kind"] != "hf":
        raise VocabularyError(f"bundled tokenizer {name!r} is a {spec['kind']} file, not a Hugging Face folder")
    src = _DATA / spec["path"]
    if (src / "tokenizer.json").is_file():
        return src
    gz = src / "tokenizer.json.gz"
    if not gz.is_file():
        raise VocabularyError(f"bundled tokenizer {name!r} is missing its data ({gz}); reinstall structgate")
    digest = hashlib.sha256(gz.read_bytes()).hexdigest()[:12]
    for root in (_cache_root(), pathlib.Path(tempfile.gettempdir()) / f"structgate-{os.getuid()}"):
        dest = root / "tokenizers" / f"{name}-{digest}"
        if (dest / "tokenizer.json").is_file():
            return dest
        try:
            dest.mkdir(parents=True, exist_ok=True)
            for f in src.iterdir():
                if f.is_file() and f.name not in ("tokenizer.json.gz", _COMPACT):
                    _atomic_write(dest / f.name, f.read_bytes())
            _atomic_write(dest / "tokenizer.json", gzip.decompress(gz.read_bytes()))
            return dest
        except OSError:
            continue
    raise VocabularyError(f"cannot unpack bundled tokenizer {name!r}: no writable cache directory "
                          f"(set STRUCTGATE_CACHE_DIR)")


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _load_bundled(name: str, vocab_size: int | None) -> VocabParts:
    spec = BUNDLED[name]
    src = _DATA / spec["path"]
    if spec["kind"] == "tiktoken":
        if not src.is_file():
            raise VocabularyError(f"bundled tokenizer {name!r} is missing its data ({src}); reinstall structgate")
        return read_tiktoken(src, vocab_size=vocab_size)._replace(name=name)
    from tokenizers import Tokenizer

    plain, gz = src / "tokenizer.json", src / "tokenizer.json.gz"
    compact = src / _COMPACT
    if compact.is_file() and (plain.is_file() or gz.is_file()):
        enc = (_TokenizersEncoder(path=str(plain)) if plain.is_file()
               else _TokenizersEncoder(path=str(gz), gz=True))
        v = _load_compact(compact, name=name, encoder=enc)
        if v is not None:
            return v if vocab_size is None else v._replace(vocab_size=vocab_size)
    if plain.is_file():
        tok = Tokenizer.from_file(str(plain))
        enc = _TokenizersEncoder(path=str(plain), tokenizer=_reusable(tok))
    elif gz.is_file():
        tok = Tokenizer.from_str(gzip.decompress(gz.read_bytes()).decode("utf-8"))
        enc = _TokenizersEncoder(path=str(gz), gz=True, tokenizer=_reusable(tok))
    else:
        raise VocabularyError(f"bundled tokenizer {name!r} is missing its data ({gz}); reinstall structgate")
    tok.encode_special_tokens = True
    return _vocab_from_tokenizers(tok, folder=src, hf=None, vocab_size=vocab_size, name=name, encoder=enc)


#: precomputed token bytes of a bundled Hugging Face tokenizer (written by
#: ``scripts/make_bundled_tokenizers.py``; a test checks it equals what ``from_hf`` derives)
_COMPACT = "vocab.npz"
_COMPACT_VERSION = 1


def save_compact(v, path) -> None:
    """Write ``v``'s token bytes, names, special / EOS ids and width to an ``.npz`` file that
    :func:`load` reads ~5x faster than parsing a 128k-token ``tokenizer.json``."""
    tb = v.token_bytes
    offsets = np.zeros(len(tb) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in tb], out=offsets[1:])
    names = v.token_names or ("",) * len(tb)
    noff = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum([len(n) for n in names], out=noff[1:])
    arrays = dict(
        version=np.int64(_COMPACT_VERSION), vocab_size=np.int64(v.vocab_size),
        blob=np.frombuffer(b"".join(tb), dtype=np.uint8), offsets=offsets,
        names=np.frombuffer("".join(names).encode("utf-8"), dtype=np.uint8), name_offsets=noff,
        eos=np.asarray(v.eos_token_ids, dtype=np.int64),
        special=np.asarray(sorted(v.special_token_ids), dtype=np.int64))
    import io
    import zipfile

    # an .npz written entry by entry with a fixed timestamp, so rebuilds are byte-identical
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for key, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue(), compresslevel=9)


def _load_compact(path, *, name: str, encoder) -> VocabParts | None:
    """The vocabulary stored by :func:`save_compact`, or None if the file is of another version."""
    try:
        with np.load(path) as z:
            if int(z["version"]) != _COMPACT_VERSION:
                return None
            blob = z["blob"].tobytes()
            off = z["offsets"].tolist()
            names = z["names"].tobytes().decode("utf-8")
            noff = z["name_offsets"].tolist()
            eos = z["eos"].tolist()
            special = z["special"].tolist()
            width = int(z["vocab_size"])
    except (OSError, KeyError, ValueError) as e:
        raise VocabularyError(f"corrupt bundled vocabulary file {path}: {e}") from e
    tb = [blob[a:b] for a, b in zip(off, off[1:])]
    tn = [names[a:b] for a, b in zip(noff, noff[1:])]
    return VocabParts(tuple(tb), tuple(eos), frozenset(special), width, name, encoder, tuple(tn))


def spec_key(spec) -> tuple:
    """The cache key of a vocabulary spec (a bundled name or a path): ``("bundled", name)`` or
    ``("path", resolved path, size, mtime_ns)``, so a file changed on disk is read again.

    Raises
    ------
    VocabularyError
        Not a name or path, or neither a bundled name nor an existing path (the message lists the
        bundled names).
    """
    if not isinstance(spec, (str, os.PathLike)):
        raise VocabularyError(f"vocabulary spec must be a name or a path, not {type(spec).__name__}")
    s = os.fspath(spec)
    if s in BUNDLED:
        return ("bundled", s)
    p = pathlib.Path(s).expanduser()
    if not p.exists():
        raise VocabularyError(f"unknown vocabulary {s!r}: not a bundled tokenizer "
                              f"({', '.join(sorted(BUNDLED))}) and no such file or folder")
    st = p.stat()
    return ("path", str(p.resolve()), st.st_size, st.st_mtime_ns)


def read_spec(s: str) -> VocabParts:
    """The :class:`VocabParts` of a vocabulary spec (a bundled name or a path; see
    :func:`structgate.vocab.load_vocabulary`), not cached."""
    if s in BUNDLED:
        return _load_bundled(s, None)
    p = pathlib.Path(s).expanduser()
    name = p.name.lower()
    if p.is_dir():
        if (p / "tokenizer.json").is_file():
            return read_hf(p, name=s)
        ggufs = sorted(p.glob("*.gguf"))
        if len(ggufs) == 1:
            return read_gguf(ggufs[0])
        raise VocabularyError(f"folder {p} has no tokenizer.json" + (f" and {len(ggufs)} .gguf files" if ggufs else ""))
    if name.endswith(".json"):
        return read_hf(p, name=s)
    if name.endswith(".gguf") or name.endswith(".gguf.gz"):
        return read_gguf(p)
    if name.endswith(".tiktoken") or name.endswith(".tiktoken.gz"):
        return read_tiktoken(p)
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return read_gguf(p)
    raise VocabularyError(f"cannot tell the tokenizer format of {p}: expected a folder with tokenizer.json, "
                          f"a .json, .gguf or .tiktoken file, or a bundled name ({', '.join(sorted(BUNDLED))})")
