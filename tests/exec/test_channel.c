/* Channels on their own, on CPU backends: each kind delivers the value into the reader's memory
 * (in place only where shared), writes the gradient into the buffer the producer posted (zeros
 * where none reached it), and counts values, gradients and releases in the right stage's inbox. */
#include <pthread.h>
#include <string.h>

#include "core/exec/channel.h"
#include "core/schedule/schedule.h"
#include "tests/support/check.h"

static int failures, passes;

enum { M = 3, N = 8 };

typedef struct end {
  gp_backend *be;
  gp_event *ev[M];
  gp_chan_count box[M];
  pthread_cond_t cv;
  gp_arena arena;
} end;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void end_init(end *e) {
  memset(e, 0, sizeof *e);
  CHECK(gp_cpu_backend_create(1, &e->be) == GP_OK, "backend");
  for (int m = 0; m < M; m++)
    CHECK(e->be->event_create(e->be, &e->ev[m]) == GP_OK, "event");
  pthread_cond_init(&e->cv, NULL);
  gp_arena_init(&e->arena, e->be, 0);
}

static void end_free(end *e) {
  for (int m = 0; m < M; m++)
    e->be->event_destroy(e->be, e->ev[m]);
  gp_arena_free(&e->arena);
  gp_backend_destroy(e->be);
  pthread_cond_destroy(&e->cv);
}

static gp_chan_inbox inbox(end *e) {
  return (gp_chan_inbox){&mu, &e->cv, e->box};
}

static void node_edge(gp_chan_kind kind) {
  end p, r;
  end_init(&p);
  end_init(&r);
  gp_chan c;
  CHECK(gp_chan_init(&c, kind, 5, M, p.be, p.ev, inbox(&p), r.be, r.ev, inbox(&r)) == GP_OK,
        "init %s", gp_chan_kind_name(kind));
  float val[N], grad_to[N], g[N];
  for (int i = 0; i < N; i++) {
    val[i] = (float)i + 0.5f;
    g[i] = -(float)i;
    grad_to[i] = 99;
  }
  gp_shape sh = {.ndim = 2, .d = {2, 4}};
  gp_tensor v = {val, sh, GP_F32, -1};
  CHECK(gp_chan_send(&c, 1, &v, grad_to) == GP_OK, "send");
  CHECK(atomic_load(&r.box[1].values) == 1 && atomic_load(&r.box[0].values) == 0,
        "%s: the value is counted for the reader's micro-batch 1", gp_chan_kind_name(kind));
  gp_tensor got;
  int pulled = 0;
  CHECK(gp_chan_recv(&c, 1, &r.arena, &got, &pulled) == GP_OK, "recv");
  CHECK(memcmp(got.data, val, sizeof val) == 0, "%s: the value arrives", gp_chan_kind_name(kind));
  if (kind == GP_CHAN_SHARED) {
    CHECK(got.data == val && !pulled, "shared: read in place");
  } else {
    CHECK(got.data != val && pulled, "copy: into the reader's own memory");
    val[0] = 1234; /* the producer reuses its memory: the reader's copy stays */
    CHECK(((float *)got.data)[0] == 0.5f, "copy: the reader's tensor is its own");
  }
  CHECK(gp_chan_wants_grad(&c, 1) && !gp_chan_wants_grad(&c, 0), "a gradient is wanted for 1 only");
  gp_tensor gt = {g, sh, GP_F32, -1};
  int pushed = 0;
  CHECK(gp_chan_send_grad(&c, 1, &gt, &r.arena, &pushed) == GP_OK, "send_grad");
  CHECK(pushed == (kind == GP_CHAN_COPY), "%s: pushed by a copy only", gp_chan_kind_name(kind));
  gp_chan_post_grad(&c, 1);
  CHECK(atomic_load(&p.box[1].grads) == 1 && atomic_load(&r.box[1].grads) == 0,
        "the gradient is counted for the producer");
  float *back = NULL;
  CHECK(gp_chan_grad(&c, 1, &back) == GP_OK && back == grad_to, "the producer's own buffer");
  CHECK(memcmp(grad_to, g, sizeof g) == 0, "%s: the gradient arrives", gp_chan_kind_name(kind));
  /* no gradient reached the input: zeros */
  gp_tensor none = {NULL, sh, GP_F32, -1};
  CHECK(gp_chan_send(&c, 2, &v, grad_to) == GP_OK, "send 2");
  CHECK(gp_chan_send_grad(&c, 2, &none, &r.arena, &pushed) == GP_OK, "zeros");
  float zero[N] = {0};
  CHECK(memcmp(grad_to, zero, sizeof zero) == 0, "%s: zeros for no gradient",
        gp_chan_kind_name(kind));
  CHECK(atomic_load(&p.box[1].released) == 0, "not released before the reader says so");
  gp_chan_release(&c, 1);
  CHECK(atomic_load(&p.box[1].released) == 1 && atomic_load(&p.box[2].released) == 0,
        "the release is counted for the producer's micro-batch 1");
  gp_chan_free(&c);
  end_free(&p);
  end_free(&r);
}

