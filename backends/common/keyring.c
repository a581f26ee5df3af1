/*
 * keyring.c -- round-robin API keys with rest periods (see keyring.h). The state of a key is three
 * counters and one atomic "resting until" time, so picking and resting need no lock: a pick reads
 * the rest times, a rest only ever moves one forward with a compare-and-swap.
 */
#include "keyring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_range(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s == NULL)
        abort();
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static int is_blank(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/* A header value may carry visible ASCII only (RFC 9110 field-vchar, without obs-text). */
static int header_safe(const char *s)
{
    for (; *s != '\0'; ++s)
        if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e)
            return 0;
    return 1;
}

int sg_keyring_init(sg_keyring_t *r, sg_cfg_t *c, const cJSON *obj, const char *key, int required, const char *header_prefix,
                    uint64_t rest_ms)
{
    memset(r, 0, sizeof(*r));
    r->rest_ms = rest_ms;
    char *value = NULL;
    if (sg_cfg_string(c, obj, key, required, NULL, &r->env) != 0)
        return -1;
    if (r->env == NULL)
        return 0;
    if (sg_cfg_secret_env(c, obj, key, required, &value) != 0) {
        sg_keyring_free(r); /* the variable's name */
        return -1;
    }
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    size_t cap = 1;
    for (const char *p = value; *p != '\0'; ++p)
        cap += *p == '|';
    if (cap > SG_KEYRING_MAX) {
        sg_cfg_fail(c, key, item, "environment variable %s holds %zu keys; at most %d are allowed", r->env, cap, SG_KEYRING_MAX);
        goto fail;
    }
    r->keys = calloc(cap, sizeof(*r->keys));
    if (r->keys == NULL)
        abort();
    const char *p = value;
    for (size_t i = 0; i < cap; ++i) {
        const char *end = strchr(p, '|');
        if (end == NULL)
            end = p + strlen(p);
        const char *b = p, *e = end;
        while (b < e && is_blank(*b))
            ++b;
        while (e > b && is_blank(e[-1]))
            --e;
        if (b == e) {
            sg_cfg_fail(c, key, item, "key %zu of the %zu in environment variable %s is empty (keys are separated by '|')", i + 1,
                        cap, r->env);
            goto fail;
        }
        char *secret = dup_range(b, (size_t)(e - b));
        r->keys[r->n].secret = secret;
        r->keys[r->n].header = NULL;
        ++r->n;
        if (!header_safe(secret)) {
            sg_cfg_fail(c, key, item, "key %zu in environment variable %s has a character an HTTP header cannot carry", i + 1,
                        r->env);
            goto fail;
        }
        for (size_t k = 0; k + 1 < r->n; ++k) {
            if (strcmp(r->keys[k].secret, secret) == 0) {
                sg_cfg_fail(c, key, item, "keys %zu and %zu in environment variable %s are the same key", k + 1, i + 1, r->env);
                goto fail;
            }
        }
        size_t hl = strlen(header_prefix), sl = strlen(secret);
        r->keys[r->n - 1].header = malloc(hl + sl + 1);
        if (r->keys[r->n - 1].header == NULL)
            abort();
        memcpy(r->keys[r->n - 1].header, header_prefix, hl);
        memcpy(r->keys[r->n - 1].header + hl, secret, sl + 1);
        p = *end == '|' ? end + 1 : end;
    }
    memset(value, 0, strlen(value));
    free(value);
    return 0;
fail:
    memset(value, 0, strlen(value));
    free(value);
    sg_keyring_free(r);
    return -1;
}

static void wipe(char *s)
{
    if (s != NULL)
        memset(s, 0, strlen(s));
    free(s);
}

void sg_keyring_free(sg_keyring_t *r)
{
    for (size_t i = 0; i < r->n; ++i) {
        wipe(r->keys[i].secret);
        wipe(r->keys[i].header);
    }
    free(r->keys);
    free(r->env);
    r->keys = NULL;
    r->env = NULL;
    r->n = 0;
}

int sg_keyring_pick(sg_keyring_t *r, uint64_t now_ms, uint64_t *wake_ms)
{
    uint64_t wake = 0;
    if (r->n != 0) {
        uint64_t start = atomic_fetch_add(&r->next, 1);
        for (size_t k = 0; k < r->n; ++k) {
            size_t i = (size_t)((start + k) % r->n);
            uint64_t until = atomic_load(&r->keys[i].rest_until_ms);
            if (until <= now_ms)
                return (int)i;
            if (wake == 0 || until < wake)
                wake = until;
        }
    }
    if (wake_ms != NULL)
        *wake_ms = wake;
    return -1;
}

