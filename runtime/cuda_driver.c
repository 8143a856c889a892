/* cuda_driver.c: finding the CUDA driver at run time.  The first CUDA
 * context of the process dlopens libcuda.so.1 (nothing links against it, so
 * a CUDA model loads and can be inspected on any machine), resolves every
 * entry point of cuda_api.h and initialises the driver; the outcome, the
 * table or the reason there is none, is kept for the life of the process. */
#include "runtime/rt_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static rt_cuda_api api;
static int api_ok;
static char api_why[512];

static void load_driver(void)
{
    const char *lib = "libcuda.so.1";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(api_why, sizeof api_why, "the CUDA driver (%s) cannot be loaded: %s", lib, e ? e : "not found");
        return;
    }
#define RT_CUDA_RESOLVE(name, sym, params)                                                                          \
    *(void **)&api.name = dlsym(h, #sym);                                                                           \
    if (!api.name) {                                                                                                \
        snprintf(api_why, sizeof api_why, "the CUDA driver (%s) has no %s: it is older than this runtime needs",     \
                 lib, #sym);                                                                                        \
        return;                                                                                                     \
    }
    RT_CUDA_FUNCTIONS(RT_CUDA_RESOLVE)
#undef RT_CUDA_RESOLVE
    *(void **)&api.TensorMapEncodeTiled = dlsym(h, "cuTensorMapEncodeTiled"); /* optional */
    *(void **)&api.LaunchKernelEx = dlsym(h, "cuLaunchKernelEx");             /* optional */
    rt_cu_result r = api.Init(0);
    if (r != RT_CUDA_SUCCESS) {
        snprintf(api_why, sizeof api_why, "the CUDA driver does not initialise (cuInit: %s)", rt_cuda_error_string(r));
        return;
    }
    int n = 0;
    r = api.DeviceGetCount(&n);
    if (r != RT_CUDA_SUCCESS || n < 1) {
        snprintf(api_why, sizeof api_why, "no CUDA device (cuDeviceGetCount: %s, %d devices)",
                 r == RT_CUDA_SUCCESS ? "ok" : rt_cuda_error_string(r), n);
        return;
    }
    api_ok = 1; /* the handle stays open for the life of the process */
}

const rt_cuda_api *rt_cuda_driver(const char **why)
{
    pthread_once(&once, load_driver);
    if (!api_ok) {
        *why = api_why;
        return NULL;
    }
    return &api;
}

const char *rt_cuda_error_string(rt_cu_result r)
{
    const char *s = NULL;
    if (api.GetErrorString && api.GetErrorString(r, &s) == RT_CUDA_SUCCESS && s)
        return s;
    switch (r) {
    case RT_CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case RT_CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case RT_CUDA_ERROR_NO_BINARY_FOR_GPU: return "no kernel image is available for this device";
    }
    return "CUDA error";
}
