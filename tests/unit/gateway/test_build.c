/*
 * Unit tests: the assembly (gateway/build.c) -- a configuration generation built from a config
 * file over the example plugin: its routes and everything wired to them, the --check message of
 * each way building fails (nothing left behind: the ASan run checks), which routes a rebuild
 * keeps (same instance key) or recreates (another config, a file it names changed, another
 * name, a destroyed instance), publishing (the current generation, the live list, what is
 * process-wide, the route info series) and disposing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include "assembly.h"
#include "clients.h"
#include "fusion_route.h"
#include "trace.h"

#define TWO_ROUTES "{\"log_level\":\"warn\",\"backends\":[" EX_ROUTE("a", "alpha") "," EX_ROUTE("b", "beta") "]}"

static sg_gen_t *buried[16];
static size_t n_buried;

/* A generation's last release: disposed at once, as when the reload thread is not running. */
static void bury(sg_gen_t *g)
{
    assert_true(n_buried < 16);
    buried[n_buried++] = g;
    sg__gen_dispose(g);
}

static const sg_gen_opts_t opts = {SG_PLUGIN_DIR, 0, NULL, bury};

/* Builds a generation of `json` over `prev`: NULL with the message in `err` when it fails. */
static sg_gen_t *build_opts(const char *json, const sg_gen_t *prev, const sg_gen_opts_t *o, char *err, size_t err_size)
{
    sg_config_t *cfg = asm_load(json);
    err[0] = '\0';
    return sg_gen_build(&asm_server, cfg, 1, prev, o, err, err_size);
}

static sg_gen_t *build(const char *json, const sg_gen_t *prev)
{
    char err[1400];
    sg_gen_t *g = build_opts(json, prev, &opts, err, sizeof(err));
    if (g == NULL)
        fail_msg("building failed: %s", err);
    return g;
}

static int setup(void **state)
{
    (void)state;
    asm_server_init(TWO_ROUTES);
    n_buried = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sg_trace_stop();
    asm_server_dispose();
    return 0;
}

static uint64_t instances_created(const char *route)
{
    char l[64];
    snprintf(l, sizeof(l), "backend=\"%s\"", route);
    return asm_counter("searchgate_backend_instances_created_total", l);
}

/* ---- building ---- */

/* Every route of the config, in config order, over its own plugin instance, with its cache
 * identity, instance key and provenance; the clients, budgets, fusion routes and MCP tools of the
 * same config; one reference, handed to `bury` by its release. */
static void test_build_routes(void **state)
{
    (void)state;
    sg_gen_t *g = build(
        "{\"clients\":{\"keys\":[{\"id\":\"k\",\"key_env\":\"SG_TEST_BUILD_KEY\"}]},"
        "\"backends\":[" EX_ROUTE(
            "a", "alpha") ","
                          "{\"name\":\"b\",\"plugin\":\"example\",\"config\":{\"documents\":[{\"id\":\"1\",\"contents\":\"beta\"}],"
                          "\"pages\":[{\"url\":\"http://x/\",\"contents\":\"page\"}]}},"
                          "{\"name\":\"f\",\"fusion\":{\"routes\":[\"a\",\"b\"],\"method\":\"rrf\",\"k\":60}}]}",
        NULL);
    assert_int_equal(atomic_load(&g->refs), 1);
    assert_int_equal(g->id, 1);
    assert_ptr_equal(g->server, &asm_server);
    assert_true(g->owns_cfg);
    assert_false(g->published);
    assert_int_equal(g->n_routes, 2);
    char plugin[256], key[1024];
    snprintf(plugin, sizeof(plugin), "%s/sg_example.so", SG_PLUGIN_DIR);
    for (size_t i = 0; i < 2; ++i) {
        sg_route_t *r = &g->routes[i];
        sg_route_core_t *k = r->core;
        const char *name = i == 0 ? "a" : "b";
        assert_string_equal(r->conf->name, name);
        assert_ptr_equal(r->conf, &g->cfg->backends[i]);
        assert_int_equal(r->index, (int)i);
        assert_ptr_equal(r->gen, g);
        assert_ptr_equal(sg_gen_route(g, name, 1), r);
        assert_string_equal(r->conf->plugin_path, plugin); /* plugin_dir/sg_<plugin>.so */
        assert_non_null(k->inst);
        assert_int_equal(atomic_load(&k->refs), 1);
        assert_string_equal(k->name, name);
        assert_int_equal(k->serves_access, i == 1); /* b has pages */
        const sg_backend_vtable *vt = k->plugin.vt;
        char ident[1024];
        snprintf(ident, sizeof(ident), "example|%s|%s|%s", name, vt->version, vt->identity(k->inst));
        assert_string_equal(k->identity, ident);
        snprintf(key, sizeof(key), "plugin %s\nbase %s\nconfig %s\nrerank null\nfile %s ", plugin, asm_dir, r->conf->config_json,
                 plugin);
        if (strncmp(k->key, key, strlen(key)) != 0)
            fail_msg("instance key \"%s\" does not start with \"%s\"", k->key, key);
        char header[256];
        snprintf(header, sizeof(header), "route=%s; type=plugin; plugin=example/%s; data=", name, vt->version);
        assert_int_equal(strncmp(r->prov.header, header, strlen(header)), 0);
        assert_int_equal(instances_created(name), 1);
    }
    assert_int_not_equal(g->routes[0].core->id, g->routes[1].core->id);
    assert_ptr_equal(sg_clients_config(g->clients), g->cfg);
    assert_non_null(g->budgets);
    assert_int_equal(sg_fusion_count(g->fusion), 1);
    assert_non_null(g->mcp); /* mcp.enabled (the start-up config's) is on */
    sg_gen_release(g);
    assert_int_equal(n_buried, 1);
    assert_ptr_equal(buried[0], g);
}

