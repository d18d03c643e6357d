"""Number bounds past 2**53 compared with integer literals exactly (found by a helper: a bound was
taken at its shortest decimal spelling, so ``{"type": "integer", "maximum": 9.223372036854776E18}``
accepted 9223372036854775809 and ``{"minimum": 1e23, "maximum": 1e23}`` accepted 10**23, while the
double 1e23 is 99999999999999991611392).

Oracle: Python's ``json.loads`` (integer literals are exact ints, others doubles) and ``jsonschema``
(Draft 2020-12, exact int/float comparison). Every candidate near each bound's exact value and near
its decimal spelling is checked: native never accepts an invalid one, and accepts every valid
*integer literal* (decimals that round onto a moved bound and exponent forms are outside native's
number ranges by design: see ``_type_number.py``).
"""
from __future__ import annotations

import json
from decimal import Decimal

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.errors import CompileLimitError, GrammarSyntaxError, InvalidConstraintError

MAX = 1.7976931348623157e308
#: literals at the edge of the doubles: the largest double's digits, the midpoint to 2**1024 (the
#: first literal a parser reads as infinity), 2**1024, and tiny decimals a parser reads as 0
EDGE = [str(int(MAX)), str(2 ** 1024 - 2 ** 970), str(2 ** 1024 - 2 ** 970 - 1), str(2 ** 1024)]
EDGE += [f"{t}.{f}" for t in EDGE for f in ("0", "5")] + [f"-{t}" for t in EDGE]
EDGE += [f"{sign}0.{'0' * k}1" for k in (29, 30, 31, 40, 330) for sign in ("", "-")] + ["0.0", "0", "-0.5"]
BOUNDS = [2 ** 53 + 1, -(2 ** 53) - 1, 2 ** 63 - 1, 9.223372036854776e18, -9.223372036854776e18, 1e22, 1e23,
          -1e23, 1.2345678901234567e25, 2.0 ** 70, MAX, -MAX, 10 ** 400, -(10 ** 400), int(MAX) + 1,
          0.1, 5.0, -3, 0, 0.0, 5e-324, -5e-324, 1e-40]
KEYWORDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]


def _candidates(b) -> list[str]:
    exact = int(Decimal(b).to_integral_value(rounding="ROUND_FLOOR"))
    spelled = int(Decimal(repr(b)).to_integral_value(rounding="ROUND_FLOOR")) if isinstance(b, float) else exact
    ints = {v for c in (exact, spelled) for v in range(c - 2, c + 3)}
    out = [str(v) for v in sorted(ints)]
    out += [f"{v}.0" for v in sorted(ints)] + [f"{v}.5" for v in sorted(ints)]
    return out + EDGE


def _native_accepts(g, vocab, text: str) -> bool:
    m = g.matcher()
    return m.advance(vocab.encode(text)) and m.is_accepting()


def _schemas():
    for b in BOUNDS:
        for kw in KEYWORDS:
            for t in ("integer", "number"):
                yield {"type": t, kw: b}
        for t in ("integer", "number"):
            yield {"type": t, "minimum": b, "maximum": b}
    yield {"type": "number", "exclusiveMinimum": 1e22, "maximum": 1e23}
    yield {"type": "integer", "exclusiveMinimum": -1e23, "exclusiveMaximum": 2 ** 63 - 1}


SCHEMAS = list(_schemas())


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s) for s in SCHEMAS])
def test_integer_literals_exact_against_bounds(llama3_vocab, schema):
    v = jsonschema.Draft202012Validator(schema)
    bounds = [schema[k] for k in KEYWORDS if k in schema]
    texts = sorted({t for b in bounds for t in _candidates(b)})
    try:
        g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    except InvalidConstraintError:  # an empty range (integers between 0.1 and 0.1): no candidate valid
        assert not any(v.is_valid(json.loads(t)) for t in texts if "." not in t), schema
        return
    except CompileLimitError as e:  # an inclusive bound with over 200 fraction digits (5e-324): typed
        assert e.limit_name == "nesting_depth" and any(0 < abs(b) < 1e-200 for b in bounds), (schema, e)
        return
    for text in texts:
        ok = _native_accepts(g, llama3_vocab, text)
        valid = v.is_valid(json.loads(text))
        if ok:
            assert valid, f"accepted {text} against {schema}"
        elif valid and "." not in text:
            raise AssertionError(f"refused the valid integer literal {text} against {schema}")


@pytest.mark.parametrize("text", ['{"maximum": 1e400}', '{"minimum": -1e400}', '{"exclusiveMinimum": NaN}',
                                  '{"type": "integer", "maximum": Infinity}'])
def test_non_finite_bound_is_a_typed_error(llama3_vocab, text):
    # Python's json reads 1e400 as inf and accepts NaN/Infinity: the bound names its keyword
    with pytest.raises(GrammarSyntaxError, match="must be a number"):
        get_backend("native", llama3_vocab).compile(Constraint.json_schema(text))
