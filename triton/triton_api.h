/* triton_api.h: the part of Triton Inference Server's C API the vitc backend
 * uses, declared here from the API's public documentation (the
 * tritonserver.h and tritonbackend.h of triton-inference-server/core), so
 * that the backend builds without Triton installed.  The functions are not
 * linked: the server that loads libtriton_vitc.so defines them, and the
 * dynamic linker binds them then.  The enums carry the values the API
 * documents; a server whose values differ would be a new major version,
 * which TRITONBACKEND_Initialize refuses (VITC_TRITON_BACKEND_API_*).
 *
 * Only what backend.c calls is here.  Every handle is opaque. */
#ifndef VITC_TRITON_API_H
#define VITC_TRITON_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The backend API version this backend is written against: the server's
 * major must be the same and its minor at least this (1.10 added the
 * preferred instance group that TRITONBACKEND_GetBackendAttribute sets). */
#define VITC_TRITON_BACKEND_API_MAJOR 1
#define VITC_TRITON_BACKEND_API_MINOR 10

typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONBACKEND_Backend TRITONBACKEND_Backend;
typedef struct TRITONBACKEND_BackendAttribute TRITONBACKEND_BackendAttribute;
typedef struct TRITONBACKEND_Model TRITONBACKEND_Model;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;
typedef struct TRITONBACKEND_Output TRITONBACKEND_Output;

/* Tensor element types, in the order the API lists them (INVALID is 0). */
typedef enum {
    TRITONSERVER_TYPE_INVALID = 0,
    TRITONSERVER_TYPE_BOOL = 1,
    TRITONSERVER_TYPE_UINT8 = 2,
    TRITONSERVER_TYPE_UINT16 = 3,
    TRITONSERVER_TYPE_UINT32 = 4,
    TRITONSERVER_TYPE_UINT64 = 5,
    TRITONSERVER_TYPE_INT8 = 6,
    TRITONSERVER_TYPE_INT16 = 7,
    TRITONSERVER_TYPE_INT32 = 8,
    TRITONSERVER_TYPE_INT64 = 9,
    TRITONSERVER_TYPE_FP16 = 10,
    TRITONSERVER_TYPE_FP32 = 11,
    TRITONSERVER_TYPE_FP64 = 12,
    TRITONSERVER_TYPE_BYTES = 13,
    TRITONSERVER_TYPE_BF16 = 14
} TRITONSERVER_DataType;

/* Where a buffer lives. */
typedef enum {
    TRITONSERVER_MEMORY_CPU = 0,
    TRITONSERVER_MEMORY_CPU_PINNED = 1,
    TRITONSERVER_MEMORY_GPU = 2
} TRITONSERVER_MemoryType;

/* An instance group's kind, as config.pbtxt's KIND_AUTO, KIND_CPU, KIND_GPU, KIND_MODEL. */
typedef enum {
    TRITONSERVER_INSTANCEGROUPKIND_AUTO = 0,
    TRITONSERVER_INSTANCEGROUPKIND_CPU = 1,
    TRITONSERVER_INSTANCEGROUPKIND_GPU = 2,
    TRITONSERVER_INSTANCEGROUPKIND_MODEL = 3
} TRITONSERVER_InstanceGroupKind;

typedef enum {
    TRITONSERVER_LOG_INFO = 0,
    TRITONSERVER_LOG_WARN = 1,
    TRITONSERVER_LOG_ERROR = 2,
    TRITONSERVER_LOG_VERBOSE = 3
} TRITONSERVER_LogLevel;

/* Error codes; the HTTP and gRPC front ends map them to their own statuses
 * (INVALID_ARG to HTTP 400, UNAVAILABLE to 503, ...). */
typedef enum {
    TRITONSERVER_ERROR_UNKNOWN = 0,
    TRITONSERVER_ERROR_INTERNAL = 1,
    TRITONSERVER_ERROR_NOT_FOUND = 2,
    TRITONSERVER_ERROR_INVALID_ARG = 3,
    TRITONSERVER_ERROR_UNAVAILABLE = 4,
    TRITONSERVER_ERROR_UNSUPPORTED = 5,
    TRITONSERVER_ERROR_ALREADY_EXISTS = 6,
    TRITONSERVER_ERROR_CANCELLED = 7
} TRITONSERVER_Error_Code;

