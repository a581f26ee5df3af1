/*
 * http.c -- the outbound HTTP engine of the remote backends: one thread per engine driving a
 * libcurl multi handle with curl_multi_poll(), fed through a mutex-protected inbox and woken
 * with curl_multi_wakeup(). See http.h for the contract.
 *
 * A transfer lives in exactly one list at a time: the inbox (submitted, not yet seen by the
 * engine), `delayed` (waiting for its not_before time, sorted), `ready` (due, started in the
 * same pass) or `running` (added to the multi handle). Only the inbox is shared with other
 * threads; the other lists belong to the engine thread. The engine admits everything it is
 * given: how many requests may run or start per second is the gateway's decision (sg_limits).
 */
#include "http.h"

#include <curl/curl.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- small helpers ---- */

static void *xmalloc(size_t n)
{
    void *p = malloc(n != 0 ? n : 1);
    if (p == NULL)
        abort();
    return p;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s);
    char *d = xmalloc(n + 1);
    memcpy(d, s, n + 1);
    return d;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void sg_http_excerpt(const char *body, size_t len, const char *secret, char *out, size_t out_size, size_t max)
{
    if (out_size == 0)
        return;
    if (max > out_size - 1)
        max = out_size - 1;
    /* 1. printable text: control characters become single spaces, invalid UTF-8 is dropped */
    char *clean = xmalloc(len + 1);
    size_t c = 0, i = 0;
    while (i < len && isspace((unsigned char)body[i]))
        ++i;
    while (i < len) {
        unsigned char ch = (unsigned char)body[i];
        if (ch < 0x20 || ch == 0x7f) {
            if (c != 0 && clean[c - 1] != ' ')
                clean[c++] = ' ';
            ++i;
            continue;
        }
        size_t l = sg_utf8_seq_len((const unsigned char *)body + i, len - i);
        if (l == 0) {
            ++i;
            continue;
        }
        memcpy(clean + c, body + i, l);
        c += l;
        i += l;
    }
    /* 2. mask the secret in the cleaned text (dropping bytes could have joined its pieces) */
    size_t slen = secret != NULL ? strlen(secret) : 0;
    size_t o = 0;
    for (i = 0; i < c && o < max;) {
        if (slen != 0 && c - i >= slen && memcmp(clean + i, secret, slen) == 0) {
            size_t m = max - o < 3 ? max - o : 3;
            memcpy(out + o, "***", m);
            o += m;
            i += slen;
            continue;
        }
        size_t l = sg_utf8_seq_len((const unsigned char *)clean + i, c - i);
        if (l == 0 || o + l > max)
            break;
        memcpy(out + o, clean + i, l);
        o += l;
        i += l;
    }
    free(clean);
    while (o > 0 && out[o - 1] == ' ')
        --o;
    out[o] = '\0';
}

char *sg_http_trim_url(const char *url)
{
    char *d = xstrdup(url);
    size_t n = strlen(d);
    while (n > 0 && d[n - 1] == '/')
        d[--n] = '\0';
    return d;
}

void sg_http_error_excerpt(const cJSON *v, const char *body, size_t len, const char *secret, size_t max, char *out, size_t out_size)
{
    if (cJSON_IsString(v) && v->valuestring != NULL && v->valuestring[0] != '\0')
        sg_http_excerpt(v->valuestring, strlen(v->valuestring), secret, out, out_size, max);
    else
        sg_http_excerpt(body, len, secret, out, out_size, max);
    if (out_size > 0 && out[0] == '\0')
        snprintf(out, out_size, "(empty body)");
}

/* ---- DOC lists ---- */

size_t sg_http_docs_reserve(sg_http_docs_t *l, size_t items, size_t topk)
{
    size_t n = items < topk ? items : topk;
    l->docs = calloc(n != 0 ? n : 1, sizeof(*l->docs));
    if (l->docs == NULL)
        abort();
    l->n = 0;
    return n;
}

void sg_http_docs_push(sg_http_docs_t *l, const sg_buf_t *b, double score)
{
    sg_http_doc_t *d = &l->docs[l->n++];
    d->json = xmalloc(b->len + 1);
    memcpy(d->json, b->base, b->len + 1);
    d->len = b->len;
    d->score = score;
}

void sg_http_docs_free(sg_http_docs_t *lists, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < lists[i].n; ++k)
            free(lists[i].docs[k].json);
        free(lists[i].docs);
        lists[i].docs = NULL;
        lists[i].n = 0;
    }
}

cJSON *sg_http_parse_result(const char *body, size_t len, size_t n, const char *what, const cJSON **result, char *err,
                            size_t err_size)
{
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (root == NULL) {
        snprintf(err, err_size, "malformed JSON in the reply");
        return NULL;
    }
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "result");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(r)) {
        snprintf(err, err_size, "the reply has no \"result\" array");
        cJSON_Delete(root);
        return NULL;
    }
    if ((size_t)cJSON_GetArraySize(r) != n) {
        snprintf(err, err_size, "the reply has %d %s for %zu queries", cJSON_GetArraySize(r), what, n);
        cJSON_Delete(root);
        return NULL;
    }
    *result = r;
    return root;
}

