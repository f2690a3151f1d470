/* Copyright (c) 2026 the pipepar authors. SPDX-License-Identifier: MIT */
/* pipepar_nccl.c — the NCCL companion of pipepar.h: communicator set-up, the runtime's
 * transport over NCCL, and the cross-rank half of the gradient norm. Declarations and the
 * user's guide are in pipepar.h (search ">>nccl").
 *
 * Build:  cc -std=c99 -O2 -I$CUDA_HOME/include [-I$NCCL_HOME/include] -c pipepar_nccl.c
 *         [-DPIPEPAR_NCCL_MPI with mpicc, to share the unique id through MPI]
 * Link:   -lnccl -lcudart (and -lrt on glibc before 2.34, for shm_open), next to the translation
 *         unit that defines PIPEPAR_IMPLEMENTATION and pipepar_cuda.o (pp_nccl_grad_norm uses
 *         pp_cuda_clip_scale).
 *
 * Reading order: errors and clocks; finding rank, world and device in the environment; the
 * unique id (file, MPI, given); init, split, free; host-side waits with deadlines (the
 * watchdog); the transport (point-to-point groups, then the group collectives); the arrival
 * gate; copy-engine transfers; group times; the event timer; the gradient norm.             */
/* CUDA's headers use anonymous unions, which -std=c99 -Wpedantic flags; they are not ours. */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L   /* clock_gettime, pthreads under -std=c99 */
#endif
#include <cuda.h>            /* types of the stream memory operations only; no -lcuda */
#include <cuda_runtime.h>
#include <nccl.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#ifdef PIPEPAR_NCCL_MPI
#include <mpi.h>
#endif
#include "pipepar.h"

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "pipepar_nccl.c needs NCCL 2.18 or newer (ncclCommSplit, non-blocking communicators)"
#endif

typedef char pp__nccl_id_size_check[sizeof(pp_nccl_id) == sizeof(ncclUniqueId) ? 1 : -1];

#define PP__NCCL_DEFAULT_TIMEOUT 300.0
#define PP__NCCL_MAX_COUNT_BASE (1ull << 62)   /* config.test_count_base stays below it */

struct pp_nccl {
    ncclComm_t comm;
    cudaStream_t stream;        /* communication stream, highest priority */
    cudaEvent_t host_wait;      /* for all-reduces the host waits on */
    int rank, world, device;
    double timeout_s;
    int max_ctas, cta_policy;   /* passed on to ncclCommSplit's children */
    uint64_t test_count_base;   /* config.test_count_base, passed on too */
    int test_ce_threads;        /* config.test_ce_threads, passed on too */
    int debug;                  /* $PIPEPAR_NCCL_DEBUG=1: one line on stderr per NCCL call */
    long posts;
    int aborted;
    pp_status abort_status;
    char abort_reason[PP_ERROR_MESSAGE_SIZE];
    int owns_mpi;               /* MPI_Init was ours: MPI_Finalize in pp_nccl_free */
    float *d_buf, *h_buf;       /* all-reduce scratch, device and pinned host */
    int buf_cap;
    char describe[384];
    /* The watchdog: a thread that aborts the communicator when a blocking NCCL call (armed
     * around it) outlives its deadline, as PyTorch's ProcessGroupNCCL watchdog does. */
    pthread_t wd_thread;
    int wd_started, wd_stop, wd_fired, wd_abort_done;
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cv;
    unsigned long wd_gen;       /* bumped by every arm and disarm */
    double wd_deadline;         /* 0: disarmed */
    double wd_timeout;
    char wd_what[96];
    /* Called once, right before ncclCommAbort: the arrival gate opens its stream waits there,
     * so the NCCL kernels queued behind them launch and see the abort flag (see the gate). */
    void (*before_abort)(void *user);
    void *before_abort_user;
    int before_abort_done;
};

/* --- errors and clocks -------------------------------------------------------------------- */

/* errors are reported the header's way (pp_error_set, from the implementation object) */
#define pp__nccl_fail pp_error_set

static pp_status pp__nccl_ok(pp_error *err)
{
    if (err) { err->status = PP_OK; err->message[0] = '\0'; }
    return PP_OK;
}

static double pp__nccl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Polling back-off: spin-yield for the first ~2000 polls (transfers that are about to finish),
 * then sleep 50 us between polls so a long wait does not burn a core. */
static void pp__nccl_pause(int *polls)
{
    if (++*polls < 2000) { sched_yield(); return; }
    {
        struct timespec ts = { 0, 50000 };
        nanosleep(&ts, NULL);
    }
}

static pp_status pp__nccl_cuda_fail(pp_error *err, cudaError_t e, const char *what)
{
    return pp__nccl_fail(err, e == cudaErrorMemoryAllocation ? PP_ENOMEM : PP_EIO, "%s: CUDA error %s (%s)",
                         what, cudaGetErrorName(e), cudaGetErrorString(e));
}

static pp_status pp__nccl_aborted(const pp_nccl *nc, pp_error *err, const char *what)
{
    return pp__nccl_fail(err, PP_EABORTED, "%s: communicator of rank %d was aborted: %s", what, nc->rank,
                         nc->abort_reason);
}

static double pp__nccl_timeout(const pp_nccl *nc, double timeout_s)
{
    return timeout_s > 0 ? timeout_s : nc->timeout_s;
}

/* Runs the before-abort hook at most once, whichever thread aborts first (the watchdog or the
 * caller's). */
static void pp__nccl_before_abort(pp_nccl *nc)
{
    void (*hook)(void *) = NULL;
    if (nc->wd_started) pthread_mutex_lock(&nc->wd_mu);
    if (!nc->before_abort_done && nc->before_abort) { hook = nc->before_abort; nc->before_abort_done = 1; }
    if (nc->wd_started) pthread_mutex_unlock(&nc->wd_mu);
    if (hook) hook(nc->before_abort_user);
}

void pp_nccl_abort(pp_nccl *nc, pp_status status, const char *reason)
{
    if (!nc || nc->aborted) return;
    nc->aborted = 1;
    nc->abort_status = status;
    snprintf(nc->abort_reason, sizeof nc->abort_reason, "%s", reason ? reason : "aborted");
    pp__nccl_before_abort(nc);
    if (nc->comm) {
        /* Sets NCCL's abort flag, which its kernels poll, so work stuck on a dead peer ends and
         * the streams that wait on it drain; then releases the communicator. */
        ncclCommAbort(nc->comm);
        nc->comm = NULL;
    }
}

/* An NCCL call's result: ncclInProgress is fine (non-blocking mode), anything else fails and aborts
 * the communicator (NCCL's state after an error is unusable). */
static pp_status pp__nccl_check(pp_nccl *nc, ncclResult_t r, const char *what, pp_error *err)
{
    char reason[PP_ERROR_MESSAGE_SIZE];
    const char *last;
    if (r == ncclSuccess || r == ncclInProgress) return PP_OK;
    last = nc && nc->comm ? ncclGetLastError(nc->comm) : ncclGetLastError(NULL);
    snprintf(reason, sizeof reason, "%s: NCCL error %d (%s)%s%s", what, (int)r, ncclGetErrorString(r),
             last && *last ? ": " : "", last && *last ? last : "");
    if (nc) pp_nccl_abort(nc, PP_ETRANSPORT, reason);
    return pp__nccl_fail(err, PP_ETRANSPORT, "%s", reason);
}

/* The watchdog's one question, asked in every poll loop: did NCCL report an asynchronous error
 * (a peer's connection closed, a network failure)? */
static pp_status pp__nccl_health(pp_nccl *nc, const char *what, pp_error *err)
{
    ncclResult_t state = ncclSuccess, r;
    if (nc->aborted) return pp__nccl_aborted(nc, err, what);
    r = ncclCommGetAsyncError(nc->comm, &state);
    if (r != ncclSuccess) return pp__nccl_check(nc, r, what, err);
    if (state != ncclSuccess && state != ncclInProgress) return pp__nccl_check(nc, state, what, err);
    return PP_OK;
}

/* Waits until the communicator's pending non-blocking call has finished enqueueing (its state
 * leaves ncclInProgress), within the deadline. */
static pp_status pp__nccl_settle(pp_nccl *nc, ncclComm_t comm, double deadline, const char *what, pp_error *err)
{
    int polls = 0;
    for (;;) {
        ncclResult_t state = ncclSuccess, r = ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess) return pp__nccl_check(nc, r, what, err);
        if (state == ncclSuccess) return PP_OK;
        if (state != ncclInProgress) return pp__nccl_check(nc, state, what, err);
        if (pp__nccl_now() > deadline) {
            char reason[PP_ERROR_MESSAGE_SIZE];
            snprintf(reason, sizeof reason, "%s: rank %d timed out after %.1f s (a peer is missing or hangs)",
                     what, nc->rank, nc->timeout_s);
            pp_nccl_abort(nc, PP_ETIMEOUT, reason);
            return pp__nccl_fail(err, PP_ETIMEOUT, "%s", reason);
        }
        pp__nccl_pause(&polls);
    }
}

/* Waits for an event or a stream within the deadline, checking NCCL's health as it goes. On
 * timeout the communicator is aborted (so its kernels end) and PP_ETIMEOUT returned. */
static pp_status pp__nccl_wait_device(pp_nccl *nc, cudaEvent_t event, cudaStream_t stream, double timeout_s,
                                      const char *what, pp_error *err)
{
    double deadline = pp__nccl_now() + timeout_s;
    int polls = 0;
    for (;;) {
        cudaError_t e = event ? cudaEventQuery(event) : cudaStreamQuery(stream);
        pp_status st;
        if (e == cudaSuccess) return PP_OK;
        if (e != cudaErrorNotReady) return pp__nccl_cuda_fail(err, e, what);
        st = pp__nccl_health(nc, what, err);
        if (st != PP_OK) return st;
        if (pp__nccl_now() > deadline) {
            char reason[PP_ERROR_MESSAGE_SIZE];
            snprintf(reason, sizeof reason, "%s: rank %d timed out after %.1f s waiting for the device "
                     "(a peer is missing or hangs)", what, nc->rank, timeout_s);
            pp_nccl_abort(nc, PP_ETIMEOUT, reason);
            return pp__nccl_fail(err, PP_ETIMEOUT, "%s", reason);
        }
        pp__nccl_pause(&polls);
    }
}

/* --- the watchdog ----------------------------------------------------------------------- */

/* Blocking NCCL calls (init, ncclGroupEnd, a collective's enqueue, finalize) can wait on a peer
 * forever: for a connection, for room in a queue the peer's progress frees. Each is armed with a
 * deadline; if it has not returned by then, the watchdog thread calls ncclCommAbort (safe from
 * another thread, and what makes the blocked call return), and the caller turns the call's
 * result into PP_ETIMEOUT. */
static void *pp__nccl_watchdog(void *arg)
{
    pp_nccl *nc = (pp_nccl *)arg;
    pthread_mutex_lock(&nc->wd_mu);
    while (!nc->wd_stop) {
        double dl = nc->wd_deadline;
        unsigned long gen = nc->wd_gen;
        struct timespec ts;
        if (dl <= 0) { pthread_cond_wait(&nc->wd_cv, &nc->wd_mu); continue; }
        ts.tv_sec = (time_t)dl;
        ts.tv_nsec = (long)((dl - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&nc->wd_cv, &nc->wd_mu, &ts);
        if (!nc->wd_stop && nc->wd_gen == gen && nc->wd_deadline > 0 && pp__nccl_now() >= dl) {
            ncclComm_t comm = nc->comm;
            if (nc->debug) fprintf(stderr, "[pipepar_nccl rank %d] watchdog: '%s' outlived %.1f s: ncclCommAbort\n",
                                   nc->rank, nc->wd_what, nc->wd_timeout);
            nc->wd_fired = 1;
            nc->wd_deadline = 0;
            pthread_mutex_unlock(&nc->wd_mu);
            pp__nccl_before_abort(nc);
            if (comm) ncclCommAbort(comm);
            pthread_mutex_lock(&nc->wd_mu);
            nc->wd_abort_done = 1;
            pthread_cond_broadcast(&nc->wd_cv);
        }
    }
    pthread_mutex_unlock(&nc->wd_mu);
    return NULL;
}

static pp_status pp__nccl_watchdog_start(pp_nccl *nc, pp_error *err)
{
    pthread_condattr_t ca;
    if (pthread_mutex_init(&nc->wd_mu, NULL) != 0) return pp__nccl_fail(err, PP_ENOMEM, "watchdog: mutex");
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_cond_init(&nc->wd_cv, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        pthread_mutex_destroy(&nc->wd_mu);
        return pp__nccl_fail(err, PP_ENOMEM, "watchdog: condition variable");
    }
    pthread_condattr_destroy(&ca);
    if (pthread_create(&nc->wd_thread, NULL, pp__nccl_watchdog, nc) != 0) {
        pthread_cond_destroy(&nc->wd_cv);
        pthread_mutex_destroy(&nc->wd_mu);
        return pp__nccl_fail(err, PP_ENOMEM, "watchdog: cannot start its thread");
    }
    nc->wd_started = 1;
    return PP_OK;
}

static void pp__nccl_watchdog_stop(pp_nccl *nc)
{
    if (!nc->wd_started) return;
    pthread_mutex_lock(&nc->wd_mu);
    nc->wd_stop = 1;
    pthread_cond_broadcast(&nc->wd_cv);
    pthread_mutex_unlock(&nc->wd_mu);
    pthread_join(nc->wd_thread, NULL);
    pthread_cond_destroy(&nc->wd_cv);
    pthread_mutex_destroy(&nc->wd_mu);
    nc->wd_started = 0;
}

static void pp__nccl_arm(pp_nccl *nc, double timeout_s, const char *what)
{
    if (!nc->wd_started) return;
    pthread_mutex_lock(&nc->wd_mu);
    nc->wd_gen++;
    nc->wd_timeout = timeout_s;
    nc->wd_deadline = pp__nccl_now() + timeout_s;
    snprintf(nc->wd_what, sizeof nc->wd_what, "%s", what);
    pthread_cond_broadcast(&nc->wd_cv);
    pthread_mutex_unlock(&nc->wd_mu);
}

/* Returns 1 when the watchdog fired during the armed call: the communicator is then aborted and
 * *err says PP_ETIMEOUT. */
static int pp__nccl_disarm(pp_nccl *nc, pp_error *err)
{
    int fired;
    if (!nc->wd_started) return 0;
    pthread_mutex_lock(&nc->wd_mu);
    nc->wd_gen++;
    nc->wd_deadline = 0;
    fired = nc->wd_fired;
    while (fired && !nc->wd_abort_done) pthread_cond_wait(&nc->wd_cv, &nc->wd_mu);
    pthread_mutex_unlock(&nc->wd_mu);
    if (!fired) return 0;
    if (!nc->aborted) {
        nc->aborted = 1;
        nc->abort_status = PP_ETIMEOUT;
        snprintf(nc->abort_reason, sizeof nc->abort_reason, "%s: rank %d timed out after %.1f s (a peer is missing "
                 "or hangs); the watchdog aborted the communicator", nc->wd_what, nc->rank, nc->wd_timeout);
    }
    nc->comm = NULL;   /* released by ncclCommAbort */
    pp__nccl_fail(err, PP_ETIMEOUT, "%s", nc->abort_reason);
    return 1;
}

/* --- rank, world and device from the environment ----------------------------------------- */

/* The first of the variables that is set, as an integer; 0 when none is set, -1 when one is
 * set but not a whole non-negative number (its name in *bad). */
static int pp__nccl_env_int(const char *const *names, int *value, const char **found)
{
    int i;
    for (i = 0; names[i]; i++) {
        const char *s = getenv(names[i]);
        char *end;
        long v;
        if (!s || !*s) continue;
        *found = names[i];
        errno = 0;
        v = strtol(s, &end, 10);
        if (*end != '\0' || errno || v < 0 || v > 1 << 24) return -1;
        *value = (int)v;
        return 1;
    }
    return 0;
}

static pp_status pp__nccl_from_env(int *rank, int *world, int *device, pp_error *err)
{
    /* torchrun / torch.distributed.run, Open MPI, MPICH / Intel MPI (PMI), PMIx, Slurm. */
    static const char *const rank_vars[] = { "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                             "SLURM_PROCID", NULL };
    static const char *const world_vars[] = { "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                              "SLURM_NTASKS", NULL };
    static const char *const local_vars[] = { "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                              "MV2_COMM_WORLD_LOCAL_RANK", "PALS_LOCAL_RANKID",
                                              "SLURM_LOCALID", NULL };
    const char *name = "";
    int r, w, local = -1, have, devices = 0;
    cudaError_t e;
    have = pp__nccl_env_int(rank_vars, &r, &name);
    if (have < 0) return pp__nccl_fail(err, PP_EINVAL, "%s='%s': must be a whole number >= 0", name, getenv(name));
    if (have == 0)
        return pp__nccl_fail(err, PP_EINVAL, "rank: not given (config.world = 0) and none of RANK, "
                             "OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID is set");
    have = pp__nccl_env_int(world_vars, &w, &name);
    if (have < 0) return pp__nccl_fail(err, PP_EINVAL, "%s='%s': must be a whole number >= 1", name, getenv(name));
    if (have == 0)
        return pp__nccl_fail(err, PP_EINVAL, "world: not given and none of WORLD_SIZE, OMPI_COMM_WORLD_SIZE, "
                             "PMI_SIZE, SLURM_NTASKS is set");
    if (w < 1 || r >= w) return pp__nccl_fail(err, PP_EINVAL, "rank=%d: must be below world=%d", r, w);
    have = pp__nccl_env_int(local_vars, &local, &name);
    if (have < 0) return pp__nccl_fail(err, PP_EINVAL, "%s='%s': must be a whole number >= 0", name, getenv(name));
    e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "cudaGetDeviceCount");
    if (devices < 1) return pp__nccl_fail(err, PP_EINVAL, "device: this process sees no CUDA device");
    if (have == 0) local = r % devices;  /* one node, one process per GPU, in rank order */
    if (local >= devices)
        return pp__nccl_fail(err, PP_EINVAL, "%s=%d: this process sees only %d CUDA device%s", name, local,
                             devices, devices == 1 ? "" : "s");
    *rank = r; *world = w; *device = local;
    return PP_OK;
}

/* --- the unique id ------------------------------------------------------------------------ */

#define PP__NCCL_ID_MAGIC "pipepar-nccl-id-1"

static pp_status pp__nccl_id_path(const pp_nccl_config *cfg, char *path, size_t size, pp_error *err)
{
    static const char *const job_vars[] = { "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "MASTER_PORT", NULL };
    const char *p = cfg->id_file && *cfg->id_file ? cfg->id_file : getenv("PIPEPAR_NCCL_ID_FILE");
    int i;
    if (p && *p) {
        if (strlen(p) + 32 >= size) return pp__nccl_fail(err, PP_EINVAL, "id_file='%.64s...': path too long", p);
        snprintf(path, size, "%s", p);
        return PP_OK;
    }
    for (i = 0; job_vars[i]; i++) {
        const char *job = getenv(job_vars[i]);
        if (job && *job && strlen(job) < 128 && !strchr(job, '/')) {
            const char *step = getenv("SLURM_STEP_ID");
            snprintf(path, size, "/tmp/pipepar_nccl_%s%s%s.id", job, i == 1 && step ? "." : "", i == 1 && step ? step : "");
            return PP_OK;
        }
    }
    return pp__nccl_fail(err, PP_EINVAL, "id_file: not given; set PIPEPAR_NCCL_ID_FILE to a path every rank "
                         "sees (one per job), or run under torchrun / Slurm (TORCHELASTIC_RUN_ID, SLURM_JOB_ID or "
                         "MASTER_PORT names the job)");
}

/* Rank 0: write the id and the world size to path, atomically (a reader never sees half a file). */
static pp_status pp__nccl_id_write(const char *path, const ncclUniqueId *id, int world, pp_error *err)
{
    char tmp[600];
    FILE *f;
    int ok;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    f = fopen(tmp, "wb");
    if (!f) return pp__nccl_fail(err, PP_EIO, "id_file='%s': cannot create '%s': %s", path, tmp, strerror(errno));
    ok = fprintf(f, "%s world=%d\n", PP__NCCL_ID_MAGIC, world) > 0 && fwrite(id, sizeof *id, 1, f) == 1;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return pp__nccl_fail(err, PP_EIO, "id_file='%s': cannot write: %s", path, strerror(e));
    }
    return PP_OK;
}

/* Other ranks: wait (within the deadline) for rank 0's file, then read and check it. */
static pp_status pp__nccl_id_read(const char *path, ncclUniqueId *id, int world, double timeout_s, pp_error *err)
{
    double deadline = pp__nccl_now() + timeout_s;
    int polls = 0;
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            char header[64];
            int file_world = -1;
            size_t n = 0;
            if (fgets(header, sizeof header, f) && strncmp(header, PP__NCCL_ID_MAGIC " world=", strlen(PP__NCCL_ID_MAGIC) + 7) == 0) {
                file_world = atoi(header + strlen(PP__NCCL_ID_MAGIC) + 7);
                n = fread(id, sizeof *id, 1, f);
            }
            fclose(f);
            if (n == 1 && file_world != world)
                return pp__nccl_fail(err, PP_EINVAL, "id_file='%s': written for world=%d, this rank has world=%d "
                                     "(a stale file of another job?)", path, file_world, world);
            if (n == 1) return PP_OK;
            return pp__nccl_fail(err, PP_EIO, "id_file='%s': not a pipepar NCCL id file", path);
        }
        if (pp__nccl_now() > deadline)
            return pp__nccl_fail(err, PP_ETIMEOUT, "id_file='%s': rank 0 did not write it within %.1f s", path,
                                 timeout_s);
        pp__nccl_pause(&polls);
    }
}

static int pp__nccl_launched_by_mpi(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

pp_status pp_nccl_unique_id(pp_nccl_id *id, pp_error *err)
{
    ncclResult_t r;
    if (!id) return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_unique_id: id must not be NULL");
    r = ncclGetUniqueId((ncclUniqueId *)(void *)id);
    if (r != ncclSuccess) return pp__nccl_check(NULL, r, "ncclGetUniqueId", err);
    return pp__nccl_ok(err);
}

/* --- init, split, free -------------------------------------------------------------------- */

static ncclConfig_t pp__nccl_comm_config(int max_ctas, int cta_policy)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    if (max_ctas > 0) { config.minCTAs = 1; config.maxCTAs = max_ctas; }
#if defined(NCCL_CTA_POLICY_EFFICIENCY)
    if (cta_policy == 1) config.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
#endif
#if defined(NCCL_CTA_POLICY_ZERO)
    if (cta_policy == 2) config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
#endif
    (void)cta_policy;
    return config;
}

/* Stream, event and description of a communicator that NCCL has just created. */
static pp_status pp__nccl_finish_setup(pp_nccl *nc, const char *how, pp_error *err)
{
    int lo = 0, hi = 0, version = 0;
    struct cudaDeviceProp prop;
    /* The communication stream has the highest priority, so that a transfer starts as soon as
     * SMs free up. */
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&lo, &hi);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&nc->stream, cudaStreamNonBlocking, hi);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&nc->host_wait, cudaEventDisableTiming);
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "pp_nccl_init: stream");
    ncclGetVersion(&version);
    if (cudaGetDeviceProperties(&prop, nc->device) != cudaSuccess) snprintf(prop.name, sizeof prop.name, "?");
    snprintf(nc->describe, sizeof nc->describe, "nccl %d.%d.%d, rank %d of %d, device %d (%s), %s",
             version / 10000, version / 100 % 100, version % 100, nc->rank, nc->world, nc->device, prop.name, how);
    return PP_OK;
}

