/*
 * serper_parse.h -- pure functions that turn a serper.dev /search reply into /retrieve DOCs,
 * exactly as slime's and Search-R1's google_search_server.py format them (docs/protocols.md, "serper.dev").
 * No I/O and no global state: the plugin, the unit tests and the fuzz target all call these.
 */
#ifndef SG_BACKENDS_SERPER_PARSE_H
#define SG_BACKENDS_SERPER_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "http.h"

/** One formatted DOC: a JSON object {"id","contents","url"} (valid UTF-8), and its score. */
typedef sg_http_doc_t sg_serper_doc_t;
/** The DOCs of one query (http.h). */
typedef sg_http_docs_t sg_serper_docs_t;

/**
 * Parses the body of a 200 reply. Each item of "organic" (in order) becomes a DOC:
 *   contents = "\"<title>\"\n<context>", where context is the snippet split on "...", each
 *   fragment stripped (Python str.strip: Unicode whitespace) and kept when it has more than
 *   5 whitespace-separated words, the kept fragments joined by single spaces; a missing title
 *   becomes "No title." and an empty context "No snippet available."; an item with neither a
 *   title nor a surviving fragment is skipped. url = "link" ("" when absent), id = serper's
 *   "position" (else the 1-based rank) as a string, score = 1 / rank (1, 0.5, 0.33, ...).
 * At most `topk` DOCs are produced. A reply without "organic" (or with null) has no results.
 * Returns 0, or -1 with a reason in `err` when the body is not a JSON object or "organic" is
 * not an array. `out` must be freed with sg_serper_docs_free() in both cases.
 */
int sg_serper_parse_reply(const char *body, size_t len, uint32_t topk, sg_serper_docs_t *out, char *err, size_t err_size);
/** Frees the DOCs of `d` (sg_http_docs_free). */
void sg_serper_docs_free(sg_serper_docs_t *d);

/**
 * slime's parse_snippet + " ".join on UTF-8 text: appends the context for `snippet` to `out`
 * (raw UTF-8, not JSON-escaped). Returns the number of bytes appended.
 */
size_t sg_serper_context(const char *snippet, size_t len, sg_buf_t *out);

/** Python's str.isspace() for one code point. */
int sg_serper_py_isspace(uint32_t cp);

/**
 * The message of a serper error reply ({"message": "...", "statusCode": N}, or the raw body
 * when it is not that shape), shortened and with `secret` masked. Never fails.
 */
void sg_serper_error_message(const char *body, size_t len, const char *secret, char *out, size_t out_size);

#endif
