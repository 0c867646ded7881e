/*
 * rmrec_layout.h -- the layout of rankmap record files, declared once (docs/record-format.md).
 *
 * Two readers of this one declaration:
 *   - rmrec.c includes it and expands the lists below into its packed structs and enums;
 *   - rankmap/formats/record.py parses this very file and builds its numpy dtypes and code
 *     tables from the same lists.
 * So a field added here reaches the writer and the reader at once.  The Python side reads the
 * text with a small parser: keep to the forms used below.
 *   #define RMREC_NAME value                    a number (decimal or hex)
 *   #define RMREC_<LIST>(X) X(NAME, n, "text")  a code list; one X(...) per line, '\' continued
 *   #define RMREC_ROW_<NAME>(F, A) F(type, field) A(type, field, count)
 *                                               a packed little-endian row; F a scalar field, A
 *                                               an array (padding, fixed text); types: u8 u16
 *                                               u32 u64 i32 i64
 * A fixed-size block type (rows of one struct) is a BLOCK entry whose name has a ROW list.
 * Block types 1-8 are the original set; readers skip types they do not know, so adding one is
 * forward compatible and needs no version bump.
 */
#ifndef RANKMAP_RMREC_LAYOUT_H
#define RANKMAP_RMREC_LAYOUT_H

#define RMREC_VERSION 1
#define RMREC_HEADER_SIZE 128
#define RMREC_BLOCK_HDR_SIZE 16
#define RMREC_BLOCK_LIMIT 67108864   /* a reader rejects a block longer than this (64 MiB) */
#define RMREC_HIST_BINS 64           /* bin 0: 0 bytes; bin k>=1: 2^(k-1) <= bytes < 2^k */

/* The 128-byte file header; magic "RMREC\r\n\x1a", crc = CRC-32 of bytes 0..123. */
#define RMREC_ROW_HEADER(F, A) \
  A(u8, magic, 8) \
  F(u16, version) \
  F(u16, header_size) \
  F(u8, source) \
  A(u8, reserved0, 3) \
  F(i32, world_rank) \
  F(i32, world_size) \
  F(i64, pid) \
  F(i64, start_ns) \
  F(i64, bucket_ns) \
  A(u8, host, 64) \
  A(u8, reserved1, 12) \
  F(u32, crc)

/* The 16-byte block header; magic "RMBK", crc = CRC-32 of bytes 4..11 then the payload. */
#define RMREC_ROW_BLOCK(F, A) \
  A(u8, magic, 4) \
  F(u16, type) \
  F(u16, reserved) \
  F(u32, length) \
  F(u32, crc)

/* Block types: X(NAME, number, "name") */
#define RMREC_BLOCKS(X) \
  X(STRINGS, 1, "strings") \
  X(TRAFFIC, 2, "traffic") \
  X(HIST, 3, "hist") \
  X(OPTIME, 4, "optime") \
  X(TIMELINE, 5, "timeline") \
  X(COMM, 6, "comm") \
  X(META, 7, "meta") \
  X(FLUSH, 8, "flush") \
  X(COLLFACTS, 9, "collfacts") \
  X(PVARS, 10, "pvars") \
  X(CUDA_COPY, 12, "cuda_copy") \
  X(CUDA_KERNEL, 13, "cuda_kernel")

/* Rows of the fixed-size block types. */
#define RMREC_ROW_TRAFFIC(F, A) \
  F(i32, peer) \
  F(u16, op) \
  F(u8, klass) \
  F(u8, mem) \
  F(u8, dir) \
  F(u8, origin) \
  A(u8, pad, 6) \
  F(u64, bytes) \
  F(u64, msgs)

#define RMREC_ROW_HIST(F, A) \
  F(u16, op) \
  F(u8, bin) \
  A(u8, pad, 5) \
  F(u64, count)

#define RMREC_ROW_OPTIME(F, A) \
  F(u16, op) \
  A(u8, pad, 6) \
  F(u64, calls) \
  F(u64, ns) \
  F(u64, bytes)

#define RMREC_ROW_TIMELINE(F, A) \
  F(i64, bucket) \
  F(i32, peer) \
  F(u8, klass) \
  A(u8, pad, 3) \
  F(u64, bytes)

#define RMREC_ROW_FLUSH(F, A) \
  F(u64, seq) \
  F(i64, wall_ns) \
  F(i64, elapsed_ns) \
  F(u32, final) \
  F(u32, pad)

/* CUDA activity (source cuda), summed between two flushes: copies by timeline bucket of their
 * start (-1: no timestamp), kind and ends; memory kinds are CUPTI's (CUDA_MEMS), devices CUDA
 * ordinals of the process or -1 for host memory. */
#define RMREC_ROW_CUDA_COPY(F, A) \
  F(i64, bucket) \
  F(u8, kind) \
  F(u8, src_mem) \
  F(u8, dst_mem) \
  A(u8, pad, 1) \
  F(i32, src_dev) \
  F(i32, dst_dev) \
  A(u8, pad2, 4) \
  F(u64, count) \
  F(u64, bytes) \
  F(u64, ns)

/* Heads of the entries of the variable-size block types; each is followed by its bytes. */
#define RMREC_ROW_STRING_ENTRY(F, A) \
  F(u32, id) \
  F(u32, length)
/* followed by key_length bytes of key, then value_length bytes of value */
#define RMREC_ROW_META_ENTRY(F, A) \
  F(u32, key_length) \
  F(u32, value_length)
