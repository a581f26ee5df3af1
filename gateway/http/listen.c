/*
 * listen.c -- listening sockets that the gateway's loops share and nobody else joins (listen.h).
 *
 * Linux lets any socket of the same user join a SO_REUSEPORT group, and connections are then
 * spread over every member, ours or not. The gateway sets SO_REUSEPORT so its loops share the
 * port; to keep other processes out it first binds the address once *without* SO_REUSEPORT (which
 * fails with EADDRINUSE while anything listens there), and after its own listeners are up it
 * reads /proc/net/tcp{,6}: a listening socket on the port that is not one of its own file
 * descriptors means another process joined in the meantime, and start-up fails.
 */
#include "listen.h"
#include "common.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_FOREIGN 16

int sg_listen_resolve(const char *host, uint16_t port, sg_listen_addr_t *out, char *err, size_t err_size)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->host, sizeof(out->host), "%s", host);
    out->port = port;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", port);
    int gai = getaddrinfo(host, ps, &hints, &res);
    if (gai != 0) {
        snprintf(err, err_size, "listen.host %s: %s", host, gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
        return -1;
    }
    memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
    out->len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
    if (ss->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
    else
        ((struct sockaddr_in *)ss)->sin_port = htons(port);
}

/* ---- who listens on a port: /proc/net/tcp{,6} and /proc/<pid>/fd ---- */

typedef struct st_naddr_t {
    unsigned char a[16]; /* IPv6, or IPv4-mapped */
    int v4;              /* an AF_INET socket (a wildcard one only covers IPv4) */
} naddr_t;

static int naddr_is_any(const naddr_t *n)
{
    static const unsigned char zero[16];
    static const unsigned char mapped_any[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0};
    return memcmp(n->a, zero, 16) == 0 || memcmp(n->a, mapped_any, 16) == 0;
}

static void naddr_of(const struct sockaddr_storage *ss, naddr_t *n)
{
    memset(n, 0, sizeof(*n));
    if (ss->ss_family == AF_INET6) {
        memcpy(n->a, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    } else {
        n->a[10] = n->a[11] = 0xff;
        memcpy(n->a + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
        n->v4 = 1;
    }
}

/* Would a listener on `b` take connections meant for `a`? Equal addresses, or a wildcard that
 * covers the other (an IPv4 wildcard covers IPv4 only; an IPv6 one is dual-stack by default). */
static int naddr_overlap(const naddr_t *a, const naddr_t *b)
{
    int a_any = naddr_is_any(a), b_any = naddr_is_any(b);
    if (!a_any && !b_any)
        return memcmp(a->a, b->a, 16) == 0;
    static const unsigned char prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const naddr_t *any = a_any ? a : b, *other = a_any ? b : a;
    if (any->v4 && !(other->v4 || memcmp(other->a, prefix, 12) == 0 || naddr_is_any(other)))
        return 0;
    return 1;
}

int sg_listen_addr_kind(const sg_listen_addr_t *a)
{
    naddr_t n;
    naddr_of(&a->ss, &n);
    static const unsigned char v6_loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (naddr_is_any(&n))
        return SG_LISTEN_WILDCARD;
    if (memcmp(n.a, v6_loopback, 16) == 0 || (memcmp(n.a, mapped, 12) == 0 && n.a[12] == 127))
        return SG_LISTEN_LOOPBACK;
    return SG_LISTEN_OTHER;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "0100007F:1F40" (IPv4: one host-order u32) or 32 hex digits (IPv6: four host-order u32s). */
static int parse_proc_addr(const char *s, int v6, naddr_t *n, uint16_t *port)
{
    memset(n, 0, sizeof(*n));
    size_t words = v6 ? 4 : 1;
    unsigned char raw[16];
    for (size_t w = 0; w < words; ++w) {
        uint32_t v = 0;
        for (int i = 0; i < 8; ++i) {
            int h = hexval((unsigned char)*s++);
            if (h < 0)
                return -1;
            v = v << 4 | (uint32_t)h;
        }
        memcpy(raw + 4 * w, &v, 4);
    }
    if (*s++ != ':')
        return -1;
    uint32_t p = 0;
    for (int i = 0; i < 4; ++i) {
        int h = hexval((unsigned char)*s++);
        if (h < 0)
            return -1;
        p = p << 4 | (uint32_t)h;
    }
    *port = (uint16_t)p;
    if (v6) {
        memcpy(n->a, raw, 16);
    } else {
        n->a[10] = n->a[11] = 0xff;
        memcpy(n->a + 12, raw, 4);
        n->v4 = 1;
    }
    return 0;
}

/* Inodes of the sockets listening on `port` over an address overlapping `want`, other than
 * `mine`. Returns how many were found (at most `cap` are stored), or -1 when /proc is unreadable. */
static int foreign_listeners(const naddr_t *want, uint16_t port, const ino_t *mine, size_t n_mine, ino_t *out, size_t cap)
{
    static const char *const files[2] = {"/proc/net/tcp", "/proc/net/tcp6"};
    int found = 0, readable = 0;
    for (int f = 0; f < 2; ++f) {
        FILE *fp = fopen(files[f], "r");
        if (fp == NULL)
            continue;
        readable = 1;
        char line[512];
        if (fgets(line, sizeof(line), fp) == NULL) { /* the header */
            fclose(fp);
            continue;
        }
        while (fgets(line, sizeof(line), fp) != NULL) {
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode ... */
            char local[64], st[8];
            unsigned long long inode;
            if (sscanf(line, " %*[^:]: %63s %*s %7s %*s %*s %*s %*s %*s %llu", local, st, &inode) != 3)
                continue;
            if (strcmp(st, "0A") != 0) /* TCP_LISTEN */
                continue;
            naddr_t n;
            uint16_t p;
            if (parse_proc_addr(local, f == 1, &n, &p) != 0 || p != port || !naddr_overlap(want, &n))
                continue;
            int ours = 0;
            for (size_t i = 0; i < n_mine; ++i)
                ours |= mine[i] == (ino_t)inode;
            if (ours || inode == 0)
                continue;
            if ((size_t)found < cap)
                out[found] = (ino_t)inode;
            ++found;
        }
        fclose(fp);
    }
    return readable ? found : -1;
}

/* "pid 123 (cmd args)" of each process holding one of the inodes; returns how many were named. */
static size_t name_holders(const ino_t *inodes, size_t n, char *out, size_t out_size)
{
    size_t named = 0, len = 0;
    out[0] = '\0';
    DIR *proc = opendir("/proc");
    if (proc == NULL)
        return 0;
    struct dirent *de;
    while ((de = readdir(proc)) != NULL && named < 4) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end != '\0' || pid <= 0)
            continue;
        char path[64];
        snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
        DIR *fds = opendir(path);
        if (fds == NULL) /* another user's process, or gone */
            continue;
        int holds = 0;
        struct dirent *fe;
        while (!holds && (fe = readdir(fds)) != NULL) {
            char lp[320], target[64];
            snprintf(lp, sizeof(lp), "/proc/%ld/fd/%s", pid, fe->d_name);
            ssize_t tl = readlink(lp, target, sizeof(target) - 1);
            if (tl <= 0)
                continue;
            target[tl] = '\0';
            unsigned long long ino;
            if (sscanf(target, "socket:[%llu]", &ino) != 1)
                continue;
            for (size_t i = 0; i < n; ++i)
                holds |= inodes[i] == (ino_t)ino;
        }
        closedir(fds);
        if (!holds)
            continue;
        char cmd[160] = "";
        snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t r = read(fd, cmd, sizeof(cmd) - 1);
            close(fd);
            if (r > 0) {
                cmd[r] = '\0';
                while (r > 0 && cmd[r - 1] == '\0')
                    --r;
                for (ssize_t i = 0; i < r; ++i)
                    if (cmd[i] == '\0' || !isprint((unsigned char)cmd[i]))
                        cmd[i] = ' ';
                cmd[r] = '\0';
            }
        }
        int w = snprintf(out + len, out_size - len, "%spid %ld (%s)", named != 0 ? ", " : "", pid, cmd[0] != '\0' ? cmd : "?");
        if (w > 0)
            len = (size_t)w < out_size - len ? len + (size_t)w : out_size - 1;
        ++named;
    }
    closedir(proc);
    return named;
}

static size_t fd_inodes(const int *fds, size_t n, ino_t *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
        struct stat st;
        if (fds[i] >= 0 && fstat(fds[i], &st) == 0)
            out[k++] = st.st_ino;
    }
    return k;
}

