"""Engine-core side: batched bitmask fill and background mask prefetch for structgate backends.

vLLM 0.32 fills the structured-output bitmask in ``StructuredOutputManager.grammar_bitmask`` with
one ``grammar.fill_bitmask(bitmask, i)`` call per request and per speculative position (a thread
pool of 16-request chunks above 128 requests without speculation). For structgate backends this
hook replaces that loop with one batched operation per step:

* **row-gather** matchers (``Matcher.supports_row_gather``; ``row_source()`` gives the row source and
  an int state — native's): the row of each state is
  precomputed and cached in the grammar's :class:`~structgate.native.token_index.TokenIndex`, so the
  step is one vectorised gather per distinct grammar, ``ti.fill_rows(states, bitmask[rows])``;
* **adapters**: rows prefetched in the background are copied; the others go through the engine's
  batched fill, ``sg_backend.fill_bitmask_batch([(matcher, row), ...], bitmask)`` (XGrammar's
  ``BatchGrammarMatcher``, llguidance's ``LLExecutor``) when the backend has one, else one
  ``matcher.fill_bitmask`` per row;
* **speculative rows** follow vLLM exactly (fill, accept the draft token, next row, ..., roll back
  the accepted drafts; rows after a rejected draft copy the last valid row), except that native rows
  only record the state at each position and are gathered with the others.

**Prefetch.** When the engine accepts a request's new tokens (``StructuredOutputManager.accept_tokens``)
the hook schedules, on one background thread, the work the next ``grammar_bitmask`` would do for it:
for native matchers the TokenIndex row of the new state if it is not cached yet (rows are keyed by
state and immutable, so a prefetched row can never be stale), for adapters the row itself, into a
per-request buffer tagged with the request's *epoch* (the number of accept calls so far).

**No stale mask.** Every matcher operation of the manager (accept, validate, the speculative fill
loop) runs under a per-request lock, and each accept increments the epoch under that lock. A
prefetched adapter row is used only if its epoch equals the current one; otherwise the row is
computed now, after *claiming* the epoch so that a queued prefetch job skips it. So every row
reflects every accepted token.

**A request whose grammar fails.** A structgate error raised while one request's mask is computed
or its grammar advanced (the native engine builds its automaton lazily and may meet a limit such as
``max_dfa_states`` mid-request) must not escape: this runs in the engine core's step, and an
exception there kills the engine and every request. As vLLM's guidance backend does on a matcher
error, that request's grammar is marked failed instead (:mod:`structgate.plugin.grammar_failure`:
one warning, ``structgate_decode_failures_total``, EOS-only rows from then on). A native gather
(``fill_rows`` over several requests' states) or an engine's batched fill that raises is redone row
by row, so only the rows that raise fail; the others get their usual rows. A
:class:`~structgate.errors.BitmaskError` (the caller's buffer) and non-structgate exceptions (bugs)
still raise. The healthy path is unchanged (try blocks around the existing calls).

Other backends (vLLM's own xgrammar/guidance/outlines) are untouched: the original method runs.

Environment
-----------
``STRUCTGATE_SCHEDULER_HOOK=0`` disables the hook (vLLM's loop runs for structgate backends too).
``STRUCTGATE_MASK_PREFETCH=0`` keeps the batched fill but disables the background prefetch.
Both are read at call time.
"""
from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Sequence

import numpy as np

from ..errors import StructgateError
from . import grammar_failure as _gf

__all__ = ["ENV_DISABLE", "ENV_PREFETCH", "hook_enabled", "prefetch_enabled", "BatchFill",
           "MaskPrefetcher", "grammar_bitmask", "accept_tokens", "validate_tokens", "install", "uninstall",
           "stats"]

logger = logging.getLogger("structgate.plugin")

ENV_DISABLE = "STRUCTGATE_SCHEDULER_HOOK"
ENV_PREFETCH = "STRUCTGATE_MASK_PREFETCH"

