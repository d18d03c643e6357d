"""Smaller code-health items a newcomer notices (issue 13, item 8): one source for backend kinds,
``hookimpl`` at the top level, no import cycle between the registry and the built-ins, a registry
doctest that names real backends, no references to files outside the repository."""
from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import structgate
from structgate.backends import registry

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_hookimpl_and_register_backend_at_top_level():
    from structgate.backends.hookspecs import hookimpl

    assert structgate.hookimpl is hookimpl and "hookimpl" in structgate.__all__
    assert structgate.register_backend is registry.register_backend


def test_backend_kinds_have_one_source():
    """list_backends reports the class's supported_kinds; the built-in specs declare none."""
    from structgate.backends import builtins

    src = pathlib.Path(builtins.__file__).read_text()
    assert "kinds=" not in src
    for info in registry.list_backends():
        spec = registry.get_backend_spec(info.name)
        if info.available and isinstance(spec.factory, str):
            cls = spec.load_factory()
            assert set(info.kinds) == set(cls.supported_kinds), info.name


def _module_imports(path: pathlib.Path) -> set[str]:
    """Module-level imports (not inside functions) of a structgate module, as absolute names."""
    tree = ast.parse(path.read_text())
    pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = pkg.rsplit(".", node.level - 1)[0] if node.level else ""
            mod = ".".join(x for x in (base, node.module or "") if x) if node.level else node.module
            out.add(mod)
            for a in node.names:
                out.add(f"{mod}.{a.name}")
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_registry_builtins_cycle():
    b = _module_imports(ROOT / "structgate/backends/builtins.py")
    r = _module_imports(ROOT / "structgate/backends/registry.py")
    assert "structgate.backends.registry" not in b
    assert "structgate.backends.builtins" not in r
    # and it still imports cleanly in a fresh interpreter, builtins first
    subprocess.run([sys.executable, "-c", "import structgate.backends.builtins, structgate.backends.registry"],
                   check=True, timeout=120)


def test_registry_doctest_names_exist():
    doc = registry.__doc__
    names = re.findall(r"'([a-z0-9-]+)'", doc.split("list_backends()", 1)[1])
    assert names and set(names) <= set(registry.backend_names())


def test_registry_collect_has_no_dead_code():
    src = pathlib.Path(registry.__file__).read_text()
    assert "list_name_plugin" not in src


