/*
 * cuda_emu.cc -- the CPU stand-in for CUDA described in cuda_emu.h: fake devices with tracked
 * memory and sticky errors, one thread per stream, events, a fiber scheduler for the threads of a
 * block (seeded random order), launch and pointer checks, and a reference GEMM with cuBLAS's
 * argument checks. Test-only.
 */
#include "cuda_emu.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <ucontext.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

SGC_EMU_TLS sgc_emu_idx threadIdx, blockIdx, blockDim, gridDim;

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

/* __launch_bounds__(n) puts a kernel into section sgc_emu_lb_<n>; the linker brackets each such
 * section with __start_/__stop_ symbols (weak: absent when no kernel uses that bound) */
#define EMU_LB(n)                                                                                                                  \
    extern "C" char __start_sgc_emu_lb_##n[] __attribute__((weak, visibility("hidden")));                                          \
    extern "C" char __stop_sgc_emu_lb_##n[] __attribute__((weak, visibility("hidden")));
/* clang-format off */
#define EMU_LB_LIST(X)                                                                                 \
    X(32) X(64) X(96) X(128) X(160) X(192) X(224) X(256) X(288) X(320) X(352) X(384) X(416) X(448) \
    X(480) X(512) X(544) X(576) X(608) X(640) X(672) X(704) X(736) X(768) X(800) X(832) X(864)     \
    X(896) X(928) X(960) X(992) X(1024)
/* clang-format on */
EMU_LB_LIST(EMU_LB)

namespace
{

enum { STACK = 64 * 1024, NONE = -2, BLOCK_BARRIER = -1, MAX_DEVICES = 64 };

/* ---- configuration (the environment, read once) ---- */

struct fault_t {
    std::string kernel;
    uint64_t nth;
};

struct config_t {
    int gpus = 2;
    size_t mem = (size_t)4096 << 20;
    size_t smem_limit = 49152;
    uint64_t seed = 1;
    bool fifo = false;
    std::vector<fault_t> faults;
};

const config_t &cfg()
{
    static config_t *c = [] {
        config_t *x = new config_t();
        const char *e;
        if ((e = getenv("SG_CUDA_EMU_GPUS")) != nullptr)
            x->gpus = (int)strtol(e, nullptr, 10);
        if (x->gpus > MAX_DEVICES)
            x->gpus = MAX_DEVICES;
        if ((e = getenv("SG_CUDA_EMU_MEM_MB")) != nullptr)
            x->mem = (size_t)strtoull(e, nullptr, 10) << 20;
        if ((e = getenv("SG_CUDA_EMU_SMEM_PER_BLOCK")) != nullptr)
            x->smem_limit = (size_t)strtoull(e, nullptr, 10);
        if ((e = getenv("SG_CUDA_EMU_SEED")) != nullptr)
            x->seed = strtoull(e, nullptr, 10);
        if ((e = getenv("SG_CUDA_EMU_SCHED")) != nullptr && strcmp(e, "fifo") == 0)
            x->fifo = true;
        if ((e = getenv("SG_CUDA_EMU_FAULT")) != nullptr) {
            std::string s(e);
            size_t pos = 0;
            while (pos < s.size()) {
                size_t comma = s.find(',', pos);
                std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
                size_t colon = item.find(':');
                if (colon != std::string::npos)
                    x->faults.push_back(fault_t{item.substr(0, colon), strtoull(item.c_str() + colon + 1, nullptr, 10)});
                pos = comma == std::string::npos ? s.size() : comma + 1;
            }
        }
        return x;
    }();
    return *c;
}

uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s != '\0'; ++s)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* ---- errors and devices ---- */

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_dev = 0;

cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess)
        last_error = e;
    return e;
}

struct device_t {
    std::atomic<int> sticky{0}; /* a cudaError_t that corrupted the context, or 0 */
    std::mutex mu;              /* streams, null_stream */
    std::vector<sgc_emu_stream *> streams;
    sgc_emu_stream *null_stream = nullptr; /* the legacy default stream, made on first use */
    size_t used = 0;                       /* under mem_mu */
};

device_t *devices; /* MAX_DEVICES, never freed: stream threads may outlive static destructors */
std::once_flag devices_once;

device_t &dev_state(int d)
{
    std::call_once(devices_once, [] { devices = new device_t[MAX_DEVICES]; });
    return devices[d];
}

int n_devices()
{
    return cfg().gpus > 0 ? cfg().gpus : 0;
}

/* the sticky error of the current device (or of `d`), or cudaSuccess */
cudaError_t sticky(int d)
{
    return (cudaError_t)dev_state(d).sticky.load(std::memory_order_acquire);
}

