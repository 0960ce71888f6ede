/* reader.c: open (RD-1), lookup (IDX-9), full validation (RD-2) and verify (ENT-10), each check
 * in the order of format.md "Reading".  All size arithmetic is in uint64_t and every sum or
 * product that is compared is first shown not to wrap. */
#include "awq2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ registries */

static const struct {
    const char *name;
    unsigned size;
} DTYPES[AWQ2_DTYPE_MAX + 1] = {
    {NULL, 0},       {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"U16", 2},     {"I16", 2},
    {"U32", 4},      {"I32", 4},  {"U64", 8}, {"I64", 8}, {"F16", 2},     {"BF16", 2},
    {"F32", 4},      {"F64", 8},  {"F8_E4M3", 1},         {"F8_E5M2", 1},
};

static const char *const LAYOUTS[AWQ2_LAYOUT_DEFINED] = {
    "DENSE", "AWQ_QWEIGHT", "AWQ_SCALES", "AWQ_QZEROS",
    "MARLIN_QWEIGHT", "MARLIN_SCALES", "MARLIN_QZEROS",
};

const char *awq2_dtype_name(unsigned code) { return code <= AWQ2_DTYPE_MAX ? DTYPES[code].name : NULL; }
unsigned awq2_dtype_size(unsigned code) { return code <= AWQ2_DTYPE_MAX ? DTYPES[code].size : 0; }
const char *awq2_layout_name(unsigned code) { return code < AWQ2_LAYOUT_DEFINED ? LAYOUTS[code] : NULL; }

/* ------------------------------------------------------------------ little-endian fields */

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* n bytes of zeros?  Else *first is the first non-zero one.  Compared a block at a time with
 * memcmp (the padding to check is up to 64 KiB a payload), then byte by byte in the block
 * that differs. */
static int all_zero(const uint8_t *p, size_t n, size_t *first)
{
    static const uint8_t zeros[4096];
    size_t at = 0;
    while (at < n) {
        size_t len = n - at < sizeof zeros ? n - at : sizeof zeros;
        if (memcmp(p + at, zeros, len) != 0)
            for (size_t i = at; i < at + len; i++)
                if (p[i]) {
                    *first = i;
                    return 0;
                }
        at += len;
    }
    return 1;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; } /* x < 2**63 */

/* The canonical bucket_bits (IDX-5): the smallest b with 2**b >= tensor_count. */
static unsigned canonical_bucket_bits(uint64_t count)
{
    unsigned b = 0;
    while (b < 63 && ((uint64_t)1 << b) < count)
        b++;
    return b;
}

static uint64_t bucket_of(uint64_t h, unsigned bits)
{
    return (h ^ (h >> 32)) & (((uint64_t)1 << bits) - 1);
}

/* ------------------------------------------------------------------ open (RD-1) */

