"""Grammar front ends of the native engine (GBNF / XGrammar EBNF / Lark → grammar IR).

Oracles:

* ``tests/_ir_reference.py``: an Earley recogniser over the IR (itself checked against Python
  ``re`` by brute force below);
* structgate-xgrammar for GBNF/EBNF and structgate-llguidance for Lark: the same verdict *and* the
  same longest viable prefix on hand-written strings, on random sentences of each grammar and on
  random edits of them (bytes fed one token each on the synthetic vocabulary);
* the ``lark`` library for the ``%import common`` terminals and for the documented differences
  between a scannerless grammar and a lexer;
* the native engine end to end (verdicts and masks, with :func:`structgate.diff.diff_masks`).
"""
from __future__ import annotations

import itertools
import json
import pathlib
import random
import re

import pytest

from _ir_reference import Reference, mutate
from structgate import Constraint, get_backend
from structgate.backends.registry import get_backend_spec
from structgate.diff import diff_masks
from structgate.errors import GrammarSyntaxError, InvalidConstraintError, UnsupportedFeatureError
from structgate.native.frontends import detect_grammar_format, parse_gbnf, parse_grammar, parse_lark
from structgate.native.frontends.lark import COMMON_TERMINALS
from structgate.native.ir import Grammar
from structgate.testing import tiny_vocabulary

DATA = pathlib.Path(__file__).parent / "data" / "grammars"
GBNF_FILES = sorted(p.name for p in (DATA / "gbnf").glob("*.gbnf"))
LARK_FILES = sorted(p.name for p in (DATA / "lark").glob("*.lark"))


def _installed(name: str) -> bool:
    return get_backend_spec(name).availability()[0]


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


@pytest.fixture(scope="module")
def xgr(vocab):
    if not _installed("structgate-xgrammar"):
        pytest.skip("xgrammar not installed")
    return get_backend("structgate-xgrammar", vocab)


@pytest.fixture(scope="module")
def llg(vocab):
    if not _installed("structgate-llguidance"):
        pytest.skip("llguidance not installed")
    return get_backend("structgate-llguidance", vocab)


@pytest.fixture(scope="module")
def native(vocab):
    b = get_backend("native", vocab)
    assert "grammar" in b.supported_kinds
    return b


def engine_run(compiled, text: str) -> tuple[bool, int]:
    """(accepted, longest viable prefix in code points), feeding one byte token at a time (the
    synthetic vocabulary has id 2 + b for byte b)."""
    m = compiled.matcher()
    data = text.encode()
    for i, b in enumerate(data):
        if not m.advance([2 + b]):
            return False, len(data[:i].decode("utf-8", "ignore"))
    return m.is_accepting(), len(text)


def gbnf_text(name: str) -> str:
    return (DATA / "gbnf" / name).read_text()


def lark_text(name: str) -> str:
    return (DATA / "lark" / name).read_text()


# -- the reference itself ---------------------------------------------------------------------------
def test_reference_agrees_with_python_re_by_brute_force():
    g = parse_gbnf('root ::= ("ab" | [c-e]{2,3})* "x"? (a | "")\na ::= "b" a?\n')
    ref = Reference(g)
    pat = re.compile(r"(?:ab|[c-e]{2,3})*x?b*")
    n_acc = 0
    for n in range(7):
        for tup in itertools.product("abcdx", repeat=n):
            s = "".join(tup)
            ok, viable = ref.run(s)
            assert ok == bool(pat.fullmatch(s)), s
            n_acc += ok
            # viable prefix: the longest prefix that some sentence extends
            assert viable == max(k for k in range(len(s) + 1)
                                 if any(pat.fullmatch(s[:k] + t) for t in ("", "b", "x", "c", "cc", "ab", "bb"))
                                 or k == 0), s
    assert n_acc > 100


# -- GBNF: every llama.cpp file ---------------------------------------------------------------------
#: hand-written strings, valid and invalid, per grammar file (also driven through ``structgate diff``
#: by bench/grammar_diff.py); each label is checked against the reference below
_HAND_JSON = json.loads((DATA / "hand_written.json").read_text(encoding="utf-8"))
HAND = {k: (v["valid"], v["invalid"]) for k, v in _HAND_JSON.items() if k.endswith(".gbnf")}


def test_every_llama_cpp_file_is_covered():
    assert set(GBNF_FILES) == set(HAND) and len(GBNF_FILES) == 8


