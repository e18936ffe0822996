/* libjpeg-turbo with an error manager that longjmps back here instead of exiting, and that
 * turns corrupt-data warnings into errors (libjpeg would print them and go on with grey or
 * smeared blocks: a silently wrong image). */
#include "data/jpeg.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

typedef struct err_mgr {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
} err_mgr;

static void on_error(j_common_ptr c) {
  err_mgr *e = (err_mgr *)c->err;
  (*c->err->format_message)(c, e->msg);
  longjmp(e->jb, 1);
}

/* libjpeg's count of bytes between the last scan and the end marker that is still taken as
 * padding. The count leaves out the few bytes its bit reader fetched ahead (4-5), so the one
 * junk byte of two ImageNet files (stb_image had to accept it) is not even reported, and a
 * camera's 11 bytes of padding (an SQ908, documented) count 8. A scan damaged inside ends its
 * Huffman decode off the true end, which libjpeg reports as the same warning: XOR-ing 8 random
 * bytes of a scan (400 tries, 64x48 to 320x240, quality 90) gave that warning alone in 347 cases,
 * pixels off by up to 96/255 on average, with a count of 36 or more in all but 2 (damage in
 * the scan's last 25 bytes). Damage that libjpeg does not notice at all (about 1 in 10 there)
 * cannot be refused. */
#define TRAILING_MAX 8

static int extraneous_before_eoi(j_common_ptr c) {
  return c->err->msg_code == JWRN_EXTRANEOUS_DATA && c->err->msg_parm.i[1] == 0xd9;
}

/* Warnings (level -1) that leave every pixel as the encoder meant it: a little padding before
 * the end marker, an unknown JFIF revision. Anything else that libjpeg calls corrupt data (a
 * bad Huffman code, a missing RST, premature end, a long tail that a damaged scan left)
 * damages pixels. */
static int harmless(j_common_ptr c) {
  if (extraneous_before_eoi(c)) return c->err->msg_parm.i[0] <= TRAILING_MAX;
  return c->err->msg_code == JWRN_JFIF_MAJOR;
}

static void on_message(j_common_ptr c, int level) {
  if (level >= 0 || harmless(c)) return; /* trace messages and harmless warnings */
  if (extraneous_before_eoi(c)) {
    err_mgr *e = (err_mgr *)c->err;
    char m[JMSG_LENGTH_MAX];
    (*c->err->format_message)(c, m);
    snprintf(e->msg, sizeof e->msg, "%.150s (more than %d is taken as a damaged scan)", m,
             TRAILING_MAX);
    longjmp(e->jb, 1);
  }
  on_error(c);
}

void gp_image_free(gp_image *img) {
  if (!img) return;
  free(img->px);
  img->px = NULL;
  img->cap = 0;
  img->w = img->h = 0;
}

gp_status gp_image_reserve(gp_image *img, int w, int h) {
  if (w <= 0 || h <= 0 || (int64_t)w * h > GP_JPEG_MAX_PIXELS)
    return GP_ERR(GP_ERR_RUNTIME, "image size %dx%d out of range", w, h);
  size_t need = (size_t)w * (size_t)h * 3;
  if (need > img->cap) {
    uint8_t *p = realloc(img->px, need);
    if (!p) return GP_ERR(GP_ERR_NOMEM, "out of memory for a %dx%d image", w, h);
    img->px = p;
    img->cap = need;
  }
  img->w = w;
  img->h = h;
  return GP_OK;
}

/* Only 1/8, 1/4 and 1/2: libjpeg-turbo's 3/8, 5/8, 6/8 and 7/8 IDCTs have no SIMD and
 * decode slower than the full size does (measured, 2.1.5 on x86-64). */
int gp_jpeg_scale_for(int short_side, int min_side) {
  if (min_side <= 0) return 8;
  for (int m = 1; m < 8; m *= 2)
    if (((int64_t)short_side * m + 7) / 8 >= min_side) return m;
  return 8;
}

/* R = C'K'/255 on inverted inks, rounded as PIL's MULDIV255. */
static uint8_t ink(unsigned a, unsigned b) {
  unsigned t = a * b + 128;
  return (uint8_t)(((t >> 8) + t) >> 8);
}

/* Every CMYK JPEG is taken as inverted (Adobe's convention, which PIL and browsers assume
 * whether or not the Adobe marker is there: writers of plain CMYK JPEGs are all but extinct). */