/* A plugin that does not load: its path and the loader's reason. */
static void test_error_plugin_missing(void **state)
{
    (void)state;
    char err[1400], want[1400];
    sg_gen_t *g = build_opts("{\"backends\":[" EX_ROUTE("a", "alpha") ",{\"name\":\"b\",\"plugin\":\"nosuch\"}]}", NULL, &opts, err,
                             sizeof(err));
    assert_null(g);
    snprintf(want, sizeof(want),
             "backend b: %s/sg_nosuch.so: cannot load: %s/sg_nosuch.so: cannot open shared object file: No such file or directory",
             SG_PLUGIN_DIR, SG_PLUGIN_DIR);
    assert_string_equal(err, want);
    assert_int_equal(n_buried, 0);               /* undone at once, never handed to bury */
    assert_int_equal(instances_created("a"), 0); /* nothing is created before every plugin loaded */
}

/* A plugin whose create() refuses its config: the route, the plugin's path and the plugin's own
 * message; the routes created before it are destroyed again. */
static void test_error_create(void **state)
{
    (void)state;
    char err[1400], want[1400];
    sg_gen_t *g = build_opts(
        "{\"backends\":[" EX_ROUTE("a", "alpha") ","
                                                 "{\"name\":\"b\",\"plugin\":\"example\",\"config\":{\"documents\":[]}}]}",
        NULL, &opts, err, sizeof(err));
    assert_null(g);
    snprintf(want, sizeof(want), "backend b (%s/sg_example.so): config.documents: needs at least one document, got []",
             SG_PLUGIN_DIR);
    assert_string_equal(err, want);
    assert_int_equal(instances_created("a"), 1);
    assert_int_equal(n_buried, 0);
}

/* A trace file that cannot be opened: "config PATH: " and the trace's own message; --check
 * (check_only) checks that it could be written instead of opening it. */
static void test_error_trace(void **state)
{
    (void)state;
    char err[1400], want[1400];
    const char *json = "{\"backends\":[{\"name\":\"a\",\"plugin\":\"example\",\"trace\":{\"path\":\"/nonexistent/dir/t.jsonl\"},"
                       "\"config\":{\"documents\":[{\"id\":\"1\",\"contents\":\"x\"}]}}]}";
    assert_null(build_opts(json, NULL, &opts, err, sizeof(err)));
    snprintf(want, sizeof(want),
             "config %s: backends[0].trace.path: cannot open /nonexistent/dir/t.jsonl: No such file or directory", asm_config);
    assert_string_equal(err, want);
    sg_gen_opts_t check = opts;
    check.check_only = 1;
    assert_null(build_opts(json, NULL, &check, err, sizeof(err)));
    snprintf(want, sizeof(want),
             "config %s: backends[0].trace.path: cannot write /nonexistent/dir/t.jsonl: No such file or directory", asm_config);
    assert_string_equal(err, want);
    /* a folder that exists: --check passes, and building opens the file */
    char ok[1024];
    snprintf(ok, sizeof(ok),
             "{\"backends\":[{\"name\":\"a\",\"plugin\":\"example\",\"trace\":{\"path\":\"%s/t.jsonl\"},"
             "\"config\":{\"documents\":[{\"id\":\"1\",\"contents\":\"x\"}]}}]}",
             asm_dir);
    sg_gen_t *g = build_opts(ok, NULL, &check, err, sizeof(err));
    assert_non_null(g);
    sg_gen_release(g);
    char path[128];
    snprintf(path, sizeof(path), "%s/t.jsonl", asm_dir);
    assert_int_equal(access(path, F_OK), -1); /* checked, not opened */
    g = build(ok, NULL);
    assert_int_equal(access(path, F_OK), 0);
    sg_gen_release(g);
}

/* ---- rebuilding: which routes keep their plugin instance ---- */

