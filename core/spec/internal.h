/* Shared by the spec loader's files (not a public interface): the resolved YAML tree (anchors,
 * aliases and merge keys applied, every node located), the load context and helpers. */
#ifndef GP_SPEC_INTERNAL_H
#define GP_SPEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/spec/cfg.h"
#include "core/spec/spec.h"

/* Nesting deeper than this (YAML levels, block-in-block) is refused: the walks are recursive. */
#define GP_SP_MAX_DEPTH 64
/* Nodes read while expanding blocks (substitution, settings), over all instances. */
#define GP_SP_MAX_EXPAND_READS (4 * (int64_t)GP_SPEC_MAX_YAML_NODES)
/* Keys of one layer entry, block call or section (lookups in them are linear). */
#define GP_SP_MAX_KEYS 256
/* A model file larger than this is refused before parsing. */
#define GP_SP_MAX_FILE_BYTES ((size_t)16 << 20)

typedef enum gp_ykind { GP_Y_SCALAR, GP_Y_SEQ, GP_Y_MAP } gp_ykind;

typedef struct gp_ynode gp_ynode;

typedef struct gp_ypair {
  const char *key;
  int line, col; /* the key's position */
  gp_ynode *val;
} gp_ypair;

/* Nodes are shared (an alias is the node it names), so they are never changed in place:
 * overrides and substitution copy what they change. */
struct gp_ynode {
  gp_ykind kind;
  int line, col;
  int plain;     /* scalar written without quotes (only then is `~` a null) */
  int n;         /* items or pairs */
  const char *s; /* scalar text */
  gp_ynode **items;
  gp_ypair *pairs;
  int64_t size; /* nodes in the expanded subtree, aliases counted each time */
  int alias;    /* an alias's use: line, col are the alias's; its children keep the anchor's */
};

/* A bump allocator with stack marks, for everything a load builds that the model does not
 * keep. */
typedef struct gp_sp_chunk gp_sp_chunk;
typedef struct gp_sp_arena {
  gp_sp_chunk *head;
} gp_sp_arena;
typedef struct gp_sp_mark {
  gp_sp_chunk *chunk;
  size_t used;
} gp_sp_mark;

void *gp_sp_alloc(gp_sp_arena *a, size_t n); /* zeroed, 16-aligned; NULL when out of memory */
char *gp_sp_strdup(gp_sp_arena *a, const char *s);
gp_sp_mark gp_sp_get_mark(const gp_sp_arena *a);
void gp_sp_release(gp_sp_arena *a, gp_sp_mark m);
void gp_sp_arena_free(gp_sp_arena *a);

/* A string -> int hash map (names, paths, keys); keys are not copied. */
typedef struct gp_sp_map {
  const char **key;
  int *val;
  size_t cap, n;
} gp_sp_map;
/* 1 if key was present (*val_out = its value, not replaced), 0 if inserted, -1 on no memory. */
int gp_sp_map_put(gp_sp_map *m, const char *key, int val, int *val_out);
int gp_sp_map_set(gp_sp_map *m, const char *key, int val); /* insert or replace; -1: no memory */
int gp_sp_map_get(const gp_sp_map *m, const char *key, int *val); /* 1 if present */
void gp_sp_map_free(gp_sp_map *m);

/* Parameters of one block instance. */
typedef struct gp_sp_env {
  int n;
  const char **names;
  const gp_ynode **vals;
  const char *block;      /* for messages */
  const gp_ynode *params; /* the block's params: mapping (all of them), or NULL */
} gp_sp_env;

typedef struct gp_sp_block gp_sp_block;
/* A block definition (blocks.c reads it, expand.c instantiates it). */
struct gp_sp_block {
  const char *name;
  int line, col;
  const gp_ynode *params; /* mapping or NULL */
  const gp_ynode *layers;
  const char *inputs[GP_MAX_INPUTS];
  int n_inputs;
  const gp_ynode *output; /* scalar or NULL */
  int used;               /* expanded at least once (else check_unused_blocks reads it) */
};

/* Where a --set put its value: an error reported there names the override. A value under a
 * key the --set added takes its mapping's place, where other errors are reported too, so those
 * name the override only when they name the key. */
typedef struct gp_sp_set {
  int line, col;
  const gp_override *ov;
  const char *added_key; /* NULL: the value replaced one written in the file */
} gp_sp_set;

