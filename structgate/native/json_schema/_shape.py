"""Keyword value shapes: one iterative walk over a schema document that refuses, with a
:class:`~structgate.errors.GrammarSyntaxError` naming the keyword's JSON pointer, every keyword
whose value has the wrong JSON type (``{"not": {"type": 5}}``, ``{"$ref": []}``,
``{"format": 5}``, ``{"required": "a"}``, ``{"allOf": [{"prefixItems": 5}]}``...).

The compiler reads keyword values where it needs them, often after merging ``allOf`` members or
negating a ``not``, so a value of the wrong shape used to surface as a bare ``TypeError`` deep in
an emitter, or was silently ignored. The rules are those of the JSON Schema metaschemas (draft 4
to 2020-12, whichever form the compiler accepts: draft-4 boolean ``exclusiveMinimum``, an array
``items``, ``dependencies``, ``definitions``), checked by hand: ``jsonschema``'s metaschema
validation costs 3.4 ms per MaskBench schema at the median (50 ms at p99), more than a whole
compile, while this walk costs microseconds. It runs once per compile, before the compiler.

Where the walk is deliberately more lenient than the metaschemas:

* keywords the compiler never reads and that change no language (``title``, ``description``,
  ``default``, ``examples``, ``$comment``, ``readOnly``...) are not checked: a sloppy annotation
  is not worth refusing a request;
* ``required``, ``enum`` and ``dependentRequired`` lists may repeat an entry (a name listed twice
  is required once: the meaning is plain, and real schemas do it);
* unknown keywords are ignored, as the specification says; a subschema is walked only when a
  keyword puts it at a schema position, or when a local ``$ref`` points at it.

Integers may be written as floats with no fraction (``"minLength": 2.0``), as validators read them.

The same walk records the in-place edges (``$ref`` and the keywords that apply a subschema to the
same value) and refuses a cycle of them that the root reaches (:func:`_ref_cycle`): a schema that
applies itself to the same value forever, which the compiler used to read as "any value".
"""
from __future__ import annotations

import json
from urllib.parse import unquote

from ...errors import GrammarSyntaxError
from ._common import TYPES, _is_num, _is_whole, _pointer_target, _ptr

__all__ = ["check_shapes"]

(_K_SCHEMA, _K_MAP, _K_LIST, _K_ITEMS, _K_COUNT, _K_NUMBER, _K_STRING, _K_TYPE, _K_STRINGS, _K_ENUM, _K_BOOL,
 _K_DEPS) = range(12)

#: keywords that apply their subschema(s) to the same value (with ``$ref``: the edges of a cycle)
_IN_PLACE = frozenset({"not", "if", "then", "else"})
#: keywords whose value is one schema
_SCHEMA = frozenset({"additionalProperties", "additionalItems", "unevaluatedItems", "unevaluatedProperties",
                     "contains", "propertyNames", "not", "if", "then", "else"})
#: keywords whose value is an object of schemas
_SCHEMA_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
#: keywords whose value is a non-empty array of schemas
_SCHEMA_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
#: keywords whose value is a non-negative integer
_COUNT = frozenset({"minLength", "maxLength", "minItems", "maxItems", "minContains", "maxContains",
                    "minProperties", "maxProperties"})
