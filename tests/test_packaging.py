"""The wheel (issue 13, items 5 and 6): metadata that passes ``twine check``, an SPDX licence with
every bundled file's licence, no dependency nothing imports."""
from __future__ import annotations

import ast
import email
import pathlib
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "structgate"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    # build from a copy of the checkout's files (as a fresh clone would; an in-tree build/ folder
    # can hold stale files of moved modules)
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out)], check=True, timeout=600, capture_output=True)
    (whl,) = out.glob("structgate-*.whl")
    return whl


def _metadata(whl: pathlib.Path):
    with zipfile.ZipFile(whl) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(z.read(name)), z.namelist()


@pytest.mark.timeout(900)
def test_twine_check_passes(wheel):
    twine = shutil.which("twine") or str(pathlib.Path(sys.executable).with_name("twine"))
    if not pathlib.Path(twine).exists():
        pytest.fail("twine is in the test extra (pip install -e '.[test]')")
    r = subprocess.run([twine, "check", "--strict", str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr


@pytest.mark.timeout(900)
def test_spdx_licence_and_every_bundled_licence(wheel):
    meta, names = _metadata(wheel)
    assert meta["License-Expression"] == "Apache-2.0" and meta["License"] is None
    files = set(meta.get_all("License-File"))
    assert {"LICENSE", "NOTICE"} <= files
    lic_dir = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE")).rsplit("/", 1)[0]
    notice = (ROOT / "NOTICE").read_text(encoding="utf-8")
    # every folder of bundled data carries a licence for each upstream, in the package and in dist-info
    data_dirs = {pathlib.PurePosixPath(n).parent for n in names if n.startswith("structgate/data/")
                 and not n.endswith((".md", "/"))}
    assert data_dirs
    for d in data_dirs:
        lics = [n for n in names if n.startswith(f"{d}/LICENSE")]
        assert lics, f"{d} has no licence file"
        for lic in lics:
            assert f"{lic_dir}/{lic}" in names, lic
        assert f"{d}/" in notice, f"NOTICE does not mention {d}"
    for d in ("llama3", "llama2"):  # the Meta licences themselves, not only llama.cpp's MIT
        assert f"structgate/data/tokenizers/{d}/LICENSE.meta-{d.replace('llama', 'llama-')}" in names
    assert "Built with Meta Llama 3" in notice


def _imported_top_level() -> set[str]:
    mods: set[str] = set()
    for path in PKG.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module.split(".")[0])
    return mods


def test_every_dependency_is_imported():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    import_name = {"pluggy": "pluggy", "numpy": "numpy", "tokenizers": "tokenizers", "tiktoken": "tiktoken",
                   "jsonschema": "jsonschema", "rich": "rich"}
    used = _imported_top_level()
    for d in deps:
        name = d.split(">")[0].split("=")[0].split("<")[0].strip()
        assert name != "gguf", "gguf is declared but structgate reads GGUF files itself"
        assert import_name.get(name, name) in used, f"dependency {name} is never imported"


@pytest.mark.timeout(900)
def test_the_wheel_holds_the_product_not_the_harness(wheel):
    """The benchmark harness (with backends that abort or sleep on purpose, and a vLLM driver) lives in
    bench/ (distribution structgate-bench), not in the structgate wheel (issue 13, item 6)."""
    _, names = _metadata(wheel)
    assert not [n for n in names if n.startswith("structgate/bench/") or n.endswith("fakes.py")]
    assert not [n for n in names if "maskstep" in n]
    assert "structgate/cli/bench.py" not in names


def test_only_the_plugin_imports_vllm():
    """Layering: only structgate/plugin/ imports vLLM (module level or inside functions)."""
    bad = []
    for path in PKG.rglob("*.py"):
        if path.relative_to(PKG).parts[0] == "plugin":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(n == "vllm" or n.startswith("vllm.") for n in names):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad
