/*
 * fusion_route.c -- fusion routes: a batch of queries fanned out to every leg through the query
 * pipeline (query.h), the legs' answers merged (fusion.c), one answer.
 *
 *   sg_fusion_start(): the client's rate limit, charged once for the batch's queries -> one
 *   sg_query_start() per leg, all at once, sharing the deadline -> per query: merge the legs'
 *   lists -> done(result, partial legs)
 *
 * Entry points call sg_fusion_start() the way they call sg_query_start(): POST /retrieve on a
 * fusion route (http/retrieve.c, which also writes X-Searchgate-Fusion-Partial when a leg failed)
 * and MCP tools/call. Nothing here speaks HTTP.
 *
 * Legs are ordinary queries on their routes: each keeps its own cache, singleflight, admission
 * (the client's max_inflight and fair-share weight included) and per-route metrics. They are
 * admitted by the fusion request (sg_query_spec_t.admitted): it charged the client's rate limit
 * once for the batch (the same step as the pipeline's, rate.h) and is the client's request. The fused result is not cached: the
 * legs are, and merging their cached lists costs microseconds (docs/fusion.md has the measurement).
 *
 * What it shares with a query is the pipeline's: the deadline (sg_query_deadline_us), the two 413
 * checks of the answer's size (respond.h: the estimate before any work, the exact size of the fused
 * answer), and its end (outcome.h: counted once on the fusion route and the client, the ring, the
 * debug log, the traces, the error answer, a cancel). What is its own: the fan-out to the legs,
 * the merge, the answer when some or every leg failed.
 *
 * Loop thread only. A fusion query holds one reference on itself until it has answered or was
 * cancelled; a Redis round trip for a global rate limit holds another.
 */
#include "fusion_route.h"
#include "runtime.h"
#include "clients.h"
#include "dispatch.h" /* sg_blob_from_hits */
#include "gen.h"
#include "hmap.h"
#include "json.h"
#include "outcome.h"
#include "provenance.h"
#include "query.h"
#include "rate.h"
#include "respond.h"
#include "trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* per fusion route (index as in its generation's cfg->fusions) */
typedef struct st_fusion_route_t {
    const sg_fusion_conf_t *conf;
    sg_route_meters_t meters; /* its requests by status, their latency, in flight (status.h) */
    sg_provenance_t prov;     /* its settings and its legs' data fingerprints */
} fusion_route_t;

/* The fusion routes of one configuration generation (gen.h). */
struct st_sg_fusion_table_t {
    fusion_route_t *routes;
    size_t n;
};

typedef struct st_sg_fusion_query_t fusion_req_t;

typedef struct st_leg_t {
    fusion_req_t *fr;
    uint32_t index;
    sg_query_t *q; /* while running */
    int status;    /* 0 while running */
    char *type, *message;
    uint32_t retry_after;
    sg_blob_t **blobs;           /* on 200: one per distinct query */
    uint32_t n_cached, cache_on; /* on 200: its cache outcome (provenance) */
} leg_t;

struct st_sg_fusion_query_t {
    int refs;
    sg_fusion_done_fn done;
    void *ctx;
    sg_loop_t *loop;
    sg_gen_t *gen; /* of its route, legs and client (referenced) */
    fusion_route_t *route;
    sg_client_t *client;
    uint32_t n_queries, n_uniq;
    uint32_t *slot_uniq;    /* query -> distinct query */
    const char **uniq_text; /* into arena */
    uint32_t *uniq_len;
    char *arena;
    uint32_t topk;
    char request_id[24];
    uint64_t start_us, deadline_us;
    sg_rate_t rate; /* the client's rate limit (rate.h), while it decides or waits */
    uint32_t legs_pending;
    int answered;
    int shape; /* the bounds of the answer (sg_fusion_spec_t) */
    uint64_t max_response_bytes, envelope_bytes;
    sg_blob_t **fused; /* on 200, while answering: one per distinct query (for the trace) */
    leg_t legs[SG_FUSION_MAX_LEGS];
};

/* ---- start-up ---- */

#define PARTIAL_HELP "Fusion requests answered without a leg, by fusion route, leg and the leg's error type."

/* The error types a leg can fail with: the plugin statuses and the gateway's own refusals. */
static const char *const leg_reasons[] = {
    "timeout",   "unavailable", "overloaded",   "upstream_error",   "internal_error",     "out_of_memory", "invalid_request",
    "too_large", "canceled",    "rate_limited", "budget_exhausted", "budget_unavailable", "error"};

