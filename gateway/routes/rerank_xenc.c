/*
 * rerank_xenc.c -- the module rerank_xenc.so: the cross-encoder library behind one exported table
 * (rerank_xenc.h says why it is a module).
 */
#include "rerank_xenc.h"
#include "xenc.h"

_Static_assert((int)SG_RERANK_ACT_IDENTITY == (int)SG_XENC_IDENTITY && (int)SG_RERANK_ACT_SIGMOID == (int)SG_XENC_SIGMOID &&
                   (int)SG_RERANK_ACT_TANH == (int)SG_XENC_TANH,
               "rerank_conf.h's activations are the library's");
_Static_assert((int)SG_RERANK_TRUNC_FAST == (int)SG_XENC_TRUNC_FAST && (int)SG_RERANK_TRUNC_SLOW == (int)SG_XENC_TRUNC_SLOW,
               "rerank_conf.h's truncation rules are the library's");

static const sg_xenc_api api = {
    .version = SG_XENC_API_VERSION,
    .struct_size = sizeof(sg_xenc_api),
    .load = sg_xenc_load,
    .free = sg_xenc_free,
    .num_labels = sg_xenc_num_labels,
    .default_max_length = sg_xenc_default_max_length,
    .max_length = sg_xenc_max_length,
    .identity = sg_xenc_identity,
    .set_activation = sg_xenc_set_activation,
    .set_score_label = sg_xenc_set_score_label,
    .set_truncation = sg_xenc_set_truncation,
    .workspace_new = sg_xenc_workspace_new,
    .workspace_free = sg_xenc_workspace_free,
    .score = sg_xenc_score,
};

__attribute__((visibility("default"))) const sg_xenc_api *sg_rerank_xenc_api(void)
{
    return &api;
}
