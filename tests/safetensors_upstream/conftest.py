"""safetensors' own tests, adapted (``tools/safetensors_suite.py``; README.md here).

They need torch (every file but two imports it): without torch the folder is not collected,
unless ``AWQ2_REQUIRE_TORCH=1``, which CI sets in its torch environment (``.ci/run``), where a
missing torch is a failure.  Each test runs in a folder of its own, holding the
``tests/data/`` the upstream tests write into, so nothing lands in the repository.  The tests
:data:`~tools.safetensors_suite.NOT_CLAIMED` lists are skipped, those
:data:`~tools.safetensors_suite.DIFFERENCES` lists expected to fail (strictly), each with its
reason; every other test must pass.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from tools.safetensors_suite import DIFFERENCES, NOT_CLAIMED

collect_ignore = ["pristine"]
if importlib.util.find_spec("torch") is None and os.environ.get("AWQ2_REQUIRE_TORCH") != "1":
    collect_ignore_glob = ["test_*.py"]


def _key(item: pytest.Item) -> str:
    """``file.py::Class::test`` of an item of this folder."""
    return "::".join([Path(item.path).name, *item.nodeid.split("::")[1:]])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(item.path).parent != here:
            continue
        key = _key(item)
        if key in NOT_CLAIMED:
            item.add_marker(pytest.mark.skip(reason=f"not claimed: {NOT_CLAIMED[key]}"))
        elif key in DIFFERENCES:
            reason = f"differs on purpose: {DIFFERENCES[key]}"
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))


@pytest.fixture(autouse=True)
def _in_a_folder_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The upstream tests write ``./tests/data/*.safetensors`` and ``./*.safetensors``."""
    (tmp_path / "tests" / "data").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