/* searchgate_fusion_partial_total at 0 for every leg and reason, as Prometheus wants counters
 * whose label values are known in advance (a rate() over an absent series is empty, not 0). */
static void register_partial(const sg_fusion_conf_t *fc)
{
    char l[256];
    for (uint32_t i = 0; i < fc->n_legs; ++i)
        for (size_t k = 0; k < sizeof(leg_reasons) / sizeof(leg_reasons[0]); ++k) {
            snprintf(l, sizeof(l), "route=\"%s\",leg=\"%s\",reason=\"%s\"", fc->name, fc->leg_names[i], leg_reasons[k]);
            sg_metrics_counter("searchgate_fusion_partial_total", PARTIAL_HELP, l);
        }
}

/* The route's provenance: its settings and each leg's data fingerprint. */
static void describe(const sg_gen_t *g, fusion_route_t *r)
{
    const sg_fusion_conf_t *fc = r->conf;
    sg_buf_t legs = {0};
    for (uint32_t l = 0; l < fc->n_legs; ++l)
        sg_buf_appendf(&legs, "%s%s:%s", l != 0 ? "," : "", fc->leg_names[l], g->routes[fc->legs[l]].prov.data);
    sg_provenance_init(&r->prov, fc->name, "fusion", "fusion", SG_VERSION, fc->identity, legs.base);
    sg_buf_free(&legs);
}

sg_fusion_table_t *sg_fusion_build(const sg_gen_t *g)
{
    const sg_config_t *cfg = g->cfg;
    sg_fusion_table_t *t = sg_mem_calloc(1, sizeof(*t));
    t->n = cfg->n_fusions;
    t->routes = t->n != 0 ? sg_mem_calloc(t->n, sizeof(*t->routes)) : NULL;
    for (size_t i = 0; i < t->n; ++i) {
        fusion_route_t *r = &t->routes[i];
        r->conf = &cfg->fusions[i];
        sg_route_meters_register(&r->meters, r->conf->name);
        register_partial(r->conf);
        describe(g, r);
    }
    return t;
}

/* Whether `prev` has fusion route `r` with the same settings. */
static int unchanged(const sg_fusion_table_t *prev, const fusion_route_t *r)
{
    for (size_t i = 0; prev != NULL && i < prev->n; ++i)
        if (strcmp(prev->routes[i].conf->name, r->conf->name) == 0)
            return strcmp(prev->routes[i].prov.header, r->prov.header) == 0;
    return 0;
}

void sg_fusion_publish(sg_fusion_table_t *t, const sg_fusion_table_t *prev)
{
    for (size_t i = 0; t != NULL && i < t->n; ++i) {
        sg_provenance_register_metric(&t->routes[i].prov, "fusion", SG_VERSION);
        if (!unchanged(prev, &t->routes[i])) /* said at start-up, and when a reload adds or changes it */
            SG_LOG(SG_LL_INFO, "fusion", "route %s: %s", t->routes[i].conf->name, t->routes[i].conf->identity);
    }
}

size_t sg_fusion_count(const sg_fusion_table_t *t)
{
    return t != NULL ? t->n : 0;
}

sg_provenance_t *sg_fusion_prov(sg_fusion_table_t *t, size_t i)
{
    return &t->routes[i].prov;
}

void sg_fusion_table_free(sg_fusion_table_t *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n; ++i)
        sg_provenance_dispose(&t->routes[i].prov);
    free(t->routes);
    free(t);
}

static const char *method_name(int m)
{
    return m == SG_FUSION_RRF ? "rrf" : "weighted";
}

static const char *norm_name(int n)
{
    return n == SG_NORM_MINMAX ? "minmax" : n == SG_NORM_ZSCORE ? "zscore" : "none";
}

sg_route_t *sg_fusion_access_backend(const sg_gen_t *g, int fi)
{
    const sg_fusion_conf_t *fc = &g->cfg->fusions[fi];
    for (uint32_t i = 0; i < fc->n_legs; ++i)
        if (g->routes[fc->legs[i]].core->serves_access)
            return &g->routes[fc->legs[i]];
    return NULL;
}

