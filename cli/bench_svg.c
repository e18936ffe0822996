/* gpipe-bench --plot: the speed-up plot as a self-contained SVG (no scripts, no external fonts
 * or styles). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench.h"

static void xml_text(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '&')
      fputs("&amp;", f);
    else if (*s == '<')
      fputs("&lt;", f);
    else if (*s == '>')
      fputs("&gt;", f);
    else if (*s == '"')
      fputs("&quot;", f);
    else if ((unsigned char)*s >= 0x20)
      fputc(*s, f);
  }
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Sorted distinct values of K (which = 0) or M (which = 1) over the runs asked for (the plot
 * shows the sweep; a baseline is only what its speed-ups are against). */
static int distinct(const gp_bench *b, int which, int *out) {
  int n = 0;
  for (int i = 0; i < b->n_runs; i++) {
    if (b->runs[i].baseline) continue;
    int v = which ? b->runs[i].m : b->runs[i].k, seen = 0;
    for (int j = 0; j < n; j++)
      seen |= out[j] == v;
    if (!seen && n < 512) out[n++] = v;
  }
  qsort(out, (size_t)n, sizeof *out, cmp_int);
  return n;
}

/* A tick step of 1, 2 or 5 times a power of ten giving at most about 8 ticks. */
static double tick_step(double range) {
  double raw = range / 8, p = pow(10, floor(log10(raw))), steps[] = {1, 2, 5, 10};
  for (int i = 0; i < 4; i++)
    if (steps[i] * p >= raw) return steps[i] * p;
  return 10 * p;
}

static double ideal(int k, int m) {
  return (double)k * m / (double)(m + k - 1);
}

/* Under the legend, when runs asked for were left out for not fitting --memory-limit; without
 * one stage (K=1, M=1, asked for or not) there is no speed-up to plot at all. */
static void svg_fit_note(FILE *f, const gp_bench *b, double x, double y) {
  int any = 0, single = 0;
  for (int i = 0; i < b->n_runs; i++) {
    any |= b->runs[i].over_limit && !b->runs[i].baseline;
    single |= b->runs[i].over_limit && b->runs[i].one == i;
  }
  any |= single;
  if (!any) return;
  const char *line[4] = {"left out: the runs that", "do not fit",
                         "(K=1, M=1 among them:", "no speed-ups at all)"};
  char fit[48], what[32];
  snprintf(fit, sizeof fit, "do not fit %s", gp_bench_fit_what(b, what, sizeof what));
  line[1] = fit;
  for (int i = 0; i < (single ? 4 : 2); i++)
    fprintf(f,
            "<text class=\"does-not-fit\" x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
            "fill=\"#a00\">%s</text>\n",
            x, y + 14 * i, line[i]);
}

enum { SVG_W = 720, SVG_H = 480, PL = 72, PR = 168, PT = 64, PB = 64 };

