"""llguidance (guidance-ai/llguidance >= 1.7) behind structgate's interface: backend
``structgate-llguidance``.

Mapping
-------
* tokenizer: an ``LLTokenizer`` built from a ``TokenizerWrapper``-like object over
  ``vocab.token_bytes`` (special ids, which have no bytes in structgate, get llguidance's special
  marker ``b"\\xff" + name`` so they can never match text), EOS ids = ``vocab.eos_token_ids``,
  ``slices`` = llguidance's defaults (``general_slices()``, or ``json_slices()`` for JSON kinds is
  not used: one tokenizer per backend);
* kinds: ``json_schema`` / ``json_object`` → ``LLMatcher.grammar_from_json_schema`` with
  overrides from the options (``whitespace="flexible"`` → ``whitespace_pattern =
  [\\x20\\x0A\\x0D\\x09]{0,max_whitespace}``, a skip pattern llguidance may repeat, so the
  adapter also bounds each run of whitespace outside strings to ``max_whitespace`` bytes with
  :class:`WhitespaceBound`; ``"compact"`` → ``whitespace_flexible=False`` with separators ``","`` /
  ``":"``); ``additional_properties=False`` rewrites the schema so object
  schemas without ``additionalProperties`` get ``false`` (llguidance follows the spec otherwise);
  ``regex`` → ``grammar_from_regex``; ``choice`` → a Lark ``start: "a" | "b"``; ``grammar`` →
  Lark (default) or GBNF (``grammar_format="gbnf"/"ebnf"``, converted by llguidance);
* options: ``threads`` → the ``LLExecutor`` used by :meth:`LLGuidanceBackend.fill_bitmask_batch`;
  extras ``llguidance_lenient`` (ignore unknown schema keywords), ``llguidance_coerce_one_of``;
* errors: ``LLMatcher.validate_grammar`` messages are mapped to :class:`GrammarSyntaxError` (with
  the position llguidance reports: caret under the regex, or ``at LINE(COL)`` in a Lark grammar) or
  :class:`UnsupportedFeatureError` ("not supported", "Unimplemented keys").

The compiled grammar keeps one ``LLMatcher`` in its start state; ``matcher()`` deep-copies it (no
re-parse of the grammar). A rejected token is checked with ``validate_tokens`` first, so the engine
never enters its sticky error state.
"""
from __future__ import annotations

import json
import re
from typing import Any, Sequence

import numpy as np

from .._env import option_bool
from ..backends.interface import Backend, CompiledGrammar, Constraint
from ..errors import GrammarSyntaxError, UnsupportedFeatureError
from ..vocab import Vocabulary
from ._base import (AdapterMatcher, VocabMasks, apply_additional_properties_default, json_pointer,
                    position_of_line_col, schema_text)

__all__ = ["LLGuidanceBackend", "LLGuidanceCompiledGrammar", "LLGuidanceMatcher", "make_tokenizer"]

_AT = re.compile(r"^at (\d+)\((\d+)\):\s*")
#: prepended to every grammar: llguidance otherwise narrows the mask where the output is forced to
#: the tokenizer's canonical tokens (token "Geometry" allowed, "G"/"Ge"/"Geo" not), which breaks
#: the interface's byte-level rule 1. ``no_forcing`` turns that off.
_HEADER = '%llguidance {"no_forcing": true}\n'



def make_tokenizer(vocab: Vocabulary):
    """An ``llguidance.LLTokenizer`` with exactly ``vocab``'s token bytes and EOS ids."""
    import llguidance as llg

    names = vocab.token_names

    class _Wrapper(llg.TokenizerWrapper):
        def __init__(self) -> None:  # noqa: D401 - no super().__init__: nothing to wrap
            self.eos_token_id = vocab.eos_token_ids[0]
            self.bos_token_id = None
            toks = []
            for i, b in enumerate(vocab.token_bytes):
                if b and i not in vocab.special_token_ids:
                    toks.append(b)
                else:
                    nm = names[i] if names and names[i] else f"<special_{i}>"
                    toks.append(b"\xff" + nm.encode("utf-8", "replace"))
            self.tokens = toks
            self.special_token_ids = sorted(vocab.special_token_ids)
            self.is_tokenizer_wrapper = True
            self._accepts_bytes = False

        def __call__(self, s):  # text -> ids (llguidance uses it for tokenize_str only)
            if isinstance(s, bytes):
                s = s.decode("utf-8", "replace")
            if vocab.encoder is None:
                return []
            return list(vocab.encoder(s))

    return llg.LLTokenizer(_Wrapper(), n_vocab=vocab.vocab_size, eos_token=list(vocab.eos_token_ids))


