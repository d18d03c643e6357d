"""Benchmark corpora: MaskBench JSONL, the JSON-Schema-Test-Suite, regex corpora.

Every loader returns a list of :class:`BenchItem` (one constraint with its test instances). Test
texts are tokenised later (:func:`tokenize_items`), once, for all backends.

Formats
-------
MaskBench (guidance-ai/jsonschemabench ``maskbench/data``): a folder of ``*.jsonl`` (split = file
stem) or one file; each line ``{"id", "schema", "tests": [{"valid": bool, "data": any}]}``. The text
of an instance is ``json.dumps(data)`` (default separators ``", "``/``": "``, ASCII escapes).

JSON-Schema-Test-Suite: ``tests/<draft>/*.json`` (required) and ``tests/<draft>/optional/**.json``;
each file a list of ``{"description", "schema", "tests": [{"description", "data", "valid"}]}``.

Regex corpora (auto-detected per file):

* interegular ``test_patterns.json``: ``[{"pattern", "kind", "accept": [...], "reject": [...]}]``;
* Lark terminal lists: ``[{"kind": "re"|"str", "name", "pattern"}]`` (``str`` = literal; no strings:
  only the empty string is walked);
* outlines-core ``bench_regex_samples.json``: ``{name: pattern}`` (compile only + empty string);
* outlines-core ``json_schema_to_regex_cases.json``: ``[{"outlines_regex", "should_match",
  "should_not_match"}]`` (entries without a literal regex are skipped);
* dottxt-ai/benchmarks ``cases.json``: ``{"regex_cases": {name: {"regex", "samples"}}}``;
* rust-lang/regex testdata converted to JSON: ``{"source", "test": [{"name", "regex", "haystack"}]}``
  (string regexes only; tests sharing a regex are grouped);
* generic JSONL: ``{"id"?, "pattern"|"regex", "strings"|"accept"+"reject"|"tests": [{"data"}]}``.

For regex items the expected verdict is *not* taken from the corpus: it is Python ``re.fullmatch``
(computed by :mod:`structgate_bench.oracle`), so ``valid`` is filled in later.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from structgate.errors import StructgateError

__all__ = ["BenchItem", "CorpusError", "load_maskbench", "load_jsts", "load_regex_corpus", "tokenize_items",
           "round_robin_limit", "DEFAULT_JSTS_DRAFTS"]

DEFAULT_JSTS_DRAFTS = ("draft2020-12", "draft7")

#: the meta-schema a JSON-Schema-Test-Suite draft folder's schemas are read with when they declare
#: none (the suite's README: a folder's tests are for that draft, which an implementation's runner
#: sets as the default dialect; later versions of the suite write ``$schema`` into every schema)
JSTS_META_SCHEMAS = {
    "draft3": "http://json-schema.org/draft-03/schema#",
    "draft4": "http://json-schema.org/draft-04/schema#",
    "draft6": "http://json-schema.org/draft-06/schema#",
    "draft7": "http://json-schema.org/draft-07/schema#",
    "draft2019-09": "https://json-schema.org/draft/2019-09/schema",
    "draft2020-12": "https://json-schema.org/draft/2020-12/schema",
}

#: the sample corpora shipped with the harness (the defaults of ``structgate bench``; data/README.md)
SAMPLES = Path(__file__).resolve().parent / "data"


class CorpusError(StructgateError, ValueError):
    """A corpus path that does not exist or holds no item of a known format."""

    kind = "corpus"


@dataclass
class BenchItem:
    """One constraint and its instances.

    Attributes
    ----------
    id : str
    split : str
        Group for per-split reporting (MaskBench file stem, JSTS ``draft/file``, regex corpus).
    kind : str
        Constraint kind (``json_schema``, ``regex``).
    value : Any
        The schema (dict/bool) or regex pattern.
    tests : list[dict]
        ``{"text": str, "valid": bool | None, "description"?: str}``; ``ids`` (token ids) added by
        :func:`tokenize_items`, ``untokenizable`` if encoding failed.
    meta : dict
        Corpus-specific extras (e.g. ``expected_compile_error``).
    """

    id: str
    split: str
    kind: str
    value: Any
    tests: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def worker_payload(self) -> dict:
        return {"id": self.id, "kind": self.kind, "value": self.value,
                "tests": [{"ids": t.get("ids")} for t in self.tests]}


def _exists(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise CorpusError(f"corpus path {str(p)!r} does not exist")
    return p


def round_robin_limit(items: list[BenchItem], limit: int | None) -> list[BenchItem]:
    """The first ``limit`` items taking one from each split in turn (split order kept), so a small
    limit still covers every split. ``None``/``<= 0``: all items."""
    if not limit or limit <= 0 or limit >= len(items):
        return items
    by_split: dict[str, list[BenchItem]] = {}
    for it in items:
        by_split.setdefault(it.split, []).append(it)
    out: list[BenchItem] = []
    i = 0
    while len(out) < limit:
        progressed = False
        for lst in by_split.values():
            if i < len(lst):
                out.append(lst[i])
                progressed = True
                if len(out) == limit:
                    break
        if not progressed:
            break
        i += 1
    return out


# --------------------------------------------------------------------------------------- MaskBench
def load_maskbench(path: str | Path, *, splits: Iterable[str] | None = None, limit: int | None = None) -> list[BenchItem]:
    """Load a MaskBench-format folder (``*.jsonl``, one split per file) or one JSONL file.

    Parameters
    ----------
    path : folder or ``.jsonl`` file
    splits : names (file stems) to keep; case-insensitive; None = all
    limit : total number of schemas, drawn round-robin over splits (:func:`round_robin_limit`)

    Raises
    ------
    CorpusError
        Missing path, no JSONL file, unknown split name, or a malformed line (file:line in the message).
    """
    p = _exists(path)
    files = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
    if not files:
        raise CorpusError(f"no *.jsonl file in {str(p)!r}")
    if splits:
        want = {s.lower() for s in splits}
        have = {f.stem.lower() for f in files}
        missing = want - have
        if missing:
            raise CorpusError(f"unknown split(s) {sorted(missing)}; available: {sorted(f.stem for f in files)}")
        files = [f for f in files if f.stem.lower() in want]
    items: list[BenchItem] = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    schema = rec["schema"]
                    if isinstance(schema, str):
                        schema = json.loads(schema)
                    tests = [{"text": json.dumps(t["data"]), "valid": bool(t["valid"]),
                              "description": t.get("description", "")} for t in rec.get("tests", [])]
                except (json.JSONDecodeError, KeyError, TypeError) as e:
                    raise CorpusError(f"{f}:{lineno}: not a MaskBench record ({type(e).__name__}: {e})") from e
                items.append(BenchItem(id=str(rec.get("id", f"{f.stem}:{lineno}")), split=f.stem,
                                       kind="json_schema", value=schema, tests=tests))
    if not items:
        raise CorpusError(f"no schema found in {str(p)!r}")
    return round_robin_limit(items, limit)


# ------------------------------------------------------------------------------------------- JSTS
def _jsts_root(p: Path) -> tuple[Path, list[str] | None]:
    """(tests dir, fixed drafts or None)."""
    if (p / "tests").is_dir():
        return p / "tests", None
    if any(c.is_dir() and c.name.startswith(("draft", "v1")) for c in p.iterdir()):
        return p, None
    return p.parent, [p.name]


def load_jsts(path: str | Path, *, drafts: Iterable[str] | None = None, optional: str = "format",
              limit: int | None = None, files: Iterable[str] | None = None) -> list[BenchItem]:
    """Load JSON-Schema-Test-Suite cases.

    Parameters
    ----------
    path : the suite root (with ``tests/``), its ``tests/`` folder, or one draft folder
    drafts : default :data:`DEFAULT_JSTS_DRAFTS`
    optional : ``"none"`` (required only), ``"format"`` (+ ``optional/format/``), ``"all"``
        (+ every ``optional/`` file)
    limit : total cases, round-robin over keyword files
    files : keep only these keyword files (``allOf``, ``optional/format/date``), case-insensitive

    Each case is one item, ``split`` = ``draft/file`` (``draft2020-12/allOf``,
    ``draft2020-12/optional/format/date``), ``id`` = ``split#index``. An object schema that
    declares no ``$schema`` gets its folder's (:data:`JSTS_META_SCHEMAS`), as the suite asks of a
    runner: an engine's default dialect (2020-12 for native) would otherwise read draft-7 cases
    by 2020-12's rules (a ``$ref`` beside an ``$id``).
    """
    p = _exists(path)
    if p.is_file():
        root, fixed = p.parent, None
        file_list = [(p.parent.name, p)]
    else:
        root, fixed = _jsts_root(p)
        ds = fixed or list(drafts or DEFAULT_JSTS_DRAFTS)
        file_list = []
        for d in ds:
            dd = root / d
            if not dd.is_dir():
                raise CorpusError(f"no draft folder {str(dd)!r}")
            req = sorted(dd.glob("*.json"))
            opt: list[Path] = []
            if optional == "format":
                opt = sorted((dd / "optional" / "format").glob("*.json"))
            elif optional == "all":
                opt = sorted((dd / "optional").rglob("*.json"))
            elif optional != "none":
                raise CorpusError(f"optional must be none|format|all, got {optional!r}")
            file_list += [(d, f) for f in req + opt]
    want = {f.lower() for f in files} if files else None
    items: list[BenchItem] = []
    for draft, f in file_list:
        rel = f.relative_to(root / draft).with_suffix("").as_posix() if (root / draft) in f.parents else f.stem
        if want and rel.lower() not in want:
            continue
        split = f"{draft}/{rel}"
        try:
            cases = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise CorpusError(f"{f}: not JSON ({e})") from e
        for i, case in enumerate(cases):
            tests = [{"text": json.dumps(t["data"]), "valid": bool(t["valid"]), "description": t.get("description", "")}
                     for t in case.get("tests", [])]
            schema = case["schema"]
            meta_schema = JSTS_META_SCHEMAS.get(draft)
            if isinstance(schema, dict) and "$schema" not in schema and meta_schema:
                schema = {"$schema": meta_schema, **schema}
            items.append(BenchItem(id=f"{split}#{i}", split=split, kind="json_schema", value=schema,
                                   tests=tests, meta={"description": case.get("description", ""), "draft": draft}))
    if not items:
        raise CorpusError(f"no JSON-Schema-Test-Suite case found under {str(p)!r}")
    return round_robin_limit(items, limit)


# ------------------------------------------------------------------------------------------ regex
def _regex_items_from(obj: Any, split: str, path: Path) -> list[BenchItem] | None:
    """Items from one parsed JSON document, or None when the format is unknown."""
    out: list[BenchItem] = []

    def add(pattern: str, strings: list[str], name: str, **meta):
        out.append(BenchItem(id=f"{split}#{len(out)}:{name}"[:200], split=split, kind="regex", value=pattern,
                             tests=[{"text": s, "valid": None} for s in (strings or [""])], meta=meta))

    if isinstance(obj, dict) and "regex_cases" in obj:  # dottxt-ai/benchmarks
        for name, case in obj["regex_cases"].items():
            add(case["regex"], list(case.get("samples", [])), name)
        return out
    if isinstance(obj, dict) and isinstance(obj.get("test"), list) and "source" in obj:  # rust regex testdata
        groups: dict[str, list[str]] = {}
        for t in obj["test"]:
            rx = t.get("regex")
            if not isinstance(rx, str) or t.get("unescape") or t.get("bounds"):
                continue
            hay = t.get("haystack", "")
            if not isinstance(hay, str):
                continue
            groups.setdefault(rx, []).append(hay)
        for rx, hays in groups.items():
            add(rx, hays, "rx")
        return out
    if isinstance(obj, dict) and obj and all(isinstance(v, str) for v in obj.values()):  # name → pattern
        for name, rx in obj.items():
            add(rx, [], name)
        return out
    if isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        first = obj[0]
        if "pattern" in first and ("accept" in first or "reject" in first or "kind" in first and "test" in first):
            for x in obj:  # interegular test_patterns
                add(x["pattern"], list(x.get("accept", [])) + list(x.get("reject", [])), x.get("test", "p"),
                    corpus_kind=x.get("kind"))
            return out
        if "pattern" in first and "name" in first and first.get("kind") in ("re", "str"):  # lark terminals
            for x in obj:
                rx = x["pattern"] if x.get("kind") == "re" else re.escape(x["pattern"])
                add(rx, [], x["name"])
            return out
        if "should_match" in first or "outlines_regex" in first:  # outlines-core json→regex cases
            for x in obj:
                if isinstance(x.get("outlines_regex"), str):
                    add(x["outlines_regex"], list(x.get("should_match", [])) + list(x.get("should_not_match", [])), "case")
            return out
    return None


def _regex_items_jsonl(path: Path, split: str) -> list[BenchItem]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                rx = rec.get("pattern", rec.get("regex"))
                if not isinstance(rx, str):
                    raise KeyError("pattern")
            except (json.JSONDecodeError, KeyError, AttributeError) as e:
                raise CorpusError(f"{path}:{lineno}: not a regex record ({e})") from e
            strings = list(rec.get("strings", [])) + list(rec.get("accept", [])) + list(rec.get("reject", []))
            strings += [t["data"] for t in rec.get("tests", []) if isinstance(t.get("data"), str)]
            out.append(BenchItem(id=str(rec.get("id", f"{split}:{lineno}")), split=split, kind="regex", value=rx,
                                 tests=[{"text": s, "valid": None} for s in (strings or [""])]))
    return out


def load_regex_corpus(paths: Iterable[str | Path], *, limit: int | None = None) -> list[BenchItem]:
    """Load regex items from files/folders (folders: every ``*.json``/``*.jsonl`` below, formats
    auto-detected, unknown files skipped). ``split`` = ``<parent folder>/<file stem>``.

    Raises
    ------
    CorpusError
        A path does not exist, or nothing of a known format was found.
    """
    items: list[BenchItem] = []
    for raw in paths:
        p = _exists(raw)
        files = sorted(list(p.rglob("*.json")) + list(p.rglob("*.jsonl"))) if p.is_dir() else [p]
        for f in files:
            split = f"{f.parent.name}/{f.stem}"
            if f.suffix == ".jsonl":
                items += _regex_items_jsonl(f, split)
                continue
            try:
                obj = json.loads(f.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            got = _regex_items_from(obj, split, f)
            if got is None and not p.is_dir():
                raise CorpusError(f"{f}: not a known regex corpus format")
            items += got or []
    if not items:
        raise CorpusError(f"no regex found in {[str(x) for x in paths]}")
    return round_robin_limit(items, limit)


# -------------------------------------------------------------------------------------- tokenising
def tokenize_items(items: list[BenchItem], vocab) -> int:
    """Add ``ids`` to every test (``vocab.encode``); a text that cannot be encoded (lone surrogates)
    gets ``untokenizable=True`` and no ids (it is not walked). Returns the number of tokens."""
    n = 0
    for it in items:
        for t in it.tests:
            try:
                t["text"].encode("utf-8")
                t["ids"] = [int(x) for x in vocab.encode(t["text"])]
                n += len(t["ids"])
            except (UnicodeEncodeError, ValueError) as e:
                t["untokenizable"] = f"{type(e).__name__}: {e}"[:200]
    return n
