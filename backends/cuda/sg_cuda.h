/*
 * sg_cuda.h -- the interface of the CUDA module of the local backend, build/plugins/sg_local_cuda.so
 * (built only with -DSG_CUDA=ON). The local plugin dlopen()s it when its `device` is "auto" or
 * "cuda", so CPU-only runs never load the CUDA runtime or cuBLAS.
 *
 * The module exports one function, sg_cuda_entry(), returning a constant table. The loader checks
 * abi_version == SG_CUDA_ABI_VERSION and struct_size >= SG_CUDA_API_MIN_SIZE (the first table)
 * before using it. The table only grows at its end, each addition noted with the release that
 * made it; a caller uses a later function only when SG_CUDA_API_HAS says the module has it.
 * Only fixed-width C types, the e5 weight views of e5.h (plain pointers) and opaque handles cross
 * the boundary.
 *
 * Every function returns 0 on success, or -1 with a one-line message in `err` (naming the GPU,
 * the CUDA or cuBLAS call and its error string). Every create has a destroy.
 *
 * Threading:
 *   - probe() and device_info() may run on any thread at any time.
 *   - An encoder (the weights on one GPU) is read-only once created; each thread encodes with its
 *     own workspace (a CUDA stream, a cuBLAS handle and buffers); encode_ids() on different
 *     workspaces may run concurrently.
 *   - A flat index may be searched from any number of threads; searches of one index run one
 *     after another (each one uses all of its GPUs at once).
 *   - Each call selects its GPU itself (cudaSetDevice); the caller's current device is not kept.
 */
#ifndef SG_CUDA_SG_CUDA_H
#define SG_CUDA_SG_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "e5.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_CUDA_ABI_VERSION 1
#define SG_CUDA_ENTRY_NAME "sg_cuda_entry"
#define SG_CUDA_MODULE_FILE "sg_local_cuda.so"

typedef struct sg_cuda_encoder sg_cuda_encoder;
typedef struct sg_cuda_encoder_ws sg_cuda_encoder_ws;
typedef struct sg_cuda_flat sg_cuda_flat;

typedef struct sg_cuda_device_info {
    char name[128];
    int major, minor;     /* compute capability */
    uint64_t total_bytes; /* device memory */
    uint64_t free_bytes;  /* free now (cudaMemGetInfo) */
} sg_cuda_device_info;

/** What encoder_create() needs: the model's shape and float32 weights (host memory, borrowed). */
typedef struct sg_cuda_encoder_desc {
    uint32_t struct_size; /* sizeof(sg_cuda_encoder_desc) */
    int device;           /* CUDA device ordinal */
    const sg_e5_config *cfg;
    const sg_e5_embedding_weights *emb;
    const sg_e5_layer_weights *layers; /* cfg->layers entries */
    uint32_t max_len;                  /* longest sequence (ids incl. [CLS]/[SEP]), <= cfg->max_positions */
    uint32_t max_tokens;               /* padded tokens per forward pass (workspace size), >= max_len */
    uint32_t max_seqs;                 /* sequences per forward pass */
} sg_cuda_encoder_desc;

enum { SG_CUDA_SRC_FILE = 0, SG_CUDA_SRC_HOST = 1, SG_CUDA_SRC_RANDOM = 2 };

/** What flat_create() needs. */
typedef struct sg_cuda_flat_desc {
    uint32_t struct_size; /* sizeof(sg_cuda_flat_desc) */
    const int *devices;   /* the GPUs to shard over (contiguous, equal row ranges, in this order) */
    int n_devices;
    int source;            /* SG_CUDA_SRC_* */
    const char *path;      /* FILE: a FAISS IndexFlatIP / IndexFlatL2 file */
    const float *vectors;  /* HOST: n * dim floats, row-major (borrowed for the call) */
    int64_t n;             /* HOST, RANDOM: vectors */
    int dim;               /* HOST, RANDOM */
    int metric;            /* HOST, RANDOM: SG_GPU_IP or SG_GPU_L2 (gpuhost.h) */
    uint64_t seed;         /* RANDOM: unit vectors generated on the GPUs (benchmarks) */
    uint32_t max_queries;  /* most queries per flat_search() call, 1 .. SG_GPU_MAX_QUERIES */
    uint32_t max_k;        /* largest k, 1 .. SG_GPU_MAX_K */
    uint64_t score_budget; /* bytes of the score tile per GPU; 0 = 512 MiB */
} sg_cuda_flat_desc;

