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

/**
 * Parses a config document strictly: exactly one JSON value as RFC 8259 defines it
 * (sg_json_validate: no trailing garbage, no second document after the first, no invalid UTF-8)
 * in which no object has the same key twice, at any depth (cJSON would silently read the first).
 * Returns the tree (the caller deletes it), or NULL with the error in c->err: the line, column and
 * byte of a syntax error, or the key path of a duplicate ("<c->path>.backends[1].config.index:
 * duplicate key ..."). c->path prefixes every message ("" at the top level).
 */
cJSON *sg_cfg_parse(sg_cfg_t *c, const char *json, size_t len);
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

/* ---- declarative configuration: one table per plugin ----
 *
 * A plugin lists its config keys once, in a table of sg_cfg_key_t, in the order its error message
 * for an unknown key lists them; sg_cfg_read() checks the object's keys against the table and
 * reads every entry into the plugin's struct (at `offset`, an integer of `size` bytes), with the
 * same messages as the sg_cfg_* functions above. Keys whose reading is truly specific to the
 * plugin (a default computed at run time, a nested object, a list) are SG_CFG_CUSTOM entries: the
 * table names them (so they are allowed and documented) and the plugin reads them itself.
 * tests/lint/test_config_docs.py checks every table against its docs/backends/<plugin>.md, and the
 * gateway's (gateway/, lib/) against docs/configuration.md or the page its PAGES names. */

enum { SG_CFG_CUSTOM, SG_CFG_INT, SG_CFG_DOUBLE, SG_CFG_BOOL, SG_CFG_STRING, SG_CFG_PATH, SG_CFG_ENUM, SG_CFG_TEXT };

typedef struct st_sg_cfg_key_t {
    const char *key;
    int type;                   /* SG_CFG_* */
    size_t offset, size;        /* the destination in the plugin's struct */
    int64_t min, max, def;      /* SG_CFG_INT; def is also the default of BOOL and ENUM (an index) */
    double dmin, dmax, ddef;    /* SG_CFG_DOUBLE */
    int required;               /* SG_CFG_STRING, SG_CFG_PATH */
    const char *sdef;           /* SG_CFG_STRING default (NULL: none) */
    const char *const *choices; /* SG_CFG_ENUM, NULL-terminated */
    size_t maxlen;              /* SG_CFG_TEXT: the value is shorter than this (0: any length) */
    const char *expect;         /* SG_CFG_TEXT: what a wrong value's message says was expected (NULL: a string) */
} sg_cfg_key_t;

#define SG_CFG_FIELD_(T, f) offsetof(T, f), sizeof(((T *)0)->f)
/** An integer in [min, max], default `def`, stored in T.f (any integer type). */
#define SG_CFG_INT(T, f, key, min, max, def)                                                                                       \
    {                                                                                                                              \
        (key), SG_CFG_INT, SG_CFG_FIELD_(T, f), (min), (max), (def), 0, 0, 0, 0, NULL, NULL, 0, NULL                               \
    }
/** A number in [min, max], default `def`, stored in the double T.f. */
#define SG_CFG_DOUBLE(T, f, key, min, max, def)                                                                                    \
    {                                                                                                                              \
        (key), SG_CFG_DOUBLE, SG_CFG_FIELD_(T, f), 0, 0, 0, (min), (max), (def), 0, NULL, NULL, 0, NULL                            \
    }
/** A boolean, default `def`, stored in the int T.f. */
#define SG_CFG_BOOL(T, f, key, def)                                                                                                \
    {                                                                                                                              \
        (key), SG_CFG_BOOL, SG_CFG_FIELD_(T, f), 0, 0, (def), 0, 0, 0, 0, NULL, NULL, 0, NULL                                      \
    }
/** A string (malloc'ed into the char * T.f), required or with default `def` (may be NULL). */
#define SG_CFG_STRING(T, f, key, required, def)                                                                                    \
    {                                                                                                                              \
        (key), SG_CFG_STRING, SG_CFG_FIELD_(T, f), 0, 0, 0, 0, 0, 0, (required), (def), NULL, 0, NULL                              \
    }