@pytest.mark.parametrize("name", GBNF_FILES)
def test_gbnf_files_parse_the_same_in_both_dialects(name):
    text = gbnf_text(name)
    a, b, c = parse_gbnf(text), parse_gbnf(text, dialect="ebnf"), parse_grammar(text)
    assert isinstance(a, Grammar) and a.root == "root"
    assert a.rules == b.rules == c.rules
    assert detect_grammar_format(text) == "ebnf"


@pytest.mark.engines
@pytest.mark.parametrize("name", GBNF_FILES)
def test_gbnf_hand_written_strings(name, xgr, native):
    text = gbnf_text(name)
    ref = Reference(parse_gbnf(text))
    gx = xgr.compile(Constraint.grammar(text, "ebnf"))
    gn = native.compile(Constraint.grammar(text, "gbnf"))
    good, bad = HAND[name]
    for s, want in [(s, True) for s in good] + [(s, False) for s in bad]:
        r = ref.run(s)
        assert r[0] is want, (name, s)
        assert engine_run(gx, s) == r, ("xgrammar", name, s)
        assert engine_run(gn, s) == r, ("native", name, s)


def _random_cases(ref: Reference, seed: int, n: int, fixed=None, avoid=frozenset(), alphabet=None, keep=""):
    rng = random.Random(seed)
    if alphabet is None:
        alphabet = sorted({c for _ in range(30) for c in ref.sample(rng, fixed=fixed, avoid=avoid)}
                          | set(' x"{[1\n'))
    out = []
    while len(out) < 3 * n:
        s = ref.sample(rng, max_depth=10, fixed=fixed, avoid=avoid)
        if len(s) > 250:
            continue
        once = mutate(rng, s, alphabet, keep)
        out += [s, once, mutate(rng, once, alphabet, keep)]
    return out


@pytest.mark.engines
@pytest.mark.parametrize("name", GBNF_FILES)
def test_gbnf_random_walks_agree_with_xgrammar_and_native(name, xgr, native):
    text = gbnf_text(name)
    ref = Reference(parse_gbnf(text))
    gx = xgr.compile(Constraint.grammar(text, "ebnf"))
    gn = native.compile(Constraint.grammar(text))
    verdicts = []
    for s in _random_cases(ref, seed=sum(map(ord, name)), n=60):
        r = ref.run(s)
        verdicts.append(r[0])
        assert engine_run(gx, s) == r, ("xgrammar", name, s)
        assert engine_run(gn, s) == r, ("native", name, s)
    assert 0 < sum(verdicts) < len(verdicts)  # both verdicts exercised


@pytest.mark.engines
@pytest.mark.parametrize("name", ["json.gbnf", "c.gbnf", "chess.gbnf", "arithmetic.gbnf"])
def test_gbnf_masks_same_as_xgrammar(name, vocab, xgr, native):
    text = gbnf_text(name)
    ref = Reference(parse_gbnf(text))
    compiled = {"native": native.compile(Constraint.grammar(text, "gbnf")),
                "structgate-xgrammar": xgr.compile(Constraint.grammar(text, "ebnf"))}
    rng = random.Random(7)
    done = 0
    while done < 4:
        s = ref.sample(rng, max_depth=10)
        if not 10 <= len(s) <= 200:
            continue
        done += 1
        rep = diff_masks(list(compiled), vocab, Constraint.grammar(text, "gbnf"), text=s, compiled=compiled)
        assert rep.ok and rep.stopped is None, (s, [d.as_dict() for d in rep.disagreements[:3]])
        assert rep.accepting == {"native": True, "structgate-xgrammar": True}


