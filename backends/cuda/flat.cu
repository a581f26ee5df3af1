/*
 * flat.cu -- exact (flat) inner-product / L2 search on GPUs, the equivalent of FAISS's
 * index_cpu_to_all_gpus(IndexFlat, useFloat16=True, shard=True) (docs/protocols.md, "e5 query encoding").
 *
 * Storage: the vectors are split into contiguous, equal row ranges, one per GPU (shards), and kept
 * in fp16 (row-major, [rows, d]); for L2 also the fp32 squared norms. They are read from the FAISS
 * file (gpuhost.c maps it; the data starts at the unaligned offset 45) in 64 MiB pieces through
 * two pinned buffers, so reading the next piece overlaps copying and converting the last, or come
 * from host memory, or are generated on the GPU (benchmarks).
 *
 * Search, per shard and per call of nq queries: the queries go to the GPU once (fp16); the shard
 * is cut into tiles of as many rows as the score buffer holds for nq queries; per tile one GEMM
 * (cuBLAS, fp16 inputs, fp32 accumulation and scores) -- or, for up to 8 queries, a streaming
 * kernel that reads each vector once with 16-byte loads -- then a selection kernel keeps the best k
 * of every SG_GPU_SELECT_CHUNK scores; the candidates of all tiles are reduced by the same kernel
 * until k remain per query. Keys are "larger is better": the inner product, or for L2
 * 2 q.x - |x|^2 (the squared distance minus the query's own norm, which does not change the
 * order). The shards run concurrently (asynchronous work on one stream per GPU); the host then
 * merges their lists (sg_gpu_merge) and adds each shard's first row to its labels.
 *
 * The selection kernel: one block per (chunk, query). Candidates above the block's current
 * threshold are appended to a shared-memory buffer; whenever it may overflow, the buffer is
 * bitonic-sorted (key descending, label ascending), cut to k and the threshold raised to the k-th
 * key. Only values that beat the k-th best seen so far are ever appended, so after the first few
 * hundred values the buffer rarely fills again; every step is a plain comparison, which keeps it
 * easy to check against FAISS (tests/gpu).
 */
#include "internal.cuh"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SEL_BLOCK 256
#define SEL_PER 8
#define SEL_SUB (SEL_BLOCK * SEL_PER) /* values read per block step */
#define SEL_CAP 4096                  /* shared buffer entries */
#define SEL_LIMIT (SEL_CAP - SEL_SUB) /* sort when more entries than this are held */
#define SMALL_NQ 8                    /* queries handled by the streaming score kernel */

#if SEL_LIMIT < SG_GPU_MAX_K || SG_GPU_SELECT_CHUNK < 2 * SG_GPU_MAX_K
#error "the selection buffer must hold SG_GPU_MAX_K entries and each level must shrink the candidates"
#endif

typedef struct st_shard_t {
    int dev;
    int64_t start, rows;
    sg_gpu_flat_plan_t plan;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudaEvent_t staged[2];
    __half *vec;
    float *norms;
    float *scores, *q32;
    __half *q16;
    float *ckey[2], *okey;
    int32_t *clab[2], *olab;
    float *stage;
    float *h_stage[2], *h_q, *h_okey; /* pinned */
    int32_t *h_olab;                  /* pinned */
} shard_t;

struct sg_cuda_flat {
    int64_t ntotal;
    int dim, metric;
    uint32_t max_queries, max_k;
    int n_shards;
    shard_t *shards;
    pthread_mutex_t mu; /* one search at a time */
    const float **m_keys;
    const int32_t **m_labels;
    int64_t *m_base;
};

/* ---- kernels ---- */

static __device__ __forceinline__ bool better(float ka, int32_t la, float kb, int32_t lb)
{
    return ka > kb || (ka == kb && (uint32_t)la < (uint32_t)lb); /* label -1 last among equals */
}