_OFF = ("0", "false", "no", "off")


def hook_enabled() -> bool:
    """True unless ``STRUCTGATE_SCHEDULER_HOOK`` is 0/false/no/off."""
    return os.environ.get(ENV_DISABLE, "1").strip().lower() not in _OFF


def prefetch_enabled() -> bool:
    """True unless ``STRUCTGATE_MASK_PREFETCH`` is 0/false/no/off."""
    return os.environ.get(ENV_PREFETCH, "1").strip().lower() not in _OFF


#: counters for tests and the benchmark (reset with ``stats.clear()``)
stats: dict[str, int] = {}


def _count(key: str, n: int = 1) -> None:
    stats[key] = stats.get(key, 0) + n


def _record(event: str, n: int) -> None:
    """Append a counter line to ``$STRUCTGATE_STATS_FILE`` (the bridge's format; e2e tests)."""
    if os.environ.get("STRUCTGATE_STATS_FILE"):
        from .bridge import record

        record(event, "scheduler-hook", n)


# -- per-request hook state -----------------------------------------------------------------------
class _Slot:
    """Hook state attached to one vLLM grammar object."""

    __slots__ = ("lock", "epoch", "ready_epoch", "claimed_epoch", "buf", "buf_need_apply")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.epoch = 0
        self.ready_epoch = -1
        self.claimed_epoch = -1
        self.buf: np.ndarray | None = None
        self.buf_need_apply = True


_ATTR = "_structgate_hook_slot"
_fallback_slots: dict[int, _Slot] = {}
_slots_lock = threading.Lock()


def _slot(grammar: Any) -> _Slot:
    s = getattr(grammar, _ATTR, None)
    if s is not None:
        return s
    with _slots_lock:
        s = getattr(grammar, _ATTR, None)
        if s is None:
            s = _Slot()
            try:
                object.__setattr__(grammar, _ATTR, s)
            except (AttributeError, TypeError):  # __slots__ class: keep it aside by id
                s = _fallback_slots.setdefault(id(grammar), s)
    return s


_MATCHER_CLS: Any = None
#: matcher type -> 0 (not a structgate Matcher), 1 (native-style: token_index + int state), 2 (adapter),
#: 3 (a failed grammar's :class:`~structgate.plugin.grammar_failure.FailedMatcher`: EOS only, filled
#: on its own, never handed to an engine's batched fill nor prefetched)
_KIND: dict[type, int] = {}


def sg_matcher(grammar: Any):
    """The structgate :class:`~structgate.backends.interface.Matcher` behind a vLLM grammar object
    (the bridge's grammars expose it as ``.matcher``), or None."""
    m = getattr(grammar, "matcher", None)
    return m if _kind(m) else None


def _kind(m: Any) -> int:
    k = _KIND.get(type(m))
    if k is None:
        global _MATCHER_CLS
        if _MATCHER_CLS is None:
            from ..backends.interface import Matcher as _MATCHER_CLS
        if not isinstance(m, _MATCHER_CLS):
            k = 0
        elif isinstance(m, _gf.FailedMatcher):
            k = 3
        else:
            # the interface's batched-fill declaration (Matcher.supports_row_gather / row_source)
            k = 1 if getattr(type(m), "supports_row_gather", False) else 2
        _KIND[type(m)] = k
    return k


def _native_parts(matcher: Any):
    """``(token_index, state)`` for a native-style matcher, else None."""
    if _kind(matcher) != 1:
        return None
    ti, st = matcher.row_source()
    return ti, int(st)


def _row_cached(ti: Any, state: int) -> bool:
    """True if the TokenIndex already holds the row of ``state`` (then no prefetch is needed)."""
    try:
        return bool(ti.is_cached(state))
    except (AttributeError, IndexError, ValueError):
        return False


