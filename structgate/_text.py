"""Lone surrogates: code points a Python ``str`` may hold that no UTF-8 text can.

A ``str`` can hold U+D800..U+DFFF on its own (JSON's ``"\\ud800"`` escape decodes to one; a command-line
argument's bytes that are not UTF-8 arrive as U+DC80..U+DCFF, Python's ``surrogateescape``). Such a
text has no UTF-8 bytes: no tokenizer can encode it, msgpack (vLLM's request channel) cannot carry it.
These helpers find one so that the caller can refuse the text naming where it is.
"""
from __future__ import annotations

import re

__all__ = ["lone_surrogate", "describe_lone_surrogate", "escape_lone_surrogates", "SPLIT_PAIR"]

_SURROGATE = re.compile("[\ud800-\udfff]")

#: a high surrogate code point followed by a low one, as two characters of a ``str``: no JSON text
#: decodes to it (the escapes of the pair read back as the one character they encode)
SPLIT_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def lone_surrogate(text: str) -> int | None:
    """Index (in characters) of the first lone surrogate of ``text``; None when it has none (then
    ``text.encode("utf-8")`` succeeds)."""
    m = _SURROGATE.search(text)
    return None if m is None else m.start()


def describe_lone_surrogate(text: str, i: int) -> str:
    """``a lone surrogate U+D800 at character 3`` for ``text[i]``; an argument byte that was not
    UTF-8 (``surrogateescape``'s U+DC80..U+DCFF) is named as that byte too."""
    cp = ord(text[i])
    byte = f" (byte {cp - 0xDC00:#04x}, not UTF-8?)" if 0xDC80 <= cp <= 0xDCFF else ""
    return f"a lone surrogate U+{cp:04X} at character {i}{byte}"


def escape_lone_surrogates(json_text: str) -> str:
    """``json_text`` (JSON written with ``ensure_ascii=False``, where a raw character can sit only
    inside a string) with each lone surrogate written as its ``\\uXXXX`` escape: the same JSON value,
    as UTF-8-encodable text. (Two adjacent escapes of a high and a low surrogate would read back as
    one character: a decoded JSON text never holds that pair as two characters.)"""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)
