/*
 * gpm_read.c -- one GPU's NVML GPM read in one C call: the native twin of GpmSource.read
 * (src/rankmap/capture/sampler.py), which stays the reference and the fallback.
 *
 * Why: at 10 Hz the sampler thread sleeps 100 ms between reads, and after a sleep every Python
 * step is cold; on an H200 VM the Python around the two driver calls (ctypes marshalling, the
 * metric struct reads, the objects it makes) cost 0.07-0.08 ms CPU per GPU per read, a quarter of
 * the 0.3 ms target, above the driver's own floor. Here that part is a few microseconds.
 *
 * No nvml.h and no libnvidia-ml link: Python hands over the addresses of the two entry points
 * it already resolved (pynvml's nvmlGpmSampleGet and nvmlGpmMetricsGet; a stand-in's callbacks in
 * tests), the device handle and two sample handles. The request of nvmlGpmMetricsGet is declared
 * below as NVML's ABI has it (tests compare every size and offset with pynvml's ctypes structs).
 *
 * A read does exactly what GpmSource.read does, in the same order and with the same arithmetic
 * (doubles, no contraction: built with -ffp-contract=off): snapshot into the older buffer, timed by
 * CLOCK_MONOTONIC before and after (the midpoint is the snapshot's instant); a stalled snapshot
 * (call > snap_max_ns) is not used as an end point unless the last good one is snap_max_gap_ns
 * old or nothing was read yet; the four rates x unit x interval are added to the totals; a metric
 * that never answered is "not offered" (-1 -> 0), one that answered and then fails counts a gap.
 * An entry point's failure returns its NVML code with the state untouched (Python raises it, as
 * pynvml would); times are int64 ns, totals are rounded half to even (Python's round()).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#define RM_EXPORT __attribute__((visibility("default")))
#define NMET 4

typedef int (*sample_get_fn)(void *device, void *sample);  /* nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t, nvmlGpmSample_t) */
typedef int (*metrics_get_fn)(void *request);              /* nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *) */
typedef int64_t (*clock_fn)(void);                         /* tests: a scripted clock instead of CLOCK_MONOTONIC */

/* nvmlGpmMetric_t and nvmlGpmMetricsGet_t (nvml.h); the metrics array is as long as the caller says */
struct gpm_metric {
    unsigned int metric_id;
    unsigned int nvml_return;
    double value;
    struct { char *short_name, *long_name, *unit; } info;
};
struct gpm_request {
    unsigned int version;
    unsigned int num_metrics;
    void *sample1, *sample2;
    struct gpm_metric metrics[];
};

/* what Python reads after a read: the four totals, which of them count, and the source's counts */
enum { OUT_TX, OUT_RX, OUT_PTX, OUT_PRX, OUT_OKMASK, OUT_GAPS, OUT_DISCARDED, OUT_N };

struct gpm_reader {
    int64_t out[OUT_N];
    sample_get_fn sample_get;
    metrics_get_fn metrics_get;
    clock_fn clock;
    void *device, *prev, *cur;
    int64_t prev_t, snap_max_ns, snap_max_gap_ns;
    int have_last;
    signed char ok[NMET];   /* -1 until the metric first answers, then 1 (counted) or 0 (not offered) */
    unsigned int ids[NMET];
    double unit[NMET], total[NMET];
    unsigned int version;
    struct gpm_request req; /* last: its metrics follow */
};

static int64_t now_ns(const struct gpm_reader *r)
{
    struct timespec ts;
    if (r->clock)
        return r->clock();
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A reader of one GPU whose first snapshot (into sample_a, at prev_t ns) Python already took.
 * slots: the length of the request's metrics array (pynvml's NVML_GPM_METRIC_MAX, at least 4). */
