"""Break-it findings (2026-12-06) in the native regex parser's case folding and the Lark front end:

* a three-digit octal escape outside a class (``(?i)\\141``) ignored ``(?i)``: ``A`` was rejected;
* ``(?a)`` with ``(?i)`` folded all of Unicode: ``(?ai)k`` took the Kelvin sign U+212A and
  ``(?ai)é`` took ``É``; Python's ``re`` folds ASCII letters only under ``re.ASCII``;
* Lark's empty group ``()`` (and ``[]``) was refused; in Lark it is the empty string.

Oracle: ``re.fullmatch`` on every (pattern, text) pair, through the native backend's token path."""
from __future__ import annotations

import re

import pytest

from _matching import accepts
from structgate import Constraint
from structgate.native.backend import NativeBackend

KELVIN, LONG_S, DOTTED_I = "\u212a", "\u017f", "\u0130"
PATTERNS = [
    r"(?i)\141", r"(?i:\141)b", r"(?i)(?:\141){2}", r"(?i)\351", r"(?i)[\141]", r"(?i)\x61",
    r"(?ai)k", r"(?ia)k", r"(?ai)s", r"(?ai)i", r"(?ai)é", r"(?ai)[a-z]+", r"(?ai)[^a-z]", r"(?ai)\w",
    r"(?a:(?i:k))y", r"(?i:(?a:k))y", r"(?i)k", r"(?i)s", r"(?i)[a-z]+", r"(?a)k",
]
TEXTS = ["a", "A", "ab", "Ab", "aA", "AA", "é", "É", "k", "K", KELVIN, "s", "S", LONG_S, "i", "I", DOTTED_I,
         "ky", "Ky", KELVIN + "y", "abc", "ABC", "a" + KELVIN]


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_case_folding_flags_match_python_re(backend, llama3_vocab, pattern):
    g = backend.compile(Constraint.regex(pattern))
    wrong = [t for t in TEXTS if accepts(g, llama3_vocab, t) != bool(re.fullmatch(pattern, t))]
    assert not wrong, f"native differs from re.fullmatch on {wrong!r}"


@pytest.mark.parametrize("grammar, regex", [
    ('start: "a" () "b"\n', r"a(?:)b"),
    ('start: "a" [] "b" ("c" | ())\n', r"a(?:)?b(?:c|)"),
    ('start: x+ "b"\nx: "a" ()\n', r"(?:a)+b"),
])
def test_lark_empty_groups_are_the_empty_string(backend, llama3_vocab, grammar, regex):
    g = backend.compile(Constraint.grammar(grammar))
    texts = ["ab", "abc", "aab", "b", "a", "ac", "abcc", "aaab"]
    wrong = [t for t in texts if accepts(g, llama3_vocab, t) != bool(re.fullmatch(regex, t))]
    assert not wrong, f"native differs from {regex!r} on {wrong!r}"


# -- the u flag: Python's default for str patterns, accepted as the no-op it is there ---------------
U_PATTERNS = [r"(?u)abc", r"(?u)[a-c]+", r"(?ui)é", r"(?iu)k", r"(?u)(?i)s", r"(?u:x)y", r"(?i:(?u:k))y",
              r"(?a)(?i)(?u:é)", r"(?ai)(?u:k)y", r"(?ai)(?u:é)|k", r"(?u)(?a:(?i:é))", r"(?a)(?u:\s)",
              r"(?#c)(?u)a|b", r"(?su)a.b", r"(?i)(?a:(?u-i:a))"]
U_TEXTS = TEXTS + ["xy", "ky", "\u2003", " ", "a\nb", "axb", "b", "ÉY"]


@pytest.mark.parametrize("pattern", U_PATTERNS)
def test_u_flag_is_accepted_as_python_reads_it(backend, llama3_vocab, pattern):
    re.compile(pattern)  # the oracle takes it
    g = backend.compile(Constraint.regex(pattern))
    wrong = [t for t in U_TEXTS if accepts(g, llama3_vocab, t) != bool(re.fullmatch(pattern, t))]
    assert not wrong, f"native differs from re.fullmatch on {wrong!r}"


@pytest.mark.parametrize("pattern", [r"(?-u:a)", r"(?u-u:a)", r"(?au)a", r"(?ua)a", r"(?u)(?a)x", r"(?a)(?u)x", r"a(?u)"])
def test_u_flag_misuse_is_refused_as_python_refuses_it(backend, pattern):
    from structgate.errors import GrammarSyntaxError

    with pytest.raises((re.error, ValueError)):  # the oracle refuses it
        re.compile(pattern)
    with pytest.raises(GrammarSyntaxError):
        backend.compile(Constraint.regex(pattern))
