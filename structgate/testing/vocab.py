"""A small synthetic byte-level vocabulary for conformance tests (no files, builds in milliseconds).

Layout of :func:`tiny_vocabulary` (``n_tokens`` = 256 + 3 specials + the multi-byte pieces):

* id 0 ``<s>`` (BOS) and id 1 ``</s>`` (EOS): special, no bytes; the last real id ``<|eot|>`` is a
  second special token that is *not* EOS (it must never be allowed);
* ids 2 .. 257: every single byte ``0x00 .. 0xFF`` (so every byte string is expressible, including
  lone UTF-8 lead/continuation bytes);
* then :data:`PIECES`: multi-byte tokens that cross JSON/regex structure boundaries (``'":'``,
  ``'},'``, ``' "'``), whole keywords (``true``, ``null``), multi-byte UTF-8 characters and
  *partial* UTF-8 sequences (a 3-byte character split 2+1), and digit runs;
* ``vocab_size`` = ``n_tokens + 13``: padded logits ids that must never be allowed (width not a
  multiple of 32 on purpose).

The encoder is greedy longest-match over bytes (not BPE): deterministic and enough to drive every
backend through the same tokens.
"""
from __future__ import annotations

from functools import lru_cache

from ..vocab import Vocabulary

__all__ = ["tiny_vocabulary", "PIECES", "greedy_encoder"]

#: multi-byte tokens of the tiny vocabulary (in id order after the 256 single bytes)
PIECES: tuple[bytes, ...] = tuple(p if isinstance(p, bytes) else p.encode() for p in (
    '{"', '"}', '":', '",', '","', '":"', '": ', '", "', '},', '}}', '{}', '[]', '["', '"]', '],', '[{',
    '}]', ', ', ': ', ' "', '  ', '\n', '\n  ', '    ', 'true', 'false', 'null', 'tr', 'ue', 'fa', 'lse',
    'nu', 'll', '00', '12', '123', '0.', '.5', 'e1', '-1', 'ab', 'abc', 'aa', 'ba', 'bc', 'xy', 'foo',
    'bar', 'name', 'age', 'id', 'type', 'value', 'hello', ' world', 'yes', 'no', 'red', 'green', 'blue',
    '\\"', '\\n', '\\u', '//', '://', 'http', 'é', 'ü', '中文', '😀', b'\xe4\xb8', b'\xad', b'\xf0\x9f',
    b'\x98\x80', 'a1', '1a', '"a', 'a"',
))


def greedy_encoder(token_bytes: tuple[bytes, ...], specials: frozenset[int]):
    """Text → ids by greedy longest match over the non-special tokens' bytes."""
    table: dict[bytes, int] = {}
    for i, b in enumerate(token_bytes):
        if b and i not in specials and b not in table:
            table[b] = i
    max_len = max(len(b) for b in table)

    def encode(text: str) -> list[int]:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        out, i = [], 0
        while i < len(data):
            for n in range(min(max_len, len(data) - i), 0, -1):
                t = table.get(data[i:i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
        return out

    return encode


@lru_cache(maxsize=None)
def tiny_vocabulary(padding: int = 13) -> Vocabulary:
    """The synthetic vocabulary described in this module's docstring.

    Parameters
    ----------
    padding : int, default: 13
        Extra logits ids beyond the tokenizer (``vocab_size = n_tokens + padding``).

    Returns
    -------
    Vocabulary
        EOS id 1, specials ``{0, 1, n_tokens-1}``, with a greedy encoder.
    """
    toks: list[bytes] = [b"", b""] + [bytes([b]) for b in range(256)] + list(PIECES) + [b""]
    names = ["<s>", "</s>"] + [repr(bytes([b]))[2:-1] for b in range(256)] + \
        [p.decode("utf-8", "backslashreplace") for p in PIECES] + ["<|eot|>"]
    specials = frozenset({0, 1, len(toks) - 1})
    return Vocabulary(tuple(toks), (1,), specials, len(toks) + padding, "tiny",
                      greedy_encoder(tuple(toks), specials), tuple(names))
