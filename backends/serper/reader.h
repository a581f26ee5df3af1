/*
 * reader.h -- the page reader of the serper backend: POST /access answered through a
 * Jina-Reader-compatible service (reader.c). Internal to the plugin: serper.c creates one when the
 * backend config has a "reader" object and forwards access(), cancel() and stats() to it.
 */
#ifndef SG_BACKENDS_SERPER_READER_H
#define SG_BACKENDS_SERPER_READER_H

#include <cJSON.h>
#include <stddef.h>

#include "sg_backend.h"

typedef struct st_sg_reader_t sg_reader_t;

/**
 * Reads the "reader" object `obj` of the backend config (keys in docs/backends/serper.md; errors
 * name "config.reader.<key>") and starts the reader's own HTTP engine. `default_rest_s` is the
 * backend's key_rest_s, the default of the reader's. Main thread (create()). Returns 0, or -1 with
 * the reason in `err`.
 */
int sg_reader_create(const sg_host_api *host, const char *instance, const char *base_dir, const cJSON *obj, uint32_t default_rest_s,
                     sg_reader_t **out, char *err, size_t err_size);

/** access() of the plugin: each query is a page URL. Same contract as sg_backend_vtable.access. Any loop thread. */
sg_status sg_reader_access(sg_reader_t *rd, const sg_search *s, sg_done_fn done, void *cb_data);

/** cancel() for an access started with `cb_data`; returns 1 when it was one of the reader's. Any loop thread. */
int sg_reader_cancel(sg_reader_t *rd, void *cb_data);

/** Emits the reader's metrics (docs/backends/serper.md) inside stats(). */
void sg_reader_stats(sg_reader_t *rd, void *sink);

/** The reader's admission limits for the gateway (ABI 1.2 limits() for access): one unit per page URL. */
void sg_reader_limits(sg_reader_t *rd, sg_limits *out);

/** A short description for the start-up log line. */
const char *sg_reader_describe(sg_reader_t *rd);

/** Completes every pending access with SG_ECANCELED, stops the engine, frees everything. Main thread; NULL is fine. */
void sg_reader_free(sg_reader_t *rd);

#endif
