/* cuda_api.h: the part of the CUDA driver API the runtime uses, declared
 * here so that the runtime builds without the CUDA toolkit and loads
 * libcuda.so.1 with dlopen only when a CUDA model gets a context.
 *
 * Types carry the same names and struct tags as the toolkit's cuda.h (a
 * translation unit may include both); the constants are prefixed RT_ and
 * tests/test_cuda_compile.c checks each against cuda.h, and the function
 * types against cuda.h's prototypes.  Function names are the exported
 * symbols, which cuda.h reaches through macros (cuMemAlloc is
 * cuMemAlloc_v2, ...). */
#ifndef VITC_RT_CUDA_API_H
#define VITC_RT_CUDA_API_H

#include <stddef.h>

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUevent_st *CUevent;
typedef unsigned rt_cu_result; /* CUresult: an enum of non-negative values, so compatible with unsigned */

#define RT_CUDA_SUCCESS 0
#define RT_CUDA_ERROR_OUT_OF_MEMORY 2
#define RT_CUDA_ERROR_NO_DEVICE 100
#define RT_CUDA_ERROR_NO_BINARY_FOR_GPU 209
#define RT_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define RT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define RT_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define RT_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97
#define RT_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define RT_CU_STREAM_NON_BLOCKING 1
#define RT_CU_EVENT_DEFAULT 0
#define RT_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1
#define RT_CU_JIT_ERROR_LOG_BUFFER 5
#define RT_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6

/* X(name, exported symbol, parameters) for every entry point; every one
 * returns a CUresult.  Enum parameters are declared unsigned, the type GCC
 * and Clang give an enum without negative values: the prototypes are then
 * compatible with cuda.h's, which tests/test_cuda_compile.c asserts. */
/* cuTensorMapEncodeTiled (CUDA 12): resolved when the driver has it, the
 * map as 16 opaque 8-byte words (cuda.h's CUtensorMap); its constants: */
#define RT_CU_TENSOR_MAP_DATA_TYPE_FLOAT16 6
#define RT_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 9
#define RT_CU_TENSOR_MAP_INTERLEAVE_NONE 0
#define RT_CU_TENSOR_MAP_SWIZZLE_128B 3
#define RT_CU_TENSOR_MAP_L2_PROMOTION_L2_256B 3
#define RT_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE 0
typedef struct {
    _Alignas(64) unsigned long long w[16];
} rt_cu_tensor_map;
/* cuLaunchKernelEx (CUDA 12): resolved when the driver has it; cuda.h's
 * CUlaunchAttribute (an id, a 64-byte value) and CUlaunchConfig, and the
 * attribute of a programmatic dependent launch: */
#define RT_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
typedef struct {
    unsigned id;
    char pad[4];
    union {
        char pad[64];
        int programmatic_stream_serialization_allowed;
    } value;
} rt_cu_launch_attribute;
typedef struct {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
    CUstream stream;
    rt_cu_launch_attribute *attrs;
    unsigned nattrs;
} rt_cu_launch_config;
typedef rt_cu_result (*rt_pfn_LaunchKernelEx)(const rt_cu_launch_config *config, CUfunction f, void **params,
                                              void **extra);
typedef rt_cu_result (*rt_pfn_TensorMapEncodeTiled)(void *map, unsigned dtype, unsigned rank, void *addr,
                                                    const unsigned long long *dims,
                                                    const unsigned long long *strides, const unsigned *box,
                                                    const unsigned *elem_strides, unsigned interleave,
                                                    unsigned swizzle, unsigned l2, unsigned oob);

