/*
 * encoder.cu -- the e5 (BERT) query encoder on a GPU: the maths of sg_e5_encode_ids
 * (backends/encoder/e5.c) with the weights in fp16 and cuBLAS tensor-core GEMMs.
 *
 * Precision: GEMM inputs are fp16, accumulation and outputs fp32 (CUBLAS_COMPUTE_32F); biases,
 * LayerNorm parameters, the residual stream, LayerNorm statistics, softmax, GELU (exact erf),
 * mean pooling and the L2 normalisation are fp32; each GEMM input is rounded to fp16 once. This
 * is at least as precise as Search-R1's `.half()` model, whose every activation is fp16.
 *
 * A batch is padded to its longest sequence (attention masks the padding keys; pooling averages
 * over the real tokens only), in forward passes of at most max_seqs sequences and max_tokens
 * padded tokens, the workspace size. Per layer: one GEMM for Q, K and V together, per head a
 * strided-batched GEMM for the scores and one for the context, a masked softmax kernel, the
 * attention output GEMM, bias + residual + LayerNorm, the intermediate GEMM, bias + GELU, the
 * output GEMM, bias + residual + LayerNorm.
 *
 * Each workspace owns a CUDA stream and a cuBLAS handle: workers encoding on different
 * workspaces overlap with each other and with their own host work (tokenising, building
 * results). Memory: cudaMalloc only, sizes from sg_gpu_enc_plan, checked before allocation.
 */
#include "internal.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 256

typedef struct st_layer_dev_t {
    __half *wqkv, *wo, *wi, *wo2; /* [3h, h], [h, h], [I, h], [h, I], row-major as torch stores them */
    float *bqkv, *bo, *bi, *bo2, *ln1_g, *ln1_b, *ln2_g, *ln2_b;
} layer_dev_t;

struct sg_cuda_encoder {
    int dev;
    sg_gpu_enc_plan_t plan;
    float eps;
    __half *word, *pos; /* [vocab, h], [positions, h] */
    float *type0, *ln_g, *ln_b;
    layer_dev_t *layers;
    int n_layers;
};

struct sg_cuda_encoder_ws {
    sg_cuda_encoder *e;
    cudaStream_t stream;
    cublasHandle_t blas;
    int32_t *ids, *lens;
    float *x32, *y32, *s32, *a32, *pooled;
    __half *xh, *qkvh, *p16, *ctxh, *ah, *interh;
    int32_t *h_ids, *h_lens; /* pinned */
    float *h_out;            /* pinned */
};

/* ---- kernels ---- */

/* The LayerNorm of one row already in shared memory (`sum` = this thread's partial sum of it),
 * scaled by g and shifted by b, stored as fp32 and fp16. Called by every thread of the block. */
static __device__ __forceinline__ void ln_row_store(const float *row, float sum, int h, float eps, const float *g, const float *b,
                                                    float *red, float *o32, __half *o16)
{
    const float mean = sgc_block_sum(sum, red) / (float)h;
    float s2 = 0.0f;
    for (int j = threadIdx.x; j < h; j += blockDim.x) {
        float d = row[j] - mean;
        s2 += d * d;
    }
    const float inv = 1.0f / sqrtf(sgc_block_sum(s2, red) / (float)h + eps);
    for (int j = threadIdx.x; j < h; j += blockDim.x) {
        float v = ((row[j] - mean) * inv) * g[j] + b[j];
        o32[j] = v;
        o16[j] = __float2half_rn(v);
    }
}

/* x = LayerNorm(word[id] + type[0] + pos[p]) for one token row per block; writes fp32 and fp16. */
__global__ void __launch_bounds__(BLOCK)
    embed_ln(const int32_t *ids, int L, const __half *word, const __half *pos, const float *type0, const float *g, const float *b,
             int h, float eps, float *x32, __half *xh)
{
    SGC_SHARED_DYN(float, row);
    SGC_SHARED(float, red, [32]);
    const int64_t r = blockIdx.x;
    const int p = (int)(r % L);
    const __half *we = word + (int64_t)ids[r] * h, *pe = pos + (int64_t)p * h;
    float s = 0.0f;
    for (int j = threadIdx.x; j < h; j += blockDim.x) {
        float v = (__half2float(we[j]) + type0[j]) + __half2float(pe[j]);
        row[j] = v;
        s += v;
    }
    ln_row_store(row, s, h, eps, g, b, red, x32 + r * h, xh + r * h);
}

