/* consumer_gpu.c — what a GPU trainer links: pipepar's implementation in one of its files, the
 * companions (libpipepar_gpu.a), CUDA's runtime and NCCL. tests/install.sh compiles and links it
 * through pkg-config (pipepar-gpu) and CMake (pipepar::gpu); run on a machine with a GPU it clips
 * a gradient by the global norm the way a trainer's step ends, over a one-rank NCCL world:
 * g = (3, 4) has norm 5, so with max_norm 1 the scale is 1 / (5 + 1e-6) and g becomes (0.6, 0.8).
 * Exits 0 when it does, 1 otherwise. */
#define PIPEPAR_IMPLEMENTATION
#include "pipepar.h"

#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

int main(void)
{
    pp_error err;
    pp_nccl_id id;
    pp_nccl_config nc_cfg;
    pp_nccl *nc = NULL;
    pp_cuda_l2norm *plan = NULL;
    pp_cuda_tensor grad;
    const float g[2] = { 3.0f, 4.0f };
    float out[2] = { 0.0f, 0.0f };
    float *d = NULL;   /* the gradient, then its sum of squares and the scale: 4 floats */
    int ok = 0;
    memset(&nc_cfg, 0, sizeof nc_cfg);
    nc_cfg.world = 1;
    nc_cfg.bootstrap = PP_NCCL_BOOTSTRAP_ID;
    nc_cfg.id = &id;
    if (pp_nccl_unique_id(&id, &err) != PP_OK || pp_nccl_init(&nc_cfg, &nc, &err) != PP_OK) goto fail;
    printf("%s\n", pp_nccl_describe(nc));
    if (cudaMalloc((void **)&d, 4 * sizeof(float)) != cudaSuccess ||
        cudaMemcpy(d, g, sizeof g, cudaMemcpyHostToDevice) != cudaSuccess) {
        snprintf(err.message, sizeof err.message, "cudaMalloc or cudaMemcpy failed");
        goto fail;
    }
    grad.data = d;
    grad.numel = 2;
    grad.dtype = PP_CUDA_F32;
    if (pp_cuda_l2norm_create(&grad, 1, &plan, &err) != PP_OK ||
        pp_cuda_l2norm_sumsq(plan, d + 2, 0.0f, NULL, pp_nccl_stream(nc), &err) != PP_OK ||
        pp_nccl_grad_norm(nc, d + 2, 1.0f, d + 3, pp_nccl_stream(nc), &err) != PP_OK ||
        pp_cuda_l2norm_scale(plan, d + 3, pp_nccl_stream(nc), &err) != PP_OK ||
        pp_nccl_sync(nc, NULL, 0.0, &err) != PP_OK)
        goto fail;
    if (cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost) != cudaSuccess) {
        snprintf(err.message, sizeof err.message, "cudaMemcpy back failed");
        goto fail;
    }
    ok = fabsf(out[0] - 0.6f) < 1e-5f && fabsf(out[1] - 0.8f) < 1e-5f;
    printf("clipped (3, 4) to norm 1: (%.6f, %.6f): %s\n", (double)out[0], (double)out[1],
           ok ? "as worked out by hand" : "WRONG (expected 0.6, 0.8)");
    goto done;
fail:
    fprintf(stderr, "consumer_gpu: %s\n", err.message);
done:
    pp_cuda_l2norm_free(plan);
    cudaFree(d);
    pp_nccl_free(nc);
    return ok ? 0 : 1;
}