RM_EXPORT struct gpm_reader *rm_gpm_open(void *sample_get, void *metrics_get, void *clock, void *device,
                                         void *sample_a, void *sample_b, int64_t prev_t, const unsigned int *ids,
                                         const double *units, int64_t snap_max_ns, int64_t snap_max_gap_ns,
                                         unsigned int version, unsigned int slots)
{
    struct gpm_reader *r;
    if (!sample_get || !metrics_get || !sample_a || !sample_b)
        return NULL;
    if (slots < NMET)
        slots = NMET;
    r = calloc(1, sizeof *r + (size_t)slots * sizeof(struct gpm_metric));
    if (!r)
        return NULL;
    r->sample_get = (sample_get_fn)sample_get;
    r->metrics_get = (metrics_get_fn)metrics_get;
    r->clock = (clock_fn)clock;
    r->device = device;
    r->prev = sample_a;
    r->cur = sample_b;
    r->prev_t = prev_t;
    r->snap_max_ns = snap_max_ns;
    r->snap_max_gap_ns = snap_max_gap_ns;
    r->version = version;
    for (int i = 0; i < NMET; i++) {
        r->ok[i] = -1;
        r->ids[i] = ids[i];
        r->unit[i] = units[i];
    }
    return r;
}

RM_EXPORT int64_t *rm_gpm_out(struct gpm_reader *r) { return r->out; }

RM_EXPORT void rm_gpm_close(struct gpm_reader *r) { free(r); }

/* 0: out holds new totals; -1: a stalled snapshot, discarded (the last totals stand);
 * > 0: the NVML code an entry point returned (nothing changed). */
RM_EXPORT int rm_gpm_read(struct gpm_reader *r)
{
    struct gpm_request *g = &r->req;
    int64_t t_a, t_b, now;
    double dt;
    int rc, mask = 0;

    t_a = now_ns(r);
    rc = r->sample_get(r->device, r->cur);
    if (rc != 0)
        return rc;
    t_b = now_ns(r);
    now = t_a + (t_b - t_a) / 2;  /* == (t_a + t_b) // 2 for t_b >= t_a, without overflow */
    if (t_b - t_a > r->snap_max_ns && now - r->prev_t < r->snap_max_gap_ns && r->have_last) {
        r->out[OUT_DISCARDED]++;
        return -1;
    }
    dt = (double)(now - r->prev_t) / 1e9;
    g->version = r->version;
    g->num_metrics = NMET;
    for (int i = 0; i < NMET; i++)
        g->metrics[i].metric_id = r->ids[i];
    g->sample1 = r->prev;
    g->sample2 = r->cur;
    rc = r->metrics_get(g);
    if (rc != 0)
        return rc;
    for (int i = 0; i < NMET; i++) {
        const struct gpm_metric *m = &g->metrics[i];
        if (m->nvml_return != 0) {
            if (r->ok[i] < 0)
                r->ok[i] = 0;       /* not offered here: None from now on */
            else if (r->ok[i] > 0)
                r->out[OUT_GAPS]++; /* an interval whose bytes are missing */
            continue;
        }
        if (r->ok[i] < 0)
            r->ok[i] = 1;
        if (r->ok[i] > 0 && m->value > 0)
            r->total[i] += m->value * r->unit[i] * dt;
    }
    void *t = r->prev;
    r->prev = r->cur;
    r->cur = t;
    r->prev_t = now;
    r->have_last = 1;
    for (int i = 0; i < NMET; i++) {
        r->out[OUT_TX + i] = r->ok[i] > 0 ? (int64_t)llrint(r->total[i]) : 0;
        mask |= (r->ok[i] > 0) << i;
    }
    r->out[OUT_OKMASK] = mask;
    return 0;
}

/* The ABI as this file declares it, for the tests to hold against pynvml's ctypes structs:
 * sizeof metric, its offsets (metricId, nvmlReturn, value, metricInfo), sizeof the request head,
 * its offsets (version, numMetrics, sample1, sample2, metrics). */
RM_EXPORT int rm_gpm_layout(int64_t *out, int n)
{
    const int64_t v[] = {
        sizeof(struct gpm_metric), offsetof(struct gpm_metric, metric_id), offsetof(struct gpm_metric, nvml_return),
        offsetof(struct gpm_metric, value), offsetof(struct gpm_metric, info), sizeof(struct gpm_request),
        offsetof(struct gpm_request, version), offsetof(struct gpm_request, num_metrics),
        offsetof(struct gpm_request, sample1), offsetof(struct gpm_request, sample2),
        offsetof(struct gpm_request, metrics),
    };
    int k = (int)(sizeof v / sizeof v[0]);
    for (int i = 0; i < k && i < n; i++)
        out[i] = v[i];
    return k;
}
