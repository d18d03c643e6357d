"""The pluggy registry: built-ins through the entry-point path, third-party registration, errors."""
import pytest

from structgate.backends import registry
from structgate.backends.interface import Backend, CompiledGrammar, Constraint
from structgate.errors import BackendNotFoundError, BackendUnavailableError, ConstraintKindError, GrammarSyntaxError
from structgate.vocab import Vocabulary


def test_builtins_come_through_the_entry_point_group():
    import importlib.metadata

    eps = importlib.metadata.entry_points(group="structgate")
    assert "structgate" in {ep.name for ep in eps}
    names = registry.backend_names()
    for n in ("native", "structgate-xgrammar", "structgate-llguidance", "structgate-outlines-core"):
        assert n in names


def test_names_do_not_collide_with_vllm_builtins():
    vllm_names = {"auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer"}
    assert not vllm_names & set(registry.backend_names(include_aliases=True))


def test_listing_has_version_and_availability():
    infos = {i.name: i for i in registry.list_backends()}
    assert infos["native"].available and infos["native"].version
    d = infos["native"].as_dict()
    assert set(d) >= {"name", "version", "available", "reason", "install_hint"}


def test_unknown_backend_error_lists_names():
    with pytest.raises(BackendNotFoundError) as ei:
        registry.get_backend("nope", None)
    assert "native" in str(ei.value) and "nope" in str(ei.value)


def test_unavailable_backend_gives_install_hint():
    registry.register_backend(registry.BackendSpec(name="ghost", factory="ghost_engine:Backend",
                                                    requires=("ghost_engine_not_installed",),
                                                    install_hint="pip install ghost-engine"))
    try:
        info = {i.name: i for i in registry.list_backends()}["ghost"]
        assert not info.available and "not installed" in info.reason
        with pytest.raises(BackendUnavailableError, match="pip install ghost-engine"):
            registry.get_backend("ghost", None)
    finally:
        registry._reset_for_tests()


def test_constraint_kinds_checked_and_schema_text_parsed():
    vocab = Vocabulary([b"a", b""], eos_token_ids=[1])

    class OnlyRegex(Backend):
        name = "only-regex"
        supported_kinds = frozenset({"regex"})

        def _compile(self, constraint) -> CompiledGrammar:  # pragma: no cover - never reached
            raise AssertionError

    with pytest.raises(ConstraintKindError, match="does not support constraint kind 'choice'"):
        OnlyRegex(vocab).compile(Constraint.choice(["a"]))
    assert Constraint.json_schema('{"type": "integer"}').value == {"type": "integer"}
    with pytest.raises(GrammarSyntaxError, match="not valid JSON"):
        Constraint.json_schema('{"type": ')
    with pytest.raises(ValueError):
        Constraint("nonsense", "x")


def test_bad_constraints_and_options_are_typed_for_every_backend():
    """Review finding: adapters compiled str(None) as a regex; bad options were plain ValueErrors."""
    from structgate.errors import InvalidConstraintError

    for make in (lambda: Constraint.regex(None), lambda: Constraint.regex(b"a"), lambda: Constraint("foo", "a"),
                 lambda: Constraint.choice([]), lambda: Constraint.choice([1]),
                 lambda: Constraint.json_schema(b"\xff")):
        with pytest.raises(InvalidConstraintError):
            make()
    from structgate.backends.interface import CompileOptions

    for bad in ({"whitespace": "bogus"}, {"max_whitespace": "x"}, {"compile_timeout_s": "x"},
                {"max_rollback_tokens": -2}):
        with pytest.raises(InvalidConstraintError):
            CompileOptions().updated(**bad)


def test_unsatisfiable_schema_is_named_as_such():
    from structgate.errors import InvalidConstraintError

    vocab = Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])
    backend = registry.get_backend("native", vocab)
    for schema in ({"enum": []}, {"type": "array", "minItems": 3, "maxItems": 2}):
        with pytest.raises(InvalidConstraintError, match="matches nothing"):
            backend.compile(Constraint.json_schema(schema))
        with pytest.raises(InvalidConstraintError, match="matches nothing"):  # found by the cheap check too
            backend.validate(Constraint.json_schema(schema))


@pytest.mark.parametrize("schema,parts", [
    ({"type": "integer", "minimum": 5, "maximum": 1}, ["/ (maximum, minimum, type)"]),
    (False, ["/ (false)"]),
    ({"type": "object", "properties": {"a": {"type": "string", "minLength": 5, "maxLength": 2},
                                       "b": {"type": "integer", "minimum": 3, "maximum": 1}}, "required": ["b"]},
     ["/properties/a (maxLength, minLength, type)", "/properties/b (maximum, minimum, type)"]),
    ({"type": "array", "items": False, "minItems": 1}, ["/items (false)"]),
    ({"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}, ["$ref cycle"]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": False}, "required": ["a"],
      "dependentRequired": {"a": ["b"]}}, ["/properties/b (false)"]),
    # was "unsupported: minProperties ... (3 properties need 3 keys beyond the 0 listed ones ...)"
    ({"type": "object", "minProperties": 3, "maxProperties": 1}, ["/ (maxProperties, minProperties, type)"]),
    ({"type": "object", "properties": {"a": {"type": "object", "minProperties": 2, "maxProperties": 1}},
      "required": ["a"]}, ["/properties/a (maxProperties, minProperties, type)"]),
])
def test_unsatisfiable_schema_names_the_parts_that_admit_no_value(schema, parts, llama3_vocab):
    """Regression: an unsatisfiable schema said only "the grammar matches nothing: rule 'root'
    cannot produce any string", a rule the user never wrote, with no keyword or pointer."""
    from structgate.errors import InvalidConstraintError

    backend = registry.get_backend("native", llama3_vocab)
    with pytest.raises(InvalidConstraintError) as ei:
        backend.compile(Constraint.json_schema(schema))
    msg = str(ei.value)
    assert "JSON Schema matches nothing" in msg and "rule 'root'" not in msg, msg
    for part in parts:
        assert part in msg, msg



@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": False}, "dependentRequired": {"a": ["b"]}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": False}, "dependencies": {"a": ["b"]}},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False,
     "dependentRequired": {"a": ["b"]}},
    {"type": "object", "properties": {"x": {}, "a": {}, "b": {}, "c": False},
     "dependentRequired": {"x": ["a"], "a": ["b"], "b": ["c"]}},
])
def test_a_trigger_whose_dependent_cannot_appear_is_forbidden_not_the_schema(schema, llama3_vocab):
    """Regression: dependentRequired made a possible trigger's dependents required outright, so a
    dependent that can never appear made the whole (satisfiable) schema "match nothing"; such a
    trigger is now left out, exactly (oracle: jsonschema)."""
    import json

    import jsonschema

    val = (jsonschema.Draft7Validator if "dependencies" in schema else jsonschema.Draft202012Validator)(schema)
    g = registry.get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    for inst in ({}, {"a": 1}, {"b": 1}, {"x": 1}, {"a": 1, "b": 1}, {"x": 1, "a": 1, "b": 1}, {"c": 1}):
        m = g.matcher()
        got = m.advance(llama3_vocab.encode(json.dumps(inst))) and m.is_accepting()
        if set(inst) <= set(schema["properties"]):  # keys it lists (extra keys follow native's policy)
            assert got == val.is_valid(inst), inst
        else:
            assert not got or val.is_valid(inst), inst
    assert val.is_valid({})
