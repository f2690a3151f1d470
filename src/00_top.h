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
 *     >>errors      pp_status, pp_error: every call that can fail says which parameter and rule
 *     >>grid        rank grids: a rank's (tp, cp, dp, pp) coordinates and its groups; placement
 *                   by speed (the heaviest pipeline rank on the fastest GPU)
 *     >>layers      which layers each (pipeline rank, virtual stage) builds; layout strings
 *     >>schedule    the schedule IR, generators (GPipe, 1F1B, interleaved, looped BFS), lowering,
 *                   validator
 *     >>simulate    per-action costs -> timeline, bubble, peak activations
 *     >>draw        ASCII and SVG timelines, PyTorch text and CSV forms, JSON
 *     >>zerobubble  ZB-H1, ZB-H2, ZB-V, DualPipeV, DualPipe, interleaved zero bubble
 *     >>search      greedy zero-bubble schedules; the best schedule under a memory cap, and
 *                   the split of the layers into stages that suits it
 *     >>pack        sequence packing into bins for DP x PP, padding, cu_seqlens
 *     >>cp          context-parallel partitions (load-balanced 2*cp chunks, BSHD and THD)
 *     >>replay      router-replay index maps for MoE
 *     >>runtime     >>transport interface, >>threads transport, >>executor, >>timeline
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
 * LICENCE  MIT. Copyright (c) 2026 the pipepar authors.
 */
