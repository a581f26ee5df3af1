/*
 * redis_conf.h -- where and how the gateway reaches Redis (the config's cache.redis): one server,
 * or the master of a Sentinel-monitored group; optional ACL user, password (from an environment
 * variable) and database. Read once at start-up; the loops' connections (redis.h) and the
 * --check probe use it. Kept free of hiredis and h2o so that the config header can embed it.
 */
#ifndef SG_LIB_REDIS_CONF_H
#define SG_LIB_REDIS_CONF_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;
struct st_sg_cfg_t;

/** A host and a port. */
typedef struct st_sg_redis_node_t {
    char *host;
    uint16_t port;
} sg_redis_node_t;

/** cache.redis. Strings are malloc'ed and owned by the struct (sg_redis_conf_free). */
typedef struct st_sg_redis_conf_t {
    int enabled;          /* 0: no Redis (the rest is empty) */
    sg_redis_node_t node; /* the server; unused (host NULL) with sentinels */
    uint32_t timeout_ms;  /* a command not answered in time is a miss */
    uint32_t db;          /* SELECTed on every connection when not 0 */
    char *username;       /* ACL user (AUTH user pass); NULL: the default user */
    char *password;       /* the value of password_env; NULL: no AUTH. Never logged or shown */
    char *password_env;   /* the variable's name, for messages */
    sg_redis_node_t *sentinels;
    size_t n_sentinels;                                                  /* > 0: Sentinel mode, the master is discovered */
    char *master;                                                        /* the master's name in the sentinels (Sentinel mode) */
    char *sentinel_username, *sentinel_password, *sentinel_password_env; /* the sentinels' own AUTH */
} sg_redis_conf_t;

/**
 * Reads the cache.redis object `r` (every key but `prefix`, which the cache reads) into `out`,
 * with the messages of lib/cfg.h. `c` is the "cache.redis" reader. Returns 0 or -1.
 */
int sg_redis_conf_read(sg_redis_conf_t *out, struct st_sg_cfg_t *c, const struct cJSON *r);
/** Frees the strings (the passwords are wiped first) and zeroes the struct. */
void sg_redis_conf_free(sg_redis_conf_t *conf);
/** Where, for the log: `Redis 127.0.0.1:6379` or `Redis master "mymaster" via sentinels a:26379,b:26379`. */
void sg_redis_conf_describe(const sg_redis_conf_t *conf, char *out, size_t size);
/** How each connection is set up, for the log, never with a secret: `db 2, user "sg", password from $SG_REDIS_PASSWORD`. */
void sg_redis_conf_describe_setup(const sg_redis_conf_t *conf, char *out, size_t size);

enum { SG_REDIS_CHECK_OK = 0, SG_REDIS_CHECK_UNREACHABLE = 1, SG_REDIS_CHECK_REFUSED = -1 };

/**
 * searchgate --check: connects the way the loops will (blocking, each step bounded by
 * max(timeout_ms, 1 s)): the sentinels (AUTH, SENTINEL get-master-addr-by-name), then the server
 * (AUTH, SELECT, ROLE with sentinels, PING). Returns SG_REDIS_CHECK_OK (`msg` says what answered),
 * SG_REDIS_CHECK_UNREACHABLE (nothing answered: a start would bypass Redis until it does) or
 * SG_REDIS_CHECK_REFUSED (it answered and refused: wrong credentials, database, master name, or
 * the sentinels' master is not a master). Main thread, before the loops run.
 */
int sg_redis_check(const sg_redis_conf_t *conf, char *msg, size_t size);

#endif
