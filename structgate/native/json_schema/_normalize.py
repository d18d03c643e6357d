"""Normalisation: the document the compiler reads, as draft 2020-12 with root-relative references.

One walk before the shape check (:func:`._shape.check_shapes`) and the compiler, so that the
translations below are made once and every later stage (shape walk, ``allOf`` merge, ``not``,
``contains``, ``uniqueItems``, the ``jsonschema`` checks of ``enum`` values) reads one form:

* **Array-form ``items``** (drafts 4 to 2019-09: one schema per position) becomes ``prefixItems``,
  and ``additionalItems`` (the schema of the items after them; default: any) becomes ``items``
  (``additionalItems: false`` caps the length). ``additionalItems`` beside a schema ``items`` or
  none is ignored by every draft and dropped. In a resource declared draft 2020-12 (``$schema``
  ``https://json-schema.org/draft/2020-12/schema``) an array ``items`` is not a schema:
  ``GrammarSyntaxError`` at ``/items``. Errors raised later inside a positional schema name it
  ``/prefixItems/<i>`` (the compiler's form), not ``/items/<i>``; a ``$ref`` into them
  (``#/items/0``, ``#/additionalItems``) follows them (:func:`_moved`).
* **References** are resolved against the base URI of the schema that holds them (RFC 3986
  joining, :func:`urllib.parse.urljoin`; a document without ``$id`` has :data:`DEFAULT_BASE`): a
  ``$id`` (draft 4: ``id``) on a subschema of its draft (:data:`_SUBSCHEMA_KW`, as ``referencing``
  lists them) starts an embedded resource; one elsewhere (under an unknown keyword, ``$defs`` in
  draft 7) names nothing and moves no base, as in ``jsonschema``, where such a schema is reached by
  a JSON pointer in its enclosing resource. ``$anchor``/``$dynamicAnchor`` and plain-name ``$id`` fragments
  (``"$id": "#foo"``, drafts 6/7) name a location. Every ``$ref`` whose target is in the document
  (``#/definitions/B`` inside a resource with its own ``$id``, ``other.json#/definitions/B``,
  ``http://example.com/other.json``, ``#foo``) is rewritten to the JSON pointer of the target in the
  whole document (``#/definitions/A/definitions/B``), and the ``$id``/``id``/``$anchor`` keywords
  are removed: references then resolve from the root, as the compiler (and its rule keys, the
  canonical JSON of a schema) assume. A reference to a resource the document does not hold is left
  as written: the compiler refuses it (``UnsupportedFeatureError("$ref (non-local)")``); nothing is
  fetched. In drafts 4 to 7 a ``$id`` beside ``$ref`` is ignored, as those drafts ignore every
  sibling of ``$ref``.
* **Declared drafts** (per resource: the ``$schema`` of the nearest enclosing schema that has one).
  A keyword the resource's draft does not define is no keyword there (its validator ignores it):
  removed (``_DRAFT_KW``: ``const``/``contains``/``propertyNames``/``if`` in draft 4, ``if`` in draft
  6, ``dependentRequired``/``unevaluated*``/``minContains``... before 2019-09, ``dependencies`` from
  2019-09 on, ``prefixItems``/``$dynamicRef`` before 2020-12, ``additionalItems``/``$recursiveRef``
  in 2020-12), and so is every sibling of ``$ref`` in drafts 4 to 7 (annotations and unknown
  keywords stay: ``definitions`` beside ``$ref`` holds targets). A ``$ref`` into a removed keyword
  is ``UnsupportedFeatureError("$ref")``. Draft 4's ``exclusiveMaximum``/``exclusiveMinimum`` (a
  flag of ``maximum``/``minimum``, read by truthiness as its validator does; also a boolean in an
  undeclared document) become the 2020-12 numeric bound; a boolean in a draft 6+ resource is
  ``GrammarSyntaxError`` (its validator would read ``true`` as the bound 1). An undeclared document
  keeps every keyword. Draft 4 reads ``1.0`` as no integer, the others as one, and the compiler
  reads a document one way: where any resource declares draft 4, draft 4's way (stricter than the
  later drafts' in their resources, never looser).
* **``$recursiveRef``** (2019-09 and undeclared) ``"#"`` becomes the ``$ref`` to the root of its own
  resource (:func:`_recursive_ref`), or is refused when another schema than the root has
  ``$recursiveAnchor: true``.
* **``$schema``** is removed but at the root; :func:`normalize` returns the draft the root
  declares, which selects the class of the compiler's ``jsonschema`` checks
  (:func:`compiler._validator_class`).

The walk only follows schema keywords (values of ``enum``, ``const``, ``default``... are data and
are never rewritten); the values of keywords unknown to every draft are walked as schemas whose
``$id`` is not registered (``#/components/schemas/A`` may be a ``$ref`` target: its references are
rewritten, but an ``$id`` there names nothing and keeps the enclosing base, as in ``jsonschema``).
A value of the wrong shape is left as written for the shape walk to report at its own pointer. The
input is never modified: changed schemas are copies, unchanged subtrees are shared. Iterative (no
``RecursionError``).
"""
from __future__ import annotations

