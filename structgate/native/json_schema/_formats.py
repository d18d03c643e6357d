"""``format`` regexes (RFC 3339 dates/times and durations, UUID, IPv4, IPv6, e-mail, RFC 3986
URIs, RFC 1123 host names, RFC 6901 JSON Pointers and relative ones, RFC 6570 URI templates) and
the format policy tables of the JSON Schema compiler (see ``docs/json-schema.md``)."""
from __future__ import annotations


def _date() -> str:
    # years 0001-9999 (Python's date and RFC 3339 both accept them); Feb 29 only in leap years
    leap = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
    year = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
    return (r"(?:" + year + "-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-"
            r"(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|" + leap + "-02-29)")


_TIME = (r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?"
         r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
_HEX = "[0-9a-fA-F]"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"


def _nr_ldh_label(b: int) -> str:
    """One host-name label of 1..``b`` letters, digits and inner hyphens (``b >= 5``) without "--" in
    positions 3-4: RFC 5890 section 2.3.1's NR-LDH label. A label with "--" there is a reserved LDH
    label, valid in a host name only as an IDNA A-label ("xn--" + Punycode of a U-label that passes
    RFC 5891/5892); that check (Punycode decoding and IDNA2008's code-point tables and contextual
    rules) is not regular at any reasonable size, so A-labels are left out: a sound subset."""
    ld, ldh = "[A-Za-z0-9]", "[A-Za-z0-9-]"
    return rf"{ld}(?:{ldh}{{0,2}}{ld}|{ldh}(?:{ld}{ldh}|-{ld}){ldh}{{0,{b - 5}}}{ld})?"


#: the label of ``hostname`` (:func:`_nr_ldh_label` of 63; ``email``'s domain keeps :data:`_LABEL`)
_HOST_LABEL = _nr_ldh_label(63)
# RFC 4291 section 2.2 text form, as RFC 3986's IPv6address ABNF spells it (h16 = 1-4 hex digits,
# ls32 = two h16 or an IPv4 address; "::" once); no zone id (jsonschema's checker refuses one)
_H16 = f"{_HEX}{{1,4}}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = "(?:" + "|".join([
    rf"(?:{_H16}:){{6}}{_LS32}",
    rf"::(?:{_H16}:){{5}}{_LS32}",
    rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
    rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
]) + ")"
# RFC 3986 URI / URI-reference (section 3 and 4.1 ABNF) and RFC 3987 IRI / IRI-reference (the same
# with ucschar in iunreserved, iprivate in the query). ASCII spelling of the ASCII part (no \u
# escapes of it). A userinfo/host/port split is enforced after "//", so "http://a:b" (port not
# digits) is excluded; a host is a reg-name (which covers IPv4address) or, in IRIs only, an
# IP-literal ("[" IPv6address / IPvFuture "]"). URIs leave IP-literal hosts out (a sound subset,
# as before IPv6 was a format): with them a uri with a maxLength compiled in twice the time
# (MaskBench's 52 uri schemas: p90 42 -> 54 ms). A relative-ref's first segment has no ":" so it
# can never be read as a scheme.
_UNRES = r"A-Za-z0-9._~\-"
_SUBD = r"!$&'()*+,;="
_PCT = rf"%{_HEX}{{2}}"
_UCSCHAR = (r"\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
            + "".join(rf"\U{(p << 16) | (0x1000 if p == 14 else 0):08x}-\U{(p << 16) | 0xFFFD:08x}"
                      for p in range(1, 15)))
_IPRIVATE = r"\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"


