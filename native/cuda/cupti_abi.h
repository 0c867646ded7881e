/* The few parts of CUPTI's activity API that rankmap uses, declared by rankmap itself (no build
 * dependency on CUDA or CUPTI; libcupti is opened at run time).
 *
 * Activity records are packed structs aligned to 8 bytes. CUPTI hands out the newest version of
 * each record its library knows; the fields read here sit at the same offsets in every version
 * from CUDA 12.0 (CUPTI API 19) to CUDA 13 (API 130000 and later):
 *
 *   memcpy       CUpti_ActivityMemcpy5 (12.x)  / CUpti_ActivityMemcpy6 (13.x: adds copyCount at 88)
 *   peer copy    CUpti_ActivityMemcpyPtoP3/4
 *   memset       CUpti_ActivityMemset3/4
 *   kernel       CUpti_ActivityKernel9 (12.x)  / CUpti_ActivityKernel10 (13.x)
 *
 * Only a prefix of each record is declared (rankmap only reads). tests/native/cupti_layout_check.c
 * compares every offset below with the toolkit's cupti_activity.h where one is installed. */
#ifndef RANKMAP_CUPTI_ABI_H
#define RANKMAP_CUPTI_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int rm_cupti_result_t;            /* CUptiResult */
enum {
  RM_CUPTI_SUCCESS = 0,
  RM_CUPTI_ERROR_MAX_LIMIT_REACHED = 12,  /* no more records in the buffer */
  RM_CUPTI_ERROR_INVALID_KIND = 21,       /* an incomplete or invalid record: stop reading */
};

/* CUpti_ActivityKind (a 32-bit enum) */
enum {
  RM_ACT_MEMCPY = 1, RM_ACT_MEMSET = 2, RM_ACT_KERNEL = 3, RM_ACT_CONCURRENT_KERNEL = 10,
  RM_ACT_MEMCPY2 = 22,                    /* peer-to-peer copies */
};

/* CUpti_ActivityMemcpyKind */
enum {
  RM_CPY_UNKNOWN = 0, RM_CPY_HTOD = 1, RM_CPY_DTOH = 2, RM_CPY_HTOA = 3, RM_CPY_ATOH = 4, RM_CPY_ATOA = 5,
  RM_CPY_ATOD = 6, RM_CPY_DTOA = 7, RM_CPY_DTOD = 8, RM_CPY_HTOH = 9, RM_CPY_PTOP = 10,
};

/* CUpti_ActivityFlag: the one flag of cuptiActivityFlushAll */
#define RM_CUPTI_FLUSH_FORCED 1u

#define RM_CUPTI_PACKED __attribute__((__packed__)) __attribute__((aligned(8)))

typedef struct RM_CUPTI_PACKED { uint32_t kind; } rm_cupti_activity_t;

/* CUpti_ActivityMemcpy5/6, LP64 */
typedef struct RM_CUPTI_PACKED {
  uint32_t kind;
  uint8_t copy_kind, src_kind, dst_kind, flags;       /* memory kinds: CUpti_ActivityMemoryKind */
  uint64_t bytes, start, end;                         /* ns */
  uint32_t device_id, context_id, stream_id, correlation_id, runtime_correlation_id, pad;
  void *reserved0;
  uint64_t graph_node_id;
  uint32_t graph_id, channel_id, channel_type;
  uint8_t is_device_launched, pad2[3];
  uint64_t copy_count;                                /* Memcpy6 only (CUPTI 13): batched copies */
} rm_cupti_memcpy_t;

/* CUpti_ActivityMemcpyPtoP3/4, LP64 */
typedef struct RM_CUPTI_PACKED {
  uint32_t kind;
  uint8_t copy_kind, src_kind, dst_kind, flags;
  uint64_t bytes, start, end;
  uint32_t device_id, context_id, stream_id;
  uint32_t src_device_id, src_context_id, dst_device_id, dst_context_id;
  uint32_t correlation_id;
} rm_cupti_ptop_t;

/* CUpti_ActivityMemset3/4, LP64 */
typedef struct RM_CUPTI_PACKED {
  uint32_t kind;
  uint32_t value;
  uint64_t bytes, start, end;
  uint32_t device_id, context_id, stream_id, correlation_id;
  uint16_t flags, memory_kind;
} rm_cupti_memset_t;

