/*
 * qdrant_parse.c -- Qdrant REST bodies for the qdrant backend (docs/protocols.md, "Qdrant", Qdrant v1.10+
 * query API): the /points/query/batch request, its reply, error replies and collection info.
 */
#include "qdrant_parse.h"
#include "json.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sg_qdrant_build_batch(sg_buf_t *b, const float *vecs, size_t n, int dim, uint32_t limit, const sg_qdrant_params_t *p)
{
    sg_buf_appends(b, "{\"searches\":[");
    for (size_t i = 0; i < n; ++i) {
        if (i != 0)
            sg_buf_append(b, ",", 1);
        sg_buf_appends(b, "{\"query\":[");
        for (int k = 0; k < dim; ++k) {
            sg_buf_reserve(b, 32);
            float v = vecs[i * (size_t)dim + (size_t)k];
            if (!isfinite(v))
                v = 0.0f;
            /* %.9g round-trips a float32 exactly */
            int w = snprintf(b->base + b->len, b->cap - b->len, k == 0 ? "%.9g" : ",%.9g", (double)v);
            b->len += (size_t)w;
        }
        sg_buf_appendf(b, "],\"limit\":%u,\"with_payload\":true", limit);
        if (p != NULL && (p->has_hnsw_ef || p->has_exact)) {
            sg_buf_appends(b, ",\"params\":{");
            if (p->has_hnsw_ef)
                sg_buf_appendf(b, "\"hnsw_ef\":%u", p->hnsw_ef);
            if (p->has_exact)
                sg_buf_appendf(b, "%s\"exact\":%s", p->has_hnsw_ef ? "," : "", p->exact ? "true" : "false");
            sg_buf_append(b, "}", 1);
        }
        if (p != NULL && p->has_score_threshold)
            sg_buf_appendf(b, ",\"score_threshold\":%.9g", p->score_threshold);
        if (p != NULL && p->using_vector != NULL) {
            sg_buf_appends(b, ",\"using\":");
            sg_buf_append_json_string(b, p->using_vector, strlen(p->using_vector));
        }
        sg_buf_append(b, "}", 1);
    }
    sg_buf_appends(b, "]}");
}

/* The point id as a string: unsigned integer or UUID. */
static int point_id(const cJSON *id, char *out, size_t n)
{
    if (cJSON_IsString(id)) {
        snprintf(out, n, "%s", id->valuestring);
        return 0;
    }
    if (cJSON_IsNumber(id) && id->valuedouble >= 0 && id->valuedouble < 1.8446744073709552e19 &&
        id->valuedouble == floor(id->valuedouble)) {
        snprintf(out, n, "%.0f", id->valuedouble);
        return 0;
    }
    return -1;
}

/* Writes the DOC of a point into `b`. */
static void emit_point(sg_buf_t *b, const cJSON *payload, const char *id)
{
    b->len = 0;
    int has_id = 0, has_contents = 0, has_url = 0, first = 1;
    sg_buf_append(b, "{", 1);
    if (cJSON_IsObject(payload)) {
        for (const cJSON *it = payload->child; it != NULL; it = it->next) {
            const char *k = it->string != NULL ? it->string : "";
            if (strcmp(k, "url") == 0 && !cJSON_IsString(it))
                continue; /* replaced by "" below */
            if (strcmp(k, "contents") == 0 && !cJSON_IsString(it))
                continue;
            if (strcmp(k, "id") == 0)
                has_id = 1;
            else if (strcmp(k, "contents") == 0)
                has_contents = 1;
            else if (strcmp(k, "url") == 0)
                has_url = 1;
            if (!first)
                sg_buf_append(b, ",", 1);
            first = 0;
            sg_buf_append_json_string(b, k, strlen(k));
            sg_buf_append(b, ":", 1);
            sg_json_append_value(b, it);
        }
    }
    if (!has_id) {
        sg_buf_appends(b, first ? "\"id\":" : ",\"id\":");
        sg_buf_append_json_string(b, id, strlen(id));
        first = 0;
    }
    if (!has_contents) {
        sg_buf_appends(b, first ? "\"contents\":\"\"" : ",\"contents\":\"\"");
        first = 0;
    }
    if (!has_url)
        sg_buf_appends(b, first ? "\"url\":\"\"" : ",\"url\":\"\"");
    sg_buf_append(b, "}", 1);
}

