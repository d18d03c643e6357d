#!/usr/bin/env bash
# Set up .venv (scripts/setup.sh) and run the test suite. This is what CI runs (.ci/run).
# Extra arguments go to pytest, e.g. bash scripts/test.sh -k native
# Two pytest-xdist workers, whole files per worker (module-scoped vLLM servers start once):
# STRUCTGATE_TEST_WORKERS=0 runs in one process, as before.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONHASHSEED=0
# property tests on hypothesis' fixed example sequence (tests/conftest.py), whether or not CI is set
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
exec .venv/bin/python -m pytest -m "not slow" -p no:cacheprovider \
  -n "${STRUCTGATE_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
