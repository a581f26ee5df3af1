/*
 * cuda_emu.h -- a CPU stand-in for the part of CUDA that backends/cuda uses, so that the module's
 * own code (kernels, cuBLAS calls with their transposes and leading dimensions, streams, events,
 * shards, memory checks) runs and is tested on machines without a GPU. Test-only: the build of the
 * module against it is tests/gpu's sg_local_cuda_emu.so, which says "EMULATED" in its version.
 *
 * It refuses what a GPU refuses, with the error codes CUDA 13 gives on an H100 (measured):
 *   - launches: a block of 0 or more than 1024 threads, x or y over 1024, z over 64; a grid
 *     dimension of 0, x over 2^31 - 1, y or z over 65535; static + dynamic shared memory over the
 *     per-block limit (48 KiB, SG_CUDA_EMU_SMEM_PER_BLOCK); more threads than the kernel's
 *     __launch_bounds__: cudaErrorInvalidValue from cudaGetLastError/cudaPeekAtLastError, the
 *     kernel does not run, the error is not sticky;
 *   - a kernel pointer argument that is neither NULL, nor inside a cudaMalloc allocation of the
 *     launch's device, nor pinned host memory (cudaHostAlloc): the launch succeeds and the kernel
 *     faults when it runs: cudaErrorIllegalAddress, sticky, as are out-of-range cuBLAS operands;
 *   - copies whose device side is not device memory, or runs past the allocation, and cudaFree of
 *     anything cudaMalloc did not return: cudaErrorInvalidValue;
 *   - sticky errors: every later call on that device's context returns the error (cudaSetDevice,
 *     cudaGetDeviceCount and the error queries excepted); cudaGetLastError returns and clears the
 *     calling thread's last error, cudaPeekAtLastError only returns it.
 *
 * Model: every stream is a thread that runs its work (kernels, copies, cuBLAS calls, event
 * records) in order, asynchronously to the host: cudaStreamSynchronize / cudaEventSynchronize
 * really wait, and a missing one shows as a race. A kernel runs its blocks one after another, in a
 * seeded random order; the threads of a block are fibers switched at __syncthreads() and warp
 * shuffles (barriers over the block's or the warp's live threads) and resumed in a seeded random
 * order, so a missing __syncthreads() shows as a wrong result. Shared memory is per block and
 * starts as NaN bytes, as does device memory (cudaMalloc, 256-byte aligned). cublasGemmEx and
 * cublasGemmStridedBatchedEx compute in float from fp16 inputs and check their arguments as cuBLAS
 * does (CUBLAS_STATUS_INVALID_VALUE for a leading dimension that is too small).
 *
 * Kernels are written as for nvcc with three macros that internal.cuh maps to plain CUDA:
 * SGC_LAUNCH(kernel, grid, block, smem, stream, args...) (here SGC_EMU_LAUNCH),
 * SGC_SHARED(type, name, dims) for static shared memory and SGC_SHARED_DYN(type, name) for
 * dynamic shared memory. __launch_bounds__(n)
 * takes a multiple of 32 up to 1024 (a literal or a macro that expands to one).
 *
 * Environment: SG_CUDA_EMU_GPUS (devices, default 2; 0 = cudaGetDeviceCount fails with
 * cudaErrorNoDevice), SG_CUDA_EMU_MEM_MB (memory of each device, default 4096),
 * SG_CUDA_EMU_SMEM_PER_BLOCK (bytes, default 49152), SG_CUDA_EMU_SEED (the scheduling seed,
 * default 1), SG_CUDA_EMU_SCHED=fifo (threads in index order, the old model: for comparison),
 * SG_CUDA_EMU_FAULT=kernel:n[,kernel:n...] (the n-th launch of that kernel in the process faults
 * with cudaErrorIllegalAddress: tests of the sticky-error paths), SG_CUDA_EMU_STATS=1 (print
 * launches, blocks, fiber switches and time per kernel at exit).
 */
#ifndef SG_TESTS_GPU_CUDA_EMU_H
#define SG_TESTS_GPU_CUDA_EMU_H

