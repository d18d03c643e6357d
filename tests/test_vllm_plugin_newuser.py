"""The vLLM plugin: problems a new user's break-it found, at unit level (no server).

1. A request naming ``structgate-auto`` (or ``sg-auto``) in ``vllm_xargs`` on a server whose backend
   is not auto falls back along the full chain (it compiled with the server's engine alone).
2. structgate-auto's ``structgate-auto: json_schema served by ...`` line reaches vLLM's log.
3. A schema dict holding an int msgpack cannot carry (>= 2**64, < -2**63) reaches the engine (vLLM's
   request encoder raised OverflowError: an empty HTTP 500).
4. A typo in ``STRUCTGATE_BACKEND_OPTIONS`` stops startup naming the variable and the option (it
   failed every structured request with a 400 blaming the client).
5. A lone surrogate in a constraint (``{"choice": ["\\ud800"]}``, ``{"json": {"enum": ["\\ud800"]}}``)
   passed validation, then vLLM's msgpack request encoder raised UnicodeEncodeError (an empty HTTP
   500): JSON text carries it as its escape, any other field is a 400 naming where it is.

Oracles: jsonschema on the texts a grammar accepts, the engines compiled directly, vLLM's own
``MsgpackEncoder`` / ``MsgpackDecoder``.
"""
from __future__ import annotations

import json
import logging
import types

import jsonschema
import pytest

vllm = pytest.importorskip("vllm")

from _vllm_engine import engine_backend, hf_tokenizer, model_config, plugin  # noqa: E402,F401  (fixtures)
from structgate.backends.registry import get_backend_spec  # noqa: E402

#: native refuses this multipleOf (0.001 has no exact double); llguidance and xgrammar enforce it
MILLIS = {"type": "number", "multipleOf": 0.001, "minimum": 0, "maximum": 10}
#: another schema native refuses (a different constraint: its own compile)
HALVES = {"type": "number", "multipleOf": 0.5, "minimum": 0, "maximum": 10}


def _installed(name):
    return get_backend_spec(name).availability()[0]


needs_chain = pytest.mark.skipif(not (_installed("structgate-llguidance") and _installed("structgate-xgrammar")),
                                 reason="needs llguidance and xgrammar installed")


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    """Validation is asserted, not its time budget; the options variable is this module's to set."""
    monkeypatch.setenv("STRUCTGATE_VALIDATE_BUDGET_S", "60")
    monkeypatch.delenv("STRUCTGATE_BACKEND_OPTIONS", raising=False)
    monkeypatch.delenv("STRUCTGATE_COMPILE_TIMEOUT_S", raising=False)


@pytest.fixture(scope="module")
def native_server(plugin, hf_tokenizer, model_config):
    """The engine side of a ``--structured-output-backend native`` server."""
    return engine_backend("native", hf_tokenizer, model_config)


def _texts_accepted(grammar, vocab, texts):
    """The texts a fresh matcher of a vLLM grammar (StructgateVllmGrammar) takes and may end on."""
    out = []
    for t in texts:
        grammar.reset()
        m = grammar.matcher
        if m.advance(vocab.encode(t)) and m.is_accepting():
            out.append(t)
    return out


NUMBERS = ["0", "0.125", "3.001", "9.999", "10", "0.0005", "10.001", "-1", "1.2345", "7"]


def _valid(schema, texts):
    v = jsonschema.Draft202012Validator(schema)
    return [t for t in texts if v.is_valid(json.loads(t))]


# -- 1. per-request structgate-auto ----------------------------------------------------------------
@needs_chain
@pytest.mark.parametrize("asked", ["structgate-auto", "sg-auto"])
def test_per_request_auto_on_a_native_server_falls_back(native_server, asked):
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from structgate.errors import UnsupportedFeatureError
    from structgate.plugin.request_backend import REQUEST_KEY, requested_backend

    name = requested_backend(types.SimpleNamespace(extra_args={REQUEST_KEY: asked}))
    assert name == "structgate-auto"
    spec = json.dumps(MILLIS)
    g = native_server.compile_grammar(StructuredOutputOptions.JSON, spec, backend_name=name)
    assert g.backend_name == "structgate-llguidance"  # native refused it; the next engine of the chain
    vocab = native_server.sg_backend.vocab
    assert _texts_accepted(g, vocab, NUMBERS) == _valid(MILLIS, NUMBERS)
    # unchanged: a plain request uses the server's engine (no fallback), and so does naming it
    with pytest.raises(UnsupportedFeatureError, match="multipleOf"):
        native_server.compile_grammar(StructuredOutputOptions.JSON, json.dumps({**MILLIS, "maximum": 9}))
    with pytest.raises(UnsupportedFeatureError, match="multipleOf"):
        native_server.compile_grammar(StructuredOutputOptions.JSON, json.dumps({**MILLIS, "maximum": 8}),
                                      backend_name="native")
    # the full chain reuses the server's native engine (same instance, caches)
    full = native_server.sg_backend.engine("structgate-auto")
    assert full is not native_server.sg_backend and full.chain[0] == "native"
    assert full.engine("native") is native_server.sg_backend.engine("native")


