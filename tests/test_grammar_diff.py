"""``structgate diff`` on every grammar of tests/data/grammars, native against structgate-xgrammar
(the 8 llama.cpp GBNF files) and structgate-llguidance (the 3 Lark files), with the Llama 3
vocabulary: hand-written strings, JSON nested 40 deep and seeded random token walks over both
engines' masks (``bench/grammar_diff.py``, run here with few walks). Every mask disagreement and
every split verdict must be one of the documented differences (docs/backends.md, "Grammars:
native vs XGrammar and llguidance"); the classifier's rules are checked on their own inputs below.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

from structgate import Constraint, get_backend
from structgate.backends.registry import get_backend_spec
from structgate.testing import tiny_vocabulary

ROOT = pathlib.Path(__file__).parent.parent
pytestmark = pytest.mark.engines


def _load_script():
    spec = importlib.util.spec_from_file_location("grammar_diff", ROOT / "bench" / "grammar_diff.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gd = _load_script()


def _have(*names):
    return all(get_backend_spec(n).availability()[0] for n in names)


needs_peers = pytest.mark.skipif(not _have("structgate-xgrammar", "structgate-llguidance"),
                                 reason="peer engines not installed")


@pytest.fixture(scope="module")
def run_summary(tmp_path_factory):
    out = tmp_path_factory.mktemp("grammar-diff")
    rc = gd.main(["--walks", "2", "--steps", "30", "--seed", "0", "--nested", "2", "--out", str(out), "--json", str(out / "s.json")])
    return rc, json.loads((out / "s.json").read_text(encoding="utf-8"))


@needs_peers
def test_every_grammar_diffed_and_every_disagreement_documented(run_summary):
    rc, s = run_summary
    assert set(s["grammars"]) == {p.name for p in gd.grammar_files()} and len(s["grammars"]) == 11
    problems = {name: (r["unexplained"][:3], r["split_verdicts"][:3]) for name, r in s["grammars"].items()
                if r["unexplained"] or r["split_verdicts"]}
    assert not problems, problems
    assert rc == 0
    for name, r in s["grammars"].items():
        assert r["command"].startswith("structgate diff --backends native,")
        assert r["walks_with_invalid_utf8"]["native"] == [], name  # native never leaves UTF-8
        assert r["steps_compared"] > r["texts"], name
        # every valid hand-written string is accepted by both engines (json.lark's raw newline
        # string is the documented split verdict, counted in explained_split)
        n_valid = len(json.loads((gd.DATA / "hand_written.json").read_text(encoding="utf-8"))[name]["valid"])
        assert r["accepted"]["native"] >= n_valid, name
    # the documented differences do show up where expected (a fixed engine would be a doc change)
    assert s["grammars"]["sql.lark"]["explained"].get("lark-longest-match")
    assert s["grammars"]["json.lark"]["explained_split"] == {"lark-escaped-string-newline": 1}


# -- the classifier's rules, each on an input that shows it -------------------------------------------
@needs_peers
def test_xgrammar_takes_utf8_encoded_surrogates():
    """XGrammar's [^...] classes (list.gbnf) admit ED A0..BF (U+D800-DFFF, not UTF-8: Python refuses
    it); native does not. Bytes fed one token each on the synthetic vocabulary."""
    vocab = tiny_vocabulary()
    text = (gd.DATA / "gbnf" / "list.gbnf").read_text(encoding="utf-8")
    gx = get_backend("structgate-xgrammar", vocab).compile(Constraint.grammar(text, "ebnf"))
    gn = get_backend("native", vocab).compile(Constraint.grammar(text, "gbnf"))
    sur = b"- \xed\xa0\x80\n"
    with pytest.raises(UnicodeDecodeError):
        sur.decode("utf-8")
    ids = [2 + b for b in sur]
    assert gx.matcher().validate(ids) == len(ids)
    assert gn.matcher().validate(ids) == 3  # native stops at the second byte of the surrogate
    ok = [2 + b for b in "- \ud7ff\ue000\n".encode("utf-8", "surrogatepass")]
    assert gn.matcher().validate(ok) == len(ok) == gx.matcher().validate(ok)
    assert gd.explain("list.gbnf", ["structgate-xgrammar"], b"- \xed", [b"\xa1"]) == "xgrammar-surrogates"
    assert gd.explain("list.gbnf", ["structgate-xgrammar"], b"- \xec", [b"\xa1"]) is None
    assert gd.explain("list.gbnf", ["native"], b"- \xed", [b"\xa1"]) is None


def test_classifier_rules_are_narrow():
    # json.lark: a raw newline only explains tokens that put it inside a string
    assert gd.explain("json.lark", ["structgate-llguidance"], b'{"a', [b"\n", b'b\n']) == "lark-escaped-string-newline"
    assert gd.explain("json.lark", ["structgate-llguidance"], b'{"a":', [b'"\n']) == "lark-escaped-string-newline"
    assert gd.explain("json.lark", ["structgate-llguidance"], b'{"a":', [b"1\n"]) is None
    assert gd.explain("json.lark", ["native"], b'{"a', [b"\n"]) is None
    # sql.lark: case folding needs İ/ı (or the lead byte that starts them), glue needs the peer's word
    assert gd.explain("sql.lark", ["native"], b"SELECT a FROM t", [b"l\xc4\xb1", b"\xc4"]) == "lark-case-folding"
    assert gd.explain("sql.lark", ["native"], b"SELECT a FROM t", [b"lx"]) is None
    seen = []

    def viable(data: bytes) -> bool:
        seen.append(data)
        return data == b"SELECT dat aS ource"

    assert gd.explain("sql.lark", ["native"], b"SELECT", [b" dataSource"], viable) == "lark-longest-match"
    assert b"SELECT dat aS ource" in seen
    assert gd.explain("sql.lark", ["native"], b"SELECT", [b" x"], lambda d: False) is None
    # GBNF: only the peer's extra surrogate tokens
    assert gd.explain("json.gbnf", ["structgate-xgrammar"], b'{"', [b"\xed\xb6\x9b"]) == "xgrammar-surrogates"
    assert gd.explain("json.gbnf", ["structgate-xgrammar"], b'{"', [b"\xed\x9f\xbf"]) is None


@needs_peers
def test_glue_difference_on_the_engines():
    """The longest-match rule on the engines themselves: native (scannerless) takes "dat" AS "ource"
    glued, llguidance (greedy lexer) only with the blanks; the lark library's Earley parser with the
    dynamic_complete lexer (scannerless) agrees with native, its LALR parser with llguidance."""
    lark = pytest.importorskip("lark")
    vocab = tiny_vocabulary()
    text = (gd.DATA / "lark" / "sql.lark").read_text(encoding="utf-8")
    gl = get_backend("structgate-llguidance", vocab).compile(Constraint.grammar(text, "lark"))
    gn = get_backend("native", vocab).compile(Constraint.grammar(text, "lark"))
    glued, spaced = "SELECT dataSource FROM t", "SELECT dat aS ource FROM t"
    for g, s, want in ((gn, glued, True), (gn, spaced, True), (gl, glued, False), (gl, spaced, True)):
        ids = [2 + b for b in s.encode()]
        m = g.matcher()
        assert (m.validate(ids) == len(ids) and (m.advance(ids) and m.is_accepting())) is want, (g, s)
    lark.Lark(text, parser="earley", lexer="dynamic_complete").parse(glued)
    with pytest.raises(lark.exceptions.LarkError):
        lark.Lark(text, parser="lalr").parse(glued)
