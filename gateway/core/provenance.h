/*
 * provenance.h -- what produced an answer: the route, its type, its plugin and a fingerprint of
 * the data behind it (the plugin's identity(): index and corpus fingerprints, model identity and
 * precision, the route's search settings, a rerank stage; a fusion route's settings and its legs'
 * fingerprints). Computed once at start-up (provenance.c); every /retrieve and /access answer of
 * a route carries it in the X-Searchgate-Provenance header with the answer's cache outcome
 * (written by http/http_common.c's sg_provenance_add_header), GET /
 * shows it per route, and /metrics has it as the info metric searchgate_route_info.
 *
 * Header value (docs/api.md): "; "-separated key=value pairs, in this order:
 *
 *   route=<name>; type=plugin|rerank|fusion; plugin=<kind>/<version>; data=<16 hex>
 *   [; legs=<route>:<data>,...]                      a fusion route's legs
 *   [; cache=all|partial|none|off; cached=<h>/<n>]   answers (200) only
 *   [; params=<canonical search_params>]             a request with search parameters
 *   [; fallback=<route>:<data>]                      the route's fallback answered some queries
 */
#ifndef SG_GATEWAY_PROVENANCE_H
#define SG_GATEWAY_PROVENANCE_H

#include <stddef.h>

typedef struct st_sg_jw_t sg_jw_t;

/** A route's provenance: built with its configuration generation, read-only afterwards (any thread). */
typedef struct st_sg_provenance_t {
    char *route;      /* the route's name */
    const char *type; /* "plugin", "rerank" or "fusion" (static) */
    char *plugin;     /* plugin kind and version: "bm25/1.0.0" ("fusion/<gateway version>") */
    char *identity;   /* the text the fingerprint is taken of (GET /, the info metric) */
    char data[17];    /* 16 hex digits: the first 8 bytes of SHA-256(identity) */
    char *header;     /* the header's fixed part, "route=...; type=...; plugin=...; data=...[; legs=...]" */
    size_t header_len;
    struct st_sg_gauge_t *info; /* its searchgate_route_info series, once registered */
} sg_provenance_t;

/**
 * Fills `p` (main thread, start-up). `identity` is what the data fingerprint covers; `legs` is
 * NULL or the legs' "<route>:<data>" list of a fusion route (added to the header and the identity).
 * Strings are copied; characters a header value cannot carry become '_'.
 */
void sg_provenance_init(sg_provenance_t *p, const char *route, const char *type, const char *plugin_kind,
                        const char *plugin_version, const char *identity, const char *legs);
void sg_provenance_dispose(sg_provenance_t *p);
/** Registers searchgate_route_info{route,type,plugin,version,data,identity} = 1 (when its configuration
 * generation is published; a reload sets the series of routes it removed or replaced to 0). */
void sg_provenance_register_metric(sg_provenance_t *p, const char *plugin_kind, const char *plugin_version);
/** Writes the member `"provenance": {"type", "plugin", "data", "identity"}` of a GET / route entry. */
void sg_provenance_json(sg_jw_t *w, const sg_provenance_t *p);
#endif
