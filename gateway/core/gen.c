/*
 * gen.c -- references on configuration generations (gen.h): taking, releasing, the loops' refresh
 * and the walk over the live ones. Building, publishing and disposing of them is the assembly's
 * (gateway/build.c), which wires every room; a generation's last release hands it to what its
 * builder set (`bury`: the reload thread), so nothing here calls up.
 */
#include "gen.h"
#include "runtime.h"
#include "route.h"

#include <stdlib.h>

/* ---- references ---- */

sg_gen_t *sg_gen_acquire(sg_server_t *s)
{
    pthread_mutex_lock(&s->gen_mutex);
    sg_gen_t *g = sg_gen_ref(s->gen);
    pthread_mutex_unlock(&s->gen_mutex);
    return g;
}

void sg_loop_refresh_gen(sg_loop_t *l)
{
    sg_server_t *s = l->server;
    if (atomic_load_explicit(&s->gen_now, memory_order_acquire) == l->gen)
        return; /* the loop's reference keeps its generation's address from being reused */
    sg_gen_t *old = l->gen;
    l->gen = sg_gen_acquire(s);
    sg_gen_release(old);
}

/* A reference on a generation of the live list, unless its last one is gone (it stays listed until
 * the reload thread disposes of it). Caller holds the server's gen_mutex. */
static int ref_live(sg_gen_t *g)
{
    uint32_t n = atomic_load_explicit(&g->refs, memory_order_relaxed);
    while (n != 0)
        if (atomic_compare_exchange_weak_explicit(&g->refs, &n, n + 1, memory_order_acq_rel, memory_order_relaxed))
            return 1;
    return 0;
}

uint32_t sg_gen_live(sg_server_t *s)
{
    return atomic_load(&s->n_live);
}

sg_route_t *sg_gen_route(const sg_gen_t *g, const char *name, size_t len)
{
    int i = sg_config_find_backend(g->cfg, name, len);
    return i >= 0 ? &g->routes[i] : NULL;
}

void sg_gen_each_pumped_route(sg_loop_t *l, void (*fn)(sg_route_t *, sg_loop_t *))
{
    sg_server_t *s = l->server;
    if (atomic_load(&s->n_live) <= 1) { /* no reload draining: the loop's generation is the only one */
        for (size_t i = 0; l->gen != NULL && i < l->gen->n_routes; ++i)
            fn(&l->gen->routes[i], l);
        return;
    }
    sg_gen_t *few[8], **gens = few, *cur;
    size_t n = 0;
    pthread_mutex_lock(&s->gen_mutex);
    size_t live = atomic_load(&s->n_live);
    if (live > sizeof(few) / sizeof(few[0]))
        gens = sg_mem_alloc(live * sizeof(*gens));
    for (sg_gen_t *g = s->live; g != NULL && n < live; g = g->live_next)
        if (ref_live(g))
            gens[n++] = g;
    cur = s->gen;
    pthread_mutex_unlock(&s->gen_mutex);
    for (size_t k = 0; k < n; ++k)
        for (size_t i = 0; i < gens[k]->n_routes; ++i) {
            sg_route_t *r = &gens[k]->routes[i];
            /* a core the current generation serves is pumped through its current route */
            if (gens[k] == cur || !atomic_load_explicit(&r->core->in_current, memory_order_relaxed))
                fn(r, l);
        }
    for (size_t k = 0; k < n; ++k)
        sg_gen_release(gens[k]);
    if (gens != few)
        free(gens);
}
