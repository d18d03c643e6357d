"""Does a structured request's compile stall other streams? (issue 15, "Must show").

For each backend spec, one real ``vllm serve`` on the embedded tiny model (the demo's server:
``structgate.plugin.server.VllmServer``), then:

A. **stall**: 4 unconstrained streaming completions (``ignore_eos``, ``--stream-tokens`` tokens)
   start; ``--heavy-after-s`` later one completion constrained by the heavy schema (``--heavy``, a
   MaskBench schema with a multi-second native compile) arrives, streaming. Reported: the longest
   gap between two chunks of any of the 4 streams (after its first chunk), the heavy request's TTFT
   (send -> first chunk), and the longest ``GET /v1/models`` latency seen by a poller every 10 ms
   (that endpoint touches only the API server: it measures how long the API server's event loop was
   blocked, e.g. by request validation). Run once without the heavy request (baseline) and
   ``--repeats`` times with it (a fresh schema each time is not possible for "the same heavy
   schema", so repeats after the first hit the compile cache and are reported separately).
A'. **validate-heavy**: the same with ``--validate-heavy`` (a schema whose *validation* is slow and
   whose compile is cheap: it isolates the API server's event loop).
B. **distinct**: ``--n-distinct`` requests, each with a different real schema (MaskBench, seeded
   choice among the schemas every engine of the sample-325 run passed), ``--concurrency`` at a time,
   streaming, ``--distinct-max-tokens`` tokens each. Reported: request throughput (requests / wall),
   TTFT p50 / p90, and status counts.

Backend specs: ``native``, ``guidance``, ... optionally with environment overrides after a colon,
e.g. ``native:STRUCTGATE_VALIDATE_BUDGET_S=0`` (validation unbounded: the behaviour before the
budget). Servers are started one after another; hold ``flock /tmp/structgate-vllm.lock`` around the
script on a shared machine::

    flock /tmp/structgate-vllm.lock .venv/bin/python bench/vllm_stall.py \\
        --backends native,guidance --out bench/results/vllm-stall.json

The data (MaskBench, ``--corpus``) is read at run time and not part of the repository.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

HERE = pathlib.Path(__file__).resolve().parent
DETAILS = HERE / "results" / "maskbench-v2-sample325.details.jsonl.gz"
PROMPT = "Write the JSON object: "


def load_schemas(corpus: pathlib.Path) -> dict[str, dict]:
    out = {}
    for f in sorted(corpus.glob("*.jsonl")):
        for line in f.open(encoding="utf-8"):
            if line.strip():
                d = json.loads(line)
                out[d["id"]] = d["schema"]
    return out


def distinct_ids(schemas: dict, n: int, seed: int, exclude: str) -> list[str]:
    """``n`` ids, seeded, among the schemas that native, llguidance and XGrammar all passed in the
    sample-325 run (so both servers can be expected to serve them)."""
    by: dict[str, dict] = {}
    with gzip.open(DETAILS, "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            by.setdefault(r["id"], {})[r["backend"]] = r["outcome"]
    ok = sorted(i for i, d in by.items() if len(d) == 3 and all(v == "passing" for v in d.values())
                and i in schemas and i != exclude)
    random.Random(seed).shuffle(ok)
    return ok[:n]


def stream(url: str, body: dict, t_send: list | None = None) -> dict:
    """One streaming completion: chunk arrival times (monotonic), status, finish reason, text."""
    times: list[float] = []
    text: list[str] = []
    finish = None
    t0 = time.monotonic()
    if t_send is not None:
        t_send.append(t0)
    try:
        with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=600.0) as r:
            if r.status_code != 200:
                return {"status": r.status_code, "t0": t0, "times": [], "error": r.read().decode()[:300]}
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                d = json.loads(line[6:])
                ch = d.get("choices") or []
                if ch:
                    times.append(time.monotonic())
                    text.append(ch[0].get("text") or "")
                    finish = ch[0].get("finish_reason") or finish
                elif "error" in d:
                    return {"status": d["error"].get("code", 500), "t0": t0, "times": times,
                            "error": d["error"].get("message", "")[:300]}
    except httpx.HTTPError as e:
        return {"status": -1, "t0": t0, "times": times, "error": repr(e)[:300]}
    return {"status": 200, "t0": t0, "times": times, "finish": finish, "text": "".join(text)}


class Poller(threading.Thread):
    """GET /v1/models every 10 ms; keeps the latencies (API-server event loop responsiveness)."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.lat, self.stop_ev = url, [], threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=60.0) as c:
            while not self.stop_ev.is_set():
                t = time.monotonic()
                try:
                    c.get(self.url + "/v1/models")
                except httpx.HTTPError:
                    pass
                self.lat.append((t, time.monotonic() - t))
                time.sleep(0.01)


