/*
 * fuzz_config.c -- libFuzzer harness for the gateway's config loader (gateway/config/config.c,
 * sg_config_parse: what `searchgate --config` and `--check` read). The input is the file. Checks:
 * never crashes or leaks (the config is freed after success and after failure); a failure has a
 * message; a success holds every cross-key rule of configuration.md: at least one backend, names
 * unique and made of [A-Za-z0-9_-], default_backend and fallbacks name other configured backends,
 * topk within limits.max_topk, timeouts within limits.max_deadline_ms, require_key needs a keyed
 * client, client ids unique and keys present and distinct, a rate needs a burst >= 1, every
 * backend's config is a serialised JSON object; and the file itself was one strict JSON document
 * (RFC 8259, nothing after it) with no key given twice in any object.
 */
#include "config.h"
#include "json.h"
#include "fuzz_util.h"

#include <cJSON.h>

/* 1 when some object in `v` has a key twice (a plain pairwise look: inputs are small). */
static int has_duplicate_key(const cJSON *v)
{
    for (const cJSON *a = v->child; a != NULL; a = a->next) {
        if (cJSON_IsObject(v))
            for (const cJSON *b = a->next; b != NULL; b = b->next)
                if (strcmp(a->string, b->string) == 0)
                    return 1;
        if (has_duplicate_key(a))
            return 1;
    }
    return 0;
}

/* What the loader accepted was one strict document, without duplicate keys. */
static void check_document(const char *json, size_t len)
{
    size_t bad_at;
    const char *why;
    long start = sg_json_validate(json, len, &bad_at, &why);
    FUZZ_CHECK(start >= 0);
    cJSON *root = cJSON_ParseWithLength(json + start, len - (size_t)start);
    FUZZ_CHECK(root != NULL && !has_duplicate_key(root));
    cJSON_Delete(root);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* key_env names that the seeds use, so keyed clients can be accepted */
    setenv("SG_FUZZ_KEY_A", "key-a", 1);
    setenv("SG_FUZZ_KEY_B", "key-b", 1);
    return 0;
}

static void check_client(const sg_client_conf_t *c, int keyed)
{
    FUZZ_CHECK(c->rate >= 0 && c->burst >= 0);
    FUZZ_CHECK(c->rate == 0 || c->burst >= 1);
    FUZZ_CHECK(c->mode == SG_RL_QUEUE || c->mode == SG_RL_REJECT);
    FUZZ_CHECK(c->weight >= 1 && c->weight <= 1000);
    FUZZ_CHECK(c->global == 0 || c->global == 1);
    if (keyed)
        FUZZ_CHECK(c->id != NULL && c->key != NULL && c->key[0] != '\0');
}

