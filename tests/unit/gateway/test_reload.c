/*
 * Unit tests: configuration reloads (gateway/reload.c) on the real reload thread, over routes of
 * the example plugin: a changed config file takes effect (SIGHUP and POST /admin/reload, whose
 * answer says what changed), a bad one is refused with --check's message and the running
 * generation keeps serving, a search running on the old generation completes on it, and the
 * generations nobody uses any more are disposed on the reload thread. systemd hears of each reload
 * (RELOADING=1, then READY=1 with the outcome) on a NOTIFY_SOCKET the test binds. POST
 * /admin/reload runs on a loop driven by hand, its request on a connection of the test's own (the
 * way h2o's unit tests make one), so the answer's status, headers and body are read back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cJSON.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include "assembly.h"
#include "reload.h"
#include "http_common.h"
#include "notify_sock.h"
#include "status.h"

#define ADMIN_KEY "admin-secret"
#define V1 "{\"clients\":{\"admin_key_env\":\"SG_TEST_ADMIN_KEY\"},\"backends\":[" EX_ROUTE("a", "alpha") "]}"
#define V2                                                                                                                         \
    "{\"clients\":{\"admin_key_env\":\"SG_TEST_ADMIN_KEY\",\"keys\":[{\"id\":\"k\",\"key_env\":\"SG_TEST_CLIENT_KEY\"}]},"         \
    "\"backends\":[" EX_ROUTE("a", "alpha") "," EX_ROUTE("b", "beta") "]}"

/* Where generations are disposed (sg__gen_dispose, wrapped at link time): on the reload thread
 * while it runs, on the releasing thread once it stopped. */
void __real_sg__gen_dispose(sg_gen_t *g);
static pthread_t main_thread;
static _Atomic int disposed_here, disposed_elsewhere;

void __wrap_sg__gen_dispose(sg_gen_t *g);
void __wrap_sg__gen_dispose(sg_gen_t *g)
{
    atomic_fetch_add(pthread_equal(pthread_self(), main_thread) ? &disposed_here : &disposed_elsewhere, 1);
    __real_sg__gen_dispose(g);
}

static int notify_fd = -1;
static sg_loop_t loop; /* the loop POST /admin/reload runs on */
static sg_counter_t admin_counts[SG_NUM_CODES];

