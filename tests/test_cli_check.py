"""``structgate check``: verdicts, output formats, exit codes, with a stub backend registered at run
time (any registered backend must work) and with the native backend."""
from __future__ import annotations

import json
import os

import pytest

from structgate.backends import registry
from structgate.backends.interface import Backend
from structgate.cli import main
from structgate.errors import GrammarSyntaxError, UnsupportedFeatureError
from structgate.native.matcher import NativeMatcher
from structgate.native.token_index import TokenIndex

from test_native_token_index import literal_dfa


class _Grammar:
    def __init__(self, vocab, words):
        self.vocab = vocab
        self.index = TokenIndex(literal_dfa([w.encode() for w in words]), vocab)

    def matcher(self, **kw):
        return NativeMatcher(self.index, **kw)


class LiteralBackend(Backend):
    """Stub: a 'regex' is a '|'-separated list of literal words; '**' is a syntax error; the last
    constraint seen is kept for inspection."""

    name = "stub-literal"
    supported_kinds = frozenset({"regex", "json_schema", "choice"})
    last = None

    def _compile(self, constraint):
        LiteralBackend.last = constraint
        if constraint.kind == "json_schema":
            raise UnsupportedFeatureError("stub", "schemas are not compiled by the stub", "/")
        if constraint.kind == "choice":
            return _Grammar(self.vocab, constraint.value)
        if "**" in constraint.value:
            raise GrammarSyntaxError("quantifier repeated", constraint.value, constraint.value.index("**") + 1)
        return _Grammar(self.vocab, constraint.value.split("|"))


@pytest.fixture()
def stub():
    registry.register_backend(registry.BackendSpec(name="stub-literal", factory=LiteralBackend,
                                                   description="test stub"))
    yield "stub-literal"
    registry._reset_for_tests()


