"""Mask-level differential testing: drive several backends through the same tokens and compare
the full allowed-token set at every step.

>>> from structgate import load_vocabulary, Constraint
>>> from structgate.diff import diff_masks
>>> rep = diff_masks(["native", "structgate-xgrammar"], load_vocabulary("llama3"),
...                  Constraint.regex("[0-9]+"), text="123")              # doctest: +SKIP
>>> rep.ok, rep.steps_compared                                            # doctest: +SKIP
(True, 2)

At step ``i`` (after the first ``i`` tokens of the text were accepted by every backend) each
backend fills one bitmask row; a token is a *disagreement* when some backends allow it and others
do not. Disagreeing tokens are grouped by which backends allow them (one :class:`MaskDisagreement`
per group and step, with a capped sample of ids and their byte strings). The walk stops at the first
token some backend rejects (recorded in :attr:`DiffReport.stopped`); the last mask compared includes
EOS, so "complete here or not" is compared too. Backends that cannot compile the constraint are
listed in :attr:`DiffReport.compile_errors`.

:func:`run_corpus` runs the same comparison over many (constraint, texts) cases, e.g. MaskBench
schemas with their valid instances (the benchmark command uses it for the long run).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from ._text import escape_lone_surrogates
from .backends.interface import Backend, Constraint
from .bitmask import bitmask_to_bool
from .errors import StructgateError
from .vocab import Vocabulary

__all__ = ["MaskDisagreement", "DiffReport", "diff_masks", "run_corpus", "CorpusCase", "load_maskbench_cases"]


@dataclass
class MaskDisagreement:
    """Tokens on which backends disagree at one step.

    Attributes
    ----------
    step : int
        Number of text tokens accepted before this mask (0 = start state).
    prefix : str
        The decoded text so far (UTF-8, invalid bytes replaced), for humans.
    allowed_by, forbidden_by : list[str]
        Backend names that allow / forbid every token of this group.
    count : int
        Number of tokens in the group.
    token_ids : list[int]
        The first ``cap`` ids of the group (ascending).
    token_bytes : list[str]
        ``repr`` of each listed token's bytes (``"<eos>"`` / ``"<special:NAME>"`` for specials).
    """

    step: int
    prefix: str
    allowed_by: list[str]
    forbidden_by: list[str]
    count: int
    token_ids: list[int]
    token_bytes: list[str]

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class DiffReport:
    """Result of :func:`diff_masks` for one constraint and one token sequence.

    Attributes
    ----------
    backends : list[str]
        Backends compared (those that compiled).
    constraint : dict
        ``{"kind", "value"}`` of the constraint.
    text : str | None
    n_tokens : int
        Length of the token sequence driven.
    steps_compared : int
        Masks compared (``n_tokens + 1`` when no backend stopped early).
    disagreements : list[MaskDisagreement]
    compile_errors : dict[str, str]
        Backend → ``"ErrorType: message"`` for backends that refused the constraint.
    stopped : dict | None
        ``{"step", "token_id", "token_bytes", "rejected_by", "accepted_by"}`` when some backend
        rejected a text token (the walk ends there; ``accepted_by`` empty = all rejected it, which
        is agreement: the text is not valid for any of them).
    accepting : dict[str, bool]
        Each backend's ``is_accepting()`` at the last step compared.
    """

    backends: list[str]
    constraint: dict
    text: str | None
    n_tokens: int
    steps_compared: int = 0
    disagreements: list[MaskDisagreement] = field(default_factory=list)
    compile_errors: dict[str, str] = field(default_factory=dict)
    stopped: dict | None = None
    accepting: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every backend compiled and all masks were identical at every step (a text
        token that *every* backend rejects ends the walk without a disagreement)."""
        return not self.disagreements and not self.compile_errors and not self.split_stop

    @property
    def split_stop(self) -> bool:
        """A text token some backends accepted and others rejected."""
        return bool(self.stopped and self.stopped["accepted_by"])

    def n_disagreeing_tokens(self) -> int:
        return sum(d.count for d in self.disagreements)

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "disagreements"}
        d["disagreements"] = [x.as_dict() for x in self.disagreements]
        d["ok"] = self.ok
        return d

    def format(self, max_groups: int = 20) -> str:
        """Human-readable multi-line summary."""
        c = self.constraint
        val = c["value"] if isinstance(c["value"], str) else json.dumps(c["value"], ensure_ascii=False)
        lines = [f"{c['kind']} {val[:120]}", f"  text {self.text!r}"[:200] if self.text is not None else
                 f"  {self.n_tokens} tokens"]
        for name, err in self.compile_errors.items():
            lines.append(f"  compile error in {name}: {err.splitlines()[0][:200]}")
        lines.append(f"  {', '.join(self.backends)}: {self.steps_compared} masks compared, "
                     f"{len(self.disagreements)} disagreement groups, {self.n_disagreeing_tokens()} tokens")
        for d in self.disagreements[:max_groups]:
            more = f" (+{d.count - len(d.token_ids)} more)" if d.count > len(d.token_ids) else ""
            lines.append(f"  step {d.step} after {d.prefix[-40:]!r}: {d.count} tokens allowed by "
                         f"{'+'.join(d.allowed_by)}, forbidden by {'+'.join(d.forbidden_by)}: "
                         f"{', '.join(f'{i}:{b}' for i, b in zip(d.token_ids, d.token_bytes))}{more}")
        if len(self.disagreements) > max_groups:
            lines.append(f"  ... {len(self.disagreements) - max_groups} more groups")
        if self.stopped:
            s = self.stopped
            lines.append(f"  stopped at step {s['step']}: token {s['token_id']}:{s['token_bytes']} rejected by "
                         f"{'+'.join(s['rejected_by'])}, accepted by {'+'.join(s['accepted_by']) or '-'}")
        if self.ok:
            lines.append("  no disagreement")
        return "\n".join(lines)


