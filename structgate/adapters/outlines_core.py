"""outlines-core (dottxt-ai/outlines-core >= 0.2.14) behind structgate's interface: backend
``structgate-outlines-core``.

Mapping
-------
* vocabulary: ``outlines_core.Vocabulary(eos, {token_bytes: [ids]})`` with every real,
  non-special token of ``vocab`` (duplicates share a key); specials and padding are absent, so the
  index never allows them. outlines-core takes one EOS id; the others are handled here (every EOS
  id follows the interface rule);
* kinds: ``regex`` → ``Index(regex, vocabulary)`` (a full match of the whole output);
  ``json_schema`` → ``outlines_core.json_schema.build_regex_from_schema(schema,
  whitespace_pattern, max_recursion_depth)`` then ``Index`` (``whitespace="flexible"`` →
  ``[ \\t\\n\\r]{0,max_whitespace}``, ``"compact"`` → no whitespace; ``max_recursion_depth`` passes
  through); ``choice`` → the escaped alternation. No ``grammar`` / ``json_object`` (not regular);
* the matcher walks the ``Index`` directly (``get_next_state``), keeping the state history itself,
  so rollback depth is unlimited and EOS never reaches the engine (outlines' ``Guide`` never
  advances on EOS and caps rollback at 32); masks are packed once per visited state and cached in
  the compiled grammar (the index is immutable, so the cache is shared by all matchers);
* exactness: :func:`check_exact` refuses (``UnsupportedFeatureError`` naming the keyword and the JSON
  pointer) every JSON Schema keyword outlines-core would not enforce exactly: numeric bounds,
  ``uniqueItems``, ``contains``, property-count and property-name keywords, ``pattern`` beside a
  length or matching characters JSON escapes, most ``format`` values, overlapping ``oneOf`` ...
  (its regex builder ignores them, so its outputs could break the schema);
* errors: outlines-core reports ``ValueError("... error building NFA")`` without a position; the
  regex is first parsed with Python's ``re`` for a position, and constructs outlines rejects
  (look-around, backreferences, anchors other than at the ends) are reported as
  :class:`UnsupportedFeatureError`;
* compile processes: ``Index(regex, vocabulary)`` is one Rust call that cannot be stopped once
  started (about a second for a typical JSON schema on a 128k vocabulary, minutes for
  ``(a|b)*a(a|b){14}``; outlines-core 0.2.14 releases the GIL meanwhile, measured). With
  ``outlines_compile_processes=N`` (or ``$STRUCTGATE_OUTLINES_COMPILE_PROCESSES``) it is built in
  one of ``N`` worker processes (:class:`IndexPool`, each holding the outlines ``Vocabulary``, sent
  once when it starts) and the index comes back pickled; ``compile_timeout_s`` then stops the build
  (the worker is terminated and replaced), and the calling process never runs it (whatever a
  later outlines-core does with the GIL). Default 0: in process, where ``compile_timeout_s`` is
  only checked after the build; the vLLM plugin defaults to 1, for this engine alone
  (:func:`structgate.plugin.bridge.engine_defaults`).
"""
from __future__ import annotations

import json
import re
import threading
import time
from typing import Any, Mapping

import numpy as np

from ..backends.interface import Backend, CompiledGrammar, Constraint
from ..bitmask import bool_to_bitmask
from .._env import option_bool, option_int
from ..errors import (CompileLimitError, GrammarSyntaxError, InvalidConstraintError, StructgateError,
                      UnsupportedFeatureError)
from ..vocab import Vocabulary
from ..worker_pool import WorkerPool, ignore_sigint, worker_count
from ._base import AdapterMatcher, VocabMasks, choice_regex, json_pointer

__all__ = ["OutlinesCoreBackend", "OutlinesCoreCompiledGrammar", "OutlinesCoreMatcher", "IndexPool", "check_exact"]

