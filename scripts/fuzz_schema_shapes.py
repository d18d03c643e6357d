"""Fuzz the native JSON Schema compiler with malformed keyword values: every failure must be a
typed :class:`~structgate.errors.StructgateError`, never a bare Python exception.

Takes about 50 valid seed schemas (hand-written ones covering every keyword the compiler reads,
plus a deterministic sample of MaskBench when ``--maskbench DIR`` is given), and for each one
replaces the values of randomly chosen keywords (anywhere in the document, list entries included)
by values of the wrong JSON type: numbers (negative, fractional, beyond float range), null,
booleans, strings, lists, objects, nested schemas with wrong values, deep nestings, ``$ref``
strings that point at themselves. Each mutant goes through ``NativeBackend.compile`` (the full
compile), ``NativeBackend.validate`` (the compiler pass a server runs first) and
``schema_to_regex`` (the flat-regex compiler); the first untyped exception stops the run with
the schema and the traceback (exit status 1).

``--cli N`` also runs ``structgate check`` on N of the refused mutants and on a 1,200-deep
document: each must exit with status 2 and print a ``structgate check: error:`` message, never a
traceback.

Usage::

    PYTHONPATH=. .venv/bin/python scripts/fuzz_schema_shapes.py [--maskbench DIR] [--per-schema 60]
        [--seed 0] [--cli 8] [--no-shape-walk]
"""
from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import random
import signal
import subprocess
import sys
import traceback

#: hand-written seeds: every keyword the compiler reads, in its usual places
SEEDS = [
    {"type": "object", "properties": {"a": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$"},
                                      "b": {"type": "integer", "minimum": 0, "maximum": 10, "multipleOf": 2}},
     "required": ["a"], "additionalProperties": False},
    {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
     "minItems": 1, "maxItems": 3, "uniqueItems": False},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": False},
    {"type": "array", "contains": {"const": 1}, "minContains": 1, "maxContains": 2},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
               {"properties": {"b": {"enum": ["x", "y"]}}}]},
    {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
    {"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
    {"type": "integer", "not": {"enum": [1, 2, 3]}},
    {"type": "string", "not": {"const": "no"}},
    {"not": {"type": ["string", "null"]}},
    {"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}},
    {"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
    {"type": "object", "properties": {"a": {}, "b": {}}, "dependencies": {"a": ["b"]}},
    {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,3}$"}, "maxProperties": 2},
    {"type": "object", "patternProperties": {"^x-": {"type": "string"}}, "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 1},
    {"$defs": {"pos": {"type": "integer", "minimum": 1}}, "type": "object",
     "properties": {"n": {"$ref": "#/$defs/pos"}, "m": {"$ref": "#/$defs/pos"}}},
    {"definitions": {"s": {"type": "string"}}, "type": "array", "items": {"$ref": "#/definitions/s"}},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "minimum": 0,
     "exclusiveMinimum": True},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "string"}],
     "additionalItems": False},
    {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
     "required": ["v", "next"], "additionalProperties": False},
    {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"}, "children": {
        "type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"]}}, "$ref": "#/$defs/node"},
    {"enum": ["a", 1, None, True, [1], {"k": "v"}]},
    {"const": {"a": [1, 2]}},
    {"type": ["integer", "string"], "minimum": 3, "maxLength": 4},
    {"type": "string", "format": "email", "maxLength": 40},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                      "id": {"type": "string", "format": "uuid"}}, "required": ["when", "id"]},
    {"type": "object", "properties": {"a": {"type": "string"}}, "unevaluatedProperties": False},
    {"allOf": [{"$ref": "#/$defs/a"}, {"required": ["x"]}], "$defs": {"a": {"type": "object",
                                                                            "properties": {"x": {"type": "number"}}}}},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "not": {"required": ["a"]}},
    {"type": "integer", "not": {"minimum": 5}},
    {"type": "array", "items": {"type": "string"}, "not": {"minItems": 3}},
    {"title": "t", "description": "d", "default": 1, "examples": [1], "type": "integer", "$comment": "c"},
    {"type": "object", "properties": {"a": {"type": "string", "contentEncoding": "base64"}},
     "x-vendor": {"type": 5}},
    {"components": {"schemas": {"A": {"type": "string", "maxLength": 3}}}, "$ref": "#/components/schemas/A"},
]