int sg_qdrant_parse_batch(const char *body, size_t len, size_t n_queries, uint32_t topk, sg_qd_list_t *out, char *err,
                          size_t err_size)
{
    memset(out, 0, n_queries * sizeof(*out));
    const cJSON *result;
    cJSON *root = sg_http_parse_result(body, len, n_queries, "results", &result, err, err_size);
    if (root == NULL)
        return -1;
    sg_buf_t b = {0};
    int rc = 0;
    size_t qi = 0;
    for (const cJSON *r = result->child; r != NULL && rc == 0; r = r->next, ++qi) {
        const cJSON *points = cJSON_GetObjectItemCaseSensitive(r, "points");
        if (!cJSON_IsArray(points)) {
            snprintf(err, err_size, "result[%zu] has no \"points\" array", qi);
            rc = -1;
            break;
        }
        size_t n = sg_http_docs_reserve(&out[qi], (size_t)cJSON_GetArraySize(points), topk);
        size_t k = 0;
        for (const cJSON *p = points->child; p != NULL && k < n; p = p->next, ++k) {
            char id[80];
            const cJSON *score = cJSON_GetObjectItemCaseSensitive(p, "score");
            const cJSON *payload = cJSON_GetObjectItemCaseSensitive(p, "payload");
            if (!cJSON_IsObject(p) || point_id(cJSON_GetObjectItemCaseSensitive(p, "id"), id, sizeof(id)) != 0 ||
                !cJSON_IsNumber(score) || !isfinite(score->valuedouble) ||
                (payload != NULL && !cJSON_IsNull(payload) && !cJSON_IsObject(payload))) {
                snprintf(err, err_size, "result[%zu].points[%zu] is not a scored point with an id, a score and an object payload",
                         qi, k);
                rc = -1;
                break;
            }
            emit_point(&b, payload, id);
            sg_http_docs_push(&out[qi], &b, score->valuedouble);
        }
    }
    sg_buf_free(&b);
    cJSON_Delete(root);
    return rc;
}

void sg_qdrant_lists_free(sg_qd_list_t *lists, size_t n)
{
    sg_http_docs_free(lists, n);
}

void sg_qdrant_error_message(const char *body, size_t len, char *out, size_t out_size)
{
    cJSON *root = cJSON_ParseWithLength(body, len);
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(root, "status");
    sg_http_error_excerpt(cJSON_GetObjectItemCaseSensitive(status, "error"), body, len, NULL, 240, out, out_size);
    cJSON_Delete(root);
}

int sg_qdrant_parse_collection(const char *body, size_t len, const char *vector_name, sg_qdrant_collection_t *out, char *err,
                               size_t err_size)
{
    memset(out, 0, sizeof(*out));
    out->size = -1;
    out->points = -1;
    cJSON *root = cJSON_ParseWithLength(body, len);
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(root, "result");
    if (!cJSON_IsObject(result)) {
        snprintf(err, err_size, root == NULL ? "malformed JSON in the collection info" : "the collection info has no \"result\"");
        cJSON_Delete(root);
        return -1;
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(result, "status");
    if (cJSON_IsString(st))
        snprintf(out->status, sizeof(out->status), "%s", st->valuestring);
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(result, "points_count");
    if (cJSON_IsNumber(pc) && pc->valuedouble >= 0 && pc->valuedouble < 1e15)
        out->points = (long)pc->valuedouble;
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(result, "config");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(config, "params");
    const cJSON *vectors = cJSON_GetObjectItemCaseSensitive(params, "vectors");
    const cJSON *v = vectors;
    if (vector_name != NULL)
        v = cJSON_GetObjectItemCaseSensitive(vectors, vector_name);
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(v, "size");
    if (cJSON_IsNumber(size) && !(size->valuedouble >= 1 && size->valuedouble <= 1e6)) {
        snprintf(err, err_size, "the collection reports an invalid vector size");
        cJSON_Delete(root);
        return -1;
    }
    if (!cJSON_IsNumber(size)) {
        if (vector_name != NULL)
            snprintf(err, err_size, "the collection has no vector named \"%s\"", vector_name);
        else
            snprintf(err, err_size, "the collection has no default (unnamed) vector; set \"vector\" to one of its named vectors");
        cJSON_Delete(root);
        return -1;
    }
    out->size = (long)size->valuedouble;
    const cJSON *dist = cJSON_GetObjectItemCaseSensitive(v, "distance");
    if (cJSON_IsString(dist))
        snprintf(out->distance, sizeof(out->distance), "%s", dist->valuestring);
    cJSON_Delete(root);
    return 0;
}
