/*
 * fuzz_cache_value.c -- libFuzzer harness for the decoder of the values the result cache keeps
 * in Redis (cache/cache.c, sg_cache_decode: "SG1 <n> <off> <len>...\n" + the scored fragment).
 * Redis is shared by every replica and outlives versions, so a value is untrusted input. The
 * input is the value. Checks: never crashes or leaks; an accepted value gives a blob whose
 * fragment is "[...]", whose documents lie inside it, one after another without overlapping, so
 * that both reply shapes are bounded by the value's size (the flat one is spliced from the
 * documents); writing either shape fills exactly the length computed for it; encoding the blob
 * again and decoding that gives the same blob.
 */
#include "../../cache/cache.h"
#include "fuzz_util.h"

static void check_blob(const sg_blob_t *b, size_t value_len)
{
    FUZZ_CHECK(b->json != NULL && b->json_len >= 2 && b->json_len <= value_len);
    FUZZ_CHECK(b->json[0] == '[' && b->json[b->json_len - 1] == ']');
    FUZZ_CHECK(b->n_hits == 0 || b->docs != NULL);
    uint64_t prev_end = 1; /* after the '[' */
    for (uint32_t i = 0; i < b->n_hits; ++i) {
        FUZZ_CHECK(b->docs[i].off >= prev_end && b->docs[i].len >= 2);
        prev_end = (uint64_t)b->docs[i].off + b->docs[i].len;
        FUZZ_CHECK(prev_end < b->json_len); /* the closing ']' stays outside */
    }
    for (int rs = 0; rs <= 1; ++rs) {
        size_t n = sg_blob_fragment_len(b, rs);
        FUZZ_CHECK(n <= b->json_len + b->n_hits + 2);
        char *out = malloc(n != 0 ? n : 1); /* exact size: ASan sees any overrun */
        FUZZ_CHECK(out != NULL);
        FUZZ_CHECK(sg_blob_write_fragment(b, rs, out) == out + n);
        FUZZ_CHECK(n >= 2 && out[0] == '[' && out[n - 1] == ']');
        free(out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *value = fuzz_copy(data, size);
    sg_blob_t *b = sg_cache_decode(value, size);
    free(value);
    if (b == NULL)
        return 0;
    check_blob(b, size);
    sg_buf_t enc = {0};
    sg_cache_encode(&enc, b);
    sg_blob_t *b2 = sg_cache_decode(enc.base, enc.len);
    FUZZ_CHECK(b2 != NULL);
    check_blob(b2, enc.len);
    FUZZ_CHECK(b2->n_hits == b->n_hits && b2->json_len == b->json_len && memcmp(b2->json, b->json, b->json_len) == 0);
    for (uint32_t i = 0; i < b->n_hits; ++i)
        FUZZ_CHECK(b2->docs[i].off == b->docs[i].off && b2->docs[i].len == b->docs[i].len);
    sg_blob_release(b2);
    sg_buf_free(&enc);
    sg_blob_release(b);
    return 0;
}