int awq2_open(awq2_file *f, const uint8_t *d, uint64_t size, awq2_error *err)
{
    memset(f, 0, sizeof *f);
    f->data = d;
    f->size = size;
    /* 1. magic: the first min(8, size) bytes (HDR-1); a proper prefix of it is TRUNCATED */
    if (memcmp(d, AWQ2_MAGIC, size < 8 ? (size_t)size : 8) != 0)
        return awq2_fail(err, "BAD_MAGIC", 0, "the first bytes are not the AWQ-v2 magic");
    /* 2. a header and a trailer (FILE-1) */
    if (size < AWQ2_HEADER_SIZE + AWQ2_TRAILER_SIZE)
        return awq2_fail(err, "TRUNCATED", size,
                         "file is %llu bytes; a header and a trailer need 160",
                         (unsigned long long)size);
    /* 3. major version (VER-2) */
    f->version_major = le16(d + 8);
    f->version_minor = le16(d + 10);
    if (f->version_major != AWQ2_VERSION_MAJOR)
        return awq2_fail(err, "UNSUPPORTED_VERSION", 8, "major version %u; this reader reads 2",
                         f->version_major);
    /* 4. header checksum (HDR-4) */
    f->header_crc = le32(d + 124);
    uint32_t crc = awq2_crc32c(0, d, AWQ2_HEADER_CRC_COVERS);
    if (crc != f->header_crc)
        return awq2_fail(err, "BAD_HEADER_CHECKSUM", 124,
                         "header_crc is 0x%08X; CRC-32C of bytes 0..123 is 0x%08X",
                         f->header_crc, crc);
    f->required_flags = le64(d + 16);
    f->optional_flags = le64(d + 24); /* VER-4: ignored */
    f->alignment = le64(d + 32);
    f->slab_offset = le64(d + 40);
    f->index_offset = le64(d + 48);
    f->index_length = le64(d + 56);
    f->file_size = le64(d + 64);
    f->tensor_count = le64(d + 72);
    f->dims_count = le64(d + 80);
    f->names_length = le64(d + 88);
    f->metadata_length = le64(d + 96);
    f->bucket_bits = d[104];
    f->index_crc = le32(d + 108);
    f->metadata_crc = le32(d + 112);
    /* 5. required flags (VER-3): 2.0 defines none */
    if (f->required_flags)
        return awq2_fail(err, "UNKNOWN_REQUIRED_FLAG", 16,
                         "required_flags 0x%016llX; this reader implements no flag",
                         (unsigned long long)f->required_flags);
    /* 6. reserved bytes, unless the file is a later minor version (HDR-5) */
    if (f->version_minor <= AWQ2_VERSION_MINOR) {
        static const struct {
            unsigned at, len;
            const char *name;
        } reserved[3] = {{12, 4, "reserved0"}, {105, 3, "reserved1"}, {116, 8, "reserved2"}};
        for (int i = 0; i < 3; i++) {
            size_t first;
            if (!all_zero(d + reserved[i].at, reserved[i].len, &first))
                return awq2_fail(err, "BAD_HEADER_FIELD", reserved[i].at,
                                 "%s is not zero in a 2.%u file", reserved[i].name,
                                 f->version_minor);
        }
    }
    /* 7. fixed fields (HDR-2) */
    if (f->alignment != AWQ2_ALIGNMENT)
        return awq2_fail(err, "BAD_HEADER_FIELD", 32, "alignment %llu; expected 65536",
                         (unsigned long long)f->alignment);
    if (f->slab_offset != AWQ2_SLAB_OFFSET)
        return awq2_fail(err, "BAD_HEADER_FIELD", 40, "slab_offset 0x%llX; expected 0x10000",
                         (unsigned long long)f->slab_offset);
    /* 8. limits and counts (LIM-2, IDX-5/LIM-7, LIM-5, ENT-2/ENT-3) */
    if (f->tensor_count > AWQ2_MAX_TENSORS)
        return awq2_fail(err, "LIMIT_TENSORS", 72, "tensor_count %llu over max_tensors 2**24",
                         (unsigned long long)f->tensor_count);
    if (f->bucket_bits != canonical_bucket_bits(f->tensor_count))
        return awq2_fail(err, "BAD_INDEX_LAYOUT", 104,
                         "bucket_bits %u; %llu tensors need %u", f->bucket_bits,
                         (unsigned long long)f->tensor_count,
                         canonical_bucket_bits(f->tensor_count));
    if (f->metadata_length > AWQ2_MAX_METADATA_LENGTH)
        return awq2_fail(err, "LIMIT_METADATA", 96,
                         "metadata_length %llu over max_metadata_length 2**24",
                         (unsigned long long)f->metadata_length);
    if (f->names_length > f->tensor_count * AWQ2_MAX_NAME_LENGTH)
        return awq2_fail(err, "BAD_INDEX_LAYOUT", 88,
                         "names_length %llu over tensor_count x max_name_length",
                         (unsigned long long)f->names_length);
    if (f->dims_count > f->tensor_count * AWQ2_MAX_DIMS)
        return awq2_fail(err, "BAD_INDEX_LAYOUT", 80,
                         "dims_count %llu over tensor_count x max_dims",
                         (unsigned long long)f->dims_count);
    /* 9. file size (FILE-1, FILE-2) */
    if (size < f->file_size)
        return awq2_fail(err, "TRUNCATED", size, "file is %llu bytes; file_size says %llu",
                         (unsigned long long)size, (unsigned long long)f->file_size);
    if (size > f->file_size)
        return awq2_fail(err, "FILE_SIZE_MISMATCH", 64, "file is %llu bytes; file_size says %llu",
                         (unsigned long long)size, (unsigned long long)f->file_size);
    /* 10. index placement (HDR-3) */
    if (f->index_offset % AWQ2_ALIGNMENT != 0 || f->index_offset < f->slab_offset)
        return awq2_fail(err, "BAD_HEADER_FIELD", 48,
                         "index_offset 0x%llX is not a multiple of 65536 at or after the slab",
                         (unsigned long long)f->index_offset);
    /* 11. the index ends where the trailer starts (FILE-4, IDX-1), without wrapping */
    uint64_t trailer_at = f->file_size - AWQ2_TRAILER_SIZE;
    if (f->index_offset > trailer_at || f->index_length != trailer_at - f->index_offset)
        return awq2_fail(err, "BAD_INDEX_LAYOUT", 56,
                         "index_offset + index_length + 32 != file_size (%llu + %llu + 32 vs %llu)",
                         (unsigned long long)f->index_offset,
                         (unsigned long long)f->index_length, (unsigned long long)f->file_size);
    /* 12. the section sizes add up (IDX-3); every term is bounded by step 8 */
    uint64_t table = 4 * (((uint64_t)1 << f->bucket_bits) + 1);
    uint64_t b = align_up(table, 8);
    uint64_t want = b + AWQ2_ENTRY_SIZE * f->tensor_count + 8 * f->dims_count +
                    f->names_length + f->metadata_length;
    if (f->index_length != want)
        return awq2_fail(err, "BAD_INDEX_LAYOUT", 56,
                         "index_length %llu; the header's counts give %llu",
                         (unsigned long long)f->index_length, (unsigned long long)want);
    /* 13 to 15. the trailer (TRL-1, TRL-2, TRL-3) */
    const uint8_t *t = d + trailer_at;
    if (memcmp(t + 24, AWQ2_END_MAGIC, 8) != 0)
        return awq2_fail(err, "BAD_TRAILER_MAGIC", f->file_size - 8,
                         "the last 8 bytes are not the trailer magic");
    crc = awq2_crc32c(0, t, AWQ2_TRAILER_CRC_COVERS);
    if (crc != le32(t + 20))
        return awq2_fail(err, "BAD_TRAILER_CHECKSUM", f->file_size - 12,
                         "trailer_crc is 0x%08X; CRC-32C of trailer bytes 0..19 is 0x%08X",
                         le32(t + 20), crc);
    if (le64(t) != f->index_offset)
        return awq2_fail(err, "TRAILER_MISMATCH", trailer_at, "trailer index_offset differs");
    if (le64(t + 8) != f->index_length)
        return awq2_fail(err, "TRAILER_MISMATCH", trailer_at + 8, "trailer index_length differs");
    if (le32(t + 16) != f->header_crc)
        return awq2_fail(err, "TRAILER_MISMATCH", trailer_at + 16, "trailer header_crc differs");
    f->table_end = f->index_offset + table;
    f->entries_at = f->index_offset + b;
    f->dims_at = f->entries_at + AWQ2_ENTRY_SIZE * f->tensor_count;
    f->names_at = f->dims_at + 8 * f->dims_count;
    f->metadata_at = f->names_at + f->names_length;
    return 0;
}

