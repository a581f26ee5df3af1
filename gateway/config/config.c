/*
 * config.c -- parse and validate the gateway's JSON config. Every key is checked here, before a
 * socket is opened; unknown keys are errors so a typo never silently falls back to a default.
 */
#include "config.h"
#include "common.h"
#include "cfg.h"
#include "fusion.h"
#include "rerank.h"
#include "trace.h"

#include <cJSON.h>
#include <errno.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    static const char *const keys[] = {"queries", "period", "fail", NULL};
    static const char *const periods[] = {"hour", "day", "week", "month", NULL};
    static const char *const fails[] = {"closed", "open", NULL};
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
    if (sg_cfg_check_keys(&cb, b, keys) != 0)
        return -1;
    if (cJSON_GetObjectItemCaseSensitive(b, "queries") == NULL)
        return sg_cfg_fail(&cb, "queries", NULL, "is required (backend queries allowed per period)");
    int64_t v;
    if (sg_cfg_int(&cb, b, "queries", 0, (int64_t)1000000000000000, 0, &v) != 0)
        return -1;
    out->queries = (uint64_t)v;
    if (sg_cfg_enum(&cb, b, "period", periods, SG_PERIOD_DAY, &out->period) != 0 ||
        sg_cfg_enum(&cb, b, "fail", fails, SG_BUDGET_FAIL_CLOSED, &out->fail) != 0)
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

static int parse_client(sg_config_t *cfg, sg_cfg_t *c, const cJSON *o, sg_client_conf_t *out, const sg_client_conf_t *defaults,
                        int keyed)
{
    static const char *const keyed_keys[] = {"id",     "key_env", "rate",   "burst",         "mode",  "max_wait_ms", "max_inflight",
                                             "weight", "global",  "budget", "reject_status", "trace", NULL};
    static const char *const default_keys[] = {
        "rate", "burst", "mode", "max_wait_ms", "max_inflight", "weight", "global", "reject_status", "budget", "trace", NULL};
    int have_redis = cfg->cache.redis.enabled;
    static const char *const modes[] = {"queue", "reject", NULL};
    if (sg_cfg_check_keys(c, o, keyed ? keyed_keys : default_keys) != 0)
        return -1;
    int64_t v;
    if (keyed) {
        if (sg_cfg_string(c, o, "id", 1, NULL, &out->id) != 0 || sg_cfg_secret_env(c, o, "key_env", 1, &out->key) != 0)
            return -1;
    }
    if (sg_cfg_double(c, o, "rate", 0, 1e9, defaults != NULL ? defaults->rate : 0, &out->rate) != 0)
        return -1;
    double def_burst = defaults != NULL && cJSON_GetObjectItem(o, "rate") == NULL ? defaults->burst : out->rate;
    if (sg_cfg_double(c, o, "burst", 0, 1e12, def_burst, &out->burst) != 0)
        return -1;
    if (out->rate > 0 && out->burst < 1) {
        return sg_cfg_fail(c, "burst", cJSON_GetObjectItem(o, "burst"), "must be at least 1 when a rate is set");
    }
    if (sg_cfg_enum(c, o, "mode", modes, defaults != NULL ? defaults->mode : SG_RL_QUEUE, &out->mode) != 0)
        return -1;
    if (sg_cfg_int(c, o, "max_wait_ms", 0, 3600000, defaults != NULL ? defaults->max_wait_ms : 30000, &v) != 0)
        return -1;
    out->max_wait_ms = (uint32_t)v;
    /* the status of refusals (reject mode, exhausted budgets): 429, or 503 for clients that retry only 5xx (verl) */
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(o, "reject_status");
    rs = cJSON_IsNull(rs) ? NULL : rs;
    out->reject_status = defaults != NULL ? defaults->reject_status : 429;
    if (rs != NULL && (!cJSON_IsNumber(rs) || (rs->valuedouble != 429 && rs->valuedouble != 503)))
        return sg_cfg_fail(c, "reject_status", rs, "expected 429 or 503");
    if (rs != NULL)
        out->reject_status = (int)rs->valuedouble;
    if (sg_cfg_int(c, o, "max_inflight", 0, 100000000, defaults != NULL ? defaults->max_inflight : 0, &v) != 0)
        return -1;
    out->max_inflight = (uint32_t)v;
    if (sg_cfg_int(c, o, "weight", 1, 1000, defaults != NULL ? defaults->weight : 1, &v) != 0)
        return -1;
    out->weight = (uint32_t)v;
    if (sg_cfg_bool(c, o, "global", defaults != NULL ? defaults->global : 0, &out->global) != 0)
        return -1;
    /* the shared limit lives in Redis: without it "global" would silently be a per-replica limit */
    if (out->global && !have_redis) /* clients.default is checked first, so the value is always here */
        return sg_cfg_fail(c, "global", cJSON_GetObjectItemCaseSensitive(o, "global"),
                           "needs cache.redis (the shared rate limit is kept in Redis)");
    if (parse_client_trace(cfg, c, o, out, defaults) != 0)
        return -1;
    return parse_budget(c, o, defaults != NULL ? &defaults->budget : NULL, &out->budget);
}

