"""Typed errors: messages name the problem and the position."""
import pytest

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


def _caret_points_at(e: GrammarSyntaxError) -> str:
    """The shown text from the caret's column on (the two last lines of the message)."""
    shown, caret = str(e).splitlines()[-2:]
    assert caret.strip() == "^"
    return shown[caret.index("^"):]


def test_syntax_error_shows_a_window_of_a_long_pattern():
    """Regression: a 32 KB regex gave a 64 KB message (the whole pattern, then a caret line as wide)."""
    pattern = "a" * 20_000 + "(?<x" + "b" * 12_000
    e = GrammarSyntaxError("bad group", pattern, 20_000)
    text = str(e)
    assert len(text) < 400, len(text)
    assert _caret_points_at(e).startswith("(?<x" + "b" * 20)
    shown = text.splitlines()[-2]
    assert shown.strip().startswith("...a") and shown.endswith("b...")
    assert shown.count("a") == GrammarSyntaxError.CARET_CONTEXT
    # errors at the very start / end: no elision on the side that has nothing
    assert str(GrammarSyntaxError("x", "q" * 500, 0)).splitlines()[-2].strip().startswith("q")
    end = GrammarSyntaxError("unexpected end", "q" * 500, 500)
    assert _caret_points_at(end) == "" and not end.caret().splitlines()[0].endswith("...")


def test_syntax_error_in_a_multi_line_text_shows_its_line():
    """Regression: a multi-line grammar was flattened into one line (newlines as \\n) with the caret at
    column 2,511; now the error's line alone is shown, and the message says which line."""
    lines = [f"rule{i} ::= [a-z]+ | \"x{i}\"" for i in range(200)]
    lines[123] = "rule123 ::= [a-z]+ | \"x123"
    text = "\n".join(lines)
    pos = text.index("\"x123")
    e = GrammarSyntaxError("unterminated string", text, pos)
    assert e.line_col() == (124, lines[123].index("\"x123") + 1)
    assert "at position %d (line 124, column %d)" % (pos, e.line_col()[1]) in str(e)
    assert str(e).splitlines()[-2].strip() == lines[123]
    assert _caret_points_at(e) == "\"x123"
    # a front end that already names the line in `where` is not told twice
    g = GrammarSyntaxError("unterminated string", text, pos, where="line 124, column 22")
    assert str(g).count("line 124") == 1


def test_syntax_error_caret_stays_aligned_after_control_characters():
    e = GrammarSyntaxError("bad", "a\tb\x01c)d", 5)
    assert _caret_points_at(e) == ")d"
    assert "\\t" in str(e) and "\\x01" in str(e)


def test_messages_that_repeat_their_input_stay_bounded():
    """Regression: the caret was windowed but the message was not: a 30,000-character group name or
    rule name came back whole in the message (30 KB 400s)."""
    from structgate.errors import MAX_MESSAGE, InvalidConstraintError

    name = "a" * 30_000
    e = GrammarSyntaxError(f"bad character in group name {name + '-b'!r}", "(?P<" + name + "-b>x)", 4, where="r" * 9_000)
    assert len(str(e)) < 1_000 and "-b'" in str(e) and "characters]" in str(e)
    u = UnsupportedFeatureError("x" * 50_000, "y" * 50_000, where="/" + "z" * 50_000)
    assert len(str(u)) < 1_000 and u.where.endswith("z")
    assert len(str(InvalidConstraintError("q" * 100_000))) <= MAX_MESSAGE
    assert len(str(CompileLimitError("max_dfa_states", 1, 0, hint="h" * 100_000))) <= MAX_MESSAGE


def test_control_characters_of_the_input_are_escaped_in_messages():
    """Regression: a property name holding terminal escape codes reached the terminal raw (the
    text turned red) and a newline split the JSON pointer across lines."""
    from structgate.errors import InvalidConstraintError

    e = GrammarSyntaxError("invalid type ['strin']", '"strin"', 0, where="/properties/x\x1b[31mRED\x1b[0m\ny/type")
    assert "\x1b" not in str(e) and "\\x1b[31m" in str(e) and "\\ny/type" in str(e)
    u = UnsupportedFeatureError("\x00bad", where="/a\x1b")
    assert "\x00" not in str(u) and "\x1b" not in str(u)
    i = InvalidConstraintError("line one\nline two \x1b[2J")  # newlines of a message are kept
    assert str(i) == "line one\nline two \\x1b[2J"


