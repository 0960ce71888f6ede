/* manifest.c: a file set's manifest, model.awq2.set.json (sets.md: SET-2, SET-3, SET-4).
 *
 * The text is first checked under the metadata's rules (META-1, META-2, META-5, META-6, by
 * json.c), so what is read here is known to be one strict JSON object, nested at most 64
 * deep, with no duplicate key: this file only walks it, with no recursion, and reads the
 * members the schema names (SET-2), ignoring every other.  Every allocation is bounded by
 * the text: at most AWQ2_MAX_SET_FILES file records, and each name decoded into at most its
 * own length in the text.
 */
#include "awq2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *s;
    size_t len;
    size_t root; /* the top-level object's '{' */
    awq2_error *err;
} text;

static int bad(const text *t, size_t at, const char *what)
{
    return awq2_fail(t->err, "SET_BAD_MANIFEST", at, "%s (SET-2)", what);
}

/* ------------------------------------------------------------------ walking checked JSON */

static size_t skip_ws(const text *t, size_t i)
{
    while (i < t->len && (t->s[i] == ' ' || t->s[i] == '\t' || t->s[i] == '\n' || t->s[i] == '\r'))
        i++;
    return i;
}

/* From the opening quote to just past the closing one. */
static size_t skip_string(const text *t, size_t i)
{
    for (i++; i < t->len && t->s[i] != '"'; i++)
        if (t->s[i] == '\\')
            i++;
    return i + 1;
}

/* Just past the value at i: a string, a container (its brackets counted, strings skipped),
 * or a number or literal (its characters). */
static size_t skip_value(const text *t, size_t i)
{
    uint8_t c = t->s[i];
    if (c == '"')
        return skip_string(t, i);
    if (c != '{' && c != '[') {
        while (i < t->len && t->s[i] != ',' && t->s[i] != '}' && t->s[i] != ']' &&
               t->s[i] != ' ' && t->s[i] != '\t' && t->s[i] != '\n' && t->s[i] != '\r')
            i++;
        return i;
    }
    size_t depth = 0;
    while (i < t->len) {
        c = t->s[i];
        if (c == '"') {
            i = skip_string(t, i);
            continue;
        }
        if (c == '{' || c == '[')
            depth++;
        else if ((c == '}' || c == ']') && --depth == 0)
            return i + 1;
        i++;
    }
    return i;
}

static unsigned hex_digit(uint8_t c)
{
    return c <= '9' ? (unsigned)(c - '0') : (unsigned)((c | 0x20) - 'a' + 10);
}

static uint32_t hex4(const uint8_t *p)
{
    return hex_digit(p[0]) << 12 | hex_digit(p[1]) << 8 | hex_digit(p[2]) << 4 | hex_digit(p[3]);
}

static size_t put_utf8(uint8_t *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* The string at i (its opening quote) with its escapes decoded (META-5 has made every \u
 * escape a scalar value or a surrogate pair): the first `cap` bytes of it into out, and its
 * whole decoded length as the result, never more than its length in the text. */
static size_t decode_string(const text *t, size_t i, uint8_t *out, size_t cap)
{
    size_t n = 0;
    for (i++; t->s[i] != '"';) {
        uint8_t one[4];
        size_t k;
        if (t->s[i] != '\\') {
            one[0] = t->s[i++];
            k = 1;
        } else {
            uint8_t e = t->s[i + 1];
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            if (e == 'u') {
                uint32_t cp = hex4(t->s + i + 2);
                i += 6;
                if (cp >= 0xD800 && cp <= 0xDBFF) { /* a pair, META-5 */
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(t->s + i + 2) - 0xDC00);
                    i += 6;
                }
                k = put_utf8(one, cp);
            } else {
                one[0] = (uint8_t)to[strchr(from, e) - from];
                k = 1;
                i += 2;
            }
        }
        for (size_t j = 0; j < k; j++, n++)
            if (n < cap)
                out[n] = one[j];
    }
    return n;
}

/* The value of the member `key` of the object at i, in *value; 0 when the object has none.
 * Keys are compared decoded ("\u0061wq2_set" is awq2_set). */
static int member(const text *t, size_t obj, const char *key, size_t *value)
{
    size_t klen = strlen(key), i = skip_ws(t, obj + 1);
    uint8_t buf[32];
    while (t->s[i] == '"') {
        size_t n = decode_string(t, i, buf, sizeof buf);
        int match = n == klen && klen <= sizeof buf && memcmp(buf, key, klen) == 0;
        i = skip_ws(t, skip_string(t, i)) + 1; /* past ':' */
        i = skip_ws(t, i);
        if (match) {
            *value = i;
            return 1;
        }
        i = skip_ws(t, skip_value(t, i));
        if (t->s[i] != ',')
            break;
        i = skip_ws(t, i + 1);
    }
    return 0;
}

