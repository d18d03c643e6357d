"""Grammar-forced tokens as speculative drafts in vLLM (jump-forward that keeps the distribution).

Where a structured request's mask allows **exactly one** token and not EOS, the constrained sampler
must pick that token, whatever the logits. Proposing it as a speculative draft is therefore
accepted with probability 1 by vLLM's verifier (the target's masked distribution puts all its mass
on it, greedy or sampled), and every output is unchanged; the step just emits more than one token.
The run of such tokens from a request's current state is
:meth:`structgate.backends.interface.Matcher.forced_tokens`.

Switch
------
One documented ``--speculative-config`` turns it on::

    vllm serve MODEL --structured-output-backend native \\
        --speculative-config '{"method": "custom_class",
                               "model": "structgate.plugin.drafter.ForcedTokenProposer",
                               "num_speculative_tokens": 8}'

(:data:`SPECULATIVE_CONFIG` is that JSON.) Requests without a constraint get no drafts (they run
exactly as without speculative decoding, one token a step); so do requests of vLLM's own backends,
requests whose reasoning is still open, and requests in a prefill chunk.

How (a scheduler-side path; ledger entry ``forced-drafts``)
-----------------------------------------------------------
vLLM 0.32's ``custom_class`` proposer runs in the worker, after sampling, and sees only token
arrays — not the grammars, which live in the engine core's ``StructuredOutputManager``. After each
step the engine core hands the worker's drafts to ``Scheduler.update_draft_token_ids``, which
validates them against each request's grammar (``validate_tokens``) and stores them in
``request.spec_token_ids`` for the next ``schedule()``; by then ``update_from_output`` has accepted
the step's tokens into the grammar. So:

* the worker side, :class:`ForcedTokenProposer`, proposes nothing (an empty list per request) — it
  only makes vLLM allocate ``num_speculative_tokens`` draft slots, build the rejection sampler and
  call ``update_draft_token_ids`` (``custom_class`` disables async scheduling, so that call happens
  after every step);
* the scheduler side (this module's patch of ``Scheduler.update_draft_token_ids``) calls the
  original, then for every structured request of a structgate backend whose grammar is advancing
  sets ``request.spec_token_ids = matcher.forced_tokens(k)``, ``k = min(num_speculative_tokens,
  tokens left before max_tokens - 1)``, under the scheduler hook's per-request lock.

From there vLLM's speculative path runs unchanged and composes with structgate's hooks: the
scheduler hook fills the draft positions' rows (fill, accept the draft, next row, roll back), the
sampler hook masks them, the rejection sampler accepts them, ``accept_tokens`` advances the
grammar, and rejected drafts (none, by construction) would be rolled back as for any drafter.

Counters: ``structgate_forced_draft_tokens`` (/metrics, ``backend`` label; see
:mod:`structgate.plugin.metrics`), the stats-file event ``forced_draft`` (``STRUCTGATE_STATS_FILE``)
and :data:`stats` in the engine process. vLLM's own ``vllm:spec_decode_num_draft_tokens`` /
``vllm:spec_decode_num_accepted_tokens`` count the same drafts and show they were all accepted.

``STRUCTGATE_FORCED_DRAFTS=0`` turns the scheduler side off at run time (read at call time; the
proposer then still proposes nothing, so the server runs without drafts).
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any

__all__ = ["PROPOSER", "SPECULATIVE_CONFIG", "ENV_FORCED_DRAFTS", "ForcedTokenProposer", "speculative_config",
           "forced_drafts_enabled", "update_draft_token_ids", "install", "uninstall", "stats"]

logger = logging.getLogger("structgate.plugin")

#: the ``custom_class`` path of the proposer
PROPOSER = "structgate.plugin.drafter.ForcedTokenProposer"
ENV_FORCED_DRAFTS = "STRUCTGATE_FORCED_DRAFTS"
_OFF = ("0", "false", "no", "off")

#: counters of this process (tests, benchmark): ``steps`` (requests given drafts), ``tokens``
stats: dict[str, int] = {}


def speculative_config(num_speculative_tokens: int = 8) -> dict:
    """The ``--speculative-config`` that turns forced-token drafts on."""
    return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": int(num_speculative_tokens)}


#: ``--speculative-config`` JSON with 8 draft slots
SPECULATIVE_CONFIG: str = json.dumps(speculative_config(8))


def forced_drafts_enabled() -> bool:
    """True unless ``STRUCTGATE_FORCED_DRAFTS`` is 0/false/no/off."""
    return os.environ.get(ENV_FORCED_DRAFTS, "1").strip().lower() not in _OFF


class ForcedTokenProposer:
    """vLLM ``custom_class`` proposer: proposes no token itself (the scheduler side does, see the
    module docstring). ``propose`` returns one empty draft list per request of the batch."""

    def __init__(self, vllm_config: Any) -> None:
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)

    def load_model(self, *args: Any, **kwargs: Any) -> None:  # no draft model
        pass

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None) -> list[list[int]]:
        return [[] for _ in range(len(sampled_token_ids))]


def _is_ours(scheduler: Any) -> int:
    """``num_speculative_tokens`` when this scheduler's drafter is :class:`ForcedTokenProposer`, else 0."""
    cached = getattr(scheduler, "_structgate_forced_k", None)
    if cached is not None:
        return cached
    spec = getattr(getattr(scheduler, "vllm_config", None), "speculative_config", None)
    k = 0
    if spec is not None and getattr(spec, "method", None) == "custom_class" and getattr(spec, "model", None) == PROPOSER:
        k = int(getattr(spec, "num_speculative_tokens", 0) or 0)
    try:
        scheduler._structgate_forced_k = k
    except AttributeError:  # pragma: no cover
        pass
    return k


