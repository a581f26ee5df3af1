/*
 * stats_ring.c -- the dashboard's per-second ring (stats_ring.h): one slot per second, reused
 * when its second comes round again, under one short mutex (a request's end touches it once).
 */
#include "stats_ring.h"
#include "common.h"
#include "json.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#define RING_LAT_BUCKETS 48 /* log2-spaced latency buckets from 16 us */

typedef struct st_ring_slot_t {
    uint64_t sec;
    uint64_t requests, queries, hits, misses, errors;
    uint32_t lat[RING_LAT_BUCKETS];
} ring_slot_t;

static pthread_mutex_t ring_mutex = PTHREAD_MUTEX_INITIALIZER;
static ring_slot_t ring[SG_RING_SECONDS];

static uint64_t now_sec(void)
{
    return sg_now_ms() / 1000;
}

static ring_slot_t *slot_for(uint64_t sec)
{
    ring_slot_t *s = &ring[sec % SG_RING_SECONDS];
    if (s->sec != sec) {
        memset(s, 0, sizeof(*s));
        s->sec = sec;
    }
    return s;
}

static int lat_bucket(uint64_t us)
{
    int b = 0;
    uint64_t v = us >> 4;
    while (v > 0 && b < RING_LAT_BUCKETS - 1) {
        v >>= 1;
        ++b;
    }
    return b;
}

static double lat_bucket_ms(int b)
{
    /* upper edge of the bucket */
    return (double)((uint64_t)16 << b) / 1000.0;
}

void sg_ring_record_request(uint64_t queries, uint64_t hits, uint64_t misses, int is_error, uint64_t latency_us)
{
    uint64_t sec = now_sec();
    pthread_mutex_lock(&ring_mutex);
    ring_slot_t *s = slot_for(sec);
    s->requests += 1;
    s->queries += queries;
    s->hits += hits;
    s->misses += misses;
    s->errors += is_error ? 1 : 0;
    s->lat[lat_bucket(latency_us)] += 1;
    pthread_mutex_unlock(&ring_mutex);
}

static double quantile(const uint32_t *lat, uint64_t n, double q)
{
    if (n == 0)
        return NAN;
    uint64_t want = (uint64_t)ceil(q * (double)n), cum = 0;
    for (int b = 0; b < RING_LAT_BUCKETS; ++b) {
        cum += lat[b];
        if (cum >= want)
            return lat_bucket_ms(b);
    }
    return lat_bucket_ms(RING_LAT_BUCKETS - 1);
}

void sg_ring_render_json(sg_jw_t *w, int seconds)
{
    if (seconds < 1)
        seconds = 1;
    if (seconds > SG_RING_SECONDS - 1)
        seconds = SG_RING_SECONDS - 1;
    uint64_t now = now_sec();
    double wall = floor(sg_wall_time());
    sg_jw_key(w, "series");
    sg_jw_arr(w);
    pthread_mutex_lock(&ring_mutex);
    for (int i = seconds; i >= 1; --i) { /* whole seconds only: the current one is still filling */
        uint64_t sec = now - (uint64_t)i;
        const ring_slot_t *s = &ring[sec % SG_RING_SECONDS];
        ring_slot_t zero = {0};
        if (s->sec != sec)
            s = &zero;
        sg_jw_obj(w);
        sg_jw_kfixed(w, "t", wall - i, 0);
        sg_jw_ku64(w, "requests", s->requests);
        sg_jw_ku64(w, "queries", s->queries);
        sg_jw_ku64(w, "hits", s->hits);
        sg_jw_ku64(w, "misses", s->misses);
        sg_jw_ku64(w, "errors", s->errors);
        sg_jw_kdouble(w, "p50_ms", quantile(s->lat, s->requests, 0.5));
        sg_jw_kdouble(w, "p99_ms", quantile(s->lat, s->requests, 0.99));
        sg_jw_end(w);
    }
    pthread_mutex_unlock(&ring_mutex);
    sg_jw_end(w);
}

double sg_ring_hit_ratio(int seconds)
{
    uint64_t now = now_sec(), hits = 0, misses = 0;
    if (seconds > SG_RING_SECONDS - 1)
        seconds = SG_RING_SECONDS - 1;
    pthread_mutex_lock(&ring_mutex);
    for (int i = 0; i <= seconds; ++i) {
        uint64_t sec = now - (uint64_t)i;
        const ring_slot_t *s = &ring[sec % SG_RING_SECONDS];
        if (s->sec == sec) {
            hits += s->hits;
            misses += s->misses;
        }
    }
    pthread_mutex_unlock(&ring_mutex);
    return hits + misses == 0 ? NAN : (double)hits / (double)(hits + misses);
}
