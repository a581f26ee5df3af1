/*
 * clients.h -- who is calling: API keys, trusted X-Client-Id headers or the peer address, each
 * mapped to a client with its own quota (GCRA rate limit counted in queries), concurrency cap
 * and fair-share weight.
 */
#ifndef SG_GATEWAY_CLIENTS_H
#define SG_GATEWAY_CLIENTS_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <h2o.h>
#include "config.h"
#include "metrics.h"

typedef struct st_sg_client_t sg_client_t;

/**
 * What a client keeps across configuration reloads: its rate-limit state and the queries it has in
 * flight, shared by the client of that id in every generation's table (keyed clients and anonymous
 * ones apart). Reference-counted by those clients; freed with the last one.
 */
typedef struct st_sg_client_state_t {
    char *rkey;    /* "K<id>" or "A<id>": the registry key */
    char *label;   /* the metrics' label value: the id made safe, or "other" beyond the cardinality cap */
    uint64_t hash; /* of rkey */
    uint32_t refs; /* under the registry's mutex */
    /* GCRA state, guarded by the registry's mutex; fallback_tat_us is the bucket that stands in for
     * a global client's shared limit while Redis cannot decide (ratelimit_global.c) */
    uint64_t tat_us, fallback_tat_us;
    _Atomic uint64_t inflight; /* queries in flight for this client (all backends) */
} sg_client_state_t;

/** Who is calling: one per API key, trusted X-Client-Id or peer address (anonymous ones are kept
 * in an LRU and freed once unreferenced). One table per configuration generation (gen.h): `conf`
 * is that generation's, `st` outlives it. Shared by every thread: refs are atomic, the rest is
 * read-only. */
struct st_sg_client_t {
    char *id;
    const sg_client_conf_t *conf;
    int keyed;
    sg_client_state_t *st;
    h2o_linklist_t lru_link; /* anonymous clients: in their table's LRU, most recently seen first */
    uint64_t hash;           /* of the id, for the table of anonymous clients */
    _Atomic uint32_t refs;
    /* metrics; label value is the id, or "other" beyond the cardinality cap */
    sg_counter_t *m_requests, *m_queries, *m_rate_limited, *m_queued, *m_shed, *m_timeouts, *m_hits_l1, *m_hits_redis, *m_misses;
    sg_hist_t *m_wait;
};

typedef struct st_sg_clients_t sg_clients_t;

/**
 * The client table of a configuration: its keyed clients and, when `prev` (the previous
 * generation's table) is given, the anonymous clients it tracks (most recent first, up to
 * clients.max_tracked). Clients of an id already known share its rate-limit state. Main or reload
 * thread; `prev` may be in use meanwhile.
 */
sg_clients_t *sg_clients_create(const sg_config_t *cfg, sg_clients_t *prev);
void sg_clients_destroy(sg_clients_t *t);
/** The config the table was made of. */
const sg_config_t *sg_clients_config(const sg_clients_t *t);

/**
 * Identifies the caller. `key` is the presented API key (NULL when none), `hdr_id` the
 * X-Client-Id header (NULL when none). Returns a referenced client, or NULL with a 401 message
 * in `*why` when a key is required and missing, or when a presented key matches none.
 * Keys are compared in constant time (SHA-256 digests compared with CRYPTO_memcmp, every
 * configured key checked) and never logged.
 */
sg_client_t *sg_clients_identify(sg_clients_t *t, const char *key, size_t key_len, const char *hdr_id, size_t hdr_len,
                                 const struct sockaddr *peer, const char **why);
/**
 * The API key the request presents: `Authorization: Bearer <key>` and/or `X-API-Key: <key>`, each
 * possibly repeated. Returns 0 with `*key` set (base NULL when none is presented), or -1 with a 401
 * message in `*why` when the headers present different keys: every presented key must be valid,
 * so one good key cannot carry a bad one past the check. Loop thread.
 */
int sg_clients_presented_key(h2o_req_t *req, h2o_iovec_t *key, const char **why);
/**
 * Folds one request header into the API key presented so far (`*key`, base NULL while none):
 * `Authorization: Bearer <key>` and `X-API-Key: <key>` count (names compared case-insensitively),
 * other headers are ignored. Returns -1 with a 401 message in `*why` when the header presents a key
 * other than the one already seen. Works on raw heads (the connection gate) and h2o requests alike.
 */