/* ------------------------------------------------------------------ entries */

static uint32_t bucket_bound(const awq2_file *f, uint64_t i)
{
    return le32(f->data + f->index_offset + 4 * i);
}

/* read_entry of the lookup algorithm: limits, name and dims bounds, entry_crc (ENT-9). */
int awq2_read_entry(const awq2_file *f, uint64_t i, awq2_entry *e, awq2_error *err)
{
    const uint8_t *p = f->data + f->entries_at + AWQ2_ENTRY_SIZE * i;
    memset(e, 0, sizeof *e);
    e->at = f->entries_at + AWQ2_ENTRY_SIZE * i;
    e->name_hash = le64(p);
    e->data_offset = le64(p + 8);
    e->data_length = le64(p + 16);
    e->name_offset = le64(p + 24);
    e->dims_index = le32(p + 32);
    e->name_length = le16(p + 36);
    e->dtype = p[38];
    e->layout = p[39];
    e->ndim = p[40];
    e->bits = p[41];
    e->flags = le16(p + 42);
    e->group_size = (int32_t)le32(p + 44); /* two's complement on every C11 target we build */
    e->k = le32(p + 48);
    e->n = le32(p + 52);
    e->data_crc = le32(p + 56);
    e->entry_crc = le32(p + 60);
    if (e->ndim > AWQ2_MAX_DIMS)
        return awq2_fail(err, "LIMIT_DIMS", e->at + 40, "entry %llu: ndim %u over max_dims 8",
                         (unsigned long long)i, e->ndim);
    if (e->name_length > AWQ2_MAX_NAME_LENGTH)
        return awq2_fail(err, "LIMIT_NAME_LENGTH", e->at + 36,
                         "entry %llu: name_length %u over max_name_length 1024",
                         (unsigned long long)i, e->name_length);
    if (e->name_offset > f->names_length || e->name_length > f->names_length - e->name_offset)
        return awq2_fail(err, "BAD_ENTRY_FIELD", e->at + 24,
                         "entry %llu: name outside the name pool", (unsigned long long)i);
    if (e->dims_index > f->dims_count || e->ndim > f->dims_count - e->dims_index)
        return awq2_fail(err, "BAD_ENTRY_FIELD", e->at + 32,
                         "entry %llu: dims outside the dims section", (unsigned long long)i);
    e->name = f->data + f->names_at + e->name_offset;
    const uint8_t *dims = f->data + f->dims_at + 8 * (uint64_t)e->dims_index;
    for (unsigned j = 0; j < e->ndim; j++)
        e->dims[j] = le64(dims + 8 * j);
    uint32_t crc = awq2_crc32c(0, p, AWQ2_ENTRY_CRC_COVERS);
    crc = awq2_crc32c(crc, e->name, e->name_length);
    crc = awq2_crc32c(crc, dims, 8 * (size_t)e->ndim);
    if (crc != e->entry_crc)
        return awq2_fail(err, "BAD_ENTRY_CHECKSUM", e->at + 60,
                         "entry %llu: entry_crc 0x%08X; computed 0x%08X", (unsigned long long)i,
                         e->entry_crc, crc);
    return 0;
}

