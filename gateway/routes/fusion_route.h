/*
 * fusion_route.h -- fusion routes as a route type (fusion_route.c): a batch fanned out to the legs
 * through the query pipeline and merged, their GET / entries and /access forwarding. The HTTP
 * adapter is http/retrieve.c's, as for any route. docs/fusion.md.
 */
#ifndef SG_GATEWAY_FUSION_ROUTE_H
#define SG_GATEWAY_FUSION_ROUTE_H

#include "runtime.h"
#include "fusion.h"
#include "json.h"
#include "query.h"

struct st_sg_gen_t;
/** The fusion routes of one configuration generation (gen.h). */
typedef struct st_sg_fusion_table_t sg_fusion_table_t;
/** The fusion routes of `g` (its plugin routes are set up), with their metrics and provenance.
 * Main or reload thread. */
sg_fusion_table_t *sg_fusion_build(const struct st_sg_gen_t *g);
/** `t`'s generation is published (after `prev`'s, or NULL): route info metrics, and a log line per
 * route that is new or changed. */
void sg_fusion_publish(sg_fusion_table_t *t, const sg_fusion_table_t *prev);
void sg_fusion_table_free(sg_fusion_table_t *t);
/** Number of fusion routes of `t` (NULL: 0), and the provenance of route `i`. */
size_t sg_fusion_count(const sg_fusion_table_t *t);
sg_provenance_t *sg_fusion_prov(sg_fusion_table_t *t, size_t i);
/** A running fusion query (opaque). Valid from sg_fusion_start() until done() ran or sg_fusion_cancel(). */
typedef struct st_sg_fusion_query_t sg_fusion_query_t;

/** What to run: like sg_query_spec_t (query.h), on a fusion route. Borrowed for the call only. */
typedef struct st_sg_fusion_spec_t {
    struct st_sg_gen_t *gen;  /* the configuration generation of the route and the client (the query references it) */
    int route;                /* index into gen->cfg->fusions (sg_fusion_conf_find()) */
    sg_client_t *client;      /* who asks (sg_clients_identify()); required */
    const char *const *texts; /* n query texts; not NUL-terminated */
    const uint32_t *lens;     /* n lengths */
    uint32_t n;               /* at least 1 */
    uint32_t topk;            /* 0 = the route's default */
    uint64_t start_us;        /* arrival (sg_now_us() clock); 0 = now */
    uint64_t deadline_us;     /* absolute; 0 = start + the route's timeout_ms; may only shorten it */
    /* the bounds of the fused answer, as in sg_query_spec_t (respond.h): 0 = none */
    int shape;
    uint64_t max_response_bytes;
    uint64_t envelope_bytes;
} sg_fusion_spec_t;

/**
 * The outcome: `res` as sg_query_start()'s (on 200 one fused blob per text, with the fused scores),
 * and `partial`, NULL or the legs missing from a 200 ("leg=reason, ..."; the value of the
 * X-Searchgate-Fusion-Partial header). Everything is borrowed for the duration of the call.
 */
typedef void (*sg_fusion_done_fn)(void *ctx, const sg_query_result_t *res, const char *partial);

/**
 * Starts a fusion query on `loop` (the calling loop thread's): charges the client's rate limit
 * once for the batch, then runs every leg through sg_query_start() and merges their answers.
 * Returns NULL when done() already ran (a rate-limit refusal, every leg answered from L1), else
 * the handle to cancel it with until done() runs. Loop thread.
 */
sg_fusion_query_t *sg_fusion_start(sg_loop_t *loop, const sg_fusion_spec_t *spec, sg_fusion_done_fn done, void *ctx);
/** The caller went away: done() is not called, the legs still running are cancelled (499). */
void sg_fusion_cancel(sg_fusion_query_t *q);

/** Counts a request that ended before its fusion query started (malformed, empty, a bad
 * X-Timeout-Ms) on fusion route `fi` of `g`: its requests, queries and latency by status. */
void sg_fusion_count_early(struct st_sg_gen_t *g, int fi, int status, uint32_t n_queries, uint64_t start_us);
/** The route that answers POST /access on fusion route `fi` of `g`: its first leg with a page store, or NULL. */
sg_route_t *sg_fusion_access_backend(const struct st_sg_gen_t *g, int fi);
/** Writes `g`'s fusion routes as entries of GET /'s "backends" array. */
void sg_fusion_append_root(const struct st_sg_gen_t *g, sg_jw_t *w);

#endif
