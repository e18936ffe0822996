/* Contiguous parameter, gradient and statistics buffers for a range of nodes. */
#include "core/train/params.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/io/shards.h"

static void param_name(const gp_layer *l, int i, char *buf, size_t n) {
  snprintf(buf, n, "%s.%s", l->path, l->pdesc[i].name);
}

gp_status gp_params_init(gp_params *p, const gp_model *m, int first, int end, gp_backend *be,
                         uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->be = be;
  p->first_node = first;
  p->end_node = end;
  if (!(p->bind = calloc((size_t)(end > first ? end - first : 1), sizeof *p->bind)))
    return GP_ERR(GP_ERR_NOMEM, "out of host memory for the parameters' bindings");
  for (int i = first; i < end; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    for (int j = 0; j < l->n_params; j++) {
      int64_t n = gp_shape_numel(&l->pdesc[j].shape);
      if (l->pdesc[j].trainable)
        p->n_train += n;
      else
        p->n_buffers += n;
    }
    if (l->type->stats_floats) p->n_stats += l->type->stats_floats(l);
  }
  size_t f = sizeof(float);
  if (p->n_train) {
    GP_TRY(be->alloc(be, (size_t)p->n_train * f, (void **)&p->train));
    GP_TRY(be->alloc(be, (size_t)p->n_train * f, (void **)&p->grad));
    GP_TRY(be->zero(be, p->grad, (size_t)p->n_train * f));
  }
  if (p->n_buffers) GP_TRY(be->alloc(be, (size_t)p->n_buffers * f, (void **)&p->buffers));
  if (p->n_stats) {
    GP_TRY(be->alloc(be, (size_t)p->n_stats * f, (void **)&p->stats));
    GP_TRY(be->zero(be, p->stats, (size_t)p->n_stats * f));
  }
  int64_t ot = 0, ob = 0, os = 0, biggest = 0;
  for (int i = first; i < end; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    gp_layer_bind *b = &p->bind[i - first];
    for (int j = 0; j < l->n_params; j++) {
      int64_t n = gp_shape_numel(&l->pdesc[j].shape);
      if (n > biggest) biggest = n;
      if (l->pdesc[j].trainable) {
        b->param[j] = p->train + ot;
        b->grad[j] = p->grad + ot;
        ot += n;
      } else {
        b->param[j] = p->buffers + ob;
        b->grad[j] = NULL;
        ob += n;
      }
    }
    if (l->type->stats_floats) {
      int64_t n = l->type->stats_floats(l);
      if (n) b->stats = p->stats + os;
      os += n;
    }
  }
  float *host = malloc((size_t)(biggest ? biggest : 1) * f);
  if (!host) return GP_ERR(GP_ERR_NOMEM, "out of host memory initializing parameters");
  gp_status s = GP_OK;
  for (int i = first; i < end && s == GP_OK; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    for (int j = 0; j < l->n_params && s == GP_OK; j++) {
      /* a tied copy starts as the group's first member, on every stage */
      int g = gp_model_tied_group(m, i, j, NULL);
      const gp_param_ref *r0 = g >= 0 ? &m->tied[g].members[0] : NULL;
      if (r0)
        gp_param_init_host(&m->nodes[r0->node].layer, r0->param, seed, host);
      else
        gp_param_init_host(l, j, seed, host);
      s = be->from_host(be, p->bind[i - first].param[j], host,
                        (size_t)gp_shape_numel(&l->pdesc[j].shape) * f);
    }
  }
  free(host);
  return s;
}

void gp_params_free(gp_params *p) {
  if (!p || !p->be) return;
  p->be->free(p->be, p->train);
  p->be->free(p->be, p->grad);
  p->be->free(p->be, p->buffers);
  p->be->free(p->be, p->stats);
  free(p->bind);
  memset(p, 0, sizeof *p);
}

gp_status gp_params_zero_grad(gp_params *p) {
  if (!p->n_train) return GP_OK;
  return p->be->zero(p->be, p->grad, (size_t)p->n_train * sizeof(float));
}

gp_status gp_params_add_to_writer(gp_params *p, const gp_model *m, gp_st_writer *w, float **stage) {
  size_t total = (size_t)(p->n_train + p->n_buffers);
  float *h = malloc((total ? total : 1) * sizeof(float));
  *stage = h;
  if (!h) return GP_ERR(GP_ERR_NOMEM, "out of host memory saving weights");
  size_t off = 0;
  char name[512];
  for (int i = p->first_node; i < p->end_node; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    for (int j = 0; j < l->n_params; j++) {
      size_t n = (size_t)gp_shape_numel(&l->pdesc[j].shape);
      GP_TRY(
          p->be->to_host(p->be, h + off, p->bind[i - p->first_node].param[j], n * sizeof(float)));
      param_name(l, j, name, sizeof name);
      for (size_t e = 0; e < n; e++)
        if (!isfinite(h[off + e]))
          return GP_ERR(GP_ERR_RUNTIME,
                        "%s[%zu] is %s: training diverged (lower the learning rate?); nothing "
                        "written",
                        name, e, isnan(h[off + e]) ? "NaN" : "infinite");
      GP_TRY(gp_st_add(w, name, GP_F32, &l->pdesc[j].shape, h + off));
      off += n;
    }
  }
  return GP_OK;
}

/* A tied parameter missing from a file is read from another member of its group that is there
 * (files written with one name per shared tensor, as safetensors.torch.save_model does). */
