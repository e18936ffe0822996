/* JPEG decoding on files made by libjpeg's compressor here: RGB baseline and progressive,
 * grayscale, CMYK and YCCK (Adobe, inverted as Photoshop writes; without the marker too, as PIL
 * reads it) against the expected RGB (decodes were checked equal to PIL 13's byte for byte),
 * DCT-domain downscaling (sizes and content), and damaged input (empty, garbage, a PNG, truncated,
 * a stray marker in the scan, absurd dimensions) refused with the caller's `where` text, while
 * bytes before the end marker are accepted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/jpeg.h"
#include "tests/support/check.h"
#include "tests/data/jpeg_fixture.h"

static int failures, passes;

/* Tolerances: mean absolute error per channel value (0..255) of a decode against the pixels
 * encoded, for smooth content. Quality 95 with 4:2:0 chroma keeps natural-ish content within
 * about 1-2; 4 leaves room for libjpeg versions. Flat colours at quality 100 are exact but for
 * the colour conversion's rounding: 1. */
#define TOL_Q95_MAE 4.0
#define TOL_FLAT 1

static double mae(const uint8_t *a, const uint8_t *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += fabs((double)a[i] - b[i]);
  return s / (double)n;
}

static void test_rgb(int progressive) {
  const int w = 67, h = 45; /* not multiples of the 16-pixel MCU */
  uint8_t *px = malloc((size_t)w * h * 3);
  jfix_natural(px, w, h, 3);
  size_t n = 0;
  uint8_t *j = jfix_encode(px, w, h, 3, 95, progressive ? JFIX_PROGRESSIVE : 0, &n);
  gp_image img = {0};
  CHECK(j && gp_jpeg_decode(j, n, 0, "rgb.jpg", &img) == GP_OK, "decode rgb (progressive %d)",
        progressive);
  CHECK(img.w == w && img.h == h, "size %dx%d", img.w, img.h);
  if (img.w == w && img.h == h) {
    double e = mae(img.px, px, (size_t)w * h * 3);
    CHECK(e < TOL_Q95_MAE, "rgb mean abs error %.2f (progressive %d)", e, progressive);
  }
  int iw = 0, ih = 0;
  CHECK(gp_jpeg_info(j, n, "rgb.jpg", &iw, &ih) == GP_OK && iw == w && ih == h, "info size");
  /* Decoding again into the same image reuses the buffer. */
  uint8_t *before = img.px;
  CHECK(gp_jpeg_decode(j, n, 0, "rgb.jpg", &img) == GP_OK && img.px == before, "buffer reused");
  gp_image_free(&img);
  free(j);
  free(px);
}

static void test_gray(void) {
  const int w = 40, h = 33;
  uint8_t *g = malloc((size_t)w * h);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      g[y * w + x] = (uint8_t)(30 + 4 * x + 2 * y);
  size_t n = 0;
  uint8_t *j = jfix_encode(g, w, h, 1, 98, 0, &n);
  gp_image img = {0};
  CHECK(j && gp_jpeg_decode(j, n, 0, "gray.jpg", &img) == GP_OK, "decode gray");
  int bad = 0;
  double e = 0;
  for (int i = 0; img.px && i < w * h; i++) {
    bad += img.px[3 * i] != img.px[3 * i + 1] || img.px[3 * i] != img.px[3 * i + 2];
    e += fabs((double)img.px[3 * i] - g[i]);
  }
  CHECK(img.w == w && img.h == h && bad == 0, "gray replicated to R=G=B (%d differ)", bad);
  CHECK(e / (w * h) < TOL_Q95_MAE, "gray mean abs error %.2f", e / (w * h));
  gp_image_free(&img);
  free(j);
  free(g);
}

/* R = C'K'/255 with inverted inks C', K', rounded. */
static int expect_ink(int ci, int ki) {
  return (int)floor(ci * ki / 255.0 + 0.5);
}

