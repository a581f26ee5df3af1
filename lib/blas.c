/*
 * blas.c -- BLAS kernels chosen from the CPU's features (blas.h).
 */
#include "blas.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static const char *const feature_names[SG_CPU_N_FEATURES] = {"sse3",     "avx",         "fma",      "avx2",        "avx512f",
                                                             "avx512bw", "avx512dq",    "avx512vl", "avx512_bf16", "amx_tile",
                                                             "amx_bf16", "avx512_vnni", "amx_int8"};

/* The environment variables of the re-exec hand-off: what OpenBLAS picked before we forced it. */
#define ENV_DEFAULT "SG_BLAS_DEFAULT_CORE"
#define ENV_FORCED "SG_BLAS_FORCED_CORE"

const char *sg_cpu_feature_name(unsigned bit_index)
{
    return bit_index < SG_CPU_N_FEATURES ? feature_names[bit_index] : "?";
}

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

void sg_cpu_read(sg_cpu_t *cpu)
{
    memset(cpu, 0, sizeof(*cpu));
    snprintf(cpu->vendor, sizeof(cpu->vendor), "unknown");
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0, max_leaf = 0;
    if (!__get_cpuid(0, &max_leaf, &b, &c, &d))
        return;
    memcpy(cpu->vendor, &b, 4);
    memcpy(cpu->vendor + 4, &d, 4);
    memcpy(cpu->vendor + 8, &c, 4);
    cpu->vendor[12] = '\0';
    __get_cpuid(1, &a, &b, &c, &d);
    unsigned fam = (a >> 8) & 0xf, mod = (a >> 4) & 0xf;
    if (fam == 0xf)
        fam += (a >> 20) & 0xff;
    if (fam == 0x6 || fam >= 0xf)
        mod |= ((a >> 16) & 0xf) << 4;
    cpu->family = fam;
    cpu->model = mod;
    uint32_t f = 0;
    if (c & (1u << 0))
        f |= SG_CPU_SSE3;
    /* AVX state must be enabled by the OS (OSXSAVE, XCR0 bits 1-2); AVX-512 needs bits 5-7, AMX 17-18 */
    int os_avx = 0, os_avx512 = 0, os_amx = 0;
    if ((c & (1u << 27)) != 0) {
        uint64_t xcr0 = xgetbv0();
        os_avx = (xcr0 & 0x6) == 0x6;
        os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
        os_amx = (xcr0 & 0x60000) == 0x60000;
    }
    if (os_avx && (c & (1u << 28)))
        f |= SG_CPU_AVX;
    if (os_avx && (c & (1u << 12)))
        f |= SG_CPU_FMA;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        unsigned max_sub = a;
        if (os_avx && (b & (1u << 5)))
            f |= SG_CPU_AVX2;
        if (os_avx512) {
            if (b & (1u << 16))
                f |= SG_CPU_AVX512F;
            if (b & (1u << 17))
                f |= SG_CPU_AVX512DQ;
            if (b & (1u << 30))
                f |= SG_CPU_AVX512BW;
            if (b & (1u << 31))
                f |= SG_CPU_AVX512VL;
            if (c & (1u << 11))
                f |= SG_CPU_AVX512_VNNI;
        }
        if (os_amx && (d & (1u << 24)))
            f |= SG_CPU_AMX_TILE;
        if (os_amx && (d & (1u << 22)))
            f |= SG_CPU_AMX_BF16;
        if (os_amx && (d & (1u << 25)))
            f |= SG_CPU_AMX_INT8;
        if (max_sub >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            if (os_avx512 && (a & (1u << 5)))
                f |= SG_CPU_AVX512_BF16;
        }
    }
    cpu->detected = cpu->features = f;
#endif
}

int sg_cpu_restrict(sg_cpu_t *cpu, const char *list, char *err, size_t err_size)
{
    uint32_t keep = 0;
    const char *p = list;
    while (*p != '\0') {
        while (*p == ',' || *p == ' ')
            ++p;
        if (*p == '\0')
            break;
        size_t n = strcspn(p, ", ");
        unsigned i;
        for (i = 0; i < SG_CPU_N_FEATURES; ++i)
            if (strlen(feature_names[i]) == n && memcmp(feature_names[i], p, n) == 0)
                break;
        if (i == SG_CPU_N_FEATURES) {
            snprintf(err, err_size,
                     "SG_CPU_FEATURES: unknown feature \"%.*s\" (known: sse3 avx fma avx2 avx512f avx512bw avx512dq "
                     "avx512vl avx512_bf16 amx_tile amx_bf16 avx512_vnni amx_int8)",
                     (int)(n > 40 ? 40 : n), p);
            return -1;
        }
        keep |= 1u << i;
        p += n;
    }
    cpu->features = cpu->detected & keep;
    return 0;
}

