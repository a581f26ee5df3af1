/*
 * bench_l1.c -- micro-benchmark of the two hot hash-table paths: the L1 cache (sg_l1_get hits and
 * misses, sg_l1_put replacing entries) through its public API, and a singleflight-shaped index
 * (find a flight by a composite key, insert when absent, remove a bounded number of flights
 * later) on lib/hmap next to the chained bucket array dispatch.c kept before it.
 * Usage: build/bench_l1 [KEYS] [ROUNDS]     prints ns per operation; on a shared machine run it
 * alone (it is single-threaded and timing-sensitive).
 */
#include "cache.h"
#include "hmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* keys shaped like the gateway's: a route prefix, topk, then the query text */
static size_t make_key(char *buf, size_t size, size_t i)
{
    return (size_t)snprintf(buf, size, "sg:v1:e5-flat-wiki18:k3:who wrote the play number %zu and when was it first staged", i);
}

typedef struct st_flight_t {
    struct st_flight_t *next; /* the chained baseline's bucket chain */
    uint64_t hash;
    uint32_t backend, topk, op, len;
    const char *text;
} flight_t;

/* the baseline: a bucket array of chains, doubled when it holds as many entries as buckets */
typedef struct {
    flight_t **b;
    size_t nb, n;
} chained_t;

static flight_t *chained_find(chained_t *t, const flight_t *k)
{
    for (flight_t *f = t->b[k->hash & (t->nb - 1)]; f != NULL; f = f->next)
        if (f->hash == k->hash && f->backend == k->backend && f->topk == k->topk && f->op == k->op && f->len == k->len &&
            memcmp(f->text, k->text, k->len) == 0)
            return f;
    return NULL;
}

static void chained_insert(chained_t *t, flight_t *f)
{
    if (t->n + 1 > t->nb) {
        size_t nb = t->nb * 2;
        flight_t **b = calloc(nb, sizeof(*b));
        for (size_t i = 0; i < t->nb; ++i)
            for (flight_t *e = t->b[i], *next; e != NULL; e = next) {
                next = e->next;
                e->next = b[e->hash & (nb - 1)];
                b[e->hash & (nb - 1)] = e;
            }
        free(t->b);
        t->b = b;
        t->nb = nb;
    }
    f->next = t->b[f->hash & (t->nb - 1)];
    t->b[f->hash & (t->nb - 1)] = f;
    ++t->n;
}

static void chained_remove(chained_t *t, flight_t *f)
{
    for (flight_t **p = &t->b[f->hash & (t->nb - 1)]; *p != NULL; p = &(*p)->next)
        if (*p == f) {
            *p = f->next;
            --t->n;
            return;
        }
}