/* Sorts sv/si[0, m) best first (m <= SEL_CAP). Called by all threads; returns synchronised. */
static __device__ void sort_best_first(float *sv, int32_t *si, int m)
{
    int size = 1;
    while (size < m)
        size <<= 1;
    for (int i = m + threadIdx.x; i < size; i += blockDim.x) {
        sv[i] = -INFINITY;
        si[i] = -1;
    }
    __syncthreads();
    for (int kk = 2; kk <= size; kk <<= 1) {
        for (int j = kk >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < size; i += blockDim.x) {
                const int p = i ^ j;
                if (p > i) {
                    const float a = sv[i], b = sv[p];
                    const int32_t la = si[i], lb = si[p];
                    /* bitonic network: runs with (i & kk) == 0 go best first, the others worst first */
                    const bool swap = (i & kk) == 0 ? better(b, lb, a, la) : better(a, la, b, lb);
                    if (swap) {
                        sv[i] = b;
                        sv[p] = a;
                        si[i] = lb;
                        si[p] = la;
                    }
                }
            }
            __syncthreads();
        }
    }
}

/*
 * For query blockIdx.y and entries [blockIdx.x * CHUNK, +CHUNK) of its row of `n` (row stride
 * ld_in): writes the best k (key, label) pairs, best first, to vout/iout[q * ld_out + blockIdx.x * k].
 * Level 1 (iin == NULL): the label of entry e is base + e and its key is vin[e], minus norms[e]
 * when norms is given (L2). Later levels: labels come from iin. Keys of -inf (padding, label -1)
 * and NaN are never selected; missing outputs are (-inf, -1).
 */
__global__ void __launch_bounds__(SEL_BLOCK)
    select_topk(const float *vin, const int32_t *iin, int64_t n, int64_t ld_in, int32_t base, const float *norms, int k,
                float *vout, int32_t *iout, int64_t ld_out)
{
    SGC_SHARED(float, sv, [SEL_CAP]);
    SGC_SHARED(int32_t, si, [SEL_CAP]);
    SGC_SHARED(int, cnt, );
    const int tid = threadIdx.x;
    const int64_t q = blockIdx.y;
    const int64_t begin = (int64_t)blockIdx.x * SG_GPU_SELECT_CHUNK;
    const int64_t end = n < begin + SG_GPU_SELECT_CHUNK ? n : begin + SG_GPU_SELECT_CHUNK;
    const float *v = vin + q * ld_in;
    const int32_t *ix = iin != NULL ? iin + q * ld_in : NULL;
    if (tid == 0)
        cnt = 0;
    __syncthreads();
    float tau = -INFINITY;
    int m;
#define SEL_LOAD_APPEND(e)                                                                                                         \
    do {                                                                                                                           \
        float key_ = v[e];                                                                                                         \
        int32_t lab_;                                                                                                              \
        if (ix != NULL) {                                                                                                          \
            lab_ = ix[e];                                                                                                          \
        } else {                                                                                                                   \
            lab_ = base + (int32_t)(e);                                                                                            \
            if (norms != NULL)                                                                                                     \
                key_ -= norms[e];                                                                                                  \
        }                                                                                                                          \
        if (key_ > tau) {                                                                                                          \
            const int p_ = atomicAdd(&cnt, 1);                                                                                     \
            sv[p_] = key_;                                                                                                         \
            si[p_] = lab_;                                                                                                         \
        }                                                                                                                          \
    } while (0)
    /* warm-up on the first SEL_BLOCK entries, to get a threshold cheaply */
    if (begin + tid < end)
        SEL_LOAD_APPEND(begin + tid);
    __syncthreads();
    m = cnt;
    __syncthreads();
    if (m > k) {
        sort_best_first(sv, si, m);
        tau = sv[k - 1];
        m = k;
        if (tid == 0)
            cnt = k;
        __syncthreads();
    }
    for (int64_t sub = begin + SEL_BLOCK; sub < end; sub += SEL_SUB) {
        /* cnt <= SEL_LIMIT here, and at most SEL_SUB entries are appended: no overflow */
#pragma unroll
        for (int j = 0; j < SEL_PER; ++j) {
            const int64_t e = sub + (int64_t)j * SEL_BLOCK + tid;
            if (e < end)
                SEL_LOAD_APPEND(e);
        }
        __syncthreads();
        m = cnt;
        __syncthreads();
        if (m > SEL_LIMIT) {
            sort_best_first(sv, si, m);
            tau = sv[k - 1];
            m = k;
            if (tid == 0)
                cnt = k;
            __syncthreads();
        }
    }
#undef SEL_LOAD_APPEND
    sort_best_first(sv, si, m);
    float *vo = vout + q * ld_out + (int64_t)blockIdx.x * k;
    int32_t *io = iout + q * ld_out + (int64_t)blockIdx.x * k;
    for (int j = tid; j < k; j += SEL_BLOCK) {
        vo[j] = j < m ? sv[j] : -INFINITY;
        io[j] = j < m ? si[j] : -1;
    }
}