int sg_keyring_all_resting(sg_keyring_t *r, uint64_t now_ms, uint64_t *wake_ms)
{
    uint64_t wake = 0;
    for (size_t i = 0; i < r->n; ++i) {
        uint64_t until = atomic_load(&r->keys[i].rest_until_ms);
        if (until <= now_ms)
            return 0;
        if (wake == 0 || until < wake)
            wake = until;
    }
    if (wake_ms != NULL)
        *wake_ms = wake;
    return r->n != 0;
}

void sg_keyring_note_call(sg_keyring_t *r, int i)
{
    if (i >= 0 && (size_t)i < r->n)
        atomic_fetch_add(&r->keys[i].calls, 1);
}

void sg_keyring_note_failure(sg_keyring_t *r, int i)
{
    if (i >= 0 && (size_t)i < r->n)
        atomic_fetch_add(&r->keys[i].failures, 1);
}

int sg_keyring_rest(sg_keyring_t *r, int i, uint64_t now_ms, uint64_t min_ms, long status)
{
    if (i < 0 || (size_t)i >= r->n)
        return 0;
    sg_keyring_key_t *k = &r->keys[i];
    uint64_t until = now_ms + (min_ms > r->rest_ms ? min_ms : r->rest_ms);
    uint64_t old = atomic_load(&k->rest_until_ms);
    while (old < until && !atomic_compare_exchange_weak(&k->rest_until_ms, &old, until))
        ;
    if (old >= until)
        return 0; /* already resting longer */
    atomic_store(&k->rest_status, status);
    if (old > now_ms)
        return 0; /* was resting already: extended, not counted again */
    atomic_fetch_add(&k->rests, 1);
    return 1;
}

size_t sg_keyring_resting(sg_keyring_t *r, uint64_t now_ms)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n; ++i)
        n += atomic_load(&r->keys[i].rest_until_ms) > now_ms;
    return n;
}

long sg_keyring_first_rest_status(sg_keyring_t *r, uint64_t now_ms)
{
    uint64_t best = 0;
    long st = 0;
    for (size_t i = 0; i < r->n; ++i) {
        uint64_t until = atomic_load(&r->keys[i].rest_until_ms);
        if (until > now_ms && (best == 0 || until < best)) {
            best = until;
            st = atomic_load(&r->keys[i].rest_status);
        }
    }
    return st;
}

void sg_keyring_scrub(const sg_keyring_t *r, char *s, size_t size)
{
    if (size == 0)
        return;
    for (size_t i = 0; i < r->n; ++i) {
        const char *key = r->keys[i].secret;
        size_t kl = strlen(key);
        char *from = s, *hit;
        while (kl != 0 && (hit = strstr(from, key)) != NULL) {
            size_t tail = strlen(hit + kl);
            size_t head = (size_t)(hit - s);
            size_t room = size - 1 - head; /* bytes the buffer holds from `hit` on, without the NUL */
            size_t star = room < 3 ? room : 3;
            size_t keep = tail < room - star ? tail : room - star;
            memmove(hit + star, hit + kl, keep);
            memset(hit, '*', star);
            hit[star + keep] = '\0';
            from = hit + star; /* never rescan the stars (a key may contain '*') */
        }
    }
}

void sg_keyring_report(sg_keyring_t *r, const sg_host_api *host, void *sink, const char *prefix, uint64_t now_ms)
{
    if (r->n == 0)
        return;
    char name[96], label[32];
    snprintf(name, sizeof(name), "%s_keys", prefix);
    host->metric(sink, name, "API keys configured (the variable holds KEY1|KEY2|...).", SG_METRIC_GAUGE, NULL, (double)r->n);
    snprintf(name, sizeof(name), "%s_keys_resting", prefix);
    host->metric(sink, name, "API keys resting after the upstream refused them (401/402/429...).", SG_METRIC_GAUGE, NULL,
                 (double)sg_keyring_resting(r, now_ms));
    static const char *const what[] = {"calls", "failures", "rests"};
    static const char *const help[] = {"Requests sent with this key (key = its 1-based position in the variable).",
                                       "Requests with this key that got an HTTP error status or no answer.",
                                       "Times this key was rested because the upstream refused it."};
    for (size_t m = 0; m < 3; ++m) {
        snprintf(name, sizeof(name), "%s_key_%s_total", prefix, what[m]);
        for (size_t i = 0; i < r->n; ++i) {
            const sg_keyring_key_t *k = &r->keys[i];
            uint64_t v = m == 0 ? atomic_load(&k->calls) : m == 1 ? atomic_load(&k->failures) : atomic_load(&k->rests);
            snprintf(label, sizeof(label), "key=\"%zu\"", i + 1);
            host->metric(sink, name, help[m], SG_METRIC_COUNTER, label, (double)v);
        }
    }
}