static int flight_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    (void)ud;
    const flight_t *f = item, *k = key;
    (void)key_len;
    return f->backend == k->backend && f->topk == k->topk && f->op == k->op && f->len == k->len &&
           memcmp(f->text, k->text, k->len) == 0;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
    size_t rounds = argc > 2 ? strtoul(argv[2], NULL, 10) : 2000000;
    if (n == 0 || rounds == 0) {
        fprintf(stderr, "usage: bench_l1 [KEYS] [ROUNDS]\n");
        return 2;
    }
    char(*keys)[128] = calloc(n, sizeof(*keys));
    size_t *lens = calloc(n, sizeof(*lens));
    for (size_t i = 0; i < n; ++i)
        lens[i] = make_key(keys[i], sizeof(keys[i]), i);
    sg_blob_t *blob = calloc(1, sizeof(*blob));
    atomic_init(&blob->refs, 1);
    blob->json = strdup("[{\"id\":\"1\",\"contents\":\"x\"}]");
    blob->json_len = strlen(blob->json);
    char(*miss)[128] = calloc(n, sizeof(*miss));
    size_t *miss_lens = calloc(n, sizeof(*miss_lens));
    for (size_t i = 0; i < n; ++i)
        miss_lens[i] = make_key(miss[i], sizeof(miss[i]), n + i);

    sg_l1_t *c = sg_l1_create((size_t)1 << 34);
    double t0 = now_s();
    for (size_t i = 0; i < n; ++i)
        sg_l1_put(c, keys[i], lens[i], blob, UINT64_MAX);
    double t_fill = now_s() - t0;
    uint64_t x = 88172645463325252ull;
    size_t hits = 0;
    t0 = now_s();
    for (size_t r = 0; r < rounds; ++r) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t i = (size_t)(x % n);
        sg_blob_t *b = sg_l1_get(c, keys[i], lens[i], 1);
        hits += b != NULL;
        sg_blob_release(b);
    }
    double t_hit = now_s() - t0;
    t0 = now_s();
    for (size_t r = 0; r < rounds; ++r) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t i = (size_t)(x % n);
        hits += sg_l1_get(c, miss[i], miss_lens[i], 1) != NULL;
    }
    double t_miss = now_s() - t0;
    t0 = now_s();
    for (size_t r = 0; r < rounds; ++r) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t i = (size_t)(x % n);
        sg_l1_put(c, keys[i], lens[i], blob, UINT64_MAX);
    }
    double t_put = now_s() - t0;
    sg_l1_destroy(c);

    /* singleflight's shape: each query looks its flight up, most miss, insert, later remove */
    flight_t *fl = calloc(n, sizeof(*fl));
    for (size_t i = 0; i < n; ++i) {
        fl[i] = (flight_t){NULL, 0, (uint32_t)(i % 3), 3, 0, (uint32_t)lens[i], keys[i]};
        fl[i].hash = sg_hash64(keys[i], lens[i], ((uint64_t)fl[i].backend << 40) ^ 3);
    }
    /* each round: look up a query (a quarter repeat a recent one), insert it when absent, and
     * retire the flight inserted `live` rounds ago */
    size_t live = n < 4096 ? n : 4096, found = 0;
    sg_hmap_t m;
    sg_hmap_init(&m, flight_eq, NULL, 64);
    t0 = now_s();
    for (size_t r = 0; r < rounds; ++r) {
        size_t i = (r - (r % 4 == 0 && r > 9 ? 9 : 0)) % n;
        if (sg_hmap_find(&m, fl[i].hash, &fl[i], 0) != NULL)
            ++found;
        else
            sg_hmap_insert(&m, fl[i].hash, &fl[i]);
        if (r >= live)
            sg_hmap_remove(&m, fl[(r - live) % n].hash, &fl[(r - live) % n]);
    }
    double t_flight = now_s() - t0;
    sg_hmap_dispose(&m);
    chained_t ch = {calloc(64, sizeof(flight_t *)), 64, 0};
    size_t found2 = 0;
    t0 = now_s();
    for (size_t r = 0; r < rounds; ++r) {
        size_t i = (r - (r % 4 == 0 && r > 9 ? 9 : 0)) % n;
        if (chained_find(&ch, &fl[i]) != NULL)
            ++found2;
        else
            chained_insert(&ch, &fl[i]);
        if (r >= live)
            chained_remove(&ch, &fl[(r - live) % n]);
    }
    double t_chained = now_s() - t0;
    free(ch.b);

    printf("keys %zu, rounds %zu (hits %zu, flights found %zu/%zu)\n", n, rounds, hits, found, found2);
    printf("l1 fill      %7.1f ns/op\n", t_fill * 1e9 / (double)n);
    printf("l1 get hit   %7.1f ns/op\n", t_hit * 1e9 / (double)rounds);
    printf("l1 get miss  %7.1f ns/op\n", t_miss * 1e9 / (double)rounds);
    printf("l1 put       %7.1f ns/op\n", t_put * 1e9 / (double)rounds);
    printf("flights hmap %7.1f ns/round\n", t_flight * 1e9 / (double)rounds);
    printf("flights chained %4.1f ns/round\n", t_chained * 1e9 / (double)rounds);
    sg_blob_release(blob);
    free(fl);
    free(miss);
    free(miss_lens);
    free(keys);
    free(lens);
    return 0;
}
