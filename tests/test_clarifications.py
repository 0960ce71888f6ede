"""The 2.0 clarifications, on both loaders: the reference and the C loader
(conformance/adapters/c) report the code and the offset the spec now names.

Expected values come from the spec text (format.md, "Reading"), computed here from the file's
own layout with ``tools.vectors.surgery``, never from either loader's output.  The C part is
skipped only when there is no C compiler on PATH, as in ``test_c_loader.py``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import reference
from conformance import run
from reference.format.layers import encode_linear
from spec.constants import MAGIC, SLAB_OFFSET
from spec.schema import HEADER_FIELD_OFFSET
from tools.vectors.generate import base_bytes
from tools.vectors.mutations import MUTATION_BY_ID, _entry_named
from tools.vectors.surgery import FileEditor

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = json.loads((ROOT / "conformance" / "manifest.json").read_text(encoding="utf-8"))
CC = shlex.split(os.environ.get("CC") or "cc")
HAVE_CC = shutil.which(CC[0]) is not None


@pytest.fixture(scope="module")
def c_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not HAVE_CC:
        pytest.skip(f"no C compiler ({CC[0]})")
    return run.build_c_loader(
        tmp_path_factory.mktemp("c-loader") / "awq2c", extra_flags=("-Werror",)
    )


def reference_verdict(path: Path) -> tuple[str, int] | None:
    """(code, offset) of the reference's open, full validation and verify [RD-6]."""
    try:
        with reference.Reader(path, validate=True) as f:
            f.verify()
    except reference.FormatError as exc:
        return exc.code, exc.offset
    return None


def c_verdict(binary: Path, path: Path) -> tuple[str, int] | None:
    proc = subprocess.run([str(binary), str(path)], capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    match = re.match(r"([A-Z_0-9]+) at offset (\d+)", proc.stdout)
    assert proc.returncode == 1 and match, proc.stdout + proc.stderr
    return match.group(1), int(match.group(2))


def both(binary: Path, path: Path) -> set[tuple[str, int] | None]:
    return {reference_verdict(path), c_verdict(binary, path)}


# ------------------------------------------------------------------ HDR-1: magic before size


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"GIF89a", ("BAD_MAGIC", 0)),  # 6 bytes of another format
        (b"\x89", ("TRUNCATED", 1)),  # a proper prefix: the file's length
        (b"\x89AWQ", ("TRUNCATED", 4)),
        (MAGIC[:7], ("TRUNCATED", 7)),
        (b"", ("TRUNCATED", 0)),  # the empty file is a prefix too
        (b"\x89AWX", ("BAD_MAGIC", 0)),  # differs at byte 3 of 4
        (b"P", ("BAD_MAGIC", 0)),  # one byte, already not the magic
        (MAGIC + b"\x02\x00", ("TRUNCATED", 10)),  # the magic, then too short
    ],
)
def test_short_files_are_bad_magic_unless_a_prefix_of_it(c_binary, tmp_path, raw, expected):
    """HDR-1, RD-1: the first min(8, size) bytes are compared first."""
    path = tmp_path / "short"
    path.write_bytes(raw)
    assert both(c_binary, path) == {expected}


# ------------------------------------------------------------------ ENT-2, ENT-3 at the header


@pytest.mark.parametrize(
    ("mutation", "field"),
    [("names_length_unused_byte", "names_length"), ("dims_count_unused_dim", "dims_count")],
)
def test_counts_the_entries_do_not_add_up_to_are_reported_at_the_header_field(
    c_binary, tmp_path, mutation, field
):
    """ENT-2, ENT-3: after the last entry, at offset 88 (names_length) or 80 (dims_count)."""
    assert HEADER_FIELD_OFFSET[field] == {"names_length": 88, "dims_count": 80}[field]
    path = tmp_path / "v.awq2"
    path.write_bytes((ROOT / "conformance" / "vectors" / f"n_{mutation}.awq2").read_bytes())
    assert both(c_binary, path) == {("BAD_ENTRY_FIELD", HEADER_FIELD_OFFSET[field])}


# ------------------------------------------------------------------ NAME-2: the lead byte


def test_a_truncated_utf8_sequence_is_reported_at_its_lead_byte(c_binary, tmp_path):
    """NAME-2: a name ending E2 82 is reported at the E2, in the name pool."""
    data = (ROOT / "conformance" / "vectors" / "n_name_truncated_utf8.awq2").read_bytes()
    ed = FileEditor(data)
    last = int(ed.h("tensor_count")) - 1
    _, end = ed.name_range(last)
    assert data[end - 2 : end] == b"\xe2\x82"
    path = tmp_path / "v.awq2"
    path.write_bytes(data)
    assert both(c_binary, path) == {("BAD_NAME_UTF8", end - 2)}