#include "gpuhost.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
/* the kernel is placed in section sgc_emu_lb_<n>, where the launcher finds its bound */
#define SGC_EMU_STR_(x) #x
#define SGC_EMU_LB_(x, ...) __attribute__((section("sgc_emu_lb_" SGC_EMU_STR_(x))))
#define __launch_bounds__(...) SGC_EMU_LB_(__VA_ARGS__, 0)
/* static shared memory is SGC_SHARED(type, name, dims): a plain __shared__ would be one variable
 * for every block of every stream */
#define __shared__ sgc_emu_use_SGC_SHARED_for_static_shared_memory

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
/* per OS thread: each stream thread runs one block at a time, its fibers on that thread */
#define SGC_EMU_TLS thread_local __attribute__((tls_model("initial-exec")))
/* plain structs (dim3 has a constructor: a thread_local of it would be reached through an
 * initialisation wrapper on every access) */
extern SGC_EMU_TLS sgc_emu_idx threadIdx, blockIdx, blockDim, gridDim;

void __syncthreads();
float __shfl_xor_sync(unsigned mask, float v, int lane_mask);
int atomicAdd(int *p, int v);

/* the running block's shared memory */
void *sgc_emu_dyn_smem();
void *sgc_emu_static_smem(const void *tag, size_t size, size_t align);
template <class T> static inline T &sgc_emu_shared(const void *tag)
{
    return *static_cast<T *>(sgc_emu_static_smem(tag, sizeof(T), alignof(T)));
}
#define SGC_SHARED(type, name, dims)                                                                                               \
    static const char name##_sgc_tag = 0;                                                                                          \
    auto &name = sgc_emu_shared<type dims>(&name##_sgc_tag)
#define SGC_SHARED_DYN(type, name) type *name = (type *)sgc_emu_dyn_smem()

/* the GPU's alignments, so that UBSan reports a misaligned vector load as the GPU would fault */
struct __half {
    uint16_t bits;
};
struct alignas(4) __half2 {
    __half x, y;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) uint4 {
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

/* ---- runtime ---- */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchFailure = 719,
} cudaError_t;
typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;
typedef struct sgc_emu_stream *cudaStream_t;
typedef struct sgc_emu_event *cudaEvent_t;
struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
};
enum { cudaStreamNonBlocking = 1, cudaEventDisableTiming = 2, cudaHostAllocPortable = 1 };

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);

/* ---- kernel launches ---- */

struct sgc_emu_launch_t {
    const char *name;
    const void *kernel; /* identity: launch bounds and static shared memory are looked up by it */
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    std::vector<const void *> pointers; /* the pointer arguments, checked at run time */
    std::function<void()> body;         /* the kernel called with its (copied) arguments */
};
/* Checks the configuration (sets the calling thread's last error) and queues the launch. */
void sgc_emu_submit(sgc_emu_launch_t &&l);

template <class T> static inline void sgc_emu_collect(std::vector<const void *> &out, const T &v)
{
    if constexpr (std::is_pointer<T>::value)
        out.push_back(reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(v)));
}

/* The arguments are converted to the kernel's parameter types and copied when the launch is made,
 * as CUDA does: later changes to the caller's variables do not reach the kernel. */
template <class... P, class... A>
static inline void sgc_emu_launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                  A &&...a)
{
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    auto args = std::make_shared<std::tuple<typename std::decay<P>::type...>>(std::forward<A>(a)...);
    sgc_emu_launch_t l;
    l.name = name;
    l.kernel = (const void *)kernel;
    l.grid = grid;
    l.block = block;
    l.smem = smem;
    l.stream = s;
    std::apply([&l](const auto &...v) { (sgc_emu_collect(l.pointers, v), ...); }, *args);
    l.body = [kernel, args]() { std::apply(kernel, *args); };
    sgc_emu_submit(std::move(l));
}
/* the launch itself (internal.cuh's SGC_LAUNCH clears the last error first, as with nvcc) */
#define SGC_EMU_LAUNCH(kernel, grid, block, smem, stream, ...)                                                                     \
    sgc_emu_launch(#kernel, kernel, dim3(grid), dim3(block), (size_t)(smem), (stream), __VA_ARGS__)

/* Test hook: makes `e` (a sticky error) the state of device `dev`, as a faulting kernel would. */
extern "C" void sgc_emu_inject_sticky(int dev, cudaError_t e);

/* ---- cuBLAS ---- */

typedef struct sgc_emu_blas *cublasHandle_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
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
