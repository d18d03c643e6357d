"""Apply packed token bitmasks to logits, in place.

Implementations (one module each, imported only when chosen, so Triton stays optional):

* ``torch`` — :mod:`structgate.kernels.torch_impl`: plain torch ops, row-chunked. The oracle of the
  tests and the CPU path.
* ``triton`` — :mod:`structgate.kernels.triton_impl`: one program per row block × vocabulary block,
  bits unpacked in registers, no ``[B, V]`` temporary. The CUDA path. Also runs on CPU tensors under
  ``TRITON_INTERPRET=1`` (for tests).
* ``auto`` — ``triton`` when the logits are on a CUDA device and Triton imports, else ``torch``.

Operation (pseudo-code; ``W = bitmask.shape[1]``)::

    for i in range(bitmask.shape[0]):
        r = indices[i] if indices is not None else i
        for t in range(vocab_size):
            allowed = t < 32 * W and (bitmask[i, t // 32] >> (t % 32)) & 1
            if not allowed:
                logits[r, t] = -inf

Notes
-----
Padding: logits may be wider than the tokenizer (a padded lm_head). Columns not covered by the
bitmask (``t >= 32 * W``) are *forbidden* (a bitmask that does not mention a token does not allow it);
columns ``>= vocab_size`` are left untouched. A bitmask wider than the logits is fine (extra bits are
ignored).

Indices: ``indices[i]`` is the logits row of bitmask row ``i`` (a compact bitmask for the structured
rows of a mixed batch). Several bitmask rows may target one logits row: all of them apply.

Device: the bitmask may be on CPU while the logits are on CUDA; it is then copied
(``non_blocking=True``). Index range checks are done only for indices given on the CPU (list,
numpy, CPU tensor); CUDA index tensors are trusted (checking them would synchronise the stream).
"""
from __future__ import annotations

from typing import Any, Literal, Sequence

from ..errors import BitmaskError

__all__ = ["apply_token_bitmask_inplace", "IMPLEMENTATIONS", "triton_available"]

#: accepted values of ``impl``
IMPLEMENTATIONS = ("auto", "torch", "triton")

_TRITON_OK: bool | None = None


def triton_available() -> bool:
    """True when :mod:`structgate.kernels.triton_impl` imports (Triton installed)."""
    global _TRITON_OK
    if _TRITON_OK is None:
        try:
            from . import triton_impl  # noqa: F401

            _TRITON_OK = True
        except Exception:  # ImportError, or a triton that fails to initialise
            _TRITON_OK = False
    return _TRITON_OK


def _as_indices(indices: Any, n_masks: int, n_rows: int, device) -> "Any":
    import numpy as np
    import torch

    if isinstance(indices, torch.Tensor):
        if indices.dim() != 1:
            raise BitmaskError(f"indices must be 1-D, got shape {tuple(indices.shape)}")
        if indices.dtype not in (torch.int32, torch.int64):
            raise BitmaskError(f"indices dtype must be int32 or int64, got {indices.dtype}")
        on_cpu = indices.device.type == "cpu"
        t = indices
    else:
        arr = np.asarray(indices if not isinstance(indices, range) else list(indices))
        if arr.size == 0:
            arr = arr.astype(np.int64)
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise BitmaskError(f"indices must be a 1-D sequence of ints, got {arr.dtype} shape {arr.shape}")
        t = torch.from_numpy(arr.astype(np.int64, copy=False))
        on_cpu = True
    if t.shape[0] != n_masks:
        raise BitmaskError(f"indices has {t.shape[0]} entries but the bitmask has {n_masks} rows")
    if on_cpu and t.numel():
        lo, hi = int(t.min()), int(t.max())
        if lo < 0 or hi >= n_rows:
            raise BitmaskError(f"indices must be in [0, {n_rows}) (logits rows), got range [{lo}, {hi}]")
    if t.device != device:
        t = t.to(device, non_blocking=True)
    return t.contiguous()


