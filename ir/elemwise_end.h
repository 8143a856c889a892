/* elemwise_end.h: forgets the vocabulary of elemwise.def (X0..X2 and the
 * words), so that a file can define it again (another type) or move on.
 * Include it after expanding the rows; deliberately without a guard. */
#undef X0
#undef X1
#undef X2
#undef K
#undef ATTR
#undef ADD
#undef SUB
#undef MUL
#undef DIV
#undef MOD
#undef POW
#undef NEG
#undef ABS
#undef EXP
#undef LOG
#undef ERF
#undef TANH
#undef COS
#undef SIN
#undef SQRT
#undef ROUND
#undef F32
#undef GELU
#undef MAX
#undef MIN
#undef LT
#undef GT
#undef LE
#undef GE
#undef EQ
#undef AND
#undef OR
#undef NOT
#undef SELECT