def test_an_ill_formed_sequence_inside_a_name_is_reported_where_it_starts(c_binary, tmp_path):
    """RD-7, NAME-2: a stray continuation byte as the name's fourth byte is reported at that
    byte in the name pool, not at the name's first byte."""
    path = ROOT / "conformance" / "vectors" / "n_name_invalid_utf8_inside.awq2"
    ed = FileEditor(path.read_bytes())
    start, _ = ed.name_range(int(ed.h("tensor_count")) - 1)
    assert ed.data[start + 3] == 0x80
    assert both(c_binary, path) == {("BAD_NAME_UTF8", start + 3)}


# ------------------------------------------------------------------ RD-7: buckets, entries


def test_a_bucket_too_long_is_reported_at_its_first_slot(c_binary):
    """RD-7, LIM-6: bucket 1 too long (bucket 0 empty) is reported at buckets[1], at
    index_offset + 4; bucket 0 at index_offset."""
    for vid, bucket in (("n_bucket_too_long", 0), ("n_bucket_too_long_second_bucket", 1)):
        path = ROOT / "conformance" / "vectors" / f"{vid}.awq2"
        ed = FileEditor(path.read_bytes())
        assert both(c_binary, path) == {("LIMIT_BUCKET", ed.index_offset + 4 * bucket)}, vid


#: The codes of checks 4 to 10 of checking an entry, and of the layer checks (LAY-7, LAY-10):
#: reported at the entry's first byte, whichever field is at fault [RD-7].
_AT_THE_ENTRY = {"BAD_DTYPE", "BAD_SHAPE", "BAD_LENGTH", "MISALIGNED_OFFSET", "OUT_OF_BOUNDS",
                 "BAD_LAYOUT", "BAD_QUANT_FIELDS", "BAD_NAME_HASH"}  # fmt: skip


def test_entry_checks_4_to_10_are_reported_at_the_entry_s_first_byte(c_binary):
    """RD-7: every must-reject vector of checks 4 to 10 (and LAY-7, LAY-10) is reported at
    the first byte of an entry, never at the field at fault inside it."""
    seen = set()
    for v in MANIFEST["vectors"]:
        if v["expect"] != "reject" or "file" not in v or v["error_code"] not in _AT_THE_ENTRY:
            continue
        path = ROOT / "conformance" / v["file"]
        ed = FileEditor(path.read_bytes())
        starts = {ed.entry_offset(i) for i in range(int(ed.h("tensor_count")))}
        (verdict,) = both(c_binary, path)
        assert verdict is not None and verdict[1] in starts, (v["id"], verdict)
        seen.add(v["error_code"])
    assert seen == _AT_THE_ENTRY  # every code has a vector


# ------------------------------------------------------------------ META-1, META-6: the mark first


def test_a_byte_order_mark_before_invalid_utf8_is_reported_at_the_metadata_s_start(
    c_binary,
):
    """META-6, RD-7: the byte order mark is checked before UTF-8, so EF BB BF FF is
    BAD_METADATA at the metadata's first byte, not at the FF."""
    path = ROOT / "conformance" / "vectors" / "n_metadata_bom_then_invalid_utf8.awq2"
    ed = FileEditor(path.read_bytes())
    assert bytes(ed.data[ed.metadata_offset : ed.metadata_offset + 4]) == b"\xef\xbb\xbf\xff"
    assert both(c_binary, path) == {("BAD_METADATA", ed.metadata_offset)}


# ------------------------------------------------------------------ LAY-7, LAY-10


def test_layer_failures_are_reported_at_the_entry_being_checked(c_binary, tmp_path):
    """LAY-7: the walk in index order reaches the layer's first quantised entry first; its
    sibling check fails there (not at the sibling it disagrees with)."""
    data = (ROOT / "conformance" / "vectors" / "n_layer_mixed_layout_families.awq2").read_bytes()
    ed = FileEditor(data)
    quantised = [i for i, e in enumerate(ed.entries()) if e["layout"] != 0]
    path = tmp_path / "v.awq2"
    path.write_bytes(data)
    assert both(c_binary, path) == {("BAD_QUANT_FIELDS", ed.entry_offset(min(quantised)))}


@pytest.mark.parametrize("mutation", ["layer_bias_shape_wrong", "layer_bias_dtype_wrong"])
def test_a_layer_bias_that_does_not_fit_is_reported_at_the_bias(c_binary, tmp_path, mutation):
    """LAY-10: BAD_QUANT_FIELDS at the bias entry's own offset."""
    data = (ROOT / "conformance" / "vectors" / f"n_{mutation}.awq2").read_bytes()
    ed = FileEditor(data)
    path = tmp_path / "v.awq2"
    path.write_bytes(data)
    assert both(c_binary, path) == {
        ("BAD_QUANT_FIELDS", ed.entry_offset(_entry_named(ed, ".bias")))
    }