import json
from urllib.parse import quote, unquote, urldefrag, urljoin

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._common import KNOWN, _is_num, _pointer_tokens, _ptr

__all__ = ["normalize"]

#: the base URI of a document without a ``$id`` (hierarchical, so relative ``$id``/``$ref`` join; a
#: name no schema writes, so that an embedded ``"$id": "schema.json"`` is a resource of its own)
DEFAULT_BASE = "https://structgate.invalid/0f9b3c7e-document-root"

#: keywords whose value is one schema, an object of schemas, an array of schemas
_ONE = frozenset({"additionalProperties", "additionalItems", "unevaluatedItems", "unevaluatedProperties",
                  "contains", "propertyNames", "not", "if", "then", "else", "items", "contentSchema"})
_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"})
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_EXCLUSIVE = ("exclusiveMaximum", "exclusiveMinimum")

#: per draft, the keywords whose schemas are subschemas of the resource (``referencing``'s
#: specifications, which ``jsonschema`` resolves with: ``items`` either form in drafts 4 to 2019-09,
#: the schema values of ``dependencies`` in drafts 4 to 7). A ``$id`` elsewhere (under an unknown
#: keyword, or ``$defs`` in draft 7) names no resource and moves no base: a schema there is reached
#: by a JSON pointer only, in its enclosing resource. Undeclared documents: any draft's.
_SUBSCHEMA_KW = {4: frozenset({"not", "additionalItems", "additionalProperties", "items", "allOf", "anyOf", "oneOf",
                               "definitions", "patternProperties", "properties", "dependencies"})}
_SUBSCHEMA_KW[6] = _SUBSCHEMA_KW[4] | {"contains", "propertyNames"}
_SUBSCHEMA_KW[7] = _SUBSCHEMA_KW[6] | {"if", "then", "else"}
_SUBSCHEMA_KW[2019] = (_SUBSCHEMA_KW[7] - {"dependencies"}) | {"contentSchema", "unevaluatedItems",
                                                               "unevaluatedProperties", "$defs", "dependentSchemas"}
_SUBSCHEMA_KW[2020] = (_SUBSCHEMA_KW[2019] - {"additionalItems"}) | {"prefixItems"}
_SUBSCHEMA_KW[0] = frozenset().union(*_SUBSCHEMA_KW.values())


#: assertion and applicator keywords (the native compiler's, :data:`._common.KNOWN`) that each draft
#: defines (``jsonschema``'s validator classes: ``Draft4Validator.VALIDATORS``...; ``minContains``/
#: ``maxContains`` are read by 2019-09's ``contains``, draft 4's boolean ``exclusive*`` by its
#: ``maximum``/``minimum``). In a resource that declares a draft, the others are not keywords
#: there: its validator ignores them, and so does the compiler (:func:`_edit` removes them).
_COMMON_KW = frozenset({"$ref", "additionalProperties", "allOf", "anyOf", "enum", "format", "items", "maxItems",
                        "maxLength", "maxProperties", "maximum", "minItems", "minLength", "minProperties",
                        "minimum", "multipleOf", "not", "oneOf", "pattern", "patternProperties", "properties",
                        "required", "type", "uniqueItems"})