pp_status pp_nccl_init(const pp_nccl_config *cfg, pp_nccl **out, pp_error *err)
{
    pp_nccl *nc;
    ncclUniqueId id;
    ncclConfig_t config;
    ncclResult_t r;
    pp_status st = PP_OK;
    pp_nccl_bootstrap how;
    char path[600] = "", desc[700];
    double deadline;
    cudaError_t e;
    int devices = 0;
    if (!cfg || !out) return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_init: cfg and out must not be NULL");
    *out = NULL;
    if (cfg->timeout_s < 0) return pp__nccl_fail(err, PP_EINVAL, "timeout_s=%g: must be >= 0 (0 means 300 s)", cfg->timeout_s);
    if (cfg->max_ctas < 0) return pp__nccl_fail(err, PP_EINVAL, "max_ctas=%d: must be >= 0", cfg->max_ctas);
    if (cfg->cta_policy < 0 || cfg->cta_policy > 2)
        return pp__nccl_fail(err, PP_EINVAL, "cta_policy=%d: must be 0 (default), 1 (efficiency) or 2 (zero)",
                             cfg->cta_policy);
    if (cfg->test_count_base >= PP__NCCL_MAX_COUNT_BASE)
        return pp__nccl_fail(err, PP_EINVAL, "test_count_base=%llu: must be below 2^62",
                             (unsigned long long)cfg->test_count_base);
    if ((int)cfg->bootstrap < 0 || cfg->bootstrap > PP_NCCL_BOOTSTRAP_ID)
        return pp__nccl_fail(err, PP_EINVAL, "bootstrap=%d: not a pp_nccl_bootstrap", (int)cfg->bootstrap);
    nc = (pp_nccl *)calloc(1, sizeof *nc);
    if (!nc) return pp__nccl_fail(err, PP_ENOMEM, "pp_nccl_init: out of memory");
    if ((st = pp__nccl_watchdog_start(nc, err)) != PP_OK) { free(nc); return st; }
    nc->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : PP__NCCL_DEFAULT_TIMEOUT;
    nc->max_ctas = cfg->max_ctas;
    nc->cta_policy = cfg->cta_policy;
    nc->test_count_base = cfg->test_count_base;
    nc->test_ce_threads = cfg->test_ce_threads != 0;
    nc->debug = getenv("PIPEPAR_NCCL_DEBUG") && atoi(getenv("PIPEPAR_NCCL_DEBUG")) > 0;
    how = cfg->bootstrap;
    if (how == PP_NCCL_BOOTSTRAP_AUTO) {
#ifdef PIPEPAR_NCCL_MPI
        how = pp__nccl_launched_by_mpi() ? PP_NCCL_BOOTSTRAP_MPI : PP_NCCL_BOOTSTRAP_FILE;
#else
        how = PP_NCCL_BOOTSTRAP_FILE;
#endif
    }
#ifndef PIPEPAR_NCCL_MPI
    if (how == PP_NCCL_BOOTSTRAP_MPI) {
        pp_nccl_free(nc);
        return pp__nccl_fail(err, PP_EUNSUPPORTED, "bootstrap=MPI: pipepar_nccl.c was built without "
                             "-DPIPEPAR_NCCL_MPI%s", pp__nccl_launched_by_mpi() ? "" : " (and no MPI launcher is seen)");
    }
#endif
    if (how == PP_NCCL_BOOTSTRAP_ID && !cfg->id) {
        pp_nccl_free(nc);
        return pp__nccl_fail(err, PP_EINVAL, "id: bootstrap=ID needs the id made by pp_nccl_unique_id");
    }

    /* Who am I: given, or from MPI, or from the launcher's environment. */
    if (cfg->world > 0) {
        if (cfg->rank < 0 || cfg->rank >= cfg->world)
            st = pp__nccl_fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1 = %d", cfg->rank, cfg->world - 1);
        nc->rank = cfg->rank; nc->world = cfg->world; nc->device = cfg->device;
        e = cudaGetDeviceCount(&devices);
        if (st == PP_OK && e != cudaSuccess) st = pp__nccl_cuda_fail(err, e, "cudaGetDeviceCount");
        if (st == PP_OK && (cfg->device < 0 || cfg->device >= devices))
            st = pp__nccl_fail(err, PP_EINVAL, "device=%d: must be between 0 and %d (CUDA devices seen)",
                               cfg->device, devices - 1);
    } else if (cfg->world < 0) {
        st = pp__nccl_fail(err, PP_EINVAL, "world=%d: must be >= 1, or 0 to read the environment", cfg->world);
    }
#ifdef PIPEPAR_NCCL_MPI
    if (st == PP_OK && how == PP_NCCL_BOOTSTRAP_MPI) {
        int inited = 0, mr = 0, mw = 0;
        MPI_Initialized(&inited);
        if (!inited) { MPI_Init(NULL, NULL); nc->owns_mpi = 1; }
        MPI_Comm_rank(MPI_COMM_WORLD, &mr);
        MPI_Comm_size(MPI_COMM_WORLD, &mw);
        if (cfg->world == 0) {
            int r2, w2, d2;
            nc->rank = mr; nc->world = mw;
            if (pp__nccl_from_env(&r2, &w2, &d2, NULL) == PP_OK) nc->device = d2;
            else { cudaGetDeviceCount(&devices); nc->device = devices > 0 ? mr % devices : 0; }
        } else if (mw != cfg->world || mr != cfg->rank) {
            st = pp__nccl_fail(err, PP_EINVAL, "rank=%d, world=%d: MPI says rank %d of %d", cfg->rank, cfg->world, mr, mw);
        }
    }
#endif
    if (st == PP_OK && cfg->world == 0 && how != PP_NCCL_BOOTSTRAP_MPI)
        st = pp__nccl_from_env(&nc->rank, &nc->world, &nc->device, err);
    if (st == PP_OK) {
        e = cudaSetDevice(nc->device);
        if (e != cudaSuccess) st = pp__nccl_cuda_fail(err, e, "cudaSetDevice");
    }

    /* The unique id reaches every rank. */
    deadline = pp__nccl_now() + nc->timeout_s;
    if (st == PP_OK) {
        switch (how) {
        case PP_NCCL_BOOTSTRAP_ID:
            memcpy(&id, cfg->id, sizeof id);
            snprintf(desc, sizeof desc, "bootstrap id (threads of one process)");
            break;
        case PP_NCCL_BOOTSTRAP_MPI:
#ifdef PIPEPAR_NCCL_MPI
            if (nc->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) {
                st = pp__nccl_check(NULL, r, "ncclGetUniqueId", err);
                memset(&id, 0, sizeof id);   /* the others still take part in the broadcast */
            }
            MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
            snprintf(desc, sizeof desc, "bootstrap MPI");
#endif
            break;
        default:
            st = pp__nccl_id_path(cfg, path, sizeof path, err);
            if (st == PP_OK && nc->rank == 0) {
                r = ncclGetUniqueId(&id);
                st = r == ncclSuccess ? pp__nccl_id_write(path, &id, nc->world, err)
                                      : pp__nccl_check(NULL, r, "ncclGetUniqueId", err);
            } else if (st == PP_OK) {
                st = pp__nccl_id_read(path, &id, nc->world, nc->timeout_s, err);
            }
            snprintf(desc, sizeof desc, "bootstrap file %s", path);
            break;
        }
    }

    /* The communicator; the watchdog turns a missing peer into a timeout here too. */
    if (st == PP_OK) {
        config = pp__nccl_comm_config(cfg->max_ctas, cfg->cta_policy);
        pp__nccl_arm(nc, nc->timeout_s, "ncclCommInitRankConfig");
        r = ncclCommInitRankConfig(&nc->comm, nc->world, id, nc->rank, &config);
        if (pp__nccl_disarm(nc, err)) {
            st = PP_ETIMEOUT;
        } else if (r != ncclSuccess && r != ncclInProgress) {
            nc->comm = NULL;
            st = pp__nccl_check(NULL, r, "ncclCommInitRankConfig", err);
        } else {
            st = pp__nccl_settle(nc, nc->comm, deadline, "ncclCommInitRankConfig", err);
        }
        /* Every rank has joined, so every rank has read the file: it can go. */
        if (st == PP_OK && how == PP_NCCL_BOOTSTRAP_FILE && nc->rank == 0) remove(path);
    }
    if (st == PP_OK) st = pp__nccl_finish_setup(nc, desc, err);
    if (st != PP_OK) {
        if (how == PP_NCCL_BOOTSTRAP_FILE && nc->rank == 0 && path[0]) remove(path);
        pp_nccl_free(nc);
        return st;
    }
    *out = nc;
    return pp__nccl_ok(err);
}

/* A new communicator from parent's ranks of `color`, this rank at position `key` among them
 * (ncclCommSplit), expected to hold `size` ranks: what pp_nccl_split, pp_nccl_reorder and
 * pp_nccl_split_group share. Color NCCL_SPLIT_NOCOLOR joins the split (every parent rank must)
 * and makes no communicator: *out is NULL. */
static pp_status pp__nccl_split_as(pp_nccl *parent, int color, int key, int size, const char *desc,
                                   const char *caller, pp_nccl **out, pp_error *err)
{
    pp_nccl *nc;
    ncclConfig_t config;
    ncclResult_t r;
    pp_status st;
    cudaError_t e;
    /* the child's stream (pp__nccl_finish_setup) is made on the current device: make it the
     * parent's, whatever the caller's */
    if ((e = cudaSetDevice(parent->device)) != cudaSuccess) return pp__nccl_cuda_fail(err, e, caller);
    nc = (pp_nccl *)calloc(1, sizeof *nc);
    if (!nc) return pp__nccl_fail(err, PP_ENOMEM, "%s: out of memory", caller);
    if ((st = pp__nccl_watchdog_start(nc, err)) != PP_OK) { free(nc); return st; }
    nc->rank = key;
    nc->world = size;
    nc->device = parent->device;
    nc->timeout_s = parent->timeout_s;
    nc->max_ctas = parent->max_ctas;
    nc->cta_policy = parent->cta_policy;
    nc->test_count_base = parent->test_count_base;
    nc->test_ce_threads = parent->test_ce_threads;
    nc->debug = parent->debug;
    config = pp__nccl_comm_config(parent->max_ctas, parent->cta_policy);
    pp__nccl_arm(parent, parent->timeout_s, "ncclCommSplit");
    r = ncclCommSplit(parent->comm, color, color == NCCL_SPLIT_NOCOLOR ? 0 : key, &nc->comm, &config);
    if (pp__nccl_disarm(parent, err)) {
        nc->comm = NULL;
        st = PP_ETIMEOUT;
    } else if (r != ncclSuccess && r != ncclInProgress) {
        nc->comm = NULL;
        st = pp__nccl_check(parent, r, "ncclCommSplit", err);
    } else {
        st = pp__nccl_settle(parent, parent->comm, pp__nccl_now() + parent->timeout_s, "ncclCommSplit", err);
        if (st == PP_OK && nc->comm)
            st = pp__nccl_settle(nc, nc->comm, pp__nccl_now() + parent->timeout_s, "ncclCommSplit", err);
    }
    if (st == PP_OK && color == NCCL_SPLIT_NOCOLOR) {   /* in no group: nothing to keep */
        pp_nccl_free(nc);
        return pp__nccl_ok(err);
    }
    if (st == PP_OK && nc->comm) {
        /* ncclCommSplit orders equal keys by the parent's rank: a duplicate key shows up here */
        int got = -1, count = -1;
        if (ncclCommUserRank(nc->comm, &got) != ncclSuccess || ncclCommCount(nc->comm, &count) != ncclSuccess)
            st = pp__nccl_fail(err, PP_ETRANSPORT, "ncclCommUserRank/ncclCommCount failed after ncclCommSplit");
        else if (got != key || count != size)
            st = pp__nccl_fail(err, PP_EINVAL, "key=%d: this rank became rank %d of %d, not %d of %d: the ranks' "
                               "keys are not a permutation of 0..%d", key, got, count, key, size, size - 1);
    }
    if (st == PP_OK) st = pp__nccl_finish_setup(nc, desc, err);
    if (st != PP_OK) { pp_nccl_free(nc); return st; }
    *out = nc;
    return pp__nccl_ok(err);
}

pp_status pp_nccl_split(pp_nccl *parent, const pp_grid *grid, unsigned dims, pp_nccl **out, pp_error *err)
{
    pp_grid_group_info info;
    pp_status st;
    char desc[64], name[32];
    if (!parent || !grid || !out) return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_split: parent, grid and out must not be NULL");
    *out = NULL;
    if (parent->aborted) return pp__nccl_aborted(parent, err, "pp_nccl_split");
    if (grid->world != parent->world)
        return pp__nccl_fail(err, PP_EINVAL, "grid world=%d: must equal the communicator's size %d", grid->world,
                             parent->world);
    st = pp_grid_group(grid, parent->rank, dims, &info, err);
    if (st != PP_OK) return st;
    pp_grid_dims_format(dims, name, sizeof name);
    snprintf(desc, sizeof desc, "%s group %d", name, info.color);
    return pp__nccl_split_as(parent, info.color, info.index, info.size, desc, "pp_nccl_split", out, err);
}

pp_status pp_nccl_reorder(pp_nccl *parent, int new_rank, pp_nccl **out, pp_error *err)
{
    char desc[64];
    float *hot, flag;
    pp_status st;
    int k, bad;
    if (!parent || !out) return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_reorder: parent and out must not be NULL");
    *out = NULL;
    if (parent->aborted) return pp__nccl_aborted(parent, err, "pp_nccl_reorder");
    /* Every rank joins both reductions whatever it holds, so that a bad number or a failed
     * allocation on one rank fails all of them alike rather than leaving the others waiting:
     * first a flag (1 where this rank cannot go on), then every new number (a sum of one-hot
     * rows), so that a duplicate is seen everywhere before any rank splits. */
    hot = (float *)calloc((size_t)parent->world, sizeof(float));
    bad = !hot || new_rank < 0 || new_rank >= parent->world;
    flag = bad ? 1.0f : 0.0f;
    st = pp_nccl_all_reduce_host(parent, &flag, 1, parent->timeout_s, err);
    if (st == PP_OK && bad)
        st = !hot ? pp__nccl_fail(err, PP_ENOMEM, "pp_nccl_reorder: out of memory")
                  : pp__nccl_fail(err, PP_EINVAL, "new_rank=%d: must be in 0..%d (the communicator's size is %d)",
                                  new_rank, parent->world - 1, parent->world);
    else if (st == PP_OK && flag > 0)
        st = pp__nccl_fail(err, PP_EINVAL, "new_rank=%d: %g other rank(s) gave a number outside 0..%d or ran out of "
                           "memory", new_rank, (double)flag, parent->world - 1);
    if (st == PP_OK) {
        hot[new_rank] = 1;
        st = pp_nccl_all_reduce_host(parent, hot, parent->world, parent->timeout_s, err);
        for (k = 0; st == PP_OK && k < parent->world; k++)
            if (hot[k] != 1)
                st = pp__nccl_fail(err, PP_EINVAL, "new_rank=%d: the ranks' new numbers are not a permutation of "
                                   "0..%d (%g ranks asked for %d)", new_rank, parent->world - 1, (double)hot[k], k);
    }
    free(hot);
    if (st != PP_OK) return st;
    snprintf(desc, sizeof desc, "reordered (rank %d was %d)", new_rank, parent->rank);
    return pp__nccl_split_as(parent, 0, new_rank, parent->world, desc, "pp_nccl_reorder", out, err);
}

/* pp_nccl_split_group's local checks: members distinct parent ranks, this rank among them. Sets
 * *color (the smallest member) and *index (this rank's place); PP_EINVAL with the reason. */
static pp_status pp__nccl_group_check(const pp_nccl *parent, const int *members, int size, int *color, int *index,
                                      pp_error *err)
{
    int i, j;
    *color = -1;
    *index = -1;
    if (size < 0 || size > parent->world)
        return pp__nccl_fail(err, PP_EINVAL, "size=%d: must be between 0 (this rank in no group) and the communicator's "
                             "size %d", size, parent->world);
    if (size > 0 && !members) return pp__nccl_fail(err, PP_EINVAL, "members=NULL: needs size=%d parent ranks", size);
    for (i = 0; i < size; i++) {
        if (members[i] < 0 || members[i] >= parent->world)
            return pp__nccl_fail(err, PP_EINVAL, "members[%d]=%d: must be a rank of the parent, 0..%d", i, members[i],
                                 parent->world - 1);
        for (j = 0; j < i; j++)
            if (members[j] == members[i])
                return pp__nccl_fail(err, PP_EINVAL, "members[%d]=%d: appears twice (also members[%d])", i, members[i], j);
        if (members[i] == parent->rank) *index = i;
        if (*color < 0 || members[i] < *color) *color = members[i];
    }
    if (size > 0 && *index < 0)
        return pp__nccl_fail(err, PP_EINVAL, "members: this rank (%d) is not among its %d members (a rank in no group "
                             "passes size 0)", parent->rank, size);
    return PP_OK;
}

/* Whether this rank's members agree with what every rank reported: color_of[r] (its group's
 * smallest member + 1, 0 for none) and index_of[r] (its place in its own members + 1). Each member
 * must report this group and place itself where this list does, and only the members may report
 * this group. Every member of a group checks the same reports, so when all pass, their lists are
 * one list: member m at index_of[m] - 1. */
static pp_status pp__nccl_group_agrees(const pp_nccl *parent, const int *members, int size, int color,
                                       const float *color_of, const float *index_of, pp_error *err)
{
    int i, r, n = 0;
    if (size == 0) return PP_OK;   /* in no group: the groups that list this rank find it */
    for (i = 0; i < size; i++) {
        int m = members[i];
        if (color_of[m] != (float)(color + 1))
            return color_of[m] == 0
                ? pp__nccl_fail(err, PP_EINVAL, "members[%d]=%d: rank %d passed size 0 (in no group)", i, m, m)
                : pp__nccl_fail(err, PP_EINVAL, "members[%d]=%d: rank %d gave another group (its smallest member is %g, "
                                "this one's %d): groups must not overlap, and every member must give the same members",
                                i, m, m, (double)color_of[m] - 1, color);
        if (index_of[m] != (float)(i + 1))
            return pp__nccl_fail(err, PP_EINVAL, "members[%d]=%d: rank %d puts itself at members[%g]: every member must "
                                 "give the same members in the same order", i, m, m, (double)index_of[m] - 1);
    }
    for (r = 0; r < parent->world; r++) n += color_of[r] == (float)(color + 1);
    if (n != size)
        return pp__nccl_fail(err, PP_EINVAL, "members: %d ranks gave the group whose smallest member is %d, but its "
                             "members list %d (a rank gave members that include these but not itself?)", n, color, size);
    return PP_OK;
}

pp_status pp_nccl_split_group(pp_nccl *parent, const int *members, int size, pp_nccl **out, pp_error *err)
{
    const char *fn = "pp_nccl_split_group";
    int color = -1, index = -1, world;
    float flag, *rep = NULL;
    pp_error mine;
    pp_status st, bad;
    char desc[64];
    if (out) *out = NULL;
    if (!parent || !out) return pp__nccl_fail(err, PP_EINVAL, "%s: parent and out must not be NULL", fn);
    if (parent->aborted) return pp__nccl_aborted(parent, err, fn);
    world = parent->world;
    /* Every rank joins every reduction whatever it found, as in pp_nccl_reorder, so that bad
     * members on any rank fail all ranks alike before ncclCommSplit, where the others would
     * wait until their deadline: first a flag (1 where this rank's own arguments are bad), then
     * every rank's report (its group's smallest member and its place in it), then a verdict. */
    memset(&mine, 0, sizeof mine);
    bad = pp__nccl_group_check(parent, members, size, &color, &index, &mine);
    rep = (float *)calloc(2 * (size_t)world, sizeof(float));
    if (bad == PP_OK && !rep) bad = pp__nccl_fail(&mine, PP_ENOMEM, "%s: out of memory", fn);
    flag = bad != PP_OK ? 1.0f : 0.0f;
    st = pp_nccl_all_reduce_host(parent, &flag, 1, parent->timeout_s, err);
    if (st == PP_OK && bad != PP_OK) st = pp__nccl_fail(err, bad, "%s", mine.message);
    else if (st == PP_OK && flag > 0)
        st = pp__nccl_fail(err, PP_EINVAL, "%s: %g other rank(s) passed members that are not a group (see their errors)",
                           fn, (double)flag);
    if (st == PP_OK) {
        rep[parent->rank] = size > 0 ? (float)(color + 1) : 0.0f;
        rep[world + parent->rank] = size > 0 ? (float)(index + 1) : 0.0f;
        st = pp_nccl_all_reduce_host(parent, rep, 2 * world, parent->timeout_s, err);
    }
    if (st == PP_OK) {
        bad = pp__nccl_group_agrees(parent, members, size, color, rep, rep + world, &mine);
        flag = bad != PP_OK ? 1.0f : 0.0f;
        st = pp_nccl_all_reduce_host(parent, &flag, 1, parent->timeout_s, err);
        if (st == PP_OK && bad != PP_OK) st = pp__nccl_fail(err, bad, "%s", mine.message);
        else if (st == PP_OK && flag > 0)
            st = pp__nccl_fail(err, PP_EINVAL, "%s: %g rank(s) found that the ranks' members do not agree (see their "
                               "errors)", fn, (double)flag);
    }
    free(rep);
    if (st != PP_OK) return st;
    snprintf(desc, sizeof desc, "group of %d (smallest member %d)", size, color);
    return pp__nccl_split_as(parent, size > 0 ? color : NCCL_SPLIT_NOCOLOR, index, size, desc, fn, out, err);
}

void pp_nccl_free(pp_nccl *nc)
{
    if (!nc) return;
    if (nc->comm && !nc->aborted) {
        /* Flush what was issued, then destroy; a finalise that cannot finish (a dead peer) is
         * turned into an abort by the deadline. */
        ncclResult_t r;
        pp__nccl_arm(nc, nc->timeout_s, "ncclCommFinalize");
        r = ncclCommFinalize(nc->comm);
        if (!pp__nccl_disarm(nc, NULL)) {
            if ((r == ncclSuccess || r == ncclInProgress) &&
                pp__nccl_settle(nc, nc->comm, pp__nccl_now() + nc->timeout_s, "ncclCommFinalize", NULL) == PP_OK)
                ncclCommDestroy(nc->comm);
            else if (!nc->aborted)
                pp_nccl_abort(nc, PP_ETRANSPORT, "ncclCommFinalize failed");
        }
        nc->comm = NULL;
    }
    pp__nccl_watchdog_stop(nc);
    if (nc->stream) cudaStreamDestroy(nc->stream);
    if (nc->host_wait) cudaEventDestroy(nc->host_wait);
    if (nc->d_buf) cudaFree(nc->d_buf);
    if (nc->h_buf) cudaFreeHost(nc->h_buf);
#ifdef PIPEPAR_NCCL_MPI
    if (nc->owns_mpi) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
#endif
    free(nc);
}

