"""End-to-end benchmark: grammar-forced tokens as speculative drafts, on vs off (vLLM, CPU).

Starts one ``vllm serve`` per configuration on the embedded tiny model with the native backend:

* ``off``: no speculative decoding;
* ``on``: ``--speculative-config`` = :data:`structgate.plugin.drafter.SPECULATIVE_CONFIG` with
  ``num_speculative_tokens = --k``;

and sends the same greedy (``temperature 0``) schema-heavy requests to both, at each concurrency
(default 1 and 16): vLLM's ``structured_schema_1.json``, 4 MaskBench BFCL and 4 Kubernetes schemas
and an enum-heavy schema (``bench/data/forced_drafts_schemas.json``). Reports, per configuration
and concurrency: wall time, output tokens/s, decoding steps per request (``output tokens -
accepted drafts``, from vLLM's ``/metrics``), the fraction of output tokens that were forced drafts,
drafted vs accepted draft tokens, and whether every output is byte-identical between on and off.

    .venv/bin/python bench/forced_drafts.py --out bench/results/forced_drafts.json

Hold ``/tmp/structgate-vllm.lock`` (``flock``) on shared machines: it runs two servers in turn.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = pathlib.Path(__file__).resolve().parent
SCHEMAS = HERE / "data" / "forced_drafts_schemas.json"
VLLM_SCHEMA = HERE / "data" / "structured_schema_1.json"


def schema_set() -> list[tuple[str, dict]]:
    """``(name, schema)`` of the benchmark, in a fixed order."""
    d = json.loads(SCHEMAS.read_text())
    out = [("vllm-structured_schema_1", json.loads(VLLM_SCHEMA.read_text()))]
    for group in ("BFCL", "Kubernetes", "enum_heavy"):
        out += [(f"{group}/{e['id']}", e["schema"]) for e in d[group]]
    return out


def metric_sum(text: str, name: str) -> float:
    """Sum of every sample of the Prometheus series ``name`` (any labels) in ``text``."""
    tot = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (len(line) == len(name) or line[len(name)] in " {"):
            try:
                tot += float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return tot


SERIES = {"drafted": "vllm:spec_decode_num_draft_tokens_total",
          "accepted": "vllm:spec_decode_num_accepted_tokens_total",
          "forced": "structgate_forced_draft_tokens_total",
          "generated": "vllm:generation_tokens_total"}


def scrape(client, url: str) -> dict[str, float]:
    text = client.get(url + "/metrics", timeout=30).text
    return {k: metric_sum(text, v) for k, v in SERIES.items()}


def body(name: str, schema: dict, max_tokens: int) -> dict:
    return {"prompt": f"A JSON value for {name}: ", "max_tokens": max_tokens, "temperature": 0.0,
            "structured_outputs": {"json": schema}}


def run_load(client, srv, reqs: list[dict], concurrency: int) -> dict:
    """Send ``reqs`` with ``concurrency`` in flight; outputs and metric deltas."""
    def one(b):
        r = client.post(srv.url + "/v1/completions", json={"model": srv.served_model_name, **b}, timeout=600)
        r.raise_for_status()
        c = r.json()["choices"][0]
        return {"text": c["text"], "finish": c["finish_reason"], "tokens": r.json()["usage"]["completion_tokens"]}

    time.sleep(1.5)  # structgate's metric files are written at most once a second
    m0 = scrape(client, srv.url)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        outs = list(pool.map(one, reqs))
    wall = time.perf_counter() - t0
    time.sleep(1.5)
    m1 = scrape(client, srv.url)
    d = {k: m1[k] - m0[k] for k in m0}
    toks = sum(o["tokens"] for o in outs)
    return {"concurrency": concurrency, "requests": len(reqs), "wall_s": round(wall, 3),
            "output_tokens": toks, "output_tok_per_s": round(toks / wall, 2),
            "steps_per_request": round((toks - d["accepted"]) / len(reqs), 2),
            "drafted": d["drafted"], "accepted": d["accepted"], "forced_metric": d["forced"],
            "forced_fraction": round(d["accepted"] / toks, 4) if toks else 0.0,
            "loadavg_1m": round(os.getloadavg()[0], 2), "outputs": outs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=8, help="num_speculative_tokens of the 'on' server")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeat16", type=int, default=3, help="copies of the schema set at concurrency > 1")
    ap.add_argument("--out", default=None, help="JSON results file")
    a = ap.parse_args(argv)

    import httpx

    from structgate.plugin.drafter import speculative_config
    from structgate.plugin.server import VllmServer

    schemas = schema_set()
    results: dict = {"k": a.k, "max_tokens": a.max_tokens, "schemas": [n for n, _ in schemas], "runs": {}}
    for cfg in ("off", "on"):
        extra = ["--speculative-config", json.dumps(speculative_config(a.k))] if cfg == "on" else []
        srv = VllmServer("native", extra_args=extra, log_path=f"/tmp/structgate-forced-bench-{cfg}.log")
        with srv, httpx.Client() as client:
            srv.wait_ready(timeout_s=600)
            run_load(client, srv, [body(*schemas[0], 16)], 1)  # warm-up (compile caches, first step)
            for c in a.concurrency:
                reqs = [body(n, s, a.max_tokens) for n, s in schemas] * (1 if c == 1 else a.repeat16)
                res = run_load(client, srv, reqs, c)
                results["runs"][f"{cfg}-c{c}"] = res
                print(f"{cfg:3} c={c:2}: {res['requests']} req {res['wall_s']:7.2f} s "
                      f"{res['output_tok_per_s']:7.1f} tok/s steps/req {res['steps_per_request']:6.1f} "
                      f"forced {res['forced_fraction']:.1%} drafted {res['drafted']:.0f} accepted {res['accepted']:.0f} "
                      f"load {res['loadavg_1m']}", flush=True)
    for c in a.concurrency:
        off, on = results["runs"][f"off-c{c}"], results["runs"][f"on-c{c}"]
        same = [x["text"] == y["text"] for x, y in zip(off["outputs"], on["outputs"])]
        results["runs"][f"on-c{c}"]["identical_to_off"] = f"{sum(same)}/{len(same)}"
        print(f"c={c}: outputs identical on vs off: {sum(same)}/{len(same)}; "
              f"speed-up {on['output_tok_per_s'] / off['output_tok_per_s']:.2f}x; "
              f"steps {off['steps_per_request']} -> {on['steps_per_request']}")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
