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
    char *doc = NULL;
    size_t doc_len = 0;
    int rc = awq2_open(&f, data, size, &err);
    if (!rc)
        rc = awq2_validate(&f, &err);
    if (!rc)
        rc = awq2_verify(&f, &err);
    if (!rc)
        rc = awq2_describe(&f, &doc, &doc_len, &err);
    if (rc == -1) { /* the message may quote names from the file: escaped */
        printf("%s at offset %llu: ", err.code, (unsigned long long)err.offset);
        put_escaped(stdout, err.message);
        putchar('\n');
        fputs("awq2c: ", stderr);
        put_escaped(stderr, argv[1]);
        fprintf(stderr, ": %s at offset %llu: ", err.code, (unsigned long long)err.offset);
        put_escaped(stderr, err.message);
        fputc('\n', stderr);
        return 1;
    }
    if (rc) {
        fprintf(stderr, "awq2c: out of memory\n");
        return EXIT_FAILED;
    }
    fwrite(doc, 1, doc_len, stdout);
    free(doc);
    if (map)
        munmap(map, size);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "awq2c: cannot write the document: %s\n", strerror(errno));
        return EXIT_FAILED;
    }
    return 0;
}