int pp_nccl_rank(const pp_nccl *nc) { return nc ? nc->rank : -1; }
int pp_nccl_world(const pp_nccl *nc) { return nc ? nc->world : 0; }
int pp_nccl_device(const pp_nccl *nc) { return nc ? nc->device : -1; }
void *pp_nccl_comm(const pp_nccl *nc) { return nc ? (void *)nc->comm : NULL; }
void *pp_nccl_stream(const pp_nccl *nc) { return nc ? (void *)nc->stream : NULL; }
const char *pp_nccl_describe(const pp_nccl *nc) { return nc ? nc->describe : "(null)"; }

/* --- host-side waits: sync, barrier, all-reduce -------------------------------------------- */

pp_status pp_nccl_sync(pp_nccl *nc, void *stream, double timeout_s, pp_error *err)
{
    if (!nc) return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_sync: nc must not be NULL");
    if (nc->aborted) return pp__nccl_aborted(nc, err, "pp_nccl_sync");
    if (cudaSetDevice(nc->device) != cudaSuccess) return pp__nccl_fail(err, PP_EIO, "pp_nccl_sync: cudaSetDevice");
    {
        pp_status st = pp__nccl_wait_device(nc, NULL, stream ? (cudaStream_t)stream : nc->stream,
                                            pp__nccl_timeout(nc, timeout_s), "pp_nccl_sync", err);
        return st == PP_OK ? pp__nccl_ok(err) : st;
    }
}

pp_status pp_nccl_all_reduce_host(pp_nccl *nc, float *values, int count, double timeout_s, pp_error *err)
{
    const char *what = "pp_nccl_all_reduce_host";
    ncclResult_t r;
    cudaError_t e;
    pp_status st;
    if (!nc || (!values && count > 0)) return pp__nccl_fail(err, PP_EINVAL, "%s: nc and values must not be NULL", what);
    if (count < 0) return pp__nccl_fail(err, PP_EINVAL, "count=%d: must be >= 0", count);
    if (nc->aborted) return pp__nccl_aborted(nc, err, what);
    if (count == 0) return pp__nccl_ok(err);
    /* the scratch below is allocated on the current device: make it nc's, whatever the caller's */
    if ((e = cudaSetDevice(nc->device)) != cudaSuccess) return pp__nccl_cuda_fail(err, e, what);
    if (count > nc->buf_cap) {
        int cap = count < 4096 ? 4096 : count;   /* grown rarely: an allocation may wait on kernels in flight */
        if (nc->d_buf) cudaFree(nc->d_buf);
        if (nc->h_buf) cudaFreeHost(nc->h_buf);
        nc->d_buf = NULL; nc->h_buf = NULL; nc->buf_cap = 0;
        e = cudaMalloc((void **)&nc->d_buf, sizeof(float) * (size_t)cap);
        if (e == cudaSuccess) e = cudaMallocHost((void **)&nc->h_buf, sizeof(float) * (size_t)cap);
        if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, what);
        nc->buf_cap = cap;
    }
    if (nc->debug) fprintf(stderr, "[pipepar_nccl rank %d %.6f] all-reduce of %d floats\n", nc->rank, pp__nccl_now(), count);
    memcpy(nc->h_buf, values, sizeof(float) * (size_t)count);
    e = cudaMemcpyAsync(nc->d_buf, nc->h_buf, sizeof(float) * (size_t)count, cudaMemcpyHostToDevice, nc->stream);
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, what);
    pp__nccl_arm(nc, pp__nccl_timeout(nc, timeout_s), "all-reduce: ncclAllReduce");
    r = ncclAllReduce(nc->d_buf, nc->d_buf, (size_t)count, ncclFloat, ncclSum, nc->comm, nc->stream);
    if (pp__nccl_disarm(nc, err)) return PP_ETIMEOUT;
    if ((st = pp__nccl_check(nc, r, "ncclAllReduce", err)) != PP_OK) return st;
    if (r == ncclInProgress &&
        (st = pp__nccl_settle(nc, nc->comm, pp__nccl_now() + pp__nccl_timeout(nc, timeout_s), "ncclAllReduce", err)) != PP_OK)
        return st;
    e = cudaMemcpyAsync(nc->h_buf, nc->d_buf, sizeof(float) * (size_t)count, cudaMemcpyDeviceToHost, nc->stream);
    if (e == cudaSuccess) e = cudaEventRecord(nc->host_wait, nc->stream);
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, what);
    st = pp__nccl_wait_device(nc, nc->host_wait, NULL, pp__nccl_timeout(nc, timeout_s), "all-reduce", err);
    if (st != PP_OK) return st;
    memcpy(values, nc->h_buf, sizeof(float) * (size_t)count);
    return pp__nccl_ok(err);
}

pp_status pp_nccl_barrier(pp_nccl *nc, double timeout_s, pp_error *err)
{
    float one = 1.0f;
    pp_status st = pp_nccl_all_reduce_host(nc, &one, 1, timeout_s, err);
    if (st != PP_OK) return st;
    if (one != (float)nc->world)
        return pp__nccl_fail(err, PP_ETRANSPORT, "barrier: %g of %d ranks answered", (double)one, nc->world);
    return PP_OK;
}

/* --- the transport ------------------------------------------------------------------------ */

/* Where a group's work went: the communication stream (NCCL and same-rank copies), and the two
 * copy-engine streams (sends, receives). A handle's and a record's events are per stream. */
enum { PP__NCCL_ON_COMM = 1, PP__NCCL_ON_CE_SEND = 2, PP__NCCL_ON_CE_RECV = 4 };

typedef struct pp__nccl_handle {
    cudaEvent_t done;       /* recorded on the communication stream after the group */
    cudaEvent_t done_send, done_recv;   /* on the copy-engine streams (made with them) */
    int streams;            /* PP__NCCL_ON_* the group used */
    int in_use;
} pp__nccl_handle;

typedef struct pp__nccl_record {   /* one posted group, when recording */
    cudaEvent_t begin, end, end_send, end_recv;
    int streams;
    size_t sent, received;
    int transfers, peer;
} pp__nccl_record;

typedef struct pp__nccl_stage {    /* a send to this rank, parked until its receive is posted */
    uint64_t tag;
    void *data;
    size_t bytes, cap;
    int full;
} pp__nccl_stage;

/* Direct copy-engine transfers. Each transfer of an ordered pair has a claim in host memory that
 * the two ranks share (a POSIX shared-memory segment of the receiver's, mapped by the sender).
 * Whichever of the two posts first claims the transfer and publishes its own buffer; the second
 * reads the claim and does the one copy: a sender that comes second pushes straight into the
 * receive buffer, a receiver that comes second pulls straight out of the send buffer. Both are
 * copy-engine copies over NVLink, with no SM on either GPU. A buffer that cannot be shared (not
 * from cudaMalloc) makes the first side claim the ring instead. */
enum { PP__NCCL_CLAIM_PUSH = 1, PP__NCCL_CLAIM_PULL = 2, PP__NCCL_CLAIM_RING = 3, PP__NCCL_CLAIM_SEEN = 4 };
#define PP__NCCL_CLAIMS 4096      /* per ordered pair: how far one side's posts may run ahead of the other's */

typedef struct pp__nccl_ce_buffer {   /* a published buffer */
    uint64_t bytes;                   /* of the transfer: the second side checks its own against it */
    uint64_t buffer_id;               /* CU_POINTER_ATTRIBUTE_BUFFER_ID of its allocation (0: same process) */
    uint64_t base, offset;            /* the allocation's address in the publisher, the buffer's place in it */
    cudaIpcMemHandle_t handle;        /* the allocation's, for a peer in another process */
} pp__nccl_ce_buffer;

typedef struct pp__nccl_ce_claim {
    uint64_t word;                    /* (transfer << 3) | PP__NCCL_CLAIM_*; 0 before the first */
    uint64_t pad[3];
    pp__nccl_ce_buffer of[2];         /* [0] the receiver's, [1] the sender's: each side writes its own */
} pp__nccl_ce_claim;

typedef struct pp__nccl_ce_plan {     /* one copy-engine transfer of a group, once claimed */
    int how;                          /* PP__NCCL_CLAIM_PUSH, _PULL or _RING */
    CUdeviceptr remote;               /* the peer's buffer as mapped here (the side that copies) */
    int map;                          /* its entry in ce_maps, or -1 (one process, or no bytes) */
    uint64_t k;                       /* its first message */
} pp__nccl_ce_plan;

typedef struct pp__nccl_ce_map {      /* a peer's allocation, mapped here by CUDA IPC */
    int peer;
    uint64_t buffer_id;
    void *ptr;
    cudaEvent_t last_copy;            /* recorded after each copy through it */
    long long used;                   /* the post that last used it */
} pp__nccl_ce_map;

typedef struct pp__nccl_ce_export {   /* one of this rank's allocations, exported */
    uint64_t buffer_id, base;
    cudaIpcMemHandle_t handle;
} pp__nccl_ce_export;

/* A mark of a streamed send (output_ready): the first `bytes` of buf are written once the compute
 * stream passes `ev`. */
typedef struct pp__nccl_mark {
    const void *buf;
    size_t bytes;
    cudaEvent_t ev;
} pp__nccl_mark;

#define PP__NCCL_CE_MAPS 64
#define PP__NCCL_READY_HIST 64    /* how many posts back a receive may start from */

typedef struct pp__nccl_transport {
    pp_nccl *nc;
    cudaStream_t compute;
    cudaEvent_t ready;          /* recorded on the compute stream at this post: ready_hist[posts % N] */
    cudaEvent_t ready_hist[PP__NCCL_READY_HIST];   /* the last posts' points (pp_transfer.buf_free_posts) */
    cudaEvent_t coll_ready, coll_done;   /* a group collective's place on the compute stream, its end */
    pp__nccl_handle *handles;
    int num_handles;
    int recording;
    pp__nccl_record *records;
    int num_records, cap_records, used_records;
    pp__nccl_stage *stages;
    int num_stages;
    long long posts;            /* groups posted */
    /* the arrival gate (pp_nccl_transport_gate) */
    int gated, gate_called;
    uint64_t *gate_flags;       /* device [world]: gate_flags[p] = groups peer p has reached with us;
                                   peer p writes the low word (and the high word when the low one
                                   wraps), only our abort writes the high word otherwise */
    CUdeviceptr *gate_remote;   /* [world]: address of peer p's gate_flags[rank]; 0: p not gated */
    void **gate_opened;         /* [world]: IPC mappings to close */
    uint64_t *gate_count;       /* [world]: groups we have posted with p */
    CUresult (*wait64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
    CUresult (*write32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
    cudaStream_t gate_opener;   /* opens every gate (and copy-engine wait) on abort, beside streams
                                   that may sit on one */
    /* copy-engine transfers (pp_nccl_transport_copy_engine) */
    int ce_on, ce_called;
    int ce_via_host;            /* the rings and flags in pinned host memory, every transfer through
                                   them (pp_nccl_transport_copy_engine_via_host) */
    void *ce_host;              /* that memory of this rank as mapped here (ce_mem: its device address) */
    size_t ce_host_bytes;
    char ce_host_name[64];      /* its shared-memory name, unlinked once every peer has opened it */
    void **ce_peer_host;        /* [world]: p's, mapped and registered here (other processes) */
    size_t *ce_peer_host_bytes;
    int ce_collective;          /* set up on every rank: pp_nccl_transport_free meets the others */
    size_t ce_slot_bytes;
    int ce_slots;
    uint64_t ce_base;           /* the first count (config.test_count_base; 0) */
    unsigned char *ce_mem;      /* device: flags arrived[world], freed[world], then the rings */
    CUdeviceptr *ce_remote;     /* [world]: peer p's ce_mem as mapped here; 0: p goes through NCCL */
    void **ce_opened;           /* [world]: IPC mappings to close */
    size_t *ce_ring_here;       /* [world]: offset in ce_mem of the ring p writes into */
    size_t *ce_ring_there;      /* [world]: offset in p's ce_mem of the ring we write into */
    uint64_t *ce_sent;          /* [world]: messages pushed into p's ring */
    uint64_t *ce_taken;         /* [world]: messages taken from our ring of p */
    cudaStream_t ce_send, ce_recv;   /* ce_send: where a group's sends (one stream per peer) join */
    cudaStream_t *ce_send_to;   /* [world]: sends to p, in order (peers do not wait for each other) */
    cudaEvent_t *ce_join;       /* [world]: the end of a group's sends to p */
    cudaStream_t *ce_recv_from; /* [world]: receives from p, in order (peers do not wait for each other) */
    cudaEvent_t *ce_join_recv;  /* [world]: the end of a group's receives from p, for ce_recv */
    /* direct transfers: the claims (pp__nccl_ce_claim) */
    unsigned char *ce_seg;      /* this rank's segment: the claims of the pairs it receives in */
    size_t ce_seg_bytes;
    char ce_seg_name[64];       /* unlinked once every peer has opened it */
    void **ce_peer_seg;         /* [world]: p's segment mapped here */
    size_t *ce_peer_seg_bytes;
    pp__nccl_ce_claim **ce_claims_in;    /* [world]: claims of p -> this rank */
    pp__nccl_ce_claim **ce_claims_out;   /* [world]: claims of this rank -> p (in p's segment) */
    uint64_t *ce_xsent, *ce_xrecv;       /* [world]: transfers claimed with p, each way */
    uint32_t *ce_posted_high;   /* [world]: the high word last written into p's posted count of us */
    unsigned char *ce_same;     /* [world]: p is a thread of this process (pointers, no IPC) */
    unsigned char *ce_streamed; /* [world]: in the group being posted, every send to p streams */
    long long ce_streamed_sends;   /* copy-engine sends that streamed (pp_nccl_transport_streamed_sends) */
    pp__nccl_ce_plan *ce_plans;
    int ce_cap_plans;
    pp__nccl_ce_map *ce_maps;   /* the peers' allocations mapped here (PP__NCCL_CE_MAPS kept) */
    int ce_num_maps, ce_cap_maps;
    pp__nccl_ce_export ce_exports[PP__NCCL_CE_MAPS];
    int ce_num_exports, ce_export_next;
    CUresult (*attrs)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);
    long long ce_counts[3];     /* transfers this rank pushed or was pushed (receiver first), pulled, ringed */
    /* streamed sends (output_ready): each mark's buffer, bytes written and event on the compute
     * stream, in the order made; spare events to reuse */
    pp__nccl_mark *marks;
    int num_marks, cap_marks;
    cudaEvent_t *spare_events;
    int num_spare, cap_spare;
} pp__nccl_transport;

/* Handles are pointers into a pool made up front (see pp_nccl_transport): running out means
 * the executor holds an unreasonable number of groups at once. */
static pp_status pp__nccl_handle_get(pp__nccl_transport *t, pp__nccl_handle **out, pp_error *err)
{
    int i;
    for (i = 0; i < t->num_handles; i++)
        if (!t->handles[i].in_use) { t->handles[i].in_use = 1; *out = &t->handles[i]; return PP_OK; }
    return pp__nccl_fail(err, PP_ENOMEM, "post: more than %d groups in flight on rank %d", t->num_handles, t->nc->rank);
}

static pp_status pp__nccl_record_get(pp__nccl_transport *t, pp__nccl_record **out, pp_error *err)
{
    pp__nccl_record *rec;
    if (t->used_records == t->num_records) {
        if (t->num_records == t->cap_records) {
            int cap = t->cap_records ? 2 * t->cap_records : 64;
            pp__nccl_record *r = (pp__nccl_record *)realloc(t->records, sizeof *r * (size_t)cap);
            if (!r) return pp__nccl_fail(err, PP_ENOMEM, "post: out of memory for group records");
            t->records = r;
            t->cap_records = cap;
        }
        rec = &t->records[t->num_records];
        memset(rec, 0, sizeof *rec);
        if (cudaEventCreate(&rec->begin) != cudaSuccess || cudaEventCreate(&rec->end) != cudaSuccess ||
            cudaEventCreate(&rec->end_send) != cudaSuccess || cudaEventCreate(&rec->end_recv) != cudaSuccess)
            return pp__nccl_fail(err, PP_EIO, "post: cannot create timing events");
        t->num_records++;
    }
    rec = &t->records[t->used_records++];
    rec->sent = rec->received = 0;
    rec->streams = 0;
    rec->transfers = 0;
    rec->peer = -1;
    *out = rec;
    return PP_OK;
}

/* A send to this rank: copy its bytes into a staging buffer on the communication stream. */
static pp_status pp__nccl_self_send(pp__nccl_transport *t, const pp_transfer *x, pp_error *err)
{
    int i, slot = -1;
    cudaError_t e;
    for (i = 0; i < t->num_stages; i++)
        if (!t->stages[i].full && t->stages[i].cap >= x->bytes) { slot = i; break; }
    if (slot < 0) {
        for (i = 0; i < t->num_stages; i++) if (!t->stages[i].full) { slot = i; break; }
        if (slot < 0) {
            pp__nccl_stage *s = (pp__nccl_stage *)realloc(t->stages, sizeof *s * (size_t)(t->num_stages + 1));
            if (!s) return pp__nccl_fail(err, PP_ENOMEM, "post: out of memory");
            t->stages = s;
            slot = t->num_stages++;
            memset(&t->stages[slot], 0, sizeof t->stages[slot]);
        }
        if (t->stages[slot].cap < x->bytes) {
            /* The stream may still read the old buffer: free it in stream order. */
            if (t->stages[slot].data) {
                cudaStreamSynchronize(t->nc->stream);
                cudaFree(t->stages[slot].data);
                t->stages[slot].data = NULL;
            }
            e = cudaMalloc(&t->stages[slot].data, x->bytes ? x->bytes : 1);
            if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "post: staging buffer of a same-rank send");
            t->stages[slot].cap = x->bytes;
        }
    }
    if (x->bytes) {
        e = cudaMemcpyAsync(t->stages[slot].data, x->buf, x->bytes, cudaMemcpyDeviceToDevice, t->nc->stream);
        if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "post: same-rank send");
    }
    t->stages[slot].tag = x->tag;
    t->stages[slot].bytes = x->bytes;
    t->stages[slot].full = 1;
    return PP_OK;
}

static pp_status pp__nccl_self_recv(pp__nccl_transport *t, const pp_transfer *x, pp_error *err)
{
    int i;
    char tag[64];
    for (i = 0; i < t->num_stages; i++) {
        pp__nccl_stage *s = &t->stages[i];
        if (!s->full || s->tag != x->tag) continue;
        if (s->bytes != x->bytes)
            return pp__nccl_fail(err, PP_ETRANSPORT, "receive on rank %d from itself: %zu bytes sent, %zu expected",
                                 t->nc->rank, s->bytes, x->bytes);
        if (x->bytes) {
            cudaError_t e = cudaMemcpyAsync(x->buf, s->data, x->bytes, cudaMemcpyDeviceToDevice, t->nc->stream);
            if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "post: same-rank receive");
        }
        s->full = 0;   /* later copies into it are ordered after this one on the same stream */
        return PP_OK;
    }
    pp_transfer_tag_format(x->tag, tag, sizeof tag);
    return pp__nccl_fail(err, PP_EUNSUPPORTED, "receive %s on rank %d from itself: posted before its send "
                         "(same-rank neighbours are passed in place by the executor)", tag, t->nc->rank);
}

static void pp__nccl_gate_release(pp__nccl_transport *t);
static void pp__nccl_ce_release(pp__nccl_transport *t, int at_free);

/* A peer whose transfers go through the copy engines (pp_nccl_transport_copy_engine). */
static int pp__nccl_is_ce(const pp__nccl_transport *t, int p)
{
    return t->ce_on && t->ce_remote && t->ce_remote[p] != 0;
}

/* Writes a 64-bit count into a peer's flag from `stream`, without an SM: the low word every
 * time, the high word only when the low one wraps (once in 2^32: low first, so the count never
 * reads ahead of itself). Our abort writes our own flags' high words (see the gate's opener),
 * which the peers' writes leave alone. The write carries a memory fence: whatever the stream did
 * before it (a copy into the peer's ring) is visible to the peer once the count is. */
static CUresult pp__nccl_announce(const pp__nccl_transport *t, cudaStream_t stream, CUdeviceptr flag, uint64_t count)
{
    CUresult r = t->write32((CUstream)stream, flag, (cuuint32_t)count, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r == CUDA_SUCCESS && (uint32_t)count == 0)
        r = t->write32((CUstream)stream, flag + 4, (cuuint32_t)(count >> 32), CU_STREAM_WRITE_VALUE_DEFAULT);
    return r;
}

/* The same for a count that skips values (posted counts: only pushed messages write one), so
 * the value whose low word wraps may never be written: the high word goes whenever it differs
 * from the last one written into this flag (*high_written), low word first as above. */
static CUresult pp__nccl_announce_sparse(const pp__nccl_transport *t, cudaStream_t stream, CUdeviceptr flag,
                                         uint64_t count, uint32_t *high_written)
{
    CUresult r = t->write32((CUstream)stream, flag, (cuuint32_t)count, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r == CUDA_SUCCESS && (uint32_t)(count >> 32) != *high_written) {
        r = t->write32((CUstream)stream, flag + 4, (cuuint32_t)(count >> 32), CU_STREAM_WRITE_VALUE_DEFAULT);
        *high_written = (uint32_t)(count >> 32);
    }
    return r;
}

/* The arrival gate: announce this group to every gated peer in it first, then wait (on the
 * communication stream, no SM) until each has announced its matching group. All announcements
 * go out before any wait: a rank that waited on its first peer before announcing to its second
 * could close a ring of waits among three ranks (a valid pp=3 order whose groups list the
 * receive first does), where NCCL's own group, launched whole, never waits so.
 * Announcements are counted per peer: our n-th group with p meets p's n-th group with us. A
 * peer that appears twice in one group is announced once. Copy-engine peers are not NCCL's and
 * pass no gate (both sides skip them alike). */
static int pp__nccl_first_of_peer(const pp_transfer *x, int i)
{
    int j;
    for (j = 0; j < i; j++) if (x[j].peer == x[i].peer) return 0;
    return 1;
}

static int pp__nccl_gated_here(const pp__nccl_transport *t, const pp_transfer *x, int i)
{
    int p = x[i].peer;
    return p != t->nc->rank && t->gate_remote[p] && !pp__nccl_is_ce(t, p) && pp__nccl_first_of_peer(x, i);
}

/* The flags are 64-bit (pp__nccl_announce). A peer that is alive but behind and announces after
 * our abort cannot pull the flag back under a wait that is still queued, unless that late
 * announcement is the one where its low word wraps (once in 2^32 groups with this peer): that
 * one rewrites the high word. The waits compare cyclically over 64 bits,
 * (int64_t)(flag - count) >= 0. */
static pp_status pp__nccl_gate_pass(pp__nccl_transport *t, const pp_transfer *x, int count, pp_error *err)
{
    pp_nccl *nc = t->nc;
    int i;
    CUresult r = CUDA_SUCCESS;
    for (i = 0; i < count && r == CUDA_SUCCESS; i++) {
        int p = x[i].peer;
        if (!pp__nccl_gated_here(t, x, i)) continue;
        r = pp__nccl_announce(t, nc->stream, t->gate_remote[p], t->gate_count[p] + 1);
        if (r == CUDA_SUCCESS) t->gate_count[p]++;
    }
    for (i = 0; i < count && r == CUDA_SUCCESS; i++) {
        int p = x[i].peer;
        if (!pp__nccl_gated_here(t, x, i)) continue;
        r = t->wait64((CUstream)nc->stream, (CUdeviceptr)(uintptr_t)(t->gate_flags + p), t->gate_count[p],
                      CU_STREAM_WAIT_VALUE_GEQ);
    }
    if (r != CUDA_SUCCESS)
        return pp__nccl_fail(err, PP_EIO, "post: arrival gate: stream memory operation failed (CUresult %d)", (int)r);
    return PP_OK;
}

