/*
 * config.c -- parse and validate the gateway's JSON config. Every key is checked here, before a
 * socket is opened; unknown keys are errors so a typo never silently falls back to a default.
 *
 * Each object's keys are listed once, in a declarative table of lib/cfg.h (the tables below, in
 * the order the "unknown key" messages list them): sg_cfg_read() checks the object's keys against
 * the table and reads every plain entry with the messages of lib/cfg.c. What is truly specific --
 * a default or a bound another setting decides, a nested object, a list, a secret -- is a
 * SG_CFG_CUSTOM_KEY entry read here by hand after the table. tests/lint/test_config_docs.py checks
 * every table against its table in docs/configuration.md.
 */
#include "config.h"
#include "common.h"
#include "cfg.h"
#include "fusion_conf.h"
#include "rerank_conf.h"
#include "trace_conf.h"

#include <cJSON.h>
#include <errno.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the tables (docs/configuration.md) ---- */

static const char *const log_levels[] = {"error", "warn", "info", "debug", NULL};

/* the top level */
static const sg_cfg_key_t top_config[] = {
    SG_CFG_CUSTOM_KEY("listen"),
    SG_CFG_INT(sg_config_t, threads, "threads", 0, 1024, 0),
    SG_CFG_ENUM(sg_config_t, log_level, "log_level", log_levels, SG_LL_INFO),
    SG_CFG_PATH(sg_config_t, plugin_dir, "plugin_dir", 0),
    SG_CFG_CUSTOM_KEY("limits"),
    SG_CFG_CUSTOM_KEY("backends"),
    SG_CFG_CUSTOM_KEY("default_backend"),
    SG_CFG_CUSTOM_KEY("clients"),
    SG_CFG_CUSTOM_KEY("cache"),
    SG_CFG_INT(sg_config_t, shutdown_drain_ms, "shutdown_drain_ms", 0, 600000, 0),
    SG_CFG_INT(sg_config_t, shutdown_grace_ms, "shutdown_grace_ms", 0, 600000, 5000),
    SG_CFG_CUSTOM_KEY("mcp"),
};

/* an entry of listen: host, port and address_file are read only for a TCP listener, into it */
static const sg_cfg_key_t listen_config[] = {
    SG_CFG_STRING(sg_listen_conf_t, host, "host", 0, "127.0.0.1"),
    SG_CFG_INT(sg_listen_conf_t, port, "port", 0, 65535, 8000),
    SG_CFG_CUSTOM_KEY("unix"),
    SG_CFG_CUSTOM_KEY("unix_mode"),
    SG_CFG_PATH(sg_listen_conf_t, address_file, "address_file", 0),
    SG_CFG_CUSTOM_KEY("allowed_hosts"),
    SG_CFG_CUSTOM_KEY("allowed_origins"),
    SG_CFG_CUSTOM_KEY("h2c"),
    SG_CFG_CUSTOM_KEY("h2c_max_body_bytes"),
    SG_CFG_CUSTOM_KEY("read_timeout_ms"),
};

static const sg_cfg_key_t limits_config[] = {
    SG_CFG_INT(sg_config_t, limits.max_body_bytes, "max_body_bytes", 1024, (int64_t)1 << 30, 16 << 20),
    SG_CFG_INT(sg_config_t, limits.max_queries, "max_queries", 1, 1000000, 10000),
    SG_CFG_INT(sg_config_t, limits.max_query_bytes, "max_query_bytes", 1, 1 << 20, 8192),
    SG_CFG_INT(sg_config_t, limits.max_topk, "max_topk", 1, 100000, 1000),
    SG_CFG_INT(sg_config_t, limits.max_deadline_ms, "max_deadline_ms", 1, 3600000, 600000),
    SG_CFG_INT(sg_config_t, limits.max_response_bytes, "max_response_bytes", 1024, (int64_t)1 << 40, (int64_t)32 << 20),
    SG_CFG_CUSTOM_KEY("max_response_bytes_inflight"),
    SG_CFG_INT(sg_config_t, limits.response_wait_ms, "response_wait_ms", 0, 600000, 2000),
    SG_CFG_INT(sg_config_t, limits.write_timeout_ms, "write_timeout_ms", 1, 3600000, 30000),
    SG_CFG_INT(sg_config_t, limits.min_write_bytes_per_s, "min_write_bytes_per_s", 0, (int64_t)1 << 30, 32768),
};

static const char *const floor_quantiles[] = {"none", "p50", "p90", NULL};

/* a plugin route (an entry of backends[] without "fusion"); topk, timeout_ms, burst, cache_ttl_s
 * and metered have defaults or bounds other settings decide */
static const sg_cfg_key_t backend_config[] = {
    SG_CFG_STRING(sg_backend_conf_t, name, "name", 1, NULL),
    SG_CFG_STRING(sg_backend_conf_t, plugin, "plugin", 1, NULL),
    SG_CFG_CUSTOM_KEY("config"),
    SG_CFG_CUSTOM_KEY("topk"),
    SG_CFG_CUSTOM_KEY("timeout_ms"),
    SG_CFG_INT(sg_backend_conf_t, max_inflight, "max_inflight", 0, 100000000, 0),
    SG_CFG_INT(sg_backend_conf_t, max_queue, "max_queue", 0, 100000000, 100000),
    SG_CFG_INT(sg_backend_conf_t, chunk, "chunk", 1, 1000000, 64),
    SG_CFG_BOOL(sg_backend_conf_t, cache, "cache", 1),
    SG_CFG_CUSTOM_KEY("cache_ttl_s"),
    SG_CFG_CUSTOM_KEY("fallback"),
    SG_CFG_CUSTOM_KEY("rerank"),
    SG_CFG_CUSTOM_KEY("metered"),
    SG_CFG_CUSTOM_KEY("budget"),
    SG_CFG_DOUBLE(sg_backend_conf_t, qps, "qps", 0, 1e6, 0),
    SG_CFG_CUSTOM_KEY("burst"),
    SG_CFG_INT(sg_backend_conf_t, retries, "retries", 0, 10, -1), /* absent: -1, the plugin's own */
    SG_CFG_INT(sg_backend_conf_t, min_remaining_ms, "min_remaining_ms", 0, 3600000, 10),
    SG_CFG_ENUM(sg_backend_conf_t, min_remaining_quantile, "min_remaining_quantile", floor_quantiles, SG_FLOOR_NONE),
    SG_CFG_CUSTOM_KEY("trace"),
};

