/*
 * redis_conf.c -- cache.redis: reading it, describing it for the log, and checking it against the
 * real servers for `searchgate --check`.
 *
 * The password is read from the environment variable `password_env` names (never from the file),
 * so a config can be shared and committed; only the variable's name ever reaches a log line or an
 * error message. The --check probe uses hiredis' blocking API: it runs before the loops exist, on
 * the main thread, each step bounded by max(timeout_ms, 1 s).
 */
#include "redis_conf.h"
#include "cfg.h"

#include <hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SENTINELS 16
#define DEFAULT_SENTINEL_PORT 26379
#define MIN_CHECK_TIMEOUT_MS 1000

static void wipe(char *s)
{
    if (s != NULL) {
        memset(s, 0, strlen(s));
        free(s);
    }
}

void sg_redis_conf_free(sg_redis_conf_t *conf)
{
    free(conf->node.host);
    free(conf->username);
    wipe(conf->password);
    free(conf->password_env);
    for (size_t i = 0; i < conf->n_sentinels; ++i)
        free(conf->sentinels[i].host);
    free(conf->sentinels);
    free(conf->master);
    free(conf->sentinel_username);
    wipe(conf->sentinel_password);
    free(conf->sentinel_password_env);
    memset(conf, 0, sizeof(*conf));
}

static int present(const cJSON *r, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
    return v != NULL && !cJSON_IsNull(v);
}

/* "host:port", "host" (the default port) or "[v6]:port" into `out`. Returns 0, or -1 with `why`. */
static int parse_node(const char *s, sg_redis_node_t *out, const char **why)
{
    const char *host = s, *host_end, *colon;
    if (s[0] == '[') {
        host = s + 1;
        host_end = strchr(host, ']');
        if (host_end == NULL || (host_end[1] != '\0' && host_end[1] != ':')) {
            *why = "expected \"host:port\" (an IPv6 address in brackets: \"[::1]:26379\")";
            return -1;
        }
        colon = host_end[1] == ':' ? host_end + 1 : NULL;
    } else {
        colon = strchr(s, ':');
        if (colon != NULL && strchr(colon + 1, ':') != NULL) {
            *why = "an IPv6 address goes in brackets: \"[::1]:26379\"";
            return -1;
        }
        host_end = colon != NULL ? colon : s + strlen(s);
    }
    long port = DEFAULT_SENTINEL_PORT;
    if (colon != NULL) {
        char *end;
        port = strtol(colon + 1, &end, 10);
        if (colon[1] == '\0' || *end != '\0' || port < 1 || port > 65535) {
            *why = "expected \"host:port\" with a port in [1, 65535]";
            return -1;
        }
    }
    if (host_end == host || host_end - host > 255) {
        *why = "expected \"host:port\" with a host of 1 to 255 bytes";
        return -1;
    }
    size_t n = (size_t)(host_end - host);
    out->host = malloc(n + 1);
    if (out->host == NULL)
        abort();
    memcpy(out->host, host, n);
    out->host[n] = '\0';
    out->port = (uint16_t)port;
    return 0;
}

static int read_sentinels(sg_redis_conf_t *out, sg_cfg_t *c, const cJSON *r)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(r, "sentinels");
    int n = cJSON_GetArraySize(list);
    if (!cJSON_IsArray(list) || n < 1 || n > MAX_SENTINELS)
        return sg_cfg_fail(c, "sentinels", list, "expected an array of 1 to %d \"host:port\" strings", MAX_SENTINELS);
    out->sentinels = calloc((size_t)n, sizeof(*out->sentinels));
    if (out->sentinels == NULL)
        abort();
    for (const cJSON *it = list->child; it != NULL; it = it->next) {
        const char *why = "expected a \"host:port\" string";
        if (!cJSON_IsString(it) || parse_node(it->valuestring, &out->sentinels[out->n_sentinels], &why) != 0) {
            char key[32];
            snprintf(key, sizeof(key), "sentinels[%zu]", out->n_sentinels);
            return sg_cfg_fail(c, key, it, "%s", why);
        }
        ++out->n_sentinels;
    }
    if (sg_cfg_string(c, r, "master", 1, NULL, &out->master) != 0)
        return -1;
    if (out->master[0] == '\0' || strpbrk(out->master, " \t\r\n") != NULL)
        return sg_cfg_fail(c, "master", cJSON_GetObjectItemCaseSensitive(r, "master"),
                           "expected the master's name as the sentinels know it (sentinel monitor <name> ...)");
    return 0;
}

