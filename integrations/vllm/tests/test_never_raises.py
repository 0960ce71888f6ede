"""``register()`` never raises, whatever vLLM is installed (issue 37): vLLM calls plugins
without a guard (``vllm/plugins/__init__.py``, ``load_general_plugins``), so an exception
would end every vLLM process, stock models included.  Each case runs in a fresh process with a
stand-in ``vllm`` package first on the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CALL = """
import logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
import awq2_vllm
awq2_vllm.register()
awq2_vllm.register()
print("register returned")
"""

#: A served release number whose internals are missing or broken, and a vLLM that cannot
#: even be imported.
CASES = {
    "internals missing": {"__init__.py": "__version__ = '0.33.0'\n"},
    "internals raise": {
        "__init__.py": "__version__ = '0.33.0'\n",
        "model_executor/__init__.py": "raise RuntimeError('broken install')\n",
    },
    "no version": {"__init__.py": ""},
    "import fails": {"__init__.py": "raise ImportError('libcuda.so.1: cannot open')\n"},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_register_logs_one_line_and_registers_nothing(tmp_path, case):
    for name, text in CASES[case].items():
        path = tmp_path / "vllm" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-c", CALL], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "register returned", done.stdout + done.stderr
    warnings = [x for x in lines if x.startswith("awq2_vllm:")]
    assert len(warnings) == 1, lines  # one line, even when called twice
    assert "not registered" in warnings[0] or "could not be registered" in warnings[0]
    assert "Traceback" not in done.stderr


def test_the_stand_in_is_what_the_child_imports(tmp_path):
    """The cases above test the stand-in, not the installed vLLM."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("__version__ = 'stand-in'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-c", "import vllm; print(vllm.__file__)"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert Path(done.stdout.strip()).parent == tmp_path / "vllm"