size_t sg_listen_holders(const sg_listen_addr_t *a, uint16_t port, const int *fds, size_t n_fds, char *out, size_t out_size)
{
    out[0] = '\0';
    naddr_t want;
    naddr_of(&a->ss, &want);
    ino_t *mine = sg_mem_calloc(n_fds + 1, sizeof(*mine));
    size_t n_mine = fd_inodes(fds, n_fds, mine);
    ino_t foreign[MAX_FOREIGN];
    int n = foreign_listeners(&want, port, mine, n_mine, foreign, MAX_FOREIGN);
    free(mine);
    if (n <= 0)
        return 0;
    if (name_holders(foreign, (size_t)n < MAX_FOREIGN ? (size_t)n : MAX_FOREIGN, out, out_size) == 0)
        snprintf(out, out_size, "a process this user cannot inspect");
    return (size_t)n;
}

static void in_use_message(const sg_listen_addr_t *a, uint16_t port, const int *fds, size_t n_fds, char *err, size_t err_size)
{
    char who[512];
    if (sg_listen_holders(a, port, fds, n_fds, who, sizeof(who)) > 0)
        snprintf(err, err_size, "cannot listen on %s:%u: port %u is already in use by %s", a->host, port, port, who);
    else
        snprintf(err, err_size, "cannot listen on %s:%u: port %u is already in use", a->host, port, port);
}

