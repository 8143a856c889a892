/* tjson.c: a small JSON reader (RFC 8259) into a tree, and a text buffer to
 * write JSON into.  Recursive descent; every value owns what it points to. */
#include "triton/tjson.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TJ_MAX_DEPTH 64

typedef struct {
    const char *s;
    size_t len, pos;
    char *err;
    size_t errlen;
    int failed;
} tj_parser;

static void fail(tj_parser *p, const char *what)
{
    if (!p->failed && p->err && p->errlen)
        snprintf(p->err, p->errlen, "JSON at byte %zu: %s", p->pos, what);
    p->failed = 1;
}

static void skip_ws(tj_parser *p)
{
    while (p->pos < p->len &&
           (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int peek(tj_parser *p)
{
    return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static int hex4(tj_parser *p, unsigned *out)
{
    if (p->len - p->pos < 4)
        return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* At the opening quote; returns the decoded string (malloc'ed) or NULL. */
static char *parse_string(tj_parser *p)
{
    p->pos++; /* '"' */
    size_t start = p->pos, end = start;
    while (end < p->len && p->s[end] != '"') /* an upper bound of the decoded length */
        end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) {
        fail(p, "unterminated string");
        return NULL;
    }
    char *o = malloc(end - start + 1);
    if (!o) {
        fail(p, "out of memory");
        return NULL;
    }
    size_t k = 0;
    for (;;) {
        int c = peek(p);
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) {
            fail(p, c < 0 ? "unterminated string" : "control character in a string");
            free(o);
            return NULL;
        }
        p->pos++;
        if (c != '\\') {
            o[k++] = (char)c;
            continue;
        }
        int e = peek(p);
        p->pos++;
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(p, &cp) != 0) {
                fail(p, "bad \\u escape");
                free(o);
                return NULL;
            }
            if (cp >= 0xd800 && cp < 0xdc00 && p->len - p->pos >= 6 && p->s[p->pos] == '\\' &&
                p->s[p->pos + 1] == 'u') {
                size_t save = p->pos;
                p->pos += 2;
                if (hex4(p, &lo) == 0 && lo >= 0xdc00 && lo < 0xe000)
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                else
                    p->pos = save;
            }
            if (cp >= 0xd800 && cp < 0xe000)
                cp = 0xfffd; /* a lone surrogate */
            /* 6 escaped bytes (12 for a pair) become at most 4: within the bound */
            k += put_utf8(o + k, cp);
            break;
        }
        default:
            fail(p, "bad escape in a string");
            free(o);
            return NULL;
        }
    }
    o[k] = 0;
    return o;
}

static int parse_value(tj_parser *p, tj_value *v, int depth);

static int parse_number(tj_parser *p, tj_value *v)
{
    size_t start = p->pos;
    if (peek(p) == '-')
        p->pos++;
    if (peek(p) < '0' || peek(p) > '9') {
        fail(p, "bad number");
        return -1;
    }
    if (peek(p) == '0')
        p->pos++;
    else
        while (peek(p) >= '0' && peek(p) <= '9')
            p->pos++;
    int integral = 1;
    if (peek(p) == '.') {
        integral = 0;
        p->pos++;
        if (peek(p) < '0' || peek(p) > '9') {
            fail(p, "bad number");
            return -1;
        }
        while (peek(p) >= '0' && peek(p) <= '9')
            p->pos++;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        integral = 0;
        p->pos++;
        if (peek(p) == '+' || peek(p) == '-')
            p->pos++;
        if (peek(p) < '0' || peek(p) > '9') {
            fail(p, "bad number");
            return -1;
        }
        while (peek(p) >= '0' && peek(p) <= '9')
            p->pos++;
    }
    char tmp[64];
    size_t n = p->pos - start;
    if (n >= sizeof tmp) {
        fail(p, "number too long");
        return -1;
    }
    memcpy(tmp, p->s + start, n);
    tmp[n] = 0;
    v->type = TJ_NUMBER;
    v->num = strtod(tmp, NULL);
    if (integral) {
        errno = 0;
        long long x = strtoll(tmp, NULL, 10);
        if (errno == 0) {
            v->inum = x;
            v->is_int = 1;
        }
    }
    return 0;
}

static int grow(tj_parser *p, tj_value *v, size_t *cap, int with_keys)
{
    if (v->n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 4;
    tj_value *items = realloc(v->items, nc * sizeof *items);
    if (items)
        v->items = items;
    char **keys = NULL;
    if (items && with_keys) {
        keys = realloc(v->keys, nc * sizeof *keys);
        if (keys)
            v->keys = keys;
    }
    if (!items || (with_keys && !keys)) {
        fail(p, "out of memory");
        return -1;
    }
    *cap = nc;
    return 0;
}

static int parse_container(tj_parser *p, tj_value *v, int depth, int object)
{
    v->type = object ? TJ_OBJECT : TJ_ARRAY;
    p->pos++; /* '[' or '{' */
    size_t cap = 0;
    skip_ws(p);
    if (peek(p) == (object ? '}' : ']')) {
        p->pos++;
        return 0;
    }
    for (;;) {
        skip_ws(p);
        char *key = NULL;
        if (object) {
            if (peek(p) != '"') {
                fail(p, "expected a member name");
                return -1;
            }
            if (!(key = parse_string(p)))
                return -1;
            skip_ws(p);
            if (peek(p) != ':') {
                free(key);
                fail(p, "expected ':'");
                return -1;
            }
            p->pos++;
        }
        if (grow(p, v, &cap, object) != 0) {
            free(key);
            return -1;
        }
        tj_value *item = &v->items[v->n];
        memset(item, 0, sizeof *item);
        if (object)
            v->keys[v->n] = key;
        v->n++; /* counted before it is parsed, so that tj_free frees what a failure leaves */
        if (parse_value(p, item, depth + 1) != 0)
            return -1;
        skip_ws(p);
        int c = peek(p);
        if (c == ',') {
            p->pos++;
            continue;
        }
        if (c == (object ? '}' : ']')) {
            p->pos++;
            return 0;
        }
        fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
        return -1;
    }
}

static int parse_value(tj_parser *p, tj_value *v, int depth)
{
    if (depth > TJ_MAX_DEPTH) {
        fail(p, "nested too deeply");
        return -1;
    }
    skip_ws(p);
    int c = peek(p);
    if (c == '{' || c == '[')
        return parse_container(p, v, depth, c == '{');
    if (c == '"') {
        v->type = TJ_STRING;
        v->str = parse_string(p);
        return v->str ? 0 : -1;
    }
    if (c == '-' || (c >= '0' && c <= '9'))
        return parse_number(p, v);
    static const struct {
        const char *word;
        tj_type type;
    } words[] = {{"null", TJ_NULL}, {"true", TJ_TRUE}, {"false", TJ_FALSE}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i].word);
        if (p->len - p->pos >= n && memcmp(p->s + p->pos, words[i].word, n) == 0) {
            p->pos += n;
            v->type = words[i].type;
            return 0;
        }
    }
    fail(p, c < 0 ? "unexpected end" : "unexpected character");
    return -1;
}

