/*
 * test_emu.cc -- the CUDA emulation itself (cuda_emu.h) refuses what a GPU refuses, with the
 * codes CUDA 13 gives on an H100, and shows the bugs a GPU would show:
 *
 *   limits     launch configurations (block, grid, __launch_bounds__, static + dynamic shared
 *              memory): cudaErrorInvalidValue, not sticky, the kernel does not run; the limits
 *              themselves pass; cudaPeekAtLastError keeps the error, cudaGetLastError clears it
 *   copies     cudaMemcpy* whose device side is not device memory or runs past the allocation,
 *              cudaFree / cudaFreeHost of the wrong pointers: cudaErrorInvalidValue
 *   sticky     a kernel given a pageable host pointer and a GEMM whose C does not fit: the launch
 *              succeeds, the GPU faults with cudaErrorIllegalAddress, every later call on that
 *              GPU's context returns it (from any thread), other GPUs go on
 *   streams    work runs asynchronously on each stream's own thread: a kernel held by a gate is
 *              still running when the host goes on; two streams run at the same time;
 *              cudaStreamSynchronize and cudaEventSynchronize wait; a result read without them
 *              is stale; kernel arguments are copied at the launch
 *   races      a kernel that omits a needed __syncthreads() gives wrong results under the seeded
 *              random order of threads, as one that relies on the order of blocks does; their
 *              correct versions pass under every schedule. With SG_CUDA_EMU_SCHED=fifo (the old
 *              in-order model, test gpu.emu.strict_fifo) the broken kernels pass: what the
 *              random order adds.
 *
 * Run with SG_CUDA_EMU_GPUS=3 (GPU 1 and 2 get sticky errors) and SG_CUDA_EMU_QUIET=1.
 */
#include "cuda_emu.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <thread>

static int failures;

#define CHECK(cond, ...)                                                                                                           \
    do {                                                                                                                           \
        if (!(cond)) {                                                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                                        \
            fprintf(stderr, __VA_ARGS__);                                                                                          \
            fprintf(stderr, "\n");                                                                                                 \
            ++failures;                                                                                                            \
        }                                                                                                                          \
    } while (0)

#define MUST(call)                                                                                                                 \
    do {                                                                                                                           \
        cudaError_t e_ = (call);                                                                                                   \
        if (e_ != cudaSuccess) {                                                                                                   \
            fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_));                             \
            exit(1);                                                                                                               \
        }                                                                                                                          \
    } while (0)

/* ---- kernels ---- */

__global__ void mark(int *flag)
{
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0)
        atomicAdd(flag, 1);
}

__global__ void __launch_bounds__(256) bounded(int *flag)
{
    if (threadIdx.x == 0)
        atomicAdd(flag, 1);
}

__global__ void dyn_user(int *flag)
{
    SGC_SHARED_DYN(int, s);
    s[threadIdx.x] = 1;
    __syncthreads();
    if (threadIdx.x == 0)
        atomicAdd(flag, s[0]);
}

/* 32 KiB of static shared memory */
__global__ void static_user(int *flag)
{
    SGC_SHARED(float, big, [8192]);
    big[threadIdx.x] = 1.0f;
    __syncthreads();
    if (threadIdx.x == 0)
        atomicAdd(flag, (int)big[0]);
}

/* waits until *gate (pinned host memory) is set, then sets *out */
__global__ void gated(const volatile int *gate, int *out, int value)
{
    const double t0 = (double)clock() / CLOCKS_PER_SEC;
    while (*gate == 0) {
        if ((double)clock() / CLOCKS_PER_SEC - t0 > 20.0) { /* never hang the suite */
            fprintf(stderr, "gated: the gate never opened\n");
            abort();
        }
        sched_yield();
    }
    *out = value;
}

