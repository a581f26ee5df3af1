/*
 * reload.c -- the reload thread (reload.h): configuration reloads, one at a time, and the disposal
 * of generations nobody uses any more.
 *
 * A reload reads the config file, builds a generation from it (gen.c: new and changed routes get
 * their plugin instance created here, so a long index load never blocks a loop) and publishes it;
 * on any error -- the config, a plugin that does not load or create, a trace file -- nothing
 * changes and the message is the one `searchgate --check` prints for that config. SIGHUP queues a
 * reload and the outcome is logged; POST /admin/reload also gets it as its answer: the job travels
 * back to the request's loop as an h2o_multithread message, and a request whose client left is
 * simply not answered.
 *
 * Disposal runs here because it may destroy a plugin instance (which joins the plugin's threads):
 * never on a loop, never on a plugin thread that might be the one to join.
 *
 * systemd (Type=notify) hears of each reload: RELOADING=1 when it begins, READY=1 when it is over,
 * applied or refused (notify.h). Once a shutdown began (sg_reload_refuse) neither is sent, so
 * nothing follows the gateway's STOPPING=1.
 */
#include "reload.h"
#include "build.h"
#include "http_common.h"
#include "runtime.h"
#include "route.h"
#include "clients.h"
#include "dispatch.h"
#include "fusion.h"
#include "json.h"
#include "notify.h"
#include "trace.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_PENDING 8 /* reloads queued behind the running one; beyond, POST /admin/reload gets 503 */

/* One reload asked for: by SIGHUP (loop NULL) or by POST /admin/reload on `loop`. */
typedef struct st_job_t {
    h2o_multithread_message_t msg; /* back to the loop, with the answer */
    struct st_job_t *next;
    sg_loop_t *loop;
    h2o_req_t *req;         /* loop thread only: NULL once the client went away */
    struct st_job_t **slot; /* in the request's pool: cleared when it is answered */
    int status;             /* of the answer: 200, 422 or 503 */
    sg_buf_t body;          /* the JSON answer */
    char outcome[240];      /* one line for systemd's STATUS= */
} job_t;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t tid;
    int running, stopping, exiting; /* stopping: no more reloads; exiting: the thread ends when idle */
    sg_server_t *server;
    char *path, *default_dir;
    job_t *head, **tail;
    size_t pending; /* queued and running */
    sg_gen_t *dead; /* generations to dispose */
    sg_counter_t *m_ok, *m_failed;
} reloader = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .tail = &reloader.head};

/* ---- what changed ---- */

/* Names, for the answer's arrays and the log line. */
typedef struct st_names_t {
    const char **v;
    size_t n;
} names_t;

static void names_add(names_t *a, const char *name)
{
    a->v = sg_mem_realloc(a->v, (a->n + 1) * sizeof(*a->v));
    a->v[a->n++] = name;
}

/* Routes added, removed, recreated (a new plugin instance) and kept (the same one); fusion routes
 * added, removed and kept; keyed clients added and removed; restart-only settings changed. */
enum { D_ADDED, D_REMOVED, D_RECREATED, D_KEPT, D_FADDED, D_FREMOVED, D_FKEPT, D_CADDED, D_CREMOVED, D_RESTART, D_COUNT };

static void diff_routes(const sg_gen_t *prev, const sg_gen_t *g, names_t *d)
{
    for (size_t i = 0; i < g->n_routes; ++i) {
        const sg_route_t *r = &g->routes[i];
        const sg_route_t *old = sg_gen_route(prev, r->conf->name, strlen(r->conf->name));
        names_add(&d[old == NULL ? D_ADDED : old->core == r->core ? D_KEPT : D_RECREATED], r->conf->name);
    }
    for (size_t i = 0; i < prev->n_routes; ++i)
        if (sg_gen_route(g, prev->routes[i].conf->name, strlen(prev->routes[i].conf->name)) == NULL)
            names_add(&d[D_REMOVED], prev->routes[i].conf->name);
    for (size_t i = 0; i < g->cfg->n_fusions; ++i) {
        const char *name = g->cfg->fusions[i].name;
        names_add(&d[sg_fusion_conf_find(prev->cfg, name, strlen(name)) >= 0 ? D_FKEPT : D_FADDED], name);
    }
    for (size_t i = 0; i < prev->cfg->n_fusions; ++i) {
        const char *name = prev->cfg->fusions[i].name;
        if (sg_fusion_conf_find(g->cfg, name, strlen(name)) < 0)
            names_add(&d[D_FREMOVED], name);
    }
}

