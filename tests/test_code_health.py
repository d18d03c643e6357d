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
