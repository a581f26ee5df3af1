/*
 * Unit tests: references on configuration generations (gateway/core/gen.c and gen.h's inline
 * pair): taking and releasing (the last release hands the generation to its `bury`, once), the
 * server's current one, a loop's refresh, the lookup of a route by name and the walk over the
 * routes of every live generation that the admission pumps run. Generations are made by hand
 * here (what gen.c reads of them); building them is build.c's, tested by test_build.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen.h"
#include "runtime.h"
#include "route.h"

#define MAX_GENS 12

/* A generation of `n` routes named by `names` over the cores `cores`, not yet on the live list. */
typedef struct {
    sg_gen_t gen;
    sg_config_t cfg;
    sg_backend_conf_t bconf[3];
    sg_route_t routes[3];
} test_gen_t;

static sg_server_t server;
static test_gen_t gens[MAX_GENS];
static sg_route_core_t cores[8];
static sg_gen_t *buried[MAX_GENS + 4];
static size_t n_buried;

static void on_bury(sg_gen_t *g)
{
    assert_true(n_buried < sizeof(buried) / sizeof(buried[0]));
    assert_int_equal(atomic_load(&g->refs), 0);
    buried[n_buried++] = g;
}

static sg_gen_t *make_gen(int i, uint32_t refs, const char *const *names, const int *core_of, size_t n)
{
    test_gen_t *t = &gens[i];
    memset(t, 0, sizeof(*t));
    for (size_t k = 0; k < n; ++k) {
        t->bconf[k].name = (char *)names[k];
        t->routes[k].conf = &t->bconf[k];
        t->routes[k].core = &cores[core_of[k]];
        t->routes[k].gen = &t->gen;
        t->routes[k].index = (int)k;
    }
    t->cfg.backends = t->bconf;
    t->cfg.n_backends = n;
    atomic_init(&t->gen.refs, refs);
    t->gen.id = (uint64_t)i + 1;
    t->gen.server = &server;
    t->gen.cfg = &t->cfg;
    t->gen.routes = t->routes;
    t->gen.n_routes = n;
    t->gen.bury = on_bury;
    return &t->gen;
}

/* Puts `g` on the server's live list (newest first), as publishing does; `current` makes it the
 * server's current generation too, and its routes' cores the ones the current one serves. */
static void go_live(sg_gen_t *g, int current)
{
    g->published = 1;
    g->live_next = server.live;
    if (server.live != NULL)
        server.live->live_prev = g;
    server.live = g;
    atomic_fetch_add(&server.n_live, 1);
    if (!current)
        return;
    for (size_t i = 0; server.gen != NULL && i < server.gen->n_routes; ++i)
        atomic_store(&server.gen->routes[i].core->in_current, 0);
    for (size_t i = 0; i < g->n_routes; ++i)
        atomic_store(&g->routes[i].core->in_current, 1);
    server.gen = g;
    atomic_store(&server.gen_now, g);
}

static int setup(void **state)
{
    (void)state;
    memset(&server, 0, sizeof(server));
    memset(cores, 0, sizeof(cores));
    pthread_mutex_init(&server.gen_mutex, NULL);
    n_buried = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    pthread_mutex_destroy(&server.gen_mutex);
    return 0;
}

static void test_ref_and_release(void **state)
{
    (void)state;
    static const char *const names[] = {"a"};
    static const int core_of[] = {0};
    sg_gen_t *g = make_gen(0, 1, names, core_of, 1);
    assert_ptr_equal(sg_gen_ref(g), g);
    assert_ptr_equal(sg_gen_ref(g), g);
    assert_int_equal(atomic_load(&g->refs), 3);
    sg_gen_release(g);
    sg_gen_release(g);
    assert_int_equal(n_buried, 0); /* not the last one */
    assert_int_equal(atomic_load(&g->refs), 1);
    sg_gen_release(g);
    assert_int_equal(n_buried, 1); /* the last one: handed to its bury, once */
    assert_ptr_equal(buried[0], g);
    /* NULL is no generation; a generation without bury (a test's own) is left alone */
    assert_null(sg_gen_ref(NULL));
    sg_gen_release(NULL);
    sg_gen_t *h = make_gen(1, 1, names, core_of, 1);
    h->bury = NULL;
    sg_gen_release(h);
    assert_int_equal(atomic_load(&h->refs), 0);
    assert_int_equal(n_buried, 1);
}