# -- the background prefetcher --------------------------------------------------------------------
class MaskPrefetcher:
    """One background thread that prepares masks as soon as a request's token is accepted.

    Parameters
    ----------
    max_workers : int
        Threads (default 1: the work is mostly numpy / engine code that releases the GIL, and one
        thread keeps prefetches in submission order).
    """

    def __init__(self, max_workers: int = 1) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="structgate-mask")

    def on_accepted(self, grammar: Any, matcher: Any, slot: _Slot, epoch: int) -> None:
        """Schedule the next mask of ``grammar`` (its matcher just reached epoch ``epoch``)."""
        if matcher.is_terminated():
            return
        parts = _native_parts(matcher)
        if parts is not None:
            ti, st = parts
            if st >= 0 and not _row_cached(ti, st):
                _count("prefetch_native_submitted")
                self._pool.submit(self._native_job, ti, st)
            return
        if _kind(matcher) == 3:  # a failed grammar: its row is EOS only, nothing to prepare
            return
        _count("prefetch_adapter_submitted")
        self._pool.submit(self._adapter_job, matcher, slot, epoch)

    @staticmethod
    def _native_job(ti: Any, state: int) -> None:
        try:
            ti.slots(np.array([state], dtype=np.int64))
            _count("prefetch_native_done")
        except Exception:  # the synchronous path meets it again, in context (and fails that request alone)
            logger.debug("structgate: native prefetch failed", exc_info=True)

    @staticmethod
    def _adapter_job(matcher: Any, slot: _Slot, epoch: int) -> None:
        with slot.lock:
            if slot.epoch != epoch or slot.claimed_epoch == epoch or slot.ready_epoch == epoch:
                _count("prefetch_adapter_skipped")
                return
            try:
                width = (matcher.vocab.vocab_size + 31) // 32
                if slot.buf is None or slot.buf.shape[1] != width:
                    slot.buf = np.empty((1, width), dtype=np.int32)
                slot.buf_need_apply = bool(matcher.fill_bitmask(slot.buf, 0))
                slot.ready_epoch = epoch
                _count("prefetch_adapter_done")
            except Exception:
                logger.debug("structgate: adapter prefetch failed", exc_info=True)

    def drain(self) -> None:
        """Wait until every job submitted so far has run (tests, benchmarks)."""
        self._pool.submit(lambda: None).result()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


_prefetcher: MaskPrefetcher | None = None
_prefetcher_lock = threading.Lock()


def prefetcher() -> MaskPrefetcher:
    """The process-wide :class:`MaskPrefetcher` (created on first use)."""
    global _prefetcher
    if _prefetcher is None:
        with _prefetcher_lock:
            if _prefetcher is None:
                _prefetcher = MaskPrefetcher()
    return _prefetcher