/* ENT-5: the payload size, product of the dims times the item size; *ok = 0 when the product
 * of the non-zero dims times the item size reaches 2**63. */
uint64_t awq2_payload_size(const awq2_entry *e, int *ok)
{
    uint64_t p = awq2_dtype_size(e->dtype);
    int zero = 0;
    *ok = 1;
    for (unsigned j = 0; j < e->ndim; j++) {
        uint64_t d = e->dims[j];
        if (d == 0) {
            zero = 1;
            continue;
        }
        if (p > (UINT64_C(0x7FFFFFFFFFFFFFFF)) / d) {
            *ok = 0;
            return 0;
        }
        p *= d;
    }
    return zero ? 0 : p;
}

static int is_scales(unsigned layout) { return layout == AWQ2_AWQ_SCALES || layout == AWQ2_MARLIN_SCALES; }
static int is_marlin(unsigned layout) { return layout >= AWQ2_MARLIN_QWEIGHT && layout <= AWQ2_MARLIN_QZEROS; }

/* LAY-2 to LAY-6, in the order of "Checking an entry" step 10. */
static int check_quant(const awq2_entry *e, awq2_error *err)
{
    const char *C = "BAD_QUANT_FIELDS";
    if (e->layout == AWQ2_DENSE) {
        if (e->bits || e->group_size || e->k || e->n)
            return awq2_fail(err, C, e->at, "DENSE entry with bits, group_size, k or n set");
        return 0;
    }
    if (e->bits != 4 && e->bits != 8)
        return awq2_fail(err, C, e->at, "bits %u; expected 4 or 8", e->bits);
    if (e->k < 1 || e->n < 1)
        return awq2_fail(err, C, e->at, "k %u, n %u; both must be at least 1", e->k, e->n);
    int64_t gs = e->group_size;
    if (!(gs == -1 || (gs > 0 && e->k % (uint64_t)gs == 0)))
        return awq2_fail(err, C, e->at, "group_size %lld is not -1 or a divisor of k %u",
                         (long long)gs, e->k);
    uint64_t pf = 32u / e->bits;
    if (e->n % pf)
        return awq2_fail(err, C, e->at, "n %u not a multiple of %llu", e->n, (unsigned long long)pf);
    if (is_marlin(e->layout)) {
        if (!(gs == -1 || gs == 32 || gs == 64 || gs == 128))
            return awq2_fail(err, C, e->at, "MARLIN group_size %lld not in {-1, 32, 64, 128}",
                             (long long)gs);
        if (e->k % 128 || e->n % 64)
            return awq2_fail(err, C, e->at, "MARLIN needs k %% 128 == 0 and n %% 64 == 0 (k %u, n %u)",
                             e->k, e->n);
    }
    if (is_scales(e->layout) ? !(e->dtype == AWQ2_F16 || e->dtype == AWQ2_BF16 || e->dtype == AWQ2_F32)
                             : e->dtype != AWQ2_I32)
        return awq2_fail(err, C, e->at, "dtype %s does not suit layout %s",
                         awq2_dtype_name(e->dtype), awq2_layout_name(e->layout));
    uint64_t k = e->k, n = e->n, groups = gs == -1 ? 1 : k / (uint64_t)gs, want0, want1;
    switch (e->layout) {
    case AWQ2_AWQ_QWEIGHT: want0 = k; want1 = n / pf; break;
    case AWQ2_MARLIN_QWEIGHT: want0 = k / 16; want1 = n * 16 / pf; break;
    case AWQ2_AWQ_QZEROS:
    case AWQ2_MARLIN_QZEROS: want0 = groups; want1 = n / pf; break;
    default: want0 = groups; want1 = n; break; /* scales */
    }
    if (e->ndim != 2 || e->dims[0] != want0 || e->dims[1] != want1)
        return awq2_fail(err, C, e->at, "shape is not [%llu, %llu] for layout %s",
                         (unsigned long long)want0, (unsigned long long)want1,
                         awq2_layout_name(e->layout));
    return 0;
}

