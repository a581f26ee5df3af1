/*
 * gpu.c -- device selection and the GPU path of the local backend (gpu.h, docs/backends/gpu.md).
 *
 * "cpu" never touches CUDA. "auto" loads the CUDA module and uses every GPU (or gpu_ids) when
 * cudaGetDeviceCount finds one; when the module is missing or cannot be loaded (CPU-only build,
 * no libcudart) or there is no usable GPU (no driver, error 35; no device, error 100) it logs why
 * and the backend runs on the CPU. "cuda" turns each of those into a start-up error. Memory is
 * checked by the module before every allocation (encoder weights per GPU, each worker's
 * workspace, each index shard), so a GPU that is too small fails start-up with the sizes.
 */
#include "gpu.h"
#include "e5_internal.h"
#include "loader.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sg_local_gpu_devices[] = {"auto", "cpu", "cuda", NULL};

int sg_local_gpu_read_ids(sg_cfg_t *c, const cJSON *root, sg_local_gpu_cfg_t *out)
{
    out->n_ids = 0;
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(root, "gpu_ids");
    if (ids == NULL || cJSON_IsNull(ids))
        return 0;
    if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) < 1 || cJSON_GetArraySize(ids) > SG_LOCAL_MAX_GPUS)
        return sg_cfg_fail(c, "gpu_ids", ids, "expected an array of 1 to %d GPU numbers", SG_LOCAL_MAX_GPUS);
    const cJSON *it;
    cJSON_ArrayForEach(it, ids)
    {
        if (!cJSON_IsNumber(it) || it->valuedouble != (double)(int)it->valuedouble || it->valuedouble < 0 || it->valuedouble > 1023)
            return sg_cfg_fail(c, "gpu_ids", it, "expected GPU numbers in [0, 1023]");
        for (int i = 0; i < out->n_ids; ++i)
            if (out->ids[i] == (int)it->valuedouble)
                return sg_cfg_fail(c, "gpu_ids", it, "a GPU listed twice");
        out->ids[out->n_ids++] = (int)it->valuedouble;
    }
    return 0;
}

void sg_local_gpu_cfg_free(sg_local_gpu_cfg_t *cfg)
{
    free(cfg->module);
    cfg->module = NULL;
}

int sg_local_gpu_open(const sg_local_gpu_cfg_t *cfg, const sg_host_api *host, const char *instance, const void *anchor,
                      sg_local_gpu_t **out, char *err, size_t err_size)
{
    *out = NULL;
    if (cfg->device == SG_LOCAL_DEVICE_CPU)
        return 0;
    const int forced = cfg->device == SG_LOCAL_DEVICE_CUDA;
    char *path = cfg->module != NULL ? strdup(cfg->module) : sg_gpu_module_default_path(anchor);
    if (path == NULL) {
        if (forced) {
            snprintf(err, err_size, "config.device: \"cuda\", but the plugin's directory is unknown; set config.cuda_module");
            return -1;
        }
        host->log(SG_LOG_INFO, instance, "device auto: cannot locate %s; using the CPU", SG_CUDA_MODULE_FILE);
        return 0;
    }
    const sg_cuda_api *api;
    char e2[768];
    if (sg_gpu_module_load(path, &api, e2, sizeof(e2)) != 0) {
        free(path);
        if (forced) {
            snprintf(err, err_size, "config.device: \"cuda\", but the CUDA module cannot be used: %s (build with -DSG_CUDA=ON)",
                     e2);
            return -1;
        }
        host->log(SG_LOG_INFO, instance, "device auto: no CUDA module (%s); using the CPU", e2);
        return 0;
    }
    int count = 0;
    char why[512] = "";
    api->probe(&count, why, sizeof(why));
    if (count == 0) {
        if (forced) {
            snprintf(err, err_size, "config.device: \"cuda\", but no GPU can be used: %s", why);
            free(path);
            return -1;
        }
        host->log(SG_LOG_INFO, instance, "device auto: no usable GPU (%s); using the CPU", why);
        free(path);
        return 0;
    }
    sg_local_gpu_t *g = calloc(1, sizeof(*g));
    if (g == NULL)
        abort();
    g->api = api;
    if (cfg->n_ids == 0) {
        g->n = count < SG_LOCAL_MAX_GPUS ? count : SG_LOCAL_MAX_GPUS;
        for (int i = 0; i < g->n; ++i)
            g->ids[i] = i;
    } else {
        for (int i = 0; i < cfg->n_ids; ++i) {
            if (cfg->ids[i] >= count) {
                snprintf(err, err_size, "config.gpu_ids: GPU %d does not exist (%d visible: 0 .. %d)", cfg->ids[i], count,
                         count - 1);
                free(path);
                free(g);
                return -1;
            }
            g->ids[i] = cfg->ids[i];
        }
        g->n = cfg->n_ids;
    }
    g->rescore = cfg->rescore;
    host->log(SG_LOG_INFO, instance, "device %s: %s from %s, %d GPU(s) visible", forced ? "cuda" : "auto", api->version, path,
              count);
    free(path);
    snprintf(g->identity, sizeof(g->identity), "gpu:enc16");
    *out = g;
    return 0;
}

