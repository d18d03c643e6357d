#!/usr/bin/env bash
# Set up .venv (scripts/setup.sh) and run the test suite. This is what CI runs (.ci/run).
# Extra arguments go to pytest, e.g. bash scripts/test.sh -k native
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONHASHSEED=0
exec .venv/bin/python -m pytest -m "not slow" -p no:cacheprovider "$@"
