/*
 * upstream_parse.h -- pure functions for the upstream backend: the replies of a
 * Search-R1-compatible /retrieve (and /access) server turned into per-query DOC lists. No I/O,
 * no global state: the plugin, the unit tests and the fuzz target call these.
 */
#ifndef SG_BACKENDS_UPSTREAM_PARSE_H
#define SG_BACKENDS_UPSTREAM_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "http.h"

/** A DOC (a JSON object, compact, valid UTF-8) and its score. */
typedef sg_http_doc_t sg_up_doc_t;
/** The DOCs of one query (http.h). */
typedef sg_http_docs_t sg_up_list_t;

/**
 * Parses {"result": [[item, ...], ...]} with exactly `n_queries` lists. An item is either the
 * wrapped shape {"document": DOC, "score": s} (return_scores true) or a flat DOC (return_scores
 * false); DOC must be a JSON object. A missing score becomes 1/rank. At most `topk` items are
 * kept per query. With `add_url`, a DOC without a string "url" gets "url": "". `out` must have
 * room for `n_queries` lists; they are filled (and must be freed) even when -1 is returned.
 * Returns 0, or -1 with a reason in `err`.
 */
int sg_upstream_parse_reply(const char *body, size_t len, size_t n_queries, uint32_t topk, int add_url, sg_up_list_t *out,
                            char *err, size_t err_size);

/**
 * Parses an /access reply {"result": [PAGE | null, ...]} with exactly `n_urls` entries: each
 * list gets one DOC (the page object) or none. Same conventions as above.
 */
int sg_upstream_parse_access(const char *body, size_t len, size_t n_urls, sg_up_list_t *out, char *err, size_t err_size);

/** Frees the DOCs of `n` lists (sg_http_docs_free). */
void sg_upstream_lists_free(sg_up_list_t *lists, size_t n);

/**
 * The message of an upstream error reply: FastAPI's {"detail": ...}, searchgate's
 * {"error": ..., "message": ...}, or an excerpt of the raw body. Never fails.
 */
void sg_upstream_error_message(const char *body, size_t len, char *out, size_t out_size);

#endif
