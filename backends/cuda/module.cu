/*
 * module.cu -- the entry point of sg_local_cuda.so (see sg_cuda.h): the constant function table,
 * the GPU probe and device queries, and the memory check every allocation site goes through.
 * The encoder lives in encoder.cu, the flat search in flat.cu.
 */
#include "internal.cuh"

#include <pthread.h>
#include <string.h>

#define SGC_STR2(x) #x
#define SGC_STR(x) SGC_STR2(x)
#ifdef SGC_EMULATE
#define SGC_VERSION "sg_local_cuda 1.1.0 (EMULATED on the CPU: tests only)"
#else
#define SGC_VERSION "sg_local_cuda 1.1.0 (CUDA runtime " SGC_STR(CUDART_VERSION) ")"
#endif

static void probe(int *count, char *why, size_t why_size)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, why_size, "cudaGetDeviceCount: %s (error %d)", cudaGetErrorString(e), (int)e);
        (void)cudaGetLastError(); /* not sticky: clear it */
        *count = 0;
        return;
    }
    if (n <= 0) {
        snprintf(why, why_size, "cudaGetDeviceCount: no CUDA device");
        *count = 0;
        return;
    }
    if (why_size > 0)
        why[0] = '\0';
    *count = n;
}

static int device_info(int dev, sg_cuda_device_info *out, char *err, size_t err_size)
{
    memset(out, 0, sizeof(*out));
    cudaDeviceProp p;
    SGC_CUDA(cudaGetDeviceProperties(&p, dev));
    snprintf(out->name, sizeof(out->name), "%.127s", p.name);
    out->major = p.major;
    out->minor = p.minor;
    SGC_CUDA(cudaSetDevice(dev));
    size_t free_b = 0, total_b = 0;
    SGC_CUDA(cudaMemGetInfo(&free_b, &total_b));
    out->total_bytes = total_b;
    out->free_bytes = free_b;
    return 0;
}

int sgc_check_memory(int dev, uint64_t need, const char *what, const char *hint, char *err, size_t err_size)
{
    size_t free_b = 0, total_b = 0;
    SGC_CUDA(cudaMemGetInfo(&free_b, &total_b));
    uint64_t usable = sg_gpu_usable(free_b);
    if (need <= usable)
        return 0;
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess)
        snprintf(p.name, sizeof(p.name), "?");
    char a[32], b[32], c[32], d[32];
    snprintf(err, err_size, "GPU %d (%s): %s needs %s but only %s of its %s are free (%s usable after the CUDA/cuBLAS reserve)%s%s",
             dev, p.name, what, sg_gpu_fmt_bytes(need, a, sizeof(a)), sg_gpu_fmt_bytes(free_b, b, sizeof(b)),
             sg_gpu_fmt_bytes(total_b, c, sizeof(c)), sg_gpu_fmt_bytes(usable, d, sizeof(d)), hint[0] ? "; " : "", hint);
    return -1;
}

/* ---- sticky errors ---- */

static pthread_mutex_t sticky_mu = PTHREAD_MUTEX_INITIALIZER;
static int sticky_code[SGC_MAX_DEVICES]; /* the first sticky error of each GPU, 0 = none */
static char sticky_what[SGC_MAX_DEVICES][96];

/* The errors after which "any further CUDA work will return the same error" (CUDA runtime API
 * documentation): an ECC error, illegal address, launch timeout, device-side assert, hardware
 * stack error, illegal instruction, misaligned address, invalid address space, invalid PC,
 * unspecified launch failure. By number: the emulation does not name them all. */
static int is_sticky(int e)
{
    switch (e) {
    case 214:
    case 700:
    case 702:
    case 710:
    case 714:
    case 715:
    case 716:
    case 717:
    case 718:
    case 719:
        return 1;
    default:
        return 0;
    }
}

void sgc_note_cuda(int dev, cudaError_t e, const char *what)
{
    if (!is_sticky((int)e) || dev < 0 || dev >= SGC_MAX_DEVICES)
        return;
    pthread_mutex_lock(&sticky_mu);
    if (sticky_code[dev] == 0) {
        sticky_code[dev] = (int)e;
        snprintf(sticky_what[dev], sizeof(sticky_what[dev]), "%s", what);
    }
    pthread_mutex_unlock(&sticky_mu);
}

static int device_error(int dev, char *err, size_t err_size)
{
    if (dev < 0 || dev >= SGC_MAX_DEVICES)
        return 0;
    pthread_mutex_lock(&sticky_mu);
    const int code = sticky_code[dev];
    char what[sizeof(sticky_what[0])];
    memcpy(what, sticky_what[dev], sizeof(what));
    pthread_mutex_unlock(&sticky_mu);
    if (code == 0)
        return 0;
    snprintf(err, err_size, "GPU %d: %s (%d) in %s: its CUDA context is unusable until the process restarts", dev,
             cudaGetErrorString((cudaError_t)code), code, what);
    return -1;
}

static const sg_cuda_api api = {
    SG_CUDA_ABI_VERSION,
    sizeof(sg_cuda_api),
    SGC_VERSION,
    probe,
    device_info,
    sgc_encoder_create,
    sgc_encoder_destroy,
    sgc_encoder_ws_create,
    sgc_encoder_ws_destroy,
    sgc_encode_ids,
    sgc_flat_create,
    sgc_flat_destroy,
    sgc_flat_info,
    sgc_flat_search,
    device_error,
};

extern "C" __attribute__((visibility("default"))) const sg_cuda_api *sg_cuda_entry(void)
{
    return &api;
}
