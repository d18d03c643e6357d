"""Triton bitmask application (the GPU path of :func:`structgate.kernels.apply_token_bitmask_inplace`).

One program per (row block × vocabulary block): it loads ``BLOCK_R × BLOCK_V/32`` int32 words,
unpacks them into ``BLOCK_R × BLOCK_V`` bits in registers (``(word >> arange(32)) & 1``) and
stores ``-inf`` through a masked store where the bit is 0. No ``[B, V]`` temporary is allocated; the
only memory traffic is the bitmask read and the writes of forbidden logits. Same semantics as
:mod:`structgate.kernels.torch_impl` (the oracle): columns beyond ``32 * width`` are forbidden, columns
``>= vocab_size`` untouched, any logits strides, bitmask rows scattered to logits rows by ``indices``.

The unpacking idea is XGrammar's ``apply_token_bitmask_inplace_triton.py`` (Apache-2.0); the
launch shape differs (a 2-D grid of row × vocab blocks instead of a persistent 1-D grid, so small
batches still fill the device, and several rows per program at large batch).

Runs on CPU tensors under ``TRITON_INTERPRET=1`` (set before triton is imported), which is how the
tests check it against the oracle without a GPU.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["apply_token_bitmask_inplace_triton", "launch_config"]


@triton.jit
def _apply_bitmask_kernel(
    logits_ptr,
    bitmask_ptr,
    indices_ptr,
    n_rows,
    vocab_size,
    width,
    logits_row_stride,
    logits_col_stride,
    bitmask_row_stride,
    HAS_INDICES: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    pid_r = tl.program_id(0)
    pid_v = tl.program_id(1)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)  # (BLOCK_R,) bitmask rows
    row_ok = rows < n_rows
    if HAS_INDICES:
        out_rows = tl.load(indices_ptr + rows, mask=row_ok, other=0).to(tl.int64)
    else:
        out_rows = rows.to(tl.int64)
    words = pid_v * (BLOCK_V // 32) + tl.arange(0, BLOCK_V // 32)  # (BLOCK_V/32,)
    packed = tl.load(
        bitmask_ptr + rows.to(tl.int64)[:, None] * bitmask_row_stride + words[None, :],
        mask=row_ok[:, None] & (words[None, :] < width),
        other=0,
    )  # (BLOCK_R, BLOCK_V/32) int32; words past the width read as 0 = forbidden
    bits = (packed[:, :, None] >> tl.arange(0, 32)[None, None, :]) & 1  # (BLOCK_R, BLOCK_V/32, 32)
    forbidden = tl.reshape(bits == 0, (BLOCK_R, BLOCK_V))
    cols = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)  # (BLOCK_V,)
    ptrs = logits_ptr + out_rows[:, None] * logits_row_stride + cols.to(tl.int64)[None, :] * logits_col_stride
    tl.store(ptrs, -float("inf"), mask=forbidden & row_ok[:, None] & (cols[None, :] < vocab_size))


def launch_config(n_rows: int, vocab_size: int) -> tuple[int, int, int]:
    """``(BLOCK_R, BLOCK_V, num_warps)`` for a launch: 4096 columns per program; at large batch
    several rows share a program so the grid stays a few programs per SM-wave deep."""
    block_v = 4096
    block_r = 1 if n_rows < 256 else 2
    return block_r, block_v, 4


def apply_token_bitmask_inplace_triton(logits: torch.Tensor, bitmask: torch.Tensor,
                                       indices: torch.Tensor | None, vocab_size: int) -> None:
    """Launch the kernel (arguments already validated by the dispatcher).

    Parameters
    ----------
    logits : torch.Tensor
        float32 / bfloat16 / float16, ``(B, V)``, any strides; CUDA (or CPU under TRITON_INTERPRET=1).
    bitmask : torch.Tensor
        int32, ``(B', width)``, unit column stride, same device.
    indices : torch.Tensor | None
        int32/int64 ``(B',)``, contiguous, same device; logits row of each bitmask row.
    vocab_size : int
        Leading logits columns governed by the mask (``<= V``).
    """
    n = bitmask.shape[0]
    if n == 0 or vocab_size == 0:
        return
    block_r, block_v, num_warps = launch_config(n, vocab_size)
    grid = (triton.cdiv(n, block_r), triton.cdiv(vocab_size, block_v))
    _apply_bitmask_kernel[grid](
        logits,
        bitmask,
        indices if indices is not None else bitmask,  # dummy pointer when HAS_INDICES is False
        n,
        vocab_size,
        bitmask.shape[1],
        logits.stride(0),
        logits.stride(1),
        bitmask.stride(0),
        HAS_INDICES=indices is not None,
        BLOCK_R=block_r,
        BLOCK_V=block_v,
        num_warps=num_warps,
    )
