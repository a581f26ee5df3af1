/*
 * cfg.h -- validated reads from a cJSON config object, shared by the gateway and the plugins.
 *
 * Every function writes "<path>.<key>: <what was expected>, got <value>" into `err` on failure and
 * returns -1; 0 on success. A missing key takes the default (or fails when the key is required).
 */
#ifndef SG_LIB_CFG_H
#define SG_LIB_CFG_H

#include <stddef.h>
#include <stdint.h>
#include <cJSON.h>

typedef struct st_sg_cfg_t {
    const char *path; /* dotted path of the object being read, e.g. "backends[0].config" */
    char *err;
    size_t err_size;
} sg_cfg_t;

/** Fails when `obj` is not an object or has a key outside the NULL-terminated `allowed` list. */
int sg_cfg_check_keys(sg_cfg_t *c, const cJSON *obj, const char *const *allowed);
int sg_cfg_int(sg_cfg_t *c, const cJSON *obj, const char *key, int64_t min, int64_t max, int64_t def, int64_t *out);
int sg_cfg_double(sg_cfg_t *c, const cJSON *obj, const char *key, double min, double max, double def, double *out);
int sg_cfg_bool(sg_cfg_t *c, const cJSON *obj, const char *key, int def, int *out);
/** `*out` is a malloc'ed copy (or NULL when absent and `def` is NULL). */
int sg_cfg_string(sg_cfg_t *c, const cJSON *obj, const char *key, int required, const char *def, char **out);
/** Like sg_cfg_string, and the value must be one of the NULL-terminated `choices`; `*out` is its index. */
int sg_cfg_enum(sg_cfg_t *c, const cJSON *obj, const char *key, const char *const *choices, int def, int *out);
/** Reads a path and resolves it against `base_dir` when relative; `*out` is malloc'ed. */
int sg_cfg_path(sg_cfg_t *c, const cJSON *obj, const char *key, int required, const char *base_dir, char **out);
/**
 * Reads the name of an environment variable from `key` and the secret from that variable.
 * `*out` is malloc'ed, or NULL when the key is absent and not required. A named variable that is
 * unset or empty is an error (the message names the variable, never its value).
 */
int sg_cfg_secret_env(sg_cfg_t *c, const cJSON *obj, const char *key, int required, char **out);
/** Formats an error for a key of the current object. */
int sg_cfg_fail(sg_cfg_t *c, const char *key, const cJSON *value, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/** Joins base_dir and p unless p is absolute; malloc'ed. */
char *sg_cfg_resolve(const char *base_dir, const char *p);

#endif
