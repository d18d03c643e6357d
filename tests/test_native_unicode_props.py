"""Unicode property escapes ``\\p{..}`` / ``\\P{..}`` in regex constraints (General_Category).

Oracles:

* ``unicodedata.category`` per code point, with the General_Category aliases written out here from
  Unicode's ``PropertyValueAliases.txt`` (independently of the module's table): every property's
  ranges are checked at every range boundary, its neighbours and a stride over the code space;
* the ``regex`` module's ``fullmatch`` (its own Unicode tables) on strings of characters assigned
  since Unicode 6 or earlier, whose categories both tables agree on, through a real tokenizer;
* ``regex``'s ``partial=True`` for the token masks (a token allowed exactly when the text stays a
  viable prefix).
"""
from __future__ import annotations

import random
import unicodedata

import pytest
import regex

from structgate import Constraint, get_backend
from structgate.errors import GrammarSyntaxError, UnsupportedFeatureError
from structgate.native.regex.unicode_props import property_ranges
from _matching import accepts

# PropertyValueAliases.txt, gc: value -> categories
SPEC = {
    "Lu": ["Lu"], "Uppercase_Letter": ["Lu"], "Ll": ["Ll"], "Lowercase_Letter": ["Ll"], "Lt": ["Lt"],
    "Titlecase_Letter": ["Lt"], "Lm": ["Lm"], "Modifier_Letter": ["Lm"], "Lo": ["Lo"], "Other_Letter": ["Lo"],
    "L": ["Lu", "Ll", "Lt", "Lm", "Lo"], "Letter": ["Lu", "Ll", "Lt", "Lm", "Lo"],
    "LC": ["Lu", "Ll", "Lt"], "Cased_Letter": ["Lu", "Ll", "Lt"], "L&": ["Lu", "Ll", "Lt"],
    "M": ["Mn", "Mc", "Me"], "Mark": ["Mn", "Mc", "Me"], "Combining_Mark": ["Mn", "Mc", "Me"],
    "Mn": ["Mn"], "Nonspacing_Mark": ["Mn"], "Mc": ["Mc"], "Spacing_Mark": ["Mc"], "Me": ["Me"],
    "N": ["Nd", "Nl", "No"], "Number": ["Nd", "Nl", "No"], "Nd": ["Nd"], "Decimal_Number": ["Nd"],
    "digit": ["Nd"], "Nl": ["Nl"], "Letter_Number": ["Nl"], "No": ["No"], "Other_Number": ["No"],
    "P": ["Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"], "Punctuation": ["Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"],
    "punct": ["Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"], "Pc": ["Pc"], "Pd": ["Pd"], "Ps": ["Ps"],
    "Open_Punctuation": ["Ps"], "Pe": ["Pe"], "Pi": ["Pi"], "Pf": ["Pf"], "Po": ["Po"],
    "S": ["Sm", "Sc", "Sk", "So"], "Symbol": ["Sm", "Sc", "Sk", "So"], "Sm": ["Sm"], "Sc": ["Sc"],
    "Currency_Symbol": ["Sc"], "Sk": ["Sk"], "So": ["So"], "Z": ["Zs", "Zl", "Zp"],
    "Separator": ["Zs", "Zl", "Zp"], "Zs": ["Zs"], "Space_Separator": ["Zs"], "Zl": ["Zl"], "Zp": ["Zp"],
    "C": ["Cc", "Cf", "Cs", "Co", "Cn"], "Other": ["Cc", "Cf", "Cs", "Co", "Cn"], "Cc": ["Cc"],
    "Control": ["Cc"], "cntrl": ["Cc"], "Cf": ["Cf"], "Format": ["Cf"], "Cs": ["Cs"], "Co": ["Co"],
    "Private_Use": ["Co"], "Cn": ["Cn"], "Unassigned": ["Cn"],
}
# loose matching (UAX #44-LM3) and the gc= / General_Category= forms
SPELLINGS = [(n, n) for n in SPEC] + [
    ("uppercase letter", "Lu"), ("UPPERCASE-LETTER", "Lu"), ("lu", "Lu"), ("gc=Lu", "Lu"),
    ("General_Category=Decimal_Number", "Nd"), ("gc = L", "L"), ("general-category=punct", "P")]


def _members(ranges, cp):
    return any(lo <= cp <= hi for lo, hi in ranges)


