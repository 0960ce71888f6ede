"""Tests of tools/codec_tables.py: the codec chapter holds exactly the generator's output, and the
generator's formulas agree with the reference codec (reference/quant/codec.py) position by position."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from reference.quant import codec
from tools import codec_tables as ct

CHAPTER = Path(__file__).resolve().parents[1] / "docs" / "spec" / "codec.md"


# ---------------------------------------------------------------------------------------------
# (a) The chapter is up to date.


def test_chapter_regions_equal_generator_output() -> None:
    text = CHAPTER.read_text(encoding="utf-8")
    found = ct.regions_in(text)
    assert set(found) == set(ct.REGIONS), "codec.md has missing or unknown generated regions"
    for name in ct.REGIONS:
        assert found[name] == ct.region(name), (
            f"region {name} of {CHAPTER} is stale: run python -m tools.regen"
        )
    assert ct.stale_regions(text) == []
    assert ct.render(text) == text


def test_required_regions_present() -> None:
    assert {"codec-tile-4bit", "codec-tile-8bit"} <= set(ct.REGIONS)


def test_main_check_and_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ct.main([]) == 0
    printed = capsys.readouterr().out
    assert ct.regions_in(printed) == {name: ct.region(name) for name in ct.REGIONS}
    doc = tmp_path / "codec.md"
    doc.write_text(
        "intro\n\n<!-- BEGIN GENERATED: codec-tile-4bit -->\nold\n<!-- END GENERATED -->\n",
        encoding="utf-8",
    )
    assert ct.main(["--check", str(doc)]) == 1
    assert ct.main(["--write", str(doc)]) == 1  # the other regions have no markers
    assert ct.regions_in(doc.read_text(encoding="utf-8"))["codec-tile-4bit"] == ct.region(
        "codec-tile-4bit"
    )
    doc.write_text(printed, encoding="utf-8")
    assert ct.main(["--check", str(doc)]) == 0


def test_duplicate_region_rejected() -> None:
    block = f"{ct.BEGIN.format(name='x')}\n{ct.END}\n"
    with pytest.raises(ValueError):
        ct.regions_in(block + block)


# ---------------------------------------------------------------------------------------------
# (b) The generator's formulas against the reference codec.


def _positions_from_reference(k: int, n: int, bits: int) -> np.ndarray:
    """For every (row, word, field) of ``swizzle_qweight``, the flat index ``k * n + n`` of the
    code stored there: the index is spread over several code arrays, ``bits`` bits each, so
    that every position is told apart although one array cannot hold distinct codes."""
    pf = 32 // bits
    index = np.arange(k * n, dtype=np.int64).reshape(k, n)
    planes = -(-int(k * n - 1).bit_length() // bits)
    out = np.zeros((k // 16, n * 16 // pf, pf), dtype=np.int64)
    for plane in range(planes):
        q = ((index >> (bits * plane)) & ((1 << bits) - 1)).astype(np.uint8)
        words = codec.swizzle_qweight(q, bits).view(np.uint32).astype(np.int64)
        fields = (words[..., None] >> (bits * np.arange(pf))) & ((1 << bits) - 1)
        out |= fields << (bits * plane)
    return out


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize(("k", "n"), [(16, 64), (32, 128), (48, 192)])
def test_forward_and_inverse_maps_match_reference(bits: int, k: int, n: int) -> None:
    where = _positions_from_reference(k, n, bits)
    rows, words, pf = where.shape
    seen = set()
    for row in range(rows):
        for word in range(words):
            for field in range(pf):
                kk, nn = ct.marlin_code_at(row, word, field, bits)
                assert int(where[row, word, field]) == kk * n + nn, (row, word, field)
                assert ct.marlin_position(kk, nn, bits) == (row, word, field)
                seen.add((kk, nn))
    assert len(seen) == k * n


@pytest.mark.parametrize("sub", [0, 1, 2, 3])
def test_distinct_codes_8bit(sub: int) -> None:
    """The 8-bit tile table on a q whose 256 non-zero codes are distinct: sub-tile ``sub`` of
    tile 0 holds ``16*k + (n % 16)``, the rest is 0.  (4-bit codes cannot be distinct over a
    tile; the bit-plane test above tells every 4-bit position apart instead.)"""
    q = np.zeros((16, 64), dtype=np.uint8)
    cols = slice(16 * sub, 16 * sub + 16)
    q[:, cols] = (16 * np.arange(16)[:, None] + np.arange(16)[None, :]).astype(np.uint8)
    words = codec.swizzle_qweight(q, 8).view(np.uint32)[0]
    for w in range(ct.tile_words(8)):
        for f in range(4):
            kk, nn = ct.marlin_code_at(0, w, f, 8)
            assert (int(words[w]) >> (8 * f)) & 0xFF == int(q[kk, nn])
    table = ct.tile_table(8)
    for w in range(16):
        lane, rest = divmod(w, 8)
        cells = [ct.marlin_code_at(0, w, f, 8) for f in range(4)]
        row = f"| {w} | {lane} | {rest // 2} | {rest % 2} | " + " | ".join(
            f"({kk}, {nn})" for kk, nn in cells
        )
        assert row + " |" in table


def test_marlin_md_check_value() -> None:
    fields = [ct.marlin_code_at(0, 0, f, 4) for f in range(8)]
    assert fields == [(0, 0), (8, 0), (0, 8), (8, 8), (1, 0), (9, 0), (1, 8), (9, 8)]


def _check_layer(bits: int) -> np.ndarray:
    k, n = ct.CHECK_K, ct.CHECK_N
    q = np.array(
        [[ct.check_code(bits, kk, nn) for nn in range(n)] for kk in range(k)], dtype=np.uint8
    )
    index = np.arange(k * n, dtype=np.uint64).reshape(k, n)
    vectorised = (
        ((index * np.uint64(ct.CHECK_MULTIPLIER)) & np.uint64(0xFFFFFFFF)) >> np.uint64(32 - bits)
    ).astype(np.uint8)
    assert np.array_equal(q, vectorised)
    return q


@pytest.mark.parametrize("bits", [4, 8])
def test_check_words_match_reference(bits: int) -> None:
    q = _check_layer(bits)
    mq = codec.swizzle_qweight(q, bits)
    payload = mq.astype("<i4").tobytes()
    for row, word in ct.check_words(bits):
        value = ct.marlin_word(row, word, bits, lambda kk, nn: int(q[kk, nn]))
        assert value == int(mq.view(np.uint32)[row, word])
        offset = 4 * (row * mq.shape[1] + word)
        assert payload[offset : offset + 4] == value.to_bytes(4, "little")
        assert f"`0x{value:08X}`" in ct.check_words_table(bits)


@pytest.mark.parametrize("bits", [4, 8])
def test_packing_words_match_reference(bits: int) -> None:
    q = _check_layer(bits)
    pf = 32 // bits
    awq = codec.awq_pack(q, bits).view(np.uint32)
    mz = codec.swizzle_zeros(q[:1], bits).view(np.uint32)

    def code(kk: int, nn: int) -> int:
        return int(q[kk, nn])

    for row in range(2):
        for col in range(ct.CHECK_N // pf):
            assert ct.awq_word(row, col, bits, code) == int(awq[row, col])
    for col in range(ct.CHECK_N // pf):
        assert ct.marlin_zero_word(0, col, bits, code) == int(mz[0, col])
    # The inverse of the AWQ order used by the chapter: code column j sits in field INV[j].
    inverse = [ct.AWQ_ORDER[bits].index(j) for j in range(pf)]
    assert inverse == ([0, 4, 1, 5, 2, 6, 3, 7] if bits == 4 else [0, 2, 1, 3])


@pytest.mark.parametrize(
    ("k", "group_size", "source"),
    [
        (256, 128, ct.grouped_scale_source),
        (256, 32, ct.grouped_scale_source),
        (256, -1, ct.channelwise_scale_source),
        (128, 128, ct.channelwise_scale_source),  # group_size == k: channelwise
    ],
)
def test_scale_maps_match_reference(k: int, group_size: int, source: object) -> None:
    assert callable(source)
    n = 192
    g = 1 if group_size == -1 else k // group_size
    s = (np.arange(g * n, dtype=np.float32).reshape(g, n)) % n
    out = codec.swizzle_scales(s, k, group_size)
    expect = np.array([[source(col) for col in range(n)]] * g, dtype=np.float32)
    assert np.array_equal(out, expect)
    # Both maps are involutions: the inverse is the map itself.
    assert all(source(source(col)) == col for col in range(n))


def test_scale_map_tables_are_permutations() -> None:
    for kind, width in (("grouped", 64), ("channelwise", 32)):
        table = ct.scale_map_table(kind)
        numbers = [
            int(cell)
            for line in table.splitlines()[2:]
            for cell in line.strip("| ").split(" | ")[1:]
        ]
        assert sorted(numbers) == list(range(width))
    with pytest.raises(ValueError):
        ct.scale_map_table("diagonal")


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ct.pack_factor(3)
    with pytest.raises(ValueError):
        ct.marlin_code_at(0, 0, 8, 4)
