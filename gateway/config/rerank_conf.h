/*
 * rerank_conf.h -- the settings of a route's rerank stage (`rerank: {...}`, docs/rerank.md), as
 * config.c reads them; the stage itself is routes/rerank.h.
 */
#ifndef SG_GATEWAY_RERANK_CONF_H
#define SG_GATEWAY_RERANK_CONF_H

#include <stdint.h>

struct cJSON;
struct st_sg_cfg_t;

/* The values of "activation" and "truncation": the cross-encoder library's own (SG_XENC_IDENTITY...,
 * SG_XENC_TRUNC_FAST...), which routes/rerank_xenc.c checks at compile time. */
enum { SG_RERANK_ACT_IDENTITY = 0, SG_RERANK_ACT_SIGMOID = 1, SG_RERANK_ACT_TANH = 2 };
enum { SG_RERANK_TRUNC_FAST = 0, SG_RERANK_TRUNC_SLOW = 1 };

typedef struct st_sg_rerank_conf_t {
    char *model;         /* the Hugging Face folder, resolved against the config's directory */
    uint32_t candidates; /* hits asked of the first stage per query */
    uint32_t max_length; /* tokens per (query, passage) pair; 0 = the model's own default */
    uint32_t workers;    /* scoring threads */
    uint32_t max_queue;  /* pairs accepted and not yet scored; beyond it 503 */
    uint32_t batch;      /* pairs per scoring pass (cancellation and deadline are checked between passes) */
    int activation;      /* -1 = the model's (config.json), else SG_XENC_IDENTITY/SIGMOID/TANH */
    int score_label;     /* -1 = the model's default */
    int truncation;      /* -1 = the default (fast), else SG_XENC_TRUNC_FAST/SLOW */
} sg_rerank_conf_t;

/**
 * Reads a route's "rerank" object (`o`; NULL or JSON null: no stage, *out = NULL). `route_topk` is
 * the route's default topk, which must not exceed `candidates`. Errors name the key and value.
 */
int sg_rerank_conf_parse(struct st_sg_cfg_t *c, const struct cJSON *o, const char *base_dir, uint32_t route_topk,
                         sg_rerank_conf_t **out);
void sg_rerank_conf_free(sg_rerank_conf_t *rc);

#endif