/* "Checking an entry", steps 1 to 10 (ENT-7). */
static int check_entry(const awq2_file *f, const awq2_entry *e, awq2_error *err)
{
    if (e->flags)
        return awq2_fail(err, "BAD_ENTRY_FIELD", e->at + 42, "entry flags 0x%04X; expected 0",
                         e->flags);
    if (e->name_length == 0)
        return awq2_fail(err, "EMPTY_NAME", e->at + 36, "entry with an empty name");
    size_t bad = awq2_utf8_invalid_at(e->name, e->name_length);
    if (bad != e->name_length)
        return awq2_fail(err, "BAD_NAME_UTF8", f->names_at + e->name_offset + bad,
                         "name is not UTF-8: byte 0x%02X at name byte %zu", e->name[bad], bad);
    uint64_t h = awq2_fnv1a64(e->name, e->name_length);
    if (h != e->name_hash)
        return awq2_fail(err, "BAD_NAME_HASH", e->at,
                         "name_hash 0x%016llX; FNV-1a 64 of the name is 0x%016llX",
                         (unsigned long long)e->name_hash, (unsigned long long)h);
    if (!awq2_dtype_name(e->dtype))
        return awq2_fail(err, "BAD_DTYPE", e->at, "dtype code %u is not registered", e->dtype);
    int ok;
    uint64_t size = awq2_payload_size(e, &ok);
    if (!ok)
        return awq2_fail(err, "BAD_SHAPE", e->at, "shape's byte size reaches 2**63");
    if (e->data_length != size)
        return awq2_fail(err, "BAD_LENGTH", e->at, "data_length %llu; shape gives %llu",
                         (unsigned long long)e->data_length, (unsigned long long)size);
    if (e->data_offset % AWQ2_ALIGNMENT)
        return awq2_fail(err, "MISALIGNED_OFFSET", e->at, "data_offset 0x%llX not 64 KiB aligned",
                         (unsigned long long)e->data_offset);
    if (e->data_offset < f->slab_offset || e->data_offset > f->index_offset ||
        e->data_length > f->index_offset - e->data_offset)
        return awq2_fail(err, "OUT_OF_BOUNDS", e->at, "payload [0x%llX, +%llu) outside the slab",
                         (unsigned long long)e->data_offset, (unsigned long long)e->data_length);
    if (!awq2_layout_name(e->layout))
        return awq2_fail(err, "BAD_LAYOUT", e->at, "layout code %u unknown or reserved", e->layout);
    return check_quant(e, err);
}

static int name_cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    int c = memcmp(a, b, al < bl ? al : bl);
    if (c)
        return c;
    return (al > bl) - (al < bl);
}

/* ------------------------------------------------------------------ lookup (IDX-9) */

int awq2_lookup(const awq2_file *f, const uint8_t *name, size_t len, awq2_entry *e,
                awq2_error *err)
{
    uint64_t h = awq2_fnv1a64(name, len), b = bucket_of(h, f->bucket_bits);
    uint64_t lo = bucket_bound(f, b), hi = bucket_bound(f, b + 1);
    awq2_entry x;
    if (!(lo <= hi && hi <= f->tensor_count))
        return awq2_fail(err, "BAD_BUCKET_TABLE", f->index_offset + 4 * b, "bucket bounds disordered");
    if (hi - lo > AWQ2_MAX_BUCKET_LENGTH)
        return awq2_fail(err, "LIMIT_BUCKET", f->index_offset + 4 * b, "bucket too long");
    if (lo > 0) {
        if (awq2_read_entry(f, lo - 1, &x, err))
            return -1;
        if (bucket_of(x.name_hash, f->bucket_bits) >= b)
            return awq2_fail(err, "BAD_BUCKET_TABLE", f->index_offset + 4 * b, "bucket start wrong");
    }
    if (hi < f->tensor_count) {
        if (awq2_read_entry(f, hi, &x, err))
            return -1;
        if (bucket_of(x.name_hash, f->bucket_bits) <= b)
            return awq2_fail(err, "BAD_BUCKET_TABLE", f->index_offset + 4 * b + 4, "bucket end wrong");
    }
    int found = 0;
    for (uint64_t i = lo; i < hi; i++) {
        if (awq2_read_entry(f, i, &x, err))
            return -1;
        if (bucket_of(x.name_hash, f->bucket_bits) != b)
            return awq2_fail(err, "BAD_ENTRY_ORDER", x.at, "entry in the wrong bucket");
        if (x.name_hash == h && name_cmp(x.name, x.name_length, name, len) == 0) {
            *e = x;
            found = 1;
        }
    }
    if (found)
        return check_entry(f, e, err) ? -1 : 1;
    return 0;
}