def max_gap(times: list[float]) -> float:
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def part_a(srv, heavy: dict | None, n_tokens: int, heavy_after_s: float, heavy_max_tokens: int) -> dict:
    model = srv.served_model_name
    plain = [{"model": model, "prompt": f"story {i}: ", "max_tokens": n_tokens, "ignore_eos": True, "seed": i,
              "temperature": 1.0} for i in range(4)]
    poller = Poller(srv.url)
    poller.start()
    with ThreadPoolExecutor(5) as pool:
        futs = [pool.submit(stream, srv.url, b) for b in plain]
        hv = None
        if heavy is not None:
            time.sleep(heavy_after_s)
            hv = pool.submit(stream, srv.url, {"model": model, "prompt": PROMPT, "max_tokens": heavy_max_tokens,
                                              "structured_outputs": {"json": heavy}})
        res = [f.result() for f in futs]
        h = hv.result() if hv else None
    poller.stop_ev.set()
    poller.join()
    t_lo = min(r["t0"] for r in res)
    t_hi = max((r["times"][-1] if r["times"] else r["t0"]) for r in res)
    lat = [dt for t, dt in poller.lat if t_lo <= t <= t_hi]
    out = {"streams_status": [r["status"] for r in res], "stream_chunks": [len(r["times"]) for r in res],
           "max_stream_gap_s": round(max(max_gap(r["times"]) for r in res), 4),
           "median_stream_gap_s": round(statistics.median(
               [b - a for r in res for a, b in zip(r["times"], r["times"][1:])] or [0]), 4),
           "max_api_loop_latency_s": round(max(lat, default=0.0), 4)}
    if h is not None:
        out["heavy_status"] = h["status"]
        out["heavy_ttft_s"] = round(h["times"][0] - h["t0"], 4) if h["times"] else None
        out["heavy_total_s"] = round(h["times"][-1] - h["t0"], 4) if h["times"] else None
        if h["status"] != 200:
            out["heavy_error"] = h.get("error")
        # the gap the streams saw while the heavy request was being compiled (send -> first chunk)
        if h["times"]:
            lo, hi = h["t0"], h["times"][0]
            gaps = [b - a for r in res for a, b in zip(r["times"], r["times"][1:]) if b >= lo and a <= hi]
            out["max_stream_gap_during_heavy_compile_s"] = round(max(gaps, default=0.0), 4)
    return out


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))], 4)