static const sg_cfg_key_t clients_config[] = {
    SG_CFG_BOOL(sg_config_t, clients.require_key, "require_key", 0),
    SG_CFG_BOOL(sg_config_t, clients.trust_client_id_header, "trust_client_id_header", 0),
    SG_CFG_CUSTOM_KEY("default"),
    SG_CFG_CUSTOM_KEY("keys"),
    SG_CFG_INT(sg_config_t, clients.max_tracked, "max_tracked", 16, 100000000, 65536),
    SG_CFG_CUSTOM_KEY("admin_key_env"),
    SG_CFG_INT(sg_config_t, clients.global_replicas, "global_replicas", 1, 10000, 1),
};

/* what only a clients.keys[] entry has, beside the quota keys */
static const sg_cfg_key_t client_key_config[] = {
    SG_CFG_STRING(sg_client_conf_t, id, "id", 1, NULL),
    SG_CFG_CUSTOM_KEY("key_env"),
};

static const char *const rl_modes[] = {"queue", "reject", NULL};

/* the quota keys of clients.default and of each clients.keys[] entry; a keyed client's absent keys
 * take clients.default's (an overlay), its burst the rate it sets */
static const sg_cfg_key_t client_quota_config[] = {
    SG_CFG_DOUBLE(sg_client_conf_t, rate, "rate", 0, 1e9, 0),
    SG_CFG_CUSTOM_KEY("burst"),
    SG_CFG_ENUM(sg_client_conf_t, mode, "mode", rl_modes, SG_RL_QUEUE),
    SG_CFG_INT(sg_client_conf_t, max_wait_ms, "max_wait_ms", 0, 3600000, 30000),
    SG_CFG_INT(sg_client_conf_t, max_inflight, "max_inflight", 0, 100000000, 0),
    SG_CFG_INT(sg_client_conf_t, weight, "weight", 1, 1000, 1),
    SG_CFG_BOOL(sg_client_conf_t, global, "global", 0),
    SG_CFG_CUSTOM_KEY("reject_status"),
    SG_CFG_CUSTOM_KEY("budget"),
    SG_CFG_CUSTOM_KEY("trace"),
};

static const char *const budget_periods[] = {"hour", "day", "week", "month", NULL};
static const char *const budget_fails[] = {"closed", "open", NULL};

/* a "budget" object; "queries" is required, with its own message (and null reads as 0) */
static const sg_cfg_key_t budget_config[] = {
    SG_CFG_CUSTOM_KEY("queries"),
    SG_CFG_ENUM(sg_budget_conf_t, period, "period", budget_periods, SG_PERIOD_DAY),
    SG_CFG_ENUM(sg_budget_conf_t, fail, "fail", budget_fails, SG_BUDGET_FAIL_CLOSED),
};

static const sg_cfg_key_t cache_config[] = {
    SG_CFG_INT(sg_config_t, cache.l1_bytes, "l1_bytes", 0, (int64_t)1 << 40, 64 << 20),
    SG_CFG_CUSTOM_KEY("redis"),
    SG_CFG_INT(sg_config_t, cache.default_ttl_s, "ttl_s", 1, 365 * 86400, 3600),
};

static const char *const mcp_text_formats[] = {"search-r1", "results-json", NULL};

static const sg_cfg_key_t mcp_config[] = {
    SG_CFG_BOOL(sg_config_t, mcp.enabled, "enabled", 1),
    SG_CFG_INT(sg_config_t, mcp.max_sessions, "max_sessions", 1, 10000000, 10000),
    SG_CFG_INT(sg_config_t, mcp.session_idle_s, "session_idle_s", 1, 86400, 300),
    SG_CFG_INT(sg_config_t, mcp.sse_keepalive_s, "sse_keepalive_s", 1, 3600, 15),
    SG_CFG_BOOL(sg_config_t, mcp.require_session, "require_session", 0),
    SG_CFG_ENUM(sg_config_t, mcp.text_format, "text_format", mcp_text_formats, SG_MCP_TEXT_SEARCH_R1),
};

static char *read_file(const char *path, size_t *len, char *err, size_t err_size)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        snprintf(err, err_size, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    sg_buf_t b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0)
        sg_buf_append(&b, chunk, n);
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        snprintf(err, err_size, "cannot read %s", path);
        sg_buf_free(&b);
        return NULL;
    }
    if (b.base == NULL)
        sg_buf_append(&b, "", 0);
    *len = b.len;
    return b.base;
}

/* "budget": {"queries": N, "period": "hour"|"day"|"week"|"month", "fail": "closed"|"open"}, or
 * null (none). Absent: `def` (the client defaults), else none. */
static int parse_budget(sg_cfg_t *c, const cJSON *o, const sg_budget_conf_t *def, sg_budget_conf_t *out)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "budget");
    memset(out, 0, sizeof(*out));
    if (b == NULL) {
        if (def != NULL)
            *out = *def;
        return 0;
    }
    if (cJSON_IsNull(b))
        return 0;
    char path[200];
    snprintf(path, sizeof(path), "%s%sbudget", c->path, c->path[0] != '\0' ? "." : "");
    sg_cfg_t cb = {path, c->err, c->err_size};
    if (!cJSON_IsObject(b))
        return sg_cfg_fail(c, "budget", b, "expected an object {\"queries\": N, \"period\": \"day\"} or null");
    if (sg_cfg_check_table(&cb, b, budget_config, SG_CFG_N(budget_config)) != 0)
        return -1;
    if (cJSON_GetObjectItemCaseSensitive(b, "queries") == NULL)
        return sg_cfg_fail(&cb, "queries", NULL, "is required (backend queries allowed per period)");
    int64_t v;
    if (sg_cfg_int(&cb, b, "queries", 0, (int64_t)1000000000000000, 0, &v) != 0)
        return -1;
    out->queries = (uint64_t)v;
    if (sg_cfg_read_ex(&cb, b, budget_config, SG_CFG_N(budget_config), NULL, out, SG_CFG_KEYS_CHECKED) != 0)
        return -1;
    out->enabled = 1;
    return 0;
}