/* ------------------------------------------------------------------ layers (LAY-7) */

static const char *const ROLE_SUFFIX[3] = {".qweight", ".scales", ".qzeros"};

/* LAY-10: an entry named <prefix>.bias, where <prefix>.qweight is an AWQ_QWEIGHT or
 * MARLIN_QWEIGHT entry, is DENSE, F16, BF16 or F32, of shape [n]. */
static int check_bias(const awq2_file *f, const awq2_entry *e, awq2_error *err)
{
    static const char BIAS[] = ".bias", QWEIGHT[] = ".qweight";
    uint8_t name[AWQ2_MAX_NAME_LENGTH + 16];
    size_t blen = sizeof BIAS - 1, qlen = sizeof QWEIGHT - 1;
    awq2_entry qw;
    if (e->name_length < blen || memcmp(e->name + e->name_length - blen, BIAS, blen) != 0)
        return 0;
    size_t plen = e->name_length - blen;
    memcpy(name, e->name, plen);
    memcpy(name + plen, QWEIGHT, qlen);
    int found = awq2_lookup(f, name, plen + qlen, &qw, err);
    if (found < 0)
        return -1;
    if (!found || (qw.layout != AWQ2_AWQ_QWEIGHT && qw.layout != AWQ2_MARLIN_QWEIGHT))
        return 0; /* an ordinary tensor */
    int fp = e->dtype == AWQ2_F16 || e->dtype == AWQ2_BF16 || e->dtype == AWQ2_F32;
    if (e->layout != AWQ2_DENSE || !fp || e->ndim != 1 || e->dims[0] != qw.n)
        return awq2_fail(err, "BAD_QUANT_FIELDS", e->at,
                         "%.*s is the bias of a layer with n = %u: expected DENSE, F16, BF16 or "
                         "F32, shape [%u]", (int)e->name_length, (const char *)e->name, qw.n,
                         qw.n);
    return 0;
}

/* Every quantised entry is named <prefix>.<role of its layout>, and <prefix>.qweight,
 * .scales and .qzeros all exist, in one family, with the same k, n, bits and group_size
 * (LAY-7); a layer's bias fits it (LAY-10).  One walk in index order. */
