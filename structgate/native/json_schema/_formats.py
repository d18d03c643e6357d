"""``format`` regexes (RFC 3339 dates/times, UUID, IPv4, e-mail, RFC 3986 URIs, RFC 1123 host
names) and the format policy tables of the JSON Schema compiler (see ``docs/json-schema.md``)."""
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
# RFC 3986 URI / URI-reference (section 3 and 4.1 ABNF), ASCII spelling only (no \u escapes, no
# IP-literal hosts: a sound subset). A userinfo/host/port split is enforced after "//", so
# "http://a:b" (port not digits) is excluded; a relative-ref's first segment has no ":" so it can
# never be read as a scheme.
_UNRES = r"A-Za-z0-9._~\-"
_SUBD = r"!$&'()*+,;="
_PCT = rf"%{_HEX}{{2}}"
_PCHAR = rf"(?:[{_UNRES}{_SUBD}:@]|{_PCT})"
_SEG_NZ_NC = rf"(?:[{_UNRES}{_SUBD}@]|{_PCT})+"
_AUTHORITY = (rf"(?:(?:[{_UNRES}{_SUBD}:]|{_PCT})*@)?(?:[{_UNRES}{_SUBD}]|{_PCT})*(?::[0-9]*)?")
_ABEMPTY = rf"(?:/{_PCHAR}*)*"
_QF = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_URI = (rf"[A-Za-z][A-Za-z0-9+.\-]*:(?://{_AUTHORITY}{_ABEMPTY}|/(?:{_PCHAR}+{_ABEMPTY})?"
        rf"|{_PCHAR}+{_ABEMPTY}|){_QF}")
_RELATIVE_REF = (rf"(?://{_AUTHORITY}{_ABEMPTY}|/(?:{_PCHAR}+{_ABEMPTY})?|{_SEG_NZ_NC}{_ABEMPTY}|)"
                 rf"{_QF}")
FORMAT_REGEX = {
    "date": _date(),
    "time": _TIME,
    "date-time": _date() + "[Tt]" + _TIME,
    "uuid": f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "ipv4": rf"{_OCTET}(?:\.{_OCTET}){{3}}",
    "email": rf"{_ATEXT}+(?:\.{_ATEXT}+)*@{_LABEL}(?:\.{_LABEL})+",
    "uri": _URI,
    "uri-reference": f"(?:{_URI}|{_RELATIVE_REF})",
    # RFC 1123 host name: dot-separated labels of 1-63 letters, digits, hyphens, no hyphen at either
    # end (the 253-character total is not enforced: a regular bound would multiply the states)
    "hostname": rf"{_LABEL}(?:\.{_LABEL})*",
}
#: formats that ``options.extra["formats"] == "lenient"`` leaves as annotations (JSON Schema 2020-12's
#: default; the JSTS "only an annotation by default" tests): asserting them is what users of
#: constrained decoding and the MaskBench labels expect (llguidance and XGrammar assert them too)
LENIENT_ANNOTATIONS = frozenset({"uri", "uri-reference", "hostname"})
#: decoded length range of each format's strings (to drop a length bound the format already meets)
FORMAT_LENGTH = {"date": (10, 10), "uuid": (36, 36), "ipv4": (7, 15)}
