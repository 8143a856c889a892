/* json.c: the JSON the CLI prints with --json.  A writer only (vitc reads no
 * JSON), indented two spaces per level.  Strings are escaped as RFC 8259
 * asks: quote, backslash and control characters, and bytes that are not
 * UTF-8 (ONNX names can hold any) become U+FFFD, so the output is always
 * valid JSON text.  Numbers that are not finite are written as null. */
#include "tools/cli.h"

#include <math.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (1-4), or 0. */
static int utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || (n == 2 && c < 0xc2) || (n == 4 && c > 0xf4))
        return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if (n == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0))) /* overlong, surrogates */
        return 0;
    if (n == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90)))
        return 0;
    return n;
}

static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        if (*p == '"' || *p == '\\') {
            fprintf(f, "\\%c", *p++);
        } else if (*p == '\n') {
            fputs("\\n", f), p++;
        } else if (*p == '\t') {
            fputs("\\t", f), p++;
        } else if (*p < 0x20) {
            fprintf(f, "\\u%04x", *p++);
        } else {
            int n = utf8_len(p);
            if (n == 0) {
                fputs("\\ufffd", f);
                p++;
            } else {
                fwrite(p, 1, (size_t)n, f);
                p += n;
            }
        }
    }
    fputc('"', f);
}

/* The separator, indentation and key before a value. */
static void before(json_w *w, const char *key)
{
    if (w->depth > 0) {
        fputs(w->count[w->depth] ? ",\n" : "\n", w->f);
        w->count[w->depth]++;
        fprintf(w->f, "%*s", 2 * w->depth, "");
    }
    if (key) {
        put_string(w->f, key);
        fputs(": ", w->f);
    }
}

static void open_(json_w *w, const char *key, char c)
{
    before(w, key);
    fputc(c, w->f);
    if (w->depth + 1 < JSON_MAX_DEPTH)
        w->depth++;
    w->count[w->depth] = 0;
}

static void close_(json_w *w, char c)
{
    int empty = w->count[w->depth] == 0;
    if (w->depth > 0)
        w->depth--;
    if (!empty)
        fprintf(w->f, "\n%*s", 2 * w->depth, "");
    fputc(c, w->f);
    if (w->depth == 0)
        fputc('\n', w->f);
}

void json_object(json_w *w, const char *key) { open_(w, key, '{'); }
void json_array(json_w *w, const char *key) { open_(w, key, '['); }
void json_end_object(json_w *w) { close_(w, '}'); }
void json_end_array(json_w *w) { close_(w, ']'); }

void json_str(json_w *w, const char *key, const char *v)
{
    before(w, key);
    if (v)
        put_string(w->f, v);
    else
        fputs("null", w->f);
}

void json_num(json_w *w, const char *key, double v)
{
    before(w, key);
    if (isfinite(v))
        fprintf(w->f, "%.9g", v);
    else
        fputs("null", w->f);
}

void json_int(json_w *w, const char *key, long long v)
{
    before(w, key);
    fprintf(w->f, "%lld", v);
}

void json_bool(json_w *w, const char *key, int v)
{
    before(w, key);
    fputs(v ? "true" : "false", w->f);
}
