"""The ``format``s added to the native JSON Schema compiler for the JSON-Schema-Test-Suite's
``optional/format`` files, which native used to leave as annotations (every invalid instance
accepted): ``ipv6`` (RFC 4291 / RFC 3986's ABNF), ``duration`` (RFC 3339 appendix A),
``json-pointer`` (RFC 6901), ``relative-json-pointer``, ``uri-template`` (RFC 6570 level 4), ``iri``
and ``iri-reference`` (RFC 3987).

Oracles: the suite's own cases (tests/data/jsts/draft2020-12/optional/format, both JSON spellings
of each instance), ``jsonschema``'s ``ipv6`` checker (Python's ``ipaddress``), and procedural
checks written from the RFCs' ABNF here. Acceptance is what the native backend's matcher does on
the llama3 tokens of the JSON text. All but the first two contain characters a JSON string
escapes (``"``, ``\\``, controls) or non-ASCII ones (``_formats.ENCODED_FORMATS``): their bodies
are built from the code-point automaton, so no raw ``"`` ever closes the string early.
"""
from __future__ import annotations

import ipaddress
import json
import random
import re
from pathlib import Path

import jsonschema
import pytest

from structgate.backends.interface import Constraint
from structgate.backends.registry import get_backend
from structgate.native.json_schema import FORMAT_REGEX, schema_to_regex
from structgate.native.json_schema._automata import from_ast, trim
from structgate.native.json_schema._formats import ENCODED_FORMATS
from structgate.native.regex.parser import parse_regex
from _matching import accepts

SUITE = Path(__file__).parent / "data" / "jsts" / "draft2020-12" / "optional" / "format"
NEW = ("ipv6", "duration", "json-pointer", "relative-json-pointer", "uri-template", "iri", "iri-reference")
CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


@pytest.fixture(scope="module")
def native(llama3_vocab):
    return get_backend("native", llama3_vocab)


def _suite_cases(fmt: str):
    for case in json.loads((SUITE / f"{fmt}.json").read_text(encoding="utf-8")):
        for t in case["tests"]:
            yield case["schema"], t


@pytest.mark.parametrize("fmt", NEW)
def test_suite_cases(native, llama3_vocab, fmt):
    """Every case of the suite's file, in both spellings (ASCII escapes and plain UTF-8); non-string
    instances are valid (``format`` applies to strings only)."""
    compiled = {}
    n = 0
    for schema, t in _suite_cases(fmt):
        key = json.dumps(schema, sort_keys=True)
        if key not in compiled:
            compiled[key] = native.compile(Constraint.json_schema(schema))
        g = compiled[key]
        for text in {json.dumps(t["data"]), json.dumps(t["data"], ensure_ascii=False)}:
            assert accepts(g, llama3_vocab, text) is t["valid"], (fmt, t["description"], text)
            n += 1
    assert n >= 20


