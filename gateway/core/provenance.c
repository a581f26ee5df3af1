/*
 * provenance.c -- the provenance of a route's answers (provenance.h): a fingerprint of the data
 * behind the route, computed once at start-up from the identity its plugin already gives the
 * result cache, and the X-Searchgate-Provenance header built from it.
 *
 * The fingerprint leaves the route's name out (two gateways serving the same index under other
 * names report the same data) and covers the plugin kind and version and its identity(): the
 * index and corpus fingerprints, the model and its precision, the route's search settings
 * (nprobe, efSearch, ...), a rerank stage's model and settings. A fusion route's covers its
 * method, weights and depth and each leg's fingerprint. The hot path copies the precomputed part
 * and appends the answer's cache outcome: no hashing, no formatting of identities per request.
 */
#include "provenance.h"
#include "common.h"
#include "json.h"
#include "metrics.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>

/* A copy of `s` that a header value (and a Prometheus label) can carry: printable ASCII without
 * the separators of the header's grammar (';' ',' '"' '\\'); anything else becomes '_'. */
static char *header_safe(const char *s)
{
    char *out = sg_strdup(s);
    for (char *p = out; *p != '\0'; ++p)
        if (*p < 0x21 || *p > 0x7e || *p == ';' || *p == ',' || *p == '"' || *p == '\\')
            *p = '_';
    return out;
}

void sg_provenance_init(sg_provenance_t *p, const char *route, const char *type, const char *plugin_kind,
                        const char *plugin_version, const char *identity, const char *legs)
{
    sg_buf_t b = {0};
    char *kind = header_safe(plugin_kind), *version = header_safe(plugin_version);
    p->route = sg_strdup(route);
    p->type = type;
    sg_buf_appendf(&b, "%s/%s", kind, version);
    p->plugin = b.base;
    b = (sg_buf_t){0};
    sg_buf_appendf(&b, "%s/%s|%s", plugin_kind, plugin_version, identity != NULL ? identity : "");
    if (legs != NULL)
        sg_buf_appendf(&b, "|leg_data=%s", legs);
    p->identity = b.base;
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)p->identity, strlen(p->identity), d);
    for (int i = 0; i < 8; ++i)
        snprintf(p->data + 2 * i, 3, "%02x", d[i]);
    b = (sg_buf_t){0};
    sg_buf_appendf(&b, "route=%s; type=%s; plugin=%s; data=%s", route, type, p->plugin, p->data);
    if (legs != NULL)
        sg_buf_appendf(&b, "; legs=%s", legs);
    p->header = b.base;
    p->header_len = b.len;
    free(kind);
    free(version);
}

void sg_provenance_dispose(sg_provenance_t *p)
{
    free(p->route);
    free(p->plugin);
    free(p->identity);
    free(p->header);
    memset(p, 0, sizeof(*p));
}

/* Appends `s` as a Prometheus label value (backslash, quote and newline escaped). */
static void append_label(sg_buf_t *b, const char *name, const char *s)
{
    sg_buf_appendf(b, "%s%s=\"", b->len != 0 ? "," : "", name);
    for (; *s != '\0'; ++s) {
        if (*s == '\\' || *s == '"')
            sg_buf_appendc(b, '\\');
        if (*s == '\n')
            sg_buf_appends(b, "\\n");
        else
            sg_buf_appendc(b, *s);
    }
    sg_buf_appendc(b, '"');
}

void sg_provenance_register_metric(sg_provenance_t *p, const char *plugin_kind, const char *plugin_version)
{
    sg_buf_t l = {0};
    append_label(&l, "route", p->route);
    append_label(&l, "type", p->type);
    append_label(&l, "plugin", plugin_kind);
    append_label(&l, "version", plugin_version);
    append_label(&l, "data", p->data);
    append_label(&l, "identity", p->identity);
    p->info = sg_metrics_gauge("searchgate_route_info",
                               "What serves each route (value 1; 0 once a configuration reload removed or replaced it): type, "
                               "plugin, version and the fingerprint of its data (the X-Searchgate-Provenance header's data=), "
                               "with the identity it is taken of.",
                               l.base);
    sg_gauge_set(p->info, 1);
    sg_buf_free(&l);
}

void sg_provenance_json(sg_jw_t *w, const sg_provenance_t *p)
{
    sg_jw_key(w, "provenance");
    sg_jw_obj(w);
    sg_jw_kstr(w, "type", p->type);
    sg_jw_kstr(w, "plugin", p->plugin);
    sg_jw_kstr(w, "data", p->data);
    sg_jw_kstr(w, "identity", p->identity);
    sg_jw_end(w);
}
