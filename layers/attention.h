/* attention's parts shared by its files: the settings, the geometry the input shapes give, what
 * a forward keeps (attention.c), and the cached one-position forward of decoding
 * (attention_cached.c). */
#ifndef GP_LAYERS_ATTENTION_H
#define GP_LAYERS_ATTENTION_H

#include "layers/layers.h"

typedef struct gp_attn_conf {
  int64_t heads, dim; /* dim 0: the input's */
  int bias, causal;
  int segments; /* mask: segments (1) or padding (0) */
  double dropout;
  int64_t kv_heads; /* 0: heads */
  double theta;
  int rope;                 /* rope.theta given */
  int roles[GP_MAX_INPUTS]; /* inputs: what each input is (enum role), when n_roles > 0 */
  int n_roles;
} gp_attn_conf;

/* What the input shapes make of the layer. */
typedef struct gp_attn_geo {
  int cross;        /* keys and values from input kv */
  int kv;           /* index of the keys/values input (cross), or -1 */
  int mask;         /* index of the key-padding mask input, or -1 */
  int seg_q, seg_k; /* indices of the segment id inputs (mask: segments), or -1 */
  int pos;          /* index of the positions (rope), or -1 */
  int n;            /* inputs other than the positions (rank-told roles count these) */
  int64_t tq, tk, d, h, dh;
  int64_t kvh, dkv; /* key/value heads, their width kvh * dh */
  int64_t nqkv;     /* self-attention's projection width d + 2 dkv */
} gp_attn_geo;

/* The projections of a micro-batch as strided views; what backward needs from forward. */
typedef struct gp_attn_saved {
  float *qkv;       /* self: [rows, 3d]; cross: q [rows_q, d] then kv [rows_k, 2d] */
  float *p;         /* softmax probabilities [B, H, Tq, Tk], before dropout; NULL when fused */
  float *lse;       /* fused attention (sdpa_forward): log-sum-exp per [B, H, Tq] row, or NULL */
  float *ctx;       /* the heads' outputs side by side [rows_q, d] */
  int64_t ldq, ldk; /* row strides of Q and of K, V */
  float *q, *k, *v; /* views into qkv */
  /* d(projections), laid out like qkv: kept by a backward's B (GP_GRAD_INPUT) for its W,
   * NULL until then */
  float *dqkv;
} gp_attn_saved;

void gp_attn_geometry(const gp_layer *l, gp_attn_geo *g);
/* Which param index holds what (the biases are absent without bias). */
void gp_attn_param_ix(const gp_layer *l, int *w_in, int *b_in, int *w_out, int *b_out);
/* Incremental decoding's forward (e->cache set): attention_cached.c. */
gp_status gp_attn_forward_cached(const gp_layer *l, gp_exec *e, const gp_tensor *in, gp_tensor *out,
                                 void **saved);

#endif
