/*
 * qdrant_parse.h -- pure functions for the qdrant backend: the batch query body, and the
 * replies of Qdrant's REST API (docs/protocols.md, "Qdrant") turned into DOCs. No I/O, no global state:
 * the plugin, the unit tests and the fuzz target call these.
 */
#ifndef SG_BACKENDS_QDRANT_PARSE_H
#define SG_BACKENDS_QDRANT_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "http.h"

/** Optional search parameters of every query of a batch. */
typedef struct st_sg_qdrant_params_t {
    int has_hnsw_ef;
    uint32_t hnsw_ef;
    int has_exact;
    int exact;
    int has_score_threshold;
    double score_threshold;
    const char *using_vector; /* named vector, or NULL for the default (unnamed) one */
} sg_qdrant_params_t;

/** A point as a DOC: its payload object plus "id"/"contents"/"url" when missing, and its score. */
typedef sg_http_doc_t sg_qd_doc_t;
/** The DOCs of one query of a batch (http.h). */
typedef sg_http_docs_t sg_qd_list_t;

/**
 * Appends the body of POST /collections/{c}/points/query/batch for `n` vectors of `dim` floats:
 * {"searches":[{"query":[...],"limit":limit,"with_payload":true[,"params":{...}]
 * [,"score_threshold":x][,"using":"name"]}, ...]}.
 */
void sg_qdrant_build_batch(sg_buf_t *b, const float *vecs, size_t n, int dim, uint32_t limit, const sg_qdrant_params_t *p);

/**
 * Parses the 200 reply of a batch query: {"result":[{"points":[ScoredPoint...]}, ...],
 * "status":"ok", ...} with exactly `n_queries` entries. Each point becomes a DOC: its payload
 * (an object; {} when absent or null) with "id" (the point id as a string) added when the
 * payload has no "id", "contents": "" when it has no string "contents", and "url": "" when it
 * has no string "url"; score = the point's score. At most `topk` per query. `out` has room for
 * `n_queries` lists, filled (and to be freed) even when -1 is returned.
 */
int sg_qdrant_parse_batch(const char *body, size_t len, size_t n_queries, uint32_t topk, sg_qd_list_t *out, char *err,
                          size_t err_size);
/** Frees the DOCs of `n` lists (sg_http_docs_free). */
void sg_qdrant_lists_free(sg_qd_list_t *lists, size_t n);

/** Qdrant's error text: {"status":{"error":"..."}} or a plain-text body (401). Never fails. */
void sg_qdrant_error_message(const char *body, size_t len, char *out, size_t out_size);

/** What GET /collections/{name} says about the vectors a query must match. */
typedef struct st_sg_qdrant_collection_t {
    long size;         /* vector size, -1 when unknown */
    char distance[16]; /* "Cosine", "Dot", "Euclid", "Manhattan" or "" */
    char status[16];   /* "green", "yellow", "red", "grey" or "" */
    long points;       /* points_count, -1 when absent */
} sg_qdrant_collection_t;

/**
 * Parses the collection info reply. `vector_name` NULL means the default vector: `vectors` is
 * {"size":...,"distance":...}; otherwise `vectors` is a map of names to such objects.
 */
int sg_qdrant_parse_collection(const char *body, size_t len, const char *vector_name, sg_qdrant_collection_t *out, char *err,
                               size_t err_size);

#endif