static int setup(void **state)
{
    (void)state;
    asm_server_init(V1);
    main_thread = pthread_self();
    atomic_store(&disposed_here, 0);
    atomic_store(&disposed_elsewhere, 0);
    char err[1400];
    sg_gen_opts_t o = {SG_PLUGIN_DIR, 0, NULL, sg__reload_bury};
    sg_gen_t *g = sg_gen_build(&asm_server, &asm_start_cfg, 0, NULL, &o, err, sizeof(err));
    if (g == NULL)
        fail_msg("%s", err);
    sg_gen_publish(&asm_server, g);
    /* systemd's notification socket */
    char path[sizeof(((struct sockaddr_un *)NULL)->sun_path)];
    snprintf(path, sizeof(path), "%s/notify", asm_dir);
    notify_fd = notify_sock_bind(path);
    assert_true(notify_fd >= 0);
    setenv("NOTIFY_SOCKET", path, 1);
    /* the loop */
    memset(&loop, 0, sizeof(loop));
    memset(admin_counts, 0, sizeof(admin_counts));
    for (int c = 0; c < SG_NUM_CODES; ++c)
        asm_server.http_requests[SG_OPS_ADMIN][c] = &admin_counts[c];
    loop.server = &asm_server;
    loop.loop = h2o_evloop_create();
    h2o_config_init(&asm_server.h2o);
    asm_server.hostconf = h2o_config_register_host(&asm_server.h2o, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_context_init(&loop.ctx, loop.loop, &asm_server.h2o);
    size_t key = 0;
    *h2o_context_get_storage(&loop.ctx, &key, NULL) = &loop;
    sg_reload_init_loop(&loop);
    sg_loop_refresh_gen(&loop);
    sg_reload_start(&asm_server, asm_config, SG_PLUGIN_DIR);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sg_reload_refuse();
    sg_reload_quiesce();
    sg_reload_dispose_loop(&loop);
    sg_gen_release(loop.gen);
    h2o_multithread_queue_t *q = loop.ctx.queue;
    h2o_context_dispose(&loop.ctx);
    h2o_evloop_run(loop.loop, 0);
    free(q);
    h2o_evloop_destroy(loop.loop);
    h2o_config_dispose(&asm_server.h2o);
    sg_gen_unpublish(&asm_server);
    sg_reload_stop(); /* disposes of the generations still buried */
    assert_null(asm_server.live);
    assert_int_equal(sg_gen_live(&asm_server), 0);
    unsetenv("NOTIFY_SOCKET");
    close(notify_fd);
    asm_server_dispose();
    return 0;
}

/* The next notification to systemd (10 s at most). */
static void next_notification(char *out, size_t size)
{
    assert_true(notify_sock_next(notify_fd, out, size, 10000) > 0);
}

/* One reload's notifications: RELOADING=1 first, then READY=1 with the outcome (returned). */
static void reload_outcome(char *out, size_t size)
{
    next_notification(out, size);
    if (strncmp(out, "RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC=", 62) != 0)
        fail_msg("expected RELOADING=1, got \"%s\"", out);
    next_notification(out, size);
}

static uint64_t reloads(const char *result)
{
    char l[64];
    snprintf(l, sizeof(l), "result=\"%s\"", result);
    return asm_counter("searchgate_config_reloads_total", l);
}

/* Waits until only `n` generations are live (the reload thread disposes of the others). */
static void wait_live(uint32_t n)
{
    for (int i = 0; i < 1000 && sg_gen_live(&asm_server) != n; ++i)
        usleep(10000);
    assert_int_equal(sg_gen_live(&asm_server), n);
}

/* ---- SIGHUP ---- */

/* A changed config file takes effect: a new generation (the unchanged route keeps its plugin
 * instance), counted, READY=1 with the outcome; the old generation is disposed once its last
 * user let go. */
static void test_sighup_applies_a_changed_config(void **state)
{
    (void)state;
    sg_gen_t *g1 = asm_server.gen;
    sg_route_core_t *core_a = g1->routes[0].core;
    asm_write("config.json", V2);
    sg_reload_signal();
    char note[512];
    reload_outcome(note, sizeof(note));
    assert_string_equal(note, "READY=1\nSTATUS=configuration reloaded: generation 2 serves new requests");
    sg_gen_t *g2 = asm_server.gen;
    assert_ptr_not_equal(g2, g1);
    assert_int_equal(g2->id, 2);
    assert_int_equal(g2->n_routes, 2);
    assert_ptr_equal(g2->routes[0].core, core_a);
    assert_string_equal(g2->routes[1].conf->name, "b");
    assert_string_equal(g2->cfg->clients.keyed[0].id, "k");
    assert_int_equal(reloads("ok"), 1);
    assert_int_equal(reloads("refused"), 0);
    sg_loop_refresh_gen(&loop); /* the loop's reference was the last on g1 */
    assert_ptr_equal(loop.gen, g2);
    wait_live(1);
    assert_ptr_equal(asm_server.live, g2);
    assert_int_equal(atomic_load(&disposed_elsewhere), 1); /* on the reload thread, not the loop's */
    assert_int_equal(atomic_load(&disposed_here), 0);
}

/* Once the reload thread stopped (exit), a generation's last release disposes of it at once, on
 * the releasing thread. */
static void test_disposed_at_once_after_stop(void **state)
{
    (void)state;
    sg_gen_t *request = sg_gen_acquire(&asm_server);
    asm_write("config.json", V2);
    sg_reload_signal();
    char note[512];
    reload_outcome(note, sizeof(note));
    sg_loop_refresh_gen(&loop);
    assert_int_equal(sg_gen_live(&asm_server), 2);
    sg_reload_stop();
    sg_gen_release(request);
    assert_int_equal(sg_gen_live(&asm_server), 1);
    assert_int_equal(atomic_load(&disposed_here), 1);
    assert_int_equal(atomic_load(&disposed_elsewhere), 0);
    asm_write("config.json", V1);
    sg_reload_signal(); /* refused: no thread to run it */
    struct pollfd p = {notify_fd, POLLIN, 0};
    assert_int_equal(poll(&p, 1, 200), 0);
    assert_int_equal(asm_server.gen->id, 2);
}

/* A config --check would refuse -- invalid, or a plugin that refuses its config -- is refused as
 * a whole with --check's message; the running generation keeps serving, untouched. */
static void test_bad_config_is_refused(void **state)
{
    (void)state;
    sg_gen_t *g1 = asm_server.gen;
    sg_route_core_t *core_a = g1->routes[0].core;
    asm_write("config.json", "{\"backends\":[" EX_ROUTE("a", "alpha") "],\"bogus\":1}");
    sg_config_t probe;
    char err[1024], want[1400], note[512];
    assert_int_equal(sg_config_load(&probe, asm_config, err, sizeof(err)), -1); /* what --check says of it */
    sg_config_free(&probe);
    sg_reload_signal();
    reload_outcome(note, sizeof(note));
    snprintf(want, sizeof(want),
             "READY=1\nSTATUS=configuration reload refused, the running configuration keeps serving: config %.143s", err);
    assert_string_equal(note, want);
    assert_ptr_equal(asm_server.gen, g1);

    asm_write("config.json", "{\"backends\":[" EX_ROUTE("a", "alpha") ",{\"name\":\"b\",\"plugin\":\"example\","
                                                                      "\"config\":{\"documents\":[]}}]}");
    sg_reload_signal();
    reload_outcome(note, sizeof(note));
    snprintf(want, sizeof(want),
             "READY=1\nSTATUS=configuration reload refused, the running configuration keeps serving: backend b (%s/sg_example.so): "
             "config.documents: needs at least one document, got []",
             SG_PLUGIN_DIR);
    want[strlen("READY=1\nSTATUS=configuration reload refused, the running configuration keeps serving: ") + 150] = '\0';
    assert_string_equal(note, want);
    assert_ptr_equal(asm_server.gen, g1);
    assert_int_equal(g1->id, 1);
    assert_ptr_equal(g1->routes[0].core, core_a);
    assert_int_equal(atomic_load(&core_a->refs), 1); /* the refused build let go of the core it would have kept */
    assert_non_null(core_a->inst);
    assert_int_equal(reloads("refused"), 2);
    assert_int_equal(reloads("ok"), 0);
    wait_live(1);
}

/* ---- requests in flight ---- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    sg_status status;
} waiter_t;

static void on_searched(void *arg, const sg_result *res)
{
    waiter_t *w = arg;
    pthread_mutex_lock(&w->mu);
    ++w->calls;
    w->status = res->status;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* A request holds the generation it started on: a reload that recreates its route leaves the old
 * plugin instance alone until the request lets go, so its search completes there; then the old
 * generation is disposed (and its instance destroyed) on the reload thread. */
static void test_request_in_flight_keeps_its_generation(void **state)
{
    (void)state;
    asm_write("config.json", "{\"backends\":[{\"name\":\"a\",\"plugin\":\"example\",\"config\":{\"delay_ms\":300,"
                             "\"documents\":[{\"id\":\"1\",\"contents\":\"alpha\"}]}}]}");
    sg_reload_signal();
    char note[512];
    reload_outcome(note, sizeof(note));
    assert_string_equal(note, "READY=1\nSTATUS=configuration reloaded: generation 2 serves new requests");
    sg_loop_refresh_gen(&loop);
    wait_live(1);

    sg_gen_t *request = sg_gen_acquire(&asm_server); /* a request of generation 2 ... */
    sg_route_t *route = sg_gen_route(request, "a", 1);
    sg_query q = {"alpha", 5};
    sg_search s = {sizeof(sg_search), 1, &q, 1, 0, "in-flight", NULL, 0, NULL, 0};
    waiter_t w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, SG_OK};
    assert_int_equal(route->core->plugin.vt->search(route->core->inst, &s, on_searched, &w), SG_OK); /* ... 300 ms */
    asm_write("config.json", V1); /* a's config changes again: a new instance */
    sg_reload_signal();
    reload_outcome(note, sizeof(note));
    assert_string_equal(note, "READY=1\nSTATUS=configuration reloaded: generation 3 serves new requests");
    assert_ptr_not_equal(asm_server.gen->routes[0].core, route->core);
    sg_loop_refresh_gen(&loop);
    assert_int_equal(sg_gen_live(&asm_server), 2); /* generation 2 still serves the request */
    assert_false(route->core->destroyed);
    pthread_mutex_lock(&w.mu);
    while (w.calls == 0)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.status, SG_OK); /* answered, not cancelled by a destroyed instance */
    sg_gen_release(request);
    wait_live(1);
}

