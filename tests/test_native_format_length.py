"""``format`` together with ``minLength``/``maxLength`` in the native JSON Schema compiler.

The format used to be dropped whenever a length bound was not implied by the format (MaskBench
``Github_easy---o9931``: ``{"format": "email", "maxLength": 1024}`` accepted ``"example"``). Now:

* a bound the format's own length range meets is dropped (``FORMAT_LENGTH``, checked here against
  each format's automaton and against Python ``re``);
* otherwise the exact product of the format's automaton with a length counter;
* beyond the product limits, ``email`` / ``hostname`` become a documented sound subset whose
  longest string meets ``maxLength``; other formats are a typed ``CompileLimitError`` naming
  ``format`` and its pointer.

Oracles: Python ``re`` on the format regex plus the length (the language the compiler promises),
``jsonschema`` with the 2020-12 format checkers (``Draft202012Validator.FORMAT_CHECKER``; plain
``FormatChecker()`` also carries draft 3's ``time`` = ``%H:%M:%S``, which rejects RFC 3339 times)
and small procedural checks (RFC 3339 via ``datetime``, RFC 1123 labels, dot-atom e-mail).
Acceptance is what the native backend's matcher does on the llama3 tokens of the JSON text.
"""
from __future__ import annotations

import datetime
import json
import random
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structgate.backends.interface import CompileOptions, Constraint
from structgate.backends.registry import get_backend
from structgate.errors import CompileLimitError, InvalidConstraintError
from structgate.native.json_schema import FORMAT_REGEX, schema_to_grammar, schema_to_regex
from structgate.native.json_schema._automata import complement, from_ast, length_dfa, matches, product, trim
from structgate.native.json_schema._formats import (_IPRIVATE, _LABEL, _UCSCHAR, EMAIL_LOCAL, FORMAT_LENGTH,
                                                    FORMAT_MAX_LENGTH, _labels_shape,
                                                    email_domain_subset, email_subset_shape, hostname_subset,
                                                    label_regex)
from structgate.native.regex.parser import parse_regex

CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
BIG = 10**6


def _dfa(regex: str):
    return from_ast(parse_regex(regex), max_states=100_000, what="test", where="")


def _length_range(d) -> tuple[int, int | None]:
    """(shortest, longest; None = unbounded) accepted length of a DFA, by search on its live part."""
    d = trim(d)
    n = len(d.delta)
    # shortest: breadth-first search
    dist, frontier, lo = {0: 0}, [0], None
    while frontier and lo is None:
        nxt = []
        for s in frontier:
            if d.accept[s]:
                lo = dist[s]
                break
            for t in d.delta[s]:
                if t >= 0 and t not in dist:
                    dist[t] = dist[s] + 1
                    nxt.append(t)
        frontier = nxt
    # longest: a cycle among the live states = unbounded, else the longest path of the DAG (Kahn's order)
    indeg = [0] * n
    for row in d.delta:
        for t in row:
            if t >= 0:
                indeg[t] += 1
    order, stack = [], [s for s in range(n) if indeg[s] == 0]
    while stack:
        s = stack.pop()
        order.append(s)
        for t in d.delta[s]:
            if t >= 0:
                indeg[t] -= 1
                if indeg[t] == 0:
                    stack.append(t)
    if len(order) < n:
        return lo, None
    far = [0 if d.accept[s] else -1 for s in range(n)]  # longest way to an accepting end
    for s in reversed(order):
        for t in d.delta[s]:
            if t >= 0 and far[t] >= 0:
                far[s] = max(far[s], far[t] + 1)
    hi = far[0]
    return lo, hi


# -- the table of implied lengths -------------------------------------------------------------------
@pytest.mark.parametrize("fmt", sorted(FORMAT_REGEX))
def test_format_length_table_matches_the_automaton(fmt):
    assert _length_range(_dfa(FORMAT_REGEX[fmt])) == FORMAT_LENGTH[fmt]


