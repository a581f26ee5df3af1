/*
 * rerank_xenc.h -- the cross-encoder library (backends/encoder/xenc.h) as the rerank stage
 * reaches it: a table of its functions, exported by the module rerank_xenc.so (built beside the
 * plugins) that the gateway dlopen()s at start-up when a route has a `rerank` stage.
 *
 * Why a module and not a link: the library brings OpenBLAS, whose load-time constructor starts
 * its thread pool. Linked into the gateway, those threads would start before main() blocks
 * SIGTERM/SIGINT for every thread (only the main thread's sigwait() may take them), and a
 * signal delivered to one of them would kill the process; loaded with dlopen() after main() set
 * the mask (and OPENBLAS_NUM_THREADS), like the local plugin, they inherit it.
 */
#ifndef SG_GATEWAY_RERANK_XENC_H
#define SG_GATEWAY_RERANK_XENC_H

#include <stddef.h>
#include <stdint.h>
#include "rerank_conf.h"

/* The library's model and workspace, opaque here: only the module (rerank_xenc.c) includes the
 * library's header, so the gateway itself never reaches into backends/encoder/. */
typedef struct sg_xenc_model sg_xenc_model;
typedef struct sg_xenc_workspace sg_xenc_workspace;

/* The values of set_activation() and set_truncation() are the config's (rerank_conf.h:
 * SG_RERANK_ACT_*, SG_RERANK_TRUNC_*), which rerank_xenc.c checks at compile time against the
 * library's own (SG_XENC_IDENTITY..., SG_XENC_TRUNC_FAST...). */

#define SG_XENC_API_VERSION 1
#define SG_XENC_API_ENTRY "sg_rerank_xenc_api"

typedef struct sg_xenc_api {
    uint32_t version; /* SG_XENC_API_VERSION */
    uint32_t struct_size;
    int (*load)(const char *dir, sg_xenc_model **out, char *err, size_t err_size);
    void (*free)(sg_xenc_model *m);
    int (*num_labels)(const sg_xenc_model *m);
    uint32_t (*default_max_length)(const sg_xenc_model *m);
    uint32_t (*max_length)(const sg_xenc_model *m, uint32_t max_len);
    const char *(*identity)(const sg_xenc_model *m);
    int (*set_activation)(sg_xenc_model *m, int activation);
    int (*set_score_label)(sg_xenc_model *m, int label);
    int (*set_truncation)(sg_xenc_model *m, int rule);
    sg_xenc_workspace *(*workspace_new)(const sg_xenc_model *m);
    void (*workspace_free)(sg_xenc_workspace *w);
    int (*score)(const sg_xenc_model *m, sg_xenc_workspace *w, const char *query, size_t qlen, const char *const *passages,
                 const size_t *plens, size_t n, uint32_t max_len, float *scores, char *err, size_t err_size);
} sg_xenc_api;

typedef const sg_xenc_api *(*sg_xenc_api_fn)(void);

#endif