void set_sticky(int d, cudaError_t e, const char *why)
{
    int zero = 0;
    if (dev_state(d).sticky.compare_exchange_strong(zero, (int)e))
        fprintf(stderr, "cuda_emu: GPU %d: %s: %s; the context is unusable from now on\n", d, cudaGetErrorName(e), why);
}

/* ---- memory ---- */

struct alloc_t {
    size_t size;
    int dev; /* -1: pinned host memory */
};
std::mutex mem_mu;
std::map<uintptr_t, alloc_t> allocs; /* device allocations and pinned host allocations, by base */

/* The allocation containing [p, p + n) (n may be 0: p may then be one past the end), or null. */
const alloc_t *find_alloc(const void *p, size_t n, uintptr_t *base)
{
    const uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin())
        return nullptr;
    --it;
    if (a - it->first > it->second.size || n > it->second.size - (a - it->first))
        return nullptr;
    if (base != nullptr)
        *base = it->first;
    return &it->second;
}

/* 1 when [p, p + n) is device memory of device `d` (any device when d < 0) */
bool is_device(const void *p, size_t n, int d)
{
    std::lock_guard<std::mutex> g(mem_mu);
    const alloc_t *a = find_alloc(p, n, nullptr);
    return a != nullptr && a->dev >= 0 && (d < 0 || a->dev == d);
}

bool is_pinned(const void *p)
{
    std::lock_guard<std::mutex> g(mem_mu);
    const alloc_t *a = find_alloc(p, 0, nullptr);
    return a != nullptr && a->dev < 0;
}

} // namespace

/* ---- streams and events ---- */

struct sgc_emu_stream {
    int dev;
    uint64_t launches = 0; /* launches submitted (host order): part of each launch's seed */
    std::mutex mu;
    std::condition_variable work_cv, done_cv;
    struct op_t {
        std::function<void()> fn;
        bool always; /* runs even on a faulted context (event records) */
    };
    std::deque<op_t> q;
    uint64_t submitted = 0, completed = 0;
    bool stop = false;
    std::thread th;
};

namespace
{

void stream_main(sgc_emu_stream *s)
{
    current_dev = s->dev;
    for (;;) {
        sgc_emu_stream::op_t op;
        {
            std::unique_lock<std::mutex> lk(s->mu);
            s->work_cv.wait(lk, [s] { return s->stop || !s->q.empty(); });
            if (s->q.empty())
                return;
            op = std::move(s->q.front());
            s->q.pop_front();
        }
        if (op.always || sticky(s->dev) == cudaSuccess) /* a faulted context runs nothing more */
            op.fn();
        std::lock_guard<std::mutex> lk(s->mu);
        ++s->completed;
        s->done_cv.notify_all();
    }
}

sgc_emu_stream *stream_new(int dev)
{
    sgc_emu_stream *s = new sgc_emu_stream();
    s->dev = dev;
    s->th = std::thread(stream_main, s);
    return s;
}

/* Queues `fn`; returns its ticket (the value of `completed` once it has run). */
uint64_t enqueue(sgc_emu_stream *s, std::function<void()> fn, bool always = false)
{
    std::lock_guard<std::mutex> lk(s->mu);
    s->q.push_back(sgc_emu_stream::op_t{std::move(fn), always});
    s->work_cv.notify_one();
    return ++s->submitted;
}

void wait_for(sgc_emu_stream *s, uint64_t ticket)
{
    std::unique_lock<std::mutex> lk(s->mu);
    s->done_cv.wait(lk, [s, ticket] { return s->completed >= ticket; });
}

void drain(sgc_emu_stream *s)
{
    uint64_t t;
    {
        std::lock_guard<std::mutex> lk(s->mu);
        t = s->submitted;
    }
    wait_for(s, t);
}

/* the stream work goes to: `s`, or the device's legacy default stream */
sgc_emu_stream *target(cudaStream_t s, int dev)
{
    if (s != nullptr)
        return s;
    device_t &d = dev_state(dev);
    std::lock_guard<std::mutex> g(d.mu);
    if (d.null_stream == nullptr)
        d.null_stream = stream_new(dev);
    return d.null_stream;
}

/* Waits for all work queued on device `dev` (its streams and its default stream); the lock keeps
 * the streams from being destroyed meanwhile (stream threads never take it). */
void drain_device(int dev)
{
    device_t &d = dev_state(dev);
    std::lock_guard<std::mutex> g(d.mu);
    for (sgc_emu_stream *s : d.streams)
        drain(s);
    if (d.null_stream != nullptr)
        drain(d.null_stream);
}

/* Waits for the device's legacy default stream, with which synchronous copies are ordered. */
void drain_null(int dev)
{
    device_t &d = dev_state(dev);
    std::lock_guard<std::mutex> g(d.mu);
    if (d.null_stream != nullptr)
        drain(d.null_stream);
}

struct event_state_t {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t recorded = 0, reached = 0;
};

} // namespace

