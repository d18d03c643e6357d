"""A small language corpus every backend is checked against (:class:`structgate.testing.BackendConformance`).

Each :class:`CorpusEntry` is a constraint with three kinds of strings, written from the
specification (Python ``re.fullmatch`` for regexes, JSON Schema draft 2020-12 via ``jsonschema``
with structgate's default policy: declared property order, no extra keys, up to 4 whitespace
characters between JSON tokens):

* ``accept``: complete outputs; every backend must accept their tokens and then allow EOS;
* ``dead``: outputs no correct mask lets generation reach (some prefix is not completable);
* ``live``: proper prefixes of some valid output that are not themselves complete (EOS must be
  forbidden after them, and generation must be able to continue).

structgate's own tests check the corpus against those oracles (``tests/test_conformance.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..backends.interface import Constraint

__all__ = ["CorpusEntry", "CORPUS", "corpus_by_id"]


@dataclass(frozen=True)
class CorpusEntry:
    """One constraint and its accept / dead / live strings.

    Attributes
    ----------
    id : str
        Stable name (used in test ids and in ``deviations``).
    kind : str
        Constraint kind.
    value : object
        Constraint value (regex text, schema dict, choice tuple, Lark text, None).
    accept, dead, live : tuple[str, ...]
    grammar_format : str | None
    oracle : str
        ``"re"``, ``"jsonschema"``, ``"choice"``, ``"json"`` or ``"manual"``: how the strings were
        checked.
    """

    id: str
    kind: str
    value: object
    accept: tuple[str, ...] = ()
    dead: tuple[str, ...] = ()
    live: tuple[str, ...] = ()
    grammar_format: str | None = None
    oracle: str = "manual"
    tags: tuple[str, ...] = field(default=())

    def constraint(self) -> Constraint:
        if self.kind == "grammar":
            return Constraint.grammar(self.value, self.grammar_format)
        return Constraint(self.kind, self.value)


CORPUS: tuple[CorpusEntry, ...] = (
    # --- choice ---------------------------------------------------------------------------------
    CorpusEntry("choice-prefixes", "choice", ("ab", "abc", "b", "yes"), accept=("ab", "abc", "b", "yes"),
                dead=("a b", "abcd", "c", "yess", "ba"), live=("a", "ye"), oracle="choice"),
    CorpusEntry("choice-unicode", "choice", ("中文", "é", "😀!"), accept=("中文", "é", "😀!"),
                dead=("éé", "中中", "😀?"), live=("中", "😀"), oracle="choice"),
    CorpusEntry("choice-json-like", "choice", ('{"a": 1}', "[1, 2]", "null"), accept=('{"a": 1}', "[1, 2]", "null"),
                dead=('{"a":1}', "nul l", "[1,2]"), live=('{"a"', "nu"), oracle="choice"),
    # --- regex ----------------------------------------------------------------------------------
    CorpusEntry("regex-digits", "regex", r"[0-9]{2,4}", accept=("12", "123", "0000"), dead=("1a", "12345"),
                live=("1",), oracle="re"),
    CorpusEntry("regex-alternation-overlap", "regex", r"(ab|abc)d?", accept=("ab", "abc", "abd", "abcd"),
                dead=("abdd", "ac", "abcdd"), live=("a",), oracle="re"),
    CorpusEntry("regex-star-suffix", "regex", r"(ab)*abc", accept=("abc", "ababc", "abababc"),
                dead=("abcab", "aba b", "abcc"), live=("ab", "abab", "a"), oracle="re"),
    CorpusEntry("regex-email-ish", "regex", r"[a-z]+@[a-z]+\.(com|org)", accept=("foo@bar.com", "a@b.org"),
                dead=("foo@@bar.com", "@bar.com", "foo@bar.net"), live=("foo@", "foo@bar", "foo@bar.co"),
                oracle="re"),
    CorpusEntry("regex-unicode-class", "regex", r"[^\u0980-\u09FF]+", accept=("abc", "中文", "é😀"),
                dead=("\u0985", "a\u09ff"), live=(), oracle="re"),
    CorpusEntry("regex-optional-tail", "regex", r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", accept=("0", "-12", "3.25", "10"),
                dead=("01", "--1", "1.2.", "-a"), live=("-", "1.", "-3."), oracle="re"),
    # --- json_schema ----------------------------------------------------------------------------
    CorpusEntry("schema-object-required", "json_schema",
                {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                 "required": ["name", "age"]},
                accept=('{"name": "ab", "age": 12}', '{"name":"","age":-1}', '{ "name": "x", "age": 0 }'),
                dead=('{"age": 1, "name": "a"}', '{"name": "a"}x', '{"name": 1', '{"name": "a", "age": 1.5}',
                      '{"name": "a", "age": 1, "x": 2}'),
                live=('{"name": "a"', '{"name": "a", "age": 1', '{'), oracle="jsonschema"),
    CorpusEntry("schema-string-length", "json_schema", {"type": "string", "minLength": 1, "maxLength": 3},
                accept=('"a"', '"abc"', '"中文"'), dead=('""', '"abcd"'), live=('"', '"ab'), oracle="jsonschema"),
    CorpusEntry("schema-enum", "json_schema", {"enum": ["red", "green", 3, None]},
                accept=('"red"', '"green"', "3", "null"), dead=('"blue"', "4", '"re"d'), live=('"gr', "nu"),
                oracle="jsonschema"),
    CorpusEntry("schema-array", "json_schema",
                {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2},
                accept=("[true]", "[true, false]", "[false,true]"), dead=("[]", "[true, true, true]", "[1]"),
                live=("[true", "[true,", "["), oracle="jsonschema"),
    CorpusEntry("schema-anyof", "json_schema", {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
                accept=("12", '"ab"', '""', "-7"), dead=('"abc"', "1.5", "true"), live=('"a', "-"),
                oracle="jsonschema"),
    CorpusEntry("schema-const-nested", "json_schema",
                {"type": "object", "properties": {"v": {"const": "x"}, "n": {"type": "null"}}, "required": ["v"]},
                accept=('{"v": "x"}', '{"v": "x", "n": null}'), dead=('{"v": "y"}', '{"n": null}'),
                live=('{"v": "x"',), oracle="jsonschema"),
    # --- json_object ------------------------------------------------------------------------------
    CorpusEntry("json-object", "json_object", None, accept=("{}", '{"a": [1, {"b": null}]}', '{"k": "v"}'),
                dead=("[]", "1", '{"a" 1}', "{}}"), live=("{", '{"a": [1'), oracle="json"),
    # --- grammar (Lark syntax: native / llguidance / XGrammar all read it) -------------------------
    CorpusEntry("lark-arith", "grammar", 'start: expr\nexpr: term ("+" term)*\nterm: /[0-9]+/ | "(" expr ")"\n',
                accept=("1", "1+2", "(1+2)+30", "((7))"), dead=("+1", "1)", "1++2"),
                live=("1+", "(1", "(("), grammar_format="lark", oracle="manual"),
)


def corpus_by_id() -> dict[str, CorpusEntry]:
    """``{entry.id: entry}``."""
    return {e.id: e for e in CORPUS}
