/*
 * team.h -- idle worker threads lending a hand to the one running a batch (sg_par.h).
 *
 * The worker that takes a batch leads it: it opens a session on its board and runs the batch's
 * steps through `par`; workers that find nothing queued join an open session and take tasks of
 * each step until the session closes (or until `*leave` is set). A session's tasks are claimed
 * through one atomic word (generation << 32 | next task), so a helper can never run a task of a
 * step that has finished, and a step ends only when every task it handed out has returned.
 */
#ifndef SG_LOCAL_TEAM_H
#define SG_LOCAL_TEAM_H

#include "sg_par.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct st_sg_team_t {
    sg_par_t par; /* par.run is the lead's entry; par.threads is set per session */
    _Atomic uint64_t word;
    struct {
        sg_par_task_fn fn;
        void *arg;
        _Atomic size_t n;
    } step[2]; /* the current step and the one before, by generation parity */
    _Atomic size_t done;
    _Atomic int open;         /* a session runs: idle workers may join */
    _Atomic unsigned lead;    /* the lead worker's index (helpers' slots count from it) */
    _Atomic unsigned members; /* helpers inside sg_team_help() */
    _Atomic uint64_t sessions, helped_tasks, tasks;
    _Atomic uint64_t helper_ns; /* time helpers spent taking and running tasks */
} sg_team_t;

/** `workers` is the pool's size: slots are numbered 0 .. workers-1. */
void sg_team_init(sg_team_t *t, unsigned workers);
/** The lead (board owner): opens a session expecting about `threads` threads (itself included). */
void sg_team_open(sg_team_t *t, unsigned lead, unsigned threads);
void sg_team_close(sg_team_t *t);
static inline int sg_team_is_open(sg_team_t *t)
{
    return atomic_load_explicit(&t->open, memory_order_acquire);
}
/**
 * An idle worker: takes tasks until the session closes or `*leave` becomes non-zero. Returns the
 * number of tasks it ran.
 */
size_t sg_team_help(sg_team_t *t, unsigned self, const _Atomic int *leave);

#endif
