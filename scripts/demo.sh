#!/usr/bin/env bash
# The README's first command: set up .venv (idempotent), then run the demo:
# `vllm serve` on the embedded tiny model with --structured-output-backend native, real structured
# requests, every output validated. Extra arguments go to `structgate demo`
# (e.g. --backend structgate-xgrammar, --schemas my.jsonl, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/structgate demo "$@"