static void test_cmyk(void) {
  const int w = 32, h = 24;
  /* Inverted inks as Photoshop stores them (255 = no ink). */
  const uint8_t inv[4] = {200, 100, 50, 180};
  uint8_t *px = malloc((size_t)w * h * 4);
  int want[3];
  for (int c = 0; c < 3; c++)
    want[c] = expect_ink(inv[c], inv[3]);
  const char *what[3] = {"CMYK Adobe", "YCCK Adobe", "CMYK, no Adobe marker"};
  const int flags[3] = {0, JFIX_YCCK, JFIX_NO_ADOBE};
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < w * h; i++)
      for (int c = 0; c < 4; c++) /* without the Adobe marker still taken as inverted */
        px[4 * i + c] = inv[c];
    size_t n = 0;
    uint8_t *j = jfix_encode(px, w, h, 4, 100, flags[k], &n);
    gp_image img = {0};
    CHECK(j && gp_jpeg_decode(j, n, 0, what[k], &img) == GP_OK, "decode %s", what[k]);
    int worst = 0;
    for (int i = 0; img.px && i < w * h; i++)
      for (int c = 0; c < 3; c++) {
        int d = abs(img.px[3 * i + c] - want[c]);
        worst = d > worst ? d : worst;
      }
    CHECK(img.px && worst <= TOL_FLAT, "%s -> RGB (%d,%d,%d): worst error %d (got %d,%d,%d)",
          what[k], want[0], want[1], want[2], worst, img.px ? img.px[0] : -1,
          img.px ? img.px[1] : -1, img.px ? img.px[2] : -1);
    gp_image_free(&img);
    free(j);
  }
  /* A CMYK gradient (YCCK is lossy in a different way): the mean error stays small. */
  uint8_t *rgb_want = malloc((size_t)w * h * 3);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      uint8_t *q = px + 4 * (y * w + x);
      q[0] = (uint8_t)(255 - 4 * x);
      q[1] = (uint8_t)(150 + 3 * y);
      q[2] = (uint8_t)(220 - 2 * x - y);
      q[3] = (uint8_t)(240 - x);
      for (int c = 0; c < 3; c++)
        rgb_want[3 * (y * w + x) + c] = (uint8_t)expect_ink(q[c], q[3]);
    }
  size_t n = 0;
  uint8_t *j = jfix_encode(px, w, h, 4, 97, 0, &n);
  gp_image img = {0};
  CHECK(j && gp_jpeg_decode(j, n, 0, "cmyk-gradient", &img) == GP_OK, "decode CMYK gradient");
  if (img.px) {
    double e = mae(img.px, rgb_want, (size_t)w * h * 3);
    CHECK(e < TOL_Q95_MAE, "CMYK gradient mean abs error %.2f", e);
  }
  gp_image_free(&img);
  free(j);
  free(rgb_want);
  free(px);
}

static void test_scaling(void) {
  static const struct {
    int short_side, min_side, m;
  } tab[] = {{1500, 0, 8},   {1500, 224, 2}, {1500, 188, 1}, {1500, 189, 2},
             {1500, 376, 4}, {1500, 750, 4}, {1500, 751, 8}, {1500, 9999, 8},
             {100, 224, 8},  {375, 256, 8},  {375, 188, 4},  {375, 189, 8}};
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
    CHECK(gp_jpeg_scale_for(tab[i].short_side, tab[i].min_side) == tab[i].m,
          "scale for %d / %d is %d, want %d", tab[i].short_side, tab[i].min_side,
          gp_jpeg_scale_for(tab[i].short_side, tab[i].min_side), tab[i].m);
  const int w = 2001, h = 1500;
  uint8_t *px = malloc((size_t)w * h * 3);
  jfix_natural(px, w, h, 5);
  size_t n = 0;
  uint8_t *j = jfix_encode(px, w, h, 3, 92, 0, &n);
  static const struct {
    int min_side, w, h;
  } sizes[] = {{0, 2001, 1500}, {224, 501, 375}, {100, 251, 188}, {700, 1001, 750}};
  gp_image img = {0};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    gp_status st = gp_jpeg_decode(j, n, sizes[i].min_side, "big.jpg", &img);
    CHECK(st == GP_OK && img.w == sizes[i].w && img.h == sizes[i].h,
          "min_side %d: %dx%d, want %dx%d", sizes[i].min_side, img.w, img.h, sizes[i].w,
          sizes[i].h);
  }
  /* Content at 1/4: each output pixel is about the mean of its 4x4 source block. */
  if (gp_jpeg_decode(j, n, 224, "big.jpg", &img) == GP_OK && img.w == 501) {
    double e = 0;
    int cnt = 0;
    for (int y = 0; y < 374; y += 3)
      for (int x = 0; x < 500; x += 3)
        for (int c = 0; c < 3; c++) {
          double s = 0;
          for (int dy = 0; dy < 4; dy++)
            for (int dx = 0; dx < 4; dx++)
              s += px[((size_t)(4 * y + dy) * w + 4 * x + dx) * 3 + c];
          e += fabs(s / 16 - img.px[((size_t)y * img.w + x) * 3 + c]);
          cnt++;
        }
    CHECK(e / cnt < TOL_Q95_MAE, "1/4-scale content vs 4x4 block means: %.2f", e / cnt);
  }
  gp_image_free(&img);
  free(j);
  free(px);
}