# -- ipv6 against Python's ipaddress (jsonschema's checker) ------------------------------------------
def _ipv6_strings(rnd: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        groups = [rnd.choice([0, 0, 0, rnd.randrange(1 << 16)]) for _ in range(8)]
        a = ipaddress.IPv6Address(b"".join(x.to_bytes(2, "big") for x in groups))
        if rnd.random() < 0.2:
            a = ipaddress.IPv6Address(f"::ffff:{rnd.randrange(256)}.{rnd.randrange(256)}.1.{rnd.randrange(256)}")
        s = rnd.choice([a.compressed, a.exploded, str(a).upper()])
        if rnd.random() < 0.2 and a.ipv4_mapped is None:  # the last 32 bits as an IPv4 address
            s = a.exploded.rsplit(":", 2)[0] + ":" + str(ipaddress.IPv4Address(a.packed[-4:]))
        if rnd.random() < 0.5:  # an edit: insert, delete or replace a character
            i = rnd.randrange(len(s) + 1)
            c = rnd.choice("0:f.g%1")
            s = rnd.choice([s[:i] + c + s[i:], s[:i] + s[i + 1:], s[:i] + c + s[i + 1:]])
        out.append(s)
    return out + ["::", "::1", "1::", ":::", "1:::2", "::ffff:1.2.3.04", "fe80::1%eth0", "1:2:3:4:5:6:7:8:9",
                  "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:7:1.2.3.4", "::1.2.3.4", "12345::"]


def test_ipv6_is_pythons_ipaddress(native, llama3_vocab):
    g = native.compile(Constraint.json_schema({"format": "ipv6"}))
    rx = re.compile(FORMAT_REGEX["ipv6"])
    strings = _ipv6_strings(random.Random(6), 400)
    n_valid = 0
    for s in strings:
        want = CHECKER.conforms(s, "ipv6")
        n_valid += want
        assert bool(rx.fullmatch(s)) is want, s
        assert accepts(g, llama3_vocab, json.dumps(s)) is want, s
    assert 100 < n_valid < len(strings) - 100


# -- duration, JSON Pointers, URI templates against the RFCs' ABNF, checked procedurally ---------------
def _duration_ok(s: str) -> bool:
    if not s.startswith("P") or len(s) < 2:
        return False
    body = s[1:]
    date, _, time_ = body.partition("T")
    if "T" in body and not time_:
        return False

    def units(part: str) -> list[str] | None:
        out, num = [], ""
        for ch in part:
            if ch in "0123456789":
                num += ch
            elif num:
                out.append(ch)
                num = ""
            else:
                return None
        return None if num else out

    du, tu = units(date), units(time_)
    if du is None or tu is None:
        return False
    if du == ["W"]:
        return not time_
    dates_ok = du in ([], ["D"], ["M"], ["M", "D"], ["Y"], ["Y", "M"], ["Y", "M", "D"])
    times_ok = tu in ([], ["H"], ["H", "M"], ["H", "M", "S"], ["M"], ["M", "S"], ["S"])
    return dates_ok and times_ok and (du or tu) != [] and ("T" not in body or tu != [])


def _json_pointer_ok(s: str) -> bool:
    if s == "":
        return True
    if not s.startswith("/"):
        return False
    return all(re.sub("~[01]", "", tok).count("~") == 0 for tok in s.split("/")[1:])


def _relative_json_pointer_ok(s: str) -> bool:
    m = re.match(r"(0|[1-9][0-9]*)", s)
    if not m or not m.group().isascii():
        return False
    rest = s[m.end():]
    return rest == "#" or _json_pointer_ok(rest)


def _uri_template_ok(s: str) -> bool:
    literal = set("!#$&'()*+,-./0123456789:;=?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]_abcdefghijklmnopqrstuvwxyz~")
    hexd = set("0123456789abcdefABCDEF")

    def pct(i: int) -> bool:
        return s[i] == "%" and i + 2 < len(s) and s[i + 1] in hexd and s[i + 2] in hexd

    def ucs(c: str) -> bool:
        o = ord(c)
        return (0xA0 <= o <= 0xD7FF or 0xE000 <= o <= 0xFDCF or 0xFDF0 <= o <= 0xFFEF
                or (o >= 0x10000 and (o & 0xFFFF) <= 0xFFFD and not 0xE0000 <= o <= 0xE0FFF))

    def varspec(v: str) -> bool:
        name, colon, mod = v.partition(":")
        if not colon and name.endswith("*"):
            name = name[:-1]
        if colon and not re.fullmatch(r"[1-9][0-9]{0,3}", mod):
            return False
        name = re.sub(r"%[0-9a-fA-F]{2}", "A", name)
        return bool(re.fullmatch(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*", name))

    i = 0
    while i < len(s):
        c = s[i]
        if c == "{":
            j = s.find("}", i)
            if j < 0:
                return False
            expr = s[i + 1:j]
            if expr[:1] and expr[0] in "+#./;?&=,!@|":
                expr = expr[1:]
            if not all(varspec(v) for v in expr.split(",")):
                return False
            i = j + 1
        elif c == "%":
            if not pct(i):
                return False
            i += 3
        elif c in literal or ucs(c):
            i += 1
        else:
            return False
    return True


PROCEDURAL = {"duration": _duration_ok, "json-pointer": _json_pointer_ok,
              "relative-json-pointer": _relative_json_pointer_ok, "uri-template": _uri_template_ok}
#: pieces the random strings are made of (a string starts with the first piece most of the time)
PIECES = {"duration": ["P", "T", "1", "20", "Y", "M", "W", "D", "H", "S", "0.5", "-", ","],
          "json-pointer": ["/", "~", "0", "1", "a", '"', "\\", "\n", "\x00", " ", "é", "😀", "#"],
          "relative-json-pointer": ["1", "0", "12", "#", "/", "~", "a", '"', "+"],
          "uri-template": ["{", "}", "a", ":", "*", ",", ".", "+", "#", "%4A", "%", "_", "/", " ", '"', "\\", "'",
                           "😀", "\ue000", "\U000e0001", "=", "1", "0"]}


@pytest.mark.parametrize("fmt", sorted(PROCEDURAL))
def test_formats_are_their_abnf(native, llama3_vocab, fmt):
    """Random strings over each format's alphabet: the regex, the native matcher (both spellings)
    and the schema's regex (regex mode) agree with the procedural check; length bounds and a
    ``not`` ``enum`` intersect exactly (in the canonical spelling, which those products write)."""
    ok = PROCEDURAL[fmt]
    rx = re.compile(FORMAT_REGEX[fmt])
    rnd = random.Random(fmt)
    pieces = PIECES[fmt]
    plain = {"format": fmt}
    bounded = {"type": "string", "format": fmt, "minLength": 2, "maxLength": 7}
    excluded = {"type": "string", "format": fmt, "not": {"enum": ["/a~0", "P1D"]}}
    g_plain = native.compile(Constraint.json_schema(plain))
    g_bounded = native.compile(Constraint.json_schema(bounded))
    g_excluded = native.compile(Constraint.json_schema(excluded))
    rx_plain = re.compile(schema_to_regex(plain))
    seen = set()
    n_valid = 0
    for _ in range(700):
        if fmt == "duration" and rnd.random() < 0.6:  # durations by the ABNF's shapes, some edited
            units = rnd.choice(["Y", "YM", "YMD", "M", "MD", "D", "", "W", "YD", "DM"])
            tunits = rnd.choice(["", "", "H", "HM", "HMS", "M", "MS", "S", "HS", "T"])
            s = "P" + "".join(str(rnd.randrange(30)) + u for u in units)
            if tunits:
                s += "T" + "".join(str(rnd.randrange(30)) + u for u in tunits.replace("T", ""))
            if rnd.random() < 0.3:
                i = rnd.randrange(len(s) + 1)
                s = s[:i] + rnd.choice(pieces) + s[i + 1:]
        else:
            s = (pieces[0] if rnd.random() < 0.8 else "") + "".join(rnd.choice(pieces) for _ in range(rnd.randrange(0, 7)))
        if s in seen:
            continue
        seen.add(s)
        want = ok(s)
        n_valid += want
        assert bool(rx.fullmatch(s)) is want, (fmt, s)
        for text in {json.dumps(s), json.dumps(s, ensure_ascii=False)}:
            assert accepts(g_plain, llama3_vocab, text) is want, (fmt, text)
            assert (rx_plain.fullmatch(text) is not None) is want, (fmt, text)
        for g, keep in ((g_bounded, want and 2 <= len(s) <= 7), (g_excluded, want and s not in ("/a~0", "P1D"))):
            assert accepts(g, llama3_vocab, json.dumps(s, ensure_ascii=False)) is keep, (fmt, s)
            if not keep:
                assert not accepts(g, llama3_vocab, json.dumps(s)), (fmt, s)
    assert n_valid >= 20, (fmt, n_valid)


@pytest.mark.parametrize("fmt", sorted(ENCODED_FORMATS))
@pytest.mark.parametrize("raw", ['"/""', '"/\x01"', '"/\\"', '"0/\\q"', '"{a"}"', '"a"b"'])
def test_encoded_formats_never_write_invalid_json(native, llama3_vocab, fmt, raw):
    """A ``"`` or ``\\`` of the format's alphabet is escaped in the JSON text: raw, it is not JSON."""
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)
    assert not accepts(native.compile(Constraint.json_schema({"format": fmt})), llama3_vocab, raw)


@pytest.mark.parametrize("fmt", sorted(FORMAT_REGEX))
def test_encoded_formats_are_exactly_those_with_escaped_or_non_ascii_characters(fmt):
    """A format outside ENCODED_FORMATS is written as its regex text, so its alphabet must be
    printable ASCII other than ``"`` and ``\\`` (each character its only JSON spelling); one inside
    has some other character."""
    d = trim(from_ast(parse_regex(FORMAT_REGEX[fmt]), max_states=100_000, what="test", where=""))
    chars = set()
    for row in d.delta:
        for a, nxt in enumerate(row):
            if nxt >= 0:
                for lo, hi in d.atoms[a]:
                    chars.update(range(lo, min(hi, 0x7F) + 1))
                    if hi > 0x7E:
                        chars.add(0x80)
    plain = set(range(0x20, 0x7F)) - {ord('"'), ord("\\")}
    assert (chars <= plain) is (fmt not in ENCODED_FORMATS), (fmt, sorted(chars - plain)[:5])


# -- enum / const beside an asserted format ------------------------------------------------------------
_VALUES = ["x", "", "2020-01-01", "::1", "P1D", "/a~0", "0#", "{+v}", "http://é.x/ü", "a:b", "1.2.3.4",
           "a@b.co", "12:00:00Z", "/a\"b", "00000000-0000-0000-0000-000000000000", "host.name",
           "2020-01-01T00:00:00Z"]


@pytest.mark.parametrize("fmt", sorted(FORMAT_REGEX))
def test_enum_values_outside_the_format_are_left_out(native, llama3_vocab, fmt):
    """An ``enum`` beside an asserted ``format`` keeps exactly the values in the format (oracle: the
    format's regex on the decoded value), at the top level and inside an array, in the grammar
    and in regex mode; a ``const`` outside it matches nothing (typed error). The compiler's
    jsonschema validator used to leave ``format`` an annotation there, so ``{"format": "date",
    "enum": ["x"]}`` accepted ``"x"``."""
    from structgate.errors import InvalidConstraintError

    rx = re.compile(FORMAT_REGEX[fmt])
    keep = [x for x in _VALUES if rx.fullmatch(x)]
    drop = [x for x in _VALUES if not rx.fullmatch(x)]
    assert keep and drop
    for schema, wrap in (({"format": fmt, "enum": _VALUES + [7]}, lambda x: x),
                         ({"type": "array", "items": {"format": fmt}, "enum": [[x] for x in _VALUES]}, lambda x: [x])):
        g = native.compile(Constraint.json_schema(schema))
        regex = re.compile(schema_to_regex(schema))
        for x in _VALUES:
            text = json.dumps(wrap(x))
            assert accepts(g, llama3_vocab, text) is (x in keep), (fmt, schema, x)
            assert (regex.fullmatch(text) is not None) is (x in keep), (fmt, x)
    assert accepts(native.compile(Constraint.json_schema({"format": fmt, "enum": _VALUES + [7]})), llama3_vocab, "7")
    with pytest.raises(InvalidConstraintError):
        native.compile(Constraint.json_schema({"format": fmt, "const": drop[0]}))


def test_lenient_formats_keep_their_enum_values(llama3_vocab):
    """``formats: "lenient"`` leaves ``uri`` an annotation, for its ``enum`` values too."""
    be = get_backend("native", llama3_vocab, formats="lenient")
    g = be.compile(Constraint.json_schema({"format": "uri", "enum": ["x", "a:b"]}))
    assert accepts(g, llama3_vocab, '"x"') and accepts(g, llama3_vocab, '"a:b"')
    g = be.compile(Constraint.json_schema({"format": "date", "enum": ["x", "2020-01-01"]}))
    assert not accepts(g, llama3_vocab, '"x"') and accepts(g, llama3_vocab, '"2020-01-01"')
