"""structgate's numeric environment variables and option values: one reader (``structgate._env``)
for the native engine's shared-walk budget, the plugin's grammar-cache bounds, compile timeout and
validation budget, the engines' integer and bool extras and the CLI's numbers; a bad value is refused
naming the variable or option and the value, an unset or blank one gives the default. Text is ASCII
decimal only (Python's ``int()`` reads ``"٣"`` as 3 and ``"1_0"`` as 10)."""
from __future__ import annotations

import sys

import pytest

from structgate._env import env_float, env_int
from structgate.plugin import bridge, validation


def _byte_vocab():
    """A vocabulary of the 256 single bytes and an EOS (id 256)."""
    from structgate.vocab import Vocabulary

    return Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])


@pytest.mark.parametrize("raw", [None, "", "  "])
def test_unset_or_blank_gives_the_default(monkeypatch, raw):
    if raw is None:
        monkeypatch.delenv("SG_TEST_N", raising=False)
    else:
        monkeypatch.setenv("SG_TEST_N", raw)
    assert env_int("SG_TEST_N", 7) == 7
    assert env_float("SG_TEST_N", 0.5) == 0.5


def test_values_parse_and_bounds_hold(monkeypatch):
    monkeypatch.setenv("SG_TEST_N", " 12 ")
    assert env_int("SG_TEST_N", 0) == 12 and env_float("SG_TEST_N", 0.0) == 12.0
    for raw, minimum in (("abc", 0), ("1.5", 0), ("-1", 0), ("0", 1)):
        monkeypatch.setenv("SG_TEST_N", raw)
        with pytest.raises(ValueError) as e:
            env_int("SG_TEST_N", 0, minimum=minimum, unit="bytes")
        assert "$SG_TEST_N" in str(e.value) and repr(raw) in str(e.value) and "bytes" in str(e.value)
    for raw in ("abc", "nan", "inf"):
        monkeypatch.setenv("SG_TEST_N", raw)
        with pytest.raises(ValueError, match=r"\$SG_TEST_N must be a number of seconds"):
            env_float("SG_TEST_N", 0.0)
    monkeypatch.setenv("SG_TEST_N", "-0.5")
    with pytest.raises(ValueError, match=">= 0"):
        env_float("SG_TEST_N", 0.0, minimum=0)


def test_the_plugin_variables_use_it(monkeypatch):
    monkeypatch.setenv(bridge.ENV_CACHE_BYTES, "0")
    with pytest.raises(ValueError, match=bridge.ENV_CACHE_BYTES):
        bridge.cache_limits()
    monkeypatch.setenv(bridge.ENV_CACHE_BYTES, "4096")
    monkeypatch.setenv(bridge.ENV_CACHE_ENTRIES, "3")
    assert bridge.cache_limits() == (3, 4096)
    monkeypatch.setenv(validation.ENV_BUDGET, "0.25")
    assert validation.budget_s() == 0.25
    monkeypatch.setenv(validation.ENV_BUDGET, "soon")
    with pytest.raises(ValueError, match=validation.ENV_BUDGET):
        validation.budget_s()


# -- text is ASCII decimal only: Python's int()/float() also take other scripts' digits and "_" ----

NOT_ASCII_DECIMAL = ["٣", "１２", "1_0", "1_000", "", " ", "0x10", "1e3", "3.0", "inf", "nan", "+", "--1"]


@pytest.mark.parametrize("raw", NOT_ASCII_DECIMAL)
def test_int_text_takes_ascii_decimal_only(raw):
    from structgate._env import int_text, int_value

    with pytest.raises(ValueError):
        int_text(raw)
    assert int_value(raw) is None


@pytest.mark.parametrize("raw, want", [("7", 7), (" +7 ", 7), ("-12", -12), ("007", 7)])
def test_int_text_values(raw, want):
    from structgate._env import int_text, int_value

    assert int_text(raw) == want == int(raw)  # the same number Python reads
    assert int_value(raw) == want


@pytest.mark.parametrize("raw", ["٣", "1_0", "0x10", "inf", "-inf", "nan", "", "1e", ".", "1.2.3"])
def test_float_text_refuses(raw):
    from structgate._env import float_text

    with pytest.raises(ValueError):
        float_text(raw)


@pytest.mark.parametrize("raw", ["1", "-0.5", "2e-3", ".5", "5.", "+1E+2", " 3 "])
def test_float_text_values(raw):
    from structgate._env import float_text

    assert float_text(raw) == float(raw)


