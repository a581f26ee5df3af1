/*
 * config_fusion.c -- the config loader's reader of fusion routes (fusion_conf.h): the entries of
 * backends[] with a "fusion" object, read and validated at start-up and at each reload. It is a
 * part of the loader (it reads the whole config: the limits, the plugin routes, the traces), so it
 * implements fusion_conf.h rather than owning it: fusion_conf.h includes nothing of the config,
 * and config.c and this file both stand on it. The merge that uses the settings is routes/fusion.c.
 */
#include "fusion_conf.h"
#include "config.h"
#include "common.h"
#include "cfg.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sg_fusion_conf_is(const cJSON *entry)
{
    return cJSON_IsObject(entry) && cJSON_GetObjectItemCaseSensitive(entry, "fusion") != NULL;
}

static const char *const method_names[] = {"rrf", "weighted", NULL};
static const char *const norm_names[] = {"minmax", "zscore", "none", NULL};

static int leg_index(const sg_fusion_conf_t *fc, const char *name)
{
    for (uint32_t i = 0; i < fc->n_legs; ++i)
        if (strcmp(fc->leg_names[i], name) == 0)
            return (int)i;
    return -1;
}

static int parse_norm_value(sg_cfg_t *c, const char *key, const cJSON *v, int *out)
{
    for (int i = 0; cJSON_IsString(v) && norm_names[i] != NULL; ++i)
        if (strcmp(v->valuestring, norm_names[i]) == 0) {
            *out = i;
            return 0;
        }
    return sg_cfg_fail(c, key, v, "expected \"minmax\", \"zscore\" or \"none\"");
}

static void build_identity(sg_fusion_conf_t *fc)
{
    sg_buf_t b = {0};
    sg_buf_appendf(&b, "%s", method_names[fc->method]);
    if (fc->method == SG_FUSION_RRF)
        sg_buf_appendf(&b, " k=%.17g", fc->k);
    sg_buf_appendf(&b, " depth=%u legs=", fc->depth);
    for (uint32_t i = 0; i < fc->n_legs; ++i) {
        sg_buf_appendf(&b, "%s%s:w=%.17g", i != 0 ? "," : "", fc->leg_names[i], fc->weights[i]);
        if (fc->method == SG_FUSION_WEIGHTED)
            sg_buf_appendf(&b, ":%s", norm_names[fc->normalize[i]]);
    }
    sg_buf_appendc(&b, '\0');
    fc->identity = b.base;
}

/* A fusion route: an entry of backends[] with a "fusion" object (docs/fusion.md, "Settings").
 * Read by hand: topk, timeout_ms and fusion.depth (the limits bound them), the trace, and
 * fusion.routes, weights and normalize (they name other routes). */
static const sg_cfg_key_t fusion_route_config[] = {
    SG_CFG_STRING(sg_fusion_conf_t, name, "name", 1, NULL),
    SG_CFG_CUSTOM_KEY("fusion"),
    SG_CFG_CUSTOM_KEY("topk"),
    SG_CFG_CUSTOM_KEY("timeout_ms"),
    SG_CFG_CUSTOM_KEY("trace"),
};

/* its "fusion" object; docs/fusion.md writes its keys fusion.routes, fusion.method, ... */
static const sg_cfg_key_t fusion_config[] = {
    SG_CFG_CUSTOM_KEY("routes"),
    SG_CFG_ENUM(sg_fusion_conf_t, method, "method", method_names, SG_FUSION_RRF),
    SG_CFG_DOUBLE(sg_fusion_conf_t, k, "k", 0, 1e6, SG_FUSION_DEFAULT_K),
    SG_CFG_CUSTOM_KEY("weights"),
    SG_CFG_CUSTOM_KEY("normalize"),
    SG_CFG_CUSTOM_KEY("depth"),
};
enum { FUSION_METHOD = 1, FUSION_K = 2 }; /* the entries of fusion_config read between the legs and the weights */

/* The keys a fusion route shares with plugin routes: name, topk, timeout_ms. The keys only plugin
 * routes have would be silently meaningless here, so they are refused with the reason. */
