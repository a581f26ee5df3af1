/*
 * assembly.h -- what the unit tests of the assembly (test_build.c, test_reload.c) share: a
 * temporary folder for config files and the files they name, the server as main.c sets it up
 * before its first generation (the start-up config, the generation mutex, dispatch and budgets),
 * and configs of routes over the example plugin (build/plugins/sg_example.so).
 */
#ifndef SG_TEST_ASSEMBLY_H
#define SG_TEST_ASSEMBLY_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "build.h"
#include "runtime.h"
#include "budget.h"
#include "dispatch.h"

/* A route "NAME" over the example plugin answering from one document whose text is `word`. */
#define EX_ROUTE(name, word)                                                                                                       \
    "{\"name\":\"" name "\",\"plugin\":\"example\",\"config\":{\"documents\":[{\"id\":\"" word "\",\"contents\":\"" word "\"}]}}"

static char asm_dir[64];          /* the temporary folder */
static char asm_config[128];      /* its config file */
static sg_config_t asm_start_cfg; /* the server's start-up config */
static sg_server_t asm_server;

/* Writes `text` to `name` in the temporary folder. */
static inline void asm_write(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", asm_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* The config `json` (its file written first), loaded; fails the test when the config is invalid. */
static inline sg_config_t *asm_load(const char *json)
{
    asm_write("config.json", json);
    sg_config_t *cfg = sg_mem_calloc(1, sizeof(*cfg));
    char err[1024];
    if (sg_config_load(cfg, asm_config, err, sizeof(err)) != 0)
        fail_msg("config: %s", err);
    return cfg;
}

/* The server main.c sets up, started with `json`; `bury` is what a generation's last release
 * hands it to. */
static inline void asm_server_init(const char *json)
{
    snprintf(asm_dir, sizeof(asm_dir), "/tmp/sg_test_asm.XXXXXX");
    assert_non_null(mkdtemp(asm_dir));
    snprintf(asm_config, sizeof(asm_config), "%s/config.json", asm_dir);
    sg_config_t *cfg = asm_load(json);
    asm_start_cfg = *cfg;
    free(cfg);
    memset(&asm_server, 0, sizeof(asm_server));
    asm_server.cfg = &asm_start_cfg;
    asm_server.log_level_override = -1;
    pthread_mutex_init(&asm_server.gen_mutex, NULL);
    sg_dispatch_init();
    sg_budget_init(0, NULL);
}

static inline void asm_server_dispose(void)
{
    sg_dispatch_dispose();
    sg_budget_dispose();
    pthread_mutex_destroy(&asm_server.gen_mutex);
    sg_config_free(&asm_start_cfg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", asm_dir);
    assert_int_equal(system(cmd), 0);
    sg_metrics_reset();
}

/* A counter's value by name and labels. */
static inline uint64_t asm_counter(const char *name, const char *labels)
{
    return atomic_load(&sg_metrics_counter(name, "", labels)->v);
}

static inline int64_t asm_gauge(const char *name, const char *labels)
{
    return atomic_load(&sg_metrics_gauge(name, "", labels)->v);
}

#endif
