/* The finite-difference cases of every layer type (test_grad.c, test_split.c): a layer from
 * its YAML, input shapes and fills, and the objective whose gradient is checked. */
#ifndef LT_GRAD_CASES_H
#define LT_GRAD_CASES_H

#include "tests/layers/harness.h"

#define FD_H 1e-2f

typedef enum fill_kind { FILL_UNIFORM, FILL_AWAY, FILL_DISTINCT } fill_kind;

typedef struct grad_case {
  const char *name;
  const char *yaml;
  int n_in;
  gp_shape in[4]; /* per sample */
  int64_t batch;
  fill_kind fill;
  int labels_k; /* > 0: the last input is int32 labels in [0, labels_k), objective = loss */
  int eval;     /* 1: evaluation mode (training = 0) */
  lt_tol_id tol;
  /* Per input (NULL: all 'f'): 'f' f32 data; 'i' I32 ids in [0, ids_k); 'm' I32 key-padding
   * mask (1 token, 0 pad; key 0 always a token); 'z' the same with sample 0 all padding;
   * 'g' an F32 0/1 mask, which gets no finite differences: its gradient must be exactly 0;
   * 's' I32 segment ids of a packed row (two sentences, odd samples end with a pad); 'p' I32
   * positions of those sentences, each restarting (from 7 b in sample b); 't' an F32 target:
   * input 0's values each moved 0.1 to 1 up or down. */
  const char *kinds;
  int ids_k;
} grad_case;

/* clang-format off */
#define S0 {0, {0}}
#define S1(a) {1, {a}}
#define S2(a, b) {2, {a, b}}
#define S3(a, b, c) {3, {a, b, c}}
/* clang-format on */

extern const grad_case lt_grad_cases[];
extern const int lt_n_grad_cases;
/* Every type the layers helper owes, NULL-terminated. */
extern const char *const lt_grad_types[];

/* The type named in a case's YAML (a static buffer). */
const char *lt_type_of(const char *yaml);
/* The types of lt_grad_types that no case covers, each said on a FAIL line; their count. */
int lt_grad_uncovered(void);
/* sum(out * dout), or the loss for a loss layer. */
double lt_objective(const lt_layer *t, int is_loss);
/* Central difference of the objective with respect to *x. */
gp_status lt_fd_at(lt_layer *t, float *x, int is_loss, double *out);
/* Input i's kind ('f' when the case gives none). */
char lt_kind_of(const grad_case *c, int i);
/* Inputs by their kinds and trainable parameters, from seed. */
void lt_fill_case(lt_layer *t, const grad_case *c, uint64_t seed);

#endif