void sg_fusion_append_root(const sg_gen_t *g, sg_jw_t *w)
{
    const sg_config_t *cfg = g->cfg;
    for (size_t i = 0; i < cfg->n_fusions; ++i) {
        const sg_fusion_conf_t *fc = &cfg->fusions[i];
        const sg_route_t *acc = sg_fusion_access_backend(g, (int)i);
        char path[512];
        snprintf(path, sizeof(path), "/retrieve/%s", fc->name);
        sg_jw_obj(w);
        sg_jw_kstr(w, "name", fc->name);
        sg_jw_kstr(w, "plugin", "fusion");
        sg_jw_kstr(w, "version", SG_VERSION);
        sg_jw_ku64(w, "topk", fc->topk);
        sg_jw_kstr(w, "retrieve", path);
        sg_jw_kbool(w, "access", acc != NULL);
        if (acc != NULL)
            sg_jw_kstr(w, "access_via", acc->conf->name);
        sg_jw_key(w, "fusion");
        sg_jw_obj(w);
        sg_jw_kstr(w, "method", method_name(fc->method));
        if (fc->method == SG_FUSION_RRF)
            sg_jw_kdouble(w, "k", fc->k);
        if (fc->depth != 0)
            sg_jw_ku64(w, "depth", fc->depth);
        sg_jw_key(w, "routes");
        sg_jw_arr(w);
        for (uint32_t l = 0; l < fc->n_legs; ++l)
            sg_jw_str(w, fc->leg_names[l]);
        sg_jw_end(w);
        sg_jw_key(w, "weights");
        sg_jw_obj(w);
        for (uint32_t l = 0; l < fc->n_legs; ++l)
            sg_jw_kdouble(w, fc->leg_names[l], fc->weights[l]);
        sg_jw_end(w);
        if (fc->method == SG_FUSION_WEIGHTED) {
            sg_jw_key(w, "normalize");
            sg_jw_obj(w);
            for (uint32_t l = 0; l < fc->n_legs; ++l)
                sg_jw_kstr(w, fc->leg_names[l], norm_name(fc->normalize[l]));
            sg_jw_end(w);
        }
        sg_jw_end(w);
        sg_provenance_json(w, &g->fusion->routes[i].prov);
        sg_jw_end(w);
    }
}

/* ---- a request ---- */

static void fusion_req_free(fusion_req_t *fr)
{
    for (uint32_t l = 0; l < fr->route->conf->n_legs; ++l) {
        leg_t *leg = &fr->legs[l];
        for (uint32_t i = 0; leg->blobs != NULL && i < fr->n_uniq; ++i)
            sg_blob_release(leg->blobs[i]);
        free(leg->blobs);
        free(leg->type);
        free(leg->message);
    }
    if (fr->client != NULL)
        sg_clients_release(fr->client);
    sg_gen_release(fr->gen);
    free(fr->slot_uniq);
    free(fr->uniq_text);
    free(fr->uniq_len);
    free(fr->arena);
    free(fr);
}

static void fusion_req_unref(fusion_req_t *fr)
{
    if (--fr->refs == 0)
        fusion_req_free(fr);
}

static void trace_item(const void *ctx, uint32_t d, sg_trace_item_t *out)
{
    const fusion_req_t *fr = ctx;
    sg_blob_t *b = fr->fused != NULL ? fr->fused[d] : NULL;
    *out = (sg_trace_item_t){fr->uniq_text[d], fr->uniq_len[d], b, b != NULL ? SG_SRC_FUSION : SG_SRC_NONE};
}

/* ---- the end of a fusion request (outcome.h): what it is, and its own work to stop ---- */

static void outcome_of(fusion_req_t *fr, sg_outcome_t *o)
{
    fusion_route_t *r = fr->route;
    o->request_id = fr->request_id;
    o->what = "fusion";
    o->client = fr->client;
    o->n_queries = fr->n_queries;
    o->start_us = fr->start_us;
    o->meters = &r->meters;
    o->route_trace = r->conf->trace;
    o->ev = (sg_trace_event_t){.route = r->conf->name,
                               .topk = fr->topk,
                               .n = fr->n_queries,
                               .slot = fr->slot_uniq,
                               .n_distinct = fr->n_uniq,
                               .item = trace_item,
                               .ctx = fr};
}

/* Stops the legs still running (each counted as its own 499 on its route). */
static void stop(fusion_req_t *fr)
{
    for (uint32_t l = 0; l < fr->route->conf->n_legs; ++l) {
        sg_query_t *q = fr->legs[l].q;
        fr->legs[l].q = NULL;
        if (q != NULL)
            sg_query_cancel(q);
    }
}