int sg_listen_probe(const sg_listen_addr_t *a, char *err, size_t err_size)
{
    if (a->port == 0)
        return 0;
    int fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, err_size, "cannot listen on %s:%u: %s", a->host, a->port, strerror(errno));
        return -1;
    }
    int on = 1;
    /* SO_REUSEADDR tolerates our own TIME_WAIT connections of a previous run; without
     * SO_REUSEPORT the bind fails while any socket listens on the address */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    int rc = bind(fd, (const struct sockaddr *)&a->ss, a->len);
    int e = errno;
    close(fd);
    if (rc == 0)
        return 0;
    if (e == EADDRINUSE)
        in_use_message(a, a->port, NULL, 0, err, err_size);
    else
        snprintf(err, err_size, "cannot listen on %s:%u: %s", a->host, a->port, strerror(e));
    return -1;
}

int sg_listen_open(const sg_listen_addr_t *a, uint16_t port, uint16_t *bound, char *err, size_t err_size)
{
    struct sockaddr_storage ss = a->ss;
    set_port(&ss, port);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int on = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) != 0 || bind(fd, (struct sockaddr *)&ss, a->len) != 0 ||
        listen(fd, 4096) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        if (e == EADDRINUSE)
            in_use_message(a, port, NULL, 0, err, err_size);
        else
            snprintf(err, err_size, "cannot listen on %s:%u: %s", a->host, port, strerror(e));
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    struct sockaddr_storage got;
    socklen_t gl = sizeof(got);
    getsockname(fd, (struct sockaddr *)&got, &gl);
    *bound = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port : ((struct sockaddr_in *)&got)->sin_port);
    return fd;
}

int sg_listen_check_exclusive(const sg_listen_addr_t *a, uint16_t port, const int *fds, size_t n_fds, char *err, size_t err_size)
{
    char who[512];
    if (sg_listen_holders(a, port, fds, n_fds, who, sizeof(who)) == 0)
        return 0;
    snprintf(err, err_size, "cannot listen on %s:%u: port %u is already in use by %s", a->host, port, port, who);
    return -1;
}

int sg_listen_same_socket(const sg_listen_addr_t *a, const sg_listen_addr_t *b)
{
    if (a->port == 0 || a->port != b->port)
        return 0;
    naddr_t na, nb;
    naddr_of(&a->ss, &na);
    naddr_of(&b->ss, &nb);
    return naddr_overlap(&na, &nb);
}

/* ---- Unix domain sockets ---- */

