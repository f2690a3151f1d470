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
 *     #define PIPEPAR_IMPLEMENTATION          // in exactly one C file
 *     #include "pipepar.h"
 *
 *     pp_error err;
 *     pp_schedule *s = NULL;
 *     pp_schedule_config cfg = { .kind = PP_INTERLEAVED_1F1B, .pp = 4, .vpp = 2, .mb = 8 };
 *     if (pp_schedule_build(&cfg, &s, &err) != PP_OK) { fprintf(stderr, "%s\n", err.message); return 1; }
 *     pp_schedule_lower(s, &err);             // adds SEND/RECV actions between ranks
 *     pp_schedule_validate(s, &err);          // proves dependencies and freedom from deadlock
 *     pp_schedule_draw_ascii(s, stdout);      // see it
 *     ... pp_run_step(...) on every rank, see the RUNTIME section ...
 *     pp_schedule_free(s);
 *
 * The GPU companions are separate objects, declared here:
 *     pipepar_cuda.cu  (pp_cuda_*)  kernels for packing, CP split/gather, replay gather, grad norm
 *     pipepar_nccl.c   (pp_nccl_*)  the NCCL transport, communicator setup, grad-norm reduce
 * Integration into a trainer: include this header, link pipepar_cuda.o and pipepar_nccl.o.
 *
 * TABLE OF CONTENTS (search for the marker, e.g. ">>schedule")
 *     >>errors      pp_status, pp_error: every call that can fail says which parameter and rule
 *     >>grid        rank grids: a rank's (tp, cp, dp, pp) coordinates and its groups
 *     >>layers      which layers each (pipeline rank, virtual stage) builds; layout strings
 *     >>schedule    the schedule IR, generators, lowering, validator
 *     >>simulate    per-action costs -> timeline, bubble, peak activations
 *     >>draw        ASCII and SVG timelines, PyTorch text and CSV forms
 *     >>pack        sequence packing into bins for DP x PP
 *     >>cp          context-parallel partitions (load-balanced 2*cp chunks)
 *     >>replay      router-replay index maps for MoE
 *     >>runtime     transport interface, threads transport, executor
 *     >>cuda        declarations of pipepar_cuda.cu
 *     >>nccl        declarations of pipepar_nccl.c
 *
 * OVERRIDES (define before the implementation include)
 *     PIPEPAR_MALLOC(sz), PIPEPAR_REALLOC(p, sz), PIPEPAR_FREE(p)   default: malloc/realloc/free
 *     PIPEPAR_ASSERT(x)                                             default: assert(x)
 *     PIPEPAR_API                                                   default: extern
 *
 * CONVENTIONS
 *     Public names start with pp_ / PP_, internals with pp__. Config structs: zero means default.
 *     Calls that can fail return pp_status and fill an optional pp_error * (NULL is allowed).
 *     No global mutable state; every object has one owner and one matching *_free.
 *
 * LICENCE  MIT. Copyright (c) 2026 the pipepar authors.
 */
#ifndef PIPEPAR_H
#define PIPEPAR_H

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
 *     "vpp=3: interleaved 1F1B needs mb (5) to be a multiple of the group size (2)".
 * The code list is one X-macro, so the enum and the names cannot drift apart.
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
    X(PP_EIO,          "input/output error")

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

/* Names: "tp", "cp", "dp", "pp"; masks as "dp-cp", "tp-pp" (in pp_dim order: tp, cp, dp, pp).
 * pp_grid_dims_parse reads a mask written as names joined by '-', in any order. */
PIPEPAR_API const char *pp_dim_name(pp_dim dim);
PIPEPAR_API int pp_grid_dims_format(unsigned dims, char *buf, size_t size);
PIPEPAR_API pp_status pp_grid_dims_parse(const char *text, unsigned *dims, pp_error *err);
/* The grid's order as text, e.g. "tp-cp-dp-pp" (all four, fastest first). */
PIPEPAR_API int pp_grid_order_format(const pp_grid *grid, char *buf, size_t size);


/* ============================================================================================
 * >>schedule
 * A schedule says, for every pipeline rank, the order of its work in one training step.
 *
 * Stages. The model is cut into num_stages = pp * vpp consecutive pieces ("virtual stages").
 * A placement maps stage s to (rank, chunk):
 *     looped (Megatron, PyTorch's interleaved):  rank = s % pp,  chunk = s / pp
 *     V-shaped (ZB-V, DualPipeV; vpp = 2):       rank r holds stages r and 2*pp-1-r
 *
 * Actions. A rank's program is an array of pp_action, executed in order:
 *     compute        F forward, B full backward, I input-gradient half and W weight-gradient
 *                    half of a split backward, FB an F and a B overlapped (DualPipeV)
 *     communication  SEND_F (stage s sends its output to stage s+1), RECV_F (stage s receives its
 *                    input from s-1), SEND_B (stage s sends its input-gradient to s-1), RECV_B
 *                    (stage s receives its output-gradient from s+1)
 * A maximal run of consecutive communication actions is one batched group: the runtime posts it
 * at once (one ncclGroupStart/End), and the validator proves the programs finish under that rule
 * even when every send waits for its receive (rendezvous, the strictest transport).
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
    PP_CUSTOM,              /* read from CSV/text or built action by action */
    PP_KIND_COUNT
} pp_schedule_kind;

typedef enum pp_placement {
    PP_PLACEMENT_LOOPED = 0,
    PP_PLACEMENT_V = 1
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
} pp_action;

typedef struct pp_schedule_config {
    pp_schedule_kind kind;
    int pp;         /* pipeline ranks, >= 1 */
    int vpp;        /* chunks per rank; 0 means 1 (2 for V-shaped kinds) */
    int mb;         /* microbatches per step, >= 1 */
    int group;      /* interleaved: microbatch_group_size_per_vp_stage; 0 means pp */
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
/* Removes all communication actions (back to the compute order). */
PIPEPAR_API void pp_schedule_strip_comm(pp_schedule *s);

/* Proves a schedule correct, or names its first violation (rank, position, action, rule):
 *   - each (stage, mb) has exactly one F and one B (or one I and one W), on the stage's rank;
 *   - F(s,m) after F(s-1,m) arrived; B(s,m) after F(s,m) and after B(s+1,m)'s gradient arrived;
 *     W after its I;
 *   - lowered: every send has exactly one matching receive, every cross-rank input is received
 *     before use, and the programs run to the end when each group of consecutive communication
 *     actions is posted together and every send blocks until its receive is posted.
 * An unlowered schedule is checked as if lowered (on a copy). */
PIPEPAR_API pp_status pp_schedule_validate(const pp_schedule *s, pp_error *err);

/* Action text in PyTorch's spelling: "4F0", "1SEND_F3", "2I5"; FB as "0F1;3B0". */
PIPEPAR_API int pp_action_format(pp_action a, char *buf, size_t size);
PIPEPAR_API pp_status pp_action_parse(const char *text, pp_action *out, pp_error *err);

/* ============================================================================================
 * >>simulate
 * Plays a lowered (or compute-only) schedule with per-action costs and reports what a user feels:
 * the step time (makespan), each rank's idle fraction (bubble) and its peak live activations.
 * Compute is sequential per rank; a transfer starts when both its send and its receive have been
 * posted, takes latency + bytes * seconds_per_byte, and its consumer starts after it lands.
 * With F=1, B=2 and free communication this reproduces the textbook bubbles exactly.
 * ============================================================================================ */

typedef struct pp_sim_costs {
    double f;                   /* forward of one stage; 0 means 1 */
    double b;                   /* unsplit backward; 0 means 2 * f */
    double i, w;                /* split backward halves; both 0 means b/2 each */
    const double *f_stage;      /* optional [num_stages] overrides of f, b, i, w per stage */
    const double *b_stage;
    const double *i_stage;
    const double *w_stage;
    double p2p_latency;         /* per transfer */
    double p2p_seconds_per_byte;
    double activation_bytes;    /* bytes of one stage boundary tensor */
} pp_sim_costs;

typedef struct pp_sim_result {
    int pp, vpp;
    double makespan;            /* first start to last end over all ranks */
    double *busy;               /* [pp] compute time of each rank */
    double *bubble;             /* [pp] 1 - busy / makespan */
    double bubble_mean;         /* mean over ranks */
    int *peak_live;             /* [pp] most (stage, mb) activations held at once on the rank */
    double *peak_memory;        /* [pp] peak_live in units of a rank's whole layer set: / vpp */
    double **start, **end;      /* [pp][length] times of each action (comm: transfer start/end) */
    int *length;                /* [pp] copy of the schedule's lengths */
} pp_sim_result;

PIPEPAR_API pp_status pp_simulate(const pp_schedule *s, const pp_sim_costs *costs,
                                  pp_sim_result **out, pp_error *err);
PIPEPAR_API void pp_sim_result_free(pp_sim_result *r);

/* ============================================================================================
 * >>draw
 * Pictures and text forms of a schedule.
 *   ASCII: one row per rank, one column per time unit of the simulated timeline.
 *   SVG:   one row per rank, one box per action, colour by microbatch, F / B / I / W told apart.
 *   torch: one line per rank, "rankR: " then the compute actions in PyTorch's spelling.
 *   CSV:   PyTorch's pipeline-order CSV, one row per rank (compute and communication actions);
 *          pp_schedule_read_csv reads it back (and PyTorch's compute-only form too).
 * ============================================================================================ */
PIPEPAR_API pp_status pp_schedule_draw_ascii(const pp_schedule *s, const pp_sim_result *sim, FILE *out,
                                             pp_error *err);
PIPEPAR_API pp_status pp_schedule_write_svg(const pp_schedule *s, const pp_sim_result *sim, FILE *out,
                                            pp_error *err);
PIPEPAR_API pp_status pp_schedule_write_torch(const pp_schedule *s, FILE *out, pp_error *err);
PIPEPAR_API pp_status pp_schedule_write_csv(const pp_schedule *s, FILE *out, pp_error *err);
PIPEPAR_API pp_status pp_schedule_write_json(const pp_schedule *s, const pp_sim_result *sim, FILE *out,
                                             pp_error *err);
/* Reads a CSV (one row per rank, comma-separated actions). vpp is derived from the largest stage;
 * placement looped unless the stages say V. The result keeps communication actions if present. */
PIPEPAR_API pp_status pp_schedule_read_csv(const char *text, size_t len,
                                           pp_schedule **out, pp_error *err);


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
 *
 * "live" counts (stage, microbatch) activations a rank holds: from the F until the W (or B) that
 * releases them. max_live is only taken by zb-h2 (the others have fixed memory: zb-h1 and zbv
 * hold pp rank-sized activations like 1F1B, dualpipev pp + 1/2).
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
 * Beyond these fixed orders, >>search builds greedy zero-bubble schedules for given costs and a
 * memory cap, and ranks every kind by simulated step time.
 * ============================================================================================ */


/* ============================================================================================
 * >>runtime
 * Runs one rank's lowered program, once per training step. Three parts:
 *
 *   transport  how bytes move between pipeline ranks: a table of five functions (post a group,
 *              wait, test, all-reduce a few floats, abort). pipepar brings one built from
 *              pthreads (>>threads, N ranks as N threads of one process, for tests and the CPU
 *              demo); pipepar_nccl.c brings NCCL; a user can write their own.
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
 *     input(m)  ─► x0 ─► F(0,m) ─► x1 ─► F(1,m) ─► ... ─► F(S-1,m) ─► out ─► loss(m)
 *                                                                            │
 *       B(0,m) ◄─ g1 ◄─ B(1,m) ◄─ ... ◄─ gS-1 ◄──────────── B(S-1,m) ◄─ g_out ┘
 *
 *   forward(stage, m, in, out)                   in = x_s, out = x_{s+1} (to fill)
 *   loss(m, out, grad_out, &l)                   last stage, right after its forward: the loss of
 *                                                microbatch m and dLoss/d out (to fill)
 *   backward(stage, m, in, grad_out, grad_in)    grad_in = g_s to fill; NULL on stage 0
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
 * Failure. Every wait has a deadline (pp_executor_config.timeout_s). A rank that fails (a
 * callback error, a timeout, a transport error) aborts the transport with its reason, so every
 * other rank returns promptly with PP_EABORTED naming the first failure: no rank hangs. Before
 * a step the ranks all-reduce a hash of (schedule, step number, step options): ranks given
 * different schedules fail at once with PP_EINVALID_SCHEDULE instead of exchanging wrong
 * tensors. Message tags carry (direction, stage, microbatch, step) and are checked on receipt
 * by transports that can (the threads transport does).
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
 *         wins. */
typedef struct pp_transport {
    void *user;
    int rank, world;
    pp_status (*post)(void *user, const pp_transfer *transfers, int count, void **handle, pp_error *err);
    pp_status (*wait)(void *user, void *handle, double timeout_s, pp_error *err);
    pp_status (*test)(void *user, void *handle, int *done, pp_error *err);
    pp_status (*all_reduce)(void *user, float *values, int count, double timeout_s, pp_error *err);
    void (*abort)(void *user, pp_status status, const char *reason);
} pp_transport;

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
 * destination, tag), oldest first; a send copies its bytes (buffered), so a send never blocks.
 * Every wait uses a condition variable with a deadline. Not available with PIPEPAR_NO_THREADS.
 *
 *     pp_threads_world *w;  pp_threads_world_create(4, &w, &err);
 *     // on the thread of rank r:  pp_transport t;  pp_threads_transport(w, r, &t, &err);
 *     ... pp_threads_world_free(w) once every thread has joined.
 * Or let pp_threads_run start and join the threads for you. */
