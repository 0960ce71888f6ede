"""The registries of AWQ-v2: data types, layouts, feature flags and error codes.

Each registry is a tuple of frozen records with a lookup dict beside it.  The
codes are on-disk numbers (dtypes, layouts, flag bits) or stable strings (error
codes) and never change meaning once published; new ones are only added.
"""

from __future__ import annotations

from dataclasses import dataclass

# --------------------------------------------------------------------------- dtypes


@dataclass(frozen=True)
class DType:
    """An element type of a stored tensor [ENT-4]."""

    code: int  #: the u8 stored in an entry's ``dtype`` field
    name: str  #: the name used by the API, the dump tool and the manifest
    itemsize: int  #: bytes per element
    #: NumPy dtype of the array a reader returns: a little-endian NumPy type, or for the
    #: types NumPy lacks the name that ``ml_dtypes`` registers with NumPy on import
    #: (``bfloat16``, ``float8_e4m3fn``, ``float8_e5m2``); their raw bits are the unsigned
    #: integer of the same item size (``array.view(np.uint16)`` for BF16).
    numpy: str
    meaning: str


DTYPES: tuple[DType, ...] = (
    DType(1, "BOOL", 1, "|b1", "boolean, one byte, 0 or 1"),
    DType(2, "U8", 1, "|u1", "unsigned 8-bit integer"),
    DType(3, "I8", 1, "|i1", "signed 8-bit integer"),
    DType(4, "U16", 2, "<u2", "unsigned 16-bit integer"),
    DType(5, "I16", 2, "<i2", "signed 16-bit integer"),
    DType(6, "U32", 4, "<u4", "unsigned 32-bit integer"),
    DType(7, "I32", 4, "<i4", "signed 32-bit integer (packed quantised words)"),
    DType(8, "U64", 8, "<u8", "unsigned 64-bit integer"),
    DType(9, "I64", 8, "<i8", "signed 64-bit integer"),
    DType(10, "F16", 2, "<f2", "IEEE 754 binary16"),
    DType(11, "BF16", 2, "bfloat16", "bfloat16: the top 16 bits of an IEEE 754 binary32"),
    DType(12, "F32", 4, "<f4", "IEEE 754 binary32"),
    DType(13, "F64", 8, "<f8", "IEEE 754 binary64"),
    DType(
        14, "F8_E4M3", 1, "float8_e4m3fn", "OCP FP8 E4M3FN: bias 7, no infinities, NaN S.1111.111"
    ),
    DType(15, "F8_E5M2", 1, "float8_e5m2", "OCP FP8 E5M2: bias 15, IEEE-like infinities and NaNs"),
)
DTYPE_BY_CODE = {d.code: d for d in DTYPES}
DTYPE_BY_NAME = {d.name: d for d in DTYPES}

#: dtypes a quantised layer's scales may have [LAY-6]; recorded as stored, never converted.
SCALE_DTYPES = frozenset({"F16", "BF16", "F32"})

# --------------------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    """How an entry's bytes are arranged [LAY-1]."""

    code: int  #: the u8 stored in an entry's ``layout`` field
    name: str
    role: str  #: "dense", "qweight", "scales" or "qzeros"
    quantized: bool  #: True when k, n, bits and group_size are meaningful
    reserved: bool  #: reserved for a future version: a 2.0 reader rejects it
    meaning: str


LAYOUTS: tuple[Layout, ...] = (
    Layout(0, "DENSE", "dense", False, False, "row-major (C order) array of the entry's shape"),
    Layout(
        1,
        "AWQ_QWEIGHT",
        "qweight",
        True,
        False,
        "AutoAWQ GEMM packing, int32 [k, n // pf]; for layers outside Marlin's shape rules",
    ),
    Layout(2, "AWQ_SCALES", "scales", True, False, "plain scales [G, n] of an AWQ_QWEIGHT layer"),
    Layout(
        3,
        "AWQ_QZEROS",
        "qzeros",
        True,
        False,
        "AutoAWQ GEMM-packed zero points, int32 [G, n // pf]",
    ),
    Layout(
        4,
        "MARLIN_QWEIGHT",
        "qweight",
        True,
        False,
        "Marlin tile layout, int32 [k // 16, n * 16 // pf] (vLLM awq_marlin_repack)",
    ),
    Layout(
        5,
        "MARLIN_SCALES",
        "scales",
        True,
        False,
        "Marlin-permuted scales [G, n] (vLLM marlin_permute_scales)",
    ),
    Layout(
        6,
        "MARLIN_QZEROS",
        "qzeros",
        True,
        False,
        "Marlin-permuted, AWQ-packed zero points, int32 [G, n // pf]",
    ),
    Layout(
        7, "MARLIN_W4A8_QWEIGHT", "qweight", True, True, "reserved: W4A8 (8-bit activation) tiling"
    ),
    Layout(8, "MARLIN_W4A8_SCALES", "scales", True, True, "reserved: W4A8 rescaled scales"),
    Layout(9, "MARLIN_W4A8_QZEROS", "qzeros", True, True, "reserved: W4A8 zero points"),
)
LAYOUT_BY_CODE = {layout.code: layout for layout in LAYOUTS}
LAYOUT_BY_NAME = {layout.name: layout for layout in LAYOUTS}


