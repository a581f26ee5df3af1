/*
 * clients.c -- client identity and per-client rate limits.
 *
 * Keyed clients come from the config and live as long as its generation (gen.h). Anonymous clients
 * (a trusted X-Client-Id, or the peer address) get the default quota and are tracked in a hash
 * table with an LRU bound (clients.max_tracked), nginx limit_req style: the least recently seen
 * entry that nothing references is evicted first, so memory stays bounded whatever the callers do.
 *
 * Reloads. Each generation has a table of its own (its keys, its quotas); what must survive the
 * switch -- a client's rate-limit state and its queries in flight -- lives in a client state
 * shared by the clients of that id in every table (the registry below), and a new table takes the
 * anonymous clients its predecessor tracked. A removed key has no client in the new table: its
 * requests get 401 from the first one the new generation serves.
 */
#include "clients.h"
#include "hmap.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_LABELLED_ANON 64

struct st_sg_clients_t {
    pthread_mutex_t mu;
    const sg_config_t *cfg;
    sg_client_t *keyed; /* n_keyed entries */
    unsigned char (*digests)[SHA256_DIGEST_LENGTH];
    unsigned char admin_digest[SHA256_DIGEST_LENGTH];
    int has_admin;
    size_t n_keyed;
    sg_hmap_t anon;     /* id -> anonymous client */
    h2o_linklist_t lru; /* anchor of the anonymous clients: lru.next is the most recent, lru.prev the coldest */
};

/* The client states of the process, by registry key; the mutex also guards every state's GCRA. */
static struct {
    pthread_mutex_t mu;
    sg_hmap_t map;
    int ready;
    size_t n_labelled; /* anonymous ids with a label of their own (the rest share "other") */
} registry = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int state_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    const sg_client_state_t *st = item;
    (void)ud;
    return strlen(st->rkey) == key_len && memcmp(st->rkey, key, key_len) == 0;
}

/* Label values must be safe inside quotes: keep [A-Za-z0-9_.:-], replace the rest. */
static void safe_label(char *dst, size_t n, const char *src)
{
    size_t i = 0;
    for (; src[i] != '\0' && i + 1 < n; ++i) {
        char ch = src[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' ||
                 ch == ':' || ch == '-';
        dst[i] = ok ? ch : '_';
    }
    dst[i] = '\0';
}

/* The state of client `id` (keyed or anonymous), referenced: the one other tables share, or a new one. */
static sg_client_state_t *state_get(const char *id, int keyed)
{
    size_t n = strlen(id) + 2;
    char *rkey = sg_mem_alloc(n);
    snprintf(rkey, n, "%c%s", keyed ? 'K' : 'A', id);
    uint64_t h = sg_hmap_hash(rkey, n - 1);
    pthread_mutex_lock(&registry.mu);
    if (!registry.ready) {
        sg_hmap_init(&registry.map, state_eq, NULL, 64);
        registry.ready = 1;
    }
    sg_client_state_t *st = sg_hmap_find(&registry.map, h, rkey, n - 1);
    if (st != NULL) {
        ++st->refs;
        pthread_mutex_unlock(&registry.mu);
        free(rkey);
        return st;
    }
    st = sg_mem_calloc(1, sizeof(*st));
    st->rkey = rkey;
    st->hash = h;
    st->refs = 1;
    atomic_init(&st->inflight, 0);
    char label[128];
    if (keyed || registry.n_labelled < MAX_LABELLED_ANON) {
        registry.n_labelled += !keyed;
        safe_label(label, sizeof(label), id);
    } else {
        snprintf(label, sizeof(label), "other");
    }
    st->label = sg_strdup(label);
    sg_hmap_insert(&registry.map, h, st);
    pthread_mutex_unlock(&registry.mu);
    return st;
}

static void state_release(sg_client_state_t *st)
{
    pthread_mutex_lock(&registry.mu);
    if (--st->refs != 0) {
        pthread_mutex_unlock(&registry.mu);
        return;
    }
    sg_hmap_remove(&registry.map, st->hash, st);
    if (registry.map.n == 0) { /* nothing tracked: the table's memory goes too */
        sg_hmap_dispose(&registry.map);
        registry.ready = 0;
    }
    pthread_mutex_unlock(&registry.mu);
    free(st->rkey);
    free(st->label);
    free(st);
}

static int client_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    const sg_client_t *c = item;
    (void)ud;
    return strncmp(c->id, key, key_len) == 0 && c->id[key_len] == '\0';
}

