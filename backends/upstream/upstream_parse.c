/*
 * upstream_parse.c -- /retrieve and /access replies of a Search-R1-compatible server -> DOCs.
 *
 * Both response shapes of docs/protocols.md, "The `/retrieve` contract" are accepted, item by item: the wrapped
 * {"document": DOC, "score": s} and the flat DOC. The DOC is re-serialised compactly (and made
 * valid UTF-8) so the gateway can splice it and serve either shape to its own clients.
 */
#include "upstream_parse.h"
#include "json.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes `doc` compactly into `b`, with "url": "" when `add_url` and it has no string "url". */
static void emit(sg_buf_t *b, const cJSON *doc, int add_url)
{
    b->len = 0;
    const cJSON *url = cJSON_GetObjectItemCaseSensitive(doc, "url");
    if (add_url && url == NULL) {
        /* the object plus a trailing "url": "" */
        sg_json_append_value(b, doc);
        b->len -= 1; /* drop '}' */
        if (doc->child != NULL)
            sg_buf_append(b, ",", 1);
        sg_buf_appends(b, "\"url\":\"\"}");
    } else if (add_url && !cJSON_IsString(url)) {
        /* "url" present but not a string (null, number): replace it by "" */
        cJSON *copy = cJSON_Duplicate(doc, 1);
        if (copy == NULL)
            abort();
        cJSON_ReplaceItemInObjectCaseSensitive(copy, "url", cJSON_CreateString(""));
        sg_json_append_value(b, copy);
        cJSON_Delete(copy);
    } else {
        sg_json_append_value(b, doc);
    }
}

int sg_upstream_parse_reply(const char *body, size_t len, size_t n_queries, uint32_t topk, int add_url, sg_up_list_t *out,
                            char *err, size_t err_size)
{
    memset(out, 0, n_queries * sizeof(*out));
    const cJSON *result;
    cJSON *root = sg_http_parse_result(body, len, n_queries, "result lists", &result, err, err_size);
    if (root == NULL)
        return -1;
    sg_buf_t b = {0};
    int rc = 0;
    size_t qi = 0;
    for (const cJSON *list = result->child; list != NULL; list = list->next, ++qi) {
        if (!cJSON_IsArray(list)) {
            snprintf(err, err_size, "result[%zu] is not a list", qi);
            rc = -1;
            break;
        }
        size_t n = sg_http_docs_reserve(&out[qi], (size_t)cJSON_GetArraySize(list), topk);
        size_t k = 0;
        for (const cJSON *item = list->child; item != NULL && k < n; item = item->next, ++k) {
            const cJSON *doc = item, *score = NULL;
            const cJSON *wrapped = cJSON_GetObjectItemCaseSensitive(item, "document");
            if (cJSON_IsObject(wrapped)) {
                doc = wrapped;
                score = cJSON_GetObjectItemCaseSensitive(item, "score");
            } else if (wrapped != NULL) { /* e.g. the rerank server's string documents */
                snprintf(err, err_size, "result[%zu][%zu].document is not an object", qi, k);
                rc = -1;
                break;
            }
            if (!cJSON_IsObject(doc)) {
                snprintf(err, err_size, "result[%zu][%zu] is not a document object", qi, k);
                rc = -1;
                break;
            }
            emit(&b, doc, add_url);
            sg_http_docs_push(&out[qi], &b,
                              cJSON_IsNumber(score) && isfinite(score->valuedouble) ? score->valuedouble : 1.0 / (double)(k + 1));
        }
        if (rc != 0)
            break;
    }
    sg_buf_free(&b);
    cJSON_Delete(root);
    return rc;
}

int sg_upstream_parse_access(const char *body, size_t len, size_t n_urls, sg_up_list_t *out, char *err, size_t err_size)
{
    memset(out, 0, n_urls * sizeof(*out));
    const cJSON *result;
    cJSON *root = sg_http_parse_result(body, len, n_urls, "result lists", &result, err, err_size);
    if (root == NULL)
        return -1;
    sg_buf_t b = {0};
    int rc = 0;
    size_t i = 0;
    for (const cJSON *page = result->child; page != NULL; page = page->next, ++i) {
        if (cJSON_IsNull(page))
            continue;
        if (!cJSON_IsObject(page)) {
            snprintf(err, err_size, "result[%zu] is neither a page object nor null", i);
            rc = -1;
            break;
        }
        sg_http_docs_reserve(&out[i], 1, 1);
        emit(&b, page, 0);
        sg_http_docs_push(&out[i], &b, 1.0);
    }
    sg_buf_free(&b);
    cJSON_Delete(root);
    return rc;
}

void sg_upstream_lists_free(sg_up_list_t *lists, size_t n)
{
    sg_http_docs_free(lists, n);
}

static int nonempty_string(const cJSON *v)
{
    return cJSON_IsString(v) && v->valuestring[0] != '\0';
}

void sg_upstream_error_message(const char *body, size_t len, char *out, size_t out_size)
{
    cJSON *root = cJSON_ParseWithLength(body, len);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "message");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "detail");
    if (!nonempty_string(m) && d != NULL && !nonempty_string(d)) {
        char *printed = cJSON_PrintUnformatted(d); /* FastAPI validation errors are a list */
        sg_http_error_excerpt(NULL, printed != NULL ? printed : "", printed != NULL ? strlen(printed) : 0, NULL, 200, out,
                              out_size);
        free(printed);
    } else {
        sg_http_error_excerpt(nonempty_string(m) ? m : d, body, len, NULL, 200, out, out_size);
    }
    cJSON_Delete(root);
}