enum { TRITONSERVER_REQUEST_RELEASE_ALL = 1 };     /* TRITONBACKEND_RequestRelease's flag */
enum { TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1 }; /* TRITONBACKEND_ResponseSend's flag: the last response */

/* Errors: a NULL error is success; the caller owns every error it is given
 * (TRITONSERVER_ErrorDelete), except one returned from a backend entry
 * point, which the server takes. */
TRITONSERVER_Error *TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char *msg);
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error *error);
TRITONSERVER_Error_Code TRITONSERVER_ErrorCode(TRITONSERVER_Error *error);
const char *TRITONSERVER_ErrorMessage(TRITONSERVER_Error *error);

/* Messages: a model's configuration as JSON text. */
TRITONSERVER_Error *TRITONSERVER_MessageNewFromSerializedJson(TRITONSERVER_Message **message, const char *base,
                                                              size_t byte_size);
TRITONSERVER_Error *TRITONSERVER_MessageDelete(TRITONSERVER_Message *message);
TRITONSERVER_Error *TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message *message, const char **base,
                                                        size_t *byte_size);

bool TRITONSERVER_LogIsEnabled(TRITONSERVER_LogLevel level);
TRITONSERVER_Error *TRITONSERVER_LogMessage(TRITONSERVER_LogLevel level, const char *filename, int line,
                                            const char *msg);

/* The backend. */
TRITONSERVER_Error *TRITONBACKEND_ApiVersion(uint32_t *major, uint32_t *minor);
TRITONSERVER_Error *TRITONBACKEND_BackendName(TRITONBACKEND_Backend *backend, const char **name);
TRITONSERVER_Error *TRITONBACKEND_BackendAttributeAddPreferredInstanceGroup(
    TRITONBACKEND_BackendAttribute *attributes, TRITONSERVER_InstanceGroupKind kind, uint64_t count,
    const uint64_t *device_ids, uint64_t id_count);

/* How a model's files reach the backend: the one kind there is, a local directory. */
typedef enum { TRITONBACKEND_ARTIFACT_FILESYSTEM = 0 } TRITONBACKEND_ArtifactType;

/* A model: its name and version, its directory in the repository, its configuration (version 1: the JSON form of
 * config.pbtxt), and a pointer the backend keeps with it. */
TRITONSERVER_Error *TRITONBACKEND_ModelName(TRITONBACKEND_Model *model, const char **name);
TRITONSERVER_Error *TRITONBACKEND_ModelVersion(TRITONBACKEND_Model *model, uint64_t *version);
TRITONSERVER_Error *TRITONBACKEND_ModelRepository(TRITONBACKEND_Model *model, TRITONBACKEND_ArtifactType *artifact_type,
                                                  const char **location);
TRITONSERVER_Error *TRITONBACKEND_ModelConfig(TRITONBACKEND_Model *model, uint32_t config_version,
                                              TRITONSERVER_Message **config);
TRITONSERVER_Error *TRITONBACKEND_ModelAutoCompleteConfig(TRITONBACKEND_Model *model, bool *auto_complete);
/* Only from TRITONBACKEND_ModelInitialize: the server takes max_batch_size,
 * input, output and (where the configuration has none) the scheduler from
 * the message, and ignores the rest. */
TRITONSERVER_Error *TRITONBACKEND_ModelSetConfig(TRITONBACKEND_Model *model, uint32_t config_version,
                                                 TRITONSERVER_Message *config);
TRITONSERVER_Error *TRITONBACKEND_ModelState(TRITONBACKEND_Model *model, void **state);
TRITONSERVER_Error *TRITONBACKEND_ModelSetState(TRITONBACKEND_Model *model, void *state);

