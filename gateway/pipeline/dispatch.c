/*
 * dispatch.c -- how distinct queries reach a backend: result blobs, singleflight, calls and
 * admission.
 *
 * A *flight* is one (backend, topk, search parameters, query text) being computed. The flight table is global and
 * sharded, so identical queries from any loop thread share one computation (GRPO sends the same
 * prompt n times). Every request waiting on a flight owns a *waiter*; when the flight resolves,
 * each waiter is posted to its request's loop as an h2o_multithread message.
 *
 * A *call* is one plugin search(): up to `chunk` flights led by one request. Calls pass
 * admission: a per-backend cap on queries in flight, and a bounded queue in front of it that is
 * served deficit-round-robin across clients (weights from the config), so one job's 2,560-query
 * burst cannot starve another job's single queries. Queued calls whose deadline passed, or whose
 * waiters all left, are dropped before they reach the plugin; running calls are cancelled.
 * Admission also enforces the route's caps (route.h): the route's own qps/burst and the upstream
 * limits the plugin's config asks for (ABI 1.2 limits(): in-flight, qps/burst, queue, counted in
 * the plugin's units) -- the plugins queue nothing themselves. A call waiting only for a qps
 * token is started by a timer of the loop that last pumped the route.
 *
 * No duplicate slips between a flight and the cache: a completed call stores its results in L1
 * *before* it takes their flights out of the table, and the store fills L1's watch on the key
 * (cache/l1.h) that each request whose cache lookup missed it holds. A request that finds no
 * flight under the shard lock reads its watch: a flight that completed since its lookup left
 * the result there. A duplicate therefore either joins the flight or finds the result -- even
 * when its own cache lookup (L1, then a Redis MGET) ran while the flight was still in the air --
 * without looking in L1 twice. A miss the cache step did not look up (a fallback backend's: its
 * keys differ) holds no watch and looks in L1 under the shard lock instead. The flight that
 * starts takes the watch over and lets it go once it stored its result. (With L1 off, a result
 * only reaches Redis, asynchronously, and that window stays open.)
 *
 * Locks: a flight's waiter list and table membership are guarded by its shard mutex; admission
 * state by the backend's admit_mutex; L1 has its own mutex, taken inside a shard lock but never
 * the other way round (a watch is read without it); the cache store (L1's, then the Redis write
 * queue's mutex) runs with no lock of dispatch's held. No lock is held while calling into a plugin.
 */
#include "dispatch.h"
#include "plugin.h"
#include "runtime.h"
#include "query_impl.h"
#include "json.h"
#include "hmap.h"
#include "clients.h"
#include "budget.h"
#include "gen.h"
#include "../../cache/cache.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- blobs ---- */

sg_blob_t *sg_blob_from_hits(const sg_hits *hits)
{
    sg_buf_t b = {0};
    size_t total = 2;
    for (size_t i = 0; i < hits->n_hits; ++i)
        total += hits->hits[i].doc_len + 40;
    sg_buf_reserve(&b, total);
    sg_blob_t *blob = sg_blob_new((uint32_t)hits->n_hits);
    sg_jw_t w;
    sg_jw_init(&w, &b);
    sg_jw_arr(&w);
    for (size_t i = 0; i < hits->n_hits; ++i) {
        const sg_hit *h = &hits->hits[i];
        sg_jw_obj(&w);
        sg_jw_key(&w, "document");
        blob->docs[i].off = (uint32_t)b.len;
        blob->docs[i].len = (uint32_t)h->doc_len;
        sg_jw_raw(&w, h->doc, h->doc_len); /* the plugin's document, JSON already */
        sg_jw_kdouble(&w, "score", h->score);
        sg_jw_end(&w);
    }
    sg_jw_end(&w);
    blob->json = b.base;
    blob->json_len = b.len;
    return blob;
}

/* ---- flights, waiters, calls ---- */

typedef struct st_sg_flight_t sg_flight_t;
typedef struct st_sg_call_t sg_call_t;

#define NSHARDS 64
#define CANCEL_BIT 0x80000000u

struct st_sg_flight_t {
    uint64_t hash;
    uint32_t backend, topk, op;
    uint32_t len;
    char *text;
    char *key; /* its cache key (sg_cache_key), made once when the flight starts; NULL: not cached */
    uint32_t key_len;
    sg_l1_miss_t *miss; /* L1's watch on the key, taken over from the request that started it; its
                         * store fills it for the other requests that hold it, then it lets go */
    const char *params; /* the call's (c->params), or NULL */
    sg_waiter_t *waiters;
    uint32_t n_waiters;
    int in_table;
    sg_call_t *call;
};

struct st_sg_waiter_t {
    h2o_multithread_message_t msg;
    sg_waiter_t *next, **pprev; /* in flight->waiters, under the shard lock */
    sg_flight_t *flight;        /* under the shard lock; NULL once resolved (in transit) */
    sg_query_t *query;          /* loop thread only; NULL when the query was abandoned */
    uint64_t hash;              /* of the flight: selects the shard */
    uint32_t uniq;
    sg_loop_t *loop;
    sg_blob_t *blob;
    sg_status status;
    char *detail;
    uint32_t retry_after;
};

enum { CALL_QUEUED, CALL_RUNNING, CALL_DONE };

struct st_sg_call_t {
    h2o_multithread_message_t msg;
    _Atomic uint32_t refs;
    _Atomic uint32_t live;    /* flights that still have waiters, | CANCEL_BIT once cancelled */
    _Atomic uint32_t holding; /* done() not called yet (1) + the plugin's hold()s not released */
    _Atomic int state;        /* guarded by the backend's admit_mutex for QUEUED -> RUNNING/DONE */
    sg_route_t *backend;
    struct st_sg_gen_t *gen; /* of its route and client (referenced): a call may outlive its request */
    sg_client_t *client;
    sg_loop_t *origin;
    int is_access;     /* POST /access: vt->access() instead of vt->search() */
    int qps_waited;    /* bit per cap: counted once in its qps_delayed */
    sg_call_t *q_next; /* admission queue link */
    sg_search search;
    char *params; /* search.params: the request's canonical search parameters, or NULL */
    sg_query *queries;
    sg_flight_t **flights;
    sg_blob_t **blobs; /* results (released with the call) */
    size_t n;
    uint64_t start_us;
    sg_status status;
    char *detail;
    uint32_t retry_after;
    char request_id[24];
    sg_budget_charge_t budget; /* what the call spends of its request's reservation (budget.c) */
};

struct st_sg_admit_queue_t {
    sg_admit_queue_t *next, *prev; /* ring of clients with queued calls */
    const sg_client_state_t *who;  /* the client: its state, the same in every configuration generation
                                    * (its calls' clients are its settings; the head's apply) */
    sg_call_t *head, **tail;
    int64_t deficit;
};

typedef struct st_shard_t {
    pthread_mutex_t mu;
    sg_hmap_t flights; /* flight_key_t -> sg_flight_t */
} shard_t;

static shard_t shards[NSHARDS];

/* what identifies a flight: the route, topk, search or access, the search parameters, the text */
typedef struct st_flight_key_t {
    uint32_t backend, topk, op, len;
    const char *params;
    const char *text;
} flight_key_t;

