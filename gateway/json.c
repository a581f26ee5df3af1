/*
 * json.c -- JSON output helpers. Responses are assembled from ready fragments, so the only
 * encoding work left to the gateway is strings (error messages, echoed values) and numbers.
 */
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void sg_json_append_string(sg_buf_t *b, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    sg_buf_reserve(b, len + 2);
    sg_buf_appendc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < len; ++i) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        sg_buf_append(b, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"':
            sg_buf_append(b, "\\\"", 2);
            break;
        case '\\':
            sg_buf_append(b, "\\\\", 2);
            break;
        case '\n':
            sg_buf_append(b, "\\n", 2);
            break;
        case '\r':
            sg_buf_append(b, "\\r", 2);
            break;
        case '\t':
            sg_buf_append(b, "\\t", 2);
            break;
        case '\b':
            sg_buf_append(b, "\\b", 2);
            break;
        case '\f':
            sg_buf_append(b, "\\f", 2);
            break;
        default: {
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            sg_buf_append(b, u, 6);
        } break;
        }
    }
    sg_buf_append(b, s + run, len - run);
    sg_buf_appendc(b, '"');
}

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
    sg_json_append_string(b, type, strlen(type));
    sg_buf_appends(b, ",\"message\":");
    sg_json_append_string(b, msg, strlen(msg));
    sg_buf_appends(b, "},\"detail\":");
    sg_json_append_string(b, msg, strlen(msg));
    sg_buf_appends(b, "}\n");
}
