"""Per-thread scratch memory (reference.ground.scratch) and the codec outputs that may use it.

The rules: outside ``reusing``/``keep`` every array is new; inside, the same key on the same
thread returns the same memory (grown when a larger one is asked for), other keys and other
threads never share it, and the memory is let go at the end of the block.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from reference.ground import scratch
from reference.quant import codec
from reference.quant.codec import CodecError


def test_outside_a_block_every_array_is_new():
    a = scratch.empty("k", (4, 8), np.uint32)
    b = scratch.empty("k", (4, 8), np.uint32)
    assert a.shape == (4, 8) and a.dtype == np.uint32
    assert not np.shares_memory(a, b)


def test_inside_a_block_a_key_reuses_its_memory_on_its_thread():
    with scratch.reusing():
        a = scratch.empty("k", (4, 8), np.uint32)
        b = scratch.empty("k", (2, 8), np.uint16)  # smaller: the same buffer
        other = scratch.empty("other", (4, 8), np.uint32)
        assert np.shares_memory(a, b)
        assert not np.shares_memory(a, other)
        assert b.shape == (2, 8) and b.dtype == np.uint16 and b.flags.c_contiguous
        big = scratch.empty("k", (64, 64), np.uint64)  # larger: a new buffer, kept
        assert not np.shares_memory(a, big)
        assert np.shares_memory(big, scratch.empty("k", (8,), np.uint8))
        with scratch.reusing():  # nested: the same buffers
            assert np.shares_memory(big, scratch.empty("k", (8,), np.uint8))
        assert np.shares_memory(big, scratch.empty("k", (8,), np.uint8))
        elsewhere: list[np.ndarray] = []
        thread = threading.Thread(
            target=lambda: elsewhere.append(scratch.empty("k", (8,), np.uint8))
        )
        thread.start()
        thread.join()
        assert not np.shares_memory(big, elsewhere[0])
    assert not np.shares_memory(big, scratch.empty("k", (8,), np.uint8))


def test_keep_makes_a_pool_thread_reuse():
    from concurrent.futures import ThreadPoolExecutor

    def two() -> bool:
        return np.shares_memory(
            scratch.empty("k", (16,), np.uint8), scratch.empty("k", (16,), np.uint8)
        )

    with ThreadPoolExecutor(1, initializer=scratch.keep) as pool:
        assert pool.submit(two).result()
    with ThreadPoolExecutor(1) as pool:
        assert not pool.submit(two).result()


@pytest.mark.parametrize("bits", [4, 8])
def test_awq_unpack_into_out_equals_a_fresh_result(bits):
    """awq_unpack(..., out=) writes the same codes as without it, into out, and returns out;
    with scratch reuse on, twice in a row on different words (the temporaries are reused)."""
    rng = np.random.default_rng(bits)
    k, n = 32, 64
    for _ in range(2):
        q = rng.integers(0, 2**bits, size=(k, n), dtype=np.uint8)
        words = codec.awq_pack(q, bits)
        out = np.empty((k, n), dtype=np.uint8)
        with scratch.reusing():
            got = codec.awq_unpack(words, bits, out=out)
            again = codec.awq_unpack(words, bits)
        assert got is out
        np.testing.assert_array_equal(out, q)
        np.testing.assert_array_equal(again, q)


def test_awq_unpack_refuses_a_wrong_out():
    words = codec.awq_pack(np.zeros((16, 64), dtype=np.uint8), 4)
    with pytest.raises(CodecError, match="shape"):
        codec.awq_unpack(words, 4, out=np.empty((16, 63), dtype=np.uint8))
    with pytest.raises(CodecError, match="must be uint8"):
        codec.awq_unpack(words, 4, out=np.empty((16, 64), dtype=np.int8))


@pytest.mark.parametrize("bits", [4, 8])
def test_blocks_of_rows_give_the_bytes_of_the_slow_reference(monkeypatch, bits):
    """The codec works in blocks of rows (``_BLOCK_BYTES``); with blocks of a few rows, and
    a last block shorter than the others, the Marlin words still equal the pure-Python
    reference of tests/marlin_slow.py and the codes still equal what was packed."""
    import marlin_slow as slow

    monkeypatch.setattr(codec, "_BLOCK_BYTES", 700)
    rng = np.random.default_rng(40 + bits)
    k, n = 16 * 5, 64  # five Marlin rows: blocks of 1 (bits 4: 1 KiB a row) or 2 rows
    q = rng.integers(0, 2**bits, size=(k, n), dtype=np.uint8)
    assert len(codec._row_blocks(k // 16, 16 * n)) > 1
    assert len(codec._row_blocks(k, n * bits // 8)) > 1
    with scratch.reusing():
        words = codec.awq_pack(q, bits)
        np.testing.assert_array_equal(codec.awq_unpack(words, bits), q)
        mq = codec.swizzle_qweight(q, bits)
    expected = np.array(slow.swizzle_qweight(q.tolist(), bits), dtype=np.int64).astype(np.uint32)
    np.testing.assert_array_equal(mq.view(np.uint32), expected)