int sg__config_trace(sg_config_t *cfg, sg_cfg_t *c, const cJSON *o, const char *name, struct st_sg_trace_conf_t **out)
{
    int r = sg_trace_conf_parse(c, o, cfg->base_dir, name, out);
    if (*out != NULL) {
        cfg->traces = sg_mem_realloc(cfg->traces, (cfg->n_traces + 1) * sizeof(*cfg->traces));
        cfg->traces[cfg->n_traces++] = *out;
    }
    return r;
}

/* A client's "trace": its own, or (absent in a keyed client) clients.default's; null: none. */
static int parse_client_trace(sg_config_t *cfg, sg_cfg_t *c, const cJSON *o, sg_client_conf_t *out,
                              const sg_client_conf_t *defaults)
{
    if (defaults != NULL && cJSON_GetObjectItemCaseSensitive(o, "trace") == NULL) {
        out->trace = defaults->trace;
        return 0;
    }
    char name[200];
    snprintf(name, sizeof(name), out->id != NULL ? "client-%s" : "clients", out->id);
    return sg__config_trace(cfg, c, o, name, &out->trace);
}

/* A client's burst (absent: the rate it sets, else clients.default's for a keyed client), at least
 * 1 with a rate; and reject_status: 429, or 503 for clients that retry only 5xx (verl). */
static int parse_client_refusals(sg_cfg_t *c, const cJSON *o, sg_client_conf_t *out, const sg_client_conf_t *defaults)
{
    double def_burst = defaults != NULL && cJSON_GetObjectItem(o, "rate") == NULL ? defaults->burst : out->rate;
    if (sg_cfg_double(c, o, "burst", 0, 1e12, def_burst, &out->burst) != 0)
        return -1;
    if (out->rate > 0 && out->burst < 1)
        return sg_cfg_fail(c, "burst", cJSON_GetObjectItem(o, "burst"), "must be at least 1 when a rate is set");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(o, "reject_status");
    rs = cJSON_IsNull(rs) ? NULL : rs;
    out->reject_status = defaults != NULL ? defaults->reject_status : 429;
    if (rs != NULL && (!cJSON_IsNumber(rs) || (rs->valuedouble != 429 && rs->valuedouble != 503)))
        return sg_cfg_fail(c, "reject_status", rs, "expected 429 or 503");
    if (rs != NULL)
        out->reject_status = (int)rs->valuedouble;
    return 0;
}

/* clients.default (`defaults` NULL) or a clients.keys[] entry (`keyed`), whose absent quota keys
 * take clients.default's. */
static int parse_client(sg_config_t *cfg, sg_cfg_t *c, const cJSON *o, sg_client_conf_t *out, const sg_client_conf_t *defaults,
                        int keyed)
{
    const char *allowed[32];
    size_t n = keyed ? sg_cfg_table_keys(client_key_config, SG_CFG_N(client_key_config), allowed, 0, 32) : 0;
    sg_cfg_table_keys(client_quota_config, SG_CFG_N(client_quota_config), allowed, n, 32);
    if (sg_cfg_check_keys(c, o, allowed) != 0)
        return -1;
    if (keyed && (sg_cfg_read_ex(c, o, client_key_config, SG_CFG_N(client_key_config), NULL, out, SG_CFG_KEYS_CHECKED) != 0 ||
                  sg_cfg_secret_env(c, o, "key_env", 1, &out->key) != 0))
        return -1;
    if (defaults != NULL) { /* inherited: the overlay below keeps them where the entry is silent */
        out->rate = defaults->rate;
        out->mode = defaults->mode;
        out->max_wait_ms = defaults->max_wait_ms;
        out->max_inflight = defaults->max_inflight;
        out->weight = defaults->weight;
        out->global = defaults->global;
    }
    if (sg_cfg_read_ex(c, o, client_quota_config, SG_CFG_N(client_quota_config), NULL, out,
                       SG_CFG_KEYS_CHECKED | (defaults != NULL ? SG_CFG_OVERLAY : 0)) != 0 ||
        parse_client_refusals(c, o, out, defaults) != 0)
        return -1;
    /* the shared limit lives in Redis: without it "global" would silently be a per-replica limit */
    if (out->global && !cfg->cache.redis.enabled) /* clients.default is checked first, so the value is always here */
        return sg_cfg_fail(c, "global", cJSON_GetObjectItemCaseSensitive(o, "global"),
                           "needs cache.redis (the shared rate limit is kept in Redis)");
    if (parse_client_trace(cfg, c, o, out, defaults) != 0)
        return -1;
    return parse_budget(c, o, defaults != NULL ? &defaults->budget : NULL, &out->budget);
}

