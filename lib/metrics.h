/*
 * metrics.h -- the metric registry behind GET /metrics (Prometheus text exposition 0.0.4) and
 * GET /stats (JSON). (The per-second series the dashboard plots is the gateway's: stats_ring.h.)
 *
 * Series are created once (find-or-create under a mutex) and then updated lock-free with relaxed
 * atomics; callers keep the returned pointers, so the hot path never looks anything up.
 */
#ifndef SG_LIB_METRICS_H
#define SG_LIB_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "common.h"

typedef struct st_sg_counter_t {
    _Atomic uint64_t v;
} sg_counter_t;

typedef struct st_sg_gauge_t {
    _Atomic int64_t v;
} sg_gauge_t;

#define SG_HIST_BUCKETS 17
typedef struct st_sg_hist_t {
    _Atomic uint64_t buckets[SG_HIST_BUCKETS]; /* cumulative counts are computed at exposition */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
} sg_hist_t;

/** Upper bounds of the latency histogram buckets, in seconds (the last is +Inf). */
extern const double sg_hist_bounds[SG_HIST_BUCKETS];

static inline void sg_counter_add(sg_counter_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(&c->v, n, memory_order_relaxed);
}
static inline void sg_gauge_add(sg_gauge_t *g, int64_t n)
{
    atomic_fetch_add_explicit(&g->v, n, memory_order_relaxed);
}
static inline void sg_gauge_set(sg_gauge_t *g, int64_t n)
{
    atomic_store_explicit(&g->v, n, memory_order_relaxed);
}
void sg_hist_observe_us(sg_hist_t *h, uint64_t us);

/**
 * Find-or-create a series. `labels` is the label set in exposition syntax without braces
 * (e.g. `backend="local",code="200"`), or "" for none. The family's help text and type are fixed
 * by the first call. The returned pointer lives until sg_metrics_reset().
 */
sg_counter_t *sg_metrics_counter(const char *name, const char *help, const char *labels);
sg_gauge_t *sg_metrics_gauge(const char *name, const char *help, const char *labels);
sg_hist_t *sg_metrics_hist(const char *name, const char *help, const char *labels);

/** Called while /metrics is rendered: lets other modules append computed samples (e.g. backend stats). */
typedef void (*sg_metrics_collector_fn)(sg_buf_t *out, void *arg);
void sg_metrics_add_collector(sg_metrics_collector_fn fn, void *arg);

/** Renders every family in Prometheus text format. */
void sg_metrics_render(sg_buf_t *out);
typedef struct st_sg_jw_t sg_jw_t; /* json.h */
/** Writes every series as one JSON object value: {"name{labels}": value, ...} (histograms as {count,sum}). */
void sg_metrics_render_json(sg_jw_t *w);
/** Frees the registry (at exit). */
void sg_metrics_reset(void);

/** Appends a sample value as the exposition format writes it (integers without a fraction, NaN, +Inf). */
void sg_metrics_render_value(sg_buf_t *out, double v);

#endif
