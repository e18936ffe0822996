/* Writes docs/layers.md from the layers' own settings tables (the registry, linked as the
 * programs link it), or checks that the file is what they make. Usage:
 *   layers_doc                 the page on standard output
 *   layers_doc -o FILE         the page into FILE (ninja -C build layers-doc does this)
 *   layers_doc --check FILE    exit 1, naming the first differing line, when FILE is stale */
#include <stdio.h>
#include <string.h>

#include "core/layer.h"
#include "core/strbuf.h"

#define REGENERATE "ninja -C build layers-doc (or build/tests/layers/layers_doc -o docs/layers.md)"

static const char *inputs(const gp_layer_type *t, char *buf, size_t n) {
  if (t->min_inputs == t->max_inputs)
    snprintf(buf, n, "%d", t->min_inputs);
  else
    snprintf(buf, n, "%d to %d", t->min_inputs, t->max_inputs);
  return buf;
}

static void page(gp_strbuf *b) {
  char in[32];
  const char *const *names = gp_layer_type_names();
  gp_strbuf_printf(b, "# Layer types and their settings\n\n");
  gp_strbuf_printf(b,
                   "<!-- Generated from the layers' settings tables (layers/*.c) by "
                   "tests/layers/layers_doc.c; do not edit. Regenerate: %s. -->\n\n",
                   REGENERATE);
  gp_strbuf_printf(
      b, "Each entry of `layers:` (or `loss:`) names its layer type with `type:`; its other keys "
         "are that type's settings, below. The structural keys `name`, `from` and `repeat` go "
         "with every type ([model-format.md](model-format.md)). A key the type does not have is "
         "an error that suggests the nearest one or lists the type's keys.\n\n");
  gp_strbuf_printf(
      b, "Ranges: `[a, b]` includes both ends, `(a, b)` neither, `[a, b)` only `a`; `> 0` "
         "and `>= 0` have no upper bound. Numbers are checked as the layers compute with them, "
         "in float32: a value whose float32 is an excluded end is refused (`eps: 1e-50` is 0, "
         "`p: 0.99999999999` is 1), and so is one beyond float32's range (about 3.4e38). A "
         "pair of ints (`kernel: [3, 5]`) may be written as one int for both (`kernel: 3`).\n\n");
  gp_strbuf_printf(b, "| type | inputs | what |\n| --- | --- | --- |\n");
  for (int i = 0; names[i]; i++) {
    const gp_layer_type *t = gp_layer_type_find(names[i]);
    gp_strbuf_printf(b, "| [`%s`](#%s) | %s | %s%s |\n", t->name, t->name, inputs(t, in, sizeof in),
                     t->doc, t->is_loss ? " (a loss: it goes under `loss:`)" : "");
  }
  for (int i = 0; names[i]; i++) {
    const gp_layer_type *t = gp_layer_type_find(names[i]);
    gp_strbuf_printf(b, "\n## %s\n\n`%s`: %s. Inputs: %s.\n\n", t->name, t->name, t->doc,
                     inputs(t, in, sizeof in));
    if (!t->n_settings) {
      gp_strbuf_printf(b, "No settings.\n");
      continue;
    }
    gp_strbuf_printf(b, "| key | type | default | range | what |\n"
                        "| --- | --- | --- | --- | --- |\n");
    for (int j = 0; j < t->n_settings; j++) {
      const gp_setting *s = &t->settings[j];
      char ty[128], dflt[64], range[64];
      gp_setting_type_str(s, ty, sizeof ty);
      gp_setting_default_str(s, dflt, sizeof dflt);
      gp_setting_range_str(s, range, sizeof range);
      gp_strbuf_printf(b, "| `%s` | %s | %s | %s | %s |\n", s->key, ty, dflt, range, s->doc);
    }
  }
}

/* The file's text in b (NUL-terminated); 0 when it cannot be read. */
static int read_file(const char *path, gp_strbuf *b) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    gp_strbuf_put(b, chunk, n);
  const int ok = !ferror(f);
  fclose(f);
  gp_strbuf_put(b, "", 0);
  return ok && !b->oom;
}

static int write_page(const char *path, const char *want) {
  FILE *f = fopen(path, "wb");
  int ok = f && fputs(want, f) >= 0;
  if (f && fclose(f) != 0) ok = 0;
  if (!ok) fprintf(stderr, "layers_doc: cannot write %s\n", path);
  return ok ? 0 : 1;
}

static int check_page(const char *path, const char *want) {
  gp_strbuf file = {0};
  if (!read_file(path, &file) || !file.p) {
    gp_strbuf_free(&file);
    fprintf(stderr, "layers_doc: cannot read %s; write it: %s\n", path, REGENERATE);
    return 1;
  }
  int line = 1;
  const char *h = file.p, *w = want;
  for (; *h && *w && *h == *w; h++, w++)
    line += *h == '\n';
  const int same = *h == *w && strlen(file.p) == file.n; /* a NUL inside is a difference */
  gp_strbuf_free(&file);
  if (!same) {
    fprintf(stderr,
            "layers_doc: %s is out of date (from line %d) with the layers' settings tables; "
            "regenerate it: %s\n",
            path, line, REGENERATE);
    return 1;
  }
  printf("layers_doc: %s is up to date\n", path);
  return 0;
}

int main(int argc, char **argv) {
  gp_strbuf b = {0};
  int rc = 2;
  page(&b);
  if (b.oom || !b.p) {
    fprintf(stderr, "layers_doc: out of memory\n");
    rc = 1;
  } else if (argc == 1) {
    rc = fputs(b.p, stdout) >= 0 ? 0 : 1;
  } else if (argc == 3 && !strcmp(argv[1], "-o")) {
    rc = write_page(argv[2], b.p);
  } else if (argc == 3 && !strcmp(argv[1], "--check")) {
    rc = check_page(argv[2], b.p);
  } else {
    fprintf(stderr, "usage: layers_doc [-o FILE | --check FILE]\n");
  }
  gp_strbuf_free(&b);
  return rc;
}