/* The same config again (re-indented): every core kept, no instance created. Another config for
 * route b: b gets a new instance, a keeps its own. */
static void test_rebuild_keeps_unchanged_routes(void **state)
{
    (void)state;
    sg_gen_t *g1 = build(TWO_ROUTES, NULL);
    sg_gen_t *g2 = build("{\"backends\": [\n  " EX_ROUTE("a", "alpha") ",\n  " EX_ROUTE("b", "beta") "\n]}", g1);
    assert_int_equal(g2->id, 2);
    assert_ptr_equal(g2->routes[0].core, g1->routes[0].core);
    assert_ptr_equal(g2->routes[1].core, g1->routes[1].core);
    assert_int_equal(atomic_load(&g1->routes[0].core->refs), 2);
    assert_ptr_not_equal(g2->routes[0].conf, g1->routes[0].conf); /* the route itself is the new config's */
    assert_int_equal(instances_created("a"), 1);
    assert_int_equal(instances_created("b"), 1);
    sg_gen_t *g3 = build("{\"backends\":[" EX_ROUTE("a", "alpha") "," EX_ROUTE("b", "gamma") "]}", g2);
    assert_int_equal(g3->id, 3);
    assert_ptr_equal(g3->routes[0].core, g1->routes[0].core);
    assert_ptr_not_equal(g3->routes[1].core, g1->routes[1].core);
    assert_int_equal(instances_created("a"), 1);
    assert_int_equal(instances_created("b"), 2);
    /* the older generations let go: the cores they shared with g3 live on in it */
    sg_gen_release(g1);
    sg_gen_release(g2);
    assert_int_equal(n_buried, 2);
    assert_int_equal(atomic_load(&g3->routes[0].core->refs), 1);
    assert_non_null(g3->routes[0].core->inst);
    sg_gen_release(g3);
}

/* The key's other parts: the order of the config's keys, the route's name, and the identity of
 * a file a string of the config names (an index rebuilt in place is loaded again). */
static void test_rebuild_recreates_changed_routes(void **state)
{
    (void)state;
    asm_write("data.txt", "one");
    const char *names_file = "{\"backends\":[" EX_ROUTE("a", "data.txt") "]}";
    sg_gen_t *g1 = build(names_file, NULL);
    assert_non_null(strstr(g1->routes[0].core->key, "/data.txt "));
    sg_gen_t *g2 = build(names_file, g1);
    assert_ptr_equal(g2->routes[0].core, g1->routes[0].core);
    /* the file changes (size and modification time) */
    asm_write("data.txt", "one more");
    char path[128];
    snprintf(path, sizeof(path), "%s/data.txt", asm_dir);
    struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
    sg_gen_t *g3 = build(names_file, g2);
    assert_ptr_not_equal(g3->routes[0].core, g2->routes[0].core);
    /* the same config object with its keys in another order */
    sg_gen_t *g4 =
        build("{\"backends\":[{\"name\":\"a\",\"plugin\":\"example\",\"config\":{\"documents\":[{\"contents\":\"data.txt\","
              "\"id\":\"data.txt\"}]}}]}",
              g3);
    assert_ptr_not_equal(g4->routes[0].core, g3->routes[0].core);
    /* the same config under another name: a route of that name is what a core is kept for */
    sg_gen_t *g5 =
        build("{\"backends\":[{\"name\":\"c\",\"plugin\":\"example\",\"config\":{\"documents\":[{\"contents\":\"data.txt\","
              "\"id\":\"data.txt\"}]}}]}",
              g4);
    assert_ptr_not_equal(g5->routes[0].core, g4->routes[0].core);
    assert_int_equal(instances_created("a"), 3);
    assert_int_equal(instances_created("c"), 1);
    sg_gen_release(g1);
    sg_gen_release(g2);
    sg_gen_release(g3);
    sg_gen_release(g4);
    sg_gen_release(g5);
    assert_int_equal(n_buried, 5);
}

/* ---- publishing and disposing ---- */

/* Publishing makes a generation the current one and applies what is process-wide; the previous
 * one stays live while a request holds it, its removed route's info series drops to 0, and it
 * leaves the live list when disposed. Unpublishing lets go of the current one. */