static int parse_clients(sg_config_t *cfg, const cJSON *o, char *err, size_t err_size)
{
    static const char *const keys[] = {"require_key", "trust_client_id_header", "default",         "keys",
                                       "max_tracked", "admin_key_env",          "global_replicas", NULL};
    sg_cfg_t c = {"clients", err, err_size};
    cfg->clients.defaults.weight = 1;
    cfg->clients.defaults.max_wait_ms = 30000;
    cfg->clients.defaults.reject_status = 429;
    cfg->clients.max_tracked = 65536;
    cfg->clients.global_replicas = 1;
    if (o == NULL)
        return 0;
    if (sg_cfg_check_keys(&c, o, keys) != 0 || sg_cfg_bool(&c, o, "require_key", 0, &cfg->clients.require_key) != 0 ||
        sg_cfg_bool(&c, o, "trust_client_id_header", 0, &cfg->clients.trust_client_id_header) != 0)
        return -1;
    int64_t v;
    if (sg_cfg_int(&c, o, "max_tracked", 16, 100000000, 65536, &v) != 0)
        return -1;
    cfg->clients.max_tracked = (size_t)v;
    if (sg_cfg_int(&c, o, "global_replicas", 1, 10000, 1, &v) != 0)
        return -1;
    cfg->clients.global_replicas = (uint32_t)v;
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
    static const char *const keys[] = {"l1_bytes", "redis", "ttl_s", NULL};
    sg_cfg_t c = {"cache", err, err_size};
    int64_t v;
    cfg->cache.l1_bytes = 64u << 20;
    cfg->cache.default_ttl_s = 3600;
    if (o == NULL)
        return 0;
    if (sg_cfg_check_keys(&c, o, keys) != 0)
        return -1;
    if (sg_cfg_int(&c, o, "l1_bytes", 0, (int64_t)1 << 40, 64 << 20, &v) != 0)
        return -1;
    cfg->cache.l1_bytes = (size_t)v;
    if (sg_cfg_int(&c, o, "ttl_s", 1, 365 * 86400, 3600, &v) != 0)
        return -1;
    cfg->cache.default_ttl_s = (uint32_t)v;
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
    static const char *const keys[] = {
        "enabled", "max_sessions", "session_idle_s", "sse_keepalive_s", "require_session", "text_format", NULL};
    static const char *const formats[] = {"search-r1", "results-json", NULL};
    sg_cfg_t c = {"mcp", err, err_size};
    int64_t v;
    if (o != NULL && sg_cfg_check_keys(&c, o, keys) != 0)
        return -1;
    if (sg_cfg_bool(&c, o, "enabled", 1, &cfg->mcp.enabled) != 0 ||
        sg_cfg_bool(&c, o, "require_session", 0, &cfg->mcp.require_session) != 0)
        return -1;
    if (sg_cfg_int(&c, o, "max_sessions", 1, 10000000, 10000, &v) != 0)
        return -1;
    cfg->mcp.max_sessions = (uint32_t)v;
    if (sg_cfg_int(&c, o, "session_idle_s", 1, 86400, 300, &v) != 0)
        return -1;
    cfg->mcp.session_idle_s = (uint32_t)v;
    if (sg_cfg_int(&c, o, "sse_keepalive_s", 1, 3600, 15, &v) != 0)
        return -1;
    cfg->mcp.sse_keepalive_s = (uint32_t)v;
    return sg_cfg_enum(&c, o, "text_format", formats, SG_MCP_TEXT_SEARCH_R1, &cfg->mcp.text_format);
}

/* A route's pace: qps/burst, retries, and the floor a call's remaining deadline must clear. */
static int parse_route_pacing(sg_cfg_t *c, const cJSON *o, sg_backend_conf_t *b)
{
    static const char *const quantiles[] = {"none", "p50", "p90", NULL};
    int64_t v;
    if (sg_cfg_double(c, o, "qps", 0, 1e6, 0, &b->qps) != 0 ||
        sg_cfg_double(c, o, "burst", 1, 1e6, b->qps > 1 ? b->qps : 1, &b->burst) != 0)
        return -1;
    if (sg_cfg_int(c, o, "retries", 0, 10, -1, &v) != 0) /* absent: -1, the plugin's own */
        return -1;
    b->retries = (int32_t)v;
    if (sg_cfg_int(c, o, "min_remaining_ms", 0, 3600000, 10, &v) != 0 ||
        sg_cfg_enum(c, o, "min_remaining_quantile", quantiles, SG_FLOOR_NONE, &b->min_remaining_quantile) != 0)
        return -1;
    b->min_remaining_ms = (uint32_t)v;
    return 0;
}

