"""Every normative statement of the AWQ-v2 2.0 specification, with its stable id.

The spec text (``docs/spec/format.md``) renders these statements from here, so
the id, the RFC 2119 keyword and the words are written once.  Code comments,
tests and conformance vectors cite the ids.  Ids are never reused or renumbered.
"""

from __future__ import annotations

from dataclasses import dataclass

from spec.constants import (
    MAX_METADATA_DEPTH,
    MAX_METADATA_LENGTH,
    MAX_SET_FILES,
    SET_MANIFEST,
    SET_RANK_KEY,
    SET_VERSION,
    VOCAB_PADDING,
)


@dataclass(frozen=True)
class Requirement:
    id: str
    level: str  #: "MUST", "SHOULD" or "MAY" (RFC 2119)
    text: str
    #: what the statement constrains: "file", "set" (file sets) and "reader" statements are
    #: checked by conformance vectors; "writer", "converter" and "spec" ones by the test suite, and so
    #: are "runtime" ones (what a reader does while the open file changes under it, which a
    #: static vector cannot show, and how it presents the values it read to its caller), and "adapter" ones (how a loader reports what it read to the
    #: conformance runner, docs/conformance/index.md).
    subject: str = "file"


def _r(rid: str, level: str, text: str, subject: str = "file") -> Requirement:
    return Requirement(rid, level, text, subject)


