/* WebDataset shards and ImageFolder trees made on the fly: grouping members into samples
 * (pax headers before every member as Python's tarfile writes them, a GNU long name, a
 * directory member, ignored extensions, upper-case extensions, .tar and .tar.gz in two gzip
 * members), image bytes byte for byte and labels; damaged shards (no label, bad label, second
 * image, member cut short, bad checksum, oversized member) named by shard and member; label
 * range checks; shard lists (braces, @file, folders, refusals); classes.txt; ImageFolder order
 * and errors. With an argument "python3-path": a shard written by Python's tarfile. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/imagefolder.h"
#include "data/wds.h"
#include "tar_fixture.h"
#include "tests/support/check.h"

static int failures, passes;
static char root[256];

/* A member as Python's tarfile (PAX format, float mtime) writes it: an 'x' header first. */
static void pax_member(buf *b, const char *name, const void *d, size_t n, int pax) {
  if (pax) {
    buf x = {0};
    pax_record(&x, "mtime", "1700000000.123456");
    pax_record(&x, "path", name);
    header(b, "././@PaxHeader", x.n, 'x', 0, 0);
    put(b, x.p, x.n);
    pad512(b);
    free(x.p);
  }
  header(b, name, n, '0', 0, 0);
  put(b, d, n);
  pad512(b);
}

/* A member whose name needs a GNU 'L' header. */
static void gnu_member(buf *b, const char *name, const void *d, size_t n) {
  header(b, "././@LongLink", strlen(name) + 1, 'L', 0, 0);
  put(b, name, strlen(name) + 1);
  pad512(b);
  header(b, "truncated", n, '0', 0, 0);
  put(b, d, n);
  pad512(b);
}

/* Image bytes of sample i: not a JPEG, only compared byte for byte. */
static size_t img_bytes(int i, uint8_t *d) {
  size_t n = 100 + (size_t)i * 137 % 1500;
  for (size_t k = 0; k < n; k++)
    d[k] = (uint8_t)(i * 31 + k * 7 + (k >> 8));
  return n;
}

#define NS 6
static const char *long_key = "train/a-folder-name-long-enough-to-need-a-gnu-long-name-header/"
                              "n01440764_10026_and_more_characters_here";

static void key_of(int i, char *k, size_t n) {
  if (i == 3)
    snprintf(k, n, "%s", long_key);
  else if (i == 4)
    snprintf(k, n, "v1.0/img%d", i); /* a dot in the folder is not the key's end */
  else
    snprintf(k, n, "train/n%08d_%d", 1440764 + i, i);
}

/* NS samples with every member kind; labels 7 * i + 1. */
static void good_shard(buf *t) {
  header(t, "train/", 0, '5', 0, 0);
  uint8_t d[2000];
  for (int i = 0; i < NS; i++) {
    char key[300], name[320], cls[32];
    key_of(i, key, sizeof key);
    size_t n = img_bytes(i, d);
    snprintf(name, sizeof name, "%s.%s", key, i == 2 ? "JPEG" : i == 5 ? "jpeg" : "jpg");
    if (i == 3)
      gnu_member(t, name, d, n);
    else
      pax_member(t, name, d, n, i % 2 == 0);
    snprintf(name, sizeof name, "%s.json", key);
    if (i == 1) pax_member(t, name, "{}", 2, 0); /* ignored extension */
    snprintf(name, sizeof name, "%s.cls", key);
    snprintf(cls, sizeof cls, i == 1 ? "  %d\n" : "%d", 7 * i + 1);
    if (i == 3)
      gnu_member(t, name, cls, strlen(cls));
    else
      pax_member(t, name, cls, strlen(cls), i % 2 == 0);
    if (i == 2) pax_member(t, "README", "x", 1, 0); /* no extension: belongs to no sample */
  }
  uint8_t z[1024] = {0};
  put(t, z, sizeof z);
}

static void write_str(const char *path, const char *s) {
  write_file(path, s, strlen(s));
}