const char *sg_http_err_name(sg_http_err e)
{
    switch (e) {
    case SG_HTTP_OK:
        return "ok";
    case SG_HTTP_ECONNECT:
        return "connect";
    case SG_HTTP_ETIMEDOUT:
        return "timeout";
    case SG_HTTP_ETOOBIG:
        return "too_big";
    case SG_HTTP_ETLS:
        return "tls";
    case SG_HTTP_EPROTO:
        return "protocol";
    case SG_HTTP_ECANCELED:
        return "canceled";
    case SG_HTTP_EINTERNAL:
        return "internal";
    }
    return "internal";
}

sg_status sg_http_err_status(sg_http_err e)
{
    switch (e) {
    case SG_HTTP_OK:
        return SG_OK;
    case SG_HTTP_ECONNECT:
    case SG_HTTP_ETLS:
        return SG_EUNAVAIL;
    case SG_HTTP_ETIMEDOUT:
        return SG_ETIMEDOUT;
    case SG_HTTP_ETOOBIG:
    case SG_HTTP_EPROTO:
        return SG_EUPSTREAM;
    case SG_HTTP_ECANCELED:
        return SG_ECANCELED;
    case SG_HTTP_EINTERNAL:
        return SG_EINTERNAL;
    }
    return SG_EINTERNAL;
}

/* ---- config ---- */

int sg_http_conf_check(sg_cfg_t *c, const cJSON *obj, sg_http_conf_t *conf)
{
    if (conf->proxy != NULL && strstr(conf->proxy, "://") == NULL)
        return sg_cfg_fail(c, "proxy", cJSON_GetObjectItemCaseSensitive(obj, "proxy"),
                           "expected a proxy URL such as \"http://host:3128\"");
    if (sg_cfg_double(c, obj, "burst", 1, 1e6, conf->qps > 1 ? conf->qps : 1, &conf->burst) != 0)
        return -1;
    if (conf->ca_file != NULL) {
        FILE *f = fopen(conf->ca_file, "r");
        if (f == NULL)
            return sg_cfg_fail(c, "ca_file", cJSON_GetObjectItemCaseSensitive(obj, "ca_file"), "cannot open %s", conf->ca_file);
        fclose(f);
    }
    return 0;
}

void sg_http_conf_free(sg_http_conf_t *conf)
{
    free(conf->ca_file);
    free(conf->proxy);
    conf->ca_file = conf->proxy = NULL;
}

const char *const sg_http_on_cancel_names[] = {"drain", "close", NULL};

/* ---- engine ---- */

enum { IN_NONE, IN_INBOX, IN_DELAYED, IN_READY, IN_RUNNING };

typedef struct st_xfer_t xfer_t;
struct st_xfer_t {
    xfer_t *next, *prev;
    int where;
    CURL *easy;
    char *url;
    struct curl_slist *headers;
    char *body;
    size_t body_len;
    int is_post, capped_by_deadline, draining;
    uint64_t deadline_ms, not_before_ms, start_by_ms, tag, started_ms;
    uint32_t timeout_ms;
    sg_http_cb cb;
    void *ud;
    sg_buf_t resp;
    size_t max_bytes;
    int too_big;
    int32_t retry_after;
    char ctype[96];
    char errbuf[CURL_ERROR_SIZE];
};

typedef struct st_xlist_t {
    xfer_t *head, *tail;
    size_t n;
} xlist_t;

#define IDLE_EASY_MAX 64

struct st_sg_http_t {
    sg_http_conf_t conf;
    char *ca_file, *proxy, name[16];
    CURLM *multi;
    pthread_t thread;
    int thread_started;
    /* shared, under mu */
    pthread_mutex_t mu;
    xlist_t inbox;
    uint64_t *cancels;
    size_t n_cancels, cap_cancels;
    int stopping;
    /* engine thread only */
    xlist_t delayed, ready, running;
    uint64_t next_queued_deadline;
    CURL *idle[IDLE_EASY_MAX];
    size_t n_idle;
    /* counters */
    atomic_uint_fast64_t started, completed, failed, canceled, drained, connections, bytes_in, errs[8];
    atomic_uint_fast64_t g_inflight, g_queued;
};

static void xlist_push(xlist_t *l, xfer_t *x, int where)
{
    x->next = NULL;
    x->prev = l->tail;
    if (l->tail != NULL)
        l->tail->next = x;
    else
        l->head = x;
    l->tail = x;
    ++l->n;
    x->where = where;
}

static void xlist_remove(xlist_t *l, xfer_t *x)
{
    if (x->prev != NULL)
        x->prev->next = x->next;
    else
        l->head = x->next;
    if (x->next != NULL)
        x->next->prev = x->prev;
    else
        l->tail = x->prev;
    x->next = x->prev = NULL;
    --l->n;
    x->where = IN_NONE;
}

