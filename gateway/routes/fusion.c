/*
 * fusion.c -- the settings of fusion routes (validated at start-up) and the merge of the legs'
 * ranked lists. Nothing here touches HTTP, loops or threads: fusion_route.c does the fan-out and
 * hands this file plain lists, which keeps the arithmetic unit-testable (tests/unit/test_fusion.c).
 *
 * Reciprocal rank fusion (Cormack et al., 2009): score(d) = sum over legs l that returned d of
 * w_l / (k + rank_l(d)), rank 1-based. Weighted fusion: score(d) = sum over those legs of
 * w_l * norm_l(score_l(d)), where norm_l is min-max, z-score or nothing, computed per query over
 * leg l's own list. docs/fusion.md states every rule (ties, duplicates, one-hit lists).
 */
#include "fusion.h"
#include "config.h"
#include "common.h"
#include "cfg.h"
#include "hmap.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- configuration ---- */

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

/* The keys a fusion route shares with plugin routes: name, topk, timeout_ms. The keys only plugin
 * routes have would be silently meaningless here, so they are refused with the reason. */
static int parse_route_keys(sg_cfg_t *c, sg_config_t *cfg, const cJSON *o, sg_fusion_conf_t *fc)
{
    static const char *const keys[] = {"name", "fusion", "topk", "timeout_ms", "trace", NULL};
    static const char *const plugin_only[] = {"plugin", "config",      "max_inflight", "max_queue", "chunk",
                                              "cache",  "cache_ttl_s", "fallback",     NULL};
    int64_t v;
    for (size_t i = 0; plugin_only[i] != NULL; ++i) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, plugin_only[i]);
        if (p != NULL)
            return sg_cfg_fail(c, plugin_only[i], p,
                               "not allowed on a fusion route (its legs are other routes, which keep their own settings)");
    }
    if (sg_cfg_check_keys(c, o, keys) != 0 || sg_cfg_string(c, o, "name", 1, NULL, &fc->name) != 0)
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
    static const char *const fkeys[] = {"routes", "method", "k", "weights", "normalize", "depth", NULL};
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
    if (sg_cfg_check_keys(&cf, f, fkeys) != 0 || parse_legs(&cf, f, fc) != 0)
        return -1;
    if (sg_cfg_enum(&cf, f, "method", method_names, SG_FUSION_RRF, &fc->method) != 0)
        return -1;
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(f, "k");
    if (fc->method != SG_FUSION_RRF && kv != NULL)
        return sg_cfg_fail(&cf, "k", kv, "applies to method \"rrf\" only");
    if (sg_cfg_double(&cf, f, "k", 0, 1e6, SG_FUSION_DEFAULT_K, &fc->k) != 0)
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

/* ---- document identity ---- */

char *sg_fusion_doc_identity(const char *doc, size_t len, size_t *key_len)
{
    cJSON *o = cJSON_ParseWithLength(doc, len);
    char kind = 'd';
    const char *src = doc;
    size_t n = len;
    char num[40];
    if (cJSON_IsObject(o)) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
        const cJSON *url = cJSON_GetObjectItemCaseSensitive(o, "url");
        const cJSON *contents = cJSON_GetObjectItemCaseSensitive(o, "contents");
        if (cJSON_IsString(id) && id->valuestring[0] != '\0') {
            kind = 'i';
            src = id->valuestring;
            n = strlen(src);
        } else if (cJSON_IsNumber(id)) { /* a plugin that writes numeric ids: the same number is the same id */
            kind = 'i';
            n = (size_t)snprintf(num, sizeof(num), "%.17g", id->valuedouble);
            src = num;
        } else if (cJSON_IsString(url) && url->valuestring[0] != '\0') {
            kind = 'u';
            src = url->valuestring;
            n = strlen(src);
        } else if (cJSON_IsString(contents)) {
            kind = 'c';
            src = contents->valuestring;
            n = strlen(src);
        }
    }
    char *key = sg_mem_alloc(n + 1);
    key[0] = kind;
    memcpy(key + 1, src, n);
    *key_len = n + 1;
    cJSON_Delete(o);
    return key;
}

/* ---- the merge ---- */

typedef struct st_entry_t {
    char *key;
    size_t key_len;
    uint32_t first_leg, first_hit; /* the DOC kept */
    uint32_t best_rank, best_leg;  /* tie-break */
    uint32_t legs_mask;
    double score;
} entry_t;

typedef struct st_table_t {
    entry_t *entries; /* as many as there are hits: never reallocated */
    uint32_t n;
    sg_hmap_t index; /* identity -> entry */
} table_t;

static int entry_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    const entry_t *x = item;
    (void)ud;
    return x->key_len == key_len && memcmp(x->key, key, key_len) == 0;
}

/* The entry of a document identity (`key`, which the table takes), created when new. */
static entry_t *table_get(table_t *t, char *key, size_t key_len, int *created)
{
    entry_t *x = &t->entries[t->n];
    entry_t *got = sg_hmap_find_or_insert(&t->index, sg_hmap_hash(key, key_len), key, key_len, x);
    if (got != x) {
        free(key);
        *created = 0;
        return got;
    }
    memset(x, 0, sizeof(*x));
    x->key = key;
    x->key_len = key_len;
    ++t->n;
    *created = 1;
    return x;
}

static int cmp_entries(const void *pa, const void *pb)
{
    const entry_t *a = *(const entry_t *const *)pa, *b = *(const entry_t *const *)pb;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    if (a->best_rank != b->best_rank)
        return a->best_rank < b->best_rank ? -1 : 1;
    if (a->best_leg != b->best_leg)
        return a->best_leg < b->best_leg ? -1 : 1;
    return 0; /* unreachable: one leg has one document per rank */
}

