"""The test suite must fail, not skip, when a backend breaks (issue 13, item 7).

Each test runs real test files of this suite in a subprocess (pytester) with a ``conftest.py`` that
breaks the native backend on purpose, and asserts that the run reports failures and that nothing
about native was skipped. Also: the conformance kit treats an unexpected ``UnsupportedFeatureError``
as a failure, and a documented deviation that starts passing fails the run (strict xfail).
"""
from __future__ import annotations

import pathlib
import shutil

import pytest

pytest_plugins = ["pytester"]

TESTS = pathlib.Path(__file__).parent

BREAK_NATIVE = '''
import pytest
from structgate.native.backend import NativeBackend
from structgate.errors import {exc}

def _broken(self, constraint):
    raise {exc}({args})

@pytest.fixture(autouse=True, scope="session")
def _break_native():
    mp = pytest.MonkeyPatch()
    mp.setattr(NativeBackend, "_compile", _broken)
    yield
    mp.undo()

# collection-time checks (skipif conditions) see the broken backend too
NativeBackend._compile = _broken
'''


def _run(pytester, files, conftest, *args):
    for f in files:
        shutil.copy(TESTS / f, pytester.path / f)
    if (TESTS / "conftest.py").exists():
        text = (TESTS / "conftest.py").read_text()
    else:
        text = ""
    pytester.makeconftest(text + "\n" + conftest)
    data = pytester.path / "data"
    if not data.exists():
        data.symlink_to(TESTS / "data")
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-rs", *args, timeout=600)


@pytest.mark.timeout(600)
def test_broken_native_fails_the_conformance_suite(pytester):
    res = _run(pytester, ["test_conformance.py"], BREAK_NATIVE.format(exc="GrammarSyntaxError",
                                                                      args='"broken on purpose", "", 0'),
               "-k", "Native")
    out = res.parseoutcomes()
    assert out.get("failed", 0) + out.get("errors", 0) >= 50, res.stdout.str()[-3000:]
    # the only skips left are about declared kinds, never "native not usable"
    skipped = [ln for ln in res.stdout.lines if ln.startswith("SKIPPED")]
    assert all("does not support kind" in ln or "supports every kind" in ln for ln in skipped), skipped


@pytest.mark.timeout(600)
def test_unexpected_unsupported_feature_fails_not_skips(pytester):
    res = _run(pytester, ["test_conformance.py"],
               BREAK_NATIVE.format(exc="UnsupportedFeatureError", args='"everything", "broken on purpose"'),
               "-k", "TestNativeConformance and not Llama3 and corpus_accept")
    out = res.parseoutcomes()
    assert out.get("failed", 0) >= 10 and not out.get("passed"), res.stdout.str()[-3000:]
    assert "refuses corpus entry" in res.stdout.str()
    skipped = [ln for ln in res.stdout.lines if ln.startswith("SKIPPED")]
    assert all("does not support kind" in ln for ln in skipped), skipped


@pytest.mark.timeout(600)
def test_broken_native_fails_the_diff_tests(pytester):
    res = _run(pytester, ["test_diff.py"], BREAK_NATIVE.format(exc="GrammarSyntaxError",
                                                               args='"broken on purpose", "", 0'),
               "-k", "maskbench_sample or field_case_regexes")
    out = res.parseoutcomes()
    assert out.get("failed", 0) >= 1 and not out.get("skipped"), res.stdout.str()[-3000:]


def test_fixed_deviation_and_declared_refusals_are_strict(pytester):
    """A deviation that passes fails the run (XPASS strict); a declared refusal that compiles fails."""
    pytester.makepyfile(test_kit='''
from structgate.testing import BackendConformance

class TestFixedDeviation(BackendConformance):
    backend_name = "native"
    deviations = {"test_reset": "was broken once"}
    refusals = {"regex-digits": "claimed refused, but native compiles it"}
''')
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-rA", "-k",
                                        "test_reset or regex-digits", timeout=300)
    text = res.stdout.str()
    assert "XPASS(strict)" in text or "[XPASS(strict)]" in text, text[-3000:]
    assert "DID NOT RAISE" in text, text[-3000:]
    out = res.parseoutcomes()
    assert out.get("failed", 0) >= 4 and not out.get("skipped"), text[-3000:]
