"""Every fixed number of the AWQ-v2 container, in one place.

Nothing else in `spec`, `reference` or `conformance` spells a magic, a version,
an alignment or a limit as a literal: they import it from here.  Structure sizes
(header, trailer, entry) live with the structures in :mod:`spec.schema`.
"""

from __future__ import annotations

from dataclasses import dataclass

#: First 8 bytes of every AWQ-v2 file [HDR-1].  PNG-style: the high-bit first
#: byte catches 7-bit transports, CR LF catches line-ending conversion, 0x1A
#: stops `type` on DOS, the final LF catches LF -> CR LF conversion.
MAGIC = b"\x89AWQ\r\n\x1a\n"

#: Last 8 bytes of every AWQ-v2 file [TRL-1].
TRAILER_MAGIC = b"\x89AWQEND\n"

#: Format version written by this implementation [VER-1].
VERSION_MAJOR = 2
VERSION_MINOR = 0
#: The specification's own version: 2.1 added file sets (docs/spec/sets.md) and changed nothing
#: inside a file, so files still carry 2.0 [VER-1].
SPEC_VERSION = "2.1"

#: Every payload offset and the slab start are multiples of this [SLAB-2].
ALIGNMENT = 0x10000

#: Offset of the first payload; the bytes before it (after the header) are zero [PAD-1].
SLAB_OFFSET = 0x10000

#: Alignment of the sections inside the index [IDX-2].
INDEX_SECTION_ALIGN = 8


@dataclass(frozen=True)
class Limit:
    """One normative limit.  Readers check it before allocating anything [LIM-1]."""

    name: str
    value: int
    unit: str
    requirement: str
    meaning: str


#: The limits of AWQ-v2 2.0 [LIM-1..LIM-7].  A writer MUST NOT exceed them and a
#: reader MUST reject a file that does, before it allocates memory for the item.
LIMITS: tuple[Limit, ...] = (
    Limit("max_tensors", 1 << 24, "entries", "LIM-2", "tensor_count in the header"),
    Limit("max_name_length", 1024, "bytes", "LIM-3", "UTF-8 length of one tensor name"),
    Limit("max_dims", 8, "dimensions", "LIM-4", "ndim of one entry"),
    Limit("max_metadata_length", 16 << 20, "bytes", "LIM-5", "UTF-8 JSON metadata document"),
    Limit("max_metadata_depth", 64, "levels", "LIM-5", "nesting of arrays and objects"),
    Limit("max_bucket_length", 64, "entries", "LIM-6", "entries sharing one hash bucket"),
    Limit("max_bucket_bits", 24, "bits", "LIM-7", "log2 of the bucket count"),
)

_BY_NAME = {limit.name: limit.value for limit in LIMITS}
MAX_TENSORS: int = _BY_NAME["max_tensors"]
MAX_NAME_LENGTH: int = _BY_NAME["max_name_length"]
MAX_DIMS: int = _BY_NAME["max_dims"]
MAX_METADATA_LENGTH: int = _BY_NAME["max_metadata_length"]
MAX_METADATA_DEPTH: int = _BY_NAME["max_metadata_depth"]
MAX_BUCKET_LENGTH: int = _BY_NAME["max_bucket_length"]
MAX_BUCKET_BITS: int = _BY_NAME["max_bucket_bits"]

# ---- file sets (spec 2.1; docs/spec/sets.md)

#: Name of a file set's manifest in its folder [SET-1].
SET_MANIFEST = "model.awq2.set.json"
#: Version of the manifest's layout, its ``awq2_set`` member [SET-3].
SET_VERSION = 1
#: The most member files one manifest may list [SET-2].
MAX_SET_FILES = 1 << 16
#: The reserved metadata key under which each member of a rank set records its own rank and
#: tensor-parallel degree, ``{"rank": r, "tp_size": T}`` [SET-15].
SET_RANK_KEY = "awq2_rank"

#: Largest value of a u64 field.
U64_MAX = (1 << 64) - 1
#: Rank sets: a vocabulary table is padded to a multiple of this many rows before it is cut
#: (vLLM's ``DEFAULT_VOCAB_PADDING_SIZE``, vllm/model_executor/layers/vocab_parallel_embedding.py
#: line 36 in 0.33.0) [SET-11].
VOCAB_PADDING = 64