# -- the batched fill -----------------------------------------------------------------------------
class BatchFill:
    """Rows of one step's bitmask, collected and then filled with as few calls as possible.

    A structgate error while one request's row is computed fails that request's grammar alone
    (:mod:`structgate.plugin.grammar_failure`, as vLLM's guidance backend on a matcher error): its
    row allows only EOS. A native gather or an engine's batched fill that raises one is redone row
    by row, so the other requests of the group keep their rows.

    Parameters
    ----------
    bitmask : torch.Tensor | numpy.ndarray
        The manager's int32 ``(rows, ceil(vocab/32))`` CPU buffer.
    sg_backend : structgate Backend | None
        Used for ``fill_bitmask_batch`` when it has one.
    bitmask_np : numpy.ndarray | None
        A numpy view of ``bitmask`` (cached by the caller).
    requests : dict | None
        vLLM's ``{request id: Request}`` of the step: names the request of a failing grammar in its
        warning (looked up only then).
    """

    def __init__(self, bitmask: Any, sg_backend: Any = None, bitmask_np: np.ndarray | None = None,
                 requests: dict | None = None) -> None:
        if bitmask_np is None:
            bitmask_np = bitmask if isinstance(bitmask, np.ndarray) else bitmask.numpy()
        self.bm = bitmask_np
        self.bitmask = bitmask
        self.sg_backend = sg_backend
        self.requests = requests
        self.full_rows: list[int] = []
        #: id(token index) -> (token index, rows, states, grammars)
        self.native: dict[int, tuple[Any, list[int], list[int], list[Any]]] = {}
        self.batch: list[tuple[Any, int]] = []
        self.batch_grammars: list[Any] = []  # the grammar of each pair of self.batch
        self.single: list[tuple[Any, int, Any]] = []  # (matcher, row, grammar)
        self.transient: list[tuple[int, Any]] = []  # (row, grammar) of adapter rows filled in add
        self._failures0 = _gf.failures
        self.copies: list[tuple[int, int]] = []
        self.masked: list[tuple[int, tuple[int, ...]]] = []

    def add(self, grammar: Any, row: int, apply: bool, *, transient: bool = False,
            masked: tuple[int, ...] = ()) -> None:
        """Schedule row ``row`` for ``grammar`` in its current state.

        ``transient``: the matcher state will change before :meth:`run` (speculative positions), so
        rows that cannot be recorded as a native state are filled now. ``masked``: token ids an
        unconstrained row (``apply`` false) forbids all the same (vLLM 0.33's implicit reasoning
        ends while a request reasons).
        """
        if not apply:
            self.full_rows.append(row)
            if masked:
                self.masked.append((row, masked))
            return
        m = getattr(grammar, "matcher", None)
        kind = _kind(m)
        if kind == 1:  # native: record (token index, state); terminated (state -1) -> full row
            ti, st = m.row_source()
            if st < 0:
                self.full_rows.append(row)
                return
            entry = self.native.get(id(ti))
            if entry is None:
                entry = self.native[id(ti)] = (ti, [], [], [])
            entry[1].append(row)
            entry[2].append(st)
            entry[3].append(grammar)
            return
        if grammar.is_terminated():
            self.full_rows.append(row)
            return
        if kind == 0:  # not a structgate grammar: vLLM's per-row call
            grammar.fill_bitmask(self.bitmask, row)
            return
        if kind == 3:  # a failed grammar: EOS only, no engine involved
            m.fill_bitmask(self.bm, row)
            return
        if transient:
            self._fill_one(grammar, m, row)
            self.transient.append((row, grammar))
            _count("fill_adapter_transient")
            return
        slot = _slot(grammar)
        with slot.lock:
            if slot.ready_epoch == slot.epoch and slot.buf is not None:
                self.bm[row] = slot.buf[0]
                _count("fill_adapter_prefetched")
                return
            slot.claimed_epoch = slot.epoch  # a queued prefetch for this epoch must not run now
        if self.sg_backend is not None and hasattr(self.sg_backend, "fill_bitmask_batch"):
            self.batch.append((m, row))
            self.batch_grammars.append(grammar)
        else:
            self.single.append((m, row, grammar))

    def copy(self, dst: int, src: int) -> None:
        """Row ``dst`` = row ``src`` once the fills are done (rows after a rejected draft)."""
        self.copies.append((dst, src))

    def run(self) -> None:
        """Do the fills: full rows, one gather per native grammar, one engine batch, the rest."""
        bm = self.bm
        if self.full_rows:
            bm[self.full_rows] = -1
        for row, ids in self.masked:  # as vLLM 0.33's _fill_bitmasks: clear each id's bit
            words = bm[row].view(np.uint32)
            for t in ids:
                words[t >> 5] &= ~np.uint32(1 << (t & 31))
        for ti, rows, states, grammars in self.native.values():
            # one atomic gather (fill_rows: lookups and copies under the grammar's lock, so the
            # prefetching thread's next row cannot evict one in between)
            st = np.asarray(states, dtype=np.int64)
            lo, n = rows[0], len(rows)
            try:
                if rows[-1] - lo == n - 1 and (n < 3 or rows[1] == lo + 1):  # contiguous (the usual case)
                    ti.fill_rows(st, bm[lo:lo + n])
                else:
                    tmp = np.empty((n, bm.shape[1]), dtype=bm.dtype)
                    ti.fill_rows(st, tmp)
                    bm[rows] = tmp
            except StructgateError as e:  # some request's row: redo row by row, fail only those
                self._native_rows_one_by_one(ti, rows, states, grammars, e)
            _count("fill_native_rows", n)
        if self.batch:
            try:
                self.sg_backend.fill_bitmask_batch(self.batch, bm)
            except StructgateError as e:  # some request's row: redo row by row, fail only those
                self._reraise_unless_request_failure(e)
                _count("fill_adapter_batch_retried")
                for (m, row), g in zip(self.batch, self.batch_grammars):
                    self._fill_one(g, m, row)
            _count("fill_adapter_batched", len(self.batch))
        for m, row, g in self.single:
            self._fill_one(g, m, row)
            _count("fill_adapter_single")
        if _gf.failures != self._failures0:  # some grammar failed during this step
            self._eos_rows_of_failed()
        for dst, src in self.copies:
            bm[dst] = bm[src]

    # -- failures (rare paths) ------------------------------------------------------------------------
    @staticmethod
    def _reraise_unless_request_failure(e: StructgateError) -> None:
        if not _gf.is_request_failure(e):  # a BitmaskError: the buffer, not a request
            raise e

    def _fail(self, grammar: Any, e: StructgateError):
        """Mark ``grammar`` failed (or re-raise ``e`` when it is not a request's failure); its new
        matcher (EOS only)."""
        m = _gf.fail_grammar(grammar, e, self._request_id(grammar))
        _count("fill_row_failed")
        return m

    def _eos_rows_of_failed(self) -> None:
        """Every row of this step recorded for a grammar that has failed since (during this step: a
        row, or an accepted draft, of its speculative positions) allows only EOS, including rows of
        positions before the failure: its first sampled token is then EOS, which its failed grammar
        accepts (a draft sampled from an earlier row would be refused, and the request would end
        with FINISHED_ERROR instead of EOS)."""
        bm = self.bm
        rows = [(r, g) for _, rs, _, gs in self.native.values() for r, g in zip(rs, gs)]
        rows += [(r, g) for (_, r), g in zip(self.batch, self.batch_grammars)]
        rows += [(r, g) for _, r, g in self.single]
        rows += self.transient
        for row, g in rows:
            m = g.matcher
            if _kind(m) == 3:
                m.fill_bitmask(bm, row)

    def _request_id(self, grammar: Any) -> str | None:
        for rid, req in (self.requests or {}).items():
            if getattr(getattr(req, "structured_output_request", None), "grammar", None) is grammar:
                return rid
        return None

    def _fill_one(self, grammar: Any, m: Any, row: int) -> None:
        """``m.fill_bitmask(bm, row)``; a request failure fails ``grammar`` and fills its EOS row."""
        try:
            m.fill_bitmask(self.bm, row)
        except StructgateError as e:
            self._fail(grammar, e).fill_bitmask(self.bm, row)

    def _native_rows_one_by_one(self, ti: Any, rows: list[int], states: list[int], grammars: list[Any],
                                e: StructgateError) -> None:
        """After gather ``ti.fill_rows`` raised ``e``: each row on its own (``ti.fill_row``); the
        grammars whose row raises fail (EOS row), the others get their rows."""
        self._reraise_unless_request_failure(e)
        _count("fill_native_gather_retried")
        bm = self.bm
        for row, st, g in zip(rows, states, grammars):
            try:
                ti.fill_row(st, bm[row])
            except StructgateError as err:
                self._fail(g, err).fill_bitmask(bm, row)