gp_status gp_bench_write_svg(FILE *f, const char *path, const gp_bench *b) {
  static const char *const colour[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                       "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  int ks[512], ms[512];
  int nk = distinct(b, 0, ks), nm = distinct(b, 1, ms);
  /* best[i][j]: the fastest run at (ks[i], ms[j]) as speed-up over one stage, -1 if none */
  double *best = malloc(sizeof(double) * (size_t)(nk * nm));
  if (!best) return GP_ERR(GP_ERR_NOMEM, "out of memory for the plot");
  int several = 0;
  double ymax = 1;
  for (int i = 0; i < nk; i++)
    for (int j = 0; j < nm; j++) {
      double *v = &best[i * nm + j];
      int count = 0;
      *v = -1;
      for (int r = 0; r < b->n_runs; r++)
        if (!b->runs[r].baseline && b->runs[r].k == ks[i] && b->runs[r].m == ms[j]) {
          count++; /* a run that did not fit, or measured against one-stage that did not, is left
                      out */
          if (isfinite(b->runs[r].speedup_single) && b->runs[r].speedup_single > *v)
            *v = b->runs[r].speedup_single;
        }
      several |= count > 1;
      if (*v > ymax) ymax = *v;
      if (ideal(ks[i], ms[j]) > ymax) ymax = ideal(ks[i], ms[j]);
    }
  double ystep = tick_step(ymax * 1.05);
  double ytop = ceil(ymax * 1.05 / ystep) * ystep;
  int kmin = ks[0], kmax = ks[nk - 1] > ks[0] ? ks[nk - 1] : ks[0] + 1;
  double pw = SVG_W - PL - PR, ph = SVG_H - PT - PB;
#define X(k) (PL + ((double)(k)-kmin) / (double)(kmax - kmin) * pw)
#define Y(v) (PT + ph - (v) / ytop * ph)
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" height=\"480\" "
             "viewBox=\"0 0 720 480\" font-family=\"Helvetica, Arial, sans-serif\" "
             "font-size=\"13\">\n");
  fprintf(f, "<rect width=\"720\" height=\"480\" fill=\"white\"/>\n");
  fprintf(f,
          "<text x=\"%d\" y=\"26\" text-anchor=\"middle\" font-size=\"16\" "
          "font-weight=\"bold\">Pipeline speed-up: ",
          PL + (int)pw / 2);
  xml_text(f, b->model);
  fprintf(f, ", batch %" PRId64 "</text>\n", b->batch);
  const int cores = b->per_stage ? b->per_stage : b->threads;
  fprintf(f,
          "<text x=\"%d\" y=\"46\" text-anchor=\"middle\" font-size=\"12\" fill=\"#555\">"
          "samples/s \xc3\xb7 samples/s of K=1, M=1, no re-materialization (%d core%s%s, %s data)"
          "</text>\n",
          PL + (int)pw / 2, cores, cores == 1 ? "" : "s", b->per_stage ? " per stage" : "",
          b->data);
  /* grid and y ticks */
  for (double v = 0; v <= ytop + 1e-9; v += ystep) {
    double y = Y(v);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", PL, y,
            PL + pw, y);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", PL - 8, y + 4, v);
  }
  /* x ticks: every integer K when few, else the K of the sweep */
  for (int k = kmin; k <= kmax; k++) {
    int listed = 0;
    for (int i = 0; i < nk; i++)
      listed |= ks[i] == k;
    if (!listed && kmax - kmin > 16) continue;
    double x = X(k);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#f0f0f0\"/>\n", x, PT,
            x, PT + ph);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", x,
            PT + ph, x, PT + ph + 5);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", x, PT + ph + 20,
            k);
  }
  fprintf(f,
          "<path d=\"M%d %d V%.1f H%.1f\" fill=\"none\" stroke=\"#333\"/>\n"
          "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">stages K</text>\n"
          "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">"
          "speed-up over one stage</text>\n",
          PL, PT, PT + ph, PL + pw, PL + pw / 2, SVG_H - 16, PT + ph / 2, PT + ph / 2);
  /* the ideal K*M/(M+K-1) dashed under the measured lines, then the measured */
  for (int pass = 0; pass < 2; pass++)
    for (int j = 0; j < nm; j++) {
      const char *col = colour[j % 8];
      if (pass == 0) {
        fprintf(f,
                "<polyline class=\"ideal\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                "stroke-dasharray=\"6 4\" opacity=\"0.7\" points=\"",
                col);
        for (int i = 0; i < nk; i++)
          fprintf(f, "%s%.1f,%.1f", i ? " " : "", X(ks[i]), Y(ideal(ks[i], ms[j])));
        fprintf(f, "\"/>\n");
        continue;
      }
      fprintf(f,
              "<polyline class=\"measured\" data-m=\"%d\" fill=\"none\" stroke=\"%s\" "
              "stroke-width=\"2.5\" points=\"",
              ms[j], col);
      const char *sep = "";
      for (int i = 0; i < nk; i++)
        if (best[i * nm + j] >= 0) {
          fprintf(f, "%s%.1f,%.1f", sep, X(ks[i]), Y(best[i * nm + j]));
          sep = " ";
        }
      fprintf(f, "\"/>\n");
      for (int i = 0; i < nk; i++)
        if (best[i * nm + j] >= 0)
          fprintf(f,
                  "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" stroke=\"white\">"
                  "<title>K=%d M=%d: %.2fx</title></circle>\n",
                  X(ks[i]), Y(best[i * nm + j]), col, ks[i], ms[j], best[i * nm + j]);
    }
  /* legend */
  double lx = PL + pw + 24, ly = PT + 8;
  for (int j = 0; j < nm; j++, ly += 22) {
    const char *col = colour[j % 8];
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"2.5\"/>\n<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n"
            "<text x=\"%.1f\" y=\"%.1f\">M = %d</text>\n",
            lx, ly, lx + 28, ly, col, lx + 14, ly, col, lx + 36, ly + 4, ms[j]);
  }
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" "
          "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n"
          "<text x=\"%.1f\" y=\"%.1f\">ideal</text>\n"
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#555\">K\xc2\xb7M / (M+K\xe2\x88\x92"
          "1)</text>\n",
          lx, ly + 6, lx + 28, ly + 6, lx + 36, ly + 10, lx, ly + 28);
  if (several) /* several schedules or re-materializations per (K, M) */
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#555\">each point: the "
            "fastest</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#555\">"
            "schedule and</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" "
            "fill=\"#555\">re-materialization</text>\n",
            lx, ly + 56, lx, ly + 70, lx, ly + 84);
  svg_fit_note(f, b, lx, ly + (several ? 112 : 56));
  fprintf(f, "</svg>\n");
#undef X
#undef Y
  free(best);
  return gp_bench_stream_status(f, path);
}