def apply_token_bitmask_inplace(logits: Any, bitmask: Any, indices: Sequence[int] | Any | None = None,
                                vocab_size: int | None = None,
                                impl: Literal["auto", "torch", "triton"] = "auto") -> None:
    """Set every logit whose token the bitmask forbids to ``-inf``, in place.

    Parameters
    ----------
    logits : torch.Tensor
        float32, bfloat16 or float16, shape ``(B, V)`` (1-D = one row); any strides (a slice of a
        wider buffer, a transposed view). Modified in place.
    bitmask : torch.Tensor | numpy.ndarray
        int32, shape ``(B', ceil(V'/32))`` (1-D = one row); bit ``t % 32`` of word ``t // 32`` set =
        token ``t`` allowed (:mod:`structgate.bitmask`). ``V'`` may differ from ``V``.
    indices : sequence of int | numpy.ndarray | torch.Tensor | None, default: None
        ``(B',)`` int: logits row that bitmask row ``i`` applies to. ``None``: row ``i`` → row ``i``
        and then ``B'`` must equal ``B``.
    vocab_size : int | None, default: None
        Leading logits columns the mask governs (``<= V``); default ``V``. Columns in
        ``[32 * width, vocab_size)`` are forbidden, columns ``>= vocab_size`` untouched.
    impl : {"auto", "torch", "triton"}, default: "auto"
        ``auto`` = Triton on CUDA tensors (if installed), torch otherwise.

    Raises
    ------
    BitmaskError
        Wrong dtype / rank / device of ``logits``, ``bitmask`` or ``indices``; ``B' != B`` without
        indices; an index out of range; ``vocab_size`` out of ``[0, V]``; an unknown ``impl``;
        ``impl="triton"`` without Triton or on CPU tensors outside ``TRITON_INTERPRET=1``.
    """
    import numpy as np
    import torch

    if impl not in IMPLEMENTATIONS:
        raise BitmaskError(f"impl must be one of {IMPLEMENTATIONS}, got {impl!r}")
    if not isinstance(logits, torch.Tensor):
        raise BitmaskError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise BitmaskError(f"logits dtype must be float32, bfloat16 or float16, got {logits.dtype}")
    if logits.dim() == 1:
        logits = logits.unsqueeze(0)
    if logits.dim() != 2:
        raise BitmaskError(f"logits must be 2-D (batch, vocab), got shape {tuple(logits.shape)}")
    if isinstance(bitmask, np.ndarray):
        if bitmask.dtype != np.int32:
            raise BitmaskError(f"bitmask dtype must be int32, got {bitmask.dtype}")
        bitmask = torch.from_numpy(bitmask)
    if not isinstance(bitmask, torch.Tensor):
        raise BitmaskError(f"bitmask must be a torch.Tensor or numpy array, got {type(bitmask).__name__}")
    if bitmask.dtype != torch.int32:
        raise BitmaskError(f"bitmask dtype must be torch.int32, got {bitmask.dtype}")
    if bitmask.dim() == 1:
        bitmask = bitmask.unsqueeze(0)
    if bitmask.dim() != 2:
        raise BitmaskError(f"bitmask must be 2-D (batch, ceil(vocab/32)), got shape {tuple(bitmask.shape)}")
    B, V = logits.shape
    n_masks = bitmask.shape[0]
    if vocab_size is None:
        vocab_size = V
    vocab_size = int(vocab_size)
    if not 0 <= vocab_size <= V:
        raise BitmaskError(f"vocab_size must be in [0, {V}] (the logits width), got {vocab_size}")
    if bitmask.device != logits.device:
        if bitmask.device.type != "cpu":
            raise BitmaskError(f"bitmask is on {bitmask.device} but logits are on {logits.device}")
        bitmask = bitmask.to(logits.device, non_blocking=True)
    if bitmask.stride(1) != 1:
        bitmask = bitmask.contiguous()
    if indices is None:
        if n_masks != B:
            raise BitmaskError(f"bitmask has {n_masks} rows but logits have {B}; pass indices to map them")
        idx = None
    else:
        idx = _as_indices(indices, n_masks, B, logits.device)

    use_triton = impl == "triton" or (impl == "auto" and logits.is_cuda and triton_available())
    if use_triton:
        if not triton_available():
            raise BitmaskError("impl='triton' needs triton installed: pip install 'structgate[triton]'")
        import os

        if not logits.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise BitmaskError("impl='triton' needs CUDA tensors (or TRITON_INTERPRET=1 set before "
                               "triton is imported, for CPU tests)")
        from .triton_impl import apply_token_bitmask_inplace_triton

        apply_token_bitmask_inplace_triton(logits, bitmask, idx, vocab_size)
    else:
        from .torch_impl import apply_token_bitmask_inplace_torch

        apply_token_bitmask_inplace_torch(logits, bitmask, idx, vocab_size)