static void dir_of(const char *path, char *dir, size_t size)
{
    snprintf(dir, size, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, size, ".");
    else if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
}

/* The inodes of the sockets listening on `path`, from /proc/net/unix ("Num RefCount Protocol
 * Flags Type St Inode Path"; a listening socket has __SO_ACCEPTCON, 0x10000, in its flags). */
static size_t unix_listeners(const char *path, ino_t *out, size_t cap)
{
    FILE *fp = fopen("/proc/net/unix", "r");
    if (fp == NULL)
        return 0;
    size_t n = 0;
    char line[4200];
    while (fgets(line, sizeof(line), fp) != NULL && n < cap) {
        unsigned long flags;
        unsigned long long inode;
        int off = 0;
        if (sscanf(line, "%*s %*s %*s %lx %*s %*s %llu %n", &flags, &inode, &off) != 2 || off == 0 || !(flags & 0x10000))
            continue;
        char *p = line + off;
        p[strcspn(p, "\n")] = '\0';
        if (strcmp(p, path) == 0)
            out[n++] = (ino_t)inode;
    }
    fclose(fp);
    return n;
}

static void unix_in_use(const char *path, char *err, size_t err_size)
{
    ino_t inodes[MAX_FOREIGN];
    char who[512];
    size_t n = unix_listeners(path, inodes, MAX_FOREIGN);
    if (n > 0 && name_holders(inodes, n, who, sizeof(who)) > 0)
        snprintf(err, err_size, "cannot listen on unix:%s: the socket is in use by %s", path, who);
    else
        snprintf(err, err_size, "cannot listen on unix:%s: another process accepts connections on it", path);
}

static int unix_addr(const char *path, struct sockaddr_un *sun)
{
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(sun->sun_path))
        return -1;
    memcpy(sun->sun_path, path, n);
    return 0;
}

/* 1: something accepts on `path`; 0: nothing (no file, or a stale socket file); -1: `path` is in the way. */
static int unix_state(const char *path, char *err, size_t err_size)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT) {
            snprintf(err, err_size, "cannot listen on unix:%s: %s", path, strerror(errno));
            return -1;
        }
        char dir[PATH_MAX];
        dir_of(path, dir, sizeof(dir));
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(err, err_size, "cannot listen on unix:%s: the directory %s does not exist", path, dir);
            return -1;
        }
        return 0;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, err_size, "cannot listen on unix:%s: the path exists and is not a socket", path);
        return -1;
    }
    struct sockaddr_un sun;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || unix_addr(path, &sun) != 0) {
        snprintf(err, err_size, "cannot listen on unix:%s: %s", path, strerror(fd < 0 ? errno : ENAMETOOLONG));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
    int e = errno;
    close(fd);
    if (rc == 0 || e == EAGAIN) { /* EAGAIN: accepting, with a full backlog */
        unix_in_use(path, err, err_size);
        return 1;
    }
    if (e == ECONNREFUSED)
        return 0;
    snprintf(err, err_size, "cannot listen on unix:%s: %s", path, strerror(e));
    return -1;
}

int sg_listen_unix_probe(const char *path, char *err, size_t err_size)
{
    return unix_state(path, err, err_size) == 0 ? 0 : -1;
}

int sg_listen_unix_open(const char *path, uint32_t mode, dev_t *dev, ino_t *ino, char *err, size_t err_size)
{
    if (unix_state(path, err, err_size) != 0)
        return -1;
    struct sockaddr_un sun;
    unix_addr(path, &sun);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) /* a stale socket file: nobody accepts on it (unix_state) */
        unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    /* no connection is accepted before listen(), so the file's permissions are right before anyone can connect */
    if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0 || chmod(path, (mode_t)mode) != 0 || stat(path, &st) != 0 ||
        listen(fd, 4096) != 0) {
        int e = errno;
        if (e == EADDRINUSE)
            unix_in_use(path, err, err_size);
        else
            snprintf(err, err_size, "cannot listen on unix:%s: %s", path, strerror(e));
        if (fd >= 0) {
            if (e != EADDRINUSE && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
                unlink(path);
            close(fd);
        }
        return -1;
    }
    *dev = st.st_dev;
    *ino = st.st_ino;
    return fd;
}