@pytest.mark.parametrize("v, want", [(3, 3), (1e3, 1000), (-1.0, -1), (True, None), (1.5, None),
                                     (float("inf"), None), (float("nan"), None), (None, None), ([1], None)])
def test_int_value_of_json_values(v, want):
    from structgate._env import int_value

    assert int_value(v) == want


def test_variables_refuse_other_digits(monkeypatch):
    for raw in ("٣", "1_0"):
        monkeypatch.setenv("SG_TEST_N", raw)
        with pytest.raises(ValueError, match=r"\$SG_TEST_N"):
            env_int("SG_TEST_N", 0)
        with pytest.raises(ValueError, match=r"\$SG_TEST_N"):
            env_float("SG_TEST_N", 0.0)


@pytest.mark.parametrize("raw", ["٣", "1_0", "1e3", "3.0", float("inf"), True, "many"])
@pytest.mark.parametrize("option", ["compile_cache_size", "max_regex_size", "compile_processes", "row_budget_bytes"])
def test_native_integer_options_refuse_non_integers(option, raw):
    """Each of native's integer extras is refused naming the option (``"1e3"`` used to escape as a
    bare ValueError from ``int()``, ``"٣"`` and ``"1_0"`` used to be read as 3 and 10)."""
    from structgate.errors import InvalidConstraintError
    from structgate.native.backend import NativeBackend

    with pytest.raises(InvalidConstraintError, match=repr(option)):
        NativeBackend.check_options({option: raw})


def test_native_integer_options_are_ints_inside(llama3_vocab):
    """A text or integral-float value is read once, and the compilers see an int."""
    from structgate.native.backend import NativeBackend

    b = NativeBackend(llama3_vocab, max_regex_size=" 5000 ", max_product_states=2e3)
    assert b.options.extra["max_regex_size"] == 5000 and type(b.options.extra["max_regex_size"]) is int
    assert b.options.extra["max_product_states"] == 2000 and type(b.options.extra["max_product_states"]) is int


@pytest.mark.parametrize("raw", ["٣", "1_0"])
def test_worker_count_refuses_other_digits(monkeypatch, raw):
    from structgate.errors import InvalidConstraintError
    from structgate.worker_pool import worker_count

    kw = dict(engine="native", option="compile_processes", env="SG_TEST_PROCS", in_process="x", maximum=32)
    with pytest.raises(InvalidConstraintError, match="compile_processes"):
        worker_count(raw, **kw)
    monkeypatch.setenv("SG_TEST_PROCS", raw)
    with pytest.raises(InvalidConstraintError, match=r"\$SG_TEST_PROCS"):
        worker_count(None, **kw)


@pytest.mark.parametrize("raw", ["٣", "1_0", "nan", "inf"])
def test_cli_numbers_refuse_other_digits(raw):
    import argparse

    from structgate.cli.argtypes import int_in, number_in

    with pytest.raises(argparse.ArgumentTypeError):
        int_in(0)(raw)
    with pytest.raises(argparse.ArgumentTypeError):
        number_in(0)(raw)


@pytest.mark.parametrize("backend, option, raw", [
    ("structgate-xgrammar", "xgrammar_indent", "two"),
    ("structgate-xgrammar", "xgrammar_indent", -1),
    ("structgate-xgrammar", "xgrammar_any_order", "false"),
    ("structgate-llguidance", "llguidance_lenient", "no"),
    ("structgate-llguidance", "llguidance_coerce_one_of", 2),
    ("structgate-outlines-core", "outlines_max_recursion_depth", "abc"),
    ("structgate-outlines-core", "outlines_max_recursion_depth", "٣"),
    ("structgate-outlines-core", "outlines_allow_inexact", "false"),
    ("structgate-outlines-core", "outlines_whitespace_pattern", 5),
])
def test_adapter_extras_are_checked(backend, option, raw):
    """Each adapter's extras are checked by value, at startup (``check_option_values``) and by the
    constructor: a text ``"false"`` used to switch a bool option on, and ``"abc"`` failed each
    compile with a bare ValueError."""
    from structgate.backends.registry import check_option_values, get_backend
    from structgate.errors import InvalidConstraintError

    with pytest.raises(InvalidConstraintError, match=repr(option)):
        check_option_values(backend, {option: raw})
    vocab = _byte_vocab()
    with pytest.raises(InvalidConstraintError, match=repr(option)):
        get_backend(backend, vocab, **{option: raw})


# -- break-it findings on option values (2026-12-07) ------------------------------------------------

