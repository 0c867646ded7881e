/* cupti_layout_check.c -- compile-time proof that native/cuda/cupti_abi.h agrees with CUPTI's own
 * cupti_activity.h for every record version rankmap may be handed (CUDA 12.x and 13.x), and for
 * the enum values and error codes it uses. Builds only where a CUDA toolkit with CUPTI headers is
 * installed:  cc -I<cuda>/include -fsyntax-only tests/native/cupti_layout_check.c  */
#include <stddef.h>
#include <cupti_activity.h>
#include <cupti_version.h>
#include "../../native/cuda/cupti_abi.h"

#define SAME(T, f, R, g) _Static_assert(offsetof(T, f) == offsetof(R, g), #T "." #f " vs " #R "." #g)
#define SAMESZ(T, f, R, g) _Static_assert(sizeof(((T *)0)->f) == sizeof(((R *)0)->g), #T "." #f " size")

#define MEMCPY(R) SAME(rm_cupti_memcpy_t, kind, R, kind); SAME(rm_cupti_memcpy_t, copy_kind, R, copyKind); \
  SAME(rm_cupti_memcpy_t, src_kind, R, srcKind); SAME(rm_cupti_memcpy_t, dst_kind, R, dstKind); \
  SAME(rm_cupti_memcpy_t, bytes, R, bytes); SAME(rm_cupti_memcpy_t, start, R, start); \
  SAME(rm_cupti_memcpy_t, end, R, end); SAME(rm_cupti_memcpy_t, device_id, R, deviceId); \
  SAMESZ(rm_cupti_memcpy_t, bytes, R, bytes); SAMESZ(rm_cupti_memcpy_t, device_id, R, deviceId)
MEMCPY(CUpti_ActivityMemcpy5);
MEMCPY(CUpti_ActivityMemcpy6);
SAME(rm_cupti_memcpy_t, copy_count, CUpti_ActivityMemcpy6, copyCount);
SAMESZ(rm_cupti_memcpy_t, copy_count, CUpti_ActivityMemcpy6, copyCount);
_Static_assert(sizeof(rm_cupti_memcpy_t) == sizeof(CUpti_ActivityMemcpy6), "Memcpy6 size");

#define PTOP(R) SAME(rm_cupti_ptop_t, copy_kind, R, copyKind); SAME(rm_cupti_ptop_t, bytes, R, bytes); \
  SAME(rm_cupti_ptop_t, src_kind, R, srcKind); SAME(rm_cupti_ptop_t, dst_kind, R, dstKind); \
  SAME(rm_cupti_ptop_t, start, R, start); SAME(rm_cupti_ptop_t, end, R, end); \
  SAME(rm_cupti_ptop_t, src_device_id, R, srcDeviceId); SAME(rm_cupti_ptop_t, dst_device_id, R, dstDeviceId); \
  SAMESZ(rm_cupti_ptop_t, src_device_id, R, srcDeviceId); SAMESZ(rm_cupti_ptop_t, dst_device_id, R, dstDeviceId)
PTOP(CUpti_ActivityMemcpyPtoP3);
PTOP(CUpti_ActivityMemcpyPtoP4);

#define MEMSET(R) SAME(rm_cupti_memset_t, bytes, R, bytes); SAME(rm_cupti_memset_t, start, R, start); \
  SAME(rm_cupti_memset_t, end, R, end); SAME(rm_cupti_memset_t, device_id, R, deviceId); \
  SAME(rm_cupti_memset_t, memory_kind, R, memoryKind); SAMESZ(rm_cupti_memset_t, memory_kind, R, memoryKind)
MEMSET(CUpti_ActivityMemset3);
MEMSET(CUpti_ActivityMemset4);

#define KERNEL(R) SAME(rm_cupti_kernel_t, start, R, start); SAME(rm_cupti_kernel_t, end, R, end); \
  SAME(rm_cupti_kernel_t, device_id, R, deviceId); SAME(rm_cupti_kernel_t, name, R, name); \
  SAME(rm_cupti_kernel_t, grid_id, R, gridId); SAMESZ(rm_cupti_kernel_t, device_id, R, deviceId)