typedef struct pp_threads_world pp_threads_world;

PIPEPAR_API pp_status pp_threads_world_create(int world, pp_threads_world **out, pp_error *err);
/* Frees the world and every message still queued. Call after all ranks' threads have joined. */
PIPEPAR_API void pp_threads_world_free(pp_threads_world *w);
/* Fills *out with rank's transport; valid until the world is freed. */
PIPEPAR_API pp_status pp_threads_transport(pp_threads_world *w, int rank, pp_transport *out, pp_error *err);

/* Runs fn(user, rank, transport, err) on `world` new threads (one per rank) and joins them all.
 * status[world] and errors[world] (both optional) receive each rank's result. Returns PP_OK when
 * every rank did; otherwise the status of the root cause (the first failure that was not
 * PP_EABORTED) and its message, prefixed with "rank R: ". */
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
} pp_mb_info;

/* What the loss callback reports for its microbatch. The executor sets weight to valid_rows
 * (or 1 without batch_rows) and loss and metrics to 0 before the call. The step's loss is
 * sum(loss) / sum(weight) over microbatches, so return the *sum* of per-row losses over the
 * valid rows (with batch_rows), or the microbatch's mean loss with weight 1 (without). */
typedef struct pp_loss {
    float loss;
    float weight;
    float metrics[PP_MAX_METRICS];  /* summed over microbatches, not divided */
} pp_loss;

/* The user's model. Callbacks return 0 on success; anything else fails the step with
 * PP_ECALLBACK (the message names the rank, action and the value returned). Optional ones may
 * be NULL: backward_input/backward_weight only when the schedule has no I/W actions;
 * forward_backward always (FB actions then run the F half, then the B half); loss in forward-
 * only mode. Callbacks of one rank run on the thread that called pp_run_step. */
typedef struct pp_callbacks {
    void *user;
    /* bytes of boundary tensor `boundary` (0..num_stages) for info->mb; info->stage == boundary */
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
} pp_callbacks;

/* Where boundary tensors live. Zero means host memory from PIPEPAR_MALLOC / PIPEPAR_FREE.
 * A CUDA trainer passes cudaMalloc/cudaFree wrappers. alloc returns NULL on failure. */
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
    const pp_schedule *schedule;  /* lowered (pp > 1) and valid; copied, may be freed after */
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
} pp_step;

typedef struct pp_step_result {
    float loss;                          /* sum(loss) / sum(weight), on every rank (0 if no weight) */
    float weight;                        /* sum(weight) */
    float metrics[PP_MAX_METRICS];       /* sums over microbatches, on every rank */
    /* forward only, on the rank of the last stage: outputs[m] is microbatch m's last-stage
     * output (output_bytes[m] bytes, in the allocator's memory), valid until the next step or
     * pp_executor_free. NULL elsewhere. */
    const void *const *outputs;
    const size_t *output_bytes;
    int num_outputs;
    double seconds;                      /* host wall time of the step on this rank */
} pp_step_result;

/* Runs one step of this rank's program. On failure the transport is aborted (so the other ranks
 * stop too), every buffer is accounted for, and the executor refuses further steps. */
PIPEPAR_API pp_status pp_run_step(pp_executor *ex, const pp_step *step, pp_step_result *result, pp_error *err);

typedef struct pp_executor_stats {
    int planned_slots;      /* peak live tensors of the program (training or forward-only), from setup */
    int peak_slots;         /* most slots in use at once so far */
    int slots;              /* slots with memory now */
    size_t bytes;           /* memory held by the slots now */
    long long allocations;  /* allocator calls so far (a steady step makes none) */
    long long transfers;    /* sends and receives posted so far */
    long long groups;       /* groups posted so far */
    int steps;
} pp_executor_stats;

PIPEPAR_API void pp_executor_get_stats(const pp_executor *ex, pp_executor_stats *out);

/* --- >>timeline ------------------------------------------------------------------------------ */

/* The measured times of one rank's last step. Times are seconds of the rank's clock (the host
 * clock: comparable across the threads and processes of one machine). start < 0: not run. For a
 * compute action, [ready, end) is the compute and [start, ready) the wait for its inputs; for a
 * communication action, [start, end) runs from posting its group to finishing it. */
typedef struct pp_timeline {
    int rank;
    int length;
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
/* The measured timeline as text, `width` columns wide (0 means 96), in the layout of
 * pp_schedule_draw_ascii: per rank a line of forwards, a line of backwards (B or I) and, when
 * there are any, a line of W; a cell shows the microbatch (0-9, a-z, A-Z) of the action that
 * ran at that column's middle, blank when none did; then the step time and each rank's busy
 * share. */
PIPEPAR_API pp_status pp_timeline_draw_ascii(const pp_timeline *ranks, int count, int width, FILE *out,
                                             pp_error *err);

#ifdef __cplusplus
}
#endif
#endif /* PIPEPAR_H */

#ifdef PIPEPAR_IMPLEMENTATION
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
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static pp_status pp__fail(pp_error *err, pp_status status, const char *fmt, ...)
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

static pp_status pp__ok(pp_error *err)
{
    if (err) { err->status = PP_OK; err->message[0] = '\0'; }
    return PP_OK;
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
            return pp__fail(err, PP_EINVAL, "%s='%s': '%.*s' is not a dimension (tp, cp, dp, pp)",
                            what, text, (int)(len > 16 ? 16 : len), p);
        if (seen & (1u << d))
            return pp__fail(err, PP_EINVAL, "%s='%s': '%s' appears twice", what, text, pp__dim_names[d]);
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
    prod = (long long)size[PP_DIM_TP] * size[PP_DIM_CP] * size[PP_DIM_PP];
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


/* ============================================================================================
 * >>schedule (implementation)
 * ============================================================================================ */

static const char *const pp__kind_names[PP_KIND_COUNT] = {
    "none", "gpipe", "1f1b", "interleaved", "looped-bfs", "zb-h1", "zb-h2", "zbv",
    "dualpipev", "interleaved-zb", "custom"
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
                    "kind '%s': unknown (one of gpipe, 1f1b, interleaved, looped-bfs, zb-h1, zb-h2, "
                    "zbv, dualpipev, interleaved-zb)", name);
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
    a.op = op; a.stage = stage; a.mb = mb; a.stage2 = -1; a.mb2 = -1;
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
    if (placement == PP_PLACEMENT_V && vpp != 2)
        return pp__fail(err, PP_EINVAL, "vpp=%d: a V-shaped placement has exactly 2 chunks per rank", vpp);
    if (placement != PP_PLACEMENT_LOOPED && placement != PP_PLACEMENT_V)
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
    if (s->placement == PP_PLACEMENT_V) return stage < s->pp ? stage : 2 * s->pp - 1 - stage;
    return stage % s->pp;
}

int pp_stage_chunk(const pp_schedule *s, int stage)
{
    if (!s || stage < 0 || stage >= s->num_stages) return -1;
    if (s->placement == PP_PLACEMENT_V) return stage < s->pp ? 0 : 1;
    return stage / s->pp;
}