/* out = LayerNorm((y + bias) + res) for one row per block; writes fp32 and fp16. */
__global__ void __launch_bounds__(BLOCK) bias_res_ln(const float *y, const float *bias, const float *res, const float *g,
                                                     const float *b, int h, float eps, float *o32, __half *o16)
{
    SGC_SHARED_DYN(float, row);
    SGC_SHARED(float, red, [32]);
    const int64_t r = blockIdx.x;
    float s = 0.0f;
    for (int j = threadIdx.x; j < h; j += blockDim.x) {
        float v = (y[r * h + j] + bias[j]) + res[r * h + j];
        row[j] = v;
        s += v;
    }
    ln_row_store(row, s, h, eps, g, b, red, o32 + r * h, o16 + r * h);
}

/* out[i] = fp16(y[i] + bias[i % cols]) */
__global__ void bias_half(const float *y, const float *bias, int64_t n, int cols, __half *out)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2half_rn(y[i] + bias[i % cols]);
}

/* out[i] = fp16(gelu(y[i] + bias[i % cols])), exact erf GELU */
__global__ void bias_gelu(const float *y, const float *bias, int64_t n, int cols, __half *out)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = y[i] + bias[i % cols];
        out[i] = __float2half_rn(0.5f * v * (1.0f + erff(v * 0.70710678118654752440f)));
    }
}

/* Softmax of each score row over the keys of its sequence (j < lens[b]); padding keys get 0.
 * Rows are [head][sequence][query position], each L long; one warp per row. */
__global__ void softmax_masked(const float *s, const int32_t *lens, int B, int L, int64_t rows, __half *p)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    /* grid-stride over rows; r is the same for all lanes of a warp, so the shuffles stay uniform */
    for (int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
        const int len = lens[(r / L) % B];
        const float *x = s + r * L;
        __half *y = p + r * L;
        float mx = -INFINITY;
        for (int j = lane; j < len; j += 32)
            mx = fmaxf(mx, x[j]);
        for (int o = 16; o > 0; o >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.0f;
        for (int j = lane; j < len; j += 32)
            sum += expf(x[j] - mx);
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float inv = 1.0f / sum;
        for (int j = lane; j < L; j += 32)
            y[j] = __float2half_rn(j < len ? expf(x[j] - mx) * inv : 0.0f);
    }
}

/* out[b] = normalize(mean of the first lens[b] rows of sequence b), one sequence per block */
__global__ void __launch_bounds__(BLOCK) pool_normalize(const float *x32, const int32_t *lens, int L, int h, float *out)
{
    SGC_SHARED_DYN(float, row);
    SGC_SHARED(float, red, [32]);
    const int64_t b = blockIdx.x;
    const int len = lens[b];
    const float *base = x32 + b * L * h;
    float s2 = 0.0f;
    for (int j = threadIdx.x; j < h; j += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < len; ++t)
            acc += base[(int64_t)t * h + j];
        float v = acc / (float)len;
        row[j] = v;
        s2 += v * v;
    }
    const float inv = 1.0f / fmaxf(sqrtf(sgc_block_sum(s2, red)), 1e-12f);
    for (int j = threadIdx.x; j < h; j += blockDim.x)
        out[b * h + j] = row[j] * inv;
}

/* ---- weights ---- */

