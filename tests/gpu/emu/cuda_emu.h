/*
 * cuda_emu.h -- a CPU stand-in for the part of CUDA that backends/cuda uses, so that the module's
 * own code (kernels, cuBLAS calls with their transposes and leading dimensions, streams, shards,
 * memory checks) runs and is tested on machines without a GPU. Test-only: the build of the
 * module against it is tests/gpu's sg_local_cuda_emu.so, which says "EMULATED" in its version.
 *
 * Model: a kernel launch runs its blocks one after another on the calling thread; the threads of
 * a block are fibers switched at __syncthreads() and warp shuffles, which are barriers over the
 * block's or the warp's live threads. Launches from several host threads run one at a time
 * (CUDA promises no concurrency between kernels), so shared memory is function-static. cudaMalloc is malloc (tracked per device
 * against a fake capacity), copies are memcpy, streams and events are synchronous. cublasGemmEx and cublasGemmStridedBatchedEx
 * compute in float from fp16 inputs and check their arguments as cuBLAS does (CUBLAS_STATUS_INVALID_VALUE for a leading dimension
 * that is too small).
 *
 * Environment: SG_CUDA_EMU_GPUS (devices, default 2; 0 = cudaGetDeviceCount fails with
 * cudaErrorNoDevice), SG_CUDA_EMU_MEM_MB (memory of each device, default 4096),
 * SG_CUDA_EMU_STATS=1 (print launches, blocks, fiber switches and time per kernel at exit).
 */
#ifndef SG_TESTS_GPU_CUDA_EMU_H
#define SG_TESTS_GPU_CUDA_EMU_H

#include "gpuhost.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static /* one launch runs at a time in the process (cuda_emu.cc) */

#define CUDART_VERSION 0

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c)
    {
    }
};
struct sgc_emu_idx {
    unsigned x, y, z;
};
extern sgc_emu_idx threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

void __syncthreads();
float __shfl_xor_sync(unsigned mask, float v, int lane_mask);
int atomicAdd(int *p, int v);
/* the dynamic shared memory of the running launch */
void *sgc_emu_dyn_smem();

struct __half {
    uint16_t bits;
};
struct __half2 {
    __half x, y;
};
struct float2 {
    float x, y;
};
struct uint4 {
    unsigned x, y, z, w;
};
inline __half __float2half_rn(float f)
{
    return __half{sg_gpu_f32_to_f16(f)};
}
inline float __half2float(__half h)
{
    return sg_gpu_f16_to_f32(h.bits);
}
inline float2 __half22float2(__half2 h)
{
    return float2{__half2float(h.x), __half2float(h.y)};
}

void sgc_emu_launch(const char *name, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);
#define SGC_LAUNCH(kernel, grid, block, smem, stream, ...)                                                                         \
    ((void)(stream), sgc_emu_launch(#kernel, dim3(grid), dim3(block), (size_t)(smem), [&]() { kernel(__VA_ARGS__); }))
#define SGC_SHARED_DYN(type, name) type *name = (type *)sgc_emu_dyn_smem()

/* ---- runtime ---- */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
} cudaError_t;
typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
} cudaMemcpyKind;
typedef struct sgc_emu_stream *cudaStream_t;
typedef struct sgc_emu_event *cudaEvent_t;
struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
};
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2, cudaHostAllocPortable = 1 };

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);

/* ---- cuBLAS ---- */

typedef struct sgc_emu_blas *cublasHandle_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2 } cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType_t at, int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
                            void *C, cudaDataType_t ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType_t at, int lda, long long sa, const void *B,
                                          cudaDataType_t bt, int ldb, long long sb, const void *beta, void *C, cudaDataType_t ct,
                                          int ldc, long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo);

#endif