/* The server's current generation, referenced; none before the first publish and after exit. */
static void test_acquire(void **state)
{
    (void)state;
    assert_null(sg_gen_acquire(&server));
    static const char *const names[] = {"a"};
    static const int core_of[] = {0};
    sg_gen_t *g = make_gen(0, 1, names, core_of, 1);
    go_live(g, 1);
    assert_ptr_equal(sg_gen_acquire(&server), g);
    assert_int_equal(atomic_load(&g->refs), 2);
    assert_int_equal(sg_gen_live(&server), 1);
    sg_gen_release(g);
    assert_int_equal(atomic_load(&g->refs), 1);
    assert_int_equal(n_buried, 0);
}

/* A loop takes a newer generation at its next refresh and lets go of its old one (the last
 * reference on it: buried); while nothing newer is published, a refresh changes nothing. */
static void test_loop_refresh(void **state)
{
    (void)state;
    static const char *const names[] = {"a"};
    static const int core_of[] = {0};
    sg_gen_t *g1 = make_gen(0, 1, names, core_of, 1);
    go_live(g1, 1);
    sg_loop_t loop;
    memset(&loop, 0, sizeof(loop));
    loop.server = &server;
    sg_loop_refresh_gen(&loop); /* the first: the loop held none */
    assert_ptr_equal(loop.gen, g1);
    assert_int_equal(atomic_load(&g1->refs), 2);
    sg_loop_refresh_gen(&loop); /* nothing newer: no reference taken or dropped */
    assert_ptr_equal(loop.gen, g1);
    assert_int_equal(atomic_load(&g1->refs), 2);

    sg_gen_t *g2 = make_gen(1, 1, names, core_of, 1);
    go_live(g2, 1);
    sg_gen_release(g1); /* the server's reference, as publishing g2 does */
    assert_int_equal(n_buried, 0);
    sg_gen_t *request = sg_gen_ref(loop.gen); /* a request still running on g1 */
    sg_loop_refresh_gen(&loop);
    assert_ptr_equal(loop.gen, g2);
    assert_int_equal(atomic_load(&g2->refs), 2);
    assert_int_equal(atomic_load(&g1->refs), 1);
    assert_int_equal(n_buried, 0); /* the request keeps it */
    sg_gen_release(request);
    assert_int_equal(n_buried, 1);
    assert_ptr_equal(buried[0], g1);
    sg_gen_release(loop.gen);
}

/* A route by name and length (not a prefix, not a longer name), NULL when none. */
static void test_route_by_name(void **state)
{
    (void)state;
    static const char *const names[] = {"wiki", "wiki2", "web"};
    static const int core_of[] = {0, 1, 2};
    sg_gen_t *g = make_gen(0, 1, names, core_of, 3);
    assert_ptr_equal(sg_gen_route(g, "wiki", 4), &g->routes[0]);
    assert_ptr_equal(sg_gen_route(g, "wiki2", 5), &g->routes[1]);
    assert_ptr_equal(sg_gen_route(g, "web", 3), &g->routes[2]);
    assert_ptr_equal(sg_gen_route(g, "wiki2xyz", 4), &g->routes[0]); /* `len` bytes of the name */
    assert_null(sg_gen_route(g, "wik", 3));
    assert_null(sg_gen_route(g, "wiki22", 6));
    assert_null(sg_gen_route(g, "", 0));
}

/* ---- the walk the admission pumps run ---- */

typedef struct {
    sg_route_t *seen[32];
    size_t n;
} walk_t;

static walk_t walk;

static void on_route(sg_route_t *r, sg_loop_t *l)
{
    (void)l;
    assert_true(walk.n < 32);
    walk.seen[walk.n++] = r;
}

static int walked(const sg_route_t *r)
{
    int times = 0;
    for (size_t i = 0; i < walk.n; ++i)
        times += walk.seen[i] == r;
    return times;
}