def test_format_length_table_by_brute_force_with_re():
    """The bounded formats' extremes, witnessed by Python ``re`` on the format regexes: a string of
    the shortest and of the longest length matches, none outside the range does (every way of
    growing the longest one by a character of the format's alphabet, every shortening of the
    shortest one)."""
    witnesses = {"time": ("00:00:00Z", "23:59:59.123456789+23:59"),
                 "date-time": ("2020-02-29T00:00:00z", "9999-12-31t23:59:59.999999999-00:00"),
                 "date": ("0001-01-01", "2024-02-29"), "uuid": ("0" * 8 + "-0000-0000-0000-" + "f" * 12,) * 2,
                 "ipv4": ("0.0.0.0", "255.255.255.255")}
    alphabet = "0123456789:.-+TtZzabcdef"
    for fmt, (short, long_) in witnesses.items():
        rx = re.compile(FORMAT_REGEX[fmt])
        lo, hi = FORMAT_LENGTH[fmt]
        assert (len(short), len(long_)) == (lo, hi), fmt
        assert rx.fullmatch(short) and rx.fullmatch(long_), fmt
        for i in range(len(long_) + 1):
            for c in alphabet:
                assert not rx.fullmatch(long_[:i] + c + long_[i:]), (fmt, long_[:i] + c + long_[i:])
        for i in range(len(short)):
            assert not rx.fullmatch(short[:i] + short[i + 1:]), fmt
    # time: 9 (Z) to 24 (9 fraction digits and an offset); with a 10th fraction digit none matches
    assert not re.fullmatch(FORMAT_REGEX["time"], "23:59:59.1234567890+23:59")
    assert not re.fullmatch(FORMAT_REGEX["date-time"], "2020-01-01T00:00:00.1234567890Z")


def _generator_regex(fmt: str) -> str:
    """The format regex with its non-ASCII ranges (ucschar, iprivate: a million code points, which
    hypothesis enumerates per class, ~60 s for ``iri-reference``) cut to a few code points of each
    kind; the strings it generates are still in the format."""
    return FORMAT_REGEX[fmt].replace(_UCSCHAR, "\\u00a0-\\u00ff\\uf900\\U0001f600-\\U0001f601\\U000e1000") \
        .replace(_IPRIVATE, "\\ue000\\U000f0000\\U0010fffd")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(FORMAT_REGEX)).flatmap(
    lambda f: st.tuples(st.just(f), st.from_regex(_generator_regex(f), fullmatch=True))))
def test_format_automaton_is_the_python_regex(case):
    """The engine's parser reads the Python-spelled format regexes as Python does: every generated
    string is accepted by the automaton and lies in the length range; its one-character edits are
    accepted iff ``re`` matches them."""
    fmt, s = case
    d = _dfa(FORMAT_REGEX[fmt])
    lo, hi = FORMAT_LENGTH[fmt]
    assert matches(d, s) and lo <= len(s) <= (hi if hi is not None else BIG)
    rnd = random.Random(s)
    for _ in range(10):
        i = rnd.randrange(len(s) + 1)
        c = rnd.choice("aZ09.-:@/%?#_ ~!T+z")
        for t in (s[:i] + c + s[i:], s[:i] + s[i + 1:], s[:i] + c + s[i + 1:]):
            assert matches(d, t) == bool(re.fullmatch(FORMAT_REGEX[fmt], t)), (fmt, t)


