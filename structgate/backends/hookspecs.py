"""pluggy hook specifications of structgate (project name ``"structgate"``).

A plugin is any module or object with functions marked ``@hookimpl``; third-party packages expose
it through the ``structgate`` entry-point group::

    [project.entry-points.structgate]
    mychoice = "mychoice_backend.plugin"

and implement :func:`structgate_register_backends`. The built-in backends (native, xgrammar,
llguidance, outlines-core) are registered through the same entry-point group by this package's own
``pyproject.toml``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pluggy

if TYPE_CHECKING:
    from .registry import BackendSpec

PROJECT_NAME = "structgate"
ENTRY_POINT_GROUP = "structgate"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def structgate_register_backends(register: "Callable[[BackendSpec], None]") -> None:
    """Register structured-output backends.

    Call ``register(BackendSpec(...))`` once per backend. Keep this cheap: do not import the
    engine here (name its class as a ``"module:Class"`` string; it is imported on first use), so
    ``structgate backends`` and vLLM's plugin loading stay fast.

    :param register: callback taking a :class:`~structgate.backends.registry.BackendSpec`.
    :return: nothing (results are collected through ``register``).
    """
