/*
 * json.h -- the JSON writing helpers the gateway uses to build responses by splicing.
 */
#ifndef SG_GATEWAY_JSON_H
#define SG_GATEWAY_JSON_H

#include "common.h"

/** Appends `s` as a JSON string literal (with quotes). UTF-8 is passed through raw; control characters are escaped. */
void sg_json_append_string(sg_buf_t *b, const char *s, size_t len);
/** Appends a double in the shortest form that reads back to the same value ("null" for NaN/inf). */
void sg_json_append_double(sg_buf_t *b, double v);
/** Builds `{"error": {"code": status, "type": type, "message": msg}, "detail": msg}` into `b`. */
void sg_json_error_body(sg_buf_t *b, int status, const char *type, const char *msg);

#endif
