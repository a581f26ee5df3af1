/*
 * cuda_emu.cc -- the CPU stand-in for CUDA described in cuda_emu.h: a fiber scheduler for the
 * threads of a block, fake devices with tracked memory, synchronous streams, and a reference
 * GEMM with cuBLAS's argument checks. Test-only.
 */
#include "cuda_emu.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <ucontext.h>

#include <map>
#include <string>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

sgc_emu_idx threadIdx, blockIdx;
dim3 blockDim, gridDim;

/* ---- fibers ---- */

/* A fiber switch saves the callee-saved registers on the current stack, stores the stack pointer
 * and loads another (x86-64 System V); other architectures use swapcontext, which is slower
 * because it also saves the signal mask. */
#if defined(__x86_64__)
extern "C" void sgc_emu_switch(void **save_sp, void *new_sp);
asm(".pushsection .text\n" /* restore the compiler's section afterwards */
    ".globl sgc_emu_switch\n"
    ".hidden sgc_emu_switch\n"
    ".type sgc_emu_switch,@function\n"
    "sgc_emu_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size sgc_emu_switch,.-sgc_emu_switch\n"
    ".popsection\n");
#define EMU_ASM 1
#else
#define EMU_ASM 0
#endif

namespace
{

enum { STACK = 64 * 1024, NONE = -2, BLOCK_BARRIER = -1 };

/* The threads of one block. Ready fibers wait in a FIFO run queue; a fiber at a barrier is queued
 * again when the last live thread of its group arrives. */
struct sched_t {
    int n = 0;
    std::vector<char *> stack;
    std::vector<void *> sp;      /* saved stack pointers (EMU_ASM) */
    std::vector<ucontext_t> ctx; /* contexts (otherwise) */
    std::vector<char> done;
    std::vector<int> waiting; /* NONE, BLOCK_BARRIER or a warp number */
    std::vector<void *> fake; /* ASan fake stacks of switched-out fibers */
    std::vector<int> runq;
    size_t head = 0;
    void *main_sp = nullptr;
    ucontext_t main_ctx;
    void *main_fake = nullptr;
    const void *main_bottom = nullptr;
    size_t main_size = 0;
    int cur = -1;
    int live_block = 0, arrived_block = 0;
    std::vector<int> live_warp, arrived_warp;
    std::vector<float> shfl;      /* 2 x n shuffle slots */
    std::vector<int> shfl_parity; /* per thread: which set its next shuffle uses */
    const std::function<void()> *body = nullptr;
    std::vector<unsigned char> smem;
};

sched_t *S;           /* the running launch */
std::mutex launch_mu; /* one launch at a time */
uint64_t switches;    /* fiber resumes */

struct stat_t {
    uint64_t launches, blocks, switches;
    double seconds;
};
std::map<std::string, stat_t> *stats;

double now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void print_stats()
{
    for (auto &kv : *stats)
        fprintf(stderr, "cuda_emu: %-16s %8llu launches %10llu blocks %12llu switches %8.3f s\n", kv.first.c_str(),
                (unsigned long long)kv.second.launches, (unsigned long long)kv.second.blocks,
                (unsigned long long)kv.second.switches, kv.second.seconds);
}

void switch_to_main(bool dying)
{
    const int me = S->cur;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &S->fake[(size_t)me], S->main_bottom, S->main_size);
#else
    (void)dying;
#endif
#if EMU_ASM
    sgc_emu_switch(&S->sp[(size_t)me], S->main_sp);
#else
    swapcontext(&S->ctx[(size_t)me], &S->main_ctx);
#endif
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(S->fake[(size_t)me], &S->main_bottom, &S->main_size);
#endif
}

void release(int group)
{
    if (group == BLOCK_BARRIER) {
        for (int i = 0; i < S->n; ++i)
            if (S->waiting[(size_t)i] == BLOCK_BARRIER) {
                S->waiting[(size_t)i] = NONE;
                S->runq.push_back(i);
            }
        S->arrived_block = 0;
    } else {
        for (int i = group * 32; i < S->n && i < group * 32 + 32; ++i)
            if (S->waiting[(size_t)i] == group) {
                S->waiting[(size_t)i] = NONE;
                S->runq.push_back(i);
            }
        S->arrived_warp[(size_t)group] = 0;
    }
}