_DRAFT_KW = {
    4: _COMMON_KW | {"additionalItems", "dependencies", "exclusiveMaximum", "exclusiveMinimum"},
    6: _COMMON_KW | {"additionalItems", "dependencies", "exclusiveMaximum", "exclusiveMinimum", "const",
                     "contains", "propertyNames"},
}
_DRAFT_KW[7] = _DRAFT_KW[6] | {"if", "then", "else"}
_DRAFT_KW[2019] = (_DRAFT_KW[7] - {"dependencies"}) | {"dependentRequired", "dependentSchemas", "minContains",
                                                       "maxContains", "unevaluatedItems", "unevaluatedProperties",
                                                       "$recursiveRef"}
_DRAFT_KW[2020] = (_DRAFT_KW[2019] - {"additionalItems", "$recursiveRef"}) | {"prefixItems", "$dynamicRef"}
#: keywords a declared draft may not know (removed there); annotations and unknown keywords stay
_ASSERTING = frozenset().union(*_DRAFT_KW.values())


def _draft(uri: str, inherited: int) -> int:
    """The draft a ``$schema`` URI declares (4, 6, 7, 2019, 2020), ``inherited`` when unknown."""
    for mark, d in (("draft-04/", 4), ("draft-06/", 6), ("draft-07/", 7), ("draft/2019-09/", 2019),
                    ("draft/2020-12/", 2020), ("draft/next/", 2020)):
        if mark in uri:
            return d
    return inherited


def _is_schema(v) -> bool:
    return isinstance(v, (dict, bool))


def _pointer(path: tuple) -> str:
    return _ptr("", *path)


def _fragment(path: tuple) -> str:
    """``#`` + the JSON pointer of ``path``, percent-encoded as a URI fragment (the compiler
    percent-decodes a ``$ref`` fragment before reading the pointer)."""
    return "#" + quote(_pointer(path), safe="/~!$&'()*+,;=:@")


