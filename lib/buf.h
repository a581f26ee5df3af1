/*
 * buf.h -- a growable byte buffer, shared by the gateway, the cache and the plugins (library sg_lib).
 * Allocation failure aborts the process (h2o/Redis style), so callers never check.
 */
#ifndef SG_LIB_BUF_H
#define SG_LIB_BUF_H

#include <stddef.h>
#include <string.h>

/** `base` is always NUL-terminated after an append (the NUL is not counted in `len`). */
typedef struct st_sg_buf_t {
    char *base;
    size_t len;
    size_t cap;
} sg_buf_t;

/** Makes room for `extra` more bytes (plus the NUL). */
void sg_buf_reserve(sg_buf_t *b, size_t extra);
void sg_buf_append(sg_buf_t *b, const void *p, size_t n);
void sg_buf_appendf(sg_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sg_buf_free(sg_buf_t *b);
static inline void sg_buf_appendc(sg_buf_t *b, char c)
{
    sg_buf_append(b, &c, 1);
}
static inline void sg_buf_appends(sg_buf_t *b, const char *s)
{
    sg_buf_append(b, s, strlen(s));
}

/** Appends `s` as a JSON string literal (quotes included): control characters escaped, UTF-8
 *  passed through raw, bytes that are not UTF-8 replaced with U+FFFD (so the output is valid JSON). */
void sg_buf_append_json_string(sg_buf_t *b, const char *s, size_t n);
/** Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when it is not valid UTF-8. */
size_t sg_utf8_seq_len(const unsigned char *s, size_t n);

#endif
