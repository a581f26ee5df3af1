/*
 * request.c -- the /retrieve request model, done the way the Python servers' clients expect:
 * 400 for a body that is not JSON (strict RFC 8259: sg_json_validate() runs first), 422 for a
 * body that does not fit the model (FastAPI's status), 413 for anything over the configured
 * limits. cJSON decodes \uXXXX escapes and surrogate pairs (the Python clients send
 * ASCII-escaped JSON); raw UTF-8 passes unchanged. A key given twice keeps its last value, as
 * Python's json does.
 */
#include "request.h"
#include "common.h"
#include "json.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(char *err, size_t n, int status, const char *fmt, ...) SG_PRINTF_FMT(4, 5);
static int fail(char *err, size_t n, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return status;
}

/* cJSON stops a string at an embedded NUL (\u0000); such a query cannot be represented faithfully. */
static int has_nul_escape(const char *raw, size_t len)
{
    for (size_t i = 0; i + 6 <= len; ++i)
        if (raw[i] == '\\') {
            if (memcmp(raw + i, "\\u0000", 6) == 0)
                return 1;
            ++i; /* skip the escaped character */
        }
    return 0;
}

/* The member `key` of `obj`, the last one when it appears more than once (Python's json keeps the
 * last value; cJSON's own lookup returns the first). */
static const cJSON *member(const cJSON *obj, const char *key)
{
    const cJSON *found = NULL;
    for (const cJSON *it = obj->child; it != NULL; it = it->next)
        if (it->string != NULL && strcmp(it->string, key) == 0)
            found = it;
    return found;
}

/* The list of queries (or URLs), or SkyRL's single "query": its first element and how many. */
static int parse_list(const cJSON *root, const sg_request_limits_t *lim, int is_access, const cJSON **first, uint32_t *n, char *err,
                      size_t err_size)
{
    const char *list_key = is_access ? "urls" : "queries";
    const cJSON *qs = member(root, list_key);
    const cJSON *q1 = is_access ? NULL : member(root, "query");
    if (cJSON_IsNull(q1))
        q1 = NULL;
    if (qs != NULL && q1 != NULL)
        return fail(err, err_size, 422, "give either \"queries\" (a list) or \"query\" (a string), not both");
    if (qs == NULL && q1 == NULL)
        return fail(err, err_size, 422, "field \"%s\" is required (a list of strings)", list_key);
    if (q1 != NULL && !cJSON_IsString(q1))
        return fail(err, err_size, 422, "field \"query\" must be a string");
    if (qs != NULL && !cJSON_IsArray(qs))
        return fail(err, err_size, 422, "field \"%s\" must be a list of strings", list_key);
    *n = q1 != NULL ? 1 : (uint32_t)cJSON_GetArraySize(qs);
    if (*n > lim->max_queries)
        return fail(err, err_size, 413, "%u %s exceed limits.max_queries (%u)", *n, list_key, lim->max_queries);
    *first = q1 != NULL ? q1 : qs->child;
    return 0;
}

/* topk: null, 0 or absent fall back to the default (Search-R1's `if not request.topk`). */
static int parse_topk(const cJSON *root, const sg_request_limits_t *lim, sg_parsed_t *out, char *err, size_t err_size)
{
    const cJSON *tk = member(root, "topk");
    if (tk == NULL || cJSON_IsNull(tk))
        return 0;
    if (!cJSON_IsNumber(tk) || !isfinite(tk->valuedouble) || tk->valuedouble != floor(tk->valuedouble))
        return fail(err, err_size, 422, "field \"topk\" must be an integer or null");
    if (tk->valuedouble < 0)
        return fail(err, err_size, 422, "field \"topk\" must not be negative");
    if (tk->valuedouble > lim->max_topk)
        return fail(err, err_size, 413, "topk %.0f exceeds limits.max_topk (%u)", tk->valuedouble, lim->max_topk);
    out->topk = (uint32_t)tk->valuedouble;
    return 0;
}