/* ---- POST /admin/reload ---- */

/* A request on a connection of its own: its answer is collected in `body`. */
typedef struct {
    h2o_conn_t conn;
    h2o_req_t req;
    h2o_ostream_t out;
    sg_buf_t body;
    int done;
} admin_req_t;

static void on_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t n, h2o_send_state_t st)
{
    admin_req_t *a = H2O_STRUCT_FROM_MEMBER(admin_req_t, out, self);
    (void)req;
    for (size_t i = 0; i < n; ++i)
        sg_buf_append(&a->body, bufs[i].base, bufs[i].len);
    if (!h2o_send_state_is_in_progress(st))
        a->done = 1;
}

static socklen_t peer_of(h2o_conn_t *conn, struct sockaddr *sa)
{
    (void)conn;
    struct sockaddr_in *sin = (struct sockaddr_in *)sa;
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sizeof(*sin);
}

static const h2o_conn_callbacks_t conn_callbacks = {.get_sockname = peer_of, .get_peername = peer_of};

/* POST /admin/reload presenting `key` (NULL: none), on the loop; answered or still running. */
static admin_req_t *admin_post(const char *key)
{
    admin_req_t *a = sg_mem_calloc(1, sizeof(*a));
    a->conn.ctx = &loop.ctx;
    a->conn.hosts = asm_server.h2o.hosts;
    a->conn.callbacks = &conn_callbacks;
    h2o_init_request(&a->req, &a->conn, NULL);
    a->req.input.method = a->req.method = h2o_iovec_init(H2O_STRLIT("POST"));
    a->req.input.path = a->req.path = h2o_iovec_init(H2O_STRLIT("/admin/reload"));
    a->req.version = 0x101;
    a->req.pathconf = &asm_server.hostconf->fallback_path;
    a->req._ostr_top = &a->out;
    a->out.do_send = on_send;
    if (key != NULL) {
        char *v = h2o_mem_alloc_pool(&a->req.pool, strlen(key) + 8);
        int n = snprintf(v, strlen(key) + 8, "Bearer %s", key);
        h2o_add_header(&a->req.pool, &a->req.headers, H2O_TOKEN_AUTHORIZATION, NULL, v, (size_t)n);
    }
    sg_loop_refresh_gen(&loop); /* as the server does before each request */
    sg_reload_admin(&loop, &a->req);
    return a;
}