@pytest.mark.parametrize("kw, needle", [
    ({"additional_properties": "false"}, "additional_properties"),  # used to mean true
    ({"additional_properties": 2}, "additional_properties"),
    ({"step_timeout_s": float("nan")}, "step_timeout_s"),
    ({"cache_size_bytes": 2 ** 64}, "cache_size_bytes"),  # xgrammar: an untyped TypeError
    ({"max_whitespace": 10 ** 30}, "max_whitespace"),  # engines: errors blaming the schema
    ({"max_dfa_states": "many"}, "max_dfa_states"),
])
def test_compile_options_refuse_bad_values(kw, needle):
    from structgate.backends.interface import CompileOptions
    from structgate.errors import InvalidConstraintError

    with pytest.raises(InvalidConstraintError, match=needle):
        CompileOptions(**kw)


def test_compile_options_take_integers_as_the_extras_do():
    """A field takes what an integer extra takes (an integral float, ASCII decimal text), as an int."""
    from structgate.backends.interface import CompileOptions

    o = CompileOptions(max_dfa_states=1e5, max_whitespace="3", additional_properties=1)
    assert (o.max_dfa_states, o.max_whitespace, o.additional_properties) == (100000, 3, True)
    assert type(o.max_dfa_states) is int and type(o.additional_properties) is bool


@pytest.mark.parametrize("option, raw", [("max_regex_size", -1), ("compile_cache_size", -5), ("max_product_states", 2 ** 40),
                                         ("row_budget_bytes", -2)])
def test_native_integer_options_are_bounded(option, raw):
    from structgate.errors import InvalidConstraintError
    from structgate.native.backend import NativeBackend

    with pytest.raises(InvalidConstraintError, match=repr(option)):
        NativeBackend.check_options({option: raw})


def test_adapter_integer_extras_are_bounded():
    """``outlines_max_recursion_depth=1e300`` used to pass every check and raise OverflowError at
    compile."""
    from structgate.backends.registry import check_option_values
    from structgate.errors import InvalidConstraintError

    with pytest.raises(InvalidConstraintError, match="outlines_max_recursion_depth"):
        check_option_values("structgate-outlines-core", {"outlines_max_recursion_depth": 1e300})


@pytest.mark.parametrize("timeout", [1e18, float("inf")])
def test_a_far_compile_deadline_is_no_limit_in_a_worker(timeout):
    """``compile_timeout_s=1e18`` or ``inf`` with compile worker processes: the wait is capped at
    ``threading.TIMEOUT_MAX`` (it raised OverflowError from ``Future.result``)."""
    from structgate import Constraint
    from structgate.backends.registry import get_backend

    vocab = _byte_vocab()
    be = get_backend("native", vocab, compile_processes=1, compile_timeout_s=timeout)
    m = be.compile(Constraint("regex", "a+b")).matcher()
    assert m.advance([ord("a"), ord("b")]) and m.is_final()


def test_shared_walks_variable_is_checked_at_startup(monkeypatch):
    """``$STRUCTGATE_SHARED_WALKS_BYTES`` is read when the engine's pushdown module is imported,
    lazily at a first compile: the startup check reads it too (a server used to start healthy and
    answer every structured request with an empty HTTP 500)."""
    from structgate.plugin.bridge import check_backend_options

    monkeypatch.delenv("STRUCTGATE_BACKEND_OPTIONS", raising=False)
    monkeypatch.setenv("STRUCTGATE_SHARED_WALKS_BYTES", "abc")
    with pytest.raises(ValueError, match="STRUCTGATE_SHARED_WALKS_BYTES"):
        check_backend_options("native")


def test_a_broken_third_party_engine_does_not_block_the_startup(monkeypatch, caplog):
    """Another installed engine whose module fails at import with something other than an
    ImportError (a driver check), or whose check_options has a bug, is logged and skipped: the
    server's own backend starts (it used to raise that RuntimeError / KeyError)."""
    from structgate.backends import registry
    from structgate.backends.interface import Backend
    from structgate.plugin.bridge import check_backend_options

    class KeyErrorBackend(Backend):
        name = "sg-test-keyerror"
        supported_kinds = frozenset({"regex"})

        @classmethod
        def check_options(cls, options):
            return options["missing"]

    mod = type(sys)("sg_test_broken_engine")

    def __getattr__(name):
        raise RuntimeError("CUDA driver version is insufficient")

    mod.__getattr__ = __getattr__
    monkeypatch.setitem(sys.modules, "sg_test_broken_engine", mod)
    monkeypatch.delenv("STRUCTGATE_BACKEND_OPTIONS", raising=False)
    try:
        registry.register_backend(registry.BackendSpec(name="sg-test-keyerror", factory=KeyErrorBackend,
                                                       kinds=("regex",)))
        registry.register_backend(registry.BackendSpec(name="sg-test-broken", factory="sg_test_broken_engine:Backend",
                                                       kinds=("regex",)))
        with caplog.at_level("WARNING", logger="structgate.plugin"):
            check_backend_options("native")
        text = caplog.text
        assert "sg-test-keyerror" in text and "sg-test-broken" in text and "CUDA driver" in text, text
    finally:
        registry._extra[:] = [s for s in registry._extra if not s.name.startswith("sg-test-")]
        registry._specs = None