def _describe(vocab: Vocabulary, t: int) -> str:
    if t in vocab.eos_token_ids:
        return "<eos>"
    if t >= vocab.n_tokens:
        return "<padding>"
    b = vocab.token_bytes[t]
    if not b:
        name = vocab.token_names[t] if vocab.token_names else str(t)
        return f"<special:{name}>"
    return repr(b)


def _resolve(backends: Any, vocab: Vocabulary, options: dict | None) -> list[tuple[str, Backend]]:
    from .backends.registry import get_backend

    if isinstance(backends, dict):
        return [(str(k), v if isinstance(v, Backend) else get_backend(str(v), vocab, **(options or {})))
                for k, v in backends.items()]
    out = []
    for b in backends:
        if isinstance(b, Backend):
            out.append((b.name, b))
        else:
            out.append((str(b), get_backend(str(b), vocab, **(options or {}))))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"backend names must be distinct, got {names}")
    return out


def diff_masks(backends: Sequence[str | Backend], vocab: Vocabulary, constraint: Constraint, *,
               text: str | None = None, tokens: Sequence[int] | None = None, cap: int = 20,
               options: dict | None = None, compiled: dict | None = None) -> DiffReport:
    """Compare the masks of ``backends`` along one token sequence.

    Parameters
    ----------
    backends : sequence of str | Backend, or dict[str, Backend | str]
        At least two registered names (created for ``vocab`` with ``options``), backend objects, or
        a ``{label: backend}`` mapping (to compare two configurations of one engine).
    vocab : Vocabulary
        The vocabulary every backend is built for (and that tokenizes ``text``).
    constraint : Constraint
    text : str, optional
        Tokenized with ``vocab.encode`` (exactly one of ``text`` / ``tokens``).
    tokens : sequence of int, optional
    cap : int, default: 20
        Token ids listed per disagreement group.
    options : dict, optional
        :class:`~structgate.backends.interface.CompileOptions` overrides for named backends.
    compiled : dict, optional
        ``{name: CompiledGrammar or Exception}`` already compiled (skips compilation; used by
        :func:`run_corpus` to compile once per schema).

    Returns
    -------
    DiffReport

    Raises
    ------
    ValueError
        Fewer than two backends, both or neither of ``text`` / ``tokens``.
    BackendNotFoundError, BackendUnavailableError
        A named backend does not exist / is not installed.
    """
    if len(backends) < 2:
        raise ValueError("diff needs at least two backends")
    if (text is None) == (tokens is None):
        raise ValueError("give exactly one of text= or tokens=")
    ids = list(vocab.encode(text)) if text is not None else [int(t) for t in tokens]
    pairs = _resolve(backends, vocab, options) if compiled is None else [(str(n), None) for n in compiled]
    rep = DiffReport(backends=[], constraint={"kind": constraint.kind, "value": constraint.value}, text=text,
                     n_tokens=len(ids))
    matchers = []
    for name, b in pairs:
        try:
            g = compiled[name] if compiled is not None else b.compile(constraint)
            if isinstance(g, BaseException):
                raise g
        except StructgateError as e:
            rep.compile_errors[name] = f"{type(e).__name__}: {e}"
            continue
        rep.backends.append(name)
        matchers.append(g.matcher())
    if len(matchers) < 2:
        return rep
    V = vocab.vocab_size
    W = (V + 31) // 32
    buf = np.empty((len(matchers), W), dtype=np.int32)
    names = rep.backends
    prefix = b""
    for step in range(len(ids) + 1):
        buf.fill(0)
        for r, m in enumerate(matchers):
            m.fill_bitmask(buf, r)
        rep.steps_compared += 1
        union = np.bitwise_or.reduce(buf, axis=0)
        inter = np.bitwise_and.reduce(buf, axis=0)
        if (union != inter).any():
            bits = bitmask_to_bool(buf, V)  # (B, V)
            diff_ids = np.flatnonzero(bits.any(axis=0) & ~bits.all(axis=0))
            groups: dict[tuple[bool, ...], list[int]] = {}
            for t in diff_ids:
                groups.setdefault(tuple(bool(x) for x in bits[:, t]), []).append(int(t))
            pfx = prefix.decode("utf-8", "replace")
            for key, toks in sorted(groups.items(), key=lambda kv: kv[1][0]):
                shown = toks[:cap]
                rep.disagreements.append(MaskDisagreement(
                    step=step, prefix=pfx,
                    allowed_by=[n for n, k in zip(names, key) if k],
                    forbidden_by=[n for n, k in zip(names, key) if not k],
                    count=len(toks), token_ids=shown, token_bytes=[_describe(vocab, t) for t in shown]))
        if step == len(ids):
            break
        t = ids[step]
        res = [m.advance(t) for m in matchers]
        if not all(res):
            rep.stopped = {"step": step, "token_id": t, "token_bytes": _describe(vocab, t),
                           "rejected_by": [n for n, ok in zip(names, res) if not ok],
                           "accepted_by": [n for n, ok in zip(names, res) if ok]}
            break
        if 0 <= t < vocab.n_tokens:
            prefix += vocab.token_bytes[t]
    rep.accepting = {n: bool(m.is_accepting()) for n, m in zip(names, matchers)}
    return rep