static void read_good(const char *path) {
  gp_wds *w = NULL;
  CHECK(gp_wds_open(path, &w) == GP_OK, "open %s", path);
  if (!w) return;
  int i = 0, bad = 0;
  gp_wds_sample s;
  uint8_t d[2000];
  while (gp_wds_next(w, &s) == GP_OK && s.key) {
    char key[300];
    key_of(i, key, sizeof key);
    size_t n = img_bytes(i, d);
    if (strcmp(s.key, key) != 0 || s.jpg_n != n || memcmp(s.jpg, d, n) != 0 ||
        s.label != 7 * i + 1 || s.index != i || !strstr(s.where, path) || !strstr(s.where, key) ||
        !strstr(s.label_where, ".cls")) {
      printf("sample %d: key %s label %lld where %s\n", i, s.key, (long long)s.label, s.where);
      bad++;
    }
    i++;
  }
  CHECK(i == NS && bad == 0, "%s: %d samples, %d wrong [%s]", path, i, bad, gp_error_message());
  CHECK(gp_wds_next(w, &s) == GP_OK && s.key == NULL, "stays at the end");
  gp_wds_close(w);
}

static void expect_err(gp_status st, const char *a, const char *b, const char *what) {
  const char *m = gp_error_message();
  if (getenv("GP_TEST_VERBOSE")) printf("%s: %s\n", what, m);
  CHECK(st == GP_ERR_DATA && strstr(m, a) && (!b || strstr(m, b)), "%s: want '%s' and '%s'", what,
        a, b ? b : "");
}

/* Reads a shard to its end or its first error. */
static gp_status walk(const char *path, gp_wds_sample *last) {
  gp_wds *w = NULL;
  GP_TRY(gp_wds_open(path, &w));
  gp_status st;
  while ((st = gp_wds_next(w, last)) == GP_OK && last->key)
    ;
  gp_wds_close(w);
  return st;
}

static void bad_shard(const char *name, void (*make)(buf *), const char *a, const char *b) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", root, name);
  buf t = {0};
  make(&t);
  uint8_t z[1024] = {0};
  put(&t, z, sizeof z);
  write_file(p, t.p, t.n);
  free(t.p);
  gp_wds_sample s;
  expect_err(walk(p, &s), a, b, name);
  CHECK(strstr(gp_error_message(), p), "%s: names the shard", name);
}

static void no_cls(buf *t) {
  pax_member(t, "a/k1.jpg", "xx", 2, 1);
  pax_member(t, "a/k1.cls", "1", 1, 1);
  pax_member(t, "a/k2.jpg", "yy", 2, 1);
  pax_member(t, "a/k3.jpg", "zz", 2, 1);
  pax_member(t, "a/k3.cls", "3", 1, 1);
}
static void no_jpg(buf *t) {
  pax_member(t, "a/k1.cls", "1", 1, 0);
}
static void bad_cls(buf *t) {
  pax_member(t, "a/k1.jpg", "xx", 2, 0);
  pax_member(t, "a/k1.cls", "12x", 3, 0);
}
static void neg_cls(buf *t) {
  pax_member(t, "a/k1.jpg", "xx", 2, 0);
  pax_member(t, "a/k1.cls", "-1", 2, 0);
}
static void two_jpg(buf *t) {
  pax_member(t, "a/k1.jpg", "xx", 2, 0);
  pax_member(t, "a/k1.jpeg", "xx", 2, 0);
  pax_member(t, "a/k1.cls", "1", 1, 0);
}
/* A pax record whose length has spaces before it: strtoull skipped them, and the record's
 * key was looked for from past its end (a read far out of the buffer). */
static void pax_space(buf *t) {
  static const char rec[] = "    \n5 path";
  header(t, "././@PaxHeader", sizeof rec - 1, 'x', 0, 0);
  put(t, rec, sizeof rec - 1);
  pad512(t);
  pax_member(t, "a/k1.jpg", "xx", 2, 0);
  pax_member(t, "a/k1.cls", "1", 1, 0);
}
/* A header zeroed by damage in the middle: it ended the archive, and the samples after it
 * were silently gone. */
