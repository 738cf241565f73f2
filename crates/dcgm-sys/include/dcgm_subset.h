/*
 * The subset of DCGM's C API that dgx-pixels-exporter calls, declared from the facts in the
 * project's reference notes (names, signatures, struct layouts, constants); written for this
 * project, not copied from NVIDIA's headers. bindgen turns it into src/bindings.rs
 * (scripts/regen.sh). Type names follow upstream so the declarations can be compared with the
 * real headers (scripts/regen.sh --check-upstream).
 */
#ifndef DGX_PIXELS_DCGM_SUBSET_H
#define DGX_PIXELS_DCGM_SUBSET_H

#include <stdint.h>

/* ---- handles and scalar types ---- */
typedef uintptr_t dcgmHandle_t;
typedef uintptr_t dcgmGpuGrp_t;
typedef uintptr_t dcgmFieldGrp_t;
typedef int dcgmReturn_t;
typedef unsigned int dcgm_field_entity_group_t;
typedef unsigned int dcgm_field_eid_t;
typedef unsigned int dcgmOperationMode_t;
typedef unsigned int dcgmGroupType_t;

/* MAKE_DCGM_VERSION(T, v) = sizeof(T) | v << 24 */
#define DCGM_MAKE_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24))

/* ---- return codes ---- */
#define DCGM_ST_OK 0
#define DCGM_ST_BADPARAM -1
#define DCGM_ST_NOT_SUPPORTED -6
#define DCGM_ST_UNINITIALIZED -10
#define DCGM_ST_VER_MISMATCH -12
#define DCGM_ST_NO_DATA -14
#define DCGM_ST_STALE_DATA -15
#define DCGM_ST_NOT_WATCHED -16
#define DCGM_ST_CONNECTION_NOT_VALID -21
#define DCGM_ST_REQUIRES_ROOT -29
#define DCGM_ST_INSUFFICIENT_SIZE -31
#define DCGM_ST_MODULE_NOT_LOADED -33
#define DCGM_ST_PROFILING_NOT_SUPPORTED -36

/* ---- enums, as constants ---- */
#define DCGM_OPERATION_MODE_AUTO 1
#define DCGM_OPERATION_MODE_MANUAL 2
#define DCGM_GROUP_DEFAULT 0
#define DCGM_GROUP_EMPTY 1
#define DCGM_GROUP_ALL_GPUS 0x7fffffff

#define DCGM_FE_NONE 0
#define DCGM_FE_GPU 1
#define DCGM_FE_VGPU 2
#define DCGM_FE_SWITCH 3
#define DCGM_FE_GPU_I 4
#define DCGM_FE_GPU_CI 5
#define DCGM_FE_LINK 6
#define DCGM_FE_CPU 7
#define DCGM_FE_CPU_CORE 8
#define DCGM_FE_CONNECTX 9

#define DCGM_GEGE_FLAG_ONLY_SUPPORTED 1
#define DCGM_FV_FLAG_LIVE_DATA 1
#define DCGM_MAX_NUM_DEVICES 32
#define DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP 128
#define DCGM_MAX_STR_LENGTH 256
#define DCGM_MAX_BLOB_LENGTH 4096

/* field types (dcgmFieldValue_v*.fieldType) */
#define DCGM_FT_DOUBLE 'd'
#define DCGM_FT_INT64 'i'
#define DCGM_FT_STRING 's'
#define DCGM_FT_BINARY 'b'
#define DCGM_FT_TIMESTAMP 't'

/* blank sentinels: +1 not found, +2 not supported, +3 not permissioned */
#define DCGM_INT32_BLANK 0x7ffffff0
#define DCGM_INT64_BLANK 0x7ffffffffffffff0LL
#define DCGM_FP64_BLANK 140737488355328.0
#define DCGM_STR_BLANK "<<<NULL>>>"

/* ---- field values ---- */
typedef union {
    int64_t i64;
    double dbl;
    char str[DCGM_MAX_STR_LENGTH];
    char blob[DCGM_MAX_BLOB_LENGTH];
} dcgmFieldValueUnion_t;

typedef struct {
    unsigned int version;
    unsigned short fieldId;
    unsigned short fieldType;
    int status;
    int64_t ts;
    dcgmFieldValueUnion_t value;
} dcgmFieldValue_v1;

typedef struct {
    unsigned int version;
    dcgm_field_entity_group_t entityGroupId;
    dcgm_field_eid_t entityId;
    unsigned short fieldId;
    unsigned short fieldType;
    int status;
    unsigned int unused;
    int64_t ts;
    dcgmFieldValueUnion_t value;
} dcgmFieldValue_v2;

