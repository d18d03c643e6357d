"""Load and faults on one real server (issue 15): 2 rounds of the same mixed workload, 32 requests at a
time, on the embedded model with ``--structured-output-backend native``, loopback only.

The mix: valid json_schema (completions and chat ``response_format``), regex, choice and GBNF grammar
requests (many distinct constraints, so the engine compiles and caches), catastrophic regexes
(state explosion ``(a|b)*a(a|b){20}``, ``(a|aa)*b``-style ambiguity), malformed schemas, bad regexes
and grammars, constraints over a compile limit (found in the API server's validation or later in the
engine), client disconnects mid-stream and client aborts (a client timeout while the request runs).

Every valid request must finish with an output valid against its constraint (oracles independent of
the server: ``jsonschema``, Python ``re.fullmatch``, membership; GBNF through structgate's native
matcher compiled in the test process), or be cut at ``max_tokens`` (``finish_reason == "length"``)
with a valid *prefix* (``regex`` partial matching, ``startswith``, the native matcher). Every bad
request must be an HTTP 400 (or, for a stream that had started, vLLM's in-band error event with code
400) whose message names the problem. At the end the server answers ``/health`` and still serves a
request, and the resident memory of the server's processes grew by a bounded amount: the second
round (the same constraints: compile-cache hits) may add at most ``ROUND2_GROWTH_MIB``, the whole run
at most ``TOTAL_GROWTH_MIB`` (the native engine's caches are capped: 256 compiled grammars, mask rows
per grammar by ``row_budget_bytes``)."""
from __future__ import annotations

import json
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

#: five nested repeats of 31 (each under the 32 a counter takes, LARGE_REPEAT_MIN_COUNT): 31**5 copies
_NESTED_31 = "(?:(?:(?:(?:(?:ab|c){31}){31}){31}){31}){31}"

pytest.importorskip("vllm")
httpx = pytest.importorskip("httpx")
jsonschema = pytest.importorskip("jsonschema")
regex_mod = pytest.importorskip("regex")
psutil = pytest.importorskip("psutil")

from structgate import Constraint, load_vocabulary  # noqa: E402
from structgate.plugin.server import VllmServer  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]

CONCURRENCY = 32
MAX_TOKENS = 16
ROUND2_GROWTH_MIB = 300
TOTAL_GROWTH_MIB = 1536


# -- the workload ---------------------------------------------------------------------------------
def _schemas(i: int) -> list[dict]:
    return [
        {"type": "object", "properties": {"ok": {"type": "boolean"}, "k": {"enum": [f"v{i}", "w", "z"]}},
         "required": ["ok", "k"], "additionalProperties": False},
        {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6 + i % 5},
                                          "age": {"type": "integer", "minimum": 0, "maximum": 100 + i}},
         "required": ["name", "age"], "additionalProperties": False},
        {"type": "array", "items": {"enum": ["a", "b", f"c{i}"]}, "minItems": 1, "maxItems": 2 + i % 3},
    ]


GRAMMARS = [
    ('root ::= "(" item ("," item)* ")"\nitem ::= [0-9] | "x"', None),
    ('root ::= "yes" | "no" | "maybe"', None),
    ('root ::= word (" " word)?\nword ::= [a-c] [a-c]?', None),
]
CATASTROPHIC = ["(a|b)*a(a|b){20}", "(a|aa)*b", "(x+x+)+y", "(a*)*b", "(a|b)*a(a|b){25}", "(ab|a|b)*c{3}"]