static int has_client(const sg_config_t *cfg, const char *id)
{
    for (size_t i = 0; i < cfg->clients.n_keyed; ++i)
        if (strcmp(cfg->clients.keyed[i].id, id) == 0)
            return 1;
    return 0;
}

static void diff(const sg_gen_t *prev, const sg_gen_t *g, names_t *d)
{
    diff_routes(prev, g, d);
    for (size_t i = 0; i < g->cfg->clients.n_keyed; ++i)
        if (!has_client(prev->cfg, g->cfg->clients.keyed[i].id))
            names_add(&d[D_CADDED], g->cfg->clients.keyed[i].id);
    for (size_t i = 0; i < prev->cfg->clients.n_keyed; ++i)
        if (!has_client(g->cfg, prev->cfg->clients.keyed[i].id))
            names_add(&d[D_CREMOVED], prev->cfg->clients.keyed[i].id);
    const sg_config_t *running = g->server->cfg; /* what the gateway started with */
    for (int i = 0; i < SG_CONFIG_N_RESTART; ++i)
        if (strcmp(running->restart_json[i], g->cfg->restart_json[i]) != 0)
            names_add(&d[D_RESTART], sg_config_restart_keys[i]);
}

static void json_names(sg_jw_t *w, const char *key, const names_t *a)
{
    sg_jw_key(w, key);
    sg_jw_arr(w);
    for (size_t i = 0; i < a->n; ++i)
        sg_jw_str(w, a->v[i]);
    sg_jw_end(w);
}

static void text_names(sg_buf_t *out, const char *what, const names_t *a)
{
    if (a->n == 0)
        return;
    sg_buf_appendf(out, "%s%s", out->len != 0 ? "; " : "", what);
    for (size_t i = 0; i < a->n; ++i)
        sg_buf_appendf(out, "%s%s", i != 0 ? ", " : " ", a->v[i]);
}

void sg_reload_warnings(const sg_gen_t *prev, const sg_gen_t *g, sg_buf_t *out)
{
    uint32_t max = g->cfg->limits.max_queries;
    for (size_t i = 0; i < g->n_routes; ++i) {
        sg_route_t *b = &g->routes[i];
        char msg[600];
        for (int op = 0; op < 2; ++op)
            if (!(op == 1 && !b->core->serves_access) && sg_dispatch_describe_capacity(b, op, max, msg, sizeof(msg)) != 0)
                sg_buf_appendf(out, "%s %s: %s; limits.max_queries is %u\n", op ? "/access" : "/retrieve", b->conf->name, msg, max);
    }
    if (prev == NULL)
        return;
    const sg_config_t *running = g->server->cfg;
    for (int i = 0; i < SG_CONFIG_N_RESTART; ++i)
        if (strcmp(running->restart_json[i], g->cfg->restart_json[i]) != 0)
            sg_buf_appendf(out, "%s changed: it takes effect at a restart (the running value stays until then)\n",
                           sg_config_restart_keys[i]);
    for (size_t i = 0; g->cfg->clients.require_key && i < running->n_listen; ++i)
        if (running->listen[i].h2c)
            sg_buf_appendf(out,
                           "clients.require_key is on but %s.h2c stays on until a restart: HTTP/2 streams are "
                           "authenticated only after their body is read\n",
                           running->listen[i].where);
}