/* ------------------------------------------------------------------ the schema's values */

/* A JSON integer: a number token without fraction or exponent ("100000.0" and "1e5" are not
 * integers).  *negative when below zero ("-0" is zero); the value saturates (awq2_uint). */
static int integer(const text *t, size_t i, awq2_uint *v, int *negative, size_t *digits,
                   size_t *ndigits)
{
    size_t end = skip_value(t, i), at = i;
    uint8_t c = t->s[i];
    if (c != '-' && (c < '0' || c > '9'))
        return 0;
    for (size_t j = i; j < end; j++)
        if (t->s[j] == '.' || t->s[j] == 'e' || t->s[j] == 'E')
            return 0;
    if (c == '-')
        at++;
    v->value = 0;
    v->huge = 0;
    for (size_t j = at; j < end; j++) {
        unsigned d = (unsigned)(t->s[j] - '0');
        if (v->value > (UINT64_MAX - d) / 10)
            v->huge = 1;
        v->value = v->huge ? UINT64_MAX : v->value * 10 + d;
    }
    *negative = c == '-' && !(end - at == 1 && t->s[at] == '0');
    *digits = at;
    *ndigits = end - at; /* no leading zero (RFC 8259), so longer means larger */
    return 1;
}

/* A member that must be a non-negative integer: 0, or -1 with SET_BAD_MANIFEST. */
static int natural(const text *t, size_t obj, const char *key, awq2_uint *v, size_t *digits,
                   size_t *ndigits, const char *where)
{
    size_t at;
    int negative;
    char what[96];
    if (!member(t, obj, key, &at)) {
        snprintf(what, sizeof what, "%s has no %s", where, key);
        return bad(t, obj, what);
    }
    if (!integer(t, at, v, &negative, digits, ndigits) || negative) {
        snprintf(what, sizeof what, "%s: %s is not a non-negative integer", where, key);
        return bad(t, at, what);
    }
    return 0;
}

/* A member that must be a string of exactly `n` lowercase hexadecimal digits, into out. */
static int hex_string(const text *t, size_t obj, const char *key, size_t n, char *out,
                      const char *where)
{
    size_t at;
    char what[96];
    if (!member(t, obj, key, &at)) {
        snprintf(what, sizeof what, "%s has no %s", where, key);
        return bad(t, obj, what);
    }
    int ok = t->s[at] == '"' && decode_string(t, at, (uint8_t *)out, n + 1) == n;
    for (size_t j = 0; ok && j < n; j++)
        ok = (out[j] >= '0' && out[j] <= '9') || (out[j] >= 'a' && out[j] <= 'f');
    if (!ok) {
        snprintf(what, sizeof what, "%s: %s is not %zu lowercase hexadecimal digits", where, key,
                 n);
        return bad(t, at, what);
    }
    out[n] = '\0';
    return 0;
}

/* ------------------------------------------------------------------ SET-3 */

/* SET-3, before any other member is read: awq2_set is the integer 1 and kind is "split" or
 * "rank", else SET_UNSUPPORTED, whatever the value is instead (absent, another type, another
 * number, another string): SET-3 reads "not 1", "neither", and comes first. */
static int check_version_and_kind(const text *t, awq2_manifest *m)
{
    size_t at, digits, ndigits;
    awq2_uint v;
    int negative;
    if (!member(t, t->root, "awq2_set", &at))
        return awq2_fail(t->err, "SET_UNSUPPORTED", t->root,
                         "the manifest has no awq2_set; this reader reads version 1 (SET-3)");
    if (!integer(t, at, &v, &negative, &digits, &ndigits) || negative || v.huge ||
        v.value != AWQ2_SET_VERSION) {
        size_t end = skip_value(t, at);
        return awq2_fail(t->err, "SET_UNSUPPORTED", at,
                         "awq2_set is %.*s%s; this reader reads version 1 (SET-3)",
                         (int)(end - at < 40 ? end - at : 40), (const char *)t->s + at,
                         end - at < 40 ? "" : "...");
    }
    if (!member(t, t->root, "kind", &at))
        return awq2_fail(t->err, "SET_UNSUPPORTED", t->root,
                         "the manifest has no kind; this reader reads \"split\" and \"rank\" "
                         "(SET-3)");
    uint8_t kind[8];
    size_t n = t->s[at] == '"' ? decode_string(t, at, kind, sizeof kind) : 0;
    if (t->s[at] == '"' && n == 5 && memcmp(kind, "split", 5) == 0)
        m->rank_set = 0;
    else if (t->s[at] == '"' && n == 4 && memcmp(kind, "rank", 4) == 0)
        m->rank_set = 1;
    else
        return awq2_fail(t->err, "SET_UNSUPPORTED", at,
                         "kind is neither \"split\" nor \"rank\" (SET-3)");
    return 0;
}