static void free_inner(tj_value *v)
{
    for (size_t i = 0; i < v->n; i++) {
        free_inner(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
}

void tj_free(tj_value *v)
{
    if (v) {
        free_inner(v);
        free(v);
    }
}

tj_value *tj_parse(const char *text, size_t len, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    tj_parser p = {.s = text, .len = text ? len : 0, .err = err, .errlen = errlen};
    tj_value *v = calloc(1, sizeof *v);
    if (!v) {
        fail(&p, "out of memory");
        return NULL;
    }
    if (parse_value(&p, v, 0) == 0) {
        skip_ws(&p);
        if (p.pos != p.len)
            fail(&p, "text after the value");
    }
    if (p.failed) {
        tj_free(v);
        return NULL;
    }
    return v;
}

const tj_value *tj_get(const tj_value *v, const char *key)
{
    if (!v || v->type != TJ_OBJECT)
        return NULL;
    for (size_t i = v->n; i-- > 0;)
        if (strcmp(v->keys[i], key) == 0)
            return &v->items[i];
    return NULL;
}

int tj_int(const tj_value *v, int64_t *out)
{
    if (!v)
        return -1;
    if (v->type == TJ_NUMBER && v->is_int) {
        *out = v->inum;
        return 0;
    }
    if (v->type == TJ_STRING && v->str[0]) {
        char *end;
        errno = 0;
        long long x = strtoll(v->str, &end, 10);
        if (errno == 0 && *end == 0) {
            *out = x;
            return 0;
        }
    }
    return -1;
}

const char *tj_str(const tj_value *v)
{
    return v && v->type == TJ_STRING ? v->str : NULL;
}

static void put_bytes(tj_buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1)
            nc *= 2;
        char *p = realloc(b->p, nc);
        if (!p) {
            b->oom = 1;
            free(b->p);
            b->p = NULL;
            b->n = b->cap = 0;
            return;
        }
        b->p = p;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tj_puts(tj_buf *b, const char *s)
{
    put_bytes(b, s, strlen(s));
}

void tj_printf(tj_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        put_bytes(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    put_bytes(b, big, (size_t)n);
    free(big);
}

void tj_put_string(tj_buf *b, const char *s)
{
    put_bytes(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            put_bytes(b, e, 2);
        } else if (*c < 0x20) {
            tj_printf(b, "\\u%04x", *c);
        } else {
            put_bytes(b, (const char *)c, 1);
        }
    }
    put_bytes(b, "\"", 1);
}

void tj_write(tj_buf *b, const tj_value *v)
{
    switch (v->type) {
    case TJ_NULL: tj_puts(b, "null"); break;
    case TJ_FALSE: tj_puts(b, "false"); break;
    case TJ_TRUE: tj_puts(b, "true"); break;
    case TJ_NUMBER:
        if (v->is_int)
            tj_printf(b, "%lld", (long long)v->inum);
        else
            tj_printf(b, "%.17g", v->num);
        break;
    case TJ_STRING: tj_put_string(b, v->str); break;
    case TJ_ARRAY:
    case TJ_OBJECT:
        tj_puts(b, v->type == TJ_ARRAY ? "[" : "{");
        for (size_t i = 0; i < v->n; i++) {
            if (i)
                tj_puts(b, ",");
            if (v->type == TJ_OBJECT) {
                tj_put_string(b, v->keys[i]);
                tj_puts(b, ":");
            }
            tj_write(b, &v->items[i]);
        }
        tj_puts(b, v->type == TJ_ARRAY ? "]" : "}");
        break;
    }
}

void tj_buf_free(tj_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}