static void cmyk_row(const uint8_t *in, uint8_t *out, int w) {
  for (int i = 0; i < w; i++, in += 4, out += 3) {
    out[0] = ink(in[0], in[3]);
    out[1] = ink(in[1], in[3]);
    out[2] = ink(in[2], in[3]);
  }
}

typedef struct job {
  struct jpeg_decompress_struct d;
  err_mgr e;
  int min_side;
  int header_only;
  int w, h; /* source size */
} job;

/* Everything that can longjmp; returns 0 or -1 with job->e.msg set. Nothing here keeps
 * state in locals across a longjmp: what must survive lives in *j and *out. */
static int run(job *j, const uint8_t *buf, size_t n, gp_image *out, gp_status *st) {
  struct jpeg_decompress_struct *d = &j->d;
  if (setjmp(j->e.jb)) return -1;
  jpeg_create_decompress(d);
  jpeg_mem_src(d, buf, (unsigned long)n);
  jpeg_read_header(d, TRUE);
  j->w = (int)d->image_width;
  j->h = (int)d->image_height;
  if ((int64_t)j->w * j->h > GP_JPEG_MAX_PIXELS) {
    snprintf(j->e.msg, sizeof j->e.msg, "%dx%d pixels is more than the 2^28 accepted", j->w, j->h);
    return -1;
  }
  if (j->header_only) return 0;
  int cmyk = d->jpeg_color_space == JCS_CMYK || d->jpeg_color_space == JCS_YCCK;
  d->out_color_space = cmyk ? JCS_CMYK : JCS_RGB; /* libjpeg-turbo expands gray to RGB */
  d->scale_num = (unsigned)gp_jpeg_scale_for(j->w < j->h ? j->w : j->h, j->min_side);
  d->scale_denom = 8;
  jpeg_start_decompress(d);
  if (d->output_components != (cmyk ? 4 : 3)) {
    snprintf(j->e.msg, sizeof j->e.msg, "unexpected %d output components", d->output_components);
    return -1;
  }
  *st = gp_image_reserve(out, (int)d->output_width, (int)d->output_height);
  if (*st != GP_OK) return -1;
  JSAMPARRAY row4 = NULL;
  if (cmyk) row4 = (*d->mem->alloc_sarray)((j_common_ptr)d, JPOOL_IMAGE, d->output_width * 4, 1);
  while (d->output_scanline < d->output_height) {
    uint8_t *dst = out->px + (size_t)d->output_scanline * (size_t)out->w * 3;
    JSAMPROW row = cmyk ? row4[0] : dst;
    if (jpeg_read_scanlines(d, &row, 1) != 1) {
      snprintf(j->e.msg, sizeof j->e.msg, "no scanline %u returned", d->output_scanline);
      return -1;
    }
    if (cmyk) cmyk_row(row4[0], dst, out->w);
  }
  jpeg_finish_decompress(d); /* reads to the end marker: trailing damage is reported too */
  return 0;
}

static gp_status decode(const uint8_t *buf, size_t n, int min_side, int header_only,
                        const char *where, gp_image *out, int *w, int *h) {
  job *j = calloc(1, sizeof *j);
  if (!j) return GP_ERR(GP_ERR_NOMEM, "%s: out of memory for the JPEG decoder", where);
  j->d.err = jpeg_std_error(&j->e.pub);
  j->e.pub.error_exit = on_error;
  j->e.pub.emit_message = on_message;
  j->min_side = min_side;
  j->header_only = header_only;
  gp_status st = GP_OK;
  int rc = run(j, buf, n, out, &st);
  jpeg_destroy_decompress(&j->d);
  if (rc == 0) {
    if (w) *w = j->w;
    if (h) *h = j->h;
  } else if (st == GP_OK) {
    st = GP_ERR(GP_ERR_DATA, "%s: undecodable JPEG: %s", where ? where : "image", j->e.msg);
  }
  free(j);
  return st;
}

gp_status gp_jpeg_info(const uint8_t *buf, size_t n, const char *where, int *w, int *h) {
  *w = *h = 0;
  return decode(buf, n, 0, 1, where, NULL, w, h);
}

gp_status gp_jpeg_decode(const uint8_t *buf, size_t n, int min_side, const char *where,
                         gp_image *out) {
  return decode(buf, n, min_side, 0, where, out, NULL, NULL);
}