#define dcgmFieldValue_version1 DCGM_MAKE_VERSION(4120, 1)
#define dcgmFieldValue_version2 DCGM_MAKE_VERSION(4128, 2)

typedef struct {
    dcgm_field_entity_group_t entityGroupId;
    dcgm_field_eid_t entityId;
} dcgmGroupEntityPair_t;

/* ---- connection ---- */
typedef struct {
    unsigned int version;
    unsigned int persistAfterDisconnect;
    unsigned int timeoutMs;
    unsigned int addressIsUnixSocket;
} dcgmConnectV2Params_v2;
typedef dcgmConnectV2Params_v2 dcgmConnectV2Params_t;
#define dcgmConnectV2Params_version2 DCGM_MAKE_VERSION(16, 2)

/* ---- profiling metric groups ---- */
#define DCGM_PROF_MAX_NUM_GROUPS_V2 10
#define DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2 64

typedef struct {
    unsigned short majorId;
    unsigned short minorId;
    unsigned int numFieldIds;
    unsigned short fieldIds[DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2];
} dcgmProfMetricGroupInfo_v2;

typedef struct {
    unsigned int version;
    unsigned int unused;
    unsigned int gpuId;
    unsigned int numMetricGroups;
    dcgmProfMetricGroupInfo_v2 metricGroups[DCGM_PROF_MAX_NUM_GROUPS_V2];
} dcgmProfGetMetricGroups_v3;
typedef dcgmProfGetMetricGroups_v3 dcgmProfGetMetricGroups_t;
#define dcgmProfGetMetricGroups_version3 DCGM_MAKE_VERSION(1376, 3)

/* ---- functions ---- */
dcgmReturn_t dcgmInit(void);
dcgmReturn_t dcgmShutdown(void);
dcgmReturn_t dcgmStartEmbedded(dcgmOperationMode_t opMode, dcgmHandle_t *pDcgmHandle);
dcgmReturn_t dcgmStopEmbedded(dcgmHandle_t pDcgmHandle);
dcgmReturn_t dcgmConnect_v2(const char *ipAddress, dcgmConnectV2Params_t *connectParams,
                            dcgmHandle_t *pDcgmHandle);
dcgmReturn_t dcgmDisconnect(dcgmHandle_t pDcgmHandle);
const char *errorString(dcgmReturn_t result);

dcgmReturn_t dcgmGetEntityGroupEntities(dcgmHandle_t dcgmHandle,
                                        dcgm_field_entity_group_t entityGroup,
                                        dcgm_field_eid_t *entities, int *numEntities,
                                        unsigned int flags);

dcgmReturn_t dcgmGroupCreate(dcgmHandle_t dcgmHandle, dcgmGroupType_t type,
                             const char *groupName, dcgmGpuGrp_t *pDcgmGrpId);
dcgmReturn_t dcgmGroupAddEntity(dcgmHandle_t dcgmHandle, dcgmGpuGrp_t groupId,
                                dcgm_field_entity_group_t entityGroupId,
                                dcgm_field_eid_t entityId);
dcgmReturn_t dcgmGroupDestroy(dcgmHandle_t dcgmHandle, dcgmGpuGrp_t groupId);

dcgmReturn_t dcgmFieldGroupCreate(dcgmHandle_t dcgmHandle, int numFieldIds,
                                  const unsigned short *fieldIds, const char *fieldGroupName,
                                  dcgmFieldGrp_t *dcgmFieldGroupId);
dcgmReturn_t dcgmFieldGroupDestroy(dcgmHandle_t dcgmHandle, dcgmFieldGrp_t dcgmFieldGroupId);

dcgmReturn_t dcgmWatchFields(dcgmHandle_t dcgmHandle, dcgmGpuGrp_t groupId,
                             dcgmFieldGrp_t fieldGroupId, long long updateFreq,
                             double maxKeepAge, int maxKeepSamples);
dcgmReturn_t dcgmUnwatchFields(dcgmHandle_t dcgmHandle, dcgmGpuGrp_t groupId,
                               dcgmFieldGrp_t fieldGroupId);
dcgmReturn_t dcgmUpdateAllFields(dcgmHandle_t dcgmHandle, int waitForUpdate);

dcgmReturn_t dcgmEntitiesGetLatestValues(dcgmHandle_t dcgmHandle,
                                         dcgmGroupEntityPair_t entities[],
                                         unsigned int entityCount, unsigned short fields[],
                                         unsigned int fieldCount, unsigned int flags,
                                         dcgmFieldValue_v2 values[]);

dcgmReturn_t dcgmProfGetSupportedMetricGroups(dcgmHandle_t dcgmHandle,
                                              dcgmProfGetMetricGroups_t *metricGroups);

#endif
