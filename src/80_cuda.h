
/* ============================================================================================
 * >>cuda
 * Declarations of pipepar_cuda.cu, the GPU companion: kernels that move the bytes the data-path
 * sections above decide (pack, context parallel, router replay) and the multi-tensor gradient
 * norm. Build it with nvcc (-arch=sm_90 or your GPU's) and link it next to the translation unit
 * that defines PIPEPAR_IMPLEMENTATION. This header stays free of CUDA headers, so:
 *   - device pointers are plain pointers (void *, int *, float *) that must point to device
 *     memory (cudaMalloc) of the current device;
 *   - `stream` is a cudaStream_t passed as void * (NULL is the legacy default stream).
 * Every call only validates its arguments and enqueues kernels on `stream`: it never
 * synchronises, so results are ready when the stream reaches them. Host-checkable mistakes
 * return PP_EINVAL with a message naming the parameter; a CUDA failure at launch returns
 * PP_EIO (PP_ENOMEM for allocations) with the CUDA error's name. Errors of earlier,
 * unrelated asynchronous work may surface here too, as with any CUDA launch.
 *
 * A ROW is `row_bytes` contiguous bytes: one token's hidden vector (hidden * element size), one
 * token id (4 bytes), anything. Row kernels copy bytes and so work for every element type and
 * width; they use 16-byte loads and stores when row_bytes and the pointers allow it (keep rows a
 * multiple of 16 bytes and buffers 16-byte aligned for full speed; cudaMalloc gives 256).
 * Source and destination must not overlap.
 *
 * Context parallel (load-balanced, as Megatron-LM and TransformerEngine split): a sequence of
 * length L, a multiple of 2*cp, is cut into 2*cp chunks of L/(2*cp) tokens; CP rank r keeps
 * chunk r followed by chunk 2*cp-1-r, a local sequence of L/cp tokens.
 *     L = 8, cp = 2:   global 0 1 | 2 3 | 4 5 | 6 7     rank 0 holds 0 1 6 7, rank 1 holds 2 3 4 5
 *
 * BSHD calls see a tensor as [outer, seq, row]: outer = batch (or 1 for SBHD, with row = batch *
 * hidden * element size, since a Megatron [s, b, h] activation is "one row per position").
 * THD calls see packed tokens [total, row] whose sequences start at cu_seqlens_padded (device,
 * nseq + 1 int32, ascending from 0, every length a multiple of 2*cp, the last entry == total;
 * pp_pack's padding rule produces exactly this). A THD rank's local buffer holds, sequence after
 * sequence, that sequence's two chunks: local offsets are cu_seqlens_padded / cp.
 * ============================================================================================ */

/* --- context parallel, BSHD ------------------------------------------------------------------ */

/* src [outer, seq, row] -> dst [outer, seq/cp, row]: this rank's two chunks of every sequence. */
PIPEPAR_API pp_status pp_cuda_cp_split(const void *src, void *dst, int64_t outer, int64_t seq,
                                       int64_t row_bytes, int cp, int cp_rank, void *stream,
                                       pp_error *err);
/* The inverse of split for one rank: src [outer, seq/cp, row] written to this rank's positions of
 * dst [outer, seq, row]; other positions are left as they are (e.g. gradients of a full input). */
PIPEPAR_API pp_status pp_cuda_cp_unsplit(const void *src, void *dst, int64_t outer, int64_t seq,
                                         int64_t row_bytes, int cp, int cp_rank, void *stream,
                                         pp_error *err);
/* Every rank's shard stacked as an all-gather leaves them, shards [cp, outer, seq/cp, row], back
 * into global order dst [outer, seq, row] (outputs, logprobs). */
PIPEPAR_API pp_status pp_cuda_cp_merge(const void *shards, void *dst, int64_t outer, int64_t seq,
                                       int64_t row_bytes, int cp, void *stream, pp_error *err);