def normalize(root) -> tuple:
    """``(document, draft)``: the document ``root`` in the compiler's form (see the module
    docstring; ``root`` itself when nothing changes) and the draft its root's ``$schema`` declares
    (4, 6, 7, 2019, 2020; 0 when none or unknown), 4 when an embedded resource declares draft 4
    (the draft of the compiler's integer reading). Raises :class:`GrammarSyntaxError` for an array ``items`` in a draft
    2020-12 resource, :class:`UnsupportedFeatureError` for an array ``items`` beside
    ``prefixItems``."""
    if not isinstance(root, dict):
        return root, 0
    top = _draft(root["$schema"], 0) if isinstance(root.get("$schema"), str) else 0
    resources: dict[str, tuple] = {DEFAULT_BASE: ()}  # absolute URI (no fragment) -> path of its root
    anchors: dict[str, tuple] = {}  # absolute URI + "#name" -> path
    refs: list[tuple] = []  # (path of the schema holding $ref, its base URI, path of its resource)
    recursive: list[tuple] = []  # the same for $recursiveRef (draft 2019-09, undeclared)
    anchored: list[tuple] = []  # paths of schemas but the root with "$recursiveAnchor": true
    dropped: list[str] = []  # pointers of the keywords removed (their resource's draft ignores them)
    # (path of a schema to rewrite, its draft, whether at a schema position, its id keyword, keywords to remove)
    edits: list[tuple] = []
    # (node, path, base URI, path of the resource, draft, at a schema position: False under unknown keywords)
    stack = [(root, (), DEFAULT_BASE, (), 0, True)]
    any4 = False  # an embedded resource declares draft 4
    moves: dict[tuple, dict] = {}  # path of a schema whose array items move -> segment renames
    seen: set = set()
    while stack:
        s, path, base, res, draft, known = stack.pop()
        if not isinstance(s, dict) or (id(s), base) in seen:
            continue
        seen.add((id(s), base))
        if isinstance(s.get("$schema"), str):
            draft = _draft(s["$schema"], draft)
            if path and known and draft == 4:
                any4 = True
        id_kw = "id" if draft == 4 else "$id"
        sid = s.get(id_kw)
        if isinstance(sid, str) and known and not (draft in (4, 6, 7) and "$ref" in s):
            uri, frag = urldefrag(urljoin(base, sid))
            if uri and (uri != base or path):  # (an embedded resource, even under its parent's URI)
                base, res = uri, path
                resources.setdefault(uri, path)
            if frag and not frag.startswith("/"):
                anchors.setdefault(f"{base}#{frag}", path)
        for kw in ("$anchor", "$dynamicAnchor"):
            if known and isinstance(s.get(kw), str):
                anchors.setdefault(f"{base}#{s[kw]}", path)
        if isinstance(s.get("$ref"), str):
            refs.append((path, base, res))
        drop: tuple = ()
        if draft:
            # keywords the resource's draft does not define; in drafts 4 to 7 every one beside $ref
            keep = {"$ref"} if draft <= 7 and "$ref" in s else _DRAFT_KW[draft]
            drop = tuple(k for k in s if k in _ASSERTING and k not in keep)
            dropped += [_pointer((*path, k)) for k in drop]
        if "$recursiveRef" in s and draft in (0, 2019) and "$recursiveRef" not in drop:
            recursive.append((path, base, res))
        if path and s.get("$recursiveAnchor") is True:
            anchored.append(path)
        ren = _items_renames(s, draft)
        if ren:
            moves[tuple(map(str, path))] = ren
        if (isinstance(sid, str) or "$schema" in s or "$anchor" in s or "additionalItems" in s
                or isinstance(s.get("items"), list) or drop
                or any(isinstance(s.get(k), bool) or (draft == 4 and k in s) for k in _EXCLUSIVE)):
            edits.append((path, draft, known, id_kw, drop, ren))
        kids = []
        sub = _SUBSCHEMA_KW[draft]
        for kw, v in s.items():
            if not isinstance(kw, str):
                continue
            kn = known and kw in sub
            if kw in _LIST and isinstance(v, list):
                kids += [(x, (*path, kw, i), kn) for i, x in enumerate(v)]
            elif kw in _ONE:
                kids.append((v, (*path, kw), kn))
            elif kw in _MAP and isinstance(v, dict):
                kids += [(x, (*path, kw, k), kn) for k, x in v.items()]
            elif kw not in KNOWN and kw != id_kw and isinstance(v, (dict, list)):
                # an unknown keyword: its objects may be $ref targets (#/components/schemas/A)
                todo = [(v, (*path, kw))]
                while todo:
                    x, p = todo.pop()
                    if isinstance(x, list):
                        todo += [(y, (*p, i)) for i, y in enumerate(x)]
                    elif isinstance(x, dict):
                        kids.append((x, p, False))
        for x, p, k in reversed(kids):
            stack.append((x, p, base, res, draft, k))
    # an embedded draft-4 resource: integers are read as draft 4 reads them everywhere (an integral
    # float such as 2.0 is no integer), stricter than later drafts, never looser: the compiler's
    # checks use one reading for the whole document
    checks = 4 if any4 else top
    if not refs and not edits and not recursive:
        return root, checks
    new = _Rewriter(root)
    for path, base, res in refs:
        if _inside(_pointer(path), dropped):
            continue  # removed with its keyword
        ref = _get(root, path)["$ref"]
        target = _target(ref, base, res, resources, anchors)
        if target is not None and _inside(unquote(target[1:]), dropped):
            raise UnsupportedFeatureError("$ref", f"{ref!r} points into a keyword that its resource's draft "
                                          "does not define (or that drafts 4 to 7 ignore beside $ref), which "
                                          "the compiler does not read", _ptr(_pointer(path), "$ref"))
        if target is not None and moves:
            target = _moved(target, moves)
        if target is not None and target != ref:
            new.node(path)["$ref"] = target
    for path, base, res in recursive:
        if _inside(_pointer(path), dropped):
            continue
        _recursive_ref(new.node(path), path, _moved(_target("#", base, res, resources, anchors), moves), anchored)
    for path, draft, known, id_kw, drop, ren in reversed(edits):  # a schema's subschemas before itself (items moves)
        _edit(new.node(path), path, draft, known, id_kw, drop, ren)
    return new.root, checks


