/*
 * json.h -- the one JSON writer (strings: buf.h; doubles, cJSON values, error bodies: here) that
 * the gateway and the plugins build their output with, and the strict (RFC 8259) check of request
 * bodies that runs before cJSON, which is lenient.
 */
#ifndef SG_LIB_JSON_H
#define SG_LIB_JSON_H

#include <cJSON.h>
#include "common.h"

/* JSON strings: sg_buf_append_json_string() (buf.h). */
/** Appends a double in the shortest form that reads back to the same value ("null" for NaN/inf). */
void sg_json_append_double(sg_buf_t *b, double v);
/**
 * Appends the JSON text of `v` (compact). Strings go through sg_buf_append_json_string, so the
 * output is valid UTF-8 even when the input was not; numbers pass through (integers stay
 * integers); NaN and infinities become null.
 */
void sg_json_append_value(sg_buf_t *b, const cJSON *v);
/** Builds `{"error": {"code": status, "type": type, "message": msg}, "detail": msg}` into `b`. */
void sg_json_error_body(sg_buf_t *b, int status, const char *type, const char *msg);

/**
 * Checks that [p, p + len) is exactly one JSON value as RFC 8259 defines it, with optional
 * whitespace around it and an optional UTF-8 byte order mark before it (which Python's
 * json.loads of bytes accepts too). Rejected: raw control characters (U+0000..U+001F) inside
 * strings, invalid UTF-8 (overlong forms, UTF-16 surrogates, code points past U+10FFFF, stray
 * continuation bytes), bad escapes, numbers outside the grammar (01, 1., .5, +1, NaN, Infinity),
 * anything after the value, and nesting deeper than 1000 (cJSON's own limit).
 * Returns the offset where the value starts (after the BOM) or -1 with the offset of the first
 * offending byte in `*bad_at` and a static reason in `*why`. Thread-safe, no allocation.
 */
long sg_json_validate(const char *p, size_t len, size_t *bad_at, const char **why);

#endif
