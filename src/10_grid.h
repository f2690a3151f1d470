
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

/* Placement by speed. GPUs of one host differ by about 1% under their power cap (silicon), and a
 * pipeline's ranks rarely compute the same amount (the first stage's first layer needs no input
 * gradient, the last holds the loss). A step waits for its slowest rank, so the heaviest rank
 * belongs on the fastest GPU: on 2 H200s whose GPU 0 ran 1.1% faster, this moved interleaved
 * 1F1B from 95.0-95.5% to 96.5-96.7% efficiency (`mlp_gpu --place-by-speed`, bench/RESULTS.md). Pairing loads sorted down with GPU times sorted up
 * minimises the largest load x time over all assignments (exchange argument), which is what
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
 * returns one that moves the fewest ranks (up to 512 ranks; beyond, the sorted pairing itself). */
PIPEPAR_API pp_status pp_place_by_speed(int n, const double *rank_load, const double *gpu_time, double min_gain,
                                        int *rank_of, double *gain, pp_error *err);