def test_many_long_unsatisfiable_parts_stay_bounded(llama3_vocab):
    from structgate import Constraint, get_backend
    from structgate.errors import MAX_MESSAGE, InvalidConstraintError

    names = [f"{i:02d}" + "n" * 3000 for i in range(60)]
    schema = {"anyOf": [{"type": "object", "properties": {n: {"type": "integer", "minimum": 5, "maximum": 1}},
                         "required": [n]} for n in names]}
    with pytest.raises(InvalidConstraintError) as ei:
        get_backend("native", llama3_vocab).validate(Constraint.json_schema(schema))
    msg = str(ei.value)
    assert len(msg) <= MAX_MESSAGE and msg.count("characters]") >= 3 and "more" in msg, msg


def test_native_errors_on_huge_names_are_bounded(llama3_vocab):
    from structgate import Constraint, get_backend

    be = get_backend("native", llama3_vocab)
    for c in (Constraint.regex("(?P<" + "a" * 30_000 + "-b>x)"), Constraint.grammar("root ::= " + "r" * 30_000, "gbnf"),
              Constraint.grammar("r" * 30_000 + ' ::= "a" @\nroot ::= "b"\n', "gbnf")):
        try:
            be.validate(c)
        except GrammarSyntaxError as e:
            assert len(str(e)) < 1_000, len(str(e))
            assert str(e).splitlines()[-1].strip() == "^"
        else:
            raise AssertionError(f"accepted {c.value[:40]!r}")


def test_end_of_a_text_ending_with_a_newline_points_after_its_last_line():
    """Regression: 'got the end of the grammar' in a file ending with a newline (most files) showed
    an empty line with the caret under nothing."""
    text = 'root ::= "x"\nrule ::= ( "a"\n'
    e = GrammarSyntaxError("expected ')'", text, len(text), where="line 3, column 1")
    assert str(e).splitlines()[-2].strip() == 'rule ::= ( "a"'
    assert _caret_points_at(e) == ""  # just after the line's text
    assert str(e).splitlines()[-1].index("^") == str(e).splitlines()[-2].index('( "a"') + 5


def test_caret_counts_terminal_columns_of_wide_characters():
    """The caret is placed by display width: CJK and emoji take two columns (UAX #11)."""
    import unicodedata

    text = "漢字" * 5 + "😀" + "é" + ")" + "q"
    e = GrammarSyntaxError("unbalanced parenthesis", text, text.index(")"))
    shown, caret = str(e).splitlines()[-2:]
    cols = lambda t: sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in t)  # noqa: E731
    assert cols(caret[:caret.index("^")]) == cols(shown[:shown.index(")")])
    assert caret.index("^") == 4 + 10 * 2 + 2 + 1


def test_json_decoding_messages_do_not_say_at_twice(llama3_vocab):
    from structgate import Constraint, get_backend

    with pytest.raises(GrammarSyntaxError) as ei:
        get_backend("native", llama3_vocab).validate(Constraint.json_schema('{"type": "obj'))
    assert "starting at position 9" in str(ei.value) and "at at" not in str(ei.value), str(ei.value)


def test_other_errors_name_what_and_where():
    assert "allOf" in str(UnsupportedFeatureError("allOf", "cannot intersect", where="/properties/a"))
    assert "/properties/a" in str(UnsupportedFeatureError("allOf", where="/properties/a"))
    e = CompileLimitError("max_dfa_states", 50001, 50000)
    assert "max_dfa_states" in str(e) and "50000" in str(e)
    assert "pip install x" in str(BackendUnavailableError("x", "not installed", "pip install x"))