# -- independent procedural oracles ------------------------------------------------------------------
_ATEXT = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+/=?^_`{|}~-")


def _ldh_labels_ok(s: str, min_labels: int = 1) -> bool:
    labels = s.split(".")
    return len(labels) >= min_labels and all(
        1 <= len(x) <= 63 and re.fullmatch(r"[A-Za-z0-9-]+", x) and x[0] != "-" and x[-1] != "-" for x in labels)


def _hostname_ok(s: str) -> bool:
    """RFC 1123 labels, at most 253 characters, no reserved LDH label ("--" in positions 3-4: an
    IDNA A-label, left out of the format: a sound subset)."""
    return len(s) <= 253 and _ldh_labels_ok(s) and all(x[2:4] != "--" for x in s.split("."))


def _in_format(fmt: str, s: str) -> bool:
    """The language the compiler promises for ``fmt``: its regex and its own length bound."""
    return bool(re.fullmatch(FORMAT_REGEX[fmt], s)) and len(s) <= FORMAT_MAX_LENGTH.get(fmt, BIG)


def _email_ok(s: str) -> bool:
    local, at, domain = s.rpartition("@")
    return bool(at) and all(p and set(p) <= _ATEXT for p in local.split(".")) and _ldh_labels_ok(domain, 2)


def _rfc3339_time_ok(s: str) -> bool:
    m = re.fullmatch(r"(\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|[+-](\d\d):(\d\d))", s)
    if not m:
        return False
    h, mi, sec = int(m[1]), int(m[2]), int(m[3])
    off = m[6] is None or (int(m[6]) < 24 and int(m[7]) < 60)
    return h < 24 and mi < 60 and sec <= 60 and off


def _rfc3339_date_ok(s: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d\d-\d\d", s):
        return False
    try:
        datetime.date(int(s[:4]), int(s[5:7]), int(s[8:10]))
    except ValueError:
        return False
    return True


PROCEDURAL = {"email": _email_ok, "hostname": _hostname_ok, "time": _rfc3339_time_ok, "date": _rfc3339_date_ok,
              "date-time": lambda s: len(s) > 11 and s[10] in "Tt" and _rfc3339_date_ok(s[:10])
              and _rfc3339_time_ok(s[11:])}


# -- strings to judge ---------------------------------------------------------------------------------
def _labels(n: int, k_min: int, width: int = 63) -> str | None:
    """A dot-separated name of exactly n characters with at least k_min labels of at most width."""
    for k in range(k_min, n + 1):
        room = n - (k - 1)
        if room < k:
            return None
        if room <= k * width:
            sizes = [room // k + (1 if i < room % k else 0) for i in range(k)]
            return ".".join(chr(ord("a") + i % 26) * w for i, w in enumerate(sizes))
    return None


def _of_length(fmt: str, n: int) -> list[str]:
    """Valid strings of ``fmt`` with exactly n characters (empty when none is built)."""
    out = []
    if fmt == "email" and n >= 5:
        for local_len in {1, min(64, n - 4), min(64, max(1, n // 3))}:
            dom = _labels(n - local_len - 1, 2)
            if dom:
                out.append(("x" * local_len if local_len < 3 else "x." + "y" * (local_len - 2)) + "@" + dom)
    elif fmt == "hostname":
        out += [x for x in (_labels(n, 1), _labels(n, 3, 20)) if x]
    elif fmt == "uri" and n >= 2:
        out.append("a:" + "b" * (n - 2))
        if n >= 11:
            out.append("http://" + "h" * (n - 11) + ".com")
    elif fmt == "uri-reference":
        out.append("p" * n)
    elif fmt in ("time", "date-time"):
        head = "2024-02-29T" if fmt == "date-time" else ""
        for tail in ("Z", "+05:30"):
            k = n - len(head) - 8 - len(tail)
            if k == 0:
                out.append(head + "12:34:56" + tail)
            elif 2 <= k <= 10:
                out.append(head + "12:34:56." + "7" * (k - 1) + tail)
    elif fmt == "date" and n == 10:
        out += ["2024-02-29", "2023-12-31", "0001-01-01", "1999-11-30"]
    elif fmt == "uuid" and n == 36:
        out += ["123e4567-e89b-12d3-a456-426614174000", "F" * 8 + "-abcd-ABCD-0000-" + "9" * 12]
    elif fmt == "ipv4":
        for s in ("1.2.3.4", "255.255.255.255", "10.0.0.1", "192.168.1.10", "1.22.3.4"):
            if len(s) == n:
                out.append(s)
    return [s for s in out if _in_format(fmt, s)]


INVALID = ["", "example", "a@", "@b.c", "a@b", "a..b@c.d", "-a.com", "a-.com", "a b", "http://a b", "://",
           "2020-13-01T00:00:00Z", "2021-02-29T00:00:00Z", "24:00:00Z", "12:00:00", "12:60:00Z", "1.2.3",
           "256.1.1.1", "01.1.1.1x", "g" * 36, "0" * 8 + "-0000-0000-0000-" + "0" * 11, "a@b.c.", "a:b c", "%zz",
           "x" * 64 + ".com", "12:00:00.1234567890Z"]


def _walks(fmt: str, rnd: random.Random, count: int) -> list[str]:
    """Random strings of the format: walks on its (trimmed) automaton, stopping at an accepting state
    with probability 1/6, heading for the nearest accepting state after 40 steps; each step one
    random printable ASCII code point of the chosen transition."""
    d = trim(_dfa(FORMAT_REGEX[fmt]))
    dist = {s: 0 for s in range(len(d.delta)) if d.accept[s]}
    changed = True
    while changed:
        changed = False
        for s, row in enumerate(d.delta):
            best = min((dist[t] + 1 for t in row if t in dist), default=None)
            if best is not None and best < dist.get(s, 1 << 30):
                dist[s] = best
                changed = True
    ascii_of = [[c for a, b in atom for c in range(a, min(b, 0x7E) + 1) if c >= 0x20] for atom in d.atoms]
    out = []
    for _ in range(count):
        s, text = 0, []
        while True:
            moves = [(a, t) for a, t in enumerate(d.delta[s]) if t >= 0 and ascii_of[a]]
            if d.accept[s] and (not moves or rnd.random() < 1 / 6 or len(text) >= 40):
                break
            if len(text) >= 40:
                moves = [m for m in moves if dist[m[1]] < dist[s]]
            a, s = rnd.choice(moves)
            text.append(chr(rnd.choice(ascii_of[a])))
        out.append("".join(text))
    return out


def _samples(fmt: str, lmin: int, lmax: int | None) -> list[str]:
    rnd = random.Random(f"{fmt}{lmin}{lmax}")
    lo, hi = FORMAT_LENGTH[fmt]
    lengths = {lo, lo + 1, lmin - 1, lmin, lmin + 1, 9, 20, 36}
    if lmax is not None:
        lengths |= {lmax - 1, lmax, lmax + 1, (lmin + lmax) // 2}
    out = list(INVALID)
    for n in sorted(x for x in lengths if 0 <= x <= 1100):
        out += _of_length(fmt, n)
    out += _walks(fmt, rnd, 40)
    # every valid string mutated: a character added, dropped, replaced
    for s in list(out):
        if s:
            i = rnd.randrange(len(s))
            out += [s[:i] + s[i + 1:], s[:i] + rnd.choice(".-@:aZ9") + s[i:], s[:i] + rnd.choice(" _.") + s[i + 1:]]
    return list(dict.fromkeys(out))


# -- the compiler against the oracles -------------------------------------------------------------
@pytest.fixture(scope="module")
def native(llama3_vocab):
    backend = get_backend("native", llama3_vocab)

    def accepts(grammar, text: str) -> bool:
        m = grammar.matcher()
        return m.advance(llama3_vocab.encode(json.dumps(text))) and m.is_accepting()

    return backend, accepts


#: (format, minLength, maxLength, kind): "exact" = accepted iff the format regex matches and the length
#: fits; "subset" = the documented sound subset (accepted ⇒ valid; the subset's own shapes accepted)
CASES = [
    ("date-time", 0, 30, "exact"), ("date-time", 25, None, "exact"), ("date-time", 22, 27, "exact"),
    ("date-time", 0, 35, "implied"), ("date-time", 20, 40, "implied"),
    ("time", 0, 12, "exact"), ("time", 10, None, "exact"), ("time", 0, 24, "implied"), ("time", 9, 9, "exact"),
    ("date", 0, 9, "empty"), ("date-time", 0, 19, "empty"), ("ipv4", 16, None, "empty"), ("date", 0, 10, "implied"),
    ("ipv4", 0, 10, "exact"), ("ipv4", 9, 13, "exact"), ("ipv4", 7, 15, "implied"),
    ("uuid", 0, 35, "empty"), ("uuid", 30, 40, "implied"), ("uuid", 36, 36, "implied"),
    ("email", 0, 5, "exact"), ("email", 0, 24, "exact"), ("email", 5, None, "implied"), ("email", 1, 255, "subset"),
    ("email", 0, 1024, "subset"), ("email", 0, 100, "subset"), ("email", 7, 9, "exact"),
    ("hostname", 0, 20, "exact"), ("hostname", 3, 9, "exact"), ("hostname", 1, 255, "subset"),
    ("hostname", 0, 100, "subset"), ("hostname", 0, 1024, "subset"),
    ("uri", 0, 8, "exact"), ("uri", 7, None, "exact"), ("uri", 1, None, "implied"),
    ("uri-reference", 3, 6, "exact"), ("uri-reference", 12, None, "exact"),
]


@pytest.mark.parametrize("fmt,lmin,lmax,kind", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_format_with_length_against_oracles(native, fmt, lmin, lmax, kind):
    backend, accepts = native
    schema = {"type": "string", "format": fmt, "minLength": lmin}
    if lmax is not None:
        schema["maxLength"] = lmax
    validator = jsonschema.Draft202012Validator(schema, format_checker=CHECKER)
    samples = _samples(fmt, lmin, lmax)
    try:
        grammar = backend.compile(Constraint("json_schema", schema))
    except InvalidConstraintError:  # the empty language (a date has 10 characters): nothing is valid
        assert kind == "empty" and not any(_in_format(fmt, s) and lmin <= len(s) <= lmax
                                           for s in samples)
        return
    assert kind != "empty"
    n_valid = n_accepted = 0
    for s in samples:
        in_format = _in_format(fmt, s)
        fits = lmin <= len(s) <= (lmax if lmax is not None else BIG)
        got = accepts(grammar, s)
        n_valid += in_format and fits
        n_accepted += got
        if got:  # sound: never accepts an instance jsonschema or the procedural check rejects
            assert validator.is_valid(s), (schema, s)
            assert fits and in_format, (schema, s)
            assert PROCEDURAL.get(fmt, lambda _: True)(s), (schema, s)
        if kind in ("exact", "implied"):
            assert got == (in_format and fits), (schema, s, got)
        elif in_format and fits and _in_subset(fmt, lmax, s):
            assert got, (schema, s)  # the subset's documented shape is generated
    assert n_accepted > 0 and n_accepted < len(samples), (schema, n_valid, n_accepted)


def _in_subset(fmt: str, lmax: int, s: str) -> bool:
    """Whether s has the shape of the documented subset (as sizes, not through its regex)."""
    if fmt == "hostname":
        k, b = _labels_shape(min(lmax, FORMAT_MAX_LENGTH["hostname"]) + 1, 1)
        labels = s.split(".")
        return len(labels) <= k and all(len(x) <= b for x in labels)
    a, k, b = email_subset_shape(lmax)
    local, _, domain = s.rpartition("@")
    labels = domain.split(".")
    return len(local) <= a and len(labels) <= k and all(len(x) <= b for x in labels)


def test_maskbench_email_max_length_1024(native, llama3_vocab):
    """MaskBench Github_easy---o9931 / o9939 / o9780: the format is asserted under the bound
    ("example" was accepted while the format was dropped)."""
    backend, _ = native
    schema = {"type": "object", "properties": {"email": {"type": "string", "format": "email", "maxLength": 1024}},
              "required": ["email"]}
    grammar = backend.compile(Constraint("json_schema", schema))
    validator = jsonschema.Draft202012Validator(schema, format_checker=CHECKER)
    for v, want in [("example", False), ("example@example.com", True), ("john.doe@mail.example.co.uk", True),
                    ("a@b", False), ("", False), ("a@b.c", True)]:
        for text in (json.dumps({"email": v}), json.dumps({"email": v}, separators=(",", ":"))):
            m = grammar.matcher()
            got = m.advance(llama3_vocab.encode(text)) and m.is_accepting()
            assert got == want, text
            assert not got or validator.is_valid({"email": v})
    assert not validator.is_valid({"email": "example"})


# -- the sound subsets, checked on their automata ---------------------------------------------------------
@pytest.mark.parametrize("lmax", [1, 2, 3, 5, 10, 50, 64, 100, 127, 128, 255, 256, 1024, 5000])
def test_hostname_subset_is_sound(lmax):
    """Every string of the subset is a host name (the product with the complement of the hostname
    automaton is empty) of at most lmax characters (the longest path of its automaton)."""
    sub = _dfa(hostname_subset(lmax))
    lo, hi = _length_range(sub)
    assert lo == 1 and hi is not None and hi <= lmax
    assert trim(product(sub, complement(_dfa(FORMAT_REGEX["hostname"])), max_states=10**6, what="t",
                        where="")) is None
    if lmax in (255, 1024):  # the documented shapes: 4 labels of 63 (= 255), 16 labels of 63
        assert hi == (255 if lmax == 255 else 16 * 64 - 1)


@pytest.mark.parametrize("lmax", [5, 6, 9, 10, 50, 100, 191, 192, 255, 1024, 5000])
def test_email_subset_is_sound(lmax):
    """local part (1..a, exact) + "@" + domain: the domain's automaton is inside the format's domain,
    and a + 1 + longest domain <= lmax; the documented shapes for 255 and 1024."""
    a, k, b = email_subset_shape(lmax)
    assert 1 <= a <= 64 and k >= 2 and 1 <= b <= 63
    dom = _dfa(email_domain_subset(k, b))
    lo, hi = _length_range(dom)
    assert lo == 3 and a + 1 + hi <= lmax
    full_domain = _dfa(rf"{_LABEL}(?:\.{_LABEL})+")
    assert trim(product(dom, complement(full_domain), max_states=10**6, what="t", where="")) is None
    local = trim(product(_dfa(EMAIL_LOCAL), length_dfa(1, a), max_states=10**5, what="t", where=""))
    assert _length_range(local) == (1, a)
    assert re.fullmatch(FORMAT_REGEX["email"], "x" * a + "@" + _labels(hi, 2, b))
    if lmax == 1024:
        assert (a, k, b) == (64, 15, 63) and a + 1 + hi == 1024
    if lmax == 255:
        assert (a, k, b) == (63, 4, 47) and a + 1 + hi == 255
    assert email_subset_shape(4) is None


def test_label_regex_is_the_format_label():
    assert label_regex(63) == _LABEL
    for b in (1, 2, 3, 10):
        assert _length_range(_dfa(label_regex(b))) == (1, b)


def test_subset_shapes_are_accepted_and_longer_strings_are_not(native):
    """Email with maxLength 1024 in regex mode (the product is over its limits there): the longest
    subset string (64-character dot-atom, 15 labels of 63) is accepted; one more character anywhere
    is not (over the bound); the local part is exact up to 64 (dots anywhere inside), 65 is over
    RFC 5321's limit and rejected."""
    backend, _ = native

    def accepts(g, text):
        return bool(re.fullmatch(g, json.dumps(text)))

    g = schema_to_regex({"type": "string", "format": "email", "maxLength": 1024})
    domain = ".".join(chr(97 + i) * 63 for i in range(15))
    longest = "a." * 31 + "bc" + "@" + domain
    assert len(longest) == 1024 and accepts(g, longest)
    assert not accepts(g, longest + "d")
    assert not accepts(g, "z" + longest)
    for local in ("a" * 64, "a.b" * 21 + "c", "x" * 62 + ".y", "!#$%&'*+/=?^_`{|}~-"):
        assert len(local) <= 64 and accepts(g, local + "@example.com"), local
    assert not accepts(g, "a" * 65 + "@example.com")  # valid for jsonschema, outside the subset (sound)
    # hostname: maxLength 255 is over the format's own 253: the subset for 253 (4 labels of 62)
    h = schema_to_regex({"type": "string", "format": "hostname", "maxLength": 255})
    four = ".".join(chr(97 + i) * 62 for i in range(4))
    assert len(four) == 251 and accepts(h, four) and not accepts(h, four + "x")
    assert not accepts(h, ".".join(chr(97 + i) * 63 for i in range(4)))  # 255 characters
    assert accepts(h, "www.example.com") and not accepts(h, "example.com:8080")