@needs_chain
def test_wrapped_auto_takes_the_configured_chain(llama3_vocab):
    """The per-request structgate-auto is configured as a structgate-auto server would be: from the
    options (here auto_chain without llguidance), not the wrap's one-engine chain."""
    from structgate import Constraint, get_backend
    from structgate.backends.auto import AutoBackend

    native = get_backend("native", llama3_vocab, auto_chain="native,structgate-xgrammar")
    w = AutoBackend.wrap(native)
    assert w.chain == ("native",)
    g = w.compile_with("sg-auto", Constraint.json_schema(MILLIS))
    assert g.served_by == "structgate-xgrammar" and [n for n, _ in g.fallbacks] == ["native"]
    m = g.matcher()
    assert m.advance(llama3_vocab.encode("2.5")) and m.is_accepting()
    assert w.engine("structgate-auto").engine("native") is native
    # named engines still do not fall back
    assert w.compile_with("native", Constraint.regex("[0-9]+")).served_by == "native"


# -- 2. the fallback line in vLLM's log ------------------------------------------------------------
def _vllm_logging_configured(monkeypatch, caplog):
    """vLLM's logger as vLLM configures it (its own handler, here caplog's; no propagation to the
    root), whatever the test process did before."""
    vllm_logger = logging.getLogger("vllm")
    monkeypatch.setattr(vllm_logger, "handlers", [caplog.handler])
    monkeypatch.setattr(vllm_logger, "propagate", False)
    return vllm_logger


@needs_chain
def test_auto_fallback_is_logged_on_vllms_logger_once_per_kind_and_engine(plugin, hf_tokenizer, model_config,
                                                                          caplog, monkeypatch):
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from structgate.plugin import bridge

    monkeypatch.setattr(bridge, "_fallbacks_logged", set(), raising=False)
    _vllm_logging_configured(monkeypatch, caplog)
    be = engine_backend("structgate-auto", hf_tokenizer, model_config)
    with caplog.at_level(logging.DEBUG, logger="vllm.structgate"):
        g1 = be.compile_grammar(StructuredOutputOptions.JSON, json.dumps(MILLIS))
        g2 = be.compile_grammar(StructuredOutputOptions.JSON, json.dumps(HALVES))
        be.compile_grammar(StructuredOutputOptions.REGEX, "[0-9]+")  # native serves it: no line
    assert g1.backend_name == g2.backend_name == "structgate-llguidance"
    lines = [r for r in caplog.records if r.name == "vllm.structgate" and "served by" in r.getMessage()]
    info = [r.getMessage() for r in lines if r.levelno == logging.INFO]
    assert len(info) == 1, info
    assert info[0].startswith("structgate-auto: json_schema served by structgate-llguidance (native: "
                              "UnsupportedFeatureError: ") and "multipleOf" in info[0]
    assert [r.levelno for r in lines] == [logging.INFO, logging.DEBUG]  # the second: same kind and engine


@needs_chain
def test_auto_fallback_line_per_request_choice_and_without_vllm_logging(native_server, caplog, monkeypatch):
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from structgate.plugin import bridge

    monkeypatch.setattr(bridge, "_fallbacks_logged", set(), raising=False)
    vllm_logger = _vllm_logging_configured(monkeypatch, caplog)
    with caplog.at_level(logging.INFO, logger="vllm.structgate"):
        native_server.compile_grammar(StructuredOutputOptions.JSON, json.dumps({**MILLIS, "maximum": 7}),
                                      backend_name="structgate-auto")
    assert any(r.name == "vllm.structgate" and r.getMessage().startswith(
        "structgate-auto: json_schema served by structgate-llguidance") for r in caplog.records)
    # vLLM's logging not configured: the structgate.auto logger's own line is the one (no duplicate)
    caplog.clear()
    monkeypatch.setattr(bridge, "_fallbacks_logged", set(), raising=False)
    monkeypatch.setattr(vllm_logger, "handlers", [])
    monkeypatch.setattr(vllm_logger, "propagate", True)
    with caplog.at_level(logging.INFO):
        native_server.compile_grammar(StructuredOutputOptions.JSON, json.dumps({**MILLIS, "maximum": 6}),
                                      backend_name="structgate-auto")
    names = [r.name for r in caplog.records if "served by" in r.getMessage()]
    assert names == ["structgate.auto"]