def _uri_regexes(ucs: str = "", iprivate: str = "", ip_literal: bool = False) -> tuple[str, str]:
    """``(absolute, relative reference)`` regexes: RFC 3986's URI and relative-ref, or with ``ucs``
    (ucschar) and ``iprivate`` RFC 3987's IRI and irelative-ref; IP-literal hosts with
    ``ip_literal``."""
    unres = _UNRES + ucs
    pchar = rf"(?:[{unres}{_SUBD}:@]|{_PCT})"
    seg_nz_nc = rf"(?:[{unres}{_SUBD}@]|{_PCT})+"
    host = rf"(?:[{unres}{_SUBD}]|{_PCT})*"
    if ip_literal:
        host = rf"(?:\[(?:{_IPV6}|[Vv]{_HEX}+\.[{_UNRES}{_SUBD}:]+)\]|{host})"
    authority = rf"(?:(?:[{unres}{_SUBD}:]|{_PCT})*@)?{host}(?::[0-9]*)?"
    abempty = rf"(?:/{pchar}*)*"
    qf = rf"(?:\?(?:{pchar}|[/?{iprivate}])*)?(?:#(?:{pchar}|[/?])*)?"
    absolute = (rf"[A-Za-z][A-Za-z0-9+.\-]*:(?://{authority}{abempty}|/(?:{pchar}+{abempty})?"
                rf"|{pchar}+{abempty}|){qf}")
    relative = rf"(?://{authority}{abempty}|/(?:{pchar}+{abempty})?|{seg_nz_nc}{abempty}|){qf}"
    return absolute, relative


_URI, _RELATIVE_REF = _uri_regexes()
_IRI, _IRELATIVE_REF = _uri_regexes(_UCSCHAR, _IPRIVATE, ip_literal=True)
# RFC 3339 appendix A duration ABNF: dur-date (day, month [day], year [month [day]]) [dur-time],
# or dur-time alone (hour [minute [second]], minute [second], second), or weeks alone
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DURATION = (rf"P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)(?:{_DUR_TIME})?"
             rf"|{_DUR_TIME}|[0-9]+W)")
# RFC 6901: reference tokens of any character, "~" only as "~0" or "~1"
_JSON_POINTER = r"(?:/(?:[^~/]|~[01])*)*"
# Relative JSON Pointer as draft-handrews-relative-json-pointer-01 (draft 7, 2019-09) has it: a
# non-negative integer without leading zeros, then "#" or a JSON Pointer. 2020-12's
# draft-bhutton-relative-json-pointer-00 also allows an index manipulation after the integer
# ("0+1/foo", "1-2#"); it is left out (a sound subset), as jsonschema's checker leaves it out
_RELATIVE_JSON_POINTER = rf"(?:0|[1-9][0-9]*)(?:#|{_JSON_POINTER})"
# RFC 6570 section 2 (level 4): literals (ASCII ones, the apostrophe included as RFC 6570's errata and
# the JSON-Schema-Test-Suite have it; ucschar, iprivate, pct-encoded) and
# expressions "{" [operator] varspec *("," varspec) "}", varspec = varname [":" 1-9999 / "*"]
_UCS_IPRIVATE = _UCSCHAR + _IPRIVATE
_UT_LITERAL = rf"(?:[!#$&-;=?-\[\]_a-z~{_UCS_IPRIVATE}]|{_PCT})"
_UT_VARCHAR = rf"(?:[A-Za-z0-9_]|{_PCT})"
_UT_VARSPEC = rf"{_UT_VARCHAR}(?:\.?{_UT_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
_URI_TEMPLATE = rf"(?:{_UT_LITERAL}|\{{[+#./;?&=,!@|]?{_UT_VARSPEC}(?:,{_UT_VARSPEC})*\}})*"

