"""structgate.kernels: the torch path against an independent numpy oracle, the Triton kernel (run on
CPU tensors under TRITON_INTERPRET=1, in a subprocess) against the torch path bit for bit, and the
typed errors of the dispatcher."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from structgate.bitmask import bitmask_to_bool, bool_to_bitmask
from structgate.errors import BitmaskError
from structgate.kernels import apply_token_bitmask_inplace

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
ODD_VOCABS = [128_001, 151_936, 262_145]


def numpy_oracle(logits: torch.Tensor, bitmask: np.ndarray, indices, vocab_size: int) -> torch.Tensor:
    """Expected result, computed with numpy bit unpacking (independent of the torch implementation)."""
    out = logits.detach().clone()
    rows = range(bitmask.shape[0]) if indices is None else list(indices)
    covered = min(vocab_size, 32 * bitmask.shape[1])
    for i, r in enumerate(rows):
        forb = np.ones(vocab_size, dtype=bool)
        forb[:covered] = ~bitmask_to_bool(bitmask[i], covered)
        out[r, :vocab_size][torch.from_numpy(forb)] = float("-inf")
    return out


def random_bitmask(n: int, width: int, seed: int, all_allowed=(), all_forbidden=()) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bm = rng.integers(-(2**31), 2**31, size=(n, width), dtype=np.int64).astype(np.int32)
    for r in all_allowed:
        bm[r] = -1
    for r in all_forbidden:
        bm[r] = 0
    return bm


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (so -inf / NaN payloads / signed zeros all count)."""
    view = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[a.dtype]
    return a.dtype == b.dtype and torch.equal(a.contiguous().view(view), b.contiguous().view(view))