/* The inverse of merge: src [outer, seq, row] -> shards [cp, outer, seq/cp, row] (e.g. before a
 * scatter of a full tensor to the CP ranks). */
PIPEPAR_API pp_status pp_cuda_cp_shard_all(const void *src, void *shards, int64_t outer,
                                           int64_t seq, int64_t row_bytes, int cp, void *stream,
                                           pp_error *err);

/* --- context parallel, THD (packed) ---------------------------------------------------------- */

/* src [total, row] -> dst [total/cp, row]. */
PIPEPAR_API pp_status pp_cuda_cp_split_thd(const void *src, void *dst,
                                           const int *cu_seqlens_padded, int nseq, int64_t total,
                                           int64_t row_bytes, int cp, int cp_rank, void *stream,
                                           pp_error *err);
/* src [total/cp, row] -> this rank's positions of dst [total, row]; the rest untouched. */
PIPEPAR_API pp_status pp_cuda_cp_unsplit_thd(const void *src, void *dst,
                                             const int *cu_seqlens_padded, int nseq,
                                             int64_t total, int64_t row_bytes, int cp,
                                             int cp_rank, void *stream, pp_error *err);
/* shards [cp, total/cp, row] -> dst [total, row]. */
PIPEPAR_API pp_status pp_cuda_cp_merge_thd(const void *shards, void *dst,
                                           const int *cu_seqlens_padded, int nseq, int64_t total,
                                           int64_t row_bytes, int cp, void *stream, pp_error *err);
/* src [total, row] -> shards [cp, total/cp, row]. */
PIPEPAR_API pp_status pp_cuda_cp_shard_all_thd(const void *src, void *shards,
                                               const int *cu_seqlens_padded, int nseq,
                                               int64_t total, int64_t row_bytes, int cp,
                                               void *stream, pp_error *err);

/* --- rows by index map ----------------------------------------------------------------------- */

/* Gather: dst row i = src row map[i] for i < rows; map[i] < 0 writes a row of zeros (padding).
 * Scatter: dst row map[i] = src row i; map[i] < 0 drops the row. map is device memory holding
 * `rows` indices of index_bytes = 4 (int32) or 8 (int64). Any host index map of the data-path
 * sections (e.g. a CP local-to-global map, a pack's token order) runs through these. A scatter
 * map with repeated targets leaves one of the rows there, unspecified which. */
PIPEPAR_API pp_status pp_cuda_gather_rows(const void *src, void *dst, const void *map,
                                          int index_bytes, int64_t rows, int64_t row_bytes,
                                          void *stream, pp_error *err);
PIPEPAR_API pp_status pp_cuda_scatter_rows(const void *src, void *dst, const void *map,
                                           int index_bytes, int64_t rows, int64_t row_bytes,
                                           void *stream, pp_error *err);
/* dst [rows, row] = src [rows, row] through the same engine (the benchmarks' reference). */
PIPEPAR_API pp_status pp_cuda_copy_rows(const void *src, void *dst, int64_t rows,
                                        int64_t row_bytes, void *stream, pp_error *err);

/* --- packing (>>pack) ------------------------------------------------------------------------ */

/* One microbatch into its packed THD buffers in one launch. rows is the int64 map
 * pp_pack_plan_gather makes for the bin (rows[t] = source row of packed position t, -1 for
 * padding), total = bin_padded_tokens[bin], cu_seqlens_padded the bin's nseq+1 entries
 * (pp_pack_plan_cu_seqlens_padded), both copied to the device by the caller. For each field
 *     dst[t] = rows[t] >= 0 ? src[rows[t]] : pad_value          (elements of elem_bytes)
 * and, if positions is not NULL, positions[t] = t - cu_seqlens_padded[k] for the sequence k whose
 * padded span holds t (position ids restart at 0 per sequence; padding goes on counting).
 * Typical fields: token ids (pad: the pad token), labels (pad: -100), loss mask (pad: 0).
 * cu_seqlens for attention are the plan's own arrays; upload them as they are. The inverse for
 * per-token outputs (logprobs, losses): pp_cuda_scatter_rows(packed, out, rows, 8, total,
 * elem_bytes, ...) puts packed position t back at row rows[t] and skips padding. */
