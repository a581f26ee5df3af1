/*
 * metrics.c -- metric registry and its Prometheus/JSON rendering.
 */
#include "metrics.h"
#include "json.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

const double sg_hist_bounds[SG_HIST_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,     0.25,
                                                0.5,    1,     2.5,    5,     10,   30,    60,   INFINITY};

enum { K_COUNTER, K_GAUGE, K_HIST };

typedef struct st_series_t {
    struct st_series_t *next;
    char *labels;
    union {
        sg_counter_t c;
        sg_gauge_t g;
        sg_hist_t h;
    } u;
} series_t;

typedef struct st_family_t {
    struct st_family_t *next;
    char *name;
    char *help;
    int kind;
    series_t *series, **tail;
} family_t;

typedef struct st_collector_t {
    struct st_collector_t *next;
    sg_metrics_collector_fn fn;
    void *arg;
} collector_t;

static pthread_mutex_t reg_mutex = PTHREAD_MUTEX_INITIALIZER;
static family_t *families, **families_tail = &families;
static collector_t *collectors, **collectors_tail = &collectors;

void sg_hist_observe_us(sg_hist_t *h, uint64_t us)
{
    double s = (double)us / 1e6;
    size_t i = 0;
    while (i < SG_HIST_BUCKETS - 1 && s > sg_hist_bounds[i])
        ++i;
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
}

static series_t *get_series(const char *name, const char *help, const char *labels, int kind)
{
    pthread_mutex_lock(&reg_mutex);
    family_t *f;
    for (f = families; f != NULL; f = f->next)
        if (strcmp(f->name, name) == 0)
            break;
    if (f == NULL) {
        f = sg_mem_calloc(1, sizeof(*f));
        f->name = sg_strdup(name);
        f->help = sg_strdup(help);
        f->kind = kind;
        f->tail = &f->series;
        *families_tail = f;
        families_tail = &f->next;
    }
    series_t *s;
    for (s = f->series; s != NULL; s = s->next)
        if (strcmp(s->labels, labels) == 0)
            break;
    if (s == NULL) {
        s = sg_mem_calloc(1, sizeof(*s));
        s->labels = sg_strdup(labels);
        *f->tail = s;
        f->tail = &s->next;
    }
    pthread_mutex_unlock(&reg_mutex);
    return s;
}

sg_counter_t *sg_metrics_counter(const char *name, const char *help, const char *labels)
{
    return &get_series(name, help, labels, K_COUNTER)->u.c;
}

sg_gauge_t *sg_metrics_gauge(const char *name, const char *help, const char *labels)
{
    return &get_series(name, help, labels, K_GAUGE)->u.g;
}

sg_hist_t *sg_metrics_hist(const char *name, const char *help, const char *labels)
{
    return &get_series(name, help, labels, K_HIST)->u.h;
}

void sg_metrics_add_collector(sg_metrics_collector_fn fn, void *arg)
{
    collector_t *c = sg_mem_calloc(1, sizeof(*c));
    c->fn = fn;
    c->arg = arg;
    pthread_mutex_lock(&reg_mutex);
    *collectors_tail = c;
    collectors_tail = &c->next;
    pthread_mutex_unlock(&reg_mutex);
}

void sg_metrics_render_value(sg_buf_t *out, double v)
{
    if (isnan(v))
        sg_buf_appends(out, "NaN");
    else if (isinf(v))
        sg_buf_appends(out, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15)
        sg_buf_appendf(out, "%.0f", v);
    else
        sg_buf_appendf(out, "%.17g", v);
}

static void render_sample(sg_buf_t *out, const char *name, const char *suffix, const char *labels, const char *extra, double v)
{
    sg_buf_appends(out, name);
    sg_buf_appends(out, suffix);
    int has_l = labels != NULL && labels[0] != '\0', has_e = extra != NULL && extra[0] != '\0';
    if (has_l || has_e)
        sg_buf_appendf(out, "{%s%s%s}", has_l ? labels : "", has_l && has_e ? "," : "", has_e ? extra : "");
    sg_buf_appendc(out, ' ');
    sg_metrics_render_value(out, v);
    sg_buf_appendc(out, '\n');
}