FORMAT_REGEX = {
    "date": _date(),
    "time": _TIME,
    "date-time": _date() + "[Tt]" + _TIME,
    "uuid": f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "ipv4": _IPV4,
    "email": rf"{_ATEXT}+(?:\.{_ATEXT}+)*@{_LABEL}(?:\.{_LABEL})+",
    "uri": _URI,
    "uri-reference": f"(?:{_URI}|{_RELATIVE_REF})",
    "iri": _IRI,
    "iri-reference": f"(?:{_IRI}|{_IRELATIVE_REF})",
    # RFC 1123 host name: dot-separated labels of 1-63 letters, digits, hyphens, no hyphen at either
    # end, none with "--" in positions 3-4 (_HOST_LABEL); at most 253 characters in all
    # (FORMAT_MAX_LENGTH: not in the regex, the compiler intersects it as a length bound)
    "hostname": rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*",
    "ipv6": _IPV6,
    "duration": _DURATION,
    "json-pointer": _JSON_POINTER,
    "relative-json-pointer": _RELATIVE_JSON_POINTER,
    "uri-template": _URI_TEMPLATE,
}
#: formats with characters a JSON string escapes (``"``, ``\\``, controls) or non-ASCII ones: their
#: string bodies are written from the code-point automaton in every JSON spelling
#: (``_type_string.StringMixin._format_body``); the others' regexes are printable ASCII without
#: ``"`` and ``\\`` and serve as the JSON text itself: each character in its plain spelling only
#: (``"\\u0037"`` for ``"7"``, ``\\/`` for ``/`` are not generated: a sound subset)
ENCODED_FORMATS = frozenset({"json-pointer", "relative-json-pointer", "uri-template", "iri", "iri-reference"})
#: formats that ``options.extra["formats"] == "lenient"`` leaves as annotations (JSON Schema 2020-12's
#: default; the JSTS "only an annotation by default" tests): asserting them is what users of
#: constrained decoding and the MaskBench labels expect (llguidance and XGrammar assert them too)
LENIENT_ANNOTATIONS = frozenset({"uri", "uri-reference", "hostname"})
#: formats JSON Schema defines that no regex here asserts: ``idn-hostname`` (IDNA2008: Unicode
#: code-point tables, contextual and Bidi rules, A-labels' Punycode), ``idn-email`` (its domain is
#: one), ``regex`` (ECMA-262 syntax: named groups and back-references that must match, ``{n,m}``
#: with n <= m, not context-free). Left as annotations they accepted every JSTS invalid instance, so
#: the compiler refuses them (``UnsupportedFeatureError`` naming ``format`` and its pointer: what
#: llguidance does with a format it does not implement) wherever they would constrain a string;
#: ``options.extra["formats"] == "lenient"`` leaves them annotations. Formats JSON Schema does not
#: define (``int32``, ``unknown``...) are annotations always: every validator accepts any string there
UNASSERTED_FORMATS = frozenset({"idn-hostname", "idn-email", "regex"})
#: a format's bound on the decoded length (code points) that its regex leaves out: ``hostname``'s
#: 253 characters (RFC 1035 section 2.3.4 / RFC 1123 section 2.1: 255 octets on the wire, a length
#: octet per label and the root's, so 253 in text without a trailing dot). The compiler intersects
#: it as a ``maxLength`` (``_type_string.StringMixin.string``); ``_format_checker`` checks it too
FORMAT_MAX_LENGTH = {"hostname": 253}
#: decoded length range (shortest, longest; None = unbounded) of each format regex's strings, read off
#: the regexes above (:data:`FORMAT_MAX_LENGTH` apart; time: ``hh:mm:ss`` + ``Z`` = 9 up to ``.`` + 9 fraction digits + ``+hh:mm`` = 24;
#: date-time = date + ``T`` + time; email: ``a@b.c``; uri: ``a:``; checked against each format's
#: automaton in tests/test_native_format_length.py). A ``minLength``/``maxLength`` the range already
#: meets is dropped (exact); other bounds are intersected (``_type_string.StringMixin.string``)
FORMAT_LENGTH = {"date": (10, 10), "time": (9, 24), "date-time": (20, 35), "uuid": (36, 36), "ipv4": (7, 15),
                 "email": (5, None), "uri": (2, None), "uri-reference": (0, None), "hostname": (1, None),
                 "ipv6": (2, 45), "duration": (3, None), "json-pointer": (0, None), "relative-json-pointer": (1, None),
                 "uri-template": (0, None),
                 "iri": (2, None), "iri-reference": (0, None)}


