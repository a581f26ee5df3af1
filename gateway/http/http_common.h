/*
 * http_common.h -- the HTTP helpers every handler shares (http_common.c): answers with a body, the JSON error
 * answer, the answer to a request that ends before it became a query, X-Searchgate-Provenance (the
 * HTTP side of core/provenance.h) and request header lookup.
 * Reason phrases and the per-status metrics table are core/status.h's. Loop thread.
 */
#ifndef SG_GATEWAY_HTTP_COMMON_H
#define SG_GATEWAY_HTTP_COMMON_H

#include <stdint.h>
#include <h2o.h>
#include "provenance.h"

struct st_sg_query_result_t;

/** Answers `status` with `body` (copied into the request's pool; NULL: none) as `ctype` (NULL: no
 * Content-Type), after any headers the caller added. */
void sg_send_body(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len);
/** Answers `status` with a JSON body (copied into the request's pool). */
void sg_send_json(h2o_req_t *req, int status, const char *body, size_t len);
/** Answers a JSON error {"error":{...}}; `retry_after_s` > 0 adds a Retry-After header. */
void sg_send_error(h2o_req_t *req, int status, const char *type, const char *msg, uint32_t retry_after_s);
/**
 * The answer to a request that ended before it became a query (malformed, unknown route,
 * unauthorised, empty): 200 with `msg` as the JSON body, else the JSON error `type`/`msg`; a 401
 * says how to authenticate (WWW-Authenticate), and `prov` (NULL: none) adds the route's
 * X-Searchgate-Provenance. The caller counts it on its route first.
 */
void sg_http_answer_early(h2o_req_t *req, int status, const char *type, const char *msg, const sg_provenance_t *prov);
/**
 * Adds X-Searchgate-Provenance to the response of `req` (loop thread): the precomputed part, and
 * from `res` (NULL before a query ran) the cache outcome of an answer (status 200), the request's
 * search parameters and the fallback that answered. Costs one pool allocation and a copy.
 */
void sg_provenance_add_header(h2o_req_t *req, const sg_provenance_t *p, const struct st_sg_query_result_t *res);
/* The operations routes, each counted apart in sg_server_t.http_requests, and every other path */
enum { SG_OPS_ROOT, SG_OPS_HEALTH, SG_OPS_METRICS, SG_OPS_STATS, SG_OPS_DASHBOARD, SG_OPS_ADMIN, SG_OPS_OTHER, SG_OPS_COUNT };
/** Their label values in searchgate_http_requests_total ("root", "health", ...). */
extern const char *const sg_ops_route_names[SG_OPS_COUNT];
/** The operations route `path` names exactly (/, /health, /metrics, /stats, /dashboard,
 * /admin/reload), else SG_OPS_OTHER. */
int sg_ops_route_index(h2o_iovec_t path);
/** Counts a response with `status` of operations route `route` in searchgate_http_requests_total. Loop thread. */
void sg_ops_count_route(h2o_req_t *req, int route, int status);
/** The value of query parameter `name` (the last one when repeated, as Starlette does), or a NULL
 * base when absent. */
h2o_iovec_t sg_http_query_param(h2o_req_t *req, const char *name);
/** The value of request header `name` (`len` bytes, lower case), or {NULL, 0} when absent. */
h2o_iovec_t sg_http_header(h2o_req_t *req, const char *name, size_t len);

#endif
