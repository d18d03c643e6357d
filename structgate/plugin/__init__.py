"""structgate's vLLM plugin: ``vllm serve MODEL --structured-output-backend native``.

Entry point (``pyproject.toml``)::

    [project.entry-points."vllm.general_plugins"]
    structgate = "structgate.plugin:register"

vLLM calls :func:`register` in every process it starts (API server(s), engine core, workers), so
it is idempotent and cheap: it checks the vLLM version and applies the patch ledger
(:mod:`structgate.plugin.ledger`, entries in :mod:`structgate.plugin.patches`); a patch whose
target module is not imported yet is applied when that module is imported, so no process imports
more of vLLM than it would anyway.

Offline use (``LLM(..., structured_outputs_config={"backend": "native"})``) validates the config
before vLLM loads its plugins: call :func:`autoload` first — ``import structgate`` does it — which
patches at once when vLLM is already imported, installs import hooks when vLLM is installed but not
imported (vLLM itself is not imported), and does nothing when vLLM is absent. Set
``STRUCTGATE_NO_VLLM_PATCH=1`` to turn :func:`autoload` off.

Neither :func:`register` nor :func:`autoload` ever raises: a patch that cannot apply (an
unsupported or changed vLLM) is logged naming the vLLM version and the patch, vLLM and its own
backends keep working, and structgate backend names are refused at config validation with that
message (see "Failing closed" in :mod:`structgate.plugin.ledger`).

:func:`register` also, in the first vLLM process: creates the metrics folder
(:mod:`structgate.plugin.metrics`) inherited by the processes vLLM starts, and on vLLM's CPU
platform sets ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB) unless the user set it
(``STRUCTGATE_NO_CPU_DEFAULTS=1`` turns that off), so ``vllm serve MODEL
--structured-output-backend native`` works as written on a small CPU machine.

This module imports nothing from vLLM at import time.
"""
from __future__ import annotations

import logging
import os
import sys
import threading

__all__ = ["register", "autoload", "is_registered", "set_cpu_defaults", "log_startup", "startup_line"]

logger = logging.getLogger("structgate.plugin")

ENV_DISABLE = "STRUCTGATE_NO_VLLM_PATCH"
ENV_NO_CPU_DEFAULTS = "STRUCTGATE_NO_CPU_DEFAULTS"

#: environment defaults applied on vLLM's CPU platform when the user has not set them
CPU_DEFAULTS: dict[str, str] = {"VLLM_CPU_KVCACHE_SPACE": "1"}

_lock = threading.Lock()
_registered = False


def register() -> None:
    """vLLM ``general_plugins`` entry point: apply (or schedule) every ledger patch. Idempotent.

    Never raises: an unsupported vLLM version or a changed patch target is logged (naming the vLLM
    version and the patch) and disables structgate names in this process
    (:func:`structgate.plugin.ledger.disabled_reason`); vLLM's own backends keep working.
    """
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True
        try:
            from . import ledger

            ledger.apply_all(strict=False)  # includes cpu-env-defaults and metrics-dir (vllm.platforms)
        except Exception as e:  # noqa: BLE001 - never inside vLLM's plugin loader
            logger.error("structgate: the vLLM plugin could not be set up: %s: %s", type(e).__name__, e)


def _vllm_platform_is_cpu(platforms_mod=None) -> bool:
    try:
        if platforms_mod is None:
            import vllm.platforms as platforms_mod
        return bool(platforms_mod.current_platform.is_cpu())
    except Exception:  # noqa: BLE001 - platform detection failing is vLLM's to report
        return False


def set_cpu_defaults(environ=None, *, is_cpu: bool | None = None) -> dict[str, str]:
    """On vLLM's CPU platform, set each :data:`CPU_DEFAULTS` variable the user has not set, in
    ``environ`` (default ``os.environ``, inherited by vLLM's processes). Returns what it set.
    ``STRUCTGATE_NO_CPU_DEFAULTS=1`` disables it."""
    env = os.environ if environ is None else environ
    if env.get(ENV_NO_CPU_DEFAULTS, "") in ("1", "true", "yes"):
        return {}
    if is_cpu is None:
        is_cpu = _vllm_platform_is_cpu()
    if not is_cpu:
        return {}
    done = {}
    for k, v in CPU_DEFAULTS.items():
        if k not in env:
            env[k] = v
            done[k] = v
    if done:  # on vLLM's logger: shown with vLLM's startup lines
        logging.getLogger("vllm.structgate").info("structgate: vLLM CPU platform: set %s (not set by the user)",
                                                  ", ".join(f"{k}={v}" for k, v in done.items()))
    return done


_startup_logged: set[str] = set()


def startup_line(role: str, backends=None) -> str:
    """The one line structgate logs at startup: version, role, active backends, applied patches."""
    from .. import __version__
    from . import ledger

    applied = sorted(ledger.applied())
    reason = ledger.disabled_reason()
    names = ",".join(backends) if backends else "-"
    line = (f"structgate {__version__} active ({role}, pid {os.getpid()}): backends [{names}], vLLM "
            f"{ledger.vllm_version() or '?'}, patches applied [{', '.join(applied)}]")
    failed = sorted(ledger.errors())
    if failed:
        line += f", failed [{', '.join(failed)}]"
    if reason:
        line += f" -- {reason}"
    return line


def log_startup(role: str, backends=None) -> None:
    """Log :func:`startup_line` once per role and process (on vLLM's logger, so it is shown with
    vLLM's own startup lines) and publish it as the ``structgate_info`` metric."""
    key = f"{role}:{os.getpid()}"
    if key in _startup_logged:
        return
    _startup_logged.add(key)
    try:
        from . import ledger, metrics

        line = startup_line(role, backends)
        logging.getLogger("vllm.structgate").info("%s", line)
        if not logging.getLogger("vllm").handlers:  # vLLM's logging not configured: ours
            logger.info("%s", line)
        from .. import __version__

        metrics.set_info(version=__version__, backends=",".join(backends or ()),
                         patches=",".join(sorted(ledger.applied())))
    except Exception as e:  # noqa: BLE001 - a log line never breaks startup
        logger.debug("structgate: startup line failed: %s", e)


def is_registered() -> bool:
    """True once :func:`register` succeeded in this process."""
    return _registered


def autoload() -> bool:
    """Make vLLM accept structgate names in this process without importing vLLM needlessly.

    Returns
    -------
    scheduled : bool
        True if the patches were applied or scheduled (vLLM is installed), False otherwise.
    """
    if os.environ.get(ENV_DISABLE, "") in ("1", "true", "yes"):
        return False
    if _registered:
        return True
    if "vllm" not in sys.modules:
        import importlib.util

        try:
            if importlib.util.find_spec("vllm") is None:
                return False
        except (ImportError, ValueError):
            return False
    register()  # never raises
    return True