static void check_config(const sg_config_t *cfg)
{
    FUZZ_CHECK(cfg->base_dir != NULL); /* plugin_dir NULL: beside the binary */
    FUZZ_CHECK(cfg->n_listen >= 1 && cfg->n_listen <= 2 * SG_LISTEN_MAX);
    int any_h2c = 0;
    for (size_t i = 0; i < cfg->n_listen; ++i) { /* each a TCP listener or a Unix domain socket */
        const sg_listen_conf_t *l = &cfg->listen[i];
        FUZZ_CHECK((l->host != NULL) != (l->unix_path != NULL));
        FUZZ_CHECK(l->h2c == 0 || l->h2c == 1); /* the default resolved from clients.require_key */
        for (size_t k = 0; k < l->n_allowed_hosts; ++k)
            FUZZ_CHECK(l->allowed_hosts[k] != NULL && l->allowed_hosts[k][0] != '\0');
        for (size_t k = 0; k < l->n_allowed_origins; ++k)
            FUZZ_CHECK(l->allowed_origins[k] != NULL && l->allowed_origins[k][0] != '\0');
        any_h2c |= l->h2c;
    }
    FUZZ_CHECK(cfg->listen_common.any_h2c == any_h2c);
    FUZZ_CHECK(cfg->listen_common.read_timeout_ms >= 100 && cfg->listen_common.read_timeout_ms <= 600000);
    FUZZ_CHECK(cfg->listen_common.h2c_max_body_bytes >= 1024 && cfg->listen_common.h2c_max_body_bytes <= ((size_t)1 << 30));
    FUZZ_CHECK(cfg->threads >= 0 && cfg->threads <= 1024);
    FUZZ_CHECK(cfg->log_level >= 0 && cfg->log_level <= 3);
    FUZZ_CHECK(cfg->limits.max_body_bytes >= 1024 && cfg->limits.max_queries >= 1 && cfg->limits.max_query_bytes >= 1);
    FUZZ_CHECK(cfg->limits.max_topk >= 1 && cfg->limits.max_deadline_ms >= 1);
    FUZZ_CHECK(cfg->n_backends >= 1 && cfg->backends != NULL);
    FUZZ_CHECK(cfg->default_backend >= 0 && (size_t)cfg->default_backend < cfg->n_backends);
    for (size_t i = 0; i < cfg->n_backends; ++i) {
        const sg_backend_conf_t *b = &cfg->backends[i];
        FUZZ_CHECK(b->name != NULL && b->name[0] != '\0' && b->plugin != NULL);
        for (const char *p = b->name; *p != '\0'; ++p)
            FUZZ_CHECK((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_');
        FUZZ_CHECK(sg_config_find_backend(cfg, b->name, strlen(b->name)) == (int)i); /* unique */
        FUZZ_CHECK(b->topk >= 1 && b->topk <= cfg->limits.max_topk);
        FUZZ_CHECK(b->timeout_ms >= 1 && b->timeout_ms <= cfg->limits.max_deadline_ms);
        FUZZ_CHECK(b->chunk >= 1 && b->cache_ttl_s >= 1);
        FUZZ_CHECK(b->fallback == -1 || (b->fallback >= 0 && (size_t)b->fallback < cfg->n_backends && (size_t)b->fallback != i));
        FUZZ_CHECK(b->config_json != NULL);
        cJSON *o = cJSON_Parse(b->config_json);
        FUZZ_CHECK(cJSON_IsObject(o));
        cJSON_Delete(o);
        FUZZ_CHECK((strchr(b->plugin, '/') != NULL) == (b->plugin_path != NULL));
    }
    check_client(&cfg->clients.defaults, 0);
    FUZZ_CHECK(!cfg->clients.require_key || cfg->clients.n_keyed >= 1);
    for (size_t i = 0; i < cfg->clients.n_keyed; ++i) {
        check_client(&cfg->clients.keyed[i], 1);
        for (size_t j = 0; j < i; ++j) {
            FUZZ_CHECK(strcmp(cfg->clients.keyed[i].id, cfg->clients.keyed[j].id) != 0);
            FUZZ_CHECK(strcmp(cfg->clients.keyed[i].key, cfg->clients.keyed[j].key) != 0);
        }
    }
    FUZZ_CHECK(cfg->clients.max_tracked >= 16);
    const sg_redis_conf_t *rc = &cfg->cache.redis;
    if (rc->enabled) {
        FUZZ_CHECK(rc->timeout_ms >= 1 && cfg->cache.redis_prefix != NULL);
        FUZZ_CHECK((rc->n_sentinels > 0) == (rc->node.host == NULL) && (rc->n_sentinels > 0) == (rc->master != NULL));
        FUZZ_CHECK(rc->node.host == NULL || (rc->node.port >= 1 && strlen(rc->node.host) <= 255));
        for (size_t i = 0; i < rc->n_sentinels; ++i)
            FUZZ_CHECK(rc->sentinels[i].port >= 1 && rc->sentinels[i].host[0] != '\0' && strlen(rc->sentinels[i].host) <= 255);
        FUZZ_CHECK(rc->username == NULL || rc->password != NULL);
        FUZZ_CHECK(rc->sentinel_username == NULL || rc->sentinel_password != NULL);
    }
    FUZZ_CHECK(cfg->cache.default_ttl_s >= 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *json = fuzz_copy(data, size);
    sg_config_t cfg;
    char err[1024];
    err[0] = '\0';
    if (sg_config_parse(&cfg, json, size, "/nonexistent/fuzz", err, sizeof(err)) == 0) {
        check_document(json, size);
        check_config(&cfg);
    } else
        FUZZ_CHECK(err[0] != '\0');
    sg_config_free(&cfg);
    free(json);
    return 0;
}