@dataclass
class CorpusCase:
    """One constraint with texts to drive (``id`` names it in reports)."""

    id: str
    constraint: Constraint
    texts: list[str]


def load_maskbench_cases(paths: Iterable[str], *, limit: int | None = None, max_texts: int = 2,
                         valid_only: bool = True) -> list[CorpusCase]:
    """Read MaskBench / JSONSchemaBench JSONL files (``{"id", "schema", "tests": [{"data",
    "valid"}]}``) into cases whose texts are ``json.dumps(data)`` of the (valid) tests, as the
    MaskBench method serialises them.

    Parameters
    ----------
    paths : iterable of str
    limit : int, optional
        Stop after this many cases in total.
    max_texts : int, default: 2
        Texts per schema.
    valid_only : bool, default: True
    """
    out: list[CorpusCase] = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                d = json.loads(line)
                # a lone surrogate in the data (JSON's "\ud800") written as its escape: the same value,
                # as text a tokenizer can encode
                texts = [escape_lone_surrogates(json.dumps(t["data"], ensure_ascii=False)) for t in d.get("tests", [])
                         if t.get("valid") or not valid_only][:max_texts]
                if not texts:
                    continue
                try:
                    c = Constraint.json_schema(d["schema"])
                except (StructgateError, ValueError):
                    continue
                out.append(CorpusCase(str(d.get("id", len(out))), c, texts))
                if limit is not None and len(out) >= limit:
                    return out
    return out


def run_corpus(backends: Sequence[str], vocab: Vocabulary, cases: Iterable[CorpusCase], *,
               options: dict | None = None, cap: int = 10, time_limit_s: float | None = None,
               progress: bool = False) -> dict:
    """Diff ``backends`` over many cases (the long differential run; a bench command calls it).

    Each case is compiled once per backend, then every text is driven with :func:`diff_masks`.

    Parameters
    ----------
    backends : sequence of str
        Registered names (created once for ``vocab``).
    vocab : Vocabulary
    cases : iterable of CorpusCase
        E.g. :func:`load_maskbench_cases`.
    options : dict, optional
        CompileOptions overrides for every backend.
    cap : int
        Ids listed per disagreement group.
    time_limit_s : float, optional
        Stop starting new cases after this many seconds.
    progress : bool
        Print one line per case to stderr.

    Returns
    -------
    dict
        ``{"backends", "cases", "texts", "ok_texts", "disagreeing_texts", "compile_errors": {name:
        count}, "compile_only_in": {name: count}, "seconds", "reports": [DiffReport.as_dict() for
        every text that disagreed or hit a compile error]}``.
    """
    import sys

    objs = _resolve(backends, vocab, options)
    names = [n for n, _ in objs]
    t0 = time.perf_counter()
    summary: dict[str, Any] = {"backends": names, "cases": 0, "texts": 0, "ok_texts": 0, "disagreeing_texts": 0,
                               "compile_errors": {n: 0 for n in names}, "all_failed": 0, "reports": []}
    for case in cases:
        if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s:
            summary["stopped_early"] = True
            break
        summary["cases"] += 1
        compiled: dict[str, Any] = {}
        for n, b in objs:
            try:
                compiled[n] = b.compile(case.constraint)
            except StructgateError as e:  # (its traceback, holding this frame, not kept: no cycle)
                compiled[n] = e.with_traceback(None)
                summary["compile_errors"][n] += 1
        if sum(not isinstance(g, BaseException) for g in compiled.values()) < 2:
            summary["all_failed"] += 1
            continue
        for text in case.texts:
            summary["texts"] += 1
            rep = diff_masks(names, vocab, case.constraint, text=text, cap=cap, compiled=compiled)
            if not rep.disagreements and not rep.split_stop:
                summary["ok_texts"] += 1
                if rep.compile_errors:
                    d = rep.as_dict()
                    d["case"] = case.id
                    summary["reports"].append(d)
                continue
            summary["disagreeing_texts"] += 1
            d = rep.as_dict()
            d["case"] = case.id
            summary["reports"].append(d)
            if progress:
                print(f"{case.id}: {len(rep.disagreements)} disagreement groups", file=sys.stderr)
    summary["seconds"] = round(time.perf_counter() - t0, 3)
    return summary
