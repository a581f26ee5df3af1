/*
 * blob.h -- the result of one query: a ready JSON fragment, shared read-only by every thread once
 * published (the reference count is atomic). Requests, the L1 cache and deliveries to other loops
 * share one copy; nobody writes to a published blob.
 */
#ifndef SG_LIB_BLOB_H
#define SG_LIB_BLOB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "buf.h"

/**
 * The result of one query, shared read-only between threads once published (refcount is atomic).
 * `json` is the scored fragment `[{"document":DOC,"score":S},...]` and `docs` locates each DOC
 * inside it, so the flat fragment `[DOC,...]` is spliced from the same bytes.
 */
typedef struct st_sg_blob_t {
    _Atomic uint32_t refs;
    uint32_t n_hits;
    size_t json_len;
    struct {
        uint32_t off, len;
    } * docs; /* n_hits entries (NULL when there are none) */
    char *json;
} sg_blob_t;

/**
 * A new, unpublished blob holding one reference, with room for `n_hits` located documents
 * (`docs`, left for the builder to fill; NULL when there are none) and no fragment yet: the
 * builder sets `json` (malloc'ed, owned by the blob) and `json_len` before publishing it.
 * sg_blob_release() frees it at any stage, so a builder that gives up just releases it.
 */
sg_blob_t *sg_blob_new(uint32_t n_hits);
static inline sg_blob_t *sg_blob_ref(sg_blob_t *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}
void sg_blob_release(sg_blob_t *b);
/** Size in bytes of the fragment for the given return_scores flag. */
size_t sg_blob_fragment_len(const sg_blob_t *b, int return_scores);
/** Writes the fragment to `dst` (sg_blob_fragment_len bytes); returns the end. */
char *sg_blob_write_fragment(const sg_blob_t *b, int return_scores, char *dst);
/** Appends the fragment for the given return_scores flag to `out` (MCP builds its content from it). */
void sg_blob_append_fragment(const sg_blob_t *b, int return_scores, sg_buf_t *out);
/** How a blob appears in an answer: the flat list of DOCs (`return_scores` false), the scored
 * fragment (true), or a page of POST /access (its first DOC, or null). */
enum { SG_SHAPE_FLAT = 0, SG_SHAPE_SCORED = 1, SG_SHAPE_PAGE = 2 };
/** Size in bytes of the blob in `shape`. */
size_t sg_blob_shape_len(const sg_blob_t *b, int shape);
/**
 * The `part`-th piece (0-based) of the blob's bytes in `shape`: `*p`/`*len` point into the blob
 * or at static text. Returns 0 past the last piece. The pieces in order are exactly what
 * sg_blob_write_fragment() writes (and "null" or the first DOC for SG_SHAPE_PAGE), so an answer
 * can be written piece by piece without building it.
 */
int sg_blob_piece(const sg_blob_t *b, int shape, uint32_t part, const char **p, size_t *len);
/** Approximate memory held by the blob (for the L1 byte budget). */
size_t sg_blob_footprint(const sg_blob_t *b);

#endif
