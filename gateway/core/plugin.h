/*
 * plugin.h -- loading backend plugins (dlopen) and the host services table lent to them.
 */
#ifndef SG_GATEWAY_PLUGIN_H
#define SG_GATEWAY_PLUGIN_H

#include <stddef.h>
#include "sg_backend.h"
#include "buf.h"
#include "json.h"

typedef struct st_sg_plugin_t {
    void *dl;
    const sg_backend_vtable *vt;
    char *path;
} sg_plugin_t;

/**
 * dlopen()s `path` with RTLD_NOW|RTLD_LOCAL, looks up sg_backend_entry and checks the vtable
 * header (ABI major/minor, struct size, mandatory functions). On failure returns -1, writes
 * "<path>: <reason>" into `err` and leaves nothing open.
 */
int sg_plugin_load(sg_plugin_t *p, const char *path, char *err, size_t err_size);
void sg_plugin_unload(sg_plugin_t *p);
/**
 * Whether the created instance `inst` serves POST /access: the plugin has access() and, from ABI
 * 1.1, its has_access() (when present) says yes. Main thread, after create().
 */
int sg_plugin_serves_access(const sg_plugin_t *p, sg_backend *inst);
/**
 * The plugin's check_params (ABI 1.1), or NULL when it has none: not set, or a table from a 1.0
 * plugin whose struct_size ends before the member.
 */
typedef sg_status (*sg_check_params_fn)(sg_backend *, const char *, size_t, char *, size_t, char *, size_t);
sg_check_params_fn sg_plugin_check_params(const sg_backend_vtable *vt);
/** The host services table every plugin receives in create(). */
const sg_host_api *sg_plugin_host_api(void);
/** Fills the table's admission services (ABI 1.3 retry_at, 1.4 hold / release): the dispatcher's,
 * lent once at start-up (sg_dispatch_init) before any plugin instance is created. Main thread. */
void sg_plugin_lend_admission(uint64_t (*retry_at)(void *admission, uint64_t earliest_ms), void (*hold)(void *admission),
                              void (*release)(void *admission));
/** HTTP status for a plugin status code. */
int sg_plugin_status_http(sg_status st);
/** Short machine-readable name ("unavailable", "timeout", ...) of a status code. */
const char *sg_plugin_status_name(sg_status st);

/**
 * The sink handed to plugin stats(): plugin samples are rendered with a backend label into `out`
 * (Prometheus text), or, when `json` is set, as "name{labels}": value members of the object it is
 * inside (/stats).
 */
typedef struct st_sg_metrics_sink_t {
    sg_buf_t *out;
    const char *backend;
    char last_name[128];
    sg_jw_t *json;
} sg_metrics_sink_t;
void sg_metrics_plugin_sample(void *sink, const char *name, const char *help, int type, const char *labels, double value);

#endif