def _forced_for(scheduler: Any, request: Any, k: int) -> list[int] | None:
    """The forced tokens to draft for ``request``, or None when it is not ours to draft."""
    from .scheduler_hook import _slot, sg_matcher

    if not getattr(request, "use_structured_output", False):
        return None
    sreq = request.structured_output_request
    grammar = getattr(sreq, "grammar", None) if sreq is not None else None
    m = sg_matcher(grammar)
    if m is None:
        return None
    mgr = scheduler.structured_output_manager
    # reasoning still open (the grammar is not applied yet): vLLM answers grammar_start 1, not 0
    if mgr._get_constraint_bounds(request, [])[0] != 0:
        return None
    left = int(request.max_tokens) - int(request.num_output_tokens) - 1  # the bonus token takes one
    n = min(k, left)
    if n <= 0:
        return []
    with _slot(grammar).lock:
        if m.is_terminated():
            return []
        return m.forced_tokens(n)


def update_draft_token_ids(self: Any, draft_token_ids: Any) -> None:
    """Replacement of ``Scheduler.update_draft_token_ids``: the original, then forced-token drafts
    for the structured requests of structgate backends (see the module docstring)."""
    _ORIG["update_draft_token_ids"](self, draft_token_ids)
    k = _is_ours(self)
    if not k or not forced_drafts_enabled():
        return
    total = 0
    per_backend: dict[str, int] = {}
    for req_id in draft_token_ids.req_ids:
        request = self.requests.get(req_id)
        if request is None or request.is_finished() or request.is_prefill_chunk:
            continue
        forced = _forced_for(self, request, k)
        if forced is None:
            continue
        request.spec_token_ids = forced
        if forced:
            total += len(forced)
            g = request.structured_output_request.grammar
            name = getattr(g, "backend_name", "?")
            per_backend[name] = per_backend.get(name, 0) + len(forced)
            stats["steps"] = stats.get("steps", 0) + 1
    if total:
        stats["tokens"] = stats.get("tokens", 0) + total
        from . import metrics
        from .bridge import record

        for name, n in per_backend.items():
            metrics.record_forced_drafts(name, n)
            record("forced_draft", name, n)


_ORIG: dict[str, Any] = {}


def install(scheduler_cls: Any = None) -> None:
    """Patch ``Scheduler.update_draft_token_ids`` (idempotent; checks the signature and that the
    scheduler still stores validated drafts in ``request.spec_token_ids``).

    Raises
    ------
    VllmPatchError
        The method is missing, its signature changed, or its body no longer assigns
        ``request.spec_token_ids`` through ``structured_output_manager.validate_tokens``.
    """
    from . import ledger

    if scheduler_cls is None:
        from vllm.v1.core.sched.scheduler import Scheduler as scheduler_cls
    sym = "vllm.v1.core.sched.scheduler.Scheduler.update_draft_token_ids"
    cur = ledger.require_attr(scheduler_cls, "update_draft_token_ids", sym)
    if ledger.is_marked(cur):
        return
    ledger.require_signature(cur, ("self", "draft_token_ids"), sym)
    ledger.require_source(cur, ("request.spec_token_ids", "validate_tokens", "is_prefill_chunk"), sym)
    from vllm.v1.structured_output import StructuredOutputManager

    ledger.require_attr(StructuredOutputManager, "_get_constraint_bounds",
                        "vllm.v1.structured_output.StructuredOutputManager._get_constraint_bounds")
    _ORIG["update_draft_token_ids"] = cur

    def wrapper(self, draft_token_ids):
        return update_draft_token_ids(self, draft_token_ids)

    wrapper.__name__ = "update_draft_token_ids"
    wrapper.__qualname__ = "Scheduler.update_draft_token_ids"
    wrapper.__doc__ = update_draft_token_ids.__doc__
    scheduler_cls.update_draft_token_ids = ledger.mark(wrapper, cur, "forced-drafts")


def uninstall(scheduler_cls: Any = None) -> None:
    """Restore the original method (tests)."""
    if scheduler_cls is None:
        from vllm.v1.core.sched.scheduler import Scheduler as scheduler_cls
    cur = scheduler_cls.__dict__.get("update_draft_token_ids")
    orig = getattr(cur, "__structgate_original__", None)
    if orig is not None:
        scheduler_cls.update_draft_token_ids = orig


def _register() -> None:
    try:
        from .ledger import Patch, register_patch
    except ImportError:  # pragma: no cover
        return
    register_patch(Patch(
        name="forced-drafts",
        module="vllm.v1.core.sched.scheduler",
        target="Scheduler.update_draft_token_ids",
        why="vLLM's custom_class proposer runs in the worker and cannot see the grammars; the forced "
            "tokens of a structured request are known only to the engine core's grammar objects",
        how="wraps the method: the original (drafts from the worker, validated against the grammar), "
            "then, only when --speculative-config names structgate.plugin.drafter.ForcedTokenProposer, "
            "request.spec_token_ids = matcher.forced_tokens(k) for structured requests of structgate "
            "backends (under the scheduler hook's per-request lock); every other request and every "
            f"other drafter unchanged. {ENV_FORCED_DRAFTS}=0 disables.",
        versions="0.32.0",
        removal="when vLLM's proposer interface can see the structured-output grammars",
        apply=lambda mod: install(mod.Scheduler),
    ))


_register()
