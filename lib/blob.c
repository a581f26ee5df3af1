/*
 * blob.c -- result blobs (blob.h): reference counting and splicing either response shape from the
 * same bytes without parsing.
 */
#include "blob.h"
#include "common.h"

#include <stdlib.h>

sg_blob_t *sg_blob_from_fragment(int shape, const char *json, size_t len)
{
    sg_blob_t *blob = sg_mem_calloc(1, sizeof(*blob));
    atomic_init(&blob->refs, 1);
    blob->shape = (uint8_t)shape;
    blob->json = sg_strndup(json, len);
    blob->json_len = len;
    return blob;
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
    if (b->shape != SG_SHAPE_BOTH || return_scores)
        return b->json_len;
    size_t n = 2 + (b->n_hits > 0 ? b->n_hits - 1 : 0);
    for (uint32_t i = 0; i < b->n_hits; ++i)
        n += b->docs[i].len;
    return n;
}

void sg_blob_append_fragment(const sg_blob_t *b, int return_scores, sg_buf_t *out)
{
    if (b->shape != SG_SHAPE_BOTH || return_scores) {
        sg_buf_append(out, b->json, b->json_len);
        return;
    }
    sg_buf_appendc(out, '[');
    for (uint32_t i = 0; i < b->n_hits; ++i) {
        if (i != 0)
            sg_buf_appendc(out, ',');
        sg_buf_append(out, b->json + b->docs[i].off, b->docs[i].len);
    }
    sg_buf_appendc(out, ']');
}

char *sg_blob_write_fragment(const sg_blob_t *b, int return_scores, char *dst)
{
    if (b->shape != SG_SHAPE_BOTH || return_scores) {
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