static void lone_zero(buf *t) {
  pax_member(t, "a/k1.jpg", "xx", 2, 0);
  pax_member(t, "a/k1.cls", "1", 1, 0);
  static const uint8_t z[512];
  put(t, z, sizeof z);
  pax_member(t, "a/k2.jpg", "yy", 2, 0);
  pax_member(t, "a/k2.cls", "2", 1, 0);
}
static void huge(buf *t) {
  header(t, "a/k1.jpg", (uint64_t)100 << 20, '0', 0, 0); /* the data is not even there */
}

static void test_shards(void) {
  buf t = {0};
  good_shard(&t);
  char p[600], q[600];
  snprintf(p, sizeof p, "%s/shard-000000.tar", root);
  write_file(p, t.p, t.n);
  read_good(p);
  snprintf(q, sizeof q, "%s/shard-000001.tar.gz", root);
  write_gz2(q, t.p, t.n);
  read_good(q);
  /* Member cut short (in sample 1's image data), and a bad checksum (in sample 0's image
   * header: member 2 at 1536, after the folder and a pax header). */
  gp_wds_sample s;
  size_t at = 0;
  while (at < t.n && strcmp((const char *)t.p + at, "train/n01440765_1.jpg") != 0)
    at += 512;
  CHECK(at < t.n, "found sample 1's header");
  snprintf(q, sizeof q, "%s/cut.tar", root);
  write_file(q, t.p, at + 512 + 50);
  expect_err(walk(q, &s), "cut.tar", "truncated", "member cut short");
  CHECK(strstr(gp_error_message(), "n01440765_1.jpg"), "names the cut member");
  uint8_t *c = malloc(t.n);
  memcpy(c, t.p, t.n);
  c[1536 + 10] ^= 1;
  snprintf(q, sizeof q, "%s/badsum.tar", root);
  write_file(q, c, t.n);
  expect_err(walk(q, &s), "badsum.tar", "bad tar header checksum", "bad checksum");
  CHECK(strstr(gp_error_message(), "offset 1536"), "names the offset");
  free(c);
  free(t.p);
  bad_shard("no-cls.tar", no_cls, "sample a/k2", "no .cls");
  CHECK(!strstr(gp_error_message(), "truncated"), "a sample inside the shard: no truncation hint");
  /* Cut between a sample's .jpg and .cls, at a member boundary: tar sees a clean end. */
  buf cut = {0};
  pax_member(&cut, "a/k1.jpg", "xx", 2, 0);
  pax_member(&cut, "a/k1.cls", "1", 1, 0);
  pax_member(&cut, "a/k2.jpg", "yy", 2, 0);
  snprintf(q, sizeof q, "%s/cut-before-cls.tar", root);
  write_file(q, cut.p, cut.n);
  free(cut.p);
  expect_err(walk(q, &s), "sample a/k2", "no .cls member (the archive's last sample: a truncated",
             "cut before the .cls");
  bad_shard("no-jpg.tar", no_jpg, "sample a/k1", "no .jpg or .jpeg");
  bad_shard("bad-cls.tar", bad_cls, "member a/k1.cls", "label '12x' is not a non-negative");
  bad_shard("neg-cls.tar", neg_cls, "member a/k1.cls", "'-1'");
  bad_shard("two-jpg.tar", two_jpg, "member a/k1.jpeg", "second image");
  bad_shard("huge.tar", huge, "member a/k1.jpg", "104857600 bytes, more than");
  bad_shard("pax-space.tar", pax_space, "member 0 at offset 0", "bad pax record");
  bad_shard("lone-zero.tar", lone_zero, "offset 2048", "a zero block, which ends an archive");
  expect_err(walk("/nonexistent/shard.tar", &s), "/nonexistent/shard.tar", "cannot open",
             "missing shard");
  snprintf(q, sizeof q, "%s/zero.tar", root); /* 0 bytes: not an empty archive */
  write_file(q, "", 0);
  expect_err(walk(q, &s), "zero.tar", "empty file", "0-byte shard");
  /* Label range. */
  gp_wds_sample ls = {.label = 1003, .label_where = "x.tar: member a/k.cls (file 3)"};
  expect_err(gp_wds_check_label(&ls, 1000), "x.tar: member a/k.cls (file 3)",
             "label 1003 outside 0..999", "label range");
  ls.label = 999;
  CHECK(gp_wds_check_label(&ls, 1000) == GP_OK, "label 999 of 1000");
}