static int check_layers(const awq2_file *f, awq2_error *err)
{
    awq2_entry e, other;
    uint8_t name[AWQ2_MAX_NAME_LENGTH + 16];
    for (uint64_t i = 0; i < f->tensor_count; i++) {
        if (awq2_read_entry(f, i, &e, err))
            return -1;
        if (check_bias(f, &e, err))
            return -1;
        if (e.layout == AWQ2_DENSE)
            continue;
        unsigned family = is_marlin(e.layout) ? AWQ2_MARLIN_QWEIGHT : AWQ2_AWQ_QWEIGHT;
        unsigned role = e.layout - family;
        const char *suffix = ROLE_SUFFIX[role];
        size_t slen = strlen(suffix);
        if (e.name_length < slen || memcmp(e.name + e.name_length - slen, suffix, slen) != 0)
            return awq2_fail(err, "BAD_QUANT_FIELDS", e.at,
                             "entry %llu has layout %s but its name does not end in %s",
                             (unsigned long long)i, awq2_layout_name(e.layout), suffix);
        size_t plen = e.name_length - slen;
        memcpy(name, e.name, plen);
        for (unsigned r = 0; r < 3; r++) {
            if (r == role)
                continue;
            size_t olen = strlen(ROLE_SUFFIX[r]);
            memcpy(name + plen, ROLE_SUFFIX[r], olen);
            int found = awq2_lookup(f, name, plen + olen, &other, err);
            if (found < 0)
                return -1;
            if (!found)
                return awq2_fail(err, "BAD_QUANT_FIELDS", e.at, "layer %.*s has no %s entry",
                                 (int)plen, (const char *)e.name, ROLE_SUFFIX[r] + 1);
            if (other.layout != family + r || other.k != e.k || other.n != e.n ||
                other.bits != e.bits || other.group_size != e.group_size)
                return awq2_fail(err, "BAD_QUANT_FIELDS", e.at,
                                 "layer %.*s: %s and %s disagree (layout family, k, n, bits or "
                                 "group_size)", (int)plen, (const char *)e.name, suffix,
                                 ROLE_SUFFIX[r]);
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ full validation (RD-2) */

typedef struct {
    uint64_t offset, length, index;
    const uint8_t *name;
    uint16_t name_length;
    uint32_t crc;
} placed;

static int by_offset_then_index(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static int check_zero(const uint8_t *data, uint64_t from, uint64_t to, const char *what,
                      awq2_error *err)
{
    size_t first;
    if (to > from && !all_zero(data + from, (size_t)(to - from), &first))
        return awq2_fail(err, "NONZERO_PADDING", from + first, "non-zero byte in %s", what);
    return 0;
}

/* Collects every entry for placement; when `all`, empty payloads too (for verify). */
static int collect(const awq2_file *f, int all, placed **out, size_t *count, awq2_error *err)
{
    placed *v = malloc((f->tensor_count ? f->tensor_count : 1) * sizeof *v);
    size_t m = 0;
    awq2_entry e;
    if (!v)
        return awq2_fail(err, "LIMIT_TENSORS", 72, "out of memory for %llu entries",
                         (unsigned long long)f->tensor_count);
    for (uint64_t i = 0; i < f->tensor_count; i++) {
        if (awq2_read_entry(f, i, &e, err)) {
            free(v);
            return -1;
        }
        if (e.data_length > 0 || all) {
            v[m].offset = e.data_offset;
            v[m].length = e.data_length;
            v[m].index = i;
            v[m].name = e.name;
            v[m].name_length = e.name_length;
            v[m].crc = e.data_crc;
            m++;
        }
    }
    *out = v;
    *count = m;
    return 0;
}

int awq2_validate(const awq2_file *f, awq2_error *err)
{
    const uint8_t *d = f->data;
    /* 1. index checksum (IDX-4) */
    uint32_t crc = awq2_crc32c(0, d + f->index_offset, (size_t)f->index_length);
    if (crc != f->index_crc)
        return awq2_fail(err, "BAD_INDEX_CHECKSUM", f->index_offset,
                         "index_crc 0x%08X; CRC-32C of the index region is 0x%08X", f->index_crc,
                         crc);
    /* 2. bucket table (IDX-5, LIM-6) */
    uint64_t nb = (uint64_t)1 << f->bucket_bits;
    if (bucket_bound(f, 0) != 0)
        return awq2_fail(err, "BAD_BUCKET_TABLE", f->index_offset, "buckets[0] is %u; expected 0",
                         bucket_bound(f, 0));
    for (uint64_t i = 1; i <= nb; i++)
        if (bucket_bound(f, i) < bucket_bound(f, i - 1))
            return awq2_fail(err, "BAD_BUCKET_TABLE", f->index_offset + 4 * i,
                             "buckets[%llu] decreases", (unsigned long long)i);
    if (bucket_bound(f, nb) != f->tensor_count)
        return awq2_fail(err, "BAD_BUCKET_TABLE", f->index_offset + 4 * nb,
                         "last bucket bound %u; tensor_count is %llu", bucket_bound(f, nb),
                         (unsigned long long)f->tensor_count);
    for (uint64_t i = 0; i < nb; i++)
        if (bucket_bound(f, i + 1) - bucket_bound(f, i) > AWQ2_MAX_BUCKET_LENGTH)
            return awq2_fail(err, "LIMIT_BUCKET", f->index_offset + 4 * i,
                             "bucket %llu holds %u entries; max_bucket_length is 64",
                             (unsigned long long)i, bucket_bound(f, i + 1) - bucket_bound(f, i));
    /* 3. every entry */
    uint64_t names_sum = 0, dims_sum = 0, prev_bucket = 0;
    awq2_entry e, prev;
    memset(&prev, 0, sizeof prev);
    for (uint64_t i = 0; i < f->tensor_count; i++) {
        if (awq2_read_entry(f, i, &e, err))
            return -1;
        if (e.name_offset != names_sum)
            return awq2_fail(err, "BAD_ENTRY_FIELD", e.at + 24,
                             "name_offset %llu; names are packed, expected %llu",
                             (unsigned long long)e.name_offset, (unsigned long long)names_sum);
        if (e.dims_index != dims_sum)
            return awq2_fail(err, "BAD_ENTRY_FIELD", e.at + 32,
                             "dims_index %u; dims are packed, expected %llu", e.dims_index,
                             (unsigned long long)dims_sum);
        names_sum += e.name_length;
        dims_sum += e.ndim;
        if (check_entry(f, &e, err))
            return -1;
        uint64_t b = bucket_of(e.name_hash, f->bucket_bits);
        if (!(bucket_bound(f, b) <= i && i < bucket_bound(f, b + 1)))
            return awq2_fail(err, "BAD_ENTRY_ORDER", e.at, "entry %llu is outside its bucket %llu",
                             (unsigned long long)i, (unsigned long long)b);
        if (i > 0 && prev_bucket == b) {
            int c = name_cmp(e.name, e.name_length, prev.name, prev.name_length);
            if (c == 0)
                return awq2_fail(err, "DUPLICATE_NAME", e.at, "entry %llu repeats a name",
                                 (unsigned long long)i);
            if (c < 0)
                return awq2_fail(err, "BAD_ENTRY_ORDER", e.at,
                                 "entry %llu sorts before the entry ahead of it in its bucket",
                                 (unsigned long long)i);
        }
        prev = e;
        prev_bucket = b;
    }
    if (names_sum != f->names_length)
        return awq2_fail(err, "BAD_ENTRY_FIELD", 88, "names add up to %llu; names_length is %llu",
                         (unsigned long long)names_sum, (unsigned long long)f->names_length);
    if (dims_sum != f->dims_count)
        return awq2_fail(err, "BAD_ENTRY_FIELD", 80, "ndims add up to %llu; dims_count is %llu",
                         (unsigned long long)dims_sum, (unsigned long long)f->dims_count);
    if (check_layers(f, err)) /* LAY-7, after every entry has passed */
        return -1;
    /* 4. payload placement (SLAB-4, SLAB-5, SLAB-1) */
    placed *v;
    size_t m;
    if (collect(f, 0, &v, &m, err))
        return -1;
    qsort(v, m, sizeof *v, by_offset_then_index);
    uint64_t expected = f->slab_offset, prev_end = f->slab_offset;
    for (size_t j = 0; j < m; j++) {
        if (v[j].offset < prev_end) {
            awq2_fail(err, "OVERLAP", v[j].offset, "payload of entry %llu overlaps the one before",
                      (unsigned long long)v[j].index);
            free(v);
            return -1;
        }
        if (v[j].offset != expected) {
            awq2_fail(err, "SLAB_GAP", v[j].offset, "payload at 0x%llX; packing puts it at 0x%llX",
                      (unsigned long long)v[j].offset, (unsigned long long)expected);
            free(v);
            return -1;
        }
        prev_end = v[j].offset + v[j].length;
        expected = align_up(prev_end, AWQ2_ALIGNMENT);
    }
    if (f->index_offset != expected) {
        awq2_fail(err, "SLAB_GAP", f->index_offset, "index at 0x%llX; packing puts it at 0x%llX",
                  (unsigned long long)f->index_offset, (unsigned long long)expected);
        free(v);
        return -1;
    }
    /* 5. padding (PAD-1 to PAD-4) */
    int rc = check_zero(d, AWQ2_HEADER_SIZE, f->slab_offset, "the header padding", err);
    for (size_t j = 0; !rc && j < m; j++)
        rc = check_zero(d, v[j].offset + v[j].length, align_up(v[j].offset + v[j].length, AWQ2_ALIGNMENT),
                        "the slab padding", err);
    if (!rc && m == 0)
        rc = check_zero(d, f->slab_offset, f->index_offset, "the empty slab", err);
    free(v);
    if (rc)
        return rc;
    if (check_zero(d, f->table_end, f->entries_at, "the bucket table padding", err))
        return -1;
    /* 6. metadata (META-4, then META-1, META-2, LIM-5) */
    crc = awq2_crc32c(0, d + f->metadata_at, (size_t)f->metadata_length);
    if (crc != f->metadata_crc)
        return awq2_fail(err, "BAD_METADATA_CHECKSUM", f->metadata_at,
                         "metadata_crc 0x%08X; CRC-32C of the metadata is 0x%08X", f->metadata_crc,
                         crc);
    return awq2_check_metadata(d + f->metadata_at, (size_t)f->metadata_length, f->metadata_at, err);
}

/* Verify (ENT-10): every payload's CRC-32C, in data_offset order, ties in index order. */
int awq2_verify(const awq2_file *f, awq2_error *err)
{
    placed *v;
    size_t m;
    if (collect(f, 1, &v, &m, err))
        return -1;
    qsort(v, m, sizeof *v, by_offset_then_index);
    for (size_t j = 0; j < m; j++) {
        uint32_t crc = awq2_crc32c(0, f->data + v[j].offset, (size_t)v[j].length);
        if (crc != v[j].crc) {
            awq2_fail(err, "BAD_TENSOR_CHECKSUM", v[j].offset,
                      "entry %llu: data_crc 0x%08X; CRC-32C of the payload is 0x%08X",
                      (unsigned long long)v[j].index, v[j].crc, crc);
            free(v);
            return -1;
        }
    }
    free(v);
    return 0;
}