static void client_metrics(sg_client_t *c, const char *label)
{
    char l[200];
    snprintf(l, sizeof(l), "client=\"%s\"", label);
    c->m_requests = sg_metrics_counter("searchgate_client_requests_total", "Requests by client.", l);
    c->m_queries = sg_metrics_counter("searchgate_client_queries_total", "Queries by client.", l);
    c->m_rate_limited = sg_metrics_counter(
        "searchgate_client_rate_limited_total",
        "Requests refused by the client's rate limit (reject mode: 429 or its reject_status; queue mode: 503).", l);
    c->m_queued = sg_metrics_counter("searchgate_client_queued_total", "Requests that waited for the client's rate limit.", l);
    c->m_shed = sg_metrics_counter("searchgate_client_shed_total", "Backend calls refused because the backend queue was full.", l);
    c->m_timeouts =
        sg_metrics_counter("searchgate_client_timeouts_total", "Requests or queued calls that passed their deadline.", l);
    char ll[240];
    snprintf(ll, sizeof(ll), "%s,layer=\"l1\"", l);
    c->m_hits_l1 =
        sg_metrics_counter("searchgate_client_cache_hits_total", "Queries of the client answered by the cache, by layer.", ll);
    snprintf(ll, sizeof(ll), "%s,layer=\"redis\"", l);
    c->m_hits_redis =
        sg_metrics_counter("searchgate_client_cache_hits_total", "Queries of the client answered by the cache, by layer.", ll);
    c->m_misses = sg_metrics_counter("searchgate_client_cache_misses_total", "Queries the cache could not answer.", l);
    c->m_wait = sg_metrics_hist("searchgate_client_ratelimit_wait_seconds", "Time requests waited for the client's rate limit.", l);
}

static void lru_push_front(sg_clients_t *t, sg_client_t *c);

static sg_client_t *client_of(h2o_linklist_t *link)
{
    return H2O_STRUCT_FROM_MEMBER(sg_client_t, lru_link, link);
}

/* A new anonymous client of `t` (not yet in its LRU) sharing `st`, or a new state for `id`. */
static sg_client_t *anon_new(sg_clients_t *t, const char *id, uint64_t h, sg_client_state_t *st)
{
    sg_client_t *c = sg_mem_calloc(1, sizeof(*c));
    c->id = sg_strdup(id);
    c->conf = &t->cfg->clients.defaults;
    c->st = st != NULL ? st : state_get(id, 0);
    atomic_init(&c->refs, 1); /* the table's own reference */
    c->hash = h;
    sg_hmap_insert(&t->anon, h, c);
    client_metrics(c, c->st->label);
    return c;
}

/* The anonymous clients `prev` tracks, most recent first, up to t's bound: same order in `t`. */
static void import_anon(sg_clients_t *t, sg_clients_t *prev)
{
    pthread_mutex_lock(&prev->mu);
    size_t n = 0;
    h2o_linklist_t *l = prev->lru.next;
    for (; l != &prev->lru && n < t->cfg->clients.max_tracked; l = l->next)
        ++n;
    /* l is the first one not taken (or the anchor) */
    for (l = l->prev; l != &prev->lru; l = l->prev) { /* the coldest first: each new one goes in front */
        sg_client_t *c = client_of(l);
        pthread_mutex_lock(&registry.mu);
        ++c->st->refs;
        pthread_mutex_unlock(&registry.mu);
        lru_push_front(t, anon_new(t, c->id, c->hash, c->st));
    }
    pthread_mutex_unlock(&prev->mu);
}

sg_clients_t *sg_clients_create(const sg_config_t *cfg, sg_clients_t *prev)
{
    sg_clients_t *t = sg_mem_calloc(1, sizeof(*t));
    pthread_mutex_init(&t->mu, NULL);
    t->cfg = cfg;
    t->n_keyed = cfg->clients.n_keyed;
    t->keyed = sg_mem_calloc(t->n_keyed, sizeof(*t->keyed));
    t->digests = sg_mem_calloc(t->n_keyed, sizeof(*t->digests));
    for (size_t i = 0; i < t->n_keyed; ++i) {
        sg_client_t *c = &t->keyed[i];
        c->id = sg_strdup(cfg->clients.keyed[i].id);
        c->conf = &cfg->clients.keyed[i];
        c->keyed = 1;
        c->st = state_get(c->id, 1);
        atomic_init(&c->refs, 1);
        client_metrics(c, c->st->label);
        SHA256((const unsigned char *)c->conf->key, strlen(c->conf->key), t->digests[i]);
    }
    if (cfg->clients.admin_key != NULL) {
        SHA256((const unsigned char *)cfg->clients.admin_key, strlen(cfg->clients.admin_key), t->admin_digest);
        t->has_admin = 1;
    }
    sg_hmap_init(&t->anon, client_eq, NULL, 1024);
    h2o_linklist_init_anchor(&t->lru);
    if (prev != NULL)
        import_anon(t, prev);
    return t;
}