#: environment default of the ``outlines_compile_processes`` option
ENV_COMPILE_PROCESSES = "STRUCTGATE_OUTLINES_COMPILE_PROCESSES"
#: upper bound of ``outlines_compile_processes`` (each worker is a Python process holding the vocabulary)
MAX_COMPILE_PROCESSES = 32
#: index pools kept at once (one per size and vocabulary); past it the least recently used is stopped
MAX_INDEX_POOLS = 4

_UNSUPPORTED = [
    (re.compile(r"\(\?<?[=!]"), "look-around"),
    (re.compile(r"(?<!\\)\\[1-9]"), "backreference"),
    (re.compile(r"\(\?P="), "backreference"),
    (re.compile(r"(?<!\\)\\[bB]"), "word boundary \\b"),
    (re.compile(r"(?<!\\)\\[AZz]"), "anchor \\A / \\Z"),
]


def _regex_error(pattern: str, engine_msg: str) -> Exception:
    for rx, what in _UNSUPPORTED:
        m = rx.search(pattern)
        if m:
            return UnsupportedFeatureError(what, f"outlines-core: {engine_msg}", f"position {m.start()}")
    try:
        re.compile(pattern)
    except re.error as e:
        return GrammarSyntaxError(f"outlines-core: {e.msg}", pattern, e.pos or 0)
    return GrammarSyntaxError(f"outlines-core: {engine_msg}", pattern, 0)


# -- JSON Schema keywords outlines-core does not enforce exactly ------------------------------------
# outlines-core 0.2.14's build_regex_from_schema ignores these keywords (its regex is the one without
# them), so it would accept instances that break them. Found by random walks over its index, each
# output checked with ``jsonschema``; tests/test_outlines_core_exact.py keeps one counterexample each.
_IGNORED_KEYWORDS = {
    "minimum": "numeric bound", "maximum": "numeric bound",
    "exclusiveMinimum": "numeric bound", "exclusiveMaximum": "numeric bound", "multipleOf": "numeric bound",
    "contains": "array keyword", "minContains": "array keyword", "maxContains": "array keyword",
    "unevaluatedItems": "array keyword",
    "minProperties": "object keyword", "maxProperties": "object keyword", "propertyNames": "object keyword",
    "patternProperties": "object keyword", "dependentRequired": "object keyword",
    "dependentSchemas": "object keyword", "dependencies": "object keyword", "unevaluatedProperties": "object keyword",
}
#: ``format`` values whose outlines-core regex only ever yields valid JSON strings (``email``, ``uri``
#: and ``time`` let raw quotes, backslashes or control characters into the string)
_EXACT_FORMATS = frozenset({"date", "date-time", "uuid"})
#: keywords that constrain nothing (a sibling ``enum`` / ``const`` makes outlines-core ignore the others)
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "$id", "$schema", "$anchor",
                          "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "enum", "const",
                          "contentEncoding", "contentMediaType", "format"})
_JSON_MUST_ESCAPE = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))


def _refuse(feature: str, why: str, where: str) -> UnsupportedFeatureError:
    at = "" if where else " (in the root schema)"
    return UnsupportedFeatureError(feature, f"outlines-core does not enforce it exactly: {why}{at}", where)


def _top_level_alternation(pattern: str) -> bool:
    """Whether ``pattern`` has a ``|`` outside every group and class."""
    depth, i, in_class = 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern.startswith("]", i + 1):
                i += 1  # "[]...]": the first "]" is a literal
            elif pattern.startswith("^]", i + 1):
                i += 2
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
        i += 1
    return False


def _matches_escaped_char(pattern: str, where: str) -> bool:
    """Whether ``pattern`` can match a character JSON writes escaped (``"``, ``\\``, U+0000..U+001F);
    outlines-core puts the pattern's characters into the JSON string raw. Parsed with the native
    regex parser (code-point sets)."""
    from ..native.regex.parser import Chars, parse_regex

    stack = [parse_regex(pattern, where=where)]
    while stack:
        node = stack.pop()
        if isinstance(node, Chars):
            if any(lo <= hi2 and lo2 <= hi for lo, hi in node.ranges for lo2, hi2 in _JSON_MUST_ESCAPE):
                return True
        elif hasattr(node, "items"):
            stack.extend(node.items)
        elif hasattr(node, "item"):
            stack.append(node.item)
    return False


