"""structgate's numeric environment variables: one reader (``structgate._env``) for the native
engine's shared-walk budget, the plugin's grammar-cache bounds, compile timeout and validation
budget; a bad value is refused naming the variable and the value, an unset or blank one gives the
default."""
from __future__ import annotations

import pytest

from structgate._env import env_float, env_int
from structgate.plugin import bridge, validation


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
