/*
 * rerank.h -- the rerank stage: a route option (`rerank: {...}`, docs/rerank.md) that puts a BERT
 * cross-encoder (backends/encoder/xenc.h) behind any backend.
 *
 * The stage is a decorator behind the plugin ABI: once the route's plugin is created,
 * sg_rerank_wrap() replaces the route's vtable and instance by the stage's own, which forwards
 * everything to the plugin except search(). Its search() asks the plugin for `candidates` hits
 * per query, and when they arrive hands the call to the stage's bounded worker pool, which scores
 * each (query, passage) pair and completes the call with the `topk` best, best first, scored by
 * the cross-encoder. The rest of the gateway (cache, singleflight, admission, deadlines) sees an
 * ordinary backend; the stage's settings and the model's identity are part of the route's cache
 * identity, so changing either never serves an old answer.
 *
 * Threads: sg_rerank_conf_parse and sg_rerank_wrap run on the main thread at start-up (or the
 * reload thread, for a route a reload creates); the
 * stage's search/cancel run on loop threads and never block (the scoring runs on its workers).
 */
#ifndef SG_GATEWAY_RERANK_H
#define SG_GATEWAY_RERANK_H

#include <stddef.h>
#include <stdint.h>
#include "buf.h"
#include "rerank_conf.h"

struct st_sg_config_t;
/**
 * Main or reload thread, before a route of `cfg` is wrapped: when a route has a rerank stage and
 * the module is not loaded yet, dlopen()s the cross-encoder module `<plugin_dir>/rerank_xenc.so`
 * (rerank_xenc.h says why it is a module); it stays loaded. Errors name the path.
 */
int sg_rerank_open_module(const struct st_sg_config_t *cfg, const char *plugin_dir, char *err, size_t err_size);

struct st_sg_route_core_t;
struct st_sg_backend_conf_t;
/**
 * Main or reload thread, after the route's plugin was created and before its identity is read:
 * loads the model of `bc`'s stage (errors name the file, key or bound), starts the workers,
 * registers the stage's metrics, and puts the stage in front of the plugin (k->plugin.vt and
 * k->inst). The stage keeps its own copy of its settings (it may outlive `bc`'s config). Its
 * destroy() destroys the plugin's instance and puts the plugin's own vtable back.
 */
int sg_rerank_wrap(struct st_sg_route_core_t *k, const struct st_sg_backend_conf_t *bc, char *err, size_t err_size);

/**
 * The passage a (query, passage) pair is made of, from a DOC (protocols.md): as Search-R1's
 * rerank server builds it, "(Title: " + the first line of "contents" + ") " + the rest of it
 * (without "contents": its "title" and "text" strings). Appends to `out`; returns the length
 * added. Exposed for tests.
 */
size_t sg_rerank_passage(const char *doc, size_t doc_len, sg_buf_t *out);

#endif