def _disjoint_branches(branches: list) -> bool:
    """Whether no JSON value can match two of ``branches``: each names its ``type`` (``integer`` lies
    inside ``number``), or each is an ``enum`` / ``const`` with values of its own."""
    keys: list[set] = []
    for b in branches:
        if not isinstance(b, dict):
            return False
        if "const" in b or "enum" in b:
            vals = [b["const"]] if "const" in b else list(b["enum"])
            keys.append({("value", json.dumps(v, sort_keys=True)) for v in vals})
        elif isinstance(b.get("type"), (str, list)):
            t = set(b["type"]) if isinstance(b["type"], list) else {b["type"]}
            if t & {"integer", "number"}:
                t |= {"integer", "number"}
            keys.append({("type", x) for x in t})
        else:
            return False
    if len({next(iter(k))[0] for k in keys if k}) > 1:
        return False  # values against types: not worth the case analysis
    return all(not (a & b) for i, a in enumerate(keys) for b in keys[i + 1:])


def _resolve_local_ref(schema: Any, root: Any, hops: int = 16) -> Any:
    """``schema`` with local ``$ref`` chains (``#/...``, nothing beside them) followed, else itself."""
    from ..native.json_schema._common import _pointer_target

    while hops and isinstance(schema, dict) and set(schema) == {"$ref"} and isinstance(schema["$ref"], str) \
            and schema["$ref"].startswith("#"):
        hit = _pointer_target(root, "".join("/" + p for p in schema["$ref"][1:].split("/") if p))
        if hit is None:
            return schema
        schema, hops = hit[0], hops - 1
    return schema