# ------------------------------------------------------------------------------------------ torch
@pytest.mark.parametrize("vocab", ODD_VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_matches_numpy_oracle_odd_vocab(vocab, dtype):
    width = (vocab + 31) // 32
    bm = random_bitmask(4, width, seed=vocab, all_allowed=[1], all_forbidden=[2])
    logits = torch.randn(4, vocab, generator=torch.Generator().manual_seed(1)).to(dtype)
    want = numpy_oracle(logits, bm, None, vocab)
    apply_token_bitmask_inplace(logits, bm, impl="torch")
    assert bits_equal(logits, want)
    assert torch.isneginf(logits[2]).all()
    assert not torch.isinf(logits[1]).any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_strided_logits_and_indices(dtype):
    vocab = 151_936
    width = (vocab + 31) // 32
    bm = random_bitmask(3, width, seed=7, all_forbidden=[0])
    buf = torch.randn(6, vocab + 64, generator=torch.Generator().manual_seed(2)).to(dtype)
    logits = buf[:, 32:32 + vocab]  # row stride vocab+64, storage offset
    before = buf.clone()
    want = numpy_oracle(logits, bm, [5, 1, 3], vocab)
    apply_token_bitmask_inplace(logits, bm, indices=torch.tensor([5, 1, 3], dtype=torch.int32), impl="torch")
    assert bits_equal(logits, want)
    # nothing outside the view moved, rows without a mask untouched
    assert bits_equal(buf[:, :32], before[:, :32]) and bits_equal(buf[:, 32 + vocab:], before[:, 32 + vocab:])
    for r in (0, 2, 4):
        assert bits_equal(buf[r], before[r])


def test_torch_transposed_logits_column_stride():
    vocab = 1000
    bm = random_bitmask(3, (vocab + 31) // 32, seed=3)
    base = torch.randn(vocab, 3)
    logits = base.t()  # (3, vocab), strides (1, 3)
    want = numpy_oracle(logits, bm, None, vocab)
    apply_token_bitmask_inplace(logits, bm)
    assert bits_equal(logits, want)


def test_padding_columns_forbidden_and_tail_untouched():
    # logits wider than the bitmask covers: uncovered columns are forbidden
    n_tokens, width_logits = 100, 160
    bm = np.full((2, (n_tokens + 31) // 32), -1, dtype=np.int32)  # covers 128 columns
    logits = torch.zeros(2, width_logits)
    apply_token_bitmask_inplace(logits, bm)
    assert not torch.isinf(logits[:, :128]).any()
    assert torch.isneginf(logits[:, 128:]).all()
    # explicit vocab_size: columns beyond it are never touched
    logits = torch.zeros(2, width_logits)
    apply_token_bitmask_inplace(logits, np.zeros_like(bm), vocab_size=150)
    assert torch.isneginf(logits[:, :150]).all() and (logits[:, 150:] == 0).all()
    # logits narrower than the bitmask: extra bits ignored
    logits = torch.zeros(1, 40)
    allowed = np.zeros(64, dtype=bool)
    allowed[[3, 39, 50]] = True
    apply_token_bitmask_inplace(logits, bool_to_bitmask(allowed)[None])
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == [3, 39]


def test_duplicate_indices_intersect():
    vocab = 64
    a = np.zeros(vocab, dtype=bool)
    a[:40] = True
    b = np.zeros(vocab, dtype=bool)
    b[20:] = True
    bm = np.stack([bool_to_bitmask(a), bool_to_bitmask(b)])
    logits = torch.zeros(2, vocab)
    apply_token_bitmask_inplace(logits, bm, indices=[1, 1])
    assert torch.isfinite(logits[1]).nonzero().flatten().tolist() == list(range(20, 40))
    assert (logits[0] == 0).all()


def test_many_rows_chunked(monkeypatch):
    from structgate.kernels import torch_impl

    monkeypatch.setattr(torch_impl, "_CHUNK_ELEMS", 3 * 1000)  # force 3-row chunks
    bm = random_bitmask(10, 32, seed=5, all_forbidden=[4])
    logits = torch.randn(12, 1000)
    idx = [11, 0, 2, 3, 5, 7, 6, 8, 9, 1]
    want = numpy_oracle(logits, bm, idx, 1000)
    apply_token_bitmask_inplace(logits, bm, indices=idx)
    assert bits_equal(logits, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_agnostic_torch_ops_path_matches_oracle(dtype):
    """The plain-torch path (used off-CPU without Triton) gives the same bits as the numpy CPU path."""
    from structgate.kernels import torch_impl

    vocab = 151_936
    width = (vocab + 31) // 32 - 2  # logits wider than the bitmask: padding forbidden
    bm = random_bitmask(4, width, seed=11, all_allowed=[0], all_forbidden=[3])
    buf = torch.randn(5, vocab + 10, generator=torch.Generator().manual_seed(4)).to(dtype)
    a = buf[:, :vocab].clone()
    b = buf[:, :vocab]
    idx = torch.tensor([4, 0, 2, 2])
    torch_impl._apply_torch_ops(a, torch.from_numpy(bm), idx, vocab - 5)
    apply_token_bitmask_inplace(b, bm, indices=idx, vocab_size=vocab - 5, impl="torch")
    assert bits_equal(a, b)
    assert torch.isneginf(a[2, : vocab - 5].float()).all()  # row 2 got an all-forbidden mask
    assert not torch.isinf(a[2, vocab - 5:].float()).any()  # beyond vocab_size untouched


def test_auto_uses_torch_on_cpu_and_empty_inputs():
    logits = torch.randn(2, 70)
    bm = random_bitmask(2, 3, seed=9)
    want = numpy_oracle(logits, bm, None, 70)
    apply_token_bitmask_inplace(logits, torch.from_numpy(bm), impl="auto")
    assert bits_equal(logits, want)
    empty = torch.randn(3, 70)
    before = empty.clone()
    apply_token_bitmask_inplace(empty, np.zeros((0, 3), np.int32), indices=[])
    assert bits_equal(empty, before)


@pytest.mark.parametrize("bad, match", [
    (dict(logits=torch.zeros(2, 64, dtype=torch.float64)), "logits dtype"),
    (dict(logits=torch.zeros(2, 2, 64)), "2-D"),
    (dict(bitmask=np.zeros((2, 2), np.int64)), "int32"),
    (dict(bitmask=torch.zeros(2, 2, dtype=torch.int64)), "int32"),
    (dict(bitmask=np.zeros((3, 2), np.int32)), "pass indices"),
    (dict(indices=[0, 2]), r"\[0, 2\)"),
    (dict(indices=[0, -1]), r"\[0, 2\)"),
    (dict(indices=[0]), "entries"),
    (dict(indices=[[0, 1]]), "1-D"),
    (dict(vocab_size=65), "vocab_size"),
    (dict(impl="cuda"), "impl"),
    (dict(logits=[[0.0]]), "torch.Tensor"),
])
def test_typed_errors(bad, match):
    kw = dict(logits=torch.zeros(2, 64), bitmask=np.zeros((2, 2), np.int32), indices=None, vocab_size=None,
              impl="torch")
    kw.update(bad)
    with pytest.raises(BitmaskError, match=match):
        apply_token_bitmask_inplace(**kw)


def test_triton_on_cpu_without_interpreter_is_a_typed_error():
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("interpreter enabled in this process")
    with pytest.raises(BitmaskError, match="CUDA"):
        apply_token_bitmask_inplace(torch.zeros(1, 64), np.zeros((1, 2), np.int32), impl="triton")


# ------------------------------------------------------------------------ triton (interpreter)
_INTERP_SCRIPT = textwrap.dedent(r"""
    import json, os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import numpy as np, torch
    from structgate.kernels import apply_token_bitmask_inplace

    VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}
    results = []

    def check(name, logits_factory, bm, indices=None, vocab_size=None):
        a = logits_factory(); b = logits_factory()
        apply_token_bitmask_inplace(a, bm, indices=indices, vocab_size=vocab_size, impl="torch")
        apply_token_bitmask_inplace(b, bm, indices=indices, vocab_size=vocab_size, impl="triton")
        v = VIEW[a.dtype]
        same = torch.equal(a.contiguous().view(v), b.contiguous().view(v))
        n_inf = int(torch.isneginf(b.float()).sum())
        results.append(dict(name=name, same=bool(same), n_inf=n_inf))

    rng = np.random.default_rng(0)
    def rbm(n, width, allowed=(), forbidden=()):
        bm = rng.integers(-2**31, 2**31, size=(n, width), dtype=np.int64).astype(np.int32)
        for r in allowed: bm[r] = -1
        for r in forbidden: bm[r] = 0
        return torch.from_numpy(bm)

    for vocab in (128001, 151936, 262145):
        width = (vocab + 31) // 32
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            bm = rbm(3, width, allowed=[1], forbidden=[2])
            base = torch.randn(3, vocab, generator=torch.Generator().manual_seed(vocab)).to(dtype)
            check(f"plain-{vocab}-{dtype}", lambda: base.clone(), bm)
        # strided logits (row stride wider than vocab, storage offset) + int32 indices
        bm = rbm(2, width, forbidden=[1])
        wide = torch.randn(4, vocab + 96, generator=torch.Generator().manual_seed(1))
        check(f"strided-idx32-{vocab}", lambda: wide.clone()[:, 32:32 + vocab], bm,
              indices=torch.tensor([3, 0], dtype=torch.int32))
        # list indices (int64 after conversion), bf16, padding: logits wider than the bitmask
        bm = rbm(2, width - 3, allowed=[0])
        pad_base = torch.randn(3, vocab).to(torch.bfloat16)
        check(f"padded-list-{vocab}", lambda: pad_base.clone(), bm, indices=[2, 1])
        # explicit vocab_size smaller than the logits: tail untouched
        check(f"vocab_size-{vocab}", lambda: torch.zeros(2, vocab), rbm(2, width), vocab_size=vocab - 1000)
    # transposed logits (column stride != 1), narrow vocab
    tbase = torch.randn(1000, 3)
    check("transposed", lambda: tbase.clone().t(), rbm(3, 32))
    # more rows than one block row (BLOCK_R = 2 path), duplicates and all-forbidden rows
    mbase = torch.randn(300, 200)
    check("many-rows", lambda: mbase.clone(), rbm(300, 7, allowed=[0, 5], forbidden=[3, 299]))
    check("dup-indices", lambda: mbase[:4].clone(), rbm(3, 7), indices=[1, 1, 3])
    json.dump(results, sys.stdout)
""")


def test_triton_interpreter_matches_torch_bit_for_bit():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", _INTERP_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) >= 20
    bad = [r["name"] for r in results if not r["same"]]
    assert not bad, f"triton differs from the torch oracle on: {bad}"
    # the cases really mask something (an all-forbidden row alone gives >= 128k -inf)
    assert all(r["n_inf"] > 0 for r in results)
