"""The in-process profiling scripts (``bench/first_visits.py``, ``bench/gap_by_schema.py``,
``bench/gc_pauses.py``, ``bench/first_visit_kinds.py``) compile with the options ``structgate bench maskbench`` uses, first_visits'
step split adds up, and gc_pauses times the collections that run during the walk.

Oracle: the options the harness passes to its workers (``bench_maskbench`` with a recording
runner), and the step count of the benchmark's own walk (``structgate_bench.worker._walk``)."""
from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

import pytest

from structgate import Constraint
from structgate_bench import commands, sample
from structgate_bench.corpora import load_maskbench, tokenize_items
from structgate_bench.worker import _make_backend, _walk

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "maskbench_sample"

pytestmark = pytest.mark.timeout(300)


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _harness_options(monkeypatch) -> dict:
    """The options ``bench_maskbench`` hands its workers (the run itself is not made)."""
    seen = {}

    def fake_run(kind, items, **kw):
        seen.update(kw["options"])
        raise RuntimeError("stop")

    monkeypatch.setattr(commands, "_common_run", fake_run)
    with pytest.raises(RuntimeError, match="stop"):
        commands.bench_maskbench(str(CORPUS), backends=["native"], limit=1, progress=False, quiet=True)
    return seen


@pytest.mark.parametrize("name", ["first_visits", "gap_by_schema", "gc_pauses", "first_visit_kinds"])
def test_scripts_compile_with_the_harness_options(name, monkeypatch, llama3_vocab):
    harness = _harness_options(monkeypatch)
    assert harness == sample.JSON_BENCH_OPTIONS
    mod = _script(name)
    got = []

    def record(backend, vocab, options):
        got.append(dict(options))
        raise SystemExit(0)  # stop at the first backend: only its options are under test

    monkeypatch.setattr(mod, "_make_backend", record)
    monkeypatch.setattr(mod, "load_sample", lambda ap, a: ([], llama3_vocab, 1, (0,)))
    with pytest.raises(SystemExit):
        mod.main(["--corpus", str(CORPUS)] + (["--backends", "native,native"] if name == "gap_by_schema" else []))
    assert got and {k: got[0][k] for k in harness} == harness and got[0]["threads"] == 1


def test_first_visits_split_adds_up(capsys, llama3_vocab):
    """Cached fills plus first visits are every step of the benchmark's walk, and a grammar's
    first fill is a first visit."""
    mod = _script("first_visits")
    mod.main(["--corpus", str(CORPUS), "--step", "3", "--methods", "_compute"])
    out = capsys.readouterr().out
    steps = int(re.search(r"mask steps (\d+)", out).group(1))
    cached = int(re.search(r"cached fills\s+(\d+) steps", out).group(1))
    first = int(re.search(r"first visits\s+(\d+) steps", out).group(1))
    computes = int(re.search(r"_compute\s+calls\s+(\d+)", out).group(1))
    # the oracle: the benchmark's walk over the same sample counts the same steps
    items = load_maskbench(str(CORPUS))[::3]
    tokenize_items(items, llama3_vocab)
    be = _make_backend("native", llama3_vocab, sample.bench_options(threads=1))
    width, eos = (llama3_vocab.vocab_size + 31) // 32, tuple(llama3_vocab.eos_token_ids)
    n = n_grammars = 0
    for it in items:
        try:
            g = be.compile(Constraint(it.kind, it.value, None))
        except Exception:  # noqa: BLE001 - refused schemas have no steps, in either count
            continue
        n_grammars += 1
        n += _walk(g, it.tests, eos, width)[1].size
    assert steps == n == cached + first
    assert first >= n_grammars  # each grammar's first fill computes its row
    assert computes >= first  # a first visit computes at least its own row


@pytest.mark.parametrize("text, kind", [
    ("", "start"), ('{', "after-{"), ('{"', "key:open"), ('{"na', "key:mid"), ('{"name"', "expect-colon"),
    ('{"name":', "expect-value"), ('{"name": ', "expect-value+ws"), ('{"name": "', "vstr:open"),
    ('{"name": "a\\"b', "vstr:mid"), ('{"name": "ab"', "after-value"), ('{"name": "ab",', "expect-key"),
    ('{"a": [', "after-["), ('{"a": [1, ', "expect-value+ws"), ('{"a": -1.', "number"), ('{"a": tr', "literal"),
    ('{"a": {"b": 1}, "', "key:open"), ('["{", "', "vstr:open"), ('[{"k": "v"}, {"', "key:open"),
])
def test_first_visit_kinds_labels_positions(text, kind):
    """Oracle: the positions written out by hand (strings holding structural bytes and escaped
    quotes included)."""
    assert _script("first_visit_kinds").classify(text.encode()) == kind


def test_first_visit_kinds_counts_the_first_visits(capsys):
    """Its first visits over a sample are first_visits' (the split checked against the
    benchmark's walk above), and the kinds' seconds add up to its total."""
    _script("first_visits").main(["--corpus", str(CORPUS), "--step", "3", "--methods", "_compute"])
    first = int(re.search(r"first visits\s+(\d+) steps", capsys.readouterr().out).group(1))
    _script("first_visit_kinds").main(["--corpus", str(CORPUS), "--step", "3"])
    out = capsys.readouterr().out
    assert int(re.search(r"first visits (\d+)", out).group(1)) == first > 0
    total = float(re.search(r"first visits \d+\s+([\d.]+) s", out).group(1))
    rows = re.findall(r"^(\S+)\s+(\d+)\s+([\d.]+)\s", out, re.M)
    assert sum(int(n) for _k, n, _s in rows) == first
    assert sum(float(x) for _k, _n, x in rows) == pytest.approx(total, abs=0.01 * len(rows) + 0.01)