int pp_rank_chunk_stage(const pp_schedule *s, int rank, int chunk)
{
    if (!s || rank < 0 || rank >= s->pp || chunk < 0 || chunk >= s->vpp) return -1;
    if (s->placement == PP_PLACEMENT_V) return chunk == 0 ? rank : 2 * s->pp - 1 - rank;
    return chunk * s->pp + rank;
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

/* Megatron's table with a last, smaller group (mb not a multiple of the group size) and vpp >= 3
 * can deadlock: e.g. pp=4, vpp=3, mb=5: rank 0's F(mb 4, chunk 2) waits for rank 3's F(4, chunk
 * 1), which rank 3 runs only after B(0, chunk 1), which waits for rank 0's B(0, chunk 2), which
 * rank 0 runs after that F. Where the exact order deadlocks, every rank found waiting on a
 * backward takes one more warmup forward, until the order runs (this always ends: all-forward
 * warmup is GPipe-like and deadlock-free). Where Megatron's order runs, it is kept exactly. */
static pp_status pp__build_interleaved_deadlock_free(pp_schedule *s, pp_error *err)
{
    int *extra = NULL, r, attempt, total = s->mb * s->vpp;
    unsigned char *stuck = NULL;
    pp_status st;
    if (s->mb % s->group == 0 || s->vpp == 1 || s->pp == 1) return pp__build_interleaved(s, NULL, err);
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
    if (c.kind == PP_ZBV || c.kind == PP_DUALPIPEV) {
        placement = PP_PLACEMENT_V;
        if (c.vpp == 0) c.vpp = 2;
        if (c.vpp != 2)
            return pp__fail(err, PP_EUNSUPPORTED, "vpp=%d: %s uses a V-shaped placement, exactly 2 chunks per rank",
                            c.vpp, kn);
    }
    if (c.vpp == 0) c.vpp = 1;
    if (c.group == 0) c.group = c.pp;
    switch (c.kind) {
    case PP_GPIPE: case PP_1F1B: case PP_ZB_H1: case PP_ZB_H2:
        if (c.vpp != 1)
            return pp__fail(err, PP_EUNSUPPORTED,
                            "vpp=%d: %s runs one chunk per rank (use interleaved or looped-bfs for several)",
                            c.vpp, kn);
        break;
    case PP_INTERLEAVED_1F1B:
        /* Megatron-LM accepts any mb >= 1 and any group >= 1 (a last, smaller group takes the rest). */
        break;
    default: break;
    }
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

/* Where a compute half's inputs come from. For F(s,m): the output of F(s-1,m) (none at s=0).
 * For B/I(s,m): its own F(s,m) and the input-gradient of B/I(s+1,m) (none at the last stage).
 * For W(s,m): its own I(s,m). Returns 1 when the input from a *neighbouring stage* comes from
 * another rank, and sets *from_stage. */
static int pp__cross_input(const pp_schedule *s, int op, int stage, int *from_stage)
{
    int r = pp_stage_rank(s, stage);
    if (op == PP_OP_F) {
        if (stage == 0) return 0;
        *from_stage = stage - 1;
    } else if (op == PP_OP_B || op == PP_OP_I) {
        if (stage == s->num_stages - 1) return 0;
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
        if (stage == 0) return 1;
        if (pp__cross_input(s, op, stage, &from)) return arrived_f[k] ? 1 : 0;
        if (!p->f_done[PP__SM(s, stage - 1, m)]) { *why = "comes before the F of the previous stage on the same rank"; return -1; }
        return 1;
    }
    if (op == PP_OP_W) {
        if (!p->b_done[k]) { *why = "comes before its I"; return -1; }
        return 1;
    }
    /* B or I */
    if (!p->f_done[k]) { *why = "comes before its own F"; return -1; }
    if (stage == s->num_stages - 1) return 1;
    if (pp__cross_input(s, op, stage, &from)) return arrived_b[k] ? 1 : 0;
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

/* Lowering walks the compute orders in lock-step rounds: in each round every rank runs its next
 * compute action if its inputs arrived in an earlier round, then every tensor produced in the
 * round that crosses ranks gets a SEND on its producer and a RECV on its consumer, both placed
 * in that round's communication group. Each pair of ranks therefore sees its transfers in the
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
                if (ops[h] == PP_OP_F && sg + 1 < s->num_stages && (to = pp_stage_rank(s, sg + 1)) != r) {
                    out[r][newlen[r]++] = pp__action(PP_OP_SEND_F, sg, m);
                    out[to][newlen[to]++] = pp__action(PP_OP_RECV_F, sg + 1, m);
                    arrived_f[PP__SM(s, sg + 1, m)] = 1;
                }
                if ((ops[h] == PP_OP_B || ops[h] == PP_OP_I) && sg > 0 && (to = pp_stage_rank(s, sg - 1)) != r) {
                    out[r][newlen[r]++] = pp__action(PP_OP_SEND_B, sg, m);
                    out[to][newlen[to]++] = pp__action(PP_OP_RECV_B, sg - 1, m);
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

static pp_status pp__validate_lowered(const pp_schedule *s, pp_error *err)
{
    size_t plane = (size_t)s->num_stages * (size_t)s->mb, nkeys = 2 * plane;
    int *send_rank = NULL, *send_pos = NULL, *recv_rank = NULL, *recv_pos = NULL;
    int *pc = NULL, *gstart = NULL, *gend = NULL;
    unsigned char *completed = NULL, *arrived_f = NULL, *arrived_b = NULL;
    pp__progress prog = { NULL, NULL, NULL };
    pp_status st = PP_OK;
    int r, i, finished = 0;
    size_t k;
    char txt[64], txt2[64];

    send_rank = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    send_pos = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    recv_rank = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    recv_pos = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    completed = (unsigned char *)pp__calloc(nkeys, 1);
    arrived_f = (unsigned char *)pp__calloc(plane, 1);
    arrived_b = (unsigned char *)pp__calloc(plane, 1);
    pc = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    gstart = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    gend = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    if (!send_rank || !send_pos || !recv_rank || !recv_pos || !completed || !arrived_f || !arrived_b || !pc ||
        !gstart || !gend || !pp__progress_init(&prog, s)) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
        goto done;
    }
    for (k = 0; k < nkeys; k++) send_rank[k] = recv_rank[k] = -1;

    /* 1. every communication action is well formed and has exactly one partner */
    for (r = 0; r < s->pp && st == PP_OK; r++) {
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            int peer_stage, is_send = a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B;
            if (!pp__is_comm(a.op)) continue;
            if (pp_stage_rank(s, a.stage) != r) {
                pp_action_format(a, txt, sizeof txt);
                st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s belongs to stage %d, which lives on rank %d",
                              r, i, txt, (int)a.stage, pp_stage_rank(s, a.stage));
                break;
            }
            peer_stage = (a.op == PP_OP_SEND_F || a.op == PP_OP_RECV_B) ? a.stage + 1 : a.stage - 1;
            if (peer_stage < 0 || peer_stage >= s->num_stages) {
                pp_action_format(a, txt, sizeof txt);
                st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s: stage %d has no %s stage to talk to",
                              r, i, txt, (int)a.stage, peer_stage < 0 ? "previous" : "next");
                break;
            }
            if (pp_stage_rank(s, peer_stage) == r) {
                pp_action_format(a, txt, sizeof txt);
                st = pp__fail(err, PP_EINVALID_SCHEDULE,
                              "rank %d position %d: %s: stages %d and %d share rank %d, the tensor passes in place "
                              "(no communication)", r, i, txt, (int)a.stage, peer_stage, r);
                break;
            }
            k = pp__comm_key(s, a);
            if ((is_send ? send_rank : recv_rank)[k] >= 0) {
                pp_action_format(a, txt, sizeof txt);
                st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s appears twice (first at rank %d position %d)",
                              r, i, txt, (is_send ? send_rank : recv_rank)[k], (is_send ? send_pos : recv_pos)[k]);
                break;
            }
            (is_send ? send_rank : recv_rank)[k] = r;
            (is_send ? send_pos : recv_pos)[k] = i;
        }
    }
    for (k = 0; k < nkeys && st == PP_OK; k++) {
        int dir_b = k >= plane;
        int stg = (int)((k % plane) / (size_t)s->mb), m = (int)(k % (size_t)s->mb);
        if ((send_rank[k] >= 0) == (recv_rank[k] >= 0)) continue;
        if (send_rank[k] >= 0) {
            pp_action_format(s->actions[send_rank[k]][send_pos[k]], txt, sizeof txt);
            pp_action_format(pp__action(dir_b ? PP_OP_RECV_B : PP_OP_RECV_F, dir_b ? stg - 1 : stg + 1, m), txt2, sizeof txt2);
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s has no matching %s on rank %d",
                          send_rank[k], send_pos[k], txt, txt2, pp_stage_rank(s, dir_b ? stg - 1 : stg + 1));
        } else {
            pp_action_format(s->actions[recv_rank[k]][recv_pos[k]], txt, sizeof txt);
            pp_action_format(pp__action(dir_b ? PP_OP_SEND_B : PP_OP_SEND_F, stg, m), txt2, sizeof txt2);
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s has no matching %s on rank %d",
                          recv_rank[k], recv_pos[k], txt, txt2, pp_stage_rank(s, stg));
        }
    }
    if (st != PP_OK) goto done;

    /* 2. run the programs: compute needs its inputs already here; a group of consecutive
     *    communication actions is posted at once and finishes when every partner is posted
     *    (rendezvous: a send waits for its receive). */
    for (r = 0; r < s->pp; r++) { gstart[r] = gend[r] = -1; if (s->length[r] == 0) finished++; }
    while (finished < s->pp) {
        int progress = 0;
        for (r = 0; r < s->pp; r++) {
            while (pc[r] < s->length[r]) {
                pp_action a = s->actions[r][pc[r]];
                if (!pp__is_comm(a.op)) {
                    int ops[2], stg[2], mbs[2], h, nh = pp__halves(a, ops, stg, mbs);
                    for (h = 0; h < nh; h++) {
                        const char *why = "";
                        int ready = pp__half_ready(s, &prog, arrived_f, arrived_b, ops[h], stg[h], mbs[h], &why);
                        if (ready != 1) {
                            int from = 0;
                            pp_action_format(a, txt, sizeof txt);
                            if (ready == 0) {
                                pp__cross_input(s, ops[h], stg[h], &from);
                                st = pp__fail(err, PP_EINVALID_SCHEDULE,
                                              "rank %d position %d: %s needs the %s of stage %d (rank %d), but no %s "
                                              "before it received it", r, pc[r], txt,
                                              ops[h] == PP_OP_F ? "output" : "input-gradient", from,
                                              pp_stage_rank(s, from), ops[h] == PP_OP_F ? "RECV_F" : "RECV_B");
                            } else {
                                st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s %s", r, pc[r], txt, why);
                            }
                            goto done;
                        }
                    }
                    for (h = 0; h < nh; h++) pp__mark_done(s, &prog, ops[h], stg[h], mbs[h]);
                    pc[r]++;
                    progress = 1;
                    continue;
                }
                /* a communication group [gstart, gend) */
                if (gstart[r] != pc[r]) {
                    int e = pc[r];
                    while (e < s->length[r] && pp__is_comm(s->actions[r][e].op)) e++;
                    gstart[r] = pc[r]; gend[r] = e;
                    /* posting a send needs the tensor to exist */
                    for (i = gstart[r]; i < gend[r]; i++) {
                        pp_action c = s->actions[r][i];
                        if (c.op == PP_OP_SEND_F && !prog.f_done[PP__SM(s, c.stage, c.mb)]) {
                            pp_action_format(c, txt, sizeof txt);
                            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s comes before the F it sends",
                                          r, i, txt);
                            goto done;
                        }
                        if (c.op == PP_OP_SEND_B && !prog.b_done[PP__SM(s, c.stage, c.mb)]) {
                            pp_action_format(c, txt, sizeof txt);
                            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s comes before the B (or I) "
                                          "whose gradient it sends", r, i, txt);
                            goto done;
                        }
                    }
                }
                {
                    int all = 1;
                    for (i = gstart[r]; i < gend[r]; i++) {
                        pp_action c = s->actions[r][i];
                        int is_send = c.op == PP_OP_SEND_F || c.op == PP_OP_SEND_B, pr, pq;
                        k = pp__comm_key(s, c);
                        if (completed[k]) continue;
                        pr = is_send ? recv_rank[k] : send_rank[k];
                        pq = is_send ? recv_pos[k] : send_pos[k];
                        if (pc[pr] == gstart[pr] && gstart[pr] <= pq && pq < gend[pr]) completed[k] = 1;
                        else all = 0;
                    }
                    if (!all) break;   /* blocked in this group */
                    for (i = gstart[r]; i < gend[r]; i++) {
                        pp_action c = s->actions[r][i];
                        if (c.op == PP_OP_RECV_F) arrived_f[PP__SM(s, c.stage, c.mb)] = 1;
                        if (c.op == PP_OP_RECV_B) arrived_b[PP__SM(s, c.stage, c.mb)] = 1;
                    }
                    pc[r] = gend[r];
                    gstart[r] = gend[r] = -1;
                    progress = 1;
                }
            }
            if (pc[r] == s->length[r] && gstart[r] != -2) { finished++; gstart[r] = -2; }
        }
        if (!progress && finished < s->pp) {
            pp__text t = { NULL, 0, 0, 0 };
            int shown = 0;
            for (r = 0; r < s->pp && shown < 3; r++) {
                if (pc[r] >= s->length[r]) continue;
                for (i = gstart[r]; i >= 0 && i < gend[r]; i++) {
                    pp_action c = s->actions[r][i];
                    int is_send = c.op == PP_OP_SEND_F || c.op == PP_OP_SEND_B;
                    k = pp__comm_key(s, c);
                    if (completed[k]) continue;
                    pp_action_format(c, txt, sizeof txt);
                    pp__text_printf(&t, "%srank %d waits at position %d (%s) for rank %d, which is at position %d",
                                    shown ? "; " : "", r, i, txt, is_send ? recv_rank[k] : send_rank[k],
                                    pc[is_send ? recv_rank[k] : send_rank[k]]);
                    break;
                }
                shown++;
            }
            st = pp__fail(err, PP_EDEADLOCK, "deadlock (sends wait for their receives): %s", t.data ? t.data : "");
            pp__text_free(&t);
            goto done;
        }
    }
    st = PP_OK;
done:
    PIPEPAR_FREE(send_rank); PIPEPAR_FREE(send_pos); PIPEPAR_FREE(recv_rank); PIPEPAR_FREE(recv_pos);
    PIPEPAR_FREE(completed); PIPEPAR_FREE(arrived_f); PIPEPAR_FREE(arrived_b);
    PIPEPAR_FREE(pc); PIPEPAR_FREE(gstart); PIPEPAR_FREE(gend);
    pp__progress_free(&prog);
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
    return q->stage && q->mb;
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
 * so a chunk of a vpp-chunk rank costs 1/vpp of them; per-stage arrays are taken as they are. */
