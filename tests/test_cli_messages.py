"""What a new user sees when something is wrong (issue 13, item 4): unknown options with a
did-you-mean, vLLM backend names pointed at the structgate name, usage errors without internal
class names, syntax errors with a caret, plain help texts, ``check --json-object``."""
from __future__ import annotations

import pathlib
import re

import pytest

from structgate import Constraint, get_backend
from structgate.backends.interface import CompileOptions
from structgate.backends.registry import backend_names, get_backend_spec
from structgate.cli import main
from structgate.errors import BackendNotFoundError, CompileLimitError, InvalidConstraintError
from structgate.testing import tiny_vocabulary

ROOT = pathlib.Path(__file__).resolve().parents[1] / "structgate"


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


# -- options ----------------------------------------------------------------------------------------
def test_option_typo_is_refused_with_did_you_mean(vocab):
    with pytest.raises(InvalidConstraintError, match=r"unknown option 'max_whitspace' for backend 'native'; "
                                                     r"did you mean 'max_whitespace'\?"):
        get_backend("native", vocab, max_whitspace=3)
    with pytest.raises(InvalidConstraintError, match="unknown option 'bogus'"):
        get_backend("native", vocab, bogus=1)
    # the same check when the class is constructed directly
    from structgate.native.backend import NativeBackend

    with pytest.raises(InvalidConstraintError, match="did you mean 'compile_timeout_s'"):
        NativeBackend(vocab, compile_timeout=3)


def _module_backend(path: pathlib.Path) -> str | None:
    rel = path.relative_to(ROOT).as_posix()
    if rel.startswith("native/"):
        return "native"
    return {"adapters/xgrammar.py": "structgate-xgrammar", "adapters/llguidance.py": "structgate-llguidance",
            "adapters/outlines_core.py": "structgate-outlines-core", "backends/auto.py": "structgate-auto"}.get(rel)


def _extras_read() -> dict[str, set[str]]:
    """Every option key read from ``options.extra`` in structgate's sources, per backend (grep)."""
    found: dict[str, set[str]] = {}
    # ``extra.get("k")``, ``extra["k"]``, and the checked readers ``option_int(extra, "k", ...)`` /
    # ``option_bool(...)`` (structgate._env)
    pat = re.compile(r"""(?:extra(?:\.get\(|\[)|option_(?:int|bool)\([^,()]+,)\s*["']([A-Za-z_][A-Za-z0-9_]*)["']""")
    for path in ROOT.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        keys = set(pat.findall(text))
        if not keys:
            continue
        name = _module_backend(path)
        assert name is not None, f"{path} reads extra options {sorted(keys)} but belongs to no backend"
        found.setdefault(name, set()).update(keys)
    return found


def test_declared_extras_are_exactly_the_extras_read(vocab):
    """Each backend accepts exactly the extra options its code reads (none forgotten, none stale)."""
    read = _extras_read()
    assert {"compile_cache_size", "formats", "max_regex_size"} <= read["native"]
    for name, keys in read.items():
        spec = get_backend_spec(name)
        declared = set(spec.options) | set(getattr(spec.load_factory(), "extra_options", None) or ())
        assert declared == keys, (name, sorted(declared ^ keys))
    for key in read["native"]:  # accepted by the registry and by the class
        get_backend("native", vocab, **{key: _sample(key)})


def _sample(key: str):
    return {"formats": "lenient", "compile_processes": 0}.get(key, 10_000)


def test_other_backends_extras_are_accepted_for_shared_option_sets(vocab):
    """One option set serves structgate-auto / diff / STRUCTGATE_BACKEND_OPTIONS: an extra another
    backend declares is ignored, not refused."""
    b = get_backend("native", vocab, xgrammar_indent=2, formats="lenient")
    assert b.options.extra == {"xgrammar_indent": 2, "formats": "lenient"}
    assert get_backend("native", vocab, max_whitespace=2).options.max_whitespace == 2
    assert "max_whitespace" in CompileOptions.__dataclass_fields__


# -- backend names ------------------------------------------------------------------------------------
@pytest.mark.parametrize("vllm_name,ours", [("xgrammar", "structgate-xgrammar"), ("guidance", "structgate-llguidance"),
                                            ("outlines", "structgate-outlines-core")])
def test_vllm_backend_names_point_at_the_structgate_name(vllm_name, ours):
    with pytest.raises(BackendNotFoundError) as ei:
        get_backend_spec(vllm_name)
    assert ours in backend_names()
    assert f"vLLM's own backend name" in str(ei.value) and repr(ours) in str(ei.value)