/* The answer of a reload that was applied, and its log lines. */
static void report(job_t *job, const sg_gen_t *prev, const sg_gen_t *g, uint64_t start_us)
{
    names_t d[D_COUNT] = {{0}};
    diff(prev, g, d);
    sg_buf_t warn = {0}, text = {0};
    sg_reload_warnings(prev, g, &warn);
    double ms = (double)(sg_now_us() - start_us) / 1000.0;
    sg_jw_t w;
    sg_jw_init(&w, &job->body);
    sg_jw_obj(&w);
    sg_jw_kstr(&w, "status", "reloaded");
    sg_jw_ku64(&w, "generation", g->id);
    sg_jw_kstr(&w, "config", reloader.path);
    sg_jw_kfixed(&w, "duration_ms", ms, 3);
    static const char *const keys[D_COUNT] = {"added",   "removed", "recreated", "kept",    "added",
                                              "removed", "kept",    "added",     "removed", "restart_required"};
    static const char *const texts[D_COUNT] = {
        "routes added",          "routes removed",     "routes recreated", "routes kept",     "fusion routes added",
        "fusion routes removed", "fusion routes kept", "clients added",    "clients removed", "restart needed for"};
    static const int groups[][3] = {{D_ADDED, D_KEPT + 1, 0}, {D_FADDED, D_FKEPT + 1, 1}, {D_CADDED, D_CREMOVED + 1, 2}};
    static const char *const group_names[] = {"routes", "fusion_routes", "clients"};
    for (int k = 0; k < 3; ++k) {
        sg_jw_key(&w, group_names[k]);
        sg_jw_obj(&w);
        for (int i = groups[k][0]; i < groups[k][1]; ++i)
            json_names(&w, keys[i], &d[i]);
        sg_jw_end(&w);
    }
    json_names(&w, keys[D_RESTART], &d[D_RESTART]);
    sg_jw_key(&w, "warnings");
    sg_jw_arr(&w);
    for (char *p = warn.base, *nl; p != NULL && (nl = memchr(p, '\n', warn.len - (size_t)(p - warn.base))) != NULL; p = nl + 1)
        sg_jw_strn(&w, p, (size_t)(nl - p));
    sg_jw_end(&w);
    sg_jw_end(&w);
    sg_buf_appendc(&job->body, '\n');
    for (int i = 0; i < D_COUNT; ++i)
        text_names(&text, texts[i], &d[i]);
    SG_LOG(SG_LL_INFO, "reload", "configuration %s reloaded in %.0f ms: generation %llu serves new requests (%s)", reloader.path,
           ms, (unsigned long long)g->id, text.len != 0 ? text.base : "nothing changed");
    snprintf(job->outcome, sizeof(job->outcome), "configuration reloaded: generation %llu serves new requests%s",
             (unsigned long long)g->id, d[D_RESTART].n != 0 ? " (some changes need a restart)" : "");
    for (char *p = warn.base, *nl; p != NULL && (nl = memchr(p, '\n', warn.len - (size_t)(p - warn.base))) != NULL; p = nl + 1)
        SG_LOG(SG_LL_WARN, "reload", "%.*s", (int)(nl - p), p);
    for (int i = 0; i < D_COUNT; ++i)
        free(d[i].v);
    sg_buf_free(&warn);
    sg_buf_free(&text);
    job->status = 200;
}

/* ---- one reload ---- */

static void refuse(job_t *job, int status, const char *type, const char *msg)
{
    job->status = status;
    job->body.len = 0;
    sg_json_error_body(&job->body, status, type, msg);
}

static void run(job_t *job)
{
    sg_server_t *s = reloader.server;
    uint64_t start_us = sg_now_us();
    char msg[1400], err[1200];
    sg_config_t *cfg = sg_mem_calloc(1, sizeof(*cfg));
    if (sg_config_load(cfg, reloader.path, err, sizeof(err)) != 0) {
        sg_config_free(cfg);
        free(cfg);
        snprintf(msg, sizeof(msg), "config %s", err);
    } else {
        sg_gen_t *prev = sg_gen_acquire(s);
        sg_gen_opts_t o = {cfg->plugin_dir != NULL ? cfg->plugin_dir : reloader.default_dir, 0, NULL, sg__reload_bury};
        sg_gen_t *g = sg_gen_build(s, cfg, 1, prev, &o, msg, sizeof(msg)); /* frees cfg on failure */
        if (g != NULL) {
            report(job, prev, g, start_us);
            sg_gen_publish(s, g);
            sg_trace_reopen(); /* after logrotate, or a file a reload points elsewhere: a clean reopen */
            sg_counter_add(reloader.m_ok, 1);
        }
        sg_gen_release(prev);
        if (g != NULL)
            return;
    }
    sg_counter_add(reloader.m_failed, 1);
    SG_LOG(SG_LL_ERROR, "reload", "configuration reload refused, the running configuration keeps serving: %s", msg);
    refuse(job, 422, "invalid_config", msg);
    snprintf(job->outcome, sizeof(job->outcome), "configuration reload refused, the running configuration keeps serving: %.150s",
             msg);
    for (char *p = job->outcome; *p != '\0'; ++p) /* one line of the datagram */
        if (*p == '\n')
            *p = ' ';
}