def _map_error(msg: str, kind: str, text: str, shift: int = 0) -> Exception:
    msg = msg.strip()
    low = msg.lower()
    pos = 0
    m = _AT.match(msg)
    body = msg
    if m:
        body = msg[m.end():]
        if kind == "grammar":
            pos = position_of_line_col(text, int(m.group(1)) - shift, int(m.group(2)))
    lines = body.splitlines()
    # "regex parse error:\n    a(\n     ^\nerror: unclosed group"
    for i, ln in enumerate(lines[:-1]):
        if ln.strip() and lines[i + 1].strip() and set(lines[i + 1].strip()) == {"^"} and ln.startswith("    "):
            if kind == "regex" and ln[4:] == text:
                pos = lines[i + 1].index("^") - 4
            break
    err = next((ln[len("error: "):] for ln in lines if ln.startswith("error: ")), lines[0] if lines else msg)
    if "not supported" in low or "unimplemented" in low or "unsupported" in low:
        feat = err
        mk = re.search(r"Unimplemented keys: (\[.*?\])", body)
        if mk:
            feat = mk.group(1)
        return UnsupportedFeatureError(feat, "llguidance: " + lines[0] if lines else msg,
                                       f"position {pos}" if kind in ("regex", "grammar") else None)
    where = None
    if kind in ("json_schema", "json_object") and pos == 0:
        pos, where = _schema_position(lines[0] if lines else msg, text)
    return GrammarSyntaxError(f"llguidance: {err}", text, pos, where)


def _schema_position(line: str, text: str) -> tuple[int, str | None]:
    """Where in the schema ``text`` (``json.dumps(schema, ensure_ascii=False)``) llguidance's
    message ``line`` points, as ``(offset, JSON pointer or None)``; llguidance names no location.

    ``required property 'b' is unsatisfiable``: the one ``required`` list naming ``b`` (offset of
    that entry and its pointer). Otherwise a name quoted in the message is looked up as a JSON
    string (``"b"``, not the letter inside ``"object"``), used only where it occurs once. Nothing
    found: offset 0 and no pointer (never a caret under an unrelated word)."""
    try:
        schema = json.loads(text)
    except ValueError:
        return 0, None
    m = re.search(r"required property '([^']+)'", line)
    if m:
        hits = [path for path, v in _walk(schema, ()) if isinstance(v, dict)
                and isinstance(v.get("required"), list) and m.group(1) in v["required"]]
        if len(hits) == 1:
            path = (*hits[0], "required", _schema_at(schema, hits[0])["required"].index(m.group(1)))
            return _offset_of(schema, path), json_pointer("", *path)
    for w in re.findall(r"'([^']+)'|\"([^\"]+)\"", line):
        w = next(x for x in w if x)
        quoted = json.dumps(w, ensure_ascii=False)
        if text.count(quoted) == 1:
            return text.index(quoted), None
    return 0, None


def _walk(v, path: tuple):
    """``(path, value)`` of every value inside ``v``, ``v`` itself first (iterative: a deeply nested
    schema never reaches the recursion limit here)."""
    stack = [(path, v)]
    while stack:
        path, v = stack.pop()
        yield path, v
        if isinstance(v, dict):
            stack.extend(((*path, k), x) for k, x in reversed(v.items()))
        elif isinstance(v, list):
            stack.extend(((*path, i), x) for i, x in reversed(list(enumerate(v))))


def _schema_at(v, path: tuple):
    for k in path:
        v = v[k]
    return v


def _offset_of(schema, path: tuple) -> int:
    """Offset of the value at ``path`` in ``json.dumps(schema, ensure_ascii=False)``: the same text
    with that value replaced by a marker (everything before it is written the same)."""
    import copy

    marker = "\x00structgate-marker\x00"
    s = copy.deepcopy(schema)
    _schema_at(s, path[:-1])[path[-1]] = marker
    return schema_text(s).index(schema_text(marker))


_WS = frozenset(b" \t\n\r")
_INTERESTING = b' \t\n\r"\\'


