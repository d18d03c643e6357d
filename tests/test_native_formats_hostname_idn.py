"""``hostname`` with RFC 1123's 253-character total and RFC 5891's reserved labels, and the formats
native does not assert (``idn-hostname``, ``idn-email``, ``regex``) refused by default.

The JSON-Schema-Test-Suite benchmark showed native accepting 174 invalid instances (87 per draft),
all in ``optional/format``: ``hostname`` (24 per draft: a 256-character name, and ``xn--`` labels
that are not valid A-labels), and ``idn-hostname`` (54), ``idn-email`` (2), ``regex`` (1) and the
suite's ``ecmascript-regex`` file (6, ``format: regex``), which native left as annotations.

Now:

* ``hostname``: labels without "--" in positions 3-4 (RFC 5890's NR-LDH labels: a label with "--"
  there is reserved, valid only as an IDNA A-label, whose Punycode and IDNA2008 validity no
  automaton here checks, so A-labels are left out: a documented sound subset), at most 253
  characters (exact: the format's automaton times a length counter);
* ``idn-hostname``, ``idn-email``, ``regex``: ``UnsupportedFeatureError`` naming ``format`` and its
  JSON pointer wherever they would constrain a string (llguidance refuses a format it does not
  implement the same way); ``options.extra["formats"] == "lenient"`` leaves them annotations.

Oracles: the suite's own files (tests/data/jsts/draft2020-12/optional/format, both JSON spellings
of each instance), Python's ``idna`` package (IDNA2008, RFC 5891: the label and name lengths, the
hyphen rules, A-labels decoded and checked), ``jsonschema``. Acceptance is what the native
backend's matcher does on the llama3 tokens of the JSON text.
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import idna
import jsonschema
import pytest

from structgate.backends.interface import CompileOptions, Constraint
from structgate.backends.registry import get_backend
from structgate.errors import UnsupportedFeatureError
from structgate.native.json_schema import FORMAT_REGEX, UNASSERTED_FORMATS, schema_to_grammar, schema_to_regex
from structgate.native.json_schema._formats import FORMAT_MAX_LENGTH
from structgate.native.json_schema.compiler import _format_checker
from _matching import accepts

SUITE = Path(__file__).parent / "data" / "jsts" / "draft2020-12" / "optional" / "format"
LENIENT = CompileOptions(extra={"formats": "lenient"})


@pytest.fixture(scope="module")
def native(llama3_vocab):
    return get_backend("native", llama3_vocab)


def _spellings(x) -> set[str]:
    return {json.dumps(x), json.dumps(x, ensure_ascii=False)}


def _suite(fmt: str):
    for case in json.loads((SUITE / f"{fmt}.json").read_text(encoding="utf-8")):
        for t in case["tests"]:
            yield case["schema"], t


def _idna_ok(s: str) -> bool:
    try:
        idna.encode(s)
    except idna.IDNAError:
        return False
    return True


def _a_label(s: str) -> bool:
    return any(x[:4].lower() == "xn--" for x in s.split("."))


def _hostname_oracle(s: str) -> bool:
    """The language native promises for ``hostname``, from ``idna`` (IDNA2008 checks every ASCII
    label's length, hyphens and characters, the 253 total, and decodes ``xn--`` labels): an ASCII
    name that ``idna`` encodes, with no A-label (the documented subset) and no trailing root dot
    (``idna`` allows one; the suite and RFC 1123's text form do not)."""
    return s.isascii() and not s.endswith(".") and not _a_label(s) and _idna_ok(s)


# -- hostname ---------------------------------------------------------------------------------------
def test_hostname_suite_cases(native, llama3_vocab):
    """Every case of the suite's ``hostname`` file: no invalid instance is accepted; every valid one
    is, except the 15 valid A-labels (``xn--``: the documented subset), which ``idna`` confirms are
    A-labels of valid U-labels."""
    g = native.compile(Constraint.json_schema({"format": "hostname"}))
    left_out = []
    for _, t in _suite("hostname"):
        for text in _spellings(t["data"]):
            got = accepts(g, llama3_vocab, text)
            if not t["valid"]:
                assert not got, (t["description"], text)
            elif not got:
                left_out.append(t["data"])
    assert left_out and all(_a_label(x) and _idna_ok(x) for x in left_out), left_out
    assert len(set(left_out)) == 15


def _names(n: int, width: int) -> str:
    """A dot-separated name of exactly ``n`` characters with labels of at most ``width``."""
    labels, left = [], n
    while left > 0:
        w = min(width, left)
        labels.append("".join(chr(97 + (len(labels) + i) % 26) for i in range(w)))
        left -= w + 1
    s = ".".join(labels)
    if len(s) < n:  # the last label took the dot's place
        s = s[:-1] + "z" + s[-1:] if len(labels[-1]) > 1 else s + "z"
    return s[:n] if len(s) > n else s


@pytest.mark.parametrize("width", [63, 20, 1, 2])
def test_hostname_253_characters(native, llama3_vocab, width):
    """253 characters are the most (RFC 1035 section 2.3.4 in text form; ``idna`` agrees): names of
    252 and 253 characters are accepted, 254 and 255 are not, whatever the label layout."""
    g = native.compile(Constraint.json_schema({"format": "hostname"}))
    for n in (252, 253, 254, 255):
        s = _names(n, width)
        assert len(s) == n and _hostname_oracle(s) is (n <= 253), (n, s)
        assert accepts(g, llama3_vocab, json.dumps(s)) is (n <= 253), (width, n)


@pytest.mark.parametrize("extra", [
    {"maxLength": 300}, {"minLength": 250}, {"pattern": "^[a-m]"},
    {"not": {"enum": ["a.com", _names(253, 63)]}},
    {"enum": ["a.com", "xn--abc", "ab--c.d", _names(253, 63), _names(254, 63), 5]},
])
def test_hostname_bound_with_other_keywords(native, llama3_vocab, extra):
    """The 253 bound holds beside a larger ``maxLength``, a ``minLength``, a ``pattern``, a folded
    ``not`` and an ``enum`` (whose values the compiler's validator checks: the same bound); oracle:
    ``idna`` for the format, ``jsonschema`` for the other keywords."""
    schema = {"type": ["string", "integer"] if "enum" in extra else "string", "format": "hostname", **extra}
    g = native.compile(Constraint.json_schema(schema))
    rest = jsonschema.Draft202012Validator({k: v for k, v in schema.items() if k != "format"})
    cands = [_names(n, 63) for n in (250, 252, 253, 254)] + ["a.com", "b.com", "ab--c.d", "xn--abc", "zz.com", 5]
    n_ok = 0
    for x in cands:
        want = (_hostname_oracle(x) if isinstance(x, str) else True) and rest.is_valid(x)
        n_ok += want
        assert accepts(g, llama3_vocab, json.dumps(x)) is want, (schema, x)
    assert n_ok >= 2


def test_reserved_labels_are_left_out(native, llama3_vocab):
    """A label with "--" in positions 3-4 (``xn--``, ``XN--``, any other reserved one) is not
    generated; "--" elsewhere in a label is (``a--b``: the suite's valid case)."""
    g = native.compile(Constraint.json_schema({"format": "hostname"}))
    rx = re.compile(schema_to_regex({"format": "hostname"}))
    for s, want in [("xn--abc", False), ("XN--aa---o47jg78q", False), ("a.ab--cd.com", False), ("ab--c", False),
                    ("xn--9n2bp8q.xn--9t4b11yi5a", False), ("a--b.com", True), ("abc--d", True), ("ab-c.x-y", True),
                    ("a-b--c", True), ("ab---", False), ("ab-", False), ("abcd", True), ("ab-d", True)]:
        assert accepts(g, llama3_vocab, json.dumps(s)) is want, s
        assert (rx.fullmatch(json.dumps(s)) is not None) is want, s
        if want:
            assert _hostname_oracle(s), s


def test_hostname_is_idna_on_random_ascii_names(native, llama3_vocab):
    """Random names over letters, digits, "-" and "." (labels around the 63 limit, reserved labels,
    names around 253): native accepts exactly what ``idna`` encodes, less A-labels and a trailing
    dot; the compiler's validator (``_format_checker``) reads the format the same way."""
    rnd = random.Random(5891)
    g = native.compile(Constraint.json_schema({"format": "hostname"}))
    check = _format_checker(("hostname",))
    samples = []
    for _ in range(300):
        k = rnd.choice([1, 2, 3, 4, 5, 40])
        labels = []
        for _ in range(k):
            w = rnd.choice([1, 2, 3, 4, 5, 6, 62, 63, 64])
            lab = "".join(rnd.choice("abcxyzABC0189-" if rnd.random() < 0.3 else "abcdexyz019") for _ in range(w))
            if rnd.random() < 0.1:
                lab = rnd.choice(["xn--", "ab--", "Xn--"]) + lab
            labels.append(lab)
        s = ".".join(labels)
        if rnd.random() < 0.1:
            s += "."
        samples.append(s)
    samples += [_names(n, w) for n in (253, 254) for w in (1, 5, 63)]
    n_ok = 0
    for s in samples:
        want = _hostname_oracle(s)
        n_ok += want
        assert accepts(g, llama3_vocab, json.dumps(s)) is want, s
        assert check.conforms(s, "hostname") is want, s
    assert 50 < n_ok < len(samples) - 50


def test_hostname_length_bound_is_the_table():
    assert FORMAT_MAX_LENGTH == {"hostname": 253}
    assert re.fullmatch(FORMAT_REGEX["hostname"], _names(300, 63))  # the regex alone has no bound


def test_lenient_hostname_stays_an_annotation(llama3_vocab):
    be = get_backend("native", llama3_vocab, formats="lenient")
    g = be.compile(Constraint.json_schema({"format": "hostname"}))
    for s in ("xn--X", _names(300, 63), "-x"):
        assert accepts(g, llama3_vocab, json.dumps(s)), s


# -- the formats native refuses -----------------------------------------------------------------------
_PLACES = [
    (lambda f: {"format": f}, "/format"),
    (lambda f: {"type": "object", "properties": {"a": {"type": "string", "format": f}}}, "/properties/a/format"),
    (lambda f: {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"format": f}]}}, "/items/anyOf/1/format"),
    (lambda f: {"format": f, "enum": ["a", "b@c.d", "^a$"]}, "/format"),
    (lambda f: {"type": "object", "properties": {"a": {"const": "x", "format": f}}}, "/properties/a/format"),
    (lambda f: {"$defs": {"x": {"format": f}}, "type": "array", "items": {"$ref": "#/$defs/x"}}, None),
]