static int parse_backend(sg_config_t *cfg, const cJSON *o, size_t idx, size_t cfg_index, char *err, size_t err_size)
{
    static const char *const keys[] = {"name",
                                       "plugin",
                                       "config",
                                       "topk",
                                       "timeout_ms",
                                       "max_inflight",
                                       "max_queue",
                                       "chunk",
                                       "cache",
                                       "cache_ttl_s",
                                       "fallback",
                                       "rerank",
                                       "metered",
                                       "budget",
                                       "qps",
                                       "burst",
                                       "retries",
                                       "min_remaining_ms",
                                       "min_remaining_quantile",
                                       "trace",
                                       NULL};
    char path[64];
    snprintf(path, sizeof(path), "backends[%zu]", cfg_index);
    sg_cfg_t c = {path, err, err_size};
    sg_backend_conf_t *b = &cfg->backends[idx];
    int64_t v;
    b->fallback = -1;
    if (sg_cfg_check_keys(&c, o, keys) != 0 || sg_cfg_string(&c, o, "name", 1, NULL, &b->name) != 0 ||
        sg_cfg_string(&c, o, "plugin", 1, NULL, &b->plugin) != 0)
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
    /* the defaults never exceed the limits that bound the keys */
    const int64_t def_topk = cfg->limits.max_topk < 3 ? cfg->limits.max_topk : 3;
    const int64_t def_timeout = cfg->limits.max_deadline_ms < 30000 ? cfg->limits.max_deadline_ms : 30000;
    if (sg_cfg_int(&c, o, "topk", 1, cfg->limits.max_topk, def_topk, &v) != 0)
        return -1;
    b->topk = (uint32_t)v;
    if (sg_cfg_int(&c, o, "timeout_ms", 1, cfg->limits.max_deadline_ms, def_timeout, &v) != 0)
        return -1;
    b->timeout_ms = (uint32_t)v;
    if (sg_cfg_int(&c, o, "max_inflight", 0, 100000000, 0, &v) != 0)
        return -1;
    b->max_inflight = (uint32_t)v;
    if (sg_cfg_int(&c, o, "max_queue", 0, 100000000, 100000, &v) != 0)
        return -1;
    b->max_queue = (uint32_t)v;
    if (sg_cfg_int(&c, o, "chunk", 1, 1000000, 64, &v) != 0)
        return -1;
    b->chunk = (uint32_t)v;
    if (parse_route_pacing(&c, o, b) != 0 || sg_cfg_bool(&c, o, "cache", 1, &b->cache) != 0)
        return -1;
    if (sg_cfg_int(&c, o, "cache_ttl_s", 1, 365 * 86400, cfg->cache.default_ttl_s, &v) != 0)
        return -1;
    b->cache_ttl_s = (uint32_t)v;
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
        sg_listen_conf_t *l = add_listener(cfg, c->path, policy);
        int64_t v;
        if (sg_cfg_string(c, o, "host", 0, "127.0.0.1", &l->host) != 0 || sg_cfg_int(c, o, "port", 0, 65535, 8000, &v) != 0 ||
            sg_cfg_path(c, o, "address_file", 0, cfg->base_dir, &l->address_file) != 0)
            return -1;
        l->port = (uint16_t)v;
    }
    return has_unix ? parse_unix(cfg, c, o, policy) : 0;
}

