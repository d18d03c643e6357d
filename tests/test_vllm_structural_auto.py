"""Over HTTP on the embedded tiny model: structural tags (both forms) on structgate-xgrammar and
native, ``structgate-auto`` serving a schema native refuses through llguidance, per-request engine
choice (``vllm_xargs``), tool calling on native. One ``vllm serve --structured-output-backend
structgate-auto`` server for the module.

Oracles: an independent parser of the structural-tag output (triggers found with ``str.find``,
JSON content with ``json.JSONDecoder.raw_decode`` + ``jsonschema``), ``jsonschema`` for schemas
and tool arguments, the server's compile records (``STRUCTGATE_STATS_FILE``) for which engine served.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")
httpx = pytest.importorskip("httpx")
jsonschema = pytest.importorskip("jsonschema")

from structgate.backends.registry import get_backend_spec  # noqa: E402
from structgate.plugin.server import VllmServer  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.engines, pytest.mark.timeout(900)]

for _n in ("structgate-xgrammar", "structgate-llguidance"):
    if not get_backend_spec(_n).availability()[0]:
        pytest.skip(f"{_n} is not installed", allow_module_level=True)

HALVES = {"type": "number", "multipleOf": 0.5, "minimum": 0, "maximum": 10}
CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["city", "days"], "additionalProperties": False}
PING = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["n"],
        "additionalProperties": False}
LEGACY = {"type": "structural_tag", "triggers": ["<tool="],
          "structures": [{"begin": "<tool=weather>", "schema": CITY, "end": "</tool>"},
                         {"begin": "<tool=ping>", "schema": PING, "end": "</tool>"}]}
FORMAT = {"type": "structural_tag", "format": {
    "type": "triggered_tags", "triggers": ["<tool="], "at_least_one": True, "stop_after_first": True,
    "tags": [{"type": "tag", "begin": "<tool=weather>", "content": {"type": "json_schema", "json_schema": CITY},
              "end": "</tool>"},
             {"type": "tag", "begin": "<tool=ping>", "content": {"type": "json_schema", "json_schema": PING},
              "end": "</tool>"}]}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm-auto")
    stats = tmp / "stats.jsonl"
    # tool_choice "required" / a named tool needs a tool-call parser in vLLM 0.32 (it parses the JSON back)
    srv = VllmServer("structgate-auto", log_path=str(tmp / "auto.log"), env={"STRUCTGATE_STATS_FILE": str(stats)},
                     extra_args=["--enable-auto-tool-choice", "--tool-call-parser", "pythonic"])
    srv.start()
    try:
        srv.wait_ready(timeout_s=600)
        yield srv, stats
    finally:
        srv.stop()


def _post(srv, path, body):
    return httpx.post(srv.url + path, json={"model": srv.served_model_name, **body}, timeout=300.0)


def _served(stats, kind):
    return [e.get("served_by") for e in map(json.loads, stats.read_text().splitlines())
            if e["event"] == "compile" and e.get("kind") == kind]


def _bias(vocab, *texts, value=12):
    """Favour the tokens of ``texts``; forbid whitespace-only tokens (XGrammar's structural-tag JSON
    allows unbounded whitespace, in which a random model can stay until max_tokens)."""
    out = {str(i): -100 for i, b in enumerate(vocab.token_bytes[: vocab.n_tokens]) if b and not b.strip()}
    out.update({str(t): value for s in texts for t in vocab.encode(s)})
    return out


def parse_tags(text, triggers, tags, complete):
    """Independent reading of a structural-tag output: ``[(begin, document), ...]``.

    Free text runs up to the first trigger; then one of ``tags`` (begin, schema, end) must follow,
    its JSON content valid against the schema (with ``additionalProperties: false`` as given), then
    its end. With ``complete=False`` (the output hit max_tokens) an unfinished last tag is allowed
    (its begin / JSON so far are checked as prefixes). Raises AssertionError on a violation."""
    out, i = [], 0
    dec = json.JSONDecoder()
    while True:
        hits = [j for j in (text.find(t, i) for t in triggers) if j >= 0]
        if not hits:
            return out
        j = min(hits)
        tag = next((t for t in tags if text.startswith(t[0], j)), None)
        if tag is None:
            assert not complete and any(t[0].startswith(text[j:]) for t in tags), ("bad begin", text[j:j + 40])
            return out
        begin, schema, end = tag
        k = j + len(begin)
        try:
            doc, k2 = dec.raw_decode(text, k)
        except json.JSONDecodeError:
            assert not complete, ("bad JSON", text[k:k + 80])
            return out
        jsonschema.validate(doc, schema)
        rest = text[k2:]
        if not rest.startswith(end):
            assert not complete and end.startswith(rest), ("bad end", rest[:40])
            return out
        out.append((begin, doc))
        i = k2 + len(end)


def _legacy_tags(spec):
    return [(s["begin"], s["schema"], s["end"]) for s in spec["structures"]]


# -- structgate-auto ------------------------------------------------------------------------------------
def test_auto_serves_a_schema_native_refuses_through_llguidance(server):
    srv, stats = server
    for seed in (1, 2):
        r = _post(srv, "/v1/completions", {"prompt": "x=", "structured_outputs": {"json": HALVES}, "max_tokens": 12,
                                           "seed": seed})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        jsonschema.validate(json.loads(choice["text"]), HALVES)
    assert "structgate-llguidance" in _served(stats, "json_schema")


# -- structural tags ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["structgate-xgrammar", "native"])
def test_structural_tag_format_form(server, engine, llama3_vocab):
    srv, stats = server
    tags = [(t["begin"], t["content"]["json_schema"], t["end"]) for t in FORMAT["format"]["tags"]]
    for seed in (3, 4):
        r = _post(srv, "/v1/completions", {"prompt": "call: ", "structured_outputs": {"structural_tag": json.dumps(FORMAT)},
                                           "max_tokens": 60, "seed": seed, "logit_bias": _bias(llama3_vocab),
                                           "vllm_xargs": {"structured_output_backend": engine}})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        calls = parse_tags(choice["text"], ["<tool="], tags, complete=True)
        assert len(calls) == 1 and choice["text"].startswith("<tool=") and choice["text"].endswith("</tool>"), choice
    assert engine in _served(stats, "structural_tag")


@pytest.mark.parametrize("engine", ["structgate-xgrammar", "native"])
def test_structural_tag_legacy_form(server, engine, llama3_vocab):
    srv, stats = server
    n_calls = 0
    for seed in (5, 6, 7):
        r = _post(srv, "/v1/completions", {
            "prompt": "Use <tool=weather> or <tool=ping>: ", "max_tokens": 80, "seed": seed,
            "structured_outputs": {"structural_tag": json.dumps(LEGACY)},
            "logit_bias": _bias(llama3_vocab, "<tool=", "weather>", "ping>"),
            "vllm_xargs": {"structured_output_backend": engine}})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        n_calls += len(parse_tags(choice["text"], LEGACY["triggers"], _legacy_tags(LEGACY),
                                  complete=choice["finish_reason"] == "stop"))
    assert n_calls > 0  # the biased model does open tags; every complete one was valid
    assert engine in _served(stats, "structural_tag")


# -- per-request engine choice -------------------------------------------------------------------------------
@pytest.mark.parametrize("name,needle", [("nope", "is not a structgate backend"),
                                         ("xgrammar", "is not a structgate backend"),
                                         ("native", "multipleOf")])
def test_per_request_choice_errors_are_400(server, name, needle):
    srv, _ = server
    r = _post(srv, "/v1/completions", {"prompt": "x", "max_tokens": 4, "structured_outputs": {"json": HALVES},
                                       "vllm_xargs": {"structured_output_backend": name}})
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def test_per_request_choice_is_used(server):
    srv, stats = server
    before = _served(stats, "json_schema").count("structgate-xgrammar")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    r = _post(srv, "/v1/completions", {"prompt": "ok? ", "max_tokens": 30, "seed": 8,
                                       "structured_outputs": {"json": schema},
                                       "vllm_xargs": {"structured_output_backend": "sg-xgrammar"}})
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["choices"][0]["text"]), schema)
    assert _served(stats, "json_schema").count("structgate-xgrammar") == before + 1
    # and the server still answers requests without a choice
    r = _post(srv, "/v1/completions", {"prompt": "n=", "max_tokens": 8, "structured_outputs": {"regex": "[0-9]{2}"}})
    assert r.status_code == 200 and len(r.json()["choices"][0]["text"]) == 2, r.text


# -- tool calling on native --------------------------------------------------------------------------------
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": CITY}},
         {"type": "function", "function": {"name": "ping", "description": "ping", "parameters": PING}}]


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "ping"}}],
                         ids=["required", "named"])
def test_tool_calling_on_native(server, tool_choice):
    srv, stats = server
    body = {"messages": [{"role": "user", "content": "weather in Paris?"}], "tools": TOOLS, "tool_choice": tool_choice,
            "max_tokens": 120, "seed": 9, "vllm_xargs": {"structured_output_backend": "native"}}
    if tool_choice == "required":
        # vLLM's "required" schema is an array of calls with no upper bound: a random-weight model rarely
        # closes it within max_tokens, so favour "]" wherever the grammar allows it (the mask still
        # decides what is allowed; the bias only picks among allowed tokens)
        from structgate import load_vocabulary

        (close,) = load_vocabulary("llama3").encode("]")
        body["logit_bias"] = {str(close): 100}
    r = _post(srv, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    calls = msg.get("tool_calls") or []
    assert calls, msg
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for c in calls:
        name = c["function"]["name"]
        if isinstance(tool_choice, dict):
            assert name == "ping"
        jsonschema.validate(json.loads(c["function"]["arguments"]), by_name[name])
    assert "native" in _served(stats, "json_schema")
