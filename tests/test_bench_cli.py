"""``structgate bench maskbench|jsts|regex`` on tiny samples: JSON structure, counts that add up,
isolation (timeouts / OOM / crashes of one item do not stop the run), plots and tables.

Oracles: ``jsonschema`` (the Basic split's flags), Python ``re`` (regex verdicts), and
``FaultyBackend``, whose behaviour per item is known exactly.
"""
from __future__ import annotations

import json
import pathlib
import re
import sys
import types

import numpy as np
import pytest

from structgate_bench.corpora import CorpusError, load_jsts, load_maskbench, load_regex_corpus, round_robin_limit
from structgate_bench.report import (JSTS_OUTCOMES, OUTCOMES, REGEX_PATTERN_OUTCOMES, REGEX_STRING_OUTCOMES,
                                     schema_outcome, summary)
from structgate.cli import main

DATA = pathlib.Path(__file__).parent / "data"

BENCH = DATA / "bench"
FAKE = "structgate_bench.fakes:FaultyBackend"
STAT_KEYS = {"n", "avg", "p50", "p90", "p95", "p99", "p999", "max"}
COUNT_KEYS = {"schemas", *OUTCOMES}

pytestmark = pytest.mark.timeout(300)


def _real_backends(n: int = 2) -> list[str]:
    """Up to ``n`` fast, importable real backends (llguidance and native start in well under a second)."""
    from structgate_bench.runner import resolve_backends

    names, _ = resolve_backends(None)
    out = []
    for cand in ("structgate-llguidance", "native"):
        if cand not in names:
            continue
        try:
            from structgate.backends.registry import get_backend_spec

            get_backend_spec(cand).load_factory()
        except Exception:  # noqa: BLE001 - a backend being written right now may not import
            continue
        out.append(cand)
    return out[:n]


def _run(*args: str) -> int:
    return main(["bench", *args, "--quiet", "--no-progress"])


def _check_meta(meta: dict, backends: list[str]) -> None:
    assert meta["tokenizer"]["name"] == "llama3" and meta["tokenizer"]["n_tokens"] == 128256
    assert meta["machine"]["cores"] >= 1 and meta["machine"]["cpu"]
    assert re.match(r"\d{4}-\d\d-\d\dT", meta["date"])
    assert meta["threads"] == 1
    assert {"timeout_s", "max_memory_mb"} <= set(meta["limits"])
    assert meta["versions"]["structgate"]
    assert set(meta["backends_run"]) == set(backends)


# ------------------------------------------------------------------------------- harness isolation
def test_maskbench_faulty_backend_partition_is_exact(tmp_path):
    out, det = tmp_path / "f.json", tmp_path / "f.jsonl"
    rc = _run("maskbench", "--corpus", str(BENCH / "faults"), "--backends", FAKE, "--timeout-s", "1.5",
              "--max-memory-mb", "1024", "--json", str(out), "--details", str(det))
    assert rc == 0
    doc = json.loads(out.read_text())
    _check_meta(doc["meta"], [FAKE])
    b = doc["backends"][FAKE]
    expected = {"schemas": 10, "passing": 1, "compile_errors": 2, "timeouts": 2, "oom": 2, "crashes": 1,
                "validation_errors": 1, "invalidation_errors": 1}
    assert {k: b[k] for k in expected} == expected
    assert sum(b[k] for k in OUTCOMES) == b["schemas"]
    assert b["compile_errors_by_kind"] == {"unsupported": 1, "engine:RuntimeError": 1}
    # timeouts count at the limit: one compile-phase timeout (TTFM) and one walk-phase one (TBM)
    assert b["ttfm_us"]["max"] == pytest.approx(1.5e6)
    assert b["tbm_us"]["max"] == pytest.approx(1.5e6)
    outcome = {json.loads(l)["id"]: json.loads(l)["outcome"] for l in det.read_text().splitlines()}
    assert outcome == {"fault-sleep": "timeouts", "fault-sleep-walk": "timeouts", "fault-oom": "oom",
                       "fault-abort-oom": "oom", "fault-abort": "crashes", "fault-unsupported": "compile_errors",
                       "fault-engine-error": "compile_errors", "fault-reject-all": "validation_errors",
                       "accepts-invalid": "invalidation_errors", "valid-only": "passing"}
    # the worker was restarted after each timeout / death and the run went on
    assert doc["meta"]["backends_run"][FAKE]["restarts"] >= 4
    assert b["splits"]["Faults"]["schemas"] == 10


