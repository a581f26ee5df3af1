/*
 * http_common.c -- the HTTP helpers every handler shares (http_common.h): one place for the answers with a body,
 * the JSON error shape, the early answer and header lookup.
 */
#include "http_common.h"
#include "status.h"
#include "runtime.h"
#include "buf.h"
#include "json.h"
#include "query.h"
#include "route.h"

#include <stdio.h>
#include <string.h>

void sg_send_body(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len)
{
    static h2o_generator_t generator = {NULL, NULL};
    req->res.status = status;
    req->res.reason = sg_http_reason(status);
    req->res.content_length = len;
    if (ctype != NULL)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ctype, strlen(ctype));
    h2o_iovec_t buf = h2o_strdup(&req->pool, body != NULL ? body : "", len);
    h2o_start_response(req, &generator);
    h2o_send(req, &buf, 1, H2O_SEND_STATE_FINAL);
}

void sg_send_json(h2o_req_t *req, int status, const char *body, size_t len)
{
    sg_send_body(req, status, "application/json", body, len);
}

void sg_send_error(h2o_req_t *req, int status, const char *type, const char *msg, uint32_t retry_after_s)
{
    sg_buf_t b = {0};
    sg_json_error_body(&b, status, type, msg);
    if (retry_after_s > 0) {
        char tmp[16];
        int n = snprintf(tmp, sizeof(tmp), "%u", retry_after_s);
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, h2o_strdup(&req->pool, tmp, (size_t)n).base,
                       (size_t)n);
    }
    sg_send_json(req, status, b.base, b.len);
    sg_buf_free(&b);
}

void sg_http_answer_early(h2o_req_t *req, int status, const char *type, const char *msg, const sg_provenance_t *prov)
{
    if (status == 401)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL, H2O_STRLIT("Bearer realm=\"searchgate\""));
    if (prov != NULL)
        sg_provenance_add_header(req, prov, NULL);
    if (status == 200)
        sg_send_json(req, 200, msg, strlen(msg));
    else
        sg_send_error(req, status, type, msg, 0);
}

_Static_assert(SG_OPS_COUNT == SG_HTTP_ROUTES, "sg_server_t.http_requests has a row per operations route");
const char *const sg_ops_route_names[SG_OPS_COUNT] = {"root", "health", "metrics", "stats", "dashboard", "admin", "other"};

int sg_ops_route_index(h2o_iovec_t path)
{
    static const char *const paths[SG_OPS_OTHER] = {"/", "/health", "/metrics", "/stats", "/dashboard", "/admin/reload"};
    for (int i = 0; i < SG_OPS_OTHER; ++i)
        if (h2o_memis(path.base, path.len, paths[i], strlen(paths[i])))
            return i;
    return SG_OPS_OTHER;
}

void sg_ops_count_route(h2o_req_t *req, int route, int status)
{
    sg_counter_add(sg_loop_of(req)->server->http_requests[route][sg_code_index(status)], 1);
}

h2o_iovec_t sg_http_header(h2o_req_t *req, const char *name, size_t len)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, name, len, -1);
    return i >= 0 ? req->headers.entries[i].value : h2o_iovec_init(NULL, 0);
}

h2o_iovec_t sg_http_query_param(h2o_req_t *req, const char *name)
{
    h2o_iovec_t found = {NULL, 0};
    if (req->query_at == SIZE_MAX)
        return found;
    const char *p = req->path.base + req->query_at + 1, *end = req->path.base + req->path.len;
    size_t nlen = strlen(name);
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp != NULL ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        const char *kend = eq != NULL ? eq : stop;
        if ((size_t)(kend - p) == nlen && memcmp(p, name, nlen) == 0)
            found = eq != NULL ? h2o_iovec_init(eq + 1, (size_t)(stop - eq - 1)) : h2o_iovec_init(stop, 0);
        p = stop + 1;
    }
    return found;
}

/* ---- X-Searchgate-Provenance ---- */

/* Copies `s` (at most `n` bytes) to `dst` as header_safe() would, but keeps ','; returns the end. */
static char *copy_param_text(char *dst, const char *s, size_t n)
{
    for (size_t i = 0; i < n && s[i] != '\0'; ++i)
        *dst++ = s[i] < 0x21 || s[i] > 0x7e || s[i] == ';' || s[i] == '"' || s[i] == '\\' ? '_' : s[i];
    return dst;
}

static char *append(char *dst, const char *s, size_t n)
{
    memcpy(dst, s, n);
    return dst + n;
}

static char *append_u32(char *dst, uint32_t v)
{
    char tmp[12], *p = tmp + sizeof(tmp);
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    return append(dst, p, (size_t)(tmp + sizeof(tmp) - p));
}

void sg_provenance_add_header(h2o_req_t *req, const sg_provenance_t *p, const sg_query_result_t *res)
{
    if (p == NULL || p->header == NULL)
        return;
    const sg_provenance_t *fb = res != NULL && res->fallback != NULL ? &res->fallback->prov : NULL;
    size_t plen = res != NULL && res->params != NULL ? strlen(res->params) : 0;
    if (plen > 256)
        plen = 256;
    size_t cap = p->header_len + 64 + (plen != 0 ? plen + 10 : 0) + (fb != NULL ? strlen(fb->route) + 32 : 0);
    char *v = h2o_mem_alloc_pool(&req->pool, cap), *end = v + p->header_len;
    memcpy(v, p->header, p->header_len);
    if (res != NULL && res->status == 200) {
        const char *state = !res->cache_on                     ? "; cache=off"
                            : res->n_cached == 0               ? "; cache=none"
                            : res->n_cached >= res->n_distinct ? "; cache=all"
                                                               : "; cache=partial";
        end = append(end, state, strlen(state));
        if (res->cache_on) {
            end = append(end, "; cached=", 9);
            end = append_u32(end, res->n_cached);
            *end++ = '/';
            end = append_u32(end, res->n_distinct);
        }
    }
    if (plen != 0) {
        memcpy(end, "; params=", 9);
        end = copy_param_text(end + 9, res->params, plen);
    }
    if (fb != NULL) {
        end = append(end, "; fallback=", 11);
        end = append(end, fb->route, strlen(fb->route));
        *end++ = ':';
        end = append(end, fb->data, 16);
    }
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-searchgate-provenance"), 0, NULL, v, (size_t)(end - v));
}