static int parse_clients(sg_config_t *cfg, const cJSON *o, char *err, size_t err_size)
{
    sg_cfg_t c = {"clients", err, err_size};
    cfg->clients.defaults.weight = 1;
    cfg->clients.defaults.max_wait_ms = 30000;
    cfg->clients.defaults.reject_status = 429;
    if (sg_cfg_read(&c, o, clients_config, SG_CFG_N(clients_config), NULL, cfg) != 0)
        return -1;
    if (o == NULL)
        return 0;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "default");
    if (d != NULL) {
        sg_cfg_t cd = {"clients.default", err, err_size};
        if (parse_client(cfg, &cd, d, &cfg->clients.defaults, NULL, 0) != 0)
            return -1;
    }
    const cJSON *ks = cJSON_GetObjectItemCaseSensitive(o, "keys");
    if (ks != NULL) {
        if (!cJSON_IsArray(ks))
            return sg_cfg_fail(&c, "keys", ks, "expected an array of client objects");
        size_t n = (size_t)cJSON_GetArraySize(ks), i = 0;
        cfg->clients.keyed = sg_mem_calloc(n, sizeof(*cfg->clients.keyed));
        for (const cJSON *it = ks->child; it != NULL; it = it->next, ++i) {
            char path[64];
            snprintf(path, sizeof(path), "clients.keys[%zu]", i);
            sg_cfg_t ck = {path, err, err_size};
            cfg->clients.n_keyed = i + 1;
            if (parse_client(cfg, &ck, it, &cfg->clients.keyed[i], &cfg->clients.defaults, 1) != 0)
                return -1;
            for (size_t j = 0; j < i; ++j) {
                if (strcmp(cfg->clients.keyed[j].id, cfg->clients.keyed[i].id) == 0)
                    return sg_cfg_fail(&ck, "id", cJSON_GetObjectItem(it, "id"), "duplicate client id");
                /* a key identifies one client: with two, one client's limits would silently never apply */
                if (strcmp(cfg->clients.keyed[j].key, cfg->clients.keyed[i].key) == 0)
                    return sg_cfg_fail(&ck, "key_env", cJSON_GetObjectItemCaseSensitive(it, "key_env"),
                                       "holds the same key as clients.keys[%zu] (\"%s\"): every client needs a key of its own", j,
                                       cfg->clients.keyed[j].id);
            }
        }
    }
    if (cfg->clients.require_key && cfg->clients.n_keyed == 0)
        return sg_cfg_fail(&c, "require_key", cJSON_GetObjectItem(o, "require_key"), "needs at least one entry in clients.keys");
    if (sg_cfg_secret_env(&c, o, "admin_key_env", 0, &cfg->clients.admin_key) != 0)
        return -1;
    for (size_t i = 0; cfg->clients.admin_key != NULL && i < cfg->clients.n_keyed; ++i)
        if (strcmp(cfg->clients.admin_key, cfg->clients.keyed[i].key) == 0)
            return sg_cfg_fail(&c, "admin_key_env", cJSON_GetObjectItem(o, "admin_key_env"),
                               "the admin key must differ from every client key (it is the key of clients.keys[%zu])", i);
    return 0;
}

static int parse_cache(sg_config_t *cfg, const cJSON *o, char *err, size_t err_size)
{
    sg_cfg_t c = {"cache", err, err_size};
    if (sg_cfg_read(&c, o, cache_config, SG_CFG_N(cache_config), NULL, cfg) != 0)
        return -1;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "redis");
    if (r != NULL && !cJSON_IsNull(r)) {
        sg_cfg_t cr = {"cache.redis", err, err_size};
        if (sg_redis_conf_read(&cfg->cache.redis, &cr, r) != 0 ||
            sg_cfg_string(&cr, r, "prefix", 0, "sg:", &cfg->cache.redis_prefix) != 0)
            return -1;
    }
    return 0;
}

static int parse_mcp(sg_config_t *cfg, const cJSON *o, char *err, size_t err_size)
{
    sg_cfg_t c = {"mcp", err, err_size};
    return sg_cfg_read(&c, o, mcp_config, SG_CFG_N(mcp_config), NULL, cfg);
}

/* The keys of a plugin route whose defaults or bounds other settings decide: topk and timeout_ms
 * (bounded by limits.max_topk, limits.max_deadline_ms, their defaults never above them), burst
 * (qps, at least 1) and cache_ttl_s (cache.ttl_s). */
static int parse_route_derived(sg_config_t *cfg, sg_cfg_t *c, const cJSON *o, sg_backend_conf_t *b)
{
    const int64_t def_topk = cfg->limits.max_topk < 3 ? cfg->limits.max_topk : 3;
    const int64_t def_timeout = cfg->limits.max_deadline_ms < 30000 ? cfg->limits.max_deadline_ms : 30000;
    int64_t v;
    if (sg_cfg_int(c, o, "topk", 1, cfg->limits.max_topk, def_topk, &v) != 0)
        return -1;
    b->topk = (uint32_t)v;
    if (sg_cfg_int(c, o, "timeout_ms", 1, cfg->limits.max_deadline_ms, def_timeout, &v) != 0)
        return -1;
    b->timeout_ms = (uint32_t)v;
    if (sg_cfg_double(c, o, "burst", 1, 1e6, b->qps > 1 ? b->qps : 1, &b->burst) != 0)
        return -1;
    if (sg_cfg_int(c, o, "cache_ttl_s", 1, 365 * 86400, cfg->cache.default_ttl_s, &v) != 0)
        return -1;
    b->cache_ttl_s = (uint32_t)v;
    return 0;
}

static int parse_backend(sg_config_t *cfg, const cJSON *o, size_t idx, size_t cfg_index, char *err, size_t err_size)
{
    char path[64];
    snprintf(path, sizeof(path), "backends[%zu]", cfg_index);
    sg_cfg_t c = {path, err, err_size};
    sg_backend_conf_t *b = &cfg->backends[idx];
    b->fallback = -1;
    if (sg_cfg_read(&c, o, backend_config, SG_CFG_N(backend_config), cfg->base_dir, b) != 0)
        return -1;
    for (const char *p = b->name; *p != '\0'; ++p)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
            return sg_cfg_fail(&c, "name", cJSON_GetObjectItem(o, "name"), "may only contain letters, digits, '-' and '_'");
    for (size_t j = 0; j < idx; ++j)
        if (strcmp(cfg->backends[j].name, b->name) == 0)
            return sg_cfg_fail(&c, "name", cJSON_GetObjectItem(o, "name"), "duplicate backend name");
    if (strchr(b->plugin, '/') != NULL)
        b->plugin_path = sg_cfg_resolve(cfg->base_dir, b->plugin);
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(o, "config");
    if (pc != NULL && !cJSON_IsObject(pc))
        return sg_cfg_fail(&c, "config", pc, "expected a JSON object");
    b->config_json = pc != NULL ? cJSON_PrintUnformatted(pc) : sg_strdup("{}");
    if (b->config_json == NULL)
        abort();
    if (parse_route_derived(cfg, &c, o, b) != 0)
        return -1;
    if (parse_budget(&c, o, NULL, &b->budget) != 0 || sg_cfg_bool(&c, o, "metered", b->budget.enabled, &b->metered) != 0)
        return -1;
    if (b->budget.enabled && !b->metered) /* a route budget counts this route's calls: it is metered by definition */
        return sg_cfg_fail(&c, "metered", cJSON_GetObjectItem(o, "metered"), "cannot be false on a route with a budget");
    if (sg__config_trace(cfg, &c, o, b->name, &b->trace) != 0)
        return -1;
    const cJSON *rr = cJSON_GetObjectItemCaseSensitive(o, "rerank");
    if (rr != NULL && !cJSON_IsNull(rr) && (b->rerank_json = cJSON_PrintUnformatted(rr)) == NULL)
        abort();
    return sg_rerank_conf_parse(&c, cJSON_GetObjectItemCaseSensitive(o, "rerank"), cfg->base_dir, b->topk, &b->rerank);
}