/* Runs the loop until the answer is out (10 s at most). */
static void admin_wait(admin_req_t *a)
{
    uint64_t end = sg_now_ms() + 10000;
    while (!a->done && sg_now_ms() < end)
        h2o_evloop_run(loop.loop, 20);
    assert_true(a->done);
    sg_buf_appendc(&a->body, '\0');
}

static void admin_free(admin_req_t *a)
{
    h2o_dispose_request(&a->req);
    sg_buf_free(&a->body);
    free(a);
}

static const char *header_of(admin_req_t *a, const h2o_token_t *token)
{
    ssize_t i = h2o_find_header(&a->req.res.headers, token, -1);
    return i >= 0 ? a->req.res.headers.entries[i].value.base : NULL;
}

/* What an applied reload's answer lists under `group`.`key` (group NULL: at the top), comma-separated. */
typedef struct {
    const char *group, *key, *names;
} listed_t;

static void names_at(const cJSON *root, const char *group, const char *key, char *out, size_t size)
{
    const cJSON *o = group != NULL ? cJSON_GetObjectItemCaseSensitive(root, group) : root;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, key);
    assert_true(cJSON_IsArray(arr));
    out[0] = '\0';
    for (const cJSON *it = arr->child; it != NULL; it = it->next)
        snprintf(out + strlen(out), size - strlen(out), "%s%s", out[0] != '\0' ? "," : "", it->valuestring);
}