# -- the patched StructuredOutputManager methods --------------------------------------------------
_ORIG: dict[str, Any] = {}


def _active(manager: Any) -> bool:
    return hook_enabled() and getattr(manager.backend, "sg_backend", None) is not None


def _strip(tokens: Sequence[int]) -> list[int]:
    from vllm.v1.structured_output.utils import strip_speculative_padding

    return strip_speculative_padding(list(tokens))


#: the row layout of the installed vLLM's fill loop (set by :func:`install` from the fill-loop
#: fingerprints): ``"packed"`` (0.32: ``1 + len(draft)`` rows per request, back to back) or
#: ``"fixed"`` (0.33: ``mask_stride = 1 + num_speculative_tokens`` rows per request, and rows left
#: unconstrained while a request reasons keep its implicit reasoning-end tokens masked)
_LAYOUT: str = "packed"


def grammar_bitmask(self, requests: dict, structured_output_request_ids: list[str],
                    scheduled_spec_decode_tokens: dict[str, list[int]]):
    """Replacement of ``StructuredOutputManager.grammar_bitmask`` (same signature and result: an
    int32 numpy array with the rows of each structured request and speculative position, ordered
    as ``structured_output_request_ids``, in the installed vLLM's layout, :data:`_LAYOUT`)."""
    if not _active(self):
        return _ORIG["grammar_bitmask"](self, requests, structured_output_request_ids,
                                        scheduled_spec_decode_tokens)
    if not structured_output_request_ids:
        return None
    max_num_spec_tokens = self.vllm_config.num_speculative_tokens
    if self._grammar_bitmask is None:
        max_batch_size = self.vllm_config.scheduler_config.max_num_seqs
        self._grammar_bitmask = self.backend.allocate_token_bitmask(max_batch_size * (1 + max_num_spec_tokens))
    is_diffusion = bool(getattr(self.vllm_config.model_config, "is_diffusion", False))
    cached = getattr(self, "_sg_bitmask_np", None)
    if cached is None or cached[0] is not self._grammar_bitmask:
        t = self._grammar_bitmask
        cached = (t, t if isinstance(t, np.ndarray) else t.numpy())
        self._sg_bitmask_np = cached
    bm_np = cached[1]
    plan = BatchFill(self._grammar_bitmask, self.backend.sg_backend, bm_np, requests)
    fixed = _LAYOUT == "fixed"
    stride = max_num_spec_tokens + (0 if is_diffusion else 1)
    idx = filled = 0  # next row; rows written so far (fixed layout: summed per block)
    for k, req_id in enumerate(structured_output_request_ids):
        if fixed:
            idx = k * stride
        start = idx
        request = requests[req_id]
        grammar = request.structured_output_request.grammar
        req_tokens = scheduled_spec_decode_tokens.get(req_id, ())
        if not req_tokens:  # the common case: one row, the current state
            bounds = self._get_constraint_bounds(request, ())
            apply = bounds.constraint_start == 0
            plan.add(grammar, idx, apply, masked=() if apply or not fixed else self._masked_reasoning_ends(request))
            idx += 1
        else:
            idx = _spec_rows(self, plan, req_id, request, grammar, list(req_tokens), idx, is_diffusion, fixed)
        filled += idx - start
    plan.run()
    # fixed layout: the rows past a request's drafts in its block are not filled (as in vLLM's loop)
    n = len(structured_output_request_ids) * stride if fixed else idx
    _record("hook_batched_fill_rows", filled)
    return bm_np[:n] if n < bm_np.shape[0] else bm_np


