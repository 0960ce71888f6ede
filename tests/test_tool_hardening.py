"""The tools around the reader under unlucky or hostile conditions (issue 12): writers'
temporary files [WR-2, WR-3], written padding [WR-4], a file-size limit, FIFOs, destination
checks, and escaping of what a file says before it reaches a terminal.

Each test reproduces one finding of the issue; the comment names it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import reference
from reference.convert import main as convert_main
from reference.examples import write_checkpoint
from reference.format.validate import validate_index
from reference.ground.files import NotRegularFileError
from reference.ground.text import escape
from reference.write import partial

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, timeout: float = 60, preexec: str = "") -> subprocess.CompletedProcess[str]:
    """``python -c`` or ``python -m`` in a child, from the repository root."""
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def _partial_name(dest: Path, host: str, pid: int, rand: str = "abcd1234") -> Path:
    """A partial of ``dest`` in the exact form writers use, for another host or pid."""
    tag = hashlib.sha256(dest.name.encode()).hexdigest()[:8]
    return dest.parent / f".{dest.name}.{tag}.{host}.{pid}.{rand}{partial.PARTIAL_SUFFIX}"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _no_partials(folder: Path) -> bool:
    return not list(folder.glob(f"*{partial.PARTIAL_SUFFIX}"))


# ------------------------------------------------------------ 1. other writers' partials


def test_a_partial_whose_lock_is_held_is_kept_even_when_its_pid_is_dead_here(tmp_path):
    """Finding 1, WR-3: a writer in another PID namespace on this host (its pid means nothing
    here) holds its partial's lock; the clean-up must leave the file alone until the lock goes."""
    dest = tmp_path / "model.awq2"
    other = _partial_name(dest, partial.host_tag(), _dead_pid())
    other.write_bytes(b"live data of another writer")
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import fcntl, os, sys, time
            fd = os.open({str(other)!r}, os.O_RDWR)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print("locked", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert partial.stale_partials(dest) == []
    finally:
        holder.communicate("", timeout=10)
    assert partial.stale_partials(dest) == [other]  # lock free, pid dead, this host: stale


def test_a_partial_of_another_host_or_another_destination_is_never_stale(tmp_path):
    """Finding 1, WR-3: another host's partial cannot be proved dead; a live partial of
    ``ckpt.999999`` is not one of ``ckpt`` (the 999999 is not a pid)."""
    dest = tmp_path / "ckpt"
    foreign = _partial_name(dest, "some-other-host", _dead_pid())
    foreign.write_bytes(b"x")
    with reference.Writer(tmp_path / "ckpt.999999") as writer:
        writer.add("w", np.zeros(4, np.float32))
        assert partial.stale_partials(dest) == []
        assert partial.stale_partials(tmp_path / "ckpt.999999") == []  # its writer is alive
    assert foreign.exists()
    mine = _partial_name(dest, partial.host_tag(), _dead_pid())
    mine.write_bytes(b"x")
    assert partial.stale_partials(dest) == [mine]


@pytest.mark.parametrize("length", [230, 255])
def test_a_destination_name_up_to_255_bytes_can_be_written(tmp_path, length):
    """Finding 7, WR-3: the partial's name is cut so that it fits NAME_MAX as well."""
    dest = tmp_path / ("é" * ((length - 5) // 2) + "x" * ((length - 5) % 2) + ".awq2")
    assert len(dest.name.encode()) == length
    reference.save(dest, {"w": np.arange(3, dtype=np.int32)})
    with reference.open(dest) as f:
        assert f.tensor("w").tolist() == [0, 1, 2]
    assert _no_partials(tmp_path)


# ------------------------------------------------------------ 2. a failed write cleans up


_UNDER_LIMIT = """
import resource, sys
import numpy as np
import reference
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
try:
    reference.save(sys.argv[1], {f"t{i}": np.zeros(1000, np.float32) for i in range(10)})
except OSError as exc:
    print("OSError", exc.errno, type(exc.__context__).__name__)
"""


def test_a_write_over_the_file_size_limit_raises_once_and_leaves_nothing(tmp_path):
    """Finding 2, WR-2: under ``ulimit -f`` the write fails with EFBIG, once (no second
    error from the buffered close inside abort, so no chained context), and no partial stays
    behind.  Small tensors: the failing write is a buffered one, flushed again at close."""
    result = _run("-c", _UNDER_LIMIT, str(tmp_path / "big.awq2"))
    assert result.stdout.split() == ["OSError", str(errno.EFBIG), "NoneType"], result
    assert "Traceback" not in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_convert_over_the_file_size_limit_exits_3_and_leaves_nothing(tmp_path):
    """Finding 2: the converter reports the I/O error (exit 3), with no traceback."""
    src = write_checkpoint(tmp_path / "src")
    code = (
        "import resource, sys; from reference.convert import main\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))\n"
        "sys.exit(main(sys.argv[1:]))"
    )
    out = tmp_path / "out"
    out.mkdir()
    result = _run("-c", code, str(src), str(out / "m.awq2"), "--quiet")
    assert result.returncode == 3, result
    assert "Traceback" not in result.stderr and "error:" in result.stderr
    assert list(out.iterdir()) == []


# ------------------------------------------------------------ 3. padding written, read by pread


def test_published_files_have_no_holes(tmp_path):
    """Finding 3, WR-4: 200 small tensors leave 64 KiB of padding each; every byte of it is
    written, so the file system allocated it before the rename (SEEK_HOLE finds none)."""
    path = tmp_path / "small.awq2"
    reference.save(path, {f"t{i}": np.full(3, i, np.int16) for i in range(200)})
    size = path.stat().st_size
    assert size > 200 * 65536
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.lseek(fd, 0, os.SEEK_HOLE) == size
    finally:
        os.close(fd)


def test_full_validation_reads_the_padding_with_positioned_reads(tmp_path, monkeypatch):
    """Finding 3: validate() checks the padding through its read function (pread on the
    file), not the memory map, so padding a full tmpfs never allocated cannot fault."""
    path = tmp_path / "m.awq2"
    reference.save(path, {"a": np.ones(5, np.float32), "b": np.ones(7, np.float16)})
    ranges: list[tuple[int, int]] = []
    original = reference.Reader._pread_into

    def spy(self, view, offset):
        ranges.append((offset, offset + len(view)))
        return original(self, view, offset)

    monkeypatch.setattr(reference.Reader, "_pread_into", spy)
    with reference.open(path) as f:
        f.validate()
        geometry = f.index.geometry
    assert (128, 65536) in ranges  # the header padding [PAD-1]
    assert (geometry.bucket_padding.offset, geometry.bucket_padding.end) in ranges
    assert len(ranges) == 4  # and the padding after each of the two payloads [PAD-2]


def test_the_validator_reports_padding_it_reads(tmp_path):
    """The read function is what the padding check sees: a non-zero byte it returns fails."""
    path = tmp_path / "m.awq2"
    reference.save(path, {"a": np.ones(5, np.float32)})
    with reference.open(path) as f:

        def read(view, offset):
            view[:] = f.index.buf[offset : offset + len(view)]
            if offset == 128:
                view[10] = 7

        with pytest.raises(reference.FormatError) as info:
            validate_index(f.index, read)
    assert info.value.code == "NONZERO_PADDING" and info.value.offset == 138


# ------------------------------------------------------------ 6. FIFOs and devices


@pytest.mark.parametrize("args", [["reference.dump"], ["reference.convert", "--dry-run"]])
def test_the_tools_refuse_a_fifo_at_once(tmp_path, args):
    """Finding 6: a FIFO with no writer is refused as an unreadable input (exit 3), not
    waited on."""
    fifo = tmp_path / "model.awq2"
    os.mkfifo(fifo)
    result = _run("-m", *args[:1], str(fifo), *args[1:], timeout=30)
    assert result.returncode == 3, result
    assert "not a regular file (a FIFO)" in result.stderr


def test_open_refuses_a_fifo_and_a_device_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code = (
        "import sys, reference\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        reference.open(p)\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__, exc.strerror)\n"
    )
    result = _run("-c", code, str(fifo), "/dev/zero", timeout=30)
    assert result.stdout.splitlines() == [
        "NotRegularFileError not a regular file (a FIFO)",
        "NotRegularFileError not a regular file (a character device)",
    ], result
    assert issubclass(NotRegularFileError, OSError)


# ------------------------------------------------------------ 7. destinations


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_convert_refuses_to_replace_its_own_source(tmp_path):
    """Finding 7: ``convert X.safetensors X.safetensors`` used to replace the source."""
    src = write_checkpoint(tmp_path / "ckpt")
    weights = src / "model.safetensors"
    before = _digest(weights)
    # A DST not ending in .awq2 names a model folder: an existing file is never one.
    for dst in (weights, src / "." / "model.safetensors"):
        result = _run("-m", "reference.convert", str(weights), str(dst))
        assert result.returncode == 2 and "needs a checkpoint folder" in result.stderr, result
        result = _run("-m", "reference.convert", str(src), str(dst))
        assert result.returncode == 2 and "is an existing file" in result.stderr, result
    # An .awq2 name that is the source's file (a link to it), even with --overwrite.
    link = src / "weights.awq2"
    link.symlink_to("model.safetensors")
    for extra in ((), ("--overwrite",)):
        result = _run("-m", "reference.convert", str(weights), str(link), *extra)
        assert result.returncode == 2 and "file of the source" in result.stderr, result
        result = _run("-m", "reference.convert", str(src), str(link), *extra)
        assert result.returncode == 2 and "file of the source" in result.stderr, result
    link.unlink()
    assert _digest(weights) == before and _no_partials(src)


def test_convert_checks_its_paths_before_converting(tmp_path):
    """Finding 7: a non-empty folder as DST (CONV-2: never replaced), an over-long DST name, a
    missing SRC and an AWQ-v2 SRC are reported at once, each with its documented exit
    status."""
    src = write_checkpoint(tmp_path / "ckpt")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "keep.txt").write_bytes(b"mine")
    cases = [
        ([str(src), str(folder)], 2, "is a folder that is not empty"),
        ([str(src), str(tmp_path / ("n" * 256))], 2, "longer than 255 bytes"),
        ([str(tmp_path / "missing"), str(tmp_path / "x.awq2")], 3, "no such file"),
    ]
    v2 = tmp_path / "already.awq2"
    reference.save(v2, {"w": np.zeros(2, np.float32)})
    cases.append(([str(v2), str(tmp_path / "y.awq2")], 2, "already an AWQ-v2 file"))
    for argv, status, words in cases:
        result = _run("-m", "reference.convert", *argv)
        assert result.returncode == status and words in result.stderr, (argv, result)
        assert "Traceback" not in result.stderr
    assert [p.name for p in folder.iterdir()] == ["keep.txt"]


# ------------------------------------------------------------ 5. escaping


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain name.weight", "plain name.weight"),
        ("a\x1b[31mred", "a\\x1b[31mred"),
        ("title\x1b]0;owned\x07", "title\\x1b]0;owned\\x07"),
        ("\x9b", "\\x9b"),  # C1 control (CSI)
        ("abc\u202egnp.exe", "abc\\u202egnp.exe"),  # bidi override
        ("line\u2028break\u2029", "line\\u2028break\\u2029"),
        ("tag\U000e0041", "tag\\U000e0041"),  # non-BMP: eight hex digits, unambiguous
        ("back\\slash", "back\\\\slash"),
        ("ünïcödé 名前", "ünïcödé 名前"),
    ],
)
def test_escape_leaves_nothing_a_terminal_acts_on(raw, shown):
    assert escape(raw) == shown


