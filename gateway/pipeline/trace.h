/*
 * trace.h -- query traces (docs/traces.md): one JSON line per query of the requests a route or a
 * client traces (sampled per request, so a batch stays whole), with the time, the client, the
 * route, the query text, the returned ids and scores, where each answer came from (cache tier,
 * singleflight, backend), the latency and the status.
 *
 * Off the hot path: a request's loop thread only takes its sampling decision and queues one record
 * (the texts copied, the result blobs referenced, nothing formatted) in the bounded buffer of the
 * trace's file; one writer thread formats and writes the lines. A full buffer drops the record and
 * counts its lines (searchgate_trace_dropped_lines_total): a loop never waits for the disk. Files
 * rotate by size and age and are reopened on sg_trace_reopen() (SIGUSR1, logrotate-style).
 *
 * Process-wide state: the trace files (sinks) and the writer thread (trace.c), shared by every
 * loop. Each configuration generation (gen.h) attaches its traces to the sinks by path
 * (sg_trace_configure(): an open file stays open across a reload, a new path is opened, a path no
 * generation names any more is written out and closed), and the writer stops with sg_trace_stop().
 */
#ifndef SG_GATEWAY_TRACE_H
#define SG_GATEWAY_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include "blob.h"
#include "trace_conf.h"

struct st_sg_config_t;

/* Where one distinct query's answer came from ("cache" field). */
enum {
    SG_SRC_NONE = 0, /* not answered (the request failed first) */
    SG_SRC_L1,       /* the in-process cache */
    SG_SRC_REDIS,    /* Redis */
    SG_SRC_JOINED,   /* an identical query already in flight (singleflight) */
    SG_SRC_BACKEND,  /* a backend call of its own */
    SG_SRC_FALLBACK, /* the route's fallback backend */
    SG_SRC_FUSION,   /* merged from a fusion route's legs */
    SG_SRC_COUNT
};

/**
 * Points every trace of `cfg` at its file: the one already open for that path (an earlier
 * generation's), else a new one (created mode 0600 when missing, appended to), and starts the
 * writer thread if needed; with `check_only` it only checks that each file can be written
 * (`searchgate --check`), creating nothing. Settings of a file already open change only at
 * sg_trace_publish(). Main or reload thread. Returns 0, or -1 with the file and the reason in `err`
 * (nothing of `cfg` attached).
 */
int sg_trace_configure(struct st_sg_config_t *cfg, int check_only, char *err, size_t err_size);
/** `cfg` is the current configuration: its files take its rotation, keep and buffer settings. */
void sg_trace_publish(struct st_sg_config_t *cfg);
/** `cfg` is done with its files; a file no config uses any more is written out, closed and freed
 * by the writer. After the last request of `cfg` ended. */
void sg_trace_unconfigure(struct st_sg_config_t *cfg);
/** Writes what is buffered, closes the files and joins the writer. Main thread, after the loops stopped. */
void sg_trace_stop(void);
/**
 * Closes and reopens every trace file by its path (after logrotate moved it away), in the writer
 * thread, soon. Any thread, async: main.c calls it on SIGUSR1; a configuration reload calls it too.
 */
void sg_trace_reopen(void);

/* ---- the hot path ---- */

/** One distinct query of a traced request, as the caller hands it over (sg_trace_event_t.item). */
typedef struct st_sg_trace_item_t {
    const char *text;
    uint32_t len;
    sg_blob_t *blob; /* the answer, or NULL; the trace takes its own reference */
    int source;      /* SG_SRC_* */
} sg_trace_item_t;

/** A finished request, borrowed for the duration of sg_trace_request(). */
typedef struct st_sg_trace_event_t {
    const char *request_id;
    const char *route;    /* the route's name (the record copies it) */
    const char *fallback; /* the fallback route's name when it answered, or NULL (copied) */
    const char *client;   /* the client's id */
    int is_access;
    uint32_t topk;
    const char *params;   /* canonical search parameters, or NULL */
    uint32_t n;           /* queries of the request, in order */
    const uint32_t *slot; /* query i -> its distinct query (n entries) */
    uint32_t n_distinct;  /* distinct queries */
    int status;           /* HTTP status of the request */
    const char *error;    /* the error type when status != 200, or NULL */
    uint64_t start_us;    /* arrival, sg_now_us() clock */
    uint64_t latency_us;  /* arrival to answer */
    /** Describes distinct query `d` (0 <= d < n_distinct). */
    void (*item)(const void *ctx, uint32_t d, sg_trace_item_t *out);
    const void *ctx;
} sg_trace_event_t;

/**
 * The request ended: for each of `route_trace` and `client_trace` (either may be NULL) that samples
 * it, queues a record for its file (once when both name the same file). Never blocks: a full
 * buffer drops the record and counts its lines. Any loop thread.
 */
void sg_trace_request(const sg_trace_conf_t *route_trace, const sg_trace_conf_t *client_trace, const sg_trace_event_t *ev);

#endif
