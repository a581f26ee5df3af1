/*
 * fusion_route.h -- the HTTP side of fusion routes (fusion_route.c): POST /retrieve fanned out to
 * the legs through the query pipeline, GET / entries, /access forwarding. docs/fusion.md.
 */
#ifndef SG_GATEWAY_FUSION_ROUTE_H
#define SG_GATEWAY_FUSION_ROUTE_H

#include "server.h"
#include "fusion.h"
#include "request.h"

/** Registers the fusion routes' metrics. Main thread, once, after the plugin routes are loaded. */
void sg_fusion_init(void);
void sg_fusion_dispose(void);
/**
 * Handles POST /retrieve on fusion route `fi` (an index into cfg->fusions); `pr` is the parsed
 * body: the caller still frees it, but its arena may have been taken (pr->arena set to NULL).
 * Always answers. Loop thread.
 */
int sg_fusion_handle(sg_loop_t *loop, h2o_req_t *req, int fi, sg_parsed_t *pr, uint64_t start_us);
/** The route that answers POST /access on fusion route `fi`: its first leg with a page store, or NULL. */
sg_backend_t *sg_fusion_access_backend(int fi);
/** Appends the fusion routes to GET /'s "backends" array (each entry preceded by a comma). */
void sg_fusion_append_root(sg_buf_t *b);

#endif