def test_convert_dry_run_escapes_names_from_the_file(tmp_path):
    """Finding 5: ``convert --dry-run`` printed tensor names raw."""
    folder = write_checkpoint(tmp_path / "ckpt")  # quantised layers and a config beside it
    with reference.open(folder) as ckpt:
        tensors = {name: np.array(ckpt.tensor(name)) for name in ckpt.names()}
    tensors["evil\x1b]0;title\x07\u202e.weight"] = np.zeros(4, np.float16)
    src = folder / "model.safetensors"
    save_file(tensors, str(src))
    result = _run("-m", "reference.convert", str(src), "--dry-run")
    assert result.returncode == 0, result
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "evil\\x1b]0;title\\x07\\u202e.weight" in result.stdout


# ------------------------------------------------------------ 4. the v1 path's JSON


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def _deep_but_legal_config(src: Path) -> str:
    """config.json at the metadata's depth limit: legal alone, one level too deep once the
    converter nests it under "config"."""
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    inner: object = 1
    for _ in range(63):
        inner = {"a": inner}
    config["deep"] = inner
    return json.dumps(config)


@pytest.mark.parametrize(
    "text",
    [
        '{"x": NaN}',
        '{"x": 1e400}',
        '{"x": ' + "9" * 201 + "}",
        '{"x": "\\ud800"}',
        _nested(65),
        _nested(100_000),
        '{"x": "' + "y" * (16 << 20) + '"}',
        '{"a": 1, "a": 2}',
        "[1, 2]",
        "deep-but-legal",
    ],
    ids=["nan", "1e400", "201-digits", "lone-surrogate", "depth-65", "depth-100000",
         "over-16-MiB", "duplicate-key", "array", "legal-alone-too-deep-as-metadata"],
)  # fmt: skip
def test_a_hostile_config_json_is_refused_with_a_code(tmp_path, capsys, text):
    """Finding 4: config.json with NaN, 1e400, a 201-digit number, "\\ud800", nesting past the
    limit (or 100,000 deep), over 16 MiB: convert refused with V1_BAD_CONFIG, no traceback."""
    src = write_checkpoint(tmp_path / "ckpt")
    original = (src / "config.json").read_text(encoding="utf-8")
    if text == "deep-but-legal":
        text = _deep_but_legal_config(src)
    elif text.startswith("{"):  # the hostile member beside the real (quantisation) config
        text = text[:-1] + ", " + original.lstrip()[1:]
    (src / "config.json").write_text(text, encoding="utf-8")
    assert convert_main([str(src), str(tmp_path / "out.awq2"), "--quiet"]) == 1
    assert "refused: [V1_BAD_CONFIG]" in capsys.readouterr().err
    assert not (tmp_path / "out.awq2").exists() and _no_partials(tmp_path)


