/* einsum.c: the one Einsum equation parser (see einsum.h). */
#include "ir/einsum.h"

#include <stdio.h>
#include <string.h>

static int is_letter(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

int ir_einsum_parse(const char *eq, ir_einsum *p, char *why, size_t nwhy)
{
    memset(p, 0, sizeof *p);
    const char *s = eq;
    int len = 0, count[128] = {0};
    p->nterms = 1;
    for (; *s && !(s[0] == '-' && s[1] == '>'); s++) {
        if (*s == ' ')
            continue;
        if (*s == '.') {
            snprintf(why, nwhy, "ellipsis ('...') in Einsum equations is not supported");
            return -1;
        }
        if (*s == ',') {
            if (p->nterms == IR_EINSUM_MAX_TERMS) {
                snprintf(why, nwhy, "more than %d operands", IR_EINSUM_MAX_TERMS);
                return -1;
            }
            p->nterms++;
            len = 0;
            continue;
        }
        if (!is_letter(*s)) {
            snprintf(why, nwhy, "unexpected character '%c' in the equation", *s);
            return -1;
        }
        if (len == IR_MAX_RANK) {
            snprintf(why, nwhy, "a term has more than %d subscripts", IR_MAX_RANK);
            return -1;
        }
        if (strchr(p->terms[p->nterms - 1], *s))
            p->repeats = 1;
        p->terms[p->nterms - 1][len++] = *s;
        count[(unsigned char)*s]++;
    }
    len = 0;
    p->explicit_out = *s != 0;
    if (*s) { /* explicit output */
        for (s += 2; *s; s++) {
            if (*s == ' ')
                continue;
            if (*s == '.') {
                snprintf(why, nwhy, "ellipsis ('...') in Einsum equations is not supported");
                return -1;
            }
            if (!is_letter(*s)) {
                snprintf(why, nwhy, "unexpected character '%c' in the output", *s);
                return -1;
            }
            if (!count[(unsigned char)*s] || strchr(p->out, *s)) {
                snprintf(why, nwhy, "output subscript '%c' is %s", *s,
                         count[(unsigned char)*s] ? "repeated" : "not in any input");
                return -1;
            }
            if (len == IR_MAX_RANK) {
                snprintf(why, nwhy, "the output has more than %d subscripts", IR_MAX_RANK);
                return -1;
            }
            p->out[len++] = *s;
        }
    } else { /* implicit output: letters seen once, in ASCII order */
        for (int ch = 0; ch < 128; ch++)
            if (count[ch] == 1) {
                if (len == IR_MAX_RANK) {
                    snprintf(why, nwhy, "the output has more than %d subscripts", IR_MAX_RANK);
                    return -1;
                }
                p->out[len++] = (char)ch;
            }
    }
    return 0;
}

int ir_einsum_of(const ir_node *n, ir_einsum *p, char *why, size_t nwhy)
{
    const ir_attr *a = ir_attr_get(n, IR_ATTR_EQUATION);
    if (!a || a->kind != IR_AT_STRING) {
        snprintf(why, nwhy, "missing equation");
        return -1;
    }
    if (ir_einsum_parse(a->s, p, why, nwhy))
        return -1;
    if (p->nterms != n->ninputs) {
        snprintf(why, nwhy, "equation '%s' does not match the %d operands (it has %d terms)", a->s, n->ninputs, p->nterms);
        return -1;
    }
    return 0;
}
