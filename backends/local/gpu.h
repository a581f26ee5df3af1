/*
 * gpu.h -- the GPU path of the local backend (docs/backends/gpu.md): device selection
 * ("device": auto | cpu | cuda), the CUDA module build/plugins/sg_local_cuda.so (dlopen()ed only
 * here, only when the device is not "cpu"), one fp16 encoder per GPU, and a FAISS Flat index
 * sharded over the GPUs in fp16 with optional exact re-scoring. With "cpu", or when "auto" finds
 * no usable GPU, nothing here is used and the backend runs exactly as without it.
 *
 * Threading: open/load/worker_init/close run on the main thread (create/destroy); encode and
 * search run on the workers, each with its own sg_local_gpu_worker_t.
 */
#ifndef SG_LOCAL_GPU_H
#define SG_LOCAL_GPU_H

#include "cfg.h"
#include "e5.h"
#include "faissidx.h"
#include "gpuhost.h"
#include "sg_backend.h"
#include "sg_cuda.h"

enum { SG_LOCAL_DEVICE_AUTO = 0, SG_LOCAL_DEVICE_CPU = 1, SG_LOCAL_DEVICE_CUDA = 2 };

#define SG_LOCAL_MAX_GPUS 64

/** The GPU keys of the backend's config. */
typedef struct st_sg_local_gpu_cfg_t {
    int device;                 /* SG_LOCAL_DEVICE_* */
    int ids[SG_LOCAL_MAX_GPUS]; /* gpu_ids */
    int n_ids;                  /* 0: every visible GPU */
    int flat;                   /* gpu_index: a Flat index is searched on the GPUs */
    int rescore;                /* gpu_rescore: candidates per hit re-scored in fp32; 0 = off */
    uint32_t max_tokens;        /* gpu_max_tokens */
    char *module;               /* cuda_module, or NULL: beside the plugin */
} sg_local_gpu_cfg_t;

/** The names of the "device" key, in SG_LOCAL_DEVICE_* order. */
extern const char *const sg_local_gpu_devices[];

/**
 * The GPU keys, for the backend's config table (lib/cfg.h): device, gpu_ids, gpu_index,
 * gpu_rescore, gpu_max_tokens and cuda_module, read into the sg_local_gpu_cfg_t member `f` of T.
 * gpu_ids is read by sg_local_gpu_read_ids() after the table.
 */
#define SG_LOCAL_GPU_KEYS(T, f)                                                                                                    \
    SG_CFG_ENUM(T, f.device, "device", sg_local_gpu_devices, SG_LOCAL_DEVICE_AUTO), SG_CFG_CUSTOM_KEY("gpu_ids"),                  \
        SG_CFG_BOOL(T, f.flat, "gpu_index", 1), SG_CFG_INT(T, f.rescore, "gpu_rescore", 0, 16, 0),                                 \
        SG_CFG_INT(T, f.max_tokens, "gpu_max_tokens", 2, 16777216, 16384), SG_CFG_PATH(T, f.module, "cuda_module", 0)

/** Reads gpu_ids into `out` (the rest of the GPU keys come from the table). */
int sg_local_gpu_read_ids(sg_cfg_t *c, const cJSON *root, sg_local_gpu_cfg_t *out);
void sg_local_gpu_cfg_free(sg_local_gpu_cfg_t *cfg);

typedef struct st_sg_local_gpu_t {
    const sg_cuda_api *api;
    int n; /* GPUs in use */
    int ids[SG_LOCAL_MAX_GPUS];
    sg_cuda_encoder *enc[SG_LOCAL_MAX_GPUS];
    sg_cuda_flat *flat;   /* NULL: the index is searched by FAISS on the CPU */
    sg_gpu_flatfile_t ff; /* mapped while re-scoring */
    int rescore, metric, dim;
    uint32_t max_k;                  /* k of a GPU search, re-scoring candidates included */
    uint32_t pass_tokens, pass_seqs; /* the encoder's pass limits (its padding is counted with them) */
    char identity[48];
} sg_local_gpu_t;

/**
 * Chooses the device. Returns 0 with *out NULL when the CPU is to be used (for "auto", after
 * logging why), 0 with a GPU state, or -1 with a message in `err` when "cuda" cannot be honoured
 * or gpu_ids names a GPU that does not exist. `anchor` is any address inside the plugin (the
 * module is looked for beside it).
 */