const sg_config_t *sg_clients_config(const sg_clients_t *t)
{
    return t->cfg;
}

void sg_clients_destroy(sg_clients_t *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n_keyed; ++i) {
        free(t->keyed[i].id);
        state_release(t->keyed[i].st);
    }
    free(t->keyed);
    free(t->digests);
    while (!h2o_linklist_is_empty(&t->lru)) {
        sg_client_t *c = client_of(t->lru.next);
        h2o_linklist_unlink(&c->lru_link);
        state_release(c->st);
        free(c->id);
        free(c);
    }
    sg_hmap_dispose(&t->anon);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

size_t sg_clients_tracked(sg_clients_t *t)
{
    pthread_mutex_lock(&t->mu);
    size_t n = sg_hmap_size(&t->anon);
    pthread_mutex_unlock(&t->mu);
    return n;
}

static void lru_push_front(sg_clients_t *t, sg_client_t *c)
{
    h2o_linklist_insert(t->lru.next, &c->lru_link);
}

/* Evicts unreferenced entries from the cold end until there is room. Caller holds the mutex. */
static void evict(sg_clients_t *t)
{
    h2o_linklist_t *l = t->lru.prev;
    while (sg_hmap_size(&t->anon) >= t->cfg->clients.max_tracked && l != &t->lru) {
        h2o_linklist_t *prev = l->prev;
        sg_client_t *c = client_of(l);
        if (atomic_load(&c->refs) == 1) {
            h2o_linklist_unlink(&c->lru_link);
            sg_hmap_remove(&t->anon, c->hash, c);
            state_release(c->st);
            free(c->id);
            free(c);
        }
        l = prev;
    }
}

static sg_client_t *anon_get(sg_clients_t *t, const char *id)
{
    size_t len = strlen(id);
    uint64_t h = sg_hmap_hash(id, len);
    pthread_mutex_lock(&t->mu);
    sg_client_t *c = sg_hmap_find(&t->anon, h, id, len);
    if (c != NULL) {
        h2o_linklist_unlink(&c->lru_link);
    } else {
        evict(t);
        c = anon_new(t, id, h, NULL);
    }
    lru_push_front(t, c);
    atomic_fetch_add(&c->refs, 1);
    pthread_mutex_unlock(&t->mu);
    return c;
}

static h2o_iovec_t trim(h2o_iovec_t v)
{
    while (v.len > 0 && (v.base[0] == ' ' || v.base[0] == '\t')) {
        ++v.base;
        --v.len;
    }
    while (v.len > 0 && (v.base[v.len - 1] == ' ' || v.base[v.len - 1] == '\t'))
        --v.len;
    return v;
}

/* An anonymous peer's identity: "ip:ADDR" over TCP; over a Unix domain socket, "uid:N", the user
 * the peer process runs as (SO_PEERCRED on `fd`; "uid:unknown" without it). */
static void peer_id(const struct sockaddr *peer, int fd, char *out, size_t size)
{
    if (peer != NULL && peer->sa_family == AF_INET) {
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &((const struct sockaddr_in *)peer)->sin_addr, a, sizeof(a));
        snprintf(out, size, "ip:%s", a);
    } else if (peer != NULL && peer->sa_family == AF_INET6) {
        char a[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)peer)->sin6_addr, a, sizeof(a));
        snprintf(out, size, "ip:%s", a);
    } else if (peer != NULL && peer->sa_family == AF_UNIX) {
        struct ucred cred;
        socklen_t cl = sizeof(cred);
        if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
            snprintf(out, size, "uid:%u", (unsigned)cred.uid);
        else
            snprintf(out, size, "uid:unknown");
    } else {
        snprintf(out, size, "ip:unknown");
    }
}

static sg_client_t *identify(sg_clients_t *t, const char *key, size_t key_len, const char *hdr_id, size_t hdr_len, const char *peer,
                             const char **why);