def _spec_rows(self, plan: BatchFill, req_id: str, request: Any, grammar: Any, req_tokens: list[int],
               idx: int, is_diffusion: bool, fixed: bool = False) -> int:
    """vLLM's speculative loop (fill, accept, ..., bonus row, roll back) with deferred fills;
    ``fixed``: 0.33's loop, whose rows before ``constraint_start`` keep the implicit reasoning ends
    masked."""
    grammar_start, constraint_start = self._get_constraint_bounds(request, _strip(req_tokens))
    masked_ids = self._masked_reasoning_ends(request) if fixed and constraint_start else ()
    slot = _slot(grammar)
    with slot.lock:
        advanced = 0
        seen_padding = False
        failed: int | None = None
        for i, token in enumerate(req_tokens):
            if failed is not None:
                plan.copy(idx, failed)
                idx += 1
                continue
            plan.add(grammar, idx, not seen_padding and i >= constraint_start, transient=True,
                     masked=masked_ids if not seen_padding and i < constraint_start else ())
            if token == -1:
                seen_padding = True
            elif not seen_padding and i >= grammar_start:
                terminated = grammar.is_terminated()
                if not terminated and _accept_draft(grammar, req_id, token):
                    advanced += 1
                else:
                    failed = idx
                    if terminated or not getattr(grammar, "logs_refusals", False):  # (the bridge's logs its own)
                        logger.error("structgate: request %s: draft token %s refused in the speculative bitmask "
                                     "fill: %s; the later rows of this step repeat the last valid row", req_id,
                                     token, "its grammar had terminated" if terminated else "its grammar rejected it")
            idx += 1
        if not (is_diffusion and req_tokens):
            if failed is not None:
                plan.copy(idx, failed)
            else:
                bonus_apply = not seen_padding and constraint_start <= len(req_tokens)
                plan.add(grammar, idx, bonus_apply, transient=True,
                         masked=masked_ids if not seen_padding and not bonus_apply else ())
            idx += 1
        if advanced:
            grammar.rollback(advanced)
    return idx


