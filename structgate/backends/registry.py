"""The backend registry: a pluggy manager over the ``structgate`` entry-point group.

>>> from structgate import get_backend, load_vocabulary
>>> backend = get_backend("native", load_vocabulary("llama3"))          # doctest: +SKIP
>>> [b.name for b in list_backends()]                                    # doctest: +SKIP
['native', 'structgate-auto', 'structgate-llguidance', 'structgate-outlines-core', 'structgate-xgrammar']
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any

import pluggy

from ..errors import BackendNotFoundError, BackendUnavailableError, StructgateError
from . import hookspecs
from .spec import BackendSpec

__all__ = ["BackendSpec", "BackendInfo", "get_plugin_manager", "get_backend", "get_backend_spec",
           "list_backends", "backend_names", "register_backend", "check_option_names"]


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
    raise BackendNotFoundError(name, backend_names(include_aliases=True), _name_hint(name))


#: vLLM's own ``--structured-output-backend`` names → the structgate backend over the same engine
VLLM_BACKEND_NAMES = {
    "xgrammar": "structgate-xgrammar",
    "guidance": "structgate-llguidance",
    "outlines": "structgate-outlines-core",
    "auto": "structgate-auto",
}


def _name_hint(name: str) -> str:
    """A did-you-mean for an unknown backend name: the structgate name for a vLLM name, else the
    closest registered name."""
    import difflib

    if name in VLLM_BACKEND_NAMES and VLLM_BACKEND_NAMES[name] in _collect():
        return (f"{name!r} is vLLM's own backend name (usable with vllm serve, not here); "
                f"structgate's backend over the same engine is {VLLM_BACKEND_NAMES[name]!r}")
    close = difflib.get_close_matches(name, backend_names(include_aliases=True), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


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


def _declared_extras(backend_cls) -> frozenset[str] | None:
    """Extra option names ``backend_cls`` declares (class ``extra_options`` and its spec's
    ``options``), or None when neither declares any."""
    own = getattr(backend_cls, "extra_options", None)
    spec = None
    name = getattr(backend_cls, "name", None)
    if isinstance(name, str):
        try:
            spec = get_backend_spec(name)
        except BackendNotFoundError:
            spec = None
    if own is None and (spec is None or not spec.options):
        return None
    return frozenset(own or ()) | frozenset(spec.options if spec is not None else ())


def check_option_names(backend_cls, options) -> None:
    """Refuse option names ``backend_cls`` does not know, with a did-you-mean.

    Accepted: :class:`~structgate.backends.interface.CompileOptions` fields, the extras the backend
    declares (``extra_options`` class attribute or its :class:`BackendSpec` ``options``), and extras
    another registered backend declares (ignored by this one, so one option set can be shared, as
    ``structgate-auto``, ``structgate diff`` and ``STRUCTGATE_BACKEND_OPTIONS`` do). A backend that
    declares no extras at all accepts any name (third-party backends written before 0.2).

    Raises
    ------
    InvalidConstraintError
        An unknown name, e.g. ``max_whitspace``: the message names the backend, suggests the
        closest known name and lists the valid ones.
    """
    import difflib

    from ..errors import InvalidConstraintError
    from .interface import CompileOptions

    own = _declared_extras(backend_cls)
    if own is None:
        return
    fields = {k for k in CompileOptions.__dataclass_fields__ if k != "extra"}
    mine = fields | own
    unknown = [k for k in options if k not in mine]
    if not unknown:
        return
    others: set[str] = set()
    for spec in _collect().values():
        others.update(spec.options)
    bad = [k for k in unknown if k not in others]
    if not bad:
        return
    k = bad[0]
    close = difflib.get_close_matches(k, sorted(mine | others), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    name = getattr(backend_cls, "name", backend_cls.__name__)
    raise InvalidConstraintError(f"unknown option {k!r} for backend {name!r}{hint} "
                                 f"(options: {', '.join(sorted(mine))})")


def check_option_values(name: str, options) -> None:
    """Run backend ``name``'s own vocabulary-free value checks
    (:meth:`~structgate.backends.interface.Backend.check_options`) on the flat ``options``; nothing
    when the backend is not installed or its factory has no such method.

    Raises
    ------
    StructgateError, TypeError, ValueError
        What the backend's ``check_options`` raises (it names the option or variable).
    """
    try:
        factory = get_backend_spec(name).load_factory()
    except ImportError:  # not installed: the name check reports it
        return
    check = getattr(factory, "check_options", None)
    if callable(check):
        check(options)


def list_backends() -> list[BackendInfo]:
    """Every registered backend with its version and availability (imports no engine)."""
    out = []
    for name, s in sorted(_collect().items()):
        ok, reason = s.availability()
        out.append(BackendInfo(name=name, version=s.version() if ok else None, available=ok, reason=reason,
                               description=s.description, install_hint=s.install_hint, kinds=s.supported_kinds(),
                               aliases=tuple(s.aliases), plugin=s.plugin))
    return out
