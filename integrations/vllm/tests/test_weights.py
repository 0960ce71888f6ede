"""Where a model folder's weights are (``awq2_vllm.weights.find_weights``): a link to nothing
in place of ``model.awq2`` or the set manifest (a download that did not finish) is named, with
its target, instead of "no weights" (issue 38, finding 17)."""

from __future__ import annotations

import pytest
from awq2_vllm.errors import PluginError
from awq2_vllm.weights import find_weights
from checkpoints import make


@pytest.mark.parametrize("name", ["model.awq2", "model.awq2.set.json"])
def test_a_dangling_link_is_named(tmp_path, name):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / name).symlink_to(tmp_path / "blobs" / "gone")
    with pytest.raises(PluginError) as caught:
        find_weights(folder)
    assert caught.value.code == "WEIGHTS_UNREADABLE"
    assert caught.value.where == str(folder / name)
    assert "which does not exist" in str(caught.value) and "gone" in str(caught.value)


def test_a_link_to_the_file_is_followed(tmp_path):
    _, served = make(tmp_path)
    folder = tmp_path / "linked"
    folder.mkdir()
    (folder / "model.awq2").symlink_to(served / "model.awq2")
    found = find_weights(folder)
    assert found.kind == "file" and found.path == folder / "model.awq2"
