"""The per-entry rules of AWQ-v2, shared by the writer, the lazy lookup and full validation.

One function per concern, each raising the registered error for the first rule
broken.  The writer runs the same checks on what it is asked to store, so a
file the writer accepts to write is one the reader accepts to read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reference.ground.errors import error, field_error
from spec.constants import ALIGNMENT, MAX_DIMS
from spec.marlin import GEMM_MIN_K, MARLIN_GROUP_SIZES, QUANT_BITS, TILE_K, TILE_N, pack_factor
from spec.registry import DTYPE_BY_CODE, LAYOUT_BY_CODE, LAYOUT_BY_NAME, SCALE_DTYPES

#: Largest extent (non-zero dimensions x itemsize) an array library with signed 64-bit sizes
#: (NumPy's intp, PyTorch) can describe, even for a tensor with a zero dimension.
_MAX_EXTENT = (1 << 63) - 1


@dataclass(frozen=True)
class TensorInfo:
    """What the index says about one tensor (``Reader.entry(name)``)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    layout: str
    offset: int
    length: int
    data_crc: int
    bits: int = 0
    group_size: int = 0
    k: int = 0
    n: int = 0

    @property
    def quantized(self) -> bool:
        return self.layout != "DENSE"

    def to_dict(self) -> dict[str, object]:
        """Stable keys for ``dump --json`` and the conformance adapter."""
        out: dict[str, object] = {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "layout": self.layout,
            "offset": self.offset,
            "length": self.length,
            "crc32c": f"{self.data_crc:08x}",
        }
        if self.quantized:
            out.update(bits=self.bits, group_size=self.group_size, k=self.k, n=self.n)
        return out


def json_depth(value: object) -> int:
    """Nesting depth of JSON arrays and objects (a scalar is 0), without recursion [LIM-5].

    Walks with one iterator per open level, so its memory follows the depth, not the number
    of elements (a 16 MiB array of small numbers holds 8 million of them)."""
    deepest, stack = 0, [iter((value,))]
    while stack:
        for item in stack[-1]:
            if isinstance(item, dict):
                stack.append(iter(item.values()))
            elif isinstance(item, (list, tuple)):
                stack.append(iter(item))
            else:
                continue
            deepest = max(deepest, len(stack) - 1)
            break
        else:
            stack.pop()
    return deepest


