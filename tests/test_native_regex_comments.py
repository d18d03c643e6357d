"""``(?#...)`` comments are read as Python's ``re`` reads them (oracle ``re``): escapes inside a
comment are units (``\\)`` does not end it), and the parser's shared piece cache never sees a
comment's parentheses as the pattern's (a group cached with a wrong extent made a later compile of
a valid pattern fail, and a later invalid one compile)."""
from __future__ import annotations

import re

import pytest

from structgate import Constraint, get_backend
from structgate.errors import GrammarSyntaxError


@pytest.fixture(scope="module")
def native(llama3_vocab):
    return get_backend("native", llama3_vocab)


def _accepts(native, vocab, pattern: str, text: str) -> bool:
    m = native.compile(Constraint.regex(pattern)).matcher()
    return m.is_accepting() if not text else (m.advance(vocab.encode(text)) and m.is_accepting())


@pytest.mark.parametrize("pattern", [r"x(?#\)a(?#)y", r"x(?#a\)b)y", r"x(?#(a)y", r"(?:ab(?#(c)d)e", r"x(?#\\)y"])
def test_comment_ends_where_re_says(native, llama3_vocab, pattern):
    texts = ["xy", "xay", "xa", "x", "y", "abde", "abe", "ab", "e", "x\\y", ")y", "xby"]
    ok = 0
    for t in texts:
        expect = re.fullmatch(pattern, t) is not None
        assert _accepts(native, llama3_vocab, pattern, t) == expect, (pattern, t)
        ok += expect
    assert ok >= 1  # the pattern's language is exercised, not only refusals


def test_comment_parens_never_reach_the_piece_cache(native, llama3_vocab):
    # the comment is "(x": its first ")" ends it, so "defghijklmnop)" closes the (?: group
    core = "((?:abc(?#(x)defghijklmnop)q)"  # >= 64 characters with the tails: the piece cache is used
    for tail in ("z" * 40, "y" * 40):
        pat = core + tail
        assert re.compile(pat)
        text = "abcdefghijklmnopq" + tail
        assert _accepts(native, llama3_vocab, pat, text) == (re.fullmatch(pat, text) is not None) is True
    bad = "((?:abc(?#(x)defghijklmnop)q)r)" + "w" * 40
    with pytest.raises(re.error):
        re.compile(bad)
    with pytest.raises(GrammarSyntaxError):
        native.compile(Constraint.regex(bad))


@pytest.mark.parametrize("pattern", ["ab(?#)*", "ab(?#x)+c", "a(?#c){2}", "[a](?#c)?b", "a(?#)(?#)*", "a(?#c)*?b",
                                     "(?:ab)(?#)?c", "(?#x)(?i)abc", "(?#x)(?#y)(?s)a.c", "(?x)a (?#c) *b",
                                     "[ab](?#c)*x" + "z" * 64])
def test_quantifier_and_flags_around_comments_as_re(native, llama3_vocab, pattern):
    # found by a helper: a quantifier after a comment applies to the item before it (re skips the
    # comment), and global flags may follow leading comments; native refused both
    texts = ["", "a", "ab", "abb", "abbb", "abc", "aa", "b", "ABC", "abbc", "a\nc", "aab", "c", "x", "abx",
             "ab" + "z" * 64, "x" + "z" * 64, "aabx" + "z" * 64]
    ok = 0
    for t in texts:
        expect = re.fullmatch(pattern, t) is not None
        assert _accepts(native, llama3_vocab, pattern, t) == expect, (pattern, t)
        ok += expect
    assert ok >= 1


@pytest.mark.parametrize("pattern", ["a*(?#)*", "^(?#)*", "a(?#)+(?#)?", "a(?#x)(?i)b", "a(?#"])
def test_comment_does_not_hide_a_syntax_error(native, pattern):
    with pytest.raises(re.error):
        re.compile(pattern)
    with pytest.raises(GrammarSyntaxError):
        native.compile(Constraint.regex(pattern))


def test_quantifier_after_comment_with_the_class_piece_cached(native, llama3_vocab):
    # found by the CI run (order-dependent): once "[ab]" was in the parser's process-wide piece cache
    # (a >= 64-character pattern with the class unquantified), "[ab](?#c)*" took the cached piece
    # and then read its quantifier as a multiple repeat
    warm = "[ab]x" + "y" * 64
    assert _accepts(native, llama3_vocab, warm, "ax" + "y" * 64)
    pattern = "[ab](?#c)*x" + "z" * 64
    for text in ("x" + "z" * 64, "abbax" + "z" * 64, "cx" + "z" * 64):
        assert _accepts(native, llama3_vocab, pattern, text) == (re.fullmatch(pattern, text) is not None), text