static double pp__half_cost(const pp_schedule *s, const pp_sim_costs *c, int op, int stage)
{
    double f = c->f > 0 ? c->f : 1.0, b = c->b > 0 ? c->b : 2.0 * f, i = c->i, w = c->w;
    double v = (double)s->vpp;
    if (i <= 0 && w <= 0) { i = b / 2; w = b / 2; }
    switch (op) {
    case PP_OP_F: return c->f_stage ? c->f_stage[stage] : f / v;
    case PP_OP_B: return c->b_stage ? c->b_stage[stage] : b / v;
    case PP_OP_I: return c->i_stage ? c->i_stage[stage] : i / v;
    default:      return c->w_stage ? c->w_stage[stage] : w / v;
    }
}

pp_status pp_simulate(const pp_schedule *sched, const pp_sim_costs *costs, pp_sim_result **out, pp_error *err)
{
    pp_sim_costs zero;
    const pp_schedule *s = sched;
    pp_schedule *lowered = NULL;
    pp_sim_result *res = NULL;
    pp_status st;
    size_t plane, nkeys, k;
    double *post_send = NULL, *post_recv = NULL, *arr_f = NULL, *arr_b = NULL, *t = NULL;
    int *send_r = NULL, *send_p = NULL, *recv_r = NULL, *recv_p = NULL, *pc = NULL;
    unsigned char *arrived_f = NULL, *arrived_b = NULL;
    pp__progress prog = { NULL, NULL, NULL };
    int r, i, finished = 0, has_comm = 0;
    double t0 = DBL_MAX, t1 = 0;

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
    if (!has_comm && sched->pp > 1) {
        st = pp_schedule_copy(sched, &lowered, err);
        if (st == PP_OK) st = pp_schedule_lower(lowered, err);
        if (st != PP_OK) { pp_schedule_free(lowered); return st; }
        s = lowered;
    }
    plane = (size_t)s->num_stages * (size_t)s->mb;
    nkeys = 2 * plane;
    res = (pp_sim_result *)pp__calloc(1, sizeof *res);
    if (!res) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
    res->pp = s->pp; res->vpp = s->vpp;
    res->busy = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    res->bubble = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    res->peak_live = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    res->peak_memory = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    res->length = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    res->start = (double **)pp__calloc((size_t)s->pp, sizeof(double *));
    res->end = (double **)pp__calloc((size_t)s->pp, sizeof(double *));
    post_send = (double *)PIPEPAR_MALLOC(nkeys * sizeof(double));
    post_recv = (double *)PIPEPAR_MALLOC(nkeys * sizeof(double));
    send_r = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    send_p = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    recv_r = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    recv_p = (int *)PIPEPAR_MALLOC(nkeys * sizeof(int));
    arr_f = (double *)pp__calloc(plane, sizeof(double));
    arr_b = (double *)pp__calloc(plane, sizeof(double));
    arrived_f = (unsigned char *)pp__calloc(plane, 1);
    arrived_b = (unsigned char *)pp__calloc(plane, 1);
    t = (double *)pp__calloc((size_t)s->pp, sizeof(double));
    pc = (int *)pp__calloc((size_t)s->pp, sizeof(int));
    if (!res->busy || !res->bubble || !res->peak_live || !res->peak_memory || !res->length || !res->start ||
        !res->end || !post_send || !post_recv || !send_r || !send_p || !recv_r || !recv_p || !arr_f || !arr_b ||
        !arrived_f || !arrived_b || !t || !pc || !pp__progress_init(&prog, s)) {
        st = pp__fail(err, PP_ENOMEM, "out of memory");
        goto done;
    }
    for (r = 0; r < s->pp; r++) {
        size_t n = s->length[r] > 0 ? (size_t)s->length[r] : 1;
        res->length[r] = s->length[r];
        res->start[r] = (double *)pp__calloc(n, sizeof(double));
        res->end[r] = (double *)pp__calloc(n, sizeof(double));
        if (!res->start[r] || !res->end[r]) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
        if (s->length[r] == 0) finished++;
    }
    for (k = 0; k < nkeys; k++) { post_send[k] = post_recv[k] = -1; send_r[k] = recv_r[k] = -1; }

    while (finished < s->pp) {
        int progress = 0;
        for (r = 0; r < s->pp; r++) {
            if (pc[r] >= s->length[r]) continue;
            while (pc[r] < s->length[r]) {
                pp_action a = s->actions[r][pc[r]];
                if (pp__is_comm(a.op)) {
                    /* posting never blocks; the transfer runs once both sides have posted */
                    int is_send = a.op == PP_OP_SEND_F || a.op == PP_OP_SEND_B;
                    k = pp__comm_key(s, a);
                    if (is_send) { post_send[k] = t[r]; send_r[k] = r; send_p[k] = pc[r]; }
                    else { post_recv[k] = t[r]; recv_r[k] = r; recv_p[k] = pc[r]; }
                    if (post_send[k] >= 0 && post_recv[k] >= 0) {
                        double start = post_send[k] > post_recv[k] ? post_send[k] : post_recv[k];
                        double end = start + costs->p2p_latency + costs->p2p_seconds_per_byte * costs->activation_bytes;
                        pp_action rv = s->actions[recv_r[k]][recv_p[k]];
                        size_t ck = PP__SM(s, rv.stage, rv.mb);
                        res->start[send_r[k]][send_p[k]] = res->start[recv_r[k]][recv_p[k]] = start;
                        res->end[send_r[k]][send_p[k]] = res->end[recv_r[k]][recv_p[k]] = end;
                        if (rv.op == PP_OP_RECV_F) { arr_f[ck] = end; arrived_f[ck] = 1; }
                        else { arr_b[ck] = end; arrived_b[ck] = 1; }
                    }
                    pc[r]++;
                    progress = 1;
                    continue;
                }
                {
                    int ops[2], stg[2], mbs[2], h, nh = pp__halves(a, ops, stg, mbs), ready = 1;
                    double start = t[r], dur = 0;
                    char txt[64];
                    for (h = 0; h < nh && ready == 1; h++) {
                        const char *why = "";
                        int from;
                        ready = pp__half_ready(s, &prog, arrived_f, arrived_b, ops[h], stg[h], mbs[h], &why);
                        if (ready < 0) {
                            pp_action_format(a, txt, sizeof txt);
                            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d: %s %s", r, pc[r], txt, why);
                            goto done;
                        }
                        if (ready == 1 && pp__cross_input(s, ops[h], stg[h], &from)) {
                            double at = ops[h] == PP_OP_F ? arr_f[PP__SM(s, stg[h], mbs[h])]
                                                          : arr_b[PP__SM(s, stg[h], mbs[h])];
                            if (at > start) start = at;
                        }
                    }
                    if (!ready) break;
                    for (h = 0; h < nh; h++) {
                        dur += pp__half_cost(s, costs, ops[h], stg[h]);
                        pp__mark_done(s, &prog, ops[h], stg[h], mbs[h]);
                    }
                    res->start[r][pc[r]] = start;
                    res->end[r][pc[r]] = start + dur;
                    res->busy[r] += dur;
                    t[r] = start + dur;
                    if (start < t0) t0 = start;
                    if (start + dur > t1) t1 = start + dur;
                    pc[r]++;
                    progress = 1;
                }
            }
            if (pc[r] >= s->length[r]) finished++;
        }
        if (!progress && finished < s->pp) {
            st = pp__fail(err, PP_EDEADLOCK, "simulation cannot finish: the schedule waits for tensors that are "
                          "never sent (run pp_schedule_validate for the exact place)");
            goto done;
        }
    }
    if (t0 == DBL_MAX) t0 = 0;
    res->makespan = t1 - t0;

    /* peak live activations: an F's activations live from its start until its B (or W) ends.
     * Compute is sequential per rank, so in program order these instants never go back in time
     * (start <= end <= next start): one walk, no sort; a release at the same instant as the
     * next allocation comes first, as it should. */
    for (r = 0; r < s->pp; r++) {
        int live = 0, peak = 0;
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            int ops[2], stg[2], mbs[2], h, nh;
            if (pp__is_comm(a.op)) continue;
            nh = pp__halves(a, ops, stg, mbs);
            for (h = 0; h < nh; h++) {
                if (ops[h] == PP_OP_F) { if (++live > peak) peak = live; }
                else if (ops[h] == PP_OP_B || ops[h] == PP_OP_W) live--;
            }
        }
        res->peak_live[r] = peak;
        res->peak_memory[r] = (double)peak / (double)s->vpp;
    }
    res->bubble_mean = 0;
    for (r = 0; r < s->pp; r++) {
        res->bubble[r] = res->makespan > 0 ? 1.0 - res->busy[r] / res->makespan : 0.0;
        res->bubble_mean += res->bubble[r] / s->pp;
    }
    *out = res;
    res = NULL;
    st = pp__ok(err);
done:
    pp_sim_result_free(res);
    pp_schedule_free(lowered);
    PIPEPAR_FREE(post_send); PIPEPAR_FREE(post_recv); PIPEPAR_FREE(send_r); PIPEPAR_FREE(send_p);
    PIPEPAR_FREE(recv_r); PIPEPAR_FREE(recv_p); PIPEPAR_FREE(arr_f); PIPEPAR_FREE(arr_b);
    PIPEPAR_FREE(arrived_f); PIPEPAR_FREE(arrived_b); PIPEPAR_FREE(t); PIPEPAR_FREE(pc);
    pp__progress_free(&prog);
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
    return m < 62 ? digits[m] : '#';
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
    pp__text_printf(&t, "%s  pp=%d vpp=%d mb=%d  (one column = %g time units; cells show the microbatch)\n",
                    pp_schedule_kind_name(s->kind), s->pp, s->vpp, s->mb, unit);
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

/* Colour of a microbatch: hues spread by the golden angle so neighbours differ. */
static void pp__svg_colour(int m, int op, char *buf, size_t n)
{
    int hue = (int)fmod(m * 137.508, 360.0);
    int light = op == PP_OP_F ? 72 : op == PP_OP_W ? 30 : op == PP_OP_I ? 56 : 45;
    snprintf(buf, n, "hsl(%d,70%%,%d%%)", hue, light);
}