/* Hands a finished job to its loop, or frees it (SIGHUP). */
static void job_done(job_t *job)
{
    if (job->loop != NULL) {
        h2o_multithread_send_message(&job->loop->reloaded, &job->msg);
        return;
    }
    sg_buf_free(&job->body);
    free(job);
}

/* Disposes of a list of buried generations (linked through dead_next). */
static void dispose_all(sg_gen_t *dead)
{
    while (dead != NULL) {
        sg_gen_t *next = dead->dead_next;
        sg__gen_dispose(dead);
        dead = next;
    }
}

static void *reload_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&reloader.mu);
    for (;;) {
        while (reloader.dead == NULL && reloader.head == NULL && !reloader.exiting)
            pthread_cond_wait(&reloader.cv, &reloader.mu);
        if (reloader.dead != NULL) {
            sg_gen_t *dead = reloader.dead;
            reloader.dead = NULL;
            pthread_mutex_unlock(&reloader.mu);
            dispose_all(dead);
            pthread_mutex_lock(&reloader.mu);
            continue;
        }
        if (reloader.head == NULL) /* exiting, with nothing left to do */
            break;
        job_t *job = reloader.head;
        if ((reloader.head = job->next) == NULL)
            reloader.tail = &reloader.head;
        int stopping = reloader.stopping;
        if (!stopping) /* under the mutex: sg_reload_refuse() orders it before STOPPING=1 */
            sg_notify_reloading();
        pthread_mutex_unlock(&reloader.mu);
        if (stopping)
            refuse(job, 503, "unavailable", "the gateway is shutting down");
        else
            run(job);
        pthread_mutex_lock(&reloader.mu);
        if (!stopping && !reloader.stopping) {
            char state[300];
            snprintf(state, sizeof(state), "READY=1\nSTATUS=%s", job->outcome);
            sg_notify_event(state);
        }
        pthread_mutex_unlock(&reloader.mu);
        job_done(job);
        pthread_mutex_lock(&reloader.mu);
        --reloader.pending;
        pthread_cond_broadcast(&reloader.cv);
    }
    pthread_mutex_unlock(&reloader.mu);
    return NULL;
}

/* Queues a reload; -1 when the gateway stops or too many wait. */
static int submit(job_t *job)
{
    pthread_mutex_lock(&reloader.mu);
    int ok = reloader.running && !reloader.stopping && reloader.pending < MAX_PENDING + 1;
    if (ok) {
        job->next = NULL;
        *reloader.tail = job;
        reloader.tail = &job->next;
        ++reloader.pending;
        pthread_cond_signal(&reloader.cv);
    }
    pthread_mutex_unlock(&reloader.mu);
    return ok ? 0 : -1;
}

/* ---- the thread's life ---- */

void sg_reload_start(sg_server_t *s, const char *config_path, const char *default_plugin_dir)
{
    reloader.server = s;
    reloader.path = sg_strdup(config_path);
    reloader.default_dir = sg_strdup(default_plugin_dir);
    reloader.m_ok = sg_metrics_counter("searchgate_config_reloads_total",
                                       "Configuration reloads (SIGHUP, POST /admin/reload), by result.", "result=\"ok\"");
    reloader.m_failed = sg_metrics_counter("searchgate_config_reloads_total",
                                           "Configuration reloads (SIGHUP, POST /admin/reload), by result.", "result=\"refused\"");
    reloader.stopping = reloader.exiting = 0;
    reloader.running = 1;
    pthread_create(&reloader.tid, NULL, reload_main, NULL);
    pthread_setname_np(reloader.tid, "sg-reload");
}

void sg__reload_bury(sg_gen_t *g)
{
    pthread_mutex_lock(&reloader.mu);
    if (reloader.running) {
        g->dead_next = reloader.dead;
        reloader.dead = g;
        pthread_cond_signal(&reloader.cv);
        pthread_mutex_unlock(&reloader.mu);
        return;
    }
    pthread_mutex_unlock(&reloader.mu);
    sg__gen_dispose(g);
}

void sg_reload_signal(void)
{
    job_t *job = sg_mem_calloc(1, sizeof(*job));
    if (submit(job) != 0) {
        SG_LOG(SG_LL_WARN, "reload", "SIGHUP: %s",
               reloader.stopping ? "the gateway is shutting down" : "too many reloads queued; ignored");
        free(job);
    }
}