/* No whitespace, path, query, fragment or user part. */
static int plain_authority(const char *v)
{
    return *v != '\0' && strcspn(v, " \t\r\n/?#@") == strlen(v);
}

/* An entry of listen.allowed_hosts: a host name or address without a port, "*.suffix" or "*"; an
 * IPv6 address in brackets. */
static int valid_host_entry(const char *v)
{
    size_t n = strlen(v);
    if (strcmp(v, "*") == 0)
        return 1;
    if (!plain_authority(v) || n >= 256)
        return 0;
    if (v[0] == '[')
        return n > 2 && v[n - 1] == ']' && strchr(v, '*') == NULL;
    if (strchr(v, ':') != NULL)
        return 0;
    const char *star = strchr(v, '*');
    return star == NULL || (star == v && v[1] == '.' && v[2] != '\0' && strchr(v + 1, '*') == NULL);
}

/* An entry of listen.allowed_origins: "http(s)://host[:port]" without a path, "null" or "*". */
static int valid_origin_entry(const char *v)
{
    if (strcmp(v, "*") == 0 || strcmp(v, "null") == 0)
        return 1;
    const char *rest = strncasecmp(v, "http://", 7) == 0 ? v + 7 : strncasecmp(v, "https://", 8) == 0 ? v + 8 : NULL;
    return rest != NULL && strlen(v) < 256 && plain_authority(rest);
}

static int check_allowed(sg_cfg_t *c, const char *key, const cJSON *item, int origins)
{
    if (origins && !valid_origin_entry(item->valuestring))
        return sg_cfg_fail(c, key, item,
                           "expected origins like \"http://localhost:6274\" (scheme://host[:port], no path), \"null\" or \"*\"");
    if (!origins && !valid_host_entry(item->valuestring))
        return sg_cfg_fail(c, key, item,
                           "expected host names or addresses without a port, like \"gw.example.org\", \"*.example.org\", "
                           "\"10.0.0.5\" or \"[fd00::5]\" (\"*\": any)");
    return 0;
}

/* An array of strings (absent: empty), each checked and stored in lower case. */
static int parse_allowed(sg_cfg_t *c, const cJSON *l, const char *key, int origins, char ***out, size_t *n)
{
    const cJSON *a = l != NULL ? cJSON_GetObjectItemCaseSensitive(l, key) : NULL;
    if (a == NULL)
        return 0;
    if (!cJSON_IsArray(a))
        return sg_cfg_fail(c, key, a, "expected an array of strings");
    *out = sg_mem_calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof(**out));
    const cJSON *item;
    cJSON_ArrayForEach(item, a)
    {
        if (!cJSON_IsString(item))
            return sg_cfg_fail(c, key, item, "expected an array of strings");
        if (check_allowed(c, key, item, origins) != 0)
            return -1;
        char *v = sg_strdup(item->valuestring);
        for (char *p = v; *p != '\0'; ++p)
            *p = (char)tolower((unsigned char)*p);
        (*out)[(*n)++] = v;
    }
    return 0;
}

/* ---- listen ----
 *
 * "listen" is one object or an array of up to SG_LISTEN_MAX of them. An object is a TCP listener
 * ("host", "port", "address_file"), a Unix domain socket ("unix", "unix_mode", without "host" or
 * "port"), or both ("unix" beside "host"/"port"). Beside its socket, an entry says who may talk
 * to it ("allowed_hosts", "allowed_origins") and whether it serves HTTP/2 without TLS ("h2c");
 * "read_timeout_ms" and "h2c_max_body_bytes" are settings of the loops' h2o contexts, so every
 * listener shares them: any entry may set them, and the entries that do must agree. */

static char **dup_strings(char *const *v, size_t n)
{
    char **out = sg_mem_calloc(n + 1, sizeof(*out));
    for (size_t i = 0; i < n; ++i)
        out[i] = sg_strdup(v[i]);
    return out;
}

static void free_strings(char **v, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        free(v[i]);
    free(v);
}

/* A new listener at the end of cfg->listen, with the policy of `policy` (copied) when not NULL. */
static sg_listen_conf_t *add_listener(sg_config_t *cfg, const char *where, const sg_listen_conf_t *policy)
{
    cfg->listen = sg_mem_realloc(cfg->listen, (cfg->n_listen + 1) * sizeof(*cfg->listen));
    sg_listen_conf_t *l = &cfg->listen[cfg->n_listen++];
    memset(l, 0, sizeof(*l));
    snprintf(l->where, sizeof(l->where), "%s", where);
    l->h2c = -1; /* resolved once clients.require_key is known (sg_config_parse) */
    if (policy != NULL) {
        l->allowed_hosts = dup_strings(policy->allowed_hosts, policy->n_allowed_hosts);
        l->n_allowed_hosts = policy->n_allowed_hosts;
        l->allowed_origins = dup_strings(policy->allowed_origins, policy->n_allowed_origins);
        l->n_allowed_origins = policy->n_allowed_origins;
        l->h2c = policy->h2c;
    }
    return l;
}

/* "0660": permission bits as an octal string (JSON has no octal numbers, and 660 would be read as decimal) */
static int parse_mode(sg_cfg_t *c, const cJSON *o, uint32_t *out)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "unix_mode");
    *out = 0660;
    if (m == NULL)
        return 0;
    const char *s = cJSON_IsString(m) ? m->valuestring : "";
    size_t n = strlen(s);
    uint32_t v = 0;
    int ok = n >= 1 && n <= 4;
    for (size_t i = 0; ok && i < n; ++i) {
        ok = s[i] >= '0' && s[i] <= '7';
        v = v * 8 + (uint32_t)(s[i] - '0');
    }
    if (!ok || v > 0777)
        return sg_cfg_fail(c, "unix_mode", m, "expected permission bits as an octal string, like \"0660\"");
    *out = v;
    return 0;
}