static void expect_paths(const char *spec, const char **want, int n_want) {
  char **p = NULL;
  int n = 0;
  gp_status st = gp_shards_expand(spec, &p, &n);
  int ok = st == GP_OK && n == n_want;
  for (int i = 0; ok && i < n; i++)
    ok = strcmp(p[i], want[i]) == 0;
  CHECK(ok, "expand '%s': %d paths, first '%s', last '%s'", spec, n, n ? p[0] : "-",
        n ? p[n - 1] : "-");
  gp_strings_free(p, n);
}

static void test_expand(void) {
  const char *a[] = {"d/imagenet-train-000000.tar", "d/imagenet-train-000001.tar",
                     "d/imagenet-train-000002.tar", "d/imagenet-train-000003.tar"};
  expect_paths("d/imagenet-train-{000000..000003}.tar", a, 4);
  const char *b[] = {"x8", "x9", "x10"}, *b2[] = {"x08", "x09", "x10"}, *b3[] = {"x3", "x2", "x1"};
  expect_paths("x{8..10}", b, 3);
  expect_paths("x{08..10}", b2, 3);
  expect_paths("x{3..1}", b3, 3);
  const char *c[] = {"s0-a.tar", "s0-b.tar", "s1-a.tar", "s1-b.tar", "z.tar", "y.tar"};
  expect_paths("s{0..1}-{a,b}.tar, z.tar ,y.tar", c, 6);
  char **p = NULL;
  int n = 0;
  expect_err(gp_shards_expand("x{000000..999999}-{0..9}.tar", &p, &n), "more than 1000000", NULL,
             "too many");
  const char *refused[] = {"a{0..3.tar", "a}b", "a{x}", "a{1..2{3}}", "", "a.tar,", "a{1..b}"};
  for (int i = 0; i < 7; i++) {
    gp_status st = gp_shards_expand(refused[i], &p, &n);
    CHECK(st == GP_ERR_DATA && p == NULL && gp_error_message()[0], "'%s' refused", refused[i]);
  }
  expect_err(gp_shards_expand("a.tar,@", &p, &n), "empty item", NULL, "a lone @");
  /* A folder: its .tar and .tar.gz, sorted; and an @list relative to its folder. */
  char dir[600], f[700];
  snprintf(dir, sizeof dir, "%s/shards", root);
  mkdir(dir, 0755);
  const char *files[] = {"b.tar", "a.tar.gz", "c.txt", ".hidden.tar", "B.tar"};
  for (int i = 0; i < 5; i++) {
    snprintf(f, sizeof f, "%s/%s", dir, files[i]);
    write_file(f, "", 0);
  }
  snprintf(f, sizeof f, "%s/sub.tar", dir);
  mkdir(f, 0755); /* a folder named like a shard is not one */
  char w0[700], w1[700], w2[700];
  snprintf(w0, sizeof w0, "%s/B.tar", dir);
  snprintf(w1, sizeof w1, "%s/a.tar.gz", dir);
  snprintf(w2, sizeof w2, "%s/b.tar", dir);
  const char *d[] = {w0, w1, w2};
  expect_paths(dir, d, 3);
  snprintf(f, sizeof f, "%s/list.txt", dir);
  write_str(f, "# shards\nb.tar\n\n  /abs/x.tar  \r\nsub/y.tar");
  char at[710], l1[700], l3[700];
  snprintf(at, sizeof at, "@%s", f);
  snprintf(l1, sizeof l1, "%s/b.tar", dir);
  snprintf(l3, sizeof l3, "%s/sub/y.tar", dir);
  const char *e[] = {l1, "/abs/x.tar", l3};
  expect_paths(at, e, 3);
  snprintf(f, sizeof f, "%s/empty", root);
  mkdir(f, 0755);
  expect_err(gp_shards_expand(f, &p, &n), f, "no .tar or .tar.gz", "empty folder");
  /* a shard the folder names but cannot be read is an error, not a shard left out */
  char ln[720];
  snprintf(ln, sizeof ln, "%s/gone.tar", f);
  CHECK(symlink("/nonexistent/gone.tar", ln) == 0, "symlink");
  expect_err(gp_shards_expand(f, &p, &n), "gone.tar", "a symbolic link to nothing",
             "dangling shard link");
  remove(ln);
  expect_err(gp_shards_expand("@/nonexistent/list", &p, &n), "/nonexistent/list", "cannot open",
             "missing list");
}

