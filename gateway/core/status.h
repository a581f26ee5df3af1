/*
 * status.h -- the HTTP statuses the gateway answers, in one place: their reason phrases and the
 * table the per-status metrics are indexed by, and a route's per-status metrics (status.c). No
 * HTTP machinery here, so every room may count and name a status.
 */
#ifndef SG_GATEWAY_STATUS_H
#define SG_GATEWAY_STATUS_H

#include <stdint.h>
#include "metrics.h"

/* HTTP statuses the per-route and per-endpoint metrics count separately (sg_code_values) */
enum {
    SG_CODE_200,
    SG_CODE_400,
    SG_CODE_401,
    SG_CODE_403,
    SG_CODE_404,
    SG_CODE_405,
    SG_CODE_408,
    SG_CODE_413,
    SG_CODE_422,
    SG_CODE_429,
    SG_CODE_500,
    SG_CODE_502,
    SG_CODE_503,
    SG_CODE_504,
    SG_CODE_OTHER,
    SG_NUM_CODES
};
/** The index into a per-status metrics array of `status`: its SG_CODE_*, else SG_CODE_OTHER. */
int sg_code_index(int status);
/** The status of each SG_CODE_* (0 for SG_CODE_OTHER). */
extern const int sg_code_values[SG_NUM_CODES];

/** Where a route counts its requests, a plugin route (route.h) and a fusion route alike. */
typedef struct st_sg_route_meters_t {
    sg_counter_t *requests[SG_NUM_CODES]; /* searchgate_requests_total by SG_CODE_* */
    sg_counter_t *queries[SG_NUM_CODES];  /* searchgate_queries_total by SG_CODE_* */
    sg_hist_t *latency;                   /* searchgate_request_duration_seconds */
    sg_gauge_t *inflight;                 /* searchgate_inflight_requests */
} sg_route_meters_t;

/** Registers the meters of route `name` (every SG_CODE_* of its per-status counters) into `m`. */
void sg_route_meters_register(sg_route_meters_t *m, const char *name);
/** Counts one request of `n_queries` answered `status` on `m` (by status, and its latency from
 * `start_us`); returns that latency (us). */
uint64_t sg_route_meters_count(const sg_route_meters_t *m, int status, uint32_t n_queries, uint64_t start_us);

/** The reason phrase of an HTTP status the gateway sends ("Error" for one it never sends). */
const char *sg_http_reason(int status);

#endif