static void expect_refused(const uint8_t *b, size_t n, const char *what, const char *needle) {
  gp_image img = {0};
  gp_status st = gp_jpeg_decode(b, n, 0, what, &img);
  const char *m = gp_error_message();
  if (getenv("GP_TEST_VERBOSE")) printf("%s: %s\n", what, m);
  CHECK(st == GP_ERR_DATA && strstr(m, what) && strstr(m, "undecodable JPEG") &&
            (!needle || strstr(m, needle)),
        "%s refused, naming it%s%s", what, needle ? " and saying " : "", needle ? needle : "");
  gp_image_free(&img);
}

/* Offset of marker 0xFF m after the SOI, or 0. */
static size_t find_marker(const uint8_t *b, size_t n, uint8_t m) {
  for (size_t i = 2; i + 1 < n; i++)
    if (b[i] == 0xff && b[i + 1] == m) return i;
  return 0;
}

static void test_errors(void) {
  const int w = 64, h = 48;
  uint8_t *px = malloc((size_t)w * h * 3);
  jfix_natural(px, w, h, 7);
  size_t n = 0;
  uint8_t *j = jfix_encode(px, w, h, 3, 90, 0, &n);
  uint8_t *m = malloc(n + 64);
  expect_refused(j, 0, "shard-0.tar: member zero.jpg", NULL);
  expect_refused(NULL, 0, "null.jpg", NULL);
  uint8_t garbage[300];
  for (int i = 0; i < 300; i++)
    garbage[i] = (uint8_t)(i * 37 + 11);
  expect_refused(garbage, sizeof garbage, "garbage.jpg", "Not a JPEG file");
  const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13};
  expect_refused(png, sizeof png, "n02105855_2933.JPEG", "Not a JPEG file");
  expect_refused(j, n / 2, "half.jpg", "Premature end");
  expect_refused(j, n - 2, "no-eoi.jpg", "Premature end");
  expect_refused(j, 20, "header-only.jpg", NULL);
  /* A marker in the middle of the scan data: libjpeg would warn and fill grey. */
  size_t sos = find_marker(j, n, 0xda);
  memcpy(m, j, n);
  size_t mid = sos + (n - sos) / 2;
  m[mid] = 0xff;
  m[mid + 1] = 0xd9;
  expect_refused(m, n, "stray-marker.jpg", "Corrupt JPEG data");
  /* Absurd dimensions in the frame header: refused from the header. */
  size_t sof = find_marker(j, n, 0xc0);
  memcpy(m, j, n);
  m[sof + 5] = m[sof + 6] = m[sof + 7] = m[sof + 8] = 0xea; /* 60138 x 60138 */
  expect_refused(m, n, "huge.jpg", "2^28");
  int iw, ih;
  CHECK(gp_jpeg_info(m, n, "huge.jpg", &iw, &ih) == GP_ERR_DATA, "info refuses it too");
  /* Bytes between the last scan and the end marker are harmless: same pixels. */
  memcpy(m, j, n - 2);
  memset(m + n - 2, 0x00, 5);
  m[n + 3] = 0xff;
  m[n + 4] = 0xd9;
  gp_image a = {0}, b = {0};
  CHECK(gp_jpeg_decode(j, n, 0, "ok.jpg", &a) == GP_OK, "plain decode");
  CHECK(gp_jpeg_decode(m, n + 5, 0, "trailing.jpg", &b) == GP_OK, "extraneous bytes accepted");
  CHECK(a.px && b.px && a.w == b.w && memcmp(a.px, b.px, (size_t)w * h * 3) == 0,
        "same pixels with extraneous bytes");
  gp_image_free(&a);
  gp_image_free(&b);
  free(m);
  free(j);
  free(px);
}

