/*
 * fusion_conf.h -- the settings of a fusion route (docs/fusion.md): an entry of the config's
 * backends[] with a "fusion" object instead of a plugin. config.c reads them through these
 * functions (implemented by config_fusion.c); the route itself (routes/fusion_route.h) and the
 * merge (routes/fusion.h) use them. Includes nothing of the config: sg_config_t is only named.
 */
#ifndef SG_GATEWAY_FUSION_CONF_H
#define SG_GATEWAY_FUSION_CONF_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;
struct st_sg_config_t;
struct st_sg_trace_conf_t;

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

#endif
