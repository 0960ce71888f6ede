/* set.c: a file set (sets.md): one folder, its manifest model.awq2.set.json and the members it
 * lists.  Each step is a level of SET-8, each check in the order the spec gives:
 *
 *   awq2_set_open      the manifest (SET-2, SET-3, SET-4: manifest.c); then, for every member
 *                      in manifest order, SET-5: a regular file, its length, RD-1, its
 *                      header_crc; then every rank has a file (SET-5)
 *   awq2_set_validate  every member's full validation (RD-2) in manifest order; no unlisted
 *                      .awq2 file (SET-8); names (SET-6); ranks (SET-7)
 *   awq2_set_verify    for every member in manifest order, its payloads (ENT-10), then the
 *                      SHA-256 of its bytes (SET-8)
 *
 * A member is opened from the folder's descriptor by its plain name (openat), the one path
 * SET-4 allows; the name holds no '/', so nothing outside the folder is named.
 *
 * At most one member is mapped at a time, and no member's descriptor stays open: each step
 * maps a member when it comes to it (opening it again, with SET-5's checks again, so a file
 * replaced since is refused) and unmaps it before the next.  A set of 65536 members (SET-2)
 * stays under vm.max_map_count (65530 by default) and any descriptor limit.  SET-6 and SET-7
 * sort every name of the set once (names copied out of each member's map), so full
 * validation costs n log n in the names, never names times members.
 */
#define _POSIX_C_SOURCE 200809L
#include "awq2.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t EMPTY[1]; /* the data of an empty member: nothing to map */

const char *awq2_not_regular(unsigned long mode)
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

/* ------------------------------------------------------------------ errors */

