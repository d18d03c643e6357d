"""Bitmask application on CPU (pytest-benchmark): structgate's torch path vs XGrammar's C++ CPU
kernel, in the same run, same inputs.

Run: ``.venv/bin/pytest bench/test_bench_kernels.py --benchmark-columns=min,median,mean,rounds``

Shapes: vocabulary 128,256 (Llama 3) and 151,936 (Qwen2, padded lm_head); batch 1, 16, 64; float32
and bfloat16 logits; masks with 30 % of the tokens allowed (random), the worst case for a
branch-per-word kernel. With ``indices`` (half the rows structured) as vLLM sends them. Each case
checks both kernels agree bit for bit with structgate's torch oracle before timing.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from structgate.bitmask import bool_to_bitmask
from structgate.kernels import apply_token_bitmask_inplace

xgr_kernels = pytest.importorskip("xgrammar.kernels.apply_token_bitmask_inplace_cpu")

CASES = [(128_256, 1), (128_256, 16), (128_256, 64), (151_936, 64)]


def _inputs(vocab: int, batch: int, dtype: torch.dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    bm = torch.from_numpy(bool_to_bitmask(rng.random((batch, vocab)) < 0.3))
    logits = torch.from_numpy(rng.standard_normal((batch, vocab), dtype=np.float32)).to(dtype)
    return logits, bm


def _check_agree(logits, bm, indices):
    a, b = logits.clone(), logits.clone()
    apply_token_bitmask_inplace(a, bm, indices=indices, impl="torch")
    if indices is None:
        xgr_kernels.apply_token_bitmask_inplace_cpu(b, bm)
    else:  # XGrammar's indices address logits and bitmask rows alike: scatter the compact rows first
        full = torch.full((logits.shape[0], bm.shape[1]), -1, dtype=torch.int32)
        full[indices] = bm
        xgr_kernels.apply_token_bitmask_inplace_cpu(b, full, indices=indices)
    assert torch.equal(a.float(), b.float())


@pytest.mark.parametrize("vocab,batch", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("impl", ["structgate-torch", "xgrammar-cpu"])
def test_apply_bitmask_cpu(benchmark, impl, vocab, batch, dtype):
    logits, bm = _inputs(vocab, batch, dtype)
    _check_agree(logits, bm, None)
    work = logits.clone()
    if impl == "structgate-torch":
        benchmark(apply_token_bitmask_inplace, work, bm, impl="torch")
    else:
        benchmark(xgr_kernels.apply_token_bitmask_inplace_cpu, work, bm)
    benchmark.extra_info.update(vocab=vocab, batch=batch, dtype=str(dtype))


@pytest.mark.parametrize("impl", ["structgate-torch", "xgrammar-cpu"])
def test_apply_bitmask_cpu_indices(benchmark, impl):
    """vLLM's shape: 64 logits rows, 32 structured (compact bitmask + indices for structgate; the
    scattered full-height bitmask XGrammar needs)."""
    vocab, batch = 128_256, 64
    logits, bm = _inputs(vocab, batch // 2, torch.float32, seed=1)
    logits = torch.randn(batch, vocab)
    idx = list(range(0, batch, 2))
    _check_agree(logits, bm, idx)
    work = logits.clone()
    if impl == "structgate-torch":
        benchmark(apply_token_bitmask_inplace, work, bm, indices=idx, impl="torch")
    else:
        full = torch.full((batch, bm.shape[1]), -1, dtype=torch.int32)
        full[idx] = bm
        benchmark(xgr_kernels.apply_token_bitmask_inplace_cpu, work, full, indices=idx)
