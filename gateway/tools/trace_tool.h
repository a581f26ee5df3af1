/*
 * trace_tool.h -- searchgate-trace (trace_main.c), the offline tool for query traces
 * (docs/traces.md): `summary` (trace_summary.c) and `replay` (trace_replay.c). Internal to the
 * tool: the gateway itself does not link these files.
 */
#ifndef SG_GATEWAY_TRACE_TOOL_H
#define SG_GATEWAY_TRACE_TOOL_H

#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>
#include "buf.h"

/** Called for each line of a trace that is a JSON object; `line` is borrowed. Returns 0 to go on. */
typedef int (*sg_tline_fn)(void *ctx, const cJSON *line);

/**
 * Reads the trace `path` ("-": stdin) line by line. Lines that are not JSON objects (a line cut by
 * a crash, garbage) are counted in `*malformed` and skipped. Returns 0, or -1 with a message on
 * stderr when the file cannot be read or `fn` stopped.
 */
int sg__tool_read(const char *path, sg_tline_fn fn, void *ctx, uint64_t *malformed);

/** The string member `key` of `o`, or NULL. */
const char *sg__tool_str(const cJSON *o, const char *key);
/** The number member `key` of `o`, or `def`. */
double sg__tool_num(const cJSON *o, const char *key, double def);
/** A result's id as the traces compare them: the JSON text of the "ids" entry (NULL for null). */
char *sg__tool_id_text(const cJSON *id);

int sg__tool_summary(int argc, char **argv);
int sg__tool_replay(int argc, char **argv);

#endif
