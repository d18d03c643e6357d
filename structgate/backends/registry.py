"""The backend registry: a pluggy manager over the ``structgate`` entry-point group.

>>> from structgate import get_backend, load_vocabulary
>>> backend = get_backend("native", load_vocabulary("llama3"))          # doctest: +SKIP
>>> [b.name for b in list_backends()]                                    # doctest: +SKIP
['llguidance', 'native', 'outlines-core', 'xgrammar']
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import pluggy

from ..errors import BackendNotFoundError, BackendUnavailableError, StructgateError
from . import hookspecs

__all__ = ["BackendSpec", "BackendInfo", "get_plugin_manager", "get_backend", "get_backend_spec",
           "list_backends", "backend_names", "register_backend"]


@dataclass(frozen=True)
class BackendSpec:
    """How to build one backend, registered through :func:`hookspecs.structgate_register_backends`.

    Attributes
    ----------
    name : str
        Registry name, e.g. ``"native"``. Must not collide with vLLM's built-in backend names
        (``auto``, ``xgrammar``, ``guidance``, ``outlines``, ``lm-format-enforcer``) to be usable with
        ``vllm serve --structured-output-backend``; adapters use ``structgate-xgrammar`` etc. as
        aliases (see docs/backends.md).
    factory : str | Callable
        ``"module:Class"`` (imported lazily) or a callable ``(vocab, **options) -> Backend``.
    requires : tuple[str, ...]
        Import names that must be importable for the backend to be available.
    distribution : str | None
        Distribution whose version is reported (defaults to the first of ``requires``).
    install_hint : str
        Shown when unavailable, e.g. ``pip install 'structgate[xgrammar]'``.
    description : str
    kinds : tuple[str, ...]
        Constraint kinds supported (informational; the backend class is authoritative).
    aliases : tuple[str, ...]
        Other names this backend answers to.
    """

    name: str
    factory: Any
    requires: tuple[str, ...] = ()
    distribution: str | None = None
    install_hint: str = ""
    description: str = ""
    kinds: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    plugin: str = field(default="", compare=False)

    def availability(self) -> tuple[bool, str]:
        """``(available, reason)`` without importing the engine."""
        for mod in self.requires:
            try:
                if importlib.util.find_spec(mod) is None:
                    return False, f"python package {mod!r} is not installed"
            except (ImportError, ValueError) as e:
                return False, f"python package {mod!r} cannot be found ({e})"
        return True, ""

    def version(self) -> str | None:
        dist = self.distribution or (self.requires[0] if self.requires else None)
        if dist is None:
            dist = "structgate"
        for cand in (dist, dist.replace("_", "-")):
            try:
                return importlib.metadata.version(cand)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None

    def load_factory(self) -> Callable[..., Any]:
        if callable(self.factory):
            return self.factory
        mod_name, _, attr = str(self.factory).partition(":")
        mod = importlib.import_module(mod_name)
        return getattr(mod, attr)


@dataclass(frozen=True)
class BackendInfo:
    """One row of :func:`list_backends`."""

    name: str
    version: str | None
    available: bool
    reason: str
    description: str
    install_hint: str
    kinds: tuple[str, ...]
    aliases: tuple[str, ...]
    plugin: str

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


_lock = threading.RLock()
_pm: pluggy.PluginManager | None = None
_specs: dict[str, BackendSpec] | None = None
_extra: list[BackendSpec] = []


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with every ``structgate`` entry point loaded."""
    global _pm
    with _lock:
        if _pm is None:
            pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
            pm.add_hookspecs(hookspecs)
            pm.load_setuptools_entrypoints(hookspecs.ENTRY_POINT_GROUP)
            if pm.get_plugin("structgate") is None:
                # Running from a source tree that was never installed: register the built-ins
                # directly (the same modules the entry points name).
                from . import builtins as _builtins

                for name, modname in _builtins.BUILTIN_PLUGINS.items():
                    if pm.get_plugin(name) is None:
                        pm.register(importlib.import_module(modname), name=name)
            pm.check_pending()
            _pm = pm
        return _pm


def _collect() -> dict[str, BackendSpec]:
    global _specs
    with _lock:
        if _specs is not None:
            return _specs
        pm = get_plugin_manager()
        found: dict[str, BackendSpec] = {}
        current_plugin = [""]

        def register(spec: BackendSpec) -> None:
            if not isinstance(spec, BackendSpec):
                raise TypeError(f"register() takes a BackendSpec, got {type(spec).__name__}")
            if spec.name in found:
                raise StructgateError(f"two plugins register a backend named {spec.name!r}")
            found[spec.name] = spec

        pm.hook.structgate_register_backends(register=register)
        for s in _extra:
            found[s.name] = s
        # remember which plugin registered which spec, for listings
        names = {}
        for plugin_name, plugin in pm.list_name_plugin():
            names[id(plugin)] = plugin_name
        _specs = found
        return _specs


def register_backend(spec: BackendSpec) -> None:
    """Register a backend at run time (tests, notebooks); entry points are the normal path."""
    global _specs
    with _lock:
        _extra.append(spec)
        _specs = None


def _reset_for_tests() -> None:
    global _pm, _specs
    with _lock:
        _pm = None
        _specs = None
        _extra.clear()


def backend_names(include_aliases: bool = False) -> list[str]:
    """Sorted registered names (optionally with aliases)."""
    specs = _collect()
    names = set(specs)
    if include_aliases:
        for s in specs.values():
            names.update(s.aliases)
    return sorted(names)


def get_backend_spec(name: str) -> BackendSpec:
    """The spec registered under ``name`` or one of its aliases.

    Raises
    ------
    BackendNotFoundError
    """
    specs = _collect()
    if name in specs:
        return specs[name]
    for s in specs.values():
        if name in s.aliases:
            return s
    raise BackendNotFoundError(name, backend_names(include_aliases=True))


def get_backend(name: str, vocab, **options: Any):
    """Create backend ``name`` for ``vocab``.

    Parameters
    ----------
    name : str
        Registered name or alias.
    vocab : Vocabulary
    **options
        :class:`~structgate.backends.interface.CompileOptions` fields and engine extras.

    Raises
    ------
    BackendNotFoundError
        No such name.
    BackendUnavailableError
        Registered but its engine is not installed (message has the install hint).
    """
    spec = get_backend_spec(name)
    ok, reason = spec.availability()
    if not ok:
        raise BackendUnavailableError(spec.name, reason, spec.install_hint)
    try:
        factory = spec.load_factory()
    except ImportError as e:
        raise BackendUnavailableError(spec.name, f"import failed: {e}", spec.install_hint) from e
    return factory(vocab, **options)


def list_backends() -> list[BackendInfo]:
    """Every registered backend with its version and availability (imports no engine)."""
    out = []
    for name, s in sorted(_collect().items()):
        ok, reason = s.availability()
        out.append(BackendInfo(name=name, version=s.version() if ok else None, available=ok, reason=reason,
                               description=s.description, install_hint=s.install_hint, kinds=tuple(s.kinds),
                               aliases=tuple(s.aliases), plugin=s.plugin))
    return out