/* `user_key` and `pass_key` (an environment variable's name) of one AUTH: a user needs a password. */
static int read_auth(sg_cfg_t *c, const cJSON *r, const char *user_key, const char *pass_key, char **user, char **pass,
                     char **pass_env)
{
    if (sg_cfg_string(c, r, user_key, 0, NULL, user) != 0 || sg_cfg_string(c, r, pass_key, 0, NULL, pass_env) != 0 ||
        sg_cfg_secret_env(c, r, pass_key, 0, pass) != 0)
        return -1;
    if (*user != NULL && (*user[0] == '\0' || strpbrk(*user, " \t\r\n") != NULL))
        return sg_cfg_fail(c, user_key, cJSON_GetObjectItemCaseSensitive(r, user_key), "expected an ACL user name");
    if (*user != NULL && *pass == NULL)
        return sg_cfg_fail(c, user_key, NULL, "needs %s (an ACL user authenticates with a password)", pass_key);
    return 0;
}

/* cache.redis (docs/configuration.md, "cache.redis"). The table reads host and port (one server)
 * and then timeout_ms and db; the rest is read by hand: the sentinels and the master (Sentinel
 * mode), each user with the variable that holds its password (read_auth), and prefix, which is
 * the cache's (config.c reads it). */
static const sg_cfg_key_t redis_config[] = {
    SG_CFG_STRING(sg_redis_conf_t, node.host, "host", 0, "127.0.0.1"),
    SG_CFG_INT(sg_redis_conf_t, node.port, "port", 1, 65535, 6379),
    SG_CFG_INT(sg_redis_conf_t, timeout_ms, "timeout_ms", 1, 60000, 50),
    SG_CFG_CUSTOM_KEY("prefix"),
    SG_CFG_CUSTOM_KEY("username"),
    SG_CFG_CUSTOM_KEY("password_env"),
    SG_CFG_INT(sg_redis_conf_t, db, "db", 0, 2147483647, 0),
    SG_CFG_CUSTOM_KEY("sentinels"),
    SG_CFG_CUSTOM_KEY("master"),
    SG_CFG_CUSTOM_KEY("sentinel_username"),
    SG_CFG_CUSTOM_KEY("sentinel_password_env"),
};
enum { REDIS_NODE_KEYS = 2 }; /* host and port: the first entries, read only without sentinels */

int sg_redis_conf_read(sg_redis_conf_t *out, sg_cfg_t *c, const cJSON *r)
{
    memset(out, 0, sizeof(*out));
    if (sg_cfg_check_table(c, r, redis_config, SG_CFG_N(redis_config)) != 0)
        return -1;
    out->enabled = 1;
    if (present(r, "sentinels")) {
        if (present(r, "host") || present(r, "port"))
            return sg_cfg_fail(c, present(r, "host") ? "host" : "port", NULL,
                               "not with sentinels: the sentinels name the master's address (remove host and port)");
        if (read_sentinels(out, c, r) != 0)
            return -1;
        if (read_auth(c, r, "sentinel_username", "sentinel_password_env", &out->sentinel_username, &out->sentinel_password,
                      &out->sentinel_password_env) != 0)
            return -1;
    } else {
        static const char *const sentinel_only[] = {"master", "sentinel_username", "sentinel_password_env", NULL};
        for (size_t i = 0; sentinel_only[i] != NULL; ++i)
            if (present(r, sentinel_only[i]))
                return sg_cfg_fail(c, sentinel_only[i], NULL, "needs sentinels (it is a Sentinel setting)");
        if (sg_cfg_read_ex(c, r, redis_config, REDIS_NODE_KEYS, NULL, out, SG_CFG_KEYS_CHECKED) != 0)
            return -1;
        if (strlen(out->node.host) > 255)
            return sg_cfg_fail(c, "host", cJSON_GetObjectItemCaseSensitive(r, "host"),
                               "expected a host name or address of 1 to 255 bytes");
    }
    if (sg_cfg_read_ex(c, r, redis_config + REDIS_NODE_KEYS, SG_CFG_N(redis_config) - REDIS_NODE_KEYS, NULL, out,
                       SG_CFG_KEYS_CHECKED) != 0)
        return -1;
    return read_auth(c, r, "username", "password_env", &out->username, &out->password, &out->password_env);
}

