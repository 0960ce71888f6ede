"""The converter's servable model folder [CONV-1, CONV-2] and its threads [CONV-3].

Expected values come from the rule, not the code: the folder holds ``model.awq2``, the
source's ``config.json`` with only ``quantization_config`` changed, and every other top-level
regular file of the source except ``*.safetensors``, ``*.safetensors.index.json``,
``quant_config.json`` and ``*.awq2``; the group size and source format come from what each
fixture is (its name and README), and the bytes with N threads are the bytes with one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import tracemalloc
from pathlib import Path

import pytest

import reference
from reference.conversion import steps as steps_module
from reference.convert import convert, convert_folder
from reference.convert import main as convert_main
from reference.examples import LlamaShape, write_checkpoint
from reference.ground import hashing
from reference.sets import folder as folder_module
from reference.sets.folder import servable_quantization_config

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "real"
#: fixture -> (group size, source_format), from what each fixture is (tests/fixtures/real/README.md)
REAL = {
    "ct_awq_w4a16_asym_g128": (128, "compressed-tensors"),
    "autoawq_gemm_g128": (128, "awq"),
    "ct_w4a16_sym_g128": (128, "compressed-tensors"),
    "ct_w4a16_asym_g32": (32, "compressed-tensors"),
}
WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json", ".awq2")


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def _expected_copies(src: Path) -> set[str]:
    """The rule of CONV-1, applied to the source's listing."""
    return {
        p.name
        for p in src.iterdir()
        if p.is_file()
        and not p.is_symlink()
        and not p.name.endswith(WEIGHT_SUFFIXES)
        and p.name not in ("quant_config.json", "config.json")
    }


def _no_leftovers(parent: Path, name: str) -> bool:
    return not any(p.name.startswith(f".{name}.partial-") for p in parent.iterdir())


@pytest.mark.parametrize("fixture", sorted(REAL))
def test_folder_from_a_real_checkpoint_is_servable(tmp_path, fixture):
    """CONV-1: model.awq2 opens, config.json is the source's but for quantization_config,
    every other non-weight file is byte-identical, and the source is untouched."""
    src = FIXTURES / fixture
    before = _digests(src)
    dst = tmp_path / "served"
    assert convert_main([str(src), f"{dst}/", "--quiet"]) == 0
    group_size, source_format = REAL[fixture]

    with reference.open(dst / "model.awq2") as f:
        assert f.layers(), "the converted file has quantised layers"
        assert {f.entry(f"{p}.qweight").group_size for p in f.layers()} == {group_size}
    source_config = json.loads((src / "config.json").read_text())
    config = json.loads((dst / "config.json").read_text())
    assert config.pop("quantization_config") == {
        "quant_method": "awq_v2",
        "bits": 4,
        "group_size": group_size,
        "source_format": source_format,
    }
    source_config.pop("quantization_config")
    assert config == source_config
    assert list(config) == list(source_config)  # the other keys keep their order

    copies = _expected_copies(src)
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json"} <= copies
    assert {p.name for p in dst.iterdir()} == copies | {"model.awq2", "config.json"}
    for name in copies:
        assert (dst / name).read_bytes() == (src / name).read_bytes(), name
    assert _digests(src) == before
    assert _no_leftovers(tmp_path, "served")


def test_folder_into_an_existing_empty_folder(tmp_path):
    """CONV-1: an existing empty folder is a folder DST, with or without the trailing '/'."""
    src = FIXTURES / "autoawq_gemm_g128"
    dst = tmp_path / "empty"
    dst.mkdir()
    assert convert_main([str(src), str(dst), "--quiet"]) == 0
    assert (dst / "model.awq2").is_file() and (dst / "tokenizer.json").is_file()