void fiber_main()
{
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &S->main_bottom, &S->main_size);
#endif
    (*S->body)();
    const int me = S->cur, w = me / 32;
    S->done[(size_t)me] = 1;
    --S->live_block;
    --S->live_warp[(size_t)w];
    /* an exited thread no longer holds back the barriers of its block and warp */
    if (S->arrived_block > 0 && S->arrived_block == S->live_block)
        release(BLOCK_BARRIER);
    if (S->arrived_warp[(size_t)w] > 0 && S->arrived_warp[(size_t)w] == S->live_warp[(size_t)w])
        release(w);
    switch_to_main(true);
    abort(); /* never resumed */
}

void barrier(int group)
{
    const int me = S->cur;
    S->waiting[(size_t)me] = group;
    if (group == BLOCK_BARRIER) {
        if (++S->arrived_block == S->live_block)
            release(BLOCK_BARRIER);
    } else if (++S->arrived_warp[(size_t)group] == S->live_warp[(size_t)group]) {
        release(group);
    }
    switch_to_main(false);
}

void start_fiber(sched_t *s, int i)
{
#if EMU_ASM
    /* stagger the stack tops so the fibers' hot frames do not all map to the same cache sets */
    uintptr_t top = ((uintptr_t)(s->stack[(size_t)i] + STACK - (size_t)(i % 61) * 64)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;                       /* alignment: at entry rsp + 8 is 16-aligned, as after a call */
    *--sp = (void *)(uintptr_t)fiber_main; /* popped by ret */
    for (int r = 0; r < 6; ++r)
        *--sp = nullptr; /* rbp rbx r12-r15 */
    s->sp[(size_t)i] = sp;
#else
    ucontext_t *c = &s->ctx[(size_t)i];
    getcontext(c);
    c->uc_stack.ss_sp = s->stack[(size_t)i];
    c->uc_stack.ss_size = STACK;
    c->uc_link = nullptr;
    makecontext(c, fiber_main, 0);
#endif
}

void run_block(sched_t *s)
{
    const int n = s->n;
    s->runq.clear();
    s->head = 0;
    for (int i = 0; i < n; ++i) {
        s->done[(size_t)i] = 0;
        s->waiting[(size_t)i] = NONE;
        s->fake[(size_t)i] = nullptr;
        s->shfl_parity[(size_t)i] = 0;
        start_fiber(s, i);
        s->runq.push_back(i);
    }
    s->live_block = n;
    s->arrived_block = 0;
    const int warps = (n + 31) / 32;
    s->live_warp.assign((size_t)warps, 0);
    s->arrived_warp.assign((size_t)warps, 0);
    for (int i = 0; i < n; ++i)
        ++s->live_warp[(size_t)(i / 32)];
    const bool flat = blockDim.y == 1 && blockDim.z == 1;
    int remaining = n;
    while (remaining > 0) {
        if (s->head == s->runq.size()) {
            fprintf(stderr, "cuda_emu: deadlock: every live thread of block (%u,%u) waits at a barrier\n", blockIdx.x, blockIdx.y);
            abort();
        }
        const int i = s->runq[s->head++];
        if (s->head > 4096 && s->head * 2 > s->runq.size()) { /* keep the queue short */
            s->runq.erase(s->runq.begin(), s->runq.begin() + (long)s->head);
            s->head = 0;
        }
        s->cur = i;
        if (flat) {
            threadIdx.x = (unsigned)i;
        } else {
            threadIdx.x = (unsigned)i % blockDim.x;
            threadIdx.y = ((unsigned)i / blockDim.x) % blockDim.y;
            threadIdx.z = (unsigned)i / (blockDim.x * blockDim.y);
        }
#if EMU_ASAN
        __sanitizer_start_switch_fiber(&s->main_fake, s->stack[(size_t)i], STACK);
#endif
#if EMU_ASM
        sgc_emu_switch(&s->main_sp, s->sp[(size_t)i]);
#else
        swapcontext(&s->main_ctx, &s->ctx[(size_t)i]);
#endif
#if EMU_ASAN
        __sanitizer_finish_switch_fiber(s->main_fake, nullptr, nullptr);
#endif
        ++switches;
        if (s->done[(size_t)i])
            --remaining;
    }
    s->cur = -1;
}

} // namespace