static int parse_listen_entry(sg_config_t *cfg, const cJSON *o, const char *where, char *err, size_t err_size)
{
    static const char *const keys[] = {"host",
                                       "port",
                                       "unix",
                                       "unix_mode",
                                       "address_file",
                                       "allowed_hosts",
                                       "allowed_origins",
                                       "h2c",
                                       "h2c_max_body_bytes",
                                       "read_timeout_ms",
                                       NULL};
    sg_cfg_t c = {where, err, err_size};
    if (o != NULL && sg_cfg_check_keys(&c, o, keys) != 0)
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

/* listen, threads, log_level, shutdown_drain_ms, shutdown_grace_ms, plugin_dir */
static int parse_server(sg_config_t *cfg, const cJSON *root, char *err, size_t err_size)
{
    static const char *const levels[] = {"error", "warn", "info", "debug", NULL};
    sg_cfg_t c = {"", err, err_size};
    int64_t v;
    if (parse_listen(cfg, cJSON_GetObjectItemCaseSensitive(root, "listen"), err, err_size) != 0)
        return -1;
    if (sg_cfg_int(&c, root, "threads", 0, 1024, 0, &v) != 0)
        return -1;
    cfg->threads = (int)v;
    if (sg_cfg_enum(&c, root, "log_level", levels, SG_LL_INFO, &cfg->log_level) != 0)
        return -1;
    if (sg_cfg_int(&c, root, "shutdown_drain_ms", 0, 600000, 0, &v) != 0)
        return -1;
    cfg->shutdown_drain_ms = (uint32_t)v;
    if (sg_cfg_int(&c, root, "shutdown_grace_ms", 0, 600000, 5000, &v) != 0)
        return -1;
    cfg->shutdown_grace_ms = (uint32_t)v;
    return sg_cfg_path(&c, root, "plugin_dir", 0, cfg->base_dir, &cfg->plugin_dir);
}

/* The bounds of answers: bytes per answer, bytes held by the process, the wait for room, the
 * write timeout (docs/operations.md, "Limits and abuse"). */
static int parse_response_limits(sg_config_t *cfg, const cJSON *lim, sg_cfg_t *cm)
{
    int64_t v;
    if (sg_cfg_int(cm, lim, "max_response_bytes", 1024, (int64_t)1 << 40, (int64_t)32 << 20, &v) != 0)
        return -1;
    cfg->limits.max_response_bytes = (uint64_t)v;
    int64_t def = (int64_t)512 << 20;
    if (def < v)
        def = v;
    if (sg_cfg_int(cm, lim, "max_response_bytes_inflight", 1024, (int64_t)1 << 42, def, &v) != 0)
        return -1;
    if ((uint64_t)v < cfg->limits.max_response_bytes)
        return sg_cfg_fail(cm, "max_response_bytes_inflight", cJSON_GetObjectItemCaseSensitive(lim, "max_response_bytes_inflight"),
                           "must be at least limits.max_response_bytes");
    cfg->limits.max_response_bytes_inflight = (uint64_t)v;
    if (sg_cfg_int(cm, lim, "response_wait_ms", 0, 600000, 2000, &v) != 0)
        return -1;
    cfg->limits.response_wait_ms = (uint32_t)v;
    if (sg_cfg_int(cm, lim, "write_timeout_ms", 1, 3600000, 30000, &v) != 0)
        return -1;
    cfg->limits.write_timeout_ms = (uint32_t)v;
    return 0;
}

static int parse_limits(sg_config_t *cfg, const cJSON *lim, char *err, size_t err_size)
{
    static const char *const limit_keys[] = {"max_body_bytes",
                                             "max_queries",
                                             "max_query_bytes",
                                             "max_topk",
                                             "max_deadline_ms",
                                             "max_response_bytes",
                                             "max_response_bytes_inflight",
                                             "response_wait_ms",
                                             "write_timeout_ms",
                                             NULL};
    sg_cfg_t cm = {"limits", err, err_size};
    int64_t v;
    if (lim != NULL && sg_cfg_check_keys(&cm, lim, limit_keys) != 0)
        return -1;
    if (sg_cfg_int(&cm, lim, "max_body_bytes", 1024, (int64_t)1 << 30, 16 << 20, &v) != 0)
        return -1;
    cfg->limits.max_body_bytes = (size_t)v;
    if (sg_cfg_int(&cm, lim, "max_queries", 1, 1000000, 10000, &v) != 0)
        return -1;
    cfg->limits.max_queries = (uint32_t)v;
    if (sg_cfg_int(&cm, lim, "max_query_bytes", 1, 1 << 20, 8192, &v) != 0)
        return -1;
    cfg->limits.max_query_bytes = (uint32_t)v;
    if (sg_cfg_int(&cm, lim, "max_topk", 1, 100000, 1000, &v) != 0)
        return -1;
    cfg->limits.max_topk = (uint32_t)v;
    if (sg_cfg_int(&cm, lim, "max_deadline_ms", 1, 3600000, 600000, &v) != 0)
        return -1;
    cfg->limits.max_deadline_ms = (uint32_t)v;
    return parse_response_limits(cfg, lim, &cm);
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
        if (sg_fusion_conf_is(it)) { /* a fusion route (fusion.c) */
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
    static const char *const keys[] = {
        "listen",  "threads", "log_level",         "plugin_dir",        "limits", "backends", "default_backend",
        "clients", "cache",   "shutdown_drain_ms", "shutdown_grace_ms", "mcp",    NULL};
    memset(cfg, 0, sizeof(*cfg));
    cfg->base_dir = sg_strdup(base_dir != NULL ? base_dir : ".");
    cfg->default_backend = -1;
    sg_cfg_t c = {"", err, err_size};
    cJSON *root = sg_cfg_parse(&c, json, len); /* strict: one document, no duplicate key anywhere */
    if (root == NULL)
        return -1;
    int ret = sg_cfg_check_keys(&c, root, keys) != 0 || parse_server(cfg, root, err, err_size) != 0 ||
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