/* out[t] = s[t - 1] after every thread wrote s[t]: needs a barrier in between */
__global__ void shift_nosync(int *out)
{
    SGC_SHARED(int, s, [256]);
    const int t = threadIdx.x;
    s[t] = t + 1;
    out[blockIdx.x * blockDim.x + t] = t > 0 ? s[t - 1] : 0;
}

__global__ void shift_sync(int *out)
{
    SGC_SHARED(int, s, [256]);
    const int t = threadIdx.x;
    s[t] = t + 1;
    __syncthreads();
    out[blockIdx.x * blockDim.x + t] = t > 0 ? s[t - 1] : 0;
}

/* block b reads what block b - 1 wrote: blocks have no order on a GPU */
__global__ void chain_blocks(int *out)
{
    if (threadIdx.x == 0)
        out[blockIdx.x] = blockIdx.x == 0 ? 1 : out[blockIdx.x - 1] + 1;
}

__global__ void own_block(int *out)
{
    if (threadIdx.x == 0)
        out[blockIdx.x] = (int)blockIdx.x + 1;
}

/* ---- helpers ---- */

static int read_flag(const int *d)
{
    int v = -1;
    MUST(cudaMemcpy(&v, d, sizeof(v), cudaMemcpyDeviceToHost));
    return v;
}

static void zero(int *d, size_t n)
{
    std::vector<int> z(n, 0);
    MUST(cudaMemcpy(d, z.data(), n * sizeof(int), cudaMemcpyHostToDevice));
}

/* launches `mark` with (grid, block, smem) and checks the outcome: refused or run */
static void expect_launch(dim3 grid, dim3 block, size_t smem, bool ok, int *flag, const char *what)
{
    zero(flag, 1);
    SGC_EMU_LAUNCH(mark, grid, block, smem, (cudaStream_t) nullptr, flag);
    cudaError_t peek = cudaPeekAtLastError();
    cudaError_t again = cudaPeekAtLastError();
    cudaError_t got = cudaGetLastError();
    cudaError_t after = cudaGetLastError();
    MUST(cudaStreamSynchronize(nullptr));
    const int ran = read_flag(flag);
    if (ok) {
        CHECK(got == cudaSuccess && ran == 1, "%s: %s, ran %d", what, cudaGetErrorName(got), ran);
    } else {
        CHECK(peek == cudaErrorInvalidValue && again == peek && got == peek, "%s: peek %s, get %s", what, cudaGetErrorName(peek),
              cudaGetErrorName(got));
        CHECK(after == cudaSuccess, "%s: not cleared by cudaGetLastError", what);
        CHECK(ran == 0, "%s: a refused kernel ran", what);
    }
}

/* ---- suites ---- */

