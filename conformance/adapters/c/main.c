/* main.c: awq2c PATH -- the conformance adapter (conformance/run.py, adapter protocol).
 *
 * PATH a file: opens it (RD-1), validates it (RD-2), verifies every payload (ENT-10) and
 * decodes every quantised layer (codec.md).  PATH a folder: reads it as a file set (sets.md,
 * ADP-5): its manifest and every member, opened (SET-5), validated and verified (SET-8).
 * Accept: exit 0 and one JSON document on stdout
 * (conformance/schema/adapter-output.schema.json).  Reject: exit 1 and a line on stdout that
 * starts with the error code (in a set, naming the member file).  Exit 2: usage error.
 * Exit 3: PATH cannot be read (neither a regular file nor a folder, checked with fstat before
 * anything is read, and opened non-blocking, so a FIFO is refused at once; a folder without a
 * set manifest; a member that exists but cannot be read), or the loader failed; the reason
 * goes to stderr in one line.
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

/* An input that cannot be read: its reason on one line, exit 3 (as the reference adapter);
 * `file`, when not NULL, is the member of the set folder `path` that cannot be read. */
static int cannot_read(const char *path, const char *file, const char *reason)
{
    fputs("awq2c: cannot read ", stderr);
    put_escaped(stderr, path);
    if (file) {
        fputc('/', stderr);
        put_escaped(stderr, file);
    }
    fprintf(stderr, ": %s\n", reason);
    return EXIT_FAILED;
}

/* "CODE[ in WHERE][ at offset N]: message": `where` names a set's member, its manifest or
 * "the set" (NULL for a lone file), the offset a byte of that file. */
static void put_error(FILE *out, const char *where, int at_offset, const awq2_error *err)
{
    fputs(err->code, out);
    if (where) {
        fputs(" in ", out);
        put_escaped(out, where);
    }
    if (at_offset)
        fprintf(out, " at offset %llu", (unsigned long long)err->offset);
    fputs(": ", out);
    put_escaped(out, err->message); /* the message may quote names from the file: escaped */
    fputc('\n', out);
}

/* A format error: the line on stdout (the adapter protocol) and on stderr, exit 1. */
static int reject(const char *path, const char *where, int at_offset, const awq2_error *err)
{
    put_error(stdout, where, at_offset, err);
    fputs("awq2c: ", stderr);
    put_escaped(stderr, path);
    fputs(": ", stderr);
    put_error(stderr, where, at_offset, err);
    return 1;
}

static int print_document(char *doc, size_t len)
{
    fwrite(doc, 1, len, stdout);
    free(doc);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "awq2c: cannot write the document: %s\n", strerror(errno));
        return EXIT_FAILED;
    }
    return 0;
}

static int out_of_memory(void)
{
    fprintf(stderr, "awq2c: out of memory\n");
    return EXIT_FAILED;
}

/* A lone file, fd open on it: mapped read-only, then RD-1, RD-2, ENT-10, the document. */
static int read_file(const char *path, int fd, const struct stat *st)
{
    if ((uint64_t)st->st_size > (uint64_t)SIZE_MAX)
        return cannot_read(path, NULL, "too large to map");
    static const uint8_t empty[1];
    size_t size = (size_t)st->st_size;
    const uint8_t *data = empty;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            return cannot_read(path, NULL, strerror(errno));
        data = map;
    }
    close(fd);

    awq2_file f;
    awq2_error err = {NULL, 0, ""};
    char *doc = NULL;
    size_t doc_len = 0;
    int rc = awq2_open(&f, data, size, &err);
    if (!rc)
        rc = awq2_validate(&f, &err);
    if (!rc)
        rc = awq2_verify(&f, &err);
    if (!rc)
        rc = awq2_describe(&f, &doc, &doc_len, &err);
    int status = rc == -1 ? reject(path, NULL, 1, &err)
                 : rc     ? out_of_memory()
                          : print_document(doc, doc_len);
    if (map)
        munmap(map, size);
    return status;
}

/* A file set, dirfd open on its folder: SET-2 to SET-8, then the document (ADP-5). */
static int read_set(const char *path, int dirfd)
{
    awq2_set s;
    awq2_set_error e = {{NULL, 0, ""}, NULL, 0};
    char *doc = NULL;
    size_t doc_len = 0;
    int rc = awq2_set_open(&s, dirfd, &e);
    if (!rc)
        rc = awq2_set_validate(&s, &e);
    if (!rc)
        rc = awq2_set_verify(&s, &e);
    if (!rc)
        rc = awq2_set_describe(&s, &doc, &doc_len, &e);
    int status = rc == -1   ? reject(path, e.file ? e.file : "the set", e.at_offset, &e.error)
                 : rc == -2 ? cannot_read(path, e.file, e.error.message)
                 : rc       ? out_of_memory()
                            : print_document(doc, doc_len);
    awq2_set_close(&s); /* after the messages: e.file may point into it */
    close(dirfd);
    return status;
}

int main(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr,
                "usage: awq2c PATH\n"
                "Reads an AWQ-v2 file, or a file set's folder (holding model.awq2.set.json),\n"
                "with full validation and verification (format.md RD-1, RD-2, ENT-10; sets.md\n"
                "SET-8). Exit 0: prints one JSON document describing it (conformance adapter\n"
                "output). Exit 1: prints the error code, the file, the offset and what was\n"
                "expected and found. Exit 2: usage error. Exit 3: PATH cannot be read\n"
                "(missing, neither a regular file nor a folder: a FIFO, a device; a folder\n"
                "without a set manifest) or the loader failed (out of memory, stdout not\n"
                "writable).\n");
        return EXIT_USAGE;
    }
    /* O_NONBLOCK: a FIFO without a writer is refused below instead of waited on; nothing is
     * read through fd (a file is mapped; a folder's files are opened from it), so the flag
     * changes nothing for a regular file or a folder. */
    int fd = open(argv[1], O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return cannot_read(argv[1], NULL, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return read_set(argv[1], fd);
    if (!S_ISREG(st.st_mode))
        return cannot_read(argv[1], NULL, awq2_not_regular(st.st_mode));
    return read_file(argv[1], fd, &st);
}
