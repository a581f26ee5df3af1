/*
 * timer.h -- timers of any duration for one event loop: a binary heap ordered by deadline. h2o
 * 2.2.5 only has fixed-duration timeout lists, so the gateway's loops (and the Redis connection
 * each of them drives) keep their deadlines here, and pass sg_timers_next_wait() to
 * h2o_evloop_run() as its longest wait.
 *
 * Not thread-safe: a heap belongs to one loop thread, and so do the timers armed on it.
 */
#ifndef SG_LIB_TIMER_H
#define SG_LIB_TIMER_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_sg_timer_t sg_timer_t;
typedef void (*sg_timer_cb)(sg_timer_t *t);
/** A timer; embed it in the object it wakes (H2O_STRUCT_FROM_MEMBER finds the object back). */
struct st_sg_timer_t {
    uint64_t at_ms;
    size_t _heap_index; /* 0 = not armed, else 1-based position */
    sg_timer_cb cb;
};

/** The timers of one loop (zero-initialised = empty). */
typedef struct st_sg_timers_t {
    sg_timer_t **heap;
    size_t len, cap;
} sg_timers_t;

/** Arms (or re-arms) `t` to fire at `at_ms` (sg_now_ms() clock). */
void sg_timer_start(sg_timers_t *q, sg_timer_t *t, uint64_t at_ms, sg_timer_cb cb);
/** Disarms `t` (no-op when not armed). */
void sg_timer_stop(sg_timers_t *q, sg_timer_t *t);
static inline int sg_timer_is_armed(const sg_timer_t *t)
{
    return t->_heap_index != 0;
}
/** Milliseconds until the next timer is due, at most `max` (0 when one is due now). */
int32_t sg_timers_next_wait(const sg_timers_t *q, int32_t max);
/** Fires every timer that is due, each disarmed before its callback runs (it may re-arm itself). */
void sg_timers_run(sg_timers_t *q);
/** Frees the heap (the timers themselves belong to their owners). */
void sg_timers_dispose(sg_timers_t *q);

#endif
