"""``reference.safe_open`` of a file truncated after it was opened (issue 38, #12).

``safe_open`` maps the file; a page of the map past the file's new end kills the process
with SIGBUS when touched, so every call runs in a child process: it opens the file, cuts it,
calls each method once and prints the error code of each.  Every call must raise
``TRUNCATED`` (the child exits 0); a call that touched the map would kill the child
(exit status -SIGBUS), and one that returned would print ``returned``.  Before the fix the
child died of SIGBUS, or, with only the file's last 64 bytes cut (the index's tail and the
trailer; the map still covers that page, read as zeros), every call raised a false
``BAD_ENTRY_CHECKSUM``.

A slice taken before the cut reads by ``preadv``, never through the map: its rows still in
the file come back (``rows``), rows past the new end raise ``TRUNCATED``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reference
from reference.sets.setwriter import save_set

CHILD = r"""
import json, os, sys
import reference
from reference.ground.errors import FormatError

path, cut, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
member = sys.argv[4] if len(sys.argv) > 4 else path
codes = {}
calls = {
    "keys": lambda f: f.keys(),
    "metadata": lambda f: f.metadata(),
    "get_tensor": lambda f: f.get_tensor(name),
    "get_slice": lambda f: f.get_slice(name),
    "get_slice_again": lambda f: f.get_slice(name),
    "keys_again": lambda f: f.keys(),
}
with reference.safe_open(path, "np") as f:
    sliced = f.get_slice(name)
    last = sliced[-1:]
    os.truncate(member, cut)
    for what, call in calls.items():
        try:
            call(f)
            codes[what] = "returned"
        except FormatError as exc:
            codes[what] = exc.code
    try:
        same = (sliced[-1:] == last).all()
        codes["slice_taken_before"] = "rows" if same else "other rows"
    except FormatError as exc:
        codes["slice_taken_before"] = exc.code
print(json.dumps(codes))
"""

TENSORS = {
    "a": np.arange(64 * 1024, dtype=np.int32).reshape(256, 256),
    "b": np.ones((128, 64), np.float16),
}
METADATA = {"note": "cut"}
CALLS = ("keys", "metadata", "get_tensor", "get_slice", "get_slice_again", "keys_again")


def _run(*args: object) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-2000:]}"
    codes: dict[str, str] = json.loads(done.stdout)
    return codes


@pytest.mark.parametrize("cut", [0, 4096, "tail"], ids=["empty", "first-page", "index-tail"])
def test_every_call_on_a_file_cut_after_opening_is_truncated(tmp_path: Path, cut: object) -> None:
    path = tmp_path / "model.awq2"
    reference.save(path, TENSORS, METADATA)
    size = path.stat().st_size
    at = size - 64 if cut == "tail" else cut  # the index (the file's end) and the trailer
    codes = _run(path, at, "a")
    slice_taken_before = "rows" if cut == "tail" else "TRUNCATED"  # "a" ends before the cut
    assert codes.pop("slice_taken_before") == slice_taken_before
    assert codes == dict.fromkeys(CALLS, "TRUNCATED"), codes


def test_every_call_on_a_set_member_cut_after_opening_is_truncated(tmp_path: Path) -> None:
    members = save_set(tmp_path / "set", TENSORS, max_size=300_000, metadata=METADATA)
    assert len(members) == 2
    with reference.open(tmp_path / "set") as opened:
        assert opened.names() == ["a", "b"]
    holder = members[0]  # "a", first: each call reads it first
    with reference.open(holder) as first:
        assert first.names() == ["a"]
    codes = _run(tmp_path / "set", 0, "a", holder)
    assert codes.pop("slice_taken_before") == "TRUNCATED"
    assert codes == dict.fromkeys(CALLS, "TRUNCATED"), codes
