/*
 * serper_parse.c -- serper.dev reply -> /retrieve DOCs, bit-for-bit the formatting of slime's
 * google_search_server.py (docs/protocols.md, "serper.dev"):
 *
 *     def parse_snippet(snippet): return [s.strip() for s in snippet.split("...") if len(s.strip().split()) > 5]
 *     title = item.get("title", ""); context = " ".join(parse_snippet(item.get("snippet", "")))
 *     if title != "" or context != "":
 *         title = "No title." if not title else title
 *         context = "No snippet available." if not context else context
 *         contents = f'"{title}"\n{context}'
 *
 * Python's split()/strip() use Unicode whitespace (str.isspace), so the code points are decoded
 * here rather than tested byte by byte with isspace().
 */
#include "serper_parse.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sg_serper_py_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Decodes the code point at s[0..n); *adv gets its byte length. Invalid UTF-8 counts as one
 * byte that is not whitespace. */
static uint32_t decode(const unsigned char *s, size_t n, size_t *adv)
{
    size_t l = sg_utf8_seq_len(s, n);
    if (l <= 1) {
        *adv = 1;
        return l == 1 ? s[0] : 0xfffd;
    }
    *adv = l;
    uint32_t cp = s[0] & (0xff >> (l + 1));
    for (size_t i = 1; i < l; ++i)
        cp = (cp << 6) | (s[i] & 0x3f);
    return cp;
}

/* Python str.strip() on s[*b..*e): moves the bounds past leading/trailing whitespace. */
static void py_strip(const unsigned char *s, size_t *b, size_t *e)
{
    while (*b < *e) {
        size_t adv;
        uint32_t cp = decode(s + *b, *e - *b, &adv);
        if (!sg_serper_py_isspace(cp))
            break;
        *b += adv;
    }
    while (*e > *b) {
        /* step back to the start of the last code point */
        size_t k = *e - 1;
        while (k > *b && (s[k] & 0xc0) == 0x80 && *e - k < 4)
            --k;
        size_t adv;
        uint32_t cp = decode(s + k, *e - k, &adv);
        if (k + adv != *e) { /* not a clean sequence ending at *e: the last byte alone */
            k = *e - 1;
            cp = decode(s + k, 1, &adv);
        }
        if (!sg_serper_py_isspace(cp))
            break;
        *e = k;
    }
}

/* len(s.split()) > 5 for s[b..e) */
static int more_than_five_words(const unsigned char *s, size_t b, size_t e)
{
    int words = 0, in_word = 0;
    for (size_t i = b; i < e;) {
        size_t adv;
        uint32_t cp = decode(s + i, e - i, &adv);
        if (sg_serper_py_isspace(cp)) {
            in_word = 0;
        } else if (!in_word) {
            in_word = 1;
            if (++words > 5)
                return 1;
        }
        i += adv;
    }
    return 0;
}

size_t sg_serper_context(const char *snippet, size_t len, sg_buf_t *out)
{
    const unsigned char *s = (const unsigned char *)snippet;
    size_t start_len = out->len, pos = 0;
    int first = 1;
    for (;;) {
        const char *dots = NULL;
        if (pos <= len)
            dots = memmem(snippet + pos, len - pos, "...", 3);
        size_t end = dots != NULL ? (size_t)(dots - snippet) : len;
        size_t b = pos, e = end;
        py_strip(s, &b, &e);
        if (more_than_five_words(s, b, e)) {
            if (!first)
                sg_buf_append(out, " ", 1);
            sg_buf_append(out, s + b, e - b);
            first = 0;
        }
        if (dots == NULL)
            break;
        pos = end + 3;
    }
    return out->len - start_len;
}

void sg_serper_docs_free(sg_serper_docs_t *d)
{
    sg_http_docs_free(d, 1);
}

static const char *str_item(const cJSON *obj, const char *key, size_t *len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v) || v->valuestring == NULL) {
        *len = 0;
        return "";
    }
    *len = strlen(v->valuestring);
    return v->valuestring;
}

int sg_serper_parse_reply(const char *body, size_t len, uint32_t topk, sg_serper_docs_t *out, char *err, size_t err_size)
{
    out->docs = NULL;
    out->n = 0;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (root == NULL || !cJSON_IsObject(root)) {
        snprintf(err, err_size, root == NULL ? "malformed JSON in the reply" : "the reply is not a JSON object");
        cJSON_Delete(root);
        return -1;
    }
    const cJSON *organic = cJSON_GetObjectItemCaseSensitive(root, "organic");
    if (organic == NULL || cJSON_IsNull(organic)) {
        cJSON_Delete(root);
        return 0;
    }
    if (!cJSON_IsArray(organic)) {
        snprintf(err, err_size, "\"organic\" is not an array");
        cJSON_Delete(root);
        return -1;
    }
    size_t cap = sg_http_docs_reserve(out, (size_t)cJSON_GetArraySize(organic), topk);
    sg_buf_t ctx = {0}, doc = {0}, contents = {0};
    for (const cJSON *it = organic->child; it != NULL && out->n < cap; it = it->next) {
        if (!cJSON_IsObject(it))
            continue;
        size_t tlen, slen, llen;
        const char *title = str_item(it, "title", &tlen);
        const char *snippet = str_item(it, "snippet", &slen);
        const char *link = str_item(it, "link", &llen);
        ctx.len = 0;
        sg_buf_append(&ctx, "", 0);
        sg_serper_context(snippet, slen, &ctx);
        if (tlen == 0 && ctx.len == 0)
            continue;
        size_t rank = out->n + 1;
        contents.len = 0;
        sg_buf_append(&contents, "\"", 1);
        if (tlen != 0)
            sg_buf_append(&contents, title, tlen);
        else
            sg_buf_appends(&contents, "No title.");
        sg_buf_append(&contents, "\"\n", 2);
        if (ctx.len != 0)
            sg_buf_append(&contents, ctx.base, ctx.len);
        else
            sg_buf_appends(&contents, "No snippet available.");
        const cJSON *pos = cJSON_GetObjectItemCaseSensitive(it, "position");
        long long id = (long long)rank;
        if (cJSON_IsNumber(pos) && pos->valuedouble >= 1 && pos->valuedouble <= 1e9 &&
            pos->valuedouble == (double)(long long)pos->valuedouble)
            id = (long long)pos->valuedouble;
        doc.len = 0;
        sg_buf_appendf(&doc, "{\"id\":\"%lld\",\"contents\":", id);
        sg_buf_append_json_string(&doc, contents.base, contents.len);
        sg_buf_appends(&doc, ",\"url\":");
        sg_buf_append_json_string(&doc, link, llen);
        sg_buf_append(&doc, "}", 1);
        sg_http_docs_push(out, &doc, 1.0 / (double)rank);
    }
    sg_buf_free(&ctx);
    sg_buf_free(&doc);
    sg_buf_free(&contents);
    cJSON_Delete(root);
    return 0;
}

void sg_serper_error_message(const char *body, size_t len, const char *secret, char *out, size_t out_size)
{
    cJSON *root = cJSON_ParseWithLength(body, len);
    sg_http_error_excerpt(cJSON_GetObjectItemCaseSensitive(root, "message"), body, len, secret, 200, out, out_size);
    cJSON_Delete(root);
}