void sg_cpu_describe(uint32_t features, char *out, size_t out_size)
{
    size_t used = 0;
    if (out_size == 0)
        return;
    out[0] = '\0';
    for (unsigned i = 0; i < SG_CPU_N_FEATURES; ++i) {
        if (!(features & (1u << i)))
            continue;
        int w = snprintf(out + used, out_size - used, "%s%s", used ? " " : "", feature_names[i]);
        if (w < 0 || (size_t)w >= out_size - used)
            break;
        used += (size_t)w;
    }
    if (used == 0)
        snprintf(out, out_size, "none");
}

int sg_cpu_has_bf16(const sg_cpu_t *cpu)
{
    return (cpu->features & (SG_CPU_AVX512_BF16 | SG_CPU_AMX_BF16)) != 0;
}

#define AVX512_CORE (SG_CPU_AVX512F | SG_CPU_AVX512BW | SG_CPU_AVX512DQ | SG_CPU_AVX512VL)

int sg_blas_core_rank(const char *core)
{
    static const struct {
        const char *name;
        int rank;
    } table[] = {
        /* OpenBLAS 0.3.x DYNAMIC_ARCH x86_64 kernel sets, as openblas_get_corename() spells them */
        {"Katmai", 1},       {"Coppermine", 1},     {"Northwood", 1},  {"Prescott", 1}, {"Banias", 1},      {"Atom", 1},
        {"Core2", 1},        {"Penryn", 1},         {"Dunnington", 1}, {"Nehalem", 1},  {"Athlon", 1},      {"Opteron", 1},
        {"Opteron_SSE3", 1}, {"Barcelona", 1},      {"Nano", 1},       {"Bobcat", 1},   {"Sandybridge", 2}, {"Bulldozer", 2},
        {"Piledriver", 2},   {"Steamroller", 2},    {"Excavator", 2},  {"Haswell", 3},  {"Zen", 3},         {"SkylakeX", 4},
        {"Cooperlake", 5},   {"SapphireRapids", 5},
    };
    if (core == NULL)
        return -1;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); ++i)
        if (strcasecmp(core, table[i].name) == 0)
            return table[i].rank;
    return -1;
}

const char *sg_blas_best_core(const sg_cpu_t *cpu)
{
    uint32_t f = cpu->features;
    int amd = strcmp(cpu->vendor, "AuthenticAMD") == 0 || strcmp(cpu->vendor, "HygonGenuine") == 0;
    if ((f & AVX512_CORE) == AVX512_CORE && (f & SG_CPU_FMA))
        return (f & SG_CPU_AVX512_BF16) ? "Cooperlake" : "SkylakeX";
    if ((f & (SG_CPU_AVX2 | SG_CPU_FMA)) == (SG_CPU_AVX2 | SG_CPU_FMA))
        return amd ? "Zen" : "Haswell";
    if (f & SG_CPU_AVX)
        return "Sandybridge";
    return NULL;
}

const char *sg_blas_decide(const sg_cpu_t *cpu, const char *default_core, const char *user_core, sg_blas_choice_t *out)
{
    char feats[160];
    sg_cpu_describe(cpu->features, feats, sizeof(feats));
    const char *best = sg_blas_best_core(cpu);
    if (user_core != NULL && user_core[0] != '\0') {
        /* with the user's setting, `default_core` is what the library runs under it */
        snprintf(out->core, sizeof(out->core), "%s", default_core != NULL ? default_core : user_core);
        snprintf(out->source, sizeof(out->source), "user");
        snprintf(out->reason, sizeof(out->reason), "OPENBLAS_CORETYPE=%s set by the user (this CPU's features: %s)", user_core,
                 feats);
        return NULL;
    }
    snprintf(out->default_core, sizeof(out->default_core), "%s", default_core != NULL ? default_core : "");
    snprintf(out->core, sizeof(out->core), "%s", default_core != NULL ? default_core : "unknown");
    snprintf(out->source, sizeof(out->source), "library");
    int have = sg_blas_core_rank(default_core), want = sg_blas_core_rank(best);
    if (best == NULL) {
        snprintf(out->reason, sizeof(out->reason),
                 "the library's own choice; this CPU (%s family %u model %u) has no AVX (features: %s)", cpu->vendor, cpu->family,
                 cpu->model, feats);
        return NULL;
    }
    if (have < 0) {
        snprintf(out->reason, sizeof(out->reason),
                 "the library's own choice (%s is not a kernel set this table ranks); features: %s",
                 default_core != NULL ? default_core : "unknown", feats);
        return NULL;
    }
    if (have >= want) {
        snprintf(out->reason, sizeof(out->reason),
                 "the library's own choice for this CPU (%s family %u model %u), as good as its "
                 "features allow (%s)",
                 cpu->vendor, cpu->family, cpu->model, feats);
        return NULL;
    }
    snprintf(out->core, sizeof(out->core), "%s", best);
    snprintf(out->source, sizeof(out->source), "cpu-features");
    snprintf(out->reason, sizeof(out->reason),
             "OpenBLAS picks %s for this CPU (%s family %u model %u) by its model number, but its "
             "features (%s) run %s kernels: OPENBLAS_CORETYPE=%s",
             default_core, cpu->vendor, cpu->family, cpu->model, feats, best, best);
    return best;
}

