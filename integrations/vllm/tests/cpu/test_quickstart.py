"""The README's quick start, run as printed, start to finish, in a fresh virtual environment.

The README marks each block of its quick start with an HTML comment just before the fence,
``<!-- quickstart: NAME -->``: ``install``, ``convert`` and ``torch`` are run here, in that
order, as one shell script (the Python block is written to a file and run by the venv's
``python``) in an empty folder; ``serve`` is checked against the server that
``test_server.py`` starts, and ``serve-cpu`` and ``ask`` are run there as printed (starting
vLLM again here would only cost CI time).

What the README leaves to the reader is mapped, and nothing else is changed:

* ``path/to/awq-v2`` (the clone) is the ``awq_v2`` wheel ``ci.sh cpu`` built
  (``AWQ2_WHEELS``), or, run from a checkout, the checkout itself (pip builds the wheel);
* ``path/to/awq-checkpoint`` is a copy of the real AutoAWQ fixture
  ``tests/fixtures/real/autoawq_gemm_g128`` (its config, weights and tokenizer files:
  ``serving.checkpoint``);
* ``python3`` is this interpreter (a shim first on ``PATH``), so that the new venv is of the
  same Python as this one;
* torch: the README's ``pip install torch`` would download a build of torch at every CI run,
  so the venv is lent this environment's torch and what torch requires, and nothing else (a
  folder of links to those packages, on ``PYTHONPATH``): pip finds torch already there and
  installs nothing for it.  Everything else the wheel needs (NumPy, construct, safetensors,
  ml_dtypes, crc32c, tqdm) pip installs into the new venv from the package index, so a
  dependency missing from the wheel fails here.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from serving import CHECKOUT, HERE, checkpoint, commands, readme_blocks

RUN = ("install", "convert", "torch")
FIXTURE = "autoawq_gemm_g128"
SERVE_FLAGS = ["--quantization", "awq_v2", "--load-format", "awq_v2"]


def quickstart() -> dict[str, tuple[str, str]]:
    """name -> (language, text) of every marked block of the README, in order."""
    blocks = readme_blocks()
    assert list(blocks) == [*RUN, "serve", "serve-cpu", "ask"], list(blocks)
    return blocks


def _project() -> str:
    wheels = os.environ.get("AWQ2_WHEELS")
    if not wheels:
        return str(CHECKOUT)
    found = sorted(Path(wheels).glob("awq_v2-*.whl"))
    assert len(found) == 1, found
    return str(found[0])


def _lend_torch(folder: Path) -> Path:
    """A folder of links to torch and the packages it requires, from this environment."""
    folder.mkdir()
    todo, seen = ["torch"], set()
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        name = dist.metadata["Name"].lower().replace("_", "-")
        if name in seen or name in ("setuptools", "pip"):  # the venv has its own
            continue
        seen.add(name)
        for line in dist.requires or []:
            requirement, _, marker = line.partition(";")
            if "extra" not in marker:
                todo.append(re.split(r"[\s<>=!~\[(]", requirement.strip())[0])
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
            source = Path(dist.locate_file(top))
            if not top.endswith(".pth") and top != "__pycache__" and source.exists():
                (folder / top).symlink_to(source)
    assert {"torch", "sympy", "filelock"} <= seen, seen
    return folder


def test_the_readme_quick_start_runs_as_printed(tmp_path):
    blocks = quickstart()
    work = tmp_path / "work"
    work.mkdir()
    src = checkpoint(FIXTURE, tmp_path / "awq-checkpoint")
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "python3").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (shim / "python3").chmod(0o755)
    lent = _lend_torch(tmp_path / "lent")

    script = ["set -ex"]
    for name in RUN:
        lang, text = blocks[name]
        if lang == "python":
            (work / f"quickstart_{name}.py").write_text(text)
            text = f"python quickstart_{name}.py\n"
        else:
            assert lang == "sh", (name, lang)
        text = text.replace("path/to/awq-checkpoint", str(src))
        text = text.replace("path/to/awq-v2", _project())
        script += [f"echo '=== quickstart: {name}'", text]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{shim}{os.pathsep}{env['PATH']}", PYTHONPATH=str(lent))
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    log = done.stdout + "\n" + done.stderr
    (tmp_path / "quickstart.log").write_text(log)
    assert done.returncode == 0, log[-6000:]
    print(f"\nquick start: {done.stdout.strip().splitlines()[-1]}")

    out = dict(re.findall(r"^=== quickstart: (\S+)\n(.*?)(?=^=== quickstart: |\Z)",
                          done.stdout, re.M | re.S))  # fmt: skip
    venv = work / "venv"
    for script_name in ("awq2-convert", "awq2-dump", "awq2-conformance"):
        assert (venv / "bin" / script_name).is_file(), script_name
    dst = work / commands(blocks["convert"][1])[0][2]
    assert (dst / "model.awq2").is_file()
    config = json.loads((dst / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "awq_v2"
    assert "model.layers.0.mlp.down_proj" in out["convert"]
    assert re.search(r"^\d+ tensors; MARLIN \(\d+, \d+\) torch\.float16$", out["torch"], re.M)

    where = subprocess.run([str(venv / "bin" / "python"), "-c", _WHERE], env=env,
                           capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    found = json.loads(where.stdout)
    assert Path(found["reference"]).is_relative_to(venv), found
    assert Path(found["torch"]).is_relative_to(lent), found
    if os.environ.get("AWQ2_WHEELS"):
        assert ".whl" in found["direct_url"] and '"editable"' not in found["direct_url"], found


_WHERE = """import importlib.metadata, json, reference, torch
print(json.dumps({"reference": reference.__file__, "torch": torch.__file__,
                  "direct_url": importlib.metadata.distribution("awq-v2")
                  .read_text("direct_url.json") or ""}))"""


def test_the_readme_serves_what_test_server_serves():
    """The serving commands of the quick start: the folder the quick start converted, with the
    flags and the server ``test_server.py`` starts (vLLM's CPU build), and the vLLM release
    the plugin's ``cuda`` extra names."""
    blocks = quickstart()
    dst = commands(blocks["convert"][1])[0][2]
    install, serve = commands(blocks["serve"][1])
    (cpu,) = commands(blocks["serve-cpu"][1])
    assert serve == ["vllm", "serve", dst, *SERVE_FLAGS]
    assert cpu == ["VLLM_CPU_KVCACHE_SPACE=1", "python", "-m",
                   "vllm.entrypoints.openai.api_server", "--model", dst,
                   *SERVE_FLAGS]  # fmt: skip
    pins = (CHECKOUT / "integrations" / "vllm" / "pyproject.toml").read_text()
    assert install[:3] == ["pip", "install", "path/to/awq-v2/integrations/vllm"]
    assert install[3:] == ["vllm==0.33.0"] and 'cuda = ["vllm==0.33.0"]' in pins

    tree = ast.parse((HERE / "test_server.py").read_text())
    (cmd,) = [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "cmd" for t in node.targets)]  # fmt: skip
    words = [e.value if isinstance(e, ast.Constant) else None for e in cmd.elts]
    assert words[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", None], words
    assert words[5:9] == SERVE_FLAGS, words


@pytest.mark.parametrize("name", RUN)
def test_the_quick_start_blocks_name_only_what_the_test_maps(name):
    """A new placeholder in a run block would reach the shell unmapped: every ``path/to/``
    there is one the test maps."""
    text = quickstart()[name][1]
    assert set(re.findall(r"path/to/[\w.-]+", text)) <= {"path/to/awq-v2",
                                                          "path/to/awq-checkpoint"}  # fmt: skip
