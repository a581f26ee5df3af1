/*
 * blob.c -- result blobs (blob.h): their construction, reference counting and splicing either response shape from the
 * same bytes without parsing.
 */
#include "blob.h"
#include "common.h"

#include <stdlib.h>

sg_blob_t *sg_blob_new(uint32_t n_hits)
{
    sg_blob_t *b = sg_mem_calloc(1, sizeof(*b));
    atomic_init(&b->refs, 1);
    b->n_hits = n_hits;
    b->docs = n_hits != 0 ? sg_mem_alloc(n_hits * sizeof(*b->docs)) : NULL;
    return b;
}

void sg_blob_release(sg_blob_t *b)
{
    if (b == NULL || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    free(b->docs);
    free(b->json);
    free(b);
}

size_t sg_blob_fragment_len(const sg_blob_t *b, int return_scores)
{
    if (return_scores)
        return b->json_len;
    size_t n = 2 + (b->n_hits > 0 ? b->n_hits - 1 : 0);
    for (uint32_t i = 0; i < b->n_hits; ++i)
        n += b->docs[i].len;
    return n;
}

char *sg_blob_write_fragment(const sg_blob_t *b, int return_scores, char *dst)
{
    if (return_scores) {
        memcpy(dst, b->json, b->json_len);
        return dst + b->json_len;
    }
    *dst++ = '[';
    for (uint32_t i = 0; i < b->n_hits; ++i) {
        if (i != 0)
            *dst++ = ',';
        memcpy(dst, b->json + b->docs[i].off, b->docs[i].len);
        dst += b->docs[i].len;
    }
    *dst++ = ']';
    return dst;
}

size_t sg_blob_footprint(const sg_blob_t *b)
{
    return sizeof(*b) + b->json_len + (b->docs != NULL ? b->n_hits * sizeof(*b->docs) : 0);
}

void sg_blob_append_fragment(const sg_blob_t *b, int return_scores, sg_buf_t *out)
{
    size_t n = sg_blob_fragment_len(b, return_scores);
    sg_buf_reserve(out, n);
    out->len = (size_t)(sg_blob_write_fragment(b, return_scores, out->base + out->len) - out->base);
}

size_t sg_blob_shape_len(const sg_blob_t *b, int shape)
{
    if (shape == SG_SHAPE_PAGE)
        return b->n_hits > 0 ? b->docs[0].len : 4;
    return sg_blob_fragment_len(b, shape == SG_SHAPE_SCORED);
}

int sg_blob_piece(const sg_blob_t *b, int shape, uint32_t part, const char **p, size_t *len)
{
    if (shape == SG_SHAPE_SCORED || shape == SG_SHAPE_PAGE) {
        if (part != 0)
            return 0;
        if (shape == SG_SHAPE_SCORED) {
            *p = b->json;
            *len = b->json_len;
        } else if (b->n_hits > 0) {
            *p = b->json + b->docs[0].off;
            *len = b->docs[0].len;
        } else {
            *p = "null";
            *len = 4;
        }
        return 1;
    }
    /* flat: "[" DOC0 "," DOC1 ... "]" */
    uint64_t n = b->n_hits, k = part;
    if (k == 0) {
        *p = "[";
        *len = 1;
        return 1;
    }
    k -= 1; /* DOC i is piece 2i, the separator after it 2i + 1 (the last one "]") */
    if (n == 0 && k == 0) {
        *p = "]";
        *len = 1;
        return 1;
    }
    if (k >= 2 * n)
        return 0;
    if (k % 2 == 0) {
        *p = b->json + b->docs[k / 2].off;
        *len = b->docs[k / 2].len;
    } else {
        *p = k / 2 + 1 < n ? "," : "]";
        *len = 1;
    }
    return 1;
}