pp_status pp_schedule_write_svg(const pp_schedule *s, const pp_sim_result *sim, FILE *out, pp_error *err)
{
    pp_sim_result *owned = NULL;
    const pp_sim_result *use = NULL;
    pp__text t = { NULL, 0, 0, 0 };
    pp_status st;
    double width = 1200, row_h = 34, left = 70, top = 56, scale;
    int r, i;
    char colour[48], label[64];
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    st = pp__sim_for_drawing(s, sim, &owned, &use, err);
    if (st != PP_OK) return st;
    scale = use->makespan > 0 ? (width - left - 20) / use->makespan : 1;
    pp__text_printf(&t, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                    "font-family=\"Helvetica,Arial,sans-serif\" font-size=\"11\">\n",
                    width, top + row_h * s->pp + 70);
    pp__text_printf(&t, "<defs><pattern id=\"stripes\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
                    "patternTransform=\"rotate(45)\"><rect width=\"3\" height=\"6\" fill=\"white\" "
                    "fill-opacity=\"0.35\"/></pattern></defs>\n");
    pp__text_printf(&t, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    pp__text_printf(&t, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s schedule: pp=%d, "
                    "vpp=%d, mb=%d</text>\n", left, pp_schedule_kind_name(s->kind), s->pp, s->vpp, s->mb);
    pp__text_printf(&t, "<text x=\"%.0f\" y=\"40\">step time %.4g, mean bubble %.1f%%. Box label: "
                    "&lt;stage&gt;&lt;op&gt;&lt;microbatch&gt;; colour = microbatch; light = forward, dark = "
                    "backward, striped = input-grad (I), darkest = weight-grad (W).</text>\n",
                    left, use->makespan, 100.0 * use->bubble_mean);
    for (r = 0; r < s->pp; r++) {
        double y = top + r * row_h;
        pp__text_printf(&t, "<text x=\"8\" y=\"%.1f\">rank %d</text>\n", y + row_h / 2 + 4, r);
        pp__text_printf(&t, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f3f3f3\"/>\n",
                        left, y + 2, use->makespan * scale, row_h - 4);
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            double x = left + use->start[r][i] * scale, w = (use->end[r][i] - use->start[r][i]) * scale;
            int m = a.mb, op = a.op;
            if (pp__is_comm(a.op)) continue;
            if (op == PP_OP_FB) op = PP_OP_F;
            pp__svg_colour(m, op, colour, sizeof colour);
            pp_action_format(a, label, sizeof label);
            pp__text_printf(&t, "<g><title>rank %d: %s  [%.4g, %.4g]</title>", r, label, use->start[r][i], use->end[r][i]);
            pp__text_printf(&t, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                            "stroke=\"white\" stroke-width=\"0.8\"/>", x, y + 2, w > 0.5 ? w : 0.5, row_h - 4, colour);
            if (a.op == PP_OP_I)
                pp__text_printf(&t, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"url(#stripes)\"/>",
                                x, y + 2, w, row_h - 4);
            if (a.op == PP_OP_FB)
                pp__text_printf(&t, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"black\" "
                                "fill-opacity=\"0.35\"/>", x, y + row_h / 2, w, row_h / 2 - 2);
            if (w >= 7.0 * (double)strlen(label) && a.op != PP_OP_FB)
                pp__text_printf(&t, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">%s</text>",
                                x + w / 2, y + row_h / 2 + 4, op == PP_OP_F ? "black" : "white", label);
            pp__text_printf(&t, "</g>\n");
        }
    }
    {
        double y = top + row_h * s->pp + 24;
        static const int legend_ops[] = { PP_OP_F, PP_OP_B, PP_OP_I, PP_OP_W };
        static const char *const legend_names[] = { "F forward", "B backward", "I input-grad", "W weight-grad" };
        int k;
        for (k = 0; k < 4; k++) {
            pp__svg_colour(0, legend_ops[k], colour, sizeof colour);
            pp__text_printf(&t, "<rect x=\"%.0f\" y=\"%.0f\" width=\"18\" height=\"12\" fill=\"%s\"/>",
                            left + k * 150.0, y, colour);
            if (legend_ops[k] == PP_OP_I)
                pp__text_printf(&t, "<rect x=\"%.0f\" y=\"%.0f\" width=\"18\" height=\"12\" fill=\"url(#stripes)\"/>",
                                left + k * 150.0, y);
            pp__text_printf(&t, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", left + k * 150.0 + 24, y + 10, legend_names[k]);
        }
        pp__text_printf(&t, "<text x=\"%.0f\" y=\"%.0f\">grey = idle (the bubble)</text>\n", left + 600.0, y + 10);
    }
    pp__text_printf(&t, "</svg>\n");
    pp_sim_result_free(owned);
    return pp__text_flush(&t, out, err);
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
            pp_action_format(s->actions[r][i], buf, sizeof buf);
            pp__text_printf(&t, "%s%s", i ? "," : "", buf);
        }
        pp__text_printf(&t, "\n");
    }
    return pp__text_flush(&t, out, err);
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
                    s->placement == PP_PLACEMENT_V ? "v" : "looped", s->num_stages, s->lowered ? "true" : "false");
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

/* Reads PyTorch's pipeline-order CSV: row r is rank r's program, one action per cell; empty
 * cells (PyTorch writes None as an empty cell) are skipped. pp is the number of rows; stages,
 * microbatches and the placement come from the actions themselves. */
pp_status pp_schedule_read_csv(const char *text, size_t len, pp_schedule **out, pp_error *err)
{
    pp_action *acts = NULL;
    int *row_of = NULL;
    size_t n = 0, cap = 0, pos = 0;
    int rows = 0, max_stage = -1, max_mb = -1, looped = 1, vshape = 1, vpp;
    pp_schedule *s = NULL;
    pp_status st = PP_OK;
    if (!text || !out) return pp__fail(err, PP_EINVAL, "text and out: must not be NULL");
    *out = NULL;
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
        if (rows > 65536) { st = pp__fail(err, PP_EPARSE, "CSV: more than 65536 rows (ranks)"); goto done; }
        pos = line_end + 1;
    }
    if (rows == 0 || n == 0) { st = pp__fail(err, PP_EPARSE, "CSV: no actions found (one row per rank expected)"); goto done; }
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
    }
    if (!looped && !vshape) {
        st = pp__fail(err, PP_EPARSE, "CSV: stages are placed neither looped (stage s on rank s %% pp) nor V-shaped "
                      "(rank r holds r and 2pp-1-r)");
        goto done;
    }
    st = pp_schedule_create(rows, vpp, max_mb + 1, looped ? PP_PLACEMENT_LOOPED : PP_PLACEMENT_V, &s, err);
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
 * One mutex guards the whole world: the mailboxes (one singly linked FIFO per destination), the
 * abort state and the all-reduce. Each rank sleeps on its own condition variable (a message for
 * it arrived, or the world was aborted); all-reduce waiters sleep on reduce_cv. Conditions use
 * CLOCK_MONOTONIC so a change of the wall clock cannot stretch a deadline. */
#ifndef PIPEPAR_NO_THREADS
#include <pthread.h>
#include <errno.h>

typedef struct pp__msg {
    struct pp__msg *next;
    int src;
    uint64_t tag;
    size_t bytes;   /* the payload follows the struct */
} pp__msg;

typedef struct pp__threads_rank {
    struct pp_threads_world *w;
    int rank;
} pp__threads_rank;

struct pp_threads_world {
    int world;
    pthread_mutex_t mu;
    pthread_cond_t *cv;             /* [world] */
    pthread_cond_t reduce_cv;
    pp__msg **head, **tail;         /* [world] mailbox of each destination rank */
    pp__threads_rank *ranks;        /* [world] the `user` of each rank's transport */
    int aborted, abort_rank;
    pp_status abort_status;
    char abort_reason[PP_ERROR_MESSAGE_SIZE];
    float *acc, *result;            /* all-reduce: running sum, last result */
    int acc_cap, arrived, count, count_rank;
    unsigned long generation;
    int cv_ready, mu_ready, reduce_ready;
};

