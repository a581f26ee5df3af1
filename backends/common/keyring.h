/*
 * keyring.h -- several API keys for one paid upstream, used round robin, where a key the upstream
 * refuses (a revoked key, an exhausted balance, a per-key rate limit) rests for a while and the
 * others carry the load. Labs spread their quota this way: the environment variable named in the
 * config holds "KEY1|KEY2|KEY3".
 *
 * Every function after init is lock-free and callable from any thread (the engine thread picks and
 * rests keys, stats() reads the counters). Keys never appear in metrics or messages: a key is
 * named by its 1-based position in the variable ("key 2 of 3"). Part of the static library sg_http.
 */
#ifndef SG_BACKENDS_COMMON_KEYRING_H
#define SG_BACKENDS_COMMON_KEYRING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cfg.h"
#include "sg_backend.h"

/** The most keys one variable may hold. */
#define SG_KEYRING_MAX 64

typedef struct st_sg_keyring_key_t {
    char *secret;                   /* the key itself: never logged, never in a message */
    char *header;                   /* the request header line that carries it */
    _Atomic uint64_t rest_until_ms; /* resting while now < this (host->now_ms time); 0 = never rested */
    _Atomic long rest_status;       /* the HTTP status that rested it last */
    atomic_uint_fast64_t calls, failures, rests;
} sg_keyring_key_t;

typedef struct st_sg_keyring_t {
    char *env; /* the variable's name, for messages; NULL when no key is configured */
    sg_keyring_key_t *keys;
    size_t n;                  /* 0 (no key configured), 1 or more */
    uint64_t rest_ms;          /* how long a refused key rests */
    atomic_uint_fast64_t next; /* round-robin cursor */
} sg_keyring_t;

/**
 * Reads the variable named by `key` of `obj` (sg_cfg_secret_env) and splits its value on '|' into
 * keys; blanks around each key are dropped. Each key gets the header line `header_prefix` + key,
 * e.g. "X-API-KEY: " or "Authorization: Bearer ". Fails (naming the variable, never a value) on an
 * empty key ("A||B"), a repeated key, more than SG_KEYRING_MAX keys, or a key with characters a
 * header cannot carry. A missing optional key leaves the ring empty (n = 0). Main thread.
 */
int sg_keyring_init(sg_keyring_t *r, sg_cfg_t *c, const cJSON *obj, const char *key, int required, const char *header_prefix,
                    uint64_t rest_ms);
/** Wipes the keys and frees everything. NULL-safe on a zeroed ring. */
void sg_keyring_free(sg_keyring_t *r);

/**
 * The next key that is not resting at `now_ms`, round robin: its index, or -1 when every key rests
 * (then `*wake_ms`, when not NULL, gets the time the first of them wakes up). An empty ring gives -1
 * with `*wake_ms` = 0. Any thread.
 */
int sg_keyring_pick(sg_keyring_t *r, uint64_t now_ms, uint64_t *wake_ms);

/**
 * 1 when the ring has keys and every one rests at `now_ms` (then `*wake_ms`, when not NULL, gets the
 * time the first wakes up), else 0. Unlike sg_keyring_pick() it does not move the round robin.
 */
int sg_keyring_all_resting(sg_keyring_t *r, uint64_t now_ms, uint64_t *wake_ms);

/** Counts a request sent with key `i`. Any thread. */
void sg_keyring_note_call(sg_keyring_t *r, int i);
/** Counts a request with key `i` that got no usable answer (an HTTP error status or a transport error). */
void sg_keyring_note_failure(sg_keyring_t *r, int i);

/**
 * Rests key `i` until `now_ms` + rest_ms, or + `min_ms` when that is longer (a Retry-After), because
 * the upstream answered `status`. A rest only ever extends. Returns 1 when the key was not resting
 * before (the rest is counted), else 0. Any thread.
 */
int sg_keyring_rest(sg_keyring_t *r, int i, uint64_t now_ms, uint64_t min_ms, long status);

/** The number of keys resting at `now_ms`. */
size_t sg_keyring_resting(sg_keyring_t *r, uint64_t now_ms);

/** The status that rested the key waking up first (e.g. 429 or 401); 0 when none rests. */
long sg_keyring_first_rest_status(sg_keyring_t *r, uint64_t now_ms);

/** Replaces every occurrence of any key in the NUL-terminated `s` (buffer of `size` bytes) with "***". */
void sg_keyring_scrub(const sg_keyring_t *r, char *s, size_t size);

/**
 * Emits, inside a plugin's stats(), `<prefix>_keys` (gauge: keys configured), `<prefix>_keys_resting`
 * (gauge) and, per key with the label key="<1-based position>", `<prefix>_key_calls_total`,
 * `<prefix>_key_failures_total` and `<prefix>_key_rests_total`. Nothing for an empty ring.
 */
void sg_keyring_report(sg_keyring_t *r, const sg_host_api *host, void *sink, const char *prefix, uint64_t now_ms);

#endif