/* out[q * rows + r] = alpha * x_r . q for nq <= SMALL_NQ queries: one warp per row at a time,
 * 16-byte loads (d % 8 == 0, rows 16-byte aligned). Queries are staged in shared memory as fp32. */
__global__ void __launch_bounds__(256)
    small_scores(const __half *x, int64_t rows, int d, const __half *qh, int nq, float alpha, float *out)
{
    SGC_SHARED_DYN(float, qs); /* nq * d */
    for (int i = threadIdx.x; i < nq * d; i += blockDim.x)
        qs[i] = __half2float(qh[i]);
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    const int nv = d / 8;
    for (int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
        const uint4 *xr = reinterpret_cast<const uint4 *>(x + r * d);
        float acc[SMALL_NQ];
#pragma unroll
        for (int i = 0; i < SMALL_NQ; ++i)
            acc[i] = 0.0f;
        for (int c = lane; c < nv; c += 32) {
            const uint4 u = xr[c];
            const __half2 *h2 = reinterpret_cast<const __half2 *>(&u);
            float xv[8];
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                const float2 f = __half22float2(h2[t]);
                xv[2 * t] = f.x;
                xv[2 * t + 1] = f.y;
            }
#pragma unroll
            for (int i = 0; i < SMALL_NQ; ++i) {
                if (i < nq) {
                    const float *qq = qs + i * d + c * 8;
#pragma unroll
                    for (int t = 0; t < 8; ++t)
                        acc[i] += xv[t] * qq[t];
                }
            }
        }
#pragma unroll
        for (int i = 0; i < SMALL_NQ; ++i) {
            if (i < nq) {
                float s = acc[i];
                for (int o = 16; o > 0; o >>= 1)
                    s += __shfl_xor_sync(0xffffffffu, s, o);
                if (lane == 0)
                    out[(int64_t)i * rows + r] = alpha * s;
            }
        }
    }
}

/* fp32 rows -> fp16 rows (and their fp32 squared norms when norms != NULL); one warp per row */
__global__ void rows_to_half(const float *src, int64_t n, int d, __half *dst, float *norms)
{
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= n)
        return;
    const int lane = threadIdx.x & 31;
    float s = 0.0f;
    for (int j = lane; j < d; j += 32) {
        const float x = src[r * d + j];
        dst[r * d + j] = __float2half_rn(x);
        s += x * x;
    }
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (norms != NULL && lane == 0)
        norms[r] = s;
}

__global__ void to_half(const float *src, int64_t n, __half *dst)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

static __device__ __forceinline__ uint64_t splitmix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static __device__ __forceinline__ float uniform(uint64_t seed, uint64_t i)
{
    return (float)(splitmix(seed ^ splitmix(i)) >> 40) * (2.0f / 16777216.0f) - 1.0f; /* [-1, 1) */
}

/* Random unit vectors: element j of global row g depends only on (seed, g, j), so an index is
 * the same however it is sharded. One warp per row. */
