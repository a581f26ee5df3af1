/*
 * rerank_conf.c -- a route's "rerank" object (rerank_conf.h, docs/rerank.md), read and validated
 * at start-up and at each reload; the stage that uses it is routes/rerank.c.
 */
#include "rerank_conf.h"

_Static_assert(SG_RERANK_ACT_IDENTITY == 0 && SG_RERANK_ACT_SIGMOID == 1 && SG_RERANK_ACT_TANH == 2 && SG_RERANK_TRUNC_FAST == 0 &&
                   SG_RERANK_TRUNC_SLOW == 1,
               "activations[] and truncations[] list the values in order");
#include "common.h"
#include "cfg.h"

#include <cJSON.h>

#include <stdio.h>
#include <stdlib.h>

int sg_rerank_conf_parse(sg_cfg_t *c, const cJSON *o, const char *base_dir, uint32_t route_topk, sg_rerank_conf_t **out)
{
    static const char *const keys[] = {"model", "candidates", "max_length",  "workers",    "max_queue",
                                       "batch", "activation", "score_label", "truncation", NULL};
    /* in the order of SG_RERANK_ACT_* and SG_RERANK_TRUNC_*: the index is the value */
    static const char *const activations[] = {"identity", "sigmoid", "tanh", NULL};
    static const char *const truncations[] = {"fast", "slow", NULL};
    *out = NULL;
    if (o == NULL || cJSON_IsNull(o))
        return 0;
    char path[96];
    snprintf(path, sizeof(path), "%s.rerank", c->path);
    sg_cfg_t r = {path, c->err, c->err_size};
    if (!cJSON_IsObject(o))
        return sg_cfg_fail(c, "rerank", o, "expected an object {\"model\": DIR, \"candidates\": N, ...}");
    if (sg_cfg_check_keys(&r, o, keys) != 0)
        return -1;
    sg_rerank_conf_t *rc = sg_mem_calloc(1, sizeof(*rc));
    int64_t v;
    int e;
    if (sg_cfg_path(&r, o, "model", 1, base_dir, &rc->model) != 0)
        goto fail;
    if (sg_cfg_int(&r, o, "candidates", 1, 10000, 30, &v) != 0)
        goto fail;
    rc->candidates = (uint32_t)v;
    if (rc->candidates < route_topk) {
        sg_cfg_fail(&r, "candidates", cJSON_GetObjectItemCaseSensitive(o, "candidates"),
                    "must be at least the route's topk (%u): the stage returns the topk best of the candidates", route_topk);
        goto fail;
    }
    if (sg_cfg_int(&r, o, "max_length", 3, 1 << 20, 0, &v) != 0)
        goto fail;
    if (cJSON_GetObjectItemCaseSensitive(o, "max_length") == NULL)
        v = 0;
    rc->max_length = (uint32_t)v;
    if (sg_cfg_int(&r, o, "workers", 1, 256, 1, &v) != 0)
        goto fail;
    rc->workers = (uint32_t)v;
    if (sg_cfg_int(&r, o, "max_queue", 1, 100000000, 10000, &v) != 0)
        goto fail;
    rc->max_queue = (uint32_t)v;
    if (rc->max_queue < rc->candidates) {
        sg_cfg_fail(&r, "max_queue", cJSON_GetObjectItemCaseSensitive(o, "max_queue"),
                    "must be at least candidates (%u): it counts (query, passage) pairs", rc->candidates);
        goto fail;
    }
    if (sg_cfg_int(&r, o, "batch", 1, 100000, 32, &v) != 0)
        goto fail;
    rc->batch = (uint32_t)v;
    if (sg_cfg_enum(&r, o, "activation", activations, -1, &e) != 0)
        goto fail;
    rc->activation = e; /* -1: not set */
    if (sg_cfg_int(&r, o, "score_label", 0, 100000, -1, &v) != 0)
        goto fail;
    rc->score_label = (int)v;
    if (sg_cfg_enum(&r, o, "truncation", truncations, -1, &e) != 0)
        goto fail;
    rc->truncation = e;
    *out = rc;
    return 0;
fail:
    sg_rerank_conf_free(rc);
    return -1;
}

void sg_rerank_conf_free(sg_rerank_conf_t *rc)
{
    if (rc == NULL)
        return;
    free(rc->model);
    free(rc);
}