/* Copy-engine transfers: three counts per ordered pair and direction, 64-bit flags written and
 * waited for by stream memory operations (no SM), counted in messages (a direct transfer is one
 * message, a ring transfer one per slot it fills). In the receiver's memory: arrived[s] (the
 * sender's data is in place: pushed into the receive buffer or a ring slot, or, for a pull, ready
 * in the send buffer). In the sender's memory: freed[r] (the receiver is done with the message:
 * pushed data seen, pulled, or copied out of its slot) and posted[r] (the receive buffer is
 * free: the sender may push). Message k of each way of a transfer:
 *   push (receiver first)  receiver: posted = k+1; wait arrived >= k+1; freed = k+1
 *                          sender:   wait posted >= k+1; copy into the receive buffer; arrived = k+1
 *   pull (sender first)    sender:   arrived = k+1; wait freed >= k+1 (the send buffer is read)
 *                          receiver: wait arrived >= k+1; copy out of the send buffer; freed = k+1
 *   ring (a buffer that cannot be shared): a ring of `slots` slots of `slot_bytes` in the
 *   receiver's memory; per slot-sized piece k
 *                          sender:   wait freed >= k-slots+1; copy into slot k % slots; arrived = k+1
 *                          receiver: wait arrived >= k+1; copy the slot out (a local copy, which
 *                                    CUDA may run as a kernel that waits for the receiver's GEMM); freed = k+1
 * The push and the pull are the one copy of the transfer, over NVLink on a copy engine. Each
 * peer's sends and each peer's receives have a stream of their own, so a transfer waits only for
 * what NCCL's matched groups wait for (a send for its receive, the transfers with one peer in
 * order) and never for another peer's: every order that runs on NCCL runs here. A group's
 * posted counts go out before any of its receives waits, as the arrival gate's announcements do. */

/* A copy, with CUDA >= 12.8's hint to leave the SMs to compute (cudaMemcpyBatchAsync,
 * cudaMemcpyFlagPreferOverlapWithCompute). A copy to or from a peer runs on a copy engine either
 * way; a local device-to-device copy may still run as a kernel, and the hint costs nothing. */
static cudaError_t pp__nccl_ce_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream)
{
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12080
    struct cudaMemcpyAttributes attr;
    size_t first = 0;
    void *dsts[1];
    const void *srcs[1];
    size_t sizes[1];
    memset(&attr, 0, sizeof attr);
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.srcLocHint.type = cudaMemLocationTypeDevice;
    attr.dstLocHint.type = cudaMemLocationTypeDevice;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    dsts[0] = dst; srcs[0] = src; sizes[0] = bytes;
#if CUDART_VERSION >= 13000
    return cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &first, 1, stream);
#else
    {
        size_t fail_index = 0;
        return cudaMemcpyBatchAsync(dsts, (void **)srcs, sizes, 1, &attr, &first, 1, &fail_index, stream);
    }
#endif
#else
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
#endif
}

/* A copy into or out of a ring: between device memory and pinned host memory when the rings are
 * in the host's (both run on a copy engine, over PCIe). */
static cudaError_t pp__nccl_ring_copy(const pp__nccl_transport *t, void *dst, const void *src, size_t bytes,
                                      cudaStream_t stream)
{
    return t->ce_via_host ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream)
                          : pp__nccl_ce_copy(dst, src, bytes, stream);
}

static cudaStream_t pp__nccl_stream_of(const pp__nccl_transport *t, int on)
{
    return on == PP__NCCL_ON_CE_SEND ? t->ce_send : on == PP__NCCL_ON_CE_RECV ? t->ce_recv : t->nc->stream;
}

/* The flags of this rank's memory, and their addresses in a peer's. */
static CUdeviceptr pp__nccl_ce_flag(const pp__nccl_transport *t, int which, int p)
{
    return (CUdeviceptr)(uintptr_t)((uint64_t *)t->ce_mem + (size_t)which * (size_t)t->nc->world + (size_t)p);
}

static CUdeviceptr pp__nccl_ce_flag_there(const pp__nccl_transport *t, int which, int p)
{
    return t->ce_remote[p] + 8 * ((CUdeviceptr)which * (CUdeviceptr)t->nc->world + (CUdeviceptr)t->nc->rank);
}

enum { PP__NCCL_ARRIVED = 0, PP__NCCL_FREED = 1, PP__NCCL_POSTED = 2 };

/* Publishes this rank's buffer of a transfer with p into its half of the claim: 1 where the peer
 * can copy to or from it, 0 where it cannot (the ring then carries the transfer). Threads of one
 * process pass the pointer; other processes the allocation's CUDA IPC handle (made once per
 * allocation), which needs memory from cudaMalloc (IS_LEGACY_CUDA_IPC_CAPABLE). */
static int pp__nccl_ce_publish(pp__nccl_transport *t, int p, const void *buf, size_t bytes, pp__nccl_ce_buffer *b)
{
    CUpointer_attribute which[3] = { CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                     CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE };
    uint64_t id = 0, base = 0, capable = 0;   /* zeroed: the driver writes 1 to 8 bytes of each */
    void *data[3];
    int i;
    b->bytes = bytes;
    b->buffer_id = 0;
    b->base = (uint64_t)(uintptr_t)buf;
    b->offset = 0;
    if (t->ce_via_host) return 0;   /* every transfer through the rings in host memory, off the GPUs' links */
    if (t->ce_same[p] || bytes == 0) return 1;
    data[0] = &id; data[1] = &base; data[2] = &capable;
    if (!t->attrs || t->attrs(3, which, data, (CUdeviceptr)(uintptr_t)buf) != CUDA_SUCCESS || !id || !base || !capable ||
        base > (uint64_t)(uintptr_t)buf) {
        (void)cudaGetLastError();
        return 0;
    }
    b->buffer_id = id;
    b->base = base;
    b->offset = (uint64_t)(uintptr_t)buf - base;
    for (i = 0; i < t->ce_num_exports; i++)
        if (t->ce_exports[i].buffer_id == id) { b->handle = t->ce_exports[i].handle; return 1; }
    i = t->ce_num_exports < PP__NCCL_CE_MAPS ? t->ce_num_exports++ : t->ce_export_next++ % PP__NCCL_CE_MAPS;
    if (cudaIpcGetMemHandle(&t->ce_exports[i].handle, (void *)(uintptr_t)base) != cudaSuccess) {
        t->ce_exports[i].buffer_id = 0;
        (void)cudaGetLastError();
        return 0;
    }
    t->ce_exports[i].buffer_id = id;
    t->ce_exports[i].base = base;
    b->handle = t->ce_exports[i].handle;
    return 1;
}

/* The peer's published buffer, mapped here: its pointer in one process, else its allocation
 * opened once by CUDA IPC and kept. Past PP__NCCL_CE_MAPS mappings, the least recently used one
 * whose last copy has ended (an event, queried: the host never waits here) and that this post
 * does not use is closed; when none has, the table grows. *map gets the entry (-1: none). */
static pp_status pp__nccl_ce_map_buffer(pp__nccl_transport *t, int p, const pp__nccl_ce_buffer *b, CUdeviceptr *out,
                                        int *map, pp_error *err)
{
    pp_nccl *nc = t->nc;
    pp__nccl_ce_map *m = NULL;
    cudaError_t e;
    int i, before = -1, slot = -1;
    *map = -1;
    if (t->ce_same[p] || b->bytes == 0) { *out = (CUdeviceptr)(b->base + b->offset); return PP_OK; }
    for (i = 0; i < t->ce_num_maps; i++)
        if (t->ce_maps[i].ptr && t->ce_maps[i].peer == p && t->ce_maps[i].buffer_id == b->buffer_id) { slot = i; break; }
    if (slot < 0) {
        for (i = 0; i < t->ce_num_maps && slot < 0; i++) if (!t->ce_maps[i].ptr) slot = i;   /* a failed open's */
        if (slot < 0 && t->ce_num_maps >= PP__NCCL_CE_MAPS)
            for (i = 0; i < t->ce_num_maps; i++) {
                pp__nccl_ce_map *c = &t->ce_maps[i];
                if (c->used >= t->posts || (slot >= 0 && c->used >= t->ce_maps[slot].used)) continue;
                if (c->last_copy && cudaEventQuery(c->last_copy) != cudaSuccess) { (void)cudaGetLastError(); continue; }
                slot = i;
            }
        if (slot >= 0 && t->ce_maps[slot].ptr) {
            cudaIpcCloseMemHandle(t->ce_maps[slot].ptr);
            t->ce_maps[slot].ptr = NULL;
        }
        if (slot < 0) {
            if (t->ce_num_maps == t->ce_cap_maps) {
                int cap = t->ce_cap_maps ? 2 * t->ce_cap_maps : PP__NCCL_CE_MAPS;
                pp__nccl_ce_map *grown = (pp__nccl_ce_map *)realloc(t->ce_maps, sizeof *grown * (size_t)cap);
                if (!grown) return pp__nccl_fail(err, PP_ENOMEM, "post: copy engines: out of memory for mappings");
                t->ce_maps = grown;
                t->ce_cap_maps = cap;
            }
            slot = t->ce_num_maps++;
            memset(&t->ce_maps[slot], 0, sizeof t->ce_maps[slot]);
        }
        m = &t->ce_maps[slot];
        if (cudaGetDevice(&before) != cudaSuccess) before = -1;
        e = cudaSetDevice(nc->device);
        if (e == cudaSuccess && !m->last_copy) e = cudaEventCreateWithFlags(&m->last_copy, cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaIpcOpenMemHandle(&m->ptr, b->handle, cudaIpcMemLazyEnablePeerAccess);
        if (before >= 0) cudaSetDevice(before);
        if (e != cudaSuccess) {
            m->ptr = NULL;
            return pp__nccl_cuda_fail(err, e, "post: copy engines: cudaIpcOpenMemHandle of the peer's buffer");
        }
        m->peer = p;
        m->buffer_id = b->buffer_id;
    }
    m = &t->ce_maps[slot];
    m->used = t->posts;
    *map = slot;
    *out = (CUdeviceptr)(uintptr_t)m->ptr + (CUdeviceptr)b->offset;
    return PP_OK;
}

/* Claims this rank's next transfer with x->peer (see pp__nccl_ce_claim): finds how it goes and
 * its first message. A claim is free again once the other side has seen it; a rank that has run
 * PP__NCCL_CLAIMS transfers ahead of its peer finds its own unseen claim there and waits (within
 * the deadline) for the peer's posts to catch up. */
static pp_status pp__nccl_ce_claim_next(pp__nccl_transport *t, const pp_transfer *x, pp__nccl_ce_plan *pl, pp_error *err)
{
    pp_nccl *nc = t->nc;
    int p = x->peer, side = x->is_send ? 1 : 0, polls = 0;
    int mine = x->is_send ? PP__NCCL_CLAIM_PULL : PP__NCCL_CLAIM_PUSH;
    uint64_t *counter = x->is_send ? &t->ce_xsent[p] : &t->ce_xrecv[p];
    uint64_t n = *counter;
    pp__nccl_ce_claim *c = &(x->is_send ? t->ce_claims_out[p] : t->ce_claims_in[p])[n % PP__NCCL_CLAIMS];
    double deadline = 0;
    pp_status st;
    pl->remote = 0;
    pl->map = -1;
    for (;;) {
        uint64_t w = __atomic_load_n(&c->word, __ATOMIC_ACQUIRE), j = w >> 3;
        int h = (int)(w & 7);
        if (h >= PP__NCCL_CLAIM_PUSH && h <= PP__NCCL_CLAIM_RING && j == n) {   /* the peer posted first */
            const pp__nccl_ce_buffer *theirs = &c->of[1 - side];
            if (h == mine)
                return pp__nccl_fail(err, PP_ETRANSPORT, "post: copy engines: transfer %llu between ranks %d and %d: "
                                     "both sides claimed it alike (claims out of step)", (unsigned long long)n,
                                     nc->rank, p);
            if (theirs->bytes != (uint64_t)x->bytes)
                return pp__nccl_fail(err, PP_ETRANSPORT, "post: copy engines: transfer %llu %s rank %d: %llu bytes %s, "
                                     "%zu bytes %s here (each receive must name its send's size)", (unsigned long long)n,
                                     x->is_send ? "to" : "from", p, (unsigned long long)theirs->bytes,
                                     x->is_send ? "expected by the receive" : "sent", x->bytes,
                                     x->is_send ? "sent" : "expected");
            if (h != PP__NCCL_CLAIM_RING && (st = pp__nccl_ce_map_buffer(t, p, theirs, &pl->remote, &pl->map, err)) != PP_OK)
                return st;
            pl->how = h;
            __atomic_store_n(&c->word, (n << 3) | PP__NCCL_CLAIM_SEEN, __ATOMIC_RELEASE);
            break;
        }
        if (h >= PP__NCCL_CLAIM_PUSH && h <= PP__NCCL_CLAIM_RING && j < n) {   /* our own claim, not seen yet */
            double now = pp__nccl_now();
            if (nc->aborted) return pp__nccl_aborted(nc, err, "post");
            if ((st = pp__nccl_health(nc, "post", err)) != PP_OK) return st;
            if (deadline == 0) deadline = now + nc->timeout_s;
            if (now > deadline)
                return pp__nccl_fail(err, PP_ETIMEOUT, "post: copy engines: rank %d is %d transfers ahead of rank %d's "
                                     "posts and waited %.1f s for them", nc->rank, PP__NCCL_CLAIMS, p, nc->timeout_s);
            pp__nccl_pause(&polls);
            continue;
        }
        if (j > n || h > PP__NCCL_CLAIM_SEEN || (h == PP__NCCL_CLAIM_SEEN && j == n))
            return pp__nccl_fail(err, PP_ETRANSPORT, "post: copy engines: transfer %llu between ranks %d and %d: claim "
                                 "%llu/%d found (claims out of step)", (unsigned long long)n, nc->rank, p,
                                 (unsigned long long)j, h);
        {   /* free: publish our buffer, then claim (the peer may claim at the same moment) */
            int how = pp__nccl_ce_publish(t, p, x->buf, x->bytes, &c->of[side]) ? mine : PP__NCCL_CLAIM_RING;
            if (__atomic_compare_exchange_n(&c->word, &w, (n << 3) | (uint64_t)how, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                pl->how = how;
                break;
            }
        }
    }
    *counter = n + 1;
    pl->k = x->is_send ? t->ce_sent[p] : t->ce_taken[p];
    {
        uint64_t messages = pl->how != PP__NCCL_CLAIM_RING ? 1
                          : (uint64_t)((x->bytes + t->ce_slot_bytes - 1) / t->ce_slot_bytes);
        if (x->is_send) t->ce_sent[p] += messages; else t->ce_taken[p] += messages;
    }
    t->ce_counts[pl->how - 1]++;
    return PP_OK;
}

/* --- streamed sends (output_ready) --- */

#define PP__NCCL_MAX_MARKS 4096   /* marks made and not yet used up by a send */

/* Forgets buf's marks; their events go back to the spares (an event captured by a stream wait
 * may be recorded again at once). */
static void pp__nccl_marks_drop(pp__nccl_transport *t, const void *buf)
{
    int i, n = 0;
    for (i = 0; i < t->num_marks; i++) {
        if (t->marks[i].buf != buf) { t->marks[n++] = t->marks[i]; continue; }
        if (t->num_spare == t->cap_spare) {
            int cap = t->cap_spare ? 2 * t->cap_spare : 16;
            cudaEvent_t *grown = (cudaEvent_t *)realloc(t->spare_events, sizeof *grown * (size_t)cap);
            if (!grown) { cudaEventDestroy(t->marks[i].ev); continue; }
            t->spare_events = grown;
            t->cap_spare = cap;
        }
        t->spare_events[t->num_spare++] = t->marks[i].ev;
    }
    t->num_marks = n;
}

static pp_status pp__nccl_output_ready(void *user, const void *buf, size_t bytes, int first, pp_error *err)
{
    pp__nccl_transport *t = (pp__nccl_transport *)user;
    cudaEvent_t ev;
    cudaError_t e;
    if (!buf || !bytes) return pp__nccl_fail(err, PP_EINVAL, "output_ready: buf and bytes must not be 0");
    if (t->nc->aborted) return pp__nccl_aborted(t->nc, err, "output_ready");
    if (first) pp__nccl_marks_drop(t, buf);
    if (t->num_marks == PP__NCCL_MAX_MARKS)
        return pp__nccl_fail(err, PP_EINVAL, "output_ready: more than %d marks that no send has used up",
                             PP__NCCL_MAX_MARKS);
    if (t->num_marks == t->cap_marks) {
        int cap = t->cap_marks ? 2 * t->cap_marks : 16;
        pp__nccl_mark *grown = (pp__nccl_mark *)realloc(t->marks, sizeof *grown * (size_t)cap);
        if (!grown) return pp__nccl_fail(err, PP_ENOMEM, "output_ready: out of memory");
        t->marks = grown;
        t->cap_marks = cap;
    }
    if (t->num_spare) ev = t->spare_events[--t->num_spare];
    else if ((e = cudaEventCreate(&ev)) != cudaSuccess)   /* timed: the last mark may begin a group's time */
        return pp__nccl_cuda_fail(err, e, "output_ready");
    if ((e = cudaEventRecord(ev, t->compute)) != cudaSuccess) {
        cudaEventDestroy(ev);
        return pp__nccl_cuda_fail(err, e, "output_ready");
    }
    t->marks[t->num_marks].buf = buf;
    t->marks[t->num_marks].bytes = bytes;
    t->marks[t->num_marks].ev = ev;
    t->num_marks++;
    return pp__nccl_ok(err);
}

/* The event after which the first `end` bytes of buf are written: its first mark that covers
 * them, else NULL (the whole compute: t->ready). */
static cudaEvent_t pp__nccl_mark_for(const pp__nccl_transport *t, const void *buf, size_t end)
{
    int i;
    for (i = 0; i < t->num_marks; i++)
        if (t->marks[i].buf == buf && t->marks[i].bytes >= end) return t->marks[i].ev;
    return NULL;
}

/* Whether a copy-engine send streams: posted with parts and its buffer marked; pushed or through
 * the ring, part by part; pulled (the receiver's copy engine reads the buffer), once a mark
 * covers the whole buffer (the work issued after it, such as a backward's weight gradients, no
 * longer holds the pull back). */
static int pp__nccl_streams(const pp__nccl_transport *t, const pp_transfer *x, const pp__nccl_ce_plan *pl)
{
    int i;
    if (!x->is_send || !x->parts) return 0;
    if (pl->how == PP__NCCL_CLAIM_PULL) return pp__nccl_mark_for(t, x->buf, x->bytes) != NULL;
    for (i = 0; i < t->num_marks; i++) if (t->marks[i].buf == x->buf) return 1;
    return 0;
}

/* A streamed group's time begins where its sends were whole: the last of their marks that cover
 * them, whose event takes the record's place (*begin goes to the marks, and from there to the
 * spares); -1 if some send's last bytes wait for the whole compute (the post's point). */
static int pp__nccl_whole_mark(const pp__nccl_transport *t, const pp_transfer *x, int count, int p)
{
    int i, j, last = -1;
    for (i = 0; i < count; i++) {
        int cover = -1;
        if (!x[i].is_send || x[i].peer != p) continue;
        for (j = 0; j < t->num_marks && cover < 0; j++)
            if (t->marks[j].buf == x[i].buf && t->marks[j].bytes >= x[i].bytes) cover = j;
        if (cover < 0) return -1;
        if (cover > last) last = cover;
    }
    return last;
}

/* Streamed: the send stream waits, before the bytes [.., end) of x go, for the mark that covers
 * them (or the whole compute); *at is the event it last waited for. */
static cudaError_t pp__nccl_wait_written(const pp__nccl_transport *t, cudaStream_t s, const pp_transfer *x, size_t end,
                                         cudaEvent_t *at)
{
    cudaEvent_t need = pp__nccl_mark_for(t, x->buf, end);
    if (!need) need = t->ready;
    if (need == *at) return cudaSuccess;
    *at = need;
    return cudaStreamWaitEvent(s, need, 0);
}

/* A send's device work, on its peer's send stream (see above). streamed: each part goes once it
 * is written (pp__nccl_streams); else the stream already waits for the whole compute. */
static pp_status pp__nccl_ce_send(pp__nccl_transport *t, const pp_transfer *x, const pp__nccl_ce_plan *pl, int streamed,
                                  pp_error *err)
{
    int p = x->peer;
    cudaEvent_t at = NULL;
    cudaStream_t s = t->ce_send_to[p];
    CUstream cs = (CUstream)s;
    CUdeviceptr arrived = pp__nccl_ce_flag_there(t, PP__NCCL_ARRIVED, p);
    CUresult r = CUDA_SUCCESS;
    cudaError_t e = cudaSuccess;
    uint64_t k = pl->k;
    if (pl->how == PP__NCCL_CLAIM_PUSH) {
        size_t off = 0;
        r = t->wait64(cs, pp__nccl_ce_flag(t, PP__NCCL_POSTED, p), k + 1, CU_STREAM_WAIT_VALUE_GEQ);
        while (r == CUDA_SUCCESS && e == cudaSuccess && streamed && off < x->bytes) {   /* a copy per part */
            int i;
            size_t end = x->bytes;
            for (i = 0; i < t->num_marks; i++)   /* the next mark (a buffer's marks grow) */
                if (t->marks[i].buf == x->buf && t->marks[i].bytes > off) {
                    if (t->marks[i].bytes < end) end = t->marks[i].bytes;
                    break;
                }
            e = pp__nccl_wait_written(t, s, x, end, &at);
            if (e == cudaSuccess)
                e = pp__nccl_ce_copy((void *)(uintptr_t)(pl->remote + off), (const char *)x->buf + off, end - off, s);
            off = end;
        }
        if (r == CUDA_SUCCESS && e == cudaSuccess && !streamed && x->bytes)
            e = pp__nccl_ce_copy((void *)(uintptr_t)pl->remote, x->buf, x->bytes, s);
        if (r == CUDA_SUCCESS && e == cudaSuccess && pl->map >= 0) e = cudaEventRecord(t->ce_maps[pl->map].last_copy, s);
        if (r == CUDA_SUCCESS && e == cudaSuccess) r = pp__nccl_announce(t, s, arrived, k + 1);
    } else if (pl->how == PP__NCCL_CLAIM_PULL) {
        if (streamed) e = pp__nccl_wait_written(t, s, x, x->bytes, &at);   /* whole: its covering mark */
        if (e == cudaSuccess) r = pp__nccl_announce(t, s, arrived, k + 1);
        if (r == CUDA_SUCCESS) r = t->wait64(cs, pp__nccl_ce_flag(t, PP__NCCL_FREED, p), k + 1, CU_STREAM_WAIT_VALUE_GEQ);
    } else {
        size_t off = 0;
        CUdeviceptr ring = t->ce_remote[p] + t->ce_ring_there[p];
        for (; off < x->bytes && r == CUDA_SUCCESS && e == cudaSuccess; k++) {
            size_t n = x->bytes - off < t->ce_slot_bytes ? x->bytes - off : t->ce_slot_bytes;
            size_t slot = (size_t)((k - t->ce_base) % (uint64_t)t->ce_slots);
            if (k - t->ce_base >= (uint64_t)t->ce_slots)
                r = t->wait64(cs, pp__nccl_ce_flag(t, PP__NCCL_FREED, p), k - (uint64_t)t->ce_slots + 1,
                              CU_STREAM_WAIT_VALUE_GEQ);
            if (r == CUDA_SUCCESS && streamed) e = pp__nccl_wait_written(t, s, x, off + n, &at);
            if (r == CUDA_SUCCESS && e == cudaSuccess)
                e = pp__nccl_ring_copy(t, (void *)(uintptr_t)(ring + slot * t->ce_slot_bytes), (const char *)x->buf + off,
                                       n, s);
            if (r == CUDA_SUCCESS && e == cudaSuccess) r = pp__nccl_announce(t, s, arrived, k + 1);
            off += n;
        }
    }
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "post: copy-engine send");
    if (r != CUDA_SUCCESS)
        return pp__nccl_fail(err, PP_EIO, "post: copy-engine send: stream memory operation failed (CUresult %d)", (int)r);
    return PP_OK;
}

/* A receive's device work, on its peer's receive stream; its posted count (a push) went out before. */
static pp_status pp__nccl_ce_recv(pp__nccl_transport *t, const pp_transfer *x, const pp__nccl_ce_plan *pl, pp_error *err)
{
    int p = x->peer;
    cudaStream_t s = t->ce_recv_from[p];
    CUstream cs = (CUstream)s;
    CUdeviceptr freed = pp__nccl_ce_flag_there(t, PP__NCCL_FREED, p), arrived = pp__nccl_ce_flag(t, PP__NCCL_ARRIVED, p);
    CUresult r = CUDA_SUCCESS;
    cudaError_t e = cudaSuccess;
    uint64_t k = pl->k;
    if (pl->how != PP__NCCL_CLAIM_RING) {
        r = t->wait64(cs, arrived, k + 1, CU_STREAM_WAIT_VALUE_GEQ);
        if (r == CUDA_SUCCESS && pl->how == PP__NCCL_CLAIM_PULL && x->bytes)
            e = pp__nccl_ce_copy(x->buf, (const void *)(uintptr_t)pl->remote, x->bytes, s);
        if (r == CUDA_SUCCESS && e == cudaSuccess && pl->map >= 0) e = cudaEventRecord(t->ce_maps[pl->map].last_copy, s);
        if (r == CUDA_SUCCESS && e == cudaSuccess) r = pp__nccl_announce(t, s, freed, k + 1);
    } else {
        size_t off = 0;
        for (; off < x->bytes && r == CUDA_SUCCESS && e == cudaSuccess; k++) {
            size_t n = x->bytes - off < t->ce_slot_bytes ? x->bytes - off : t->ce_slot_bytes;
            size_t slot = (size_t)((k - t->ce_base) % (uint64_t)t->ce_slots);
            r = t->wait64(cs, arrived, k + 1, CU_STREAM_WAIT_VALUE_GEQ);
            if (r == CUDA_SUCCESS)
                e = pp__nccl_ring_copy(t, (char *)x->buf + off, t->ce_mem + t->ce_ring_here[p] + slot * t->ce_slot_bytes,
                                       n, s);
            if (r == CUDA_SUCCESS && e == cudaSuccess) r = pp__nccl_announce(t, s, freed, k + 1);
            off += n;
        }
    }
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "post: copy-engine receive");
    if (r != CUDA_SUCCESS)
        return pp__nccl_fail(err, PP_EIO, "post: copy-engine receive: stream memory operation failed (CUresult %d)", (int)r);
    return PP_OK;
}