def test_default_validate_counts_eos_after_termination_without_rolling_back_real_tokens():
    """Regression: the default Matcher.validate rolled back one real token per EOS accepted after
    termination (EOS on a terminated matcher changes nothing, rule 4)."""
    import numpy as np

    from structgate.backends.interface import Matcher
    from structgate.errors import MatcherStateError
    from structgate.vocab import Vocabulary

    vocab = Vocabulary([b"a", b""], eos_token_ids=[1])

    class OneA(Matcher):  # language {"a"}, minimal history-based matcher using only the base validate
        def __init__(self):
            self.vocab = vocab
            self.hist = []

        def _fill_row(self, row):
            row[:] = 0
            return True

        def is_accepting(self):
            return self.hist == ["a"]

        def is_terminated(self):
            return self.hist[-1:] == ["eos"]

        def advance(self, ids):
            ids = self._as_list(ids)
            saved = list(self.hist)
            for t in ids:
                if self.is_terminated():
                    if t != 1:
                        self.hist = saved
                        return False
                elif t == 0 and not self.hist:
                    self.hist.append("a")
                elif t == 1 and self.is_accepting():
                    self.hist.append("eos")
                else:
                    self.hist = saved
                    return False
            return True

        def rollback(self, n):
            if n > len(self.hist):
                raise MatcherStateError("too far")
            del self.hist[len(self.hist) - n:]

        def reset(self):
            self.hist = []

    m = OneA()
    assert m.advance([0, 1]) and m.is_terminated()
    assert m.validate([1, 1, 0]) == 2
    assert m.hist == ["a", "eos"]
    m.reset()
    assert m.validate([0, 1, 1]) == 3 and m.hist == []
    assert np.array_equal(m.allowed_token_ids(), [])


@pytest.mark.parametrize("make,construct", [
    (lambda pre: __import__("structgate.native.regex", fromlist=["parse_regex"]).parse_regex(pre + "(?=c)d"), "(?=c)d"),
    (lambda pre: __import__("structgate.native.regex", fromlist=["parse_regex"]).parse_regex(pre + r"(x)\1"), r"\1"),
    (lambda pre: __import__("structgate.native.json_schema._pattern", fromlist=["parse_pattern"])
     .parse_pattern(pre + "(?<=b)c", "/pattern"), "(?<=b)c"),
])
@pytest.mark.parametrize("pre", ["ab", "a" * 5_000])
def test_an_unsupported_construct_in_a_pattern_gets_a_caret(make, construct, pre):
    """Regression: an unsupported construct in a regex or schema pattern was reported by position
    in words only ('at position 2 of regex ...'); now with the caret display of a syntax error,
    windowed the same way, and kept through pickling (errors cross process boundaries)."""
    import pickle

    with pytest.raises(UnsupportedFeatureError) as ei:
        make(pre)
    e = ei.value
    assert _caret_points_at(e).startswith(construct[:4])
    assert len(str(e).splitlines()[-2]) <= 2 * GrammarSyntaxError.CARET_CONTEXT + 10
    assert "\n" not in e.message and e.message in str(e)
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is UnsupportedFeatureError and str(e2) == str(e) and e2.position == e.position


def test_a_relocated_unsupported_error_derives_its_message_again():
    """Regression: errors.rebuilt copied the inner error's ``message`` over the one derived from the
    new ``where``, so a nested error's ``message`` (what ``structgate check --json`` prints) still
    named the inner location while ``str()`` named the outer one."""
    from structgate.errors import nested_error

    e = UnsupportedFeatureError("lookahead (?=...)", "d", "/pattern", text="a(?=b)", position=1)
    n = nested_error(e, "structural_tag /format/json_schema")
    assert n.where == "structural_tag /format/json_schema/pattern"
    assert n.message == "unsupported: lookahead (?=...) at structural_tag /format/json_schema/pattern (d)"
    assert str(n).startswith(n.message + ":\n") and n.position == 1
    assert e.message == "unsupported: lookahead (?=...) at /pattern (d)"  # the inner error unchanged


@pytest.mark.parametrize("value", ["yes", b"yes"])
def test_choice_of_a_bare_string_is_refused(value):
    # found by a helper: Constraint.choice("abc") was the three choices "a", "b", "c"
    from structgate import Constraint
    from structgate.errors import InvalidConstraintError

    with pytest.raises(InvalidConstraintError, match="list of strings"):
        Constraint.choice(value)
    with pytest.raises(InvalidConstraintError, match="list of strings"):
        Constraint("choice", value)
    assert Constraint.choice(["yes"]).value == ("yes",)