static void end(void *ctx, sg_outcome_t *o)
{
    stop(ctx);
    outcome_of(ctx, o);
}

static void answer_failure(void *ctx, const sg_query_result_t *res)
{
    fusion_req_t *fr = ctx;
    fr->done(fr->ctx, res, NULL);
}

static void fusion_req_release(void *ctx)
{
    fusion_req_unref(ctx);
}

static const sg_outcome_type_t fusion_type = {end, answer_failure, fusion_req_release};

static void fail(fusion_req_t *fr, int status, const char *type, const char *msg, uint32_t retry_after)
{
    sg_outcome_fail(&fusion_type, fr, &fr->answered, &fr->rate, status, type, msg, retry_after);
}

/* How specific a leg's failure is, for the answer when every leg failed: the client's own error
 * first (retrying cannot help), then a backend bug, an upstream error, a timeout, and last the
 * generic "unavailable / overloaded" 503. */
static int specificity(int status)
{
    if (status >= 400 && status < 500)
        return 6;
    switch (status) {
    case 500:
        return 5;
    case 502:
        return 4;
    case 504:
        return 3;
    case 503:
        return 2;
    default:
        return 1;
    }
}

static void fail_all_legs(fusion_req_t *fr)
{
    const sg_fusion_conf_t *fc = fr->route->conf;
    leg_t *pick = NULL;
    uint32_t retry = 0;
    sg_buf_t msg = {0};
    sg_buf_appendf(&msg, "every leg of fusion route %s failed: ", fc->name);
    for (uint32_t l = 0; l < fc->n_legs; ++l) {
        leg_t *leg = &fr->legs[l];
        if (pick == NULL || specificity(leg->status) > specificity(pick->status))
            pick = leg;
        if (leg->retry_after > retry)
            retry = leg->retry_after;
        sg_buf_appendf(&msg, "%s%s", l != 0 ? "; " : "", leg->message != NULL ? leg->message : "failed");
    }
    sg_buf_appendc(&msg, '\0');
    fail(fr, pick->status, pick->type != NULL ? pick->type : "internal", msg.base, retry);
    sg_buf_free(&msg);
}

/* The score written after a DOC in a scored fragment (`,"score":S}`), NaN when it is null. */
static double blob_score(const sg_blob_t *b, uint32_t i)
{
    static const char prefix[] = ",\"score\":";
    size_t at = (size_t)b->docs[i].off + b->docs[i].len;
    if (at + sizeof(prefix) > b->json_len || memcmp(b->json + at, prefix, sizeof(prefix) - 1) != 0)
        return NAN;
    const char *p = b->json + at + sizeof(prefix) - 1;
    if (*p != '-' && (*p < '0' || *p > '9'))
        return NAN; /* null */
    char tmp[40];
    size_t n = 0;
    while (n < sizeof(tmp) - 1 && p + n < b->json + b->json_len && strchr("0123456789+-.eE", p[n]) != NULL) {
        tmp[n] = p[n];
        ++n;
    }
    tmp[n] = '\0';
    char *end;
    double v = strtod(tmp, &end);
    return end == tmp ? NAN : v;
}

/* Fuses distinct query `u` into a new blob. */
static sg_blob_t *fuse_one(fusion_req_t *fr, uint32_t u)
{
    const sg_fusion_conf_t *fc = fr->route->conf;
    sg_fusion_leg_t legs[SG_FUSION_MAX_LEGS];
    sg_fusion_hit_t *store[SG_FUSION_MAX_LEGS] = {0};
    for (uint32_t l = 0; l < fc->n_legs; ++l) {
        const leg_t *leg = &fr->legs[l];
        legs[l].ok = leg->status == 200;
        legs[l].n = 0;
        legs[l].hits = NULL;
        if (!legs[l].ok)
            continue;
        const sg_blob_t *b = leg->blobs[u];
        store[l] = sg_mem_alloc((b->n_hits != 0 ? b->n_hits : 1) * sizeof(**store));
        for (uint32_t i = 0; i < b->n_hits; ++i) {
            store[l][i].doc = b->json + b->docs[i].off;
            store[l][i].len = b->docs[i].len;
            store[l][i].score = blob_score(b, i);
        }
        legs[l].hits = store[l];
        legs[l].n = b->n_hits;
    }
    sg_fusion_out_t *out = sg_mem_alloc(fr->topk * sizeof(*out));
    uint32_t n = sg_fusion_merge(fc, legs, fr->topk, out);
    sg_hit *hits = sg_mem_alloc((n != 0 ? n : 1) * sizeof(*hits));
    for (uint32_t i = 0; i < n; ++i) {
        const sg_fusion_hit_t *h = &legs[out[i].leg].hits[out[i].hit];
        hits[i].doc = h->doc;
        hits[i].doc_len = h->len;
        hits[i].score = out[i].score;
    }
    sg_hits all = {hits, n};
    sg_blob_t *blob = sg_blob_from_hits(&all);
    free(hits);
    free(out);
    for (uint32_t l = 0; l < fc->n_legs; ++l)
        free(store[l]);
    return blob;
}

