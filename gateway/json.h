/*
 * json.h -- the JSON writing helpers the gateway uses to build responses by splicing.
 */
#ifndef SG_GATEWAY_JSON_H
#define SG_GATEWAY_JSON_H

#include "common.h"

/* JSON strings: sg_buf_append_json_string() (buf.h). */
/** Appends a double in the shortest form that reads back to the same value ("null" for NaN/inf). */
void sg_json_append_double(sg_buf_t *b, double v);
/** Builds `{"error": {"code": status, "type": type, "message": msg}, "detail": msg}` into `b`. */
void sg_json_error_body(sg_buf_t *b, int status, const char *type, const char *msg);

#endif