static int parse_route_keys(sg_cfg_t *c, sg_config_t *cfg, const cJSON *o, sg_fusion_conf_t *fc)
{
    static const char *const plugin_only[] = {"plugin", "config",      "max_inflight", "max_queue", "chunk",
                                              "cache",  "cache_ttl_s", "fallback",     NULL};
    int64_t v;
    for (size_t i = 0; plugin_only[i] != NULL; ++i) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, plugin_only[i]);
        if (p != NULL)
            return sg_cfg_fail(c, plugin_only[i], p,
                               "not allowed on a fusion route (its legs are other routes, which keep their own settings)");
    }
    if (sg_cfg_read(c, o, fusion_route_config, SG_CFG_N(fusion_route_config), NULL, fc) != 0)
        return -1;
    for (const char *p = fc->name; *p != '\0'; ++p)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
            return sg_cfg_fail(c, "name", cJSON_GetObjectItem(o, "name"), "may only contain letters, digits, '-' and '_'");
    const int64_t def_topk = cfg->limits.max_topk < 3 ? cfg->limits.max_topk : 3;
    const int64_t def_timeout = cfg->limits.max_deadline_ms < 30000 ? cfg->limits.max_deadline_ms : 30000;
    if (sg_cfg_int(c, o, "topk", 1, cfg->limits.max_topk, def_topk, &v) != 0)
        return -1;
    fc->topk = (uint32_t)v;
    if (sg_cfg_int(c, o, "timeout_ms", 1, cfg->limits.max_deadline_ms, def_timeout, &v) != 0)
        return -1;
    fc->timeout_ms = (uint32_t)v;
    return sg__config_trace(cfg, c, o, fc->name, &fc->trace);
}

/* fusion.routes: 2 to SG_FUSION_MAX_LEGS distinct names, kept as names until
 * sg_fusion_conf_resolve() has seen every route. */
static int parse_legs(sg_cfg_t *cf, const cJSON *f, sg_fusion_conf_t *fc)
{
    const cJSON *routes = cJSON_GetObjectItemCaseSensitive(f, "routes");
    if (!cJSON_IsArray(routes))
        return sg_cfg_fail(cf, "routes", routes, "expected an array of route names");
    int n = cJSON_GetArraySize(routes);
    if (n < 2 || n > SG_FUSION_MAX_LEGS)
        return sg_cfg_fail(cf, "routes", routes, "expected 2 to %d route names (a fusion needs at least two legs)",
                           SG_FUSION_MAX_LEGS);
    fc->leg_names = sg_mem_calloc((size_t)n, sizeof(*fc->leg_names));
    fc->legs = sg_mem_calloc((size_t)n, sizeof(*fc->legs));
    fc->weights = sg_mem_calloc((size_t)n, sizeof(*fc->weights));
    fc->normalize = sg_mem_calloc((size_t)n, sizeof(*fc->normalize));
    for (const cJSON *it = routes->child; it != NULL; it = it->next) {
        char key[32];
        snprintf(key, sizeof(key), "routes[%u]", fc->n_legs);
        if (!cJSON_IsString(it) || it->valuestring[0] == '\0')
            return sg_cfg_fail(cf, key, it, "expected a route name");
        if (leg_index(fc, it->valuestring) >= 0)
            return sg_cfg_fail(cf, key, it, "names the same route twice");
        fc->legs[fc->n_legs] = -1;
        fc->weights[fc->n_legs] = 1.0;
        fc->leg_names[fc->n_legs++] = sg_strdup(it->valuestring);
    }
    return 0;
}

/* fusion.weights: {"<leg>": w, ...}; legs not named keep 1, and not every weight may be 0 (every
 * fused score would be 0, the order meaningless). */
static int parse_weights(sg_cfg_t *cf, const cJSON *f, sg_fusion_conf_t *fc)
{
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(f, "weights");
    if (w == NULL || cJSON_IsNull(w))
        return 0;
    if (!cJSON_IsObject(w))
        return sg_cfg_fail(cf, "weights", w, "expected an object {\"<route>\": weight, ...}");
    for (const cJSON *it = w->child; it != NULL; it = it->next) {
        char key[160];
        snprintf(key, sizeof(key), "weights.%.120s", it->string);
        int li = leg_index(fc, it->string);
        if (li < 0)
            return sg_cfg_fail(cf, key, NULL, "is not one of this fusion's routes");
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < 0 || it->valuedouble > 1e6)
            return sg_cfg_fail(cf, key, it, "expected a number in [0, 1000000]");
        fc->weights[li] = it->valuedouble;
    }
    double sum = 0;
    for (uint32_t i = 0; i < fc->n_legs; ++i)
        sum += fc->weights[i];
    if (sum <= 0)
        return sg_cfg_fail(cf, "weights", w, "at least one route needs a weight above 0");
    return 0;
}

