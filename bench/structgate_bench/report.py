"""Aggregation of worker results into the documented JSON shapes, and markdown tables.

MaskBench JSON (``structgate bench maskbench --json``)::

    {"meta": {...},
     "backends": {NAME: {"schemas", "passing", "compile_errors", "timeouts", "oom", "crashes",
                         "validation_errors", "invalidation_errors",
                         "compile_errors_by_kind": {KIND: n},
                         "ttfm_us": {"avg","p50","p90","p95","p99","p999","max","n"},
                         "tbm_us":  {same},
                         "instances": {"total","valid","invalid","valid_rejected","invalid_accepted",
                                       "mask_advance_mismatches","engine_errors","not_run"},
                         "splits": {SPLIT: {the counts above, "ttfm_us", "tbm_us"}}}}}

Schema outcome (one per schema, so the counts partition ``schemas``), first that applies:
``timeouts`` (time limit hit, compile or walk) → ``oom`` (address-space limit / allocation failure)
→ ``crashes`` (worker died otherwise, or the engine raised during the walk) → ``compile_errors``
(compile raised; by ``kind``: structgate error kinds ``unsupported``/``syntax``/``limit``/... or
``engine:<Exception>``) → ``validation_errors`` (some valid instance rejected) →
``invalidation_errors`` (some invalid instance accepted) → ``passing``. Hence
``passing + compile_errors + timeouts + oom + crashes + validation_errors + invalidation_errors == schemas``.

Percentiles (numpy linear interpolation) in µs. TTFM: every finished compile plus the limit for each
compile-phase timeout. TBM: every mask step (fill + check + advance) plus the limit for each
walk-phase timeout.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

__all__ = ["OUTCOMES", "summary", "schema_outcome", "aggregate_maskbench", "aggregate_jsts", "aggregate_regex",
           "markdown_maskbench", "markdown_jsts", "markdown_regex", "JSTS_OUTCOMES", "REGEX_STRING_OUTCOMES"]

#: the schema-level partition, in precedence order after ``passing``
OUTCOMES = ("passing", "compile_errors", "timeouts", "oom", "crashes", "validation_errors", "invalidation_errors")
_PCTS = (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("p999", 99.9))  # p95: MaskBench's compile-time figure


def summary(values_us) -> dict:
    """``{"n", "avg", "p50", "p90", "p95", "p99", "p999", "max"}`` of a 1-D array (µs); None when empty."""
    a = np.asarray(values_us, dtype=np.float64).ravel()
    if a.size == 0:
        return {"n": 0, "avg": None, **{k: None for k, _ in _PCTS}, "max": None}
    ps = np.percentile(a, [p for _, p in _PCTS])
    out = {"n": int(a.size), "avg": round(float(a.mean()), 2)}
    out.update({k: round(float(v), 2) for (k, _), v in zip(_PCTS, ps)})
    out["max"] = round(float(a.max()), 2)
    return out


def schema_outcome(res: dict, valid_flags: list) -> str:
    """The partition bucket of one worker result (see module docstring)."""
    st = res["status"]
    if st == "timeout":
        return "timeouts"
    if st == "oom":
        return "oom"
    if st == "crash":
        return "crashes"
    if st == "compile_error":
        return "compile_errors"
    tests = res.get("tests") or []
    if any(t.get("error") for t in tests):
        return "crashes"
    vr = ia = False
    for t, v in zip(tests, valid_flags):
        if t.get("skipped") or v is None:
            continue
        if v and not t["accepted"]:
            vr = True
        elif not v and t["accepted"]:
            ia = True
    if vr:
        return "validation_errors"
    if ia:
        return "invalidation_errors"
    return "passing"


def _samples(results: list[dict], limit_us: float) -> tuple[np.ndarray, np.ndarray]:
    ttfm, tbm = [], []
    for r in results:
        if r.get("ttfm_ns") is not None:
            ttfm.append(r["ttfm_ns"] / 1e3)
        elif r["status"] == "timeout":
            ttfm.append(limit_us)
        if r["status"] == "timeout" and r.get("phase") == "walk":
            tbm.append(np.array([limit_us]))
        t = r.get("tbm_ns")
        if t is not None and len(t):
            tbm.append(np.asarray(t, dtype=np.float64) / 1e3)
    return np.asarray(ttfm, dtype=np.float64), (np.concatenate(tbm) if tbm else np.zeros(0))


def _counts(results, items_by_id) -> tuple[dict, Counter, dict]:
    c = dict.fromkeys(OUTCOMES, 0)
    kinds: Counter = Counter()
    inst = dict.fromkeys(("total", "valid", "invalid", "valid_rejected", "invalid_accepted",
                          "mask_advance_mismatches", "engine_errors", "not_run"), 0)
    for r in results:
        it = items_by_id[(r["split"], r["id"])]
        flags = [t["valid"] for t in it.tests]
        o = schema_outcome(r, flags)
        c[o] += 1
        if o == "compile_errors":
            kinds[r.get("error_kind") or "other"] += 1
        tests = r.get("tests") or []
        inst["total"] += len(flags)
        inst["valid"] += sum(1 for v in flags if v)
        inst["invalid"] += sum(1 for v in flags if v is False)
        inst["not_run"] += len(flags) - sum(1 for t in tests if not t.get("skipped"))
        for t, v in zip(tests, flags):
            if t.get("skipped"):
                continue
            inst["mask_advance_mismatches"] += bool(t.get("mismatch"))
            inst["engine_errors"] += bool(t.get("error"))
            if v and t["accepted"] is False:
                inst["valid_rejected"] += 1
            elif v is False and t["accepted"]:
                inst["invalid_accepted"] += 1
    c["schemas"] = len(results)
    return c, kinds, inst


def aggregate_maskbench(runs, items, timeout_s: float) -> dict:
    """``{"backends": {...}}`` per the module docstring (meta added by the caller)."""
    by_id = {(it.split, it.id): it for it in items}
    limit_us = timeout_s * 1e6
    out = {}
    for name, run in runs.items():
        if run.error:
            out[name] = {"error": run.error}
            continue
        c, kinds, inst = _counts(run.results, by_id)
        ttfm, tbm = _samples(run.results, limit_us)
        b = {"schemas": c["schemas"], **{k: c[k] for k in OUTCOMES}, "compile_errors_by_kind": dict(kinds.most_common()),
             "ttfm_us": summary(ttfm), "tbm_us": summary(tbm), "instances": inst, "splits": {}}
        splits: dict[str, list] = {}
        for r in run.results:
            splits.setdefault(r["split"], []).append(r)
        for s, rs in splits.items():
            sc, sk, _ = _counts(rs, by_id)
            st, sb = _samples(rs, limit_us)
            b["splits"][s] = {"schemas": sc["schemas"], **{k: sc[k] for k in OUTCOMES},
                              "compile_errors_by_kind": dict(sk.most_common()), "ttfm_us": summary(st), "tbm_us": summary(sb)}
        out[name] = b
    return {"backends": out}


def samples_for_plot(runs, timeout_s: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{backend: (ttfm_us, tbm_us)}`` for the CDF plots."""
    return {n: _samples(r.results, timeout_s * 1e6) for n, r in runs.items() if not r.error}


