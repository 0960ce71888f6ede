/* fuzz_reader.c: the libFuzzer target of the C loader (python -m tools.fuzz.libfuzzer).
 *
 * LLVMFuzzerTestOneInput runs the bytes through exactly the path of main.c, the conformance
 * adapter: awq2_open (RD-1), awq2_validate (RD-2), awq2_verify (ENT-10), awq2_describe (every
 * tensor hashed, every layer decoded).  A rejection is a normal outcome; a sanitizer report, a
 * crash, a leak or a hang is a finding.  One extra check: a rejection names a registered-looking
 * code, and an accepted file has a document.
 *
 * LLVMFuzzerCustomMutator: every checksum of the format (header, trailer, index, metadata,
 * entries, payloads) would stop almost every mutation at its CRC, and the structures sit in
 * the first 128 bytes and the last few KiB of a file of 640 KiB.  So the mutator picks where
 * libFuzzer's own mutation lands (the whole file, the header, the index region, one entry
 * record, the trailer) and then, seven times in eight, writes every checksum back as a writer
 * would (from the header's fields as they now stand, skipping what lies outside the file).
 */
#include "../awq2.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t empty[1];
    awq2_file f;
    awq2_error err = {NULL, 0, ""};
    char *doc = NULL;
    size_t len = 0;
    int rc = awq2_open(&f, size ? data : empty, size, &err);
    if (!rc)
        rc = awq2_validate(&f, &err);
    if (!rc)
        rc = awq2_verify(&f, &err);
    if (!rc)
        rc = awq2_describe(&f, &doc, &len, &err);
    if (rc == -1 && (err.code == NULL || err.message[0] == '\0'))
        abort(); /* RD-3: every rejection has a code and a message */
    if (rc == 0 && (doc == NULL || len == 0))
        abort();
    free(doc);
    return 0;
}

/* ------------------------------------------------------------------ the mutator */

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

static void wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

/* [at, at + n) lies inside a file of size bytes */
static int inside(uint64_t at, uint64_t n, size_t size)
{
    return at <= size && n <= size - at;
}

/* Every checksum written back, in a writer's order: payloads and entries, the metadata, the
 * index, the header, the trailer.  With fix_size, file_size is set to the size first. */
static void refresh(uint8_t *d, size_t size, int fix_size)
{
    if (size < AWQ2_HEADER_SIZE + AWQ2_TRAILER_SIZE)
        return;
    if (fix_size)
        wr64(d + 64, size);
    uint64_t index_offset = rd64(d + 48), index_length = rd64(d + 56);
    uint64_t count = rd64(d + 72), dims_count = rd64(d + 80), names_length = rd64(d + 88);
    uint64_t metadata_length = rd64(d + 96);
    unsigned bits = d[104];
    if (bits < 32 && count <= AWQ2_MAX_TENSORS && dims_count <= count * AWQ2_MAX_DIMS &&
        names_length <= count * AWQ2_MAX_NAME_LENGTH && metadata_length <= AWQ2_MAX_METADATA_LENGTH) {
        uint64_t table = 4 * (((uint64_t)1 << bits) + 1);
        uint64_t entries = index_offset + (table + 7) / 8 * 8;
        uint64_t dims = entries + AWQ2_ENTRY_SIZE * count, names = dims + 8 * dims_count;
        uint64_t metadata = names + names_length;
        if (index_offset < size && inside(entries, metadata - entries, size)) {
            for (uint64_t i = 0; i < count; i++) {
                uint8_t *p = d + entries + AWQ2_ENTRY_SIZE * i;
                uint64_t data_offset = rd64(p + 8), data_length = rd64(p + 16);
                uint64_t name_offset = rd64(p + 24);
                uint32_t dims_index = (uint32_t)rd64(p + 32); /* the low 4 bytes */
                unsigned name_length = (unsigned)(p[36] | p[37] << 8), ndim = p[40];
                if (inside(data_offset, data_length, size))
                    wr32(p + 56, awq2_crc32c(0, d + data_offset, (size_t)data_length));
                if (ndim > AWQ2_MAX_DIMS || name_offset > names_length ||
                    name_length > names_length - name_offset || dims_index > dims_count ||
                    ndim > dims_count - dims_index)
                    continue;
                uint32_t crc = awq2_crc32c(0, p, AWQ2_ENTRY_CRC_COVERS);
                crc = awq2_crc32c(crc, d + names + name_offset, name_length);
                crc = awq2_crc32c(crc, d + dims + 8 * (uint64_t)dims_index, 8 * (size_t)ndim);
                wr32(p + 60, crc);
            }
        }
        if (inside(metadata, metadata_length, size))
            wr32(d + 112, awq2_crc32c(0, d + metadata, (size_t)metadata_length));
    }
    if (inside(index_offset, index_length, size))
        wr32(d + 108, awq2_crc32c(0, d + index_offset, (size_t)index_length));
    wr32(d + 124, awq2_crc32c(0, d, AWQ2_HEADER_CRC_COVERS));
    uint8_t *t = d + size - AWQ2_TRAILER_SIZE;
    memcpy(t, d + 48, 16); /* index_offset, index_length */
    memcpy(t + 16, d + 124, 4);
    wr32(t + 20, awq2_crc32c(0, t, AWQ2_TRAILER_CRC_COVERS));
}