/* inserts into `delayed` keeping it sorted by not_before_ms */
static void delayed_insert(sg_http_t *h, xfer_t *x)
{
    xfer_t *after = h->delayed.tail;
    while (after != NULL && after->not_before_ms > x->not_before_ms)
        after = after->prev;
    if (after == NULL) {
        x->prev = NULL;
        x->next = h->delayed.head;
        if (h->delayed.head != NULL)
            h->delayed.head->prev = x;
        else
            h->delayed.tail = x;
        h->delayed.head = x;
    } else {
        x->prev = after;
        x->next = after->next;
        if (after->next != NULL)
            after->next->prev = x;
        else
            h->delayed.tail = x;
        after->next = x;
    }
    ++h->delayed.n;
    x->where = IN_DELAYED;
}

uint64_t sg_http_now_ms(const sg_http_t *h)
{
    return h->conf.now_ms != NULL ? h->conf.now_ms() : mono_ms();
}

static void xfer_free(xfer_t *x)
{
    free(x->url);
    free(x->body);
    curl_slist_free_all(x->headers);
    sg_buf_free(&x->resp);
    free(x);
}

/* Runs the callback and frees the transfer. Engine thread, no lock held. */
static void xfer_complete_ex(sg_http_t *h, xfer_t *x, sg_http_err err, long status, const char *msg, int deadline)
{
    uint64_t now = sg_http_now_ms(h);
    sg_http_resp_t r;
    memset(&r, 0, sizeof(r));
    r.err = err;
    r.status = err == SG_HTTP_OK ? status : 0;
    r.body = x->resp.base != NULL ? x->resp.base : "";
    r.body_len = x->resp.len;
    r.content_type = x->ctype;
    r.retry_after_s = x->retry_after;
    r.message = msg != NULL ? msg : "";
    r.elapsed_ms = x->started_ms != 0 && now > x->started_ms ? (uint32_t)(now - x->started_ms) : 0;
    r.deadline = deadline;
    atomic_fetch_add(&h->errs[err], 1);
    if (err == SG_HTTP_OK)
        atomic_fetch_add(&h->completed, 1);
    else if (err == SG_HTTP_ECANCELED)
        atomic_fetch_add(&h->canceled, 1);
    else
        atomic_fetch_add(&h->failed, 1);
    x->cb(x->ud, &r);
    xfer_free(x);
}

static void xfer_complete(sg_http_t *h, xfer_t *x, sg_http_err err, long status, const char *msg)
{
    xfer_complete_ex(h, x, err, status, msg, 0);
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer_t *x = ud;
    size_t n = size * nmemb;
    if (x->resp.len + n > x->max_bytes) {
        x->too_big = 1;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    sg_buf_append(&x->resp, p, n);
    return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer_t *x = ud;
    size_t n = size * nmemb;
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) { /* a new response (after 100 Continue) */
        x->retry_after = -1;
        x->ctype[0] = '\0';
        return n;
    }
    const char *colon = memchr(p, ':', n);
    if (colon == NULL)
        return n;
    size_t klen = (size_t)(colon - p);
    const char *v = colon + 1;
    size_t vlen = n - klen - 1;
    while (vlen > 0 && (*v == ' ' || *v == '\t')) {
        ++v;
        --vlen;
    }
    while (vlen > 0 && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
        --vlen;
    char val[96];
    size_t m = vlen < sizeof(val) - 1 ? vlen : sizeof(val) - 1;
    memcpy(val, v, m);
    val[m] = '\0';
    if (klen == 11 && strncasecmp(p, "retry-after", 11) == 0) {
        if (m > 0 && isdigit((unsigned char)val[0])) {
            char *end;
            unsigned long s = strtoul(val, &end, 10);
            x->retry_after = (int32_t)(s > 86400 ? 86400 : s);
        } else if (m > 0) {
            time_t t = curl_getdate(val, NULL);
            if (t != (time_t)-1) {
                time_t now = time(NULL);
                x->retry_after = t > now ? (int32_t)(t - now > 86400 ? 86400 : t - now) : 0;
            }
        }
    } else if (klen == 12 && strncasecmp(p, "content-type", 12) == 0) {
        memcpy(x->ctype, val, m + 1);
    }
    return n;
}

/* Options every transfer (async or sync) gets. */
static void set_common(CURL *e, const sg_http_conf_t *conf, const char *url, char *errbuf)
{
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "searchgate/0.1");
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, conf->tls_verify ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, conf->tls_verify ? 2L : 0L);
    if (conf->ca_file != NULL)
        curl_easy_setopt(e, CURLOPT_CAINFO, conf->ca_file);
    /* an explicit proxy, or none at all: "" makes libcurl ignore http_proxy & co. */
    curl_easy_setopt(e, CURLOPT_PROXY, conf->proxy != NULL ? conf->proxy : "");
    /* h2 only by ALPN over TLS; plain http stays HTTP/1.1 keep-alive (no h2c with curl 7.88) */
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, conf->http2 ? (long)CURL_HTTP_VERSION_2TLS : (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)conf->max_response_bytes);
}

static struct curl_slist *build_headers(const char *const *headers, int is_post)
{
    struct curl_slist *l = NULL;
    for (size_t i = 0; headers != NULL && headers[i] != NULL; ++i)
        l = curl_slist_append(l, headers[i]);
    if (is_post)
        l = curl_slist_append(l, "Expect:"); /* no 100-continue round trip for large bodies */
    return l;
}