struct sgc_emu_event {
    int dev;
    std::shared_ptr<event_state_t> st; /* outlives the event while a record is queued */
};

/* ---- the block scheduler ---- */

namespace
{

/* The threads of one block. Ready fibers wait in a run queue, from which the next one is drawn at
 * random (or in order with SG_CUDA_EMU_SCHED=fifo); a fiber at a barrier is queued again when the
 * last live thread of its group arrives. */
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
    uint64_t rng = 0;
    bool fifo = false;
    /* shared memory of the running block */
    std::vector<unsigned char> dyn, stat;
    size_t dyn_size = 0, stat_used = 0, smem_limit = 0;
    std::vector<std::pair<const void *, size_t>> tags; /* static declarations -> offsets */
    const char *kernel = nullptr;
    uint64_t switches = 0; /* fiber resumes, for SG_CUDA_EMU_STATS */
};

SGC_EMU_TLS sched_t *S; /* the launch running on this thread */

/* kernel -> bytes of static shared memory, learnt when it first ran */
std::mutex kinfo_mu;
std::map<const void *, size_t> static_smem;
std::map<std::string, uint64_t> launch_count; /* for SG_CUDA_EMU_FAULT */

struct stat_t {
    uint64_t launches, blocks, switches;
    double seconds;
};
std::mutex stats_mu;
std::map<std::string, stat_t> *stats;

double now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void print_stats()
{
    std::lock_guard<std::mutex> g(stats_mu);
    for (auto &kv : *stats)
        fprintf(stderr, "cuda_emu: %-16s %8llu launches %10llu blocks %12llu switches %8.3f s\n", kv.first.c_str(),
                (unsigned long long)kv.second.launches, (unsigned long long)kv.second.blocks,
                (unsigned long long)kv.second.switches, kv.second.seconds);
}

uint64_t next_rand(uint64_t &state)
{
    state += 0x9e3779b97f4a7c15ull;
    return mix(state);
}

void switch_to_main(bool dying)
{
    sched_t *s = S;
    const int me = s->cur;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &s->fake[(size_t)me], s->main_bottom, s->main_size);
#else
    (void)dying;
#endif
#if EMU_ASM
    sgc_emu_switch(&s->sp[(size_t)me], s->main_sp);
#else
    swapcontext(&s->ctx[(size_t)me], &s->main_ctx);
#endif
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(s->fake[(size_t)me], &s->main_bottom, &s->main_size);
#endif
}

void release(int group)
{
    sched_t *s = S;
    if (group == BLOCK_BARRIER) {
        for (int i = 0; i < s->n; ++i)
            if (s->waiting[(size_t)i] == BLOCK_BARRIER) {
                s->waiting[(size_t)i] = NONE;
                s->runq.push_back(i);
            }
        s->arrived_block = 0;
    } else {
        for (int i = group * 32; i < s->n && i < group * 32 + 32; ++i)
            if (s->waiting[(size_t)i] == group) {
                s->waiting[(size_t)i] = NONE;
                s->runq.push_back(i);
            }
        s->arrived_warp[(size_t)group] = 0;
    }
}

void fiber_main()
{
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &S->main_bottom, &S->main_size);
#endif
    (*S->body)();
    sched_t *s = S;
    const int me = s->cur, w = me / 32;
    s->done[(size_t)me] = 1;
    --s->live_block;
    --s->live_warp[(size_t)w];
    /* an exited thread no longer holds back the barriers of its block and warp */
    if (s->arrived_block > 0 && s->arrived_block == s->live_block)
        release(BLOCK_BARRIER);
    if (s->arrived_warp[(size_t)w] > 0 && s->arrived_warp[(size_t)w] == s->live_warp[(size_t)w])
        release(w);
    switch_to_main(true);
    abort(); /* never resumed */
}

