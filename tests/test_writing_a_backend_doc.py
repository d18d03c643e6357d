"""docs/writing-a-backend.md is complete enough to write a backend from it alone (issue 13, item 3):
the guide's complete backend is copied out of the Markdown and the whole conformance kit runs on it
in a subprocess; nothing may fail, and only kinds it does not declare may be skipped."""
from __future__ import annotations

import pathlib
import re

import pytest

pytest_plugins = ["pytester"]

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "writing-a-backend.md"


def _guide_backend() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    mine = [b for b in blocks if b.startswith("# my_backend.py\n")]
    assert len(mine) == 1, "the guide has one complete backend block starting '# my_backend.py'"
    return mine[0]


@pytest.mark.timeout(600)
def test_backend_written_from_the_guide_passes_the_kit(pytester):
    pytester.makepyfile(my_backend=_guide_backend())
    pytester.makepyfile(test_mine='''
from structgate.backends.registry import BackendSpec, register_backend
from structgate.testing import BackendConformance

register_backend(BackendSpec(name="my-choice", factory="my_backend:MyBackend", kinds=("choice",)))


class TestMyChoice(BackendConformance):
    backend_name = "my-choice"
    contract_entries = ("choice-prefixes",)
''')
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-rs", "-p", "no:randomly", timeout=600)
    text = res.stdout.str()
    out = res.parseoutcomes()
    assert not out.get("failed") and not out.get("errors"), text[-4000:]
    assert out.get("passed", 0) >= 20, text[-4000:]
    skipped = [ln for ln in res.stdout.lines if ln.startswith("SKIPPED")]
    assert all("does not support kind" in ln for ln in skipped), skipped


def test_guide_names_the_calls_the_kit_makes():
    """The points a backend author tripped over are in the guide."""
    text = DOC.read_text(encoding="utf-8")
    for needle in ("advance(258)", "matcher(self, *, max_rollback_tokens: int = -1)", "self._as_list(token_ids)",
                   "return `need_apply`", "**negative**", "extra_options", "refusals"):
        assert needle in text, needle
