/*
 * retrieve.h -- POST /retrieve and POST /access (retrieve.c): the HTTP adapter over the query
 * pipeline (query.h).
 */
#ifndef SG_GATEWAY_RETRIEVE_H
#define SG_GATEWAY_RETRIEVE_H

#include <stddef.h>
#include <h2o.h>
#include "runtime.h"

#define SG_ACCESS_NO_PAGES_HELP "POST /access requests answered with a null page per URL because the route has no page store."

struct st_sg_gen_t;
/**
 * Registers searchgate_access_no_page_store_total at 0 for every route of `g` without a page store
 * (plugin and fusion routes) and warns when the default route has none (at start-up, `prev` NULL,
 * or when a reload made it so): RLinf WideSeek and ASearcher call POST /access on it and would
 * show the model empty pages. When `g` is published (or checked, --check).
 */
void sg_retrieve_init(const struct st_sg_gen_t *prev, const struct st_sg_gen_t *g);

/** Handles POST /retrieve[/<backend>] and POST /access. Returns 0 (always handled). */
int sg_retrieve_handle(sg_loop_t *loop, h2o_req_t *req, int is_access, const char *backend_name, size_t backend_name_len);

#endif