def _accept_draft(grammar: Any, req_id: str, token: int) -> bool:
    """``grammar.accept_tokens(req_id, [token])`` for a draft token of the speculative fill, inside
    :class:`~structgate.plugin.bridge.mask_fill`, as vLLM's own fill loop runs under the ledger entry
    metrics-mask-fill: the bridge's grammar takes it as a draft (its one line says so, and a refused
    draft fails nothing)."""
    from .bridge import mask_fill

    with mask_fill():
        return grammar.accept_tokens(req_id, [token])


def accept_tokens(self, request: Any, new_token_ids: list[int]) -> bool:
    """Replacement of ``StructuredOutputManager.accept_tokens``: the original under the request's
    lock, an epoch increment, then a background prefetch of the next mask, after accepted tokens
    only (a refused token ends the request: no next mask; its matcher may have failed in that very
    advance, and a prefetch would redo the work that failed)."""
    orig = _ORIG["accept_tokens"]
    if not _active(self) or not new_token_ids or not request.use_structured_output:
        return orig(self, request, new_token_ids)
    grammar = request.structured_output_request.grammar
    m = sg_matcher(grammar)
    if m is None:
        return orig(self, request, new_token_ids)
    slot = _slot(grammar)
    with slot.lock:
        ok = orig(self, request, new_token_ids)
        slot.epoch += 1
        epoch = slot.epoch
    if ok:
        if prefetch_enabled():
            prefetcher().on_accepted(grammar, m, slot, epoch)
    elif not getattr(grammar, "logs_refusals", False):  # (the bridge's grammar logs its own)
        if _kind(grammar.matcher) == 3:
            logger.error("structgate: request %s: its grammar failed during decoding (%s) and accepts only EOS; "
                         "token(s) %s rejected, so the request ends here (its output stops before that token and "
                         "its stop_reason names the failure: ledger entry engine-compile-error-reason).",
                         request.request_id,
                         _gf.describe(grammar.matcher.error), list(new_token_ids))
        else:
            logger.error("structgate: request %s: the grammar rejected sampled token(s) %s; the request fails "
                         "(FINISHED_ERROR). This happens when the mask left no legal token (for instance "
                         "another logits processor forbade the grammar's only tokens) or a mask was not "
                         "applied.", request.request_id, list(new_token_ids))
    return ok