/* libFuzzer's mutation of [at, at + n) in place; the file keeps its size. */
static void mutate_within(uint8_t *d, size_t size, uint64_t at, uint64_t n)
{
    if (n == 0 || !inside(at, n, size))
        return;
    LLVMFuzzerMutate(d + at, (size_t)n, (size_t)n);
}

size_t LLVMFuzzerCustomMutator(uint8_t *d, size_t size, size_t max_size, unsigned seed)
{
    uint64_t r = seed * UINT64_C(0x9E3779B97F4A7C15) + 1;
    r ^= r >> 29;
    unsigned where = (unsigned)(r % 8), fix = (unsigned)(r >> 8) % 8;
    uint64_t index_offset = size >= AWQ2_HEADER_SIZE ? rd64(d + 48) : 0;
    uint64_t index_length = size >= AWQ2_HEADER_SIZE ? rd64(d + 56) : 0;
    switch (where) {
    case 0:
    case 1: /* anywhere; the size may change */
        size = LLVMFuzzerMutate(d, size, max_size);
        break;
    case 2: /* the header */
        mutate_within(d, size, 0, size < AWQ2_HEADER_SIZE ? size : AWQ2_HEADER_SIZE);
        break;
    case 3:
    case 4: /* the index: bucket table, entries, dims, names, metadata */
        if (inside(index_offset, index_length, size))
            mutate_within(d, size, index_offset, index_length);
        else
            size = LLVMFuzzerMutate(d, size, max_size);
        break;
    case 5: { /* one entry record, or the dims and names after the entries */
        uint64_t span = index_length > 64 ? 64 : index_length;
        if (inside(index_offset, index_length, size) && index_length) {
            uint64_t at = index_offset + (r >> 16) % index_length;
            mutate_within(d, size, at, span < index_offset + index_length - at
                                           ? span : index_offset + index_length - at);
        }
        break;
    }
    case 6: /* the trailer */
        if (size >= AWQ2_TRAILER_SIZE)
            mutate_within(d, size, size - AWQ2_TRAILER_SIZE, AWQ2_TRAILER_SIZE);
        break;
    default: { /* a payload's first bytes (the codec's input) */
        uint64_t slab = AWQ2_SLAB_OFFSET, at = slab + AWQ2_ALIGNMENT * ((r >> 16) % 8);
        if (at < size)
            mutate_within(d, size, at, size - at < 256 ? size - at : 256);
        break;
    }
    }
    if (fix != 0)
        refresh(d, size, fix == 1);
    return size;
}
