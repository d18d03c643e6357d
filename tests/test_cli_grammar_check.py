"""``structgate check --backend native --grammar FILE`` for both dialects (GBNF and Lark) on the
grammar files of tests/data/grammars, with the Llama 3 vocabulary: the verdicts are the labels of
tests/data/grammars/hand_written.json (each checked against the reference recogniser in
tests/test_native_grammar_frontends.py), and a bad grammar is exit 2 with an error naming the rule,
the line and column, and a caret under the offending text."""
from __future__ import annotations

import json
import pathlib

import pytest

from structgate.cli import main

DATA = pathlib.Path(__file__).parent / "data" / "grammars"
HAND = json.loads((DATA / "hand_written.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", ["gbnf/json.gbnf", "gbnf/arithmetic.gbnf", "lark/json.lark", "lark/config.lark"])
def test_check_native_grammar_file_verdicts(capsys, path):
    f = DATA / path
    good, bad = HAND[f.name]["valid"], HAND[f.name]["invalid"]
    args = ["check", "--backend", "native", "--tokenizer", "llama3", "--grammar", str(f)]
    for s in good + bad:
        args.append(f"--text={s}")
    rc = main(args + ["--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    assert [r["accepted"] for r in out["results"]] == [True] * len(good) + [False] * len(bad), out
    # the human form prints one verdict line per text
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(ln.startswith("accepted") for ln in lines) == len(good)
    assert sum(ln.startswith("rejected") for ln in lines) == len(bad)


def _caret_target(err: str) -> str:
    """The text from the caret's column on, in the line above the caret."""
    lines = err.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.strip() == "^")
    return lines[i - 1][lines[i].index("^"):]


@pytest.mark.parametrize("path,edit,rule,where,at", [
    # an undefined rule inside a llama.cpp grammar (GBNF): named at the reference
    ("gbnf/c.gbnf", ("declaration ::=", "declaration ::= undefined_x"), "in rule 'declaration'", "line 3, column 17",
     "undefined_x"),
    # a GBNF syntax error: '=' for '::='
    ("gbnf/chess.gbnf", ("castle  ::=", "castle  ="), "", "line 5, column 9", "="),
    # an undefined rule in a Lark grammar
    ("lark/json.lark", ("pair   : string", "pair   : strin"), "in rule 'pair'", "line 12, column 10", "strin "),
    # a bad regex inside a Lark terminal: the caret is inside the /.../
    ("lark/sql.lark", ("NAME: /[a-z_][a-z0-9_]*/", "NAME: /[a-z_][a-z0-9_*/"), "NAME", "line", ""),
])
def test_check_native_grammar_errors_name_rule_and_position(capsys, tmp_path, path, edit, rule, where, at):
    src = (DATA / path).read_text(encoding="utf-8")
    assert edit[0] in src
    f = tmp_path / pathlib.Path(path).name
    f.write_text(src.replace(edit[0], edit[1], 1), encoding="utf-8")
    rc = main(["check", "--backend", "native", "--tokenizer", "llama3", "--grammar", str(f), "--text", "x"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "GrammarSyntaxError" in err and "Traceback" not in err
    assert rule in err and where in err and "^" in err, err
    assert _caret_target(err).startswith(at), err