# -- nesting 40 deep --------------------------------------------------------------------------------
def _nested(depth: int) -> list[tuple[str, bool]]:
    """JSON texts nested ``depth`` deep (json.gbnf's root is an object: arrays go inside one), with
    their verdict; the verdict is json.loads's (checked in :func:`test_nested_texts_follow_json_loads`)."""
    arr = '{"a":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    obj = '{"a":' * depth + "1" + "}" * depth
    mixed = '{"k":[' * (depth // 2) + "1" + "]}" * (depth // 2)
    spaced = '{"k": [' * (depth // 2) + "-7" + "]}" * (depth // 2)
    return [(arr, True), (obj, True), (mixed, True), (spaced, True), (obj[:-1], False), (arr[:-2] + "}", False),
            (obj + "}", False), (obj[:-1] + "]", False), (mixed[:-2] + "}]", False), (spaced.replace("]}", "}]", 1), False)]


def _json_ok(s: str) -> bool:
    try:
        json.loads(s)
        return True
    except ValueError:
        return False


def _depth(s: str) -> int:
    d = m = 0
    for c in s:
        d += c in "[{"
        d -= c in "]}"
        m = max(m, d)
    return m


def test_nested_texts_follow_json_loads():
    for depth in (40, 41, 64):
        cases = _nested(depth)
        assert max(_depth(s) for s, _ in cases) == depth
        for s, want in cases:
            assert _json_ok(s) is want, s


@pytest.mark.engines
@pytest.mark.parametrize("depth", [40, 64])
def test_nesting_40_deep_gbnf(xgr, native, depth):
    """json.gbnf nested 40 (and 64) deep: native's verdict and longest viable prefix equal
    XGrammar's and the reference's; every verdict is json.loads's (all texts are objects of
    integers, inside json.gbnf's subset)."""
    text = gbnf_text("json.gbnf")
    ref = Reference(parse_gbnf(text))
    gx = xgr.compile(Constraint.grammar(text, "ebnf"))
    gn = native.compile(Constraint.grammar(text, "gbnf"))
    for s, want in _nested(depth):
        r = ref.run(s)
        assert r[0] is want is _json_ok(s), s
        assert engine_run(gx, s) == r == engine_run(gn, s), s


@pytest.mark.engines
@pytest.mark.parametrize("depth", [40, 64])
def test_nesting_40_deep_lark(llg, native, depth):
    text = lark_text("json.lark")
    ref = Reference(parse_lark(text))
    gl = llg.compile(Constraint.grammar(text, "lark"))
    gn = native.compile(Constraint.grammar(text, "lark"))
    for s, want in _nested(depth):
        r = ref.run(s)
        assert r[0] is want is _json_ok(s), s
        assert engine_run(gl, s) == r == engine_run(gn, s), s
    for s in ("[" * depth + "]" * depth, "[" * depth + "]" * (depth - 1), "[" * depth + "]" * (depth + 1)):
        assert engine_run(gn, s)[0] is _json_ok(s) is engine_run(gl, s)[0], s


# -- GBNF syntax details ------------------------------------------------------------------------------
@pytest.mark.engines
@pytest.mark.parametrize("body,good,bad,in_xgrammar", [
    (r'"\x41\u00e9\U0001F600\n\t\r\\\""', ["Aé😀\n\t\r\\\""], ["A"], True),
    (r'"\[\]"', ["[]"], ["\\[\\]"], False),  # llama.cpp's \[ \] in literals; XGrammar refuses them
    (r"[\-a\]] [^\x00-\x40]", ["-A", "]é", "aZ"], ["a-", "a "], True),
    (r"[a-] [\x5d]", ["-]", "a]"], ["b]"], True),
    (r'"ab"{2} "c"{1,} "d"{0,2} "e"{2,3}', ["ababcee", "ababccddeee"], ["abcee", "ababcdddee", "ababee"], True),
    (r'"ab"* | "x"+ "y"?', ["", "abab", "xxy"], ["aba", "y"], True),
    (r'"" "a" ( )', ["a"], ["", "aa"], True),  # empty literal / group
    (r'"a" ("b" | )', ["a", "ab"], ["", "b"], False),  # empty alternative: llama.cpp yes, XGrammar no
    (r'. "-" .', ["a-\n", "😀-é"], ["a-", "ab-c"], False),  # XGrammar has no '.'
])
def test_gbnf_notation(body, good, bad, in_xgrammar, xgr):
    text = f"root ::= {body}\n"
    ref = Reference(parse_gbnf(text))
    for s in good:
        assert ref.accepts(s), (body, s)
    for s in bad:
        assert not ref.accepts(s), (body, s)
    if in_xgrammar:
        gx = xgr.compile(Constraint.grammar(text, "ebnf"))
        for s in good + bad:
            assert engine_run(gx, s)[0] == ref.accepts(s), (body, s)


def test_gbnf_multiline_rules_follow_llama_cpp():
    # continuation after ::=, after |, inside parentheses; comments anywhere
    ok = 'root ::=\n  "a" | # first\n  "b" (\n  "c"\n  # inside\n  | "d" )\nnext ::= "x"\n'
    ref = Reference(parse_gbnf(ok))
    assert ref.accepts("a") and ref.accepts("bc") and ref.accepts("bd") and not ref.accepts("b")
    # a '|' that starts a line at the top level: llama.cpp ends the rule before it; XGrammar does not
    text = 'root ::= "a"\n  | "b"\n'
    with pytest.raises(GrammarSyntaxError) as ei:
        parse_gbnf(text)
    assert ei.value.position == text.index("|")
    assert Reference(parse_gbnf(text, dialect="ebnf")).accepts("b")
    # a stray continuation line is an error in llama.cpp's dialect, a continuation in XGrammar's
    text = 'root ::= "a"\n  "b"\n'
    with pytest.raises(GrammarSyntaxError) as ei:
        parse_gbnf(text)
    assert ei.value.position == text.index('"b"') and "'root'" in ei.value.message
    assert Reference(parse_gbnf(text, dialect="ebnf")).accepts("ab")
    assert detect_grammar_format(text) == "ebnf" and Reference(parse_grammar(text)).accepts("ab")
    # CRLF line ends
    assert Reference(parse_gbnf('root ::= a\r\na ::= "x"\r\n')).accepts("x")


def _pos_of(text: str, needle: str, nth: int = 0) -> int:
    i = -1
    for _ in range(nth + 1):
        i = text.index(needle, i + 1)
    return i


@pytest.mark.parametrize("text,at,words", [
    ('root ::= "a" | b\n', ("b", 0), ["undefined rule 'b'", "'root'"]),
    ('root ::= x\nx ::= "a" [b-a]\n', ("b-a", 0), ["reversed", "'x'"]),
    ('root ::= "a" )\n', (")", 0), ["unexpected ')'", "'root'"]),
    ('root ::= ("a"\n', (None, None), ["expected ')'", "'root'"]),
    ('root ::= "\\q"\n', ("\\q", 0), ["unknown escape \\q"]),
    ('root ::= "\\x4"\n', ("\\x4", 0), ["2 hex digits"]),
    ('root ::= "\\U00110000"\n', ("\\U", 0), ["beyond U+10FFFF"]),
    ('root ::= *"a"\n', ("*", 0), ["nothing to repeat"]),
    ('root ::= "a"{2,1}\n', ("1}", 0), ["below the minimum"]),
    ('root ::= "a"{x}\n', ("x}", 0), ["expected an integer"]),
    ('root ::= x\nx ::= "a"\nx ::= "b"\n', ("x ::=", 1), ["defined twice"]),
    ('foo ::= "a"\n', (None, 0), ["no 'root' rule"]),
    ('root ::= []\n', ("[]", 0), ["empty character class"]),
    ('root ::= "abc\n', ('"abc', 0), ["unterminated string literal"]),
    ('root = "a"\n', ("=", 0), ["expected '::='"]),
])
def test_gbnf_errors_name_rule_and_position(text, at, words):
    with pytest.raises(GrammarSyntaxError) as ei:
        parse_gbnf(text)
    e = ei.value
    needle, nth = at
    if needle is not None:
        assert e.position == _pos_of(text, needle, nth), str(e)
    elif nth is not None:
        assert e.position == nth
    for w in words:
        assert w in e.message, str(e)
    assert e.pattern == text and "^" in str(e) and "line" in (e.where or "")


@pytest.mark.timeout(60)  # a hang fails here
def test_gbnf_left_recursion_is_a_typed_error_not_a_hang():
    for text in ('root ::= root "a" | "b"\n', 'root ::= a\na ::= b "x" | "y"\nb ::= "q"? a "z"\n',
                 'root ::= ("x"? root) "a" | "b"\n'):
        with pytest.raises(GrammarSyntaxError, match="left recursion"):
            parse_gbnf(text)


def test_gbnf_deep_nesting_is_typed():
    with pytest.raises(GrammarSyntaxError, match="nested deeper"):
        parse_gbnf("root ::= " + "(" * 300 + '"a"' + ")" * 300 + "\n")
    g = parse_gbnf("root ::= " + "(" * 150 + '"a"' + ")" * 150 + "\n")
    assert Reference(g).accepts("a")


@pytest.mark.parametrize("text,feature", [
    ('root ::= "a" (= "b")\n', "lookahead assertion (= ...)"),
    ('root[max_tokens=3] ::= "a"\n', "rule attributes name[...] ::="),
    ('root ::= TagDispatch(("<a>", x))\nx ::= "b"\n', "XGrammar macro TagDispatch(...)"),
])
def test_ebnf_extensions_are_unsupported(text, feature):
    with pytest.raises(UnsupportedFeatureError) as ei:
        parse_gbnf(text, dialect="ebnf")
    assert ei.value.feature == feature


def test_ebnf_dialect_differences():
    # names with '.', rule boundaries without newlines, no quantifier on a quantifier
    g = parse_gbnf('root ::= a.b a.b ::= "x" "y"', dialect="ebnf")
    assert Reference(g).accepts("xy")
    with pytest.raises(GrammarSyntaxError, match="another quantifier"):
        parse_gbnf('root ::= "a"**\n', dialect="ebnf")
    assert Reference(parse_gbnf('root ::= "a"**\n')).accepts("aaa")  # llama.cpp re-applies it
    with pytest.raises(GrammarSyntaxError, match="newline"):
        parse_gbnf('root ::= "a\nb"', dialect="ebnf")
    assert Reference(parse_gbnf('root ::= "a\nb"\n')).accepts("a\nb")


def test_parse_grammar_dispatch():
    assert parse_grammar('root ::= "a"', "GBNF").root == "root"
    assert parse_grammar('start: "a"', "lark").root == "start"
    assert parse_grammar('start: "a::=b"').root == "start"  # '::=' inside a literal is not GBNF
    assert detect_grammar_format('start: "a::=b"') == "lark"
    with pytest.raises(InvalidConstraintError, match="unknown grammar_format"):
        parse_grammar('root ::= "a"', "peg")
    with pytest.raises(InvalidConstraintError):
        parse_grammar(b'root ::= "a"')  # type: ignore[arg-type]
    with pytest.raises(InvalidConstraintError, match="matches nothing"):
        parse_gbnf("root ::= [^\\x00-\\U0010FFFF]\n")


# -- Lark: the three grammars of tests/data/grammars/lark ---------------------------------------------
LARK_HAND = {k: (v["valid"], v["invalid"]) for k, v in _HAND_JSON.items() if k.endswith(".lark")}

#: per grammar: fixed text for the ignore rule (between lexemes), code points not drawn, mutation
#: alphabet, characters never deleted. See the module docstring of structgate.native.frontends.lark:
#: json: no raw newlines (llguidance's ESCAPED_STRING takes a raw newline, Lark's does not — tested
#: separately); sql: at least one blank between lexemes (longest match: "afrom" is one NAME for a
#: lexer), no İ/ı (Python's IGNORECASE folds them into i, llguidance does not — tested separately).
LARK_RANDOM = {
    "json.lark": ({"%ignore": lambda r: r.choice(["", " ", "\t", "  "])}, frozenset({10}),
                  ' x"{}[],:1.e-+tn\\a\t', ""),
    "sql.lark": ({"%ignore": lambda r: r.choice([" ", "  ", "\n", "\t "])}, frozenset({0x130, 0x131}),
                 "ABCFSTXZ*(),;.='<>!019 ", " \t\n'"),
    "config.lark": (None, frozenset(), None, ""),
}


def test_every_lark_file_is_covered():
    assert set(LARK_FILES) == set(LARK_HAND) == set(LARK_RANDOM)


@pytest.mark.engines
@pytest.mark.parametrize("name", LARK_FILES)
def test_lark_hand_written_strings(name, llg, native):
    text = lark_text(name)
    ref = Reference(parse_lark(text))
    gl = llg.compile(Constraint.grammar(text, "lark"))
    gn = native.compile(Constraint.grammar(text, "lark"))
    good, bad = LARK_HAND[name]
    for s, want in [(s, True) for s in good] + [(s, False) for s in bad]:
        r = ref.run(s)
        assert r[0] is want, (name, s)
        if s != '"a\nb"':  # the documented ESCAPED_STRING difference (test_lark_escaped_string_...)
            assert engine_run(gl, s) == r, ("llguidance", name, s)
        assert engine_run(gn, s) == r, ("native", name, s)


@pytest.mark.engines
@pytest.mark.parametrize("name", LARK_FILES)
def test_lark_random_walks_agree_with_llguidance_and_native(name, llg, native):
    text = lark_text(name)
    ref = Reference(parse_lark(text))
    gl = llg.compile(Constraint.grammar(text, "lark"))
    gn = native.compile(Constraint.grammar(text, "lark"))
    fixed, avoid, alphabet, keep = LARK_RANDOM[name]
    verdicts = []
    trailing = 0
    for s in _random_cases(ref, seed=sum(map(ord, name)), n=50, fixed=fixed, avoid=avoid,
                           alphabet=alphabet, keep=keep):
        r = ref.run(s)
        verdicts.append(r[0])
        assert engine_run(gn, s) == r, ("native", name, s)
        e = engine_run(gl, s)
        if e != r and _trailing_ignore_case(ref, s, r, e):
            trailing += 1  # documented: llguidance takes trailing ignored text if a lexeme could follow
            continue
        assert e == r, ("llguidance", name, s)
    assert 0 < sum(verdicts) < len(verdicts)
    assert trailing <= len(verdicts) // 10


def _trailing_ignore_case(ref: Reference, s: str, r, e) -> bool:
    """The one documented %ignore difference: ``s`` = a sentence + trailing white space, which
    llguidance accepts (another lexeme could follow) and structgate does not (it allows ignored
    text between lexemes only)."""
    core = s.rstrip(" \t\n")
    return core != s and ref.accepts(core) and r == (False, len(s)) and e == (True, len(s))


#: json.lark with llguidance's own ESCAPED_STRING (a raw newline allowed), so that masks inside
#: strings compare the engines rather than the two definitions. sql.lark is not mask-compared:
#: after a NAME a scannerless grammar allows a keyword to follow without a blank ("_as"), a lexer
#: reads one NAME (the longest-match difference, see test_longest_match_difference_is_as_documented).
MASK_LARK = {
    "json.lark": lark_text("json.lark").replace("%import common.ESCAPED_STRING",
                                                'ESCAPED_STRING: /"(\\\\.|[^"\\\\])*"/'),
    "config.lark": lark_text("config.lark"),
}


@pytest.mark.engines
@pytest.mark.parametrize("name", sorted(MASK_LARK))
def test_lark_masks_same_as_llguidance(name, vocab, llg, native):
    text = MASK_LARK[name]
    assert text != lark_text("json.lark")
    ref = Reference(parse_lark(text))
    fixed, avoid, _, _ = LARK_RANDOM[name]
    compiled = {"native": native.compile(Constraint.grammar(text, "lark")),
                "structgate-llguidance": llg.compile(Constraint.grammar(text, "lark"))}
    rng = random.Random(11)
    done = 0
    while done < 4:
        s = ref.sample(rng, max_depth=10, fixed=fixed, avoid=avoid)
        if not 10 <= len(s) <= 200:
            continue
        done += 1
        rep = diff_masks(list(compiled), vocab, Constraint.grammar(text, "lark"), text=s, compiled=compiled)
        assert rep.ok and rep.stopped is None, (s, [d.as_dict() for d in rep.disagreements[:3]])


# -- Lark notation -----------------------------------------------------------------------------------
@pytest.mark.engines
@pytest.mark.parametrize("text,good,bad", [
    ('start: a [b] c?\n?a: "x"\nb: "y"\nc: "z"\n', ["x", "xy", "xyz", "xz"], ["", "y", "xzy"]),
    ('start: "a"~3 "b" ~ 1 .. 2\n', ["aaab", "aaabb"], ["aab", "aaa", "aaabbb"]),
    ('start: ("a" | "b")+ "c"*\n', ["a", "abba", "bcc"], ["", "c"]),
    ('start: "Ab"i "c"\n', ["abc", "ABc", "aBc"], ["abC", "ab"]),
    ('start: "a".."c" "-" /[0-9]{2}/\n', ["a-12", "c-00"], ["d-12", "a-1"]),
    ('start: A B -> alias\nA: "x" | "y"\nB: A+\n', ["xy", "yxyx"], ["x", "xz"]),
    ('start: "a"\n    | "b"\n    | "c" // comment\n', ["a", "b", "c"], ["ab"]),
    ('start: x\nx: "a" x? | "b"\n', ["b", "aab", "aaaa"], ["", "ba"]),
    ('start: "a" "b"\n%ignore " "\n', ["ab", "a b", "a   b"], [" ab", "ab ", " a b "]),
    ('start: "a" | \n', ["", "a"], ["aa"]),
    ('start: "\\u00e9\\n\\t\\\\\\""\n', ["é\n\t\\\""], ["é"]),
    ('start: /a+/i "." /x/s\n', ["aAa.x"], ["a.", ".x"]),
    ('start: NUMBER (_SEP NUMBER)*\n_SEP: ","\n%import common (NUMBER)\n', ["1", "1,2.5,3e4"], ["1,", ",1"]),
    ('start: N\n%import common.INT -> N\n', ["12"], ["1a", ""]),
])
def test_lark_notation(text, good, bad, llg):
    ref = Reference(parse_lark(text))
    gl = llg.compile(Constraint.grammar(text, "lark"))
    for s in good:
        assert ref.accepts(s), (text, s)
    for s in bad:
        assert not ref.accepts(s), (text, s)
    for s in good + bad:
        assert engine_run(gl, s) == ref.run(s), (text, s)


@pytest.mark.parametrize("name", COMMON_TERMINALS)
def test_common_terminals_match_lark(name):
    """Each ``%import common.X`` against the lark library itself (its basic lexer: one token)."""
    lark = pytest.importorskip("lark")
    ours = Reference(parse_lark(f"start: {name}\n%import common.{name}\n"))
    theirs = lark.Lark(f"start: {name}\n%import common.{name}\n", parser="lalr", lexer="basic")

    def lark_ok(s: str) -> bool:
        try:
            theirs.parse(s)
            return True
        except lark.exceptions.LarkError:
            return False

    rng = random.Random(name)
    cases = ["", "0", "1.5", "-2e3", ".5", "1.", "a_1", '"a\\"b"', '"\\\\"', '"a', ' \t\n', "\r\n\n", "x y",
             '"a"b"', '"\\', "e5", "+1"]
    for _ in range(60):
        s = ours.sample(rng, max_depth=6)
        cases += [s, mutate(rng, s, ' \t\n"\\.eE+-09aZ_')]
    for s in cases:
        assert ours.accepts(s) == lark_ok(s), (name, s)


# -- the documented differences from a lexer ----------------------------------------------------------
@pytest.mark.engines
def test_longest_match_difference_is_as_documented(llg):
    lark = pytest.importorskip("lark")
    text = 'start: A "a"\nA: /a+/\n'
    ref = Reference(parse_lark(text))
    assert ref.accepts("aa") and ref.accepts("aaa")                      # the grammar's language
    gl = llg.compile(Constraint.grammar(text, "lark"))
    assert not engine_run(gl, "aa")[0]                                   # greedy lexer: A eats all
    with pytest.raises(lark.exceptions.LarkError):
        lark.Lark(text, parser="lalr").parse("aa")
    lark.Lark(text, parser="earley", lexer="dynamic_complete").parse("aa")  # scannerless: accepted


@pytest.mark.engines
def test_lark_trailing_ignore_difference_is_as_documented(llg):
    """llguidance takes ignored text after a complete sentence when another lexeme could follow;
    structgate allows it between lexemes only (never leading, never trailing)."""
    for text, s, llg_ok in (('start: "a" "b"?\n%ignore " "\n', "a ", True),
                            ('start: "a" | "a" "b"\n%ignore " "\n', "a ", True),
                            ('start: "a" "b"\n%ignore " "\n', "ab ", False),
                            ('start: "a"?\n%ignore " "\n', " ", False),
                            ('start: "a" "b"\n%ignore " "\n', " ab", False)):
        ref = Reference(parse_lark(text))
        assert not ref.accepts(s) and ref.accepts(s.strip())
        assert engine_run(llg.compile(Constraint.grammar(text, "lark")), s)[0] is llg_ok, (text, s)


@pytest.mark.parametrize("body", [r"\x41\U0001F600\u00e9", r"a\d\/", r"\a\b\v\0\'", r"\n\t\r\f\\\""])
def test_lark_string_escapes_match_lark(body):
    """Literal escapes as Lark evaluates them (the lark library is the oracle; llguidance reads
    literals as JSON strings and refuses several of these)."""
    lark = pytest.importorskip("lark")
    text = f'start: "{body}"\n'
    ref = Reference(parse_lark(text))
    [want] = [t.pattern.value for t in lark.Lark(text, parser="lalr").terminals]
    assert ref.accepts(want)
    for other in (want + "x", want[:-1], want.replace("\\", "")):
        if other != want:
            assert not ref.accepts(other), (body, other)


@pytest.mark.engines
def test_lark_escaped_string_difference_is_as_documented(llg):
    lark = pytest.importorskip("lark")
    text = "start: ESCAPED_STRING\n%import common.ESCAPED_STRING\n"
    ref = Reference(parse_lark(text))
    assert not ref.accepts('"a\nb"') and ref.accepts('"a\rb"')
    with pytest.raises(lark.exceptions.LarkError):
        lark.Lark(text, parser="lalr").parse('"a\nb"')
    assert engine_run(llg.compile(Constraint.grammar(text, "lark")), '"a\nb"')[0]  # llguidance takes it


@pytest.mark.engines
def test_lark_case_folding_difference_is_as_documented(llg):
    text = 'start: "i"i "s"i "k"i\n'
    ref = Reference(parse_lark(text))
    gl = llg.compile(Constraint.grammar(text, "lark"))
    for s in ("isk", "ISK", "i\u017f\u212a"):
        assert ref.accepts(s) and engine_run(gl, s)[0], s
    for s in ("\u0130sk", "\u0131sk"):
        assert ref.accepts(s) == bool(re.fullmatch("(?i:isk)", s)) is True  # Lark compiles to Python re
        assert not engine_run(gl, s)[0]                                     # llguidance: simple folding


# -- Lark errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,at,words", [
    ('start: "a" | b\n', ("b", 0), ["undefined rule 'b'", "rule 'start'"]),
    ("start: WS\n", ("WS", 0), ["undefined terminal 'WS'", "%import common.WS"]),
    ('start: A\nA: "a" A?\n', ("A:", 0), ["terminal 'A' is recursive"]),
    ('start: A\nA: b\nb: "x"\n', ("b\n", 0), ["cannot reference the rule 'b'", "terminal 'A'"]),
    ('start: "a"\nstart: "b"\n', ("start", 1), ["defined twice"]),
    ('start: "a"\n  "b"\n', ('"b"', 0), ["expected a rule or terminal definition"]),
    ("start: /a(/\n", ("(/", 0), ["in regex /a(/"]),
    ('start: "a"\nx: x "b" | "c"\nstart2: x\n', (None, None), []),  # unreachable left recursion is fine
    ('start: x\nx: x "b" | "c"\n', ("x:", 0), ["left recursion"]),
    ('start: "a" "b\n', ('"b', 0), ["unterminated string literal"]),
    ('start: ("a"\n', (None, None), ["expected ')'"]),
    ('start: "a"**\n', ("*", 1), ["follows another quantifier"]),
    ('start: "ab".."c"\n', ('"ab"', 0), ["one character on each side"]),
    ('Start: "a"\n', ("Start", 0), ["all lower-case"]),
    ('a: "x"\n', (None, 0), ["no 'start' rule"]),
])
def test_lark_errors_name_rule_and_position(text, at, words):
    if not words:
        assert Reference(parse_lark(text)).accepts("a")
        return
    with pytest.raises(GrammarSyntaxError) as ei:
        parse_lark(text)
    e = ei.value
    needle, nth = at
    if needle is not None:
        assert e.position == _pos_of(text, needle, nth), str(e)
    elif nth is not None:
        assert e.position == nth
    for w in words:
        assert w in e.message, str(e)
    assert e.pattern == text and "^" in str(e)


@pytest.mark.parametrize("text,feature", [
    ('start.2: "a"\n', "rule priority (start.N)"),
    ('start: A\nA.2: "a"\n', "terminal priority (A.N)"),
    ('start: _sep{"a"}\n_sep{x}: x\n', "template use (_sep{...})"),
    ('_sep{x}: x\nstart: "a"\n', "template rule (_sep{...})"),
    ('%declare A\nstart: A\n', "%declare"),
    ('start: "a"\n%override start: "b"\n', "%override"),
    ('start: "a"\n%extend start: "b"\n', "%extend"),
    ('%import python.NAME\nstart: NAME\n', "%import python"),
    ('%import common.FOO\nstart: FOO\n', "%import common.FOO"),
    ('start: /a(?=b)b/\n', "lookahead (?=...)"),
    ('start: /^a/\n', "regex anchor (^, $, \\A, \\Z) in a grammar terminal"),
    ('start: /a\\1/\n', None),
    ('%llguidance {}\nstart: "a"\n', "%llguidance"),
    ('start: %json {"type": "integer"}\n', "%json in an expansion"),
    ('start: <[1]>\n', "'<' in an expansion"),
    ('start[max_tokens=3]: "a"\n', "rule attributes (start[...])"),
    ('start: /a/l\n', "regex flag 'l'"),
])
def test_lark_unsupported_features_are_named(text, feature):
    with pytest.raises(UnsupportedFeatureError) as ei:
        parse_lark(text)
    if feature is not None:
        assert ei.value.feature == feature, str(ei.value)
    else:
        assert "backreference" in ei.value.feature


@pytest.mark.timeout(60)  # a hang fails here
def test_lark_left_recursion_never_hangs():
    with pytest.raises(GrammarSyntaxError, match="left recursion"):
        parse_lark('start: expr\n?expr: expr "+" term | term\nterm: "1"\n')