int sg_local_gpu_load_encoder(sg_local_gpu_t *g, const sg_e5_model *m, uint32_t max_len, uint32_t max_tokens, uint32_t max_seqs,
                              char *err, size_t err_size)
{
    const sg_e5_config *c = sg_e5_get_config(m);
    sg_e5_embedding_weights emb;
    sg_e5_get_embedding_weights(m, &emb);
    sg_e5_layer_weights *lw = calloc((size_t)c->layers + 1, sizeof(*lw));
    if (lw == NULL)
        abort();
    for (int i = 0; i < c->layers; ++i)
        sg_e5_get_layer_weights(m, i, &lw[i]);
    int rc = 0;
    g->pass_tokens = max_tokens < max_len ? max_len : max_tokens;
    g->pass_seqs = max_seqs;
    for (int i = 0; i < g->n && rc == 0; ++i) {
        sg_cuda_encoder_desc d = {sizeof(d), g->ids[i], c, &emb, lw, max_len, max_tokens < max_len ? max_len : max_tokens,
                                  max_seqs};
        char e2[768];
        if (g->api->encoder_create(&d, &g->enc[i], e2, sizeof(e2)) != 0) {
            snprintf(err, err_size, "config.model: cannot put the encoder on GPU %d: %s", g->ids[i], e2);
            rc = -1;
        }
    }
    free(lw);
    return rc;
}

