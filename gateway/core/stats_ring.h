/*
 * stats_ring.h -- the per-second ring (last 15 minutes) that /stats serves to the dashboard and
 * /health's hit ratios read: requests, queries, cache hits/misses, errors and a coarse latency
 * histogram for p50/p99 per second. It holds 900 whole seconds plus the one still filling.
 * Process-wide (every loop records into it); any thread.
 */
#ifndef SG_GATEWAY_STATS_RING_H
#define SG_GATEWAY_STATS_RING_H

#include <stdint.h>

typedef struct st_sg_jw_t sg_jw_t; /* json.h */

#define SG_RING_SECONDS 901
/** Accepted values of /stats?window= (whole seconds). */
#define SG_STATS_WINDOW_MIN 10
#define SG_STATS_WINDOW_MAX (SG_RING_SECONDS - 1)
/** Counts one finished request in the current second. */
void sg_ring_record_request(uint64_t queries, uint64_t cache_hits, uint64_t cache_misses, int is_error, uint64_t latency_us);
/** Writes the member `"series":[{t, requests, queries, hits, misses, errors, p50_ms, p99_ms}, ...]` for the last `seconds`. */
void sg_ring_render_json(sg_jw_t *w, int seconds);
/** Hit ratio over the last `seconds` (NaN when nothing was looked up). */
double sg_ring_hit_ratio(int seconds);

#endif
