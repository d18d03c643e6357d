"""The built-in backends' pluggy plugins, registered through this package's own ``structgate``
entry points (``pyproject.toml``) — the same path a third-party backend uses."""
from __future__ import annotations

from .hookspecs import hookimpl
from .spec import BackendSpec

#: entry-point name → module (used only as a fallback when the package metadata is missing)
BUILTIN_PLUGINS = {
    "structgate": "structgate.backends.builtins",
}


@hookimpl
def structgate_register_backends(register):
    register(BackendSpec(
        name="native",
        factory="structgate.native.backend:NativeBackend",
        requires=("numpy",),
        distribution="structgate",
        description="structgate's own pushdown engine (grammar IR, lazy configurations, token masks)",
        options=("compile_cache_size", "compile_processes", "inline_max_size", "row_budget_bytes", "formats", "max_regex_size",
                 "regex_unroll_depth", "rule_inline_max_chars", "shared_inline_max_chars",
                 "automaton_inline_max_chars", "max_automaton_rules", "max_multiple_of", "eager_residue_max", "max_enumerated_multiples",
                 "max_product_states", "max_pattern_regions"),
        plugin="structgate",
    ))
    register(BackendSpec(
        name="structgate-xgrammar",
        factory="structgate.adapters.xgrammar:XGrammarBackend",
        requires=("xgrammar",),
        install_hint="pip install 'structgate[xgrammar]'",
        description="XGrammar (mlc-ai) pushdown automaton engine, through structgate's interface",
        aliases=("sg-xgrammar",),
        options=("xgrammar_any_order", "xgrammar_indent"),
        plugin="structgate",
    ))
    register(BackendSpec(
        name="structgate-llguidance",
        factory="structgate.adapters.llguidance:LLGuidanceBackend",
        requires=("llguidance",),
        install_hint="pip install 'structgate[llguidance]'",
        description="llguidance (Microsoft) Earley + lexer engine, through structgate's interface",
        aliases=("sg-llguidance", "llguidance"),
        options=("llguidance_lenient", "llguidance_coerce_one_of"),
        plugin="structgate",
    ))
    register(BackendSpec(
        name="structgate-auto",
        factory="structgate.backends.auto:AutoBackend",
        requires=("numpy",),
        distribution="structgate",
        description="native first; a constraint native refuses (unsupported feature or kind) goes to the next "
                    "installed engine of auto_chain (default native, structgate-llguidance, structgate-xgrammar)",
        aliases=("sg-auto",),
        options=("auto_chain", "auto_fallback_on"),
        plugin="structgate",
    ))
    register(BackendSpec(
        name="structgate-outlines-core",
        factory="structgate.adapters.outlines_core:OutlinesCoreBackend",
        requires=("outlines_core",),
        distribution="outlines_core",
        install_hint="pip install 'structgate[outlines-core]'",
        description="outlines-core (dottxt) regex → full token index engine, through structgate's interface",
        aliases=("sg-outlines-core", "outlines-core"),
        options=("outlines_max_recursion_depth", "outlines_whitespace_pattern", "outlines_compile_processes"),
        plugin="structgate",
    ))
