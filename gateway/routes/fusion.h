/*
 * fusion.h -- hybrid fusion routes: a route whose legs are other routes (docs/fusion.md).
 *
 * A fusion route is an entry of the config's backends[] with a "fusion" object instead of a
 * plugin. It fans each query out to every leg through the internal query pipeline (so each leg
 * keeps its own cache, singleflight, admission and metrics) and merges the legs' ranked lists:
 * reciprocal rank fusion, or a weighted sum of per-leg normalised scores.
 *
 * This header is the merge (pure: no HTTP, no threads, unit-tested on its own). The parsed
 * settings are config/fusion_conf.h (filled by config.c); the route itself (the fan-out) is
 * fusion_route.h.
 */
#ifndef SG_GATEWAY_FUSION_H
#define SG_GATEWAY_FUSION_H

#include <stddef.h>
#include <stdint.h>
#include "fusion_conf.h"

/* ---- the merge (pure) ---- */

/** One hit of a leg: the DOC bytes (a JSON object) and the leg's score (NaN when it had none). */
typedef struct st_sg_fusion_hit_t {
    const char *doc;
    uint32_t len;
    double score;
} sg_fusion_hit_t;

/** One leg's ranked list for one query, best first; `ok` = 0 when the leg failed (it counts as absent). */
typedef struct st_sg_fusion_leg_t {
    const sg_fusion_hit_t *hits;
    uint32_t n;
    int ok;
} sg_fusion_leg_t;

/** One fused hit: the document kept (hit `hit`, 0-based, of leg `leg`) and its fused score. */
typedef struct st_sg_fusion_out_t {
    uint32_t leg, hit;
    double score;
} sg_fusion_out_t;

/**
 * Fuses `fc->n_legs` lists (legs[i] is the answer of fc->legs[i]) into at most `topk` hits in
 * `out` and returns how many. Documents are the same when their identity is (docs/fusion.md):
 * a non-empty "id", else a non-empty "url", else "contents", else the DOC's bytes. A document
 * that appears twice in one leg counts once, at its first (best) position, and the leg's later
 * hits move up one rank. The merged hit keeps the DOC of the first leg (in route order) that
 * returned it. Order: fused score descending; ties by the best rank the document had in any leg,
 * then by the leg that gave that rank (route order).
 */
uint32_t sg_fusion_merge(const sg_fusion_conf_t *fc, const sg_fusion_leg_t *legs, uint32_t topk, sg_fusion_out_t *out);

/**
 * The identity of a DOC as the merge sees it, as a malloc'ed key of `*key_len` bytes whose first
 * byte says which field gave it: 'i' (id), 'u' (url), 'c' (contents) or 'd' (the raw bytes: the
 * DOC is not a JSON object or has none of the three).
 */
char *sg_fusion_doc_identity(const char *doc, size_t len, size_t *key_len);

#endif