def test_a_single_awq2_file_is_written_as_before(tmp_path):
    """CONV-1: a DST that is not a folder stays one .awq2 file (nothing else written)."""
    src = FIXTURES / "autoawq_gemm_g128"
    assert convert_main([str(src), str(tmp_path / "model.awq2"), "--quiet"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["model.awq2"]


@pytest.mark.parametrize(
    ("make_dst", "words"),
    [
        (lambda tmp, src: f"{tmp}/full/", "is a folder that is not empty"),
        (lambda tmp, src: f"{tmp}/afile/", "is an existing file"),
        (lambda tmp, src: f"{tmp}/afile", "is an existing file"),
        (lambda tmp, src: f"{src}/inside/", "is inside SRC"),
    ],
)
def test_folder_destinations_refused_before_anything_is_written(tmp_path, make_dst, words, capsys):
    """CONV-2: a non-empty folder is never replaced, a file is not a folder, and nothing is
    written inside the source; each is a usage error (exit 2) with nothing written."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "autoawq_gemm_g128", src)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_bytes(b"mine")
    (tmp_path / "afile").write_bytes(b"a file")
    before = {p.name for p in tmp_path.iterdir()}
    src_before = _digests(src)
    assert convert_main([str(src), make_dst(tmp_path, src), "--quiet"]) == 2
    assert words in capsys.readouterr().err
    assert {p.name for p in tmp_path.iterdir()} == before
    assert _digests(src) == src_before and not (src / "inside").exists()
    assert (tmp_path / "full" / "keep").read_bytes() == b"mine"


def test_folder_needs_a_source_folder_with_config(tmp_path, capsys):
    """CONV-1: a single .safetensors SRC, or a folder without config.json, has nothing to
    serve from: a usage error."""
    src = FIXTURES / "autoawq_gemm_g128"
    assert convert_main([str(src / "model.safetensors"), f"{tmp_path}/out/"]) == 2
    assert "needs a checkpoint folder" in capsys.readouterr().err
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(src / "model.safetensors", bare)
    assert convert_main([str(bare), f"{tmp_path}/out/"]) == 2
    assert "needs config.json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["converting", "copying"])
@pytest.mark.parametrize("jobs", [1, 3])
def test_a_failure_midway_leaves_no_folder(tmp_path, monkeypatch, where, jobs):
    """CONV-2: an error while layers are repacked, or while files are copied, leaves neither
    DST nor the temporary folder, and the source as it was."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "ct_awq_w4a16_asym_g128", src)
    before = _digests(src)
    calls = {"n": 0}

    def failing(real):
        def wrapper(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 3:
                raise OSError(28, "No space left on device (injected)")
            return real(*args, **kwargs)

        return wrapper

    if where == "converting":
        monkeypatch.setattr(steps_module, "encode_linear", failing(steps_module.encode_linear))
    else:
        monkeypatch.setattr(folder_module, "copy_file", failing(folder_module.copy_file))
    dst = tmp_path / "served"
    assert convert_main([str(src), f"{dst}/", "--quiet", "--jobs", str(jobs)]) == 3
    assert calls["n"] >= 3
    assert not dst.exists()
    assert _no_leftovers(tmp_path, "served")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    assert _digests(src) == before


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")
def test_links_out_of_the_source_folders_and_fifos_are_not_copied(tmp_path, capsys):
    """CONV-2: a link leading out of SRC is not followed, a sub-folder and a FIFO are not
    copied (and a FIFO does not block); a link to a file inside SRC is copied as that file;
    each one left out is named on stderr and in the summary."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "autoawq_gemm_g128", src)
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"outside the source")
    (src / "leak.txt").symlink_to(secret)
    (src / "alias.json").symlink_to("tokenizer.json")
    (src / "original").mkdir()
    (src / "original" / "params.json").write_bytes(b"{}")
    os.mkfifo(src / "pipe")
    dst = tmp_path / "served"
    assert convert_main([str(src), f"{dst}/", "--quiet"]) == 0
    err = capsys.readouterr().err
    names = {p.name for p in dst.iterdir()}
    assert not {"leak.txt", "original", "pipe"} & names
    assert (dst / "alias.json").read_bytes() == (src / "tokenizer.json").read_bytes()
    assert not (dst / "alias.json").is_symlink()
    for name in ("leak.txt", "original", "pipe"):
        assert f"not copied: {name} (" in err, (name, err)
    assert "leads out of the source folder" in err


def test_quantization_config_when_layers_differ():
    """CONV-1: numbers when every layer agrees; sorted lists and a per-layer map when not."""
    same = {"a": (4, 128), "b": (4, 128)}
    assert servable_quantization_config(same, "CT") == {
        "quant_method": "awq_v2",
        "bits": 4,
        "group_size": 128,
        "source_format": "compressed-tensors",
    }
    mixed = {"a": (4, 128), "b": (4, -1), "c": (8, 64)}
    assert servable_quantization_config(mixed, "V1") == {
        "quant_method": "awq_v2",
        "bits": [4, 8],
        "group_size": [-1, 64, 128],
        "source_format": "awq",
        "layer_bits": {"a": 4, "b": 4, "c": 8},
        "layer_group_sizes": {"a": 128, "b": -1, "c": 64},
    }


# ------------------------------------------------------------------------------ threads


@pytest.mark.parametrize("source", ["v1", "compressed-tensors"])
def test_jobs_do_not_change_a_byte(tmp_path, source):
    """CONV-3: one thread and three threads write the same file, on both source kinds."""
    if source == "v1":
        src = write_checkpoint(tmp_path / "v1", LlamaShape(num_hidden_layers=6, seed=3))
    else:
        src = FIXTURES / "ct_w4a16_asym_g64"
    one, three = tmp_path / "one.awq2", tmp_path / "three.awq2"
    assert convert(src, one, jobs=1)["jobs"] == 1
    assert convert(src, three, jobs=3)["jobs"] == 3
    a, b = one.read_bytes(), three.read_bytes()
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    assert a == b, f"sizes {len(a)}, {len(b)}; first differing byte at {first}"


@pytest.mark.parametrize("jobs", [1, 3])
def test_provenance_hashes_are_each_source_files_sha256(tmp_path, jobs):
    """META-3, CONV-3: with the hashing on its own thread (jobs > 1) or not, the provenance
    names each source file with its size and its SHA-256, computed here with hashlib."""
    src = write_checkpoint(tmp_path / "v1", LlamaShape(num_hidden_layers=4, seed=5), shards=3)
    dst = tmp_path / "out.awq2"
    convert(src, dst, jobs=jobs)
    with reference.open(dst) as r:
        files = r.metadata["provenance"]["source_files"]
    expected = {p.name: (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
                for p in src.glob("*.safetensors")}  # fmt: skip
    assert len(expected) == 3
    assert {f["name"]: (f["size"], f["sha256"]) for f in files} == expected


def test_hashing_stops_when_asked(tmp_path):
    """A conversion that gives up stops its hashing thread at the next buffer."""
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(256)) * 5000)
    assert hashing.sha256_of(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    stop = threading.Event()
    assert hashing.sha256_of(path, stop=stop) == hashing.sha256_of(path)
    stop.set()
    with pytest.raises(hashing.Stopped):
        hashing.sha256_of(path, stop=stop)


def test_a_failure_leaves_no_hashing_thread(tmp_path, monkeypatch):
    """CONV-2, CONV-3: a conversion that fails while layers are repacked (jobs > 1, the source
    hashed on its own thread) returns with no thread of its own still running."""
    src = write_checkpoint(tmp_path / "v1", LlamaShape(num_hidden_layers=4, seed=5))

    def failing(*args, **kwargs):
        raise OSError(28, "No space left on device (injected)")

    monkeypatch.setattr(steps_module, "encode_linear", failing)
    with pytest.raises(OSError, match="injected"):
        convert(src, tmp_path / "out.awq2", jobs=3)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("convert")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v1"]


def test_folder_jobs_do_not_change_a_byte(tmp_path):
    """CONV-3: the folder's model.awq2 is the same with --jobs 1 and --jobs 3."""
    src = FIXTURES / "autoawq_gemm_g128"
    convert_folder(src, tmp_path / "one", jobs=1)
    convert_folder(src, tmp_path / "three", jobs=3)
    assert _digests(tmp_path / "one") == _digests(tmp_path / "three")


def test_jobs_must_be_positive(tmp_path, capsys):
    src = FIXTURES / "autoawq_gemm_g128"
    with pytest.raises(SystemExit) as exit_:
        convert_main([str(src), str(tmp_path / "x.awq2"), "--jobs", "0"])
    assert exit_.value.code == 2 and "--jobs must be at least 1" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def _peak_bytes(src: Path, dst: Path, jobs: int) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        convert(src, dst, jobs=jobs, verify=False)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_memory_is_bounded_by_jobs_not_by_the_model(tmp_path):
    """CONV-3: on a 24-layer model, the peak of traced allocations (NumPy reports its arrays
    to tracemalloc) with 3 threads stays within about 3 layers' working set, far below the
    model, and one thread's peak is about one layer's."""
    shape = LlamaShape(hidden_size=512, intermediate_size=1536, num_hidden_layers=24,
                       num_attention_heads=8, num_key_value_heads=8, vocab_size=256)  # fmt: skip
    src = write_checkpoint(tmp_path / "v1", shape)
    model = (src / "model.safetensors").stat().st_size
    # the largest layer: an MLP projection, 512 x 1536 4-bit codes packed (int32 words)
    largest = 512 * 1536 // 2
    one = _peak_bytes(src, tmp_path / "one.awq2", 1)
    three = _peak_bytes(src, tmp_path / "three.awq2", 3)
    print(f"\nmodel {model:,} B, largest layer's qweight {largest:,} B; peak traced "
          f"allocations: --jobs 1 {one:,} B ({one / largest:.1f} x largest), "
          f"--jobs 3 {three:,} B ({three / largest:.1f} x largest)")  # fmt: skip
    assert one < model / 8, "one thread holds about one layer, not the model"
    assert three <= 4 * one, "three threads hold about three layers (plus one being written)"
    assert three < model / 3


@pytest.mark.parametrize("dst", ["missing/model.awq2", "missing/served/", "afile/model.awq2"])
def test_a_destination_whose_folder_is_missing_names_the_users_path(tmp_path, dst, capsys):
    """A DST whose parent folder does not exist (or is a file) is refused before anything is
    read or written, naming DST and its folder, never a hidden partial name (exit 3)."""
    (tmp_path / "afile").write_bytes(b"a file")
    before = sorted(p.name for p in tmp_path.iterdir())
    target = f"{tmp_path}/{dst}"
    assert convert_main([str(FIXTURES / "autoawq_gemm_g128"), target, "--quiet"]) == 3
    err = capsys.readouterr().err
    parent = str(Path(target).parent)
    assert f"cannot write {Path(target)}: its folder {parent}" in err, err
    assert ".partial" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