def check_exact(schema: Any, root: Any = None, where: str = "") -> None:
    """Refuse every keyword of ``schema`` that outlines-core would not enforce exactly.

    outlines-core builds one regex from the schema; for the keywords and combinations below its regex
    is wider than the schema, so an output it allows can fail the schema (each found by random walks
    over its index checked with ``jsonschema``). Refused: numeric bounds (``minimum``, ``maximum``,
    ``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``); ``uniqueItems: true``,
    ``contains`` / ``minContains`` / ``maxContains``, ``unevaluatedItems``, ``minItems`` /
    ``maxItems`` beside ``prefixItems``; ``minProperties``, ``maxProperties``, ``propertyNames``,
    ``patternProperties``, ``dependentRequired``, ``dependentSchemas``, ``dependencies``,
    ``unevaluatedProperties``, a ``required`` name not in ``properties``, a property name JSON must
    escape, a property whose schema is ``{}`` (any value: outlines-core's alternation for it is
    ungrouped, so a bare ``null`` passes as the whole output); ``pattern`` beside ``minLength`` / ``maxLength`` (outlines-core drops the pattern), a
    pattern with a top-level ``|``, with ``\\d \\w \\s \\D \\W \\S \\b \\B`` (Rust's Unicode classes in
    outlines-core: a combining mark is a ``\\w``) or able to match ``"``, ``\\`` or a control
    character (written raw, not escaped); ``format`` other than ``date``, ``date-time``, ``uuid``
    (without a ``pattern`` or length, which outlines-core uses instead); ``enum`` / ``const`` whose
    values break a sibling keyword (outlines-core ignores the siblings); ``allOf`` of several schemas
    (outlines-core concatenates them); ``oneOf`` whose branches are not disjoint by type or value.
    Narrowing (valid outputs outlines-core never produces: whitespace, key order, string escapes,
    exponents without a sign) is not refused. Every subschema (``properties``, ``items``,
    ``anyOf``, ``$defs`` ...) is checked.

    Raises
    ------
    UnsupportedFeatureError
        ``feature`` = the keyword, ``where`` = the JSON pointer of the schema holding it (``""``: the
        root).
    """
    if root is None:
        root = schema
    if not isinstance(schema, dict):
        return
    for kw, what in _IGNORED_KEYWORDS.items():
        if kw in schema:
            raise _refuse(kw, f"a {what} outlines-core ignores", where)
    if schema.get("uniqueItems") is True:
        raise _refuse("uniqueItems", "outlines-core ignores it", where)
    if "prefixItems" in schema:
        for kw in ("minItems", "maxItems"):
            if kw in schema:
                raise _refuse(kw, "beside prefixItems, outlines-core ignores it", where)
    pat = schema.get("pattern")
    if pat is not None:
        for kw in ("minLength", "maxLength"):
            if kw in schema:
                raise _refuse("pattern", f"beside {kw}, outlines-core drops the pattern", where)
        if isinstance(pat, str):
            m = re.search(r"(?<!\\)(?:\\\\)*\\([dwsDWSbB])", pat)
            if m:
                raise _refuse("pattern", f"\\{m.group(1)} is Rust's Unicode class in outlines-core, neither JSON "
                              "Schema's (ECMAScript, ASCII) nor Python's (write the class out, e.g. [0-9])", where)
            if _top_level_alternation(pat):
                raise _refuse("pattern", "a top-level '|' escapes outlines-core's quotes (group it: (a|b))", where)
            if _matches_escaped_char(pat, json_pointer(where, "pattern")):
                raise _refuse("pattern", "it can match '\"', '\\' or a control character, which outlines-core "
                              "writes into the JSON string unescaped", where)
    fmt = schema.get("format")
    if fmt is not None and fmt not in _EXACT_FORMATS and not ({"pattern", "minLength", "maxLength"} & schema.keys()):
        raise _refuse("format", f"outlines-core's regex for format {fmt!r} lets unescaped quotes, backslashes or "
                      f"control characters into the string (exact: {', '.join(sorted(_EXACT_FORMATS))})", where)
    props = schema.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            if '"' in name or "\\" in name or any(ord(c) < 0x20 for c in name):
                raise _refuse("properties", f"property name {name!r} needs JSON escapes, which outlines-core "
                              "does not write", json_pointer(where, "properties", name))
            if _resolve_local_ref(sub, root) == {}:
                raise _refuse("properties", f"property {name!r} takes any value, and outlines-core writes that "
                              "alternation ungrouped, so a bare value (null, 12) passes as the whole output "
                              "(dottxt-ai/outlines-core#151 family)", json_pointer(where, "properties", name))
    req = schema.get("required")
    if isinstance(req, list):
        missing = [r for r in req if not (isinstance(props, dict) and r in props)]
        if missing:
            raise _refuse("required", f"required {missing[0]!r} is not in properties, so outlines-core may "
                          "leave it out", where)
    if ("enum" in schema or "const" in schema) and set(schema) - _ANNOTATIONS:
        import jsonschema

        kw = "const" if "const" in schema else "enum"
        vals = [schema["const"]] if kw == "const" else list(schema.get("enum") or [])
        sub = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        if "$ref" in sub:
            raise _refuse("$ref", f"beside {kw}, outlines-core ignores it", where)
        for k in ("$defs", "definitions"):
            if isinstance(root, dict) and k in root and k not in sub:
                sub[k] = root[k]
        validator = jsonschema.Draft202012Validator(sub)
        for val in vals:
            if not validator.is_valid(val):
                raise _refuse(kw, f"value {json.dumps(val)[:40]} breaks a sibling keyword, which outlines-core "
                              "ignores beside an enum/const", where)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) > 1:
        raise _refuse("allOf", "outlines-core concatenates the branches' regexes", where)
    one_of = schema.get("oneOf")
    if isinstance(one_of, list) and len(one_of) > 1 and not _disjoint_branches(one_of):
        raise _refuse("oneOf", "outlines-core treats it as anyOf, and the branches are not disjoint by type "
                      "or value", where)
    for kw in ("properties", "$defs", "definitions"):
        if isinstance(schema.get(kw), dict):
            for k, sub in schema[kw].items():
                check_exact(sub, root, json_pointer(where, kw, k))
    for kw in ("anyOf", "oneOf", "allOf", "prefixItems", "items", "additionalProperties", "additionalItems",
               "not", "if", "then", "else"):
        sub = schema.get(kw)
        if isinstance(sub, dict):
            check_exact(sub, root, json_pointer(where, kw))
        elif isinstance(sub, list):
            for i, s in enumerate(sub):
                check_exact(s, root, json_pointer(where, kw, i))