static int same_params(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static int flight_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    const sg_flight_t *f = item;
    const flight_key_t *k = key;
    (void)key_len, (void)ud;
    return f->backend == k->backend && f->topk == k->topk && f->op == k->op && f->len == k->len &&
           same_params(f->params, k->params) && memcmp(f->text, k->text, k->len) == 0;
}

void sg_dispatch_init(void)
{
    for (size_t i = 0; i < NSHARDS; ++i) {
        pthread_mutex_init(&shards[i].mu, NULL);
        sg_hmap_init(&shards[i].flights, flight_eq, NULL, 32);
    }
    sg_plugin_lend_admission(sg_dispatch_retry_at, sg_dispatch_hold, sg_dispatch_release); /* the plugins' host table */
}

void sg_dispatch_dispose(void)
{
    for (size_t i = 0; i < NSHARDS; ++i) {
        sg_hmap_dispose(&shards[i].flights);
        pthread_mutex_destroy(&shards[i].mu);
    }
}

size_t sg_dispatch_flights(void)
{
    size_t n = 0;
    for (size_t i = 0; i < NSHARDS; ++i) {
        pthread_mutex_lock(&shards[i].mu);
        n += sg_hmap_size(&shards[i].flights);
        pthread_mutex_unlock(&shards[i].mu);
    }
    return n;
}

static uint64_t flight_hash(const flight_key_t *k)
{
    uint64_t seed = ((uint64_t)k->backend << 40) ^ ((uint64_t)k->op << 32) ^ k->topk ^ 0x5ca1ab1eull;
    if (k->params != NULL)
        seed ^= sg_hash64(k->params, strlen(k->params), 0x9a4a35ull);
    return sg_hash64(k->text, k->len, seed);
}

static shard_t *shard_of(uint64_t hash)
{
    return &shards[(hash >> 58) % NSHARDS];
}

static sg_flight_t *shard_find(shard_t *s, uint64_t hash, const flight_key_t *k)
{
    return sg_hmap_find(&s->flights, hash, k, sizeof(*k));
}

static void shard_insert(shard_t *s, sg_flight_t *f)
{
    sg_hmap_insert(&s->flights, f->hash, f);
    f->in_table = 1;
}

static void shard_remove(shard_t *s, sg_flight_t *f)
{
    if (!f->in_table)
        return;
    sg_hmap_remove(&s->flights, f->hash, f);
    f->in_table = 0;
}

static void waiter_link(sg_flight_t *f, sg_waiter_t *w)
{
    w->flight = f;
    w->next = f->waiters;
    if (w->next != NULL)
        w->next->pprev = &w->next;
    w->pprev = &f->waiters;
    f->waiters = w;
    ++f->n_waiters;
}

static void waiter_unlink(sg_waiter_t *w)
{
    *w->pprev = w->next;
    if (w->next != NULL)
        w->next->pprev = w->pprev;
    --w->flight->n_waiters;
    w->flight = NULL;
}

static void call_release(sg_call_t *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (size_t i = 0; i < c->n; ++i) {
        sg_l1_miss_release(c->flights[i]->miss); /* (let go in call_complete() already) */
        free(c->flights[i]->text);
        free(c->flights[i]->key);
        free(c->flights[i]);
        sg_blob_release(c->blobs[i]);
    }
    free(c->flights);
    free(c->params);
    free(c->queries);
    free(c->blobs);
    free(c->detail);
    sg_clients_release(c->client);
    sg_gen_release(c->gen);
    free(c);
}

static void call_start(sg_call_t *c);
static void call_complete(sg_call_t *c, const sg_result *res);
static void admit_cancel(sg_call_t *c);

/* Decrements the live-flight count of a call whose flight just lost its last waiter; the caller
 * holds the flight's shard lock. Returns 1 when the call has no waiters left and is now
 * cancelled (the caller must then call admit_cancel() after unlocking). */
static int call_drop_live(sg_call_t *c)
{
    uint32_t cur = atomic_load(&c->live);
    for (;;) {
        uint32_t n = cur & ~CANCEL_BIT;
        uint32_t next = n <= 1 ? CANCEL_BIT : (cur & CANCEL_BIT) | (n - 1);
        if (atomic_compare_exchange_weak(&c->live, &cur, next))
            return n <= 1 && !(cur & CANCEL_BIT);
    }
}

/* A new waiter joins a flight that had none; fails when the call was already cancelled. */
static int call_revive(sg_call_t *c)
{
    uint32_t cur = atomic_load(&c->live);
    for (;;) {
        if (cur & CANCEL_BIT)
            return 0;
        if (atomic_compare_exchange_weak(&c->live, &cur, cur + 1))
            return 1;
    }
}

/* ---- admission ---- */

static int client_fits(const sg_client_t *cl, size_t n)
{
    if (cl == NULL || cl->conf == NULL || cl->conf->max_inflight == 0)
        return 1;
    uint64_t cur = atomic_load(&cl->st->inflight);
    return cur == 0 || cur + n <= cl->conf->max_inflight;
}

static int backend_fits(const sg_route_t *b, size_t n)
{
    return b->conf->max_inflight == 0 || b->core->admit_inflight == 0 || b->core->admit_inflight + n <= b->conf->max_inflight;
}

/* ---- the floor: a call needs this much of its deadline left to start (min_remaining_ms) ---- */

static uint32_t route_floor_ms(const sg_route_t *b)
{
    uint32_t f = b->conf->min_remaining_ms;
    if (b->conf->min_remaining_quantile != SG_FLOOR_NONE) {
        uint32_t o = atomic_load_explicit(&b->core->floor_observed_ms, memory_order_relaxed);
        if (o > f)
            f = o;
    }
    return f;
}