# bad requests: (body, substring the 400's message must contain)
BAD = [
    ({"structured_outputs": {"json": {"type": "object", "properties": {"a": {"type": "intger"}}}}}, "intger"),
    ({"structured_outputs": {"json": {"type": "strng"}}}, "strng"),
    ({"structured_outputs": {"regex": "[0-9"}}, "unterminated character set"),
    ({"structured_outputs": {"regex": "(ab"}}, "GrammarSyntaxError"),
    ({"structured_outputs": {"regex": r"\bfoo"}}, "word boundary"),
    ({"structured_outputs": {"grammar": "root ::= foo"}}, "undefined rule 'foo'"),
    ({"structured_outputs": {"choice": []}}, "cannot be an empty list"),  # vLLM's own generic check
    # over a compile limit: found by validation in the API server (a counted repeat of a nullable
    # item is expanded: ("ab"{1000}){1000} or maxLength: 100000000 are binary counters, and compile) ...
    # (nested repeats under the counters' 32 copies; a repeat of a nullable body, ("a"? "b"?){3000000},
    # 65 nullable items, (^|a){3000000} or a nullable rule's reference x{3000000}, is a counter
    # of its non-empty form, regex.parser.repeat_node and pushdown.count_large_repeats)
    ({"structured_outputs": {"grammar": 'root ::= ((((("a" "b" | "c"){31}){31}){31}){31}){31}'}}, "max_nfa_states"),
]
# ... or only by the engine's compile (validation passes them): also sent streamed, where the 400
# may come in-band. (A list of its own: slicing BAD by index went stale as entries were removed,
# and BAD[9:] had sent none since 2026-12-01.)
BAD_ENGINE = [
    ({"structured_outputs": {"json": {"type": "object", "properties": {
        "s": {"type": "string", "pattern": "^" + _NESTED_31 + "$"}}}}}, "max_nfa_states"),
]
BAD = BAD + BAD_ENGINE
# large counted repeats that were over a limit before the counters, and a pattern × maxLength
# product that was max_product_states before it was generated lazily: now valid requests (issue 10)
COUNTED = [{"type": "string", "maxLength": 100000000}, {"type": "array", "items": {"type": "integer"}, "maxItems": 1000000},
           {"type": "object", "properties": {"s": {"type": "string", "pattern": "(a{1000}){1000}"}}},
           {"type": "string", "pattern": r"^(?:\S+\s+){0,99}\S+$", "maxLength": 5000}]