# -- 3. ints msgpack cannot carry ------------------------------------------------------------------
def _validated(so, model_config, tokenizer, backend="native"):
    from vllm.config.structured_outputs import StructuredOutputsConfig
    from vllm.sampling_params import SamplingParams

    sp = SamplingParams(max_tokens=8, structured_outputs=so)
    sp._validate_structured_outputs(model_config, StructuredOutputsConfig(backend=backend), tokenizer)
    return sp


def _roundtrip(sp):
    from vllm.sampling_params import SamplingParams
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    return MsgpackDecoder(SamplingParams).decode(MsgpackEncoder().encode(sp))


HUGE = 10 ** 30


@pytest.mark.parametrize("schema", [
    {"type": "integer", "maximum": HUGE},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": -(2 ** 63) - 1}}, "required": ["n"]},
    {"type": "array", "items": {"enum": [1, 2 ** 64]}},
])
def test_schema_dict_with_an_int_past_msgpack_reaches_the_engine(plugin, native_server, hf_tokenizer, model_config,
                                                                 schema):
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions
    from vllm.v1.structured_output.request import get_structured_output_key

    sp = _validated(StructuredOutputsParams(json=schema), model_config, hf_tokenizer)
    back = _roundtrip(sp)  # what the engine core receives (raised OverflowError)
    assert json.loads(back.structured_outputs.json) == schema  # the same schema, exactly
    kind, spec = get_structured_output_key(back.structured_outputs)
    assert kind == StructuredOutputOptions.JSON
    g = native_server.compile_grammar(kind, spec)
    texts = {"integer": ["5", str(HUGE), str(HUGE + 1), "-3"],
             "object": ['{"n":1}', '{"n":' + str(-(2 ** 63) - 1) + '}', '{"n":' + str(-(2 ** 63) - 2) + '}'],
             "array": ["[1]", "[" + str(2 ** 64) + "]", "[3]", "[2,1]"]}[schema["type"]]
    assert _texts_accepted(g, native_server.sg_backend.vocab, texts) == _valid(schema, texts)


def test_schemas_msgpack_carries_are_left_as_dicts(plugin, hf_tokenizer, model_config):
    from vllm.sampling_params import StructuredOutputsParams

    for schema in ({"type": "integer", "maximum": 2 ** 64 - 1, "minimum": -(2 ** 63)}, {"const": True}):
        sp = _validated(StructuredOutputsParams(json=schema), model_config, hf_tokenizer)
        assert sp.structured_outputs.json == schema and isinstance(sp.structured_outputs.json, dict)
        assert _roundtrip(sp).structured_outputs.json == schema
    text = json.dumps({"type": "integer", "maximum": HUGE})
    sp = _validated(StructuredOutputsParams(json=text), model_config, hf_tokenizer)
    assert sp.structured_outputs.json == text