static int parse_unix(sg_config_t *cfg, sg_cfg_t *c, const cJSON *o, const sg_listen_conf_t *policy)
{
    sg_listen_conf_t *l = add_listener(cfg, c->path, policy);
    if (sg_cfg_path(c, o, "unix", 1, cfg->base_dir, &l->unix_path) != 0 || parse_mode(c, o, &l->unix_mode) != 0)
        return -1;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "unix");
    if (l->unix_path[0] == '\0' || strlen(l->unix_path) >= 108) /* sizeof(sockaddr_un.sun_path) */
        return sg_cfg_fail(c, "unix", u,
                           "expected a socket path of 1 to 107 bytes (after resolving it against the config's directory)");
    for (size_t i = 0; i + 1 < cfg->n_listen; ++i)
        if (cfg->listen[i].unix_path != NULL && strcmp(cfg->listen[i].unix_path, l->unix_path) == 0)
            return sg_cfg_fail(c, "unix", u, "is already the socket of %s", cfg->listen[i].where);
    return 0;
}

/* Who may talk to an entry's listeners, and how: into `policy` (the caller frees its lists). */
static int parse_policy(sg_cfg_t *c, const cJSON *o, sg_listen_conf_t *policy)
{
    if (parse_allowed(c, o, "allowed_hosts", 0, &policy->allowed_hosts, &policy->n_allowed_hosts) != 0 ||
        parse_allowed(c, o, "allowed_origins", 1, &policy->allowed_origins, &policy->n_allowed_origins) != 0)
        return -1;
    /* h2c's default follows clients.require_key (resolved once clients are read): HTTP/2 streams are
     * authenticated only after h2o has read their bodies */
    return sg_cfg_bool(c, o, "h2c", -1, &policy->h2c);
}

/* The sockets of one entry: TCP, Unix or both. */
static int parse_sockets(sg_config_t *cfg, sg_cfg_t *c, const cJSON *o, const sg_listen_conf_t *policy)
{
    int has_unix = cJSON_GetObjectItemCaseSensitive(o, "unix") != NULL;
    int has_tcp =
        !has_unix || cJSON_GetObjectItemCaseSensitive(o, "host") != NULL || cJSON_GetObjectItemCaseSensitive(o, "port") != NULL;
    if (!has_unix && cJSON_GetObjectItemCaseSensitive(o, "unix_mode") != NULL)
        return sg_cfg_fail(c, "unix_mode", cJSON_GetObjectItemCaseSensitive(o, "unix_mode"), "only applies with \"unix\"");
    if (!has_tcp && cJSON_GetObjectItemCaseSensitive(o, "address_file") != NULL)
        return sg_cfg_fail(c, "address_file", cJSON_GetObjectItemCaseSensitive(o, "address_file"),
                           "is written for a TCP listener (\"host\"/\"port\"); a Unix domain socket's address is its path");
    if (has_tcp) {
        sg_listen_conf_t *l = add_listener(cfg, c->path, policy); /* host, port, address_file: */
        if (sg_cfg_read_ex(c, o, listen_config, SG_CFG_N(listen_config), cfg->base_dir, l, SG_CFG_KEYS_CHECKED) != 0)
            return -1;
    }
    return has_unix ? parse_unix(cfg, c, o, policy) : 0;
}

static int parse_listen_entry(sg_config_t *cfg, const cJSON *o, const char *where, char *err, size_t err_size)
{
    sg_cfg_t c = {where, err, err_size};
    if (o != NULL && sg_cfg_check_table(&c, o, listen_config, SG_CFG_N(listen_config)) != 0)
        return -1;
    sg_listen_conf_t policy = {0};
    int rc = parse_policy(&c, o, &policy) != 0 || parse_sockets(cfg, &c, o, &policy) != 0 ? -1 : 0;
    free_strings(policy.allowed_hosts, policy.n_allowed_hosts);
    free_strings(policy.allowed_origins, policy.n_allowed_origins);
    return rc;
}

/* One of the shared settings: its value in the entries that set it (they must agree), else `def`. */
static int parse_shared(const cJSON *const *entries, int n, int is_array, const char *key, int64_t min, int64_t max, int64_t def,
                        int64_t *out, char *err, size_t err_size)
{
    char where[32], first[32] = "";
    *out = def;
    for (int i = 0; i < n; ++i) {
        if (is_array)
            snprintf(where, sizeof(where), "listen[%d]", i);
        else
            snprintf(where, sizeof(where), "listen");
        sg_cfg_t c = {where, err, err_size};
        int64_t v;
        if (sg_cfg_int(&c, entries[i], key, min, max, def, &v) != 0)
            return -1;
        const cJSON *item = entries[i] != NULL ? cJSON_GetObjectItemCaseSensitive(entries[i], key) : NULL;
        if (item == NULL)
            continue;
        if (first[0] != '\0' && v != *out)
            return sg_cfg_fail(&c, key, item,
                               "differs from %s.%s (%lld): it applies to every listener, so the entries that set it must agree",
                               first, key, (long long)*out);
        if (first[0] == '\0') {
            snprintf(first, sizeof(first), "%s", where);
            *out = v;
        }
    }
    return 0;
}

static int parse_listen_common(sg_config_t *cfg, const cJSON *l, char *err, size_t err_size)
{
    const cJSON *entries[SG_LISTEN_MAX];
    int n = 0, is_array = cJSON_IsArray(l);
    if (is_array)
        for (const cJSON *it = l->child; it != NULL && n < SG_LISTEN_MAX; it = it->next)
            entries[n++] = it;
    else
        entries[n++] = l;
    int64_t v;
    if (parse_shared(entries, n, is_array, "read_timeout_ms", 100, 600000, 10000, &v, err, err_size) != 0)
        return -1;
    cfg->listen_common.read_timeout_ms = (uint32_t)v;
    /* h2o holds up to 100 HTTP/2 request bodies of a connection at once (server.c, configure_h2o) */
    if (parse_shared(entries, n, is_array, "h2c_max_body_bytes", 1024, (int64_t)1 << 30, (int64_t)1 << 20, &v, err, err_size) != 0)
        return -1;
    cfg->listen_common.h2c_max_body_bytes = (size_t)v;
    return 0;
}