static sg_http_err classify(CURLcode rc, int too_big)
{
    switch (rc) {
    case CURLE_OK:
        return SG_HTTP_OK;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
        return SG_HTTP_ECONNECT;
    case CURLE_OPERATION_TIMEDOUT:
        return SG_HTTP_ETIMEDOUT;
    case CURLE_FILESIZE_EXCEEDED:
        return SG_HTTP_ETOOBIG;
    case CURLE_WRITE_ERROR:
        return too_big ? SG_HTTP_ETOOBIG : SG_HTTP_EINTERNAL;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_USE_SSL_FAILED:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
        return SG_HTTP_ETLS;
    case CURLE_OUT_OF_MEMORY:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_UNKNOWN_OPTION:
    case CURLE_NOT_BUILT_IN:
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_FAILED_INIT:
        return SG_HTTP_EINTERNAL;
    default:
        return SG_HTTP_EPROTO;
    }
}

static void describe(CURLcode rc, const char *errbuf, int too_big, size_t max, char *out, size_t out_size)
{
    if (too_big || rc == CURLE_FILESIZE_EXCEEDED)
        snprintf(out, out_size, "response larger than max_response_bytes (%zu)", max);
    else if (errbuf != NULL && errbuf[0] != '\0')
        snprintf(out, out_size, "%s", errbuf);
    else
        snprintf(out, out_size, "%s", curl_easy_strerror(rc));
}

static int start_xfer(sg_http_t *h, xfer_t *x, uint64_t now)
{
    CURL *e;
    if (h->n_idle > 0) {
        e = h->idle[--h->n_idle];
        curl_easy_reset(e);
    } else if ((e = curl_easy_init()) == NULL) {
        return -1;
    }
    x->easy = e;
    x->errbuf[0] = '\0';
    x->retry_after = -1;
    x->max_bytes = h->conf.max_response_bytes;
    set_common(e, &h->conf, x->url, x->errbuf);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    if (h->conf.http2 && strncmp(x->url, "https://", 8) == 0)
        curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L); /* wait for ALPN: h2 multiplexes on one connection */
    if (x->headers != NULL)
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
    if (x->is_post) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body != NULL ? x->body : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->body_len);
    } else {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
    uint64_t total = x->timeout_ms != 0 ? x->timeout_ms : h->conf.timeout_ms;
    x->capped_by_deadline = 0;
    /* draining, the answer is read past the caller's deadline (http.h): only timeout_ms bounds it */
    if (x->deadline_ms != 0 && h->conf.on_cancel == SG_HTTP_CLOSE) {
        uint64_t left = x->deadline_ms > now ? x->deadline_ms - now : 1;
        if (left < total) {
            total = left;
            x->capped_by_deadline = 1;
        }
    }
    uint64_t conn = h->conf.connect_timeout_ms < total ? h->conf.connect_timeout_ms : total;
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)total);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)conn);
    x->started_ms = now;
    if (curl_multi_add_handle(h->multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        x->easy = NULL;
        return -1;
    }
    xlist_push(&h->running, x, IN_RUNNING);
    atomic_fetch_add(&h->started, 1);
    return 0;
}

static void release_easy(sg_http_t *h, CURL *e)
{
    if (h->n_idle < IDLE_EASY_MAX)
        h->idle[h->n_idle++] = e;
    else
        curl_easy_cleanup(e);
}

/* Removes a running transfer from the multi handle; the caller completes it. */
static void stop_running(sg_http_t *h, xfer_t *x)
{
    curl_multi_remove_handle(h->multi, x->easy);
    release_easy(h, x->easy);
    x->easy = NULL;
    xlist_remove(&h->running, x);
}

static void cancel_tag(sg_http_t *h, uint64_t tag)
{
    xlist_t *lists[] = {&h->delayed, &h->ready, &h->running};
    for (size_t i = 0; i < 3; ++i) {
        xfer_t *x = lists[i]->head;
        while (x != NULL) {
            xfer_t *next = x->next;
            if (x->tag == tag && x->where == IN_RUNNING && h->conf.on_cancel == SG_HTTP_DRAIN) {
                if (!x->draining) /* sent: read to its end, it completes as usual */
                    atomic_fetch_add(&h->drained, 1);
                x->draining = 1;
            } else if (x->tag == tag) {
                if (x->where == IN_RUNNING) {
                    stop_running(h, x);
                } else {
                    xlist_remove(lists[i], x);
                }
                xfer_complete(h, x, SG_HTTP_ECANCELED, 0, "canceled");
                /* the callback may have changed the lists: restart this one */
                x = lists[i]->head;
                continue;
            }
            x = next;
        }
    }
}

static void expire_queued(sg_http_t *h, uint64_t now)
{
    if (h->next_queued_deadline == 0 || now < h->next_queued_deadline)
        return;
    uint64_t next = 0;
    xlist_t *lists[] = {&h->delayed, &h->ready};
    for (size_t i = 0; i < 2; ++i) {
        xfer_t *x = lists[i]->head;
        while (x != NULL) {
            xfer_t *nx = x->next;
            uint64_t by = x->start_by_ms;
            if (by != 0 && by <= now) {
                xlist_remove(lists[i], x);
                xfer_complete_ex(h, x, SG_HTTP_ETIMEDOUT, 0,
                                 i == 0 ? "deadline passed while waiting to retry" : "deadline passed before the request started",
                                 1);
                x = lists[i]->head; /* callbacks may have changed the list */
                continue;
            }
            if (by != 0 && (next == 0 || by < next))
                next = by;
            x = nx;
        }
    }
    h->next_queued_deadline = next;
}