/* A set's own error (SET-*), about `file` (a member, the manifest) or the set (NULL). */
static int set_fail(awq2_set_error *e, const char *code, const char *file, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static int set_fail(awq2_set_error *e, const char *code, const char *file, const char *fmt, ...)
{
    va_list ap;
    e->error.code = code;
    e->error.offset = 0;
    e->file = file;
    e->at_offset = 0;
    va_start(ap, fmt);
    vsnprintf(e->error.message, sizeof e->error.message, fmt, ap);
    va_end(ap);
    return -1;
}

/* An error awq2_open, awq2_validate or awq2_verify found inside a member: its own code and
 * offset, and the member's name (SET-8). */
static int member_fail(awq2_set_error *e, const char *file)
{
    e->file = file;
    e->at_offset = 1;
    return -1;
}

/* The folder or a file in it cannot be read: no format error, the loader gives up (exit 3). */
static int cannot_read(awq2_set_error *e, const char *file, const char *reason)
{
    e->error.code = NULL;
    e->error.offset = 0;
    e->file = file;
    e->at_offset = 0;
    snprintf(e->error.message, sizeof e->error.message, "%s", reason);
    return -2;
}

/* ------------------------------------------------------------------ open (SET-2 to SET-5) */

/* The manifest's bytes: a regular file of at most 16777216 bytes (SET-2), checked with fstat
 * before anything is allocated or read.  No manifest: the folder is not a set, and the path
 * is refused as what it is, a folder, in the words the reference adapter uses. */
static int read_manifest(int dirfd, uint8_t **text, size_t *len, awq2_set_error *e)
{
    struct stat st;
    int fd = openat(dirfd, AWQ2_SET_MANIFEST, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return cannot_read(e, NULL, awq2_not_regular(S_IFDIR));
    if (fd < 0 || fstat(fd, &st) != 0) {
        int rc = cannot_read(e, AWQ2_SET_MANIFEST, strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cannot_read(e, AWQ2_SET_MANIFEST, awq2_not_regular(st.st_mode));
    }
    if ((uint64_t)st.st_size > AWQ2_MAX_MANIFEST_LENGTH) {
        close(fd);
        return set_fail(e, "SET_BAD_MANIFEST", AWQ2_SET_MANIFEST,
                        "the manifest is %llu bytes; at most 16777216 (SET-2)",
                        (unsigned long long)st.st_size);
    }
    size_t size = (size_t)st.st_size, got = 0;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return -3;
    }
    while (got < size) { /* a file that shrinks meanwhile is read as it now is */
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int rc = cannot_read(e, AWQ2_SET_MANIFEST, strerror(errno));
            free(buf);
            close(fd);
            return rc;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    *text = buf;
    *len = got;
    return 0;
}

static void show_uint(char out[24], awq2_uint v)
{
    if (v.huge)
        snprintf(out, 24, "2**64 or more");
    else
        snprintf(out, 24, "%llu", (unsigned long long)v.value);
}

/* Unmap the member mapped now, if any. */
static void unmap_member(awq2_set *s)
{
    if (s->members && s->mapped < s->manifest.count) {
        awq2_file *f = &s->members[s->mapped];
        if (f->data && f->size > 0)
            munmap((void *)(uintptr_t)f->data, (size_t)f->size);
        f->data = NULL;
    }
    s->mapped = s->manifest.count;
}

/* SET-5 for member i: it exists as a regular file, its length is `size`, it passes the
 * opening checks of RD-1 (its own codes), its header_crc is the manifest's.  It is mapped
 * (the member mapped before it unmapped) and its descriptor closed; only its header and
 * trailer are read.  Every step that reads a member maps it here, so each check runs again
 * on a member opened again. */
static int map_member(awq2_set *s, size_t i, awq2_set_error *e)
{
    if (s->mapped == i)
        return 0;
    unmap_member(s);
    const awq2_set_file *m = &s->manifest.files[i];
    struct stat st;
    int fd = openat(s->dirfd, m->name, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0 && (errno == ENOENT || errno == ENAMETOOLONG || errno == ELOOP))
        return set_fail(e, "SET_MISSING_FILE", m->name,
                        "the manifest lists it; the folder has no such file: %s (SET-5)",
                        strerror(errno));
    if (fd < 0 || fstat(fd, &st) != 0) {
        int rc = cannot_read(e, m->name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return set_fail(e, "SET_MISSING_FILE", m->name,
                        "the manifest lists it; in the folder it is %s (SET-5)",
                        awq2_not_regular(st.st_mode));
    }
    uint64_t size = (uint64_t)st.st_size;
    if (m->size.huge || m->size.value != size) {
        char want[24];
        show_uint(want, m->size);
        close(fd);
        return set_fail(e, "SET_FILE_MISMATCH", m->name,
                        "the file is %llu bytes; the manifest says %s (SET-5)",
                        (unsigned long long)size, want);
    }
    if (size > SIZE_MAX) {
        close(fd);
        return cannot_read(e, m->name, "too large to map");
    }
    const uint8_t *data = EMPTY;
    if (size > 0) {
        void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            char why[96];
            snprintf(why, sizeof why, "cannot map it (member %zu of %zu): %s", i + 1,
                     s->manifest.count, strerror(errno));
            int rc = cannot_read(e, m->name, why);
            close(fd);
            return rc;
        }
        data = map;
    }
    close(fd);
    awq2_file *f = &s->members[i];
    s->mapped = i;
    int rc = awq2_open(f, data, size, &e->error); /* RD-1 */
    f->data = data; /* what unmap_member unmaps, whatever awq2_open found */
    f->size = size;
    if (rc)
        return member_fail(e, m->name);
    char crc[9];
    snprintf(crc, sizeof crc, "%08x", f->header_crc);
    if (strcmp(crc, m->header_crc) != 0) {
        set_fail(e, "SET_FILE_MISMATCH", m->name,
                 "its header_crc is %s; the manifest says %s (SET-5)", crc, m->header_crc);
        e->error.offset = 124; /* the header's header_crc field (RD-7) */
        e->at_offset = 1;
        return -1;
    }
    return 0;
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* SET-5, rank sets: every rank from 0 to tp_size - 1 has a file.  The smallest rank without
 * one is reported; every rank is below tp_size (SET-2), and there are at most 65536 files. */
static int ranks_complete(const awq2_set *s, awq2_set_error *e)
{
    const awq2_manifest *m = &s->manifest;
    if (!m->rank_set)
        return 0;
    uint64_t *r = malloc(m->count * sizeof *r), next = 0;
    if (!r)
        return -3;
    for (size_t i = 0; i < m->count; i++)
        r[i] = m->files[i].rank.value;
    qsort(r, m->count, sizeof *r, by_value);
    for (size_t i = 0; i < m->count && r[i] <= next; i++)
        if (r[i] == next)
            next++;
    free(r);
    if (m->tp_size.huge || next < m->tp_size.value) {
        char tp[24];
        show_uint(tp, m->tp_size);
        return set_fail(e, "SET_RANK_MISSING", NULL,
                        "rank %llu of a rank set of tp_size %s has no file (SET-5)",
                        (unsigned long long)next, tp);
    }
    return 0;
}

int awq2_set_open(awq2_set *s, int dirfd, awq2_set_error *e)
{
    uint8_t *text = NULL;
    size_t len = 0;
    memset(s, 0, sizeof *s);
    s->dirfd = dirfd;
    int rc = read_manifest(dirfd, &text, &len, e);
    if (rc)
        return rc;
    rc = awq2_parse_manifest(text, len, &s->manifest, &e->error); /* SET-2, SET-3, SET-4 */
    free(text);
    if (rc == -1)
        return e->file = AWQ2_SET_MANIFEST, e->at_offset = 0, -1; /* no offset (RD-7) */
    if (rc)
        return -3;
    s->members = calloc(s->manifest.count, sizeof *s->members);
    s->mapped = s->manifest.count;
    if (!s->members)
        return -3;
    for (size_t i = 0; i < s->manifest.count; i++)
        if ((rc = map_member(s, i, e)) != 0)
            return rc;
    unmap_member(s);
    return ranks_complete(s, e);
}

/* ------------------------------------------------------------------ full validation (SET-8) */

static int by_string(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int ends_in_awq2(const char *name)
{
    size_t n = strlen(name), k = strlen(AWQ2_MEMBER_SUFFIX);
    return n >= k && memcmp(name + n - k, AWQ2_MEMBER_SUFFIX, k) == 0;
}

/* SET-8: no name in the folder ending in .awq2 that the manifest does not list (any entry of
 * the folder: a hidden one too).  The smallest such name is reported. */
static int no_extra_file(awq2_set *s, awq2_set_error *e)
{
    const awq2_manifest *m = &s->manifest;
    const char **listed = malloc(m->count * sizeof *listed);
    int fd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd < 0 ? NULL : fdopendir(fd);
    int rc = 0;
    if (!dir) {
        rc = listed ? cannot_read(e, NULL, strerror(errno)) : -3;
        if (fd >= 0)
            close(fd);
        free(listed);
        return rc;
    }
    if (!listed) {
        closedir(dir);
        return -3;
    }
    for (size_t i = 0; i < m->count; i++)
        listed[i] = m->files[i].name;
    qsort(listed, m->count, sizeof *listed, by_string);
    while (!rc) {
        errno = 0; /* readdir's NULL is the end, or an error when errno is set */
        const struct dirent *d = readdir(dir);
        if (!d) {
            if (errno)
                rc = cannot_read(e, NULL, strerror(errno));
            break;
        }
        const char *name = d->d_name;
        if (!ends_in_awq2(name) || bsearch(&name, listed, m->count, sizeof *listed, by_string) ||
            (s->extra && strcmp(name, s->extra) >= 0))
            continue;
        free(s->extra);
        s->extra = malloc(strlen(name) + 1);
        if (!s->extra)
            rc = -3;
        else
            strcpy(s->extra, name);
    }
    closedir(dir);
    free(listed);
    if (!rc && s->extra)
        rc = set_fail(e, "SET_EXTRA_FILE", s->extra,
                      "an .awq2 file in the folder that the manifest does not list (SET-8)");
    return rc;
}

/* One tensor of the set, for SET-6 and SET-7: its name (in a copy of its member's names
 * section, the member being unmapped by then) and the fields SET-7 compares. */
typedef struct {
    const uint8_t *name;
    uint16_t name_length;
    uint32_t member; /* manifest order */
    uint64_t rank;   /* 0 in a split set */
    uint64_t index;  /* in the member's index */
    uint8_t dtype, layout, ndim, bits;
    int32_t group_size;
    uint32_t k, n;
    uint64_t dims[AWQ2_MAX_DIMS];
} tensor;

/* Every tensor of a validated set, gathered member by member while each is mapped. */
typedef struct {
    tensor *v;
    size_t count;
    uint8_t **names; /* each member's names section, copied; freed by drop_tensors */
    size_t members;
} tensors;

static void drop_tensors(tensors *t)
{
    for (size_t i = 0; i < t->members; i++)
        free(t->names[i]);
    free(t->names);
    free(t->v);
    memset(t, 0, sizeof *t);
}

/* By name, then rank, then manifest order: a name's members of one rank are adjacent. */
static int by_name_rank_member(const void *a, const void *b)
{
    const tensor *x = a, *y = b;
    size_t n = x->name_length < y->name_length ? x->name_length : y->name_length;
    int c = n ? memcmp(x->name, y->name, n) : 0;
    if (c)
        return c;
    if (x->name_length != y->name_length)
        return x->name_length < y->name_length ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return (x->member > y->member) - (x->member < y->member);
}

static int same_name(const tensor *x, const tensor *y)
{
    return x->name_length == y->name_length &&
           (!x->name_length || memcmp(x->name, y->name, x->name_length) == 0);
}

/* Room for every tensor of every member (their counts are known from the opening). */
static int make_tensors(const awq2_set *s, tensors *t)
{
    uint64_t total = 0;
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < s->manifest.count; i++)
        total += s->members[i].tensor_count; /* at most 2**16 * 2**24 */
    if (total > SIZE_MAX / sizeof(tensor))
        return -3;
    t->v = malloc(total ? (size_t)total * sizeof *t->v : 1);
    t->names = calloc(s->manifest.count, sizeof *t->names);
    t->members = s->manifest.count;
    return t->v && t->names ? 0 : -3;
}

/* Member i's tensors, while it is mapped (and validated): names copied with its whole names
 * section, so that they outlive the map. */
static int gather(const awq2_set *s, size_t i, tensors *t, awq2_set_error *e)
{
    const awq2_file *f = &s->members[i];
    const uint8_t *section = f->data + f->names_at;
    uint8_t *copy = malloc(f->names_length ? (size_t)f->names_length : 1);
    if (!copy)
        return -3;
    if (f->names_length)
        memcpy(copy, section, (size_t)f->names_length);
    t->names[i] = copy;
    for (uint64_t j = 0; j < f->tensor_count; j++) {
        awq2_entry x;
        if (awq2_read_entry(f, j, &x, &e->error)) /* validated: cannot fail */
            return member_fail(e, s->manifest.files[i].name);
        tensor *y = &t->v[t->count++];
        y->name = copy + (x.name - section); /* inside the names section (RD-2) */
        y->name_length = x.name_length;
        y->member = (uint32_t)i;
        y->rank = s->manifest.rank_set ? s->manifest.files[i].rank.value : 0;
        y->index = j;
        y->dtype = x.dtype;
        y->layout = x.layout;
        y->ndim = x.ndim;
        y->bits = x.bits;
        y->group_size = x.group_size;
        y->k = x.k;
        y->n = x.n;
        memcpy(y->dims, x.dims, sizeof y->dims);
    }
    return 0;
}

/* SET-6: no name in two members (of one rank).  As the spec finds it: each member's names
 * looked up in the members before it, so the first member in manifest order that repeats a
 * name is reported, at its first such entry in index order. */
static int names_once(const awq2_set *s, const tensor *v, size_t n, awq2_set_error *e)
{
    const tensor *dup = NULL, *before = NULL;
    for (size_t i = 1; i < n; i++) {
        if (!same_name(&v[i - 1], &v[i]) || v[i - 1].rank != v[i].rank)
            continue;
        if (!dup || v[i].member < dup->member ||
            (v[i].member == dup->member && v[i].index < dup->index)) {
            dup = &v[i];
            before = &v[i - 1];
        }
    }
    if (!dup)
        return 0;
    return set_fail(e, "SET_DUPLICATE_NAME", s->manifest.files[dup->member].name,
                    "tensor %.*s is also in %s, before it in the manifest%s (SET-6)",
                    (int)dup->name_length, (const char *)dup->name,
                    s->manifest.files[before->member].name,
                    s->manifest.rank_set ? ", of the same rank" : "");
}

/* SET-7 for one name's tensors v[0..n), one per rank at most (SET-6), by rank: every rank
 * holds it, with the same dtype, layout, shape, bits, group_size, k and n as rank 0's. */
static int same_in_every_rank(const awq2_set *s, const tensor *v, size_t n, awq2_set_error *e)
{
    const awq2_manifest *m = &s->manifest;
    const char *name = (const char *)v[0].name;
    int len = (int)v[0].name_length;
    for (size_t r = 0; r < m->tp_size.value; r++)
        if (r >= n || v[r].rank != r)
            return set_fail(e, "SET_RANK_MISMATCH", m->files[v[0].member].name,
                            "tensor %.*s is in rank %llu, not in rank %llu (SET-7)", len, name,
                            (unsigned long long)v[0].rank, (unsigned long long)r);
    const tensor *a = &v[0];
    for (size_t r = 1; r < n; r++) {
        const tensor *b = &v[r];
        const char *field = a->dtype != b->dtype       ? "dtype"
                            : a->layout != b->layout   ? "layout"
                            : a->ndim != b->ndim ||
                                  memcmp(a->dims, b->dims, a->ndim * sizeof a->dims[0])
                                ? "shape"
                            : a->bits != b->bits       ? "bits"
                            : a->group_size != b->group_size ? "group_size"
                            : a->k != b->k             ? "k"
                            : a->n != b->n             ? "n"
                                                       : NULL;
        if (field)
            return set_fail(e, "SET_RANK_MISMATCH", m->files[b->member].name,
                            "tensor %.*s: its %s in rank %llu differs from rank 0's (SET-7)",
                            len, name, field, (unsigned long long)r);
    }
    return 0;
}

/* SET-7 for every name, in name order. */
static int ranks_agree(const awq2_set *s, const tensor *v, size_t n, awq2_set_error *e)
{
    for (size_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && same_name(&v[a], &v[b]); b++)
            ;
        int rc = same_in_every_rank(s, v + a, b - a, e);
        if (rc)
            return rc;
    }
    return 0;
}

int awq2_set_validate(awq2_set *s, awq2_set_error *e)
{
    tensors t;
    int rc = make_tensors(s, &t);
    for (size_t i = 0; !rc && i < s->manifest.count; i++) { /* RD-2, in manifest order */
        if ((rc = map_member(s, i, e)) != 0)
            break;
        if (awq2_validate(&s->members[i], &e->error))
            rc = member_fail(e, s->manifest.files[i].name);
        else if ((rc = awq2_set_rank_record(s, i, e)) == 0) /* its own rank (SET-15) */
            rc = gather(s, i, &t, e);
    }
    unmap_member(s);
    if (!rc)
        rc = no_extra_file(s, e);
    if (!rc) {
        qsort(t.v, t.count, sizeof *t.v, by_name_rank_member);
        rc = names_once(s, t.v, t.count, e); /* SET-6 */
    }
    if (!rc && s->manifest.rank_set)
        rc = ranks_agree(s, t.v, t.count, e); /* SET-7 */
    drop_tensors(&t);
    return rc;
}

/* ------------------------------------------------------------------ verify (SET-8) */

int awq2_set_verify(awq2_set *s, awq2_set_error *e)
{
    int rc = 0;
    for (size_t i = 0; !rc && i < s->manifest.count; i++) {
        if ((rc = map_member(s, i, e)) != 0)
            break;
        const awq2_file *f = &s->members[i];
        const awq2_set_file *m = &s->manifest.files[i];
        if (awq2_verify(f, &e->error)) { /* ENT-10 */
            rc = member_fail(e, m->name);
            break;
        }
        awq2_sha256 h;
        char hex[65];
        awq2_sha256_init(&h);
        awq2_sha256_update(&h, f->data, (size_t)f->size);
        awq2_sha256_hex(&h, hex);
        if (strcmp(hex, m->sha256) != 0)
            rc = set_fail(e, "SET_BAD_SHA256", m->name,
                          "its SHA-256 is %s; the manifest says %s (SET-8)", hex, m->sha256);
    }
    unmap_member(s);
    return rc;
}

/* ------------------------------------------------------------------ the document (ADP-5) */

/* The document's member source: member i mapped (the one before unmapped). */
typedef struct {
    awq2_set *s;
    awq2_set_error *e;
    int rc;
} member_source;

static const awq2_file *mapped_member(void *ctx, size_t i)
{
    member_source *src = ctx;
    src->rc = map_member(src->s, i, src->e);
    return src->rc ? NULL : &src->s->members[i];
}

int awq2_set_describe(awq2_set *s, char **doc, size_t *len, awq2_set_error *e)
{
    const awq2_manifest *m = &s->manifest;
    char set[64];
    uint64_t *ranks = NULL;
    size_t failed;
    if (m->rank_set) {
        snprintf(set, sizeof set, "{\"kind\":\"rank\",\"tp_size\":%llu}",
                 (unsigned long long)m->tp_size.value);
        ranks = malloc(m->count * sizeof *ranks);
        if (!ranks)
            return -3;
        for (size_t i = 0; i < m->count; i++)
            ranks[i] = m->files[i].rank.value;
    } else {
        snprintf(set, sizeof set, "{\"kind\":\"split\"}");
    }
    member_source src = {s, e, 0};
    int rc = awq2_describe_set(mapped_member, &src, ranks, m->count, set, doc, len, &failed,
                               &e->error);
    free(ranks);
    unmap_member(s);
    if (rc == -1)
        return member_fail(e, m->files[failed].name);
    if (rc == -3)
        return src.rc;
    return rc ? -3 : 0;
}

void awq2_set_close(awq2_set *s)
{
    unmap_member(s);
    free(s->members);
    free(s->extra);
    awq2_manifest_free(&s->manifest);
    memset(s, 0, sizeof *s);
    s->dirfd = -1;
}