def test_docs_do_not_send_readers_outside_the_repository():
    for path in [ROOT / "README.md", ROOT / "bench/README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        assert "../shared/" not in text and "/work/shared" not in text, path


# -- import cycles ---------------------------------------------------------------------------------
# The module graph of the structgate package: an edge for every import a module's code makes (module
# level or inside a function; ``if TYPE_CHECKING:`` blocks excluded), to the module it names
# (``from pkg import sub`` names the submodule ``pkg.sub``). Implicit parent edges (importing
# ``a.b.c`` first runs ``a/b/__init__.py``) are not counted: a package ``__init__`` that re-exports
# its submodules is a facade over them.

def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(*, module_level_only: bool = False) -> dict[str, set[str]]:
    mods = {_module_name(p): p for p in (ROOT / "structgate").rglob("*.py")}

    def owner(name: str) -> str:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip.update(id(n) for n in ast.walk(node))
        nodes = tree.body if module_level_only else list(ast.walk(tree))
        out: set[str] = set()
        for node in nodes:
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                out.update(owner(a.name) for a in node.names if a.name.split(".")[0] == "structgate")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    target = f"{base}.{node.module}" if node.module else base
                else:
                    target = node.module or ""
                if target.split(".")[0] != "structgate":
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    out.add(sub if sub in mods else owner(target))
        out.discard(mod)
        out.discard("")
        graph[mod] = out
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


#: Cycles through function-level (lazy) imports that exist today in code other work owns. A ratchet:
#: a cycle not listed here fails, and so does a listed one that has gone (remove it from the list).
_KNOWN_LAZY_CYCLES = {
    frozenset({"structgate.backends.interface", "structgate.backends.registry"}),
    frozenset({"structgate", "structgate.plugin", "structgate.plugin.ledger"}),
    frozenset({"structgate.native.ir", "structgate.native.regex.casefold", "structgate.native.regex.parser"}),
    frozenset({"structgate.native.pushdown", "structgate.native.token_index"}),
}


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_at_module_level():
    """Module-level imports form no cycle anywhere in the package (a cycle there is an import-order
    bug waiting for the next reordering)."""
    assert _cycles(_import_graph(module_level_only=True)) == []


def test_no_new_import_cycle_and_none_between_vocab_and_tokenizers():
    """Counting lazy imports too: vocab / tokenizers and registry / builtins are in no cycle (issue 13,
    item 8), and no cycle other than the listed ones exists."""
    graph = _import_graph()
    cycles = set(_cycles(graph))
    tokenizer_modules = {m for m in graph if m == "structgate.tokenizers" or m.startswith("structgate.tokenizers.")}
    assert len(tokenizer_modules) >= 6  # the package split by format
    for comp in cycles:
        assert "structgate.vocab" not in comp and not comp & tokenizer_modules, sorted(comp)
        assert not {"structgate.backends.registry", "structgate.backends.builtins"} <= comp, sorted(comp)
    assert cycles - _KNOWN_LAZY_CYCLES == set(), "new import cycle"
    assert _KNOWN_LAZY_CYCLES - cycles == set(), "a listed cycle is gone: remove it from _KNOWN_LAZY_CYCLES"
    # the format readers do not import the Vocabulary class at all (they return VocabParts)
    for m in tokenizer_modules - {"structgate.tokenizers"}:
        assert "structgate.vocab" not in graph[m], m


def test_tokenizer_modules_import_first_in_a_fresh_interpreter():
    """Each module of the split imports on its own, first, in a fresh interpreter (no hidden order
    dependence), and every name other code imports from ``structgate.tokenizers`` is still there."""
    names = ["structgate.vocab", "structgate.tokenizers"] + [
        f"structgate.tokenizers.{p.stem}" for p in sorted((ROOT / "structgate/tokenizers").glob("*.py"))
        if p.stem != "__init__"]
    code = "; ".join(f"import {n}" for n in names)
    for first in names:
        subprocess.run([sys.executable, "-c", f"import {first}; {code}"], check=True, timeout=120)
    from structgate import tokenizers as T

    for name in ["BUNDLED", "EOG_TOKEN_NAMES", "bundled_tokenizer_dir", "bytes_to_unicode", "from_gguf", "from_hf",
                 "from_tiktoken", "load", "read_gguf_metadata", "gguf_to_tokenizer_json", "save_compact",
                 "clear_cache", "CL100K_PAT", "_R50K_PAT", "_LLAMA3_PAT", "_GGUFJsonBuilder"]:
        assert hasattr(T, name), name
    assert not (ROOT / "structgate/tokenizers.py").exists()


def test_no_reference_to_a_design_file_that_is_not_in_the_repository():
    """Docstrings pointed at an upper-case design file's section 2 that the repository does not have
    (docs/design.md is the design page)."""
    name = "DESIGN" + ".md"
    assert not (ROOT / name).exists()
    files = [ROOT / "README.md", *ROOT.glob("*.toml")]
    for top in ("structgate", "bench", "docs", "tests", "scripts", "examples"):
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".md", ".toml", ".txt", ".sh")]
    hits = [str(p.relative_to(ROOT)) for p in files
            if p.is_file() and ".venv" not in p.parts and name in p.read_text(errors="replace")]
    assert hits == []


class _FakeModelConfig:
    """The two vLLM ModelConfig members build_vocabulary reads."""

    def __init__(self, width, gen_eos):
        self._width, self._gen = width, gen_eos
        self.hf_config = type("C", (), {"eos_token_id": None})()

    def get_vocab_size(self):
        return self._width

    def try_get_generation_config(self):
        return {"eos_token_id": self._gen}


def test_bridge_build_vocabulary_has_no_dead_fallback_and_keeps_in_range_eos():
    """bridge.build_vocabulary: no ImportError fallback for a module that always exists (dead code,
    issue 13 item 8); the model's generation-config EOS ids inside the tokenizer are added, ids past it
    are not; the width is the model's logits width."""
    transformers = __import__("pytest").importorskip("transformers")
    from structgate.plugin import bridge
    from structgate.tokenizers import bundled_tokenizer_dir, load

    src = ast.get_source_segment(pathlib.Path(bridge.__file__).read_text(),
                                 next(n for n in ast.parse(pathlib.Path(bridge.__file__).read_text()).body
                                      if isinstance(n, ast.FunctionDef) and n.name == "build_vocabulary"))
    assert "ImportError" not in src and "colleague" not in src
    hf = transformers.AutoTokenizer.from_pretrained(str(bundled_tokenizer_dir("llama2")))
    base = load("llama2")
    extra_in, extra_out = 13, 10 ** 6  # token 13 is "\n" (<0x0A>) in Llama 2: made an EOS id here
    v = bridge.build_vocabulary(hf, model_config=_FakeModelConfig(32064, [extra_in, extra_out]))
    assert v.vocab_size == 32064 and v.n_tokens == base.n_tokens
    assert set(v.eos_token_ids) == set(base.eos_token_ids) | {extra_in}
    assert v.token_bytes[extra_in] == b"" and base.token_bytes[extra_in] == b"\n"


