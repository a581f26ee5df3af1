/*
 * team.c -- idle workers helping the one running a batch (team.h).
 */
#include "team.h"

#include <sched.h>
#include <time.h>

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* whether the current step has a task left to claim */
static int has_task(sg_team_t *t)
{
    uint64_t v = atomic_load_explicit(&t->word, memory_order_acquire);
    uint32_t gen = (uint32_t)(v >> 32);
    return (size_t)(v & 0xffffffffu) < atomic_load_explicit(&t->step[gen & 1].n, memory_order_relaxed);
}

/* Claims and runs tasks of the current step until none is left; returns how many it ran. `self`
 * is the caller's worker index; its slot counts from the session's lead (slot 0). */
static size_t drain(sg_team_t *t, unsigned self)
{
    size_t ran = 0;
    for (;;) {
        uint64_t v = atomic_load_explicit(&t->word, memory_order_acquire);
        uint32_t gen = (uint32_t)(v >> 32);
        size_t idx = (size_t)(v & 0xffffffffu);
        size_t n = atomic_load_explicit(&t->step[gen & 1].n, memory_order_relaxed);
        if (idx >= n)
            return ran;
        if (!atomic_compare_exchange_weak_explicit(&t->word, &v, v + 1, memory_order_acq_rel, memory_order_relaxed))
            continue;
        /* the step (and its session) cannot end before this task does: its fields are stable */
        unsigned slot = (self + t->par.slots - atomic_load_explicit(&t->lead, memory_order_relaxed)) % t->par.slots;
        t->step[gen & 1].fn(t->step[gen & 1].arg, idx, slot);
        atomic_fetch_add_explicit(&t->done, 1, memory_order_release);
        ++ran;
    }
}

static void team_run(sg_par_t *p, size_t n, sg_par_task_fn fn, void *arg)
{
    sg_team_t *t = (sg_team_t *)p; /* par is the first member */
    uint32_t gen = (uint32_t)(atomic_load_explicit(&t->word, memory_order_relaxed) >> 32) + 1;
    t->step[gen & 1].fn = fn;
    t->step[gen & 1].arg = arg;
    atomic_store_explicit(&t->step[gen & 1].n, n, memory_order_relaxed);
    atomic_store_explicit(&t->done, 0, memory_order_relaxed);
    atomic_store_explicit(&t->word, (uint64_t)gen << 32, memory_order_release);
    drain(t, atomic_load_explicit(&t->lead, memory_order_relaxed));
    /* the last tasks run on helpers: spin while they finish, but give the core away if one of
     * them was preempted (a busy machine), rather than spin through its time slice */
    for (unsigned spins = 0; atomic_load_explicit(&t->done, memory_order_acquire) < n;) {
        if (++spins < 2048)
            relax();
        else
            sched_yield();
    }
    atomic_fetch_add_explicit(&t->tasks, n, memory_order_relaxed);
}

void sg_team_init(sg_team_t *t, unsigned workers)
{
    t->par.run = team_run;
    t->par.threads = 1;
    t->par.slots = workers > 0 ? workers : 1;
    atomic_init(&t->word, 0);
    for (int i = 0; i < 2; ++i) {
        t->step[i].fn = NULL;
        t->step[i].arg = NULL;
        atomic_init(&t->step[i].n, 0);
    }
    atomic_init(&t->done, 0);
    atomic_init(&t->open, 0);
    atomic_init(&t->lead, 0);
    atomic_init(&t->members, 0);
    atomic_init(&t->sessions, 0);
    atomic_init(&t->helped_tasks, 0);
    atomic_init(&t->tasks, 0);
    atomic_init(&t->helper_ns, 0);
}

void sg_team_open(sg_team_t *t, unsigned lead, unsigned threads)
{
    t->par.threads = threads < t->par.slots ? threads : t->par.slots;
    atomic_store_explicit(&t->lead, lead, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->sessions, 1, memory_order_relaxed);
    atomic_store_explicit(&t->open, 1, memory_order_release);
}

void sg_team_close(sg_team_t *t)
{
    atomic_store_explicit(&t->open, 0, memory_order_release);
}

size_t sg_team_help(sg_team_t *t, unsigned self, const _Atomic int *leave)
{
    size_t ran = 0;
    unsigned idle = 0;
    uint64_t busy = 0;
    atomic_fetch_add_explicit(&t->members, 1, memory_order_relaxed);
    while (atomic_load_explicit(&t->open, memory_order_acquire) && !atomic_load_explicit(leave, memory_order_relaxed)) {
        if (has_task(t)) {
            uint64_t t0 = now_ns();
            ran += drain(t, self);
            busy += now_ns() - t0;
            idle = 0;
            continue;
        }
        /* between steps the lead works alone (tokenising, pooling): spin briefly, then yield */
        if (++idle < 4096)
            relax();
        else
            sched_yield();
    }
    atomic_fetch_sub_explicit(&t->members, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->helped_tasks, ran, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->helper_ns, busy, memory_order_relaxed);
    return ran;
}
