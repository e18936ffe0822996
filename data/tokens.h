/* Translation data: token-id shards as `spm_encode --output_format=id` writes them, read into
 * memory, and fairseq-style token-budget batches of (source, target) pairs with per-replica
 * sharding and an exact (epoch, batch) resume position.
 *
 * Memory: the corpus is held as int32, one per token plus one EOS per sentence (about 4 bytes
 * per token; the Bible train split, 2M tokens: ~8 MB), plus 24 bytes per pair (offsets, line);
 * each gp_tokens iterator adds 16 to 32 bytes per pair and the batch buffers (22 bytes per
 * max_tokens). Iterators borrow the corpus, so replicas in one process share one copy. */
#ifndef GP_TOKENS_H
#define GP_TOKENS_H

#include <stdint.h>

#include "core/status.h"

typedef struct gp_tokens_opts {
  /* Reading. */
  int32_t vocab;   /* every id must be < vocab (the line count of spm.vocab); required */
  int32_t pad_id;  /* fills batches after each sentence (default 0) */
  int32_t bos_id;  /* starts tgt_in (default 2) */
  int32_t eos_id;  /* appended to every sentence, source and target (default 3) */
  int32_t max_len; /* longest sentence kept, EOS included; 0 = only max_tokens limits it */
  int skip_long;   /* 1 (default): longer pairs are skipped and counted; 0: GP_ERR_DATA */
  /* Batching. */
  int64_t max_tokens;   /* B * max(S, T) <= max_tokens for every batch (default 4096) */
  int64_t max_batch;    /* at most this many pairs a batch; 0 = no limit (default) */
  int32_t pad_multiple; /* S and T are rounded up to a multiple of this (default 1) */
  int train;            /* 1: shuffled per (seed, epoch), endless; 0: in order, one pass */
  uint64_t seed;
  int replica, replicas; /* this replica r of R (default 0 of 1); same seed on all of them */
} gp_tokens_opts;

/* The defaults above: ids of the model scripts/bible-corpus.sh trains (spm_train --pad_id=0
 * --unk_id=1 --bos_id=2 --eos_id=3). SentencePiece's own defaults are unk 0, bos 1, eos 2
 * and no pad; for such a model set bos_id 1, eos_id 2 and pad_id to any id (0, <unk>, is
 * safe: padded positions are masked). vocab stays 0 and must be set. */
void gp_tokens_opts_default(gp_tokens_opts *o);

/* GP_ERR_USAGE naming the first option out of range (both functions below check). */
gp_status gp_tokens_opts_check(const gp_tokens_opts *o);

/* ---- The corpus ---- */

typedef struct gp_token_corpus {
  int64_t pairs;                  /* pairs kept */
  int32_t *src, *tgt;             /* all sentences back to back, each ending with eos_id */
  int64_t *src_off, *tgt_off;     /* [pairs + 1]: pair i is src[src_off[i] .. src_off[i+1]) */
  int64_t *line;                  /* [pairs]: its line in the file(s), from 1 */
  int64_t lines;                  /* lines read */
  int64_t skipped;                /* pairs dropped as too long (see gp_token_corpus_read) */
  int64_t src_tokens, tgt_tokens; /* ids kept, EOS included */
  int32_t max_src, max_tgt;       /* longest kept sentence, EOS included */
} gp_token_corpus;

/* Reads a source and a target file aligned line by line, or (tgt_path NULL) one TSV file of
 * "source ids TAB target ids" lines. Either may be gzip (any number of members) or plain.
 * A line is decimal ids separated by single spaces, nothing else (an empty line is an empty
 * sentence); the last line may lack its newline. A pair is too long when a side (EOS
 * included) exceeds max_len, or when the pair alone, padded, exceeds max_tokens; it is then
 * skipped and counted, or refused when skip_long is 0. Errors are GP_ERR_DATA
 * "FILE:LINE:COL: ..." (COL counts bytes from 1): a character that is not a digit, a
 * misplaced space or TAB, an id >= vocab (with its value), line counts that differ (naming
 * both files and the first unpaired line), an empty file, gzip data cut short or corrupt;
 * GP_ERR_DATA "FILE: cannot open: ..." for a missing file; GP_ERR_USAGE for bad options. */
gp_status gp_token_corpus_read(const char *src_path, const char *tgt_path, const gp_tokens_opts *o,
                               gp_token_corpus *out);
void gp_token_corpus_free(gp_token_corpus *c); /* NULL or zeroed: no-op */

/* ---- Batches ---- */

typedef struct gp_tokens_batch {
  int64_t B, S, T;                /* pairs, padded source length, padded target length */
  int32_t *src;                   /* [B][S]: source ids, EOS, then pad_id */
  int32_t *tgt_in;                /* [B][T]: bos_id, target ids (no EOS), then pad_id */
  int32_t *tgt_out;               /* [B][T]: target ids, eos_id, then pad_id (the labels) */
  uint8_t *src_mask, *tgt_mask;   /* [B][S], [B][T]: 1 = a real token, 0 = padding */
  int64_t *pair;                  /* [B]: index of each pair in the corpus */
  int64_t src_tokens, tgt_tokens; /* real tokens: the sums of the masks */
  int64_t cap_;                   /* allocated elements (internal) */
} gp_tokens_batch;

typedef struct gp_tokens gp_tokens;

/* An iterator over c (borrowed: it must outlive the iterator). Pairs are ordered by length
 * (longest side, then source, then target length) and cut greedily into batches that stay
 * within max_tokens and max_batch. Train: each epoch the pairs of equal lengths are shuffled
 * among themselves and the batch order is shuffled, both from (seed, epoch) only. Eval: the
 * sorted order, every epoch the same. Replica r of R takes the global batches r, r + R, ...;
 * every replica gets the same count: train drops the last (nb % R) batches of each epoch's
 * shuffled order (a different few each epoch), eval pads the last round with empty batches
 * (B = 0) so that every pair is seen exactly once. GP_ERR_USAGE for bad options, a pair
 * that cannot fit max_tokens, or a train epoch with fewer batches than replicas. */
gp_status gp_tokens_open(const gp_token_corpus *c, const gp_tokens_opts *o, gp_tokens **out);
void gp_tokens_free(gp_tokens *t);

int64_t gp_tokens_batches(const gp_tokens *t);       /* this replica's batches per epoch */
int64_t gp_tokens_total_batches(const gp_tokens *t); /* all replicas', before dropping */

/* Fills b (buffers grown as needed; zero it before the first call) with the next batch.
 * Train: *more is always 1; after the last batch of an epoch the next epoch begins.
 * Eval: *more = 0 (and b->B = 0) once the epoch is done; seek to (epoch, 0) to go again. */
gp_status gp_tokens_next(gp_tokens *t, gp_tokens_batch *b, int *more);
void gp_tokens_batch_free(gp_tokens_batch *b);

/* Position for checkpoints: epoch (from 0) and the index of this replica's next batch in it.
 * Seeking to a saved position gives exactly the batches that followed it. index may be
 * gp_tokens_batches() (the end of that epoch). */
void gp_tokens_tell(const gp_tokens *t, int64_t *epoch, int64_t *index);
gp_status gp_tokens_seek(gp_tokens *t, int64_t epoch, int64_t index);

#endif
