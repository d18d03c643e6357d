"""XGrammar (mlc-ai/xgrammar >= 0.2.8) behind structgate's interface: backend ``structgate-xgrammar``.

Mapping
-------
* tokenizer: ``xgrammar.TokenizerInfo(encoded_vocab=vocab.token_bytes, vocab_type=RAW,
  vocab_size=vocab.vocab_size, stop_token_ids=vocab.eos_token_ids, add_prefix_space=False)``:
  the same bytes every other backend sees (empty-byte specials and padding ids are XGrammar
  "special tokens", never allowed);
* kinds: ``json_schema`` → ``compile_json_schema`` (``strict_mode = not additional_properties``;
  ``whitespace="flexible"`` → ``any_whitespace=True, max_whitespace_cnt=max_whitespace``;
  ``"compact"`` → ``any_whitespace=False, separators=(",", ":")``), ``json_object`` → the
  schema ``{"type": "object"}`` with ``strict_mode=False``, ``regex`` → ``compile_regex``,
  ``choice`` → ``compile_regex`` of the escaped alternation, ``grammar`` → ``compile_grammar``
  (GBNF/EBNF, root rule ``root``; the default) or ``compile_lark`` (``grammar_format="lark"``),
  ``structural_tag`` → ``compile_structural_tag`` (XGrammar's ``format`` JSON, dict or text; the
  legacy ``structures`` + ``triggers`` form through ``compile_structural_tag(tags, triggers)``, as
  vLLM's own xgrammar backend does);
* options: ``threads`` → ``GrammarCompiler(max_threads=)``, ``cache_size_bytes`` →
  ``cache_limit_bytes``; extras ``xgrammar_any_order`` (bool) → ``any_order``,
  ``xgrammar_indent`` (int) → ``indent``;
* errors: XGrammar raises ``RuntimeError("... position N: message")`` (regex),
  ``"... line L, column C: message"`` (EBNF) or a free message (JSON Schema); mapped to
  :class:`GrammarSyntaxError` with that position, or :class:`UnsupportedFeatureError` when the
  message says "not supported". Look-around in a schema ``pattern`` (which XGrammar 0.2.8 only
  warns about and then ignores, giving a wrong mask) is refused up front.

EOS and termination are handled by :class:`~structgate.adapters._base.AdapterMatcher` (XGrammar's
own matcher never sees an EOS id, so it never reaches its terminated state, whose mask call raises).
"""
from __future__ import annotations

import json
import re
import threading
from typing import Any, Sequence

import numpy as np

from .._env import option_bool, option_int
from ..backends.interface import Backend, CompiledGrammar, Constraint
from ..errors import GrammarSyntaxError, InvalidConstraintError, UnsupportedFeatureError
from ..vocab import Vocabulary
from ._base import AdapterMatcher, VocabMasks, choice_regex, find_lookaround, position_of_line_col

__all__ = ["XGrammarBackend", "XGrammarCompiledGrammar", "XGrammarMatcher"]

_POS = re.compile(r"position (\d+)")
_LINECOL = re.compile(r"line (\d+), column (\d+)")


def _clean(msg: str) -> str:
    msg = str(msg).strip()
    # "[04:50:00] /project/cpp/regex_converter.cc:83: Regex parsing error at ...": drop the prefix
    msg = re.sub(r"^\[[\d:]+\]\s+\S+:\d+:\s*", "", msg)
    return msg.splitlines()[0] if msg else msg