void sg_redis_conf_describe(const sg_redis_conf_t *conf, char *out, size_t size)
{
    size_t off = 0;
#define ADD(...) off += (size_t)snprintf(out + off, off < size ? size - off : 0, __VA_ARGS__)
    if (conf->n_sentinels > 0) {
        ADD("Redis master \"%s\" via sentinel%s ", conf->master, conf->n_sentinels > 1 ? "s" : "");
        for (size_t i = 0; i < conf->n_sentinels; ++i)
            ADD(strchr(conf->sentinels[i].host, ':') != NULL ? "%s[%s]:%u" : "%s%s:%u", i != 0 ? "," : "", conf->sentinels[i].host,
                conf->sentinels[i].port);
    } else {
        ADD(strchr(conf->node.host, ':') != NULL ? "Redis [%s]:%u" : "Redis %s:%u", conf->node.host, conf->node.port);
    }
#undef ADD
}

void sg_redis_conf_describe_setup(const sg_redis_conf_t *conf, char *out, size_t size)
{
    size_t off = 0;
#define ADD(...) off += (size_t)snprintf(out + off, off < size ? size - off : 0, __VA_ARGS__)
    ADD("db %u, ", conf->db);
    if (conf->password != NULL)
        ADD("user \"%s\", password from $%s", conf->username != NULL ? conf->username : "default", conf->password_env);
    else
        ADD("no password");
    if (conf->sentinel_password != NULL)
        ADD("; sentinels: user \"%s\", password from $%s", conf->sentinel_username != NULL ? conf->sentinel_username : "default",
            conf->sentinel_password_env);
#undef ADD
}

/* ---- searchgate --check ---- */

typedef struct st_probe_t {
    const sg_redis_conf_t *conf;
    struct timeval tv;
    char *msg;
    size_t size;
} probe_t;

static redisContext *probe_connect(probe_t *p, const char *what, const char *host, uint16_t port)
{
    redisContext *c = redisConnectWithTimeout(host, port, p->tv);
    if (c == NULL || c->err) {
        snprintf(p->msg, p->size, "%s %s:%u is not reachable (%s)", what, host, port, c != NULL ? c->errstr : "out of memory");
        if (c != NULL)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, p->tv);
    return c;
}

/* Runs one command. Returns its reply (the caller frees it), or NULL with p->msg saying why. */
static redisReply *probe_command(probe_t *p, redisContext *c, const char *what, int argc, const char **argv)
{
    redisReply *rep = redisCommandArgv(c, argc, argv, NULL);
    if (rep == NULL)
        snprintf(p->msg, p->size, "%s did not answer %s (%s)", what, argv[0], c->errstr[0] != '\0' ? c->errstr : "no reply");
    return rep;
}

