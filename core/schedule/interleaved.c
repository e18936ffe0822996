/* Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM): each of the K stages holds V model
 * chunks (stage s: virtual stages s, s + K, ..., s + (V - 1) K), so a micro-batch passes every
 * stage V times and the fill and drain take 1/V of 1F1B's. Stage s forwards (K - s - 1) 2 +
 * (V - 1) K micro-batch chunks ahead (all of them when M = K), then alternates a forward and a
 * backward, then drains. Micro-batches go in groups of K: the k-th forward of a stage is chunk
 * (k / K) mod V of micro-batch (k / (K V)) K + k mod K; backwards the same with the chunks in
 * reverse. M must be a multiple of K. */
#include "core/schedule/lists.h"

static gp_action nth(int K, int V, int k, int forward) {
  int group = K * V, chunk = (k % group) / K;
  return (gp_action){.kind = forward ? GP_A_FORWARD : GP_A_BACKWARD,
                     .micro = (k / group) * K + k % K,
                     .chunk = forward ? chunk : V - 1 - chunk};
}

void gp_interleaved_fill(int K, int M, int V, gp_action **lists, int *n_actions) {
  const int total = M * V;
  for (int s = 0; s < K; s++) {
    int warm = M == K ? total : (K - s - 1) * 2 + (V - 1) * K, n = 0;
    if (warm > total) warm = total;
    for (int k = 0; k < warm; k++)
      lists[s][n++] = nth(K, V, k, 1);
    for (int i = 0; i < total - warm; i++) {
      lists[s][n++] = nth(K, V, warm + i, 1);
      lists[s][n++] = nth(K, V, i, 0);
    }
    for (int k = total - warm; k < total; k++)
      lists[s][n++] = nth(K, V, k, 0);
    lists[s][n++] = (gp_action){.kind = GP_A_STEP};
    n_actions[s] = n;
  }
}
