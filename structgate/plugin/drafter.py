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

Modes (``STRUCTGATE_FORCED_DRAFTS``, read at call time in the engine process)
----------------------------------------------------------------------------
* ``tokens`` (default once the ``--speculative-config`` above is given; also ``1``/``on``/``true``):
  the exact drafts above. With temperature > 0 and a per-request ``seed``, the worker side also
  keeps each seeded request's random stream aligned with a run without drafts (see *Seeded
  sampling*), so the sampled tokens are identical on vs off.
* ``bytes`` (opt-in, issue 12 item 3): drafts = the canonical tokenization of the *safe* prefix of
  the grammar-forced bytes (:func:`structgate.jump_forward.safe_forced_draft`, llguidance's rule:
  trailing tokens a longer allowed token could extend are withheld). These are not necessarily
  what the constrained sampler picks (another tokenization of the same bytes is allowed too), so
  vLLM's rejection sampler decides: greedy accepts a draft only where it is the masked argmax;
  sampling accepts it with the target's masked probability and otherwise samples the recovered
  token — standard speculative sampling with a deterministic drafter, so the output distribution
  is the target's (unlike llguidance's or SGLang's forcing of re-tokenized bytes, which appends
  them without the model and does change it). What this mode does change: drafts get rejected
  (the acceptance rate is measured in ``bench/forced_drafts.py``) and seeded random streams are
  not aligned (same distribution, different samples than without drafts).
* ``0``/``off``/``false``/``no``: the scheduler side is off (the proposer still proposes nothing,
  so the server runs without drafts).