/* AUTH [user] password when there is a password. Returns SG_REDIS_CHECK_*. */
static int probe_auth(probe_t *p, redisContext *c, const char *what, const char *user, const char *pass, const char *env,
                      const char *keys)
{
    if (pass == NULL)
        return SG_REDIS_CHECK_OK;
    const char *argv[3] = {"AUTH", user != NULL ? user : pass, pass};
    redisReply *rep = probe_command(p, c, what, user != NULL ? 3 : 2, argv);
    if (rep == NULL)
        return SG_REDIS_CHECK_UNREACHABLE;
    int st = SG_REDIS_CHECK_OK;
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(p->msg, p->size, "%s refused AUTH as user \"%s\" (%s): check %s and $%s", what, user != NULL ? user : "default",
                 rep->str, keys, env);
        st = SG_REDIS_CHECK_REFUSED;
    }
    freeReplyObject(rep);
    return st;
}

/* Asks one sentinel for the master's address. SG_REDIS_CHECK_OK fills host/port. */
static int probe_sentinel(probe_t *p, const sg_redis_node_t *s, char *host, size_t host_size, uint16_t *port)
{
    const sg_redis_conf_t *conf = p->conf;
    char what[300];
    snprintf(what, sizeof(what), "sentinel %s:%u", s->host, s->port);
    redisContext *c = probe_connect(p, "sentinel", s->host, s->port);
    if (c == NULL)
        return SG_REDIS_CHECK_UNREACHABLE;
    int st = probe_auth(p, c, what, conf->sentinel_username, conf->sentinel_password, conf->sentinel_password_env,
                        "cache.redis.sentinel_username");
    redisReply *rep = NULL;
    if (st == SG_REDIS_CHECK_OK) {
        const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", conf->master};
        rep = probe_command(p, c, what, 3, argv);
        st = rep == NULL ? SG_REDIS_CHECK_UNREACHABLE : SG_REDIS_CHECK_REFUSED;
    }
    if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->type == REDIS_REPLY_STRING &&
        rep->element[1]->type == REDIS_REPLY_STRING) {
        snprintf(host, host_size, "%s", rep->element[0]->str);
        long v = strtol(rep->element[1]->str, NULL, 10);
        *port = (uint16_t)(v > 0 && v < 65536 ? v : 0);
        st = *port != 0 ? SG_REDIS_CHECK_OK : SG_REDIS_CHECK_REFUSED;
    } else if (rep != NULL && rep->type == REDIS_REPLY_ERROR) {
        snprintf(p->msg, p->size, "%s answered %s (check cache.redis.sentinel_username/sentinel_password_env)", what, rep->str);
    } else if (rep != NULL) {
        snprintf(p->msg, p->size, "%s does not know a master named \"%s\" (cache.redis.master)", what, conf->master);
    }
    freeReplyObject(rep);
    redisFree(c);
    return st;
}

/* One handshake step on the server: SELECT, ROLE or PING. Returns SG_REDIS_CHECK_*. */
static int probe_step(probe_t *p, redisContext *c, const char *what, int argc, const char **argv)
{
    redisReply *rep = probe_command(p, c, what, argc, argv);
    if (rep == NULL)
        return SG_REDIS_CHECK_UNREACHABLE;
    int st = SG_REDIS_CHECK_OK;
    if (rep->type == REDIS_REPLY_ERROR) {
        if (strncmp(rep->str, "NOAUTH", 6) == 0 && p->conf->password == NULL)
            snprintf(p->msg, p->size, "%s requires a password (%s) and cache.redis has no password_env", what, rep->str);
        else
            snprintf(p->msg, p->size, "%s refused %s%s%s (%s)", what, argv[0], argc > 1 ? " " : "", argc > 1 ? argv[1] : "",
                     rep->str);
        st = SG_REDIS_CHECK_REFUSED;
    } else if (strcmp(argv[0], "ROLE") == 0 &&
               (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 || rep->element[0]->type != REDIS_REPLY_STRING ||
                strcmp(rep->element[0]->str, "master") != 0)) {
        snprintf(p->msg, p->size, "%s, which the sentinels name as master \"%s\", is not a master (ROLE: %s)", what,
                 p->conf->master,
                 rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 && rep->element[0]->type == REDIS_REPLY_STRING
                     ? rep->element[0]->str
                     : "?");
        st = SG_REDIS_CHECK_REFUSED;
    }
    freeReplyObject(rep);
    return st;
}