/* Whose answer the fused one is, and its bound (respond.h). */
static sg_respond_bound_t bound(const fusion_req_t *fr)
{
    return (sg_respond_bound_t){"fusion route", fr->route->conf->name, fr->max_response_bytes, fr->envelope_bytes};
}

/* The fused answer fits limits.max_response_bytes (0), or the request was answered 413 (-1:
 * `fr` may be freed then). */
static int check_size(fusion_req_t *fr, sg_blob_t **fused)
{
    if (fr->max_response_bytes == 0)
        return 0;
    uint64_t size = fr->envelope_bytes;
    for (uint32_t i = 0; i < fr->n_queries; ++i)
        size += sg_blob_shape_len(fused[fr->slot_uniq[i]], fr->shape);
    sg_respond_bound_t b = bound(fr);
    char msg[400];
    if (sg_respond_check_exact(fr->loop->server, &b, size, 0, fr->n_uniq, msg, sizeof(msg)) == 0)
        return 0;
    fail(fr, 413, "too_large", msg, 0);
    return -1;
}

/* Before any work: the fused answer estimated from the legs' mean DOC size (the largest, halved,
 * as the query pipeline does) fits limits.max_response_bytes (0), or the request was answered 413. */
static int check_estimate(fusion_req_t *fr)
{
    const sg_fusion_conf_t *fc = fr->route->conf;
    uint32_t doc = 0;
    for (uint32_t l = 0; l < fc->n_legs; ++l) {
        uint32_t d = sg_route_doc_bytes(&fr->gen->routes[fc->legs[l]], SG_OP_SEARCH);
        doc = d > doc ? d : doc;
    }
    sg_respond_bound_t b = bound(fr);
    char msg[400];
    if (sg_respond_check_estimate(fr->loop->server, &b, fr->n_queries, "topk", fr->topk, doc, "", msg, sizeof(msg)) == 0)
        return 0;
    fail(fr, 413, "too_large", msg, 0);
    return -1;
}

static void respond(fusion_req_t *fr)
{
    const sg_fusion_conf_t *fc = fr->route->conf;
    uint32_t n_uniq = fr->n_uniq; /* a 413 (check_size) frees fr */
    sg_blob_t **fused = sg_mem_alloc(n_uniq * sizeof(*fused));
    for (uint32_t u = 0; u < n_uniq; ++u)
        fused[u] = fuse_one(fr, u);
    if (check_size(fr, fused) != 0) {
        for (uint32_t u = 0; u < n_uniq; ++u)
            sg_blob_release(fused[u]);
        free(fused);
        return;
    }
    /* the legs that failed: a header for the client, a metric for the operator */
    sg_buf_t partial = {0};
    for (uint32_t l = 0; l < fc->n_legs; ++l) {
        const leg_t *leg = &fr->legs[l];
        if (leg->status == 200)
            continue;
        const char *reason = leg->type != NULL ? leg->type : "error";
        sg_buf_appendf(&partial, "%s%s=%s", partial.len != 0 ? ", " : "", fc->leg_names[l], reason);
        char labels[256];
        snprintf(labels, sizeof(labels), "route=\"%s\",leg=\"%s\",reason=\"%s\"", fc->name, fc->leg_names[l], reason);
        sg_counter_add(sg_metrics_counter("searchgate_fusion_partial_total", PARTIAL_HELP, labels), 1);
    }
    fr->fused = fused; /* for the trace */
    sg_outcome_finish(&fusion_type, fr, &fr->answered, &fr->rate, 200, NULL);
    fr->fused = NULL;
    sg_blob_t **blobs = sg_mem_alloc(fr->n_queries * sizeof(*blobs));
    for (uint32_t i = 0; i < fr->n_queries; ++i)
        blobs[i] = fused[fr->slot_uniq[i]];
    sg_query_result_t res = {.status = 200, .n = fr->n_queries, .blobs = blobs, .request_id = fr->request_id};
    for (uint32_t l = 0; l < fc->n_legs; ++l) { /* the cache outcome over the legs that answered */
        const leg_t *leg = &fr->legs[l];
        res.n_distinct += leg->status == 200 ? fr->n_uniq : 0;
        res.n_cached += leg->status == 200 ? leg->n_cached : 0;
        res.cache_on |= leg->status == 200 && leg->cache_on;
    }
    if (partial.len != 0)
        sg_buf_appendc(&partial, '\0');
    fr->done(fr->ctx, &res, partial.len != 0 ? partial.base : NULL);
    free(blobs);
    sg_buf_free(&partial);
    for (uint32_t u = 0; u < fr->n_uniq; ++u)
        sg_blob_release(fused[u]);
    free(fused);
    fusion_req_unref(fr);
}