static const char *tied_stand_in(const gp_model *m, int node, int param, const gp_shards *f,
                                 char *name, size_t n) {
  int g = gp_model_tied_group(m, node, param, NULL);
  for (int i = 0; g >= 0 && i < m->tied[g].n; i++) {
    const gp_param_ref *r = &m->tied[g].members[i];
    param_name(&m->nodes[r->node].layer, r->param, name, n);
    if (gp_shards_find(f, name)) return name;
  }
  return NULL;
}

gp_status gp_params_check_finite(const char *file_name, const char *tensor, const void *v,
                                 int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float x; /* a file's tensor need not be aligned */
    memcpy(&x, (const char *)v + i * (int64_t)sizeof x, sizeof x);
    if (!isfinite(x))
      return GP_ERR(GP_ERR_DATA,
                    "%s: tensor '%s' holds %s at element %" PRId64 " of %" PRId64
                    " (a run cannot start from values that are not numbers)",
                    file_name, tensor,
                    isnan(x) ? "NaN"
                    : x > 0  ? "Inf"
                             : "-Inf",
                    i, n);
  }
  return GP_OK;
}

gp_status gp_params_load_from(gp_params *p, const gp_model *m, gp_shards *f,
                              const char *file_name) {
  char name[512], a[128], b[128];
  for (int i = p->first_node; i < p->end_node; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    for (int j = 0; j < l->n_params; j++) {
      param_name(l, j, name, sizeof name);
      if (!gp_shards_find(f, name) && !tied_stand_in(m, i, j, f, name, sizeof name))
        param_name(l, j, name, sizeof name);
      const gp_st_entry *e;
      const void *data;
      GP_TRY(gp_shards_get(f, name, &e, &data));
      if (!e) return GP_ERR(GP_ERR_DATA, "%s: has no tensor '%s'", file_name, name);
      if (e->dtype != GP_F32 || !gp_shape_equal(&e->shape, &l->pdesc[j].shape))
        return GP_ERR(GP_ERR_DATA, "%s: tensor '%s' is %s %s, the model needs F32 %s", file_name,
                      e->name, gp_dtype_name(e->dtype), gp_shape_str(&e->shape, a, 128),
                      gp_shape_str(&l->pdesc[j].shape, b, 128));
      GP_TRY(gp_params_check_finite(file_name, e->name, data, gp_shape_numel(&e->shape)));
      GP_TRY(p->be->from_host(p->be, p->bind[i - p->first_node].param[j], data, e->end - e->begin));
    }
  }
  return GP_OK;
}

/* The members of a tied group that a file holds must be equal: they are one parameter. Those of
 * nodes [lo, hi) are compared with the group's first member in the file. */
static gp_status check_tied(const gp_model *m, gp_shards *f, const char *file_name, int lo,
                            int hi) {
  char name[512], first[512];
  for (int g = 0; g < m->n_tied; g++) {
    const gp_st_entry *e0 = NULL;
    const void *d0 = NULL;
    for (int i = 0; i < m->tied[g].n; i++) {
      const gp_param_ref *r = &m->tied[g].members[i];
      param_name(&m->nodes[r->node].layer, r->param, name, sizeof name);
      if (!gp_shards_find(f, name)) continue; /* gp_params_load_from reads another member */
      if (e0 && (r->node < lo || r->node >= hi)) continue; /* another process's to check */
      const gp_st_entry *e;
      const void *d;
      GP_TRY(gp_shards_get(f, name, &e, &d));
      if (!e0) {
        e0 = e;
        d0 = d;
        snprintf(first, sizeof first, "%s", name);
        continue;
      }
      if (e->dtype != e0->dtype || !gp_shape_equal(&e->shape, &e0->shape) ||
          e->end - e->begin != e0->end - e0->begin || memcmp(d, d0, e->end - e->begin) != 0)
        return GP_ERR(GP_ERR_DATA,
                      "%s: tensors '%s' and '%s' are tied (group '%s') but differ in the file",
                      file_name, first, name, m->tied[g].name);
    }
  }
  return GP_OK;
}

gp_status gp_params_check_names(const gp_model *m, gp_shards *f, const char *file_name,
                                const char *ignore_prefix, int node_lo, int node_hi) {
  size_t plen = ignore_prefix ? strlen(ignore_prefix) : 0;
  for (int k = 0; k < gp_shards_count(f); k++) {
    const char *tn = gp_shards_name(f, k);
    if (plen && strncmp(tn, ignore_prefix, plen) == 0) continue;
    if (gp_params_lookup(m, tn, NULL, NULL) != 0)
      return GP_ERR(GP_ERR_DATA, "%s: tensor '%s' is not a parameter of this model", file_name, tn);
  }
  return check_tied(m, f, file_name, node_lo, node_hi);
}

int gp_params_lookup(const gp_model *m, const char *name, int *node, int *param) {
  for (int i = 0; i < m->n_nodes; i++) {
    const gp_layer *l = &m->nodes[i].layer;
    size_t pl = strlen(l->path);
    if (strncmp(name, l->path, pl) != 0 || name[pl] != '.') continue;
    for (int j = 0; j < l->n_params; j++)
      if (strcmp(name + pl + 1, l->pdesc[j].name) == 0) {
        if (node) *node = i;
        if (param) *param = j;
        return 0;
      }
  }
  return -1;
}
