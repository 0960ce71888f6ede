/* main.c: awq2c FILE -- the conformance adapter (conformance/run.py, adapter protocol).
 *
 * Opens FILE (RD-1), validates it (RD-2), verifies every payload (ENT-10) and decodes every
 * quantised layer (codec.md).  Accept: exit 0 and one JSON document on stdout
 * (conformance/schema/adapter-output.schema.json).  Reject: exit 1 and a line on stdout that
 * starts with the error code.  Exit 2: usage error.  Exit 3: FILE cannot be read (it is not a
 * regular file, checked with fstat before anything is read, and opened non-blocking, so a FIFO
 * is refused at once), or the loader failed; the reason goes to stderr in one line.
 */
#define _POSIX_C_SOURCE 200809L
#include "awq2.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

static int describe(const awq2_file *f, buf *b, awq2_error *err)
{
    awq2_entry e, sc, qz;
    char hex[65];
    puts_(b, "{\"format_version\":\"2.");
    putf(b, "%llu", f->version_minor);
    puts_(b, "\",\"tensors\":[");
    for (uint64_t i = 0; i < f->tensor_count; i++) {
        if (awq2_read_entry(f, i, &e, err))
            return -1;
        awq2_sha256 h;
        awq2_sha256_init(&h);
        awq2_sha256_update(&h, f->data + e.data_offset, (size_t)e.data_length);
        awq2_sha256_hex(&h, hex);
        puts_(b, i ? ",{\"name\":" : "{\"name\":");
        put_json_string(b, e.name, e.name_length);
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
    puts_(b, "],\"layers\":[");
    int first = 1;
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
        puts_(b, first ? "{\"prefix\":" : ",{\"prefix\":");
        first = 0;
        put_json_string(b, e.name, plen);
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
    puts_(b, "],\"metadata\":");
    if (f->metadata_length) /* checked strict JSON (META-1, META-2): passed through as is */
        put(b, (const char *)f->data + f->metadata_at, (size_t)f->metadata_length);
    else
        puts_(b, "{}");
    puts_(b, "}\n");
    return 0;
}

/* ------------------------------------------------------------------ main */

enum { EXIT_USAGE = 2, EXIT_FAILED = 3 }; /* 0 accept and 1 reject are the adapter protocol's */

/* Text from the file or the command line, with control bytes, DEL, bytes over 0x7F and the
 * backslash written as \xNN or \\, so that printing it cannot drive the terminal. */
static void put_escaped(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\\')
            fputs("\\\\", out);
        else if (*p < 0x20 || *p >= 0x7F)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
}

/* An input that cannot be read: its reason on one line, exit 3 (as the reference adapter). */
static int cannot_read(const char *path, const char *reason)
{
    fputs("awq2c: cannot read ", stderr);
    put_escaped(stderr, path);
    fprintf(stderr, ": %s\n", reason);
    return EXIT_FAILED;
}

static const char *not_regular(mode_t mode)
{
    if (S_ISDIR(mode))
        return "not a regular file (a folder)";
    if (S_ISFIFO(mode))
        return "not a regular file (a FIFO)";
    if (S_ISCHR(mode))
        return "not a regular file (a character device)";
    if (S_ISBLK(mode))
        return "not a regular file (a block device)";
    if (S_ISSOCK(mode))
        return "not a regular file (a socket)";
    return "not a regular file";
}

int main(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr,
                "usage: awq2c FILE\n"
                "Reads an AWQ-v2 file with full validation and verification (format.md RD-1,\n"
                "RD-2, ENT-10). Exit 0: prints one JSON document describing the file\n"
                "(conformance adapter output). Exit 1: prints the error code, the offset and\n"
                "what was expected and found. Exit 2: usage error. Exit 3: FILE cannot be read\n"
                "(missing, not a regular file: a folder, a FIFO, a device) or the loader\n"
                "failed (out of memory, stdout not writable).\n");
        return EXIT_USAGE;
    }
    /* O_NONBLOCK: a FIFO without a writer is refused below instead of waited on; nothing is
     * read through fd (the file is mapped), so the flag changes nothing for a regular file. */
    int fd = open(argv[1], O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return cannot_read(argv[1], strerror(errno));
    if (!S_ISREG(st.st_mode))
        return cannot_read(argv[1], not_regular(st.st_mode));
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX)
        return cannot_read(argv[1], "too large to map");
    static const uint8_t empty[1];
    size_t size = (size_t)st.st_size;
    const uint8_t *data = empty;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            return cannot_read(argv[1], strerror(errno));
        data = map;
    }
    close(fd);

    awq2_file f;
    awq2_error err = {NULL, 0, ""};
    buf out = {NULL, 0, 0, 0};
    int rc = awq2_open(&f, data, size, &err);
    if (!rc)
        rc = awq2_validate(&f, &err);
    if (!rc)
        rc = awq2_verify(&f, &err);
    if (!rc)
        rc = describe(&f, &out, &err);
    if (rc) { /* the message may quote names from the file: escaped */
        printf("%s at offset %llu: ", err.code, (unsigned long long)err.offset);
        put_escaped(stdout, err.message);
        putchar('\n');
        fputs("awq2c: ", stderr);
        put_escaped(stderr, argv[1]);
        fprintf(stderr, ": %s at offset %llu: ", err.code, (unsigned long long)err.offset);
        put_escaped(stderr, err.message);
        fputc('\n', stderr);
        free(out.p);
        return 1;
    }
    if (out.failed) {
        fprintf(stderr, "awq2c: out of memory\n");
        return EXIT_FAILED;
    }
    fwrite(out.p, 1, out.len, stdout);
    free(out.p);
    if (map)
        munmap(map, size);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "awq2c: cannot write the document: %s\n", strerror(errno));
        return EXIT_FAILED;
    }
    return 0;
}