int sg_local_gpu_load_index(sg_local_gpu_t *g, int flat, const char *path, const char *params, uint32_t max_queries,
                            uint32_t max_topk, sg_fidx_t *ix, char *err, size_t err_size)
{
    char fourcc[5], e2[768];
    int is = sg_gpu_flat_is_flat(path, fourcc, e2, sizeof(e2));
    if (is < 0) {
        snprintf(err, err_size, "config.index: %s", e2);
        return -1;
    }
    if (!flat || is == 0)
        return 0;
    if (params != NULL && params[0] != '\0') {
        snprintf(err, err_size, "config.index: %s: cannot apply search parameters \"%s\": a Flat index has none", path, params);
        return -1;
    }
    /* read and check the header here: the module would report the same errors, but this also
     * fills ix and keeps the map for re-scoring */
    sg_gpu_flatfile_t ff;
    if (sg_gpu_flat_open(path, &ff, e2, sizeof(e2)) != 0) {
        snprintf(err, err_size, "config.index: %s", e2);
        return -1;
    }
    memset(ix, 0, sizeof(*ix));
    ix->dim = ff.dim;
    ix->ntotal = ff.ntotal;
    ix->metric = ff.metric == SG_GPU_L2 ? SG_FIDX_L2 : SG_FIDX_IP;
    snprintf(ix->fourcc, sizeof(ix->fourcc), "%s", ff.fourcc);
    ix->info.kind = SG_FEXT_FLAT;
    ix->info.code_size = (size_t)ff.dim * sizeof(float);
    if (sg__e5_fingerprint(path, &ix->file_size, &ix->file_hash, e2, sizeof(e2)) != 0) {
        snprintf(err, err_size, "config.index: %s", e2);
        sg_gpu_flat_close(&ff);
        return -1;
    }
    g->metric = ff.metric;
    g->dim = ff.dim;
    uint32_t factor = g->rescore > 0 ? (uint32_t)g->rescore : 1;
    uint64_t mk = (uint64_t)max_topk * factor;
    g->max_k = mk > SG_GPU_MAX_K ? SG_GPU_MAX_K : (uint32_t)mk;
    sg_cuda_flat_desc d = {sizeof(d), g->ids, g->n, SG_CUDA_SRC_FILE, path, NULL, 0, 0, 0, 0, max_queries, g->max_k, 0};
    if (g->api->flat_create(&d, &g->flat, e2, sizeof(e2)) != 0) {
        snprintf(err, err_size, "config.index: %s", e2);
        sg_gpu_flat_close(&ff);
        return -1;
    }
    if (g->rescore > 0)
        g->ff = ff; /* kept mapped: candidates are re-read from it */
    else
        sg_gpu_flat_close(&ff);
    if (g->rescore > 0)
        snprintf(g->identity, sizeof(g->identity), "gpu:enc16+flat16+rs%d", g->rescore);
    else
        snprintf(g->identity, sizeof(g->identity), "gpu:enc16+flat16");
    return 1;
}

uint32_t sg_local_gpu_max_topk(const sg_local_gpu_t *g)
{
    if (g->flat == NULL)
        return 0;
    return g->max_k / (uint32_t)(g->rescore > 0 ? g->rescore : 1);
}

void sg_local_gpu_log(const sg_local_gpu_t *g, const sg_host_api *host, const char *instance)
{
    for (int i = 0; i < g->n; ++i) {
        sg_cuda_device_info di;
        char e2[256], a[32], b[32];
        if (g->api->device_info(g->ids[i], &di, e2, sizeof(e2)) != 0) {
            host->log(SG_LOG_WARN, instance, "GPU %d: %s", g->ids[i], e2);
            continue;
        }
        host->log(SG_LOG_INFO, instance, "GPU %d: %s (compute %d.%d), %s of %s free after loading", g->ids[i], di.name, di.major,
                  di.minor, sg_gpu_fmt_bytes(di.free_bytes, a, sizeof(a)), sg_gpu_fmt_bytes(di.total_bytes, b, sizeof(b)));
    }
    if (g->flat != NULL) {
        sg_cuda_flat_info fi;
        g->api->flat_info(g->flat, &fi);
        char a[32];
        host->log(SG_LOG_INFO, instance,
                  "encoder on the GPUs in fp16; flat index on the GPUs: %lld vectors in fp16 over %d shard(s) (%s on the first), "
                  "top-k up to %u%s",
                  (long long)fi.ntotal, fi.n_shards, sg_gpu_fmt_bytes(fi.bytes_per_shard[0], a, sizeof(a)),
                  sg_local_gpu_max_topk(g), g->rescore > 0 ? ", candidates re-scored in fp32" : "");
    } else {
        host->log(SG_LOG_INFO, instance, "encoder on the GPUs in fp16; the index is searched by FAISS on the CPU");
    }
}

