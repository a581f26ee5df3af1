/*
 * plugin.c -- the plugin loader. The checks go in this order: open, find the
 * entry, read the frozen header, then make sure every mandatory 1.0 function is present. Any
 * failure unloads the object and reports "<path>: <reason>".
 */
#include "plugin.h"
#include "common.h"
#include "metrics.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int sg_plugin_load(sg_plugin_t *p, const char *path, char *err, size_t err_size)
{
    memset(p, 0, sizeof(*p));
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        snprintf(err, err_size, "%s: cannot load: %s", path, dlerror());
        return -1;
    }
    const char *why = NULL;
    char whybuf[256];
    sg_backend_entry_fn entry;
    void *sym = dlsym(dl, SG_BACKEND_ENTRY_NAME);
    memcpy(&entry, &sym, sizeof(entry));
    const sg_backend_vtable *vt = NULL;
    if (sym == NULL) {
        why = "no " SG_BACKEND_ENTRY_NAME "() exported (is it a searchgate plugin?)";
    } else if ((vt = entry()) == NULL) {
        why = SG_BACKEND_ENTRY_NAME "() returned NULL";
    } else if (vt->abi_major != SG_BACKEND_ABI_MAJOR || vt->abi_minor > SG_BACKEND_ABI_MINOR) {
        snprintf(whybuf, sizeof(whybuf), "built for plugin ABI %u.%u, this gateway speaks %d.%d", vt->abi_major, vt->abi_minor,
                 SG_BACKEND_ABI_MAJOR, SG_BACKEND_ABI_MINOR);
        why = whybuf;
    } else if (vt->struct_size < offsetof(sg_backend_vtable, access) + sizeof(vt->access)) {
        snprintf(whybuf, sizeof(whybuf), "vtable too small (%u bytes) for ABI %u.%u", vt->struct_size, vt->abi_major,
                 vt->abi_minor);
        why = whybuf;
    } else if (vt->name == NULL || vt->version == NULL) {
        why = "vtable lacks a name or version";
    } else if (vt->create == NULL || vt->destroy == NULL || vt->search == NULL || vt->health == NULL) {
        why = "vtable lacks one of create/destroy/search/health";
    }
    if (why != NULL) {
        snprintf(err, err_size, "%s: %s", path, why);
        dlclose(dl);
        return -1;
    }
    p->dl = dl;
    p->vt = vt;
    p->path = sg_strdup(path);
    return 0;
}

void sg_plugin_unload(sg_plugin_t *p)
{
    /* Under AddressSanitizer keep the object mapped so leak reports can still symbolise it. */
#if !defined(__SANITIZE_ADDRESS__)
    if (p->dl != NULL)
        dlclose(p->dl);
#endif
    free(p->path);
    memset(p, 0, sizeof(*p));
}

int sg_plugin_serves_access(const sg_plugin_t *p, sg_backend *inst)
{
    const sg_backend_vtable *vt = p->vt;
    if (vt->access == NULL)
        return 0;
    if (vt->abi_minor < 1 || vt->struct_size < offsetof(sg_backend_vtable, has_access) + sizeof(vt->has_access) ||
        vt->has_access == NULL)
        return 1;
    return vt->has_access(inst) != 0;
}

static void host_log(int level, const char *backend, const char *fmt, ...) SG_PRINTF(3, 4);
static void host_log(int level, const char *backend, const char *fmt, ...)
{
    if (!sg_log_enabled(level))
        return;
    char subsys[96];
    snprintf(subsys, sizeof(subsys), "backend:%s", backend != NULL ? backend : "?");
    va_list ap;
    va_start(ap, fmt);
    sg__vlog(level, subsys, fmt, ap);
    va_end(ap);
}

static uint64_t host_now_ms(void)
{
    return sg_now_ms();
}

/* The admission services (retry_at, hold, release) are the pipeline's: dispatch lends them at its
 * start-up (sg_plugin_lend_admission), before any plugin instance is created. */
static sg_host_api host_api = {
    .struct_size = sizeof(sg_host_api),
    .abi_minor = SG_BACKEND_ABI_MINOR,
    .log = host_log,
    .now_ms = host_now_ms,
    .metric = sg_metrics_plugin_sample,
};

void sg_plugin_lend_admission(uint64_t (*retry_at)(void *admission, uint64_t earliest_ms), void (*hold)(void *admission),
                              void (*release)(void *admission))
{
    host_api.retry_at = retry_at;
    host_api.hold = hold;
    host_api.release = release;
}

sg_check_params_fn sg_plugin_check_params(const sg_backend_vtable *vt)
{
    if (vt->struct_size < offsetof(sg_backend_vtable, check_params) + sizeof(vt->check_params))
        return NULL;
    return vt->check_params;
}

const sg_host_api *sg_plugin_host_api(void)
{
    return &host_api;
}

int sg_plugin_status_http(sg_status st)
{
    switch (st) {
    case SG_OK:
        return 200;
    case SG_EINVAL:
        return 422;
    case SG_ETOOBIG:
        return 413;
    case SG_ETIMEDOUT:
        return 504;
    case SG_EUPSTREAM:
        return 502;
    case SG_EINTERNAL:
        return 500;
    case SG_ENOMEM:
    case SG_EUNAVAIL:
    case SG_EOVERLOAD:
    case SG_ECANCELED:
        return 503;
    }
    return 500;
}

const char *sg_plugin_status_name(sg_status st)
{
    switch (st) {
    case SG_OK:
        return "ok";
    case SG_EINVAL:
        return "invalid_request";
    case SG_ENOMEM:
        return "out_of_memory";
    case SG_ETIMEDOUT:
        return "timeout";
    case SG_EUNAVAIL:
        return "unavailable";
    case SG_EUPSTREAM:
        return "upstream_error";
    case SG_EOVERLOAD:
        return "overloaded";
    case SG_ECANCELED:
        return "canceled";
    case SG_EINTERNAL:
        return "internal_error";
    case SG_ETOOBIG:
        return "too_large";
    }
    return "internal_error";
}

void sg_metrics_plugin_sample(void *sinkp, const char *name, const char *help, int type, const char *labels, double value)
{
    sg_metrics_sink_t *sink = sinkp;
    if (sink == NULL || name == NULL)
        return;
    /* only [a-zA-Z0-9_:] may appear in a metric name; drop anything else rather than break the exposition */
    for (const char *p = name; *p != '\0'; ++p)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == ':'))
            return;
    if (sink->json != NULL) {
        char key[512];
        snprintf(key, sizeof(key), "%s%s%s%s", name, labels != NULL && labels[0] != '\0' ? "{" : "", labels != NULL ? labels : "",
                 labels != NULL && labels[0] != '\0' ? "}" : "");
        sg_jw_key(sink->json, key);
        sg_jw_double(sink->json, value);
        return;
    }
    if (strcmp(sink->last_name, name) != 0) {
        sg_buf_appendf(sink->out, "# HELP searchgate_backend_%s %s\n# TYPE searchgate_backend_%s %s\n", name,
                       help != NULL ? help : "", name, type == SG_METRIC_COUNTER ? "counter" : "gauge");
        snprintf(sink->last_name, sizeof(sink->last_name), "%s", name);
    }
    sg_buf_appendf(sink->out, "searchgate_backend_%s{backend=\"%s\"%s%s} ", name, sink->backend,
                   labels != NULL && labels[0] != '\0' ? "," : "", labels != NULL ? labels : "");
    sg_metrics_render_value(sink->out, value);
    sg_buf_appendc(sink->out, '\n');
}