def _map_error(e: Exception, kind: str, text: str) -> Exception:
    msg = _clean(str(e))
    low = msg.lower()
    pos = 0
    m = _POS.search(msg)
    if m:
        pos = int(m.group(1))
    m2 = _LINECOL.search(msg)
    if m2:
        pos = position_of_line_col(text, int(m2.group(1)), int(m2.group(2)))
    detail = msg.split(": ", 1)[1] if ": " in msg and (m or m2) else msg
    if "invalid structural tag" in low:
        return GrammarSyntaxError(f"XGrammar: {msg.split('Invalid structural tag error: ')[-1]}", text, 0)
    if "check failed" in low:  # an XGrammar internal assertion on a valid input
        return UnsupportedFeatureError("input XGrammar cannot compile (internal check failed)", "XGrammar: " + msg)
    if ("not supported" in low or "unsupported" in low) and "unsupported type" not in low:
        where = f"position {pos}" if (m or m2) else None
        return UnsupportedFeatureError(detail, "XGrammar: " + msg, where)
    if kind == "json_schema" and not (m or m2):
        for word in re.findall(r'"([^"]+)"|(#/[\w/$.~-]*)|field (\w+)', msg):
            w = next(x for x in word if x)
            i = text.find(w)
            if i >= 0:
                pos = i
                break
    return GrammarSyntaxError(f"XGrammar: {detail}", text, pos)


class XGrammarMatcher(AdapterMatcher):
    """One request's state over an XGrammar ``GrammarMatcher``."""

    def __init__(self, compiled: "XGrammarCompiledGrammar", max_rollback_tokens: int = -1):
        import xgrammar as xgr

        super().__init__(compiled.vocab, compiled._masks, max_rollback_tokens)
        self._m = xgr.GrammarMatcher(compiled._xg, override_stop_tokens=list(compiled.vocab.eos_token_ids),
                                     terminate_without_stop_token=False)

    def _e_fill(self, row: np.ndarray) -> None:
        self._m.fill_next_token_bitmask(row[None, :], 0)

    def _e_accept(self, token: int) -> bool:
        return bool(self._m.accept_token(token))

    def _e_rollback(self, k: int) -> None:
        self._m.rollback(k)

    def _e_accepting(self) -> bool:
        return bool(self._m.is_completed())

    def _e_reset(self) -> None:
        self._m.reset()

    def _e_forced_bytes(self) -> bytes | None:
        try:
            s = self._m.find_jump_forward_string()
        except UnicodeDecodeError:  # the forced bytes split a UTF-8 character: XGrammar cannot return them
            return None
        return s.encode("utf-8", "surrogateescape") if isinstance(s, str) else bytes(s)


class XGrammarCompiledGrammar(CompiledGrammar):
    """An ``xgrammar.CompiledGrammar`` (immutable, thread-safe) for one vocabulary."""

    def __init__(self, backend: "XGrammarBackend", constraint: Constraint, xg: Any):
        self.vocab = backend.vocab
        self.constraint = constraint
        self._xg = xg
        self._masks = backend._masks

    def matcher(self, *, max_rollback_tokens: int = -1) -> XGrammarMatcher:
        return XGrammarMatcher(self, max_rollback_tokens)

    @property
    def memory_size_bytes(self) -> int:
        return int(self._xg.memory_size_bytes)


class _GrammarOnly:
    """``GrammarCompiler``'s entry points as :meth:`XGrammarBackend._build` calls them, building an
    ``xgrammar.Grammar`` (parse and conversion to XGrammar's EBNF) instead of compiling token masks:
    the cheap check :meth:`XGrammarBackend.validate` runs."""

    def compile_json_schema(self, schema: str, **kw: Any) -> Any:
        import xgrammar as xgr

        return xgr.Grammar.from_json_schema(schema, **kw)

    def compile_regex(self, regex: str) -> Any:
        import xgrammar as xgr

        return xgr.Grammar.from_regex(regex)

    def compile_grammar(self, ebnf: str) -> Any:
        import xgrammar as xgr

        return xgr.Grammar.from_ebnf(ebnf)

    def compile_lark(self, lark: str) -> Any:
        import xgrammar as xgr

        return xgr.Grammar.from_lark(lark)

    def compile_structural_tag(self, *args: Any) -> Any:
        import xgrammar as xgr

        return xgr.Grammar.from_structural_tag(*args)