/* Where a group's copy-engine receives may start on the compute stream: this post's point, or
 * an earlier post's when every one of their buffers has been free since (buf_free_posts), so
 * that the data can land while the compute issued since runs: a receive posted right before its
 * consumer otherwise starts only when the compute before it has ended, and its copy is exposed. */
static cudaEvent_t pp__nccl_recv_ready(const pp__nccl_transport *t, const pp_transfer *x, int count)
{
    long long back = PP__NCCL_READY_HIST - 1;
    int i;
    if (back > t->posts) back = t->posts;
    for (i = 0; i < count; i++)
        if (!x[i].is_send && x[i].peer != t->nc->rank && pp__nccl_is_ce(t, x[i].peer) && x[i].buf_free_posts < back)
            back = x[i].buf_free_posts < 0 ? 0 : x[i].buf_free_posts;
    return t->ready_hist[(t->posts - back) % PP__NCCL_READY_HIST];
}

/* Whether the group has a copy-engine transfer with p, in the direction given. */
static int pp__nccl_ce_with(const pp__nccl_transport *t, const pp_transfer *x, int count, int p, int is_send)
{
    int i;
    if (p == t->nc->rank || !pp__nccl_is_ce(t, p)) return 0;
    for (i = 0; i < count; i++) if (x[i].peer == p && x[i].is_send == is_send) return 1;
    return 0;
}

/* A group's copy-engine transfers: every claim first (host); then, on each peer's streams, the
 * sends, the receives' posted counts and the receives; the peers' streams join ce_send and
 * ce_recv. Sends start at this post's point of the compute stream, or, where every send to a
 * peer streams (pp__nccl_streams), each part at its mark; receives at recv_ready (see
 * pp__nccl_recv_ready). Any failure once a claim is made leaves the pair out of step for good:
 * the caller aborts. */
static pp_status pp__nccl_ce_group(pp__nccl_transport *t, const pp_transfer *x, int count, cudaEvent_t recv_ready,
                                   cudaEvent_t *begin, pp_error *err)
{
    pp_nccl *nc = t->nc;
    pp__nccl_ce_plan *pl;
    pp_status st = PP_OK;
    cudaError_t e = cudaSuccess;
    CUresult r = CUDA_SUCCESS;
    int i, p;
    if (count > t->ce_cap_plans) {
        pp__nccl_ce_plan *grown = (pp__nccl_ce_plan *)realloc(t->ce_plans, sizeof *grown * (size_t)count);
        if (!grown) return pp__nccl_fail(err, PP_ENOMEM, "post: out of memory");
        t->ce_plans = grown;
        t->ce_cap_plans = count;
    }
    pl = t->ce_plans;
    for (i = 0; i < count && st == PP_OK; i++)
        if (x[i].peer != nc->rank && pp__nccl_is_ce(t, x[i].peer)) st = pp__nccl_ce_claim_next(t, &x[i], &pl[i], err);
    if (st != PP_OK) return st;
    for (p = 0; p < nc->world && e == cudaSuccess; p++) {
        int sends = pp__nccl_ce_with(t, x, count, p, 1), recvs = pp__nccl_ce_with(t, x, count, p, 0), streamed = sends;
        for (i = 0; i < count && streamed; i++)
            if (x[i].is_send && x[i].peer == p) streamed = pp__nccl_streams(t, &x[i], &pl[i]);
        if (sends && !streamed) e = cudaStreamWaitEvent(t->ce_send_to[p], t->ready, 0);
        if (e == cudaSuccess && recvs) e = cudaStreamWaitEvent(t->ce_recv_from[p], recv_ready, 0);
        /* a group of one peer (begin given): its time starts on that peer's first stream; streamed,
         * where its sends were whole (below), whose parts may have left before */
        if (e == cudaSuccess && begin && (sends || recvs) && !streamed)
            e = cudaEventRecord(*begin, sends ? t->ce_send_to[p] : t->ce_recv_from[p]);
        t->ce_streamed[p] = (unsigned char)streamed;
    }
    for (i = 0; i < count && st == PP_OK && e == cudaSuccess; i++)
        if (x[i].is_send && x[i].peer != nc->rank && pp__nccl_is_ce(t, x[i].peer)) {
            st = pp__nccl_ce_send(t, &x[i], &pl[i], t->ce_streamed[x[i].peer], err);
            t->ce_streamed_sends += t->ce_streamed[x[i].peer];
        }
    for (p = 0; p < nc->world && begin && st == PP_OK && e == cudaSuccess; p++) {
        int m;
        if (!t->ce_streamed[p]) continue;
        if ((m = pp__nccl_whole_mark(t, x, count, p)) < 0) {
            e = cudaEventRecord(*begin, t->compute);   /* the post's point: the whole compute */
        } else {   /* the sends' waits are queued: the mark's event may change hands */
            cudaEvent_t ev = t->marks[m].ev;
            t->marks[m].ev = *begin;
            *begin = ev;
        }
    }
    for (i = 0; i < count && st == PP_OK && e == cudaSuccess && r == CUDA_SUCCESS; i++) {
        p = x[i].peer;
        if (x[i].is_send || p == nc->rank || !pp__nccl_is_ce(t, p) || pl[i].how != PP__NCCL_CLAIM_PUSH) continue;
        r = pp__nccl_announce_sparse(t, t->ce_recv_from[p], pp__nccl_ce_flag_there(t, PP__NCCL_POSTED, p), pl[i].k + 1,
                                     &t->ce_posted_high[p]);
    }
    for (i = 0; i < count && st == PP_OK && e == cudaSuccess && r == CUDA_SUCCESS; i++)
        if (!x[i].is_send && x[i].peer != nc->rank && pp__nccl_is_ce(t, x[i].peer)) st = pp__nccl_ce_recv(t, &x[i], &pl[i], err);
    for (p = 0; p < nc->world && st == PP_OK && e == cudaSuccess && r == CUDA_SUCCESS; p++) {
        if (pp__nccl_ce_with(t, x, count, p, 1)) {
            e = cudaEventRecord(t->ce_join[p], t->ce_send_to[p]);
            if (e == cudaSuccess) e = cudaStreamWaitEvent(t->ce_send, t->ce_join[p], 0);
        }
        if (e == cudaSuccess && pp__nccl_ce_with(t, x, count, p, 0)) {
            e = cudaEventRecord(t->ce_join_recv[p], t->ce_recv_from[p]);
            if (e == cudaSuccess) e = cudaStreamWaitEvent(t->ce_recv, t->ce_join_recv[p], 0);
        }
    }
    if (st != PP_OK) return st;
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "post: copy engines");
    if (r != CUDA_SUCCESS)
        return pp__nccl_fail(err, PP_EIO, "post: copy-engine receive: stream memory operation failed (CUresult %d)", (int)r);
    return PP_OK;
}

/* A transfer's or a collective's buffer must be memory of this rank's device (cudaMalloc'ed, or
 * managed): a host pointer is refused here, naming it, rather than inside NCCL, whose refusal
 * would abort the communicator. err may be NULL: post checks each buffer so and makes the message
 * only for one it refuses. */
static pp_status pp__nccl_device_buffer(const pp_nccl *nc, const void *p, const char *what, const char *name,
                                        pp_error *err)
{
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pp__nccl_fail(err, PP_EINVAL, "%s: %s=%p: not memory CUDA knows (%s)", what, name, p, cudaGetErrorName(e));
    }
    if (a.type == cudaMemoryTypeManaged) return PP_OK;
    if (a.type != cudaMemoryTypeDevice)
        return pp__nccl_fail(err, PP_EINVAL, "%s: %s=%p: host memory; the NCCL transport takes device memory of "
                             "device %d", what, name, p, nc->device);
    if (a.device != nc->device)
        return pp__nccl_fail(err, PP_EINVAL, "%s: %s=%p: memory of device %d; this rank's device is %d", what, name, p,
                             a.device, nc->device);
    return PP_OK;
}

/* A post that fails once its copy-engine claims are made leaves those pairs out of step for
 * good: the communicator aborts, as it would for a failed copy. */
static pp_status pp__nccl_post_failed(pp__nccl_transport *t, pp__nccl_handle *h, int streams, pp_status st, pp_error *err)
{
    h->in_use = 0;
    if ((streams & (PP__NCCL_ON_CE_SEND | PP__NCCL_ON_CE_RECV)) && !t->nc->aborted)
        pp_nccl_abort(t->nc, st, err ? err->message : "post: a copy-engine transfer failed");
    return st;
}

static pp_status pp__nccl_post_group(void *user, const pp_transfer *transfers, int count, void **handle, pp_error *err)
{
    pp__nccl_transport *t = (pp__nccl_transport *)user;
    pp_nccl *nc = t->nc;
    pp__nccl_handle *h = NULL;
    pp__nccl_record *rec = NULL;
    pp_status st;
    ncclResult_t r = ncclSuccess, r2;
    cudaError_t e;
    cudaEvent_t recv_ready;
    int i, k, nccl_ops = 0, self_ops = 0, streams = 0, first, one;
    if (!handle || (count > 0 && !transfers)) return pp__nccl_fail(err, PP_EINVAL, "post: transfers and handle must not be NULL");
    *handle = NULL;
    if (nc->aborted) return pp__nccl_aborted(nc, err, "post");
    for (i = 0; i < count; i++) {
        const pp_transfer *x = &transfers[i];
        if (x->peer < 0 || x->peer >= nc->world)
            return pp__nccl_fail(err, PP_EINVAL, "post: transfer %d: peer=%d: must be between 0 and %d", i, x->peer,
                                 nc->world - 1);
        if (!x->buf && x->bytes)
            return pp__nccl_fail(err, PP_EINVAL, "post: transfer %d: buf is NULL for %zu bytes", i, x->bytes);
        /* every route takes device memory: a host pointer is refused here, naming it, where NCCL
         * would abort the communicator, a ring's device copy would fail without naming it, and
         * the rings in host memory would copy it, synchronously, out of the step's order */
        if (x->bytes && pp__nccl_device_buffer(nc, x->buf, "post", "buf", NULL) != PP_OK) {
            char what[48];
            snprintf(what, sizeof what, "post: transfer %d", i);
            return pp__nccl_device_buffer(nc, x->buf, what, "buf", err);
        }
        if (x->peer == nc->rank) self_ops++;
        else if (!pp__nccl_is_ce(t, x->peer)) nccl_ops++;
        else streams |= x->is_send ? PP__NCCL_ON_CE_SEND : PP__NCCL_ON_CE_RECV;
    }
    if (nccl_ops + self_ops > 0 || !streams) streams |= PP__NCCL_ON_COMM;   /* an empty group too */
    if ((st = pp__nccl_health(nc, "post", err)) != PP_OK) return st;
    if ((st = pp__nccl_handle_get(t, &h, err)) != PP_OK) return st;
    if (t->recording && (st = pp__nccl_record_get(t, &rec, err)) != PP_OK) { h->in_use = 0; return st; }

    /* The group may start once the compute stream has reached this point: what it sends is
     * written, what it receives into is no longer read. Its time starts there, on the first
     * stream it uses (gated: once the gate opens, below). */
    /* A group whose transfers all go by copy engines to one peer (independent_peers posts them so)
     * runs on that peer's streams alone: its begin and end are recorded there, not on the streams
     * that join every peer's in order. one: that peer, else -1. */
    for (i = 0, one = -1; i < count && one != -2; i++)
        one = one == -1 || one == transfers[i].peer ? transfers[i].peer : -2;
    if (one < 0 || nccl_ops + self_ops > 0) one = -1;
    t->ready = t->ready_hist[t->posts % PP__NCCL_READY_HIST];
    recv_ready = (streams & PP__NCCL_ON_CE_RECV) ? pp__nccl_recv_ready(t, transfers, count) : t->ready;
    e = cudaEventRecord(t->ready, t->compute);
    for (k = PP__NCCL_ON_COMM, first = 1; e == cudaSuccess && k <= PP__NCCL_ON_CE_RECV; k <<= 1) {
        if (!(streams & k)) continue;
        e = cudaStreamWaitEvent(pp__nccl_stream_of(t, k), k == PP__NCCL_ON_CE_RECV ? recv_ready : t->ready, 0);
        if (e == cudaSuccess && rec && first && one < 0 && !(k == PP__NCCL_ON_COMM && nccl_ops > 0 && t->gated))
            e = cudaEventRecord(rec->begin, pp__nccl_stream_of(t, k));
        first = 0;
    }
    if (e != cudaSuccess) { h->in_use = 0; return pp__nccl_cuda_fail(err, e, "post"); }

    /* Same-rank transfers first (sends before receives, so a pair in one group meets). */
    for (i = 0; i < count; i++)
        if (transfers[i].peer == nc->rank && transfers[i].is_send && (st = pp__nccl_self_send(t, &transfers[i], err)) != PP_OK) {
            h->in_use = 0; return st;
        }
    for (i = 0; i < count; i++)
        if (transfers[i].peer == nc->rank && !transfers[i].is_send && (st = pp__nccl_self_recv(t, &transfers[i], err)) != PP_OK) {
            h->in_use = 0; return st;
        }
    if (nc->debug) {
        double t_dbg = pp__nccl_now();
        fprintf(stderr, "[pipepar_nccl rank %d %.6f] post #%ld:", nc->rank, t_dbg, nc->posts);
        for (i = 0; i < count; i++) {
            char tag[48];
            pp_transfer_tag_format(transfers[i].tag, tag, sizeof tag);
            fprintf(stderr, " %s %s %d (%zu B%s)", transfers[i].is_send ? "send" : "recv", tag, transfers[i].peer,
                    transfers[i].bytes, pp__nccl_is_ce(t, transfers[i].peer) ? ", copy engine" : "");
        }
        fprintf(stderr, "\n");
    }
    nc->posts++;
    t->posts++;
    if ((streams & (PP__NCCL_ON_CE_SEND | PP__NCCL_ON_CE_RECV)) &&
        (st = pp__nccl_ce_group(t, transfers, count, recv_ready, rec && one >= 0 ? &rec->begin : NULL, err)) != PP_OK)
        return pp__nccl_post_failed(t, h, streams, st, err);
    if (nccl_ops > 0 && t->gated && (st = pp__nccl_gate_pass(t, transfers, count, err)) != PP_OK) {
        return pp__nccl_post_failed(t, h, streams, st, err);
    }
    /* gated: the group's time starts once the gate opens (both sides are there), so it is the
     * transfer's own time, not a wait for the peer */
    if (nccl_ops > 0 && t->gated && rec && (e = cudaEventRecord(rec->begin, nc->stream)) != cudaSuccess) {
        return pp__nccl_post_failed(t, h, streams, pp__nccl_cuda_fail(err, e, "post"), err);
    }
    if (nccl_ops > 0) {
        pp__nccl_arm(nc, nc->timeout_s, "post: ncclGroupEnd");
        r = ncclGroupStart();
        for (i = 0; i < count && (r == ncclSuccess || r == ncclInProgress); i++) {
            const pp_transfer *x = &transfers[i];
            if (x->peer == nc->rank || pp__nccl_is_ce(t, x->peer)) continue;
            if (x->is_send) r = ncclSend(x->buf, x->bytes, ncclUint8, x->peer, nc->comm, nc->stream);
            else            r = ncclRecv(x->buf, x->bytes, ncclUint8, x->peer, nc->comm, nc->stream);
        }
        r2 = ncclGroupEnd();   /* always close the group, even after a failed call */
        if (nc->debug) fprintf(stderr, "[pipepar_nccl rank %d %.6f] post #%ld: ncclGroupEnd returned %d\n", nc->rank,
                               pp__nccl_now(), nc->posts - 1, (int)r2);
        if (pp__nccl_disarm(nc, err)) return pp__nccl_post_failed(t, h, streams, PP_ETIMEOUT, err);
        if (r == ncclSuccess || r == ncclInProgress) r = r2;
        if ((st = pp__nccl_check(nc, r, "post: ncclGroupEnd", err)) != PP_OK) { return pp__nccl_post_failed(t, h, streams, st, err); }
        /* Non-blocking mode: the kernels may still be on their way to the stream (e.g. the first
         * transfer to a peer connects first); the done-event must come after them. */
        if (r == ncclInProgress &&
            (st = pp__nccl_settle(nc, nc->comm, pp__nccl_now() + nc->timeout_s, "post: ncclGroupEnd", err)) != PP_OK) {
            return pp__nccl_post_failed(t, h, streams, st, err);
        }
    }
    e = cudaSuccess;
    if (streams & PP__NCCL_ON_COMM) {
        e = cudaEventRecord(h->done, nc->stream);
        if (e == cudaSuccess && rec) e = cudaEventRecord(rec->end, nc->stream);
    }
    /* A group of one copy-engine peer ends on that peer's streams, so that waiting for it waits
     * for nothing of another peer's (independent_peers); several peers end on the joined ones. */
    if (e == cudaSuccess && (streams & PP__NCCL_ON_CE_SEND)) {
        cudaStream_t on = one >= 0 ? t->ce_send_to[one] : t->ce_send;
        e = cudaEventRecord(h->done_send, on);
        if (e == cudaSuccess && rec) e = cudaEventRecord(rec->end_send, on);
    }
    if (e == cudaSuccess && (streams & PP__NCCL_ON_CE_RECV)) {
        cudaStream_t on = one >= 0 ? t->ce_recv_from[one] : t->ce_recv;
        e = cudaEventRecord(h->done_recv, on);
        if (e == cudaSuccess && rec) e = cudaEventRecord(rec->end_recv, on);
    }
    if (e != cudaSuccess) { return pp__nccl_post_failed(t, h, streams, pp__nccl_cuda_fail(err, e, "post"), err); }
    h->streams = streams;
    if (rec) {
        for (i = 0; i < count; i++) {
            if (transfers[i].is_send) rec->sent += transfers[i].bytes; else rec->received += transfers[i].bytes;
            if (rec->peer < 0) rec->peer = transfers[i].peer;
        }
        rec->transfers = count;
        rec->streams = streams;
    }
    *handle = h;
    return pp__nccl_ok(err);
}

/* A group, then its sends' marks used up (output_ready): a later compute into the same buffer
 * says its parts anew, and a send without them never waits for old ones. */
static pp_status pp__nccl_post(void *user, const pp_transfer *transfers, int count, void **handle, pp_error *err)
{
    pp__nccl_transport *t = (pp__nccl_transport *)user;
    pp_status st = pp__nccl_post_group(user, transfers, count, handle, err);
    int i;
    for (i = 0; t->num_marks > 0 && transfers && i < count; i++)
        if (transfers[i].is_send) pp__nccl_marks_drop(t, transfers[i].buf);
    return st;
}

/* A group's end events, one per stream it used. */
static int pp__nccl_group_events(const pp__nccl_handle *h, cudaEvent_t ev[3])
{
    int n = 0;
    if (h->streams & PP__NCCL_ON_COMM) ev[n++] = h->done;
    if (h->streams & PP__NCCL_ON_CE_SEND) ev[n++] = h->done_send;
    if (h->streams & PP__NCCL_ON_CE_RECV) ev[n++] = h->done_recv;
    return n;
}

/* Stream-ordered: the compute stream waits for the group; the host goes on at once. */
static pp_status pp__nccl_wait(void *user, void *handle, double timeout_s, pp_error *err)
{
    pp__nccl_transport *t = (pp__nccl_transport *)user;
    pp__nccl_handle *h = (pp__nccl_handle *)handle;
    pp_status st;
    cudaError_t e;
    (void)timeout_s;
    if (!h) return pp__nccl_fail(err, PP_EINVAL, "wait: handle must not be NULL");
    if (t->nc->aborted) { h->in_use = 0; return pp__nccl_aborted(t->nc, err, "wait"); }
    {
        cudaEvent_t ev[3];
        int i, n = pp__nccl_group_events(h, ev);
        for (i = 0, e = cudaSuccess; i < n && e == cudaSuccess; i++)
            e = cudaStreamWaitEvent(t->compute, ev[i], 0);   /* captures the event now: reuse is safe */
    }
    h->in_use = 0;
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "wait");
    if ((st = pp__nccl_health(t->nc, "wait", err)) != PP_OK) return st;
    return pp__nccl_ok(err);
}