# -- refusals, other combinations ------------------------------------------------------------------------
@pytest.mark.parametrize("schema,pointer", [
    ({"type": "object", "properties": {"u": {"type": "string", "format": "uri", "maxLength": 255}}},
     "/properties/u/format"),
    ({"type": "string", "format": "uri-reference", "maxLength": 2048}, "/format"),
    ({"type": "string", "format": "email", "minLength": 6, "maxLength": 1024}, "/format"),
    ({"type": "string", "format": "email", "minLength": 30}, "/format"),
])
def test_over_the_limit_is_a_typed_refusal(schema, pointer):
    """Regex mode builds the product and refuses past its limits; grammar mode generates it lazily
    (exact: ``test_grammar_mode_is_exact_past_the_product_limits``)."""
    with pytest.raises(CompileLimitError) as ei:
        schema_to_regex(schema)
    assert "format" in str(ei.value) and re.search(rf"at {re.escape(pointer)}[ :]", str(ei.value)), str(ei.value)
    schema_to_grammar(schema).check()


@pytest.mark.parametrize("schema,texts", [
    ({"type": "string", "format": "email", "maxLength": 1024},
     ["a" * 64 + "@example.com", "a" * 65 + "@example.com", "x@" + "b" * 63 + "." + "c" * 63,
      "a@" + ".".join(["b" * 63] * 16), "a@" + ".".join(["b" * 63] * 15) + ".cc", "example"]),
    ({"type": "string", "format": "hostname", "maxLength": 255},
     [".".join(["a" * 63] * 4), ".".join(["a" * 63] * 4) + "x", ".".join(["ab"] * 80), "-x", "a..b"]),
    ({"type": "string", "format": "uri", "maxLength": 255},
     ["http://example.com/" + "a" * 236, "http://example.com/" + "a" * 237, "mailto:x@y.z", "not a uri"]),
    ({"type": "string", "format": "email", "minLength": 30},
     ["a" * 18 + "@example.com", "a" * 17 + "@example.com", "a@b.c" * 7]),
])
def test_grammar_mode_is_exact_past_the_product_limits(native, schema, texts):
    """Past the product limits the native backend (grammar mode) keeps the format exactly (it was
    the sound email/hostname subset, or a refusal): oracle Python ``re`` on the format regex plus
    the length bounds."""
    backend, accepts = native
    g = backend.compile(Constraint("json_schema", schema))
    lo, hi = schema.get("minLength", 0), schema.get("maxLength", BIG)
    got = {s: accepts(g, s) for s in texts}
    for s in texts:
        want = _in_format(schema["format"], s) and lo <= len(s) <= hi
        assert got[s] == want, (schema, s)
    assert any(got.values()) and not all(got.values())


