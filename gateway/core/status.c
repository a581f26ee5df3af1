/*
 * status.c -- the HTTP statuses the gateway answers (status.h): one table gives both the metrics'
 * index and the reason phrase.
 */
#include "status.h"

#include <stddef.h>

const int sg_code_values[SG_NUM_CODES] = {200, 400, 401, 403, 404, 405, 408, 413, 422, 429, 500, 502, 503, 504, 0};

int sg_code_index(int status)
{
    for (int i = 0; i < SG_NUM_CODES - 1; ++i)
        if (sg_code_values[i] == status)
            return i;
    return SG_CODE_OTHER;
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
