/*
 * timer.c -- the binary heap behind timer.h: O(log n) arm, disarm and fire; each timer knows its
 * position, so disarming needs no search.
 */
#include "timer.h"
#include "common.h"

#include <stdlib.h>

static void heap_swap(sg_timers_t *q, size_t a, size_t b)
{
    sg_timer_t *t = q->heap[a];
    q->heap[a] = q->heap[b];
    q->heap[b] = t;
    q->heap[a]->_heap_index = a + 1;
    q->heap[b]->_heap_index = b + 1;
}

static void heap_up(sg_timers_t *q, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (q->heap[p]->at_ms <= q->heap[i]->at_ms)
            break;
        heap_swap(q, i, p);
        i = p;
    }
}

static void heap_down(sg_timers_t *q, size_t i)
{
    for (;;) {
        size_t c = 2 * i + 1, m = i;
        if (c < q->len && q->heap[c]->at_ms < q->heap[m]->at_ms)
            m = c;
        if (c + 1 < q->len && q->heap[c + 1]->at_ms < q->heap[m]->at_ms)
            m = c + 1;
        if (m == i)
            break;
        heap_swap(q, i, m);
        i = m;
    }
}

void sg_timer_stop(sg_timers_t *q, sg_timer_t *t)
{
    if (t->_heap_index == 0)
        return;
    size_t i = t->_heap_index - 1;
    t->_heap_index = 0;
    --q->len;
    if (i == q->len)
        return;
    q->heap[i] = q->heap[q->len];
    q->heap[i]->_heap_index = i + 1;
    heap_down(q, i);
    heap_up(q, i);
}

void sg_timer_start(sg_timers_t *q, sg_timer_t *t, uint64_t at_ms, sg_timer_cb cb)
{
    sg_timer_stop(q, t);
    t->at_ms = at_ms;
    t->cb = cb;
    if (q->len == q->cap) {
        q->cap = q->cap != 0 ? q->cap * 2 : 64;
        q->heap = sg_mem_realloc(q->heap, q->cap * sizeof(*q->heap));
    }
    q->heap[q->len] = t;
    t->_heap_index = ++q->len;
    heap_up(q, q->len - 1);
}

int32_t sg_timers_next_wait(const sg_timers_t *q, int32_t max)
{
    if (q->len == 0)
        return max;
    uint64_t now = sg_now_ms(), at = q->heap[0]->at_ms;
    if (at <= now)
        return 0;
    return at - now < (uint64_t)max ? (int32_t)(at - now) : max;
}

void sg_timers_run(sg_timers_t *q)
{
    uint64_t now = sg_now_ms();
    while (q->len > 0 && q->heap[0]->at_ms <= now) {
        sg_timer_t *t = q->heap[0];
        sg_timer_stop(q, t);
        t->cb(t);
    }
}

void sg_timers_dispose(sg_timers_t *q)
{
    free(q->heap);
    q->heap = NULL;
    q->len = q->cap = 0;
}