#define PP_CUDA_PACK_MAX_FIELDS 8
typedef struct pp_cuda_pack_field {
    const void *src;        /* device, indexed by rows[t] */
    void *dst;              /* device, [total] */
    int elem_bytes;         /* 1, 2, 4 or 8; src and dst aligned to it */
    int64_t pad_value;      /* its low elem_bytes bytes are written at padding positions */
} pp_cuda_pack_field;

PIPEPAR_API pp_status pp_cuda_pack(const int64_t *rows, const int *cu_seqlens_padded, int nseq,
                                   int64_t total, const pp_cuda_pack_field *fields, int nfields,
                                   void *positions, int position_bytes, void *stream,
                                   pp_error *err);

/* --- router replay (>>replay) ---------------------------------------------------------------- */

/* Recorded routed experts, [recorded rows, moe_layers, topk] in the rollout's token order, to
 * what this rank's routers replay: for each local MoE layer l its recording slot (slots[l], the
 * replay map's payload[]; or, with slots NULL, layer_begin + l) and for each local token t its
 * recorded row (rows[t], the replay map's rows, -1 for padding):
 *     replay[l][t][k] = rows[t] >= 0 ? recorded[rows[t]][slot(l)][k] : -1
 * which is exactly pp_replay_gather (>>replay) on the device. Output layouts:
 *     token_major = 0:  dst [layer_count, tokens, topk]  (one contiguous [tokens, topk] per
 *                       router: Megatron-LM's RouterReplay.set_target_indices per layer)
 *     token_major = 1:  dst [tokens, layer_count, topk]  (Megatron's static replay buffer)
 * Integers are converted: 1- and 2-byte recordings are unsigned (uint8 when experts <= 256),
 * 4 and 8 bytes signed; dst_bytes 8 gives the int64 torch's topk produces. Padding is -1 in the
 * output type (NeMo RL's missing-route sentinel), or with pad_distinct experts 0, 1, ..., topk-1.
 * One token's output, layer_count * topk * dst_bytes, must fit 32 KiB (58 layers x 8 x int64 is
 * 3.7 KiB). rows entries must be -1 or rows of `recorded`; they are not bounds-checked. slots is
 * a HOST array, read during the call (its values travel with the launch).
 *     pp_replay_map *m;  pp_replay_map_build(plan, mb, &cfg, &m, &err);
 *     copy m->rows to d_rows (int64, m->num_tokens);
 *     pp_cuda_replay r = { .recorded = d_rec, .recorded_bytes = 1, .moe_layers = payload_layers,
 *         .topk = 8, .slots = m->payload, .layer_count = m->num_layers, .rows = d_rows,
 *         .index_bytes = 8, .tokens = m->num_tokens, .dst = d_out };
 *     pp_cuda_replay_gather(&r, stream, &err);                                                */
#define PP_CUDA_REPLAY_MAX_SLOTS 128
typedef struct pp_cuda_replay {
    const void *recorded;   /* device [?, moe_layers, topk] of recorded_bytes each */
    int recorded_bytes;     /* 1, 2, 4 or 8; 0 means 4 */
    int moe_layers;         /* slots on the recording's layer axis (the map's payload_layers) */
    int topk;
    const int32_t *slots;   /* host [layer_count] recording slot of each local layer, or NULL */
    int layer_begin;        /* with slots NULL: local layer l reads slot layer_begin + l */
    int layer_count;        /* local MoE layers; at most PP_CUDA_REPLAY_MAX_SLOTS with slots */
    const void *rows;       /* device [tokens] int32 or int64: recorded row per local token, or -1 */
    int index_bytes;        /* 4 or 8 */
    int64_t tokens;         /* local tokens */
    void *dst;              /* device, layout above */
    int dst_bytes;          /* 1, 2, 4 or 8; 0 means 8 */
    int token_major;
    int pad_distinct;       /* nonzero: padding tokens get experts 0 .. topk-1 instead of -1 */
} pp_cuda_replay;

