/*
 * internal.cuh -- what the .cu files of sg_local_cuda.so share: error reporting for CUDA and
 * cuBLAS calls, the block reduction, and the entry points each file implements for module.cu.
 *
 * Every CUDA/cuBLAS call and every kernel launch is checked; a failure returns -1 from the
 * calling function with "GPU <n>: <call>: <error string> (<code>)" in `err` (the functions using
 * the SGC_* macros name their message buffer `err`/`err_size` and their GPU `dev`).
 */
#ifndef SG_CUDA_INTERNAL_CUH
#define SG_CUDA_INTERNAL_CUH

#include "gpuhost.h"
#include "sg_cuda.h"

#include <stdio.h>

#ifdef SGC_EMULATE
/* The tests build these files against a CPU emulation of CUDA (fibers for threads, a reference
 * GEMM for cuBLAS): their wrappers include the emulation's header before the .cu file, so no
 * shipped file names anything under tests/. */
#ifndef SG_TESTS_GPU_CUDA_EMU_H
#error "an SGC_EMULATE build includes the CUDA emulation header (tests/gpu/emu/cuda_emu.h) before this file"
#endif
#define SGC_KERNEL_CALL(kernel, grid, block, smem, stream, ...) SGC_EMU_LAUNCH(kernel, grid, block, smem, stream, __VA_ARGS__)
#else
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define SGC_KERNEL_CALL(kernel, grid, block, smem, stream, ...) kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
/* static shared memory: SGC_SHARED(float, red, [32]) is __shared__ float red[32] (the emulation
 * gives each running block its own, and counts it against the per-block limit) */
#define SGC_SHARED(type, name, dims) __shared__ type name dims
/* the dynamic shared memory of a kernel */
#define SGC_SHARED_DYN(type, name) extern __shared__ type name[]
#endif

/* kernel<<<grid, block, smem, stream>>>(args), written as a macro so the emulator can run it. The
 * calling thread's last error is cleared first: a failed call leaves it set (CUDA clears it only in
 * cudaGetLastError), and SGC_LAUNCHED would otherwise report that old error -- say a sticky one of
 * another GPU -- as this launch's. */
#define SGC_LAUNCH(kernel, grid, block, smem, stream, ...)                                                                         \
    do {                                                                                                                           \
        (void)cudaGetLastError();                                                                                                  \
        SGC_KERNEL_CALL(kernel, grid, block, smem, stream, __VA_ARGS__);                                                           \
    } while (0)

static inline int sgc_fail(char *err, size_t err_size, int dev, const char *what, const char *msg, int code)
{
    snprintf(err, err_size, "GPU %d: %s: %s (%d)", dev, what, msg, code);
    return -1;
}

#define SGC_MAX_DEVICES 64

/* Remembers a sticky CUDA error (an illegal address, a failed launch...: the device's context is
 * unusable until the process restarts) of GPU `dev`, seen by `what`; device_error() reports it,
 * and through it the local backend's health. Other errors are ignored. Any thread. */
void sgc_note_cuda(int dev, cudaError_t e, const char *what);

static inline int sgc_fail_cuda(char *err, size_t err_size, int dev, const char *what, cudaError_t e)
{
    sgc_note_cuda(dev, e, what);
    return sgc_fail(err, err_size, dev, what, cudaGetErrorString(e), (int)e);
}

#define SGC_CUDA(call)                                                                                                             \
    do {                                                                                                                           \
        cudaError_t e_ = (call);                                                                                                   \
        if (e_ != cudaSuccess)                                                                                                     \
            return sgc_fail_cuda(err, err_size, dev, #call, e_);                                                                   \
    } while (0)

#define SGC_BLAS(call)                                                                                                             \
    do {                                                                                                                           \
        cublasStatus_t s_ = (call);                                                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                                           \
            return sgc_fail(err, err_size, dev, #call, cublasGetStatusString(s_), (int)s_);                                        \
    } while (0)

/* after a kernel launch: configuration errors show here, execution errors at the next sync */
#define SGC_LAUNCHED(name)                                                                                                         \
    do {                                                                                                                           \
        cudaError_t e_ = cudaGetLastError();                                                                                       \
        if (e_ != cudaSuccess)                                                                                                     \
            return sgc_fail_cuda(err, err_size, dev, "launch of " name, e_);                                                       \
    } while (0)

/* Sum of `v` over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
 * `red` is shared float[32] (SGC_SHARED). Contains __syncthreads: all threads must call it. */
static __device__ __forceinline__ float sgc_block_sum(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* an earlier call's readers are done with red */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float t = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}

static inline unsigned sgc_blocks(int64_t n, int per_block)
{
    int64_t b = (n + per_block - 1) / per_block;
    if (b < 1)
        b = 1;
    if (b > 1048576)
        b = 1048576; /* kernels that take this grid-stride over the rest */
    return (unsigned)b;
}

/* Checks `need` bytes against the usable free memory of the current device `dev`. */
int sgc_check_memory(int dev, uint64_t need, const char *what, const char *hint, char *err, size_t err_size);

/* encoder.cu */
int sgc_encoder_create(const sg_cuda_encoder_desc *desc, sg_cuda_encoder **out, char *err, size_t err_size);
void sgc_encoder_destroy(sg_cuda_encoder *e);
int sgc_encoder_ws_create(sg_cuda_encoder *e, sg_cuda_encoder_ws **out, char *err, size_t err_size);
void sgc_encoder_ws_destroy(sg_cuda_encoder_ws *w);
int sgc_encode_ids(sg_cuda_encoder_ws *w, const int32_t *const *ids, const uint32_t *lens, size_t n, float *out, char *err,
                   size_t err_size);

/* flat.cu */
int sgc_flat_create(const sg_cuda_flat_desc *desc, sg_cuda_flat **out, char *err, size_t err_size);
void sgc_flat_destroy(sg_cuda_flat *f);
void sgc_flat_info(const sg_cuda_flat *f, sg_cuda_flat_info *out);
int sgc_flat_search(sg_cuda_flat *f, size_t n, const float *queries, int k, float *keys, int64_t *labels, char *err,
                    size_t err_size);

#endif