def element_count(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def extent_fits(shape: tuple[int, ...], itemsize: int) -> bool:
    """The non-zero dimensions x itemsize fit in a signed 64-bit size, so NumPy (or PyTorch)
    can describe the shape even when a zero dimension leaves no elements [ENT-5]."""
    return element_count(tuple(d for d in shape if d)) * itemsize <= _MAX_EXTENT


def check_dims(ndim: int, *, offset: int) -> None:
    """ndim within the limit [LIM-4], before the dims are read."""
    if ndim > MAX_DIMS:
        raise field_error("LIMIT_DIMS", "too many dimensions", offset, f"ndim <= {MAX_DIMS}", ndim)


def check_payload(
    shape: tuple[int, ...],
    dtype_code: int,
    data_offset: int,
    data_length: int,
    *,
    slab_offset: int,
    slab_end: int,
    offset: int,
) -> str:
    """dtype, shape, length, alignment and bounds of one payload [ENT-4..6, SLAB-2, SLAB-3].

    Returns the dtype name.  ``offset`` is the file offset of the entry, for errors.
    """
    dtype = check_extent(shape, dtype_code, data_length, offset=offset)
    check_placement(data_offset, data_length, slab_offset=slab_offset, slab_end=slab_end,
                    offset=offset)  # fmt: skip
    return dtype


def check_extent(shape: tuple[int, ...], dtype_code: int, data_length: int, *, offset: int) -> str:
    """A known dtype, a describable shape, and a length that is their product [ENT-4..6].

    Returns the dtype name."""
    dtype = DTYPE_BY_CODE.get(dtype_code)
    if dtype is None:
        raise field_error(
            "BAD_DTYPE", "unknown dtype code", offset, f"one of {sorted(DTYPE_BY_CODE)}", dtype_code
        )
    nbytes = element_count(shape) * dtype.itemsize  # Python int: cannot overflow [ENT-5]
    if not extent_fits(shape, dtype.itemsize):  # [ENT-5]; then nbytes < 2**63 as well
        raise field_error(
            "BAD_SHAPE",
            "non-zero dimensions x itemsize do not fit in a signed 64-bit size",
            offset,
            "< 2**63",
            f"{shape} x {dtype.itemsize}",
        )
    if data_length != nbytes:
        raise field_error(
            "BAD_LENGTH",
            "data_length is not product(shape) x itemsize",
            offset,
            nbytes,
            data_length,
        )
    return dtype.name


def check_placement(
    data_offset: int, data_length: int, *, slab_offset: int, slab_end: int, offset: int
) -> None:
    """The payload starts on a 64 KiB boundary and lies inside the slab [SLAB-2, SLAB-3]."""
    if data_offset % ALIGNMENT:
        raise field_error(
            "MISALIGNED_OFFSET",
            "payload offset not 64 KiB aligned",
            offset,
            f"multiple of {ALIGNMENT}",
            data_offset,
        )
    if data_offset < slab_offset or data_offset + data_length > slab_end:
        raise field_error(
            "OUT_OF_BOUNDS",
            "payload outside the slab",
            offset,
            f"[{slab_offset}, {slab_end})",
            f"[{data_offset}, {data_offset + data_length})",
        )


def expected_quant_shape(
    layout: str, bits: int, group_size: int, k: int, n: int
) -> tuple[int, ...]:
    """The stored shape a quantised layout has for a layer [LAY-5]."""
    pf = pack_factor(bits)
    groups = 1 if group_size == -1 else k // group_size
    return {
        "AWQ_QWEIGHT": (k, n // pf),
        "AWQ_SCALES": (groups, n),
        "AWQ_QZEROS": (groups, n // pf),
        "MARLIN_QWEIGHT": (k // TILE_K, n * TILE_K // pf),
        "MARLIN_SCALES": (groups, n),
        "MARLIN_QZEROS": (groups, n // pf),
    }[layout]


def check_layout(
    layout_code: int,
    dtype: str,
    shape: tuple[int, ...],
    bits: int,
    group_size: int,
    k: int,
    n: int,
    *,
    offset: int,
) -> str:
    """Layout code and quantisation fields agree with dtype and shape [LAY-1..LAY-6].

    Returns the layout name.
    """
    layout = LAYOUT_BY_CODE.get(layout_code)
    if layout is None or layout.reserved:
        raise field_error(
            "BAD_LAYOUT",
            "unknown or reserved layout code",
            offset,
            "a non-reserved layout code",
            layout_code,
        )
    if not layout.quantized:
        if bits or group_size or k or n:
            raise field_error(
                "BAD_QUANT_FIELDS",
                "DENSE entry with quantisation fields set",
                offset,
                "bits = group_size = k = n = 0",
                f"bits={bits} group_size={group_size} k={k} n={n}",
            )
        return layout.name

    def bad(rule: str, expected: object, found: object) -> Exception:
        return error(
            "BAD_QUANT_FIELDS",
            f"{layout.name}: {rule}",
            offset=offset,
            expected=expected,
            found=found,
        )

    if bits not in QUANT_BITS:
        raise bad("bits", "4 or 8", bits)
    if k < 1 or n < 1:
        raise bad("k and n", ">= 1", f"k={k} n={n}")
    if group_size != -1 and (group_size < 1 or k % group_size):
        raise bad("group_size divides k", f"-1 or a divisor of k={k}", group_size)
    if n % pack_factor(bits):
        raise bad("n % pack factor", f"multiple of {pack_factor(bits)}", n)
    if layout.name.startswith("MARLIN_"):
        if group_size not in MARLIN_GROUP_SIZES:
            raise bad("Marlin group size", sorted(MARLIN_GROUP_SIZES), group_size)
        if k % GEMM_MIN_K or n % TILE_N:
            raise bad(
                "Marlin shape rule k % 128 == 0 and n % 64 == 0",
                "k % 128 == 0, n % 64 == 0",
                f"k={k} n={n}",
            )
    want_dtype = SCALE_DTYPES if layout.role == "scales" else frozenset({"I32"})
    if dtype not in want_dtype:
        raise bad("dtype", sorted(want_dtype), dtype)
    want_shape = expected_quant_shape(layout.name, bits, group_size, k, n)
    if shape != want_shape:
        raise bad("shape", list(want_shape), list(shape))
    return layout.name


#: The layouts whose entry makes ``<prefix>.bias`` a layer's bias [LAY-10].
QWEIGHT_LAYOUTS = frozenset({"AWQ_QWEIGHT", "MARLIN_QWEIGHT"})


def check_bias(bias: TensorInfo, qweight: TensorInfo, *, offset: int) -> None:
    """A layer's ``<prefix>.bias`` is DENSE, F16, BF16 or F32, of shape ``[n]`` [LAY-10]."""
    found = (bias.layout, bias.dtype, list(bias.shape))
    if bias.layout != "DENSE" or bias.dtype not in SCALE_DTYPES or bias.shape != (qweight.n,):
        raise field_error(
            "BAD_QUANT_FIELDS",
            f"{bias.name!r} is the bias of a layer with n = {qweight.n}, but does not fit it",
            offset,
            f"DENSE, one of {sorted(SCALE_DTYPES)}, [{qweight.n}]",
            found,
        )


def check_layers(infos: Sequence[TensorInfo], offset_of: Callable[[int], int]) -> None:
    """Every quantised entry is ``<prefix>.<role>`` of a layer whose qweight, scales and
    qzeros all exist, share one layout family and record one k, n, bits and group size
    [LAY-7]; a layer's ``<prefix>.bias`` fits it [LAY-10].  ``infos`` in index order; the
    first offender is reported, at ``offset_of(i)`` of the entry being checked (the entry's
    record for a reader)."""
    by_name = {info.name: (i, info) for i, info in enumerate(infos)}
    for i, info in enumerate(infos):
        layout = LAYOUT_BY_NAME[info.layout]
        stem, dot, last = info.name.rpartition(".")
        qweight = by_name.get(f"{stem}.qweight") if dot and last == "bias" else None
        if qweight is not None and qweight[1].layout in QWEIGHT_LAYOUTS:
            check_bias(info, qweight[1], offset=offset_of(i))  # [LAY-10]
        if not layout.quantized:
            continue
        family = info.layout.split("_", 1)[0]
        prefix, dot, role = info.name.rpartition(".")
        if not dot or role != layout.role:
            raise field_error(
                "BAD_QUANT_FIELDS",
                f"{info.name!r} has layout {info.layout} but is not named <prefix>.{layout.role}",
                offset_of(i),
                f"<prefix>.{layout.role}",
                info.name,
            )
        for part in ("qweight", "scales", "qzeros"):
            found = by_name.get(f"{prefix}.{part}")
            want = f"{family}_{part.upper()}"
            if found is None:
                raise field_error(
                    "BAD_QUANT_FIELDS",
                    f"{info.name!r} belongs to a layer without {prefix}.{part}",
                    offset_of(i),
                    f"an entry {prefix}.{part} with layout {want}",
                    "none",
                )
            _, other = found
            fields = (other.k, other.n, other.bits, other.group_size)
            if other.layout != want or fields != (info.k, info.n, info.bits, info.group_size):
                raise field_error(
                    "BAD_QUANT_FIELDS",
                    f"{prefix}.{part} disagrees with {info.name!r}",
                    offset_of(i),
                    f"{want} k={info.k} n={info.n} bits={info.bits} group_size={info.group_size}",
                    f"{other.layout} k={other.k} n={other.n} bits={other.bits} "
                    f"group_size={other.group_size}",
                )
