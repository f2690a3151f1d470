
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
 * WORLD_SIZE, LOCAL_RANK), or one process with one thread per GPU:
 *     pp_nccl_config cfg = {0};                 // rank, world, device from the environment
 *     pp_nccl *world;  pp_nccl_init(&cfg, &world, &err);
 *     pp_nccl *pipe;   pp_nccl_split(world, &grid, PP_GROUP_PP, &pipe, &err);
 *     pp_transport t;  pp_nccl_transport(pipe, compute_stream, &t, &err);
 *     ... pp_executor_config.transport = t; pp_run_step(...); pp_nccl_sync(pipe, compute_stream, ...)
 *     pp_nccl_transport_free(&t); pp_nccl_free(pipe); pp_nccl_free(world);
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
 * TRANSPORT. pp_nccl_transport wraps a (pipeline) communicator as a pp_transport for the
 * executor. post() makes the communication stream wait for an event recorded on the compute
 * stream (the bytes to send are ready, buffers to receive into are free), issues the group's
 * sends and receives between one ncclGroupStart/End, and records a done-event; wait() makes the
 * compute stream wait for that event and returns at once: the host runs ahead, transfers
 * overlap compute, and nothing blocks until the step's closing all-reduce or pp_nccl_sync. A
 * transfer whose peer is this rank is copied on the device (cudaMemcpyAsync through a staging
 * buffer), never through NCCL. Tags are not sent: NCCL matches by order, which the validated
 * schedule makes identical on both ends.
 *
 * FAILURE. Every wait has a deadline: a peer that died or hangs makes the waiting rank call
 * ncclCommAbort and return PP_ETIMEOUT (within timeout_s) instead of hanging. Host waits poll
 * (the stream, NCCL's asynchronous error) until the deadline; NCCL calls that may block inside
 * NCCL (init, split, ncclGroupEnd, a collective's enqueue, finalise) are guarded by a watchdog
 * thread per communicator that aborts it when the call outlives the deadline, as PyTorch's
 * ProcessGroupNCCL watchdog does. An error NCCL reports (ncclRemoteError, a network failure)
 * returns PP_ETRANSPORT with NCCL's message. After an abort every call on that communicator
 * returns PP_EABORTED; free it and exit (or build a new one). Communicators are NCCL's blocking
 * kind by default (config.nonblocking = 1 selects ncclConfig_t.blocking = 0; seen on NCCL 2.28.3
 * to stall p2p groups of 1F1B and GPipe, so it is not the default).
 * Allocate device memory before the first step and set NCCL_RUNTIME_CONNECT=0 (NCCL >= 2.22
 * otherwise connects peers lazily, inside the step): a cudaMalloc, or NCCL's own allocation for
 * a new connection, can wait behind kernels in flight that wait on the peer (NVIDIA/nccl#581;
 * examples/mlp_gpu.cu does both). Seen on the device before it did: 1F1B and GPipe, whose 4.8 GB
 * per-stage buffers were allocated inside the first step, stalled both ranks (the cause is not
 * confirmed yet; bench/RESULTS_gpu.md and bench/gpu_diag.sh).
 * $PIPEPAR_NCCL_DEBUG=1 prints one line on stderr per posted group (its transfers, and when
 * ncclGroupEnd returned), per host all-reduce and per watchdog abort: where a rank stalls.
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
    double timeout_s;       /* deadline of set-up and of every wait; 0 means 300 s, or
                               $PIPEPAR_NCCL_TIMEOUT seconds when set */
    int nonblocking;        /* 1: NCCL's non-blocking communicators (see FAILURE) */
    int max_ctas;           /* NCCL's maxCTAs: the SMs its kernels may take at once; 0: NCCL's default */
    int cta_policy;         /* NCCL >= 2.27's CTAPolicy: 0 default, 1 efficiency (fewer CTAs, for
                               overlap with compute), 2 zero (copy engines where NCCL can) */
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
/* Finalises (or, after an abort, only releases) and frees. NULL is allowed. */
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
/* In place sum over the communicator of `count` floats on the host, within the deadline. */
PIPEPAR_API pp_status pp_nccl_all_reduce_host(pp_nccl *nc, float *values, int count, double timeout_s,
                                              pp_error *err);

/* --- transport ------------------------------------------------------------------------------ */

/* Fills *out with a transport over nc (rank and world as nc's) whose waits order
 * `compute_stream` (a cudaStream_t of nc's device). Free with pp_nccl_transport_free after the
 * executor that uses it. */
PIPEPAR_API pp_status pp_nccl_transport(pp_nccl *nc, void *compute_stream, pp_transport *out, pp_error *err);
PIPEPAR_API void pp_nccl_transport_free(pp_transport *t);

/* Arrival gate (one node): a group is launched only once every peer in it has reached its
 * matching group. An NCCL point-to-point kernel holds its SMs from launch until the peer's
 * matching kernel runs; in a pipeline one side of each pair is usually ahead, and its waiting
 * kernels slow its own GEMMs (bench/RESULTS.md measured rank 1 of 2 computing 4-10% slower).
 * With the gate, each rank writes "I reached my n-th group with you" into the peer's memory
 * (CUDA IPC; threads of one process use the pointer) and its communication stream waits for
 * the peer's n-th arrival before the group: stream memory operations, which take no SM. A
 * group announces itself to all its peers before it waits on any, so groups with two peers
 * cannot close a ring of waits. The n-th group of a rank with a peer meets the peer's n-th
 * group with it (pp_schedule_validate proves it for every schedule it accepts).
 * Collective over nc: every rank calls it once, before the transport's first post (both are
 * checked, on every rank alike). Peers on other hosts or in other namespaces, or that cannot
 * map this device's memory, are not gated (their groups run as before); *gated_peers gets how
 * many are (optional). Each peer's flag is 64-bit: the peer writes the low word, the high word
 * only when the low one wraps (PIPEPAR_NCCL_GATE_BASE starts the counts elsewhere, for tests
 * that cross 2^32; every rank must set the same). The device must have 64-bit stream memory
 * operations (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS); where it has not, the pair stays ungated,
 * and so does every pair when CUDA_DEVICE_MAX_CONNECTIONS is below 4 (a stream waiting on a flag
 * holds its hardware queue, which the compute stream would then share).
 * Measured on 2 H200s (bench/RESULTS.md): interleaved vpp 4 710 -> 699 ms, ZB-V 691 -> 688 ms.
 * Failure: when the communicator aborts (a deadline passed, pp_nccl_abort), the gate first opens
 * every wait of the communication stream from a stream of its own, so the NCCL kernels queued
 * behind them launch, see NCCL's abort flag and end; a dead peer gives PP_ETIMEOUT within the
 * deadline, as without the gate (tests/gpu/nccl_failure.sh runs both). The abort writes the
 * flags' high words, which the peers' announcements leave alone: a peer that is alive but
 * behind (pp >= 3, a third rank died) and announces afterwards cannot shut an opened wait
 * (tests/gpu/test_nccl.cu stages exactly that), except with the one announcement in 2^32 where
 * its count's low word wraps and it writes the high word too. One gated transport per communicator. Off unless called
 * (examples/mlp_gpu.cu calls it by default). Only pp = 2 has run on GPUs so far. */
PIPEPAR_API pp_status pp_nccl_transport_gate(pp_transport *t, int *gated_peers, pp_error *err);

/* Copy-engine transfers (one host): the transfers between this rank and each peer in another
 * process of its host go through the GPUs' copy engines instead of NCCL's kernels, which need
 * SMs on both sides: a transfer posted while the peer runs a GEMM that holds every SM
 * (cuBLASLt's persistent kernels) waits until it ends, 1-1.5 ms for the comparison model's GEMMs
 * (bench/RESULTS.md, session 5). Each transfer is one copy over NVLink, straight from the send
 * buffer into the receive buffer: whichever of the two ranks posts it first publishes its buffer
 * in host memory the pair shares (a POSIX shared-memory segment, unlinked once set up), and the
 * other does the copy, the sender pushing into the receive buffer or the receiver pulling out of
 * the send buffer (CUDA IPC maps each allocation once). Both copies run on copy engines and need
 * no SM on either GPU (64 MiB: 0.20 / 0.21 ms with GEMMs on both GPUs, NCCL 1.6 ms; session 7).
 * Counts are written and waited for by stream memory operations, as the arrival gate's are. A
 * buffer that CUDA IPC cannot share (not from cudaMalloc) goes through a ring of `slots` buffers
 * of `slot_bytes` in the receiver's memory instead, in slot-sized pieces; the receiver's copy out
 * of the ring is device-to-device, which CUDA runs as a kernel (H200s), so it waits for the
 * receiver's own GEMM. PIPEPAR_NCCL_CE_DIRECT=0 sends everything through the ring (for
 * comparisons). Each peer's sends and each peer's receives run on a stream of their own; a send
 * waits for its receive to be posted (a push) or taken (a pull), as NCCL's matched groups do, so
 * any order that runs on NCCL runs here. A peer maps the allocation of every buffer it copies to
 * or from once (CUDA IPC) and keeps it mapped until pp_nccl_transport_free (past 64 mappings
 * the least recently used whose copies have ended is closed): free the memory of transfer
 * buffers only after pp_nccl_transport_free (an exporter must not free what a peer maps; an
 * arena allocated at set-up, as mlp_gpu's, keeps to that by itself). A rank may post up to 4096 transfers with a peer ahead
 * of it; past that its post waits (within the deadline) for the peer's posts. Memory: slots *
 * slot_bytes per peer on the host, per rank, and 0.9 MB of host memory per pair. Each receive
 * must name the bytes of its send (the executor's tags guarantee it); the second of the two to
 * post checks it, and a mismatch fails the post with PP_ETRANSPORT and aborts.
 * pp_nccl_transport_copy_engine_counts says how the transfers went. slot_bytes: a multiple of
 * 256 from 4096 to 2^32; slots: 2 to 64;
 * the same on every rank (refused on every rank alike otherwise). Collective over nc, before the
 * first post, at most once per transport; may be combined with pp_nccl_transport_gate (call
 * this first), which then gates only the peers left to NCCL. Left on NCCL: peers on other hosts
 * or that cannot be mapped, or whose shared-memory segment cannot be opened (another container's
 * /dev/shm); threads of one process (mlp_gpu --threads 2 hangs with them: one rank's thread
 * spins inside the driver in cuBLASLt's cuKernelSetAttribute holding the process's driver lock,
 * while the other rank's thread waits for that lock in the middle of the copy the first rank's
 * device is waiting for; processes have a driver each. PIPEPAR_NCCL_CE_SAME_PROCESS=1 on every
 * rank allows them, for programs that call no such function while transfers are queued, as the
 * unit tests do); every peer when NCCL_P2P_DISABLE=1, or when CUDA_DEVICE_MAX_CONNECTIONS is below 4
 * (a stream waiting on a flag holds its hardware queue; the gate stays off there too).
 * *ce_peers gets how many peers use the copy engines (optional). Once set up, the transport's
 * pp_nccl_transport_free is collective over nc: it waits (within the deadline) until the peers
 * have taken what it sent, and frees its memory only after every rank closed its mappings.
 * On abort the waits are opened as the gate's are (so that every stream drains), after the live
 * peers' flags of this rank are set far behind, so that nothing sent after the abort is taken as
 * data and no live peer pushes into this rank's buffers again. What the opened waits let through
 * are this rank's queued copies: a push into a live peer's receive buffer, or a piece into its
 * ring, before the peer said it was free. That receive of the peer's never completes, so its
 * step fails too; but the buffer (or a ring slot still being copied out) may hold what earlier
 * work of the peer's still reads, so a peer step that had not finished on its device could be
 * spoiled. Trainers that synchronise every step (reading the loss does) are not exposed. Group times
 * (pp_nccl_transport_times) of a copy-engine group run from the compute stream's point (for a
 * receive-only group whose buffers were free earlier, that earlier post's point) to the end of
 * its last stream: a receive-only group's time includes waiting for the peer's send.
 * PIPEPAR_NCCL_GATE_BASE starts these counts too (tests that cross 2^32). A receive whose
 * pp_transfer.buf_free_posts says its buffer has been free for n posts starts from the compute
 * stream's point at the post n back (up to 63), so it can land while the compute issued since
 * runs (the executor sets it). Measured on 2 H200s: bench/RESULTS.md, sessions 6 and 7. */
PIPEPAR_API pp_status pp_nccl_transport_copy_engine(pp_transport *t, size_t slot_bytes, int slots, int *ce_peers,
                                                    pp_error *err);

/* How this rank's copy-engine transfers went since set-up, sends and receives alike: counts[0]
 * pushed (the receive was posted first), counts[1] pulled (the send was), counts[2] through the
 * ring. */
PIPEPAR_API pp_status pp_nccl_transport_copy_engine_counts(pp_transport *t, long long counts[3], pp_error *err);

/* Per-group device times, for timelines and bandwidth figures. With recording on, every
 * group posted gets a begin event (after the communication stream waited for the compute
 * stream, and with the arrival gate for the peer too: the transfer may start; a gated group's
 * same-rank copies, done before the gate, fall outside it) and an end event. times[] gets, for the groups posted since
 * the last reset, seconds from base_event (a cudaEvent_t recorded on the same device before
 * them) to the begin and to the end. */
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