void barrier(int group)
{
    sched_t *s = S;
    const int me = s->cur;
    s->waiting[(size_t)me] = group;
    if (group == BLOCK_BARRIER) {
        if (++s->arrived_block == s->live_block)
            release(BLOCK_BARRIER);
    } else if (++s->arrived_warp[(size_t)group] == s->live_warp[(size_t)group]) {
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
    /* shared memory is uninitialised at the start of every block: NaN bytes */
    if (s->dyn_size > 0)
        memset(s->dyn.data(), 0xff, s->dyn_size);
    if (s->stat_used > 0)
        memset(s->stat.data(), 0xff, s->stat_used);
    const bool flat = blockDim.y == 1 && blockDim.z == 1;
    int remaining = n;
    uint64_t sw = 0;
    while (remaining > 0) {
        if (s->head == s->runq.size()) {
            fprintf(stderr, "cuda_emu: deadlock: every live thread of block (%u,%u,%u) of %s waits at a barrier\n", blockIdx.x,
                    blockIdx.y, blockIdx.z, s->kernel);
            abort();
        }
        if (!s->fifo) { /* any ready thread may run next */
            const size_t left = s->runq.size() - s->head;
            if (left > 1) /* a uniform pick in [0, left) without a division */
                std::swap(s->runq[s->head], s->runq[s->head + (size_t)(((unsigned __int128)next_rand(s->rng) * left) >> 64)]);
        }
        const int i = s->runq[s->head++];
        if (s->head > 4096 && s->head * 2 > s->runq.size()) { /* keep the queue short */
            s->runq.erase(s->runq.begin(), s->runq.begin() + (long)s->head);
            s->head = 0;
        }
        s->cur = i;
        if (flat) {
            threadIdx.x = (unsigned)i;
            threadIdx.y = threadIdx.z = 0;
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
        ++sw;
        if (s->done[(size_t)i])
            --remaining;
    }
    s->cur = -1;
    s->switches += sw;
}

/* fiber stacks, kept per stream thread between launches */
struct stack_pool_t {
    std::vector<char *> v;
    ~stack_pool_t()
    {
        for (char *p : v)
            free(p);
    }
};
thread_local stack_pool_t stack_pool;

/* Runs a launch on the calling (stream) thread: its blocks in a seeded random order. */
void run_launch(const sgc_emu_launch_t &l, uint64_t seed)
{
    const double t0 = now();
    sched_t local;
    sched_t *outer = S;
    S = &local;
    const int n = (int)(l.block.x * l.block.y * l.block.z);
    local.n = n;
    local.kernel = l.name;
    local.fifo = cfg().fifo;
    while (stack_pool.v.size() < (size_t)n) {
        char *st = (char *)malloc(STACK);
        if (st == nullptr)
            abort();
        stack_pool.v.push_back(st);
    }
    local.stack.assign(stack_pool.v.begin(), stack_pool.v.begin() + n);
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
    local.body = &l.body;
    local.smem_limit = cfg().smem_limit;
    local.dyn_size = l.smem;
    local.dyn.resize(l.smem + 16);
    local.stat.resize(cfg().smem_limit + 16);
    gridDim = sgc_emu_idx{l.grid.x, l.grid.y, l.grid.z};
    blockDim = sgc_emu_idx{l.block.x, l.block.y, l.block.z};
    /* blocks in the order of a random bijection of their linear index: i -> (a i + b) mod N */
    const uint64_t nb = (uint64_t)l.grid.x * l.grid.y * l.grid.z;
    uint64_t a = 1, b = 0, r = seed;
    if (!local.fifo && nb > 1) {
        b = next_rand(r) % nb;
        for (;;) {
            a = next_rand(r) % nb;
            uint64_t x = a, y = nb;
            while (y != 0) {
                uint64_t t = x % y;
                x = y;
                y = t;
            }
            if (a != 0 && x == 1)
                break;
        }
    }
    for (uint64_t i = 0; i < nb; ++i) {
        const uint64_t li = (uint64_t)(((unsigned __int128)a * i + b) % nb);
        blockIdx.x = (unsigned)(li % l.grid.x);
        blockIdx.y = (unsigned)((li / l.grid.x) % l.grid.y);
        blockIdx.z = (unsigned)(li / ((uint64_t)l.grid.x * l.grid.y));
        local.rng = mix(seed ^ mix(li));
        run_block(&local);
    }
    {
        std::lock_guard<std::mutex> g(kinfo_mu);
        size_t &known = static_smem[l.kernel];
        if (local.stat_used > known)
            known = local.stat_used;
    }
    S = outer;
    if (stats != nullptr) {
        std::lock_guard<std::mutex> g(stats_mu);
        stat_t &st = (*stats)[l.name];
        st.launches += 1;
        st.blocks += nb;
        st.switches += local.switches;
        st.seconds += now() - t0; /* wall time: launches on several streams overlap */
    }
}

/* the kernel's __launch_bounds__, or 1024 */
unsigned launch_bound(const void *k)
{
    const char *p = (const char *)k;
#define EMU_LB_CHECK(n)                                                                                                            \
    if (__start_sgc_emu_lb_##n != nullptr && p >= __start_sgc_emu_lb_##n && p < __stop_sgc_emu_lb_##n)                             \
        return n;
    EMU_LB_LIST(EMU_LB_CHECK)
#undef EMU_LB_CHECK
    return 1024;
}

} // namespace

void sgc_emu_submit(sgc_emu_launch_t &&l)
{
    const char *want = getenv("SG_CUDA_EMU_STATS");
    if (want != nullptr && want[0] == '1') {
        std::lock_guard<std::mutex> g(stats_mu);
        if (stats == nullptr) {
            stats = new std::map<std::string, stat_t>();
            atexit(print_stats);
        }
    }
    const int dev = l.stream != nullptr ? l.stream->dev : current_dev;
    if (sticky(dev) != cudaSuccess) {
        ret(sticky(dev));
        return;
    }
    /* the configuration, as a GPU checks it when the launch is made */
    const dim3 g = l.grid, b = l.block;
    const uint64_t threads = (uint64_t)b.x * b.y * b.z;
    size_t stat_known = 0;
    {
        std::lock_guard<std::mutex> lk(kinfo_mu);
        auto it = static_smem.find(l.kernel);
        if (it != static_smem.end())
            stat_known = it->second;
    }
    const char *bad = nullptr;
    if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024)
        bad = "block dimensions";
    else if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
        bad = "grid dimensions";
    else if (threads > launch_bound(l.kernel))
        bad = "more threads than the kernel's __launch_bounds__";
    else if (l.smem + stat_known > cfg().smem_limit)
        bad = "shared memory (static + dynamic) over the per-block limit";
    if (bad != nullptr) {
        if (getenv("SG_CUDA_EMU_QUIET") == nullptr)
            fprintf(stderr,
                    "cuda_emu: launch of %s refused (%s): grid (%u,%u,%u), block (%u,%u,%u), %zu + %zu bytes of shared memory\n",
                    l.name, bad, g.x, g.y, g.z, b.x, b.y, b.z, stat_known, l.smem);
        ret(cudaErrorInvalidValue);
        return;
    }
    /* the arguments: a GPU takes any pointer and faults when the kernel dereferences a bad one */
    std::string fault;
    for (size_t i = 0; i < l.pointers.size() && fault.empty(); ++i) {
        const void *p = l.pointers[i];
        if (p == nullptr || is_device(p, 0, dev) || is_pinned(p))
            continue;
        char why[160];
        snprintf(why, sizeof(why), "pointer %zu of the arguments (%p) is %s", i + 1, p,
                 is_device(p, 0, -1) ? "memory of another GPU" : "not device memory");
        fault = why;
    }
    uint64_t nth;
    {
        std::lock_guard<std::mutex> lk(kinfo_mu);
        nth = ++launch_count[l.name];
    }
    for (const fault_t &f : cfg().faults)
        if (fault.empty() && f.kernel == l.name && f.nth == nth)
            fault = "injected by SG_CUDA_EMU_FAULT";
    sgc_emu_stream *s = target(l.stream, dev);
    uint64_t seed;
    {
        std::lock_guard<std::mutex> lk(s->mu);
        seed = mix(cfg().seed ^ mix(hash_str(l.name) ^ mix(s->launches++)));
    }
    auto lp = std::make_shared<sgc_emu_launch_t>(std::move(l));
    if (!fault.empty()) {
        std::string why = std::string("kernel ") + lp->name + ": " + fault;
        enqueue(s, [dev, why]() { set_sticky(dev, cudaErrorIllegalAddress, why.c_str()); });
        return;
    }
    enqueue(s, [lp, seed]() { run_launch(*lp, seed); });
}

void *sgc_emu_dyn_smem()
{
    return S->dyn.data();
}

void *sgc_emu_static_smem(const void *tag, size_t size, size_t align)
{
    sched_t *s = S;
    for (const auto &t : s->tags)
        if (t.first == tag)
            return s->stat.data() + t.second;
    size_t off = (s->stat_used + align - 1) / align * align;
    if (off + size + s->dyn_size > s->smem_limit) {
        fprintf(stderr,
                "cuda_emu: %s uses %zu bytes of static and %zu of dynamic shared memory, over the per-block limit of %zu: a GPU "
                "refuses this launch (cudaErrorInvalidValue)\n",
                s->kernel, off + size, s->dyn_size, s->smem_limit);
        abort();
    }
    s->tags.push_back(std::make_pair(tag, off));
    s->stat_used = off + size;
    memset(s->stat.data() + off, 0xff, size);
    return s->stat.data() + off;
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
    sched_t *s = S;
    const int t = s->cur, w = t / 32;
    const int p = s->shfl_parity[(size_t)t];
    s->shfl_parity[(size_t)t] = p ^ 1;
    float *slot = &s->shfl[(size_t)p * (size_t)s->n];
    slot[t] = v;
    barrier(w);
    const int other = w * 32 + ((t % 32) ^ lane_mask);
    return other < s->n ? slot[other] : v;
}

int atomicAdd(int *p, int v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); /* kernels of other streams may run at the same time */
}

