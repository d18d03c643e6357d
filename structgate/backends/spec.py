"""How a backend is registered: :class:`BackendSpec` (its own module, so plugins and the built-ins
import it without importing the registry)."""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["BackendSpec"]


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
        Only needed for a ``factory`` that is a callable (or as a fallback when the factory's module
        cannot be imported): for a ``"module:Class"`` factory the class's ``supported_kinds`` is the
        one source (read by :meth:`supported_kinds`; adapters import their engine lazily).
    aliases : tuple[str, ...]
        Other names this backend answers to.
    options : tuple[str, ...]
        Engine-specific option names the backend reads from ``CompileOptions.extra`` (beyond the
        :class:`~structgate.backends.interface.CompileOptions` fields). Declared names (here or as
        the backend class's ``extra_options``) make the backend refuse any other unknown option
        with a did-you-mean (:func:`check_option_names`).
    """

    name: str
    factory: Any
    requires: tuple[str, ...] = ()
    distribution: str | None = None
    install_hint: str = ""
    description: str = ""
    kinds: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
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

    def supported_kinds(self) -> tuple[str, ...]:
        """The constraint kinds: the backend class's ``supported_kinds`` (importing the adapter
        module, never the engine: adapters import their engine inside functions), else ``kinds``."""
        if callable(self.factory):
            return tuple(self.kinds)
        try:
            cls = self.load_factory()
        except Exception:  # noqa: BLE001 - the adapter module is missing or fails at import (a
            # third-party module's driver check): what the spec says; a listing never fails for it
            return tuple(self.kinds)
        return tuple(sorted(getattr(cls, "supported_kinds", ()) or self.kinds))

    def load_factory(self) -> Callable[..., Any]:
        if callable(self.factory):
            return self.factory
        mod_name, _, attr = str(self.factory).partition(":")
        mod = importlib.import_module(mod_name)
        return getattr(mod, attr)
