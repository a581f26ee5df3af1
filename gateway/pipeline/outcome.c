/*
 * outcome.c -- the end of a client request the pipeline ran (outcome.h): one record of it in every
 * meter, the dashboard's ring, the debug log and the traces, and the error handed to its done(),
 * for a query (query.c) and a fusion route's request (routes/fusion_route.c) alike. What differs
 * between them comes from the request type's table: how its work stops and what it is, how its
 * done() is called.
 */
#include "outcome.h"
#include "runtime.h"
#include "stats_ring.h"
#include "status.h"

#include <stdio.h>

/* log_level debug: one line per request, whatever its outcome. */
static void log_outcome(const sg_outcome_t *o, int status, const char *type, uint64_t lat)
{
    SG_LOG(SG_LL_DEBUG, "request", "%s %s backend=%s client=%s status=%d%s%s queries=%u%s ms=%.3f", o->request_id, o->what,
           o->ev.route, o->client->id, status, type != NULL ? " error=" : "", type != NULL ? type : "", o->n_queries, o->log_more,
           (double)lat / 1000.0);
}

/* The route's or the client's query trace (trace.h), when either traces this request. A part its
 * caller admitted is not traced: the caller's request is. */
static void trace(sg_outcome_t *o, int status, const char *type, uint64_t lat)
{
    const sg_trace_conf_t *ct = o->client->conf->trace;
    if ((o->route_trace == NULL && ct == NULL) || o->admitted)
        return;
    o->ev.request_id = o->request_id;
    o->ev.client = o->client->id;
    o->ev.status = status;
    o->ev.error = type;
    o->ev.start_us = o->start_us;
    o->ev.latency_us = lat;
    sg_trace_request(o->route_trace, ct, &o->ev);
}

/* Records the outcome in every meter, the ring, the log and the traces; once per request. */
static uint64_t record(sg_outcome_t *o, int status, const char *type)
{
    uint64_t lat = sg_route_meters_count(o->meters, status, o->n_queries, o->start_us);
    trace(o, status, type, lat);
    sg_gauge_add(o->meters->inflight, -1);
    sg_client_t *c = o->client;
    if (!o->admitted) { /* else the caller's request is the client's request */
        sg_counter_add(c->m_requests, 1);
        sg_counter_add(c->m_queries, o->n_queries);
    }
    sg_counter_add(c->m_hits_l1, o->hits_l1);
    sg_counter_add(c->m_hits_redis, o->hits_redis);
    sg_counter_add(c->m_misses, o->misses);
    if (status == 504)
        sg_counter_add(c->m_timeouts, 1);
    if (o->cache_misses != NULL)
        sg_counter_add(o->cache_misses, o->misses);
    sg_ring_record_request(o->n_queries, o->hits_l1 + o->hits_redis, o->misses, status >= 400, lat);
    if (sg_log_enabled(SG_LL_DEBUG))
        log_outcome(o, status, type, lat);
    return lat;
}

/* Ends the request and describes it into `o`, which stays valid as long as the request. */
static uint64_t end(const sg_outcome_type_t *t, void *req, int *answered, sg_rate_t *rate, int status, const char *type,
                    sg_outcome_t *o)
{
    *answered = 1;
    t->end(req, o);
    sg_rate_stop(rate);
    return record(o, status, type);
}

uint64_t sg_outcome_finish(const sg_outcome_type_t *t, void *req, int *answered, sg_rate_t *rate, int status, const char *type)
{
    sg_outcome_t o = {.log_more = ""};
    return end(t, req, answered, rate, status, type, &o);
}

void sg_outcome_fail(const sg_outcome_type_t *t, void *req, int *answered, sg_rate_t *rate, int status, const char *type,
                     const char *msg, uint32_t retry_after_s)
{
    if (*answered)
        return;
    sg_outcome_t o = {.log_more = ""};
    end(t, req, answered, rate, status, type, &o);
    sg_query_result_t res = {
        .status = status, .type = type, .message = msg, .retry_after_s = retry_after_s, .request_id = o.request_id};
    t->answer(req, &res);
    t->release(req);
}

void sg_outcome_cancel(const sg_outcome_type_t *t, void *req, int *answered, sg_rate_t *rate)
{
    if (*answered)
        return;
    sg_outcome_finish(t, req, answered, rate, 499, "client_gone");
    t->release(req);
}

uint64_t sg_outcome_count_early(const sg_route_meters_t *m, int status, uint32_t n_queries, uint64_t start_us)
{
    uint64_t lat = sg_route_meters_count(m, status, n_queries, start_us);
    sg_ring_record_request(n_queries, 0, 0, status >= 400, lat);
    return lat;
}