/* A posted group: its receives, matched when waited or tested. */
typedef struct pp__threads_group {
    int nrecv, matched;
    pp_transfer *recv;              /* [nrecv] */
    unsigned char *done;            /* [nrecv] */
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

static pp_status pp__threads_aborted(pp_threads_world *w, int rank, pp_error *err)
{
    return pp__fail(err, PP_EABORTED, "rank %d: stopped because rank %d failed (%s): %s", rank, w->abort_rank,
                    pp_status_name(w->abort_status), w->abort_reason);
}

/* Abort with the world's mutex held. */
static void pp__threads_abort_locked(pp_threads_world *w, int rank, pp_status status, const char *reason)
{
    int r;
    if (w->aborted) return;
    w->aborted = 1;
    w->abort_rank = rank;
    w->abort_status = status;
    snprintf(w->abort_reason, sizeof w->abort_reason, "%s", reason ? reason : "");
    for (r = 0; r < w->world; r++) pthread_cond_broadcast(&w->cv[r]);
    pthread_cond_broadcast(&w->reduce_cv);
}

static void pp__threads_abort(void *user, pp_status status, const char *reason)
{
    pp__threads_rank *me = (pp__threads_rank *)user;
    pthread_mutex_lock(&me->w->mu);
    pp__threads_abort_locked(me->w, me->rank, status, reason);
    pthread_mutex_unlock(&me->w->mu);
}

static pp_status pp__threads_post(void *user, const pp_transfer *xf, int count, void **handle, pp_error *err)
{
    pp__threads_rank *me = (pp__threads_rank *)user;
    pp_threads_world *w = me->w;
    pp__msg **msgs = NULL;
    pp__threads_group *g = NULL;
    int i, nsend = 0, nrecv = 0, k;
    char tagtxt[64];
    if (!handle || (count > 0 && !xf)) return pp__fail(err, PP_EINVAL, "post: transfers and handle must not be NULL");
    *handle = NULL;
    for (i = 0; i < count; i++) {
        if (xf[i].peer < 0 || xf[i].peer >= w->world) {
            pp_transfer_tag_format(xf[i].tag, tagtxt, sizeof tagtxt);
            return pp__fail(err, PP_EINVAL, "rank %d: transfer %s: peer=%d, must be between 0 and %d", me->rank,
                            tagtxt, xf[i].peer, w->world - 1);
        }
        if (xf[i].bytes > 0 && !xf[i].buf)
            return pp__fail(err, PP_EINVAL, "rank %d: transfer %d: buf is NULL for %zu bytes", me->rank, i, xf[i].bytes);
        if (xf[i].is_send) nsend++; else nrecv++;
    }
    /* copy the sends and set up the receives outside the lock */
    g = (pp__threads_group *)pp__calloc(1, sizeof *g);
    msgs = (pp__msg **)pp__calloc((size_t)(nsend > 0 ? nsend : 1), sizeof(pp__msg *));
    if (g) {
        g->recv = (pp_transfer *)pp__calloc((size_t)(nrecv > 0 ? nrecv : 1), sizeof(pp_transfer));
        g->done = (unsigned char *)pp__calloc((size_t)(nrecv > 0 ? nrecv : 1), 1);
    }
    if (!g || !msgs || !g->recv || !g->done) goto oom;
    for (i = 0, k = 0; i < count; i++) {
        if (!xf[i].is_send) { g->recv[g->nrecv++] = xf[i]; continue; }
        if (xf[i].bytes > SIZE_MAX - sizeof(pp__msg)) goto oom;
        msgs[k] = (pp__msg *)PIPEPAR_MALLOC(sizeof(pp__msg) + xf[i].bytes);
        if (!msgs[k]) goto oom;
        msgs[k]->next = NULL;
        msgs[k]->src = me->rank;
        msgs[k]->tag = xf[i].tag;
        msgs[k]->bytes = xf[i].bytes;
        if (xf[i].bytes) memcpy(msgs[k] + 1, xf[i].buf, xf[i].bytes);
        msgs[k]->src = me->rank;
        k++;
    }
    pthread_mutex_lock(&w->mu);
    if (w->aborted) {
        pp_status st = pp__threads_aborted(w, me->rank, err);
        pthread_mutex_unlock(&w->mu);
        for (k = 0; k < nsend; k++) PIPEPAR_FREE(msgs[k]);
        PIPEPAR_FREE(msgs); PIPEPAR_FREE(g->recv); PIPEPAR_FREE(g->done); PIPEPAR_FREE(g);
        return st;
    }
    for (i = 0, k = 0; i < count; i++) {
        int to;
        if (!xf[i].is_send) continue;
        to = xf[i].peer;
        if (w->tail[to]) w->tail[to]->next = msgs[k]; else w->head[to] = msgs[k];
        w->tail[to] = msgs[k];
        pthread_cond_broadcast(&w->cv[to]);
        k++;
    }
    pthread_mutex_unlock(&w->mu);
    PIPEPAR_FREE(msgs);
    *handle = g;
    return pp__ok(err);
oom:
    if (msgs) for (k = 0; k < nsend; k++) PIPEPAR_FREE(msgs[k]);
    PIPEPAR_FREE(msgs);
    if (g) { PIPEPAR_FREE(g->recv); PIPEPAR_FREE(g->done); }
    PIPEPAR_FREE(g);
    return pp__fail(err, PP_ENOMEM, "rank %d: out of memory posting %d transfers", me->rank, count);
}

static void pp__threads_group_free(pp__threads_group *g)
{
    if (!g) return;
    PIPEPAR_FREE(g->recv); PIPEPAR_FREE(g->done); PIPEPAR_FREE(g);
}

/* Matches what can be matched of g's receives (mutex held). PP_OK, or PP_ETRANSPORT when a
 * message with the right tag has the wrong size. */
static pp_status pp__threads_match(pp_threads_world *w, int rank, pp__threads_group *g, pp_error *err)
{
    int i;
    for (i = 0; i < g->nrecv; i++) {
        pp__msg *m, *prev = NULL;
        if (g->done[i]) continue;
        for (m = w->head[rank]; m; prev = m, m = m->next)
            if (m->src == g->recv[i].peer && m->tag == g->recv[i].tag) break;
        if (!m) continue;
        if (prev) prev->next = m->next; else w->head[rank] = m->next;
        if (w->tail[rank] == m) w->tail[rank] = prev;
        if (m->bytes != g->recv[i].bytes) {
            char tagtxt[64];
            pp_status st;
            pp_transfer_tag_format(m->tag, tagtxt, sizeof tagtxt);
            st = pp__fail(err, PP_ETRANSPORT,
                          "rank %d: the tensor %s from rank %d has %zu bytes, but this rank expects %zu "
                          "(tensor_bytes differs between the ranks)", rank, tagtxt, m->src, m->bytes,
                          g->recv[i].bytes);
            PIPEPAR_FREE(m);
            return st;
        }
        if (m->bytes) memcpy(g->recv[i].buf, m + 1, m->bytes);
        PIPEPAR_FREE(m);
        g->done[i] = 1;
        g->matched++;
    }
    return PP_OK;
}

static pp_status pp__threads_wait(void *user, void *handle, double timeout_s, pp_error *err)
{
    pp__threads_rank *me = (pp__threads_rank *)user;
    pp_threads_world *w = me->w;
    pp__threads_group *g = (pp__threads_group *)handle;
    struct timespec deadline;
    pp_status st = PP_OK;
    if (!g) return pp__fail(err, PP_EINVAL, "rank %d: wait: handle is NULL", me->rank);
    pp__deadline(timeout_s, &deadline);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int rc;
        if (w->aborted) { st = pp__threads_aborted(w, me->rank, err); break; }
        st = pp__threads_match(w, me->rank, g, err);
        if (st != PP_OK) { pp__threads_abort_locked(w, me->rank, st, err ? err->message : "size mismatch"); break; }
        if (g->matched == g->nrecv) break;
        rc = pthread_cond_timedwait(&w->cv[me->rank], &w->mu, &deadline);
        if (rc == ETIMEDOUT) {
            st = pp__threads_match(w, me->rank, g, err);
            if (st != PP_OK) { pp__threads_abort_locked(w, me->rank, st, err ? err->message : "size mismatch"); break; }
            if (g->matched == g->nrecv) break;
            if (w->aborted) { st = pp__threads_aborted(w, me->rank, err); break; }
            {
                char want[64], queued[64];
                pp__msg *m;
                int i;
                for (i = 0; i < g->nrecv && g->done[i]; i++) {}
                pp_transfer_tag_format(g->recv[i].tag, want, sizeof want);
                for (m = w->head[me->rank]; m && m->src != g->recv[i].peer; m = m->next) {}
                if (m) pp_transfer_tag_format(m->tag, queued, sizeof queued);
                st = pp__fail(err, PP_ETIMEOUT, "rank %d: timed out after %.3g s waiting for rank %d to send %s%s%s%s",
                              me->rank, timeout_s, g->recv[i].peer, want,
                              m ? "; the oldest message queued from that rank is " : "", m ? queued : "",
                              m ? " (do the ranks run the same schedule?)" : "");
            }
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
    pp__threads_group_free(g);
    return st == PP_OK ? pp__ok(err) : st;
}

static pp_status pp__threads_test(void *user, void *handle, int *done, pp_error *err)
{
    pp__threads_rank *me = (pp__threads_rank *)user;
    pp_threads_world *w = me->w;
    pp__threads_group *g = (pp__threads_group *)handle;
    pp_status st;
    if (!g || !done) return pp__fail(err, PP_EINVAL, "rank %d: test: handle and done must not be NULL", me->rank);
    *done = 0;
    pthread_mutex_lock(&w->mu);
    if (w->aborted) st = pp__threads_aborted(w, me->rank, err);
    else {
        st = pp__threads_match(w, me->rank, g, err);
        if (st != PP_OK) pp__threads_abort_locked(w, me->rank, st, err ? err->message : "size mismatch");
    }
    pthread_mutex_unlock(&w->mu);
    if (st != PP_OK) { pp__threads_group_free(g); *done = 1; return st; }
    if (g->matched == g->nrecv) { pp__threads_group_free(g); *done = 1; }
    return pp__ok(err);
}

/* Sum over ranks: the first rank to arrive zeroes the accumulator; the last publishes the sum
 * and bumps the generation, which wakes the others. A rank cannot start the next reduction's
 * publication before everyone has left this one (it needs them all to arrive again). */
static pp_status pp__threads_all_reduce(void *user, float *values, int count, double timeout_s, pp_error *err)
{
    pp__threads_rank *me = (pp__threads_rank *)user;
    pp_threads_world *w = me->w;
    struct timespec deadline;
    unsigned long gen;
    pp_status st = PP_OK;
    int i;
    if (count < 0 || (count > 0 && !values))
        return pp__fail(err, PP_EINVAL, "rank %d: all_reduce: count=%d with values=%p", me->rank, count, (void *)values);
    pp__deadline(timeout_s, &deadline);
    pthread_mutex_lock(&w->mu);
    if (w->aborted) { st = pp__threads_aborted(w, me->rank, err); goto out; }
    if (w->arrived == 0) {
        if (count > w->acc_cap) {
            float *a = (float *)PIPEPAR_REALLOC(w->acc, (size_t)count * sizeof(float));
            float *r;
            if (a) w->acc = a;
            r = (float *)PIPEPAR_REALLOC(w->result, (size_t)count * sizeof(float));
            if (r) w->result = r;
            if (!a || !r) {
                st = pp__fail(err, PP_ENOMEM, "rank %d: all_reduce: out of memory", me->rank);
                pp__threads_abort_locked(w, me->rank, st, err ? err->message : "out of memory");
                goto out;
            }
            w->acc_cap = count;
        }
        for (i = 0; i < count; i++) w->acc[i] = 0;
        w->count = count;
        w->count_rank = me->rank;
    } else if (count != w->count) {
        st = pp__fail(err, PP_EINVAL, "rank %d: all_reduce of %d values, but rank %d reduces %d "
                      "(the ranks are not running the same program)", me->rank, count, w->count_rank, w->count);
        pp__threads_abort_locked(w, me->rank, st, err ? err->message : "all_reduce count mismatch");
        goto out;
    }
    for (i = 0; i < count; i++) w->acc[i] += values[i];
    gen = w->generation;
    if (++w->arrived == w->world) {
        if (count) memcpy(w->result, w->acc, (size_t)count * sizeof(float));
        w->arrived = 0;
        w->generation++;
        pthread_cond_broadcast(&w->reduce_cv);
    } else {
        while (w->generation == gen && !w->aborted) {
            if (pthread_cond_timedwait(&w->reduce_cv, &w->mu, &deadline) == ETIMEDOUT && w->generation == gen) {
                if (w->aborted) break;
                st = pp__fail(err, PP_ETIMEOUT, "rank %d: all_reduce timed out after %.3g s: %d of %d ranks arrived",
                              me->rank, timeout_s, w->arrived, w->world);
                pp__threads_abort_locked(w, me->rank, st, err ? err->message : "all_reduce timed out");
                goto out;
            }
        }
        if (w->generation == gen) { st = pp__threads_aborted(w, me->rank, err); goto out; }
    }
    if (count) memcpy(values, w->result, (size_t)count * sizeof(float));
out:
    pthread_mutex_unlock(&w->mu);
    return st == PP_OK ? pp__ok(err) : st;
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
    if (w->cv) for (r = 0; r < w->cv_ready; r++) pthread_cond_destroy(&w->cv[r]);
    if (w->reduce_ready) pthread_cond_destroy(&w->reduce_cv);
    if (w->mu_ready) pthread_mutex_destroy(&w->mu);
    PIPEPAR_FREE(w->cv); PIPEPAR_FREE(w->head); PIPEPAR_FREE(w->tail); PIPEPAR_FREE(w->ranks);
    PIPEPAR_FREE(w->acc); PIPEPAR_FREE(w->result);
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
    w->ranks = (pp__threads_rank *)pp__calloc((size_t)world, sizeof(pp__threads_rank));
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
        w->ranks[r].rank = r;
    }
    if (ok && pthread_cond_init(&w->reduce_cv, &attr) == 0) w->reduce_ready = 1; else ok = 0;
    pthread_condattr_destroy(&attr);
    if (!ok) { pp_threads_world_free(w); return pp__fail(err, PP_ENOMEM, "pthread_cond_init failed"); }
    *out = w;
    return pp__ok(err);
}

pp_status pp_threads_transport(pp_threads_world *w, int rank, pp_transport *out, pp_error *err)
{
    if (!w || !out) return pp__fail(err, PP_EINVAL, "world and out: must not be NULL");
    if (rank < 0 || rank >= w->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1=%d", rank, w->world - 1);
    memset(out, 0, sizeof *out);
    out->user = &w->ranks[rank];
    out->rank = rank;
    out->world = w->world;
    out->post = pp__threads_post;
    out->wait = pp__threads_wait;
    out->test = pp__threads_test;
    out->all_reduce = pp__threads_all_reduce;
    out->abort = pp__threads_abort;
    return pp__ok(err);
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
        if (root >= 0)
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
 * group g waits for every older one too, and then releases the buffers their sends used.
 * The same walk runs once at setup without callbacks or transport ("planning"), which counts
 * the peak number of live tensors; the pool reserves that many slots. */

typedef struct pp__slot {
    void *ptr;
    size_t cap;     /* bytes allocated */
    size_t bytes;   /* bytes of the tensor now held */
    int used;
} pp__slot;

typedef struct pp__group {
    void *handle;
    int first, end;             /* program positions of its actions */
    int rel_begin, rel_end;     /* range of ex->release: slots its sends read */
    int done;
} pp__group;

struct pp_executor {
    pp_schedule *sched;
    const pp_action *prog;
    int rank, len, S, M, vpp, world;
    pp_transport tp;
    pp_callbacks cb;
    pp_allocator al;
    pp_timer timer;
    double timeout;
    int num_metrics, record, has_split, has_b;
    uint64_t hash;
    int steps, failed, planning;
    /* the pool */
    pp__slot *slots;
    int nslots, cap_slots, live, peak_live, planned;
    long long allocations, transfers_posted, groups_posted;
    size_t bytes_held;
    /* per-step state */
    int *in, *gout, *sendf, *sendb, *in_group, *gout_group;   /* [vpp * M] */
    int *out_slot;                                             /* [M] forward-only outputs */
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
    double *times;                  /* [3 * len] */
    double *t_start, *t_ready, *t_end;
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

static pp_status pp__try_reclaim(pp_executor *ex, pp_error *err);

/* A slot holding `bytes` bytes: the smallest free slot that fits, else a free slot without
 * memory, else the largest free slot regrown, else a new slot (only past the planned peak).
 * Returns the slot index, or -1 with *st set. */
static int pp__acquire(pp_executor *ex, size_t bytes, pp_status *st, pp_error *err)
{
    int i, fit = -1, empty = -1, big = -1;
    pp__slot *sl;
    *st = PP_OK;
    for (i = 0; i < ex->nslots; i++) {
        sl = &ex->slots[i];
        if (sl->used) continue;
        if (ex->planning) { fit = i; break; }
        if (sl->ptr && sl->cap >= bytes && (fit < 0 || sl->cap < ex->slots[fit].cap)) fit = i;
        if (!sl->ptr && empty < 0) empty = i;
        if (sl->ptr && (big < 0 || sl->cap > ex->slots[big].cap)) big = i;
    }
    if (fit < 0 && bytes == 0 && (empty >= 0 || big >= 0)) fit = empty >= 0 ? empty : big;
    if (fit < 0 && empty < 0 && big < 0 && !ex->planning && ex->next_wait < ex->ngroups) {
        /* every slot is in use: finished sends may free some */
        *st = pp__try_reclaim(ex, err);
        if (*st != PP_OK) return -1;
        return pp__acquire(ex, bytes, st, err);
    }
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
        ex->bytes_held += bytes;
    }
    sl->used = 1;
    sl->bytes = bytes;
    if (++ex->live > ex->peak_live) ex->peak_live = ex->live;
    return fit;
}

static void pp__release(pp_executor *ex, int slot)
{
    if (slot < 0) return;
    PIPEPAR_ASSERT(ex->slots[slot].used);
    ex->slots[slot].used = 0;
    ex->live--;
}

static void *pp__ptr(pp_executor *ex, int slot) { return slot >= 0 ? ex->slots[slot].ptr : NULL; }

/* --- timeline marks --- */

static void pp__mark(pp_executor *ex, int index)
{
    if (!ex->record || ex->planning) return;
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
        for (i = gr->first; i < gr->end; i++) pp__mark(ex, 3 * i + 2);
}

/* The message of a failure at program position i, with the transport's reason after it. */
static pp_status pp__at(pp_executor *ex, int i, pp_status st, pp_error *err, const char *what)
{
    char txt[64], inner[PP_ERROR_MESSAGE_SIZE];
    if (!err) return st;
    snprintf(inner, sizeof inner, "%s", err->message);
    if (i >= 0 && i < ex->len) pp_action_format(ex->prog[i], txt, sizeof txt);
    else snprintf(txt, sizeof txt, "end of step");
    return pp__fail(err, st, "rank %d position %d (%s) %s: %s", ex->rank, i, txt, what, inner);
}

/* Waits for groups next_wait..g (FIFO). `pos` is the program position that needs group g. */
static pp_status pp__wait_upto(pp_executor *ex, int g, int pos, pp_error *err)
{
    pp_status st;
    for (; ex->next_wait <= g; ex->next_wait++) {
        pp__group *gr = &ex->groups[ex->next_wait];
        if (gr->done) continue;
        if (!ex->planning) {
            char what[192], txt[64];
            pp_action_format(ex->prog[gr->first], txt, sizeof txt);
            st = ex->tp.wait(ex->tp.user, gr->handle, ex->timeout, err);
            gr->handle = NULL;
            gr->done = 1;
            if (st != PP_OK) {
                snprintf(what, sizeof what, "waiting for the group posted at position %d (%s%s)", gr->first, txt,
                         gr->end - gr->first > 1 ? ", ..." : "");
                return pp__at(ex, pos, st, err, what);
            }
        }
        pp__group_finished(ex, ex->next_wait);
    }
    return PP_OK;
}

/* Collects groups that finished on their own (transport->test), oldest first. */
static pp_status pp__try_reclaim(pp_executor *ex, pp_error *err)
{
    int g;
    if (!ex->tp.test) return pp__wait_upto(ex, ex->next_wait, -1, err);
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
        if (!done) break;
        pp__group_finished(ex, g);
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
    in.mb = m;
    in.num_mb = ex->M;
    in.step = ex->steps;
    in.forward_only = ex->forward_only;
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

/* Waits until F(s,m)'s input is here. */
static pp_status pp__f_wait(pp_executor *ex, int i, pp__fwd *f, int s, int m, pp_error *err)
{
    f->s = s; f->m = m; f->k = PP__K(ex, s, m); f->in = f->out = -1;
    f->info = pp__info(ex, s, m);
    if (s > 0) {
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
    if (f->s == 0) {
        f->in = pp__acquire(ex, pp__bytes(ex, 0, f->m), &st, err);
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

/* After the forward: the loss on the last stage, then route the output. */
static pp_status pp__f_finish(pp_executor *ex, int i, pp__fwd *f, pp_error *err)
{
    pp_status st;
    if (f->s == ex->S - 1) {
        int g = -1;
        if (!ex->forward_only) {
            g = pp__acquire(ex, pp__bytes(ex, ex->S, f->m), &st, err);
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
    if (b->s > 0) {
        b->gin = pp__acquire(ex, pp__bytes(ex, b->s, b->m), &st, err);
        if (b->gin < 0) return st;
    }
    return PP_OK;
}

static void pp__b_finish(pp_executor *ex, pp__bwd *b, int full)
{
    if (b->s > 0) {
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
        int rc = ex->cb.forward(ex->cb.user, &f.info, pp__ptr(ex, f.in), pp__ptr(ex, f.out));
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
        int rc = op == PP_OP_I
            ? ex->cb.backward_input(ex->cb.user, &b.info, pp__ptr(ex, b.in), pp__ptr(ex, b.gout), pp__ptr(ex, b.gin))
            : ex->cb.backward(ex->cb.user, &b.info, pp__ptr(ex, b.in), pp__ptr(ex, b.gout), pp__ptr(ex, b.gin));
        if (rc) return pp__callback_failed(ex, i, op == PP_OP_I ? "backward_input" : "backward", rc, err);
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
    if (!ex->planning) {
        int rc = ex->cb.backward_weight(ex->cb.user, &info, pp__ptr(ex, ex->in[k]), pp__ptr(ex, ex->gout[k]));
        if (rc) return pp__callback_failed(ex, i, "backward_weight", rc, err);
    }
    pp__release(ex, ex->in[k]); ex->in[k] = -1;
    pp__release(ex, ex->gout[k]); ex->gout[k] = -1;
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
        st = pp__run_f(ex, i, a.stage, a.mb, err);
        return st != PP_OK ? st : pp__run_b(ex, i, PP_OP_B, a.stage2, a.mb2, err);
    }
    if ((st = pp__f_wait(ex, i, &f, a.stage, a.mb, err)) != PP_OK) return st;
    if ((st = pp__b_wait(ex, i, &b, a.stage2, a.mb2, err)) != PP_OK) return st;
    pp__mark(ex, 3 * i + 1);
    if ((st = pp__f_prepare(ex, i, &f, err)) != PP_OK) return st;
    if ((st = pp__b_prepare(ex, &b, err)) != PP_OK) return st;
    if (!ex->planning) {
        int rc = ex->cb.forward_backward(ex->cb.user, &f.info, pp__ptr(ex, f.in), pp__ptr(ex, f.out), &b.info,
                                         pp__ptr(ex, b.in), pp__ptr(ex, b.gout), pp__ptr(ex, b.gin));
        if (rc) return pp__callback_failed(ex, i, "forward_backward", rc, err);
    }
    if ((st = pp__f_finish(ex, i, &f, err)) != PP_OK) return st;
    pp__b_finish(ex, &b, 1);
    return PP_OK;
}

static int pp__is_b_comm(int op) { return op == PP_OP_SEND_B || op == PP_OP_RECV_B; }

/* Posts the communication actions [i, j) as one group. */
static pp_status pp__post_group(pp_executor *ex, int i, int j, pp_error *err)
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
    gr->first = i; gr->end = j;
    gr->rel_begin = gr->rel_end = ex->nrelease;
    for (p = i; p < j; p++) {
        pp_action a = ex->prog[p];
        pp_transfer *t = &ex->xfers[n];
        int k = PP__K(ex, a.stage, a.mb), slot;
        if (ex->forward_only && pp__is_b_comm(a.op)) continue;
        pp__mark(ex, 3 * p);
        pp__mark(ex, 3 * p + 1);
        memset(t, 0, sizeof *t);
        switch (a.op) {
        case PP_OP_SEND_F:
            slot = ex->sendf[k];
            if (slot < 0) return pp__missing(ex, p, "the output this send carries", err);
            ex->sendf[k] = -1;
            t->is_send = 1; t->peer = pp_stage_rank(ex->sched, a.stage + 1);
            t->tag = pp_transfer_tag(PP_OP_SEND_F, a.stage, a.mb, ex->steps);
            break;
        case PP_OP_SEND_B:
            slot = ex->sendb[k];
            if (slot < 0) return pp__missing(ex, p, "the input-gradient this send carries", err);
            ex->sendb[k] = -1;
            t->is_send = 1; t->peer = pp_stage_rank(ex->sched, a.stage - 1);
            t->tag = pp_transfer_tag(PP_OP_SEND_B, a.stage, a.mb, ex->steps);
            break;
        case PP_OP_RECV_F:
            slot = pp__acquire(ex, pp__bytes(ex, a.stage, a.mb), &st, err);
            if (slot < 0) return st;
            ex->in[k] = slot; ex->in_group[k] = g;
            t->peer = pp_stage_rank(ex->sched, a.stage - 1);
            t->tag = pp_transfer_tag(PP_OP_SEND_F, a.stage - 1, a.mb, ex->steps);
            break;
        default: /* PP_OP_RECV_B */
            slot = pp__acquire(ex, pp__bytes(ex, a.stage + 1, a.mb), &st, err);
            if (slot < 0) return st;
            ex->gout[k] = slot; ex->gout_group[k] = g;
            t->peer = pp_stage_rank(ex->sched, a.stage + 1);
            t->tag = pp_transfer_tag(PP_OP_SEND_B, a.stage + 1, a.mb, ex->steps);
            break;
        }
        if (t->is_send) ex->release[ex->nrelease++] = slot;
        t->buf = pp__ptr(ex, slot);
        t->bytes = ex->slots[slot].bytes;
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

/* Walks the program once. */
static pp_status pp__walk(pp_executor *ex, pp_error *err)
{
    pp_status st = PP_OK;
    int i = 0;
    while (i < ex->len && st == PP_OK) {
        pp_action a = ex->prog[i];
        if (pp__is_comm(a.op)) {
            int j = i;
            while (j < ex->len && pp__is_comm(ex->prog[j].op)) j++;
            st = pp__post_group(ex, i, j, err);
            i = j;
            continue;
        }
        if (ex->forward_only && (a.op == PP_OP_B || a.op == PP_OP_I || a.op == PP_OP_W)) { i++; continue; }
        pp__mark(ex, 3 * i);
        switch (a.op) {
        case PP_OP_F: st = pp__run_f(ex, i, a.stage, a.mb, err); break;
        case PP_OP_B: case PP_OP_I: st = pp__run_b(ex, i, a.op, a.stage, a.mb, err); break;
        case PP_OP_W: st = pp__run_w(ex, i, a.stage, a.mb, err); break;
        default: st = pp__run_fb(ex, i, a, err); break;
        }
        if (st == PP_OK) pp__mark(ex, 3 * i + 2);
        i++;
    }
    if (st == PP_OK && ex->ngroups > 0) st = pp__wait_upto(ex, ex->ngroups - 1, ex->len, err);
    return st;
}

static void pp__reset_step(pp_executor *ex)
{
    int k, n = ex->vpp * ex->M;
    for (k = 0; k < n; k++) {
        ex->in[k] = ex->gout[k] = ex->sendf[k] = ex->sendb[k] = -1;
        ex->in_group[k] = ex->gout_group[k] = -1;
    }
    for (k = 0; k < ex->M; k++) {
        if (ex->out_slot[k] >= 0) pp__release(ex, ex->out_slot[k]);
        ex->out_slot[k] = -1;
        ex->out_ptr[k] = NULL;
        ex->out_bytes[k] = 0;
    }
    ex->ngroups = ex->next_wait = ex->nrelease = 0;
    ex->loss_sum = ex->weight_sum = 0;
    memset(ex->metric_sum, 0, sizeof ex->metric_sum);
}

/* Every slot back to free (after a failure or planning). */
static void pp__release_all(pp_executor *ex)
{
    int i;
    for (i = 0; i < ex->nslots; i++) ex->slots[i].used = 0;
    for (i = 0; i < ex->M; i++) ex->out_slot[i] = -1;
    ex->live = 0;
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

void pp_executor_free(pp_executor *ex)
{
    if (!ex) return;
    pp__pool_free_memory(ex);
    pp_schedule_free(ex->sched);
    PIPEPAR_FREE(ex->slots);
    PIPEPAR_FREE(ex->in); PIPEPAR_FREE(ex->gout); PIPEPAR_FREE(ex->sendf); PIPEPAR_FREE(ex->sendb);
    PIPEPAR_FREE(ex->in_group); PIPEPAR_FREE(ex->gout_group);
    PIPEPAR_FREE(ex->out_slot); PIPEPAR_FREE(ex->out_ptr); PIPEPAR_FREE(ex->out_bytes);
    PIPEPAR_FREE(ex->groups); PIPEPAR_FREE(ex->release); PIPEPAR_FREE(ex->xfers);
    PIPEPAR_FREE(ex->times); PIPEPAR_FREE(ex->t_start); PIPEPAR_FREE(ex->t_ready); PIPEPAR_FREE(ex->t_end);
    PIPEPAR_FREE(ex);
}

pp_status pp_executor_create(const pp_executor_config *cfg, pp_executor **out, pp_error *err)
{
    pp_executor *ex;
    const pp_schedule *s;
    pp_status st;
    int i, n, maxgroup = 0, run = 0, peak = 0, mode;
    if (!cfg || !out) return pp__fail(err, PP_EINVAL, "cfg and out: must not be NULL");
    *out = NULL;
    s = cfg->schedule;
    if (!s) return pp__fail(err, PP_EINVAL, "schedule: must not be NULL");
    if (cfg->transport.world != s->pp)
        return pp__fail(err, PP_EINVAL, "transport.world=%d: must equal the schedule's pp (%d)", cfg->transport.world, s->pp);
    if (cfg->transport.rank < 0 || cfg->transport.rank >= s->pp)
        return pp__fail(err, PP_EINVAL, "transport.rank=%d: must be between 0 and pp-1=%d", cfg->transport.rank, s->pp - 1);
    if (!cfg->transport.post || !cfg->transport.wait || !cfg->transport.all_reduce || !cfg->transport.abort)
        return pp__fail(err, PP_EINVAL, "transport.%s: must not be NULL (post, wait, all_reduce and abort are required)",
                        !cfg->transport.post ? "post" : !cfg->transport.wait ? "wait" :
                        !cfg->transport.all_reduce ? "all_reduce" : "abort");
    if (!cfg->callbacks.tensor_bytes || !cfg->callbacks.input || !cfg->callbacks.forward)
        return pp__fail(err, PP_EINVAL, "callbacks.%s: must not be NULL",
                        !cfg->callbacks.tensor_bytes ? "tensor_bytes" : !cfg->callbacks.input ? "input" : "forward");
    if ((cfg->allocator.alloc == NULL) != (cfg->allocator.free == NULL))
        return pp__fail(err, PP_EINVAL, "allocator: give both alloc and free, or neither");
    if ((cfg->timer.mark == NULL) != (cfg->timer.resolve == NULL))
        return pp__fail(err, PP_EINVAL, "timer: give both mark and resolve, or neither");
    if (!(cfg->timeout_s >= 0) || cfg->timeout_s > 1e9)
        return pp__fail(err, PP_EINVAL, "timeout_s=%g: must be >= 0 (0 means 60 s)", cfg->timeout_s);
    if (cfg->num_metrics < 0 || cfg->num_metrics > PP_MAX_METRICS)
        return pp__fail(err, PP_EINVAL, "num_metrics=%d: must be between 0 and PP_MAX_METRICS=%d", cfg->num_metrics,
                        PP_MAX_METRICS);
    if (s->pp > 1 && !s->lowered)
        return pp__fail(err, PP_EINVAL, "schedule: not lowered; call pp_schedule_lower first (pp=%d needs "
                        "SEND/RECV actions)", s->pp);
    st = pp_schedule_validate(s, err);
    if (st != PP_OK) return st;

    ex = (pp_executor *)pp__calloc(1, sizeof *ex);
    if (!ex) return pp__fail(err, PP_ENOMEM, "out of memory");
    st = pp_schedule_copy(s, &ex->sched, err);
    if (st != PP_OK) { PIPEPAR_FREE(ex); return st; }
    ex->rank = cfg->transport.rank;
    ex->prog = ex->sched->actions[ex->rank];
    ex->len = ex->sched->length[ex->rank];
    ex->S = s->num_stages; ex->M = s->mb; ex->vpp = s->vpp; ex->world = s->pp;
    ex->tp = cfg->transport;
    ex->cb = cfg->callbacks;
    ex->al = cfg->allocator;
    ex->timer = cfg->timer;
    ex->timeout = cfg->timeout_s > 0 ? cfg->timeout_s : 60.0;
    ex->num_metrics = cfg->num_metrics;
    ex->record = cfg->record_timeline != 0;
    ex->hash = pp__schedule_hash(ex->sched);
    for (i = 0; i < ex->len; i++) {
        int op = ex->prog[i].op;
        if (op == PP_OP_I || op == PP_OP_W) ex->has_split = 1;
        if (op == PP_OP_B || (op == PP_OP_FB)) ex->has_b = 1;
        if (pp__is_comm(op)) { run++; if (run > maxgroup) maxgroup = run; } else run = 0;
    }
    if (ex->has_split && (!ex->cb.backward_input || !ex->cb.backward_weight)) {
        pp_executor_free(ex);
        return pp__fail(err, PP_EINVAL, "callbacks.%s: must not be NULL, rank %d's program has split backwards (I, W)",
                        !cfg->callbacks.backward_input ? "backward_input" : "backward_weight", cfg->transport.rank);
    }
    n = ex->vpp * ex->M;
    ex->in = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->gout = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->sendf = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->sendb = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->in_group = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->gout_group = (int *)pp__calloc((size_t)n, sizeof(int));
    ex->out_slot = (int *)pp__calloc((size_t)ex->M, sizeof(int));
    ex->out_ptr = (void **)pp__calloc((size_t)ex->M, sizeof(void *));
    ex->out_bytes = (size_t *)pp__calloc((size_t)ex->M, sizeof(size_t));
    ex->xfers = (pp_transfer *)pp__calloc((size_t)(maxgroup > 0 ? maxgroup : 1), sizeof(pp_transfer));
    ex->cap_xfers = maxgroup;
    if (!ex->in || !ex->gout || !ex->sendf || !ex->sendb || !ex->in_group || !ex->gout_group || !ex->out_slot ||
        !ex->out_ptr || !ex->out_bytes || !ex->xfers) {
        pp_executor_free(ex);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    for (i = 0; i < ex->M; i++) ex->out_slot[i] = -1;
    if (ex->record) {
        ex->times = (double *)pp__calloc((size_t)ex->len * 3 + 1, sizeof(double));
        ex->t_start = (double *)pp__calloc((size_t)ex->len + 1, sizeof(double));
        ex->t_ready = (double *)pp__calloc((size_t)ex->len + 1, sizeof(double));
        ex->t_end = (double *)pp__calloc((size_t)ex->len + 1, sizeof(double));
        if (!ex->times || !ex->t_start || !ex->t_ready || !ex->t_end) {
            pp_executor_free(ex);
            return pp__fail(err, PP_ENOMEM, "out of memory");
        }
    }
    /* plan: the peak count of live tensors, training and forward-only */
    ex->planning = 1;
    for (mode = 0; mode < 2; mode++) {
        ex->forward_only = mode;
        ex->peak_live = 0;
        pp__reset_step(ex);
        st = pp__walk(ex, err);
        if (st != PP_OK) { pp_executor_free(ex); return st; }
        if (ex->peak_live > peak) peak = ex->peak_live;
        pp__release_all(ex);
    }
    ex->planning = 0;
    ex->forward_only = 0;
    ex->planned = peak;
    ex->peak_live = 0;
    pp__reset_step(ex);
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
 * float for up to 74565 ranks) and a few fields, to name the one that differs. */
#define PP__CHECK_FIELDS 9
static pp_status pp__check_ranks_agree(pp_executor *ex, const pp_step *step, pp_error *err)
{
    float v[16 + 2 * PP__CHECK_FIELDS];
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

pp_status pp_run_step(pp_executor *ex, const pp_step *step, pp_step_result *result, pp_error *err)
{
    pp_step zero;
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
    ex->step = step;
    ex->forward_only = step->forward_only != 0;
    pp__reset_step(ex);
    ex->timeline_valid = 0;
    if (step->batch_rows < 0) {
        st = pp__fail(err, PP_EINVAL, "rank %d: step.batch_rows=%d: must be >= 0 (0 means no padding)", ex->rank,
                      step->batch_rows);
        return pp__step_failed(ex, st, err);
    }
    if (!ex->forward_only && pp_stage_rank(ex->sched, ex->S - 1) == ex->rank && !ex->cb.loss) {
        st = pp__fail(err, PP_EINVAL, "rank %d: callbacks.loss: must not be NULL for a training step on the last "
                      "stage's rank", ex->rank);
        return pp__step_failed(ex, st, err);
    }
    if (!ex->forward_only && ex->has_b && !ex->cb.backward) {
        st = pp__fail(err, PP_EINVAL, "rank %d: callbacks.backward: must not be NULL for a training step", ex->rank);
        return pp__step_failed(ex, st, err);
    }
    if (ex->record && !ex->timer.mark) for (i = 0; i < 3 * ex->len; i++) ex->times[i] = -1;
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
        if (ex->forward_only && pp_stage_rank(ex->sched, ex->S - 1) == ex->rank) {
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
    out->actions = ex->prog;
    out->start = ex->t_start;
    out->ready = ex->t_ready;
    out->end = ex->t_end;
    return pp__ok(err);
}

static pp_status pp__check_timelines(const pp_timeline *t, int count, FILE *out, double *t0, double *t1, pp_error *err)
{
    int r, i;
    if (!t || count < 1 || !out) return pp__fail(err, PP_EINVAL, "timelines (count=%d) and out: must be given", count);
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
    pp_status st = pp__check_timelines(t, count, out, &t0, &t1, err);
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
                while (j + 1 < t[r].length && pp__is_comm(t[r].actions[j + 1].op) && t[r].start[j + 1] >= 0 &&
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

static char pp__mb_digit(int m)
{
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    return m >= 0 && m < 62 ? digits[m] : '#';
}

pp_status pp_timeline_draw_ascii(const pp_timeline *t, int count, int width, FILE *out, pp_error *err)
{
    pp__text x = { NULL, 0, 0, 0 };
    double t0, t1, unit;
    char *line;
    int r, i, c, row, has_w = 0, has_i = 0;
    pp_status st = pp__check_timelines(t, count, out, &t0, &t1, err);
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
    pp__text_printf(&x, "measured  (one column = %.3g ms; cells show the microbatch)\n", 1e3 * unit);
    for (r = 0; r < count; r++) {
        for (row = 0; row < 2 + has_w; row++) {
            memset(line, ' ', (size_t)width);
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
                    int show = row == 0 ? ops[h] == PP_OP_F : row == 1 ? (ops[h] == PP_OP_B || ops[h] == PP_OP_I)
                                                                      : ops[h] == PP_OP_W;
                    if (!show) continue;
                    for (c = from; c < to; c++) line[c] = pp__mb_digit(mbs[h]);
                }
            }
            if (row == 0) pp__text_printf(&x, "rank %-3d %5s |%s|\n", t[r].rank, "F", line);
            else pp__text_printf(&x, "         %5s |%s|\n", row == 1 ? (has_i ? "B/I" : "B") : "W", line);
        }
    }
    pp__text_printf(&x, "step %.3f ms; busy per rank:", 1e3 * (t1 - t0));
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
#endif /* PIPEPAR_IMPLEMENTATION_DONE */
#endif /* PIPEPAR_IMPLEMENTATION */
