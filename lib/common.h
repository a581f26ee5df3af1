/*
 * common.h -- small utilities every layer shares: allocation that aborts on OOM, a growable byte
 * buffer (buf.h), the monotonic clock, logging and hashing.
 */
#ifndef SG_LIB_COMMON_H
#define SG_LIB_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SG_PRINTF_FMT(f, a) __attribute__((format(printf, f, a)))

/** malloc/calloc/realloc/strdup that abort the process when memory runs out (h2o/Redis style). */
void *sg_mem_alloc(size_t sz);
void *sg_mem_calloc(size_t n, size_t sz);
void *sg_mem_realloc(void *p, size_t sz);
char *sg_strdup(const char *s);
char *sg_strndup(const char *s, size_t n);

#include "buf.h"

/** Monotonic milliseconds (CLOCK_MONOTONIC) and microseconds. */
uint64_t sg_now_ms(void);
uint64_t sg_now_us(void);
/** Wall-clock seconds since the epoch, as a double. */
double sg_wall_time(void);

enum { SG_LL_ERROR = 0, SG_LL_WARN = 1, SG_LL_INFO = 2, SG_LL_DEBUG = 3 };
/** The level in force. A configuration reload changes it on another thread: read it with
 * sg_log_enabled() (or SG_LOG) and write it with sg_log_set_level(). */
extern int sg_log_level;
static inline int sg_log_enabled(int level)
{
    return level <= __atomic_load_n(&sg_log_level, __ATOMIC_RELAXED);
}
static inline void sg_log_set_level(int level)
{
    __atomic_store_n(&sg_log_level, level, __ATOMIC_RELAXED);
}
/** Logs one line to stderr: time, level, subsystem, message. Arguments are not evaluated when the level is off. */
#define SG_LOG(level, subsys, ...)                                                                                                 \
    do {                                                                                                                           \
        if (sg_log_enabled(level))                                                                                                 \
            sg__log((level), (subsys), __VA_ARGS__);                                                                               \
    } while (0)
void sg__log(int level, const char *subsys, const char *fmt, ...) SG_PRINTF_FMT(3, 4);
void sg__vlog(int level, const char *subsys, const char *fmt, va_list ap);
/** A line logged at most once per interval, whichever thread gets there (zero-initialised). */
typedef struct st_sg_log_every_t {
    uint64_t logged_ms, skipped; /* read and written with __atomic builtins */
} sg_log_every_t;
/** 1 when the caller should log its line now: the first time, then at most once per `interval_ms`
 * (`now` in sg_now_ms()), with `*skipped` set to the calls refused since the last line; else 0,
 * and the call is counted among those. Any thread. */
int sg_log_due(sg_log_every_t *e, uint64_t interval_ms, uint64_t now, uint64_t *skipped);

/** 64-bit hash of a byte string (wyhash-style mixing); `seed` selects an independent function. */
uint64_t sg_hash64(const void *p, size_t n, uint64_t seed);

/** Number of online CPUs (at least 1). */
int sg_num_cpus(void);

#endif
