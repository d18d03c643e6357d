"""``dependentRequired`` (and array-valued ``dependencies``) triggers that constrain nothing. An
unlisted trigger is never generated as an extra key (docs/json-schema.md: a sound subset), but one
whose dependents are all required anyway, an empty list first of all, constrains nothing, and
leaving it out rejected valid objects: JSON-Schema-Test-Suite ``dependentRequired.json`` /
``dependencies.json`` "empty dependents", ``{"bar": 2}`` against ``{"dependentRequired": {"bar":
[]}}``. Oracle: ``jsonschema``; every text is either accepted exactly when it is valid (``exact``)
or, where the documented subset applies, at least never accepted when invalid."""
from __future__ import annotations

import json

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint
from structgate.native.backend import NativeBackend

D7 = "http://json-schema.org/draft-07/schema#"
TEXTS = ['{"bar": 2}', '{"foo": 1, "bar": 2}', '{"foo": 1}', '{}', '{"bar": 2, "foo": 1}', '{"baz": 1, "bar": 2}']
CASES = [
    # (schema, additional_properties, texts whose verdict must equal the oracle's)
    ({"dependentRequired": {"bar": []}}, False, TEXTS),
    ({"$schema": D7, "dependencies": {"bar": []}}, False, TEXTS),
    ({"dependentRequired": {"bar": [], "foo": []}}, True, TEXTS),
    ({"required": ["foo"], "dependentRequired": {"bar": ["foo"]}}, True,
     ['{"foo": 1, "bar": 2}', '{"bar": 2}', '{"foo": 1}', '{"foo": 1, "baz": 1, "bar": 2}']),
    # foo needs baz, which is required: foo is vacuous; bar needs foo, which is not: bar is not
    # (never generated, so the objects with bar are checked for soundness only)
    ({"required": ["baz"], "dependentRequired": {"bar": ["foo"], "foo": ["baz"]}}, True,
     ['{"baz": 1, "foo": 1}', '{"baz": 1}', '{"foo": 1}', '{"baz": 1, "bar": 2}']),
    # not vacuous: the documented subset (bar is never generated as an extra): sound only
    ({"dependentRequired": {"bar": ["foo"]}}, True, ['{"foo": 1}', '{}']),
]


@pytest.mark.parametrize("schema, addl, exact", CASES, ids=[json.dumps(c[0])[:70] for c in CASES])
def test_vacuous_triggers_are_ordinary_extra_keys(llama3_vocab, schema, addl, exact):
    g = NativeBackend(llama3_vocab, additional_properties=addl).compile(Constraint.json_schema(schema))
    valid = jsonschema.validators.validator_for(schema)(schema).is_valid
    got = {t: accepts(g, llama3_vocab, t) for t in TEXTS + exact}
    unsound = [t for t, ok in got.items() if ok and not valid(json.loads(t))]
    assert not unsound, f"accepted though invalid: {unsound}"
    wrong = [t for t in exact if got[t] != valid(json.loads(t))]
    assert not wrong, f"verdicts differ from jsonschema's: {wrong}"