def part_b(srv, schemas: list[dict], concurrency: int, max_tokens: int) -> dict:
    model = srv.served_model_name
    bodies = [{"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "structured_outputs": {"json": s}}
              for s in schemas]
    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        res = list(pool.map(lambda b: stream(srv.url, b), bodies))
    wall = time.monotonic() - t0
    ok = [r for r in res if r["status"] == 200 and r["times"]]
    ttft = [r["times"][0] - r["t0"] for r in ok]
    status: dict[str, int] = {}
    for r in res:
        status[str(r["status"])] = status.get(str(r["status"]), 0) + 1
    return {"requests": len(res), "ok": len(ok), "status": status, "wall_s": round(wall, 3),
            "req_per_s": round(len(res) / wall, 3), "ttft_p50_s": pct(ttft, 0.5), "ttft_p90_s": pct(ttft, 0.9),
            "ttft_max_s": pct(ttft, 1.0),
            "errors": sorted({r.get("error", "")[:160] for r in res if r["status"] != 200})[:5]}


def client_realtime(priority: int) -> str:
    """Put this client's thread (and the threads it starts afterwards: the streams' pool, the
    poller) under ``SCHED_FIFO`` at ``priority``, after the server's processes were started (they
    keep the normal policy). The client is the measuring instrument: on a machine whose cores the
    server saturates, a normally scheduled client can itself wait seconds for a core, and its gaps
    are then its own. Needs root or CAP_SYS_NICE; returns the policy in effect, or the error."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (OSError, AttributeError) as e:
        return f"normal ({type(e).__name__}: {e})"
    return f"SCHED_FIFO {priority}"


def run_backend(spec: str, args, heavy: dict, distinct: list[dict], validate_heavy: dict | None = None) -> dict:
    from structgate.plugin.server import VllmServer

    name, _, envs = spec.partition(":")
    env = dict(kv.split("=", 1) for kv in envs.split(",") if kv) if envs else {}
    srv = VllmServer(name, env=env, log_path=str(pathlib.Path(args.log_dir) / ("vllm-stall-" + "".join(
        ch if ch.isalnum() else "_" for ch in spec)[:80] + ".log")))
    res: dict = {"backend": name, "env": env}
    with srv:
        t = time.monotonic()
        srv.wait_ready(timeout_s=900)
        res["startup_s"] = round(time.monotonic() - t, 1)
        # warm-up: first plain and first structured request (builds the validation and engine backends)
        stream(srv.url, {"model": srv.served_model_name, "prompt": "x", "max_tokens": 4})
        stream(srv.url, {"model": srv.served_model_name, "prompt": "x", "max_tokens": 4,
                         "structured_outputs": {"json": {"type": "object", "properties": {"a": {"type": "integer"}}}}})
        if args.client_rt:
            res["client_sched"] = client_realtime(args.client_rt)
        res["a_baseline"] = part_a(srv, None, args.stream_tokens, args.heavy_after_s, args.heavy_max_tokens)
        res["a_heavy"] = [part_a(srv, heavy, args.stream_tokens, args.heavy_after_s, args.heavy_max_tokens)
                          for _ in range(args.repeats)]
        if validate_heavy is not None:  # a schema slow to *validate* (cheap to compile): the API loop
            res["a_validate_heavy"] = part_a(srv, validate_heavy, args.stream_tokens, args.heavy_after_s,
                                             args.heavy_max_tokens)
        if distinct:
            res["b_distinct"] = part_b(srv, distinct, args.concurrency, args.distinct_max_tokens)
        ok = httpx.get(srv.url + "/health", timeout=30).status_code
        res["health_at_end"] = ok
    print(json.dumps(res), flush=True)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="native,guidance")
    ap.add_argument("--corpus", required=True,
                    help="MaskBench development subset folder (*.jsonl); where to get it: bench/README.md, 'Corpora'")
    ap.add_argument("--heavy", default="JsonSchemaStore---nuclei-jsonschema.json")
    ap.add_argument("--validate-heavy", default="Github_easy---o12621.json",
                    help="a schema slow to validate (0.6-0.8 s on native), sent once like --heavy; '' to skip")
    ap.add_argument("--stream-tokens", type=int, default=500)
    ap.add_argument("--heavy-after-s", type=float, default=1.0)
    ap.add_argument("--heavy-max-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--n-distinct", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--distinct-max-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--log-dir", default="/tmp")
    ap.add_argument("--client-rt", type=int, default=0,
                    help="run the client's threads under SCHED_FIFO at this priority (1-99; 0: normal), so "
                         "that the gaps it measures are the server's, not its own wait for a core")
    args = ap.parse_args(argv)
    schemas = load_schemas(pathlib.Path(args.corpus))
    heavy = schemas[args.heavy]
    distinct = [schemas[i] for i in distinct_ids(schemas, args.n_distinct, args.seed, args.heavy)]
    meta = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]), "heavy": args.heavy,
            "load_avg_start": os.getloadavg(), "cpus": os.cpu_count(), "args": vars(args)}
    vheavy = schemas[args.validate_heavy] if args.validate_heavy else None
    results = [run_backend(spec, args, heavy, distinct, vheavy) for spec in args.backends.split(";" if ";" in args.backends else ",")]
    meta["load_avg_end"] = os.getloadavg()
    doc = {"meta": meta, "results": results}
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
