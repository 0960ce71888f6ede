/* rankrecord.c: each member's own record of its rank (sets.md, SET-15).
 *
 * A rank set's member records, in its metadata, the rank it was cut for and the degree:
 * {"awq2_rank": {"rank": r, "tp_size": T}}.  The manifest alone cannot show which rank's
 * shards a file holds (every rank holds the same names and fields, SET-7), so full
 * validation compares the record with the manifest, right after the member's own full
 * validation (SET-8): a rank set's member must hold it with the manifest's rank and
 * tp_size; a split set's member must not hold it.
 */
#include "awq2.h"

#include <stdarg.h>
#include <stdio.h>

#define RANK_KEY "awq2_rank"

static int wrong(awq2_set_error *e, const char *file, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int wrong(awq2_set_error *e, const char *file, const char *fmt, ...)
{
    va_list ap;
    e->error.code = "SET_WRONG_RANK";
    e->error.offset = 0;
    e->file = file;
    e->at_offset = 0; /* a set's error names no byte (RD-7) */
    va_start(ap, fmt);
    vsnprintf(e->error.message, sizeof e->error.message, fmt, ap);
    va_end(ap);
    return -1;
}

static int same(awq2_uint a, awq2_uint b)
{
    return !a.huge && !b.huge && a.value == b.value;
}

int awq2_set_rank_record(const awq2_set *s, size_t i, awq2_set_error *e)
{
    const awq2_file *f = &s->members[i];
    const awq2_set_file *m = &s->manifest.files[i];
    const uint8_t *text = f->data + f->metadata_at;
    size_t len = (size_t)f->metadata_length;
    awq2_uint rank, tp_size;
    int has_rank = awq2_metadata_uint(text, len, RANK_KEY, "rank", &rank);
    if (!s->manifest.rank_set) {
        if (has_rank != -1)
            return wrong(e, m->name, "a member of a split set whose metadata records a rank "
                                     "(" RANK_KEY "): a rank's shards, not a whole model (SET-15)");
        return 0;
    }
    if (has_rank == -1)
        return wrong(e, m->name, "its metadata has no " RANK_KEY "; the manifest says rank %llu "
                                 "of tp_size %llu (SET-15)",
                     (unsigned long long)m->rank.value,
                     (unsigned long long)s->manifest.tp_size.value);
    int has_tp = awq2_metadata_uint(text, len, RANK_KEY, "tp_size", &tp_size);
    if (has_rank != 1 || has_tp != 1 || !same(rank, m->rank) ||
        !same(tp_size, s->manifest.tp_size))
        return wrong(e, m->name, "its metadata's " RANK_KEY " is not rank %llu of tp_size %llu, "
                                 "as the manifest says: written as another rank, or for another "
                                 "degree (SET-15)",
                     (unsigned long long)m->rank.value,
                     (unsigned long long)s->manifest.tp_size.value);
    return 0;
}