/* followed by name_length bytes of name, then size x i32 world ranks */
#define RMREC_ROW_COMM_ENTRY(F, A) \
  F(u64, id) \
  F(u32, size) \
  F(u32, name_length)
/* CUDA_KERNEL: followed by name_length bytes of kernel name. Bucket -1: the totals of one name on
 * one device; bucket >= 0: every kernel that started in that bucket on that device (no name). */
#define RMREC_ROW_CUDA_KERNEL_ENTRY(F, A) \
  F(i64, bucket) \
  F(i32, device) \
  F(u32, name_length) \
  F(u64, count) \
  F(u64, ns)

/* COLLFACTS (MPI collective-call facts) holds two kinds of entries, told apart by their first byte.
 * Kind 1, a signature, written once: one collective call's arguments as the library decides with;
 * followed by nvec x i64 per-rank bytes (v/w collectives). */
#define RMREC_ROW_COLLFACT_SIG(F, A) \
  F(u8, kind) \
  F(u8, mem) \
  F(u8, flags) \
  F(u8, pad0) \
  F(u32, sig) \
  F(u64, comm) \
  F(i32, size) \
  F(i32, rank) \
  F(i32, root) \
  F(u16, op) \
  F(u16, pad1) \
  F(i64, scount) \
  F(i32, ssize) \
  F(i32, rsize) \
  F(i64, rcount) \
  F(u32, nvec) \
  F(u32, pad2)
/* Kind 2: calls of a signature in one timeline bucket (a delta, like all counters). */
#define RMREC_ROW_COLLFACT_CALLS(F, A) \
  F(u8, kind) \
  A(u8, pad, 3) \
  F(u32, sig) \
  F(i64, bucket) \
  F(u64, calls)

/* PVARS (MPI_T performance variables): kind 1, a variable, written once, followed by name_length
 * bytes of its name; kind 2, a sample, followed by count x 8-byte values (vtype: 0 u64, 1 i64,
 * 2 f64). */
#define RMREC_ROW_PVAR_DEF(F, A) \
  F(u8, kind) \
  F(u8, cls) \
  F(u8, vtype) \
  F(u8, bound) \
  F(u32, id) \
  F(u32, count) \
  F(u16, name_length) \
  F(u16, pad)
#define RMREC_ROW_PVAR_SAMPLE(F, A) \
  F(u8, kind) \
  F(u8, vtype) \
  F(u16, pad0) \
  F(u32, id) \
  F(i64, t_ns) \
  F(u32, count) \
  F(u32, pad1)

/* Codes: X(NAME, value, "name in the reader and the store") */
#define RMREC_SOURCES(X) \
  X(MPI, 0, "mpi") \
  X(NCCL, 1, "nccl") \
  X(CUDA, 2, "cuda")

#define RMREC_CLASSES(X) \
  X(P2P, 0, "p2p") \
  X(COLL, 1, "collective") \
  X(RMA, 2, "rma") \
  X(NCCL, 3, "nccl")

#define RMREC_MEMS(X) \
  X(UNKNOWN, 0, "unknown") \
  X(HOST, 1, "host") \
  X(DEVICE, 2, "device") \
  X(MANAGED, 3, "managed")

#define RMREC_DIRECTIONS(X) \
  X(SEND, 0, "send") \
  X(RECV, 1, "recv")

/* What a CUDA copy moved; P2P: between two GPUs; memset: bytes set */
#define RMREC_COPY_KINDS(X) \
  X(OTHER, 0, "other") \
  X(H2D, 1, "H2D") \
  X(D2H, 2, "D2H") \
  X(D2D, 3, "D2D") \
  X(P2P, 4, "P2P") \
  X(H2H, 5, "H2H") \
  X(MEMSET, 6, "memset")

/* CUPTI's memory kinds of a copy's two ends (CUpti_ActivityMemoryKind) */
#define RMREC_CUDA_MEMS(X) \
  X(UNKNOWN, 0, "unknown") \
  X(PAGEABLE, 1, "pageable") \
  X(PINNED, 2, "pinned") \
  X(DEVICE, 3, "device") \
  X(ARRAY, 4, "array") \
  X(MANAGED, 5, "managed") \
  X(DEVICE_STATIC, 6, "device_static") \
  X(MANAGED_STATIC, 7, "managed_static")

/* Where a traffic row's peer comes from: counted at the call, the library's own accounting, a
 * mirror of the library's algorithm choice, a model (docs/collective-models.md). */
#define RMREC_ORIGINS(X) \
  X(CALL, 0, "call") \
  X(LIBRARY, 1, "library") \
  X(MIRROR, 2, "mirror") \
  X(MODEL, 3, "model")

/* MPI_T performance variable classes (MPI_T_PVAR_CLASS_*, as Open MPI and MPICH number them) */
#define RMREC_PVAR_CLASSES(X) \
  X(STATE, 0, "state") \
  X(LEVEL, 1, "level") \
  X(SIZE, 2, "size") \
  X(PERCENTAGE, 3, "percentage") \
  X(HIGHWATERMARK, 4, "highwatermark") \
  X(LOWWATERMARK, 5, "lowwatermark") \
  X(COUNTER, 6, "counter") \
  X(AGGREGATE, 7, "aggregate") \
  X(TIMER, 8, "timer") \
  X(GENERIC, 9, "generic")

#endif
