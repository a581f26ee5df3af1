/*
 * blas.h -- which BLAS kernels a process runs, chosen from the CPU's features rather than its
 * model number (docs/backends/local.md, "BLAS kernels").
 *
 * Debian's OpenBLAS is built with DYNAMIC_ARCH: at load it picks a kernel set ("core") from the
 * cpuid family/model. A CPU newer than the library (e.g. a Xeon model it does not list) gets the
 * SSE3 `Prescott` kernels, 3-4x slower than the AVX-512 ones the CPU could run. The choice can only
 * be changed through OPENBLAS_CORETYPE before the library is loaded, so a process that finds a
 * weaker core than its CPU's features allow sets the variable and re-executes itself once.
 *
 *   sg_cpu_read()      cpuid + xgetbv (the OS must enable the AVX/AVX-512/AMX register state)
 *   sg_blas_decide()   pure: features + the library's own pick + the user's setting -> choice
 *   sg_blas_tune()     the process-level step: inspect the loaded OpenBLAS, decide, re-exec
 *
 * SG_CPU_FEATURES (e.g. "avx2,fma") restricts the features the decision sees to that list: a
 * diagnostic and testing aid that can only take features away, never claim absent ones.
 * SG_BLAS_SIMULATE_DEFAULT_CORE (e.g. "Prescott") makes the decision behave as if OpenBLAS had
 * picked that core by itself: how the CPU-OpenBLAS-does-not-know case is reproduced on one it knows.
 */
#ifndef SG_LIB_BLAS_H
#define SG_LIB_BLAS_H

#include <stddef.h>
#include <stdint.h>

enum {
    SG_CPU_SSE3 = 1u << 0,
    SG_CPU_AVX = 1u << 1,
    SG_CPU_FMA = 1u << 2,
    SG_CPU_AVX2 = 1u << 3,
    SG_CPU_AVX512F = 1u << 4,
    SG_CPU_AVX512BW = 1u << 5,
    SG_CPU_AVX512DQ = 1u << 6,
    SG_CPU_AVX512VL = 1u << 7,
    SG_CPU_AVX512_BF16 = 1u << 8,
    SG_CPU_AMX_TILE = 1u << 9,
    SG_CPU_AMX_BF16 = 1u << 10,
    SG_CPU_AVX512_VNNI = 1u << 11, /* int8 dot products of four bytes (vpdpbusd) */
    SG_CPU_AMX_INT8 = 1u << 12,
    SG_CPU_N_FEATURES = 13
};

typedef struct st_sg_cpu_t {
    char vendor[13]; /* "GenuineIntel", "AuthenticAMD", ... */
    unsigned family, model;
    uint32_t detected; /* SG_CPU_* bits usable on this machine (CPU and OS) */
    uint32_t features; /* what decisions use: detected, restricted by SG_CPU_FEATURES */
} sg_cpu_t;

/** Reads this machine's CPU. */
void sg_cpu_read(sg_cpu_t *cpu);
/**
 * Restricts cpu->features to the comma-separated `list` (names as sg_cpu_feature_name gives).
 * Returns 0, or -1 with `err` set for an unknown name. Names the CPU lacks are ignored.
 */
int sg_cpu_restrict(sg_cpu_t *cpu, const char *list, char *err, size_t err_size);
const char *sg_cpu_feature_name(unsigned bit_index);
/** "avx2 fma avx512f ..." (space-separated; "none" for an empty set). */
void sg_cpu_describe(uint32_t features, char *out, size_t out_size);
/** Whether bf16 matrix products run natively: AVX512_BF16 or AMX-BF16. */
int sg_cpu_has_bf16(const sg_cpu_t *cpu);

/**
 * OpenBLAS core names by SIMD level: 1 SSE*, 2 AVX, 3 AVX2+FMA, 4 AVX-512, 5 AVX-512 with bf16;
 * -1 for a name this table does not know (then nothing is changed).
 */
int sg_blas_core_rank(const char *core);
/** The strongest OpenBLAS core these features run (e.g. "SkylakeX"), or NULL when none beats SSE. */
const char *sg_blas_best_core(const sg_cpu_t *cpu);

typedef struct st_sg_blas_choice_t {
    char library[64];      /* "OpenBLAS 0.3.21", or "none" when no OpenBLAS is loaded */
    char core[32];         /* the kernels running */
    char default_core[32]; /* what OpenBLAS picks by itself on this CPU ("" when unknown) */
    char source[16];       /* "library", "cpu-features", "user", "none" */
    char reason[400];      /* one sentence for the log */
} sg_blas_choice_t;

/**
 * The decision, free of side effects. `default_core` is OpenBLAS's own pick; `user_core` the
 * OPENBLAS_CORETYPE the user set (NULL: unset). Returns the core to force (a static string), or
 * NULL to keep the library's choice; `out` gets the description either way.
 */
const char *sg_blas_decide(const sg_cpu_t *cpu, const char *default_core, const char *user_core, sg_blas_choice_t *out);

/**
 * Call after every library that may bring OpenBLAS is loaded, before heavy work starts. When the
 * loaded OpenBLAS runs weaker kernels than the CPU allows and the user has not set
 * OPENBLAS_CORETYPE, sets it and re-executes /proc/self/exe with `argv` (never returns then);
 * otherwise fills `out` (also after the re-exec) and returns 0. -1 only when SG_CPU_FEATURES is
 * malformed (`out->reason` says why).
 */
int sg_blas_tune(char **argv, sg_blas_choice_t *out);

#endif