Seeded sampling (worker side; ledger entry ``forced-drafts-seeded``, mode ``tokens`` only)
----------------------------------------------------------------------------------------
Without drafts, each decoding step of a seeded request draws from its ``torch.Generator`` once in
vLLM's sampler (CPU: ``TopKTopPSampler.forward_cpu`` draws one ``randint`` seed for
``fused_gumbel_argmax``; elsewhere ``random_sample`` draws a vocab-wide ``exponential_``), forced
steps included (the draw is made, then the mask leaves one candidate). With drafts, a step
verifying ``n`` drafts draws once for the bonus token (``RejectionSampler.forward`` samples it
first, with the generator in the state the *first* draft's step would have had), then ``n``
uniforms (``generate_uniform_probs``) and one vocab-wide ``exponential_`` (``sample_recovered_tokens``)
for the verification. So the bonus token — the free token after the forced run — would use a
different random number than without drafts, and every later token too: identity fails although
each draft is accepted with probability 1. The worker side therefore (only for requests with a
generator and at least one draft): advances the generator by ``n`` sampler draws before the bonus
token is sampled (the draws the ``n`` forced steps make without drafts), and restores its state
after the verification draws (they cannot change the outcome: a forced draft's masked target
probability is exactly 1.0, so ``1.0 >= uniform`` always accepts it). It is installed by
:class:`ForcedTokenProposer` (constructed by vLLM's model runner in the worker process), only in
mode ``tokens`` and only for sampler paths it recognises; on any other it logs a warning and the
streams stay unaligned (outputs still valid and exact in distribution).
"""
from __future__ import annotations

import inspect
import json
import logging
import os
from typing import Any

from ..errors import StructgateError
from .grammar_failure import FailedMatcher, fail_grammar

__all__ = ["PROPOSER", "SPECULATIVE_CONFIG", "ENV_FORCED_DRAFTS", "MODES", "ForcedTokenProposer", "speculative_config",
           "forced_drafts_enabled", "forced_drafts_mode", "update_draft_token_ids", "install", "uninstall",
           "install_seeded_alignment", "stats"]

logger = logging.getLogger("structgate.plugin")

#: the ``custom_class`` path of the proposer
PROPOSER = "structgate.plugin.drafter.ForcedTokenProposer"
ENV_FORCED_DRAFTS = "STRUCTGATE_FORCED_DRAFTS"
_OFF = ("0", "false", "no", "off")
_TOKENS = ("", "1", "true", "yes", "on", "tokens")
#: values of :data:`ENV_FORCED_DRAFTS` after normalisation
MODES = ("tokens", "bytes", "off")

#: counters of this process (tests, benchmark): ``steps`` (requests given drafts), ``tokens``
stats: dict[str, int] = {}


def speculative_config(num_speculative_tokens: int = 8) -> dict:
    """The ``--speculative-config`` that turns forced-token drafts on."""
    return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": int(num_speculative_tokens)}


#: ``--speculative-config`` JSON with 8 draft slots
SPECULATIVE_CONFIG: str = json.dumps(speculative_config(8))


def forced_drafts_mode(*, strict: bool = False) -> str:
    """The mode of ``STRUCTGATE_FORCED_DRAFTS``: ``"tokens"`` (default, exact forced tokens),
    ``"bytes"`` (safe re-tokenized forced bytes, verified by vLLM's rejection sampler) or ``"off"``.

    Raises
    ------
    ValueError
        ``strict`` and the variable holds anything else (the proposer checks at start-up; at call
        time an unknown value reads as ``"tokens"``).
    """
    raw = os.environ.get(ENV_FORCED_DRAFTS, "tokens").strip().lower()
    if raw in _OFF:
        return "off"
    if raw == "bytes":
        return "bytes"
    if raw not in _TOKENS and strict:
        raise ValueError(f"{ENV_FORCED_DRAFTS}={raw!r}: expected tokens (or 1/on/true), bytes, or 0/off/false/no")
    return "tokens"


def forced_drafts_enabled() -> bool:
    """True unless ``STRUCTGATE_FORCED_DRAFTS`` is 0/false/no/off."""
    return forced_drafts_mode() != "off"


class ForcedTokenProposer:
    """vLLM ``custom_class`` proposer: proposes no token itself (the scheduler side does, see the
    module docstring). ``propose`` returns one empty draft list per request of the batch."""

    def __init__(self, vllm_config: Any) -> None:
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)
        self.mode = forced_drafts_mode(strict=True)
        install_expand_fix()
        if self.mode == "tokens":
            install_seeded_alignment()

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


def _forced_for(scheduler: Any, request: Any, k: int, mode: str = "tokens") -> list[int] | None:
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
        if m.is_terminated() or isinstance(m, FailedMatcher):
            return []
        try:
            if mode == "bytes":
                from ..jump_forward import safe_forced_draft

                return safe_forced_draft(m, n)
            return m.forced_tokens(n)
        except StructgateError as e:  # a limit met walking the grammar: this request alone fails
            fail_grammar(grammar, e, request.request_id)  # (re-raises what is not a request's failure)
            return []


def update_draft_token_ids(self: Any, draft_token_ids: Any) -> None:
    """Replacement of ``Scheduler.update_draft_token_ids``: the original, then forced-token drafts
    for the structured requests of structgate backends (see the module docstring)."""
    _ORIG["update_draft_token_ids"](self, draft_token_ids)
    k = _is_ours(self)
    if not k:
        return
    mode = forced_drafts_mode()
    if mode == "off":
        return
    total = 0
    per_backend: dict[str, int] = {}
    for req_id in draft_token_ids.req_ids:
        request = self.requests.get(req_id)
        if request is None or request.is_finished() or request.is_prefill_chunk:
            continue
        forced = _forced_for(self, request, k, mode)
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


# -- seeded sampling: the worker side (mode "tokens") ---------------------------------------------
_SEEDED: dict[str, Any] = {}


def _sampler_draw(sampler: Any):
    """``draw(generator, vocab_size)`` consuming a per-request generator exactly as one step of
    vLLM 0.32's ``Sampler`` does for a seeded, non-greedy request, or None for a path not
    recognised. CPU (``TopKTopPSampler.forward_cpu`` without fp64 Gumbel noise): one
    ``torch.randint(0, 2**31, (1,))``; the PyTorch-native path (``forward_native``, which
    ``forward_cuda``/``forward_hip``/``forward_xpu`` fall back to whenever a request has a
    generator, and ``forward_cpu`` with fp64 noise): a vocab-wide ``exponential_``."""
    import torch
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    tks = getattr(sampler, "topk_topp_sampler", None)
    fwd = getattr(getattr(tks, "forward", None), "__func__", None)
    fp64 = bool(getattr(tks, "use_fp64_gumbel", False))
    if fwd is TopKTopPSampler.forward_cpu and not fp64:
        def draw(g, vocab_size):
            torch.randint(0, 2**31, (1,), generator=g, dtype=torch.long)
        return draw
    if fwd in (TopKTopPSampler.forward_native, TopKTopPSampler.forward_cuda, TopKTopPSampler.forward_cpu,
               getattr(TopKTopPSampler, "forward_hip", None), getattr(TopKTopPSampler, "forward_xpu", None)):
        dtype = torch.float64 if fp64 else torch.float32

        def draw(g, vocab_size):
            torch.empty(vocab_size, dtype=dtype, device=g.device).exponential_(generator=g)
        return draw
    return None


def _seeded_rows(sampling_metadata: Any, num_draft_tokens: Any) -> list[tuple[int, Any, int]]:
    """``(row, generator, n_drafts)`` of the seeded, non-greedy requests with drafts this step."""
    gens = getattr(sampling_metadata, "generators", None)
    if not gens or getattr(sampling_metadata, "all_greedy", False):
        return []
    temp = getattr(sampling_metadata, "temperature", None)
    out = []
    for i, g in gens.items():
        n = int(num_draft_tokens[i]) if i < len(num_draft_tokens) else 0
        if n <= 0:
            continue
        if temp is not None and float(temp[i]) == 0.0:
            continue
        out.append((i, g, n))
    return out


def _aligned_forward(self, metadata, draft_probs, logits, sampling_metadata):
    """``RejectionSampler.forward`` with each seeded request's generator advanced by its number of
    (forced) drafts before the bonus token is sampled (module docstring, *Seeded sampling*)."""
    orig = _SEEDED["forward"]
    if forced_drafts_mode() != "tokens" or getattr(self, "synthetic_mode", False):
        return orig(self, metadata, draft_probs, logits, sampling_metadata)
    rows = _seeded_rows(sampling_metadata, metadata.num_draft_tokens)
    if rows:
        draw = _SEEDED.get("draw")
        if draw is None:
            draw = _SEEDED["draw"] = _sampler_draw(self.sampler) or False
            if draw is False:
                logger.warning("forced drafts: vLLM's sampler path %r is not one structgate aligns; seeded "
                               "requests keep valid, exactly distributed but different samples with drafts on",
                               getattr(getattr(self.sampler, "topk_topp_sampler", None), "forward", None))
        if draw:
            vocab_size = int(logits.shape[-1])
            for _, g, n in rows:
                for _ in range(n):
                    draw(g, vocab_size)
            stats["seeded_aligned"] = stats.get("seeded_aligned", 0) + sum(n for _, _, n in rows)
    return orig(self, metadata, draft_probs, logits, sampling_metadata)


def _aligned_rejection_sample(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                              target_logits, bonus_token_ids, sampling_metadata, *args, **kwargs):
    """vLLM's ``rejection_sample`` with the seeded requests' generator states restored after the
    verification draws (a forced draft is accepted whatever the uniform)."""
    orig = _SEEDED["rejection_sample"]
    saved = []
    if forced_drafts_mode() == "tokens" and _SEEDED.get("draw") and not (args[:1] or [kwargs.get("synthetic_mode")])[0]:
        saved = [(g, g.get_state()) for _, g, _ in _seeded_rows(sampling_metadata, num_draft_tokens)]
    try:
        return orig(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                    target_logits, bonus_token_ids, sampling_metadata, *args, **kwargs)
    finally:
        for g, st in saved:
            g.set_state(st)


def _torch_expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
    """vLLM's ``expand_batch_to_tokens`` in PyTorch: ``x[i]`` repeated for request ``i``'s tokens
    (``cu_num_tokens`` cumulative), ``replace_from`` values replaced by ``replace_to``; same dtype."""
    import torch

    counts = torch.diff(cu_num_tokens.to(torch.long), prepend=cu_num_tokens.new_zeros(1, dtype=torch.long))
    v = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    return torch.repeat_interleave(v, counts, output_size=int(num_tokens))


def expand_is_broken(module: Any = None) -> bool:
    """True when vLLM's ``expand_batch_to_tokens`` does not expand a float tensor correctly.

    vLLM 0.32's CPU override of ``expand_kernel`` (``vllm/utils/cpu_triton_utils.py``,
    ``_expand_kernel_impl``) passes ``_ensure_int64(output)`` and ``_ensure_int64(input_val)`` to
    the C++ op: for the float32 temperature (and top-p) of the rejection sampler both are int64
    *copies*, so the result never reaches ``output`` (``new_empty``: uninitialised memory) and the
    input is truncated. The target logits at every draft position are then divided by garbage —
    NaN or wrong probabilities, so drafts are rejected at random and recovered tokens come from a
    wrong distribution (greedy is unaffected: it skips the temperature)."""
    import torch

    if module is None:
        import vllm.v1.sample.rejection_sampler as module
    try:
        got = module.expand_batch_to_tokens(torch.tensor([0.5, 0.0, 0.25]), torch.tensor([2, 3, 5], dtype=torch.int32),
                                            5, replace_from=0, replace_to=1)
    except Exception:  # noqa: BLE001 - a kernel that cannot run here is not ours to fix
        return False
    return got.tolist() != [0.5, 0.5, 1.0, 0.25, 0.25]


def install_expand_fix(module: Any = None) -> bool:
    """Replace ``rejection_sampler.expand_batch_to_tokens`` by :func:`_torch_expand_batch_to_tokens`
    where :func:`expand_is_broken` (vLLM 0.32 on CPU); ledger entry ``cpu-spec-temperature-expand``.
    Returns whether the fix is in place."""
    from . import ledger

    if module is None:
        import vllm.v1.sample.rejection_sampler as module
    cur = getattr(module, "expand_batch_to_tokens", None)
    if cur is None or ledger.is_marked(cur):
        return cur is not None
    if not expand_is_broken(module):
        return False
    module.expand_batch_to_tokens = ledger.mark(_torch_expand_batch_to_tokens, cur, "cpu-spec-temperature-expand")
    logger.info("forced drafts: vLLM's CPU expand_batch_to_tokens loses float inputs; replaced by a PyTorch version")
    return True


def install_seeded_alignment(module: Any = None) -> bool:
    """Patch ``RejectionSampler.forward`` and ``rejection_sample`` of
    ``vllm.v1.sample.rejection_sampler`` (idempotent) for seeded sampling identical on vs off.

    Returns False (with a warning; drafts stay exact, seeded samples differ from a run without
    drafts) where vLLM's code changed: a signature, or ``forward`` no longer sampling the bonus
    token before calling ``rejection_sample``, or the draws in ``generate_uniform_probs`` /
    ``sample_recovered_tokens``.
    """
    from . import ledger

    if module is None:
        import vllm.v1.sample.rejection_sampler as module
    cls = getattr(module, "RejectionSampler", None)
    if cls is not None and ledger.is_marked(cls.__dict__.get("forward")):
        return True
    try:
        sym = "vllm.v1.sample.rejection_sampler"
        fwd = ledger.require_attr(cls, "forward", sym + ".RejectionSampler.forward")
        ledger.require_signature(fwd, ("self", "metadata", "draft_probs", "logits", "sampling_metadata"),
                                 sym + ".RejectionSampler.forward")
        ledger.require_source(fwd, ("bonus_sampler_output = self.sampler(", "rejection_sample("),
                              sym + ".RejectionSampler.forward")
        rs = ledger.require_attr(module, "rejection_sample", sym + ".rejection_sample")
        params = ("draft_token_ids", "num_draft_tokens", "max_spec_len", "cu_num_draft_tokens", "draft_probs",
                  "target_logits", "bonus_token_ids", "sampling_metadata", "synthetic_mode",
                  "synthetic_conditional_rates", "use_fp64_gumbel")
        if "fly_window_size" in inspect.signature(rs).parameters:  # 0.33: keyword options after these
            params += ("fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k")
        ledger.require_signature(rs, params, sym + ".rejection_sample")
        ledger.require_source(ledger.require_attr(module, "generate_uniform_probs", sym + ".generate_uniform_probs"),
                              ("generator=generator",), sym + ".generate_uniform_probs")
        ledger.require_source(ledger.require_attr(module, "sample_recovered_tokens", sym + ".sample_recovered_tokens"),
                              ("exponential_(generator=generator)",), sym + ".sample_recovered_tokens")
    except ledger.VllmPatchError as e:
        logger.warning("forced drafts: seeded-sampling alignment not installed (%s)", e)
        return False
    _SEEDED["forward"], _SEEDED["rejection_sample"] = fwd, rs

    def forward(self, metadata, draft_probs, logits, sampling_metadata):
        return _aligned_forward(self, metadata, draft_probs, logits, sampling_metadata)

    forward.__doc__ = _aligned_forward.__doc__
    cls.forward = ledger.mark(forward, fwd, "forced-drafts-seeded")
    module.rejection_sample = ledger.mark(_aligned_rejection_sample, rs, "forced-drafts-seeded")
    return True


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
        versions="0.32.0, 0.33.0",
        removal="when vLLM's proposer interface can see the structured-output grammars",
        apply=lambda mod: install(mod.Scheduler),
    ))
    register_patch(Patch(
        name="forced-drafts-seeded",
        module="vllm.v1.sample.rejection_sampler",
        target="RejectionSampler.forward, rejection_sample",
        why="with drafts, vLLM draws a seeded request's random numbers in another order and number than "
            "without (bonus token first, then verification uniforms and noise), so seeded samples after a "
            "forced run differ from a run without drafts although every forced draft is accepted",
        how="applied by ForcedTokenProposer.__init__ in the worker process (mode tokens only): forward "
            "advances each seeded non-greedy request's generator by its number of drafts (one sampler "
            "draw each, as the forced steps make without drafts) before the bonus token; rejection_sample "
            "restores those generators' states after its verification draws. Other requests unchanged.",
        versions="0.32.0, 0.33.0",
        removal="when vLLM draws per-position random numbers keyed by (seed, position) in both paths",
        apply=lambda mod: install_seeded_alignment(mod),
        trigger="manual",
    ))
    register_patch(Patch(
        name="cpu-spec-temperature-expand",
        module="vllm.v1.sample.rejection_sampler",
        target="expand_batch_to_tokens",
        why="vLLM 0.32's CPU override of expand_kernel converts the float temperature / top-p tensors to "
            "int64 copies, so the per-draft temperature is uninitialised memory: with temperature > 0 the "
            "rejection sampler verifies drafts against NaN or wrong probabilities",
        how="applied by ForcedTokenProposer.__init__ in the worker process, only where a behavioural check "
            "(expand [0.5, 0, 0.25] over [2, 1, 2] tokens) fails: a PyTorch repeat_interleave with the "
            "same replace_from/replace_to semantics",
        versions="0.32.0 (CPU)",
        removal="when vLLM's CPU expand kernel keeps float inputs (the behavioural check then passes)",
        apply=lambda mod: install_expand_fix(mod),
        trigger="manual",
    ))


_register()
