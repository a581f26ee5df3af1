/*
 * request.h -- parsing and validating a /retrieve or /access body, independent of HTTP so it can
 * be unit-tested. docs/protocols.md, "The `/retrieve` contract" is the contract: `queries` (or SkyRL's single `query`),
 * optional `topk` and `return_scores`, unknown fields ignored. searchgate's own optional field:
 * `search_params` (an object the route's backend validates: docs/api.md).
 */
#ifndef SG_GATEWAY_REQUEST_H
#define SG_GATEWAY_REQUEST_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_sg_request_limits_t {
    size_t max_body_bytes;
    uint32_t max_queries;
    uint32_t max_query_bytes;
    uint32_t max_topk;
} sg_request_limits_t;

typedef struct st_sg_parsed_t {
    uint32_t n;    /* number of queries (or URLs) */
    char *arena;   /* every query, back to back (malloc'ed) */
    uint32_t *off; /* n offsets into arena */
    uint32_t *len; /* n lengths */
    uint32_t topk; /* 0 = use the route's default */
    int return_scores;
    char *backend;       /* the optional "backend" field, or NULL */
    char *search_params; /* the optional "search_params" object, serialised compactly, or NULL (absent or null) */
} sg_parsed_t;

/**
 * Parses `body`. Returns 0 on success, or the HTTP status of the failure (400 broken JSON, 422
 * schema violation, 413 over a limit) with a message for the client in `err`. `is_access`
 * parses an /access body ({"urls": [...]}).
 */
int sg_request_parse(const char *body, size_t len, const sg_request_limits_t *lim, int is_access, sg_parsed_t *out, char *err,
                     size_t err_size);
void sg_parsed_free(sg_parsed_t *p);

#endif