def run_json(capsys, *argv):
    rc = main(["check", *argv, "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_verdicts_and_json_shape(stub, capsys, llama3_vocab):
    doc = run_json(capsys, "--backend", stub, "--tokenizer", "llama3", "--regex", "hello|hello world",
                   "--text", "hello", "--text", "hello world", "--text", "hello there", "--text", "hell",
                   "--text", "")
    assert doc["backend"] == stub and doc["tokenizer"] == "llama3" and doc["compile_ms"] >= 0
    res = {r["text"]: r for r in doc["results"]}
    assert list(res) == ["hello", "hello world", "hello there", "hell", ""]
    assert res["hello"] == {"text": "hello", "accepted": True, "rejected_at": None,
                            "n_tokens": len(llama3_vocab.encode("hello"))}
    assert res["hello world"]["accepted"] is True
    # 'hello' ' there': the second token is not allowed
    assert res["hello there"]["accepted"] is False and res["hello there"]["rejected_at"] == 1
    # every token allowed, but the text is incomplete
    assert res["hell"]["rejected_at"] == "eos" and res["hell"]["accepted"] is False
    assert res[""]["rejected_at"] == "eos" and res[""]["n_tokens"] == 0


def test_jsonl_and_choice(stub, capsys, tmp_path):
    f = tmp_path / "texts.jsonl"
    # a raw U+2028 inside a JSON string is one line of JSONL, not two
    f.write_text(json.dumps({"text": "yes"}) + "\n\n" + json.dumps({"text": "maybe"}) + "\n"
                 + json.dumps({"text": "n\u2028o"}, ensure_ascii=False) + "\n", encoding="utf-8")
    doc = run_json(capsys, "--backend", stub, "--choice", "yes", "--choice", "no", "--jsonl", str(f),
                   "--text", "no")
    assert [(r["text"], r["accepted"]) for r in doc["results"]] == [("no", True), ("yes", True), ("maybe", False),
                                                                     ("n\u2028o", False)]
    assert LiteralBackend.last.kind == "choice" and LiteralBackend.last.value == ("yes", "no")


def test_json_schema_is_path_or_text(stub, capsys, tmp_path):
    schema = {"type": "integer", "minimum": 3}
    p = tmp_path / "s.json"
    p.write_text(json.dumps(schema))
    for arg in (str(p), json.dumps(schema)):
        rc = main(["check", "--backend", stub, "--json-schema", arg, "--text", "3"])
        err = capsys.readouterr().err
        assert rc == 2 and "UnsupportedFeatureError" in err
        assert LiteralBackend.last.value == schema


def test_errors_exit_2_one_message(stub, capsys, tmp_path):
    rc = main(["check", "--backend", stub, "--regex", "foo**", "--text", "foo"])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == ""
    assert cap.err == ("structgate check: error: GrammarSyntaxError: quantifier repeated at position 4:\n"
                       "    foo**\n"
                       "        ^\n")
    rc = main(["check", "--backend", "no-such-backend", "--regex", "a"])
    assert rc == 2 and "BackendNotFoundError" in capsys.readouterr().err
    rc = main(["check", "--backend", stub, "--json-schema", "{not json", "--text", "x"])
    assert rc == 2 and "GrammarSyntaxError" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("[1, 2\n")
    rc = main(["check", "--backend", stub, "--regex", "a", "--jsonl", str(bad)])
    assert rc == 2 and "bad.jsonl:1" in capsys.readouterr().err
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(json.dumps({"text": "a"}).encode() + b"\n\x97\xff\n")
    rc = main(["check", "--backend", stub, "--regex", "a", "--jsonl", str(binary)])
    cap = capsys.readouterr()
    assert rc == 2 and "binary.jsonl:2: not UTF-8 text (byte 14: 0x97)" in cap.err and "Traceback" not in cap.err
    rc = main(["check", "--backend", stub, "--grammar", str(tmp_path / "missing.lark")])
    assert rc == 2 and "missing.lark" in capsys.readouterr().err


def test_errors_with_json_print_a_json_document(capsys, tmp_path):
    """--json is for programs: an error is a JSON document on stdout too (exit 2), not only the
    human message on stderr."""
    rc = main(["check", "--regex", "ab[c", "--text", "x", "--json"])
    cap = capsys.readouterr()
    assert rc == 2 and "GrammarSyntaxError" in cap.err and "^" in cap.err
    doc = json.loads(cap.out)
    assert doc["error"] == {"type": "GrammarSyntaxError", "kind": "syntax", "message": "unterminated character set",
                            "position": 2}
    rc = main(["check", "--json-schema", '{"type": "array", "uniqueItems": true}', "--text", "[]", "--json"])
    err = json.loads(capsys.readouterr().out)["error"]
    assert rc == 2 and err["type"] == "UnsupportedFeatureError" and err["where"] == "/uniqueItems"
    rc = main(["check", "--regex", "a", "--jsonl", str(tmp_path / "missing.jsonl"), "--json"])
    err = json.loads(capsys.readouterr().out)["error"]
    assert rc == 2 and err["kind"] == "usage" and "missing.jsonl" in err["message"]


def test_plain_output(stub, capsys):
    rc = main(["check", "--backend", stub, "--regex", "ok", "--text", "ok", "--text", "no"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    assert "compiled in" in lines[0]
    assert lines[1].startswith("accepted") and lines[2].startswith("rejected at 0")
    rc = main(["check", "--backend", stub, "--regex", "ok"])
    out = capsys.readouterr().out
    assert rc == 0 and "compiled in" in out and "nothing to check" in out


def test_native_backend_end_to_end(capsys):
    doc = run_json(capsys, "--regex", r"[0-9]{2,3}-[a-z]+", "--text", "12-ab", "--text", "1-ab",
                   "--text", "123-", "--text", "1234-a")
    got = [(r["accepted"], r["rejected_at"]) for r in doc["results"]]
    assert got[0] == (True, None) and got[2] == (False, "eos")
    assert got[1][0] is False and got[3][0] is False
    doc = run_json(capsys, "--choice", "a.b", "--choice", "(x)", "--choice", "1+1?", "--text", "a.b",
                   "--text", "axb", "--text", "(x)", "--text", "1+1?", "--text", "11")
    assert [r["accepted"] for r in doc["results"]] == [True, False, True, True, False]
    rc = main(["check", "--regex", "foo**", "--text", "foo"])
    err = capsys.readouterr().err
    assert rc == 2 and "GrammarSyntaxError" in err and "Traceback" not in err


def test_native_grammar_kind_both_dialects(capsys, tmp_path):
    """native compiles grammars (Lark and GBNF, detected from the text): verdicts per text."""
    g = tmp_path / "g.lark"
    g.write_text('start: "a"+ "b"\n')
    rc = main(["check", "--grammar", str(g), "--text", "aab", "--text", "aa", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert [r["accepted"] for r in out["results"]] == [True, False], out
    g2 = tmp_path / "g.gbnf"
    g2.write_text('root ::= "(" root ")" | "x"\n')
    rc2 = main(["check", "--grammar", str(g2), "--text", "((x))", "--text", "((x)", "--json"])
    out2 = json.loads(capsys.readouterr().out)
    assert rc == rc2 and [r["accepted"] for r in out2["results"]] == [True, False], out2


def test_grammar_kind_refused_by_a_backend_without_it(capsys, tmp_path):
    g = tmp_path / "g.lark"
    g.write_text('start: "a"\n')
    rc = main(["check", "--backend", "structgate-outlines-core", "--grammar", str(g), "--text", "a"])
    err = capsys.readouterr().err
    assert rc == 2 and "ConstraintKindError" in err and "'grammar'" in err


def test_options_reach_the_backend(capsys):
    """``--options``: CompileOptions fields as a JSON object, passed to the backend (here the
    native step limit: a 1 ns limit fails the first mask with its typed error, none checks it)."""
    argv = ["check", "--regex", "[a-z]+@[a-z]+", "--text", "ab@cd", "--json"]
    rc = main([*argv, "--options", '{"step_timeout_s": 0}'])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["results"][0]["accepted"] is True
    rc = main([*argv, "--options", '{"step_timeout_s": 1e-9}'])
    out = capsys.readouterr().out
    assert rc != 0 and "step_timeout_s" in out
    for bad in ('{"step_timeout_s": "x"}', "[1]", "{not json", '{"no_such_option": 1}'):
        assert main([*argv, "--options", bad]) == 2
        doc = json.loads(capsys.readouterr().out)
        assert doc["error"]["type"] in ("InvalidConstraintError", "ValueError"), doc


# -- texts with a lone surrogate (no UTF-8 bytes: no tokenizer encodes them) -------------------------
#: what the shell hands over for $'\xff' (Python decodes argv with surrogateescape) and JSON's "\ud800"
ARGV_FF = os.fsdecode(b"\xff")
SURROGATE_TEXTS = [ARGV_FF, "\ud800", "ab\udfff"]


def _no_utf8(text):
    """The oracle: the text has no UTF-8 encoding."""
    with pytest.raises(UnicodeEncodeError):
        text.encode("utf-8")
    return True


@pytest.mark.parametrize("text", SURROGATE_TEXTS)
def test_check_text_with_a_lone_surrogate_is_a_usage_error(capsys, text):
    assert _no_utf8(text)
    i = next(k for k, c in enumerate(text) if 0xD800 <= ord(c) <= 0xDFFF)
    rc = main(["check", "--regex", ".*", "--text", "a", "--text", text])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == ""
    assert cap.err.count("\n") == 1 and cap.err.startswith("structgate check: error: --text 2 holds a lone surrogate "
                                                           f"U+{ord(text[i]):04X} at character {i}")
    rc = main(["check", "--regex", ".*", "--text", text, "--json"])
    err = json.loads(capsys.readouterr().out)["error"]
    assert rc == 2 and err["kind"] == "usage" and err["message"].startswith("--text 1 holds a lone surrogate")


def test_jsonl_line_with_a_lone_surrogate_names_the_line(capsys, tmp_path):
    f = tmp_path / "sur.jsonl"
    f.write_text('{"text": "a"}\n{"text": "\\ud800"}\n')
    texts = [json.loads(line)["text"] for line in f.read_text().splitlines()]
    assert texts[0].encode() and _no_utf8(texts[1])
    rc = main(["check", "--regex", ".*", "--jsonl", str(f)])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == "" and cap.err.count("\n") == 1
    assert 'sur.jsonl:2: "text" holds a lone surrogate U+D800 at character 0' in cap.err
    rc = main(["check", "--regex", ".*", "--jsonl", str(f), "--json"])
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert rc == 2 and doc["error"]["kind"] == "usage" and doc["error"]["message"].startswith(f"{f}:2: ")
    rc = main(["diff", "--backends", "native,structgate-xgrammar", "--regex", ".*", "--jsonl", str(f)])
    cap = capsys.readouterr()
    assert rc == 2 and cap.err.count("\n") == 1
    assert cap.err.startswith(f'structgate diff: error: {f}:2: "text" holds a lone surrogate U+D800')
    rc = main(["diff", "--backends", "native,structgate-xgrammar", "--regex", ".*", "--text", "\ud83d"])
    assert rc == 2 and "--text 1 holds a lone surrogate U+D83D" in capsys.readouterr().err


def test_vocabulary_encode_names_a_lone_surrogate(llama3_vocab):
    from structgate import Constraint
    from structgate.diff import diff_masks

    for text in SURROGATE_TEXTS:
        assert _no_utf8(text)
        with pytest.raises(ValueError, match="lone surrogate U\\+D[89A-F][0-9A-F]{2} at character"):
            llama3_vocab.encode(text)
        with pytest.raises(ValueError, match="lone surrogate"):
            diff_masks(["native", "structgate-xgrammar"], llama3_vocab, Constraint.regex(".*"), text=text)


def test_maskbench_data_with_a_lone_surrogate_is_driven_as_its_escape(llama3_vocab, tmp_path):
    """A MaskBench instance holding "\\ud800" is the text of the same JSON value a tokenizer encodes
    (it stopped the whole run with the tokenizer's TypeError)."""
    from structgate.diff import load_maskbench_cases

    data = ["\ud800x", {"k\udc00": ["\ud83d", "ok"]}]
    f = tmp_path / "mb.jsonl"
    f.write_text("".join(json.dumps({"id": f"s{i}", "schema": True, "tests": [{"data": d, "valid": True}]}) + "\n"
                         for i, d in enumerate(data)))
    cases = load_maskbench_cases([str(f)])
    assert [json.loads(c.texts[0]) for c in cases] == data  # the same values
    for c in cases:
        c.texts[0].encode("utf-8")
        assert llama3_vocab.encode(c.texts[0])