void sg_listen_remove_if_ours(const char *path, dev_t dev, ino_t ino)
{
    struct stat st;
    if (path != NULL && lstat(path, &st) == 0 && st.st_dev == dev && st.st_ino == ino)
        unlink(path);
}

/* ---- address files ---- */

void sg_listen_address_text(const sg_listen_addr_t *a, const char *host, uint16_t port, char *out, size_t out_size)
{
    naddr_t n;
    naddr_of(&a->ss, &n);
    char name[256];
    if (naddr_is_any(&n) && gethostname(name, sizeof(name)) == 0) {
        name[sizeof(name) - 1] = '\0';
        host = name;
    }
    if (strchr(host, ':') != NULL) /* an IPv6 address */
        snprintf(out, out_size, "[%s]:%u", host, port);
    else
        snprintf(out, out_size, "%s:%u", host, port);
}

int sg_listen_address_file_probe(const char *path, char *err, size_t err_size)
{
    char dir[PATH_MAX];
    dir_of(path, dir, sizeof(dir));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, err_size, "address file %s: the directory %s does not exist", path, dir);
        return -1;
    }
    if (access(dir, W_OK) != 0) {
        snprintf(err, err_size, "address file %s: cannot write in %s: %s", path, dir, strerror(errno));
        return -1;
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, err_size, "address file %s: is a directory", path);
        return -1;
    }
    return 0;
}

int sg_listen_write_address_file(const char *path, const char *text, dev_t *dev, ino_t *ino, char *err, size_t err_size)
{
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= sizeof(tmp)) {
        snprintf(err, err_size, "address file %s: path too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, err_size, "address file %s: cannot create %s: %s", path, tmp, strerror(errno));
        return -1;
    }
    /* no newline: ASearcher reads the lines of its address files as they are (readlines()) */
    char line[320];
    int n = snprintf(line, sizeof(line), "%s", text);
    struct stat st;
    int ok = n > 0 && (size_t)n < sizeof(line) && write(fd, line, (size_t)n) == (ssize_t)n && fsync(fd) == 0;
    int e = errno;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0 || stat(path, &st) != 0) {
        e = ok ? errno : e;
        unlink(tmp);
        snprintf(err, err_size, "address file %s: cannot write it: %s", path, strerror(e));
        return -1;
    }
    *dev = st.st_dev;
    *ino = st.st_ino;
    return 0;
}

/* ---- the server's listeners ---- */

int sg_listen_check(const sg_config_t *cfg, char *err, size_t err_size)
{
    sg_listen_addr_t *addrs = sg_mem_calloc(cfg->n_listen, sizeof(*addrs));
    int rc = 0;
    for (size_t i = 0; i < cfg->n_listen && rc == 0; ++i) {
        const sg_listen_conf_t *l = &cfg->listen[i];
        if (l->unix_path != NULL) {
            rc = sg_listen_unix_probe(l->unix_path, err, err_size);
            continue;
        }
        if (sg_listen_resolve(l->host, l->port, &addrs[i], err, err_size) != 0 || sg_listen_probe(&addrs[i], err, err_size) != 0 ||
            (l->address_file != NULL && sg_listen_address_file_probe(l->address_file, err, err_size) != 0)) {
            rc = -1;
            continue;
        }
        for (size_t j = 0; j < i && rc == 0; ++j)
            if (cfg->listen[j].unix_path == NULL && sg_listen_same_socket(&addrs[j], &addrs[i])) {
                snprintf(err, err_size, "%s (%s:%u) takes the connections of %s (%s:%u): give it another port or address", l->where,
                         l->host, l->port, cfg->listen[j].where, cfg->listen[j].host, cfg->listen[j].port);
                rc = -1;
            }
    }
    free(addrs);
    return rc;
}

