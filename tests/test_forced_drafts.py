"""Grammar-forced tokens as speculative drafts (structgate.plugin.drafter).

Unit checks of the scheduler side on vLLM's real ``Scheduler.update_draft_token_ids`` with stand-in
requests (drafts = ``forced_tokens`` by its definition, capped by max_tokens, unconstrained /
reasoning / other drafters untouched, matcher state unchanged); then two real servers on the
embedded model — forced drafts off and on (one per configuration) — answering the same greedy
json_schema / regex / choice requests over HTTP: every output valid (jsonschema / re / membership),
byte-identical on vs off, ``structgate_forced_draft_tokens`` > 0 on /metrics, and vLLM's own
counters show every drafted token accepted by the verifier.
"""
from __future__ import annotations

import json
import types
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("vllm")
httpx = pytest.importorskip("httpx")

from structgate.backends.interface import Constraint, Matcher  # noqa: E402
from structgate.backends.registry import get_backend  # noqa: E402
from structgate.plugin import drafter  # noqa: E402


ENUM_HEAVY = {"type": "object", "properties": {
    "status": {"enum": ["pending_review", "approved_for_release", "rejected_by_moderator"]},
    "region": {"enum": ["north-america-east", "europe-central"]},
    "kind": {"const": "shipment_record_v2"}}, "required": ["status", "region", "kind"]}


# -- scheduler side, no server ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scheduler_cls():
    import structgate.plugin as plugin

    plugin.autoload()
    from vllm.v1.core.sched.scheduler import Scheduler

    drafter.install(Scheduler)
    return Scheduler


class _Grammar:
    """What the scheduler hook needs of the bridge's grammar: ``.matcher`` and ``.backend_name``."""

    def __init__(self, matcher):
        self.matcher = matcher
        self.backend_name = "native"


def _request(rid, matcher=None, *, max_tokens=100, out_tokens=3, reasoning_open=False):
    sreq = types.SimpleNamespace(grammar=_Grammar(matcher), reasoning_open=reasoning_open) if matcher else None
    return types.SimpleNamespace(request_id=rid, use_structured_output=matcher is not None,
                                 structured_output_request=sreq, max_tokens=max_tokens,
                                 num_output_tokens=out_tokens, is_prefill_chunk=False, spec_token_ids=[],
                                 is_finished=lambda: False)


def _scheduler(requests, k, model=drafter.PROPOSER):
    mgr = types.SimpleNamespace(
        validate_tokens=lambda req, toks: list(toks),
        _get_constraint_bounds=lambda req, toks: (1, 1) if req.structured_output_request.reasoning_open else (0, 0))
    spec = types.SimpleNamespace(method="custom_class", model=model, num_speculative_tokens=k)
    return types.SimpleNamespace(requests={r.request_id: r for r in requests}, structured_output_manager=mgr,
                                 vllm_config=types.SimpleNamespace(speculative_config=spec))


@pytest.fixture(scope="module")
def choice_grammar(llama3_vocab):
    be = get_backend("native", llama3_vocab)
    return be.compile(Constraint.json_schema(ENUM_HEAVY))


def _walk_states(g, vocab, n_forced=3, seed=0):
    """Matchers at states of seeded random walks (uniform over the allowed non-EOS ids): ``n_forced``
    where the mask forces a token (by the definition), then one where it does not."""
    import numpy as np

    rng = np.random.default_rng(seed)
    forced, free = [], None
    for _ in range(200):
        m = g.matcher()
        while len(forced) < n_forced or free is None:
            ids = [int(t) for t in m.allowed_token_ids() if t not in vocab.eos_token_ids]
            if not ids:
                break
            if Matcher.forced_tokens(m, 4):
                if len(forced) < n_forced:
                    forced.append(m.fork())
            elif free is None and len(m.history) > 1:
                free = m.fork()
            assert m.advance(int(rng.choice(ids)))
        if len(forced) >= n_forced and free is not None:
            return forced + [free]
    raise AssertionError("no forced state found in 200 random walks")


def test_scheduler_side_drafts_forced_tokens_only_for_structured(scheduler_cls, choice_grammar, llama3_vocab):
    from vllm.v1.outputs import DraftTokenIds

    walks = _walk_states(choice_grammar, llama3_vocab)
    want = [Matcher.forced_tokens(m, 4) for m in walks]
    assert all(want[:3]) and want[3] == []
    reqs = [_request(f"s{i}", m) for i, m in enumerate(walks)]
    plain = _request("plain")
    thinking = _request("think", choice_grammar.matcher(), reasoning_open=True)
    short = _request("short", walks[0], max_tokens=5, out_tokens=3)  # room for 1 draft + the bonus token
    sched = _scheduler(reqs + [plain, thinking, short], k=4)
    before = [m.history for m in walks]
    drafter.stats.clear()
    scheduler_cls.update_draft_token_ids(sched, DraftTokenIds(
        [r.request_id for r in reqs] + ["plain", "think", "short"], [[]] * len(reqs) + [[7, 8], [9], []]))
    assert [r.spec_token_ids for r in reqs] == want
    assert [m.history for m in walks] == before, "drafting changed a matcher"
    assert plain.spec_token_ids == [7, 8] and thinking.spec_token_ids == [9]  # vLLM's own result kept
    assert short.spec_token_ids == want[0][:1]
    assert drafter.stats["tokens"] == sum(map(len, want)) + len(want[0][:1])
    # every draft is what the mask forces: each is the only allowed id at its step
    for m, d in zip(walks, want):
        f = m.fork()
        for t in d:
            assert list(f.allowed_token_ids()) == [t]
            assert f.advance(t)


