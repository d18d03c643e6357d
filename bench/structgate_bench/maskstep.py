"""Engine-core mask time per step: vLLM's ``StructuredOutputManager`` driven with B concurrent
structured requests, comparing vLLM's own loop (its xgrammar backend) with structgate backends
through the scheduler hook (:mod:`structgate.plugin.scheduler_hook`).

What is measured
----------------
A real ``vllm.v1.structured_output.StructuredOutputManager`` (constructed with a minimal config:
``max_num_seqs``, no tokenizer load) owns the bitmask buffer. Each of ``B`` requests walks a valid
JSON instance of one of :data:`SCHEMAS` (``json.dumps`` text tokenised with the vocabulary's own
encoder), starting at a different offset so the batch is spread over many grammar states. One *step*
is what the engine core does per decoding step:

* ``grammar_bitmask(requests, ids, {})`` — the mask time (the number reported), then
* ``accept_tokens(request, [next token])`` for every request (reported separately; with the hook it
  also schedules the background prefetch of the next mask, which runs while the next step's
  "forward pass" sleeps ``--forward-ms``).

A request that reaches the end of its instance is reset to the start (same grammar), so the batch
stays at B. ``cold`` = the first pass over the trajectories (rows not cached yet, compile caches
warm), ``warm`` = a second pass over the same trajectories.

Systems: ``vllm-xgrammar`` (vLLM's ``XgrammarBackend`` and loop, unpatched: the baseline),
``native``, ``structgate-xgrammar``, ``structgate-llguidance``, ``structgate-outlines-core`` (structgate
backends behind :class:`HarnessBackend` (a vLLM backend exposing ``.sg_backend``), requests with
the plugin's real ``StructgateVllmGrammar``, through the hook). The hook is the system under test;
``--no-hook`` runs vLLM's loop on the structgate backends for comparison.
"""
from __future__ import annotations

import gc
import json
import statistics
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

__all__ = ["SCHEMAS", "MatcherGrammar", "HarnessBackend", "make_manager", "make_request", "run_system",
           "run_maskstep", "format_table", "SYSTEMS"]

#: the JSON schemas of the workload, each with two valid instances (json.dumps text is walked)
SCHEMAS: list[tuple[dict, list[Any]]] = [
    ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                      "email": {"type": "string"}},
      "required": ["name", "age", "email"]},
     [{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org"},
      {"name": "Grace Brewster Murray Hopper", "age": 85, "email": "grace@navy.mil"}]),
    ({"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"},
                                                                         "maxItems": 6},
                                      "active": {"type": "boolean"}},
      "required": ["id", "tags", "active"]},
     [{"id": 1234567, "tags": ["alpha", "beta", "gamma delta"], "active": True},
      {"id": 7, "tags": [], "active": False}]),
    ({"type": "object", "properties": {
        "city": {"type": "string"},
        "location": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                     "required": ["lat", "lon"]},
        "kind": {"enum": ["home", "work", "other"]}},
      "required": ["city", "location", "kind"]},
     [{"city": "Zürich", "location": {"lat": 47.3769, "lon": 8.5417}, "kind": "work"},
      {"city": "São Paulo", "location": {"lat": -23.55, "lon": -46.63}, "kind": "home"}]),
    ({"type": "object", "properties": {"title": {"type": "string", "maxLength": 80},
                                      "rating": {"type": "integer", "minimum": 1, "maximum": 5},
                                      "review": {"type": "string"}},
      "required": ["title", "rating", "review"]},
     [{"title": "A decent espresso machine", "rating": 4,
       "review": "Heats up quickly, the steam wand is weak; good value for the price."},
      {"title": "Broken on arrival", "rating": 1, "review": "Box was crushed."}]),
]

SYSTEMS = ("vllm-xgrammar", "native", "structgate-xgrammar", "structgate-llguidance", "structgate-outlines-core")


# -- the bridge-shaped harness --------------------------------------------------------------------
def _vllm_types():
    from vllm.v1.structured_output.backend_types import StructuredOutputBackend, StructuredOutputGrammar

    return StructuredOutputBackend, StructuredOutputGrammar