static int parse_listen(sg_config_t *cfg, const cJSON *l, char *err, size_t err_size)
{
    if (!cJSON_IsArray(l)) {
        if (parse_listen_entry(cfg, l, "listen", err, err_size) != 0)
            return -1;
        return parse_listen_common(cfg, l, err, err_size);
    }
    int n = cJSON_GetArraySize(l);
    if (n < 1 || n > SG_LISTEN_MAX) {
        sg_cfg_t c = {"", err, err_size};
        return sg_cfg_fail(&c, "listen", l, "expected an object, or an array of 1 to %d listener objects", SG_LISTEN_MAX);
    }
    int i = 0;
    for (const cJSON *it = l->child; it != NULL; it = it->next, ++i) {
        char where[32];
        snprintf(where, sizeof(where), "listen[%d]", i);
        if (parse_listen_entry(cfg, it, where, err, err_size) != 0)
            return -1;
    }
    return parse_listen_common(cfg, l, err, err_size);
}

/* Once clients.require_key is known: the h2c default of each listener, and whether any serves it. */
static void resolve_h2c(sg_config_t *cfg)
{
    cfg->listen_common.any_h2c = 0;
    for (size_t i = 0; i < cfg->n_listen; ++i) {
        if (cfg->listen[i].h2c < 0)
            cfg->listen[i].h2c = !cfg->clients.require_key;
        cfg->listen_common.any_h2c |= cfg->listen[i].h2c;
    }
}

sg_listen_conf_t *sg_config_tcp_listener(sg_config_t *cfg)
{
    for (size_t i = 0; i < cfg->n_listen; ++i)
        if (cfg->listen[i].host != NULL)
            return &cfg->listen[i];
    sg_listen_conf_t *l = add_listener(cfg, "--port", NULL);
    l->host = sg_strdup("127.0.0.1");
    l->port = 8000;
    resolve_h2c(cfg);
    return l;
}

static int parse_limits(sg_config_t *cfg, const cJSON *lim, char *err, size_t err_size)
{
    sg_cfg_t cm = {"limits", err, err_size};
    if (sg_cfg_read(&cm, lim, limits_config, SG_CFG_N(limits_config), NULL, cfg) != 0)
        return -1;
    /* the response memory the whole process may hold: at least one answer's bound */
    int64_t v, def = (int64_t)512 << 20;
    if (def < (int64_t)cfg->limits.max_response_bytes)
        def = (int64_t)cfg->limits.max_response_bytes;
    if (sg_cfg_int(&cm, lim, "max_response_bytes_inflight", 1024, (int64_t)1 << 42, def, &v) != 0)
        return -1;
    if ((uint64_t)v < cfg->limits.max_response_bytes)
        return sg_cfg_fail(&cm, "max_response_bytes_inflight", cJSON_GetObjectItemCaseSensitive(lim, "max_response_bytes_inflight"),
                           "must be at least limits.max_response_bytes");
    cfg->limits.max_response_bytes_inflight = (uint64_t)v;
    return 0;
}

/* backends, their fallbacks (names, resolved once all backends are known) and default_backend */
static int parse_backends(sg_config_t *cfg, const cJSON *root, char *err, size_t err_size)
{
    sg_cfg_t c = {"", err, err_size};
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(root, "backends");
    if (!cJSON_IsArray(bs) || cJSON_GetArraySize(bs) == 0) {
        sg_cfg_fail(&c, "backends", bs, "expected a non-empty array of backend objects");
        return -1;
    }
    size_t n_entries = (size_t)cJSON_GetArraySize(bs);
    cfg->backends = sg_mem_calloc(n_entries, sizeof(*cfg->backends));
    cfg->fusions = sg_mem_calloc(n_entries, sizeof(*cfg->fusions));
    size_t i = 0;
    for (const cJSON *it = bs->child; it != NULL; it = it->next, ++i) {
        if (sg_fusion_conf_is(it)) { /* a fusion route (config_fusion.c) */
            if (sg_fusion_conf_parse(cfg, it, i, err, err_size) != 0)
                return -1;
            continue;
        }
        ++cfg->n_backends;
        if (parse_backend(cfg, it, cfg->n_backends - 1, i, err, err_size) != 0)
            return -1;
    }
    if (sg_fusion_conf_resolve(cfg, root, err, err_size) != 0)
        return -1;
    /* fallbacks refer to names, so resolve them once all backends are known */
    i = 0;
    size_t bi = 0;
    for (const cJSON *it = bs->child; it != NULL; it = it->next, ++i) {
        if (sg_fusion_conf_is(it))
            continue;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(it, "fallback");
        if (f == NULL || cJSON_IsNull(f)) {
            ++bi;
            continue;
        }
        char path[64];
        snprintf(path, sizeof(path), "backends[%zu]", i);
        sg_cfg_t cb = {path, err, err_size};
        int idx = cJSON_IsString(f) ? sg_config_find_backend(cfg, f->valuestring, strlen(f->valuestring)) : -1;
        if (idx < 0 || (size_t)idx == bi) {
            sg_cfg_fail(&cb, "fallback", f, "expected the name of another configured backend");
            return -1;
        }
        cfg->backends[bi++].fallback = idx;
    }
    /* client budgets count calls on metered routes: with none, such a budget would never count anything */
    int any_metered = 0;
    for (i = 0; i < cfg->n_backends; ++i)
        any_metered |= cfg->backends[i].metered;
    for (i = 0; i <= cfg->clients.n_keyed && !any_metered; ++i) {
        const sg_client_conf_t *cc = i < cfg->clients.n_keyed ? &cfg->clients.keyed[i] : &cfg->clients.defaults;
        if (!cc->budget.enabled)
            continue;
        char path[64];
        if (i < cfg->clients.n_keyed)
            snprintf(path, sizeof(path), "clients.keys[%zu]", i);
        else
            snprintf(path, sizeof(path), "clients.default");
        sg_cfg_t cc_cfg = {path, err, err_size};
        sg_cfg_fail(&cc_cfg, "budget", NULL,
                    "counts backend calls on metered routes, and no route is metered: add \"metered\": true (or a "
                    "\"budget\") to the paid routes");
        return -1;
    }
    const cJSON *db = cJSON_GetObjectItemCaseSensitive(root, "default_backend");
    if (db == NULL || cJSON_IsNull(db)) {
        cfg->default_backend = 0;
    } else if (!cJSON_IsString(db) ||
               (cfg->default_backend = sg_config_find_backend(cfg, db->valuestring, strlen(db->valuestring))) < 0) {
        sg_cfg_fail(&c, "default_backend", db, "expected the name of a configured backend");
        return -1;
    }
    return 0;
}