REQUIREMENTS: tuple[Requirement, ...] = (
    # ---- file
    _r(
        "FILE-1",
        "MUST",
        "A reader MUST reject a file that ends before a structure it has to read "
        "(the 128-byte header, the trailer, the index region, a payload) with `TRUNCATED`, "
        "and MUST NOT read past the end of the file.",
    ),
    _r("FILE-2", "MUST", "The header's `file_size` MUST equal the length of the file."),
    _r(
        "FILE-3",
        "MUST",
        "Every integer in the file MUST be little-endian; offsets and lengths are u64.",
    ),
    _r(
        "FILE-4",
        "MUST",
        "A file MUST consist of the header, zero padding to `0x10000`, the slab, "
        "the index region and the trailer, in that order, with no other bytes: "
        "`index_offset + index_length + 32 == file_size`, an equation a reader MUST evaluate "
        "without overflow (in 128 bits, or by checking each term against `file_size`).",
    ),
    # ---- header
    _r(
        "HDR-1",
        "MUST",
        "The first 8 bytes MUST be `89 41 57 51 0D 0A 1A 0A`. A reader MUST compare the first "
        "`min(8, file length)` bytes with the magic before anything else: bytes that differ are "
        "`BAD_MAGIC`, whatever the length (the 6 bytes `GIF89a` included); a file that is a "
        "proper prefix of the magic, the empty file included, is `TRUNCATED`.",
    ),
    _r("HDR-2", "MUST", "`alignment` MUST be 65536 and `slab_offset` MUST be `0x10000`."),
    _r("HDR-3", "MUST", "`index_offset` MUST be a multiple of 65536 and at least `slab_offset`."),
    _r(
        "HDR-4",
        "MUST",
        "`header_crc` MUST equal the CRC-32C of header bytes 0 to 123; a reader "
        "MUST check it on every open, after the version and before any other field is trusted.",
    ),
    _r(
        "HDR-5",
        "MUST",
        "A writer MUST write reserved bytes as zero. A reader MUST reject non-zero "
        "reserved header bytes when the file's minor version is not greater than the reader's, and "
        "MUST ignore them otherwise. The reader's minor version is that of the file format it "
        "implements, not of the specification: 0 for a reader of specification 2.0 or 2.1 (2.1 "
        "changed nothing inside a file, VER-1), so such a reader rejects them in a 2.0 file "
        "and ignores them in a 2.1 file.",
    ),
    # ---- versioning
    _r(
        "VER-1",
        "MUST",
        "A writer of this specification MUST write `version_major = 2` and "
        "`version_minor = 0` (2.1 changed nothing inside a file: a file set's members, SET-1, "
        "are 2.0 files). A reader MUST accept every minor version of major version 2.",
    ),
    _r(
        "VER-2",
        "MUST",
        "A reader MUST reject a major version other than 2 with "
        "`UNSUPPORTED_VERSION`, checked where RD-1 puts it: after the magic and the minimum "
        "size, before the header checksum (a later major version may lay the header out "
        "differently).",
    ),
    _r(
        "VER-3",
        "MUST",
        "A reader MUST reject a file with a `required_flags` bit it does not "
        "implement (`UNKNOWN_REQUIRED_FLAG`). Version 2.0 defines no flag: a 2.0 reader rejects "
        "every set bit.",
    ),
    _r("VER-4", "MUST", "A reader MUST ignore `optional_flags` bits it does not know."),
    _r(
        "VER-5",
        "MUST",
        "A later minor version MUST stay readable by an earlier 2.x reader that "
        "ignores what it does not know; a feature that such a reader cannot ignore safely MUST set "
        "a required flag.",
        subject="spec",
    ),
    # ---- padding
    _r("PAD-1", "MUST", "Bytes 128 to `0xFFFF` MUST be zero."),
    _r("PAD-2", "MUST", "Every byte of the slab that lies in no payload MUST be zero."),
    _r("PAD-3", "MUST", "The padding after the bucket table MUST be zero."),
    _r(
        "PAD-4",
        "MUST",
        "Full validation MUST check every padding byte (PAD-1 to PAD-3); a file "
        "that hides bytes in padding is rejected with `NONZERO_PADDING`.",
    ),
    # ---- slab
    _r("SLAB-1", "MUST", "The slab MUST start at `slab_offset` and end at `index_offset`."),
    _r("SLAB-2", "MUST", "Every `data_offset` MUST be a multiple of 65536."),
    _r(
        "SLAB-3",
        "MUST",
        "Every payload MUST lie in the slab: `slab_offset <= data_offset` and "
        "`data_offset + data_length <= index_offset`, computed without overflow.",
    ),
    _r("SLAB-4", "MUST", "Payloads MUST NOT overlap."),
    _r(
        "SLAB-5",
        "MUST",
        "Payloads MUST be packed: taken in offset order, the first non-empty "
        "payload starts at `slab_offset` and each next one at the first 64 KiB boundary at or "
        "after the end of the previous one; `index_offset` is the first 64 KiB boundary at or after "
        "the end of the last one (`slab_offset` when there is none).",
    ),
    _r(
        "SLAB-6",
        "SHOULD",
        "A writer SHOULD place payloads in the order the tensors were given, so "
        "that a loader reading in model order reads the file front to back.",
        subject="writer",
    ),
    _r(
        "SLAB-7",
        "MUST",
        "An empty payload (`data_length` 0) takes no part in placement (SLAB-4, SLAB-5): its "
        "`data_offset` MUST meet SLAB-2 and SLAB-3 (a multiple of 65536 with "
        "`slab_offset <= data_offset <= index_offset`) and nothing else, so a reader MUST accept "
        "it at any such offset, `index_offset` and a boundary inside another payload included, "
        "and reads no byte there.",
    ),
    # ---- index
    _r(
        "IDX-1",
        "MUST",
        "The index region MUST start at `index_offset` and end where the trailer begins.",
    ),
    _r(
        "IDX-2",
        "MUST",
        "The index region MUST hold, in this order and with no other bytes: the "
        "bucket table, zero padding to a multiple of 8 bytes, the entries, the dims, the name pool, "
        "the metadata.",
    ),
    _r(
        "IDX-3",
        "MUST",
        "`index_length` MUST equal `align8(4 * (2**bucket_bits + 1)) + "
        "64 * tensor_count + 8 * dims_count + names_length + metadata_length`.",
    ),
    _r(
        "IDX-4",
        "MUST",
        "`index_crc` MUST equal the CRC-32C of the whole index region; full "
        "validation MUST check it.",
    ),
    _r(
        "IDX-5",
        "MUST",
        "`bucket_bits` MUST be the smallest b with `2**b >= tensor_count` (0 for "
        "0 or 1 tensors). The bucket table MUST hold `2**bucket_bits + 1` u32 values, start at 0, "
        "never decrease, and end at `tensor_count`.",
    ),
    _r(
        "IDX-6",
        "MUST",
        "The entries of bucket i MUST be exactly entries `buckets[i]` to `buckets[i+1] - 1`.",
    ),
    _r("IDX-7", "MUST", "`name_hash` MUST equal the FNV-1a 64 hash of the name's UTF-8 bytes."),
    _r(
        "IDX-8",
        "MUST",
        "An entry's bucket MUST be `(name_hash ^ (name_hash >> 32)) & "
        "(2**bucket_bits - 1)`; inside a bucket, names MUST be in strictly ascending bytewise order.",
    ),
    _r(
        "IDX-9",
        "MUST",
        "A reader looking a name up MUST check that its bucket's bounds are "
        "ordered, within `tensor_count` and at most `max_bucket_length` apart, MUST check the "
        "`entry_crc` of every entry it reads, and MUST check that the entries just outside the "
        "bucket belong to other buckets, before it reports a tensor found or absent.",
    ),
    _r(
        "IDX-10",
        "MUST",
        "`names_length` MUST NOT exceed `tensor_count * max_name_length` and `dims_count` "
        "MUST NOT exceed `tensor_count * max_dims`; a reader MUST check both when it opens the "
        "file (`BAD_INDEX_LAYOUT`), before it sizes anything by them.",
    ),
    # ---- entries
    _r("ENT-1", "MUST", "An entry's `flags` MUST be zero."),
    _r(
        "ENT-2",
        "MUST",
        "Names MUST be stored in entry order with no gaps: the first entry's "
        "`name_offset` is 0, each next one is the previous `name_offset + name_length`, and the "
        "lengths add up to `names_length`.",
    ),
    _r(
        "ENT-3",
        "MUST",
        "Shapes MUST be stored in entry order with no gaps: the first entry's "
        "`dims_index` is 0, each next one is the previous `dims_index + ndim`, and the ndims add up "
        "to `dims_count`.",
    ),
    _r("ENT-4", "MUST", "`dtype` MUST be a code of the dtype registry."),
    _r(
        "ENT-5",
        "MUST",
        "The product of the non-zero dimensions times the item size MUST be below `2**63` "
        "(the payload size, the product of all the dimensions times the item size, is then "
        "below `2**63` too, and 0 when a dimension is 0); a reader MUST compute it without "
        "overflow.",
    ),
    _r(
        "ENT-6",
        "MUST",
        "`data_length` MUST equal the product of the dimensions times the item "
        "size (1 for a 0-d tensor).",
    ),
    _r(
        "ENT-7",
        "MUST",
        "Before it hands out a payload, a reader MUST have checked that entry's "
        "fields (ENT-4 to ENT-6, SLAB-2, SLAB-3, LAY-1 to LAY-6).",
    ),
    _r(
        "ENT-8",
        "MUST",
        "A payload MUST be the tensor's elements in row-major (C) order for "
        "DENSE, or the bytes its layout defines, little-endian, with no header of its own.",
    ),
    _r(
        "ENT-9",
        "MUST",
        "`entry_crc` MUST equal the CRC-32C of entry bytes 0 to 59, followed by the "
        "name bytes, followed by the entry's dims as u64.",
    ),
    _r(
        "ENT-10",
        "MUST",
        "`data_crc` MUST equal the CRC-32C of the payload; a reader MUST check it "
        "when asked to verify, and SHOULD offer a way to ask. Verify takes the entries in "
        "increasing `data_offset` order, ties in index order (the order of payload placement, "
        "RD-2), and reports the first mismatch at its `data_offset`.",
    ),
    # ---- names
    _r("NAME-1", "MUST", "A name MUST NOT be empty."),
    _r("NAME-2", "MUST", "A name MUST be valid UTF-8."),
    _r("NAME-3", "MUST", "Names MUST be unique in a file."),
    _r(
        "NAME-4",
        "SHOULD",
        "The tensors of a quantised linear layer SHOULD keep AutoAWQ's names: "
        "`<prefix>.qweight`, `<prefix>.scales`, `<prefix>.qzeros`, `<prefix>.bias`.",
    ),
    # ---- layouts
    _r("LAY-1", "MUST", "`layout` MUST be a code of the layout registry that is not reserved."),
    _r("LAY-2", "MUST", "A DENSE entry MUST have `bits`, `group_size`, `k` and `n` all 0."),
    _r("LAY-3", "MUST", "A quantised entry MUST have `bits` 4 or 8, and `k`, `n` at least 1."),
    _r(
        "LAY-4",
        "MUST",
        "A quantised entry's `group_size` MUST be -1 or a positive divisor of `k`, and "
        "`n` MUST be a multiple of the pack factor `32 // bits`; a MARLIN_* entry MUST also have "
        "`k % 128 == 0`, `n % 64 == 0` and a group size of -1, 32, 64 or 128. A reader checks "
        "LAY-3, then group size, pack factor and the Marlin rules in that order, then LAY-5.",
    ),
    _r(
        "LAY-5",
        "MUST",
        "A quantised entry's dtype and shape MUST be those its layout's row of the "
        "layout table gives for its k, n, bits and group size.",
    ),
    _r(
        "LAY-6",
        "MUST",
        "Scales MUST be F16, BF16 or F32, recorded as stored; a writer MUST NOT "
        "convert them silently.",
    ),
    _r(
        "LAY-7",
        "MUST",
        "Every entry with a quantised layout MUST be named `<prefix>.<role>` (`qweight`, "
        "`scales` or `qzeros`, the role of its layout; `<prefix>`, the name without the role "
        "suffix, may be empty), and `<prefix>.qweight`, "
        "`<prefix>.scales` and `<prefix>.qzeros` MUST all exist, all be MARLIN_* or all AWQ_*, "
        "and record the same k, n, bits and group size. Full validation checks it after every "
        "entry has passed, taking the entries in index order, and for each quantised one its "
        "two other roles in the order qweight, scales, qzeros (`BAD_QUANT_FIELDS` at the "
        "offset of the entry being checked: its first byte, RD-7).",
    ),
    _r(
        "LAY-8",
        "MUST",
        "A writer MUST store a layer in the MARLIN_* layouts when it meets Marlin's "
        "shape rules (`n % 64 == 0`, `k % 128 == 0`, group size in {-1, 32, 64, 128} dividing k) "
        "and in the AWQ_* layouts otherwise.",
        subject="writer",
    ),
    _r(
        "LAY-9",
        "MAY",
        "A reader MAY leave 8-bit MARLIN_* layers unsupported; it MUST then refuse "
        "such a layer when asked for it, and MUST still open the file.",
    ),
    _r(
        "LAY-10",
        "MUST",
        "An entry named `<prefix>.bias`, where `<prefix>.qweight` is an entry with layout "
        "AWQ_QWEIGHT or MARLIN_QWEIGHT, is that layer's bias: it MUST be DENSE, F16, BF16 or "
        "F32, and of shape `[n]` with the qweight's `n`. Full validation checks it in the walk "
        "of LAY-7, at the bias entry's turn in index order (`BAD_QUANT_FIELDS` at its offset). "
        "An entry named `.bias` with no such qweight is an ordinary tensor.",
    ),
    _r(
        "LAY-11",
        "MUST",
        "A quantised layer MAY be stored fused: the parts of an engine's merged module side by "
        "side along `n`, in the module's order, as the source checkpoint stores them (Phi-3's "
        "`qkv_proj` holds the query, key and value heads `[q | k | v]`, its `gate_up_proj` "
        "`[gate | up]`). The file records no part boundaries: they are the engine module's "
        "whole output sizes. A loader that cuts a fused layer for tensor parallelism MUST cut "
        "each part as the engine cuts that part (heads as SET-12 says) and place the pieces "
        "in part order. In the MARLIN layouts the columns `c0 .. c1` of a layer are qweight "
        "words `c0 * 16 / pf .. c1 * 16 / pf` of every row, scale columns `c0 .. c1` and zero "
        "point words `c0 / pf .. c1 / pf`, exactly when `c0` and `c1` are multiples of 64: a "
        "loader MUST refuse, naming the layer, a part or piece whose bounds are not.",
        "runtime",
    ),
    _r(
        "LAY-12",
        "MUST",
        "The experts of a mixture-of-experts module are stored as ordinary quantised layers, "
        "one per expert and projection, named `<experts>.<e>.<role>`: `<experts>` the engine "
        "module's name (such as `model.layers.0.mlp.experts`), `e` the expert's index in "
        "decimal without leading zeros, and `role` `gate_proj`, `up_proj` and `down_proj` (or "
        "Mixtral's original `w1`, `w3` and `w2`), as the source checkpoint names them. Such an "
        "expert set holds experts `0 .. E-1`, each with all three roles, and the experts of one "
        "role record the same layout, k, n, bits and group size. A loader that serves an expert "
        "set as one fused engine tensor MUST refuse it, naming the module, when an expert or a "
        "role is missing or when the experts of one role differ. Cut for tensor parallelism, "
        "each expert is cut as a dense MLP is: gate and up as `column`, down as `row`; rank `r` "
        "holds the `r`-th piece of every expert (a rank set's member stores them under the same "
        "names, SET-11).",
        "runtime",
    ),
    # ---- trailer
    _r("TRL-1", "MUST", "The last 8 bytes MUST be `89 41 57 51 45 4E 44 0A`."),
    _r("TRL-2", "MUST", "`trailer_crc` MUST equal the CRC-32C of trailer bytes 0 to 19."),
    _r(
        "TRL-3",
        "MUST",
        "The trailer's `index_offset`, `index_length` and `header_crc` MUST equal the header's.",
    ),
    # ---- metadata
    _r(
        "META-1",
        "MUST",
        "`metadata_length` 0 means no metadata; otherwise the metadata MUST be "
        "valid UTF-8 and MUST NOT start with a byte order mark (the bytes `EF BB BF`). "
        "U+FEFF anywhere else is an ordinary character: allowed inside a string, and outside "
        "one a JSON grammar error like any other character that is not JSON.",
    ),
    _r(
        "META-2",
        "MUST",
        "The metadata MUST be one JSON object (RFC 8259) with no duplicate keys "
        "at any level, no NaN or Infinity, and no raw control character (U+0000 to U+001F) "
        "inside a string (RFC 8259 allows them only escaped).",
    ),
    _r(
        "META-3",
        "SHOULD",
        "A converter SHOULD record the source checkpoint's `config.json` under "
        "`config`, its quantisation config under `quantization_config` and the source files under "
        "`provenance`.",
        subject="converter",
    ),
    _r(
        "META-4",
        "MUST",
        "`metadata_crc` MUST equal the CRC-32C of the metadata bytes (0 when "
        "there are none); a reader MUST check it before it parses the metadata.",
    ),
    _r(
        "META-5",
        "MUST",
        "Every number in the metadata MUST be at most 100 bytes long, counting the whole "
        "number token (minus sign, digits, decimal point, and the exponent with its `e` or `E` "
        "and its sign), and finite when rounded to the nearest IEEE 754 binary64 value, ties to "
        "even (the standard's default rounding, as C's `strtod` and Python's `float` round it): "
        "`1.7976931348623158e308` is finite (it rounds to the largest binary64), "
        "`1.7976931348623159e308` and `1e400` are not, and "
        "every string and key MUST be Unicode scalar values: a `\\u` escape of a high surrogate "
        "(`D800` to `DBFF`) MUST be followed directly by a `\\u` escape of a low surrogate "
        "(`DC00` to `DFFF`), and a low-surrogate escape MUST directly follow a high one "
        "(`\\udc00` alone is invalid) (`BAD_METADATA`).",
    ),
    _r(
        "META-6",
        "MUST",
        "A reader MUST check the metadata in this order: no byte order mark (metadata "
        "starting with `EF BB BF` is `BAD_METADATA` at its first byte, whatever follows, "
        "invalid UTF-8 included); then valid UTF-8; "
        "then its nesting depth, by one pass over the bytes before any parsing (outside a "
        'string, `"` starts a string, `[` and `{` add one and `]` and `}` subtract one; '
        'inside a string, `\\` skips the next byte and `"` ends it), a depth over '
        "`max_metadata_depth` at any point being `LIMIT_METADATA` whatever the rest of the "
        "text; then the JSON grammar, duplicate keys and META-5 (`BAD_METADATA`).",
    ),
    # ---- limits
    _r(
        "LIM-1",
        "MUST",
        "A writer MUST NOT exceed a limit; a reader MUST reject a file that does, "
        "before it allocates memory sized by the offending field.",
    ),
    _r("LIM-2", "MUST", "`tensor_count` MUST NOT exceed `max_tensors`."),
    _r("LIM-3", "MUST", "A name MUST NOT be longer than `max_name_length` bytes."),
    _r("LIM-4", "MUST", "`ndim` MUST NOT exceed `max_dims`."),
    _r(
        "LIM-5",
        "MUST",
        "The metadata MUST NOT be longer than `max_metadata_length` bytes nor nest "
        "arrays and objects deeper than `max_metadata_depth`.",
    ),
    _r("LIM-6", "MUST", "A bucket MUST NOT hold more than `max_bucket_length` entries."),
    _r("LIM-7", "MUST", "`bucket_bits` MUST NOT exceed `max_bucket_bits`."),
    # ---- legacy AWQ v1 checkpoints
    _r(
        "V1-1",
        "MAY",
        "A reader MAY open AWQ v1 checkpoints (AutoAWQ GEMM packing in safetensors: one file, or a folder with `config.json` or `quant_config.json` and its shards); one that does SHOULD present them through the same interface as AWQ-v2 files.",
        subject="converter",
    ),
    _r(
        "V1-2",
        "MUST",
        "A reader or converter of AWQ v1 MUST refuse, with `V1_UNSUPPORTED` or `V1_BAD_CONFIG`, a checkpoint it cannot read exactly: a `quant_method` other than `awq`, a `version` other than `gemm`, `zero_point` false, bits other than 4 or 8, an unreadable configuration.",
        subject="converter",
    ),
    _r(
        "V1-3",
        "MUST",
        "It MUST refuse with `V1_INCOMPLETE` a checkpoint with a shard the index names but the folder lacks, a tensor the index maps to a shard that lacks it, a layer missing its `qzeros` or `scales`, or a truncated safetensors file.",
        subject="converter",
    ),
    _r(
        "V1-4",
        "MUST",
        "It MUST refuse with `V1_SHAPE_MISMATCH` layers whose `qweight`, `qzeros` and `scales` shapes disagree with each other, with the group size or with the configuration.",
        subject="converter",
    ),
    _r(
        "V1-5",
        "MUST",
        "A converter MUST write an AWQ-v2 file whose MARLIN_* payloads are exactly the Marlin transformation of the v1 tensors (codec chapter) and whose AWQ_* payloads are the v1 payloads unchanged, and MUST publish nothing when it refuses or fails.",
        subject="converter",
    ),
    # ---- compressed-tensors pack-quantized checkpoints
    _r(
        "CT-1",
        "MAY",
        "A reader MAY open compressed-tensors `pack-quantized` checkpoints (a `config.json` whose `quantization_config.quant_method` is `compressed-tensors`, beside one safetensors file or the shards of `model.safetensors.index.json`); one that does SHOULD present each quantised layer `<prefix>` as `<prefix>.qweight`, `<prefix>.qzeros` and `<prefix>.scales` in the AWQ layouts: codes and zero points are the stored unsigned fields (the signed value plus 8), a symmetric layer's zero points are all 8, scales are `weight_scale` transposed in its stored dtype, and a `channel` layer has group size -1; every other tensor is presented unchanged.",
        subject="converter",
    ),
    _r(
        "CT-2",
        "MUST",
        "A reader or converter of compressed-tensors MUST refuse with `CT_UNSUPPORTED` a checkpoint it cannot represent exactly: a `format` other than `pack-quantized`, weights of other than 4 bits or of `type` other than `int`, a `strategy` other than `group` or `channel`, `dynamic` weights, `actorder` `group` or a `weight_g_idx` that is not `column // group_size`, `input_activations`, `output_activations` or a `kv_cache_scheme`, a non-empty `sparsity_config` or `transform_config`, a weight argument it does not know, or a layer whose output size is not a multiple of 8.",
        subject="converter",
    ),
    _r(
        "CT-3",
        "MUST",
        "It MUST refuse with `CT_BAD_CONFIG` a `quantization_config` whose fields do not have the compressed-tensors types (`config_groups` an object of groups with `targets` and `weights`, `ignore` a list of names), and `weight_packed` tensors without a compressed-tensors configuration. (A `config.json` that cannot be read at all does not say which reader applies; it is refused as V1-2 says.)",
        subject="converter",
    ),
    _r(
        "CT-4",
        "MUST",
        "It MUST refuse with `CT_INCOMPLETE` a checkpoint with a shard the index names but the folder lacks, a tensor the index maps to a shard that lacks it, a truncated safetensors file, or a layer missing `weight_packed`, `weight_scale` or `weight_shape`, or `weight_zero_point` when its group is asymmetric.",
        subject="converter",
    ),
    _r(
        "CT-5",
        "MUST",
        "It MUST refuse with `CT_SHAPE_MISMATCH` a layer whose parts disagree with each other or with `weight_shape` (`weight_packed` int32 `[out, ceil(in / 8)]`, `weight_scale` F16, BF16 or F32 `[out, groups]`, `weight_zero_point` int32 `[ceil(out / 8), groups]`, `weight_shape` two integers), whose parts fit no configuration group, or that is named in `ignore`.",
        subject="converter",
    ),
    _r(
        "CT-6",
        "MUST",
        "A converter MUST write an AWQ-v2 file whose quantised layers hold exactly the codes, zero points and scales of CT-1 (MARLIN_* payloads their Marlin transformation, AWQ_* payloads their AWQ packing), whose other tensors are the stored tensors unchanged, and MUST publish nothing when it refuses or fails.",
        subject="converter",
    ),
    # ---- the converter's output folder and threads
    _r(
        "CONV-1",
        "SHOULD",
        'A converter writing a model folder SHOULD write the converted weights as `model.awq2`, a `config.json` equal to the source\'s apart from `quantization_config`, which becomes `{"quant_method": "awq_v2", "bits", "group_size", "source_format"}` (numbers when every layer agrees; otherwise sorted lists, with `layer_bits` or `layer_group_sizes` mapping each layer prefix to its value), and byte-identical copies of every other regular file at the top of the source folder except `*.safetensors`, `*.safetensors.index.json`, `quant_config.json` and `*.awq2`.',
        subject="converter",
    ),
    _r(
        "CONV-2",
        "MUST",
        "A converter writing a model folder MUST publish it whole or not at all (written in a temporary sibling folder, renamed into place, removed on failure), MUST NOT replace an existing file or non-empty folder unless asked to (`--overwrite`), and then only once the new output is complete and verified, MUST NOT write inside the source or replace a folder that holds it, and MUST NOT copy symbolic links that lead out of the source folder, sub-folders or files that are not regular; it names each one it leaves out.",
        subject="converter",
    ),
    _r(
        "CONV-3",
        "MUST",
        "A converter that repacks layers in parallel MUST write the same bytes whatever the number of threads, and SHOULD hold no more than about one layer per thread in memory, whatever the model's size.",
        subject="converter",
    ),
    _r(
        "CONV-4",
        "MUST",
        "A converter MUST refuse, with `NOT_QUANTISED` and before it writes anything, a source that holds no quantised layer (a model that was never quantised: nothing in it has a Marlin or AWQ layout), and MUST name the source's format as it is in the provenance (`source_format`) and in what it prints, never as a quantised format the source is not.",
        subject="converter",
    ),
    # ---- file sets (2.1): several complete files, by size or one per tensor-parallel rank
    _r(
        "SET-1",
        "MUST",
        f"A file set MUST be one folder holding a manifest named `{SET_MANIFEST}` and the member "
        "files it lists; every member MUST be a complete AWQ-v2 file that passes full validation "
        "(RD-2) and verification (ENT-10) on its own, and MUST hold every entry of each layer it "
        "holds (LAY-7): a quantised layer is never split across members.",
        subject="set",
    ),
    _r(
        "SET-2",
        "MUST",
        "The manifest MUST be a JSON object under the metadata's rules (META-1, META-2, META-5, "
        f"META-6; at most {MAX_METADATA_LENGTH} bytes) with the members `awq2_set` (an integer), "
        f"`kind` (a string) and `files`, an array of 1 to {MAX_SET_FILES} objects, each with "
        "`name` (a string), `size` (a non-negative integer), `header_crc` (8 lowercase "
        "hexadecimal digits) and `sha256` (64 lowercase hexadecimal digits); a rank set adds "
        "`tp_size` (an integer from 1) and, in each file object, `rank` (an integer from 0 to "
        "`tp_size - 1`). A reader MUST reject anything else with `SET_BAD_MANIFEST`, and MUST "
        "ignore members it does not know, in the manifest and in the file objects: in a split "
        "set, `tp_size` and `rank` are such members, ignored whatever their values. An integer "
        "here is a JSON number token without a fraction or an exponent, its value exact "
        "whatever its number of digits (`100000.0`, `1.0` and `1e5` are not integers; `-0` is "
        "the integer 0). `header_crc` is the member's u32 `header_crc` (header bytes 124 to "
        "127, little-endian, HDR-4) written most significant digit first: bytes `40 0c ca 85` "
        'are `"85ca0c40"`, never the bytes in file order. The text is checked whole under '
        "the metadata's rules, in META-6's order, before SET-3 reads any member: a manifest "
        f"over {MAX_METADATA_LENGTH} bytes, nested deeper than {MAX_METADATA_DEPTH}, or failing "
        "any of those rules is `SET_BAD_MANIFEST` (never the metadata's `LIMIT_METADATA` or "
        "`BAD_METADATA`), whatever its `awq2_set`.",
        subject="set",
    ),
    _r(
        "SET-3",
        "MUST",
        f"A reader MUST reject a manifest whose `awq2_set` is absent or anything but the integer "
        f'{SET_VERSION} (a string `"1"`, `1.0`, `1e0` and `true` included), or whose `kind` is '
        'absent or anything but the string `"split"` or `"rank"` (a value that is not a string '
        "included), with `SET_UNSUPPORTED`, after SET-2's checks of the text and before it "
        "reads any other member of the manifest.",
        subject="set",
    ),
    _r(
        "SET-4",
        "MUST",
        "Every `name` MUST be a plain file name in the manifest's folder: ending in `.awq2`, "
        "without `/`, backslash, NUL or a leading `.`, and different from every other `name` of "
        "the manifest (`SET_BAD_MANIFEST`); a reader MUST NOT build any other path from a name than "
        "the folder's path joined with it.",
        subject="set",
    ),
    _r(
        "SET-5",
        "MUST",
        "Opening a set MUST check, for every file in manifest order: that it exists as a "
        "regular file (`SET_MISSING_FILE`), that its length equals `size` (`SET_FILE_MISMATCH`), "
        "the opening checks of RD-1, then that its `header_crc` equals the manifest's "
        "(`SET_FILE_MISMATCH`); then, for a rank set, that every rank from 0 to `tp_size - 1` "
        "has a file (`SET_RANK_MISSING`). These checks read the manifest and each member's "
        "header and trailer only. The file is the folder's path joined with the name (SET-4); "
        "a symbolic link there is followed, wherever it leads, and what it leads to must be a "
        "regular file. A name the system does not resolve to a regular file is "
        "`SET_MISSING_FILE`, naming the member: absent, a dangling link, a loop of links "
        "(`ELOOP`), a name too long for the file system (`ENAMETOOLONG`), a folder, a FIFO, a "
        "device. The length compared with `size` is the file's, as the file system gives it "
        "(`fstat`), before any byte of it is read.",
        subject="set",
    ),
    _r(
        "SET-6",
        "MUST",
        "A tensor name MUST NOT appear in two members of a split set, nor in two members of the "
        "same rank of a rank set (`SET_DUPLICATE_NAME`). A reader finds a name by looking it up "
        "in each member of the set (of the rank) in manifest order (IDX-9); the first that holds "
        "it answers, so a lookup costs one O(1) index lookup per member and never needs a map "
        "from every name to its file.",
        subject="set",
    ),
    _r(
        "SET-7",
        "MUST",
        "In a rank set, every rank MUST hold the same tensor names, and each name the same "
        "dtype, layout, shape, `bits`, `group_size`, `k` and `n` in every rank "
        "(`SET_RANK_MISMATCH`): rank `r`'s members hold rank `r`'s part of every tensor, already "
        "cut, and a quantised layer there is exactly a shard of the whole layer that "
        "`linear(prefix, tp_rank=i, tp_size=c, parallel=p)` gives (which one: SET-11, SET-12).",
        subject="set",
    ),
    _r(
        "SET-8",
        "MUST",
        "Full validation of a set MUST check, in this order: the opening checks (SET-2 to "
        "SET-5); full validation of every member in manifest order (RD-2), each followed by its "
        "record of its rank (SET-15); no file in the folder "
        "ending in `.awq2` that the manifest does not list (`SET_EXTRA_FILE`); names (SET-6); "
        "ranks (SET-7). A file here is any entry "
        "of the folder whose name ends in the five bytes `.awq2`, compared byte for byte (so "
        "`MODEL.AWQ2` is not one), whatever it is: a regular file, a sub-folder, a symbolic "
        "link (a dangling one too), a name starting with `.`. Verification adds, member by "
        "member in manifest order, its payload checksums (ENT-10), then the SHA-256 of its "
        "bytes against `sha256` (`SET_BAD_SHA256`): a member's SHA-256 is compared before the "
        "next member's payloads are read. "
        "The first failed check gives the error code; an error inside a member names that "
        "member's file.",
        subject="set",
    ),
    _r(
        "SET-9",
        "MUST",
        "A writer MUST publish a set whole or not at all: no reader may see the manifest under "
        "its name before every member it lists is complete under its own name (for example: "
        "everything written in a temporary folder that is renamed into place last).",
        subject="writer",
    ),
    _r(
        "SET-10",
        "MUST",
        "A writer splitting by size MUST keep every member at or under the limit it was given, "
        "except a member that holds a single tensor, or a single quantised layer (SET-1), that "
        "alone exceeds it; it SHOULD fill each member in order before it starts the next, and "
        "SHOULD write the same metadata to every member. The set's metadata is its first "
        "member's.",
        subject="writer",
    ),
    _r(
        "SET-11",
        "MUST",
        "A writer of a rank set for `T` ranks MUST store in rank `r`'s members rank `r`'s part "
        "of every tensor as the engine holds it: for a quantised layer, the shard "
        "`linear(prefix, tp_rank=i, tp_size=c, parallel=p)` of the whole layer (stored with the "
        "shard's `k` and `n`, in the layout family the whole layer has); for a dense tensor, "
        "the same cut of its rows (column-parallel: a weight's output features, and its bias) "
        "or of its columns (row-parallel: a weight's input features; the bias whole). "
        "Column-parallel and row-parallel modules take `(i, c) = (r, T)`; vocabulary tables "
        f"`[vocab, hidden]` are padded with zero rows to a multiple of {VOCAB_PADDING} and then "
        "cut by rows, `(r, T)`; every other tensor is whole. Which modules are which comes from "
        "a rule table per architecture that the writer documents and records in every member's "
        "metadata under `tensor_parallel`. Before writing anything it MUST refuse, naming the "
        "layer: a quantised layer no rule names (`TP_NO_RULE`), a cut that does not divide "
        "evenly or a shard that breaks its layout's shape rules (`TP_BAD_SHARD`), and "
        "attention-head counts it cannot read or that do not match the layer (`TP_BAD_CONFIG`).",
        subject="writer",
    ),
    _r(
        "SET-12",
        "MUST",
        "Attention heads MUST be cut whole, as vLLM's `QKVParallelLinear` cuts them: query "
        "heads with `(i, c) = (r, T)`, `T` dividing their number; key/value heads likewise when "
        "`T` divides their number `kv`, and, when `kv` divides `T` instead, with "
        "`(i, c) = (r // (T / kv), kv)`: each key/value head whole, replicated on `T / kv` "
        "consecutive ranks.",
        subject="writer",
    ),
    _r(
        "SET-13",
        "MUST",
        "A reader that opens a whole rank set (every rank's members) MUST refuse, with "
        "`TP_RANK_REQUIRED` naming the tensor or layer and how to give a rank, every access "
        "whose answer is one rank's part of a tensor (an entry, a payload, a layer, its "
        "dequantised weights) when no rank is given: rank `r`'s members hold a shard, never "
        "the whole tensor (SET-11), and rank 0's shard is not the tensor. Names, the quantised "
        "layers, the metadata (SET-14), validation and verification need no rank.",
        subject="runtime",
    ),
    _r(
        "SET-14",
        "MUST",
        "A rank set's writer writes the same metadata to every member, except each member's own "
        f"record of its rank under `{SET_RANK_KEY}` (SET-15). A reader that gives a rank set's "
        f"metadata MUST compare every open member's, without its `{SET_RANK_KEY}`, with the "
        "first one's and refuse a difference with `TP_METADATA_MISMATCH` naming both members, "
        "never show one member's as the set's; the set's metadata is then the first open "
        "member's, as stored. The comparison is a check of the call that gives the metadata, "
        "not of full validation or verification (SET-8): a rank set whose members' metadata "
        "differ passes SET-8, and a conformance adapter, which gives the first member's "
        "metadata without comparing (ADP-5), accepts it; ADP-5 governs the accept document, "
        "since a vector's verdict is SET-8's alone.",
        subject="runtime",
    ),
    _r(
        "SET-15",
        "MUST",
        "Every member of a rank set MUST record its own rank and tensor-parallel degree in its "
        f"metadata, under the reserved top-level key `{SET_RANK_KEY}`: an object with `rank` "
        "and `tp_size`, integers as SET-2 defines them (other members of the object are "
        "ignored); a split set's members MUST NOT hold the key. Full validation of a set "
        "(SET-8) MUST check, for every member in manifest order and right after the member's own "
        "full validation (RD-2), that in a rank set its "
        f"metadata holds `{SET_RANK_KEY}` with `rank` equal to the member's `rank` in the "
        "manifest and `tp_size` equal to the manifest's `tp_size`, and that in a split set it "
        f"holds no `{SET_RANK_KEY}` (`SET_WRONG_RANK`, naming the member): the manifest alone "
        "cannot show which rank's shards a file holds, nor for which degree they were cut, "
        "since the shards of every rank, and ranks 0 to `T - 1` of a conversion for more "
        "than `T` ranks, have the same names and fields (SET-7). A record that is not an "
        "object, that lacks `rank` or `tp_size`, or that holds one that is not an integer as "
        'SET-2 defines them (`"1"`, `1.0`, `1e0`) is `SET_WRONG_RANK`, as a record of another '
        f'rank is; the key is present whatever its value, so `"{SET_RANK_KEY}": null` is '
        "`SET_WRONG_RANK` in a rank set (no record) and in a split set (a key it must not "
        "hold).",
        subject="set",
    ),
    _r(
        "SET-16",
        "MUST",
        f"`{SET_RANK_KEY}` means something only in a member of a set read as a set: a reader "
        "MUST accept a file read on its own (not through a set manifest) whatever its "
        f"metadata's `{SET_RANK_KEY}` holds, as it accepts any other key (a rank set's member "
        "copied out of its folder is a valid file), and MUST NOT check it there; the metadata "
        f"it gives includes `{SET_RANK_KEY}` as stored.",
        subject="reader",
    ),
    _r(
        "SET-17",
        "MUST",
        "A file or folder that exists but cannot be read is no format failure and has no code "
        "of the error registry. A member that the manifest lists and the folder holds but "
        "that cannot be opened or read (permissions, an I/O error) MUST NOT be reported as "
        "`SET_MISSING_FILE`, which is for a name the folder does not hold or holds as "
        "something other than a regular file (SET-5); a folder that cannot be listed MUST NOT "
        "be taken as holding no stray `.awq2` file (SET-8). In both cases the reader MUST "
        "refuse the set as an input it cannot read, naming the file or the folder and the "
        "system's reason, and MUST NOT accept it (the conformance adapters exit 3, which the "
        "runner counts as neither an accept nor a reject). No vector can show it: the suite "
        "ships files, and permissions do not travel with them.",
        subject="runtime",
    ),
    _r(
        "SET-18",
        "MUST",
        "A tensor-parallel rule's pattern (a built-in table's, one given with `--tp-rules`, or "
        "one a rank set records under `tensor_parallel`) MUST be in this subset of Python `re` "
        "syntax, matched against the whole module name, and a converter MUST refuse any other "
        "before it matches a name (`--tp-rules`: a usage error; a recorded rule: "
        "`TP_BAD_CONFIG`), naming the rule and the construct. A pattern is at most 256 "
        "characters, a rule list at most 256 rules. Atoms: a literal character; `\\` and an "
        "ASCII punctuation character, or `\\d \\D \\w \\W \\s \\S`; `.`; a class `[...]` "
        "or `[^...]`; a group `(...)` or `(?:...)`, nested at most 4 deep. Alternation `|`; "
        "`^` only first and `$` only last. One quantifier `?`, `*` or `+` after an atom (no "
        "`{m,n}`, no lazy or possessive form); a group repeated by `*` or `+` holds no "
        "quantifier and no alternation (`(ab)+` yes; `(a+)+`, `(.|.)*` no); at most 2 `*` or "
        "`+` in a pattern, and its alternations and `?` combine in at most 16 ways. No "
        "back-references, lookarounds, named groups, inline flags or other escapes. A "
        "backtracking matcher then tries at most 16 (n + 1)^2 ways on a name of n characters: "
        "a hostile record cannot stall a converter (reference: "
        "`reference.sets.tpsplit.check_pattern`).",
        subject="converter",
    ),
    # ---- checksums
    _r(
        "CRC-1",
        "MUST",
        "Every checksum MUST be CRC-32C (Castagnoli: reflected polynomial "
        '`0x82F63B78`, initial value and final XOR `0xFFFFFFFF`); `CRC-32C("123456789") = '
        "0xE3069283`.",
    ),
    # ---- reading
    _r(
        "RD-1",
        "MUST",
        "Opening a file MUST check, in this order: magic (the first `min(8, file length)` "
        "bytes, HDR-1), size at least header + trailer, major version, header checksum, required flags, reserved bytes, fixed fields, "
        "limits, file size, index placement and length, trailer magic, trailer checksum, trailer "
        "agreement. These checks read only the header and the trailer.",
    ),
    _r(
        "RD-2",
        "MUST",
        "Full validation MUST check, after RD-1 and in this order: the index checksum; the "
        "bucket table (starts at 0, never decreases, ends at `tensor_count`, then bucket "
        "lengths); every entry in index order: `ndim` and name length limits, name and dims "
        "inside their sections, entry checksum, name and dims packing (ENT-2, ENT-3), entry "
        "flags, name (not empty, UTF-8), name hash, dtype, shape size (ENT-5), length, alignment, slab "
        "bounds, layout and quantisation fields (LAY-1 to LAY-6), bucket, then uniqueness and "
        "order inside the bucket; then `names_length` and `dims_count` against the entries; "
        "layers and their biases (LAY-7, LAY-10); payload placement (overlap, then packing); "
        "padding (PAD-1, PAD-2, PAD-3); metadata (checksum, then META-6's order). The first failed check gives the "
        "error code.",
    ),
    _r(
        "RD-3",
        "MUST",
        "Every failure MUST be reported with exactly one code of the error registry, "
        "the offset of the offending bytes, and what was expected and found.",
    ),
    _r(
        "RD-4",
        "MUST",
        "A reader MUST assume that the file can change while it is open (truncated or "
        "rewritten in place by another process): every value it uses to locate or size a read "
        "(offset, length, count, dimension, bucket bound) MUST be checked on the copy it uses, "
        "after reading that copy, and a value read again from the file or its memory map MUST be "
        "checked again; an earlier validation MUST NOT stand in for the checks of a later lookup "
        "(IDX-9, ENT-7). A file changed under a reader then gives a failure with an error code, "
        "or changed payload bytes, never an access outside the memory the reader mapped or "
        "allocated.",
        subject="runtime",
    ),
    _r(
        "RD-5",
        "SHOULD",
        "A reader that memory-maps files SHOULD also offer a snapshot mode, for untrusted "
        "files on storage that others can write: the file is read once into private memory, and "
        "every check and every view uses that copy only, so that a later truncation or rewrite "
        "of the file cannot reach the reader.",
        subject="runtime",
    ),
    _r(
        "RD-6",
        "MUST",
        "A loader run by the conformance suite MUST check every file at all three levels, open "
        "(RD-1), full validation (RD-2) and verify (ENT-10), in that order, before it accepts "
        "it, and MUST report the code of the first check that fails; a vector's check level "
        "names the level that catches it.",
        subject="reader",
    ),
    _r(
        "RD-7",
        "MUST",
        "A reader MUST report as the offset RD-3 names, for each kind of failure: `BAD_MAGIC` 0; `TRUNCATED` where "
        "the file ends (its length); a header or trailer field's failure (a version, a flag, a "
        "limit, a placement, `names_length` or `dims_count` against the entries) that field's "
        "first byte; `BAD_HEADER_CHECKSUM` and `BAD_TRAILER_CHECKSUM` the stored checksum "
        "field; `BAD_INDEX_CHECKSUM`, `BAD_METADATA_CHECKSUM` and `BAD_TENSOR_CHECKSUM` the "
        "first byte of the bytes the checksum covers (the index, the metadata, the payload); "
        "`BAD_ENTRY_CHECKSUM` the entry's `entry_crc`; `BAD_BUCKET_TABLE` the slot at fault "
        "(the first slot when it is not 0, the slot that is below the one before it, the last "
        "slot when it is not `tensor_count`); `LIMIT_BUCKET` the first slot of the first bucket "
        "too long (bucket `b`'s slot `buckets[b]`, at `index_offset + 4 * b`); an entry that "
        "`read_entry` refuses (`LIMIT_DIMS`, `LIMIT_NAME_LENGTH`, a name or dims outside their "
        "section) or that breaks checks 1 or 2 of checking an entry (`flags`, an empty name) "
        "or ENT-2 or ENT-3 (`name_offset`, `dims_index`), the first byte of the field at fault "
        "in that entry (`ndim`, `name_length`, `name_offset`, `dims_index`, `flags`); "
        "`BAD_NAME_UTF8` the first byte of the first ill-formed sequence in the name pool (for "
        "a sequence cut short, its lead byte), never the name's first byte unless the sequence "
        "starts there; `BAD_NAME_HASH` and every failure of checks 4 to 10 of checking an "
        "entry (`BAD_DTYPE`, `BAD_SHAPE`, `BAD_LENGTH`, `MISALIGNED_OFFSET`, `OUT_OF_BOUNDS`, "
        "`BAD_LAYOUT`, `BAD_QUANT_FIELDS`) the entry's first byte (where its `name_hash` "
        "lies), whichever field is at fault; a layer's failure (LAY-7, LAY-10, "
        "`BAD_QUANT_FIELDS`) the first byte of the entry being checked, not of the sibling it "
        "disagrees with; `BAD_ENTRY_ORDER` and "
        "`DUPLICATE_NAME` the first byte of the later of the two entries in index order; "
        "`BAD_METADATA` and `LIMIT_METADATA` the metadata's first byte (invalid UTF-8: the first "
        "byte of the invalid sequence), the byte at fault being for the message. A file set's "
        "own errors (`SET_*`) name no byte (`null`, ADP-4), except `SET_FILE_MISMATCH` for a "
        "`header_crc`, which names byte 124 of the member; an error inside a member is that "
        "member's own code and offset. Every set error names the file it is about in its "
        "message: the member (`SET_MISSING_FILE`, `SET_FILE_MISMATCH`, `SET_EXTRA_FILE`, "
        "`SET_DUPLICATE_NAME` the later member, `SET_WRONG_RANK`, `SET_BAD_SHA256`, and every "
        "member's own error), the manifest (`SET_BAD_MANIFEST`, `SET_UNSUPPORTED`), or the set "
        "(`SET_RANK_MISSING`, `SET_RANK_MISMATCH`).",
        subject="adapter",
    ),
    # ---- presenting what was read
    _r(
        "DT-1",
        "MUST",
        "A reader MUST give its caller the stored bits of a BF16, F8_E4M3 or F8_E5M2 payload "
        "unchanged on request (for example as unsigned integers of the same size), and SHOULD "
        "present such a payload as an array of that format where its language has one (in "
        "NumPy, `ml_dtypes`' `bfloat16`, `float8_e4m3fn` and `float8_e5m2`): the stored bytes "
        "reinterpreted, never rounded or converted.",
        subject="runtime",
    ),
    # ---- writing
    _r(
        "WR-1",
        "MUST",
        "A writer MUST be deterministic: the same tensors, in the same order, with "
        "the same metadata, give the same bytes.",
        subject="writer",
    ),
    _r(
        "WR-2",
        "SHOULD",
        "A writer SHOULD publish atomically (write a temporary file in the "
        "destination's folder, flush it to storage, rename it), so that the destination never "
        "holds a partial file.",
        subject="writer",
    ),
    _r(
        "WR-3",
        "SHOULD",
        "A writer's temporary file SHOULD name its owner unambiguously: the destination it is "
        "for, the host and the process that writes it, and it SHOULD hold an exclusive lock on "
        "it until the rename. A tool that cleans up after interrupted writers MUST remove only "
        "temporary files of exactly that form for its own destination whose owner is provably "
        "gone: written on the same host, no such process alive there, and the lock free. A "
        "temporary file from another host is never removed.",
        subject="writer",
    ),
    _r(
        "WR-4",
        "SHOULD",
        "A writer SHOULD write every padding byte (or allocate the file's blocks) rather than "
        "leave holes, so that a full file system fails the write, with an error the writer "
        "reports, and never a later reader that touches the padding through a memory map.",
        subject="writer",
    ),
    # ---- conformance adapter (the protocol between a loader and the runner)
    _r(
        "ADP-1",
        "MUST",
        "An adapter's accept document MUST give `metadata` as the file's metadata object with "
        "every number written exactly as in the file, the same characters (`1.0` stays `1.0`, "
        "`-0` stays `-0`, `1E5` stays `1E5`, `12345678901234567890` stays as it is); strings and "
        "keys are compared by value after JSON unescaping (any valid escaping is fine), objects "
        "as maps, arrays in order, numbers by their characters.",
        subject="adapter",
    ),
    _r(
        "ADP-2",
        "MUST",
        "Every integer of an adapter's accept document (each `shape` dimension, `k`, `n`, "
        "`bits`, `group_size`) MUST be written as a JSON integer in plain decimal, exact for "
        "every u64 value (`9007199254740993`, not `9007199254740992` or `9.007199254740992e15`); "
        "the runner compares them by their characters.",
        subject="adapter",
    ),
    _r(
        "ADP-3",
        "MAY",
        "An adapter MAY list `tensors` and `layers` in any order: the runner matches tensors by "
        "`name` and layers by `prefix`, and in a rank set by `rank` too.",
        subject="adapter",
    ),
    _r(
        "ADP-4",
        "MUST",
        "An adapter that prints an error document on a reject "
        '(`{"error": {"code": ..., "offset": ...}}`) MUST give `offset` as a JSON integer in '
        "plain decimal, the byte position in the file that RD-3 and RD-7 name (never a string), "
        "or `null` for a file set's own error, which names no byte (RD-7: a manifest, a "
        "missing member, a rank); the runner judges a reject by its `code` alone.",
        subject="adapter",
    ),
    _r(
        "ADP-5",
        "MUST",
        "An adapter given a folder (a file set's vector) MUST read it as a file set, with full "
        "validation and verification (SET-8), and its accept document MUST add `set`: "
        '`{"kind": "split"}` or `{"kind": "rank", "tp_size": T}` as the manifest says; list '
        "every tensor and quantised layer of every member, each with `rank` (an integer) in a "
        "rank set, so that a name appears once per rank; and give the first member's (the "
        "first in manifest order, whatever its rank) `format_version` and `metadata` (SET-10), "
        f"the metadata as stored, its `{SET_RANK_KEY}` included, without comparing it with the "
        "other members': SET-14's comparison is no check of SET-8, so a rank set whose "
        "members' metadata differ is accepted with the first member's. A file's document has "
        "no `set` and no `rank`.",
        subject="adapter",
    ),
    _r(
        "ADP-6",
        "MUST",
        "An adapter's accept document MUST give `format_version` as the file's "
        "`version_major` and `version_minor` (header bytes 8 to 11) in decimal joined by a dot "
        '(`"2.0"`; a 2.7 file gives `"2.7"`), and each layer\'s `layout` as the family of its '
        '`<prefix>.qweight` entry: `"MARLIN"` for `MARLIN_QWEIGHT`, `"AWQ"` for `AWQ_QWEIGHT` '
        "(a tensor's `layout` is the registry name of its own entry's layout).",
        subject="adapter",
    ),
)

REQUIREMENT_BY_ID = {r.id: r for r in REQUIREMENTS}
