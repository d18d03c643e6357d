"""The three head-to-head benchmarks as functions (the CLI in :mod:`structgate_bench.cli` calls them).

Each returns the result document ``{"meta": ..., "backends": ...}`` and writes the requested
outputs (JSON, markdown, per-schema details JSONL, PNG plot).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .corpora import BenchItem, load_jsts, load_maskbench, load_regex_corpus, tokenize_items
from .report import (aggregate_jsts, aggregate_maskbench, aggregate_regex, markdown_jsts, markdown_maskbench,
                     markdown_regex, samples_for_plot, schema_outcome)
from .runner import build_meta, jsonable, resolve_backends, run_backends
from .sample import bench_options

__all__ = ["bench_maskbench", "bench_jsts", "bench_regex", "DEFAULT_REGEX_CORPORA"]

#: regex corpora used when ``--corpus`` is not given (those that exist are used)
from .corpora import SAMPLES  # noqa: E402

#: the regex samples shipped with the harness (full corpora: --corpus)
DEFAULT_REGEX_CORPORA = (str(SAMPLES / "regex" / "interegular"), str(SAMPLES / "regex" / "outlines-core"))


def _write_outputs(doc: dict, md: str, runs, items: list[BenchItem], *, json_out=None, markdown_out=None,
                   details_out=None, plot_out=None, plot_title="", timeout_s: float = 0, unit: str = "schemas",
                   split_passing=None, quiet: bool = False) -> None:
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps(doc, indent=1, default=jsonable) + "\n")
    if markdown_out:
        Path(markdown_out).parent.mkdir(parents=True, exist_ok=True)
        Path(markdown_out).write_text(md)
    if details_out:
        by_id = {(it.split, it.id): it for it in items}
        with open(details_out, "w") as f:
            for name, run in runs.items():
                for r in run.results:
                    it = by_id[(r["split"], r["id"])]
                    rec = {"backend": name, "id": r["id"], "split": r["split"], "status": r["status"],
                           "outcome": schema_outcome(r, [t["valid"] for t in it.tests]),
                           "phase": r.get("phase"), "ttfm_us": None if r.get("ttfm_ns") is None else r["ttfm_ns"] / 1e3,
                           "error_kind": r.get("error_kind"), "error": r.get("error"),
                           "elapsed_s": round(r.get("elapsed_s", 0.0), 4),
                           "tests": [{"valid": t["valid"], "accepted": x.get("accepted"), "rejected_at": x.get("rejected_at"),
                                      "n_tokens": x.get("n_tokens"), "mismatch": x.get("mismatch"), "error": x.get("error")}
                                     for t, x in zip(it.tests, r.get("tests") or [])]}
                    f.write(json.dumps(rec, default=jsonable) + "\n")
    if plot_out:
        from .plots import plot_bench

        plot_bench(plot_out, samples_for_plot(runs, timeout_s), split_passing or {}, plot_title,
                   timeout_us=timeout_s * 1e6, unit_label=unit)
    if not quiet:
        sys.stdout.write(md)
        sys.stdout.flush()


def _plot_title(kind: str, meta: dict) -> str:
    m, tk = meta["machine"], meta["tokenizer"]
    return (f"structgate bench {kind} — tokenizer {tk['name']} ({tk['n_tokens']:,}), {m['cpu']} ×{m['cores']}, "
            f"threads {meta['threads']}, limit {meta['limits']['timeout_s']} s / {meta['limits']['max_memory_mb']} MiB, "
            f"{meta['date']}")


def _prepare(items: list[BenchItem], tokenizer: str):
    from ._vocab import load_bench_vocabulary

    vocab = load_bench_vocabulary(tokenizer)
    n_tokens = tokenize_items(items, vocab)
    return vocab, n_tokens


def check_distinct_items(items) -> None:
    """CorpusError when two items share (split, id): results and checkpoints are keyed by it."""
    from .corpora import CorpusError

    seen: set = set()
    for it in items:
        k = (it.split, it.id)
        if k in seen:
            raise CorpusError(f"duplicate id {it.id!r} in split {it.split!r}: ids must be unique per split")
        seen.add(k)


def restrict_to_common_items(runs) -> int:
    """Keep, in every backend's results, only the items every backend has a result for (backends
    that could not run at all, or have no result, are ignored): the head-to-head on the same items
    when a time-boxed run (``max_wall_s``) left some backends short. Returns the number of items
    kept; the others are added to ``BackendRun.not_run``."""
    live = [r for r in runs.values() if not r.error and r.results]
    if not live:
        return 0
    common = set.intersection(*({(x["split"], x["id"]) for x in r.results} for r in live))
    for r in runs.values():
        kept = [x for x in r.results if (x["split"], x["id"]) in common]
        r.not_run += len(r.results) - len(kept)
        r.results = kept
    return len(common)


def _common_run(kind: str, items, *, backends, tokenizer, timeout_s, max_memory_mb, threads, jobs, options, progress,
                argv, corpus_desc, extra_meta=None, checkpoint=None, max_wall_s=None, common_items=False):
    from .runner import Checkpoint, machine_info

    t0 = time.perf_counter()
    check_distinct_items(items)
    machine = machine_info()
    names, skipped = resolve_backends(backends, kind="regex" if kind == "regex" else "json_schema")
    vocab, n_tokens = _prepare(items, tokenizer)
    ckpt = None
    if checkpoint:
        ckpt = Checkpoint(checkpoint, {"bench": kind, "tokenizer": tokenizer, "timeout_s": timeout_s,
                                       "max_memory_mb": max_memory_mb, "threads": threads, "options": options,
                                       "vocabulary": vocab.fingerprint[:16]})
    try:
        runs = run_backends(items, names, vocab, timeout_s=timeout_s, max_memory_mb=max_memory_mb, threads=threads,
                            jobs=jobs, options=options, progress=progress, title=kind, checkpoint=ckpt,
                            max_wall_s=max_wall_s)
    finally:
        if ckpt is not None:
            ckpt.close()
    if ckpt is not None:
        extra_meta = {**(extra_meta or {}), "checkpoint": {
            "path": str(checkpoint), "resumed": sum(r.resumed for r in runs.values()),
            "note": "meta.date/wall_s/machine describe this invocation; per-item times come from the runs "
                    "that wrote the checkpoint (meta.backends_run.NAME.busy_s sums them)"}}
    extra_meta = {**(extra_meta or {}), "max_wall_s": max_wall_s}
    if common_items:
        extra_meta["common_items"] = restrict_to_common_items(runs)
    meta = build_meta(bench=kind, vocab=vocab, corpus=corpus_desc, runs=runs, skipped=skipped, timeout_s=timeout_s,
                      max_memory_mb=max_memory_mb, threads=threads, jobs=jobs, options=options,
                      wall_s=time.perf_counter() - t0, argv=argv, machine=machine,
                      extra={"items": len(items), "instances": sum(len(i.tests) for i in items),
                             "instance_tokens": n_tokens, **(extra_meta or {})})
    return runs, meta


def bench_maskbench(corpus: str, *, backends: list[str] | None = None, tokenizer: str = "llama3", limit: int | None = None,
                    splits: list[str] | None = None, timeout_s: float = 60.0, max_memory_mb: int = 4096, threads: int = 1,
                    jobs: int = 1, options: dict | None = None, json_out=None, markdown_out=None, details_out=None,
                    plot_out=None, progress: bool = True, quiet: bool = False, argv=None, checkpoint=None,
                    max_wall_s=None, shuffle: int | None = None, common_items: bool = False) -> dict:
    """MaskBench method on a folder/file of MaskBench JSONL. See :mod:`structgate_bench.report` for
    the JSON shape and the outcome partition.

    ``shuffle``: a seed; items then run in that seeded random order (``random.Random(seed)``), and
    ``limit`` takes a uniform random sample instead of the round-robin one, so a run stopped by
    ``max_wall_s`` has also run a uniform sample of the corpus."""
    if shuffle is None:
        items = load_maskbench(corpus, splits=splits, limit=limit)
    else:
        import random

        items = load_maskbench(corpus, splits=splits)
        random.Random(shuffle).shuffle(items)
        items = items[:limit] if limit and limit > 0 else items
    opts = bench_options(**(options or {}))
    runs, meta = _common_run("maskbench", items, backends=backends, tokenizer=tokenizer, timeout_s=timeout_s,
                             max_memory_mb=max_memory_mb, threads=threads, jobs=jobs, options=opts, progress=progress,
                             argv=argv, corpus_desc={"path": str(corpus), "splits": splits, "limit": limit, "shuffle": shuffle,
                                                     "sampling": (f"uniform, random.Random({shuffle}).shuffle"
                                                                  if shuffle is not None else
                                                                  "round-robin over splits in file order"
                                                                  if limit else "every item, file order")},
                             checkpoint=checkpoint, max_wall_s=max_wall_s, common_items=common_items)
    doc = {"meta": meta, **aggregate_maskbench(runs, items, timeout_s)}
    md = markdown_maskbench(doc)
    sp = {n: {s: (c["passing"], c["schemas"]) for s, c in b["splits"].items()}
          for n, b in doc["backends"].items() if "error" not in b}
    _write_outputs(doc, md, runs, items, json_out=json_out, markdown_out=markdown_out, details_out=details_out,
                   plot_out=plot_out, plot_title=_plot_title("maskbench", meta), timeout_s=timeout_s,
                   split_passing=sp, quiet=quiet)
    return doc


def bench_jsts(suite: str, *, backends: list[str] | None = None, tokenizer: str = "llama3", drafts=None,
               optional: str = "format", files=None, limit: int | None = None, timeout_s: float = 30.0,
               max_memory_mb: int = 4096, threads: int = 1, jobs: int = 1, options: dict | None = None, json_out=None,
               markdown_out=None, details_out=None, plot_out=None, progress: bool = True, quiet: bool = False,
               argv=None, checkpoint=None, max_wall_s=None) -> dict:
    """JSON-Schema-Test-Suite coverage per backend and keyword file (see :func:`aggregate_jsts`)."""
    items = load_jsts(suite, drafts=drafts, optional=optional, files=files, limit=limit)
    opts = bench_options(**(options or {}))
    runs, meta = _common_run("jsts", items, backends=backends, tokenizer=tokenizer, timeout_s=timeout_s,
                             max_memory_mb=max_memory_mb, threads=threads, jobs=jobs, options=opts, progress=progress,
                             argv=argv, corpus_desc={"path": str(suite), "drafts": drafts, "optional": optional,
                                                     "files": files, "limit": limit},
                             checkpoint=checkpoint, max_wall_s=max_wall_s)
    doc = {"meta": meta, **aggregate_jsts(runs, items, timeout_s)}
    md = markdown_jsts(doc)
    sp = {n: _jsts_groups(b["files"]) for n, b in doc["backends"].items() if "error" not in b}
    _write_outputs(doc, md, runs, items, json_out=json_out, markdown_out=markdown_out, details_out=details_out,
                   plot_out=plot_out, plot_title=_plot_title("jsts", meta), timeout_s=timeout_s, unit="tests",
                   split_passing=sp, quiet=quiet)
    return doc


def _jsts_groups(files: dict) -> dict[str, tuple[int, int]]:
    """Passed/tests per ``draft required`` / ``draft optional/...`` group (a bar per keyword file
    would be unreadable: ~170 files)."""
    out: dict[str, list[int]] = {}
    for f, c in files.items():
        draft, _, rest = f.partition("/")
        group = f"{draft} {'optional/format' if rest.startswith('optional/format/') else 'optional' if rest.startswith('optional/') else 'required'}"
        acc = out.setdefault(group, [0, 0])
        acc[0] += c["passed"]
        acc[1] += c["tests"]
    return {k: (v[0], v[1]) for k, v in out.items()}


def bench_regex(corpora: list[str] | None = None, *, backends: list[str] | None = None, tokenizer: str = "llama3",
                limit: int | None = None, timeout_s: float = 60.0, re_timeout_s: float = 2.0, max_memory_mb: int = 4096,
                threads: int = 1, jobs: int = 1, options: dict | None = None, json_out=None, markdown_out=None,
                details_out=None, plot_out=None, progress: bool = True, quiet: bool = False, argv=None,
                checkpoint=None, max_wall_s=None) -> dict:
    """Regex corpora: compile time, mask time, agreement with ``re.fullmatch`` (see :func:`aggregate_regex`)."""
    from .oracle import ReOracle

    if not corpora:
        corpora = [p for p in DEFAULT_REGEX_CORPORA if Path(p).exists()]
        if not corpora:
            from .corpora import CorpusError

            raise CorpusError(f"no --corpus given and none of the default corpora exist: {list(DEFAULT_REGEX_CORPORA)}")
    items = load_regex_corpus(corpora, limit=limit)
    t0 = time.perf_counter()
    with ReOracle(re_timeout_s) as oracle:
        for it in items:
            err, verdicts = oracle.verdicts(it.value, [t["text"] for t in it.tests])
            if err:
                it.meta["re_error"] = err
            for t, v in zip(it.tests, verdicts):
                t["valid"] = v
        re_timeouts = oracle.timeouts
    oracle_s = time.perf_counter() - t0
    runs, meta = _common_run("regex", items, backends=backends, tokenizer=tokenizer, timeout_s=timeout_s,
                             max_memory_mb=max_memory_mb, threads=threads, jobs=jobs, options=dict(options or {}),
                             progress=progress, argv=argv, corpus_desc={"paths": [str(c) for c in corpora], "limit": limit},
                             checkpoint=checkpoint, max_wall_s=max_wall_s,
                             extra_meta={"oracle": {"engine": f"python re {sys.version.split()[0]} fullmatch",
                                                    "timeout_s": re_timeout_s, "timeouts": re_timeouts,
                                                    "patterns_re_cannot_compile": sum(1 for i in items if i.meta.get("re_error")),
                                                    "wall_s": round(oracle_s, 2)}})
    doc = {"meta": meta, **aggregate_regex(runs, items, timeout_s)}
    md = markdown_regex(doc)
    sp = {n: {s: (c["passing"], c["patterns"]) for s, c in b["splits"].items()}
          for n, b in doc["backends"].items() if "error" not in b}
    _write_outputs(doc, md, runs, items, json_out=json_out, markdown_out=markdown_out, details_out=details_out,
                   plot_out=plot_out, plot_title=_plot_title("regex", meta), timeout_s=timeout_s, unit="patterns",
                   split_passing=sp, quiet=quiet)
    return doc