sg_client_t *sg_clients_identify_request(sg_clients_t *t, h2o_req_t *req, const char **why)
{
    h2o_iovec_t key;
    if (sg_clients_presented_key(req, &key, why) != 0)
        return NULL;
    ssize_t ci = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-client-id"), -1);
    h2o_iovec_t cid = ci >= 0 ? req->headers.entries[ci].value : h2o_iovec_init(NULL, 0);
    struct sockaddr_storage ss;
    socklen_t sl = req->conn->callbacks->get_peername != NULL ? req->conn->callbacks->get_peername(req->conn, (void *)&ss) : 0;
    /* a Unix domain socket's peer has no address: its credentials say which user it runs as */
    h2o_socket_t *sock = req->conn->callbacks->get_socket != NULL ? req->conn->callbacks->get_socket(req->conn) : NULL;
    char peer[64];
    peer_id(sl > 0 ? (struct sockaddr *)&ss : NULL, sock != NULL ? h2o_socket_get_fd(sock) : -1, peer, sizeof(peer));
    return identify(t, key.base, key.len, cid.base, cid.len, peer, why);
}

int sg_clients_rate_refusal(sg_client_t *c, uint64_t wait_us, uint64_t max_wait_us, uint32_t *retry_s, char *msg, size_t msg_size)
{
    const sg_client_conf_t *cc = c->conf;
    sg_counter_add(c->m_rate_limited, 1);
    uint32_t retry = (uint32_t)((wait_us + 999999) / 1000000);
    *retry_s = retry == 0 ? 1 : retry;
    if (cc->mode == SG_RL_REJECT) {
        snprintf(msg, msg_size, "rate limit of client %s exceeded (%.6g queries/s, burst %.6g); retry in %u s", c->id, cc->rate,
                 cc->burst, *retry_s);
        return cc->reject_status == 503 ? 503 : 429; /* 503 for clients that retry only 5xx (clients.*.reject_status) */
    }
    snprintf(msg, msg_size, "rate limit of client %s: the wait (%.0f ms) would exceed the allowed %llu ms; retry in %u s", c->id,
             (double)wait_us / 1000, (unsigned long long)(max_wait_us / 1000), *retry_s);
    return 503;
}

int sg_clients_key_header(const char *name, size_t name_len, h2o_iovec_t value, h2o_iovec_t *key, const char **why)
{
    h2o_iovec_t k;
    if (h2o_lcstris(name, name_len, H2O_STRLIT("authorization"))) {
        h2o_iovec_t v = trim(value);
        if (v.len < 7 || strncasecmp(v.base, "Bearer ", 7) != 0)
            return 0; /* another scheme (Basic ...): not an API key */
        k = trim(h2o_iovec_init(v.base + 7, v.len - 7));
    } else if (h2o_lcstris(name, name_len, H2O_STRLIT("x-api-key"))) {
        k = trim(value);
    } else {
        return 0;
    }
    if (key->base == NULL) {
        *key = k;
    } else if (key->len != k.len || memcmp(key->base, k.base, k.len) != 0) {
        *why = "the request presents two different API keys (Authorization: Bearer and X-API-Key must agree)";
        return -1;
    }
    return 0;
}

int sg_clients_presented_key(h2o_req_t *req, h2o_iovec_t *key, const char **why)
{
    *key = h2o_iovec_init(NULL, 0);
    for (size_t i = 0; i < req->headers.size; ++i) {
        const h2o_header_t *h = &req->headers.entries[i];
        if (sg_clients_key_header(h->name->base, h->name->len, h->value, key, why) != 0)
            return -1;
    }
    return 0;
}

/* Index of the client whose key is `key`, or SIZE_MAX. Every configured key is compared. */
static size_t find_key(sg_clients_t *t, const char *key, size_t key_len)
{
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)key, key_len, d);
    size_t match = SIZE_MAX;
    for (size_t i = 0; i < t->n_keyed; ++i) { /* no early exit: every key costs the same */
        int eq = CRYPTO_memcmp(d, t->digests[i], sizeof(d)) == 0;
        match = eq ? i : match;
    }
    return match;
}

int sg_clients_key_valid(sg_clients_t *t, const char *key, size_t key_len, const char **why)
{
    if (key == NULL) {
        *why = "an API key is required (Authorization: Bearer <key> or X-API-Key: <key>)";
        return 0;
    }
    int valid = find_key(t, key, key_len) != SIZE_MAX;
    if (t->has_admin) { /* compared whatever the client keys said: the same work for every key */
        unsigned char d[SHA256_DIGEST_LENGTH];
        SHA256((const unsigned char *)key, key_len, d);
        valid |= CRYPTO_memcmp(d, t->admin_digest, sizeof(d)) == 0;
    }
    if (!valid)
        *why = "invalid API key";
    return valid;
}