const char *const sg_config_restart_keys[SG_CONFIG_N_RESTART] = {"listen",      "threads", "cache.l1_bytes",
                                                                 "cache.redis", "mcp",     "limits.max_body_bytes"};

/* The restart-only settings of `root` as canonical JSON (gen.c compares them across reloads). */
static void keep_restart_json(sg_config_t *cfg, const cJSON *root)
{
    for (int i = 0; i < SG_CONFIG_N_RESTART; ++i) {
        const char *key = sg_config_restart_keys[i], *dot = strchr(key, '.');
        const cJSON *item = root;
        if (dot != NULL) {
            char top[64];
            snprintf(top, sizeof(top), "%.*s", (int)(dot - key), key);
            item = cJSON_GetObjectItemCaseSensitive(item, top);
            key = dot + 1;
        }
        item = item != NULL ? cJSON_GetObjectItemCaseSensitive(item, key) : NULL;
        cfg->restart_json[i] = item != NULL ? cJSON_PrintUnformatted(item) : sg_strdup("null");
        if (cfg->restart_json[i] == NULL)
            abort();
    }
}

int sg_config_parse(sg_config_t *cfg, const char *json, size_t len, const char *base_dir, char *err, size_t err_size)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->base_dir = sg_strdup(base_dir != NULL ? base_dir : ".");
    cfg->default_backend = -1;
    sg_cfg_t c = {"", err, err_size};
    cJSON *root = sg_cfg_parse(&c, json, len); /* strict: one document, no duplicate key anywhere */
    if (root == NULL)
        return -1;
    int ret = sg_cfg_read(&c, root, top_config, SG_CFG_N(top_config), cfg->base_dir, cfg) != 0 ||
                      parse_listen(cfg, cJSON_GetObjectItemCaseSensitive(root, "listen"), err, err_size) != 0 ||
                      parse_limits(cfg, cJSON_GetObjectItemCaseSensitive(root, "limits"), err, err_size) != 0 ||
                      parse_cache(cfg, cJSON_GetObjectItemCaseSensitive(root, "cache"), err, err_size) != 0 ||
                      parse_clients(cfg, cJSON_GetObjectItemCaseSensitive(root, "clients"), err, err_size) != 0 ||
                      parse_mcp(cfg, cJSON_GetObjectItemCaseSensitive(root, "mcp"), err, err_size) != 0 ||
                      parse_backends(cfg, root, err, err_size) != 0 ||
                      sg_trace_conf_check_shared(cfg->traces, cfg->n_traces, err, err_size) != 0
                  ? -1
                  : 0;
    if (ret == 0)
        resolve_h2c(cfg);
    if (ret == 0)
        keep_restart_json(cfg, root);
    cJSON_Delete(root);
    return ret;
}

int sg_config_load(sg_config_t *cfg, const char *path, char *err, size_t err_size)
{
    size_t len;
    char msg[1024];
    char *json = read_file(path, &len, err, err_size);
    if (json == NULL) {
        memset(cfg, 0, sizeof(*cfg));
        return -1;
    }
    char *dir = sg_strdup(path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL) {
        free(dir);
        dir = sg_strdup(".");
    } else if (slash == dir) {
        slash[1] = '\0';
    } else {
        *slash = '\0';
    }
    int r = sg_config_parse(cfg, json, len, dir, msg, sizeof(msg));
    free(json);
    free(dir);
    if (r != 0) {
        snprintf(err, err_size, "%s: %s", path, msg);
        return -1;
    }
    cfg->path = sg_strdup(path);
    return 0;
}

static void free_client(sg_client_conf_t *c)
{
    free(c->id);
    if (c->key != NULL) {
        memset(c->key, 0, strlen(c->key));
        free(c->key);
    }
}

void sg_config_free(sg_config_t *cfg)
{
    for (size_t i = 0; i < cfg->n_backends; ++i) {
        sg_backend_conf_t *b = &cfg->backends[i];
        free(b->name);
        free(b->plugin);
        free(b->plugin_path);
        free(b->config_json);
        free(b->rerank_json);
        sg_rerank_conf_free(b->rerank);
    }
    free(cfg->backends);
    for (size_t i = 0; i < cfg->n_fusions; ++i)
        sg_fusion_conf_free(&cfg->fusions[i]);
    free(cfg->fusions);
    for (size_t i = 0; i < cfg->clients.n_keyed; ++i)
        free_client(&cfg->clients.keyed[i]);
    free(cfg->clients.keyed);
    if (cfg->clients.admin_key != NULL) {
        memset(cfg->clients.admin_key, 0, strlen(cfg->clients.admin_key));
        free(cfg->clients.admin_key);
    }
    for (size_t i = 0; i < cfg->n_traces; ++i)
        sg_trace_conf_free(cfg->traces[i]);
    free(cfg->traces);
    sg_redis_conf_free(&cfg->cache.redis);
    free(cfg->cache.redis_prefix);
    free(cfg->path);
    free(cfg->base_dir);
    for (size_t i = 0; i < cfg->n_listen; ++i) {
        free(cfg->listen[i].host);
        free(cfg->listen[i].unix_path);
        free(cfg->listen[i].address_file);
        free_strings(cfg->listen[i].allowed_hosts, cfg->listen[i].n_allowed_hosts);
        free_strings(cfg->listen[i].allowed_origins, cfg->listen[i].n_allowed_origins);
    }
    free(cfg->listen);
    free(cfg->plugin_dir);
    for (int i = 0; i < SG_CONFIG_N_RESTART; ++i)
        free(cfg->restart_json[i]);
    memset(cfg, 0, sizeof(*cfg));
}

int sg_config_find_backend(const sg_config_t *cfg, const char *name, size_t len)
{
    for (size_t i = 0; i < cfg->n_backends; ++i)
        if (cfg->backends[i].name != NULL && strlen(cfg->backends[i].name) == len && memcmp(cfg->backends[i].name, name, len) == 0)
            return (int)i;
    return -1;
}