static void leg_finished(fusion_req_t *fr)
{
    if (--fr->legs_pending != 0 || fr->answered)
        return;
    for (uint32_t l = 0; l < fr->route->conf->n_legs; ++l)
        if (fr->legs[l].status == 200) {
            respond(fr);
            return;
        }
    fail_all_legs(fr);
}

static void on_leg_done(void *ctx, const sg_query_result_t *res)
{
    leg_t *leg = ctx;
    fusion_req_t *fr = leg->fr;
    leg->q = NULL;
    leg->status = res->status;
    if (res->status == 200) {
        leg->blobs = sg_mem_alloc(fr->n_uniq * sizeof(*leg->blobs));
        for (uint32_t u = 0; u < fr->n_uniq; ++u)
            leg->blobs[u] = sg_blob_ref(res->blobs[u]);
        leg->n_cached = res->n_cached;
        leg->cache_on = (uint32_t)res->cache_on;
    } else {
        leg->type = sg_strdup(res->type != NULL ? res->type : "error");
        leg->message = sg_strdup(res->message != NULL ? res->message : "failed");
        leg->retry_after = res->retry_after_s;
    }
    leg_finished(fr);
}

static void start_legs(fusion_req_t *fr)
{
    const sg_fusion_conf_t *fc = fr->route->conf;
    uint32_t depth = sg_fusion_depth(fc, fr->topk);
    fr->legs_pending = fc->n_legs + 1; /* + 1 while starting: a leg may answer at once (all in L1) */
    uint64_t now = sg_now_us();
    for (uint32_t l = 0; l < fc->n_legs; ++l) {
        leg_t *leg = &fr->legs[l];
        leg->fr = fr;
        leg->index = l;
        sg_query_spec_t spec = {.route = &fr->gen->routes[fc->legs[l]],
                                .client = fr->client,
                                .texts = fr->uniq_text,
                                .lens = fr->uniq_len,
                                .n = fr->n_uniq,
                                .topk = depth,
                                .start_us = now,
                                .deadline_us = fr->deadline_us,
                                .admitted = 1}; /* charged and counted once, as the fusion request */
        sg_query_t *q = sg_query_start(fr->loop, &spec, on_leg_done, leg);
        if (leg->status == 0)
            leg->q = q;
    }
    leg_finished(fr);
}

/* ---- the client's rate limit, charged once for the batch (rate.h) ---- */

static void rate_admitted(void *ctx, int waited)
{
    fusion_req_t *fr = ctx;
    if (waited && atomic_load(&fr->loop->server->stopping)) { /* it waited for its rate limit into the shutdown */
        fail(fr, 503, "unavailable", "the gateway is shutting down", 1);
        return;
    }
    start_legs(fr);
}

static void rate_refused(void *ctx, int status, const char *type, const char *msg, uint32_t retry_after_s)
{
    fail(ctx, status, type, msg, retry_after_s);
}

static int fusion_req_gone(void *ctx)
{
    return ((fusion_req_t *)ctx)->answered;
}

static void fusion_req_hold(void *ctx)
{
    ++((fusion_req_t *)ctx)->refs;
}

static const sg_rate_next_t rate_next = {rate_admitted, rate_refused, fusion_req_gone, fusion_req_hold, fusion_req_release};

