/*
 * mcp_impl.h -- what mcp.c (transports, sessions) and mcp_tools.c (the tools) call of each other:
 * a JSON-RPC item and its answer, and the tools' entry points. Only those two files include it;
 * the server's hooks are in mcp.h.
 */
#ifndef SG_GATEWAY_MCP_IMPL_H
#define SG_GATEWAY_MCP_IMPL_H

#include <stdint.h>
#include <cJSON.h>
#include "runtime.h"
#include "clients.h"
#include "buf.h"

/* It does not include mcp.h (mcp.c includes both): the server's hooks and this inside are two
 * separate units. */
struct st_sg_gen_t;

enum {
    SG_MCP_PARSE_ERROR = -32700,
    SG_MCP_INVALID_REQUEST = -32600,
    SG_MCP_METHOD_NOT_FOUND = -32601,
    SG_MCP_INVALID_PARAMS = -32602,
    SG_MCP_INTERNAL_ERROR = -32603,
    SG_MCP_SESSION_NOT_FOUND = -32001
};

/** One JSON-RPC request of a POST (a batch has several); answered once, possibly later. */
typedef struct st_sg_mcp_item_t {
    char *id;         /* the request's id as JSON text; NULL for a notification */
    sg_buf_t out;     /* the whole JSON-RPC response object, once answered */
    uint64_t charged; /* of the response budget (respond.h): out's memory while it is held */
    int pending;      /* a tool call is in flight */
    int async;        /* answered through sg__mcp_item_done() (a tool call) */
    int invalid;      /* answered -32600: not a valid request */
    void *call;       /* mcp_tools.c's state while pending */
    struct st_sg_mcp_post_t *post;
} sg_mcp_item_t;

/** Writes {"jsonrpc":"2.0","id":ID,"result":RESULT} into item->out. */
void sg__mcp_item_result(sg_mcp_item_t *item, const char *result, size_t len);
/** Writes a JSON-RPC error response into item->out. */
void sg__mcp_item_error(sg_mcp_item_t *item, int code, const char *message);
/** A pending item got its answer (in item->out). Loop thread. */
void sg__mcp_item_done(sg_mcp_item_t *item);

struct st_sg_gen_t;
/** The tools/list result object of generation `g` (built with it). */
const char *sg__mcp_tools_list(struct st_sg_gen_t *g, size_t *len);
/**
 * tools/call: answers at once (item->out filled, returns 0) or starts the work and returns 1, then
 * calls sg__mcp_item_done() on the loop thread when the answer is in item->out.
 */
int sg__mcp_tools_call(sg_mcp_item_t *item, sg_loop_t *loop, struct st_sg_gen_t *g, sg_client_t *client, const cJSON *params);
/** The caller went away: the pending call ends without calling sg__mcp_item_done(). */
void sg__mcp_tools_cancel(sg_mcp_item_t *item);

#endif
