/* einsum.h: the one parser of Einsum equations, for every stage that reads
 * them (shape inference, the interpreter, attention matching, the CPU
 * backend's batched products).
 *
 * equation = term ("," term)* ["->" output], each term a string of letters,
 * spaces ignored.  Without "->" the output is every letter that appears
 * exactly once, in ASCII order (numpy's rule).  Ellipsis ("...") is refused. */
#ifndef VITC_IR_EINSUM_H
#define VITC_IR_EINSUM_H

#include "ir/ir.h"

enum { IR_EINSUM_MAX_TERMS = 16 };

typedef struct {
    int nterms;
    char terms[IR_EINSUM_MAX_TERMS][IR_MAX_RANK + 1]; /* input subscripts */
    char out[IR_MAX_RANK + 1];                        /* output subscripts */
    int explicit_out; /* the equation had "->" */
    int repeats;      /* some input term repeats a letter (a diagonal) */
} ir_einsum;

/* Parses eq into p; 0 on success, else -1 with the reason in why. */
int ir_einsum_parse(const char *eq, ir_einsum *p, char *why, size_t nwhy);
/* Parses node n's equation attribute and checks it has one term per input. */
int ir_einsum_of(const ir_node *n, ir_einsum *p, char *why, size_t nwhy);

#endif
