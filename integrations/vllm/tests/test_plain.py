"""``awq2_vllm.plain.packed_along``: the CPU kernel's packed ``qweight`` (codes packed eight to
a word down the rows) equals the reference codec's compressed-tensors packing of the
transposed codes, transposed back, word for word; what is not 4-bit codes is refused as the
codec refuses it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from awq2_vllm.plain import packed_along

from reference.quant import codec


@pytest.mark.parametrize(("k", "n"), [(8, 1), (16, 64), (2048, 576), (568, 2048)])
def test_packing_down_the_rows_is_the_codecs_packing_of_the_transpose(k: int, n: int) -> None:
    codes = np.random.default_rng(k + n).integers(0, 16, (k, n), dtype=np.uint8)
    expected = np.ascontiguousarray(codec.ct_pack(np.ascontiguousarray(codes.T), 4).T)
    got = packed_along(codes, axis=0)
    assert got.dtype == torch.int32 and got.shape == (k // 8, n)
    assert np.array_equal(got.numpy(), expected)


def test_what_is_not_four_bit_codes_is_refused_as_the_codec_refuses_it() -> None:
    codes = np.full((8, 8), 16, dtype=np.uint8)
    with pytest.raises(codec.CodecError):
        packed_along(codes, axis=0)