@pytest.mark.parametrize("fmt", sorted(UNASSERTED_FORMATS))
@pytest.mark.parametrize("place", range(len(_PLACES)))
def test_unasserted_formats_are_refused(native, fmt, place):
    """Wherever the format would constrain a string (emitted, or an ``enum``/``const`` value the
    compiler's validator would have to decide), the compile is refused with a typed error naming
    ``format`` and its pointer, in the backend and in regex mode; nothing is left as an annotation."""
    make, pointer = _PLACES[place]
    schema = make(fmt)
    for compile_ in (lambda s: native.compile(Constraint.json_schema(s)), schema_to_regex,
                     lambda s: schema_to_grammar(s).check()):
        with pytest.raises(UnsupportedFeatureError) as ei:
            compile_(schema)
        assert ei.value.feature == "format" and repr(fmt) in str(ei.value), str(ei.value)
        assert ei.value.where.endswith("/format") and (pointer is None or ei.value.where == pointer), ei.value.where


@pytest.mark.parametrize("fmt", sorted(UNASSERTED_FORMATS))
def test_unasserted_formats_beside_no_string_compile_exactly(native, llama3_vocab, fmt):
    """``format`` applies to strings only: where no string can be valid, nothing needs the format and
    the schema compiles exactly (oracle: ``jsonschema``)."""
    for schema, texts in [({"type": "integer", "format": fmt}, ["1", '"a"', "1.5"]),
                          ({"format": fmt, "enum": [1, None, [2]]}, ["1", "null", "[2]", '"a"', "2"]),
                          ({"allOf": [{"format": fmt}, {"type": "boolean"}]}, ["true", '"a"'])]:
        g = native.compile(Constraint.json_schema(schema))
        v = jsonschema.Draft202012Validator(schema)
        for t in texts:
            assert accepts(g, llama3_vocab, t) is v.is_valid(json.loads(t)), (schema, t)