def validate_tokens(self, request: Any, spec_tokens: list[int]) -> list[int]:
    """Replacement of ``StructuredOutputManager.validate_tokens``: the original under the request's
    lock (it advances and rolls back the matcher; the net state, hence the epoch, is unchanged)."""
    orig = _ORIG["validate_tokens"]
    if not _active(self) or not request.use_structured_output:
        return orig(self, request, spec_tokens)
    grammar = request.structured_output_request.grammar
    if sg_matcher(grammar) is None:
        return orig(self, request, spec_tokens)
    with _slot(grammar).lock:
        return orig(self, request, spec_tokens)


_METHODS = {"grammar_bitmask": grammar_bitmask, "accept_tokens": accept_tokens,
            "validate_tokens": validate_tokens}


def install(manager_cls: Any = None) -> None:
    """Patch ``StructuredOutputManager`` (idempotent). The ledger calls this through its entry;
    tests may call it directly. Checks the patched methods' signatures first.

    Raises
    ------
    VllmPatchError
        A patched method is missing or its signature changed.
    """
    from . import ledger

    if manager_cls is None:
        from vllm.v1.structured_output import StructuredOutputManager as manager_cls
    sigs = {"grammar_bitmask": ("self", "requests", "structured_output_request_ids", "scheduled_spec_decode_tokens"),
            "accept_tokens": ("self", "request", "new_token_ids"),
            "validate_tokens": ("self", "request", "spec_tokens")}
    sym = "vllm.v1.structured_output.StructuredOutputManager"
    ledger.require_attr(manager_cls, "_get_constraint_bounds", f"{sym}._get_constraint_bounds")
    global _LAYOUT
    if ledger.fill_loop_release(manager_cls) == "0.33.0":
        ledger.require_attr(manager_cls, "_masked_reasoning_ends", f"{sym}._masked_reasoning_ends")
        _LAYOUT = "fixed"
    else:
        _LAYOUT = "packed"
    for name, params in sigs.items():
        cur = ledger.require_attr(manager_cls, name, f"{sym}.{name}")
        if ledger.is_marked(cur):
            continue
        ledger.require_signature(cur, params, f"{sym}.{name}")
        _ORIG[name] = cur
        setattr(manager_cls, name, ledger.mark(_wrap(_METHODS[name], name), cur, f"scheduler-hook:{name}"))


def _wrap(fn, name):
    def wrapper(self, *a, **kw):
        return fn(self, *a, **kw)

    wrapper.__name__ = name
    wrapper.__qualname__ = f"StructuredOutputManager.{name}"
    wrapper.__doc__ = fn.__doc__
    return wrapper


def uninstall(manager_cls: Any = None) -> None:
    """Restore the original methods (tests)."""
    if manager_cls is None:
        from vllm.v1.structured_output import StructuredOutputManager as manager_cls
    for name in _METHODS:
        cur = manager_cls.__dict__.get(name)
        orig = getattr(cur, "__structgate_original__", None)
        if orig is not None:
            setattr(manager_cls, name, orig)


def _register() -> None:
    try:
        from .ledger import Patch, register_patch
    except ImportError:  # pragma: no cover
        return
    register_patch(Patch(
        name="scheduler-batched-bitmask",
        module="vllm.v1.structured_output",
        target="StructuredOutputManager.grammar_bitmask / accept_tokens / validate_tokens",
        why="vLLM fills one bitmask row per request and speculative position in a Python loop; "
            "structgate backends can gather every row of a step in one vectorised operation and "
            "prefetch masks in the background.",
        how="for managers whose backend has .sg_backend: batched fill (native row gather, adapter "
            "fill_bitmask_batch), vLLM's speculative accept/fill/rollback kept, per-request lock + "
            "epoch so no stale mask is used; other backends call the originals. "
            f"{ENV_DISABLE}=0 disables.",
        versions="0.32.0, 0.33.0 (its fixed row blocks and masked reasoning ends; fill-loop fingerprints)",
        removal="when vLLM exposes a batched fill hook on StructuredOutputBackend",
        apply=lambda mod: install(mod.StructuredOutputManager),
    ))


_register()