static void close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Listener `li` of a TCP entry: one socket per loop on the port the first bind got. */
static int open_tcp(sg_listener_t *li, int n_loops, int *fds, size_t n_before, char *err, size_t err_size)
{
    const sg_listen_conf_t *l = li->conf;
    sg_listen_addr_t addr;
    if (sg_listen_resolve(l->host, l->port, &addr, err, err_size) != 0 || sg_listen_probe(&addr, err, err_size) != 0)
        return -1;
    int *mine = fds + n_before;
    uint16_t port = l->port;
    for (int j = 0; j < n_loops; ++j) {
        uint16_t bound = 0;
        if ((mine[j] = sg_listen_open(&addr, port, &bound, err, err_size)) < 0)
            return -1;
        port = bound; /* port 0: every loop binds the port the first one got */
    }
    /* another process may have joined the port between the probe and our binds */
    if (sg_listen_check_exclusive(&addr, port, fds, n_before + (size_t)n_loops, err, err_size) != 0)
        return -1;
    li->port = port;
    li->kind = sg_listen_addr_kind(&addr);
    int v6 = strchr(l->host, ':') != NULL;
    snprintf(li->url, sizeof(li->url), "http://%s%s%s:%u", v6 ? "[" : "", l->host, v6 ? "]" : "", port);
    sg_listen_address_text(&addr, l->host, port, li->address, sizeof(li->address));
    return 0;
}

/* A Unix domain socket: one socket, a dup() of it per loop (each loop's h2o socket owns its descriptor). */
static int open_unix(sg_listener_t *li, int n_loops, int *fds, char *err, size_t err_size)
{
    const sg_listen_conf_t *l = li->conf;
    if ((fds[0] = sg_listen_unix_open(l->unix_path, l->unix_mode, &li->dev, &li->ino, err, err_size)) < 0)
        return -1;
    for (int j = 1; j < n_loops; ++j)
        if ((fds[j] = fcntl(fds[0], F_DUPFD_CLOEXEC, 0)) < 0) {
            snprintf(err, err_size, "cannot listen on unix:%s: %s", l->unix_path, strerror(errno));
            return -1;
        }
    snprintf(li->url, sizeof(li->url), "unix:%s", l->unix_path);
    li->kind = SG_LISTEN_UNIX;
    return 0;
}

int sg_listen_open_all(const sg_config_t *cfg, int n_loops, sg_listener_t **out, int **fds_out, char *err, size_t err_size)
{
    size_t n = cfg->n_listen, total = n * (size_t)n_loops;
    sg_listener_t *ls = sg_mem_calloc(n, sizeof(*ls));
    int *fds = sg_mem_alloc(total * sizeof(*fds));
    for (size_t k = 0; k < total; ++k)
        fds[k] = -1;
    size_t i = 0;
    for (; i < n; ++i) {
        ls[i].conf = &cfg->listen[i];
        int *mine = fds + i * (size_t)n_loops;
        int rc = ls[i].conf->unix_path != NULL ? open_unix(&ls[i], n_loops, mine, err, err_size)
                                               : open_tcp(&ls[i], n_loops, fds, i * (size_t)n_loops, err, err_size);
        if (rc != 0)
            break;
    }
    if (i < n) {
        close_fds(fds, total);
        sg_listen_dispose(ls, i + 1);
        free(fds);
        return -1;
    }
    *out = ls;
    *fds_out = fds;
    return (int)n;
}

int sg_listen_announce(sg_listener_t *ls, size_t n, char *err, size_t err_size)
{
    for (size_t i = 0; i < n; ++i) {
        const char *path = ls[i].conf->address_file;
        if (path == NULL)
            continue;
        if (sg_listen_write_address_file(path, ls[i].address, &ls[i].addr_dev, &ls[i].addr_ino, err, err_size) != 0)
            return -1;
        ls[i].announced = 1;
    }
    return 0;
}

void sg_listen_retract(sg_listener_t *ls, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (ls[i].announced) {
            sg_listen_remove_if_ours(ls[i].conf->address_file, ls[i].addr_dev, ls[i].addr_ino);
            ls[i].announced = 0;
        }
}

void sg_listen_dispose(sg_listener_t *ls, size_t n)
{
    if (ls == NULL)
        return;
    sg_listen_retract(ls, n);
    for (size_t i = 0; i < n; ++i)
        if (ls[i].conf != NULL && ls[i].conf->unix_path != NULL && ls[i].ino != 0)
            sg_listen_remove_if_ours(ls[i].conf->unix_path, ls[i].dev, ls[i].ino);
    free(ls);
}