# -------------------------------------------------------------------------------------------- JSTS
#: per-test partition for the JSON-Schema-Test-Suite
JSTS_OUTCOMES = ("passed", "compile_errors", "valid_rejected", "invalid_accepted", "timeouts", "oom", "crashes")


def _jsts_counts(results, by_id) -> dict:
    c = dict.fromkeys(("schemas", "tests", *JSTS_OUTCOMES), 0)
    kinds: Counter = Counter()
    for r in results:
        it = by_id[(r["split"], r["id"])]
        n = len(it.tests)
        c["schemas"] += 1
        c["tests"] += n
        st = r["status"]
        if st in ("timeout", "oom", "crash"):
            c[{"timeout": "timeouts", "oom": "oom", "crash": "crashes"}[st]] += n
            continue
        if st == "compile_error":
            c["compile_errors"] += n
            kinds[r.get("error_kind") or "other"] += n
            continue
        for t, spec in zip(r["tests"], it.tests):
            if t.get("error") or t.get("skipped"):
                c["crashes"] += 1
            elif spec["valid"] and not t["accepted"]:
                c["valid_rejected"] += 1
            elif not spec["valid"] and t["accepted"]:
                c["invalid_accepted"] += 1
            else:
                c["passed"] += 1
    c["compile_errors_by_kind"] = dict(kinds.most_common())
    return c