static void test_limits(void)
{
    MUST(cudaSetDevice(0));
    int *flag;
    MUST(cudaMalloc((void **)&flag, sizeof(int)));
    expect_launch(1, 1024, 0, true, flag, "1024 threads");
    expect_launch(1, 1025, 0, false, flag, "1025 threads");
    expect_launch(1, dim3(32, 33, 1), 0, false, flag, "32 x 33 threads");
    expect_launch(1, dim3(1, 1, 64), 0, true, flag, "block z 64");
    expect_launch(1, dim3(1, 1, 65), 0, false, flag, "block z 65");
    expect_launch(1, dim3(1, 1025, 1), 0, false, flag, "block y 1025");
    expect_launch(1, 0, 0, false, flag, "empty block");
    expect_launch(dim3(1, 65535, 1), 1, 0, true, flag, "grid y 65535");
    expect_launch(dim3(1, 65536, 1), 1, 0, false, flag, "grid y 65536");
    expect_launch(dim3(1, 1, 65536), 1, 0, false, flag, "grid z 65536");
    expect_launch(dim3(0, 1, 1), 1, 0, false, flag, "empty grid");
    /* a refused launch is not sticky: the next one runs */
    expect_launch(2, 64, 0, true, flag, "after refusals");

    /* __launch_bounds__(256) */
    zero(flag, 1);
    SGC_EMU_LAUNCH(bounded, 1, 512, 0, (cudaStream_t) nullptr, flag);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "512 threads for __launch_bounds__(256) accepted");
    SGC_EMU_LAUNCH(bounded, 1, 256, 0, (cudaStream_t) nullptr, flag);
    CHECK(cudaGetLastError() == cudaSuccess, "256 threads for __launch_bounds__(256) refused");
    MUST(cudaStreamSynchronize(nullptr));
    CHECK(read_flag(flag) == 1, "bounded kernel ran %d times", read_flag(flag));

    /* dynamic shared memory up to the per-block limit (48 KiB) */
    zero(flag, 1);
    SGC_EMU_LAUNCH(dyn_user, 1, 32, 49152, (cudaStream_t) nullptr, flag);
    CHECK(cudaGetLastError() == cudaSuccess, "49152 bytes of dynamic shared memory refused");
    SGC_EMU_LAUNCH(dyn_user, 1, 32, 49153, (cudaStream_t) nullptr, flag);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "49153 bytes of dynamic shared memory accepted");
    MUST(cudaStreamSynchronize(nullptr));
    CHECK(read_flag(flag) == 1, "dyn_user ran %d times", read_flag(flag));

    /* static + dynamic: 32 KiB static leaves 16 KiB */
    zero(flag, 1);
    SGC_EMU_LAUNCH(static_user, 1, 32, 0, (cudaStream_t) nullptr, flag);
    CHECK(cudaGetLastError() == cudaSuccess, "static_user refused");
    MUST(cudaStreamSynchronize(nullptr)); /* its static size is known once it ran */
    SGC_EMU_LAUNCH(static_user, 1, 32, 16384, (cudaStream_t) nullptr, flag);
    CHECK(cudaGetLastError() == cudaSuccess, "32 KiB static + 16 KiB dynamic refused");
    SGC_EMU_LAUNCH(static_user, 1, 32, 16385, (cudaStream_t) nullptr, flag);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "32 KiB static + 16385 bytes dynamic accepted");
    MUST(cudaStreamSynchronize(nullptr));
    CHECK(read_flag(flag) == 2, "static_user ran %d times", read_flag(flag));

    /* a later successful call leaves the last error alone; only cudaGetLastError clears it */
    SGC_EMU_LAUNCH(mark, 1, 2048, 0, (cudaStream_t) nullptr, flag);
    size_t fr, tot;
    MUST(cudaMemGetInfo(&fr, &tot));
    CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue, "a successful call cleared the last error");
    CHECK(cudaGetLastError() == cudaErrorInvalidValue && cudaGetLastError() == cudaSuccess, "cudaGetLastError");
    MUST(cudaFree(flag));
    printf("limits: ok\n");
}

