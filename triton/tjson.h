/* tjson.h: the JSON the vitc backend reads and writes: a model's
 * configuration as Triton hands it over (config.pbtxt in its JSON form) and
 * the completed configuration it hands back.  A reader into a tree, and a
 * growing text buffer to write into. */
#ifndef VITC_TRITON_TJSON_H
#define VITC_TRITON_TJSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUMBER, TJ_STRING, TJ_ARRAY, TJ_OBJECT } tj_type;

typedef struct tj_value {
    tj_type type;
    double num;              /* TJ_NUMBER */
    int64_t inum;            /* TJ_NUMBER written as an integer that fits */
    int is_int;
    char *str;               /* TJ_STRING, NUL-terminated (a \u0000 in it ends it early) */
    size_t n;                /* items of an array or members of an object */
    struct tj_value *items;  /* TJ_ARRAY, TJ_OBJECT: the values */
    char **keys;             /* TJ_OBJECT: the names, items[i] is keys[i]'s value */
} tj_value;

/* Parses len bytes of JSON text (one value, whitespace around it): NULL
 * with a message in err (offset and what was wrong) when it is not JSON,
 * nests deeper than 64 levels, or memory runs out. */
tj_value *tj_parse(const char *text, size_t len, char *err, size_t errlen);
void tj_free(tj_value *v);

/* The member of an object (the last of that name), or NULL (v NULL or not an object). */
const tj_value *tj_get(const tj_value *v, const char *key);
/* An integer written as a number or as a string of digits (protobuf's JSON
 * writes int64 fields as strings): 0 on success, -1 otherwise. */
int tj_int(const tj_value *v, int64_t *out);
/* The string, or NULL where v is not one. */
const char *tj_str(const tj_value *v);

/* Text written piece by piece; oom set (and the text dropped) when memory runs out. */
typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} tj_buf;
void tj_puts(tj_buf *b, const char *s);
void tj_printf(tj_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a JSON string: quoted, with quote, backslash and control characters escaped. */
void tj_put_string(tj_buf *b, const char *s);
/* v written back as JSON text (numbers that were integers as integers). */
void tj_write(tj_buf *b, const tj_value *v);
void tj_buf_free(tj_buf *b);

#endif