static void test_classes(void) {
  char f[600];
  snprintf(f, sizeof f, "%s/classes.txt", root);
  write_str(f, "n01440764\r\nn01443537\n n01484850 \n");
  char **names = NULL;
  int n = 0;
  CHECK(gp_classes_read(f, &names, &n) == GP_OK && n == 3 && strcmp(names[0], "n01440764") == 0 &&
            strcmp(names[2], "n01484850") == 0,
        "classes.txt: %d names", n);
  gp_strings_free(names, n);
  write_str(f, "a\n\nb\n");
  expect_err(gp_classes_read(f, &names, &n), "classes.txt:2:", "blank line", "blank line");
  write_str(f, "a\nb\nc\nb\n");
  expect_err(gp_classes_read(f, &names, &n), "classes.txt:4:", "repeats line 2", "duplicate");
  write_str(f, "");
  expect_err(gp_classes_read(f, &names, &n), "classes.txt", "no class names", "empty");
}

static void touch(const char *rel) {
  char p[700];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  char *slash = p + strlen(root);
  while ((slash = strchr(slash + 1, '/')) != NULL) { /* make the folders on the way */
    *slash = 0;
    mkdir(p, 0755);
    *slash = '/';
  }
  write_file(p, rel, strlen(rel));
}

static void test_imagefolder(void) {
  const char *made[] = {"if/b/x.jpg",        "if/a/2.jpg",          "if/a/10.JPEG",
                        "if/a/x.png",        "if/a/.hidden.jpg",    "if/a/sub/1.jpg",
                        "if/a/sub-x/0.jpeg", "if/a/sub/deep/9.jpg", "if/.git/z.jpg"};
  for (int i = 0; i < 9; i++)
    touch(made[i]);
  /* Python's sorted(os.walk()): "a" < "a/sub" < "a/sub-x" < "a/sub/deep" ('-' < '/'). */
  const char *order[] = {"if/a/10.JPEG",      "if/a/2.jpg",          "if/a/sub/1.jpg",
                         "if/a/sub-x/0.jpeg", "if/a/sub/deep/9.jpg", "if/b/x.jpg"};
  const int labels[] = {0, 0, 0, 0, 0, 1};
  char r[600], want[700];
  snprintf(r, sizeof r, "%s/if", root);
  gp_imagefolder f;
  CHECK(gp_imagefolder_scan(r, NULL, NULL, &f) == GP_OK, "scan");
  int bad = f.n != 6 || f.n_classes != 2 || strcmp(f.classes[0], "a") || strcmp(f.classes[1], "b");
  for (int64_t i = 0; !bad && i < f.n; i++) {
    snprintf(want, sizeof want, "%s/%s", root, order[i]);
    if (strcmp(f.paths[i], want) != 0 || f.labels[i] != labels[i]) bad++;
  }
  CHECK(!bad, "ImageFolder order and labels (%lld images)", (long long)f.n);
  /* gp_read_file on the last one: its bytes are its own relative name. */
  uint8_t *b = NULL;
  size_t cap = 0, n = 0;
  CHECK(f.n == 6 && gp_read_file(f.paths[5], &b, &cap, &n) == GP_OK && n == 10 &&
            memcmp(b, "if/b/x.jpg", 10) == 0,
        "read file");
  expect_err(gp_read_file("/nonexistent.jpg", &b, &cap, &n), "/nonexistent.jpg", "cannot open",
             "missing file");
  free(b);
  gp_imagefolder_free(&f);
  /* classes.txt order: b = 0, a = 1, z listed without a folder. */
  char ct[700];
  snprintf(ct, sizeof ct, "%s/if-classes.txt", root);
  write_str(ct, "b\na\nz\n");
  CHECK(gp_imagefolder_scan(r, ct, NULL, &f) == GP_OK && f.n == 6 && f.n_classes == 3 &&
            f.labels[0] == 1 && f.labels[5] == 0 && strcmp(f.classes[2], "z") == 0,
        "labels from classes.txt");
  gp_imagefolder_free(&f);
  write_str(ct, "b\nz\n");
  expect_err(gp_imagefolder_scan(r, ct, NULL, &f), "class folder 'a' is not in", ct,
             "unlisted folder");
  touch("if2/a/x.jpg");
  snprintf(want, sizeof want, "%s/if2/c", root);
  mkdir(want, 0755);
  snprintf(r, sizeof r, "%s/if2", root);
  expect_err(gp_imagefolder_scan(r, NULL, NULL, &f), want, "no .jpg or .jpeg", "empty class");
  snprintf(r, sizeof r, "%s/empty", root);
  expect_err(gp_imagefolder_scan(r, NULL, NULL, &f), r, "no class folders", "empty root");
  expect_err(gp_imagefolder_scan("/nonexistent/root", NULL, NULL, &f), "/nonexistent/root", NULL,
             "missing root");
}

