/*
 * mcp.h -- the Model Context Protocol endpoint (docs/mcp.md): JSON-RPC 2.0 over the streamable
 * HTTP transport (POST/DELETE /mcp, protocol versions 2025-06-18 and 2025-03-26) and over the older
 * HTTP+SSE pair (GET /sse + POST /messages, 2024-11-05), serving one `search` tool per route and
 * an `access` tool per route with a page store.
 *
 * mcp.c owns the transports, the sessions and the SSE streams; mcp_tools.c owns the tools: their
 * list, their arguments, the call through the same query pipeline /retrieve uses (so rate limits,
 * fairness, deadlines, cache and metrics are shared), and the formatting of the result.
 * What the two files call of each other is in mcp_impl.h.
 * Everything runs on loop threads; the session table is the only state shared between loops
 * (guarded by its mutex), and replies for an SSE stream owned by another loop travel there as
 * h2o_multithread messages.
 */
#ifndef SG_GATEWAY_MCP_H
#define SG_GATEWAY_MCP_H

#include <cJSON.h>
#include "runtime.h"
#include "clients.h"

/* ---- hooks called by the server (main.c, server.c) ---- */

/** Builds the session table and registers the metrics (when mcp.enabled). Main thread, start-up. */
void sg_mcp_init(sg_server_t *s);
void sg_mcp_dispose(void);
struct st_sg_gen_t;
/** The tools of one configuration generation (mcp_tools.c): one per route, their tools/list. */
typedef struct st_sg_mcp_tools_t sg_mcp_tools_t;
/** Builds `g`'s tools (its routes and fusion routes are set up). Main or reload thread. */
sg_mcp_tools_t *sg_mcp_tools_build(const struct st_sg_gen_t *g);
void sg_mcp_tools_free(sg_mcp_tools_t *t);
/** On the loop thread, at start-up: registers the loop's receiver for cross-loop SSE replies. */
void sg_mcp_init_loop(sg_loop_t *loop);
/** On the loop thread, when shutdown begins: ends the loop's SSE streams cleanly. */
void sg_mcp_stop_loop(sg_loop_t *loop);
/** On the loop thread, before its context is disposed. */
void sg_mcp_dispose_loop(sg_loop_t *loop);
/** The handlers of the three paths (server.c registers each on its own path when mcp.enabled):
 * /mcp (streamable HTTP: POST, DELETE), /sse (the legacy stream: GET) and /messages (its POSTs);
 * another method gets a 405. Each returns 0 without answering when MCP is off, else 1. */
int sg_mcp_serve_mcp(sg_loop_t *loop, h2o_req_t *req);
int sg_mcp_serve_sse(sg_loop_t *loop, h2o_req_t *req);
int sg_mcp_serve_messages(sg_loop_t *loop, h2o_req_t *req);

/* ---- the protocol's pure pieces (no loop, no session; unit-tested) ---- */

/**
 * Appends the Search-R1 observation of one query's hits -- `Doc 1(Title: T) TEXT\n` per document,
 * T the first line of the document's `contents` and TEXT the other lines -- given the hits as a
 * JSON array of `{"document": DOC, "score": S}` or of DOCs. Returns -1 when `hits` is not an array.
 */
int sg_mcp_format_search_r1(sg_buf_t *out, const cJSON *hits);

/**
 * Appends one query's hits as `{"query": Q, "results": [{"title", "url", "content", "score"}]}`: the
 * shape of web-search MCP servers that verl's MCPSearchTool reads with regular expressions (it
 * turns ' into " and takes "results" up to the first ]), so ' and ] inside strings are written as
 * \u0027 and \u005d. Returns -1 when `hits` is not an array.
 */
int sg_mcp_format_results_json(sg_buf_t *out, const char *query, const cJSON *hits);

/**
 * Picks the reply format from an Accept header: 1 JSON, 2 SSE, 0 neither is acceptable. A missing
 * header (NULL) means JSON. Media ranges with q-values are honoured; on a tie JSON wins.
 */
int sg_mcp_accept(const char *accept, size_t len);
/** The protocol version answered to an initialize asking for `requested`: itself when supported, else the newest. */
const char *sg_mcp_negotiate(const char *requested);
/** Whether `v` (length `len`) is a protocol version this server speaks. */
int sg_mcp_version_supported(const char *v, size_t len);

#endif
