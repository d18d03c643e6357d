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

This module imports nothing from vLLM at import time.
"""
from __future__ import annotations

import logging
import os
import sys
import threading

__all__ = ["register", "autoload", "is_registered"]

logger = logging.getLogger("structgate.plugin")

ENV_DISABLE = "STRUCTGATE_NO_VLLM_PATCH"

_lock = threading.Lock()
_registered = False


def register() -> None:
    """vLLM ``general_plugins`` entry point: apply (or schedule) every ledger patch. Idempotent.

    Raises
    ------
    VllmPatchError
        Unsupported vLLM version or a changed patch target (vLLM logs it; the structgate backend
        names are then rejected by vLLM's own config validation — never silently rerouted).
    """
    global _registered
    with _lock:
        if _registered:
            return
        from . import ledger

        ledger.apply_all(strict=True)
        _registered = True


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
    try:
        register()
    except Exception as e:  # noqa: BLE001 - never break `import structgate`
        logger.warning("structgate: the vLLM plugin could not be applied: %s", e)
        return False
    return True