class WhitespaceBound:
    """Bounds runs of JSON whitespace (outside strings) to ``max_ws`` bytes, on top of llguidance.

    llguidance's ``whitespace_pattern`` is a lexer *skip* pattern that may repeat, so
    ``[ \t\n\r]{0,4}`` still allows any number of whitespace bytes in a row (measured on 1.7.6:
    200 tokens of 128 spaces after ``{``); a model with random weights then writes whitespace until
    ``max_tokens``. This tracks a 3-state JSON lexer (outside a string, inside, after a backslash)
    plus the current whitespace run over the accepted tokens, and forbids every token that would
    make a run outside strings longer than ``max_ws`` (native's and XGrammar's
    ``max_whitespace`` semantics).

    Per token and start state it precomputes ``lead`` (whitespace bytes before the first other byte,
    outside a string), ``inner_bad`` (a longer run later inside the token), the end state and the
    trailing run; the packed forbidden rows per (state, run) are built once per vocabulary.
    """

    def __init__(self, vocab: Vocabulary, max_ws: int):
        self.max_ws = max_ws
        n = vocab.vocab_size
        self.lead = np.zeros((3, n), dtype=np.int64)
        self.inner_bad = np.zeros((3, n), dtype=bool)
        self.all_ws = np.zeros(n, dtype=bool)  # start state 0 only
        self.end: dict[tuple[int, int], tuple[int, int]] = {}  # (state, token) -> (state, trailing run)
        for t, b in enumerate(vocab.token_bytes):
            if not b or len(b.translate(None, _INTERESTING)) == len(b):  # no whitespace, quote, backslash
                continue
            if len(b) > 1 and b[0] == 0x20 and len(b.translate(None, _INTERESTING)) == len(b) - 1:
                self.lead[0, t] = 1  # " word": one leading space, then plain bytes (most BPE tokens)
                continue
            for s0 in (0, 1, 2):
                st, run, lead, leading, worst = s0, 0, 0, s0 == 0, 0
                for c in b:
                    if st == 0:
                        if c in _WS:
                            if leading:
                                lead += 1
                            else:
                                run += 1
                                worst = max(worst, run)
                            continue
                        leading = False
                        run = 0
                        if c == 0x22:
                            st = 1
                    elif st == 1:
                        st = 2 if c == 0x5C else (0 if c == 0x22 else 1)
                    else:
                        st = 1
                self.lead[s0, t] = lead
                self.inner_bad[s0, t] = worst > max_ws
                if s0 == 0 and leading:
                    self.all_ws[t] = True
                self.end[(s0, t)] = (st, run)
        words = (n + 31) // 32
        self._rows: dict[tuple[int, int], np.ndarray] = {}
        for s0 in (0, 1, 2):
            for r in range(max_ws + 1 if s0 == 0 else 1):
                bad = self.inner_bad[s0] | ((self.lead[s0] + r) > max_ws)
                pad = np.zeros(words * 32, dtype=bool)
                pad[:n] = bad
                self._rows[(s0, r)] = np.packbits(pad.reshape(-1, 32), axis=1, bitorder="little").view(np.int32).ravel()

    def forbidden_row(self, state: tuple[int, int]) -> np.ndarray:
        """Packed int32 row of the tokens forbidden in lexer state ``(state, run)``."""
        return self._rows[state]

    def allows(self, state: tuple[int, int], t: int) -> bool:
        s0, run = state
        return not (self.inner_bad[s0, t] or self.lead[s0, t] + (run if s0 == 0 else 0) > self.max_ws)

    def step(self, state: tuple[int, int], t: int, nbytes: int) -> tuple[int, int]:
        s0, run = state
        if s0 == 0 and self.all_ws[t]:
            return (0, run + nbytes)
        # tokens without whitespace/quote/backslash (or " word" tokens) keep the state; after a
        # backslash any byte is the escaped one, back inside the string
        return self.end.get((s0, t), (1 if s0 == 2 else s0, 0))