def _items_renames(s: dict, draft: int) -> dict:
    """How :func:`_edit` renames the keywords of schema ``s`` (of ``draft``) when it reads an
    array-form ``items``: ``{"items": "prefixItems", "additionalItems": "items"}``,
    ``{"additionalItems": "items"}`` (no position), or ``{}`` (nothing moves)."""
    items = s.get("items")
    if not isinstance(items, list) or draft == 2020 or "prefixItems" in s:
        return {}
    extra = s.get("additionalItems", True)
    if not _is_schema(extra):
        return {}
    if items and all(_is_schema(x) for x in items):
        return {"items": "prefixItems", "additionalItems": "items"}
    return {} if items else {"additionalItems": "items"}


def _moved(target: str | None, moves: dict) -> str | None:
    """The root-relative fragment ``target`` with the segments renamed where array-form ``items``
    moved (``#/items/1`` -> ``#/prefixItems/1``, ``#/additionalItems`` -> ``#/items``); the pointers
    of the walk name the document as written."""
    if target is None or not target.startswith("#/"):
        return target
    toks = _pointer_tokens(unquote(target[1:]))
    out, prefix = [], ()
    for t in toks:
        ren = moves.get(prefix)
        out.append(ren.get(t, t) if ren else t)
        prefix = (*prefix, t)
    return _fragment(tuple(out)) if out != toks else target


def _inside(pointer: str, prefixes: list[str]) -> bool:
    """Whether the JSON pointer ``pointer`` is one of ``prefixes`` or below one."""
    return any(pointer == p or pointer.startswith(p + "/") for p in prefixes)


def _recursive_ref(s: dict, path: tuple, target: str, anchored: list[tuple]) -> None:
    """Rewrite ``$recursiveRef`` (draft 2019-09, core §8.2.4.2) in ``s`` (a copy) as the ``$ref``
    it statically is: its initial target is the root of its own resource (``"#"`` against its base
    URI, ``target``); only when that root has ``"$recursiveAnchor": true`` does the outermost
    resource of the dynamic scope with it replace the target, and evaluation starts at the document
    root, so with no schema but the root holding ``$recursiveAnchor: true`` the target is the
    initial one either way (the root itself when it is the root). Otherwise, or for a value other
    than ``"#"``, :class:`UnsupportedFeatureError` naming the keyword's pointer."""
    where = _ptr(_pointer(path), "$recursiveRef")
    value = s.pop("$recursiveRef")
    if value != "#":
        raise UnsupportedFeatureError("$recursiveRef", f"{json.dumps(value)[:100]}: only \"#\" is defined", where)
    if anchored:
        raise UnsupportedFeatureError("$recursiveRef", f"{_pointer(anchored[0])} also has \"$recursiveAnchor\": "
                                      "true, so the target depends on the dynamic scope", where)
    if "$ref" not in s:
        s["$ref"] = target
    elif isinstance(s.get("allOf"), list) or "allOf" not in s:
        s["allOf"] = [*s.get("allOf", []), {"$ref": target}]
    else:  # a malformed allOf beside it: the shape walk reports it
        s["$ref"] = target