static pp_status pp__nccl_test(void *user, void *handle, int *done, pp_error *err)
{
    pp__nccl_transport *t = (pp__nccl_transport *)user;
    pp__nccl_handle *h = (pp__nccl_handle *)handle;
    cudaError_t e;
    if (!h || !done) return pp__nccl_fail(err, PP_EINVAL, "test: handle and done must not be NULL");
    *done = 0;
    if (t->nc->aborted) { h->in_use = 0; *done = 1; return pp__nccl_aborted(t->nc, err, "test"); }
    {
        cudaEvent_t ev[3];
        int i, n = pp__nccl_group_events(h, ev);
        for (i = 0, e = cudaSuccess; i < n && e == cudaSuccess; i++) e = cudaEventQuery(ev[i]);
    }
    if (e == cudaErrorNotReady) return pp__nccl_health(t->nc, "test", err) == PP_OK ? pp__nccl_ok(err) : PP_ETRANSPORT;
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "test");
    *done = 1;
    h->in_use = 0;
    return pp__nccl_ok(err);
}

static pp_status pp__nccl_tp_all_reduce(void *user, float *values, int count, double timeout_s, pp_error *err)
{
    pp__nccl_transport *t = (pp__nccl_transport *)user;
    return pp_nccl_all_reduce_host(t->nc, values, count, timeout_s, err);
}

static void pp__nccl_tp_abort(void *user, pp_status status, const char *reason)
{
    pp__nccl_transport *t = (pp__nccl_transport *)user;
    pp_nccl_abort(t->nc, status, reason);
}

/* --- the group collectives ------------------------------------------------------------------ */

enum { PP__NCCL_ALL_REDUCE = 0, PP__NCCL_ALL_GATHER = 1 };

/* One collective on the communication stream, in the compute stream's order: it starts once the
 * compute stream's work so far is done (an event the communication stream waits for), and the
 * compute stream's next work waits for its end. Its enqueue is armed with the watchdog, as every
 * NCCL call that may block; its completion is the compute stream's, which pp_nccl_sync waits
 * for within the deadline. all-reduce: count floats, in place (send == recv); all-gather: count
 * bytes per rank. */
static pp_status pp__nccl_collective(pp__nccl_transport *t, int op, const void *send, void *recv, size_t count,
                                     double timeout_s, const char *what, pp_error *err)
{
    pp_nccl *nc = t->nc;
    ncclResult_t r;
    cudaError_t e;
    pp_status st;
    if ((st = pp__nccl_health(nc, what, err)) != PP_OK) return st;
    e = cudaEventRecord(t->coll_ready, t->compute);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(nc->stream, t->coll_ready, 0);
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, what);
    if (nc->debug)
        fprintf(stderr, "[pipepar_nccl rank %d %.6f] %s: %zu %s\n", nc->rank, pp__nccl_now(), what, count,
                op == PP__NCCL_ALL_REDUCE ? "floats" : "bytes per rank");
    pp__nccl_arm(nc, pp__nccl_timeout(nc, timeout_s), what);
    if (op == PP__NCCL_ALL_REDUCE) r = ncclAllReduce(send, recv, count, ncclFloat, ncclSum, nc->comm, nc->stream);
    else r = ncclAllGather(send, recv, count, ncclUint8, nc->comm, nc->stream);
    if (pp__nccl_disarm(nc, err)) return PP_ETIMEOUT;
    if ((st = pp__nccl_check(nc, r, what, err)) != PP_OK) return st;
    if (r == ncclInProgress &&
        (st = pp__nccl_settle(nc, nc->comm, pp__nccl_now() + pp__nccl_timeout(nc, timeout_s), what, err)) != PP_OK)
        return st;
    e = cudaEventRecord(t->coll_done, nc->stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(t->compute, t->coll_done, 0);   /* captured now: reuse is safe */
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, what);
    return pp__nccl_ok(err);
}

static pp_status pp__nccl_tp_all_reduce_buf(void *user, float *buf, size_t count, double timeout_s, pp_error *err)
{
    pp__nccl_transport *t = (pp__nccl_transport *)user;
    const char *what = "all_reduce_buf";
    pp_status st;
    if (!buf && count > 0) return pp__nccl_fail(err, PP_EINVAL, "%s: buf=NULL for %zu floats", what, count);
    if (t->nc->aborted) return pp__nccl_aborted(t->nc, err, what);
    if (count == 0) return pp__nccl_ok(err);   /* every rank passes the same count: none calls NCCL */
    if ((st = pp__nccl_device_buffer(t->nc, buf, what, "buf", err)) != PP_OK) return st;
    return pp__nccl_collective(t, PP__NCCL_ALL_REDUCE, buf, buf, count, timeout_s, what, err);
}

static pp_status pp__nccl_tp_all_gather(void *user, const void *send, void *recv, size_t bytes, double timeout_s,
                                        pp_error *err)
{
    pp__nccl_transport *t = (pp__nccl_transport *)user;
    pp_nccl *nc = t->nc;
    const char *what = "all_gather";
    uintptr_t s0 = (uintptr_t)send, r0 = (uintptr_t)recv, mine;
    size_t total;
    pp_status st;
    if ((!send || !recv) && bytes > 0)
        return pp__nccl_fail(err, PP_EINVAL, "%s: send and recv must not be NULL (bytes=%zu)", what, bytes);
    if (nc->aborted) return pp__nccl_aborted(nc, err, what);
    if (bytes == 0) return pp__nccl_ok(err);
    if (bytes > SIZE_MAX / (size_t)nc->world)
        return pp__nccl_fail(err, PP_EINVAL, "%s: bytes=%zu: times the %d ranks overflows", what, bytes, nc->world);
    total = bytes * (size_t)nc->world;
    mine = r0 + bytes * (size_t)nc->rank;
    /* in place is send == recv + rank * bytes (NCCL's rule); any other overlap is a mistake */
    if (s0 < r0 + total && r0 < s0 + bytes && s0 != mine)
        return pp__nccl_fail(err, PP_EINVAL, "%s: send=%p overlaps recv=%p (%zu bytes) other than at this rank's place "
                             "recv + %d * %zu (in place)", what, send, recv, total, nc->rank, bytes);
    if ((st = pp__nccl_device_buffer(nc, send, what, "send", err)) != PP_OK) return st;
    if ((st = pp__nccl_device_buffer(nc, recv, what, "recv", err)) != PP_OK) return st;
    return pp__nccl_collective(t, PP__NCCL_ALL_GATHER, send, recv, bytes, timeout_s, what, err);
}

static pp_status pp__nccl_tp_barrier(void *user, double timeout_s, pp_error *err)
{
    pp__nccl_transport *t = (pp__nccl_transport *)user;
    pp_status st = pp_nccl_barrier(t->nc, timeout_s, err);
    return st == PP_OK ? pp__nccl_ok(err) : st;
}

pp_status pp_nccl_transport(pp_nccl *nc, void *compute_stream, pp_transport *out, pp_error *err)
{
    pp__nccl_transport *t;
    cudaError_t e;
    int i;
    if (!nc || !out) return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport: nc and out must not be NULL");
    if (nc->aborted) return pp__nccl_aborted(nc, err, "pp_nccl_transport");
    t = (pp__nccl_transport *)calloc(1, sizeof *t);
    if (!t) return pp__nccl_fail(err, PP_ENOMEM, "pp_nccl_transport: out of memory");
    t->nc = nc;
    t->compute = (cudaStream_t)compute_stream;
    /* Groups in flight at once: a rank's program holds at most one pending group per
     * microbatch and direction; 1024 is far above any schedule's need. */
    t->num_handles = 1024;
    t->handles = (pp__nccl_handle *)calloc((size_t)t->num_handles, sizeof *t->handles);
    e = t->handles ? cudaSetDevice(nc->device) : cudaErrorMemoryAllocation;
    for (i = 0; e == cudaSuccess && i < PP__NCCL_READY_HIST; i++)
        e = cudaEventCreateWithFlags(&t->ready_hist[i], cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&t->coll_ready, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&t->coll_done, cudaEventDisableTiming);
    for (i = 0; e == cudaSuccess && i < t->num_handles; i++)
        e = cudaEventCreateWithFlags(&t->handles[i].done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        pp_transport tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.user = t;
        if (t->handles) t->num_handles = i;
        pp_nccl_transport_free(&tmp);
        return pp__nccl_cuda_fail(err, e, "pp_nccl_transport");
    }
    memset(out, 0, sizeof *out);
    out->user = t;
    out->rank = nc->rank;
    out->world = nc->world;
    out->post = pp__nccl_post;
    out->wait = pp__nccl_wait;
    out->test = pp__nccl_test;
    out->all_reduce = pp__nccl_tp_all_reduce;
    out->abort = pp__nccl_tp_abort;
    out->all_reduce_buf = pp__nccl_tp_all_reduce_buf;
    out->all_gather = pp__nccl_tp_all_gather;
    out->barrier = pp__nccl_tp_barrier;
    out->output_ready = pp__nccl_output_ready;
    return pp__nccl_ok(err);
}

void pp_nccl_transport_free(pp_transport *tp)
{
    pp__nccl_transport *t;
    int i;
    if (!tp || !tp->user) return;
    t = (pp__nccl_transport *)tp->user;
    if (t->nc && !t->nc->aborted && t->nc->stream) cudaStreamSynchronize(t->nc->stream);
    if (t->ce_called) pp__nccl_ce_release(t, 1);
    for (i = 0; t->handles && i < t->num_handles; i++) {
        if (t->handles[i].done) cudaEventDestroy(t->handles[i].done);
        if (t->handles[i].done_send) cudaEventDestroy(t->handles[i].done_send);
        if (t->handles[i].done_recv) cudaEventDestroy(t->handles[i].done_recv);
    }
    for (i = 0; i < t->num_records; i++) {
        cudaEventDestroy(t->records[i].begin); cudaEventDestroy(t->records[i].end);
        cudaEventDestroy(t->records[i].end_send); cudaEventDestroy(t->records[i].end_recv);
    }
    for (i = 0; i < t->num_stages; i++) if (t->stages[i].data) cudaFree(t->stages[i].data);
    for (i = 0; i < PP__NCCL_READY_HIST; i++) if (t->ready_hist[i]) cudaEventDestroy(t->ready_hist[i]);
    if (t->coll_ready) cudaEventDestroy(t->coll_ready);
    if (t->coll_done) cudaEventDestroy(t->coll_done);
    for (i = 0; i < t->num_marks; i++) cudaEventDestroy(t->marks[i].ev);
    for (i = 0; i < t->num_spare; i++) cudaEventDestroy(t->spare_events[i]);
    free(t->marks);
    free(t->spare_events);
    if (t->gate_remote) pp__nccl_gate_release(t);
    if (t->gate_opener && !t->nc->aborted) cudaStreamDestroy(t->gate_opener);
    free(t->handles);
    free(t->records);
    free(t->stages);
    free(t);
    tp->user = NULL;
}

static pp__nccl_transport *pp__nccl_of(pp_transport *tp, pp_error *err, const char *what)
{
    if (!tp || !tp->user || tp->post != pp__nccl_post) {
        pp__nccl_fail(err, PP_EINVAL, "%s: not a transport made by pp_nccl_transport", what);
        return NULL;
    }
    return (pp__nccl_transport *)tp->user;
}

/* --- the arrival gate ------------------------------------------------------------------------ */

typedef struct pp__nccl_gate_card {   /* what each rank tells the others */
    cudaIpcMemHandle_t handle;
    uint64_t ptr;                     /* the flags' address in its own process */
    uint64_t host;                    /* FNV-1a of the host name */
    uint64_t space;                   /* the host, its boot and the PID namespace */
    int64_t pid;
    int32_t device, ok;
    int64_t posts;                    /* groups this transport has posted so far */
    uint64_t base;                    /* the first count (config.test_count_base; 0) */
} pp__nccl_gate_card;

/* An all-gather of `bytes` bytes per rank through the communicator, host to host, within the
 * communicator's deadline. Both host ends are staged through pinned memory: a copy from or to
 * pageable memory would block the host until the collective is done, past any deadline. After
 * a failure the buffers are left allocated: freeing them would wait for the collective. */
static pp_status pp__nccl_all_gather_host(pp_nccl *nc, const void *mine, void *all, size_t bytes, pp_error *err)
{
    char *d = NULL, *h = NULL;
    size_t total = bytes * (size_t)(nc->world + 1);
    ncclResult_t r;
    pp_status st;
    cudaError_t e = cudaMalloc((void **)&d, total);
    if (e == cudaSuccess) e = cudaMallocHost((void **)&h, total);
    if (e != cudaSuccess) {
        if (d) cudaFree(d);
        return pp__nccl_cuda_fail(err, e, "arrival gate: all-gather buffers");
    }
    memcpy(h + bytes * (size_t)nc->world, mine, bytes);
    e = cudaMemcpyAsync(d + bytes * (size_t)nc->world, h + bytes * (size_t)nc->world, bytes, cudaMemcpyHostToDevice,
                        nc->stream);
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "arrival gate: all-gather");
    pp__nccl_arm(nc, nc->timeout_s, "arrival gate: ncclAllGather");
    r = ncclAllGather(d + bytes * (size_t)nc->world, d, bytes, ncclUint8, nc->comm, nc->stream);
    if (pp__nccl_disarm(nc, err)) return PP_ETIMEOUT;
    if ((st = pp__nccl_check(nc, r, "arrival gate: ncclAllGather", err)) != PP_OK) return st;
    if (r == ncclInProgress &&
        (st = pp__nccl_settle(nc, nc->comm, pp__nccl_now() + nc->timeout_s, "arrival gate", err)) != PP_OK)
        return st;
    e = cudaMemcpyAsync(h, d, bytes * (size_t)nc->world, cudaMemcpyDeviceToHost, nc->stream);
    if (e == cudaSuccess) e = cudaEventRecord(nc->host_wait, nc->stream);
    if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "arrival gate: all-gather");
    st = pp__nccl_wait_device(nc, nc->host_wait, NULL, nc->timeout_s, "arrival gate: all-gather", err);
    if (st != PP_OK) return st;
    memcpy(all, h, bytes * (size_t)nc->world);
    cudaFree(d);
    cudaFreeHost(h);
    return PP_OK;
}

/* What makes two ranks one process: the boot, the PID namespace and the pid. (A host name and a
 * pid alone are not enough: containers on one host can share the name, each with its own pid 1.)
 * FNV-1a over the host name, /proc/sys/kernel/random/boot_id and the /proc/self/ns/pid link. */
static uint64_t pp__nccl_fnv(uint64_t h, const char *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

static void pp__nccl_identity(uint64_t *host, uint64_t *space)
{
    char buf[256];
    FILE *f;
    ssize_t n;
    *host = 1469598103934665603ull;
    buf[0] = 0;
    if (gethostname(buf, sizeof buf - 1) != 0) buf[0] = 0;
    buf[sizeof buf - 1] = 0;
    *host = pp__nccl_fnv(*host, buf, strlen(buf));
    *space = *host;
    f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        size_t got = fread(buf, 1, sizeof buf, f);
        fclose(f);
        *space = pp__nccl_fnv(*space, buf, got);
    }
    n = readlink("/proc/self/ns/pid", buf, sizeof buf);
    if (n > 0) *space = pp__nccl_fnv(*space, buf, (size_t)n);
}

/* On abort: every wait of the communication stream on a gate is opened, from a stream of its
 * own, so that the NCCL kernels queued behind the waits launch, find NCCL's abort flag set and
 * end. Without it a wait for a dead peer never passes, and ncclCommAbort, which waits for the
 * communicator's work, waits for it forever. The high word of each flag gets 2^30 above our
 * count's: the waits compare cyclically, so an all-ones word would read as "behind", and the
 * peers write only the low word, so a live peer that announces later leaves the gate open. */
static void pp__nccl_gate_open_all(void *user)
{
    pp__nccl_transport *t = (pp__nccl_transport *)user;
    int p, before = -1;
    if ((!t->gated && !t->ce_on) || !t->gate_opener || !t->write32) return;
    if (cudaGetDevice(&before) != cudaSuccess) before = -1;
    if (cudaSetDevice(t->nc->device) != cudaSuccess) return;
    for (p = 0; t->gated && t->gate_flags && p < t->nc->world; p++)
        t->write32((CUstream)t->gate_opener, (CUdeviceptr)(uintptr_t)(t->gate_flags + p) + 4,
                   (cuuint32_t)(t->gate_count[p] >> 32) + 0x40000000u, CU_STREAM_WRITE_VALUE_DEFAULT);
    /* The copy-engine waits too. First the peers' flags of us (arrived[me], freed[me],
     * posted[me] in their memory) go 2^30 high words below any count, so that what our opened
     * waits let through next (copies into slots a live peer has not copied out yet, their
     * announcements) is never taken as data, and a live peer never pushes into our buffers
     * again: the peer's waits on us stay shut until its own deadline and abort. Then our own
     * flags go 2^30 high words above the counts. One stream: in order. A push our opened waits
     * let through lands in the receive buffer of a transfer that the peer can then never
     * complete (its arrived count of us stays shut), so its step fails too. */
    for (p = 0; t->ce_on && t->ce_mem && t->ce_remote && p < t->nc->world; p++) {
        uint64_t high = (t->ce_sent[p] > t->ce_taken[p] ? t->ce_sent[p] : t->ce_taken[p]) >> 32;
        int which;
        if (!t->ce_remote[p]) continue;
        for (which = PP__NCCL_ARRIVED; which <= PP__NCCL_POSTED; which++)
            t->write32((CUstream)t->gate_opener, pp__nccl_ce_flag_there(t, which, p) + 4, (cuuint32_t)high - 0x40000000u,
                       CU_STREAM_WRITE_VALUE_DEFAULT);
    }
    for (p = 0; t->ce_on && t->ce_mem && p < t->nc->world; p++) {
        uint64_t high = (t->ce_sent[p] > t->ce_taken[p] ? t->ce_sent[p] : t->ce_taken[p]) >> 32;
        int which;
        for (which = PP__NCCL_ARRIVED; which <= PP__NCCL_POSTED; which++)
            t->write32((CUstream)t->gate_opener, pp__nccl_ce_flag(t, which, p) + 4, (cuuint32_t)high + 0x40000000u,
                       CU_STREAM_WRITE_VALUE_DEFAULT);
    }
    if (before >= 0) cudaSetDevice(before);   /* the caller's thread keeps its device */
    (void)cudaGetLastError();
}

/* The communicator's abort hook belongs to this transport while it has a gate or copy-engine
 * peers; the opener stream lives as long as either. */
static void pp__nccl_hook_update(pp__nccl_transport *t)
{
    pp_nccl *nc = t->nc;
    if (t->gated || t->ce_on) {
        nc->before_abort = pp__nccl_gate_open_all;
        nc->before_abort_user = t;
        return;
    }
    if (nc->before_abort_user == (void *)t) { nc->before_abort = NULL; nc->before_abort_user = NULL; }
    if (t->gate_opener && !nc->aborted) cudaStreamDestroy(t->gate_opener);
    t->gate_opener = NULL;
}

static cudaError_t pp__nccl_opener_make(pp__nccl_transport *t)
{
    int lo = 0, hi = 0;
    cudaError_t e;
    if (t->gate_opener) return cudaSuccess;
    e = cudaDeviceGetStreamPriorityRange(&lo, &hi);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&t->gate_opener, cudaStreamNonBlocking, hi);
    return e;
}

/* After an abort the device memory is left as it is: freeing it would wait for a communication
 * stream that may sit on a gate forever. */
static void pp__nccl_gate_release(pp__nccl_transport *t)
{
    int p;
    for (p = 0; !t->nc->aborted && t->gate_opened && p < t->nc->world; p++)
        if (t->gate_opened[p]) cudaIpcCloseMemHandle(t->gate_opened[p]);
    if (t->gate_flags && !t->nc->aborted) cudaFree(t->gate_flags);
    free(t->gate_remote); free(t->gate_opened); free(t->gate_count);
    t->gate_flags = NULL; t->gate_remote = NULL; t->gate_opened = NULL; t->gate_count = NULL;
    t->gated = 0;
    pp__nccl_hook_update(t);
}

/* The driver's stream memory operations (cuStreamWaitValue64, cuStreamWriteValue32), through
 * the runtime's entry points (no -lcuda), if the device has the 64-bit ones. */
static int pp__nccl_memops(pp__nccl_transport *t)
{
    enum cudaDriverEntryPointQueryResult q1 = cudaDriverEntryPointSymbolNotFound, q2 = q1, q3 = q1;
    void *w = NULL, *v = NULL, *a = NULL;
    int can64 = 0, ok;
    const char *connections = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    /* A stream waiting on a flag holds the hardware queue it sits in. With fewer than 4 queues
     * (Megatron sets 1) the compute stream, or the other direction's stream, would share one and
     * stop behind it: the gate and the copy engines stay off there (NCCL as before). */
    if (connections && *connections && atoi(connections) < 4) return 0;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &w, 12000, cudaEnableDefault, &q1);
    if (e == cudaSuccess) e = cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &v, 12000, cudaEnableDefault, &q2);
    if (e == cudaSuccess) e = cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &a, 12000, cudaEnableDefault, &q3);
    ok = e == cudaSuccess && q1 == cudaDriverEntryPointSuccess && q2 == cudaDriverEntryPointSuccess &&
         q3 == cudaDriverEntryPointSuccess && w && v && a;
    if (ok) {   /* the 64-bit wait is optional in the driver: ask (a CUdevice is its ordinal) */
        CUresult (*attr)(int *, CUdevice_attribute, CUdevice);
        *(void **)&attr = a;
        ok = attr(&can64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, (CUdevice)t->nc->device) == CUDA_SUCCESS &&
             can64;
    }
    if (ok) {
        *(void **)&t->wait64 = w;
        *(void **)&t->write32 = v;
        /* for direct copy-engine transfers between processes (optional: the ring carries them without) */
        if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &w, 12000, cudaEnableDefault, &q1) == cudaSuccess &&
            q1 == cudaDriverEntryPointSuccess && w)
            *(void **)&t->attrs = w;
    }
    (void)cudaGetLastError();
    return ok;
}

/* Maps a peer's exported memory here: threads of one process use its pointer (with peer access),
 * other processes of the host CUDA IPC (*opened gets the mapping to close). NULL where neither
 * works (the pair then stays as it was). */