typedef struct sg_cuda_flat_info {
    int64_t ntotal;
    int dim, metric, n_shards;
    uint64_t bytes_per_shard[16]; /* device bytes of the first 16 shards */
} sg_cuda_flat_info;

typedef struct sg_cuda_api {
    uint32_t abi_version; /* SG_CUDA_ABI_VERSION */
    uint32_t struct_size; /* sizeof(sg_cuda_api) as the module saw it */
    const char *version;  /* the module's release and the CUDA runtime it was built with */

    /**
     * Counts the usable GPUs. Never fails: when CUDA cannot be used (no driver, no device, a
     * driver older than the runtime) *count is 0 and `why` says why, e.g. "cudaGetDeviceCount:
     * CUDA driver version is insufficient for CUDA runtime version (error 35)".
     */
    void (*probe)(int *count, char *why, size_t why_size);
    int (*device_info)(int device, sg_cuda_device_info *out, char *err, size_t err_size);

    /**
     * Uploads the weights to desc->device in fp16 (biases and LayerNorm parameters in fp32), after
     * checking they fit in its free memory.
     */
    int (*encoder_create)(const sg_cuda_encoder_desc *desc, sg_cuda_encoder **out, char *err, size_t err_size);
    void (*encoder_destroy)(sg_cuda_encoder *e);
    /** A workspace on the encoder's GPU; its memory is checked before allocation. */
    int (*encoder_ws_create)(sg_cuda_encoder *e, sg_cuda_encoder_ws **out, char *err, size_t err_size);
    void (*encoder_ws_destroy)(sg_cuda_encoder_ws *w);
    /**
     * Encodes `n` tokenised sequences (`ids[i]` has `lens[i]` ids, 1 .. max_len, each < vocab) into
     * `out` (n * hidden floats, L2-normalised): the maths of sg_e5_encode_ids with fp16 GEMMs
     * (fp32 accumulation). Blocks until the result is in `out`.
     */
    int (*encode_ids)(sg_cuda_encoder_ws *w, const int32_t *const *ids, const uint32_t *lens, size_t n, float *out, char *err,
                      size_t err_size);

    /** Loads (or generates) the vectors into fp16 shards on desc->devices, memory checked first. */
    int (*flat_create)(const sg_cuda_flat_desc *desc, sg_cuda_flat **out, char *err, size_t err_size);
    void (*flat_destroy)(sg_cuda_flat *f);
    void (*flat_info)(const sg_cuda_flat *f, sg_cuda_flat_info *out);
    /**
     * Searches `n` queries (n * dim floats; any n: calls of more than max_queries are split) for
     * their `k` best rows (1 .. max_k): FAISS's answer at fp16 precision of the stored vectors.
     * `keys` and `labels` get n * k values, best first: keys are "larger is better" (inner product;
     * for L2, 2 q.x - |x|^2: sg_gpu_keys_to_dist converts them to distances); missing: label -1.
     */
    int (*flat_search)(sg_cuda_flat *f, size_t n, const float *queries, int k, float *keys, int64_t *labels, char *err,
                       size_t err_size);

    /* ---- appended in 1.1 ---- */

    /**
     * The last known state of GPU `device`, without calling CUDA (cheap, any thread): 0, or -1 with
     * `err` naming the sticky error (an illegal address, a failed launch...) that a call of this
     * module met on it, after which every CUDA call on that GPU fails until the process restarts.
     */
    int (*device_error)(int device, char *err, size_t err_size);
} sg_cuda_api;

/* struct_size of the first table (up to flat_search): the smallest the loader accepts */
#define SG_CUDA_API_MIN_SIZE (offsetof(sg_cuda_api, flat_search) + sizeof(((sg_cuda_api *)0)->flat_search))
/* whether a loaded table has `field` (appended after the first table) */
#define SG_CUDA_API_HAS(api, field) ((api)->struct_size >= offsetof(sg_cuda_api, field) + sizeof((api)->field))

typedef const sg_cuda_api *(*sg_cuda_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