def strip_end_anchors(pattern: str) -> str:
    """Drop a leading ``^`` and a trailing unescaped ``$``: no-ops under whole-output matching,
    but outlines-core 0.2.14 refuses anchored patterns ("anchored universal start state doesn't
    exist")."""
    if pattern.startswith("^"):
        pattern = pattern[1:]
    if pattern.endswith("$"):
        k = len(pattern) - 1
        n_bs = 0
        while k - 1 - n_bs >= 0 and pattern[k - 1 - n_bs] == "\\":
            n_bs += 1
        if n_bs % 2 == 0:
            pattern = pattern[:-1]
    return pattern


# -- the index built in worker processes ------------------------------------------------------------
_worker_vocab: Any = None  # (worker side) the outlines Vocabulary this worker builds indexes for


def _worker_init(oc_vocab: Any) -> None:
    """Worker side of :class:`IndexPool`: keep the outlines ``Vocabulary`` (unpickled once, as the
    worker starts) and ignore SIGINT."""
    global _worker_vocab
    ignore_sigint()
    _worker_vocab = oc_vocab


def _index_in_worker(regex: str) -> Any:
    """Worker side: ``outlines_core.Index(regex, vocabulary)`` (returned pickled; a ``ValueError``
    from outlines-core comes back as it is, and the caller maps it as in process)."""
    import outlines_core as oc

    return oc.Index(regex, _worker_vocab)


class IndexPool(WorkerPool):
    """Worker processes that build outlines-core indexes for one vocabulary
    (:class:`structgate.worker_pool.WorkerPool`, the mechanism of native's compile pool), one pool
    per size and vocabulary fingerprint; at most :data:`MAX_INDEX_POOLS` are kept (the least
    recently used is stopped; a backend still using it gets a fresh one on its next compile).

    Each worker receives the outlines ``Vocabulary`` once, when it starts (about 1.6 MB pickled for
    Llama 3's 128k tokens); a compile sends the regex and receives the pickled ``Index``. Past the
    compile's deadline the pool's workers are terminated (a replacement pool starts at once) and
    the compile raises ``CompileLimitError("compile_timeout_s")``; a worker that dies raises
    ``CompileLimitError("compile_process")``. Workers start on the first compile (not when the
    backend is made: a server's validation backend never builds an index); the start is not
    charged to that compile's ``compile_timeout_s``.
    """

    _pools: dict = {}
    _lock = threading.Lock()

    def __init__(self, n: int, fingerprint: str, oc_vocab: Any) -> None:
        super().__init__((n, fingerprint), n, initializer=_worker_init, initargs=(oc_vocab,))

    @classmethod
    def get(cls, n: int, fingerprint: str, oc_vocab: Any) -> "IndexPool":
        """The pool of ``n`` workers for the vocabulary ``fingerprint`` (made, not yet started, when
        there is none; ``oc_vocab`` is the outlines ``Vocabulary`` its workers receive)."""
        key = (n, fingerprint)
        pool = cls._get_or_make(key, lambda: cls(n, fingerprint, oc_vocab))
        with cls._lock:
            if cls._pools.get(key) is pool:  # most recently used last
                cls._pools[key] = cls._pools.pop(key)
            old = list(cls._pools.values())[:-MAX_INDEX_POOLS]
        for p in old:
            cls._drop(p)
        return pool

    def build(self, regex: str, deadline: float | None, limit_s: float) -> tuple[Any, float]:
        """``(outlines_core.Index of regex, seconds waited for the workers' start)``.

        Raises
        ------
        ValueError, TypeError
            outlines-core's own errors, as in process (the caller maps them).
        CompileLimitError
            ``compile_timeout_s`` past ``deadline`` (``time.monotonic()``; ``limit_s`` is the
            configured limit, seconds), ``compile_process`` when the worker died.
        """
        return self.run(_index_in_worker, (regex,), deadline,
                        lambda: CompileLimitError("compile_timeout_s", limit_s, limit_s,
                                                  "outlines-core's index build was stopped in its worker process"))