static int up_f32(int dev, const float *src, size_t n, float **dst, char *err, size_t err_size)
{
    SGC_CUDA(cudaMalloc((void **)dst, n * sizeof(float)));
    SGC_CUDA(cudaMemcpy(*dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
}

/* Converts `n_parts` float arrays of `part` elements each to one fp16 device array, back to back. */
static int up_f16(int dev, const float *const *parts, int n_parts, size_t part, __half **dst, char *err, size_t err_size)
{
    size_t n = part * (size_t)n_parts;
    uint16_t *tmp = (uint16_t *)malloc(n * sizeof(uint16_t) + 16);
    if (tmp == NULL) {
        snprintf(err, err_size, "out of host memory converting weights to fp16");
        return -1;
    }
    for (int i = 0; i < n_parts; ++i)
        sg_gpu_f32_to_f16_n(parts[i], tmp + part * (size_t)i, part);
    cudaError_t e = cudaMalloc((void **)dst, n * sizeof(__half));
    if (e == cudaSuccess)
        e = cudaMemcpy(*dst, tmp, n * sizeof(__half), cudaMemcpyHostToDevice);
    free(tmp);
    if (e != cudaSuccess)
        return sgc_fail_cuda(err, err_size, dev, "uploading fp16 weights", e);
    return 0;
}

static int up_concat_f32(int dev, const float *const *parts, int n_parts, size_t part, float **dst, char *err, size_t err_size)
{
    SGC_CUDA(cudaMalloc((void **)dst, part * (size_t)n_parts * sizeof(float)));
    for (int i = 0; i < n_parts; ++i)
        SGC_CUDA(cudaMemcpy(*dst + part * (size_t)i, parts[i], part * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
}

void sgc_encoder_destroy(sg_cuda_encoder *e)
{
    if (e == NULL)
        return;
    cudaSetDevice(e->dev);
    cudaFree(e->word);
    cudaFree(e->pos);
    cudaFree(e->type0);
    cudaFree(e->ln_g);
    cudaFree(e->ln_b);
    for (int i = 0; e->layers != NULL && i < e->n_layers; ++i) {
        layer_dev_t *l = &e->layers[i];
        cudaFree(l->wqkv);
        cudaFree(l->wo);
        cudaFree(l->wi);
        cudaFree(l->wo2);
        cudaFree(l->bqkv);
        cudaFree(l->bo);
        cudaFree(l->bi);
        cudaFree(l->bo2);
        cudaFree(l->ln1_g);
        cudaFree(l->ln1_b);
        cudaFree(l->ln2_g);
        cudaFree(l->ln2_b);
    }
    free(e->layers);
    free(e);
}

static int upload(sg_cuda_encoder *e, const sg_cuda_encoder_desc *d, char *err, size_t err_size)
{
    const int dev = e->dev;
    const sg_e5_config *c = d->cfg;
    const size_t h = (size_t)c->hidden, in = (size_t)c->intermediate;
    const float *word = d->emb->word, *pos = d->emb->position;
    if (up_f16(dev, &word, 1, (size_t)c->vocab * h, &e->word, err, err_size) != 0 ||
        up_f16(dev, &pos, 1, (size_t)c->max_positions * h, &e->pos, err, err_size) != 0 ||
        up_f32(dev, d->emb->token_type, h, &e->type0, err, err_size) != 0 ||
        up_f32(dev, d->emb->ln_gamma, h, &e->ln_g, err, err_size) != 0 ||
        up_f32(dev, d->emb->ln_beta, h, &e->ln_b, err, err_size) != 0)
        return -1;
    for (int i = 0; i < e->n_layers; ++i) {
        const sg_e5_layer_weights *w = &d->layers[i];
        layer_dev_t *l = &e->layers[i];
        const float *qkv_w[3] = {w->q_w, w->k_w, w->v_w}, *qkv_b[3] = {w->q_b, w->k_b, w->v_b};
        if (up_f16(dev, qkv_w, 3, h * h, &l->wqkv, err, err_size) != 0 ||
            up_concat_f32(dev, qkv_b, 3, h, &l->bqkv, err, err_size) != 0 ||
            up_f16(dev, &w->attn_out_w, 1, h * h, &l->wo, err, err_size) != 0 ||
            up_f32(dev, w->attn_out_b, h, &l->bo, err, err_size) != 0 ||
            up_f32(dev, w->attn_ln_gamma, h, &l->ln1_g, err, err_size) != 0 ||
            up_f32(dev, w->attn_ln_beta, h, &l->ln1_b, err, err_size) != 0 ||
            up_f16(dev, &w->inter_w, 1, in * h, &l->wi, err, err_size) != 0 ||
            up_f32(dev, w->inter_b, in, &l->bi, err, err_size) != 0 ||
            up_f16(dev, &w->out_w, 1, h * in, &l->wo2, err, err_size) != 0 ||
            up_f32(dev, w->out_b, h, &l->bo2, err, err_size) != 0 ||
            up_f32(dev, w->out_ln_gamma, h, &l->ln2_g, err, err_size) != 0 ||
            up_f32(dev, w->out_ln_beta, h, &l->ln2_b, err, err_size) != 0)
            return -1;
    }
    return 0;
}

int sgc_encoder_create(const sg_cuda_encoder_desc *d, sg_cuda_encoder **out, char *err, size_t err_size)
{
    *out = NULL;
    int dev = d->device, count = 0;
    if (d->struct_size < sizeof(sg_cuda_encoder_desc) || d->cfg == NULL || d->emb == NULL ||
        (d->cfg->layers > 0 && d->layers == NULL)) {
        snprintf(err, err_size, "encoder_create: incomplete description");
        return -1;
    }
    SGC_CUDA(cudaGetDeviceCount(&count));
    if (dev < 0 || dev >= count) {
        snprintf(err, err_size, "GPU %d does not exist (%d visible)", dev, count);
        return -1;
    }
    sg_gpu_enc_plan_t plan;
    memset(&plan, 0, sizeof(plan));
    const sg_e5_config *c = d->cfg;
    plan.shape.hidden = c->hidden;
    plan.shape.layers = c->layers;
    plan.shape.heads = c->heads;
    plan.shape.intermediate = c->intermediate;
    plan.shape.vocab = c->vocab;
    plan.shape.max_positions = c->max_positions;
    plan.max_len = d->max_len;
    plan.max_tokens = d->max_tokens;
    plan.max_seqs = d->max_seqs;
    char e2[256];
    if (sg_gpu_enc_plan(&plan, e2, sizeof(e2)) != 0) {
        snprintf(err, err_size, "GPU encoder: %s", e2);
        return -1;
    }
    SGC_CUDA(cudaSetDevice(dev));
    char what[160];
    snprintf(what, sizeof(what), "the encoder weights (hidden %d, %d layers, fp16)", c->hidden, c->layers);
    if (sgc_check_memory(dev, plan.weight_bytes, what, "use another GPU or device \"cpu\"", err, err_size) != 0)
        return -1;
    sg_cuda_encoder *e = (sg_cuda_encoder *)calloc(1, sizeof(*e));
    if (e == NULL) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    e->dev = dev;
    e->plan = plan;
    e->eps = (float)c->ln_eps;
    e->n_layers = c->layers;
    e->layers = (layer_dev_t *)calloc((size_t)c->layers + 1, sizeof(layer_dev_t));
    if (e->layers == NULL || upload(e, d, err, err_size) != 0) {
        if (e->layers == NULL)
            snprintf(err, err_size, "out of memory");
        sgc_encoder_destroy(e);
        return -1;
    }
    *out = e;
    return 0;
}

/* ---- workspaces ---- */

void sgc_encoder_ws_destroy(sg_cuda_encoder_ws *w)
{
    if (w == NULL)
        return;
    cudaSetDevice(w->e->dev);
    if (w->blas != NULL)
        cublasDestroy(w->blas);
    if (w->stream != NULL)
        cudaStreamDestroy(w->stream);
    void *dev_bufs[] = {w->ids, w->lens, w->x32, w->y32,  w->s32, w->a32,   w->pooled,
                        w->xh,  w->qkvh, w->p16, w->ctxh, w->ah,  w->interh};
    for (size_t i = 0; i < sizeof(dev_bufs) / sizeof(dev_bufs[0]); ++i)
        cudaFree(dev_bufs[i]);
    cudaFreeHost(w->h_ids);
    cudaFreeHost(w->h_lens);
    cudaFreeHost(w->h_out);
    free(w);
}

static int ws_alloc(sg_cuda_encoder_ws *w, char *err, size_t err_size)
{
    const sg_cuda_encoder *e = w->e;
    const int dev = e->dev;
    const sg_gpu_enc_plan_t *p = &e->plan;
    const size_t h = (size_t)p->shape.hidden, in = (size_t)p->shape.intermediate, P = p->max_tokens, S = p->max_seqs;
    const size_t L = p->max_len, H = (size_t)p->shape.heads, wide = 3 * h > in ? 3 * h : in;
    /* exactly the buffers sg_gpu_enc_plan counts */
    SGC_CUDA(cudaMalloc((void **)&w->ids, P * sizeof(int32_t)));
    SGC_CUDA(cudaMalloc((void **)&w->lens, S * sizeof(int32_t)));
    SGC_CUDA(cudaMalloc((void **)&w->x32, P * h * sizeof(float)));
    SGC_CUDA(cudaMalloc((void **)&w->xh, P * h * sizeof(__half)));
    SGC_CUDA(cudaMalloc((void **)&w->y32, P * wide * sizeof(float)));
    SGC_CUDA(cudaMalloc((void **)&w->qkvh, P * 3 * h * sizeof(__half)));
    SGC_CUDA(cudaMalloc((void **)&w->s32, H * P * L * sizeof(float)));
    SGC_CUDA(cudaMalloc((void **)&w->p16, H * P * L * sizeof(__half)));
    SGC_CUDA(cudaMalloc((void **)&w->ctxh, P * h * sizeof(__half)));
    SGC_CUDA(cudaMalloc((void **)&w->a32, P * h * sizeof(float)));
    SGC_CUDA(cudaMalloc((void **)&w->ah, P * h * sizeof(__half)));
    SGC_CUDA(cudaMalloc((void **)&w->interh, P * in * sizeof(__half)));
    SGC_CUDA(cudaMalloc((void **)&w->pooled, S * h * sizeof(float)));
    SGC_CUDA(cudaHostAlloc((void **)&w->h_ids, P * sizeof(int32_t), cudaHostAllocPortable));
    SGC_CUDA(cudaHostAlloc((void **)&w->h_lens, S * sizeof(int32_t), cudaHostAllocPortable));
    SGC_CUDA(cudaHostAlloc((void **)&w->h_out, S * h * sizeof(float), cudaHostAllocPortable));
    SGC_CUDA(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
    SGC_BLAS(cublasCreate(&w->blas));
    SGC_BLAS(cublasSetStream(w->blas, w->stream));
    return 0;
}

int sgc_encoder_ws_create(sg_cuda_encoder *e, sg_cuda_encoder_ws **out, char *err, size_t err_size)
{
    *out = NULL;
    const int dev = e->dev;
    SGC_CUDA(cudaSetDevice(dev));
    char what[200];
    snprintf(what, sizeof(what), "an encoder workspace (%u tokens per pass, %u sequences, max length %u)", e->plan.max_tokens,
             e->plan.max_seqs, e->plan.max_len);
    if (sgc_check_memory(dev, e->plan.ws_bytes, what, "lower max_batch, gpu_max_tokens or workers", err, err_size) != 0)
        return -1;
    sg_cuda_encoder_ws *w = (sg_cuda_encoder_ws *)calloc(1, sizeof(*w));
    if (w == NULL) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    w->e = e;
    if (ws_alloc(w, err, err_size) != 0) {
        sgc_encoder_ws_destroy(w);
        return -1;
    }
    *out = w;
    return 0;
}

/* ---- forward ---- */

/* C[m x n] (column-major, ldc) = alpha * op(A) op(B), fp16 inputs, fp32 accumulation */
static int gemm(sg_cuda_encoder_ws *w, cublasOperation_t ta, int m, int n, int k, float alpha, const __half *A, int lda,
                const __half *B, int ldb, void *C, cudaDataType_t ct, int ldc, char *err, size_t err_size)
{
    const int dev = w->e->dev;
    const float beta = 0.0f;
    SGC_BLAS(cublasGemmEx(w->blas, ta, CUBLAS_OP_N, m, n, k, &alpha, A, CUDA_R_16F, lda, B, CUDA_R_16F, ldb, &beta, C, ct, ldc,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

static int gemm_batched(sg_cuda_encoder_ws *w, cublasOperation_t ta, int m, int n, int k, float alpha, const __half *A, int lda,
                        long long sa, const __half *B, int ldb, long long sb, void *C, cudaDataType_t ct, int ldc, long long sc,
                        int batch, char *err, size_t err_size)
{
    const int dev = w->e->dev;
    const float beta = 0.0f;
    SGC_BLAS(cublasGemmStridedBatchedEx(w->blas, ta, CUBLAS_OP_N, m, n, k, &alpha, A, CUDA_R_16F, lda, sa, B, CUDA_R_16F, ldb, sb,
                                        &beta, C, ct, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* One forward pass over B sequences padded to L tokens (ids and lens already on the device). */
static int forward(sg_cuda_encoder_ws *w, int B, int L, char *err, size_t err_size)
{
    const sg_cuda_encoder *e = w->e;
    const int dev = e->dev;
    const int h = e->plan.shape.hidden, in = e->plan.shape.intermediate, H = e->plan.shape.heads, dh = h / H;
    const int T = B * L, h3 = 3 * h;
    const size_t row_smem = (size_t)h * sizeof(float);
    const float scale = 1.0f / sqrtf((float)dh);
    cudaStream_t st = w->stream;
    SGC_LAUNCH(embed_ln, T, BLOCK, row_smem, st, w->ids, L, e->word, e->pos, e->type0, e->ln_g, e->ln_b, h, e->eps, w->x32, w->xh);
    SGC_LAUNCHED("embed_ln");
    for (int li = 0; li < e->n_layers; ++li) {
        const layer_dev_t *l = &e->layers[li];
        /* [T, 3h] = x . Wqkv^T + b */
        if (gemm(w, CUBLAS_OP_T, h3, T, h, 1.0f, l->wqkv, h, w->xh, h, w->y32, CUDA_R_32F, h3, err, err_size) != 0)
            return -1;
        SGC_LAUNCH(bias_half, sgc_blocks((int64_t)T * h3, BLOCK), BLOCK, 0, st, w->y32, l->bqkv, (int64_t)T * h3, h3, w->qkvh);
        SGC_LAUNCHED("bias_half");
        /* scores[hd][b][i][j] = scale * q_i . k_j, per head, batched over the sequences */
        for (int hd = 0; hd < H; ++hd) {
            const __half *q = w->qkvh + (size_t)hd * dh, *k = w->qkvh + h + (size_t)hd * dh;
            float *s = w->s32 + (size_t)hd * B * L * L;
            if (gemm_batched(w, CUBLAS_OP_T, L, L, dh, scale, k, h3, (long long)L * h3, q, h3, (long long)L * h3, s, CUDA_R_32F, L,
                             (long long)L * L, B, err, err_size) != 0)
                return -1;
        }
        const int64_t rows = (int64_t)H * B * L;
        SGC_LAUNCH(softmax_masked, sgc_blocks(rows, BLOCK / 32), BLOCK, 0, st, w->s32, w->lens, B, L, rows, w->p16);
        SGC_LAUNCHED("softmax_masked");
        /* ctx[b][i][hd*dh + d] = sum_j p[hd][b][i][j] v_j[d] */
        for (int hd = 0; hd < H; ++hd) {
            const __half *v = w->qkvh + 2 * (size_t)h + (size_t)hd * dh, *p = w->p16 + (size_t)hd * B * L * L;
            if (gemm_batched(w, CUBLAS_OP_N, dh, L, L, 1.0f, v, h3, (long long)L * h3, p, L, (long long)L * L,
                             w->ctxh + (size_t)hd * dh, CUDA_R_16F, h, (long long)L * h, B, err, err_size) != 0)
                return -1;
        }
        if (gemm(w, CUBLAS_OP_T, h, T, h, 1.0f, l->wo, h, w->ctxh, h, w->y32, CUDA_R_32F, h, err, err_size) != 0)
            return -1;
        SGC_LAUNCH(bias_res_ln, T, BLOCK, row_smem, st, w->y32, l->bo, w->x32, l->ln1_g, l->ln1_b, h, e->eps, w->a32, w->ah);
        SGC_LAUNCHED("bias_res_ln");
        if (gemm(w, CUBLAS_OP_T, in, T, h, 1.0f, l->wi, h, w->ah, h, w->y32, CUDA_R_32F, in, err, err_size) != 0)
            return -1;
        SGC_LAUNCH(bias_gelu, sgc_blocks((int64_t)T * in, BLOCK), BLOCK, 0, st, w->y32, l->bi, (int64_t)T * in, in, w->interh);
        SGC_LAUNCHED("bias_gelu");
        if (gemm(w, CUBLAS_OP_T, h, T, in, 1.0f, l->wo2, in, w->interh, in, w->y32, CUDA_R_32F, h, err, err_size) != 0)
            return -1;
        SGC_LAUNCH(bias_res_ln, T, BLOCK, row_smem, st, w->y32, l->bo2, w->a32, l->ln2_g, l->ln2_b, h, e->eps, w->x32, w->xh);
        SGC_LAUNCHED("bias_res_ln");
    }
    SGC_LAUNCH(pool_normalize, B, BLOCK, row_smem, st, w->x32, w->lens, L, h, w->pooled);
    SGC_LAUNCHED("pool_normalize");
    return 0;
}

int sgc_encode_ids(sg_cuda_encoder_ws *w, const int32_t *const *ids, const uint32_t *lens, size_t n, float *out, char *err,
                   size_t err_size)
{
    const sg_cuda_encoder *e = w->e;
    const int dev = e->dev;
    const sg_gpu_enc_plan_t *p = &e->plan;
    const int h = p->shape.hidden;
    for (size_t i = 0; i < n; ++i) {
        if (lens[i] < 1 || lens[i] > p->max_len) {
            snprintf(err, err_size, "sequence %zu has %u tokens (1 to %u allowed on the GPU encoder)", i, lens[i], p->max_len);
            return -1;
        }
        for (uint32_t j = 0; j < lens[i]; ++j) {
            if (ids[i][j] < 0 || ids[i][j] >= p->shape.vocab) {
                snprintf(err, err_size, "sequence %zu: token id %d outside the vocabulary", i, ids[i][j]);
                return -1;
            }
        }
    }
    SGC_CUDA(cudaSetDevice(dev));
    size_t first = 0;
    while (first < n) {
        uint32_t L;
        size_t B = sg_gpu_enc_pass(lens, n, first, p->max_seqs, p->max_tokens, &L);
        /* the pinned buffers are free: the previous pass ended with a synchronisation */
        for (size_t b = 0; b < B; ++b) {
            const uint32_t len = lens[first + b];
            memcpy(w->h_ids + b * L, ids[first + b], len * sizeof(int32_t));
            memset(w->h_ids + b * L + len, 0, (L - len) * sizeof(int32_t)); /* [PAD] = 0, masked anyway */
            w->h_lens[b] = (int32_t)len;
        }
        SGC_CUDA(cudaMemcpyAsync(w->ids, w->h_ids, B * L * sizeof(int32_t), cudaMemcpyHostToDevice, w->stream));
        SGC_CUDA(cudaMemcpyAsync(w->lens, w->h_lens, B * sizeof(int32_t), cudaMemcpyHostToDevice, w->stream));
        if (forward(w, (int)B, (int)L, err, err_size) != 0) {
            sgc_note_cuda(dev, cudaStreamSynchronize(w->stream), "cudaStreamSynchronize (encoder)");
            return -1;
        }
        SGC_CUDA(cudaMemcpyAsync(w->h_out, w->pooled, B * (size_t)h * sizeof(float), cudaMemcpyDeviceToHost, w->stream));
        SGC_CUDA(cudaStreamSynchronize(w->stream));
        memcpy(out + first * (size_t)h, w->h_out, B * (size_t)h * sizeof(float));
        first += B;
    }
    return 0;
}