# -- local recursive functions: unlinked, returned or raised -------------------------------------
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _own_nodes(fn):
    """The nodes of ``fn``'s body that are its own: not inside a function nested in it."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, _FUNCS):
            stack.extend(ast.iter_child_nodes(n))


def _local_functions(fn) -> dict[str, ast.AST]:
    """The functions ``fn`` binds to a local name: nested ``def`` s and ``name = lambda ...``."""
    out: dict[str, ast.AST] = {}
    for n in _own_nodes(fn):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[n.name] = n
        elif isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = n.value
    return out


def _recursive_locals(fn) -> set[str]:
    """The local functions of ``fn`` on a reference cycle through its closure cells: ``f`` reading
    (at any depth) a local function ``g`` holds ``g``'s cell, so a self-reference or a loop of them
    is a cycle that outlives the call unless a name of it is rebound."""
    funcs = _local_functions(fn)
    refs = {}
    for name, f in funcs.items():
        args = f.args
        own = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        own |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        refs[name] = {n.id for n in ast.walk(f) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                      and n.id in funcs and n.id not in own}
    return {c for comp in _cycles(refs) for c in comp} | {n for n, r in refs.items() if n in r}


def _unlinked_in_finally(fn) -> set[str]:
    """Names ``fn`` sets to None (or deletes) in a ``finally`` clause of its own."""
    out: set[str] = set()
    for n in _own_nodes(fn):
        if isinstance(n, ast.Try) or type(n).__name__ == "TryStar":
            for st in n.finalbody:
                for m in ast.walk(st):
                    if isinstance(m, ast.Assign) and isinstance(m.value, ast.Constant) and m.value.value is None:
                        out.update(t.id for t in m.targets if isinstance(t, ast.Name))
                    elif isinstance(m, ast.Delete):
                        out.update(t.id for t in m.targets if isinstance(t, ast.Name))
    return out


def _local_recursion_left_linked(tree) -> list[str]:
    left = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            rec = _recursive_locals(fn)
            miss = sorted(rec - _unlinked_in_finally(fn))
            if miss:
                left.append(f"{fn.name}:{fn.lineno}: {miss}")
    return left


def test_local_recursive_functions_are_unlinked_in_a_finally():
    """A local function that refers to itself, or to a sibling that refers back, is a reference
    cycle (function -> closure cell -> function) that outlives the call: left to the cyclic
    collector, and frozen for good by the plugin's ``STRUCTGATE_GC_FREEZE_AFTER_COMPILE`` when a
    compile made it. The enclosing function rebinds them to None in a
    ``finally`` (so also when it raises: a refused compile), each name of the cycle, e.g.
    ``try: return rec(x) finally: rec = None``."""
    bad = []
    for path in sorted((ROOT / "structgate").rglob("*.py")):
        for item in _local_recursion_left_linked(ast.parse(path.read_text())):
            bad.append(f"{path.relative_to(ROOT)}:{item}")
    assert not bad, bad


def test_local_recursion_check_finds_cycles():
    src = '''
def a(xs):
    def rec(x):
        return rec(x - 1) if x else 0
    return rec(xs)

def b(xs):
    def even(x):
        return x == 0 or odd(x - 1)
    def odd(x):
        return x != 0 and even(x - 1)
    out = even(xs)
    even = odd = None
    return out

def c(xs):
    def rec(x):
        return rec(x - 1) if x else 0
    try:
        return rec(xs)
    finally:
        rec = None

def d(xs):
    def leaf(x):
        return x
    def tree(x):
        return leaf(x)
    return tree(xs)

def e(xs):
    f = lambda x: f(x - 1) if x else 0
    return f(xs)
'''
    assert [x.split(":")[0] + x.split(":", 2)[2] for x in _local_recursion_left_linked(ast.parse(src))] == [
        "a ['rec']", "b ['even', 'odd']", "e ['f']"]