# --------------------------------------------------------------------------- flags


@dataclass(frozen=True)
class Flag:
    """A feature flag bit [VER-3]."""

    bit: int
    name: str
    required: bool  #: in ``required_flags`` (readers fail closed) or ``optional_flags``
    since: str
    meaning: str


#: Version 2.0 defines no flags: every bit of both sets is reserved.  A 2.0 reader
#: rejects any required bit and ignores every optional bit [VER-3, VER-4].
FLAGS: tuple[Flag, ...] = ()
KNOWN_REQUIRED_FLAGS = sum(1 << f.bit for f in FLAGS if f.required)
KNOWN_OPTIONAL_FLAGS = sum(1 << f.bit for f in FLAGS if not f.required)

# --------------------------------------------------------------------------- error codes


@dataclass(frozen=True)
class ErrorCode:
    """A stable error code.  Readers raise the class named here with this code [RD-3]."""

    code: str
    error_class: str
    requirements: tuple[str, ...]
    meaning: str


ERROR_CODES: tuple[ErrorCode, ...] = (
    ErrorCode(
        "TRUNCATED", "TruncatedError", ("FILE-1",), "the file ends before a structure it must hold"
    ),
    ErrorCode("BAD_MAGIC", "HeaderError", ("HDR-1",), "the first 8 bytes are not the magic"),
    ErrorCode("UNSUPPORTED_VERSION", "VersionError", ("VER-2",), "major version other than 2"),
    ErrorCode(
        "BAD_HEADER_CHECKSUM",
        "ChecksumError",
        ("HDR-4",),
        "CRC-32C of the header does not match header_crc",
    ),
    ErrorCode(
        "UNKNOWN_REQUIRED_FLAG",
        "VersionError",
        ("VER-3",),
        "a required_flags bit this reader does not implement",
    ),
    ErrorCode(
        "BAD_HEADER_FIELD",
        "HeaderError",
        ("HDR-2", "HDR-3", "HDR-5"),
        "a header field with a fixed or derived value disagrees, or reserved bytes are set",
    ),
    ErrorCode(
        "FILE_SIZE_MISMATCH",
        "TruncatedError",
        ("FILE-2",),
        "file_size in the header differs from the real size",
    ),
    ErrorCode("LIMIT_TENSORS", "LimitError", ("LIM-2",), "tensor_count over max_tensors"),
    ErrorCode("LIMIT_NAME_LENGTH", "LimitError", ("LIM-3",), "a name longer than max_name_length"),
    ErrorCode("LIMIT_DIMS", "LimitError", ("LIM-4",), "ndim over max_dims"),
    ErrorCode(
        "LIMIT_METADATA",
        "LimitError",
        ("LIM-5", "META-6"),
        "metadata longer than max_metadata_length or nested deeper than max_metadata_depth",
    ),
    ErrorCode("LIMIT_BUCKET", "LimitError", ("LIM-6",), "a bucket longer than max_bucket_length"),
    ErrorCode(
        "BAD_INDEX_LAYOUT",
        "IndexCorruptError",
        ("FILE-4", "IDX-1", "IDX-3", "IDX-5", "IDX-10", "LIM-7"),
        "index offset, length, section sizes or bucket_bits inconsistent with the header",
    ),
    ErrorCode(
        "BAD_TRAILER_MAGIC",
        "TrailerError",
        ("TRL-1",),
        "the last 8 bytes are not the trailer magic",
    ),
    ErrorCode(
        "BAD_TRAILER_CHECKSUM",
        "ChecksumError",
        ("TRL-2",),
        "CRC-32C of the trailer does not match trailer_crc",
    ),
    ErrorCode(
        "TRAILER_MISMATCH", "TrailerError", ("TRL-3",), "the trailer disagrees with the header"
    ),
    ErrorCode(
        "BAD_INDEX_CHECKSUM",
        "ChecksumError",
        ("IDX-4",),
        "CRC-32C of the index region does not match index_crc",
    ),
    ErrorCode(
        "BAD_BUCKET_TABLE",
        "IndexCorruptError",
        ("IDX-5", "IDX-6"),
        "bucket table not monotonic, not starting at 0 or not ending at tensor_count",
    ),
    ErrorCode(
        "BAD_ENTRY_CHECKSUM",
        "ChecksumError",
        ("ENT-9",),
        "CRC-32C of an entry, its name and its dims does not match entry_crc",
    ),
    ErrorCode(
        "BAD_ENTRY_FIELD",
        "EntryError",
        ("ENT-1", "ENT-2", "ENT-3"),
        "reserved entry bits set, or name/dims not where the canonical packing puts them",
    ),
    ErrorCode(
        "BAD_NAME_HASH", "IndexCorruptError", ("IDX-7",), "name_hash is not FNV-1a 64 of the name"
    ),
    ErrorCode(
        "BAD_ENTRY_ORDER",
        "IndexCorruptError",
        ("IDX-6", "IDX-8"),
        "entry in the wrong bucket, or names in a bucket not strictly ascending",
    ),
    ErrorCode("EMPTY_NAME", "TensorNameError", ("NAME-1",), "a zero-length tensor name"),
    ErrorCode("BAD_NAME_UTF8", "TensorNameError", ("NAME-2",), "a name that is not valid UTF-8"),
    ErrorCode("DUPLICATE_NAME", "TensorNameError", ("NAME-3",), "two entries with the same name"),
    ErrorCode("BAD_DTYPE", "EntryError", ("ENT-4",), "dtype code not in the registry"),
    ErrorCode("BAD_LAYOUT", "EntryError", ("LAY-1",), "layout code unknown or reserved"),
    ErrorCode(
        "BAD_SHAPE",
        "EntryError",
        ("ENT-5",),
        "a shape whose byte size breaks the bound of ENT-5",
    ),
    ErrorCode(
        "BAD_LENGTH", "EntryError", ("ENT-6",), "data_length is not product(shape) x itemsize"
    ),
    ErrorCode(
        "MISALIGNED_OFFSET", "EntryError", ("SLAB-2",), "data_offset not a multiple of 65536"
    ),
    ErrorCode("OUT_OF_BOUNDS", "EntryError", ("SLAB-3",), "payload outside the slab"),
    ErrorCode("OVERLAP", "EntryError", ("SLAB-4",), "two payloads share bytes"),
    ErrorCode(
        "SLAB_GAP",
        "EntryError",
        ("SLAB-5",),
        "a payload or the index starts later than the next 64 KiB boundary",
    ),
    ErrorCode(
        "BAD_QUANT_FIELDS",
        "EntryError",
        ("LAY-2", "LAY-3", "LAY-4", "LAY-5", "LAY-6", "LAY-7", "LAY-10"),
        "k, n, bits or group_size contradict the layout, dtype or shape, a layer's "
        "entries disagree, or a layer's bias is not DENSE, a float dtype and [n]",
    ),
    ErrorCode(
        "NONZERO_PADDING",
        "PaddingError",
        ("PAD-1", "PAD-2", "PAD-3"),
        "a padding byte is not zero (possible hidden payload)",
    ),
    ErrorCode(
        "BAD_METADATA",
        "MetadataError",
        ("META-1", "META-2", "META-5", "META-6"),
        "metadata is not UTF-8, not a JSON object, has duplicate keys, an out-of-range or "
        "over-long number, or an unpaired surrogate",
    ),
    ErrorCode(
        "BAD_METADATA_CHECKSUM",
        "ChecksumError",
        ("META-4",),
        "CRC-32C of the metadata does not match metadata_crc",
    ),
    ErrorCode(
        "UNSUPPORTED_LAYOUT",
        "UnsupportedError",
        ("LAY-9",),
        "a valid optional layout (8-bit Marlin) that this reader does not implement",
    ),
    ErrorCode(
        "V1_UNSUPPORTED",
        "LegacyError",
        ("V1-2",),
        "an AWQ v1 checkpoint this reader cannot read exactly (method, version, zero point, bits)",
    ),
    ErrorCode(
        "V1_INCOMPLETE",
        "LegacyError",
        ("V1-3",),
        "an AWQ v1 checkpoint with a missing shard or tensor, or a truncated safetensors file",
    ),
    ErrorCode(
        "V1_SHAPE_MISMATCH",
        "LegacyError",
        ("V1-4",),
        "AWQ v1 tensors whose shapes disagree with each other or with the configuration",
    ),
    ErrorCode(
        "V1_BAD_CONFIG",
        "LegacyError",
        ("V1-2",),
        "config.json or quant_config.json unreadable, or quantised tensors without a config",
    ),
    ErrorCode(
        "CT_UNSUPPORTED",
        "LegacyError",
        ("CT-2",),
        "a compressed-tensors checkpoint this reader cannot read exactly (format, bits, type, "
        "strategy, activation ordering, activation or KV-cache quantisation, sparsity, transforms)",
    ),
    ErrorCode(
        "CT_INCOMPLETE",
        "LegacyError",
        ("CT-4",),
        "a compressed-tensors checkpoint with a missing shard, tensor or layer part, or a "
        "truncated safetensors file",
    ),
    ErrorCode(
        "CT_SHAPE_MISMATCH",
        "LegacyError",
        ("CT-5",),
        "compressed-tensors layer parts whose shapes or dtypes disagree with each other, with "
        "weight_shape or with the configuration",
    ),
    ErrorCode(
        "CT_BAD_CONFIG",
        "LegacyError",
        ("CT-3",),
        "a quantization_config that is not the compressed-tensors "
        "schema, or compressed-tensors tensors without one",
    ),
    ErrorCode(
        "BAD_TENSOR_CHECKSUM",
        "ChecksumError",
        ("ENT-10",),
        "CRC-32C of a payload does not match data_crc (found by verify)",
    ),
    ErrorCode(
        "SET_BAD_MANIFEST",
        "SetError",
        ("SET-2", "SET-4"),
        "a set manifest that is not a JSON object of the set schema, or names a file that is "
        "not a plain .awq2 name in its folder or is listed twice",
    ),
    ErrorCode(
        "SET_UNSUPPORTED",
        "SetError",
        ("SET-3",),
        "a set manifest of another awq2_set version, or of an unknown kind",
    ),
    ErrorCode(
        "SET_MISSING_FILE", "SetError", ("SET-5",), "a file the set manifest lists is absent"
    ),
    ErrorCode(
        "SET_FILE_MISMATCH",
        "SetError",
        ("SET-5",),
        "a member whose length or header_crc is not what the set manifest says",
    ),
    ErrorCode("SET_RANK_MISSING", "SetError", ("SET-5",), "a rank of a rank set without a file"),
    ErrorCode(
        "SET_EXTRA_FILE",
        "SetError",
        ("SET-8",),
        "an .awq2 file in a set's folder that its manifest does not list",
    ),
    ErrorCode(
        "SET_DUPLICATE_NAME",
        "SetError",
        ("SET-6",),
        "a tensor name in two members of a split set, or of one rank of a rank set",
    ),
    ErrorCode(
        "SET_RANK_MISMATCH",
        "SetError",
        ("SET-7",),
        "ranks of a rank set holding different names, or a name with different fields",
    ),
    ErrorCode(
        "SET_WRONG_RANK",
        "SetError",
        ("SET-15",),
        "a member whose own record of its rank and tensor-parallel degree (its metadata's "
        "awq2_rank) is absent, malformed (not an object of two integers, null included) or not "
        "the set manifest's, or a split set's member that has one, whatever its value",
    ),
    ErrorCode(
        "SET_BAD_SHA256",
        "SetError",
        ("SET-8",),
        "a member whose SHA-256 is not the set manifest's (found by verify)",
    ),
    ErrorCode(
        "NOT_QUANTISED",
        "LegacyError",
        ("CONV-4",),
        "a checkpoint with no quantised layer, given to a converter (quantise it first)",
    ),
    ErrorCode(
        "CONFIG_NOT_WEIGHTS",
        "LegacyError",
        ("V1-1", "CT-1"),
        "a model's configuration (a checkpoint's config.json) given where its weights were "
        "expected: the model is the folder that holds both (reading tools)",
    ),
    ErrorCode(
        "TP_NO_RULE",
        "SplitError",
        ("SET-11",),
        "a quantised layer that no tensor-parallel rule names (writing a rank set)",
    ),
    ErrorCode(
        "TP_BAD_SHARD",
        "SplitError",
        ("SET-11", "SET-12"),
        "a tensor-parallel cut that does not divide evenly, or a shard that breaks its layout's "
        "shape rules (writing a rank set)",
    ),
    ErrorCode(
        "TP_BAD_CONFIG",
        "SplitError",
        ("SET-11", "SET-12"),
        "attention-head counts missing from config.json or not matching a layer, or an "
        "architecture without a rule table (writing a rank set)",
    ),
    ErrorCode(
        "TP_RANK_REQUIRED",
        "SplitError",
        ("SET-13",),
        "one rank's part of a tensor or layer asked of a whole rank set without a rank "
        "(reading a rank set)",
    ),
    ErrorCode(
        "TP_METADATA_MISMATCH",
        "SplitError",
        ("SET-14",),
        "members of a rank set whose metadata differ (reading a rank set's metadata)",
    ),
)
ERROR_BY_CODE = {e.code: e for e in ERROR_CODES}
