/* describe.c: the adapter's JSON document of an opened, validated and verified file
 * (conformance/schema/adapter-output.schema.json): every tensor with its payload's SHA-256,
 * every quantised layer decoded (codec.md) with the hashes of its parts, and the metadata;
 * for a file set (ADP-5), every member's, each with its rank in a rank set, and `set`.
 * main.c prints it; the fuzz target (fuzz/fuzz_reader.c) builds it the same way.
 */
#include "awq2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ output buffer */

typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->failed || !n) /* b->p may still be NULL: no memcpy with it (C11 7.24.1p2) */
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->failed = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

static void putf(buf *b, const char *fmt, unsigned long long v)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, fmt, v);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->failed = 1;
        return;
    }
    put(b, tmp, (size_t)n);
}

/* A JSON string of valid UTF-8 bytes; control characters escaped (STYLE: names on output). */
static void put_json_string(buf *b, const uint8_t *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            put(b, esc, 2);
        } else if (c < 0x20 || c == 0x7F) {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(b, esc, 6);
        } else {
            put(b, (const char *)&s[i], 1);
        }
    }
    put(b, "\"", 1);
}

/* ------------------------------------------------------------------ the layers */

static int ends_with(const awq2_entry *e, const char *suffix, size_t *prefix_len)
{
    size_t n = strlen(suffix);
    if (e->name_length < n || memcmp(e->name + e->name_length - n, suffix, n) != 0)
        return 0;
    *prefix_len = e->name_length - n;
    return 1;
}

/* The scales or qzeros of the layer <prefix>, checked against its qweight (LAY-7). */
static int sibling(const awq2_file *f, const awq2_entry *qw, size_t plen, const char *suffix,
                   unsigned layout, awq2_entry *out, awq2_error *err)
{
    uint8_t name[AWQ2_MAX_NAME_LENGTH + 16];
    size_t slen = strlen(suffix);
    memcpy(name, qw->name, plen);
    memcpy(name + plen, suffix, slen);
    int found = awq2_lookup(f, name, plen + slen, out, err);
    if (found < 0)
        return -1;
    if (!found)
        return awq2_fail(err, "BAD_QUANT_FIELDS", qw->at, "layer %.*s has no %s entry",
                         (int)plen, (const char *)qw->name, suffix + 1);
    if (out->layout != layout || out->k != qw->k || out->n != qw->n || out->bits != qw->bits ||
        out->group_size != qw->group_size)
        return awq2_fail(err, "BAD_QUANT_FIELDS", out->at,
                         "%.*s%s disagrees with its qweight (layout family, k, n, bits or "
                         "group_size)", (int)plen, (const char *)qw->name, suffix);
    return 0;
}

/* ------------------------------------------------------------------ the document */

/* ",\"rank\":r" in a rank set's objects (ADP-5); nothing when rank is NULL. */
static void put_rank(buf *b, const uint64_t *rank)
{
    if (rank)
        putf(b, ",\"rank\":%llu", (unsigned long long)*rank);
}

/* Every tensor of f, each object after a ',' unless it is the document's first. */
static int put_tensors(const awq2_file *f, const uint64_t *rank, buf *b, int *first,
                       awq2_error *err)
{
    awq2_entry e;
    char hex[65];
    for (uint64_t i = 0; i < f->tensor_count; i++) {
        if (awq2_read_entry(f, i, &e, err))
            return -1;
        awq2_sha256 h;
        awq2_sha256_init(&h);
        awq2_sha256_update(&h, f->data + e.data_offset, (size_t)e.data_length);
        awq2_sha256_hex(&h, hex);
        puts_(b, *first ? "{\"name\":" : ",{\"name\":");
        *first = 0;
        put_json_string(b, e.name, e.name_length);
        put_rank(b, rank);
        puts_(b, ",\"dtype\":\"");
        puts_(b, awq2_dtype_name(e.dtype));
        puts_(b, "\",\"shape\":[");
        for (unsigned j = 0; j < e.ndim; j++)
            putf(b, j ? ",%llu" : "%llu", (unsigned long long)e.dims[j]);
        puts_(b, "],\"layout\":\"");
        puts_(b, awq2_layout_name(e.layout));
        puts_(b, "\",\"sha256\":\"");
        puts_(b, hex);
        puts_(b, "\"}");
    }
    return 0;
}

