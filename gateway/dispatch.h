/*
 * dispatch.h -- how a query's misses reach a backend (dispatch.c): singleflight across loops,
 * calls of at most `chunk` queries, fair admission, and the result blobs built from plugin hits.
 */
#ifndef SG_GATEWAY_DISPATCH_H
#define SG_GATEWAY_DISPATCH_H

#include <stddef.h>
#include "sg_backend.h"
#include "blob.h"
#include "server.h"

typedef struct st_sg_query_t sg_query_t;

/** Builds a result blob from a plugin's hits (copies everything; refs = 1). Any thread. */
sg_blob_t *sg_blob_from_hits(const sg_hits *hits);
/** Registers the per-loop receivers. */
void sg_dispatch_init_loop(sg_loop_t *loop);
void sg_dispatch_init(void);
void sg_dispatch_dispose(void);
/** Number of flights in the table (for tests and /stats). */
size_t sg_dispatch_flights(void);

/* ---- steps of the query pipeline (query.c, budget.c): internal ---- */

/**
 * Sends the unanswered distinct queries of `q` to its serving backend: joins identical in-flight
 * queries (singleflight), groups the rest into calls of at most `chunk` queries and admits them.
 */
void sg__dispatch_misses(sg_query_t *q);
/** Detaches `q` from every flight it waits on (query finished or went away). Loop thread. */
void sg__dispatch_abandon(sg_query_t *q);

#endif