def test_walk_is_exact_with_reference_engine(tmp_path):
    """EnumBackend is an exact engine (brute-force masks): every schema it supports must pass, so the
    harness's bit tests, EOS rule and accept/reject bookkeeping are right (flags from jsonschema)."""
    out, det = tmp_path / "e.json", tmp_path / "e.jsonl"
    ref = "structgate_bench.fakes:EnumBackend"
    # two backends on two scheduler slots: results must still come back complete and in item order
    assert _run("maskbench", "--corpus", str(BENCH / "exact"), "--backends", f"{ref},{FAKE}", "--jobs", "2",
                "--json", str(out), "--details", str(det)) == 0
    doc = json.loads(out.read_text())
    assert "error" not in doc["backends"][FAKE], doc["backends"][FAKE]["error"]  # say why it could not run
    assert doc["backends"][FAKE]["schemas"] == 4 and doc["meta"]["jobs"] == 2
    b = doc["backends"][ref]
    assert (b["schemas"], b["passing"], b["compile_errors"]) == (4, 3, 1)
    assert b["compile_errors_by_kind"] == {"unsupported": 1}
    items = {i.id: i for i in load_maskbench(BENCH / "exact")}
    lines = [json.loads(x) for x in det.read_text().splitlines()]
    assert [r["id"] for r in lines if r["backend"] == ref] == list(items)
    for r in lines:
        if r["backend"] != ref or r["outcome"] != "passing":
            continue
        for t, spec in zip(r["tests"], items[r["id"]].tests):
            assert t["accepted"] == spec["valid"]
            n = len(spec["ids"]) if "ids" in spec else t["n_tokens"]
            assert (t["rejected_at"] is None) == spec["valid"] and (t["rejected_at"] or 0) <= n
    assert b["instances"]["mask_advance_mismatches"] == 0


def _strip_times(doc: dict) -> dict:
    """Counts only (timings differ between runs)."""
    return {n: {k: b[k] for k in (*COUNT_KEYS, "compile_errors_by_kind", "instances")}
            | {"splits": {s: {k: c[k] for k in COUNT_KEYS} for s, c in b["splits"].items()}}
            for n, b in doc["backends"].items()}


def test_checkpoint_resume_equals_one_run(tmp_path):
    """A run stopped part-way (``--max-wall-s``) and resumed from its ``--checkpoint`` gives the same
    counts as one uninterrupted run; resumed items are not run again; a torn last line is ignored;
    other settings on the same file are refused with a typed error."""
    ref = "structgate_bench.fakes:EnumBackend"
    backends = f"{ref},{FAKE}"
    whole = tmp_path / "whole.json"
    assert _run("maskbench", "--corpus", str(BENCH / "exact"), "--backends", backends, "--json", str(whole)) == 0
    ck, part, res = tmp_path / "run.ckpt.jsonl", tmp_path / "part.json", tmp_path / "resumed.json"
    # time box of 0: nothing runs, the report is empty but well-formed and says what was left out
    assert _run("maskbench", "--corpus", str(BENCH / "exact"), "--backends", backends, "--checkpoint", str(ck),
                "--max-wall-s", "0", "--json", str(part)) == 0
    doc = json.loads(part.read_text())
    assert all(b["schemas"] == 0 for b in doc["backends"].values())
    assert {n: r["not_run"] for n, r in doc["meta"]["backends_run"].items()} == {ref: 4, FAKE: 4}
    # the first two items only, then a torn line as a killed run leaves it
    assert _run("maskbench", "--corpus", str(BENCH / "exact"), "--backends", backends, "--checkpoint", str(ck),
                "--limit", "2", "--json", str(part)) == 0
    lines = ck.read_text().splitlines()
    assert json.loads(lines[0])["checkpoint"] == 2 and sum('"result"' in x for x in lines) == 4
    with open(ck, "a") as f:  # torn mid-record, and ending in "}" by chance
        f.write('{"backend": "x", "split": "Exact", "id": "e", "result": {"a": {}}')
    assert _run("maskbench", "--corpus", str(BENCH / "exact"), "--backends", backends, "--checkpoint", str(ck),
                "--json", str(res)) == 0
    doc = json.loads(res.read_text())
    assert doc["meta"]["checkpoint"]["resumed"] == 4
    assert _strip_times(doc) == _strip_times(json.loads(whole.read_text()))
    def _records(text):
        for x in text.splitlines()[1:]:
            try:
                yield json.loads(x)
            except json.JSONDecodeError:  # the torn line, left where it was
                continue
    results = [r for r in _records(ck.read_text()) if "result" in r]
    assert len(results) == 8 and len({(r["backend"], r["id"]) for r in results}) == 8
    # a report-only pass over the full checkpoint runs nothing and agrees
    assert _run("maskbench", "--corpus", str(BENCH / "exact"), "--backends", backends, "--checkpoint", str(ck),
                "--max-wall-s", "0", "--json", str(part)) == 0
    assert _strip_times(json.loads(part.read_text())) == _strip_times(doc)
    assert sum("result" in r for r in _records(ck.read_text())) == 8  # nothing ran again
    # other settings: refused, file untouched
    before = ck.read_text()
    assert _run("maskbench", "--corpus", str(BENCH / "exact"), "--backends", backends, "--checkpoint", str(ck),
                "--timeout-s", "7") == 2
    assert ck.read_text() == before


