"""Plain-torch bitmask application: the oracle every other implementation is tested against, and
the CPU path of :func:`structgate.kernels.apply_token_bitmask_inplace`.

On CPU tensors the work is done through numpy views (no copy of the logits): the bitmask bytes are
unpacked with ``np.unpackbits(~bytes, bitorder="little")`` (1 byte per token, 1 = forbidden) and the
``-inf`` bit pattern of the logits dtype is written with ``np.copyto(where=...)`` on an integer view
of the logits (so bfloat16, which numpy lacks, works too). On other devices plain torch ops are used
(shift-and-mask unpacking, ``masked_fill_``). Both give identical bits.

Semantics (shared by every implementation; see the package docstring): for bitmask row ``i``
(logits row ``r = indices[i]``, or ``i`` without indices) and column ``t < vocab_size``, the logit
``logits[r, t]`` becomes ``-inf`` unless bit ``t % 32`` of word ``t // 32`` of the bitmask row is 1.
Columns the bitmask does not cover (``t >= 32 * width``) count as forbidden; columns
``>= vocab_size`` are never touched.

The work is done in row chunks so the temporary boolean mask stays below ~16 MiB whatever the batch.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["apply_token_bitmask_inplace_torch"]

#: bit positions 0..31 as int32 (the shift amounts of the unpack); cached per device
_SHIFTS: dict[torch.device, torch.Tensor] = {}

#: bools per chunk of the temporary forbidden mask (rows * vocab_size), ~16 MiB
_CHUNK_ELEMS = 1 << 24


def _shifts(device: torch.device) -> torch.Tensor:
    s = _SHIFTS.get(device)
    if s is None:
        s = torch.arange(32, dtype=torch.int32, device=device)
        _SHIFTS[device] = s
    return s


def forbidden_mask(bitmask_rows: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Unpack int32 bitmask rows into a bool "forbidden" mask.

    Parameters
    ----------
    bitmask_rows : torch.Tensor
        int32, shape ``(n, width)``.
    vocab_size : int
        Columns wanted; columns ``>= 32 * width`` are forbidden (True).

    Returns
    -------
    forbidden : torch.Tensor
        bool, shape ``(n, vocab_size)``; True where the token is not allowed.
    """
    n, width = bitmask_rows.shape
    covered = min(vocab_size, 32 * width)
    nwords = (covered + 31) // 32
    # bits: (n, nwords, 32) -> (n, 32 * nwords)
    bits = (bitmask_rows[:, :nwords, None] >> _shifts(bitmask_rows.device)) & 1
    allowed = bits.reshape(n, 32 * nwords)[:, :covered]
    forbidden = allowed == 0
    if covered < vocab_size:
        pad = torch.ones((n, vocab_size - covered), dtype=torch.bool, device=forbidden.device)
        forbidden = torch.cat([forbidden, pad], dim=1)
    return forbidden


#: integer view dtype and the -inf bit pattern of each logits dtype
_NEG_INF_BITS = {
    torch.float32: (torch.int32, np.int32(np.array(0xFF800000, dtype=np.uint32).view(np.int32))),
    torch.bfloat16: (torch.int16, np.int16(np.array(0xFF80, dtype=np.uint16).view(np.int16))),
    torch.float16: (torch.int16, np.int16(np.array(0xFC00, dtype=np.uint16).view(np.int16))),
}


def _apply_cpu_numpy(logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None,
                     vocab_size: int) -> None:
    int_dtype, neg_inf = _NEG_INF_BITS[logits.dtype]
    L = logits.view(int_dtype).numpy()  # (B, V) view with the logits' strides, writable
    bm = bitmask.numpy()
    n, width = bm.shape
    covered = min(vocab_size, 32 * width)
    nbytes = (covered + 7) // 8
    step = max(1, _CHUNK_ELEMS // max(1, 8 * nbytes))
    idx = None if indices is None else indices.numpy()
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        raw = np.ascontiguousarray(bm[lo:hi]).view(np.uint8)[:, :nbytes]
        # (hi-lo, covered) uint8 0/1 with 1 = forbidden, viewed as bool
        forb = np.unpackbits(~raw, axis=1, count=covered, bitorder="little").view(np.bool_)
        if idx is None:
            np.copyto(L[lo:hi, :covered], neg_inf, where=forb)
            if covered < vocab_size:
                L[lo:hi, covered:vocab_size] = neg_inf
        else:
            for i, r in enumerate(idx[lo:hi]):  # row by row: in place, duplicates intersect
                np.copyto(L[r, :covered], neg_inf, where=forb[i])
                if covered < vocab_size:
                    L[r, covered:vocab_size] = neg_inf


def apply_token_bitmask_inplace_torch(logits: torch.Tensor, bitmask: torch.Tensor,
                                      indices: torch.Tensor | None, vocab_size: int) -> None:
    """Set forbidden logits to ``-inf`` in place (arguments already validated by the dispatcher).

    Parameters
    ----------
    logits : torch.Tensor
        float32 / bfloat16 / float16, shape ``(B, V)``, any strides.
    bitmask : torch.Tensor
        int32, shape ``(B', width)``, same device as ``logits``.
    indices : torch.Tensor | None
        int64, shape ``(B',)``: logits row of each bitmask row (``None``: row ``i`` → row ``i``).
        Duplicates are allowed: every mask aimed at a row is applied (their intersection).
    vocab_size : int
        Number of leading logits columns governed by the mask, ``<= V``.
    """
    if bitmask.shape[0] == 0 or vocab_size == 0:
        return
    if logits.device.type == "cpu" and bitmask.device.type == "cpu" and (indices is None or indices.device.type == "cpu"):
        _apply_cpu_numpy(logits, bitmask, indices, vocab_size)
    else:
        _apply_torch_ops(logits, bitmask, indices, vocab_size)


def _apply_torch_ops(logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None,
                     vocab_size: int) -> None:
    """The device-agnostic path: plain torch ops (any device)."""
    n = bitmask.shape[0]
    step = max(1, _CHUNK_ELEMS // max(1, vocab_size))
    neg_inf = float("-inf")
    if indices is None:
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            forb = forbidden_mask(bitmask[lo:hi], vocab_size)
            logits[lo:hi, :vocab_size].masked_fill_(forb, neg_inf)
        return
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        idx = indices[lo:hi]
        forb = forbidden_mask(bitmask[lo:hi], vocab_size)
        # gather, mask, scatter back; index_put_ with accumulate=False is last-write-wins for
        # duplicate rows, so duplicates are merged first (rare: vLLM never sends them)
        uniq, inverse = torch.unique(idx, return_inverse=True)
        if uniq.numel() != idx.numel():
            merged = torch.zeros((uniq.numel(), vocab_size), dtype=torch.int32, device=forb.device)
            merged.index_add_(0, inverse, forb.to(torch.int32))
            forb, idx = merged > 0, uniq
        rows = logits.index_select(0, idx)[:, :vocab_size]
        rows.masked_fill_(forb, neg_inf)
        logits[idx, :vocab_size] = rows