extern "C" void sgc_emu_inject_sticky(int dev, cudaError_t e)
{
    set_sticky(dev, e, "injected by a test");
}

/* ---- devices ---- */

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = n_devices();
    if (*n <= 0) {
        *n = 0;
        return ret(cudaErrorNoDevice);
    }
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev)
{
    if (dev < 0 || dev >= n_devices())
        return ret(cudaErrorInvalidDevice);
    current_dev = dev;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
    *dev = current_dev;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
    if (dev < 0 || dev >= n_devices())
        return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "EMULATED GPU %d", dev);
    p->major = 9;
    p->minor = 0;
    p->totalGlobalMem = cfg().mem;
    p->sharedMemPerBlock = cfg().smem_limit;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    drain_device(current_dev);
    return ret(sticky(current_dev));
}

/* ---- memory ---- */

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    if (sticky(current_dev) != cudaSuccess)
        return ret(sticky(current_dev));
    std::lock_guard<std::mutex> g(mem_mu);
    *total_b = cfg().mem;
    *free_b = cfg().mem - dev_state(current_dev).used;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = nullptr;
    if (sticky(current_dev) != cudaSuccess)
        return ret(sticky(current_dev));
    std::lock_guard<std::mutex> g(mem_mu);
    device_t &d = dev_state(current_dev);
    if (d.used + n > cfg().mem)
        return ret(cudaErrorMemoryAllocation);
    void *m = nullptr;
    if (posix_memalign(&m, 256, n > 0 ? n : 1) != 0) /* cudaMalloc's alignment */
        return ret(cudaErrorMemoryAllocation);
    memset(m, 0xff, n); /* uninitialised device memory reads as NaN */
    d.used += n;
    allocs[(uintptr_t)m] = alloc_t{n, current_dev};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (p == nullptr)
        return cudaSuccess;
    int dev;
    {
        std::lock_guard<std::mutex> g(mem_mu);
        auto it = allocs.find((uintptr_t)p);
        if (it == allocs.end() || it->second.dev < 0)
            return ret(cudaErrorInvalidValue);
        dev = it->second.dev;
    }
    drain_device(dev); /* cudaFree waits for the device: no queued work may still use it */
    {
        std::lock_guard<std::mutex> g(mem_mu);
        auto it = allocs.find((uintptr_t)p);
        dev_state(dev).used -= it->second.size;
        allocs.erase(it);
    }
    free(p); /* freed even on a faulted context (the emulation's own memory) */
    return ret(sticky(dev));
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
    (void)flags;
    *p = nullptr;
    if (sticky(current_dev) != cudaSuccess)
        return ret(sticky(current_dev));
    void *m = malloc(n > 0 ? n : 1);
    if (m == nullptr)
        return ret(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> g(mem_mu);
    allocs[(uintptr_t)m] = alloc_t{n, -1};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    if (p == nullptr)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> g(mem_mu);
        auto it = allocs.find((uintptr_t)p);
        if (it == allocs.end() || it->second.dev >= 0)
            return ret(cudaErrorInvalidValue);
    }
    for (int d = 0; d < n_devices(); ++d) /* queued copies may still read it */
        drain_device(d);
    {
        std::lock_guard<std::mutex> g(mem_mu);
        allocs.erase((uintptr_t)p);
    }
    free(p);
    return cudaSuccess;
}

