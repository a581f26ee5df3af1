/*
 * trace_main.c -- searchgate-trace: what a researcher does with the query traces the gateway
 * writes (docs/traces.md).
 *
 *   searchgate-trace summary [--top N] [--json] TRACE [TRACE...]
 *   searchgate-trace replay TRACE --url URL [--route R] [--rate N/s] [--batch recorded|single]
 *                           [--params recorded|none] [--concurrency N] [--timeout S] --out FILE
 *
 * This file has the command line; what both commands share (reading a trace) is trace_read.c, the
 * commands are trace_summary.c and trace_replay.c.
 */
#include "trace_tool.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *fp)
{
    fprintf(fp, "usage: searchgate-trace summary [--top N] [--json] TRACE [TRACE...]\n"
                "       searchgate-trace replay TRACE --url URL [--route R] [--rate N/s] [--batch recorded|single]\n"
                "                               [--params recorded|none] [--concurrency N] [--timeout S] --out FILE\n"
                "\n"
                "summary  per client and route: queries, distinct queries, repeat rate, zero hits, empty observations,\n"
                "         errors, latency percentiles, cache outcomes, the most frequent queries. With several traces,\n"
                "         each is compared with the first: identical top-k, recall@k, queries whose top-1 changed.\n"
                "replay   sends a trace's /retrieve queries to URL (any Search-R1 /retrieve endpoint) as recorded\n"
                "         (same batches, same topk and search parameters) or one per request, and writes what came\n"
                "         back as a new trace.\n"
                "A TRACE of \"-\" is read from standard input (cat rotated pieces into it). See docs/traces.md.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "summary") == 0)
        return sg__tool_summary(argc - 1, argv + 1);
    if (strcmp(argv[1], "replay") == 0)
        return sg__tool_replay(argc - 1, argv + 1);
    fprintf(stderr, "searchgate-trace: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
