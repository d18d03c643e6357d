"""The vLLM plugin at unit level: the ledger, each patch, the CLI flag, request validation, the
bridge (oracle: Python ``re`` over the real Llama 3 vocabulary). No server is started here
(``tests/test_vllm_serve.py`` does that)."""
from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

vllm = pytest.importorskip("vllm")

from _vllm_engine import engine_backend, hf_tokenizer, model_config, plugin  # noqa: E402,F401  (fixtures)
from structgate.plugin import ledger  # noqa: E402


@pytest.fixture(autouse=True)
def _validation_budget(monkeypatch):
    """The request-validation tests here assert what the API server's validation finds, not its time
    budget (tests/test_plugin_validation_budget.py): past the default 0.05 s, which a cold path under
    load can reach, a bad request would be deferred to the engine's compile and raise nothing here."""
    monkeypatch.setenv("STRUCTGATE_VALIDATE_BUDGET_S", "60")


# -- import cost / laziness -------------------------------------------------------------------------
def test_import_structgate_does_not_import_vllm():
    code = ("import sys, structgate, structgate.plugin, structgate.plugin.ledger, structgate.plugin.cli;"
            "structgate.plugin.autoload(); print(sorted(m for m in sys.modules if m.split('.')[0] == 'vllm'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_autoload_before_vllm_import_patches_on_import():
    """import structgate first, vLLM later: the import hooks patch the config on vLLM's import."""
    code = textwrap.dedent("""
        import structgate.plugin as p
        assert p.autoload()
        from vllm.config.structured_outputs import StructuredOutputsConfig
        print(StructuredOutputsConfig(backend="native").backend)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "native"


# -- ledger -----------------------------------------------------------------------------------------
def test_ledger_entries_and_idempotent(plugin):
    names = {p.name for p in ledger.patches()}
    assert {"config-backend-names", "config-disable-any-whitespace", "vllmconfig-rebuild", "sampling-validate",
            "manager-grammar-init", "cli-flag"} <= names
    for p in ledger.patches():
        assert p.why and p.how and p.versions and p.removal, p.name
    assert {"config-backend-names", "sampling-validate", "manager-grammar-init", "cli-flag"} <= ledger.applied()
    from vllm.engine.arg_utils import EngineArgs
    from vllm.sampling_params import SamplingParams
    from vllm.v1.structured_output import StructuredOutputManager

    before = (SamplingParams._validate_structured_outputs, StructuredOutputManager.grammar_init,
              EngineArgs.__dict__["add_cli_args"].__func__, EngineArgs.__dict__["from_cli_args"].__func__)
    plugin.register()
    ledger.apply_all()
    for name in ("sampling-validate", "manager-grammar-init", "cli-flag"):
        ledger._applied.discard(name)  # force a second application: must not wrap twice
    ledger.apply_all()
    after = (SamplingParams._validate_structured_outputs, StructuredOutputManager.grammar_init,
             EngineArgs.__dict__["add_cli_args"].__func__, EngineArgs.__dict__["from_cli_args"].__func__)
    assert before == after
    for f in after:
        assert ledger.is_marked(f) and not ledger.is_marked(f.__structgate_original__)
    assert "cli-flag" in ledger.describe()


@pytest.mark.parametrize("version,ok", [("0.32.0", True), ("0.32.0+cpu", True), ("0.33.1", True),
                                        ("0.31.2", False), ("0.34.0", False), ("1.0.0", False)])
def test_version_check(version, ok, monkeypatch):
    monkeypatch.delenv(ledger.ENV_ALLOW_UNSUPPORTED, raising=False)
    if ok:
        assert ledger.check_vllm_version(version) == version
    else:
        with pytest.raises(ledger.VllmPatchError, match=re.escape(version)):
            ledger.check_vllm_version(version)


def test_checks_name_the_changed_symbol():
    def f(self, a, b):
        return a + b

    with pytest.raises(ledger.VllmPatchError, match=r"mod\.Cls\.f.*signature changed"):
        ledger.require_signature(f, ("self", "a"), "mod.Cls.f")
    with pytest.raises(ledger.VllmPatchError, match=r"mod\.Cls\.f.*no longer contains 'a \* b'"):
        ledger.require_source(f, ("a + b", "a * b"), "mod.Cls.f")
    with pytest.raises(ledger.VllmPatchError, match=r"mod\.X.*'nope'"):
        ledger.require_attr(types.SimpleNamespace(), "nope", "mod.X")


def test_real_patch_fails_loudly_on_changed_target():
    """The sampling patch applied to a vLLM whose validator changed raises, naming the symbol."""
    from structgate.plugin import patches

    class SamplingParams:
        def _validate_structured_outputs(self, model_config, structured_outputs_config):  # changed signature
            pass

    with pytest.raises(ledger.VllmPatchError, match="SamplingParams._validate_structured_outputs"):
        patches._apply_sampling(types.SimpleNamespace(SamplingParams=SamplingParams))


def test_post_import_hook_applies_lazily(tmp_path, monkeypatch):
    (tmp_path / "sg_fake_target.py").write_text("def hello():\n    return 'vllm'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("sg_fake_target", None)
    seen = []

    def apply(mod):
        orig = mod.hello
        ledger.require_signature(orig, (), "sg_fake_target.hello")
        mod.hello = ledger.mark(lambda: "structgate", orig)
        seen.append(mod.__name__)

    ledger.register_patch(ledger.Patch(name="test-fake", module="sg_fake_target", target="hello", why="test",
                                       how="test", versions="-", removal="-", apply=apply))
    try:
        ledger._schedule(ledger._patches["test-fake"])
        assert seen == []  # not imported yet
        import sg_fake_target

        assert seen == ["sg_fake_target"] and sg_fake_target.hello() == "structgate"
        assert "test-fake" in ledger.applied()
    finally:
        ledger._patches.pop("test-fake", None)
        ledger._applied.discard("test-fake")
        sys.modules.pop("sg_fake_target", None)


def test_superseded_entry_is_skipped_not_failed_and_provided():
    """An entry whose feature check says the running vLLM already does its job is recorded as
    skipped (not applied, not an error), counts as provided, and its patch function never runs; when
    the check says no, the entry applies as usual."""
    ran = []
    mods = {"native": types.SimpleNamespace(does_it=True), "plain": types.SimpleNamespace(does_it=False)}
    for key, mod in mods.items():
        name = f"test-superseded-{key}"
        ledger.register_patch(ledger.Patch(
            name=name, module="sg_fake_mod", target="x", why="t", how="t", versions="-", removal="-",
            apply=lambda m, n=name: ran.append(n), superseded=lambda m: "vLLM does it" if m.does_it else None))
    try:
        ledger._run(ledger._patches["test-superseded-native"], mods["native"])
        ledger._run(ledger._patches["test-superseded-plain"], mods["plain"])
        assert ran == ["test-superseded-plain"]
        assert ledger.skipped()["test-superseded-native"].endswith("vLLM does it")
        assert "test-superseded-native" not in ledger.applied() and "test-superseded-native" not in ledger.errors()
        assert ledger.provides("test-superseded-native") and ledger.provides("test-superseded-plain")
        assert not ledger.provides("test-no-such-entry")
        assert "(skipped)" in ledger.describe()
    finally:
        for key in mods:
            name = f"test-superseded-{key}"
            ledger._patches.pop(name, None)
            ledger._applied.discard(name)
            ledger._skipped.pop(name, None)
            ledger._superseded.discard(name)


# -- 1. config --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["native", "structgate-xgrammar", "sg-llguidance", "auto", "xgrammar",
                                  "guidance", "outlines", "lm-format-enforcer"])
def test_config_accepts_names(plugin, name):
    from pydantic import TypeAdapter
    from vllm.config import VllmConfig
    from vllm.config.structured_outputs import StructuredOutputsConfig

    assert StructuredOutputsConfig(backend=name).backend == name
    assert TypeAdapter(StructuredOutputsConfig).validate_json(json.dumps({"backend": name})).backend == name
    assert VllmConfig.__pydantic_fields__  # rebuilt and usable


def test_config_disable_any_whitespace_for_structgate_names(plugin):
    """vLLM's validator allows disable_any_whitespace only for xgrammar/guidance; the
    config-disable-any-whitespace patch lets structgate names have it (compact JSON whitespace) and
    keeps every other check."""
    from pydantic import ValidationError
    from vllm.config.structured_outputs import StructuredOutputsConfig

    from structgate import Constraint
    from structgate.plugin.bridge import backend_options

    cfg = StructuredOutputsConfig(backend="native", disable_any_whitespace=True)
    assert cfg.disable_any_whitespace and cfg.backend == "native"
    assert StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True).disable_any_whitespace
    with pytest.raises(ValidationError, match="disable_any_whitespace is only supported"):
        StructuredOutputsConfig(backend="outlines", disable_any_whitespace=True)
    with pytest.raises(ValidationError, match="disable_additional_properties"):
        StructuredOutputsConfig(backend="native", disable_any_whitespace=True, disable_additional_properties=True)

    class _VC:
        structured_outputs_config = cfg

    assert backend_options(_VC())["whitespace"] == "compact"
    from structgate.backends.registry import get_backend
    from structgate.bitmask import allocate_bitmask
    from structgate.cli.check import check_text
    from structgate.testing import tiny_vocabulary

    vocab = tiny_vocabulary()
    g = get_backend("native", vocab, **backend_options(_VC())).compile(
        Constraint.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}))
    m = g.matcher()
    bm = allocate_bitmask(1, vocab.vocab_size)
    assert check_text(m, vocab, '{"a":1}', bm)["accepted"]
    assert not check_text(m, vocab, '{"a": 1}', bm)["accepted"]


def test_config_rejects_unknown_name(plugin):
    from pydantic import ValidationError
    from vllm.config.structured_outputs import StructuredOutputsConfig

    with pytest.raises(ValidationError) as ei:
        StructuredOutputsConfig(backend="no-such-backend")
    msg = str(ei.value)
    assert "unknown structured-output backend 'no-such-backend'" in msg
    assert "native" in msg and "xgrammar" in msg


def test_config_rejects_unavailable_backend(plugin):
    from pydantic import ValidationError
    from vllm.config.structured_outputs import StructuredOutputsConfig

    from structgate.backends import registry

    registry.register_backend(registry.BackendSpec(name="sg-test-missing", factory="x:Y",
                                                   requires=("definitely_not_installed_pkg",),
                                                   install_hint="pip install nothing"))
    try:
        with pytest.raises(ValidationError, match="not available.*pip install nothing"):
            StructuredOutputsConfig(backend="sg-test-missing")
    finally:
        registry._extra[:] = [s for s in registry._extra if s.name != "sg-test-missing"]
        registry._specs = None


# -- 4. CLI flag --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _local_model() -> str:
    """The embedded model's folder: a local path, so that vLLM's argument handling never looks a
    model name up on the Hugging Face Hub (the tests run offline, HF_HUB_OFFLINE=1 in conftest.py,
    where vLLM raises LocalEntryNotFoundError for a name such as "m")."""
    from structgate.plugin.model import embedded_model_dir

    return str(embedded_model_dir())


def _parse(argv):
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(argv)
    return args, AsyncEngineArgs.from_cli_args(args)


def test_cli_flag_maps_to_config(plugin):
    args, ea = _parse(["--model", _local_model(), "--structured-output-backend", "native"])
    assert ea.structured_outputs_config.backend == "native"
    assert args.structured_outputs_config.backend == "native"  # written back for other processes
    ea2 = type(ea).from_cli_args(args)  # re-read (extra API servers): no conflict
    assert ea2.structured_outputs_config.backend == "native"


def test_cli_disable_any_whitespace_with_structgate_backend(plugin):
    # the JSON config is validated on its own, before --structured-output-backend is merged: name the
    # backend inside it (as vLLM users do for xgrammar)
    args, ea = _parse(["--model", _local_model(), "--structured-outputs-config",
                       '{"backend": "native", "disable_any_whitespace": true}'])
    so = ea.structured_outputs_config
    assert so.backend == "native" and so.disable_any_whitespace


def test_cli_plain_config_flag(plugin):
    _, ea = _parse(["--model", _local_model(), "--structured-outputs-config.backend", "native"])
    assert ea.structured_outputs_config.backend == "native"
    _, ea = _parse(["--model", _local_model()])
    assert ea.structured_outputs_config.backend == "auto"


def test_cli_flag_conflict_is_an_error(plugin):
    with pytest.raises(SystemExit, match="conflicts with --structured-outputs-config.backend xgrammar"):
        _parse(["--model", _local_model(), "--structured-outputs-config.backend", "xgrammar",
                "--structured-output-backend", "native"])


def test_cli_flag_unknown_name(plugin, capsys):
    with pytest.raises(SystemExit) as ei:
        _parse(["--model", _local_model(), "--structured-output-backend", "nope"])
    assert ei.value.code == 2
    assert "unknown structured-output backend 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("argv,want", [
    (["serve", "m", "--structured-output-backend", "native"], ["serve", "m", "--structured-outputs-config.backend", "native"]),
    (["serve", "--structured-output-backend=native", "m"], ["serve", "m", "--structured-outputs-config.backend", "native"]),
    (["serve", "m", "--structured-outputs-config.backend", "native", "--structured-output-backend", "native"],
     ["serve", "m", "--structured-outputs-config.backend", "native"]),
    (["serve", "m"], ["serve", "m"]),
])
def test_launcher_rewrite(argv, want):
    from structgate.plugin.cli import rewrite_argv

    assert rewrite_argv(argv) == want


def test_launcher_rewrite_errors():
    from structgate.plugin.cli import rewrite_argv

    with pytest.raises(SystemExit, match="conflicts"):
        rewrite_argv(["serve", "m", "--structured-outputs-config.backend=xgrammar", "--structured-output-backend", "native"])
    with pytest.raises(SystemExit, match="needs a backend name"):
        rewrite_argv(["serve", "m", "--structured-output-backend"])


# -- 2. request validation ------------------------------------------------------------------------
def _validate(so_kwargs, backend, tokenizer, model_config):
    from vllm.config.structured_outputs import StructuredOutputsConfig
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    sp = SamplingParams(max_tokens=8, structured_outputs=StructuredOutputsParams(**so_kwargs))
    sp._validate_structured_outputs(model_config, StructuredOutputsConfig(backend=backend), tokenizer)
    return sp.structured_outputs


@pytest.mark.parametrize("so", [{"regex": "[a-z]{2,5}"}, {"choice": ["yes", "no"]}, {"json_object": True},
                                {"json": {"type": "object", "properties": {"a": {"type": "integer"}}}},
                                {"json": '{"type": "array", "items": {"type": "boolean"}}'}])
def test_validation_routes_to_structgate(plugin, hf_tokenizer, model_config, so):
    out = _validate(so, "native", hf_tokenizer, model_config)
    assert out._backend == "native" and type(out._backend) is str and out._backend_was_auto is False


def test_validation_invalid_regex_names_the_problem(plugin, hf_tokenizer, model_config):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError) as ei:
        _validate({"regex": "ab[c"}, "native", hf_tokenizer, model_config)
    msg = str(ei.value)
    assert "'native'" in msg and "GrammarSyntaxError" in msg and "position" in msg
    assert ei.value.parameter == "structured_outputs.regex"


def test_validation_invalid_schema(plugin, hf_tokenizer, model_config):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="GrammarSyntaxError|not valid JSON"):
        _validate({"json": '{"type": "object",'}, "native", hf_tokenizer, model_config)
    with pytest.raises(VLLMValidationError, match="structgate"):
        _validate({"json": {"type": "string", "pattern": "(unclosed"}}, "native", hf_tokenizer, model_config)


def test_validation_unsupported_kind_is_per_request(plugin, hf_tokenizer, model_config):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="does not support constraint kind 'grammar'"):
        _validate({"grammar": "start: \"a\"+"}, "structgate-outlines-core", hf_tokenizer, model_config)
    # native has every kind: a grammar request validates (and a bad one is a typed error)
    _validate({"grammar": "start: \"a\"+"}, "native", hf_tokenizer, model_config)
    with pytest.raises(VLLMValidationError, match="undefined rule"):
        _validate({"grammar": "start: a\n"}, "native", hf_tokenizer, model_config)


def test_validation_keeps_vllm_generic_checks(plugin, hf_tokenizer, model_config):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="cannot be an empty list"):
        _validate({"choice": []}, "native", hf_tokenizer, model_config)
    with pytest.raises(VLLMValidationError, match="NUL"):
        _validate({"regex": "a\x00b"}, "native", hf_tokenizer, model_config)
    deep = {"type": "array", "items": {}}
    node = deep
    for _ in range(80):
        node["items"] = {"type": "array", "items": {}}
        node = node["items"]
    with pytest.raises(VLLMValidationError, match="nested too deeply"):
        _validate({"json": deep}, "native", hf_tokenizer, model_config)


def _failures() -> dict:
    from structgate.plugin import metrics

    return {tuple(k[1:]): v for k, v in metrics.snapshot()["counters"] if k[0] == "compile_failures_total"}


def test_validation_refusals_are_counted_once_by_stage(plugin, hf_tokenizer, model_config):
    """Regression: a request the API server refused in validation was not counted in
    structgate_compile_failures_total (only engine compiles were)."""
    from vllm.exceptions import VLLMValidationError

    before = _failures()
    for so in ({"regex": "ab[c"}, {"json": '{"type": "object",'}, {"json": {"type": "strin"}},
               {"structural_tag": '{"type": "structural_tag", "format": {"type": "nosuch"}}'}):
        with pytest.raises(VLLMValidationError):
            _validate(so, "native", hf_tokenizer, model_config)
    _validate({"regex": "[a-z]+"}, "native", hf_tokenizer, model_config)  # accepted: not counted
    after = _failures()
    delta = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert delta == {("native", "regex", "syntax", "validate"): 1, ("native", "json_schema", "syntax", "validate"): 2,
                     ("native", "structural_tag", "invalid", "validate"): 1}, delta


BAD_TAGS = [
    ({"type": "structural_tag", "format": {"type": "json_schema", "json_schema": {"type": "strin"}}},
     "GrammarSyntaxError", "structural_tag /format/json_schema/type"),
    ({"type": "structural_tag", "structures": [{"begin": "<f>", "schema": {"type": "objec"}, "end": "</f>"}],
      "triggers": ["<f>"]}, "GrammarSyntaxError", "structural_tag /structures/0/schema/type"),
    ({"type": "structural_tag", "format": {"type": "regex", "pattern": "[a-"}}, "GrammarSyntaxError",
     "structural_tag /format/pattern"),
    ({"type": "structural_tag", "format": {"type": "nosuch"}}, "InvalidConstraintError", "/format/type"),
]


@pytest.mark.parametrize("tag,error,where", BAD_TAGS)
def test_structural_tag_errors_name_the_cause_on_a_structgate_server(plugin, hf_tokenizer, model_config,
                                                                     monkeypatch, tag, error, where):
    """Regression: vLLM's OpenAI front end checked every structural tag with xgrammar first and
    answered 'Invalid structured_outputs structural_tag specification.' with no cause; on a server
    running a structgate backend the tag is checked by that engine, and the 400 names the field."""
    import vllm.entrypoints.generate.base.protocol as proto
    from vllm.exceptions import VLLMValidationError

    from structgate.plugin import patches

    for argv in (["--structured-outputs-config.backend", "native"], ["--structured-output-backend", "native"]):
        monkeypatch.setattr(patches, "_served_backend", None)
        _parse(["--model", _local_model(), *argv])  # as `vllm serve` does, either spelling
        assert patches.served_backend() == "native"
    payload = json.dumps(tag)
    proto.validate_structural_tag_payload(payload, parameter="structured_outputs")  # deferred to the engine
    proto.validate_structured_outputs_structural_tag({"structural_tag": payload})
    with pytest.raises(VLLMValidationError) as ei:
        _validate({"structural_tag": payload}, "native", hf_tokenizer, model_config)
    msg = str(ei.value)
    assert "'native' (structgate)" in msg and error in msg and where in msg, msg
    assert ei.value.parameter == "structured_outputs.structural_tag"
    # vLLM's vocabulary-free checks stay in the front end
    with pytest.raises(VLLMValidationError, match="empty"):
        proto.validate_structural_tag_payload(" ", parameter="structured_outputs")
    deep = {"type": "array", "items": {}}
    for _ in range(80):
        deep = {"type": "array", "items": deep}
    too_deep = json.dumps({"type": "structural_tag", "format": {"type": "json_schema", "json_schema": deep}})
    with pytest.raises(VLLMValidationError, match="nested too deeply"):
        proto.validate_structural_tag_payload(too_deep, parameter="structured_outputs")
    # a valid tag passes both
    good = json.dumps({"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}})
    proto.validate_structural_tag_payload(good, parameter="structured_outputs")
    _validate({"structural_tag": good}, "native", hf_tokenizer, model_config)


def test_chat_structural_tag_shape_errors_name_the_field():
    """Regression: a chat response_format tag that failed vLLM's request model (a structure without
    'begin', 'end': 5) was 'Invalid response_format structural_tag specification.' with no cause.
    In a fresh process that imports vLLM's OpenAI request models before the plugin, as `vllm serve`
    does, so the name the chat module imported must be rebound too."""
    code = textwrap.dedent("""
        import json
        import vllm.entrypoints.openai.chat_completion.protocol as chat
        import structgate.plugin as p
        p.register()
        from structgate.plugin import ledger, patches
        assert ledger.is_marked(chat.validate_structural_tag_response_format)
        out = {}
        for served in ("native", "xgrammar"):
            patches._served_backend = served
            for i, rf in enumerate([
                    {"type": "structural_tag"},
                    {"type": "structural_tag", "structures": [{"schema": {}, "end": "x"}], "triggers": ["<"]},
                    {"type": "structural_tag", "structures": [{"begin": "<a", "schema": {}, "end": 5}],
                     "triggers": ["<"]}]):
                try:
                    chat.ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                               response_format=rf)
                    out[f"{served}{i}"] = "accepted"
                except Exception as e:
                    out[f"{served}{i}"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert "needs a 'format'" in out["native0"], out
    assert "/structures/0/begin: Field required" in out["native1"], out
    assert "/structures/0/end: Input should be a valid string" in out["native2"], out
    for i in range(3):  # servers of vLLM's own backends: vLLM's message, unchanged
        assert out[f"xgrammar{i}"].startswith("VLLMValidationError: Invalid response_format structural_tag "
                                              "specification. "), out


def test_structural_tag_front_end_unchanged_for_vllm_servers(plugin, monkeypatch):
    import vllm.entrypoints.generate.base.protocol as proto
    from vllm.exceptions import VLLMValidationError

    from structgate.plugin import patches

    monkeypatch.setattr(patches, "_served_backend", None)
    _parse(["--model", _local_model(), "--structured-output-backend", "xgrammar"])
    assert patches.served_backend() == "xgrammar"
    for served in ("xgrammar", None):  # a vLLM backend, or no server command line (offline LLM())
        monkeypatch.setattr(patches, "_served_backend", served)
        with pytest.raises(VLLMValidationError, match="Invalid structured_outputs structural_tag specification"):
            proto.validate_structural_tag_payload(json.dumps(BAD_TAGS[0][0]), parameter="structured_outputs")


def test_vllm_names_unchanged(plugin, hf_tokenizer, model_config):
    out = _validate({"regex": "[a-z]+"}, "xgrammar", hf_tokenizer, model_config)
    assert out._backend == "xgrammar"
    out = _validate({"regex": "[a-z]+"}, "auto", hf_tokenizer, model_config)
    assert out._backend in ("xgrammar", "guidance", "outlines") and out._backend_was_auto


# -- 3. bridge ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vllm_backend(plugin, hf_tokenizer, model_config):
    return engine_backend("native", hf_tokenizer, model_config)


def _allowed(grammar, bitmask, row=0):
    from structgate.bitmask import allowed_ids

    grammar.fill_bitmask(bitmask, row)
    return set(allowed_ids(bitmask[row].numpy(), 128256).tolist())


def test_bridge_mask_matches_re_oracle(vllm_backend):
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    g = vllm_backend.compile_grammar(StructuredOutputOptions.REGEX, "[0-9]{3}")
    assert g.matcher is not None and vllm_backend.sg_backend.name == "native"
    bm = vllm_backend.allocate_token_bitmask(2)
    assert bm.shape == (2, 128256 // 32) and bm.dtype.__str__() == "torch.int32" and bool((bm == -1).all())
    vocab = vllm_backend.sg_backend.vocab
    want = {i for i, b in enumerate(vocab.token_bytes) if b and re.fullmatch(rb"[0-9]{1,3}", b)}
    assert _allowed(g, bm, 1) == want
    two = next(i for i in want if len(vocab.token_bytes[i]) == 2)
    assert g.accept_tokens("r", [two])
    want1 = {i for i, b in enumerate(vocab.token_bytes) if b and re.fullmatch(rb"[0-9]", b)}
    assert _allowed(g, bm) == want1


def test_bridge_accept_validate_rollback_terminate(vllm_backend, tmp_path, monkeypatch):
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    stats = tmp_path / "stats.jsonl"
    monkeypatch.setenv("STRUCTGATE_STATS_FILE", str(stats))
    vocab = vllm_backend.sg_backend.vocab
    eos = vocab.eos_token_ids[0]
    g = vllm_backend.compile_grammar(StructuredOutputOptions.CHOICE, json.dumps(["yes", "no"]))
    yes = vocab.encode("yes")
    bad = vocab.encode("maybe")
    assert g.validate_tokens(bad) == []
    assert g.validate_tokens([*yes, eos, eos, *yes]) == [*yes, eos]  # stops after EOS
    assert g.num_processed_tokens == 0 and not g.is_terminated()
    assert g.accept_tokens("r", [*yes, eos, 123])  # tokens after termination are ignored
    assert g.is_terminated() and g.num_processed_tokens == len(yes) + 1
    g.rollback(1)
    assert not g.is_terminated() and g.matcher.is_accepting()
    bm = vllm_backend.allocate_token_bitmask(1)
    assert _allowed(g, bm) == set(vocab.eos_token_ids)
    g.rollback(len(yes))
    assert g.num_processed_tokens == 0
    assert not g.accept_tokens("r", bad[:1]) or bad[0] in vocab.encode("no")[:1]
    g.reset()
    assert g.num_processed_tokens == 0 and not g.is_terminated()
    events = [json.loads(line) for line in stats.read_text().splitlines()]
    rb = [e for e in events if e["event"] == "rollback"]
    assert [e["n"] for e in rb] == [1, len(yes)] and all(e["backend"] == "native" for e in rb)


def test_bridge_request_kinds(vllm_backend):
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from structgate import Constraint
    from structgate.errors import ConstraintKindError
    from structgate.plugin.bridge import constraint_from_key

    assert constraint_from_key(StructuredOutputOptions.JSON, '{"type": "integer"}').value == {"type": "integer"}
    assert constraint_from_key(StructuredOutputOptions.JSON_OBJECT, "").kind == "json_object"
    assert constraint_from_key(StructuredOutputOptions.CHOICE, '["a", "b"]').value == ("a", "b")
    assert constraint_from_key(StructuredOutputOptions.GRAMMAR, 'start: "a"').grammar_format == "lark"
    assert constraint_from_key(StructuredOutputOptions.GRAMMAR, 'root ::= "a"').grammar_format == "gbnf"
    st = constraint_from_key(StructuredOutputOptions.STRUCTURAL_TAG, '{"type": "structural_tag", "format": {}}')
    assert st.kind == "structural_tag" and st.value["type"] == "structural_tag"
    g = vllm_backend.compile_grammar(StructuredOutputOptions.JSON_OBJECT, "")
    assert not g.is_terminated()
    gg = vllm_backend.compile_grammar(StructuredOutputOptions.GRAMMAR, 'start: "a"')  # native has grammars
    assert gg.matcher.advance(vllm_backend.sg_backend.vocab.encode("a")) and gg.matcher.is_accepting()
    with pytest.raises(ConstraintKindError, match="grammar"):
        vllm_backend.sg_backend.__class__.compile(
            type("NoGrammar", (vllm_backend.sg_backend.__class__,), {"supported_kinds": frozenset({"regex"})})(
                vllm_backend.sg_backend.vocab), Constraint.grammar('start: "a"'))
    # compile cache: same constraint -> same compiled grammar, fresh matcher
    a = vllm_backend.compile_grammar(StructuredOutputOptions.REGEX, "x+")
    b = vllm_backend.compile_grammar(StructuredOutputOptions.REGEX, "x+")
    assert a.matcher is not b.matcher


@pytest.mark.parametrize("limit,remembered", [
    ("compile_timeout_s", False), ("step_timeout_s", False), ("compile_process", False),
    ("row_budget_bytes", False), ("max_dfa_states", True)])
def test_bridge_remembers_only_failures_the_constraint_always_gives(vllm_backend, monkeypatch, limit, remembered):
    """A compile refused for a reason of the moment (time, a compile worker that died, rows held by
    other requests) is compiled again by the next request of that constraint; a limit of the
    constraint itself is answered from the failure cache without compiling (a dead worker's
    ``compile_process`` used to fail the constraint until it left the cache)."""
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from structgate.errors import CompileLimitError

    calls = []
    real = vllm_backend.sg_backend.compile

    def flaky(c):
        calls.append(c)
        if len(calls) == 1:
            raise CompileLimitError(limit, 2, 1, "test")
        return real(c)

    monkeypatch.setattr(vllm_backend.sg_backend, "compile", flaky)
    pattern = f"flaky-{limit}[0-9]+"
    with pytest.raises(CompileLimitError):
        vllm_backend.compile_grammar(StructuredOutputOptions.REGEX, pattern)
    if remembered:
        with pytest.raises(CompileLimitError):
            vllm_backend.compile_grammar(StructuredOutputOptions.REGEX, pattern)
        assert len(calls) == 1
    else:
        g = vllm_backend.compile_grammar(StructuredOutputOptions.REGEX, pattern)
        assert len(calls) == 2 and not g.is_terminated()


def test_manager_builds_structgate_backend(plugin, vllm_backend, hf_tokenizer, model_config, monkeypatch):
    """grammar_init builds the bridge for a structgate name and leaves vLLM's chain to the original."""
    from vllm.v1.structured_output import StructuredOutputManager

    from structgate.plugin import bridge

    built = []

    class FakeBackend:
        def __init__(self, vllm_config, tokenizer, vocab_size, backend_name):
            built.append((vocab_size, backend_name))

        def compile_grammar(self, *a, **k):
            return "grammar"

    monkeypatch.setattr(bridge, "StructgateVllmBackend", FakeBackend)
    mgr = StructuredOutputManager.__new__(StructuredOutputManager)
    mgr.backend = None
    mgr.vllm_config = types.SimpleNamespace(model_config=model_config)
    mgr.tokenizer = hf_tokenizer
    mgr._use_async_grammar_compilation = False
    v033 = hasattr(StructuredOutputManager, "_masked_reasoning_ends")  # 0.33: __init__ sets backend_name
    if v033:
        mgr.backend_name = None
    so = types.SimpleNamespace(_backend="native")
    req = types.SimpleNamespace(
        structured_output_request=types.SimpleNamespace(structured_output_key=("REGEX", "a"), grammar=None),
        sampling_params=types.SimpleNamespace(structured_outputs=so, all_stop_token_ids={128009}),
        request_id="r1")
    mgr.grammar_init(req)
    assert built == [(128256, "native")] and isinstance(mgr.backend, FakeBackend)
    assert req.structured_output_request.grammar == "grammar"
    if v033:
        assert mgr.backend_name == "native"


def test_bridge_unit_vocab_width(vllm_backend):
    vocab = vllm_backend.sg_backend.vocab
    assert vocab.vocab_size == 128256
    assert {128001, 128009} <= set(vocab.eos_token_ids)
    assert np.all([vocab.token_bytes[i] == b"" for i in vocab.eos_token_ids])


def test_launcher_cpu_env_shim(monkeypatch):
    import importlib.metadata as md

    from structgate.plugin import cli

    monkeypatch.setattr(md, "version", md.version)  # restored after the test
    env: dict = {}
    was_cpu = cli.setup_cpu_env(env)

    if was_cpu:
        assert "cpu" in md.version("vllm")
        assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    else:
        assert md.version("vllm")


def test_ledger_cli_lists_everything(plugin, capsys):
    from structgate.plugin import cli

    assert cli.main(["--ledger"]) == 0
    out = capsys.readouterr().out
    for name in ("config-backend-names", "sampling-validate", "manager-grammar-init", "cli-flag"):
        assert f"[{name}]" in out and "why:" in out and "removal:" in out
    assert "(FAILED)" not in out


def test_argparse_namespace_roundtrip(plugin):
    from structgate.plugin.patches import map_backend_flag

    ns = argparse.Namespace(structured_output_backend="native", structured_outputs_config={"backend": "auto"})
    map_backend_flag(ns)
    assert ns.structured_outputs_config.backend == "native"
    ns = argparse.Namespace(structured_output_backend=None, structured_outputs_config=None)
    assert map_backend_flag(ns).structured_outputs_config is None


def test_install_cpu_shim_writes_metadata_only_dist(tmp_path, monkeypatch):
    import importlib.metadata as md

    from structgate.plugin import cli

    class FakeDist:
        version = "0.32.0"

        def locate_file(self, name):
            return tmp_path / name

    monkeypatch.setattr(cli, "is_vllm_cpu", lambda: True)
    monkeypatch.setattr(cli, "_has_vllm_dist", lambda: False)
    monkeypatch.setattr(md, "distribution", lambda name: FakeDist() if name == "vllm-cpu" else None)
    path = cli.install_cpu_shim()
    d = tmp_path / "vllm-0.32.0+cpu.dist-info"
    assert path == str(d)
    assert sorted(p.name for p in d.iterdir()) == ["INSTALLER", "METADATA", "RECORD"]
    monkeypatch.undo()
    found = md.PathDistribution(d)
    assert found.metadata["Name"] == "vllm" and found.version == "0.32.0+cpu"
    assert len(found.files) == 3


# -- structgate demo (no server) ---------------------------------------------------------------------
def test_demo_requests_and_oracles(tmp_path):
    from structgate.cli import demo

    f = tmp_path / "extra.jsonl"
    f.write_text('# comment\n{"title": "small", "type": "integer", "minimum": 1, "maximum": 3}\n\ntrue\n')
    extra = demo.load_schemas(str(f))
    assert [n for n, _ in extra] == ["extra.jsonl:2 (small)", "extra.jsonl:4"]
    reqs = demo.build_requests(extra)
    kinds = [r["kind"] for r in reqs]
    assert kinds.count("json_schema") == len(demo.DEMO_SCHEMAS) + 2 and "regex" in kinds and "choice" in kinds
    chat = reqs[0]["body"]
    assert chat["response_format"]["type"] == "json_schema" and "schema" in chat["response_format"]["json_schema"]
    assert all(r["path"] == "/v1/completions" and "structured_outputs" in r["body"] for r in reqs if r["kind"] != "json_schema")
    # the oracles really reject
    person = demo.DEMO_SCHEMAS[0][1]
    good = '{"name": "a", "age": 3, "address": {"city": "x", "zip": "12345"}}'
    assert demo.check_output(("json_schema", person), good) == (True, None)
    assert not demo.check_output(("json_schema", person), good.replace("12345", "1234"))[0]
    assert not demo.check_output(("json_schema", person), good.replace('"age": 3', '"age": 300'))[0]
    assert not demo.check_output(("json_schema", person), good[:-1])[0]
    assert demo.check_output(("regex", r"#[0-9a-f]{6}"), "#a0b1c2")[0]
    assert not demo.check_output(("regex", r"#[0-9a-f]{6}"), "#a0b1c2 ")[0]
    assert not demo.check_output(("choice", ["yes", "no"]), "yes ")[0]


def test_demo_user_errors_exit_2_without_a_server(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"type": "object"}\n[1, 2]\n')
    for argv, needle in ((["demo", "--backend", "no-such"], "no structured-output backend named 'no-such'"),
                         (["demo", "--schemas", str(f)], "line 2")):
        out = subprocess.run([sys.executable, "-m", "structgate.cli", *argv], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and needle in out.stderr, (out.returncode, out.stderr[-1000:])


def test_embedded_model_folder():
    from transformers import AutoConfig, AutoTokenizer

    from structgate.plugin.model import TINY_LLAMA3_CONFIG, embedded_model_dir

    d = embedded_model_dir()
    assert d == embedded_model_dir()  # cached, same hash
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"} <= {p.name for p in d.iterdir()}
    cfg = AutoConfig.from_pretrained(str(d))
    assert cfg.architectures == ["LlamaForCausalLM"] and cfg.vocab_size == 128256
    assert cfg.hidden_size // cfg.num_attention_heads == TINY_LLAMA3_CONFIG["head_dim"] == 32
    tok = AutoTokenizer.from_pretrained(str(d))
    assert len(tok) == 128256 and tok.chat_template
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert "<|start_header_id|>user<|end_header_id|>" in text and text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