def _target(ref: str, base: str, res: tuple, resources: dict, anchors: dict) -> str | None:
    """The root-relative ``#<pointer>`` of ``ref``, read in the resource at path ``res`` whose URI
    is ``base``; None when its target is not in the document (the ``$ref`` is left as written)."""
    if ref.startswith("#"):
        uri, frag, path = base, ref[1:], res
    else:
        uri, frag = urldefrag(urljoin(base, ref))
        path = resources.get(uri)
    if not frag or frag.startswith("/"):
        if path is None:
            return None
        return (_fragment(path) if path else "#") + frag
    path = anchors.get(f"{uri}#{frag}")
    return None if path is None else _fragment(path)


def _edit(s: dict, path: tuple, draft: int, known: bool, id_kw: str, drop: tuple, ren: dict) -> None:
    """Rewrite one schema (a copy) in place: identifiers and (but at the root) ``$schema`` out,
    the keywords ``drop`` (which its draft does not define) out, draft 4's boolean
    ``exclusiveMaximum``/``exclusiveMinimum`` (also undeclared) in the 2020-12 form, array ``items``
    in the 2020-12 form as ``ren`` (:func:`_items_renames`, read by the walk) says."""
    for kw in ("$schema", id_kw, "$anchor") if path else (id_kw, "$anchor"):
        if isinstance(s.get(kw), str):  # (a value of the wrong shape stays for the shape walk)
            del s[kw]
    for kw in drop:
        del s[kw]
    for kw, bound in zip(_EXCLUSIVE, ("maximum", "minimum")):
        ex = s.get(kw)
        if draft == 4 and _is_num(ex):
            ex = bool(ex)  # not draft 4's form, read as its validator reads it: true when non-zero
        if isinstance(ex, bool):
            if draft not in (0, 4) and known:  # (under an unknown keyword: data, read as draft 4)
                raise GrammarSyntaxError(f"{kw} must be a number in draft 6 and later (a boolean is draft 4's "
                                         "form)", json.dumps(ex), 0, _ptr(_pointer(path), kw))
            del s[kw]  # draft 4: a flag of the bound beside it (none: no meaning)
            if ex and _is_num(s.get(bound)):
                s[kw] = s.pop(bound)
    items = s.get("items")
    if isinstance(items, list):
        if draft == 2020:
            if not known:
                return  # data under an unknown keyword, unless a $ref makes it a schema (then refused there)
            raise GrammarSyntaxError("items must be a schema in draft 2020-12 (one schema per position is "
                                     "prefixItems)", json.dumps(items, default=repr)[:200], 0,
                                     _ptr(_pointer(path), "items"))
        if "prefixItems" in s:
            raise UnsupportedFeatureError("items (array form)", "beside prefixItems (which drafts 4 to 2019-09 do "
                                          "not know): the positional schemas are ambiguous",
                                          _ptr(_pointer(path), "items"))
        extra = s.pop("additionalItems", True) if ren else None
        if "items" in ren:
            s["prefixItems"] = items
            if extra is True:
                del s["items"]
            else:
                s["items"] = extra
        elif ren:  # no position: additionalItems applies to every item
            s["items"] = extra
    elif _is_schema(s.get("additionalItems")):
        del s["additionalItems"]  # ignored beside a schema items (or none), in every draft


def _get(root, path: tuple):
    for tok in path:
        root = root[tok]
    return root


class _Rewriter:
    """Copy-on-write view of a document: :meth:`node` returns a private copy of the container at
    ``path`` (its ancestors copied too), shared with the input everywhere else."""

    def __init__(self, root) -> None:
        self.root = dict(root)
        self._copied: dict[tuple, object] = {(): self.root}

    def node(self, path: tuple):
        cur = self.root
        for i, tok in enumerate(path):
            here = path[:i + 1]
            nxt = self._copied.get(here)
            if nxt is None:
                nxt = cur[tok]
                nxt = dict(nxt) if isinstance(nxt, dict) else list(nxt)
                cur[tok] = nxt
                self._copied[here] = nxt
            cur = nxt
        return cur