def _make_classes():
    SOB, SOG = _vllm_types()

    class MatcherGrammar(SOG):
        """A vLLM ``StructuredOutputGrammar`` over a structgate Matcher (``.matcher``), shaped like
        the plugin bridge's grammar: the scheduler hook only relies on ``.matcher``.

        An engine that raises in ``advance``/``validate``/``fill_bitmask`` (any ``Exception`` but
        ``MemoryError``) fails this grammar alone, as :func:`structgate_bench.worker._walk` records
        a failing item and goes on: :attr:`error` holds ``"Type: message"`` (500 characters at
        most), ``accept_tokens`` returns False, ``validate_tokens`` returns ``[]``, the mask row is
        left as it was, and the grammar reports itself terminated from then on."""

        def __init__(self, matcher: Any) -> None:
            self.matcher = matcher
            #: the first engine failure (``"Type: message"``), None while there was none
            self.error: str | None = None

        def _failed(self, e: Exception) -> None:
            if self.error is None:
                self.error = f"{type(e).__name__}: {e}"[:500]

        def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
            if self.error is not None:
                return False
            try:
                if self.matcher.is_terminated():
                    return True
                return self.matcher.advance(list(tokens))
            except MemoryError:
                raise
            except Exception as e:  # an engine failing mid-step: recorded, the run goes on
                self._failed(e)
                return False

        def validate_tokens(self, tokens: list[int]) -> list[int]:
            if self.error is not None:
                return []
            try:
                return list(tokens[: self.matcher.validate(list(tokens))])
            except MemoryError:
                raise
            except Exception as e:
                self._failed(e)
                return []

        def rollback(self, num_tokens: int) -> None:
            if self.error is None:
                self.matcher.rollback(num_tokens)

        def fill_bitmask(self, bitmask, batch_index: int) -> None:
            if self.error is not None:
                return
            try:
                self.matcher.fill_bitmask(bitmask, batch_index)
            except MemoryError:
                raise
            except Exception as e:
                self._failed(e)

        def is_terminated(self) -> bool:
            if self.error is not None:
                return True
            try:
                return self.matcher.is_terminated()
            except MemoryError:
                raise
            except Exception as e:
                self._failed(e)
                return True

        def reset(self) -> None:
            self.matcher.reset()

    class HarnessBackend(SOB):
        """A vLLM ``StructuredOutputBackend`` exposing a structgate backend as ``.sg_backend``."""

        def __init__(self, sg_backend: Any) -> None:
            self.sg_backend = sg_backend
            self.vocab_size = sg_backend.vocab.vocab_size
            self.vllm_config = None
            self.tokenizer = None

        def compile_grammar(self, request_type, grammar_spec, stop_token_ids=None):  # pragma: no cover
            raise NotImplementedError("the harness compiles with structgate directly")

        def allocate_token_bitmask(self, max_num_seqs: int):
            import torch

            return torch.full((max_num_seqs, (self.vocab_size + 31) // 32), -1, dtype=torch.int32)

        def destroy(self) -> None:
            pass

    return MatcherGrammar, HarnessBackend


_CLASSES: tuple | None = None


def __getattr__(name: str):  # MatcherGrammar / HarnessBackend are built lazily (vllm import)
    global _CLASSES
    if name in ("MatcherGrammar", "HarnessBackend"):
        if _CLASSES is None:
            _CLASSES = _make_classes()
        return _CLASSES[0] if name == "MatcherGrammar" else _CLASSES[1]
    raise AttributeError(name)


def fake_vllm_config(max_num_seqs: int, num_speculative_tokens: int = 0, *, disable_any_whitespace: bool = False):
    """The few ``VllmConfig`` fields ``StructuredOutputManager`` and ``XgrammarBackend`` read."""
    spec = SimpleNamespace(num_speculative_tokens=num_speculative_tokens) if num_speculative_tokens else None
    return SimpleNamespace(
        parallel_config=SimpleNamespace(distributed_executor_backend="mp"),
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs),
        model_config=SimpleNamespace(skip_tokenizer_init=True, is_diffusion=False,
                                     hf_config=SimpleNamespace(model_type="llama")),
        structured_outputs_config=SimpleNamespace(reasoning_parser_plugin="", reasoning_parser="",
                                                  enable_in_reasoning=False,
                                                  disable_any_whitespace=disable_any_whitespace),
        speculative_config=spec,
        num_speculative_tokens=num_speculative_tokens,
    )


def make_manager(backend: Any, max_num_seqs: int, num_speculative_tokens: int = 0):
    """A real ``StructuredOutputManager`` with ``backend`` set (no tokenizer load)."""
    from vllm.v1.structured_output import StructuredOutputManager

    mgr = StructuredOutputManager(fake_vllm_config(max_num_seqs, num_speculative_tokens))
    mgr.backend = backend
    return mgr


def make_request(req_id: str, grammar: Any):
    """The request fields the manager reads (``structured_output_request.grammar`` etc.)."""
    sor = SimpleNamespace(grammar=grammar, reasoning_ended=None, reasoner=None)
    return SimpleNamespace(request_id=req_id, structured_output_request=sor, use_structured_output=True,
                           all_token_ids=[], prompt_token_ids=[], sampling_params=None)


# -- building the systems -------------------------------------------------------------------------
@dataclass
class _System:
    name: str
    manager: Any
    new_grammar: Any  # schema index -> vLLM grammar object
    compile_s: float = 0.0
    error: str = ""


def _llama3_hf_tokenizer(vocab: Any):
    from transformers import AutoTokenizer

    from structgate import tokenizers as tk

    return AutoTokenizer.from_pretrained(str(tk.bundled_tokenizer_dir(vocab.name or "llama3")))


def build_system(name: str, vocab: Any, max_num_seqs: int, tokenizer: Any = None) -> _System:
    """Construct a system (see module doc); raises on unavailable engines."""
    if name == "vllm-xgrammar":
        from vllm.v1.structured_output.backend_types import StructuredOutputOptions
        from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

        if tokenizer is None:
            raise RuntimeError("vllm-xgrammar needs the HF tokenizer of the vocabulary")
        cfg = fake_vllm_config(max_num_seqs)
        be = XgrammarBackend(cfg, tokenizer=tokenizer, vocab_size=vocab.vocab_size)
        mgr = make_manager(be, max_num_seqs)
        compiled: dict[int, Any] = {}

        def new_grammar(i: int):
            return be.compile_grammar(StructuredOutputOptions.JSON, json.dumps(SCHEMAS[i][0]),
                                      stop_token_ids=set(vocab.eos_token_ids))
        t = time.perf_counter()
        for i in range(len(SCHEMAS)):
            compiled[i] = new_grammar(i)
        return _System(name, mgr, new_grammar, time.perf_counter() - t)
    from structgate.backends.interface import Constraint
    from structgate.backends.registry import get_backend

    sg = get_backend(name, vocab)
    HB = __getattr__("HarnessBackend")
    try:  # the plugin's real grammar class (what vLLM runs), else the harness's equivalent
        from structgate.plugin.bridge import StructgateVllmGrammar

        eos = frozenset(vocab.eos_token_ids)

        def wrap(m):
            return StructgateVllmGrammar(m, name, eos)
    except ImportError:  # pragma: no cover
        wrap = __getattr__("MatcherGrammar")
    mgr = make_manager(HB(sg), max_num_seqs)
    t = time.perf_counter()
    cgs = [sg.compile(Constraint.json_schema(s)) for s, _ in SCHEMAS]
    compile_s = time.perf_counter() - t
    return _System(name, mgr, lambda i: wrap(cgs[i].matcher()), compile_s)


# -- running ----------------------------------------------------------------------------------------
@dataclass
class StepTimes:
    """Per-step timings of one (system, B) run, milliseconds."""

    fill_cold_ms: list[float] = field(default_factory=list)
    fill_warm_ms: list[float] = field(default_factory=list)
    accept_ms: list[float] = field(default_factory=list)
    #: one ``"phase r<k> (schema i, token p): Type: message"`` per request whose engine failed
    #: (the request then restarts with a new grammar, the run goes on)
    errors: list[str] = field(default_factory=list)


def _trajectories(vocab: Any) -> list[tuple[int, list[int]]]:
    out = []
    for i, (_, instances) in enumerate(SCHEMAS):
        for inst in instances:
            out.append((i, vocab.encode(json.dumps(inst, ensure_ascii=False))))
    return out


def run_system(system: _System, vocab: Any, batch: int, steps: int, *, forward_ms: float = 0.0,
               seed: int = 0, check: bool = True) -> StepTimes:
    """Drive ``system``'s manager with ``batch`` requests for ``steps`` steps, twice (cold, warm).

    Parameters
    ----------
    forward_ms : float
        Sleep between the accepts and the next mask, milliseconds (the forward pass the prefetch
        overlaps with); 0 = back to back.
    check : bool
        Assert that the next token of every request is allowed by its row (the masks are right).
    """
    def failure(g, exc: BaseException | None) -> str | None:
        """The engine failure of grammar ``g`` (its recorded ``error``: :class:`MatcherGrammar`'s,
        or the plugin grammar's failed matcher's; else ``exc``), or None."""
        err = getattr(g, "error", None)
        if err is None:
            e = getattr(getattr(g, "matcher", None), "error", None)  # plugin: grammar_failure.FailedMatcher
            err = None if e is None else f"{type(e).__name__}: {e}"[:500]
        if err is None and exc is not None:
            err = f"{type(exc).__name__}: {exc}"[:500]
        return err

    def attempt(accept, *args) -> tuple[bool, BaseException | None]:
        """``(accepted, the engine's exception or None)`` of one accept call: an engine failing
        mid-step is recorded and its request starts over (a MemoryError still ends the run)."""
        try:
            return bool(accept(*args)), None
        except MemoryError:
            raise
        except Exception as e:  # noqa: BLE001 - any engine failure is that request's
            return False, e

    trajs = _trajectories(vocab)
    rng = np.random.default_rng(seed)
    plan = [(trajs[k % len(trajs)], int(rng.integers(0, len(trajs[k % len(trajs)][1])))) for k in range(batch)]
    times = StepTimes()
    mgr = system.manager
    for phase in ("cold", "warm"):
        reqs, ids, pos = {}, [], []
        for k, ((si, toks), off) in enumerate(plan):
            g = system.new_grammar(si)
            ok, exc = attempt(g.accept_tokens, f"r{k}", toks[:off]) if off else (True, None)
            if not ok:
                err = failure(g, exc)
                if err is None:
                    raise RuntimeError(f"{system.name}: instance prefix rejected (schema {si}, {off} tokens)")
                times.errors.append(f"{phase} r{k} (schema {si}, token {off}): {err}")
                g, off = system.new_grammar(si), 0
            rid = f"r{k}"
            reqs[rid] = make_request(rid, g)
            ids.append(rid)
            pos.append(off)
        gc.collect()
        for _ in range(steps):
            t0 = time.perf_counter()
            bm = mgr.grammar_bitmask(reqs, ids, {})
            t1 = time.perf_counter()
            (times.fill_cold_ms if phase == "cold" else times.fill_warm_ms).append((t1 - t0) * 1e3)
            t2 = time.perf_counter()
            for k, rid in enumerate(ids):
                (si, toks), _ = plan[k]
                p = pos[k]
                if p >= len(toks):  # instance done: EOS then restart
                    reqs[rid] = make_request(rid, system.new_grammar(si))
                    pos[k] = 0
                    continue
                tok = toks[p]
                g = reqs[rid].structured_output_request.grammar
                if failure(g, None) is None and check and not (int(bm[k, tok >> 5]) >> (tok & 31)) & 1:
                    raise AssertionError(f"{system.name}: row {k} forbids the instance's next token {tok}")
                ok, exc = attempt(mgr.accept_tokens, reqs[rid], [tok])
                if not ok:
                    err = failure(g, exc)
                    if err is None:
                        raise AssertionError(f"{system.name}: token {tok} rejected")
                    times.errors.append(f"{phase} {rid} (schema {si}, token {p}): {err}")
                    reqs[rid] = make_request(rid, system.new_grammar(si))
                    pos[k] = 0
                    continue
                pos[k] = p + 1
            times.accept_ms.append((time.perf_counter() - t2) * 1e3)
            if forward_ms > 0:
                time.sleep(forward_ms / 1e3)
    return times


def run_maskstep(systems: Sequence[str], batch_sizes: Sequence[int], steps: int, *, vocab_spec: str = "llama3",
                 forward_ms: float = 0.0, hook: bool = True, log=print) -> list[dict]:
    """Run every system at every batch size; one result dict per (system, batch)."""
    import os

    from structgate import load_vocabulary
    from structgate.plugin import scheduler_hook

    os.environ[scheduler_hook.ENV_DISABLE] = "1" if hook else "0"
    scheduler_hook.install()
    vocab = load_vocabulary(vocab_spec)
    tokenizer = None
    if "vllm-xgrammar" in systems:
        try:
            tokenizer = _llama3_hf_tokenizer(vocab)
        except Exception as e:  # reported per system below
            log(f"(no HF tokenizer for vllm-xgrammar: {e})")
    results = []
    max_b = max(batch_sizes)
    for name in systems:
        try:
            system = build_system(name, vocab, max_num_seqs=max_b, tokenizer=tokenizer)
        except Exception as e:
            log(f"{name}: unavailable ({type(e).__name__}: {e})")
            results.append(dict(system=name, error=f"{type(e).__name__}: {e}"))
            continue
        for b in batch_sizes:
            try:
                t = run_system(system, vocab, b, steps, forward_ms=forward_ms)
            except Exception as e:
                log(f"{name} B={b}: failed ({type(e).__name__}: {e})")
                results.append(dict(system=name, batch=b, error=f"{type(e).__name__}: {e}"))
                continue
            r = dict(system=name, batch=b, steps=steps,
                     fill_warm_ms=statistics.median(t.fill_warm_ms), fill_cold_ms=statistics.mean(t.fill_cold_ms),
                     fill_warm_p90_ms=float(np.percentile(t.fill_warm_ms, 90)),
                     accept_ms=statistics.median(t.accept_ms), compile_s=system.compile_s,
                     n_errors=len(t.errors), errors=t.errors[:5])
            log(f"{name:26s} B={b:4d}  mask/step warm {r['fill_warm_ms']:8.3f} ms  cold {r['fill_cold_ms']:8.3f} ms"
                f"  accept/step {r['accept_ms']:7.3f} ms")
            results.append(r)
    return results


def format_table(results: list[dict], batch_sizes: Sequence[int], key: str = "fill_warm_ms") -> str:
    """A markdown table: one row per system, one column per batch size (``key`` in ms)."""
    systems = list(dict.fromkeys(r["system"] for r in results))
    head = "| system | " + " | ".join(f"B={b}" for b in batch_sizes) + " |"
    lines = [head, "|" + "---|" * (len(batch_sizes) + 1)]
    for s in systems:
        cells = []
        for b in batch_sizes:
            r = next((r for r in results if r["system"] == s and r.get("batch") == b), None)
            if r is None:
                r = next((r for r in results if r["system"] == s and "batch" not in r), None)
            cells.append("n/a" if r is None or key not in r else f"{r[key]:.3f}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- end to end: the embedded model through vLLM (CPU) --------------------------------------------
#: e2e configurations: label -> structured-output backend (None = unconstrained requests)
E2E_CONFIGS = {"unconstrained": None, "vllm-xgrammar": "xgrammar", "native": "native",
               "structgate-xgrammar": "structgate-xgrammar", "structgate-llguidance": "structgate-llguidance",
               "structgate-outlines-core": "structgate-outlines-core"}

_E2E_SCRIPT = r'''
import json, sys, time
if __name__ == "__main__":
    cfg = json.loads(sys.argv[1])
    import structgate.plugin
    structgate.plugin.autoload()
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    kw = {} if cfg["backend"] is None else {"structured_outputs_config": {"backend": cfg["backend"]}}
    llm = LLM(model=cfg["model"], enforce_eager=True, max_model_len=1024, max_num_seqs=cfg["n"],
              distributed_executor_backend="uni", seed=0, **kw)
    def params(i):
        so = None if cfg["backend"] is None else StructuredOutputsParams(json=cfg["schemas"][i % len(cfg["schemas"])])
        return SamplingParams(max_tokens=cfg["max_tokens"], temperature=0.8, seed=i, structured_outputs=so)
    nw = len(cfg["schemas"])  # warm up: every schema compiled before the timed batch
    llm.generate(["warm up: "] * nw, [params(i) for i in range(nw)], use_tqdm=False)
    prompts = [f"Record {i} as JSON: " for i in range(cfg["n"])]
    t = time.perf_counter()
    outs = llm.generate(prompts, [params(i) for i in range(cfg["n"])], use_tqdm=False)
    wall = time.perf_counter() - t
    texts = [o.outputs[0].text for o in outs]
    ntok = [len(o.outputs[0].token_ids) for o in outs]
    print("RESULT " + json.dumps({"wall_s": wall, "tokens": ntok, "texts": texts}))
'''


def run_e2e(configs: Sequence[str], *, n_requests: int = 32, max_tokens: int = 64, log=print,
            timeout_s: float = 900.0) -> list[dict]:
    """Offline vLLM on the embedded tiny model (CPU), one subprocess per configuration:
    ``n_requests`` concurrent json_schema requests (:data:`SCHEMAS`, cycled), ``max_tokens`` each,
    after a warm-up that compiles every schema (compile time is not in the timed window).

    Reports tokens/s (all output tokens / wall time of the batch) and ms per output token per
    request (wall time / mean output length; the requests decode concurrently), and how many
    outputs are complete documents valid against their schema (``jsonschema``).
    """
    import os
    import subprocess
    import sys
    import tempfile

    import jsonschema

    from structgate.plugin.model import embedded_model_dir

    model = str(embedded_model_dir())
    schemas = [s for s, _ in SCHEMAS]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "e2e.py")
        with open(script, "w") as f:
            f.write(_E2E_SCRIPT)
        for label in configs:
            cfg = {"backend": E2E_CONFIGS[label], "model": model, "n": n_requests, "max_tokens": max_tokens,
                   "schemas": schemas}
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu",
                   "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
            try:
                out = subprocess.run([sys.executable, script, json.dumps(cfg)], capture_output=True, text=True,
                                     timeout=timeout_s, env=env)
            except subprocess.TimeoutExpired:
                log(f"{label}: timed out")
                results.append(dict(config=label, error="timeout"))
                continue
            line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if out.returncode != 0 or line is None:
                log(f"{label}: failed (rc {out.returncode}): {out.stderr[-800:]}")
                results.append(dict(config=label, error=f"rc {out.returncode}"))
                continue
            r = json.loads(line[len("RESULT "):])
            total = sum(r["tokens"])
            valid = 0
            if cfg["backend"] is not None:
                for i, text in enumerate(r["texts"]):
                    try:
                        jsonschema.validate(json.loads(text), schemas[i % len(schemas)])
                        valid += 1
                    except (ValueError, jsonschema.ValidationError):
                        pass
            row = dict(config=label, requests=n_requests, max_tokens=max_tokens, wall_s=r["wall_s"],
                       output_tokens=total, tokens_per_s=total / r["wall_s"],
                       ms_per_token=1e3 * r["wall_s"] / (total / n_requests),
                       valid=valid if cfg["backend"] is not None else None)
            log(f"{label:26s} {row['tokens_per_s']:8.1f} tok/s  {row['ms_per_token']:7.2f} ms/token/request  "
                f"valid {row['valid']}/{n_requests}")
            results.append(row)
    return results


def format_e2e_table(results: list[dict]) -> str:
    """Markdown table of :func:`run_e2e` results."""
    lines = ["| configuration | output tokens | wall s | tokens/s | ms / output token / request | valid JSON |",
             "|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['config']} | {r['error']} | | | | |")
            continue
        valid = "n/a" if r["valid"] is None else f"{r['valid']}/{r['requests']}"
        lines.append(f"| {r['config']} | {r['output_tokens']} | {r['wall_s']:.2f} | {r['tokens_per_s']:.1f} | "
                     f"{r['ms_per_token']:.2f} | {valid} |")
    return "\n".join(lines)