def test_numpy_and_enum_values_are_taken_as_plain_values():
    """numpy integers and bools and IntEnum members are integers and bools like any other (a
    second break-it: ``additional_properties=np.bool_(True)`` and ``max_dfa_states=np.int64(...)``
    were refused), and are stored as plain ``int`` / ``bool``."""
    import enum

    import numpy as np

    from structgate.backends.interface import CompileOptions
    from structgate.native.backend import NativeBackend

    class E(enum.IntEnum):
        B = 3

    o = CompileOptions(additional_properties=np.bool_(True), max_whitespace=E.B, max_dfa_states=np.int64(1000),
                       threads=np.uint8(2), step_timeout_s="0.5")
    assert (o.additional_properties, o.max_whitespace, o.max_dfa_states, o.threads, o.step_timeout_s) == \
        (True, 3, 1000, 2, 0.5)
    assert type(o.max_whitespace) is int and type(o.max_dfa_states) is int and type(o.additional_properties) is bool
    assert NativeBackend.parse_options({"compile_cache_size": np.int64(3)})[0] == 3


def test_max_whitespace_is_bounded():
    """llguidance's adapter keeps a vocabulary row per run length and outlines-core expands
    ``{0,n}``: ``max_whitespace=10**6`` passed every check and then exhausted memory or never
    compiled."""
    from structgate.backends.interface import MAX_WHITESPACE, CompileOptions
    from structgate.errors import InvalidConstraintError

    assert CompileOptions(max_whitespace=MAX_WHITESPACE).max_whitespace == MAX_WHITESPACE
    with pytest.raises(InvalidConstraintError, match="max_whitespace"):
        CompileOptions(max_whitespace=MAX_WHITESPACE + 1)


def test_worker_count_message_shows_the_value_given():
    from structgate.errors import InvalidConstraintError
    from structgate.worker_pool import worker_count

    with pytest.raises(InvalidConstraintError) as ei:
        worker_count(1e300, engine="native", option="compile_processes", env="SG_TEST_PROCS", in_process="x",
                     maximum=32)
    assert "got 1e+300" in str(ei.value) and len(str(ei.value)) < 200


# -- third break-it: one reader for every timeout, any real number type --------------------------------

@pytest.mark.parametrize("raw", ["inf", " Infinity ", "-inf", "0", "-1", "2.5", "1e400"])
def test_compile_timeout_variable_reads_what_the_option_reads(monkeypatch, raw):
    """``$STRUCTGATE_COMPILE_TIMEOUT_S=inf`` was refused while ``compile_timeout_s`` took ``inf`` (no
    limit): the variable and the option read the same text the same way
    (``structgate._env.seconds_value``)."""
    from structgate.backends.interface import CompileOptions

    monkeypatch.delenv("STRUCTGATE_BACKEND_OPTIONS", raising=False)
    monkeypatch.setenv(bridge.ENV_COMPILE_TIMEOUT, raw)
    got = bridge.backend_options()["compile_timeout_s"]
    assert got == CompileOptions(compile_timeout_s=raw).compile_timeout_s
    assert bridge.check_backend_options("native")["compile_timeout_s"] == got


@pytest.mark.parametrize("raw", ["nan", "soon", "1_0", "٣", "infinite", "0x10"])
def test_timeout_variable_and_option_refuse_alike(monkeypatch, raw):
    from structgate.backends.interface import CompileOptions
    from structgate.errors import InvalidConstraintError

    monkeypatch.setenv(bridge.ENV_COMPILE_TIMEOUT, raw)
    with pytest.raises(ValueError, match=bridge.ENV_COMPILE_TIMEOUT):
        bridge.backend_options()
    with pytest.raises(InvalidConstraintError, match="compile_timeout_s"):
        CompileOptions(compile_timeout_s=raw)
    monkeypatch.setenv(validation.ENV_BUDGET, raw)
    with pytest.raises(ValueError, match=validation.ENV_BUDGET):
        validation.budget_s()