void sg_metrics_render(sg_buf_t *out)
{
    pthread_mutex_lock(&reg_mutex);
    for (family_t *f = families; f != NULL; f = f->next) {
        static const char *types[] = {"counter", "gauge", "histogram"};
        sg_buf_appendf(out, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, types[f->kind]);
        for (series_t *s = f->series; s != NULL; s = s->next) {
            switch (f->kind) {
            case K_COUNTER:
                render_sample(out, f->name, "", s->labels, NULL, (double)atomic_load(&s->u.c.v));
                break;
            case K_GAUGE:
                render_sample(out, f->name, "", s->labels, NULL, (double)atomic_load(&s->u.g.v));
                break;
            case K_HIST: {
                uint64_t cum = 0;
                for (size_t i = 0; i < SG_HIST_BUCKETS; ++i) {
                    char le[48];
                    cum += atomic_load(&s->u.h.buckets[i]);
                    if (isinf(sg_hist_bounds[i]))
                        snprintf(le, sizeof(le), "le=\"+Inf\"");
                    else
                        snprintf(le, sizeof(le), "le=\"%g\"", sg_hist_bounds[i]);
                    render_sample(out, f->name, "_bucket", s->labels, le, (double)cum);
                }
                render_sample(out, f->name, "_sum", s->labels, NULL, (double)atomic_load(&s->u.h.sum_us) / 1e6);
                render_sample(out, f->name, "_count", s->labels, NULL, (double)atomic_load(&s->u.h.count));
            } break;
            }
        }
    }
    collector_t *cs = collectors;
    pthread_mutex_unlock(&reg_mutex);
    /* collectors are append-only and never freed while serving, so walk them unlocked */
    for (collector_t *c = cs; c != NULL; c = c->next)
        c->fn(out, c->arg);
}

void sg_metrics_render_json(sg_jw_t *w)
{
    pthread_mutex_lock(&reg_mutex);
    sg_jw_obj(w);
    sg_buf_t key = {0};
    for (family_t *f = families; f != NULL; f = f->next) {
        for (series_t *s = f->series; s != NULL; s = s->next) {
            key.len = 0;
            sg_buf_appends(&key, f->name);
            if (s->labels[0] != '\0') {
                sg_buf_appendc(&key, '{');
                sg_buf_appends(&key, s->labels);
                sg_buf_appendc(&key, '}');
            }
            sg_jw_key(w, key.base);
            switch (f->kind) {
            case K_COUNTER:
                sg_jw_u64(w, atomic_load(&s->u.c.v));
                break;
            case K_GAUGE:
                sg_jw_i64(w, atomic_load(&s->u.g.v));
                break;
            case K_HIST:
                sg_jw_obj(w);
                sg_jw_ku64(w, "count", atomic_load(&s->u.h.count));
                sg_jw_kdouble(w, "sum", (double)atomic_load(&s->u.h.sum_us) / 1e6);
                sg_jw_end(w);
                break;
            }
        }
    }
    sg_buf_free(&key);
    sg_jw_end(w);
    pthread_mutex_unlock(&reg_mutex);
}

void sg_metrics_reset(void)
{
    pthread_mutex_lock(&reg_mutex);
    while (families != NULL) {
        family_t *f = families;
        families = f->next;
        while (f->series != NULL) {
            series_t *s = f->series;
            f->series = s->next;
            free(s->labels);
            free(s);
        }
        free(f->name);
        free(f->help);
        free(f);
    }
    families_tail = &families;
    while (collectors != NULL) {
        collector_t *c = collectors;
        collectors = c->next;
        free(c);
    }
    collectors_tail = &collectors;
    pthread_mutex_unlock(&reg_mutex);
}