__global__ void random_rows(uint64_t seed, int64_t first, int64_t n, int d, __half *dst, float *norms)
{
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= n)
        return;
    const int lane = threadIdx.x & 31;
    const uint64_t g = (uint64_t)(first + r) * (uint64_t)d;
    float s = 0.0f;
    for (int j = lane; j < d; j += 32) {
        const float x = uniform(seed, g + (uint64_t)j);
        s += x * x;
    }
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    const float inv = 1.0f / fmaxf(sqrtf(s), 1e-12f);
    float s2 = 0.0f;
    for (int j = lane; j < d; j += 32) {
        const float x = uniform(seed, g + (uint64_t)j) * inv;
        dst[r * d + j] = __float2half_rn(x);
        s2 += x * x;
    }
    for (int o = 16; o > 0; o >>= 1)
        s2 += __shfl_xor_sync(0xffffffffu, s2, o);
    if (norms != NULL && lane == 0)
        norms[r] = s2;
}

/* ---- create / destroy ---- */

static void shard_free(shard_t *s)
{
    cudaSetDevice(s->dev);
    if (s->blas != NULL)
        cublasDestroy(s->blas);
    for (int i = 0; i < 2; ++i) {
        if (s->staged[i] != NULL)
            cudaEventDestroy(s->staged[i]);
        cudaFree(s->ckey[i]);
        cudaFree(s->clab[i]);
        cudaFreeHost(s->h_stage[i]);
    }
    if (s->stream != NULL)
        cudaStreamDestroy(s->stream);
    void *dev_bufs[] = {s->vec, s->norms, s->scores, s->q32, s->q16, s->okey, s->olab, s->stage};
    for (size_t i = 0; i < sizeof(dev_bufs) / sizeof(dev_bufs[0]); ++i)
        cudaFree(dev_bufs[i]);
    cudaFreeHost(s->h_q);
    cudaFreeHost(s->h_okey);
    cudaFreeHost(s->h_olab);
}

