/*
 * fuzz_reader_reply.c -- libFuzzer harness for the page reader of the serper backend: the reply
 * parser (both formats) and the request URL builder. The first byte picks the format; the rest is
 * the reply body, and also a page URL. Checks: never crashes; a page is a valid-UTF-8 JSON object
 * with string "url" (the URL as given), "title" and "contents" (the body itself in text format);
 * an envelope gives a status code and a message; a request URL starts with the base and holds only
 * visible ASCII (nothing a URL cannot carry raw, no fragment).
 */
#include <stdint.h>

#include "fuzz_check.h"
#include "reader_parse.h"

static int valid_utf8(const char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        size_t l = sg_utf8_seq_len((const unsigned char *)s + i, len - i);
        if (l == 0 || (l == 1 && s[i] == '\0'))
            return 0;
        i += l;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int format = data[0] & 1 ? SG_READER_FORMAT_TEXT : SG_READER_FORMAT_JSON;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    static const char url[] = "https://example.org/p?q=1";
    sg_buf_t page = {0};
    long code = 0;
    char err[320] = "";
    int rc = sg_reader_parse_page(body, len, format, url, sizeof(url) - 1, &page, &code, err, sizeof(err));
    if (rc == 0) {
        cJSON *o = fuzz_check_doc(page.base, page.len);
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "url");
        FUZZ_CHECK(cJSON_IsString(u) && strcmp(u->valuestring, url) == 0);
        FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "title")));
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "contents");
        FUZZ_CHECK(cJSON_IsString(c));
        if (format == SG_READER_FORMAT_TEXT && valid_utf8(body, len))
            FUZZ_CHECK(strlen(c->valuestring) == len && memcmp(c->valuestring, body, len) == 0);
        cJSON_Delete(o);
    } else if (rc == 1) {
        FUZZ_CHECK(code >= 100 && code <= 999 && code != 200);
        FUZZ_CHECK(err[0] != '\0');
    } else {
        FUZZ_CHECK(rc == -1 && format == SG_READER_FORMAT_JSON && err[0] != '\0');
    }
    sg_buf_free(&page);
    /* the body as a page URL */
    sg_buf_t t = {0};
    if (sg_reader_target("http://reader", body, len, &t) == 0) {
        FUZZ_CHECK(t.len > 14 && memcmp(t.base, "http://reader/", 14) == 0);
        for (size_t i = 0; i < t.len; ++i) {
            unsigned char ch = (unsigned char)t.base[i];
            FUZZ_CHECK(ch > 0x20 && ch < 0x7f && ch != '#' && strchr("\"<>\\^`{|}", ch) == NULL);
        }
    } else {
        FUZZ_CHECK(t.len == 0);
    }
    sg_buf_free(&t);
    char msg[256];
    sg_reader_error_message(body, len, msg, sizeof(msg));
    FUZZ_CHECK(valid_utf8(msg, strlen(msg)));
    return 0;
}
