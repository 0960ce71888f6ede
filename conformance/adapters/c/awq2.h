/* awq2.h: an independent AWQ-v2 reader in C11, written from the spec text alone (docs/spec: format, codec, rationale, sets).
 *
 * Every on-disk number lives here (format.md: header, entry and trailer tables, the
 * registries, the limits; sets.md: the manifest).  Requirement ids (HDR-4, RD-2, ...) cite
 * format.md, SET-n cite sets.md; the codec cites codec.md.
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
/* The same checks (META-1, META-2, META-5, META-6) of a text that must be a JSON object, even
 * an empty one; `what` names it in messages ("metadata", "manifest"). */
int awq2_check_json(const uint8_t *text, size_t len, uint64_t base, const char *what,
                    awq2_error *err);

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
/* Member i of a set, mapped, for the document: at most one member need be mapped at a time
 * (the one returned last), so the caller may unmap the one before.  NULL when it cannot be
 * (the caller keeps its own error; awq2_describe_set then returns -3). */
typedef const awq2_file *(*awq2_member_fn)(void *ctx, size_t i);
/* The document of a file set (ADP-5): `set` (a JSON object's text) added, every tensor and
 * layer of the `count` members in order, each with "rank": ranks[i] when ranks is not NULL,
 * the first member's format_version and metadata; members are taken one at a time from
 * `member`.  On -1, *failed is the member at fault; -3: `member` returned NULL. */
int awq2_describe_set(awq2_member_fn member, void *ctx, const uint64_t *ranks, size_t count,
                      const char *set, char **doc, size_t *len, size_t *failed,
                      awq2_error *err);

/* ---------------------------------------------------------------- file sets (sets.md) */

#define AWQ2_SET_MANIFEST "model.awq2.set.json" /* SET-1 */
#define AWQ2_SET_VERSION 1u                      /* SET-3 */
#define AWQ2_MAX_SET_FILES 65536u                /* SET-2 */
#define AWQ2_MAX_MANIFEST_LENGTH (1ull << 24)    /* SET-2 */
#define AWQ2_MEMBER_SUFFIX ".awq2"               /* SET-4, SET-8 */

/* A non-negative integer of the manifest; JSON allows any number of digits (META-5: at most
 * 100 bytes), so a value of 2**64 or more is `huge` and `value` is UINT64_MAX. */
typedef struct {
    uint64_t value;
    int huge;
} awq2_uint;

typedef struct {
    char *name;             /* decoded; holds no NUL (SET-4), so it is a C string */
    size_t name_length;
    awq2_uint size, rank;   /* rank: in a rank set only, always < tp_size */
    char header_crc[9];     /* 8 lowercase hex digits */
    char sha256[65];        /* 64 lowercase hex digits */
} awq2_set_file;

typedef struct {
    int rank_set;           /* kind "rank"; else "split" */
    awq2_uint tp_size;      /* rank sets: at least 1 */
    awq2_set_file *files;   /* 1 to AWQ2_MAX_SET_FILES, in manifest order */
    size_t count;
} awq2_manifest;

/* SET-2, then SET-3, SET-4 (manifest.c): 0, or -1 with SET_BAD_MANIFEST or SET_UNSUPPORTED
 * (err->offset: the manifest byte), or -2 out of memory.  Free with awq2_manifest_free,
 * whatever it returned. */
int awq2_parse_manifest(const uint8_t *text, size_t len, awq2_manifest *m, awq2_error *err);
void awq2_manifest_free(awq2_manifest *m);
/* In checked metadata (strict JSON, an object; empty: none), the object member `outer`'s
 * member `inner` (manifest.c): 1 and *v when it is a non-negative integer as SET-2 defines
 * one; -1 when there is no `outer`; 0 otherwise (not an object, no `inner`, not such an
 * integer). */
int awq2_metadata_uint(const uint8_t *text, size_t len, const char *outer, const char *inner,
                       awq2_uint *v);

/* A file set's error: `file` names the member (or the manifest) it is in, NULL for the whole
 * set; `at_offset` when error.offset is a byte of that file. */
typedef struct {
    awq2_error error;
    const char *file;
    int at_offset;
} awq2_set_error;

typedef struct {
    int dirfd;              /* the folder; every member is opened from it by name (SET-4) */
    awq2_manifest manifest;
    awq2_file *members;     /* manifest order; each one's data is mapped only while in use */
    size_t mapped;          /* the one member mapped now (at most one: vm.max_map_count), or
                             * the member count when none is */
    char *extra;            /* the unlisted .awq2 name SET_EXTRA_FILE reports */
} awq2_set;

/* set.c.  Each returns 0, -1 a format error (err), -2 the folder or a file cannot be read
 * (err->error.message: why, err->file: which; no code), -3 out of memory. */
int awq2_set_open(awq2_set *s, int dirfd, awq2_set_error *err);   /* SET-2 to SET-5 */
int awq2_set_validate(awq2_set *s, awq2_set_error *err);          /* SET-8, SET-6, SET-7 */
int awq2_set_verify(awq2_set *s, awq2_set_error *err);            /* SET-8: ENT-10, SHA-256 */
int awq2_set_describe(awq2_set *s, char **doc, size_t *len, awq2_set_error *err);
/* rankrecord.c: member i's record of its rank against the manifest (SET-15), member i mapped
 * and fully validated: 0, or -1 with SET_WRONG_RANK naming it. */
int awq2_set_rank_record(const awq2_set *s, size_t i, awq2_set_error *err);
void awq2_set_close(awq2_set *s); /* does not close dirfd */
/* What a file of this st_mode is, when it is not a regular file ("not a regular file (a
 * folder)"); main.c says the same of its own argument. */
const char *awq2_not_regular(unsigned long mode);

#endif