#define RT_CUDA_FUNCTIONS(X)                                                                                        \
    X(Init, cuInit, (unsigned flags))                                                                               \
    X(DriverGetVersion, cuDriverGetVersion, (int *version))                                                         \
    X(DeviceGetCount, cuDeviceGetCount, (int *count))                                                               \
    X(DeviceGet, cuDeviceGet, (CUdevice * dev, int ordinal))                                                        \
    X(DeviceGetAttribute, cuDeviceGetAttribute, (int *value, unsigned attrib, CUdevice dev))                        \
    X(DeviceGetName, cuDeviceGetName, (char *name, int len, CUdevice dev))                                          \
    X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, (CUcontext * ctx, CUdevice dev))                            \
    X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, (CUdevice dev))                                        \
    X(CtxSetCurrent, cuCtxSetCurrent, (CUcontext ctx))                                                              \
    X(ModuleLoadDataEx, cuModuleLoadDataEx,                                                                         \
      (CUmodule * mod, const void *image, unsigned nopts, unsigned *opts, void **values))                           \
    X(ModuleUnload, cuModuleUnload, (CUmodule mod))                                                                 \
    X(ModuleGetFunction, cuModuleGetFunction, (CUfunction * fn, CUmodule mod, const char *name))                    \
    X(FuncSetAttribute, cuFuncSetAttribute, (CUfunction fn, unsigned attrib, int value))                            \
    X(MemAlloc, cuMemAlloc_v2, (CUdeviceptr * p, size_t bytes))                                                     \
    X(MemFree, cuMemFree_v2, (CUdeviceptr p))                                                                       \
    X(MemcpyHtoD, cuMemcpyHtoD_v2, (CUdeviceptr dst, const void *src, size_t bytes))                                \
    X(MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t bytes, CUstream s))          \
    X(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t bytes, CUstream s))                \
    X(MemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s))          \
    X(CtxSynchronize, cuCtxSynchronize, (void))                                                                     \
    X(MemsetD8, cuMemsetD8_v2, (CUdeviceptr p, unsigned char value, size_t bytes))                                  \
    X(StreamCreate, cuStreamCreate, (CUstream * s, unsigned flags))                                                 \
    X(StreamDestroy, cuStreamDestroy_v2, (CUstream s))                                                              \
    X(StreamSynchronize, cuStreamSynchronize, (CUstream s))                                                         \
    X(LaunchKernel, cuLaunchKernel,                                                                                 \
      (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem,   \
       CUstream s, void **params, void **extra))                                                                    \
    X(StreamBeginCapture, cuStreamBeginCapture_v2, (CUstream s, unsigned mode))                                     \
    X(StreamEndCapture, cuStreamEndCapture, (CUstream s, CUgraph * graph))                                          \
    X(GraphInstantiateWithFlags, cuGraphInstantiateWithFlags,                                                       \
      (CUgraphExec * exec, CUgraph graph, unsigned long long flags))                                                \
    X(GraphLaunch, cuGraphLaunch, (CUgraphExec exec, CUstream s))                                                   \
    X(GraphExecDestroy, cuGraphExecDestroy, (CUgraphExec exec))                                                     \
    X(GraphDestroy, cuGraphDestroy, (CUgraph graph))                                                                \
    X(EventCreate, cuEventCreate, (CUevent * ev, unsigned flags))                                                   \
    X(EventRecord, cuEventRecord, (CUevent ev, CUstream s))                                                         \
    X(EventElapsedTime, cuEventElapsedTime, (float *ms, CUevent start, CUevent end))                                \
    X(EventDestroy, cuEventDestroy_v2, (CUevent ev))                                                                \
    X(GetErrorString, cuGetErrorString, (rt_cu_result err, const char **str))

#define RT_CUDA_PFN(name, sym, params) typedef rt_cu_result (*rt_pfn_##name) params;
RT_CUDA_FUNCTIONS(RT_CUDA_PFN)
#undef RT_CUDA_PFN

typedef struct {
#define RT_CUDA_FIELD(name, sym, params) rt_pfn_##name name;
    RT_CUDA_FUNCTIONS(RT_CUDA_FIELD)
#undef RT_CUDA_FIELD
    rt_pfn_TensorMapEncodeTiled TensorMapEncodeTiled; /* NULL before CUDA 12 */
    rt_pfn_LaunchKernelEx LaunchKernelEx;             /* NULL before CUDA 12 */
} rt_cuda_api;

#endif
