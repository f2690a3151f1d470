/* pipepar.h — pipeline-parallel training for C and CUDA trainers.          v0.1.0
 *
 * One header, stb-style. It decides *what runs where and when* in a pipeline-parallel training
 * step: which layers each rank builds, the order of forwards and backwards on each rank (GPipe,
 * 1F1B, interleaved 1F1B, the zero-bubble family), the sends and receives between ranks (proven
 * deadlock-free before anything runs), how packed sequences and context-parallel chunks are laid
 * out, and a runtime that walks the schedule over a pluggable transport. Your trainer keeps its
 * own forward and backward code; pipepar calls it.
 *
 * QUICK START
 *     #define PIPEPAR_IMPLEMENTATION          // in exactly one C (or C++/CUDA) file
 *     #include "pipepar.h"
 *
 *     pp_error err;
 *     pp_schedule *s = NULL;
 *     pp_schedule_config cfg = { .kind = PP_INTERLEAVED_1F1B, .pp = 4, .vpp = 2, .mb = 8 };
 *     if (pp_schedule_build(&cfg, &s, &err) != PP_OK ||   // compute order of every rank
 *         pp_schedule_lower(s, &err) != PP_OK ||          // + matched SEND/RECV between ranks
 *         pp_schedule_validate(s, &err) != PP_OK) {       // proof: dependencies hold, no deadlock
 *         fprintf(stderr, "%s\n", err.message);           // names the parameter and the rule
 *         return 1;
 *     }
 *     pp_schedule_draw_ascii(s, NULL, stdout, &err);     // see it
 *
 *     // on each rank (a thread, or a process with the NCCL transport):
 *     pp_executor *ex = NULL;
 *     pp_executor_config ec = { .schedule = s, .transport = t, .callbacks = my_model_callbacks };
 *     pp_step_result res;
 *     if (pp_executor_create(&ec, &ex, &err) != PP_OK ||
 *         pp_run_step(ex, NULL, &res, &err) != PP_OK)     // calls your forward/backward per action
 *         fprintf(stderr, "%s\n", err.message);           // e.g. PP_ETIMEOUT naming rank and peer
 *     pp_executor_free(ex);
 *     pp_schedule_free(s);
 *
 * The GPU companions are separate objects, declared here:
 *     pipepar_cuda.cu  (pp_cuda_*)  kernels for packing, CP split/gather, replay gather, grad norm
 *     pipepar_nccl.c   (pp_nccl_*)  the NCCL transport (copy engines within a host), setup, grad norm
 * Integration into a trainer: include this header, link pipepar_cuda.o and pipepar_nccl.o.
 * The implementation needs POSIX (pthreads, clock_gettime): compile with -std=gnu99, or
 * -std=c99 -D_POSIX_C_SOURCE=200809L. It also compiles as C++.
 *
 * TABLE OF CONTENTS (search for the marker, e.g. ">>schedule"); sections follow the data's path
 *     >>errors      pp_status, pp_error: every call that can fail says which parameter and rule;
 *                   what pipepar promises under bad input and faults, and how that is tested
 *     >>grid        rank grids: a rank's (tp, cp, dp, pp) coordinates and its groups; placement
 *                   by speed (the heaviest pipeline rank on the fastest GPU)
 *     >>layers      which layers each (pipeline rank, virtual stage) builds; layout strings
 *     >>schedule    the schedule IR, generators (GPipe, 1F1B, interleaved, looped BFS), lowering,
 *                   validator
 *     >>zerobubble  ZB-H1, ZB-H2, ZB-V, DualPipeV, DualPipe, interleaved zero bubble
 *     >>simulate    per-action costs -> timeline, bubble, peak activations; placement by the
 *                   simulated step (a slow GPU on the rank where the step waits least)
 *     >>draw        ASCII and SVG timelines, PyTorch text and CSV forms, JSON
 *     >>search      greedy zero-bubble schedules; the best schedule under a memory cap, and
 *                   the split of the layers into stages that suits it
 *     >>plan        a trainer's schedule options made into what it runs: layer split, schedule
 *                   (built, searched or read from a CSV), lowered, split, proven
 *     >>pack        sequence packing into bins for DP x PP, padding, cu_seqlens
 *     >>cp          context-parallel partitions (load-balanced 2*cp chunks, BSHD and THD)
 *     >>replay      router-replay index maps for MoE
 *     >>runtime     >>transport interface, >>threads transport, >>executor (with sends streamed
 *                   part by part: pp_executor_output_ready), >>timeline
 *     >>adapt       layers in proportion to the ranks' speeds: measured from a step's timelines,
 *                   re-planned between steps, the moved layers' weights sent to their new rank
 *     >>mimo        heterogeneous modules: grids per module, rank roles, bridges, global norm
 *     >>cuda        declarations of pipepar_cuda.cu
 *     >>nccl        declarations of pipepar_nccl.c
 *
 * OVERRIDES (define before the implementation include)
 *     PIPEPAR_MALLOC(sz), PIPEPAR_REALLOC(p, sz), PIPEPAR_FREE(p)   default: malloc/realloc/free
 *     PIPEPAR_ASSERT(x)                                             default: assert(x)
 *     PIPEPAR_API                                                   default: extern
 *     PIPEPAR_NO_THREADS   leave out the threads transport (>>threads), and with it pthreads
 *
 * CONVENTIONS
 *     Public names start with pp_ / PP_, internals with pp__. Config structs: zero means default.
 *     Calls that can fail return pp_status and fill an optional pp_error * (NULL is allowed).
 *     No global mutable state; every object has one owner and one matching *_free.
 *
 * VERSION  0.1.0: PIPEPAR_VERSION_MAJOR, _MINOR, _PATCH and PIPEPAR_VERSION_STRING below.
 *
 * LICENCE  MIT. Copyright (c) 2026 the pipepar authors.
 */
#ifndef PIPEPAR_H
#define PIPEPAR_H

#define PIPEPAR_VERSION_MAJOR 0
#define PIPEPAR_VERSION_MINOR 1
#define PIPEPAR_VERSION_PATCH 0
#define PIPEPAR_VERSION_STRING "0.1.0"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifndef PIPEPAR_API
#define PIPEPAR_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ============================================================================================
 * >>errors
 * Every call that can fail returns a pp_status. Pass a pp_error to get a sentence that names the
 * parameter, its value and the rule it broke, e.g.
 *     "vpp=2: gpipe runs one chunk per rank (use interleaved or looped-bfs for several)".
 * The code list is one X-macro, so the enum and the names cannot drift apart.
 *
 * What pipepar promises under bad input and faults:
 *   Input   checked before any work. Refused with PP_EINVAL, PP_EPARSE or PP_EUNSUPPORTED and one
 *           line naming the parameter, its value (long text cut to about 64 characters and "...")
 *           and the rule; nothing is changed. Every input has a stated bound, checked first:
 *           pp * vpp * mb <= PP_MAX_STAGE_MICROBATCHES, a CSV <= PP_CSV_MAX_RANKS rows, token
 *           counts in 32 bits, layers, modules and search sizes as each config field says; size
 *           products are overflow-checked; readers given a length refuse NUL bytes.
 *   Memory  an allocation that fails is PP_ENOMEM from that call, with nothing leaked (tests
 *           fail every allocation of a call in turn).
 *   Faults  every wait of the runtime has a deadline (pp_executor_config.timeout_s): a callback
 *           error, a transport error, a rank that hangs, dies or never arrives ends the step on
 *           every rank within it, as PP_ECALLBACK / PP_ETRANSPORT / PP_ETIMEOUT where it happened
 *           and PP_EABORTED (naming that rank and its reason) on the others. No rank stays
 *           blocked; each message names the rank once.
 *   Abort   never on input: PIPEPAR_ASSERT guards only internal invariants.
 * How it is tested (make test): every suite runs plain, under ASan+UBSan, and the threaded ones
 * under TSan; the CLI's shell tests run against a plain and an ASan+UBSan build (every exit code
 * and message, full disks, endless and NUL-laden files, long values); libFuzzer harnesses of
 * every text reader and of the CLI's flag parsing replay their corpora (tests/fuzz).
 * ============================================================================================ */
#define PP_STATUS_LIST(X)                                                                   \
    X(PP_OK,           "ok")                                                                \
    X(PP_EINVAL,       "invalid argument")                                                  \
    X(PP_ENOMEM,       "out of memory")                                                     \
    X(PP_EPARSE,       "parse error")                                                       \
    X(PP_EUNSUPPORTED, "unsupported combination")                                           \
    X(PP_EINVALID_SCHEDULE, "schedule breaks a rule")                                       \
    X(PP_EDEADLOCK,    "schedule deadlocks")                                                \
    X(PP_ETIMEOUT,     "timed out")                                                         \
    X(PP_EABORTED,     "aborted by another rank")                                           \
    X(PP_ETRANSPORT,   "transport failure")                                                 \
    X(PP_ECALLBACK,    "user callback failed")                                              \
    X(PP_EIO,          "input/output error")                                                \
    X(PP_ECUDA,        "CUDA error")

typedef enum pp_status {
#define PP__STATUS_ENUM(code, text) code,
    PP_STATUS_LIST(PP__STATUS_ENUM)
#undef PP__STATUS_ENUM
    PP_STATUS_COUNT
} pp_status;

#define PP_ERROR_MESSAGE_SIZE 512

typedef struct pp_error {
    pp_status status;                       /* same value the call returned */
    char message[PP_ERROR_MESSAGE_SIZE];    /* one line, no trailing newline */
} pp_error;

PIPEPAR_API const char *pp_status_name(pp_status status);        /* "PP_EINVAL" */
/* Fills *err (when not NULL) with status and a printf-formatted one-line message, and returns
 * status: for code beside the header (the GPU companions, a trainer's own wrappers) that reports
 * errors the pipepar way. */
PIPEPAR_API pp_status pp_error_set(pp_error *err, pp_status status, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
PIPEPAR_API const char *pp_status_description(pp_status status); /* "invalid argument" */


/* ============================================================================================
 * >>grid
 * A rank grid places every rank of a job at coordinates (tp, cp, dp, pp): tensor-parallel,
 * context-parallel, data-parallel and pipeline-parallel position. The order names which
 * dimension varies fastest as the rank counts up; Megatron-LM's default "tp-cp-dp-pp" (tp
 * fastest, pp slowest) is ours too, so neighbouring ranks share a node for the chatty tensor-
 * parallel traffic and the pipeline crosses nodes:
 *     rank = tp + TP * (cp + CP * (dp + DP * pp))                  for the order tp-cp-dp-pp
 *
 * A group is the set of ranks that differ only in some dimensions (a mask of PP_GROUP_* bits)
 * and agree in all others: PP_GROUP_PP is a rank's pipeline, PP_GROUP_DP its data-parallel
 * replicas, PP_GROUP_DP | PP_GROUP_CP the ranks that average gradients, PP_GROUP_TP |
 * PP_GROUP_PP the model-parallel ranks whose grad-norm partial sums add up to the whole model's.
 * Groups of one mask are numbered by `color`, members inside a group by `index`; both count in
 * the grid's order (the first dimension fastest), which gives the same groups in the same order
 * as Megatron-LM's RankGenerator. (color, index) are exactly what ncclCommSplit takes as
 * (color, key), so pipepar_nccl.c splits a world communicator into these groups directly.
 *
 *     world 8, tp 2, pp 2 (so dp 2), order tp-cp-dp-pp:
 *         tp groups  [0 1] [2 3] [4 5] [6 7]        dp groups  [0 2] [1 3] [4 6] [5 7]
 *         pp groups  [0 4] [1 5] [2 6] [3 7]        tp-pp      [0 1 4 5] [2 3 6 7]
 * ============================================================================================ */

typedef enum pp_dim {
    PP_DIM_TP = 0,  /* tensor parallel */
    PP_DIM_CP = 1,  /* context parallel */
    PP_DIM_DP = 2,  /* data parallel */
    PP_DIM_PP = 3,  /* pipeline parallel */
    PP_DIM_COUNT = 4
} pp_dim;

/* Group masks: the dimensions along which a group's members differ. */
#define PP_GROUP_TP (1u << PP_DIM_TP)
#define PP_GROUP_CP (1u << PP_DIM_CP)
#define PP_GROUP_DP (1u << PP_DIM_DP)
#define PP_GROUP_PP (1u << PP_DIM_PP)
#define PP_GROUP_ALL (PP_GROUP_TP | PP_GROUP_CP | PP_GROUP_DP | PP_GROUP_PP)

typedef struct pp_grid_config {
    int world;          /* ranks in the job, >= 1 */
    int tp, cp, pp;     /* sizes; 0 means 1 */
    int dp;             /* 0 means world / (tp * cp * pp), which must then divide evenly */
    const char *order;  /* dimension names fastest first, joined by '-'; NULL or "" means
                           "tp-cp-dp-pp". Dimensions of size 1 may be left out. */
} pp_grid_config;

typedef struct pp_grid {
    int world;
    int size[PP_DIM_COUNT];     /* by pp_dim */
    int order[PP_DIM_COUNT];    /* pp_dim values, fastest first */
    int stride[PP_DIM_COUNT];   /* by pp_dim: rank = sum of coord[d] * stride[d] */
} pp_grid;

/* Information about one rank's group of a mask (see pp_grid_group). */
typedef struct pp_grid_group_info {
    unsigned dims;  /* the mask asked for */
    int size;       /* members of each group: product of the masked sizes */
    int count;      /* groups of this mask: world / size */
    int color;      /* which group, 0 .. count-1 (ncclCommSplit's color) */
    int index;      /* the rank's position among the members, 0 .. size-1 (ncclCommSplit's key) */
} pp_grid_group_info;

/* Checks the sizes and the order and fills *grid. Fails with PP_EINVAL, naming the bad value,
 * when a size is negative, the sizes do not multiply to world, or the order is not a
 * permutation of tp, cp, dp, pp (dimensions of size 1 may be omitted and go slowest). */
PIPEPAR_API pp_status pp_grid_init(const pp_grid_config *cfg, pp_grid *grid, pp_error *err);

/* Coordinates of a rank, by pp_dim. Fails for a rank outside 0 .. world-1. */
PIPEPAR_API pp_status pp_grid_coords(const pp_grid *grid, int rank, int coord[PP_DIM_COUNT],
                                     pp_error *err);
/* The rank at coordinates (by pp_dim); -1 when a coordinate is out of range. */
PIPEPAR_API int pp_grid_rank(const pp_grid *grid, const int coord[PP_DIM_COUNT]);
/* The rank `delta` steps along one dimension from `rank`, wrapping around (the pipeline's next
 * stage is pp_grid_shift(g, r, PP_DIM_PP, +1)); -1 for a bad rank or dimension. */
PIPEPAR_API int pp_grid_shift(const pp_grid *grid, int rank, pp_dim dim, int delta);

/* Which group of mask `dims` holds `rank`, and where in it. dims must be a non-empty subset of
 * PP_GROUP_ALL. */
PIPEPAR_API pp_status pp_grid_group(const pp_grid *grid, int rank, unsigned dims,
                                    pp_grid_group_info *info, pp_error *err);
/* The members of group `color` of mask `dims`, in index order, into members[0 .. size-1]
 * (size from pp_grid_group_size; capacity is the length of the array). */
PIPEPAR_API pp_status pp_grid_group_members(const pp_grid *grid, unsigned dims, int color,
                                            int *members, int capacity, pp_error *err);
/* Members of each group of mask dims (0 for an invalid mask). */
PIPEPAR_API int pp_grid_group_size(const pp_grid *grid, unsigned dims);

/* The embedding group (Megatron-LM's): the ranks of rank's pipeline that hold the token
 * embedding (pipeline rank 0, where stage 0 is) and the output layer tied to it (pipeline rank
 * last_pp_rank, where the last stage is: pp_stage_rank(schedule, num_stages - 1), which is 0
 * under the V placements). Their gradients of the tied weight are summed over this group after
 * the step. members[] gets the group's world ranks in pipeline order (2, or 1 when both ends
 * are one rank) and *count how many; *count is 0 when rank holds neither end. */
PIPEPAR_API pp_status pp_grid_embedding_group(const pp_grid *grid, int rank, int last_pp_rank, int members[2],
                                              int *count, pp_error *err);

/* Names: "tp", "cp", "dp", "pp"; masks as "dp-cp", "tp-pp" (in pp_dim order: tp, cp, dp, pp).
 * pp_grid_dims_parse reads a mask written as names joined by '-', in any order. */
PIPEPAR_API const char *pp_dim_name(pp_dim dim);
PIPEPAR_API int pp_grid_dims_format(unsigned dims, char *buf, size_t size);
PIPEPAR_API pp_status pp_grid_dims_parse(const char *text, unsigned *dims, pp_error *err);
/* The grid's order as text, e.g. "tp-cp-dp-pp" (all four, fastest first). */
PIPEPAR_API int pp_grid_order_format(const pp_grid *grid, char *buf, size_t size);

/* Placement by speed. GPUs of one host differ by about 1% under their power cap (silicon), and a
 * pipeline's ranks rarely compute the same amount (the first stage's first layer needs no input
 * gradient, the last holds the loss). A step waits for its slowest rank, so the heaviest rank
 * belongs on the fastest GPU (`mlp_gpu --place-by-speed`). Pairing loads sorted down with GPU
 * times sorted up minimises the largest load x time over all assignments (exchange argument), which is what
 * bounds the step.
 *
 *     n            pipeline ranks, and GPUs (processes), >= 1
 *     rank_load    [n] compute of pipeline rank r, any unit (pp_simulate's busy[], or a count)
 *     gpu_time     [n] time GPU g takes for one fixed piece of work (all measured at once, under
 *                  load: a cold GPU runs faster than it will in a step), > 0
 *     min_gain     keep each GPU on its own rank (rank_of[g] = g) unless the largest load x time
 *                  falls by more than this fraction: measurement noise must not shuffle ranks
 *     rank_of      [n] out: the pipeline rank that GPU g's process should take
 *     gain         out, may be NULL: the fraction by which the largest load x time fell (0 kept)
 * Equal loads or equal times keep the identity. Of the assignments with the least bottleneck it
 * returns one that moves the fewest ranks (up to 512 ranks; beyond, the sorted pairing itself).
 * With the schedule at hand, pp_place_by_simulation places by the simulated step instead, which
 * also sees where a slow GPU waits least among ranks of equal load. */
PIPEPAR_API pp_status pp_place_by_speed(int n, const double *rank_load, const double *gpu_time, double min_gain,
                                        int *rank_of, double *gain, pp_error *err);

/* ============================================================================================
 * >>layers
 * Which layers each (pipeline rank, virtual stage) builds, and what their global indices are.
 *
 * Stages. The decoder is cut into num_stages = pp * vpp contiguous pieces. As in Megatron-LM,
 * stage s = vpp_rank * pp + pp_rank: it lives on rank s % pp as its chunk s / pp, and stage s
 * holds the decoder layers right after those of stage s - 1. (For a V-shaped schedule, map
 * stage -> rank with pp_stage_rank of the schedule; the layers of a stage stay the same. For
 * DualPipe, cut the model into pp pieces, not 2 * pp: its stage s runs model stage
 * pp_stage_model_stage(schedule, s), so every rank holds two pieces and each piece lives on
 * two ranks.)
 * Every form below ends in the same answer, a pp_layers: per stage, the global decoder layers
 * [first, first + count), the items it holds (embedding, decoder layers, MTP, loss), and for
 * each layer type an offset and count in that type's own index space.
 *
 * The ways people describe a split (pp_layers_config; the same rules Megatron-LM applies):
 *   even        num_layers / pp per rank, / vpp per chunk; both must divide.
 *   uneven      first / last = num_layers_in_first/last_pipeline_stage: rank 0 (rank pp-1)
 *               takes that many layers, split evenly over its vpp chunks; the rest divide
 *               evenly over the middle ranks. Moonlight-16B: 27 layers, pp=2, first=13 ->
 *               rank 0 holds [0,13), rank 1 holds [13,27).
 *   accounted   account_for_embedding / account_for_loss_in_pipeline_split: the embedding
 *               (loss) counts as one layer of the first (last) stage in the even split, so that
 *               stage builds one decoder layer less. 30 layers, pp=4, both -> 7, 8, 8, 7.
 *   layout      pipeline_model_parallel_layout: stages separated by '|', one letter per item:
 *               E embedding, t decoder layer, m MTP depth, L loss; "X*N" repeats a letter,
 *               "(...)*N" a group; commas are ignored. "Et*3|(tt|)*29,m|L" is 32 stages;
 *               their number must be a multiple of pp, and vpp = stages / pp. Rules: E exactly
 *               once and first, L exactly once and last, as many t as num_layers, every m after
 *               every t, all m in one stage and that stage the last chunk of its rank.
 *   hybrid      a hybrid (Mamba) layer pattern, one symbol per layer: M Mamba, * attention,
 *               - MLP, E MoE, G gated delta net, D DSA, + MLA, C CSA, H HCA, W sliding window;
 *               '|' between stages ("M*-M*-|M*-M*-": pp*vpp segments), "/..." MTP depths
 *               ("M*M-|M*M-/MM/MM": two MTP depths of "MM", on the last stage). Without '|' and
 *               pp > 1 it is split like the even / uneven forms (no vpp then).
 *   balanced    pp_layers_balance: given per-layer costs (and optionally memory with a
 *               per-stage cap), the contiguous split into pp*vpp stages whose largest stage
 *               cost is the smallest possible (exact), written as a layout string.
 *
 * Type-aware indices. A caller that keeps per-layer data for one kind of layer (router-replay
 * indices of MoE layers, MTP heads, Mamba states) asks pp_layers_type_range(l, s, type, ...):
 * e.g. PP_LAYER_MOE gives stage s's MoE layers as a range of MoE indices (0 = the model's first
 * MoE layer). Which decoder layers are MoE comes from a hybrid pattern's 'E' or, for transformer
 * decoders, from moe_layer_freq as Megatron reads --moe-layer-freq: "N" (layer i is MoE when
 * i % N == 0) or a list expression such as "[0]*3+[1]*58" (DeepSeek-V3: 3 dense, then MoE).
 *
 *     pp_layers_config cfg = { .num_layers = 27, .pp = 2, .first = 13, .moe_layer_freq = "[0]+[1]*26" };
 *     pp_layers *l;
 *     if (pp_layers_build(&cfg, &l, &err) != PP_OK) { puts(err.message); return 1; }
 *     pp_layers_stage_range(l, pp_layers_stage(l, rank, chunk), &first, &count, &err);
 *     for (g = first; g < first + count; g++) if (l->is_moe[g]) ...   // global layer g, MoE
 *     pp_layers_free(l);
 * ============================================================================================ */

/* Layer types. The first three are selections used in queries; the others are what an item is. */
typedef enum pp_layer_type {
    PP_LAYER_DECODER = 0,   /* every decoder layer: its index space is the global layer index */
    PP_LAYER_MOE,           /* decoder layers with an MoE MLP (hybrid 'E', or a 't' moe_layer_freq marks) */
    PP_LAYER_DENSE,         /* decoder layers without one */
    PP_LAYER_EMBEDDING,     /* 'E' of a layout: the input embedding (first stage) */
    PP_LAYER_LOSS,          /* 'L' of a layout: output layer and loss (last stage) */
    PP_LAYER_MTP,           /* 'm' of a layout: one multi-token-prediction depth */
    PP_LAYER_TRANSFORMER,   /* 't' of a layout: a transformer decoder layer */
    PP_LAYER_MAMBA,         /* hybrid 'M' */
    PP_LAYER_ATTENTION,     /* hybrid '*' */
    PP_LAYER_MLP,           /* hybrid '-' */
    PP_LAYER_GDN,           /* hybrid 'G' gated delta net */
    PP_LAYER_DSA,           /* hybrid 'D' DeepSeek sparse attention */
    PP_LAYER_MLA,           /* hybrid '+' multi-latent attention */
    PP_LAYER_CSA,           /* hybrid 'C' compressed sparse attention */
    PP_LAYER_HCA,           /* hybrid 'H' heavily compressed attention */
    PP_LAYER_SWA,           /* hybrid 'W' sliding-window attention */
    PP_LAYER_TYPE_COUNT
} pp_layer_type;

typedef enum pp_layers_form {
    PP_LAYERS_EVEN = 0,     /* even split (optionally accounting for embedding / loss) */
    PP_LAYERS_UNEVEN,       /* num_layers_in_first / last_pipeline_stage */
    PP_LAYERS_LAYOUT,       /* a pipeline_model_parallel_layout string */
    PP_LAYERS_HYBRID,       /* a hybrid layer pattern */
    PP_LAYERS_BALANCED,     /* pp_layers_balance */
    PP_LAYERS_FORM_COUNT
} pp_layers_form;

typedef struct pp_layers_config {
    int num_layers;         /* decoder layers (Megatron's num_layers); 0: count them in layout / hybrid */
    int pp;                 /* pipeline ranks; 0 means 1 */
    int vpp;                /* stages (model chunks) per rank; 0 means 1, or what layout / hybrid imply */
    int first;              /* num_layers_in_first_pipeline_stage (rank 0, all chunks); 0: not set */
    int last;               /* num_layers_in_last_pipeline_stage (rank pp-1); 0: not set */
    int account_for_embedding;  /* account_for_embedding_in_pipeline_split (0 / 1) */
    int account_for_loss;       /* account_for_loss_in_pipeline_split (0 / 1) */
    int mtp_layers;         /* mtp_num_layers, built on the last stage; layout / hybrid: 0 = as written */
    const char *layout;     /* pipeline_model_parallel_layout, e.g. "Et*3|(tt|)*29,m|L" */
    const char *hybrid;     /* hybrid layer pattern, e.g. "M*-M*-|M*-M*-" */
    const char *moe_layer_freq; /* --moe-layer-freq for transformer decoders: "N" or "[0]*3+[1]*58";
                                   NULL: no 't' layer is MoE */
} pp_layers_config;

typedef struct pp_layers {
    pp_layers_form form;
    int pp, vpp, num_stages;    /* num_stages = pp * vpp */
    int num_layers;             /* decoder layers of the model */
    int mtp_layers;             /* MTP depths */
    int mtp_standalone;         /* layout: the MTP sits on a rank other than the last (Megatron's
                                   mtp_standalone) */
    int *first;                 /* [num_stages] stage s builds global decoder layers */
    int *count;                 /* [num_stages]   [first[s], first[s] + count[s]) */
    int num_items;              /* embedding, decoder layers, MTP depths and loss, in stage order */
    int *stage_items;           /* [num_stages + 1] stage s holds items [stage_items[s], stage_items[s+1]) */
    unsigned char *item_type;   /* [num_items] pp_layer_type of each item (never DECODER/DENSE) */
    unsigned char *is_moe;      /* [num_layers] 1 when global decoder layer g has an MoE MLP */
    unsigned char *layer_type;  /* [num_layers] pp_layer_type of global decoder layer g */
    int *type_first;            /* [num_stages * PP_LAYER_TYPE_COUNT] stage s, type t at [s * COUNT + t]: */
    int *type_count;            /*   its items of type t are indices [type_first, + type_count) of type t */
    char *layout;               /* the same split as a Megatron layout string (parses back to it);
                                   NULL for hybrid patterns */
    char *pattern;              /* hybrid: the pattern with '|' between every two stages, MTP suffix kept */
    double *stage_cost;         /* balanced only: [num_stages] cost and memory of each stage; else NULL */
    double *stage_memory;
    double max_cost;            /* balanced only: the minimised bottleneck: the largest stage cost, or
                                   with rank_speed the slowest rank's time */
    double *rank_time;          /* balanced only: [pp] each rank's time, the sum of its stages' costs
                                   (/ its rank_speed when given) */
    int v_placement;            /* balanced with pp_balance_config.v_placement: stage s is on rank
                                   s < pp ? s : 2pp-1-s (chunk s / pp), as ZB-V and DualPipeV place
                                   it; 0: on rank s % pp. pp_layers_rank says which */
} pp_layers;

PIPEPAR_API const char *pp_layer_type_name(pp_layer_type type);     /* "moe", "mamba", ... */
PIPEPAR_API pp_status pp_layer_type_parse(const char *name, pp_layer_type *type, pp_error *err);
PIPEPAR_API const char *pp_layers_form_name(pp_layers_form form);   /* "uneven", ... */

/* Validates cfg with Megatron-LM's rules (and a few stricter ones where Megatron would silently
 * build the wrong model, e.g. first + last > num_layers) and computes every stage's layers. */
PIPEPAR_API pp_status pp_layers_build(const pp_layers_config *cfg, pp_layers **out, pp_error *err);
PIPEPAR_API void pp_layers_free(pp_layers *l);

/* Stage of (rank, chunk) = chunk * pp + rank, Megatron's numbering; -1 when out of range. */
PIPEPAR_API int pp_layers_stage(const pp_layers *l, int rank, int chunk);
/* Global decoder layers [*first, *first + *count) of a stage (what Megatron's
 * get_transformer_layer_offset and get_num_layers_to_build return for it). */
PIPEPAR_API pp_status pp_layers_stage_range(const pp_layers *l, int stage, int *first, int *count,
                                            pp_error *err);
/* The same in one type's index space: with PP_LAYER_MOE, the stage's MoE layers are MoE layers
 * [*first, *first + *count) of the model; with PP_LAYER_MTP, its MTP depths. */
PIPEPAR_API pp_status pp_layers_type_range(const pp_layers *l, int stage, pp_layer_type type,
                                           int *first, int *count, pp_error *err);
/* The stage that builds global decoder layer g; -1 when out of range. */
PIPEPAR_API int pp_layers_layer_stage(const pp_layers *l, int layer);
/* Index of global decoder layer g among the decoder layers of `type` (e.g. its MoE index);
 * -1 when g is out of range or not of that type. */
PIPEPAR_API int pp_layers_type_index(const pp_layers *l, int layer, pp_layer_type type);
/* A stage's items as text: layout spelling "Et*13", hybrid symbols "M*-M". Returns the length
 * it needs (like snprintf); -1 when the stage is out of range. */
PIPEPAR_API int pp_layers_stage_text(const pp_layers *l, int stage, char *buf, size_t size);
/* The pipeline rank that holds stage s under the split's placement (see v_placement), -1 for no
 * such stage; its chunk there is s / pp either way. */
PIPEPAR_API int pp_layers_rank(const pp_layers *l, int stage);

/* One line per stage: "stage S rank R chunk C layers [a,b) items TEXT" then, for each other
 * type the model has, " TYPE [a,b)" in that type's index space; then "layout STRING" (or
 * "pattern STRING"). JSON: the same as one object. */
PIPEPAR_API pp_status pp_layers_write_text(const pp_layers *l, FILE *out, pp_error *err);
PIPEPAR_API pp_status pp_layers_write_json(const pp_layers *l, FILE *out, pp_error *err);

/* Balanced split. Stage costs add up in layer order: the first stage also carries the
 * embedding, the last the MTP depths and the loss. The result minimises the largest stage cost
 * exactly (dynamic programme over all contiguous splits, O(stages * num_layers^2)); among the
 * splits that reach it, the one with the smallest sum of squared stage costs. Stages may be
 * empty. memory_cap bounds every stage's memory (with vpp > 1 a rank holds vpp stages: give it
 * its budget / vpp); an impossible cap is an error that says how many stages would fit.
 *
 * Ranks of unequal speed (rank_speed): rank r computes a layer of cost c in c / rank_speed[r],
 * and its chunks share that speed, so a slow GPU gets fewer layers. The result then minimises
 * the slowest rank's time, the sum of its stages' costs / its speed: exactly at vpp = 1; at
 * vpp > 1 from the exact split of stage times, by moving one layer at a time between two stages
 * while the slowest rank's time (then the sum of squared rank times) falls. v_placement says
 * which rank holds which stage. 16 equal layers, pp 2, rank 1 1.35x slower (speeds 1, 1/1.35):
 * 9 and 7 layers, times 9 and 9.45 (8 and 8 would take 10.8; the speeds' own bound is
 * 16 / (1 + 1/1.35) = 9.19). rank_speed all 1 balances the ranks' sums rather than the stages. */
typedef struct pp_balance_config {
    int num_layers;             /* decoder layers, >= 1 */
    int pp;                     /* 0 means 1 */
    int vpp;                    /* 0 means 1 */
    const double *cost;         /* [num_layers] time of each decoder layer, >= 0; NULL: 1 each */
    const double *memory;       /* [num_layers] memory of each decoder layer, >= 0; NULL: none */
    double memory_cap;          /* most memory a stage may hold; 0: no cap (needs memory when set) */
    double embedding_cost, embedding_memory;    /* on the first stage */
    double loss_cost, loss_memory;              /* on the last stage */
    int mtp_layers;             /* MTP depths, on the last stage */
    double mtp_cost, mtp_memory;                /* of each depth */
    const char *moe_layer_freq; /* as in pp_layers_config, for the type-aware indices */
    const double *rank_speed;   /* [pp] each rank's speed, 1e-6 to 1e6 (1/1.35 for a GPU 1.35x slower
                                   than one of speed 1), e.g. measured (>>adapt); NULL: no speeds */
    int v_placement;            /* 0: stage s on rank s % pp (Megatron's looped stages); 1 (vpp = 2):
                                   the V placement of ZB-V and DualPipeV, stages r and 2pp-1-r on
                                   rank r. Matters with rank_speed and for rank_time */
    const char *hybrid;         /* a hybrid layer pattern without '|' (e.g. "*-*-*E"): its symbols
                                   are the decoder layers to split, num_layers of them (0: counted),
                                   so a stage may end between an attention and its MLP; the result
                                   is a hybrid split (pattern with '|'). NULL: transformer layers */
} pp_balance_config;

PIPEPAR_API pp_status pp_layers_balance(const pp_balance_config *cfg, pp_layers **out, pp_error *err);


/* ============================================================================================
 * >>schedule
 * A schedule says, for every pipeline rank, the order of its work in one training step.
 *
 * Stages. The model is cut into num_stages = pp * vpp consecutive pieces ("virtual stages").
 * A placement maps stage s to (rank, chunk):
 *     looped (Megatron, PyTorch's interleaved):  rank = s % pp,  chunk = s / pp
 *     V-shaped (ZB-V, DualPipeV; vpp = 2):       rank r holds stages r and 2*pp-1-r
 *     bidirectional (DualPipe; vpp = 2, pp even): stages placed as V, but routed in two halves
 *
 * Routes. Under the looped and V placements every microbatch crosses every stage, 0 to
 * num_stages-1. Under the bidirectional placement of DeepSeek's DualPipe (deepseek-ai/DualPipe,
 * dualpipe.py) the model is cut into pp model stages and run by two pipelines at once:
 *     microbatches 0 .. mb/2-1   go "down": stages 0 .. pp-1     on ranks 0 .. pp-1
 *     microbatches mb/2 .. mb-1  go "up":   stages pp .. 2*pp-1  on ranks pp-1 .. 0
 * Stage s computes model stage s % pp (pp_stage_model_stage): the up pipeline runs the same
 * layers in the same order, entering at rank pp-1. Every model stage j therefore has two copies
 * of its weights, on rank j (down, stage j) and on rank pp-1-j (up, stage pp+j): 2x parameters
 * per rank, and the trainer sums the two copies' gradients before the optimizer step (DualPipe
 * all-reduces them). pp_mb_first_stage / pp_mb_last_stage give any microbatch's route; the
 * dependency rules below, lowering, validation, simulation and the executor all follow it.
 *
 * Actions. A rank's program is an array of pp_action, executed in order:
 *     compute        F forward, B full backward, I input-gradient half and W weight-gradient
 *                    half of a split backward, FB an F and a B overlapped (DualPipeV)
 *     communication  SEND_F (stage s sends its output to stage s+1), RECV_F (stage s receives its
 *                    input from s-1), SEND_B (stage s sends its input-gradient to s-1), RECV_B
 *                    (stage s receives its output-gradient from s+1)
 * A run of consecutive communication actions with the same `group` is one batched group: the
 * runtime posts it at once (one ncclGroupStart/End). The validator proves the programs finish
 * under that rule even when every send waits for its receive (rendezvous), and that every group
 * meets exactly one group of each peer it talks to: NCCL's blocking group call can wait for the
 * peer to enter the matching call, so a group whose partners sit in two different groups of one
 * peer can hang a real run even where a send-by-send model finishes.
 *
 * Pipeline of calls: build (compute order) -> lower (adds communication) -> validate -> simulate,
 * draw, or run. A generator emits only the compute order; the one lowering pass serves them all.
 * ============================================================================================ */

typedef enum pp_schedule_kind {
    PP_KIND_NONE = 0,
    PP_GPIPE,               /* all forwards, then all backwards (Huang et al., 2019) */
    PP_1F1B,                /* PipeDream-flush: warmup pp-rank-1 forwards, then one F one B */
    PP_INTERLEAVED_1F1B,    /* virtual pipeline (Narayanan et al., 2021), Megatron-LM's order */
    PP_LOOPED_BFS,          /* PyTorch's ScheduleLoopedBFS: every chunk breadth-first */
    PP_ZB_H1,               /* zero bubble, 1F1B's memory (Qi et al., 2024) */
    PP_ZB_H2,               /* zero bubble, more memory */
    PP_ZBV,                 /* zero bubble, V placement */
    PP_DUALPIPEV,           /* DeepSeek's DualPipe, V form */
    PP_INTERLEAVED_ZB,      /* PyTorch's ScheduleInterleavedZeroBubble */
    PP_DUALPIPE,            /* DeepSeek's DualPipe: two pipelines in opposite directions */
    PP_CUSTOM,              /* read from CSV/text or built action by action */
    PP_KIND_COUNT
} pp_schedule_kind;

typedef enum pp_placement {
    PP_PLACEMENT_LOOPED = 0,
    PP_PLACEMENT_V = 1,
    PP_PLACEMENT_DUAL = 2   /* DualPipe: V's stage -> rank map, two routes (see Routes above) */
} pp_placement;

typedef enum pp_op {
    PP_OP_F = 0, PP_OP_B, PP_OP_I, PP_OP_W, PP_OP_FB,
    PP_OP_SEND_F, PP_OP_RECV_F, PP_OP_SEND_B, PP_OP_RECV_B,
    PP_OP_COUNT
} pp_op;

typedef struct pp_action {
    int32_t op;      /* pp_op */
    int32_t stage;   /* global virtual stage */
    int32_t mb;      /* microbatch */
    int32_t stage2;  /* PP_OP_FB only: the backward half is B(stage2, mb2); -1 otherwise */
    int32_t mb2;
    int32_t group;   /* communication: its batched group. Consecutive communication actions with the
                        same group are posted together; pp_schedule_lower numbers them by round, so
                        group k of a rank meets exactly group k of each neighbour. 0 elsewhere. */
} pp_action;

/* Largest pp * vpp * mb a schedule may have (4,194,304: about half a gigabyte with its proof). */
#define PP_MAX_STAGE_MICROBATCHES (1 << 22)

typedef struct pp_schedule_config {
    pp_schedule_kind kind;
    int pp;         /* pipeline ranks, >= 1 */
    int vpp;        /* chunks per rank; 0 means 1 (2 for V-shaped kinds and dualpipe) */
    int mb;         /* microbatches per step, >= 1 */
    int group;      /* interleaved: microbatch_group_size_per_vp_stage; 0 means pp. Any >= 1:
                       outside Megatron's range (pp <= group <= mb, a last group of 0 or >= pp),
                       where its table would deadlock, ranks take extra warmup forwards */
    int max_live;   /* kinds that take one: cap on live activations per rank; 0 means the kind's own */
} pp_schedule_config;

typedef struct pp_schedule {
    pp_schedule_kind kind;
    pp_placement placement;
    int pp, vpp, mb, group;
    int num_stages;         /* pp * vpp */
    int lowered;            /* 1 once pp_schedule_lower added the communication */
    int *length;            /* [pp] actions in each rank's program */
    int *capacity;          /* [pp] */
    pp_action **actions;    /* [pp][length[r]] */
} pp_schedule;

PIPEPAR_API const char *pp_schedule_kind_name(pp_schedule_kind kind);   /* "interleaved" */
PIPEPAR_API pp_status pp_schedule_kind_parse(const char *name, pp_schedule_kind *kind, pp_error *err);
PIPEPAR_API const char *pp_op_name(pp_op op);                           /* "F", "SEND_F" */

/* Builds the compute order of cfg->kind. The result is not lowered. */
PIPEPAR_API pp_status pp_schedule_build(const pp_schedule_config *cfg, pp_schedule **out, pp_error *err);
/* An empty schedule to fill with pp_schedule_append (custom schedules, readers, generators). */
PIPEPAR_API pp_status pp_schedule_create(int pp, int vpp, int mb, pp_placement placement,
                                         pp_schedule **out, pp_error *err);
PIPEPAR_API pp_status pp_schedule_append(pp_schedule *s, int rank, pp_action action, pp_error *err);
PIPEPAR_API pp_status pp_schedule_copy(const pp_schedule *s, pp_schedule **out, pp_error *err);
PIPEPAR_API void pp_schedule_free(pp_schedule *s);

/* The route of microbatch mb: it crosses stages first .. last in order (0 .. num_stages-1 except
 * under PP_PLACEMENT_DUAL, see Routes). -1 when out of range. */
PIPEPAR_API int pp_mb_first_stage(const pp_schedule *s, int mb);
PIPEPAR_API int pp_mb_last_stage(const pp_schedule *s, int mb);
/* Which model stage (which layers) a stage computes: the stage itself, except under
 * PP_PLACEMENT_DUAL: stage % pp. -1 when out of range. */
PIPEPAR_API int pp_stage_model_stage(const pp_schedule *s, int stage);

/* Which rank and chunk hold a stage under the schedule's placement; -1 when out of range. */
PIPEPAR_API int pp_stage_rank(const pp_schedule *s, int stage);
PIPEPAR_API int pp_stage_chunk(const pp_schedule *s, int stage);
/* The stage of (rank, chunk); -1 when out of range. */
PIPEPAR_API int pp_rank_chunk_stage(const pp_schedule *s, int rank, int chunk);

/* Inserts SEND/RECV actions so that every cross-rank dependency is carried by a matched pair, in
 * an order proven deadlock-free (see the implementation). Neighbouring stages on one rank pass
 * tensors in place, with no communication. Lowering an already lowered schedule first removes the
 * old communication. */
PIPEPAR_API pp_status pp_schedule_lower(pp_schedule *s, pp_error *err);
/* The end (one past the last action) of the batched group that starts at position i of a rank's
 * program: consecutive communication actions with the same group. For a compute action: i + 1. */
PIPEPAR_API int pp_schedule_group_end(const pp_schedule *s, int rank, int i);
/* Removes all communication actions (back to the compute order). */
PIPEPAR_API void pp_schedule_strip_comm(pp_schedule *s);
/* Replaces every FB (an overlapped F and B, DualPipeV's steady state) with its F half followed by
 * its B half, and lowers again if the schedule was lowered (its communication is then pipepar's
 * own lowering, whatever it was before). For callers with no forward_backward callback: the
 * executor then runs an FB as F then B anyway, and lowered as one action, the F half's output
 * leaves only once the B half is done too. Split, it leaves while the B half runs, and the peer's
 * next F finds it there. The compute order is unchanged. A schedule without FB is left as it is;
 * on any failure (PP_EINVAL for NULL, PP_ENOMEM, the lowering's errors) s is unchanged. */
PIPEPAR_API pp_status pp_schedule_split_overlaps(pp_schedule *s, pp_error *err);
/* Replaces every B (a whole backward) with its I (input gradient) followed at once by its W
 * (weight gradient), and lowers again if the schedule was lowered (its communication is then
 * pipepar's own lowering, whatever it was before: a CSV's sends and receives too). The order of the work is
 * unchanged, but the B's output gradient now leaves after the I, and the peer's next backward
 * starts while this rank computes the W, which is often half the backward.
 * Needs a trainer with backward_input and backward_weight callbacks; the W keeps what it reads
 * (the I's saved tensors) for one action longer. A schedule without B is left as it is; on any
 * failure (PP_EINVAL for NULL, PP_ENOMEM, the lowering's errors) s is unchanged. */
PIPEPAR_API pp_status pp_schedule_split_backward(pp_schedule *s, pp_error *err);

/* Proves a schedule correct, or names its first violation (rank, position, action, rule):
 *   - each (stage, mb) has exactly one F and one B (or one I and one W), on the stage's rank;
 *   - F(s,m) after F(s-1,m) arrived; B(s,m) after F(s,m) and after B(s+1,m)'s gradient arrived;
 *     W after its I; (s-1 and s+1 taken on m's route: nothing before its first stage, nothing
 *     after its last, and no action of m on a stage off its route);
 *   - lowered: every send has exactly one matching receive, every cross-rank input is received
 *     before use, the programs run to the end when each group is posted together and every send
 *     blocks until its receive is posted, and each group meets exactly one group of each peer.
 * An unlowered schedule is checked as if lowered (on a copy). */
PIPEPAR_API pp_status pp_schedule_validate(const pp_schedule *s, pp_error *err);

/* Action text in PyTorch's spelling: "4F0", "1SEND_F3", "2I5"; FB as "(0F1;3B0)OVERLAP_F_B". */
PIPEPAR_API int pp_action_format(pp_action a, char *buf, size_t size);
PIPEPAR_API pp_status pp_action_parse(const char *text, pp_action *out, pp_error *err);

/* ============================================================================================
 * >>zerobubble
 * The zero-bubble family (Qi, Wan, Huang, Lin: "Zero Bubble Pipeline Parallelism", ICLR 2024)
 * splits every backward into I, the input gradient the previous stage waits for, and W, the
 * weight gradient nobody waits for; W then fills the idle time of the pipeline. pp_schedule_build
 * makes these kinds (they emit I and W, DualPipeV also full B and overlapped FB):
 *
 *   kind            placement  vpp  accepts                      compute order
 *   zb-h1           looped     1    any pp, mb                   PyTorch 2.11 ScheduleInterleavedZeroBubble
 *                                                                with one stage per rank = the paper's
 *                                                                ZB-H1 (Fig. 3 top): rank r runs 1F1B and
 *                                                                holds back its first r W's
 *   zb-h2           looped     1    max_live >= pp (default and  the paper's ZB-H2 (Fig. 3 bottom), for any
 *                                   most useful: 2*pp-1)         cap: rank r warms up with
 *                                                                min(2(pp-r)-1, max_live-r) F's, then I,F
 *                                                                pairs until max_live are live, then I,W,F
 *   zbv             V          2    any pp, mb                   PyTorch 2.11 ScheduleZBVZeroBubble
 *   dualpipev       V          2    any pp, mb                   PyTorch 2.11 ScheduleDualPipeV (DeepSeek's
 *                                                                DualPipeV) for mb >= 2*pp; see below
 *   interleaved-zb  looped     any  any pp, mb; for vpp > 1     PyTorch 2.11 ScheduleInterleavedZeroBubble
 *                                   group (microbatches per      (ZB1P over vpp chunks); PyTorch's group is
 *                                   round) >= pp or >= mb        mb / max(1, mb / pp)
 *   dualpipe        dual       2    pp even, mb even             deepseek-ai/DualPipe dualpipe.py (the
 *                                                                original, bidirectional DualPipe): mb/2
 *                                                                microbatches down, mb/2 up, 2x parameters;
 *                                                                for mb >= 2*pp DeepSeek's order exactly
 *
 * "live" counts (stage, microbatch) activations a rank holds: from the F until the W (or B) that
 * releases them. max_live is only taken by zb-h2 (the others have fixed memory: zb-h1 and zbv
 * hold pp rank-sized activations like 1F1B, dualpipev pp + 1/2, dualpipe pp + 1 stages' worth).
 *
 * DualPipeV and small mb. PyTorch and DeepSeek's DualPipeV refuse mb < 2*pp because their
 * executors hard-code each step's sends and receives: step 4 ("F0B1 F1B0" pairs) must run at
 * least once on every rank, which needs mb - 2*pp + rank + 1 >= 1 on rank 0. pipepar derives all
 * communication from the compute order (pp_schedule_lower) and proves it (pp_schedule_validate),
 * so it accepts any mb: below 2*pp it builds the order for 2*pp microbatches and drops every
 * action of the microbatches that do not exist (an FB that loses one half becomes a plain F or B),
 * the same trick PyTorch's own ZBVZeroBubble uses below 2*pp-1. Removing whole microbatches keeps
 * every dependency of the rest, so the order stays valid; for mb >= 2*pp the order is PyTorch's.
 *
 * Overlapped F&B without a callback for it. DualPipeV's (and DualPipe's) FB is meant to run F and
 * B of two microbatches at once (pp_callbacks.forward_backward). A trainer without that callback
 * runs the F half, then the B half; lowered as one action, the F's output would then leave only
 * after the B. pp_schedule_split_overlaps (>>schedule) makes each FB an F then a B and lowers
 * again: the same compute order, the F's output leaving while the B runs.
 *
 * Beyond these fixed orders, >>search builds greedy zero-bubble schedules for given costs and a
 * memory cap, and ranks every kind by simulated step time.
 * ============================================================================================ */

/* ============================================================================================
 * >>simulate
 * Plays a lowered (or compute-only) schedule with per-action costs and reports what a user feels:
 * the step time (makespan), each rank's idle fraction (bubble) and its peak live activations.
 * Compute is sequential per rank; a transfer starts when both its send and its receive have been
 * posted, takes latency + bytes * seconds_per_byte, and its consumer starts after it lands.
 * With F=1, B=2 and free communication this reproduces the textbook bubbles exactly. Transfers
 * are modelled one by one unless costs.grouped: then as the runtime posts them, a round's
 * transfers in one group that ends as a whole, one group after another on a rank's stream (a
 * receive can wait for the rank's own send of the round, or for a later peer of the group); with
 * grouped 2 (a transport with independent_peers) a group per peer, on that peer's stream.
 * Either way a transfer costs what it is given: a transfer beside running GEMMs can take several
 * times what it takes on an idle pair, so give costs measured under load (pp_timeline_idle shows
 * what a step really waited for).
 * ============================================================================================ */

typedef struct pp_sim_costs {
    double f;                   /* forward of one stage; 0 means 1 (a rank's share of the model:
                                   a chunk costs f/vpp, but under the dual placement f) */
    double b;                   /* unsplit backward; 0 means i + w if either is given, else 2 * f */
    double i, w;                /* split backward halves; both 0 means b/2 each */
    const double *f_stage;      /* optional [num_stages] overrides of f, b, i, w per stage */
    const double *b_stage;
    const double *i_stage;
    const double *w_stage;
    double p2p_latency;         /* per transfer */
    double p2p_seconds_per_byte;
    double activation_bytes;    /* bytes of one stage boundary tensor */
    const double *memory_stage; /* optional [num_stages]: activation memory one microbatch keeps in
                                   stage s (any unit, e.g. its layer count). Given, peak_memory
                                   weighs each live activation by it, so stages of unequal size
                                   (a --layout) compare fairly; else every stage weighs the same */
    const double *rank_speed;   /* optional [pp]: rank r computes at speed rank_speed[r] (1e-6 to 1e6), so each
                                   of its compute actions takes its cost above / rank_speed[r] (a GPU
                                   1.35x slower than the others: 1/1.35). A rank's chunks share its
                                   speed. Not applied to action_cost (measured times carry their
                                   rank's speed); >>adapt measures it from a step's timelines */
    const double *const *action_cost; /* optional [pp][length]: the time of each compute action of
                                   the schedule's programs, e.g. measured (pp_executor_timeline's
                                   end - ready); overrides the costs above for compute. Needs a
                                   lowered schedule (its indices are the programs'); transfers
                                   still cost p2p_latency + bytes. pp_simulate only: pp_search and
                                   the greedy scheduler build other schedules and refuse it */
    int grouped;                /* 1: transfers as the runtime posts them: a lowered group starts
                                   once it heads its rank's communication stream (the rank's
                                   compute before it done, its previous group over) and so does
                                   each peer's matching group; it takes p2p_latency + bytes *
                                   seconds_per_byte times the most transfers it has in one
                                   direction, and everything it receives lands at its end.
                                   2: as the executor posts them over a transport with
                                   independent_peers: each lowered group split by peer, a stream
                                   per peer (a group waits only for that peer's group before it;
                                   one stream for both directions, where the copy engines have
                                   one each: the model errs long).
                                   0: each transfer on its own. pp_search and pp_plan rank
                                   their candidates with it (the greedy scheduler still places
                                   each transfer on its own): on one stream's groups (1) a plan
                                   with many small stages can lose more than it gains */
    const double *tail_stage;   /* optional [num_stages]: work stage s's rank does once a step after
                                   that stage's last backward (B, W or FB), once the transfers that
                                   follow it are posted: a weight gradient deferred to then, as a
                                   trainer runs it from pp_callbacks.chunk_done (gpt's
                                   --defer-head-wgrad). Counts as the rank's compute; 0 none */
} pp_sim_costs;

typedef struct pp_sim_result {
    int pp, vpp;
    double makespan;            /* first start to last end over all ranks */
    double bound;               /* a step no order of these actions on these ranks beats, for a
                                   schedule that passes pp_schedule_validate (makespan >= bound;
                                   equal sums taken in another order are clamped to makespan): the
                                   most, over ranks, of the earliest the rank's first compute can
                                   start (the forward chain to its stages on any microbatch's
                                   route, each stage at its quickest forward here and a transfer
                                   wherever the rank changes) plus the longer of its busy time and
                                   its forwards and backwards followed by the backward chain below
                                   its stages. A relaxation, not the best order: it leaves out
                                   memory caps, how grouped transfers queue and the wait for a
                                   gradient to come back from later stages, so makespan - bound is
                                   at most what this order wastes, and no order need reach it */
    int bound_rank;             /* the rank that sets bound */
    double *busy;               /* [pp] compute time of each rank */
    double *bubble;             /* [pp] 1 - busy / makespan */
    double bubble_mean;         /* mean over ranks */
    int *peak_live;             /* [pp] most (stage, mb) activations held at once on the rank */
    double *peak_memory;        /* [pp] peak_live in units of a rank's whole layer set: / vpp (dual
                                   placement: each chunk is a whole model stage, so = peak_live);
                                   with costs.memory_stage, the peak of the live activations'
                                   memory in units of an average rank's share, sum / pp (dual: the
                                   stages hold the model twice, so sum / 2pp): one budget per GPU,
                                   whatever a rank holds */
    double **start, **end;      /* [pp][length] times of each action (comm: transfer start/end) */
    int *length;                /* [pp] copy of the schedule's lengths */
} pp_sim_result;

PIPEPAR_API pp_status pp_simulate(const pp_schedule *s, const pp_sim_costs *costs,
                                  pp_sim_result **out, pp_error *err);
PIPEPAR_API void pp_sim_result_free(pp_sim_result *r);

/* Placement by simulation. pp_place_by_speed weighs each rank's load alone; ranks with the same
 * load still differ in slack (under the V placement the rank where the V turns waits longest
 * for its first microbatch), so where a slower GPU goes changes the step even when every rank
 * computes the same. This places the GPUs by the step itself: each candidate assignment is
 * simulated (pp_simulate with `costs`) with rank r at the speed of the GPU placed there,
 * min(gpu_time) / gpu_time[g], and the shortest step wins.
 *     s         the schedule the pipeline will run (what pp_simulate takes), pp = s->pp GPUs
 *     costs     its costs on the fastest GPU (NULL: pp_simulate's defaults); rank_speed and
 *               action_cost must be NULL (the speeds are the GPUs', and measured actions carry
 *               their own GPU's)
 *     gpu_time  [pp] time GPU g takes for one fixed piece of work, finite > 0 and at most 1e6
 *               times the fastest's (as for pp_place_by_speed: measured at once, under load)
 *     min_gain  keep the identity unless the simulated step falls by more than this fraction
 *     rank_of   [pp] out: the pipeline rank GPU g's process should take
 *     gain      out, may be NULL: the fraction by which the simulated step fell (0 kept)
 * Up to 6 ranks every assignment is simulated (720 at most). From 7 to 16 ranks the search starts
 * from pp_place_by_speed's assignment (each rank's load its busy time at full speed) and swaps
 * two GPUs while a swap shortens the step: pp (pp - 1) / 2 simulations a round, at most pp
 * rounds, a local search that can stop short of the best. Above 16 ranks it is
 * pp_place_by_speed's answer if that simulates shorter than the identity, else the identity.
 * Each candidate costs one pp_simulate of s. Of equal steps it keeps the one that moves the
 * fewest ranks (equal speeds keep the identity). Use it when the schedule is known; with only
 * each rank's load, pp_place_by_speed. */
PIPEPAR_API pp_status pp_place_by_simulation(const pp_schedule *s, const pp_sim_costs *costs, const double *gpu_time,
                                             double min_gain, int *rank_of, double *gain, pp_error *err);

/* What one rank holds at once, from its program alone. A rank runs its compute in program order,
 * so these peaks hold whatever the timing; a trainer that allocates everything before its first
 * step sizes its pools by them:
 *   live_peak         (stage, microbatch) activations kept for the backward: from the F until
 *                     the B or W that frees them (pp_sim_result.peak_live counts the same);
 *   awaiting_w_peak   input gradients awaiting their W: from an I until its W, what the I leaves
 *                     for the W (e.g. each layer's dh and dy). Zero without I/W. 1 on every rank
 *                     where each I/W pair came from pp_schedule_split_backward splitting a whole B;
 *                     ZB-V on 2 ranks, 1 and 3 (and still so after the split: its I/W were there).
 * stage_class (optional, [num_stages], values 0 .. classes-1) counts by class, e.g. the layer count
 * of the stage where slots of one size serve only stages of that size: then live_peak[c] and
 * awaiting_w_peak[c] are class c's own peaks (they need not fall at the same moment). NULL puts
 * every stage in class 0 (classes >= 1 is still checked; only [0] is written). Either output may
 * be NULL. */
PIPEPAR_API pp_status pp_schedule_rank_peaks(const pp_schedule *s, int rank, const int *stage_class, int classes,
                                             int *live_peak, int *awaiting_w_peak, pp_error *err);

/* ============================================================================================
 * >>draw
 * Pictures and text forms of a schedule.
 *   ASCII: one row per rank, one column per time unit of the simulated timeline.
 *   SVG:   a figure of the step: a row per rank, a box per compute action (colour = the kind of
 *          work, shade = the chunk, label = <stage><op><microbatch>), a time axis, a legend;
 *          pp_timeline_write_svg (>>timeline) draws a measured step the same way.
 *   torch: one line per rank, "rankR: " then the compute actions in PyTorch's spelling.
 *   CSV:   pipepar's pipeline-order CSV, one row per rank in PyTorch's action spelling (compute and
 *          communication actions; an empty cell separates two communication groups that touch);
 *          pp_schedule_read_csv reads it back exactly, and PyTorch's two forms too.
 *   torch CSV: the two forms PyTorch's _PipelineScheduleRuntime loads, compute_only and
 *          compute_comms (pp_schedule_write_torch_csv): how a PyTorch user runs a pipepar plan.
 * ============================================================================================ */
PIPEPAR_API pp_status pp_schedule_draw_ascii(const pp_schedule *s, const pp_sim_result *sim, FILE *out,
                                             pp_error *err);
/* The simulated step as SVG: title with the kind and the mean bubble, per rank a row holding its
 * stages' boxes (each labelled <stage><op><microbatch>, or its microbatch where the box is too
 * narrow for that; an overlapped FB as its F half above its B half) and its idle share, a time
 * axis in simulation units, a legend of the kinds of work drawn. A short box gets at least 22 px,
 * so a long schedule gives a wide picture (a browser scrolls it), at most 100,000 px wide. sim:
 * pp_simulate's result for s (lowered), or NULL for default costs (F = 1, B = 2 per rank's share). */
PIPEPAR_API pp_status pp_schedule_write_svg(const pp_schedule *s, const pp_sim_result *sim, FILE *out,
                                            pp_error *err);
PIPEPAR_API pp_status pp_schedule_write_torch(const pp_schedule *s, FILE *out, pp_error *err);
PIPEPAR_API pp_status pp_schedule_write_csv(const pp_schedule *s, FILE *out, pp_error *err);
/* The two CSV forms PyTorch's _PipelineScheduleRuntime loads (torch.distributed.pipelining.schedules):
 *   PP_TORCH_COMPUTE_ONLY   sched._load_csv(path, format="compute_only"): the compute order; PyTorch
 *                           places the sends and receives (and REDUCE_GRAD) itself.
 *   PP_TORCH_COMPUTE_COMMS  sched._load_csv(path, format="compute_comms"): pipepar's lowering (of a
 *                           copy, if s is not lowered) with every cell an action (PyTorch refuses
 *                           empty cells, so groups are not marked: PyTorch posts each transfer on its
 *                           own) and a "<stage>REDUCE_GRAD" after each stage's last backward (B or W;
 *                           the runtime scales gradients by 1/mb there), placed after the sends that
 *                           follow it.
 * An FB is written as PyTorch's "(0F3;3B1)OVERLAP_F_B". Looped and V placements only: PP_EINVAL for
 * dualpipe (two routes, each model stage twice), which PyTorch's runtime cannot express. The
 * runtime takes the stage -> rank map from the file, so a V file needs nothing more from its user.
 * pp_schedule_read_csv reads both forms back (skipping REDUCE_GRAD). */
typedef enum pp_torch_csv_format { PP_TORCH_COMPUTE_ONLY = 0, PP_TORCH_COMPUTE_COMMS = 1 } pp_torch_csv_format;
PIPEPAR_API pp_status pp_schedule_write_torch_csv(const pp_schedule *s, pp_torch_csv_format format, FILE *out,
                                                  pp_error *err);
PIPEPAR_API pp_status pp_schedule_write_json(const pp_schedule *s, const pp_sim_result *sim, FILE *out,
                                             pp_error *err);
/* Reads a CSV (one row per rank, comma-separated actions). vpp is derived from the largest stage;
 * placement looped unless the stages say V. The result keeps communication actions if present;
 * PyTorch's REDUCE_GRAD, UNSHARD and RESHARD cells are skipped.
 * Refused (PP_EPARSE): a NUL byte anywhere in the len bytes, more than PP_CSV_MAX_RANKS rows
 * (lowering and validation take time quadratic in pp; the CLI's --pp stops at the same bound). */
#define PP_CSV_MAX_RANKS 4096
PIPEPAR_API pp_status pp_schedule_read_csv(const char *text, size_t len,
                                           pp_schedule **out, pp_error *err);

/* ============================================================================================
 * >>search
 * Which schedule is fastest for my model? Given per-action costs (F, I, W per stage, p2p time)
 * and a cap on activation memory, pp_search builds every schedule kind with every parameter
 * worth trying (vpp, microbatch group, zb-h2's cap), plus greedy zero-bubble schedules of its
 * own, proves each one (pp_schedule_validate), times it (pp_simulate) and ranks them: those
 * within the cap first, then by step time (makespan), mean bubble and peak memory.
 *
 *     pp_search_config cfg = { .pp = 4, .mb = 16, .max_memory = 4 };   // 1F1B's memory
 *     cfg.costs.f = 1; cfg.costs.i = 1; cfg.costs.w = 0.8; cfg.costs.p2p_latency = 0.05;
 *     pp_search_result *res;
 *     if (pp_search(&cfg, &res, &err) != PP_OK) ...
 *     printf("%s: %.2f\n", res->entries[0].name, res->entries[0].makespan);
 *     pp_schedule_write_csv(res->best, stdout, &err);               // the winner, lowered
 *     pp_search_result_free(res);
 *
 * Memory is counted as pp_simulate counts it: a rank's peak of live (stage, microbatch)
 * activations divided by vpp, i.e. in microbatches through the rank's whole layer set. 1F1B's
 * first rank peaks at pp, ZB-V at pp, ZB-H2 at 2*pp-1, DualPipeV at pp + 1/2, DualPipe at pp + 1
 * (whose chunks are whole model stages; it also holds 2x parameters, which this cap does not
 * count). With costs.memory_stage, a live activation weighs its stage's memory instead, so
 * stages of unequal size (a layout) are capped by what they hold. DualPipe is tried with vpp = 2
 * when pp and mb are even and no per-stage costs are given. DualPipeV and DualPipe are tried
 * twice: as built, and split ("dualpipev split", entry.split_overlaps = 1), each FB as F then B
 * (pp_schedule_split_overlaps: what a runtime without an overlapped F&B callback should run; the
 * simulator costs an FB as F + B either way, so the split one is never slower). A split winner
 * comes back split.
 *
 * Uneven stages. A V schedule's bubble is the last rank's wait for the first chunk's forward
 * and its mirror at the end, so a smaller first and last chunk shrinks it: with F = I = W per
 * layer, pp = 2, mb = 8 and stages of 2, 6, 2, 6 layers (ranks hold 2 + 6 each), the greedy V
 * schedule is simulated at 98.9% against ZB-V's 97.96% on even stages (`pipepar search --layout
 * 'Et*2|t*6|t*2|t*6L'`). ZB-V's fixed
 * order on the same stages is worse than on even ones: the order must come from the costs.
 *
 * Choosing the layout too (cfg.layers). Give the model's layer count and per-layer costs (the same
 * for every layer, or each layer's own in cfg.layer_costs; and, if they cost anything, the
 * embedding on the first stage and the loss on the last: cfg.embedding, cfg.loss), and the search
 * also splits the layers into stages. It tries every split into pp*vpp
 * stages of even - layout_spread to even + layout_spread layers (at least 1), each schedule on
 * each; where a vpp has more than max_layouts such splits (pp = 4 with 12 stages already has
 * over 4096), it descends from the even split instead, one layer moved per round. Each entry
 * reports its schedule's fastest split (entry.stage_layers; a tie keeps the split nearest the
 * even one), and a kind asked for (cfg.kind) spends splits only on the vpps it runs at. The
 * even split goes first, and a schedule is never built on a split where some rank's earliest
 * start (the forward chain to its first stage) plus its work already exceeds that schedule's time
 * on the even split (most of the uneven ones). The entries, and a descent's path, are what
 * building them all gives; result.simulated and ruled_out count both kinds of pair, the same at
 * any thread count.
 *
 * This is how Megatron's interleaved 1F1B gets its last points. On even 2-layer stages (pp = 2,
 * vpp = 4, mb = 8, 16 layers, F = 1 and B = 2 per layer) rank 1 waits for rank 0's first 2-layer
 * F at the start, and rank 0 runs stage 0's last 2-layer B alone at the end. A 1-layer first
 * stage halves both, but with Megatron's default group of pp microbatches per chunk round the
 * order then stalls elsewhere; with a group of 4 it does not. Stages 1,2,2,2,2,2,3,2 with group 4
 * take 195 time units against 198 for even stages at any group (`pipepar search --pp 2 --mb 8
 * --vpp 4 --layers 16 --kind interleaved`), for 1.6x the activation memory. The microbatch groups
 * tried are pp, 2pp, 4pp, ... below mb, PyTorch's mb / max(1, mb/pp), and mb. A trainer with both
 * backward halves gets the rest with cfg.split_backward: each B run as its I then its W sends its
 * gradient before the weight gradients, and the same order takes 193 units, 1 over its compute,
 * tying the greedy zero-bubble schedules.
 *
 * Ranks of unequal speed (costs.rank_speed, e.g. measured: >>adapt). Every schedule is simulated
 * with each rank's compute scaled by its speed, and a layout search then gives a slow rank fewer
 * layers: pp = 2, mb = 8, F = I = W = 1 a layer, rank 1 1.35x slower, 24 layers: ZB-V on 7, 5, 5,
 * 7 layers takes 336, rank 0's compute exactly and 98.5% of the 330.9 the two speeds allow, where
 * the even split takes 388.8 or more. With 16 layers the best is 9 / 7 layers, 3 points from that
 * bound for the layers being whole alone. The splits tried stay within layout_spread of the even
 * one: for speeds further apart, widen it to reach pp_layers_balance's split for them.
 *
 * Greedy schedules (pp_schedule_build_greedy). The paper's automatic scheduler (Qi et al., ICLR
 * 2024, section 3.1) in our words: play the pipeline forward in time with the given costs; when
 * a rank is free, run the most urgent ready work: an I (another rank waits for it) or an F if
 * the cap allows (both ready: alternate, as 1F1B does), else a pending W, which fills idle gaps
 * and frees memory (the cap forces one before an F when the rank is full). It handles looped
 * placements with any vpp and the V placement, and cannot deadlock: a rank admits a new
 * microbatch (its F on the rank's first chunk) only while its live plus reserved activations
 * leave room for all vpp chunks of that microbatch, so the oldest unfinished microbatch can
 * always move. (With vpp = 2, PP_GREEDY_EAGER_ADMIT keeps just one spare slot, which is enough:
 * a chunk's F's run in microbatch order, so the spare goes to the oldest one's second chunk.) The policy switches
 * below are the paper's grid-searched hyperparameters in spirit; pp_search tries them all. Its cap
 * counts live activations (max_live), or with max_memory weighs each by its stage's memory, as the
 * search's cap does: a small first stage then keeps as many microbatches as its memory allows. The
 * search builds its greedy schedules that way whenever the stages have memory (costs.memory_stage,
 * and every layout search).
 * ============================================================================================ */

typedef struct pp_greedy_config {
    int pp;                    /* pipeline ranks, >= 1 */
    int mb;                    /* microbatches, >= 1 */
    int vpp;                   /* chunks per rank; 0 means 1 (2 for the V placement) */
    pp_placement placement;    /* looped (any vpp) or V (vpp = 2) */
    int max_live;              /* cap on live (stage, microbatch) activations per rank, >= vpp;
                                  0 means pp*vpp (1F1B's peak) */
    double max_memory;         /* > 0 instead of max_live: cap on a rank's live activations each
                                  weighed by costs->memory_stage, in pp_simulate's peak_memory units
                                  (so stages of unequal size hold what their memory allows: many
                                  activations of a small first stage); needs memory_stage */
    const pp_sim_costs *costs; /* what pp_simulate takes; NULL means F=1, I=W=1, no p2p time */
    unsigned flags;            /* PP_GREEDY_* or'ed; 0 = the defaults */
} pp_greedy_config;

#define PP_GREEDY_FILL_ANY_GAP  1u /* run a pending W in any idle gap (default: only where it ends
                                      before the next input known to arrive) */
#define PP_GREEDY_SHALLOW_FIRST 2u /* among ready F's take the lowest stage (default: deepest) */
#define PP_GREEDY_LAZY_W        4u /* hold W's while memory allows; run them when the cap or the
                                      end of the rank's F and I work forces them */
#define PP_GREEDY_I_FIRST       8u /* an I before a ready F, always (default: alternate, the other
                                      kind than the rank's last F or I, as 1F1B does) */
#define PP_GREEDY_READY_ORDER  16u /* of a ready I and F, the one ready first (I_FIRST wins) */
#define PP_GREEDY_EAGER_ADMIT  32u /* vpp = 2: admit a new microbatch while one slot stays free for
                                      the oldest one's second chunk (default: while room for both
                                      chunks of every admitted microbatch stays free) */
#define PP_GREEDY_FLAG_LIMIT   64u /* every combination of flags is < this */

/* A compute order (kind PP_CUSTOM, backward split into I and W), not lowered. */
PIPEPAR_API pp_status pp_schedule_build_greedy(const pp_greedy_config *cfg, pp_schedule **out, pp_error *err);

/* What one layer costs, for the layout search's embedding and loss (cfg.layers). */
typedef struct pp_layer_costs {
    double f, i, w;         /* forward, input gradient, weight gradient (a full backward is i + w) */
    double memory;          /* activations one microbatch keeps there, in decoder layers (1 = one) */
} pp_layer_costs;

/* Where a running search is, for pp_search_config.progress. */
typedef struct pp_search_progress {
    long simulated;         /* schedules proven and simulated so far, every vpp and split */
    int vpp;                /* the vpp being searched now */
    long splits_done;       /* with layers: the splits of this vpp searched so far */
    long splits_total;      /*   and the most it will try (0 without layers) */
} pp_search_progress;

typedef struct pp_search_config {
    int pp;                 /* pipeline ranks, >= 1 */
    int mb;                 /* microbatches per step, >= 1 */
    pp_sim_costs costs;     /* as pp_simulate takes them, except that a full backward B costs
                               i + w when only the halves are given (per stage too). Per-stage
                               arrays hold pp*vpp entries, so they need vpp below */
    double max_memory;      /* cap on every rank's peak memory in the units above; 0 = none */
    int vpp;                /* 0: try 1..max_vpp (V kinds when 2 is among them); else only this vpp */
    int max_vpp;            /* largest vpp tried; 0 means 4 */
    pp_schedule_kind kind;  /* PP_KIND_NONE: every kind; else only this one (PP_CUSTOM: the greedy
                               schedules), e.g. PP_INTERLEAVED_1F1B for a trainer with no split backward */
    int layers;             /* > 0: choose the layout too (above). costs.f, b, i, w are then per layer,
                               and no per-stage costs may be given: each split sets them, and
                               memory_stage to its layers. A vpp with more stages than layers is skipped;
                               at pp 1 only vpp 1 (a layout has no virtual stages there) */
    int layout_spread;      /* with layers: how far a stage's layer count may stray from the even
                               split (layers / stages, rounded down or up); 0 means 1 */
    pp_layer_costs embedding; /* with layers: the input layer (Megatron's E), on the first stage: added
                               to stage 0's costs. All 0 (the default): free */
    pp_layer_costs loss;    /* with layers: the output layer and loss (L), on the last stage: added to
                               it. An LLM's vocabulary projection often costs one or two decoder
                               layers, which is why Megatron can count it in the split
                               (account_for_loss_in_pipeline_split); the search then gives the last
                               stage fewer layers */
    double loss_deferred;   /* with layers: of the loss's backward (loss.i + loss.w, per microbatch), the
                               part a trainer defers to once a step, after the last stage's last
                               backward (the output layer's weight gradient: gpt's
                               --defer-head-wgrad, Megatron-LM's defer_embedding_wgrad_compute).
                               Each backward of the last stage costs that much less, and the stage
                               does mb times it as its tail (pp_sim_costs.tail_stage); it comes out
                               of loss.w first, then loss.i. 0: none */
    const pp_layer_costs *layer_costs; /* with layers, optional: [layers] each layer's own costs, in
                               model order (dense and MoE layers, attention and Mamba); a stage costs
                               the sum of its layers'. NULL: every layer costs costs.f, i, w and
                               keeps 1 layer of memory */
    int split_backward;     /* 1: every schedule with whole backwards runs each B as its I then its W
                               (pp_schedule_split_backward), so a B's output gradient leaves before
                               its weight gradient is computed; for a trainer with backward_input and
                               backward_weight callbacks. Those entries are named "..., B as I then W"
                               (an FB kind entered unsplit keeps its FBs whole: only its plain B's) */
    long max_layouts;       /* with layers: a vpp with at most this many splits has every one tried;
                               one with more is searched by descent from the even split (each round,
                               the one-layer move between two stages that shortens the step most,
                               until none does), trying at most this many; 0 means 4096 (each split
                               costs a whole search of that vpp) */
    void (*progress)(void *user, const pp_search_progress *where);
                            /* optional: called after every schedule simulated (often: a layout
                               search simulates hundreds of thousands), so a caller can show how far
                               a long search is; it must be cheap and may not call pp_search */
    void *progress_user;    /* passed to progress */
    int threads;            /* with layers: the splits of a vpp searched on this many threads at once
                               (pthreads; 0 or 1: the calling thread alone). The result is the same
                               for any count. progress is then called from those threads, one call
                               at a time. Under PIPEPAR_NO_THREADS: one thread */
} pp_search_config;

typedef struct pp_search_entry {
    char name[128];         /* e.g. "zb-h2 max_live=7", "interleaved vpp=2 group=4", "greedy V ..." */
    pp_schedule_kind kind;  /* PP_CUSTOM for the greedy schedules */
    pp_placement placement;
    int vpp, group, max_live; /* the parameters used (0 where the kind takes none) */
    double max_memory;      /* greedy with per-stage memory: its cap, weighed as peak_memory (max_live 0) */
    unsigned greedy_flags;
    int split_overlaps;     /* 1: its FBs run as F then B (pp_schedule_split_overlaps), named "... split" */
    int split_backward;     /* 1: its B's run as I then W (cfg.split_backward; the schedule had B's) */
    double makespan;        /* simulated step time */
    double bound;           /* a step no order of its actions on its ranks beats (pp_sim_result.bound) */
    double bubble;          /* mean over ranks of 1 - busy / makespan */
    double peak_memory;     /* largest over ranks, units above */
    int peak_live;          /* largest over ranks, (stage, microbatch) activations */
    int fits;               /* 1 when peak_memory <= max_memory (or no cap) */
    const int32_t *stage_layers; /* with cfg.layers: [pp*vpp] layers of each stage of this schedule's
                               fastest split (the result owns them); NULL otherwise */
} pp_search_entry;

typedef struct pp_search_result {
    int count;                /* schedules built, proven and timed */
    pp_search_entry *entries; /* [count], ranked: fitting first; then makespan, bubble, memory */
    pp_schedule *best;        /* entries[0] when it fits, lowered (ready for CSV or the runtime);
                                 NULL when nothing fits the cap */
    long layouts;             /* with cfg.layers: splits tried, over every vpp; else 0 */
    int layouts_local;        /* 1: some vpp had more splits than max_layouts, and was searched by
                                 descent from the even split (so its best may be a local one) */
    long simulated;           /* schedules built, proven and simulated, over every split and vpp */
    long ruled_out;           /* with cfg.layers: (schedule, split) pairs never built nor simulated,
                                 as no order of that schedule's actions on that split could match
                                 its time on the even split: some rank's earliest start (its first
                                 input's forward chain) plus its work already exceeds it. The
                                 entries are the same as without, a descent takes the same
                                 splits, and the count is the same at any thread count */
    int32_t *layout_pool;     /* storage of the entries' stage_layers */
} pp_search_result;

PIPEPAR_API pp_status pp_search(const pp_search_config *cfg, pp_search_result **out, pp_error *err);
PIPEPAR_API void pp_search_result_free(pp_search_result *r);
/* Writes stage_layers[0..stages) as a Megatron layout, 'Et|t*2|t*3L' (E input, L loss), into buf;
 * returns the length it needs (as snprintf does), so a short buf is never silently cut off. */
PIPEPAR_API int pp_search_layout_text(const int32_t *stage_layers, int stages, char *buf, size_t size);

/* ============================================================================================
 * >>plan
 * A trainer's schedule options, made into what it runs. A trainer that lets its user pick the
 * schedule (a kind, a search, or a CSV from another tool), the stages' sizes (its layers split
 * evenly, or a Megatron layout) and the backward's form (whole, or I then W) needs the same
 * sequence each time: the layer split; the compute order, built (pp_schedule_build, or the greedy
 * scheduler for the costs), searched (pp_search on the split's per-stage costs, or choosing the
 * split too) or read (pp_schedule_read_csv, its pp, vpp and mb checked against those given);
 * lowered; split as asked; proven (pp_schedule_validate); and the stages' costs, for pictures.
 * pp_plan_build is that sequence, once: the CLI's schedule and simulate, examples/mlp_plan.c and
 * examples/mlp_gpu.cu call it, so they refuse the same combinations in the same words (each
 * message names the config field, as the flags do). It reads no files: a CSV comes as its text.
 *
 *     pp_plan_config pc = { .kind = PP_INTERLEAVED_1F1B, .pp = 2, .mb = 8, .group = 4, .layers = 16,
 *                           .layout = "Et|t*2|t*2|t*2|t*2|t*2|t*3|t*2L", .split_backward = 1 };
 *     pp_plan *plan;
 *     if (pp_plan_build(&pc, &plan, &err) != PP_OK) { fprintf(stderr, "%s\n", err.message); return 2; }
 *     // stage s runs layers [first[m], first[m] + count[m]) of plan->layers,
 *     // m = pp_stage_model_stage(plan->schedule, s); run plan->schedule on every rank
 *     pp_plan_free(plan);
 *
 * Layers. A layout gives the stages (each holding at least one layer, vpp = stages / pp; DualPipe,
 * which runs every model stage twice, takes even stages only). Without one the layers are split
 * evenly over the model stages (pp * vpp; pp under DualPipe), which must divide them; layers 0
 * means one a model stage. Costs are per layer when layers or a layout is given, and a stage
 * costs the sum of its layers' (and keeps their memory, one unit a layer): what the greedy
 * scheduler, the search and plan.costs use. Otherwise they are as pp_simulate takes them.
 * ============================================================================================ */

typedef struct pp_plan_config {
    pp_schedule_kind kind;  /* what to build (PP_CUSTOM: the greedy scheduler, for costs); with
                               search, only this kind (PP_KIND_NONE: every kind) */
    int search;             /* 1: pp_search's fastest schedule for costs, under max_memory */
    int pp;                 /* pipeline ranks; with csv, 0 takes the file's */
    int vpp;                /* chunks per rank; 0: the layout's or the file's; a search over an even
                               split of layers, 2 (its per-stage costs need a stage count); else the
                               kind's (pp_schedule_config.vpp) or, searching, every vpp */
    int mb;                 /* microbatches per step; with csv, 0 takes the file's */
    int group, max_live;    /* built kinds only, as pp_schedule_config takes them */
    const char *csv;        /* the schedule instead: PyTorch's pipeline-order CSV, its text */
    size_t csv_len;
    const char *csv_name;   /* the plan's name is "from <csv_name>"; NULL: "from csv" */
    int keep_csv_comm;      /* 1: the file's sends and receives are proven as written (lowered
                               only when it has none); 0: its compute order is proven, then
                               lowered by pipepar (another tool's groups need not pair) */
    int layers;             /* the model's layers (decoder layers, blocks); 0: the layout's, or one
                               a model stage */
    const char *layout;     /* Megatron's pipeline layout ('Et*3|t*4|t*4|t*5L'): the stages' sizes */
    int search_layout;      /* with search and layers: the search splits the layers too */
    int layout_spread;      /* search_layout: each stage within this many layers of the even split
                               (pp_search_config's; 0 means 1) */
    pp_sim_costs costs;     /* per layer with layers or a layout, else as pp_simulate takes them;
                               zero means F = 1, B = 2F, I = W = B/2. Per-stage arrays only without
                               layers and layout; action_cost never (it times one schedule). The
                               search and pp_plan_replan time plans with costs.grouped: give the
                               way the runtime will post transfers (2 over a transport with
                               independent_peers, else 1) */
    const pp_layer_costs *layer_costs; /* optional [layers]: each layer's own costs */
    double max_memory;      /* search: cap on every rank's peak memory (pp_search_config's) */
    int split_backward;     /* 1: each whole B as its I then its W (pp_schedule_split_backward);
                               a search's candidates too */
    int split_overlaps;     /* 1: each FB as its F then its B (pp_schedule_split_overlaps) */
    int threads;            /* search with search_layout: the splits searched on this many threads
                               (pp_search_config.threads; 0 or 1: the calling thread). The plan is
                               the same for any count */
} pp_plan_config;

typedef struct pp_plan {
    pp_schedule *schedule;  /* lowered, split as asked, proven: what every rank's executor takes */
    pp_layers *layers;      /* the model stages' layers: stage s of the schedule runs model stage
                               pp_stage_model_stage(schedule, s) */
    pp_sim_costs costs;     /* cfg.costs, with per-stage arrays when layers or a layout was given
                               (for every stage of the schedule): for pp_simulate and pictures */
    char name[160];         /* what was made: "interleaved group=4, B as I then W", "from best.csv",
                               a search's winner ("greedy V ...") */
    pp_search_result *search;   /* with search: the ranking (its best is schedule now) */
    double *stage_costs;    /* storage of costs' per-stage arrays */
} pp_plan;

/* Runs the sequence above for cfg. On failure nothing is returned (*out NULL) and err names the
 * field and the rule: "vpp=3: the layout has 4 stages, so vpp = 2 (or leave vpp 0)". A caller
 * may take schedule and layers for itself (set them NULL before pp_plan_free). */
PIPEPAR_API pp_status pp_plan_build(const pp_plan_config *cfg, pp_plan **out, pp_error *err);
PIPEPAR_API void pp_plan_free(pp_plan *p);
/* Re-planning a searched plan for measured costs (>>adapt): where the order comes from the costs
 * (cfg->search with cfg->search_layout and cfg->layers), a new split wants a new order, so both
 * are searched again. cfg is the plan's config with the measured per-layer costs at speed 1 and
 * the ranks' speeds in cfg->costs.rank_speed (required; pp_speed_exchange gives both); current is
 * the schedule running now (as pp_plan_build made it; not DualPipe's two copies), current_split
 * its layers per stage [current->num_stages]. Both are simulated on those costs: *next gets the
 * new plan when its step is shorter by more than min_gain (0 .. 1), or when the current plan is
 * over cfg->max_memory and the new one is not; else NULL (keep running current). Fails as
 * pp_plan_build does where no schedule fits cfg->max_memory. *gain (may be NULL) as
 * pp_layers_replan's, of the simulated steps. The new plan may place stages otherwise
 * (a V order for a looped one): pp_layers_owners with each schedule's placement says which rank
 * holds each layer before and after. Ranks given the same config get the same plan. */
PIPEPAR_API pp_status pp_plan_replan(const pp_plan_config *cfg, const pp_schedule *current, const int *current_split,
                                     double min_gain, pp_plan **next, double *gain, pp_error *err);
/* The per-stage costs of a layer split, as a plan computes them: each stage's F, B, I, W and
 * memory the sum of its layers' (per_layer's costs and one unit of memory a layer, or each
 * layer's own from layer_costs [l->num_layers] when not NULL). storage holds 5 * l->num_stages
 * doubles of the caller's, which out's per-stage arrays point into; out's other fields are
 * per_layer's. PP_EINVAL for a stage that holds no layer (its costs would be zero). */
PIPEPAR_API pp_status pp_plan_stage_costs(const pp_layers *l, const pp_sim_costs *per_layer,
                                          const pp_layer_costs *layer_costs, double *storage, pp_sim_costs *out,
                                          pp_error *err);


/* ============================================================================================
 * >>pack
 * Sequence packing: variable-length sequences go into bins of at most `capacity` tokens; each
 * bin becomes one microbatch, and every data-parallel rank gets the same number of them.
 *
 * Algorithms. The names and the outcomes are NeMo RL's (nemo_rl/data/packing/algorithms.py) and,
 * for the two knapsacks, Megatron-LM's (examples/multimodal/data_loading/knapsacks.py): for the
 * same lengths each returns the same bins, in the same order, holding the same sequences in the
 * same order as the Python it reproduces, but in O(n log n) instead of a scan over open bins:
 *   first_fit_decreasing    longest first (ties: the higher index first, as Python's sort of
 *                           (length, index) pairs with reverse=True), each into the first bin with
 *                           room; a tournament tree over the bins' room finds it in O(log bins).
 *   best_fit_decreasing     the same order, each into the bin it fills most tightly (least room
 *                           left that still fits; ties: the earliest bin); a balanced tree.
 *   first_fit_shuffle       the order Python's random.seed(seed); random.shuffle(...) gives a list
 *                           of n items (a Mersenne Twister identical to CPython's), then first fit.
 *   modified_first_fit_decreasing   Johnson & Garey's MFFD in NeMo RL's five phases, including its
 *                           last phase as written there: each leftover goes into the least-filled
 *                           leftover bin when it fits, else into a new one (and, as NeMo RL's
 *                           current version does, no empty bin when nothing is left over).
 *   concatenative           input order, a new bin whenever the next sequence does not fit.
 *   greedy_knapsack         one bin at a time, always adding the largest sequence that still fits
 *                           (ties: the higher index).
 *   balanced_greedy_knapsack  longest first (ties: the lower index), each into the least-filled of
 *                           ceil(sum / capacity) + delta bins (ties: the earliest), or into a new
 *                           bin when it does not fit there; bins left empty are dropped.
 * max_sequences_per_bin caps the sequences of a bin as NeMo RL does (MFFD then runs first fit
 * decreasing, as NeMo RL does); for the knapsacks a full bin simply stops taking sequences.
 * Differences from the Python, all deliberate: a length that is zero or negative is an error
 * (NeMo RL only rejects it in MFFD), so is one longer than the capacity (Megatron's balanced
 * knapsack prints a warning and drops the sequence).
 *
 * Bin-count constraints, exactly NeMo RL's SequencePacker._adjust_bin_count: the target is
 * max(bins, min_bin_count) rounded up to a multiple of bin_count_multiple. Extra bins are never
 * added empty: bins are visited from the most sequences to the fewest (ties: the higher bin index
 * first), and each new bin receives the last sequence of the current source bin, which is drained
 * down to one sequence before the next source is used. Fewer sequences than target bins is an
 * error. NeMo RL sets both to the data-parallel size so every rank runs the same number of
 * microbatches (a rank with fewer would leave its pipeline waiting at the first collective).
 *
 * The distributed plan (pp_pack_plan_build) does what NeMo RL's shard_by_batch_size and Megatron
 * policy worker do for one global batch:
 *   1. pad each sequence to a multiple of seq_multiple (tp*cp*2 when cp > 1, else tp) and pack
 *      the padded lengths;
 *   2. constraints: min_bin_count = bin_count_multiple = dp, or dp*pp with virtual pipelining
 *      (Megatron's interleaved schedule runs microbatches in groups of pp);
 *   3. bins to (dp rank, microbatch): round robin, bin b -> rank b % dp, microbatch b / dp (NeMo
 *      RL's), or balanced by tokens or by attention cost (sum of squared padded lengths);
 *   4. padding of each microbatch: its padded total rounded up to bin_multiple; with pp > 1 (and
 *      no variable_shapes) every microbatch of a rank is padded to the rank's largest, because the
 *      pipeline's send/receive buffers have one shape. The tail padding belongs to the bin's last
 *      sequence, whose padded length grows (as NeMo RL's _pack_sequences_for_megatron does), so
 *      cu_seqlens_padded ends at the microbatch's token count and a CP split stays exact.
 *
 * Index arrays are plain int32 (tokens within one microbatch) and int64 (rows of whole-batch
 * tensors), laid out as documented at each field, so pipepar_cuda.cu can move bytes by them.
 * ============================================================================================ */

typedef enum pp_pack_algo {
    PP_PACK_FFD = 0,                    /* "first_fit_decreasing" (the default) */
    PP_PACK_BFD,                        /* "best_fit_decreasing" */
    PP_PACK_FIRST_FIT_SHUFFLE,          /* "first_fit_shuffle" */
    PP_PACK_MFFD,                       /* "modified_first_fit_decreasing" */
    PP_PACK_CONCATENATIVE,              /* "concatenative" */
    PP_PACK_GREEDY_KNAPSACK,            /* "greedy_knapsack" */
    PP_PACK_BALANCED_GREEDY_KNAPSACK,   /* "balanced_greedy_knapsack" */
    PP_PACK_ALGO_COUNT
} pp_pack_algo;

typedef struct pp_pack_config {
    int32_t capacity;           /* tokens a bin holds, >= 1 (NeMo RL's max_tokens_per_microbatch) */
    pp_pack_algo algo;          /* 0 means first_fit_decreasing */
    int min_bin_count;          /* at least this many bins; 0 means no minimum */
    int bin_count_multiple;     /* the bin count is a multiple of this; 0 means 1 */
    int max_sequences_per_bin;  /* 0 means unlimited */
    uint64_t seed;              /* first_fit_shuffle: as Python's random.seed(seed) */
    int knapsack_delta;         /* balanced_greedy_knapsack: bins beyond ceil(sum/capacity) to
                                   start with; 0 means 20 (Megatron's default), negative means 0 */
} pp_pack_config;

/* Bins in compressed-row form: bin b holds seqs[bin_offsets[b] .. bin_offsets[b+1]-1], indices
 * into the caller's length array, in the order the algorithm placed them. */
typedef struct pp_packing {
    int num_seqs;
    int num_bins;
    int32_t capacity;
    int32_t *bin_offsets;   /* [num_bins + 1] */
    int32_t *seqs;          /* [num_seqs] */
    int32_t *bin_tokens;    /* [num_bins] sum of the packed lengths of each bin (<= capacity) */
    int64_t total_tokens;   /* sum of all lengths */
} pp_packing;

PIPEPAR_API const char *pp_pack_algo_name(pp_pack_algo algo);   /* "first_fit_decreasing" */
/* Accepts the names above in any case and the short forms ffd, bfd, ffs, mffd, concat, knapsack,
 * balanced_knapsack. */
PIPEPAR_API pp_status pp_pack_algo_parse(const char *name, pp_pack_algo *algo, pp_error *err);

/* Packs n lengths (each 1 .. capacity) and applies the bin-count constraints. n may be 0 (no
 * bins, unless min_bin_count asks for some: then the too-few-sequences error). */
PIPEPAR_API pp_status pp_pack(const int32_t *lengths, int n, const pp_pack_config *cfg,
                              pp_packing **out, pp_error *err);
PIPEPAR_API void pp_packing_free(pp_packing *p);
/* ceil(sum of lengths / capacity): no packing can use fewer bins. 0 for bad arguments. */
PIPEPAR_API int64_t pp_pack_lower_bound(const int32_t *lengths, int n, int32_t capacity);

typedef enum pp_pack_assign {
    PP_ASSIGN_ROUND_ROBIN = 0,  /* bin b -> dp rank b % dp, microbatch b / dp (NeMo RL) */
    PP_ASSIGN_TOKENS,           /* balance padded tokens per rank, largest bin first */
    PP_ASSIGN_ATTENTION         /* balance the sum of squared padded sequence lengths per rank */
} pp_pack_assign;

typedef struct pp_pack_plan_config {
    pp_pack_config pack;        /* capacity (required), algo, ...; min_bin_count and
                                   bin_count_multiple 0 mean the distributed default: dp, or
                                   dp*pp when vpp > 1. An explicit bin_count_multiple must be a
                                   multiple of dp. */
    int dp, pp, vpp, tp, cp;    /* parallel sizes; 0 means 1 */
    int seq_multiple;           /* pad each sequence to a multiple of this; 0 means tp*cp*2 when
                                   cp > 1, else tp (NeMo RL's sequence_length_pad_multiple); with
                                   cp > 1 it must be a multiple of 2*cp */
    int bin_multiple;           /* pad each microbatch's token count to a multiple of this (NeMo
                                   RL pads to 16*2cp*tp for FP8); 0 means 1; with cp > 1 a value
                                   above 1 must be a multiple of 2*cp */
    int variable_shapes;        /* pp > 1: nonzero lets microbatches keep their own lengths */
    int same_shape_all_ranks;   /* pp > 1: pad to the largest microbatch over all dp ranks
                                   instead of each rank's own largest (NeMo RL: each rank's) */
    pp_pack_assign assign;      /* 0 means round robin */
} pp_pack_plan_config;

typedef struct pp_pack_plan {
    pp_packing *bins;           /* the bins over padded_lengths (indices into the caller's array) */
    int num_seqs, num_bins;
    int dp, num_microbatches;   /* microbatches per dp rank: num_bins / dp */
    int pp, tp, cp, seq_multiple, bin_multiple;
    int32_t *lengths;           /* [num_seqs] copy of the caller's lengths */
    int32_t *padded_lengths;    /* [num_seqs] lengths rounded up to seq_multiple: what was packed */
    int64_t *seq_starts;        /* [num_seqs] exclusive prefix sums of lengths: where each sequence
                                   starts when the sequences lie back to back in index order */
    int32_t *bin_rank;          /* [num_bins] the dp rank that runs bin b */
    int32_t *bin_microbatch;    /* [num_bins] its microbatch index on that rank */
    int32_t *microbatch_bin;    /* [dp * num_microbatches] bin of (rank, mb) at rank*num_microbatches+mb */
    int32_t *bin_real_tokens;   /* [num_bins] sum of the unpadded lengths */
    int32_t *bin_padded_tokens; /* [num_bins] the microbatch's token count after all padding */
    int32_t *cu_seqlens;        /* [num_seqs + num_bins]: bin b's count_b+1 entries begin at
                                   bins->bin_offsets[b] + b; 0, l0, l0+l1, ... (unpadded) */
    int32_t *cu_seqlens_padded; /* same layout; padded, ending at bin_padded_tokens[b] */
} pp_pack_plan;

PIPEPAR_API pp_status pp_pack_plan_build(const int32_t *lengths, int n, const pp_pack_plan_config *cfg,
                                         pp_pack_plan **out, pp_error *err);
PIPEPAR_API void pp_pack_plan_free(pp_pack_plan *plan);
/* Sequences in bin b; its cu_seqlens and cu_seqlens_padded (count+1 entries each); NULL/-1 for
 * a bin out of range. */
PIPEPAR_API int pp_pack_plan_bin_size(const pp_pack_plan *plan, int bin);
PIPEPAR_API const int32_t *pp_pack_plan_cu_seqlens(const pp_pack_plan *plan, int bin);
PIPEPAR_API const int32_t *pp_pack_plan_cu_seqlens_padded(const pp_pack_plan *plan, int bin);
/* Gather map of one microbatch: rows[t] for t in 0 .. bin_padded_tokens[bin]-1 is the row of the
 * caller's flat token tensor that packed position t takes, or -1 for padding. Sequence s starts
 * at row seq_offsets[s]; NULL means the sequences lie back to back in index order (the exclusive
 * prefix sums of the unpadded lengths); for a padded [batch, seq_len] tensor pass s * seq_len. */
PIPEPAR_API pp_status pp_pack_plan_gather(const pp_pack_plan *plan, int bin, const int64_t *seq_offsets,
                                          int64_t *rows, pp_error *err);


/* ============================================================================================
 * >>cp
 * Context parallelism splits every sequence along its length over cp ranks. Under causal
 * attention a later token attends to more tokens, so cutting a sequence into cp contiguous
 * pieces would load the last rank most. The load-balanced split cuts it into 2*cp equal chunks
 * and gives rank r chunks r and 2*cp-1-r, an early cheap chunk with a late costly one:
 *
 *     cp = 2, 8 tokens:   chunks [0 1] [2 3] [4 5] [6 7]
 *                         rank 0 holds chunks 0 and 3: positions 0 1 6 7
 *                         rank 1 holds chunks 1 and 2: positions 2 3 4 5
 *
 *   BSHD  a padded batch, every row seq_len tokens (seq_len % (2*cp) == 0): each row split alike,
 *         as Megatron-LM's get_batch_on_this_cp_rank does.
 *   THD   packed sequences described by cu_seqlens_padded (every padded length % (2*cp) == 0):
 *         each sequence split on its own; rank r's local buffer holds its two chunks of sequence
 *         0, then its two of sequence 1, ..., so sequence i starts at cu_seqlens_padded[i] / cp
 *         locally. This is TransformerEngine's thd_get_partitioned_indices, position for position.
 *         Packed with 5 and 11 tokens padded to 8 and 12 (cu_seqlens_padded 0 8 20), cp = 2:
 *             rank 0: 0 1 6 7 | 8 9 10 17 18 19       (chunk size 2 in sequence 0, 3 in sequence 1)
 *             rank 1: 2 3 4 5 | 11 12 13 14 15 16
 *
 * Two int32 index maps per split, positions within one microbatch (what pipepar_cuda.cu's
 * gather kernels read):
 *   index  [total / cp]  index[j] = global position of rank r's local token j; the rank's input is
 *                        input[index[j]] for j = 0 .. total/cp - 1.
 *   source [total]       source[g] = r * (total / cp) + j for the rank r and local slot j holding
 *                        global position g; with every rank's output all-gathered rank by rank
 *                        into one [cp, total / cp] buffer, output[g] = gathered[source[g]]
 *                        restores the sequence order. The index maps of all ranks, concatenated,
 *                        form a permutation of 0 .. total-1 and source is its inverse.
 * ============================================================================================ */

/* BSHD: rank's local positions of one row of seq_len tokens. index has room for seq_len / cp. */
PIPEPAR_API pp_status pp_cp_bshd_indices(int32_t seq_len, int cp, int rank, int32_t *index, pp_error *err);
/* BSHD: the inverse for gathering outputs back. source has room for seq_len. */
PIPEPAR_API pp_status pp_cp_bshd_gather(int32_t seq_len, int cp, int32_t *source, pp_error *err);

/* THD: cu_seqlens_padded has num_seqs + 1 entries, from 0, nondecreasing, every difference a
 * multiple of 2*cp when cp > 1; total = cu_seqlens_padded[num_seqs]. index has room for
 * total / cp. (cp = 1 is the identity and takes any lengths.) */
PIPEPAR_API pp_status pp_cp_thd_indices(const int32_t *cu_seqlens_padded, int num_seqs, int cp, int rank,
                                        int32_t *index, pp_error *err);
/* THD: the inverse for gathering outputs back. source has room for total. */
PIPEPAR_API pp_status pp_cp_thd_gather(const int32_t *cu_seqlens_padded, int num_seqs, int cp, int32_t *source,
                                       pp_error *err);
/* THD: the rank-local boundaries, cu_seqlens_padded[i] / cp (num_seqs + 1 entries). */
PIPEPAR_API pp_status pp_cp_thd_local_cu_seqlens(const int32_t *cu_seqlens_padded, int num_seqs, int cp,
                                                 int32_t *local, pp_error *err);

/* A microbatch of a pack plan, split with the plan's cp: pp_cp_thd_indices over the bin's
 * cu_seqlens_padded. index has room for plan->bin_padded_tokens[bin] / plan->cp. */
PIPEPAR_API pp_status pp_cp_plan_indices(const pp_pack_plan *plan, int bin, int cp_rank, int32_t *index,
                                         pp_error *err);
/* The rows a cp rank's tokens come from, in one step: rows[j] for j = 0 .. padded/cp - 1 is the
 * row of the caller's flat token tensor that rank cp_rank's local token j of microbatch `bin`
 * takes (pp_pack_plan_gather composed with pp_cp_plan_indices), -1 for padding. seq_offsets as
 * for pp_pack_plan_gather (NULL: the sequences back to back). One gather by these rows builds the
 * rank's input ids, labels or loss mask straight from the unpacked batch. */
PIPEPAR_API pp_status pp_cp_plan_rows(const pp_pack_plan *plan, int bin, int cp_rank, const int64_t *seq_offsets,
                                      int64_t *rows, pp_error *err);


/* ============================================================================================
 * >>replay
 * Router replay ("R3", rollout routing replay): an RL trainer makes its MoE routers pick the
 * experts the inference engine picked when it generated the samples, so training follows the
 * routes the samples were drawn with (Megatron-LM's RouterReplay, NeMo RL's and verl's router
 * replay, slime's routing replay). The rollout records, for every token, the top-k expert ids of
 * every MoE layer: a tensor [recorded_tokens, payload_layers, topk] in the rollout's token order
 * (all of sequence 0, then sequence 1, ...). Training runs the tokens packed, CP-split and, with
 * sequence parallelism, TP-split, and each pipeline stage holds only some layers. So the router
 * of a local MoE layer on (pp rank, virtual stage, microbatch, cp rank) needs the rows of the
 * recording for its local tokens, in local order, at that layer's slot. This section computes
 * both: which recorded row each local token takes and which slot each local MoE layer reads.
 *
 * Which layers are MoE (pp_moe_layout), Megatron-LM's rules: with an integer moe_layer_freq N,
 * decoder layer i (0-based) is MoE when i % N == 0; DeepSeek's first_k_dense_replace makes layers
 * 0 .. k-1 dense; a pattern (Megatron's list form, e.g. [0]*3+[1]*58) says it layer by layer.
 * The recording's layer axis is either compressed, one slot per MoE layer in layer order, or
 * full, one slot per decoder layer (vLLM's layout; slot = layer index), as NeMo RL accepts both.
 *
 * The map of one (stage, microbatch, cp rank):
 *     layers[l], payload[l]   for the stage's MoE layers in [first_layer, last_layer), in order:
 *                             the 0-based decoder layer (Megatron's layer_number - 1) and its slot;
 *                             dense layers get none, and a stage with no MoE layer gets an empty map.
 *     rows[t]                 for each local token t (the rank's THD order: pp_cp_plan_rows over
 *                             the recording, then this tp rank's piece): the recorded row, or -1
 *                             for padding. The replay tensor of layer l is
 *                             replay[l][t][k] = rows[t] >= 0 ? recording[rows[t]][payload[l]][k] : -1,
 *                             -1 being the missing-route sentinel NeMo RL's RouterReplay patch
 *                             routes normally (pp_replay_gather does this on the host; the CUDA
 *                             kernel of pipepar_cuda.cu does it on the device).
 * With sequence_parallel and tp > 1 the local tokens are split further into tp contiguous
 * pieces and the map keeps this tp rank's piece (NeMo RL's _split_for_sequence_parallel).
 * ============================================================================================ */

typedef struct pp_moe_layout {
    int num_layers;                 /* decoder layers of the whole model, >= 1 */
    int first_k_dense;              /* layers 0 .. first_k_dense-1 are dense */
    int moe_freq;                   /* 0 means 1: a layer i >= first_k_dense is MoE when
                                       i % moe_freq == 0 (Megatron's integer moe_layer_freq) */
    const unsigned char *pattern;   /* optional [num_layers], nonzero = MoE; overrides the two above */
    int payload_layers;             /* the recording's layer axis: 0 means compressed (one slot per
                                       MoE layer); num_layers means one slot per decoder layer */
} pp_moe_layout;

/* 1 when decoder layer `layer` (0-based) is MoE, 0 when dense, -1 for a bad layout or layer. */
PIPEPAR_API int pp_moe_is_moe(const pp_moe_layout *m, int layer);
/* MoE layers of the model; -1 for a bad layout. */
PIPEPAR_API int pp_moe_count(const pp_moe_layout *m);
/* The MoE layers among decoder layers [first_layer, last_layer): *count of them, their layer
 * indices and their recording slots (either array may be NULL; each needs room for
 * last_layer - first_layer). */
PIPEPAR_API pp_status pp_moe_stage_layers(const pp_moe_layout *m, int first_layer, int last_layer, int32_t *layers,
                                          int32_t *payload, int *count, pp_error *err);

typedef struct pp_replay_config {
    pp_moe_layout model;
    int first_layer, last_layer;    /* this (pp rank, virtual stage)'s decoder layers [first, last) */
    int cp_rank;                    /* which of the plan's cp ranks */
    int tp, tp_rank;                /* 0 means 1, 0 */
    int sequence_parallel;          /* nonzero: the local tokens are split over the tp ranks */
    const int64_t *record_offsets;  /* optional [plan->num_seqs]: the recorded row of each sequence's
                                       first token; NULL: the sequences lie back to back in index
                                       order (plan->seq_starts) */
} pp_replay_config;

typedef struct pp_replay_map {
    int num_layers;         /* MoE layers on the stage */
    int32_t *layers;        /* [num_layers] 0-based decoder layer of each */
    int32_t *payload;       /* [num_layers] its slot on the recording's layer axis */
    int32_t num_tokens;     /* local tokens (0 when num_layers is 0: nothing to replay) */
    int64_t *rows;          /* [num_tokens] recorded row of each local token in local order, -1 = padding */
} pp_replay_map;

/* From a layer split (>>layers): virtual stage `stage` (0 .. l->num_stages-1) gives
 * cfg->first_layer and cfg->last_layer, and cfg->model takes the split's decoder: num_layers,
 * and the MoE layers it marks (from its moe_layer_freq or a hybrid pattern's 'E'; model.pattern
 * points into l->is_moe, so l must outlive cfg's use). cfg->model.payload_layers and the rest
 * stay. A rank's chunk holds the stage its schedule's placement says (pp_rank_chunk_stage):
 * under the V placements rank r's chunk 1 is stage 2*pp-1-r, not Megatron's chunk*pp + r.
 * pp_replay_config_from_layers takes (pp_rank, chunk) in Megatron's looped numbering
 * (pp_layers_stage) and is only for the looped placement. */
PIPEPAR_API pp_status pp_replay_config_from_stage(const pp_layers *l, int stage, pp_replay_config *cfg,
                                                  pp_error *err);
PIPEPAR_API pp_status pp_replay_config_from_layers(const pp_layers *l, int pp_rank, int chunk, pp_replay_config *cfg,
                                                   pp_error *err);
/* The map of microbatch `bin` of a pack plan (the plan's cp splits it) for one stage and rank. */
PIPEPAR_API pp_status pp_replay_map_build(const pp_pack_plan *plan, int bin, const pp_replay_config *cfg,
                                          pp_replay_map **out, pp_error *err);
PIPEPAR_API void pp_replay_map_free(pp_replay_map *m);
/* Host reference of the replay gather: recording is [recorded_rows, payload_layers, topk] int32;
 * dst is [map->num_layers, map->num_tokens, topk]. Fails when a row or slot is out of range. */
PIPEPAR_API pp_status pp_replay_gather(const pp_replay_map *map, const int32_t *recording, int64_t recorded_rows,
                                       int payload_layers, int topk, int32_t *dst, pp_error *err);


/* ============================================================================================
 * >>runtime
 * Runs one rank's lowered program, once per training step. Three parts:
 *
 *   transport  how bytes move between pipeline ranks: a table of functions (post a group,
 *              wait, test, all-reduce a few floats, abort), and the group collectives a trainer
 *              runs around the step (all-reduce and all-gather of buffers, a barrier: the dp
 *              gradient sum, the tied embedding's, a cp all-gather), with the same deadlines and
 *              abort. pipepar brings one built from pthreads (>>threads, N ranks as N threads of
 *              one process, for tests and the CPU demo, with a transport per group of a grid);
 *              pipepar_nccl.c brings NCCL; a user can write their own.
 *   executor   pp_run_step() walks the rank's actions: F, B, I, W, FB call the user's
 *              callbacks; each group of consecutive SEND/RECV actions is posted at once without
 *              blocking, and a receive is waited for only right before the compute that needs
 *              it, so transfers overlap compute. The executor owns every tensor that crosses a
 *              stage boundary (a pool of slots from the user's allocator, sized at setup from
 *              the program's peak count of live tensors); neighbouring stages on one rank pass
 *              tensors in place, never copied.
 *   timeline   optional per-action start/end times, as a Chrome/Perfetto trace or ASCII chart.
 *
 * Tensors of a step. Boundary b (0 <= b <= num_stages) is the input of stage b; boundary
 * num_stages is the last stage's output. For microbatch m the user's `tensor_bytes(b, m)` says
 * its size (it may change from step to step and between microbatches: dynamic shapes need no
 * new schedule). A gradient has the size of its activation.
 *
 *     input(m) -> x0 -> F(0,m) -> x1 -> F(1,m) -> ... -> F(S-1,m) -> out -> loss(m)
 *                                                                          |
 *       B(0,m) <- g1 <- B(1,m) <- ... <- g(S-1) <------- B(S-1,m) <- grad_out
 *
 *   forward(stage, m, in, out)                   in = x_s, out = x_{s+1} (to fill)
 *   loss(m, out, grad_out, &l)                   last stage, right after its forward: the loss of
 *                                                microbatch m and dLoss/d out (to fill)
 *   backward(stage, m, in, grad_out, grad_in)    grad_in = g_s to fill; NULL on stage 0
 * (stage 0 and the last stage are those of the microbatch's route, pp_mb_info.first_stage and
 * last_stage: under DualPipe the up microbatches enter at stage pp on rank pp-1 and leave at
 * stage 2pp-1 on rank 0, and boundaries pp..2pp carry them.)
 *   backward_input / backward_weight             the two halves of a split backward (I, W);
 *                                                W gets the same in and grad_out as I had
 * x_s stays valid from its forward until the stage's backward (B or W) of that microbatch ends,
 * so the backward may read it; `out` and `grad_in` belong to the executor once the call
 * returns. The user's model keeps whatever else it saves for backward (per stage, microbatch).
 *
 * Every call gets a pp_mb_info: the stage, its chunk on this rank, the microbatch, and that
 * microbatch's user metadata (e.g. packed cu_seqlens, a CP partition) for *every* chunk, since
 * every chunk's attention needs them (this is why Megatron-LM hands each virtual stage its own
 * data iterator).
 *
 * Saved state. What a stage keeps from its forward for its backward is the model's, but where it
 * keeps it is the executor's decision: pp_mb_info.slot numbers the (stage, microbatch) pairs
 * live on the rank, the lowest free slot at each F, free again after the B or W that ends the
 * pair. The program fixes the order, so the slots a rank ever needs are its live peak
 * (pp_schedule_rank_peaks), known at setup (pp_executor_saved_slots): a trainer allocates its
 * saved activations once, that many, and indexes them by slot.
 *
 * Around a chunk: callbacks.chunk_done says when a chunk's last backward of the step has run, so
 * its data-parallel gradient reduce starts while the rest of the pipeline drains. It comes once
 * the sends after that backward are posted: work it queues (a deferred weight gradient, say)
 * runs beside the transfer the next stage waits for, not before it.
 *
 * Microbatch counts. Packing decides how many bins a step has. An executor made from a recipe
 * (pp_executor_config.recipe) instead of a schedule runs a step of any count up to max_mb: the
 * schedule of each count is built, lowered and checked on its first step and kept, and all of
 * them share one buffer pool and one set of saved-state slots.
 *
 * Around a step, what post-training trainers need:
 *   - forward only (evaluation, log-probabilities): only F actions and their transfers run;
 *     the last stage's outputs come back in microbatch order (pp_step_result.outputs);
 *   - loss and metrics reduced over microbatches on the last stage and broadcast to every
 *     rank (one all-reduce);
 *   - a batch of R rows padded to mb microbatches of ceil(R/mb) rows, the padding named in
 *     pp_mb_info (rows, valid_rows) so the loss masks it; the step's loss is
 *     sum(loss) / sum(weight), and weight defaults to valid_rows;
 *   - pp = 1 runs through the same calls (a one-rank transport, no transfers).
 *
 * Per step the executor makes two all-reduces of a few floats (the check below, the loss) and
 * no allocation once its pool has grown to the step's shapes (and, with a recipe, once the
 * step's count has run before).
 *
 * Failure. Every wait has a deadline (pp_executor_config.timeout_s). A rank that fails (a
 * callback error, a timeout, a transport error) aborts the transport with its reason, so every
 * other rank returns promptly with PP_EABORTED naming the first failure: no rank hangs. Before
 * a step the ranks all-reduce a hash of (schedule, step number, step options): ranks given
 * different schedules, or steps of different microbatch counts, fail at once with
 * PP_EINVALID_SCHEDULE naming what differs instead of exchanging wrong tensors. Message tags
 * carry (direction, stage, microbatch, step) and are checked on receipt by transports that can
 * (the threads transport does).
 * ============================================================================================ */

/* --- >>transport ------------------------------------------------------------------------- */

/* One send or receive of a group. `buf` is wherever the executor's allocator put the tensor
 * (host or device memory; the transport knows which). A tag says what travels: see
 * pp_transfer_tag; transports that match by order (NCCL) may ignore it. */
typedef struct pp_transfer {
    int is_send;        /* 1 send, 0 receive */
    int peer;           /* the other rank, 0 <= peer < world */
    uint64_t tag;
    void *buf;
    size_t bytes;       /* a receive must get exactly this many bytes */
    /* receives, optional (0: no promise): the caller has issued no work on buf since its post
     * this many posts back, so a device transport may let the receive land from that post's
     * point of the compute stream on, while the compute issued since still runs (the executor
     * sets it; pipepar_nccl.c's copy engines use it) */
    int buf_free_posts;
    /* sends, optional (0: none): 1 when the compute that wrote buf said, part by part, which of
     * its bytes were written (pp_executor_output_ready, passed on through
     * pp_transport.output_ready), so a device transport may move each part once its work is done,
     * while the rest is still being computed */
    int parts;
} pp_transfer;

/* A transport moves bytes among `world` ranks; this side is `rank`. All functions get `user`.
 *
 *   post(transfers, count, &handle)  starts a group of sends and receives at once (NCCL: one
 *         ncclGroupStart/End) and returns without waiting. Buffers stay untouched by the
 *         executor until the group is finished; the transport must not touch them before the
 *         work the executor issued earlier is done with them (NCCL: make the communication
 *         stream wait for an event recorded on the compute stream).
 *   wait(handle, timeout_s)  finishes the group: afterwards received bytes are visible to the
 *         executor's next compute and sent buffers may be reused. A host transport blocks; a
 *         device transport may instead order the compute stream after the group (a stream-event
 *         wait) and return at once. PP_ETIMEOUT after timeout_s seconds, with a message naming
 *         the peer and the tag it waits for. wait always releases the handle, even on failure
 *         and after abort.
 *   test(handle, &done)  optional (may be NULL): done = 1 if the group finished, and then the
 *         handle is released as by wait; never blocks.
 *   all_reduce(values, count, timeout_s)  in place, sum over all ranks, host floats; every rank
 *         calls it with the same count. Required: the executor uses it for the schedule check
 *         and the loss broadcast.
 *   abort(status, reason)  this rank failed: every pending and later call of every rank returns
 *         PP_EABORTED promptly (its message naming the reason). Idempotent; the first reason
 *         wins.
 * Group collectives, optional (NULL where a transport has none; pp_group_all_reduce and its
 * siblings then fail with PP_EINVAL naming the missing function). Every rank of the transport
 * calls them in the same order with the same sizes; they work on buffers of the transport's
 * memory (host memory for the threads transport, device memory ordered on the compute stream
 * for NCCL's) and end with the same deadline and abort rules as every other wait:
 *   all_reduce_buf(buf, count, timeout_s)  in place, the element-wise sum of `count` floats over
 *         all ranks; every rank gets the same bits (a trainer's replicas stay identical).
 *   all_gather(send, recv, bytes, timeout_s)  recv[r * bytes ..] gets rank r's `bytes` of send.
 *   barrier(timeout_s)  returns once every rank has called it.
 * independent_peers  1 when transfers with one peer never wait for transfers with another (the
 *         threads transport: buffered sends; NCCL's with every peer on copy engines: a stream per
 *         peer and direction). The executor then posts each lowered group as one group per peer
 *         and waits for a received tensor's group alone (and that peer's earlier ones), not for
 *         every group before it: at pp >= 3 a rank's receive from one neighbour no longer waits
 *         behind its transfers with the other. The buffer pool keeps the size in-order waits
 *         plan: when every slot is in use, the oldest group still sending is waited for first
 *         (sends in flight hold their buffers). 0 (a zeroed struct): one group a round, waited
 *         in order, which is what NCCL's grouped calls on one stream need to be free of deadlock.
 * output_ready(buf, bytes, first)  optional (NULL: the executor passes nothing on): while a
 *         compute callback runs, the first `bytes` of its output buf, which a later post sends,
 *         are written by the work issued so far (pp_executor_output_ready). first = 1 on the
 *         callback's first such call for buf: forget what was said of buf before. A device
 *         transport records the point of its compute stream; a send of buf posted with
 *         pp_transfer.parts = 1 may then move those bytes from that point on, each part while
 *         the next is computed. The marks of buf are used up by its next send. */
typedef struct pp_transport {
    void *user;
    int rank, world;
    pp_status (*post)(void *user, const pp_transfer *transfers, int count, void **handle, pp_error *err);
    pp_status (*wait)(void *user, void *handle, double timeout_s, pp_error *err);
    pp_status (*test)(void *user, void *handle, int *done, pp_error *err);
    pp_status (*all_reduce)(void *user, float *values, int count, double timeout_s, pp_error *err);
    void (*abort)(void *user, pp_status status, const char *reason);
    pp_status (*all_reduce_buf)(void *user, float *buf, size_t count, double timeout_s, pp_error *err);
    pp_status (*all_gather)(void *user, const void *send, void *recv, size_t bytes, double timeout_s, pp_error *err);
    pp_status (*barrier)(void *user, double timeout_s, pp_error *err);
    int independent_peers;
    pp_status (*output_ready)(void *user, const void *buf, size_t bytes, int first, pp_error *err);
} pp_transport;

/* The group collectives of a transport (see above), with their arguments checked. A transport of
 * one rank needs none of the functions: all_reduce and barrier return at once, all_gather copies
 * (memcpy: host memory). timeout_s 0 means 60 s. */
PIPEPAR_API pp_status pp_group_all_reduce(const pp_transport *t, float *buf, size_t count, double timeout_s,
                                          pp_error *err);
PIPEPAR_API pp_status pp_group_all_gather(const pp_transport *t, const void *send, void *recv, size_t bytes,
                                          double timeout_s, pp_error *err);
PIPEPAR_API pp_status pp_group_barrier(const pp_transport *t, double timeout_s, pp_error *err);

/* Tag of a transfer: the sending action's op (PP_OP_SEND_F or PP_OP_SEND_B), its stage and
 * microbatch, and the step number modulo 256. The receiver computes the same tag from its
 * RECV action: RECV_F(s,m) expects pp_transfer_tag(PP_OP_SEND_F, s-1, m, step) and RECV_B(s,m)
 * expects pp_transfer_tag(PP_OP_SEND_B, s+1, m, step).
 *     bits 56..63 step & 255 | 48..55 op | 24..47 stage | 0..23 microbatch                   */
PIPEPAR_API uint64_t pp_transfer_tag(int op, int stage, int mb, int step);
/* "1SEND_F3 (step 7)": the text of a tag, for messages. Returns what snprintf returns. */
PIPEPAR_API int pp_transfer_tag_format(uint64_t tag, char *buf, size_t size);

/* --- >>threads: N ranks as N threads of one process ------------------------------------------
 * Messages go through per-rank mailboxes in shared memory and are matched by (source,
 * destination, transport, tag), oldest first; a send copies its bytes (buffered), so a send
 * never blocks. The group collectives are made of such messages too.
 * Every wait uses a condition variable with a deadline. Needs POSIX threads and clocks (compile
 * with -D_POSIX_C_SOURCE=200809L under a strict -std=c99); define PIPEPAR_NO_THREADS to leave it
 * out.
 *
 *     pp_threads_world *w;  pp_threads_world_create(4, &w, &err);
 *     // on the thread of rank r:  pp_transport t;  pp_threads_transport(w, r, &t, &err);
 *     ... pp_threads_world_free(w) once every thread has joined.
 * Or let pp_threads_run start and join the threads for you.
 * Cores: every rank is a thread, so a model whose callbacks start threads of their own (an
 * OpenMP or multi-threaded BLAS build) runs ranks x those threads on the machine's cores. Give
 * each rank cores / ranks threads (OMP_NUM_THREADS, openblas_set_num_threads), or one. */
typedef struct pp_threads_world pp_threads_world;

PIPEPAR_API pp_status pp_threads_world_create(int world, pp_threads_world **out, pp_error *err);
/* Frees the world and every message still queued. Call after all ranks' threads have joined. */
PIPEPAR_API void pp_threads_world_free(pp_threads_world *w);
/* Fills *out with rank's transport; valid until the world is freed. */
PIPEPAR_API pp_status pp_threads_transport(pp_threads_world *w, int rank, pp_transport *out, pp_error *err);
/* A transport over some of the world's ranks: members[0 .. size-1] (distinct world ranks), this
 * thread being world rank `rank`, one of them. Its rank and world are rank's index in members
 * and size, so it serves as a pipeline's transport (the executor's) or as a dp, cp or embedding
 * group's (the group collectives). Its messages never meet another group's, and an abort on it
 * aborts the whole world: a failure anywhere ends every rank's waits; so does a collective that
 * fails (a deadline, ranks calling it differently). Every member must give the same members in
 * the same order; the same members and rank again give the same transport. Valid until the
 * world is freed, which frees it. Its all-reduce sums in member order, the same bits everywhere.
 * pp_threads_transport_grid takes the members from a grid: rank's group of mask dims. */
PIPEPAR_API pp_status pp_threads_transport_group(pp_threads_world *w, const int *members, int size, int rank,
                                                 pp_transport *out, pp_error *err);
PIPEPAR_API pp_status pp_threads_transport_grid(pp_threads_world *w, const pp_grid *grid, unsigned dims, int rank,
                                                pp_transport *out, pp_error *err);
/* The world of a threads transport (of the world or a group), e.g. the one pp_threads_run hands
 * each rank, to make group transports from; NULL for any other transport. */
PIPEPAR_API pp_threads_world *pp_threads_transport_world(const pp_transport *t);

/* Runs fn(user, rank, transport, err) on `world` new threads (one per rank) and joins them all.
 * status[world] and errors[world] (both optional) receive each rank's result. Returns PP_OK when
 * every rank did; otherwise the status and message of the root cause, prefixed with "rank R: "
 * unless it opens with that rank already: the rank that aborted the world first, else the first
 * rank whose failure was not PP_EABORTED. */
typedef pp_status (*pp_rank_fn)(void *user, int rank, pp_transport *transport, pp_error *err);
PIPEPAR_API pp_status pp_threads_run(int world, pp_rank_fn fn, void *user, pp_status *status,
                                     pp_error *errors, pp_error *err);

/* --- >>executor ---------------------------------------------------------------------------- */

#define PP_MAX_METRICS 8

/* What every callback knows about the microbatch it works on. */
typedef struct pp_mb_info {
    int rank;               /* pipeline rank */
    int stage;              /* global virtual stage (tensor_bytes: the boundary) */
    int chunk;              /* which of this rank's chunks holds the stage */
    int num_stages;
    int mb;                 /* microbatch, 0 <= mb < num_mb */
    int num_mb;
    int step;               /* steps run by this executor before this one */
    int forward_only;       /* 1: no backward follows; save nothing for it */
    void *meta;             /* pp_step.mb_meta[mb], or NULL */
    /* with pp_step.batch_rows = R > 0: microbatch mb holds rows [first_row, first_row + rows) of
     * the batch padded to num_mb * rows, rows = ceil(R / num_mb); only the first valid_rows are
     * real. Without: rows = valid_rows = first_row = batch_rows = 0. */
    int rows, valid_rows, first_row, batch_rows;
    /* the microbatch's route (>>schedule, Routes): it enters at first_stage (input() runs there)
     * and leaves at last_stage (loss() runs there): 0 and num_stages-1, except under DualPipe
     * (0 and pp-1 going down, pp and 2pp-1 going up). model_stage = stage - first_stage is the
     * model stage whose layers this call computes (tensor_bytes: the model boundary), the same
     * for both of DualPipe's weight copies. */
    int first_stage, last_stage, model_stage;
    /* where this (stage, microbatch) keeps what its backward reads: a slot in
     * [0, pp_executor_saved_slots(ex)), the same from its F to the B or W that ends it, and
     * reused once that ends; no two live (stage, microbatch) pairs of the rank share one. A
     * trainer allocates its saved state once, that many slots (of its largest chunk), and indexes
     * it by slot. -1 in forward-only steps (nothing is saved) and in tensor_bytes. */
    int slot;
} pp_mb_info;

/* What the loss callback reports for its microbatch. The executor sets weight to valid_rows
 * (or 1 without batch_rows) and loss and metrics to 0 before the call. The step's loss is
 * sum(loss) / sum(weight) over microbatches, so return the *sum* of per-row losses over the
 * valid rows (with batch_rows), or the microbatch's mean loss with weight 1 (without).
 *
 * Scaling the gradients (the per-token rule of Megatron-LM's calculate_per_token_loss and NeMo
 * RL's global valid tokens). Let each microbatch's loss be a sum over the valid tokens its rank
 * holds, weight their count (padding counts 0), and grad_out the gradient of that sum, unscaled
 * (the executor scales nothing). After the step every pipeline rank has its pipeline's
 * pp_step_result.weight, and its summed loss as loss * weight. Then: sum every gradient over the
 * ranks that split the batch (the dp-cp group: each cp rank holds part of the same sequences'
 * tokens), sum weight and loss * weight over the same ranks (W and L), and divide the gradients
 * by W; the step's loss is L / W. The result is the gradient of the mean loss per valid token of
 * the whole global batch, whatever the packing, the microbatch count, the padding or the dp and
 * cp sizes: the unsplit model's, up to summation order. Dividing each microbatch by its own
 * count instead weighs short microbatches more. Weights are floats: counts are exact to 2^24. */
typedef struct pp_loss {
    float loss;
    float weight;
    float metrics[PP_MAX_METRICS];  /* summed over microbatches, not divided */
} pp_loss;

/* The user's model. Callbacks return 0 on success; anything else fails the step with
 * PP_ECALLBACK (the message names the rank, action and the value returned). Optional ones may
 * be NULL: backward_input/backward_weight together (a trainer that has them should run a B
 * schedule split by pp_schedule_split_backward: its gradients then leave before the weight
 * gradients are computed). Without them a schedule's I/W pairs still run: the I calls backward,
 * the whole backward, and the W calls nothing. The order and gradients stay right; what is lost
 * is only the W's filling of the bubble (the I now costs a whole backward);
 * forward_backward always (FB actions then run the F half, then the B half: give such a rank a
 * schedule split by pp_schedule_split_overlaps, on every rank alike, so that the F half's output
 * leaves before the B half runs); loss in forward-only mode. Callbacks of one rank run on the thread that called pp_run_step. */
typedef struct pp_callbacks {
    void *user;
    /* bytes of boundary tensor `boundary` (0..num_stages) for info->mb (info->stage == boundary,
     * info->chunk == -1). Both ranks of a transfer ask for its size; their answers must agree.
     * A microbatch's input is boundary info->first_stage and its output info->last_stage + 1:
     * under DualPipe boundary pp is both the down microbatches' output and the up ones' input,
     * so tell the ends by those fields, not by 0 and num_stages. */
    size_t (*tensor_bytes)(void *user, int boundary, const pp_mb_info *info);
    /* first stage: fill x (tensor_bytes(0) bytes) with microbatch info->mb's input */
    int (*input)(void *user, const pp_mb_info *info, void *x);
    int (*forward)(void *user, const pp_mb_info *info, const void *in, void *out);
    /* last stage: grad_out is NULL in forward-only mode */
    int (*loss)(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *loss);
    int (*backward)(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in);
    int (*backward_input)(void *user, const pp_mb_info *info, const void *in, const void *grad_out,
                          void *grad_in);
    int (*backward_weight)(void *user, const pp_mb_info *info, const void *in, const void *grad_out);
    /* DualPipe-style overlap of F(f) and B(b) in one call (e.g. on two streams) */
    int (*forward_backward)(void *user, const pp_mb_info *f, const void *f_in, void *f_out,
                            const pp_mb_info *b, const void *b_in, const void *b_grad_out, void *b_grad_in);
    /* optional: chunk info->chunk (stage info->stage) has run its last backward action of the step
     * (info->mb is that action's microbatch), so its weight gradients are complete. A trainer
     * starts that chunk's data-parallel gradient reduce here, while the pipeline drains
     * (Megatron-LM's grad_sync_func). Called once per chunk per training step, in program order,
     * after the chunk's last B, W or FB (never after an I: its W follows, even when the W runs
     * nothing) and after the transfers that follow that action in the program are posted, so
     * what the callback puts on a compute stream does not hold back the sends of the action's
     * result; never in forward-only steps. info->slot is -1. */
    int (*chunk_done)(void *user, const pp_mb_info *info);
} pp_callbacks;

/* Where boundary tensors live. Zero means host memory from PIPEPAR_MALLOC / PIPEPAR_FREE.
 * A CUDA trainer passes cudaMalloc/cudaFree wrappers. alloc returns NULL on failure. With
 * pipepar_nccl.c's copy engines a peer maps the allocations of transfer buffers (CUDA IPC) until
 * pp_nccl_transport_free: an allocator whose free gives memory back to CUDA before then breaks
 * that rule when the executor regrows a slot (shapes that change); carve the tensors from an
 * arena freed after the transport, as examples/mlp_gpu.cu does. */
typedef struct pp_allocator {
    void *user;
    void *(*alloc)(void *user, size_t bytes);
    void (*free)(void *user, void *ptr, size_t bytes);
} pp_allocator;

/* Times of a step's actions. Zero means the host clock (CLOCK_MONOTONIC). A device timer
 * records an event in mark(index) and turns all of them into seconds in resolve(); indices
 * are 3*i + 0 (action i reached), 3*i + 1 (its inputs ready: after waits), 3*i + 2 (done), for
 * the rank's program position i; each index is marked at most once per step, and resolve
 * fills seconds[index] for every marked index (others are left as they are). */
typedef struct pp_timer {
    void *user;
    void (*mark)(void *user, int index);
    pp_status (*resolve)(void *user, double *seconds, int count, pp_error *err);
} pp_timer;

typedef struct pp_executor_config {
    const pp_schedule *schedule;  /* lowered (pp > 1) and valid; copied, may be freed after. Or
                                     NULL, and the recipe below */
    /* A step whose microbatch count changes (packing decides how many bins a step has, as
     * Megatron-LM takes num_microbatches on every call): instead of `schedule`, how to build one
     * for any count (recipe.kind set; giving both, or neither, is refused). The executor builds
     * recipe (its mb ignored), split as split_backward and split_overlaps say
     * (pp_schedule_split_backward, _overlaps), lowers and validates it for each count
     * pp_step.num_mb asks for, 1 .. max_mb, on that count's first step, and keeps each; one
     * buffer pool serves them all. A count the kind refuses (DualPipe's odd ones) fails its step
     * with the kind's reason. For pp_executor_saved_slots, setup builds the compute order of every
     * count: its time grows with max_mb squared, so give the most a step can have, not more.
     * Every rank must give the same recipe. */
    pp_schedule_config recipe;
    int split_backward, split_overlaps;   /* with a recipe: 1 splits each count's schedule */
    int max_mb;                   /* with a recipe: the most microbatches a step may have, 1 .. 1024 */
    pp_transport transport;       /* transport.rank is this rank, transport.world == schedule->pp */
    pp_callbacks callbacks;
    pp_allocator allocator;
    double timeout_s;             /* deadline of every wait and all-reduce; 0 means 60 s */
    int num_metrics;              /* how many pp_loss.metrics to reduce, 0..PP_MAX_METRICS */
    int record_timeline;          /* 1: time every action (pp_executor_timeline) */
    pp_timer timer;
} pp_executor_config;

typedef struct pp_executor pp_executor;

PIPEPAR_API pp_status pp_executor_create(const pp_executor_config *cfg, pp_executor **out, pp_error *err);
/* Releases every buffer through the allocator. Safe after a failed step. */
PIPEPAR_API void pp_executor_free(pp_executor *ex);

/* One step's options. Zero means: a training step, no metadata, no padding. */
typedef struct pp_step {
    void *const *mb_meta;   /* [num_mb] per-microbatch user data handed to every callback, or NULL */
    int batch_rows;         /* R > 0: the batch has R real rows, padded to num_mb * ceil(R/num_mb) */
    int forward_only;
    int num_mb;             /* microbatches of this step: 0 means the schedule's mb; with a recipe
                               1 .. max_mb (then required), the same on every rank */
} pp_step;

typedef struct pp_step_result {
    float loss;                          /* sum(loss) / sum(weight), on every rank (0 if no weight) */
    float weight;                        /* sum(weight) */
    float metrics[PP_MAX_METRICS];       /* sums over microbatches, on every rank */
    /* forward only, on the rank of the last stage: outputs[m] is microbatch m's last-stage
     * output (output_bytes[m] bytes, in the allocator's memory), valid until the next step or
     * pp_executor_free. NULL elsewhere. Under DualPipe ranks pp-1 (down microbatches) and 0 (up)
     * each get their routes' outputs, outputs[m] NULL for the others. */
    const void *const *outputs;
    const size_t *output_bytes;
    int num_outputs;
    double seconds;                      /* host wall time of the step on this rank */
} pp_step_result;

/* Runs one step of this rank's program. On failure the transport is aborted (so the other ranks
 * stop too), every buffer is accounted for, and the executor refuses further steps. */
PIPEPAR_API pp_status pp_run_step(pp_executor *ex, const pp_step *step, pp_step_result *result, pp_error *err);

typedef struct pp_executor_stats {
    int planned_slots;      /* peak live tensors of the program (training or forward-only), from setup;
                               with a recipe, the largest of the counts run so far */
    int peak_slots;         /* most slots in use at once so far */
    int slots;              /* slots with memory now */
    size_t bytes;           /* memory held by the slots now */
    long long allocations;  /* allocator calls so far (a steady step makes none) */
    long long transfers;    /* sends and receives posted so far */
    long long groups;       /* groups posted so far */
    int steps;
    int saved_slots_used;   /* the most saved-state slots live at once so far */
} pp_executor_stats;

PIPEPAR_API void pp_executor_get_stats(const pp_executor *ex, pp_executor_stats *out);

/* How many saved-state slots (pp_mb_info.slot) this rank's steps use at most: its schedule's
 * live peak (pp_schedule_rank_peaks), with a recipe the largest over every count 1 .. max_mb. */
PIPEPAR_API int pp_executor_saved_slots(const pp_executor *ex);

/* Streamed sends. From inside forward, backward, backward_input or forward_backward (on the
 * thread running the step): the first `bytes` of `out`, an output this call writes (forward's
 * out, a backward's grad_in), are written by the work issued so far. When that output goes to
 * another rank, the executor passes this on (pp_transport.output_ready) and posts its send with
 * pp_transfer.parts = 1: a device transport then moves each part once the work before the mark is
 * done, while the rest is still being computed, and the receiver has the tensor sooner after the
 * compute ends. A trainer splits the last GEMM of a stage by rows (tokens) and says after each
 * part how far the output is written (examples/mlp_gpu.cu, --send-parts). No work issued after a
 * call may write those bytes again. Outputs that stay on the rank (the last stage's, a V
 * schedule's turn) and transports without output_ready (the threads transport, MIMO's bridges)
 * take the calls and do nothing. bytes grows from call to call, from 1 to the output's size; at
 * most PP_MAX_OUTPUT_PARTS calls per output. PP_EINVAL, naming the rule, for a call outside those
 * callbacks, a pointer that is not the call's output, or bytes out of order; a transport's
 * refusal is returned as it came. A refused call counts for nothing: the send then moves what
 * the calls before it said, and the rest after the whole compute. */
#define PP_MAX_OUTPUT_PARTS 64
PIPEPAR_API pp_status pp_executor_output_ready(pp_executor *ex, const void *out, size_t bytes, pp_error *err);

/* --- >>timeline ------------------------------------------------------------------------------ */

/* The measured times of one rank's last step. Times are seconds of the rank's clock (the host
 * clock: comparable across the threads and processes of one machine). start < 0: not run. For a
 * compute action, [ready, end) is the compute and [start, ready) the wait for its inputs; for a
 * communication action, [start, end) runs from posting its group to finishing it. */
typedef struct pp_timeline {
    int rank;
    int length;
    const pp_schedule *schedule;  /* the schedule run (for stage -> chunk); may be NULL */
    const pp_action *actions;   /* [length] the rank's program */
    const double *start, *ready, *end;
} pp_timeline;

/* Fills *out with views into the executor (valid until its next step or free).
 * PP_EINVAL unless record_timeline was set and a step ran. */
PIPEPAR_API pp_status pp_executor_timeline(const pp_executor *ex, pp_timeline *out, pp_error *err);
/* Chrome / Perfetto trace JSON (open in ui.perfetto.dev or chrome://tracing): one process per
 * rank, a "compute" track (F, B, I, W, and the waits before them) and a "comm" track (groups).
 * Times start at 0 at the earliest action of all timelines. */
PIPEPAR_API pp_status pp_timeline_write_chrome_trace(const pp_timeline *ranks, int count, FILE *out,
                                                     pp_error *err);
/* Where a measured step's time went, rank by rank: each idle stretch of a rank's compute (from
 * the end of its previous compute action, or the step's start, to when the next began to
 * compute: its `ready`) is
 * split by what the next action was waiting for. Its input from another rank was still being
 * computed there: wait_compute, the schedule's own bubble as it ran. That input was computed,
 * but had not arrived or the action had not started: wait_transfer, communication not hidden
 * (the transfer itself, or its group waiting behind another on the communication stream). No
 * input from another rank: wait_other, launch gaps and host overhead. tail runs from the rank's
 * last action to the step's end (the last action of any rank); the step runs from the earliest
 * start of any action. busy + the waits + tail = the step on every rank (per_rank[rank], up to
 * the clock's noise). The timelines are
 * every rank's of one step, on one clock (the host clock of one machine: processes on one host
 * qualify); timeline 0's schedule gives each input's producer (the others' may be NULL, or copies
 * of it, as executors keep); a missing rank is an error. */
typedef struct pp_idle {
    double step;            /* the step, the same for every rank */
    double busy;            /* compute */
    double wait_compute;
    double wait_transfer;
    double wait_other;
    double tail;
} pp_idle;

PIPEPAR_API pp_status pp_timeline_idle(const pp_timeline *ranks, int count, pp_idle *per_rank, pp_error *err);
/* The measured timeline as text, `width` columns wide (0 means 96), in the layout of
 * pp_schedule_draw_ascii: per rank a line of forwards, a line of backwards (B or I) and, when
 * there are any, a line of W, and with several chunks per rank a line of the chunk at work;
 * a cell shows the microbatch (0-9, a-z, A-Z) of the action that ran in that column, blank when
 * none did; then the step time and each rank's busy share. */
PIPEPAR_API pp_status pp_timeline_draw_ascii(const pp_timeline *ranks, int count, int width, FILE *out,
                                             pp_error *err);
/* The measured step as SVG, drawn as pp_schedule_write_svg draws a simulated one: per rank a box
 * per compute action from its `ready` to its `end` (a grey strip below for the wait before it),
 * each rank's idle share, a time axis in ms, a legend. Given sim, the simulation of the schedule
 * that ran (the timelines' schedule, lowered: the same programs), the simulated step is drawn
 * above the measured one, each on its own axis, so the plan and the run read side by side. */
PIPEPAR_API pp_status pp_timeline_write_svg(const pp_timeline *ranks, int count, const pp_sim_result *sim,
                                            FILE *out, pp_error *err);


/* ============================================================================================
 * >>adapt
 * Layers in proportion to speed. GPUs of one host slow down for real reasons (a power or thermal
 * limit, a neighbour's job, a degraded part), and a pipeline whose ranks hold equal work then
 * runs at its slowest rank's pace. Giving that rank fewer layers recovers most of the loss: 16
 * equal layers on 2 ranks, rank 1 1.35x slower, split 9 / 7 take 9.45 layer-times a microbatch
 * where 8 / 8 take 10.8, against the 9.19 the two speeds allow together (16 / (1 + 1/1.35)).
 *
 * pp_layers_balance and pp_search take each rank's speed (pp_balance_config.rank_speed,
 * pp_sim_costs.rank_speed); the calls below measure the speeds from a step the executor timed,
 * decide whether another split is worth it, and move the layers. Between two steps every rank
 * runs the same protocol, so all agree without a coordinator:
 *   1. measure  the executor times each action (pp_executor_config.record_timeline). After a step,
 *               pp_speed_exchange summarises this rank's timeline (the median time per layer of
 *               each kind of action: noise and stragglers do not move a median), all-reduces the
 *               summaries over the pipeline's transport (4 floats a rank), and turns them into
 *               each rank's speed and one layer's costs: the same bits on every rank.
 *   2. plan     pp_layers_replan balances the layers for those speeds and keeps the running split
 *               unless the slowest rank's time falls by more than min_gain (measurement noise must
 *               not move layers to and fro). Deterministic: the same numbers give the same split.
 *               A searched order (pp_plan_config with search and search_layout) was made for the
 *               costs, so pp_plan_replan searches order and split again on the measured ones and
 *               keeps the running plan unless its simulated step falls by more than min_gain.
 *   3. switch   when the split changed, between steps: pp_layers_owners says which rank holds each
 *               layer before and after; the new owner allocates the layers it gains, pp_layers_move
 *               sends each moved layer's tensors (weights, optimizer state) from its old owner to
 *               its new one in one group, and the old owner frees them. A fixed kind's order (ZB-V,
 *               1F1B, interleaved) is the same for any stage sizes: its schedule and executor stay,
 *               and the callbacks read the new split. A searched order comes with its split:
 *               every rank gets the same plan from the same numbers and makes a new executor for
 *               it (its placement may differ: owners follow each schedule's). The next step runs
 *               on the new split.
 * Run the three again after the new split's steps, until a split is kept: a GPU that waits for
 * part of a step clocks higher while it computes (its power limit allows it), so speeds measured
 * on an uneven split overstate the waiting rank's, and the first new split can overshoot; the
 * next measurement is taken on that split and corrects it, and min_gain ends the rounds. The
 * speeds can swing enough to send rounds back and forth between neighbouring splits: a trainer
 * stops when a split that already ran comes back and keeps the fastest one it timed
 * (examples/mlp_gpu_adapt.h does).
 * Only who computes a layer changes, never what it computes: the gradients stay the unsplit
 * model's (tests/test_runtime_adapt.c checks it on CPU threads with a rank slowed on purpose,
 * examples/mlp_gpu.cu --adapt on GPUs).
 * ============================================================================================ */

#define PP_SPEED_SUMMARY 4   /* floats in one rank's summary: F, I, W, B */

/* One rank's measured step, summarised: summary[k] is the median, over this rank's actions of
 * kind F, I, W, B (k = 0..3), of the action's compute time (end - ready, seconds) divided by its
 * stage's work; 0 where the rank ran none of that kind. stage_work[num_stages]: each stage's work
 * in the split that ran, in layers (its layer count where layers cost alike; a weighted count
 * where they do not); stages of work 0 are left out, and so are FB actions (their halves are not
 * timed apart). num_stages must be the schedule's. */
PIPEPAR_API pp_status pp_speed_summarize(const pp_timeline *t, const double *stage_work, int num_stages,
                                         float summary[PP_SPEED_SUMMARY], pp_error *err);
/* Every rank's speed and one layer's costs, from all ranks' summaries (rank r's at
 * summaries[r * PP_SPEED_SUMMARY], the same array on every rank). A rank's time per layer is its
 * F plus its I and W (its B where it ran no I and W); rank_speed[r] (pp entries) = the fastest
 * rank's time / rank r's, so the fastest is 1. layer (may be NULL) gets f, i, w at speed 1: per
 * kind the median over ranks of the rank's time x its speed (i = w = B / 2 for whole backwards),
 * memory 1. Fails naming the rank that ran no forward. */
PIPEPAR_API pp_status pp_speed_estimate(const float *summaries, int pp, double *rank_speed, pp_layer_costs *layer,
                                        pp_error *err);
/* Both at once, from every rank's timeline of one step at hand (ranks that are threads of one
 * process: ranks[r] is rank r's). */
PIPEPAR_API pp_status pp_speed_from_timelines(const pp_timeline *ranks, int count, const double *stage_work,
                                              int num_stages, double *rank_speed, pp_layer_costs *layer,
                                              pp_error *err);
/* Both at once, each rank with its own timeline (processes): the summaries meet in one all-reduce
 * over t (t->all_reduce; every rank of t calls this together), so every rank gets the same
 * rank_speed[t->world] and layer. timeout_s 0 means 60 s. */
PIPEPAR_API pp_status pp_speed_exchange(const pp_transport *t, const pp_timeline *mine, const double *stage_work,
                                        int num_stages, double timeout_s, double *rank_speed, pp_layer_costs *layer,
                                        pp_error *err);

/* Re-planning between steps. balance describes the model as pp_layers_balance takes it, with the
 * measured speeds in balance.rank_speed (required) and the placement in balance.v_placement;
 * current[pp*vpp] is the split running now (layers per stage, summing to num_layers). */
typedef struct pp_replan_config {
    pp_balance_config balance;
    const int *current;
    double min_gain;        /* switch only when the slowest rank's time falls by more than this
                               fraction, 0 .. 1 (e.g. 0.02); a current split over the memory cap is
                               left whatever the gain */
} pp_replan_config;

/* next[pp*vpp] gets the split to run from the next step: pp_layers_balance's for the speeds when
 * it is worth switching, else current itself. *gain (may be NULL) gets the fraction by which the
 * slowest rank's time (pp_layers.rank_time) falls, 0 when current is kept. Ranks given the same
 * config get the same split. */
PIPEPAR_API pp_status pp_layers_replan(const pp_replan_config *cfg, int *next, double *gain, pp_error *err);

/* Which pipeline rank holds each layer under a split: owner[g] for the num_layers layers (the sum
 * of stage_layers[pp*vpp]), stage s on rank s % pp, or with v_placement (vpp = 2) on rank
 * s < pp ? s : 2pp-1-s. */
PIPEPAR_API pp_status pp_layers_owners(const int *stage_layers, int pp, int vpp, int v_placement, int num_layers,
                                       int *owner, pp_error *err);

/* Moves every layer whose owner changes (old_owner[g] != new_owner[g], pipeline ranks of t) from
 * its old rank to its new one over t, in one group that this call posts and waits for: each layer
 * has `tensors` tensors, tensor k of layer g in this rank's buffer buf[g * tensors + k] (needed
 * where this rank sends it, old_owner[g] == t->rank, or receives it, new_owner[g] == t->rank;
 * may be NULL elsewhere), bytes[g * tensors + k] bytes long (the same array on every rank). Every
 * rank of t calls it with the same owners, between steps. num_layers * tensors < 2^24. */
PIPEPAR_API pp_status pp_layers_move(const pp_transport *t, const int *old_owner, const int *new_owner, int num_layers,
                                     int tensors, void *const *buf, const size_t *bytes, double timeout_s,
                                     pp_error *err);


/* ============================================================================================
 * >>mimo
 * Heterogeneous parallelism: several modules (a vision or audio encoder, a language model),
 * each with its own grid, in one job. After Megatron-LM's MIMO (megatron/core/models/mimo,
 * HyperCommGrid, BridgeCommunicator; PRs #3211, #3212, #4018); our own C, same semantics:
 *
 *   module grids  each module is named and has a rank offset, sizes (tp, cp, dp, pp; ep for
 *                 its experts) and an order: a pp_grid over its own ranks offset .. offset +
 *                 size - 1. The module named "language" is the language model (or the one the
 *                 config names). Every rank is in at least one grid; two grids either coincide
 *                 (same ranks: colocated) or are disjoint (non-colocated). Anything else fails,
 *                 naming the modules and the ranks.
 *   rank roles    for a rank: the modules it runs, per module its coordinates, its pipeline
 *                 stage and whether that is the module's first or last stage (Megatron's
 *                 RankRole / ModuleStageInfo), and its forward path.
 *   bridges       the encoder's last stage sends its output to the language model's first
 *                 stage, whatever the two dp sizes: fan-in (encoder dp = k * language dp: k
 *                 encoder replicas feed one language replica, concatenated along the batch in dp
 *                 order) or fan-out (language dp = k * encoder dp: an encoder replica's output is
 *                 split along the batch into k parts, part j to language replica k*d + j). The
 *                 gradients go back the same links the other way. Same rule as Megatron's
 *                 BridgeCommunicator, but point to point only (no broadcast): a language rank
 *                 with tensor-parallel index t gets its input from the encoder rank with index
 *                 t % encoder tp, and an encoder rank with index t gets its gradient from the
 *                 language rank with index t % language tp. The batch must be the outermost
 *                 dimension of the bridged tensor ([batch, ...]), so a part is a byte range.
 *   global norm   sqrt(sum over every parameter of every module, counted once, of its squared
 *                 gradient) and its clip factor, the same on every rank, through one all-reduce
 *                 of the transport (threads or NCCL).
 *
 * How a step runs.
 *   Non-colocated (encoder and language model on different ranks): one pipeline of
 *   pp(encoder) + pp(language) stages; stage s < pp(encoder) is the encoder's stage s, the rest
 *   the language model's. A normal schedule of that pipeline (GPipe, 1F1B, ZB-H1, ZB-H2) is
 *   built, lowered and proven by pp_schedule_validate; pp_mimo_transport() gives each rank a
 *   transport in which it *is* its pipeline stage, and turns every send or receive that crosses
 *   the bridge into the fan-in / fan-out transfers above (in the same group), so the unchanged
 *   executor runs it. Several dp replicas of a stage run the same program; the physical programs
 *   of every rank (each transfer with its real peer) are checked again by pp_mimo_check, the
 *   same rendezvous rule as the schedule validator: every send blocks until its receive is
 *   posted, each group of consecutive transfers is posted at once.
 *
 *     vision  dp=2 on ranks 0,1          language pp=2 on ranks 2,3       pipeline of 3 stages
 *       rank 0: stage 0 (rows 0..B/2) ─┐
 *                                       ├─► rank 2: stage 1 (B rows) ─► rank 3: stage 2, loss
 *       rank 1: stage 0 (rows B/2..B) ─┘
 *
 *   Colocated (every module on every rank; the encoders with pp = 1): Megatron's three phases.
 *   (1) every rank runs its encoders' forwards for all microbatches; pp_mimo_bridge_exchange
 *   moves the outputs to the language model's first stage (one group); (2) the language model's
 *   pipeline runs through the executor, over pp_mimo_transport; its first stage reads the
 *   bridged input in the input() callback and writes the input's gradient itself (the executor
 *   passes grad_in = NULL on stage 0); (3) pp_mimo_bridge_exchange sends the gradients back, and
 *   every rank runs its encoders' backwards.
 *
 * Losses and gradients. Normalise each microbatch's loss by the global batch (all dp replicas
 * of the language model), and sum gradients over a module's dp (and cp) replicas: then the
 * result equals the one-process run. pp_step_result.loss over pp_mimo_transport is the global
 * batch's loss: the sum of every language replica's losses over the sum of their weights.
 * ============================================================================================ */

#define PP_MIMO_MAX_MODULES 8
#define PP_MIMO_NAME_SIZE 32     /* a module name: 1..31 characters of [A-Za-z0-9_.] */
#define PP_MIMO_ORDER_SIZE 24

/* One module's grid. Zero means default: sizes 1 (dp too), order "tp-cp-dp-pp". */
typedef struct pp_mimo_module_config {
    char name[PP_MIMO_NAME_SIZE];
    int offset;                     /* its first rank in the job */
    int tp, cp, dp, pp;
    int ep;                         /* expert-parallel size, must divide cp * dp (Megatron folds
                                       ep out of the cp x dp ranks of a stage); 0 means 1 */
    char order[PP_MIMO_ORDER_SIZE]; /* as pp_grid_config.order; "" means tp-cp-dp-pp */
} pp_mimo_module_config;

typedef struct pp_mimo_config {
    int world;                              /* ranks in the job; 0 means the end of the last grid */
    int num_modules;                        /* 1 .. PP_MIMO_MAX_MODULES */
    const pp_mimo_module_config *modules;   /* [num_modules] */
    const char *language;                   /* the language model's name; NULL means "language" */
} pp_mimo_config;

typedef enum pp_mimo_layout {
    PP_MIMO_COLOCATED = 1,      /* every grid covers the same ranks (one module counts as this) */
    PP_MIMO_NON_COLOCATED = 2,  /* every two grids are disjoint */
    PP_MIMO_MIXED = 3           /* some coincide, some are disjoint */
} pp_mimo_layout;

typedef struct pp_mimo_module {
    char name[PP_MIMO_NAME_SIZE];
    int offset, size;       /* global ranks offset .. offset + size - 1 */
    int ep;
    pp_grid grid;           /* over the module's own ranks: local rank = global rank - offset */
} pp_mimo_module;

typedef struct pp_mimo {
    int world;
    int num_modules;
    int language;           /* index of the language model in modules[] */
    pp_mimo_layout layout;
    pp_mimo_module modules[PP_MIMO_MAX_MODULES];
} pp_mimo;

/* Checks the module grids and fills *m (no allocation). Fails with PP_EINVAL naming the module,
 * the value and the rule: bad sizes or order, a name used twice, no language model, a grid past
 * the world, a rank in no grid, two grids that overlap without coinciding. */
PIPEPAR_API pp_status pp_mimo_init(const pp_mimo_config *cfg, pp_mimo *m, pp_error *err);
/* Index of the module called name, or -1. */
PIPEPAR_API int pp_mimo_find(const pp_mimo *m, const char *name);
/* Parses "vision:offset=0,tp=1,pp=1,dp=2" (keys offset, tp, cp, dp, pp, ep, order; any order,
 * each at most once; order written with '-', e.g. order=tp-dp-pp) into *out. */
PIPEPAR_API pp_status pp_mimo_module_parse(const char *text, pp_mimo_module_config *out, pp_error *err);
PIPEPAR_API const char *pp_mimo_layout_name(pp_mimo_layout layout);   /* "colocated" */
/* The global rank of a module's coordinates (by pp_dim), -1 when out of range. */
PIPEPAR_API int pp_mimo_rank(const pp_mimo *m, int module, const int coord[PP_DIM_COUNT]);

/* A module's groups across the whole job, for ncclCommSplit on the world communicator (every
 * rank calls it): the rank's group of mask dims in module `module` gets a color unique in the
 * job (module * world + the grid's color) and key = its index in the group; a rank outside the
 * module gets color -1 (NCCL_SPLIT_NOCOLOR) and key 0. E.g. the vision encoder's dp group for its
 * gradient all-reduce: pp_mimo_group_color(m, vision, rank, PP_GROUP_DP, &color, &key). */
PIPEPAR_API pp_status pp_mimo_group_color(const pp_mimo *m, int module, int rank, unsigned dims, int *color, int *key,
                                          pp_error *err);

/* --- rank roles ------------------------------------------------------------------------------ */

typedef enum pp_mimo_path {
    PP_MIMO_PATH_ENCODER = 1,   /* encoders only: run them, send the output over the bridge */
    PP_MIMO_PATH_LANGUAGE = 2,  /* language model only: its first stage receives the encoders'
                                   output over the bridge */
    PP_MIMO_PATH_BOTH = 3       /* colocated: encoders, then the language model */
} pp_mimo_path;

/* A rank's place in one module (Megatron's ModuleStageInfo, with the coordinates). */
typedef struct pp_mimo_stage_info {
    int module;                 /* index in pp_mimo.modules */
    int local_rank;             /* rank - offset */
    int coord[PP_DIM_COUNT];    /* by pp_dim */
    int stage, num_stages;      /* coord[PP_DIM_PP], the module's pp */
    int is_first_stage, is_last_stage;
    int ep_rank;                /* (cp + CP * dp) % ep: which expert shard */
    int expert_dp_rank;         /* (cp + CP * dp) / ep: which replica of that shard */
} pp_mimo_stage_info;

typedef struct pp_mimo_role {
    int rank;
    int num_modules;                                /* modules this rank runs */
    pp_mimo_stage_info modules[PP_MIMO_MAX_MODULES]; /* [num_modules], in module order */
    int has_language, has_encoder;
    pp_mimo_path path;
} pp_mimo_role;

/* Fails for a rank outside 0 .. world-1. */
PIPEPAR_API pp_status pp_mimo_rank_role(const pp_mimo *m, int rank, pp_mimo_role *role, pp_error *err);
/* The rank's stage info in module `module`, or NULL when the rank does not run it. */
PIPEPAR_API const pp_mimo_stage_info *pp_mimo_role_module(const pp_mimo_role *role, int module);

/* --- bridges ---------------------------------------------------------------------------------- */

/* One transfer of a bridge as one side sees it: the other rank, and which part of this side's
 * tensor travels (part `part` of `parts` equal parts along the batch; 0 of 1 is the whole). */
typedef struct pp_mimo_link {
    int peer;
    int part, parts;
} pp_mimo_link;

/* The links of rank `rank` on the bridge from module `encoder` to the language model, for one
 * side of one direction: op PP_OP_SEND_F (encoder's last stage sends its output), PP_OP_RECV_F
 * (language model's first stage receives it), PP_OP_SEND_B (the first stage sends the
 * gradient back), PP_OP_RECV_B (the encoder's last stage receives it). A rank that does not
 * take part in that side gets count 0. Links are in dp order: a receiver's parts concatenate to
 * its tensor. links may be NULL (count only); otherwise capacity must be at least the count.
 * Fails (PP_EUNSUPPORTED / PP_EINVAL) when neither dp size divides the other or a side has
 * cp > 1 (as in Megatron, the bridge does not split sequences). */
PIPEPAR_API pp_status pp_mimo_bridge_links(const pp_mimo *m, int encoder, int rank, int op, pp_mimo_link *links,
                                           int capacity, int *count, pp_error *err);

/* --- the pipeline of a step ------------------------------------------------------------------ */

/* One rank's physical program: what it computes and every transfer with its real peer. Actions
 * with the same `group` (consecutive) are posted together. */
typedef struct pp_mimo_op {
    int32_t op;         /* pp_op */
    int32_t module;     /* compute: the module; comm: the module of this side */
    int32_t stage;      /* the module's own stage (of this side, for a transfer) */
    int32_t mb;
    int32_t peer;       /* comm: the other rank; -1 for compute */
    int32_t part, parts;/* comm: the part of this side's tensor carried */
    int32_t group;      /* comm: group number on this rank; -1 for compute */
    uint64_t tag;       /* comm: as pp_transfer_tag (step 0) */
} pp_mimo_op;

typedef struct pp_mimo_programs {
    int world;
    int *length;        /* [world] */
    pp_mimo_op **ops;   /* [world][length[r]] */
} pp_mimo_programs;

/* Proves a set of physical programs runs to the end: every receive has exactly one send with
 * the same (source, destination, tag) in order and vice versa, and the programs finish when each
 * group is posted at once and every send blocks until its receive is posted. Otherwise names the
 * first unmatched transfer, or the ranks that wait for each other and what they wait for. */
PIPEPAR_API pp_status pp_mimo_check(const pp_mimo_programs *p, pp_error *err);
PIPEPAR_API void pp_mimo_programs_free(pp_mimo_programs *p);
/* "F vision.0 mb3", "SEND_F vision.0 mb3 -> 2 [1/2]" */
PIPEPAR_API int pp_mimo_op_format(const pp_mimo *m, pp_mimo_op op, char *buf, size_t size);

typedef struct pp_mimo_pipeline_config {
    pp_schedule_kind kind;  /* 0 means PP_1F1B; one chunk per rank: GPipe, 1F1B, ZB-H1, ZB-H2,
                               interleaved with vpp = 1 */
    int mb;                 /* microbatches per step, >= 1 */
} pp_mimo_pipeline_config;

typedef struct pp_mimo_pipeline {
    pp_mimo mimo;                       /* a copy */
    int mb;
    int encoder;                        /* non-colocated: the encoder inside the pipeline, else -1 */
    int num_bridged;                    /* colocated: encoders bridged around the pipeline */
    int bridged[PP_MIMO_MAX_MODULES];
    int base[PP_MIMO_MAX_MODULES];      /* first pipeline stage of each module; -1: not in it */
    pp_schedule *schedule;              /* lowered and validated; pp = the pipeline's stages */
    pp_mimo_programs *programs;         /* every rank's physical program, checked */
} pp_mimo_pipeline;

/* Builds the step of a two-layout job: non-colocated with one encoder and the language model
 * (the pipeline holds both), or colocated (the pipeline holds the language model; every encoder
 * has pp = 1 and is bridged around it). Validates the schedule and checks the physical programs.
 * PP_EUNSUPPORTED for a mixed layout or several non-colocated encoders. */
PIPEPAR_API pp_status pp_mimo_pipeline_create(const pp_mimo *m, const pp_mimo_pipeline_config *cfg,
                                              pp_mimo_pipeline **out, pp_error *err);
PIPEPAR_API void pp_mimo_pipeline_free(pp_mimo_pipeline *pl);
/* This rank's pipeline stage (its rank in the pipeline's schedule). */
PIPEPAR_API int pp_mimo_pipeline_rank(const pp_mimo_pipeline *pl, int rank);
/* Which module and module stage pipeline stage `stage` is; PP_EINVAL when out of range. */
PIPEPAR_API pp_status pp_mimo_pipeline_stage(const pp_mimo_pipeline *pl, int stage, int *module, int *module_stage,
                                             pp_error *err);

/* The transport the executor runs over on rank `rank`: rank = its pipeline stage, world = the
 * pipeline's stages; transfers go to the same-coordinate rank of the neighbouring stage, and
 * across the bridge to every link's peer (one group, byte parts of the tensor; a tensor that
 * does not split into equal parts fails the post with PP_EINVAL). all_reduce sums over every
 * rank of the job (base->all_reduce) and weights each rank by 1 / (its stage's copies: tp*cp*dp
 * ranks run each stage), so the executor sees each stage once. So pp_step_result.loss is the
 * global batch's (every replica's losses over every replica's weights), while its weight and
 * metrics are the mean over the last stage's replicas. base must span the whole job
 * (base->world == the mimo's world). Valid until pp_mimo_transport_free; the pipeline must
 * outlive it. */
typedef struct pp_mimo_transport pp_mimo_transport;
PIPEPAR_API pp_status pp_mimo_transport_create(const pp_mimo_pipeline *pl, int rank, const pp_transport *base,
                                               pp_mimo_transport **state, pp_transport *out, pp_error *err);
PIPEPAR_API void pp_mimo_transport_free(pp_mimo_transport *state);

/* Colocated: the bridge of encoder `encoder` for all microbatches at once, as one group of
 * transfers on the job's transport (every rank calls it; ranks with no link return at once).
 * Forward (backward = 0): sends encoder_out[mb] (encoder_bytes[mb] bytes; this rank's encoder
 * output) and fills language_in[mb] (language_bytes[mb]; the language model's first-stage
 * input). Backward: sends language_in[mb] (now the input's gradient) and fills encoder_out[mb]
 * with the output's gradient. Arrays a rank does not use may be NULL. */
typedef struct pp_mimo_bridge_io {
    void *const *encoder_out;           /* [mb] */
    const size_t *encoder_bytes;        /* [mb] */
    void *const *language_in;           /* [mb] */
    const size_t *language_bytes;       /* [mb] */
} pp_mimo_bridge_io;
PIPEPAR_API pp_status pp_mimo_bridge_exchange(const pp_mimo_pipeline *pl, int encoder, int rank,
                                              const pp_transport *world, int backward, const pp_mimo_bridge_io *io,
                                              int step, double timeout_s, pp_error *err);

/* --- gradients: replicas and the global norm -------------------------------------------------- */

/* What a gradient tensor is, for counting it once (flags, may be combined). */
#define PP_MIMO_GRAD_TP_REPLICATED 1u   /* the same on every tensor-parallel rank (norms, biases
                                           after a row-parallel layer): counted where tp = 0 */
#define PP_MIMO_GRAD_EXPERT        2u   /* an expert's: sharded over ep, replicated over expert
                                           dp: counted where expert_dp_rank = 0 */
#define PP_MIMO_GRAD_SHARED        4u   /* a tied copy whose owner is another stage (the output
                                           embedding tied to the input one): never counted here */

/* 1 if rank counts a gradient of this kind of module `module` in the global norm, 0 if another
 * rank does, -1 if the rank is not in the module. Plain gradients are counted where dp = 0 and
 * cp = 0 (every dp and cp replica holds the same one after the gradient all-reduce), every
 * tensor-parallel shard and every stage's own. */
PIPEPAR_API int pp_mimo_grad_counted(const pp_mimo *m, int module, int rank, unsigned flags);

typedef struct pp_mimo_grad {
    int module;
    unsigned flags;
    const float *grad;      /* host memory */
    size_t count;
} pp_mimo_grad;

/* Adds the squares of the counted host gradients of this rank to sumsq[module] (double). A
 * GPU trainer fills sumsq itself from pp_cuda_l2norm_sumsq over its counted tensors. */
PIPEPAR_API pp_status pp_mimo_grad_sumsq(const pp_mimo *m, int rank, const pp_mimo_grad *grads, int count,
                                         double sumsq[PP_MIMO_MAX_MODULES], pp_error *err);

typedef struct pp_mimo_norm {
    double norm;                                /* over every module */
    double module_norm[PP_MIMO_MAX_MODULES];
    double clip;        /* multiply every gradient by this: min(1, max_norm / (norm + 1e-6)), as
                           Megatron's clip_grad_by_total_norm_fp32; 1 without clipping or when the
                           norm is not finite */
    int finite;         /* 0: inf or NaN somewhere; skip the step */
} pp_mimo_norm;

/* Every rank calls it with its sumsq[] (from pp_mimo_grad_sumsq or the GPU kernel); one
 * all-reduce of num_modules floats over `world` (spanning the job) gives every rank the same
 * norm and clip factor. max_norm <= 0: no clipping. */
PIPEPAR_API pp_status pp_mimo_grad_norm(const pp_mimo *m, const pp_transport *world,
                                        const double sumsq[PP_MIMO_MAX_MODULES], double max_norm, double timeout_s,
                                        pp_mimo_norm *out, pp_error *err);

/* Sums `count` host floats over the ranks members[0..n-1] (this rank among them) by point-to-
 * point transfers on `world`: every member sends its values to the others in one group, then
 * adds all n in member order, so every member gets bit-identical sums. For a module's dp
 * gradient all-reduce on CPU threads (a GPU trainer uses an NCCL communicator of the dp group).
 * `id` (0..15) keeps concurrent sums apart. */
PIPEPAR_API pp_status pp_mimo_group_sum(const pp_transport *world, const int *members, int n, float *values,
                                        int count, int id, double timeout_s, pp_error *err);


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


/* ============================================================================================
 * >>nccl
 * Declarations of pipepar_nccl.c, the NCCL companion: communicator set-up that fits how jobs
 * are launched, the runtime's transport over NCCL, and the cross-rank half of the gradient norm.
 * Build it with a C compiler against CUDA's and NCCL's headers and link -lnccl -lcudart. This
 * header needs neither: communicators are the opaque pp_nccl, CUDA streams and events are
 * passed as void * (a cudaStream_t / cudaEvent_t; NULL is the legacy default stream), and the
 * unique id is a plain 128-byte struct.
 *
 * START-UP. One process per GPU (mpirun, srun, torchrun, or any launcher that sets RANK,
 * WORLD_SIZE, LOCAL_RANK), or one process with one thread per GPU (see THREADS):
 *     pp_nccl_config cfg = {0};                 // rank, world, device from the environment
 *     pp_nccl *world;  pp_nccl_init(&cfg, &world, &err);
 *     pp_nccl *pipe;   pp_nccl_split(world, &grid, PP_GROUP_PP, &pipe, &err);
 *     pp_transport t;  pp_nccl_transport(pipe, compute_stream, &t, &err);
 *     ... pp_executor_config.transport = t; pp_run_step(...); pp_nccl_sync(pipe, compute_stream, ...)
 *     pp_nccl_transport_free(&t); pp_nccl_free(pipe); pp_nccl_free(world);
 * The dp, cp and embedding groups get communicators the same way (pp_nccl_split with their
 * dims, pp_nccl_split_group for the embedding group) and transports of their own, whose group
 * collectives (below) sum their gradients.
 * The unique id that every rank needs reaches them, chosen at run time (PP_NCCL_BOOTSTRAP_AUTO):
 *     MPI   MPI_Bcast from rank 0, when pipepar_nccl.c is built with -DPIPEPAR_NCCL_MPI and the
 *           process was started by an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK
 *           set); MPI is initialised if the program did not;
 *     FILE  otherwise: rank 0 writes it to a file on a filesystem every rank sees (llm.c's way),
 *           atomically (write, then rename), and removes it once every rank has joined. The path
 *           is cfg.id_file, else $PIPEPAR_NCCL_ID_FILE, else /tmp/pipepar_nccl_<job>.id where
 *           <job> is TORCHELASTIC_RUN_ID, SLURM_JOB_ID or MASTER_PORT (one must be set).
 *           Give every job its own path: a stale file from a crashed job is read as a wrong id,
 *           and init then times out.
 *     ID    threads of one process: pp_nccl_unique_id once, then every thread passes it.
 * Several nodes work through NCCL's own network transports (IB, sockets): nothing here opens a
 * socket of its own.
 *
 * TRANSPORT. pp_nccl_transport wraps a communicator as a pp_transport. post() makes the
 * communication stream wait for an event recorded on the compute stream (the bytes to send are
 * ready, buffers to receive into are free), issues the group's sends and receives between one
 * ncclGroupStart/End, and records a done-event; wait() makes the compute stream wait for that
 * event and returns at once: the host runs ahead, transfers overlap compute, and nothing blocks
 * until the step's closing all-reduce or pp_nccl_sync. A transfer whose peer is this rank is
 * copied on the device (cudaMemcpyAsync through a staging buffer), never through NCCL. Tags are
 * not sent: NCCL matches by order, which the validated schedule makes identical on both ends.
 * Two options keep a pipeline's transfers on one host from holding SMs while a peer computes:
 * the arrival gate (an NCCL group launches once both sides are there) and the copy engines (no
 * NCCL kernel at all); both are declared below, and explained in the notes before them.
 * The group collectives take device memory of the rank's device and are stream-ordered like
 * wait(): all_reduce_buf (ncclAllReduce, sum, in place; NCCL gives every rank the same bits) and
 * all_gather (ncclAllGather) start after the work issued on the compute stream so far and the
 * compute stream's next work waits for them; the call returns once they are enqueued, and
 * pp_nccl_sync waits for them within the deadline. barrier is pp_nccl_barrier: the host waits.
 * They use the transport's communicator, with or without the copy engines.
 *
 * FAILURE. Every wait has a deadline: a peer that died or hangs makes the waiting rank call
 * ncclCommAbort and return PP_ETIMEOUT (within timeout_s) instead of hanging. Host waits poll
 * (the stream, NCCL's asynchronous error) until the deadline; NCCL calls that may block inside
 * NCCL (init, split, ncclGroupEnd, a collective's enqueue, finalise) are guarded by a watchdog
 * thread per communicator that aborts it when the call outlives the deadline, as PyTorch's
 * ProcessGroupNCCL watchdog does. An error NCCL reports (ncclRemoteError, a network failure)
 * returns PP_ETRANSPORT with NCCL's message. After an abort every call on that communicator
 * returns PP_EABORTED; free it and exit (or build a new one).
 * Allocate device memory before the first step and set NCCL_RUNTIME_CONNECT=0 (NCCL >= 2.22
 * otherwise connects peers lazily, inside the step): a cudaMalloc, or NCCL's own allocation for
 * a new connection, can wait behind kernels in flight that wait on the peer (NVIDIA/nccl#581;
 * examples/mlp_gpu.cu does both).
 *
 * THREADS. One process per GPU is the layout to run. Ranks as threads of one process work too,
 * under a rule that processes do not need: no thread may make a call that waits for another
 * thread's GPU while that GPU runs an NCCL kernel waiting for a kernel this thread has yet to
 * launch. pp_nccl_free is such a call: the last thread of the process to free a communicator
 * releases every thread's share of it (ncclCommDestroy), on every thread's GPU, and waits for
 * those GPUs. So every thread frees a communicator, then the threads meet (pthread_barrier_wait)
 * before any of them issues NCCL work on another communicator. Otherwise a thread whose free
 * returned first and that went on to a collective on the parent (pp_nccl_split_group begins with
 * one) holds its GPU in a kernel waiting for the peer's, the peer's free waits for that GPU, and
 * both ranks end in PP_ETIMEOUT at their deadlines. NCCL's guide says any CUDA call may wait for
 * a device: between threads, keep such calls out of the time NCCL work is in flight.
 *
 * ENVIRONMENT. Besides the launcher's variables above, NCCL's own and CUDA_DEVICE_MAX_CONNECTIONS
 * (see the notes), pipepar_nccl.c reads two:
 *     PIPEPAR_NCCL_ID_FILE   the FILE bootstrap's path when cfg.id_file is not given: a launcher
 *                            that is neither torchrun nor Slurm names one path for every rank
 *                            without the program passing it on;
 *     PIPEPAR_NCCL_DEBUG=1   one line on stderr per posted group (its transfers, and when
 *                            ncclGroupEnd returned), per collective and host all-reduce, per
 *                            gate and copy-engine set-up and per watchdog abort: where a rank
 *                            stalls, in a job that hangs, without rebuilding it (as NCCL_DEBUG).
 * ============================================================================================ */

typedef struct pp_nccl pp_nccl;

typedef enum pp_nccl_bootstrap {
    PP_NCCL_BOOTSTRAP_AUTO = 0,     /* MPI when built with it and launched by MPI, else FILE */
    PP_NCCL_BOOTSTRAP_FILE,
    PP_NCCL_BOOTSTRAP_MPI,
    PP_NCCL_BOOTSTRAP_ID
} pp_nccl_bootstrap;

/* An ncclUniqueId by value (NCCL_UNIQUE_ID_BYTES = 128). */
typedef struct pp_nccl_id { char bytes[128]; } pp_nccl_id;

typedef struct pp_nccl_config {
    int world;              /* 0: rank, world and device come from the environment (RANK /
                               WORLD_SIZE / LOCAL_RANK, OMPI_COMM_WORLD_*, PMI_*, SLURM_*; the
                               device is the local rank, else rank % device count); > 0: rank,
                               world and device below are used as given */
    int rank;
    int device;
    pp_nccl_bootstrap bootstrap;
    const char *id_file;    /* FILE: see above */
    const pp_nccl_id *id;   /* ID: the same id on every rank */
    double timeout_s;       /* deadline of set-up and of every wait; 0 means 300 s */
    /* NCCL's limits on the SMs its kernels take (ncclConfig_t), for collectives that run beside
     * compute, such as a dp gradient all-reduce started from pp_callbacks.chunk_done while the
     * pipeline drains: fewer SMs for NCCL leave more to the GEMMs, at the collective's speed.
     * Split communicators inherit them. */
    int max_ctas;           /* maxCTAs: the SMs NCCL's kernels may take at once; 0: NCCL's default */
    int cta_policy;         /* NCCL >= 2.27's CTAPolicy: 0 default, 1 efficiency (fewer CTAs),
                               2 zero (copy engines where NCCL can) */
    /* For pipepar's own tests; leave 0. Split communicators inherit them. */
    uint64_t test_count_base;   /* the arrival gate's and the copy engines' counts start here
                                   (below 2^62, the same on every rank), so that a test crosses the
                                   32-bit wrap of their flags without posting 2^32 groups first */
    int test_ce_threads;        /* 1: copy engines between threads of one process too, for tests
                                   whose threads call nothing that takes the driver's lock while
                                   transfers are queued (see the notes) */
} pp_nccl_config;

/* A fresh unique id (for PP_NCCL_BOOTSTRAP_ID). */
PIPEPAR_API pp_status pp_nccl_unique_id(pp_nccl_id *id, pp_error *err);
/* Selects the device (cudaSetDevice) and creates the world communicator and its stream. */
PIPEPAR_API pp_status pp_nccl_init(const pp_nccl_config *cfg, pp_nccl **out, pp_error *err);
/* The communicator of rank's group of mask dims (ncclCommSplit with the grid's color and index;
 * every rank of parent must call it, with the same grid and dims). grid->world must equal the
 * parent's size. */
PIPEPAR_API pp_status pp_nccl_split(pp_nccl *parent, const pp_grid *grid, unsigned dims, pp_nccl **out,
                                    pp_error *err);
/* The same ranks, renumbered: this rank becomes new_rank (ncclCommSplit with key new_rank). Every
 * rank of parent calls it, and the new_ranks must be a permutation of 0..size-1 (otherwise every
 * rank gets PP_EINVAL, naming a number asked for twice or never). For placement by speed
 * (pp_place_by_speed): split the pipeline, measure each GPU, then give its process the
 * pipeline rank it should run, before the transport is made on the new communicator. The new
 * numbering ignores where ranks sit: across nodes, keep pipeline neighbours on one node yourself. */
PIPEPAR_API pp_status pp_nccl_reorder(pp_nccl *parent, int new_rank, pp_nccl **out, pp_error *err);
/* The communicator of an arbitrary group of parent's ranks, such as the embedding group
 * (pp_grid_embedding_group): every rank of parent calls it, each with its own group's members
 * (parent ranks, in the order that numbers the new communicator: this rank becomes its index in
 * members; size 0 and *out NULL for a rank in no group). Groups must not overlap and every member
 * must give the same list. Each rank checks its own list (distinct ranks of parent, this rank
 * among them), then all ranks compare their lists through two small all-reduces, so that a list
 * that breaks a rule on any rank fails every rank with PP_EINVAL (the rank that found it naming
 * the member) before the split, where the others would wait until their deadline.
 * ncclCommSplit's color is the group's smallest member, its key the index. */
PIPEPAR_API pp_status pp_nccl_split_group(pp_nccl *parent, const int *members, int size, pp_nccl **out,
                                          pp_error *err);
/* Finalises (or, after an abort, only releases) and frees. NULL is allowed. Ranks that are
 * threads of one process meet after it, before NCCL work on another communicator (THREADS). */
PIPEPAR_API void pp_nccl_free(pp_nccl *nc);

PIPEPAR_API int pp_nccl_rank(const pp_nccl *nc);
PIPEPAR_API int pp_nccl_world(const pp_nccl *nc);
PIPEPAR_API int pp_nccl_device(const pp_nccl *nc);
PIPEPAR_API void *pp_nccl_comm(const pp_nccl *nc);      /* the ncclComm_t */
PIPEPAR_API void *pp_nccl_stream(const pp_nccl *nc);    /* its communication stream (cudaStream_t) */
/* "nccl 2.28.9, rank 0 of 2, device 0 (NVIDIA H200), bootstrap file /tmp/x.id" */
PIPEPAR_API const char *pp_nccl_describe(const pp_nccl *nc);

/* Ends every operation of the communicator now (ncclCommAbort); later calls return PP_EABORTED
 * naming reason. Idempotent; the first reason is kept. */
PIPEPAR_API void pp_nccl_abort(pp_nccl *nc, pp_status status, const char *reason);
/* Waits for `stream` (a cudaStream_t; NULL: the communication stream) with the deadline: on
 * timeout it aborts the communicator and returns PP_ETIMEOUT. Use it instead of
 * cudaStreamSynchronize wherever the stream may wait on a peer. */
PIPEPAR_API pp_status pp_nccl_sync(pp_nccl *nc, void *stream, double timeout_s, pp_error *err);
/* All ranks meet (a one-float all-reduce) within the deadline. */
PIPEPAR_API pp_status pp_nccl_barrier(pp_nccl *nc, double timeout_s, pp_error *err);
/* In place sum over the communicator of `count` floats on the host, within the deadline. Makes
 * nc's device current (cudaSetDevice), as pp_nccl_sync does. */
PIPEPAR_API pp_status pp_nccl_all_reduce_host(pp_nccl *nc, float *values, int count, double timeout_s,
                                              pp_error *err);

/* --- transport ------------------------------------------------------------------------------ */

/* Fills *out with a transport over nc (rank and world as nc's; post, wait, test, all_reduce,
 * abort, output_ready and the group collectives all_reduce_buf, all_gather, barrier) whose waits
 * order `compute_stream` (a cudaStream_t of nc's device). Free with pp_nccl_transport_free after
 * the executor that uses it. Every buffer it is given is memory of nc's device (cudaMalloc'ed, or
 * managed): post refuses another with PP_EINVAL naming the transfer and the pointer, before any
 * of the group starts.
 * Streamed sends (pp_executor_output_ready): output_ready records an event on compute_stream,
 * so the work that writes those bytes must be issued there, and no work issued after a mark may
 * write those bytes again. A copy-engine send posted with parts moves each ring slot (or, pushed,
 * each part) once its mark is passed, and any bytes no mark covers after the whole compute; a
 * pulled one (the receive was posted second: the receiver's copy engine reads) is announced
 * once a mark covers the whole buffer. Sends to one peer in one group stream all or none: one
 * that cannot (no marks, or a pull not wholly covered) makes them all start at the post's point
 * of the compute stream, as sends through NCCL's kernels always do. Marks not yet used up by a
 * send are bounded: output_ready refuses the 4097th with PP_EINVAL. The time of a streamed group
 * of one peer (pp_nccl_transport_times) begins at the mark that made its sends whole: how long
 * the receiver waits after the data is written, not how long the bytes took. */
PIPEPAR_API pp_status pp_nccl_transport(pp_nccl *nc, void *compute_stream, pp_transport *out, pp_error *err);
PIPEPAR_API void pp_nccl_transport_free(pp_transport *t);

/* NOTES: the arrival gate and the copy engines.
 * Why. An NCCL point-to-point kernel needs SMs on both GPUs and holds its own from launch until
 * the peer's matching kernel runs. In a pipeline one side of each pair is usually ahead: its
 * waiting kernels slow its own GEMMs, and a transfer posted while the peer runs a GEMM whose CTAs
 * hold every SM (cuBLASLt's persistent kernels) waits until that GEMM ends.
 * The gate. Each rank writes "I reached my n-th group with you" into the peer's memory (CUDA
 * IPC; threads of one process use the pointer) and its communication stream waits for the
 * peer's n-th arrival before the group: stream memory operations, which take no SM. A group
 * announces itself to all its peers before it waits on any, so groups with two peers cannot
 * close a ring of waits. Each peer's flag is 64-bit: the peer writes the low word, the high word
 * only when the low one wraps; the waits compare cyclically. On abort (a deadline passed,
 * pp_nccl_abort) the gate first opens every wait from a stream of its own, writing the flags'
 * high words, which the peers' announcements leave alone: the NCCL kernels queued behind the
 * waits launch, see NCCL's abort flag and end, and a peer that is alive but behind (pp >= 3, a
 * third rank died) and announces afterwards cannot shut an opened wait (except with the one
 * announcement in 2^32 whose low word wraps).
 * The copy engines. Each transfer is one copy over NVLink, straight from the send buffer into the
 * receive buffer: whichever of the two ranks posts it first publishes its buffer in host memory
 * the pair shares (a POSIX shared-memory segment, unlinked once set up; 0.9 MB per pair), and the
 * other does the copy, the sender pushing into the receive buffer or the receiver pulling out of
 * the send buffer (CUDA IPC maps each allocation once; past 64 mappings the least recently used
 * whose copies have ended is closed). Either copy runs on a copy engine and needs no SM on either
 * GPU. A buffer that CUDA IPC cannot share (not from cudaMalloc) goes through the receiver's ring
 * instead, in slot-sized pieces; the receiver's copy out of the ring is device-to-device, which
 * CUDA may run as a kernel, so it can wait for the receiver's own GEMM. Counts are written and
 * waited for by stream memory operations, as the gate's are. Each peer's sends and each peer's
 * receives run on a stream of their own; a send waits for its receive to be posted (a push) or
 * taken (a pull), as NCCL's matched groups do, so any order that runs on NCCL runs here. A rank
 * may post up to 4096 transfers with a peer ahead of it; past that its post waits (within the
 * deadline) for the peer's posts. A receive whose pp_transfer.buf_free_posts says its buffer has
 * been free for n posts starts from the compute stream's point at the post n back (up to 63), so
 * it can land while the compute issued since runs. Group times (pp_nccl_transport_times) of a
 * copy-engine group run from the compute stream's point to the end of its last stream: a
 * receive-only group's time includes waiting for the peer's send.
 * Threads of one process stay on NCCL: one thread inside the driver (cuBLASLt's
 * cuKernelSetAttribute) holds the process's driver lock while its device waits for a copy that
 * the other thread cannot queue without that lock. Processes have a driver each.
 * A stream waiting on a flag holds its hardware queue, so with CUDA_DEVICE_MAX_CONNECTIONS below
 * 4 (Megatron sets 1) the compute stream would share it: the gate and the copy engines stay off.
 * On abort the copy engines' waits are opened as the gate's are, after the live peers' flags of
 * this rank are set far behind, so that nothing sent after the abort is taken as data and no live
 * peer pushes into this rank's buffers again. What the opened waits let through are this rank's
 * queued copies: a push into a live peer's receive buffer, or a piece into its ring, before the
 * peer said it was free. That receive never completes, so the peer's step fails too; but the
 * buffer may hold what earlier work of the peer still reads, so a peer step that had not finished
 * on its device could be spoiled. Trainers that synchronise every step (reading the loss does)
 * are not exposed. */

/* Arrival gate (one host): each NCCL group launches only once every peer in it has reached its
 * matching group, so that no NCCL kernel sits on SMs waiting for a peer that still computes. The
 * n-th group of a rank with a peer meets the peer's n-th group with it (pp_schedule_validate
 * proves it for every schedule it accepts). Collective over nc: every rank calls it once, before
 * the transport's first post (both checked on every rank alike); one gated transport per
 * communicator. Pairs that cannot be gated run as before: peers on other hosts or in other
 * namespaces, or that cannot map this device's memory; devices without 64-bit stream memory
 * operations (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS); every pair when
 * CUDA_DEVICE_MAX_CONNECTIONS is below 4; copy-engine peers. *gated_peers (optional) gets how
 * many are gated. A dead peer still gives PP_ETIMEOUT within the deadline: an abort opens every
 * gate. How it works: the notes above. */
PIPEPAR_API pp_status pp_nccl_transport_gate(pp_transport *t, int *gated_peers, pp_error *err);

/* Copy-engine transfers (one host): the transfers between this rank and each peer in another
 * process of its host become copies on the GPUs' copy engines instead of NCCL kernels: they need
 * no SM on either GPU and do not wait for the peer's GEMMs. slot_bytes (a multiple of 256 from
 * 4096 to 2^32) and slots (2 to 64), the same on every rank, size the ring that carries buffers
 * CUDA IPC cannot share: slots * slot_bytes of device memory per peer. Collective over nc, before
 * the first post, at most once per transport (refused on every rank alike otherwise); call it
 * before pp_nccl_transport_gate, which then gates only the peers left to NCCL: peers on other
 * hosts, threads of one process, every peer when NCCL_P2P_DISABLE=1 or CUDA_DEVICE_MAX_CONNECTIONS
 * is below 4. *ce_peers (optional) gets how many use the copy engines; when that is every peer,
 * t->independent_peers becomes 1 (pass the transport to the executor after this call). Once set up,
 * pp_nccl_transport_free is collective over nc, and a peer keeps the allocations of transfer
 * buffers mapped until then: free them only after it. Each receive must name the bytes of its
 * send (the second side to post checks; a mismatch fails the post with PP_ETRANSPORT and aborts).
 * How it works, and what an abort can leave behind: the notes above. */
PIPEPAR_API pp_status pp_nccl_transport_copy_engine(pp_transport *t, size_t slot_bytes, int slots, int *ce_peers,
                                                    pp_error *err);

/* Copy-engine transfers staged through the host: before pp_nccl_transport_copy_engine (on every
 * rank alike, or that call refuses on every rank), on != 0 puts its rings and flags in pinned host
 * memory shared between the processes (/dev/shm) and sends every transfer through them: the
 * sender's copy engine copies each slot out over PCIe, the receiver's copies it in, with no
 * traffic over NVLink. Under a power cap, traffic over NVLink lowers the SM clock of both GPUs
 * for tens of milliseconds after it; over PCIe it does not (RESULTS 3.15). Each transfer takes
 * longer (two copies, at PCIe's bandwidth) and the ring is the only path, so slots * slot_bytes
 * per peer is what may be in flight. NCCL_P2P_DISABLE=1 leaves it on (no peer-to-peer access is
 * used). Refused after pp_nccl_transport_copy_engine. Its segments, as the claims' segment of the
 * copy engines, are unlinked once every rank has opened them or set-up has failed; a process
 * killed during set-up leaves its own behind, /dev/shm/pipepar-ce-PID-* and pipepar-ceh-PID-*
 * (PID its process id), for whoever cleans /dev/shm to remove. */
PIPEPAR_API pp_status pp_nccl_transport_copy_engine_via_host(pp_transport *t, int on, pp_error *err);

/* How this rank's copy-engine transfers went since set-up, sends and receives alike: counts[0]
 * pushed (the receive was posted first), counts[1] pulled (the send was), counts[2] through the
 * ring. */
PIPEPAR_API pp_status pp_nccl_transport_copy_engine_counts(pp_transport *t, long long counts[3], pp_error *err);
/* How many of this rank's copy-engine sends streamed since set-up (pp_nccl_transport's streamed
 * sends: posted with parts and moved part by part, or pulled from their last mark on). */
PIPEPAR_API pp_status pp_nccl_transport_streamed_sends(pp_transport *t, long long *sends, pp_error *err);

/* Per-group device times, for timelines and bandwidth figures. With recording on, every
 * group posted gets a begin event (after the communication stream waited for the compute
 * stream, and with the arrival gate for the peer too: the transfer may start; a gated group's
 * same-rank copies, done before the gate, fall outside it) and an end event. times[] gets, for the groups posted since
 * the last reset, seconds from base_event (a cudaEvent_t recorded on the same device before
 * them) to the begin and to the end. A group of one peer whose copy-engine sends stream
 * (pp_executor_output_ready) begins where they were whole, their covering mark: its time is how
 * long the receiver waits after the data is written. */
typedef struct pp_nccl_group_time {
    double begin, end;
    size_t bytes_sent, bytes_received;
    int transfers;
    int peer;               /* the peer of the group's first transfer */
} pp_nccl_group_time;

PIPEPAR_API pp_status pp_nccl_transport_record(pp_transport *t, int on, pp_error *err);
PIPEPAR_API pp_status pp_nccl_transport_times(pp_transport *t, void *base_event, pp_nccl_group_time *times,
                                              int capacity, int *count, pp_error *err);

/* A pp_timer of CUDA events on `stream` (the compute stream), for pp_executor_config.timer:
 * mark(i) records event i there, resolve() returns host-clock seconds (the step's first mark is
 * taken as the host time at which it was recorded: the stream is idle when a step starts after
 * a sync). capacity: 3 * (longest program) events. Free with pp_nccl_timer_free. */
PIPEPAR_API pp_status pp_nccl_event_timer(void *stream, int capacity, pp_timer *out, pp_error *err);
PIPEPAR_API void pp_nccl_timer_free(pp_timer *timer);

/* --- gradient norm over model-parallel ranks -------------------------------------------------- */

/* d_sumsq (device, one float: this rank's sum of squares of its gradients, e.g. from
 * pp_cuda_l2norm_sumsq) is summed in place over nc's ranks on `stream`; if d_scale is given,
 * *d_scale = min(1, max_norm / (sqrt(total) + 1e-6)) follows on the device (pp_cuda_clip_scale),
 * so the gradients can be scaled without a host round trip. Pass the communicator of
 * PP_GROUP_TP | PP_GROUP_PP (| PP_GROUP_CP when CP shards gradients differently), as Megatron-LM
 * reduces its norm over the model-parallel group. Never synchronises. */
PIPEPAR_API pp_status pp_nccl_grad_norm(pp_nccl *nc, float *d_sumsq, float max_norm, float *d_scale,
                                        void *stream, pp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* PIPEPAR_H */

#ifdef PIPEPAR_IMPLEMENTATION
/* The threads transport needs POSIX threads and clocks. Without them, one error that names the
 * fix, and nothing of the implementation after it (marked done), so the error stays the only one. */
#if !defined(PIPEPAR_NO_THREADS) && !defined(PIPEPAR_IMPLEMENTATION_DONE)
#include <time.h>
#if !defined(CLOCK_MONOTONIC)
#error "pipepar: the threads transport needs POSIX clocks: compile with -D_POSIX_C_SOURCE=200809L (or -std=gnu99), or define PIPEPAR_NO_THREADS"
#define PIPEPAR_IMPLEMENTATION_DONE
#endif
#endif
#ifndef PIPEPAR_IMPLEMENTATION_DONE
#define PIPEPAR_IMPLEMENTATION_DONE

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include <limits.h>

#ifndef PIPEPAR_MALLOC
#define PIPEPAR_MALLOC(sz) malloc(sz)
#define PIPEPAR_REALLOC(p, sz) realloc(p, sz)
#define PIPEPAR_FREE(p) free(p)
#endif
#ifndef PIPEPAR_ASSERT
#include <assert.h>
#define PIPEPAR_ASSERT(x) assert(x)
#endif

/* --- >>errors (implementation) ----------------------------------------------------------- */

const char *pp_status_name(pp_status status)
{
    switch (status) {
#define PP__STATUS_NAME(code, text) case code: return #code;
    PP_STATUS_LIST(PP__STATUS_NAME)
#undef PP__STATUS_NAME
    default: return "PP_UNKNOWN";
    }
}

const char *pp_status_description(pp_status status)
{
    switch (status) {
#define PP__STATUS_TEXT(code, text) case code: return text;
    PP_STATUS_LIST(PP__STATUS_TEXT)
#undef PP__STATUS_TEXT
    default: return "unknown status";
    }
}

/* Records a failure in *err (if given) and returns the status, so a check reads as one line:
 *     if (pp < 1) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1", pp);         */
pp_status pp_error_set(pp_error *err, pp_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->status = status;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}
#define pp__fail pp_error_set
/* A rank's speed (pp_sim_costs, pp_balance_config): ranks a million times apart are no pipeline,
 * and within these bounds every simulated time stays finite. */
#define PP__SPEED_MIN 1e-6
#define PP__SPEED_MAX 1e6

static pp_status pp__ok(pp_error *err)
{
    if (err) { err->status = PP_OK; err->message[0] = '\0'; }
    return PP_OK;
}

/* msg past its opening "rank R" ("rank 3: ...", "rank 3 position ..."), or NULL when it does not
 * open so: a wrapper that names the rank itself names it once. */
static const char *pp__after_rank(const char *msg, int rank)
{
    char head[24];
    int n = snprintf(head, sizeof head, "rank %d", rank);
    if (strncmp(msg, head, (size_t)n) != 0 || (msg[n] >= '0' && msg[n] <= '9')) return NULL;
    return msg + n;
}

/* Allocation helpers: zeroed, overflow-checked. */
static void *pp__calloc(size_t count, size_t size)
{
    void *p;
    size_t bytes;
    if (size && count > SIZE_MAX / size) return NULL;
    bytes = count * size;
    p = PIPEPAR_MALLOC(bytes > 0 ? bytes : 1);
    if (p) memset(p, 0, bytes);
    return p;
}

/* A growable byte buffer for text output (CSV, SVG, JSON) and a growable int array. */
typedef struct pp__text { char *data; size_t len, cap; int failed; } pp__text;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void pp__text_printf(pp__text *t, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (t->failed) return;
    for (;;) {
        size_t room = t->cap - t->len;
        va_start(ap, fmt);
        n = vsnprintf(t->data ? t->data + t->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) { t->failed = 1; return; }
        if ((size_t)n < room) { t->len += (size_t)n; return; }
        {
            size_t cap = t->cap ? t->cap * 2 : 256;
            char *d;
            while (cap - t->len <= (size_t)n) cap *= 2;
            d = (char *)PIPEPAR_REALLOC(t->data, cap);
            if (!d) { t->failed = 1; return; }
            t->data = d; t->cap = cap;
        }
    }
}

static void pp__text_free(pp__text *t) { PIPEPAR_FREE(t->data); t->data = NULL; t->len = t->cap = 0; }


/* --- >>grid (implementation) -------------------------------------------------------------- */

static const char *const pp__dim_names[PP_DIM_COUNT] = { "tp", "cp", "dp", "pp" };

const char *pp_dim_name(pp_dim dim)
{
    return (int)dim >= 0 && dim < PP_DIM_COUNT ? pp__dim_names[dim] : "?";
}

/* Reads one dimension name from text[0 .. len-1]; -1 when it is none of tp, cp, dp, pp. */
static int pp__dim_lookup(const char *text, size_t len)
{
    int d;
    for (d = 0; d < PP_DIM_COUNT; d++)
        if (len == 2 && strncmp(text, pp__dim_names[d], 2) == 0) return d;
    return -1;
}

/* Splits "tp-cp-dp" into dimensions; dims[] gets them in text order. Duplicates and unknown
 * names fail, with `what` ("order" or "group") naming the parameter. */
static pp_status pp__dims_split(const char *text, const char *what, int dims[PP_DIM_COUNT],
                                int *count, pp_error *err)
{
    const char *p = text;
    unsigned seen = 0;
    *count = 0;
    if (!text || !*text) return pp__fail(err, PP_EINVAL, "%s='': needs dimension names (tp, cp, dp, pp) joined by '-'", what);
    for (;;) {
        const char *dash = strchr(p, '-');
        size_t len = dash ? (size_t)(dash - p) : strlen(p);
        int d = pp__dim_lookup(p, len);
        if (d < 0)
            return pp__fail(err, PP_EINVAL, "%s='%.64s%s': '%.*s' is not a dimension (tp, cp, dp, pp)",
                            what, text, strlen(text) > 64 ? "..." : "", (int)(len > 16 ? 16 : len), p);
        if (seen & (1u << d))
            return pp__fail(err, PP_EINVAL, "%s='%.64s%s': '%s' appears twice", what, text, strlen(text) > 64 ? "..." : "",
                            pp__dim_names[d]);
        seen |= 1u << d;
        dims[(*count)++] = d;
        if (!dash) break;
        p = dash + 1;
    }
    return PP_OK;
}

pp_status pp_grid_init(const pp_grid_config *cfg, pp_grid *grid, pp_error *err)
{
    int size[PP_DIM_COUNT], order[PP_DIM_COUNT], n = 0, d, i;
    long long prod;
    unsigned placed = 0;
    if (!cfg || !grid) return pp__fail(err, PP_EINVAL, "pp_grid_init: cfg and grid must not be NULL");
    if (cfg->world < 1) return pp__fail(err, PP_EINVAL, "world=%d: must be at least 1", cfg->world);
    if (cfg->tp < 0) return pp__fail(err, PP_EINVAL, "tp=%d: must be at least 1 (0 means 1)", cfg->tp);
    if (cfg->cp < 0) return pp__fail(err, PP_EINVAL, "cp=%d: must be at least 1 (0 means 1)", cfg->cp);
    if (cfg->pp < 0) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1 (0 means 1)", cfg->pp);
    if (cfg->dp < 0)
        return pp__fail(err, PP_EINVAL, "dp=%d: must be at least 1 (0 means world / (tp*cp*pp))", cfg->dp);
    size[PP_DIM_TP] = cfg->tp ? cfg->tp : 1;
    size[PP_DIM_CP] = cfg->cp ? cfg->cp : 1;
    size[PP_DIM_PP] = cfg->pp ? cfg->pp : 1;
    /* each size is an int, so tp*cp fits 64 bits, and so does its product with pp or dp while it is
     * at most INT_MAX; past that it is past any world, and multiplying on could overflow */
    prod = (long long)size[PP_DIM_TP] * size[PP_DIM_CP];
    if (prod <= INT_MAX) prod *= size[PP_DIM_PP];
    if (prod > INT_MAX)
        return pp__fail(err, PP_EINVAL, "world=%d: smaller than tp*cp*pp (tp=%d, cp=%d, pp=%d)", cfg->world,
                        size[PP_DIM_TP], size[PP_DIM_CP], size[PP_DIM_PP]);
    if (cfg->dp == 0) {
        if (prod > cfg->world || cfg->world % prod != 0)
            return pp__fail(err, PP_EINVAL,
                            "world=%d: must be a multiple of tp*cp*pp = %lld (tp=%d, cp=%d, pp=%d)",
                            cfg->world, prod, size[PP_DIM_TP], size[PP_DIM_CP], size[PP_DIM_PP]);
        size[PP_DIM_DP] = (int)(cfg->world / prod);
    } else {
        size[PP_DIM_DP] = cfg->dp;
        if (prod * cfg->dp != cfg->world)
            return pp__fail(err, PP_EINVAL,
                            "world=%d: must equal tp*cp*dp*pp = %lld (tp=%d, cp=%d, dp=%d, pp=%d)",
                            cfg->world, prod * cfg->dp, size[PP_DIM_TP], size[PP_DIM_CP], cfg->dp,
                            size[PP_DIM_PP]);
    }
    if (cfg->order && cfg->order[0]) {
        pp_status st = pp__dims_split(cfg->order, "order", order, &n, err);
        if (st != PP_OK) return st;
        for (i = 0; i < n; i++) placed |= 1u << order[i];
    }
    /* Dimensions the order leaves out go slowest, in the default order; only size 1 may. */
    for (d = 0; d < PP_DIM_COUNT; d++) {
        if (placed & (1u << d)) continue;
        if (cfg->order && cfg->order[0] && size[d] != 1)
            return pp__fail(err, PP_EINVAL, "order='%s': leaves out %s, whose size is %d (only size 1 may be left out)",
                            cfg->order, pp__dim_names[d], size[d]);
        order[n++] = d;
    }
    grid->world = cfg->world;
    {
        int stride = 1;
        for (i = 0; i < PP_DIM_COUNT; i++) {
            grid->order[i] = order[i];
            grid->stride[order[i]] = stride;
            stride *= size[order[i]];
        }
    }
    for (d = 0; d < PP_DIM_COUNT; d++) grid->size[d] = size[d];
    return pp__ok(err);
}

pp_status pp_grid_coords(const pp_grid *grid, int rank, int coord[PP_DIM_COUNT], pp_error *err)
{
    int d;
    if (!grid || !coord) return pp__fail(err, PP_EINVAL, "pp_grid_coords: grid and coord must not be NULL");
    if (rank < 0 || rank >= grid->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1 = %d", rank, grid->world - 1);
    for (d = 0; d < PP_DIM_COUNT; d++) coord[d] = rank / grid->stride[d] % grid->size[d];
    return pp__ok(err);
}

int pp_grid_rank(const pp_grid *grid, const int coord[PP_DIM_COUNT])
{
    int d, rank = 0;
    if (!grid || !coord) return -1;
    for (d = 0; d < PP_DIM_COUNT; d++) {
        if (coord[d] < 0 || coord[d] >= grid->size[d]) return -1;
        rank += coord[d] * grid->stride[d];
    }
    return rank;
}

int pp_grid_shift(const pp_grid *grid, int rank, pp_dim dim, int delta)
{
    int coord[PP_DIM_COUNT], n;
    if (!grid || (int)dim < 0 || dim >= PP_DIM_COUNT) return -1;
    if (pp_grid_coords(grid, rank, coord, NULL) != PP_OK) return -1;
    n = grid->size[dim];
    coord[dim] = (int)(((long long)coord[dim] + delta % n + n) % n);
    return pp_grid_rank(grid, coord);
}

int pp_grid_group_size(const pp_grid *grid, unsigned dims)
{
    int d, size = 1;
    if (!grid || dims == 0 || (dims & ~PP_GROUP_ALL)) return 0;
    for (d = 0; d < PP_DIM_COUNT; d++)
        if (dims & (1u << d)) size *= grid->size[d];
    return size;
}

static pp_status pp__grid_check_dims(const pp_grid *grid, unsigned dims, pp_error *err)
{
    if (!grid) return pp__fail(err, PP_EINVAL, "grid must not be NULL");
    if (dims == 0 || (dims & ~PP_GROUP_ALL))
        return pp__fail(err, PP_EINVAL, "dims=0x%x: must be a non-empty combination of PP_GROUP_TP, _CP, _DP, _PP", dims);
    return PP_OK;
}

pp_status pp_grid_group(const pp_grid *grid, int rank, unsigned dims, pp_grid_group_info *info, pp_error *err)
{
    int coord[PP_DIM_COUNT], i;
    int color = 0, cstride = 1, index = 0, istride = 1;
    pp_status st = pp__grid_check_dims(grid, dims, err);
    if (st != PP_OK) return st;
    if (!info) return pp__fail(err, PP_EINVAL, "info must not be NULL");
    st = pp_grid_coords(grid, rank, coord, err);
    if (st != PP_OK) return st;
    /* Both numbers count in the grid's order, first dimension fastest (Megatron's decompose). */
    for (i = 0; i < PP_DIM_COUNT; i++) {
        int d = grid->order[i];
        if (dims & (1u << d)) { index += coord[d] * istride; istride *= grid->size[d]; }
        else                  { color += coord[d] * cstride; cstride *= grid->size[d]; }
    }
    info->dims = dims;
    info->size = istride;
    info->count = cstride;
    info->color = color;
    info->index = index;
    return pp__ok(err);
}

pp_status pp_grid_group_members(const pp_grid *grid, unsigned dims, int color, int *members, int capacity,
                                pp_error *err)
{
    int size, count, base = 0, rest, i, k;
    pp_status st = pp__grid_check_dims(grid, dims, err);
    if (st != PP_OK) return st;
    size = pp_grid_group_size(grid, dims);
    count = grid->world / size;
    if (color < 0 || color >= count)
        return pp__fail(err, PP_EINVAL, "color=%d: must be between 0 and %d (groups of this mask)", color, count - 1);
    if (!members || capacity < size)
        return pp__fail(err, PP_EINVAL, "capacity=%d: the group has %d members", members ? capacity : 0, size);
    /* The fixed coordinates: decompose color over the unmasked dimensions. */
    rest = color;
    for (i = 0; i < PP_DIM_COUNT; i++) {
        int d = grid->order[i];
        if (dims & (1u << d)) continue;
        base += rest % grid->size[d] * grid->stride[d];
        rest /= grid->size[d];
    }
    for (k = 0; k < size; k++) {
        int r = base;
        rest = k;
        for (i = 0; i < PP_DIM_COUNT; i++) {
            int d = grid->order[i];
            if (!(dims & (1u << d))) continue;
            r += rest % grid->size[d] * grid->stride[d];
            rest /= grid->size[d];
        }
        members[k] = r;
    }
    return pp__ok(err);
}

pp_status pp_grid_embedding_group(const pp_grid *grid, int rank, int last_pp_rank, int members[2], int *count,
                                   pp_error *err)
{
    int coord[PP_DIM_COUNT], n = 0;
    pp_status st;
    if (!grid || !members || !count)
        return pp__fail(err, PP_EINVAL, "pp_grid_embedding_group: grid, members and count must not be NULL");
    *count = 0;
    st = pp_grid_coords(grid, rank, coord, err);
    if (st != PP_OK) return st;
    if (last_pp_rank < 0 || last_pp_rank >= grid->size[PP_DIM_PP])
        return pp__fail(err, PP_EINVAL, "last_pp_rank=%d: must be between 0 and pp-1 = %d (the pipeline rank of the "
                        "last stage)", last_pp_rank, grid->size[PP_DIM_PP] - 1);
    if (coord[PP_DIM_PP] != 0 && coord[PP_DIM_PP] != last_pp_rank) return pp__ok(err);
    coord[PP_DIM_PP] = 0;
    members[n++] = pp_grid_rank(grid, coord);
    if (last_pp_rank != 0) {
        coord[PP_DIM_PP] = last_pp_rank;
        members[n++] = pp_grid_rank(grid, coord);
    }
    *count = n;
    return pp__ok(err);
}

int pp_grid_dims_format(unsigned dims, char *buf, size_t size)
{
    pp__text t = { NULL, 0, 0, 0 };
    int d, n = 0, len;
    for (d = 0; d < PP_DIM_COUNT; d++)
        if (dims & (1u << d)) pp__text_printf(&t, "%s%s", n++ ? "-" : "", pp__dim_names[d]);
    if (dims == 0 || (dims & ~PP_GROUP_ALL)) { pp__text_free(&t); pp__text_printf(&t, "?"); }
    if (t.failed) { pp__text_free(&t); if (buf && size) buf[0] = '\0'; return -1; }
    len = (int)t.len;
    if (buf && size) snprintf(buf, size, "%s", t.data ? t.data : "");
    pp__text_free(&t);
    return len;
}

pp_status pp_grid_dims_parse(const char *text, unsigned *dims, pp_error *err)
{
    int list[PP_DIM_COUNT], n, i;
    pp_status st;
    if (!dims) return pp__fail(err, PP_EINVAL, "dims must not be NULL");
    st = pp__dims_split(text, "group", list, &n, err);
    if (st != PP_OK) return st;
    *dims = 0;
    for (i = 0; i < n; i++) *dims |= 1u << list[i];
    return pp__ok(err);
}

int pp_grid_order_format(const pp_grid *grid, char *buf, size_t size)
{
    if (!grid) { if (buf && size) buf[0] = '\0'; return -1; }
    return snprintf(buf, size, "%s-%s-%s-%s", pp__dim_names[grid->order[0]], pp__dim_names[grid->order[1]],
                    pp__dim_names[grid->order[2]], pp__dim_names[grid->order[3]]);
}

/* --- placement by speed ----------------------------------------------------------------------- */

static double pp__placement_bottleneck(int n, const double *rank_load, const double *gpu_time, const int *rank_of)
{
    double worst = 0;
    int g;
    for (g = 0; g < n; g++)
        if (rank_load[rank_of[g]] * gpu_time[g] > worst) worst = rank_load[rank_of[g]] * gpu_time[g];
    return worst;
}

/* Of the assignments whose bottleneck is at most `bound`, one that keeps the most GPUs on their
 * own rank: a least-cost perfect matching (the Hungarian method, O(n^3)) where keeping costs 0,
 * moving 1, and a pair over the bound more than every move together. rank_of holds one such
 * assignment on entry (the sorted pairing), so a matching within the bound exists. */
static pp_status pp__placement_fewest_moves(int n, const double *rank_load, const double *gpu_time, double bound,
                                            int *rank_of, pp_error *err)
{
    long *u, *v, *minv, big = (long)n + 1;
    int *p, *way, *used, i, j;
    u = (long *)pp__calloc((size_t)n + 1, sizeof(long));
    v = (long *)pp__calloc((size_t)n + 1, sizeof(long));
    minv = (long *)pp__calloc((size_t)n + 1, sizeof(long));
    p = (int *)pp__calloc((size_t)n + 1, sizeof(int));
    way = (int *)pp__calloc((size_t)n + 1, sizeof(int));
    used = (int *)pp__calloc((size_t)n + 1, sizeof(int));
    if (!u || !v || !minv || !p || !way || !used) {
        PIPEPAR_FREE(u); PIPEPAR_FREE(v); PIPEPAR_FREE(minv); PIPEPAR_FREE(p); PIPEPAR_FREE(way); PIPEPAR_FREE(used);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
#define PP__PLACE_COST(g, r) (rank_load[r] * gpu_time[g] > bound ? big : (g) == (r) ? 0L : 1L)
    /* rows: GPUs 1..n, columns: ranks 1..n (1-based, column 0 the sentinel) */
    for (i = 1; i <= n; i++) {
        int j0 = 0, j1 = 0;
        p[0] = i;
        for (j = 0; j <= n; j++) { minv[j] = LONG_MAX; used[j] = 0; }
        do {
            int i0 = p[j0];
            long delta = LONG_MAX;
            used[j0] = 1;
            for (j = 1; j <= n; j++)
                if (!used[j]) {
                    long cur = PP__PLACE_COST(i0 - 1, j - 1) - u[i0] - v[j];
                    if (cur < minv[j]) { minv[j] = cur; way[j] = j0; }
                    if (minv[j] < delta) { delta = minv[j]; j1 = j; }
                }
            for (j = 0; j <= n; j++)
                if (used[j]) { u[p[j]] += delta; v[j] -= delta; }
                else minv[j] -= delta;
            j0 = j1;
        } while (p[j0] != 0);
        do { j1 = way[j0]; p[j0] = p[j1]; j0 = j1; } while (j0);
    }
#undef PP__PLACE_COST
    for (j = 1; j <= n; j++) rank_of[p[j] - 1] = j - 1;
    PIPEPAR_FREE(u); PIPEPAR_FREE(v); PIPEPAR_FREE(minv); PIPEPAR_FREE(p); PIPEPAR_FREE(way); PIPEPAR_FREE(used);
    return pp__ok(err);
}

pp_status pp_place_by_speed(int n, const double *rank_load, const double *gpu_time, double min_gain, int *rank_of,
                            double *gain, pp_error *err)
{
    int *by_load, *by_time, i, j;
    double before, after;
    if (gain) *gain = 0;
    if (n < 1) return pp__fail(err, PP_EINVAL, "n=%d: must be at least 1", n);
    if (!rank_load || !gpu_time || !rank_of)
        return pp__fail(err, PP_EINVAL, "rank_load, gpu_time and rank_of must not be NULL");
    if (!(min_gain >= 0 && min_gain < 1))
        return pp__fail(err, PP_EINVAL, "min_gain=%g: must be in [0, 1)", min_gain);
    for (i = 0; i < n; i++) {
        if (!(rank_load[i] >= 0 && rank_load[i] <= DBL_MAX))
            return pp__fail(err, PP_EINVAL, "rank_load[%d]=%g: must be a finite number >= 0", i, rank_load[i]);
        if (!(gpu_time[i] > 0 && gpu_time[i] <= DBL_MAX))
            return pp__fail(err, PP_EINVAL, "gpu_time[%d]=%g: must be a finite number > 0", i, gpu_time[i]);
    }
    by_load = (int *)pp__calloc((size_t)n, sizeof(int));
    by_time = (int *)pp__calloc((size_t)n, sizeof(int));
    if (!by_load || !by_time) {
        PIPEPAR_FREE(by_load); PIPEPAR_FREE(by_time);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    /* insertion sorts, stable (ties keep index order, so equal inputs give the identity): ranks
     * by load, heaviest first; GPUs by time, fastest first */
    for (i = 0; i < n; i++) {
        for (j = i; j > 0 && rank_load[by_load[j - 1]] < rank_load[i]; j--) by_load[j] = by_load[j - 1];
        by_load[j] = i;
        for (j = i; j > 0 && gpu_time[by_time[j - 1]] > gpu_time[i]; j--) by_time[j] = by_time[j - 1];
        by_time[j] = i;
    }
    for (i = 0; i < n; i++) rank_of[i] = i;
    before = pp__placement_bottleneck(n, rank_load, gpu_time, rank_of);
    for (i = 0; i < n; i++) rank_of[by_time[i]] = by_load[i];
    after = pp__placement_bottleneck(n, rank_load, gpu_time, rank_of);
    PIPEPAR_FREE(by_load);
    PIPEPAR_FREE(by_time);
    if (!(before > 0) || !(after < before * (1 - min_gain))) {
        for (i = 0; i < n; i++) rank_of[i] = i;
        return pp__ok(err);
    }
    if (gain) *gain = 1 - after / before;
    /* the same bottleneck with as few ranks moved as possible (pipeline neighbours the launcher
     * placed together stay together where they can); past 512 ranks the O(n^3) costs too much */
    if (n <= 512) return pp__placement_fewest_moves(n, rank_load, gpu_time, after, rank_of, err);
    return pp__ok(err);
}

/* ============================================================================================
 * >>layers (implementation)
 * Every form ends in one list of items per stage (embedding, decoder layers, MTP depths, loss);
 * pp__layers_finish turns that list into ranges, type-aware offsets and the layout string.
 * ============================================================================================ */

#define PP__LAYERS_MAX (1 << 20)   /* most decoder layers, items, stages or expanded characters */

static const char *const pp__layer_type_names[PP_LAYER_TYPE_COUNT] = {
    "decoder", "moe", "dense", "embedding", "loss", "mtp", "transformer", "mamba", "attention",
    "mlp", "gdn", "dsa", "mla", "csa", "hca", "swa"
};

/* How an item is written: layout letters for E/L/m/t, hybrid symbols for the rest. */
static const char pp__layer_type_chars[PP_LAYER_TYPE_COUNT] = {
    '?', 'E', '?', 'E', 'L', 'm', 't', 'M', '*', '-', 'G', 'D', '+', 'C', 'H', 'W'
};

static const char *const pp__layers_form_names[PP_LAYERS_FORM_COUNT] = {
    "even", "uneven", "layout", "hybrid", "balanced"
};

const char *pp_layer_type_name(pp_layer_type type)
{
    return ((int)type >= 0 && type < PP_LAYER_TYPE_COUNT) ? pp__layer_type_names[type] : "unknown";
}

pp_status pp_layer_type_parse(const char *name, pp_layer_type *type, pp_error *err)
{
    int t;
    if (!name || !type) return pp__fail(err, PP_EINVAL, "type: missing");
    for (t = 0; t < PP_LAYER_TYPE_COUNT; t++)
        if (strcmp(name, pp__layer_type_names[t]) == 0) { *type = (pp_layer_type)t; return pp__ok(err); }
    return pp__fail(err, PP_EINVAL, "layer type '%.40s': unknown (one of decoder, moe, dense, embedding, "
                    "loss, mtp, transformer, mamba, attention, mlp, gdn, dsa, mla, csa, hca, swa)", name);
}

const char *pp_layers_form_name(pp_layers_form form)
{
    return ((int)form >= 0 && form < PP_LAYERS_FORM_COUNT) ? pp__layers_form_names[form] : "unknown";
}

/* Decoder items are the layers Megatron numbers with layer_number: 't' and every hybrid symbol. */
static int pp__layer_is_decoder(int type)
{
    return type == PP_LAYER_MOE || type == PP_LAYER_TRANSFORMER || type >= PP_LAYER_MAMBA;
}

/* Does an item of `type` (an MoE layer when `moe`) count in the index space of `sel`? */
static int pp__layer_matches(int type, int moe, int sel)
{
    switch (sel) {
    case PP_LAYER_DECODER: return pp__layer_is_decoder(type);
    case PP_LAYER_MOE:     return pp__layer_is_decoder(type) && moe;
    case PP_LAYER_DENSE:   return pp__layer_is_decoder(type) && !moe;
    default:               return type == sel;
    }
}

/* The hybrid symbols (Megatron-LM's hybrid layer allocation) and what they build. */
static int pp__hybrid_symbol_type(char c)
{
    switch (c) {
    case 'M': return PP_LAYER_MAMBA;
    case '*': return PP_LAYER_ATTENTION;
    case '-': return PP_LAYER_MLP;
    case 'E': return PP_LAYER_MOE;
    case 'G': return PP_LAYER_GDN;
    case 'D': return PP_LAYER_DSA;
    case '+': return PP_LAYER_MLA;
    case 'C': return PP_LAYER_CSA;
    case 'H': return PP_LAYER_HCA;
    case 'W': return PP_LAYER_SWA;
    default:  return -1;
    }
}

/* A short, printable echo of user text for messages: at most 48 characters, odd bytes as \xNN. */
static const char *pp__layers_echo(const char *s, char *buf, size_t size)
{
    size_t i, n = 0;
    for (i = 0; s[i] && n + 8 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= 48) { memcpy(buf + n, "...", 3); n += 3; break; }
        if (c >= 32 && c < 127 && c != '\'') buf[n++] = (char)c;
        else n += (size_t)snprintf(buf + n, size - n, "\\x%02x", c);
    }
    buf[n] = '\0';
    return buf;
}

static const char *pp__layers_char(char c, char *buf)
{
    unsigned char u = (unsigned char)c;
    if (u >= 33 && u < 127) { buf[0] = c; buf[1] = '\0'; }
    else snprintf(buf, 8, "\\x%02x", u);
    return buf;
}

static void pp__layers_putc(pp__text *t, char c)
{
    if (t->failed) return;
    if (t->len + 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        char *d = (char *)PIPEPAR_REALLOC(t->data, cap);
        if (!d) { t->failed = 1; return; }
        t->data = d; t->cap = cap;
    }
    t->data[t->len++] = c;
    t->data[t->len] = '\0';
}

/* --- result object ------------------------------------------------------------------------ */

void pp_layers_free(pp_layers *l)
{
    if (!l) return;
    PIPEPAR_FREE(l->first); PIPEPAR_FREE(l->count); PIPEPAR_FREE(l->stage_items);
    PIPEPAR_FREE(l->item_type); PIPEPAR_FREE(l->is_moe); PIPEPAR_FREE(l->layer_type);
    PIPEPAR_FREE(l->type_first); PIPEPAR_FREE(l->type_count); PIPEPAR_FREE(l->layout);
    PIPEPAR_FREE(l->pattern); PIPEPAR_FREE(l->stage_cost); PIPEPAR_FREE(l->stage_memory);
    PIPEPAR_FREE(l->rank_time);
    PIPEPAR_FREE(l);
}

/* A result with room for `max_items` items over pp*vpp stages. */
static pp_layers *pp__layers_new(pp_layers_form form, int pp, int vpp, int max_items)
{
    pp_layers *l = (pp_layers *)pp__calloc(1, sizeof *l);
    if (!l) return NULL;
    l->form = form;
    l->pp = pp; l->vpp = vpp; l->num_stages = pp * vpp;
    l->stage_items = (int *)pp__calloc((size_t)l->num_stages + 1, sizeof(int));
    l->item_type = (unsigned char *)pp__calloc((size_t)max_items + 1, 1);
    if (!l->stage_items || !l->item_type) { pp_layers_free(l); return NULL; }
    return l;
}

static void pp__layers_push(pp_layers *l, int type, int count)
{
    int k;
    for (k = 0; k < count; k++) l->item_type[l->num_items++] = (unsigned char)type;
}

/* The items of a transformer model whose stage s builds count[s] decoder layers: the embedding
 * opens stage 0, the MTP depths and the loss close the last stage (where Megatron builds them
 * when no layout says otherwise). */
static void pp__layers_fill_counts(pp_layers *l, const int *count, int mtp_layers)
{
    int s;
    for (s = 0; s < l->num_stages; s++) {
        l->stage_items[s] = l->num_items;
        if (s == 0) pp__layers_push(l, PP_LAYER_EMBEDDING, 1);
        pp__layers_push(l, PP_LAYER_TRANSFORMER, count[s]);
        if (s == l->num_stages - 1) {
            pp__layers_push(l, PP_LAYER_MTP, mtp_layers);
            pp__layers_push(l, PP_LAYER_LOSS, 1);
        }
    }
    l->stage_items[l->num_stages] = l->num_items;
}

/* --- moe_layer_freq: "N" or a Python list expression ---------------------------------------
 * Megatron reads --moe-layer-freq with moe_freq_type: an integer N makes layer i an MoE layer
 * when i % N == 0; a string with '[' is evaluated as Python, e.g. "([1]*3+[0]*1)*3". We evaluate
 * the part of Python those patterns use: integer and list literals, '+', '*', parentheses.   */

typedef struct pp__moe_value {
    int is_list;
    long long num;
    unsigned char *items;
    size_t len;
} pp__moe_value;

typedef struct pp__moe_parser {
    const char *s;
    size_t i;
    const char *what;           /* name of the field, for messages */
    pp_error *err;
    pp_status status;
} pp__moe_parser;

static void pp__moe_skip(pp__moe_parser *p)
{
    while (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r') p->i++;
}

static int pp__moe_error(pp__moe_parser *p, const char *rule)
{
    char echo[96];
    if (p->status == PP_OK)
        p->status = pp__fail(p->err, PP_EPARSE, "%s='%s': %s at position %zu", p->what,
                             pp__layers_echo(p->s, echo, sizeof echo), rule, p->i);
    return 0;
}

static int pp__moe_int(pp__moe_parser *p, long long *out)
{
    long long v = 0;
    if (p->s[p->i] < '0' || p->s[p->i] > '9') return pp__moe_error(p, "expected a number");
    while (p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i] - '0');
        if (v > PP__LAYERS_MAX) return pp__moe_error(p, "number too large");
        p->i++;
    }
    *out = v;
    return 1;
}

static int pp__moe_expr(pp__moe_parser *p, pp__moe_value *out, int depth);

static int pp__moe_factor(pp__moe_parser *p, pp__moe_value *out, int depth)
{
    memset(out, 0, sizeof *out);
    pp__moe_skip(p);
    if (depth > 64) return pp__moe_error(p, "nested too deeply");
    if (p->s[p->i] == '(') {
        p->i++;
        if (!pp__moe_expr(p, out, depth + 1)) return 0;
        pp__moe_skip(p);
        if (p->s[p->i] != ')') { PIPEPAR_FREE(out->items); out->items = NULL; return pp__moe_error(p, "expected ')'"); }
        p->i++;
        return 1;
    }
    if (p->s[p->i] == '[') {
        size_t cap = 0;
        p->i++;
        out->is_list = 1;
        for (;;) {
            long long v;
            pp__moe_skip(p);
            if (p->s[p->i] == ']') { p->i++; return 1; }
            if (!pp__moe_int(p, &v)) break;
            if (v > 255) { pp__moe_error(p, "list element too large"); break; }
            if (out->len == cap) {
                unsigned char *d;
                if (cap >= PP__LAYERS_MAX) { pp__moe_error(p, "list too long"); break; }
                cap = cap ? cap * 2 : 16;
                d = (unsigned char *)PIPEPAR_REALLOC(out->items, cap);
                if (!d) { if (p->status == PP_OK) p->status = pp__fail(p->err, PP_ENOMEM, "%s: out of memory", p->what); break; }
                out->items = d;
            }
            out->items[out->len++] = (unsigned char)v;
            pp__moe_skip(p);
            if (p->s[p->i] == ',') { p->i++; continue; }
            if (p->s[p->i] == ']') { p->i++; return 1; }
            pp__moe_error(p, "expected ',' or ']'");
            break;
        }
        PIPEPAR_FREE(out->items); out->items = NULL;
        return 0;
    }
    return pp__moe_int(p, &out->num);
}

/* a * b where one side may be a list (repetition, as in Python). */
static int pp__moe_times(pp__moe_parser *p, pp__moe_value *a, pp__moe_value *b)
{
    if (a->is_list && b->is_list) {
        PIPEPAR_FREE(b->items);
        return pp__moe_error(p, "cannot multiply a list by a list");
    }
    if (!a->is_list && !b->is_list) {
        if (a->num * b->num > PP__LAYERS_MAX) return pp__moe_error(p, "number too large");
        a->num *= b->num;
        return 1;
    }
    if (!a->is_list) { pp__moe_value t = *a; *a = *b; *b = t; }
    {
        long long n = b->num;
        size_t k;
        unsigned char *d;
        if (n == 0 || a->len == 0) { a->len = 0; return 1; }
        if ((long long)a->len * n > PP__LAYERS_MAX) return pp__moe_error(p, "list too long");
        d = (unsigned char *)PIPEPAR_REALLOC(a->items, a->len * (size_t)n);
        if (!d) {
            if (p->status == PP_OK) p->status = pp__fail(p->err, PP_ENOMEM, "%s: out of memory", p->what);
            return 0;
        }
        for (k = 1; k < (size_t)n; k++) memcpy(d + k * a->len, d, a->len);
        a->items = d;
        a->len *= (size_t)n;
    }
    return 1;
}

static int pp__moe_term(pp__moe_parser *p, pp__moe_value *out, int depth)
{
    if (!pp__moe_factor(p, out, depth)) return 0;
    for (;;) {
        pp__moe_value rhs;
        pp__moe_skip(p);
        if (p->s[p->i] != '*') return 1;
        p->i++;
        if (!pp__moe_factor(p, &rhs, depth) || !pp__moe_times(p, out, &rhs)) {
            PIPEPAR_FREE(out->items); out->items = NULL;
            return 0;
        }
        PIPEPAR_FREE(rhs.items);
    }
}

static int pp__moe_expr(pp__moe_parser *p, pp__moe_value *out, int depth)
{
    if (!pp__moe_term(p, out, depth)) return 0;
    for (;;) {
        pp__moe_value rhs;
        pp__moe_skip(p);
        if (p->s[p->i] != '+') return 1;
        p->i++;
        if (!pp__moe_term(p, &rhs, depth)) { PIPEPAR_FREE(out->items); out->items = NULL; return 0; }
        if (out->is_list != rhs.is_list) {
            PIPEPAR_FREE(rhs.items); PIPEPAR_FREE(out->items); out->items = NULL;
            return pp__moe_error(p, "cannot add a number and a list");
        }
        if (!out->is_list) {
            out->num += rhs.num;
            if (out->num > PP__LAYERS_MAX) { return pp__moe_error(p, "number too large"); }
        } else if (rhs.len) {
            unsigned char *d;
            if (out->len + rhs.len > PP__LAYERS_MAX) {
                PIPEPAR_FREE(rhs.items); PIPEPAR_FREE(out->items); out->items = NULL;
                return pp__moe_error(p, "list too long");
            }
            d = (unsigned char *)PIPEPAR_REALLOC(out->items, out->len + rhs.len);
            if (!d) {
                PIPEPAR_FREE(rhs.items); PIPEPAR_FREE(out->items); out->items = NULL;
                if (p->status == PP_OK) p->status = pp__fail(p->err, PP_ENOMEM, "%s: out of memory", p->what);
                return 0;
            }
            memcpy(d + out->len, rhs.items, rhs.len);
            out->items = d;
            out->len += rhs.len;
        }
        PIPEPAR_FREE(rhs.items);
    }
}

/* Fills is_moe[0..n) from a moe_layer_freq string. */
static pp_status pp__moe_pattern(const char *text, int n, unsigned char *is_moe, pp_error *err)
{
    char echo[96];
    int i;
    if (!strchr(text, '[')) {                       /* an integer N, as int(x) reads it */
        pp__moe_parser p;
        long long v;
        memset(&p, 0, sizeof p);
        p.s = text; p.what = "moe_layer_freq"; p.err = err;
        pp__moe_skip(&p);
        if (pp__moe_int(&p, &v)) pp__moe_skip(&p);
        else p.i = 0;
        if (p.i == 0 || p.s[p.i] != '\0')
            return pp__fail(err, PP_EPARSE, "moe_layer_freq='%s': expected an integer N (layer i is MoE "
                            "when i %% N == 0) or a list such as [0]*3+[1]*58",
                            pp__layers_echo(text, echo, sizeof echo));
        if (v < 1)
            return pp__fail(err, PP_EINVAL, "moe_layer_freq=%lld: must be at least 1", v);
        for (i = 0; i < n; i++) is_moe[i] = (unsigned char)(i % v == 0);
        return PP_OK;
    }
    {
        pp__moe_parser p;
        pp__moe_value v;
        memset(&p, 0, sizeof p);
        memset(&v, 0, sizeof v);
        p.s = text; p.what = "moe_layer_freq"; p.err = err; p.status = PP_OK;
        if (!pp__moe_expr(&p, &v, 0)) return p.status;
        pp__moe_skip(&p);
        if (p.s[p.i] != '\0') { PIPEPAR_FREE(v.items); pp__moe_error(&p, "unexpected text"); return p.status; }
        if (!v.is_list)
            return pp__fail(err, PP_EPARSE, "moe_layer_freq='%s': evaluates to a number, not a list",
                            pp__layers_echo(text, echo, sizeof echo));
        if ((long long)v.len != n) {
            PIPEPAR_FREE(v.items);
            return pp__fail(err, PP_EINVAL, "moe_layer_freq='%s': the list has %zu entries, but the model has "
                            "%d decoder layers", pp__layers_echo(text, echo, sizeof echo), v.len, n);
        }
        for (i = 0; i < n; i++) {
            if (v.items[i] > 1) {
                int bad = v.items[i];
                PIPEPAR_FREE(v.items);
                return pp__fail(err, PP_EINVAL, "moe_layer_freq: entry %d is %d; use 0 (dense) or 1 (MoE)", i, bad);
            }
            is_moe[i] = v.items[i];
        }
        PIPEPAR_FREE(v.items);
        return PP_OK;
    }
}

/* --- finishing: ranges, type-aware offsets, layout string ---------------------------------- */

/* Stage text in layout spelling ("Et*13") or, for hybrid patterns, the decoder symbols. */
static void pp__layers_stage_spell(const pp_layers *l, int s, pp__text *t)
{
    int i = l->stage_items[s], end = l->stage_items[s + 1];
    while (i < end) {
        int type = l->item_type[i], run = 1;
        char c = pp__layer_type_chars[type];
        if (l->form == PP_LAYERS_HYBRID) {
            if (pp__layer_is_decoder(type)) pp__layers_putc(t, c);
            i++;
            continue;
        }
        while (i + run < end && l->item_type[i + run] == type) run++;
        pp__layers_putc(t, c);
        if (run > 1) pp__text_printf(t, "*%d", run);
        i += run;
    }
}

/* A layout string: stages joined by '|', runs of equal stages as "(X|)*N". Megatron's parser
 * expands "(...)*N" before "x*N", so both nest as written here. */
static pp_status pp__layers_make_layout(pp_layers *l, pp_error *err)
{
    pp__text out, a, b;
    int s;
    memset(&out, 0, sizeof out); memset(&a, 0, sizeof a); memset(&b, 0, sizeof b);
    pp__layers_putc(&out, '\0'); out.len = 0;
    for (s = 0; s < l->num_stages; ) {
        int run = 1;
        a.len = 0; pp__layers_putc(&a, '\0'); a.len = 0;
        pp__layers_stage_spell(l, s, &a);
        if (s == l->num_stages - 1) { pp__text_printf(&out, "%s", a.data ? a.data : ""); break; }
        while (s + run < l->num_stages - 1) {
            b.len = 0; pp__layers_putc(&b, '\0'); b.len = 0;
            pp__layers_stage_spell(l, s + run, &b);
            if (a.failed || b.failed || strcmp(a.data, b.data) != 0) break;
            run++;
        }
        if (run > 1) pp__text_printf(&out, "(%s|)*%d", a.data ? a.data : "", run);
        else pp__text_printf(&out, "%s|", a.data ? a.data : "");
        s += run;
    }
    if (out.failed || a.failed || b.failed) {
        pp__text_free(&out); pp__text_free(&a); pp__text_free(&b);
        return pp__fail(err, PP_ENOMEM, "layout string: out of memory");
    }
    pp__text_free(&a); pp__text_free(&b);
    l->layout = out.data;
    return PP_OK;
}

static pp_status pp__layers_finish(pp_layers *l, const char *moe_freq, pp_error *err)
{
    const int C = PP_LAYER_TYPE_COUNT;
    int running[PP_LAYER_TYPE_COUNT];
    int s, i, t, g = 0, n = 0;
    pp_status st;
    for (i = 0; i < l->num_items; i++) n += pp__layer_is_decoder(l->item_type[i]);
    l->num_layers = n;
    l->first = (int *)pp__calloc((size_t)l->num_stages, sizeof(int));
    l->count = (int *)pp__calloc((size_t)l->num_stages, sizeof(int));
    l->is_moe = (unsigned char *)pp__calloc((size_t)n + 1, 1);
    l->layer_type = (unsigned char *)pp__calloc((size_t)n + 1, 1);
    l->type_first = (int *)pp__calloc((size_t)l->num_stages * C, sizeof(int));
    l->type_count = (int *)pp__calloc((size_t)l->num_stages * C, sizeof(int));
    if (!l->first || !l->count || !l->is_moe || !l->layer_type || !l->type_first || !l->type_count)
        return pp__fail(err, PP_ENOMEM, "layers: out of memory");
    if (moe_freq && (st = pp__moe_pattern(moe_freq, n, l->is_moe, err)) != PP_OK) return st;
    for (t = 0; t < C; t++) running[t] = 0;
    l->mtp_layers = 0;
    for (s = 0; s < l->num_stages; s++) {
        l->first[s] = g;
        for (t = 0; t < C; t++) l->type_first[s * C + t] = running[t];
        for (i = l->stage_items[s]; i < l->stage_items[s + 1]; i++) {
            int type = l->item_type[i], moe = 0;
            if (pp__layer_is_decoder(type)) {
                if (type == PP_LAYER_MOE) l->is_moe[g] = 1;
                moe = l->is_moe[g];
                l->layer_type[g++] = (unsigned char)type;
            }
            if (type == PP_LAYER_MTP) l->mtp_layers++;
            for (t = 0; t < C; t++) running[t] += pp__layer_matches(type, moe, t);
        }
        l->count[s] = g - l->first[s];
        for (t = 0; t < C; t++) l->type_count[s * C + t] = running[t] - l->type_first[s * C + t];
    }
    if (l->form != PP_LAYERS_HYBRID && !l->pattern) return pp__layers_make_layout(l, err);
    return PP_OK;
}

/* --- checks shared by the forms -------------------------------------------------------------- */

static pp_status pp__layers_check_sizes(int pp, int vpp, pp_error *err)
{
    if (pp < 1 || pp > 65536) return pp__fail(err, PP_EINVAL, "pp=%d: must be between 1 and 65536", pp);
    if (vpp < 1 || vpp > 65536) return pp__fail(err, PP_EINVAL, "vpp=%d: must be between 1 and 65536", vpp);
    if ((long long)pp * vpp > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "pp*vpp=%lld: at most %d stages", (long long)pp * vpp, PP__LAYERS_MAX);
    if (vpp > 1 && pp < 2)
        return pp__fail(err, PP_EINVAL, "vpp=%d: virtual stages need pp >= 2 (Megatron-LM rejects an interleaved "
                        "schedule with one pipeline rank, and would give every chunk layer offset 0)", vpp);
    return PP_OK;
}

/* Layers per rank for the even and uneven forms (Megatron-LM's TransformerConfig checks and
 * get_num_layers_to_build), then per stage: count[vpp_rank * pp + pp_rank]. Stricter than
 * Megatron where it would build the wrong model: first + last > num_layers, or layers left over
 * with no middle stage to hold them. */
static pp_status pp__layers_split(int L, int pp, int vpp, int first, int last, int emb, int loss,
                                  int *count, pp_error *err)
{
    int r, v, S = pp * vpp;
    if (first || last) {
        int middle_stages = pp - (first ? 1 : 0) - (last ? 1 : 0);
        long long middle = (long long)L - first - last;
        int per = 0;
        if (emb || loss)
            return pp__fail(err, PP_EINVAL, "first=%d, last=%d: num_layers_in_first/last_pipeline_stage cannot be "
                            "combined with account_for_embedding/loss_in_pipeline_split", first, last);
        if (middle_stages < 0)
            return pp__fail(err, PP_EINVAL, "first=%d, last=%d: pp=1 has a single stage, it cannot take both the "
                            "first and the last stage's layers", first, last);
        if (first && vpp > 1 && first % vpp != 0)
            return pp__fail(err, PP_EINVAL, "first=%d: the first stage's layers must divide evenly over vpp=%d "
                            "chunks", first, vpp);
        if (last && vpp > 1 && last % vpp != 0)
            return pp__fail(err, PP_EINVAL, "last=%d: the last stage's layers must divide evenly over vpp=%d "
                            "chunks", last, vpp);
        if (middle < 0)
            return pp__fail(err, PP_EINVAL, "first=%d, last=%d: together more than num_layers=%d", first, last, L);
        if (middle_stages == 0 && middle != 0)
            return pp__fail(err, PP_EINVAL, "num_layers=%d minus first stage %d and last stage %d leaves %lld layers, "
                            "but pp=%d has 0 middle stages to hold them", L, first, last, middle, pp);
        if (middle_stages > 0) {
            if (middle % middle_stages != 0)
                return pp__fail(err, PP_EINVAL, "num_layers=%d minus first stage %d and last stage %d leaves %lld "
                                "layers, which do not divide evenly over %d middle stages (pp=%d)",
                                L, first, last, middle, middle_stages, pp);
            per = (int)(middle / middle_stages);
            if (vpp > 1 && per % vpp != 0)
                return pp__fail(err, PP_EINVAL, "vpp=%d: each middle rank's %d layers do not divide evenly over "
                                "%d chunks", vpp, per, vpp);
        }
        for (r = 0; r < pp; r++) {
            int n = per;
            if (r == 0 && first) n = first;
            else if (r == pp - 1 && last) n = last;
            for (v = 0; v < vpp; v++) count[v * pp + r] = n / vpp;
        }
        return PP_OK;
    }
    {
        long long total = (long long)L + (emb ? 1 : 0) + (loss ? 1 : 0);
        int per;
        if (total % pp != 0) {
            if (emb || loss)
                return pp__fail(err, PP_EINVAL, "num_layers=%d: with the %s counted as a layer that is %lld, which "
                                "does not divide evenly over pp=%d", L,
                                emb && loss ? "embedding and the loss" : emb ? "embedding" : "loss", total, pp);
            return pp__fail(err, PP_EINVAL, "num_layers=%d: does not divide evenly over pp=%d (set first/last for "
                            "an uneven split, or give a layout)", L, pp);
        }
        per = (int)(total / pp);
        if (vpp > 1 && per % vpp != 0)
            return pp__fail(err, PP_EINVAL, "vpp=%d: each rank's %d layers do not divide evenly over %d chunks",
                            vpp, per, vpp);
        for (r = 0; r < S; r++) count[r] = per / vpp;
        if (emb) count[0]--;
        if (loss) count[S - 1]--;
        if (count[0] < 0 || count[S - 1] < 0)
            return pp__fail(err, PP_EINVAL, "num_layers=%d: a stage of %d layers cannot give one up to the %s",
                            L, per / vpp, count[0] < 0 ? "embedding" : "loss");
        return PP_OK;
    }
}

/* --- layout strings ---------------------------------------------------------------------------
 * Megatron-LM's PipelineParallelLayerLayout.parse_str_to_list, step by step:
 *   1. drop every ','
 *   2. one left-to-right pass of  \(([^)]+)\)\*(\d+)  -> the group repeated  ("(tt|)*2" -> "tt|tt|")
 *   3. one left-to-right pass of  (.)\*(\d+)          -> the character repeated ("t*3" -> "ttt")
 *   4. split at '|'; every character must be one of E t m L.
 * Each expanded character remembers where it came from, so errors point into the input.     */

typedef struct pp__ptext { char *c; int *pos; size_t len, cap; } pp__ptext;

static void pp__ptext_free(pp__ptext *t) { PIPEPAR_FREE(t->c); PIPEPAR_FREE(t->pos); memset(t, 0, sizeof *t); }

/* Appends `times` copies of [c, c + n) (positions pos); 1 when the result would be too long. */
static int pp__ptext_append(pp__ptext *t, const char *c, const int *pos, size_t n, long long times, int *oom)
{
    long long k;
    if (times <= 0 || n == 0) return 0;
    if ((long long)n * times > (long long)PP__LAYERS_MAX - (long long)t->len) return 1;
    if (t->len + n * (size_t)times > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        char *nc; int *np;
        while (cap < t->len + n * (size_t)times) cap *= 2;
        nc = (char *)PIPEPAR_REALLOC(t->c, cap + 1);
        if (!nc) { *oom = 1; return 1; }
        t->c = nc;
        np = (int *)PIPEPAR_REALLOC(t->pos, (cap + 1) * sizeof(int));
        if (!np) { *oom = 1; return 1; }
        t->pos = np;
        t->cap = cap;
    }
    for (k = 0; k < times; k++) {
        memcpy(t->c + t->len, c, n);
        memcpy(t->pos + t->len, pos, n * sizeof(int));
        t->len += n;
    }
    t->c[t->len] = '\0';
    return 0;
}

static int pp__is_digit(char c) { return c >= '0' && c <= '9'; }

/* Reads the digits at s[*i] (at least one is there); -1 when the count is absurd. */
static long long pp__layout_count(const pp__ptext *s, size_t *i)
{
    long long v = 0;
    while (*i < s->len && pp__is_digit(s->c[*i])) {
        if (v <= PP__LAYERS_MAX) v = v * 10 + (s->c[*i] - '0');
        (*i)++;
    }
    return v > PP__LAYERS_MAX ? -1 : v;
}

static pp_status pp__layout_too_long(const char *text, int oom, pp_error *err)
{
    char echo[96];
    if (oom) return pp__fail(err, PP_ENOMEM, "layout: out of memory");
    return pp__fail(err, PP_EINVAL, "layout '%s': expands to more than %d characters",
                    pp__layers_echo(text, echo, sizeof echo), PP__LAYERS_MAX);
}

static pp_status pp__layout_expand(const char *text, pp__ptext *out, pp_error *err)
{
    pp__ptext a, b;
    size_t i, n = strlen(text);
    int oom = 0, pos;
    memset(&a, 0, sizeof a); memset(&b, 0, sizeof b); memset(out, 0, sizeof *out);
    if (n > PP__LAYERS_MAX) return pp__layout_too_long(text, 0, err);
    for (i = 0; i < n; i++) {                               /* 1. commas are cosmetic */
        if (text[i] == ',') continue;
        pos = (int)i;
        if (pp__ptext_append(&a, text + i, &pos, 1, 1, &oom)) goto too_long;
    }
    for (i = 0; i < a.len; ) {                              /* 2. (group)*N */
        if (a.c[i] == '(') {
            size_t j = i + 1, k;
            while (j < a.len && a.c[j] != ')') j++;
            if (j > i + 1 && j + 2 < a.len && a.c[j + 1] == '*' && pp__is_digit(a.c[j + 2])) {
                long long times;
                k = j + 2;
                times = pp__layout_count(&a, &k);
                if (times < 0) goto bad_count;
                if (pp__ptext_append(&b, a.c + i + 1, a.pos + i + 1, j - i - 1, times, &oom)) goto too_long;
                i = k;
                continue;
            }
        }
        if (pp__ptext_append(&b, a.c + i, a.pos + i, 1, 1, &oom)) goto too_long;
        i++;
    }
    pp__ptext_free(&a);
    for (i = 0; i < b.len; ) {                              /* 3. x*N ('.' is not a newline) */
        if (b.c[i] != '\n' && i + 2 < b.len && b.c[i + 1] == '*' && pp__is_digit(b.c[i + 2])) {
            size_t k = i + 2;
            long long times = pp__layout_count(&b, &k);
            if (times < 0) goto bad_count;
            if (pp__ptext_append(out, b.c + i, b.pos + i, 1, times, &oom)) goto too_long;
            i = k;
            continue;
        }
        if (pp__ptext_append(out, b.c + i, b.pos + i, 1, 1, &oom)) goto too_long;
        i++;
    }
    pp__ptext_free(&b);
    if (!out->c) {                                          /* nothing left: one empty stage */
        out->c = (char *)pp__calloc(1, 1);
        out->pos = (int *)pp__calloc(1, sizeof(int));
        if (!out->c || !out->pos) { oom = 1; goto too_long; }
    }
    return PP_OK;
too_long:
    pp__ptext_free(&a); pp__ptext_free(&b); pp__ptext_free(out);
    return pp__layout_too_long(text, oom, err);
bad_count:
    {
        char echo[96];
        pp__ptext_free(&a); pp__ptext_free(&b); pp__ptext_free(out);
        return pp__fail(err, PP_EINVAL, "layout '%s': a repeat count is larger than %d",
                        pp__layers_echo(text, echo, sizeof echo), PP__LAYERS_MAX);
    }
}

static int pp__layout_type(char c)
{
    switch (c) {
    case 'E': return PP_LAYER_EMBEDDING;
    case 't': return PP_LAYER_TRANSFORMER;
    case 'm': return PP_LAYER_MTP;
    case 'L': return PP_LAYER_LOSS;
    default:  return -1;
    }
}

static pp_status pp__layers_from_layout(const pp_layers_config *cfg, int pp, pp_layers **out, pp_error *err)
{
    const char *text = cfg->layout;
    char echo[96], ch[8];
    pp__ptext x;
    pp_layers *l = NULL;
    pp_status st;
    size_t i;
    int stages = 1, vpp, s, t, n_e = 0, n_l = 0, n_t = 0, n_m = 0;
    int first_m = -1, t_after_m = -1, m_stage = -1, m_other = -1, m_early = -1;
    if (cfg->first || cfg->last || cfg->account_for_embedding || cfg->account_for_loss)
        return pp__fail(err, PP_EINVAL, "layout: cannot be set with first=%d, last=%d, account_for_embedding=%d, "
                        "account_for_loss=%d (the layout already says where every layer goes)", cfg->first,
                        cfg->last, cfg->account_for_embedding, cfg->account_for_loss);
    if ((st = pp__layout_expand(text, &x, err)) != PP_OK) return st;
    for (i = 0; i < x.len; i++) {
        if (x.c[i] == '|') { stages++; continue; }
        if (pp__layout_type(x.c[i]) < 0) {
            if (x.c[i] == '(' || x.c[i] == ')' || x.c[i] == '*')   /* left over from step 2 or 3 */
                st = pp__fail(err, PP_EPARSE, "layout '%s': '%s' at position %d is not part of a repeat; a repeated "
                              "group is written '(tt|)*2' (closed, then '*' and a count; groups do not nest), a "
                              "repeated layer 't*3'", pp__layers_echo(text, echo, sizeof echo), pp__layers_char(x.c[i], ch), x.pos[i]);
            else
                st = pp__fail(err, PP_EPARSE, "layout '%s': '%s' at position %d (stage %d) is not a layer; known "
                              "layers are E (embedding), t (decoder), m (MTP), L (loss)",
                              pp__layers_echo(text, echo, sizeof echo), pp__layers_char(x.c[i], ch), x.pos[i],
                              stages - 1);
            pp__ptext_free(&x);
            return st;
        }
    }
    if (stages % pp != 0) {
        pp__ptext_free(&x);
        return pp__fail(err, PP_EINVAL, "layout '%s': %d stages, not a multiple of pp=%d",
                        pp__layers_echo(text, echo, sizeof echo), stages, pp);
    }
    vpp = stages / pp;
    if (cfg->vpp && cfg->vpp != vpp) {
        pp__ptext_free(&x);
        return pp__fail(err, PP_EINVAL, "vpp=%d: conflicts with the layout, whose %d stages over pp=%d make vpp=%d",
                        cfg->vpp, stages, pp, vpp);
    }
    if ((st = pp__layers_check_sizes(pp, vpp, err)) != PP_OK) { pp__ptext_free(&x); return st; }
    l = pp__layers_new(PP_LAYERS_LAYOUT, pp, vpp, (int)x.len);
    if (!l) { pp__ptext_free(&x); return pp__fail(err, PP_ENOMEM, "layout: out of memory"); }
    for (i = 0, s = 0; i < x.len; i++) {
        if (x.c[i] == '|') { l->stage_items[++s] = l->num_items; continue; }
        t = pp__layout_type(x.c[i]);
        if (t == PP_LAYER_MTP) {
            if (first_m < 0) first_m = (int)i;
            if (m_stage < 0) m_stage = s;
            else if (s != m_stage && m_other < 0) m_other = s;
            if (s / pp != vpp - 1 && m_early < 0) m_early = s;
        }
        if (t == PP_LAYER_TRANSFORMER && first_m >= 0 && t_after_m < 0) t_after_m = (int)i;
        n_e += t == PP_LAYER_EMBEDDING; n_l += t == PP_LAYER_LOSS; n_t += t == PP_LAYER_TRANSFORMER;
        n_m += t == PP_LAYER_MTP;
        pp__layers_push(l, t, 1);
    }
    l->stage_items[l->num_stages] = l->num_items;
    /* validate_layer_layout's rules, in its order; the flattened layout is the items in stage order */
    if (l->num_items == 0 || l->item_type[0] != PP_LAYER_EMBEDDING) {
        if (l->num_items == 0)
            st = pp__fail(err, PP_EINVAL, "layout '%s': the first layer must be E (embedding), but the layout has "
                          "no layers", pp__layers_echo(text, echo, sizeof echo));
        else
            st = pp__fail(err, PP_EINVAL, "layout '%s': the first layer must be E (embedding), but it is '%c'",
                          pp__layers_echo(text, echo, sizeof echo), pp__layer_type_chars[l->item_type[0]]);
    } else if (l->item_type[l->num_items - 1] != PP_LAYER_LOSS) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': the last layer must be L (loss), but it is '%c'",
                      pp__layers_echo(text, echo, sizeof echo), pp__layer_type_chars[l->item_type[l->num_items - 1]]);
    } else if (n_e != 1) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': E (embedding) appears %d times; it must appear exactly once",
                      pp__layers_echo(text, echo, sizeof echo), n_e);
    } else if (n_l != 1) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': L (loss) appears %d times; it must appear exactly once",
                      pp__layers_echo(text, echo, sizeof echo), n_l);
    } else if (cfg->num_layers && n_t != cfg->num_layers) {
        st = pp__fail(err, PP_EINVAL, "num_layers=%d: the layout has %d decoder layers (t)", cfg->num_layers, n_t);
    } else if (n_t == 0) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': has no decoder layers (t)", pp__layers_echo(text, echo, sizeof echo));
    } else if (cfg->mtp_layers && n_m != cfg->mtp_layers) {
        st = pp__fail(err, PP_EINVAL, "mtp_layers=%d: the layout has %d MTP layers (m)", cfg->mtp_layers, n_m);
    } else if (t_after_m >= 0) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': decoder layer 't' at position %d comes after the MTP layer at "
                      "position %d; decoder layers must be placed before MTP layers",
                      pp__layers_echo(text, echo, sizeof echo), x.pos[t_after_m], x.pos[first_m]);
    } else if (m_early >= 0) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': MTP layers in stage %d (rank %d, chunk %d); Megatron-LM requires "
                      "them in the last chunk of their rank (chunk %d)", pp__layers_echo(text, echo, sizeof echo),
                      m_early, m_early % pp, m_early / pp, vpp - 1);
    } else if (m_other >= 0) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': MTP layers in stages %d and %d; all %d of them must be in one "
                      "stage", pp__layers_echo(text, echo, sizeof echo), m_stage, m_other, n_m);
    } else {
        st = PP_OK;
    }
    pp__ptext_free(&x);
    if (st == PP_OK) {
        l->mtp_standalone = m_stage >= 0 && m_stage % pp != pp - 1;
        st = pp__layers_finish(l, cfg->moe_layer_freq, err);
    }
    if (st != PP_OK) { pp_layers_free(l); return st; }
    *out = l;
    return pp__ok(err);
}

/* --- hybrid patterns --------------------------------------------------------------------------
 * Megatron-LM's hybrid layer allocation: "<main>/<mtp>/<mtp>..." where every MTP part is the
 * same pattern (one per depth); the main pattern's '|' separate stages (segment index
 * vpp_rank * pp + pp_rank, layer offset = layers of the segments before). Without '|' and
 * pp > 1 the pattern is split at run time like the even / uneven forms, with no vpp.          */

static pp_status pp__layers_from_hybrid(const pp_layers_config *cfg, int pp, pp_layers **out, pp_error *err)
{
    const char *text = cfg->hybrid;
    char echo[96], ch[8];
    size_t n = strlen(text), main_len, i, mtp_len = 0;
    const char *mtp = NULL;
    int segments = 1, L = 0, depths = 0, vpp, s, *count = NULL;
    pp_layers *l;
    pp_status st;
    pp__text pat;
    if (n > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "hybrid pattern: longer than %d characters", PP__LAYERS_MAX);
    if (cfg->layout) return pp__fail(err, PP_EINVAL, "hybrid: cannot be set together with a layout");
    if (cfg->account_for_embedding || cfg->account_for_loss)
        return pp__fail(err, PP_EINVAL, "hybrid pattern: account_for_embedding/loss do not apply; put '|' where the "
                        "stages should break");
    if (cfg->moe_layer_freq)
        return pp__fail(err, PP_EINVAL, "moe_layer_freq: does not apply to a hybrid pattern, whose 'E' marks the "
                        "MoE layers");
    for (main_len = 0; main_len < n && text[main_len] != '/'; main_len++) {}
    for (i = 0; i < main_len; i++) {
        if (text[i] == '|') { segments++; continue; }
        if (pp__hybrid_symbol_type(text[i]) < 0)
            return pp__fail(err, PP_EPARSE, "hybrid pattern '%s': '%s' at position %zu is not a layer symbol "
                            "(M mamba, * attention, - mlp, E moe, G gdn, D dsa, + mla, C csa, H hca, W swa; "
                            "| between stages%s)", pp__layers_echo(text, echo, sizeof echo),
                            pp__layers_char(text[i], ch), i,
                            text[i] == '[' || text[i] == ']' ? "; bracketed layer groups are not supported" : "");
        L++;
    }
    if (main_len < n) {                                     /* MTP parts: all equal, or all empty */
        const char *p = text + main_len + 1, *part = p;
        int parts = 0, any = 0;
        mtp = p;
        mtp_len = strcspn(p, "/");
        for (;;) {
            size_t len = strcspn(part, "/");
            parts++;
            if (len) any = 1;
            if (len != mtp_len || strncmp(part, mtp, len) != 0) {
                char a[48], b[48], ea[96], eb[96];
                snprintf(a, sizeof a, "%.*s", (int)(mtp_len < 40 ? mtp_len : 40), mtp);
                snprintf(b, sizeof b, "%.*s", (int)(len < 40 ? len : 40), part);
                return pp__fail(err, PP_EINVAL, "hybrid pattern '%s': all MTP patterns must be identical; pattern 1 "
                                "is '%s', but pattern %d is '%s'", pp__layers_echo(text, echo, sizeof echo),
                                pp__layers_echo(a, ea, sizeof ea), parts, pp__layers_echo(b, eb, sizeof eb));
            }
            if (part[len] == '\0') break;
            part += len + 1;
        }
        if (any) {
            for (i = 0; i < mtp_len; i++)
                if (pp__hybrid_symbol_type(mtp[i]) < 0)
                    return pp__fail(err, PP_EPARSE, "hybrid pattern '%s': '%s' at position %zu of the MTP pattern is "
                                    "not a layer symbol%s", pp__layers_echo(text, echo, sizeof echo),
                                    pp__layers_char(mtp[i], ch), main_len + 1 + i,
                                    mtp[i] == '|' ? " (stage boundaries belong in the main pattern)" : "");
            depths = parts;
        }
    }
    if (L == 0) return pp__fail(err, PP_EINVAL, "hybrid pattern '%s': has no decoder layers",
                                pp__layers_echo(text, echo, sizeof echo));
    if (cfg->num_layers && cfg->num_layers != L)
        return pp__fail(err, PP_EINVAL, "num_layers=%d: the hybrid pattern has %d layers", cfg->num_layers, L);
    if (cfg->mtp_layers && cfg->mtp_layers != depths)
        return pp__fail(err, PP_EINVAL, "mtp_layers=%d: the hybrid pattern has %d MTP depths", cfg->mtp_layers, depths);
    if (segments > 1) {
        if (cfg->first || cfg->last)
            return pp__fail(err, PP_EINVAL, "first=%d, last=%d: cannot be set when the hybrid pattern has '|' "
                            "separators; they already say where the stages break", cfg->first, cfg->last);
        if (cfg->vpp) {
            if ((long long)cfg->vpp * pp != segments)
                return pp__fail(err, PP_EINVAL, "hybrid pattern '%s': %d '|'-separated segments, but pp=%d x vpp=%d "
                                "needs %lld", pp__layers_echo(text, echo, sizeof echo), segments, pp, cfg->vpp,
                                (long long)pp * cfg->vpp);
            vpp = cfg->vpp;
        } else {
            if (segments % pp != 0)
                return pp__fail(err, PP_EINVAL, "hybrid pattern '%s': %d '|'-separated segments, not a multiple of "
                                "pp=%d", pp__layers_echo(text, echo, sizeof echo), segments, pp);
            vpp = segments / pp;
        }
    } else {
        vpp = cfg->vpp ? cfg->vpp : 1;
        if (vpp > 1 && pp > 1)
            return pp__fail(err, PP_EINVAL, "vpp=%d: a hybrid pattern without '|' separators cannot be interleaved; "
                            "add '|' where the %d stages break", vpp, pp * vpp);
    }
    if ((st = pp__layers_check_sizes(pp, vpp, err)) != PP_OK) return st;
    if (segments == 1) {
        count = (int *)pp__calloc((size_t)pp, sizeof(int));
        if (!count) return pp__fail(err, PP_ENOMEM, "hybrid: out of memory");
        if ((st = pp__layers_split(L, pp, 1, cfg->first, cfg->last, 0, 0, count, err)) != PP_OK) {
            PIPEPAR_FREE(count);
            return st;
        }
    }
    l = pp__layers_new(PP_LAYERS_HYBRID, pp, vpp, L + 2 + depths);
    if (!l) { PIPEPAR_FREE(count); return pp__fail(err, PP_ENOMEM, "hybrid: out of memory"); }
    memset(&pat, 0, sizeof pat);
    {
        size_t at = 0;
        for (s = 0; s < l->num_stages; s++) {
            int k = 0;
            l->stage_items[s] = l->num_items;
            if (s) pp__layers_putc(&pat, '|');
            if (s == 0) pp__layers_push(l, PP_LAYER_EMBEDDING, 1);
            while (at < main_len && (count ? k < count[s] : text[at] != '|')) {
                if (text[at] != '|') {
                    pp__layers_push(l, pp__hybrid_symbol_type(text[at]), 1);
                    pp__layers_putc(&pat, text[at]);
                    k++;
                }
                at++;
            }
            if (!count && at < main_len) at++;              /* the '|' that ends this segment */
            if (s == l->num_stages - 1) {
                pp__layers_push(l, PP_LAYER_MTP, depths);
                pp__layers_push(l, PP_LAYER_LOSS, 1);
            }
        }
        l->stage_items[l->num_stages] = l->num_items;
    }
    for (i = 0; depths && i < (size_t)depths; i++) {
        pp__layers_putc(&pat, '/');
        pp__text_printf(&pat, "%.*s", (int)mtp_len, mtp);
    }
    PIPEPAR_FREE(count);
    if (pat.failed || !pat.data) {
        pp__text_free(&pat);
        pp_layers_free(l);
        return pp__fail(err, PP_ENOMEM, "hybrid: out of memory");
    }
    l->pattern = pat.data;
    if ((st = pp__layers_finish(l, NULL, err)) != PP_OK) { pp_layers_free(l); return st; }
    *out = l;
    return pp__ok(err);
}

/* --- build ------------------------------------------------------------------------------------ */

pp_status pp_layers_build(const pp_layers_config *cfg, pp_layers **out, pp_error *err)
{
    int pp, vpp, *count;
    pp_layers *l;
    pp_status st;
    if (!out) return pp__fail(err, PP_EINVAL, "out: must not be NULL");
    *out = NULL;
    if (!cfg) return pp__fail(err, PP_EINVAL, "cfg: must not be NULL");
    pp = cfg->pp ? cfg->pp : 1;
    if (cfg->pp < 0 || cfg->pp > 65536) return pp__fail(err, PP_EINVAL, "pp=%d: must be between 1 and 65536", cfg->pp);
    if (cfg->vpp < 0 || cfg->vpp > 65536)
        return pp__fail(err, PP_EINVAL, "vpp=%d: must be between 1 and 65536", cfg->vpp);
    if (cfg->num_layers < 0 || cfg->num_layers > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "num_layers=%d: must be between 1 and %d", cfg->num_layers, PP__LAYERS_MAX);
    if (cfg->first < 0) return pp__fail(err, PP_EINVAL, "first=%d: must be at least 1 (0 means not set)", cfg->first);
    if (cfg->last < 0) return pp__fail(err, PP_EINVAL, "last=%d: must be at least 1 (0 means not set)", cfg->last);
    if (cfg->mtp_layers < 0 || cfg->mtp_layers > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "mtp_layers=%d: must be between 0 and %d", cfg->mtp_layers, PP__LAYERS_MAX);
    if (cfg->layout && cfg->hybrid)
        return pp__fail(err, PP_EINVAL, "layout and hybrid: give one of them, not both");
    if (cfg->layout) return pp__layers_from_layout(cfg, pp, out, err);
    if (cfg->hybrid) return pp__layers_from_hybrid(cfg, pp, out, err);

    vpp = cfg->vpp ? cfg->vpp : 1;
    if (cfg->num_layers < 1)
        return pp__fail(err, PP_EINVAL, "num_layers=%d: must be at least 1 (or give a layout or hybrid pattern)",
                        cfg->num_layers);
    if ((st = pp__layers_check_sizes(pp, vpp, err)) != PP_OK) return st;
    count = (int *)pp__calloc((size_t)pp * vpp, sizeof(int));
    if (!count) return pp__fail(err, PP_ENOMEM, "layers: out of memory");
    st = pp__layers_split(cfg->num_layers, pp, vpp, cfg->first, cfg->last, cfg->account_for_embedding != 0,
                          cfg->account_for_loss != 0, count, err);
    if (st != PP_OK) { PIPEPAR_FREE(count); return st; }
    l = pp__layers_new(cfg->first || cfg->last ? PP_LAYERS_UNEVEN : PP_LAYERS_EVEN, pp, vpp,
                       cfg->num_layers + 2 + cfg->mtp_layers);
    if (!l) { PIPEPAR_FREE(count); return pp__fail(err, PP_ENOMEM, "layers: out of memory"); }
    pp__layers_fill_counts(l, count, cfg->mtp_layers);
    PIPEPAR_FREE(count);
    if ((st = pp__layers_finish(l, cfg->moe_layer_freq, err)) != PP_OK) { pp_layers_free(l); return st; }
    *out = l;
    return pp__ok(err);
}

/* --- queries ---------------------------------------------------------------------------------- */

int pp_layers_stage(const pp_layers *l, int rank, int chunk)
{
    if (!l || rank < 0 || rank >= l->pp || chunk < 0 || chunk >= l->vpp) return -1;
    return chunk * l->pp + rank;
}

pp_status pp_layers_stage_range(const pp_layers *l, int stage, int *first, int *count, pp_error *err)
{
    return pp_layers_type_range(l, stage, PP_LAYER_DECODER, first, count, err);
}

pp_status pp_layers_type_range(const pp_layers *l, int stage, pp_layer_type type, int *first, int *count,
                               pp_error *err)
{
    if (!l) return pp__fail(err, PP_EINVAL, "layers: must not be NULL");
    if (stage < 0 || stage >= l->num_stages)
        return pp__fail(err, PP_EINVAL, "stage=%d: must be between 0 and %d", stage, l->num_stages - 1);
    if ((int)type < 0 || type >= PP_LAYER_TYPE_COUNT)
        return pp__fail(err, PP_EINVAL, "type=%d: not a pp_layer_type", (int)type);
    if (first) *first = l->type_first[stage * PP_LAYER_TYPE_COUNT + type];
    if (count) *count = l->type_count[stage * PP_LAYER_TYPE_COUNT + type];
    return pp__ok(err);
}

int pp_layers_layer_stage(const pp_layers *l, int layer)
{
    int lo = 0, hi;
    if (!l || layer < 0 || layer >= l->num_layers) return -1;
    hi = l->num_stages - 1;
    while (lo < hi) {                       /* the last stage whose first layer is <= layer */
        int mid = lo + (hi - lo + 1) / 2;
        if (l->first[mid] <= layer) lo = mid; else hi = mid - 1;
    }
    return lo;
}

int pp_layers_type_index(const pp_layers *l, int layer, pp_layer_type type)
{
    int s, g, idx;
    if (!l || layer < 0 || layer >= l->num_layers || (int)type < 0 || type >= PP_LAYER_TYPE_COUNT) return -1;
    if (!pp__layer_matches(l->layer_type[layer], l->is_moe[layer], type)) return -1;
    s = pp_layers_layer_stage(l, layer);
    idx = l->type_first[s * PP_LAYER_TYPE_COUNT + type];
    for (g = l->first[s]; g < layer; g++) idx += pp__layer_matches(l->layer_type[g], l->is_moe[g], type);
    return idx;
}

int pp_layers_rank(const pp_layers *l, int stage)
{
    if (!l || stage < 0 || stage >= l->num_stages) return -1;
    return l->v_placement ? (stage < l->pp ? stage : 2 * l->pp - 1 - stage) : stage % l->pp;
}

int pp_layers_stage_text(const pp_layers *l, int stage, char *buf, size_t size)
{
    pp__text t;
    int n;
    if (!l || stage < 0 || stage >= l->num_stages) return -1;
    memset(&t, 0, sizeof t);
    pp__layers_stage_spell(l, stage, &t);
    if (t.failed) { pp__text_free(&t); return -1; }
    n = (int)t.len;
    if (buf && size) snprintf(buf, size, "%s", t.data ? t.data : "");
    pp__text_free(&t);
    return n;
}

/* --- text and JSON ---------------------------------------------------------------------------- */

/* The types a listing shows beside the decoder range: those the model has, minus the obvious. */
static int pp__layers_shows_type(const pp_layers *l, int t)
{
    int s, total = 0, moe = 0;
    if (t == PP_LAYER_DECODER || t == PP_LAYER_EMBEDDING || t == PP_LAYER_LOSS || t == PP_LAYER_TRANSFORMER)
        return 0;
    for (s = 0; s < l->num_stages; s++) {
        total += l->type_count[s * PP_LAYER_TYPE_COUNT + t];
        moe += l->type_count[s * PP_LAYER_TYPE_COUNT + PP_LAYER_MOE];
    }
    if (t == PP_LAYER_DENSE) return moe > 0 && l->form != PP_LAYERS_HYBRID;
    return total > 0;
}

pp_status pp_layers_write_text(const pp_layers *l, FILE *out, pp_error *err)
{
    pp__text t;
    int s, k, shows[PP_LAYER_TYPE_COUNT];
    if (!l || !out) return pp__fail(err, PP_EINVAL, "layers, out: must not be NULL");
    memset(&t, 0, sizeof t);
    for (k = 0; k < PP_LAYER_TYPE_COUNT; k++) shows[k] = pp__layers_shows_type(l, k);   /* once: linear in stages */
    for (s = 0; s < l->num_stages; s++) {
        t.len = 0; pp__layers_putc(&t, '\0'); t.len = 0;
        pp__layers_stage_spell(l, s, &t);
        if (t.failed) { pp__text_free(&t); return pp__fail(err, PP_ENOMEM, "write: out of memory"); }
        fprintf(out, "stage %d rank %d chunk %d layers [%d,%d) items %s", s, pp_layers_rank(l, s), s / l->pp, l->first[s],
                l->first[s] + l->count[s], t.len ? t.data : "(none)");
        for (k = 0; k < PP_LAYER_TYPE_COUNT; k++) {
            int a = l->type_first[s * PP_LAYER_TYPE_COUNT + k];
            if (shows[k])
                fprintf(out, " %s [%d,%d)", pp__layer_type_names[k], a, a + l->type_count[s * PP_LAYER_TYPE_COUNT + k]);
        }
        if (l->stage_cost) fprintf(out, " cost %.9g", l->stage_cost[s]);
        if (l->stage_memory) fprintf(out, " memory %.9g", l->stage_memory[s]);
        fputc('\n', out);
    }
    pp__text_free(&t);
    if (l->form == PP_LAYERS_BALANCED) {   /* the largest stage, then each rank's time (its speed's) */
        double most = 0;
        for (s = 0; s < l->num_stages; s++) if (l->stage_cost[s] > most) most = l->stage_cost[s];
        fprintf(out, "max stage cost %.9g\nrank time", most);
        for (k = 0; k < l->pp; k++) fprintf(out, " %.9g", l->rank_time[k]);
        fputc('\n', out);
    }
    if (l->layout) fprintf(out, "layout %s\n", l->layout);
    if (l->pattern) fprintf(out, "pattern %s\n", l->pattern);
    return ferror(out) ? pp__fail(err, PP_EIO, "write: output error") : pp__ok(err);
}

pp_status pp_layers_write_json(const pp_layers *l, FILE *out, pp_error *err)
{
    pp__text t;
    int s, k, any[PP_LAYER_TYPE_COUNT];   /* a type with layers on some stage: listed on every stage */
    if (!l || !out) return pp__fail(err, PP_EINVAL, "layers, out: must not be NULL");
    memset(&t, 0, sizeof t);
    for (k = 0; k < PP_LAYER_TYPE_COUNT; k++)
        for (any[k] = 0, s = 0; s < l->num_stages && !any[k]; s++) any[k] = l->type_count[s * PP_LAYER_TYPE_COUNT + k] > 0;
    /* Strings here are layout letters and hybrid symbols: nothing JSON must escape. */
    fprintf(out, "{\"form\":\"%s\",\"pp\":%d,\"vpp\":%d,\"num_stages\":%d,\"num_layers\":%d,\"mtp_layers\":%d,"
            "\"mtp_standalone\":%s", pp_layers_form_name(l->form), l->pp, l->vpp, l->num_stages, l->num_layers,
            l->mtp_layers, l->mtp_standalone ? "true" : "false");
    if (l->layout) fprintf(out, ",\"layout\":\"%s\"", l->layout);
    if (l->pattern) fprintf(out, ",\"pattern\":\"%s\"", l->pattern);
    if (l->form == PP_LAYERS_BALANCED) {
        fprintf(out, ",\"max_cost\":%.17g,\"v_placement\":%s,\"rank_time\":[", l->max_cost,
                l->v_placement ? "true" : "false");
        for (k = 0; k < l->pp; k++) fprintf(out, k ? ",%.17g" : "%.17g", l->rank_time[k]);
        fputc(']', out);
    }
    fprintf(out, ",\"is_moe\":[");
    for (k = 0; k < l->num_layers; k++) fprintf(out, k ? ",%d" : "%d", l->is_moe[k]);
    fprintf(out, "],\"stages\":[");
    for (s = 0; s < l->num_stages; s++) {
        int shown = 0;
        t.len = 0; pp__layers_putc(&t, '\0'); t.len = 0;
        pp__layers_stage_spell(l, s, &t);
        if (t.failed) { pp__text_free(&t); return pp__fail(err, PP_ENOMEM, "write: out of memory"); }
        fprintf(out, "%s{\"stage\":%d,\"rank\":%d,\"chunk\":%d,\"first\":%d,\"count\":%d,\"items\":\"%s\"",
                s ? "," : "", s, pp_layers_rank(l, s), s / l->pp, l->first[s], l->count[s], t.len ? t.data : "");
        if (l->stage_cost) fprintf(out, ",\"cost\":%.17g", l->stage_cost[s]);
        if (l->stage_memory) fprintf(out, ",\"memory\":%.17g", l->stage_memory[s]);
        fprintf(out, ",\"types\":{");
        for (k = 0; k < PP_LAYER_TYPE_COUNT; k++) {
            int a = l->type_first[s * PP_LAYER_TYPE_COUNT + k], c = l->type_count[s * PP_LAYER_TYPE_COUNT + k];
            if (!any[k]) continue;
            fprintf(out, "%s\"%s\":{\"first\":%d,\"count\":%d}", shown++ ? "," : "", pp__layer_type_names[k], a, c);
        }
        fprintf(out, "}}");
    }
    fprintf(out, "]}\n");
    pp__text_free(&t);
    return ferror(out) ? pp__fail(err, PP_EIO, "write: output error") : pp__ok(err);
}

/* --- balanced split ----------------------------------------------------------------------------
 * Stage s covers decoder layers [i, j). Its cost is summed in one fixed order,
 *     ((front + c[i] + c[i+1] + ... + c[j-1]) + back)
 * with front = the embedding's cost on stage 0 and back = the MTP depths' and the loss's on the
 * last stage, and every place below sums the same way, so the reported bottleneck is the very
 * number the search minimised (exact for doubles, not only for integers). With rank speeds a
 * stage's time is that cost / the speed of its rank (a division by 1 changes no bit).
 *   1. best[s][j] = min over i of max(best[s-1][i], time(s, i, j)): the smallest bottleneck B
 *      of any split of the first j layers into stages 0..s (memory cap respected).
 *   2. among the splits with every stage time <= B, the least sum of squared stage times
 *      (a tie-break that spreads the slack), remembered with parent pointers.
 *   3. with rank speeds and vpp > 1: a rank's time is the sum of its stages', which step 1 does
 *      not see; from step 2's split, the move of one layer between two stages (the stages in
 *      between shift by a layer) that lowers (slowest rank's time, sum of squared rank times)
 *      most, while one does (pp__balance_refine).                                            */

static int pp__finite_nonneg(double x) { return x == x && x >= 0 && x <= DBL_MAX; }

/* One pp_layers_balance call's inputs, checked, with the defaults applied. */
typedef struct pp__balance {
    int pp, vpp, S, n;
    double *c;                  /* [n] layer costs (1 each without cfg->cost) */
    const double *m;            /* [n] layer memory, or NULL */
    double cap, front_c, back_c, front_m, back_m;
    const double *speed;        /* cfg->rank_speed, or NULL */
    double *spd;                /* [S] the speed of each stage's rank (1 without speeds) */
    int *rank_of;               /* [S] the rank that holds each stage */
} pp__balance;

static void pp__balance_free(pp__balance *b)
{
    PIPEPAR_FREE(b->c); PIPEPAR_FREE(b->spd); PIPEPAR_FREE(b->rank_of);
}

/* The checks of cfg (each bad value named with its rule) and the context they leave. */
static pp_status pp__balance_init(const pp_balance_config *cfg, pp__balance *b, pp_error *err)
{
    static const char *const names[7] = { "memory_cap", "embedding_cost", "embedding_memory", "loss_cost",
                                          "loss_memory", "mtp_cost", "mtp_memory" };
    double vals[7];
    int i, k, s;
    pp_status st;
    memset(b, 0, sizeof *b);
    b->pp = cfg->pp ? cfg->pp : 1;
    b->vpp = cfg->vpp ? cfg->vpp : 1;
    b->n = cfg->num_layers;
    if (cfg->pp < 0) return pp__fail(err, PP_EINVAL, "pp=%d: must be between 1 and 65536", cfg->pp);
    if (cfg->vpp < 0) return pp__fail(err, PP_EINVAL, "vpp=%d: must be between 1 and 65536", cfg->vpp);
    if ((st = pp__layers_check_sizes(b->pp, b->vpp, err)) != PP_OK) return st;
    b->S = b->pp * b->vpp;
    if (b->n < 1 || b->n > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "num_layers=%d: must be between 1 and %d", b->n, PP__LAYERS_MAX);
    if (cfg->mtp_layers < 0 || cfg->mtp_layers > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "mtp_layers=%d: must be between 0 and %d", cfg->mtp_layers, PP__LAYERS_MAX);
    if ((double)b->S * (b->n + 1.0) > (double)(1 << 24) || (double)b->S * (b->n + 1.0) * (b->n + 2.0) / 2 > 2e9)
        return pp__fail(err, PP_EINVAL, "num_layers=%d, stages=%d: too large for the exact search (it takes "
                        "stages * num_layers^2 / 2 steps); group layers into coarser blocks", b->n, b->S);
    if (cfg->cost)
        for (i = 0; i < b->n; i++)
            if (!pp__finite_nonneg(cfg->cost[i]))
                return pp__fail(err, PP_EINVAL, "cost[%d]=%g: must be a finite number >= 0", i, cfg->cost[i]);
    if (cfg->memory)
        for (i = 0; i < b->n; i++)
            if (!pp__finite_nonneg(cfg->memory[i]))
                return pp__fail(err, PP_EINVAL, "memory[%d]=%g: must be a finite number >= 0", i, cfg->memory[i]);
    vals[0] = cfg->memory_cap; vals[1] = cfg->embedding_cost; vals[2] = cfg->embedding_memory;
    vals[3] = cfg->loss_cost; vals[4] = cfg->loss_memory; vals[5] = cfg->mtp_cost; vals[6] = cfg->mtp_memory;
    for (k = 0; k < 7; k++)
        if (!pp__finite_nonneg(vals[k]))
            return pp__fail(err, PP_EINVAL, "%s=%g: must be a finite number >= 0", names[k], vals[k]);
    if (cfg->rank_speed)
        for (k = 0; k < b->pp; k++)
            if (!(cfg->rank_speed[k] >= PP__SPEED_MIN && cfg->rank_speed[k] <= PP__SPEED_MAX))
                return pp__fail(err, PP_EINVAL, "rank_speed[%d]=%g: must be a finite number > 0, from %g to %g", k,
                                cfg->rank_speed[k], PP__SPEED_MIN, PP__SPEED_MAX);
    if (cfg->v_placement && b->vpp != 2)
        return pp__fail(err, PP_EINVAL, "v_placement=%d: the V placement holds 2 stages a rank, but vpp=%d",
                        cfg->v_placement, b->vpp);
    b->cap = cfg->memory_cap;
    b->m = cfg->memory;
    if (b->cap > 0 && !b->m)
        return pp__fail(err, PP_EINVAL, "memory_cap=%g: needs the per-layer memory", b->cap);
    b->front_c = cfg->embedding_cost;
    for (k = 0; k < cfg->mtp_layers; k++) b->back_c += cfg->mtp_cost;
    b->back_c += cfg->loss_cost;
    if (b->m) {
        b->front_m = cfg->embedding_memory;
        for (k = 0; k < cfg->mtp_layers; k++) b->back_m += cfg->mtp_memory;
        b->back_m += cfg->loss_memory;
    }
    if (b->cap > 0) {                      /* infeasible caps get a reason, not just "no split" */
        int need = 1;
        double acc = b->front_m;
        if (b->front_m > b->cap)
            return pp__fail(err, PP_EINVAL, "memory_cap=%g: the embedding alone needs %g", b->cap, b->front_m);
        if (b->back_m > b->cap)
            return pp__fail(err, PP_EINVAL, "memory_cap=%g: the loss and MTP layers alone need %g", b->cap, b->back_m);
        for (i = 0; i < b->n; i++) {
            if (b->m[i] > b->cap)
                return pp__fail(err, PP_EINVAL, "memory_cap=%g: layer %d alone needs %g", b->cap, i, b->m[i]);
            if (acc + b->m[i] <= b->cap) acc += b->m[i];
            else { need++; acc = b->m[i]; }
        }
        if (acc + b->back_m > b->cap) need++;
        if (need > b->S)
            return pp__fail(err, PP_EINVAL, "memory_cap=%g: the layers need at least %d stages under this cap, but "
                            "pp*vpp = %d", b->cap, need, b->S);
    }
    b->c = (double *)pp__calloc((size_t)b->n, sizeof(double));
    b->spd = (double *)pp__calloc((size_t)b->S, sizeof(double));
    b->rank_of = (int *)pp__calloc((size_t)b->S, sizeof(int));
    if (!b->c || !b->spd || !b->rank_of) return pp__fail(err, PP_ENOMEM, "balance: out of memory");
    for (i = 0; i < b->n; i++) b->c[i] = cfg->cost ? cfg->cost[i] : 1.0;
    b->speed = cfg->rank_speed;
    for (s = 0; s < b->S; s++) {
        b->rank_of[s] = cfg->v_placement ? (s < b->pp ? s : 2 * b->pp - 1 - s) : s % b->pp;
        b->spd[s] = b->speed ? b->speed[b->rank_of[s]] : 1.0;
    }
    return PP_OK;
}

/* Steps 1 and 2: count[S] gets the split whose slowest stage time is the least, and among those
 * the least sum of squared stage times. */
static pp_status pp__balance_stages(const pp__balance *b, int *count, pp_error *err)
{
    const int S = b->S, n = b->n;
    const double *c = b->c, *m = b->m, cap = b->cap;
    double *prev, *cur, B, unit;
    int *parent, s, i, j;
    pp_status st = PP_OK;
    prev = (double *)pp__calloc((size_t)n + 1, sizeof(double));
    cur = (double *)pp__calloc((size_t)n + 1, sizeof(double));
    parent = (int *)pp__calloc((size_t)S * (n + 1), sizeof(int));
    if (!prev || !cur || !parent) { st = pp__fail(err, PP_ENOMEM, "balance: out of memory"); goto done; }

    /* 1. the smallest bottleneck */
    for (s = 0; s < S; s++) {
        int last = s == S - 1;
        for (j = 0; j <= n; j++) cur[j] = HUGE_VAL;
        for (i = 0; i <= (s == 0 ? 0 : n); i++) {
            double p = s == 0 ? 0 : prev[i], acc = s == 0 ? b->front_c : 0, accm = s == 0 ? b->front_m : 0;
            if (p == HUGE_VAL) continue;
            for (j = i; j <= n; j++) {
                if (j > i) { acc += c[j - 1]; if (m) accm += m[j - 1]; }
                if (cap > 0 && accm > cap) break;
                if (!last || j == n) {
                    double sc = (last ? acc + b->back_c : acc) / b->spd[s], v;
                    if (last && cap > 0 && accm + b->back_m > cap) break;
                    v = p > sc ? p : sc;
                    if (v < cur[j]) cur[j] = v;
                }
            }
        }
        { double *t = prev; prev = cur; cur = t; }
    }
    B = prev[n];
    if (B == HUGE_VAL) { st = pp__fail(err, PP_EINVAL, "memory_cap=%g: no split fits under the cap", cap); goto done; }

    /* 2. among splits with bottleneck B, the least sum of squares */
    unit = B > 0 ? B : 1;
    for (s = 0; s < S; s++) {
        int last = s == S - 1;
        for (j = 0; j <= n; j++) { cur[j] = HUGE_VAL; parent[(size_t)s * (n + 1) + j] = -1; }
        for (i = 0; i <= (s == 0 ? 0 : n); i++) {
            double p = s == 0 ? 0 : prev[i], acc = s == 0 ? b->front_c : 0, accm = s == 0 ? b->front_m : 0;
            if (p == HUGE_VAL) continue;
            for (j = i; j <= n; j++) {
                if (j > i) { acc += c[j - 1]; if (m) accm += m[j - 1]; }
                if ((cap > 0 && accm > cap) || acc / b->spd[s] > B) break;
                if (!last || j == n) {
                    double sc = (last ? acc + b->back_c : acc) / b->spd[s], v;
                    if (sc > B || (last && cap > 0 && accm + b->back_m > cap)) break;
                    v = p + (sc / unit) * (sc / unit);   /* in units of B: huge costs square to no infinity */
                    if (v < cur[j] || parent[(size_t)s * (n + 1) + j] < 0) { cur[j] = v; parent[(size_t)s * (n + 1) + j] = i; }
                }
            }
        }
        { double *t = prev; prev = cur; cur = t; }
    }
    for (j = n, s = S - 1; s >= 0; s--) {
        i = parent[(size_t)s * (n + 1) + j];
        if (i < 0) { st = pp__fail(err, PP_EINVAL, "balance: internal error (no split reaches %g)", B); goto done; }
        count[s] = j - i;
        j = i;
    }
done:
    PIPEPAR_FREE(prev); PIPEPAR_FREE(cur); PIPEPAR_FREE(parent);
    return st;
}

/* Each stage's cost and memory for the split count[S], summed in the fixed order above, and each
 * rank's time (its stages' costs in stage order, / its speed). Returns the slowest rank's time;
 * *sumsq (may be NULL) gets the sum of squared rank times; *fits whether every stage is under
 * the memory cap. */
static double pp__balance_eval(const pp__balance *b, const int *count, double *stage_cost, double *stage_mem,
                               double *rank_time, double *sumsq, int *fits)
{
    int s, k, j = 0, r;
    double worst = 0, sq = 0;
    *fits = 1;
    for (r = 0; r < b->pp; r++) rank_time[r] = 0;
    for (s = 0; s < b->S; s++) {
        double acc = s == 0 ? b->front_c : 0, accm = s == 0 ? b->front_m : 0;
        for (k = 0; k < count[s]; k++, j++) { acc += b->c[j]; if (b->m) accm += b->m[j]; }
        if (s == b->S - 1) { acc += b->back_c; accm += b->back_m; }
        stage_cost[s] = acc;
        if (stage_mem) stage_mem[s] = accm;
        if (b->cap > 0 && accm > b->cap) *fits = 0;
        rank_time[b->rank_of[s]] += acc;
    }
    for (r = 0; r < b->pp; r++) {
        if (b->speed) rank_time[r] /= b->speed[r];
        if (rank_time[r] > worst) worst = rank_time[r];
        sq += rank_time[r] * rank_time[r];
    }
    if (sumsq) *sumsq = sq;
    return worst;
}

/* Step 3: one-layer moves between any two stages while the slowest rank's time (then the sum of
 * squared rank times) falls. The objective falls strictly each round, so it ends. */
static pp_status pp__balance_refine(const pp__balance *b, int *count, pp_error *err)
{
    double *sc = (double *)pp__calloc((size_t)b->S, sizeof(double));
    double *rt = (double *)pp__calloc((size_t)b->pp, sizeof(double));
    double worst, sq, w2, sq2;
    int fits, a, z, best_a, best_z;
    if (!sc || !rt) { PIPEPAR_FREE(sc); PIPEPAR_FREE(rt); return pp__fail(err, PP_ENOMEM, "balance: out of memory"); }
    worst = pp__balance_eval(b, count, sc, NULL, rt, &sq, &fits);
    for (;;) {
        double bw = worst, bs = sq;
        best_a = best_z = -1;
        for (a = 0; a < b->S; a++)
            for (z = 0; z < b->S; z++) {
                if (a == z || count[a] == 0) continue;
                count[a]--; count[z]++;
                w2 = pp__balance_eval(b, count, sc, NULL, rt, &sq2, &fits);
                count[a]++; count[z]--;
                if (fits && (w2 < bw || (w2 == bw && sq2 < bs))) { bw = w2; bs = sq2; best_a = a; best_z = z; }
            }
        if (best_a < 0) break;
        count[best_a]--; count[best_z]++;
        worst = bw; sq = bs;
    }
    PIPEPAR_FREE(sc); PIPEPAR_FREE(rt);
    return PP_OK;
}

/* A balanced split of a hybrid pattern's symbols: the items and the pattern with '|' between stages. */
static pp_status pp__balance_hybrid_items(pp_layers *l, const char *hybrid, const int *count, pp_error *err)
{
    pp__text pat;
    int s, k, at = 0;
    memset(&pat, 0, sizeof pat);
    for (s = 0; s < l->num_stages; s++) {
        l->stage_items[s] = l->num_items;
        if (s) pp__layers_putc(&pat, '|');
        if (s == 0) pp__layers_push(l, PP_LAYER_EMBEDDING, 1);
        for (k = 0; k < count[s]; k++, at++) {
            pp__layers_push(l, pp__hybrid_symbol_type(hybrid[at]), 1);
            pp__layers_putc(&pat, hybrid[at]);
        }
        if (s == l->num_stages - 1) pp__layers_push(l, PP_LAYER_LOSS, 1);
    }
    l->stage_items[l->num_stages] = l->num_items;
    if (pat.failed || !pat.data) { pp__text_free(&pat); return pp__fail(err, PP_ENOMEM, "balance: out of memory"); }
    l->pattern = pat.data;
    return PP_OK;
}

pp_status pp_layers_balance(const pp_balance_config *cfg, pp_layers **out, pp_error *err)
{
    pp__balance b;
    pp_balance_config hc;
    pp_layers *l = NULL;
    int *count = NULL, s, fits;
    double worst;
    pp_status st;
    if (!out) return pp__fail(err, PP_EINVAL, "out: must not be NULL");
    *out = NULL;
    if (!cfg) return pp__fail(err, PP_EINVAL, "cfg: must not be NULL");
    if (cfg->hybrid) {                  /* the pattern's symbols are the layers */
        char echo[96], ch[8];
        size_t i, n = strlen(cfg->hybrid);
        for (i = 0; i < n; i++)
            if (pp__hybrid_symbol_type(cfg->hybrid[i]) < 0)
                return pp__fail(err, PP_EPARSE, "hybrid='%s': '%s' at position %zu is not a layer symbol%s",
                                pp__layers_echo(cfg->hybrid, echo, sizeof echo), pp__layers_char(cfg->hybrid[i], ch), i,
                                cfg->hybrid[i] == '|' || cfg->hybrid[i] == '/'
                                    ? " (the balance places the stage breaks; MTP depths are mtp_layers)" : "");
        if (n == 0 || n > PP__LAYERS_MAX)
            return pp__fail(err, PP_EINVAL, "hybrid='%s': has %zu layers, must have 1 to %d",
                            pp__layers_echo(cfg->hybrid, echo, sizeof echo), n, PP__LAYERS_MAX);
        if (cfg->num_layers && (size_t)cfg->num_layers != n)
            return pp__fail(err, PP_EINVAL, "num_layers=%d: the hybrid pattern has %zu layers", cfg->num_layers, n);
        if (cfg->moe_layer_freq)
            return pp__fail(err, PP_EINVAL, "moe_layer_freq='%s': a hybrid pattern marks its MoE layers itself ('E')",
                            cfg->moe_layer_freq);
        if (cfg->mtp_layers)
            return pp__fail(err, PP_EINVAL, "mtp_layers=%d: not with a hybrid pattern", cfg->mtp_layers);
        hc = *cfg;
        hc.num_layers = (int)n;
        cfg = &hc;
    }
    if ((st = pp__balance_init(cfg, &b, err)) != PP_OK) goto done;
    count = (int *)pp__calloc((size_t)b.S, sizeof(int));
    if (!count) { st = pp__fail(err, PP_ENOMEM, "balance: out of memory"); goto done; }
    if ((st = pp__balance_stages(&b, count, err)) != PP_OK) goto done;
    if (b.speed && b.vpp > 1 && (st = pp__balance_refine(&b, count, err)) != PP_OK) goto done;

    l = pp__layers_new(PP_LAYERS_BALANCED, b.pp, b.vpp, b.n + 2 + cfg->mtp_layers);
    if (!l) { st = pp__fail(err, PP_ENOMEM, "balance: out of memory"); goto done; }
    if (!cfg->hybrid) pp__layers_fill_counts(l, count, cfg->mtp_layers);
    else if ((st = pp__balance_hybrid_items(l, cfg->hybrid, count, err)) != PP_OK) goto done;
    l->stage_cost = (double *)pp__calloc((size_t)b.S, sizeof(double));
    l->stage_memory = b.m ? (double *)pp__calloc((size_t)b.S, sizeof(double)) : NULL;
    l->rank_time = (double *)pp__calloc((size_t)b.pp, sizeof(double));
    if (!l->stage_cost || (b.m && !l->stage_memory) || !l->rank_time) {
        st = pp__fail(err, PP_ENOMEM, "balance: out of memory");
        goto done;
    }
    l->v_placement = cfg->v_placement != 0;
    worst = pp__balance_eval(&b, count, l->stage_cost, l->stage_memory, l->rank_time, NULL, &fits);
    if (b.speed) l->max_cost = worst;      /* the slowest rank's time */
    else
        for (s = 0; s < b.S; s++)
            if (l->stage_cost[s] > l->max_cost) l->max_cost = l->stage_cost[s];
    if ((st = pp__layers_finish(l, cfg->moe_layer_freq, err)) != PP_OK) goto done;
    *out = l;
    l = NULL;
    st = pp__ok(err);
done:
    pp_layers_free(l);
    pp__balance_free(&b);
    PIPEPAR_FREE(count);
    return st;
}


/* ============================================================================================
 * >>schedule (implementation)
 * ============================================================================================ */

static const char *const pp__kind_names[PP_KIND_COUNT] = {
    "none", "gpipe", "1f1b", "interleaved", "looped-bfs", "zb-h1", "zb-h2", "zbv",
    "dualpipev", "interleaved-zb", "dualpipe", "custom"
};

const char *pp_schedule_kind_name(pp_schedule_kind kind)
{
    return (kind >= 0 && kind < PP_KIND_COUNT) ? pp__kind_names[kind] : "unknown";
}

pp_status pp_schedule_kind_parse(const char *name, pp_schedule_kind *kind, pp_error *err)
{
    int k;
    if (!name) return pp__fail(err, PP_EINVAL, "kind: missing");
    for (k = 1; k < PP_KIND_COUNT; k++)
        if (strcmp(name, pp__kind_names[k]) == 0) { *kind = (pp_schedule_kind)k; return pp__ok(err); }
    return pp__fail(err, PP_EINVAL,
                    "kind '%.64s%s': unknown (one of gpipe, 1f1b, interleaved, looped-bfs, zb-h1, zb-h2, "
                    "zbv, dualpipev, interleaved-zb, dualpipe)", name, strlen(name) > 64 ? "..." : "");
}

const char *pp_op_name(pp_op op)
{
    static const char *const names[PP_OP_COUNT] = {
        "F", "B", "I", "W", "FB", "SEND_F", "RECV_F", "SEND_B", "RECV_B"
    };
    return (op >= 0 && op < PP_OP_COUNT) ? names[op] : "?";
}

static int pp__is_comm(int op) { return op >= PP_OP_SEND_F && op <= PP_OP_RECV_B; }

static pp_action pp__action(int op, int stage, int mb)
{
    pp_action a;
    a.op = op; a.stage = stage; a.mb = mb; a.stage2 = -1; a.mb2 = -1; a.group = 0;
    return a;
}

static pp_status pp__lower(pp_schedule *s, unsigned char *stuck_on_backward, pp_error *err);

/* --- create / append / free -------------------------------------------------------------- */

pp_status pp_schedule_create(int pp, int vpp, int mb, pp_placement placement, pp_schedule **out,
                             pp_error *err)
{
    pp_schedule *s;
    if (!out) return pp__fail(err, PP_EINVAL, "out: must not be NULL");
    *out = NULL;
    if (pp < 1 || pp > 65536) return pp__fail(err, PP_EINVAL, "pp=%d: must be between 1 and 65536", pp);
    if (vpp < 1 || vpp > 1024) return pp__fail(err, PP_EINVAL, "vpp=%d: must be between 1 and 1024", vpp);
    if (mb < 1 || mb > (1 << 24)) return pp__fail(err, PP_EINVAL, "mb=%d: must be between 1 and %d", mb, 1 << 24);
    if ((long long)pp * vpp > (1 << 20))
        return pp__fail(err, PP_EINVAL, "pp*vpp=%lld: at most %d stages", (long long)pp * vpp, 1 << 20);
    /* A schedule holds two compute actions per (stage, microbatch) and about as many transfers;
     * the cap keeps a schedule and its proof within about half a gigabyte. */
    if ((long long)pp * vpp * mb > PP_MAX_STAGE_MICROBATCHES)
        return pp__fail(err, PP_EINVAL, "pp*vpp*mb=%lld: at most %d (stage, microbatch) pairs in one schedule",
                        (long long)pp * vpp * mb, PP_MAX_STAGE_MICROBATCHES);
    if (placement == PP_PLACEMENT_V && vpp != 2)
        return pp__fail(err, PP_EINVAL, "vpp=%d: a V-shaped placement has exactly 2 chunks per rank", vpp);
    if (placement == PP_PLACEMENT_DUAL) {
        /* DualPipe: one down and one up stage per rank, half the microbatches each way */
        if (vpp != 2)
            return pp__fail(err, PP_EINVAL, "vpp=%d: the bidirectional (DualPipe) placement has exactly 2 chunks "
                            "per rank", vpp);
        if (pp % 2 != 0)
            return pp__fail(err, PP_EINVAL, "pp=%d: the bidirectional (DualPipe) placement needs an even pp (rank r "
                            "pairs with rank pp-1-r)", pp);
        if (mb % 2 != 0)
            return pp__fail(err, PP_EINVAL, "mb=%d: the bidirectional (DualPipe) placement needs an even mb (half "
                            "the microbatches run each way)", mb);
    }
    if (placement != PP_PLACEMENT_LOOPED && placement != PP_PLACEMENT_V && placement != PP_PLACEMENT_DUAL)
        return pp__fail(err, PP_EINVAL, "placement=%d: unknown", (int)placement);
    s = (pp_schedule *)pp__calloc(1, sizeof *s);
    if (!s) return pp__fail(err, PP_ENOMEM, "out of memory");
    s->kind = PP_CUSTOM;
    s->placement = placement;
    s->pp = pp; s->vpp = vpp; s->mb = mb; s->group = pp;
    s->num_stages = pp * vpp;
    s->length = (int *)pp__calloc((size_t)pp, sizeof(int));
    s->capacity = (int *)pp__calloc((size_t)pp, sizeof(int));
    s->actions = (pp_action **)pp__calloc((size_t)pp, sizeof(pp_action *));
    if (!s->length || !s->capacity || !s->actions) {
        pp_schedule_free(s);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    *out = s;
    return pp__ok(err);
}

void pp_schedule_free(pp_schedule *s)
{
    int r;
    if (!s) return;
    if (s->actions)
        for (r = 0; r < s->pp; r++) PIPEPAR_FREE(s->actions[r]);
    PIPEPAR_FREE(s->actions);
    PIPEPAR_FREE(s->length);
    PIPEPAR_FREE(s->capacity);
    PIPEPAR_FREE(s);
}

static int pp__reserve(pp_schedule *s, int rank, int need)
{
    if (need > s->capacity[rank]) {
        int cap = s->capacity[rank] ? s->capacity[rank] : 16;
        pp_action *a;
        while (cap < need) {
            if (cap > INT_MAX / 2) return 0;
            cap *= 2;
        }
        a = (pp_action *)PIPEPAR_REALLOC(s->actions[rank], (size_t)cap * sizeof(pp_action));
        if (!a) return 0;
        s->actions[rank] = a;
        s->capacity[rank] = cap;
    }
    return 1;
}

pp_status pp_schedule_append(pp_schedule *s, int rank, pp_action action, pp_error *err)
{
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    if (rank < 0 || rank >= s->pp)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and pp-1=%d", rank, s->pp - 1);
    if (action.op < 0 || action.op >= PP_OP_COUNT)
        return pp__fail(err, PP_EINVAL, "op=%d: unknown", (int)action.op);
    if (action.stage < 0 || action.stage >= s->num_stages)
        return pp__fail(err, PP_EINVAL, "stage=%d: must be between 0 and %d", (int)action.stage, s->num_stages - 1);
    if (action.mb < 0 || action.mb >= s->mb)
        return pp__fail(err, PP_EINVAL, "mb=%d: must be between 0 and %d", (int)action.mb, s->mb - 1);
    if (action.op == PP_OP_FB) {
        if (action.stage2 < 0 || action.stage2 >= s->num_stages || action.mb2 < 0 || action.mb2 >= s->mb)
            return pp__fail(err, PP_EINVAL, "FB action: backward half (stage %d, mb %d) out of range",
                            (int)action.stage2, (int)action.mb2);
    } else {
        action.stage2 = -1; action.mb2 = -1;
    }
    if (!pp__is_comm(action.op)) action.group = 0;
    if (!pp__reserve(s, rank, s->length[rank] + 1)) return pp__fail(err, PP_ENOMEM, "out of memory");
    s->actions[rank][s->length[rank]++] = action;
    if (pp__is_comm(action.op)) s->lowered = 1;
    return pp__ok(err);
}

pp_status pp_schedule_copy(const pp_schedule *s, pp_schedule **out, pp_error *err)
{
    pp_schedule *c;
    pp_status st;
    int r;
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    st = pp_schedule_create(s->pp, s->vpp, s->mb, s->placement, &c, err);
    if (st != PP_OK) return st;
    c->kind = s->kind; c->group = s->group; c->lowered = s->lowered;
    for (r = 0; r < s->pp; r++) {
        if (!pp__reserve(c, r, s->length[r] > 0 ? s->length[r] : 1)) {
            pp_schedule_free(c);
            return pp__fail(err, PP_ENOMEM, "out of memory");
        }
        if (s->length[r]) memcpy(c->actions[r], s->actions[r], (size_t)s->length[r] * sizeof(pp_action));
        c->length[r] = s->length[r];
    }
    *out = c;
    return pp__ok(err);
}

/* --- placement ----------------------------------------------------------------------------- */

int pp_stage_rank(const pp_schedule *s, int stage)
{
    if (!s || stage < 0 || stage >= s->num_stages) return -1;
    if (s->placement != PP_PLACEMENT_LOOPED) return stage < s->pp ? stage : 2 * s->pp - 1 - stage;
    return stage % s->pp;
}

int pp_stage_chunk(const pp_schedule *s, int stage)
{
    if (!s || stage < 0 || stage >= s->num_stages) return -1;
    if (s->placement != PP_PLACEMENT_LOOPED) return stage < s->pp ? 0 : 1;
    return stage / s->pp;
}

int pp_rank_chunk_stage(const pp_schedule *s, int rank, int chunk)
{
    if (!s || rank < 0 || rank >= s->pp || chunk < 0 || chunk >= s->vpp) return -1;
    if (s->placement != PP_PLACEMENT_LOOPED) return chunk == 0 ? rank : 2 * s->pp - 1 - rank;
    return chunk * s->pp + rank;
}

/* Routes (see >>schedule): unchecked forms for the inner loops, m in range. Under the dual
 * placement microbatches below mb/2 go down (stages 0..pp-1), the others up (pp..2pp-1). */
static int pp__first(const pp_schedule *s, int m)
{
    return s->placement == PP_PLACEMENT_DUAL && m >= s->mb / 2 ? s->pp : 0;
}

static int pp__last(const pp_schedule *s, int m)
{
    return s->placement == PP_PLACEMENT_DUAL && m < s->mb / 2 ? s->pp - 1 : s->num_stages - 1;
}

static int pp__on_route(const pp_schedule *s, int stage, int m)
{
    return stage >= pp__first(s, m) && stage <= pp__last(s, m);
}

int pp_mb_first_stage(const pp_schedule *s, int mb)
{
    return (!s || mb < 0 || mb >= s->mb) ? -1 : pp__first(s, mb);
}

int pp_mb_last_stage(const pp_schedule *s, int mb)
{
    return (!s || mb < 0 || mb >= s->mb) ? -1 : pp__last(s, mb);
}

int pp_stage_model_stage(const pp_schedule *s, int stage)
{
    if (!s || stage < 0 || stage >= s->num_stages) return -1;
    return s->placement == PP_PLACEMENT_DUAL ? stage % s->pp : stage;
}

/* --- generators ---------------------------------------------------------------------------- */

#define PP__EMIT(op_, stage_, mb_) \
    do { st = pp_schedule_append(s, r, pp__action((op_), (stage_), (mb_)), err); \
         if (st != PP_OK) return st; } while (0)

/* GPipe (Huang et al., 2019): every forward, then every backward, in microbatch order
 * (the order of PyTorch's ScheduleGPipe). */
static pp_status pp__build_gpipe(pp_schedule *s, pp_error *err)
{
    pp_status st;
    int r, m;
    for (r = 0; r < s->pp; r++) {
        for (m = 0; m < s->mb; m++) PP__EMIT(PP_OP_F, r, m);
        for (m = 0; m < s->mb; m++) PP__EMIT(PP_OP_B, r, m);
    }
    return pp__ok(err);
}

/* 1F1B / PipeDream-flush (Narayanan et al., 2019): rank r runs pp-r-1 warmup forwards, then
 * alternates one forward and one backward, then drains the remaining backwards. The warmup is
 * what keeps at most pp-r activations alive on rank r. */
static pp_status pp__build_1f1b(pp_schedule *s, pp_error *err)
{
    pp_status st;
    int r;
    for (r = 0; r < s->pp; r++) {
        int warmup = s->pp - r - 1, f = 0, b = 0;
        if (warmup > s->mb) warmup = s->mb;
        for (; f < warmup; f++) PP__EMIT(PP_OP_F, r, f);
        while (f < s->mb) {
            PP__EMIT(PP_OP_F, r, f); f++;
            PP__EMIT(PP_OP_B, r, b); b++;
        }
        for (; b < s->mb; b++) PP__EMIT(PP_OP_B, r, b);
    }
    return pp__ok(err);
}

/* Interleaved 1F1B with Megatron-LM's semantics (schedules.py, get_schedule_table and
 * get_pp_rank_microbatches): the k-th forward of every rank runs table[k] = (microbatch, chunk),
 * where the table walks microbatches in groups of G = microbatch_group_size_per_vp_stage, each
 * group through every chunk in turn (a last, smaller group takes what remains); the k-th backward
 * runs the same table entry with the chunk mirrored (vpp-1-chunk). Rank r first runs
 *     warmup = 2*(pp-r-1) + (vpp-1)*G         forwards (vpp > 1; 1F1B's pp-r-1 when vpp = 1)
 * capped at mb*vpp, then alternates F and B, then drains. With G = mb / max(1, mb / pp) this is
 * exactly PyTorch's ScheduleInterleaved1F1B order. */
static pp_status pp__build_interleaved(pp_schedule *s, const int *extra_warmup, pp_error *err)
{
    pp_status st;
    int total = s->mb * s->vpp, G = s->group, r, k, n = 0, lo;
    int *table_mb = (int *)pp__calloc((size_t)total, sizeof(int));
    int *table_chunk = (int *)pp__calloc((size_t)total, sizeof(int));
    if (!table_mb || !table_chunk) {
        PIPEPAR_FREE(table_mb); PIPEPAR_FREE(table_chunk);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    for (lo = 0; lo < s->mb; lo += G) {
        int hi = (lo + G >= s->mb) ? s->mb : lo + G, c, m;
        for (c = 0; c < s->vpp; c++)
            for (m = lo; m < hi; m++) { table_mb[n] = m; table_chunk[n] = c; n++; }
        if (hi == s->mb) break;
    }
    PIPEPAR_ASSERT(n == total);
    st = PP_OK;
    for (r = 0; r < s->pp && st == PP_OK; r++) {
        int warmup = s->vpp > 1 ? 2 * (s->pp - r - 1) + (s->vpp - 1) * G : s->pp - r - 1;
        int f = 0, b = 0;
        if (extra_warmup) warmup += extra_warmup[r];
        if (warmup > total) warmup = total;
#define PP__F_K(k_) pp__action(PP_OP_F, pp_rank_chunk_stage(s, r, table_chunk[k_]), table_mb[k_])
#define PP__B_K(k_) pp__action(PP_OP_B, pp_rank_chunk_stage(s, r, s->vpp - 1 - table_chunk[k_]), table_mb[k_])
        for (k = 0; k < warmup && st == PP_OK; k++, f++) st = pp_schedule_append(s, r, PP__F_K(f), err);
        while (f < total && st == PP_OK) {
            st = pp_schedule_append(s, r, PP__F_K(f), err); f++;
            if (st == PP_OK) { st = pp_schedule_append(s, r, PP__B_K(b), err); b++; }
        }
        for (; b < total && st == PP_OK; b++) st = pp_schedule_append(s, r, PP__B_K(b), err);
#undef PP__F_K
#undef PP__B_K
    }
    PIPEPAR_FREE(table_mb);
    PIPEPAR_FREE(table_chunk);
    return st == PP_OK ? pp__ok(err) : st;
}

/* Looped breadth-first (Lamy-Poirier, 2023; PyTorch's ScheduleLoopedBFS): each rank runs every
 * microbatch through its first chunk, then its second, ...; backwards mirror that, last chunk
 * first, microbatches in reverse. */
static pp_status pp__build_looped_bfs(pp_schedule *s, pp_error *err)
{
    pp_status st;
    int r, c, m;
    for (r = 0; r < s->pp; r++) {
        for (c = 0; c < s->vpp; c++)
            for (m = 0; m < s->mb; m++) PP__EMIT(PP_OP_F, pp_rank_chunk_stage(s, r, c), m);
        for (c = s->vpp - 1; c >= 0; c--)
            for (m = s->mb - 1; m >= 0; m--) PP__EMIT(PP_OP_B, pp_rank_chunk_stage(s, r, c), m);
    }
    return pp__ok(err);
}
#undef PP__EMIT

/* Megatron's table deadlocks outside the range Megatron-LM accepts (schedules.py raises unless
 * pp <= group <= mb and the last group is empty or at least pp). A last, smaller group with vpp >= 3:
 * e.g. pp=4, vpp=3, mb=5: rank 0's F(mb 4, chunk 2) waits for rank 3's F(4, chunk 1), which rank
 * 3 runs only after B(0, chunk 1), which waits for rank 0's B(0, chunk 2), which rank 0 runs after
 * that F. A group below pp (pp=4, vpp=2, mb=8, group 2): a rank's warmup ends before the microbatch
 * its first backward needs has reached the last stage. pipepar accepts any group and mb: where the
 * exact order deadlocks, every rank found waiting on a backward takes one more warmup forward,
 * until the order runs (this always ends: all-forward warmup is GPipe-like and deadlock-free).
 * Where Megatron's order runs, it is kept exactly. */
static pp_status pp__build_interleaved_deadlock_free(pp_schedule *s, pp_error *err)
{
    int *extra = NULL, r, attempt, total = s->mb * s->vpp;
    unsigned char *stuck = NULL;
    pp_status st;
    if ((s->mb % s->group == 0 && s->group >= s->pp) || s->vpp == 1 || s->pp == 1)
        return pp__build_interleaved(s, NULL, err);   /* Megatron's own range: its order runs as is */
    extra = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    stuck = (unsigned char *)pp__calloc((size_t)s->pp, 1);
    if (!extra || !stuck) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    for (attempt = 0;; attempt++) {
        pp_schedule *c = NULL;
        int changed = 0;
        for (r = 0; r < s->pp; r++) s->length[r] = 0;
        st = pp__build_interleaved(s, extra, err);
        if (st != PP_OK) goto done;
        st = pp_schedule_copy(s, &c, err);
        if (st != PP_OK) goto done;
        memset(stuck, 0, (size_t)s->pp);
        st = pp__lower(c, stuck, err);
        pp_schedule_free(c);
        if (st != PP_EDEADLOCK) goto done;
        for (r = 0; r < s->pp; r++)
            if (stuck[r] && extra[r] < total) { extra[r]++; changed = 1; }
        if (!changed) goto done;   /* keeps the deadlock message */
    }
done:
    PIPEPAR_FREE(extra);
    PIPEPAR_FREE(stuck);
    return st == PP_OK ? pp__ok(err) : st;
}

/* The zero-bubble family lives in its own section (>>zerobubble). */
static pp_status pp__build_zero_bubble(const pp_schedule_config *cfg, pp_schedule *s, pp_error *err);

pp_status pp_schedule_build(const pp_schedule_config *cfg, pp_schedule **out, pp_error *err)
{
    pp_schedule_config c;
    pp_placement placement = PP_PLACEMENT_LOOPED;
    pp_schedule *s = NULL;
    pp_status st;
    const char *kn;
    if (!cfg || !out) return pp__fail(err, PP_EINVAL, "cfg and out: must not be NULL");
    *out = NULL;
    c = *cfg;
    kn = pp_schedule_kind_name(c.kind);
    if (c.kind <= PP_KIND_NONE || c.kind >= PP_CUSTOM)
        return pp__fail(err, PP_EINVAL, "kind=%d: not a schedule kind that can be built", (int)c.kind);
    if (c.pp < 1) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1", c.pp);
    if (c.mb < 1) return pp__fail(err, PP_EINVAL, "mb=%d: must be at least 1", c.mb);
    if (c.vpp < 0) return pp__fail(err, PP_EINVAL, "vpp=%d: must be at least 1 (0 means the default)", c.vpp);
    if (c.group < 0) return pp__fail(err, PP_EINVAL, "group=%d: must be at least 1 (0 means pp)", c.group);
    if (c.max_live < 0) return pp__fail(err, PP_EINVAL, "max_live=%d: must be at least 1 (0 means the kind's own)", c.max_live);
    if (c.kind == PP_ZBV || c.kind == PP_DUALPIPEV || c.kind == PP_DUALPIPE) {
        placement = c.kind == PP_DUALPIPE ? PP_PLACEMENT_DUAL : PP_PLACEMENT_V;
        if (c.vpp == 0) c.vpp = 2;
        if (c.vpp != 2)
            return pp__fail(err, PP_EUNSUPPORTED, "vpp=%d: %s uses %s, exactly 2 chunks per rank", c.vpp, kn,
                            c.kind == PP_DUALPIPE ? "two pipelines in opposite directions" : "a V-shaped placement");
    }
    if (c.kind == PP_DUALPIPE) {
        /* deepseek-ai/DualPipe asserts num_ranks % 2 == 0 and num_chunks % 2 == 0 (half of the
         * microbatches enter at each end); see >>zerobubble for why we need no more than that */
        if (c.pp % 2 != 0)
            return pp__fail(err, PP_EUNSUPPORTED, "pp=%d: dualpipe needs an even pp (rank r runs the down stage r "
                            "and the up stage of rank pp-1-r)", c.pp);
        if (c.mb % 2 != 0)
            return pp__fail(err, PP_EUNSUPPORTED, "mb=%d: dualpipe needs an even mb (mb/2 microbatches run down from "
                            "rank 0, mb/2 up from rank pp-1)", c.mb);
    }
    if (c.vpp == 0) c.vpp = 1;
    /* interleaved-zb defaults to PyTorch's round size, mb / max(1, mb / pp), so that its order is
     * PyTorch's; interleaved 1F1B defaults to Megatron's microbatch_group_size_per_vp_stage = pp. */
    if (c.group == 0)
        c.group = c.kind == PP_INTERLEAVED_ZB ? c.mb / (c.mb / c.pp > 1 ? c.mb / c.pp : 1) : c.pp;
    switch (c.kind) {
    case PP_GPIPE: case PP_1F1B: case PP_ZB_H1: case PP_ZB_H2:
        if (c.vpp != 1)
            return pp__fail(err, PP_EUNSUPPORTED,
                            "vpp=%d: %s runs one chunk per rank (use interleaved or looped-bfs for several)",
                            c.vpp, kn);
        break;
    case PP_INTERLEAVED_1F1B:
        /* any mb >= 1 and group >= 1: outside Megatron-LM's range (pp <= group <= mb, a last group
         * of 0 or >= pp) the deadlock-free builder below makes the order run. Below pp, each of its
         * tries lowers the whole schedule again and the tries grow with pp: up to pp 64 (3 s at
         * vpp 4, mb 256, group 1), where 256 took 80 s */
        if (c.group < c.pp && c.group < c.mb && c.pp > 64 && c.vpp > 1)
            return pp__fail(err, PP_EUNSUPPORTED, "group=%d: below pp=%d, outside Megatron-LM's range (pp <= group <= "
                            "mb); pipepar builds such orders up to pp=64 (larger ones take minutes)", c.group, c.pp);
        break;
    default: break;
    }
    if (c.max_live && c.kind != PP_ZB_H2)   /* for every kind, not only the zero-bubble family */
        return pp__fail(err, PP_EUNSUPPORTED, "max_live=%d: %s has a fixed memory profile and takes no cap (zb-h2 "
                        "and the greedy schedule of pp_search do)", c.max_live, kn);
    if (cfg->group != 0 && c.kind != PP_INTERLEAVED_1F1B && c.kind != PP_INTERLEAVED_ZB)
        return pp__fail(err, PP_EUNSUPPORTED, "group=%d: only interleaved schedules take a microbatch group size",
                        cfg->group);
    st = pp_schedule_create(c.pp, c.vpp, c.mb, placement, &s, err);
    if (st != PP_OK) return st;
    s->kind = c.kind;
    s->group = c.group;
    switch (c.kind) {
    case PP_GPIPE: st = pp__build_gpipe(s, err); break;
    case PP_1F1B: st = pp__build_1f1b(s, err); break;
    case PP_INTERLEAVED_1F1B: st = pp__build_interleaved_deadlock_free(s, err); break;
    case PP_LOOPED_BFS: st = pp__build_looped_bfs(s, err); break;
    default: st = pp__build_zero_bubble(&c, s, err); break;
    }
    if (st != PP_OK) { pp_schedule_free(s); return st; }
    *out = s;
    return pp__ok(err);
}

/* --- action text ---------------------------------------------------------------------------- */

int pp_action_format(pp_action a, char *buf, size_t size)
{
    if (a.op == PP_OP_FB)
        return snprintf(buf, size, "(%dF%d;%dB%d)OVERLAP_F_B", (int)a.stage, (int)a.mb, (int)a.stage2, (int)a.mb2);
    return snprintf(buf, size, "%d%s%d", (int)a.stage, pp_op_name((pp_op)a.op), (int)a.mb);
}

/* Reads a non-negative decimal at *p (no sign, at most 9 digits); -1 when there is none. */
static int pp__read_uint(const char **p)
{
    int v = 0, n = 0;
    while (**p >= '0' && **p <= '9') {
        if (n == 9) return -1;
        v = v * 10 + (**p - '0');
        (*p)++; n++;
    }
    return n ? v : -1;
}

static pp_status pp__parse_simple_action(const char *text, const char *end, pp_action *out, pp_error *err)
{
    static const struct { const char *name; int op; } ops[] = {
        { "SEND_F", PP_OP_SEND_F }, { "RECV_F", PP_OP_RECV_F }, { "SEND_B", PP_OP_SEND_B },
        { "RECV_B", PP_OP_RECV_B }, { "F", PP_OP_F }, { "B", PP_OP_B }, { "I", PP_OP_I }, { "W", PP_OP_W }
    };
    const char *p = text;
    int stage, mb;
    size_t k, n;
    stage = pp__read_uint(&p);
    if (stage < 0)
        return pp__fail(err, PP_EPARSE, "action '%.*s': expected <stage><op><microbatch>, e.g. 4F0",
                        (int)(end - text), text);
    for (k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        n = strlen(ops[k].name);
        if ((size_t)(end - p) > n && strncmp(p, ops[k].name, n) == 0 && p[n] >= '0' && p[n] <= '9') break;
    }
    if (k == sizeof ops / sizeof ops[0])
        return pp__fail(err, PP_EPARSE, "action '%.*s': unknown operation (F, B, I, W, SEND_F, RECV_F, "
                        "SEND_B, RECV_B)", (int)(end - text), text);
    p += strlen(ops[k].name);
    mb = pp__read_uint(&p);
    if (mb < 0 || p != end)
        return pp__fail(err, PP_EPARSE, "action '%.*s': expected <stage><op><microbatch>, e.g. 4F0",
                        (int)(end - text), text);
    *out = pp__action(ops[k].op, stage, mb);
    return PP_OK;
}

pp_status pp_action_parse(const char *text, pp_action *out, pp_error *err)
{
    const char *b, *e;
    pp_status st;
    if (!text || !out) return pp__fail(err, PP_EINVAL, "text and out: must not be NULL");
    b = text; e = text + strlen(text);
    while (b < e && (*b == ' ' || *b == '\t' || *b == '\r' || *b == '\n')) b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) e--;
    if (b == e) return pp__fail(err, PP_EPARSE, "action '': empty");
    if (*b == '(') {   /* "(0F1;3B0)OVERLAP_F_B" */
        const char *semi = (const char *)memchr(b, ';', (size_t)(e - b));
        const char *close = (const char *)memchr(b, ')', (size_t)(e - b));
        pp_action f, bw;
        if (!semi || !close || semi > close || strncmp(close, ")OVERLAP_F_B", (size_t)(e - close)) != 0 ||
            (size_t)(e - close) != strlen(")OVERLAP_F_B"))
            return pp__fail(err, PP_EPARSE, "action '%.*s': expected (<s>F<m>;<s>B<m>)OVERLAP_F_B",
                            (int)(e - b), b);
        st = pp__parse_simple_action(b + 1, semi, &f, err);
        if (st != PP_OK) return st;
        st = pp__parse_simple_action(semi + 1, close, &bw, err);
        if (st != PP_OK) return st;
        if (f.op != PP_OP_F || bw.op != PP_OP_B)
            return pp__fail(err, PP_EPARSE, "action '%.*s': an overlapped action pairs one F with one B",
                            (int)(e - b), b);
        *out = f;
        out->op = PP_OP_FB; out->stage2 = bw.stage; out->mb2 = bw.mb;
        return pp__ok(err);
    }
    st = pp__parse_simple_action(b, e, out, err);
    return st == PP_OK ? pp__ok(err) : st;
}

/* --- dependencies shared by lowering, validation and simulation ---------------------------- */

/* Flat index of (stage, microbatch). */
#define PP__SM(s, stage, m) ((size_t)(stage) * (size_t)(s)->mb + (size_t)(m))

/* Per-(stage, microbatch) progress of compute, used while walking programs. */
typedef struct pp__progress {
    unsigned char *f_done, *b_done, *w_done;   /* b_done: B or I (the input gradient exists) */
} pp__progress;

static int pp__progress_init(pp__progress *p, const pp_schedule *s)
{
    size_t n = (size_t)s->num_stages * (size_t)s->mb;
    p->f_done = (unsigned char *)pp__calloc(n, 1);
    p->b_done = (unsigned char *)pp__calloc(n, 1);
    p->w_done = (unsigned char *)pp__calloc(n, 1);
    return p->f_done && p->b_done && p->w_done;
}

static void pp__progress_free(pp__progress *p)
{
    PIPEPAR_FREE(p->f_done); PIPEPAR_FREE(p->b_done); PIPEPAR_FREE(p->w_done);
}

/* Checks structure: ops known, stages and microbatches in range, each compute action on its
 * stage's rank, and each (stage, mb) computed exactly once: one F, and one B or one I + one W. */
static pp_status pp__check_structure(const pp_schedule *s, pp_error *err)
{
    size_t n = (size_t)s->num_stages * (size_t)s->mb, k;
    unsigned char *nf = (unsigned char *)pp__calloc(n, 1), *nb = (unsigned char *)pp__calloc(n, 1);
    unsigned char *ni = (unsigned char *)pp__calloc(n, 1), *nw = (unsigned char *)pp__calloc(n, 1);
    pp_status st = PP_OK;
    int r, i;
    char txt[64];
    if (!nf || !nb || !ni || !nw) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    for (r = 0; r < s->pp && st == PP_OK; r++) {
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            int half;
            if (a.op < 0 || a.op >= PP_OP_COUNT) {
                st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: unknown op %d", r, i, (int)a.op);
                break;
            }
            if (a.stage < 0 || a.stage >= s->num_stages || a.mb < 0 || a.mb >= s->mb ||
                (a.op == PP_OP_FB && (a.stage2 < 0 || a.stage2 >= s->num_stages || a.mb2 < 0 || a.mb2 >= s->mb))) {
                pp_action_format(a, txt, sizeof txt);
                st = pp__fail(err, PP_EINVALID_SCHEDULE,
                              "rank %d position %d: %s is out of range (stages 0..%d, microbatches 0..%d)",
                              r, i, txt, s->num_stages - 1, s->mb - 1);
                break;
            }
            if (pp__is_comm(a.op)) continue;
            for (half = 0; half < (a.op == PP_OP_FB ? 2 : 1); half++) {
                int op = a.op == PP_OP_FB ? (half ? PP_OP_B : PP_OP_F) : a.op;
                int stg = half ? a.stage2 : a.stage, m = half ? a.mb2 : a.mb;
                unsigned char *cnt = op == PP_OP_F ? nf : op == PP_OP_B ? nb : op == PP_OP_I ? ni : nw;
                if (!pp__on_route(s, stg, m)) {
                    pp_action_format(a, txt, sizeof txt);
                    st = pp__fail(err, PP_EINVALID_SCHEDULE,
                                  "rank %d position %d: %s computes stage %d, which is not on microbatch %d's route "
                                  "(stages %d..%d)", r, i, txt, stg, m, pp__first(s, m), pp__last(s, m));
                    break;
                }
                if (pp_stage_rank(s, stg) != r) {
                    pp_action_format(a, txt, sizeof txt);
                    st = pp__fail(err, PP_EINVALID_SCHEDULE,
                                  "rank %d position %d: %s computes stage %d, which lives on rank %d", r, i, txt,
                                  stg, pp_stage_rank(s, stg));
                    break;
                }
                if (cnt[PP__SM(s, stg, m)]++) {
                    pp_action_format(a, txt, sizeof txt);
                    st = pp__fail(err, PP_EINVALID_SCHEDULE,
                                  "rank %d position %d: %s is the second %s of stage %d microbatch %d (each runs once)",
                                  r, i, txt, pp_op_name((pp_op)op), stg, m);
                    break;
                }
            }
            if (st != PP_OK) break;
        }
    }
    for (k = 0; k < n && st == PP_OK; k++) {
        int stg = (int)(k / (size_t)s->mb), m = (int)(k % (size_t)s->mb);
        if (!pp__on_route(s, stg, m)) continue;
        if (!nf[k])
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "stage %d microbatch %d: no F on rank %d", stg, m,
                          pp_stage_rank(s, stg));
        else if (!nb[k] && !ni[k])
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "stage %d microbatch %d: no B (or I) on rank %d", stg, m,
                          pp_stage_rank(s, stg));
        else if (nb[k] && (ni[k] || nw[k]))
            st = pp__fail(err, PP_EINVALID_SCHEDULE,
                          "stage %d microbatch %d: has both a full B and a split I/W backward", stg, m);
        else if (ni[k] != nw[k])
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "stage %d microbatch %d: an I needs exactly one W (rank %d)",
                          stg, m, pp_stage_rank(s, stg));
    }
done:
    PIPEPAR_FREE(nf); PIPEPAR_FREE(nb); PIPEPAR_FREE(ni); PIPEPAR_FREE(nw);
    return st;
}

/* Where a compute half's inputs come from. For F(s,m): the output of F(s-1,m) (none at the first
 * stage of m's route). For B/I(s,m): its own F(s,m) and the input-gradient of B/I(s+1,m) (none at
 * the last stage of m's route).
 * For W(s,m): its own I(s,m). Returns 1 when the input from a *neighbouring stage* comes from
 * another rank, and sets *from_stage. */
static int pp__cross_input(const pp_schedule *s, int op, int stage, int m, int *from_stage)
{
    int r = pp_stage_rank(s, stage);
    if (op == PP_OP_F) {
        if (stage == pp__first(s, m)) return 0;
        *from_stage = stage - 1;
    } else if (op == PP_OP_B || op == PP_OP_I) {
        if (stage == pp__last(s, m)) return 0;
        *from_stage = stage + 1;
    } else return 0;
    return pp_stage_rank(s, *from_stage) != r;
}

/* Checks that a compute half can run now on its rank, given local progress and the tensors that
 * arrived from other ranks (arrived_f / arrived_b, indexed by the consumer's (stage, mb)).
 * Returns 1 if ready; 0 if it waits for a tensor from another rank; -1 (with *why) if a local
 * dependency is missing, which program order can never repair. */
static int pp__half_ready(const pp_schedule *s, const pp__progress *p, const unsigned char *arrived_f,
                          const unsigned char *arrived_b, int op, int stage, int m, const char **why)
{
    size_t k = PP__SM(s, stage, m);
    int from;
    if (op == PP_OP_F) {
        if (stage == pp__first(s, m)) return 1;
        if (pp__cross_input(s, op, stage, m, &from)) return arrived_f[k] ? 1 : 0;
        if (!p->f_done[PP__SM(s, stage - 1, m)]) { *why = "comes before the F of the previous stage on the same rank"; return -1; }
        return 1;
    }
    if (op == PP_OP_W) {
        if (!p->b_done[k]) { *why = "comes before its I"; return -1; }
        return 1;
    }
    /* B or I */
    if (!p->f_done[k]) { *why = "comes before its own F"; return -1; }
    if (stage == pp__last(s, m)) return 1;
    if (pp__cross_input(s, op, stage, m, &from)) return arrived_b[k] ? 1 : 0;
    if (!p->b_done[PP__SM(s, stage + 1, m)]) { *why = "comes before the backward of the next stage on the same rank"; return -1; }
    return 1;
}

static void pp__mark_done(const pp_schedule *s, pp__progress *p, int op, int stage, int m)
{
    size_t k = PP__SM(s, stage, m);
    if (op == PP_OP_F) p->f_done[k] = 1;
    else if (op == PP_OP_B) { p->b_done[k] = 1; p->w_done[k] = 1; }
    else if (op == PP_OP_I) p->b_done[k] = 1;
    else if (op == PP_OP_W) p->w_done[k] = 1;
}

/* The halves of a compute action: F, B, I, W have one; FB has two (F then B). */
static int pp__halves(pp_action a, int *ops, int *stages, int *mbs)
{
    if (a.op == PP_OP_FB) {
        ops[0] = PP_OP_F; stages[0] = a.stage; mbs[0] = a.mb;
        ops[1] = PP_OP_B; stages[1] = a.stage2; mbs[1] = a.mb2;
        return 2;
    }
    ops[0] = a.op; stages[0] = a.stage; mbs[0] = a.mb;
    return 1;
}

/* --- lowering ------------------------------------------------------------------------------- */

int pp_schedule_group_end(const pp_schedule *s, int rank, int i)
{
    int j;
    if (!s || rank < 0 || rank >= s->pp || i < 0 || i >= s->length[rank]) return i + 1;
    if (!pp__is_comm(s->actions[rank][i].op)) return i + 1;
    for (j = i + 1; j < s->length[rank]; j++)
        if (!pp__is_comm(s->actions[rank][j].op) || s->actions[rank][j].group != s->actions[rank][i].group) break;
    return j;
}

void pp_schedule_strip_comm(pp_schedule *s)
{
    int r, i, n;
    if (!s) return;
    for (r = 0; r < s->pp; r++) {
        for (i = 0, n = 0; i < s->length[r]; i++)
            if (!pp__is_comm(s->actions[r][i].op)) s->actions[r][n++] = s->actions[r][i];
        s->length[r] = n;
    }
    s->lowered = 0;
}

/* Replaces every `from` action (PP_OP_FB or PP_OP_B) with its two halves, in place, and lowers
 * again if s was lowered. The split schedule is built (and lowered) aside, and swapped in only
 * once all went well, so that a failure leaves s as it was. */
static pp_status pp__split_actions(pp_schedule *s, pp_op from, pp_error *err)
{
    pp_schedule *c = NULL;
    pp_status st;
    int r, i, found = 0, *ip;
    pp_action **ap;
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    for (r = 0; r < s->pp; r++)
        for (i = 0; i < s->length[r]; i++) found += s->actions[r][i].op == (int32_t)from;
    if (found == 0) return pp__ok(err);   /* nothing to split: s stays as it is, communication too */
    st = pp_schedule_create(s->pp, s->vpp, s->mb, s->placement, &c, err);
    if (st != PP_OK) return st;
    c->kind = s->kind; c->group = s->group;
    for (r = 0; r < s->pp && st == PP_OK; r++)
        for (i = 0; i < s->length[r] && st == PP_OK; i++) {
            pp_action x = s->actions[r][i], first = x, second = x;
            if (pp__is_comm(x.op)) continue;           /* lowered again below */
            if (x.op != (int32_t)from) { st = pp_schedule_append(c, r, x, err); continue; }
            if (from == PP_OP_FB) {   /* the F half, then the B half of another (stage, microbatch) */
                first.op = PP_OP_F;
                second.op = PP_OP_B; second.stage = x.stage2; second.mb = x.mb2;
                first.stage2 = first.mb2 = second.stage2 = second.mb2 = -1;
            } else {                  /* the input gradient, then the weight gradient */
                first.op = PP_OP_I;
                second.op = PP_OP_W;
            }
            st = pp_schedule_append(c, r, first, err);
            if (st == PP_OK) st = pp_schedule_append(c, r, second, err);
        }
    if (st == PP_OK && s->lowered) st = pp_schedule_lower(c, err);
    if (st != PP_OK) { pp_schedule_free(c); return st; }
    ap = s->actions; s->actions = c->actions; c->actions = ap;
    ip = s->length; s->length = c->length; c->length = ip;
    ip = s->capacity; s->capacity = c->capacity; c->capacity = ip;
    s->lowered = c->lowered;
    pp_schedule_free(c);
    return pp__ok(err);
}

pp_status pp_schedule_split_overlaps(pp_schedule *s, pp_error *err)
{
    return pp__split_actions(s, PP_OP_FB, err);
}

pp_status pp_schedule_split_backward(pp_schedule *s, pp_error *err)
{
    return pp__split_actions(s, PP_OP_B, err);
}

/* Lowering walks the compute orders in lock-step rounds: in each round every rank runs its next
 * compute action if its inputs arrived in an earlier round, then every tensor produced in the
 * round that crosses ranks gets a SEND on its producer and a RECV on its consumer, both placed
 * in that round's communication group (group = round + 1, so that a rank idle for a round does
 * not merge two rounds into one group: each group meets exactly one group of each peer, as
 * Megatron pairs send_forward_recv_backward on one rank with send_backward_recv_forward on the
 * next). Each pair of ranks therefore sees its transfers in the
 * same round order on both sides, and a group of round k only ever waits for groups of round k:
 * the programs cannot deadlock, even with sends that block until received. (This is the
 * lock-step table PyTorch draws with idle '_' steps; Megatron's batched p2p per step is the same
 * idea.) A round in which no rank can move means the compute order itself is circular. */
pp_status pp_schedule_lower(pp_schedule *s, pp_error *err)
{
    return pp__lower(s, NULL, err);
}

/* stuck_on_backward (optional, [pp]): on PP_EDEADLOCK, 1 for each rank whose next action is a
 * backward waiting for a gradient (the interleaved generator gives those ranks more warmup). */
static pp_status pp__lower(pp_schedule *s, unsigned char *stuck_on_backward, pp_error *err)
{
    pp_status st;
    int *pos = NULL, *ran = NULL, *newlen = NULL, *newcap = NULL;
    int r, total = 0, doneall = 0, round;
    size_t n;
    unsigned char *arrived_f = NULL, *arrived_b = NULL;
    pp_action **out = NULL, *ran_action = NULL;
    pp__progress prog = { NULL, NULL, NULL };
    char txt[64];
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    pp_schedule_strip_comm(s);
    st = pp__check_structure(s, err);
    if (st != PP_OK) return st;
    n = (size_t)s->num_stages * (size_t)s->mb;
    pos = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    ran = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    newlen = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    newcap = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    out = (pp_action **)pp__calloc((size_t)s->pp, sizeof(pp_action *));
    ran_action = (pp_action *)pp__calloc((size_t)s->pp, sizeof(pp_action));
    arrived_f = (unsigned char *)pp__calloc(n, 1);
    arrived_b = (unsigned char *)pp__calloc(n, 1);
    if (!pos || !ran || !newlen || !newcap || !out || !ran_action || !arrived_f ||
        !arrived_b || !pp__progress_init(&prog, s)) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
        goto done;
    }
    for (r = 0; r < s->pp; r++) {
        total += s->length[r];
        /* compute + at most 2 sends and 2 receives per compute action, in the worst case */
        newcap[r] = s->length[r] * 5 + 4;
        out[r] = (pp_action *)PIPEPAR_MALLOC((size_t)newcap[r] * sizeof(pp_action));
        if (!out[r]) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    }
    for (round = 0; doneall < total; round++) {
        int moved = 0;
        /* 1. compute: each rank's next action, if its inputs arrived in an earlier round */
        for (r = 0; r < s->pp; r++) {
            pp_action a;
            int ops[2], stg[2], mbs[2], h, nh, ready = 1;
            ran[r] = 0;
            if (pos[r] >= s->length[r]) continue;
            a = s->actions[r][pos[r]];
            nh = pp__halves(a, ops, stg, mbs);
            for (h = 0; h < nh && ready == 1; h++) {
                const char *why = "";
                ready = pp__half_ready(s, &prog, arrived_f, arrived_b, ops[h], stg[h], mbs[h], &why);
                if (ready < 0) {
                    pp_action_format(a, txt, sizeof txt);
                    st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s %s", r, pos[r], txt, why);
                    goto done;
                }
            }
            if (!ready) continue;
            ran[r] = 1;
        }
        for (r = 0; r < s->pp; r++) {
            pp_action a;
            int ops[2], stg[2], mbs[2], h, nh;
            if (!ran[r]) continue;
            a = s->actions[r][pos[r]++];
            ran_action[r] = a;
            out[r][newlen[r]++] = a;
            nh = pp__halves(a, ops, stg, mbs);
            for (h = 0; h < nh; h++) {
                pp__mark_done(s, &prog, ops[h], stg[h], mbs[h]);
            }
            moved++;
            doneall++;
        }
        if (!moved) {
            /* Name the stuck ranks and what each waits for. */
            pp__text t = { NULL, 0, 0, 0 };
            int shown = 0;
            for (r = 0; r < s->pp; r++) {
                pp_action a;
                if (pos[r] >= s->length[r]) continue;
                a = s->actions[r][pos[r]];
                if (stuck_on_backward) stuck_on_backward[r] = a.op == PP_OP_B || a.op == PP_OP_I;
                if (shown >= 4) continue;
                pp_action_format(a, txt, sizeof txt);
                pp__text_printf(&t, "%srank %d position %d (%s)", shown ? ", " : "", r, pos[r], txt);
                shown++;
            }
            st = pp__fail(err, PP_EDEADLOCK,
                          "compute order deadlocks: every remaining action waits for a tensor no rank can "
                          "produce first: %s", t.data ? t.data : "");
            pp__text_free(&t);
            goto done;
        }
        /* 2. communication of this round: tensors produced now that cross ranks */
        for (r = 0; r < s->pp; r++) {
            pp_action a;
            int ops[2], stg[2], mbs[2], h, nh;
            if (!ran[r]) continue;
            a = ran_action[r];   /* out[r]'s tail may already hold a RECV appended for another rank */
            nh = pp__halves(a, ops, stg, mbs);
            for (h = 0; h < nh; h++) {
                int sg = stg[h], m = mbs[h], to;
                if (ops[h] == PP_OP_F && sg < pp__last(s, m) && (to = pp_stage_rank(s, sg + 1)) != r) {
                    out[r][newlen[r]] = pp__action(PP_OP_SEND_F, sg, m);
                    out[r][newlen[r]++].group = round + 1;
                    out[to][newlen[to]] = pp__action(PP_OP_RECV_F, sg + 1, m);
                    out[to][newlen[to]++].group = round + 1;
                    arrived_f[PP__SM(s, sg + 1, m)] = 1;
                }
                if ((ops[h] == PP_OP_B || ops[h] == PP_OP_I) && sg > pp__first(s, m) && (to = pp_stage_rank(s, sg - 1)) != r) {
                    out[r][newlen[r]] = pp__action(PP_OP_SEND_B, sg, m);
                    out[r][newlen[r]++].group = round + 1;
                    out[to][newlen[to]] = pp__action(PP_OP_RECV_B, sg - 1, m);
                    out[to][newlen[to]++].group = round + 1;
                    arrived_b[PP__SM(s, sg - 1, m)] = 1;
                }
            }
        }
    }
    for (r = 0; r < s->pp; r++) {
        PIPEPAR_FREE(s->actions[r]);
        s->actions[r] = out[r];
        s->length[r] = newlen[r];
        s->capacity[r] = newcap[r];
        out[r] = NULL;
    }
    s->lowered = 1;
    st = pp__ok(err);
done:
    if (out) for (r = 0; r < s->pp; r++) PIPEPAR_FREE(out[r]);
    PIPEPAR_FREE(out); PIPEPAR_FREE(ran_action); PIPEPAR_FREE(pos); PIPEPAR_FREE(ran); PIPEPAR_FREE(newlen); PIPEPAR_FREE(newcap);
    PIPEPAR_FREE(arrived_f); PIPEPAR_FREE(arrived_b);
    pp__progress_free(&prog);
    return st;
}

/* --- validation ------------------------------------------------------------------------------ */

/* The matching key of a communication action: (direction, producer stage, microbatch).
 * SEND_F(s,m) pairs with RECV_F(s+1,m); SEND_B(s,m) pairs with RECV_B(s-1,m). */
static size_t pp__comm_key(const pp_schedule *s, pp_action a)
{
    size_t plane = (size_t)s->num_stages * (size_t)s->mb;
    switch (a.op) {
    case PP_OP_SEND_F: return PP__SM(s, a.stage, a.mb);
    case PP_OP_RECV_F: return PP__SM(s, a.stage - 1, a.mb);
    case PP_OP_SEND_B: return plane + PP__SM(s, a.stage, a.mb);
    default:           return plane + PP__SM(s, a.stage + 1, a.mb);   /* RECV_B */
    }
}

/* The validator's state: each transfer's two ends, found before the programs run, and the run's
 * progress. Transfers are indexed by pp__comm_key. */
typedef struct pp__validator {
    const pp_schedule *s;
    size_t plane, nkeys;                    /* num_stages * mb, and twice that (both directions) */
    int *send_rank, *send_pos;              /* [nkeys] where each transfer's SEND is; -1: nowhere */
    int *recv_rank, *recv_pos;              /* [nkeys] where its RECV is */
    unsigned char *completed;               /* [nkeys] the transfer took place */
    unsigned char *arrived_f, *arrived_b;   /* [plane] a RECV_F / RECV_B of (stage, mb) completed */
    int *pc;                                /* [pp] each rank's next action */
    int *gstart, *gend;                     /* [pp] the group [gstart, gend) a rank is blocked in;
                                               -1: none, gstart -2: the rank has finished */
    pp__progress prog;
} pp__validator;

static void pp__validator_free(pp__validator *V)
{
    PIPEPAR_FREE(V->send_rank); PIPEPAR_FREE(V->send_pos); PIPEPAR_FREE(V->recv_rank); PIPEPAR_FREE(V->recv_pos);
    PIPEPAR_FREE(V->completed); PIPEPAR_FREE(V->arrived_f); PIPEPAR_FREE(V->arrived_b);
    PIPEPAR_FREE(V->pc); PIPEPAR_FREE(V->gstart); PIPEPAR_FREE(V->gend);
    pp__progress_free(&V->prog);
}

static pp_status pp__validator_init(pp__validator *V, const pp_schedule *s, pp_error *err)
{
    size_t k;
    memset(V, 0, sizeof *V);
    V->s = s;
    V->plane = (size_t)s->num_stages * (size_t)s->mb;
    V->nkeys = 2 * V->plane;
    V->send_rank = (int *)PIPEPAR_MALLOC(V->nkeys * sizeof(int));
    V->send_pos = (int *)PIPEPAR_MALLOC(V->nkeys * sizeof(int));
    V->recv_rank = (int *)PIPEPAR_MALLOC(V->nkeys * sizeof(int));
    V->recv_pos = (int *)PIPEPAR_MALLOC(V->nkeys * sizeof(int));
    V->completed = (unsigned char *)pp__calloc(V->nkeys, 1);
    V->arrived_f = (unsigned char *)pp__calloc(V->plane, 1);
    V->arrived_b = (unsigned char *)pp__calloc(V->plane, 1);
    V->pc = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    V->gstart = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    V->gend = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    if (!V->send_rank || !V->send_pos || !V->recv_rank || !V->recv_pos || !V->completed || !V->arrived_f ||
        !V->arrived_b || !V->pc || !V->gstart || !V->gend || !pp__progress_init(&V->prog, s))
        return pp__fail(err, PP_ENOMEM, "out of memory");
    for (k = 0; k < V->nkeys; k++) V->send_rank[k] = V->recv_rank[k] = -1;
    return PP_OK;
}

/* Step 1, one action: communication action i of rank r is well formed (its stage on this rank
 * and on the microbatch's route, its peer stage on another rank) and the first of its kind. */
static pp_status pp__validate_comm_action(pp__validator *V, int r, int i, pp_error *err)
{
    const pp_schedule *s = V->s;
    pp_action a = s->actions[r][i];
    int peer_stage, is_send = a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B;
    int *ranks = is_send ? V->send_rank : V->recv_rank, *poss = is_send ? V->send_pos : V->recv_pos;
    size_t k;
    char txt[64];
    if (pp_stage_rank(s, a.stage) != r) {
        pp_action_format(a, txt, sizeof txt);
        return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s belongs to stage %d, which lives on rank %d",
                        r, i, txt, (int)a.stage, pp_stage_rank(s, a.stage));
    }
    peer_stage = (a.op == PP_OP_SEND_F || a.op == PP_OP_RECV_B) ? a.stage + 1 : a.stage - 1;
    if (!pp__on_route(s, a.stage, a.mb)) {
        pp_action_format(a, txt, sizeof txt);
        return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s: stage %d is not on microbatch %d's "
                        "route (stages %d..%d)", r, i, txt, (int)a.stage, (int)a.mb, pp__first(s, a.mb),
                        pp__last(s, a.mb));
    }
    if (peer_stage < pp__first(s, a.mb) || peer_stage > pp__last(s, a.mb)) {
        pp_action_format(a, txt, sizeof txt);
        return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s: stage %d has no %s stage to talk to",
                        r, i, txt, (int)a.stage, peer_stage < pp__first(s, a.mb) ? "previous" : "next");
    }
    if (pp_stage_rank(s, peer_stage) == r) {
        pp_action_format(a, txt, sizeof txt);
        return pp__fail(err, PP_EINVALID_SCHEDULE,
                        "rank %d position %d: %s: stages %d and %d share rank %d, the tensor passes in place "
                        "(no communication)", r, i, txt, (int)a.stage, peer_stage, r);
    }
    k = pp__comm_key(s, a);
    if (ranks[k] >= 0) {
        pp_action_format(a, txt, sizeof txt);
        return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s appears twice (first at rank %d position %d)",
                        r, i, txt, ranks[k], poss[k]);
    }
    ranks[k] = r;
    poss[k] = i;
    return PP_OK;
}

/* Step 1: every communication action is well formed and has exactly one partner. */
static pp_status pp__validate_pairs(pp__validator *V, pp_error *err)
{
    const pp_schedule *s = V->s;
    pp_status st;
    int r, i;
    size_t k;
    char txt[64], txt2[64];
    for (r = 0; r < s->pp; r++)
        for (i = 0; i < s->length[r]; i++)
            if (pp__is_comm(s->actions[r][i].op) && (st = pp__validate_comm_action(V, r, i, err)) != PP_OK) return st;
    for (k = 0; k < V->nkeys; k++) {
        int dir_b = k >= V->plane;
        int stg = (int)((k % V->plane) / (size_t)s->mb), m = (int)(k % (size_t)s->mb);
        if ((V->send_rank[k] >= 0) == (V->recv_rank[k] >= 0)) continue;
        if (V->send_rank[k] >= 0) {
            pp_action_format(s->actions[V->send_rank[k]][V->send_pos[k]], txt, sizeof txt);
            pp_action_format(pp__action(dir_b ? PP_OP_RECV_B : PP_OP_RECV_F, dir_b ? stg - 1 : stg + 1, m), txt2, sizeof txt2);
            return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s has no matching %s on rank %d",
                            V->send_rank[k], V->send_pos[k], txt, txt2, pp_stage_rank(s, dir_b ? stg - 1 : stg + 1));
        }
        pp_action_format(s->actions[V->recv_rank[k]][V->recv_pos[k]], txt, sizeof txt);
        pp_action_format(pp__action(dir_b ? PP_OP_SEND_B : PP_OP_SEND_F, stg, m), txt2, sizeof txt2);
        return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s has no matching %s on rank %d",
                        V->recv_rank[k], V->recv_pos[k], txt, txt2, pp_stage_rank(s, stg));
    }
    return PP_OK;
}

/* Step 2, a compute action of rank r (at V->pc[r]): each half needs its inputs here already. */
static pp_status pp__validate_compute(pp__validator *V, int r, pp_action a, pp_error *err)
{
    const pp_schedule *s = V->s;
    int ops[2], stg[2], mbs[2], h, nh = pp__halves(a, ops, stg, mbs);
    char txt[64];
    for (h = 0; h < nh; h++) {
        const char *why = "";
        int ready = pp__half_ready(s, &V->prog, V->arrived_f, V->arrived_b, ops[h], stg[h], mbs[h], &why), from = 0;
        if (ready == 1) continue;
        pp_action_format(a, txt, sizeof txt);
        if (ready < 0)
            return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s %s", r, V->pc[r], txt, why);
        pp__cross_input(s, ops[h], stg[h], mbs[h], &from);
        return pp__fail(err, PP_EINVALID_SCHEDULE,
                        "rank %d position %d: %s needs the %s of stage %d (rank %d), but no %s "
                        "before it received it", r, V->pc[r], txt,
                        ops[h] == PP_OP_F ? "output" : "input-gradient", from,
                        pp_stage_rank(s, from), ops[h] == PP_OP_F ? "RECV_F" : "RECV_B");
    }
    for (h = 0; h < nh; h++) pp__mark_done(s, &V->prog, ops[h], stg[h], mbs[h]);
    return PP_OK;
}

/* Step 2, rank r reaches the communication group at V->pc[r]: it is posted, which for a send
 * needs the tensor to exist. */
static pp_status pp__validate_post_group(pp__validator *V, int r, pp_error *err)
{
    const pp_schedule *s = V->s;
    int i;
    char txt[64];
    V->gstart[r] = V->pc[r];
    V->gend[r] = pp_schedule_group_end(s, r, V->pc[r]);
    for (i = V->gstart[r]; i < V->gend[r]; i++) {
        pp_action c = s->actions[r][i];
        if (c.op == PP_OP_SEND_F && !V->prog.f_done[PP__SM(s, c.stage, c.mb)]) {
            pp_action_format(c, txt, sizeof txt);
            return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s comes before the F it sends", r, i, txt);
        }
        if (c.op == PP_OP_SEND_B && !V->prog.b_done[PP__SM(s, c.stage, c.mb)]) {
            pp_action_format(c, txt, sizeof txt);
            return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s comes before the B (or I) "
                            "whose gradient it sends", r, i, txt);
        }
    }
    return PP_OK;
}

/* Step 2, rank r posted in its group: each transfer completes once its partner's rank is posted
 * in the group holding the partner. 1 when all have (the receives then arrive and the rank moves
 * past the group), 0 while the rank stays blocked. */
static int pp__validate_group_done(pp__validator *V, int r)
{
    const pp_schedule *s = V->s;
    int i, all = 1;
    for (i = V->gstart[r]; i < V->gend[r]; i++) {
        pp_action c = s->actions[r][i];
        int is_send = c.op == PP_OP_SEND_F || c.op == PP_OP_SEND_B, pr, pq;
        size_t k = pp__comm_key(s, c);
        if (V->completed[k]) continue;
        pr = is_send ? V->recv_rank[k] : V->send_rank[k];
        pq = is_send ? V->recv_pos[k] : V->send_pos[k];
        if (V->pc[pr] == V->gstart[pr] && V->gstart[pr] <= pq && pq < V->gend[pr]) V->completed[k] = 1;
        else all = 0;
    }
    if (!all) return 0;
    for (i = V->gstart[r]; i < V->gend[r]; i++) {
        pp_action c = s->actions[r][i];
        if (c.op == PP_OP_RECV_F) V->arrived_f[PP__SM(s, c.stage, c.mb)] = 1;
        if (c.op == PP_OP_RECV_B) V->arrived_b[PP__SM(s, c.stage, c.mb)] = 1;
    }
    V->pc[r] = V->gend[r];
    V->gstart[r] = V->gend[r] = -1;
    return 1;
}

/* Step 2 found no rank that can move: names the first three blocked ranks and whom they wait for. */
static pp_status pp__validate_deadlock(const pp__validator *V, pp_error *err)
{
    const pp_schedule *s = V->s;
    pp__text t = { NULL, 0, 0, 0 };
    pp_status st;
    int r, i, shown = 0;
    char txt[64];
    for (r = 0; r < s->pp && shown < 3; r++) {
        if (V->pc[r] >= s->length[r]) continue;
        for (i = V->gstart[r]; i >= 0 && i < V->gend[r]; i++) {
            pp_action c = s->actions[r][i];
            int is_send = c.op == PP_OP_SEND_F || c.op == PP_OP_SEND_B;
            size_t k = pp__comm_key(s, c);
            int peer = is_send ? V->recv_rank[k] : V->send_rank[k];
            if (V->completed[k]) continue;
            pp_action_format(c, txt, sizeof txt);
            pp__text_printf(&t, "%srank %d waits at position %d (%s) for rank %d, which is at position %d",
                            shown ? "; " : "", r, i, txt, peer, V->pc[peer]);
            break;
        }
        shown++;
    }
    st = pp__fail(err, PP_EDEADLOCK, "deadlock (sends wait for their receives): %s", t.data ? t.data : "");
    pp__text_free(&t);
    return st;
}

/* Step 2: runs the programs. Compute needs its inputs already here; a group of consecutive
 * communication actions is posted at once and finishes when every partner is posted
 * (rendezvous: a send waits for its receive). */
static pp_status pp__validate_run(pp__validator *V, pp_error *err)
{
    const pp_schedule *s = V->s;
    pp_status st;
    int r, finished = 0;
    for (r = 0; r < s->pp; r++) { V->gstart[r] = V->gend[r] = -1; if (s->length[r] == 0) finished++; }
    while (finished < s->pp) {
        int progress = 0;
        for (r = 0; r < s->pp; r++) {
            while (V->pc[r] < s->length[r]) {
                pp_action a = s->actions[r][V->pc[r]];
                if (!pp__is_comm(a.op)) {
                    if ((st = pp__validate_compute(V, r, a, err)) != PP_OK) return st;
                    V->pc[r]++;
                    progress = 1;
                    continue;
                }
                if (V->gstart[r] != V->pc[r] && (st = pp__validate_post_group(V, r, err)) != PP_OK) return st;
                if (!pp__validate_group_done(V, r)) break;   /* blocked in this group */
                progress = 1;
            }
            if (V->pc[r] == s->length[r] && V->gstart[r] != -2) { finished++; V->gstart[r] = -2; }
        }
        if (!progress && finished < s->pp) return pp__validate_deadlock(V, err);
    }
    return PP_OK;
}

/* Step 3: every group meets exactly one group of each peer it talks to (NCCL's blocking group
 * call may wait for the peer to enter the matching call: partners spread over two groups of one
 * peer can hang a real run although the send-by-send model of step 2 finishes). */
static pp_status pp__validate_group_pairs(const pp__validator *V, pp_error *err)
{
    const pp_schedule *s = V->s;
    pp_status st = PP_OK;
    int r, i, **gfirst = (int **)pp__calloc((size_t)s->pp, sizeof(int *));   /* [pp][length]: start of each action's group */
    char txt[64];
    if (!gfirst) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < s->pp && st == PP_OK; r++) {
        gfirst[r] = (int *)PIPEPAR_MALLOC((size_t)(s->length[r] > 0 ? s->length[r] : 1) * sizeof(int));
        if (!gfirst[r]) { st = pp__fail(err, PP_ENOMEM, "out of memory"); break; }
        for (i = 0; i < s->length[r];) {
            int e = pp_schedule_group_end(s, r, i), j;
            for (j = i; j < e; j++) gfirst[r][j] = i;
            i = e;
        }
    }
    for (r = 0; r < s->pp && st == PP_OK; r++) {
        for (i = 0; i < s->length[r] && st == PP_OK;) {
            int e = pp_schedule_group_end(s, r, i), j, peers[4], pgroups[4], np = 0;
            if (!pp__is_comm(s->actions[r][i].op)) { i = e; continue; }
            for (j = i; j < e; j++) {
                pp_action c = s->actions[r][j];
                int is_send = c.op == PP_OP_SEND_F || c.op == PP_OP_SEND_B, pr, pq, q;
                size_t k = pp__comm_key(s, c);
                pr = is_send ? V->recv_rank[k] : V->send_rank[k];
                pq = is_send ? V->recv_pos[k] : V->send_pos[k];
                for (q = 0; q < np && peers[q] != pr; q++) {}
                if (q == np && np < 4) { peers[np] = pr; pgroups[np++] = gfirst[pr][pq]; continue; }
                if (q < np && pgroups[q] != gfirst[pr][pq]) {
                    pp_action_format(c, txt, sizeof txt);
                    st = pp__fail(err, PP_EINVALID_SCHEDULE,
                                  "rank %d position %d: %s is in the group that starts at position %d, but its "
                                  "partner on rank %d is in that rank's group at position %d while the group's "
                                  "other partners there are in the group at position %d: each group must meet "
                                  "exactly one group of each peer (NCCL's group calls can hang otherwise; "
                                  "pp_schedule_lower builds such pairs)", r, j, txt, i, pr, gfirst[pr][pq], pgroups[q]);
                    break;
                }
            }
            i = e;
        }
    }
    for (r = 0; r < s->pp; r++) PIPEPAR_FREE(gfirst[r]);
    PIPEPAR_FREE(gfirst);
    return st;
}

/* A lowered schedule is sound: its transfers pair up (step 1), its programs run to the end with
 * sends that wait for their receives (step 2), and its groups pair up as NCCL needs (step 3). */
static pp_status pp__validate_lowered(const pp_schedule *s, pp_error *err)
{
    pp__validator V;
    pp_status st = pp__validator_init(&V, s, err);
    if (st == PP_OK) st = pp__validate_pairs(&V, err);
    if (st == PP_OK) st = pp__validate_run(&V, err);
    if (st == PP_OK) st = pp__validate_group_pairs(&V, err);
    pp__validator_free(&V);
    return st;
}

pp_status pp_schedule_validate(const pp_schedule *s, pp_error *err)
{
    pp_status st;
    int r, i, has_comm = 0;
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    st = pp__check_structure(s, err);
    if (st != PP_OK) return st;
    for (r = 0; r < s->pp && !has_comm; r++)
        for (i = 0; i < s->length[r]; i++)
            if (pp__is_comm(s->actions[r][i].op)) { has_comm = 1; break; }
    if (!has_comm && s->pp > 1) {
        /* compute order only: check it as the lowering pass would lower it */
        pp_schedule *c = NULL;
        st = pp_schedule_copy(s, &c, err);
        if (st != PP_OK) return st;
        st = pp_schedule_lower(c, err);
        if (st == PP_OK) st = pp__validate_lowered(c, err);
        pp_schedule_free(c);
        return st == PP_OK ? pp__ok(err) : st;
    }
    st = pp__validate_lowered(s, err);
    return st == PP_OK ? pp__ok(err) : st;
}


/* ============================================================================================
 * >>zerobubble (implementation): ZB-H1, ZB-H2, ZB-V, DualPipeV, interleaved zero bubble, greedy.
 * ============================================================================================ */

/* Appends one compute action to rank r's program, dropping the halves whose microbatch does not
 * exist: zbv and dualpipev are built for at least 2*pp-1 (2*pp) microbatches and then cut back
 * to mb, the way PyTorch's ScheduleZBVZeroBubble replaces them with idle steps. An FB that loses
 * one half becomes the plain F or B that is left. */
static pp_status pp__zb_put(pp_schedule *s, int r, pp_action a, pp_error *err)
{
    if (a.op == PP_OP_FB) {
        int f_ok = a.mb < s->mb, b_ok = a.mb2 < s->mb;
        if (f_ok && b_ok) return pp_schedule_append(s, r, a, err);
        if (f_ok) return pp_schedule_append(s, r, pp__action(PP_OP_F, a.stage, a.mb), err);
        if (b_ok) return pp_schedule_append(s, r, pp__action(PP_OP_B, a.stage2, a.mb2), err);
        return PP_OK;
    }
    if (a.mb >= s->mb) return PP_OK;
    return pp_schedule_append(s, r, a, err);
}

/* The W's a rank still owes, oldest first (every generator here runs W in the order of its I's,
 * as PyTorch's schedules and the paper's WeightGradStore queue do). */
typedef struct pp__wfifo {
    int *stage, *mb;
    int head, tail, cap;
} pp__wfifo;

static int pp__wfifo_init(pp__wfifo *q, int cap)
{
    q->stage = (int *)pp__calloc((size_t)cap, sizeof(int));
    q->mb = (int *)pp__calloc((size_t)cap, sizeof(int));
    q->head = q->tail = 0;
    q->cap = cap;
    if (q->stage && q->mb) return 1;
    PIPEPAR_FREE(q->stage); PIPEPAR_FREE(q->mb);   /* one of the two may have succeeded */
    q->stage = q->mb = NULL;
    return 0;
}

static void pp__wfifo_free(pp__wfifo *q)
{
    PIPEPAR_FREE(q->stage); PIPEPAR_FREE(q->mb);
    q->stage = q->mb = NULL;
}

static void pp__wfifo_push(pp__wfifo *q, int stage, int mb)
{
    PIPEPAR_ASSERT(q->tail < q->cap);
    q->stage[q->tail] = stage; q->mb[q->tail] = mb; q->tail++;
}

/* Emits the oldest pending W, if there is one. */
static pp_status pp__wfifo_pop(pp__wfifo *q, pp_schedule *s, int r, pp_error *err)
{
    pp_action a;
    if (q->head == q->tail) return PP_OK;
    a = pp__action(PP_OP_W, q->stage[q->head], q->mb[q->head]);
    q->head++;
    return pp__zb_put(s, r, a, err);
}

#define PP__ZB_PUT(op_, stage_, mb_) \
    do { st = pp__zb_put(s, r, pp__action((op_), (stage_), (mb_)), err); if (st != PP_OK) goto done; } while (0)
#define PP__ZB_I(stage_, mb_) \
    do { PP__ZB_PUT(PP_OP_I, (stage_), (mb_)); pp__wfifo_push(&q, (stage_), (mb_)); } while (0)
#define PP__ZB_W() \
    do { st = pp__wfifo_pop(&q, s, r, err); if (st != PP_OK) goto done; } while (0)

/* --- interleaved zero bubble (and ZB-H1, its one-chunk case) -------------------------------
 * PyTorch 2.11 ScheduleInterleavedZeroBubble (_calculate_single_rank_operations with
 * _get_1f1b_rank_ops(enable_zero_bubble=True)), compute order only: the k-th forward of a rank
 * runs chunk (k / G) % vpp on the next microbatch of that chunk, the k-th backward (an I) the
 * mirrored chunk vpp-1-((k / G) % vpp); rank r first runs
 *     warmup = (vpp-1)*G + (pp-1-r)      forwards (capped at mb*vpp),
 * then F,I pairs, then the remaining I's; after the j-th I of those phases (j counted from 0)
 * it runs its oldest pending W when j >= r, so rank r holds back r W's (the ZB1P / ZB-H1 rule,
 * "num_1f1b_microbatches = rank"), and it ends with the W's still pending. G is PyTorch's
 * microbatches_per_round. With G dividing mb this is PyTorch's order exactly; a G that does not
 * divide mb (PyTorch refuses it) leaves a last, smaller round, as Megatron-LM's table does, and
 * a G above mb means one round of all mb. With vpp = 1 the chunk never changes and rank r runs
 *     F^(pp-1-r), then (F I) r times, then (F I W) ..., then (I W) ..., then W's:
 * the paper's ZB-H1 (Figure 3, top), e.g. pp=4: rank 3 = F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1. */
static pp_status pp__build_interleaved_zb(pp_schedule *s, int G, pp_error *err)
{
    pp_status st = PP_OK;
    int total = s->mb * s->vpp, r, n = 0, lo;
    int *table_mb = (int *)pp__calloc((size_t)total, sizeof(int));
    int *table_chunk = (int *)pp__calloc((size_t)total, sizeof(int));
    pp__wfifo q = { NULL, NULL, 0, 0, 0 };
    if (G > s->mb) G = s->mb;
    if (!table_mb || !table_chunk || !pp__wfifo_init(&q, total)) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
        goto done;
    }
    for (lo = 0; lo < s->mb; lo += G) {
        int hi = lo + G < s->mb ? lo + G : s->mb, c, m;
        for (c = 0; c < s->vpp; c++)
            for (m = lo; m < hi; m++) { table_mb[n] = m; table_chunk[n] = c; n++; }
    }
    PIPEPAR_ASSERT(n == total);
    for (r = 0; r < s->pp; r++) {
        int warmup = (s->vpp - 1) * G + (s->pp - 1 - r), op, f = 0, b = 0;
        if (warmup > total) warmup = total;
        q.head = q.tail = 0;
        for (op = 0; op < total + warmup; op++) {
            if (op < total) {
                PP__ZB_PUT(PP_OP_F, pp_rank_chunk_stage(s, r, table_chunk[f]), table_mb[f]);
                f++;
            }
            if (op >= warmup) {
                PP__ZB_I(pp_rank_chunk_stage(s, r, s->vpp - 1 - table_chunk[b]), table_mb[b]);
                b++;
                if (op - warmup >= r) PP__ZB_W();
            }
        }
        while (q.head < q.tail) PP__ZB_W();
    }
done:
    PIPEPAR_FREE(table_mb); PIPEPAR_FREE(table_chunk);
    pp__wfifo_free(&q);
    return st;
}

/* --- ZB-H2 ------------------------------------------------------------------------------------
 * The paper's ZB-H2 (section 2.2, Figure 3 bottom), written for any cap L = max_live on live
 * activations per rank (pp <= L; the paper's is 2*pp-1). Rank r runs
 *     w = min(mb, 2(pp-r)-1, L-r) warmup F's         (2(pp-r)-1: what fits before its first I
 *                                                     arrives when F = I = W)
 *     (I F) pairs until L are live (min(L-w, mb-w))  (holding W's back)
 *     (I W F) until the F's run out                  (steady: memory stays at L)
 *     (I W) until the I's run out, then the last W's.
 * For pp=4, mb=8, L=7 this is Figure 3's picture: rank 0 = F0..F6 I0 W0 F7 I1 W1 ... I7 W7 and
 * rank 3 = F0 I0 F1 I1 ... F6 I6 W0 F7 I7 W1 W2 ... W7, a parallelogram with no idle time inside
 * any rank. With L = pp the rule gives ZB-H1's order back. With F, I, W and the p2p time of the
 * paper's Table 9 the simulator reproduces the ZB-H2 bubble rates of its Table 5 (tests). A cap
 * above 2*pp-1 is lowered to it: more would only hold W's back for nothing. */
static pp_status pp__build_zb_h2(pp_schedule *s, int L, pp_error *err)
{
    pp_status st = PP_OK;
    int r;
    pp__wfifo q = { NULL, NULL, 0, 0, 0 };
    if (!pp__wfifo_init(&q, s->mb)) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < s->pp; r++) {
        int w = s->mb, pairs, f = 0, b = 0, k;
        if (2 * (s->pp - r) - 1 < w) w = 2 * (s->pp - r) - 1;
        if (L - r < w) w = L - r;
        pairs = L - w < s->mb - w ? L - w : s->mb - w;
        q.head = q.tail = 0;
        for (; f < w; f++) PP__ZB_PUT(PP_OP_F, r, f);
        for (k = 0; k < pairs; k++) { PP__ZB_I(r, b); b++; PP__ZB_PUT(PP_OP_F, r, f); f++; }
        for (; f < s->mb; f++) { PP__ZB_I(r, b); b++; PP__ZB_W(); PP__ZB_PUT(PP_OP_F, r, f); }
        for (; b < s->mb; b++) { PP__ZB_I(r, b); PP__ZB_W(); }
        while (q.head < q.tail) PP__ZB_W();
    }
done:
    pp__wfifo_free(&q);
    return st;
}

/* --- ZB-V ---------------------------------------------------------------------------------------
 * PyTorch 2.11 ScheduleZBVZeroBubble._calculate_single_rank_operations, compute order only (the
 * paper's ZB-V, section 6 and Figure 8). Rank r holds stage r (chunk 0) and 2pp-1-r (chunk 1);
 * with n = max(2pp-1, mb) microbatches it runs
 *     2(pp-r)-1 F0;  r x (F1 F0);  pp-r x (F1 I1 W1);
 *     steady, while chunk 1 lags chunk 0 or chunk 0 has microbatches left:
 *         [F0 if any left] I0 W0 F1 I1 W1;
 *     r x (I0 I1);  pp-r x (I0 W0);  then the W1's, then the W0's still pending,
 * and drops every action of a microbatch >= mb (PyTorch turns them into idle steps). */
static pp_status pp__build_zbv(pp_schedule *s, pp_error *err)
{
    pp_status st = PP_OK;
    int pp = s->pp, n = s->mb > 2 * s->pp - 1 ? s->mb : 2 * s->pp - 1, r, k;
    for (r = 0; r < pp; r++) {
        int s0 = r, s1 = 2 * pp - 1 - r, f0 = 0, f1 = 0, b0 = 0, b1 = 0, w0, w1;
        for (k = 0; k < 2 * (pp - r) - 1; k++) { PP__ZB_PUT(PP_OP_F, s0, f0); f0++; }
        for (k = 0; k < r; k++) {
            PP__ZB_PUT(PP_OP_F, s1, f1); f1++;
            PP__ZB_PUT(PP_OP_F, s0, f0); f0++;
        }
        for (k = 0; k < pp - r; k++) {
            PP__ZB_PUT(PP_OP_F, s1, f1); f1++;
            PP__ZB_PUT(PP_OP_I, s1, b1); PP__ZB_PUT(PP_OP_W, s1, b1); b1++;
        }
        while (f1 < f0 || f0 < n) {
            if (f0 < n) { PP__ZB_PUT(PP_OP_F, s0, f0); f0++; }
            PP__ZB_PUT(PP_OP_I, s0, b0); PP__ZB_PUT(PP_OP_W, s0, b0); b0++;
            PP__ZB_PUT(PP_OP_F, s1, f1); f1++;
            PP__ZB_PUT(PP_OP_I, s1, b1); PP__ZB_PUT(PP_OP_W, s1, b1); b1++;
        }
        w0 = b0; w1 = b1;
        for (k = 0; k < r; k++) {
            PP__ZB_PUT(PP_OP_I, s0, b0); b0++;
            PP__ZB_PUT(PP_OP_I, s1, b1); b1++;
        }
        for (k = 0; k < pp - r; k++) {
            PP__ZB_PUT(PP_OP_I, s0, b0); b0++;
            PP__ZB_PUT(PP_OP_W, s0, w0); w0++;
        }
        for (; w1 < b1; w1++) PP__ZB_PUT(PP_OP_W, s1, w1);
        for (; w0 < b0; w0++) PP__ZB_PUT(PP_OP_W, s0, w0);
        PIPEPAR_ASSERT(f0 == n && f1 == n && b0 == n && b1 == n);
    }
done:
    return st;
}

/* --- DualPipeV ------------------------------------------------------------------------------
 * PyTorch 2.11 ScheduleDualPipeV._calculate_single_rank_operations (a port of DeepSeek's
 * dualpipev.py step()), compute order only. Chunk 0 is stage r, chunk 1 stage 2pp-1-r; "B" is a
 * full backward, "I" an input-gradient backward whose W joins a FIFO, "FB" an F of one chunk
 * overlapped with a full B of the other. Rank r runs, for n = max(mb, 2pp) microbatches:
 *     1. 2(pp-r-1) x F0            2. r+1 x (F0 F1)           3. pp-r-1 x (I1 W F1)
 *     4. n-2pp+r+1 x (FB(F0,B1) FB(F1,B0)); the last rank's first pair is F0, B1 unoverlapped
 *     5. pp-r-1 x (B1 FB(F1,B0))
 *     6. r+1 x (B1 B0), switching to I from the middle on (for odd r before the B1 of step
 *        (r+1)/2, for even r before its B0)
 *     7. pp-r-1 x (W I0)          8. r+1 x W
 * (each W is the oldest pending one). Microbatches >= mb are then dropped; see the header. */
static pp_status pp__build_dualpipev(pp_schedule *s, pp_error *err)
{
    pp_status st = PP_OK;
    int pp = s->pp, n = s->mb > 2 * s->pp ? s->mb : 2 * s->pp, r, k;
    pp__wfifo q = { NULL, NULL, 0, 0, 0 };
    if (!pp__wfifo_init(&q, 2 * n)) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < pp; r++) {
        int stage[2], fwd[2] = { 0, 0 }, bwd[2] = { 0, 0 }, zb = 0, steps4 = n - 2 * pp + r + 1;
        stage[0] = r; stage[1] = 2 * pp - 1 - r;
        q.head = q.tail = 0;
#define PP__DPV_F(c) do { PP__ZB_PUT(PP_OP_F, stage[c], fwd[c]); fwd[c]++; } while (0)
#define PP__DPV_B(c, split) \
        do { if (split) PP__ZB_I(stage[c], bwd[c]); else PP__ZB_PUT(PP_OP_B, stage[c], bwd[c]); bwd[c]++; } while (0)
#define PP__DPV_FB(cf, cb) \
        do { pp_action fb_ = pp__action(PP_OP_FB, stage[cf], fwd[cf]); \
             fb_.stage2 = stage[cb]; fb_.mb2 = bwd[cb]; fwd[cf]++; bwd[cb]++; \
             st = pp__zb_put(s, r, fb_, err); if (st != PP_OK) goto done; } while (0)
        for (k = 0; k < 2 * (pp - r - 1); k++) PP__DPV_F(0);
        for (k = 0; k < r + 1; k++) { PP__DPV_F(0); PP__DPV_F(1); }
        for (k = 0; k < pp - r - 1; k++) { PP__DPV_B(1, 1); PP__ZB_W(); PP__DPV_F(1); }
        for (k = 0; k < steps4; k++) {
            if (k == 0 && r == pp - 1) { PP__DPV_F(0); PP__DPV_B(1, 0); }
            else PP__DPV_FB(0, 1);
            PP__DPV_FB(1, 0);
        }
        for (k = 0; k < pp - r - 1; k++) { PP__DPV_B(1, 0); PP__DPV_FB(1, 0); }
        for (k = 0; k < r + 1; k++) {
            if (k == (r + 1) / 2 && r % 2 == 1) zb = 1;
            PP__DPV_B(1, zb);
            if (k == (r + 1) / 2 && r % 2 == 0) zb = 1;
            PP__DPV_B(0, zb);
        }
        for (k = 0; k < pp - r - 1; k++) { PP__ZB_W(); PP__DPV_B(0, zb); }
        for (k = 0; k < r + 1; k++) PP__ZB_W();
#undef PP__DPV_F
#undef PP__DPV_B
#undef PP__DPV_FB
        PIPEPAR_ASSERT(fwd[0] == n && fwd[1] == n && bwd[0] == n && bwd[1] == n && q.head == q.tail);
    }
done:
    pp__wfifo_free(&q);
    return st;
}

/* --- DualPipe -------------------------------------------------------------------------------
 * deepseek-ai/DualPipe, dualpipe.py DualPipe.step(), compute order only. The model's pp stages
 * run as two pipelines (placement PP_PLACEMENT_DUAL): microbatches 0..mb/2-1 down from rank 0
 * (stage r on rank r), microbatches mb/2..mb-1 up from rank pp-1 (stage pp+j on rank pp-1-j). Rank
 * r's "phase 0" is the direction that starts on its side of the middle (down for r < pp/2, up
 * for the rest) and "phase 1" the other; h = min(r, pp-1-r) is its distance from the nearer end,
 * H = pp/2. With n = max(mb/2, pp) microbatches per direction, rank r runs:
 *     1. 2(H-h-1) x F0             2. h+1 x (F0 F1)            3. H-h-1 x (I1 W F1)
 *     4. n-pp+h+1 x (FB(F0,B1) FB(F1,B0)); on the two middle ranks (h = H-1) the first pair is
 *        F0, B1 unoverlapped ("to further reduce bubble size", dualpipe.py)
 *     5. H-h-1 x (B1 FB(F1,B0))
 *     6. h+1 x (B1 B0), switching to I from the middle on (for odd h before the B1 of step
 *        (h+1)/2, for even h before its B0)
 *     7. H-h-1 x (W I0)            8. h+1 x W
 * F, B of one direction run its microbatches in order; each W is the oldest pending one (the
 * WeightGradStore queue). This is DualPipeV's program (>>zerobubble, DualPipeV) with the V's two
 * chunks replaced by the two directions and the V's last rank by the two middle ranks.
 *
 * mb. dualpipe.py asserts num_ranks even, num_chunks even and num_chunks >= 2 * num_ranks: its
 * step 4 starts by consuming the forward receive that step 2 left posted, so every rank must run
 * step 4 at least once, n - pp + h + 1 >= 1 at h = 0, i.e. mb/2 >= pp. As for DualPipeV, pipepar
 * derives the communication from the compute order, so it needs only the even counts: below
 * 2*pp it builds the order for n = pp per direction and drops the microbatches that do not
 * exist (an FB losing a half becomes the plain F or B left), which keeps every dependency of
 * the rest. */
static pp_status pp__dp_put(pp_schedule *s, int r, pp_action a, pp_error *err)
{
    if (a.op == PP_OP_FB) {
        if (a.mb >= 0 && a.mb2 >= 0) return pp_schedule_append(s, r, a, err);
        if (a.mb >= 0) return pp_schedule_append(s, r, pp__action(PP_OP_F, a.stage, a.mb), err);
        if (a.mb2 >= 0) return pp_schedule_append(s, r, pp__action(PP_OP_B, a.stage2, a.mb2), err);
        return PP_OK;
    }
    return a.mb < 0 ? PP_OK : pp_schedule_append(s, r, a, err);
}

static pp_status pp__build_dualpipe(pp_schedule *s, pp_error *err)
{
    pp_status st = PP_OK;
    int pp = s->pp, H = s->pp / 2, half = s->mb / 2, n = half > pp ? half : pp, r, k;
    pp__wfifo q = { NULL, NULL, 0, 0, 0 };
    if (!pp__wfifo_init(&q, 2 * n)) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < pp; r++) {
        /* per phase c: its direction's stage on this rank and first global microbatch */
        int h = r < pp - 1 - r ? r : pp - 1 - r, second = r >= H, stage[2], base[2];
        int fwd[2] = { 0, 0 }, bwd[2] = { 0, 0 }, zb = 0, steps4 = n - pp + h + 1;
        stage[0] = second ? 2 * pp - 1 - r : r;  base[0] = second ? half : 0;
        stage[1] = second ? r : 2 * pp - 1 - r;  base[1] = second ? 0 : half;
        q.head = q.tail = 0;
/* global microbatch of the k-th of phase c, or -1 where it does not exist (k >= mb/2) */
#define PP__DP_MB(c, k) ((k) < half ? base[c] + (k) : -1)
#define PP__DP_F(c) \
        do { st = pp__dp_put(s, r, pp__action(PP_OP_F, stage[c], PP__DP_MB(c, fwd[c])), err); fwd[c]++; \
             if (st != PP_OK) goto done; } while (0)
#define PP__DP_B(c, split) \
        do { int m_ = PP__DP_MB(c, bwd[c]); bwd[c]++; \
             st = pp__dp_put(s, r, pp__action((split) ? PP_OP_I : PP_OP_B, stage[c], m_), err); \
             if (st != PP_OK) goto done; \
             if (split) pp__wfifo_push(&q, stage[c], m_); } while (0)
#define PP__DP_W() \
        do { if (q.head < q.tail) { int m_ = q.mb[q.head], s_ = q.stage[q.head]; q.head++; \
             st = pp__dp_put(s, r, pp__action(PP_OP_W, s_, m_), err); if (st != PP_OK) goto done; } } while (0)
#define PP__DP_FB(cf, cb) \
        do { pp_action fb_ = pp__action(PP_OP_FB, stage[cf], PP__DP_MB(cf, fwd[cf])); \
             fb_.stage2 = stage[cb]; fb_.mb2 = PP__DP_MB(cb, bwd[cb]); fwd[cf]++; bwd[cb]++; \
             st = pp__dp_put(s, r, fb_, err); if (st != PP_OK) goto done; } while (0)
        for (k = 0; k < 2 * (H - h - 1); k++) PP__DP_F(0);
        for (k = 0; k < h + 1; k++) { PP__DP_F(0); PP__DP_F(1); }
        for (k = 0; k < H - h - 1; k++) { PP__DP_B(1, 1); PP__DP_W(); PP__DP_F(1); }
        for (k = 0; k < steps4; k++) {
            if (k == 0 && h == H - 1) { PP__DP_F(0); PP__DP_B(1, 0); }
            else PP__DP_FB(0, 1);
            PP__DP_FB(1, 0);
        }
        for (k = 0; k < H - h - 1; k++) { PP__DP_B(1, 0); PP__DP_FB(1, 0); }
        for (k = 0; k < h + 1; k++) {
            if (k == (h + 1) / 2 && h % 2 == 1) zb = 1;
            PP__DP_B(1, zb);
            if (k == (h + 1) / 2 && h % 2 == 0) zb = 1;
            PP__DP_B(0, zb);
        }
        for (k = 0; k < H - h - 1; k++) { PP__DP_W(); PP__DP_B(0, 1); }
        for (k = 0; k < h + 1; k++) PP__DP_W();
#undef PP__DP_MB
#undef PP__DP_F
#undef PP__DP_B
#undef PP__DP_W
#undef PP__DP_FB
        PIPEPAR_ASSERT(fwd[0] == n && fwd[1] == n && bwd[0] == n && bwd[1] == n && q.head == q.tail);
    }
done:
    pp__wfifo_free(&q);
    return st;
}

/* --- dispatch (called by pp_schedule_build, which already checked pp, mb, vpp, group) -------- */
static pp_status pp__build_zero_bubble(const pp_schedule_config *cfg, pp_schedule *s, pp_error *err)
{
    const char *kn = pp_schedule_kind_name(cfg->kind);
    if (cfg->max_live && cfg->kind != PP_ZB_H2)
        return pp__fail(err, PP_EUNSUPPORTED,
                        "max_live=%d: %s has a fixed memory profile and takes no cap (zb-h2 and the greedy "
                        "schedule of pp_search do)", cfg->max_live, kn);
    switch (cfg->kind) {
    case PP_ZB_H1:
        return pp__build_interleaved_zb(s, s->mb, err);
    case PP_ZB_H2: {
        int L = cfg->max_live ? cfg->max_live : 2 * s->pp - 1;
        if (L < s->pp)
            return pp__fail(err, PP_EUNSUPPORTED,
                            "max_live=%d: zb-h2 needs at least pp=%d live activations per rank (1F1B's "
                            "in-flight forwards; 2*pp-1=%d removes the bubble)", L, s->pp, 2 * s->pp - 1);
        if (L > 2 * s->pp - 1) L = 2 * s->pp - 1;   /* the parallelogram never needs more */
        return pp__build_zb_h2(s, L, err);
    }
    case PP_ZBV:
        return pp__build_zbv(s, err);
    case PP_DUALPIPEV:
        return pp__build_dualpipev(s, err);
    case PP_DUALPIPE:
        return pp__build_dualpipe(s, err);
    case PP_INTERLEAVED_ZB:
        /* A round smaller than pp (and than mb) lets a rank reach the next chunk, or its first I,
         * before the microbatch it needs went round the ring: the order deadlocks for some pp, vpp,
         * mb (e.g. pp=4 vpp=3 group=1). Rounds of >= pp, or one round of everything, never do
         * (checked for pp <= 8, vpp <= 8, mb <= 40); PyTorch's own choice is always one of them. */
        if (s->vpp > 1 && s->group < s->pp && s->group < s->mb)
            return pp__fail(err, PP_EUNSUPPORTED,
                            "group=%d: interleaved-zb needs rounds of at least pp=%d microbatches (or one round of "
                            "all mb=%d); PyTorch uses mb/max(1, mb/pp) = %d", s->group, s->pp, s->mb,
                            s->mb / (s->mb / s->pp > 1 ? s->mb / s->pp : 1));
        return pp__build_interleaved_zb(s, s->group, err);
    default:
        return pp__fail(err, PP_EINVAL, "kind %s: not a zero-bubble kind", kn);
    }
}


/* ============================================================================================
 * >>simulate (implementation)
 * ============================================================================================ */

pp_status pp_schedule_rank_peaks(const pp_schedule *s, int rank, const int *stage_class, int classes,
                                 int *live_peak, int *awaiting_w_peak, pp_error *err)
{
    int *live = NULL, *awaiting = NULL, c, i;
    if (!s) return pp__fail(err, PP_EINVAL, "s: must not be NULL");
    if (rank < 0 || rank >= s->pp)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and pp-1=%d", rank, s->pp - 1);
    if (classes < 1 || classes > (1 << 20))
        return pp__fail(err, PP_EINVAL, "classes=%d: must be between 1 and %d", classes, 1 << 20);
    if (stage_class)
        for (i = 0; i < s->num_stages; i++)
            if (stage_class[i] < 0 || stage_class[i] >= classes)
                return pp__fail(err, PP_EINVAL, "stage_class[%d]=%d: must be between 0 and classes-1=%d", i,
                                stage_class[i], classes - 1);
    if (!stage_class) classes = 1;   /* every stage in class 0: only [0] is written */
    live = (int *)pp__calloc((size_t)classes * 2, sizeof(int));
    if (!live) return pp__fail(err, PP_ENOMEM, "out of memory");
    awaiting = live + classes;
    if (live_peak) memset(live_peak, 0, (size_t)classes * sizeof(int));
    if (awaiting_w_peak) memset(awaiting_w_peak, 0, (size_t)classes * sizeof(int));
    for (i = 0; i < s->length[rank]; i++) {
        pp_action a = s->actions[rank][i];
        int ops[2], stg[2], mbs[2], h, nh;
        if (pp__is_comm(a.op)) continue;
        nh = pp__halves(a, ops, stg, mbs);
        for (h = 0; h < nh; h++) {
            if (stg[h] < 0 || stg[h] >= s->num_stages) {
                PIPEPAR_FREE(live);
                return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: stage %d out of range (%d stages)",
                                rank, i, stg[h], s->num_stages);
            }
            c = stage_class ? stage_class[stg[h]] : 0;
            switch (ops[h]) {
            case PP_OP_F:
                if (++live[c] > (live_peak ? live_peak[c] : 0) && live_peak) live_peak[c] = live[c];
                break;
            case PP_OP_I:
                if (++awaiting[c] > (awaiting_w_peak ? awaiting_w_peak[c] : 0) && awaiting_w_peak)
                    awaiting_w_peak[c] = awaiting[c];
                break;
            case PP_OP_W: live[c]--; awaiting[c]--; break;
            default: live[c]--; break;   /* a whole B */
            }
        }
    }
    PIPEPAR_FREE(live);
    return PP_OK;
}

void pp_sim_result_free(pp_sim_result *r)
{
    int k;
    if (!r) return;
    if (r->start) for (k = 0; k < r->pp; k++) PIPEPAR_FREE(r->start[k]);
    if (r->end) for (k = 0; k < r->pp; k++) PIPEPAR_FREE(r->end[k]);
    PIPEPAR_FREE(r->start); PIPEPAR_FREE(r->end);
    PIPEPAR_FREE(r->busy); PIPEPAR_FREE(r->bubble); PIPEPAR_FREE(r->peak_live);
    PIPEPAR_FREE(r->peak_memory); PIPEPAR_FREE(r->length);
    PIPEPAR_FREE(r);
}

/* Cost of one compute half on a stage. Scalar costs are for a rank's whole share of the model,
 * so a chunk of a vpp-chunk rank costs 1/vpp of them; per-stage arrays are taken as they are.
 * Under the dual placement (DualPipe) each of a rank's two chunks is a whole model stage (the
 * rank holds its share twice, once per direction): a chunk costs the full share. */
static double pp__half_cost(const pp_schedule *s, const pp_sim_costs *c, int op, int stage)
{
    /* a full backward is its two halves when only those were given, else twice the forward */
    double f = c->f > 0 ? c->f : 1.0, i = c->i, w = c->w;
    double b = c->b > 0 ? c->b : (i > 0 || w > 0 ? i + w : 2.0 * f);
    double v = s->placement == PP_PLACEMENT_DUAL ? 1.0 : (double)s->vpp;
    double speed = c->rank_speed ? c->rank_speed[pp_stage_rank(s, stage)] : 1.0;
    if (i <= 0 && w <= 0) { i = b / 2; w = b / 2; }
    switch (op) {
    case PP_OP_F: return (c->f_stage ? c->f_stage[stage] : f / v) / speed;
    case PP_OP_B: return (c->b_stage ? c->b_stage[stage] : b / v) / speed;
    case PP_OP_I: return (c->i_stage ? c->i_stage[stage] : i / v) / speed;
    default:      return (c->w_stage ? c->w_stage[stage] : w / v) / speed;
    }
}

/* costs->rank_speed, when given: pp entries, each from PP__SPEED_MIN to PP__SPEED_MAX. */
static pp_status pp__check_rank_speed(const pp_sim_costs *costs, int pp, pp_error *err)
{
    int r;
    for (r = 0; costs && costs->rank_speed && r < pp; r++)
        if (!(costs->rank_speed[r] >= PP__SPEED_MIN && costs->rank_speed[r] <= PP__SPEED_MAX))
            return pp__fail(err, PP_EINVAL, "costs: rank_speed[%d]=%g: must be a finite number > 0, from %g to %g "
                            "(1: the speed the costs are given at)", r, costs->rank_speed[r], PP__SPEED_MIN,
                            PP__SPEED_MAX);
    return PP_OK;
}

/* Grouped transfers (costs->grouped): each rank's communication actions in the groups the
 * lowering made, flat over all ranks (rank r's groups from gofs[r]); with grouped 2, each such
 * group split by peer. A group is posted when its rank reaches it (posting never blocks; the
 * group then waits on the device for the compute before it, which is t[r] then), heads its
 * stream once the group before it there ended (grouped 1: the rank's previous group; 2: its
 * previous group with the same peer), and starts once it and every peer's matching group head
 * their streams. */
typedef struct pp__sim_groups {
    int *gid;          /* [sum of lengths]: group of each communication action (pos_ofs[r] + i); -1 compute */
    int *pos_ofs;      /* [pp] */
    int *gofs, *ng;    /* [pp]: rank r's groups are gofs[r] .. gofs[r] + ng[r] - 1 */
    int *next;         /* [pp]: rank r's first group not yet resolved */
    int *first, *last; /* [groups]: the first and last positions of the group's actions in its rank's
                          program (grouped 2: others' between them) */
    int *prev;         /* [groups]: the group before it on its stream, -1 none */
    double *posted;    /* [groups]: time posted, -1 before */
    double *end;       /* [groups]: -1 before it is resolved */
} pp__sim_groups;

static void pp__sim_groups_free(pp__sim_groups *G)
{
    PIPEPAR_FREE(G->gid); PIPEPAR_FREE(G->pos_ofs); PIPEPAR_FREE(G->gofs); PIPEPAR_FREE(G->ng);
    PIPEPAR_FREE(G->next); PIPEPAR_FREE(G->first); PIPEPAR_FREE(G->last); PIPEPAR_FREE(G->prev);
    PIPEPAR_FREE(G->posted); PIPEPAR_FREE(G->end);
}

/* The peer of a communication action: the rank of the stage on the other end (the simulator's
 * groups and the executor's posts per peer). */
static int pp__comm_peer(const pp_schedule *s, pp_action a)
{
    return pp_stage_rank(s, a.op == PP_OP_SEND_F || a.op == PP_OP_RECV_B ? a.stage + 1 : a.stage - 1);
}

static int pp__sim_groups_init(const pp_schedule *s, int per_peer, pp__sim_groups *G)
{
    int r, i, total = 0, groups = 0;
    memset(G, 0, sizeof *G);
    for (r = 0; r < s->pp; r++) total += s->length[r];
    G->gid = (int *)PIPEPAR_MALLOC((size_t)(total + 1) * sizeof(int));
    G->pos_ofs = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    G->gofs = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    G->ng = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    G->next = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    G->first = (int *)PIPEPAR_MALLOC((size_t)(total + 1) * sizeof(int));
    G->last = (int *)PIPEPAR_MALLOC((size_t)(total + 1) * sizeof(int));
    G->prev = (int *)PIPEPAR_MALLOC((size_t)(total + 1) * sizeof(int));
    G->posted = (double *)PIPEPAR_MALLOC((size_t)(total + 1) * sizeof(double));
    G->end = (double *)PIPEPAR_MALLOC((size_t)(total + 1) * sizeof(double));
    if (!G->gid || !G->pos_ofs || !G->gofs || !G->ng || !G->next || !G->first || !G->last || !G->prev || !G->posted ||
        !G->end)
        return 0;
    total = 0;
    for (r = 0; r < s->pp; r++) {
        G->pos_ofs[r] = total;
        G->gofs[r] = groups;
        for (i = 0; i < s->length[r];) {
            int e = pp_schedule_group_end(s, r, i), j, k;
            if (!pp__is_comm(s->actions[r][i].op)) { G->gid[total + i] = -1; i++; continue; }
            for (j = i; j < e; j++) G->gid[total + j] = -1;
            for (j = i; j < e; j++) {   /* one group, or (per_peer) one per peer in first-use order */
                int peer = pp__comm_peer(s, s->actions[r][j]), h;
                if (G->gid[total + j] >= 0) continue;
                G->first[groups] = j; G->last[groups] = j;
                G->posted[groups] = -1; G->end[groups] = -1; G->prev[groups] = -1;
                for (k = j; k < e; k++)
                    if (!per_peer || pp__comm_peer(s, s->actions[r][k]) == peer) {
                        G->gid[total + k] = groups;
                        G->last[groups] = k;
                    }
                for (h = groups - 1; h >= G->gofs[r]; h--)   /* the group before it on its stream */
                    if (!per_peer || pp__comm_peer(s, s->actions[r][G->first[h]]) == peer) {
                        G->prev[groups] = h;
                        break;
                    }
                groups++;
                G->ng[r]++;
            }
            i = e;
        }
        total += s->length[r];
    }
    return 1;
}

/* The simulator's state for one pp_simulate call. Transfers are indexed by pp__comm_key. */
typedef struct pp__sim {
    const pp_schedule *s;                   /* lowered */
    const pp_sim_costs *c;
    pp_sim_result *res;                     /* filled as actions are timed */
    double *post_send, *post_recv;          /* [nkeys] when each end of a transfer was posted; -1 before */
    int *send_r, *send_p, *recv_r, *recv_p; /* [nkeys] rank and position of each end; rank -1: unknown yet */
    double *arr_f, *arr_b;                  /* [plane] when the RECV_F / RECV_B of (stage, mb) completed */
    unsigned char *arrived_f, *arrived_b;   /* [plane] whether it has */
    double *t;                              /* [pp] when each rank's compute stream is free */
    int *pc;                                /* [pp] each rank's next action */
    pp__progress prog;
    pp__sim_groups groups;                  /* costs->grouped only */
    double t0, t1;                          /* first compute start, last compute end */
    double **tail;                          /* costs->tail_stage only: [pp][length] the work after the
                                               action there (its stage's last backward), else 0 */
    double *tail_due;                       /* [pp] that work, before the rank's next compute */
} pp__sim;

static void pp__sim_free(pp__sim *S)
{
    int r;
    PIPEPAR_FREE(S->post_send); PIPEPAR_FREE(S->post_recv); PIPEPAR_FREE(S->send_r); PIPEPAR_FREE(S->send_p);
    PIPEPAR_FREE(S->recv_r); PIPEPAR_FREE(S->recv_p); PIPEPAR_FREE(S->arr_f); PIPEPAR_FREE(S->arr_b);
    PIPEPAR_FREE(S->arrived_f); PIPEPAR_FREE(S->arrived_b); PIPEPAR_FREE(S->t); PIPEPAR_FREE(S->pc);
    pp__sim_groups_free(&S->groups);
    pp__progress_free(&S->prog);
    pp_sim_result_free(S->res);
    if (S->tail)
        for (r = 0; r < S->s->pp; r++) PIPEPAR_FREE(S->tail[r]);
    PIPEPAR_FREE(S->tail); PIPEPAR_FREE(S->tail_due);
}

/* A RECV (rv) completed at `end`: its tensor is here for the compute that needs it. */
static void pp__sim_arrive(pp__sim *S, pp_action rv, double end)
{
    size_t ck = PP__SM(S->s, rv.stage, rv.mb);
    if (rv.op == PP_OP_RECV_F) { S->arr_f[ck] = end; S->arrived_f[ck] = 1; }
    if (rv.op == PP_OP_RECV_B) { S->arr_b[ck] = end; S->arrived_b[ck] = 1; }
}

/* Resolves every group that can be: in order on each rank, once it and its peers' matching
 * groups are posted and their previous groups over. Its receives then land at its end. */
static void pp__sim_groups_resolve(pp__sim *S)
{
    const pp_schedule *s = S->s;
    pp__sim_groups *G = &S->groups;
    int changed = 1, r;
    while (changed) {
        changed = 0;
        for (r = 0; r < s->pp; r++) {
            int g;
            for (g = G->gofs[r] + G->next[r]; g < G->gofs[r] + G->ng[r]; g++) {
                int i, ok = 1, sends = 0, recvs = 0;
                double begin, dur;
                if (G->end[g] >= 0) continue;
                if (G->posted[g] < 0) break;   /* posted in program order: none after it either */
                if (G->prev[g] >= 0 && G->end[G->prev[g]] < 0) {   /* not heading its stream */
                    if (S->c->grouped == 2) continue;   /* another peer's stream may move */
                    break;                              /* one stream: nothing behind it moves either */
                }
                begin = G->posted[g];
                if (G->prev[g] >= 0 && G->end[G->prev[g]] > begin) begin = G->end[G->prev[g]];
                for (i = G->first[g]; i <= G->last[g] && ok; i++) {
                    pp_action a = s->actions[r][i];
                    int is_send = a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B, pr, pos, pg;
                    size_t k;
                    if (G->gid[G->pos_ofs[r] + i] != g) continue;   /* another peer's (grouped 2) */
                    k = pp__comm_key(s, a);
                    pr = is_send ? S->recv_r[k] : S->send_r[k];
                    pos = is_send ? S->recv_p[k] : S->send_p[k];
                    if (is_send) sends++; else recvs++;
                    if (pr < 0) { ok = 0; break; }
                    pg = G->gid[G->pos_ofs[pr] + pos];
                    /* the peer's group heads its stream: posted, and the one before it there over */
                    if (G->posted[pg] < 0 || (G->prev[pg] >= 0 && G->end[G->prev[pg]] < 0)) { ok = 0; break; }
                    if (G->posted[pg] > begin) begin = G->posted[pg];
                    if (G->prev[pg] >= 0 && G->end[G->prev[pg]] > begin) begin = G->end[G->prev[pg]];
                }
                if (!ok) continue;
                dur = S->c->p2p_latency +
                      S->c->p2p_seconds_per_byte * S->c->activation_bytes * (sends > recvs ? sends : recvs);
                G->end[g] = begin + dur;
                for (i = G->first[g]; i <= G->last[g]; i++) {
                    if (G->gid[G->pos_ofs[r] + i] != g) continue;
                    S->res->start[r][i] = begin;
                    S->res->end[r][i] = begin + dur;
                    pp__sim_arrive(S, s->actions[r][i], begin + dur);
                }
                changed = 1;
            }
            while (G->next[r] < G->ng[r] && G->end[G->gofs[r] + G->next[r]] >= 0) G->next[r]++;
        }
    }
}

/* pp_simulate's checks of the per-stage memory and per-action times against the schedule (its
 * structure already checked); *mem_all gets the stages' memory in all (0 without memory_stage).
 * has_comm: the schedule is lowered. */
static pp_status pp__sim_check_costs(const pp_schedule *s, const pp_sim_costs *costs, int has_comm, double *mem_all,
                                     pp_error *err)
{
    int r, i;
    pp_status st;
    *mem_all = 0;
    if ((st = pp__check_rank_speed(costs, s->pp, err)) != PP_OK) return st;
    if (costs->memory_stage) {
        for (i = 0; i < s->num_stages; i++) {
            if (!(costs->memory_stage[i] >= 0) || costs->memory_stage[i] > DBL_MAX)
                return pp__fail(err, PP_EINVAL, "costs: memory_stage[%d]=%g: must be a finite number >= 0", i,
                                costs->memory_stage[i]);
            *mem_all += costs->memory_stage[i];
        }
        if (!(*mem_all > 0) || *mem_all > DBL_MAX)
            return pp__fail(err, PP_EINVAL, "costs: memory_stage: the stages weigh %g in all (they need some memory "
                            "to measure against)", *mem_all);
    }
    if (costs->tail_stage)
        for (i = 0; i < s->num_stages; i++)
            if (!(costs->tail_stage[i] >= 0) || costs->tail_stage[i] > DBL_MAX)
                return pp__fail(err, PP_EINVAL, "costs: tail_stage[%d]=%g: must be a finite number >= 0", i,
                                costs->tail_stage[i]);
    if (!costs->action_cost) return PP_OK;
    if (!has_comm && s->pp > 1)
        return pp__fail(err, PP_EINVAL, "costs: action_cost: needs a lowered schedule (its entries follow the "
                        "programs' indices, which lowering changes): call pp_schedule_lower first");
    for (r = 0; r < s->pp; r++) {
        if (!costs->action_cost[r] && s->length[r] > 0)
            return pp__fail(err, PP_EINVAL, "costs: action_cost[%d]=NULL: needs a time for every action of rank %d", r, r);
        for (i = 0; i < s->length[r]; i++)
            if (!pp__is_comm(s->actions[r][i].op) &&
                (!(costs->action_cost[r][i] >= 0) || costs->action_cost[r][i] > DBL_MAX))
                return pp__fail(err, PP_EINVAL, "costs: action_cost[%d][%d]=%g: must be a finite number >= 0", r, i,
                                costs->action_cost[r][i]);
    }
    return PP_OK;
}

/* Allocates S and its result for the lowered schedule s; under costs->grouped, finds every
 * transfer's two ends up front (a group resolves only with its peers'). */
static pp_status pp__sim_init(pp__sim *S, const pp_schedule *s, const pp_sim_costs *costs, pp_error *err)
{
    size_t plane = (size_t)s->num_stages * (size_t)s->mb, nkeys = 2 * plane, k;
    pp_sim_result *res;
    int r, i;
    memset(S, 0, sizeof *S);
    S->s = s;
    S->c = costs;
    S->t0 = DBL_MAX;
    S->t1 = 0;
    res = S->res = (pp_sim_result *)pp__calloc(1, sizeof *res);
    if (!res) return pp__fail(err, PP_ENOMEM, "out of memory");
    res->pp = s->pp; res->vpp = s->vpp;
    res->busy = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    res->bubble = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    res->peak_live = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    res->peak_memory = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    res->length = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    res->start = (double **)pp__calloc((size_t)s->pp, sizeof(double *));
    res->end = (double **)pp__calloc((size_t)s->pp, sizeof(double *));
    S->post_send = (double *)PIPEPAR_MALLOC(nkeys * sizeof(double));
    S->post_recv = (double *)PIPEPAR_MALLOC(nkeys * sizeof(double));
    S->send_r = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    S->send_p = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    S->recv_r = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    S->recv_p = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    S->arr_f = (double *)pp__calloc(plane, sizeof(double));
    S->arr_b = (double *)pp__calloc(plane, sizeof(double));
    S->arrived_f = (unsigned char *)pp__calloc(plane, 1);
    S->arrived_b = (unsigned char *)pp__calloc(plane, 1);
    S->t = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    S->pc = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    if (!res->busy || !res->bubble || !res->peak_live || !res->peak_memory || !res->length || !res->start ||
        !res->end || !S->post_send || !S->post_recv || !S->send_r || !S->send_p || !S->recv_r || !S->recv_p ||
        !S->arr_f || !S->arr_b || !S->arrived_f || !S->arrived_b || !S->t || !S->pc || !pp__progress_init(&S->prog, s))
        return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < s->pp; r++) {
        size_t n = s->length[r] > 0 ? (size_t)s->length[r] : 1;
        res->length[r] = s->length[r];
        res->start[r] = (double *)pp__calloc(n, sizeof(double));
        res->end[r] = (double *)pp__calloc(n, sizeof(double));
        if (!res->start[r] || !res->end[r]) return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    for (k = 0; k < nkeys; k++) { S->post_send[k] = S->post_recv[k] = -1; S->send_r[k] = S->recv_r[k] = -1; }
    if (costs->tail_stage) {   /* each stage's tail after its last backward (B, W, FB's B) on its rank */
        int *last = (int *)PIPEPAR_MALLOC((size_t)s->num_stages * sizeof(int)), st;
        S->tail = (double **)pp__calloc((size_t)s->pp, sizeof(double *));
        S->tail_due = (double *)pp__calloc((size_t)s->pp, sizeof(double));
        if (!last || !S->tail || !S->tail_due) { PIPEPAR_FREE(last); return pp__fail(err, PP_ENOMEM, "out of memory"); }
        for (r = 0; r < s->pp; r++) {
            S->tail[r] = (double *)pp__calloc(s->length[r] > 0 ? (size_t)s->length[r] : 1, sizeof(double));
            if (!S->tail[r]) { PIPEPAR_FREE(last); return pp__fail(err, PP_ENOMEM, "out of memory"); }
            for (st = 0; st < s->num_stages; st++) last[st] = -1;
            for (i = 0; i < s->length[r]; i++) {
                pp_action a = s->actions[r][i];
                if (a.op == PP_OP_B || a.op == PP_OP_W) last[a.stage] = i;
                if (a.op == PP_OP_FB) last[a.stage2] = i;
            }
            for (st = 0; st < s->num_stages; st++)
                if (last[st] >= 0) S->tail[r][last[st]] = costs->tail_stage[st];
        }
        PIPEPAR_FREE(last);
    }
    if (!costs->grouped) return PP_OK;
    if (!pp__sim_groups_init(s, costs->grouped == 2, &S->groups)) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < s->pp; r++)
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            if (!pp__is_comm(a.op)) continue;
            k = pp__comm_key(s, a);
            if (a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B) { S->send_r[k] = r; S->send_p[k] = i; }
            else { S->recv_r[k] = r; S->recv_p[k] = i; }
        }
    return PP_OK;
}

/* Rank r posts the transfer end a (costs->grouped off): posting never blocks; the transfer runs
 * once both sides have posted. */
static void pp__sim_post(pp__sim *S, int r, pp_action a)
{
    const pp_schedule *s = S->s;
    size_t k = pp__comm_key(s, a);
    double start, end;
    if (a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B) { S->post_send[k] = S->t[r]; S->send_r[k] = r; S->send_p[k] = S->pc[r]; }
    else { S->post_recv[k] = S->t[r]; S->recv_r[k] = r; S->recv_p[k] = S->pc[r]; }
    if (S->post_send[k] < 0 || S->post_recv[k] < 0) return;
    start = S->post_send[k] > S->post_recv[k] ? S->post_send[k] : S->post_recv[k];
    end = start + S->c->p2p_latency + S->c->p2p_seconds_per_byte * S->c->activation_bytes;
    S->res->start[S->send_r[k]][S->send_p[k]] = S->res->start[S->recv_r[k]][S->recv_p[k]] = start;
    S->res->end[S->send_r[k]][S->send_p[k]] = S->res->end[S->recv_r[k]][S->recv_p[k]] = end;
    pp__sim_arrive(S, s->actions[S->recv_r[k]][S->recv_p[k]], end);
}

/* Rank r does the tail its last compute left (costs->tail_stage), now that the transfers after
 * that compute are posted. */
static void pp__sim_pay_tail(pp__sim *S, int r)
{
    if (!S->tail || S->tail_due[r] <= 0) return;
    S->res->busy[r] += S->tail_due[r];
    S->t[r] += S->tail_due[r];
    if (S->t[r] > S->t1) S->t1 = S->t[r];
    S->tail_due[r] = 0;
}

/* Rank r's compute action a (at S->pc[r]): 1 when it ran, starting once the rank is free and its
 * inputs have arrived; 0 while an input from another rank has not; -1 (err set) when it comes
 * before work its own rank has still to do. */
static int pp__sim_compute(pp__sim *S, int r, pp_action a, pp_error *err)
{
    const pp_schedule *s = S->s;
    int ops[2], stg[2], mbs[2], h, nh = pp__halves(a, ops, stg, mbs), ready = 1;
    double start, dur = 0;
    char txt[64];
    pp__sim_pay_tail(S, r);
    start = S->t[r];
    for (h = 0; h < nh && ready == 1; h++) {
        const char *why = "";
        int from;
        ready = pp__half_ready(s, &S->prog, S->arrived_f, S->arrived_b, ops[h], stg[h], mbs[h], &why);
        if (ready < 0) {
            pp_action_format(a, txt, sizeof txt);
            pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s %s", r, S->pc[r], txt, why);
            return -1;
        }
        if (ready == 1 && pp__cross_input(s, ops[h], stg[h], mbs[h], &from)) {
            double at = ops[h] == PP_OP_F ? S->arr_f[PP__SM(s, stg[h], mbs[h])] : S->arr_b[PP__SM(s, stg[h], mbs[h])];
            if (at > start) start = at;
        }
    }
    if (!ready) return 0;
    for (h = 0; h < nh; h++) {
        if (!S->c->action_cost) dur += pp__half_cost(s, S->c, ops[h], stg[h]);
        pp__mark_done(s, &S->prog, ops[h], stg[h], mbs[h]);
    }
    if (S->c->action_cost) dur = S->c->action_cost[r][S->pc[r]];
    S->res->start[r][S->pc[r]] = start;
    S->res->end[r][S->pc[r]] = start + dur;
    S->res->busy[r] += dur;
    S->t[r] = start + dur;
    if (start < S->t0) S->t0 = start;
    if (start + dur > S->t1) S->t1 = start + dur;
    if (S->tail) S->tail_due[r] = S->tail[r][S->pc[r]];
    return 1;
}

/* Plays every rank's program forward until all have finished: each rank runs as far as it can,
 * round after round; a round in which none moves is a deadlock. */
static pp_status pp__sim_run(pp__sim *S, pp_error *err)
{
    const pp_schedule *s = S->s;
    int r, finished = 0;
    for (r = 0; r < s->pp; r++) if (s->length[r] == 0) finished++;
    while (finished < s->pp) {
        int progress = 0;
        for (r = 0; r < s->pp; r++) {
            if (S->pc[r] >= s->length[r]) continue;
            while (S->pc[r] < s->length[r]) {
                pp_action a = s->actions[r][S->pc[r]];
                if (pp__is_comm(a.op) && S->c->grouped) {
                    /* the lowered group is posted at once (grouped 2: a group per peer); each runs
                     * when it and its peers' head their streams */
                    int e = pp_schedule_group_end(s, r, S->pc[r]), j;
                    for (j = S->pc[r]; j < e; j++) S->groups.posted[S->groups.gid[S->groups.pos_ofs[r] + j]] = S->t[r];
                    S->pc[r] = e;
                    pp__sim_groups_resolve(S);
                } else if (pp__is_comm(a.op)) {
                    pp__sim_post(S, r, a);
                    S->pc[r]++;
                } else {
                    int ran = pp__sim_compute(S, r, a, err);
                    if (ran < 0) return PP_EINVALID_SCHEDULE;
                    if (!ran) break;
                    S->pc[r]++;
                }
                progress = 1;
            }
            if (S->pc[r] >= s->length[r]) { pp__sim_pay_tail(S, r); finished++; }
        }
        if (!progress && finished < s->pp)
            return pp__fail(err, PP_EDEADLOCK, "simulation cannot finish: the schedule waits for tensors that are "
                            "never sent (run pp_schedule_validate for the exact place)");
    }
    return PP_OK;
}

/* Peak live activations: an F's activations live from its start until its B (or W) ends.
 * Compute is sequential per rank, so in program order these instants never go back in time
 * (start <= end <= next start): one walk, no sort; a release at the same instant as the next
 * allocation comes first, as it should. mem_all: the stages' memory in all (memory_stage). */
static void pp__sim_peaks(pp__sim *S, double mem_all)
{
    const pp_schedule *s = S->s;
    const double *ms = S->c->memory_stage;
    pp_sim_result *res = S->res;
    int r, i;
    for (r = 0; r < s->pp; r++) {
        int live = 0, peak = 0;
        double live_mem = 0, peak_mem = 0;
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            int ops[2], stg[2], mbs[2], h, nh;
            if (pp__is_comm(a.op)) continue;
            nh = pp__halves(a, ops, stg, mbs);
            for (h = 0; h < nh; h++) {
                if (ops[h] == PP_OP_F) {
                    if (++live > peak) peak = live;
                    if (ms && (live_mem += ms[stg[h]]) > peak_mem) peak_mem = live_mem;
                } else if (ops[h] == PP_OP_B || ops[h] == PP_OP_W) {
                    live--;
                    if (ms) live_mem -= ms[stg[h]];
                }
            }
        }
        res->peak_live[r] = peak;
        /* dual: every chunk is a whole model stage, so a live chunk counts as one stage's worth */
        if (!ms) {
            res->peak_memory[r] = s->placement == PP_PLACEMENT_DUAL ? (double)peak : (double)peak / (double)s->vpp;
            continue;
        }
        /* one unit is an average rank's share of the model: the same absolute memory on every
         * rank and placement, so one cap means one budget per GPU (dual: the stages are the
         * model twice over) */
        res->peak_memory[r] = peak_mem / (mem_all / (s->placement == PP_PLACEMENT_DUAL ? 2.0 * s->pp : (double)s->pp));
    }
}

/* res->bound and bound_rank (see pp_sim_result) from a finished run of s, which has a backward (B,
 * I or an FB's) of every forward: pp_simulate refuses a schedule without. Each stage's quickest
 * action holding a forward of it (fq) and holding a backward or input gradient of it (bq): an
 * action's output leaves at its end, and the next stage's forward (the stage before's backward)
 * waits for it, through a transfer where the rank changes. Along a route, the forward chain to a
 * stage (up) and the backward chain below it (down). A rank's first compute holds a forward, so
 * it starts no sooner than its stages' least up; it then computes busy. Its last action holding
 * a backward (or I) comes after all its forwards and backwards, and the backwards of the stages
 * below that stage's follow it: no sooner than the least up, plus those actions, plus the least
 * down. */
static pp_status pp__sim_bound(const pp_schedule *s, const pp_sim_costs *c, pp_sim_result *res, pp_error *err)
{
    int n = s->num_stages, r, i, k, m;
    double *q = (double *)pp__calloc((size_t)4 * (size_t)n, sizeof *q), *fq, *bq, *up, *down;
    char *seen = (char *)pp__calloc((size_t)n, 1);
    double hop = c->p2p_latency + c->p2p_seconds_per_byte * c->activation_bytes;
    if (!q || !seen) { PIPEPAR_FREE(q); PIPEPAR_FREE(seen); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    fq = q; bq = q + n; up = q + 2 * n; down = q + 3 * n;
    for (k = 0; k < 4 * n; k++) q[k] = DBL_MAX;
    for (r = 0; r < s->pp; r++)
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            double d = res->end[r][i] - res->start[r][i];
            int b = a.op == PP_OP_FB ? a.stage2 : a.op == PP_OP_B || a.op == PP_OP_I ? a.stage : -1;
            if ((a.op == PP_OP_F || a.op == PP_OP_FB) && a.stage >= 0 && a.stage < n && d < fq[a.stage]) fq[a.stage] = d;
            if (b >= 0 && b < n && d < bq[b]) bq[b] = d;
        }
    for (k = 0; k < n; k++) { if (fq[k] == DBL_MAX) fq[k] = 0; if (bq[k] == DBL_MAX) bq[k] = 0; }
    for (m = 0; m < s->mb; m++) {   /* each route once (DualPipe has two) */
        int first = pp_mb_first_stage(s, m), last = pp_mb_last_stage(s, m);
        double f = 0, b = 0;
        if (first < 0 || last < first || last >= n || seen[first]) continue;
        seen[first] = 1;
        for (k = first; k <= last; k++) {
            double h = k < last && pp_stage_rank(s, k) != pp_stage_rank(s, k + 1) ? hop : 0;
            if (f < up[k]) up[k] = f;
            if (b < down[k]) down[k] = b;
            f += fq[k] + h;
            b += bq[k] + h;
        }
    }
    res->bound = 0; res->bound_rank = 0;
    for (r = 0; r < s->pp; r++) {
        double earliest = DBL_MAX, below = DBL_MAX, fb = 0, t;
        for (k = 0; k < n; k++)
            if (pp_stage_rank(s, k) == r) {
                if (up[k] < earliest) earliest = up[k];
                if (down[k] < below) below = down[k];
            }
        if (earliest == DBL_MAX) continue;
        for (i = 0; i < s->length[r]; i++) {
            int op = s->actions[r][i].op;
            if (op == PP_OP_F || op == PP_OP_B || op == PP_OP_I || op == PP_OP_FB) fb += res->end[r][i] - res->start[r][i];
        }
        t = earliest + (res->busy[r] > fb + below ? res->busy[r] : fb + below);   /* below: set with earliest */
        if (t > res->bound) { res->bound = t; res->bound_rank = r; }
    }
    PIPEPAR_FREE(q); PIPEPAR_FREE(seen);
    return PP_OK;
}

pp_status pp_simulate(const pp_schedule *sched, const pp_sim_costs *costs, pp_sim_result **out, pp_error *err)
{
    pp_sim_costs zero;
    pp_schedule *lowered = NULL;
    pp__sim S;
    pp_status st;
    int r, i, has_comm = 0;
    double mem_all;

    if (!sched || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    *out = NULL;
    if (!costs) { memset(&zero, 0, sizeof zero); costs = &zero; }
    if (costs->f < 0 || costs->b < 0 || costs->i < 0 || costs->w < 0 || costs->p2p_latency < 0 ||
        costs->p2p_seconds_per_byte < 0 || costs->activation_bytes < 0)
        return pp__fail(err, PP_EINVAL, "costs: every cost must be >= 0 (f=%g b=%g i=%g w=%g p2p=%g)",
                        costs->f, costs->b, costs->i, costs->w, costs->p2p_latency);
    st = pp__check_structure(sched, err);
    if (st != PP_OK) return st;
    for (r = 0; r < sched->pp && !has_comm; r++)
        for (i = 0; i < sched->length[r]; i++)
            if (pp__is_comm(sched->actions[r][i].op)) { has_comm = 1; break; }
    if (costs->grouped < 0 || costs->grouped > 2)
        return pp__fail(err, PP_EINVAL, "costs: grouped=%d: must be 0 (each transfer on its own), 1 (a round's "
                        "transfers in one group) or 2 (one group per peer)", costs->grouped);
    st = pp__sim_check_costs(sched, costs, has_comm, &mem_all, err);
    if (st != PP_OK) return st;
    if (!has_comm && sched->pp > 1) {
        st = pp_schedule_copy(sched, &lowered, err);
        if (st == PP_OK) st = pp_schedule_lower(lowered, err);
        if (st != PP_OK) { pp_schedule_free(lowered); return st; }
        sched = lowered;
    }
    st = pp__sim_init(&S, sched, costs, err);
    if (st == PP_OK) st = pp__sim_run(&S, err);
    if (st == PP_OK) st = pp__sim_bound(sched, costs, S.res, err);
    if (st == PP_OK) {
        pp_sim_result *res = S.res;
        if (S.t0 == DBL_MAX) S.t0 = 0;
        res->makespan = S.t1 - S.t0;
        if (res->bound > res->makespan && res->bound - res->makespan <= 1e-12 * res->bound)
            res->bound = res->makespan;   /* the same durations summed in another order */
        pp__sim_peaks(&S, mem_all);
        res->bubble_mean = 0;
        for (r = 0; r < sched->pp; r++) {
            res->bubble[r] = res->makespan > 0 ? 1.0 - res->busy[r] / res->makespan : 0.0;
            res->bubble_mean += res->bubble[r] / sched->pp;
        }
        *out = res;
        S.res = NULL;
        st = pp__ok(err);
    }
    pp__sim_free(&S);
    pp_schedule_free(lowered);
    return st;
}

/* --- placement by simulation ------------------------------------------------------------------ */

/* The simulated step of `s` with GPU g on rank rank_of[g] (speed[rank] from the GPU's speed). */
static pp_status pp__placement_step(const pp_schedule *s, const pp_sim_costs *costs, const double *gpu_speed,
                                    const int *rank_of, double *rank_speed, double *step, pp_error *err)
{
    pp_sim_costs c = *costs;
    pp_sim_result *res = NULL;
    pp_status st;
    int g;
    for (g = 0; g < s->pp; g++) rank_speed[rank_of[g]] = gpu_speed[g];
    c.rank_speed = rank_speed;
    if ((st = pp_simulate(s, &c, &res, err)) != PP_OK) return st;
    *step = res->makespan;
    pp_sim_result_free(res);
    return PP_OK;
}

static int pp__placement_moves(int n, const int *rank_of)
{
    int g, moved = 0;
    for (g = 0; g < n; g++) moved += rank_of[g] != g;
    return moved;
}

/* Whether candidate (step, moves) beats best: a shorter step by more than rounding, or the same
 * step with fewer ranks moved. */
static int pp__placement_better(double step, int moves, double best_step, int best_moves)
{
    double eps = 1e-12 * (best_step > 0 ? best_step : 1);
    return step < best_step - eps || (step <= best_step + eps && moves < best_moves);
}

pp_status pp_place_by_simulation(const pp_schedule *s, const pp_sim_costs *costs, const double *gpu_time,
                                 double min_gain, int *rank_of, double *gain, pp_error *err)
{
    double *speed = NULL, *rank_speed = NULL, *load = NULL, fastest, base = 0, best, step;
    int *cur = NULL, *best_of = NULL, n, g, h, best_moves, round, improved;
    pp_sim_result *res = NULL;
    pp_sim_costs c;
    pp_status st = PP_OK;
    if (gain) *gain = 0;
    if (!s || !gpu_time || !rank_of) return pp__fail(err, PP_EINVAL, "s, gpu_time and rank_of must not be NULL");
    if (costs && costs->rank_speed)
        return pp__fail(err, PP_EINVAL, "costs: rank_speed must be NULL: the ranks' speeds are the GPUs' (gpu_time)");
    if (costs && costs->action_cost)
        return pp__fail(err, PP_EINVAL, "costs: action_cost must be NULL: measured actions carry their own GPU's speed");
    if (!(min_gain >= 0 && min_gain < 1)) return pp__fail(err, PP_EINVAL, "min_gain=%g: must be in [0, 1)", min_gain);
    n = s->pp;
    if (n < 1) return pp__fail(err, PP_EINVAL, "s: pp=%d: must be at least 1", n);
    for (g = 0; g < n; g++)
        if (!(gpu_time[g] > 0 && gpu_time[g] <= DBL_MAX))
            return pp__fail(err, PP_EINVAL, "gpu_time[%d]=%g: must be a finite number > 0", g, gpu_time[g]);
    if (costs) c = *costs; else memset(&c, 0, sizeof c);
    speed = (double *)pp__calloc((size_t)n, sizeof(double));
    rank_speed = (double *)pp__calloc((size_t)n, sizeof(double));
    load = (double *)pp__calloc((size_t)n, sizeof(double));
    cur = (int *)pp__calloc((size_t)n, sizeof(int));
    best_of = (int *)pp__calloc((size_t)n, sizeof(int));
    if (!speed || !rank_speed || !load || !cur || !best_of) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    for (fastest = gpu_time[0], g = 1; g < n; g++) if (gpu_time[g] < fastest) fastest = gpu_time[g];
    for (g = 0; g < n; g++) {
        speed[g] = fastest / gpu_time[g];
        cur[g] = best_of[g] = g;
        if (!(speed[g] >= PP__SPEED_MIN)) {   /* the simulator's bound on a rank's speed */
            st = pp__fail(err, PP_EINVAL, "gpu_time[%d]=%g: more than %g times the fastest GPU's (%g)", g, gpu_time[g],
                          1 / PP__SPEED_MIN, fastest);
            goto done;
        }
    }
    if ((st = pp__placement_step(s, &c, speed, cur, rank_speed, &base, err)) != PP_OK) goto done;
    best = base;
    best_moves = 0;
    if (n <= 6) {   /* every assignment, in lexicographic order from the identity */
        for (;;) {
            int i = n - 2, j = n - 1, t;
            while (i >= 0 && cur[i] >= cur[i + 1]) i--;
            if (i < 0) break;
            while (cur[j] <= cur[i]) j--;
            t = cur[i]; cur[i] = cur[j]; cur[j] = t;
            for (g = i + 1, h = n - 1; g < h; g++, h--) { t = cur[g]; cur[g] = cur[h]; cur[h] = t; }
            if ((st = pp__placement_step(s, &c, speed, cur, rank_speed, &step, err)) != PP_OK) goto done;
            if (pp__placement_better(step, pp__placement_moves(n, cur), best, best_moves)) {
                best = step;
                best_moves = pp__placement_moves(n, cur);
                memcpy(best_of, cur, (size_t)n * sizeof(int));
            }
        }
    } else {   /* pp_place_by_speed's start, then (up to 16 ranks) swaps of two GPUs while one shortens
                * the step: pp (pp - 1) / 2 simulations a round */
        if ((st = pp_simulate(s, &c, &res, err)) != PP_OK) goto done;
        memcpy(load, res->busy, (size_t)n * sizeof(double));
        pp_sim_result_free(res);
        if ((st = pp_place_by_speed(n, load, gpu_time, 0, cur, NULL, err)) != PP_OK) goto done;
        if ((st = pp__placement_step(s, &c, speed, cur, rank_speed, &step, err)) != PP_OK) goto done;
        if (pp__placement_better(step, pp__placement_moves(n, cur), best, best_moves)) {
            best = step;
            best_moves = pp__placement_moves(n, cur);
            memcpy(best_of, cur, (size_t)n * sizeof(int));
        }
        memcpy(cur, best_of, (size_t)n * sizeof(int));
        for (round = 0, improved = n <= 16; improved && round < n; round++)
            for (improved = 0, g = 0; g < n; g++)
                for (h = g + 1; h < n; h++) {
                    int t = cur[g];
                    if (speed[g] == speed[h]) continue;   /* the same step */
                    cur[g] = cur[h]; cur[h] = t;
                    if ((st = pp__placement_step(s, &c, speed, cur, rank_speed, &step, err)) != PP_OK) goto done;
                    if (pp__placement_better(step, pp__placement_moves(n, cur), best, best_moves)) {
                        best = step;
                        best_moves = pp__placement_moves(n, cur);
                        memcpy(best_of, cur, (size_t)n * sizeof(int));
                        improved = 1;
                    } else {
                        cur[h] = cur[g]; cur[g] = t;
                    }
                }
    }
    if (base > 0 && best < base * (1 - min_gain)) {
        memcpy(rank_of, best_of, (size_t)n * sizeof(int));
        if (gain) *gain = 1 - best / base;
    } else {
        for (g = 0; g < n; g++) rank_of[g] = g;
    }
    st = pp__ok(err);
done:
    PIPEPAR_FREE(speed); PIPEPAR_FREE(rank_speed); PIPEPAR_FREE(load); PIPEPAR_FREE(cur); PIPEPAR_FREE(best_of);
    return st;
}


/* ============================================================================================
 * >>draw (implementation)
 * ============================================================================================ */

static pp_status pp__text_flush(pp__text *t, FILE *out, pp_error *err)
{
    pp_status st = PP_OK;
    if (t->failed) st = pp__fail(err, PP_ENOMEM, "out of memory while formatting");
    else if (t->len && fwrite(t->data, 1, t->len, out) != t->len) st = pp__fail(err, PP_EIO, "write failed");
    pp__text_free(t);
    return st == PP_OK ? pp__ok(err) : st;
}

/* Simulates with default costs when the caller gave no result; checks that a given result
 * belongs to this schedule (same program lengths). */
static pp_status pp__sim_for_drawing(const pp_schedule *s, const pp_sim_result *given, pp_sim_result **owned,
                                     const pp_sim_result **use, pp_error *err)
{
    int r;
    *owned = NULL;
    if (given) {
        if (given->pp != s->pp) return pp__fail(err, PP_EINVAL, "sim: computed for pp=%d, schedule has pp=%d", given->pp, s->pp);
        for (r = 0; r < s->pp; r++)
            if (given->length[r] != s->length[r])
                return pp__fail(err, PP_EINVAL, "sim: rank %d has %d timed actions but the schedule has %d "
                                "(simulate the lowered schedule you draw)", r, given->length[r], s->length[r]);
        *use = given;
        return PP_OK;
    }
    {
        pp_status st = pp_simulate(s, NULL, owned, err);
        if (st != PP_OK) return st;
        for (r = 0; r < s->pp; r++)
            if ((*owned)->length[r] != s->length[r]) {
                pp_sim_result_free(*owned);
                *owned = NULL;
                return pp__fail(err, PP_EINVAL, "schedule: lower it before drawing (pp_schedule_lower)");
            }
        *use = *owned;
    }
    return PP_OK;
}

static char pp__mb_char(int m)
{
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    return m >= 0 && m < 62 ? digits[m] : '#';
}

/* Compact Gantt chart: one column per time unit (the shortest compute action), and for every
 * rank one line per kind of work (F; B or I; W), each cell the microbatch id (0-9, a-z, A-Z).
 * With several chunks per rank a 'chunk' line says which chunk the rank works on. */
pp_status pp_schedule_draw_ascii(const pp_schedule *s, const pp_sim_result *sim, FILE *out, pp_error *err)
{
    pp_sim_result *owned = NULL;
    const pp_sim_result *use = NULL;
    pp__text t = { NULL, 0, 0, 0 };
    pp_status st;
    double unit = DBL_MAX;
    int r, i, cols, c, has_w = 0, has_i = 0;
    char *line = NULL;
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    st = pp__sim_for_drawing(s, sim, &owned, &use, err);
    if (st != PP_OK) return st;
    for (r = 0; r < s->pp; r++)
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            double d = use->end[r][i] - use->start[r][i];
            if (pp__is_comm(a.op)) continue;
            if (a.op == PP_OP_W) has_w = 1;
            if (a.op == PP_OP_I) has_i = 1;
            if (d > 1e-12 && d < unit) unit = d;
        }
    if (unit == DBL_MAX) unit = 1;
    cols = (int)ceil(use->makespan / unit - 1e-9);
    if (cols > 100000) {
        pp_sim_result_free(owned);
        return pp__fail(err, PP_EINVAL, "timeline is %d columns wide: too wide for text, use the SVG", cols);
    }
    line = (char *)PIPEPAR_MALLOC((size_t)cols + 1);
    if (!line) { pp_sim_result_free(owned); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    pp__text_printf(&t, "%s  pp=%d vpp=%d mb=%d  (one column = %g time unit%s; cells show the microbatch)\n",
                    pp_schedule_kind_name(s->kind), s->pp, s->vpp, s->mb, unit, unit == 1 ? "" : "s");
    for (r = 0; r < s->pp; r++) {
        int row, nrows = 2 + (has_w ? 1 : 0) + (s->vpp > 1 ? 1 : 0);
        for (row = 0; row < nrows; row++) {
            const char *name;
            int want_chunk = s->vpp > 1 && row == nrows - 1;
            if (want_chunk) name = "chunk";
            else if (row == 0) name = "F";
            else if (row == 1) name = has_i ? (has_w ? "B/I" : "B") : "B";
            else name = "W";
            memset(line, want_chunk ? '.' : ' ', (size_t)cols);
            line[cols] = '\0';
            for (i = 0; i < s->length[r]; i++) {
                pp_action a = s->actions[r][i];
                int from, to, op = a.op, ops[2], stg[2], mbs[2], nh, h;
                if (pp__is_comm(a.op)) continue;
                from = (int)floor(use->start[r][i] / unit + 1e-9);
                to = (int)ceil(use->end[r][i] / unit - 1e-9);
                if (from < 0) from = 0;
                if (to > cols) to = cols;
                nh = pp__halves(a, ops, stg, mbs);
                for (h = 0; h < nh; h++) {
                    int show;
                    op = ops[h];
                    if (want_chunk) show = 1;
                    else if (row == 0) show = op == PP_OP_F;
                    else if (row == 1) show = op == PP_OP_B || op == PP_OP_I;
                    else show = op == PP_OP_W;
                    if (!show) continue;
                    for (c = from; c < to; c++)
                        line[c] = want_chunk ? (char)('0' + pp_stage_chunk(s, stg[h]) % 10) : pp__mb_char(mbs[h]);
                }
            }
            if (row == 0) pp__text_printf(&t, "rank %-3d %5s |%s|\n", r, name, line);
            else pp__text_printf(&t, "         %5s |%s|\n", name, line);
        }
    }
    pp__text_printf(&t, "bubble per rank:");
    for (r = 0; r < s->pp; r++) pp__text_printf(&t, " %.1f%%", 100.0 * use->bubble[r]);
    pp__text_printf(&t, "   peak live activations per rank:");
    for (r = 0; r < s->pp; r++) pp__text_printf(&t, " %d", use->peak_live[r]);
    pp__text_printf(&t, "\n");
    PIPEPAR_FREE(line);
    pp_sim_result_free(owned);
    return pp__text_flush(&t, out, err);
}

/* --- SVG: one drawing for simulated and measured steps ---------------------------------------
 * A panel draws one step as a paper's figure does: a title, one row per rank with a box per
 * compute action (colour = the kind of work, shade = the chunk, label = <stage><op><microbatch>,
 * or the microbatch alone where that does not fit), each rank's idle share at its row's end, a
 * time axis with its unit, and a legend of what the picture holds. The scale gives a short box
 * (the lower quartile of the compute times) PP__SVG_MIN_BOX px, enough for two digits, so a long
 * schedule makes a wide picture that a browser scrolls, up to PP__SVG_MAX_WIDTH px. */

#define PP__SVG_MIN_WIDTH 960.0
#define PP__SVG_MAX_WIDTH 100000.0
#define PP__SVG_MIN_BOX 22.0
#define PP__SVG_LEFT 92.0
#define PP__SVG_RIGHT 80.0
#define PP__SVG_ROW 34.0
#define PP__SVG_TOP 52.0      /* the title's two lines */
#define PP__SVG_BOTTOM 116.0  /* the axis, its caption and the legend's three lines */
#define PP__SVG_CHAR 6.5      /* px a character takes at font-size 11 (digits, capitals) */

typedef struct pp__svg_panel {
    char title[200], subtitle[240];
    const char *axis;                 /* the time axis' caption */
    double to_axis;                   /* time * to_axis = the axis value (1e3: seconds shown in ms) */
    const pp_schedule *s;             /* stage -> chunk and the stages' list; NULL: all chunk 0 */
    int ranks;
    const int *rank_id;               /* [ranks] the "rank N" of each row */
    const int *length;                /* [ranks] */
    const pp_action *const *actions;  /* [ranks][length] */
    const double *const *wait;        /* [ranks][length] measured: its wait for inputs began; or NULL */
    const double *const *begin;       /* [ranks][length] the compute; < 0: did not run */
    const double *const *end;
    const double *idle;               /* [ranks] idle share of the step */
    double t0, t1;                    /* the step */
    double px;                        /* px per time unit (pp__svg_scale) */
} pp__svg_panel;

static int pp__double_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* px per time unit: the panel fills PP__SVG_MIN_WIDTH, or more where a short box (the lower
 * quartile of the compute times) would get less than PP__SVG_MIN_BOX px; never wider than twice
 * PP__SVG_MIN_BOX per action of the busiest rank (a measured step's few very short actions must not
 * stretch it) nor than PP__SVG_MAX_WIDTH. */
static pp_status pp__svg_scale(pp__svg_panel *p, pp_error *err)
{
    double span = p->t1 > p->t0 ? p->t1 - p->t0 : 1, room = PP__SVG_MIN_WIDTH - PP__SVG_LEFT - PP__SVG_RIGHT;
    double *d, short_box = 0, most;
    size_t n = 0, cap = 0, busiest = 0;
    int r, i;
    for (r = 0; r < p->ranks; r++) cap += (size_t)p->length[r];
    d = (double *)PIPEPAR_MALLOC((cap ? cap : 1) * sizeof(double));
    if (!d) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < p->ranks; r++) {
        size_t here = n;
        for (i = 0; i < p->length[r]; i++)
            if (!pp__is_comm(p->actions[r][i].op) && p->begin[r][i] >= 0 && p->end[r][i] > p->begin[r][i])
                d[n++] = p->end[r][i] - p->begin[r][i];
        if (n - here > busiest) busiest = n - here;
    }
    if (n) {
        qsort(d, n, sizeof *d, pp__double_cmp);
        short_box = d[n / 4];
    }
    PIPEPAR_FREE(d);
    p->px = room / span;
    if (short_box > 0 && PP__SVG_MIN_BOX / short_box > p->px) p->px = PP__SVG_MIN_BOX / short_box;
    most = 2 * PP__SVG_MIN_BOX * (double)busiest;
    if (most < room) most = room;
    if (most > PP__SVG_MAX_WIDTH - PP__SVG_LEFT - PP__SVG_RIGHT) most = PP__SVG_MAX_WIDTH - PP__SVG_LEFT - PP__SVG_RIGHT;
    if (span * p->px > most) p->px = most / span;
    return PP_OK;
}

static double pp__svg_width(const pp__svg_panel *p)
{
    double w = PP__SVG_LEFT + (p->t1 > p->t0 ? p->t1 - p->t0 : 1) * p->px + PP__SVG_RIGHT;
    return w > PP__SVG_MIN_WIDTH ? w : PP__SVG_MIN_WIDTH;
}

/* The fill of an op's box in a chunk, hsl: a hue per kind of work, darker for later chunks.
 * Returns 1 when a label on it reads better in white. */
static int pp__svg_fill(int op, int chunk, int vpp, char *buf, size_t n)
{
    int hue = op == PP_OP_F ? 212 : op == PP_OP_B ? 14 : op == PP_OP_I ? 36 : 128;
    double light = op == PP_OP_F ? 72 : op == PP_OP_B ? 66 : op == PP_OP_I ? 70 : 60;
    if (vpp > 1) light -= 28.0 * (double)chunk / (double)(vpp - 1);
    snprintf(buf, n, "hsl(%d,%d%%,%.0f%%)", hue, op == PP_OP_I ? 80 : 58, light);
    return light < 50;
}

/* One box (an action, or one half of an overlapped F&B) with the longest label that fits. */
static void pp__svg_box(pp__text *t, const pp__svg_panel *p, int op, int stage, int mb, double x, double y,
                        double w, double h)
{
    int chunk = p->s ? pp_stage_chunk(p->s, stage) : 0, vpp = p->s ? p->s->vpp : 1, white;
    double font = h >= 20 ? 11 : 9, cw = PP__SVG_CHAR * font / 11;
    char fill[48], label[48];
    white = pp__svg_fill(op, chunk < 0 ? 0 : chunk, vpp, fill, sizeof fill);
    pp__text_printf(t, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\" "
                    "stroke-width=\"0.6\"/>", x, y, w > 0.6 ? w : 0.6, h, fill);
    snprintf(label, sizeof label, "%d%s%d", stage, pp_op_name((pp_op)op), mb);
    if (w < cw * (double)strlen(label) + 4) snprintf(label, sizeof label, "%d", mb);
    if (w >= cw * (double)strlen(label) + 3)
        pp__text_printf(t, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"%.0f\" text-anchor=\"middle\" fill=\"%s\">%s</text>",
                        x + w / 2, y + h / 2 + font * 0.36, font, white ? "white" : "#1a1a1a", label);
}

/* Ticks every 1, 2 or 5 times a power of ten, at least 72 px apart, with light grid lines. */
static void pp__svg_axis(pp__text *t, const pp__svg_panel *p, double rows_top, double rows_bottom)
{
    double span = p->t1 > p->t0 ? p->t1 - p->t0 : 1, u = p->to_axis, want = 72.0 * u / p->px, step, mag, v;
    int decimals, k;
    mag = pow(10.0, floor(log10(want)));
    step = want <= mag ? mag : want <= 2 * mag ? 2 * mag : want <= 5 * mag ? 5 * mag : 10 * mag;
    decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    pp__text_printf(t, "<g stroke=\"#e2e2e2\" stroke-width=\"1\">");
    for (k = 0; (v = k * step) <= span * u * (1 + 1e-9); k++)
        pp__text_printf(t, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\"/>", PP__SVG_LEFT + v / u * p->px,
                        rows_top, PP__SVG_LEFT + v / u * p->px, rows_bottom);
    pp__text_printf(t, "</g>\n<g class=\"axis\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333\"/>",
                    PP__SVG_LEFT, rows_bottom + 2, PP__SVG_LEFT + span * p->px, rows_bottom + 2);
    for (k = 0; (v = k * step) <= span * u * (1 + 1e-9); k++) {
        double x = PP__SVG_LEFT + v / u * p->px;
        pp__text_printf(t, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#333\"/>"
                        "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%.*f</text>",
                        x, rows_bottom + 2, x, rows_bottom + 7, x, rows_bottom + 19, decimals, v);
    }
    pp__text_printf(t, "<text x=\"%.1f\" y=\"%.1f\" font-style=\"italic\">%s</text></g>\n", PP__SVG_LEFT,
                    rows_bottom + 36, p->axis);
}

/* The legend, three lines: the kinds of work the panel holds; idle, the waits and the chunks'
 * shades; how a box is labelled. */
static void pp__svg_legend(pp__text *t, const pp__svg_panel *p, double y)
{
    static const int ops[] = { PP_OP_F, PP_OP_B, PP_OP_I, PP_OP_W, PP_OP_FB };
    static const char *const names[] = { "F forward", "B backward", "I input gradient", "W weight gradient",
                                         "F&amp;B overlapped (F above, B below)" };
    int seen[PP_OP_COUNT] = { 0 }, r, i, k, vpp = p->s ? p->s->vpp : 1;
    double x = PP__SVG_LEFT;
    char fill[48];
    for (r = 0; r < p->ranks; r++)
        for (i = 0; i < p->length[r]; i++)
            if (p->actions[r][i].op >= 0 && p->actions[r][i].op < PP_OP_COUNT) seen[p->actions[r][i].op] = 1;
    pp__text_printf(t, "<g class=\"legend\">");
    for (k = 0; k < 5; k++) {
        if (!seen[ops[k]]) continue;
        if (ops[k] == PP_OP_FB) {
            pp__svg_fill(PP_OP_F, 0, vpp, fill, sizeof fill);
            pp__text_printf(t, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"6\" fill=\"%s\"/>", x, y, fill);
            pp__svg_fill(PP_OP_B, 0, vpp, fill, sizeof fill);
            pp__text_printf(t, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"6\" fill=\"%s\"/>", x, y + 6, fill);
        } else {
            pp__svg_fill(ops[k], 0, vpp, fill, sizeof fill);
            pp__text_printf(t, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"12\" fill=\"%s\"/>", x, y, fill);
        }
        pp__text_printf(t, "<text x=\"%.1f\" y=\"%.1f\">%s</text>", x + 23, y + 10, names[k]);
        x += 23 + PP__SVG_CHAR * (double)(ops[k] == PP_OP_FB ? 33 : strlen(names[k])) + 18;
    }
    y += 20;
    x = PP__SVG_LEFT;
    pp__text_printf(t, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"12\" fill=\"#efefef\" stroke=\"#ccc\"/>"
                    "<text x=\"%.1f\" y=\"%.1f\">idle (the bubble)</text>", x, y, x + 23, y + 10);
    x += 23 + PP__SVG_CHAR * 17 + 18;
    if (p->wait) {
        pp__text_printf(t, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"4\" fill=\"#9a9a9a\"/>"
                        "<text x=\"%.1f\" y=\"%.1f\">waiting for an input</text>", x, y + 8, x + 23, y + 10);
        x += 23 + PP__SVG_CHAR * 20 + 18;
    }
    if (vpp > 1) {
        pp__text_printf(t, "<text x=\"%.1f\" y=\"%.1f\">shade = chunk:</text>", x, y + 10);
        x += PP__SVG_CHAR * 14 + 8;
        for (k = 0; k < vpp; k++) {
            pp__svg_fill(PP_OP_F, k, vpp, fill, sizeof fill);
            pp__text_printf(t, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"12\" fill=\"%s\"/>"
                            "<text x=\"%.1f\" y=\"%.1f\">%d</text>", x, y, fill, x + 22, y + 10, k);
            x += 40;
        }
    }
    pp__text_printf(t, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#444\">label: &lt;stage&gt;&lt;op&gt;&lt;microbatch&gt;, or "
                    "the microbatch where a box is narrow; hover a box for its times</text></g>\n", PP__SVG_LEFT, y + 30);
}

/* The rows: per rank its label, the idle background, the boxes and the idle share. */
static void pp__svg_rows(pp__text *t, const pp__svg_panel *p, double top)
{
    double span = p->t1 > p->t0 ? p->t1 - p->t0 : 1, u = p->to_axis;
    int r, i, k;
    for (r = 0; r < p->ranks; r++) {
        double y = top + r * PP__SVG_ROW, h = PP__SVG_ROW - 6;
        pp__text_printf(t, "<text x=\"8\" y=\"%.1f\" font-weight=\"bold\">rank %d</text>", y + (p->s ? 13 : 18),
                        p->rank_id[r]);
        if (p->s && p->rank_id[r] >= 0 && p->rank_id[r] < p->s->pp) {   /* the stages it holds */
            pp__text_printf(t, "<text x=\"8\" y=\"%.1f\" font-size=\"9\" fill=\"#555\">stage%s", y + 25,
                            p->s->vpp > 1 ? "s" : "");
            for (k = 0; k < p->s->vpp && k < 4; k++)
                pp__text_printf(t, "%s%d", k ? "," : " ", pp_rank_chunk_stage(p->s, p->rank_id[r], k));
            pp__text_printf(t, "%s</text>", p->s->vpp > 4 ? ",&#8230;" : "");
        }
        pp__text_printf(t, "\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"#efefef\"/>\n",
                        PP__SVG_LEFT, y + 3, span * p->px, h);
        for (i = 0; i < p->length[r]; i++) {
            pp_action a = p->actions[r][i];
            double b = p->begin[r][i], e = p->end[r][i], x, w;
            char text[64];
            if (pp__is_comm(a.op) || b < 0) continue;
            x = PP__SVG_LEFT + (b - p->t0) * p->px;
            w = (e - b) * p->px;
            pp_action_format(a, text, sizeof text);
            pp__text_printf(t, "<g><title>rank %d: %s  %.4g to %.4g</title>", p->rank_id[r], text,
                            (b - p->t0) * u, (e - p->t0) * u);
            if (p->wait && p->wait[r][i] >= 0 && p->wait[r][i] < b)
                pp__text_printf(t, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"4\" fill=\"#9a9a9a\"/>",
                                PP__SVG_LEFT + (p->wait[r][i] - p->t0) * p->px, y + 3 + h - 4, (b - p->wait[r][i]) * p->px);
            if (a.op == PP_OP_FB) {
                pp__svg_box(t, p, PP_OP_F, a.stage, a.mb, x, y + 3, w, h / 2);
                pp__svg_box(t, p, PP_OP_B, a.stage2, a.mb2, x, y + 3 + h / 2, w, h / 2);
            } else {
                pp__svg_box(t, p, a.op, a.stage, a.mb, x, y + 3, w, h);
            }
            pp__text_printf(t, "</g>\n");
        }
        pp__text_printf(t, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">%.1f%% idle</text>\n",
                        PP__SVG_LEFT + span * p->px + 6, y + 20, 100.0 * p->idle[r]);
    }
}

/* Writes the panels one above the other, each with its own axis. */
static pp_status pp__svg_write(pp__svg_panel *panels, int n, FILE *out, pp_error *err)
{
    pp__text t = { NULL, 0, 0, 0 };
    double width = 0, height = 0, y = 0;
    int k;
    pp_status st;
    for (k = 0; k < n; k++) {   /* the panels after the first at its width: the plan and the run side by side */
        double w;
        if (k == 0 && (st = pp__svg_scale(&panels[k], err)) != PP_OK) return st;
        if (k > 0)
            panels[k].px = panels[0].px * (panels[0].t1 > panels[0].t0 ? panels[0].t1 - panels[0].t0 : 1) /
                           (panels[k].t1 > panels[k].t0 ? panels[k].t1 - panels[k].t0 : 1);
        w = pp__svg_width(&panels[k]);
        if (w > width) width = w;
        height += PP__SVG_TOP + PP__SVG_ROW * panels[k].ranks + PP__SVG_BOTTOM;
    }
    pp__text_printf(&t, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                    "font-family=\"Helvetica,Arial,sans-serif\" font-size=\"11\">\n"
                    "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", width, height);
    for (k = 0; k < n; k++) {
        const pp__svg_panel *p = &panels[k];
        double rows_top = PP__SVG_TOP, rows_bottom = PP__SVG_TOP + PP__SVG_ROW * p->ranks;
        pp__text_printf(&t, "<g class=\"panel\" transform=\"translate(0,%.0f)\">\n", y);
        pp__text_printf(&t, "<text x=\"8\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s</text>\n"
                        "<text x=\"8\" y=\"40\" fill=\"#333\">%s</text>\n", p->title, p->subtitle);
        pp__svg_axis(&t, p, rows_top, rows_bottom);
        pp__svg_rows(&t, p, rows_top);
        pp__svg_legend(&t, p, rows_bottom + 50);
        pp__text_printf(&t, "</g>\n");
        y += PP__SVG_TOP + PP__SVG_ROW * p->ranks + PP__SVG_BOTTOM;
    }
    pp__text_printf(&t, "</svg>\n");
    return pp__text_flush(&t, out, err);
}

/* A simulated step as a panel; rank_id and the pointer arrays are the caller's, [s->pp] each. */
static void pp__svg_sim_panel(const pp_schedule *s, const pp_sim_result *sim, pp__svg_panel *p, int *rank_id,
                              const pp_action **actions, const double **begin, const double **end)
{
    int r;
    memset(p, 0, sizeof *p);
    for (r = 0; r < s->pp; r++) {
        rank_id[r] = r;
        actions[r] = s->actions[r];
        begin[r] = sim->start[r];
        end[r] = sim->end[r];
    }
    snprintf(p->title, sizeof p->title, "%s, pp=%d, vpp=%d, mb=%d: simulated bubble %.1f%%",
             pp_schedule_kind_name(s->kind), s->pp, s->vpp, s->mb, 100.0 * sim->bubble_mean);
    snprintf(p->subtitle, sizeof p->subtitle, "simulated step: %.4g time units; each rank's idle share at its row's end",
             sim->makespan);
    p->axis = "time (simulation units)";
    p->to_axis = 1;
    p->s = s;
    p->ranks = s->pp;
    p->rank_id = rank_id;
    p->length = s->length;
    p->actions = actions;
    p->begin = begin;
    p->end = end;
    p->idle = sim->bubble;
    p->t0 = 0;
    p->t1 = sim->makespan;
}

pp_status pp_schedule_write_svg(const pp_schedule *s, const pp_sim_result *sim, FILE *out, pp_error *err)
{
    pp_sim_result *owned = NULL;
    const pp_sim_result *use = NULL;
    pp__svg_panel panel;
    int *rank_id;
    const pp_action **actions;
    const double **begin, **end;
    pp_status st;
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    st = pp__sim_for_drawing(s, sim, &owned, &use, err);
    if (st != PP_OK) return st;
    rank_id = (int *)PIPEPAR_MALLOC((size_t)s->pp * sizeof(int));
    actions = (const pp_action **)PIPEPAR_MALLOC((size_t)s->pp * sizeof(*actions));
    begin = (const double **)PIPEPAR_MALLOC((size_t)s->pp * sizeof(*begin));
    end = (const double **)PIPEPAR_MALLOC((size_t)s->pp * sizeof(*end));
    if (!rank_id || !actions || !begin || !end) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
    } else {
        pp__svg_sim_panel(s, use, &panel, rank_id, actions, begin, end);
        st = pp__svg_write(&panel, 1, out, err);
    }
    PIPEPAR_FREE(rank_id);
    PIPEPAR_FREE((void *)actions);
    PIPEPAR_FREE((void *)begin);
    PIPEPAR_FREE((void *)end);
    pp_sim_result_free(owned);
    return st;
}

pp_status pp_schedule_write_torch(const pp_schedule *s, FILE *out, pp_error *err)
{
    pp__text t = { NULL, 0, 0, 0 };
    int r, i;
    char buf[64];
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    for (r = 0; r < s->pp; r++) {
        pp__text_printf(&t, "rank%d:", r);
        for (i = 0; i < s->length[r]; i++) {
            if (pp__is_comm(s->actions[r][i].op)) continue;
            pp_action_format(s->actions[r][i], buf, sizeof buf);
            pp__text_printf(&t, " %s", buf);
        }
        pp__text_printf(&t, "\n");
    }
    return pp__text_flush(&t, out, err);
}

pp_status pp_schedule_write_csv(const pp_schedule *s, FILE *out, pp_error *err)
{
    pp__text t = { NULL, 0, 0, 0 };
    int r, i;
    char buf[64];
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    for (r = 0; r < s->pp; r++) {
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            /* an empty cell between two communication groups that touch (PyTorch reads it as None) */
            if (i && pp__is_comm(a.op) && pp__is_comm(s->actions[r][i - 1].op) && a.group != s->actions[r][i - 1].group)
                pp__text_printf(&t, ",");
            pp_action_format(a, buf, sizeof buf);
            pp__text_printf(&t, "%s%s", i ? "," : "", buf);
        }
        pp__text_printf(&t, "\n");
    }
    return pp__text_flush(&t, out, err);
}

pp_status pp_schedule_write_torch_csv(const pp_schedule *s, pp_torch_csv_format format, FILE *out, pp_error *err)
{
    pp__text t = { NULL, 0, 0, 0 };
    pp_schedule *lowered = NULL;
    const pp_schedule *use = s;
    int *done = NULL, *pending = NULL, r, i, h, npending;
    char buf[64];
    pp_status st;
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    if (format != PP_TORCH_COMPUTE_ONLY && format != PP_TORCH_COMPUTE_COMMS)
        return pp__fail(err, PP_EINVAL, "format=%d: PP_TORCH_COMPUTE_ONLY (0) or PP_TORCH_COMPUTE_COMMS (1)", (int)format);
    if (s->placement == PP_PLACEMENT_DUAL)
        return pp__fail(err, PP_EINVAL, "schedule: %s's two routes (each model stage on two ranks) have no form in "
                        "PyTorch's runtime, which sends every microbatch through stages 0 .. %d in order; dualpipev "
                        "is its V form", pp_schedule_kind_name(s->kind), s->num_stages - 1);
    if (format == PP_TORCH_COMPUTE_COMMS && !s->lowered) {
        if ((st = pp_schedule_copy(s, &lowered, err)) != PP_OK) return st;
        if ((st = pp_schedule_lower(lowered, err)) != PP_OK) { pp_schedule_free(lowered); return st; }
        use = lowered;
    }
    done = (int *)pp__calloc((size_t)use->num_stages, sizeof(int));
    pending = (int *)pp__calloc((size_t)use->num_stages, sizeof(int));
    if (!done || !pending) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
        goto fail;
    }
    for (r = 0; r < use->pp; r++) {
        int first = 1;
        npending = 0;
        for (i = 0; i < use->length[r]; i++) {
            pp_action a = use->actions[r][i];
            int ops[2], stg[2], mbs[2], nh;
            if (pp__is_comm(a.op)) {
                if (format == PP_TORCH_COMPUTE_ONLY) continue;
            } else if (npending) {
                for (h = 0; h < npending; h++) pp__text_printf(&t, ",%dREDUCE_GRAD", pending[h]);
                npending = 0;
            }
            pp_action_format(a, buf, sizeof buf);
            pp__text_printf(&t, "%s%s", first ? "" : ",", buf);
            first = 0;
            if (format == PP_TORCH_COMPUTE_ONLY || pp__is_comm(a.op)) continue;
            nh = pp__halves(a, ops, stg, mbs);
            for (h = 0; h < nh; h++)
                if ((ops[h] == PP_OP_B || ops[h] == PP_OP_W) && ++done[stg[h]] == use->mb) pending[npending++] = stg[h];
        }
        for (h = 0; h < npending; h++) pp__text_printf(&t, ",%dREDUCE_GRAD", pending[h]);
        pp__text_printf(&t, "\n");
    }
    PIPEPAR_FREE(done);
    PIPEPAR_FREE(pending);
    pp_schedule_free(lowered);
    return pp__text_flush(&t, out, err);
fail:
    PIPEPAR_FREE(done);
    PIPEPAR_FREE(pending);
    pp_schedule_free(lowered);
    pp__text_free(&t);
    return st;
}

pp_status pp_schedule_write_json(const pp_schedule *s, const pp_sim_result *sim, FILE *out, pp_error *err)
{
    pp__text t = { NULL, 0, 0, 0 };
    int r, i;
    char buf[64];
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    if (sim) {
        if (sim->pp != s->pp) return pp__fail(err, PP_EINVAL, "sim: computed for another schedule");
        for (r = 0; r < s->pp; r++)
            if (sim->length[r] != s->length[r])
                return pp__fail(err, PP_EINVAL, "sim: rank %d has %d timed actions but the schedule has %d",
                                r, sim->length[r], s->length[r]);
    }
    pp__text_printf(&t, "{\"kind\": \"%s\", \"pp\": %d, \"vpp\": %d, \"mb\": %d, \"group\": %d, "
                    "\"placement\": \"%s\", \"num_stages\": %d, \"lowered\": %s,\n \"ranks\": [\n",
                    pp_schedule_kind_name(s->kind), s->pp, s->vpp, s->mb, s->group,
                    s->placement == PP_PLACEMENT_DUAL ? "dual" : s->placement == PP_PLACEMENT_V ? "v" : "looped", s->num_stages, s->lowered ? "true" : "false");
    for (r = 0; r < s->pp; r++) {
        pp__text_printf(&t, "  {\"rank\": %d, \"actions\": [", r);
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            pp_action_format(a, buf, sizeof buf);
            pp__text_printf(&t, "%s\n    {\"action\": \"%s\", \"op\": \"%s\", \"stage\": %d, \"mb\": %d", i ? "," : "",
                            buf, pp_op_name((pp_op)a.op), (int)a.stage, (int)a.mb);
            if (sim) pp__text_printf(&t, ", \"start\": %.9g, \"end\": %.9g", sim->start[r][i], sim->end[r][i]);
            pp__text_printf(&t, "}");
        }
        pp__text_printf(&t, "]}%s\n", r + 1 < s->pp ? "," : "");
    }
    pp__text_printf(&t, " ]");
    if (sim) {
        pp__text_printf(&t, ",\n \"simulation\": {\"makespan\": %.9g, \"bubble_mean\": %.9g, \"bubble\": [",
                        sim->makespan, sim->bubble_mean);
        for (r = 0; r < s->pp; r++) pp__text_printf(&t, "%s%.9g", r ? ", " : "", sim->bubble[r]);
        pp__text_printf(&t, "], \"peak_live\": [");
        for (r = 0; r < s->pp; r++) pp__text_printf(&t, "%s%d", r ? ", " : "", sim->peak_live[r]);
        pp__text_printf(&t, "], \"peak_memory\": [");
        for (r = 0; r < s->pp; r++) pp__text_printf(&t, "%s%.9g", r ? ", " : "", sim->peak_memory[r]);
        pp__text_printf(&t, "]}");
    }
    pp__text_printf(&t, "\n}\n");
    return pp__text_flush(&t, out, err);
}

/* PyTorch's runtime-only actions "<stage>REDUCE_GRAD", "<stage>UNSHARD", "<stage>RESHARD" (its
 * gradient scaling and FSDP steps, which a pipepar trainer does itself): the reader skips them. */
static int pp__torch_bookkeeping_cell(const char *b, const char *e)
{
    static const char *const words[] = { "REDUCE_GRAD", "UNSHARD", "RESHARD" };
    size_t k;
    if (b == e || *b < '0' || *b > '9') return 0;
    while (b < e && *b >= '0' && *b <= '9') b++;
    for (k = 0; k < sizeof words / sizeof words[0]; k++)
        if ((size_t)(e - b) == strlen(words[k]) && !memcmp(b, words[k], (size_t)(e - b))) return 1;
    return 0;
}

/* Reads PyTorch's pipeline-order CSV: row r is rank r's program, one action per cell; empty
 * cells (PyTorch writes None as an empty cell) are skipped. pp is the number of rows; stages,
 * microbatches and the placement come from the actions themselves. */
pp_status pp_schedule_read_csv(const char *text, size_t len, pp_schedule **out, pp_error *err)
{
    pp_action *acts = NULL;
    int *row_of = NULL;
    size_t n = 0, cap = 0, pos = 0;
    int group = 1;
    int rows = 0, max_stage = -1, max_mb = -1, looped = 1, vshape = 1, dual = 1, vpp, torch_form = 0;
    pp_schedule *s = NULL;
    pp_status st = PP_OK;
    const char *nul;
    if (!text || !out) return pp__fail(err, PP_EINVAL, "text and out: must not be NULL");
    *out = NULL;
    if ((nul = (const char *)memchr(text, '\0', len)) != NULL)
        return pp__fail(err, PP_EPARSE, "CSV: byte %lu is a NUL: expected text", (unsigned long)(nul - text));
    while (pos < len) {
        size_t line_end = pos, cell;
        while (line_end < len && text[line_end] != '\n') line_end++;
        cell = pos;
        /* skip blank lines and comments */
        {
            size_t q = pos;
            while (q < line_end && (text[q] == ' ' || text[q] == '\t' || text[q] == '\r')) q++;
            if (q == line_end || text[q] == '#') { pos = line_end + 1; continue; }
        }
        while (cell <= line_end) {
            size_t ce = cell;
            char buf[96];
            pp_action a;
            while (ce < line_end && text[ce] != ',') ce++;
            {
                size_t b = cell, e = ce;
                while (b < e && (text[b] == ' ' || text[b] == '\t' || text[b] == '\r' || text[b] == '"')) b++;
                while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\r' || text[e - 1] == '"')) e--;
                if (e == b) group++;   /* an empty cell closes a communication group */
                if (e > b && pp__torch_bookkeeping_cell(text + b, text + e)) { e = b; torch_form = 1; }
                if (e > b) {
                    if (e - b >= sizeof buf) {
                        st = pp__fail(err, PP_EPARSE, "CSV row %d: cell '%.20s...' is too long for an action", rows, text + b);
                        goto done;
                    }
                    memcpy(buf, text + b, e - b);
                    buf[e - b] = '\0';
                    st = pp_action_parse(buf, &a, err);
                    if (st != PP_OK) {
                        char msg[PP_ERROR_MESSAGE_SIZE];
                        snprintf(msg, sizeof msg, "%s", err ? err->message : "");
                        st = pp__fail(err, PP_EPARSE, "CSV row %d (rank %d): %s", rows + 1, rows, msg);
                        goto done;
                    }
                    if (n == cap) {
                        size_t nc = cap ? cap * 2 : 256;
                        pp_action *na = (pp_action *)PIPEPAR_REALLOC(acts, nc * sizeof(pp_action));
                        int *nr = (int *)PIPEPAR_REALLOC(row_of, nc * sizeof(int));
                        if (na) acts = na;
                        if (nr) row_of = nr;
                        if (!na || !nr) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
                        cap = nc;
                    }
                    if (pp__is_comm(a.op)) a.group = group;
                    acts[n] = a;
                    row_of[n] = rows;
                    n++;
                    if (a.stage > max_stage) max_stage = a.stage;
                    if (a.op == PP_OP_FB && a.stage2 > max_stage) max_stage = a.stage2;
                    if (a.mb > max_mb) max_mb = a.mb;
                    if (a.op == PP_OP_FB && a.mb2 > max_mb) max_mb = a.mb2;
                }
            }
            cell = ce + 1;
        }
        rows++;
        if (rows > PP_CSV_MAX_RANKS) {
            st = pp__fail(err, PP_EPARSE, "CSV: more than %d rows (ranks): at most PP_CSV_MAX_RANKS=%d",
                          PP_CSV_MAX_RANKS, PP_CSV_MAX_RANKS);
            goto done;
        }
        pos = line_end + 1;
    }
    if (rows == 0 || n == 0) { st = pp__fail(err, PP_EPARSE, "CSV: no actions found (one row per rank expected)"); goto done; }
    /* PyTorch's compute_comms form (it has REDUCE_GRAD cells) posts every transfer on its own */
    if (torch_form)
        for (pos = 0; pos < n; pos++) acts[pos].group = (int)pos + 1;
    if ((max_stage + 1) % rows != 0) {
        st = pp__fail(err, PP_EPARSE, "CSV: %d stages over %d ranks is not a whole number of chunks per rank",
                      max_stage + 1, rows);
        goto done;
    }
    vpp = (max_stage + 1) / rows;
    for (pos = 0; pos < n; pos++) {
        int sg = acts[pos].stage, rr = row_of[pos];
        if (sg % rows != rr) looped = 0;
        if (vpp != 2 || !(sg == rr || sg == 2 * rows - 1 - rr)) vshape = 0;
        if (acts[pos].op == PP_OP_FB && acts[pos].stage2 != rr && acts[pos].stage2 != 2 * rows - 1 - rr) vshape = 0;
    }
    if (!looped && !vshape) {
        st = pp__fail(err, PP_EPARSE, "CSV: stages are placed neither looped (stage s on rank s %% pp) nor V-shaped "
                      "(rank r holds r and 2pp-1-r)");
        goto done;
    }
    /* V-shaped stages where no microbatch crosses from the first pp stages to the others, the
     * first half of the microbatches staying in front and the second half behind: DualPipe's two
     * routes (a V schedule sends every microbatch through all 2pp stages) */
    if (!looped && vshape && rows % 2 == 0 && (max_mb + 1) % 2 == 0) {
        int half = (max_mb + 1) / 2;
        for (pos = 0; pos < n && dual; pos++) {
            pp_action a = acts[pos];
            if ((a.stage < rows) != (a.mb < half)) dual = 0;
            if (a.op == PP_OP_FB && (a.stage2 < rows) != (a.mb2 < half)) dual = 0;
        }
    } else {
        dual = 0;
    }
    st = pp_schedule_create(rows, vpp, max_mb + 1,
                            looped ? PP_PLACEMENT_LOOPED : dual ? PP_PLACEMENT_DUAL : PP_PLACEMENT_V, &s, err);
    if (st != PP_OK) goto done;
    s->kind = PP_CUSTOM;
    for (pos = 0; pos < n; pos++) {
        st = pp_schedule_append(s, row_of[pos], acts[pos], err);
        if (st != PP_OK) goto done;
    }
    *out = s;
    s = NULL;
    st = pp__ok(err);
done:
    pp_schedule_free(s);
    PIPEPAR_FREE(acts);
    PIPEPAR_FREE(row_of);
    return st;
}


/* ============================================================================================
 * >>search (implementation): greedy zero-bubble schedules, and the search over every kind.
 * ============================================================================================ */

#ifndef PIPEPAR_NO_THREADS
#include <pthread.h>   /* pp_search_config.threads */
#endif

/* --- greedy ---------------------------------------------------------------------------------- */

typedef struct pp__greedy {
    pp_schedule *s;
    const pp_sim_costs *costs;
    double L;                   /* cap on live activations per rank, in weights */
    double *weight;             /* [num_stages] what one live activation of the stage weighs: 1, or
                                   with max_memory its memory_stage in units of an even stage's */
    unsigned flags;
    double comm;                /* time of one transfer between two ranks */
    double *f_end, *i_end;      /* [num_stages * mb]; < 0 while not scheduled */
    int *next_f, *next_i;       /* [num_stages] next microbatch to forward / backward */
    double *t;                  /* [pp] when the rank is free */
    double *live, *reserved;    /* [pp] weights of the activations held, and promised to admitted
                                   microbatches */
    int *left_fi;               /* [pp] F and I actions still to schedule */
    int *last_op;               /* [pp] the rank's last F or I (PP_OP_W before any) */
    pp__wfifo *wq;              /* [pp] pending W's, oldest first */
} pp__greedy;

/* What a free rank does next: commit an action at its free time, or wait until `wake`. */
typedef struct pp__greedy_move {
    int commit;
    pp_action a;
    double wake;                /* DBL_MAX: until something changes */
} pp__greedy_move;

#define PP__GREEDY_EPS 1e-12

static double pp__greedy_comm(const pp__greedy *g, int from_stage, int to_stage)
{
    return pp_stage_rank(g->s, from_stage) == pp_stage_rank(g->s, to_stage) ? 0.0 : g->comm;
}

/* Decides rank r's next move at time t[r], from what is scheduled so far. */
static pp__greedy_move pp__greedy_decide(const pp__greedy *g, int r)
{
    const pp_schedule *s = g->s;
    pp__greedy_move mv;
    double t = g->t[r], next_known = DBL_MAX, arr_i = 0, arr_f = 0;
    int c, best_i = -1, best_f = -1, mem_blocked = 0;
    mv.commit = 0; mv.wake = DBL_MAX; mv.a = pp__action(PP_OP_W, 0, 0);
    for (c = 0; c < s->vpp; c++) {
        int st = pp_rank_chunk_stage(s, r, c), m;
        double arr;
        /* the next I of this chunk: needs its F and the gradient from the next stage */
        m = g->next_i[st];
        if (m < s->mb && g->f_end[PP__SM(s, st, m)] >= 0) {
            arr = g->f_end[PP__SM(s, st, m)];
            if (st + 1 < s->num_stages) {
                double e = g->i_end[PP__SM(s, st + 1, m)];
                arr = e < 0 ? -1 : (e + pp__greedy_comm(g, st + 1, st) > arr ? e + pp__greedy_comm(g, st + 1, st) : arr);
            }
            if (arr >= 0) {
                if (arr <= t + PP__GREEDY_EPS) {
                    /* oldest microbatch first, then the deeper stage (closer to the loss) */
                    if (best_i < 0 || m < g->next_i[best_i] || (m == g->next_i[best_i] && st > best_i)) {
                        best_i = st; arr_i = arr;
                    }
                } else if (arr < next_known) next_known = arr;
            }
        }
        /* the next F of this chunk: needs the previous stage's output and room in memory */
        m = g->next_f[st];
        if (m < s->mb) {
            int admit, k;
            double need = 0;
            if (s->vpp == 2 && (g->flags & PP_GREEDY_EAGER_ADMIT)) {   /* one slot for the oldest's chunk 1 */
                need = g->weight[pp_rank_chunk_stage(s, r, 1)] + (c == 0 ? g->weight[st] : 0);
                admit = g->live[r] + need <= g->L + PP__GREEDY_EPS;
            } else if (c == 0) {   /* a new microbatch reserves room for all its chunks */
                for (k = 0; k < s->vpp; k++) need += g->weight[pp_rank_chunk_stage(s, r, k)];
                admit = g->live[r] + g->reserved[r] + need <= g->L + PP__GREEDY_EPS;
            } else admit = 1;
            arr = 0;
            if (st > 0) {
                double e = g->f_end[PP__SM(s, st - 1, m)];
                arr = e < 0 ? -1 : e + pp__greedy_comm(g, st - 1, st);
            }
            if (arr >= 0) {
                if (!admit) {
                    if (arr <= t + PP__GREEDY_EPS) mem_blocked = 1;
                } else if (arr <= t + PP__GREEDY_EPS) {
                    int shallow = (g->flags & PP_GREEDY_SHALLOW_FIRST) != 0;
                    if (best_f < 0 || (shallow ? st < best_f : st > best_f)) { best_f = st; arr_f = arr; }
                } else if (arr < next_known) next_known = arr;
            }
        }
    }
    /* an I and an F both ready: by default the other kind than the rank's last F or I (1F1B's
     * alternation); PP_GREEDY_I_FIRST always the I; PP_GREEDY_READY_ORDER the one that became
     * ready first (the I on a tie) */
    if (best_i >= 0 && best_f >= 0) {
        int take_i;
        if (g->flags & PP_GREEDY_I_FIRST) take_i = 1;
        else if (g->flags & PP_GREEDY_READY_ORDER) take_i = arr_i <= arr_f;
        else take_i = g->last_op[r] != PP_OP_I;
        if (take_i) best_f = -1; else best_i = -1;
    }
    if (best_i >= 0) {
        mv.commit = 1; mv.a = pp__action(PP_OP_I, best_i, g->next_i[best_i]);
        return mv;
    }
    if (best_f >= 0) {
        mv.commit = 1; mv.a = pp__action(PP_OP_F, best_f, g->next_f[best_f]);
        return mv;
    }
    if (g->wq[r].head < g->wq[r].tail) {
        const pp__wfifo *q = &g->wq[r];
        double w = pp__half_cost(s, g->costs, PP_OP_W, q->stage[q->head]);
        int run;
        if (mem_blocked || g->left_fi[r] == 0) run = 1;                 /* must free memory / tail */
        else if (g->flags & PP_GREEDY_LAZY_W) run = 0;
        else if (next_known == DBL_MAX) run = 1;                        /* no input in sight */
        else run = t + w <= next_known + PP__GREEDY_EPS || (g->flags & PP_GREEDY_FILL_ANY_GAP);
        if (run) {
            mv.commit = 1; mv.a = pp__action(PP_OP_W, q->stage[q->head], q->mb[q->head]);
            return mv;
        }
    }
    mv.wake = next_known;
    return mv;
}

static void pp__greedy_free(pp__greedy *g)
{
    int r;
    if (g->wq && g->s) for (r = 0; r < g->s->pp; r++) pp__wfifo_free(&g->wq[r]);
    PIPEPAR_FREE(g->wq);
    PIPEPAR_FREE(g->f_end); PIPEPAR_FREE(g->i_end); PIPEPAR_FREE(g->next_f); PIPEPAR_FREE(g->next_i);
    PIPEPAR_FREE(g->t); PIPEPAR_FREE(g->live); PIPEPAR_FREE(g->reserved); PIPEPAR_FREE(g->left_fi);
    PIPEPAR_FREE(g->weight);
    PIPEPAR_FREE(g->last_op);
}

/* What a live activation of each stage weighs against the cap: 1 each, or with max_memory its
 * memory_stage in units of an even stage's (total / stages), as pp_simulate's peak_memory counts
 * it. Every rank must fit one microbatch through all its chunks, or no order can move. */
static pp_status pp__greedy_weights(pp__greedy *g, const pp_greedy_config *cfg, pp_error *err)
{
    const pp_schedule *s = g->s;
    const double *m = cfg->max_memory > 0 ? cfg->costs->memory_stage : NULL;
    double total = 0, need;
    int st, r, c;
    for (st = 0; st < s->num_stages; st++) {
        if (m && !(m[st] >= 0 && m[st] <= DBL_MAX))
            return pp__fail(err, PP_EINVAL, "costs: memory_stage[%d]=%g: must be a finite number >= 0", st, m[st]);
        total += m ? m[st] : 0;
    }
    for (st = 0; st < s->num_stages; st++) g->weight[st] = !m ? 1.0 : total > 0 ? m[st] * s->num_stages / total : 0;
    for (r = 0; m && r < s->pp; r++) {
        for (need = 0, c = 0; c < s->vpp; c++) need += g->weight[pp_rank_chunk_stage(s, r, c)];
        if (need > g->L + PP__GREEDY_EPS)
            return pp__fail(err, PP_EUNSUPPORTED, "max_memory=%g: a greedy schedule needs room for one microbatch "
                            "through every chunk of a rank, and rank %d's take %g", cfg->max_memory, r,
                            need / s->vpp);
    }
    return PP_OK;
}

pp_status pp_schedule_build_greedy(const pp_greedy_config *cfg, pp_schedule **out, pp_error *err)
{
    pp__greedy g;
    pp_sim_costs unit;
    pp_schedule *s = NULL;
    pp_status st;
    int vpp, r, L;
    size_t n, k, remaining;
    if (!cfg || !out) return pp__fail(err, PP_EINVAL, "cfg and out: must not be NULL");
    *out = NULL;
    memset(&g, 0, sizeof g);
    if (cfg->pp < 1) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1", cfg->pp);
    if (cfg->mb < 1) return pp__fail(err, PP_EINVAL, "mb=%d: must be at least 1", cfg->mb);
    if (cfg->placement == PP_PLACEMENT_DUAL)
        return pp__fail(err, PP_EUNSUPPORTED, "placement=dual: the greedy scheduler builds looped and V placements "
                        "(DualPipe's two routes: build kind dualpipe)");
    if (cfg->placement != PP_PLACEMENT_LOOPED && cfg->placement != PP_PLACEMENT_V)
        return pp__fail(err, PP_EINVAL, "placement=%d: unknown", (int)cfg->placement);
    vpp = cfg->vpp ? cfg->vpp : (cfg->placement == PP_PLACEMENT_V ? 2 : 1);
    if (vpp < 1) return pp__fail(err, PP_EINVAL, "vpp=%d: must be at least 1 (0 means the default)", cfg->vpp);
    if (cfg->placement == PP_PLACEMENT_V && vpp != 2)
        return pp__fail(err, PP_EUNSUPPORTED, "vpp=%d: the V placement has exactly 2 chunks per rank", vpp);
    if (cfg->max_live < 0)
        return pp__fail(err, PP_EINVAL, "max_live=%d: must be at least 1 (0 means pp*vpp)", cfg->max_live);
    if (!(cfg->max_memory >= 0 && cfg->max_memory <= 1e12))
        return pp__fail(err, PP_EINVAL, "max_memory=%g: must be a number between 0 and 1e12 (0: max_live counts)",
                        cfg->max_memory);
    if (cfg->max_memory > 0 && cfg->max_live)
        return pp__fail(err, PP_EINVAL, "max_memory=%g and max_live=%d: give one cap", cfg->max_memory, cfg->max_live);
    if (cfg->max_memory > 0 && !(cfg->costs && cfg->costs->memory_stage))
        return pp__fail(err, PP_EINVAL, "max_memory=%g: weighs activations by costs->memory_stage, which is NULL "
                        "(max_live caps their count)", cfg->max_memory);
    if (cfg->costs && cfg->costs->action_cost)
        return pp__fail(err, PP_EINVAL, "costs: action_cost: times an existing schedule's actions; the greedy "
                        "scheduler builds a new one (give per-stage costs)");
    if (cfg->costs && cfg->costs->grouped)
        return pp__fail(err, PP_EINVAL, "costs: grouped=%d: the greedy scheduler places its actions with each "
                        "transfer on its own (leave it 0; pp_simulate can then time the result grouped)",
                        cfg->costs->grouped);
    L = cfg->max_live ? cfg->max_live : cfg->pp * vpp;
    if (L < vpp)
        return pp__fail(err, PP_EUNSUPPORTED,
                        "max_live=%d: a greedy schedule needs room for one microbatch on each of a rank's vpp=%d "
                        "chunks", L, vpp);
    if (cfg->flags >= PP_GREEDY_FLAG_LIMIT)
        return pp__fail(err, PP_EINVAL, "flags=%u: unknown bits (PP_GREEDY_* are below %u)", cfg->flags,
                        PP_GREEDY_FLAG_LIMIT);
    if (!cfg->costs) { memset(&unit, 0, sizeof unit); unit.f = 1; unit.b = 2; }
    g.costs = cfg->costs ? cfg->costs : &unit;
    if (g.costs->f < 0 || g.costs->b < 0 || g.costs->i < 0 || g.costs->w < 0 || g.costs->p2p_latency < 0 ||
        g.costs->p2p_seconds_per_byte < 0 || g.costs->activation_bytes < 0)
        return pp__fail(err, PP_EINVAL, "costs: every cost must be >= 0 (f=%g b=%g i=%g w=%g p2p=%g)", g.costs->f,
                        g.costs->b, g.costs->i, g.costs->w, g.costs->p2p_latency);
    if ((st = pp__check_rank_speed(g.costs, cfg->pp, err)) != PP_OK) return st;
    st = pp_schedule_create(cfg->pp, vpp, cfg->mb, cfg->placement, &s, err);
    if (st != PP_OK) return st;
    g.s = s; g.L = cfg->max_memory > 0 ? cfg->max_memory * vpp : (double)L; g.flags = cfg->flags;
    g.comm = g.costs->p2p_latency + g.costs->p2p_seconds_per_byte * g.costs->activation_bytes;
    n = (size_t)s->num_stages * (size_t)s->mb;
    g.f_end = (double *)PIPEPAR_MALLOC(n * sizeof(double));
    g.i_end = (double *)PIPEPAR_MALLOC(n * sizeof(double));
    g.next_f = (int *)pp__calloc((size_t)s->num_stages, sizeof(int));
    g.next_i = (int *)pp__calloc((size_t)s->num_stages, sizeof(int));
    g.t = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    g.live = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    g.reserved = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    g.weight = (double *)pp__calloc((size_t)s->num_stages, sizeof(double));
    g.left_fi = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    g.last_op = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    g.wq = (pp__wfifo *)pp__calloc((size_t)s->pp, sizeof(pp__wfifo));
    if (!g.f_end || !g.i_end || !g.next_f || !g.next_i || !g.t || !g.live || !g.reserved || !g.left_fi || !g.last_op || !g.wq ||
        !g.weight) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
        goto done;
    }
    for (k = 0; k < n; k++) g.f_end[k] = g.i_end[k] = -1;
    if ((st = pp__greedy_weights(&g, cfg, err)) != PP_OK) goto done;
    for (r = 0; r < s->pp; r++) {
        if (!pp__wfifo_init(&g.wq[r], vpp * s->mb)) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        g.left_fi[r] = 2 * vpp * s->mb;
        g.last_op[r] = PP_OP_W;
    }
    remaining = 3 * n;
    while (remaining > 0) {
        pp__greedy_move best, mv;
        int best_r = -1;
        double best_time = DBL_MAX;
        best.commit = 0; best.wake = DBL_MAX; best.a = pp__action(PP_OP_W, 0, 0);
        /* the earliest event of all ranks: a commit at the rank's free time, or a wake-up */
        for (r = 0; r < s->pp; r++) {
            double when;
            if (g.left_fi[r] == 0 && g.wq[r].head == g.wq[r].tail) continue;
            mv = pp__greedy_decide(&g, r);
            when = mv.commit ? g.t[r] : mv.wake;
            if (best_r < 0 || when < best_time || (when == best_time && mv.commit && !best.commit)) {
                best_r = r; best_time = when; best = mv;
            }
        }
        if (best_time == DBL_MAX) {
            /* everyone waits for something not scheduled yet: the rank that is free first runs a W
             * (one always exists: the oldest microbatch can move unless a rank holds W's back) */
            best_r = -1;
            for (r = 0; r < s->pp; r++)
                if (g.wq[r].head < g.wq[r].tail && (best_r < 0 || g.t[r] < g.t[best_r])) best_r = r;
            if (best_r < 0) {
                st = pp__fail(err, PP_EINVALID_SCHEDULE, "greedy schedule: no rank can move (internal error; "
                              "pp=%d vpp=%d mb=%d cap %g)", s->pp, vpp, s->mb, g.L);
                goto done;
            }
            best.commit = 1;
            best.a = pp__action(PP_OP_W, g.wq[best_r].stage[g.wq[best_r].head], g.wq[best_r].mb[g.wq[best_r].head]);
        }
        r = best_r;
        if (!best.commit) { g.t[r] = best.wake; continue; }
        {
            pp_action a = best.a;
            size_t key = PP__SM(s, a.stage, a.mb);
            double start = g.t[r], end = start + pp__half_cost(s, g.costs, a.op, a.stage);
            st = pp_schedule_append(s, r, a, err);
            if (st != PP_OK) goto done;
            g.t[r] = end;
            remaining--;
            if (a.op != PP_OP_W) g.last_op[r] = a.op;
            if (a.op == PP_OP_F) {
                g.f_end[key] = end;
                g.next_f[a.stage]++;
                int c;
                g.live[r] += g.weight[a.stage];
                if (pp_stage_chunk(s, a.stage) == 0)
                    for (c = 1; c < vpp; c++) g.reserved[r] += g.weight[pp_rank_chunk_stage(s, r, c)];
                else g.reserved[r] -= g.weight[a.stage];
                g.left_fi[r]--;
            } else if (a.op == PP_OP_I) {
                g.i_end[key] = end;
                g.next_i[a.stage]++;
                pp__wfifo_push(&g.wq[r], a.stage, a.mb);
                g.left_fi[r]--;
            } else {
                g.live[r] -= g.weight[a.stage];
                g.wq[r].head++;
            }
        }
    }
    *out = s;
    s = NULL;
    st = pp__ok(err);
done:
    pp__greedy_free(&g);
    pp_schedule_free(s);
    return st;
}

/* --- search ------------------------------------------------------------------------------------ */

typedef struct pp__candidate {
    pp_schedule_kind kind;      /* PP_CUSTOM: greedy */
    pp_placement placement;
    int vpp, group, max_live;
    double max_memory;          /* greedy: a cap weighed by stage memory (instead of max_live) */
    unsigned flags;
    int split;                  /* pp_schedule_split_overlaps before lowering */
} pp__candidate;

typedef struct pp__search {
    const pp_search_config *cfg;    /* the working copy: under cfg.layers, its costs are the current split's */
    pp_search_entry *entries;
    int count, cap;
    int has_stage_costs;            /* DualPipe's chunks are whole model stages: per-stage costs do not fit it */
    /* cfg.layers: each entry keeps its schedule's fastest split, stages ints at pool + layout_at[entry] */
    const int32_t *layout;          /* the current split [stages]; NULL without cfg.layers */
    const int32_t *even;            /* the even split [stages] */
    int stages;
    int first;                      /* entries of the current vpp start here */
    int cursor;                     /* the entry the next candidate most likely matches */
    size_t *layout_at;              /* [cap] */
    int32_t *pool;
    size_t pool_len, pool_cap;
    int split_fits;                 /* the current split's best entry: fits the cap? */
    double split_makespan;          /*   and its step time (DBL_MAX before any) */
    pp_search_progress where;       /* what cfg->progress is told */
    long split_index;               /* cfg.layers: the current split's place in the vpp's enumeration */
    long *best_at;                  /* [cap] the split_index of each entry's kept split */
    const struct pp__search *ref;   /* cfg.layers: the search that holds the even split's entries
                                       (itself, or the threaded workers' parent: read only while they
                                       run); a candidate whose bound on a later split exceeds its time
                                       there is skipped (pp__search_try) */
    double *even_makespan;          /* [cap] each entry's time on the even split (split_index 0) where
                                       it fits there; DBL_MAX otherwise */
    int ref_cursor;                 /* the entry of ref the next candidate most likely matches */
    double split_bound[2];          /* the current split's bound, looped and V placement (-1: not yet) */
    long ruled_out;                 /* candidates so skipped */
} pp__search;

static void pp__candidate_name(const pp__candidate *c, char *buf, size_t size)
{
    char cap[48];
    const char *kn = c->kind == PP_CUSTOM ? "greedy" : pp_schedule_kind_name(c->kind);
    switch (c->kind) {
    case PP_INTERLEAVED_1F1B: case PP_INTERLEAVED_ZB:
        snprintf(buf, size, "%s vpp=%d group=%d", kn, c->vpp, c->group); break;
    case PP_LOOPED_BFS:
        snprintf(buf, size, "%s vpp=%d", kn, c->vpp); break;
    case PP_ZB_H2:
        snprintf(buf, size, "%s max_live=%d", kn, c->max_live); break;
    case PP_CUSTOM:
        if (c->max_memory > 0) snprintf(cap, sizeof cap, "max_memory=%g", c->max_memory);
        else snprintf(cap, sizeof cap, "max_live=%d", c->max_live);
        snprintf(buf, size, "greedy %s vpp=%d %s%s%s%s%s%s", c->placement == PP_PLACEMENT_V ? "V" : "looped",
                 c->vpp, cap, c->flags & PP_GREEDY_FILL_ANY_GAP ? " fill" : "",
                 c->flags & PP_GREEDY_SHALLOW_FIRST ? " shallow" : "", c->flags & PP_GREEDY_LAZY_W ? " lazy-w" : "",
                 c->flags & PP_GREEDY_I_FIRST ? " i-first" : c->flags & PP_GREEDY_READY_ORDER ? " ready-order" : "",
                 c->flags & PP_GREEDY_EAGER_ADMIT ? " eager" : "");
        break;
    default:
        snprintf(buf, size, "%s%s", kn, c->split ? " split" : ""); break;
    }
}

static pp_status pp__candidate_build(const pp_search_config *cfg, const pp__candidate *c, pp_schedule **out,
                                     pp_error *err)
{
    if (c->kind == PP_CUSTOM) {
        pp_greedy_config g;
        memset(&g, 0, sizeof g);
        g.pp = cfg->pp; g.mb = cfg->mb; g.vpp = c->vpp; g.placement = c->placement; g.max_live = c->max_live;
        pp_sim_costs placing = cfg->costs;
        placing.grouped = 0;   /* the scheduler places each transfer on its own; the ranking may group */
        g.max_memory = c->max_memory;
        g.costs = &placing; g.flags = c->flags;
        return pp_schedule_build_greedy(&g, out, err);
    } else {
        pp_schedule_config sc;
        memset(&sc, 0, sizeof sc);
        sc.kind = c->kind; sc.pp = cfg->pp; sc.mb = cfg->mb; sc.vpp = c->vpp; sc.group = c->group;
        sc.max_live = c->max_live;
        return pp_schedule_build(&sc, out, err);
    }
}

/* Ranking: within the cap first; then shorter step, smaller bubble, less memory; then name, so
 * that equal schedules come out in a stable order. Step times equal within 1e-9 relative count
 * as equal (the same schedule found two ways must tie). */
static int pp__entry_cmp(const void *pa, const void *pb)
{
    const pp_search_entry *a = (const pp_search_entry *)pa, *b = (const pp_search_entry *)pb;
    double tol = 1e-9 * (a->makespan > b->makespan ? a->makespan : b->makespan);
    if (a->fits != b->fits) return a->fits ? -1 : 1;
    if (a->makespan < b->makespan - tol) return -1;
    if (a->makespan > b->makespan + tol) return 1;
    if (a->bubble < b->bubble - 1e-12) return -1;
    if (a->bubble > b->bubble + 1e-12) return 1;
    if (a->peak_memory < b->peak_memory - 1e-12) return -1;
    if (a->peak_memory > b->peak_memory + 1e-12) return 1;
    if ((a->kind == PP_CUSTOM) != (b->kind == PP_CUSTOM)) return a->kind == PP_CUSTOM ? 1 : -1;  /* named kinds win ties */
    return strcmp(a->name, b->name);
}

/* Adds entry t, or under cfg.layers keeps the faster of t and its schedule's entry from an
 * earlier split of this vpp (with the current split). Candidates come in the same order for
 * every split, so the entry at the cursor is nearly always t's. */
/* Distance of a split from the even one: layers moved. */
static long pp__split_distance(const int32_t *split, const int32_t *even, int stages)
{
    long d = 0;
    int s;
    for (s = 0; s < stages; s++) d += labs((long)split[s] - even[s]);
    return d;
}

/* The entry of this vpp named name (or alt, when given) in R, or -1: searched from *cursor on,
 * wrapping, as candidates come in the same order for every split; a hit moves *cursor past it. */
static int pp__search_find(const pp__search *R, const char *name, const char *alt, int *cursor)
{
    int k, count = R->count - R->first;
    if (*cursor < R->first || *cursor >= R->count) *cursor = R->first;
    for (k = 0; k < count; k++) {
        int j = R->first + (*cursor - R->first + k) % count;
        if (!strcmp(R->entries[j].name, name) || (alt && !strcmp(R->entries[j].name, alt))) {
            *cursor = j + 1;
            return j;
        }
    }
    return -1;
}

static pp_status pp__search_keep(pp__search *S, const pp_search_entry *t, pp_error *err)
{
    int k = -1;
    if (S->layout && (t->fits > S->split_fits || (t->fits == S->split_fits && t->makespan < S->split_makespan))) {
        S->split_fits = t->fits;
        S->split_makespan = t->makespan;
    }
    if (S->layout) k = pp__search_find(S, t->name, NULL, &S->cursor);
    if (k >= 0) {
        int order = pp__entry_cmp(t, &S->entries[k]);
        if (order == 0) {
            /* a tie: the split nearer the even one wins (fewer layers moved) */
            order = pp__split_distance(S->layout, S->even, S->stages) <
                    pp__split_distance(S->pool + S->layout_at[k], S->even, S->stages) ? -1 : 0;
        }
        if (order < 0) {
            S->entries[k] = *t;
            memcpy(S->pool + S->layout_at[k], S->layout, (size_t)S->stages * sizeof *S->pool);
            S->best_at[k] = S->split_index;
        }
        return pp__ok(err);
    }
    if (S->count == S->cap) {
        int ncap = S->cap ? 2 * S->cap : 64;
        pp_search_entry *ne = (pp_search_entry *)PIPEPAR_REALLOC(S->entries, (size_t)ncap * sizeof *ne);
        size_t *na;
        long *nb;
        if (!ne) return pp__fail(err, PP_ENOMEM, "out of memory");
        S->entries = ne;
        na = (size_t *)PIPEPAR_REALLOC(S->layout_at, (size_t)ncap * sizeof *na);
        if (!na) return pp__fail(err, PP_ENOMEM, "out of memory");
        S->layout_at = na;
        nb = (long *)PIPEPAR_REALLOC(S->best_at, (size_t)ncap * sizeof *nb);
        if (!nb) return pp__fail(err, PP_ENOMEM, "out of memory");
        S->best_at = nb;
        if (S->layout) {
            double *nm = (double *)PIPEPAR_REALLOC(S->even_makespan, (size_t)ncap * sizeof *nm);
            if (!nm) return pp__fail(err, PP_ENOMEM, "out of memory");
            S->even_makespan = nm;
        }
        S->cap = ncap;
    }
    if (S->layout) {
        if (S->pool_len + (size_t)S->stages > S->pool_cap) {
            size_t ncap = 2 * S->pool_cap + (size_t)S->stages + 256;
            int32_t *np = (int32_t *)PIPEPAR_REALLOC(S->pool, ncap * sizeof *np);
            if (!np) return pp__fail(err, PP_ENOMEM, "out of memory");
            S->pool = np; S->pool_cap = ncap;
        }
        memcpy(S->pool + S->pool_len, S->layout, (size_t)S->stages * sizeof *S->pool);
        S->layout_at[S->count] = S->pool_len;
        S->pool_len += (size_t)S->stages;
    }
    S->best_at[S->count] = S->split_index;
    if (S->layout) S->even_makespan[S->count] = S->split_index == 0 && t->fits ? t->makespan : DBL_MAX;
    S->entries[S->count++] = *t;
    S->cursor = S->count;
    return pp__ok(err);
}

/* Under cfg.layers, what no schedule with this placement beats on the current split (S->cfg's
 * per-stage costs): each rank's first compute holds a forward, so it waits for the forward chain
 * of the stages before its first one (a transfer wherever the rank changes), and the rank then
 * computes every microbatch's forward and backward of its stages. This is pp_sim_result.bound's
 * start-and-busy part from the costs alone (stage tails, which only add, left out), so that a
 * candidate it rules out is never built. */
static double pp__split_bound(const pp__search *S, pp_placement placement)
{
    const pp_search_config *cfg = S->cfg;
    const pp_sim_costs *c = &cfg->costs;
    double hop = c->p2p_latency + c->p2p_seconds_per_byte * c->activation_bytes, bound = 0;
    pp_schedule g;   /* the fields pp_stage_rank and pp__half_cost read */
    int r, k;
    memset(&g, 0, sizeof g);
    g.pp = cfg->pp; g.num_stages = S->stages; g.vpp = S->stages / cfg->pp; g.placement = placement;
    for (r = 0; r < g.pp; r++) {
        double up = 0, earliest = -1, busy = 0;
        for (k = 0; k < g.num_stages; k++) {
            int rk = pp_stage_rank(&g, k);
            double f = pp__half_cost(&g, c, PP_OP_F, k);
            if (rk == r) {
                double b = pp__half_cost(&g, c, PP_OP_B, k), iw = pp__half_cost(&g, c, PP_OP_I, k) +
                           pp__half_cost(&g, c, PP_OP_W, k);
                if (earliest < 0) earliest = up;
                busy += (f + (b < iw ? b : iw)) * cfg->mb;
            }
            up += f + (k + 1 < g.num_stages && pp_stage_rank(&g, k + 1) != rk ? hop : 0);
        }
        if (earliest >= 0 && earliest + busy > bound) bound = earliest + busy;
    }
    return bound;
}

/* Candidate c's time on the even split of this vpp, from S->ref (DBL_MAX where it did not fit
 * there or was not built): by name, with the split backward's suffix where the config splits it
 * (the kind decides which). */
static double pp__search_even_makespan(pp__search *S, const pp__candidate *c)
{
    const pp__search *R = S->ref;
    char name[sizeof R->entries[0].name], split[sizeof name];
    size_t n;
    int k;
    pp__candidate_name(c, name, sizeof name);
    memcpy(split, name, sizeof name);
    n = strlen(split);   /* the suffix as pp__search_try writes it, cut where it cuts */
    snprintf(split + n, sizeof split - n, ", B as I then W");
    k = pp__search_find(R, name, S->cfg->split_backward ? split : NULL, &S->ref_cursor);
    return k >= 0 ? R->even_makespan[k] : DBL_MAX;
}

/* Builds, proves and times one candidate and keeps its entry (pp__search_keep). A candidate that its kind
 * refuses is skipped (the enumeration only proposes allowed ones, so this is rare); any other
 * failure stops the search. Under cfg.layers, a candidate whose bound on this split exceeds its
 * time on the even split (S->ref) is skipped: this split would not be kept. */
static pp_status pp__search_try(pp__search *S, const pp__candidate *c, pp_error *err)
{
    const pp_search_config *cfg = S->cfg;
    pp_schedule *s = NULL;
    pp_sim_result *sim = NULL;
    pp_search_entry t, *e;
    pp_status st;
    int r, split_b = 0;
    if (cfg->kind != PP_KIND_NONE && c->kind != cfg->kind) return pp__ok(err);
    if (S->ref && S->split_index > 0 && (c->placement == PP_PLACEMENT_LOOPED || c->placement == PP_PLACEMENT_V)) {
        double even = pp__search_even_makespan(S, c);
        int p = c->placement == PP_PLACEMENT_V;
        if (even < DBL_MAX) {
            if (S->split_bound[p] < 0) S->split_bound[p] = pp__split_bound(S, c->placement);
            /* strictly slower, beyond pp__entry_cmp's tie and the sums' rounding */
            if (S->split_bound[p] * (1 - 4e-9) > even) { S->ruled_out++; return pp__ok(err); }
        }
    }
    st = pp__candidate_build(cfg, c, &s, err);
    if (st == PP_EUNSUPPORTED) return pp__ok(err);
    if (st != PP_OK) return st;
    if (c->split) st = pp_schedule_split_overlaps(s, err);
    if (st == PP_OK && cfg->split_backward) {
        int i;
        for (r = 0; r < s->pp && !split_b; r++)
            for (i = 0; i < s->length[r]; i++) split_b |= s->actions[r][i].op == PP_OP_B;
        st = pp_schedule_split_backward(s, err);
    }
    if (st == PP_OK) st = pp_schedule_lower(s, err);
    if (st == PP_OK) st = pp_schedule_validate(s, err);
    if (st == PP_OK) st = pp_simulate(s, &cfg->costs, &sim, err);
    pp_schedule_free(s);
    if (st != PP_OK) {
        char name[128];
        pp__candidate_name(c, name, sizeof name);
        if (err) {
            char msg[PP_ERROR_MESSAGE_SIZE];
            snprintf(msg, sizeof msg, "%s", err->message);
            pp__fail(err, st, "search: %s: %s", name, msg);
        }
        pp_sim_result_free(sim);
        return st;
    }
    memset(&t, 0, sizeof t);
    e = &t;
    pp__candidate_name(c, e->name, sizeof e->name);
    if (split_b) {
        size_t n = strlen(e->name);
        snprintf(e->name + n, sizeof e->name - n, ", B as I then W");
    }
    e->kind = c->kind; e->placement = c->placement; e->vpp = c->vpp; e->group = c->group;
    e->max_live = c->max_live; e->max_memory = c->max_memory; e->greedy_flags = c->flags; e->split_overlaps = c->split;
    e->split_backward = split_b;
    e->makespan = sim->makespan;
    e->bound = sim->bound;
    e->bubble = sim->bubble_mean;
    for (r = 0; r < sim->pp; r++) {
        if (sim->peak_memory[r] > e->peak_memory) e->peak_memory = sim->peak_memory[r];
        if (sim->peak_live[r] > e->peak_live) e->peak_live = sim->peak_live[r];
    }
    e->fits = cfg->max_memory <= 0 || e->peak_memory <= cfg->max_memory * (1 + 1e-12);
    pp_sim_result_free(sim);
    S->where.simulated++;
    if (cfg->progress) cfg->progress(cfg->progress_user, &S->where);
    return pp__search_keep(S, &t, err);
}

void pp_search_result_free(pp_search_result *r)
{
    if (!r) return;
    PIPEPAR_FREE(r->entries);
    PIPEPAR_FREE(r->layout_pool);
    pp_schedule_free(r->best);
    PIPEPAR_FREE(r);
}

int pp_search_layout_text(const int32_t *stage_layers, int stages, char *buf, size_t size)
{
    size_t n = 0;
    int k;
    char piece[32];
    if (!buf) size = 0;
    if (size) buf[0] = '\0';
    for (k = 0; k < stages; k++) {
        int len = snprintf(piece, sizeof piece, "%s%s%s%.0d%s", k ? "|" : "E", "t", stage_layers[k] > 1 ? "*" : "",
                           stage_layers[k] > 1 ? (int)stage_layers[k] : 0, k == stages - 1 ? "L" : "");
        if (n < size) {   /* as snprintf: as much as fits, always terminated */
            size_t room = size - 1 - n, take = (size_t)len < room ? (size_t)len : room;
            memcpy(buf + n, piece, take);
            buf[n + take] = '\0';
        }
        n += (size_t)len;
    }
    return (int)n;
}

/* The caps the greedy schedules are built at: 1F1B's memory and the search's cap (twice 1F1B's
 * without one). Without per-stage memory they count live activations (pp_greedy_config.max_live:
 * 1F1B's pp*vpp); with it they weigh each by its stage's memory (max_memory: 1F1B's pp), so that
 * uneven stages hold what their memory allows. A cap below one microbatch through every chunk of
 * a rank fits no schedule (each rank holds a microbatch in all its chunks while it reaches the
 * last stage): the greedy at that least cap is then built anyway, over the cap, so that the least
 * memory the caller is told of is the least any schedule has. Returns how many caps. */
static int pp__greedy_caps(const pp_search_config *cfg, int vpp, pp_placement placement, double caps[2])
{
    const double *m = cfg->costs.memory_stage;
    double one = m ? cfg->pp : cfg->pp * vpp, cap, need = vpp, total = 0;
    int n = 0, r, c, S = cfg->pp * vpp;
    if (m) {
        cap = cfg->max_memory > 0 ? cfg->max_memory : 2.0 * cfg->pp;
        for (r = 0; r < S; r++) total += m[r];
        for (need = 0, r = 0; r < cfg->pp && total > 0; r++) {
            double sum = 0;
            for (c = 0; c < vpp; c++)
                sum += m[placement == PP_PLACEMENT_V && c == 1 ? 2 * cfg->pp - 1 - r : c * cfg->pp + r];
            if (sum * cfg->pp / total > need) need = sum * cfg->pp / total;
        }
    } else cap = cfg->max_memory > 0 ? (double)(int)(cfg->max_memory * vpp + 1e-9) : 2.0 * cfg->pp * vpp;
    if (one <= cap * (1 + 1e-12)) caps[n++] = one;
    if (cap != one && cap >= need * (1 - 1e-12)) caps[n++] = cap;
    else if (cap < need * (1 - 1e-12)) caps[n++] = need;
    return n;
}

/* Every kind with every parameter worth trying at this vpp, each through pp__search_try. */
static pp_status pp__search_vpp(pp__search *S, int vpp, pp_error *err)
{
    const pp_search_config *cfg = S->cfg;
    pp__candidate c;
    pp_status st = PP_OK;
    int groups[40], ng = 0, g, L, k;
    memset(&c, 0, sizeof c);
    c.vpp = vpp;
#define PP__TRY() do { st = pp__search_try(S, &c, err); if (st != PP_OK) return st; } while (0)
    if (vpp == 1) {
        c.kind = PP_GPIPE; PP__TRY();
        c.kind = PP_1F1B; PP__TRY();
        c.kind = PP_ZB_H1; PP__TRY();
        /* zb-h2 at every cap from 1F1B's pp up to its own 2pp-1 (capped by max_memory) */
        c.kind = PP_ZB_H2;
        for (L = cfg->pp; L <= 2 * cfg->pp - 1; L++) {
            if (cfg->max_memory > 0 && L > cfg->max_memory + 1e-9 && L > cfg->pp) break;
            c.max_live = L; PP__TRY();
            if (cfg->pp > 16 && L < 2 * cfg->pp - 2) L = 2 * cfg->pp - 2;   /* ends only, when large */
        }
        c.max_live = 0;
    } else {
        /* microbatch groups: pp (Megatron's default), 2pp, 4pp, ... below mb, PyTorch's
         * mb / max(1, mb/pp), and all mb. A larger group starts the later ranks sooner when the
         * first stage is small (the layout search's interleaved winners) */
        for (g = cfg->pp; g < cfg->mb && ng < 32; g *= 2) groups[ng++] = g;
        if (ng == 0) groups[ng++] = cfg->pp;
        g = cfg->mb / (cfg->mb / cfg->pp > 1 ? cfg->mb / cfg->pp : 1);
        for (k = 0; k < ng && groups[k] != g; k++) {}
        if (k == ng) groups[ng++] = g;
        for (k = 0; k < ng && groups[k] != cfg->mb; k++) {}
        if (k == ng) groups[ng++] = cfg->mb;
        for (k = 0; k < ng; k++) {
            c.group = groups[k];
            c.kind = PP_INTERLEAVED_1F1B; PP__TRY();
            c.kind = PP_INTERLEAVED_ZB; PP__TRY();
        }
        c.group = 0;
        c.kind = PP_LOOPED_BFS; PP__TRY();
        if (vpp == 2) {
            c.placement = PP_PLACEMENT_V;
            c.kind = PP_ZBV; PP__TRY();
            /* the FB kinds twice: as built, and split into F then B (what a runtime without an
             * overlapped F&B callback runs; the simulator costs an FB as F + B either way) */
            for (c.split = 0; c.split <= 1; c.split++) {
                c.kind = PP_DUALPIPEV; PP__TRY();
                /* DualPipe (even pp and mb): its two chunks are whole model stages, so per-stage
                 * costs written for a vpp = 2 split of the model do not describe it */
                if (!S->has_stage_costs && cfg->pp % 2 == 0 && cfg->mb % 2 == 0) {
                    c.placement = PP_PLACEMENT_DUAL;
                    c.kind = PP_DUALPIPE; PP__TRY();
                    c.placement = PP_PLACEMENT_V;
                }
            }
            c.split = 0;
            c.placement = PP_PLACEMENT_LOOPED;
        }
    }
    /* greedy: at 1F1B's memory and at the cap (or twice 1F1B's without one), every policy,
     * looped and, for vpp = 2, V; with per-stage memory each activation weighs its stage's */
    c.kind = PP_CUSTOM;
    for (k = 0; k < (vpp == 2 ? 2 : 1); k++) {
        double caps[2];
        int nc, li;
        c.placement = k ? PP_PLACEMENT_V : PP_PLACEMENT_LOOPED;
        nc = pp__greedy_caps(cfg, vpp, c.placement, caps);
        for (li = 0; li < nc; li++)
            for (c.flags = 0; c.flags < PP_GREEDY_FLAG_LIMIT; c.flags++) {
                if ((c.flags & PP_GREEDY_I_FIRST) && (c.flags & PP_GREEDY_READY_ORDER)) continue;
                if ((c.flags & PP_GREEDY_EAGER_ADMIT) && vpp != 2) continue;   /* same as without */
                if (cfg->costs.memory_stage) c.max_memory = caps[li];
                else c.max_live = (int)caps[li];
                PP__TRY();
            }
        c.flags = 0;
    }
    c.max_live = 0;
    c.max_memory = 0;
#undef PP__TRY
    return PP_OK;
}

/* --- the layout search (cfg.layers) ------------------------------------------------------------ */

/* Splits of `layers` into `stages` stages of lo..hi layers each: how many (any count over `limit`
 * reads limit + 1), the first, and the next one after `split` in lexicographic order. */
static long pp__splits_count(int layers, int stages, int lo, int hi, long limit)
{
    /* ways[n]: splits of n layers into the stages counted so far, capped at limit + 1 (limit is at
     * most 2^40 and layers at most 4096, so a window's sum of capped values stays exact in a long);
     * each stage is a sliding-window sum: O(stages x layers) */
    long *ways = (long *)pp__calloc((size_t)layers + 1, sizeof(long)), *next, total, window;
    int s, n;
    if (!ways) return -1;
    next = (long *)pp__calloc((size_t)layers + 1, sizeof(long));
    if (!next) { PIPEPAR_FREE(ways); return -1; }
    ways[0] = 1;
    for (s = 0; s < stages; s++) {
        window = 0;   /* ways[n - hi .. n - lo] */
        for (n = 0; n <= layers; n++) {
            if (n - lo >= 0) window += ways[n - lo];
            if (n - hi - 1 >= 0) window -= ways[n - hi - 1];
            next[n] = window > limit ? limit + 1 : window;
        }
        memcpy(ways, next, ((size_t)layers + 1) * sizeof(long));
    }
    total = ways[layers];
    PIPEPAR_FREE(ways);
    PIPEPAR_FREE(next);
    return total;
}

/* Fills split with the first split (lexicographically smallest) whose stages from `from` on hold
 * `left` layers; 0 when there is none. */
static int pp__split_fill(int32_t *split, int from, int stages, int left, int lo, int hi)
{
    int s;
    for (s = from; s < stages; s++) {
        int rest = stages - s - 1, n = left - rest * hi;
        if (n < lo) n = lo;
        if (n > hi || left - n < rest * lo) return 0;
        split[s] = n;
        left -= n;
    }
    return left == 0;
}

static int pp__split_next(int32_t *split, int stages, int lo, int hi)
{
    int s, left = 0;
    for (s = stages - 1; s >= 0; s--) {
        left += split[s];
        /* raise stage s by one and refill the rest as low as they go */
        if (split[s] < hi && pp__split_fill(split, s + 1, stages, left - split[s] - 1, lo, hi)) {
            split[s]++;
            return 1;
        }
    }
    return 0;
}

/* The enumeration of a vpp's splits: the even split first (split holds it), then every split in
 * lexicographic order but that one. Moves split to the next; 0 when there is none. first: split
 * is the even one, the enumeration's start. */
static int pp__split_advance(int32_t *split, const int32_t *even, int stages, int layers, int lo, int hi, int first)
{
    if (first ? !pp__split_fill(split, 0, stages, layers, lo, hi) : !pp__split_next(split, stages, lo, hi)) return 0;
    return memcmp(split, even, (size_t)stages * sizeof *split) || pp__split_next(split, stages, lo, hi);
}

/* Per-stage costs of a split: each stage its layers times the per-layer costs, the first stage
 * the embedding's on top and the last the loss's. */
static void pp__split_costs(const pp_search_config *cfg, const pp_sim_costs *per_layer, const int32_t *split,
                            int stages, double **arrays)   /* [6]: f, b, i, w, memory, and tail or NULL */
{
    const pp_layer_costs *ends[2];
    int e;
    double f = per_layer->f > 0 ? per_layer->f : 1, b, i, w;
    int s;
    b = per_layer->b > 0 ? per_layer->b : per_layer->i + per_layer->w > 0 ? per_layer->i + per_layer->w : 2 * f;
    i = per_layer->i + per_layer->w > 0 ? per_layer->i : b / 2;
    w = per_layer->i + per_layer->w > 0 ? per_layer->w : b / 2;
    for (s = 0; s < stages; s++) {
        arrays[0][s] = f * split[s]; arrays[1][s] = b * split[s];
        arrays[2][s] = i * split[s]; arrays[3][s] = w * split[s];
        arrays[4][s] = split[s];
    }
    if (cfg->layer_costs) {   /* each layer its own: the stage sums its layers */
        int layer = 0, k;
        for (s = 0; s < stages; s++) {
            arrays[0][s] = arrays[1][s] = arrays[2][s] = arrays[3][s] = arrays[4][s] = 0;
            for (k = 0; k < split[s]; k++, layer++) {
                const pp_layer_costs *lc = &cfg->layer_costs[layer];
                arrays[0][s] += lc->f; arrays[1][s] += lc->i + lc->w;
                arrays[2][s] += lc->i; arrays[3][s] += lc->w;
                arrays[4][s] += lc->memory;
            }
        }
    }
    ends[0] = &cfg->embedding; ends[1] = &cfg->loss;
    for (e = 0; e < 2; e++) {
        s = e ? stages - 1 : 0;
        arrays[0][s] += ends[e]->f; arrays[1][s] += ends[e]->i + ends[e]->w;
        arrays[2][s] += ends[e]->i; arrays[3][s] += ends[e]->w;
        arrays[4][s] += ends[e]->memory;
    }
    if (arrays[5]) {   /* loss_deferred: out of the last stage's backwards, into its tail */
        const double d = cfg->loss_deferred, from_w = d < cfg->loss.w ? d : cfg->loss.w;
        for (s = 0; s < stages; s++) arrays[5][s] = 0;
        s = stages - 1;   /* at 0 at least: d may be all of the loss's backward, give or take rounding */
        arrays[1][s] = arrays[1][s] > d ? arrays[1][s] - d : 0;
        arrays[2][s] = arrays[2][s] > d - from_w ? arrays[2][s] - (d - from_w) : 0;
        arrays[3][s] = arrays[3][s] > from_w ? arrays[3][s] - from_w : 0;
        arrays[5][s] = d * cfg->mb;
    }
}

/* Whether the layout search can build `kind` (PP_KIND_NONE: any) at this vpp, so that it spends
 * no splits on a vpp the asked-for kind never runs at. DualPipe never: its chunks are whole model
 * stages, which per-stage costs of a split do not describe. */
static int pp__layout_kind_takes_vpp(pp_schedule_kind kind, int vpp)
{
    switch (kind) {
    case PP_GPIPE: case PP_1F1B: case PP_ZB_H1: case PP_ZB_H2: return vpp == 1;
    case PP_ZBV: case PP_DUALPIPEV: return vpp == 2;
    case PP_DUALPIPE: return 0;
    case PP_INTERLEAVED_1F1B: case PP_INTERLEAVED_ZB: case PP_LOOPED_BFS: return vpp >= 2;
    default: return 1;
    }
}

/* Searches every kind at vpp on one split (S->layout, S->stages), each entry keeping its best
 * split so far; S->split_fits / split_makespan end as this split's best. */
static pp_status pp__search_split(pp__search *S, const pp_sim_costs *per_layer, int vpp, double **split_cost,
                                  pp_error *err)
{
    S->cursor = S->first;
    S->split_fits = -1;
    S->split_makespan = DBL_MAX;
    S->split_bound[0] = S->split_bound[1] = -1;
    pp__split_costs(S->cfg, per_layer, S->layout, S->stages, split_cost);
    S->where.splits_done++;   /* counted as it starts: "split 1 of N" while the first runs */
    return pp__search_vpp(S, vpp, err);
}

/* --- the splits of one vpp on several threads (cfg.threads) --------------------------------------
 * Worker t of T enumerates the splits in the same order as the single-threaded loop and searches
 * those whose index is t mod T, into a pp__search of its own (its own copy of the config, whose
 * per-stage costs are its split's). The merge keeps, for every schedule, the best of the workers'
 * entries under the single-threaded loop's rule: faster (pp__entry_cmp), then nearer the even
 * split, then earlier in the enumeration; so the result does not depend on the thread count. */
#ifndef PIPEPAR_NO_THREADS
typedef struct pp__split_shared {
    pthread_mutex_t mu;
    int stop;                       /* a worker failed: the others stop at their next split */
    pp_search_progress where;       /* summed over workers, for the caller's progress */
    void (*progress)(void *user, const pp_search_progress *where);
    void *progress_user;
} pp__split_shared;

typedef struct pp__split_worker {
    pp__search W;
    pp_search_config cfg;
    double *cost[6];        /* f, b, i, w, memory, tail (pp__split_costs) */
    int32_t *split;
    const pp_sim_costs *per_layer;
    int vpp, lo, hi, t, T;
    long splits_seen;               /* W.where.splits_done already added to the shared count */
    pp__split_shared *shared;
    pp_status st;
    pp_error err;
} pp__split_worker;

static void pp__split_worker_progress(void *user, const pp_search_progress *w)
{
    pp__split_worker *k = (pp__split_worker *)user;
    pp__split_shared *sh = k->shared;
    pthread_mutex_lock(&sh->mu);
    sh->where.simulated++;
    sh->where.splits_done += w->splits_done - k->splits_seen;
    k->splits_seen = w->splits_done;
    if (sh->progress) sh->progress(sh->progress_user, &sh->where);
    pthread_mutex_unlock(&sh->mu);
}

static void *pp__split_worker_main(void *arg)
{
    pp__split_worker *k = (pp__split_worker *)arg;
    pp__search *W = &k->W;
    const int stages = W->stages, layers = k->cfg.layers;
    long idx;
    int have, stop;
    memcpy(k->split, W->even, (size_t)stages * sizeof *k->split);
    for (have = 0, idx = 0;; have = 1, idx++) {
        if (idx > 0 && (idx - 1) % k->T == k->t) {   /* split 0, the even one, is the parent's */
            pthread_mutex_lock(&k->shared->mu);
            stop = k->shared->stop;
            pthread_mutex_unlock(&k->shared->mu);
            if (stop) break;
            W->split_index = idx;
            k->st = pp__search_split(W, k->per_layer, k->vpp, k->cost, &k->err);
            if (k->st != PP_OK) {
                pthread_mutex_lock(&k->shared->mu);
                k->shared->stop = 1;
                pthread_mutex_unlock(&k->shared->mu);
                break;
            }
        }
        if (!pp__split_advance(k->split, W->even, stages, layers, k->lo, k->hi, !have)) break;
    }
    return NULL;
}

/* Searches every split of this vpp (count of them, in S's enumeration order) on T threads and
 * merges the results into S. */
static pp_status pp__search_splits_threaded(pp__search *S, const pp_search_config *cfg_copy, int vpp, int lo, int hi,
                                            long count, int T, pp_error *err)
{
    pp__split_shared sh;
    pp__split_worker *k = NULL;
    pthread_t *tid = NULL;
    pp_status st = PP_OK;
    const int32_t *layout = S->layout;
    int t, started = 0, c, j, e;
    memset(&sh, 0, sizeof sh);
    if (pthread_mutex_init(&sh.mu, NULL) != 0) return pp__fail(err, PP_ENOMEM, "search: cannot create a mutex");
    sh.where = S->where;
    sh.progress = cfg_copy->progress;
    sh.progress_user = cfg_copy->progress_user;
    if ((long)T > count - 1) T = (int)(count - 1);   /* the even split is searched before them */
    k = (pp__split_worker *)pp__calloc((size_t)T, sizeof *k);
    tid = (pthread_t *)pp__calloc((size_t)T, sizeof *tid);
    if (!k || !tid) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    for (t = 0; t < T; t++) {
        pp__split_worker *w = &k[t];
        w->cfg = *cfg_copy;
        for (c = 0; c < 6; c++) {
            w->cost[c] = (double *)pp__calloc((size_t)S->stages, sizeof(double));
            if (!w->cost[c]) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        }
        if (!(cfg_copy->loss_deferred > 0)) { PIPEPAR_FREE(w->cost[5]); w->cost[5] = NULL; }
        w->split = (int32_t *)pp__calloc((size_t)S->stages, sizeof(int32_t));
        if (!w->split) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        w->cfg.costs.f_stage = w->cost[0]; w->cfg.costs.b_stage = w->cost[1];
        w->cfg.costs.i_stage = w->cost[2]; w->cfg.costs.w_stage = w->cost[3];
        w->cfg.costs.memory_stage = w->cost[4];
        w->cfg.costs.tail_stage = w->cost[5];
        w->cfg.progress = cfg_copy->progress ? pp__split_worker_progress : NULL;
        w->cfg.progress_user = w;
        w->per_layer = &cfg_copy->costs;
        w->W.cfg = &w->cfg;
        w->W.has_stage_costs = S->has_stage_costs;
        w->W.stages = S->stages;
        w->W.even = S->even;
        w->W.layout = w->split;
        w->W.ref = S;
        w->vpp = vpp; w->lo = lo; w->hi = hi; w->t = t; w->T = T;
        w->shared = &sh;
    }
    for (t = 0; t < T; t++) {
        if (pthread_create(&tid[t], NULL, pp__split_worker_main, &k[t]) != 0) {
            pthread_mutex_lock(&sh.mu);
            sh.stop = 1;
            pthread_mutex_unlock(&sh.mu);
            st = pp__fail(err, PP_ENOMEM, "search: cannot start thread %d of %d", t, T);
            break;
        }
        started++;
    }
    for (t = 0; t < started; t++) pthread_join(tid[t], NULL);
    if (st != PP_OK) goto done;
    for (t = 0; t < T; t++)
        if (k[t].st != PP_OK) {
            st = k[t].st;
            if (err) *err = k[t].err;
            goto done;
        }
    /* the merge */
    for (t = 0; t < T && st == PP_OK; t++) {
        const pp__search *W = &k[t].W;
        S->ruled_out += W->ruled_out;
        for (e = 0; e < W->count && st == PP_OK; e++) {
            const pp_search_entry *we = &W->entries[e];
            const int32_t *wl = W->pool + W->layout_at[e];
            for (j = S->first; j < S->count && strcmp(S->entries[j].name, we->name); j++) {}
            if (j == S->count) {   /* new here: appended as the loop would, with its split */
                S->layout = wl;
                S->split_index = W->best_at[e];
                S->cursor = S->count;
                st = pp__search_keep(S, we, err);
            } else {
                int order = pp__entry_cmp(we, &S->entries[j]);
                if (order == 0) {
                    long dw = pp__split_distance(wl, S->even, S->stages);
                    long dk = pp__split_distance(S->pool + S->layout_at[j], S->even, S->stages);
                    order = dw < dk ? -1 : dw > dk ? 1 : (W->best_at[e] < S->best_at[j] ? -1 : 1);
                }
                if (order < 0) {
                    S->entries[j] = *we;
                    memcpy(S->pool + S->layout_at[j], wl, (size_t)S->stages * sizeof *S->pool);
                    S->best_at[j] = W->best_at[e];
                }
            }
        }
    }
    {   /* the workers count their own simulations (sh.where only while a progress callback runs) */
        long simulated = S->where.simulated;
        for (t = 0; t < T; t++) simulated += k[t].W.where.simulated;
        S->where = sh.where;
        S->where.simulated = simulated;
    }
    S->where.splits_done = count;
done:
    S->layout = layout;
    for (t = 0; k && t < T; t++) {
        for (c = 0; c < 6; c++) PIPEPAR_FREE(k[t].cost[c]);
        PIPEPAR_FREE(k[t].split);
        PIPEPAR_FREE(k[t].W.entries);
        PIPEPAR_FREE(k[t].W.layout_at);
        PIPEPAR_FREE(k[t].W.best_at);
        PIPEPAR_FREE(k[t].W.even_makespan);
        PIPEPAR_FREE(k[t].W.pool);
    }
    PIPEPAR_FREE(k);
    PIPEPAR_FREE(tid);
    pthread_mutex_destroy(&sh.mu);
    return st;
}
#endif

/* Whether one layer's costs are finite numbers >= 0. */
static int pp__layer_costs_ok(const pp_layer_costs *lc)
{
    return lc->f >= 0 && lc->f <= DBL_MAX && lc->i >= 0 && lc->i <= DBL_MAX && lc->w >= 0 && lc->w <= DBL_MAX &&
           lc->memory >= 0 && lc->memory <= DBL_MAX;
}

/* pp_search's argument checks, as sokol's _sg_validate_* do them: every field against its rule,
 * in one place, before anything is allocated; the first broken rule is the one reported. */
static pp_status pp__search_validate(const pp_search_config *cfg, pp_error *err)
{
    int k, has_stage_costs;
    if (cfg->pp < 1) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1", cfg->pp);
    if (cfg->mb < 1) return pp__fail(err, PP_EINVAL, "mb=%d: must be at least 1", cfg->mb);
    if (cfg->vpp < 0) return pp__fail(err, PP_EINVAL, "vpp=%d: must be at least 1 (0 tries 1..max_vpp)", cfg->vpp);
    if (cfg->max_vpp < 0) return pp__fail(err, PP_EINVAL, "max_vpp=%d: must be at least 1 (0 means 4)", cfg->max_vpp);
    if (cfg->max_memory < 0 || cfg->max_memory != cfg->max_memory)
        return pp__fail(err, PP_EINVAL, "max_memory=%g: must be >= 0 (0 means no cap)", cfg->max_memory);
    if ((int)cfg->kind < PP_KIND_NONE || (int)cfg->kind > PP_CUSTOM)
        return pp__fail(err, PP_EINVAL, "kind=%d: not a schedule kind (PP_KIND_NONE searches every kind)", (int)cfg->kind);
    if (cfg->layers < 0) return pp__fail(err, PP_EINVAL, "layers=%d: must be >= 0 (0: the costs as given)", cfg->layers);
    if (cfg->layout_spread < 0)
        return pp__fail(err, PP_EINVAL, "layout_spread=%d: must be >= 0 (0 means 1)", cfg->layout_spread);
    if (cfg->threads < 0 || cfg->threads > 1024)
        return pp__fail(err, PP_EINVAL, "threads=%d: must be in 0..1024 (0 or 1: the calling thread alone)", cfg->threads);
    if (cfg->max_layouts < 0 || cfg->max_layouts > (1L << 40))
        return pp__fail(err, PP_EINVAL, "max_layouts=%ld: must be in 0..2^40 (0 means 4096)", cfg->max_layouts);
    if (cfg->layers > 4096)
        return pp__fail(err, PP_EINVAL, "layers=%d: at most 4096 for a layout search", cfg->layers);
    if (cfg->layers && cfg->pp == 1 && cfg->vpp > 1)
        return pp__fail(err, PP_EINVAL, "vpp=%d: a layout search at pp=1 takes vpp 1 (virtual stages need pp >= 2, "
                        "as in pp_layers_build and Megatron-LM)", cfg->vpp);
    for (k = 0; k < 2; k++) {
        const pp_layer_costs *lc = k ? &cfg->loss : &cfg->embedding;
        const char *name = k ? "loss" : "embedding";
        if (!pp__layer_costs_ok(lc))
            return pp__fail(err, PP_EINVAL, "%s: f=%g i=%g w=%g memory=%g: each must be a finite number >= 0", name,
                            lc->f, lc->i, lc->w, lc->memory);
        if (!cfg->layers && (lc->f > 0 || lc->i > 0 || lc->w > 0 || lc->memory > 0))
            return pp__fail(err, PP_EINVAL, "%s: only with layers (the layout search); otherwise put it in the "
                            "per-stage costs", name);
    }
    if (!(cfg->loss_deferred >= 0) || cfg->loss_deferred > DBL_MAX)
        return pp__fail(err, PP_EINVAL, "loss_deferred=%g: must be a finite number >= 0", cfg->loss_deferred);
    if (cfg->loss_deferred > 0 && !cfg->layers)
        return pp__fail(err, PP_EINVAL, "loss_deferred=%g: only with layers (the layout search); with per-stage "
                        "costs, take it out of the last stage's and give it as costs.tail_stage", cfg->loss_deferred);
    if (cfg->loss_deferred > cfg->loss.i + cfg->loss.w)
        return pp__fail(err, PP_EINVAL, "loss_deferred=%g: more than the loss's backward (loss.i + loss.w = %g), "
                        "of which it is a part", cfg->loss_deferred, cfg->loss.i + cfg->loss.w);
    if (cfg->layer_costs && !cfg->layers)
        return pp__fail(err, PP_EINVAL, "layer_costs: only with layers (they hold one entry per layer)");
    for (k = 0; cfg->layer_costs && k < cfg->layers; k++) {
        const pp_layer_costs *lc = &cfg->layer_costs[k];
        if (!pp__layer_costs_ok(lc))
            return pp__fail(err, PP_EINVAL, "layer_costs[%d]: f=%g i=%g w=%g memory=%g: each must be a finite number "
                            ">= 0", k, lc->f, lc->i, lc->w, lc->memory);
    }
    if (cfg->costs.action_cost)
        return pp__fail(err, PP_EINVAL, "costs: action_cost: times one schedule's own actions; a search builds "
                        "others (give per-stage costs)");
    if (cfg->costs.grouped < 0 || cfg->costs.grouped > 2)
        return pp__fail(err, PP_EINVAL, "costs: grouped=%d: must be 0 (each transfer on its own), 1 (a round's "
                        "transfers in one group) or 2 (one group per peer)", cfg->costs.grouped);
    has_stage_costs = cfg->costs.f_stage || cfg->costs.b_stage || cfg->costs.i_stage || cfg->costs.w_stage ||
                      cfg->costs.memory_stage || cfg->costs.tail_stage;
    if (has_stage_costs && cfg->layers)
        return pp__fail(err, PP_EINVAL, "layers=%d with per-stage costs: the layout search sets every stage's cost "
                        "from the per-layer costs f, b, i, w (leave the per-stage arrays NULL)", cfg->layers);
    if (has_stage_costs && !cfg->vpp)
        return pp__fail(err, PP_EINVAL, "vpp=0: per-stage costs hold pp*vpp entries, so the search needs the vpp "
                        "they describe");
    if (cfg->costs.f < 0 || cfg->costs.b < 0 || cfg->costs.i < 0 || cfg->costs.w < 0)
        return pp__fail(err, PP_EINVAL, "costs: every cost must be >= 0 (f=%g b=%g i=%g w=%g)", cfg->costs.f,
                        cfg->costs.b, cfg->costs.i, cfg->costs.w);
    return pp__check_rank_speed(&cfg->costs, cfg->pp, err);
}

/* The layout search's working state (cfg.layers) for one pp_search call. Its arrays hold the
 * most stages any vpp tried has (pp * the largest vpp, at most layers). */
typedef struct pp__layouts {
    int32_t *split;         /* the current split */
    int32_t *even;          /* the current vpp's even split */
    int32_t *trial;         /* the descent's candidate: split with one layer moved */
    double *cost[6];        /* the current split's per-stage f, b, i, w, memory and tail (the working
                               config's per-stage arrays point here) */
    int spread, threads;    /* cfg.layout_spread and cfg.threads, defaults applied */
    long max_layouts;       /* cfg.max_layouts, default applied */
    long tried;             /* splits tried, over every vpp */
    int local;              /* 1: some vpp was searched by descent */
} pp__layouts;

static void pp__layouts_free(pp__layouts *L)
{
    int k;
    PIPEPAR_FREE(L->split); PIPEPAR_FREE(L->even); PIPEPAR_FREE(L->trial);
    for (k = 0; k < 6; k++) PIPEPAR_FREE(L->cost[k]);
}

/* Allocates L for vpp vlo..vhi and points cfg's per-stage costs at L->cost. */
static pp_status pp__layouts_init(pp__layouts *L, pp_search_config *cfg, int vlo, int vhi, pp_error *err)
{
    /* every vpp's splits are counted before any is searched: a refusal costs no time */
    long most = (long)cfg->pp * vhi;
    int k;
    memset(L, 0, sizeof *L);
    L->spread = cfg->layout_spread ? cfg->layout_spread : 1;
    L->max_layouts = cfg->max_layouts ? cfg->max_layouts : 4096;
#ifdef PIPEPAR_NO_THREADS
    L->threads = 1;
#else
    L->threads = cfg->threads > 1 ? cfg->threads : 1;
#endif
    if ((long)cfg->pp * vlo > cfg->layers)
        return pp__fail(err, PP_EINVAL, "layers=%d: fewer than the pp*vpp = %ld stages of %s", cfg->layers,
                        (long)cfg->pp * vlo, cfg->vpp ? "this vpp" : "vpp 1 (every stage needs a layer)");
    if (most > cfg->layers) most = cfg->layers;
    L->split = (int32_t *)pp__calloc((size_t)most, sizeof *L->split);
    L->even = (int32_t *)pp__calloc((size_t)most, sizeof *L->even);
    L->trial = (int32_t *)pp__calloc((size_t)most, sizeof *L->trial);
    for (k = 0; k < 5; k++) L->cost[k] = (double *)pp__calloc((size_t)most, sizeof(double));
    if (cfg->loss_deferred > 0) L->cost[5] = (double *)pp__calloc((size_t)most, sizeof(double));   /* the tail */
    if (!L->split || !L->even || !L->trial || !L->cost[0] || !L->cost[1] || !L->cost[2] || !L->cost[3] || !L->cost[4] ||
        (cfg->loss_deferred > 0 && !L->cost[5]))
        return pp__fail(err, PP_ENOMEM, "out of memory");
    cfg->costs.f_stage = L->cost[0]; cfg->costs.b_stage = L->cost[1];
    cfg->costs.i_stage = L->cost[2]; cfg->costs.w_stage = L->cost[3];
    cfg->costs.memory_stage = L->cost[4];
    cfg->costs.tail_stage = L->cost[5];
    return PP_OK;
}

/* A vpp with more splits than max_layouts: descends from the even split (L->split holds it),
 * each round taking the move of one layer from a stage to another that shortens the step most,
 * until none does or max_layouts splits have been tried. */
static pp_status pp__search_descend(pp__search *S, pp__layouts *L, const pp_search_config *cfg, int vpp, int lo,
                                    int hi, pp_error *err)
{
    int stages = S->stages, fits, a, b, best_a, best_b, last_a = -1, last_b = -1;
    double makespan;
    long tried = 0;
    pp_status st;
    L->local = 1;
    /* Ruling candidates out (pp__search_try) changes no decision here: a candidate ruled out is slower
     * than its time on the even split, so than the even split's best, so than the best the
     * descent holds; it cannot make a split better than that, and a split it would not have
     * made better is not taken either way. */
    S->split_index = 0;
    st = pp__search_split(S, &cfg->costs, vpp, L->cost, err);
    if (st != PP_OK) return st;
    S->split_index = 1;   /* every later split: not the even one */
    tried++;
    fits = S->split_fits;
    makespan = S->split_makespan;
    for (;;) {
        best_a = -1; best_b = -1;
        memcpy(L->trial, L->split, (size_t)stages * sizeof *L->trial);
        S->layout = L->trial;
        for (a = 0; a < stages && tried < L->max_layouts; a++)
            for (b = 0; b < stages && tried < L->max_layouts; b++) {
                if (a == b || L->split[a] <= lo || L->split[b] >= hi) continue;
                if (a == last_b && b == last_a) continue;   /* back where the last round came from */
                L->trial[a]--; L->trial[b]++;
                st = pp__search_split(S, &cfg->costs, vpp, L->cost, err);
                L->trial[a]++; L->trial[b]--;
                if (st != PP_OK) return st;
                tried++;
                if (S->split_fits > fits || (S->split_fits == fits && S->split_makespan < makespan * (1 - 1e-12))) {
                    fits = S->split_fits; makespan = S->split_makespan;
                    best_a = a; best_b = b;
                }
            }
        S->layout = L->split;
        if (best_a < 0) break;
        L->split[best_a]--; L->split[best_b]++;
        last_a = best_a; last_b = best_b;
    }
    L->tried += tried;
    return PP_OK;
}

/* One vpp of the layout search: every split of even +- spread layers a stage (at least 1), each
 * searched by pp__search_split; on L->threads threads when there are several, by descent when
 * there are more than max_layouts. */
static pp_status pp__search_layouts(pp__search *S, pp__layouts *L, const pp_search_config *cfg, int vpp,
                                    pp_error *err)
{
    int stages = cfg->pp * vpp, lo, hi, sn, have;
    long count;
    pp_status st;
    lo = cfg->layers / stages - L->spread;
    if (lo < 1) lo = 1;
    hi = (cfg->layers + stages - 1) / stages + L->spread;
    /* the even split first, so that a tie keeps it; then every other split in order */
    for (sn = 0; sn < stages; sn++) L->even[sn] = cfg->layers / stages + (sn >= stages - cfg->layers % stages);
    S->stages = stages;
    S->first = S->count;
    S->layout = L->split;
    S->even = L->even;
    memcpy(L->split, L->even, (size_t)stages * sizeof *L->split);
    count = pp__splits_count(cfg->layers, stages, lo, hi, L->max_layouts);
    if (count < 0) return pp__fail(err, PP_ENOMEM, "out of memory");
    S->where.splits_total = count <= L->max_layouts ? count : L->max_layouts;
    S->ref = S;
    if (count > L->max_layouts) return pp__search_descend(S, L, cfg, vpp, lo, hi, err);
#ifndef PIPEPAR_NO_THREADS
    if (L->threads > 1 && count > 1) {
        /* the even split here first: the reference every worker prunes against */
        S->split_index = 0;
        st = pp__search_split(S, &cfg->costs, vpp, L->cost, err);
        if (st == PP_OK) st = pp__search_splits_threaded(S, cfg, vpp, lo, hi, count, L->threads, err);
        if (st == PP_OK) L->tried += count;
        return st;
    }
#endif
    for (have = 0, S->split_index = 0;; have = 1, S->split_index++) {
        st = pp__search_split(S, &cfg->costs, vpp, L->cost, err);
        if (st != PP_OK) return st;
        L->tried++;
        if (!pp__split_advance(L->split, L->even, stages, cfg->layers, lo, hi, !have)) return PP_OK;
    }
}

/* Ranks S's entries into a result (which takes them and the layout pool over), and builds the
 * winner, lowered, when it fits the cap. */
static pp_status pp__search_result(pp__search *S, const pp_search_config *cfg, pp__layouts *L,
                                   pp_search_result **out, pp_error *err)
{
    pp_search_result *res;
    pp_status st = PP_OK;
    int k;
    if (cfg->layers)
        for (k = 0; k < S->count; k++) S->entries[k].stage_layers = S->pool + S->layout_at[k];
    qsort(S->entries, (size_t)S->count, sizeof *S->entries, pp__entry_cmp);
    res = (pp_search_result *)pp__calloc(1, sizeof *res);
    if (!res) return pp__fail(err, PP_ENOMEM, "out of memory");
    res->count = S->count;
    res->entries = S->entries;
    S->entries = NULL;
    res->layouts = L->tried;
    res->layouts_local = L->local;
    res->simulated = S->where.simulated;
    res->ruled_out = S->ruled_out;
    res->layout_pool = S->pool;
    S->pool = NULL;
    if (res->count > 0 && res->entries[0].fits) {
        const pp_search_entry *b = &res->entries[0];
        pp__candidate c;
        memset(&c, 0, sizeof c);
        c.kind = b->kind; c.placement = b->placement; c.vpp = b->vpp; c.group = b->group;
        c.max_live = b->max_live; c.max_memory = b->max_memory; c.flags = b->greedy_flags; c.split = b->split_overlaps;
        /* a greedy order comes from the costs: the winner's split's */
        if (b->stage_layers) pp__split_costs(cfg, &cfg->costs, b->stage_layers, cfg->pp * b->vpp, L->cost);
        st = pp__candidate_build(cfg, &c, &res->best, err);
        if (st == PP_OK && c.split) st = pp_schedule_split_overlaps(res->best, err);
        if (st == PP_OK && b->split_backward) st = pp_schedule_split_backward(res->best, err);
        if (st == PP_OK) st = pp_schedule_lower(res->best, err);
        if (st != PP_OK) { pp_search_result_free(res); return st; }
    }
    *out = res;
    return PP_OK;
}

pp_status pp_search(const pp_search_config *user_cfg, pp_search_result **out, pp_error *err)
{
    pp__search S;
    pp__layouts L;
    pp_search_config cfg_copy;
    const pp_search_config *cfg = &cfg_copy;
    pp_status st;
    double *b_stage = NULL;
    int vpp, vlo, vhi, k;
    if (!user_cfg || !out) return pp__fail(err, PP_EINVAL, "cfg and out: must not be NULL");
    *out = NULL;
    st = pp__search_validate(user_cfg, err);
    if (st != PP_OK) return st;
    cfg_copy = *user_cfg;
    memset(&S, 0, sizeof S);
    memset(&L, 0, sizeof L);
    S.cfg = cfg;
    S.has_stage_costs = cfg->costs.f_stage || cfg->costs.b_stage || cfg->costs.i_stage || cfg->costs.w_stage ||
                        cfg->costs.memory_stage || cfg->costs.tail_stage;
    /* Kinds mix full B's with split I/W (DualPipeV does both): when only the halves are given, a
     * full backward costs their sum, not pp_simulate's default of 2F. */
    if (cfg_copy.costs.b == 0 && cfg_copy.costs.i + cfg_copy.costs.w > 0)
        cfg_copy.costs.b = cfg_copy.costs.i + cfg_copy.costs.w;
    if (!cfg->costs.b_stage && cfg->costs.i_stage && cfg->costs.w_stage && cfg->vpp > 0) {
        int n = cfg->pp * cfg->vpp;
        b_stage = (double *)pp__calloc((size_t)n, sizeof(double));
        if (!b_stage) return pp__fail(err, PP_ENOMEM, "out of memory");
        for (k = 0; k < n; k++) b_stage[k] = cfg->costs.i_stage[k] + cfg->costs.w_stage[k];
        cfg_copy.costs.b_stage = b_stage;
    }
    vlo = cfg->vpp ? cfg->vpp : 1;
    vhi = cfg->vpp ? cfg->vpp : cfg->max_vpp ? cfg->max_vpp : 4;
    if (cfg->layers && cfg->pp == 1) vhi = 1;   /* a layout at pp 1 has no virtual stages */
    if (cfg->layers) {
        st = pp__layouts_init(&L, &cfg_copy, vlo, vhi, err);
        if (st != PP_OK) goto done;
        S.has_stage_costs = 1;
    }
    for (vpp = vlo; vpp <= vhi && st == PP_OK; vpp++) {
        S.where.vpp = vpp;
        S.where.splits_done = S.where.splits_total = 0;
        if (!cfg->layers) st = pp__search_vpp(&S, vpp, err);
        else if (cfg->pp * vpp > cfg->layers) break;
        else if (pp__layout_kind_takes_vpp(cfg->kind, vpp)) st = pp__search_layouts(&S, &L, cfg, vpp, err);
    }
    if (st != PP_OK) goto done;
    if (S.count == 0 && cfg->kind != PP_KIND_NONE) {
        st = pp__fail(err, PP_EUNSUPPORTED, "kind=%s: none of this kind at pp=%d mb=%d vpp %d..%d%s (gpipe, 1f1b, zb-h1 "
                      "and zb-h2 run at vpp 1; zbv, dualpipev and dualpipe at vpp 2, dualpipe only with even pp and "
                      "mb and no per-stage costs or layers; interleaved, interleaved-zb and looped-bfs at vpp 2 and up)",
                      cfg->kind == PP_CUSTOM ? "greedy" : pp_schedule_kind_name(cfg->kind), cfg->pp, cfg->mb, vlo, vhi,
                      cfg->layers && cfg->pp == 1 ? " (a layout at pp 1 takes vpp 1: virtual stages need pp >= 2)"
                      : cfg->layers && (long)cfg->pp * vhi > cfg->layers ? " (fewer, as every stage needs a layer)" : "");
        goto done;
    }
    st = pp__search_result(&S, cfg, &L, out, err);
    if (st == PP_OK) st = pp__ok(err);
done:
    PIPEPAR_FREE(S.entries);
    PIPEPAR_FREE(S.layout_at);
    PIPEPAR_FREE(S.best_at);
    PIPEPAR_FREE(S.even_makespan);
    PIPEPAR_FREE(S.pool);
    PIPEPAR_FREE(b_stage);
    pp__layouts_free(&L);
    return st;
}


/* --- >>plan (implementation) ------------------------------------------------------------- */

/* Every field's own rule and every combination the plan refuses, before any work. */
static pp_status pp__plan_validate(const pp_plan_config *c, pp_error *err)
{
    const pp_sim_costs *k = &c->costs;
    const int value[6] = { c->pp, c->vpp, c->mb, c->group, c->max_live, c->layers };
    static const char *const name[6] = { "pp", "vpp", "mb", "group", "max_live", "layers" };
    int i;
    for (i = 0; i < 6; i++)
        if (value[i] < 0) return pp__fail(err, PP_EINVAL, "%s=%d: must be >= 0", name[i], value[i]);
    if ((int)c->kind < PP_KIND_NONE || (int)c->kind >= PP_KIND_COUNT)
        return pp__fail(err, PP_EINVAL, "kind=%d: not a schedule kind", (int)c->kind);
    if (c->threads < 0 || c->threads > 1024)
        return pp__fail(err, PP_EINVAL, "threads=%d: must be in 0..1024 (0 or 1: the calling thread)", c->threads);
    if (c->csv && (c->kind || c->search || c->group || c->max_live))
        return pp__fail(err, PP_EINVAL, "csv: the file is the whole schedule (not with %s)", c->search ? "search"
                        : c->kind ? "kind" : c->group ? "group" : "max_live");
    if (!c->csv && !c->search && c->kind == PP_KIND_NONE)
        return pp__fail(err, PP_EINVAL, "kind: none given (a kind to build, search, or a csv)");
    if (!c->csv && (c->pp < 1 || c->mb < 1))
        return pp__fail(err, PP_EINVAL, "%s=0: must be at least 1 (0 takes a csv's)", c->pp < 1 ? "pp" : "mb");
    if (c->keep_csv_comm && !c->csv) return pp__fail(err, PP_EINVAL, "keep_csv_comm: only with csv");
    if (c->search && (c->group || c->max_live))
        return pp__fail(err, PP_EINVAL, "%s=%d: not with search (it tries %s itself)", c->group ? "group" : "max_live",
                        c->group ? c->group : c->max_live, c->group ? "the group sizes" : "zb-h2's caps");
    if (c->max_memory < 0 || c->max_memory != c->max_memory || (c->max_memory > 0 && !c->search))
        return pp__fail(err, PP_EINVAL, "max_memory=%g: %s", c->max_memory, c->max_memory > 0 ? "only with search (the "
                        "cap it ranks by)" : "must be >= 0 (0 means no cap)");
    if (c->search_layout && (!c->search || c->layout || !c->layers))
        return pp__fail(err, PP_EINVAL, "search_layout: %s", !c->search ? "only with search" : c->layout ? "not with "
                        "layout (the search chooses the layout)" : "needs layers (the layers to split)");
    if (c->layer_costs && !c->layers)
        return pp__fail(err, PP_EINVAL, "layer_costs: only with layers (they hold one entry a layer)");
    if (c->layout_spread < 0 || (c->layout_spread > 0 && !c->search_layout))
        return pp__fail(err, PP_EINVAL, "layout_spread=%d: %s", c->layout_spread, c->layout_spread < 0 ? "must be >= 0 "
                        "(0 means 1)" : "only with search_layout (the splits it tries)");
    if (k->action_cost)
        return pp__fail(err, PP_EINVAL, "costs: action_cost times one schedule's own actions; a plan builds its "
                        "schedule (give it to pp_simulate)");
    if ((k->f_stage || k->b_stage || k->i_stage || k->w_stage || k->memory_stage || k->tail_stage) &&
        (c->layers || c->layout))
        return pp__fail(err, PP_EINVAL, "costs: per-stage arrays with %s: the stages' costs come from their layers "
                        "(give per-layer costs)", c->layout ? "a layout" : "layers");
    return PP_OK;
}

/* Appends to the plan's name, cut at its size. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void pp__plan_name(pp_plan *p, const char *fmt, ...)
{
    size_t n = strlen(p->name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name + n, sizeof p->name - n, fmt, ap);
    va_end(ap);
}

/* How many actions of op the schedule holds. */
static int pp__plan_count(const pp_schedule *s, pp_op op)
{
    int r, i, n = 0;
    for (r = 0; r < s->pp; r++)
        for (i = 0; i < s->length[r]; i++) n += s->actions[r][i].op == (int32_t)op;
    return n;
}

/* Per-stage costs of `stages` stages into storage ([5 * stages]), stage s running model stage
 * s % l->num_stages (DualPipe's up stages run the model again), out = *per_layer with the arrays. */
static pp_status pp__plan_costs(const pp_layers *l, int stages, const pp_sim_costs *per_layer,
                                const pp_layer_costs *layer_costs, double *storage, pp_sim_costs *out, pp_error *err)
{
    pp_search_config sc;
    double *arrays[6];
    int32_t *split;
    int s, k, n = l->num_stages;
    for (s = 0; s < n; s++)
        if (l->count[s] < 1)
            return pp__fail(err, PP_EINVAL, "layout '%.64s%s': stage %d holds no layer ('t'): every stage needs one, as "
                            "its costs and memory are its layers'", l->layout ? l->layout : "",
                            l->layout && strlen(l->layout) > 64 ? "..." : "", s);
    if (!(split = (int32_t *)pp__calloc((size_t)n, sizeof *split))) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (s = 0; s < n; s++) split[s] = l->count[s];
    memset(&sc, 0, sizeof sc);
    sc.layer_costs = layer_costs;
    for (k = 0; k < 5; k++) arrays[k] = storage + (size_t)k * (size_t)stages;
    arrays[5] = NULL;
    pp__split_costs(&sc, per_layer, split, n, arrays);   /* the model stages' own, then their copies */
    for (s = n; s < stages; s++)
        for (k = 0; k < 5; k++) arrays[k][s] = arrays[k][s % n];
    PIPEPAR_FREE(split);
    *out = *per_layer;
    out->f_stage = arrays[0]; out->b_stage = arrays[1]; out->i_stage = arrays[2]; out->w_stage = arrays[3];
    out->memory_stage = arrays[4];
    return PP_OK;
}

pp_status pp_plan_stage_costs(const pp_layers *l, const pp_sim_costs *per_layer, const pp_layer_costs *layer_costs,
                              double *storage, pp_sim_costs *out, pp_error *err)
{
    if (!l || !per_layer || !storage || !out)
        return pp__fail(err, PP_EINVAL, "pp_plan_stage_costs: l, per_layer, storage and out must not be NULL");
    return pp__plan_costs(l, l->num_stages, per_layer, layer_costs, storage, out, err);
}

/* p->costs for `stages` stages from p->layers (per-layer costs), in storage of the plan's own. */
static pp_status pp__plan_set_costs(pp_plan *p, const pp_plan_config *c, int stages, pp_error *err)
{
    PIPEPAR_FREE(p->stage_costs);
    if (!(p->stage_costs = (double *)pp__calloc((size_t)stages * 5, sizeof(double))))
        return pp__fail(err, PP_ENOMEM, "out of memory");
    return pp__plan_costs(p->layers, stages, &c->costs, c->layer_costs, p->stage_costs, &p->costs, err);
}

/* layers split evenly over `stages` model stages on pp ranks (vpp = stages / pp). */
static pp_status pp__plan_even(pp_plan *p, const pp_plan_config *c, int pp, int stages, pp_error *err)
{
    pp_layers_config lc;
    int layers = c->layers ? c->layers : stages;
    if (layers % stages)
        return pp__fail(err, PP_EINVAL, "layers=%d: must be a multiple of the %d model stages (pp*vpp; pp under "
                        "dualpipe), or give a layout", layers, stages);
    pp_status st;
    memset(&lc, 0, sizeof lc);
    lc.num_layers = layers; lc.pp = pp; lc.vpp = stages / pp;
    /* pp_layers_build refuses chunks on one rank (Megatron's offsets would collide); an even split
     * is the same over any ranks, so it is built a stage a rank and given the schedule's shape */
    if (pp == 1) { lc.pp = stages; lc.vpp = 1; }
    if ((st = pp_layers_build(&lc, &p->layers, err)) != PP_OK || pp != 1) return st;
    p->layers->pp = 1;
    p->layers->vpp = stages;
    return PP_OK;
}

/* The csv: read, its pp, vpp and mb checked against those given; unless keep_csv_comm, its
 * compute order proven before pipepar lowers it. */
static pp_status pp__plan_csv(pp_plan *p, const pp_plan_config *c, pp_error *err)
{
    pp_schedule *s;
    pp_status st = pp_schedule_read_csv(c->csv, c->csv_len, &p->schedule, err);
    if (st != PP_OK) return st;
    s = p->schedule;
    if ((c->pp && c->pp != s->pp) || (c->mb && c->mb != s->mb) || (c->vpp && c->vpp != s->vpp))
        return pp__fail(err, PP_EINVAL, "%s=%d: the csv has %d rank(s), %d chunk(s) per rank and %d microbatch(es) "
                        "(0 takes the file's)", c->pp && c->pp != s->pp ? "pp" : c->mb && c->mb != s->mb ? "mb" : "vpp",
                        c->pp && c->pp != s->pp ? c->pp : c->mb && c->mb != s->mb ? c->mb : c->vpp, s->pp, s->vpp, s->mb);
    pp__plan_name(p, "from %.140s", c->csv_name ? c->csv_name : "csv");
    if (c->keep_csv_comm) return PP_OK;
    pp_schedule_strip_comm(s);
    return pp_schedule_validate(s, err);
}

/* A layout's stages: on the csv's ranks (or pp), vpp agreeing, every stage with a layer; not for
 * dualpipe; a csv's stages those of the layout. */
static pp_status pp__plan_layout(pp_plan *p, const pp_plan_config *c, pp_error *err)
{
    pp_layers_config lc;
    const pp_schedule *s = p->schedule;
    const char *cut = strlen(c->layout) > 64 ? "..." : "";
    pp_status st;
    int k;
    if (c->kind == PP_DUALPIPE || (s && s->placement == PP_PLACEMENT_DUAL))
        return pp__fail(err, PP_EINVAL, "layout '%.64s%s': dualpipe runs every model stage twice (stages pp..2pp-1 run "
                        "stages 0..pp-1 again); give it even stages (layers)", c->layout, cut);
    memset(&lc, 0, sizeof lc);
    lc.num_layers = c->layers; lc.pp = s ? s->pp : c->pp; lc.layout = c->layout;
    if ((st = pp_layers_build(&lc, &p->layers, err)) != PP_OK) return st;
    for (k = 0; k < p->layers->num_stages; k++)
        if (p->layers->count[k] < 1)
            return pp__fail(err, PP_EINVAL, "layout '%.64s%s': stage %d holds no layer ('t'): every stage needs one",
                            c->layout, cut, k);
    if (s && p->layers->num_stages != s->num_stages)
        return pp__fail(err, PP_EINVAL, "layout '%.64s%s': %d stages, but the CSV's schedule has %d", c->layout, cut,
                        p->layers->num_stages, s->num_stages);
    if (c->vpp && c->vpp != p->layers->vpp)
        return pp__fail(err, PP_EINVAL, "vpp=%d: the layout has %d stages, so vpp = %d (or leave vpp 0)", c->vpp,
                        p->layers->num_stages, p->layers->vpp);
    return PP_OK;
}

/* pp_search's fastest: on the layout's or the even split's per-stage costs, choosing the split
 * too (search_layout), or on the costs as given. The winner's split becomes p->layers. */
static pp_status pp__plan_search(pp_plan *p, const pp_plan_config *c, pp_error *err)
{
    pp_search_config q;
    const pp_search_entry *won;
    pp_status st;
    memset(&q, 0, sizeof q);
    q.pp = c->pp; q.mb = c->mb; q.kind = c->kind; q.max_memory = c->max_memory; q.split_backward = c->split_backward;
    q.costs = p->layers ? p->costs : c->costs;
    q.vpp = p->layers ? p->layers->vpp : c->vpp;
    if (c->search_layout) {
        q.layers = c->layers; q.layer_costs = c->layer_costs; q.threads = c->threads; q.layout_spread = c->layout_spread;
    }
    if ((st = pp_search(&q, &p->search, err)) != PP_OK) return st;
    if (!p->search->best) {
        const pp_search_entry *lean = NULL;
        int k;
        for (k = 0; k < p->search->count; k++)
            if (!lean || p->search->entries[k].peak_memory < lean->peak_memory) lean = &p->search->entries[k];
        return pp__fail(err, PP_EINVAL, "max_memory=%g: no schedule fits; the leanest, %s, needs %.3f", c->max_memory,
                        lean ? lean->name : "none", lean ? lean->peak_memory : 0.0);
    }
    won = &p->search->entries[0];
    p->schedule = p->search->best;
    p->search->best = NULL;
    pp__plan_name(p, "%s", won->name);
    if (won->stage_layers) {   /* the split it chose: the model's stages from here on */
        pp_layers_config lc;
        int n = c->pp * won->vpp, need = pp_search_layout_text(won->stage_layers, n, NULL, 0);
        char *text = (char *)pp__calloc((size_t)need + 1, 1);
        if (!text) return pp__fail(err, PP_ENOMEM, "out of memory");
        pp_search_layout_text(won->stage_layers, n, text, (size_t)need + 1);
        memset(&lc, 0, sizeof lc);
        lc.num_layers = c->layers; lc.pp = c->pp; lc.layout = text;
        st = pp_layers_build(&lc, &p->layers, err);
        PIPEPAR_FREE(text);
    }
    return st;
}

/* A kind's compute order: the greedy scheduler's for the costs (PP_CUSTOM), else the kind's. */
static pp_status pp__plan_build_kind(pp_plan *p, const pp_plan_config *c, pp_error *err)
{
    int vpp = p->layers ? p->layers->vpp : c->vpp;
    pp__plan_name(p, "%s", c->kind == PP_CUSTOM ? "greedy" : pp_schedule_kind_name(c->kind));
    if (c->group) pp__plan_name(p, " group=%d", c->group);
    if (c->max_live) pp__plan_name(p, " max_live=%d", c->max_live);
    if (c->kind == PP_CUSTOM) {
        pp_greedy_config gc;
        pp_sim_costs costs = p->layers ? p->costs : c->costs;
        if (c->group) return pp__fail(err, PP_EINVAL, "group=%d: only interleaved takes a group, not greedy", c->group);
        costs.grouped = 0;   /* the greedy scheduler places transfers one by one */
        memset(&gc, 0, sizeof gc);
        gc.pp = c->pp; gc.mb = c->mb; gc.vpp = vpp; gc.max_live = c->max_live;
        gc.placement = PP_PLACEMENT_LOOPED;
        gc.costs = &costs;
        return pp_schedule_build_greedy(&gc, &p->schedule, err);
    } else {
        pp_schedule_config sc;
        memset(&sc, 0, sizeof sc);
        sc.kind = c->kind; sc.pp = c->pp; sc.vpp = vpp; sc.mb = c->mb; sc.group = c->group; sc.max_live = c->max_live;
        return pp_schedule_build(&sc, &p->schedule, err);
    }
}

/* Lowered (unless it is), split as asked (its name says what a split changed), proven. */
static pp_status pp__plan_finish(pp_plan *p, const pp_plan_config *c, pp_error *err)
{
    pp_schedule *s = p->schedule;
    pp_status st = PP_OK;
    if (!s->lowered && (st = pp_schedule_lower(s, err)) != PP_OK) return st;
    if (c->split_overlaps && pp__plan_count(s, PP_OP_FB)) {
        if ((st = pp_schedule_split_overlaps(s, err)) != PP_OK) return st;
        pp__plan_name(p, ", each FB as F then B");
    }
    if (c->split_backward && pp__plan_count(s, PP_OP_B)) {
        /* a search's candidates are split already, unless FBs split above left whole B's */
        if ((st = pp_schedule_split_backward(s, err)) != PP_OK) return st;
        if (!strstr(p->name, "B as I then W")) pp__plan_name(p, ", B as I then W");
    }
    return pp_schedule_validate(s, err);
}

pp_status pp_plan_build(const pp_plan_config *cfg, pp_plan **out, pp_error *err)
{
    pp_plan *p;
    pp_status st;
    int costs_first, dual;
    if (!cfg || !out) return pp__fail(err, PP_EINVAL, "pp_plan_build: cfg and out must not be NULL");
    *out = NULL;
    if ((st = pp__plan_validate(cfg, err)) != PP_OK) return st;
    if (!(p = (pp_plan *)pp__calloc(1, sizeof *p))) return pp__fail(err, PP_ENOMEM, "out of memory");
    p->costs = cfg->costs;
    /* the greedy scheduler and a search need the stages' costs before they build; a search of
     * the layout too (of any kind, greedy included) sets them from the per-layer costs itself */
    costs_first = cfg->search ? !cfg->search_layout : cfg->kind == PP_CUSTOM;
    if (cfg->csv) st = pp__plan_csv(p, cfg, err);
    if (st == PP_OK && cfg->layout) st = pp__plan_layout(p, cfg, err);
    else if (st == PP_OK && costs_first && cfg->layers)
        st = pp__plan_even(p, cfg, cfg->pp, cfg->pp * (cfg->vpp ? cfg->vpp : cfg->search ? 2 : 1), err);
    if (st == PP_OK && costs_first && p->layers) st = pp__plan_set_costs(p, cfg, p->layers->num_stages, err);
    if (st == PP_OK && !cfg->csv) st = cfg->search ? pp__plan_search(p, cfg, err) : pp__plan_build_kind(p, cfg, err);
    if (st == PP_OK) st = pp__plan_finish(p, cfg, err);
    if (st == PP_OK) {   /* the model stages' layers, and their costs for every stage of the schedule */
        dual = p->schedule->placement == PP_PLACEMENT_DUAL;
        if (!p->layers) st = pp__plan_even(p, cfg, p->schedule->pp, dual ? p->schedule->pp : p->schedule->num_stages, err);
        if (st == PP_OK && (cfg->layers || cfg->layout)) st = pp__plan_set_costs(p, cfg, p->schedule->num_stages, err);
    }
    if (st != PP_OK) { pp_plan_free(p); return st; }
    *out = p;
    return pp__ok(err);
}

void pp_plan_free(pp_plan *p)
{
    if (!p) return;
    pp_schedule_free(p->schedule);
    pp_layers_free(p->layers);
    pp_search_result_free(p->search);
    PIPEPAR_FREE(p->stage_costs);
    PIPEPAR_FREE(p);
}

/* The largest of a simulation's per-rank peak memories. */
static double pp__sim_peak(const pp_sim_result *r)
{
    double m = 0;
    int k;
    for (k = 0; k < r->pp; k++) m = r->peak_memory[k] > m ? r->peak_memory[k] : m;
    return m;
}

pp_status pp_plan_replan(const pp_plan_config *cfg, const pp_schedule *current, const int *current_split,
                         double min_gain, pp_plan **next, double *gain, pp_error *err)
{
    pp_search_config sc;
    pp_sim_costs costs;
    pp_sim_result *was = NULL, *won = NULL;
    pp_plan *p = NULL;
    int32_t *split = NULL;
    double *storage = NULL, *arrays[6], now, then;
    int s, n, total = 0, fits_now, fits_new;
    pp_status st;
    if (gain) *gain = 0;
    if (next) *next = NULL;
    if (!cfg || !current || !current_split || !next)
        return pp__fail(err, PP_EINVAL, "pp_plan_replan: cfg, current, current_split and next must not be NULL");
    if (!cfg->search || !cfg->search_layout || !cfg->layers || cfg->csv || cfg->layout)
        return pp__fail(err, PP_EINVAL, "cfg: search=%d, search_layout=%d, layers=%d%s: re-planning searches the order "
                        "and the split together (search, search_layout and layers set, no csv or layout); a kind's "
                        "order suits any split: pp_layers_replan", cfg->search, cfg->search_layout, cfg->layers,
                        cfg->csv ? ", csv" : cfg->layout ? ", layout" : "");
    if (!cfg->costs.rank_speed)
        return pp__fail(err, PP_EINVAL, "cfg->costs.rank_speed: NULL; re-planning needs the measured speeds "
                        "(pp_speed_exchange)");
    if (!(min_gain >= 0 && min_gain < 1))
        return pp__fail(err, PP_EINVAL, "min_gain=%g: must be at least 0 and below 1", min_gain);
    if (current->placement == PP_PLACEMENT_DUAL)
        return pp__fail(err, PP_EINVAL, "current: DualPipe's placement runs every model stage twice; re-planning "
                        "takes one copy a stage");
    if (current->pp != cfg->pp || current->mb != cfg->mb)
        return pp__fail(err, PP_EINVAL, "current: pp=%d mb=%d, but cfg has pp=%d mb=%d", current->pp, current->mb,
                        cfg->pp, cfg->mb);
    n = current->num_stages;
    for (s = 0; s < n; s++) {
        if (current_split[s] < 1 || current_split[s] > cfg->layers)
            return pp__fail(err, PP_EINVAL, "current_split[%d]=%d: every stage holds at least one layer and at most "
                            "layers=%d", s, current_split[s], cfg->layers);
        total += current_split[s];
    }
    if (total != cfg->layers)
        return pp__fail(err, PP_EINVAL, "current_split: its %d stages hold %d layers, but layers=%d", n, total,
                        cfg->layers);
    /* the running plan, timed on the measured costs as a search times its candidates */
    split = (int32_t *)pp__calloc((size_t)n, sizeof *split);
    storage = (double *)pp__calloc((size_t)n * 5, sizeof(double));
    if (!split || !storage) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    for (s = 0; s < n; s++) split[s] = current_split[s];
    memset(&sc, 0, sizeof sc);
    sc.layer_costs = cfg->layer_costs;
    for (s = 0; s < 5; s++) arrays[s] = storage + (size_t)s * (size_t)n;
    arrays[5] = NULL;
    pp__split_costs(&sc, &cfg->costs, split, n, arrays);
    costs = cfg->costs;
    costs.f_stage = arrays[0]; costs.b_stage = arrays[1]; costs.i_stage = arrays[2]; costs.w_stage = arrays[3];
    costs.memory_stage = arrays[4];
    if ((st = pp_simulate(current, &costs, &was, err)) != PP_OK) goto done;
    /* the search's plan for them, timed the same way */
    if ((st = pp_plan_build(cfg, &p, err)) != PP_OK) goto done;
    costs = p->costs;
    if ((st = pp_simulate(p->schedule, &costs, &won, err)) != PP_OK) goto done;
    now = was->makespan;
    then = won->makespan;
    fits_now = !(cfg->max_memory > 0) || pp__sim_peak(was) <= cfg->max_memory;
    fits_new = !(cfg->max_memory > 0) || pp__sim_peak(won) <= cfg->max_memory;
    if ((fits_new && !fits_now) || (fits_new && now > 0 && (now - then) / now > min_gain)) {
        if (gain) *gain = now > 0 && then < now ? (now - then) / now : 0;
        *next = p;
        p = NULL;
    }
    st = pp__ok(err);
done:
    pp_sim_result_free(was);
    pp_sim_result_free(won);
    pp_plan_free(p);
    PIPEPAR_FREE(split);
    PIPEPAR_FREE(storage);
    return st;
}


/* --- >>pack (implementation) -------------------------------------------------------------- */

static const char *const pp__pack_algo_names[PP_PACK_ALGO_COUNT] = {
    "first_fit_decreasing", "best_fit_decreasing", "first_fit_shuffle",
    "modified_first_fit_decreasing", "concatenative", "greedy_knapsack", "balanced_greedy_knapsack"
};

const char *pp_pack_algo_name(pp_pack_algo algo)
{
    if ((unsigned)algo >= (unsigned)PP_PACK_ALGO_COUNT) return "unknown";
    return pp__pack_algo_names[algo];
}

static int pp__streq_nocase(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        int x = (unsigned char)*a, y = (unsigned char)*b;
        if (x >= 'A' && x <= 'Z') x += 'a' - 'A';
        if (y >= 'A' && y <= 'Z') y += 'a' - 'A';
        if (x != y) return 0;
    }
    return *a == *b;
}

pp_status pp_pack_algo_parse(const char *name, pp_pack_algo *algo, pp_error *err)
{
    static const struct { const char *name; pp_pack_algo algo; } aliases[] = {
        { "ffd", PP_PACK_FFD }, { "bfd", PP_PACK_BFD }, { "ffs", PP_PACK_FIRST_FIT_SHUFFLE },
        { "mffd", PP_PACK_MFFD }, { "concat", PP_PACK_CONCATENATIVE },
        { "knapsack", PP_PACK_GREEDY_KNAPSACK }, { "balanced_knapsack", PP_PACK_BALANCED_GREEDY_KNAPSACK }
    };
    int i;
    if (!name || !algo) return pp__fail(err, PP_EINVAL, "pp_pack_algo_parse: name and algo must not be NULL");
    for (i = 0; i < (int)PP_PACK_ALGO_COUNT; i++)
        if (pp__streq_nocase(name, pp__pack_algo_names[i])) { *algo = (pp_pack_algo)i; return pp__ok(err); }
    for (i = 0; i < (int)(sizeof aliases / sizeof aliases[0]); i++)
        if (pp__streq_nocase(name, aliases[i].name)) { *algo = aliases[i].algo; return pp__ok(err); }
    return pp__fail(err, PP_EINVAL, "algo=%.64s%s: unknown packing algorithm (first_fit_decreasing, "
                    "best_fit_decreasing, first_fit_shuffle, modified_first_fit_decreasing, concatenative, "
                    "greedy_knapsack, balanced_greedy_knapsack)", name, strlen(name) > 64 ? "..." : "");
}

int64_t pp_pack_lower_bound(const int32_t *lengths, int n, int32_t capacity)
{
    int64_t sum = 0;
    int i;
    if (!lengths || n <= 0 || capacity < 1) return 0;
    for (i = 0; i < n; i++) sum += lengths[i] > 0 ? lengths[i] : 0;
    return (sum + capacity - 1) / capacity;
}

void pp_packing_free(pp_packing *p)
{
    if (!p) return;
    PIPEPAR_FREE(p->bin_offsets);
    PIPEPAR_FREE(p->seqs);
    PIPEPAR_FREE(p->bin_tokens);
    PIPEPAR_FREE(p);
}

static pp_status pp__pack_check(const int32_t *lengths, int n, const pp_pack_config *cfg, pp_error *err)
{
    int i;
    if (!cfg) return pp__fail(err, PP_EINVAL, "pp_pack: cfg must not be NULL");
    if (n < 0) return pp__fail(err, PP_EINVAL, "n=%d: the number of sequences must be at least 0", n);
    if (n > 0 && !lengths) return pp__fail(err, PP_EINVAL, "lengths: NULL with n=%d sequences", n);
    if (cfg->capacity < 1)
        return pp__fail(err, PP_EINVAL, "capacity=%d: a bin must hold at least 1 token", (int)cfg->capacity);
    if ((unsigned)cfg->algo >= (unsigned)PP_PACK_ALGO_COUNT)
        return pp__fail(err, PP_EINVAL, "algo=%d: unknown packing algorithm", (int)cfg->algo);
    if (cfg->min_bin_count < 0)
        return pp__fail(err, PP_EINVAL, "min_bin_count=%d: must be nonnegative", cfg->min_bin_count);
    if (cfg->bin_count_multiple < 0)
        return pp__fail(err, PP_EINVAL, "bin_count_multiple=%d: must be positive (0 means 1)",
                        cfg->bin_count_multiple);
    if (cfg->max_sequences_per_bin < 0)
        return pp__fail(err, PP_EINVAL, "max_sequences_per_bin=%d: must be positive (0 means unlimited)",
                        cfg->max_sequences_per_bin);
    for (i = 0; i < n; i++) {
        if (lengths[i] < 1)
            return pp__fail(err, PP_EINVAL, "lengths[%d]=%d: a sequence needs at least 1 token", i, (int)lengths[i]);
        if (lengths[i] > cfg->capacity)
            return pp__fail(err, PP_EINVAL, "lengths[%d]=%d: exceeds the bin capacity (%d)", i, (int)lengths[i],
                            (int)cfg->capacity);
    }
    return PP_OK;
}

/* Stable sort of idx[0..n) by lengths[idx[k]] ascending. Lengths up to 8n (token counts of a
 * batch usually are) take one counting pass over a histogram of every length; longer ones an
 * LSD radix sort, 11 bits a pass. tmp has room for n entries. */
static pp_status pp__sort_by_length(int32_t *idx, int32_t *tmp, int n, const int32_t *lengths, int32_t max_len,
                                    pp_error *err)
{
    int shift, i, passes = 0;
    int32_t *src = idx, *dst = tmp;
    if (n < 2) return PP_OK;
    if ((int64_t)max_len <= 8 * (int64_t)n + 4096) {
        int32_t *count = (int32_t *)pp__calloc((size_t)max_len + 2, sizeof(int32_t));
        if (!count) return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
        for (i = 0; i < n; i++) count[lengths[idx[i]] + 1]++;
        for (i = 0; i <= max_len; i++) count[i + 1] += count[i];
        for (i = 0; i < n; i++) tmp[count[lengths[idx[i]]]++] = idx[i];
        memcpy(idx, tmp, sizeof(int32_t) * (size_t)n);
        PIPEPAR_FREE(count);
        return PP_OK;
    }
    for (shift = 0; shift < 31 && (max_len >> shift) > 0; shift += 11) {
        int count[2049];
        memset(count, 0, sizeof count);
        for (i = 0; i < n; i++) count[((lengths[src[i]] >> shift) & 2047) + 1]++;
        for (i = 0; i < 2048; i++) count[i + 1] += count[i];
        for (i = 0; i < n; i++) dst[count[(lengths[src[i]] >> shift) & 2047]++] = src[i];
        { int32_t *t = src; src = dst; dst = t; }
        passes++;
    }
    if (passes & 1) memcpy(idx, tmp, sizeof(int32_t) * (size_t)n);
    return PP_OK;
}

static void pp__reverse(int32_t *a, int n)
{
    int i;
    for (i = 0; i < n / 2; i++) { int32_t t = a[i]; a[i] = a[n - 1 - i]; a[n - 1 - i] = t; }
}

static int32_t pp__max_length(const int32_t *lengths, const int32_t *idx, int n)
{
    int32_t m = 0;
    int i;
    for (i = 0; i < n; i++) if (lengths[idx[i]] > m) m = lengths[idx[i]];
    return m;
}

/* Orders idx[0..n) (any subset of sequences) by length. descending=0: (length, index) ascending.
 * descending=1, ties_low_index_first=0: (length, index) both descending, Python's
 * `pairs.sort(reverse=True)`. descending=1, ties_low_index_first=1: length descending, index
 * ascending, Python's stable `sort(key=length, reverse=True)`. idx must come in ascending index
 * order. */
static pp_status pp__order_by_length(int32_t *idx, int32_t *tmp, int n, const int32_t *lengths, int descending,
                                     int ties_low_index_first, pp_error *err)
{
    int32_t m = pp__max_length(lengths, idx, n);
    pp_status st;
    if (descending && ties_low_index_first) pp__reverse(idx, n);   /* stable ascending of index-descending input */
    if ((st = pp__sort_by_length(idx, tmp, n, lengths, m, err)) != PP_OK) return st;
    if (descending) pp__reverse(idx, n);
    return PP_OK;
}

/* First fit decreasing's order of all n sequences, built directly: length descending, index
 * descending on ties (Python's `sorted(((l, i) ...), reverse=True)`). With lengths up to 8n a
 * single counting pass writes each index straight to its place; otherwise the general sort. */
static pp_status pp__decreasing_order(int32_t *order, int32_t *tmp, int n, const int32_t *lengths, int32_t max_len,
                                      pp_error *err)
{
    int32_t *start;
    int i;
    if ((int64_t)max_len > 8 * (int64_t)n + 4096) {
        for (i = 0; i < n; i++) order[i] = i;
        return pp__order_by_length(order, tmp, n, lengths, 1, 0, err);
    }
    start = (int32_t *)pp__calloc((size_t)max_len + 2, sizeof(int32_t));
    if (!start) return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    for (i = 0; i < n; i++) start[lengths[i]]++;
    {   /* start[l] = first slot of length l: the longest lengths first */
        int32_t acc = 0, l;
        for (l = max_len; l >= 0; l--) { int32_t c = start[l]; start[l] = acc; acc += c; }
    }
    for (i = n - 1; i >= 0; i--) order[start[lengths[i]]++] = i;
    PIPEPAR_FREE(start);
    return PP_OK;
}

/* A binary min-heap on (a, b) with a payload, for "least-filled bin, earliest on ties". */
typedef struct pp__heap_item { int64_t a, b; int32_t v; } pp__heap_item;
typedef struct pp__heap { pp__heap_item *item; int size, cap; } pp__heap;

static int pp__heap_less(const pp__heap_item *x, const pp__heap_item *y)
{
    return x->a < y->a || (x->a == y->a && x->b < y->b);
}

static int pp__heap_push(pp__heap *h, int64_t a, int64_t b, int32_t v)
{
    int i;
    if (h->size == h->cap) {
        int cap = h->cap ? h->cap * 2 : 64;
        pp__heap_item *n2 = (pp__heap_item *)PIPEPAR_REALLOC(h->item, sizeof(pp__heap_item) * (size_t)cap);
        if (!n2) return 0;
        h->item = n2; h->cap = cap;
    }
    i = h->size++;
    h->item[i].a = a; h->item[i].b = b; h->item[i].v = v;
    while (i > 0) {
        int parent = (i - 1) / 2;
        pp__heap_item t;
        if (!pp__heap_less(&h->item[i], &h->item[parent])) break;
        t = h->item[i]; h->item[i] = h->item[parent]; h->item[parent] = t;
        i = parent;
    }
    return 1;
}

static pp__heap_item pp__heap_pop(pp__heap *h)
{
    pp__heap_item top = h->item[0];
    int i = 0;
    h->item[0] = h->item[--h->size];
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        pp__heap_item t;
        if (l < h->size && pp__heap_less(&h->item[l], &h->item[m])) m = l;
        if (r < h->size && pp__heap_less(&h->item[r], &h->item[m])) m = r;
        if (m == i) break;
        t = h->item[i]; h->item[i] = h->item[m]; h->item[m] = t;
        i = m;
    }
    return top;
}

/* --- first fit: a tournament tree over blocks of open bins' room ---------------------------
 * room[b] is bin b's room (-1 once it may take nothing more: closed, or not opened yet). Bins
 * come in blocks of 32; a tournament tree holds each block's largest room at its leaves and the
 * maximum of its two children at each inner node. The first bin with room >= need is the first
 * block whose maximum is >= need (walk down the tree, left whenever the left subtree has
 * enough), then the first such bin in that block (a short scan of one 128-byte block). That is
 * O(log bins) per placement instead of NeMo RL's scan over every open bin; the blocks keep the
 * tree small and the scans cache-friendly. */
#define PP__FIT_BLOCK 32

typedef struct pp__fit {
    int32_t *room;      /* [leaves * PP__FIT_BLOCK] */
    int32_t *count;     /* [leaves * PP__FIT_BLOCK] sequences in each bin */
    int32_t *node;      /* [2 * leaves]; node[1] is the root, block k's maximum is node[leaves + k] */
    int leaves, bins;
} pp__fit;

static int32_t pp__fit_block_max(const pp__fit *f, int blk)
{
    const int32_t *r = f->room + (size_t)blk * PP__FIT_BLOCK;
    int32_t m = -1;
    int i;
    for (i = 0; i < PP__FIT_BLOCK; i++) m = r[i] > m ? r[i] : m;
    return m;
}

static int pp__fit_grow(pp__fit *f)
{
    int leaves = f->leaves ? f->leaves * 2 : 64, i;
    size_t old = (size_t)f->leaves * PP__FIT_BLOCK, cap = (size_t)leaves * PP__FIT_BLOCK;
    int32_t *room = (int32_t *)PIPEPAR_REALLOC(f->room, sizeof(int32_t) * cap);
    int32_t *count, *node;
    if (!room) return 0;
    f->room = room;
    count = (int32_t *)PIPEPAR_REALLOC(f->count, sizeof(int32_t) * cap);
    if (!count) return 0;
    f->count = count;
    node = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * 2 * (size_t)leaves);
    if (!node) return 0;
    for (i = (int)old; i < (int)cap; i++) { room[i] = -1; count[i] = 0; }
    PIPEPAR_FREE(f->node);
    f->node = node;
    f->leaves = leaves;
    for (i = 0; i < leaves; i++) node[leaves + i] = pp__fit_block_max(f, i);
    for (i = leaves - 1; i >= 1; i--) { int c = 2 * i; node[i] = node[c] > node[c + 1] ? node[c] : node[c + 1]; }
    return 1;
}

static void pp__fit_set(pp__fit *f, int bin, int32_t room)
{
    int32_t old = f->room[bin], m;
    int i = f->leaves + bin / PP__FIT_BLOCK;
    f->room[bin] = room;
    if (room > f->node[i]) m = room;                                   /* a new bin raised its block */
    else if (old == f->node[i] && room < old) m = pp__fit_block_max(f, bin / PP__FIT_BLOCK);
    else return;                                                       /* the block's maximum stands */
    f->node[i] = m;
    for (i /= 2; i >= 1; i /= 2) {
        int c = 2 * i;
        m = f->node[c] > f->node[c + 1] ? f->node[c] : f->node[c + 1];
        if (f->node[i] == m) break;
        f->node[i] = m;
    }
}

/* The first bin at index >= from with room >= need, or -1. Scan the rest of from's block; else
 * climb the tree from that block until a right sibling holds enough room, walk down to its
 * leftmost such block and scan it. */
static int pp__fit_first_from(const pp__fit *f, int from, int32_t need)
{
    int b, i, blk = from / PP__FIT_BLOCK;
    if (from >= f->bins || f->node[1] < need) return -1;
    i = f->leaves + blk;
    if (f->node[i] >= need)
        for (b = from; b < (blk + 1) * PP__FIT_BLOCK; b++) if (f->room[b] >= need) return b;
    for (;;) {
        if (i == 1) return -1;
        if (!(i & 1) && f->node[i + 1] >= need) { i++; break; }
        i /= 2;
    }
    while (i < f->leaves) { int c = 2 * i; i = f->node[c] >= need ? c : c + 1; }
    for (b = (i - f->leaves) * PP__FIT_BLOCK; f->room[b] < need; b++) {}
    return b;
}

/* First fit's output: the placements as chunks. Chunk c puts the next count[c] sequences of
 * `order` (all of one length) into bin[c], so the bins' contents are copied chunk by chunk
 * instead of sequence by sequence. */
typedef struct pp__chunks { int32_t *bin, *count; int size, cap; } pp__chunks;

static int pp__chunk_push(pp__chunks *c, int32_t bin, int32_t count)
{
    if (c->size == c->cap) {
        int cap = c->cap ? c->cap * 2 : 4096;
        int32_t *b = (int32_t *)PIPEPAR_REALLOC(c->bin, sizeof(int32_t) * (size_t)cap), *n2;
        if (!b) return 0;
        c->bin = b;
        n2 = (int32_t *)PIPEPAR_REALLOC(c->count, sizeof(int32_t) * (size_t)cap);
        if (!n2) return 0;
        c->count = n2;
        c->cap = cap;
    }
    c->bin[c->size] = bin;
    c->count[c->size] = count;
    c->size++;
    return 1;
}

/* First fit over the sequences in `order`. A run of equal lengths is placed a bin at a time:
 * once a bin takes as many of the run as fit, the run's next sequence can only go to a later
 * bin (every earlier one already had too little room), so the search resumes after it, and a new
 * bin takes capacity/length of them at once. The bins are exactly those of placing the
 * sequences one by one; 1M long-tailed lengths need some 33k tree searches, not 1M. */
static pp_status pp__first_fit(const int32_t *order, int n, const int32_t *lengths, int32_t capacity,
                               int max_seqs, pp__chunks *out, int *num_bins, pp_error *err)
{
    pp__fit f;
    int k = 0;
    memset(&f, 0, sizeof f);
    if (!pp__fit_grow(&f)) goto oom;
    while (k < n) {
        int32_t len = lengths[order[k]];
        int end = k + 1, from = 0;
        while (end < n && lengths[order[end]] == len) end++;
        while (k < end) {
            int b = pp__fit_first_from(&f, from, len), take;
            int32_t room;
            if (b < 0) {
                if (f.bins == f.leaves * PP__FIT_BLOCK && !pp__fit_grow(&f)) goto oom;
                b = f.bins++;
                room = capacity;
            } else {
                room = f.room[b];
            }
            take = (int)(room / len);
            if (take > end - k) take = end - k;
            if (max_seqs && take > max_seqs - f.count[b]) take = max_seqs - f.count[b];
            if (!pp__chunk_push(out, b, take)) goto oom;
            room -= (int32_t)take * len;
            f.count[b] += take;
            k += take;
            pp__fit_set(&f, b, (max_seqs && f.count[b] >= max_seqs) ? -1 : room);
            from = b + 1;
        }
    }
    *num_bins = f.bins;
    PIPEPAR_FREE(f.room); PIPEPAR_FREE(f.count); PIPEPAR_FREE(f.node);
    return PP_OK;
oom:
    PIPEPAR_FREE(f.room); PIPEPAR_FREE(f.count); PIPEPAR_FREE(f.node);
    return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
}

/* --- best fit: a treap of open bins keyed by (room, bin) -----------------------------------
 * A bin's node id is the bin's own index. The best bin for a sequence of length L is the
 * smallest key >= (L, -1): least room that still fits, the earliest bin on ties. */
typedef struct pp__treap {
    int32_t *room, *left, *right;
    uint32_t *prio;
    int root;
} pp__treap;

static int pp__treap_key_less(const pp__treap *t, int node, int32_t room, int32_t bin)
{
    return t->room[node] < room || (t->room[node] == room && node < bin);
}

/* Splits the tree at `node` into keys < (room, bin) and keys >= (room, bin). */
static void pp__treap_split(pp__treap *t, int node, int32_t room, int32_t bin, int *lo, int *hi)
{
    if (node < 0) { *lo = *hi = -1; return; }
    if (pp__treap_key_less(t, node, room, bin)) {
        pp__treap_split(t, t->right[node], room, bin, &t->right[node], hi);
        *lo = node;
    } else {
        pp__treap_split(t, t->left[node], room, bin, lo, &t->left[node]);
        *hi = node;
    }
}

static int pp__treap_merge(pp__treap *t, int a, int b)
{
    if (a < 0) return b;
    if (b < 0) return a;
    if (t->prio[a] > t->prio[b]) { t->right[a] = pp__treap_merge(t, t->right[a], b); return a; }
    t->left[b] = pp__treap_merge(t, a, t->left[b]);
    return b;
}

static void pp__treap_insert(pp__treap *t, int node)
{
    int lo, hi;
    t->left[node] = t->right[node] = -1;
    pp__treap_split(t, t->root, t->room[node], node, &lo, &hi);
    t->root = pp__treap_merge(t, pp__treap_merge(t, lo, node), hi);
}

static pp_status pp__best_fit(const int32_t *order, int n, const int32_t *lengths, int32_t capacity,
                              int max_seqs, int32_t *ev_bin, int *num_bins, pp_error *err)
{
    pp__treap t;
    int32_t *count;
    uint32_t x = 2463534242u;   /* xorshift32 state for the priorities: fixed, so runs repeat */
    int k, bins = 0;
    t.root = -1;
    t.room = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    t.left = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    t.right = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    t.prio = (uint32_t *)PIPEPAR_MALLOC(sizeof(uint32_t) * (size_t)(n > 0 ? n : 1));
    count = (int32_t *)pp__calloc((size_t)(n > 0 ? n : 1), sizeof(int32_t));
    if (!t.room || !t.left || !t.right || !t.prio || !count) {
        PIPEPAR_FREE(t.room); PIPEPAR_FREE(t.left); PIPEPAR_FREE(t.right); PIPEPAR_FREE(t.prio); PIPEPAR_FREE(count);
        return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    }
    for (k = 0; k < n; k++) {
        int32_t len = lengths[order[k]];
        int lo, hi, b;
        pp__treap_split(&t, t.root, len, -1, &lo, &hi);
        if (hi < 0) {                       /* no open bin fits: open one */
            t.root = lo;
            b = bins++;
            t.room[b] = capacity - len;
            x ^= x << 13; x ^= x >> 17; x ^= x << 5;
            t.prio[b] = x;
        } else {                            /* take the leftmost (best) node out of hi */
            int parent = -1;
            b = hi;
            while (t.left[b] >= 0) { parent = b; b = t.left[b]; }
            if (parent < 0) hi = t.right[b]; else t.left[parent] = t.right[b];
            t.root = pp__treap_merge(&t, lo, hi);
            t.room[b] -= len;
        }
        count[b]++;
        if (!max_seqs || count[b] < max_seqs) pp__treap_insert(&t, b);
        ev_bin[k] = b;
    }
    *num_bins = bins;
    PIPEPAR_FREE(t.room); PIPEPAR_FREE(t.left); PIPEPAR_FREE(t.right); PIPEPAR_FREE(t.prio); PIPEPAR_FREE(count);
    return PP_OK;
}

/* --- Python's random.shuffle, bit for bit ---------------------------------------------------
 * CPython seeds its Mersenne Twister (MT19937) from an integer with init_by_array over the
 * integer's 32-bit words, least significant first; shuffle walks i = n-1 .. 1 and swaps item i
 * with item randbelow(i+1), where randbelow(m) draws k = bit_length(m) bits (the top k bits of
 * one 32-bit output) until the value is below m. */
typedef struct pp__mt { uint32_t s[624]; int i; } pp__mt;

static void pp__mt_seed(pp__mt *mt, uint64_t seed)
{
    uint32_t key[2];
    int klen = (seed >> 32) ? 2 : 1, i = 1, j = 0, k;
    key[0] = (uint32_t)seed; key[1] = (uint32_t)(seed >> 32);
    mt->s[0] = 19650218u;
    for (k = 1; k < 624; k++) mt->s[k] = 1812433253u * (mt->s[k - 1] ^ (mt->s[k - 1] >> 30)) + (uint32_t)k;
    for (k = 624; k > 0; k--) {
        mt->s[i] = (mt->s[i] ^ ((mt->s[i - 1] ^ (mt->s[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++; j++;
        if (i >= 624) { mt->s[0] = mt->s[623]; i = 1; }
        if (j >= klen) j = 0;
    }
    for (k = 623; k > 0; k--) {
        mt->s[i] = (mt->s[i] ^ ((mt->s[i - 1] ^ (mt->s[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= 624) { mt->s[0] = mt->s[623]; i = 1; }
    }
    mt->s[0] = 0x80000000u;
    mt->i = 624;
}

static uint32_t pp__mt_next(pp__mt *mt)
{
    uint32_t y;
    if (mt->i >= 624) {
        int k;
        for (k = 0; k < 624; k++) {
            y = (mt->s[k] & 0x80000000u) | (mt->s[(k + 1) % 624] & 0x7fffffffu);
            mt->s[k] = mt->s[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        mt->i = 0;
    }
    y = mt->s[mt->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

static void pp__python_shuffle(int32_t *a, int n, uint64_t seed)
{
    pp__mt mt;
    int i;
    pp__mt_seed(&mt, seed);
    for (i = n - 1; i >= 1; i--) {
        uint32_t m = (uint32_t)i + 1u, r;
        int k = 0;
        int32_t t;
        while ((m >> k) != 0 && k < 32) k++;            /* bit_length(m) */
        do r = pp__mt_next(&mt) >> (32 - k); while (r >= m);
        t = a[i]; a[i] = a[r]; a[r] = t;
    }
}

/* --- presence sets over a sorted array, for the removals of MFFD and greedy knapsack --------
 * next[i] leads to the first present position >= i (next[m] = m is the end); prev[i+1] to the
 * last present position <= i, plus one (prev[0] = 0 means none). Path halving keeps both
 * near-constant per step. */
static int pp__next_present(int32_t *next, int i)
{
    while (next[i] != i) { next[i] = next[next[i]]; i = next[i]; }
    return i;
}

static int pp__prev_present(int32_t *prev, int i)   /* last present position <= i, or -1 */
{
    int j = i + 1;
    while (prev[j] != j) { prev[j] = prev[prev[j]]; j = prev[j]; }
    return j - 1;
}

/* First position p in a[0..m) (lengths[a[k]] descending) with lengths[a[p]] <= x; m if none. */
static int pp__first_at_most_desc(const int32_t *a, int m, const int32_t *lengths, int64_t x)
{
    int lo = 0, hi = m;
    while (lo < hi) { int mid = lo + (hi - lo) / 2; if (lengths[a[mid]] <= x) hi = mid; else lo = mid + 1; }
    return lo;
}

/* First position p in a[0..m) (lengths ascending) with lengths[a[p]] > x; m if none. */
static int pp__first_above_asc(const int32_t *a, int m, const int32_t *lengths, int64_t x)
{
    int lo = 0, hi = m;
    while (lo < hi) { int mid = lo + (hi - lo) / 2; if (lengths[a[mid]] > x) hi = mid; else lo = mid + 1; }
    return lo;
}

/* The output of the algorithms below: events (seq, bin) in the order sequences were placed; a
 * bin's contents are its events in that order. */
typedef struct pp__events { int32_t *seq, *bin; int count, num_bins; } pp__events;

static void pp__event(pp__events *e, int32_t seq, int32_t bin) { e->seq[e->count] = seq; e->bin[e->count] = bin; e->count++; }

/* Modified first fit decreasing, NeMo RL's phases. Classes by size s against capacity C: large
 * s > C/2, medium C/3 < s <= C/2, small C/6 < s <= C/3, tiny s <= C/6. */
static pp_status pp__mffd(const int32_t *lengths, int n, int32_t capacity, pp__events *ev, pp_error *err)
{
    int32_t *large, *medium, *small, *tiny, *rest, *tmp, *next_m, *next_s, *prev_s, *next_r;
    int32_t *first3, *nfirst, *bin_of_tmp = NULL;
    int64_t *load;
    uint8_t *has_medium, *in_rest;
    int nl = 0, nm = 0, ns = 0, nt = 0, nr = 0, i, b, alive_small;
    pp__heap heap;
    pp_status st = PP_OK;
    size_t sz = (size_t)(n > 0 ? n : 1);
    memset(&heap, 0, sizeof heap);
    large = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    medium = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    small = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    tiny = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    rest = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    tmp = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    next_m = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (sz + 1));
    next_s = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (sz + 1));
    prev_s = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (sz + 1));
    next_r = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (sz + 1));
    first3 = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * 3 * sz);
    nfirst = (int32_t *)pp__calloc(sz, sizeof(int32_t));
    load = (int64_t *)pp__calloc(sz, sizeof(int64_t));
    has_medium = (uint8_t *)pp__calloc(sz, 1);
    in_rest = (uint8_t *)pp__calloc(sz, 1);
    if (!large || !medium || !small || !tiny || !rest || !tmp || !next_m || !next_s || !prev_s || !next_r ||
        !first3 || !nfirst || !load || !has_medium || !in_rest) {
        st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
        goto done;
    }
    /* Phase 0: classify (integer forms of s > C/2, s > C/3, s > C/6) and sort. */
    for (i = 0; i < n; i++) {
        int64_t s = lengths[i];
        if (2 * s > capacity) large[nl++] = i;
        else if (3 * s > capacity) medium[nm++] = i;
        else if (6 * s > capacity) small[ns++] = i;
        else tiny[nt++] = i;
    }
    if ((st = pp__order_by_length(large, tmp, nl, lengths, 1, 1, err)) != PP_OK ||   /* size descending, stable */
        (st = pp__order_by_length(medium, tmp, nm, lengths, 1, 1, err)) != PP_OK ||
        (st = pp__order_by_length(small, tmp, ns, lengths, 0, 0, err)) != PP_OK ||    /* size ascending, stable */
        (st = pp__order_by_length(tiny, tmp, nt, lengths, 0, 0, err)) != PP_OK) goto done;
    /* Phase 1: one bin per large item. */
    for (b = 0; b < nl; b++) { first3[(size_t)3 * b] = large[b]; nfirst[b] = 1; load[b] = lengths[large[b]]; }
    /* Phase 2: each large bin, in order, takes the first (largest) medium that fits. */
    for (i = 0; i <= nm; i++) next_m[i] = i;
    for (b = 0; b < nl; b++) {
        int p = pp__first_at_most_desc(medium, nm, lengths, capacity - load[b]);
        int q = pp__next_present(next_m, p);
        if (q < nm) {
            first3[(size_t)3 * b + nfirst[b]++] = medium[q];
            load[b] += lengths[medium[q]];
            has_medium[b] = 1;
            next_m[q] = q + 1;
        }
    }
    /* Phase 3: backwards over the bins without a medium, the smallest small plus the largest
     * small that still fits beside it, when the two smallest fit together. */
    for (i = 0; i <= ns; i++) { next_s[i] = i; prev_s[i] = i; }
    alive_small = ns;
    for (b = nl - 1; b >= 0; b--) {
        int f1, f2, p, j;
        int64_t room;
        if (has_medium[b] || alive_small < 2) continue;
        room = capacity - load[b];
        f1 = pp__next_present(next_s, 0);
        f2 = pp__next_present(next_s, f1 + 1);
        if ((int64_t)lengths[small[f1]] + lengths[small[f2]] > room) continue;
        next_s[f1] = f1 + 1; prev_s[f1 + 1] = f1;
        p = pp__first_above_asc(small, ns, lengths, room - lengths[small[f1]]);
        j = pp__prev_present(prev_s, p - 1);   /* exists: f2 fits */
        next_s[j] = j + 1; prev_s[j + 1] = j;
        first3[(size_t)3 * b + nfirst[b]++] = small[f1];
        first3[(size_t)3 * b + nfirst[b]++] = small[j];
        load[b] += (int64_t)lengths[small[f1]] + lengths[small[j]];
        alive_small -= 2;
    }
    /* Phase 4: what is left of medium, small and tiny, largest first (ties: lower index); each
     * large bin in order takes the largest remaining item that fits until none does. */
    for (i = 0; i < nm; i++) if (pp__next_present(next_m, i) == i) in_rest[medium[i]] = 1;
    for (i = 0; i < ns; i++) if (pp__next_present(next_s, i) == i) in_rest[small[i]] = 1;
    for (i = 0; i < nt; i++) in_rest[tiny[i]] = 1;
    for (i = 0; i < n; i++) if (in_rest[i]) rest[nr++] = i;
    if ((st = pp__order_by_length(rest, tmp, nr, lengths, 1, 1, err)) != PP_OK) goto done;
    for (i = 0; i <= nr; i++) next_r[i] = i;
    for (b = 0; b < nl; b++) {
        int k;
        for (k = 0; k < nfirst[b]; k++) pp__event(ev, first3[(size_t)3 * b + k], b);
        for (;;) {
            int p = pp__first_at_most_desc(rest, nr, lengths, capacity - load[b]);
            int q = pp__next_present(next_r, p);
            if (q >= nr) break;
            pp__event(ev, rest[q], b);
            load[b] += lengths[rest[q]];
            next_r[q] = q + 1;
        }
    }
    /* Phase 5, as NeMo RL writes it: leftover bins kept sorted by load (bisect_right, so a bin
     * that changed goes after equal loads); each leftover, largest first, joins the least-filled
     * bin when it fits there, else starts a new bin. The heap key (load, time of last change)
     * is exactly that list's order; the bins come out in it. */
    {
        int temp_bins = 0;
        int64_t clock = 0;
        int32_t next_id = nl;
        bin_of_tmp = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
        if (!bin_of_tmp || !pp__heap_push(&heap, 0, clock++, 0)) {
            st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
            goto done;
        }
        temp_bins = 1;
        for (i = 0; i < nr; i++) {
            int32_t s;
            int q = pp__next_present(next_r, i);
            if (q != i) continue;
            s = rest[i];
            if ((int64_t)lengths[s] <= capacity - heap.item[0].a) {
                pp__heap_item top = pp__heap_pop(&heap);
                pp__event(ev, s, nl + top.v);
                if (!pp__heap_push(&heap, top.a + lengths[s], clock++, top.v)) {
                    st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
                    goto done;
                }
            } else {
                pp__event(ev, s, nl + temp_bins);
                if (!pp__heap_push(&heap, lengths[s], clock++, temp_bins)) {
                    st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
                    goto done;
                }
                temp_bins++;
            }
        }
        /* Final ids: phase-5 bins in heap order, skipping the empty starter bin. */
        while (heap.size > 0) {
            pp__heap_item it = pp__heap_pop(&heap);
            bin_of_tmp[it.v] = it.a > 0 ? next_id++ : -1;
        }
        for (i = 0; i < ev->count; i++) if (ev->bin[i] >= nl) ev->bin[i] = bin_of_tmp[ev->bin[i] - nl];
        ev->num_bins = next_id;
    }
done:
    PIPEPAR_FREE(large); PIPEPAR_FREE(medium); PIPEPAR_FREE(small); PIPEPAR_FREE(tiny); PIPEPAR_FREE(rest);
    PIPEPAR_FREE(tmp); PIPEPAR_FREE(next_m); PIPEPAR_FREE(next_s); PIPEPAR_FREE(prev_s); PIPEPAR_FREE(next_r);
    PIPEPAR_FREE(first3); PIPEPAR_FREE(nfirst); PIPEPAR_FREE(load); PIPEPAR_FREE(has_medium);
    PIPEPAR_FREE(in_rest); PIPEPAR_FREE(bin_of_tmp); PIPEPAR_FREE(heap.item);
    return st;
}

/* Greedy knapsack (Megatron-LM): sequences ascending by length (ties: lower index first); bin
 * after bin, repeatedly take the last remaining sequence that fits (bisect_right - 1: the
 * largest, the higher index on ties) until none fits. */
static pp_status pp__greedy_knapsack(const int32_t *lengths, int n, int32_t capacity, int max_seqs,
                                     pp__events *ev, pp_error *err)
{
    size_t sz = (size_t)(n > 0 ? n : 1);
    int32_t *a = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    int32_t *tmp = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    int32_t *prev = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (sz + 1));
    int i, left = n, bins = 0;
    if (!a || !tmp || !prev) {
        PIPEPAR_FREE(a); PIPEPAR_FREE(tmp); PIPEPAR_FREE(prev);
        return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    }
    for (i = 0; i < n; i++) a[i] = i;
    if (pp__order_by_length(a, tmp, n, lengths, 0, 0, err) != PP_OK) {
        PIPEPAR_FREE(a); PIPEPAR_FREE(tmp); PIPEPAR_FREE(prev);
        return PP_ENOMEM;
    }
    for (i = 0; i <= n; i++) prev[i] = i;
    while (left > 0) {
        int64_t room = capacity;
        int taken = 0;
        for (;;) {
            int p = pp__first_above_asc(a, n, lengths, room);
            int q = p > 0 ? pp__prev_present(prev, p - 1) : -1;
            if (q < 0) break;
            pp__event(ev, a[q], bins);
            room -= lengths[a[q]];
            prev[q + 1] = q;
            left--; taken++;
            if (max_seqs && taken >= max_seqs) break;
        }
        bins++;
    }
    ev->num_bins = bins;
    PIPEPAR_FREE(a); PIPEPAR_FREE(tmp); PIPEPAR_FREE(prev);
    return PP_OK;
}

/* Balanced greedy knapsack (Megatron-LM): longest first (ties: lower index), each into the
 * least-filled bin (ties: earliest) when it fits, else into a new bin; starts with
 * ceil(sum/capacity) + delta empty bins. More starting bins than sequences would only stay
 * empty (the n first sequences go one to each of the n earliest), so at most n are made. */
static pp_status pp__balanced_knapsack(const int32_t *lengths, int n, int32_t capacity, int delta, int max_seqs,
                                       pp__events *ev, pp_error *err)
{
    size_t sz = (size_t)(n > 0 ? n : 1);
    int32_t *a = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    int32_t *tmp = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    int32_t *count = (int32_t *)pp__calloc(sz, sizeof(int32_t));
    int32_t *used = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    pp__heap heap;
    int64_t total = 0, start;
    int i, bins, ids = 0;
    pp_status st = PP_OK;
    memset(&heap, 0, sizeof heap);
    if (!a || !tmp || !count || !used) { st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory"); goto done; }
    for (i = 0; i < n; i++) { a[i] = i; total += lengths[i]; }
    if ((st = pp__order_by_length(a, tmp, n, lengths, 1, 1, err)) != PP_OK) goto done;
    start = (total + capacity - 1) / capacity + delta;
    bins = (int)(start < n ? start : n);
    for (i = 0; i < bins; i++)
        if (!pp__heap_push(&heap, 0, i, i)) { st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory"); goto done; }
    for (i = 0; i < n; i++) {
        int32_t s = a[i], b;
        int64_t ld;
        if (heap.size > 0 && heap.item[0].a + lengths[s] <= capacity) {
            pp__heap_item top = pp__heap_pop(&heap);
            b = top.v; ld = top.a + lengths[s];
        } else {
            b = bins++; ld = lengths[s];
        }
        pp__event(ev, s, b);
        count[b]++;
        if ((!max_seqs || count[b] < max_seqs) && !pp__heap_push(&heap, ld, b, b)) {
            st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
            goto done;
        }
    }
    /* Drop the bins left empty, keep the order of the rest. */
    for (i = 0; i < bins; i++) used[i] = count[i] > 0 ? ids++ : -1;
    for (i = 0; i < ev->count; i++) ev->bin[i] = used[ev->bin[i]];
    ev->num_bins = ids;
done:
    PIPEPAR_FREE(a); PIPEPAR_FREE(tmp); PIPEPAR_FREE(count); PIPEPAR_FREE(used); PIPEPAR_FREE(heap.item);
    return st;
}

/* Builds the compressed-row bins from events; a bin's sequences keep their event order. */
static pp_status pp__packing_from_events(const pp__events *ev, int n, const int32_t *lengths, int32_t capacity,
                                         pp_packing **out, pp_error *err)
{
    pp_packing *p = (pp_packing *)pp__calloc(1, sizeof(pp_packing));
    int32_t *fill = NULL;
    int i, nb = ev->num_bins;
    if (!p) return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    p->num_seqs = n; p->num_bins = nb; p->capacity = capacity;
    p->bin_offsets = (int32_t *)pp__calloc((size_t)nb + 1, sizeof(int32_t));
    p->seqs = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    p->bin_tokens = (int32_t *)pp__calloc((size_t)(nb > 0 ? nb : 1), sizeof(int32_t));
    fill = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(nb > 0 ? nb : 1));
    if (!p->bin_offsets || !p->seqs || !p->bin_tokens || !fill) {
        PIPEPAR_FREE(fill);
        pp_packing_free(p);
        return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    }
    for (i = 0; i < ev->count; i++) {
        p->bin_offsets[ev->bin[i] + 1]++;
        p->bin_tokens[ev->bin[i]] += lengths[ev->seq[i]];
        p->total_tokens += lengths[ev->seq[i]];
    }
    for (i = 0; i < nb; i++) { p->bin_offsets[i + 1] += p->bin_offsets[i]; fill[i] = p->bin_offsets[i]; }
    for (i = 0; i < ev->count; i++) p->seqs[fill[ev->bin[i]]++] = ev->seq[i];
    PIPEPAR_FREE(fill);
    *out = p;
    return PP_OK;
}

/* Builds the compressed-row bins from first fit's chunks: each chunk is one copy. */
static pp_status pp__packing_from_chunks(const int32_t *order, const pp__chunks *ch, int num_bins, int n,
                                         const int32_t *lengths, int32_t capacity, pp_packing **out, pp_error *err)
{
    pp_packing *p = (pp_packing *)pp__calloc(1, sizeof(pp_packing));
    int32_t *fill = NULL;
    int c, i, k = 0;
    if (!p) return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    p->num_seqs = n; p->num_bins = num_bins; p->capacity = capacity;
    p->bin_offsets = (int32_t *)pp__calloc((size_t)num_bins + 1, sizeof(int32_t));
    p->seqs = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    p->bin_tokens = (int32_t *)pp__calloc((size_t)(num_bins > 0 ? num_bins : 1), sizeof(int32_t));
    fill = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(num_bins > 0 ? num_bins : 1));
    if (!p->bin_offsets || !p->seqs || !p->bin_tokens || !fill) {
        PIPEPAR_FREE(fill);
        pp_packing_free(p);
        return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    }
    for (c = 0; c < ch->size; c++) p->bin_offsets[ch->bin[c] + 1] += ch->count[c];
    for (i = 0; i < num_bins; i++) { p->bin_offsets[i + 1] += p->bin_offsets[i]; fill[i] = p->bin_offsets[i]; }
    for (c = 0; c < ch->size; c++) {
        int32_t b = ch->bin[c], cnt = ch->count[c], len = lengths[order[k]];   /* one length per chunk */
        memcpy(p->seqs + fill[b], order + k, sizeof(int32_t) * (size_t)cnt);
        fill[b] += cnt;
        p->bin_tokens[b] += cnt * len;
        p->total_tokens += (int64_t)cnt * len;
        k += cnt;
    }
    PIPEPAR_FREE(fill);
    *out = p;
    return PP_OK;
}

typedef struct pp__bin_size { int32_t count, bin; } pp__bin_size;

static int pp__bin_size_cmp(const void *x, const void *y)   /* count descending, then bin descending */
{
    const pp__bin_size *a = (const pp__bin_size *)x, *b = (const pp__bin_size *)y;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return a->bin > b->bin ? -1 : (a->bin < b->bin ? 1 : 0);
}

/* NeMo RL's _adjust_bin_count on compressed-row bins (see the >>pack notes). */
static pp_status pp__adjust_bins(pp_packing *p, const int32_t *lengths, int min_bins, int multiple, pp_error *err)
{
    int64_t target = p->num_bins;
    int extra, i, k, src = 0, nb = p->num_bins;
    pp__bin_size *order;
    int32_t *count, *moved, *offsets, *seqs, *tokens;
    if (min_bins > target) target = min_bins;
    if (multiple > 1 && target % multiple) target += multiple - target % multiple;
    if (target == p->num_bins) return PP_OK;
    if (target > p->num_seqs)
        return pp__fail(err, PP_EINVAL, "min_bin_count=%d, bin_count_multiple=%d: %lld bins are needed but there "
                        "are only %d sequences (every bin needs at least one)", min_bins, multiple ? multiple : 1,
                        (long long)target, p->num_seqs);
    extra = (int)(target - nb);
    order = (pp__bin_size *)PIPEPAR_MALLOC(sizeof(pp__bin_size) * (size_t)(nb > 0 ? nb : 1));
    count = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(nb > 0 ? nb : 1));
    moved = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)extra);
    offsets = (int32_t *)pp__calloc((size_t)target + 1, sizeof(int32_t));
    seqs = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)p->num_seqs);
    tokens = (int32_t *)pp__calloc((size_t)target, sizeof(int32_t));
    if (!order || !count || !moved || !offsets || !seqs || !tokens) {
        PIPEPAR_FREE(order); PIPEPAR_FREE(count); PIPEPAR_FREE(moved);
        PIPEPAR_FREE(offsets); PIPEPAR_FREE(seqs); PIPEPAR_FREE(tokens);
        return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    }
    for (i = 0; i < nb; i++) {
        count[i] = p->bin_offsets[i + 1] - p->bin_offsets[i];
        order[i].count = count[i]; order[i].bin = i;
    }
    qsort(order, (size_t)nb, sizeof *order, pp__bin_size_cmp);
    for (k = 0; k < extra; k++) {          /* each new bin: the last sequence of the current source */
        while (count[order[src].bin] <= 1) src++;   /* target <= num_seqs keeps src in range */
        {
            int b = order[src].bin;
            moved[k] = p->seqs[p->bin_offsets[b] + count[b] - 1];
            count[b]--;
        }
    }
    for (i = 0; i < nb; i++) {
        offsets[i + 1] = offsets[i] + count[i];
        memcpy(seqs + offsets[i], p->seqs + p->bin_offsets[i], sizeof(int32_t) * (size_t)count[i]);
        for (k = offsets[i]; k < offsets[i + 1]; k++) tokens[i] += lengths[seqs[k]];
    }
    for (k = 0; k < extra; k++) {
        offsets[nb + k + 1] = offsets[nb + k] + 1;
        seqs[offsets[nb + k]] = moved[k];
        tokens[nb + k] = lengths[moved[k]];
    }
    PIPEPAR_FREE(p->bin_offsets); PIPEPAR_FREE(p->seqs); PIPEPAR_FREE(p->bin_tokens);
    p->bin_offsets = offsets; p->seqs = seqs; p->bin_tokens = tokens; p->num_bins = (int)target;
    PIPEPAR_FREE(order); PIPEPAR_FREE(count); PIPEPAR_FREE(moved);
    return PP_OK;
}

pp_status pp_pack(const int32_t *lengths, int n, const pp_pack_config *cfg, pp_packing **out, pp_error *err)
{
    pp__events ev;
    pp__chunks chunks;
    int32_t *order = NULL, *tmp = NULL, *seq_buf = NULL, max_len = 0;
    pp_packing *p = NULL;
    pp_status st;
    size_t sz = (size_t)(n > 0 ? n : 1);
    int i, ordered = 0, fit = 0;
    if (!out) return pp__fail(err, PP_EINVAL, "pp_pack: out must not be NULL");
    *out = NULL;
    if ((st = pp__pack_check(lengths, n, cfg, err)) != PP_OK) return st;
    for (i = 0; i < n; i++) if (lengths[i] > max_len) max_len = lengths[i];
    memset(&ev, 0, sizeof ev);
    memset(&chunks, 0, sizeof chunks);
    fit = cfg->algo == PP_PACK_FFD || cfg->algo == PP_PACK_FIRST_FIT_SHUFFLE ||
          (cfg->algo == PP_PACK_MFFD && cfg->max_sequences_per_bin);
    order = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    if (!fit) ev.bin = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    if (!order || (!fit && !ev.bin)) { st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory"); goto done; }
    /* The placing orders that need no scratch space are built in `order`, which then doubles
     * as the event sequence list; the others get their own event and scratch arrays. */
    if (cfg->algo == PP_PACK_FFD || cfg->algo == PP_PACK_BFD ||
        (cfg->algo == PP_PACK_MFFD && cfg->max_sequences_per_bin)) {
        if ((int64_t)max_len > 8 * (int64_t)n + 4096 &&
            !(tmp = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz))) {
            st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
            goto done;
        }
        if ((st = pp__decreasing_order(order, tmp, n, lengths, max_len, err)) != PP_OK) goto done;
        ordered = 1;
    } else if (cfg->algo == PP_PACK_FIRST_FIT_SHUFFLE) {
        for (i = 0; i < n; i++) order[i] = i;
        pp__python_shuffle(order, n, cfg->seed);
        ordered = 1;
    } else {
        seq_buf = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
        if (!seq_buf) { st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory"); goto done; }
    }
    ev.seq = ordered ? order : seq_buf;
    switch (cfg->algo) {
    case PP_PACK_FFD:
    case PP_PACK_FIRST_FIT_SHUFFLE:
        st = pp__first_fit(order, n, lengths, cfg->capacity, cfg->max_sequences_per_bin, &chunks, &ev.num_bins, err);
        break;
    case PP_PACK_BFD:
        st = pp__best_fit(order, n, lengths, cfg->capacity, cfg->max_sequences_per_bin, ev.bin, &ev.num_bins, err);
        ev.count = n;
        break;
    case PP_PACK_MFFD:
        if (cfg->max_sequences_per_bin)   /* NeMo RL: with a sequence cap MFFD runs capped FFD */
            st = pp__first_fit(order, n, lengths, cfg->capacity, cfg->max_sequences_per_bin, &chunks, &ev.num_bins, err);
        else
            st = pp__mffd(lengths, n, cfg->capacity, &ev, err);
        break;
    case PP_PACK_CONCATENATIVE: {
        int64_t used = 0;
        int in_bin = 0;
        for (i = 0; i < n; i++) {
            if (i == 0 || used + lengths[i] > cfg->capacity ||
                (cfg->max_sequences_per_bin && in_bin >= cfg->max_sequences_per_bin)) {
                ev.num_bins++; used = 0; in_bin = 0;
            }
            pp__event(&ev, i, ev.num_bins - 1);
            used += lengths[i]; in_bin++;
        }
        st = PP_OK;
        break;
    }
    case PP_PACK_GREEDY_KNAPSACK:
        st = pp__greedy_knapsack(lengths, n, cfg->capacity, cfg->max_sequences_per_bin, &ev, err);
        break;
    case PP_PACK_BALANCED_GREEDY_KNAPSACK: {
        int delta = cfg->knapsack_delta == 0 ? 20 : (cfg->knapsack_delta < 0 ? 0 : cfg->knapsack_delta);
        st = pp__balanced_knapsack(lengths, n, cfg->capacity, delta, cfg->max_sequences_per_bin, &ev, err);
        break;
    }
    default:
        st = pp__fail(err, PP_EINVAL, "algo=%d: unknown packing algorithm", (int)cfg->algo);
        break;
    }
    if (st != PP_OK) goto done;
    st = fit ? pp__packing_from_chunks(order, &chunks, ev.num_bins, n, lengths, cfg->capacity, &p, err)
             : pp__packing_from_events(&ev, n, lengths, cfg->capacity, &p, err);
    if (st != PP_OK) goto done;
    if ((st = pp__adjust_bins(p, lengths, cfg->min_bin_count, cfg->bin_count_multiple, err)) != PP_OK) {
        pp_packing_free(p);
        goto done;
    }
    *out = p;
    st = pp__ok(err);
done:
    PIPEPAR_FREE(seq_buf); PIPEPAR_FREE(ev.bin); PIPEPAR_FREE(order); PIPEPAR_FREE(tmp);
    PIPEPAR_FREE(chunks.bin); PIPEPAR_FREE(chunks.count);
    return st;
}

/* --- the distributed plan ------------------------------------------------------------------ */

void pp_pack_plan_free(pp_pack_plan *plan)
{
    if (!plan) return;
    pp_packing_free(plan->bins);
    PIPEPAR_FREE(plan->lengths); PIPEPAR_FREE(plan->padded_lengths); PIPEPAR_FREE(plan->seq_starts);
    PIPEPAR_FREE(plan->bin_rank); PIPEPAR_FREE(plan->bin_microbatch); PIPEPAR_FREE(plan->microbatch_bin);
    PIPEPAR_FREE(plan->bin_real_tokens); PIPEPAR_FREE(plan->bin_padded_tokens);
    PIPEPAR_FREE(plan->cu_seqlens); PIPEPAR_FREE(plan->cu_seqlens_padded);
    PIPEPAR_FREE(plan);
}

typedef struct pp__bin_cost { int64_t cost; int32_t bin; } pp__bin_cost;

static int pp__bin_cost_cmp(const void *x, const void *y)   /* cost descending, then bin ascending */
{
    const pp__bin_cost *a = (const pp__bin_cost *)x, *b = (const pp__bin_cost *)y;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    return a->bin < b->bin ? -1 : (a->bin > b->bin ? 1 : 0);
}

/* Largest bins first, each to the dp rank with the least cost so far (ties: lower rank) among
 * those with fewer than num_microbatches bins; a rank's microbatches then run in bin order. */
static pp_status pp__assign_balanced(pp_pack_plan *plan, int attention, pp_error *err)
{
    int nb = plan->num_bins, dp = plan->dp, i;
    pp__bin_cost *order = (pp__bin_cost *)PIPEPAR_MALLOC(sizeof(pp__bin_cost) * (size_t)nb);
    int32_t *taken = (int32_t *)pp__calloc((size_t)dp, sizeof(int32_t));
    pp__heap heap;
    memset(&heap, 0, sizeof heap);
    if (!order || !taken) goto oom;
    for (i = 0; i < nb; i++) {
        int k;
        int64_t c = 0;
        for (k = plan->bins->bin_offsets[i]; k < plan->bins->bin_offsets[i + 1]; k++) {
            int64_t l = plan->padded_lengths[plan->bins->seqs[k]];
            c += attention ? l * l : l;
        }
        order[i].cost = c; order[i].bin = i;
    }
    qsort(order, (size_t)nb, sizeof *order, pp__bin_cost_cmp);
    for (i = 0; i < dp; i++) if (!pp__heap_push(&heap, 0, i, i)) goto oom;
    for (i = 0; i < nb; i++) {
        pp__heap_item top = pp__heap_pop(&heap);
        plan->bin_rank[order[i].bin] = top.v;
        if (++taken[top.v] < plan->num_microbatches && !pp__heap_push(&heap, top.a + order[i].cost, top.v, top.v))
            goto oom;
    }
    memset(taken, 0, sizeof(int32_t) * (size_t)dp);
    for (i = 0; i < nb; i++) plan->bin_microbatch[i] = taken[plan->bin_rank[i]]++;
    PIPEPAR_FREE(order); PIPEPAR_FREE(taken); PIPEPAR_FREE(heap.item);
    return PP_OK;
oom:
    PIPEPAR_FREE(order); PIPEPAR_FREE(taken); PIPEPAR_FREE(heap.item);
    return pp__fail(err, PP_ENOMEM, "pp_pack_plan_build: out of memory");
}

static int64_t pp__round_up(int64_t x, int64_t m) { return m > 1 ? (x + m - 1) / m * m : x; }

pp_status pp_pack_plan_build(const int32_t *lengths, int n, const pp_pack_plan_config *cfg,
                             pp_pack_plan **out, pp_error *err)
{
    pp_pack_plan *plan;
    pp_pack_config pc;
    int dp, pp, vpp, tp, cp, def, i, b;
    int64_t seq_multiple, start = 0;
    int64_t *target = NULL;
    pp_status st;
    if (!out) return pp__fail(err, PP_EINVAL, "pp_pack_plan_build: out must not be NULL");
    *out = NULL;
    if (!cfg) return pp__fail(err, PP_EINVAL, "pp_pack_plan_build: cfg must not be NULL");
    if (n < 0) return pp__fail(err, PP_EINVAL, "n=%d: the number of sequences must be at least 0", n);
    if (n > 0 && !lengths) return pp__fail(err, PP_EINVAL, "lengths: NULL with n=%d sequences", n);
    if (cfg->dp < 0) return pp__fail(err, PP_EINVAL, "dp=%d: must be at least 1 (0 means 1)", cfg->dp);
    if (cfg->pp < 0) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1 (0 means 1)", cfg->pp);
    if (cfg->vpp < 0) return pp__fail(err, PP_EINVAL, "vpp=%d: must be at least 1 (0 means 1)", cfg->vpp);
    if (cfg->tp < 0) return pp__fail(err, PP_EINVAL, "tp=%d: must be at least 1 (0 means 1)", cfg->tp);
    if (cfg->cp < 0) return pp__fail(err, PP_EINVAL, "cp=%d: must be at least 1 (0 means 1)", cfg->cp);
    if (cfg->seq_multiple < 0)
        return pp__fail(err, PP_EINVAL, "seq_multiple=%d: must be positive (0 means the default)", cfg->seq_multiple);
    if (cfg->bin_multiple < 0)
        return pp__fail(err, PP_EINVAL, "bin_multiple=%d: must be positive (0 means 1)", cfg->bin_multiple);
    if ((unsigned)cfg->assign > (unsigned)PP_ASSIGN_ATTENTION)
        return pp__fail(err, PP_EINVAL, "assign=%d: unknown bin assignment", (int)cfg->assign);
    dp = cfg->dp ? cfg->dp : 1; pp = cfg->pp ? cfg->pp : 1; vpp = cfg->vpp ? cfg->vpp : 1;
    tp = cfg->tp ? cfg->tp : 1; cp = cfg->cp ? cfg->cp : 1;
    seq_multiple = cfg->seq_multiple ? cfg->seq_multiple : (cp > 1 ? (int64_t)tp * cp * 2 : tp);
    if (seq_multiple > INT32_MAX)
        return pp__fail(err, PP_EINVAL, "tp=%d, cp=%d: the sequence padding multiple tp*cp*2 is too large", tp, cp);
    if (cp > 1 && seq_multiple % (2 * (int64_t)cp))
        return pp__fail(err, PP_EINVAL, "seq_multiple=%lld: with cp=%d it must be a multiple of 2*cp=%lld, so each "
                        "sequence splits into 2*cp equal chunks", (long long)seq_multiple, cp, 2 * (long long)cp);
    if (cp > 1 && cfg->bin_multiple > 1 && cfg->bin_multiple % (2 * (int64_t)cp))
        return pp__fail(err, PP_EINVAL, "bin_multiple=%d: with cp=%d it must be a multiple of 2*cp=%lld (the tail "
                        "padding joins the last sequence's chunks)", cfg->bin_multiple, cp, 2 * (long long)cp);
    pc = cfg->pack;
    if (vpp > 1 && (int64_t)dp * pp > INT_MAX)
        return pp__fail(err, PP_EINVAL, "dp=%d, pp=%d: dp*pp microbatches per step is past %d", dp, pp, INT_MAX);
    def = vpp > 1 ? dp * pp : dp;
    if (pc.min_bin_count == 0) pc.min_bin_count = def;
    if (pc.bin_count_multiple == 0) pc.bin_count_multiple = def;
    else if (pc.bin_count_multiple % dp)
        return pp__fail(err, PP_EINVAL, "bin_count_multiple=%d: must be a multiple of dp (%d) so every data-parallel "
                        "rank gets the same number of microbatches", pc.bin_count_multiple, dp);
    plan = (pp_pack_plan *)pp__calloc(1, sizeof(pp_pack_plan));
    if (!plan) return pp__fail(err, PP_ENOMEM, "pp_pack_plan_build: out of memory");
    plan->num_seqs = n; plan->dp = dp; plan->pp = pp; plan->tp = tp; plan->cp = cp;
    plan->seq_multiple = (int)seq_multiple; plan->bin_multiple = cfg->bin_multiple ? cfg->bin_multiple : 1;
    plan->lengths = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    plan->padded_lengths = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    plan->seq_starts = (int64_t *)PIPEPAR_MALLOC(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (!plan->lengths || !plan->padded_lengths || !plan->seq_starts) goto oom;
    for (i = 0; i < n; i++) {
        int64_t padded;
        if (lengths[i] < 1) {
            st = pp__fail(err, PP_EINVAL, "lengths[%d]=%d: a sequence needs at least 1 token", i, (int)lengths[i]);
            goto fail;
        }
        padded = pp__round_up(lengths[i], seq_multiple);
        if (padded > pc.capacity) {
            if (padded == lengths[i])
                st = pp__fail(err, PP_EINVAL, "lengths[%d]=%d: exceeds the bin capacity (%d)", i, (int)lengths[i],
                              (int)pc.capacity);
            else
                st = pp__fail(err, PP_EINVAL, "lengths[%d]=%d: padded to a multiple of %lld it is %lld tokens, more "
                              "than the bin capacity (%d)", i, (int)lengths[i], (long long)seq_multiple,
                              (long long)padded, (int)pc.capacity);
            goto fail;
        }
        plan->lengths[i] = lengths[i];
        plan->padded_lengths[i] = (int32_t)padded;
        plan->seq_starts[i] = start;
        start += lengths[i];
    }
    if ((st = pp_pack(plan->padded_lengths, n, &pc, &plan->bins, err)) != PP_OK) goto fail;
    plan->num_bins = plan->bins->num_bins;
    plan->num_microbatches = plan->num_bins / dp;
    b = plan->num_bins > 0 ? plan->num_bins : 1;
    plan->bin_rank = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)b);
    plan->bin_microbatch = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)b);
    plan->microbatch_bin = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)b);
    plan->bin_real_tokens = (int32_t *)pp__calloc((size_t)b, sizeof(int32_t));
    plan->bin_padded_tokens = (int32_t *)pp__calloc((size_t)b, sizeof(int32_t));
    plan->cu_seqlens = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * ((size_t)n + (size_t)b));
    plan->cu_seqlens_padded = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * ((size_t)n + (size_t)b));
    target = (int64_t *)pp__calloc((size_t)(dp > b ? dp : b), sizeof(int64_t));
    if (!plan->bin_rank || !plan->bin_microbatch || !plan->microbatch_bin || !plan->bin_real_tokens ||
        !plan->bin_padded_tokens || !plan->cu_seqlens || !plan->cu_seqlens_padded || !target) goto oom;
    /* Bins to (rank, microbatch). */
    if (cfg->assign == PP_ASSIGN_ROUND_ROBIN) {
        for (b = 0; b < plan->num_bins; b++) { plan->bin_rank[b] = b % dp; plan->bin_microbatch[b] = b / dp; }
    } else if ((st = pp__assign_balanced(plan, cfg->assign == PP_ASSIGN_ATTENTION, err)) != PP_OK) {
        goto fail;
    }
    for (b = 0; b < plan->num_bins; b++)
        plan->microbatch_bin[plan->bin_rank[b] * plan->num_microbatches + plan->bin_microbatch[b]] = b;
    /* Microbatch lengths: each bin's padded total to bin_multiple; with pp > 1 each rank's
     * largest (or the largest of all ranks) for every microbatch of the rank. */
    for (b = 0; b < plan->num_bins; b++) {
        int64_t t = pp__round_up(plan->bins->bin_tokens[b], plan->bin_multiple);
        if (t > INT32_MAX) {
            st = pp__fail(err, PP_EINVAL, "bin_multiple=%d: bin %d's %d tokens round up past 2^31-1",
                          plan->bin_multiple, b, (int)plan->bins->bin_tokens[b]);
            goto fail;
        }
        plan->bin_padded_tokens[b] = (int32_t)t;
    }
    if (pp > 1 && !cfg->variable_shapes) {
        int64_t all = 0;
        for (i = 0; i < dp; i++) target[i] = 0;
        for (b = 0; b < plan->num_bins; b++) {
            int r = plan->bin_rank[b];
            if (plan->bin_padded_tokens[b] > target[r]) target[r] = plan->bin_padded_tokens[b];
            if (plan->bin_padded_tokens[b] > all) all = plan->bin_padded_tokens[b];
        }
        for (b = 0; b < plan->num_bins; b++)
            plan->bin_padded_tokens[b] = (int32_t)(cfg->same_shape_all_ranks ? all : target[plan->bin_rank[b]]);
    }
    for (b = 0; b < plan->num_bins; b++) {
        int c = plan->bins->bin_offsets[b] + b, k, cnt = plan->bins->bin_offsets[b + 1] - plan->bins->bin_offsets[b];
        plan->cu_seqlens[c] = 0;
        plan->cu_seqlens_padded[c] = 0;
        for (k = 0; k < cnt; k++) {
            int32_t s = plan->bins->seqs[plan->bins->bin_offsets[b] + k];
            plan->cu_seqlens[c + k + 1] = plan->cu_seqlens[c + k] + plan->lengths[s];
            plan->cu_seqlens_padded[c + k + 1] = plan->cu_seqlens_padded[c + k] + plan->padded_lengths[s];
        }
        plan->bin_real_tokens[b] = plan->cu_seqlens[c + cnt];
        plan->cu_seqlens_padded[c + cnt] = plan->bin_padded_tokens[b];   /* the last sequence takes the tail */
    }
    PIPEPAR_FREE(target);
    *out = plan;
    return pp__ok(err);
oom:
    st = pp__fail(err, PP_ENOMEM, "pp_pack_plan_build: out of memory");
fail:
    PIPEPAR_FREE(target);
    pp_pack_plan_free(plan);
    return st;
}

int pp_pack_plan_bin_size(const pp_pack_plan *plan, int bin)
{
    if (!plan || bin < 0 || bin >= plan->num_bins) return -1;
    return plan->bins->bin_offsets[bin + 1] - plan->bins->bin_offsets[bin];
}

const int32_t *pp_pack_plan_cu_seqlens(const pp_pack_plan *plan, int bin)
{
    if (!plan || bin < 0 || bin >= plan->num_bins) return NULL;
    return plan->cu_seqlens + plan->bins->bin_offsets[bin] + bin;
}

const int32_t *pp_pack_plan_cu_seqlens_padded(const pp_pack_plan *plan, int bin)
{
    if (!plan || bin < 0 || bin >= plan->num_bins) return NULL;
    return plan->cu_seqlens_padded + plan->bins->bin_offsets[bin] + bin;
}

pp_status pp_pack_plan_gather(const pp_pack_plan *plan, int bin, const int64_t *seq_offsets, int64_t *rows,
                              pp_error *err)
{
    const int32_t *cu;
    int k, cnt;
    if (!plan || !rows) return pp__fail(err, PP_EINVAL, "pp_pack_plan_gather: plan and rows must not be NULL");
    if (bin < 0 || bin >= plan->num_bins)
        return pp__fail(err, PP_EINVAL, "bin=%d: must be in 0 .. %d", bin, plan->num_bins - 1);
    cu = pp_pack_plan_cu_seqlens_padded(plan, bin);
    cnt = pp_pack_plan_bin_size(plan, bin);
    for (k = 0; k < cnt; k++) {
        int32_t s = plan->bins->seqs[plan->bins->bin_offsets[bin] + k], t;
        int64_t base = seq_offsets ? seq_offsets[s] : plan->seq_starts[s];
        for (t = cu[k]; t < cu[k + 1]; t++)
            rows[t] = t - cu[k] < plan->lengths[s] ? base + (t - cu[k]) : -1;
    }
    return pp__ok(err);
}


/* --- >>cp (implementation) ---------------------------------------------------------------- */

static pp_status pp__cp_check(const int32_t *cu, int num_seqs, int cp, int rank, int need_rank, pp_error *err)
{
    int i;
    /* 2*cp chunks per sequence: 2*cp, and every position, stay within 32 bits */
    if (cp < 1 || cp > INT32_MAX / 2) return pp__fail(err, PP_EINVAL, "cp=%d: must be between 1 and %d", cp, INT32_MAX / 2);
    if (need_rank && (rank < 0 || rank >= cp))
        return pp__fail(err, PP_EINVAL, "rank=%d: must be in 0 .. cp-1 = %d", rank, cp - 1);
    if (num_seqs < 0) return pp__fail(err, PP_EINVAL, "num_seqs=%d: must be at least 0", num_seqs);
    if (!cu) return pp__fail(err, PP_EINVAL, "cu_seqlens_padded: must not be NULL");
    if (cu[0] != 0) return pp__fail(err, PP_EINVAL, "cu_seqlens_padded[0]=%d: must be 0", (int)cu[0]);
    for (i = 0; i < num_seqs; i++) {
        int64_t len = (int64_t)cu[i + 1] - cu[i];
        if (len < 0)
            return pp__fail(err, PP_EINVAL, "cu_seqlens_padded[%d]=%d: smaller than the entry before it (%d)", i + 1,
                            (int)cu[i + 1], (int)cu[i]);
        if (cp > 1 && len % (2 * (int64_t)cp))
            return pp__fail(err, PP_EINVAL, "sequence %d: padded length %lld is not a multiple of 2*cp=%lld (pad each "
                            "sequence to a multiple of 2*cp before splitting)", i, (long long)len, 2 * (long long)cp);
    }
    return PP_OK;
}

/* Rank r's positions, sequence by sequence: chunk r, then chunk 2*cp-1-r. cp = 1 keeps every
 * position in order (no split, so no length rule either). */
static void pp__cp_fill(const int32_t *cu, int num_seqs, int cp, int rank, int32_t *index)
{
    int i, j = 0;
    if (cp == 1) {
        for (j = 0; j < cu[num_seqs]; j++) index[j] = j;
        return;
    }
    for (i = 0; i < num_seqs; i++) {
        int32_t half = (cu[i + 1] - cu[i]) / (2 * cp), t;
        int32_t a = cu[i] + rank * half, b = cu[i] + (2 * cp - 1 - rank) * half;
        for (t = 0; t < half; t++) index[j++] = a + t;
        for (t = 0; t < half; t++) index[j++] = b + t;
    }
}

pp_status pp_cp_thd_indices(const int32_t *cu_seqlens_padded, int num_seqs, int cp, int rank, int32_t *index,
                            pp_error *err)
{
    pp_status st = pp__cp_check(cu_seqlens_padded, num_seqs, cp, rank, 1, err);
    if (st != PP_OK) return st;
    if (!index) return pp__fail(err, PP_EINVAL, "index: must not be NULL");
    pp__cp_fill(cu_seqlens_padded, num_seqs, cp, rank, index);
    return pp__ok(err);
}

pp_status pp_cp_thd_gather(const int32_t *cu_seqlens_padded, int num_seqs, int cp, int32_t *source, pp_error *err)
{
    pp_status st = pp__cp_check(cu_seqlens_padded, num_seqs, cp, 0, 0, err);
    int32_t local;
    int r, i;
    if (st != PP_OK) return st;
    if (!source) return pp__fail(err, PP_EINVAL, "source: must not be NULL");
    local = cu_seqlens_padded[num_seqs] / cp;
    if (cp == 1) {
        for (i = 0; i < local; i++) source[i] = i;
        return pp__ok(err);
    }
    for (r = 0; r < cp; r++) {
        int32_t j = 0;
        for (i = 0; i < num_seqs; i++) {
            const int32_t *cu = cu_seqlens_padded;
            int32_t half = (cu[i + 1] - cu[i]) / (2 * cp), t;
            int32_t a = cu[i] + r * half, b = cu[i] + (2 * cp - 1 - r) * half;
            for (t = 0; t < half; t++) source[a + t] = r * local + j++;
            for (t = 0; t < half; t++) source[b + t] = r * local + j++;
        }
    }
    return pp__ok(err);
}

pp_status pp_cp_thd_local_cu_seqlens(const int32_t *cu_seqlens_padded, int num_seqs, int cp, int32_t *local,
                                     pp_error *err)
{
    pp_status st = pp__cp_check(cu_seqlens_padded, num_seqs, cp, 0, 0, err);
    int i;
    if (st != PP_OK) return st;
    if (!local) return pp__fail(err, PP_EINVAL, "local: must not be NULL");
    for (i = 0; i <= num_seqs; i++) local[i] = cu_seqlens_padded[i] / cp;
    return pp__ok(err);
}

pp_status pp_cp_bshd_indices(int32_t seq_len, int cp, int rank, int32_t *index, pp_error *err)
{
    int32_t cu[2];
    pp_status st;
    if (seq_len < 0) return pp__fail(err, PP_EINVAL, "seq_len=%d: must be at least 0", (int)seq_len);
    cu[0] = 0; cu[1] = seq_len;
    if (cp > 1 && seq_len % (2 * (int64_t)cp))
        return pp__fail(err, PP_EINVAL, "seq_len=%d: must be a multiple of 2*cp=%lld", (int)seq_len, 2 * (long long)cp);
    if ((st = pp__cp_check(cu, 1, cp, rank, 1, err)) != PP_OK) return st;
    if (!index) return pp__fail(err, PP_EINVAL, "index: must not be NULL");
    pp__cp_fill(cu, 1, cp, rank, index);
    return pp__ok(err);
}

pp_status pp_cp_bshd_gather(int32_t seq_len, int cp, int32_t *source, pp_error *err)
{
    int32_t cu[2];
    if (seq_len < 0) return pp__fail(err, PP_EINVAL, "seq_len=%d: must be at least 0", (int)seq_len);
    if (cp > 1 && seq_len % (2 * (int64_t)cp))
        return pp__fail(err, PP_EINVAL, "seq_len=%d: must be a multiple of 2*cp=%lld", (int)seq_len, 2 * (long long)cp);
    cu[0] = 0; cu[1] = seq_len;
    return pp_cp_thd_gather(cu, 1, cp, source, err);
}

pp_status pp_cp_plan_indices(const pp_pack_plan *plan, int bin, int cp_rank, int32_t *index, pp_error *err)
{
    if (!plan) return pp__fail(err, PP_EINVAL, "pp_cp_plan_indices: plan must not be NULL");
    if (bin < 0 || bin >= plan->num_bins)
        return pp__fail(err, PP_EINVAL, "bin=%d: must be in 0 .. %d", bin, plan->num_bins - 1);
    return pp_cp_thd_indices(pp_pack_plan_cu_seqlens_padded(plan, bin), pp_pack_plan_bin_size(plan, bin), plan->cp,
                             cp_rank, index, err);
}

pp_status pp_cp_plan_rows(const pp_pack_plan *plan, int bin, int cp_rank, const int64_t *seq_offsets, int64_t *rows,
                          pp_error *err)
{
    int32_t *index, total, local, j;
    int64_t *packed;
    pp_status st;
    if (!plan || !rows) return pp__fail(err, PP_EINVAL, "pp_cp_plan_rows: plan and rows must not be NULL");
    if (bin < 0 || bin >= plan->num_bins)
        return pp__fail(err, PP_EINVAL, "bin=%d: must be in 0 .. %d", bin, plan->num_bins - 1);
    total = plan->bin_padded_tokens[bin];
    local = total / plan->cp;
    index = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(local > 0 ? local : 1));
    packed = (int64_t *)PIPEPAR_MALLOC(sizeof(int64_t) * (size_t)(total > 0 ? total : 1));
    if (!index || !packed) {
        PIPEPAR_FREE(index); PIPEPAR_FREE(packed);
        return pp__fail(err, PP_ENOMEM, "pp_cp_plan_rows: out of memory");
    }
    if ((st = pp_cp_plan_indices(plan, bin, cp_rank, index, err)) == PP_OK &&
        (st = pp_pack_plan_gather(plan, bin, seq_offsets, packed, err)) == PP_OK)
        for (j = 0; j < local; j++) rows[j] = packed[index[j]];
    PIPEPAR_FREE(index);
    PIPEPAR_FREE(packed);
    return st == PP_OK ? pp__ok(err) : st;
}


/* --- >>replay (implementation) ------------------------------------------------------------ */

static pp_status pp__moe_check(const pp_moe_layout *m, pp_error *err)
{
    int moe, i;
    if (!m) return pp__fail(err, PP_EINVAL, "model: must not be NULL");
    if (m->num_layers < 1) return pp__fail(err, PP_EINVAL, "num_layers=%d: must be at least 1", m->num_layers);
    if (m->first_k_dense < 0 || m->first_k_dense > m->num_layers)
        return pp__fail(err, PP_EINVAL, "first_k_dense=%d: must be in 0 .. num_layers (%d)", m->first_k_dense,
                        m->num_layers);
    if (m->moe_freq < 0) return pp__fail(err, PP_EINVAL, "moe_freq=%d: must be positive (0 means 1)", m->moe_freq);
    for (moe = 0, i = 0; i < m->num_layers; i++) moe += pp_moe_is_moe(m, i) == 1;
    if (m->payload_layers != 0 && m->payload_layers != moe && m->payload_layers != m->num_layers)
        return pp__fail(err, PP_EINVAL, "payload_layers=%d: the recording's layer axis must hold one slot per MoE "
                        "layer (%d) or per decoder layer (%d)", m->payload_layers, moe, m->num_layers);
    return PP_OK;
}

int pp_moe_is_moe(const pp_moe_layout *m, int layer)
{
    int freq;
    if (!m || m->num_layers < 1 || layer < 0 || layer >= m->num_layers) return -1;
    if (m->pattern) return m->pattern[layer] != 0;
    freq = m->moe_freq > 0 ? m->moe_freq : 1;
    return layer >= m->first_k_dense && layer % freq == 0;
}

int pp_moe_count(const pp_moe_layout *m)
{
    int i, n = 0;
    if (pp__moe_check(m, NULL) != PP_OK) return -1;
    for (i = 0; i < m->num_layers; i++) n += pp_moe_is_moe(m, i) == 1;
    return n;
}

pp_status pp_moe_stage_layers(const pp_moe_layout *m, int first_layer, int last_layer, int32_t *layers,
                              int32_t *payload, int *count, pp_error *err)
{
    pp_status st = pp__moe_check(m, err);
    int i, k = 0, ordinal = 0, full;
    if (st != PP_OK) return st;
    if (!count) return pp__fail(err, PP_EINVAL, "count: must not be NULL");
    if (first_layer < 0 || last_layer > m->num_layers || first_layer > last_layer)
        return pp__fail(err, PP_EINVAL, "layers [%d, %d): must lie within [0, num_layers=%d) with first <= last",
                        first_layer, last_layer, m->num_layers);
    full = m->payload_layers == m->num_layers && m->payload_layers != pp_moe_count(m);
    for (i = 0; i < last_layer; i++) {
        if (pp_moe_is_moe(m, i) != 1) continue;
        if (i >= first_layer) {
            if (layers) layers[k] = i;
            if (payload) payload[k] = full ? i : ordinal;
            k++;
        }
        ordinal++;
    }
    *count = k;
    return pp__ok(err);
}

pp_status pp_replay_config_from_layers(const pp_layers *l, int pp_rank, int chunk, pp_replay_config *cfg, pp_error *err)
{
    int stage;
    if (!l || !cfg) return pp__fail(err, PP_EINVAL, "pp_replay_config_from_layers: l and cfg must not be NULL");
    stage = pp_layers_stage(l, pp_rank, chunk);
    if (stage < 0)
        return pp__fail(err, PP_EINVAL, "pp_rank=%d, chunk=%d: the split has pp=%d ranks of vpp=%d chunks", pp_rank, chunk,
                        l->pp, l->vpp);
    return pp_replay_config_from_stage(l, stage, cfg, err);
}

pp_status pp_replay_config_from_stage(const pp_layers *l, int stage, pp_replay_config *cfg, pp_error *err)
{
    int first, count;
    pp_status st;
    if (!l || !cfg) return pp__fail(err, PP_EINVAL, "pp_replay_config_from_stage: l and cfg must not be NULL");
    if (stage < 0 || stage >= l->num_stages)
        return pp__fail(err, PP_EINVAL, "stage=%d: the split has %d stages (0 .. %d)", stage, l->num_stages,
                        l->num_stages - 1);
    if ((st = pp_layers_stage_range(l, stage, &first, &count, err)) != PP_OK) return st;
    cfg->model.num_layers = l->num_layers;
    cfg->model.first_k_dense = 0;
    cfg->model.moe_freq = 0;
    cfg->model.pattern = l->is_moe;
    cfg->first_layer = first;
    cfg->last_layer = first + count;
    return pp__ok(err);
}

void pp_replay_map_free(pp_replay_map *m)
{
    if (!m) return;
    PIPEPAR_FREE(m->layers);
    PIPEPAR_FREE(m->payload);
    PIPEPAR_FREE(m->rows);
    PIPEPAR_FREE(m);
}

pp_status pp_replay_map_build(const pp_pack_plan *plan, int bin, const pp_replay_config *cfg, pp_replay_map **out,
                              pp_error *err)
{
    pp_replay_map *m;
    int64_t *rows = NULL;
    int tp, span, count;
    pp_status st;
    if (!out) return pp__fail(err, PP_EINVAL, "pp_replay_map_build: out must not be NULL");
    *out = NULL;
    if (!plan || !cfg) return pp__fail(err, PP_EINVAL, "pp_replay_map_build: plan and cfg must not be NULL");
    if (bin < 0 || bin >= plan->num_bins)
        return pp__fail(err, PP_EINVAL, "bin=%d: must be in 0 .. %d", bin, plan->num_bins - 1);
    if (cfg->cp_rank < 0 || cfg->cp_rank >= plan->cp)
        return pp__fail(err, PP_EINVAL, "cp_rank=%d: must be in 0 .. cp-1 = %d", cfg->cp_rank, plan->cp - 1);
    tp = cfg->tp ? cfg->tp : 1;
    if (tp < 1) return pp__fail(err, PP_EINVAL, "tp=%d: must be at least 1 (0 means 1)", cfg->tp);
    if (cfg->tp_rank < 0 || cfg->tp_rank >= tp)
        return pp__fail(err, PP_EINVAL, "tp_rank=%d: must be in 0 .. tp-1 = %d", cfg->tp_rank, tp - 1);
    if ((st = pp_moe_stage_layers(&cfg->model, cfg->first_layer, cfg->last_layer, NULL, NULL, &count, err)) != PP_OK)
        return st;
    m = (pp_replay_map *)pp__calloc(1, sizeof(pp_replay_map));
    if (!m) return pp__fail(err, PP_ENOMEM, "pp_replay_map_build: out of memory");
    span = cfg->last_layer - cfg->first_layer;
    m->layers = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(span > 0 ? span : 1));
    m->payload = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(span > 0 ? span : 1));
    if (!m->layers || !m->payload) goto oom;
    pp_moe_stage_layers(&cfg->model, cfg->first_layer, cfg->last_layer, m->layers, m->payload, &m->num_layers, NULL);
    if (m->num_layers > 0) {
        int32_t local = plan->bin_padded_tokens[bin] / plan->cp;
        if (cfg->sequence_parallel && tp > 1 && local % tp) {
            st = pp__fail(err, PP_EINVAL, "sequence_parallel: the %d tokens of cp rank %d do not split evenly over tp=%d "
                          "(pad sequences to a multiple of tp*cp*2)", (int)local, cfg->cp_rank, tp);
            pp_replay_map_free(m);
            return st;
        }
        rows = (int64_t *)PIPEPAR_MALLOC(sizeof(int64_t) * (size_t)(local > 0 ? local : 1));
        if (!rows) goto oom;
        if ((st = pp_cp_plan_rows(plan, bin, cfg->cp_rank, cfg->record_offsets, rows, err)) != PP_OK) {
            PIPEPAR_FREE(rows);
            pp_replay_map_free(m);
            return st;
        }
        if (cfg->sequence_parallel && tp > 1) {   /* keep this tp rank's contiguous piece */
            m->num_tokens = local / tp;
            memmove(rows, rows + (size_t)cfg->tp_rank * (size_t)m->num_tokens, sizeof(int64_t) * (size_t)m->num_tokens);
        } else {
            m->num_tokens = local;
        }
        m->rows = rows;
        rows = NULL;
    }
    *out = m;
    return pp__ok(err);
oom:
    PIPEPAR_FREE(rows);
    pp_replay_map_free(m);
    return pp__fail(err, PP_ENOMEM, "pp_replay_map_build: out of memory");
}

pp_status pp_replay_gather(const pp_replay_map *map, const int32_t *recording, int64_t recorded_rows, int payload_layers,
                           int topk, int32_t *dst, pp_error *err)
{
    int l, k;
    int32_t t;
    if (!map || !dst || (!recording && recorded_rows > 0))
        return pp__fail(err, PP_EINVAL, "pp_replay_gather: map, recording and dst must not be NULL");
    if (topk < 1) return pp__fail(err, PP_EINVAL, "topk=%d: must be at least 1", topk);
    if (payload_layers < 1) return pp__fail(err, PP_EINVAL, "payload_layers=%d: must be at least 1", payload_layers);
    for (l = 0; l < map->num_layers; l++)
        if (map->payload[l] < 0 || map->payload[l] >= payload_layers)
            return pp__fail(err, PP_EINVAL, "layer %d: slot %d is outside the recording's %d layer slots",
                            (int)map->layers[l], (int)map->payload[l], payload_layers);
    for (t = 0; t < map->num_tokens; t++)
        if (map->rows[t] >= recorded_rows)
            return pp__fail(err, PP_EINVAL, "local token %d: recorded row %lld is past the recording's %lld rows",
                            (int)t, (long long)map->rows[t], (long long)recorded_rows);
    for (l = 0; l < map->num_layers; l++)
        for (t = 0; t < map->num_tokens; t++) {
            int32_t *d = dst + ((size_t)l * (size_t)map->num_tokens + (size_t)t) * (size_t)topk;
            int64_t row = map->rows[t];
            const int32_t *s = row >= 0 ? recording + ((size_t)row * (size_t)payload_layers + (size_t)map->payload[l]) *
                                                          (size_t)topk : NULL;
            for (k = 0; k < topk; k++) d[k] = s ? s[k] : -1;
        }
    return pp__ok(err);
}


/* ============================================================================================
 * >>runtime (implementation)
 * ============================================================================================ */

#include <time.h>

/* --- >>transport (implementation): tags and the clock ------------------------------------- */

uint64_t pp_transfer_tag(int op, int stage, int mb, int step)
{
    return ((uint64_t)(unsigned)(step & 0xff) << 56) | ((uint64_t)(unsigned)(op & 0xff) << 48) |
           ((uint64_t)(unsigned)(stage & 0xffffff) << 24) | (uint64_t)(unsigned)(mb & 0xffffff);
}

int pp_transfer_tag_format(uint64_t tag, char *buf, size_t size)
{
    int step = (int)(tag >> 56), op = (int)((tag >> 48) & 0xff);
    int stage = (int)((tag >> 24) & 0xffffff), mb = (int)(tag & 0xffffff);
    return snprintf(buf, size, "%d%s%d (step %d)", stage, pp_op_name((pp_op)op), mb, step);
}

/* The checks every group collective makes; *timeout gets the deadline (0 means 60 s). */
static pp_status pp__group_check(const pp_transport *t, const char *fn, double timeout_s, double *timeout,
                                 pp_error *err)
{
    if (!t) return pp__fail(err, PP_EINVAL, "pp_group_%s: transport must not be NULL", fn);
    if (t->world < 1 || t->rank < 0 || t->rank >= t->world)
        return pp__fail(err, PP_EINVAL, "pp_group_%s: transport.rank=%d of world=%d: must be between 0 and world-1",
                        fn, t->rank, t->world);
    if (!(timeout_s >= 0) || timeout_s > 1e9)
        return pp__fail(err, PP_EINVAL, "pp_group_%s: timeout_s=%g: must be >= 0 (0 means 60 s)", fn, timeout_s);
    *timeout = timeout_s > 0 ? timeout_s : 60.0;
    return PP_OK;
}

/* A transport of several ranks without the collective `fn`. */
static pp_status pp__group_missing(const pp_transport *t, const char *fn, pp_error *err)
{
    return pp__fail(err, PP_EINVAL, "transport.%s: must not be NULL for pp_group_%s over %d ranks (this transport has "
                    "no group collectives)", fn, strcmp(fn, "all_reduce_buf") == 0 ? "all_reduce" : fn, t->world);
}

pp_status pp_group_all_reduce(const pp_transport *t, float *buf, size_t count, double timeout_s, pp_error *err)
{
    double timeout;
    pp_status st = pp__group_check(t, "all_reduce", timeout_s, &timeout, err);
    if (st != PP_OK) return st;
    if (count > 0 && !buf) return pp__fail(err, PP_EINVAL, "pp_group_all_reduce: buf is NULL for count=%zu", count);
    if (count > SIZE_MAX / sizeof(float))
        return pp__fail(err, PP_EINVAL, "pp_group_all_reduce: count=%zu: more floats than memory holds", count);
    if (!t->all_reduce_buf) return t->world == 1 ? pp__ok(err) : pp__group_missing(t, "all_reduce_buf", err);
    return t->all_reduce_buf(t->user, buf, count, timeout, err);
}

pp_status pp_group_all_gather(const pp_transport *t, const void *send, void *recv, size_t bytes, double timeout_s,
                              pp_error *err)
{
    double timeout;
    pp_status st = pp__group_check(t, "all_gather", timeout_s, &timeout, err);
    if (st != PP_OK) return st;
    if (bytes > 0 && (!send || !recv))
        return pp__fail(err, PP_EINVAL, "pp_group_all_gather: send and recv must not be NULL for bytes=%zu", bytes);
    if (bytes > 0 && (size_t)t->world > SIZE_MAX / bytes)
        return pp__fail(err, PP_EINVAL, "pp_group_all_gather: bytes=%zu from %d ranks: more than memory holds", bytes,
                        t->world);
    if (!t->all_gather) {
        if (t->world > 1) return pp__group_missing(t, "all_gather", err);
        if (bytes && recv != send) memmove(recv, send, bytes);
        return pp__ok(err);
    }
    return t->all_gather(t->user, send, recv, bytes, timeout, err);
}

pp_status pp_group_barrier(const pp_transport *t, double timeout_s, pp_error *err)
{
    double timeout;
    pp_status st = pp__group_check(t, "barrier", timeout_s, &timeout, err);
    if (st != PP_OK) return st;
    if (!t->barrier) return t->world == 1 ? pp__ok(err) : pp__group_missing(t, "barrier", err);
    return t->barrier(t->user, timeout, err);
}

/* Seconds of a monotonic host clock. */
static double pp__now(void)
{
#if defined(CLOCK_MONOTONIC)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#else
    return (double)clock() / CLOCKS_PER_SEC;
#endif
}

/* --- >>threads (implementation) --------------------------------------------------------------
 * One mutex guards the whole world: the mailboxes (one singly linked FIFO per destination world
 * rank), the registry of groups and the abort state. Each rank sleeps on its own condition
 * variable (a message for it arrived, or the world was aborted). Conditions use CLOCK_MONOTONIC
 * so a change of the wall clock cannot stretch a deadline. A message carries its sender's world
 * rank, its transport's group id (0: the world's) and whether it is a transfer or part of a
 * collective; a receive matches all three and the tag, so the transports of one world never
 * take each other's messages. Every transport's collectives are made of such messages too. */
#ifndef PIPEPAR_NO_THREADS
#include <pthread.h>
#include <errno.h>

typedef struct pp__msg {
    struct pp__msg *next;
    int src;            /* the sender's world rank */
    int group;          /* the sender's transport: 0 the world's, else a group's id */
    int coll;           /* 0: a transfer (post); 1: a part of a group collective */
    uint64_t tag;
    size_t total;       /* a collective's: its whole size on the sender (floats or bytes), to name a mismatch */
    size_t bytes;       /* the payload follows the struct */
} pp__msg;

/* A group's members, registered once per distinct list (pp_threads_transport_group): its id is
 * what the messages of its transports carry. */
typedef struct pp__threads_members {
    struct pp__threads_members *next;
    int id, size;
    int *ranks;         /* [size] world ranks */
} pp__threads_members;

/* One peer's part of a collective's exchange: what goes to it, what comes from it. */
typedef struct pp__threads_io {
    const void *send;
    size_t send_bytes;
    void *recv;
    size_t recv_bytes;
    pp__msg *out, *got;
} pp__threads_io;

/* One rank's end of a transport (its `user`): the world's (group 0, members NULL: index and world
 * rank are one) or a group's. */
typedef struct pp__threads_ep {
    struct pp_threads_world *w;
    int rank;                       /* the thread's world rank */
    int index, size;                /* its rank and world as a transport */
    const int *members;             /* [size] world ranks (the group's registered list); NULL: the world */
    int group;
    /* touched by the rank's own thread alone: */
    uint64_t seq;                   /* collectives called so far on this transport */
    pp__threads_io *io;             /* [size], made at the first collective */
    float *scratch;                 /* all_reduce: the other ranks' parts of this rank's share */
    size_t scratch_cap;
    struct pp__threads_ep *next;    /* the world's list of group endpoints */
} pp__threads_ep;

struct pp_threads_world {
    int world;
    pthread_mutex_t mu;
    pthread_cond_t *cv;             /* [world] */
    pp__msg **head, **tail;         /* [world] mailbox of each destination rank */
    pp__threads_ep *ranks;          /* [world] each rank's end of the world's transport */
    pp__threads_members *groups;    /* the registered member lists */
    pp__threads_ep *eps;            /* the group endpoints */
    int next_group;
    int aborted, abort_rank;
    pp_status abort_status;
    char abort_reason[PP_ERROR_MESSAGE_SIZE];
    int cv_ready, mu_ready;
};

/* A posted group: its receives, matched when waited or tested. A matched message is taken out
 * of the mailbox under the lock and copied into the receive buffer after unlocking, so a large
 * copy never holds up the other ranks. */
typedef struct pp__threads_group {
    int nrecv, matched;
    pp_transfer *recv;              /* [nrecv] */
    unsigned char *done;            /* [nrecv] */
    pp__msg **msg;                  /* [nrecv] matched, not yet copied */
} pp__threads_group;

static void pp__deadline(double timeout_s, struct timespec *ts)
{
    double t;
    clock_gettime(CLOCK_MONOTONIC, ts);
    t = (double)ts->tv_sec + 1e-9 * (double)ts->tv_nsec + (timeout_s > 0 ? timeout_s : 0);
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
    if (ts->tv_nsec >= 1000000000L) { ts->tv_sec++; ts->tv_nsec -= 1000000000L; }
    if (ts->tv_nsec < 0) ts->tv_nsec = 0;
}

/* World rank of the transport's rank `index`. */
static int pp__ep_world(const pp__threads_ep *ep, int index) { return ep->members ? ep->members[index] : index; }

/* "rank 2" on the world's transport, "rank 1 (world rank 5)" on a group's. */
static const char *pp__ep_name(const pp__threads_ep *ep, int index, char *buf, size_t size)
{
    if (ep->members) snprintf(buf, size, "rank %d (world rank %d)", index, ep->members[index]);
    else snprintf(buf, size, "rank %d", index);
    return buf;
}

static pp_status pp__threads_aborted(const pp__threads_ep *ep, pp_error *err)
{
    char me[48];
    return pp__fail(err, PP_EABORTED, "%s: stopped because %s %d failed (%s): %s",
                    pp__ep_name(ep, ep->index, me, sizeof me), ep->members ? "world rank" : "rank", ep->w->abort_rank, pp_status_name(ep->w->abort_status),
                    ep->w->abort_reason);
}

/* Abort with the world's mutex held; `rank` is a world rank. */
static void pp__threads_abort_locked(pp_threads_world *w, int rank, pp_status status, const char *reason)
{
    int r;
    if (w->aborted) return;
    w->aborted = 1;
    w->abort_rank = rank;
    w->abort_status = status;
    snprintf(w->abort_reason, sizeof w->abort_reason, "%s", reason ? reason : "");
    for (r = 0; r < w->world; r++) pthread_cond_broadcast(&w->cv[r]);
}

static void pp__threads_abort(void *user, pp_status status, const char *reason)
{
    pp__threads_ep *ep = (pp__threads_ep *)user;
    pthread_mutex_lock(&ep->w->mu);
    pp__threads_abort_locked(ep->w, ep->rank, status, reason);
    pthread_mutex_unlock(&ep->w->mu);
}

/* Appends m to world rank `to`'s mailbox and wakes it (mutex held). */
static void pp__threads_deliver(pp_threads_world *w, int to, pp__msg *m)
{
    m->next = NULL;
    if (w->tail[to]) w->tail[to]->next = m; else w->head[to] = m;
    w->tail[to] = m;
    pthread_cond_broadcast(&w->cv[to]);
}

/* Takes m (preceded by prev, or the head) out of world rank `rank`'s mailbox (mutex held). */
static void pp__threads_unlink(pp_threads_world *w, int rank, pp__msg *prev, pp__msg *m)
{
    if (prev) prev->next = m->next; else w->head[rank] = m->next;
    if (w->tail[rank] == m) w->tail[rank] = prev;
    m->next = NULL;
}

/* A message of `bytes` from ep, copied from buf; NULL when out of memory. */
static pp__msg *pp__threads_msg(const pp__threads_ep *ep, int coll, uint64_t tag, size_t total, const void *buf,
                                size_t bytes)
{
    pp__msg *m;
    if (bytes > SIZE_MAX - sizeof(pp__msg)) return NULL;
    m = (pp__msg *)PIPEPAR_MALLOC(sizeof(pp__msg) + bytes);
    if (!m) return NULL;
    m->next = NULL;
    m->src = ep->rank;
    m->group = ep->group;
    m->coll = coll;
    m->tag = tag;
    m->total = total;
    m->bytes = bytes;
    if (bytes) memcpy(m + 1, buf, bytes);
    return m;
}

/* Copies the matched messages into their receive buffers (without the lock) and frees them. */
static void pp__threads_copy_out(pp__threads_group *g)
{
    int i;
    for (i = 0; i < g->nrecv; i++) {
        pp__msg *m = g->msg[i];
        if (!m) continue;
        if (m->bytes) memcpy(g->recv[i].buf, m + 1, m->bytes);
        PIPEPAR_FREE(m);
        g->msg[i] = NULL;
    }
}

static void pp__threads_group_free(pp__threads_group *g)
{
    int i;
    if (!g) return;
    if (g->msg) for (i = 0; i < g->nrecv; i++) PIPEPAR_FREE(g->msg[i]);
    PIPEPAR_FREE(g->recv); PIPEPAR_FREE(g->done); PIPEPAR_FREE(g->msg); PIPEPAR_FREE(g);
}

static pp_status pp__threads_post(void *user, const pp_transfer *xf, int count, void **handle, pp_error *err)
{
    pp__threads_ep *ep = (pp__threads_ep *)user;
    pp_threads_world *w = ep->w;
    pp__msg **msgs = NULL;
    pp__threads_group *g = NULL;
    int i, nsend = 0, nrecv = 0, k;
    char tagtxt[64], me[48];
    if (!handle || (count > 0 && !xf)) return pp__fail(err, PP_EINVAL, "post: transfers and handle must not be NULL");
    *handle = NULL;
    for (i = 0; i < count; i++) {
        if (xf[i].peer < 0 || xf[i].peer >= ep->size) {
            pp_transfer_tag_format(xf[i].tag, tagtxt, sizeof tagtxt);
            return pp__fail(err, PP_EINVAL, "%s: transfer %s: peer=%d, must be between 0 and %d",
                            pp__ep_name(ep, ep->index, me, sizeof me), tagtxt, xf[i].peer, ep->size - 1);
        }
        if (xf[i].bytes > 0 && !xf[i].buf)
            return pp__fail(err, PP_EINVAL, "%s: transfer %d: buf is NULL for %zu bytes",
                            pp__ep_name(ep, ep->index, me, sizeof me), i, xf[i].bytes);
        if (xf[i].is_send) nsend++; else nrecv++;
    }
    /* copy the sends and set up the receives outside the lock */
    g = (pp__threads_group *)pp__calloc(1, sizeof *g);
    msgs = (pp__msg **)pp__calloc((size_t)(nsend > 0 ? nsend : 1), sizeof(pp__msg *));
    if (g) {
        g->recv = (pp_transfer *)pp__calloc((size_t)(nrecv > 0 ? nrecv : 1), sizeof(pp_transfer));
        g->done = (unsigned char *)pp__calloc((size_t)(nrecv > 0 ? nrecv : 1), 1);
        g->msg = (pp__msg **)pp__calloc((size_t)(nrecv > 0 ? nrecv : 1), sizeof(pp__msg *));
    }
    if (!g || !msgs || !g->recv || !g->done || !g->msg) goto oom;
    for (i = 0, k = 0; i < count; i++) {
        if (!xf[i].is_send) { g->recv[g->nrecv++] = xf[i]; continue; }
        msgs[k] = pp__threads_msg(ep, 0, xf[i].tag, 0, xf[i].buf, xf[i].bytes);
        if (!msgs[k]) goto oom;
        k++;
    }
    pthread_mutex_lock(&w->mu);
    if (w->aborted) {
        pp_status st = pp__threads_aborted(ep, err);
        pthread_mutex_unlock(&w->mu);
        for (k = 0; k < nsend; k++) PIPEPAR_FREE(msgs[k]);
        PIPEPAR_FREE(msgs);
        pp__threads_group_free(g);
        return st;
    }
    for (i = 0, k = 0; i < count; i++)
        if (xf[i].is_send) pp__threads_deliver(w, pp__ep_world(ep, xf[i].peer), msgs[k++]);
    pthread_mutex_unlock(&w->mu);
    PIPEPAR_FREE(msgs);
    *handle = g;
    return pp__ok(err);
oom:
    if (msgs) for (k = 0; k < nsend; k++) PIPEPAR_FREE(msgs[k]);
    PIPEPAR_FREE(msgs);
    pp__threads_group_free(g);
    return pp__fail(err, PP_ENOMEM, "%s: out of memory posting %d transfers", pp__ep_name(ep, ep->index, me, sizeof me),
                    count);
}

/* Whether m is a transfer from ep's rank `peer` with this tag. */
static int pp__threads_is_transfer(const pp__threads_ep *ep, const pp__msg *m, int peer, uint64_t tag)
{
    return m->src == pp__ep_world(ep, peer) && m->group == ep->group && !m->coll && m->tag == tag;
}

/* Matches what can be matched of g's receives (mutex held): takes the messages out of the
 * mailbox into g->msg. PP_OK, or PP_ETRANSPORT when a message with the right tag has the wrong
 * size. */
static pp_status pp__threads_match(pp__threads_ep *ep, pp__threads_group *g, pp_error *err)
{
    pp_threads_world *w = ep->w;
    int i;
    for (i = 0; i < g->nrecv; i++) {
        pp__msg *m, *prev = NULL;
        if (g->done[i]) continue;
        for (m = w->head[ep->rank]; m; prev = m, m = m->next)
            if (pp__threads_is_transfer(ep, m, g->recv[i].peer, g->recv[i].tag)) break;
        if (!m) continue;
        pp__threads_unlink(w, ep->rank, prev, m);
        if (m->bytes != g->recv[i].bytes) {
            char tagtxt[64], me[48], peer[48];
            pp_status st;
            pp_transfer_tag_format(m->tag, tagtxt, sizeof tagtxt);
            st = pp__fail(err, PP_ETRANSPORT,
                          "%s: the tensor %s from %s has %zu bytes, but this rank expects %zu "
                          "(tensor_bytes differs between the ranks)", pp__ep_name(ep, ep->index, me, sizeof me), tagtxt,
                          pp__ep_name(ep, g->recv[i].peer, peer, sizeof peer), m->bytes, g->recv[i].bytes);
            PIPEPAR_FREE(m);
            return st;
        }
        g->msg[i] = m;
        g->done[i] = 1;
        g->matched++;
    }
    return PP_OK;
}

/* The timeout of a wait for g (mutex held): names the first receive still missing, and the
 * oldest transfer queued from that peer. */
static pp_status pp__threads_wait_timeout(pp__threads_ep *ep, pp__threads_group *g, double timeout_s, pp_error *err)
{
    char want[64], queued[64], me[48], peer[48];
    pp__msg *m;
    int i, src;
    for (i = 0; i < g->nrecv && g->done[i]; i++) {}
    src = pp__ep_world(ep, g->recv[i].peer);
    pp_transfer_tag_format(g->recv[i].tag, want, sizeof want);
    for (m = ep->w->head[ep->rank]; m && !(m->src == src && m->group == ep->group && !m->coll); m = m->next) {}
    if (m) pp_transfer_tag_format(m->tag, queued, sizeof queued);
    return pp__fail(err, PP_ETIMEOUT, "%s: timed out after %.3g s waiting for %s to send %s%s%s%s",
                    pp__ep_name(ep, ep->index, me, sizeof me), timeout_s,
                    pp__ep_name(ep, g->recv[i].peer, peer, sizeof peer), want, m ? "; the oldest message queued from that rank is " : "", m ? queued : "",
                    m ? " (do the ranks run the same schedule?)" : "");
}

static pp_status pp__threads_wait(void *user, void *handle, double timeout_s, pp_error *err)
{
    pp__threads_ep *ep = (pp__threads_ep *)user;
    pp_threads_world *w = ep->w;
    pp__threads_group *g = (pp__threads_group *)handle;
    struct timespec deadline;
    pp_status st = PP_OK;
    char me[48];
    if (!g) return pp__fail(err, PP_EINVAL, "%s: wait: handle is NULL", pp__ep_name(ep, ep->index, me, sizeof me));
    pp__deadline(timeout_s, &deadline);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int rc;
        if (w->aborted) { st = pp__threads_aborted(ep, err); break; }
        st = pp__threads_match(ep, g, err);
        if (st != PP_OK) { pp__threads_abort_locked(w, ep->rank, st, err ? err->message : "size mismatch"); break; }
        if (g->matched == g->nrecv) break;
        rc = pthread_cond_timedwait(&w->cv[ep->rank], &w->mu, &deadline);
        if (rc == ETIMEDOUT) {
            st = pp__threads_match(ep, g, err);
            if (st != PP_OK) { pp__threads_abort_locked(w, ep->rank, st, err ? err->message : "size mismatch"); break; }
            if (g->matched == g->nrecv) break;
            if (w->aborted) { st = pp__threads_aborted(ep, err); break; }
            st = pp__threads_wait_timeout(ep, g, timeout_s, err);
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (st == PP_OK) pp__threads_copy_out(g);
    pp__threads_group_free(g);
    return st == PP_OK ? pp__ok(err) : st;
}

static pp_status pp__threads_test(void *user, void *handle, int *done, pp_error *err)
{
    pp__threads_ep *ep = (pp__threads_ep *)user;
    pp_threads_world *w = ep->w;
    pp__threads_group *g = (pp__threads_group *)handle;
    pp_status st;
    char me[48];
    if (!g || !done)
        return pp__fail(err, PP_EINVAL, "%s: test: handle and done must not be NULL",
                        pp__ep_name(ep, ep->index, me, sizeof me));
    *done = 0;
    pthread_mutex_lock(&w->mu);
    if (w->aborted) st = pp__threads_aborted(ep, err);
    else {
        st = pp__threads_match(ep, g, err);
        if (st != PP_OK) pp__threads_abort_locked(w, ep->rank, st, err ? err->message : "size mismatch");
    }
    pthread_mutex_unlock(&w->mu);
    if (st != PP_OK) { pp__threads_group_free(g); *done = 1; return st; }
    pp__threads_copy_out(g);   /* what matched so far; the rest arrives later */
    if (g->matched == g->nrecv) { pp__threads_group_free(g); *done = 1; }
    return pp__ok(err);
}

/* --- group collectives ---
 * Built from messages of their own kind (pp__msg.coll), so no transfer can match them, tagged
 * with the collective's kind, its phase and its number on the transport (ep->seq: every rank of a
 * transport calls its collectives in the same order, so the numbers agree) and carrying the
 * group's id, so no other transport's can either. An exchange sends each peer its part and
 * receives each peer's; a collective called differently on two ranks (another kind or size) is
 * named as soon as its message arrives. A collective that fails aborts the world, so the ranks
 * waiting in it stop too.
 *   barrier     one exchange of empty messages;
 *   all_gather  one exchange: every rank's bytes to every other rank;
 *   all_reduce  a reduce-scatter, then an all-gather: rank i owns share i of the floats, sums
 *               every rank's part of it in member order (rank 0's + rank 1's + ...) and sends the
 *               sum to all, so every element is added up once, in one order, and every rank gets
 *               the same bits. */
enum { PP__COLL_ALL_REDUCE = 1, PP__COLL_ALL_GATHER = 2, PP__COLL_BARRIER = 3 };
#define PP__COLL_SEQ_MASK 0xffffffffffffull   /* 48 bits of the collective's number */

static const char *pp__coll_name(int kind)
{
    return kind == PP__COLL_ALL_REDUCE ? "all_reduce" : kind == PP__COLL_ALL_GATHER ? "all_gather" : "barrier";
}

/* Sets up ep for a collective: its per-peer table, made once. */
static pp_status pp__coll_begin(pp__threads_ep *ep, pp_error *err)
{
    char me[48];
    int j;
    if (!ep->io) ep->io = (pp__threads_io *)pp__calloc((size_t)ep->size, sizeof(pp__threads_io));
    if (!ep->io) {
        pp_status st = pp__fail(err, PP_ENOMEM, "%s: out of memory starting a collective",
                                pp__ep_name(ep, ep->index, me, sizeof me));
        pp__threads_abort(ep, st, "out of memory starting a collective");
        return st;
    }
    for (j = 0; j < ep->size; j++) memset(&ep->io[j], 0, sizeof ep->io[j]);
    return PP_OK;
}

/* Checks a collective message m from rank j against this rank's call (mutex held): PP_OK when
 * it is this phase's part, PP_EAGAIN-like 1 for a later phase of the same call, else the
 * mismatch. */
static int pp__coll_check(pp__threads_ep *ep, const pp__msg *m, int j, int kind, int phase, size_t total,
                          pp_status *st, pp_error *err)
{
    int mkind = (int)(m->tag >> 56), mphase = (int)((m->tag >> 48) & 0xff);
    char me[48], peer[48];
    if (mkind != kind) {
        *st = pp__fail(err, PP_EINVAL, "%s: collective #%llu of this transport is %s here but %s on %s (every rank "
                       "calls a transport's collectives in the same order)", pp__ep_name(ep, ep->index, me, sizeof me),
                       (unsigned long long)ep->seq, pp__coll_name(kind), pp__coll_name(mkind),
                       pp__ep_name(ep, j, peer, sizeof peer));
        return -1;
    }
    if (mphase != phase) return 1;
    if (m->total != total) {
        *st = pp__fail(err, PP_EINVAL, "%s: %s #%llu of %zu %s, but %s %s %zu (the ranks are not running the same "
                       "program)", pp__ep_name(ep, ep->index, me, sizeof me), pp__coll_name(kind),
                       (unsigned long long)ep->seq, total, kind == PP__COLL_ALL_REDUCE ? "floats" : "bytes",
                       pp__ep_name(ep, j, peer, sizeof peer), kind == PP__COLL_ALL_REDUCE ? "reduces" : "gathers",
                       m->total);
        return -1;
    }
    return 0;
}

/* Takes what has arrived of the exchange's parts out of the mailbox (mutex held); *left counts
 * those still missing. */
static pp_status pp__coll_match(pp__threads_ep *ep, int kind, int phase, size_t total, int *left, pp_error *err)
{
    pp_threads_world *w = ep->w;
    pp_status st = PP_OK;
    int j;
    for (j = 0; j < ep->size; j++) {
        pp__msg *m, *prev = NULL;
        int src = pp__ep_world(ep, j), c = 1;
        if (j == ep->index || ep->io[j].got) continue;
        for (m = w->head[ep->rank]; m; prev = m, m = m->next) {
            if (m->src != src || m->group != ep->group || !m->coll ||
                (m->tag & PP__COLL_SEQ_MASK) != (ep->seq & PP__COLL_SEQ_MASK))
                continue;
            c = pp__coll_check(ep, m, j, kind, phase, total, &st, err);
            if (c <= 0) break;
        }
        if (c < 0) return st;
        if (!m) continue;
        pp__threads_unlink(w, ep->rank, prev, m);
        ep->io[j].got = m;
        (*left)--;
    }
    return PP_OK;
}

/* One exchange: ep->io[j].send goes to rank j and rank j's part lands in ep->io[j].recv, for every
 * rank j but this one; every rank makes the matching exchange. */
static pp_status pp__coll_exchange(pp__threads_ep *ep, int kind, int phase, size_t total, double timeout_s,
                                   pp_error *err)
{
    pp_threads_world *w = ep->w;
    uint64_t tag = ((uint64_t)kind << 56) | ((uint64_t)phase << 48) | (ep->seq & PP__COLL_SEQ_MASK);
    struct timespec deadline;
    pp_status st = PP_OK;
    int j, left = ep->size - 1, failed = 0;
    char me[48], peer[48];
    for (j = 0; j < ep->size; j++) {
        pp__threads_io *io = &ep->io[j];
        if (j == ep->index) continue;
        io->out = pp__threads_msg(ep, 1, tag, total, io->send, io->send_bytes);
        if (!io->out) {
            st = pp__fail(err, PP_ENOMEM, "%s: out of memory in %s", pp__ep_name(ep, ep->index, me, sizeof me),
                          pp__coll_name(kind));
            failed = 1;
            break;
        }
    }
    pp__deadline(timeout_s, &deadline);
    pthread_mutex_lock(&w->mu);
    if (!failed && w->aborted) st = pp__threads_aborted(ep, err);
    else if (!failed) {
        for (j = 0; j < ep->size; j++)
            if (j != ep->index) { pp__threads_deliver(w, pp__ep_world(ep, j), ep->io[j].out); ep->io[j].out = NULL; }
        for (;;) {   /* what has arrived first: a collective that is complete needs no one else */
            int rc;
            st = pp__coll_match(ep, kind, phase, total, &left, err);
            if (st != PP_OK || left == 0) { failed = st != PP_OK; break; }
            if (w->aborted) { st = pp__threads_aborted(ep, err); break; }
            rc = pthread_cond_timedwait(&w->cv[ep->rank], &w->mu, &deadline);
            if (rc == ETIMEDOUT && !w->aborted) {
                st = pp__coll_match(ep, kind, phase, total, &left, err);
                if (st != PP_OK || left == 0) { failed = st != PP_OK; break; }
                for (j = 0; j < ep->size && (j == ep->index || ep->io[j].got); j++) {}
                st = pp__fail(err, PP_ETIMEOUT, "%s: timed out after %.3g s in %s #%llu of this transport, waiting "
                              "for %s", pp__ep_name(ep, ep->index, me, sizeof me), timeout_s, pp__coll_name(kind),
                              (unsigned long long)ep->seq, pp__ep_name(ep, j, peer, sizeof peer));
                failed = 1;
                break;
            }
        }
    }
    if (failed) pp__threads_abort_locked(w, ep->rank, st, err ? err->message : pp_status_description(st));
    pthread_mutex_unlock(&w->mu);
    for (j = 0; j < ep->size; j++) {
        pp__threads_io *io = &ep->io[j];
        if (io->got && st == PP_OK && io->got->bytes) memcpy(io->recv, io->got + 1, io->got->bytes);
        PIPEPAR_FREE(io->got);
        PIPEPAR_FREE(io->out);
        io->got = io->out = NULL;
    }
    return st;
}

/* Share j of n floats split as evenly as can be: [pp__share(count, n, j), pp__share(count, n, j + 1)). */
static size_t pp__share(size_t count, int n, int j)
{
    size_t q = count / (size_t)n, r = count % (size_t)n;
    return q * (size_t)j + ((size_t)j < r ? (size_t)j : r);
}

static pp_status pp__threads_reduce(pp__threads_ep *ep, float *buf, size_t count, double timeout_s, pp_error *err)
{
    size_t lo = pp__share(count, ep->size, ep->index), mine = pp__share(count, ep->size, ep->index + 1) - lo, e;
    pp_status st = pp__coll_begin(ep, err);
    char me[48];
    int j;
    if (st != PP_OK) return st;
    if (mine > 0 && (size_t)ep->size > SIZE_MAX / sizeof(float) / mine) {
        st = pp__fail(err, PP_EINVAL, "%s: all_reduce of %zu floats: too large",
                      pp__ep_name(ep, ep->index, me, sizeof me), count);
        pp__threads_abort(ep, st, err ? err->message : "all_reduce too large");
        return st;
    }
    if ((size_t)ep->size * mine > ep->scratch_cap) {
        float *s = (float *)PIPEPAR_REALLOC(ep->scratch, (size_t)ep->size * mine * sizeof(float));
        if (!s) {
            st = pp__fail(err, PP_ENOMEM, "%s: out of memory in all_reduce", pp__ep_name(ep, ep->index, me, sizeof me));
            pp__threads_abort(ep, st, "out of memory in all_reduce");
            return st;
        }
        ep->scratch = s;
        ep->scratch_cap = (size_t)ep->size * mine;
    }
    /* reduce-scatter: share j of this rank's floats to rank j; every rank's part of share i here */
    for (j = 0; j < ep->size; j++) {
        size_t jlo = pp__share(count, ep->size, j), jn = pp__share(count, ep->size, j + 1) - jlo;
        ep->io[j].send = buf + jlo;
        ep->io[j].send_bytes = jn * sizeof(float);
        ep->io[j].recv = ep->scratch + (size_t)j * mine;
        ep->io[j].recv_bytes = mine * sizeof(float);
    }
    st = pp__coll_exchange(ep, PP__COLL_ALL_REDUCE, 1, count, timeout_s, err);
    if (st != PP_OK) { ep->seq++; return st; }
    for (e = 0; e < mine; e++) {   /* in member order: rank 0's part + rank 1's + ... */
        float acc = ep->index == 0 ? buf[lo + e] : ep->scratch[e];
        for (j = 1; j < ep->size; j++) acc += j == ep->index ? buf[lo + e] : ep->scratch[(size_t)j * mine + e];
        buf[lo + e] = acc;
    }
    /* all-gather of the sums: this rank's share to every rank, share j from rank j */
    for (j = 0; j < ep->size; j++) {
        size_t jlo = pp__share(count, ep->size, j), jn = pp__share(count, ep->size, j + 1) - jlo;
        ep->io[j].send = buf + lo;
        ep->io[j].send_bytes = mine * sizeof(float);
        ep->io[j].recv = buf + jlo;
        ep->io[j].recv_bytes = jn * sizeof(float);
    }
    st = pp__coll_exchange(ep, PP__COLL_ALL_REDUCE, 2, count, timeout_s, err);
    ep->seq++;
    return st == PP_OK ? pp__ok(err) : st;
}

static pp_status pp__threads_all_reduce(void *user, float *values, int count, double timeout_s, pp_error *err)
{
    pp__threads_ep *ep = (pp__threads_ep *)user;
    char me[48];
    if (count < 0 || (count > 0 && !values))
        return pp__fail(err, PP_EINVAL, "%s: all_reduce: count=%d with values=%p",
                        pp__ep_name(ep, ep->index, me, sizeof me), count, (void *)values);
    return pp__threads_reduce(ep, values, (size_t)count, timeout_s, err);
}

static pp_status pp__threads_all_reduce_buf(void *user, float *buf, size_t count, double timeout_s, pp_error *err)
{
    pp__threads_ep *ep = (pp__threads_ep *)user;
    char me[48];
    if (count > 0 && !buf)
        return pp__fail(err, PP_EINVAL, "%s: all_reduce_buf: buf is NULL for %zu floats",
                        pp__ep_name(ep, ep->index, me, sizeof me), count);
    return pp__threads_reduce(ep, buf, count, timeout_s, err);
}

static pp_status pp__threads_all_gather(void *user, const void *send, void *recv, size_t bytes, double timeout_s,
                                        pp_error *err)
{
    pp__threads_ep *ep = (pp__threads_ep *)user;
    pp_status st;
    char me[48];
    int j;
    if (bytes > 0 && (!send || !recv))
        return pp__fail(err, PP_EINVAL, "%s: all_gather: send and recv must not be NULL for %zu bytes",
                        pp__ep_name(ep, ep->index, me, sizeof me), bytes);
    if (bytes > 0 && (size_t)ep->size > SIZE_MAX / bytes)
        return pp__fail(err, PP_EINVAL, "%s: all_gather of %zu bytes from %d ranks: too large",
                        pp__ep_name(ep, ep->index, me, sizeof me), bytes, ep->size);
    st = pp__coll_begin(ep, err);
    if (st != PP_OK) return st;
    for (j = 0; j < ep->size; j++) {
        ep->io[j].send = send;
        ep->io[j].send_bytes = bytes;
        ep->io[j].recv = (char *)recv + (size_t)j * bytes;
        ep->io[j].recv_bytes = bytes;
    }
    st = pp__coll_exchange(ep, PP__COLL_ALL_GATHER, 0, bytes, timeout_s, err);   /* sends copied first */
    ep->seq++;
    if (st == PP_OK && bytes) memmove((char *)recv + (size_t)ep->index * bytes, send, bytes);
    return st == PP_OK ? pp__ok(err) : st;
}

static pp_status pp__threads_barrier(void *user, double timeout_s, pp_error *err)
{
    pp__threads_ep *ep = (pp__threads_ep *)user;
    pp_status st = pp__coll_begin(ep, err);
    if (st != PP_OK) return st;
    st = pp__coll_exchange(ep, PP__COLL_BARRIER, 0, 0, timeout_s, err);
    ep->seq++;
    return st == PP_OK ? pp__ok(err) : st;
}

static void pp__threads_ep_free_parts(pp__threads_ep *ep)
{
    PIPEPAR_FREE(ep->io);
    PIPEPAR_FREE(ep->scratch);
}

void pp_threads_world_free(pp_threads_world *w)
{
    int r;
    if (!w) return;
    if (w->head)
        for (r = 0; r < w->world; r++) {
            pp__msg *m = w->head[r];
            while (m) { pp__msg *n = m->next; PIPEPAR_FREE(m); m = n; }
        }
    if (w->ranks) for (r = 0; r < w->world; r++) pp__threads_ep_free_parts(&w->ranks[r]);
    while (w->eps) {
        pp__threads_ep *n = w->eps->next;
        pp__threads_ep_free_parts(w->eps);
        PIPEPAR_FREE(w->eps);
        w->eps = n;
    }
    while (w->groups) {
        pp__threads_members *n = w->groups->next;
        PIPEPAR_FREE(w->groups->ranks);
        PIPEPAR_FREE(w->groups);
        w->groups = n;
    }
    if (w->cv) for (r = 0; r < w->cv_ready; r++) pthread_cond_destroy(&w->cv[r]);
    if (w->mu_ready) pthread_mutex_destroy(&w->mu);
    PIPEPAR_FREE(w->cv); PIPEPAR_FREE(w->head); PIPEPAR_FREE(w->tail); PIPEPAR_FREE(w->ranks);
    PIPEPAR_FREE(w);
}

pp_status pp_threads_world_create(int world, pp_threads_world **out, pp_error *err)
{
    pp_threads_world *w;
    pthread_condattr_t attr;
    int r, ok = 1;
    if (!out) return pp__fail(err, PP_EINVAL, "out: must not be NULL");
    *out = NULL;
    if (world < 1 || world > 4096) return pp__fail(err, PP_EINVAL, "world=%d: must be between 1 and 4096", world);
    w = (pp_threads_world *)pp__calloc(1, sizeof *w);
    if (!w) return pp__fail(err, PP_ENOMEM, "out of memory");
    w->world = world;
    w->cv = (pthread_cond_t *)pp__calloc((size_t)world, sizeof(pthread_cond_t));
    w->head = (pp__msg **)pp__calloc((size_t)world, sizeof(pp__msg *));
    w->tail = (pp__msg **)pp__calloc((size_t)world, sizeof(pp__msg *));
    w->ranks = (pp__threads_ep *)pp__calloc((size_t)world, sizeof(pp__threads_ep));
    if (!w->cv || !w->head || !w->tail || !w->ranks) { pp_threads_world_free(w); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    if (pthread_mutex_init(&w->mu, NULL) != 0) { pp_threads_world_free(w); return pp__fail(err, PP_ENOMEM, "pthread_mutex_init failed"); }
    w->mu_ready = 1;
    if (pthread_condattr_init(&attr) != 0) { pp_threads_world_free(w); return pp__fail(err, PP_ENOMEM, "pthread_condattr_init failed"); }
#if defined(CLOCK_MONOTONIC) && !defined(__APPLE__)
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
#endif
    for (r = 0; r < world && ok; r++) {
        if (pthread_cond_init(&w->cv[r], &attr) != 0) ok = 0; else w->cv_ready++;
        w->ranks[r].w = w;
        w->ranks[r].rank = w->ranks[r].index = r;
        w->ranks[r].size = world;
    }
    pthread_condattr_destroy(&attr);
    if (!ok) { pp_threads_world_free(w); return pp__fail(err, PP_ENOMEM, "pthread_cond_init failed"); }
    *out = w;
    return pp__ok(err);
}

static void pp__threads_fill(pp__threads_ep *ep, pp_transport *out)
{
    memset(out, 0, sizeof *out);
    out->user = ep;
    out->rank = ep->index;
    out->world = ep->size;
    out->post = pp__threads_post;
    out->wait = pp__threads_wait;
    out->test = pp__threads_test;
    out->all_reduce = pp__threads_all_reduce;
    out->abort = pp__threads_abort;
    out->all_reduce_buf = pp__threads_all_reduce_buf;
    out->all_gather = pp__threads_all_gather;
    out->barrier = pp__threads_barrier;
    out->independent_peers = 1;   /* sends are buffered and receives matched by tag, each on its own */
}

pp_threads_world *pp_threads_transport_world(const pp_transport *t)
{
    return t && t->user && t->post == pp__threads_post ? ((const pp__threads_ep *)t->user)->w : NULL;
}

pp_status pp_threads_transport(pp_threads_world *w, int rank, pp_transport *out, pp_error *err)
{
    if (!w || !out) return pp__fail(err, PP_EINVAL, "world and out: must not be NULL");
    if (rank < 0 || rank >= w->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1=%d", rank, w->world - 1);
    pp__threads_fill(&w->ranks[rank], out);
    return pp__ok(err);
}

/* Checks a group's members: distinct world ranks, rank among them; *at gets its place. */
static pp_status pp__threads_check_members(const pp_threads_world *w, const int *members, int size, int rank,
                                           int *at, pp_error *err)
{
    unsigned char *seen;
    int i;
    if (!members) return pp__fail(err, PP_EINVAL, "members: must not be NULL");
    if (size < 1 || size > w->world)
        return pp__fail(err, PP_EINVAL, "size=%d: must be between 1 and the world's %d ranks", size, w->world);
    seen = (unsigned char *)pp__calloc((size_t)w->world, 1);
    if (!seen) return pp__fail(err, PP_ENOMEM, "out of memory");
    *at = -1;
    for (i = 0; i < size; i++) {
        int m = members[i];
        if (m < 0 || m >= w->world || seen[m]) {
            PIPEPAR_FREE(seen);
            return m < 0 || m >= w->world
                ? pp__fail(err, PP_EINVAL, "members[%d]=%d: must be a world rank, 0 .. %d", i, m, w->world - 1)
                : pp__fail(err, PP_EINVAL, "members[%d]=%d: appears twice (members are distinct ranks)", i, m);
        }
        seen[m] = 1;
        if (m == rank) *at = i;
    }
    PIPEPAR_FREE(seen);
    if (*at < 0) return pp__fail(err, PP_EINVAL, "rank=%d: not one of the group's %d members", rank, size);
    return PP_OK;
}

/* The registered list equal to members (mutex held), registered now if new; NULL when out of memory. */
static pp__threads_members *pp__threads_register(pp_threads_world *w, const int *members, int size)
{
    pp__threads_members *g;
    for (g = w->groups; g; g = g->next)
        if (g->size == size && memcmp(g->ranks, members, (size_t)size * sizeof(int)) == 0) return g;
    g = (pp__threads_members *)pp__calloc(1, sizeof *g);
    if (g) g->ranks = (int *)PIPEPAR_MALLOC((size_t)size * sizeof(int));
    if (!g || !g->ranks) { if (g) PIPEPAR_FREE(g); return NULL; }
    memcpy(g->ranks, members, (size_t)size * sizeof(int));
    g->size = size;
    g->id = ++w->next_group;
    g->next = w->groups;
    w->groups = g;
    return g;
}

pp_status pp_threads_transport_group(pp_threads_world *w, const int *members, int size, int rank, pp_transport *out,
                                     pp_error *err)
{
    pp__threads_members *g;
    pp__threads_ep *ep = NULL;
    pp_status st;
    int at = -1;
    if (!w || !out) return pp__fail(err, PP_EINVAL, "world and out: must not be NULL");
    if (rank < 0 || rank >= w->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1=%d", rank, w->world - 1);
    st = pp__threads_check_members(w, members, size, rank, &at, err);
    if (st != PP_OK) return st;
    pthread_mutex_lock(&w->mu);
    g = pp__threads_register(w, members, size);
    if (g)
        for (ep = w->eps; ep; ep = ep->next)
            if (ep->group == g->id && ep->rank == rank) break;
    if (g && !ep) {
        ep = (pp__threads_ep *)pp__calloc(1, sizeof *ep);
        if (ep) {
            ep->w = w;
            ep->rank = rank;
            ep->index = at;
            ep->size = size;
            ep->members = g->ranks;
            ep->group = g->id;
            ep->next = w->eps;
            w->eps = ep;
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (!ep) return pp__fail(err, PP_ENOMEM, "out of memory");
    pp__threads_fill(ep, out);
    return pp__ok(err);
}

pp_status pp_threads_transport_grid(pp_threads_world *w, const pp_grid *grid, unsigned dims, int rank,
                                    pp_transport *out, pp_error *err)
{
    pp_grid_group_info info;
    int *members;
    pp_status st;
    if (!w || !grid || !out) return pp__fail(err, PP_EINVAL, "world, grid and out: must not be NULL");
    if (grid->world != w->world)
        return pp__fail(err, PP_EINVAL, "grid.world=%d: must be the threads world's %d ranks", grid->world, w->world);
    st = pp_grid_group(grid, rank, dims, &info, err);
    if (st != PP_OK) return st;
    members = (int *)PIPEPAR_MALLOC((size_t)info.size * sizeof(int));
    if (!members) return pp__fail(err, PP_ENOMEM, "out of memory");
    st = pp_grid_group_members(grid, dims, info.color, members, info.size, err);
    if (st == PP_OK) st = pp_threads_transport_group(w, members, info.size, rank, out, err);
    PIPEPAR_FREE(members);
    return st;
}

typedef struct pp__thread_arg {
    pp_rank_fn fn;
    void *user;
    int rank;
    pp_transport transport;
    pp_status status;
    pp_error err;
} pp__thread_arg;

static void *pp__thread_main(void *p)
{
    pp__thread_arg *a = (pp__thread_arg *)p;
    a->err.status = PP_OK;
    a->err.message[0] = '\0';
    a->status = a->fn(a->user, a->rank, &a->transport, &a->err);
    if (a->status != PP_OK && a->err.message[0] == '\0')
        snprintf(a->err.message, sizeof a->err.message, "%s", pp_status_description(a->status));
    return NULL;
}

pp_status pp_threads_run(int world, pp_rank_fn fn, void *user, pp_status *status, pp_error *errors, pp_error *err)
{
    pp_threads_world *w = NULL;
    pp__thread_arg *args = NULL;
    pthread_t *tid = NULL;
    pp_status st;
    int r, started = 0, root = -1;
    if (!fn) return pp__fail(err, PP_EINVAL, "fn: must not be NULL");
    st = pp_threads_world_create(world, &w, err);
    if (st != PP_OK) return st;
    args = (pp__thread_arg *)pp__calloc((size_t)world, sizeof *args);
    tid = (pthread_t *)pp__calloc((size_t)world, sizeof *tid);
    if (!args || !tid) {
        PIPEPAR_FREE(args); PIPEPAR_FREE(tid); pp_threads_world_free(w);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    for (r = 0; r < world; r++) {
        args[r].fn = fn; args[r].user = user; args[r].rank = r;
        pp_threads_transport(w, r, &args[r].transport, NULL);
        args[r].status = PP_EABORTED;
        snprintf(args[r].err.message, sizeof args[r].err.message, "rank %d: thread not started", r);
    }
    for (r = 0; r < world; r++) {
        if (pthread_create(&tid[r], NULL, pp__thread_main, &args[r]) != 0) {
            pp__threads_abort(&w->ranks[r], PP_ENOMEM, "could not start a thread");
            break;
        }
        started++;
    }
    for (r = 0; r < started; r++) pthread_join(tid[r], NULL);
    if (started < world) {
        st = pp__fail(err, PP_ENOMEM, "pthread_create failed for rank %d of %d", started, world);
    } else {
        /* the root cause: the rank that aborted the world first, else the first failure */
        if (w->aborted && args[w->abort_rank].status != PP_OK) root = w->abort_rank;
        for (r = 0; r < world && root < 0; r++)
            if (args[r].status != PP_OK && args[r].status != PP_EABORTED) root = r;
        for (r = 0; r < world && root < 0; r++)
            if (args[r].status != PP_OK) root = r;
        if (root >= 0 && pp__after_rank(args[root].err.message, root))
            st = pp__fail(err, args[root].status, "%s", args[root].err.message);
        else if (root >= 0)
            st = pp__fail(err, args[root].status, "rank %d: %s", root, args[root].err.message);
        else
            st = pp__ok(err);
    }
    for (r = 0; r < world; r++) {
        if (status) status[r] = args[r].status;
        if (errors) { errors[r] = args[r].err; errors[r].status = args[r].status; }
    }
    PIPEPAR_FREE(args); PIPEPAR_FREE(tid);
    pp_threads_world_free(w);
    return st;
}
#endif /* PIPEPAR_NO_THREADS */

/* --- >>executor (implementation) -------------------------------------------------------------
 * State of a step, per (chunk c, microbatch m) of this rank, k = c * mb + m; each entry is a
 * slot index or -1:
 *     in[k]     x_s: the stage's input (received, passed in place, or read by input())
 *     gout[k]   dLoss/d(stage output): received, passed in place, or written by loss()
 *     sendf[k]  F's output waiting for its SEND_F;  sendb[k]  B's input-gradient for SEND_B
 *     in_group[k], gout_group[k]   the group whose completion makes in/gout valid, or -1
 * Groups are waited in posting order (FIFO, as they finish on one NCCL stream): waiting for
 * group g waits for every older one too, and then releases the buffers their sends used. Under
 * pp_transport.independent_peers a round's transfers are posted as one group per peer and a
 * wait takes g and its peer's older groups only; the others finish on their own (test), or are
 * waited for when the pool would otherwise grow past its planned size (pp__acquire), or at the
 * end of the step.
 * The same walk runs once per program without callbacks or transport ("planning"), waiting in
 * order, which counts the peak number of live tensors; the pool reserves that many slots.
 *
 * A program (pp__plan) is the fixed schedule, or with a recipe the schedule of one microbatch
 * count, built on the first step of that count and kept. With it, set up once: each (chunk,
 * microbatch)'s saved-state slot (the lowest free at its F, free again after the B or W that
 * ends it: as many slots as the program's live peak), and where each chunk's last backward
 * action is (chunk_done). */

/* One program this rank runs, and what was worked out from it once. */
typedef struct pp__plan {
    pp_schedule *sched;         /* owned; NULL: not built yet */
    int len;                    /* this rank's program length */
    int *slot;                  /* [vpp * mb] saved-state slot of (chunk c, microbatch m) at c * mb + m */
    unsigned char *done;        /* [len] 1 at a chunk's last backward action of the step */
    int saved;                  /* saved-state slots it uses: its live peak (pp_schedule_rank_peaks) */
    int has_split, has_b, maxgroup;
    uint64_t hash;
} pp__plan;

typedef struct pp__slot {
    void *ptr;
    size_t cap;     /* bytes allocated */
    size_t bytes;   /* bytes of the tensor now held */
    int used;
    long long free_since;   /* groups_posted when released: no work issued on it after that post */
    int parts;              /* the compute that wrote it said its parts (pp_executor_output_ready) */
} pp__slot;

/* An output of the compute callback running now, for pp_executor_output_ready: its slot, whether
 * a send takes it to another rank, the calls made for it and the bytes the last one gave. */
typedef struct pp__marking {
    int slot, sent, count;
    size_t bytes;
} pp__marking;

typedef struct pp__group {
    void *handle;
    int first, end;             /* program positions of its actions (those with `peer`) */
    int peer;                   /* the one peer of its transfers (independent_peers), else -1: all */
    int rel_begin, rel_end;     /* range of ex->release: slots its sends read */
    int done;
} pp__group;

struct pp_executor {
    /* the program of the step being run (pp__use_plan copies it from the plan) */
    pp__plan *plan;
    pp_schedule *sched;
    const pp_action *prog;
    int rank, len, S, M, vpp, world;
    int has_b;
    uint64_t hash;
    /* every program: plans[0] the fixed schedule's, or plans[n - 1] the recipe's for n microbatches */
    pp__plan *plans;
    int nplans;
    int use_recipe;
    pp_schedule_config recipe;
    int split_backward, split_overlaps;
    int max_M;                  /* the most microbatches of a step: the per-step arrays' size */
    int saved_slots;            /* pp_executor_saved_slots */
    int saved_live, saved_used; /* saved-state slots live now, and the most at once so far */
    int unsplit;                /* no backward_input/backward_weight: I runs backward, W nothing */
    pp_transport tp;
    pp_callbacks cb;
    pp_allocator al;
    pp_timer timer;
    double timeout;
    int num_metrics, record;
    int steps, failed, planning;
    int in_fb_second_half;      /* an FB without its own callback is running its B half */
    pp__marking marking[2];     /* the outputs of the compute callback running now ... */
    int nmarking, marking_on;   /* ... and whether one runs */
    /* the pool */
    pp__slot *slots;
    int nslots, cap_slots, live, peak_live, planned;
    long long allocations, transfers_posted, groups_posted;
    size_t bytes_held;
    /* per-step state */
    int *in, *gout, *sendf, *sendb, *in_group, *gout_group;   /* [vpp * max_M] */
    int *out_slot;                                             /* [max_M] forward-only outputs */
    void **out_ptr;
    size_t *out_bytes;
    pp__group *groups;
    int ngroups, cap_groups, next_wait;
    int *release;
    int nrelease, cap_release;
    pp_transfer *xfers;
    int cap_xfers;
    /* the step being run */
    const pp_step *step;
    int forward_only;
    double loss_sum, weight_sum, metric_sum[PP_MAX_METRICS];
    /* timeline */
    double *times;                  /* [3 * cap_len] */
    double *t_start, *t_ready, *t_end;
    int cap_len;                    /* the longest program so far: the timeline arrays' size */
    int timeline_valid;
};

/* --- the pool --- */

static void pp__pool_free_memory(pp_executor *ex)
{
    int i;
    for (i = 0; i < ex->nslots; i++) {
        if (ex->slots[i].ptr) {
            if (ex->al.free) ex->al.free(ex->al.user, ex->slots[i].ptr, ex->slots[i].cap);
            else PIPEPAR_FREE(ex->slots[i].ptr);
        }
        ex->slots[i].ptr = NULL;
        ex->slots[i].cap = 0;
        ex->slots[i].used = 0;
    }
    ex->bytes_held = 0;
}

static void *pp__alloc(pp_executor *ex, size_t bytes)
{
    ex->allocations++;
    return ex->al.alloc ? ex->al.alloc(ex->al.user, bytes) : PIPEPAR_MALLOC(bytes);
}

static pp_status pp__wait_one(pp_executor *ex, int h, int pos, pp_error *err);

/* A slot holding `bytes` bytes: the smallest free slot that fits, else a free slot without
 * memory, else the largest free slot regrown, else a new slot (only past the planned peak).
 * Under independent_peers, sends in flight hold buffers that in-order waits would have given
 * back by now (planning counts with in-order waits): with every planned slot in use, the oldest
 * group still sending is waited for first, on the device (the compute stream waits for that
 * peer's transfers, as in-order waits made it do anyway), and the pool keeps the planned size.
 * Returns the slot index, or -1 with *st set. */
static int pp__acquire(pp_executor *ex, size_t bytes, pp_status *st, pp_error *err)
{
    int i, fit = -1, empty = -1, big = -1;
    pp__slot *sl;
    *st = PP_OK;
    while (!ex->planning && ex->tp.independent_peers && ex->nslots >= ex->planned) {
        int g, any_free = 0;
        for (i = 0; i < ex->nslots && !any_free; i++) any_free = !ex->slots[i].used;
        if (any_free) break;
        for (g = ex->next_wait; g < ex->ngroups; g++)
            if (!ex->groups[g].done && ex->groups[g].rel_end > ex->groups[g].rel_begin) break;
        if (g >= ex->ngroups) break;   /* no send in flight holds one: a new slot */
        if ((*st = pp__wait_one(ex, g, ex->groups[g].first, err)) != PP_OK) return -1;
    }
    for (i = 0; i < ex->nslots; i++) {
        sl = &ex->slots[i];
        if (sl->used) continue;
        if (ex->planning) { fit = i; break; }
        /* the smallest that fits; of equal ones the longest free, whose receive may land earliest */
        if (sl->ptr && sl->cap >= bytes &&
            (fit < 0 || sl->cap < ex->slots[fit].cap ||
             (sl->cap == ex->slots[fit].cap && sl->free_since < ex->slots[fit].free_since)))
            fit = i;
        if (!sl->ptr && empty < 0) empty = i;
        if (sl->ptr && (big < 0 || sl->cap > ex->slots[big].cap)) big = i;
    }
    if (fit < 0 && bytes == 0 && (empty >= 0 || big >= 0)) fit = empty >= 0 ? empty : big;
    if (fit < 0) fit = empty >= 0 ? empty : big;
    if (fit < 0) {
        if (ex->nslots == ex->cap_slots) {
            int cap = ex->cap_slots ? 2 * ex->cap_slots : 8;
            pp__slot *ns = (pp__slot *)PIPEPAR_REALLOC(ex->slots, (size_t)cap * sizeof(pp__slot));
            if (!ns) { *st = pp__fail(err, PP_ENOMEM, "rank %d: out of memory (slot table)", ex->rank); return -1; }
            ex->slots = ns;
            ex->cap_slots = cap;
        }
        fit = ex->nslots++;
        memset(&ex->slots[fit], 0, sizeof(pp__slot));
    }
    sl = &ex->slots[fit];
    if (!ex->planning && bytes > sl->cap) {
        void *p;
        if (sl->ptr) {
            if (ex->al.free) ex->al.free(ex->al.user, sl->ptr, sl->cap); else PIPEPAR_FREE(sl->ptr);
            ex->bytes_held -= sl->cap;
            sl->ptr = NULL; sl->cap = 0;
        }
        p = pp__alloc(ex, bytes);
        if (!p) {
            *st = pp__fail(err, PP_ENOMEM, "rank %d: allocator failed for a tensor of %zu bytes", ex->rank, bytes);
            return -1;
        }
        sl->ptr = p; sl->cap = bytes;
        sl->free_since = ex->groups_posted;   /* an allocator may hand back memory just freed */
        ex->bytes_held += bytes;
    }
    sl->used = 1;
    sl->bytes = bytes;
    sl->parts = 0;
    if (++ex->live > ex->peak_live) ex->peak_live = ex->live;
    return fit;
}

static void pp__release(pp_executor *ex, int slot)
{
    if (slot < 0) return;
    PIPEPAR_ASSERT(ex->slots[slot].used);
    ex->slots[slot].used = 0;
    ex->slots[slot].free_since = ex->groups_posted;
    ex->live--;
}

static void *pp__ptr(pp_executor *ex, int slot) { return slot >= 0 ? ex->slots[slot].ptr : NULL; }

/* Around a compute callback: its outputs (slot -1: none) for pp_executor_output_ready; after it,
 * each sent output remembers whether its parts were passed to the transport. */
static void pp__marking_add(pp_executor *ex, int slot, int sent)
{
    ex->marking_on = 1;
    if (slot < 0) return;
    ex->marking[ex->nmarking].slot = slot;
    ex->marking[ex->nmarking].sent = sent;
    ex->marking[ex->nmarking].count = 0;
    ex->marking[ex->nmarking].bytes = 0;
    ex->nmarking++;
}

static void pp__marking_end(pp_executor *ex)
{
    int i;
    for (i = 0; i < ex->nmarking; i++) {
        const pp__marking *mk = &ex->marking[i];
        ex->slots[mk->slot].parts = mk->sent && mk->count > 0 && ex->tp.output_ready ? 1 : 0;
    }
    ex->nmarking = 0;
    ex->marking_on = 0;
}

pp_status pp_executor_output_ready(pp_executor *ex, const void *out, size_t bytes, pp_error *err)
{
    pp__marking *mk = NULL;
    size_t size;
    int i;
    if (!ex) return pp__fail(err, PP_EINVAL, "pp_executor_output_ready: ex must not be NULL");
    if (!ex->marking_on)
        return pp__fail(err, PP_EINVAL, "pp_executor_output_ready: rank %d: called outside a forward, backward, "
                        "backward_input or forward_backward callback of this executor", ex->rank);
    for (i = 0; i < ex->nmarking; i++)
        if (out && pp__ptr(ex, ex->marking[i].slot) == out) mk = &ex->marking[i];
    if (!mk)
        return pp__fail(err, PP_EINVAL, "pp_executor_output_ready: rank %d: out=%p is not an output of the running "
                        "callback (forward's out, a backward's grad_in)", ex->rank, out);
    size = ex->slots[mk->slot].bytes;
    if (bytes == 0 || bytes > size)
        return pp__fail(err, PP_EINVAL, "pp_executor_output_ready: rank %d: bytes=%zu: must be from 1 to the output's "
                        "%zu bytes", ex->rank, bytes, size);
    if (mk->count > 0 && bytes <= mk->bytes)
        return pp__fail(err, PP_EINVAL, "pp_executor_output_ready: rank %d: bytes=%zu: must exceed the previous call's "
                        "%zu for this output (each call gives how many of its first bytes are written)", ex->rank,
                        bytes, mk->bytes);
    if (mk->count == PP_MAX_OUTPUT_PARTS)
        return pp__fail(err, PP_EINVAL, "pp_executor_output_ready: rank %d: more than %d calls for one output "
                        "(PP_MAX_OUTPUT_PARTS)", ex->rank, PP_MAX_OUTPUT_PARTS);
    if (mk->sent && ex->tp.output_ready) {
        pp_status st = ex->tp.output_ready(ex->tp.user, out, bytes, mk->count == 0, err);
        if (st != PP_OK) return st;
    }
    mk->count++;
    mk->bytes = bytes;
    return pp__ok(err);
}

/* --- timeline marks --- */

static void pp__mark(pp_executor *ex, int index)
{
    if (!ex->record || ex->planning) return;
    if (ex->in_fb_second_half && index % 3 == 1) return;   /* see pp__run_fb */
    if (ex->timer.mark) ex->timer.mark(ex->timer.user, index);
    else ex->times[index] = pp__now();
}

/* --- groups --- */


static void pp__group_finished(pp_executor *ex, int g)
{
    pp__group *gr = &ex->groups[g];
    int i;
    gr->done = 1;
    gr->handle = NULL;
    for (i = gr->rel_begin; i < gr->rel_end; i++) pp__release(ex, ex->release[i]);
    if (ex->record && !ex->planning)
        for (i = gr->first; i < gr->end; i++)
            if (gr->peer < 0 || pp__comm_peer(ex->sched, ex->prog[i]) == gr->peer) pp__mark(ex, 3 * i + 2);
}

/* The message of a failure at program position i, with the transport's reason after it. */
static pp_status pp__at(pp_executor *ex, int i, pp_status st, pp_error *err, const char *what)
{
    char txt[64], inner[PP_ERROR_MESSAGE_SIZE];
    const char *why = inner, *rest;
    if (!err) return st;
    snprintf(inner, sizeof inner, "%s", err->message);
    if ((rest = pp__after_rank(inner, ex->rank)) != NULL && rest[0] == ':' && rest[1] == ' ') why = rest + 2;
    if (i < 0) return pp__fail(err, st, "rank %d before the step, %s: %s", ex->rank, what, why);
    if (i < ex->len) pp_action_format(ex->prog[i], txt, sizeof txt);
    else snprintf(txt, sizeof txt, "end of step");
    return pp__fail(err, st, "rank %d position %d (%s) %s: %s", ex->rank, i, txt, what, why);
}

/* Waits for group h (not done yet). `pos` is the program position that needs it. */
static pp_status pp__wait_one(pp_executor *ex, int h, int pos, pp_error *err)
{
    pp__group *gr = &ex->groups[h];
    pp_status st;
    if (!ex->planning) {
        char what[192], txt[64];
        int at = gr->first, i, n = 0;
        while (gr->peer >= 0 && at + 1 < gr->end && pp__comm_peer(ex->sched, ex->prog[at]) != gr->peer) at++;
        for (i = gr->first; i < gr->end; i++) n += gr->peer < 0 || pp__comm_peer(ex->sched, ex->prog[i]) == gr->peer;
        pp_action_format(ex->prog[at], txt, sizeof txt);
        st = ex->tp.wait(ex->tp.user, gr->handle, ex->timeout, err);
        gr->handle = NULL;
        gr->done = 1;
        if (st != PP_OK) {
            snprintf(what, sizeof what, "waiting for the group posted at position %d (%s%s)", at, txt,
                     n > 1 ? ", ..." : "");
            return pp__at(ex, pos, st, err, what);
        }
    }
    pp__group_finished(ex, h);
    return PP_OK;
}

/* Waits for group g and the groups before it: all of them (FIFO), or under independent_peers
 * only those with g's peer (each peer's transfers keep their order; the others' go on). `pos`
 * is the program position that needs group g. */
static pp_status pp__wait_upto(pp_executor *ex, int g, int pos, pp_error *err)
{
    pp_status st;
    int h;
    if (ex->planning)   /* planning waits in order, for the round's every group: the pool's size (pp__acquire) */
        while (g + 1 < ex->ngroups && ex->groups[g + 1].first == ex->groups[g].first) g++;
    for (h = ex->next_wait; h <= g; h++) {
        if (ex->groups[h].done ||
            (!ex->planning && ex->groups[g].peer >= 0 && ex->groups[h].peer != ex->groups[g].peer)) continue;
        if ((st = pp__wait_one(ex, h, pos, err)) != PP_OK) return st;
    }
    while (ex->next_wait < ex->ngroups && ex->groups[ex->next_wait].done) ex->next_wait++;
    return PP_OK;
}

/* Collects the groups that finished on their own (transport->test), in any order, so the
 * buffers their sends read go back to the pool early. */
static pp_status pp__try_reclaim(pp_executor *ex, pp_error *err)
{
    int g;
    if (!ex->tp.test) return PP_OK;
    for (g = ex->next_wait; g < ex->ngroups; g++) {
        int done = 0;
        pp_status st;
        if (ex->groups[g].done) continue;
        st = ex->tp.test(ex->tp.user, ex->groups[g].handle, &done, err);
        if (st != PP_OK) {
            ex->groups[g].handle = NULL;
            ex->groups[g].done = 1;
            return pp__at(ex, ex->groups[g].first, st, err, "testing its group");
        }
        if (done) pp__group_finished(ex, g);
    }
    while (ex->next_wait < ex->ngroups && ex->groups[ex->next_wait].done) ex->next_wait++;
    return PP_OK;
}

/* --- microbatch info --- */

static pp_mb_info pp__info(const pp_executor *ex, int stage, int m)
{
    pp_mb_info in;
    memset(&in, 0, sizeof in);
    in.rank = ex->rank;
    in.stage = stage;
    in.chunk = stage < ex->S ? pp_stage_chunk(ex->sched, stage) : -1;
    if (stage < ex->S && pp_stage_rank(ex->sched, stage) != ex->rank) in.chunk = -1;
    in.num_stages = ex->S;
    in.first_stage = pp__first(ex->sched, m);
    in.last_stage = pp__last(ex->sched, m);
    in.model_stage = stage - in.first_stage;
    in.mb = m;
    in.num_mb = ex->M;
    in.step = ex->steps;
    in.forward_only = ex->forward_only;
    in.slot = in.chunk >= 0 && !ex->forward_only ? ex->plan->slot[in.chunk * ex->M + m] : -1;
    if (ex->step) {
        if (ex->step->mb_meta) in.meta = ex->step->mb_meta[m];
        if (ex->step->batch_rows > 0) {
            int per = (ex->step->batch_rows + ex->M - 1) / ex->M, valid;
            in.batch_rows = ex->step->batch_rows;
            in.rows = per;
            in.first_row = m * per;
            valid = in.batch_rows - in.first_row;
            in.valid_rows = valid < 0 ? 0 : valid > per ? per : valid;
        }
    }
    return in;
}

static size_t pp__bytes(pp_executor *ex, int boundary, int m)
{
    pp_mb_info info;
    if (ex->planning) return 0;
    info = pp__info(ex, boundary, m);
    info.chunk = -1;
    info.slot = -1;
    return ex->cb.tensor_bytes(ex->cb.user, boundary, &info);
}

static pp_status pp__callback_failed(pp_executor *ex, int i, const char *name, int rc, pp_error *err)
{
    char txt[64];
    pp_action_format(ex->prog[i], txt, sizeof txt);
    return pp__fail(err, PP_ECALLBACK, "rank %d position %d (%s): the %s callback returned %d", ex->rank, i, txt,
                    name, rc);
}

static pp_status pp__missing(pp_executor *ex, int i, const char *what, pp_error *err)
{
    char txt[64];
    pp_action_format(ex->prog[i], txt, sizeof txt);
    return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d (%s): %s was never produced before it", ex->rank,
                    i, txt, what);
}

/* --- F and B halves --- */

typedef struct pp__fwd { int s, m, k, in, out; pp_mb_info info; } pp__fwd;
typedef struct pp__bwd { int s, m, k, in, gout, gin; pp_mb_info info; } pp__bwd;

#define PP__K(ex, s, m) (pp_stage_chunk((ex)->sched, (s)) * (ex)->M + (m))
#define PP__HERE(ex, s) (pp_stage_rank((ex)->sched, (s)) == (ex)->rank)

/* Whether this rank holds the last stage of some microbatch's route (the loss is computed here):
 * the last stage's rank, or under DualPipe's two routes ranks pp-1 (down) and 0 (up). */
static int pp__ends_a_route(const pp_executor *ex)
{
    return pp_stage_rank(ex->sched, pp__last(ex->sched, 0)) == ex->rank ||
           pp_stage_rank(ex->sched, pp__last(ex->sched, ex->M - 1)) == ex->rank;
}

/* Waits until F(s,m)'s input is here. */
static pp_status pp__f_wait(pp_executor *ex, int i, pp__fwd *f, int s, int m, pp_error *err)
{
    f->s = s; f->m = m; f->k = PP__K(ex, s, m); f->in = f->out = -1;
    f->info = pp__info(ex, s, m);
    if (s != f->info.first_stage) {
        if (ex->in_group[f->k] >= 0) {
            pp_status st = pp__wait_upto(ex, ex->in_group[f->k], i, err);
            if (st != PP_OK) return st;
            ex->in_group[f->k] = -1;
        }
        if (ex->in[f->k] < 0) return pp__missing(ex, i, "the input of this forward", err);
    }
    return PP_OK;
}

/* Reads the first stage's input and takes the output buffer. */
static pp_status pp__f_prepare(pp_executor *ex, int i, pp__fwd *f, pp_error *err)
{
    pp_status st;
    if (f->s == f->info.first_stage) {   /* the start of the microbatch's route: stage 0 but for DualPipe */
        f->in = pp__acquire(ex, pp__bytes(ex, f->s, f->m), &st, err);
        if (f->in < 0) return st;
        ex->in[f->k] = f->in;
        if (!ex->planning) {
            int rc = ex->cb.input(ex->cb.user, &f->info, pp__ptr(ex, f->in));
            if (rc) return pp__callback_failed(ex, i, "input", rc, err);
        }
    }
    f->in = ex->in[f->k];
    f->out = pp__acquire(ex, pp__bytes(ex, f->s + 1, f->m), &st, err);
    return f->out < 0 ? st : PP_OK;
}

/* Whether F's output, or B's input-gradient, goes to another rank (pp__f_finish, pp__b_finish). */
static int pp__f_sent(pp_executor *ex, const pp__fwd *f)
{
    return f->s != f->info.last_stage && !PP__HERE(ex, f->s + 1);
}

static int pp__b_sent(pp_executor *ex, const pp__bwd *b)
{
    return b->s > b->info.first_stage && !PP__HERE(ex, b->s - 1);
}

/* After the forward: the loss on the last stage, then route the output. */
static pp_status pp__f_finish(pp_executor *ex, int i, pp__fwd *f, pp_error *err)
{
    pp_status st;
    if (!ex->planning && !ex->forward_only && ++ex->saved_live > ex->saved_used) ex->saved_used = ex->saved_live;
    if (f->s == f->info.last_stage) {
        int g = -1;
        if (!ex->forward_only) {
            g = pp__acquire(ex, pp__bytes(ex, f->s + 1, f->m), &st, err);
            if (g < 0) return st;
            ex->gout[f->k] = g;
            ex->gout_group[f->k] = -1;
        }
        if (!ex->planning && ex->cb.loss) {
            pp_loss l;
            int rc;
            memset(&l, 0, sizeof l);
            l.weight = f->info.batch_rows > 0 ? (float)f->info.valid_rows : 1.0f;
            rc = ex->cb.loss(ex->cb.user, &f->info, pp__ptr(ex, f->out), pp__ptr(ex, g), &l);
            if (rc) return pp__callback_failed(ex, i, "loss", rc, err);
            ex->loss_sum += l.loss;
            ex->weight_sum += l.weight;
            for (rc = 0; rc < ex->num_metrics; rc++) ex->metric_sum[rc] += l.metrics[rc];
        }
        if (ex->forward_only) ex->out_slot[f->m] = f->out;
        else pp__release(ex, f->out);
    } else if (PP__HERE(ex, f->s + 1)) {
        int k2 = PP__K(ex, f->s + 1, f->m);
        ex->in[k2] = f->out;             /* in place: the next stage reads this very buffer */
        ex->in_group[k2] = -1;
    } else {
        ex->sendf[f->k] = f->out;
    }
    if (ex->forward_only) { pp__release(ex, ex->in[f->k]); ex->in[f->k] = -1; }
    return PP_OK;
}

/* Waits until B/I(s,m)'s output-gradient is here. */
static pp_status pp__b_wait(pp_executor *ex, int i, pp__bwd *b, int s, int m, pp_error *err)
{
    b->s = s; b->m = m; b->k = PP__K(ex, s, m); b->gin = -1;
    b->info = pp__info(ex, s, m);
    if (ex->gout_group[b->k] >= 0) {
        pp_status st = pp__wait_upto(ex, ex->gout_group[b->k], i, err);
        if (st != PP_OK) return st;
        ex->gout_group[b->k] = -1;
    }
    b->in = ex->in[b->k];
    b->gout = ex->gout[b->k];
    if (b->in < 0) return pp__missing(ex, i, "the forward input this backward needs", err);
    if (b->gout < 0) return pp__missing(ex, i, "the output-gradient of this backward", err);
    return PP_OK;
}

static pp_status pp__b_prepare(pp_executor *ex, pp__bwd *b, pp_error *err)
{
    pp_status st = PP_OK;
    if (b->s > b->info.first_stage) {
        b->gin = pp__acquire(ex, pp__bytes(ex, b->s, b->m), &st, err);
        if (b->gin < 0) return st;
    }
    return PP_OK;
}

static void pp__b_finish(pp_executor *ex, pp__bwd *b, int full)
{
    if (b->s > b->info.first_stage) {
        if (PP__HERE(ex, b->s - 1)) {
            int k2 = PP__K(ex, b->s - 1, b->m);
            ex->gout[k2] = b->gin;       /* in place */
            ex->gout_group[k2] = -1;
        } else {
            ex->sendb[b->k] = b->gin;
        }
    }
    if (full) {
        pp__release(ex, b->in); ex->in[b->k] = -1;
        pp__release(ex, b->gout); ex->gout[b->k] = -1;
        if (!ex->planning) ex->saved_live--;
    }
}

static pp_status pp__run_f(pp_executor *ex, int i, int s, int m, pp_error *err)
{
    pp__fwd f;
    pp_status st = pp__f_wait(ex, i, &f, s, m, err);
    if (st != PP_OK) return st;
    pp__mark(ex, 3 * i + 1);
    if ((st = pp__f_prepare(ex, i, &f, err)) != PP_OK) return st;
    if (!ex->planning) {
        int rc;
        pp__marking_add(ex, f.out, pp__f_sent(ex, &f));
        rc = ex->cb.forward(ex->cb.user, &f.info, pp__ptr(ex, f.in), pp__ptr(ex, f.out));
        pp__marking_end(ex);
        if (rc) return pp__callback_failed(ex, i, "forward", rc, err);
    }
    return pp__f_finish(ex, i, &f, err);
}

static pp_status pp__run_b(pp_executor *ex, int i, int op, int s, int m, pp_error *err)
{
    pp__bwd b;
    pp_status st = pp__b_wait(ex, i, &b, s, m, err);
    if (st != PP_OK) return st;
    pp__mark(ex, 3 * i + 1);
    if ((st = pp__b_prepare(ex, &b, err)) != PP_OK) return st;
    if (!ex->planning) {
        int whole = op == PP_OP_B || ex->unsplit;   /* unsplit: the I is the whole backward */
        int rc;
        pp__marking_add(ex, b.gin, pp__b_sent(ex, &b));
        rc = whole
            ? ex->cb.backward(ex->cb.user, &b.info, pp__ptr(ex, b.in), pp__ptr(ex, b.gout), pp__ptr(ex, b.gin))
            : ex->cb.backward_input(ex->cb.user, &b.info, pp__ptr(ex, b.in), pp__ptr(ex, b.gout), pp__ptr(ex, b.gin));
        pp__marking_end(ex);
        if (rc) return pp__callback_failed(ex, i, whole ? "backward" : "backward_input", rc, err);
    }
    pp__b_finish(ex, &b, op == PP_OP_B);
    return PP_OK;
}

static pp_status pp__run_w(pp_executor *ex, int i, int s, int m, pp_error *err)
{
    int k = PP__K(ex, s, m);
    pp_mb_info info = pp__info(ex, s, m);
    pp__mark(ex, 3 * i + 1);
    if (ex->in[k] < 0 || ex->gout[k] < 0) return pp__missing(ex, i, "the I this weight-gradient follows", err);
    if (!ex->planning && !ex->unsplit) {   /* unsplit: its I ran the whole backward */
        int rc = ex->cb.backward_weight(ex->cb.user, &info, pp__ptr(ex, ex->in[k]), pp__ptr(ex, ex->gout[k]));
        if (rc) return pp__callback_failed(ex, i, "backward_weight", rc, err);
    }
    pp__release(ex, ex->in[k]); ex->in[k] = -1;
    pp__release(ex, ex->gout[k]); ex->gout[k] = -1;
    if (!ex->planning) ex->saved_live--;
    return PP_OK;
}

/* FB: the F half and the B half, in one overlapped call when the user gave one. */
static pp_status pp__run_fb(pp_executor *ex, int i, pp_action a, pp_error *err)
{
    pp__fwd f;
    pp__bwd b;
    pp_status st;
    if (ex->forward_only) return pp__run_f(ex, i, a.stage, a.mb, err);
    if (!ex->cb.forward_backward) {
        /* F then B. The action's "inputs ready" time is its F half's: the B half's waits fall
         * inside the action, and each timer index is marked once (pp_timer's rule). */
        st = pp__run_f(ex, i, a.stage, a.mb, err);
        if (st != PP_OK) return st;
        ex->in_fb_second_half = 1;
        st = pp__run_b(ex, i, PP_OP_B, a.stage2, a.mb2, err);
        ex->in_fb_second_half = 0;
        return st;
    }
    if ((st = pp__f_wait(ex, i, &f, a.stage, a.mb, err)) != PP_OK) return st;
    if ((st = pp__b_wait(ex, i, &b, a.stage2, a.mb2, err)) != PP_OK) return st;
    pp__mark(ex, 3 * i + 1);
    if ((st = pp__f_prepare(ex, i, &f, err)) != PP_OK) return st;
    if ((st = pp__b_prepare(ex, &b, err)) != PP_OK) return st;
    if (!ex->planning) {
        int rc;
        pp__marking_add(ex, f.out, pp__f_sent(ex, &f));
        pp__marking_add(ex, b.gin, pp__b_sent(ex, &b));
        rc = ex->cb.forward_backward(ex->cb.user, &f.info, pp__ptr(ex, f.in), pp__ptr(ex, f.out), &b.info,
                                     pp__ptr(ex, b.in), pp__ptr(ex, b.gout), pp__ptr(ex, b.gin));
        pp__marking_end(ex);
        if (rc) return pp__callback_failed(ex, i, "forward_backward", rc, err);
    }
    if ((st = pp__f_finish(ex, i, &f, err)) != PP_OK) return st;
    pp__b_finish(ex, &b, 1);
    return PP_OK;
}

static int pp__is_b_comm(int op) { return op == PP_OP_SEND_B || op == PP_OP_RECV_B; }

/* Posts the communication actions [i, j) as one group. */
static pp_status pp__post_group(pp_executor *ex, int i, int j, int peer, pp_error *err)
{
    pp_status st;
    pp__group *gr;
    int p, n = 0, g = ex->ngroups;
    if (ex->ngroups == ex->cap_groups) {
        int cap = ex->cap_groups ? 2 * ex->cap_groups : 16;
        pp__group *ng = (pp__group *)PIPEPAR_REALLOC(ex->groups, (size_t)cap * sizeof(pp__group));
        if (!ng) return pp__fail(err, PP_ENOMEM, "rank %d: out of memory (groups)", ex->rank);
        ex->groups = ng; ex->cap_groups = cap;
    }
    if (ex->nrelease + (j - i) > ex->cap_release) {
        int cap = ex->cap_release ? ex->cap_release : 16;
        int *nr;
        while (cap < ex->nrelease + (j - i)) cap *= 2;
        nr = (int *)PIPEPAR_REALLOC(ex->release, (size_t)cap * sizeof(int));
        if (!nr) return pp__fail(err, PP_ENOMEM, "rank %d: out of memory (groups)", ex->rank);
        ex->release = nr; ex->cap_release = cap;
    }
    gr = &ex->groups[g];
    memset(gr, 0, sizeof *gr);
    gr->first = i; gr->end = j; gr->peer = peer;
    gr->rel_begin = gr->rel_end = ex->nrelease;
    for (p = i; p < j; p++) {
        pp_action a = ex->prog[p];
        pp_transfer *t = &ex->xfers[n];
        int k = PP__K(ex, a.stage, a.mb), slot;
        if (ex->forward_only && pp__is_b_comm(a.op)) continue;
        if (peer >= 0 && pp__comm_peer(ex->sched, a) != peer) continue;
        pp__mark(ex, 3 * p);
        pp__mark(ex, 3 * p + 1);
        memset(t, 0, sizeof *t);
        switch (a.op) {
        case PP_OP_SEND_F:
            slot = ex->sendf[k];
            if (slot < 0) return pp__missing(ex, p, "the output this send carries", err);
            ex->sendf[k] = -1;
            t->is_send = 1;
            t->tag = pp_transfer_tag(PP_OP_SEND_F, a.stage, a.mb, ex->steps);
            break;
        case PP_OP_SEND_B:
            slot = ex->sendb[k];
            if (slot < 0) return pp__missing(ex, p, "the input-gradient this send carries", err);
            ex->sendb[k] = -1;
            t->is_send = 1;
            t->tag = pp_transfer_tag(PP_OP_SEND_B, a.stage, a.mb, ex->steps);
            break;
        case PP_OP_RECV_F:
            slot = pp__acquire(ex, pp__bytes(ex, a.stage, a.mb), &st, err);
            if (slot < 0) return st;
            ex->in[k] = slot; ex->in_group[k] = g;
            t->tag = pp_transfer_tag(PP_OP_SEND_F, a.stage - 1, a.mb, ex->steps);
            break;
        default: /* PP_OP_RECV_B */
            slot = pp__acquire(ex, pp__bytes(ex, a.stage + 1, a.mb), &st, err);
            if (slot < 0) return st;
            ex->gout[k] = slot; ex->gout_group[k] = g;
            t->tag = pp_transfer_tag(PP_OP_SEND_B, a.stage + 1, a.mb, ex->steps);
            break;
        }
        t->peer = pp__comm_peer(ex->sched, a);
        if (t->is_send) ex->release[ex->nrelease++] = slot;
        else {
            long long idle = ex->groups_posted - ex->slots[slot].free_since;
            t->buf_free_posts = idle < 0 ? 0 : idle > 1000000 ? 1000000 : (int)idle;
        }
        t->buf = pp__ptr(ex, slot);
        t->bytes = ex->slots[slot].bytes;
        if (t->is_send) {   /* its parts, said by the compute that wrote it, are used up now */
            t->parts = ex->slots[slot].parts;
            ex->slots[slot].parts = 0;
        }
        n++;
    }
    if (n == 0) return PP_OK;   /* forward only: a group of backward transfers */
    gr->rel_end = ex->nrelease;
    ex->ngroups++;
    if (ex->planning) return PP_OK;
    st = ex->tp.post(ex->tp.user, ex->xfers, n, &gr->handle, err);
    if (st != PP_OK) {
        gr->done = 1; gr->handle = NULL;
        return pp__at(ex, i, st, err, "posting its group");
    }
    ex->transfers_posted += n;
    ex->groups_posted++;
    return PP_OK;
}

/* Position i ended its chunk's backward work of the step (pp__plan.done): tell the trainer. */
static pp_status pp__chunk_done(pp_executor *ex, int i, pp_action a, pp_error *err)
{
    pp_mb_info info = a.op == PP_OP_FB ? pp__info(ex, a.stage2, a.mb2) : pp__info(ex, a.stage, a.mb);
    int rc;
    info.slot = -1;
    rc = ex->cb.chunk_done(ex->cb.user, &info);
    return rc ? pp__callback_failed(ex, i, "chunk_done", rc, err) : PP_OK;
}

/* Walks the program once. */
static pp_status pp__walk(pp_executor *ex, pp_error *err)
{
    pp_status st = PP_OK;
    int i = 0, done_at = -1;   /* done_at: a chunk's last backward, told once the transfers after it are posted */
    while (i < ex->len && st == PP_OK) {
        pp_action a = ex->prog[i];
        if (pp__is_comm(a.op)) {
            int j = i, p, q;
            while (j < ex->len && pp__is_comm(ex->prog[j].op) && ex->prog[j].group == a.group) j++;
            if (!ex->tp.independent_peers) st = pp__post_group(ex, i, j, -1, err);
            for (p = i; ex->tp.independent_peers && p < j && st == PP_OK; p++) {   /* a group per peer, */
                int peer = pp__comm_peer(ex->sched, ex->prog[p]), seen = 0;              /* in first-use order */
                for (q = i; q < p && !seen; q++) seen = pp__comm_peer(ex->sched, ex->prog[q]) == peer;
                if (!seen) st = pp__post_group(ex, i, j, peer, err);
            }
            i = j;
            continue;
        }
        if (done_at >= 0) {
            st = pp__chunk_done(ex, done_at, ex->prog[done_at], err);
            done_at = -1;
            if (st != PP_OK) break;
        }
        if (ex->forward_only && (a.op == PP_OP_B || a.op == PP_OP_I || a.op == PP_OP_W)) { i++; continue; }
        pp__mark(ex, 3 * i);
        if (!ex->planning && ex->next_wait < ex->ngroups) {
            st = pp__try_reclaim(ex, err);   /* sends that finished give their buffers back */
            if (st != PP_OK) break;
        }
        switch (a.op) {
        case PP_OP_F: st = pp__run_f(ex, i, a.stage, a.mb, err); break;
        case PP_OP_B: case PP_OP_I: st = pp__run_b(ex, i, a.op, a.stage, a.mb, err); break;
        case PP_OP_W: st = pp__run_w(ex, i, a.stage, a.mb, err); break;
        default: st = pp__run_fb(ex, i, a, err); break;
        }
        if (st == PP_OK) pp__mark(ex, 3 * i + 2);
        if (st == PP_OK && ex->plan->done[i] && ex->cb.chunk_done && !ex->planning && !ex->forward_only) done_at = i;
        i++;
    }
    if (st == PP_OK && done_at >= 0) st = pp__chunk_done(ex, done_at, ex->prog[done_at], err);
    for (i = ex->next_wait; st == PP_OK && i < ex->ngroups; i++)   /* every group, whatever its peer */
        if (!ex->groups[i].done) st = pp__wait_one(ex, i, ex->len, err);
    if (st == PP_OK) ex->next_wait = ex->ngroups;
    return st;
}

static void pp__reset_step(pp_executor *ex)
{
    int k, n = ex->vpp * ex->M;
    for (k = 0; k < n; k++) {
        ex->in[k] = ex->gout[k] = ex->sendf[k] = ex->sendb[k] = -1;
        ex->in_group[k] = ex->gout_group[k] = -1;
    }
    for (k = 0; k < ex->max_M; k++) {   /* the last step's outputs, whatever its count */
        if (ex->out_slot[k] >= 0) pp__release(ex, ex->out_slot[k]);
        ex->out_slot[k] = -1;
        ex->out_ptr[k] = NULL;
        ex->out_bytes[k] = 0;
    }
    ex->ngroups = ex->next_wait = ex->nrelease = 0;
    ex->saved_live = 0;
    ex->loss_sum = ex->weight_sum = 0;
    memset(ex->metric_sum, 0, sizeof ex->metric_sum);
}

/* Every slot back to free (after a failure or planning). */
static void pp__release_all(pp_executor *ex)
{
    int i;
    for (i = 0; i < ex->nslots; i++) { ex->slots[i].used = 0; ex->slots[i].free_since = ex->groups_posted; }
    for (i = 0; i < ex->max_M; i++) ex->out_slot[i] = -1;
    ex->live = 0;
    ex->saved_live = 0;
}

/* FNV-1a over the schedule: everything a rank's partners rely on. */
static uint64_t pp__hash_ints(uint64_t h, const int32_t *v, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        uint32_t x = (uint32_t)v[i];
        int b;
        for (b = 0; b < 4; b++) { h ^= (x >> (8 * b)) & 0xffu; h *= 1099511628211ull; }
    }
    return h;
}

static uint64_t pp__schedule_hash(const pp_schedule *s)
{
    uint64_t h = 1469598103934665603ull;
    int32_t head[6];
    int r;
    head[0] = (int32_t)s->kind; head[1] = (int32_t)s->placement; head[2] = s->pp;
    head[3] = s->vpp; head[4] = s->mb; head[5] = s->group;
    h = pp__hash_ints(h, head, 6);
    for (r = 0; r < s->pp; r++) {
        int32_t len = s->length[r];
        h = pp__hash_ints(h, &len, 1);
        if (len) h = pp__hash_ints(h, (const int32_t *)(const void *)s->actions[r], (size_t)len * 5);
    }
    return h;
}

static void pp__plan_free(pp__plan *p)
{
    pp_schedule_free(p->sched);
    PIPEPAR_FREE(p->slot);
    PIPEPAR_FREE(p->done);
    memset(p, 0, sizeof *p);
}

void pp_executor_free(pp_executor *ex)
{
    int i;
    if (!ex) return;
    pp__pool_free_memory(ex);
    if (ex->plans) for (i = 0; i < ex->nplans; i++) pp__plan_free(&ex->plans[i]);
    PIPEPAR_FREE(ex->plans);
    PIPEPAR_FREE(ex->slots);
    PIPEPAR_FREE(ex->in); PIPEPAR_FREE(ex->gout); PIPEPAR_FREE(ex->sendf); PIPEPAR_FREE(ex->sendb);
    PIPEPAR_FREE(ex->in_group); PIPEPAR_FREE(ex->gout_group);
    PIPEPAR_FREE(ex->out_slot); PIPEPAR_FREE(ex->out_ptr); PIPEPAR_FREE(ex->out_bytes);
    PIPEPAR_FREE(ex->groups); PIPEPAR_FREE(ex->release); PIPEPAR_FREE(ex->xfers);
    PIPEPAR_FREE(ex->times); PIPEPAR_FREE(ex->t_start); PIPEPAR_FREE(ex->t_ready); PIPEPAR_FREE(ex->t_end);
    PIPEPAR_FREE(ex);
}

/* Works out once what program s (lowered, valid; p takes it) needs: each (chunk, microbatch)'s
 * saved-state slot, the lowest free at its F and free again after the B or W that ends it (so
 * the slots used are the program's live peak: when slot j is taken, 0 .. j-1 are all live); the
 * position of each chunk's last B, W or FB (its I is never last: its W follows); the largest
 * communication group. */
static pp_status pp__plan_init(pp_executor *ex, pp__plan *p, pp_schedule *s, pp_error *err)
{
    const pp_action *prog = s->actions[ex->rank];
    int n = s->vpp * s->mb, i, h, c, run = 0, lo = 0;
    int *used, *last;
    memset(p, 0, sizeof *p);
    p->sched = s;
    p->len = s->length[ex->rank];
    p->slot = (int *)pp__calloc((size_t)n, sizeof(int));
    p->done = (unsigned char *)pp__calloc((size_t)p->len + 1, 1);
    used = (int *)pp__calloc((size_t)n + 1 + (size_t)s->vpp, sizeof(int));   /* [n + 1] slot taken, then last */
    if (!p->slot || !p->done || !used) {
        PIPEPAR_FREE(used);
        pp__plan_free(p);
        return pp__fail(err, PP_ENOMEM, "rank %d: out of memory", ex->rank);
    }
    last = used + n + 1;   /* [vpp] each chunk's last backward position, -1 for none */
    for (i = 0; i < n; i++) p->slot[i] = -1;
    for (c = 0; c < s->vpp; c++) last[c] = -1;
    for (i = 0; i < p->len; i++) {
        pp_action a = prog[i];
        int ops[2], stg[2], mbs[2], nh;
        if (pp__is_comm(a.op)) {
            run = i > 0 && pp__is_comm(prog[i - 1].op) && prog[i - 1].group == a.group ? run + 1 : 1;
            if (run > p->maxgroup) p->maxgroup = run;
            continue;
        }
        if (a.op == PP_OP_I || a.op == PP_OP_W) p->has_split = 1;
        if (a.op == PP_OP_B || a.op == PP_OP_FB) p->has_b = 1;
        nh = pp__halves(a, ops, stg, mbs);
        for (h = 0; h < nh; h++) {
            int k;
            c = pp_stage_chunk(s, stg[h]);
            k = c * s->mb + mbs[h];
            if (ops[h] == PP_OP_F) {
                while (used[lo]) lo++;   /* lo: no slot below it is free */
                used[lo] = 1;
                p->slot[k] = lo;
                if (lo + 1 > p->saved) p->saved = lo + 1;
            } else if (ops[h] == PP_OP_B || ops[h] == PP_OP_W) {
                if (p->slot[k] >= 0) {
                    used[p->slot[k]] = 0;
                    if (p->slot[k] < lo) lo = p->slot[k];
                }
                last[c] = i;
            }
        }
    }
    for (c = 0; c < s->vpp; c++)
        if (last[c] >= 0) p->done[last[c]] = 1;
    PIPEPAR_FREE(used);
    p->hash = pp__schedule_hash(s);
    return PP_OK;
}

/* The program p becomes the one the walk runs. */
static void pp__use_plan(pp_executor *ex, pp__plan *p)
{
    ex->plan = p;
    ex->sched = p->sched;
    ex->prog = p->sched->actions[ex->rank];
    ex->len = p->len;
    ex->M = p->sched->mb;
    ex->has_b = p->has_b;
    ex->hash = p->hash;
}

/* Grows the arrays whose size follows the program (transfers of a group, the timeline) for p,
 * and walks p once without callbacks ("planning") for its peak count of live tensors, training
 * and forward-only, which the pool plans for. */
static pp_status pp__plan_pool(pp_executor *ex, pp__plan *p, pp_error *err)
{
    pp_status st = PP_OK;
    int mode, peak = 0, keep_peak = ex->peak_live;
    if (p->maxgroup > ex->cap_xfers) {
        pp_transfer *x = (pp_transfer *)PIPEPAR_REALLOC(ex->xfers, (size_t)p->maxgroup * sizeof(pp_transfer));
        if (!x) return pp__fail(err, PP_ENOMEM, "rank %d: out of memory (transfers)", ex->rank);
        ex->xfers = x;
        ex->cap_xfers = p->maxgroup;
    }
    if (ex->record && p->len > ex->cap_len) {
        size_t n = (size_t)p->len + 1;
        double *t = (double *)PIPEPAR_REALLOC(ex->times, 3 * n * sizeof(double));
        if (t) ex->times = t;
        t = t ? (double *)PIPEPAR_REALLOC(ex->t_start, n * sizeof(double)) : NULL;
        if (t) ex->t_start = t;
        t = t ? (double *)PIPEPAR_REALLOC(ex->t_ready, n * sizeof(double)) : NULL;
        if (t) ex->t_ready = t;
        t = t ? (double *)PIPEPAR_REALLOC(ex->t_end, n * sizeof(double)) : NULL;
        if (t) ex->t_end = t;
        if (!t) return pp__fail(err, PP_ENOMEM, "rank %d: out of memory (timeline)", ex->rank);
        ex->cap_len = p->len;
    }
    pp__use_plan(ex, p);
    ex->step = NULL;   /* planning reads no step's metadata */
    ex->planning = 1;
    for (mode = 0; mode < 2 && st == PP_OK; mode++) {
        ex->forward_only = mode;
        ex->peak_live = 0;
        pp__reset_step(ex);
        st = pp__walk(ex, err);
        if (ex->peak_live > peak) peak = ex->peak_live;
        pp__release_all(ex);
    }
    ex->planning = 0;
    ex->forward_only = 0;
    ex->peak_live = keep_peak;
    if (peak > ex->planned) ex->planned = peak;
    pp__reset_step(ex);
    return st;
}

/* The recipe's schedule for `count` microbatches: built, split as configured, and when `lower`
 * lowered and validated (what a step runs; unlowered, the compute order alone). */
static pp_status pp__recipe_schedule(const pp_executor *ex, int count, int lower, pp_schedule **out, pp_error *err)
{
    pp_schedule_config c = ex->recipe;
    pp_schedule *s = NULL;
    pp_status st;
    c.mb = count;
    st = pp_schedule_build(&c, &s, err);
    if (st == PP_OK && ex->split_backward) st = pp_schedule_split_backward(s, err);
    if (st == PP_OK && ex->split_overlaps) st = pp_schedule_split_overlaps(s, err);
    if (st == PP_OK && lower) st = pp_schedule_lower(s, err);
    if (st == PP_OK && lower) st = pp_schedule_validate(s, err);
    if (st != PP_OK) { pp_schedule_free(s); s = NULL; }
    *out = s;
    return st;
}

/* With a recipe, at setup: the compute order of every count 1 .. max_mb, for the saved-state
 * slots (the largest live peak of this rank; a count the kind refuses runs no step and counts
 * none), whether any has split backwards (I, W), and the shape (vpp, stages). Fails when no
 * count builds, with max_mb's reason. */
static pp_status pp__recipe_scan(pp_executor *ex, int *any_split, pp_error *err)
{
    pp_error why;
    pp_status st, refused = PP_OK;
    int n, i, built = 0;
    *any_split = 0;
    for (n = 1; n <= ex->max_M; n++) {
        pp_schedule *s = NULL;
        int live = 0;
        st = pp__recipe_schedule(ex, n, 0, &s, &why);
        if (st == PP_ENOMEM) return pp__fail(err, st, "%s", why.message);
        if (st != PP_OK) { refused = st; continue; }
        st = pp_schedule_rank_peaks(s, ex->rank, NULL, 1, &live, NULL, err);
        if (st == PP_OK) {
            if (live > ex->saved_slots) ex->saved_slots = live;
            for (i = 0; i < s->length[ex->rank]; i++)
                if (s->actions[ex->rank][i].op == PP_OP_I || s->actions[ex->rank][i].op == PP_OP_W) *any_split = 1;
            ex->vpp = s->vpp;
            ex->S = s->num_stages;
            built++;
        }
        pp_schedule_free(s);
        if (st != PP_OK) return st;
    }
    if (!built)
        return pp__fail(err, refused, "recipe: no microbatch count 1 .. max_mb=%d gives a %s schedule (max_mb: %s)",
                        ex->max_M, pp_schedule_kind_name(ex->recipe.kind), why.message);
    return PP_OK;
}

/* The most microbatches a recipe's step may have (max_mb): its setup builds every count's order. */
#define PP__MAX_RECIPE_MB 1024

/* pp_executor_create's checks that need no program. */
static pp_status pp__executor_check(const pp_executor_config *cfg, pp_error *err)
{
    const pp_schedule *s = cfg->schedule;
    int recipe = cfg->recipe.kind != PP_KIND_NONE, pp = recipe ? cfg->recipe.pp : s ? s->pp : 0;
    if (s && recipe)
        return pp__fail(err, PP_EINVAL, "schedule and recipe: give one, not both (a fixed schedule, or recipe.kind "
                        "%s to build one for each step's microbatch count)", pp_schedule_kind_name(cfg->recipe.kind));
    if (!s && !recipe)
        return pp__fail(err, PP_EINVAL, "schedule: must not be NULL (or give a recipe: recipe.kind, recipe.pp and "
                        "max_mb)");
    if (recipe && (cfg->max_mb < 1 || cfg->max_mb > PP__MAX_RECIPE_MB))
        return pp__fail(err, PP_EINVAL, "max_mb=%d: must be between 1 and %d with a recipe (the most microbatches a "
                        "step may have)", cfg->max_mb, PP__MAX_RECIPE_MB);
    if (!recipe && (cfg->max_mb || cfg->split_backward || cfg->split_overlaps))
        return pp__fail(err, PP_EINVAL, "%s=%d: only with a recipe (a fixed schedule runs as it is: split it with "
                        "pp_schedule_split_backward or _overlaps before)", cfg->max_mb ? "max_mb" :
                        cfg->split_backward ? "split_backward" : "split_overlaps",
                        cfg->max_mb ? cfg->max_mb : cfg->split_backward ? cfg->split_backward : cfg->split_overlaps);
    if (cfg->transport.world != pp)
        return pp__fail(err, PP_EINVAL, "transport.world=%d: must equal the %s pp (%d)", cfg->transport.world,
                        recipe ? "recipe's" : "schedule's", pp);
    if (cfg->transport.rank < 0 || cfg->transport.rank >= pp)
        return pp__fail(err, PP_EINVAL, "transport.rank=%d: must be between 0 and pp-1=%d", cfg->transport.rank, pp - 1);
    if (!cfg->transport.post || !cfg->transport.wait || !cfg->transport.all_reduce || !cfg->transport.abort)
        return pp__fail(err, PP_EINVAL, "transport.%s: must not be NULL (post, wait, all_reduce and abort are required)",
                        !cfg->transport.post ? "post" : !cfg->transport.wait ? "wait" :
                        !cfg->transport.all_reduce ? "all_reduce" : "abort");
    if (!cfg->callbacks.tensor_bytes || !cfg->callbacks.input || !cfg->callbacks.forward)
        return pp__fail(err, PP_EINVAL, "callbacks.%s: must not be NULL",
                        !cfg->callbacks.tensor_bytes ? "tensor_bytes" : !cfg->callbacks.input ? "input" : "forward");
    if ((cfg->callbacks.backward_input == NULL) != (cfg->callbacks.backward_weight == NULL))
        return pp__fail(err, PP_EINVAL, "callbacks.%s: must not be NULL when callbacks.%s is given (the two halves of "
                        "a split backward come together; without both, give backward)",
                        cfg->callbacks.backward_input ? "backward_weight" : "backward_input",
                        cfg->callbacks.backward_input ? "backward_input" : "backward_weight");
    if ((cfg->allocator.alloc == NULL) != (cfg->allocator.free == NULL))
        return pp__fail(err, PP_EINVAL, "allocator: give both alloc and free, or neither");
    if ((cfg->timer.mark == NULL) != (cfg->timer.resolve == NULL))
        return pp__fail(err, PP_EINVAL, "timer: give both mark and resolve, or neither");
    if (!(cfg->timeout_s >= 0) || cfg->timeout_s > 1e9)
        return pp__fail(err, PP_EINVAL, "timeout_s=%g: must be >= 0 (0 means 60 s)", cfg->timeout_s);
    if (cfg->num_metrics < 0 || cfg->num_metrics > PP_MAX_METRICS)
        return pp__fail(err, PP_EINVAL, "num_metrics=%d: must be between 0 and PP_MAX_METRICS=%d", cfg->num_metrics,
                        PP_MAX_METRICS);
    if (s && s->pp > 1 && !s->lowered)
        return pp__fail(err, PP_EINVAL, "schedule: not lowered; call pp_schedule_lower first (pp=%d needs "
                        "SEND/RECV actions)", s->pp);
    return s ? pp_schedule_validate(s, err) : PP_OK;
}

pp_status pp_executor_create(const pp_executor_config *cfg, pp_executor **out, pp_error *err)
{
    pp_executor *ex;
    pp_status st;
    int n, any_split = 0;
    if (!cfg || !out) return pp__fail(err, PP_EINVAL, "cfg and out: must not be NULL");
    *out = NULL;
    st = pp__executor_check(cfg, err);
    if (st != PP_OK) return st;
    ex = (pp_executor *)pp__calloc(1, sizeof *ex);
    if (!ex) return pp__fail(err, PP_ENOMEM, "out of memory");
    ex->rank = cfg->transport.rank;
    ex->world = cfg->transport.world;
    ex->tp = cfg->transport;
    ex->cb = cfg->callbacks;
    ex->al = cfg->allocator;
    ex->timer = cfg->timer;
    ex->timeout = cfg->timeout_s > 0 ? cfg->timeout_s : 60.0;
    ex->num_metrics = cfg->num_metrics;
    ex->record = cfg->record_timeline != 0;
    ex->unsplit = !cfg->callbacks.backward_input;
    ex->use_recipe = cfg->schedule == NULL;
    ex->nplans = ex->use_recipe ? cfg->max_mb : 1;
    ex->plans = (pp__plan *)pp__calloc((size_t)ex->nplans, sizeof(pp__plan));
    if (!ex->plans) { pp_executor_free(ex); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    if (ex->use_recipe) {
        ex->recipe = cfg->recipe;
        ex->split_backward = cfg->split_backward != 0;
        ex->split_overlaps = cfg->split_overlaps != 0;
        ex->max_M = cfg->max_mb;
        st = pp__recipe_scan(ex, &any_split, err);
    } else {
        pp_schedule *copy = NULL;
        ex->S = cfg->schedule->num_stages;
        ex->vpp = cfg->schedule->vpp;
        ex->max_M = cfg->schedule->mb;
        st = pp_schedule_copy(cfg->schedule, &copy, err);
        if (st == PP_OK) st = pp__plan_init(ex, &ex->plans[0], copy, err);
        any_split = ex->plans[0].has_split;
        ex->saved_slots = ex->plans[0].saved;
    }
    if (st == PP_OK && any_split && ex->unsplit && !cfg->callbacks.backward)
        st = pp__fail(err, PP_EINVAL, "callbacks.backward_input: must not be NULL, rank %d's program has split "
                      "backwards (I, W): give backward_input and backward_weight, or backward (each I then runs the "
                      "whole backward, each W nothing)", ex->rank);
    if (st != PP_OK) { pp_executor_free(ex); return st; }
    n = ex->vpp * ex->max_M;
    ex->in = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->gout = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->sendf = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->sendb = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->in_group = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->gout_group = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->out_slot = (int *)pp__calloc((size_t)ex->max_M, sizeof(int));
    ex->out_ptr = (void **)pp__calloc((size_t)ex->max_M, sizeof(void *));
    ex->out_bytes = (size_t *)pp__calloc((size_t)ex->max_M, sizeof(size_t));
    if (!ex->in || !ex->gout || !ex->sendf || !ex->sendb || !ex->in_group || !ex->gout_group || !ex->out_slot ||
        !ex->out_ptr || !ex->out_bytes) {
        pp_executor_free(ex);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    for (n = 0; n < ex->max_M; n++) ex->out_slot[n] = -1;
    if (!ex->use_recipe) {   /* a recipe's programs are set up on the first step of each count */
        st = pp__plan_pool(ex, &ex->plans[0], err);
        if (st != PP_OK) { pp_executor_free(ex); return st; }
    }
    *out = ex;
    return pp__ok(err);
}

/* After a failure: abort the transport (unless another rank did), finish every handle, and
 * account for every buffer. */
static pp_status pp__step_failed(pp_executor *ex, pp_status st, pp_error *err)
{
    int g;
    if (st != PP_EABORTED) ex->tp.abort(ex->tp.user, st, err ? err->message : pp_status_description(st));
    for (g = 0; g < ex->ngroups; g++)
        if (!ex->groups[g].done && ex->groups[g].handle) {
            ex->tp.wait(ex->tp.user, ex->groups[g].handle, 1.0, NULL);   /* aborted: returns at once */
            ex->groups[g].handle = NULL;
            ex->groups[g].done = 1;
        }
    ex->ngroups = ex->next_wait = 0;
    pp__release_all(ex);
    ex->failed = 1;
    ex->timeline_valid = 0;
    return st;
}

/* Before a step: the ranks all-reduce the schedule hash (8 nibbles n and their squares n*n; all
 * ranks agree exactly when sum(n) = world*n and sum(n*n) = world*n*n for every nibble, exact in
 * float for up to 74565 ranks) and a few fields. The sums equal world times a rank's own values
 * only when every rank's are equal (Cauchy-Schwarz), so either every rank finds a difference or
 * none does; then, up to 64 ranks, all of them all-reduce their fields once more, each at its
 * own index, to name a field that differs and another rank's value of it (beyond, its mean). */
#define PP__CHECK_FIELDS 9
#define PP__CHECK_NAMED_RANKS 64
static pp_status pp__check_ranks_agree(pp_executor *ex, const pp_step *step, pp_error *err)
{
    float v[16 + 2 * PP__CHECK_FIELDS], all[PP__CHECK_NAMED_RANKS * PP__CHECK_FIELDS];
    double f[PP__CHECK_FIELDS];
    static const char *const names[PP__CHECK_FIELDS] = {
        "schedule kind", "vpp", "mb", "group", "placement", "step number", "forward_only", "batch_rows", "num_metrics"
    };
    uint64_t h = ex->hash;
    uint32_t h32;
    int32_t extra[4];
    pp_status st;
    int i, bad = 0;
    double w = (double)ex->world;
    extra[0] = ex->steps; extra[1] = step->forward_only != 0; extra[2] = step->batch_rows; extra[3] = ex->num_metrics;
    h = pp__hash_ints(h, extra, 4);
    h32 = (uint32_t)(h ^ (h >> 32));
    for (i = 0; i < 8; i++) {
        int nib = (int)((h32 >> (4 * i)) & 0xf);
        v[i] = (float)nib;
        v[8 + i] = (float)(nib * nib);
    }
    f[0] = ex->sched->kind; f[1] = ex->vpp; f[2] = ex->M; f[3] = ex->sched->group; f[4] = ex->sched->placement;
    f[5] = ex->steps; f[6] = step->forward_only != 0; f[7] = step->batch_rows; f[8] = ex->num_metrics;
    for (i = 0; i < PP__CHECK_FIELDS; i++) { v[16 + 2 * i] = (float)f[i]; v[17 + 2 * i] = (float)(f[i] * f[i]); }
    st = ex->tp.all_reduce(ex->tp.user, v, (int)(sizeof v / sizeof v[0]), ex->timeout, err);
    if (st != PP_OK) return pp__at(ex, -1, st, err, "checking that the ranks run the same schedule");
    for (i = 0; i < 8; i++) {
        double nib = (double)((h32 >> (4 * i)) & 0xf);
        if ((double)v[i] != w * nib || (double)v[8 + i] != w * nib * nib) bad = 1;
    }
    if (!bad) return PP_OK;
    if (ex->world <= PP__CHECK_NAMED_RANKS) {
        int r, n = ex->world * PP__CHECK_FIELDS;
        memset(all, 0, (size_t)n * sizeof(float));
        for (i = 0; i < PP__CHECK_FIELDS; i++) all[ex->rank * PP__CHECK_FIELDS + i] = (float)f[i];
        st = ex->tp.all_reduce(ex->tp.user, all, n, ex->timeout, err);
        if (st != PP_OK) return pp__at(ex, -1, st, err, "naming what differs between the ranks' schedules");
        for (i = 0; i < PP__CHECK_FIELDS; i++)
            for (r = 0; r < ex->world; r++)
                if (all[r * PP__CHECK_FIELDS + i] != (float)f[i])
                    return pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d: the pipeline ranks run different schedules: "
                                    "%s%s differs (this rank: %g, rank %d: %g)", ex->rank,
                                    i == 2 && ex->use_recipe ? "num_" : "", names[i], f[i], r,
                                    (double)all[r * PP__CHECK_FIELDS + i]);
    }
    for (i = 0; i < PP__CHECK_FIELDS; i++) {
        double mean = (double)v[16 + 2 * i] / w, meansq = (double)v[17 + 2 * i] / w;
        if (fabs(mean - f[i]) > 1e-3 * (1 + fabs(f[i])) || fabs(meansq - f[i] * f[i]) > 1e-3 * (1 + f[i] * f[i]))
            return pp__fail(err, PP_EINVALID_SCHEDULE,
                            "rank %d: the pipeline ranks run different schedules: %s differs (this rank: %g, mean "
                            "over the %d ranks: %g)", ex->rank, names[i], f[i], ex->world, mean);
    }
    return pp__fail(err, PP_EINVALID_SCHEDULE,
                    "rank %d: the pipeline ranks run different schedules (same kind, pp, vpp and mb, but the "
                    "programs differ: schedule hash %08x on this rank)", ex->rank, (unsigned)h32);
}

/* The program of a step of `count` microbatches (pp_step.num_mb): the fixed schedule's, or the
 * recipe's for that count, set up on its first step. */
static pp_status pp__plan_get(pp_executor *ex, int count, pp__plan **out, pp_error *err)
{
    pp__plan *p;
    pp_schedule *s = NULL;
    pp_error why;
    pp_status st;
    if (!ex->use_recipe) {
        if (count != 0 && count != ex->plans[0].sched->mb)
            return pp__fail(err, PP_EINVAL, "rank %d: step.num_mb=%d: this executor runs a fixed schedule of mb=%d (0 "
                            "means that count; give a recipe for counts that change)", ex->rank, count,
                            ex->plans[0].sched->mb);
        *out = &ex->plans[0];
        return PP_OK;
    }
    if (count < 1 || count > ex->max_M)
        return pp__fail(err, PP_EINVAL, "rank %d: step.num_mb=%d: must be between 1 and max_mb=%d (a recipe's step "
                        "names its microbatch count)", ex->rank, count, ex->max_M);
    p = &ex->plans[count - 1];
    if (!p->sched) {
        st = pp__recipe_schedule(ex, count, 1, &s, &why);
        if (st != PP_OK) return pp__fail(err, st, "rank %d: step.num_mb=%d: %s", ex->rank, count, why.message);
        st = pp__plan_init(ex, p, s, err);
        if (st == PP_OK) st = pp__plan_pool(ex, p, err);
        if (st != PP_OK) { pp__plan_free(p); return st; }
        PIPEPAR_ASSERT(p->saved <= ex->saved_slots);
    }
    *out = p;
    return PP_OK;
}

pp_status pp_run_step(pp_executor *ex, const pp_step *step, pp_step_result *result, pp_error *err)
{
    pp_step zero;
    pp__plan *plan = NULL;
    pp_status st;
    double t0 = pp__now();
    float red[2 + PP_MAX_METRICS];
    int i;
    if (!ex) return pp__fail(err, PP_EINVAL, "executor: must not be NULL");
    if (result) memset(result, 0, sizeof *result);
    if (ex->failed)
        return pp__fail(err, PP_EINVAL, "rank %d: an earlier step failed and aborted the transport; create a new "
                        "transport and executor", ex->rank);
    if (!step) { memset(&zero, 0, sizeof zero); step = &zero; }
    st = pp__plan_get(ex, step->num_mb, &plan, err);
    if (st != PP_OK) return pp__step_failed(ex, st, err);
    pp__use_plan(ex, plan);
    ex->step = step;
    ex->forward_only = step->forward_only != 0;
    pp__reset_step(ex);
    ex->timeline_valid = 0;
    if (step->batch_rows < 0) {
        st = pp__fail(err, PP_EINVAL, "rank %d: step.batch_rows=%d: must be >= 0 (0 means no padding)", ex->rank,
                      step->batch_rows);
        return pp__step_failed(ex, st, err);
    }
    if (!ex->forward_only && pp__ends_a_route(ex) && !ex->cb.loss) {
        st = pp__fail(err, PP_EINVAL, "rank %d: callbacks.loss: must not be NULL for a training step on the last "
                      "stage's rank", ex->rank);
        return pp__step_failed(ex, st, err);
    }
    if (!ex->forward_only && ex->has_b && !ex->cb.backward) {
        st = pp__fail(err, PP_EINVAL, "rank %d: callbacks.backward: must not be NULL for a training step", ex->rank);
        return pp__step_failed(ex, st, err);
    }
    if (ex->record) for (i = 0; i < 3 * ex->len; i++) ex->times[i] = -1;   /* -1: not run */
    st = pp__check_ranks_agree(ex, step, err);
    if (st != PP_OK) return pp__step_failed(ex, st, err);
    st = pp__walk(ex, err);
    if (st != PP_OK) return pp__step_failed(ex, st, err);
    {
        int kept = 0;
        for (i = 0; i < ex->M; i++) kept += ex->out_slot[i] >= 0;
        if (ex->live != kept) {
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d: %d tensors are still live at the end of the step "
                          "(a forward without its backward?)", ex->rank, ex->live - kept);
            return pp__step_failed(ex, st, err);
        }
    }
    /* loss and metrics: the last stage's sums, to every rank */
    memset(red, 0, sizeof red);
    red[0] = (float)ex->loss_sum;
    red[1] = (float)ex->weight_sum;
    for (i = 0; i < ex->num_metrics; i++) red[2 + i] = (float)ex->metric_sum[i];
    st = ex->tp.all_reduce(ex->tp.user, red, 2 + ex->num_metrics, ex->timeout, err);
    if (st != PP_OK) return pp__step_failed(ex, pp__at(ex, ex->len, st, err, "broadcasting the loss"), err);
    if (ex->record) {
        if (ex->timer.resolve) {
            st = ex->timer.resolve(ex->timer.user, ex->times, 3 * ex->len, err);
            if (st != PP_OK) return pp__step_failed(ex, st, err);
        }
        for (i = 0; i < ex->len; i++) {
            ex->t_start[i] = ex->times[3 * i];
            ex->t_ready[i] = ex->times[3 * i + 1];
            ex->t_end[i] = ex->times[3 * i + 2];
        }
        ex->timeline_valid = 1;
    }
    if (result) {
        result->weight = red[1];
        result->loss = red[1] != 0 ? red[0] / red[1] : 0.0f;
        for (i = 0; i < ex->num_metrics; i++) result->metrics[i] = red[2 + i];
        if (ex->forward_only && pp__ends_a_route(ex)) {
            for (i = 0; i < ex->M; i++) {
                ex->out_ptr[i] = pp__ptr(ex, ex->out_slot[i]);
                ex->out_bytes[i] = ex->out_slot[i] >= 0 ? ex->slots[ex->out_slot[i]].bytes : 0;
            }
            result->outputs = (const void *const *)ex->out_ptr;
            result->output_bytes = ex->out_bytes;
            result->num_outputs = ex->M;
        }
    }
    ex->steps++;
    ex->step = NULL;
    if (result) result->seconds = pp__now() - t0;
    return pp__ok(err);
}

void pp_executor_get_stats(const pp_executor *ex, pp_executor_stats *out)
{
    int i;
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!ex) return;
    out->planned_slots = ex->planned;
    out->peak_slots = ex->peak_live;
    for (i = 0; i < ex->nslots; i++) out->slots += ex->slots[i].ptr != NULL;
    out->bytes = ex->bytes_held;
    out->allocations = ex->allocations;
    out->transfers = ex->transfers_posted;
    out->groups = ex->groups_posted;
    out->steps = ex->steps;
    out->saved_slots_used = ex->saved_used;
}

int pp_executor_saved_slots(const pp_executor *ex)
{
    return ex ? ex->saved_slots : 0;
}

/* --- >>timeline (implementation) ------------------------------------------------------------ */

pp_status pp_executor_timeline(const pp_executor *ex, pp_timeline *out, pp_error *err)
{
    if (!ex || !out) return pp__fail(err, PP_EINVAL, "executor and out: must not be NULL");
    memset(out, 0, sizeof *out);
    if (!ex->record) return pp__fail(err, PP_EINVAL, "record_timeline: was 0 when the executor was created");
    if (!ex->timeline_valid) return pp__fail(err, PP_EINVAL, "rank %d: no step has completed yet", ex->rank);
    out->rank = ex->rank;
    out->length = ex->len;
    out->schedule = ex->sched;
    out->actions = ex->prog;
    out->start = ex->t_start;
    out->ready = ex->t_ready;
    out->end = ex->t_end;
    return pp__ok(err);
}

/* Checks the timelines' arrays; *t0, *t1: the earliest start and the latest end of any action. */
static pp_status pp__check_timelines(const pp_timeline *t, int count, double *t0, double *t1, pp_error *err)
{
    int r, i;
    if (!t || count < 1) return pp__fail(err, PP_EINVAL, "timelines (count=%d): must be given", count);
    *t0 = DBL_MAX; *t1 = -DBL_MAX;
    for (r = 0; r < count; r++) {
        if (t[r].length < 0 || (t[r].length > 0 && (!t[r].actions || !t[r].start || !t[r].ready || !t[r].end)))
            return pp__fail(err, PP_EINVAL, "timeline %d: length=%d but an array is NULL", r, t[r].length);
        for (i = 0; i < t[r].length; i++) {
            if (t[r].start[i] < 0) continue;
            if (t[r].start[i] < *t0) *t0 = t[r].start[i];
            if (t[r].end[i] > *t1) *t1 = t[r].end[i];
        }
    }
    if (*t0 == DBL_MAX) { *t0 = 0; *t1 = 0; }
    return PP_OK;
}

pp_status pp_timeline_write_chrome_trace(const pp_timeline *t, int count, FILE *out, pp_error *err)
{
    pp__text x = { NULL, 0, 0, 0 };
    double t0, t1;
    int r, i, first = 1;
    char txt[64];
    pp_status st = out ? pp__check_timelines(t, count, &t0, &t1, err)
                       : pp__fail(err, PP_EINVAL, "out: must be given");
    if (st != PP_OK) return st;
    pp__text_printf(&x, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
#define PP__SEP() do { pp__text_printf(&x, first ? "" : ",\n"); first = 0; } while (0)
    for (r = 0; r < count; r++) {
        int pid = t[r].rank;
        PP__SEP();
        pp__text_printf(&x, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", pid, pid);
        PP__SEP();
        pp__text_printf(&x, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", pid, pid);
        PP__SEP();
        pp__text_printf(&x, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}}", pid);
        PP__SEP();
        pp__text_printf(&x, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"comm\"}}", pid);
        for (i = 0; i < t[r].length; i++) {
            pp_action a = t[r].actions[i];
            if (t[r].start[i] < 0) continue;
            if (pp__is_comm(a.op)) {
                /* one slice per group: its first action names it, the rest go in args */
                int j = i, k;
                while (j + 1 < t[r].length && pp__is_comm(t[r].actions[j + 1].op) &&
                       t[r].actions[j + 1].group == a.group && t[r].start[j + 1] >= 0 &&
                       t[r].start[j + 1] == t[r].start[i])
                    j++;
                PP__SEP();
                pp_action_format(a, txt, sizeof txt);
                pp__text_printf(&x, "{\"name\":\"%s%s\",\"cat\":\"comm\",\"ph\":\"X\",\"pid\":%d,\"tid\":1,"
                                "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"actions\":\"", txt, j > i ? " +" : "", pid,
                                1e6 * (t[r].start[i] - t0), 1e6 * (t[r].end[i] - t[r].start[i]));
                for (k = i; k <= j; k++) {
                    pp_action_format(t[r].actions[k], txt, sizeof txt);
                    pp__text_printf(&x, "%s%s", k > i ? " " : "", txt);
                }
                pp__text_printf(&x, "\"}}");
                i = j;
                continue;
            }
            pp_action_format(a, txt, sizeof txt);
            if (t[r].ready[i] - t[r].start[i] > 1e-7) {
                PP__SEP();
                pp__text_printf(&x, "{\"name\":\"wait\",\"cat\":\"wait\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,"
                                "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"before\":\"%s\"}}", pid,
                                1e6 * (t[r].start[i] - t0), 1e6 * (t[r].ready[i] - t[r].start[i]), txt);
            }
            PP__SEP();
            pp__text_printf(&x, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,"
                            "\"dur\":%.3f,\"args\":{\"stage\":%d,\"microbatch\":%d}}", txt, pp_op_name((pp_op)a.op),
                            pid, 1e6 * (t[r].ready[i] - t0), 1e6 * (t[r].end[i] - t[r].ready[i]), (int)a.stage,
                            (int)a.mb);
        }
    }
#undef PP__SEP
    pp__text_printf(&x, "\n]}\n");
    if (x.failed) { pp__text_free(&x); return pp__fail(err, PP_ENOMEM, "out of memory while writing the trace"); }
    if (x.len && fwrite(x.data, 1, x.len, out) != x.len) { pp__text_free(&x); return pp__fail(err, PP_EIO, "trace: write failed"); }
    pp__text_free(&x);
    return pp__ok(err);
}

pp_status pp_timeline_idle(const pp_timeline *t, int count, pp_idle *idle, pp_error *err)
{
    const pp_schedule *s;
    double t0 = 0, t1 = 0, *f_end = NULL, *b_end = NULL;
    unsigned char *seen = NULL;
    size_t n, k;
    int r, i, h;
    pp_status st = PP_OK;
    if (!t || count < 1 || !idle) return pp__fail(err, PP_EINVAL, "timelines (count=%d) and per_rank: must be given", count);
    s = t[0].schedule;
    if (!s) return pp__fail(err, PP_EINVAL, "timeline 0: schedule is NULL (the producers of each input come from it)");
    if (count != s->pp)
        return pp__fail(err, PP_EINVAL, "count=%d: must be the schedule's pp=%d (every rank's timeline)", count, s->pp);
    seen = (unsigned char *)pp__calloc((size_t)count, 1);
    if (!seen) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < count && st == PP_OK; r++) {
        const pp_schedule *o = t[r].schedule;   /* executors keep copies: same shape is the same schedule */
        if (o && (o->pp != s->pp || o->num_stages != s->num_stages || o->mb != s->mb || o->kind != s->kind))
            st = pp__fail(err, PP_EINVAL, "timeline %d: a different schedule than timeline 0's (%s pp %d, %d stages, "
                          "mb %d against %s pp %d, %d stages, mb %d)", r, pp_schedule_kind_name(o->kind), o->pp,
                          o->num_stages, o->mb, pp_schedule_kind_name(s->kind), s->pp, s->num_stages, s->mb);
        else if (t[r].rank < 0 || t[r].rank >= s->pp || seen[t[r].rank])
            st = pp__fail(err, PP_EINVAL, "timeline %d: rank=%d: must be one of 0..%d, each once", r, t[r].rank, s->pp - 1);
        else if (t[r].length != s->length[t[r].rank])
            st = pp__fail(err, PP_EINVAL, "timeline %d: length=%d: rank %d's program has %d actions", r, t[r].length,
                          t[r].rank, s->length[t[r].rank]);
        else seen[t[r].rank] = 1;
    }
    PIPEPAR_FREE(seen);
    if (st == PP_OK) st = pp__check_timelines(t, count, &t0, &t1, err);
    if (st != PP_OK) return st;
    n = (size_t)s->num_stages * (size_t)s->mb;
    f_end = (double *)PIPEPAR_MALLOC((n ? n : 1) * sizeof(double));
    b_end = (double *)PIPEPAR_MALLOC((n ? n : 1) * sizeof(double));
    if (!f_end || !b_end) { PIPEPAR_FREE(f_end); PIPEPAR_FREE(b_end); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    for (k = 0; k < n; k++) f_end[k] = b_end[k] = -DBL_MAX;
    /* when each tensor was made: an overlapped F&B hands both halves' outputs over at its end */
    for (r = 0; r < count; r++)
        for (i = 0; i < t[r].length; i++) {
            int ops[2], stg[2], mbs[2], nh;
            if (t[r].start[i] < 0 || pp__is_comm(t[r].actions[i].op) || t[r].ready[i] < 0) continue;
            nh = pp__halves(t[r].actions[i], ops, stg, mbs);
            for (h = 0; h < nh; h++) {
                if (stg[h] < 0 || stg[h] >= s->num_stages || mbs[h] < 0 || mbs[h] >= s->mb) continue;
                k = PP__SM(s, stg[h], mbs[h]);
                if (ops[h] == PP_OP_F) f_end[k] = t[r].end[i];
                else if (ops[h] == PP_OP_B || ops[h] == PP_OP_I) b_end[k] = t[r].end[i];
            }
        }
    for (r = 0; r < count; r++) {
        pp_idle *o = &idle[t[r].rank];   /* by rank, whatever order the timelines came in */
        double prev = t0;
        memset(o, 0, sizeof *o);
        o->step = t1 - t0;
        for (i = 0; i < t[r].length; i++) {
            int ops[2], stg[2], mbs[2], nh, from;
            double gap, made = -DBL_MAX;
            if (pp__is_comm(t[r].actions[i].op) || t[r].start[i] < 0 || t[r].ready[i] < 0) continue;
            o->busy += t[r].end[i] - t[r].ready[i];
            gap = t[r].ready[i] - prev;
            if (gap > 0) {
                nh = pp__halves(t[r].actions[i], ops, stg, mbs);
                for (h = 0; h < nh; h++) {
                    double at;
                    if (stg[h] < 0 || stg[h] >= s->num_stages || mbs[h] < 0 || mbs[h] >= s->mb) continue;
                    /* off its microbatch's route (a timeline that is not the schedule's): no input to find */
                    if (!pp__on_route(s, stg[h], mbs[h])) continue;
                    if (!pp__cross_input(s, ops[h], stg[h], mbs[h], &from) || from < 0 || from >= s->num_stages) continue;
                    at = ops[h] == PP_OP_F ? f_end[PP__SM(s, from, mbs[h])] : b_end[PP__SM(s, from, mbs[h])];
                    if (at > made) made = at;
                }
                if (made == -DBL_MAX) o->wait_other += gap;
                else {
                    double c = made - prev;
                    if (c < 0) c = 0;
                    if (c > gap) c = gap;
                    o->wait_compute += c;
                    o->wait_transfer += gap - c;
                }
            }
            if (t[r].end[i] > prev) prev = t[r].end[i];
        }
        o->tail = t1 - prev;
    }
    PIPEPAR_FREE(f_end); PIPEPAR_FREE(b_end);
    return pp__ok(err);
}

pp_status pp_timeline_draw_ascii(const pp_timeline *t, int count, int width, FILE *out, pp_error *err)
{
    pp__text x = { NULL, 0, 0, 0 };
    double t0, t1, unit;
    char *line;
    int r, i, c, row, has_w = 0, has_i = 0;
    pp_status st = out ? pp__check_timelines(t, count, &t0, &t1, err)
                       : pp__fail(err, PP_EINVAL, "out: must be given");
    if (st != PP_OK) return st;
    if (width < 0 || width > 100000) return pp__fail(err, PP_EINVAL, "width=%d: must be between 1 and 100000 (0 means 96)", width);
    if (width == 0) width = 96;
    unit = t1 > t0 ? (t1 - t0) / width : 1;
    for (r = 0; r < count; r++)
        for (i = 0; i < t[r].length; i++) {
            if (t[r].actions[i].op == PP_OP_W) has_w = 1;
            if (t[r].actions[i].op == PP_OP_I) has_i = 1;
        }
    line = (char *)PIPEPAR_MALLOC((size_t)width + 1);
    if (!line) return pp__fail(err, PP_ENOMEM, "out of memory");
    pp__text_printf(&x, "measured  (one column = %.3g %s; cells show the microbatch)\n", unit < 1e-3 ? 1e6 * unit : 1e3 * unit,
                    unit < 1e-3 ? "us" : "ms");
    for (r = 0; r < count; r++) {
        const pp_schedule *sc = t[r].schedule;
        int nrows = 2 + has_w + (sc && sc->vpp > 1);
        for (row = 0; row < nrows; row++) {
            int want_chunk = sc && sc->vpp > 1 && row == nrows - 1;
            memset(line, want_chunk ? '.' : ' ', (size_t)width);
            line[width] = '\0';
            for (i = 0; i < t[r].length; i++) {
                pp_action a = t[r].actions[i];
                int ops[2], stg[2], mbs[2], nh, h, from, to;
                double a0 = t[r].ready[i], a1 = t[r].end[i];
                if (pp__is_comm(a.op) || t[r].start[i] < 0) continue;
                nh = pp__halves(a, ops, stg, mbs);
                from = (int)floor((a0 - t0) / unit + 0.5);
                to = (int)floor((a1 - t0) / unit + 0.5);
                if (to == from) to = from + 1;   /* show every action, however short */
                if (from < 0) from = 0;
                if (to > width) to = width;
                for (h = 0; h < nh; h++) {
                    int show = want_chunk || (row == 0 ? ops[h] == PP_OP_F
                                              : row == 1 ? (ops[h] == PP_OP_B || ops[h] == PP_OP_I)
                                                         : ops[h] == PP_OP_W);
                    if (!show) continue;
                    for (c = from; c < to; c++)
                        line[c] = want_chunk ? (char)('0' + pp_stage_chunk(sc, stg[h]) % 10) : pp__mb_char(mbs[h]);
                }
            }
            if (row == 0) pp__text_printf(&x, "rank %-3d %5s |%s|\n", t[r].rank, "F", line);
            else pp__text_printf(&x, "         %5s |%s|\n",
                                 want_chunk ? "chunk" : row == 1 ? (has_i ? "B/I" : "B") : "W", line);
        }
    }
    pp__text_printf(&x, "step %.3g ms; busy per rank:", 1e3 * (t1 - t0));
    for (r = 0; r < count; r++) {
        double busy = 0;
        for (i = 0; i < t[r].length; i++)
            if (!pp__is_comm(t[r].actions[i].op) && t[r].start[i] >= 0) busy += t[r].end[i] - t[r].ready[i];
        pp__text_printf(&x, " %.0f%%", t1 > t0 ? 100.0 * busy / (t1 - t0) : 0.0);
    }
    pp__text_printf(&x, "\n");
    PIPEPAR_FREE(line);
    if (x.failed) { pp__text_free(&x); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    if (x.len && fwrite(x.data, 1, x.len, out) != x.len) { pp__text_free(&x); return pp__fail(err, PP_EIO, "write failed"); }
    pp__text_free(&x);
    return pp__ok(err);
}

pp_status pp_timeline_write_svg(const pp_timeline *t, int count, const pp_sim_result *sim, FILE *out, pp_error *err)
{
    pp__svg_panel panels[2];
    const pp_schedule *s = NULL;
    const pp_action **actions = NULL;
    const double **ptr = NULL;     /* [5][count]: measured wait, begin, end; simulated begin, end */
    int *ids = NULL, r, i, n = count, k = 0;   /* ids [3][count]: measured ranks, simulated, lengths */
    double *idle = NULL, t0, t1, mean = 0;
    pp_status st = out ? pp__check_timelines(t, count, &t0, &t1, err)
                       : pp__fail(err, PP_EINVAL, "out: must be given");
    if (st != PP_OK) return st;
    for (r = 0; r < count && !s; r++) s = t[r].schedule;
    if (sim) {
        if (!s) return pp__fail(err, PP_EINVAL, "sim: given, but no timeline names its schedule");
        if (sim->pp != s->pp || count != s->pp)
            return pp__fail(err, PP_EINVAL, "sim: computed for pp=%d, but %d timelines of a pp=%d schedule", sim->pp,
                            count, s->pp);
        for (r = 0; r < s->pp; r++)
            if (sim->length[r] != s->length[r])
                return pp__fail(err, PP_EINVAL, "sim: rank %d has %d timed actions but the schedule has %d "
                                "(simulate the lowered schedule that ran)", r, sim->length[r], s->length[r]);
    }
    actions = (const pp_action **)PIPEPAR_MALLOC(2 * (size_t)n * sizeof(*actions));
    ptr = (const double **)PIPEPAR_MALLOC(5 * (size_t)n * sizeof(*ptr));
    ids = (int *)PIPEPAR_MALLOC(3 * (size_t)n * sizeof(int));
    idle = (double *)PIPEPAR_MALLOC((size_t)n * sizeof(double));
    if (!actions || !ptr || !ids || !idle) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    if (sim) pp__svg_sim_panel(s, sim, &panels[k++], ids + n, actions + n, ptr + 3 * n, ptr + 4 * n);
    memset(&panels[k], 0, sizeof panels[k]);
    for (r = 0; r < count; r++) {
        double busy = 0;
        ids[r] = t[r].rank;
        ids[2 * n + r] = t[r].length;
        actions[r] = t[r].actions;
        ptr[r] = t[r].start;
        ptr[n + r] = t[r].ready;
        ptr[2 * n + r] = t[r].end;
        for (i = 0; i < t[r].length; i++)
            if (!pp__is_comm(t[r].actions[i].op) && t[r].start[i] >= 0) busy += t[r].end[i] - t[r].ready[i];
        idle[r] = t1 > t0 ? 1 - busy / (t1 - t0) : 0;
        mean += idle[r] / count;
    }
    if (s)
        snprintf(panels[k].title, sizeof panels[k].title, "%s, pp=%d, vpp=%d, mb=%d: measured, idle %.1f%% (mean "
                 "over ranks)", pp_schedule_kind_name(s->kind), s->pp, s->vpp, s->mb, 100.0 * mean);
    else
        snprintf(panels[k].title, sizeof panels[k].title, "measured step: idle %.1f%% (mean over ranks)", 100.0 * mean);
    snprintf(panels[k].subtitle, sizeof panels[k].subtitle, "measured step: %.3f ms; a box runs from when its "
             "inputs were there to its end, the grey strip below it is the wait for them", 1e3 * (t1 - t0));
    panels[k].axis = "time (ms)";
    panels[k].to_axis = 1e3;
    panels[k].s = s;
    panels[k].ranks = count;
    panels[k].rank_id = ids;
    panels[k].length = ids + 2 * n;
    panels[k].actions = actions;
    panels[k].wait = ptr;
    panels[k].begin = ptr + n;
    panels[k].end = ptr + 2 * n;
    panels[k].idle = idle;
    panels[k].t0 = t0;
    panels[k].t1 = t1;
    st = pp__svg_write(panels, k + 1, out, err);
done:
    PIPEPAR_FREE((void *)actions);
    PIPEPAR_FREE((void *)ptr);
    PIPEPAR_FREE(ids);
    PIPEPAR_FREE(idle);
    return st;
}


/* --- >>adapt (implementation) ------------------------------------------------------------------ */

/* Tags of a layer move: the stage field holds this code (as the MIMO bridge's do), the
 * microbatch field the transfer's index g * tensors + k. */
#define PP__MOVE_STAGE 0xFFFE00

/* The median of v[0..n) (sorted in place, pp__double_cmp of >>draw); 0 for n = 0. */
static double pp__median(double *v, int n)
{
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof *v, pp__double_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

pp_status pp_speed_summarize(const pp_timeline *t, const double *stage_work, int num_stages,
                             float summary[PP_SPEED_SUMMARY], pp_error *err)
{
    double *v;
    int n[PP_SPEED_SUMMARY] = { 0, 0, 0, 0 }, i, k;
    if (!t || !stage_work || !summary)
        return pp__fail(err, PP_EINVAL, "pp_speed_summarize: t, stage_work and summary must not be NULL");
    if (num_stages < 1 || (t->schedule && num_stages != t->schedule->num_stages))
        return pp__fail(err, PP_EINVAL, "pp_speed_summarize: num_stages=%d: must be the schedule's (%d)", num_stages,
                        t->schedule ? t->schedule->num_stages : 0);
    if (t->length < 0 || (t->length > 0 && (!t->actions || !t->ready || !t->end)))
        return pp__fail(err, PP_EINVAL, "pp_speed_summarize: rank %d's timeline has no times (length %d)", t->rank,
                        t->length);
    for (i = 0; i < num_stages; i++)
        if (!pp__finite_nonneg(stage_work[i]))
            return pp__fail(err, PP_EINVAL, "stage_work[%d]=%g: must be a finite number >= 0", i, stage_work[i]);
    v = (double *)pp__calloc((size_t)t->length * PP_SPEED_SUMMARY + 1, sizeof(double));
    if (!v) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (i = 0; i < t->length; i++) {
        pp_action a = t->actions[i];
        double d;
        k = a.op == PP_OP_F ? 0 : a.op == PP_OP_I ? 1 : a.op == PP_OP_W ? 2 : a.op == PP_OP_B ? 3 : -1;
        if (k < 0 || (t->start && t->start[i] < 0) || t->ready[i] < 0) continue;
        if (a.stage < 0 || a.stage >= num_stages) {
            PIPEPAR_FREE(v);
            return pp__fail(err, PP_EINVAL, "pp_speed_summarize: rank %d action %d: stage %d of %d stages", t->rank, i,
                            a.stage, num_stages);
        }
        d = t->end[i] - t->ready[i];
        if (stage_work[a.stage] <= 0 || !(d >= 0)) continue;
        v[(size_t)k * t->length + n[k]++] = d / stage_work[a.stage];
    }
    for (k = 0; k < PP_SPEED_SUMMARY; k++) summary[k] = (float)pp__median(v + (size_t)k * t->length, n[k]);
    PIPEPAR_FREE(v);
    return pp__ok(err);
}

pp_status pp_speed_estimate(const float *summaries, int pp, double *rank_speed, pp_layer_costs *layer, pp_error *err)
{
    double *per = NULL, *kind = NULL, fastest = 0;
    int r, k;
    if (!summaries || !rank_speed)
        return pp__fail(err, PP_EINVAL, "pp_speed_estimate: summaries and rank_speed must not be NULL");
    if (pp < 1 || pp > (1 << 20)) return pp__fail(err, PP_EINVAL, "pp=%d: must be between 1 and %d", pp, 1 << 20);
    for (r = 0; r < pp; r++) {
        for (k = 0; k < PP_SPEED_SUMMARY; k++) {
            float x = summaries[(size_t)r * PP_SPEED_SUMMARY + k];
            if (!(x >= 0 && x <= FLT_MAX))
                return pp__fail(err, PP_EINVAL, "summaries[%d]=%g (rank %d): must be a finite number >= 0",
                                r * PP_SPEED_SUMMARY + k, (double)x, r);
        }
        if (!(summaries[(size_t)r * PP_SPEED_SUMMARY] > 0))
            return pp__fail(err, PP_EINVAL, "pp_speed_estimate: rank %d ran no forward with work in its summary (a "
                            "step of its program, timed, and stage_work > 0 where it computes)", r);
    }
    per = (double *)pp__calloc((size_t)pp, sizeof(double));
    kind = (double *)pp__calloc((size_t)pp, sizeof(double));
    if (!per || !kind) { PIPEPAR_FREE(per); PIPEPAR_FREE(kind); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    for (r = 0; r < pp; r++) {   /* a rank's time per layer: F, then I + W, or B without them */
        const float *x = summaries + (size_t)r * PP_SPEED_SUMMARY;
        per[r] = (double)x[0] + (x[1] > 0 || x[2] > 0 ? (double)x[1] + (double)x[2] : (double)x[3]);
        if (r == 0 || per[r] < fastest) fastest = per[r];
    }
    for (r = 0; r < pp; r++) rank_speed[r] = fastest / per[r];
    if (layer) {
        double f[PP_SPEED_SUMMARY];
        for (k = 0; k < PP_SPEED_SUMMARY; k++) {
            for (r = 0; r < pp; r++) kind[r] = (double)summaries[(size_t)r * PP_SPEED_SUMMARY + k] * rank_speed[r];
            f[k] = pp__median(kind, pp);
        }
        memset(layer, 0, sizeof *layer);
        layer->f = f[0];
        if (f[1] > 0 || f[2] > 0) { layer->i = f[1]; layer->w = f[2]; }
        else layer->i = layer->w = f[3] / 2;
        layer->memory = 1;
    }
    PIPEPAR_FREE(per); PIPEPAR_FREE(kind);
    return pp__ok(err);
}

pp_status pp_speed_from_timelines(const pp_timeline *ranks, int count, const double *stage_work, int num_stages,
                                  double *rank_speed, pp_layer_costs *layer, pp_error *err)
{
    float *sum;
    pp_status st = PP_OK;
    int r;
    if (!ranks || count < 1 || count > (1 << 20))
        return pp__fail(err, PP_EINVAL, "pp_speed_from_timelines: ranks=%p count=%d: needs every rank's timeline",
                        (const void *)ranks, count);
    sum = (float *)pp__calloc((size_t)count * PP_SPEED_SUMMARY, sizeof(float));
    if (!sum) return pp__fail(err, PP_ENOMEM, "out of memory");
    for (r = 0; r < count && st == PP_OK; r++) {
        if (ranks[r].rank != r)
            st = pp__fail(err, PP_EINVAL, "pp_speed_from_timelines: ranks[%d] is rank %d's timeline (give them in rank "
                          "order)", r, ranks[r].rank);
        else st = pp_speed_summarize(&ranks[r], stage_work, num_stages, sum + (size_t)r * PP_SPEED_SUMMARY, err);
    }
    if (st == PP_OK) st = pp_speed_estimate(sum, count, rank_speed, layer, err);
    PIPEPAR_FREE(sum);
    return st;
}

pp_status pp_speed_exchange(const pp_transport *t, const pp_timeline *mine, const double *stage_work, int num_stages,
                            double timeout_s, double *rank_speed, pp_layer_costs *layer, pp_error *err)
{
    float *sum;
    double timeout;
    pp_status st;
    if (!t || !t->all_reduce)
        return pp__fail(err, PP_EINVAL, "pp_speed_exchange: transport%s must not be NULL", t ? ".all_reduce" : "");
    if (t->world < 1 || t->rank < 0 || t->rank >= t->world)
        return pp__fail(err, PP_EINVAL, "pp_speed_exchange: transport.rank=%d of world=%d: must be between 0 and "
                        "world-1", t->rank, t->world);
    if (!(timeout_s >= 0) || timeout_s > 1e9)
        return pp__fail(err, PP_EINVAL, "pp_speed_exchange: timeout_s=%g: must be >= 0 (0 means 60 s)", timeout_s);
    if ((size_t)t->world * PP_SPEED_SUMMARY > (size_t)INT_MAX)
        return pp__fail(err, PP_EINVAL, "pp_speed_exchange: world=%d: too many ranks", t->world);
    timeout = timeout_s > 0 ? timeout_s : 60.0;
    sum = (float *)pp__calloc((size_t)t->world * PP_SPEED_SUMMARY, sizeof(float));
    if (!sum) return pp__fail(err, PP_ENOMEM, "out of memory");
    /* each rank fills its own 4 floats and zeros elsewhere: the sum is every rank's, exactly */
    st = pp_speed_summarize(mine, stage_work, num_stages, sum + (size_t)t->rank * PP_SPEED_SUMMARY, err);
    if (st == PP_OK) st = t->all_reduce(t->user, sum, t->world * PP_SPEED_SUMMARY, timeout, err);
    if (st == PP_OK) st = pp_speed_estimate(sum, t->world, rank_speed, layer, err);
    PIPEPAR_FREE(sum);
    return st;
}

pp_status pp_layers_replan(const pp_replan_config *cfg, int *next, double *gain, pp_error *err)
{
    pp__balance b;
    int *count = NULL, s, total = 0, fits_now, fits_new;
    double *sc = NULL, *rt = NULL, now, then;
    pp_status st;
    if (gain) *gain = 0;
    if (!cfg || !next || !cfg->current)
        return pp__fail(err, PP_EINVAL, "pp_layers_replan: cfg, cfg->current and next must not be NULL");
    if (!cfg->balance.rank_speed)
        return pp__fail(err, PP_EINVAL, "balance.rank_speed: NULL; re-planning needs the measured speeds "
                        "(pp_speed_exchange)");
    if (!(cfg->min_gain >= 0 && cfg->min_gain < 1))
        return pp__fail(err, PP_EINVAL, "min_gain=%g: must be at least 0 and below 1", cfg->min_gain);
    if ((st = pp__balance_init(&cfg->balance, &b, err)) != PP_OK) goto done;
    for (s = 0; s < b.S; s++) {
        if (cfg->current[s] < 0 || cfg->current[s] > b.n) {
            st = pp__fail(err, PP_EINVAL, "current[%d]=%d: must be between 0 and num_layers=%d", s, cfg->current[s], b.n);
            goto done;
        }
        total += cfg->current[s];
    }
    if (total != b.n) {
        st = pp__fail(err, PP_EINVAL, "current: its %d stages hold %d layers, but num_layers=%d", b.S, total, b.n);
        goto done;
    }
    count = (int *)pp__calloc((size_t)b.S, sizeof(int));
    sc = (double *)pp__calloc((size_t)b.S, sizeof(double));
    rt = (double *)pp__calloc((size_t)b.pp, sizeof(double));
    if (!count || !sc || !rt) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    if ((st = pp__balance_stages(&b, count, err)) != PP_OK) goto done;
    if (b.vpp > 1 && (st = pp__balance_refine(&b, count, err)) != PP_OK) goto done;
    now = pp__balance_eval(&b, cfg->current, sc, NULL, rt, NULL, &fits_now);
    then = pp__balance_eval(&b, count, sc, NULL, rt, NULL, &fits_new);
    if ((fits_new && !fits_now) || (now > 0 && (now - then) / now > cfg->min_gain)) {
        memcpy(next, count, (size_t)b.S * sizeof *next);
        if (gain) *gain = now > 0 && then < now ? (now - then) / now : 0;
    } else memcpy(next, cfg->current, (size_t)b.S * sizeof *next);
    st = pp__ok(err);
done:
    pp__balance_free(&b);
    PIPEPAR_FREE(count); PIPEPAR_FREE(sc); PIPEPAR_FREE(rt);
    return st;
}

pp_status pp_layers_owners(const int *stage_layers, int pp, int vpp, int v_placement, int num_layers, int *owner,
                           pp_error *err)
{
    int s, k, g = 0;
    if (!stage_layers || !owner) return pp__fail(err, PP_EINVAL, "pp_layers_owners: stage_layers and owner must not be NULL");
    if (pp < 1 || vpp < 1 || (double)pp * vpp > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "pp=%d, vpp=%d: each must be at least 1, pp*vpp at most %d", pp, vpp,
                        PP__LAYERS_MAX);
    if (v_placement && vpp != 2)
        return pp__fail(err, PP_EINVAL, "v_placement=%d: the V placement holds 2 stages a rank, but vpp=%d", v_placement,
                        vpp);
    if (num_layers < 0 || num_layers > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "num_layers=%d: must be between 0 and %d", num_layers, PP__LAYERS_MAX);
    for (s = 0; s < pp * vpp; s++) {
        int r = v_placement ? (s < pp ? s : 2 * pp - 1 - s) : s % pp;
        if (stage_layers[s] < 0 || stage_layers[s] > num_layers - g)
            return pp__fail(err, PP_EINVAL, "stage_layers[%d]=%d: the stages hold more than num_layers=%d", s,
                            stage_layers[s], num_layers);
        for (k = 0; k < stage_layers[s]; k++) owner[g++] = r;
    }
    if (g != num_layers)
        return pp__fail(err, PP_EINVAL, "stage_layers: the %d stages hold %d layers, but num_layers=%d", pp * vpp, g,
                        num_layers);
    return pp__ok(err);
}

pp_status pp_layers_move(const pp_transport *t, const int *old_owner, const int *new_owner, int num_layers,
                         int tensors, void *const *buf, const size_t *bytes, double timeout_s, pp_error *err)
{
    pp_transfer *xf = NULL;
    void *handle = NULL;
    int g, k, n = 0, me;
    pp_status st;
    if (!t || !old_owner || !new_owner || !bytes)
        return pp__fail(err, PP_EINVAL, "pp_layers_move: t, old_owner, new_owner and bytes must not be NULL");
    if (t->world < 1 || t->rank < 0 || t->rank >= t->world)
        return pp__fail(err, PP_EINVAL, "pp_layers_move: transport.rank=%d of world=%d: must be between 0 and "
                        "world-1", t->rank, t->world);
    if (num_layers < 0 || tensors < 1 || (double)num_layers * tensors >= (double)(1 << 24))
        return pp__fail(err, PP_EINVAL, "num_layers=%d, tensors=%d: need tensors >= 1 and num_layers * tensors "
                        "below 2^24", num_layers, tensors);
    if (!(timeout_s >= 0) || timeout_s > 1e9)
        return pp__fail(err, PP_EINVAL, "pp_layers_move: timeout_s=%g: must be >= 0 (0 means 60 s)", timeout_s);
    me = t->rank;
    for (g = 0; g < num_layers; g++) {
        if (old_owner[g] < 0 || old_owner[g] >= t->world || new_owner[g] < 0 || new_owner[g] >= t->world)
            return pp__fail(err, PP_EINVAL, "layer %d: owners %d -> %d: must be ranks of the transport (0..%d)", g,
                            old_owner[g], new_owner[g], t->world - 1);
        if (old_owner[g] == new_owner[g] || (old_owner[g] != me && new_owner[g] != me)) continue;
        for (k = 0; k < tensors; k++) {
            if (bytes[(size_t)g * tensors + k] == 0) continue;
            if (!buf || !buf[(size_t)g * tensors + k])
                return pp__fail(err, PP_EINVAL, "layer %d tensor %d: rank %d %s it, but buf[%d] is NULL", g, k, me,
                                old_owner[g] == me ? "sends" : "receives", g * tensors + k);
            n++;
        }
    }
    if (n == 0) return pp__ok(err);
    if (!t->post || !t->wait) return pp__fail(err, PP_EINVAL, "pp_layers_move: transport.post and .wait must be set");
    xf = (pp_transfer *)pp__calloc((size_t)n, sizeof *xf);
    if (!xf) return pp__fail(err, PP_ENOMEM, "out of memory");
    n = 0;
    for (g = 0; g < num_layers; g++) {   /* every rank in layer order: a transport matching by order agrees */
        if (old_owner[g] == new_owner[g] || (old_owner[g] != me && new_owner[g] != me)) continue;
        for (k = 0; k < tensors; k++) {
            size_t at = (size_t)g * tensors + k;
            if (bytes[at] == 0) continue;
            xf[n].is_send = old_owner[g] == me;
            xf[n].peer = xf[n].is_send ? new_owner[g] : old_owner[g];
            xf[n].tag = pp_transfer_tag(PP_OP_SEND_F, PP__MOVE_STAGE, (int)at, 0);
            xf[n].buf = buf[at];
            xf[n].bytes = bytes[at];
            n++;
        }
    }
    st = t->post(t->user, xf, n, &handle, err);
    if (st == PP_OK) st = t->wait(t->user, handle, timeout_s > 0 ? timeout_s : 60.0, err);
    PIPEPAR_FREE(xf);
    return st == PP_OK ? pp__ok(err) : st;
}


/* --- >>mimo (implementation) ------------------------------------------------------------------ */

/* Tags of transfers outside a pipeline step: the stage field holds one of these codes, so they
 * never meet a pipeline transfer's tag between the same two ranks. */
#define PP__MIMO_BRIDGE_STAGE 0xFFFF00   /* + encoder index: colocated bridge exchanges */
#define PP__MIMO_SUM_STAGE    0xFFFFF0   /* + id: pp_mimo_group_sum */

const char *pp_mimo_layout_name(pp_mimo_layout layout)
{
    switch (layout) {
    case PP_MIMO_COLOCATED: return "colocated";
    case PP_MIMO_NON_COLOCATED: return "non-colocated";
    case PP_MIMO_MIXED: return "mixed";
    default: return "?";
    }
}

/* "ranks 2-5" or "rank 2", into buf. */
static const char *pp__mimo_ranks(char *buf, size_t size, int first, int count)
{
    if (count == 1) snprintf(buf, size, "rank %d", first);
    else snprintf(buf, size, "ranks %d-%d", first, first + count - 1);
    return buf;
}

static int pp__mimo_name_ok(const char *name)
{
    size_t i, n;
    const char *end = (const char *)memchr(name, '\0', PP_MIMO_NAME_SIZE);
    if (!end) return 0;
    n = (size_t)(end - name);
    if (n == 0) return 0;
    for (i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

int pp_mimo_find(const pp_mimo *m, const char *name)
{
    int i;
    if (!m || !name) return -1;
    for (i = 0; i < m->num_modules; i++)
        if (strcmp(m->modules[i].name, name) == 0) return i;
    return -1;
}

pp_status pp_mimo_init(const pp_mimo_config *cfg, pp_mimo *m, pp_error *err)
{
    const char *lang;
    int i, j, end = 0, all_coincide = 1, all_disjoint = 1, cover;
    char a[48], b[48];
    if (!cfg || !m) return pp__fail(err, PP_EINVAL, "pp_mimo_init: cfg and m must not be NULL");
    memset(m, 0, sizeof *m);
    if (cfg->num_modules < 1 || cfg->num_modules > PP_MIMO_MAX_MODULES)
        return pp__fail(err, PP_EINVAL, "num_modules=%d: must be between 1 and PP_MIMO_MAX_MODULES=%d",
                        cfg->num_modules, PP_MIMO_MAX_MODULES);
    if (!cfg->modules) return pp__fail(err, PP_EINVAL, "modules: must not be NULL (num_modules=%d)", cfg->num_modules);
    if (cfg->world < 0) return pp__fail(err, PP_EINVAL, "world=%d: must be >= 1 (0 means the end of the last grid)", cfg->world);
    for (i = 0; i < cfg->num_modules; i++) {
        const pp_mimo_module_config *mc = &cfg->modules[i];
        pp_mimo_module *mod = &m->modules[i];
        pp_grid_config gc;
        pp_error inner;
        long long size;
        int tp, cp, dp, pp, ep;
        if (!pp__mimo_name_ok(mc->name))
            return pp__fail(err, PP_EINVAL, "modules[%d].name='%.*s': must be 1 to %d characters of A-Z a-z 0-9 _ .", i,
                            PP_MIMO_NAME_SIZE - 1, mc->name, PP_MIMO_NAME_SIZE - 1);
        for (j = 0; j < i; j++)
            if (strcmp(m->modules[j].name, mc->name) == 0)
                return pp__fail(err, PP_EINVAL, "module %s: the name is used twice (modules[%d] and modules[%d])",
                                mc->name, j, i);
        if (!memchr(mc->order, '\0', PP_MIMO_ORDER_SIZE))
            return pp__fail(err, PP_EINVAL, "module %s: order: not NUL-terminated within %d characters", mc->name,
                            PP_MIMO_ORDER_SIZE);
        if (mc->offset < 0)
            return pp__fail(err, PP_EINVAL, "module %s: offset=%d: must be >= 0", mc->name, mc->offset);
        if (mc->tp < 0 || mc->cp < 0 || mc->dp < 0 || mc->pp < 0 || mc->ep < 0) {
            const char *k = mc->tp < 0 ? "tp" : mc->cp < 0 ? "cp" : mc->dp < 0 ? "dp" : mc->pp < 0 ? "pp" : "ep";
            int v = mc->tp < 0 ? mc->tp : mc->cp < 0 ? mc->cp : mc->dp < 0 ? mc->dp : mc->pp < 0 ? mc->pp : mc->ep;
            return pp__fail(err, PP_EINVAL, "module %s: %s=%d: must be >= 1 (0 means 1)", mc->name, k, v);
        }
        tp = mc->tp ? mc->tp : 1; cp = mc->cp ? mc->cp : 1; dp = mc->dp ? mc->dp : 1;
        pp = mc->pp ? mc->pp : 1; ep = mc->ep ? mc->ep : 1;
        size = tp;   /* factor by factor: stops past the limit before a product can overflow */
        if (size <= (1 << 24)) size *= cp;
        if (size <= (1 << 24)) size *= dp;
        if (size <= (1 << 24)) size *= pp;
        if (size > (1 << 24) || (long long)mc->offset + size > (1 << 24))
            return pp__fail(err, PP_EINVAL, "module %s: offset=%d + tp*cp*dp*pp = %lld ranks: past the limit of %d ranks",
                            mc->name, mc->offset, size, 1 << 24);
        memset(&gc, 0, sizeof gc);
        gc.world = (int)size; gc.tp = tp; gc.cp = cp; gc.dp = dp; gc.pp = pp;
        gc.order = mc->order[0] ? mc->order : NULL;
        if (pp_grid_init(&gc, &mod->grid, &inner) != PP_OK)
            return pp__fail(err, inner.status, "module %s: %s", mc->name, inner.message);
        if ((cp * dp) % ep != 0)
            return pp__fail(err, PP_EINVAL, "module %s: ep=%d: must divide cp*dp = %d (experts are sharded over the "
                            "cp x dp ranks of a stage)", mc->name, ep, cp * dp);
        memcpy(mod->name, mc->name, PP_MIMO_NAME_SIZE);
        mod->offset = mc->offset;
        mod->size = (int)size;
        mod->ep = ep;
        if (mod->offset + mod->size > end) end = mod->offset + mod->size;
    }
    m->num_modules = cfg->num_modules;
    lang = cfg->language ? cfg->language : "language";
    m->language = pp_mimo_find(m, lang);
    if (m->language < 0) {
        pp__text t;
        memset(&t, 0, sizeof t);
        for (i = 0; i < m->num_modules; i++) pp__text_printf(&t, "%s%s", i ? ", " : "", m->modules[i].name);
        pp__fail(err, PP_EINVAL, "no module named '%.31s' (the language model): name one so, or set language to the "
                 "language model's name (modules: %s)", lang, t.data ? t.data : "");
        pp__text_free(&t);
        return PP_EINVAL;
    }
    if (cfg->world > 0) {
        for (i = 0; i < m->num_modules; i++) {
            const pp_mimo_module *mod = &m->modules[i];
            if (mod->offset + mod->size > cfg->world)
                return pp__fail(err, PP_EINVAL, "module %s: %s (offset %d + tp*cp*dp*pp %d) go past world=%d", mod->name,
                                pp__mimo_ranks(a, sizeof a, mod->offset, mod->size), mod->offset, mod->size,
                                cfg->world);
        }
        m->world = cfg->world;
    } else {
        m->world = end;
    }
    /* Two grids: the same ranks, or none in common. */
    for (i = 0; i < m->num_modules; i++)
        for (j = i + 1; j < m->num_modules; j++) {
            const pp_mimo_module *x = &m->modules[i], *y = &m->modules[j];
            int lo = x->offset > y->offset ? x->offset : y->offset;
            int hi = x->offset + x->size < y->offset + y->size ? x->offset + x->size : y->offset + y->size;
            if (lo >= hi) { all_coincide = 0; continue; }
            if (x->offset == y->offset && x->size == y->size) { all_disjoint = 0; continue; }
            {
                char c[48];
                return pp__fail(err, PP_EINVAL, "modules %s (%s) and %s (%s) share %s but do not coincide: two grids "
                                "must cover the same ranks (colocated) or none in common (non-colocated)", x->name,
                                pp__mimo_ranks(a, sizeof a, x->offset, x->size), y->name,
                                pp__mimo_ranks(b, sizeof b, y->offset, y->size), pp__mimo_ranks(c, sizeof c, lo, hi - lo));
            }
        }
    /* Every rank in some grid: walk up from rank 0 over the grids that start at or before it. */
    for (cover = 0; cover < m->world;) {
        int next = -1, gap_end = m->world;
        for (i = 0; i < m->num_modules; i++) {
            const pp_mimo_module *mod = &m->modules[i];
            if (mod->offset <= cover && mod->offset + mod->size > cover && mod->offset + mod->size > next)
                next = mod->offset + mod->size;
            if (mod->offset > cover && mod->offset < gap_end) gap_end = mod->offset;
        }
        if (next < 0) {
            pp__text t;
            memset(&t, 0, sizeof t);
            for (i = 0; i < m->num_modules; i++)
                pp__text_printf(&t, "%s%s: %s", i ? ", " : "", m->modules[i].name,
                                pp__mimo_ranks(a, sizeof a, m->modules[i].offset, m->modules[i].size));
            pp__fail(err, PP_EINVAL, "%s of world=%d belong%s to no module grid (%s): every rank must run at least one "
                     "module", pp__mimo_ranks(b, sizeof b, cover, gap_end - cover), m->world,
                     gap_end - cover == 1 ? "s" : "", t.data ? t.data : "");
            pp__text_free(&t);
            return PP_EINVAL;
        }
        cover = next;
    }
    m->layout = all_coincide ? PP_MIMO_COLOCATED : all_disjoint ? PP_MIMO_NON_COLOCATED : PP_MIMO_MIXED;
    return pp__ok(err);
}

pp_status pp_mimo_module_parse(const char *text, pp_mimo_module_config *out, pp_error *err)
{
    const char *colon, *p;
    unsigned seen = 0;
    static const char *const keys[] = { "offset", "tp", "cp", "dp", "pp", "ep", "order" };
    if (!text || !out) return pp__fail(err, PP_EINVAL, "pp_mimo_module_parse: text and out must not be NULL");
    memset(out, 0, sizeof *out);
    colon = strchr(text, ':');
    if (!colon || colon == text)
        return pp__fail(err, PP_EINVAL, "'%.80s': expected NAME:key=value,... e.g. vision:offset=0,tp=1,pp=1,dp=2", text);
    if ((size_t)(colon - text) >= PP_MIMO_NAME_SIZE)
        return pp__fail(err, PP_EINVAL, "'%.80s': the name is longer than %d characters", text, PP_MIMO_NAME_SIZE - 1);
    memcpy(out->name, text, (size_t)(colon - text));
    out->name[colon - text] = '\0';
    if (!pp__mimo_name_ok(out->name))
        return pp__fail(err, PP_EINVAL, "'%.80s': name '%s' must be characters of A-Z a-z 0-9 _ .", text, out->name);
    p = colon + 1;
    while (*p) {
        const char *eq = strchr(p, '='), *comma = strchr(p, ',');
        const char *vend = comma ? comma : p + strlen(p);
        size_t klen, vlen;
        int k, nkeys = (int)(sizeof keys / sizeof keys[0]);
        if (!eq || eq > vend)
            return pp__fail(err, PP_EINVAL, "'%.80s': '%.*s' is not key=value", text, (int)(vend - p > 24 ? 24 : vend - p), p);
        klen = (size_t)(eq - p);
        vlen = (size_t)(vend - eq - 1);
        for (k = 0; k < nkeys; k++)
            if (strlen(keys[k]) == klen && strncmp(p, keys[k], klen) == 0) break;
        if (k == nkeys)
            return pp__fail(err, PP_EINVAL, "'%.80s': '%.*s' is not a key (offset, tp, cp, dp, pp, ep, order)", text,
                            (int)(klen > 24 ? 24 : klen), p);
        if (seen & (1u << k)) return pp__fail(err, PP_EINVAL, "'%.80s': %s appears twice", text, keys[k]);
        seen |= 1u << k;
        if (vlen == 0) return pp__fail(err, PP_EINVAL, "'%.80s': %s has no value", text, keys[k]);
        if (k == 6) {
            if (vlen >= PP_MIMO_ORDER_SIZE)
                return pp__fail(err, PP_EINVAL, "'%.80s': order is longer than %d characters", text, PP_MIMO_ORDER_SIZE - 1);
            memcpy(out->order, eq + 1, vlen);
            out->order[vlen] = '\0';
        } else {
            long v = 0;
            size_t d;
            for (d = 0; d < vlen; d++) {
                char c = eq[1 + d];
                if (c < '0' || c > '9' || v > (1L << 24))
                    return pp__fail(err, PP_EINVAL, "'%.80s': %s=%.*s: expected a whole number from %d to %d", text,
                                    keys[k], (int)(vlen > 16 ? 16 : vlen), eq + 1, k == 0 ? 0 : 1, 1 << 24);
                v = v * 10 + (c - '0');
            }
            if (v > (1L << 24) || (k > 0 && v < 1))
                return pp__fail(err, PP_EINVAL, "'%.80s': %s=%ld: must be from %d to %d", text, keys[k], v, k == 0 ? 0 : 1,
                                1 << 24);
            switch (k) {
            case 0: out->offset = (int)v; break;
            case 1: out->tp = (int)v; break;
            case 2: out->cp = (int)v; break;
            case 3: out->dp = (int)v; break;
            case 4: out->pp = (int)v; break;
            default: out->ep = (int)v; break;
            }
        }
        p = comma ? comma + 1 : vend;
        if (comma && !*p) return pp__fail(err, PP_EINVAL, "'%.80s': ends with ','", text);
    }
    return pp__ok(err);
}

int pp_mimo_rank(const pp_mimo *m, int module, const int coord[PP_DIM_COUNT])
{
    int local;
    if (!m || module < 0 || module >= m->num_modules) return -1;
    local = pp_grid_rank(&m->modules[module].grid, coord);
    return local < 0 ? -1 : local + m->modules[module].offset;
}

pp_status pp_mimo_group_color(const pp_mimo *m, int module, int rank, unsigned dims, int *color, int *key,
                              pp_error *err)
{
    const pp_mimo_module *mod;
    pp_grid_group_info info;
    pp_status st;
    if (!m || !color || !key) return pp__fail(err, PP_EINVAL, "pp_mimo_group_color: m, color and key must not be NULL");
    *color = -1;
    *key = 0;
    if (module < 0 || module >= m->num_modules)
        return pp__fail(err, PP_EINVAL, "module=%d: must be a module index 0..%d", module, m->num_modules - 1);
    if (rank < 0 || rank >= m->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1 = %d", rank, m->world - 1);
    if ((long long)m->num_modules * m->world > INT_MAX)
        return pp__fail(err, PP_EINVAL, "world=%d: too large for unique colors", m->world);
    mod = &m->modules[module];
    if (rank < mod->offset || rank >= mod->offset + mod->size) {
        if (dims == 0 || (dims & ~PP_GROUP_ALL))
            return pp__fail(err, PP_EINVAL, "dims=0x%x: must be a non-empty subset of PP_GROUP_ALL", dims);
        return pp__ok(err);
    }
    st = pp_grid_group(&mod->grid, rank - mod->offset, dims, &info, err);
    if (st != PP_OK) return st;
    *color = module * m->world + info.color;
    *key = info.index;
    return pp__ok(err);
}

/* The rank's coordinates in a module; 0 when the rank is not in it. */
static int pp__mimo_coords(const pp_mimo *m, int module, int rank, int coord[PP_DIM_COUNT])
{
    const pp_mimo_module *mod = &m->modules[module];
    if (rank < mod->offset || rank >= mod->offset + mod->size) return 0;
    pp_grid_coords(&mod->grid, rank - mod->offset, coord, NULL);
    return 1;
}

pp_status pp_mimo_rank_role(const pp_mimo *m, int rank, pp_mimo_role *role, pp_error *err)
{
    int i;
    if (!m || !role) return pp__fail(err, PP_EINVAL, "pp_mimo_rank_role: m and role must not be NULL");
    memset(role, 0, sizeof *role);
    if (rank < 0 || rank >= m->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1 = %d", rank, m->world - 1);
    role->rank = rank;
    for (i = 0; i < m->num_modules; i++) {
        pp_mimo_stage_info *si = &role->modules[role->num_modules];
        const pp_mimo_module *mod = &m->modules[i];
        int q;
        if (!pp__mimo_coords(m, i, rank, si->coord)) continue;
        si->module = i;
        si->local_rank = rank - mod->offset;
        si->stage = si->coord[PP_DIM_PP];
        si->num_stages = mod->grid.size[PP_DIM_PP];
        si->is_first_stage = si->stage == 0;
        si->is_last_stage = si->stage == si->num_stages - 1;
        q = si->coord[PP_DIM_CP] + mod->grid.size[PP_DIM_CP] * si->coord[PP_DIM_DP];
        si->ep_rank = q % mod->ep;
        si->expert_dp_rank = q / mod->ep;
        role->num_modules++;
        if (i == m->language) role->has_language = 1; else role->has_encoder = 1;
    }
    role->path = role->has_language && role->has_encoder ? PP_MIMO_PATH_BOTH
               : role->has_language ? PP_MIMO_PATH_LANGUAGE : PP_MIMO_PATH_ENCODER;
    return pp__ok(err);
}

const pp_mimo_stage_info *pp_mimo_role_module(const pp_mimo_role *role, int module)
{
    int i;
    if (!role) return NULL;
    for (i = 0; i < role->num_modules; i++)
        if (role->modules[i].module == module) return &role->modules[i];
    return NULL;
}

/* --- bridges --- */

static pp_status pp__mimo_bridge_check(const pp_mimo *m, int enc, pp_error *err)
{
    const pp_mimo_module *e, *l;
    int a, b;
    if (enc < 0 || enc >= m->num_modules)
        return pp__fail(err, PP_EINVAL, "encoder=%d: must be a module index 0..%d", enc, m->num_modules - 1);
    if (enc == m->language)
        return pp__fail(err, PP_EINVAL, "encoder=%d: is the language model %s; a bridge runs from an encoder to it", enc,
                        m->modules[enc].name);
    e = &m->modules[enc];
    l = &m->modules[m->language];
    if (e->grid.size[PP_DIM_CP] != 1 || l->grid.size[PP_DIM_CP] != 1)
        return pp__fail(err, PP_EUNSUPPORTED, "bridge %s -> %s: cp=%d on %s: the bridge does not split sequences (cp "
                        "must be 1 on both sides, as in Megatron's BridgeCommunicator)", e->name, l->name,
                        e->grid.size[PP_DIM_CP] != 1 ? e->grid.size[PP_DIM_CP] : l->grid.size[PP_DIM_CP],
                        e->grid.size[PP_DIM_CP] != 1 ? e->name : l->name);
    a = e->grid.size[PP_DIM_DP];
    b = l->grid.size[PP_DIM_DP];
    if (a % b != 0 && b % a != 0)
        return pp__fail(err, PP_EINVAL, "bridge %s -> %s: dp=%d and dp=%d: one must be a multiple of the other (fan-in "
                        "or fan-out along the batch)", e->name, l->name, a, b);
    return PP_OK;
}

/* Fills links[0 .. cap-1] and returns how many links there are (see pp_mimo_bridge_links). */
static int pp__mimo_links(const pp_mimo *m, int enc, int rank, int op, pp_mimo_link *links, int cap)
{
    const pp_mimo_module *e = &m->modules[enc], *l = &m->modules[m->language];
    int a = e->grid.size[PP_DIM_DP], b = l->grid.size[PP_DIM_DP];
    int fanin = a >= b, k = fanin ? a / b : b / a;
    int tpe = e->grid.size[PP_DIM_TP], tpl = l->grid.size[PP_DIM_TP];
    int laste = e->grid.size[PP_DIM_PP] - 1;
    int c[PP_DIM_COUNT], pc[PP_DIM_COUNT], n = 0, j, t;
    memset(pc, 0, sizeof pc);
#define PP__LINK(peer_, part_, parts_) \
    do { if (n < cap) { links[n].peer = (peer_); links[n].part = (part_); links[n].parts = (parts_); } n++; } while (0)
    switch (op) {
    case PP_OP_SEND_F:      /* encoder's last stage -> language replicas, every matching tp rank */
    case PP_OP_RECV_B:
        if (!pp__mimo_coords(m, enc, rank, c) || c[PP_DIM_PP] != laste) return 0;
        for (j = 0; j < (fanin ? 1 : k); j++) {
            int dl = fanin ? c[PP_DIM_DP] / k : c[PP_DIM_DP] * k + j;
            int part = fanin ? 0 : j, parts = fanin ? 1 : k;
            pc[PP_DIM_DP] = dl; pc[PP_DIM_PP] = 0;
            if (op == PP_OP_SEND_F) {
                for (t = 0; t < tpl; t++)
                    if (t % tpe == c[PP_DIM_TP]) { pc[PP_DIM_TP] = t; PP__LINK(pp_mimo_rank(m, m->language, pc), part, parts); }
            } else {
                pc[PP_DIM_TP] = c[PP_DIM_TP] % tpl;
                PP__LINK(pp_mimo_rank(m, m->language, pc), part, parts);
            }
        }
        break;
    case PP_OP_RECV_F:      /* language's first stage <- encoder replicas */
    case PP_OP_SEND_B:
        if (!pp__mimo_coords(m, m->language, rank, c) || c[PP_DIM_PP] != 0) return 0;
        for (j = 0; j < (fanin ? k : 1); j++) {
            int de = fanin ? c[PP_DIM_DP] * k + j : c[PP_DIM_DP] / k;
            int part = fanin ? j : 0, parts = fanin ? k : 1;
            pc[PP_DIM_DP] = de; pc[PP_DIM_PP] = laste;
            if (op == PP_OP_RECV_F) {
                pc[PP_DIM_TP] = c[PP_DIM_TP] % tpe;
                PP__LINK(pp_mimo_rank(m, enc, pc), part, parts);
            } else {
                for (t = 0; t < tpe; t++)
                    if (t % tpl == c[PP_DIM_TP]) { pc[PP_DIM_TP] = t; PP__LINK(pp_mimo_rank(m, enc, pc), part, parts); }
            }
        }
        break;
    default: break;
    }
#undef PP__LINK
    return n;
}

pp_status pp_mimo_bridge_links(const pp_mimo *m, int encoder, int rank, int op, pp_mimo_link *links, int capacity,
                               int *count, pp_error *err)
{
    pp_status st;
    int n;
    if (!m || !count) return pp__fail(err, PP_EINVAL, "pp_mimo_bridge_links: m and count must not be NULL");
    *count = 0;
    if ((st = pp__mimo_bridge_check(m, encoder, err)) != PP_OK) return st;
    if (rank < 0 || rank >= m->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1 = %d", rank, m->world - 1);
    if (op != PP_OP_SEND_F && op != PP_OP_RECV_F && op != PP_OP_SEND_B && op != PP_OP_RECV_B)
        return pp__fail(err, PP_EINVAL, "op=%d: must be PP_OP_SEND_F, PP_OP_RECV_F, PP_OP_SEND_B or PP_OP_RECV_B", op);
    if (capacity < 0) return pp__fail(err, PP_EINVAL, "capacity=%d: must be >= 0", capacity);
    n = pp__mimo_links(m, encoder, rank, op, links, links ? capacity : 0);
    *count = n;
    if (links && n > capacity)
        return pp__fail(err, PP_EINVAL, "capacity=%d: rank %d has %d %s links on the bridge %s -> %s", capacity, rank, n,
                        pp_op_name((pp_op)op), m->modules[encoder].name, m->modules[m->language].name);
    return pp__ok(err);
}

/* --- physical programs and their check --- */

void pp_mimo_programs_free(pp_mimo_programs *p)
{
    int r;
    if (!p) return;
    if (p->ops) for (r = 0; r < p->world; r++) PIPEPAR_FREE(p->ops[r]);
    PIPEPAR_FREE(p->ops);
    PIPEPAR_FREE(p->length);
    PIPEPAR_FREE(p);
}

int pp_mimo_op_format(const pp_mimo *m, pp_mimo_op op, char *buf, size_t size)
{
    char mod[PP_MIMO_NAME_SIZE + 16];
    if (m && op.module >= 0 && op.module < m->num_modules) snprintf(mod, sizeof mod, "%s", m->modules[op.module].name);
    else snprintf(mod, sizeof mod, "module%d", (int)op.module);
    if (op.peer < 0)
        return snprintf(buf, size, "%s %s.%d mb%d", pp_op_name((pp_op)op.op), mod, (int)op.stage, (int)op.mb);
    {
        int send = op.op == PP_OP_SEND_F || op.op == PP_OP_SEND_B;
        char part[32] = "";
        if (op.parts > 1) snprintf(part, sizeof part, " [part %d of %d]", (int)op.part, (int)op.parts);
        return snprintf(buf, size, "%s %s.%d mb%d %s rank %d%s", pp_op_name((pp_op)op.op), mod, (int)op.stage,
                        (int)op.mb, send ? "to" : "from", (int)op.peer, part);
    }
}

static int pp__mimo_is_comm(int op) { return op >= PP_OP_SEND_F && op <= PP_OP_RECV_B; }
static int pp__mimo_is_send(int op) { return op == PP_OP_SEND_F || op == PP_OP_SEND_B; }

typedef struct pp__mimo_ref { int src, dst; uint64_t tag; int gi; } pp__mimo_ref;

static int pp__mimo_ref_cmp(const void *pa, const void *pb)
{
    const pp__mimo_ref *a = (const pp__mimo_ref *)pa, *b = (const pp__mimo_ref *)pb;
    if (a->src != b->src) return a->src < b->src ? -1 : 1;
    if (a->dst != b->dst) return a->dst < b->dst ? -1 : 1;
    if (a->tag != b->tag) return a->tag < b->tag ? -1 : 1;
    return a->gi < b->gi ? -1 : a->gi > b->gi;    /* program order: all of one key are on one rank */
}

pp_status pp_mimo_check(const pp_mimo_programs *p, pp_error *err)
{
    int *off = NULL, *partner = NULL, *gstart = NULL, *gend = NULL, *pos = NULL, *owner = NULL;
    unsigned char *done = NULL;
    pp__mimo_ref *sends = NULL, *recvs = NULL;
    int r, i, total = 0, ns = 0, nr = 0, a, b, finished;
    pp_status st = PP_OK;
    char txt[160], txt2[160];
    if (!p || p->world < 1 || !p->length || !p->ops)
        return pp__fail(err, PP_EINVAL, "pp_mimo_check: programs must not be NULL and world >= 1");
    for (r = 0; r < p->world; r++) {
        if (p->length[r] < 0 || (p->length[r] > 0 && !p->ops[r]))
            return pp__fail(err, PP_EINVAL, "rank %d: length=%d with ops=%p", r, p->length[r], (void *)p->ops[r]);
        if (total > INT_MAX - p->length[r]) return pp__fail(err, PP_EINVAL, "programs: too many actions");
        total += p->length[r];
    }
    off = (int *)pp__calloc((size_t)p->world + 1, sizeof(int));
    pos = (int *)pp__calloc((size_t)p->world, sizeof(int));
    partner = (int *)pp__calloc((size_t)total + 1, sizeof(int));
    gstart = (int *)pp__calloc((size_t)total + 1, sizeof(int));
    gend = (int *)pp__calloc((size_t)total + 1, sizeof(int));
    owner = (int *)pp__calloc((size_t)total + 1, sizeof(int));
    done = (unsigned char *)pp__calloc((size_t)total + 1, 1);
    sends = (pp__mimo_ref *)pp__calloc((size_t)total + 1, sizeof(pp__mimo_ref));
    recvs = (pp__mimo_ref *)pp__calloc((size_t)total + 1, sizeof(pp__mimo_ref));
    if (!off || !pos || !partner || !gstart || !gend || !owner || !done || !sends || !recvs) {
        st = pp__fail(err, PP_ENOMEM, "pp_mimo_check: out of memory for %d actions", total);
        goto out;
    }
    for (r = 0; r < p->world; r++) off[r + 1] = off[r] + p->length[r];
    /* groups and the transfer lists */
    for (r = 0; r < p->world; r++) {
        const pp_mimo_op *ops = p->ops[r];
        for (i = 0; i < p->length[r]; i++) {
            int gi = off[r] + i;
            owner[gi] = r;
            partner[gi] = -1;
            if (ops[i].op < 0 || ops[i].op >= PP_OP_COUNT) {
                st = pp__fail(err, PP_EINVAL, "rank %d position %d: op=%d is not a pp_op", r, i, (int)ops[i].op);
                goto out;
            }
            if (!pp__mimo_is_comm(ops[i].op)) { gstart[gi] = gend[gi] = -1; continue; }
            if (ops[i].peer < 0 || ops[i].peer >= p->world) {
                pp_mimo_op_format(NULL, ops[i], txt, sizeof txt);
                st = pp__fail(err, PP_EINVAL, "rank %d position %d (%s): peer=%d is not a rank of world=%d", r, i, txt,
                              (int)ops[i].peer, p->world);
                goto out;
            }
            gstart[gi] = (i > 0 && pp__mimo_is_comm(ops[i - 1].op) && ops[i - 1].group == ops[i].group)
                       ? gstart[gi - 1] : i;
            if (pp__mimo_is_send(ops[i].op)) {
                sends[ns].src = r; sends[ns].dst = ops[i].peer; sends[ns].tag = ops[i].tag; sends[ns].gi = gi; ns++;
            } else {
                recvs[nr].src = ops[i].peer; recvs[nr].dst = r; recvs[nr].tag = ops[i].tag; recvs[nr].gi = gi; nr++;
            }
        }
        for (i = p->length[r] - 1; i >= 0; i--) {
            int gi = off[r] + i;
            if (gstart[gi] < 0) continue;
            gend[gi] = (i + 1 < p->length[r] && gstart[gi + 1] == gstart[gi]) ? gend[gi + 1] : i + 1;
        }
    }
    /* every send meets exactly one receive: the k-th of a (source, destination, tag) the k-th */
    qsort(sends, (size_t)ns, sizeof *sends, pp__mimo_ref_cmp);
    qsort(recvs, (size_t)nr, sizeof *recvs, pp__mimo_ref_cmp);
    for (a = 0, b = 0; a < ns || b < nr;) {
        int c;
        /* compare the keys only (not the positions) */
        if (a < ns && b < nr) {
            if (sends[a].src != recvs[b].src) c = sends[a].src < recvs[b].src ? -1 : 1;
            else if (sends[a].dst != recvs[b].dst) c = sends[a].dst < recvs[b].dst ? -1 : 1;
            else if (sends[a].tag != recvs[b].tag) c = sends[a].tag < recvs[b].tag ? -1 : 1;
            else c = 0;
        } else c = a < ns ? -1 : 1;
        if (c == 0) { partner[sends[a].gi] = recvs[b].gi; partner[recvs[b].gi] = sends[a].gi; a++; b++; continue; }
        {
            const pp__mimo_ref *x = c < 0 ? &sends[a] : &recvs[b];
            int rr = owner[x->gi];
            pp_mimo_op_format(NULL, p->ops[rr][x->gi - off[rr]], txt, sizeof txt);
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d (%s): no matching %s on rank %d", rr,
                          x->gi - off[rr], txt, c < 0 ? "receive" : "send", c < 0 ? x->dst : x->src);
            goto out;
        }
    }
    /* rendezvous: a group finishes once every transfer of it met its partner's posted group */
    for (;;) {
        int progress = 0;
        finished = 0;
        for (r = 0; r < p->world; r++) {
            while (pos[r] < p->length[r]) {
                int gi = off[r] + pos[r], k, all = 1;
                if (gstart[gi] < 0) { pos[r]++; progress = 1; continue; }
                for (k = gi; k < off[r] + gend[gi]; k++) {
                    int q, qi;
                    if (done[k]) continue;
                    q = owner[partner[k]];
                    qi = partner[k] - off[q];
                    if (pos[q] < p->length[q] && gstart[off[q] + pos[q]] >= 0 && gstart[partner[k]] == pos[q]) {
                        done[k] = done[partner[k]] = 1;
                    } else all = 0;
                    (void)qi;
                }
                if (!all) break;
                pos[r] = gend[gi];
                progress = 1;
            }
            if (pos[r] >= p->length[r]) finished++;
        }
        if (finished == p->world) break;
        if (!progress) {
            pp__text t;
            int shown = 0;
            memset(&t, 0, sizeof t);
            for (r = 0; r < p->world && shown < 3; r++) {
                int gi, k;
                if (pos[r] >= p->length[r]) continue;
                gi = off[r] + pos[r];
                for (k = gi; k < off[r] + gend[gi] && done[k]; k++) {}
                pp_mimo_op_format(NULL, p->ops[r][k - off[r]], txt, sizeof txt);
                {
                    int q = owner[partner[k]];
                    if (pos[q] < p->length[q]) pp_mimo_op_format(NULL, p->ops[q][pos[q]], txt2, sizeof txt2);
                    else snprintf(txt2, sizeof txt2, "its end");
                    pp__text_printf(&t, "%srank %d at position %d waits for %s, but rank %d is at position %d (%s)",
                                    shown ? "; " : "", r, k - off[r], txt, q, pos[q], txt2);
                }
                shown++;
            }
            st = pp__fail(err, PP_EDEADLOCK, "the programs deadlock: %s", t.data ? t.data : "");
            pp__text_free(&t);
            goto out;
        }
    }
    st = pp__ok(err);
out:
    PIPEPAR_FREE(off); PIPEPAR_FREE(pos); PIPEPAR_FREE(partner); PIPEPAR_FREE(gstart); PIPEPAR_FREE(gend);
    PIPEPAR_FREE(owner); PIPEPAR_FREE(done); PIPEPAR_FREE(sends); PIPEPAR_FREE(recvs);
    return st;
}

/* --- the pipeline --- */

/* The module a rank plays in the pipeline: the language model (colocated), else its own. */
static int pp__mimo_pipe_module(const pp_mimo_pipeline *pl, int rank)
{
    const pp_mimo *m = &pl->mimo;
    int i;
    if (pl->encoder < 0) return m->language;
    for (i = 0; i < m->num_modules; i++)
        if (pl->base[i] >= 0 && rank >= m->modules[i].offset && rank < m->modules[i].offset + m->modules[i].size)
            return i;
    return -1;
}

int pp_mimo_pipeline_rank(const pp_mimo_pipeline *pl, int rank)
{
    int mod, c[PP_DIM_COUNT];
    if (!pl || rank < 0 || rank >= pl->mimo.world) return -1;
    mod = pp__mimo_pipe_module(pl, rank);
    if (mod < 0 || !pp__mimo_coords(&pl->mimo, mod, rank, c)) return -1;
    return pl->base[mod] + c[PP_DIM_PP];
}

pp_status pp_mimo_pipeline_stage(const pp_mimo_pipeline *pl, int stage, int *module, int *module_stage, pp_error *err)
{
    int i;
    if (!pl) return pp__fail(err, PP_EINVAL, "pipeline: must not be NULL");
    for (i = 0; i < pl->mimo.num_modules; i++) {
        int b = pl->base[i], n = pl->mimo.modules[i].grid.size[PP_DIM_PP];
        if (b >= 0 && stage >= b && stage < b + n) {
            if (module) *module = i;
            if (module_stage) *module_stage = stage - b;
            return pp__ok(err);
        }
    }
    return pp__fail(err, PP_EINVAL, "stage=%d: must be between 0 and %d (the pipeline's stages)", stage,
                    pl->schedule ? pl->schedule->pp - 1 : -1);
}

/* The physical transfers of one pipeline transfer of `rank` (pipeline peer lpeer): into
 * links[0..cap-1]; returns the count. */
static int pp__mimo_expand(const pp_mimo_pipeline *pl, int rank, int is_send, int lpeer, pp_mimo_link *links, int cap)
{
    const pp_mimo *m = &pl->mimo;
    int mod = pp__mimo_pipe_module(pl, rank), pmod = -1, pstage = 0, c[PP_DIM_COUNT];
    if (mod < 0 || !pp__mimo_coords(m, mod, rank, c)) return 0;
    if (pp_mimo_pipeline_stage(pl, lpeer, &pmod, &pstage, NULL) != PP_OK) return 0;
    if (pmod == mod) {
        c[PP_DIM_PP] = pstage;
        if (cap > 0) { links[0].peer = pp_mimo_rank(m, mod, c); links[0].part = 0; links[0].parts = 1; }
        return 1;
    }
    if (mod == pl->encoder) return pp__mimo_links(m, mod, rank, is_send ? PP_OP_SEND_F : PP_OP_RECV_B, links, cap);
    return pp__mimo_links(m, pmod, rank, is_send ? PP_OP_SEND_B : PP_OP_RECV_F, links, cap);
}

/* One transfer of a colocated bridge exchange. */
typedef struct pp__mimo_xitem { int op, mb, encoder_side; pp_mimo_link link; } pp__mimo_xitem;

/* Every transfer of the exchange of encoder enc on rank, for all microbatches, in posting
 * order (per microbatch: sends, then receives). Returns the count or -1 (out of memory). */
static int pp__mimo_exchange_items(const pp_mimo_pipeline *pl, int enc, int rank, int backward, pp__mimo_xitem **out)
{
    const pp_mimo *m = &pl->mimo;
    int ops[2], side[2], n = 0, cap = 0, mb, s, k, cnt;
    pp__mimo_xitem *items = NULL;
    pp_mimo_link *links;
    ops[0] = backward ? PP_OP_SEND_B : PP_OP_SEND_F;  side[0] = !backward;   /* sends */
    ops[1] = backward ? PP_OP_RECV_B : PP_OP_RECV_F;  side[1] = backward;    /* receives */
    cnt = pp__mimo_links(m, enc, rank, ops[0], NULL, 0) + pp__mimo_links(m, enc, rank, ops[1], NULL, 0);
    *out = NULL;
    if (cnt == 0) return 0;
    links = (pp_mimo_link *)pp__calloc((size_t)cnt, sizeof *links);
    cap = cnt * pl->mb;
    items = (pp__mimo_xitem *)pp__calloc((size_t)cap, sizeof *items);
    if (!links || !items) { PIPEPAR_FREE(links); PIPEPAR_FREE(items); return -1; }
    for (mb = 0; mb < pl->mb; mb++)
        for (s = 0; s < 2; s++) {
            int nl = pp__mimo_links(m, enc, rank, ops[s], links, cnt);
            for (k = 0; k < nl; k++) {
                items[n].op = ops[s]; items[n].mb = mb; items[n].encoder_side = side[s];
                items[n].link = links[k];
                n++;
            }
        }
    PIPEPAR_FREE(links);
    *out = items;
    return n;
}

typedef struct pp__mimo_prog { pp_mimo_op *ops; int len, cap; } pp__mimo_prog;

static int pp__mimo_push(pp__mimo_prog *p, pp_mimo_op op)
{
    if (p->len == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        pp_mimo_op *n = (pp_mimo_op *)PIPEPAR_REALLOC(p->ops, (size_t)cap * sizeof(pp_mimo_op));
        if (!n) return 0;
        p->ops = n; p->cap = cap;
    }
    p->ops[p->len++] = op;
    return 1;
}

static pp_mimo_op pp__mimo_compute(int op, int module, int stage, int mb)
{
    pp_mimo_op o;
    memset(&o, 0, sizeof o);
    o.op = op; o.module = module; o.stage = stage; o.mb = mb; o.peer = -1; o.group = -1; o.parts = 1;
    return o;
}

/* Appends the rank's pipeline program (compute, and every transfer expanded). */
static int pp__mimo_prog_pipeline(const pp_mimo_pipeline *pl, int rank, pp__mimo_prog *p, int *group)
{
    const pp_schedule *s = pl->schedule;
    int lr = pp_mimo_pipeline_rank(pl, rank), i, k, cap = 0, mod = -1, mst = 0;
    pp_mimo_link *links = NULL;
    int ok = 1;
    if (lr < 0) return 1;
    for (i = 0; i < s->length[lr] && ok; i++) {
        pp_action a = s->actions[lr][i];
        if (!pp__mimo_is_comm(a.op)) {
            pp_mimo_pipeline_stage(pl, a.stage, &mod, &mst, NULL);
            ok = pp__mimo_push(p, pp__mimo_compute(a.op, mod, mst, a.mb));
            continue;
        }
        if (i == 0 || !pp__mimo_is_comm(s->actions[lr][i - 1].op) || s->actions[lr][i - 1].group != a.group) (*group)++;
        {
            int send = pp__mimo_is_send(a.op);
            int lpeer = (a.op == PP_OP_SEND_F || a.op == PP_OP_RECV_B) ? a.stage + 1 : a.stage - 1;
            int n = pp__mimo_expand(pl, rank, send, lpeer, NULL, 0);
            uint64_t tag = a.op == PP_OP_SEND_F ? pp_transfer_tag(PP_OP_SEND_F, a.stage, a.mb, 0)
                         : a.op == PP_OP_SEND_B ? pp_transfer_tag(PP_OP_SEND_B, a.stage, a.mb, 0)
                         : a.op == PP_OP_RECV_F ? pp_transfer_tag(PP_OP_SEND_F, a.stage - 1, a.mb, 0)
                         : pp_transfer_tag(PP_OP_SEND_B, a.stage + 1, a.mb, 0);
            if (n > cap) {
                PIPEPAR_FREE(links);
                cap = n;
                links = (pp_mimo_link *)pp__calloc((size_t)cap, sizeof *links);
                if (!links) return 0;
            }
            n = pp__mimo_expand(pl, rank, send, lpeer, links, cap);
            pp_mimo_pipeline_stage(pl, a.stage, &mod, &mst, NULL);
            for (k = 0; k < n && ok; k++) {
                pp_mimo_op o;
                memset(&o, 0, sizeof o);
                o.op = a.op; o.module = mod; o.stage = mst; o.mb = a.mb;
                o.peer = links[k].peer; o.part = links[k].part; o.parts = links[k].parts;
                o.group = *group; o.tag = tag;
                ok = pp__mimo_push(p, o);
            }
        }
    }
    PIPEPAR_FREE(links);
    return ok;
}

static int pp__mimo_prog_exchange(const pp_mimo_pipeline *pl, int enc, int rank, int backward, pp__mimo_prog *p,
                                  int *group)
{
    pp__mimo_xitem *items = NULL;
    int n = pp__mimo_exchange_items(pl, enc, rank, backward, &items), k, ok = 1;
    if (n < 0) return 0;
    if (n > 0) (*group)++;
    for (k = 0; k < n && ok; k++) {
        pp_mimo_op o;
        int send = pp__mimo_is_send(items[k].op);
        memset(&o, 0, sizeof o);
        o.op = items[k].op;
        o.module = items[k].encoder_side ? enc : pl->mimo.language;
        o.stage = items[k].encoder_side ? pl->mimo.modules[enc].grid.size[PP_DIM_PP] - 1 : 0;
        o.mb = items[k].mb;
        o.peer = items[k].link.peer; o.part = items[k].link.part; o.parts = items[k].link.parts;
        o.group = *group;
        o.tag = pp_transfer_tag(backward ? PP_OP_SEND_B : PP_OP_SEND_F, PP__MIMO_BRIDGE_STAGE + enc, items[k].mb, 0);
        (void)send;
        ok = pp__mimo_push(p, o);
    }
    PIPEPAR_FREE(items);
    return ok;
}

static pp_status pp__mimo_build_programs(const pp_mimo_pipeline *pl, pp_mimo_programs **out, pp_error *err)
{
    const pp_mimo *m = &pl->mimo;
    pp_mimo_programs *p;
    int r, e, mb, ok = 1;
    p = (pp_mimo_programs *)pp__calloc(1, sizeof *p);
    if (!p) return pp__fail(err, PP_ENOMEM, "out of memory");
    p->world = m->world;
    p->length = (int *)pp__calloc((size_t)m->world, sizeof(int));
    p->ops = (pp_mimo_op **)pp__calloc((size_t)m->world, sizeof(pp_mimo_op *));
    if (!p->length || !p->ops) { pp_mimo_programs_free(p); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    for (r = 0; r < m->world && ok; r++) {
        pp__mimo_prog prog;
        int group = -1;
        memset(&prog, 0, sizeof prog);
        /* colocated: encoders forward, bridge, the language pipeline, bridge back, encoders backward */
        for (e = 0; e < pl->num_bridged && ok; e++)
            for (mb = 0; mb < pl->mb && ok; mb++)
                ok = pp__mimo_push(&prog, pp__mimo_compute(PP_OP_F, pl->bridged[e], 0, mb));
        for (e = 0; e < pl->num_bridged && ok; e++) ok = pp__mimo_prog_exchange(pl, pl->bridged[e], r, 0, &prog, &group);
        if (ok) ok = pp__mimo_prog_pipeline(pl, r, &prog, &group);
        for (e = 0; e < pl->num_bridged && ok; e++) ok = pp__mimo_prog_exchange(pl, pl->bridged[e], r, 1, &prog, &group);
        for (e = 0; e < pl->num_bridged && ok; e++)
            for (mb = 0; mb < pl->mb && ok; mb++)
                ok = pp__mimo_push(&prog, pp__mimo_compute(PP_OP_B, pl->bridged[e], 0, mb));
        p->ops[r] = prog.ops;
        p->length[r] = prog.len;
    }
    if (!ok) { pp_mimo_programs_free(p); return pp__fail(err, PP_ENOMEM, "out of memory (physical programs)"); }
    *out = p;
    return PP_OK;
}

void pp_mimo_pipeline_free(pp_mimo_pipeline *pl)
{
    if (!pl) return;
    pp_schedule_free(pl->schedule);
    pp_mimo_programs_free(pl->programs);
    PIPEPAR_FREE(pl);
}

pp_status pp_mimo_pipeline_create(const pp_mimo *m, const pp_mimo_pipeline_config *cfg, pp_mimo_pipeline **out,
                                  pp_error *err)
{
    pp_mimo_pipeline *pl;
    pp_schedule_config sc;
    pp_status st;
    pp_error inner;
    int i, total = 0;
    char desc[256];
    pp__text t;
    if (!m || !cfg || !out) return pp__fail(err, PP_EINVAL, "pp_mimo_pipeline_create: m, cfg and out must not be NULL");
    *out = NULL;
    if (cfg->mb < 1) return pp__fail(err, PP_EINVAL, "mb=%d: must be at least 1", cfg->mb);
    if (m->layout == PP_MIMO_MIXED)
        return pp__fail(err, PP_EUNSUPPORTED, "layout mixed: some grids coincide and some are disjoint; a step runs "
                        "either colocated (all grids the same ranks) or non-colocated (all disjoint)");
    if (m->layout == PP_MIMO_NON_COLOCATED && m->num_modules != 2) {
        memset(&t, 0, sizeof t);
        for (i = 0; i < m->num_modules; i++) pp__text_printf(&t, "%s%s", i ? ", " : "", m->modules[i].name);
        pp__fail(err, PP_EUNSUPPORTED, "non-colocated with %d modules (%s): a pipeline holds one encoder and the "
                 "language model", m->num_modules, t.data ? t.data : "");
        pp__text_free(&t);
        return PP_EUNSUPPORTED;
    }
    pl = (pp_mimo_pipeline *)pp__calloc(1, sizeof *pl);
    if (!pl) return pp__fail(err, PP_ENOMEM, "out of memory");
    pl->mimo = *m;
    pl->mb = cfg->mb;
    pl->encoder = -1;
    for (i = 0; i < PP_MIMO_MAX_MODULES; i++) pl->base[i] = -1;
    for (i = 0; i < m->num_modules; i++) {
        if (i == m->language) continue;
        if ((st = pp__mimo_bridge_check(m, i, err)) != PP_OK) { pp_mimo_pipeline_free(pl); return st; }
        if (m->layout == PP_MIMO_NON_COLOCATED) {
            pl->encoder = i;
        } else {
            if (m->modules[i].grid.size[PP_DIM_PP] != 1) {
                st = pp__fail(err, PP_EUNSUPPORTED, "module %s: pp=%d: a colocated encoder runs outside the language "
                              "model's pipeline and needs pp=1 (as in Megatron's colocated schedule)", m->modules[i].name,
                              m->modules[i].grid.size[PP_DIM_PP]);
                pp_mimo_pipeline_free(pl);
                return st;
            }
            pl->bridged[pl->num_bridged++] = i;
        }
    }
    if (pl->encoder >= 0) { pl->base[pl->encoder] = 0; total = m->modules[pl->encoder].grid.size[PP_DIM_PP]; }
    pl->base[m->language] = total;
    total += m->modules[m->language].grid.size[PP_DIM_PP];
    if (pl->encoder >= 0)
        snprintf(desc, sizeof desc, "pipeline of %d stages (%s %d, %s %d)", total, m->modules[pl->encoder].name,
                 m->modules[pl->encoder].grid.size[PP_DIM_PP], m->modules[m->language].name,
                 m->modules[m->language].grid.size[PP_DIM_PP]);
    else
        snprintf(desc, sizeof desc, "pipeline of %d stages (%s)", total, m->modules[m->language].name);
    memset(&sc, 0, sizeof sc);
    sc.kind = cfg->kind ? cfg->kind : PP_1F1B;
    sc.pp = total;
    sc.vpp = 1;
    sc.mb = cfg->mb;
    if (sc.kind == PP_ZBV || sc.kind == PP_DUALPIPEV) {
        st = pp__fail(err, PP_EUNSUPPORTED, "kind=%s: a V-shaped schedule puts two stages on a rank; a MIMO pipeline "
                      "runs one stage per rank (gpipe, 1f1b, zb-h1, zb-h2)", pp_schedule_kind_name(sc.kind));
        pp_mimo_pipeline_free(pl);
        return st;
    }
    if (sc.kind == PP_DUALPIPE) {
        st = pp__fail(err, PP_EUNSUPPORTED, "kind=%s: DualPipe runs two copies of every stage, one per direction, "
                      "two stages on a rank; a MIMO pipeline runs one stage per rank (gpipe, 1f1b, zb-h1, zb-h2)",
                      pp_schedule_kind_name(sc.kind));
        pp_mimo_pipeline_free(pl);
        return st;
    }
    st = pp_schedule_build(&sc, &pl->schedule, &inner);
    if (st == PP_OK && total > 1) st = pp_schedule_lower(pl->schedule, &inner);
    if (st == PP_OK) st = pp_schedule_validate(pl->schedule, &inner);
    if (st != PP_OK) {
        pp__fail(err, st, "%s: %s", desc, inner.message);
        pp_mimo_pipeline_free(pl);
        return st;
    }
    st = pp__mimo_build_programs(pl, &pl->programs, err);
    if (st == PP_OK) {
        st = pp_mimo_check(pl->programs, &inner);
        if (st != PP_OK) pp__fail(err, st, "%s, physical programs: %s", desc, inner.message);
    }
    if (st != PP_OK) { pp_mimo_pipeline_free(pl); return st; }
    *out = pl;
    return pp__ok(err);
}

/* --- the transport of a pipeline rank --- */

struct pp_mimo_transport {
    const pp_mimo_pipeline *pl;
    pp_transport base;
    int rank;               /* in the job */
    float scale;            /* copies_lcm / copies of this rank's stage */
    double denom;           /* copies_lcm */
    pp_transfer *xf;
    int cap_xf;
    pp_mimo_link *links;
    int cap_links;
};

static pp_status pp__mimo_t_post(void *user, const pp_transfer *xf, int count, void **handle, pp_error *err)
{
    pp_mimo_transport *mt = (pp_mimo_transport *)user;
    int i, k, n = 0;
    if (count < 0 || (count > 0 && !xf) || !handle)
        return pp__fail(err, PP_EINVAL, "rank %d: post: count=%d, transfers and handle must not be NULL", mt->rank, count);
    for (i = 0; i < count; i++) {
        int nl;
        if (xf[i].peer < 0 || xf[i].peer >= mt->pl->schedule->pp)
            return pp__fail(err, PP_EINVAL, "rank %d: transfer to pipeline stage %d: must be between 0 and %d", mt->rank,
                            xf[i].peer, mt->pl->schedule->pp - 1);
        nl = pp__mimo_expand(mt->pl, mt->rank, xf[i].is_send, xf[i].peer, mt->links, mt->cap_links);
        if (nl > mt->cap_links) {
            pp_mimo_link *nlk = (pp_mimo_link *)PIPEPAR_REALLOC(mt->links, (size_t)nl * sizeof(pp_mimo_link));
            if (!nlk) return pp__fail(err, PP_ENOMEM, "rank %d: out of memory (bridge links)", mt->rank);
            mt->links = nlk; mt->cap_links = nl;
            nl = pp__mimo_expand(mt->pl, mt->rank, xf[i].is_send, xf[i].peer, mt->links, mt->cap_links);
        }
        if (n + nl > mt->cap_xf) {
            int cap = mt->cap_xf ? mt->cap_xf : 8;
            pp_transfer *nx;
            while (cap < n + nl) cap *= 2;
            nx = (pp_transfer *)PIPEPAR_REALLOC(mt->xf, (size_t)cap * sizeof(pp_transfer));
            if (!nx) return pp__fail(err, PP_ENOMEM, "rank %d: out of memory (transfers)", mt->rank);
            mt->xf = nx; mt->cap_xf = cap;
        }
        for (k = 0; k < nl; k++) {
            const pp_mimo_link *l = &mt->links[k];
            size_t part = xf[i].bytes / (size_t)l->parts;
            if (xf[i].bytes % (size_t)l->parts != 0) {
                char tagtxt[64];
                pp_transfer_tag_format(xf[i].tag, tagtxt, sizeof tagtxt);
                return pp__fail(err, PP_EINVAL, "rank %d: bridge transfer %s of %zu bytes: does not split into %d equal "
                                "parts along the batch (the batch must be the outermost dimension and a multiple of "
                                "%d)", mt->rank, tagtxt, xf[i].bytes, l->parts, l->parts);
            }
            mt->xf[n].is_send = xf[i].is_send;
            mt->xf[n].peer = l->peer;
            mt->xf[n].tag = xf[i].tag;
            mt->xf[n].buf = (char *)xf[i].buf + part * (size_t)l->part;
            mt->xf[n].bytes = part;
            n++;
        }
    }
    return mt->base.post(mt->base.user, mt->xf, n, handle, err);
}

static pp_status pp__mimo_t_wait(void *user, void *handle, double timeout_s, pp_error *err)
{
    pp_mimo_transport *mt = (pp_mimo_transport *)user;
    return mt->base.wait(mt->base.user, handle, timeout_s, err);
}

static pp_status pp__mimo_t_test(void *user, void *handle, int *done, pp_error *err)
{
    pp_mimo_transport *mt = (pp_mimo_transport *)user;
    return mt->base.test(mt->base.user, handle, done, err);
}

/* Weighted so each pipeline stage counts once: rank r adds value * L / copies(r), then all is
 * divided by L, where L is the lcm of the copies of every stage. Integers stay exact (the
 * executor's schedule check compares sums exactly). */
static pp_status pp__mimo_t_all_reduce(void *user, float *values, int count, double timeout_s, pp_error *err)
{
    pp_mimo_transport *mt = (pp_mimo_transport *)user;
    pp_status st;
    int i;
    if (count < 0 || (count > 0 && !values))
        return pp__fail(err, PP_EINVAL, "rank %d: all_reduce: count=%d with values=%p", mt->rank, count, (void *)values);
    for (i = 0; i < count; i++) values[i] *= mt->scale;
    st = mt->base.all_reduce(mt->base.user, values, count, timeout_s, err);
    if (st != PP_OK) return st;
    for (i = 0; i < count; i++) values[i] = (float)((double)values[i] / mt->denom);
    return PP_OK;
}

static void pp__mimo_t_abort(void *user, pp_status status, const char *reason)
{
    pp_mimo_transport *mt = (pp_mimo_transport *)user;
    mt->base.abort(mt->base.user, status, reason);
}

static long long pp__mimo_gcd(long long a, long long b) { while (b) { long long t = a % b; a = b; b = t; } return a; }

pp_status pp_mimo_transport_create(const pp_mimo_pipeline *pl, int rank, const pp_transport *base,
                                   pp_mimo_transport **state, pp_transport *out, pp_error *err)
{
    pp_mimo_transport *mt;
    long long lcm = 1;
    int i, mod;
    if (!pl || !base || !state || !out)
        return pp__fail(err, PP_EINVAL, "pp_mimo_transport_create: pl, base, state and out must not be NULL");
    *state = NULL;
    if (base->world != pl->mimo.world)
        return pp__fail(err, PP_EINVAL, "base.world=%d: must span the whole job (world=%d)", base->world, pl->mimo.world);
    if (rank < 0 || rank >= pl->mimo.world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1 = %d", rank, pl->mimo.world - 1);
    if (base->rank != rank)
        return pp__fail(err, PP_EINVAL, "base.rank=%d: must be the rank itself (%d)", base->rank, rank);
    if (!base->post || !base->wait || !base->all_reduce || !base->abort)
        return pp__fail(err, PP_EINVAL, "base.%s: must not be NULL", !base->post ? "post" : !base->wait ? "wait" :
                        !base->all_reduce ? "all_reduce" : "abort");
    mod = pp__mimo_pipe_module(pl, rank);
    if (mod < 0) return pp__fail(err, PP_EINVAL, "rank %d: runs no stage of the pipeline", rank);
    for (i = 0; i < pl->mimo.num_modules; i++) {
        long long copies;
        if (pl->base[i] < 0) continue;
        copies = pl->mimo.modules[i].size / pl->mimo.modules[i].grid.size[PP_DIM_PP];
        lcm = lcm / pp__mimo_gcd(lcm, copies) * copies;
        if (lcm > (1 << 20))
            return pp__fail(err, PP_EUNSUPPORTED, "the stages' copies (tp*cp*dp of each module) have a common multiple "
                            "%lld over 2^20: the weighted all-reduce would lose exactness", lcm);
    }
    mt = (pp_mimo_transport *)pp__calloc(1, sizeof *mt);
    if (!mt) return pp__fail(err, PP_ENOMEM, "out of memory");
    mt->pl = pl;
    mt->base = *base;
    mt->rank = rank;
    mt->denom = (double)lcm;
    mt->scale = (float)(lcm / (pl->mimo.modules[mod].size / pl->mimo.modules[mod].grid.size[PP_DIM_PP]));
    memset(out, 0, sizeof *out);
    out->user = mt;
    out->rank = pp_mimo_pipeline_rank(pl, rank);
    out->world = pl->schedule->pp;
    out->post = pp__mimo_t_post;
    out->wait = pp__mimo_t_wait;
    out->test = base->test ? pp__mimo_t_test : NULL;
    out->all_reduce = pp__mimo_t_all_reduce;
    out->abort = pp__mimo_t_abort;
    *state = mt;
    return pp__ok(err);
}

void pp_mimo_transport_free(pp_mimo_transport *state)
{
    if (!state) return;
    PIPEPAR_FREE(state->xf);
    PIPEPAR_FREE(state->links);
    PIPEPAR_FREE(state);
}

pp_status pp_mimo_bridge_exchange(const pp_mimo_pipeline *pl, int encoder, int rank, const pp_transport *world,
                                  int backward, const pp_mimo_bridge_io *io, int step, double timeout_s, pp_error *err)
{
    pp__mimo_xitem *items = NULL;
    pp_transfer *xf = NULL;
    void *handle = NULL;
    pp_status st;
    int i, n, e;
    if (!pl || !world || !io) return pp__fail(err, PP_EINVAL, "pp_mimo_bridge_exchange: pl, world and io must not be NULL");
    for (e = 0; e < pl->num_bridged && pl->bridged[e] != encoder; e++) {}
    if (e == pl->num_bridged)
        return pp__fail(err, PP_EINVAL, "encoder=%d: not bridged around the pipeline (only colocated encoders are; a "
                        "non-colocated pipeline carries its bridge itself)", encoder);
    if (rank < 0 || rank >= pl->mimo.world || world->rank != rank || world->world != pl->mimo.world)
        return pp__fail(err, PP_EINVAL, "rank=%d, world.rank=%d, world.world=%d: the transport must span the job (%d "
                        "ranks) and be this rank's", rank, world->rank, world->world, pl->mimo.world);
    if (!(timeout_s >= 0)) return pp__fail(err, PP_EINVAL, "timeout_s=%g: must be >= 0 (0 means 60 s)", timeout_s);
    n = pp__mimo_exchange_items(pl, encoder, rank, backward, &items);
    if (n < 0) return pp__fail(err, PP_ENOMEM, "out of memory");
    if (n == 0) return pp__ok(err);
    xf = (pp_transfer *)pp__calloc((size_t)n, sizeof *xf);
    if (!xf) { PIPEPAR_FREE(items); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    for (i = 0; i < n; i++) {
        const pp__mimo_xitem *it = &items[i];
        void *const *bufs = it->encoder_side ? io->encoder_out : io->language_in;
        const size_t *bytes = it->encoder_side ? io->encoder_bytes : io->language_bytes;
        const char *what = it->encoder_side ? "encoder_out" : "language_in";
        size_t part;
        if (!bufs || !bytes || (!bufs[it->mb] && bytes[it->mb] > 0)) {
            st = pp__fail(err, PP_EINVAL, "rank %d: io.%s%s: NULL, but this rank %s %s's %s of microbatch %d", rank, what,
                          !bufs || !bytes ? "" : "[mb]", pp__mimo_is_send(it->op) ? "sends" : "receives",
                          pl->mimo.modules[encoder].name, backward ? "gradient" : "output", it->mb);
            goto out;
        }
        if (bytes[it->mb] % (size_t)it->link.parts != 0) {
            st = pp__fail(err, PP_EINVAL, "rank %d: io.%s_bytes[%d]=%zu: does not split into %d equal parts along the "
                          "batch", rank, it->encoder_side ? "encoder" : "language", it->mb, bytes[it->mb], it->link.parts);
            goto out;
        }
        part = bytes[it->mb] / (size_t)it->link.parts;
        xf[i].is_send = pp__mimo_is_send(it->op);
        xf[i].peer = it->link.peer;
        xf[i].tag = pp_transfer_tag(backward ? PP_OP_SEND_B : PP_OP_SEND_F, PP__MIMO_BRIDGE_STAGE + encoder, it->mb, step);
        xf[i].buf = (char *)bufs[it->mb] + part * (size_t)it->link.part;
        xf[i].bytes = part;
    }
    st = world->post(world->user, xf, n, &handle, err);
    if (st == PP_OK) st = world->wait(world->user, handle, timeout_s > 0 ? timeout_s : 60.0, err);
    if (st == PP_OK) st = pp__ok(err);
out:
    PIPEPAR_FREE(items);
    PIPEPAR_FREE(xf);
    return st;
}

/* --- gradients --- */

int pp_mimo_grad_counted(const pp_mimo *m, int module, int rank, unsigned flags)
{
    int c[PP_DIM_COUNT], q;
    const pp_mimo_module *mod;
    if (!m || module < 0 || module >= m->num_modules || !pp__mimo_coords(m, module, rank, c)) return -1;
    mod = &m->modules[module];
    if (flags & PP_MIMO_GRAD_SHARED) return 0;
    if ((flags & PP_MIMO_GRAD_TP_REPLICATED) && c[PP_DIM_TP] != 0) return 0;
    q = c[PP_DIM_CP] + mod->grid.size[PP_DIM_CP] * c[PP_DIM_DP];
    if (flags & PP_MIMO_GRAD_EXPERT) return q / mod->ep == 0;
    return q == 0;
}

pp_status pp_mimo_grad_sumsq(const pp_mimo *m, int rank, const pp_mimo_grad *grads, int count,
                             double sumsq[PP_MIMO_MAX_MODULES], pp_error *err)
{
    int i;
    char a[48];
    if (!m || !sumsq || (count > 0 && !grads))
        return pp__fail(err, PP_EINVAL, "pp_mimo_grad_sumsq: m, sumsq and grads must not be NULL");
    if (count < 0) return pp__fail(err, PP_EINVAL, "count=%d: must be >= 0", count);
    for (i = 0; i < count; i++) {
        const pp_mimo_grad *g = &grads[i];
        int counted;
        size_t k;
        double s = 0;
        if (g->module < 0 || g->module >= m->num_modules)
            return pp__fail(err, PP_EINVAL, "grads[%d].module=%d: must be a module index 0..%d", i, g->module,
                            m->num_modules - 1);
        if (g->flags & ~(PP_MIMO_GRAD_TP_REPLICATED | PP_MIMO_GRAD_EXPERT | PP_MIMO_GRAD_SHARED))
            return pp__fail(err, PP_EINVAL, "grads[%d].flags=0x%x: unknown bits (PP_MIMO_GRAD_TP_REPLICATED, _EXPERT, "
                            "_SHARED)", i, g->flags);
        if (g->count > 0 && !g->grad) return pp__fail(err, PP_EINVAL, "grads[%d].grad: NULL for %zu values", i, g->count);
        counted = pp_mimo_grad_counted(m, g->module, rank, g->flags);
        if (counted < 0)
            return pp__fail(err, PP_EINVAL, "grads[%d]: rank %d does not run module %s (%s)", i, rank,
                            m->modules[g->module].name,
                            pp__mimo_ranks(a, sizeof a, m->modules[g->module].offset, m->modules[g->module].size));
        if (!counted) continue;
        for (k = 0; k < g->count; k++) s += (double)g->grad[k] * (double)g->grad[k];
        sumsq[g->module] += s;
    }
    return pp__ok(err);
}

pp_status pp_mimo_grad_norm(const pp_mimo *m, const pp_transport *world, const double sumsq[PP_MIMO_MAX_MODULES],
                            double max_norm, double timeout_s, pp_mimo_norm *out, pp_error *err)
{
    float v[PP_MIMO_MAX_MODULES];
    double total = 0;
    pp_status st;
    int i;
    if (!m || !world || !sumsq || !out)
        return pp__fail(err, PP_EINVAL, "pp_mimo_grad_norm: m, world, sumsq and out must not be NULL");
    memset(out, 0, sizeof *out);
    if (world->world != m->world || !world->all_reduce)
        return pp__fail(err, PP_EINVAL, "world.world=%d: the transport must span the job (%d ranks) and have all_reduce",
                        world->world, m->world);
    if (!(timeout_s >= 0)) return pp__fail(err, PP_EINVAL, "timeout_s=%g: must be >= 0 (0 means 60 s)", timeout_s);
    if (max_norm != max_norm) return pp__fail(err, PP_EINVAL, "max_norm=nan: must be a number (<= 0: no clipping)");
    for (i = 0; i < m->num_modules; i++) v[i] = (float)sumsq[i];
    st = world->all_reduce(world->user, v, m->num_modules, timeout_s > 0 ? timeout_s : 60.0, err);
    if (st != PP_OK) return st;
    out->finite = 1;
    for (i = 0; i < m->num_modules; i++) {
        double s = (double)v[i];
        if (!(s <= DBL_MAX) || s < 0) out->finite = 0;
        out->module_norm[i] = s >= 0 ? sqrt(s) : s;
        total += s;
    }
    out->norm = out->finite ? sqrt(total) : (double)INFINITY;
    if (!(out->norm <= DBL_MAX)) out->finite = 0;
    out->clip = 1.0;
    if (out->finite && max_norm > 0) {
        double c = max_norm / (out->norm + 1e-6);
        if (c < 1.0) out->clip = c;
    }
    return pp__ok(err);
}

pp_status pp_mimo_group_sum(const pp_transport *world, const int *members, int n, float *values, int count, int id,
                            double timeout_s, pp_error *err)
{
    float *all = NULL;
    pp_transfer *xf = NULL;
    void *handle = NULL;
    pp_status st;
    int i, j, me = -1, k = 0;
    uint64_t tag;
    if (!world || !members || (count > 0 && !values))
        return pp__fail(err, PP_EINVAL, "pp_mimo_group_sum: world, members and values must not be NULL");
    if (n < 1 || count < 0) return pp__fail(err, PP_EINVAL, "n=%d, count=%d: n must be >= 1 and count >= 0", n, count);
    if (id < 0 || id > 15) return pp__fail(err, PP_EINVAL, "id=%d: must be between 0 and 15", id);
    if (!(timeout_s >= 0)) return pp__fail(err, PP_EINVAL, "timeout_s=%g: must be >= 0 (0 means 60 s)", timeout_s);
    for (i = 0; i < n; i++) {
        if (members[i] < 0 || members[i] >= world->world)
            return pp__fail(err, PP_EINVAL, "members[%d]=%d: must be a rank 0..%d", i, members[i], world->world - 1);
        for (j = 0; j < i; j++)
            if (members[j] == members[i]) return pp__fail(err, PP_EINVAL, "members[%d]=%d: appears twice", i, members[i]);
        if (members[i] == world->rank) me = i;
    }
    if (me < 0) return pp__fail(err, PP_EINVAL, "members: this rank (%d) is not among them", world->rank);
    if (n == 1 || count == 0) return pp__ok(err);
    all = (float *)pp__calloc((size_t)n * (size_t)count, sizeof(float));
    xf = (pp_transfer *)pp__calloc((size_t)(2 * (n - 1)), sizeof *xf);
    if (!all || !xf) { PIPEPAR_FREE(all); PIPEPAR_FREE(xf); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    memcpy(all + (size_t)me * (size_t)count, values, (size_t)count * sizeof(float));
    tag = pp_transfer_tag(PP_OP_SEND_F, PP__MIMO_SUM_STAGE + id, 0, 0);
    for (i = 0; i < n; i++) {
        if (i == me) continue;
        xf[k].is_send = 1; xf[k].peer = members[i]; xf[k].tag = tag;
        xf[k].buf = all + (size_t)me * (size_t)count; xf[k].bytes = (size_t)count * sizeof(float); k++;
        xf[k].is_send = 0; xf[k].peer = members[i]; xf[k].tag = tag;
        xf[k].buf = all + (size_t)i * (size_t)count; xf[k].bytes = (size_t)count * sizeof(float); k++;
    }
    st = world->post(world->user, xf, k, &handle, err);
    if (st == PP_OK) st = world->wait(world->user, handle, timeout_s > 0 ? timeout_s : 60.0, err);
    if (st == PP_OK) {
        for (j = 0; j < count; j++) {
            float s = 0.0f;
            for (i = 0; i < n; i++) s += all[(size_t)i * (size_t)count + (size_t)j];
            values[j] = s;
        }
        st = pp__ok(err);
    }
    PIPEPAR_FREE(all);
    PIPEPAR_FREE(xf);
    return st;
}
#endif /* PIPEPAR_IMPLEMENTATION_DONE */
#endif /* PIPEPAR_IMPLEMENTATION */