typedef struct gp_sp_ctx {
  const char *file;
  gp_sp_set *sets; /* one per --set applied, in order (room for all of them) */
  int n_sets;
  gp_sp_arena perm; /* lives for the whole load */
  gp_sp_arena tmp;  /* stack discipline: one entry's substituted copy at a time per level */
  void *yaml_doc;   /* the libyaml document the tree's strings point into */
  int64_t reads;    /* expansion reads against GP_SP_MAX_EXPAND_READS */
  gp_sp_block *blocks;
  int n_blocks;
  gp_sp_map block_ix;                        /* name -> index in blocks */
  const gp_sp_block *stack[GP_SP_MAX_DEPTH]; /* blocks being expanded, outermost first */
  int depth;
  gp_model *m;
  int node_cap;  /* capacity of m->nodes */
  int unit_cap;  /* capacity of m->unit_names (unit_first has one more) */
  int *unit_loc; /* per unit: line and column of its entry (of its name: where given) */
} gp_sp_ctx;

/* ---- errors (GP_ERR_SPEC "file:line:col: what") ---- */
gp_status gp_sp_err(const gp_sp_ctx *c, int line, int col, const char *fmt, ...) GP_PRINTF(4, 5);
gp_status gp_sp_nomem(void);
/* Appends text to the current error message (for "(in block 'b' used at line 9)"). */
gp_status gp_sp_err_append(gp_status code, const char *fmt, ...) GP_PRINTF(2, 3);

/* ---- tree (ytree.c) ---- */
/* Parses text (len bytes; a NUL inside is an error) into the resolved tree. */
gp_status gp_sp_tree_load(gp_sp_ctx *c, const char *text, size_t len, gp_ynode **root);
void gp_sp_tree_free(gp_sp_ctx *c);
const gp_ypair *gp_sp_get(const gp_ynode *map, const char *key);
int gp_sp_is_null(const gp_ynode *n);
const char *gp_sp_kind_name(const gp_ynode *n); /* "a mapping", "a list", "a value" */
/* Every key of map must be in allowed (NULL-terminated): else "unknown key 'x' for <what>;
 * did you mean 'y'?". */
gp_status gp_sp_check_keys(const gp_sp_ctx *c, const gp_ynode *map, const char *const *allowed,
                           const char *what);
/* A map that must be a mapping: else "<what> must be a mapping, got a list". */
gp_status gp_sp_want(const gp_sp_ctx *c, const gp_ynode *n, gp_ykind kind, const char *what);
/* A gp_cfg of map's scalar and list-of-scalar values; keys in skip are left out. */
gp_status gp_sp_cfg_of(gp_sp_ctx *c, const gp_ynode *map, const char *const *skip, gp_cfg **out);
/* Names: letters, digits, '_' and '-'; 1..63 characters. */
gp_status gp_sp_check_name(const gp_sp_ctx *c, const gp_ynode *n, const char *what);

/* ---- overrides (override.c): GP_ERR_USAGE "--set path=value: ..." ---- */
gp_status gp_sp_override(gp_sp_ctx *c, gp_ynode **root, const gp_override *ov);

/* ---- block parameters (expr.c) ---- */
/* n with `$p` and `${expr}` scalars replaced from env (NULL: no parameters in scope); *out
 * is n itself when nothing changed. */
gp_status gp_sp_subst(gp_sp_ctx *c, const gp_ynode *n, const gp_sp_env *env, const gp_ynode **out);
/* Counts one node read during expansion against GP_SP_MAX_EXPAND_READS. */
gp_status gp_sp_count_read(gp_sp_ctx *c, const gp_ynode *at);

/* ---- the graph (expand.c) and sections (sections.c) ---- */
gp_status gp_sp_inputs(gp_sp_ctx *c, const gp_ynode *inputs, gp_model *m);
gp_status gp_sp_expand(gp_sp_ctx *c, const gp_ynode *root, gp_model *m);
gp_status gp_sp_sections(gp_sp_ctx *c, const gp_ynode *root, gp_model *m);
/* The tied: section (tied.c), after the graph: fills m->tied and counts each group once in
 * m->n_params. */
gp_status gp_sp_tied(gp_sp_ctx *c, const gp_ynode *root, gp_model *m);

/* The blocks: section (blocks.c): every definition read and checked into c->blocks. */
gp_status gp_sp_parse_blocks(gp_sp_ctx *c, const gp_ynode *root);
/* The keys of an entry that instantiates a block (besides the block's params). */
extern const char *const gp_sp_block_entry_keys[];

#endif