#: wrong-typed replacement values (a function of the random generator for the nested ones)
WRONG = [
    5, -1, 0, 1.5, -0.5, 10 ** 400, -(10 ** 400), 1e308, None, True, False, "x", "", "strin", "#",
    "#/nowhere", "#/$defs", [], [1], [None], ["a", "a"], ["string", "string"], [[{}]], [{"type": 5}],
    {}, {"type": 5}, {"a": [1]}, {"a": 1}, {"not": {"type": 5}}, {"$ref": []}, {"enum": 5},
    {"const": 10 ** 400}, {"not": {"const": 10 ** 400}}, {"items": {"items": {"items": 7}}},
    {"properties": [1]}, {"required": "a"}, {"allOf": [{"type": 5}, {}]}, {"prefixItems": [5]},
    {"dependentRequired": {"a": [1]}}, {"propertyNames": {"type": 5}}, {"$schema": 5}, {"format": 5},
    {"minLength": 10 ** 400}, {"maxItems": -1}, {"multipleOf": 0}, {"pattern": 7}, {"pattern": "("},
]


def _deep(kw: str, n: int, leaf=None):
    s = {} if leaf is None else leaf
    for _ in range(n):
        s = {kw: s}
    return s


def maskbench_seeds(folder: str, n: int) -> list:
    """``n`` MaskBench schemas of at most 3,000 characters, one file after another (deterministic)."""
    files = sorted(glob.glob(os.path.join(folder, "*.jsonl")))
    out, per = [], max(1, n // max(1, len(files)) + 1)
    for path in files:
        with open(path) as f:
            rows = [json.loads(line)["schema"] for line in f]
        small = [s for s in rows if isinstance(s, dict) and len(json.dumps(s)) <= 3000]
        step = max(1, len(small) // per)
        out += small[::step][:per]
    return out[:n]


def positions(doc):
    """Every (container, key) of ``doc`` whose value can be replaced: object members, list entries."""
    out, stack = [], [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            for k, v in x.items():
                out.append((x, k))
                stack.append(v)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                out.append((x, i))
                stack.append(v)
    return out


def mutants(seed, rng: random.Random, count: int):
    """``count`` mutants of ``seed``: one to three positions replaced by wrong values."""
    for _ in range(count):
        doc = copy.deepcopy(seed)
        pos = positions(doc)
        if not pos:
            return
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            pos = positions(doc)
            c, k = rng.choice(pos)
            r = rng.random()
            if r < 0.04:
                v = _deep(rng.choice(("items", "not", "anyOf")), rng.choice((300, 600, 1200)))
                if "anyOf" in v:
                    v = _deep("items", 2, v)
            elif r < 0.08 and isinstance(c, dict):
                v = "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in _path(doc, c))
            else:
                v = copy.deepcopy(rng.choice(WRONG))
            c[k] = v
        yield doc


def _path(doc, target):
    """JSON pointer tokens of the container ``target`` inside ``doc`` (a self-``$ref`` mutation)."""
    stack = [(doc, [])]
    while stack:
        x, p = stack.pop()
        if x is target:
            return p
        if isinstance(x, dict):
            stack += [(v, p + [k]) for k, v in x.items()]
        elif isinstance(x, list):
            stack += [(v, p + [i]) for i, v in enumerate(x)]
    return []


class _Slow(Exception):
    pass


def _alarm(signum, frame):
    raise _Slow()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maskbench", help="MaskBench folder (*.jsonl): adds seeds from it")
    ap.add_argument("--maskbench-seeds", type=int, default=20)
    ap.add_argument("--per-schema", type=int, default=60, help="mutants per seed schema")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=10.0, help="per mutant; slower ones are counted, not failed")
    ap.add_argument("--cli", type=int, default=8, help="refused mutants also checked through `structgate check`")
    ap.add_argument("--no-shape-walk", action="store_true",
                    help="diagnostic: skip the compiler's keyword-shape walk, so that the compiler itself (and "
                         "its metaschema safety net) meets every malformed value")
    ap.add_argument("--keep-going", action="store_true",
                    help="record untyped exceptions (one line per distinct place) and go on; exit 1 at the end")
    args = ap.parse_args(argv)

    from structgate import Constraint, get_backend, load_vocabulary
    from structgate.backends.interface import CompileOptions
    from structgate.errors import StructgateError
    from structgate.native.json_schema import schema_to_regex

    if args.no_shape_walk:
        import structgate.native.json_schema.compiler as compiler

        compiler.check_shapes = lambda schema: None
    seeds = list(SEEDS)
    if args.maskbench:
        seeds += maskbench_seeds(args.maskbench, args.maskbench_seeds)
    backend = get_backend("native", load_vocabulary("llama3"), compile_timeout_s=0)
    rng = random.Random(args.seed)
    signal.signal(signal.SIGALRM, _alarm)
    counts = {"mutants": 0, "compiled": 0, "typed": 0, "slow": 0}
    kinds: dict[str, int] = {}
    refused = []
    untyped: dict[str, str] = {}  # --keep-going: place -> the first schema that reached it
    for si, seed in enumerate(seeds):
        for doc in mutants(seed, rng, args.per_schema):
            counts["mutants"] += 1
            for stage in ("compile", "validate", "regex"):
                backend.clear_cache()
                signal.setitimer(signal.ITIMER_REAL, args.timeout_s)
                try:
                    if stage == "compile":
                        backend.compile(Constraint.json_schema(doc))
                        counts["compiled"] += 1
                    elif stage == "validate":
                        backend.validate(Constraint.json_schema(doc))
                    else:
                        schema_to_regex(doc, CompileOptions(max_recursion_depth=2))
                except _Slow:
                    counts["slow"] += 1
                except StructgateError as e:
                    if stage == "compile":
                        counts["typed"] += 1
                        kinds[type(e).__name__] = kinds.get(type(e).__name__, 0) + 1
                        if len(refused) < 200:
                            refused.append(doc)
                except BaseException as e:  # noqa: BLE001  (the point of the fuzzer)
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    try:
                        text = json.dumps(doc, default=repr)
                    except RecursionError:
                        text = "(a document too deep to print)"
                    if args.keep_going:
                        tb = traceback.extract_tb(e.__traceback__)[-1]
                        place = f"{type(e).__name__} at {os.path.basename(tb.filename)}:{tb.lineno} ({stage})"
                        if place not in untyped:
                            untyped[place] = text[:300]
                        continue
                    print(f"UNTYPED {type(e).__name__} at {stage} (seed {si}, mutant {counts['mutants']}):",
                          file=sys.stderr)
                    print(text if len(text) < 3000 else text[:3000] + "...", file=sys.stderr)
                    traceback.print_exc()
                    return 1
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
    print(json.dumps({"seeds": len(seeds), **counts, "typed_by_class": kinds, "untyped": len(untyped)}))
    for place, text in untyped.items():
        print(f"UNTYPED {place}: {text}", file=sys.stderr)
    if untyped:
        return 1
    if args.cli:
        exe = os.path.join(os.path.dirname(sys.executable), "structgate")
        texts = []
        for doc in rng.sample(refused, len(refused)):
            try:
                texts.append(json.dumps(doc))
            except RecursionError:  # (a deep mutant: json cannot write it; the one below stands for them)
                continue
            if len(texts) == args.cli:
                break
        texts.append('{"items": ' * 1200 + "{}" + "}" * 1200)
        for text in texts:
            with open("/tmp/fuzz_schema_shapes.json", "w") as f:
                f.write(text)
            p = subprocess.run([exe, "check", "--json-schema", "/tmp/fuzz_schema_shapes.json", "--text", "{}"],
                               capture_output=True, text=True, timeout=300)
            if p.returncode != 2 or "Traceback" in p.stderr or not p.stderr.startswith("structgate check: error:"):
                print(f"CLI: rc={p.returncode} for {text[:300]}\n{p.stderr[-3000:]}", file=sys.stderr)
                return 1
        print(f"CLI: {len(texts)} refused schemas, each rc=2 with one error message, no traceback")
    return 0


if __name__ == "__main__":
    sys.exit(main())