static void note_deadline(sg_http_t *h, xfer_t *x)
{
    if (x->start_by_ms != 0 && (h->next_queued_deadline == 0 || x->start_by_ms < h->next_queued_deadline))
        h->next_queued_deadline = x->start_by_ms;
}

/* Starts every due transfer. */
static void start_ready(sg_http_t *h, uint64_t now)
{
    while (h->ready.head != NULL) {
        xfer_t *x = h->ready.head;
        xlist_remove(&h->ready, x);
        if (start_xfer(h, x, now) != 0)
            xfer_complete(h, x, SG_HTTP_EINTERNAL, 0, "libcurl refused the transfer");
    }
}

static void on_done_msg(sg_http_t *h, CURLMsg *m)
{
    xfer_t *x = NULL;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
    if (x == NULL)
        return;
    CURLcode rc = m->data.result;
    long status = 0, conns = 0;
    curl_off_t down = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(x->easy, CURLINFO_NUM_CONNECTS, &conns);
    curl_easy_getinfo(x->easy, CURLINFO_SIZE_DOWNLOAD_T, &down);
    atomic_fetch_add(&h->connections, (uint64_t)conns);
    atomic_fetch_add(&h->bytes_in, (uint64_t)down);
    stop_running(h, x);
    sg_http_err err = classify(rc, x->too_big);
    char msg[CURL_ERROR_SIZE + 64] = "";
    if (err != SG_HTTP_OK) {
        describe(rc, x->errbuf, x->too_big, x->max_bytes, msg, sizeof(msg));
        if (err == SG_HTTP_ETIMEDOUT && x->capped_by_deadline) {
            size_t l = strlen(msg);
            snprintf(msg + l, sizeof(msg) - l, " (request deadline)");
        }
    }
    xfer_complete_ex(h, x, err, status, msg, err == SG_HTTP_ETIMEDOUT && x->capped_by_deadline);
}

static void *engine_main(void *arg)
{
    sg_http_t *h = arg;
    xlist_t in = {0};
    uint64_t *cancels = NULL;
    size_t n_cancels = 0, cap_cancels = 0;
    for (;;) {
        pthread_mutex_lock(&h->mu);
        int stopping = h->stopping;
        in = h->inbox;
        memset(&h->inbox, 0, sizeof(h->inbox));
        /* swap the cancel arrays so the shared one can keep growing while we work */
        uint64_t *tc = h->cancels;
        size_t tn = h->n_cancels, tcap = h->cap_cancels;
        h->cancels = cancels;
        h->cap_cancels = cap_cancels;
        h->n_cancels = 0;
        cancels = tc;
        n_cancels = tn;
        cap_cancels = tcap;
        pthread_mutex_unlock(&h->mu);
        if (stopping) {
            /* put back what arrived so the shutdown path below cancels it too */
            while (in.head != NULL) {
                xfer_t *x = in.head;
                xlist_remove(&in, x);
                xlist_push(&h->ready, x, IN_READY);
            }
            break;
        }
        uint64_t now = sg_http_now_ms(h);
        while (in.head != NULL) {
            xfer_t *x = in.head;
            xlist_remove(&in, x);
            if (x->not_before_ms > now)
                delayed_insert(h, x);
            else
                xlist_push(&h->ready, x, IN_READY);
            note_deadline(h, x);
        }
        for (size_t i = 0; i < n_cancels; ++i)
            cancel_tag(h, cancels[i]);
        n_cancels = 0;
        now = sg_http_now_ms(h);
        while (h->delayed.head != NULL && h->delayed.head->not_before_ms <= now) {
            xfer_t *x = h->delayed.head;
            xlist_remove(&h->delayed, x);
            xlist_push(&h->ready, x, IN_READY);
        }
        expire_queued(h, now);
        start_ready(h, now);
        int still = 0;
        curl_multi_perform(h->multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(h->multi, &left)) != NULL)
            if (m->msg == CURLMSG_DONE)
                on_done_msg(h, m);
        atomic_store(&h->g_inflight, h->running.n);
        atomic_store(&h->g_queued, h->ready.n + h->delayed.n);
        /* sleep until a socket is ready, curl's own timer, a wakeup, or our own timers */
        now = sg_http_now_ms(h);
        long wait = 1000;
        if (h->delayed.head != NULL) {
            uint64_t nb = h->delayed.head->not_before_ms;
            long w = nb > now ? (long)(nb - now) : 0;
            if (w < wait)
                wait = w;
        }
        if (h->next_queued_deadline != 0) {
            long w = h->next_queued_deadline > now ? (long)(h->next_queued_deadline - now) : 0;
            if (w < wait)
                wait = w;
        }
        if (h->ready.head != NULL)
            wait = 0; /* something became startable during the callbacks */
        if (wait > 0)
            curl_multi_poll(h->multi, NULL, 0, (int)wait, NULL);
    }
    free(cancels);
    /* shutdown: everything completes with SG_HTTP_ECANCELED */
    while (h->running.head != NULL) {
        xfer_t *x = h->running.head;
        stop_running(h, x);
        xfer_complete(h, x, SG_HTTP_ECANCELED, 0, "backend shutting down");
    }
    xlist_t *lists[] = {&h->delayed, &h->ready};
    for (size_t i = 0; i < 2; ++i) {
        while (lists[i]->head != NULL) {
            xfer_t *x = lists[i]->head;
            xlist_remove(lists[i], x);
            xfer_complete(h, x, SG_HTTP_ECANCELED, 0, "backend shutting down");
        }
    }
    return NULL;
}

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static void global_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

