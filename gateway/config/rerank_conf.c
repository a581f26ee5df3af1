/*
 * rerank_conf.c -- a route's "rerank" object (rerank_conf.h, docs/rerank.md), read and validated
 * at start-up and at each reload; the stage that uses it is routes/rerank.c.
 */
#include "rerank_conf.h"

_Static_assert(SG_RERANK_ACT_IDENTITY == 0 && SG_RERANK_ACT_SIGMOID == 1 && SG_RERANK_ACT_TANH == 2 && SG_RERANK_TRUNC_FAST == 0 &&
                   SG_RERANK_TRUNC_SLOW == 1,
               "rerank_activations[] and rerank_truncations[] list the values in order");
#include "common.h"
#include "cfg.h"

#include <cJSON.h>

#include <stdio.h>
#include <stdlib.h>

/* in the order of SG_RERANK_ACT_* and SG_RERANK_TRUNC_*: the index is the value */
static const char *const rerank_activations[] = {"identity", "sigmoid", "tanh", NULL};
static const char *const rerank_truncations[] = {"fast", "slow", NULL};

/* A route's "rerank" object (docs/rerank.md, "The route option"). The defaults outside the bounds
 * mean "not set": max_length 0 (the model's own), activation -1 (the model's), score_label -1 (the
 * model's default label) and truncation -1 (fast). */
static const sg_cfg_key_t rerank_config[] = {
    SG_CFG_PATH(sg_rerank_conf_t, model, "model", 1),
    SG_CFG_INT(sg_rerank_conf_t, candidates, "candidates", 1, 10000, 30),
    SG_CFG_INT(sg_rerank_conf_t, max_length, "max_length", 3, 1 << 20, 0),
    SG_CFG_INT(sg_rerank_conf_t, workers, "workers", 1, 256, 1),
    SG_CFG_INT(sg_rerank_conf_t, max_queue, "max_queue", 1, 100000000, 10000),
    SG_CFG_INT(sg_rerank_conf_t, batch, "batch", 1, 100000, 32),
    SG_CFG_ENUM(sg_rerank_conf_t, activation, "activation", rerank_activations, -1),
    SG_CFG_INT(sg_rerank_conf_t, score_label, "score_label", 0, 100000, -1),
    SG_CFG_ENUM(sg_rerank_conf_t, truncation, "truncation", rerank_truncations, -1),
};

/* The bounds one key sets on another: the stage returns the topk best of the candidates, and its
 * queue holds at least one call's pairs. */
static int check_rerank(sg_cfg_t *r, const cJSON *o, const sg_rerank_conf_t *rc, uint32_t route_topk)
{
    if (rc->candidates < route_topk)
        return sg_cfg_fail(r, "candidates", cJSON_GetObjectItemCaseSensitive(o, "candidates"),
                           "must be at least the route's topk (%u): the stage returns the topk best of the candidates", route_topk);
    if (rc->max_queue < rc->candidates)
        return sg_cfg_fail(r, "max_queue", cJSON_GetObjectItemCaseSensitive(o, "max_queue"),
                           "must be at least candidates (%u): it counts (query, passage) pairs", rc->candidates);
    return 0;
}

int sg_rerank_conf_parse(sg_cfg_t *c, const cJSON *o, const char *base_dir, uint32_t route_topk, sg_rerank_conf_t **out)
{
    *out = NULL;
    if (o == NULL || cJSON_IsNull(o))
        return 0;
    char path[96];
    snprintf(path, sizeof(path), "%s.rerank", c->path);
    sg_cfg_t r = {path, c->err, c->err_size};
    if (!cJSON_IsObject(o))
        return sg_cfg_fail(c, "rerank", o, "expected an object {\"model\": DIR, \"candidates\": N, ...}");
    sg_rerank_conf_t *rc = sg_mem_calloc(1, sizeof(*rc));
    if (sg_cfg_read(&r, o, rerank_config, SG_CFG_N(rerank_config), base_dir, rc) != 0 || check_rerank(&r, o, rc, route_topk) != 0) {
        sg_rerank_conf_free(rc);
        return -1;
    }
    *out = rc;
    return 0;
}

void sg_rerank_conf_free(sg_rerank_conf_t *rc)
{
    if (rc == NULL)
        return;
    free(rc->model);
    free(rc);
}