void sgc_emu_launch(const char *name, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body)
{
    std::lock_guard<std::mutex> g(launch_mu);
    const char *want = getenv("SG_CUDA_EMU_STATS");
    if (stats == nullptr && want != nullptr && want[0] == '1') {
        stats = new std::map<std::string, stat_t>();
        atexit(print_stats);
    }
    const double t0 = now();
    const uint64_t sw0 = switches;
    sched_t local;
    S = &local;
    const int n = (int)(block.x * block.y * block.z);
    local.n = n;
    local.stack.resize((size_t)n);
    for (auto &st : local.stack)
        st = (char *)malloc(STACK);
    local.sp.resize((size_t)n);
#if !EMU_ASM
    local.ctx.resize((size_t)n);
#endif
    local.done.resize((size_t)n);
    local.waiting.resize((size_t)n);
    local.fake.resize((size_t)n);
    local.runq.reserve((size_t)n * 4);
    local.shfl.assign(2 * (size_t)n, 0.0f);
    local.shfl_parity.assign((size_t)n, 0);
    local.body = &body;
    local.smem.assign(smem + 16, 0xff); /* uninitialised shared memory reads as NaN */
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx.x = x;
                blockIdx.y = y;
                blockIdx.z = z;
                run_block(&local);
            }
    for (auto &st : local.stack)
        free(st);
    S = nullptr;
    if (stats != nullptr) {
        stat_t &st = (*stats)[name];
        st.launches += 1;
        st.blocks += (uint64_t)grid.x * grid.y * grid.z;
        st.switches += switches - sw0;
        st.seconds += now() - t0;
    }
}

void *sgc_emu_dyn_smem()
{
    return S->smem.data();
}

void __syncthreads()
{
    barrier(BLOCK_BARRIER);
}

float __shfl_xor_sync(unsigned mask, float v, int lane_mask)
{
    (void)mask;
    /* Two slot sets used alternately: a lane writes set p, waits for its warp, reads set p. It
     * writes set p again only two shuffles later, after a barrier that every lane reaches only
     * once it has read set p: one barrier per shuffle is enough. */
    const int t = S->cur, w = t / 32;
    const int p = S->shfl_parity[(size_t)t];
    S->shfl_parity[(size_t)t] = p ^ 1;
    float *slot = &S->shfl[(size_t)p * (size_t)S->n];
    slot[t] = v;
    barrier(w);
    const int other = w * 32 + ((t % 32) ^ lane_mask);
    return other < S->n ? slot[other] : v;
}

int atomicAdd(int *p, int v)
{
    int old = *p; /* fibers never run at the same time */
    *p = old + v;
    return old;
}

/* ---- devices and memory ---- */

namespace
{

std::mutex mem_mu;
std::map<const void *, std::pair<int, size_t>> allocs; /* device pointer -> (device, bytes) */
std::vector<size_t> used;
thread_local int current_dev = 0;

int n_devices()
{
    const char *e = getenv("SG_CUDA_EMU_GPUS");
    return e != NULL ? (int)strtol(e, NULL, 10) : 2;
}

size_t capacity()
{
    const char *e = getenv("SG_CUDA_EMU_MEM_MB");
    return (size_t)(e != NULL ? strtoull(e, NULL, 10) : 4096) << 20;
}

} // namespace

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = n_devices();
    if (*n <= 0) {
        *n = 0;
        return cudaErrorNoDevice;
    }
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev)
{
    if (dev < 0 || dev >= n_devices())
        return cudaErrorInvalidDevice;
    current_dev = dev;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
    if (dev < 0 || dev >= n_devices())
        return cudaErrorInvalidDevice;
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "EMULATED GPU %d", dev);
    p->major = 9;
    p->minor = 0;
    p->totalGlobalMem = capacity();
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    std::lock_guard<std::mutex> g(mem_mu);
    if (used.size() < (size_t)n_devices())
        used.resize((size_t)n_devices(), 0);
    *total_b = capacity();
    *free_b = capacity() - used[(size_t)current_dev];
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    std::lock_guard<std::mutex> g(mem_mu);
    if (used.size() < (size_t)n_devices())
        used.resize((size_t)n_devices(), 0);
    if (used[(size_t)current_dev] + n > capacity()) {
        *p = nullptr;
        return cudaErrorMemoryAllocation;
    }
    *p = malloc(n > 0 ? n : 1);
    if (*p == nullptr)
        return cudaErrorMemoryAllocation;
    memset(*p, 0xff, n); /* uninitialised device memory reads as NaN */
    used[(size_t)current_dev] += n;
    allocs[*p] = std::make_pair(current_dev, n);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (p == nullptr)
        return cudaSuccess;
    std::lock_guard<std::mutex> g(mem_mu);
    auto it = allocs.find(p);
    if (it == allocs.end())
        return cudaErrorInvalidValue;
    used[(size_t)it->second.first] -= it->second.second;
    allocs.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
    (void)flags;
    *p = malloc(n > 0 ? n : 1);
    return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    (void)kind;
    if (n > 0)
        memcpy(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s)
{
    (void)s;
    return cudaMemcpy(dst, src, n, kind);
}

