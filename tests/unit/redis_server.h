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

#endif