def test_lenient_formats_keep_only_the_length():
    lenient = CompileOptions(whitespace="compact", extra={"formats": "lenient"})
    rx = schema_to_regex({"type": "string", "format": "uri", "maxLength": 255}, lenient)
    assert re.fullmatch(rx, '"not a uri"') and not re.fullmatch(rx, json.dumps("x" * 256))
    rx = schema_to_regex({"type": "string", "format": "email", "maxLength": 255}, lenient)
    assert not re.fullmatch(rx, '"example"')  # email stays asserted under "lenient"


def test_impossible_bounds_are_the_empty_language():
    rx = schema_to_regex({"type": "object", "properties": {"t": {"type": "string", "format": "date-time",
                                                                 "maxLength": 19}}})
    assert re.fullmatch(rx, "{}") and not re.fullmatch(rx, '{"t": "2020-01-01T00:00:00"}')
    rx = schema_to_regex({"type": "object", "properties": {"d": {"type": "string", "format": "date",
                                                                 "minLength": 11}}})
    assert re.fullmatch(rx, "{}") and not re.fullmatch(rx, '{"d": "2020-01-01"}')


@pytest.mark.parametrize("schema,texts", [
    ({"type": "string", "format": "date", "pattern": "^2"}, ["2020-01-01", "1020-01-01", "2x", "2020-02-30"]),
    ({"type": "string", "format": "uri", "pattern": "^https?://"},
     ["https://a.b/c", "ftp://x", "https://a b", "http://"]),
    ({"type": "string", "format": "email", "pattern": "@example\\.com$", "maxLength": 20},
     ["a@example.com", "a@example.org", "example.com", "x" * 8 + "@example.com", "x" * 7 + "@example.com"]),
    ({"type": "string", "format": "email", "not": {"enum": ["", "a@b", "a@@b.c"]}}, ["", "a@b", "a@b.c", "example"]),
    ({"type": "string", "format": "hostname", "not": {"enum": ["localhost", "a.b"]}},
     ["localhost", "a.b", "a.bc", "localhost.x", "-x"]),
    ({"type": "string", "format": "date", "not": {"enum": ["2020-01-01", "x"]}}, ["2020-01-01", "2020-01-02", "x"]),
    ({"type": "string", "format": "ipv4", "not": {"const": "0.0.0.0"}}, ["0.0.0.0", "0.0.0.1", "1.2.3", ""]),
])
def test_pattern_and_not_keep_the_format(native, schema, texts):
    """A ``pattern`` or a folded ``not`` of strings beside a ``format`` used to drop the format."""
    backend, accepts = native
    g = backend.compile(Constraint("json_schema", schema))
    validator = jsonschema.Draft202012Validator(schema, format_checker=CHECKER)
    fmt = schema["format"]
    got = {s: accepts(g, s) for s in texts}
    for s in texts:
        assert got[s] == (validator.is_valid(s) and _in_format(fmt, s)), (schema, s)
    assert any(got.values()) and not all(got.values())