class LLGuidanceMatcher(AdapterMatcher):
    """One request's state over an ``llguidance.LLMatcher`` (plus the JSON whitespace bound)."""

    def __init__(self, compiled: "LLGuidanceCompiledGrammar", max_rollback_tokens: int = -1):
        super().__init__(compiled.vocab, compiled._masks, max_rollback_tokens)
        self._m = compiled._template.deep_copy()
        self._nbytes = compiled._engine_words * 4
        self._ws = compiled._ws_bound
        self._lex: list[tuple[int, int]] = [(0, 0)]  # lexer state before each engine token, then now

    def _e_fill(self, row: np.ndarray) -> None:
        if row.shape[0] * 4 == self._nbytes:
            self._m.unsafe_compute_mask_ptr(row.ctypes.data, self._nbytes)
        else:
            tmp = np.zeros(self._nbytes // 4, dtype=np.int32)
            self._m.unsafe_compute_mask_ptr(tmp.ctypes.data, self._nbytes)
            n = min(row.shape[0], tmp.shape[0])
            row[:n] = tmp[:n]
            row[n:] = 0
        if self._ws is not None:
            bad = self._ws.forbidden_row(self._lex[-1])
            np.bitwise_and(row, ~bad[: row.shape[0]], out=row)

    def _e_accept(self, token: int) -> bool:
        if self._ws is not None and not self._ws.allows(self._lex[-1], token):
            return False
        if self._m.validate_tokens([token]) != 1:
            return False
        if not self._m.consume_token(token):
            return False
        if self._ws is not None:
            self._lex.append(self._ws.step(self._lex[-1], token, len(self.vocab.token_bytes[token])))
        return True

    def _e_rollback_lex(self, k: int) -> None:
        if self._ws is not None and k:
            del self._lex[-k:]

    def _e_rollback(self, k: int) -> None:
        self._m.rollback(k)
        self._e_rollback_lex(k)

    def _e_accepting(self) -> bool:
        return bool(self._m.is_accepting())

    def _e_reset(self) -> None:
        self._m.reset()
        del self._lex[1:]

    def _e_forced_bytes(self) -> bytes | None:
        # llguidance's fast-forward bytes; its compute_ff_tokens re-tokenizes them (its own safe
        # boundaries), which is not "exactly one allowed token", so forced_tokens stays generic
        return bytes(self._m.compute_ff_bytes())


class LLGuidanceCompiledGrammar(CompiledGrammar):
    """A validated llguidance grammar plus a start-state ``LLMatcher`` to copy."""

    def __init__(self, backend: "LLGuidanceBackend", constraint: Constraint, grammar: str, template: Any):
        self.vocab = backend.vocab
        self.constraint = constraint
        self.grammar = grammar
        self._template = template
        self._masks = backend._masks
        self._engine_words = backend._engine_words
        self._ws_bound = backend._whitespace_bound() if constraint.kind in ("json_schema", "json_object") else None

    def matcher(self, *, max_rollback_tokens: int = -1) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(self, max_rollback_tokens)

    @property
    def memory_size_bytes(self) -> int:
        return len(self.grammar)


class LLGuidanceBackend(Backend):
    """llguidance engine bound to one :class:`~structgate.vocab.Vocabulary`.

    Parameters
    ----------
    vocab : Vocabulary
    **options
        :class:`~structgate.backends.interface.CompileOptions` fields (``whitespace``,
        ``max_whitespace``, ``additional_properties``, ``threads``) and the extras
        ``llguidance_lenient``, ``llguidance_coerce_one_of`` (bool).
    """

    name = "structgate-llguidance"
    supported_kinds = frozenset({"regex", "json_schema", "json_object", "choice", "grammar"})
    bool_extras = ("llguidance_lenient", "llguidance_coerce_one_of")

    def __init__(self, vocab: Vocabulary, **options: Any) -> None:
        super().__init__(vocab, **options)
        self._tok = make_tokenizer(vocab)
        self._engine_words = (int(self._tok.vocab_size) + 31) // 32
        self._masks = VocabMasks(vocab)
        self._executor = None
        self._ws_bound_cache: WhitespaceBound | None = None

    def _whitespace_bound(self) -> "WhitespaceBound | None":
        """The JSON whitespace bound for ``whitespace="flexible"`` (None for compact: no whitespace)."""
        if self.options.whitespace == "compact":
            return None
        if self._ws_bound_cache is None:
            self._ws_bound_cache = WhitespaceBound(self.vocab, max(1, int(self.options.max_whitespace)))
        return self._ws_bound_cache

    def _json_overrides(self) -> dict:
        o = self.options
        ov: dict[str, Any] = {}
        if o.whitespace == "compact":
            ov.update(whitespace_flexible=False, item_separator=",", key_separator=":")
        else:
            ov.update(whitespace_flexible=True,
                      whitespace_pattern=r"[\x20\x0A\x0D\x09]{0,%d}" % max(1, int(o.max_whitespace)))
        if option_bool(o.extra, "llguidance_lenient", engine=self.name):
            ov["lenient"] = True
        if option_bool(o.extra, "llguidance_coerce_one_of", engine=self.name):
            ov["coerce_one_of"] = True
        return ov

    def validate(self, constraint: Constraint) -> None:
        """llguidance's own check of the grammar (``LLMatcher.validate_grammar``, what vLLM's guidance
        backend validates requests with), without building the matcher's lexer.

        Raises
        ------
        GrammarSyntaxError, UnsupportedFeatureError, ConstraintKindError
        """
        self.check_kind(constraint)
        self._checked_grammar(constraint)

    def _compile(self, constraint: Constraint) -> LLGuidanceCompiledGrammar:
        import llguidance as llg

        grammar, kind, text, shift = self._checked_grammar(constraint)
        template = llg.LLMatcher(self._tok, grammar, log_level=0)
        if template.is_error():
            raise _map_error(template.get_error(), kind, text, shift)
        return LLGuidanceCompiledGrammar(self, constraint, grammar, template)

    def _checked_grammar(self, constraint: Constraint) -> tuple[str, str, str, int]:
        """The llguidance grammar of ``constraint``, checked by ``LLMatcher.validate_grammar``:
        ``(grammar, kind, text, shift)`` (``shift``: lines prepended to a user grammar)."""
        import llguidance as llg

        L = llg.LLMatcher
        kind = constraint.kind
        shift = 0  # lines prepended to a user grammar (for error positions)
        if kind in ("json_schema", "json_object"):
            schema = constraint.value if kind == "json_schema" else {"type": "object"}
            text = json.dumps(schema, ensure_ascii=False)
            if kind == "json_schema" and not self.options.additional_properties:
                schema = apply_additional_properties_default(schema, False)
            if isinstance(schema, dict):
                xg = dict(self._json_overrides())
                xg.update(schema.get("x-guidance") or {})
                schema = {**schema, "x-guidance": xg}
            elif schema is False:
                schema = {"not": {}}
            else:
                schema = {}
            grammar = L.grammar_from_lark(_HEADER + "start: %json " + json.dumps(schema))
        elif kind == "regex":
            text = str(constraint.value)
            g = json.loads(L.grammar_from_regex(text))
            g["grammars"][0]["lark_grammar"] = _HEADER + g["grammars"][0]["lark_grammar"]
            grammar = json.dumps(g)
        elif kind == "choice":
            text = "start: " + " | ".join(json.dumps(c, ensure_ascii=False) for c in constraint.value)
            grammar = L.grammar_from_lark(_HEADER + text)
        else:  # grammar
            text = str(constraint.value)
            fmt = (constraint.grammar_format or "lark").lower()
            if fmt in ("gbnf", "ebnf"):
                from llguidance.gbnf_to_lark import any_to_lark

                try:
                    lark = any_to_lark(text)
                except Exception as e:  # the converter raises plain exceptions
                    raise GrammarSyntaxError(f"llguidance (GBNF to Lark): {e}", text, 0) from e
            elif fmt == "lark":
                lark = text
                shift = 0 if "%llguidance" in text else 1
            else:
                raise UnsupportedFeatureError(f"grammar format {fmt!r}", "llguidance takes 'lark' or 'gbnf'")
            grammar = L.grammar_from_lark(lark if "%llguidance" in lark else _HEADER + lark)
        err = L.validate_grammar(grammar, self._tok)
        if err and not err.startswith("WARNING"):
            raise _map_error(err, kind, text, shift)
        return grammar, kind, text, shift

    def fill_bitmask_batch(self, pairs: Sequence[tuple[LLGuidanceMatcher, int]], bitmask: Any) -> None:
        """Fill several rows in parallel with ``LLExecutor`` (``threads`` workers), then apply the
        EOS/special/padding rules per row. Arguments as :meth:`XGrammarBackend.fill_bitmask_batch`.

        Raises
        ------
        BitmaskError
        """
        import llguidance as llg

        from ..bitmask import as_numpy_row

        rows = [(m, r, as_numpy_row(bitmask, r, self.vocab.vocab_size)) for m, r in pairs]
        arr = rows[0][2].base if rows else None
        live = [(m, r) for m, r, _ in rows if not m._terminated]
        words = (self.vocab.vocab_size + 31) // 32
        if live and words == self._engine_words and arr is not None and arr.ndim == 2 and arr.flags["C_CONTIGUOUS"]:
            if self._executor is None:
                self._executor = llg.LLExecutor(max(1, int(self.options.threads)))
            self._executor.unsafe_compute_mask_ptr([(m._m, r) for m, r in live], arr.ctypes.data, words * 4,
                                                   arr.shape[0])
            for m, r, row in rows:
                if m._terminated:
                    row[:] = m._masks.eos_row
                else:
                    if m._ws is not None:
                        np.bitwise_and(row, ~m._ws.forbidden_row(m._lex[-1])[: row.shape[0]], out=row)
                    m._masks.sanitise(row, m._e_accepting())
            return
        for m, r, row in rows:
            m._fill_row(row)
