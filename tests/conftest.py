"""Shared fixtures. Keep this small; module-specific fixtures live in their test files."""
from __future__ import annotations

import json
import os
import pathlib

import pytest
from hypothesis import settings

# CI runs the property tests on a fixed example sequence (a red CI means a regression, not a new
# random find); locally they explore (HYPOTHESIS_PROFILE=explore or unset CI).
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "explore"))

TESTS = pathlib.Path(__file__).parent
DATA = TESTS / "data"


@pytest.fixture(scope="session")
def llama3_vocab():
    """The bundled Llama 3 vocabulary (128,256 tokens) with its encoder."""
    from structgate import load_vocabulary

    return load_vocabulary("llama3")


@pytest.fixture(scope="session")
def field_cases():
    """The field cases (tests/data/cases/round1.jsonl, copied from shared/cases) as a list of dicts."""
    path = DATA / "cases" / "round1.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
