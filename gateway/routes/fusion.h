/*
 * fusion.h -- hybrid fusion routes: a route whose legs are other routes (docs/fusion.md).
 *
 * A fusion route is an entry of the config's backends[] with a "fusion" object instead of a
 * plugin. It fans each query out to every leg through the internal query pipeline (so each leg
 * keeps its own cache, singleflight, admission and metrics) and merges the legs' ranked lists:
 * reciprocal rank fusion, or a weighted sum of per-leg normalised scores.
 *
 * This header has two parts: the parsed settings (filled by config.c) and the merge (pure: no
 * HTTP, no threads, unit-tested on its own). The route itself (HTTP and fan-out) is
 * fusion_route.h.
 */
#ifndef SG_GATEWAY_FUSION_H
#define SG_GATEWAY_FUSION_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;
struct st_sg_config_t;

#define SG_FUSION_MAX_LEGS 8
#define SG_FUSION_DEFAULT_K 60.0
#define SG_FUSION_MIN_DEPTH 10

enum { SG_FUSION_RRF = 0, SG_FUSION_WEIGHTED = 1 };
enum { SG_NORM_MINMAX = 0, SG_NORM_ZSCORE = 1, SG_NORM_NONE = 2 };

typedef struct st_sg_fusion_conf_t {
    char *name;          /* route name: POST /retrieve/<name> */
    uint32_t topk;       /* default topk of the route */
    uint32_t timeout_ms; /* the request's deadline, shared by the legs */
    uint32_t depth;      /* hits asked of each leg; 0 = max(topk of the request, 10) */
    int method;          /* SG_FUSION_RRF or SG_FUSION_WEIGHTED */
    double k;            /* RRF constant */
    uint32_t n_legs;
    char **leg_names;
    int *legs;                        /* indexes into cfg->backends (plugin routes only) */
    double *weights;                  /* per leg; 1 when not given */
    int *normalize;                   /* per leg, weighted only: SG_NORM_* */
    char *identity;                   /* canonical text of the settings ("rrf k=60 legs=a,b w=1,1"): logs, GET / */
    size_t cfg_index;                 /* position in the config's backends[] (for messages) */
    struct st_sg_trace_conf_t *trace; /* the route's query trace (trace.h), or NULL; owned by the config */
} sg_fusion_conf_t;

/* ---- configuration (called by config.c) ---- */

/** True when a backends[] entry is a fusion route (it has a "fusion" key). */
int sg_fusion_conf_is(const struct cJSON *entry);
/**
 * Parses the fusion entry backends[`cfg_index`] into cfg->fusions[cfg->n_fusions++] (the array
 * is sized by the caller). Leg names are resolved later, by sg_fusion_conf_resolve().
 */
int sg_fusion_conf_parse(struct st_sg_config_t *cfg, const struct cJSON *entry, size_t cfg_index, char *err, size_t err_size);
/**
 * Once every backends[] entry is parsed: resolves the legs (known plugin routes, at least two,
 * distinct, never a fusion route: no nesting, so no cycles), checks that no name is used twice
 * across plugin and fusion routes, and that `fallback` and `default_backend` (in `root`) do not
 * name a fusion route.
 */
int sg_fusion_conf_resolve(struct st_sg_config_t *cfg, const struct cJSON *root, char *err, size_t err_size);
void sg_fusion_conf_free(sg_fusion_conf_t *fc);
/** Index of the fusion route called `name` (length `len`) in cfg->fusions, or -1. */
int sg_fusion_conf_find(const struct st_sg_config_t *cfg, const char *name, size_t len);
/** Hits each leg is asked for when the request asks for `topk`. */
uint32_t sg_fusion_depth(const sg_fusion_conf_t *fc, uint32_t topk);

/* ---- the merge (pure) ---- */

/** One hit of a leg: the DOC bytes (a JSON object) and the leg's score (NaN when it had none). */
typedef struct st_sg_fusion_hit_t {
    const char *doc;
    uint32_t len;
    double score;
} sg_fusion_hit_t;

/** One leg's ranked list for one query, best first; `ok` = 0 when the leg failed (it counts as absent). */
typedef struct st_sg_fusion_leg_t {
    const sg_fusion_hit_t *hits;
    uint32_t n;
    int ok;
} sg_fusion_leg_t;

/** One fused hit: the document kept (hit `hit`, 0-based, of leg `leg`) and its fused score. */
typedef struct st_sg_fusion_out_t {
    uint32_t leg, hit;
    double score;
} sg_fusion_out_t;

/**
 * Fuses `fc->n_legs` lists (legs[i] is the answer of fc->legs[i]) into at most `topk` hits in
 * `out` and returns how many. Documents are the same when their identity is (docs/fusion.md):
 * a non-empty "id", else a non-empty "url", else "contents", else the DOC's bytes. A document
 * that appears twice in one leg counts once, at its first (best) position, and the leg's later
 * hits move up one rank. The merged hit keeps the DOC of the first leg (in route order) that
 * returned it. Order: fused score descending; ties by the best rank the document had in any leg,
 * then by the leg that gave that rank (route order).
 */
uint32_t sg_fusion_merge(const sg_fusion_conf_t *fc, const sg_fusion_leg_t *legs, uint32_t topk, sg_fusion_out_t *out);

/**
 * The identity of a DOC as the merge sees it, as a malloc'ed key of `*key_len` bytes whose first
 * byte says which field gave it: 'i' (id), 'u' (url), 'c' (contents) or 'd' (the raw bytes: the
 * DOC is not a JSON object or has none of the three).
 */
char *sg_fusion_doc_identity(const char *doc, size_t len, size_t *key_len);

#endif
