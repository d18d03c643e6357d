"""structgate's native regex compiler: regex text → AST → UTF-8 byte-range Thompson NFA →
minimal dense byte DFA (:class:`structgate.native.automaton.DFA`).

>>> from structgate.native.regex import compile_regex
>>> dfa = compile_regex(r"[😀-🙏]+")
>>> dfa.matches("😨😍".encode()), dfa.matches(b"a")
(True, False)

The DFA accepts exactly the UTF-8 encodings of the strings the pattern *fully* matches (Python's
``re.fullmatch``), in the dialect documented in :mod:`structgate.native.regex.parser`
(ECMAScript-style ASCII ``\\d \\w``, ECMAScript ``\\s``, negated classes over all of Unicode).

Modules: :mod:`.parser` (AST + iterative parser), :mod:`.utf8` (code-point ranges → byte-range
sequences), :mod:`.nfa` (Thompson NFA), :mod:`.dfa` (subset construction, pruning, Moore
minimisation, canonical numbering).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ...errors import CompileLimitError
from ..automaton import DFA
from .dfa import canonicalize, minimize, nfa_to_dfa
from .nfa import NFA, build_nfa
from .parser import Alt, Anchor, Chars, Concat, Node, Repeat, ast_size, parse_regex
from .utf8 import utf8_sequences

__all__ = ["compile_regex", "compile_ast", "parse_regex", "RegexOptions", "build_nfa", "nfa_to_dfa", "ast_size",
           "utf8_sequences", "Node", "Chars", "Concat", "Alt", "Repeat", "Anchor", "NFA",
           "minimize", "canonicalize"]


@dataclass(frozen=True)
class RegexOptions:
    """Limits and switches of the native regex compiler.

    Attributes
    ----------
    max_states : int
        Cap on DFA states during determinisation (before minimisation);
        exceeding it raises ``CompileLimitError("max_dfa_states", reached, max_states)``.
    max_nfa_states : int
        Cap on NFA states (``CompileLimitError("max_nfa_states", ...)``), checked on an estimate
        before building, so ``a{1000000}`` fails at once.
    timeout_s : float
        Wall-clock limit of determinisation, seconds; ``<= 0`` disables
        (``CompileLimitError("compile_timeout_s", ...)``).
    minimize : bool
        Minimise the DFA (default True).
    """

    max_states: int = 50_000
    max_nfa_states: int = 2_000_000
    timeout_s: float = 0.0
    minimize: bool = True


def compile_ast(node: Node, *, options: RegexOptions | None = None, pattern: str = "") -> DFA:
    """Minimal byte DFA for an AST (from :func:`parse_regex`, or built by hand / by the
    JSON-Schema compiler).

    Parameters
    ----------
    node : Node
        ``Chars`` / ``Concat`` / ``Alt`` / ``Repeat`` / ``Anchor`` tree (any depth).
    options : RegexOptions | None
        Limits; defaults to ``RegexOptions()``.
    pattern : str
        Stored in ``DFA.pattern``.

    Returns
    -------
    dfa : DFA
        State 0 dead, 1 start, every other state live, minimal, canonically numbered.

    Raises
    ------
    CompileLimitError
        ``max_nfa_states`` / ``max_dfa_states`` / ``compile_timeout_s`` exceeded.
    """
    opts = options or RegexOptions()
    est = ast_size(node)
    if est > opts.max_nfa_states:
        raise CompileLimitError("max_nfa_states", est, opts.max_nfa_states,
                                "the pattern (after expanding counted repeats) is too large")
    deadline = time.monotonic() + opts.timeout_s if opts.timeout_s > 0 else None
    nfa = build_nfa(node, max_states=opts.max_nfa_states)
    return nfa_to_dfa(nfa, max_states=opts.max_states, pattern=pattern, minimize_dfa=opts.minimize,
                      deadline=deadline, timeout_s=opts.timeout_s)


def compile_regex(pattern: str, *, max_states: int = 50_000, where: str | None = None,
                  options: RegexOptions | None = None) -> DFA:
    """Compile ``pattern`` into a minimal byte DFA accepting exactly the UTF-8 encodings of the
    strings it fully matches.

    Parameters
    ----------
    pattern : str
        Regex text in the dialect of :mod:`structgate.native.regex.parser`.
    max_states : int, default: 50_000
        Cap on DFA states (ignored when ``options`` is given: ``options.max_states`` applies).
    where : str | None
        Origin of the pattern (e.g. a JSON pointer ``/properties/x/pattern``) for error messages.
    options : RegexOptions | None
        Full set of limits.

    Returns
    -------
    dfa : DFA
        See :func:`compile_ast`.

    Raises
    ------
    GrammarSyntaxError
        Invalid pattern (``.position`` = 0-based offset of the error, ``.where`` = ``where``).
    UnsupportedFeatureError
        Backreferences, lookaround, ``\\b``, ``\\p{..}``, ... (``.where`` names the position).
    CompileLimitError
        ``max_dfa_states`` (given = states reached), ``max_nfa_states``, ``compile_timeout_s``.
    """
    if options is None:
        options = RegexOptions(max_states=max_states)
    node = parse_regex(pattern, where=where)
    try:
        return compile_ast(node, options=options, pattern=pattern)
    except CompileLimitError as e:
        if where and "in " + where not in str(e):
            e.args = (f"{e.args[0]} (regex in {where})",)
        raise