/* fusion.normalize (weighted only): one method for every leg, or {"<leg>": method, ...}. */
static int parse_normalize(sg_cfg_t *cf, const cJSON *f, sg_fusion_conf_t *fc)
{
    const cJSON *nv = cJSON_GetObjectItemCaseSensitive(f, "normalize");
    if (nv == NULL || cJSON_IsNull(nv))
        return 0;
    if (fc->method != SG_FUSION_WEIGHTED)
        return sg_cfg_fail(cf, "normalize", nv, "applies to method \"weighted\" only (rrf uses ranks, not scores)");
    if (cJSON_IsObject(nv)) {
        for (const cJSON *it = nv->child; it != NULL; it = it->next) {
            char key[160];
            snprintf(key, sizeof(key), "normalize.%.120s", it->string);
            int li = leg_index(fc, it->string);
            if (li < 0)
                return sg_cfg_fail(cf, key, NULL, "is not one of this fusion's routes");
            if (parse_norm_value(cf, key, it, &fc->normalize[li]) != 0)
                return -1;
        }
        return 0;
    }
    int all;
    if (parse_norm_value(cf, "normalize", nv, &all) != 0)
        return -1;
    for (uint32_t i = 0; i < fc->n_legs; ++i)
        fc->normalize[i] = all;
    return 0;
}

int sg_fusion_conf_parse(sg_config_t *cfg, const cJSON *o, size_t cfg_index, char *err, size_t err_size)
{
    char path[64], fpath[80];
    snprintf(path, sizeof(path), "backends[%zu]", cfg_index);
    snprintf(fpath, sizeof(fpath), "backends[%zu].fusion", cfg_index);
    sg_cfg_t c = {path, err, err_size}, cf = {fpath, err, err_size};
    sg_fusion_conf_t *fc = &cfg->fusions[cfg->n_fusions++];
    fc->cfg_index = cfg_index;
    int64_t v;
    if (parse_route_keys(&c, cfg, o, fc) != 0)
        return -1;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "fusion");
    if (!cJSON_IsObject(f))
        return sg_cfg_fail(&c, "fusion", f, "expected an object {\"routes\": [...], \"method\": \"rrf\"|\"weighted\", ...}");
    if (sg_cfg_check_table(&cf, f, fusion_config, SG_CFG_N(fusion_config)) != 0 || parse_legs(&cf, f, fc) != 0)
        return -1;
    if (sg_cfg_read_ex(&cf, f, fusion_config + FUSION_METHOD, 1, NULL, fc, SG_CFG_KEYS_CHECKED) != 0)
        return -1;
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(f, "k");
    if (fc->method != SG_FUSION_RRF && kv != NULL)
        return sg_cfg_fail(&cf, "k", kv, "applies to method \"rrf\" only");
    if (sg_cfg_read_ex(&cf, f, fusion_config + FUSION_K, 1, NULL, fc, SG_CFG_KEYS_CHECKED) != 0)
        return -1;
    if (parse_weights(&cf, f, fc) != 0 || parse_normalize(&cf, f, fc) != 0)
        return -1;
    if (sg_cfg_int(&cf, f, "depth", 1, cfg->limits.max_topk, 0, &v) != 0)
        return -1;
    fc->depth = (uint32_t)v;
    build_identity(fc);
    return 0;
}