/* ------------------------------------------------------------------ SET-2, SET-4 */

/* SET-4: a plain file name in the folder: ends in .awq2, no '/', backslash or NUL, no
 * leading '.'.  (Its uniqueness is checked once every name is read.) */
static const char *name_problem(const char *name, size_t len)
{
    size_t slen = strlen(AWQ2_MEMBER_SUFFIX);
    if (len < slen || memcmp(name + len - slen, AWQ2_MEMBER_SUFFIX, slen) != 0)
        return "does not end in .awq2";
    if (memchr(name, '/', len))
        return "holds a '/'";
    if (memchr(name, '\\', len))
        return "holds a backslash";
    if (memchr(name, '\0', len))
        return "holds a NUL";
    if (name[0] == '.')
        return "starts with '.'";
    return NULL;
}

static int file_name(const text *t, size_t obj, awq2_set_file *f, const char *where)
{
    size_t at;
    char what[160];
    if (!member(t, obj, "name", &at)) {
        snprintf(what, sizeof what, "%s has no name", where);
        return bad(t, obj, what);
    }
    if (t->s[at] != '"') {
        snprintf(what, sizeof what, "%s: name is not a string", where);
        return bad(t, at, what);
    }
    size_t raw = skip_string(t, at) - at; /* the decoded name is never longer */
    f->name = malloc(raw + 1);
    if (!f->name)
        return -2;
    f->name_length = decode_string(t, at, (uint8_t *)f->name, raw);
    f->name[f->name_length] = '\0';
    const char *problem = name_problem(f->name, f->name_length);
    if (problem) {
        snprintf(what, sizeof what, "%s: its name %s, not a plain .awq2 file name (SET-4)", where,
                 problem);
        return awq2_fail(t->err, "SET_BAD_MANIFEST", at, "%s", what);
    }
    return 0;
}

/* One file object (SET-2): name (SET-4), size, header_crc, sha256, and in a rank set its rank
 * from 0 to tp_size - 1, compared digit by digit (both may be over 2**64). */
static int file_object(const text *t, size_t obj, size_t index, awq2_manifest *m,
                       size_t tp_digits, size_t tp_ndigits)
{
    awq2_set_file *f = &m->files[index];
    char where[48];
    size_t digits, ndigits;
    snprintf(where, sizeof where, "files[%zu]", index);
    if (t->s[obj] != '{') {
        char what[96];
        snprintf(what, sizeof what, "%s is not an object", where);
        return bad(t, obj, what);
    }
    int rc = file_name(t, obj, f, where);
    if (!rc)
        rc = natural(t, obj, "size", &f->size, &digits, &ndigits, where);
    if (!rc)
        rc = hex_string(t, obj, "header_crc", 8, f->header_crc, where);
    if (!rc)
        rc = hex_string(t, obj, "sha256", 64, f->sha256, where);
    if (rc || !m->rank_set)
        return rc;
    if (natural(t, obj, "rank", &f->rank, &digits, &ndigits, where))
        return -1;
    int below = ndigits < tp_ndigits ||
                (ndigits == tp_ndigits && memcmp(t->s + digits, t->s + tp_digits, ndigits) < 0);
    if (!below) {
        char what[96];
        snprintf(what, sizeof what, "%s: rank is not below tp_size", where);
        return bad(t, obj, what);
    }
    return 0;
}

static int same_name(const awq2_set_file *x, const awq2_set_file *y)
{
    return x->name_length == y->name_length && memcmp(x->name, y->name, x->name_length) == 0;
}

/* By name, then manifest order. */
static int by_name(const void *a, const void *b)
{
    const awq2_set_file *x = *(const awq2_set_file *const *)a;
    const awq2_set_file *y = *(const awq2_set_file *const *)b;
    size_t n = x->name_length < y->name_length ? x->name_length : y->name_length;
    int c = memcmp(x->name, y->name, n);
    if (c)
        return c;
    if (x->name_length != y->name_length)
        return x->name_length < y->name_length ? -1 : 1;
    return (x > y) - (x < y);
}

