/*
 * fusion.c -- the merge of a fusion route's legs' ranked lists (its settings are
 * config/fusion_conf.h). Nothing here touches HTTP, loops or threads: fusion_route.c does the fan-out and
 * hands this file plain lists, which keeps the arithmetic unit-testable (tests/unit/gateway/routes/test_fusion.c).
 *
 * Reciprocal rank fusion (Cormack et al., 2009): score(d) = sum over legs l that returned d of
 * w_l / (k + rank_l(d)), rank 1-based. Weighted fusion: score(d) = sum over those legs of
 * w_l * norm_l(score_l(d)), where norm_l is min-max, z-score or nothing, computed per query over
 * leg l's own list. docs/fusion.md states every rule (ties, duplicates, one-hit lists).
 */
#include "fusion.h"
#include "common.h"
#include "cfg.h"
#include "hmap.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