/* A model instance. */
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance *instance, const char **name);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance *instance,
                                                    TRITONSERVER_InstanceGroupKind *kind);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance *instance, int32_t *device_id);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance *instance,
                                                     TRITONBACKEND_Model **model);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance *instance, void **state);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance *instance, void *state);
/* Statistics (timestamps in ns of a monotonic clock): per request, before it is released, and per executed batch. */
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance *instance,
                                                                TRITONBACKEND_Request *request, bool success,
                                                                uint64_t exec_start_ns, uint64_t compute_start_ns,
                                                                uint64_t compute_end_ns, uint64_t exec_end_ns);
TRITONSERVER_Error *TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance *instance,
                                                                     uint64_t batch_size, uint64_t exec_start_ns,
                                                                     uint64_t compute_start_ns,
                                                                     uint64_t compute_end_ns, uint64_t exec_end_ns);

/* Requests and their inputs.  A request's input data may come in several
 * buffers; memory type and id are in-out (the type wanted, then the type given). */
TRITONSERVER_Error *TRITONBACKEND_RequestId(TRITONBACKEND_Request *request, const char **id);
TRITONSERVER_Error *TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request *request, uint32_t *count);
TRITONSERVER_Error *TRITONBACKEND_RequestInput(TRITONBACKEND_Request *request, const char *name,
                                               TRITONBACKEND_Input **input);
TRITONSERVER_Error *TRITONBACKEND_RequestInputByIndex(TRITONBACKEND_Request *request, uint32_t index,
                                                      TRITONBACKEND_Input **input);
TRITONSERVER_Error *TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request *request, uint32_t *count);
TRITONSERVER_Error *TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request *request, uint32_t index,
                                                    const char **name);
TRITONSERVER_Error *TRITONBACKEND_RequestRelease(TRITONBACKEND_Request *request, uint32_t release_flags);
TRITONSERVER_Error *TRITONBACKEND_InputProperties(TRITONBACKEND_Input *input, const char **name,
                                                  TRITONSERVER_DataType *datatype, const int64_t **shape,
                                                  uint32_t *dims_count, uint64_t *byte_size,
                                                  uint32_t *buffer_count);
TRITONSERVER_Error *TRITONBACKEND_InputBuffer(TRITONBACKEND_Input *input, uint32_t index, const void **buffer,
                                              uint64_t *buffer_byte_size, TRITONSERVER_MemoryType *memory_type,
                                              int64_t *memory_type_id);

/* Responses: one per request here.  Every output of a response is made
 * (and its buffer taken) before the next response of the same request. */
TRITONSERVER_Error *TRITONBACKEND_ResponseNew(TRITONBACKEND_Response **response, TRITONBACKEND_Request *request);
TRITONSERVER_Error *TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response *response);
TRITONSERVER_Error *TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response *response, TRITONBACKEND_Output **output,
                                                 const char *name, TRITONSERVER_DataType datatype,
                                                 const int64_t *shape, uint32_t dims_count);
TRITONSERVER_Error *TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output *output, void **buffer, uint64_t byte_size,
                                               TRITONSERVER_MemoryType *memory_type, int64_t *memory_type_id);
/* Sends the response (the server owns it from then on) with error NULL for
 * success or the error to answer with (still the caller's to delete). */
TRITONSERVER_Error *TRITONBACKEND_ResponseSend(TRITONBACKEND_Response *response, uint32_t send_flags,
                                               TRITONSERVER_Error *error);

/* What the backend defines; the server looks these names up. */
#define VITC_TRITON_EXPORT __attribute__((visibility("default")))
VITC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_Initialize(TRITONBACKEND_Backend *backend);
VITC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_Finalize(TRITONBACKEND_Backend *backend);
VITC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_GetBackendAttribute(TRITONBACKEND_Backend *backend,
                                                                         TRITONBACKEND_BackendAttribute *attributes);
VITC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model *model);
VITC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model *model);
VITC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance *instance);
VITC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance *instance);
VITC_TRITON_EXPORT TRITONSERVER_Error *TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance *instance,
                                                                          TRITONBACKEND_Request **requests,
                                                                          uint32_t request_count);

#endif
