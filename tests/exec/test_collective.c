/* The stages' collectives as threads: sums come out in member order whatever the order of
 * arrival (values chosen so that order shows in the bits), every member gets them, a member
 * that never arrives ends the others' wait by the watchdog, and a failure elsewhere by the
 * flag. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "core/exec/collective.h"
#include "tests/support/check.h"

static int failures, passes;

enum { K = 3 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int failed;
static gp_coll coll;

typedef struct arg {
  int member;
  useconds_t delay;
  double v[2];
  gp_status s;
} arg;

static void *member(void *p) {
  arg *a = p;
  usleep(a->delay);
  a->s = coll.ops->sum(&coll, a->member, a->v, 2);
  if (a->s == GP_OK) a->s = coll.ops->barrier(&coll, a->member);
  return NULL;
}

static void run(const useconds_t *delay) {
  pthread_t t[K];
  arg a[K];
  const double v0[K] = {1e16, 1, -1e16};
  for (int k = 0; k < K; k++) {
    a[k] = (arg){k, delay[k], {v0[k], (double)k}, GP_OK};
    pthread_create(&t[k], NULL, member, &a[k]);
  }
  for (int k = 0; k < K; k++)
    pthread_join(t[k], NULL);
  for (int k = 0; k < K; k++) {
    CHECK(a[k].s == GP_OK, "member %d", k);
    /* member order: (1e16 + 1) - 1e16 = 0 in doubles; 1e16 - 1e16 + 1 would be 1 */
    CHECK(a[k].v[0] == 0.0 && a[k].v[1] == 3.0, "member %d got %g, %g", k, a[k].v[0], a[k].v[1]);
  }
}

int main(void) {
  CHECK(gp_coll_threads_init(&coll, K, &mu, &cv, &failed, 0.5, NULL) == GP_OK, "init");
  const useconds_t in_order[K] = {0, 20000, 40000}, reversed[K] = {40000, 20000, 0},
                   middle_last[K] = {0, 40000, 20000};
  run(in_order);
  run(reversed);
  run(middle_last);
  /* a member that never comes: the others stop at the watchdog, with an error */
  pthread_t t[K - 1];
  arg a[K - 1];
  for (int k = 0; k < K - 1; k++) {
    a[k] = (arg){k, 0, {0, 0}, GP_OK};
    pthread_create(&t[k], NULL, member, &a[k]);
  }
  for (int k = 0; k < K - 1; k++) {
    pthread_join(t[k], NULL);
    CHECK(a[k].s != GP_OK, "member %d without the last one", k);
  }
  /* a failure elsewhere: the waiting members stop at once */
  pthread_mutex_lock(&mu);
  gp_coll_reset(&coll);
  pthread_mutex_unlock(&mu);
  arg b = {0, 0, {0, 0}, GP_OK};
  pthread_t tb;
  pthread_create(&tb, NULL, member, &b);
  usleep(50000);
  pthread_mutex_lock(&mu);
  failed = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  pthread_join(tb, NULL);
  CHECK(b.s != GP_OK, "a failure ends the wait");
  CHECK(coll.waited[0] > 0, "the wait is counted");
  int32_t src[3] = {7, 8, 9}, dst[3] = {0};
  CHECK(coll.ops->to_main(&coll, 2, dst, src, sizeof src) == GP_OK &&
            memcmp(src, dst, sizeof src) == 0,
        "to_main");
  gp_coll_free(&coll);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
