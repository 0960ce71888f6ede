/* awq2.h: an independent AWQ-v2 reader in C11, written from the spec text alone (docs/spec: format, codec, rationale).
 *
 * Every on-disk number lives here (format.md: header, entry and trailer tables, the
 * registries, the limits).  Requirement ids (HDR-4, RD-2, ...) cite format.md; the codec
 * cites codec.md.
 */
#ifndef AWQ2_H
#define AWQ2_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- container (format.md) */

#define AWQ2_HEADER_SIZE 128u
#define AWQ2_TRAILER_SIZE 32u
#define AWQ2_ENTRY_SIZE 64u
#define AWQ2_ALIGNMENT 65536u   /* HDR-2 */
#define AWQ2_SLAB_OFFSET 0x10000u /* HDR-2 */
#define AWQ2_VERSION_MAJOR 2u    /* VER-2 */
#define AWQ2_VERSION_MINOR 0u    /* this reader's minor version (HDR-5) */
#define AWQ2_HEADER_CRC_COVERS 124u
#define AWQ2_TRAILER_CRC_COVERS 20u
#define AWQ2_ENTRY_CRC_COVERS 60u

static const uint8_t AWQ2_MAGIC[8] = {0x89, 0x41, 0x57, 0x51, 0x0D, 0x0A, 0x1A, 0x0A};
static const uint8_t AWQ2_END_MAGIC[8] = {0x89, 0x41, 0x57, 0x51, 0x45, 0x4E, 0x44, 0x0A};

/* Limits (format.md, "Limits"). */
#define AWQ2_MAX_TENSORS (1ull << 24)
#define AWQ2_MAX_NAME_LENGTH 1024u
#define AWQ2_MAX_DIMS 8u
#define AWQ2_MAX_METADATA_LENGTH (1ull << 24)
#define AWQ2_MAX_METADATA_DEPTH 64u
#define AWQ2_MAX_BUCKET_LENGTH 64u
#define AWQ2_MAX_BUCKET_BITS 24u

/* Name hash (format.md, "Name hash"). */
#define AWQ2_FNV_OFFSET 0xCBF29CE484222325ull
#define AWQ2_FNV_PRIME 0x100000001B3ull

/* Layout registry (format.md, "Layouts"). */
enum {
    AWQ2_DENSE = 0,
    AWQ2_AWQ_QWEIGHT = 1,
    AWQ2_AWQ_SCALES = 2,
    AWQ2_AWQ_QZEROS = 3,
    AWQ2_MARLIN_QWEIGHT = 4,
    AWQ2_MARLIN_SCALES = 5,
    AWQ2_MARLIN_QZEROS = 6,
    AWQ2_LAYOUT_DEFINED = 7 /* codes 7 to 9 are reserved (LAY-1) */
};

/* Data type registry codes (format.md, "Data types"). */
enum { AWQ2_I32 = 7, AWQ2_F16 = 10, AWQ2_BF16 = 11, AWQ2_F32 = 12, AWQ2_DTYPE_MAX = 15 };

const char *awq2_dtype_name(unsigned code);    /* NULL when not registered (ENT-4) */
unsigned awq2_dtype_size(unsigned code);       /* 0 when not registered */
const char *awq2_layout_name(unsigned code);   /* NULL when unknown or reserved (LAY-1) */

/* ---------------------------------------------------------------- errors (RD-3) */

typedef struct {
    const char *code;     /* a name of the error-code registry */
    uint64_t offset;      /* of the offending bytes */
    char message[320];    /* what was read, expected and found */
} awq2_error;

int awq2_fail(awq2_error *err, const char *code, uint64_t offset, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* ---------------------------------------------------------------- hashes (hash.c) */

uint32_t awq2_crc32c(uint32_t crc, const uint8_t *data, size_t len); /* start with 0 */
uint64_t awq2_fnv1a64(const uint8_t *data, size_t len);

typedef struct {
    uint32_t h[8];
    uint64_t total;
    uint8_t block[64];
    size_t used;
} awq2_sha256;

void awq2_sha256_init(awq2_sha256 *s);
void awq2_sha256_update(awq2_sha256 *s, const uint8_t *data, size_t len);
void awq2_sha256_hex(awq2_sha256 *s, char out[65]); /* finishes the hash */

/* ---------------------------------------------------------------- text (json.c) */

/* Offset of the first byte that breaks strict UTF-8 (RFC 3629), or len when valid. */
size_t awq2_utf8_invalid_at(const uint8_t *s, size_t len);
/* META-1, META-2, LIM-5: 0 or -1 with BAD_METADATA / LIMIT_METADATA. */
int awq2_check_metadata(const uint8_t *text, size_t len, uint64_t base, awq2_error *err);

/* ---------------------------------------------------------------- the file (reader.c) */

typedef struct {
    uint64_t at; /* file offset of the entry */
    uint64_t name_hash, data_offset, data_length, name_offset;
    uint32_t dims_index;
    uint16_t name_length;
    uint8_t dtype, layout, ndim, bits;
    uint16_t flags;
    int32_t group_size;
    uint32_t k, n, data_crc, entry_crc;
    const uint8_t *name;  /* name_length bytes, inside the mapping */
    uint64_t dims[AWQ2_MAX_DIMS];
} awq2_entry;

typedef struct {
    const uint8_t *data; /* the whole file */
    uint64_t size;
    uint16_t version_major, version_minor;
    uint64_t required_flags, optional_flags, alignment, slab_offset;
    uint64_t index_offset, index_length, file_size;
    uint64_t tensor_count, dims_count, names_length, metadata_length;
    uint8_t bucket_bits;
    uint32_t index_crc, metadata_crc, header_crc;
    /* section offsets, absolute (format.md, index sections table) */
    uint64_t table_end, entries_at, dims_at, names_at, metadata_at;
} awq2_file;

int awq2_open(awq2_file *f, const uint8_t *data, uint64_t size, awq2_error *err);     /* RD-1 */
int awq2_validate(const awq2_file *f, awq2_error *err);                               /* RD-2 */
int awq2_verify(const awq2_file *f, awq2_error *err);                                 /* ENT-10 */
int awq2_read_entry(const awq2_file *f, uint64_t i, awq2_entry *e, awq2_error *err);
/* 1 found, 0 absent, -1 error (the lookup algorithm, IDX-9). */
int awq2_lookup(const awq2_file *f, const uint8_t *name, size_t len, awq2_entry *e,
                awq2_error *err);
uint64_t awq2_payload_size(const awq2_entry *e, int *ok); /* ENT-5 */

/* ---------------------------------------------------------------- layers (codec.c) */

typedef struct {
    char codes[65], zeros[65], scales[65], dequantized[65];
} awq2_layer_hashes;

/* Unpack, unswizzle and dequantise one layer (codec.md); the three entries are validated. */
int awq2_decode_layer(const awq2_file *f, const awq2_entry *qw, const awq2_entry *sc,
                      const awq2_entry *qz, awq2_layer_hashes *out, awq2_error *err);

/* ---------------------------------------------------------------- the document (describe.c) */

/* The adapter's JSON document of a file that passed awq2_open, awq2_validate and awq2_verify:
 * 0 with *doc (malloc'ed, the caller frees it) and *len, -1 with err (a layer that does not
 * decode), -2 out of memory. */
int awq2_describe(const awq2_file *f, char **doc, size_t *len, awq2_error *err);

#endif