static void test_publish(void **state)
{
    (void)state;
    sg_gen_t *g1 = build("{\"log_level\":\"warn\",\"limits\":{\"max_response_bytes_inflight\":123456789},"
                         "\"backends\":[" EX_ROUTE("a", "alpha") "," EX_ROUTE("b", "beta") "]}",
                         NULL);
    sg_gen_publish(&asm_server, g1);
    assert_true(g1->published);
    assert_ptr_equal(asm_server.gen, g1);
    assert_ptr_equal(atomic_load(&asm_server.gen_now), g1);
    assert_ptr_equal(asm_server.live, g1);
    assert_int_equal(sg_gen_live(&asm_server), 1);
    assert_int_equal(atomic_load(&g1->refs), 1); /* the caller's reference is the server's now */
    assert_true(atomic_load(&g1->routes[0].core->in_current));
    assert_int_equal(sg_log_level, SG_LL_WARN);
    assert_int_equal(atomic_load(&asm_server.responses.limit), 123456789);
    assert_int_equal(asm_gauge("searchgate_config_generation", ""), 1);
    assert_int_equal(asm_gauge("searchgate_config_generations_live", ""), 1);
    sg_gauge_t *info_a = g1->routes[0].prov.info, *info_b = g1->routes[1].prov.info;
    assert_non_null(info_a);
    assert_int_equal(atomic_load(&info_a->v), 1);
    assert_int_equal(atomic_load(&info_b->v), 1);

    sg_gen_t *request = sg_gen_acquire(&asm_server); /* a request still running on g1 */
    asm_server.log_level_override = SG_LL_DEBUG;     /* --log-level wins over the config's */
    sg_gen_t *g2 = build("{\"log_level\":\"error\",\"backends\":[" EX_ROUTE("a", "alpha") "]}", g1);
    sg_gen_publish(&asm_server, g2);
    assert_ptr_equal(asm_server.gen, g2);
    assert_ptr_equal(asm_server.live, g2);
    assert_ptr_equal(g2->live_next, g1);
    assert_ptr_equal(g1->live_prev, g2);
    assert_int_equal(sg_gen_live(&asm_server), 2);
    assert_int_equal(asm_gauge("searchgate_config_generations_live", ""), 2);
    assert_int_equal(asm_gauge("searchgate_config_generation", ""), 2);
    assert_int_equal(sg_log_level, SG_LL_DEBUG);
    assert_true(atomic_load(&g2->routes[0].core->in_current));  /* kept: still served */
    assert_false(atomic_load(&g1->routes[1].core->in_current)); /* b is gone from the current one */
    assert_ptr_equal(g2->routes[0].prov.info, info_a);
    assert_int_equal(atomic_load(&info_a->v), 1);
    assert_int_equal(atomic_load(&info_b->v), 0);
    assert_int_equal(n_buried, 0); /* the request holds g1 */
    assert_int_equal(atomic_load(&g1->refs), 1);
    sg_gen_release(request);
    assert_int_equal(n_buried, 1);
    assert_ptr_equal(buried[0], g1);
    assert_ptr_equal(asm_server.live, g2); /* disposing took it off the live list */
    assert_null(g2->live_next);
    assert_int_equal(sg_gen_live(&asm_server), 1);
    assert_int_equal(asm_gauge("searchgate_config_generations_live", ""), 1);

    sg_gen_unpublish(&asm_server);
    assert_null(asm_server.gen);
    assert_null(atomic_load(&asm_server.gen_now));
    assert_int_equal(n_buried, 2);
    assert_null(asm_server.live);
    assert_int_equal(sg_gen_live(&asm_server), 0);
    sg_log_set_level(SG_LL_INFO);
}

/* Shutdown destroys every live core's instance once, shared or not; disposing afterwards does
 * not destroy them again, and a rebuild never keeps a destroyed core. */
static void test_destroy_instances(void **state)
{
    (void)state;
    sg_gen_t *g1 = build(TWO_ROUTES, NULL);
    sg_gen_publish(&asm_server, g1);
    sg_gen_t *request = sg_gen_acquire(&asm_server);
    sg_gen_t *g2 = build("{\"backends\":[" EX_ROUTE("a", "alpha") "," EX_ROUTE("b", "delta") "]}", g1);
    sg_gen_publish(&asm_server, g2);
    assert_ptr_equal(g2->routes[0].core, g1->routes[0].core);
    sg_gen_destroy_instances(&asm_server);
    for (size_t i = 0; i < 2; ++i) {
        assert_true(g1->routes[i].core->destroyed);
        assert_null(g1->routes[i].core->inst);
        assert_true(g2->routes[i].core->destroyed);
        assert_null(g2->routes[i].core->inst);
    }
    assert_int_equal(atomic_load(&g1->routes[0].core->refs), 2); /* the references it took are given back */
    sg_gen_t *g3 = build(TWO_ROUTES, g2);
    assert_ptr_not_equal(g3->routes[0].core, g2->routes[0].core);
    assert_non_null(g3->routes[0].core->inst);
    sg_gen_release(g3);
    sg_gen_release(request);
    sg_gen_unpublish(&asm_server);
    assert_int_equal(n_buried, 3);
}

int main(void)
{
    setenv("SG_TEST_BUILD_KEY", "secret-key", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_build_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_plugin_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_error_trace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_keeps_unchanged_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_recreates_changed_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_instances, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
