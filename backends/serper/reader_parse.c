/*
 * reader_parse.c -- the page reader's request URL and reply parsing (reader_parse.h). The service
 * is Jina Reader or one that answers like it: `GET {base}/{page URL}`, with `Accept:
 * application/json` an envelope {"code":200,"status":20000,"data":{"title","url","content",...}},
 * without it the page as text ("Title: ...\n\nURL Source: ...\n\nMarkdown Content:\n..."), and
 * errors as {"data":null,"code":N,"name":"...Error","status":N*100+k,"message":"..."}.
 */
#include "reader_parse.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int sg_reader_target(const char *base, const char *url, size_t len, sg_buf_t *out)
{
    size_t scheme;
    if (len > 7 && strncasecmp(url, "http://", 7) == 0)
        scheme = 7;
    else if (len > 8 && strncasecmp(url, "https://", 8) == 0)
        scheme = 8;
    else
        return -1;
    const char *hash = memchr(url, '#', len);
    if (hash != NULL)
        len = (size_t)(hash - url);
    /* a host: at least one byte before the path, query or end */
    if (len <= scheme || url[scheme] == '/' || url[scheme] == '?')
        return -1;
    static const char hex[] = "0123456789ABCDEF";
    sg_buf_appends(out, base);
    sg_buf_appendc(out, '/');
    for (size_t i = 0; i < len; ++i) {
        unsigned char ch = (unsigned char)url[i];
        if (ch <= 0x20 || ch >= 0x7f || strchr("\"<>\\^`{|}", ch) != NULL) {
            char enc[3] = {'%', hex[ch >> 4], hex[ch & 15]};
            sg_buf_append(out, enc, 3);
        } else {
            sg_buf_appendc(out, (char)ch);
        }
    }
    return 0;
}

static void write_page(sg_buf_t *page, const char *url, size_t url_len, const char *title, size_t tlen, const char *text,
                       size_t len)
{
    page->len = 0;
    sg_buf_appends(page, "{\"url\":");
    sg_buf_append_json_string(page, url, url_len);
    sg_buf_appends(page, ",\"title\":");
    sg_buf_append_json_string(page, title, tlen);
    sg_buf_appends(page, ",\"contents\":");
    sg_buf_append_json_string(page, text, len);
    sg_buf_appendc(page, '}');
}

/* 1 when `root` is an error envelope: an object whose "code" is a number other than 200 and whose
 * "data" is null or absent. */
static int envelope(const cJSON *root, long *code, char *err, size_t err_size, const char *body, size_t len)
{
    if (!cJSON_IsObject(root))
        return 0;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "code");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    if (!cJSON_IsNumber(c) || c->valuedouble == 200 || (data != NULL && !cJSON_IsNull(data)))
        return 0;
    double v = c->valuedouble;
    *code = v >= 100 && v <= 999 ? (long)v : 500;
    sg_reader_error_message(body, len, err, err_size);
    return 1;
}

int sg_reader_parse_page(const char *body, size_t len, int format, const char *url, size_t url_len, sg_buf_t *page, long *code,
                         char *err, size_t err_size)
{
    size_t lead = 0;
    while (lead < len && (body[lead] == ' ' || body[lead] == '\t' || body[lead] == '\r' || body[lead] == '\n'))
        ++lead;
    if (format == SG_READER_FORMAT_TEXT) {
        if (lead < len && body[lead] == '{') { /* a refusal in the JSON envelope, even with status 200 */
            cJSON *root = cJSON_ParseWithLength(body, len);
            int env = envelope(root, code, err, err_size, body, len);
            cJSON_Delete(root);
            if (env)
                return 1;
        }
        const char *title = "";
        size_t tlen = 0;
        if (len >= 7 && memcmp(body, "Title: ", 7) == 0) {
            title = body + 7;
            const char *nl = memchr(title, '\n', len - 7);
            tlen = nl != NULL ? (size_t)(nl - title) : len - 7;
            if (tlen > 0 && title[tlen - 1] == '\r')
                --tlen;
        }
        write_page(page, url, url_len, title, tlen, body, len);
        return 0;
    }
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (root == NULL || !cJSON_IsObject(root)) {
        snprintf(err, err_size, root == NULL ? "malformed JSON in the reply" : "the reply is not a JSON object");
        cJSON_Delete(root);
        return -1;
    }
    if (envelope(root, code, err, err_size, body, len)) {
        cJSON_Delete(root);
        return 1;
    }
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(data, "content");
    if (!cJSON_IsObject(data) || !cJSON_IsString(content)) {
        snprintf(err, err_size, cJSON_IsObject(data) ? "\"data.content\" is missing or not a string" : "\"data\" is not an object");
        cJSON_Delete(root);
        return -1;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(data, "title");
    const char *title = cJSON_IsString(t) ? t->valuestring : "";
    write_page(page, url, url_len, title, strlen(title), content->valuestring, strlen(content->valuestring));
    cJSON_Delete(root);
    return 0;
}

void sg_reader_error_message(const char *body, size_t len, char *out, size_t out_size)
{
    cJSON *root = cJSON_ParseWithLength(body, len);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "readableMessage");
    if (!cJSON_IsString(m) || m->valuestring[0] == '\0')
        m = cJSON_GetObjectItemCaseSensitive(root, "message");
    sg_http_error_excerpt(m, body, len, NULL, 200, out, out_size);
    cJSON_Delete(root);
}