def test_validation_budget_takes_inf_as_no_bound(monkeypatch):
    """``$STRUCTGATE_VALIDATE_BUDGET_S``, the other time-limit variable, reads ``inf`` as unbounded too
    (it was refused), and an unbounded run installs no tracer."""
    monkeypatch.setenv(validation.ENV_BUDGET, "inf")
    assert validation.budget_s() == float("inf")
    seen = []
    assert validation.run_with_deadline(lambda: seen.append(sys.gettrace()), float("inf")) is True
    assert seen == [sys.gettrace()]


def _reals():
    from decimal import Decimal
    from fractions import Fraction

    import numpy as np

    return [(Decimal("0.5"), 0.5), (Fraction(1, 2), 0.5), (np.float32(0.5), 0.5), (np.int64(3), 3.0), (7, 7.0),
            (Decimal("Infinity"), float("inf")), (Decimal("1e400"), float("inf")), (10 ** 400, float("inf")),
            (Fraction(-(10 ** 400)), float("-inf")), ("2e-3", 0.002), ("INF", float("inf"))]


@pytest.mark.parametrize("i", range(11))
def test_timeouts_take_any_real_number(i):
    """The timeouts took ``Fraction`` but refused ``Decimal`` (not a ``numbers.Real``); a number of
    any real type is taken now and stored as a float (a Decimal deadline would have raised TypeError
    in ``time.monotonic() + limit``); one past a float's range is ``inf``, no limit."""
    from structgate.backends.interface import CompileOptions

    v, want = _reals()[i]
    o = CompileOptions(compile_timeout_s=v, step_timeout_s=v)
    assert o.compile_timeout_s == want == o.step_timeout_s
    assert type(o.compile_timeout_s) is float and type(o.step_timeout_s) is float


def test_decimal_timeouts_compile_and_run():
    from decimal import Decimal

    from structgate import Constraint
    from structgate.backends.registry import get_backend

    vocab = _byte_vocab()
    for kw in ({}, {"compile_processes": 1}):
        be = get_backend("native", vocab, compile_timeout_s=Decimal("30"), step_timeout_s=Decimal("2.5"), **kw)
        m = be.compile(Constraint("regex", "a+b")).matcher()
        assert m.advance([ord("a"), ord("b")]) and m.is_final()


@pytest.mark.parametrize("bad", ["Decimal('NaN')", "Decimal('sNaN')", "float('nan')", "True", "np.bool_(False)",
                                 "None", "1j", "'nan'", "[1]"])
def test_timeouts_refuse_what_is_not_a_number_of_seconds(bad):
    from decimal import Decimal  # noqa: F401 - used by eval
    import numpy as np  # noqa: F401

    from structgate.backends.interface import CompileOptions
    from structgate.errors import InvalidConstraintError

    with pytest.raises(InvalidConstraintError, match="step_timeout_s"):
        CompileOptions(step_timeout_s=eval(bad))


def test_integer_options_take_integral_reals_of_any_type():
    """As the timeouts: an integral ``Decimal`` or ``Fraction`` is an integer (a ``Decimal("5")`` was
    refused, a ``Fraction`` of 400 digits raised OverflowError from ``float()``)."""
    from decimal import Decimal
    from fractions import Fraction

    from structgate._env import int_value, option_int
    from structgate.backends.interface import CompileOptions
    from structgate.errors import InvalidConstraintError

    o = CompileOptions(max_dfa_states=Decimal("1000"), max_whitespace=Fraction(6, 2))
    assert (o.max_dfa_states, o.max_whitespace) == (1000, 3) and type(o.max_dfa_states) is int
    assert option_int({"k": Decimal("4.0")}, "k", engine="e") == 4
    for bad in (Decimal("1.5"), Decimal("NaN"), Decimal("sNaN"), Decimal("Infinity"), Fraction(1, 2)):
        assert int_value(bad) is None
    assert int_value(Decimal("1e999999999")) is None  # (no int of a billion digits)
    with pytest.raises(InvalidConstraintError, match="max_dfa_states"):
        CompileOptions(max_dfa_states=Fraction(10 ** 400))
    with pytest.raises(InvalidConstraintError, match="'outlines_max_recursion_depth'"):
        from structgate.backends.registry import check_option_values

        check_option_values("structgate-outlines-core", {"outlines_max_recursion_depth": Fraction(10 ** 400)})


