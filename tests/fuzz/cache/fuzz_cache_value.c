/*
 * fuzz_cache_value.c -- libFuzzer harness for the decoder of the values the result cache keeps
 * in Redis (cache/cache.c, sg_cache_decode: "SG1 <n> <off> <len>...\n" + the scored fragment).
 * Redis is shared by every replica and outlives versions, so a value is untrusted input. The
 * input is the value. Checks: never crashes or leaks; an accepted value gives a blob whose
 * fragment is "[...]", whose documents lie inside it, one after another without overlapping, so
 * that both reply shapes are bounded by the value's size (the flat one is spliced from the
 * documents); writing either shape fills exactly the length computed for it; both shapes are
 * valid JSON (RFC 8259, lib/json.c's check) of the right shape, read back with cJSON as a client
 * would: the scored one an array of n_hits objects of exactly {"document": object, "score":
 * number or null}, the flat one an array of n_hits objects, each the scored hit's document; a
 * refused value has a reason; encoding the blob again and decoding that gives the same blob.
 */
#include "../../../cache/cache.h"
#include "fuzz_util.h"

#include <cJSON.h>

/* Whether valid JSON text holds a \uXXXX escape of a UTF-16 surrogate (D800-DFFF). */
static int has_surrogate_escape(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; ++i) {
        if (p[i] != '\\')
            continue;
        if (p[i + 1] == 'u' && i + 5 < n && (p[i + 2] == 'd' || p[i + 2] == 'D') && p[i + 3] != '\0' &&
            strchr("89abcdefABCDEF", p[i + 3]) != NULL)
            return 1;
        ++i; /* skip the escaped character (an escaped backslash followed by u is no escape) */
    }
    return 0;
}

/* The output of a decoded value, as a client reads it: valid JSON of the reply's shape. */
static void check_shapes(const sg_blob_t *b, const char *scored, size_t scored_len, const char *flat, size_t flat_len)
{
    size_t bad_at;
    const char *why;
    FUZZ_CHECK(sg_json_validate(scored, scored_len, &bad_at, &why) == 0);
    FUZZ_CHECK(sg_json_validate(flat, flat_len, &bad_at, &why) == 0);
    cJSON *s = cJSON_ParseWithLength(scored, scored_len), *f = cJSON_ParseWithLength(flat, flat_len);
    if (s == NULL || f == NULL) {
        /* RFC 8259 (8.2) lets a string hold an unpaired surrogate escape ("\\ude00"), which Python's
         * json module writes and reads; cJSON refuses those, and only those may stop it here */
        FUZZ_CHECK(has_surrogate_escape(scored, scored_len) && has_surrogate_escape(flat, flat_len));
        cJSON_Delete(s);
        cJSON_Delete(f);
        return;
    }
    FUZZ_CHECK(cJSON_IsArray(s) && cJSON_GetArraySize(s) == (int)b->n_hits);
    FUZZ_CHECK(cJSON_IsArray(f) && cJSON_GetArraySize(f) == (int)b->n_hits);
    const cJSON *doc = f->child;
    for (const cJSON *hit = s->child; hit != NULL; hit = hit->next, doc = doc->next) {
        FUZZ_CHECK(cJSON_IsObject(hit) && cJSON_GetArraySize(hit) == 2);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(hit, "document");
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(hit, "score");
        FUZZ_CHECK(cJSON_IsObject(d) && (cJSON_IsNumber(sc) || cJSON_IsNull(sc)));
        FUZZ_CHECK(cJSON_IsObject(doc));
        char *pd = cJSON_PrintUnformatted(d), *pdoc = cJSON_PrintUnformatted(doc);
        FUZZ_CHECK(pd != NULL && pdoc != NULL && strcmp(pd, pdoc) == 0);
        cJSON_free(pd);
        cJSON_free(pdoc);
    }
    cJSON_Delete(s);
    cJSON_Delete(f);
}

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
    char *out[2];
    size_t len[2];
    for (int rs = 0; rs <= 1; ++rs) {
        size_t n = len[rs] = sg_blob_fragment_len(b, rs);
        FUZZ_CHECK(n <= b->json_len + b->n_hits + 2);
        out[rs] = malloc(n != 0 ? n : 1); /* exact size: ASan sees any overrun */
        FUZZ_CHECK(out[rs] != NULL);
        FUZZ_CHECK(sg_blob_write_fragment(b, rs, out[rs]) == out[rs] + n);
        FUZZ_CHECK(n >= 2 && out[rs][0] == '[' && out[rs][n - 1] == ']');
    }
    check_shapes(b, out[1], len[1], out[0], len[0]);
    free(out[0]);
    free(out[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *value = fuzz_copy(data, size);
    const char *why = NULL;
    sg_blob_t *b = sg_cache_decode(value, size, &why);
    free(value);
    if (b == NULL) {
        FUZZ_CHECK(why != NULL && why[0] != '\0');
        return 0;
    }
    check_blob(b, size);
    sg_buf_t enc = {0};
    sg_cache_encode(&enc, b);
    sg_blob_t *b2 = sg_cache_decode(enc.base, enc.len, NULL);
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
