/*
 * fuzz_upstream_reply.c -- libFuzzer harness for the upstream /retrieve and /access reply
 * parsers. Byte 0 picks the number of queries (1..4) and whether add_url is on, byte 1 topk; the
 * rest is the body. Checks: never crashes; on success one list per query with at most topk
 * DOCs, each a valid-UTF-8 JSON object (with a string "url" when add_url is on).
 */
#include <stdint.h>

#include "fuzz_check.h"
#include "upstream_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t n = 1 + data[0] % 4;
    int add_url = (data[0] >> 2) & 1;
    uint32_t topk = 1 + data[1] % 10;
    const char *body = (const char *)data + 2;
    size_t len = size - 2;
    sg_up_list_t l[4];
    char err[160];
    if (sg_upstream_parse_reply(body, len, n, topk, add_url, l, err, sizeof(err)) == 0) {
        for (size_t q = 0; q < n; ++q) {
            FUZZ_CHECK(l[q].n <= topk);
            for (size_t i = 0; i < l[q].n; ++i) {
                cJSON *o = fuzz_check_doc(l[q].docs[i].json, l[q].docs[i].len);
                if (add_url)
                    FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "url")));
                cJSON_Delete(o);
            }
        }
    }
    sg_upstream_lists_free(l, n);
    if (sg_upstream_parse_access(body, len, n, l, err, sizeof(err)) == 0) {
        for (size_t q = 0; q < n; ++q) {
            FUZZ_CHECK(l[q].n <= 1);
            for (size_t i = 0; i < l[q].n; ++i)
                cJSON_Delete(fuzz_check_doc(l[q].docs[i].json, l[q].docs[i].len));
        }
    }
    sg_upstream_lists_free(l, n);
    char msg[256];
    sg_upstream_error_message(body, len, msg, sizeof(msg));
    return 0;
}
