/*
 * upstream_parse.c -- /retrieve and /access replies of a Search-R1-compatible server -> DOCs.
 *
 * Both response shapes of protocols.md 2.3 are accepted, item by item: the wrapped
 * {"document": DOC, "score": s} and the flat DOC. The DOC is re-serialised compactly (and made
 * valid UTF-8) so the gateway can splice it and serve either shape to its own clients.
 */
#include "upstream_parse.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void emit(sg_hbuf_t *b, const cJSON *doc, int add_url, sg_up_doc_t *out)
{
    b->len = 0;
    const cJSON *url = cJSON_GetObjectItemCaseSensitive(doc, "url");
    if (add_url && url == NULL) {
        /* the object plus a trailing "url": "" */
        sg_hbuf_append_json(b, doc);
        b->len -= 1; /* drop '}' */
        if (doc->child != NULL)
            sg_hbuf_append(b, ",", 1);
        sg_hbuf_appends(b, "\"url\":\"\"}");
    } else if (add_url && !cJSON_IsString(url)) {
        /* "url" present but not a string (null, number): replace it by "" */
        cJSON *copy = cJSON_Duplicate(doc, 1);
        if (copy == NULL)
            abort();
        cJSON_ReplaceItemInObjectCaseSensitive(copy, "url", cJSON_CreateString(""));
        sg_hbuf_append_json(b, copy);
        cJSON_Delete(copy);
    } else {
        sg_hbuf_append_json(b, doc);
    }
    out->json = malloc(b->len + 1);
    if (out->json == NULL)
        abort();
    memcpy(out->json, b->base, b->len + 1);
    out->len = b->len;
}

static cJSON *parse_result(const char *body, size_t len, size_t n, const cJSON **result, char *err, size_t err_size)
{
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (root == NULL) {
        snprintf(err, err_size, "malformed JSON in the reply");
        return NULL;
    }
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "result");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(r)) {
        snprintf(err, err_size, "the reply has no \"result\" array");
        cJSON_Delete(root);
        return NULL;
    }
    if ((size_t)cJSON_GetArraySize(r) != n) {
        snprintf(err, err_size, "the reply has %d result lists for %zu queries", cJSON_GetArraySize(r), n);
        cJSON_Delete(root);
        return NULL;
    }
    *result = r;
    return root;
}

int sg_upstream_parse_reply(const char *body, size_t len, size_t n_queries, uint32_t topk, int add_url, sg_up_list_t *out,
                            char *err, size_t err_size)
{
    memset(out, 0, n_queries * sizeof(*out));
    const cJSON *result;
    cJSON *root = parse_result(body, len, n_queries, &result, err, err_size);
    if (root == NULL)
        return -1;
    sg_hbuf_t b = {0};
    int rc = 0;
    size_t qi = 0;
    for (const cJSON *list = result->child; list != NULL; list = list->next, ++qi) {
        if (!cJSON_IsArray(list)) {
            snprintf(err, err_size, "result[%zu] is not a list", qi);
            rc = -1;
            break;
        }
        size_t n = (size_t)cJSON_GetArraySize(list);
        if (n > topk)
            n = topk;
        out[qi].docs = calloc(n != 0 ? n : 1, sizeof(sg_up_doc_t));
        if (out[qi].docs == NULL)
            abort();
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
            sg_up_doc_t *d = &out[qi].docs[out[qi].n];
            emit(&b, doc, add_url, d);
            d->score = cJSON_IsNumber(score) && isfinite(score->valuedouble) ? score->valuedouble : 1.0 / (double)(k + 1);
            out[qi].n++;
        }
        if (rc != 0)
            break;
    }
    sg_hbuf_free(&b);
    cJSON_Delete(root);
    return rc;
}

int sg_upstream_parse_access(const char *body, size_t len, size_t n_urls, sg_up_list_t *out, char *err, size_t err_size)
{
    memset(out, 0, n_urls * sizeof(*out));
    const cJSON *result;
    cJSON *root = parse_result(body, len, n_urls, &result, err, err_size);
    if (root == NULL)
        return -1;
    sg_hbuf_t b = {0};
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
        out[i].docs = calloc(1, sizeof(sg_up_doc_t));
        if (out[i].docs == NULL)
            abort();
        emit(&b, page, 0, &out[i].docs[0]);
        out[i].docs[0].score = 1.0;
        out[i].n = 1;
    }
    sg_hbuf_free(&b);
    cJSON_Delete(root);
    return rc;
}

void sg_upstream_lists_free(sg_up_list_t *lists, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < lists[i].n; ++k)
            free(lists[i].docs[k].json);
        free(lists[i].docs);
        lists[i].docs = NULL;
        lists[i].n = 0;
    }
}

void sg_upstream_error_message(const char *body, size_t len, char *out, size_t out_size)
{
    cJSON *root = cJSON_ParseWithLength(body, len);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "message");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "detail");
    if (cJSON_IsString(m) && m->valuestring[0] != '\0') {
        sg_http_excerpt(m->valuestring, strlen(m->valuestring), NULL, out, out_size, 200);
    } else if (cJSON_IsString(d) && d->valuestring[0] != '\0') {
        sg_http_excerpt(d->valuestring, strlen(d->valuestring), NULL, out, out_size, 200);
    } else if (d != NULL) {
        char *printed = cJSON_PrintUnformatted(d); /* FastAPI validation errors are a list */
        if (printed != NULL)
            sg_http_excerpt(printed, strlen(printed), NULL, out, out_size, 200);
        free(printed);
    } else {
        sg_http_excerpt(body, len, NULL, out, out_size, 200);
    }
    cJSON_Delete(root);
    if (out_size > 0 && out[0] == '\0')
        snprintf(out, out_size, "(empty body)");
}
