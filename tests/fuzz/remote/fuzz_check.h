/*
 * fuzz_check.h -- invariants shared by the reply-parser fuzz harnesses, on fuzz_util.h's
 * FUZZ_CHECK (a failed check aborts, which libFuzzer and the CTest replay report as a crash).
 */
#ifndef SG_TESTS_REMOTE_FUZZ_CHECK_H
#define SG_TESTS_REMOTE_FUZZ_CHECK_H

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "../fuzz_util.h" /* FUZZ_CHECK */

/* The bytes are valid UTF-8, parse as one JSON object, and have no NUL inside. */
static inline cJSON *fuzz_check_doc(const char *json, size_t len)
{
    FUZZ_CHECK(json != NULL && strlen(json) == len);
    for (size_t i = 0; i < len;) {
        size_t l = sg_utf8_seq_len((const unsigned char *)json + i, len - i);
        FUZZ_CHECK(l != 0);
        i += l;
    }
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    FUZZ_CHECK(o != NULL && cJSON_IsObject(o));
    FUZZ_CHECK(end == json + len);
    return o;
}

#endif
