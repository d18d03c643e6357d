"""Every ``structgate`` command's defaults work on a fresh clone with nothing around it (issue 13,
item 1): the bench corpora default to samples shipped with the harness, never to a path of a
development machine."""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

import pytest

from structgate.cli import build_parser

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _all_defaults(parser: argparse.ArgumentParser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _all_defaults(sub, prefix + (name,))
        elif action.default not in (None, argparse.SUPPRESS):
            yield prefix, action.dest, action.default


def test_no_default_points_outside_the_installed_code():
    import structgate
    import structgate_bench

    allowed = [pathlib.Path(structgate.__file__).parent, pathlib.Path(structgate_bench.__file__).parent]
    seen = 0
    for cmd, dest, default in _all_defaults(build_parser()):
        for v in (default if isinstance(default, (list, tuple)) else [default]):
            if isinstance(v, str) and (v.startswith("/") or "shared" in v):
                p = pathlib.Path(v)
                assert any(p.is_relative_to(a) for a in allowed), (cmd, dest, v)
                assert p.exists(), (cmd, dest, v)
                seen += 1
    assert seen >= 2  # maskbench --corpus, jsts --suite


def test_regex_default_corpora_are_shipped():
    from structgate_bench.commands import DEFAULT_REGEX_CORPORA

    for p in DEFAULT_REGEX_CORPORA:
        assert pathlib.Path(p).exists(), p
        assert any(pathlib.Path(p).glob("LICENSE*")), f"{p}: no licence"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("bench", ["maskbench", "jsts", "regex"])
def test_bench_runs_with_its_defaults_from_an_empty_folder(bench, tmp_path):
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-m", "structgate.cli", "bench", bench, "--backends", "native", "--limit", "2",
                        "--no-progress", "--quiet", "--json", str(out)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["meta"], doc.keys()
    assert "/work/shared" not in out.read_text()