def test_chat_response_format_with_a_huge_int(plugin, hf_tokenizer, model_config):
    """The chat / completions ``response_format`` json_schema reaches the same validation."""
    from vllm.entrypoints.generate.base.protocol import ResponseFormat, structured_outputs_from_response_format

    schema = {"type": "object", "properties": {"big": {"type": "integer", "exclusiveMaximum": HUGE}}}
    rf = ResponseFormat.model_validate({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    so = structured_outputs_from_response_format(None, rf)
    assert isinstance(so.json, dict)
    sp = _validated(so, model_config, hf_tokenizer)
    assert json.loads(_roundtrip(sp).structured_outputs.json) == schema


def test_json_schema_for_engine_unit():
    from structgate.plugin.validation import json_schema_for_engine

    deep = {"a": [{"b": [0] * 3 + [-(2 ** 63) - 1]}]}
    for value, changed in ((deep, True), ({"x": 2 ** 64}, True), ({2 ** 64 - 1: 1}, False),
                           ({"x": [True, 1.5e300, -(2 ** 63)]}, False), ("{}", False), (None, False)):
        so = types.SimpleNamespace(json=value)
        assert json_schema_for_engine(so) is changed, value
        assert (json.loads(so.json) == value) if changed else (so.json is value)


# -- 4. STRUCTGATE_BACKEND_OPTIONS checked at startup ----------------------------------------------
def test_bad_backend_options_stop_config_validation(plugin, monkeypatch):
    from pydantic import ValidationError
    from vllm.config.structured_outputs import StructuredOutputsConfig

    monkeypatch.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"bogus": 1}')
    with pytest.raises(ValidationError) as ei:
        StructuredOutputsConfig(backend="native")
    msg = str(ei.value)
    assert "STRUCTGATE_BACKEND_OPTIONS" in msg and "unknown option 'bogus'" in msg
    # vLLM's own backends never read it
    assert StructuredOutputsConfig(backend="xgrammar").backend == "xgrammar"
    for bad, needle in (('{"max_whitspace": 2}', "did you mean 'max_whitespace'"),
                        ('{"whitespace": "tight"}', "whitespace"),
                        ('[1, 2]', "not a JSON object"),
                        ('{"auto_chain": "native,nope"}', "nope")):
        monkeypatch.setenv("STRUCTGATE_BACKEND_OPTIONS", bad)
        with pytest.raises(ValidationError, match="STRUCTGATE_BACKEND_OPTIONS") as ei:
            StructuredOutputsConfig(backend="structgate-auto")
        assert needle in str(ei.value), (bad, str(ei.value))
    monkeypatch.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"max_whitespace": 2, "auto_chain": "native"}')
    assert StructuredOutputsConfig(backend="native").backend == "native"
    assert StructuredOutputsConfig(backend="structgate-auto").backend == "structgate-auto"


def test_bad_backend_options_stop_the_cli(plugin, monkeypatch, capsys):
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from structgate.plugin.model import embedded_model_dir

    monkeypatch.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"bogus": 1}')
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    with pytest.raises(SystemExit) as ei:
        parser.parse_args(["--model", str(embedded_model_dir()), "--structured-output-backend", "native"])
    assert ei.value.code != 0
    err = capsys.readouterr().err
    assert "STRUCTGATE_BACKEND_OPTIONS" in err and "bogus" in err


def test_request_choice_checks_the_name_only(plugin, monkeypatch):
    """A request's vllm_xargs choice is checked as before (name, installed), whatever the options."""
    from structgate.plugin.request_backend import REQUEST_KEY, requested_backend

    monkeypatch.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"bogus": 1}')
    assert requested_backend(types.SimpleNamespace(extra_args={REQUEST_KEY: "native"})) == "native"
    with pytest.raises(ValueError, match=REQUEST_KEY):
        requested_backend(types.SimpleNamespace(extra_args={REQUEST_KEY: "nope"}))


# -- 5. lone surrogates msgpack cannot carry -------------------------------------------------------
#: schemas holding a lone surrogate (JSON's "\ud800"): valid JSON Schemas the native engine enforces
SURROGATE_SCHEMAS = [
    ({"enum": ["\ud800", "b"]}, ['"\\ud800"', '"b"', '"\\ud801"', '"\\udc00"', '"a"']),
    ({"const": "\ud83d"}, ['"\\ud83d"', '"\\ud83d\\ude00"', '"x"']),
    ({"type": "object", "properties": {"k\udfff": {"type": "integer"}}, "required": ["k\udfff"]},
     ['{"k\\udfff":1}', '{"k\\udfff":"1"}', '{"k":1}']),
]


