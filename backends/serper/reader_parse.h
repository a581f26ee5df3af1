/*
 * reader_parse.h -- pure functions of the serper backend's page reader (POST /access through a
 * Jina-Reader-compatible service, docs/backends/serper.md): the request URL of a page, and a reply
 * turned into the PAGE object. No I/O and no global state: the plugin, the unit tests and the fuzz
 * target all call these.
 */
#ifndef SG_BACKENDS_SERPER_READER_PARSE_H
#define SG_BACKENDS_SERPER_READER_PARSE_H

#include <stddef.h>

#include "http.h"

/** What the reader is asked for (the Accept header) and how its 200 replies are read. */
enum { SG_READER_FORMAT_JSON = 0, SG_READER_FORMAT_TEXT = 1 };

/**
 * Appends the request URL for the page `url` (`len` bytes) to `out`: `base` (without a trailing
 * '/'), '/', then the page URL with its fragment (from the first '#') dropped and every byte a URL
 * cannot carry raw (controls, space, non-ASCII, `"<>\^`{|}`) percent-encoded; '%' and the reserved
 * characters pass as they are. Returns 0, or -1 with nothing appended when `url` is not an absolute
 * http:// or https:// URL (scheme in any case) with a host.
 */
int sg_reader_target(const char *base, const char *url, size_t len, sg_buf_t *out);

/**
 * Reads the body of an HTTP 200 from the reader for the page `url` (`url_len` bytes) and writes the
 * PAGE `{"url": <url>, "title": <title>, "contents": <text>}` into `page` (its old content is
 * replaced; strings are valid UTF-8, bad bytes become U+FFFD):
 *   SG_READER_FORMAT_JSON: the body is {"code": 200, "status": 20000, "data": {"title": ..., "url": ...,
 *     "content": ..., ...}}; contents = data.content (a string, required), title = data.title ("" when
 *     absent or not a string).
 *   SG_READER_FORMAT_TEXT: the body is the page as the reader renders it ("Title: ...\n\nURL Source:
 *     ...\n\nMarkdown Content:\n..."); contents = the whole body, title = the rest of a first line
 *     "Title: ..." ("" without one).
 * In both formats a JSON error envelope `{"data": null, "code": N, "name": ..., "message": ...}` with
 * N other than 200 is the reader refusing: returns 1 with `*code` = N and its message in `err`.
 * Returns 0 with the page, 1 for an envelope, or -1 with the reason in `err`.
 */
int sg_reader_parse_page(const char *body, size_t len, int format, const char *url, size_t url_len, sg_buf_t *page, long *code,
                         char *err, size_t err_size);

/**
 * The message of a reader error reply for a client-facing error: its "readableMessage" or
 * "message" when the body is such a JSON object, else an excerpt of the raw body (sg_http_error_excerpt;
 * at most 200 bytes). Keys are not masked here: the caller scrubs them. Never fails.
 */
void sg_reader_error_message(const char *body, size_t len, char *out, size_t out_size);

#endif
