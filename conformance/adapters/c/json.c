/* json.c: strict UTF-8 (NAME-2, META-1) and the metadata check (META-1, META-2, LIM-5), which
 * a file set's manifest reuses (sets.md SET-2).
 *
 * The order is META-6's: no byte order mark and valid UTF-8, then the nesting depth by one
 * lexical pass (LIMIT_METADATA, whatever the rest of the text), then the grammar, duplicate
 * keys, numbers and surrogate escapes (META-2, META-5).  The parser is iterative (an explicit
 * stack on the heap), so no input can exhaust the C stack.
 */
#include "awq2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NUMBER_LENGTH 100 /* META-5 */

size_t awq2_utf8_invalid_at(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0; /* no overlong form */
            if (c == 0xED)
                hi = 0x9F; /* no surrogate */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90;
            if (c == 0xF4)
                hi = 0x8F; /* nothing above U+10FFFF */
        } else {
            return i;
        }
        if (len - i <= need)
            return i;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t j = 2; j <= need; j++)
            if ((s[i + j] & 0xC0) != 0x80)
                return i;
        i += need + 1;
    }
    return len;
}

/* ------------------------------------------------------------------ the JSON checker */

typedef struct {
    size_t off, len; /* a decoded key in the arena */
} key_ref;

typedef struct {
    char kind;        /* '{' or '[' */
    size_t first_key; /* index into keys of this object's first key */
    size_t arena_mark;
} frame;

typedef struct {
    const uint8_t *s;
    size_t len, pos;
    uint64_t base; /* file offset of s[0], for messages */
    const char *what; /* "metadata" or "manifest", for messages */
    awq2_error *err;
    frame *stack;
    size_t depth, stack_cap;
    key_ref *keys;
    size_t nkeys, keys_cap;
    uint8_t *arena;
    size_t arena_len, arena_cap;
} parser;

static const uint8_t *sort_arena; /* qsort has no context argument in C11 */

static int key_cmp(const void *a, const void *b)
{
    const key_ref *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    /* The arena is NULL while every key so far is empty: never memcmp a null pointer,
     * even for length 0 (C11 7.24.1p2). */
    int c = n ? memcmp(sort_arena + x->off, sort_arena + y->off, n) : 0;
    if (c)
        return c;
    return (x->len > y->len) - (x->len < y->len);
}

/* The offset is the text's first byte (RD-7), the byte at fault is in the message. */
static int bad(parser *p, const char *what)
{
    return awq2_fail(p->err, "BAD_METADATA", p->base,
                     "%s is not a strict JSON object: %s at %s byte %zu", p->what, what, p->what,
                     p->pos);
}

static int oom(parser *p)
{
    return awq2_fail(p->err, "LIMIT_METADATA", p->base, "out of memory parsing the %s", p->what);
}

