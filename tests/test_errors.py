"""Typed errors: messages name the problem and the position."""
from structgate.errors import (BackendUnavailableError, CompileLimitError, GrammarSyntaxError, StructgateError,
                               UnsupportedFeatureError)


def test_syntax_error_caret_points_at_position():
    e = GrammarSyntaxError("multiple repeat", "foo**", 4, where="/pattern")
    text = str(e)
    assert "multiple repeat at position 4 in /pattern" in text
    lines = text.splitlines()
    assert lines[-2].strip() == "foo**"
    assert lines[-1].index("^") == lines[-2].index("foo**") + 4
    assert isinstance(e, ValueError) and isinstance(e, StructgateError)


def test_other_errors_name_what_and_where():
    assert "allOf" in str(UnsupportedFeatureError("allOf", "cannot intersect", where="/properties/a"))
    assert "/properties/a" in str(UnsupportedFeatureError("allOf", where="/properties/a"))
    e = CompileLimitError("max_dfa_states", 50001, 50000)
    assert "max_dfa_states" in str(e) and "50000" in str(e)
    assert "pip install x" in str(BackendUnavailableError("x", "not installed", "pip install x"))