/* The version part of openblas_get_config() ("OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."). */
static void library_name(void *h, char *out, size_t n)
{
    char *(*config)(void) = (char *(*)(void))dlsym(h, "openblas_get_config");
    const char *s = config != NULL ? config() : NULL;
    if (s == NULL) {
        snprintf(out, n, "OpenBLAS");
        return;
    }
    const char *sp = strchr(s, ' ');
    const char *end = sp != NULL ? strchr(sp + 1, ' ') : NULL;
    int len = end != NULL ? (int)(end - s) : (int)strlen(s);
    snprintf(out, n, "%.*s", len, s);
}

int sg_blas_tune(char **argv, sg_blas_choice_t *out)
{
    memset(out, 0, sizeof(*out));
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL) {
        snprintf(out->library, sizeof(out->library), "none");
        snprintf(out->source, sizeof(out->source), "none");
        snprintf(out->reason, sizeof(out->reason), "no OpenBLAS loaded by this configuration");
        return 0;
    }
    library_name(h, out->library, sizeof(out->library));
    char *(*corename)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
    const char *core = corename != NULL ? corename() : NULL;
    sg_cpu_t cpu;
    sg_cpu_read(&cpu);
    const char *mask = getenv("SG_CPU_FEATURES");
    if (mask != NULL && sg_cpu_restrict(&cpu, mask, out->reason, sizeof(out->reason)) != 0) {
        dlclose(h);
        return -1;
    }
    const char *forced_default = getenv(ENV_DEFAULT), *forced = getenv(ENV_FORCED), *user = getenv("OPENBLAS_CORETYPE");
    if (forced_default != NULL && forced != NULL && user != NULL && strcmp(user, forced) == 0) {
        /* the second run, after the re-exec below set OPENBLAS_CORETYPE */
        sg_blas_decide(&cpu, forced_default, NULL, out);
        snprintf(out->core, sizeof(out->core), "%s", core != NULL ? core : "unknown");
        if (core == NULL || strcasecmp(core, forced) != 0) {
            snprintf(out->source, sizeof(out->source), "library");
            size_t l = strlen(out->reason);
            snprintf(out->reason + l, sizeof(out->reason) - l, "; but the library ignored it and runs %s", out->core);
        }
        dlclose(h);
        return 0;
    }
    /* a diagnostic: behave as if the library had picked this core (how a CPU that OpenBLAS does
     * not know is reproduced on one it knows; docs/backends/local.md) */
    const char *sim = getenv("SG_BLAS_SIMULATE_DEFAULT_CORE");
    if (sim != NULL && sim[0] != '\0' && user == NULL)
        core = sim;
    const char *set = sg_blas_decide(&cpu, core, user, out);
    dlclose(h);
    if (set == NULL || argv == NULL)
        return 0;
    setenv("OPENBLAS_CORETYPE", set, 1);
    setenv(ENV_FORCED, set, 1);
    setenv(ENV_DEFAULT, core, 1);
    execv("/proc/self/exe", argv);
    /* exec failed: run on with the library's own choice, and say so */
    int e = errno;
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(ENV_FORCED);
    unsetenv(ENV_DEFAULT);
    snprintf(out->core, sizeof(out->core), "%s", core);
    snprintf(out->source, sizeof(out->source), "library");
    size_t l = strlen(out->reason);
    snprintf(out->reason + l, sizeof(out->reason) - l, "; but re-executing to apply it failed (%s)", strerror(e));
    return 0;
}