void sg_fusion_cancel(sg_fusion_query_t *fr)
{
    if (fr != NULL)
        sg_outcome_cancel(&fusion_type, fr, &fr->answered, &fr->rate);
}

/* whether the distinct text at `item` (&fr->uniq_text[u]) is the key */
static int uniq_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    const fusion_req_t *fr = ud;
    const char *const *text = item;
    return fr->uniq_len[text - fr->uniq_text] == key_len && memcmp(*text, key, key_len) == 0;
}

/* The request's distinct queries: each leg searches a repeated text once, and it is fused once.
 * Copies the texts into fr->arena and maps every query to its distinct one (fr->slot_uniq). */
static void dedup_queries(fusion_req_t *fr, const sg_fusion_spec_t *spec)
{
    size_t total = 0;
    for (uint32_t i = 0; i < spec->n; ++i)
        total += spec->lens[i];
    fr->arena = sg_mem_alloc(total != 0 ? total : 1);
    fr->slot_uniq = sg_mem_alloc(spec->n * sizeof(*fr->slot_uniq));
    fr->uniq_text = sg_mem_alloc(spec->n * sizeof(*fr->uniq_text));
    fr->uniq_len = sg_mem_alloc(spec->n * sizeof(*fr->uniq_len));
    sg_hmap_t distinct; /* items: &fr->uniq_text[u] */
    sg_hmap_init(&distinct, uniq_eq, fr, spec->n);
    for (uint32_t i = 0, at = 0; i < spec->n; at += spec->lens[i++]) {
        char *t = fr->arena + at;
        uint32_t l = spec->lens[i];
        memcpy(t, spec->texts[i], l);
        fr->uniq_text[fr->n_uniq] = t; /* filled in advance: kept only when the text is new */
        fr->uniq_len[fr->n_uniq] = l;
        const char **got = sg_hmap_find_or_insert(&distinct, sg_hmap_hash(t, l), t, l, &fr->uniq_text[fr->n_uniq]);
        fr->slot_uniq[i] = (uint32_t)(got - fr->uniq_text);
        if (fr->slot_uniq[i] == fr->n_uniq)
            ++fr->n_uniq;
    }
    sg_hmap_dispose(&distinct);
}

sg_fusion_query_t *sg_fusion_start(sg_loop_t *loop, const sg_fusion_spec_t *spec, sg_fusion_done_fn done, void *ctx)
{
    fusion_route_t *r = &spec->gen->fusion->routes[spec->route];
    const sg_fusion_conf_t *fc = r->conf;
    fusion_req_t *fr = sg_mem_calloc(1, sizeof(*fr));
    static __thread uint64_t seq;
    snprintf(fr->request_id, sizeof(fr->request_id), "%d-f%llu", loop->id, (unsigned long long)++seq);
    fr->refs = 1;
    fr->done = done;
    fr->ctx = ctx;
    fr->loop = loop;
    fr->gen = sg_gen_ref(spec->gen);
    fr->route = r;
    fr->client = sg_clients_ref(spec->client);
    fr->n_queries = spec->n;
    fr->topk = spec->topk != 0 ? spec->topk : fc->topk;
    fr->start_us = spec->start_us != 0 ? spec->start_us : sg_now_us();
    fr->deadline_us = sg_query_deadline_us(fr->start_us, fc->timeout_ms, spec->deadline_us);
    fr->shape = spec->shape;
    fr->max_response_bytes = spec->max_response_bytes;
    fr->envelope_bytes = spec->envelope_bytes;
    sg_gauge_add(r->meters.inflight, 1);
    dedup_queries(fr, spec);
    ++fr->refs;                  /* the caller's handle stays valid through what follows */
    if (check_estimate(fr) == 0) /* the legs are not charged again; it may wait at most until the deadline */
        sg_rate_charge(&fr->rate, loop, fr->gen->clients, fr->client, fr->n_queries, fr->start_us, fr->deadline_us, &rate_next, fr);
    int answered = fr->answered;
    fusion_req_unref(fr);
    return answered ? NULL : fr;
}

/* ---- what an entry point counts on a fusion route ---- */

void sg_fusion_count_early(sg_gen_t *g, int fi, int status, uint32_t n_queries, uint64_t start_us)
{
    fusion_route_t *r = &g->fusion->routes[fi];
    sg_outcome_count_early(&r->meters, status, n_queries, start_us);
}
