"""Shared fixtures. Keep this small; module-specific fixtures live in their test files."""
from __future__ import annotations

import json
import os
import pathlib

import pytest
from hypothesis import settings

# CI runs the property tests on a fixed example sequence (a red CI means a regression, not a new
# random find): scripts/test.sh sets HYPOTHESIS_PROFILE=ci, as does a set CI variable; plain pytest
# runs explore (HYPOTHESIS_PROFILE=explore).
# No per-example deadline: scripts/test.sh runs two workers on two cores, beside vLLM servers, so
# wall time per example says nothing about the code.
settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
settings.register_profile("explore", print_blob=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "explore"))

# The suite never reaches the Hugging Face Hub, and every test sees the same environment whatever ran
# before it in the same worker (building the embedded model sets HF_HUB_OFFLINE=1 in the process that
# builds it; vLLM's argument handling looks a model name that is not a folder up on the Hub).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

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


def pytest_collection_modifyitems(config, items):
    """Modules that start vLLM (marker ``vllm``: minutes each) run first, the rest in file order.

    scripts/test.sh hands whole files to two pytest-xdist workers in collection order
    (``--dist loadfile --no-loadscope-reorder``): with the long modules first, the short ones fill
    the end and both workers finish close together. The order of tests inside a module is kept.
    """
    def module(item):
        m = getattr(item, "module", None)
        return m.__name__ if m is not None else None

    long_modules = {module(i) for i in items if i.get_closest_marker("vllm") is not None} - {None}
    items.sort(key=lambda i: module(i) not in long_modules)  # stable: file order otherwise
