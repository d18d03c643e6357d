"""The sampler hook (structgate.plugin.sampler_hook): the V1 replacement of vLLM's
apply_grammar_bitmask gives the logits vLLM's own path (XGrammar's kernel) gives, bit for bit, on
mixed batches with speculative rows; all-allowed rows are skipped; an all-forbidden row never
becomes an all -inf row; with min_tokens the grammar's EOS wins (field case
vllm-min-tokens-vs-terminal-grammar); the sampler guard; the newer runner's device row mapping."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("vllm")

from structgate.bitmask import bool_to_bitmask  # noqa: E402
from structgate.plugin import sampler_hook as sph  # noqa: E402

V = 1000  # logits width (31.25 words: a partial last word)
W = (V + 31) // 32


@pytest.fixture(autouse=True)
def _hook(monkeypatch):
    monkeypatch.delenv(sph.ENV_SAMPLER_HOOK, raising=False)
    sph.install()
    sph.set_backend_name("native")
    sph.stats.clear()
    yield
    sph.set_backend_name(None)


def vllm_original():
    import vllm.v1.structured_output.utils as u

    f = u.apply_grammar_bitmask
    return getattr(f, "__structgate_original__", f)


def random_rows(rng, n, kinds):
    rows = []
    for k in range(n):
        kind = kinds[k % len(kinds)]
        allowed = np.zeros(V, dtype=bool)
        if kind == "random":
            allowed = rng.random(V) < 0.3
        elif kind == "all":
            allowed[:] = True
        elif kind == "few":
            allowed[rng.choice(V, 3, replace=False)] = True
        rows.append(bool_to_bitmask(allowed))
    return np.stack(rows)


def vllm_layout() -> str:
    """The bitmask layout the installed vLLM's engine fills: 0.32 packs each request's
    ``1 + len(draft)`` rows; 0.33 gives each request ``1 + num_speculative_tokens`` rows."""
    import vllm

    return "fixed" if vllm.__version__.startswith("0.33") else "packed"


def make_step(rng, spec=True, layout=None):
    """A batch of 6 requests (4 structured), some with spec tokens; returns the vLLM objects. With
    the fixed layout (``num_speculative_tokens`` = 3) a request's unused rows are random rows too,
    so reading the wrong rows changes the logits."""
    req_ids = ["u0", "s1", "s2", "u3", "s4", "s5"]
    spec_tokens = {"s2": [5, 6], "u3": [1], "s5": [7, -1]} if spec else {}
    struct = ["s5", "s1", "s4", "s2"]  # the engine's order differs from the batch order
    n_logits = len(req_ids) + sum(len(v) for v in spec_tokens.values())
    if (layout or vllm_layout()) == "fixed":
        n_masks = len(struct) * (1 + (3 if spec else 0))
    else:
        n_masks = sum(1 + len(spec_tokens.get(r, ())) for r in struct)
    bm = random_rows(rng, n_masks, ["random", "all", "few", "random"])
    so = SimpleNamespace(scheduled_spec_decode_tokens=spec_tokens)
    from vllm.v1.core.sched.output import GrammarOutput

    go = GrammarOutput(struct, bm)
    ib = SimpleNamespace(req_ids=req_ids)
    return so, go, ib, n_logits


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("spec", [False, True])
def test_v1_replacement_matches_vllm_path(dtype, spec):
    rng = np.random.default_rng(0)
    so, go, ib, n = make_step(rng, spec)
    base = torch.randn(n, V, generator=torch.Generator().manual_seed(1)).to(dtype)
    ours, theirs = base.clone(), base.clone()
    sph.apply_grammar_bitmask(so, go, ib, ours)
    vllm_original()(so, go, ib, theirs)
    view = torch.int32 if dtype == torch.float32 else torch.int16
    assert torch.equal(ours.view(view), theirs.view(view))
    assert sph.stats["rows_masked"] > 0 and sph.stats["rows_skipped_all_allowed"] > 0
    assert torch.isneginf(ours.float()).any()


@pytest.mark.parametrize("spec", [False, True])
def test_bitmask_layout_matches_the_engines_fill(spec):
    """Rows each request starts at, for both engine layouts: the packed fill of vLLM 0.32 and
    structgate's batched fill, and 0.33's fixed block per request (its own apply_grammar_bitmask is
    checked against the hook above when the suite runs on 0.33, tests/test_vllm033.py)."""
    rng = np.random.default_rng(3)
    for layout, stride in (("packed", None), ("fixed", 4)):
        for _ in range(50):
            k = int(rng.integers(0, 6))
            counts = [1 + (int(rng.integers(0, 4)) if spec else 0) for _ in range(k)]
            total = sum(counts) if layout == "packed" else k * (stride if spec else 1)
            starts = sph.bitmask_layout(counts, total)
            if layout == "packed" or not spec:
                assert starts == list(np.cumsum([0] + counts)[:-1])
            else:
                assert starts == [i * stride for i in range(k)]
    with pytest.raises(ValueError, match="fits neither"):
        sph.bitmask_layout([2, 1], 5)


def test_patched_runner_global_is_ours():
    import vllm.v1.structured_output.utils as u
    import vllm.v1.worker.gpu_model_runner as r

    from structgate.plugin import ledger

    assert ledger.is_marked(u.apply_grammar_bitmask) and r.apply_grammar_bitmask is u.apply_grammar_bitmask
    names = {p.name for p in ledger.patches()}
    assert {"sampler-hook-v1-utils", "sampler-hook-v1-runner", "sampler-hook-v2", "sampler-guard",
            "sampler-hook-backend"} <= names


def test_all_allowed_rows_skipped_without_kernel():
    from vllm.v1.core.sched.output import GrammarOutput

    bm = np.full((2, W), -1, dtype=np.int32)
    bm[1, -1] = (1 << (V - 32 * (W - 1))) - 1  # bits beyond V cleared: still all allowed
    logits = torch.randn(2, V)
    before = logits.clone()
    sph.apply_grammar_bitmask(SimpleNamespace(scheduled_spec_decode_tokens={}), GrammarOutput(["a", "b"], bm),
                              SimpleNamespace(req_ids=["a", "b"]), logits)
    assert torch.equal(logits, before)
    assert sph.stats.get("kernel_launches", 0) == 0 and sph.stats["rows_skipped_all_allowed"] == 2


def test_all_forbidden_row_never_all_neg_inf(caplog):
    from vllm.v1.core.sched.output import GrammarOutput

    bm = np.zeros((2, W), dtype=np.int32)
    bm[0] = bool_to_bitmask(np.arange(V) % 7 == 0)
    logits = torch.randn(2, V)
    with caplog.at_level("WARNING", logger="structgate.plugin"):
        sph.apply_grammar_bitmask(SimpleNamespace(scheduled_spec_decode_tokens={}), GrammarOutput(["a", "b"], bm),
                                  SimpleNamespace(req_ids=["a", "b"]), logits)
    assert "request(s) b allows no token" in caplog.text
    assert torch.isfinite(logits[1]).all()  # left unmasked: softmax is finite
    assert not torch.isnan(torch.softmax(logits, -1)).any()
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == list(range(0, V, 7))


def test_classify_rows_partial_word_and_padding():
    allowed, forbidden = sph.classify_rows(np.array([[-1, 0xFF], [0, 0x100], [-1, -1]], dtype=np.int32), 40)
    assert allowed.tolist() == [True, False, True] and forbidden.tolist() == [False, True, False]
    # logits wider than the bitmask covers: never "all allowed"
    allowed, _ = sph.classify_rows(np.array([[-1]], dtype=np.int32), 40)
    assert allowed.tolist() == [False]


def test_min_tokens_grammar_eos_wins():
    """Field case vllm-min-tokens-vs-terminal-grammar: after 'true' only EOS is legal; min_tokens=5
    hides EOS. With our mask applied first, vLLM's min-tokens processor restores EOS: the row is not
    all -inf and EOS is sampled greedily."""
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.core.sched.output import GrammarOutput
    from vllm.v1.sample.logits_processor.builtin import MinTokensLogitsProcessor
    from vllm.v1.sample.logits_processor.interface import BatchUpdate

    eos = 2
    only_eos = np.zeros(V, dtype=bool)
    only_eos[eos] = True
    bm = bool_to_bitmask(only_eos)[None]
    logits = torch.randn(1, V)
    logits[0, eos] = -5.0  # the model prefers other tokens
    sph.apply_grammar_bitmask(SimpleNamespace(scheduled_spec_decode_tokens={}), GrammarOutput(["r"], bm),
                              SimpleNamespace(req_ids=["r"]), logits)
    params = SamplingParams(min_tokens=5, structured_outputs=StructuredOutputsParams(json={"type": "boolean"}))
    params._all_stop_token_ids = {eos}
    proc = MinTokensLogitsProcessor(None, torch.device("cpu"), False)
    proc.update_state(BatchUpdate(batch_size=1, removed=[], moved=[], added=[(0, params, [], [1, 1])]))
    out = proc.apply(logits)
    assert not torch.isneginf(out[0]).all()
    assert not torch.isnan(torch.softmax(out, -1)).any()
    assert int(out[0].argmax()) == eos


def test_sampler_guard_resets_dead_rows(monkeypatch):
    logits = torch.randn(3, V)
    rows = torch.tensor([0, 2])
    # the grammar allowed tokens {5}; bad_words then forbade 5 in row 2
    logits[0, :] = float("-inf")
    logits[0, 5] = 1.0
    logits[2, :] = float("-inf")
    sph._pending_rows = (rows, 3)

    def orig(self, lg, md, bonus):
        return lg

    monkeypatch.setitem(sph._ORIG, "apply_logits_processors", orig)
    md = SimpleNamespace(allowed_token_ids_mask=None, bad_words_token_ids={2: [[5]]}, logitsprocs=None)
    out = sph._apply_logits_processors(None, logits, md, False)
    assert torch.isfinite(out[2]).all() and (out[2] == 0).all()
    assert torch.isfinite(out[0]).sum() == 1  # live rows untouched
    assert sph.stats["guard_runs"] == 1 and sph._pending_rows is None
    # no risky processor in the batch: no guard pass
    sph._pending_rows = (rows, 3)
    logits[2, :] = float("-inf")
    out = sph._apply_logits_processors(None, logits, SimpleNamespace(allowed_token_ids_mask=None,
                                                                     bad_words_token_ids={}, logitsprocs=None), False)
    assert sph.stats["guard_runs"] == 1


def test_v2_rows_device_mapping():
    # 3 requests; cu_num_logits = [0, 3, 4, 6]; mask_stride 4 (up to 3 drafts + bonus)
    cu = torch.tensor([0, 3, 4, 6], dtype=torch.int32)
    mapping = torch.tensor([0 * 4 + 0, 0 * 4 + 2, 1 * 4 + 0, 1 * 4 + 1, 2 * 4 + 1], dtype=torch.int32)
    rows, active = sph.v2_rows(mapping, cu, 4)
    assert active.tolist() == [True, True, True, False, True]
    assert rows.tolist() == [0, 2, 3, 0, 5]


def test_off_and_foreign_backend_use_vllm_path(monkeypatch):
    rng = np.random.default_rng(3)
    so, go, ib, n = make_step(rng)
    logits = torch.randn(n, V)
    sph.set_backend_name("xgrammar")  # vLLM's own backend: untouched
    sph.apply_grammar_bitmask(so, go, ib, logits.clone())
    assert not sph.stats
    sph.set_backend_name("native")
    monkeypatch.setenv(sph.ENV_SAMPLER_HOOK, "0")
    sph.apply_grammar_bitmask(so, go, ib, logits.clone())
    assert not sph.stats
    monkeypatch.setenv(sph.ENV_SAMPLER_HOOK, "all")
    sph.set_backend_name("xgrammar")
    sph.apply_grammar_bitmask(so, go, ib, logits.clone())
    assert sph.stats.get("kernel_launches") == 1
