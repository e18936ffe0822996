/* The batch-source interface: dispatch, and each replica's slice of the global batches. */
#include "core/train/batch_source.h"

#include <stdlib.h>
#include <string.h>

gp_status gp_batch_source_new(const gp_batch_source_ops *ops, void *ctx, const gp_model *m,
                              gp_batch_source **out) {
  *out = NULL;
  gp_batch_source *s = calloc(1, sizeof *s);
  if (!s) {
    if (ops->free) ops->free(ctx);
    return GP_ERR(GP_ERR_NOMEM, "out of memory for a batch source");
  }
  s->ops = ops;
  s->ctx = ctx;
  s->replicas = 1;
  for (int i = 0; i < m->n_inputs && i < GP_MAX_MODEL_INPUTS; i++)
    s->row_bytes[i] =
        (size_t)gp_shape_numel(&m->inputs[i].shape) * gp_dtype_size(m->inputs[i].dtype);
  *out = s;
  return GP_OK;
}

void gp_batch_source_free(gp_batch_source *s) {
  if (!s) return;
  if (s->ops->free) s->ops->free(s->ctx);
  free(s);
}

gp_status gp_batch_source_set_replica(gp_batch_source *s, int r, int R) {
  if (R < 1 || r < 0 || r >= R)
    return GP_ERR(GP_ERR_USAGE, "replica %d of %d: expected 0 <= replica < replicas", r, R);
  s->replica = r;
  s->replicas = R;
  return GP_OK;
}

gp_status gp_batch_source_want(gp_batch_source *s, const unsigned char used[GP_MAX_MODEL_INPUTS],
                               int replica, int replicas) {
  if (replicas < 1 || replica < 0 || replica >= replicas)
    return GP_ERR(GP_ERR_USAGE, "replica %d of %d: expected 0 <= replica < replicas", replica,
                  replicas);
  return s->ops->want ? s->ops->want(s->ctx, used, replica, replicas) : GP_OK;
}

gp_batch gp_batch_slice(const gp_batch *g, const size_t *row_bytes, int r, int R) {
  gp_batch b = *g;
  int64_t lo, hi;
  gp_batch_share(g->n, r, R, &lo, &hi); /* the pipeline's cut: its rows are these */
  b.n = hi - lo;
  for (int i = 0; i < GP_MAX_MODEL_INPUTS; i++)
    if (g->in[i]) b.in[i] = (const char *)g->in[i] + (size_t)lo * row_bytes[i];
  if (g->target) b.target = g->target + lo * g->target_numel;
  return b;
}

gp_status gp_batch_source_next(gp_batch_source *s, gp_batch *b, int *end) {
  gp_batch g;
  memset(&g, 0, sizeof g);
  GP_TRY(s->ops->next(s->ctx, &g));
  if (end) *end = g.n == 0;
  *b = s->replicas > 1 ? gp_batch_slice(&g, s->row_bytes, s->replica, s->replicas) : g;
  return GP_OK;
}

gp_status gp_batch_source_seek(gp_batch_source *s, int64_t epoch, int64_t index) {
  return s->ops->seek(s->ctx, epoch, index);
}

void gp_batch_source_tell(const gp_batch_source *s, int64_t *epoch, int64_t *index) {
  s->ops->tell(s->ctx, epoch, index);
}

void gp_batch_source_describe(const gp_batch_source *s, char *buf, size_t n) {
  if (n) buf[0] = 0;
  if (s->ops->describe) s->ops->describe(s->ctx, buf, n);
}

int64_t gp_batch_source_batches(const gp_batch_source *s) {
  return s->ops->batches(s->ctx);
}

void gp_batch_source_stats_get(const gp_batch_source *s, gp_batch_source_stats *out) {
  memset(out, 0, sizeof *out);
  out->workers = -1;
  if (s->ops->stats) s->ops->stats(s->ctx, out);
}