int sg_fusion_conf_find(const sg_config_t *cfg, const char *name, size_t len)
{
    for (size_t i = 0; i < cfg->n_fusions; ++i)
        if (cfg->fusions[i].name != NULL && strlen(cfg->fusions[i].name) == len && memcmp(cfg->fusions[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

int sg_fusion_conf_resolve(sg_config_t *cfg, const cJSON *root, char *err, size_t err_size)
{
    for (size_t fi = 0; fi < cfg->n_fusions; ++fi) {
        sg_fusion_conf_t *fc = &cfg->fusions[fi];
        char path[64], fpath[80];
        snprintf(path, sizeof(path), "backends[%zu]", fc->cfg_index);
        snprintf(fpath, sizeof(fpath), "backends[%zu].fusion", fc->cfg_index);
        sg_cfg_t c = {path, err, err_size}, cf = {fpath, err, err_size};
        cJSON *name = cJSON_CreateString(fc->name);
        int dup = sg_config_find_backend(cfg, fc->name, strlen(fc->name)) >= 0;
        for (size_t j = 0; j < fi && !dup; ++j)
            dup = strcmp(cfg->fusions[j].name, fc->name) == 0;
        if (dup) {
            sg_cfg_fail(&c, "name", name, "duplicate backend name");
            cJSON_Delete(name);
            return -1;
        }
        cJSON_Delete(name);
        for (uint32_t i = 0; i < fc->n_legs; ++i) {
            char key[32];
            snprintf(key, sizeof(key), "routes[%u]", i);
            const char *ln = fc->leg_names[i];
            cJSON *shown = cJSON_CreateString(ln);
            int bi = sg_config_find_backend(cfg, ln, strlen(ln));
            int other = bi < 0 ? sg_fusion_conf_find(cfg, ln, strlen(ln)) : -1;
            if (bi < 0) {
                if ((size_t)other == fi)
                    sg_cfg_fail(&cf, key, shown, "names the fusion route itself (a route cannot be its own leg)");
                else if (other >= 0)
                    sg_cfg_fail(&cf, key, shown,
                                "names fusion route %s; the legs of a fusion must be plugin routes (fusions do not nest, "
                                "so they cannot form cycles)",
                                ln);
                else
                    sg_cfg_fail(&cf, key, shown, "no route named %s is configured", ln);
                cJSON_Delete(shown);
                return -1;
            }
            cJSON_Delete(shown);
            fc->legs[i] = bi;
        }
    }
    if (cfg->n_fusions == 0)
        return 0;
    /* a fallback or the default route could name a fusion route: neither is supported */
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(root, "backends");
    size_t i = 0;
    for (const cJSON *it = bs != NULL ? bs->child : NULL; it != NULL; it = it->next, ++i) {
        const cJSON *fb = cJSON_GetObjectItemCaseSensitive(it, "fallback");
        if (sg_fusion_conf_is(it) || !cJSON_IsString(fb) || sg_fusion_conf_find(cfg, fb->valuestring, strlen(fb->valuestring)) < 0)
            continue;
        char path[64];
        snprintf(path, sizeof(path), "backends[%zu]", i);
        sg_cfg_t c = {path, err, err_size};
        return sg_cfg_fail(&c, "fallback", fb, "names a fusion route; a fallback must be a plugin route");
    }
    const cJSON *db = cJSON_GetObjectItemCaseSensitive(root, "default_backend");
    if (cJSON_IsString(db) && sg_fusion_conf_find(cfg, db->valuestring, strlen(db->valuestring)) >= 0) {
        sg_cfg_t c = {"", err, err_size};
        return sg_cfg_fail(&c, "default_backend", db,
                           "names a fusion route; the default must be a plugin route (reach the fusion at "
                           "/retrieve/%s or with \"backend\": \"%s\")",
                           db->valuestring, db->valuestring);
    }
    return 0;
}

void sg_fusion_conf_free(sg_fusion_conf_t *fc)
{
    for (uint32_t i = 0; fc->leg_names != NULL && i < fc->n_legs; ++i)
        free(fc->leg_names[i]);
    free(fc->leg_names);
    free(fc->legs);
    free(fc->weights);
    free(fc->normalize);
    free(fc->identity);
    free(fc->name);
    memset(fc, 0, sizeof(*fc));
}

uint32_t sg_fusion_depth(const sg_fusion_conf_t *fc, uint32_t topk)
{
    uint32_t d = fc->depth != 0 ? fc->depth : SG_FUSION_MIN_DEPTH;
    return d > topk ? d : topk;
}