void sg_reload_refuse(void)
{
    pthread_mutex_lock(&reloader.mu);
    reloader.stopping = 1;
    pthread_mutex_unlock(&reloader.mu);
}

void sg_reload_quiesce(void)
{
    pthread_mutex_lock(&reloader.mu);
    reloader.stopping = 1;
    while (reloader.running && reloader.pending != 0) /* the running reload finishes; the queued ones get 503 */
        pthread_cond_wait(&reloader.cv, &reloader.mu);
    pthread_mutex_unlock(&reloader.mu);
}

void sg_reload_stop(void)
{
    sg_reload_quiesce();
    pthread_mutex_lock(&reloader.mu);
    if (!reloader.running) {
        pthread_mutex_unlock(&reloader.mu);
        return;
    }
    reloader.exiting = 1;
    pthread_cond_broadcast(&reloader.cv);
    pthread_mutex_unlock(&reloader.mu);
    pthread_join(reloader.tid, NULL); /* it disposes what is buried first */
    pthread_mutex_lock(&reloader.mu);
    reloader.running = 0;
    sg_gen_t *dead = reloader.dead;
    reloader.dead = NULL;
    pthread_mutex_unlock(&reloader.mu);
    dispose_all(dead);
    free(reloader.path);
    free(reloader.default_dir);
    reloader.path = reloader.default_dir = NULL;
}

/* ---- POST /admin/reload ---- */

static void on_req_dispose(void *p)
{
    job_t **slot = p;
    if (*slot != NULL)
        (*slot)->req = NULL; /* the client left: the answer is dropped when it comes */
}

static void answer(h2o_req_t *req, int status, const char *body, size_t len)
{
    if (status == 401)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL, H2O_STRLIT("Bearer realm=\"searchgate\""));
    if (status == 503)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, H2O_STRLIT("1"));
    sg_ops_count_route(req, SG_OPS_ADMIN, status); /* before the answer goes out: a client that reads the metrics next sees it */
    sg_send_json(req, status, body, len);
}

static void answer_error(h2o_req_t *req, int status, const char *type, const char *msg)
{
    sg_buf_t b = {0};
    sg_json_error_body(&b, status, type, msg);
    answer(req, status, b.base, b.len);
    sg_buf_free(&b);
}

static void on_reloaded(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    while (!h2o_linklist_is_empty(messages)) {
        job_t *job = H2O_STRUCT_FROM_MEMBER(job_t, msg.link, messages->next);
        h2o_linklist_unlink(&job->msg.link);
        if (job->req != NULL) {
            *job->slot = NULL;
            answer(job->req, job->status, job->body.base, job->body.len);
        }
        sg_buf_free(&job->body);
        free(job);
    }
}

void sg_reload_admin(sg_loop_t *loop, h2o_req_t *req)
{
    const sg_gen_t *g = loop->gen;
    h2o_iovec_t key;
    const char *why = NULL;
    if (g->cfg->clients.admin_key == NULL) {
        answer_error(req, 403, "forbidden",
                     "POST /admin/reload needs the admin key, and none is configured (clients.admin_key_env); SIGHUP or "
                     "searchgate --reload PIDFILE reload without one");
        return;
    }
    if (sg_clients_presented_key(req, &key, &why) != 0 || !sg_clients_admin_allowed(g->clients, key.base, key.len, &why)) {
        answer_error(req, 401, "unauthorized", why);
        return;
    }
    job_t *job = sg_mem_calloc(1, sizeof(*job));
    job->loop = loop;
    job->req = req;
    job->slot = h2o_mem_alloc_shared(&req->pool, sizeof(*job->slot), on_req_dispose);
    *job->slot = job;
    if (submit(job) != 0) {
        *job->slot = NULL;
        free(job);
        answer_error(req, 503, "unavailable",
                     reloader.stopping ? "the gateway is shutting down" : "too many reloads are queued: retry in a moment");
    }
}

void sg_reload_init_loop(sg_loop_t *loop)
{
    h2o_multithread_register_receiver(loop->ctx.queue, &loop->reloaded, on_reloaded);
}

void sg_reload_dispose_loop(sg_loop_t *loop)
{
    h2o_multithread_receiver_t *r = &loop->reloaded;
    if (!h2o_linklist_is_empty(&r->_messages)) /* answers that arrived after the loop's last run */
        on_reloaded(r, &r->_messages);
    h2o_multithread_unregister_receiver(loop->ctx.queue, r);
}