namespace
{

/* What CUDA checks of a copy: the device side of each end lies in one allocation. */
cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, int *dev)
{
    *dev = current_dev;
    if (n == 0)
        return cudaSuccess;
    const bool dst_dev = is_device(dst, n, -1), src_dev = is_device(src, n, -1);
    switch (kind) {
    case cudaMemcpyHostToHost:
        return cudaSuccess;
    case cudaMemcpyHostToDevice:
        return dst_dev ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost:
        return src_dev ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice:
        return dst_dev && src_dev ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDefault:
        /* unified addressing: either end may be anything, but a device end must fit its allocation */
        if ((!dst_dev && is_device(dst, 0, -1)) || (!src_dev && is_device(src, 0, -1)))
            return cudaErrorInvalidValue;
        return cudaSuccess;
    }
    return cudaErrorInvalidValue;
}

} // namespace

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    if (sticky(current_dev) != cudaSuccess)
        return ret(sticky(current_dev));
    int dev;
    cudaError_t e = check_copy(dst, src, n, kind, &dev);
    if (e != cudaSuccess)
        return ret(e);
    drain_null(dev);
    if (n > 0)
        memcpy(dst, src, n);
    return ret(sticky(dev));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s)
{
    const int dev = s != nullptr ? s->dev : current_dev;
    if (sticky(dev) != cudaSuccess)
        return ret(sticky(dev));
    int unused;
    cudaError_t e = check_copy(dst, src, n, kind, &unused);
    if (e != cudaSuccess)
        return ret(e);
    if (n == 0)
        return cudaSuccess;
    sgc_emu_stream *st = target(s, dev);
    const bool src_host = !is_device(src, n, -1), dst_host = !is_device(dst, n, -1);
    if (src_host && !is_pinned(src)) {
        /* from pageable memory: CUDA stages the bytes before returning, the copy itself is queued */
        auto bytes = std::make_shared<std::vector<unsigned char>>((const unsigned char *)src, (const unsigned char *)src + n);
        enqueue(st, [dst, bytes]() { memcpy(dst, bytes->data(), bytes->size()); });
        return cudaSuccess;
    }
    uint64_t t = enqueue(st, [dst, src, n]() { memcpy(dst, src, n); });
    if (dst_host && !is_pinned(dst)) { /* into pageable memory: returns once the copy is done */
        wait_for(st, t);
        return ret(sticky(dev));
    }
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
    if (sticky(current_dev) != cudaSuccess)
        return ret(sticky(current_dev));
    if (n > 0 && !is_device(p, n, -1))
        return ret(cudaErrorInvalidValue);
    drain_device(current_dev);
    memset(p, v, n);
    return cudaSuccess;
}