static void *pp__nccl_map_peer(pp__nccl_transport *t, int same_process, int peer_device, uint64_t peer_ptr,
                               const cudaIpcMemHandle_t *handle, void **opened)
{
    pp_nccl *nc = t->nc;
    void *ptr = NULL;
    *opened = NULL;
    if (same_process) {
        int can = peer_device == nc->device;
        if (!can && cudaDeviceCanAccessPeer(&can, nc->device, peer_device) != cudaSuccess) can = 0;
        if (can && peer_device != nc->device) {
            cudaError_t e = cudaDeviceEnablePeerAccess(peer_device, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled) e = cudaSuccess;
            can = e == cudaSuccess;
        }
        if (can) ptr = (void *)(uintptr_t)peer_ptr;
    } else if (cudaIpcOpenMemHandle(&ptr, *handle, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess) {
        *opened = ptr;
    } else {
        ptr = NULL;
    }
    (void)cudaGetLastError();
    return ptr;
}

pp_status pp_nccl_transport_gate(pp_transport *tp, int *gated_peers, pp_error *err)
{
    pp__nccl_transport *t = pp__nccl_of(tp, err, "pp_nccl_transport_gate");
    pp_nccl *nc;
    pp__nccl_gate_card me, *cards = NULL;
    unsigned char *mapped = NULL, *all_mapped = NULL;
    cudaError_t e;
    pp_status st;
    int p, n = 0;
    if (gated_peers) *gated_peers = 0;
    if (!t) return PP_EINVAL;
    nc = t->nc;
    if (nc->aborted) return pp__nccl_aborted(nc, err, "pp_nccl_transport_gate");
    /* every rank refuses a second call alike, before any collective */
    if (t->gate_called) return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_gate: called twice on one transport");
    /* the abort hook has one slot per communicator: a second gated transport would take it from
     * the first, whose gates an abort would then leave shut */
    if (nc->before_abort && nc->before_abort_user != (void *)t)
        return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_gate: communicator of rank %d already carries a gated "
                             "transport (one per communicator)", nc->rank);
    t->gate_called = 1;
    if (cudaSetDevice(nc->device) != cudaSuccess) return pp__nccl_fail(err, PP_EIO, "pp_nccl_transport_gate: cudaSetDevice");
    memset(&me, 0, sizeof me);
    t->gate_remote = (CUdeviceptr *)calloc((size_t)nc->world, sizeof *t->gate_remote);
    t->gate_opened = (void **)calloc((size_t)nc->world, sizeof *t->gate_opened);
    t->gate_count = (uint64_t *)calloc((size_t)nc->world, sizeof *t->gate_count);
    cards = (pp__nccl_gate_card *)calloc((size_t)nc->world, sizeof *cards);
    mapped = (unsigned char *)calloc((size_t)nc->world, 1);
    all_mapped = (unsigned char *)calloc((size_t)nc->world * (size_t)nc->world, 1);
    if (!t->gate_remote || !t->gate_opened || !t->gate_count || !cards || !mapped || !all_mapped) {
        /* cannot join the all-gathers without their buffers: the others time out there */
        st = pp__nccl_fail(err, PP_ENOMEM, "pp_nccl_transport_gate: out of memory");
        goto fail;
    }
    /* This rank can take part when the driver has stream memory operations and the flags exist;
     * it still joins both all-gathers when it cannot (everyone must). */
    me.ok = pp__nccl_memops(t);
    me.base = nc->test_count_base;
    if (me.ok) {
        e = cudaMalloc((void **)&t->gate_flags, sizeof(uint64_t) * (size_t)nc->world);
        for (p = 0; e == cudaSuccess && p < nc->world; p++)   /* every peer has reached `base` groups */
            e = cudaMemcpy(t->gate_flags + p, &me.base, sizeof me.base, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        if (e == cudaSuccess) e = cudaIpcGetMemHandle(&me.handle, t->gate_flags);
        if (e == cudaSuccess) e = pp__nccl_opener_make(t);
        me.ok = e == cudaSuccess;
        (void)cudaGetLastError();
    }
    me.ptr = (uint64_t)(uintptr_t)t->gate_flags;
    me.pid = (int64_t)getpid();
    me.device = nc->device;
    me.posts = t->posts;
    pp__nccl_identity(&me.host, &me.space);
    if ((st = pp__nccl_all_gather_host(nc, &me, cards, sizeof me, err)) != PP_OK) goto fail;
    /* counts start at zero: every rank refuses alike when any has posted already */
    for (p = 0; p < nc->world; p++)
        if (cards[p].posts != 0) {
            st = pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_gate: must be called before the first post "
                               "(rank %d has posted %lld groups)", p, (long long)cards[p].posts);
            goto fail;
        }
    /* decided from the cards alone, so every rank refuses alike (one that went on alone would
     * wait in the next all-gather until its deadline) */
    for (p = 0; p < nc->world; p++)
        if (cards[p].base != cards[0].base) {
            st = pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_gate: test_count_base differs between ranks "
                               "(rank 0: %llu, rank %d: %llu): every rank must set the same",
                               (unsigned long long)cards[0].base, p, (unsigned long long)cards[p].base);
            goto fail;
        }
    for (p = 0; p < nc->world; p++) t->gate_count[p] = me.base;
    /* map every peer on this host that can take part */
    for (p = 0; p < nc->world; p++) {
        void *ptr;
        if (p == nc->rank || !me.ok || !cards[p].ok || cards[p].host != me.host || pp__nccl_is_ce(t, p)) continue;
        ptr = pp__nccl_map_peer(t, cards[p].space == me.space && cards[p].pid == me.pid, cards[p].device, cards[p].ptr,
                                &cards[p].handle, &t->gate_opened[p]);
        if (ptr) {
            t->gate_remote[p] = (CUdeviceptr)(uintptr_t)((uint64_t *)ptr + nc->rank);
            mapped[p] = 1;
        }
    }
    /* a pair is gated only when both sides mapped each other: a one-sided gate would wait
     * for announcements that never come */
    if ((st = pp__nccl_all_gather_host(nc, mapped, all_mapped, (size_t)nc->world, err)) != PP_OK) goto fail;
    for (p = 0; p < nc->world; p++) {
        if (mapped[p] && all_mapped[(size_t)p * (size_t)nc->world + (size_t)nc->rank]) n++;
        else t->gate_remote[p] = 0;
    }
    t->gated = n > 0;
    if (t->gated) pp__nccl_hook_update(t);
    else pp__nccl_gate_release(t);
    free(cards); free(mapped); free(all_mapped);
    if (gated_peers) *gated_peers = n;
    if (nc->debug) fprintf(stderr, "[pipepar_nccl rank %d] arrival gate: %d peers\n", nc->rank, n);
    return pp__nccl_ok(err);
fail:
    if (st != PP_ETIMEOUT && !nc->aborted) pp__nccl_gate_release(t);   /* else freeing could wait on the device */
    free(cards); free(mapped); free(all_mapped);
    return st;
}

/* --- copy-engine transfers ------------------------------------------------------------------ */

typedef struct pp__nccl_ce_card {     /* what each rank tells the others, first round */
    uint64_t host, space;
    int64_t pid, posts;
    uint64_t slot_bytes, base;        /* base: the first count (config.test_count_base; 0) */
    int32_t device, ok, slots;
    int32_t threads_ok;               /* config.test_ce_threads */
    int32_t bad_args;                 /* slots or slot_bytes out of range */
    int32_t asked_slots;              /* what the caller passed, for the message */
    int32_t via_host;                 /* pp_nccl_transport_copy_engine_via_host */
    uint64_t asked_bytes;
} pp__nccl_ce_card;

typedef struct pp__nccl_ce_where {    /* second round: each rank's memory, once made */
    cudaIpcMemHandle_t handle;
    uint64_t ptr;
    int32_t ok, pad;
    char seg[64];                     /* its claims' shared-memory segment */
    uint64_t seg_bytes;
    char host[64];                    /* via host: its flags' and rings' segment (ptr: its device address) */
    uint64_t host_bytes;
} pp__nccl_ce_where;

/* The claims' segment: made by the receiver (zeroed: no claims yet), opened by its senders,
 * unlinked once all have it, so nothing is left in /dev/shm after a crash past set-up. */
static void *pp__nccl_shm(const char *name, size_t bytes, int make)
{
    int fd = make ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) : shm_open(name, O_RDWR, 0);
    struct stat sb;
    void *ptr;
    if (fd < 0) return NULL;
    /* posix_fallocate, not ftruncate: a /dev/shm too small for the claims says so now (ENOSPC),
     * instead of a SIGBUS at the first claim written into a page it cannot back */
    if ((make && posix_fallocate(fd, 0, (off_t)bytes) != 0) || fstat(fd, &sb) != 0 || (size_t)sb.st_size < bytes) {
        close(fd);
        if (make) shm_unlink(name);
        return NULL;
    }
    ptr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (ptr == MAP_FAILED) {
        if (make) shm_unlink(name);
        return NULL;
    }
    return ptr;
}

/* Via host: a peer's rings and flags, mapped here and pinned for this process's copy engines;
 * their device address, or 0 where that fails (set-up then refuses on every rank: round 3). A
 * thread of this process passes its own (pinned for every context: cudaHostRegisterPortable). */
static CUdeviceptr pp__nccl_map_peer_host(pp__nccl_transport *t, int p, int same_process, const pp__nccl_ce_where *w)
{
    char name[sizeof w->host + 1];
    void *seg, *dev = NULL;
    if (same_process) return (CUdeviceptr)w->ptr;
    memcpy(name, w->host, sizeof w->host);
    name[sizeof w->host] = 0;
    seg = pp__nccl_shm(name, (size_t)w->host_bytes, 0);
    if (!seg) return 0;
    if (cudaHostRegister(seg, (size_t)w->host_bytes, cudaHostRegisterMapped | cudaHostRegisterPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        munmap(seg, (size_t)w->host_bytes);
        return 0;
    }
    t->ce_peer_host[p] = seg;
    t->ce_peer_host_bytes[p] = (size_t)w->host_bytes;
    if (cudaHostGetDevicePointer(&dev, seg, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        dev = NULL;
    }
    return (CUdeviceptr)(uintptr_t)dev;
}

static void pp__nccl_unmap_peer_host(pp__nccl_transport *t, int p)
{
    if (!t->ce_peer_host || !t->ce_peer_host[p]) return;
    cudaHostUnregister(t->ce_peer_host[p]);
    munmap(t->ce_peer_host[p], t->ce_peer_host_bytes[p]);
    t->ce_peer_host[p] = NULL;
    (void)cudaGetLastError();
}

/* Ranks whose transfers may go through the copy engines: both able, on one host, in two
 * processes (threads of one process only with config.test_ce_threads on both: see
 * pp_nccl_transport_copy_engine's notes for why they stay on NCCL). */
static int pp__nccl_ce_pair(const pp__nccl_ce_card *c, int p, int q)
{
    int same_process = c[p].space == c[q].space && c[p].pid == c[q].pid;
    return p != q && c[p].ok && c[q].ok && c[p].host == c[q].host && (!same_process || (c[p].threads_ok && c[q].threads_ok));
}

/* Where, in rank p's memory, the ring that rank q writes into starts: p's rings follow its flags,
 * in the order of the ranks that pair with it. */
static size_t pp__nccl_ce_ring_offset(const pp__nccl_ce_card *c, int p, int q, size_t flags_bytes, size_t ring_bytes)
{
    int r, index = 0;
    for (r = 0; r < q; r++) index += pp__nccl_ce_pair(c, p, r);
    return flags_bytes + (size_t)index * ring_bytes;
}

/* Teardown (at_free: pp_nccl_transport_free, collective once the set-up succeeded on every
 * rank): the peers' last writes into our memory are the freed counts of what we sent them (a
 * receive's posted count goes before its freed one), so each send stream first waits until every
 * message we sent has been taken; all streams drain within the deadline (past it the
 * communicator aborts, and nothing is freed); our mappings of the peers' memory and buffers
 * close; and only after a barrier, when no rank maps our memory any longer, is it freed (CUDA
 * IPC: an exporter must not free before its importers close). */
static void pp__nccl_ce_release(pp__nccl_transport *t, int at_free)
{
    int p, ok = 1;
    pp_nccl *nc = t->nc;
    if (!nc->aborted && t->ce_on) {
        for (p = 0; p < nc->world && ok; p++) {
            if (!t->ce_remote[p] || !t->ce_send_to || !t->ce_send_to[p]) continue;
            if (t->ce_sent[p] != t->ce_base &&
                t->wait64((CUstream)t->ce_send_to[p], pp__nccl_ce_flag(t, PP__NCCL_FREED, p), t->ce_sent[p],
                          CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
                ok = 0;
            if (ok && pp__nccl_wait_device(nc, NULL, t->ce_send_to[p], nc->timeout_s,
                                           "pp_nccl_transport_free: copy-engine sends", NULL) != PP_OK)
                ok = 0;
        }
        for (p = 0; p < nc->world && ok; p++)
            if (t->ce_recv_from && t->ce_recv_from[p] &&
                pp__nccl_wait_device(nc, NULL, t->ce_recv_from[p], nc->timeout_s,
                                     "pp_nccl_transport_free: copy-engine receives", NULL) != PP_OK)
                ok = 0;
        if (ok && pp__nccl_wait_device(nc, NULL, t->ce_send, nc->timeout_s, "pp_nccl_transport_free: copy-engine sends",
                                       NULL) != PP_OK)
            ok = 0;
        if (ok && pp__nccl_wait_device(nc, NULL, t->ce_recv, nc->timeout_s, "pp_nccl_transport_free: copy-engine receives",
                                       NULL) != PP_OK)
            ok = 0;
    }
    if (!nc->aborted && ok) {   /* after an abort the streams may sit on a wait: leave them and the memory */
        int i;
        for (i = 0; i < t->ce_num_maps; i++) {
            if (t->ce_maps[i].ptr) cudaIpcCloseMemHandle(t->ce_maps[i].ptr);
            if (t->ce_maps[i].last_copy) cudaEventDestroy(t->ce_maps[i].last_copy);
        }
        for (p = 0; t->ce_opened && p < nc->world; p++)
            if (t->ce_opened[p]) { cudaIpcCloseMemHandle(t->ce_opened[p]); t->ce_opened[p] = NULL; }
        for (p = 0; p < nc->world; p++) pp__nccl_unmap_peer_host(t, p);
        /* an abort from here on (the barrier's deadline) opens only our own flags: the peers'
         * are no longer mapped */
        for (p = 0; t->ce_remote && p < nc->world; p++) t->ce_remote[p] = 0;
        if (at_free && t->ce_collective && pp_nccl_barrier(nc, nc->timeout_s, NULL) != PP_OK) ok = 0;
        if (at_free) t->ce_collective = 0;
    }
    if (!nc->aborted && ok) {
        for (p = 0; p < nc->world; p++) {
            if (t->ce_send_to && t->ce_send_to[p]) cudaStreamDestroy(t->ce_send_to[p]);
            if (t->ce_join && t->ce_join[p]) cudaEventDestroy(t->ce_join[p]);
            if (t->ce_recv_from && t->ce_recv_from[p]) cudaStreamDestroy(t->ce_recv_from[p]);
            if (t->ce_join_recv && t->ce_join_recv[p]) cudaEventDestroy(t->ce_join_recv[p]);
        }
        if (t->ce_send) cudaStreamDestroy(t->ce_send);
        if (t->ce_recv) cudaStreamDestroy(t->ce_recv);
        if (t->ce_host) { cudaHostUnregister(t->ce_host); munmap(t->ce_host, t->ce_host_bytes); }
        else if (t->ce_mem) cudaFree(t->ce_mem);
        t->ce_host = NULL;
        t->ce_host_bytes = 0;
    }
    if (t->ce_host_name[0]) { shm_unlink(t->ce_host_name); t->ce_host_name[0] = 0; }
    /* the claims are host memory, shared: unmapping is safe whatever the peers still do */
    if (t->ce_seg_name[0]) { shm_unlink(t->ce_seg_name); t->ce_seg_name[0] = 0; }
    if (t->ce_seg) munmap(t->ce_seg, t->ce_seg_bytes);
    for (p = 0; t->ce_peer_seg && p < nc->world; p++)
        if (t->ce_peer_seg[p]) munmap(t->ce_peer_seg[p], t->ce_peer_seg_bytes[p]);
    t->ce_seg = NULL;
    t->ce_send = t->ce_recv = NULL;
    t->ce_mem = NULL;
    free(t->ce_remote); free(t->ce_opened); free(t->ce_ring_here); free(t->ce_ring_there);
    free(t->ce_sent); free(t->ce_taken); free(t->ce_send_to); free(t->ce_join); free(t->ce_recv_from);
    free(t->ce_join_recv); free(t->ce_maps);
    free(t->ce_peer_seg); free(t->ce_peer_seg_bytes); free(t->ce_claims_in); free(t->ce_claims_out);
    free(t->ce_xsent); free(t->ce_xrecv); free(t->ce_same); free(t->ce_streamed); free(t->ce_plans); free(t->ce_posted_high);
    free(t->ce_peer_host); free(t->ce_peer_host_bytes);
    t->ce_peer_host = NULL; t->ce_peer_host_bytes = NULL;
    t->ce_remote = NULL; t->ce_opened = NULL; t->ce_ring_here = NULL; t->ce_ring_there = NULL;
    t->ce_sent = NULL; t->ce_taken = NULL; t->ce_send_to = NULL; t->ce_join = NULL; t->ce_recv_from = NULL;
    t->ce_join_recv = NULL; t->ce_maps = NULL; t->ce_num_maps = t->ce_cap_maps = 0;
    t->ce_peer_seg = NULL; t->ce_peer_seg_bytes = NULL; t->ce_claims_in = NULL; t->ce_claims_out = NULL;
    t->ce_xsent = NULL; t->ce_xrecv = NULL; t->ce_same = NULL; t->ce_streamed = NULL; t->ce_plans = NULL; t->ce_cap_plans = 0;
    t->ce_posted_high = NULL;
    t->ce_on = 0;
    pp__nccl_hook_update(t);
}

pp_status pp_nccl_transport_copy_engine(pp_transport *tp, size_t slot_bytes, int slots, int *ce_peers, pp_error *err)
{
    pp__nccl_transport *t = pp__nccl_of(tp, err, "pp_nccl_transport_copy_engine");
    pp_nccl *nc;
    pp__nccl_ce_card me, *cards = NULL;
    pp__nccl_ce_where where, *wheres = NULL;
    unsigned char *mapped = NULL, *all_mapped = NULL;
    size_t flags_bytes, ring_bytes, total = 0;
    cudaError_t e = cudaSuccess;
    pp_status st;
    int p, n = 0, pairs = 0;
    size_t asked_bytes = slot_bytes;
    int asked_slots = slots;
    if (ce_peers) *ce_peers = 0;
    if (!t) return PP_EINVAL;
    nc = t->nc;
    if (nc->aborted) return pp__nccl_aborted(nc, err, "pp_nccl_transport_copy_engine");
    /* refusals every rank makes alike (same arguments everywhere), before any collective */
    if (t->ce_called)
        return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_copy_engine: called twice on one transport");
    if (nc->before_abort && nc->before_abort_user != (void *)t)
        return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_copy_engine: communicator of rank %d already carries a "
                             "gated or copy-engine transport (one per communicator)", nc->rank);
    t->ce_called = 1;
    if (cudaSetDevice(nc->device) != cudaSuccess)
        return pp__nccl_fail(err, PP_EIO, "pp_nccl_transport_copy_engine: cudaSetDevice");
    memset(&me, 0, sizeof me);
    memset(&where, 0, sizeof where);
    /* bad arguments are refused after the first all-gather, on every rank alike (a rank that
     * left before it would leave the others waiting there until their deadline) */
    me.bad_args = slots < 2 || slots > 64 || slot_bytes < 4096 || slot_bytes > ((size_t)1 << 32) || slot_bytes % 256 != 0;
    if (me.bad_args) { slots = 2; slot_bytes = 4096; }
    flags_bytes = 4096 * (((size_t)nc->world * 24 + 4095) / 4096);   /* arrived, freed, posted: [world] each */
    ring_bytes = slot_bytes * (size_t)slots;
    t->ce_slot_bytes = slot_bytes;
    t->ce_slots = slots;
    t->ce_remote = (CUdeviceptr *)calloc((size_t)nc->world, sizeof *t->ce_remote);
    t->ce_opened = (void **)calloc((size_t)nc->world, sizeof *t->ce_opened);
    t->ce_ring_here = (size_t *)calloc((size_t)nc->world, sizeof *t->ce_ring_here);
    t->ce_ring_there = (size_t *)calloc((size_t)nc->world, sizeof *t->ce_ring_there);
    t->ce_sent = (uint64_t *)calloc((size_t)nc->world, sizeof *t->ce_sent);
    t->ce_taken = (uint64_t *)calloc((size_t)nc->world, sizeof *t->ce_taken);
    t->ce_send_to = (cudaStream_t *)calloc((size_t)nc->world, sizeof *t->ce_send_to);
    t->ce_join = (cudaEvent_t *)calloc((size_t)nc->world, sizeof *t->ce_join);
    t->ce_recv_from = (cudaStream_t *)calloc((size_t)nc->world, sizeof *t->ce_recv_from);
    t->ce_join_recv = (cudaEvent_t *)calloc((size_t)nc->world, sizeof *t->ce_join_recv);
    t->ce_peer_seg = (void **)calloc((size_t)nc->world, sizeof *t->ce_peer_seg);
    t->ce_peer_seg_bytes = (size_t *)calloc((size_t)nc->world, sizeof *t->ce_peer_seg_bytes);
    t->ce_claims_in = (pp__nccl_ce_claim **)calloc((size_t)nc->world, sizeof *t->ce_claims_in);
    t->ce_claims_out = (pp__nccl_ce_claim **)calloc((size_t)nc->world, sizeof *t->ce_claims_out);
    t->ce_xsent = (uint64_t *)calloc((size_t)nc->world, sizeof *t->ce_xsent);
    t->ce_xrecv = (uint64_t *)calloc((size_t)nc->world, sizeof *t->ce_xrecv);
    t->ce_same = (unsigned char *)calloc((size_t)nc->world, 1);
    t->ce_streamed = (unsigned char *)calloc((size_t)nc->world, 1);
    t->ce_posted_high = (uint32_t *)calloc((size_t)nc->world, sizeof *t->ce_posted_high);
    t->ce_peer_host = (void **)calloc((size_t)nc->world, sizeof *t->ce_peer_host);
    t->ce_peer_host_bytes = (size_t *)calloc((size_t)nc->world, sizeof *t->ce_peer_host_bytes);
    cards = (pp__nccl_ce_card *)calloc((size_t)nc->world, sizeof *cards);
    wheres = (pp__nccl_ce_where *)calloc((size_t)nc->world, sizeof *wheres);
    mapped = (unsigned char *)calloc((size_t)nc->world, 1);
    all_mapped = (unsigned char *)calloc((size_t)nc->world * (size_t)nc->world, 1);
    if (!t->ce_remote || !t->ce_opened || !t->ce_ring_here || !t->ce_ring_there || !t->ce_sent || !t->ce_taken ||
        !t->ce_send_to || !t->ce_join || !t->ce_recv_from || !t->ce_join_recv || !t->ce_peer_seg || !t->ce_peer_seg_bytes || !t->ce_claims_in ||
        !t->ce_claims_out || !t->ce_xsent || !t->ce_xrecv || !t->ce_same || !t->ce_streamed || !t->ce_posted_high || !t->ce_peer_host || !t->ce_peer_host_bytes || !cards || !wheres || !mapped || !all_mapped) {
        /* cannot join the all-gathers without their buffers: the others time out there */
        st = pp__nccl_fail(err, PP_ENOMEM, "pp_nccl_transport_copy_engine: out of memory");
        goto fail;
    }
    /* round 1: who can, where, with which rings; every rank joins, able or not */
    me.ok = pp__nccl_memops(t);
    me.base = nc->test_count_base;
    me.pid = (int64_t)getpid();
    me.device = nc->device;
    me.posts = t->posts;
    me.slot_bytes = slot_bytes;
    me.slots = slots;
    me.asked_bytes = asked_bytes;
    me.asked_slots = asked_slots;
    me.threads_ok = nc->test_ce_threads;
    /* NCCL_P2P_DISABLE=1 says peer-to-peer between GPUs is off: ours too (so that NCCL's socket
     * transport can stand in for two nodes), but for transfers via host, which use none */
    if (!t->ce_via_host && getenv("NCCL_P2P_DISABLE") && !strcmp(getenv("NCCL_P2P_DISABLE"), "1")) me.ok = 0;
    me.via_host = t->ce_via_host;
    pp__nccl_identity(&me.host, &me.space);
    if ((st = pp__nccl_all_gather_host(nc, &me, cards, sizeof me, err)) != PP_OK) goto fail;
    /* decided from the cards alone, so every rank refuses alike */
    for (p = 0; p < nc->world; p++) {
        int q = p == 0 ? nc->rank : p == nc->rank ? 0 : p;   /* this rank's own card first */
        if (!cards[q].bad_args) continue;
        if (q == nc->rank && asked_slots >= 2 && asked_slots <= 64)
            st = pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_copy_engine: slot_bytes=%zu: must be a multiple of "
                               "256 from 4096 to 2^32", asked_bytes);
        else if (q == nc->rank)
            st = pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_copy_engine: slots=%d: must be between 2 and 64",
                               asked_slots);
        else
            st = pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_copy_engine: rank %d passed slots=%d, slot_bytes=%llu: "
                               "slots must be between 2 and 64, slot_bytes a multiple of 256 from 4096 to 2^32", q,
                               (int)cards[q].asked_slots, (unsigned long long)cards[q].asked_bytes);
        goto fail;
    }
    for (p = 0; p < nc->world; p++) {
        if (cards[p].posts != 0) {
            st = pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_copy_engine: must be called before the first post "
                               "(rank %d has posted %lld groups)", p, (long long)cards[p].posts);
            goto fail;
        }
        if (cards[p].slot_bytes != cards[0].slot_bytes || cards[p].slots != cards[0].slots) {
            st = pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_copy_engine: slot_bytes and slots differ between ranks "
                               "(rank 0: %llu x %d, rank %d: %llu x %d): every rank must pass the same",
                               (unsigned long long)cards[0].slot_bytes, (int)cards[0].slots, p,
                               (unsigned long long)cards[p].slot_bytes, (int)cards[p].slots);
            goto fail;
        }
        if (cards[p].via_host != cards[0].via_host) {
            st = pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_copy_engine: rank 0 %s pp_nccl_transport_copy_engine_via_host, "
                               "rank %d %s: every rank must set the same", cards[0].via_host ? "set" : "did not set", p,
                               cards[p].via_host ? "did" : "did not");
            goto fail;
        }
        if (cards[p].base != cards[0].base) {
            st = pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_copy_engine: test_count_base differs between ranks "
                               "(rank 0: %llu, rank %d: %llu): every rank must set the same",
                               (unsigned long long)cards[0].base, p, (unsigned long long)cards[p].base);
            goto fail;
        }
    }
    t->ce_base = me.base;
    for (p = 0; p < nc->world; p++) {
        t->ce_sent[p] = t->ce_taken[p] = me.base;
        t->ce_posted_high[p] = (uint32_t)(me.base >> 32);
        pairs += pp__nccl_ce_pair(cards, nc->rank, p);
    }
    /* this rank's flags and one ring per rank it pairs with; a stream per direction */
    if (pairs > 0) {
        uint64_t *flags0 = NULL;
        int lo = 0, hi = 0;
        total = flags_bytes + (size_t)pairs * ring_bytes;
        if (t->ce_via_host) {   /* shared memory the peers map too, pinned here for the copy engines */
            snprintf(t->ce_host_name, sizeof t->ce_host_name, "/pipepar-ceh-%lld-%d-%llx", (long long)getpid(), nc->rank,
                     (unsigned long long)(pp__nccl_now() * 1e9));
            t->ce_host = pp__nccl_shm(t->ce_host_name, total, 1);
            if (!t->ce_host) { t->ce_host_name[0] = 0; e = cudaErrorMemoryAllocation; }
            else t->ce_host_bytes = total;
            if (e == cudaSuccess) {
                uint64_t *f = (uint64_t *)t->ce_host;
                for (p = 0; p < (int)(flags_bytes / 8); p++) f[p] = me.base;
                e = cudaHostRegister(t->ce_host, total, cudaHostRegisterMapped | cudaHostRegisterPortable);
                if (e != cudaSuccess) { munmap(t->ce_host, total); t->ce_host = NULL; t->ce_host_bytes = 0; }
            }
            if (e == cudaSuccess) e = cudaHostGetDevicePointer((void **)&t->ce_mem, t->ce_host, 0);
            if (e == cudaSuccess) {
                memcpy(where.host, t->ce_host_name, sizeof where.host);
                where.host_bytes = total;
            }
        } else {
            e = cudaMalloc((void **)&t->ce_mem, total);
            if (e == cudaSuccess && !(flags0 = (uint64_t *)malloc(flags_bytes))) e = cudaErrorMemoryAllocation;
            if (e == cudaSuccess) {   /* every count starts at the base: nothing arrived, nothing freed */
                for (p = 0; p < (int)(flags_bytes / 8); p++) flags0[p] = me.base;
                e = cudaMemcpy(t->ce_mem, flags0, flags_bytes, cudaMemcpyHostToDevice);
            }
            free(flags0);
            if (e == cudaSuccess) e = cudaIpcGetMemHandle(&where.handle, t->ce_mem);
        }
        if (e == cudaSuccess) e = cudaDeviceGetStreamPriorityRange(&lo, &hi);
        if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&t->ce_send, cudaStreamNonBlocking, hi);
        if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&t->ce_recv, cudaStreamNonBlocking, hi);
        if (e == cudaSuccess) e = pp__nccl_opener_make(t);
        if (e == cudaSuccess) {   /* the claims of the pairs this rank receives in, one table per pair */
            snprintf(t->ce_seg_name, sizeof t->ce_seg_name, "/pipepar-ce-%lld-%d-%llx", (long long)getpid(), nc->rank,
                     (unsigned long long)(pp__nccl_now() * 1e9));
            t->ce_seg_bytes = (size_t)pairs * PP__NCCL_CLAIMS * sizeof(pp__nccl_ce_claim);
            t->ce_seg = (unsigned char *)pp__nccl_shm(t->ce_seg_name, t->ce_seg_bytes, 1);
            if (!t->ce_seg) { t->ce_seg_name[0] = 0; e = cudaErrorMemoryAllocation; }
            else { memcpy(where.seg, t->ce_seg_name, sizeof where.seg); where.seg_bytes = t->ce_seg_bytes; }
        }
        for (p = 0; e == cudaSuccess && p < t->num_handles; p++) {
            if (!t->handles[p].done_send) e = cudaEventCreateWithFlags(&t->handles[p].done_send, cudaEventDisableTiming);
            if (e == cudaSuccess && !t->handles[p].done_recv)
                e = cudaEventCreateWithFlags(&t->handles[p].done_recv, cudaEventDisableTiming);
        }
        where.ok = e == cudaSuccess;
        where.ptr = (uint64_t)(uintptr_t)t->ce_mem;
        (void)cudaGetLastError();
    }
    /* round 2: the memory and the claims; map every paired rank's, and make its send stream */
    if ((st = pp__nccl_all_gather_host(nc, &where, wheres, sizeof where, err)) != PP_OK) goto fail;
    for (p = 0; t->ce_via_host && p < nc->world; p++) {   /* asked for: refused on every rank alike, not left to NCCL */
        int q, paired = 0;
        for (q = 0; q < nc->world; q++) paired += pp__nccl_ce_pair(cards, p, q);
        if (paired && !wheres[p].ok) {
            st = pp__nccl_fail(err, PP_ENOMEM, "pp_nccl_transport_copy_engine: via host: rank %d could not make and pin its "
                               "%.1f MiB of rings and flags in shared memory (/dev/shm: see df /dev/shm; slots * "
                               "slot_bytes per peer)", p, (double)(flags_bytes + (size_t)paired * ring_bytes) / 1048576.0);
            goto fail;
        }
    }
    for (p = 0; p < nc->world; p++) {
        void *ptr, *seg;
        size_t table = PP__NCCL_CLAIMS * sizeof(pp__nccl_ce_claim);
        int lo = 0, hi = 0, same = cards[p].space == me.space && cards[p].pid == me.pid;
        if (!pp__nccl_ce_pair(cards, nc->rank, p) || !where.ok || !wheres[p].ok) continue;
        wheres[p].seg[sizeof wheres[p].seg - 1] = 0;
        seg = pp__nccl_shm(wheres[p].seg, (size_t)wheres[p].seg_bytes, 0);
        if (!seg) continue;
        t->ce_peer_seg[p] = seg;
        t->ce_peer_seg_bytes[p] = (size_t)wheres[p].seg_bytes;
        if (t->ce_via_host) ptr = (void *)(uintptr_t)pp__nccl_map_peer_host(t, p, same, &wheres[p]);
        else ptr = pp__nccl_map_peer(t, same, cards[p].device, wheres[p].ptr, &wheres[p].handle, &t->ce_opened[p]);
        if (ptr && (cudaDeviceGetStreamPriorityRange(&lo, &hi) != cudaSuccess ||
                    cudaStreamCreateWithPriority(&t->ce_send_to[p], cudaStreamNonBlocking, hi) != cudaSuccess ||
                    cudaEventCreateWithFlags(&t->ce_join[p], cudaEventDisableTiming) != cudaSuccess ||
                    cudaStreamCreateWithPriority(&t->ce_recv_from[p], cudaStreamNonBlocking, hi) != cudaSuccess ||
                    cudaEventCreateWithFlags(&t->ce_join_recv[p], cudaEventDisableTiming) != cudaSuccess)) {
            if (t->ce_opened[p]) { cudaIpcCloseMemHandle(t->ce_opened[p]); t->ce_opened[p] = NULL; }
            pp__nccl_unmap_peer_host(t, p);
            ptr = NULL;
            (void)cudaGetLastError();
        }
        if (!ptr) continue;
        t->ce_remote[p] = (CUdeviceptr)(uintptr_t)ptr;
        t->ce_same[p] = (unsigned char)same;
        t->ce_ring_here[p] = pp__nccl_ce_ring_offset(cards, nc->rank, p, flags_bytes, ring_bytes);
        t->ce_ring_there[p] = pp__nccl_ce_ring_offset(cards, p, nc->rank, flags_bytes, ring_bytes);
        t->ce_claims_in[p] = (pp__nccl_ce_claim *)(t->ce_seg + pp__nccl_ce_ring_offset(cards, nc->rank, p, 0, table));
        t->ce_claims_out[p] = (pp__nccl_ce_claim *)((unsigned char *)seg + pp__nccl_ce_ring_offset(cards, p, nc->rank, 0, table));
        mapped[p] = 1;
    }
    /* round 3: a pair goes through the copy engines only when both sides mapped each other */
    if ((st = pp__nccl_all_gather_host(nc, mapped, all_mapped, (size_t)nc->world, err)) != PP_OK) goto fail;
    for (p = 0; t->ce_via_host && p < nc->world; p++) {   /* asked for: a pair left to NCCL would use NVLink */
        int q;
        for (q = p + 1; q < nc->world; q++)
            if (pp__nccl_ce_pair(cards, p, q) && !(all_mapped[(size_t)p * (size_t)nc->world + (size_t)q] &&
                                                   all_mapped[(size_t)q * (size_t)nc->world + (size_t)p])) {
                st = pp__nccl_fail(err, PP_EIO, "pp_nccl_transport_copy_engine: via host: ranks %d and %d could not map "
                                   "each other's rings and flags (shm_open of the other's /dev/shm segment, "
                                   "cudaHostRegister): the processes of one host must share /dev/shm", p, q);
                goto fail;
            }
    }
    for (p = 0; p < nc->world; p++) {
        if (mapped[p] && all_mapped[(size_t)p * (size_t)nc->world + (size_t)nc->rank]) { n++; continue; }
        t->ce_remote[p] = 0;
        if (t->ce_opened[p]) { cudaIpcCloseMemHandle(t->ce_opened[p]); t->ce_opened[p] = NULL; }   /* one-sided */
        pp__nccl_unmap_peer_host(t, p);
    }
    /* every rank has closed the mappings it keeps no use for before any rank frees its memory,
     * and has opened the claims it needs */
    if ((st = pp_nccl_barrier(nc, nc->timeout_s, err)) != PP_OK) goto fail;
    if (t->ce_seg_name[0]) { shm_unlink(t->ce_seg_name); t->ce_seg_name[0] = 0; }
    if (t->ce_host_name[0]) { shm_unlink(t->ce_host_name); t->ce_host_name[0] = 0; }
    t->ce_on = n > 0;
    t->ce_collective = 1;
    /* every peer on copy engines: its transfers run on streams of their own, and the executor
     * may post and wait for them peer by peer (pp_transport.independent_peers) */
    tp->independent_peers = n == nc->world - 1;
    if (t->ce_on) pp__nccl_hook_update(t);
    else pp__nccl_ce_release(t, 0);
    free(cards); free(wheres); free(mapped); free(all_mapped);
    if (ce_peers) *ce_peers = n;
    if (nc->debug)
        fprintf(stderr, "[pipepar_nccl rank %d] copy engines: %d peers, %d slots of %zu B each (%.1f MiB)\n", nc->rank,
                n, slots, slot_bytes, (double)total / 1048576.0);
    return pp__nccl_ok(err);