static int grow(void **buf, size_t *cap, size_t need, size_t item)
{
    if (need <= *cap)
        return 0;
    size_t cap2 = *cap ? *cap : 16;
    while (cap2 < need)
        cap2 *= 2;
    void *nb = realloc(*buf, cap2 * item);
    if (!nb)
        return -1;
    *buf = nb;
    *cap = cap2;
    return 0;
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        uint8_t c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int put_utf8(parser *p, uint32_t cp)
{
    uint8_t b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (uint8_t)(0xC0 | cp >> 6);
        b[1] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) { /* lone surrogates too: keys stay distinct */
        b[0] = (uint8_t)(0xE0 | cp >> 12);
        b[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (uint8_t)(0xF0 | cp >> 18);
        b[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 4;
    }
    if (grow((void **)&p->arena, &p->arena_cap, p->arena_len + n, 1))
        return oom(p);
    memcpy(p->arena + p->arena_len, b, n);
    p->arena_len += n;
    return 0;
}

static int hex4(parser *p, uint32_t *out)
{
    uint32_t v = 0;
    if (p->len - p->pos < 4)
        return bad(p, "short \\u escape");
    for (int i = 0; i < 4; i++) {
        uint8_t c = p->s[p->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return bad(p, "bad hex digit in a \\u escape");
    }
    *out = v;
    return 0;
}

/* A string at p->pos (the opening quote); decoded into the arena when `keep`. */
static int string(parser *p, int keep)
{
    p->pos++;
    for (;;) {
        if (p->pos >= p->len)
            return bad(p, "unterminated string");
        uint8_t c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            return 0;
        }
        if (c < 0x20)
            return bad(p, "control character in a string");
        if (c != '\\') {
            if (keep) {
                if (grow((void **)&p->arena, &p->arena_cap, p->arena_len + 1, 1))
                    return oom(p);
                p->arena[p->arena_len++] = c;
            }
            p->pos++;
            continue;
        }
        p->pos++;
        if (p->pos >= p->len)
            return bad(p, "unterminated escape");
        uint8_t e = p->s[p->pos++];
        uint32_t cp;
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (hex4(p, &cp))
                return -1;
            if (cp >= 0xD800 && cp <= 0xDBFF && p->len - p->pos >= 6 && p->s[p->pos] == '\\' &&
                p->s[p->pos + 1] == 'u') {
                size_t save = p->pos;
                uint32_t lo;
                p->pos += 2;
                if (hex4(p, &lo))
                    return -1;
                if (lo >= 0xDC00 && lo <= 0xDFFF)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    p->pos = save; /* a lone high surrogate, then another escape */
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) { /* META-5: no unpaired surrogate */
                p->pos -= 6;
                return bad(p, "\\u escape of an unpaired surrogate");
            }
            break;
        default:
            p->pos--;
            return bad(p, "unknown escape");
        }
        if (keep && put_utf8(p, cp))
            return -1;
    }
}

static int number_grammar(parser *p);

static int digits(parser *p)
{
    size_t start = p->pos;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
        p->pos++;
    return p->pos > start ? 0 : bad(p, "digit expected");
}

/* RFC 8259 number grammar (NaN and Infinity are not in it), then META-5: at most 100 bytes,
 * and finite as a binary64. */
static int number(parser *p)
{
    size_t start = p->pos;
    if (number_grammar(p))
        return -1;
    size_t n = p->pos - start;
    if (n > MAX_NUMBER_LENGTH) {
        p->pos = start;
        return bad(p, "a number longer than 100 bytes");
    }
    char token[MAX_NUMBER_LENGTH + 1];
    memcpy(token, p->s + start, n);
    token[n] = 0;
    double v = strtod(token, NULL); /* the C locale: '.' is the decimal point */
    if (isinf(v)) {
        p->pos = start;
        return bad(p, "a number outside the range of binary64");
    }
    return 0;
}

static int number_grammar(parser *p)
{
    if (p->s[p->pos] == '-')
        p->pos++;
    if (p->pos < p->len && p->s[p->pos] == '0')
        p->pos++;
    else if (digits(p))
        return -1;
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        if (digits(p))
            return -1;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (digits(p))
            return -1;
    }
    return 0;
}

static int literal(parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return bad(p, "unexpected character");
    p->pos += n;
    return 0;
}

static int push(parser *p, char kind)
{
    if (grow((void **)&p->stack, &p->stack_cap, p->depth + 1, sizeof(frame)))
        return oom(p);
    p->stack[p->depth].kind = kind;
    p->stack[p->depth].first_key = p->nkeys;
    p->stack[p->depth].arena_mark = p->arena_len;
    p->depth++;
    p->pos++;
    return 0;
}

/* Close the innermost container; an object's keys must be unique (META-2). */
static int pop(parser *p)
{
    frame *f = &p->stack[p->depth - 1];
    if (f->kind == '{' && p->nkeys - f->first_key > 1) {
        key_ref *k = p->keys + f->first_key;
        size_t n = p->nkeys - f->first_key;
        sort_arena = p->arena;
        qsort(k, n, sizeof *k, key_cmp);
        for (size_t i = 1; i < n; i++)
            if (key_cmp(&k[i - 1], &k[i]) == 0) {
                p->pos--;
                return bad(p, "duplicate key in the object that ends");
            }
    }
    p->nkeys = f->first_key;
    p->arena_len = f->arena_mark;
    p->depth--;
    p->pos++;
    return 0;
}