KERNEL(CUpti_ActivityKernel9);
KERNEL(CUpti_ActivityKernel10);

_Static_assert((int)RM_ACT_MEMCPY == (int)CUPTI_ACTIVITY_KIND_MEMCPY, "kind");
_Static_assert((int)RM_ACT_MEMSET == (int)CUPTI_ACTIVITY_KIND_MEMSET, "kind");
_Static_assert((int)RM_ACT_KERNEL == (int)CUPTI_ACTIVITY_KIND_KERNEL, "kind");
_Static_assert((int)RM_ACT_CONCURRENT_KERNEL == (int)CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "kind");
_Static_assert((int)RM_ACT_MEMCPY2 == (int)CUPTI_ACTIVITY_KIND_MEMCPY2, "kind");
_Static_assert(sizeof(CUpti_ActivityKind) == 4, "kind is 32-bit");
_Static_assert((int)RM_CPY_HTOD == (int)CUPTI_ACTIVITY_MEMCPY_KIND_HTOD && (int)RM_CPY_DTOH == (int)CUPTI_ACTIVITY_MEMCPY_KIND_DTOH &&
               (int)RM_CPY_HTOA == (int)CUPTI_ACTIVITY_MEMCPY_KIND_HTOA && (int)RM_CPY_ATOH == (int)CUPTI_ACTIVITY_MEMCPY_KIND_ATOH &&
               (int)RM_CPY_ATOA == (int)CUPTI_ACTIVITY_MEMCPY_KIND_ATOA && (int)RM_CPY_ATOD == (int)CUPTI_ACTIVITY_MEMCPY_KIND_ATOD &&
               (int)RM_CPY_DTOA == (int)CUPTI_ACTIVITY_MEMCPY_KIND_DTOA && (int)RM_CPY_DTOD == (int)CUPTI_ACTIVITY_MEMCPY_KIND_DTOD &&
               (int)RM_CPY_HTOH == (int)CUPTI_ACTIVITY_MEMCPY_KIND_HTOH && (int)RM_CPY_PTOP == (int)CUPTI_ACTIVITY_MEMCPY_KIND_PTOP,
               "memcpy kinds");
_Static_assert(CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE == 1 && CUPTI_ACTIVITY_MEMORY_KIND_PINNED == 2 &&
               CUPTI_ACTIVITY_MEMORY_KIND_DEVICE == 3 && CUPTI_ACTIVITY_MEMORY_KIND_ARRAY == 4 &&
               CUPTI_ACTIVITY_MEMORY_KIND_MANAGED == 5 && CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC == 6 &&
               CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC == 7, "memory kinds as docs/record-format.md lists them");
_Static_assert((int)RM_CUPTI_FLUSH_FORCED == (int)CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, "flag");
_Static_assert((int)RM_CUPTI_ERROR_MAX_LIMIT_REACHED == (int)CUPTI_ERROR_MAX_LIMIT_REACHED, "error");
_Static_assert((int)RM_CUPTI_ERROR_INVALID_KIND == (int)CUPTI_ERROR_INVALID_KIND, "error");
_Static_assert((int)RM_CUPTI_SUCCESS == (int)CUPTI_SUCCESS, "error");
_Static_assert(CUPTI_API_VERSION >= RM_CUPTI_COPY_COUNT_VERSION && CUPTI_API_VERSION < RM_CUPTI_NEXT_MAJOR,
               "these headers are CUPTI 13: the version window covers them");

/* CUptiResult and the activity kind travel as 32-bit ints (rm_cupti_result_t, uint32_t) */
_Static_assert(sizeof(CUptiResult) == sizeof(rm_cupti_result_t), "CUptiResult is an int");
_Static_assert(sizeof(CUpti_ActivityMemcpyKind) == 4 && sizeof(CUpti_ChannelType) == 4, "32-bit enums");
