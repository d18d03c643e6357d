"""The packed token bitmask: one contract shared by every backend (XGrammar's and llguidance's layout).

A bitmask for ``batch`` rows and a logits width ``vocab_size`` is an ``int32`` array of shape
``(batch, ceil(vocab_size / 32))``; bit ``t % 32`` of word ``t // 32`` (least significant bit first)
is 1 when token ``t`` is allowed. A word of ``-1`` allows all 32 of its tokens. ``int32`` rather than
``uint32`` because older PyTorch lacks ``uint32`` (XGrammar ``matcher.py`` makes the same choice).

Backends only *fill rows* of a buffer the caller owns; the caller allocates it once
(:func:`allocate_bitmask`) and applies it to logits with :func:`structgate.kernels.apply_token_bitmask_inplace`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import BitmaskError

__all__ = ["BITMASK_DTYPE", "bitmask_shape", "allocate_bitmask", "reset_bitmask", "as_numpy_row",
           "bitmask_to_bool", "bool_to_bitmask", "allowed_ids"]

#: dtype of every bitmask word (``numpy.int32``; ``torch.int32`` for tensors)
BITMASK_DTYPE = np.int32


def bitmask_shape(batch: int, vocab_size: int) -> tuple[int, int]:
    """Shape ``(batch, ceil(vocab_size / 32))`` of a bitmask for ``vocab_size`` logits."""
    return (int(batch), (int(vocab_size) + 31) // 32)


def allocate_bitmask(batch: int, vocab_size: int, *, torch_tensor: bool = False) -> Any:
    """Allocate a bitmask with every token allowed (all words ``-1``).

    Returns
    -------
    bitmask : numpy.ndarray | torch.Tensor
        int32, shape ``(batch, ceil(vocab_size/32))``, C-contiguous, on CPU.
    """
    if torch_tensor:
        import torch

        return torch.full(bitmask_shape(batch, vocab_size), -1, dtype=torch.int32)
    return np.full(bitmask_shape(batch, vocab_size), -1, dtype=np.int32)


def reset_bitmask(bitmask: Any) -> None:
    """Set every word to ``-1`` (all allowed), in place."""
    if isinstance(bitmask, np.ndarray):
        bitmask.fill(-1)
    else:
        bitmask.fill_(-1)


def as_numpy_row(bitmask: Any, row: int, vocab_size: int) -> np.ndarray:
    """Validate a caller's bitmask buffer and return a writable numpy view of one row.

    Parameters
    ----------
    bitmask : numpy.ndarray | torch.Tensor
        int32, 2-D ``(batch, ceil(vocab_size/32))`` (1-D is taken as one row), CPU, row-contiguous.
    row : int
        Row to fill, ``0 <= row < batch``.
    vocab_size : int
        Logits width the backend was created for.

    Raises
    ------
    BitmaskError
        Wrong dtype, number of dimensions, width, device, or row out of range.
    """
    arr = bitmask
    if not isinstance(arr, np.ndarray):
        try:
            import torch
        except ImportError:  # pragma: no cover
            raise BitmaskError(f"bitmask must be a numpy array or torch tensor, got {type(bitmask).__name__}")
        if not isinstance(arr, torch.Tensor):
            raise BitmaskError(f"bitmask must be a numpy array or torch tensor, got {type(bitmask).__name__}")
        if arr.device.type != "cpu":
            raise BitmaskError(f"bitmask must be on CPU to be filled, got device {arr.device}")
        if arr.dtype != torch.int32:
            raise BitmaskError(f"bitmask dtype must be torch.int32, got {arr.dtype}")
        arr = arr.numpy()
    if arr.dtype != np.int32:
        raise BitmaskError(f"bitmask dtype must be int32, got {arr.dtype}")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise BitmaskError(f"bitmask must be 2-D (batch, ceil(vocab/32)), got shape {tuple(arr.shape)}")
    want = (vocab_size + 31) // 32
    if arr.shape[1] != want:
        raise BitmaskError(
            f"bitmask width must be ceil({vocab_size}/32) = {want} words, got shape {tuple(arr.shape)}")
    if not (0 <= row < arr.shape[0]):
        raise BitmaskError(f"bitmask row {row} out of range for batch {arr.shape[0]}")
    out = arr[row]
    if out.strides[0] != 4:
        raise BitmaskError("bitmask rows must be contiguous")
    return out


def bool_to_bitmask(allowed: np.ndarray) -> np.ndarray:
    """Pack a bool vector ``(V,)`` (True = allowed) into int32 words ``(ceil(V/32),)``."""
    allowed = np.asarray(allowed, dtype=bool)
    n = allowed.shape[-1]
    pad = (-n) % 32
    if pad:
        allowed = np.concatenate([allowed, np.zeros(allowed.shape[:-1] + (pad,), dtype=bool)], axis=-1)
    packed = np.packbits(allowed.reshape(allowed.shape[:-1] + (-1, 32)), axis=-1, bitorder="little")
    return packed.view(np.uint32).view(np.int32).reshape(allowed.shape[:-1] + (-1,))


def bitmask_to_bool(words: np.ndarray, vocab_size: int) -> np.ndarray:
    """Unpack int32 words ``(..., ceil(V/32))`` into a bool array ``(..., vocab_size)``."""
    words = np.ascontiguousarray(words, dtype=np.int32)
    bits = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little").astype(bool)
    return bits[..., :vocab_size]


def allowed_ids(words: np.ndarray, vocab_size: int) -> np.ndarray:
    """Sorted token ids whose bit is set in one bitmask row."""
    return np.flatnonzero(bitmask_to_bool(words, vocab_size))