def format_length_implied(fmt: str, lmin: int, lmax: int | None) -> bool:
    """Whether every string of ``fmt`` has ``lmin``..``lmax`` code points (``lmax=None``: no maximum)."""
    lo, hi = FORMAT_LENGTH[fmt]
    return lmin <= lo and (lmax is None or (hi is not None and hi <= lmax))


# -- sound subsets of email / hostname under a maxLength too large for the exact product -----------
#: RFC 5321 §4.5.3.1.1: a local part has at most 64 octets (ASCII: code points)
EMAIL_LOCAL_MAX = 64
#: RFC 1035 §2.3.4: a label has at most 63 octets
LABEL_MAX = 63
#: most labels a subset allows (its automaton grows with every label, ~2 states per character)
SUBSET_MAX_LABELS = 16
#: labels a subset makes room for before it lengthens them (``www.example.co.uk`` has 4)
_SUBSET_PREFERRED_LABELS = 4
#: the dot-atom local part of ``email`` (its product with a length counter is exact)
EMAIL_LOCAL = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"


def label_regex(b: int, host: bool = False) -> str:
    """One host-name label of 1..``b`` letters, digits and inner hyphens (``label_regex(63)`` is the
    label of ``email``); with ``host``, none with "--" in positions 3-4 (:func:`_nr_ldh_label`;
    ``label_regex(63, host=True)`` is the label of ``hostname``)."""
    if host and b >= 5:
        return _nr_ldh_label(b)
    return "[A-Za-z0-9]" if b <= 1 else rf"[A-Za-z0-9](?:[A-Za-z0-9-]{{0,{b - 2}}}[A-Za-z0-9])?"


def _labels_shape(budget: int, min_labels: int) -> tuple[int, int]:
    """(most labels K, most characters per label b) with ``K*(b+1) <= budget`` (K labels and the K-1
    dots between them fit ``budget - 1``): room for :data:`_SUBSET_PREFERRED_LABELS` labels first,
    then labels as long as possible (at most :data:`LABEL_MAX`), then as many as fit (at most
    :data:`SUBSET_MAX_LABELS`). ``budget >= 2 * min_labels``."""
    b = min(LABEL_MAX, budget // _SUBSET_PREFERRED_LABELS - 1)
    if b < 1:
        b = max(1, budget // min_labels - 1)
    return min(SUBSET_MAX_LABELS, budget // (b + 1)), b


def hostname_subset(lmax: int) -> str | None:
    """A sound subset of ``hostname`` whose strings have at most ``lmax`` code points: 1..K labels of
    1..b characters with ``K*(b+1) - 1 <= lmax`` (:func:`_labels_shape`; labels as ``hostname``'s, no
    "--" in positions 3-4); every ``hostname`` string of at most K labels of at most b characters is
    in it. None when ``lmax < 1``."""
    if lmax < 1:
        return None
    k, b = _labels_shape(lmax + 1, 1)
    lab = label_regex(b, host=True)
    return lab if k == 1 else rf"{lab}(?:\.{lab}){{0,{k - 1}}}"


def email_subset_shape(lmax: int) -> tuple[int, int, int] | None:
    """(local-part length a, domain labels K, label length b) of the sound ``email`` subset for
    ``maxLength`` ``lmax``: a dot-atom of 1..a characters, ``@``, 2..K labels of 1..b characters,
    with ``a + 1 + K*b + (K-1) <= lmax``. ``a`` = a quarter of ``lmax`` up to the RFC 5321 limit
    of 64, the rest to the domain (:func:`_labels_shape`). None when ``lmax < 5`` (``a@b.c``)."""
    if lmax < 5:
        return None
    a = min(EMAIL_LOCAL_MAX, max(1, lmax // 4))
    k, b = _labels_shape(lmax - a, 2)
    return a, k, b


def email_domain_subset(k: int, b: int) -> str:
    """2..``k`` labels of 1..``b`` characters, dot-separated (the domain of :func:`email_subset_shape`)."""
    lab = label_regex(b)
    return rf"{lab}(?:\.{lab}){{1,{k - 1}}}"