def aggregate_jsts(runs, items, timeout_s: float) -> dict:
    """JSON-Schema-Test-Suite shape::

        {"backends": {NAME: {"schemas", "tests", "passed", "compile_errors", "valid_rejected",
                             "invalid_accepted", "timeouts", "oom", "crashes", "compile_errors_by_kind",
                             "ttfm_us", "tbm_us",
                             "drafts": {DRAFT: {counts}}, "files": {DRAFT/FILE: {counts}}}}}

    Counts are of *tests* (instances): every test of a schema that failed to compile counts as a
    compile error, every test of a timed-out / OOM / crashed schema as that; so
    ``passed + compile_errors + valid_rejected + invalid_accepted + timeouts + oom + crashes == tests``.
    """
    by_id = {(it.split, it.id): it for it in items}
    out = {}
    for name, run in runs.items():
        if run.error:
            out[name] = {"error": run.error}
            continue
        b = _jsts_counts(run.results, by_id)
        ttfm, tbm = _samples(run.results, timeout_s * 1e6)
        b["ttfm_us"], b["tbm_us"] = summary(ttfm), summary(tbm)
        files: dict[str, list] = {}
        drafts: dict[str, list] = {}
        for r in run.results:
            files.setdefault(r["split"], []).append(r)
            drafts.setdefault(r["split"].split("/", 1)[0], []).append(r)
        b["drafts"] = {d: _jsts_counts(rs, by_id) for d, rs in drafts.items()}
        b["files"] = {f: _jsts_counts(rs, by_id) for f, rs in files.items()}
        out[name] = b
    return {"backends": out}


# ------------------------------------------------------------------------------------------- regex
#: per-string outcomes for the regex bench
REGEX_STRING_OUTCOMES = ("agree", "false_accept", "false_reject", "no_oracle", "not_run")
#: per-pattern partition
REGEX_PATTERN_OUTCOMES = ("passing", "disagreeing", "compile_errors", "timeouts", "oom", "crashes")


def _regex_counts(results, by_id) -> dict:
    c = dict.fromkeys(("patterns", *REGEX_PATTERN_OUTCOMES), 0)
    s = dict.fromkeys(("strings", *REGEX_STRING_OUTCOMES), 0)
    kinds: Counter = Counter()
    re_invalid_rejected = re_invalid_compiled = 0
    for r in results:
        it = by_id[(r["split"], r["id"])]
        c["patterns"] += 1
        s["strings"] += len(it.tests)
        st = r["status"]
        re_err = it.meta.get("re_error")
        if st in ("timeout", "oom", "crash", "compile_error"):
            c[{"timeout": "timeouts", "oom": "oom", "crash": "crashes", "compile_error": "compile_errors"}[st]] += 1
            s["not_run"] += len(it.tests)
            if st == "compile_error":
                kinds[r.get("error_kind") or "other"] += 1
                re_invalid_rejected += bool(re_err)
            continue
        re_invalid_compiled += bool(re_err)
        bad = False
        if any(t.get("error") for t in r["tests"]):
            c["crashes"] += 1
            s["not_run"] += len(it.tests)
            continue
        for t, spec in zip(r["tests"], it.tests):
            v = spec["valid"]
            if t.get("skipped"):
                s["not_run"] += 1
            elif v is None:
                s["no_oracle"] += 1
            elif bool(t["accepted"]) == v:
                s["agree"] += 1
            elif t["accepted"]:
                s["false_accept"] += 1
                bad = True
            else:
                s["false_reject"] += 1
                bad = True
        c["disagreeing" if bad else "passing"] += 1
    return {**c, "compile_errors_by_kind": dict(kinds.most_common()), "strings": s,
            "re_invalid": {"engine_rejected": re_invalid_rejected, "engine_compiled": re_invalid_compiled}}


def aggregate_regex(runs, items, timeout_s: float) -> dict:
    """Regex shape::

        {"backends": {NAME: {"patterns", "passing", "disagreeing", "compile_errors", "timeouts", "oom",
                             "crashes", "compile_errors_by_kind",
                             "strings": {"strings", "agree", "false_accept", "false_reject",
                                         "no_oracle", "not_run"},
                             "re_invalid": {"engine_rejected", "engine_compiled"},
                             "ttfm_us", "tbm_us", "splits": {CORPUS: {same counts}}}}}

    Pattern partition: ``passing + disagreeing + compile_errors + timeouts + oom + crashes == patterns``
    (``disagreeing``: some string where the engine's verdict differs from ``re.fullmatch``).
    String partition: ``agree + false_accept + false_reject + no_oracle + not_run == strings``
    (``no_oracle``: ``re`` timed out or cannot compile the pattern; ``not_run``: the pattern did not
    compile / timed out / crashed on that backend, or the string could not be tokenised).
    """
    by_id = {(it.split, it.id): it for it in items}
    out = {}
    for name, run in runs.items():
        if run.error:
            out[name] = {"error": run.error}
            continue
        b = _regex_counts(run.results, by_id)
        ttfm, tbm = _samples(run.results, timeout_s * 1e6)
        b["ttfm_us"], b["tbm_us"] = summary(ttfm), summary(tbm)
        splits: dict[str, list] = {}
        for r in run.results:
            splits.setdefault(r["split"], []).append(r)
        b["splits"] = {k: _regex_counts(rs, by_id) for k, rs in splits.items()}
        out[name] = b
    return {"backends": out}


