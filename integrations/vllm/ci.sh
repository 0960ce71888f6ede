#!/usr/bin/env bash
# The vLLM plugin's tests in a virtual environment of their own:
#   bash integrations/vllm/ci.sh DIR       (DIR: where the venv goes, outside the repository)
# Installs torch 2.14.0 (the exact version vLLM 0.33.0 pins), vllm==0.33.0 and pytest, then
# this project and the plugin (editable), printing the seconds each step took; then runs
# integrations/vllm/tests with that venv's python.  VLLM_TARGET_DEVICE=cpu selects vLLM's
# CpuPlatform (vllm/platforms/__init__.py:244): no GPU is needed.  AWQ2_REQUIRE_VLLM=1 makes a
# missing vLLM a failure rather than a skip.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dir="${1:?usage: ci.sh DIR}"
started=$SECONDS
if [ ! -x "$dir/bin/python" ]; then
  python3 -m venv "$dir"
  "$dir/bin/pip" install --quiet torch==2.14.0
  echo "torch: $((SECONDS - started)) s"
  "$dir/bin/pip" install --quiet vllm==0.33.0 pytest
  echo "vllm + pytest: $((SECONDS - started)) s"
fi
"$dir/bin/pip" install --quiet -e "$root" -e "$here"
echo "install: $((SECONDS - started)) s"
cd "$here"
VLLM_TARGET_DEVICE=cpu AWQ2_REQUIRE_VLLM=1 "$dir/bin/python" -m pytest -q -s \
  -o addopts="-ra --strict-markers" tests