def test_the_lookup_path_checks_the_bias_too(tmp_path):
    """LAY-10 on Reader.linear, without full validation."""
    ed = FileEditor(base_bytes("sample"))
    MUTATION_BY_ID["layer_bias_dtype_wrong"].edit(ed)
    path = tmp_path / "v.awq2"
    path.write_bytes(ed.bytes())
    with reference.open(path) as f, pytest.raises(reference.FormatError) as info:
        f.linear("model.layers.0.self_attn.q_proj")
    assert info.value.code == "BAD_QUANT_FIELDS"


def test_the_writer_refuses_a_bias_a_reader_would_reject():
    """LAY-10: an integer bias is refused; float16, float32 and BF16 bits are stored."""
    q = np.zeros((128, 64), np.uint8)
    z = np.zeros((1, 64), np.uint8)
    s = np.ones((1, 64), np.float16)
    common = dict(bits=4, group_size=-1, q=q, z=z, scales=s)
    with pytest.raises(ValueError, match="LAY-10"):
        encode_linear("p", bias=np.zeros(64, np.int16), **common)
    with pytest.raises(ValueError, match="LAY-10"):
        encode_linear("p", bias=np.zeros(32, np.float16), **common)
    for bias, kw, want in (
        (np.zeros(64, np.float16), {}, "F16"),
        (np.zeros(64, np.float32), {}, "F32"),
        (np.zeros(64, np.uint16), {"bias_dtype": "BF16"}, "BF16"),
    ):
        _, stored = encode_linear("p", bias=bias, **common, **kw)
        assert stored[-1].name == "p.bias" and stored[-1].fields["dtype"] == want


# ------------------------------------------------------------------ SLAB-7


def test_empty_payloads_are_accepted_anywhere_the_slab_allows(c_binary):
    """SLAB-7: inside another payload's span and at index_offset, accepted by both."""
    path = ROOT / "conformance" / "vectors" / "y_empty_payload_anywhere.awq2"
    ed = FileEditor(path.read_bytes())
    offsets = {int(e["data_offset"]) for e in ed.entries() if not e["data_length"]}
    assert ed.index_offset in offsets and len(offsets) == 2  # the vector is what it says
    assert both(c_binary, path) == {None}


# ------------------------------------------------------------------ ENT-10: ties in index order


def test_verify_breaks_ties_in_index_order(c_binary, tmp_path):
    """ENT-10: two empty payloads at slab_offset with a wrong data_crc (the CRC-32C of no
    bytes is 0): the one first in index order is reported, at slab_offset."""
    ed = FileEditor(base_bytes("many"))  # 100 empty tensors, all at slab_offset
    entries = ed.entries()
    assert all(int(e["data_offset"]) == SLAB_OFFSET and not e["data_length"] for e in entries)
    bad = [len(entries) - 1, len(entries) - 2]  # the last two in index order
    for i in bad:
        ed.set_entry(i, data_crc=0xDEADBEEF)
    path = tmp_path / "v.awq2"
    path.write_bytes(ed.refresh().bytes())
    assert both(c_binary, path) == {("BAD_TENSOR_CHECKSUM", SLAB_OFFSET)}
    with reference.open(path) as f, pytest.raises(reference.FormatError) as info:
        f.verify()
    start, end = ed.name_range(min(bad))
    assert repr(bytes(ed.data[start:end]).decode()) in str(info.value)
    out = subprocess.run([str(c_binary), str(path)], capture_output=True, text=True).stdout
    assert f"entry {min(bad)}:" in out


# ------------------------------------------------------------------ every vector, both loaders

#: Codes whose offset the spec does not pin down: none since RD-7 names the metadata's (its
#: first byte; invalid UTF-8 the first byte of the invalid sequence; a limit its header field).
_OFFSET_UNSPECIFIED: set[str] = set()


def test_both_loaders_report_the_same_offset_on_every_must_reject_vector(c_binary):
    """RD-3: the code and, where the spec names it, the offset agree on every n_ vector."""
    differ = []
    for v in MANIFEST["vectors"]:
        if v["expect"] != "reject" or "file" not in v:  # sets: the runner compares codes
            continue
        path = ROOT / "conformance" / v["file"]
        ref, c = reference_verdict(path), c_verdict(c_binary, path)
        assert ref is not None and c is not None and ref[0] == c[0] == v["error_code"], v["id"]
        if ref != c and ref[0] not in _OFFSET_UNSPECIFIED:
            differ.append(f"{v['id']}: reference {ref}, C {c}")
    assert not differ
