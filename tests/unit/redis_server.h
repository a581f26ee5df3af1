/*
 * redis_server.h -- a real redis-server for unit tests, on a free loopback port (as the
 * integration tests start theirs): no persistence, killed at the end. SG_REDIS_SERVER is the path
 * CMake found (tests skip when there is none), and a test can stop, freeze or restart it.
 */
#ifndef SG_TEST_REDIS_SERVER_H
#define SG_TEST_REDIS_SERVER_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <openssl/sha.h>

typedef struct {
    pid_t pid;
    uint16_t port;
} test_redis_t;

static inline int test_redis_available(void)
{
    return access(SG_REDIS_SERVER, X_OK) == 0;
}

/* A port nothing listens on now (bound once to port 0, then closed). */
static inline uint16_t test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        abort();
    close(fd);
    return ntohs(a.sin_port);
}

static inline int test_port_open(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* Starts redis-server on `port` (0: a free one) and waits until it accepts connections (5 s). */
static inline int test_redis_start(test_redis_t *r, uint16_t port)
{
    r->port = port != 0 ? port : test_free_port();
    char p[8];
    snprintf(p, sizeof(p), "%u", r->port);
    r->pid = fork();
    if (r->pid == 0) {
        execl(SG_REDIS_SERVER, "redis-server", "--port", p, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel",
              "warning", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500; ++i) {
        if (test_port_open(r->port))
            return 0;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static inline void test_redis_stop(test_redis_t *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGCONT);
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
}

/* The Redis key the result cache (cache/cache.c) stores a binary cache key under: the prefix,
 * "r1:", the hex SHA-256 of the key -- the format every replica reads. `out`: 70 bytes + the prefix. */
static inline void test_redis_cache_key(char *out, const char *prefix, const char *key, size_t len)
{
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)key, len, d);
    out += sprintf(out, "%sr1:", prefix);
    for (size_t i = 0; i < sizeof(d); ++i)
        out += sprintf(out, "%02x", d[i]);
}

/*
 * One command on a connection of its own, with a plain blocking socket: the tests' oracle of what
 * is in Redis, independent of the gateway's client. Returns the reply's type (':' integer, '$'
 * bulk string, '+' status, '-' error; 0 when the server could not be asked); `*num` is an
 * integer's value (a nil bulk string's: -1), `bulk` (when not NULL) receives a bulk string's
 * bytes (malloc'ed, NUL-terminated; NULL for nil) and `bulk_len` its length. Arrays are not read.
 */
static inline int test_redis_call(uint16_t port, int argc, const char **argv, long long *num, char **bulk, size_t *bulk_len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bulk != NULL)
        *bulk = NULL;
    *num = 0;
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    FILE *f = fdopen(fd, "r+");
    fprintf(f, "*%d\r\n", argc);
    for (int i = 0; i < argc; ++i)
        fprintf(f, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    fflush(f);
    char line[512];
    int type = 0;
    if (fgets(line, sizeof(line), f) != NULL) {
        type = line[0];
        *num = strtoll(line + 1, NULL, 10);
        if (type == '$' && *num >= 0) {
            char *b = malloc((size_t)*num + 3);
            size_t got = fread(b, 1, (size_t)*num + 2, f); /* the bytes and their CRLF */
            if (got != (size_t)*num + 2) {
                free(b);
                type = 0;
            } else {
                b[*num] = '\0';
                if (bulk_len != NULL)
                    *bulk_len = (size_t)*num;
                if (bulk != NULL)
                    *bulk = b;
                else
                    free(b);
            }
        }
    }
    fclose(f);
    return type;
}

#endif