sg_status sg_local_gpu_health(const sg_local_gpu_t *g, char *detail, size_t detail_size)
{
    if (!SG_CUDA_API_HAS(g->api, device_error) || g->api->device_error == NULL)
        return SG_OK; /* a module from before 1.1 cannot tell */
    for (int i = 0; i < g->n; ++i) {
        char e2[512];
        if (g->api->device_error(g->ids[i], e2, sizeof(e2)) != 0) {
            snprintf(detail, detail_size, "%s", e2);
            return SG_EUNAVAIL;
        }
    }
    return SG_OK;
}

const char *sg_local_gpu_identity(const sg_local_gpu_t *g)
{
    return g->identity;
}

void sg_local_gpu_close(sg_local_gpu_t *g)
{
    if (g == NULL)
        return;
    if (g->flat != NULL)
        g->api->flat_destroy(g->flat);
    for (int i = 0; i < g->n; ++i)
        if (g->enc[i] != NULL)
            g->api->encoder_destroy(g->enc[i]);
    sg_gpu_flat_close(&g->ff);
    free(g);
}

int sg_local_gpu_worker_init(sg_local_gpu_t *g, size_t i, size_t max_batch, uint32_t max_len, sg_local_gpu_worker_t *w, char *err,
                             size_t err_size)
{
    memset(w, 0, sizeof(*w));
    const int slot = (int)(i % (size_t)g->n);
    char e2[768];
    if (g->api->encoder_ws_create(g->enc[slot], &w->ws, e2, sizeof(e2)) != 0) {
        snprintf(err, err_size, "worker %zu: %s", i, e2);
        return -1;
    }
    w->max_batch = max_batch;
    w->max_len = max_len;
    w->ids = malloc(max_batch * max_len * sizeof(int32_t));
    w->idp = malloc(max_batch * sizeof(*w->idp));
    w->lens = malloc(max_batch * sizeof(uint32_t));
    w->order = malloc(max_batch * sizeof(*w->order));
    w->slens = malloc(max_batch * sizeof(uint32_t));
    w->sidp = malloc(max_batch * sizeof(*w->sidp));
    if (g->flat != NULL) {
        w->keys = malloc(max_batch * g->max_k * sizeof(float));
        w->cand = malloc(max_batch * g->max_k * sizeof(int64_t));
        w->row = malloc((size_t)g->dim * sizeof(float) + 16);
    }
    if (w->ids == NULL || w->idp == NULL || w->lens == NULL || w->order == NULL || w->slens == NULL || w->sidp == NULL ||
        (g->flat != NULL && (w->keys == NULL || w->cand == NULL || w->row == NULL)))
        abort();
    for (size_t j = 0; j < max_batch; ++j)
        w->idp[j] = w->ids + j * max_len;
    return 0;
}

void sg_local_gpu_worker_free(sg_local_gpu_t *g, sg_local_gpu_worker_t *w)
{
    if (w->ws != NULL)
        g->api->encoder_ws_destroy(w->ws);
    free(w->ids);
    free(w->idp);
    free(w->lens);
    free(w->order);
    free(w->slens);
    free(w->sidp);
    free(w->sout);
    free(w->keys);
    free(w->cand);
    free(w->row);
    memset(w, 0, sizeof(*w));
}

/* The passes the CUDA encoder makes of sequences of these lengths (sg_gpu_enc_pass cuts them as it
 * does), and the tokens they compute: each pass pads to its longest. */
static size_t count_passes(const sg_local_gpu_t *g, const uint32_t *lens, size_t n, uint64_t *tokens, uint64_t *padded)
{
    size_t passes = 0;
    *tokens = *padded = 0;
    for (size_t first = 0; first < n; ++passes) {
        uint32_t longest;
        size_t b = sg_gpu_enc_pass(lens, n, first, g->pass_seqs, g->pass_tokens, &longest);
        if (b == 0)
            break;
        for (size_t i = first; i < first + b; ++i) {
            *tokens += longest;
            *padded += longest - lens[i];
        }
        first += b;
    }
    return passes;
}