/* POST /admin/reload with the admin key after the config file became `json`: 200, and the answer
 * lists what `want` says. Returns the answer, parsed (the caller deletes it). */
static cJSON *admin_reload_ok(const char *json, const listed_t *want, size_t n)
{
    asm_write("config.json", json);
    admin_req_t *a = admin_post(ADMIN_KEY);
    admin_wait(a);
    assert_int_equal(a->req.res.status, 200);
    assert_string_equal(header_of(a, H2O_TOKEN_CONTENT_TYPE), "application/json");
    cJSON *root = cJSON_Parse(a->body.base);
    assert_non_null(root);
    char names[256];
    for (size_t i = 0; i < n; ++i) {
        names_at(root, want[i].group, want[i].key, names, sizeof(names));
        if (strcmp(names, want[i].names) != 0)
            fail_msg("%s.%s: \"%s\", expected \"%s\" in %s", want[i].group, want[i].key, names, want[i].names, a->body.base);
    }
    admin_free(a);
    return root;
}

/* The admin key: none presented, or another one, is 401 (with the Bearer challenge) and reloads
 * nothing; the right one reloads and the answer says what changed. */
static void test_admin_reload(void **state)
{
    (void)state;
    asm_write("config.json", V2);
    admin_req_t *a = admin_post(NULL);
    assert_true(a->done); /* at once */
    sg_buf_appendc(&a->body, '\0');
    assert_int_equal(a->req.res.status, 401);
    assert_string_equal(header_of(a, H2O_TOKEN_WWW_AUTHENTICATE), "Bearer realm=\"searchgate\"");
    assert_non_null(strstr(a->body.base, "\"type\":\"unauthorized\""));
    admin_free(a);
    a = admin_post("wrong");
    assert_true(a->done);
    assert_int_equal(a->req.res.status, 401);
    admin_free(a);
    assert_int_equal(atomic_load(&admin_counts[sg_code_index(401)].v), 2);
    assert_int_equal(reloads("ok") + reloads("refused"), 0);

    static const listed_t want[] = {
        {"routes", "added", "b"},       {"routes", "removed", ""},        {"routes", "recreated", ""},   {"routes", "kept", "a"},
        {"fusion_routes", "added", ""}, {"fusion_routes", "removed", ""}, {"fusion_routes", "kept", ""}, {"clients", "added", "k"},
        {"clients", "removed", ""},     {NULL, "restart_required", ""},   {NULL, "warnings", ""}};
    cJSON *root = admin_reload_ok(V2, want, sizeof(want) / sizeof(want[0]));
    assert_string_equal(cJSON_GetObjectItem(root, "status")->valuestring, "reloaded");
    assert_int_equal(cJSON_GetObjectItem(root, "generation")->valueint, 2);
    assert_string_equal(cJSON_GetObjectItem(root, "config")->valuestring, asm_config);
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(root, "duration_ms")));
    cJSON_Delete(root);
    assert_int_equal(atomic_load(&admin_counts[sg_code_index(200)].v), 1);
    assert_int_equal(asm_server.gen->id, 2);

    /* a changed, b removed, c added, a fusion route over a and c, k removed, a restart-only setting changed */
    static const listed_t want2[] = {
        {"routes", "added", "c"},
        {"routes", "removed", "b"},
        {"routes", "recreated", "a"},
        {"routes", "kept", ""},
        {"fusion_routes", "added", "f"},
        {"clients", "removed", "k"},
        {NULL, "restart_required", "threads"},
        {NULL, "warnings", "threads changed: it takes effect at a restart (the running value stays until then)"}};
    cJSON_Delete(admin_reload_ok(
        "{\"threads\":3,\"clients\":{\"admin_key_env\":\"SG_TEST_ADMIN_KEY\"},\"backends\":[" EX_ROUTE("a", "other") "," EX_ROUTE(
            "c", "gamma") ","
                          "{\"name\":\"f\",\"fusion\":{\"routes\":[\"a\",\"c\"],\"method\":\"rrf\",\"k\":60}}]}",
        want2, sizeof(want2) / sizeof(want2[0])));

    /* the first route removed, the fusion route too, threads back to the running value */
    static const listed_t want3[] = {
        {"routes", "added", "d"},          {"routes", "removed", "a"},    {"routes", "recreated", ""},    {"routes", "kept", "c"},
        {"fusion_routes", "removed", "f"}, {"fusion_routes", "kept", ""}, {NULL, "restart_required", ""}, {NULL, "warnings", ""}};
    cJSON_Delete(admin_reload_ok("{\"clients\":{\"admin_key_env\":\"SG_TEST_ADMIN_KEY\"},\"backends\":[" EX_ROUTE(
                                     "c", "gamma") "," EX_ROUTE("d", "delta") "]}",
                                 want3, sizeof(want3) / sizeof(want3[0])));
    assert_int_equal(asm_server.gen->id, 4);
}

