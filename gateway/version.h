/*
 * version.h -- what `searchgate --version` prints: the version, the git revision the binary was
 * built from, the plugin ABI, and the libraries in use.
 */
#ifndef SG_GATEWAY_VERSION_H
#define SG_GATEWAY_VERSION_H

#include <stdio.h>

/**
 * Prints the version report to `fp`. `plugin_dir` is where the plugins are looked up; the
 * libraries only the plugins link (OpenBLAS, libcurl) are opened here by the names the plugins'
 * dynamic linker resolves, so the report shows the copies a start would run.
 */
void sg_version_print(FILE *fp, const char *plugin_dir);

#endif
