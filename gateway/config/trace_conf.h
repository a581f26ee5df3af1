/*
 * trace_conf.h -- the "trace" object of a route or a client (docs/traces.md), as config.c reads
 * it; the trace files and their writer are pipeline/trace.h.
 */
#ifndef SG_GATEWAY_TRACE_CONF_H
#define SG_GATEWAY_TRACE_CONF_H

#include <stddef.h>
#include <stdint.h>
#include "cfg.h"

typedef struct st_sg_trace_sink_t sg_trace_sink_t; /* a trace file (pipeline/trace.c) */

/* The fields a trace may write (config "fields"; docs/traces.md describes each). */
enum {
    SG_TRACE_F_TIME = 1u << 0,       /* "time": arrival, ISO 8601 UTC with milliseconds */
    SG_TRACE_F_REQUEST = 1u << 1,    /* "request", "i", "n": request id, position in the batch, batch size */
    SG_TRACE_F_CLIENT = 1u << 2,     /* "client": the client id (never a key) */
    SG_TRACE_F_ROUTE = 1u << 3,      /* "route" */
    SG_TRACE_F_OP = 1u << 4,         /* "op": "retrieve" or "access" */
    SG_TRACE_F_TOPK = 1u << 5,       /* "topk" */
    SG_TRACE_F_PARAMS = 1u << 6,     /* "params": canonical search parameters, when the request had any */
    SG_TRACE_F_QUERY = 1u << 7,      /* "query": the text */
    SG_TRACE_F_QUERY_HASH = 1u << 8, /* "query_hash": 16 hex digits of SHA-256(text) */
    SG_TRACE_F_HITS = 1u << 9,       /* "hits": number of results */
    SG_TRACE_F_IDS = 1u << 10,       /* "ids": each result's "id" (else its "url", else null) */
    SG_TRACE_F_SCORES = 1u << 11,    /* "scores" */
    SG_TRACE_F_EMPTY = 1u << 12,     /* "empty": results, but no text in any of them */
    SG_TRACE_F_DOCS = 1u << 13,      /* "docs": the documents themselves */
    SG_TRACE_F_CACHE = 1u << 14,     /* "cache": where the answer came from (+ "fallback") */
    SG_TRACE_F_STATUS = 1u << 15,    /* "status" (+ "error": the error type) */
    SG_TRACE_F_MS = 1u << 16,        /* "ms": the request's latency */
};
/** Every field but "docs" and "query_hash": the default. */
#define SG_TRACE_F_DEFAULT (((SG_TRACE_F_MS << 1) - 1) & ~(uint32_t)(SG_TRACE_F_DOCS | SG_TRACE_F_QUERY_HASH))

/** One "trace" object of the config (a route's or a client's). Read-only once the gateway serves. */
typedef struct st_sg_trace_conf_t {
    char *path;            /* the file written (a directory in the config: <dir>/<name>.jsonl) */
    char *where;           /* the config location, for messages ("backends[0].trace") */
    double sample;         /* share of requests traced, 0..1 */
    uint32_t fields;       /* SG_TRACE_F_* */
    uint64_t rotate_bytes; /* rotate before a file grows past this; 0 = never */
    uint32_t rotate_s;     /* rotate a file this old; 0 = never */
    uint32_t keep;         /* rotated files kept; 0 = all */
    uint64_t buffer_bytes; /* bound of the file's buffer (records waiting for the writer) */
    sg_trace_sink_t *sink; /* the file, set by sg_trace_configure() */
} sg_trace_conf_t;

/**
 * Reads `parent`'s "trace" key (absent or null: `*out` stays NULL) into a new conf. `name` makes
 * the file name when the path is a directory (ends with '/' or is one): <dir>/<name>.jsonl.
 * Errors name the key and value (config.c's convention).
 */
int sg_trace_conf_parse(sg_cfg_t *c, const cJSON *parent, const char *base_dir, const char *name, sg_trace_conf_t **out);
/** Traces that name the same file share it: they must agree on rotation, keep and buffer. */
int sg_trace_conf_check_shared(sg_trace_conf_t *const *all, size_t n, char *err, size_t err_size);
void sg_trace_conf_free(sg_trace_conf_t *t);

#endif