/* CUpti_ActivityKernel9/10 up to the name */
typedef struct RM_CUPTI_PACKED {
  uint32_t kind;
  uint8_t cache_config, shared_memory_config;
  uint16_t registers_per_thread;
  uint32_t partitioned_cache_requested, partitioned_cache_executed;
  uint64_t start, end, completed;
  uint32_t device_id, context_id, stream_id;
  int32_t grid[3], block[3];
  int32_t static_shared_memory, dynamic_shared_memory;
  uint32_t local_memory_per_thread, local_memory_total, correlation_id;
  int64_t grid_id;
  const char *name;
} rm_cupti_kernel_t;

#define RM_CUPTI_CHECK_OFFSET(T, f, off) _Static_assert(offsetof(T, f) == (off), #T "." #f)
RM_CUPTI_CHECK_OFFSET(rm_cupti_memcpy_t, copy_kind, 4);
RM_CUPTI_CHECK_OFFSET(rm_cupti_memcpy_t, bytes, 8);
RM_CUPTI_CHECK_OFFSET(rm_cupti_memcpy_t, start, 16);
RM_CUPTI_CHECK_OFFSET(rm_cupti_memcpy_t, end, 24);
RM_CUPTI_CHECK_OFFSET(rm_cupti_memcpy_t, device_id, 32);
RM_CUPTI_CHECK_OFFSET(rm_cupti_memcpy_t, copy_count, 88);
RM_CUPTI_CHECK_OFFSET(rm_cupti_ptop_t, src_device_id, 44);
RM_CUPTI_CHECK_OFFSET(rm_cupti_ptop_t, dst_device_id, 52);
RM_CUPTI_CHECK_OFFSET(rm_cupti_memset_t, memory_kind, 50);
RM_CUPTI_CHECK_OFFSET(rm_cupti_kernel_t, start, 16);
RM_CUPTI_CHECK_OFFSET(rm_cupti_kernel_t, device_id, 40);
RM_CUPTI_CHECK_OFFSET(rm_cupti_kernel_t, name, 104);

/* The CUPTI API version from which the record layouts above hold, and the first one they are not
 * known to hold for (a newer major release may reorder records). Memcpy6.copyCount is read only
 * from CUPTI 13 on. */
#define RM_CUPTI_MIN_VERSION 19u             /* CUDA 12.0 */
#define RM_CUPTI_COPY_COUNT_VERSION 130000u  /* CUDA 13.0 */
#define RM_CUPTI_NEXT_MAJOR 140000u          /* CUDA 14: layouts unchecked */

/* The entry points, as function pointer types (CUPTIAPI is the default calling convention on Linux). */
typedef void (*rm_cupti_buf_request_fn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*rm_cupti_buf_complete_fn)(void *context, uint32_t stream_id, uint8_t *buffer, size_t size,
                                         size_t valid_size);
typedef struct {
  rm_cupti_result_t (*get_version)(uint32_t *version);
  rm_cupti_result_t (*get_result_string)(rm_cupti_result_t result, const char **str);
  rm_cupti_result_t (*get_timestamp)(uint64_t *timestamp);
  rm_cupti_result_t (*register_callbacks)(rm_cupti_buf_request_fn, rm_cupti_buf_complete_fn);
  rm_cupti_result_t (*enable)(uint32_t kind);
  rm_cupti_result_t (*disable)(uint32_t kind);
  rm_cupti_result_t (*flush_all)(uint32_t flag);
  rm_cupti_result_t (*next_record)(uint8_t *buffer, size_t valid_size, rm_cupti_activity_t **record);
  rm_cupti_result_t (*dropped)(void *context, uint32_t stream_id, size_t *dropped);
} rm_cupti_api_t;

/* Symbol names, in the order of rm_cupti_api_t's members (all required). */
#define RM_CUPTI_SYMBOLS { "cuptiGetVersion", "cuptiGetResultString", "cuptiGetTimestamp", \
  "cuptiActivityRegisterCallbacks", "cuptiActivityEnable", "cuptiActivityDisable", "cuptiActivityFlushAll", \
  "cuptiActivityGetNextRecord", "cuptiActivityGetNumDroppedRecords" }

#endif