@pytest.mark.parametrize("name,value", SPELLINGS, ids=[s[0] for s in SPELLINGS])
def test_property_ranges_match_unicodedata(name, value):
    ranges = property_ranges(name)
    want = set(SPEC[value])
    probes = set(range(0, 0x110000, 97))
    for lo, hi in ranges:
        probes.update((lo - 1, lo, lo + 1, hi - 1, hi, hi + 1))
    for cp in sorted(p for p in probes if 0 <= p <= 0x10FFFF):
        assert _members(ranges, cp) == (unicodedata.category(chr(cp)) in want), (name, hex(cp))
    # normalized: sorted, disjoint, not adjacent
    assert all(a[1] + 1 < b[0] for a, b in zip(ranges, ranges[1:]))


def test_any_ascii_assigned():
    assert property_ranges("Any") == ((0, 0x10FFFF),)
    assert property_ranges("ASCII") == ((0, 0x7F),)
    assigned = property_ranges("Assigned")
    for cp in list(range(0, 0x110000, 101)) + [0x378, 0x377, 0xE0000, 0x10FFFD, 0x10FFFF]:
        assert _members(assigned, cp) == (unicodedata.category(chr(cp)) != "Cn"), hex(cp)


# characters assigned by Unicode 6.0 or earlier, several of each category the patterns use
POOL = ("AZÉÖΩЖΣaeéöωжσǅǈ" "0129٣٤५" "ⅠⅫ½²" "!,._-([{)]}«»" "+<=>¬$€£^`" "©®°" " \u00a0\u2003" "\u0301\u0308"
        "日本語中" "\t\n" "ʰʲ")
PATTERNS = [r"\p{Lu}\p{Ll}+", r"[\p{L}\p{Nd}_]+", r"\P{L}+", r"\p{N}+", r"[^\p{L}\p{Z}]+", r"\pL\pM*",
            # \p{LC}, not \p{L&}: the regex module reads \p{L&} as every letter (Lm and Lo too), where
            # Unicode's alias, PCRE and Perl mean Lu | Ll | Lt (checked above against unicodedata)
            r"\p{Lt}|\p{Lm}+", r"[\P{L}a]+", r"\p{Sc}\p{Nd}+", r"\p{P}\p{S}?", r"\p{LC}+",
            r"\p{^Ll}+", r"[\p{Z}\p{Cc}]+"]


@pytest.fixture(scope="module")
def native(llama3_vocab):
    return get_backend("native", llama3_vocab)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_pattern_matches_regex_module(native, llama3_vocab, pattern):
    g = native.compile(Constraint("regex", pattern))
    rng = random.Random(pattern)
    texts = ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 6))) for _ in range(150)]
    # strings the pattern matches, made from its own matches, so both verdicts are exercised
    texts += [m for t in texts for m in regex.findall(pattern, t * 2)][:100]
    for t in texts:
        assert accepts(g, llama3_vocab, t) == bool(regex.fullmatch(pattern, t)), (pattern, t)


@pytest.mark.parametrize("pattern", [r"\p{Lu}\p{Ll}+", r"[\p{Nd}\p{Zs}]+x", r"\P{L}\p{N}"])
def test_masks_are_viable_prefixes(native, llama3_vocab, pattern):
    """Every token allowed from a few prefixes keeps the text a viable prefix of ``pattern``, and
    every token made of the pool's characters that does is allowed."""
    g = native.compile(Constraint("regex", pattern))
    toks = {}
    for tid, b in enumerate(llama3_vocab.token_bytes):
        try:
            s = b.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if s and all(c in POOL for c in s):
            toks[tid] = s
    prefixes = ["", "É", "É" + "ö", "٣", "½"]
    for pre in prefixes:
        if pre and not regex.fullmatch(pattern, pre, partial=True):
            continue
        m = g.matcher()
        assert m.advance(llama3_vocab.encode(pre)) if pre else True
        allowed = set(m.allowed_token_ids())
        for tid, s in toks.items():
            viable = bool(regex.fullmatch(pattern, pre + s, partial=True))
            assert (tid in allowed) == viable, (pattern, pre, s)


@pytest.mark.parametrize("pattern,feature", [
    (r"\p{Greek}", r"\p{Greek}"), (r"x\p{Script=Latin}", r"\p{Script=Latin}"), (r"\p{sc=Grek}", r"\p{sc=Grek}"),
    (r"\p{Alphabetic}", r"\p{Alphabetic}"), (r"[\p{InBasic_Latin}]", r"\p{InBasic_Latin}"), (r"\pX", r"\pX"),
    (r"\p{Lux}", r"\p{Lux}")])
def test_unknown_properties_are_typed_unsupported(native, pattern, feature):
    with pytest.raises(UnsupportedFeatureError) as ei:
        native.compile(Constraint("regex", pattern))
    assert feature in str(ei.value) and ei.value.position == pattern.index("\\p")


