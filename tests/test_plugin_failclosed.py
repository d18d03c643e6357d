"""Patches fail closed: a changed vLLM (renamed symbol, changed signature, changed fill loop,
unsupported release) never breaks vLLM's imports or vLLM's own backends; structgate names are then
refused with a message naming the vLLM version and the patch.

Each scenario runs in a fresh interpreter (patches change vLLM's classes process-wide); the
"changed vLLM" is simulated by editing the real vLLM 0.32 class right after its module executes,
before structgate's patch for it runs (a ledger entry of order 0 on the same module), or before
:func:`structgate.plugin.register` for modules already imported."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("vllm")

from structgate.plugin import ledger  # noqa: E402

PRELUDE = """
import json, logging, sys
from structgate.plugin import ledger
RESULT = {}
def refused(name):
    from vllm.config.structured_outputs import StructuredOutputsConfig
    try:
        StructuredOutputsConfig(backend=name)
    except Exception as e:
        return str(e)
    return None
"""


DRIVER = """
import json, os, sys, traceback
scenarios = json.load(open(sys.argv[1]))
out = sys.argv[2]
# heavy, untargeted imports once (the scenarios patch vllm.sampling_params / vllm.v1.structured_output,
# imported fresh in each forked child)
import torch, pydantic, transformers  # noqa
import vllm.config, vllm.config.vllm, vllm.platforms
vllm.platforms.current_platform.is_cpu()
for name, code in scenarios.items():
    pid = os.fork()
    if pid == 0:
        err = os.open(os.path.join(out, name + ".err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(err, 2)
        g = {}
        try:
            exec(code, g)
            res = g["RESULT"]
        except BaseException:
            res = {"_error": traceback.format_exc()}
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(res, f)
        sys.stderr.flush()
        os._exit(0)
    os.waitpid(pid, 0)
"""

SCENARIOS: dict[str, str] = {}


def scenario(body: str):
    """Register a scenario (run in the module's driver); the test reads its RESULT."""
    def deco(fn):
        SCENARIOS[fn.__name__] = PRELUDE + textwrap.dedent(body)
        return fn
    return deco


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    import os

    d = tmp_path_factory.mktemp("failclosed")
    (d / "scenarios.json").write_text(json.dumps(SCENARIOS))
    env = {**os.environ, "STRUCTGATE_NO_VLLM_PATCH": "1"}  # no autoload at import
    env.pop("STRUCTGATE_ALLOW_UNSUPPORTED_VLLM", None)
    out = subprocess.run([sys.executable, "-c", DRIVER, str(d / "scenarios.json"), str(d)], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-5000:]
    return d


def _result(results, name: str) -> dict:
    path = results / f"{name}.json"
    assert path.exists(), (results / f"{name}.err").read_text()[-4000:] if (results / f"{name}.err").exists() else name
    res = json.loads(path.read_text())
    res["_stderr"] = (results / f"{name}.err").read_text() if (results / f"{name}.err").exists() else ""
    assert "_error" not in res, res["_error"] + res["_stderr"][-3000:]
    return res


@scenario("""
        def simulate(mod):   # a vLLM release where grammar_init takes one more parameter
            def grammar_init(self, request, priority):
                pass
            mod.StructuredOutputManager.grammar_init = grammar_init
        ledger.register_patch(ledger.Patch(name="test-simulate-change", module="vllm.v1.structured_output",
            target="-", why="-", how="-", versions="-", removal="-", apply=simulate, order=0))
        import structgate.plugin
        structgate.plugin.register()               # hooks installed, nothing raised
        import vllm.v1.structured_output as so      # the hook runs the patches here
        RESULT["import_ok"] = hasattr(so, "StructuredOutputManager")
        RESULT["errors"] = sorted(ledger.errors())
        RESULT["reason"] = ledger.disabled_reason()
        RESULT["native"] = refused("native")
        RESULT["xgrammar"] = refused("xgrammar")
        RESULT["guidance"] = refused("guidance")
        from vllm.sampling_params import SamplingParams, StructuredOutputsParams
        RESULT["sp_ok"] = SamplingParams(structured_outputs=StructuredOutputsParams(regex="a+")) is not None
    """)
def test_changed_signature_inside_vllm_import_does_not_raise(results):
    """grammar_init's signature changes: `import vllm.v1.structured_output` (which triggers the patch
    through the post-import hook) still works, the failure is recorded, structgate names are refused
    naming the version and the patch, vLLM's own names still validate."""
    res = _result(results, "test_changed_signature_inside_vllm_import_does_not_raise")
    assert res["import_ok"] and res["sp_ok"]
    assert res["errors"] == ["manager-grammar-init"]
    assert "0.32" in res["reason"] and "manager-grammar-init" in res["reason"] and "signature changed" in res["reason"]
    assert res["native"] and "refused" in res["native"] and "manager-grammar-init" in res["native"]
    assert "0.32" in res["native"]
    assert res["xgrammar"] is None and res["guidance"] is None
    assert "structgate backend names are refused" in res["_stderr"]


@scenario("""
        import vllm.sampling_params as spm
        SP = spm.SamplingParams
        SP._validate_structured_outputs_v2 = SP._validate_structured_outputs   # the rename
        del SP._validate_structured_outputs
        import structgate.plugin
        structgate.plugin.register()
        RESULT["errors"] = sorted(ledger.errors())
        RESULT["native"] = refused("native")
        RESULT["auto"] = refused("auto")
        RESULT["marked"] = ledger.is_marked(SP._validate_structured_outputs_v2)
    """)
def test_renamed_symbol_before_register_does_not_raise(results):
    """SamplingParams._validate_structured_outputs renamed in an already-imported vLLM: register()
    (vLLM's plugin entry point) does not raise; the request path of vLLM's own backends is vLLM's."""
    res = _result(results, "test_renamed_symbol_before_register_does_not_raise")
    assert "sampling-validate" in res["errors"]  # (and any other entry on the same method)
    assert "sampling-validate" in res["native"] and "attribute '_validate_structured_outputs' no longer exists" \
        in res["native"]
    assert res["auto"] is None and res["marked"] is False


@scenario("""
        ledger.vllm_version = lambda: "0.35.0"
        import structgate.plugin
        structgate.plugin.register()
        import vllm.v1.structured_output, vllm.sampling_params, vllm.engine.arg_utils
        RESULT["applied"] = sorted(ledger.applied())
        RESULT["reason"] = ledger.disabled_reason()
        RESULT["native"] = refused("native")
        RESULT["xgrammar"] = refused("xgrammar")
        from vllm.v1.structured_output import StructuredOutputManager
        RESULT["untouched"] = not ledger.is_marked(StructuredOutputManager.grammar_init)
    """)
def test_unsupported_vllm_version_patches_nothing_and_refuses(results):
    res = _result(results, "test_unsupported_vllm_version_patches_nothing_and_refuses")
    assert res["applied"] == [] and res["untouched"]
    assert "0.35.0" in res["reason"] and "not a supported release" in res["reason"]
    assert res["native"] is not None  # vLLM's own Literal refuses it (the config patch was not applied)
    assert res["xgrammar"] is None
    assert "0.35.0" in res["_stderr"]


@scenario("""
        def simulate(mod):
            orig = mod.StructuredOutputManager.grammar_bitmask
            def grammar_bitmask(self, requests, structured_output_request_ids, scheduled_spec_decode_tokens):
                x = 1  # a code change
                return orig(self, requests, structured_output_request_ids, scheduled_spec_decode_tokens)
            mod.StructuredOutputManager.grammar_bitmask = grammar_bitmask
        ledger.register_patch(ledger.Patch(name="test-simulate-change", module="vllm.v1.structured_output",
            target="-", why="-", how="-", versions="-", removal="-", apply=simulate, order=0))
        import structgate.plugin
        structgate.plugin.register()
        import vllm.v1.structured_output as so
        RESULT["errors"] = sorted(ledger.errors())
        RESULT["skipped"] = sorted(ledger.skipped())
        RESULT["reason"] = ledger.disabled_reason()
        RESULT["native"] = refused("native")
        RESULT["accept_marked"] = ledger.is_marked(so.StructuredOutputManager.accept_tokens)
    """)
def test_changed_fill_loop_skips_the_batched_hook_only(results):
    """vLLM's grammar_bitmask changes (same signature, different code): the copied fill loop is not
    installed, vLLM's own loop runs, structgate stays usable (an optional patch)."""
    res = _result(results, "test_changed_fill_loop_skips_the_batched_hook_only")
    assert res["errors"] == ["scheduler-fill-loop-check"]
    assert res["skipped"] == ["scheduler-batched-bitmask"]
    assert res["reason"] is None and res["native"] is None
    assert res["accept_marked"] is False  # nothing of the hook was installed


@scenario("""
        def broken(mod):
            raise KeyError("boom")
        ledger.register_patch(ledger.Patch(name="test-broken", module="vllm.v1.structured_output",
            target="X", why="-", how="-", versions="-", removal="-", apply=broken, order=0))
        import structgate.plugin
        structgate.plugin.register()
        import vllm.v1.structured_output
        RESULT["errors"] = sorted(ledger.errors())
        RESULT["reason"] = ledger.disabled_reason()
    """)
def test_patch_function_bug_is_contained(results):
    """Not only VllmPatchError: any exception of a patch function is recorded, never raised."""
    res = _result(results, "test_patch_function_bug_is_contained")
    assert res["errors"] == ["test-broken"]
    assert "test-broken" in res["reason"] and "KeyError" in res["reason"]


@scenario("""
        def simulate(mod):
            def _validate_structured_outputs(self, model_config, structured_outputs_config):  # one fewer param
                pass
            mod.SamplingParams._validate_structured_outputs = _validate_structured_outputs
        ledger.register_patch(ledger.Patch(name="test-simulate-change", module="vllm.sampling_params",
            target="-", why="-", how="-", versions="-", removal="-", apply=simulate, order=0))
        import os; os.environ.pop("STRUCTGATE_NO_VLLM_PATCH")
        import structgate
        structgate.plugin.autoload()
        import vllm.sampling_params
        from vllm import SamplingParams
        RESULT["errors"] = sorted(ledger.errors())
        RESULT["native"] = refused("native")
    """)
def test_import_structgate_with_changed_vllm_keeps_vllm_working(results):
    """`import structgate` (autoload) installs the hooks; a changed vLLM then still imports and runs
    vLLM's own validation path."""
    res = _result(results, "test_import_structgate_with_changed_vllm_keeps_vllm_working")
    assert "sampling-validate" in res["errors"]
    assert "sampling-validate" in res["native"] and "signature changed" in res["native"]


@scenario("""
        import logging
        def simulate(mod):   # a vLLM release whose scheduler logs through another logger
            mod.logger = logging.getLogger("vllm.v1.core.sched.scheduler_v2")
        ledger.register_patch(ledger.Patch(name="test-simulate-change", module="vllm.v1.core.sched.scheduler",
            target="-", why="-", how="-", versions="-", removal="-", apply=simulate, order=0))
        import structgate.plugin
        structgate.plugin.register()
        import vllm.v1.core.sched.scheduler
        RESULT["errors"] = sorted(ledger.errors())
        RESULT["reason"] = ledger.disabled_reason()
        RESULT["native"] = refused("native")
        from structgate.plugin.bridge import _RefusalLogFilter, _refusal_filter
        _refusal_filter.note("r1")   # structgate logged its line for a refused token of request r1
        vllm_logger = logging.getLogger(_RefusalLogFilter.LOGGER)
        rec = logging.LogRecord(_RefusalLogFilter.LOGGER, logging.ERROR, "scheduler.py", 1,
                                _RefusalLogFilter.PREFIX + " %s for request %s. Terminating request.", ([7], "r1"), None)
        RESULT["filter_installed"] = _refusal_filter in vllm_logger.filters
        RESULT["vllm_line_passes"] = bool(vllm_logger.filter(rec))
    """)
def test_changed_refusal_log_line_turns_the_filter_off(results):
    """vLLM's scheduler line for a refused token no longer comes from the logger the filter sits on:
    the optional entry scheduler-refusal-log-filter fails (a warning naming it), structgate keeps
    serving, and the filter is off (never installed): vLLM's line is written, not silently lost."""
    res = _result(results, "test_changed_refusal_log_line_turns_the_filter_off")
    assert res["errors"] == ["scheduler-refusal-log-filter"]
    assert res["reason"] is None and res["native"] is None
    assert res["filter_installed"] is False and res["vllm_line_passes"] is True
    assert "optional patch scheduler-refusal-log-filter not applied" in res["_stderr"]
    assert "vllm.v1.core.sched.scheduler_v2" in res["_stderr"]


class _RewordedScheduler:
    def update_from_output(self, scheduler_output, model_runner_output):
        import logging

        logging.getLogger("vllm.v1.core.sched.scheduler").error(
            "Unexpected: the grammar refused tokens %s for request %s. Terminating request.", [], "r")


class _FStringScheduler:
    def update_from_output(self, new_token_ids, req_id):
        import logging

        logging.getLogger("vllm.v1.core.sched.scheduler").error(
            f"Unexpected: grammar rejected tokens {new_token_ids} for request {req_id}. Terminating request.")


class _RawFStringScheduler:
    def update_from_output(self, new_token_ids, req_id):
        import logging

        logging.getLogger("vllm.v1.core.sched.scheduler").error(
            rf"Unexpected: grammar rejected tokens %s for request {req_id}. Terminating request.", new_token_ids)


class _PercentScheduler:
    def update_from_output(self, new_token_ids, req_id):
        import logging

        logging.getLogger("vllm.v1.core.sched.scheduler").error(
            'Unexpected: grammar rejected tokens %s for request %s. Terminating request.', new_token_ids, req_id)


def test_refusal_log_filter_entry_needs_a_percent_style_line():
    """The filter reads the request id from the record's args: a vLLM writing its line as an f-string
    (the wording unchanged, the args empty) fails the check (the filter stays off, vLLM's line is
    written); a %-style literal passes, in either quotes."""
    import logging
    from types import SimpleNamespace

    from structgate.plugin.bridge import _RefusalLogFilter
    from structgate.plugin.patches import _check_refusal_log_filter

    log = logging.getLogger(_RefusalLogFilter.LOGGER)
    for cls in (_FStringScheduler, _RawFStringScheduler):
        with pytest.raises(ledger.VllmPatchError, match=r"update_from_output.*%-style literal"):
            _check_refusal_log_filter(SimpleNamespace(logger=log, Scheduler=cls))
    _check_refusal_log_filter(SimpleNamespace(logger=log, Scheduler=_PercentScheduler))


def test_refusal_log_filter_entry_checks_the_installed_vllm(monkeypatch):
    """The entry holds on the installed vLLM (0.32; tests/test_vllm033.py applies it to 0.33.0's
    code), and fails naming the symbol when vLLM's line is reworded or its logger renamed."""
    import logging
    from types import SimpleNamespace

    import vllm.v1.core.sched.scheduler as sched

    from structgate.plugin.bridge import _RefusalLogFilter
    from structgate.plugin.patches import _check_refusal_log_filter

    assert "scheduler-refusal-log-filter" in ledger.OPTIONAL_PATCHES
    if ledger.vllm_version().split("+")[0].rsplit(".", 1)[0] in ledger.SUPPORTED_VLLM:
        assert "scheduler-refusal-log-filter" in ledger.applied(), ledger.errors()
    _check_refusal_log_filter(sched)  # (again: idempotent, after engine-compile-error-reason's wrapper)
    reworded = SimpleNamespace(logger=logging.getLogger(_RefusalLogFilter.LOGGER), Scheduler=_RewordedScheduler)
    with pytest.raises(ledger.VllmPatchError, match=r"Scheduler\.update_from_output.*no longer contains"):
        _check_refusal_log_filter(reworded)
    monkeypatch.setattr(_RefusalLogFilter, "PREFIX", "Unexpected: the grammar refused tokens")
    with pytest.raises(ledger.VllmPatchError, match="no longer contains"):
        _check_refusal_log_filter(sched)
    monkeypatch.undo()
    moved = SimpleNamespace(logger=logging.getLogger("vllm.elsewhere"), Scheduler=sched.Scheduler)
    with pytest.raises(ledger.VllmPatchError, match=r"scheduler\.logger.*'vllm\.elsewhere'"):
        _check_refusal_log_filter(moved)


def test_every_monkeypatch_is_in_the_ledger():
    names = {p.name: p for p in ledger.patches()}
    for n in ("cpu-version-shim", "cpu-dist-info-shim", "cpu-env-defaults", "metrics-dir", "attr-request-backend",
              "attr-manager", "attr-grammar-slot", "scheduler-fill-loop-check", "engine-compile-error-reason",
              "frontend-compile-error-400", "metrics-registry", "metrics-mask-fill", "metrics-multiproc-route",
              "scheduler-refusal-log-filter"):
        assert n in names, n
        p = names[n]
        assert p.why and p.how and p.versions and p.removal
    assert names["cpu-version-shim"].trigger == "manual"
    assert names["attr-grammar-slot"].trigger == "attribute"
    # record-only entries are never applied by apply_all
    assert "cpu-version-shim" not in ledger.applied()


def test_source_fingerprint_ignores_comments_and_whitespace(tmp_path, monkeypatch):
    import importlib

    (tmp_path / "sg_fp_a.py").write_text("def f(x):\n    # a comment\n    return x + 1\n")
    (tmp_path / "sg_fp_b.py").write_text("def f(x):\n\n    return x + 1   # another\n")
    (tmp_path / "sg_fp_c.py").write_text("def f(x):\n    return x + 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fa, fb, fc = (ledger.source_fingerprint(importlib.import_module(m).f) for m in ("sg_fp_a", "sg_fp_b", "sg_fp_c"))
    assert fa == fb and fa != fc


def test_vllm_032_fill_loop_fingerprint_matches():
    import vllm.v1.structured_output as so

    from structgate.plugin.ledger import FILL_LOOP_FINGERPRINTS, _check_fill_loop

    if ledger.vllm_version().split("+")[0] in FILL_LOOP_FINGERPRINTS:
        _check_fill_loop(so)  # no error on the release the copy was checked against
