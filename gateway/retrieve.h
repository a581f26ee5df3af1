/*
 * retrieve.h -- POST /retrieve and POST /access (retrieve.c): the HTTP adapter over the query
 * pipeline (query.h).
 */
#ifndef SG_GATEWAY_RETRIEVE_H
#define SG_GATEWAY_RETRIEVE_H

#include <stddef.h>
#include <h2o.h>
#include "server.h"

/** Handles POST /retrieve[/<backend>] and POST /access. Returns 0 (always handled). */
int sg_retrieve_handle(sg_loop_t *loop, h2o_req_t *req, int is_access, const char *backend_name, size_t backend_name_len);

#endif
