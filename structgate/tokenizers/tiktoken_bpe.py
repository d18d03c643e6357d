"""tiktoken ``.tiktoken`` BPE rank files (``<base64 bytes> <rank>`` per line): token bytes, the
OpenAI families' special tokens and pre-tokenizer regexes, and an offline ``tiktoken`` encoder."""
from __future__ import annotations

import base64
import gzip
import pathlib
import threading
from typing import Mapping

from ..errors import VocabularyError
from ._common import VocabParts, _assemble, bytes_to_unicode


#: tiktoken ``pat_str`` / special tokens, as in ``tiktoken_ext/openai_public.py`` (tiktoken 0.14)
CL100K_PAT = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
              r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")


_CL100K_SPECIALS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                    "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}


_O200K_PAT = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])


_O200K_SPECIALS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


_R50K_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


class _TiktokenEncoder:
    """``tiktoken.Encoding.encode_ordinary`` over a local ranks file (no network)."""

    def __init__(self, path: str, gz: bool, pat_str: str, specials: Mapping[str, int], name: str):
        self._args = (path, gz, pat_str, dict(specials), name)
        self._enc = None
        self._lock = threading.Lock()

    def _get(self):
        if self._enc is None:
            with self._lock:
                if self._enc is None:
                    import tiktoken

                    path, gz, pat, specials, name = self._args
                    ranks = _read_tiktoken_ranks(path, gz)
                    self._enc = tiktoken.Encoding(name, pat_str=pat, mergeable_ranks=ranks, special_tokens=specials)
        return self._enc

    def __call__(self, text: str) -> list[int]:
        return self._get().encode_ordinary(text)

    def __getstate__(self):
        return {"_args": self._args}

    def __setstate__(self, st):
        self._args = st["_args"]
        self._enc = None
        self._lock = threading.Lock()


def _read_tiktoken_ranks(path, gz: bool = False) -> dict[bytes, int]:
    p = pathlib.Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise VocabularyError(f"tiktoken file {p} does not exist") from None
    except OSError as e:
        raise VocabularyError(f"cannot read tiktoken file {p}: {e}") from e
    if gz or raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    ranks: dict[bytes, int] = {}
    b64 = base64.b64decode
    for ln, line in enumerate(raw.splitlines(), 1):
        if not line:
            continue
        try:
            tok, rank = line.split()
            ranks[b64(tok, validate=True)] = int(rank)
        except ValueError as e:
            raise VocabularyError(f"{p}:{ln}: not a tiktoken rank line (expected '<base64> <rank>'): "
                                  f"{line[:60]!r}") from e
    if not ranks:
        raise VocabularyError(f"tiktoken file {p} is empty")
    return ranks


def read_tiktoken(path, *, vocab_size: int | None = None, special_tokens: Mapping[str, int] | None = None,
                  pat_str: str | None = None, eos_token: str = "<|endoftext|>") -> VocabParts:
    """The :class:`VocabParts` of :func:`structgate.tokenizers.from_tiktoken` (same arguments and errors)."""
    p = pathlib.Path(path)
    gz = p.suffix == ".gz"
    ranks = _read_tiktoken_ranks(p, gz)
    stem = p.name.lower()
    family = next((f for f in ("cl100k", "o200k", "r50k", "p50k", "gpt2") if f in stem), None)
    if special_tokens is None:
        if family == "cl100k":
            special_tokens = dict(_CL100K_SPECIALS)
        elif family == "o200k":
            special_tokens = dict(_O200K_SPECIALS)
        else:
            special_tokens = {"<|endoftext|>": max(ranks.values()) + 1}
    if pat_str is None:
        pat_str = {"o200k": _O200K_PAT, "r50k": _R50K_PAT, "p50k": _R50K_PAT, "gpt2": _R50K_PAT}.get(family, CL100K_PAT)
    if eos_token not in special_tokens:
        raise VocabularyError(f"EOS token {eos_token!r} is not among the special tokens {sorted(special_tokens)}")
    entries = {r: b for b, r in ranks.items()}
    specials = set(special_tokens.values())
    b2u = bytes_to_unicode()
    table = "".join(b2u[i] for i in range(256))
    # display names in the byte-level convention of HF files ("Ġworld"), like Llama 3's
    names = {r: b.decode("latin-1").translate(table) for b, r in ranks.items()}
    names.update({i: s for s, i in special_tokens.items()})
    eos = [special_tokens[eos_token]]
    name = p.name.split(".")[0]
    enc = _TiktokenEncoder(str(p), gz, pat_str, special_tokens, name)
    return _assemble(entries, specials, names, eos, n_tokens=None, vocab_size=vocab_size, name=str(p), encoder=enc)