@pytest.mark.parametrize("other", ["hostname", "email", "date"])
def test_unasserted_format_merged_with_an_asserted_one_is_refused(native, other):
    """``allOf`` of an asserted format and a refused one: the refused one used to give way to the
    asserted one (it was an annotation); now two formats that would both constrain the string."""
    for fmt in sorted(UNASSERTED_FORMATS):
        with pytest.raises(UnsupportedFeatureError, match="format"):
            native.compile(Constraint.json_schema({"allOf": [{"format": other}, {"format": fmt}]}))


@pytest.mark.parametrize("fmt,suite", [("idn-hostname", "idn-hostname"), ("idn-email", "idn-email"),
                                       ("regex", "regex"), ("regex", "ecmascript-regex")])
def test_suite_files_of_unasserted_formats(native, llama3_vocab, fmt, suite):
    """The suite's files: refused by default (so none of their invalid instances is accepted);
    under ``formats: "lenient"`` an annotation, every valid instance accepted (and the invalid
    strings too: what "lenient" means, as in JSON Schema 2020-12's default)."""
    lenient = get_backend("native", llama3_vocab, formats="lenient")
    n = 0
    for schema, t in _suite(suite):
        assert schema.get("format") == fmt
        with pytest.raises(UnsupportedFeatureError):
            native.compile(Constraint.json_schema(schema))
        g = lenient.compile(Constraint.json_schema(schema))
        for text in _spellings(t["data"]):
            assert accepts(g, llama3_vocab, text), (t["description"], text)
            n += 1
    assert n >= 8


def test_unknown_formats_stay_annotations(native, llama3_vocab):
    """A format JSON Schema does not define is an annotation (every validator accepts any string
    there: exact), as the suite's ``unknown`` case and MaskBench's ``int32``/``url``/... have it."""
    for fmt in ("unknown", "int32", "url"):
        g = native.compile(Constraint.json_schema({"type": "string", "format": fmt}))
        assert accepts(g, llama3_vocab, '"anything at all"') and not accepts(g, llama3_vocab, "1")


def test_format_checker_refuses_strings_of_unasserted_formats():
    """The compiler's validator: a refused format's check raises on a string (the emitters refuse
    it), passes other instances; the lenient checker does not know the format (an annotation)."""
    from structgate.native.json_schema.compiler import _RefusedFormat

    check = _format_checker(("hostname",), ("regex",))
    assert check.conforms(5, "regex") and check.conforms(None, "regex")
    with pytest.raises(_RefusedFormat):
        check.conforms("^a", "regex")
    assert _format_checker(("hostname",)).conforms("(", "regex")
