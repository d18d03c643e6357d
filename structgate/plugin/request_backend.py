"""Per-request structured-output engine choice (ledger entries ``request-backend-validate`` and
``request-backend-compile``).

A request names a structgate engine in vLLM's per-request extra arguments (the OpenAI API's
``vllm_xargs``, which vLLM 0.32 copies into ``SamplingParams.extra_args``)::

    {"model": "...", "messages": [...],
     "response_format": {"type": "json_schema", "json_schema": {...}},
     "vllm_xargs": {"structured_output_backend": "structgate-llguidance"}}

The server must run a structgate backend (``--structured-output-backend native``,
``structgate-auto``, ...); any installed structgate engine can then be chosen per request. The API
server validates the name and compiles-checks the constraint with the chosen engine (an unknown,
non-structgate or uninstalled name, or a constraint that engine refuses, is HTTP 400 naming
``vllm_xargs.structured_output_backend``); the engine core compiles with it
(:meth:`structgate.plugin.bridge.StructgateVllmBackend.compile_grammar` ``backend_name=``). Requests
without the field use the server's backend, unchanged.
"""
from __future__ import annotations

import logging
from typing import Any

from . import ledger
from .ledger import Patch, register_patch

logger = logging.getLogger("structgate.plugin")

__all__ = ["REQUEST_KEY", "requested_backend"]

#: the ``extra_args`` / ``vllm_xargs`` key naming the engine
REQUEST_KEY = "structured_output_backend"


def requested_backend(sampling_params: Any) -> str | None:
    """The engine a request names in ``sampling_params.extra_args[REQUEST_KEY]``, as its registry
    name; None when the request names none.

    Raises
    ------
    ValueError
        The value is not a string, not a structgate backend name (vLLM's own names are not), or
        the engine is not installed (the message lists the choices / the install hint).
    """
    extra = getattr(sampling_params, "extra_args", None) or {}
    if not isinstance(extra, dict) or extra.get(REQUEST_KEY) is None:
        return None
    name = extra[REQUEST_KEY]
    from .patches import _primary_names, check_backend_name, is_structgate_name

    if not isinstance(name, str) or not is_structgate_name(name):
        raise ValueError(f"vllm_xargs.{REQUEST_KEY}: {name!r} is not a structgate backend; choose one of "
                         f"{', '.join(_primary_names())} (or an alias; `structgate backends` lists them)")
    check_backend_name(name)  # installed?
    from ..backends.registry import get_backend_spec

    return get_backend_spec(name).name


class _View:
    def __init__(self, cfg: Any, backend: str) -> None:
        self._cfg = cfg
        self.backend = backend

    def __getattr__(self, item):
        return getattr(self._cfg, item)


def _apply_validate(mod) -> None:
    sym = "vllm.sampling_params.SamplingParams.verify"
    cls = ledger.require_attr(mod, "SamplingParams", sym)
    orig = ledger.require_attr(cls, "verify", sym)
    if ledger.is_marked(orig):
        return
    ledger.require_signature(orig, ("self", "model_config", "speculative_config", "structured_outputs_config",
                                    "tokenizer"), sym)
    ledger.require_source(orig, ("self._validate_structured_outputs(",), sym)
    from vllm.exceptions import VLLMValidationError

    from .patches import is_structgate_name

    def verify(self, model_config, speculative_config, structured_outputs_config, tokenizer):
        if self.structured_outputs is None:
            return orig(self, model_config, speculative_config, structured_outputs_config, tokenizer)
        try:
            name = requested_backend(self)
        except ValueError as e:
            raise VLLMValidationError(str(e), parameter=f"vllm_xargs.{REQUEST_KEY}") from e
        if name is None:
            return orig(self, model_config, speculative_config, structured_outputs_config, tokenizer)
        server = getattr(structured_outputs_config, "backend", None)
        if not is_structgate_name(server):
            raise VLLMValidationError(
                f"vllm_xargs.{REQUEST_KEY} needs a server running a structgate backend "
                f"(--structured-output-backend native, structgate-auto, ...); this one runs {server!r}",
                parameter=f"vllm_xargs.{REQUEST_KEY}")
        # vLLM's checks and structgate's compile check (sampling-validate), with the chosen engine ...
        orig(self, model_config, speculative_config, _View(structured_outputs_config, name), tokenizer)
        # ... but the engine core's backend stays the server's (it is built from the first request)
        self.structured_outputs._backend = str(server)

    cls.verify = ledger.mark(verify, orig, "request-backend-validate")


def _apply_compile(mod) -> None:
    sym = "vllm.v1.structured_output.StructuredOutputManager._create_grammar"
    cls = ledger.require_attr(mod, "StructuredOutputManager", sym)
    orig = ledger.require_attr(cls, "_create_grammar", sym)
    if ledger.is_marked(orig):
        return
    ledger.require_signature(orig, ("self", "request"), sym)
    ledger.require_source(orig, ("structured_output_key", "compile_grammar"), sym)

    def _create_grammar(self, request):
        be = getattr(self, "backend", None)
        name = None
        if getattr(be, "sg_backend", None) is not None:
            name = requested_backend(request.sampling_params)
        if name is None:
            return orig(self, request)
        request_type, grammar_spec = request.structured_output_request.structured_output_key
        try:
            return be.compile_grammar(request_type, grammar_spec,
                                      stop_token_ids=request.sampling_params.all_stop_token_ids,
                                      backend_name=name)
        except Exception:
            logger.exception("Failed to compile grammar for request %s (backend %s)", request.request_id, name)
            raise

    cls._create_grammar = ledger.mark(_create_grammar, orig, "request-backend-compile")


register_patch(Patch(
    name="request-backend-validate",
    module="vllm.sampling_params",
    target="SamplingParams.verify",
    why="vLLM has one structured-output backend per engine; a per-request choice in extra_args "
        "(vllm_xargs) would be ignored silently",
    how=f"when extra_args[{REQUEST_KEY!r}] is set: refuse an unknown / non-structgate / uninstalled "
        "name or a server without a structgate backend (VLLMValidationError = HTTP 400), run the "
        "validator (vLLM's checks + structgate's compile check) with the chosen engine, then set "
        "structured_outputs._backend back to the server's backend",
    versions="0.32.0, 0.33.0", removal="when vLLM supports per-request backends",
    apply=_apply_validate, order=20))

register_patch(Patch(
    name="request-backend-compile",
    module="vllm.v1.structured_output",
    target="StructuredOutputManager._create_grammar",
    why="it calls backend.compile_grammar(request_type, spec) without the request, so the engine "
        "cannot see a per-request choice",
    how="when the engine's backend is structgate's and the request names an engine, call "
        "StructgateVllmBackend.compile_grammar(..., backend_name=name); otherwise the original",
    versions="0.32.0, 0.33.0", removal="when vLLM supports per-request backends",
    apply=_apply_compile, order=20))
