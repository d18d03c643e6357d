"""JSON Schema → regex for the native engine (see :mod:`.compiler` and ``docs/json-schema.md``).

Public API::

    schema_to_regex(schema: dict | bool, options: CompileOptions | None = None) -> str
    json_object_regex(options: CompileOptions | None = None) -> str
    json_value_regex(options: CompileOptions | None = None, depth: int | None = None) -> str
    schema_to_grammar(schema, options=None) -> structgate.native.ir.Grammar   (rules, exact recursion)
    json_object_grammar(options=None) -> Grammar;  json_value_grammar(options=None) -> Grammar

Building blocks (regex text): ``STRING``, ``JSON_CHAR``, ``JSON_NUMBER``, ``JSON_INTEGER``,
``NEVER``, ``FORMAT_REGEX``, ``LENIENT_ANNOTATIONS``, ``UNASSERTED_FORMATS``; ``integer_range(lo, hi)``, ``number_range(lo, lo_excl, hi, hi_excl)``.
"""
from ._charset import JSON_CHAR, STRING, json_char_regex, literal_string_regex
from ._numeric import JSON_INTEGER, JSON_NUMBER, integer_range, number_range
from .compiler import (FORMAT_REGEX, LENIENT_ANNOTATIONS, NEVER, UNASSERTED_FORMATS, check_schema, json_object_grammar,
                       json_object_regex, json_value_grammar, json_value_regex, schema_to_grammar, schema_to_regex)

__all__ = ["check_schema", "schema_to_regex", "json_object_regex", "json_value_regex", "schema_to_grammar",
           "json_object_grammar", "json_value_grammar", "STRING", "JSON_CHAR",
           "JSON_NUMBER", "JSON_INTEGER", "NEVER", "FORMAT_REGEX", "LENIENT_ANNOTATIONS", "UNASSERTED_FORMATS", "integer_range",
           "number_range",
           "json_char_regex", "literal_string_regex"]
