/* The NCCL profiler plugin ABI, declared by rankmap itself (no build dependency on NCCL).
 *
 * NCCL looks up the exported symbols ncclProfiler_v7 ... ncclProfiler_v1 in the library named by
 * NCCL_PROFILER_PLUGIN, newest first, and drives the first one it finds. Each version is a table
 * of five functions plus a name; what changes between versions is the init signature and the
 * layout of the event descriptor handed to startEvent. The layouts below follow, field for field,
 * what NCCL passes (NCCL 2.23 .. 2.30):
 *
 *   v2, v3  (NCCL 2.23 - 2.26): init(ctx, mask); communicator name and hash travel in each
 *           coll/p2p descriptor; the descriptor type is one byte.
 *   v4      (NCCL 2.27):        init also receives commName, commHash, nNodes, nranks, rank and
 *           a logger; descriptors lose name/commHash and gain nChannels for p2p.
 *   v5      (NCCL 2.28):        init takes the communicator id first; the type becomes 64-bit;
 *           API-level events (group/coll/p2p API, kernel launch) are added, and coll/p2p
 *           descriptors carry the parent group handle as their last field.
 *   v6      (NCCL 2.29+):       v5 plus copy-engine collective events appended to the union.
 *   v7      (NCCL 2.30+):       v6 with a per-call user tag appended to the API, task and CE
 *           members (coll also gains kernelVariant and isSymColl after its group handle) and a
 *           kernel-phase event (type bit 15, state 31); every v5/v6 member keeps its offset.
 *
 * Only the members rankmap reads are given names that matter; the rest exist to keep offsets. */
#ifndef RANKMAP_NCCL_ABI_H
#define RANKMAP_NCCL_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef int rm_nccl_result_t;                 /* ncclResult_t: 0 is success */
#define RM_NCCL_SUCCESS 0

/* ncclDebugLogger_t: (level, subsystem flags, file, line, printf format, ...) */
typedef void (*rm_nccl_logger_t)(int level, unsigned long flags, const char *file, int line,
                                 const char *fmt, ...);

/* Event type bits: the descriptor's type and the activation mask use the same values. */
enum {
  RM_EV_GROUP = 1 << 0, RM_EV_COLL = 1 << 1, RM_EV_P2P = 1 << 2, RM_EV_PROXY_OP = 1 << 3,
  RM_EV_PROXY_STEP = 1 << 4, RM_EV_PROXY_CTRL = 1 << 5, RM_EV_KERNEL_CH = 1 << 6,
  RM_EV_NET_PLUGIN = 1 << 7, RM_EV_GROUP_API = 1 << 8, RM_EV_COLL_API = 1 << 9,
  RM_EV_P2P_API = 1 << 10, RM_EV_KERNEL_LAUNCH = 1 << 11,
  RM_EV_CE_COLL = 1 << 12, RM_EV_CE_SYNC = 1 << 13, RM_EV_CE_BATCH = 1 << 14,
  RM_EV_KERNEL_PHASE = 1 << 15,
};

/* A few event states (an int enum in NCCL; one numbering shared by every version). */
enum { RM_ST_PROXY_STEP_SEND_GPU_WAIT = 8, RM_ST_PROXY_CTRL_IDLE = 13,
       RM_ST_KERNEL_CH_STOP = 22, RM_ST_GROUP_START_API_STOP = 23, RM_ST_GROUP_END_API_START = 24 };

/* ---- union members shared by several versions ---- */
struct rm_proxy_op  { pid_t pid; uint8_t channel; int peer; int n_steps; int chunk_size; int is_send; };
struct rm_proxy_step { int step; };
struct rm_net_plugin { int64_t id; void *data; };

/* ---- v2 (and, with the trafficBytes member dropped, v3) ---- */
typedef struct {
  uint8_t type; void *parent; int rank;
  union {
    struct { const char *comm_name; uint64_t comm_hash; uint64_t seq; const char *func;
             const void *sendbuf; void *recvbuf; size_t count; int root; const char *dtype;
             size_t traffic_bytes; uint8_t max_channels; uint8_t warps;
             const char *algo; const char *proto; } coll;
    struct { const char *comm_name; uint64_t comm_hash; const char *func; void *buf;
             const char *dtype; size_t count; int peer; } p2p;
    struct rm_proxy_op proxy_op;
    struct rm_proxy_step proxy_step;
  };
} rm_descr_v2_t;

typedef struct {
  uint8_t type; void *parent; int rank;
  union {
    struct { const char *comm_name; uint64_t comm_hash; uint64_t seq; const char *func;
             const void *sendbuf; void *recvbuf; size_t count; int root; const char *dtype;
             uint8_t max_channels; uint8_t warps; const char *algo; const char *proto; } coll;
    struct { const char *comm_name; uint64_t comm_hash; const char *func; void *buf;
             const char *dtype; size_t count; int peer; } p2p;
    struct rm_proxy_op proxy_op;
    struct rm_proxy_step proxy_step;
    struct { uint8_t channel; } kernel_ch;
    struct rm_net_plugin net;
  };
} rm_descr_v3_t;

