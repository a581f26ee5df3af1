/*
 * json.c -- JSON output helpers. Responses are assembled from ready fragments, so the only
 * encoding work left to the gateway is strings (error messages, echoed values) and numbers.
 */
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void sg_json_append_double(sg_buf_t *b, double v)
{
    if (!isfinite(v)) {
        sg_buf_appends(b, "null");
        return;
    }
    char tmp[40];
    for (int prec = 15; prec <= 17; ++prec) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
        if (prec == 17 || strtod(tmp, NULL) == v)
            break;
    }
    /* keep it a float for Python clients: 1 -> 1.0 */
    if (strpbrk(tmp, ".eEn") == NULL) {
        size_t l = strlen(tmp);
        memcpy(tmp + l, ".0", 3);
    }
    sg_buf_appends(b, tmp);
}

void sg_json_error_body(sg_buf_t *b, int status, const char *type, const char *msg)
{
    sg_buf_appendf(b, "{\"error\":{\"code\":%d,\"type\":", status);
    sg_buf_append_json_string(b, type, strlen(type));
    sg_buf_appends(b, ",\"message\":");
    sg_buf_append_json_string(b, msg, strlen(msg));
    sg_buf_appends(b, "},\"detail\":");
    sg_buf_append_json_string(b, msg, strlen(msg));
    sg_buf_appends(b, "}\n");
}