/* The server at host:port, as a loop's connection sets itself up. */
static int probe_server(probe_t *p, const char *host, uint16_t port)
{
    const sg_redis_conf_t *conf = p->conf;
    char what[300], db[16];
    snprintf(what, sizeof(what), "Redis %s:%u", host, port);
    redisContext *c = probe_connect(p, "Redis", host, port);
    if (c == NULL)
        return SG_REDIS_CHECK_UNREACHABLE;
    int st = probe_auth(p, c, what, conf->username, conf->password, conf->password_env, "cache.redis.username");
    snprintf(db, sizeof(db), "%u", conf->db);
    const char *select[] = {"SELECT", db}, *role[] = {"ROLE"}, *ping[] = {"PING"};
    if (st == SG_REDIS_CHECK_OK && conf->db != 0)
        st = probe_step(p, c, what, 2, select);
    if (st == SG_REDIS_CHECK_OK && conf->n_sentinels > 0)
        st = probe_step(p, c, what, 1, role);
    if (st == SG_REDIS_CHECK_OK)
        st = probe_step(p, c, what, 1, ping);
    redisFree(c);
    return st;
}

int sg_redis_check(const sg_redis_conf_t *conf, char *msg, size_t size)
{
    uint32_t ms = conf->timeout_ms > MIN_CHECK_TIMEOUT_MS ? conf->timeout_ms : MIN_CHECK_TIMEOUT_MS;
    probe_t p = {conf, {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000}, msg, size};
    msg[0] = '\0';
    if (conf->n_sentinels == 0) {
        int st = probe_server(&p, conf->node.host, conf->node.port);
        if (st == SG_REDIS_CHECK_OK)
            snprintf(msg, size, "Redis %s:%u answers and accepts the gateway's connection set-up", conf->node.host,
                     conf->node.port);
        return st;
    }
    char host[256], first_msg[512] = "", skipped[1200] = "", server_msg[512] = "";
    uint16_t port = 0;
    int refused = 0, server_st = SG_REDIS_CHECK_OK;
    /* like a loop: a sentinel that names a server failing the set-up (a replica: a stale view) is
     * passed over for the next one; a later success says which was passed over */
    for (size_t i = 0; i < conf->n_sentinels; ++i) {
        int st = probe_sentinel(&p, &conf->sentinels[i], host, sizeof(host), &port);
        if (st == SG_REDIS_CHECK_OK) {
            char from[300];
            snprintf(from, sizeof(from), "%s:%u", conf->sentinels[i].host, conf->sentinels[i].port);
            st = probe_server(&p, host, port);
            if (st == SG_REDIS_CHECK_OK) {
                snprintf(msg, size, "Redis master \"%s\" is %s:%u (sentinel %s); it answers as master%s", conf->master, host, port,
                         from, skipped);
                return st;
            }
            if (skipped[0] == '\0') {
                snprintf(skipped, sizeof(skipped), "; but sentinel %s named %s:%u: %.512s", from, host, port, msg);
                snprintf(server_msg, sizeof(server_msg), "%s", msg);
                server_st = st;
            }
            continue;
        }
        if (first_msg[0] == '\0' || (st == SG_REDIS_CHECK_REFUSED && !refused))
            snprintf(first_msg, sizeof(first_msg), "%s", msg);
        refused |= st == SG_REDIS_CHECK_REFUSED;
    }
    if (server_msg[0] != '\0') { /* a sentinel named a server: what that server did is the news */
        snprintf(msg, size, "%s", server_msg);
        return server_st;
    }
    snprintf(msg, size, "%s%s", conf->n_sentinels > 1 ? "no sentinel named the master: " : "", first_msg);
    return refused ? SG_REDIS_CHECK_REFUSED : SG_REDIS_CHECK_UNREACHABLE;
}