/* SET-4: no name listed twice; the first file in manifest order that repeats a name before
 * it is reported. */
static int names_unique(const text *t, awq2_manifest *m)
{
    const awq2_set_file **v = malloc(m->count * sizeof *v), *twice = NULL;
    if (!v)
        return -2;
    for (size_t i = 0; i < m->count; i++)
        v[i] = &m->files[i];
    qsort(v, m->count, sizeof *v, by_name);
    for (size_t i = 1; i < m->count; i++)
        if (same_name(v[i - 1], v[i]) && (!twice || v[i] < twice))
            twice = v[i];
    free(v);
    if (twice)
        return awq2_fail(t->err, "SET_BAD_MANIFEST", t->root,
                         "files[%zu] repeats the name of a file before it (SET-4)",
                         (size_t)(twice - m->files));
    return 0;
}

/* tp_size (rank sets), then files: an array of 1 to 65536 file objects. */
static int read_files(const text *t, awq2_manifest *m)
{
    size_t at, tp_digits = 0, tp_ndigits = 0;
    if (m->rank_set && natural(t, t->root, "tp_size", &m->tp_size, &tp_digits, &tp_ndigits,
                               "the rank set"))
        return -1;
    if (m->rank_set && !m->tp_size.huge && m->tp_size.value == 0)
        return bad(t, t->root, "tp_size is 0; a rank set has at least one rank");
    if (!member(t, t->root, "files", &at))
        return bad(t, t->root, "the manifest has no files");
    if (t->s[at] != '[')
        return bad(t, at, "files is not an array");
    size_t first = skip_ws(t, at + 1), count = 0;
    for (size_t i = first; t->s[i] != ']'; count++) {
        if (count == AWQ2_MAX_SET_FILES)
            return bad(t, at, "files lists more than 65536 files");
        i = skip_ws(t, skip_value(t, i));
        if (t->s[i] == ',')
            i = skip_ws(t, i + 1);
    }
    if (count == 0)
        return bad(t, at, "files is empty");
    m->files = calloc(count, sizeof *m->files);
    if (!m->files)
        return -2;
    m->count = count;
    for (size_t i = first, j = 0; j < count; j++) {
        int rc = file_object(t, i, j, m, tp_digits, tp_ndigits);
        if (rc)
            return rc;
        i = skip_ws(t, skip_value(t, i));
        if (t->s[i] == ',')
            i = skip_ws(t, i + 1);
    }
    return names_unique(t, m);
}

int awq2_parse_manifest(const uint8_t *s, size_t len, awq2_manifest *m, awq2_error *err)
{
    text t = {s, len, 0, err};
    memset(m, 0, sizeof *m);
    if (len > AWQ2_MAX_MANIFEST_LENGTH)
        return awq2_fail(err, "SET_BAD_MANIFEST", 0,
                         "the manifest is %zu bytes; at most 16777216 (SET-2)", len);
    /* SET-2: one JSON object under the metadata's rules, whatever it holds; a failure of
     * any of them (BAD_METADATA, LIMIT_METADATA) is the manifest's code */
    if (awq2_check_json(s, len, 0, "manifest", err)) {
        size_t n = strlen(err->message);
        if (n + 9 < sizeof err->message)
            memcpy(err->message + n, " (SET-2)", 9);
        err->code = "SET_BAD_MANIFEST";
        return -1;
    }
    t.root = skip_ws(&t, 0);
    int rc = check_version_and_kind(&t, m); /* SET-3, before any other member */
    if (!rc)
        rc = read_files(&t, m);
    return rc;
}

void awq2_manifest_free(awq2_manifest *m)
{
    for (size_t i = 0; m->files && i < m->count; i++)
        free(m->files[i].name);
    free(m->files);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ SET-15: a member's record */

int awq2_metadata_uint(const uint8_t *s, size_t len, const char *outer, const char *inner,
                       awq2_uint *v)
{
    text t = {s, len, 0, NULL};
    size_t at, digits, ndigits;
    int negative;
    if (len == 0) /* no metadata: no member */
        return -1;
    t.root = skip_ws(&t, 0);
    if (!member(&t, t.root, outer, &at))
        return -1;
    if (t.s[at] != '{' || !member(&t, at, inner, &at))
        return 0;
    return integer(&t, at, v, &negative, &digits, &ndigits) && !negative;
}
