/*
 * http_common.c -- the HTTP helpers every handler shares (http_common.h): one place for the answers with a body,
 * the JSON error shape, the early answer and header lookup.
 */
#include "http_common.h"
#include "status.h"
#include "buf.h"
#include "json.h"

#include <stdio.h>
#include <string.h>

void sg_send_body(h2o_req_t *req, int status, const char *ctype, const char *body, size_t len)
{
    static h2o_generator_t generator = {NULL, NULL};
    req->res.status = status;
    req->res.reason = sg_http_reason(status);
    req->res.content_length = len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ctype, strlen(ctype));
    h2o_iovec_t buf = h2o_strdup(&req->pool, body, len);
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

h2o_iovec_t sg_http_header(h2o_req_t *req, const char *name, size_t len)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, name, len, -1);
    return i >= 0 ? req->headers.entries[i].value : h2o_iovec_init(NULL, 0);
}