static int python_interop(const char *python) {
  char p[600], cmd[2400];
  snprintf(p, sizeof p, "%s/py-000000.tar", root);
  snprintf(cmd, sizeof cmd,
           "%s -c \"import tarfile,io,sys\n"
           "t=tarfile.open(sys.argv[1],'w',format=tarfile.PAX_FORMAT)\n"
           "for i in range(5):\n"
           "  k='imagenet/train/n%%08d_%%d'%%(1440764+i,i)\n"
           "  for ext,d in (('jpg',bytes((i*31+j*7)&255 for j in range(300+i*1000))),"
           "('cls',str(i*11).encode())):\n"
           "    ti=tarfile.TarInfo(k+'.'+ext); ti.size=len(d); ti.mtime=1700000000.5;"
           " t.addfile(ti,io.BytesIO(d))\n"
           "t.close()\" %s",
           python, p);
  if (system(cmd) != 0) {
    printf("FAIL: python3 could not write the shard\n0 passed, 1 failed\n");
    return 1;
  }
  gp_wds *w = NULL;
  CHECK(gp_wds_open(p, &w) == GP_OK, "open python shard");
  gp_wds_sample s;
  int i = 0, bad = 0;
  while (w && gp_wds_next(w, &s) == GP_OK && s.key) {
    char key[100];
    snprintf(key, sizeof key, "imagenet/train/n%08d_%d", 1440764 + i, i);
    size_t n = 300 + (size_t)i * 1000;
    bad += strcmp(s.key, key) != 0 || s.jpg_n != n || s.label != i * 11;
    for (size_t j = 0; j < n && j < s.jpg_n; j++)
      bad += s.jpg[j] != (uint8_t)((i * 31 + j * 7) & 255);
    i++;
  }
  CHECK(i == 5 && bad == 0, "python shard: %d samples, %d wrong", i, bad);
  gp_wds_close(w);
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}

static void remove_root(void) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

int main(int argc, char **argv) {
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/gp_wds_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(root)) {
    perror("mkdtemp");
    return 1;
  }
  if (argc > 1) {
    int rc = access(argv[1], X_OK) != 0 ? 77 : python_interop(argv[1]);
    remove_root();
    return rc;
  }
  test_shards();
  test_expand();
  test_classes();
  test_imagefolder();
  remove_root();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
