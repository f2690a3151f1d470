
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
 * no allocation once its pool has grown to the step's shapes.
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
    /* receives, optional (0: no promise): the caller has issued no work on buf since its post
     * this many posts back, so a device transport may let the receive land from that post's
     * point of the compute stream on, while the compute issued since still runs (the executor
     * sets it; pipepar_nccl.c's copy engines use it) */
    int buf_free_posts;
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
 * Every wait uses a condition variable with a deadline. Needs POSIX threads and clocks (compile
 * with -D_POSIX_C_SOURCE=200809L under a strict -std=c99); define PIPEPAR_NO_THREADS to leave it
 * out.
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
 * every rank did; otherwise the status and message of the root cause, prefixed with "rank R: ":
 * the rank that aborted the world first, else the first rank whose failure was not PP_EABORTED. */
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
 * be NULL: backward_input/backward_weight only when the schedule has no I/W actions (a trainer
 * that has them should run a B schedule split by pp_schedule_split_backward: its gradients then
 * leave before the weight gradients are computed);
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