#: keywords whose value is a string (the core vocabulary read by validators and the compiler)
_STRING = frozenset({"$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "pattern", "format"})
#: keyword -> the shape of its value
_KIND = {**dict.fromkeys(_SCHEMA, _K_SCHEMA), **dict.fromkeys(_SCHEMA_MAP, _K_MAP),
         **dict.fromkeys(_SCHEMA_LIST, _K_LIST), **dict.fromkeys(_COUNT, _K_COUNT),
         **dict.fromkeys(_STRING, _K_STRING), "items": _K_ITEMS, "type": _K_TYPE, "required": _K_STRINGS,
         "enum": _K_ENUM, "uniqueItems": _K_BOOL, "dependentRequired": _K_DEPS, "dependencies": _K_DEPS,
         **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"), _K_NUMBER)}


def _show(v) -> str:
    """``v`` as JSON text for the error's display (at most a few hundred characters)."""
    try:
        text = json.dumps(v, ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        try:
            text = repr(v)
        except RecursionError:
            text = "(a value nested too deeply to show)"
    return text if len(text) <= 400 else text[:400] + "..."


def _fail(message: str, value, path) -> None:
    raise GrammarSyntaxError(message, _show(value), 0, _pointer(path))


def _pointer(path) -> str:
    """The JSON pointer of ``path``, a linked tuple ``(parent path, key)`` (``()``: the root);
    built only for an error, so that the walk makes no string per keyword."""
    keys = []
    while path:
        path, k = path
        keys.append(k)
    return _ptr("", *reversed(keys))


def _is_count(v) -> bool:
    return _is_num(v) and v >= 0 and _is_whole(v)


def _strings(kw: str, v, path) -> None:
    if not isinstance(v, list):
        _fail(f"{kw} must be an array of strings", v, path)
    for i, x in enumerate(v):
        if not isinstance(x, str):
            _fail(f"{kw} must be an array of strings", x, (path, i))


def _type(v, path) -> None:
    names = ", ".join(TYPES)
    if isinstance(v, str):
        if v not in TYPES:
            _fail(f"invalid type {_show(v)} (expected one of {names})", v, path)
        return
    if not isinstance(v, list) or not v:
        _fail(f"type must be a type name or a non-empty array of type names ({names})", v, path)
    for i, x in enumerate(v):
        if not isinstance(x, str) or x not in TYPES:
            _fail(f"invalid type {_show(x)[:60]} (expected one of {names})", x, (path, i))
        if x in v[:i]:
            _fail(f"type lists {_show(x)} twice (the type names must be unique)", v, (path, i))


def _target(root, ref: str):
    """The node a local ``$ref`` (``#`` or ``#/json/pointer``) points at, and its pointer; None when
    it is not local or points nowhere (the compiler names those)."""
    if not ref.startswith("#"):
        return None
    frag = unquote(ref[1:])
    if frag and not frag.startswith("/"):
        return None
    hit = _pointer_target(root, frag)
    if hit is None:
        return None
    node, path = hit[0], ()
    for tok in hit[1]:
        path = (path, tok)
    return node, path


def check_shapes(root) -> None:
    """Raise :class:`GrammarSyntaxError` for the first keyword of the document ``root`` whose value
    has the wrong shape (see the module docstring), with the keyword's JSON pointer as ``where``
    (the pointer of the entry, ``/required/1``, when one entry of a list is wrong).

    Walks every subschema reachable from ``root`` through schema keywords and local ``$ref``
    (targets under unknown keywords, ``#/components/schemas/A``, included), iteratively: a deeply
    nested document raises no ``RecursionError`` here. A ``root`` that is not an object is left to
    the compiler (``true``/``false`` are schemas; anything else is refused there)."""
    if not isinstance(root, dict):
        return
    seen = {id(root)}
    stack = [(root, ())]
    #: id(schema) -> (its path, [(subschema, the $ref string or None), ...]): the in-place edges
    #: (keywords that apply a subschema to the same value), for :func:`_ref_cycle`
    graph: dict[int, tuple] = {}
    refs = False
    while stack:
        s, w = stack.pop()
        subs: list[tuple] = []  # (subschema, path) in document order
        inplace: list[tuple] = []
        for kw, v in s.items():
            kind = _KIND.get(kw) if isinstance(kw, str) else None
            if kind is None:
                continue
            p = (w, kw)
            if kind == _K_SCHEMA:
                if isinstance(v, dict):
                    subs.append((v, p))
                    if kw in _IN_PLACE:
                        inplace.append((v, None))
                elif not isinstance(v, bool):
                    _fail("a schema must be a JSON object or a boolean", v, p)
            elif kind == _K_MAP:
                if not isinstance(v, dict):
                    _fail(f"{kw} must be an object whose values are schemas", v, p)
                for k, x in v.items():
                    if isinstance(x, dict):
                        subs.append((x, (p, k)))
                        if kw == "dependentSchemas":
                            inplace.append((x, None))
                    elif not isinstance(x, bool):
                        _fail("a schema must be a JSON object or a boolean", x, (p, k))
                    if not isinstance(k, str):
                        _fail(f"{kw} must be an object whose keys are strings", k, p)
            elif kind == _K_LIST or (kind == _K_ITEMS and isinstance(v, list)):
                # items: one schema per position from draft 4 to 2019-09
                if not isinstance(v, list) or (not v and kind == _K_LIST):
                    _fail(f"{kw} must be a non-empty array of schemas", v, p)
                for i, x in enumerate(v):
                    if isinstance(x, dict):
                        subs.append((x, (p, i)))
                        if kind == _K_LIST and kw != "prefixItems":
                            inplace.append((x, None))
                    elif not isinstance(x, bool):
                        _fail("a schema must be a JSON object or a boolean", x, (p, i))
            elif kind == _K_ITEMS:
                if isinstance(v, dict):
                    subs.append((v, p))
                elif not isinstance(v, bool):
                    _fail("a schema must be a JSON object or a boolean", v, p)
            elif kind == _K_COUNT:
                if not _is_count(v):
                    _fail(f"{kw} must be a non-negative integer", v, p)
            elif kind == _K_NUMBER:
                # draft 4: exclusiveMinimum / exclusiveMaximum are booleans
                if not _is_num(v) and not (kw.startswith("exclusive") and isinstance(v, bool)):
                    _fail(f"{kw} must be a number", v, p)
                if kw == "multipleOf" and not v > 0:
                    _fail("multipleOf must be a number > 0", v, p)
            elif kind == _K_STRING:
                if not isinstance(v, str):
                    _fail(f"{kw} must be a string", v, p)
                if kw == "$ref":
                    hit = _target(root, v)
                    if hit is not None and isinstance(hit[0], dict):
                        refs = True
                        inplace.append((hit[0], v))
                        if id(hit[0]) not in seen:
                            seen.add(id(hit[0]))
                            stack.append(hit)
            elif kind == _K_TYPE:
                _type(v, p)
            elif kind == _K_STRINGS:
                _strings(kw, v, p)
            elif kind == _K_ENUM:
                if not isinstance(v, list):
                    _fail("enum must be an array", v, p)
            elif kind == _K_BOOL:
                if not isinstance(v, bool):
                    _fail(f"{kw} must be a boolean", v, p)
            elif kind == _K_DEPS:
                # dependentRequired: names; dependencies (draft 4 to 7): names or a schema, per key
                if not isinstance(v, dict):
                    _fail(f"{kw} must be an object whose values are arrays of strings"
                          + (" or schemas" if kw == "dependencies" else ""), v, p)
                for k, x in v.items():
                    if isinstance(x, dict) and kw == "dependencies":
                        subs.append((x, (p, k)))
                        inplace.append((x, None))
                    elif not (isinstance(x, bool) and kw == "dependencies"):
                        _strings(kw, x, (p, k))
        if inplace:
            graph[id(s)] = (w, inplace)
        for x in reversed(subs):
            if id(x[0]) not in seen:
                seen.add(id(x[0]))
                stack.append(x)
    if refs:  # (without a $ref, in-place keywords only nest: no cycle)
        _ref_cycle(root, graph)


def _ref_cycle(root, graph: dict) -> None:
    """Raise :class:`GrammarSyntaxError` for a cycle of ``$ref`` and in-place keywords (``allOf``,
    ``anyOf``, ``oneOf``, ``not``, ``if``/``then``/``else``, ``dependentSchemas``,
    ``dependencies``) among the subschemas the root evaluates: ``{"$ref": "#"}``,
    ``{"allOf": [{"$ref": "#"}]}``, ``#/$defs/a`` -> ``#/$defs/b`` -> ``#/$defs/a``. Such a schema
    applies itself to the same value forever: a validator never finishes (``jsonschema`` recurses
    until ``RecursionError``; the specification leaves it undefined), and the compiler used to
    read it as "any value". Recursion through a keyword that descends into the value
    (``properties``, ``items``, ``prefixItems``, ``additionalProperties``...) is legitimate and
    not an edge here. The message names the cycle's ``$ref`` keywords; ``where`` is the first."""
    cycle = _first_cycle(graph, None)
    if cycle is None:
        return
    live = _evaluated(root)  # (rare: a cycle exists) only a cycle the root can reach is an error
    cycle = _first_cycle(graph, live)
    if cycle is None:
        return
    chain = " -> ".join(f"{_pointer((graph[n][0], '$ref'))} {json.dumps(r, ensure_ascii=False)}" for n, r in cycle)
    first_node, first_ref = cycle[0]
    raise GrammarSyntaxError(f"$ref cycle that never descends into the value (an infinite recursion; recurse "
                             f"through properties, items...): {chain}", first_ref, 0,
                             _pointer((graph[first_node][0], "$ref")))


def _first_cycle(graph: dict, allowed: set | None) -> list | None:
    """The first cycle of ``graph``'s edges (depth first, iterative) among the nodes in ``allowed``
    (None: all), as its ``$ref`` edges ``[(node id, $ref string), ...]`` in order; None if none."""
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in graph:
        if start in state or (allowed is not None and start not in allowed):
            continue
        state[start] = 1
        trail, labels, its = [start], [None], [iter(graph[start][1])]
        while its:
            nxt = next(its[-1], None)
            if nxt is None:
                state[trail.pop()] = 2
                labels.pop()
                its.pop()
                continue
            child, ref = nxt
            c = id(child)
            if c not in graph or (allowed is not None and c not in allowed):
                continue  # no in-place edge out of it: on no cycle
            st = state.get(c)
            if st == 1:
                i = trail.index(c)
                edges = [(trail[j], labels[j + 1]) for j in range(i, len(trail) - 1)] + [(trail[-1], ref)]
                return [(n, r) for n, r in edges if r is not None]
            if st is None:
                state[c] = 1
                trail.append(c)
                labels.append(ref)
                its.append(iter(graph[c][1]))
    return None


def _evaluated(root) -> set[int]:
    """Ids of the subschemas validating a value against ``root`` can reach: every schema keyword
    but ``$defs``/``definitions`` (reached only through ``$ref``), and local ``$ref`` targets.
    Runs after the shape walk (the values have their shapes)."""
    live, stack = {id(root)}, [root]
    while stack:
        s = stack.pop()
        for kw, v in s.items():
            kind = _KIND.get(kw) if isinstance(kw, str) else None
            if kind in (_K_SCHEMA, _K_ITEMS):
                kids = v if isinstance(v, list) else (v,)
            elif kind == _K_MAP and kw not in ("$defs", "definitions"):
                kids = v.values()
            elif kind == _K_LIST or (kind == _K_DEPS and kw == "dependencies"):
                kids = v if isinstance(v, list) else v.values()
            elif kw == "$ref":
                hit = _target(root, v)
                kids = () if hit is None else (hit[0],)
            else:
                continue
            for x in kids:
                if isinstance(x, dict) and id(x) not in live:
                    live.add(id(x))
                    stack.append(x)
    return live