/* A refused config is 422 invalid_config with --check's message, and the running generation
 * stays; without an admin key configured, POST /admin/reload is 403 and reloads nothing. */
static void test_admin_refused_and_forbidden(void **state)
{
    (void)state;
    asm_write("config.json", "{\"backends\":[],\"clients\":{\"admin_key_env\":\"SG_TEST_ADMIN_KEY\"}}");
    sg_config_t probe;
    char err[1024];
    assert_int_equal(sg_config_load(&probe, asm_config, err, sizeof(err)), -1);
    sg_config_free(&probe);
    admin_req_t *a = admin_post(ADMIN_KEY);
    admin_wait(a);
    assert_int_equal(a->req.res.status, 422);
    cJSON *root = cJSON_Parse(a->body.base);
    const cJSON *e = cJSON_GetObjectItem(root, "error");
    assert_string_equal(cJSON_GetObjectItem(e, "type")->valuestring, "invalid_config");
    char want[1400];
    snprintf(want, sizeof(want), "config %s", err);
    assert_string_equal(cJSON_GetObjectItem(e, "message")->valuestring, want);
    cJSON_Delete(root);
    admin_free(a);
    assert_int_equal(asm_server.gen->id, 1);
    assert_int_equal(reloads("refused"), 1);
    char note[512];
    reload_outcome(note, sizeof(note)); /* systemd hears of it too */
    snprintf(want, sizeof(want),
             "READY=1\nSTATUS=configuration reload refused, the running configuration keeps serving: config %.143s", err);
    assert_string_equal(note, want);

    asm_write("config.json", "{\"backends\":[" EX_ROUTE("a", "alpha") "]}"); /* no admin key from now on */
    sg_reload_signal();
    reload_outcome(note, sizeof(note));
    assert_string_equal(note, "READY=1\nSTATUS=configuration reloaded: generation 2 serves new requests");
    a = admin_post(ADMIN_KEY);
    assert_true(a->done);
    sg_buf_appendc(&a->body, '\0');
    assert_int_equal(a->req.res.status, 403);
    root = cJSON_Parse(a->body.base);
    e = cJSON_GetObjectItem(root, "error");
    assert_string_equal(cJSON_GetObjectItem(e, "type")->valuestring, "forbidden");
    assert_string_equal(cJSON_GetObjectItem(e, "message")->valuestring,
                        "POST /admin/reload needs the admin key, and none is configured (clients.admin_key_env); SIGHUP or "
                        "searchgate --reload PIDFILE reload without one");
    cJSON_Delete(root);
    admin_free(a);
    assert_int_equal(asm_server.gen->id, 2);
}

