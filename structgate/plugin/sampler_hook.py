"""Worker side: apply structured-output masks with structgate's kernel.

vLLM 0.32 applies the engine's bitmask in the worker right before sampling:

* V1 model runner (``GPUModelRunner.sample_tokens``, inherited by the CPU runner): the module
  global ``apply_grammar_bitmask`` of ``vllm.v1.worker.gpu_model_runner`` (from
  ``vllm.v1.structured_output.utils``), which scatters the compact bitmask into a full
  ``[num_logits, W]`` tensor and calls XGrammar's kernel;
* the newer runner (``vllm.v1.worker.gpu``): ``StructuredOutputsWorker.apply_grammar_bitmask``
  with its own Triton kernel resolving rows from the device ``cu_num_logits``.

For structgate backends this hook replaces both with :func:`structgate.kernels.apply_token_bitmask_inplace`
on the *compact* bitmask plus row indices (no scattered copy), at the same point of the step, so
vLLM's order is kept: masks first, then penalties / bad words / min-tokens / temperature / top-k /
top-p inside the sampler; logprobs keep vLLM's semantics (computed by the sampler from the logits
it receives, i.e. the masked logits, exactly as with vLLM's own path).

Rows are classified on the host before the kernel runs (``classify_rows``):

* **all allowed** (every token ``< V`` allowed: an unconstrained position, a terminated grammar,
  a state that allows everything) — skipped, no kernel work;
* **all forbidden** (no token allowed: a grammar with no legal continuation) — *not* applied, so the
  row never reaches softmax as all ``-inf`` (NaN). The sampled token is then rejected by the
  grammar in the engine core, which fails that request (``FINISHED_ERROR``, with the clear log line
  of :mod:`structgate.plugin.scheduler_hook`) while the batch goes on. A warning names the request.
* the rest go to the kernel in one launch.

After the sampler's logits processors, a row of a structured request can still end up all ``-inf``
when another processor forbids the grammar's only tokens (``bad_words``, ``allowed_token_ids``,
``logit_bias``). vLLM 0.32 already restores the stop tokens that ``min_tokens`` hides when that
empties a structured row (field case ``vllm-min-tokens-vs-terminal-grammar``: the grammar's EOS
wins). For the other processors the hook's sampler guard (``Sampler.apply_logits_processors``)
resets such a row to 0 (uniform) instead of letting softmax produce NaN; the token it samples is
rejected by the grammar and the request fails cleanly. The guard only runs when such a processor
is active in the batch.

Environment
-----------
``STRUCTGATE_SAMPLER_HOOK``: ``1`` (default) = on for structgate backends, ``0`` = off (vLLM's path),
``all`` = on for every structured-output backend (benchmarks). Read at call time.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Sequence

import numpy as np

__all__ = ["ENV_SAMPLER_HOOK", "hook_mode", "set_backend_name", "classify_rows", "bitmask_layout",
           "apply_grammar_bitmask", "apply_grammar_bitmask_v2", "v2_mapping", "v2_rows", "guard_dead_rows",
           "install", "stats"]

logger = logging.getLogger("structgate.plugin")

ENV_SAMPLER_HOOK = "STRUCTGATE_SAMPLER_HOOK"

#: counters (tests, benchmarks)
stats: dict[str, int] = {}

#: the structured-output backend name of this worker process (set by the WorkerBase patch)
_BACKEND_NAME: str | None = None

#: logits rows masked in this step (device tensor) for the sampler guard; cleared after use
_pending_rows: Any = None

_ORIG: dict[str, Any] = {}

#: backend name -> is a structgate backend (registry lookups cached)
_IS_SG: dict[str, bool] = {}


def _count(key: str, n: int = 1) -> None:
    stats[key] = stats.get(key, 0) + n


def _record(event: str, n: int) -> None:
    """Append a counter line to ``$STRUCTGATE_STATS_FILE`` (the bridge's format; e2e tests)."""
    if os.environ.get("STRUCTGATE_STATS_FILE"):
        from .bridge import record

        record(event, "sampler-hook", n)


def hook_mode() -> str:
    """``"on"``, ``"off"`` or ``"all"`` from ``STRUCTGATE_SAMPLER_HOOK``."""
    v = os.environ.get(ENV_SAMPLER_HOOK, "1").strip().lower()
    if v in ("0", "false", "no", "off"):
        return "off"
    return "all" if v == "all" else "on"


def set_backend_name(name: str | None) -> None:
    """Record this worker's structured-output backend (done automatically at worker start)."""
    global _BACKEND_NAME
    _BACKEND_NAME = name


def _active() -> bool:
    mode = hook_mode()
    if mode == "off":
        return False
    if mode == "all":
        return True
    if not _BACKEND_NAME:
        return False
    hit = _IS_SG.get(_BACKEND_NAME)
    if hit is None:
        try:
            from .patches import is_structgate_name
        except ImportError:  # pragma: no cover
            return False
        hit = _IS_SG[_BACKEND_NAME] = bool(is_structgate_name(_BACKEND_NAME))
    return hit


# -- row classification ---------------------------------------------------------------------------
def classify_rows(bitmask: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Which rows allow every token and which allow none, among ids ``0 .. vocab_size-1``.

    Parameters
    ----------
    bitmask : numpy.ndarray
        int32 ``(n, W)``.
    vocab_size : int
        Logits width; bits beyond it are ignored, columns beyond ``32 * W`` count as forbidden.

    Returns
    -------
    all_allowed, all_forbidden : numpy.ndarray
        bool ``(n,)`` each.
    """
    n, width = bitmask.shape
    covered = min(vocab_size, 32 * width)
    full_words, rem = divmod(covered, 32)
    if n == 0:
        return np.zeros(0, bool), np.zeros(0, bool)
    body = bitmask[:, :full_words]
    allowed = (body == -1).all(axis=1) if full_words else np.ones(n, bool)
    forbidden = (body == 0).all(axis=1) if full_words else np.ones(n, bool)
    if rem:
        tail_mask = np.int64((1 << rem) - 1)
        tail = bitmask[:, full_words].astype(np.int64) & tail_mask
        allowed &= tail == tail_mask
        forbidden &= tail == 0
    if covered < vocab_size:  # logits wider than the bitmask: uncovered columns are forbidden
        allowed[:] = False
    return allowed, forbidden


def _warn_empty(req_ids: Sequence[str]) -> None:
    _count("rows_all_forbidden", len(req_ids))
    _record("hook_rows_all_forbidden", len(req_ids))
    logger.warning("structgate: the grammar of request(s) %s allows no token at this step; the mask is not "
                   "applied (no all -inf row reaches softmax) and the engine fails the request when it "
                   "rejects the sampled token", ", ".join(sorted(set(req_ids))))


# -- V1 model runner ------------------------------------------------------------------------------
def bitmask_layout(counts: Sequence[int], total_rows: int) -> list[int]:
    """First bitmask row of each structured request, for the two layouts vLLM's engine produces.

    vLLM 0.32's fill (and structgate's batched fill) packs ``1 + len(draft)`` rows per request back
    to back; vLLM 0.33's gives every request a fixed block of ``mask_stride = 1 +
    num_speculative_tokens`` rows (``total_rows // len(counts)``; its own
    ``apply_grammar_bitmask`` reads it so). The two coincide when every request has the longest
    draft; otherwise the packed total ``sum(counts)`` is smaller than ``len(counts) * mask_stride``,
    so the row count tells them apart.

    Parameters
    ----------
    counts : sequence of int
        Rows each request uses this step (``1 + len(draft)``), in bitmask order.
    total_rows : int
        The bitmask's row count ``M``.

    Returns
    -------
    list[int]
        Start row of each request.

    Raises
    ------
    ValueError
        ``total_rows`` fits neither layout.
    """
    if total_rows == sum(counts):
        out, cum = [], 0
        for n in counts:
            out.append(cum)
            cum += n
        return out
    k = len(counts)
    if k and total_rows % k == 0 and total_rows // k >= max(counts):
        stride = total_rows // k
        return [i * stride for i in range(k)]
    raise ValueError(f"grammar bitmask of {total_rows} rows fits neither the packed layout "
                     f"({sum(counts)} rows) nor a fixed block per request ({k} requests)")


def apply_grammar_bitmask(scheduler_output: Any, grammar_output: Any, input_batch: Any, logits: Any) -> None:
    """Replacement of ``vllm.v1.structured_output.utils.apply_grammar_bitmask`` (same arguments).

    ``grammar_output.grammar_bitmask`` is int32 ``(M, W)``, the rows of each structured request in
    ``grammar_output.structured_output_request_ids`` order (layout: :func:`bitmask_layout`);
    ``logits`` is ``(num_logits, V)`` with each request's spec positions consecutive
    (``input_batch.req_ids`` order). Masked logits become ``-inf`` in place.
    """
    global _pending_rows
    if not _active():
        return _ORIG["apply_grammar_bitmask"](scheduler_output, grammar_output, input_batch, logits)
    from ..kernels import apply_token_bitmask_inplace

    _pending_rows = None
    bitmask = np.asarray(grammar_output.grammar_bitmask)
    spec_tokens = scheduler_output.scheduled_spec_decode_tokens
    struct_ids = set(grammar_output.structured_output_request_ids)
    logit_row: dict[str, int] = {}
    offset = 0
    for b, rid in enumerate(input_batch.req_ids):
        if rid in struct_ids:
            logit_row[rid] = b + offset
        offset += len(spec_tokens.get(rid, ()))
    src: list[int] = []
    dst: list[int] = []
    owner: list[str] = []
    ids = grammar_output.structured_output_request_ids
    counts = [1 + len(spec_tokens.get(rid, ())) for rid in ids]
    try:
        starts = bitmask_layout(counts, int(bitmask.shape[0]))
    except ValueError as e:  # a layout this hook does not know: vLLM's own function reads it
        _count("layout_fallbacks")
        logger.warning("structgate: sampler hook falls back to vLLM's apply_grammar_bitmask: %s", e)
        return _ORIG["apply_grammar_bitmask"](scheduler_output, grammar_output, input_batch, logits)
    for rid, n, cum in zip(ids, counts, starts):
        li = logit_row.get(rid)
        if li is not None:
            src.extend(range(cum, cum + n))
            dst.extend(range(li, li + n))
            owner.extend([rid] * n)
    if not src:
        return
    src_a = np.asarray(src, dtype=np.int64)
    dst_a = np.asarray(dst, dtype=np.int64)
    vocab = int(logits.shape[-1])
    sub = bitmask[src_a] if len(src_a) != bitmask.shape[0] or (src_a != np.arange(len(src_a))).any() else bitmask
    allowed, forbidden = classify_rows(sub, vocab)
    if forbidden.any():
        _warn_empty([owner[i] for i in np.flatnonzero(forbidden)])
    keep = ~(allowed | forbidden)
    n_keep = int(keep.sum())
    _count("rows_skipped_all_allowed", int(allowed.sum()))
    if n_keep == 0:
        _pending_rows = None
        return
    if n_keep != len(keep):
        sub, dst_a = sub[keep], dst_a[keep]
    import torch

    bm_t = torch.from_numpy(np.ascontiguousarray(sub))
    idx_t = torch.from_numpy(dst_a)
    if logits.device.type != "cpu":
        bm_t = bm_t.pin_memory() if torch.cuda.is_available() else bm_t
        bm_t = bm_t.to(logits.device, non_blocking=True)
        idx_t = idx_t.to(logits.device, non_blocking=True)
    apply_token_bitmask_inplace(logits, bm_t, indices=idx_t)
    _record("hook_masked_rows", n_keep)
    _count("rows_masked", n_keep)
    _count("kernel_launches")
    _pending_rows = (idx_t, int(logits.shape[0]))


# -- newer runner (vllm.v1.worker.gpu) ------------------------------------------------------------
def v2_rows(mapping: Any, cu_num_logits: Any, mask_stride: int):
    """Resolve the newer runner's ``req_idx * mask_stride + position`` mapping to logits rows on
    the device (no host sync), as its kernel does.

    Returns
    -------
    rows : torch.Tensor
        int64 ``(M,)``: logits row of each bitmask row (0 for inactive positions).
    active : torch.Tensor
        bool ``(M,)``: the position exists in this step (``position < num logits of the request``).
    """
    import torch

    m = mapping.to(torch.int64)
    req = torch.div(m, mask_stride, rounding_mode="floor")
    pos = m - req * mask_stride
    cu = cu_num_logits.to(torch.int64)
    start = cu[req]
    active = pos < (cu[req + 1] - start)
    rows = torch.where(active, start + pos, torch.zeros_like(start))
    return rows, active


#: how the installed vLLM's newer runner lays out its bitmask rows (set by the sampler-hook-v2 entry):
#: ``"packed"`` (0.32: ``_build_grammar_mapping``, the scheduled draft length of each request) or
#: ``"fixed"`` (0.33: ``mask_stride`` rows per request)
_V2_LAYOUT: str = "packed"


def v2_mapping(worker: Any, input_batch: Any, grammar_req_ids: Sequence[str]) -> list[int]:
    """The newer runner's bitmask-row -> ``req_idx * mask_stride + position`` mapping, exactly as the
    installed vLLM computes it (:data:`_V2_LAYOUT`).

    Returns
    -------
    list[int]
        One entry per bitmask row.
    """
    stride = int(worker.mask_stride)
    if _V2_LAYOUT == "fixed":
        req_idx = {rid: i for i, rid in enumerate(input_batch.req_ids)}
        return [req_idx[rid] * stride + pos for rid in grammar_req_ids for pos in range(stride)]
    from vllm.v1.worker.gpu.structured_outputs import _build_grammar_mapping

    return _build_grammar_mapping(input_batch.req_ids, list(grammar_req_ids), input_batch.cu_num_logits_np,
                                  input_batch.num_draft_tokens_per_req, worker.num_bonus_tokens, stride)


def apply_grammar_bitmask_v2(self, logits: Any, input_batch: Any, grammar_req_ids: list[str],
                             grammar_bitmask: np.ndarray) -> None:
    """Replacement of ``StructuredOutputsWorker.apply_grammar_bitmask`` (newer runner): same
    copies on the worker's copy stream, rows resolved on the device by :func:`v2_rows`, all-allowed
    and all-forbidden rows dropped on the host first, structgate's Triton kernel."""
    if not _active():
        return _ORIG["apply_grammar_bitmask_v2"](self, logits, input_batch, grammar_req_ids, grammar_bitmask)
    if not grammar_req_ids:
        return
    import torch
    from vllm.utils.torch_utils import PIN_MEMORY, async_tensor_h2d

    from ..kernels import apply_token_bitmask_inplace

    mapping = v2_mapping(self, input_batch, grammar_req_ids)
    grammar_bitmask = np.asarray(grammar_bitmask)
    allowed, forbidden = classify_rows(grammar_bitmask, int(logits.shape[-1]))
    if forbidden.any():
        stride = self.mask_stride
        _warn_empty([input_batch.req_ids[mapping[i] // stride] for i in np.flatnonzero(forbidden)])
    keep = np.flatnonzero(~(allowed | forbidden))
    _count("rows_skipped_all_allowed", int(allowed.sum()))
    if keep.size == 0:
        return
    if keep.size != grammar_bitmask.shape[0]:
        grammar_bitmask = grammar_bitmask[keep]
        mapping = [mapping[i] for i in keep]
    with torch.cuda.stream(self.copy_stream):
        bitmask = async_tensor_h2d(np.ascontiguousarray(grammar_bitmask),
                                   out=self.grammar_bitmask[: grammar_bitmask.shape[0]])
        idx = torch.tensor(mapping, dtype=torch.int32, device="cpu", pin_memory=PIN_MEMORY)
        idx = self.logits_indices[: len(mapping)].copy_(idx, non_blocking=True)
    current = torch.cuda.current_stream()
    current.wait_stream(self.copy_stream)
    rows, active = v2_rows(idx, input_batch.cu_num_logits, self.mask_stride)
    bitmask = bitmask.masked_fill(~active[:, None], -1)
    apply_token_bitmask_inplace(logits, bitmask, indices=rows)
    self.copy_stream.wait_stream(current)
    _count("rows_masked", int(keep.size))
    _count("kernel_launches")


# -- sampler guard ----------------------------------------------------------------------------------
def guard_dead_rows(logits: Any, rows: Any) -> None:
    """Reset to 0 every row of ``rows`` whose logits are all ``-inf`` (in place, no host sync).

    Parameters
    ----------
    logits : torch.Tensor
        float ``(N, V)``.
    rows : torch.Tensor
        int64 ``(R,)`` row indices into ``logits``.
    """
    import torch

    sel = logits.index_select(0, rows)
    dead = torch.isneginf(sel).all(dim=-1, keepdim=True)
    logits.index_copy_(0, rows, torch.where(dead, torch.zeros((), dtype=sel.dtype, device=sel.device), sel))


def _risky_processors(sampling_metadata: Any) -> bool:
    if getattr(sampling_metadata, "allowed_token_ids_mask", None) is not None:
        return True
    if getattr(sampling_metadata, "bad_words_token_ids", None):
        return True
    procs = getattr(sampling_metadata, "logitsprocs", None)
    non_inv = getattr(procs, "non_argmax_invariant", ()) if procs is not None else ()
    for p in non_inv:
        if type(p).__name__ == "MinTokensLogitsProcessor":
            continue  # vLLM restores the stop tokens of structured rows itself
        if getattr(p, "biases", None) or type(p).__name__ != "LogitBiasLogitsProcessor":
            return True
    return False


def _apply_logits_processors(self, logits, sampling_metadata, predict_bonus_token):
    global _pending_rows
    out = _ORIG["apply_logits_processors"](self, logits, sampling_metadata, predict_bonus_token)
    pending, _pending_rows = _pending_rows, None
    # only the plain sampling path: with speculative decoding the sampler sees a subset of rows
    if pending is not None and not predict_bonus_token and _active() and _risky_processors(sampling_metadata):
        rows, n_rows = pending
        if out.shape[0] == n_rows:
            guard_dead_rows(out, rows.to(out.device))
            _count("guard_runs")
    return out


# -- installation -----------------------------------------------------------------------------------
def install_v1(runner_mod: Any = None, utils_mod: Any = None) -> None:
    """Patch the V1 runner's ``apply_grammar_bitmask`` (module globals of
    ``vllm.v1.worker.gpu_model_runner`` and ``vllm.v1.structured_output.utils``). Idempotent."""
    from . import ledger

    if utils_mod is None:
        import vllm.v1.structured_output.utils as utils_mod
    sym = "vllm.v1.structured_output.utils.apply_grammar_bitmask"
    cur = ledger.require_attr(utils_mod, "apply_grammar_bitmask", sym)
    if not ledger.is_marked(cur):
        ledger.require_signature(cur, ("scheduler_output", "grammar_output", "input_batch", "logits"), sym)
        _ORIG["apply_grammar_bitmask"] = cur
        utils_mod.apply_grammar_bitmask = ledger.mark(_v1_wrapper(), cur, "sampler-hook")
    if runner_mod is not None:
        _patch_runner_global(runner_mod)


def _v1_wrapper():
    def apply_grammar_bitmask_sg(scheduler_output, grammar_output, input_batch, logits):
        return apply_grammar_bitmask(scheduler_output, grammar_output, input_batch, logits)

    apply_grammar_bitmask_sg.__doc__ = apply_grammar_bitmask.__doc__
    return apply_grammar_bitmask_sg


def _patch_runner_global(runner_mod: Any) -> None:
    from . import ledger

    sym = f"{runner_mod.__name__}.apply_grammar_bitmask"
    cur = ledger.require_attr(runner_mod, "apply_grammar_bitmask", sym)
    if ledger.is_marked(cur):
        return
    import vllm.v1.structured_output.utils as utils_mod

    install_v1(None, utils_mod)
    runner_mod.apply_grammar_bitmask = utils_mod.apply_grammar_bitmask


def _install_v2(mod: Any) -> None:
    from . import ledger

    sym = "vllm.v1.worker.gpu.structured_outputs.StructuredOutputsWorker.apply_grammar_bitmask"
    cls = ledger.require_attr(mod, "StructuredOutputsWorker", sym)
    cur = ledger.require_attr(cls, "apply_grammar_bitmask", sym)
    if ledger.is_marked(cur):
        return
    ledger.require_signature(cur, ("self", "logits", "input_batch", "grammar_req_ids", "grammar_bitmask"), sym)
    global _V2_LAYOUT
    if hasattr(mod, "_build_grammar_mapping"):  # 0.32
        ledger.require_source(cur, ("_build_grammar_mapping(", "self.num_bonus_tokens", "self.mask_stride"), sym)
        layout = "packed"
    else:  # 0.33: every grammar request owns mask_stride rows
        ledger.require_source(cur, ("req_id_to_idx[req_id] * self.mask_stride + position",
                                    "for position in range(self.mask_stride)"), sym)
        layout = "fixed"
    ledger.require_source(cur, ("cu_num_logits", "self.copy_stream", "self.logits_indices",
                                "self.grammar_bitmask"), sym)
    _V2_LAYOUT = layout
    _ORIG["apply_grammar_bitmask_v2"] = cur

    def apply_grammar_bitmask_sg(self, logits, input_batch, grammar_req_ids, grammar_bitmask):
        return apply_grammar_bitmask_v2(self, logits, input_batch, grammar_req_ids, grammar_bitmask)

    cls.apply_grammar_bitmask = ledger.mark(apply_grammar_bitmask_sg, cur, "sampler-hook-v2")


def _install_sampler(mod: Any) -> None:
    from . import ledger

    sym = "vllm.v1.sample.sampler.Sampler.apply_logits_processors"
    cls = ledger.require_attr(mod, "Sampler", sym)
    cur = ledger.require_attr(cls, "apply_logits_processors", sym)
    if ledger.is_marked(cur):
        return
    ledger.require_signature(cur, ("self", "logits", "sampling_metadata", "predict_bonus_token"), sym)
    _ORIG["apply_logits_processors"] = cur

    def apply_logits_processors_sg(self, logits, sampling_metadata, predict_bonus_token):
        return _apply_logits_processors(self, logits, sampling_metadata, predict_bonus_token)

    cls.apply_logits_processors = ledger.mark(apply_logits_processors_sg, cur, "sampler-guard")


def _install_worker_base(mod: Any) -> None:
    from . import ledger

    sym = "vllm.v1.worker.worker_base.WorkerBase.__init__"
    cls = ledger.require_attr(mod, "WorkerBase", sym)
    cur = cls.__init__
    if ledger.is_marked(cur):
        return
    ledger.require_signature(cur, ("self", "vllm_config", "local_rank", "rank", "distributed_init_method",
                                   "is_driver_worker"), sym)

    def __init__(self, vllm_config, *args, **kwargs):
        cur(self, vllm_config, *args, **kwargs)
        so = getattr(vllm_config, "structured_outputs_config", None)
        set_backend_name(getattr(so, "backend", None))

    cls.__init__ = ledger.mark(__init__, cur, "sampler-hook-backend")


def install() -> None:
    """Apply every sampler-hook patch now (tests; vLLM processes go through the ledger)."""
    import vllm.v1.sample.sampler as sampler_mod
    import vllm.v1.structured_output.utils as utils_mod
    import vllm.v1.worker.gpu_model_runner as runner_mod
    import vllm.v1.worker.worker_base as wb

    install_v1(runner_mod, utils_mod)
    _install_sampler(sampler_mod)
    _install_worker_base(wb)


def _register() -> None:
    try:
        from .ledger import Patch, register_patch
    except ImportError:  # pragma: no cover
        return
    common = dict(versions="0.32.0, 0.33.0 (wheel source read: fixed row blocks per request)", removal="when vLLM lets a structured-output backend supply its apply kernel")
    register_patch(Patch(
        name="sampler-hook-v1-utils", module="vllm.v1.structured_output.utils", target="apply_grammar_bitmask",
        why="vLLM applies masks with XGrammar's kernel after scattering the compact bitmask into a "
            "[num_logits, W] copy; structgate applies the compact bitmask with its own kernel",
        how=f"module function replaced; structgate backends only ({ENV_SAMPLER_HOOK}=0 off, =all every "
            "backend); all-allowed rows skipped, all-forbidden rows left unmasked (request fails cleanly)",
        apply=lambda mod: install_v1(None, mod), **common))
    register_patch(Patch(
        name="sampler-hook-v1-runner", module="vllm.v1.worker.gpu_model_runner", target="apply_grammar_bitmask",
        why="the V1 runner (and the CPU runner, its subclass) imported apply_grammar_bitmask by name",
        how="rebind the runner module's global to the patched function",
        apply=_patch_runner_global, **common))
    register_patch(Patch(
        name="sampler-hook-v2", module="vllm.v1.worker.gpu.structured_outputs",
        target="StructuredOutputsWorker.apply_grammar_bitmask",
        why="the newer GPU runner has its own bitmask kernel",
        how="same copies and device-side row mapping, structgate's Triton kernel, host-side row skipping",
        apply=_install_v2, **common))
    register_patch(Patch(
        name="sampler-guard", module="vllm.v1.sample.sampler", target="Sampler.apply_logits_processors",
        why="a structured row can become all -inf after bad_words / allowed_token_ids / logit_bias "
            "(softmax NaN, arbitrary token)",
        how="after the original, rows masked this step that are all -inf are reset to 0 (the grammar "
            "then rejects the sampled token: the request fails cleanly); only when such a processor is active",
        apply=_install_sampler, **common))
    register_patch(Patch(
        name="sampler-hook-backend", module="vllm.v1.worker.worker_base", target="WorkerBase.__init__",
        why="the worker-side hooks must know whether this engine uses a structgate backend",
        how="record vllm_config.structured_outputs_config.backend after the original __init__",
        apply=_install_worker_base, **common))


_register()