def test_a_safetensors_header_nested_100000_deep_is_refused(tmp_path):
    """Finding 4: a 200 KB safetensors header nested 100,000 deep raised RecursionError."""
    header = ('{"w":' + _nested(100_000) + "}").encode()
    path = tmp_path / "deep.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(reference.FormatError) as info:
        reference.open(path)
    assert info.value.code == "V1_INCOMPLETE" and "nested too deeply" in info.value.message


@pytest.mark.parametrize(
    ("weight_map", "words"),
    [
        (["model-00001-of-00002.safetensors"], "not an object"),
        ("model-00001-of-00002.safetensors", "not an object"),
        ({"a": "model-00001-of-00002.safetensors", "b": 7}, "not an object"),
        ({"a": ["model-00001-of-00002.safetensors"]}, "not an object"),
        ({"a": "../outside.safetensors"}, "not plain names in the checkpoint folder"),
        ({"a": "/tmp/outside.safetensors"}, "not plain names in the checkpoint folder"),
        ({"a": ".."}, "not plain names in the checkpoint folder"),
        ({"a": "x" * 300 + ".safetensors"}, "not plain names in the checkpoint folder"),
    ],
    ids=[
        "list",
        "string",
        "mixed-values",
        "list-values",
        "dotdot",
        "absolute",
        "parent",
        "300-bytes",
    ],
)
def test_a_hostile_shard_index_is_refused_before_any_shard_is_opened(tmp_path, weight_map, words):
    """Finding 4: weight_map of the wrong type gave AttributeError/TypeError; a shard named
    ../outside.safetensors was opened and parsed before being called "missing"."""
    src = write_checkpoint(tmp_path / "ckpt", shards=2)
    outside = tmp_path / "outside.safetensors"
    os.mkfifo(outside)  # opening it would block or be refused as a FIFO, not as outside
    index = src / "model.safetensors.index.json"
    document = json.loads(index.read_text(encoding="utf-8"))
    document["weight_map"] = weight_map
    index.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(reference.FormatError) as info:
        reference.open(src)
    assert info.value.code == "V1_BAD_CONFIG" and words in info.value.message, info.value