static int parse(parser *p)
{
    enum { VALUE, KEY, AFTER } state = VALUE;
    skip_ws(p);
    if (p->pos >= p->len || p->s[p->pos] != '{')
        return bad(p, "the document is not an object");
    for (;;) {
        skip_ws(p);
        if (state == AFTER) {
            if (p->depth == 0)
                return p->pos == p->len ? 0 : bad(p, "text after the object");
            if (p->pos >= p->len)
                return bad(p, "unexpected end");
            uint8_t c = p->s[p->pos];
            char kind = p->stack[p->depth - 1].kind;
            if (c == ',') {
                p->pos++;
                state = kind == '{' ? KEY : VALUE;
            } else if ((kind == '{' && c == '}') || (kind == '[' && c == ']')) {
                if (pop(p))
                    return -1;
            } else {
                return bad(p, "',' or a closing bracket expected");
            }
            continue;
        }
        if (p->pos >= p->len)
            return bad(p, "unexpected end");
        if (state == KEY) {
            if (p->s[p->pos] != '"')
                return bad(p, "a key string expected");
            size_t start = p->arena_len;
            if (string(p, 1))
                return -1;
            if (grow((void **)&p->keys, &p->keys_cap, p->nkeys + 1, sizeof(key_ref)))
                return oom(p);
            p->keys[p->nkeys].off = start;
            p->keys[p->nkeys].len = p->arena_len - start;
            p->nkeys++;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':')
                return bad(p, "':' expected");
            p->pos++;
            state = VALUE;
            continue;
        }
        uint8_t c = p->s[p->pos]; /* VALUE */
        int rc;
        state = AFTER;
        if (c == '{' || c == '[') {
            if (push(p, (char)c))
                return -1;
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == (c == '{' ? '}' : ']')) {
                if (pop(p))
                    return -1;
            } else {
                state = c == '{' ? KEY : VALUE;
            }
            continue;
        }
        if (c == '"')
            rc = string(p, 0);
        else if (c == '-' || (c >= '0' && c <= '9'))
            rc = number(p);
        else if (c == 't')
            rc = literal(p, "true");
        else if (c == 'f')
            rc = literal(p, "false");
        else if (c == 'n')
            rc = literal(p, "null");
        else
            rc = bad(p, "a value expected (NaN and Infinity are not JSON)");
        if (rc)
            return -1;
    }
}

int awq2_check_metadata(const uint8_t *text, size_t len, uint64_t base, awq2_error *err)
{
    if (len == 0)
        return 0; /* META-1: no metadata */
    return awq2_check_json(text, len, base, "metadata", err);
}

int awq2_check_json(const uint8_t *text, size_t len, uint64_t base, const char *what,
                    awq2_error *err)
{
    if (len >= 3 && text[0] == 0xEF && text[1] == 0xBB && text[2] == 0xBF)
        return awq2_fail(err, "BAD_METADATA", base, "%s starts with a byte order mark", what);
    size_t at = awq2_utf8_invalid_at(text, len);
    if (at != len)
        return awq2_fail(err, "BAD_METADATA", base + at,
                         "%s is not UTF-8: invalid byte 0x%02X at %s byte %zu", what,
                         text[at], what, at);
    /* META-6: the depth, by one lexical pass, before the text is parsed */
    long long depth = 0; /* may go below zero in a malformed text: not clamped */
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = text[i];
        if (in_string) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > AWQ2_MAX_METADATA_DEPTH)
                return awq2_fail(err, "LIMIT_METADATA", base, /* its first byte (RD-7) */
                                 "%s nests deeper than max_metadata_depth (%u) at its byte %zu",
                                 what, AWQ2_MAX_METADATA_DEPTH, (size_t)i);
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    parser p;
    memset(&p, 0, sizeof p);
    p.s = text;
    p.len = len;
    p.base = base;
    p.what = what;
    p.err = err;
    int rc = parse(&p);
    free(p.stack);
    free(p.keys);
    free(p.arena);
    return rc;
}
