"""How the loader reads one file (issue 37, item 5): the tensors it hands the model's own
``load_weights`` are views of a private map of the file, as safetensors' are (no buffer in
between, and a weight loader that writes into one never reaches the file); payload
checksums are checked on request (``AWQ2_VLLM_VERIFY=1``) and not otherwise, as neither vLLM
nor safetensors checks them.

Expected values come from the file itself, read here with ``hashlib`` and the reference
reader, never from the loader."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reference.examples import LlamaShape, write_checkpoint
from reference.format.reader import Reader
from reference.ground.errors import FormatError


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("load-path")
    v1 = write_checkpoint(tmp / "v1", LlamaShape())
    out = tmp / "served"
    subprocess.run([sys.executable, "-m", "reference.convert", str(v1), f"{out}/", "--quiet"],
                   check=True)  # fmt: skip
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_dense_tensors_are_views_of_a_private_map(served: Path) -> None:
    from awq2_vllm.loader import open_source

    file = served / "model.awq2"
    before = _sha(file)
    source = open_source(served, 0, 1)
    try:
        info = source.entry("model.embed_tokens.weight")
        ((name, first),) = source.tensors([info])
        ((_, second),) = source.tensors([info])
        with Reader(file) as reader:
            stored = torch.from_numpy(reader.tensor(name).copy())
        assert torch.equal(first, stored)
        assert first.data_ptr() == second.data_ptr()  # the same mapped pages, not two copies
        first.fill_(0)  # a weight loader writing into what it was handed
        assert torch.count_nonzero(second) == 0  # one mapping: the write is visible there
    finally:
        source.close()
    assert _sha(file) == before  # and never in the file
    with Reader(file) as reader:
        assert torch.equal(torch.from_numpy(reader.tensor(name).copy()), stored)


def _damaged(served: Path, tmp: Path, name: str) -> Path:
    copy = tmp / "damaged"
    shutil.copytree(served, copy)
    with Reader(copy / "model.awq2") as reader:
        offset = reader.entry(name).offset
    with open(copy / "model.awq2", "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x01]))
    return copy


@pytest.mark.parametrize("name", ["model.embed_tokens.weight",
                                  "model.layers.0.self_attn.o_proj.qweight"])  # fmt: skip
def test_verify_refuses_a_damaged_payload_only_when_asked(
    served: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    from awq2_vllm.loader import VERIFY_ENV, open_source

    damaged = _damaged(served, tmp_path, name)
    monkeypatch.delenv(VERIFY_ENV, raising=False)
    source = open_source(damaged, 0, 1)  # structure only: a flipped payload bit passes
    try:
        source.verify()
    finally:
        source.close()
    monkeypatch.setenv(VERIFY_ENV, "1")
    source = open_source(damaged, 0, 1)
    try:
        with pytest.raises(FormatError) as caught:
            source.verify()
    finally:
        source.close()
    assert caught.value.code == "BAD_TENSOR_CHECKSUM"
    with Reader(damaged / "model.awq2") as reader:
        assert caught.value.offset == reader.entry(name).offset


def test_a_whole_layer_for_the_cpu_build_is_lent_not_copied(served: Path) -> None:
    """``Source.lend``: the parameter keeps its identity and takes the file's bytes as its
    data, over the private map (two lends share the pages; a write never reaches the file)."""
    from awq2_vllm.loader import open_source

    file = served / "model.awq2"
    before = _sha(file)
    name = "model.layers.0.self_attn.o_proj.qweight"
    with Reader(file) as reader:
        stored = torch.from_numpy(reader.tensor(name).copy())
    source = open_source(served, 0, 1)
    try:
        info = source.entry(name)
        first = torch.nn.Parameter(torch.zeros_like(stored), requires_grad=False)
        second = torch.nn.Parameter(torch.zeros_like(stored), requires_grad=False)
        kept = first
        assert source.lend(info, first) and source.lend(info, second)
        assert first is kept and torch.equal(first.data, stored)
        assert first.data_ptr() == second.data_ptr()  # the mapped pages, not a copy
        assert source.bytes_read == 2 * info.length
        first.data.fill_(0)
    finally:
        source.close()
    assert torch.count_nonzero(second.data) == 0  # alive after close: the map outlives it
    assert _sha(file) == before


def test_a_set_lends_nothing(served: Path, tmp_path: Path) -> None:
    from awq2_vllm.loader import open_source

    split = tmp_path / "split"
    subprocess.run([sys.executable, "-m", "reference.convert", str(served), f"{split}/",
                    "--max-shard-size", "1MB", "--quiet"], check=True)  # fmt: skip
    source = open_source(split, 0, 1)
    try:
        info = source.entry("model.layers.0.self_attn.o_proj.qweight")
        param = torch.nn.Parameter(torch.zeros(info.shape, dtype=torch.int32),
                                   requires_grad=False)  # fmt: skip
        assert not source.lend(info, param)
        assert torch.count_nonzero(param.data) == 0 and source.bytes_read == 0
    finally:
        source.close()