@pytest.mark.parametrize("pattern", [r"\p", r"a\p{", r"\p{}", r"[\P{"])
def test_malformed_property_escapes_are_syntax_errors(native, pattern):
    with pytest.raises(GrammarSyntaxError) as ei:
        native.compile(Constraint("regex", pattern))
    assert ei.value.position == pattern.index("\\")


@pytest.mark.parametrize("pattern", [r"(?i)\p{Lu}+", r"(?i)[\P{Lt}]", r"a(?i:\p{ASCII})", r"(?a)\p{L}", r"(?a:\p{Nd})",
                                     r"(?i)x\pL"])
def test_properties_under_i_and_a_flags_are_refused(native, pattern):
    """Under ``(?i)`` engines disagree (PCRE leaves ``\\p`` unaffected by caseless matching, the
    ``regex`` module reads ``(?i)\\p{Lu}`` as any cased letter, ECMAScript's ``/iu`` folds both
    sides), and ``(?a)`` limits ``\\p`` to ASCII in the ``regex`` module only: a typed refusal at the
    escape, not one engine's reading (a break-it helper found folded sets accepting what the
    ``regex`` module rejects, e.g. ``(?i)\\P{Lt}`` taking ``A``)."""
    with pytest.raises(UnsupportedFeatureError) as ei:
        native.compile(Constraint("regex", pattern))
    assert "flag" in str(ei.value) and ei.value.position == pattern.index("\\p" if "\\p" in pattern else "\\P")


@pytest.mark.parametrize("pattern", [r"(?a:x)\p{L}+", r"(?a:\d+)[\p{Nd}\p{Zs}]", r"(?i:a)\p{Lu}"])
def test_properties_after_a_scoped_flag_group_are_exact(native, llama3_vocab, pattern):
    """The ``a`` / ``i`` flag of a scoped group ``(?a:...)`` ends with the group: a ``\\p`` after it
    is read as everywhere else (it used to stay refused for the rest of the pattern)."""
    g = native.compile(Constraint("regex", pattern))
    rng = random.Random(pattern)
    texts = ["x" + "".join(rng.choice(POOL) for _ in range(rng.randint(0, 4))) for _ in range(100)]
    texts += ["xÉö", "7٣ ", "a" + "É", "AÉ", "12 "]
    for t in texts:
        assert accepts(g, llama3_vocab, t) == bool(regex.fullmatch(pattern, t)), (pattern, t)


@pytest.mark.parametrize("piece", [r"[\p{L}0123456789_]", r"[\p{L}0123456789_]+", r"(?:\p{L}abcdefghijklmn)"])
def test_a_flag_refusal_does_not_depend_on_the_piece_cache(piece):
    """The parser caches long classes and groups across patterns by their text and flags: a piece
    first parsed without ``(?a)`` must not be reused under it (the ``\\p`` inside was accepted under
    ``(?a)`` once the same text had been parsed without it)."""
    from structgate.native.regex.parser import parse_regex

    pad = "x" * 70  # long enough for the piece cache
    parse_regex(pad + piece)
    with pytest.raises(UnsupportedFeatureError, match="under the a flag"):
        parse_regex("(?a)" + pad + piece)


def test_the_a_flag_cannot_be_turned_off():
    """As Python's ``re`` ("cannot turn off flags 'a', 'u' and 'L'"): ``(?-a:...)`` used to turn
    the flag *on*."""
    from structgate.native.regex.parser import parse_regex

    for pattern in (r"(?-a:x)", r"(?i-a:x)"):
        with pytest.raises(GrammarSyntaxError, match="cannot turn off flag 'a'"):
            parse_regex(pattern)


@pytest.mark.parametrize("pattern", [r"(?a)\s", r"(?a:\s)", r"(?a)[\s]", r"(?a)\S", r"(?a)[^\s]", r"(?a:\s)\s"])
def test_a_flag_narrows_space_to_ascii(native, llama3_vocab, pattern):
    """Under ``(?a)`` ``\\s`` is ASCII whitespace, as Python's ``re.ASCII`` reads it (it kept the
    Unicode spaces: ``(?a)\\s`` took U+00A0, U+2028, U+3000, U+FEFF); ``\\d`` and ``\\w`` are ASCII
    already."""
    import re

    g = native.compile(Constraint("regex", pattern))
    for c in [" ", "\t", "\n", "\x0b", "\x0c", "\r", "\xa0", "\u2028", "\u3000", "\ufeff", "\u1680", "x"]:
        for t in (c, c + " ", c + "\u3000"):
            assert accepts(g, llama3_vocab, t) == bool(re.fullmatch(pattern, t)), (pattern, t)