/* Every quantised layer of f, decoded (codec.md). */
static int put_layers(const awq2_file *f, const uint64_t *rank, buf *b, int *first,
                      awq2_error *err)
{
    awq2_entry e, sc, qz;
    for (uint64_t i = 0; i < f->tensor_count; i++) {
        size_t plen;
        if (awq2_read_entry(f, i, &e, err))
            return -1;
        if ((e.layout != AWQ2_AWQ_QWEIGHT && e.layout != AWQ2_MARLIN_QWEIGHT) ||
            !ends_with(&e, ".qweight", &plen))
            continue;
        int marlin = e.layout == AWQ2_MARLIN_QWEIGHT;
        if (sibling(f, &e, plen, ".scales", marlin ? AWQ2_MARLIN_SCALES : AWQ2_AWQ_SCALES, &sc, err) ||
            sibling(f, &e, plen, ".qzeros", marlin ? AWQ2_MARLIN_QZEROS : AWQ2_AWQ_QZEROS, &qz, err))
            return -1;
        awq2_layer_hashes lh;
        if (awq2_decode_layer(f, &e, &sc, &qz, &lh, err))
            return -1;
        puts_(b, *first ? "{\"prefix\":" : ",{\"prefix\":");
        *first = 0;
        put_json_string(b, e.name, plen);
        put_rank(b, rank);
        puts_(b, marlin ? ",\"layout\":\"MARLIN\"" : ",\"layout\":\"AWQ\"");
        putf(b, ",\"k\":%llu", e.k);
        putf(b, ",\"n\":%llu", e.n);
        putf(b, ",\"bits\":%llu", e.bits);
        if (e.group_size < 0)
            puts_(b, ",\"group_size\":-1");
        else
            putf(b, ",\"group_size\":%llu", (unsigned long long)e.group_size);
        puts_(b, ",\"scale_dtype\":\"");
        puts_(b, awq2_dtype_name(sc.dtype));
        puts_(b, "\",\"codes_sha256\":\"");
        puts_(b, lh.codes);
        puts_(b, "\",\"zeros_sha256\":\"");
        puts_(b, lh.zeros);
        puts_(b, "\",\"scales_sha256\":\"");
        puts_(b, lh.scales);
        puts_(b, "\",\"dequantized_sha256\":\"");
        puts_(b, lh.dequantized);
        puts_(b, "\"}");
    }
    return 0;
}

/* The document of `count` members (one for a file), each taken from `member` when its turn
 * comes: the first one's version and metadata.  -1 a member's error, -3 `member` failed. */
static int describe(awq2_member_fn member, void *ctx, const uint64_t *ranks, size_t count,
                    const char *set, buf *b, size_t *failed, awq2_error *err)
{
    int first = 1;
    const awq2_file *f = member(ctx, *failed = 0);
    if (!f)
        return -3;
    puts_(b, "{\"format_version\":\"2.");
    putf(b, "%llu", f->version_minor);
    puts_(b, "\"");
    if (set) {
        puts_(b, ",\"set\":");
        puts_(b, set);
    }
    puts_(b, ",\"tensors\":[");
    for (*failed = 0; *failed < count; ++*failed)
        if (!(f = member(ctx, *failed)) ||
            put_tensors(f, ranks ? &ranks[*failed] : NULL, b, &first, err))
            return f ? -1 : -3;
    puts_(b, "],\"layers\":[");
    first = 1;
    for (*failed = 0; *failed < count; ++*failed)
        if (!(f = member(ctx, *failed)) ||
            put_layers(f, ranks ? &ranks[*failed] : NULL, b, &first, err))
            return f ? -1 : -3;
    puts_(b, "],\"metadata\":");
    if (!(f = member(ctx, *failed = 0)))
        return -3;
    if (f->metadata_length) /* checked strict JSON (META-1, META-2): passed through as is */
        put(b, (const char *)f->data + f->metadata_at, (size_t)f->metadata_length);
    else
        puts_(b, "{}");
    puts_(b, "}\n");
    return 0;
}

int awq2_describe_set(awq2_member_fn member, void *ctx, const uint64_t *ranks, size_t count,
                      const char *set, char **doc, size_t *len, size_t *failed,
                      awq2_error *err)
{
    buf out = {NULL, 0, 0, 0};
    *doc = NULL;
    *len = 0;
    int rc = describe(member, ctx, ranks, count, set, &out, failed, err);
    if (rc) {
        free(out.p);
        return rc;
    }
    if (out.failed) {
        free(out.p);
        return -2;
    }
    *doc = out.p;
    *len = out.len;
    return 0;
}

/* The one file of awq2_describe, as a member source. */
static const awq2_file *the_file(void *ctx, size_t i)
{
    (void)i;
    return ctx;
}

int awq2_describe(const awq2_file *f, char **doc, size_t *len, awq2_error *err)
{
    size_t failed;
    return awq2_describe_set(the_file, (void *)(uintptr_t)f, NULL, 1, NULL, doc, len, &failed,
                             err);
}