# --- a later break-it: values too long to write, tiny limits, non-ASCII spaces, long JSON integers --
@pytest.mark.parametrize("value", [10**5000, -(10**5000), __import__("fractions").Fraction(10**5000, 3)],
                         ids=["int", "negative-int", "fraction"])
def test_values_too_long_to_write_are_refused_by_name(value):
    """Python refuses to write an integer of over 4,300 digits (``repr`` raises ``ValueError``): the
    message showed the value and so raised that instead of naming the option."""
    from structgate import CompileOptions, get_backend
    from structgate.errors import InvalidConstraintError

    with pytest.raises(InvalidConstraintError, match="max_dfa_states.*digits"):
        CompileOptions(max_dfa_states=value)
    with pytest.raises(InvalidConstraintError, match="inline_max_size.*digits"):
        get_backend("native", _byte_vocab(), inline_max_size=value)


@pytest.mark.parametrize("value", ["1e-400", "  1e-400\t", __import__("decimal").Decimal("1e-999999999"),
                                   __import__("fractions").Fraction(1, 10**400), 5e-324],
                         ids=["text", "spaced-text", "decimal", "fraction", "least-float"])
def test_a_tiny_positive_timeout_stays_a_limit(monkeypatch, value):
    """Below a float's least positive value a positive limit read as 0.0, which means no limit."""
    from structgate import CompileOptions
    from structgate._env import env_seconds, seconds_value

    assert seconds_value(value) > 0
    assert CompileOptions(compile_timeout_s=value).compile_timeout_s > 0
    if isinstance(value, str):
        monkeypatch.setenv("STRUCTGATE_COMPILE_TIMEOUT_S", value)
        assert env_seconds("STRUCTGATE_COMPILE_TIMEOUT_S", None) > 0
    assert seconds_value("-1e-400") <= 0 and seconds_value(0) == 0


@pytest.mark.parametrize("raw", ["\xa01\xa0", "\u20031", "1\u3000"])
def test_only_ascii_spaces_surround_a_number(monkeypatch, raw):
    from structgate import CompileOptions
    from structgate._env import float_text, int_text, seconds_value
    from structgate.errors import InvalidConstraintError

    with pytest.raises(ValueError):
        int_text(raw)
    with pytest.raises(ValueError):
        float_text(raw)
    assert seconds_value(raw) is None
    with pytest.raises(InvalidConstraintError, match="compile_timeout_s"):
        CompileOptions(compile_timeout_s=raw)
    monkeypatch.setenv("STRUCTGATE_COMPILE_TIMEOUT_S", raw)
    with pytest.raises(ValueError, match="STRUCTGATE_COMPILE_TIMEOUT_S"):
        bridge.backend_options()


def test_json_integers_too_long_to_read_are_syntax_errors(monkeypatch):
    """``json.loads`` raises a plain ``ValueError`` (not ``JSONDecodeError``) for an integer of over
    4,300 digits; every reader of JSON text now says where, in its own typed error."""
    import json

    from structgate import Constraint, get_backend
    from structgate._jsontext import loads
    from structgate.errors import GrammarSyntaxError

    big = "9" * 5000
    with pytest.raises(json.JSONDecodeError, match="5000 digits") as ei:
        loads('{"maxLength": ' + big + "}")
    assert ei.value.pos == 14
    with pytest.raises(GrammarSyntaxError, match="5000 digits"):
        Constraint.json_schema('{"type": "string", "maxLength": ' + big + "}")
    with pytest.raises(GrammarSyntaxError, match="5000 digits"):
        Constraint.json_schema(('{"minimum": -' + big + "}").encode())
    native = get_backend("native", _byte_vocab())
    tag = {"structures": [{"begin": "<f>", "schema": '{"maximum": ' + big + "}", "end": "</f>"}], "triggers": ["<f>"]}
    for text in (json.dumps(tag), '{"triggers": ["<f>"], "structures": [], "n": ' + big + "}"):
        with pytest.raises(GrammarSyntaxError, match="5000 digits"):
            native.compile(Constraint("structural_tag", text))
    monkeypatch.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"max_dfa_states": ' + big + "}")
    with pytest.raises(ValueError, match="STRUCTGATE_BACKEND_OPTIONS.*5000 digits"):
        bridge.backend_options()
