/*
 * status.c -- the HTTP statuses the gateway answers (status.h): the metrics' index of each status
 * (sg_code_values) and the reason phrase of each (reasons[]), and a route's meters.
 */
#include "status.h"

#include "common.h"

#include <stddef.h>
#include <stdio.h>

const int sg_code_values[SG_NUM_CODES] = {200, 400, 401, 403, 404, 405, 408, 413, 422, 429, 500, 502, 503, 504, 0};

int sg_code_index(int status)
{
    for (int i = 0; i < SG_NUM_CODES - 1; ++i)
        if (sg_code_values[i] == status)
            return i;
    return SG_CODE_OTHER;
}

void sg_route_meters_register(sg_route_meters_t *m, const char *name)
{
    char l[256];
    for (int c = 0; c < SG_NUM_CODES; ++c) {
        if (c == SG_CODE_OTHER)
            snprintf(l, sizeof(l), "backend=\"%s\",code=\"other\"", name);
        else
            snprintf(l, sizeof(l), "backend=\"%s\",code=\"%d\"", name, sg_code_values[c]);
        m->requests[c] = sg_metrics_counter("searchgate_requests_total", "Retrieve/access requests by backend and HTTP status.", l);
        m->queries[c] =
            sg_metrics_counter("searchgate_queries_total", "Queries in retrieve/access requests by backend and HTTP status.", l);
    }
    snprintf(l, sizeof(l), "backend=\"%s\"", name);
    m->latency = sg_metrics_hist("searchgate_request_duration_seconds", "Retrieve/access request latency, arrival to response.", l);
    m->inflight = sg_metrics_gauge("searchgate_inflight_requests", "Retrieve/access requests being processed.", l);
}

uint64_t sg_route_meters_count(const sg_route_meters_t *m, int status, uint32_t n_queries, uint64_t start_us)
{
    int ci = sg_code_index(status);
    uint64_t lat = sg_now_us() - start_us;
    sg_counter_add(m->requests[ci], 1);
    sg_counter_add(m->queries[ci], n_queries);
    sg_hist_observe_us(m->latency, lat);
    return lat;
}

static const struct {
    int status;
    const char *reason;
} reasons[] = {{200, "OK"},
               {202, "Accepted"},
               {400, "Bad Request"},
               {401, "Unauthorized"},
               {403, "Forbidden"},
               {404, "Not Found"},
               {405, "Method Not Allowed"},
               {406, "Not Acceptable"},
               {408, "Request Timeout"},
               {413, "Payload Too Large"},
               {415, "Unsupported Media Type"},
               {422, "Unprocessable Entity"},
               {429, "Too Many Requests"},
               {500, "Internal Server Error"},
               {502, "Bad Gateway"},
               {503, "Service Unavailable"},
               {504, "Gateway Timeout"}};

const char *sg_http_reason(int status)
{
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); ++i)
        if (reasons[i].status == status)
            return reasons[i].reason;
    return "Error";
}
