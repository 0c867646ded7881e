/*
 * bench_out.h -- the output of rankmap's benchmark programs: one JSON object per line on stdout.
 *
 * Shared by native/linkbench/p2p.cu, mpi_bench.c and nccl_bench.c; read by rankmap.linkbench.native_out
 * (the one reader).  Every line has "rec", one of
 *   info    what the program found (devices, versions, CUDA-awareness)
 *   result  one measurement: raw bytes and nanoseconds (int64); rankmap computes GB/s and medians
 *   note    a fact worth telling the user ("no peer access between GPU 0 and GPU 2")
 *   skip    a part that could not run and why ("device buffers: no CUDA runtime")
 *   error   a failure that stops the program: "what" (the call), "code", "message"
 * Times are nanoseconds, sizes bytes.  Plain C99, also compiles as C++ (nvcc).
 */
#ifndef RANKMAP_BENCH_OUT_H
#define RANKMAP_BENCH_OUT_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define RMB_FORMAT 1              /* bumped when a reader could misread a line */
#define RMB_LINE 8192

typedef struct {
  char buf[RMB_LINE];
  size_t n;
  int first;
} rmb_line;

static inline void rmb_raw(rmb_line *l, const char *s) {
  size_t k = strlen(s);
  if (l->n + k + 2 >= RMB_LINE) k = RMB_LINE - l->n - 3;   /* truncated, still one line */
  memcpy(l->buf + l->n, s, k);
  l->n += k;
  l->buf[l->n] = 0;
}

static inline void rmb_key(rmb_line *l, const char *key) {
  char tmp[96];
  snprintf(tmp, sizeof tmp, "%s\"%s\":", l->first ? "" : ",", key);
  l->first = 0;
  rmb_raw(l, tmp);
}

static inline void rmb_str(rmb_line *l, const char *key, const char *val) {
  char esc[2048];
  size_t j = 0;
  rmb_key(l, key);
  esc[j++] = '"';
  for (const char *p = val ? val : ""; *p && j < sizeof esc - 8; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '"' || c == '\\') { esc[j++] = '\\'; esc[j++] = (char)c; }
    else if (c < 0x20) { j += (size_t)snprintf(esc + j, 8, "\\u%04x", c); }
    else esc[j++] = (char)c;
  }
  esc[j++] = '"';
  esc[j] = 0;
  rmb_raw(l, esc);
}

static inline void rmb_int(rmb_line *l, const char *key, long long v) {
  char tmp[32];
  rmb_key(l, key);
  snprintf(tmp, sizeof tmp, "%lld", v);
  rmb_raw(l, tmp);
}

static inline void rmb_num(rmb_line *l, const char *key, double v) {
  char tmp[40];
  rmb_key(l, key);
  if (isfinite(v)) snprintf(tmp, sizeof tmp, "%.17g", v);
  else snprintf(tmp, sizeof tmp, "null");
  rmb_raw(l, tmp);
}

static inline void rmb_ints(rmb_line *l, const char *key, const long long *v, int n) {
  char tmp[32];
  rmb_key(l, key);
  rmb_raw(l, "[");
  for (int i = 0; i < n; i++) {
    snprintf(tmp, sizeof tmp, "%s%lld", i ? "," : "", v[i]);
    rmb_raw(l, tmp);
  }
  rmb_raw(l, "]");
}

static inline void rmb_begin(rmb_line *l, const char *rec) {
  l->n = 0;
  l->first = 1;
  l->buf[0] = 0;
  rmb_raw(l, "{");
  rmb_str(l, "rec", rec);
}

static inline void rmb_end(rmb_line *l) {
  rmb_raw(l, "}\n");
  fputs(l->buf, stdout);
  fflush(stdout);
}

/* A note ("text") or a skip ("what", "why"): records of words, the last one formatted. */
static inline void rmb_words(const char *rec, const char *what, const char *fmt, va_list ap) {
  char text[1024];
  rmb_line l;
  vsnprintf(text, sizeof text, fmt, ap);
  rmb_begin(&l, rec);
  if (what) rmb_str(&l, "what", what);
  rmb_str(&l, what ? "why" : "text", text);
  rmb_end(&l);
}

static inline void rmb_note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rmb_words("note", NULL, fmt, ap);
  va_end(ap);
}

static inline void rmb_skip(const char *what, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rmb_words("skip", what, fmt, ap);
  va_end(ap);
}

static inline void rmb_error(const char *what, long long code, const char *message) {
  rmb_line l;
  rmb_begin(&l, "error");
  rmb_str(&l, "what", what);
  rmb_int(&l, "code", code);
  rmb_str(&l, "message", message);
  rmb_end(&l);
}

/* Exit statuses the Python side tells apart. */
#define RMB_EXIT_FAILED 3         /* an error record was written */
#define RMB_EXIT_NO_GPU 4         /* no usable CUDA device: nothing could be measured */
#define RMB_EXIT_USAGE 5          /* bad arguments (rankmap's own mistake) */

#endif
