"""The compiler's own jsonschema checks (``enum`` values against their siblings, finite ``allOf``
members, ``oneOf`` overlaps) read the normalised document, which is in 2020-12 form everywhere, so
a subschema's ``$schema`` must not switch them to another draft's validator. It did: jsonschema's
``evolve`` picks the stock class a subschema's ``$schema`` names, and an ``anyOf``/``oneOf``
copies its siblings, ``$schema`` included, into each branch, so a draft-4 root's ``maximum: 0,
exclusiveMaximum: true`` (normalised to ``exclusiveMaximum: 0``) was read by draft 4's validator
as no bound, and ``1`` was accepted (a break-it finding, 2026-12-06). Oracle: the validator of
the schema's declared draft, over the instances below."""
from __future__ import annotations

import json

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint
from structgate.errors import InvalidConstraintError
from structgate.native.backend import NativeBackend

D4 = "http://json-schema.org/draft-04/schema#"
CASES = [
    {"$schema": D4, "maximum": 0, "exclusiveMaximum": True, "anyOf": [{"enum": [1, 0, -1]}]},
    {"$schema": D4, "minimum": 0, "exclusiveMinimum": True, "oneOf": [{"enum": [-1, 0, 1]}]},
    {"$schema": D4, "maximum": 5, "exclusiveMaximum": True, "anyOf": [{"enum": [5, 6, 4]}, {"type": "string"}]},
    {"$schema": D4, "type": "array", "items": [{"maximum": 2, "exclusiveMaximum": True}],
     "anyOf": [{"enum": [[1], [2], [3]]}]},
    # an embedded draft-4 resource under a 2020-12 root
    {"$defs": {"b": {"$schema": D4, "id": "http://example.com/b", "maximum": 3, "exclusiveMaximum": True,
                     "anyOf": [{"enum": [2, 3, 4]}]}},
     "$ref": "http://example.com/b"},
]
TEXTS = ["-1", "0", "1", "2", "3", "4", "5", "6", "[1]", "[2]", "[3]", '"s"']


@pytest.mark.parametrize("schema", CASES, ids=[json.dumps(c)[:70] for c in CASES])
def test_branch_checks_read_the_normalised_document(llama3_vocab, schema):
    valid = jsonschema.validators.validator_for(schema)(schema).is_valid
    if schema.get("$ref"):  # the embedded resource: its own draft's validator
        sub = schema["$defs"]["b"]
        valid = jsonschema.validators.validator_for(sub)(sub).is_valid
    want = {t for t in TEXTS if valid(json.loads(t))}
    try:
        g = NativeBackend(llama3_vocab).compile(Constraint.json_schema(schema))
    except InvalidConstraintError:
        assert not want, f"refused as matching nothing, but valid: {sorted(want)}"
        return
    got = {t for t in TEXTS if accepts(g, llama3_vocab, t)}
    assert got == want