def test_backend_typo_did_you_mean(capsys):
    assert main(["check", "--backend", "natve", "--regex", "a", "--text", "a"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'native'?" in err


# -- CLI messages -------------------------------------------------------------------------------------
def test_usage_errors_show_no_internal_class_name(capsys):
    assert main(["diff", "--backends", "native", "--regex", "a", "--text", "a"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("structgate diff: error: --backends needs at least two names")
    assert "_UsageError" not in err and "UsageError" not in err


def test_syntax_errors_have_a_caret(capsys):
    assert main(["check", "--regex", "ab(c", "--text", "x"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("structgate check: error: GrammarSyntaxError:") and "position 2" in lines[0]
    assert lines[1].strip() == "ab(c"
    assert lines[2].index("^") == lines[1].index("ab(c") + 2


def test_check_json_object(capsys):
    assert main(["check", "--json-object", "--text", '{"a": 1}', "--text", "[]", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert [r["accepted"] for r in out["results"]] == [True, False]


def test_check_without_texts_says_so(capsys):
    assert main(["check", "--regex", "a"]) == 0
    assert "nothing to check" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["bench", "--help"], ["demo", "--help"]])
def test_help_is_plain_text(argv, capsys):
    with pytest.raises(SystemExit) as ei:
        main(argv)
    assert ei.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out and ":mod:" not in out and ":func:" not in out
    assert "maskstep_cmd" not in out and "Other modules may add" not in out


def test_extras_as_one_mapping(vocab):
    """``get_backend(name, vocab, extra={...})``: the spelling the docs and limit messages use."""
    b = get_backend("native", vocab, extra={"max_multiple_of": 5}, max_whitespace=2)
    assert b.options.extra["max_multiple_of"] == 5 and b.options.max_whitespace == 2
    from structgate.errors import InvalidConstraintError

    with pytest.raises(InvalidConstraintError, match="max_multiple_off"):
        get_backend("native", vocab, extra={"max_multiple_off": 5})
    with pytest.raises(InvalidConstraintError, match="mapping"):
        get_backend("native", vocab, extra=5)


@pytest.mark.parametrize("value", ["x", 1.5, None.__class__, True])
def test_native_integer_options_are_checked_when_the_backend_is_made(value, vocab):
    from structgate.errors import InvalidConstraintError

    with pytest.raises(InvalidConstraintError, match="max_product_states"):
        get_backend("native", vocab, max_product_states=value)
    assert get_backend("native", vocab, max_product_states=20_000).options.extra["max_product_states"] == 20_000


# -- demo: bad arguments before vllm serve starts ---------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--port", "99999"], r"argument --port: must be a port number in 1-65535, got 99999"),
    (["--port", "0"], r"argument --port: must be a port number in 1-65535, got 0"),
    (["--port", "http"], r"argument --port: expected a port number in 1-65535, got 'http'"),
    (["--timeout", "0"], r"argument --timeout: must be a finite number of seconds > 0, got 0"),
    (["--timeout", "-1"], r"argument --timeout: must be a finite number of seconds > 0, got -1"),
    (["--timeout", "nan"], r"argument --timeout: expected a finite number of seconds > 0, got 'nan'"),
    (["--timeout", "1e999"], r"argument --timeout: must be a finite number of seconds > 0, got 1e999"),
    (["--port", "٨٠"], r"argument --port: expected a port number in 1-65535, got '٨٠'"),
])
def test_demo_port_and_timeout_are_checked_at_parse_time(argv, message, capsys):
    with pytest.raises(SystemExit) as ei:
        main(["demo", *argv])
    assert ei.value.code == 2
    err = capsys.readouterr().err
    assert re.search(r"structgate demo: error: " + message, err), err


def _no_server(monkeypatch):
    """Make ``demo`` fail loudly if it gets as far as starting vllm serve."""
    import structgate.plugin.server as server

    def refuse(*a, **k):
        raise AssertionError("demo started a server despite a bad --schemas file")

    monkeypatch.setattr(server, "VllmServer", refuse)


def test_demo_bad_schemas_file_is_a_usage_error(tmp_path, monkeypatch, capsys):
    _no_server(monkeypatch)
    cases = {"missing": (tmp_path / "nope.jsonl", r"cannot read the --schemas file '.*nope.jsonl': "
                                                  r"No such file or directory"),
             "folder": (tmp_path, r"cannot read the --schemas file .*: Is a directory"),
             "empty": (tmp_path / "empty.jsonl", r".*holds no schema: expected JSONL, one JSON Schema per line"),
             "binary": (tmp_path / "bin.jsonl", r".*is not UTF-8 text \(byte 0\)"),
             "not JSON": (tmp_path / "bad.jsonl", r"GrammarSyntaxError: .*bad.jsonl line 2: not JSON"),
             "an array": (tmp_path / "arr.jsonl", r"GrammarSyntaxError: .*arr.jsonl line 1: a JSON Schema must be an object or a boolean")}
    (tmp_path / "empty.jsonl").write_text("# nothing here\n\n")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe{}")
    (tmp_path / "bad.jsonl").write_text('{"type": "integer"}\n{"type": \n')
    (tmp_path / "arr.jsonl").write_text('[1, 2]\n')
    for name, (path, message) in cases.items():
        assert main(["demo", "--schemas", str(path)]) == 2, name
        err = capsys.readouterr().err
        assert re.search(r"^structgate demo: error: " + message, err), (name, err)
        assert "Traceback" not in err


def test_demo_start_failure_says_what_happened(monkeypatch, capsys):
    """A server that did not come up: the reason (no exit status, no output: it did not answer in
    time), never a bare "(None):"."""
    import structgate.plugin.model as model
    import structgate.plugin.server as server
    from structgate.cli.demo import start_failure

    class Silent:
        url, served_model_name, log_path = "http://127.0.0.1:1", "m", pathlib.Path("/nonexistent/log")

        def __init__(self, **kw):
            pass

        def start(self):
            pass

        def wait_ready(self, timeout_s):
            raise server.ServerStartError(f"vllm serve did not answer /health within {timeout_s:g} s", None, "")

        def stop(self):
            pass

    monkeypatch.setattr(server, "VllmServer", Silent)
    monkeypatch.setattr(model, "embedded_model_dir", lambda: "/nonexistent/model")
    assert main(["demo", "--timeout", "0.5"]) == 1
    err = capsys.readouterr().err
    assert "vllm serve failed to start: vllm serve did not answer /health within 0.5 s" in err, err
    assert "(the server wrote no output)" in err and "(None)" not in err
    e = server.ServerStartError("vllm serve exited with status 1 before it was ready", 1, "boom\n")
    assert start_failure(e) == ("vllm serve failed to start: vllm serve exited with status 1 before it was ready\n"
                                "--- last server output ---\nboom")


# -- messages that must describe the case at hand ---------------------------------------------------
@pytest.mark.parametrize("schema, says, not_says", [
    # on number only integral values compile: the message must not offer 0.5 / 0.1 as compiled
    ({"type": "number", "multipleOf": 0.5}, r"0\.5: .*on type number only integral values \(1\.0, 3\.0\) are "
                                            r"compiled; powers of two \(0\.5\) and decimal reciprocals "
                                            r"\(0\.1, 0\.01\) only on integer", "on type integer"),
    ({"type": "number", "multipleOf": 0.1}, r"0\.1: .*on type number only integral values", "on type integer"),
    ({"multipleOf": 0.25}, r"0\.25: .*on type number only integral values", "on type integer"),
    ({"type": "number", "multipleOf": 2.5, "minimum": 0}, r"2\.5: .*on type number only integral values",
     "on type integer"),
    # on integer, powers of two and close decimal reciprocals do compile: named as such
    ({"type": "integer", "multipleOf": 2.5}, r"2\.5: .*on type integer only integral values \(3\.0\), powers of "
                                             r"two \(0\.5\) and decimal reciprocals with a close double \(0\.1, "
                                             r"not 1e-05\) are compiled", "on type number"),
    ({"type": "integer", "multipleOf": 1e-05}, r"1e-05: .*on type integer only", "on type number"),
])
def test_float_multiple_of_refusal_names_what_compiles_for_the_type(schema, says, not_says, vocab, capsys):
    from structgate.errors import UnsupportedFeatureError

    with pytest.raises(UnsupportedFeatureError) as ei:
        get_backend("native", vocab).compile(Constraint.json_schema(schema))
    e = ei.value
    assert (e.feature, e.where) == ("multipleOf", "/multipleOf")
    assert re.search(says, e.detail) and not_says not in e.detail, e.detail
    assert "characters]" not in e.detail  # short enough not to be clipped
    import json

    assert main(["check", "--json-schema", json.dumps(schema), "--tokenizer", "llama3"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"UnsupportedFeatureError: unsupported: multipleOf at /multipleOf \(" + says, err), err
    for ok in ({"type": "integer", "multipleOf": 0.5}, {"type": "integer", "multipleOf": 0.1},
               {"type": "number", "multipleOf": 3.0}, {"type": "number", "multipleOf": 1.0}):
        get_backend("native", vocab).compile(Constraint.json_schema(ok))  # what the messages say compiles


def test_max_regex_size_hint_names_a_wide_object(vocab):
    """A flat object of many properties over max_regex_size: the hint names the object's size and
    says to raise the limit (not "deeply nested or heavily shared $refs; lower max_recursion_depth",
    which does not apply); a nested schema keeps that hint."""

    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(1000)}}
    with pytest.raises(CompileLimitError) as ei:
        get_backend("native", vocab, max_regex_size=50_000).compile(Constraint.json_schema(wide))
    msg = str(ei.value)
    assert ei.value.limit_name == "max_regex_size"
    assert "the regex for the schema, an object of 1,000 properties, is too large; raise max_regex_size" in msg
    assert "$refs" not in msg and "max_recursion_depth" not in msg
    inner = {"type": "object", "properties": {"w": {"enum": [f"value {i}" for i in range(300)]}}}
    with pytest.raises(CompileLimitError, match=r"the regex for /properties/w, an enum of 300 values, is too large"):
        get_backend("native", vocab, max_regex_size=2_000).compile(Constraint.json_schema(inner))
    deep = {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]{3}$"}}}}}}
    with pytest.raises(CompileLimitError, match=r"deeply nested or heavily shared \$refs"):
        get_backend("native", vocab, max_regex_size=200).compile(Constraint.json_schema(deep))


@pytest.mark.timeout(300)
def test_flat_object_of_20000_properties_ends_with_a_typed_error_not_oom(vocab):
    """20,000 optional properties nest their alternatives 20,000 deep: the regex parser's piece cache
    kept every level's text (tens of GB, the process was killed); now a typed limit error (or a
    grammar), within a modest memory bound."""
    import resource

    from structgate.errors import StructgateError

    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(20000)}}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        get_backend("native", vocab).compile(Constraint.json_schema(wide))
    except StructgateError as e:
        assert getattr(e, "limit_name", None) in ("max_nfa_states", "max_regex_size", "compile_timeout_s"), e
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 3000, grown_mb


def test_max_nfa_states_names_the_part_of_the_schema_that_is_large():
    """The size limit's message names the JSON pointer whose rules make up most of the estimate
    (it named only the limit: a user could not tell which object to split)."""
    from structgate.native.json_schema import schema_to_grammar
    from structgate.native.pushdown import check_size, grammar_size

    wide = {"type": "object", "properties": {
        "small": {"type": "string"},
        "outer": {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(300)}}}}
    g = schema_to_grammar(wide)
    est = grammar_size(g)
    with pytest.raises(CompileLimitError) as e:
        check_size(g, est // 2)
    assert e.value.limit_name == "max_nfa_states" and e.value.given == est
    assert "most of it" in str(e.value) and "is the schema at #/properties/outer" in str(e.value), str(e.value)
    check_size(g, est)  # at the limit: no error


def test_llguidance_required_error_points_at_the_required_entry(vocab):
    """llguidance names no location: the caret was under the first letter 'b' of the text (inside
    "object"); now under the "required" entry, with its pointer, or at 0 when it cannot be told."""
    pytest.importorskip("llguidance")
    from structgate.errors import GrammarSyntaxError

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["b"]}
    with pytest.raises(GrammarSyntaxError) as ei:
        get_backend("structgate-llguidance", vocab).compile(Constraint.json_schema(schema))
    e, text = ei.value, __import__("json").dumps(schema)
    assert "required property 'b'" in e.message
    assert text[e.position:].startswith('["b"]'[1:]) and e.where == "/required/0", (e.position, e.where)
    from structgate.adapters.llguidance import _schema_position

    nested = {"type": "object", "properties": {"b": {"type": "object", "required": ["b"], "properties": {},
                                                     "additionalProperties": False}}}
    t = __import__("json").dumps(nested)
    pos, where = _schema_position("required property 'b' is unsatisfiable", t)
    assert where == "/properties/b/required/0" and t[pos:pos + 3] == '"b"' and t[pos - 1] == "["
    # a name quoted in the message that occurs more than once, or not at all: no guessed caret
    assert _schema_position("something about 'b'", t) == (0, None)
    assert _schema_position("something about 'zz'", t) == (0, None)


def test_backends_table_breaks_no_name_when_piped(capsys, monkeypatch):
    """Piped (no terminal, no $COLUMNS) the table is as wide as it needs: every backend name, alias
    and plugin name stands whole on one line (at Rich's default 80 columns it read 'structgate-aut|o')."""
    from structgate.backends.registry import list_backends

    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    infos = list_backends()
    for i in infos:
        for word in (i.name, *i.aliases, i.plugin):
            assert re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", out), (word, out)
        row = next(line for line in out.splitlines() if re.search(rf"│ {re.escape(i.name)} +│", line))
        assert all(a in row for a in i.aliases) and i.plugin in row
