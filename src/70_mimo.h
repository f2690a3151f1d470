
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