void sg_http_global_init(void)
{
    pthread_once(&global_once, global_init_once);
}

sg_http_t *sg_http_new(const sg_http_conf_t *conf, char *err, size_t err_size)
{
    sg_http_global_init();
    sg_http_t *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    h->conf = *conf;
    h->ca_file = conf->ca_file != NULL ? xstrdup(conf->ca_file) : NULL;
    h->proxy = conf->proxy != NULL ? xstrdup(conf->proxy) : NULL;
    h->conf.ca_file = h->ca_file;
    h->conf.proxy = h->proxy;
    h->conf.name = NULL;
    if (h->conf.timeout_ms == 0)
        h->conf.timeout_ms = 30000;
    if (h->conf.connect_timeout_ms == 0)
        h->conf.connect_timeout_ms = 3000;
    if (h->conf.max_response_bytes == 0)
        h->conf.max_response_bytes = 16u << 20;
    snprintf(h->name, sizeof(h->name), "sg-http-%.7s", conf->name != NULL ? conf->name : "");
    pthread_mutex_init(&h->mu, NULL);
    h->multi = curl_multi_init();
    if (h->multi == NULL) {
        snprintf(err, err_size, "curl_multi_init failed");
        sg_http_free(h);
        return NULL;
    }
    curl_multi_setopt(h->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    if (h->conf.max_connections != 0)
        curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)h->conf.max_connections);
    if (pthread_create(&h->thread, NULL, engine_main, h) != 0) {
        snprintf(err, err_size, "cannot start the HTTP engine thread");
        sg_http_free(h);
        return NULL;
    }
    h->thread_started = 1;
    pthread_setname_np(h->thread, h->name);
    return h;
}