def test_checkpoint_reuses_only_matching_items_and_refuses_misuse(tmp_path, capsys):
    """A result is reused only for the same item content (not the same id with another schema);
    malformed, locked or clashing checkpoints are typed errors, not tracebacks."""
    import fcntl

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    rec = {"id": "x", "schema": {"enum": ["p"]}, "tests": [{"data": "p", "valid": True}, {"data": "q", "valid": False}]}
    (a / "S.jsonl").write_text(json.dumps(rec) + "\n")
    rec2 = {"id": "x", "schema": {"enum": ["q"]}, "tests": [{"data": "q", "valid": True}, {"data": "p", "valid": False}]}
    (b / "S.jsonl").write_text(json.dumps(rec2) + "\n")
    ref = "structgate_bench.fakes:EnumBackend"
    ck, out = tmp_path / "c.jsonl", tmp_path / "o.json"
    assert _run("maskbench", "--corpus", str(a), "--backends", ref, "--checkpoint", str(ck)) == 0
    assert _run("maskbench", "--corpus", str(b), "--backends", ref, "--checkpoint", str(ck), "--json", str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["meta"]["checkpoint"]["resumed"] == 0  # same id, other content: run again
    assert doc["backends"][ref]["passing"] == 1
    capsys.readouterr()
    # malformed checkpoints: typed, one line
    for body in ('[1, 2]\n', '"x"\n', '{"checkpoint": 2}\n', 'not json\n'):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(body)
        assert _run("maskbench", "--corpus", str(a), "--backends", ref, "--checkpoint", str(bad)) == 2
        err = capsys.readouterr().err
        assert "CheckpointError" in err and "not a structgate bench checkpoint" in err and "Traceback" not in err
    good_head = ck.read_text().splitlines()[0]
    bad.write_text(good_head + "\n" + '{"backend": "x", "result": {}}\n' + '{"backend": "y"}\n')
    assert _run("maskbench", "--corpus", str(a), "--backends", ref, "--checkpoint", str(bad)) == 2
    assert "bad.jsonl:2: malformed record" in capsys.readouterr().err
    assert _run("maskbench", "--corpus", str(a), "--backends", ref, "--checkpoint", str(tmp_path)) == 2
    assert "CheckpointError" in capsys.readouterr().err
    # a checkpoint in use by another run
    with open(ck, "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert _run("maskbench", "--corpus", str(a), "--backends", ref, "--checkpoint", str(ck)) == 2
        assert "in use by another run" in capsys.readouterr().err
    # outputs that would overwrite the checkpoint; a time box of 0 with nothing to report
    assert _run("maskbench", "--corpus", str(a), "--backends", ref, "--checkpoint", str(ck), "--details", str(ck)) == 2
    assert "same file" in capsys.readouterr().err
    assert _run("maskbench", "--corpus", str(a), "--backends", ref, "--max-wall-s", "0") == 2
    assert "--checkpoint" in capsys.readouterr().err
    for v in ("-5", "nan", "inf"):
        with pytest.raises(SystemExit):
            _run("maskbench", "--corpus", str(a), "--backends", ref, "--max-wall-s", v)
    # duplicate (split, id): refused before anything runs
    (a / "S.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(rec2) + "\n")
    assert _run("maskbench", "--corpus", str(a), "--backends", ref) == 2
    assert "duplicate id 'x'" in capsys.readouterr().err


def test_common_items_reports_everyone_on_the_same_items(tmp_path):
    ref = "structgate_bench.fakes:EnumBackend"
    ck, out, md = tmp_path / "c.ckpt.jsonl", tmp_path / "c.json", tmp_path / "c.md"
    corpus = str(BENCH / "exact")
    assert _run("maskbench", "--corpus", corpus, "--backends", f"{ref},{FAKE}", "--limit", "2", "--checkpoint", str(ck)) == 0
    assert _run("maskbench", "--corpus", corpus, "--backends", FAKE, "--checkpoint", str(ck)) == 0  # FAKE: all 4
    assert _run("maskbench", "--corpus", corpus, "--backends", f"{ref},{FAKE}", "--checkpoint", str(ck),
                "--max-wall-s", "0", "--json", str(out), "--markdown", str(md)) == 0
    doc = json.loads(out.read_text())
    assert (doc["backends"][ref]["schemas"], doc["backends"][FAKE]["schemas"]) == (2, 4)
    assert doc["meta"]["backends_run"][ref]["not_run"] == 2 and "2 items left out" in md.read_text()
    assert _run("maskbench", "--corpus", corpus, "--backends", f"{ref},{FAKE}", "--checkpoint", str(ck),
                "--max-wall-s", "0", "--common-items", "--json", str(out), "--markdown", str(md)) == 0
    doc = json.loads(out.read_text())
    assert doc["meta"]["common_items"] == 2
    assert all(b["schemas"] == 2 and sum(b[k] for k in OUTCOMES) == 2 for b in doc["backends"].values())
    assert doc["meta"]["backends_run"][FAKE]["not_run"] == 2 and "same 2 items" in md.read_text()


def test_shuffle_limit_is_a_seeded_uniform_sample(tmp_path):
    ids = {}
    for run, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        det = tmp_path / f"{run}.jsonl"
        assert _run("maskbench", "--corpus", str(BENCH / "faults"), "--backends", FAKE, "--shuffle", seed,
                    "--limit", "4", "--timeout-s", "1.5", "--details", str(det)) == 0
        ids[run] = [json.loads(x)["id"] for x in det.read_text().splitlines()]
    everything = [i.id for i in load_maskbench(BENCH / "faults")]
    assert ids["a"] == ids["b"] and len(set(ids["a"])) == 4 and set(ids["a"]) <= set(everything)
    assert ids["a"] != ids["c"] and ids["a"] != everything[:4]


# ------------------------------------------------------------------------------ real backends
def test_maskbench_real_backends_structure_counts_plot(tmp_path):
    backends = _real_backends()
    if not backends:
        pytest.skip("no real backend importable in this checkout")
    out, png, md = tmp_path / "m.json", tmp_path / "m.png", tmp_path / "m.md"
    rc = _run("maskbench", "--corpus", str(BENCH / "maskbench"), "--backends", ",".join(backends), "--timeout-s", "60",
              "--json", str(out), "--plot", str(png), "--markdown", str(md))
    assert rc == 0
    doc = json.loads(out.read_text())
    _check_meta(doc["meta"], backends)
    items = load_maskbench(BENCH / "maskbench")
    n_inst = sum(len(i.tests) for i in items)
    for name in backends:
        b = doc["backends"][name]
        assert COUNT_KEYS <= set(b) and set(b["ttfm_us"]) == STAT_KEYS and set(b["tbm_us"]) == STAT_KEYS
        assert b["schemas"] == len(items) == 9
        assert sum(b[k] for k in OUTCOMES) == b["schemas"]
        assert sum(b["compile_errors_by_kind"].values()) == b["compile_errors"]
        assert set(b["splits"]) == {"Basic", "Github_trivial", "Glaiveai2K"}
        for s in b["splits"].values():
            assert sum(s[k] for k in OUTCOMES) == s["schemas"]
        assert sum(s["schemas"] for s in b["splits"].values()) == b["schemas"]
        assert b["instances"]["total"] == n_inst
        if b["tbm_us"]["n"]:
            t = b["tbm_us"]
            assert 0 < t["p50"] <= t["p90"] <= t["p99"] <= t["p999"] <= t["max"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = md.read_text()
    assert "| metric |" in text and all(n in text for n in backends)


def test_basic_split_flags_agree_with_jsonschema():
    jsonschema = pytest.importorskip("jsonschema")
    for it in load_maskbench(BENCH / "maskbench", splits=["Basic"]):
        for t in it.tests:
            assert jsonschema.Draft202012Validator(it.value).is_valid(json.loads(t["text"])) == t["valid"]


# -------------------------------------------------------------------------------------------- JSTS
def test_jsts_counts_add_up_and_fake_is_exact(tmp_path):
    backends = [FAKE, *_real_backends(1)]
    out = tmp_path / "j.json"
    rc = _run("jsts", "--suite", str(BENCH / "jsts"), "--drafts", "draft2020-12", "--backends", ",".join(backends),
              "--json", str(out))
    assert rc == 0
    doc = json.loads(out.read_text())
    items = load_jsts(BENCH / "jsts", drafts=["draft2020-12"])
    n_tests = sum(len(i.tests) for i in items)
    n_valid = sum(t["valid"] for i in items for t in i.tests)
    files = {"draft2020-12/const", "draft2020-12/maxItems", "draft2020-12/optional/format/date"}
    for name in backends:
        b = doc["backends"][name]
        assert b["tests"] == n_tests and b["schemas"] == len(items)
        assert sum(b[k] for k in JSTS_OUTCOMES) == b["tests"]
        assert set(b["files"]) == files and set(b["drafts"]) == {"draft2020-12"}
        for f in b["files"].values():
            assert sum(f[k] for k in JSTS_OUTCOMES) == f["tests"]
    fake = doc["backends"][FAKE]  # accepts everything: valid tests pass, invalid ones are accepted
    assert fake["passed"] == n_valid and fake["invalid_accepted"] == n_tests - n_valid
    assert fake["compile_errors"] == fake["valid_rejected"] == 0


# ------------------------------------------------------------------------------------------- regex
def _re_truth(pattern: str, text: str):
    if pattern == "(a|a)*c" and text == "a" * 40:
        return None  # catastrophic: the oracle times out
    try:
        rx = re.compile(pattern)
    except re.error:
        return None
    return rx.fullmatch(text) is not None


def test_regex_agreement_with_re(tmp_path):
    backends = [FAKE, *_real_backends(1)]
    out = tmp_path / "r.json"
    rc = _run("regex", "--corpus", str(BENCH / "regex"), "--backends", ",".join(backends), "--re-timeout-s", "0.5",
              "--json", str(out))
    assert rc == 0
    doc = json.loads(out.read_text())
    items = load_regex_corpus([BENCH / "regex"])
    truth = [_re_truth(i.value, t["text"]) for i in items for t in i.tests]
    assert doc["meta"]["oracle"]["timeouts"] == 1
    for name in backends:
        b = doc["backends"][name]
        assert b["patterns"] == len(items)
        assert sum(b[k] for k in REGEX_PATTERN_OUTCOMES) == b["patterns"]
        assert sum(b["strings"][k] for k in REGEX_STRING_OUTCOMES) == b["strings"]["strings"] == len(truth)
    s = doc["backends"][FAKE]["strings"]  # accept-all engine: agrees exactly where re accepts
    assert s["agree"] == sum(v is True for v in truth)
    assert s["false_accept"] == sum(v is False for v in truth)
    assert s["no_oracle"] == sum(v is None for v in truth)
    assert s["false_reject"] == s["not_run"] == 0


# ------------------------------------------------------------------------------------------- units
def test_summary_matches_numpy_and_handles_empty():
    a = np.random.default_rng(0).lognormal(3, 1, 10_001)
    s = summary(a)
    assert s["n"] == a.size and s["max"] == pytest.approx(a.max(), abs=0.01)
    for k, p in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("p999", 99.9)):
        assert s[k] == pytest.approx(np.percentile(a, p), abs=0.01)
    assert summary([])["p50"] is None and summary([])["n"] == 0


def test_round_robin_limit_covers_splits():
    items = load_maskbench(BENCH / "maskbench")
    got = round_robin_limit(items, 3)
    assert sorted(i.split for i in got) == ["Basic", "Github_trivial", "Glaiveai2K"]
    assert round_robin_limit(items, None) == items


def test_outcome_precedence():
    res = {"status": "ok", "tests": [{"accepted": False}, {"accepted": True}]}
    assert schema_outcome(res, [True, False]) == "validation_errors"
    assert schema_outcome({**res, "tests": [{"accepted": True}, {"accepted": True}]}, [True, False]) == "invalidation_errors"
    assert schema_outcome({"status": "timeout"}, [True]) == "timeouts"
    assert schema_outcome({"status": "ok", "tests": [{"accepted": True, "error": "boom"}]}, [True]) == "crashes"


def test_bad_corpus_is_a_typed_error(tmp_path, capsys):
    with pytest.raises(CorpusError):
        load_maskbench(tmp_path / "nope")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "schema": {}, "tests": [{"valid": true}]}\n')
    with pytest.raises(CorpusError, match="bad.jsonl:1"):
        load_maskbench(bad)
    with pytest.raises(CorpusError, match="unknown split"):
        load_maskbench(BENCH / "maskbench", splits=["Nope"])
    assert _run("maskbench", "--corpus", str(tmp_path / "nope"), "--backends", FAKE) == 2
    assert "CorpusError" in capsys.readouterr().err


def test_unknown_backend_exit_code(capsys):
    assert _run("maskbench", "--corpus", str(BENCH / "faults"), "--backends", "no-such-backend") == 2
    assert "no-such-backend" in capsys.readouterr().err


def test_bench_extension_hook(monkeypatch):
    mod = types.ModuleType("structgate_bench.maskstep_cmd")

    def add_bench_subparser(bench_sub):
        p = bench_sub.add_parser("maskstep")
        p.set_defaults(func=lambda args: 0, ext_ok=True)

    mod.add_bench_subparser = add_bench_subparser
    monkeypatch.setitem(sys.modules, "structgate_bench.maskstep_cmd", mod)
    from structgate.cli import build_parser

    args = build_parser().parse_args(["bench", "maskstep"])
    assert args.ext_ok is True


# the suite's draft-7 case that 2020-12's rules read otherwise: a $ref beside an $id
_SIBLING_ID_CASE = {
    "description": "$ref prevents a sibling $id from changing the base uri",
    "schema": {
        "$id": "http://localhost:1234/sibling_id/base/",
        "definitions": {
            "foo": {"$id": "http://localhost:1234/sibling_id/foo.json", "type": "string"},
            "base_foo": {"$id": "foo.json", "type": "number"},
        },
        "allOf": [{"$id": "http://localhost:1234/sibling_id/", "$ref": "foo.json"}],
    },
    "tests": [{"description": "string", "data": "a", "valid": False},
              {"description": "number", "data": 1, "valid": True}],
}


def test_jsts_cases_read_by_their_folder_draft(tmp_path, llama3_vocab):
    """A schema without ``$schema`` gets its draft folder's; one that declares it, or a boolean
    schema, is kept as it is. Read as draft 7, the sibling-``$id`` case validates as jsonschema's
    Draft7Validator says, and native rejects its invalid instance (read as 2020-12, the ``$id``
    moves the base and the string was accepted)."""
    import jsonschema

    from structgate import Constraint
    from structgate.backends.registry import get_backend

    declared = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "integer"}
    for d in ("draft7", "draft2020-12"):
        (tmp_path / "tests" / d).mkdir(parents=True)
        cases = [_SIBLING_ID_CASE, {"description": "declared", "schema": declared, "tests": []},
                 {"description": "boolean", "schema": True, "tests": []}]
        (tmp_path / "tests" / d / "ref.json").write_text(json.dumps(cases))
    items = {i.id: i for i in load_jsts(tmp_path, optional="none")}
    assert items["draft7/ref#0"].value["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert items["draft2020-12/ref#0"].value["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for d in ("draft7", "draft2020-12"):
        assert items[f"{d}/ref#1"].value == declared and items[f"{d}/ref#2"].value is True
    d7 = items["draft7/ref#0"]
    assert {k: v for k, v in d7.value.items() if k != "$schema"} == _SIBLING_ID_CASE["schema"]
    for t in _SIBLING_ID_CASE["tests"]:
        assert jsonschema.Draft7Validator(d7.value).is_valid(t["data"]) is t["valid"]
    vocab = llama3_vocab
    g = get_backend("native", vocab).compile(Constraint.json_schema(d7.value))
    for t in _SIBLING_ID_CASE["tests"]:
        ids = vocab.encode(json.dumps(t["data"])) + [vocab.eos_token_ids[0]]
        assert (g.matcher().validate(ids) == len(ids)) is t["valid"], t


def test_jsts_plot_groups():
    from structgate_bench.commands import _jsts_groups

    files = {"draft7/allOf": {"passed": 3, "tests": 5}, "draft7/const": {"passed": 1, "tests": 2},
             "draft7/optional/format/date": {"passed": 4, "tests": 9}, "draft7/optional/bignum": {"passed": 0, "tests": 1}}
    assert _jsts_groups(files) == {"draft7 required": (4, 7), "draft7 optional/format": (4, 9), "draft7 optional": (0, 1)}


# -- bench maskstep: bad arguments are argparse errors (exit 2, one line naming the option) ----------
@pytest.mark.parametrize("argv, message", [
    (["--batch-sizes", "abc"], r"argument --batch-sizes: each value: expected an integer >= 1, got 'abc'"),
    (["--batch-sizes", "1,0"], r"argument --batch-sizes: each value: must be an integer >= 1, got 0"),
    (["--batch-sizes", ","], r"argument --batch-sizes: expected comma-separated integers >= 1"),
    (["--steps", "0"], r"argument --steps: must be an integer >= 1, got 0"),
    (["--steps", "-1"], r"argument --steps: must be an integer >= 1, got -1"),
    (["--steps", "x"], r"argument --steps: expected an integer >= 1, got 'x'"),
    (["--e2e-requests", "0"], r"argument --e2e-requests: must be an integer >= 1"),
    (["--e2e-max-tokens", "-5"], r"argument --e2e-max-tokens: must be an integer >= 1"),
    (["--forward-ms", "-1"], r"argument --forward-ms: must be a finite number >= 0"),
    (["--systems", "nope", "--batch-sizes", "1", "--steps", "1"],
     r"argument --systems: unknown system 'nope'; valid: vllm-xgrammar, native, structgate-xgrammar, "
     r"structgate-llguidance, structgate-outlines-core"),
    (["--systems", ","], r"argument --systems: no system named; valid: vllm-xgrammar"),
    (["--e2e", "--e2e-configs", "native,bogus"], r"argument --e2e-configs: unknown configuration 'bogus'; "
                                                 r"valid: unconstrained, vllm-xgrammar"),
])
def test_maskstep_bad_arguments_are_usage_errors(argv, message, capsys):
    from structgate.cli import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["bench", "maskstep", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert re.search(r"structgate bench maskstep: error: " + message, err), err
    assert "Traceback" not in err


def test_maskstep_arguments_parse_to_lists():
    from structgate.cli import build_parser
    from structgate_bench.maskstep import E2E_CONFIGS, SYSTEMS

    args = build_parser().parse_args(["bench", "maskstep", "--systems", "native, native,vllm-xgrammar",
                                      "--batch-sizes", "1, 16", "--steps", "3"])
    assert (args.systems, args.batch_sizes, args.steps) == (["native", "vllm-xgrammar"], [1, 16], 3)
    args = build_parser().parse_args(["bench", "maskstep"])
    assert args.systems == list(SYSTEMS) and args.batch_sizes == [1, 16, 64, 128, 256]
    assert args.e2e_configs == list(E2E_CONFIGS) and args.steps == 30


@pytest.mark.parametrize("argv, flag", [
    (["--limit", "٣"], "--limit"), (["--threads", "1_0"], "--threads"), (["--jobs", "２"], "--jobs"),
    (["--timeout-s", "inf"], "--timeout-s"), (["--timeout-s", "1_0"], "--timeout-s"),
    (["--max-memory-mb", "٣"], "--max-memory-mb"), (["--max-memory-mb", "-5"], "--max-memory-mb"),
    (["--max-wall-s", "nan"], "--max-wall-s"), (["--shuffle", "-1"], "--shuffle"),
])
def test_maskbench_numbers_are_ascii_decimal(argv, flag, capsys):
    """The harness's numeric flags read ASCII decimal only, as the other commands' do (Python's
    int() took "٣" as 3 and "1_0" as 10; float() took "inf")."""
    from structgate.cli import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["bench", "maskbench", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}:" in err and "Traceback" not in err, err