def _msgpack_refuses(so):
    """The oracle: vLLM's request encoder cannot write these params as they are."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.serial_utils import MsgpackEncoder

    with pytest.raises(UnicodeEncodeError):
        MsgpackEncoder().encode(SamplingParams(max_tokens=8, structured_outputs=so))
    return True


@pytest.mark.parametrize("as_text", [False, True], ids=["dict", "text"])
@pytest.mark.parametrize("schema,texts", SURROGATE_SCHEMAS)
def test_schema_with_a_lone_surrogate_reaches_the_engine(plugin, native_server, hf_tokenizer, model_config,
                                                         schema, texts, as_text):
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.structured_output.request import get_structured_output_key

    given = json.dumps(schema, ensure_ascii=False) if as_text else schema
    assert _msgpack_refuses(StructuredOutputsParams(json=given))
    sp = _validated(StructuredOutputsParams(json=given), model_config, hf_tokenizer)
    back = _roundtrip(sp)  # what the engine core receives (raised UnicodeEncodeError: an empty 500)
    assert json.loads(back.structured_outputs.json) == schema  # the same schema, exactly
    g = native_server.compile_grammar(*get_structured_output_key(back.structured_outputs))
    assert _texts_accepted(g, native_server.sg_backend.vocab, texts) == _valid(schema, texts)


@pytest.mark.parametrize("field,value,where,char", [
    ("choice", ["\ud800", "b"], "structured_outputs.choice[0]", "U+D800 at character 0"),
    ("choice", ["a", "x\udcff"], "structured_outputs.choice[1]", "U+DCFF at character 1"),
    ("regex", "ab|c\ud83d", "structured_outputs.regex", "U+D83D at character 4"),
    ("grammar", 'root ::= "a" | "\udc00"', "structured_outputs.grammar", "U+DC00 at character 16"),
])
def test_lone_surrogate_outside_json_text_is_a_400_naming_it(plugin, hf_tokenizer, model_config, field, value,
                                                             where, char):
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import StructuredOutputsParams

    assert _msgpack_refuses(StructuredOutputsParams(**{field: value}))
    with pytest.raises(VLLMValidationError) as ei:
        _validated(StructuredOutputsParams(**{field: value}), model_config, hf_tokenizer)
    msg = str(ei.value)
    assert f"{where} holds a lone surrogate {char}" in msg and "InvalidConstraintError" in msg
    assert ei.value.parameter == f"structured_outputs.{field}"


def test_lone_surrogate_in_whitespace_pattern_is_a_400(plugin, hf_tokenizer, model_config):
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import StructuredOutputsParams

    so = StructuredOutputsParams(json={"type": "integer"}, whitespace_pattern="[ \ud800]*")
    assert _msgpack_refuses(so)
    with pytest.raises(VLLMValidationError, match=r"structured_outputs.whitespace_pattern holds a lone surrogate "
                                                  r"U\+D800 at character 2"):
        _validated(so, model_config, hf_tokenizer)


def test_surrogate_pair_as_two_characters_is_refused(plugin, hf_tokenizer, model_config):
    """Two characters U+D83D U+DE00 (a Python caller's str) cannot travel as JSON text exactly: the
    escapes read back as one character (the oracle: json's round trip)."""
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import StructuredOutputsParams

    schema = {"type": "object", "properties": {"a": {"const": "x\ud83d\ude00"}}}
    assert json.loads(json.dumps(schema)) != schema
    for given in (schema, json.dumps(schema, ensure_ascii=False)):
        assert _msgpack_refuses(StructuredOutputsParams(json=given))
        with pytest.raises(VLLMValidationError, match="surrogate pair as two characters") as ei:
            _validated(StructuredOutputsParams(json=given), model_config, hf_tokenizer)
        if isinstance(given, dict):
            assert "structured_outputs.json at /properties/a/const" in str(ei.value)


def test_structural_tag_text_with_a_lone_surrogate_reaches_the_engine(plugin, hf_tokenizer, model_config):
    from vllm.sampling_params import StructuredOutputsParams

    spec = {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<f>"], "tags": [
        {"begin": "<f>", "content": {"type": "json_schema", "json_schema": {"const": "\ud800"}}, "end": "</f>"}]}}
    text = json.dumps(spec, ensure_ascii=False)
    assert _msgpack_refuses(StructuredOutputsParams(structural_tag=text))
    sp = _validated(StructuredOutputsParams(structural_tag=text), model_config, hf_tokenizer)
    assert json.loads(_roundtrip(sp).structured_outputs.structural_tag) == spec


def test_params_without_lone_surrogates_are_left_alone(plugin, hf_tokenizer, model_config):
    from vllm.sampling_params import StructuredOutputsParams

    text = json.dumps({"const": "é\U0001f600"}, ensure_ascii=False)
    for kw in ({"json": {"const": "é\U0001f600"}}, {"json": text}, {"choice": ["é", "\U0001f600"]},
               {"regex": "[é\U0001f600]+"}):
        sp = _validated(StructuredOutputsParams(**kw), model_config, hf_tokenizer)
        (field, value), = kw.items()
        assert getattr(sp.structured_outputs, field) == value and getattr(_roundtrip(sp).structured_outputs,
                                                                          field) == value