/* w->order: the batch's sequences by length (stable); w->slens / w->sidp their lengths and ids */
static void sort_by_length(sg_local_gpu_worker_t *w, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        size_t j = i;
        while (j > 0 && w->lens[w->order[j - 1]] > w->lens[i]) {
            w->order[j] = w->order[j - 1];
            --j;
        }
        w->order[j] = i;
    }
    for (size_t i = 0; i < n; ++i) {
        w->slens[i] = w->lens[w->order[i]];
        w->sidp[i] = w->idp[w->order[i]];
    }
}

int sg_local_gpu_encode(sg_local_gpu_t *g, sg_local_gpu_worker_t *w, const sg_e5_model *m, const char *prefix,
                        const char *const *texts, const size_t *lens, size_t n, float *out, char *err, size_t err_size)
{
    if (n > w->max_batch) {
        snprintf(err, err_size, "internal error: %zu texts for a batch of %zu", n, w->max_batch);
        return -1;
    }
    for (size_t i = 0; i < n; ++i) {
        int k = sg_e5_tokenize(m, prefix, texts[i], lens[i], w->max_len, w->ids + i * w->max_len);
        if (k < 0) {
            snprintf(err, err_size, "out of memory tokenising text %zu", i);
            return -1;
        }
        w->lens[i] = (uint32_t)k;
    }
    /* Each pass pads its sequences to its longest. In arrival order one long query makes its whole
     * pass long; sorted by length, long ones share passes: encode in length order (and put the
     * embeddings back in order) when that computes fewer padded tokens in no more passes. */
    uint64_t tok_a, pad_a, tok_s, pad_s;
    size_t passes_a = count_passes(g, w->lens, n, &tok_a, &pad_a), passes_s;
    sort_by_length(w, n);
    passes_s = count_passes(g, w->slens, n, &tok_s, &pad_s);
    if (pad_s < pad_a && passes_s <= passes_a) {
        size_t dim = (size_t)sg_e5_dim(m);
        if (n * dim > w->cap_sout) {
            float *o = realloc(w->sout, n * dim * sizeof(float));
            if (o == NULL) {
                snprintf(err, err_size, "out of memory for %zu embeddings", n);
                return -1;
            }
            w->sout = o;
            w->cap_sout = n * dim;
        }
        if (g->api->encode_ids(w->ws, w->sidp, w->slens, n, w->sout, err, err_size) != 0)
            return -1;
        for (size_t i = 0; i < n; ++i)
            memcpy(out + w->order[i] * dim, w->sout + i * dim, dim * sizeof(float));
        w->tokens += tok_s;
        w->padded += pad_s;
        w->sorted_batches++;
        return 0;
    }
    w->tokens += tok_a;
    w->padded += pad_a;
    return g->api->encode_ids(w->ws, w->idp, w->lens, n, out, err, err_size);
}

int sg_local_gpu_search(sg_local_gpu_t *g, sg_local_gpu_worker_t *w, size_t n, const float *queries, int k, float *dist,
                        int64_t *labels, char *err, size_t err_size)
{
    if (n > w->max_batch || k < 1 || (uint32_t)k > sg_local_gpu_max_topk(g)) {
        snprintf(err, err_size, "internal error: GPU search of %zu queries, k %d", n, k);
        return -1;
    }
    if (g->rescore == 0) {
        if (g->api->flat_search(g->flat, n, queries, k, w->keys, labels, err, err_size) != 0)
            return -1;
        sg_gpu_keys_to_dist(g->metric, queries, g->dim, n, k, w->keys, labels, dist);
        return 0;
    }
    uint64_t want = (uint64_t)k * (uint64_t)g->rescore;
    int kc = want > g->max_k ? (int)g->max_k : (int)want;
    if (g->api->flat_search(g->flat, n, queries, kc, w->keys, w->cand, err, err_size) != 0)
        return -1;
    sg_gpu_rescore(&g->ff, queries, n, w->cand, kc, k, dist, labels, w->row);
    return 0;
}
