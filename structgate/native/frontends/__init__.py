"""Grammar front ends of the native engine: grammar text → :class:`structgate.native.ir.Grammar`.

* :func:`parse_gbnf` — llama.cpp's GBNF (``grammar_format="gbnf"``) and XGrammar's EBNF dialect
  (``grammar_format="ebnf"``), see :mod:`.gbnf`;
* :func:`parse_lark` — the Lark subset llguidance accepts (``grammar_format="lark"``), see :mod:`.lark`;
* :func:`parse_grammar` — dispatch on ``grammar_format``, or detect the dialect.

Every function returns a grammar on which :meth:`~structgate.native.ir.Grammar.check` has run (all
references resolve, no left recursion, the root produces a string). Errors are typed:
:class:`~structgate.errors.GrammarSyntaxError` (message names the rule, ``position`` is the 0-based
offset of the offending character in the grammar text, ``str(e)`` shows a caret) and
:class:`~structgate.errors.UnsupportedFeatureError` (``feature`` names the construct).
"""
from __future__ import annotations

import re

from ...errors import InvalidConstraintError
from ..ir import Grammar
from .gbnf import parse_gbnf
from .lark import parse_lark

__all__ = ["parse_gbnf", "parse_lark", "parse_grammar", "detect_grammar_format", "GRAMMAR_FORMATS"]

#: the accepted values of ``grammar_format`` (case-insensitive); ``None`` means "detect"
GRAMMAR_FORMATS = ("gbnf", "ebnf", "lark")

_EBNF_RULE_START = re.compile(r"^[ \t]*[A-Za-z0-9_.-]+[ \t]*::=", re.MULTILINE)


def detect_grammar_format(text: str) -> str:
    """``"ebnf"`` when a line of ``text`` starts with ``name ::=`` (GBNF / XGrammar EBNF), else ``"lark"``.

    A ``::=`` elsewhere (inside a Lark string literal, say) does not count. ``"ebnf"`` is returned
    rather than ``"gbnf"`` because XGrammar's newline-insensitive rule boundaries accept every
    rule layout llama.cpp accepts, with the same meaning (see :mod:`.gbnf`).
    """
    return "ebnf" if _EBNF_RULE_START.search(text) else "lark"


def parse_grammar(text: str, grammar_format: str | None = None) -> Grammar:
    """Parse a ``grammar`` constraint's text in the dialect ``grammar_format``.

    Parameters
    ----------
    text : str
        The grammar.
    grammar_format : {"gbnf", "ebnf", "lark", None}
        Case-insensitive. ``None`` detects the dialect with :func:`detect_grammar_format`.

    Returns
    -------
    Grammar
        Checked (:meth:`Grammar.check` has run). Root ``"root"`` for GBNF/EBNF; ``"start"`` for
        Lark (``"start'"`` when ``%ignore`` is used, see :mod:`.lark`).

    Raises
    ------
    InvalidConstraintError
        ``text`` is not a ``str``, or ``grammar_format`` is not one of the values above; or the
        grammar matches nothing.
    GrammarSyntaxError, UnsupportedFeatureError
        From the dialect's parser.
    """
    if not isinstance(text, str):
        raise InvalidConstraintError(f"a grammar must be a str, got {type(text).__name__}")
    fmt = detect_grammar_format(text) if grammar_format is None else str(grammar_format).lower()
    if fmt in ("gbnf", "ebnf"):
        return parse_gbnf(text, dialect=fmt)
    if fmt == "lark":
        return parse_lark(text)
    raise InvalidConstraintError(f"unknown grammar_format {grammar_format!r}; expected one of "
                                 f"{', '.join(GRAMMAR_FORMATS)} or None (detect)")