/* v2 and v3 state arguments: same shape */
typedef union {
  struct { size_t trans_size; int steps; } proxy_op;
  struct { int appended; } proxy_ctrl;
} rm_state_args_v3_t;

/* ---- v4 ---- */
typedef struct {
  uint8_t type; void *parent; int rank;
  union {
    struct { uint64_t seq; const char *func; const void *sendbuf; void *recvbuf; size_t count;
             int root; const char *dtype; uint8_t channels; uint8_t warps;
             const char *algo; const char *proto; } coll;
    struct { const char *func; void *buf; const char *dtype; size_t count; int peer;
             uint8_t channels; } p2p;
    struct rm_proxy_op proxy_op;
    struct rm_proxy_step proxy_step;
    struct { uint8_t channel; uint64_t gpu_timer; } kernel_ch;
    struct rm_net_plugin net;
  };
} rm_descr_v4_t;

/* v4, v5 and v6 state arguments */
typedef union {
  struct { size_t trans_size; } proxy_step;
  struct { int appended; } proxy_ctrl;
  struct { void *data; } net;
  struct { uint64_t gpu_timer; } kernel_ch;
} rm_state_args_v4_t;

/* ---- v5; v6 appends copy-engine members to the same union, so the v5 members sit at the
 *      same offsets in both ---- */
#define RM_V5_UNION_MEMBERS \
    struct { bool graph_captured; int depth; } group_api; \
    struct { const char *func; size_t count; const char *dtype; int root; void *stream; \
             bool graph_captured; } coll_api; \
    struct { const char *func; size_t count; const char *dtype; void *stream; \
             bool graph_captured; } p2p_api; \
    struct { void *stream; } kernel_launch; \
    struct { uint64_t seq; const char *func; const void *sendbuf; void *recvbuf; size_t count; \
             int root; const char *dtype; uint8_t channels; uint8_t warps; \
             const char *algo; const char *proto; void *group; } coll; \
    struct { const char *func; void *buf; const char *dtype; size_t count; int peer; \
             uint8_t channels; void *group; } p2p; \
    struct rm_proxy_op proxy_op; \
    struct rm_proxy_step proxy_step; \
    struct { uint8_t channel; uint64_t gpu_timer; } kernel_ch; \
    struct rm_net_plugin net;

typedef struct {
  uint64_t type; void *parent; int rank;
  union { RM_V5_UNION_MEMBERS };
} rm_descr_v5_t;

typedef struct {
  uint64_t type; void *parent; int rank;
  union {
    RM_V5_UNION_MEMBERS
    struct { uint64_t seq; const char *func; const void *sendbuf; void *recvbuf; size_t count;
             int root; const char *dtype; const char *sync_strategy; bool intra_batch_sync;
             uint32_t batch_size; uint32_t n_batches; uint32_t ce_seq; void *stream; } ce_coll;
    struct { bool complete; int nranks; } ce_sync;
    struct { int n_ops; size_t total_bytes; bool intra_sync; } ce_batch;
  };
} rm_descr_v6_t;

/* ---- v7: the v6 members, each with a user tag appended, and a kernel-phase event ---- */
typedef struct {
  uint64_t type; void *parent; int rank;
  union {
    struct { bool graph_captured; int depth; } group_api;
    struct { const char *func; size_t count; const char *dtype; int root; void *stream;
             bool graph_captured; uint64_t user_tag; } coll_api;
    struct { const char *func; size_t count; const char *dtype; void *stream;
             bool graph_captured; uint64_t user_tag; } p2p_api;
    struct { void *stream; } kernel_launch;
    struct { uint64_t seq; const char *func; const void *sendbuf; void *recvbuf; size_t count;
             int root; const char *dtype; uint8_t channels; uint8_t warps;
             const char *algo; const char *proto; void *group; const char *kernel_variant;
             bool is_sym_coll; uint64_t user_tag; } coll;
    struct { const char *func; void *buf; const char *dtype; size_t count; int peer;
             uint8_t channels; void *group; uint64_t user_tag; } p2p;
    struct rm_proxy_op proxy_op;
    struct rm_proxy_step proxy_step;
    struct { uint8_t channel; uint64_t gpu_timer; } kernel_ch;
    struct rm_net_plugin net;
    struct { uint64_t seq; const char *func; const void *sendbuf; void *recvbuf; size_t count;
             int root; const char *dtype; const char *sync_strategy; bool intra_batch_sync;
             uint32_t batch_size; uint32_t n_batches; uint32_t ce_seq; void *stream;
             uint64_t user_tag; } ce_coll;
    struct { bool complete; int nranks; } ce_sync;
    struct { int n_ops; size_t total_bytes; bool intra_sync; } ce_batch;
    struct { uint8_t channel; uint8_t phase; const char *phase_name; uint64_t gpu_timer; } kernel_phase;
  };
} rm_descr_v7_t;