void sg_http_free(sg_http_t *h)
{
    if (h == NULL)
        return;
    if (h->thread_started) {
        pthread_mutex_lock(&h->mu);
        h->stopping = 1;
        pthread_mutex_unlock(&h->mu);
        curl_multi_wakeup(h->multi);
        pthread_join(h->thread, NULL);
    }
    for (size_t i = 0; i < h->n_idle; ++i)
        curl_easy_cleanup(h->idle[i]);
    if (h->multi != NULL)
        curl_multi_cleanup(h->multi);
    free(h->cancels);
    free(h->ca_file);
    free(h->proxy);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

int sg_http_submit(sg_http_t *h, sg_http_req_t *reqs, size_t n, const char **why)
{
    const char *dummy;
    if (why == NULL)
        why = &dummy;
    xfer_t **xs = xmalloc(n * sizeof(*xs));
    for (size_t i = 0; i < n; ++i) {
        const sg_http_req_t *r = &reqs[i];
        xfer_t *x = calloc(1, sizeof(*x));
        if (x == NULL)
            abort();
        x->url = xstrdup(r->url);
        x->is_post = r->method != NULL && strcmp(r->method, "POST") == 0;
        x->headers = build_headers(r->headers, x->is_post);
        x->body_len = r->body_len;
        x->deadline_ms = r->deadline_ms;
        /* a queued transfer must start by then: the caller's start_by, never past its deadline */
        x->start_by_ms =
            r->start_by_ms != 0 && (r->deadline_ms == 0 || r->start_by_ms < r->deadline_ms) ? r->start_by_ms : r->deadline_ms;
        x->timeout_ms = r->timeout_ms;
        x->not_before_ms = r->not_before_ms;
        x->tag = r->tag;
        x->cb = r->cb;
        x->ud = r->ud;
        x->retry_after = -1;
        xs[i] = x;
    }
    pthread_mutex_lock(&h->mu);
    int fail = 0;
    if (h->stopping) {
        *why = "the HTTP engine is shutting down";
        fail = 1;
    }
    if (!fail) {
        for (size_t i = 0; i < n; ++i) {
            xs[i]->body = reqs[i].body; /* taken over */
            xlist_push(&h->inbox, xs[i], IN_INBOX);
        }
    }
    pthread_mutex_unlock(&h->mu);
    if (fail) {
        for (size_t i = 0; i < n; ++i)
            xfer_free(xs[i]);
        free(xs);
        return -1;
    }
    free(xs);
    curl_multi_wakeup(h->multi);
    return 0;
}

int sg_http_submit_copy(sg_http_t *h, const sg_http_req_t *req)
{
    sg_http_req_t copy = *req;
    copy.body = xmalloc(req->body_len + 1);
    memcpy(copy.body, req->body, req->body_len + 1);
    if (sg_http_submit(h, &copy, 1, NULL) != 0) {
        free(copy.body);
        return -1;
    }
    return 0;
}

void sg_http_cancel(sg_http_t *h, uint64_t tag)
{
    pthread_mutex_lock(&h->mu);
    if (h->n_cancels == h->cap_cancels) {
        size_t cap = h->cap_cancels != 0 ? h->cap_cancels * 2 : 16;
        uint64_t *p = realloc(h->cancels, cap * sizeof(*p));
        if (p == NULL)
            abort();
        h->cancels = p;
        h->cap_cancels = cap;
    }
    h->cancels[h->n_cancels++] = tag;
    pthread_mutex_unlock(&h->mu);
    curl_multi_wakeup(h->multi);
}

void sg_http_stats(sg_http_t *h, sg_http_stats_t *o)
{
    memset(o, 0, sizeof(*o));
    o->started = atomic_load(&h->started);
    o->completed = atomic_load(&h->completed);
    o->failed = atomic_load(&h->failed);
    o->canceled = atomic_load(&h->canceled);
    o->drained = atomic_load(&h->drained);
    o->connections = atomic_load(&h->connections);
    o->bytes_in = atomic_load(&h->bytes_in);
    for (size_t i = 0; i < 8; ++i)
        o->err[i] = atomic_load(&h->errs[i]);
    o->inflight = atomic_load(&h->g_inflight);
    o->queued = atomic_load(&h->g_queued);
}

void sg_http_report(sg_http_t *h, const sg_host_api *host, void *sink, const char *prefix)
{
    sg_http_stats_t s;
    char name[128], labels[64];
    sg_http_stats(h, &s);
#define EMIT(suffix, help, type, lab, value)                                                                                       \
    do {                                                                                                                           \
        snprintf(name, sizeof(name), "%s_" suffix, prefix);                                                                        \
        host->metric(sink, name, help, type, lab, (double)(value));                                                                \
    } while (0)
    EMIT("http_started_total", "Outbound HTTP transfers started.", SG_METRIC_COUNTER, NULL, s.started);
    EMIT("http_responses_total", "Outbound transfers that got an HTTP response (any status).", SG_METRIC_COUNTER, NULL,
         s.completed);
    for (int k = SG_HTTP_ECONNECT; k <= SG_HTTP_EINTERNAL; ++k) {
        if (k == SG_HTTP_ECANCELED)
            continue;
        snprintf(labels, sizeof(labels), "kind=\"%s\"", sg_http_err_name((sg_http_err)k));
        EMIT("http_errors_total", "Outbound transfers that failed without an HTTP response, by kind.", SG_METRIC_COUNTER, labels,
             s.err[k]);
    }
    EMIT("http_canceled_total", "Outbound transfers canceled (client gone, deadline, shutdown).", SG_METRIC_COUNTER, NULL,
         s.canceled);
    EMIT("http_drained_total",
         "Transfers whose caller gave up while they ran, read to their end (on_cancel \"drain\"): the upstream was still working.",
         SG_METRIC_COUNTER, NULL, s.drained);
    EMIT("http_connections_total", "New upstream connections opened (the other transfers reused a kept-alive one).",
         SG_METRIC_COUNTER, NULL, s.connections);
    EMIT("http_bytes_in_total", "Response body bytes received from the upstream.", SG_METRIC_COUNTER, NULL, s.bytes_in);
    EMIT("http_inflight", "Outbound transfers running now.", SG_METRIC_GAUGE, NULL, s.inflight);
    EMIT("http_queued", "Outbound transfers waiting for their retry time.", SG_METRIC_GAUGE, NULL, s.queued);
#undef EMIT
}

void sg_http_fetch_sync(const sg_http_conf_t *conf, const char *method, const char *url, const char *const *headers,
                        const char *body, size_t body_len, sg_http_resp_t *resp, char **body_out, char *msg, size_t msg_size)
{
    sg_http_global_init();
    xfer_t x;
    memset(&x, 0, sizeof(x));
    x.retry_after = -1;
    x.max_bytes = conf->max_response_bytes != 0 ? conf->max_response_bytes : (16u << 20);
    memset(resp, 0, sizeof(*resp));
    *body_out = NULL;
    msg[0] = '\0';
    CURL *e = curl_easy_init();
    if (e == NULL) {
        resp->err = SG_HTTP_EINTERNAL;
        snprintf(msg, msg_size, "curl_easy_init failed");
        resp->message = msg;
        resp->body = "";
        return;
    }
    int is_post = method != NULL && strcmp(method, "POST") == 0;
    struct curl_slist *hl = build_headers(headers, is_post);
    set_common(e, conf, url, x.errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &x);
    if (hl != NULL)
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
    if (is_post) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body != NULL ? body : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(conf->timeout_ms != 0 ? conf->timeout_ms : 30000));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(conf->connect_timeout_ms != 0 ? conf->connect_timeout_ms : 3000));
    CURLcode rc = curl_easy_perform(e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    resp->err = classify(rc, x.too_big);
    resp->status = resp->err == SG_HTTP_OK ? status : 0;
    if (resp->err != SG_HTTP_OK)
        describe(rc, x.errbuf, x.too_big, x.max_bytes, msg, msg_size);
    resp->message = msg;
    resp->retry_after_s = x.retry_after;
    if (x.resp.base == NULL)
        sg_buf_append(&x.resp, "", 0);
    *body_out = x.resp.base;
    resp->body = x.resp.base;
    resp->body_len = x.resp.len;
    resp->content_type = "";
    curl_slist_free_all(hl);
    curl_easy_cleanup(e);
}

