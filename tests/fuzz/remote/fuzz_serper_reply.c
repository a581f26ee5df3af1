/*
 * fuzz_serper_reply.c -- libFuzzer harness for the serper.dev reply parser. The first byte picks
 * topk; the rest is the reply body. Checks: never crashes; on success at most topk DOCs, each a
 * valid-UTF-8 JSON object with string "id", "url" and "contents" = "\"<title>\"\n<context>",
 * scores 1/rank.
 */
#include <stdint.h>

#include "fuzz_check.h"
#include "serper_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint32_t topk = 1 + data[0] % 20;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    sg_serper_docs_t d;
    char err[128];
    if (sg_serper_parse_reply(body, len, topk, &d, err, sizeof(err)) == 0) {
        FUZZ_CHECK(d.n <= topk);
        for (size_t i = 0; i < d.n; ++i) {
            cJSON *o = fuzz_check_doc(d.docs[i].json, d.docs[i].len);
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "contents");
            FUZZ_CHECK(cJSON_IsString(c));
            FUZZ_CHECK(c->valuestring[0] == '"');
            FUZZ_CHECK(strstr(c->valuestring + 1, "\"\n") != NULL);
            FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "id")));
            FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "url")));
            FUZZ_CHECK(d.docs[i].score == 1.0 / (double)(i + 1));
            cJSON_Delete(o);
        }
    } else {
        FUZZ_CHECK(err[0] != '\0');
    }
    sg_serper_docs_free(&d);
    /* the error-message path sees the same bytes */
    char msg[256];
    sg_serper_error_message(body, len, "secret", msg, sizeof(msg));
    FUZZ_CHECK(strstr(msg, "secret") == NULL);
    return 0;
}