/* return_scores, backend and search_params. */
static int parse_options(const cJSON *root, int is_access, sg_parsed_t *out, char *err, size_t err_size)
{
    const cJSON *rs = member(root, "return_scores");
    if (rs != NULL && !cJSON_IsNull(rs)) {
        if (cJSON_IsBool(rs))
            out->return_scores = cJSON_IsTrue(rs);
        else if (cJSON_IsNumber(rs) && (rs->valuedouble == 0 || rs->valuedouble == 1))
            out->return_scores = rs->valuedouble == 1; /* pydantic accepts 0/1 for bool */
        else
            return fail(err, err_size, 422, "field \"return_scores\" must be true or false");
    }
    const cJSON *be = member(root, "backend");
    if (be != NULL && !cJSON_IsNull(be)) {
        if (!cJSON_IsString(be))
            return fail(err, err_size, 422, "field \"backend\" must be a string");
        out->backend = sg_strdup(be->valuestring);
    }
    const cJSON *sp = is_access ? NULL : cJSON_GetObjectItemCaseSensitive(root, "search_params");
    if (sp != NULL && !cJSON_IsNull(sp)) {
        if (!cJSON_IsObject(sp))
            return fail(err, err_size, 422, "field \"search_params\" must be an object");
        char *t = cJSON_PrintUnformatted(sp);
        if (t == NULL)
            abort();
        out->search_params = sg_strdup(t);
        cJSON_free(t);
    }
    return 0;
}

/* Checks each of the n strings from `first` and copies them back to back into out's arena. */
static int copy_queries(const cJSON *first, uint32_t n, const sg_request_limits_t *lim, int is_access, const char *body, size_t len,
                        sg_parsed_t *out, char *err, size_t err_size)
{
    const char *list_key = is_access ? "urls" : "queries";
    size_t total = 0;
    uint32_t i = 0;
    for (const cJSON *it = first; it != NULL && i < n; it = it->next, ++i) {
        if (!cJSON_IsString(it))
            return fail(err, err_size, 422, "%s[%u] must be a string", list_key, i);
        size_t l = strlen(it->valuestring);
        if (l > lim->max_query_bytes)
            return fail(err, err_size, 413, "%s[%u] is %zu bytes, over limits.max_query_bytes (%u)", list_key, i, l,
                        lim->max_query_bytes);
        total += l;
    }
    if (has_nul_escape(body, len))
        return fail(err, err_size, 422, "strings may not contain NUL characters (\\u0000)");
    out->n = n;
    out->arena = sg_mem_alloc(total + 1);
    out->off = sg_mem_alloc((n != 0 ? n : 1) * sizeof(uint32_t));
    out->len = sg_mem_alloc((n != 0 ? n : 1) * sizeof(uint32_t));
    size_t pos = 0;
    i = 0;
    for (const cJSON *it = first; it != NULL && i < n; it = it->next, ++i) {
        size_t l = strlen(it->valuestring);
        memcpy(out->arena + pos, it->valuestring, l);
        out->off[i] = (uint32_t)pos;
        out->len[i] = (uint32_t)l;
        pos += l;
    }
    out->arena[pos] = '\0';
    return 0;
}

int sg_request_parse(const char *body, size_t len, const sg_request_limits_t *lim, int is_access, sg_parsed_t *out, char *err,
                     size_t err_size)
{
    memset(out, 0, sizeof(*out));
    if (len > lim->max_body_bytes)
        return fail(err, err_size, 413, "request body of %zu bytes exceeds limits.max_body_bytes (%zu)", len, lim->max_body_bytes);
    if (body == NULL || len == 0)
        return fail(err, err_size, 422, "a JSON body is required, e.g. {\"%s\": [\"...\"]}", is_access ? "urls" : "queries");
    size_t bad_at = 0;
    const char *why = NULL;
    long start = sg_json_validate(body, len, &bad_at, &why);
    if (start < 0)
        return fail(err, err_size, 400, "request body is not valid JSON: %s at byte %zu", why, bad_at);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body + start, len - (size_t)start, &end, 0);
    if (root == NULL) { /* valid JSON that cJSON refuses: a lone UTF-16 surrogate escape (\ud800) */
        size_t at = end != NULL && end >= body + start ? (size_t)(end - body) : 0;
        return fail(err, err_size, 400, "request body is not valid JSON (error near byte %zu)", at);
    }
    const cJSON *first = NULL;
    uint32_t n = 0;
    int status = 0;
    if (!cJSON_IsObject(root))
        status = fail(err, err_size, 422, "request body must be a JSON object");
    if (status == 0)
        status = parse_list(root, lim, is_access, &first, &n, err, err_size);
    if (status == 0 && !is_access)
        status = parse_topk(root, lim, out, err, err_size);
    if (status == 0)
        status = parse_options(root, is_access, out, err, err_size);
    if (status == 0)
        status = copy_queries(first, n, lim, is_access, body, len, out, err, err_size);
    cJSON_Delete(root);
    if (status != 0)
        sg_parsed_free(out);
    return status;
}

void sg_parsed_free(sg_parsed_t *p)
{
    free(p->arena);
    free(p->off);
    free(p->len);
    free(p->backend);
    free(p->search_params);
    memset(p, 0, sizeof(*p));
}