/* ---- jobs ---- */

void sg_http_jobs_init(sg_http_jobs_t *r)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    r->next_tag = 1;
}

void sg_http_jobs_dispose(sg_http_jobs_t *r)
{
    pthread_mutex_destroy(&r->mu);
}

void sg_http_jobs_add_locked(sg_http_jobs_t *r, sg_http_job_t *j, sg_done_fn done, void *cb_data)
{
    j->tag = r->next_tag++;
    j->done = done;
    j->cb_data = cb_data;
    atomic_init(&j->canceled, 0);
    atomic_init(&j->finished, 0);
    j->next = r->head;
    if (j->next != NULL)
        j->next->pprev = &j->next;
    j->pprev = &r->head;
    r->head = j;
    ++r->n;
}

void sg_http_jobs_remove(sg_http_jobs_t *r, sg_http_job_t *j)
{
    pthread_mutex_lock(&r->mu);
    if (j->pprev != NULL) {
        *j->pprev = j->next;
        if (j->next != NULL)
            j->next->pprev = j->pprev;
        j->next = NULL;
        j->pprev = NULL;
        --r->n;
    }
    pthread_mutex_unlock(&r->mu);
}

int sg_http_jobs_cancel(sg_http_jobs_t *r, sg_http_t *h, void *cb_data)
{
    int found = 0;
    pthread_mutex_lock(&r->mu);
    for (sg_http_job_t *j = r->head; j != NULL; j = j->next) {
        if (j->cb_data == cb_data && !atomic_load(&j->finished)) {
            atomic_store(&j->canceled, 1);
            if (h != NULL)
                sg_http_cancel(h, j->tag); /* under r->mu: ordered after any submit made under it */
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return found;
}

int sg_http_job_finish(sg_http_job_t *j, const sg_result *res)
{
    int expected = 0;
    if (!atomic_compare_exchange_strong(&j->finished, &expected, 1))
        return 0;
    j->done(j->cb_data, res);
    return 1;
}

int sg_http_job_finish_docs(sg_http_job_t *j, const sg_http_docs_t *lists, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; ++i)
        total += lists[i].n;
    sg_hits *per = calloc(n, sizeof(*per));
    sg_hit *hits = calloc(total + 1, sizeof(*hits));
    if (per == NULL || hits == NULL)
        abort();
    sg_hit *h = hits;
    for (size_t i = 0; i < n; ++i) {
        per[i].hits = h;
        per[i].n_hits = lists[i].n;
        for (size_t k = 0; k < lists[i].n; ++k, ++h) {
            h->doc = lists[i].docs[k].json;
            h->doc_len = lists[i].docs[k].len;
            h->score = lists[i].docs[k].score;
        }
    }
    sg_result res = {SG_OK, NULL, per, n, 0};
    int delivered = sg_http_job_finish(j, &res);
    free(hits);
    free(per);
    return delivered;
}

int sg_http_job_fail(sg_http_job_t *j, sg_status st, uint32_t retry_after_s, const char *fmt, ...)
{
    char detail[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    sg_result res = {st, detail, NULL, 0, retry_after_s};
    return sg_http_job_finish(j, &res);
}

int sg_http_job_fail_later(sg_http_job_t *j, const sg_host_api *host, void *admission, sg_status st, uint32_t retry_after_s,
                           const char *fmt, ...)
{
    if (j->failed || atomic_load(&j->finished))
        return 0;
    char detail[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    j->failed = 1;
    if (host != NULL && admission != NULL && SG_HOST_HAS_HOLD(host)) {
        host->hold(admission); /* the slot stays taken until settle: answer now */
        j->held_host = host;
        j->held = admission;
        sg_http_job_fail(j, st, retry_after_s, "%s", detail);
        return 1;
    }
    j->fail_detail = strdup(detail);
    if (j->fail_detail == NULL)
        abort();
    j->fail_status = st;
    j->fail_retry_after_s = retry_after_s;
    return 1;
}

int sg_http_job_over(sg_http_job_t *j)
{
    return j->failed || atomic_load(&j->finished);
}

int sg_http_job_settle(sg_http_job_t *j)
{
    int delivered = 0;
    if (j->fail_detail != NULL) {
        delivered = sg_http_job_fail(j, j->fail_status, j->fail_retry_after_s, "%s", j->fail_detail);
        free(j->fail_detail);
        j->fail_detail = NULL;
    }
    if (j->held != NULL) {
        void *admission = j->held;
        j->held = NULL;
        j->held_host->release(admission);
    }
    return delivered;
}
