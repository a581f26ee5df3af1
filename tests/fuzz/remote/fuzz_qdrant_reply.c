/*
 * fuzz_qdrant_reply.c -- libFuzzer harness for the Qdrant reply parsers (batch query reply,
 * error body, collection info). Byte 0 picks the number of queries (1..4), byte 1 topk; the rest
 * is the body. Checks: never crashes; on success one list per query with at most topk DOCs, each
 * a valid-UTF-8 JSON object with "id", a string "contents" and a string "url".
 */
#include <stdint.h>

#include "fuzz_check.h"
#include "qdrant_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t n = 1 + data[0] % 4;
    uint32_t topk = 1 + data[1] % 10;
    const char *body = (const char *)data + 2;
    size_t len = size - 2;
    sg_qd_list_t l[4];
    char err[200];
    if (sg_qdrant_parse_batch(body, len, n, topk, l, err, sizeof(err)) == 0) {
        for (size_t q = 0; q < n; ++q) {
            FUZZ_CHECK(l[q].n <= topk);
            for (size_t i = 0; i < l[q].n; ++i) {
                cJSON *o = fuzz_check_doc(l[q].docs[i].json, l[q].docs[i].len);
                FUZZ_CHECK(cJSON_GetObjectItemCaseSensitive(o, "id") != NULL);
                FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "contents")));
                FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "url")));
                cJSON_Delete(o);
            }
        }
    } else {
        FUZZ_CHECK(err[0] != '\0');
    }
    sg_qdrant_lists_free(l, n);
    char msg[256];
    sg_qdrant_error_message(body, len, msg, sizeof(msg));
    sg_qdrant_collection_t c;
    if (sg_qdrant_parse_collection(body, len, (data[0] & 4) ? "dense" : NULL, &c, err, sizeof(err)) == 0)
        FUZZ_CHECK(c.size >= 1 && c.size <= 1000000 && c.points >= -1);
    return 0;
}