int sg_clients_admin_allowed(sg_clients_t *t, const char *key, size_t key_len, const char **why)
{
    if (t->has_admin) {
        unsigned char d[SHA256_DIGEST_LENGTH];
        if (key != NULL)
            SHA256((const unsigned char *)key, key_len, d);
        if (key == NULL || CRYPTO_memcmp(d, t->admin_digest, sizeof(d)) != 0) {
            *why = "this route needs the admin key (clients.admin_key_env): Authorization: Bearer <key> or X-API-Key: <key>";
            return 0;
        }
        return 1;
    }
    if (!t->cfg->clients.require_key)
        return 1;
    if (key == NULL || find_key(t, key, key_len) == SIZE_MAX) {
        *why = "this route needs a valid API key (clients.require_key is on)";
        return 0;
    }
    return 1;
}

static sg_client_t *identify(sg_clients_t *t, const char *key, size_t key_len, const char *hdr_id, size_t hdr_len, const char *peer,
                             const char **why)
{
    if (key != NULL) {
        size_t match = find_key(t, key, key_len);
        if (match == SIZE_MAX) {
            *why = "invalid API key";
            return NULL;
        }
        return sg_clients_ref(&t->keyed[match]);
    }
    if (t->cfg->clients.require_key) {
        *why = "an API key is required (Authorization: Bearer <key> or X-API-Key: <key>)";
        return NULL;
    }
    char id[160];
    if (hdr_id != NULL && t->cfg->clients.trust_client_id_header && hdr_len > 0) {
        size_t n = hdr_len < 120 ? hdr_len : 120;
        snprintf(id, sizeof(id), "id:%.*s", (int)n, hdr_id);
    } else {
        snprintf(id, sizeof(id), "%s", peer);
    }
    return anon_get(t, id);
}

sg_client_t *sg_clients_identify(sg_clients_t *t, const char *key, size_t key_len, const char *hdr_id, size_t hdr_len,
                                 const struct sockaddr *peer, const char **why)
{
    char id[64];
    peer_id(peer, -1, id, sizeof(id));
    return identify(t, key, key_len, hdr_id, hdr_len, id, why);
}

int sg_gcra(uint64_t *tat_us, double rate, double burst, uint64_t n, uint64_t now_us, uint64_t max_wait_us, uint64_t *wait_us)
{
    *wait_us = 0;
    if (rate <= 0)
        return SG_RL_ALLOW;
    double t = 1e6 / rate; /* emission interval, us per query */
    /* tolerance: a full bucket admits `burst` queries at once */
    uint64_t tau = (uint64_t)llround(t * (burst > 1 ? burst - 1 : 0));
    uint64_t tat = *tat_us > now_us ? *tat_us : now_us;
    uint64_t cost = (uint64_t)llround(t * (double)n);
    uint64_t allow_at = tat > tau ? tat - tau : 0;
    if (now_us >= allow_at) {
        *tat_us = tat + cost;
        return SG_RL_ALLOW;
    }
    *wait_us = allow_at - now_us;
    if (max_wait_us > 0 && *wait_us <= max_wait_us) {
        *tat_us = tat + cost; /* the slot is reserved: the caller starts after the wait */
        return SG_RL_WAIT;
    }
    return SG_RL_DENY;
}

int sg_clients_ratelimit(sg_clients_t *t, sg_client_t *c, uint64_t n, uint64_t now_us, uint64_t max_wait_us, uint64_t *wait_us)
{
    if (c->conf == NULL || c->conf->rate <= 0) {
        *wait_us = 0;
        return SG_RL_ALLOW;
    }
    (void)t;
    pthread_mutex_lock(&registry.mu);
    int r = sg_gcra(&c->st->tat_us, c->conf->rate, c->conf->burst, n, now_us, max_wait_us, wait_us);
    pthread_mutex_unlock(&registry.mu);
    return r;
}

int sg_clients_ratelimit_fallback(sg_clients_t *t, sg_client_t *c, uint32_t share_div, uint64_t n, uint64_t now_us,
                                  uint64_t max_wait_us, uint64_t *wait_us)
{
    if (c->conf == NULL || c->conf->rate <= 0) {
        *wait_us = 0;
        return SG_RL_ALLOW;
    }
    double div = share_div != 0 ? (double)share_div : 1, burst = c->conf->burst / div;
    (void)t;
    pthread_mutex_lock(&registry.mu);
    int r = sg_gcra(&c->st->fallback_tat_us, c->conf->rate / div, burst > 1 ? burst : 1, n, now_us, max_wait_us, wait_us);
    pthread_mutex_unlock(&registry.mu);
    return r;
}