# ---------------------------------------------------------------------------------------- markdown
def _fmt(v, digits: int = 0) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _meta_line(meta: dict) -> str:
    m = meta.get("machine", {})
    tk = meta.get("tokenizer", {})
    lim = meta.get("limits", {})
    return (f"_{meta.get('date', '')}; tokenizer {tk.get('name')} ({tk.get('n_tokens', 0):,} tokens); "
            f"{m.get('cpu')} × {m.get('cores')} cores, load {m.get('loadavg_start')}; threads {meta.get('threads')}, "
            f"jobs {meta.get('jobs')}; limits {lim.get('timeout_s')} s / {lim.get('max_memory_mb')} MiB per schema; "
            f"wall {meta.get('wall_s')} s_")


def _table(header: list[str], rows: list[list[str]], align_right_from: int = 1) -> str:
    sep = ["---" if i < align_right_from else "--:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _versions_line(meta: dict, names) -> str:
    br = meta.get("backends_run", {})
    return "; ".join(f"{n} {br.get(n, {}).get('version') or '?'}" for n in names)


def _not_run_lines(doc: dict) -> list[str]:
    """Notes for backends whose counts leave items out (``--max-wall-s``, Ctrl-C, a worker that
    could not start, ``--common-items``)."""
    out = []
    meta = doc["meta"]
    for n, r in (meta.get("backends_run") or {}).items():
        if r.get("not_run"):
            why = []
            if r.get("start_error"):
                why.append(f"its worker could not start: {r['start_error'].splitlines()[0][:160]}")
            if meta.get("max_wall_s") is not None:
                why.append("not run before the time box (`--max-wall-s`) passed or not in the checkpoint")
            if "common_items" in meta:
                why.append("not run by every backend (`--common-items`)")
            if not why:
                why.append("the run was stopped")
            out.append(f"\n- {n}: {r['not_run']:,} items left out ({'; or '.join(why)}); its counts and "
                       "percentiles cover only the items run.")
    if "common_items" in meta:
        out.append(f"\n- Every backend with results is reported on the same {meta['common_items']:,} items "
                   "(`--common-items`).")
    return out


def markdown_maskbench(doc: dict) -> str:
    """Metric rows × backend columns (as the published MaskBench table), then passing per split."""
    bs = {n: b for n, b in doc["backends"].items() if "error" not in b}
    names = list(bs)
    lines = [f"### MaskBench: {', '.join(names)}", "", _meta_line(doc["meta"]), "",
             f"Versions: {_versions_line(doc['meta'], names)}", ""]
    rows = []
    for label, key in (("schemas", "schemas"), ("passing", "passing"), ("compile errors", "compile_errors"),
                       ("timeouts", "timeouts"), ("out of memory", "oom"), ("crashes", "crashes"),
                       ("validation errors (valid rejected)", "validation_errors"),
                       ("invalidation errors (invalid accepted)", "invalidation_errors")):
        rows.append([label] + [_fmt(bs[n][key]) for n in names])
    rows.append(["compile errors by kind"] + [", ".join(f"{k} {v}" for k, v in bs[n]["compile_errors_by_kind"].items()) or "–"
                                              for n in names])
    for metric, key in (("compile time (TTFM)", "ttfm_us"), ("mask time (TBM)", "tbm_us")):
        for p in ("avg", "p50", "p90", "p95", "p99", "p999", "max"):
            rows.append([f"{metric} {p} µs"] + [_fmt(bs[n][key][p]) for n in names])
    rows.append(["mask steps measured"] + [_fmt(bs[n]["tbm_us"]["n"]) for n in names])
    rows.append(["instances valid rejected / invalid accepted"] +
                [f"{bs[n]['instances']['valid_rejected']:,} / {bs[n]['instances']['invalid_accepted']:,}" for n in names])
    lines.append(_table(["metric"] + names, rows))
    splits = sorted({s for n in names for s in bs[n]["splits"]})
    if splits:
        lines += ["", "Schemas passing per split (passing / schemas):", ""]
        srows = [[s] + [(f"{bs[n]['splits'][s]['passing']} / {bs[n]['splits'][s]['schemas']}" if s in bs[n]["splits"] else "–")
                        for n in names] for s in splits]
        lines.append(_table(["split"] + names, srows))
    errs = {n: b["error"] for n, b in doc["backends"].items() if "error" in b}
    for n, e in errs.items():
        lines.append(f"\n- {n}: not run ({e.splitlines()[0][:200]})")
    lines += _not_run_lines(doc)
    return "\n".join(lines) + "\n"


def markdown_jsts(doc: dict) -> str:
    """Per draft totals per backend, then per keyword file ``passed/tests`` per backend."""
    bs = {n: b for n, b in doc["backends"].items() if "error" not in b}
    names = list(bs)
    lines = [f"### JSON-Schema-Test-Suite: {', '.join(names)}", "", _meta_line(doc["meta"]), "",
             f"Versions: {_versions_line(doc['meta'], names)}", "",
             "Cells: tests passed / tests (compile errors, valid rejected, invalid accepted, timeouts+oom+crashes).", ""]
    drafts = sorted({d for n in names for d in bs[n]["drafts"]})

    def cell(c):
        return (f"{c['passed']}/{c['tests']} ({c['compile_errors']}, {c['valid_rejected']}, {c['invalid_accepted']}, "
                f"{c['timeouts'] + c['oom'] + c['crashes']})")

    rows = [[d] + [cell(bs[n]["drafts"][d]) if d in bs[n]["drafts"] else "–" for n in names] for d in drafts]
    rows.append(["**all**"] + [cell(bs[n]) for n in names])
    lines.append(_table(["draft"] + names, rows))
    files = sorted({f for n in names for f in bs[n]["files"]})
    lines += ["", "Per keyword file:", ""]
    frows = [[f] + [cell(bs[n]["files"][f]) if f in bs[n]["files"] else "–" for n in names] for f in files]
    lines.append(_table(["file"] + names, frows))
    for n, b in doc["backends"].items():
        if "error" in b:
            lines.append(f"\n- {n}: not run ({b['error'].splitlines()[0][:200]})")
    lines += _not_run_lines(doc)
    return "\n".join(lines) + "\n"


def markdown_regex(doc: dict) -> str:
    """Metric rows × backend columns for the regex bench."""
    bs = {n: b for n, b in doc["backends"].items() if "error" not in b}
    names = list(bs)
    lines = [f"### Regex corpora: {', '.join(names)}", "", _meta_line(doc["meta"]), "",
             f"Versions: {_versions_line(doc['meta'], names)}", ""]
    rows = []
    for label, key in (("patterns", "patterns"), ("passing (all strings agree with re)", "passing"),
                       ("disagreeing", "disagreeing"), ("compile errors", "compile_errors"), ("timeouts", "timeouts"),
                       ("out of memory", "oom"), ("crashes", "crashes")):
        rows.append([label] + [_fmt(bs[n][key]) for n in names])
    rows.append(["compile errors by kind"] + [", ".join(f"{k} {v}" for k, v in bs[n]["compile_errors_by_kind"].items()) or "–"
                                              for n in names])
    rows.append(["re-invalid patterns rejected / compiled"] +
                [f"{bs[n]['re_invalid']['engine_rejected']} / {bs[n]['re_invalid']['engine_compiled']}" for n in names])
    for label, key in (("strings", "strings"), ("agree with re", "agree"), ("false accept", "false_accept"),
                       ("false reject", "false_reject"), ("no oracle (re timeout/error)", "no_oracle"),
                       ("not run", "not_run")):
        rows.append([label] + [_fmt(bs[n]["strings"][key]) for n in names])
    for metric, key in (("compile time", "ttfm_us"), ("mask time", "tbm_us")):
        for p in ("avg", "p50", "p90", "p99", "max"):
            rows.append([f"{metric} {p} µs"] + [_fmt(bs[n][key][p]) for n in names])
    lines.append(_table(["metric"] + names, rows))
    splits = sorted({s for n in names for s in bs[n]["splits"]})
    lines += ["", "Per corpus (passing / patterns, strings agreeing / strings):", ""]
    srows = []
    for s in splits:
        row = [s]
        for n in names:
            c = bs[n]["splits"].get(s)
            row.append("–" if c is None else f"{c['passing']}/{c['patterns']}, {c['strings']['agree']}/{c['strings']['strings']}")
        srows.append(row)
    lines.append(_table(["corpus"] + names, srows))
    for n, b in doc["backends"].items():
        if "error" in b:
            lines.append(f"\n- {n}: not run ({b['error'].splitlines()[0][:200]})")
    lines += _not_run_lines(doc)
    return "\n".join(lines) + "\n"