class XGrammarBackend(Backend):
    """XGrammar engine bound to one :class:`~structgate.vocab.Vocabulary`.

    Parameters
    ----------
    vocab : Vocabulary
    **options
        :class:`~structgate.backends.interface.CompileOptions` fields (``whitespace``,
        ``max_whitespace``, ``additional_properties``, ``threads``, ``cache_size_bytes``) and the
        extras ``xgrammar_any_order``, ``xgrammar_indent``.

    Raises
    ------
    BackendUnavailableError
        (from the registry) when ``xgrammar`` is not installed.
    """

    name = "structgate-xgrammar"
    supported_kinds = frozenset({"regex", "json_schema", "json_object", "choice", "grammar", "structural_tag"})
    int_extras = ("xgrammar_indent",)
    bool_extras = ("xgrammar_any_order",)

    def __init__(self, vocab: Vocabulary, **options: Any) -> None:
        import xgrammar as xgr

        super().__init__(vocab, **options)
        self._tokenizer_info = xgr.TokenizerInfo(list(vocab.token_bytes), xgr.VocabType.RAW,
                                                 vocab_size=vocab.vocab_size,
                                                 stop_token_ids=list(vocab.eos_token_ids), add_prefix_space=False)
        self._compiler = xgr.GrammarCompiler(self._tokenizer_info, max_threads=max(1, int(self.options.threads)),
                                             cache_enabled=True,
                                             cache_limit_bytes=int(self.options.cache_size_bytes))
        self._masks = VocabMasks(vocab)
        self._batch = None
        self._batch_lock = threading.Lock()

    def engine_cache_stats(self) -> dict[str, dict[str, int]]:
        """XGrammar's compiled-grammar cache (``GrammarCompiler.get_cache_size_bytes``: bytes
        only, XGrammar reports no entry count or lookups)."""
        return {"compiler_cache": {"bytes": int(self._compiler.get_cache_size_bytes())}}

    # -- compile ------------------------------------------------------------------------------
    def _json_kwargs(self, strict: bool) -> dict:
        o = self.options
        kw: dict[str, Any] = {"strict_mode": strict}
        if o.whitespace == "compact":
            kw.update(any_whitespace=False, separators=(",", ":"))
        else:
            kw.update(any_whitespace=True, max_whitespace_cnt=max(1, int(o.max_whitespace)))
        if o.extra.get("xgrammar_indent") is not None:
            kw.update(indent=option_int(o.extra, "xgrammar_indent", engine=self.name), any_whitespace=False)
            kw.pop("max_whitespace_cnt", None)
        if option_bool(o.extra, "xgrammar_any_order", engine=self.name):
            kw["any_order"] = True
        return kw

    def validate(self, constraint: Constraint) -> None:
        """XGrammar's grammar construction (``xgrammar.Grammar.from_json_schema`` / ``from_regex`` /
        ``from_ebnf`` / ``from_lark`` / ``from_structural_tag``: parse and convert, what vLLM's
        xgrammar backend validates requests with), without compiling token masks.

        Raises
        ------
        GrammarSyntaxError, UnsupportedFeatureError, InvalidConstraintError, ConstraintKindError
        """
        self.check_kind(constraint)
        self._build(constraint, _GrammarOnly())

    def _compile(self, constraint: Constraint) -> XGrammarCompiledGrammar:
        return XGrammarCompiledGrammar(self, constraint, self._build(constraint, self._compiler))

    def _build(self, constraint: Constraint, c: Any) -> Any:
        """``constraint`` through ``c``: the grammar compiler (a compiled grammar) or
        :class:`_GrammarOnly` (an ``xgrammar.Grammar``)."""
        kind = constraint.kind
        text = ""
        try:
            if kind == "json_schema":
                schema = constraint.value
                text = json.dumps(schema, ensure_ascii=False)
                la = find_lookaround(schema)
                if la:
                    raise UnsupportedFeatureError("look-around in pattern", "XGrammar ignores it (wrong mask)", la[0])
                xg = c.compile_json_schema(text, **self._json_kwargs(not self.options.additional_properties))
            elif kind == "json_object":
                text = '{"type": "object"}'
                xg = c.compile_json_schema(text, **self._json_kwargs(False))
            elif kind == "regex":
                text = str(constraint.value)
                xg = c.compile_regex(text)
            elif kind == "choice":
                text = choice_regex(constraint.value)
                xg = c.compile_regex(text)
            elif kind == "grammar":
                text = str(constraint.value)
                fmt = (constraint.grammar_format or "ebnf").lower()
                if fmt == "lark":
                    xg = c.compile_lark(text)
                elif fmt in ("ebnf", "gbnf"):
                    xg = c.compile_grammar(text)
                else:
                    raise UnsupportedFeatureError(f"grammar format {fmt!r}", "XGrammar takes 'ebnf'/'gbnf' or 'lark'")
            elif kind == "structural_tag":
                v = constraint.value
                text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                xg = self._compile_structural_tag(v, text, c)
            else:  # pragma: no cover - Backend.compile checks kinds
                raise UnsupportedFeatureError(kind)
        except (GrammarSyntaxError, UnsupportedFeatureError, InvalidConstraintError):
            raise
        except (RuntimeError, ValueError, TypeError) as e:
            raise _map_error(e, kind, text) from e
        return xg

    def _compile_structural_tag(self, value: Any, text: str, c: Any) -> Any:
        """Both forms vLLM's own xgrammar backend accepts: a spec with ``"structures"`` (the legacy
        ``{"structures": [{"begin", "schema", "end"}], "triggers": [...]}``) goes through XGrammar's
        deprecated ``compile_structural_tag(tags, triggers)``, as vLLM 0.32 does; anything else is
        XGrammar's ``{"type": "structural_tag", "format": {...}}`` JSON.

        Raises
        ------
        InvalidConstraintError
            A legacy spec of the wrong shape (the message names the field).
        GrammarSyntaxError
            Text that is not JSON, or a spec XGrammar rejects.
        """
        import warnings

        import xgrammar as xgr

        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise GrammarSyntaxError(f"structural_tag is not valid JSON: {e.msg}", value, e.pos) from None
        if isinstance(value, dict) and "structures" in value:
            from ..native.frontends.structural_tag import legacy_to_format

            fmt = legacy_to_format(value)  # the typed shape checks (field paths); same content
            tags = [xgr.StructuralTagItem(begin=t["begin"], schema=json.dumps(t["content"]["json_schema"]),
                                          end=t["end"]) for t in fmt["tags"]]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return c.compile_structural_tag(tags, fmt["triggers"])
        return c.compile_structural_tag(text)

    # -- batched fill ---------------------------------------------------------------------------
    def fill_bitmask_batch(self, pairs: Sequence[tuple[XGrammarMatcher, int]], bitmask: Any) -> None:
        """Fill several rows at once with XGrammar's ``BatchGrammarMatcher`` (thread pool of
        ``threads`` workers), then apply the EOS/special/padding rules per row.

        Parameters
        ----------
        pairs : sequence of (XGrammarMatcher, int)
            Matchers of this backend and the bitmask row each one fills.
        bitmask : numpy.ndarray | torch.Tensor
            int32 ``(batch, ceil(vocab_size/32))``, CPU, C-contiguous.

        Raises
        ------
        BitmaskError
            Wrong dtype/shape/device, or a row out of range.
        """
        import xgrammar as xgr

        from ..bitmask import as_numpy_row

        rows = [(m, r, as_numpy_row(bitmask, r, self.vocab.vocab_size)) for m, r in pairs]
        live = [(m, r) for m, r, _ in rows if not m._terminated]
        if live:
            arr = bitmask if not isinstance(bitmask, np.ndarray) else bitmask
            if isinstance(arr, np.ndarray) and arr.ndim == 1:
                arr = arr[None, :]
            with self._batch_lock:
                if self._batch is None:
                    self._batch = xgr.BatchGrammarMatcher(max(1, int(self.options.threads)))
                self._batch.batch_fill_next_token_bitmask([m._m for m, _ in live], arr, [r for _, r in live])
        for m, r, row in rows:
            if m._terminated:
                row[:] = m._masks.eos_row
            else:
                m._masks.sanitise(row, m._e_accepting())