/* j (n bytes) with pad bytes of value v inserted before its end marker, decoded. */
static gp_status decode_padded(const uint8_t *j, size_t n, int pad, uint8_t v, gp_image *out) {
  uint8_t *m = malloc(n + (size_t)pad);
  memcpy(m, j, n - 2);
  memset(m + n - 2, v, (size_t)pad);
  m[n - 2 + pad] = 0xff;
  m[n - 1 + pad] = 0xd9;
  gp_status st = gp_jpeg_decode(m, n + (size_t)pad, 0, "padded.jpg", out);
  free(m);
  return st;
}

/* A few bytes before the end marker are padding (ImageNet: one 0x7f; cameras: a few); a long
 * tail is what a damaged scan leaves, and damaged scans are refused. */
static void test_trailing(void) {
  const int w = 160, h = 120;
  uint8_t *px = malloc((size_t)w * h * 3);
  jfix_photo(px, w, h, 11);
  size_t n = 0;
  uint8_t *j = jfix_encode(px, w, h, 3, 90, 0, &n);
  gp_image a = {0}, b = {0};
  CHECK(gp_jpeg_decode(j, n, 0, "ok.jpg", &a) == GP_OK, "plain decode");
  CHECK(decode_padded(j, n, 1, 0x7f, &b) == GP_OK && b.w == w &&
            memcmp(a.px, b.px, (size_t)w * h * 3) == 0,
        "one junk byte before the end marker (as in ImageNet) accepted, same pixels");
  CHECK(decode_padded(j, n, 8, 0x00, &b) == GP_OK, "8 bytes of camera padding accepted");
  gp_status st = decode_padded(j, n, 40, 0x00, &b);
  CHECK(st == GP_ERR_DATA && strstr(gp_error_message(), "extraneous bytes") &&
            strstr(gp_error_message(), "damaged"),
        "40 bytes before the end marker refused: %s", gp_error_message());
  /* 8 bytes XOR-ed at 20 places in the first 90% of the scan: libjpeg reports half as
   * extraneous bytes only (refused now), 3 as premature end; 7 decode without a warning
   * (nothing tells those from a good file). */
  size_t sos = find_marker(j, n, 0xda), start = sos + 14, len = (n - 2 - start) * 9 / 10;
  uint8_t *m = malloc(n);
  int refused = 0;
  for (int k = 0; k < 20; k++) {
    memcpy(m, j, n);
    size_t at = start + len * (size_t)k / 20;
    for (int i = 0; i < 8; i++)
      m[at + i] ^= (uint8_t)(0x5a + 17 * i);
    refused += gp_jpeg_decode(m, n, 0, "damaged.jpg", &b) == GP_ERR_DATA;
  }
  CHECK(refused >= 10, "damaged scans refused: %d of 20", refused);
  free(m);
  gp_image_free(&a);
  gp_image_free(&b);
  free(j);
  free(px);
}

int main(void) {
  test_rgb(0);
  test_rgb(1);
  test_gray();
  test_cmyk();
  test_scaling();
  test_errors();
  test_trailing();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