static void test_copies(void)
{
    MUST(cudaSetDevice(0));
    int *d, *pin;
    std::vector<int> host(2048, 7);
    MUST(cudaMalloc((void **)&d, 1024 * sizeof(int)));
    MUST(cudaHostAlloc((void **)&pin, 1024 * sizeof(int), cudaHostAllocPortable));
    cudaStream_t s;
    MUST(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct {
        cudaError_t got;
        const char *what;
    } refused[] = {
        {cudaMemcpy(host.data(), pin, 16, cudaMemcpyHostToDevice), "host to device into host memory"},
        {cudaMemcpy(pin, host.data(), 16, cudaMemcpyDeviceToHost), "device to host from host memory"},
        {cudaMemcpy(d, host.data(), 1025 * sizeof(int), cudaMemcpyHostToDevice), "past the end of the allocation"},
        {cudaMemcpy(d + 1000, host.data(), 25 * sizeof(int), cudaMemcpyHostToDevice), "running past the end"},
        {cudaMemcpy(host.data(), d, 16, cudaMemcpyDeviceToDevice), "device to device into host memory"},
        {cudaMemcpyAsync(host.data(), pin, 16, cudaMemcpyHostToDevice, s), "async into host memory"},
        {cudaMemcpyAsync(pin, host.data(), 16, cudaMemcpyDeviceToHost, s), "async from host memory"},
        {cudaFree(host.data()), "cudaFree of host memory"},
        {cudaFree(d + 1), "cudaFree inside an allocation"},
        {cudaFreeHost(d), "cudaFreeHost of device memory"},
    };
    for (auto &r : refused) {
        CHECK(r.got == cudaErrorInvalidValue, "%s: %s", r.what, cudaGetErrorName(r.got));
        (void)cudaGetLastError();
    }
    /* what CUDA does accept (unified addressing): a host-to-device copy from device memory */
    CHECK(cudaMemcpy(d, d + 512, 16, cudaMemcpyHostToDevice) == cudaSuccess, "H2D from device memory refused");
    CHECK(cudaMemcpy(d, host.data(), 1024 * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess, "a whole allocation refused");
    CHECK(cudaMemcpy(d, host.data(), 0, cudaMemcpyHostToDevice) == cudaSuccess, "an empty copy refused");
    MUST(cudaStreamDestroy(s));
    MUST(cudaFreeHost(pin));
    MUST(cudaFree(d));
    printf("copies: ok\n");
}

static void test_sticky(void)
{
    /* GPU 1: a kernel dereferences pageable host memory */
    MUST(cudaSetDevice(1));
    cudaStream_t s;
    MUST(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *keep;
    MUST(cudaMalloc((void **)&keep, 64));
    static int host_flag;
    SGC_EMU_LAUNCH(mark, 1, 32, 0, s, &host_flag);
    CHECK(cudaGetLastError() == cudaSuccess, "the launch itself must succeed (the fault comes when it runs)");
    cudaError_t e = cudaStreamSynchronize(s);
    CHECK(e == cudaErrorIllegalAddress, "stream sync after the fault: %s", cudaGetErrorName(e));
    CHECK(host_flag == 0, "the faulting kernel wrote host memory");
    CHECK(cudaPeekAtLastError() == cudaErrorIllegalAddress, "peek after the fault");
    CHECK(cudaGetLastError() == cudaErrorIllegalAddress, "get after the fault");
    CHECK(cudaGetLastError() == cudaSuccess && cudaPeekAtLastError() == cudaSuccess, "the last error is cleared");
    void *p;
    size_t fr, tot;
    CHECK(cudaMalloc(&p, 16) == cudaErrorIllegalAddress, "cudaMalloc on a faulted context");
    CHECK(cudaMemGetInfo(&fr, &tot) == cudaErrorIllegalAddress, "cudaMemGetInfo on a faulted context");
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaErrorIllegalAddress, "cudaEventCreate on a faulted context");
    CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice still works");
    int n = 0;
    CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n == 3, "cudaGetDeviceCount still works");
    SGC_EMU_LAUNCH(mark, 1, 32, 0, s, keep);
    CHECK(cudaGetLastError() == cudaErrorIllegalAddress, "a launch on a faulted context");
    std::thread other([] {
        cudaSetDevice(1);
        size_t a, b;
        CHECK(cudaGetLastError() == cudaSuccess, "another thread has its own last error");
        CHECK(cudaMemGetInfo(&a, &b) == cudaErrorIllegalAddress, "another thread sees the faulted context");
        CHECK(cudaPeekAtLastError() == cudaErrorIllegalAddress, "and then has it as its last error");
    });
    other.join();
    (void)cudaGetLastError();

    /* GPU 2: a GEMM whose C is smaller than m x n */
    MUST(cudaSetDevice(2));
    __half *a16, *b16;
    float *c;
    MUST(cudaMalloc((void **)&a16, 64 * 64 * sizeof(__half)));
    MUST(cudaMalloc((void **)&b16, 64 * 64 * sizeof(__half)));
    MUST(cudaMalloc((void **)&c, 64 * 63 * sizeof(float)));
    cublasHandle_t h;
    CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
    const float one = 1.0f, nil = 0.0f;
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, a16, CUDA_R_16F, 63, b16, CUDA_R_16F, 64, &nil, c, CUDA_R_32F,
                       64, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE,
          "lda < m accepted");
    CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, a16, CUDA_R_16F, 64, b16, CUDA_R_16F, 64, &nil, c, CUDA_R_32F,
                       64, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
          "the GEMM is queued (it faults when it runs)");
    CHECK(cudaDeviceSynchronize() == cudaErrorIllegalAddress, "a GEMM writing past C");
    (void)cudaGetLastError();
    cublasDestroy(h);

    /* GPU 0 goes on */
    MUST(cudaSetDevice(0));
    int *flag;
    MUST(cudaMalloc((void **)&flag, sizeof(int)));
    expect_launch(1, 32, 0, true, flag, "another GPU after the faults");
    MUST(cudaFree(flag));
    /* the faulted GPUs' memory can still be released (returning the error) */
    MUST(cudaSetDevice(1));
    CHECK(cudaFree(keep) == cudaErrorIllegalAddress, "cudaFree on a faulted context");
    CHECK(cudaStreamDestroy(s) == cudaErrorIllegalAddress, "cudaStreamDestroy on a faulted context");
    MUST(cudaSetDevice(2));
    cudaFree(a16);
    cudaFree(b16);
    cudaFree(c);
    (void)cudaGetLastError();
    MUST(cudaSetDevice(0));
    printf("sticky: ok\n");
}