int sg_clients_key_header(const char *name, size_t name_len, h2o_iovec_t value, h2o_iovec_t *key, const char **why);
/**
 * Whether `key` (NULL: none presented) is a configured client key or the admin key: the check
 * clients.require_key makes before anything else of a request is looked at. Returns 1, or 0 with a
 * 401 message in `*why`. Constant time in the keys. Any thread.
 */
int sg_clients_key_valid(sg_clients_t *t, const char *key, size_t key_len, const char **why);
/**
 * The client of an HTTP request: its presented key (sg_clients_presented_key), else its
 * X-Client-Id header, else its peer address (sg_clients_identify) -- on a Unix domain socket, the
 * user its peer runs as ("uid:N", SO_PEERCRED). Returns a reference, or NULL with a 401 message in
 * `*why`. Loop thread.
 */
sg_client_t *sg_clients_identify_request(sg_clients_t *t, h2o_req_t *req, const char **why);
/**
 * A refusal by the client's rate limit (SG_RL_DENY, `wait_us` the wait it would have needed):
 * counts it, writes the client's message and returns the HTTP status (the client's reject_status,
 * 429 or 503, in reject mode; 503 when the wait exceeds `max_wait_us` in queue mode) with the
 * seconds to retry after in `*retry_s`.
 */
int sg_clients_rate_refusal(sg_client_t *c, uint64_t wait_us, uint64_t max_wait_us, uint32_t *retry_s, char *msg, size_t msg_size);
/**
 * Whether a request presenting `key` (base NULL: none) may read the operations routes (/, /metrics,
 * /stats). With clients.admin_key_env set only that key may; else, with require_key, any client's
 * key; else anyone. Returns 1, or 0 with a 401 message in `*why`. Constant time in the keys.
 */
int sg_clients_admin_allowed(sg_clients_t *t, const char *key, size_t key_len, const char **why);
/** Takes one more reference: each holder that can outlive the one before it (the HTTP request, the
 * query, a call) keeps its own. Inline, like h2o_mem_addref_shared: a counter, not a step of the
 * request. Any thread. */
static inline sg_client_t *sg_clients_ref(sg_client_t *c)
{
    if (c != NULL)
        atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
    return c;
}
/** Drops a reference. Nothing is freed here: an anonymous client is freed by its table's LRU
 * eviction once unreferenced, a keyed one with its table. Any thread. */
static inline void sg_clients_release(sg_client_t *c)
{
    if (c != NULL)
        atomic_fetch_sub_explicit(&c->refs, 1, memory_order_release);
}
/** Number of anonymous clients tracked (for tests and /stats). */
size_t sg_clients_tracked(sg_clients_t *t);

enum { SG_RL_ALLOW = 0, SG_RL_WAIT = 1, SG_RL_DENY = 2 };

/**
 * GCRA over a theoretical arrival time `*tat_us` (one number per client). A request of `n`
 * queries may start when now >= tat - tau (tau = (burst - 1) / rate, so a full
 * bucket admits `burst` queries at once); starting advances tat by n / rate,
 * so a batch larger than the burst is admitted when the bucket is full and pays its debt
 * afterwards, and the long-run admitted rate is exactly `rate`. When it may not start yet:
 * with `max_wait_us` > 0 and a wait within it, the slot is reserved and SG_RL_WAIT returned
 * (the caller sleeps `*wait_us`); otherwise SG_RL_DENY with `*wait_us` = time until it could start.
 * rate <= 0 means unlimited. Pure function of its arguments (unit-tested with a fake clock).
 */
int sg_gcra(uint64_t *tat_us, double rate, double burst, uint64_t n, uint64_t now_us, uint64_t max_wait_us, uint64_t *wait_us);

/** Applies the client's own limit (thread-safe). Same return values as sg_gcra(). */
int sg_clients_ratelimit(sg_clients_t *t, sg_client_t *c, uint64_t n, uint64_t now_us, uint64_t max_wait_us, uint64_t *wait_us);
/**
 * The stand-in for a global client's shared limit while Redis cannot decide: the client's own
 * fallback bucket, a GCRA at its rate and burst divided by `share_div` (the burst at least 1), so
 * that `share_div` replicas together admit about the shared rate. Same return values as sg_gcra().
 * Thread-safe.
 */
int sg_clients_ratelimit_fallback(sg_clients_t *t, sg_client_t *c, uint32_t share_div, uint64_t n, uint64_t now_us,
                                  uint64_t max_wait_us, uint64_t *wait_us);

#endif
