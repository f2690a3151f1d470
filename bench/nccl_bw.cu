/* nccl_bw.cu — point-to-point bandwidth between two GPUs: raw NCCL (ncclSend / ncclRecv in one
 * ncclGroupStart/End) next to pipepar's NCCL transport (post / wait with the compute-stream
 * ordering it adds), one direction and both directions at once, 1 to 256 MiB.
 *
 *     RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 PIPEPAR_NCCL_ID_FILE=/tmp/id build/bench_nccl_bw &
 *     RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 PIPEPAR_NCCL_ID_FILE=/tmp/id build/bench_nccl_bw
 *
 * Each figure: bytes of one message / (median over 5 runs of the time of 10 back-to-back
 * messages / 10), rank 0's clock, as the PyTorch bench measures (sync + barrier around).     */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <vector>
#include "../pipepar.h"

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "nccl_bw: %s: %s\n", #call, cudaGetErrorString(e_)); exit(1); } } while (0)
#define PPCK(call) do { pp_error e_; if ((call) != PP_OK) { fprintf(stderr, "nccl_bw: %s: %s\n", #call, e_.message); exit(1); } } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(void)
{
    pp_nccl_config cfg;
    pp_nccl *nc;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_s = 60;
    PPCK(pp_nccl_init(&cfg, &nc, &e_));
    int rank = pp_nccl_rank(nc), world = pp_nccl_world(nc);
    if (world != 2) { fprintf(stderr, "nccl_bw: needs exactly 2 ranks, got %d\n", world); return 2; }
    int peer = 1 - rank;
    ncclComm_t comm = (ncclComm_t)pp_nccl_comm(nc);
    cudaStream_t cs = (cudaStream_t)pp_nccl_stream(nc), compute;
    CK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    pp_transport tp;
    PPCK(pp_nccl_transport(nc, compute, &tp, &e_));
    size_t maxb = 256u << 20;
    char *sb, *rb;
    CK(cudaMalloc(&sb, maxb)); CK(cudaMalloc(&rb, maxb));
    CK(cudaMemset(sb, 1, maxb));
    if (rank == 0) printf("%s\n", pp_nccl_describe(nc));
    if (rank == 0) printf("%8s  %12s %12s  %12s %12s   (GB/s; bidirectional: per direction)\n", "MiB", "raw uni", "raw bidir",
                          "pipepar uni", "pipepar bidir");
    size_t sizes[] = { 1u << 20, 16u << 20, 64u << 20, 256u << 20 };
    for (size_t bytes : sizes) {
        double gbps[4];
        for (int mode = 0; mode < 4; mode++) {
            bool bidir = mode & 1, transport = mode >= 2;
            std::vector<double> ts;
            for (int rep = 0; rep < 7; rep++) {
                PPCK(pp_nccl_sync(nc, compute, 0, &e_));
                PPCK(pp_nccl_sync(nc, NULL, 0, &e_));
                PPCK(pp_nccl_barrier(nc, 0, &e_));
                double t0 = now_s();
                for (int it = 0; it < 10; it++) {
                    if (!transport) {
                        ncclGroupStart();
                        if (bidir || rank == 0) ncclSend(sb, bytes, ncclUint8, peer, comm, cs);
                        if (bidir || rank == 1) ncclRecv(rb, bytes, ncclUint8, peer, comm, cs);
                        ncclResult_t r = ncclGroupEnd();
                        if (r != ncclSuccess && r != ncclInProgress) { fprintf(stderr, "nccl_bw: %s\n", ncclGetErrorString(r)); return 1; }
                    } else {
                        pp_transfer x[2];
                        int n = 0;
                        void *h;
                        memset(x, 0, sizeof x);
                        if (bidir || rank == 0) { x[n].is_send = 1; x[n].peer = peer; x[n].buf = sb; x[n].bytes = bytes; n++; }
                        if (bidir || rank == 1) { x[n].is_send = 0; x[n].peer = peer; x[n].buf = rb; x[n].bytes = bytes; n++; }
                        PPCK(tp.post(tp.user, x, n, &h, &e_));
                        PPCK(tp.wait(tp.user, h, 60, &e_));
                    }
                }
                PPCK(pp_nccl_sync(nc, compute, 0, &e_));
                PPCK(pp_nccl_sync(nc, NULL, 0, &e_));
                PPCK(pp_nccl_barrier(nc, 0, &e_));
                if (rep >= 2) ts.push_back(now_s() - t0);
            }
            std::sort(ts.begin(), ts.end());
            gbps[mode] = 10.0 * bytes / ts[ts.size() / 2] / 1e9;
        }
        if (rank == 0)
            printf("%8zu  %12.1f %12.1f  %12.1f %12.1f\n", bytes >> 20, gbps[0], gbps[1], gbps[2], gbps[3]);
    }
    pp_nccl_transport_free(&tp);
    CK(cudaFree(sb)); CK(cudaFree(rb));
    pp_nccl_free(nc);
    return 0;
}