/* ---- streams and events ---- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = nullptr;
    if (sticky(current_dev) != cudaSuccess)
        return ret(sticky(current_dev));
    sgc_emu_stream *st = stream_new(current_dev);
    device_t &d = dev_state(current_dev);
    std::lock_guard<std::mutex> g(d.mu);
    d.streams.push_back(st);
    *s = st;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (s == nullptr)
        return ret(cudaErrorInvalidResourceHandle);
    {
        device_t &d = dev_state(s->dev);
        std::lock_guard<std::mutex> g(d.mu);
        for (size_t i = 0; i < d.streams.size(); ++i)
            if (d.streams[i] == s) {
                d.streams.erase(d.streams.begin() + (long)i);
                break;
            }
    }
    {
        std::lock_guard<std::mutex> lk(s->mu);
        s->stop = true; /* the thread finishes the queued work first */
        s->work_cv.notify_one();
    }
    s->th.join();
    const int dev = s->dev;
    delete s;
    return ret(sticky(dev));
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    const int dev = s != nullptr ? s->dev : current_dev;
    drain(target(s, dev));
    return ret(sticky(dev));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = nullptr;
    if (sticky(current_dev) != cudaSuccess)
        return ret(sticky(current_dev));
    *e = new sgc_emu_event{current_dev, std::make_shared<event_state_t>()};
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (e == nullptr)
        return ret(cudaErrorInvalidResourceHandle);
    delete e; /* a queued record keeps the state alive */
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (e == nullptr)
        return ret(cudaErrorInvalidResourceHandle);
    const int dev = s != nullptr ? s->dev : current_dev;
    if (sticky(dev) != cudaSuccess)
        return ret(sticky(dev));
    std::shared_ptr<event_state_t> st = e->st;
    uint64_t gen;
    {
        std::lock_guard<std::mutex> lk(st->mu);
        gen = ++st->recorded;
    }
    enqueue(
        target(s, dev),
        [st, gen]() {
            std::lock_guard<std::mutex> lk(st->mu);
            if (gen > st->reached)
                st->reached = gen;
            st->cv.notify_all();
        },
        true);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (e == nullptr)
        return ret(cudaErrorInvalidResourceHandle);
    std::shared_ptr<event_state_t> st = e->st;
    {
        std::unique_lock<std::mutex> lk(st->mu);
        const uint64_t want = st->recorded; /* the last record made before this call */
        st->cv.wait(lk, [&st, want] { return st->reached >= want; });
    }
    return ret(sticky(e->dev));
}

/* ---- errors ---- */

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
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
    case cudaErrorInvalidResourceHandle:
        return "invalid resource handle";
    case cudaErrorNotReady:
        return "device not ready";
    case cudaErrorIllegalAddress:
        return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources:
        return "too many resources requested for launch";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure";
    }
    return "unknown error";
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
        return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
        return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
        return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
        return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources:
        return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure:
        return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

