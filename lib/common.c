/*
 * common.c -- allocation, buffers, clocks, logging and hashing for the gateway.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int sg_log_level = SG_LL_INFO;

static void oom(size_t sz)
{
    fprintf(stderr, "searchgate: out of memory allocating %zu bytes\n", sz);
    abort();
}

void *sg_mem_alloc(size_t sz)
{
    void *p = malloc(sz != 0 ? sz : 1);
    if (p == NULL)
        oom(sz);
    return p;
}

void *sg_mem_calloc(size_t n, size_t sz)
{
    void *p = calloc(n != 0 ? n : 1, sz != 0 ? sz : 1);
    if (p == NULL)
        oom(n * sz);
    return p;
}

void *sg_mem_realloc(void *p, size_t sz)
{
    void *q = realloc(p, sz != 0 ? sz : 1);
    if (q == NULL)
        oom(sz);
    return q;
}

char *sg_strndup(const char *s, size_t n)
{
    char *d = sg_mem_alloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *sg_strdup(const char *s)
{
    return sg_strndup(s, strlen(s));
}

uint64_t sg_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t sg_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

double sg_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sg__vlog(int level, const char *subsys, const char *fmt, va_list ap)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s [%s] ", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                     names[level < 0   ? 0
                           : level > 3 ? 3
                                       : level],
                     subsys);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    size_t len = strlen(line);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    /* one write() per line so lines from several threads do not interleave */
    ssize_t wr = write(2, line, len);
    (void)wr;
}

void sg__log(int level, const char *subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sg__vlog(level, subsys, fmt, ap);
    va_end(ap);
}

static inline uint64_t mix(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

uint64_t sg_hash64(const void *data, size_t n, uint64_t seed)
{
    static const uint64_t s0 = 0xa0761d6478bd642full, s1 = 0xe7037ed1a0b428dbull, s2 = 0x8ebc6af09c88c6e3ull;
    const uint8_t *p = data;
    uint64_t h = seed ^ mix(seed ^ s0, s1) ^ n;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        h = mix(rd64(p + i) ^ s1, rd64(p + i + 8) ^ h);
    uint64_t a = 0, b = 0;
    size_t rest = n - i;
    if (rest >= 8) {
        a = rd64(p + i);
        if (rest > 8) {
            uint8_t tmp[8] = {0};
            memcpy(tmp, p + i + 8, rest - 8);
            b = rd64(tmp);
        }
    } else if (rest > 0) {
        uint8_t tmp[8] = {0};
        memcpy(tmp, p + i, rest);
        a = rd64(tmp);
    }
    h = mix(a ^ s1 ^ h, b ^ s2);
    return mix(h ^ s0, h ^ s2);
}

int sg_log_due(sg_log_every_t *e, uint64_t interval_ms, uint64_t now, uint64_t *skipped)
{
    uint64_t last = __atomic_load_n(&e->logged_ms, __ATOMIC_RELAXED);
    if ((last != 0 && now < last + interval_ms) ||
        !__atomic_compare_exchange_n(&e->logged_ms, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        __atomic_fetch_add(&e->skipped, 1, __ATOMIC_RELAXED);
        return 0;
    }
    *skipped = __atomic_exchange_n(&e->skipped, 0, __ATOMIC_RELAXED);
    return 1;
}

int sg_num_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}