def test_a_small_json_file_is_read_without_a_buffer_of_the_limits_size(tmp_path):
    """Found by the fuzzer: reading "at most 100 MB" of a 1 KB shard index allocated 100 MB."""
    import tracemalloc

    src = write_checkpoint(tmp_path / "ckpt", shards=2)
    tracemalloc.start()
    try:
        with reference.open(src):
            pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


# ------------------------------------------------------------ 10. metadata memory


@pytest.mark.slow
def test_metadata_of_many_small_values_parses_and_encodes_in_bounded_memory():
    """Finding 10: "a 16 MiB metadata document at the maximum depth peaks at 633 MiB".  The
    checks walked every element through a stack of copies (json_depth, the surrogate check);
    they now keep one iterator per level.  2 MiB of ``0,0,...`` at depth 64: parsing stays
    under 8 times the text (it was 18), encoding under 16 times (it was 40)."""
    import tracemalloc

    from reference.format.metadata import encode_metadata, parse_metadata

    inner = "[" + ",".join(["0"] * ((2 << 20) // 2 - 200)) + "]"
    raw = ('{"a":' + "[" * 62 + inner + "]" * 62 + "}").encode()
    tracemalloc.start()
    try:
        document = parse_metadata(raw, offset=0)
        parsed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        assert encode_metadata(document) == raw.replace(b" ", b"")
        encoded = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert parsed < 8 * len(raw) + (16 << 20), parsed / len(raw)
    assert encoded < 16 * len(raw) + (16 << 20), encoded / len(raw)
