"""End-to-end benchmark: grammar-forced tokens as speculative drafts, on vs off (vLLM, CPU).

Starts one ``vllm serve`` per configuration on the embedded tiny model with the native backend:

* ``off``: no speculative decoding (vLLM's default async scheduling on);
* ``off-sync``: no speculative decoding and ``--no-async-scheduling``: the baseline that isolates
  the drafting itself, since vLLM turns async scheduling off for every ``custom_class`` proposer;
* ``on``: ``--speculative-config`` = :data:`structgate.plugin.drafter.SPECULATIVE_CONFIG` with
  ``num_speculative_tokens = --k`` (forced-token drafts, exact);
* ``bytes``: the same with ``STRUCTGATE_FORCED_DRAFTS=bytes`` (safe re-tokenized forced bytes,
  verified by vLLM's rejection sampler; opt-in);

and sends the same greedy (``temperature 0``) schema-heavy requests to both, at each concurrency
(default 1 and 16): vLLM's ``structured_schema_1.json``, 4 MaskBench BFCL and 4 Kubernetes schemas
and an enum-heavy schema (``bench/data/forced_drafts_schemas.json``). Reports, per configuration
and concurrency: wall time, output tokens/s, decoding steps per request (``output tokens -
accepted drafts``, from vLLM's ``/metrics``), the fraction of output tokens that came from accepted
drafts (for ``on``: the forced tokens), drafted vs accepted draft tokens, and whether every output
is byte-identical to ``off``. For the ``off`` outputs at concurrency 1 it also replays each output's
bytes through the native matcher and reports the fraction of output *bytes* the grammar forces
(the ceiling of a bytes-level jump-forward).

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


def forced_byte_fraction(schemas: list[tuple[str, dict]], outputs: list[dict]) -> dict:
    """Replay each output's bytes (single-byte tokens) through native's matcher for its schema and
    count the bytes :func:`structgate.jump_forward.forced_byte_walk` calls forced (every allowed
    token starts with that byte, EOS not allowed). Returns totals and per-schema fractions."""
    from structgate import load_vocabulary
    from structgate.backends.interface import Constraint
    from structgate.backends.registry import get_backend
    from structgate.jump_forward import forced_byte_walk, vocab_tables

    vocab = load_vocabulary("llama3")
    be = get_backend("native", vocab)
    _, _, byte_token = vocab_tables(vocab)
    tot_b = tot_f = 0
    per = {}
    for (name, schema), out in zip(schemas, outputs):
        m = be.compile(Constraint.json_schema(schema)).matcher()
        data = out["text"].encode()
        forced = 0
        walked = 0
        for b in data:
            if forced_byte_walk(m, 1)[0] == bytes([b]):
                forced += 1
            if not m.advance(int(byte_token[b])):
                break
            walked += 1
        per[name] = round(forced / walked, 4) if walked else 0.0
        tot_b += walked
        tot_f += forced
    return {"bytes": tot_b, "forced_bytes": tot_f, "fraction": round(tot_f / tot_b, 4) if tot_b else 0.0,
            "per_schema": per}


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
            "acceptance": round(d["accepted"] / d["drafted"], 4) if d["drafted"] else None,
            "loadavg_1m": round(os.getloadavg()[0], 2), "outputs": outs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=8, help="num_speculative_tokens of the 'on' server")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeat16", type=int, default=3, help="copies of the schema set at concurrency > 1")
    ap.add_argument("--configs", nargs="+", default=["off", "off-sync", "on", "bytes"], choices=["off", "off-sync", "on", "bytes"])
    ap.add_argument("--out", default=None, help="JSON results file")
    a = ap.parse_args(argv)

    import httpx

    from structgate.plugin.drafter import speculative_config
    from structgate.plugin.server import VllmServer

    schemas = schema_set()
    results: dict = {"k": a.k, "max_tokens": a.max_tokens, "schemas": [n for n, _ in schemas], "runs": {}}
    from structgate.plugin.drafter import ENV_FORCED_DRAFTS

    results["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    for cfg in a.configs:
        extra = (["--speculative-config", json.dumps(speculative_config(a.k))] if cfg in ("on", "bytes")
                 else ["--no-async-scheduling"] if cfg == "off-sync" else [])
        env = {ENV_FORCED_DRAFTS: "bytes"} if cfg == "bytes" else {ENV_FORCED_DRAFTS: "tokens"}
        srv = VllmServer("native", extra_args=extra, env=env, log_path=f"/tmp/structgate-forced-bench-{cfg}.log")
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
    results["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    for c in a.concurrency:
        if f"off-c{c}" not in results["runs"]:
            continue
        off = results["runs"][f"off-c{c}"]
        for cfg in a.configs:
            if cfg == "off":
                continue
            on = results["runs"][f"{cfg}-c{c}"]
            same = [x["text"] == y["text"] for x, y in zip(off["outputs"], on["outputs"])]
            on["identical_to_off"] = f"{sum(same)}/{len(same)}"
            on["speedup_vs_off"] = round(on["output_tok_per_s"] / off["output_tok_per_s"], 3)
            on["steps_vs_off"] = round(on["steps_per_request"] / off["steps_per_request"], 4)
            sync = results["runs"].get(f"off-sync-c{c}")
            if sync is not None and cfg != "off-sync":
                on["speedup_vs_off_sync"] = round(on["output_tok_per_s"] / sync["output_tok_per_s"], 3)
            print(f"{cfg} c={c}: outputs identical to off: {sum(same)}/{len(same)}; "
                  f"speed-up {on['speedup_vs_off']:.2f}x (vs off-sync {on.get('speedup_vs_off_sync', '-')}); "
                  f"steps {off['steps_per_request']} -> {on['steps_per_request']}")
    if "off-c1" in results["runs"]:
        results["forced_bytes_off_c1"] = fb = forced_byte_fraction(schemas, results["runs"]["off-c1"]["outputs"])
        print(f"forced bytes in the off outputs (c=1): {fb['forced_bytes']}/{fb['bytes']} = {fb['fraction']:.1%}")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