/* ---- cuBLAS ---- */

struct sgc_emu_blas {
    int dev;
    cudaStream_t stream;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = nullptr;
    if (sticky(current_dev) != cudaSuccess)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *h = new sgc_emu_blas{current_dev, nullptr};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    if (h == nullptr)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    drain_device(h->dev); /* cuBLAS synchronises the device here */
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
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
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

void gemm1(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const __half *A, int lda, const __half *B,
           int ldb, float beta, void *C, cudaDataType_t ct, int ldc)
{
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
                /* eight partial sums (fp32 accumulation in another order, as cuBLAS's own): the
                 * compiler vectorises them, a single chain it cannot reorder */
                float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                int l = 0;
                for (; l + 8 <= k; l += 8)
                    for (int u = 0; u < 8; ++u)
                        part[u] += x[l + u] * y[l + u];
                float acc = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
                for (; l < k; ++l)
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

/* bytes from X to the last element a column-major rows x cols operand with leading dimension ld
 * reads, plus that element (0 for an empty operand) */
uint64_t extent(int rows, int cols, int ld, size_t elsize)
{
    if (rows == 0 || cols == 0)
        return 0;
    return ((uint64_t)(rows - 1) + (uint64_t)(cols - 1) * (uint64_t)ld + 1) * elsize;
}

/* Where a GEMM's operands are not all device memory of the handle's GPU, the GEMM faults when it
 * runs, as on a GPU: returns the reason, or an empty string. */
std::string operands_fault(int dev, const void *A, uint64_t na, const void *B, uint64_t nb, const void *C, uint64_t nc)
{
    const void *p[3] = {A, B, C};
    const uint64_t len[3] = {na, nb, nc};
    const char *names[3] = {"A", "B", "C"};
    for (int i = 0; i < 3; ++i)
        if (len[i] > 0 && !is_device(p[i], (size_t)len[i], dev)) {
            char why[160];
            snprintf(why, sizeof(why), "operand %s (%p, %llu bytes) is not inside device memory of this GPU", names[i], p[i],
                     (unsigned long long)len[i]);
            return why;
        }
    return std::string();
}

cublasStatus_t queue_gemm(cublasHandle_t h, const char *what, const std::string &fault, std::function<void()> fn)
{
    const int dev = h->dev;
    if (sticky(dev) != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    sgc_emu_stream *s = target(h->stream, dev);
    if (!fault.empty()) {
        std::string why = std::string(what) + ": " + fault;
        enqueue(s, [dev, why]() { set_sticky(dev, cudaErrorIllegalAddress, why.c_str()); });
    } else {
        enqueue(s, std::move(fn));
    }
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
    const float al = *(const float *)alpha, be = *(const float *)beta; /* host pointer mode: read now */
    const size_t csz = ct == CUDA_R_32F ? 4 : 2;
    const std::string fault =
        operands_fault(h->dev, A, ta == CUBLAS_OP_N ? extent(m, k, lda, 2) : extent(k, m, lda, 2), B,
                       tb == CUBLAS_OP_N ? extent(k, n, ldb, 2) : extent(n, k, ldb, 2), C, extent(m, n, ldc, csz));
    return queue_gemm(h, "cublasGemmEx", fault,
                      [=]() { gemm1(ta, tb, m, n, k, al, (const __half *)A, lda, (const __half *)B, ldb, be, C, ct, ldc); });
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
    if (batch < 0 || sa < 0 || sb < 0 || sc < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    const size_t csz = ct == CUDA_R_32F ? 4 : 2;
    const uint64_t ea = ta == CUBLAS_OP_N ? extent(m, k, lda, 2) : extent(k, m, lda, 2);
    const uint64_t eb = tb == CUBLAS_OP_N ? extent(k, n, ldb, 2) : extent(n, k, ldb, 2);
    const uint64_t ec = extent(m, n, ldc, csz);
    const uint64_t last = batch > 0 ? (uint64_t)(batch - 1) : 0;
    const std::string fault =
        batch == 0 ? std::string()
                   : operands_fault(h->dev, A, ea == 0 ? 0 : ea + last * (uint64_t)sa * 2, B,
                                    eb == 0 ? 0 : eb + last * (uint64_t)sb * 2, C, ec == 0 ? 0 : ec + last * (uint64_t)sc * csz);
    return queue_gemm(h, "cublasGemmStridedBatchedEx", fault, [=]() {
        for (int b = 0; b < batch; ++b)
            gemm1(ta, tb, m, n, k, al, (const __half *)A + sa * b, lda, (const __half *)B + sb * b, ldb, be,
                  (char *)C + (size_t)(sc * b) * csz, ct, ldc);
    });
}
