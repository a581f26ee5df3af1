/*
 * sg_par.h -- fork-join parallelism inside one batch, as the encoder and the flat search see it.
 *
 * The owner of the threads (the local backend's worker pool, backends/local/team.c) implements
 * `run`; the computation only splits its work into independent tasks. A NULL sg_par, or one of
 * width 1, means "run the tasks in the calling thread", and gives the same results.
 */
#ifndef SG_PAR_H
#define SG_PAR_H

#include <stddef.h>

typedef void (*sg_par_task_fn)(void *arg, size_t task, unsigned slot);

typedef struct st_sg_par_t sg_par_t;
struct st_sg_par_t {
    /**
     * Calls fn(arg, i, slot) once for every i < n, on up to `threads` threads including the
     * caller, and returns when every call has returned. `slot` < `slots` names the calling thread
     * (0 is the caller), so a task may use per-slot scratch memory.
     */
    void (*run)(sg_par_t *p, size_t n, sg_par_task_fn fn, void *arg);
    unsigned threads; /* threads expected to take part (split work into about this many pieces) */
    unsigned slots;   /* an upper bound on `slot` + 1 */
};

/** Runs the tasks with `p`, or one after another in this thread when `p` is NULL. */
static inline void sg_par_run(sg_par_t *p, size_t n, sg_par_task_fn fn, void *arg)
{
    if (p != NULL && p->threads > 1 && n > 1) {
        p->run(p, n, fn, arg);
        return;
    }
    for (size_t i = 0; i < n; ++i)
        fn(arg, i, 0);
}

static inline unsigned sg_par_threads(const sg_par_t *p)
{
    return p != NULL && p->threads > 1 ? p->threads : 1;
}

#endif