def test_gc_pauses_counts_the_walk_and_the_collections(capsys, monkeypatch):
    """The walk's step count is the benchmark's (first_visits' walk, checked above), and a
    generation-2 collection run during a walk is reported (the oracle: one forced per schema)."""
    import gc

    mod = _script("gc_pauses")
    real = mod._walk_split
    forced = []

    def walk(g, tests, eos, width):
        gc.collect()  # a full collection: generation 2
        forced.append(1)
        return real(g, tests, eos, width)

    monkeypatch.setattr(mod, "_walk_split", walk)
    mod.main(["--corpus", str(CORPUS), "--step", "3"])
    out = capsys.readouterr().out
    assert int(re.search(r"generation-2 collections (\d+)", out).group(1)) >= len(forced) > 0
    assert int(re.search(r"mask steps (\d+)", out).group(1)) > 0
    assert "mid-run tracked objects" in out


def test_ab_walk_compares_and_restores_the_setting(capsys):
    """Two values of a mask-path setting: same verdicts (the oracle: the setting changes no
    language), the setting restored afterwards; a value that changes the language is reported."""
    from structgate.native import pushdown

    mod = _script("ab_walk")
    before = pushdown.PushdownIndex.SUFFIX_OK_MAX
    out = mod.main(["--corpus", str(CORPUS), "--step", "3", "--target",
                    "structgate.native.pushdown:PushdownIndex.SUFFIX_OK_MAX", "--a", "2048", "--b", "0", "--no-gc"])
    assert out["verdicts_equal"] is True
    assert out["A"]["thread_s"] > 0 and out["B"]["thread_s"] > 0
    assert pushdown.PushdownIndex.SUFFIX_OK_MAX == before
    # a setting that changes verdicts is reported: here one that flips every walk's verdict
    import types

    knob = types.ModuleType("_ab_knob")
    knob.flip = False
    sys.modules["_ab_knob"] = knob
    real_walk = mod._walk

    def walk(g, tests, eos, width):
        res, steps = real_walk(g, tests, eos, width)
        return [{**r, "accepted": (not r["accepted"]) if knob.flip else r["accepted"]} for r in res], steps

    mod._walk = walk
    try:
        out = mod.main(["--corpus", str(CORPUS), "--step", "3", "--target", "_ab_knob:flip", "--a", "False", "--b", "True"])
    finally:
        del sys.modules["_ab_knob"]
    assert out["verdicts_equal"] is False and knob.flip is False
    with pytest.raises(SystemExit):
        mod.main(["--corpus", str(CORPUS), "--target", "structgate.native.pushdown:NoSuch", "--a", "1", "--b", "2"])
    capsys.readouterr()


def test_ab_trees_runs_each_side_on_its_own_tree(tmp_path):
    """Side B's compiles run tree B's code and side A's tree A's: a copy of this tree whose
    native compile logs each call is B; its log holds exactly one entry per schema (A's compiles,
    from this tree, log nothing), and this process's own modules are back afterwards."""
    import shutil

    import structgate

    copy = tmp_path / "tree"
    ign = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "structgate", copy / "structgate", ignore=ign)
    shutil.copytree(ROOT / "bench" / "structgate_bench", copy / "bench" / "structgate_bench", ignore=ign)
    log = tmp_path / "compiles.log"
    be = copy / "structgate" / "native" / "backend.py"
    src = be.read_text()
    marker = "    def _compile_uncached(self, constraint: Constraint, key: str) -> NativeCompiledGrammar:\n"
    assert marker in src
    be.write_text(src.replace(marker, marker + f"        with open({str(log)!r}, 'a') as _f:\n            _f.write('x\\n')\n", 1))
    mod = _script("ab_trees")
    out = mod.main(["--corpus", str(CORPUS), "--step", "2", "--a", str(ROOT), "--b", str(copy)])
    n_items = len(load_maskbench(str(CORPUS))[::2])
    assert log.read_text().count("x") == n_items
    assert out["n"] >= 1 and len(out["a_us"]) == len(out["b_us"]) == out["n"]
    assert sys.modules["structgate"] is structgate


def test_first_visits_no_gc_pauses_the_collector_for_the_walk_only(monkeypatch, capsys):
    """``--no-gc``: the walk runs with the cyclic collector disabled (the engine's own pauses then
    restore nothing), and the collector is enabled again afterwards."""
    import gc

    mod = _script("first_visits")
    seen = []
    real = mod._walk_split

    def walk(*args):
        seen.append(gc.isenabled())
        return real(*args)

    monkeypatch.setattr(mod, "_walk_split", walk)
    assert gc.isenabled()
    mod.main(["--corpus", str(CORPUS), "--step", "3", "--methods", "_compute", "--no-gc"])
    assert seen and not any(seen) and gc.isenabled()
    mod.main(["--corpus", str(CORPUS), "--step", "3", "--methods", "_compute"])
    assert seen[-1] is True
    assert "mask steps" in capsys.readouterr().out
    # the method timers are taken off again
    from structgate.native import pushdown

    assert pushdown.PushdownIndex._compute.__qualname__ == "PushdownIndex._compute"