PIPEPAR_API pp_status pp_cuda_replay_gather(const pp_cuda_replay *replay, void *stream,
                                            pp_error *err);

/* --- multi-tensor L2 norm and gradient clipping ---------------------------------------------- */

typedef enum pp_cuda_dtype {
    PP_CUDA_F32 = 0,
    PP_CUDA_BF16 = 1,
    PP_CUDA_F16 = 2
} pp_cuda_dtype;

typedef struct pp_cuda_tensor {
    void *data;             /* device; aligned to the element size (16 bytes for full speed) */
    int64_t numel;          /* elements, >= 0 */
    pp_cuda_dtype dtype;
} pp_cuda_tensor;

/* A plan: the tensor list cut into chunks, uploaded once (the gradient buffers of a model do not
 * move between steps), plus a small device workspace. Creating it allocates and copies
 * synchronously; running it never does. One plan runs on one stream at a time.
 *     pp_cuda_l2norm *plan;  pp_cuda_l2norm_create(grads, n, &plan, &err);
 *     each step:  pp_cuda_l2norm_sumsq(plan, d_sumsq, 0, NULL, stream, &err);   local sum of squares
 *                 all-reduce d_sumsq over the model-parallel group (pipepar_nccl.c)
 *                 pp_cuda_clip_scale(d_sumsq, max_norm, d_scale, stream, &err);
 *                 pp_cuda_l2norm_scale(plan, d_scale, stream, &err);           grads *= scale
 *     single GPU: pp_cuda_l2norm_sumsq(plan, d_sumsq, max_norm, d_scale, ...) does both at once. */
typedef struct pp_cuda_l2norm pp_cuda_l2norm;

PIPEPAR_API pp_status pp_cuda_l2norm_create(const pp_cuda_tensor *tensors, int count,
                                            pp_cuda_l2norm **plan, pp_error *err);
PIPEPAR_API void pp_cuda_l2norm_free(pp_cuda_l2norm *plan);
/* One launch over all tensors: *sumsq (device float) = sum of x*x over every element, summed in
 * fp32 within chunks of 16384 elements and fp64 across them, in a fixed order (the same bits on
 * every run on the same device). If scale (device float) is given, also
 *     *scale = min(1, max_norm / (sqrt(*sumsq) + 1e-6))          (torch clip_grad_norm_'s rule)
 * and max_norm must be > 0. A non-finite sum gives a NaN or zero scale: check it, as
 * Megatron-LM's found-inf logic does, before stepping. */
PIPEPAR_API pp_status pp_cuda_l2norm_sumsq(const pp_cuda_l2norm *plan, float *sumsq,
                                           float max_norm, float *scale, void *stream,
                                           pp_error *err);
/* *scale = min(1, max_norm / (sqrt(*sumsq) + 1e-6)) on the device, after a cross-rank reduce. */
PIPEPAR_API pp_status pp_cuda_clip_scale(const float *sumsq, float max_norm, float *scale,
                                         void *stream, pp_error *err);
/* Every tensor of the plan *= *scale in place, rounding to its dtype; a scale of exactly 1 costs
 * one tiny launch and touches nothing. */
PIPEPAR_API pp_status pp_cuda_l2norm_scale(const pp_cuda_l2norm *plan, const float *scale,
                                           void *stream, pp_error *err);
/* Bytes the plan reads per pp_cuda_l2norm_sumsq (for bandwidth figures). */
PIPEPAR_API int64_t pp_cuda_l2norm_bytes(const pp_cuda_l2norm *plan);