int sg_local_gpu_open(const sg_local_gpu_cfg_t *cfg, const sg_host_api *host, const char *instance, const void *anchor,
                      sg_local_gpu_t **out, char *err, size_t err_size);
/** Uploads the model to every GPU in use (fp16), memory checked first. */
int sg_local_gpu_load_encoder(sg_local_gpu_t *g, const sg_e5_model *m, uint32_t max_len, uint32_t max_tokens, uint32_t max_seqs,
                              char *err, size_t err_size);
/**
 * Puts a FAISS Flat IP/L2 index on the GPUs (sharded, fp16) when `flat` is set and the file is
 * one; fills `ix` like sg_fidx_open (index NULL: FAISS never reads the file). Returns 1 when the
 * index is on the GPUs, 0 when it is not a Flat index or `flat` is off (the caller opens it with
 * FAISS on the CPU), -1 with `err` set.
 */
int sg_local_gpu_load_index(sg_local_gpu_t *g, int flat, const char *path, const char *params, uint32_t max_queries,
                            uint32_t max_topk, sg_fidx_t *ix, char *err, size_t err_size);
/** The largest topk a GPU search serves (SG_GPU_MAX_K / re-scoring factor); 0 when the index is on the CPU. */
uint32_t sg_local_gpu_max_topk(const sg_local_gpu_t *g);
/** Lines for the start-up log: devices, memory, what runs where. */
void sg_local_gpu_log(const sg_local_gpu_t *g, const sg_host_api *host, const char *instance);
/**
 * The GPUs' last known state, for the backend's health (cheap, any thread): SG_OK, or SG_EUNAVAIL
 * with the reason in `detail` once a GPU met a sticky CUDA error (an illegal address seen by a
 * worker...), after which every call on it fails until the process restarts.
 */
sg_status sg_local_gpu_health(const sg_local_gpu_t *g, char *detail, size_t detail_size);
/** "gpu:enc16", "gpu:enc16+flat16" or "gpu:enc16+flat16+rs4": the cache identity of the GPU path. */
const char *sg_local_gpu_identity(const sg_local_gpu_t *g);
void sg_local_gpu_close(sg_local_gpu_t *g);

/** A worker's GPU state: an encoder workspace on GPU ids[i % n] and scratch buffers. */
typedef struct st_sg_local_gpu_worker_t {
    sg_cuda_encoder_ws *ws;
    int32_t *ids;
    const int32_t **idp;
    uint32_t *lens;
    float *keys, *row;
    int64_t *cand;
    size_t max_batch;
    uint32_t max_len;
    size_t *order;           /* the batch by length (sg_local_gpu_encode) ... */
    uint32_t *slens;         /* ... their lengths ... */
    const int32_t **sidp;    /* ... their ids ... */
    float *sout;             /* ... and their embeddings before they are put back in order */
    size_t cap_sout;         /* floats */
    uint64_t tokens, padded; /* tokens encoded (padding included) and the padding, ever */
    uint64_t sorted_batches; /* batches encoded in length order */
} sg_local_gpu_worker_t;

int sg_local_gpu_worker_init(sg_local_gpu_t *g, size_t i, size_t max_batch, uint32_t max_len, sg_local_gpu_worker_t *w, char *err,
                             size_t err_size);
void sg_local_gpu_worker_free(sg_local_gpu_t *g, sg_local_gpu_worker_t *w);
/**
 * Tokenises (prefix + text, max_len) and encodes `n` <= max_batch texts on the worker's GPU: in
 * length order when the encoder's passes then pad fewer tokens (in no more passes), the
 * embeddings put back in the texts' order. Counts tokens, padding and length-sorted batches in `w`.
 */
int sg_local_gpu_encode(sg_local_gpu_t *g, sg_local_gpu_worker_t *w, const sg_e5_model *m, const char *prefix,
                        const char *const *texts, const size_t *lens, size_t n, float *out, char *err, size_t err_size);
/** Searches the GPU index like sg_fidx_search: n * k distances (FAISS's) and labels, best first. */
int sg_local_gpu_search(sg_local_gpu_t *g, sg_local_gpu_worker_t *w, size_t n, const float *queries, int k, float *dist,
                        int64_t *labels, char *err, size_t err_size);

#endif