static void test_streams(void)
{
    MUST(cudaSetDevice(0));
    cudaStream_t a, b;
    MUST(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    MUST(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    int *gate, *out; /* pinned: the kernels read and write them directly */
    MUST(cudaHostAlloc((void **)&gate, 4 * sizeof(int), cudaHostAllocPortable));
    MUST(cudaHostAlloc((void **)&out, 4 * sizeof(int), cudaHostAllocPortable));
    memset(gate, 0, 4 * sizeof(int));
    memset(out, 0, 4 * sizeof(int));
    int *d;
    MUST(cudaMalloc((void **)&d, sizeof(int)));

    /* asynchronous: the launch returns while the kernel waits for the host */
    int value = 41;
    SGC_EMU_LAUNCH(gated, 1, 1, 0, a, gate, out, value);
    value = 99; /* arguments were copied at the launch */
    CHECK(cudaGetLastError() == cudaSuccess, "gated launch");
    /* the result, copied back without a synchronisation, is stale */
    SGC_EMU_LAUNCH(gated, 1, 1, 0, a, gate + 1, d, 5);
    MUST(cudaMemcpyAsync(out + 2, d, sizeof(int), cudaMemcpyDeviceToHost, a));
    CHECK(out[0] == 0 && out[2] == 0, "work ran before the gate opened");
    /* an event after the kernels: cudaEventSynchronize waits for them */
    cudaEvent_t ev;
    MUST(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    MUST(cudaEventRecord(ev, a));
    std::atomic<int> waited{0};
    std::thread waiter([&] {
        CHECK(cudaEventSynchronize(ev) == cudaSuccess, "cudaEventSynchronize");
        CHECK(out[0] == 41 && out[2] == 5, "after the event: %d %d", out[0], out[2]);
        waited = 1;
    });
    /* stream b runs while stream a is blocked: it opens a's gate */
    SGC_EMU_LAUNCH(gated, 1, 1, 0, b, gate + 3, gate, 1);
    gate[3] = 1;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, nullptr);
    CHECK(waited == 0, "cudaEventSynchronize returned while the kernels before the event were still waiting");
    gate[1] = 1;
    MUST(cudaStreamSynchronize(a));
    CHECK(out[0] == 41, "argument changed after the launch reached the kernel: %d", out[0]);
    CHECK(out[2] == 5, "stream order: copy after kernel gave %d", out[2]);
    waiter.join();
    CHECK(waited == 1, "waiter");
    MUST(cudaStreamSynchronize(b));
    MUST(cudaEventDestroy(ev));
    /* a pageable destination: cudaMemcpyAsync returns once the copy is done */
    int plain = 0;
    SGC_EMU_LAUNCH(gated, 1, 1, 0, a, gate, d, 17);
    MUST(cudaMemcpyAsync(&plain, d, sizeof(int), cudaMemcpyDeviceToHost, a));
    CHECK(plain == 17, "pageable destination read %d", plain);
    MUST(cudaStreamDestroy(a));
    MUST(cudaStreamDestroy(b));
    MUST(cudaFree(d));
    MUST(cudaFreeHost(gate));
    MUST(cudaFreeHost(out));
    printf("streams: ok\n");
}

/* Runs `kernel` `runs` times (a different schedule each launch); returns how many gave `want`. */
static int correct_runs(void (*kernel)(int *), int blocks, int threads, const std::vector<int> &want, int runs)
{
    int *d;
    MUST(cudaMalloc((void **)&d, want.size() * sizeof(int)));
    std::vector<int> got(want.size());
    int ok = 0;
    for (int r = 0; r < runs; ++r) {
        zero(d, want.size());
        SGC_EMU_LAUNCH(kernel, blocks, threads, 0, (cudaStream_t) nullptr, d);
        MUST(cudaGetLastError());
        MUST(cudaMemcpy(got.data(), d, got.size() * sizeof(int), cudaMemcpyDeviceToHost));
        ok += got == want;
    }
    MUST(cudaFree(d));
    return ok;
}

static void test_races(bool fifo)
{
    MUST(cudaSetDevice(0));
    const int runs = 8, blocks = 4, threads = 256;
    std::vector<int> shift((size_t)blocks * threads);
    for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < threads; ++t)
            shift[(size_t)(b * threads + t)] = t; /* s[t - 1] = t */
    const int good_shift = correct_runs(shift_sync, blocks, threads, shift, runs);
    const int bad_shift = correct_runs(shift_nosync, blocks, threads, shift, runs);
    std::vector<int> own(64);
    for (int b = 0; b < 64; ++b)
        own[(size_t)b] = b + 1;
    const int good_blocks = correct_runs(own_block, 64, 32, own, runs);
    const int bad_blocks = correct_runs(chain_blocks, 64, 32, own, runs);
    printf("races (%s): with __syncthreads %d/%d correct, without %d/%d; independent blocks %d/%d, chained blocks %d/%d\n",
           fifo ? "fifo" : "random", good_shift, runs, bad_shift, runs, good_blocks, runs, bad_blocks, runs);
    CHECK(good_shift == runs && good_blocks == runs, "a correct kernel failed under some schedule");
    if (fifo) { /* the in-order model hides both bugs */
        CHECK(bad_shift == runs && bad_blocks == runs, "expected the in-order schedule to hide the races");
    } else {
        CHECK(bad_shift == 0, "a missing __syncthreads went unnoticed in %d of %d runs", bad_shift, runs);
        CHECK(bad_blocks == 0, "a dependence between blocks went unnoticed in %d of %d runs", bad_blocks, runs);
    }
}

int main(void)
{
    const char *sched = getenv("SG_CUDA_EMU_SCHED");
    const bool fifo = sched != nullptr && strcmp(sched, "fifo") == 0;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n != 3) {
        fprintf(stderr, "run with SG_CUDA_EMU_GPUS=3\n");
        return 1;
    }
    if (!fifo) {
        test_limits();
        test_copies();
        test_streams();
        test_sticky();
    }
    test_races(fifo);
    if (failures != 0) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