def test_not_beside_email_over_the_rule_limit_is_exact(native):
    """The email automaton alone has 252 states: excluding one of its strings needs more rules than
    the default max_automaton_rules allows as eager rules. It was a typed refusal (before that, a
    silent drop: {"format": "email", "not": {"const": "a@b.c"}} accepted "example"); its rules are
    now generated lazily (``_lazy_dfa``), and the language is exactly the email format minus the
    one address."""
    backend, accepts = native
    schema = {"type": "string", "format": "email", "not": {"const": "a@b.c"}}
    g = backend.compile(Constraint("json_schema", schema))
    for s in ["a@b.c", "example", "a@b.co", "b@b.c", "a@b.cc", "a@bb.c", "x" * 30 + "@ex.org", "a@b", "@b.c",
              "a.b@c.d", "a@b.c.d", "ab@b.c"]:
        assert accepts(g, s) == (_email_ok(s) and s != "a@b.c"), s


# -- allOf with several formats (_merge.py): never dropped ---------------------------------------
def test_allof_of_two_asserted_formats_is_refused_not_dropped(native):
    from structgate.errors import UnsupportedFeatureError

    with pytest.raises(UnsupportedFeatureError, match="two different formats"):
        native[0].compile(Constraint("json_schema", {"type": "string", "allOf": [{"format": "email"},
                                                                             {"format": "date"}]}))


@pytest.mark.parametrize("schema", [
    {"type": "string", "allOf": [{"format": "email"}, {"format": "int64"}]},  # int64: not asserted
    {"type": "string", "allOf": [{"format": "int64"}, {"format": "email"}]},
    {"type": "string", "allOf": [{"format": "email"}, {"maxLength": 30}]},
])
def test_allof_keeps_the_asserted_format(schema, native):
    backend, accepts = native
    g = backend.compile(Constraint("json_schema", schema))
    val = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    for s in ["example", "a@b.co", "2020-01-01", "x" * 25 + "@b.co", "x" * 40 + "@b.co"]:
        ok = accepts(g, s)
        assert not ok or val.is_valid(s), (schema, s)  # sound: never accepts what jsonschema rejects
        assert ok == (_email_ok(s) and val.is_valid(s)), (schema, s)
