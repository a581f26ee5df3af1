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

/**
 * The writer of JSON documents: objects and arrays with their commas, keys and string values
 * escaped (sg_buf_append_json_string), integers exact, doubles in the shortest form that reads
 * back, or with a fixed number of decimals. Every JSON document the gateway builds goes through it
 * (or through the blob fragments it splices). Nesting up to 64 levels.
 *
 *     sg_jw_t w;
 *     sg_jw_init(&w, &buf);
 *     sg_jw_obj(&w);
 *     sg_jw_kstr(&w, "status", "ok");
 *     sg_jw_key(&w, "backends"), sg_jw_arr(&w), ..., sg_jw_end(&w);
 *     sg_jw_end(&w);
 */
typedef struct st_sg_jw_t {
    sg_buf_t *b;
    uint64_t has_items; /* bit d: the container at depth d has a member already */
    uint64_t is_array;  /* bit d: the container at depth d is an array */
    uint32_t depth;
    int after_key; /* a key was written: its value comes next, without a comma */
} sg_jw_t;

/** Writes into `b` (appending). */
void sg_jw_init(sg_jw_t *w, sg_buf_t *b);
void sg_jw_obj(sg_jw_t *w);
void sg_jw_arr(sg_jw_t *w);
/** Closes the innermost object or array. */
void sg_jw_end(sg_jw_t *w);
/** An object member's key (escaped); the next call writes its value. */
void sg_jw_key(sg_jw_t *w, const char *key);
void sg_jw_str(sg_jw_t *w, const char *s);
void sg_jw_strn(sg_jw_t *w, const char *s, size_t n);
void sg_jw_u64(sg_jw_t *w, uint64_t v);
void sg_jw_i64(sg_jw_t *w, int64_t v);
/** The shortest form that reads back the same double (sg_json_append_double); null for NaN/inf. */
void sg_jw_double(sg_jw_t *w, double v);
/** `decimals` digits after the point (3: uptime seconds, 6: ratios); null for NaN/inf. */
void sg_jw_fixed(sg_jw_t *w, double v, int decimals);
void sg_jw_bool(sg_jw_t *w, int v);
void sg_jw_null(sg_jw_t *w);
/** A value that is JSON already (a spliced fragment, a cJSON value's text). */
void sg_jw_raw(sg_jw_t *w, const char *json, size_t n);

/* key + value in one call */
void sg_jw_kstr(sg_jw_t *w, const char *key, const char *s);
void sg_jw_ku64(sg_jw_t *w, const char *key, uint64_t v);
void sg_jw_ki64(sg_jw_t *w, const char *key, int64_t v);
void sg_jw_kdouble(sg_jw_t *w, const char *key, double v);
void sg_jw_kfixed(sg_jw_t *w, const char *key, double v, int decimals);
void sg_jw_kbool(sg_jw_t *w, const char *key, int v);

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

/**
 * Checks that [p, p + len) starts with one JSON value, under the rules of sg_json_validate but
 * with nothing before it (no whitespace, no byte order mark) and objects and arrays nested at most
 * `max_depth` deep (1000 at most), and returns its length in bytes: what follows the value is left
 * to the caller. Returns -1 with `*bad_at` and `*why` as sg_json_validate does when no valid value
 * starts at `p`. Thread-safe, no allocation.
 */
long sg_json_value_len(const char *p, size_t len, int max_depth, size_t *bad_at, const char **why);

#endif