/* A client that left before its reload was done: the reload happens, its answer is dropped. */
static void test_admin_client_left(void **state)
{
    (void)state;
    asm_write("config.json", V2);
    admin_req_t *a = admin_post(ADMIN_KEY);
    assert_false(a->done);
    h2o_dispose_request(&a->req); /* the connection closed */
    char note[512];
    reload_outcome(note, sizeof(note));
    assert_string_equal(note, "READY=1\nSTATUS=configuration reloaded: generation 2 serves new requests");
    for (int i = 0; i < 10; ++i) /* the answer reaches the loop, which drops it */
        h2o_evloop_run(loop.loop, 10);
    assert_false(a->done);
    assert_int_equal(atomic_load(&admin_counts[sg_code_index(200)].v), 0);
    sg_buf_free(&a->body);
    free(a);
}

/* Once shutdown began: POST /admin/reload is 503 (Retry-After: 1) and SIGHUP is ignored. */
static void test_refused_during_shutdown(void **state)
{
    (void)state;
    asm_write("config.json", V2);
    sg_reload_refuse();
    admin_req_t *a = admin_post(ADMIN_KEY);
    assert_true(a->done);
    sg_buf_appendc(&a->body, '\0');
    assert_int_equal(a->req.res.status, 503);
    assert_string_equal(header_of(a, H2O_TOKEN_RETRY_AFTER), "1");
    assert_non_null(strstr(a->body.base, "\"message\":\"the gateway is shutting down\""));
    admin_free(a);
    sg_reload_signal();
    struct pollfd p = {notify_fd, POLLIN, 0};
    assert_int_equal(poll(&p, 1, 300), 0); /* no RELOADING=1: nothing follows STOPPING=1 */
    assert_int_equal(asm_server.gen->id, 1);
    assert_int_equal(reloads("ok") + reloads("refused"), 0);
}

/* ---- the warnings ---- */

/* At start-up: routes that can never admit limits.max_queries queries of a request; at a reload,
 * also the restart-only settings that changed (the running value is the start-up config's). */
static void test_warnings(void **state)
{
    (void)state;
    sg_buf_t out = {0};
    sg_reload_warnings(NULL, asm_server.gen, &out);
    assert_int_equal(out.len, 0);
    sg_reload_warnings(asm_server.gen, asm_server.gen, &out);
    assert_int_equal(out.len, 0);
    sg_config_t *cfg = asm_load("{\"threads\":3,\"cache\":{\"l1_bytes\":1048576},\"limits\":{\"max_queries\":8},"
                                "\"backends\":[{\"name\":\"a\",\"plugin\":\"example\",\"max_queue\":2,\"max_inflight\":1,"
                                "\"chunk\":1,\"config\":{\"documents\":[{\"id\":\"1\",\"contents\":\"x\"}]}}]}");
    char err[1400];
    sg_gen_opts_t o = {SG_PLUGIN_DIR, 0, NULL, sg__reload_bury};
    sg_gen_t *g = sg_gen_build(&asm_server, cfg, 1, asm_server.gen, &o, err, sizeof(err));
    if (g == NULL)
        fail_msg("%s", err);
    char capacity[600];
    assert_int_equal(sg_dispatch_describe_capacity(&g->routes[0], 0, 8, capacity, sizeof(capacity)), -1);
    char want[1400];
    snprintf(want, sizeof(want), "/retrieve a: %s; limits.max_queries is 8\n", capacity);
    sg_reload_warnings(NULL, g, &out);
    sg_buf_appendc(&out, '\0');
    assert_string_equal(out.base, want);
    out.len = 0;
    sg_reload_warnings(asm_server.gen, g, &out);
    sg_buf_appendc(&out, '\0');
    snprintf(want + strlen(want), sizeof(want) - strlen(want),
             "threads changed: it takes effect at a restart (the running value stays until then)\n"
             "cache.l1_bytes changed: it takes effect at a restart (the running value stays until then)\n");
    assert_string_equal(out.base, want);
    sg_buf_free(&out);
    sg_gen_release(g);
}

int main(void)
{
    setenv("SG_TEST_ADMIN_KEY", ADMIN_KEY, 1);
    setenv("SG_TEST_CLIENT_KEY", "client-secret", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sighup_applies_a_changed_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disposed_at_once_after_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_config_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_request_in_flight_keeps_its_generation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admin_reload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admin_refused_and_forbidden, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admin_client_left, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_during_shutdown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warnings, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