/* One generation live: every route of the loop's, once; a loop without one walks nothing. */
static void test_pumped_routes_one_generation(void **state)
{
    (void)state;
    static const char *const names[] = {"a", "b"};
    static const int core_of[] = {0, 1};
    sg_gen_t *g = make_gen(0, 1, names, core_of, 2);
    go_live(g, 1);
    sg_loop_t loop;
    memset(&loop, 0, sizeof(loop));
    loop.server = &server;
    walk.n = 0;
    sg_gen_each_pumped_route(&loop, on_route);
    assert_int_equal(walk.n, 0);
    loop.gen = g;
    sg_gen_each_pumped_route(&loop, on_route);
    assert_int_equal(walk.n, 2);
    assert_int_equal(walked(&g->routes[0]), 1);
    assert_int_equal(walked(&g->routes[1]), 1);
}

/* After a reload, with the old generation still draining: the current generation's routes, and
 * the old one's routes whose core the current one no longer serves (removed or recreated), each
 * once; a kept core is pumped through its current route only. A generation whose last reference
 * is gone (listed until the reload thread disposes of it) is skipped, and the walk's references
 * are all given back. */
static void test_pumped_routes_while_draining(void **state)
{
    (void)state;
    static const char *const old_names[] = {"kept", "recreated", "removed"};
    static const int old_cores[] = {0, 1, 2};
    static const char *const new_names[] = {"kept", "recreated"};
    static const int new_cores[] = {0, 3};
    static const char *const dead_names[] = {"dead"};
    static const int dead_cores[] = {4};
    sg_gen_t *dead = make_gen(0, 0, dead_names, dead_cores, 1); /* released, not yet disposed */
    go_live(dead, 0);
    sg_gen_t *old = make_gen(1, 1, old_names, old_cores, 3);
    go_live(old, 1);
    sg_gen_t *cur = make_gen(2, 1, new_names, new_cores, 2);
    go_live(cur, 1);
    assert_int_equal(sg_gen_live(&server), 3);
    sg_loop_t loop;
    memset(&loop, 0, sizeof(loop));
    loop.server = &server;
    loop.gen = cur;
    walk.n = 0;
    sg_gen_each_pumped_route(&loop, on_route);
    assert_int_equal(walk.n, 4);
    assert_int_equal(walked(&cur->routes[0]), 1);
    assert_int_equal(walked(&cur->routes[1]), 1);
    assert_int_equal(walked(&old->routes[0]), 0); /* its core is pumped through cur's route */
    assert_int_equal(walked(&old->routes[1]), 1); /* another core than cur's "recreated" */
    assert_int_equal(walked(&old->routes[2]), 1);
    assert_int_equal(walked(&dead->routes[0]), 0);
    assert_int_equal(atomic_load(&old->refs), 1);
    assert_int_equal(atomic_load(&cur->refs), 1);
    assert_int_equal(atomic_load(&dead->refs), 0);
    assert_int_equal(n_buried, 0); /* the walk never buries: it let go of references it took */
}

/* More live generations than the walk keeps on its stack (8): all of them walked all the same. */
static void test_pumped_routes_many_generations(void **state)
{
    (void)state;
    static const char *const names[] = {"r"};
    int core_of[1];
    for (int i = 0; i < 10; ++i) {
        core_of[0] = i % 2 == 0 ? 0 : 1; /* cores 0 and 1 alternate; the last one (core 1) is current */
        go_live(make_gen(i, 1, names, core_of, 1), 1);
    }
    assert_int_equal(sg_gen_live(&server), 10);
    sg_loop_t loop;
    memset(&loop, 0, sizeof(loop));
    loop.server = &server;
    loop.gen = &gens[9].gen;
    walk.n = 0;
    sg_gen_each_pumped_route(&loop, on_route);
    assert_int_equal(walk.n, 6); /* the current one and the five of core 0 */
    for (int i = 0; i < 10; ++i) {
        assert_int_equal(walked(&gens[i].routes[0]), i == 9 || i % 2 == 0);
        assert_int_equal(atomic_load(&gens[i].gen.refs), 1);
    }
    assert_int_equal(n_buried, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ref_and_release, setup, teardown),
        cmocka_unit_test_setup_teardown(test_acquire, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loop_refresh, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_by_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pumped_routes_one_generation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pumped_routes_while_draining, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pumped_routes_many_generations, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