def _compile_processes(value: Any) -> int:
    """The ``outlines_compile_processes`` option: ``value``, else ``$STRUCTGATE_OUTLINES_COMPILE_PROCESSES``,
    else 0 (:func:`structgate.worker_pool.worker_count`).

    Raises
    ------
    InvalidConstraintError
        Not an integer from 0 to :data:`MAX_COMPILE_PROCESSES`.
    """
    return worker_count(value, engine="outlines-core", option="outlines_compile_processes",
                        env=ENV_COMPILE_PROCESSES, in_process="build the index in this process",
                        maximum=MAX_COMPILE_PROCESSES)


def _check_whitespace_pattern(options: Mapping[str, Any]) -> None:
    """``outlines_whitespace_pattern``, when given, is a string.

    Raises
    ------
    InvalidConstraintError
        It is not; names the option.
    """
    ws = options.get("outlines_whitespace_pattern")
    if ws is not None and not isinstance(ws, str):
        raise InvalidConstraintError(f"outlines-core option 'outlines_whitespace_pattern' must be a regex "
                                     f"string, got {ws!r}")


class OutlinesCoreMatcher(AdapterMatcher):
    """One request's state: an outlines-core index state plus the state history."""

    def __init__(self, compiled: "OutlinesCoreCompiledGrammar", max_rollback_tokens: int = -1):
        super().__init__(compiled.vocab, compiled._masks, max_rollback_tokens)
        self._g = compiled
        self._state = compiled._initial
        self._states: list[int] = []

    def _e_fill(self, row: np.ndarray) -> None:
        row[:] = self._g._row(self._state)

    def _e_accept(self, token: int) -> bool:
        nxt = self._g._next(self._state, token)
        if nxt is None:
            return False
        self._states.append(self._state)
        self._state = nxt
        return True

    def _e_rollback(self, k: int) -> None:
        self._state = self._states[-k]
        del self._states[-k:]

    def _e_accepting(self) -> bool:
        return self._g._final(self._state)

    def _e_reset(self) -> None:
        self._state = self._g._initial
        self._states.clear()


class OutlinesCoreCompiledGrammar(CompiledGrammar):
    """An ``outlines_core.Index`` plus a per-state cache of packed mask rows (shared, thread-safe:
    entries are computed idempotently and inserted under a lock)."""

    def __init__(self, backend: "OutlinesCoreBackend", constraint: Constraint, regex: str, index: Any):
        self.vocab = backend.vocab
        self.constraint = constraint
        self.regex = regex
        self._index = index
        self._masks = backend._masks
        self._initial = int(index.get_initial_state())
        self._finals = frozenset(int(s) for s in index.get_final_states())
        self._rows: dict[int, np.ndarray] = {}
        self._trans: dict[int, dict[int, int]] = {}
        self._lock = threading.Lock()

    def _final(self, state: int) -> bool:
        return state in self._finals

    def _next(self, state: int, token: int) -> int | None:
        t = self._trans.get(state)
        if t is None:
            t = {int(k): int(v) for k, v in self._transitions().get(state, {}).items()}
            with self._lock:
                self._trans[state] = t
        return t.get(token)

    def _transitions(self) -> dict:
        tr = self.__dict__.get("_all_trans")
        if tr is None:
            tr = self._index.get_transitions()
            self.__dict__["_all_trans"] = tr
        return tr

    def _row(self, state: int) -> np.ndarray:
        r = self._rows.get(state)
        if r is None:
            ok = np.zeros(self.vocab.vocab_size, dtype=bool)
            ids = [t for t in self._index.get_allowed_tokens(state) if 0 <= t < self.vocab.vocab_size]
            ok[ids] = True
            r = bool_to_bitmask(ok)
            with self._lock:
                self._rows[state] = r
        return r

    def matcher(self, *, max_rollback_tokens: int = -1) -> OutlinesCoreMatcher:
        return OutlinesCoreMatcher(self, max_rollback_tokens)

    @property
    def memory_size_bytes(self) -> int:
        return sum(r.nbytes for r in self._rows.values())