/** A path resolved against the config's directory (malloc'ed into the char * T.f). */
#define SG_CFG_PATH(T, f, key, required)                                                                                           \
    {                                                                                                                              \
        (key), SG_CFG_PATH, SG_CFG_FIELD_(T, f), 0, 0, 0, 0, 0, 0, (required), NULL, NULL, 0, NULL                                 \
    }
/** One of `choices`, its index stored in the int T.f, default index `def`. */
#define SG_CFG_ENUM(T, f, key, choices, def)                                                                                       \
    {                                                                                                                              \
        (key), SG_CFG_ENUM, SG_CFG_FIELD_(T, f), 0, 0, (def), 0, 0, 0, 0, NULL, (choices), 0, NULL                                 \
    }
/**
 * A string that may be empty ("" usually means "leave it out"), malloc'ed into the char * T.f,
 * default `def`; shorter than `maxlen` bytes unless 0. `expect` (or NULL) replaces "expected a
 * string" in the message for a wrong value.
 */
#define SG_CFG_TEXT(T, f, key, def, maxlen, expect)                                                                                \
    {                                                                                                                              \
        (key), SG_CFG_TEXT, SG_CFG_FIELD_(T, f), 0, 0, 0, 0, 0, 0, 0, (def), NULL, (maxlen), (expect)                              \
    }
/** A key the plugin reads itself (allowed and documented, not read by sg_cfg_read()). */
#define SG_CFG_CUSTOM_KEY(key)                                                                                                     \
    {                                                                                                                              \
        (key), SG_CFG_CUSTOM, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, NULL                                                       \
    }

/** The number of entries of a table. */
#define SG_CFG_N(table) (sizeof(table) / sizeof((table)[0]))

/**
 * Checks that `obj` is an object whose keys all appear in `table` (n entries), then reads every
 * entry that is not SG_CFG_CUSTOM, in table order, into `dst`. `base_dir` resolves SG_CFG_PATH.
 * Returns 0, or -1 with the first error in c->err (the message the sg_cfg_* function gives).
 * A NULL `obj` is an absent object: every entry takes its default (a required one fails).
 */
int sg_cfg_read(sg_cfg_t *c, const cJSON *obj, const sg_cfg_key_t *table, size_t n, const char *base_dir, void *dst);

/** Flags of sg_cfg_read_ex(). */
enum {
    /** The caller has checked the object's keys (its keys are this table's and another's). */
    SG_CFG_KEYS_CHECKED = 1,
    /** An absent (or null) key leaves its destination as it is: the caller put the inherited value
     * there (e.g. a keyed client's quota defaults to clients.default's). A required key still fails. */
    SG_CFG_OVERLAY = 2
};
/** sg_cfg_check_keys() with the keys of `table` (n entries, at most 64) as the allowed list: what
 * sg_cfg_read() checks first, for a reader that then reads the table in slices (SG_CFG_KEYS_CHECKED)
 * or not at all. Returns 0, or -1 with the message in `c`. */
int sg_cfg_check_table(sg_cfg_t *c, const cJSON *obj, const sg_cfg_key_t *table, size_t n);
/** sg_cfg_read() with SG_CFG_* flags (0: exactly sg_cfg_read()). */
int sg_cfg_read_ex(sg_cfg_t *c, const cJSON *obj, const sg_cfg_key_t *table, size_t n, const char *base_dir, void *dst, int flags);
/**
 * Appends the keys of `table` (n entries) to the allowed-key list `allowed` of `len` entries and
 * `cap` slots, and NULL-terminates it: the list sg_cfg_check_keys() takes for an object whose keys
 * are those of several tables. Returns the new length (a full list is cut short, never overrun).
 */
size_t sg_cfg_table_keys(const sg_cfg_key_t *table, size_t n, const char **allowed, size_t len, size_t cap);

/** 1 when `obj` has `key` with a value other than null (a key whose absence means "not set"). */
int sg_cfg_present(const cJSON *obj, const char *key);

#endif
