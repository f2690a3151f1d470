
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
 * starts while this rank computes the W: on the comparison model a chunk's W is about half its
 * backward, and interleaved 1F1B's step shrinks by about 1% (bench/RESULTS.md, session 10).
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

/* Action text in PyTorch's spelling: "4F0", "1SEND_F3", "2I5"; FB as "0F1;3B0". */
PIPEPAR_API int pp_action_format(pp_action a, char *buf, size_t size);
PIPEPAR_API pp_status pp_action_parse(const char *text, pp_action *out, pp_error *err);

/* ============================================================================================
 * >>simulate
 * Plays a lowered (or compute-only) schedule with per-action costs and reports what a user feels:
 * the step time (makespan), each rank's idle fraction (bubble) and its peak live activations.
 * Compute is sequential per rank; a transfer starts when both its send and its receive have been
 * posted, takes latency + bytes * seconds_per_byte, and its consumer starts after it lands.
 * With F=1, B=2 and free communication this reproduces the textbook bubbles exactly. Transfers
 * are modelled one by one unless costs.grouped: then as the runtime posts them, a round's
 * transfers in one group that ends as a whole, one group after another on a rank's stream (a
 * receive can wait for the rank's own send of the round, or for a later peer of the group).
 * Either way a transfer costs what it is given: on 2 H200s a 64 MiB group took 0.7-0.85 ms on
 * average against 0.26 ms on an idle pair, which with interleaved vpp 4's many transfers on the
 * critical path costs it about 6% of the step (pp_timeline_idle measures it; bench/RESULTS.md,
 * session 4).
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
                                   0: each transfer on its own. pp_simulate only */
} pp_sim_costs;

typedef struct pp_sim_result {
    int pp, vpp;
    double makespan;            /* first start to last end over all ranks */
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
 *   SVG:   one row per rank, one box per action, colour by microbatch, F / B / I / W told apart.
 *   torch: one line per rank, "rankR: " then the compute actions in PyTorch's spelling.
 *   CSV:   PyTorch's pipeline-order CSV, one row per rank (compute and communication actions; an
 *          empty cell separates two communication groups that touch); pp_schedule_read_csv reads
 *          it back, and PyTorch's compute-only form too.
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