fail:
    if (t->ce_seg_name[0]) { shm_unlink(t->ce_seg_name); t->ce_seg_name[0] = 0; }
    if (t->ce_host_name[0]) { shm_unlink(t->ce_host_name); t->ce_host_name[0] = 0; }
    if (st != PP_ETIMEOUT && !nc->aborted) {   /* else freeing could wait on the device */
        pp__nccl_ce_release(t, 0);
        t->ce_called = 0;   /* refused on every rank alike, nothing left behind: a new call may follow */
    }
    free(cards); free(wheres); free(mapped); free(all_mapped);
    return st;
}

pp_status pp_nccl_transport_copy_engine_via_host(pp_transport *tp, int on, pp_error *err)
{
    pp__nccl_transport *t = pp__nccl_of(tp, err, "pp_nccl_transport_copy_engine_via_host");
    if (!t) return PP_EINVAL;
    if (t->ce_called)
        return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_copy_engine_via_host: must come before "
                             "pp_nccl_transport_copy_engine");
    t->ce_via_host = on ? 1 : 0;
    return pp__nccl_ok(err);
}

pp_status pp_nccl_transport_copy_engine_counts(pp_transport *tp, long long counts[3], pp_error *err)
{
    pp__nccl_transport *t = pp__nccl_of(tp, err, "pp_nccl_transport_copy_engine_counts");
    if (!t) return PP_EINVAL;
    if (!counts) return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_copy_engine_counts: counts must not be NULL");
    counts[0] = t->ce_counts[0];
    counts[1] = t->ce_counts[1];
    counts[2] = t->ce_counts[2];
    return pp__nccl_ok(err);
}

pp_status pp_nccl_transport_streamed_sends(pp_transport *tp, long long *sends, pp_error *err)
{
    pp__nccl_transport *t = pp__nccl_of(tp, err, "pp_nccl_transport_streamed_sends");
    if (!t) return PP_EINVAL;
    if (!sends) return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_streamed_sends: sends must not be NULL");
    *sends = t->ce_streamed_sends;
    return pp__nccl_ok(err);
}

pp_status pp_nccl_transport_record(pp_transport *tp, int on, pp_error *err)
{
    pp__nccl_transport *t = pp__nccl_of(tp, err, "pp_nccl_transport_record");
    if (!t) return PP_EINVAL;
    t->recording = on ? 1 : 0;
    t->used_records = 0;
    return pp__nccl_ok(err);
}

pp_status pp_nccl_transport_times(pp_transport *tp, void *base_event, pp_nccl_group_time *times, int capacity,
                                  int *count, pp_error *err)
{
    pp__nccl_transport *t = pp__nccl_of(tp, err, "pp_nccl_transport_times");
    int i;
    pp_status st;
    if (!t) return PP_EINVAL;
    if (!base_event || !count || (capacity > 0 && !times))
        return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_transport_times: base_event, times and count must not be NULL");
    *count = t->used_records;
    if (t->used_records > capacity)
        return pp__nccl_fail(err, PP_EINVAL, "capacity=%d: %d groups were recorded", capacity, t->used_records);
    for (i = 0; i < t->used_records; i++) {
        pp__nccl_record *rec = &t->records[i];
        cudaEvent_t ends[3];
        float b = 0, e = 0, x = 0;
        int k, n = 0;
        cudaError_t ce;
        if (rec->streams & PP__NCCL_ON_COMM) ends[n++] = rec->end;
        if (rec->streams & PP__NCCL_ON_CE_SEND) ends[n++] = rec->end_send;
        if (rec->streams & PP__NCCL_ON_CE_RECV) ends[n++] = rec->end_recv;
        for (k = 0; k < n; k++)   /* the streams finish in their own orders: wait for each end */
            if ((st = pp__nccl_wait_device(t->nc, ends[k], NULL, t->nc->timeout_s, "pp_nccl_transport_times", err)) != PP_OK)
                return st;
        ce = cudaEventElapsedTime(&b, (cudaEvent_t)base_event, rec->begin);
        for (k = 0; ce == cudaSuccess && k < n; k++) {   /* the group ends with its last stream */
            ce = cudaEventElapsedTime(&x, (cudaEvent_t)base_event, ends[k]);
            if (k == 0 || x > e) e = x;
        }
        if (ce != cudaSuccess) return pp__nccl_cuda_fail(err, ce, "pp_nccl_transport_times");
        times[i].begin = 1e-3 * b;
        times[i].end = 1e-3 * e;
        times[i].bytes_sent = rec->sent;
        times[i].bytes_received = rec->received;
        times[i].transfers = rec->transfers;
        times[i].peer = rec->peer;
    }
    t->used_records = 0;
    return pp__nccl_ok(err);
}

/* --- the event timer ------------------------------------------------------------------------ */

typedef struct pp__nccl_timer {
    cudaStream_t stream;
    cudaEvent_t *events;
    unsigned char *marked;
    int capacity;
    int first;              /* index of the step's first mark, -1 before it */
    double first_host;      /* host clock when it was recorded */
} pp__nccl_timer;

static void pp__nccl_timer_mark(void *user, int index)
{
    pp__nccl_timer *t = (pp__nccl_timer *)user;
    if (index < 0 || index >= t->capacity) return;
    if (cudaEventRecord(t->events[index], t->stream) != cudaSuccess) return;
    t->marked[index] = 1;
    if (t->first < 0) { t->first = index; t->first_host = pp__nccl_now(); }
}

static pp_status pp__nccl_timer_resolve(void *user, double *seconds, int count, pp_error *err)
{
    pp__nccl_timer *t = (pp__nccl_timer *)user;
    int i, polls = 0;
    double deadline = pp__nccl_now() + PP__NCCL_DEFAULT_TIMEOUT;
    if (t->first < 0) return pp__nccl_ok(err);
    for (i = 0; i < count && i < t->capacity; i++) {
        float ms = 0;
        cudaError_t e;
        if (!t->marked[i]) continue;
        while ((e = cudaEventQuery(t->events[i])) == cudaErrorNotReady) {
            if (pp__nccl_now() > deadline)
                return pp__nccl_fail(err, PP_ETIMEOUT, "timer: event %d not reached within %.0f s", i, PP__NCCL_DEFAULT_TIMEOUT);
            pp__nccl_pause(&polls);
        }
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, t->events[t->first], t->events[i]);
        if (e != cudaSuccess) return pp__nccl_cuda_fail(err, e, "timer");
        seconds[i] = t->first_host + 1e-3 * ms;
    }
    memset(t->marked, 0, (size_t)t->capacity);
    t->first = -1;
    return pp__nccl_ok(err);
}

pp_status pp_nccl_event_timer(void *stream, int capacity, pp_timer *out, pp_error *err)
{
    pp__nccl_timer *t;
    int i;
    cudaError_t e = cudaSuccess;
    if (!out || capacity < 1) return pp__nccl_fail(err, PP_EINVAL, "capacity=%d: must be >= 1 (out not NULL)", capacity);
    t = (pp__nccl_timer *)calloc(1, sizeof *t);
    if (!t) return pp__nccl_fail(err, PP_ENOMEM, "pp_nccl_event_timer: out of memory");
    t->stream = (cudaStream_t)stream;
    t->capacity = capacity;
    t->first = -1;
    t->events = (cudaEvent_t *)calloc((size_t)capacity, sizeof *t->events);
    t->marked = (unsigned char *)calloc((size_t)capacity, 1);
    if (!t->events || !t->marked) e = cudaErrorMemoryAllocation;
    for (i = 0; e == cudaSuccess && i < capacity; i++) e = cudaEventCreate(&t->events[i]);
    memset(out, 0, sizeof *out);
    out->user = t;
    out->mark = pp__nccl_timer_mark;
    out->resolve = pp__nccl_timer_resolve;
    if (e != cudaSuccess) {
        t->capacity = i;
        pp_nccl_timer_free(out);
        return pp__nccl_cuda_fail(err, e, "pp_nccl_event_timer");
    }
    return pp__nccl_ok(err);
}

void pp_nccl_timer_free(pp_timer *timer)
{
    pp__nccl_timer *t;
    int i;
    if (!timer || !timer->user || timer->mark != pp__nccl_timer_mark) return;
    t = (pp__nccl_timer *)timer->user;
    for (i = 0; t->events && i < t->capacity; i++) if (t->events[i]) cudaEventDestroy(t->events[i]);
    free(t->events);
    free(t->marked);
    free(t);
    timer->user = NULL;
}

/* --- gradient norm ------------------------------------------------------------------------- */

pp_status pp_nccl_grad_norm(pp_nccl *nc, float *d_sumsq, float max_norm, float *d_scale, void *stream,
                            pp_error *err)
{
    ncclResult_t r;
    pp_status st;
    if (!nc || !d_sumsq) return pp__nccl_fail(err, PP_EINVAL, "pp_nccl_grad_norm: nc and d_sumsq must not be NULL");
    if (d_scale && !(max_norm > 0)) return pp__nccl_fail(err, PP_EINVAL, "max_norm=%g: must be > 0 to clip", (double)max_norm);
    if (nc->aborted) return pp__nccl_aborted(nc, err, "pp_nccl_grad_norm");
    pp__nccl_arm(nc, nc->timeout_s, "pp_nccl_grad_norm: ncclAllReduce");
    r = ncclAllReduce(d_sumsq, d_sumsq, 1, ncclFloat, ncclSum, nc->comm, (cudaStream_t)stream);
    if (pp__nccl_disarm(nc, err)) return PP_ETIMEOUT;
    if ((st = pp__nccl_check(nc, r, "pp_nccl_grad_norm: ncclAllReduce", err)) != PP_OK) return st;
    if (r == ncclInProgress &&
        (st = pp__nccl_settle(nc, nc->comm, pp__nccl_now() + nc->timeout_s, "pp_nccl_grad_norm", err)) != PP_OK)
        return st;
    if (d_scale) return pp_cuda_clip_scale(d_sumsq, max_norm, d_scale, stream, err);
    return pp__nccl_ok(err);
}