/* Whether call `c` has too little of its deadline left to start. */
static int call_too_late(const sg_call_t *c, uint64_t now_ms)
{
    uint64_t d = c->search.deadline_ms;
    return d != 0 && now_ms + route_floor_ms(c->backend) >= d;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* A successful call of `ms` on route `b` (admit_mutex held): the window of recent durations,
 * and every 8 calls the floor's quantile of it. */
static void floor_observe_locked(sg_route_t *b, uint64_t ms)
{
    if (b->conf->min_remaining_quantile == SG_FLOOR_NONE)
        return;
    size_t cap = sizeof(b->core->floor_ring) / sizeof(b->core->floor_ring[0]);
    b->core->floor_ring[b->core->floor_at] = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
    b->core->floor_at = (uint32_t)((b->core->floor_at + 1) % cap);
    if (b->core->floor_n < cap)
        ++b->core->floor_n;
    if (b->core->floor_n < 8 || b->core->floor_at % 8 != 0)
        return; /* too few to say, or not yet time to recompute */
    uint32_t tmp[sizeof(b->core->floor_ring) / sizeof(b->core->floor_ring[0])];
    memcpy(tmp, b->core->floor_ring, b->core->floor_n * sizeof(tmp[0]));
    qsort(tmp, b->core->floor_n, sizeof(tmp[0]), cmp_u32);
    size_t at = b->conf->min_remaining_quantile == SG_FLOOR_P50 ? (b->core->floor_n - 1) / 2 : (b->core->floor_n * 9 - 1) / 10;
    atomic_store_explicit(&b->core->floor_observed_ms, tmp[at], memory_order_relaxed);
    sg_gauge_set(b->floor_ms, route_floor_ms(b));
}

/* ---- caps: the route's rate and the plugin's limits (route.h) ---- */

static uint64_t cap_units(const sg_admit_cap_t *k, const sg_call_t *c)
{
    return k->per_call ? 1 : c->n;
}

/* The index of the plugin's cap for search() or access() calls. */
static int plugin_cap_index(const sg_route_t *b, int is_access)
{
    return is_access && !b->access_shares_search ? SG_CAP_ACCESS : SG_CAP_SEARCH;
}

/* The plugin's cap for search() or access() calls (its limits). */
static sg_admit_cap_t *plugin_cap(sg_route_t *b, int is_access)
{
    return &b->caps[plugin_cap_index(b, is_access)];
}

/* The caps a call passes -- the route's own and its operation's: their limits (the generation's
 * route `b`) and what they count (its core, shared by the generations that keep the route). */
static void call_caps(sg_route_t *b, const sg_call_t *c, sg_admit_cap_t **k, sg_cap_state_t **st)
{
    int i = plugin_cap_index(b, c->is_access);
    k[0] = &b->caps[SG_CAP_ROUTE];
    st[0] = &b->core->cap_state[SG_CAP_ROUTE];
    k[1] = &b->caps[i];
    st[1] = &b->core->cap_state[i];
}

/* Milliseconds until the bucket of `k` holds `units` tokens (at most a full bucket: a call larger
 * than the burst starts on a full one and leaves it in debt); 0 = now. */
static uint64_t cap_token_wait(const sg_admit_cap_t *k, sg_cap_state_t *st, uint64_t units, uint64_t now)
{
    if (k->qps <= 0)
        return 0;
    if (now > st->tokens_at_ms) {
        st->tokens += (double)(now - st->tokens_at_ms) * k->qps / 1000.0;
        st->tokens_at_ms = now;
    }
    if (st->tokens > k->burst) /* (a reload may have lowered the burst) */
        st->tokens = k->burst;
    double need = (double)units < k->burst ? (double)units : k->burst;
    if (st->tokens >= need)
        return 0;
    uint64_t ms = (uint64_t)ceil((need - st->tokens) * 1000.0 / k->qps);
    return ms != 0 ? ms : 1;
}

/* Whether the caps let call `c` start now. When only a qps token is missing, `*wake` becomes the
 * earliest time one is due. Caller holds admit_mutex. */
static int caps_allow(sg_route_t *b, sg_call_t *c, uint64_t now, uint64_t *wake)
{
    sg_admit_cap_t *k[2];
    sg_cap_state_t *st[2];
    call_caps(b, c, k, st);
    for (int i = 0; i < 2; ++i) {
        uint64_t u = cap_units(k[i], c);
        if (k[i]->max_inflight != 0 && st[i]->inflight != 0 && st[i]->inflight + u > k[i]->max_inflight)
            return 0; /* a completion pumps again */
    }
    uint64_t wait = 0;
    for (int i = 0; i < 2; ++i) {
        uint64_t w = cap_token_wait(k[i], st[i], cap_units(k[i], c), now);
        if (w != 0 && !(c->qps_waited & (1 << i))) {
            c->qps_waited |= 1 << i;
            if (k[i]->qps_delayed != NULL)
                sg_counter_add(k[i]->qps_delayed, cap_units(k[i], c));
        }
        if (w > wait)
            wait = w;
    }
    if (wait == 0)
        return 1;
    if (*wake == 0 || now + wait < *wake)
        *wake = now + wait;
    return 0;
}

/* Whether route `b` can start call `c` now (its in-flight cap and every cap). */
static int route_allows(sg_route_t *b, sg_call_t *c, uint64_t now, uint64_t *wake)
{
    return backend_fits(b, c->n) && caps_allow(b, c, now, wake);
}

/* Call `c` leaves the admission queue of `b` (started, dropped or cancelled). */
static void unqueue_locked(sg_route_t *b, sg_call_t *c)
{
    sg_admit_cap_t *k[2];
    sg_cap_state_t *st[2];
    call_caps(b, c, k, st);
    b->core->admit_queued -= c->n;
    for (int i = 0; i < 2; ++i)
        st[i]->queued -= cap_units(k[i], c);
}

/* Call `c` starts: it takes its share of every in-flight count and its qps tokens. */
static void take_locked(sg_route_t *b, sg_call_t *c)
{
    sg_admit_cap_t *k[2];
    sg_cap_state_t *st[2];
    call_caps(b, c, k, st);
    b->core->admit_inflight += c->n;
    for (int i = 0; i < 2; ++i) {
        uint64_t u = cap_units(k[i], c);
        st[i]->inflight += u;
        if (k[i]->qps > 0)
            st[i]->tokens -= (double)u;
    }
    if (c->client != NULL)
        atomic_fetch_add(&c->client->st->inflight, c->n);
    atomic_store(&c->state, CALL_RUNNING);
}

uint64_t sg_dispatch_retry_at(void *admission, uint64_t earliest_ms)
{
    sg_call_t *c = admission;
    if (c == NULL)
        return earliest_ms;
    sg_route_t *b = c->backend;
    int ci = plugin_cap_index(b, c->is_access);
    sg_admit_cap_t *k = &b->caps[ci];
    sg_cap_state_t *st = &b->core->cap_state[ci];
    uint64_t at = earliest_ms;
    pthread_mutex_lock(&b->core->admit_mutex);
    if (k->qps > 0) {
        uint64_t now = sg_now_ms();
        cap_token_wait(k, st, 0, now); /* refills the bucket */
        st->tokens -= 1.0;             /* reserved now, so the calls still queued wait for it too */
        if (st->tokens < 0) {
            uint64_t ready = now + (uint64_t)ceil(-st->tokens * 1000.0 / k->qps);
            if (ready > at) {
                at = ready;
                if (k->qps_delayed != NULL)
                    sg_counter_add(k->qps_delayed, 1);
            }
        }
    }
    pthread_mutex_unlock(&b->core->admit_mutex);
    return at;
}

/* 503 text when a cap's queue bound refuses call `c`, else NULL. */
static const char *caps_queue_full(sg_route_t *b, const sg_call_t *c)
{
    sg_admit_cap_t *k[2];
    sg_cap_state_t *st[2];
    call_caps(b, c, k, st);
    for (int i = 0; i < 2; ++i)
        if (k[i]->max_queue != 0 && st[i]->queued + cap_units(k[i], c) > k[i]->max_queue)
            return "the plugin's max_queue";
    return NULL;
}

static sg_admit_queue_t *queue_for(sg_route_t *b, sg_client_t *cl)
{
    sg_admit_queue_t *q = b->core->admit_queues;
    const sg_client_state_t *who = cl != NULL ? cl->st : NULL;
    if (q != NULL) {
        do {
            if (q->who == who)
                return q;
            q = q->next;
        } while (q != b->core->admit_queues);
    }
    q = sg_mem_calloc(1, sizeof(*q));
    q->who = who;
    q->tail = &q->head;
    if (b->core->admit_queues == NULL) {
        q->next = q->prev = q;
        b->core->admit_queues = q;
    } else { /* insert just before the current position: it gets its turn after the others */
        q->next = b->core->admit_queues;
        q->prev = b->core->admit_queues->prev;
        q->prev->next = q;
        q->next->prev = q;
    }
    return q;
}

static void queue_drop(sg_route_t *b, sg_admit_queue_t *q)
{
    if (q->next == q) {
        b->core->admit_queues = NULL;
    } else {
        q->prev->next = q->next;
        q->next->prev = q->prev;
        if (b->core->admit_queues == q)
            b->core->admit_queues = q->next;
    }
    free(q);
}

static sg_call_t *queue_pop(sg_admit_queue_t *q)
{
    sg_call_t *c = q->head;
    q->head = c->q_next;
    if (q->head == NULL)
        q->tail = &q->head;
    c->q_next = NULL;
    return c;
}

static int call_is_dead(sg_call_t *c, uint64_t now_ms)
{
    return (atomic_load(&c->live) & CANCEL_BIT) != 0 || call_too_late(c, now_ms);
}

/* Takes runnable calls off the backend's queues (DRR across clients) while capacity allows.
 * Dead calls are moved to `dead`; both lists are linked through q_next. Caller holds admit_mutex. */
static void pump_locked(sg_route_t *b, sg_call_t **run, sg_call_t **dead, uint64_t *wake)
{
    uint64_t now = sg_now_ms();
    int64_t quantum = b->conf->chunk;
    size_t n_queues = 0, idle = 0;
    if (b->core->admit_queues != NULL) {
        sg_admit_queue_t *q = b->core->admit_queues;
        do {
            ++n_queues;
            q = q->next;
        } while (q != b->core->admit_queues);
    }
    while (b->core->admit_queues != NULL && idle <= n_queues) {
        sg_admit_queue_t *q = b->core->admit_queues;
        /* dead calls at the head cost nothing: drop them first */
        while (q->head != NULL && call_is_dead(q->head, now)) {
            sg_call_t *c = queue_pop(q);
            unqueue_locked(b, c);
            c->q_next = *dead;
            *dead = c;
        }
        if (q->head == NULL) {
            queue_drop(b, q);
            idle = 0;
            continue;
        }
        if (!route_allows(b, q->head, now, wake))
            break; /* the backend is full: a completion (or the token timer) pumps again */
        if (!client_fits(q->head->client, q->head->n)) {
            b->core->admit_queues = q->next; /* this client is at its own cap: next client */
            ++idle;
            continue;
        }
        if (q->deficit < (int64_t)q->head->n)
            q->deficit +=
                quantum * (int64_t)(q->head->client != NULL && q->head->client->conf != NULL ? q->head->client->conf->weight : 1);
        while (q->head != NULL && q->deficit >= (int64_t)q->head->n && !call_is_dead(q->head, now) &&
               client_fits(q->head->client, q->head->n) && route_allows(b, q->head, now, wake)) {
            sg_call_t *c = queue_pop(q);
            q->deficit -= (int64_t)c->n;
            unqueue_locked(b, c);
            take_locked(b, c);
            c->q_next = *run;
            *run = c;
        }
        idle = 0;
        if (q->head == NULL) {
            queue_drop(b, q);
            continue;
        }
        if (q->deficit >= (int64_t)q->head->n) {
            /* the turn is not over: the head died (dropped at the top), or the backend is full --
             * keep the turn so the client's weight holds when capacity frees up -- or the client
             * hit its own cap (next client) */
            if (call_is_dead(q->head, now))
                continue;
            if (!route_allows(b, q->head, now, wake))
                break;
        }
        b->core->admit_queues = q->next; /* next client's turn */
    }
    sg_gauge_set(b->queued_queries, (int64_t)b->core->admit_queued);
    sg_gauge_set(b->inflight_queries, (int64_t)b->core->admit_inflight);
}

static void run_lists(sg_call_t *run, sg_call_t *dead)
{
    /* `run` was built by prepending; start in submission order */
    sg_call_t *rev = NULL;
    while (run != NULL) {
        sg_call_t *next = run->q_next;
        run->q_next = rev;
        rev = run;
        run = next;
    }
    uint64_t now = sg_now_ms();
    while (dead != NULL) {
        sg_call_t *next = dead->q_next;
        int canceled = (atomic_load(&dead->live) & CANCEL_BIT) != 0;
        sg_counter_add(dead->backend->expired, 1);
        if (dead->client != NULL)
            sg_counter_add(dead->client->m_timeouts, 1);
        char msg[200] = "deadline passed while queued for the backend";
        if (!canceled && now < dead->search.deadline_ms) {
            sg_counter_add(dead->backend->floor_refused, 1);
            snprintf(msg, sizeof(msg),
                     "only %llu ms of the deadline left after waiting in the queue, under the route's floor of %u ms",
                     (unsigned long long)(dead->search.deadline_ms - now), route_floor_ms(dead->backend));
        }
        sg_result res = {canceled ? SG_ECANCELED : SG_ETIMEDOUT, canceled ? "every waiting request went away" : msg, NULL, 0, 0};
        atomic_store(&dead->state, CALL_DONE);
        call_complete(dead, &res);
        dead = next;
    }
    while (rev != NULL) {
        sg_call_t *next = rev->q_next;
        rev->q_next = NULL;
        call_start(rev);
        rev = next;
    }
}

static void on_admit_timer(sg_timer_t *t);

/* Arms `loop`'s admission timer for `wake` (0 = nothing waits for a token). Loop thread. */
static void arm_admit_timer(sg_loop_t *loop, uint64_t wake)
{
    if (wake == 0 || loop == NULL)
        return;
    if (!sg_timer_is_armed(&loop->admit_timer) || wake < loop->admit_timer.at_ms)
        sg_timer_start(&loop->timers, &loop->admit_timer, wake, on_admit_timer);
}

/* Starts what route `b` can start now; runs on `loop`'s thread. */
static void pump(sg_route_t *b, sg_loop_t *loop)
{
    sg_call_t *run = NULL, *dead = NULL;
    uint64_t wake = 0;
    if (b->core->destroyed) /* shutdown: the plugin instance is gone (set while the loops wait) */
        return;
    pthread_mutex_lock(&b->core->admit_mutex);
    pump_locked(b, &run, &dead, &wake);
    pthread_mutex_unlock(&b->core->admit_mutex);
    arm_admit_timer(loop, wake);
    run_lists(run, dead);
}

/* A qps token is due: every route may start a waiting call. */
static void on_admit_timer(sg_timer_t *t)
{
    sg_loop_t *loop = H2O_STRUCT_FROM_MEMBER(sg_loop_t, admit_timer, t);
    sg_gen_each_pumped_route(loop, pump); /* the routes of a generation still draining after a reload too */
}

/* A call with less of its deadline left than the route's floor is not started: 504 at once. */
static int refuse_too_late(sg_call_t *c)
{
    uint64_t now = sg_now_ms();
    if (!call_too_late(c, now))
        return 0;
    sg_route_t *b = c->backend;
    sg_counter_add(b->floor_refused, 1);
    char msg[240];
    uint64_t left = c->search.deadline_ms > now ? c->search.deadline_ms - now : 0;
    snprintf(msg, sizeof(msg),
             "only %llu ms of the deadline left, under the route's floor of %u ms (min_remaining_ms%s): not started",
             (unsigned long long)left, route_floor_ms(b),
             b->conf->min_remaining_quantile != SG_FLOOR_NONE ? ", or the route's recent call durations" : "");
    sg_result res = {SG_ETIMEDOUT, msg, NULL, 0, 0};
    atomic_store(&c->state, CALL_DONE);
    call_complete(c, &res);
    return 1;
}

static void admit_submit(sg_call_t *c)
{
    sg_route_t *b = c->backend;
    sg_call_t *run = NULL, *dead = NULL;
    const char *full = NULL;
    uint64_t wake = 0;
    if (refuse_too_late(c))
        return;
    pthread_mutex_lock(&b->core->admit_mutex);
    if (b->core->admit_queues == NULL && client_fits(c->client, c->n) && route_allows(b, c, sg_now_ms(), &wake)) {
        take_locked(b, c);
        run = c;
        sg_gauge_set(b->inflight_queries, (int64_t)b->core->admit_inflight);
    } else if (b->core->admit_queued + c->n > b->conf->max_queue) {
        full = "max_queue";
    } else if ((full = caps_queue_full(b, c)) == NULL) {
        sg_admit_cap_t *k[2];
        sg_cap_state_t *st[2];
        call_caps(b, c, k, st);
        sg_admit_queue_t *q = queue_for(b, c->client);
        *q->tail = c;
        q->tail = &c->q_next;
        b->core->admit_queued += c->n;
        for (int i = 0; i < 2; ++i)
            st[i]->queued += cap_units(k[i], c);
        pump_locked(b, &run, &dead, &wake);
    }
    pthread_mutex_unlock(&b->core->admit_mutex);
    arm_admit_timer(c->origin, wake);
    if (full != NULL) {
        sg_counter_add(b->shed, 1);
        if (c->client != NULL)
            sg_counter_add(c->client->m_shed, 1);
        char msg[200];
        if (strcmp(full, "max_queue") == 0)
            snprintf(msg, sizeof(msg), "backend %s is saturated: %llu queries queued (max_queue %u)", b->conf->name,
                     (unsigned long long)b->core->admit_queued, b->conf->max_queue);
        else
            snprintf(msg, sizeof(msg), "backend %s is saturated: too many requests waiting for an upstream slot (%s %u)",
                     b->conf->name, full, plugin_cap(b, c->is_access)->max_queue);
        sg_result res = {SG_EOVERLOAD, msg, NULL, 0, 1};
        atomic_store(&c->state, CALL_DONE);
        call_complete(c, &res);
        return;
    }
    run_lists(run, dead);
}

/* Cancels a call that lost every waiter: a queued one leaves the queue at once, a running one is
 * told to stop (the plugin still completes it exactly once). */
static void admit_cancel(sg_call_t *c)
{
    sg_route_t *b = c->backend;
    int was_queued = 0;
    pthread_mutex_lock(&b->core->admit_mutex);
    if (atomic_load(&c->state) == CALL_QUEUED) {
        sg_admit_queue_t *q = b->core->admit_queues;
        if (q != NULL) {
            do {
                for (sg_call_t **p = &q->head; *p != NULL; p = &(*p)->q_next) {
                    if (*p == c) {
                        *p = c->q_next;
                        if (q->tail == &c->q_next)
                            q->tail = p;
                        c->q_next = NULL;
                        unqueue_locked(b, c);
                        was_queued = 1;
                        break;
                    }
                }
                if (was_queued) {
                    if (q->head == NULL)
                        queue_drop(b, q);
                    break;
                }
                q = q->next;
            } while (q != b->core->admit_queues);
        }
        if (was_queued) {
            atomic_store(&c->state, CALL_DONE);
            sg_gauge_set(b->queued_queries, (int64_t)b->core->admit_queued);
        }
    }
    pthread_mutex_unlock(&b->core->admit_mutex);
    if (was_queued) {
        sg_counter_add(b->expired, 1);
        sg_result res = {SG_ECANCELED, "every waiting request went away", NULL, 0, 0};
        call_complete(c, &res);
    } else if (atomic_load(&c->state) == CALL_RUNNING && b->core->plugin.vt->cancel != NULL) {
        b->core->plugin.vt->cancel(b->core->inst, c);
    }
}

/* ---- call lifecycle ---- */

static void on_plugin_done(void *cb_data, const sg_result *res)
{
    sg_call_t *c = cb_data;
    call_complete(c, res);
}

static void call_start(sg_call_t *c)
{
    sg_route_t *b = c->backend;
    c->start_us = sg_now_us();
    uint64_t d = c->search.deadline_ms, floor = route_floor_ms(b);
    c->search.start_by_ms = d == 0 ? 0 : d > floor ? d - floor : 1;
    sg_counter_add(b->calls, 1);
    sg_counter_add(b->batch_queries, c->n);
    sg_budget_started(&c->budget);
    sg_status st = c->is_access ? b->core->plugin.vt->access(b->core->inst, &c->search, on_plugin_done, c)
                                : b->core->plugin.vt->search(b->core->inst, &c->search, on_plugin_done, c);
    if (st != SG_OK) {
        sg_result res = {st, "the backend refused the search", NULL, 0, st == SG_EOVERLOAD ? 1 : 0};
        call_complete(c, &res);
    }
}

/* Runs on any thread (usually the plugin's): turns the result into blobs, stores them in the
 * cache (one sg_cache_store() each: L1 here, Redis through the writer of the call's loop), wakes
 * every waiter of every flight of the call, then hands the call back to its origin loop for
 * admission release. */
static void call_complete(sg_call_t *c, const sg_result *res)
{
    sg_status st = res->status;
    const char *detail = res->detail;
    if (st == SG_OK && (res->n_queries != c->n || res->queries == NULL)) {
        st = SG_EINTERNAL;
        detail = "the backend returned a result for the wrong number of queries";
    }
    if (st == SG_OK) {
        uint64_t doc_bytes = 0, n_docs = 0;
        for (size_t i = 0; i < c->n; ++i) {
            const sg_hits *h = &res->queries[i];
            sg_hits capped = *h;
            if (capped.n_hits > c->search.topk)
                capped.n_hits = c->search.topk;
            c->blobs[i] = sg_blob_from_hits(&capped);
            for (size_t j = 0; j < capped.n_hits; ++j)
                doc_bytes += capped.hits[j].doc_len;
            n_docs += capped.n_hits;
        }
        sg_route_observe_docs(c->backend, c->is_access, doc_bytes, n_docs);
    } else {
        if (detail == NULL || detail[0] == '\0')
            detail = sg_plugin_status_name(st);
        c->detail = sg_strdup(detail);
    }
    c->status = st;
    c->retry_after = res->retry_after_s;
    if (c->start_us != 0) {
        sg_hist_observe_us(c->backend->call_latency, sg_now_us() - c->start_us);
        if (st != SG_OK)
            sg_counter_add(c->backend->call_errors, 1);
    }
    /* results into the cache first -- L1 at once (which fills the watches on their keys): once a
     * flight leaves the table, a duplicate must find its result; Redis through the call's loop */
    for (size_t i = 0; i < c->n; ++i) {
        sg_flight_t *f = c->flights[i];
        if (st == SG_OK && f->key != NULL)
            sg_cache_store(c->origin->cache_writer, f->key, f->key_len, c->blobs[i], c->backend->conf->cache_ttl_s);
        sg_l1_miss_release(f->miss);
        f->miss = NULL;
    }
    for (size_t i = 0; i < c->n; ++i) {
        sg_flight_t *f = c->flights[i];
        shard_t *s = shard_of(f->hash);
        pthread_mutex_lock(&s->mu);
        shard_remove(s, f);
        sg_waiter_t *ws = f->waiters;
        f->waiters = NULL;
        for (sg_waiter_t *w = ws; w != NULL; w = w->next)
            w->flight = NULL;
        f->n_waiters = 0;
        pthread_mutex_unlock(&s->mu);
        while (ws != NULL) {
            sg_waiter_t *w = ws;
            ws = w->next;
            w->next = NULL;
            w->pprev = NULL;
            w->status = st;
            if (st == SG_OK)
                w->blob = sg_blob_ref(c->blobs[i]);
            else
                w->detail = sg_strdup(c->detail);
            w->retry_after = c->retry_after;
            h2o_multithread_send_message(&w->loop->deliveries, &w->msg);
        }
    }
    sg_dispatch_release(c); /* done(): the admission slot goes back unless the plugin holds it */
}

void sg_dispatch_hold(void *admission)
{
    sg_call_t *c = admission;
    atomic_fetch_add_explicit(&c->holding, 1, memory_order_acq_rel);
}

void sg_dispatch_release(void *admission)
{
    sg_call_t *c = admission;
    if (atomic_fetch_sub_explicit(&c->holding, 1, memory_order_acq_rel) == 1)
        h2o_multithread_send_message(&c->origin->finished, &c->msg); /* the call is over: its origin loop frees the slot */
}

/* origin loop: the call is over */
static void on_finished(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    while (!h2o_linklist_is_empty(messages)) {
        sg_call_t *c = H2O_STRUCT_FROM_MEMBER(sg_call_t, msg.link, messages->next);
        h2o_linklist_unlink(&c->msg.link);
        sg_route_t *b = c->backend;
        int was_running = c->start_us != 0;
        atomic_store(&c->state, CALL_DONE);
        if (was_running) { /* (the caps' units and indices are the core's plugin's: the same in every generation) */
            sg_admit_cap_t *k[2];
            sg_cap_state_t *st[2];
            call_caps(b, c, k, st);
            pthread_mutex_lock(&b->core->admit_mutex);
            b->core->admit_inflight -= c->n;
            for (int j = 0; j < 2; ++j)
                st[j]->inflight -= cap_units(k[j], c);
            if (c->status == SG_OK)
                floor_observe_locked(b, (sg_now_us() - c->start_us) / 1000);
            sg_gauge_set(b->inflight_queries, (int64_t)b->core->admit_inflight);
            pthread_mutex_unlock(&b->core->admit_mutex);
            if (c->client != NULL)
                atomic_fetch_sub(&c->client->st->inflight, c->n);
        }
        if (!was_running)
            sg_budget_unused(c->origin, &c->budget); /* never reached the plugin: not spent */
        if (was_running)
            sg_gen_each_pumped_route(c->origin, pump);
        call_release(c);
    }
}

/* request loop: a waiter resolved */
static void on_delivery(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    while (!h2o_linklist_is_empty(messages)) {
        sg_waiter_t *w = H2O_STRUCT_FROM_MEMBER(sg_waiter_t, msg.link, messages->next);
        h2o_linklist_unlink(&w->msg.link);
        sg_query_t *r = w->query;
        if (r != NULL) {
            r->uniq[w->uniq].waiter = NULL;
            r->next->on_result(r, w->uniq, w->blob, w->status, w->detail, w->retry_after);
        }
        sg_blob_release(w->blob);
        free(w->detail);
        free(w);
    }
}

/* The plugin's limits for `op` (ABI 1.2), zero-filled when it has none. */
static int plugin_limits(const sg_backend_vtable *vt, sg_backend *inst, int op, sg_limits *out)
{
    memset(out, 0, sizeof(*out));
    out->struct_size = sizeof(*out);
    out->retries = -1;
    if (vt->abi_minor < 2 || vt->struct_size < offsetof(sg_backend_vtable, limits) + sizeof(vt->limits) || vt->limits == NULL)
        return 0;
    vt->limits(inst, op, out);
    if (out->qps > 0 && out->burst < 1)
        out->burst = 1;
    return 1;
}

/* A call's queries stay within a bucket's burst and an in-flight cap counted in queries, so that
 * one call never needs more than a full bucket. */
static uint32_t chunk_within(uint32_t chunk, const sg_admit_cap_t *k)
{
    if (k->per_call)
        return chunk;
    if (k->qps > 0 && (double)chunk > k->burst)
        chunk = k->burst >= 1 ? (uint32_t)k->burst : 1;
    if (k->max_inflight != 0 && chunk > k->max_inflight)
        chunk = k->max_inflight;
    return chunk;
}

/* A plugin cap from the plugin's limits (`has` 0: none). */
static void cap_setup(sg_admit_cap_t *k, const sg_limits *lim, int has, const char *labels)
{
    k->per_call = lim->per_call != 0;
    k->max_inflight = lim->max_inflight;
    k->max_queue = lim->max_queue;
    k->qps = lim->qps > 0 ? lim->qps : 0;
    k->burst = lim->burst >= 1 ? lim->burst : 1;
    if (has && lim->metric_prefix != NULL && lim->metric_prefix[0] != '\0') {
        char name[160];
        snprintf(name, sizeof(name), "searchgate_backend_%s_http_qps_delayed_total", lim->metric_prefix);
        k->qps_delayed = sg_metrics_counter(name, "Upstream requests that waited for a token of the plugin's qps cap.", labels);
    }
}

/* A new core: full buckets, and the plugin's DOC size until calls measure it. A core a reload keeps
 * keeps its counts, buckets and measured sizes. */
static void core_admission_init(sg_route_t *b, const sg_limits lim[2], const int has[2])
{
    sg_route_core_t *k = b->core;
    if (k->admit_ready)
        return;
    uint64_t now = sg_now_ms();
    for (int i = 0; i < SG_NUM_CAPS; ++i)
        k->cap_state[i] = (sg_cap_state_t){0, 0, b->caps[i].burst, now};
    for (int op = 0; op < 2; ++op)
        if (has[op] && lim[op].doc_bytes != 0)
            atomic_store_explicit(&k->doc_bytes[op != 0], lim[op].doc_bytes, memory_order_relaxed);
    k->admit_ready = 1;
}

void sg_dispatch_setup_route(sg_route_t *b, const sg_backend_vtable *vt, sg_backend *inst)
{
    const sg_backend_conf_t *bc = b->conf;
    char l[256];
    snprintf(l, sizeof(l), "backend=\"%s\"", bc->name);
    sg_admit_cap_t *route = &b->caps[SG_CAP_ROUTE];
    route->qps = bc->qps;
    route->burst = bc->burst >= 1 ? bc->burst : 1;
    route->qps_delayed = sg_metrics_counter("searchgate_backend_qps_delayed_queries_total",
                                            "Queries that waited for a token of the route's qps cap.", l);
    b->access_shares_search = 0;
    sg_limits lims[2];
    int has[2];
    for (int op = 0; op < 2; ++op) {
        sg_limits *lim = &lims[op];
        sg_admit_cap_t *k = &b->caps[op == SG_OP_SEARCH ? SG_CAP_SEARCH : SG_CAP_ACCESS];
        has[op] = plugin_limits(vt, inst, op, lim);
        if (op == SG_OP_ACCESS && has[op] && lim->share_search) {
            b->access_shares_search = 1;
            k = &b->caps[SG_CAP_SEARCH]; /* set up with search: only the chunk and the budget below */
        } else {
            cap_setup(k, lim, has[op], l);
        }
        b->chunk[op] = chunk_within(chunk_within(bc->chunk, route), k);
        /* the retry budget: the route's `retries` when set, else what the plugin's config asks for */
        int32_t retries = bc->retries >= 0 ? bc->retries : lim->retries >= 0 ? lim->retries : 0;
        b->max_attempts[op] = has[op] ? (uint32_t)retries + 1 : 0;
        if (op == SG_OP_SEARCH && !has[op] && bc->retries > 0)
            SG_LOG(SG_LL_WARN, "config",
                   "backend %s: \"retries\": %d has no effect: plugin %s sends no upstream requests, so the route never "
                   "retries",
                   bc->name, (int)bc->retries, vt->name);
    }
    core_admission_init(b, lims, has);
}

/* ---- what a route can ever admit of one request (item: requests that can never be served) ---- */

/* How admit_submit() treats the calls of one request of `n` misses on an idle route `b` (nothing
 * running or queued, full buckets): the first calls start while every in-flight cap and bucket
 * allows, the rest must all wait in the queues at once. Returns 0 when they fit, 1 when the
 * route's max_queue refuses one, 2 when a plugin cap's max_queue does; `*need_queue` (when not
 * NULL) is the route queue the request needs. */
static int admit_simulate(sg_route_t *b, int is_access, uint64_t n, uint64_t *need_queue)
{
    uint32_t chunk = b->chunk[is_access ? 1 : 0] != 0 ? b->chunk[is_access ? 1 : 0] : b->conf->chunk;
    const sg_admit_cap_t *k[2] = {&b->caps[SG_CAP_ROUTE], plugin_cap(b, is_access)};
    uint64_t inflight = 0, queued = 0, cap_inflight[2] = {0, 0}, cap_queued[2] = {0, 0};
    double tokens[2] = {k[0]->burst, k[1]->burst};
    int queuing = 0, verdict = 0;
    for (uint64_t at = 0; at < n;) {
        uint64_t c = n - at < chunk ? n - at : chunk;
        at += c;
        int runs = !queuing && (b->conf->max_inflight == 0 || inflight == 0 || inflight + c <= b->conf->max_inflight);
        for (int i = 0; i < 2; ++i) {
            uint64_t u = k[i]->per_call ? 1 : c;
            if (k[i]->max_inflight != 0 && cap_inflight[i] != 0 && cap_inflight[i] + u > k[i]->max_inflight)
                runs = 0;
            if (k[i]->qps > 0 && tokens[i] < ((double)u < k[i]->burst ? (double)u : k[i]->burst))
                runs = 0;
        }
        for (int i = 0; i < 2; ++i) {
            uint64_t u = k[i]->per_call ? 1 : c;
            if (runs) {
                cap_inflight[i] += u;
                tokens[i] -= (double)u;
            } else if (k[i]->max_queue != 0 && (cap_queued[i] += u) > k[i]->max_queue && verdict == 0) {
                verdict = 2;
            }
        }
        if (runs) {
            inflight += c;
            continue;
        }
        queuing = 1;
        if ((queued += c) > b->conf->max_queue && verdict == 0)
            verdict = 1;
    }
    if (need_queue != NULL)
        *need_queue = queued;
    return verdict;
}

uint32_t sg_dispatch_capacity(sg_route_t *b, int is_access, uint32_t max)
{
    if (admit_simulate(b, is_access, max, NULL) == 0)
        return max;
    uint32_t lo = 0, hi = max; /* admit_simulate(lo) fits, (hi) does not: more queries never fit better */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (admit_simulate(b, is_access, mid, NULL) == 0)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int sg_dispatch_describe_capacity(sg_route_t *b, int is_access, uint32_t n, char *msg, size_t size)
{
    uint64_t need = 0;
    int verdict = admit_simulate(b, is_access, n, &need);
    if (verdict == 0)
        return 0;
    uint32_t cap = sg_dispatch_capacity(b, is_access, n);
    const sg_admit_cap_t *pk = plugin_cap(b, is_access);
    char plugin[96] = "";
    if (pk->max_inflight != 0 || pk->max_queue != 0)
        snprintf(plugin, sizeof(plugin), "; the plugin's max_inflight %u, max_queue %u%s", pk->max_inflight, pk->max_queue,
                 pk->per_call ? " calls" : " queries");
    snprintf(msg, size,
             "backend %s can never admit %u queries of one request: at most %u (max_inflight %u, max_queue %u, calls of %u "
             "queries%s); send at most %u queries per request%s",
             b->conf->name, n, cap, b->conf->max_inflight, b->conf->max_queue,
             b->chunk[is_access ? 1 : 0] != 0 ? b->chunk[is_access ? 1 : 0] : b->conf->chunk, plugin, cap,
             verdict == 1 ? "" : " (the plugin's max_queue is the bound)");
    if (verdict == 1) {
        size_t l = strlen(msg);
        snprintf(msg + l, size - l, ", or raise the route's max_queue to %llu", (unsigned long long)need);
    }
    return -1;
}

void sg_dispatch_init_loop(sg_loop_t *loop)
{
    h2o_multithread_register_receiver(loop->ctx.queue, &loop->deliveries, on_delivery);
    h2o_multithread_register_receiver(loop->ctx.queue, &loop->finished, on_finished);
}

static sg_call_t *call_new(sg_query_t *r, size_t cap)
{
    sg_call_t *c = sg_mem_calloc(1, sizeof(*c));
    atomic_init(&c->refs, 1);
    atomic_init(&c->live, 0);
    atomic_init(&c->holding, 1);
    atomic_init(&c->state, CALL_QUEUED);
    c->backend = r->serving;
    c->gen = sg_gen_ref(r->gen);
    c->client = sg_clients_ref(r->client);
    c->origin = r->loop;
    c->is_access = r->is_access;
    c->queries = sg_mem_calloc(cap, sizeof(*c->queries));
    c->flights = sg_mem_calloc(cap, sizeof(*c->flights));
    c->blobs = sg_mem_calloc(cap, sizeof(*c->blobs));
    snprintf(c->request_id, sizeof(c->request_id), "%s", r->request_id);
    c->search.struct_size = sizeof(c->search);
    c->search.topk = r->topk;
    c->search.queries = c->queries;
    c->search.deadline_ms = r->deadline_ms;
    c->search.request_id = c->request_id;
    const char *params = sg__query_params(r);
    c->params = params != NULL ? sg_strdup(params) : NULL;
    c->search.params = c->params;
    c->search.max_attempts = c->backend->max_attempts[c->is_access ? 1 : 0];
    c->search.admission = c;
    return c;
}

/* Queries per call on route `b`: its chunk, within the caps' bursts (sg_dispatch_setup_route). */
static uint32_t call_chunk(const sg_route_t *b, int is_access)
{
    uint32_t c = b->chunk[is_access ? 1 : 0];
    return c != 0 ? c : b->conf->chunk;
}

/* The L1 entry of one query (a referenced blob), or NULL. */
/* The calls one dispatch starts: the misses that need a new flight fill a call up to the route's
 * chunk, then the next one. */
typedef struct st_new_calls_t {
    sg_call_t *cur;
    sg_call_t **list;
    size_t n, cap;
} new_calls_t;

/* A new flight for miss `u` of `r`, in the current call of `nc` (a new call when that one is full),
 * published in shard `s` (caller holds its lock) so that other requests for the query join it.
 * The flight takes `key` (its cache key, or empty when the answer is not cached). */
static void flight_start(new_calls_t *nc, sg_query_t *r, sg_uq_t *u, sg_waiter_t *w, shard_t *s, uint64_t h, uint32_t op,
                         sg_buf_t *key)
{
    sg_flight_t *f = sg_mem_calloc(1, sizeof(*f));
    f->miss = u->miss; /* the flight's store fills it */
    u->miss = NULL;
    sg_route_t *b = r->serving;
    uint32_t chunk = call_chunk(b, r->is_access);
    f->hash = h;
    f->backend = b->core->id; /* the core: the same instance under every generation that keeps it */
    f->topk = r->topk;
    f->op = op;
    f->len = u->len;
    f->text = sg_strndup(u->text, u->len);
    f->key = key->base;
    f->key_len = (uint32_t)key->len;
    if (nc->cur == NULL || nc->cur->n == chunk) {
        nc->cur = call_new(r, chunk < r->n_uniq ? chunk : r->n_uniq);
        if (nc->n == nc->cap) {
            nc->cap = nc->cap != 0 ? nc->cap * 2 : 4;
            nc->list = sg_mem_realloc(nc->list, nc->cap * sizeof(*nc->list));
        }
        nc->list[nc->n++] = nc->cur;
    }
    sg_call_t *cur = nc->cur;
    f->call = cur;
    f->params = cur->params;
    atomic_fetch_add(&cur->live, 1);
    cur->queries[cur->n].text = f->text;
    cur->queries[cur->n].len = f->len;
    cur->flights[cur->n] = f;
    cur->n++;
    cur->search.n_queries = cur->n;
    waiter_link(f, w);
    shard_insert(s, f);
}

/* The result of miss `u` of `r` that a flight stored since the cache step missed it (a referenced
 * blob), or NULL; `key` is its cache key, or empty when the route does not cache. Its watch
 * says (L1 filled it); a miss without one -- the cache step did not look it up for the backend
 * serving now -- looks in L1. The caller holds the flight's shard lock, which orders the store
 * of a flight before its leaving the table. */
static sg_blob_t *stored_since_lookup(const sg_query_t *r, sg_uq_t *u, const sg_buf_t *key)
{
    if (u->miss != NULL && r->keys_of == r->serving) {
        sg_blob_t *b = sg_l1_miss_result(u->miss, sg_now_ms());
        if (b != NULL || !sg_l1_miss_filled(u->miss)) /* unfilled: nothing was stored since */
            return b;
        /* filled, but that result expired since: a later store may be in L1 (below) */
    } else {
        sg_l1_miss_release(u->miss); /* (one on the key of a backend no longer serving: not
                                      * expected, since the first dispatch takes every watch) */
        u->miss = NULL;
    }
    return key->base != NULL ? sg_cache_get_l1(key->base, key->len) : NULL;
}

/* Miss `i` of `r`: joins the flight already searching it, else takes its result when a flight
 * completed since the request's cache lookup, else starts a new flight in `nc`. */
static void dispatch_miss(sg_query_t *r, uint32_t i, new_calls_t *nc)
{
    sg_route_t *b = r->serving;
    sg_uq_t *u = &r->uniq[i];
    uint32_t op = r->is_access ? 1 : 0;
    const char *params = sg__query_params(r);
    flight_key_t key = {b->core->id, r->topk, op, u->len, params, u->text};
    uint64_t h = flight_hash(&key);
    shard_t *s = shard_of(h);
    sg_waiter_t *w = sg_mem_calloc(1, sizeof(*w));
    w->query = r;
    w->hash = h;
    w->uniq = i;
    w->loop = r->loop;
    u->waiter = w;
    pthread_mutex_lock(&s->mu);
    sg_flight_t *f = shard_find(s, h, &key);
    if (f != NULL && (f->n_waiters > 0 || call_revive(f->call))) {
        waiter_link(f, w);
        pthread_mutex_unlock(&s->mu);
        sg_l1_miss_release(u->miss); /* the flight answers it */
        u->miss = NULL;
        u->source = SG_SRC_JOINED;
        sg_counter_add(b->coalesced, 1);
        return;
    }
    /* no flight: one may have completed since this request's cache lookup. The key is the new
     * flight's, which stores its answer under it. */
    sg_buf_t ck = {0};
    if (b->conf->cache && !r->is_access)
        sg__query_key_of(&ck, r, u);
    sg_blob_t *late = stored_since_lookup(r, u, &ck);
    if (late != NULL) {
        pthread_mutex_unlock(&s->mu);
        sg_buf_free(&ck);
        free(w);
        sg_l1_miss_release(u->miss);
        u->miss = NULL;
        u->waiter = NULL;
        u->blob = late;
        u->source = SG_SRC_L1;
        --r->n_pending;
        r->next->took_blob(r, u);
        ++r->hits_l1;
        if (r->misses > 0)
            --r->misses;
        sg_counter_add(b->cache_hits_l1, 1);
        return;
    }
    if (f != NULL)
        shard_remove(s, f); /* its call was cancelled: start afresh */
    u->source = SG_SRC_BACKEND;
    flight_start(nc, r, u, w, s, h, op, &ck);
    pthread_mutex_unlock(&s->mu);
}

void sg__dispatch_misses(sg_query_t *r)
{
    new_calls_t nc = {0};
    for (uint32_t i = 0; i < r->n_uniq; ++i) {
        sg_uq_t *u = &r->uniq[i];
        if (u->blob == NULL && u->waiter == NULL)
            dispatch_miss(r, i, &nc);
    }
    for (size_t i = 0; i < nc.n; ++i) /* new flights spend the request's budget reservation; joins do not */
        if (r->budget != NULL)
            sg_budget_take(r->budget, &nc.list[i]->budget, (uint32_t)nc.list[i]->n);
    if (r->budget != NULL) { /* what no call took (joins, late L1 hits) goes back */
        sg_budget_unused(r->loop, r->budget);
        r->budget = NULL;
    }
    for (size_t i = 0; i < nc.n; ++i)
        admit_submit(nc.list[i]);
    free(nc.list);
    if (r->n_pending == 0) /* every miss turned out to be in L1 by now */
        r->next->finish_if_complete(r);
}

void sg__dispatch_abandon(sg_query_t *r)
{
    for (uint32_t i = 0; i < r->n_uniq; ++i) {
        sg_uq_t *u = &r->uniq[i];
        sg_waiter_t *w = u->waiter;
        if (w == NULL)
            continue;
        u->waiter = NULL;
        shard_t *s = shard_of(w->hash);
        sg_call_t *cancel = NULL;
        pthread_mutex_lock(&s->mu);
        if (w->flight != NULL) {
            sg_flight_t *f = w->flight;
            waiter_unlink(w);
            if (f->n_waiters == 0 && call_drop_live(f->call)) {
                cancel = f->call;
                atomic_fetch_add(&cancel->refs, 1);
            }
            pthread_mutex_unlock(&s->mu);
            free(w);
        } else {
            w->query = NULL; /* resolved and in transit to this loop: on_delivery frees it */
            pthread_mutex_unlock(&s->mu);
        }
        if (cancel != NULL) {
            admit_cancel(cancel);
            call_release(cancel);
        }
    }
}