void sgc_flat_destroy(sg_cuda_flat *f)
{
    if (f == NULL)
        return;
    for (int i = 0; f->shards != NULL && i < f->n_shards; ++i)
        shard_free(&f->shards[i]);
    free(f->shards);
    free(f->m_keys);
    free(f->m_labels);
    free(f->m_base);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* exactly the buffers sg_gpu_flat_plan counts */
static int shard_alloc(shard_t *s, char *err, size_t err_size)
{
    const int dev = s->dev;
    const sg_gpu_flat_plan_t *p = &s->plan;
    const size_t d = (size_t)p->dim, q = p->max_queries, kq = q * p->max_k;
    SGC_CUDA(cudaSetDevice(dev));
    SGC_CUDA(cudaMalloc((void **)&s->vec, (size_t)p->rows * d * sizeof(__half)));
    if (p->metric == SG_GPU_L2)
        SGC_CUDA(cudaMalloc((void **)&s->norms, (size_t)p->rows * sizeof(float)));
    SGC_CUDA(cudaMalloc((void **)&s->scores, (size_t)p->score_entries * sizeof(float)));
    SGC_CUDA(cudaMalloc((void **)&s->q32, q * d * sizeof(float)));
    SGC_CUDA(cudaMalloc((void **)&s->q16, q * d * sizeof(__half)));
    for (int i = 0; i < 2; ++i) {
        SGC_CUDA(cudaMalloc((void **)&s->ckey[i], (size_t)p->cand_entries * sizeof(float)));
        SGC_CUDA(cudaMalloc((void **)&s->clab[i], (size_t)p->cand_entries * sizeof(int32_t)));
        SGC_CUDA(cudaHostAlloc((void **)&s->h_stage[i], p->stage_bytes, cudaHostAllocPortable));
        SGC_CUDA(cudaEventCreateWithFlags(&s->staged[i], cudaEventDisableTiming));
    }
    SGC_CUDA(cudaMalloc((void **)&s->okey, kq * sizeof(float)));
    SGC_CUDA(cudaMalloc((void **)&s->olab, kq * sizeof(int32_t)));
    SGC_CUDA(cudaMalloc((void **)&s->stage, p->stage_bytes));
    SGC_CUDA(cudaHostAlloc((void **)&s->h_q, q * d * sizeof(float), cudaHostAllocPortable));
    SGC_CUDA(cudaHostAlloc((void **)&s->h_okey, kq * sizeof(float), cudaHostAllocPortable));
    SGC_CUDA(cudaHostAlloc((void **)&s->h_olab, kq * sizeof(int32_t), cudaHostAllocPortable));
    SGC_CUDA(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    SGC_BLAS(cublasCreate(&s->blas));
    SGC_BLAS(cublasSetStream(s->blas, s->stream));
    return 0;
}

/* Uploads the shard's rows from the mapped file or from host memory (src = row 0 of the shard). */
static int shard_upload(shard_t *s, const sg_gpu_flatfile_t *ff, const float *host, char *err, size_t err_size)
{
    const int dev = s->dev;
    const int64_t d = s->plan.dim, step = s->plan.stage_rows;
    int b = 0;
    for (int64_t r = 0; r < s->rows; r += step, b ^= 1) {
        const int64_t n = s->rows - r < step ? s->rows - r : step;
        /* the copy that last read this pinned buffer has finished */
        SGC_CUDA(cudaEventSynchronize(s->staged[b]));
        if (ff != NULL)
            sg_gpu_flat_rows(ff, s->start + r, n, s->h_stage[b]);
        else
            memcpy(s->h_stage[b], host + r * d, (size_t)(n * d) * sizeof(float));
        SGC_CUDA(cudaMemcpyAsync(s->stage, s->h_stage[b], (size_t)(n * d) * sizeof(float), cudaMemcpyHostToDevice, s->stream));
        SGC_CUDA(cudaEventRecord(s->staged[b], s->stream));
        /* the stream orders this kernel after the copy, and the next copy into s->stage after it */
        SGC_LAUNCH(rows_to_half, sgc_blocks(n, 8), 256, 0, s->stream, s->stage, n, (int)d, s->vec + r * d,
                   s->norms != NULL ? s->norms + r : NULL);
        SGC_LAUNCHED("rows_to_half");
    }
    SGC_CUDA(cudaStreamSynchronize(s->stream));
    return 0;
}

static int shard_random(shard_t *s, uint64_t seed, char *err, size_t err_size)
{
    const int dev = s->dev;
    const int64_t d = s->plan.dim, step = (int64_t)1 << 20;
    for (int64_t r = 0; r < s->rows; r += step) {
        const int64_t n = s->rows - r < step ? s->rows - r : step;
        SGC_LAUNCH(random_rows, sgc_blocks(n, 8), 256, 0, s->stream, seed, s->start + r, n, (int)d, s->vec + r * d,
                   s->norms != NULL ? s->norms + r : NULL);
        SGC_LAUNCHED("random_rows");
    }
    SGC_CUDA(cudaStreamSynchronize(s->stream));
    return 0;
}

int sgc_flat_create(const sg_cuda_flat_desc *desc, sg_cuda_flat **out, char *err, size_t err_size)
{
    *out = NULL;
    int dev = -1, count = 0;
    if (desc->struct_size < sizeof(sg_cuda_flat_desc) || desc->devices == NULL || desc->n_devices < 1) {
        snprintf(err, err_size, "flat_create: no GPU given");
        return -1;
    }
    SGC_CUDA(cudaGetDeviceCount(&count));
    for (int i = 0; i < desc->n_devices; ++i) {
        if (desc->devices[i] < 0 || desc->devices[i] >= count) {
            snprintf(err, err_size, "GPU %d does not exist (%d visible)", desc->devices[i], count);
            return -1;
        }
        for (int j = 0; j < i; ++j) {
            if (desc->devices[j] == desc->devices[i]) {
                snprintf(err, err_size, "GPU %d is listed twice", desc->devices[i]);
                return -1;
            }
        }
    }
    sg_gpu_flatfile_t ff;
    memset(&ff, 0, sizeof(ff));
    int64_t ntotal;
    int dim, metric;
    if (desc->source == SG_CUDA_SRC_FILE) {
        if (desc->path == NULL || sg_gpu_flat_open(desc->path, &ff, err, err_size) != 0) {
            if (desc->path == NULL)
                snprintf(err, err_size, "flat_create: no path");
            return -1;
        }
        ntotal = ff.ntotal;
        dim = ff.dim;
        metric = ff.metric;
    } else if (desc->source == SG_CUDA_SRC_HOST || desc->source == SG_CUDA_SRC_RANDOM) {
        if ((desc->source == SG_CUDA_SRC_HOST && desc->vectors == NULL) ||
            (desc->metric != SG_GPU_IP && desc->metric != SG_GPU_L2)) {
            snprintf(err, err_size, "flat_create: no vectors or an unknown metric");
            return -1;
        }
        ntotal = desc->n;
        dim = desc->dim;
        metric = desc->metric;
    } else {
        snprintf(err, err_size, "flat_create: unknown source %d", desc->source);
        return -1;
    }
    if (ntotal < 1) {
        snprintf(err, err_size, "the flat index is empty");
        sg_gpu_flat_close(&ff);
        return -1;
    }
    sg_cuda_flat *f = (sg_cuda_flat *)calloc(1, sizeof(*f));
    int nsh = desc->n_devices < ntotal ? desc->n_devices : (int)ntotal;
    int64_t *start = (int64_t *)calloc((size_t)nsh, sizeof(int64_t)), *rows = (int64_t *)calloc((size_t)nsh, sizeof(int64_t));
    if (f == NULL || start == NULL || rows == NULL) {
        free(f);
        free(start);
        free(rows);
        sg_gpu_flat_close(&ff);
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    pthread_mutex_init(&f->mu, NULL);
    f->ntotal = ntotal;
    f->dim = dim;
    f->metric = metric;
    f->max_queries = desc->max_queries;
    f->max_k = desc->max_k;
    f->shards = (shard_t *)calloc((size_t)nsh, sizeof(shard_t));
    f->m_keys = (const float **)calloc((size_t)nsh, sizeof(float *));
    f->m_labels = (const int32_t **)calloc((size_t)nsh, sizeof(int32_t *));
    f->m_base = (int64_t *)calloc((size_t)nsh, sizeof(int64_t));
    int rc = -1;
    if (f->shards == NULL || f->m_keys == NULL || f->m_labels == NULL || f->m_base == NULL) {
        snprintf(err, err_size, "out of memory");
        goto out;
    }
    sg_gpu_plan_shards(ntotal, nsh, start, rows);
    /* plan and check every shard before allocating anything */
    for (int i = 0; i < nsh; ++i) {
        shard_t *s = &f->shards[i];
        s->dev = desc->devices[i];
        s->start = start[i];
        s->rows = rows[i];
        s->plan.rows = rows[i];
        s->plan.dim = dim;
        s->plan.metric = metric;
        s->plan.max_queries = desc->max_queries;
        s->plan.max_k = desc->max_k;
        s->plan.score_budget = desc->score_budget != 0 ? desc->score_budget : ((uint64_t)512 << 20);
        char e2[200];
        if (sg_gpu_flat_plan(&s->plan, e2, sizeof(e2)) != 0) {
            snprintf(err, err_size, "GPU flat index: %s", e2);
            goto out;
        }
        dev = s->dev;
        cudaError_t ce = cudaSetDevice(dev);
        if (ce != cudaSuccess) {
            sgc_fail_cuda(err, err_size, dev, "cudaSetDevice", ce);
            goto out;
        }
        char what[256], v[32], b[32];
        snprintf(what, sizeof(what), "shard %d of %d of the flat index (%lld of %lld vectors x %d in fp16: %s, search buffers %s)",
                 i + 1, nsh, (long long)s->rows, (long long)ntotal, dim, sg_gpu_fmt_bytes(s->plan.vec_bytes, v, sizeof(v)),
                 sg_gpu_fmt_bytes(s->plan.total_bytes - s->plan.vec_bytes, b, sizeof(b)));
        if (sgc_check_memory(dev, s->plan.total_bytes, what,
                             "shard over more GPUs (gpu_ids), lower max_batch, or use device \"cpu\"", err, err_size) != 0)
            goto out;
    }
    f->n_shards = nsh; /* from here on shard_free may run on every shard */
    if (ff.map != NULL)
        sg_gpu_flat_advise(&ff, 1);
    for (int i = 0; i < nsh; ++i) {
        shard_t *s = &f->shards[i];
        if (shard_alloc(s, err, err_size) != 0)
            goto out;
        if (desc->source == SG_CUDA_SRC_RANDOM) {
            if (shard_random(s, desc->seed, err, err_size) != 0)
                goto out;
        } else if (shard_upload(s, ff.map != NULL ? &ff : NULL, desc->vectors != NULL ? desc->vectors + s->start * dim : NULL, err,
                                err_size) != 0) {
            goto out;
        }
        f->m_keys[i] = s->h_okey;
        f->m_labels[i] = s->h_olab;
        f->m_base[i] = s->start;
    }
    rc = 0;
out:
    sg_gpu_flat_close(&ff);
    free(start);
    free(rows);
    if (rc != 0) {
        sgc_flat_destroy(f);
        return -1;
    }
    *out = f;
    return 0;
}

void sgc_flat_info(const sg_cuda_flat *f, sg_cuda_flat_info *out)
{
    memset(out, 0, sizeof(*out));
    out->ntotal = f->ntotal;
    out->dim = f->dim;
    out->metric = f->metric;
    out->n_shards = f->n_shards;
    for (int i = 0; i < f->n_shards && i < 16; ++i)
        out->bytes_per_shard[i] = f->shards[i].plan.total_bytes;
}

/* ---- search ---- */

static int select_launch(const shard_t *s, const float *vin, const int32_t *iin, int64_t n, int64_t ld_in, int32_t base,
                         const float *norms, int k, uint32_t nq, float *vout, int32_t *iout, int64_t ld_out, char *err,
                         size_t err_size)
{
    const int dev = s->dev;
    dim3 grid((unsigned)sg_gpu_select_blocks(n), nq);
    SGC_LAUNCH(select_topk, grid, SEL_BLOCK, 0, s->stream, vin, iin, n, ld_in, base, norms, k, vout, iout, ld_out);
    SGC_LAUNCHED("select_topk");
    return 0;
}

/* Queues the search of `nq` queries (already in s->h_q) on the shard's stream. */
static int shard_search(shard_t *s, uint32_t nq, int k, char *err, size_t err_size)
{
    const int dev = s->dev;
    const sg_gpu_flat_plan_t *p = &s->plan;
    const int d = p->dim;
    const float alpha = p->metric == SG_GPU_L2 ? 2.0f : 1.0f;
    SGC_CUDA(cudaSetDevice(dev));
    SGC_CUDA(cudaMemcpyAsync(s->q32, s->h_q, (size_t)nq * d * sizeof(float), cudaMemcpyHostToDevice, s->stream));
    SGC_LAUNCH(to_half, sgc_blocks((int64_t)nq * d, 256), 256, 0, s->stream, s->q32, (int64_t)nq * d, s->q16);
    SGC_LAUNCHED("to_half");
    sg_gpu_flat_layout_t lay;
    sg_gpu_flat_layout(p, nq, (uint32_t)k, &lay);
    if ((int64_t)nq * lay.level1 > p->cand_entries || (int64_t)nq * lay.tile > p->score_entries) {
        snprintf(err, err_size, "GPU %d: internal error: search layout exceeds the planned buffers", dev);
        return -1;
    }
    const bool small = nq <= SMALL_NQ && d % 8 == 0 && (size_t)nq * d * sizeof(float) <= 48 * 1024;
    for (int64_t t = 0; t < lay.n_tiles; ++t) {
        const int64_t r0 = t * lay.tile, rt = p->rows - r0 < lay.tile ? p->rows - r0 : lay.tile;
        if (small) {
            const unsigned grid = sgc_blocks(rt, 8) < 4096 ? sgc_blocks(rt, 8) : 4096;
            SGC_LAUNCH(small_scores, grid, 256, (size_t)nq * d * sizeof(float), s->stream, s->vec + r0 * d, rt, d, s->q16, (int)nq,
                       alpha, s->scores);
            SGC_LAUNCHED("small_scores");
        } else {
            /* scores[q][r] (column-major [rt x nq], ld rt) = alpha * vec[r0 + r] . q */
            const float beta = 0.0f;
            SGC_BLAS(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rt, (int)nq, d, &alpha, s->vec + r0 * d, CUDA_R_16F, d,
                                  s->q16, CUDA_R_16F, d, &beta, s->scores, CUDA_R_32F, (int)rt, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
        }
        if (select_launch(s, s->scores, NULL, rt, rt, (int32_t)r0, s->norms != NULL ? s->norms + r0 : NULL, k, nq,
                          s->ckey[0] + t * lay.chunks_full * k, s->clab[0] + t * lay.chunks_full * k, lay.level1, err,
                          err_size) != 0)
            return -1;
    }
    int cur = 0;
    int64_t n = lay.level1;
    while (sg_gpu_select_blocks(n) > 1) {
        const int64_t nb = sg_gpu_select_blocks(n);
        if (select_launch(s, s->ckey[cur], s->clab[cur], n, n, 0, NULL, k, nq, s->ckey[cur ^ 1], s->clab[cur ^ 1], nb * k, err,
                          err_size) != 0)
            return -1;
        n = nb * k;
        cur ^= 1;
    }
    if (select_launch(s, s->ckey[cur], s->clab[cur], n, n, 0, NULL, k, nq, s->okey, s->olab, k, err, err_size) != 0)
        return -1;
    SGC_CUDA(cudaMemcpyAsync(s->h_okey, s->okey, (size_t)nq * k * sizeof(float), cudaMemcpyDeviceToHost, s->stream));
    SGC_CUDA(cudaMemcpyAsync(s->h_olab, s->olab, (size_t)nq * k * sizeof(int32_t), cudaMemcpyDeviceToHost, s->stream));
    return 0;
}

static int search_part(sg_cuda_flat *f, size_t nq, const float *queries, int k, float *keys, int64_t *labels, char *err,
                       size_t err_size)
{
    int rc = 0;
    int launched = 0;
    for (int i = 0; i < f->n_shards; ++i) {
        shard_t *s = &f->shards[i];
        memcpy(s->h_q, queries, nq * (size_t)f->dim * sizeof(float));
        ++launched;
        if (shard_search(s, (uint32_t)nq, k, err, err_size) != 0) {
            rc = -1;
            break;
        }
    }
    /* wait for everything queued, even after a failure (the pinned buffers are reused) */
    for (int i = 0; i < launched; ++i) {
        shard_t *s = &f->shards[i];
        int dev = s->dev;
        cudaError_t e = cudaSetDevice(dev);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s->stream);
        if (e != cudaSuccess && rc == 0)
            rc = sgc_fail_cuda(err, err_size, dev, "cudaStreamSynchronize (flat search)", e);
        else
            sgc_note_cuda(dev, e, "cudaStreamSynchronize (flat search)");
    }
    if (rc != 0)
        return -1;
    sg_gpu_merge((size_t)f->n_shards, f->m_keys, f->m_labels, f->m_base, nq, k, keys, labels);
    return 0;
}

int sgc_flat_search(sg_cuda_flat *f, size_t n, const float *queries, int k, float *keys, int64_t *labels, char *err,
                    size_t err_size)
{
    if (k < 1 || (uint32_t)k > f->max_k) {
        snprintf(err, err_size, "k %d outside 1 .. %u (the GPU index's max_k)", k, f->max_k);
        return -1;
    }
    int rc = 0;
    pthread_mutex_lock(&f->mu);
    for (size_t off = 0; off < n && rc == 0; off += f->max_queries) {
        size_t nq = n - off < f->max_queries ? n - off : f->max_queries;
        rc = search_part(f, nq, queries + off * (size_t)f->dim, k, keys + off * (size_t)k, labels + off * (size_t)k, err, err_size);
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}