/* Sizes and a few offsets as NCCL lays them out on LP64 (checked against NCCL's headers); they
 * guard these declarations against accidental edits. */
#if defined(__LP64__)
_Static_assert(sizeof(rm_descr_v2_t) == 128 && sizeof(rm_descr_v3_t) == 120, "v2/v3 descriptor");
_Static_assert(sizeof(rm_descr_v4_t) == 104 && offsetof(rm_descr_v4_t, p2p.channels) == 60, "v4 descriptor");
_Static_assert(sizeof(rm_descr_v5_t) == 112 && offsetof(rm_descr_v5_t, coll.group) == 104 &&
               offsetof(rm_descr_v5_t, p2p.group) == 64, "v5 descriptor");
_Static_assert(sizeof(rm_descr_v6_t) == 112 && offsetof(rm_descr_v6_t, ce_coll.stream) == 104, "v6 descriptor");
_Static_assert(sizeof(rm_descr_v7_t) == 136 && offsetof(rm_descr_v7_t, coll.group) == 104 &&
               offsetof(rm_descr_v7_t, coll.user_tag) == 128 && offsetof(rm_descr_v7_t, p2p.group) == 64 &&
               offsetof(rm_descr_v7_t, ce_coll.stream) == 104 && offsetof(rm_descr_v7_t, coll_api.graph_captured) ==
               offsetof(rm_descr_v5_t, coll_api.graph_captured), "v7 descriptor");
#endif

/* ---- the exported tables ---- */
typedef struct {
  const char *name;
  rm_nccl_result_t (*init)(void **ctx, int *mask);
  rm_nccl_result_t (*startEvent)(void *ctx, void **handle, rm_descr_v2_t *d);
  rm_nccl_result_t (*stopEvent)(void *handle);
  rm_nccl_result_t (*recordEventState)(void *handle, int state, rm_state_args_v3_t *a);
  rm_nccl_result_t (*finalize)(void *ctx);
} rm_profiler_v2_t;

typedef struct {
  const char *name;
  rm_nccl_result_t (*init)(void **ctx, int *mask);
  rm_nccl_result_t (*startEvent)(void *ctx, void **handle, rm_descr_v3_t *d);
  rm_nccl_result_t (*stopEvent)(void *handle);
  rm_nccl_result_t (*recordEventState)(void *handle, int state, rm_state_args_v3_t *a);
  rm_nccl_result_t (*finalize)(void *ctx);
} rm_profiler_v3_t;

typedef struct {
  const char *name;
  rm_nccl_result_t (*init)(void **ctx, int *mask, const char *comm_name, uint64_t comm_hash,
                           int n_nodes, int nranks, int rank, rm_nccl_logger_t log);
  rm_nccl_result_t (*startEvent)(void *ctx, void **handle, rm_descr_v4_t *d);
  rm_nccl_result_t (*stopEvent)(void *handle);
  rm_nccl_result_t (*recordEventState)(void *handle, int state, rm_state_args_v4_t *a);
  rm_nccl_result_t (*finalize)(void *ctx);
} rm_profiler_v4_t;

typedef struct {
  const char *name;
  rm_nccl_result_t (*init)(void **ctx, uint64_t comm_id, int *mask, const char *comm_name,
                           int n_nodes, int nranks, int rank, rm_nccl_logger_t log);
  rm_nccl_result_t (*startEvent)(void *ctx, void **handle, rm_descr_v5_t *d);
  rm_nccl_result_t (*stopEvent)(void *handle);
  rm_nccl_result_t (*recordEventState)(void *handle, int state, rm_state_args_v4_t *a);
  rm_nccl_result_t (*finalize)(void *ctx);
} rm_profiler_v5_t;

typedef struct {
  const char *name;
  rm_nccl_result_t (*init)(void **ctx, uint64_t comm_id, int *mask, const char *comm_name,
                           int n_nodes, int nranks, int rank, rm_nccl_logger_t log);
  rm_nccl_result_t (*startEvent)(void *ctx, void **handle, rm_descr_v6_t *d);
  rm_nccl_result_t (*stopEvent)(void *handle);
  rm_nccl_result_t (*recordEventState)(void *handle, int state, rm_state_args_v4_t *a);
  rm_nccl_result_t (*finalize)(void *ctx);
} rm_profiler_v6_t;

typedef struct {
  const char *name;
  rm_nccl_result_t (*init)(void **ctx, uint64_t comm_id, int *mask, const char *comm_name,
                           int n_nodes, int nranks, int rank, rm_nccl_logger_t log);
  rm_nccl_result_t (*startEvent)(void *ctx, void **handle, rm_descr_v7_t *d);
  rm_nccl_result_t (*stopEvent)(void *handle);
  rm_nccl_result_t (*recordEventState)(void *handle, int state, rm_state_args_v4_t *a);
  rm_nccl_result_t (*finalize)(void *ctx);
} rm_profiler_v7_t;

#endif
