"""JSON text read with one kind of error for every malformed input.

:func:`json.loads` raises :class:`json.JSONDecodeError` (with a position) for malformed text, but a
plain :class:`ValueError` for an integer longer than Python converts (``sys.get_int_max_str_digits()``,
4,300 digits by default: ``{"maxLength": 99...9}``), which callers catching ``JSONDecodeError``
let escape untyped. :func:`loads` turns that one into a ``JSONDecodeError`` at the integer's
position, so every caller's existing handler names the input and the place. The normal path is
:func:`json.loads` itself (no per-number hook).
"""
from __future__ import annotations

import json
import re
import sys
from typing import Any

__all__ = ["loads"]


def loads(text: str | bytes | bytearray) -> Any:
    """:func:`json.loads` of ``text``.

    Raises
    ------
    json.JSONDecodeError
        Malformed JSON, or an integer longer than ``sys.get_int_max_str_digits()`` digits
        (``msg`` says so; ``pos`` is where it starts).
    RecursionError
        Nesting deeper than the interpreter's recursion limit (as :func:`json.loads`).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as e:  # an integer past the int-to-text digit limit
        limit = sys.get_int_max_str_digits()
        if not limit or "integer string conversion" not in str(e):
            raise
        doc = text.decode("utf-8", "replace") if isinstance(text, (bytes, bytearray)) else text
        m = re.search(r"[0-9]{%d,}" % (limit + 1), doc)
        n = len(m.group(0)) if m else limit + 1
        raise json.JSONDecodeError(f"an integer of {n} digits (Python reads at most {limit})", doc,
                                   m.start() if m else 0) from None