/* The normalised value of `s` in a list with these statistics; NaN scores contribute nothing. */
static double normalise(int how, double s, double lo, double hi, double mean, double sd)
{
    if (isnan(s))
        return 0;
    switch (how) {
    case SG_NORM_MINMAX:
        return hi > lo ? (s - lo) / (hi - lo) : 1.0;
    case SG_NORM_ZSCORE:
        return sd > 0 ? (s - mean) / sd : 0.0;
    default:
        return s;
    }
}

/* Leg `l`'s documents in its order, each once: `kept` gets the entry of each and `scores` its score
 * in the leg; returns how many. A document the leg returned again counts at its first position. */
static uint32_t collect_leg(table_t *t, uint32_t l, const sg_fusion_leg_t *leg, entry_t **kept, double *scores)
{
    uint32_t nk = 0;
    for (uint32_t i = 0; i < leg->n; ++i) {
        size_t kl;
        char *key = sg_fusion_doc_identity(leg->hits[i].doc, leg->hits[i].len, &kl);
        int created;
        entry_t *e = table_get(t, key, kl, &created);
        if (!created && (e->legs_mask & (1u << l)))
            continue; /* the same document again in this leg: its first position counts */
        if (created) {
            e->first_leg = l;
            e->first_hit = i;
            e->best_rank = UINT32_MAX;
        }
        e->legs_mask |= 1u << l;
        kept[nk] = e;
        scores[nk++] = leg->hits[i].score;
    }
    return nk;
}

/* The statistics normalise() needs, over one leg's finite scores (per query, per leg). */
typedef struct st_stats_t {
    double lo, hi, mean, sd;
} stats_t;

static stats_t list_stats(const double *scores, uint32_t n)
{
    stats_t st = {INFINITY, -INFINITY, 0, 0};
    double sum = 0, sq = 0;
    uint32_t nf = 0;
    for (uint32_t i = 0; i < n; ++i)
        if (isfinite(scores[i])) {
            st.lo = scores[i] < st.lo ? scores[i] : st.lo;
            st.hi = scores[i] > st.hi ? scores[i] : st.hi;
            sum += scores[i];
            ++nf;
        }
    if (nf > 0) {
        st.mean = sum / nf;
        for (uint32_t i = 0; i < n; ++i)
            if (isfinite(scores[i]))
                sq += (scores[i] - st.mean) * (scores[i] - st.mean);
        st.sd = sqrt(sq / nf);
    }
    return st;
}

/* Adds leg `l`'s share to the fused score of each of its `n` documents (rank = position + 1). */
static void score_leg(const sg_fusion_conf_t *fc, uint32_t l, entry_t **kept, const double *scores, uint32_t n)
{
    stats_t st = {INFINITY, -INFINITY, 0, 0};
    if (fc->method == SG_FUSION_WEIGHTED)
        st = list_stats(scores, n);
    for (uint32_t i = 0; i < n; ++i) {
        entry_t *e = kept[i];
        uint32_t rank = i + 1;
        double s = isfinite(scores[i]) ? scores[i] : NAN;
        if (fc->method == SG_FUSION_RRF)
            e->score += fc->weights[l] / (fc->k + (double)rank);
        else
            e->score += fc->weights[l] * normalise(fc->normalize[l], s, st.lo, st.hi, st.mean, st.sd);
        if (rank < e->best_rank) { /* legs run in route order: an equal rank keeps the earlier leg */
            e->best_rank = rank;
            e->best_leg = l;
        }
    }
}

/* The `topk` best entries of the table into `out`; returns how many. */
static uint32_t write_best(const table_t *t, uint32_t topk, sg_fusion_out_t *out)
{
    entry_t **order = sg_mem_alloc(t->n * sizeof(*order));
    for (uint32_t i = 0; i < t->n; ++i)
        order[i] = &t->entries[i];
    qsort(order, t->n, sizeof(*order), cmp_entries);
    uint32_t n = t->n < topk ? t->n : topk;
    for (uint32_t i = 0; i < n; ++i) {
        out[i].leg = order[i]->first_leg;
        out[i].hit = order[i]->first_hit;
        out[i].score = order[i]->score;
    }
    free(order);
    return n;
}

uint32_t sg_fusion_merge(const sg_fusion_conf_t *fc, const sg_fusion_leg_t *legs, uint32_t topk, sg_fusion_out_t *out)
{
    size_t total = 0;
    for (uint32_t l = 0; l < fc->n_legs; ++l)
        if (legs[l].ok)
            total += legs[l].n;
    if (total == 0 || topk == 0)
        return 0;
    table_t t = {0};
    t.entries = sg_mem_alloc(total * sizeof(*t.entries));
    sg_hmap_init(&t.index, entry_eq, NULL, total);
    /* per leg: the entries it contributes to (duplicates dropped) and their scores */
    entry_t **kept = sg_mem_alloc(total * sizeof(*kept));
    double *scores = sg_mem_alloc(total * sizeof(*scores));
    for (uint32_t l = 0; l < fc->n_legs; ++l) {
        if (!legs[l].ok)
            continue;
        uint32_t nk = collect_leg(&t, l, &legs[l], kept, scores);
        score_leg(fc, l, kept, scores, nk);
    }
    uint32_t n = write_best(&t, topk, out);
    for (uint32_t i = 0; i < t.n; ++i)
        free(t.entries[i].key);
    free(kept);
    free(scores);
    sg_hmap_dispose(&t.index);
    free(t.entries);
    return n;
}