class OutlinesCoreBackend(Backend):
    """outlines-core engine bound to one :class:`~structgate.vocab.Vocabulary`.

    Parameters
    ----------
    vocab : Vocabulary
    **options
        :class:`~structgate.backends.interface.CompileOptions` fields (``whitespace``,
        ``max_whitespace``, ``max_recursion_depth``); extra ``outlines_whitespace_pattern`` (a regex)
        overrides the whitespace pattern; ``outlines_allow_inexact=True`` skips :func:`check_exact`
        (outlines-core's own regex for every schema it builds, wider than the schema where it
        ignores a keyword: for comparing engines, never for serving);
        ``outlines_compile_processes`` (int, 0 to 32; default ``$STRUCTGATE_OUTLINES_COMPILE_PROCESSES``
        or 0) builds the index in that many worker processes (:class:`IndexPool`), so the build
        does not run in this process and does not outlive ``compile_timeout_s`` (seconds).

    Raises
    ------
    InvalidConstraintError
        ``outlines_compile_processes`` (or its variable) is not an integer from 0 to 32.
    """

    name = "structgate-outlines-core"
    supported_kinds = frozenset({"regex", "json_schema", "choice"})
    extra_options = frozenset({"outlines_max_recursion_depth", "outlines_whitespace_pattern",
                               "outlines_allow_inexact", "outlines_compile_processes"})
    int_extras = ("outlines_max_recursion_depth",)
    bool_extras = ("outlines_allow_inexact",)

    def __init__(self, vocab: Vocabulary, **options: Any) -> None:
        import outlines_core as oc

        super().__init__(vocab, **options)  # (checks the int_extras and bool_extras)
        _check_whitespace_pattern(self.options.extra)
        self.compile_processes = _compile_processes(self.options.extra.get("outlines_compile_processes"))
        m: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b and i not in vocab.special_token_ids:
                m.setdefault(b, []).append(i)
        self._oc_vocab = oc.Vocabulary(vocab.eos_token_ids[0], m)
        self._masks = VocabMasks(vocab)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """:meth:`Backend.check_options`: ``outlines_compile_processes`` (or its variable), as the
        constructor checks it (:func:`_compile_processes`); the :attr:`int_extras` and
        :attr:`bool_extras` (:meth:`check_typed_extras`); ``outlines_whitespace_pattern`` a string
        (:func:`_check_whitespace_pattern`). The constructor makes the same checks.

        Raises
        ------
        InvalidConstraintError
            A bad value; names the option (or the variable).
        """
        _compile_processes(options.get("outlines_compile_processes"))
        cls.check_typed_extras(options)
        _check_whitespace_pattern(options)

    def _unroll_depth(self) -> int:
        """Depth to which outlines-core unrolls recursive schemas: ``extra["outlines_max_recursion_depth"]``
        (default 3, outlines' own default); the shared ``max_recursion_depth`` (native's stack bound,
        default 128) would make outlines' flat regex explode."""
        d = option_int(self.options.extra, "outlines_max_recursion_depth", engine=self.name)
        return 3 if d is None else d

    def _whitespace(self) -> str:
        o = self.options
        if o.extra.get("outlines_whitespace_pattern") is not None:
            return str(o.extra["outlines_whitespace_pattern"])
        if o.whitespace == "compact":
            return ""
        return r"[ \t\n\r]{0,%d}" % max(1, int(o.max_whitespace))

    def schema_regex(self, schema: Any) -> str:
        """The regex outlines-core builds for ``schema`` with this backend's options.

        Raises
        ------
        GrammarSyntaxError, UnsupportedFeatureError
            A keyword outlines-core would not enforce exactly is refused first (:func:`check_exact`).
        """
        from outlines_core.json_schema import build_regex_from_schema

        if not option_bool(self.options.extra, "outlines_allow_inexact", engine=self.name):
            check_exact(schema)
        text = json.dumps(schema, ensure_ascii=False)
        try:
            return build_regex_from_schema(text, self._whitespace(), self._unroll_depth())
        except (ValueError, TypeError) as e:
            msg = str(e)
            low = msg.lower()
            if "unsupported" in low or "not supported" in low or "not yet" in low:
                return_feature = msg.split(":", 1)[-1].strip() or msg
                raise UnsupportedFeatureError(return_feature, f"outlines-core: {msg}") from e
            pos = 0
            for w in re.findall(r"'([^']+)'|\"([^\"]+)\"", msg):
                w = next(x for x in w if x)
                i = text.find(w)
                if i >= 0:
                    pos = i
                    break
            raise GrammarSyntaxError(f"outlines-core: {msg}", text, pos) from e

    def validate(self, constraint: Constraint) -> None:
        """The checks before outlines-core's index: the kind, and for a JSON schema
        :func:`check_exact` and outlines-core's schema-to-regex translation (what vLLM's outlines
        backend validates requests with). The index build itself, one Rust call that may take
        minutes (``(a|b)*a(a|b){20}``), is left to :meth:`compile`, so a regex error (the Rust
        regex crate's syntax) is found there.

        Raises
        ------
        GrammarSyntaxError, UnsupportedFeatureError, ConstraintKindError
        """
        self.check_kind(constraint)
        if constraint.kind == "json_schema":
            self.schema_regex(constraint.value)

    def _compile(self, constraint: Constraint) -> OutlinesCoreCompiledGrammar:
        """The regex of ``constraint``, then outlines-core's index of it: in a worker process when
        ``compile_processes > 0`` (preemptive ``compile_timeout_s``), else in this process
        (``compile_timeout_s`` checked once the build returns).

        Raises
        ------
        GrammarSyntaxError, UnsupportedFeatureError
            As :meth:`validate`, and outlines-core's regex errors (the same types and messages from
            a worker as in process).
        CompileLimitError
            ``compile_timeout_s`` (seconds, counted from the compile's start; the workers' first
            start is not counted), ``compile_process`` (the worker died), ``outlines_dfa_size``.
        """
        import outlines_core as oc

        t0 = time.monotonic()
        lim = self.options.compile_timeout_s
        deadline = t0 + lim if lim and lim > 0 else None
        kind = constraint.kind
        if kind == "json_schema":
            regex = self.schema_regex(constraint.value)
        elif kind == "choice":
            regex = choice_regex(constraint.value)
        else:
            regex = strip_end_anchors(str(constraint.value))
        try:
            if self.compile_processes > 0:
                pool = IndexPool.get(self.compile_processes, self.vocab.fingerprint, self._oc_vocab)
                index, _waited = pool.build(regex, deadline, lim)
            else:
                index = oc.Index(regex, self._oc_vocab)
                elapsed = time.monotonic() - t0
                if deadline is not None and elapsed > lim:
                    raise CompileLimitError("compile_timeout_s", round(elapsed, 3), lim,
                                            "outlines-core's index build runs in one call that cannot be cut "
                                            "in process (outlines_compile_processes=1 stops it at the limit)")
        except StructgateError:
            raise
        except (ValueError, TypeError) as e:
            msg = str(e)
            if "size limit" in msg.lower() or "too big" in msg.lower():
                raise CompileLimitError("outlines_dfa_size", "exceeded", "engine limit", msg) from e
            if kind == "regex":
                raise _regex_error(regex, msg) from e
            raise UnsupportedFeatureError("regex the JSON Schema translates to",
                                          f"outlines-core: {msg}; regex {regex[:200]!r}") from e
        return OutlinesCoreCompiledGrammar(self, constraint, regex, index)