struct sgc_emu_stream {
    int dev;
};
struct sgc_emu_event {
    int dev;
};

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = new sgc_emu_stream{current_dev};
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    return s != nullptr ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = new sgc_emu_event{current_dev};
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    return e != nullptr && s != nullptr ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    return e != nullptr ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorNoDevice:
        return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    }
    return "unknown error";
}

/* ---- cuBLAS ---- */

struct sgc_emu_blas {
    cudaStream_t stream;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new sgc_emu_blas{nullptr};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    if (h == nullptr)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

namespace
{

/* op(X)(r, c) of a column-major fp16 matrix as a dense float row */
void fetch_rows(const __half *X, cublasOperation_t t, int ld, int r0, int nr, int cols, std::vector<float> &out)
{
    out.resize((size_t)nr * (size_t)cols);
    for (int r = 0; r < nr; ++r)
        for (int c = 0; c < cols; ++c) {
            const size_t at =
                t == CUBLAS_OP_N ? (size_t)(r0 + r) + (size_t)c * (size_t)ld : (size_t)c + (size_t)(r0 + r) * (size_t)ld;
            out[(size_t)r * (size_t)cols + (size_t)c] = __half2float(X[at]);
        }
}

cublasStatus_t gemm1(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                     const __half *A, int lda, const __half *B, int ldb, float beta, void *C, cudaDataType_t ct, int ldc)
{
    (void)h;
    /* C (m x n) = alpha op(A) (m x k) op(B) (k x n) + beta C; op(B)^T rows are B's columns */
    std::vector<float> a, bt;
    const cublasOperation_t tbt = tb == CUBLAS_OP_N ? CUBLAS_OP_T : CUBLAS_OP_N; /* rows of op(B)^T */
    fetch_rows(B, tbt, ldb, 0, n, k, bt);
    const int step = 1024;
    for (int i0 = 0; i0 < m; i0 += step) {
        const int ni = m - i0 < step ? m - i0 : step;
        fetch_rows(A, ta, lda, i0, ni, k, a);
        for (int i = 0; i < ni; ++i)
            for (int j = 0; j < n; ++j) {
                const float *x = &a[(size_t)i * (size_t)k], *y = &bt[(size_t)j * (size_t)k];
                float acc = 0.0f;
                for (int l = 0; l < k; ++l)
                    acc += x[l] * y[l];
                const size_t at = (size_t)(i0 + i) + (size_t)j * (size_t)ldc;
                if (ct == CUDA_R_32F) {
                    float *c = (float *)C;
                    c[at] = alpha * acc + (beta != 0.0f ? beta * c[at] : 0.0f);
                } else {
                    __half *c = (__half *)C;
                    c[at] = __float2half_rn(alpha * acc + (beta != 0.0f ? beta * __half2float(c[at]) : 0.0f));
                }
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, cudaDataType_t at, int lda,
                     cudaDataType_t bt, int ldb, cudaDataType_t ct, int ldc, cublasComputeType_t compute)
{
    if (h == nullptr)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1)) ||
        ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1)) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (at != CUDA_R_16F || bt != CUDA_R_16F || (ct != CUDA_R_16F && ct != CUDA_R_32F) || compute != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType_t at, int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
                            void *C, cudaDataType_t ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    cublasStatus_t s = check(h, ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    return gemm1(h, ta, tb, m, n, k, *(const float *)alpha, (const __half *)A, lda, (const __half *)B, ldb, *(const float *)beta, C,
                 ct, ldc);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType_t at, int lda, long long sa, const void *B,
                                          cudaDataType_t bt, int ldb, long long sb, const void *beta, void *C, cudaDataType_t ct,
                                          int ldc, long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)algo;
    cublasStatus_t s = check(h, ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    if (batch < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    const size_t csz = ct == CUDA_R_32F ? 4 : 2;
    for (int b = 0; b < batch; ++b) {
        s = gemm1(h, ta, tb, m, n, k, *(const float *)alpha, (const __half *)A + sa * b, lda, (const __half *)B + sb * b, ldb,
                  *(const float *)beta, (char *)C + (size_t)(sc * b) * csz, ct, ldc);
        if (s != CUBLAS_STATUS_SUCCESS)
            return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}
