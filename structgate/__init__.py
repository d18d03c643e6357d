"""structgate: swappable structured-output (constrained decoding) backends for vLLM.

Public API (re-exports only)::

    from structgate import Vocabulary, load_vocabulary, Constraint, get_backend, list_backends

    vocab = load_vocabulary("llama3")
    backend = get_backend("native", vocab)
    grammar = backend.compile(Constraint.json_schema({"type": "integer"}))
    matcher = grammar.matcher()

Importing ``structgate`` also makes vLLM accept structgate backend names in offline use
(``LLM(..., structured_outputs_config={"backend": "native"})``) when vLLM is installed — see
:func:`structgate.plugin.register` — without importing vLLM when it is not.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .backends.interface import Backend, CompiledGrammar, CompileOptions, Constraint, Matcher
from .backends.hookspecs import hookimpl
from .backends.registry import BackendSpec, get_backend, list_backends, register_backend
from .bitmask import allocate_bitmask, bitmask_shape
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .vocab import Vocabulary, load_vocabulary

__all__ = ["__version__", "Backend", "CompiledGrammar", "CompileOptions", "Constraint", "Matcher",
           "BackendSpec", "hookimpl", "get_backend", "list_backends", "register_backend", "allocate_bitmask",
           "bitmask_shape",
           "Vocabulary", "load_vocabulary", *_errors_all]

# Offline vLLM use: make vLLM accept structgate backend names (patches applied when vLLM is imported;
# vLLM itself is never imported here). STRUCTGATE_NO_VLLM_PATCH=1 turns this off.
from .plugin import autoload as _autoload  # noqa: E402

_autoload()