def _workload(seed: int) -> list[dict]:
    items: list[dict] = []
    for i in range(12):
        for s in _schemas(i):
            items.append({"kind": "json", "c": s, "body": {"prompt": "JSON: ", "structured_outputs": {"json": s}}})
        s = _schemas(i)[1]
        items.append({"kind": "json", "c": s, "chat": True, "body": {
            "messages": [{"role": "user", "content": f"person {i}"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": s}}}})
        rx = f"(yes|no|n{i}) [0-9]{{1,3}}"
        items.append({"kind": "regex", "c": rx, "body": {"prompt": "A: ", "structured_outputs": {"regex": rx}}})
        ch = [f"red{i}", "green", "blue"]
        items.append({"kind": "choice", "c": ch, "body": {"prompt": "C: ", "structured_outputs": {"choice": ch}}})
    for g, _ in GRAMMARS:
        for j in range(2):
            items.append({"kind": "grammar", "c": g, "body": {"prompt": f"G{j}: ", "structured_outputs": {"grammar": g}}})
    for rx in CATASTROPHIC:
        items.append({"kind": "regex", "c": rx, "body": {"prompt": "R: ", "structured_outputs": {"regex": rx}}})
    for body, needle in BAD:
        items.append({"kind": "bad", "needle": needle, "body": {"prompt": "B: ", **body}})
    for s in COUNTED:
        items.append({"kind": "json", "c": s, "body": {"prompt": "N: ", "structured_outputs": {"json": s}}})
    for body, needle in BAD_ENGINE:  # engine-side failures, streamed: the 400 may come in-band
        items.append({"kind": "bad", "needle": needle, "stream": True, "body": {"prompt": "B: ", **body}})
    for i in range(6):  # disconnect mid-stream, plain and constrained
        so = {} if i % 2 else {"structured_outputs": {"regex": "[a-z ]{40,200}"}}
        items.append({"kind": "disconnect", "body": {"prompt": f"D{i}: ", "max_tokens": 200, "ignore_eos": True,
                                                     **so}})
    for i in range(6):  # client abort: gives up while the request runs
        items.append({"kind": "abort", "body": {"prompt": f"X{i}: ", "max_tokens": 400, "ignore_eos": True,
                                                "structured_outputs": {"json": _schemas(i)[2]}}})
    random.Random(seed).shuffle(items)
    return items


# -- oracles ----------------------------------------------------------------------------------------
class Oracles:
    def __init__(self):
        from structgate.native.backend import NativeBackend

        self.vocab = load_vocabulary("llama3")
        self.native = NativeBackend(self.vocab)

    def native_ok(self, constraint: Constraint, text: str, complete: bool) -> bool:
        m = self.native.compile(constraint).matcher()
        return m.advance(self.vocab.encode(text)) and (m.is_accepting() or not complete)

    def check(self, item: dict, text: str, finish: str) -> str | None:
        """None if ``text`` is valid for the item's constraint (a prefix when cut at length)."""
        complete = finish != "length"
        if finish not in ("stop", "length"):
            return f"finish_reason {finish!r}"
        kind, c = item["kind"], item["c"]
        if kind == "json":
            if complete:
                try:
                    jsonschema.validate(json.loads(text), c)
                except (ValueError, jsonschema.ValidationError) as e:
                    return f"not valid JSON for the schema: {e}"
                return None
            return None if self.native_ok(Constraint.json_schema(c), text, False) else "not a schema prefix"
        if kind == "regex":
            if complete:
                return None if re.fullmatch(c, text) else "re.fullmatch failed"
            return None if regex_mod.fullmatch(c, text, partial=True) else "not a regex prefix"
        if kind == "choice":
            ok = text in c if complete else any(x.startswith(text) for x in c)
            return None if ok else "not a choice (prefix)"
        if kind == "grammar":
            return None if self.native_ok(Constraint.grammar(c, "gbnf"), text, complete) else "grammar rejects"
        raise AssertionError(kind)


# -- the client -------------------------------------------------------------------------------------
def _send(srv, item: dict) -> dict:
    body = {"model": srv.served_model_name, "max_tokens": MAX_TOKENS, "seed": 7, **item["body"]}
    path = "/v1/chat/completions" if item.get("chat") else "/v1/completions"
    kind = item["kind"]
    try:
        if kind == "disconnect":
            n = 0
            with httpx.stream("POST", srv.url + path, json={**body, "stream": True}, timeout=300.0) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        n += 1
                        if n >= 2:
                            break  # closing the response drops the connection mid-stream
            return {"status": r.status_code, "chunks": n}
        if kind == "abort":
            try:
                r = httpx.post(srv.url + path, json=body, timeout=httpx.Timeout(300.0, read=0.3))
                return {"status": r.status_code, "finished": True}
            except httpx.ReadTimeout:
                return {"status": "aborted"}
        if item.get("stream"):
            with httpx.stream("POST", srv.url + path, json={**body, "stream": True}, timeout=300.0) as r:
                text = r.read().decode()
            return {"status": r.status_code, "text": text}
        r = httpx.post(srv.url + path, json=body, timeout=300.0)
        return {"status": r.status_code, "json": r.json() if r.headers.get("content-type", "").startswith(
            "application/json") else None, "text": r.text}
    except httpx.HTTPError as e:
        return {"status": "client-error", "error": repr(e)}


def _rss_mib(srv) -> float:
    p = psutil.Process(srv.proc.pid)
    procs = [p, *p.children(recursive=True)]
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def _judge(oracles: Oracles, item: dict, res: dict) -> str | None:
    kind, st = item["kind"], res["status"]
    if kind == "disconnect":
        return None if st == 200 and res["chunks"] >= 1 else f"disconnect: {res}"
    if kind == "abort":
        return None if st in ("aborted", 200) else f"abort: {res}"
    if kind == "bad":
        if item.get("stream") and st == 200:  # the stream had started: in-band error event
            t = res["text"]
            ok = ('"code":400' in t.replace(" ", "")) and item["needle"] in t
            return None if ok and "Internal server error" not in t else f"stream error event: {t[-500:]}"
        if st != 400:
            return f"bad request got {st}: {res.get('text', '')[:400]}"
        msg = res["json"]["error"]["message"] if res.get("json") else res.get("text", "")
        return None if item["needle"] in msg else f"400 without {item['needle']!r}: {msg[:400]}"
    if st != 200:
        return f"valid request got {st}: {res.get('text', res.get('error', ''))[:400]}"
    ch = res["json"]["choices"][0]
    text = ch["message"]["content"] if item.get("chat") else ch["text"]
    err = oracles.check(item, text or "", ch["finish_reason"])
    return None if err is None else f"{err}: {text!r} ({ch['finish_reason']})"


# -- the test ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loadfault")
    srv = VllmServer("native", log_path=str(tmp / "server.log"))
    srv.start()
    try:
        srv.wait_ready(timeout_s=900)
        yield srv
    finally:
        srv.stop()


def test_load_and_faults(server):
    oracles = Oracles()
    # warm-up: both processes build their structgate backends
    r = httpx.post(server.url + "/v1/completions", timeout=300, json={
        "model": server.served_model_name, "prompt": "x", "max_tokens": 4, "structured_outputs": {"regex": "q+"}})
    assert r.status_code == 200, r.text
    rss = [_rss_mib(server)]
    walls, failures, counts = [], [], {}
    n_total = 0
    for rnd in range(2):
        items = _workload(seed=rnd)
        t0 = time.monotonic()
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            results = list(pool.map(lambda it: _send(server, it), items))
        walls.append(time.monotonic() - t0)
        for it, res in zip(items, results):
            key = it["kind"] + ("" if res["status"] != 200 or it["kind"] in ("bad", "disconnect", "abort") else
                                "/" + (res["json"]["choices"][0]["finish_reason"] if res.get("json") else "?"))
            counts[key] = counts.get(key, 0) + 1
            err = _judge(oracles, it, res)
            if err:
                failures.append(f"round {rnd} {it['kind']} {json.dumps(it['body'])[:200]}: {err}")
        n_total += len(items)
        rss.append(_rss_mib(server))
    assert n_total >= 200
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    r = httpx.post(server.url + "/v1/completions", timeout=300, json={
        "model": server.served_model_name, "prompt": "x", "max_tokens": 8, "structured_outputs": {"regex": "(ok|ko)!"}})
    assert r.status_code == 200 and re.fullmatch("(ok|ko)!", r.json()["choices"][0]["text"]), r.text
    # aborted and disconnected requests were freed: nothing left running or waiting in the engine
    from prometheus_client.parser import text_string_to_metric_families

    deadline = time.monotonic() + 30
    while True:
        fams = {f.name: f for f in text_string_to_metric_families(
            httpx.get(server.url + "/metrics", timeout=30).text)}
        left = {n: sum(s.value for s in fams[n].samples) for n in
                ("vllm:num_requests_running", "vllm:num_requests_waiting") if n in fams}
        if len(left) == 2 and not any(left.values()) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert left == {"vllm:num_requests_running": 0, "vllm:num_requests_waiting": 0}, left
    report = {"requests": n_total, "wall_s": [round(w, 1) for w in walls], "rss_mib": [round(x) for x in rss],
              "outcomes": dict(sorted(counts.items()))}
    print("\nload-and-fault:", json.dumps(report))
    assert not failures, "\n".join(failures[:20]) + f"\n({len(failures)} failures) {report}"
    assert rss[2] - rss[1] < ROUND2_GROWTH_MIB, report
    assert rss[2] - rss[0] < TOTAL_GROWTH_MIB, report
