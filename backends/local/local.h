/*
 * local.h -- the local dense backend (docs/backends/local.md): e5 query encoder + FAISS index +
 * jsonl corpus, behind a dynamic batcher. plugin.c exports its vtable as the plugin entry.
 */
#ifndef SG_LOCAL_LOCAL_H
#define SG_LOCAL_LOCAL_H

#include "sg_backend.h"

/** The backend's vtable (abi 1.0, name "local"). */
const sg_backend_vtable *sg__local_vtable(void);

#endif