static void input_edge(gp_chan_kind kind) {
  end r;
  end_init(&r);
  gp_chan c;
  int32_t rows[3 * 4];
  for (int i = 0; i < 12; i++)
    rows[i] = i;
  CHECK(gp_chan_init_input(&c, kind, 0, M, 4 * sizeof(int32_t), r.be) == GP_OK, "init input");
  CHECK(gp_chan_input_begin(&c, rows, 3) == GP_OK, "begin");
  gp_shape sh = {.ndim = 2, .d = {2, 4}};
  gp_tensor got;
  int queued = 0;
  CHECK(gp_chan_input_get(&c, 1, 2, &sh, GP_I32, &r.arena, &got, &queued) == GP_OK, "get");
  CHECK(memcmp(got.data, rows + 4, 8 * sizeof(int32_t)) == 0, "%s: rows 1 and 2",
        gp_chan_kind_name(kind));
  CHECK((got.data == rows + 4) == (kind == GP_CHAN_HOST) && queued == (kind == GP_CHAN_STAGED),
        "%s: in place only when read from the host", gp_chan_kind_name(kind));
  CHECK(gp_chan_input_end(&c) == GP_OK, "end");
  CHECK(gp_chan_input_begin(&c, NULL, 3) != GP_OK, "a batch without the input is refused");
  gp_chan_free(&c);
  end_free(&r);
}

/* Which kind an edge between processes takes: NCCL only between two CUDA stages, with NCCL on
 * and the two stages' micro-batches in the same order; MPI otherwise. */
static void cross_kinds(void) {
  CHECK(gp_chan_cross_kind("cuda:0", "cuda:1", 1, 1) == GP_CHAN_NCCL, "CUDA to CUDA: NCCL");
  CHECK(gp_chan_cross_kind("cuda:0", "cuda:0", 1, 1) == GP_CHAN_NCCL, "one GPU shared: NCCL");
  CHECK(gp_chan_cross_kind("cuda", "cuda", 1, 1) == GP_CHAN_NCCL, "a plan's bare cuda: NCCL");
  CHECK(gp_chan_cross_kind("cpu", "cuda:0", 1, 1) == GP_CHAN_NET, "CPU to CUDA: MPI");
  CHECK(gp_chan_cross_kind("cuda:0", "cpu", 1, 1) == GP_CHAN_NET, "CUDA to CPU: MPI");
  CHECK(gp_chan_cross_kind("cpu", "cpu", 1, 1) == GP_CHAN_NET, "CPU to CPU: MPI");
  CHECK(gp_chan_cross_kind("cuda:0", "cuda:1", 0, 1) == GP_CHAN_NET, "GP_NCCL=0: MPI");
  CHECK(gp_chan_cross_kind("cuda:0", "cuda:1", 1, 0) == GP_CHAN_NET, "another order: MPI");
  CHECK(strcmp(gp_chan_kind_name(GP_CHAN_NCCL), "nccl") == 0, "the kind's name");
  /* the schedules gpipe builds keep every pair of stages in step, so NCCL is chosen */
  for (int kind = GP_SCHED_GPIPE; kind <= GP_SCHED_1F1B; kind++)
    for (int remat = GP_REMAT_ALWAYS; remat <= GP_REMAT_NEVER; remat++) {
      gp_schedule sc;
      CHECK(gp_schedule_build(kind, remat, 4, 6, &sc) == GP_OK, "schedule");
      int all = 1;
      for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
          all &= gp_chan_same_order(&sc, a, b);
      CHECK(all, "schedule %d, remat %d: every pair in the same order", kind, remat);
      /* two backwards swapped on stage 2: its pairs are not */
      gp_action *x = sc.actions[2];
      int b1 = -1, b2 = -1;
      for (int i = 0; i < sc.n_actions[2]; i++)
        if (x[i].kind == GP_A_BACKWARD) b1 < 0 ? (b1 = i) : (b2 = i);
      int t = x[b1].micro;
      x[b1].micro = x[b2].micro;
      x[b2].micro = t;
      CHECK(!gp_chan_same_order(&sc, 1, 2) && !gp_chan_same_order(&sc, 2, 3) &&
                gp_chan_same_order(&sc, 1, 3),
            "schedule %d: a stage whose backwards run in another order", kind);
      gp_schedule_free(&sc);
    }
}

int main(void) {
  cross_kinds();
  node_edge(GP_CHAN_SHARED);
  node_edge(GP_CHAN_COPY);
  input_edge(GP_CHAN_HOST);
  input_edge(GP_CHAN_STAGED);
  gp_chan c;
  end e;
  end_init(&e);
  CHECK(gp_chan_init_input(&c, GP_CHAN_COPY, 0, M, 4, e.be) != GP_OK, "a model input by copy");
  end_free(&e);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