def test_other_drafters_and_switch_untouched(scheduler_cls, choice_grammar, monkeypatch):
    from vllm.v1.outputs import DraftTokenIds

    m = choice_grammar.matcher()
    r = _request("a", m)
    sched = _scheduler([r], k=4, model="tests.reasoning_drafts.EndMarkerProposer")
    scheduler_cls.update_draft_token_ids(sched, DraftTokenIds(["a"], [[5]]))
    assert r.spec_token_ids == [5]
    monkeypatch.setenv(drafter.ENV_FORCED_DRAFTS, "0")
    r2 = _request("b", m)
    scheduler_cls.update_draft_token_ids(_scheduler([r2], k=4), DraftTokenIds(["b"], [[]]))
    assert r2.spec_token_ids == []


def test_proposer_proposes_nothing():
    cfg = types.SimpleNamespace(speculative_config=types.SimpleNamespace(num_speculative_tokens=3))
    p = drafter.ForcedTokenProposer(cfg)
    assert p.propose([[1], [2, 3]], None, None) == [[], []]
    assert json.loads(drafter.SPECULATIVE_CONFIG)["model"] == drafter.PROPOSER


# -- real servers ------------------------------------------------------------------------------------
def _jobs():
    from structgate.cli.demo import build_requests

    jobs = []
    for r in build_requests([("enum heavy", ENUM_HEAVY)]):
        b = {k: v for k, v in r["body"].items() if k != "seed"}
        jobs.append((r["path"], {**b, "temperature": 0.0}, r["check"]))
    return jobs


def metric_sum(text: str, name: str) -> float:
    """Sum of every sample of the Prometheus series ``name`` (as bench/forced_drafts.py)."""
    tot = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
            tot += float(line.rsplit(" ", 1)[1])
    return tot


def _metrics(srv) -> str:
    return httpx.get(srv.url + "/metrics", timeout=30).text


@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_forced_drafts_over_http_exact_valid_and_all_accepted(tmp_path):
    import time

    from structgate.cli.demo import check_output
    from structgate.plugin.server import VllmServer

    off = VllmServer("native", log_path=str(tmp_path / "off.log"))
    on = VllmServer("native", log_path=str(tmp_path / "on.log"),
                    extra_args=["--speculative-config", json.dumps(drafter.speculative_config(8))])
    jobs = _jobs()
    kinds = {j[2][0] for j in jobs}
    assert kinds == {"json_schema", "regex", "choice"}
    texts = {}
    try:
        for s in (off, on):
            s.start()
        for s in (off, on):
            s.wait_ready(timeout_s=600)
        for s in (off, on):
            with httpx.Client(timeout=300.0) as client, ThreadPoolExecutor(6) as pool:
                res = list(pool.map(lambda j: client.post(s.url + j[0], json={"model": s.served_model_name, **j[1]}),
                                    jobs))
            outs = []
            for (path, body, check), r in zip(jobs, res):
                assert r.status_code == 200, r.text
                c = r.json()["choices"][0]
                text = c["message"]["content"] if "message" in c else c["text"]
                ok, why = check_output(check, text)
                assert ok or c["finish_reason"] == "length", (check, text, why)
                outs.append(text)
            texts[s is on] = outs
        assert texts[True] == texts[False], [(a, b) for a, b in zip(texts[False], texts[True]) if a != b]
        time.sleep(2.0)  # structgate's metric files are written at most once a second
        m_on, m_off = _metrics(on), _metrics(off)
        forced = metric_sum(m_on, "structgate_forced_draft_tokens_total")
        drafted = metric_sum(m_on, "vllm:spec_decode_num_draft_tokens_total")
        accepted = metric_sum(m_on, "vllm:spec_decode_num_accepted_tokens_total")
        assert forced > 0, m_on[-3000:]
        # every draft vLLM scheduled was accepted (the exactness claim); structgate counts what it
        # proposes, vLLM what it schedules: proposals vLLM drops (a request that finishes or is
        # preempted in that step) appear only in structgate's count
        assert 0 < drafted <= forced and accepted == drafted, (forced, drafted, accepted)
        assert metric_sum(m_off, "structgate_forced_draft_tokens_total") == 0
    finally:
        for s in (off, on):
            s.stop()
