/* link_traffic.cu — copy-engine traffic over the link between GPU 0 and GPU 1, in the background of
 * another program's compute on GPU 0: what a pipeline's transfers cost the GEMMs beside them.
 *
 *     build/bench_link_traffic [PERIOD_MS [SECONDS [both|in|out|pcie|none]]]     (20, 60, both)
 *
 * Every PERIOD_MS one 64 MiB copy of each direction chosen, as a pipeline rank of the comparison
 * model moves an activation or a gradient:
 *     in    into GPU 0, issued on GPU 1 (a peer's push: no work of this process runs on GPU 0)
 *     out   out of GPU 0, issued on GPU 0 (a push of GPU 0's own, here from a second context)
 *     both  the two at once;   none: the copies skipped, the two contexts alive (the control)
 *     pcie  into GPU 0 from pinned host memory and out of it to pinned host memory, issued on GPU 0:
 *           the same bytes each way over PCIe instead of NVLink (a transport staged through the host)
 * bench/gpu_link_traffic.sh times a one-rank pipeline on GPU 0 beside each mode.
 * Prints how many copies ran and the mean time of one round of them, at the end or on SIGTERM.  */
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "link_traffic: %s: %s\n", #call, cudaGetErrorString(e_)); exit(1); } } while (0)

static volatile sig_atomic_t stop_;
static void on_stop(int sig) { (void)sig; stop_ = 1; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* a number in [lo, hi], or exit 2 naming the argument and the rule */
static double arg_num(const char *s, const char *name, double lo, double hi)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "link_traffic: %s=%s: must be a number from %g to %g\n", name, s, lo, hi);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc > 4 || (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
        fprintf(stderr, "usage: link_traffic [PERIOD_MS [SECONDS [both|in|out|pcie|none]]]   (20, 60, both)\n");
        return argc > 4 ? 2 : 0;
    }
    double period_ms = argc > 1 ? arg_num(argv[1], "PERIOD_MS", 0.1, 60000) : 20;
    double seconds = argc > 2 ? arg_num(argv[2], "SECONDS", 0.1, 86400) : 60;
    const char *mode = argc > 3 ? argv[3] : "both";
    int in = !strcmp(mode, "both") || !strcmp(mode, "in"), out = !strcmp(mode, "both") || !strcmp(mode, "out");
    int pcie = !strcmp(mode, "pcie");
    if (!in && !out && !pcie && strcmp(mode, "none")) {
        fprintf(stderr, "link_traffic: mode=%s: must be both, in, out, pcie or none\n", mode);
        return 2;
    }
    int n_dev = 0, can01 = 0, can10 = 0;
    CK(cudaGetDeviceCount(&n_dev));
    if (n_dev < 2) { fprintf(stderr, "link_traffic: needs 2 GPUs, this machine shows %d\n", n_dev); return 1; }
    CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    if (!can01 || !can10) { fprintf(stderr, "link_traffic: GPUs 0 and 1 cannot access each other's memory\n"); return 1; }

    const size_t bytes = (size_t)64 << 20;
    void *src0, *dst0, *src1, *dst1, *host_in, *host_out;
    cudaStream_t s0, s0b, s1;
    CK(cudaSetDevice(0));
    CK(cudaDeviceEnablePeerAccess(1, 0));
    CK(cudaMalloc(&src0, bytes)); CK(cudaMalloc(&dst0, bytes));
    CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s0b, cudaStreamNonBlocking));
    CK(cudaMallocHost(&host_in, bytes)); CK(cudaMallocHost(&host_out, bytes));
    CK(cudaSetDevice(1));
    CK(cudaDeviceEnablePeerAccess(0, 0));
    CK(cudaMalloc(&src1, bytes)); CK(cudaMalloc(&dst1, bytes));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));

    signal(SIGTERM, on_stop);   /* a timed run beside it ends it: print what ran */
    signal(SIGINT, on_stop);
    double t0 = now_s(), next = t0, busy = 0;
    long rounds = 0;
    while (!stop_ && now_s() - t0 < seconds) {
        double c0 = now_s();
        if (in) CK(cudaMemcpyPeerAsync(dst0, 0, src1, 1, bytes, s1));    /* GPU 1 pushes into GPU 0 */
        if (out) CK(cudaMemcpyPeerAsync(dst1, 1, src0, 0, bytes, s0));   /* GPU 0 pushes into GPU 1 */
        if (pcie) {
            CK(cudaMemcpyAsync(dst0, host_in, bytes, cudaMemcpyHostToDevice, s0));
            CK(cudaMemcpyAsync(host_out, src0, bytes, cudaMemcpyDeviceToHost, s0b));   /* its own stream: both ways at once */
        }
        CK(cudaStreamSynchronize(s0));
        CK(cudaStreamSynchronize(s0b));
        CK(cudaStreamSynchronize(s1));
        busy += now_s() - c0;
        rounds++;
        next += period_ms * 1e-3;
        double wait = next - now_s();
        if (wait > 0 && !stop_) usleep((useconds_t)(wait * 1e6));
    }
    if (rounds == 0) { printf("link_traffic: stopped before the first copy\n"); return 0; }
    printf("link_traffic: %ld rounds of 64 MiB copies (%s), one every %.1f ms, %.3f ms each on average\n", rounds, mode,
           period_ms, 1e3 * busy / (double)rounds);
    return 0;
}
