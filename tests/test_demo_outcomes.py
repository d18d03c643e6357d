"""``structgate demo`` (issue 13, item 2): outputs are reported as valid / cut at max_tokens /
invalid / unsupported (a backend's typed refusal) / error, only invalid outputs and errors fail the demo; the llguidance adapter bounds JSON
whitespace runs (llguidance's own whitespace_pattern does not), so random-weight outputs end."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from structgate import Constraint, get_backend, load_vocabulary
from structgate.backends.registry import get_backend_spec
from structgate.cli.demo import DEMO_SCHEMAS, DemoResult, classify, exit_status, is_unsupported_refusal, send

OBJ = {"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "integer"}}, "required": ["a"]}


def test_outcomes():
    check = ("json_schema", OBJ)
    assert classify(check, '{"a": "x"}', True, "stop") == "valid"
    # a long unbounded string stopped by max_tokens: a valid prefix, so "cut", not "invalid"
    assert classify(check, '{"a": "' + "xy" * 300, False, "length") == "cut"
    # stopped by max_tokens but already off the schema: invalid
    assert classify(check, '{"b": 1', False, "length") == "invalid"
    # complete but wrong (a backend bug) is invalid whatever the finish reason
    assert classify(("regex", "[0-9]{3}"), "12", False, "stop") == "invalid"
    assert classify(("regex", "[0-9]{3}"), "12", False, "length") == "cut"
    assert classify(("choice", ["yes", "no"]), "ye", False, "length") == "cut"
    assert classify(("choice", ["yes", "no"]), "ya", False, "length") == "invalid"


def test_exit_status_fails_only_on_invalid_and_errors():
    def r(outcome):
        return DemoResult(request="r", kind="json_schema", backend="b", outcome=outcome)

    assert exit_status([r("valid"), r("cut")]) == 0
    assert exit_status([r("valid"), r("invalid")]) == 1
    assert exit_status([r("cut"), r("error")]) == 1


class _Response:
    def __init__(self, status_code, payload):
        self.status_code, self._payload, self.text = status_code, payload, json.dumps(payload)

    def json(self):
        return self._payload


class _Client:
    def __init__(self, response):
        self.response = response

    def post(self, url, json):  # noqa: A002 - httpx's keyword
        return self.response


def _http_error(message):
    return {"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}


def test_a_typed_unsupported_refusal_is_reported_and_skipped():
    """A backend that refuses a request with UnsupportedFeatureError (HTTP 400 naming it) does not
    support that constraint: the demo reports it as unsupported and does not fail; other 400s
    (a syntax error, a limit) and 500s are errors."""
    refusal = _http_error("UnsupportedFeatureError: unsupported: minimum at /properties/age "
                          "(outlines-core does not enforce it exactly: a numeric bound outlines-core ignores)")
    assert is_unsupported_refusal(400, json.dumps(refusal))
    assert not is_unsupported_refusal(500, json.dumps(refusal))
    assert not is_unsupported_refusal(400, json.dumps(_http_error("GrammarSyntaxError: bad regex")))
    assert not is_unsupported_refusal(400, "not json")
    kind = _http_error("ConstraintKindError: backend 'example-choice' does not support constraint kind "
                       "'json_schema'; it supports: choice")
    assert is_unsupported_refusal(400, json.dumps(kind))
    req = {"name": "person", "kind": "json_schema", "path": "/v1/chat/completions", "body": {},
           "check": ("json_schema", OBJ)}
    res = send(_Client(_Response(400, refusal)), "http://x", req, "structgate-outlines-core", "m")
    assert res.outcome == "unsupported" and "minimum at /properties/age" in res.error
    res2 = send(_Client(_Response(400, _http_error("CompileLimitError: compile_timeout_s"))), "http://x", req, "b", "m")
    assert res2.outcome == "error"

    def r(outcome):
        return DemoResult(request="r", kind="json_schema", backend="b", outcome=outcome)

    assert exit_status([r("valid"), r("unsupported"), r("cut")]) == 0
    assert exit_status([r("unsupported"), r("invalid")]) == 1


def _max_ws_run_outside_strings(text: str) -> int:
    """Independent oracle: strip complete and trailing open JSON strings, then the longest run."""
    stripped = re.sub(r'"(?:[^"\\]|\\.)*("|$)', '""', text, flags=re.S)
    return max((len(m) for m in re.findall(r"[ \t\n\r]+", stripped)), default=0)


needs_llg = pytest.mark.skipif(not get_backend_spec("structgate-llguidance").availability()[0],
                               reason="llguidance not installed")


@pytest.mark.engines
@needs_llg
def test_llguidance_bounds_json_whitespace_runs():
    vocab = load_vocabulary("llama3")
    backend = get_backend("structgate-llguidance", vocab, max_whitespace=4)
    ws_ids = np.array([i for i, b in enumerate(vocab.token_bytes[: vocab.n_tokens])
                       if b and i not in vocab.special_token_ids and b.strip(b" \t\n\r") == b""])
    rng = np.random.default_rng(7)
    for _, schema in DEMO_SCHEMAS + [("obj", OBJ)]:
        g = backend.compile(Constraint.json_schema(schema))
        for _walk in range(3):
            m = g.matcher()
            out = b""
            for _step in range(60):
                allowed = m.allowed_token_ids()
                allowed = allowed[allowed < vocab.n_tokens]
                if len(allowed) == 0 or m.is_final():
                    break
                wsa = np.intersect1d(allowed, ws_ids)
                # prefer whitespace (what made random models loop), else any allowed token
                t = int(rng.choice(wsa) if len(wsa) and rng.random() < 0.7 else rng.choice(allowed))
                if t in vocab.eos_token_ids:
                    break
                assert m.advance(t)
                out += vocab.token_bytes[t]
                text = out.decode("utf-8", "replace")
                assert _max_ws_run_outside_strings(text) <= 4, text
            # the whitespace tokens the mask forbids, advance rejects too (mask == advance)
            allowed = set(m.allowed_token_ids().tolist())
            for t in ws_ids[:50]:
                assert m.validate([int(t)]) == (1 if int(t) in allowed else 0)
        # json.dumps output (", " / ": " separators, indent=2 at depth 1) and compact output still match
        inst = {"a": "x y", "n": 3}
        for text in (json.dumps(inst), json.dumps(inst, indent=2), json.dumps(inst, separators=(",", ":"))):
            m = backend.compile(Constraint.json_schema(OBJ)).matcher()
            assert m.advance(vocab.encode(text)) and m.is_accepting(), text
    # 5 spaces in a row between tokens are refused, 4 accepted; inside a string any run is content
    m = backend.compile(Constraint.json_schema(OBJ)).matcher()
    assert m.validate(vocab.encode('{    "a": "')) == len(vocab.encode('{    "a": "'))
    assert not m.advance(vocab.encode('{     "a"'))
    assert m.advance(vocab.encode('{"a": "          x"}')) and m.is_accepting()


needs_oc = pytest.mark.skipif(not get_backend_spec("structgate-outlines-core").availability()[0],
                              reason="outlines-core not installed")


@pytest.mark.vllm
@pytest.mark.engines
@pytest.mark.timeout(900)
@needs_oc
def test_demo_on_outlines_core_exits_0_with_no_invalid_output(monkeypatch, capsys):
    """``structgate demo --backend structgate-outlines-core`` (its Python entry, max_tokens 48 so it
    is quick): the demo's schemas all have integer / number ranges, which outlines-core ignores, so
    the adapter refuses them (typed, reported as unsupported); the regex and choice requests are
    valid; nothing is invalid and the exit status is 0 (it ended 6/11 valid, exit 1, before)."""
    import argparse

    from structgate.cli import demo

    monkeypatch.setattr(demo, "MAX_TOKENS", 48)
    args = argparse.Namespace(backend="structgate-outlines-core", schemas=None, json=True, port=None,
                              timeout=600.0, keep_log=False)
    rc = demo.run(args)
    out = json.loads(capsys.readouterr().out)
    assert out["invalid"] == 0 and out["error"] == 0, out
    assert out["unsupported"] == len(DEMO_SCHEMAS) and out["valid"] + out["cut"] == out["total"] - len(DEMO_SCHEMAS)
    for r in out["results"]:
        if r["outcome"] == "unsupported":
            assert "UnsupportedFeatureError" in r["error"] and re.search(r"(minimum|maximum) at /", r["error"]), r
    assert rc == 0
