/* The CUDA entry points of programs built without the CUDA backend: `sdp` itself (which stays
 * free of the CUDA libraries, whose loading alone costs about 200 MiB of resident memory), and
 * every build where nvcc was not found. `sdp-cuda` links src/ops/cuda/ instead. */
#include "sdp/backend.h"
#include "sdp/check.h"

sdp_backend *sdp_backend_cuda(int device, sdp_precision precision) {
    (void)device;
    (void)precision;
    sdp_fatal(SDP_CUDA_ABSENT);
}

void *sdp_backend_cuda_cublas(const sdp_backend *be) {
    (void)be;
    sdp_fatal("this sdp was built without CUDA: there is no cuBLAS handle");
}

bool sdp_backend_cuda_set_fused_attention(sdp_backend *be, bool fused) {
    (void)be;
    (void)fused;
    sdp_fatal("this sdp was built without CUDA: there is no CUDA attention to choose");
}

bool sdp_backend_cuda_set_bf16_operands(sdp_backend *be, bool bf16) {
    (void)be;
    (void)bf16;
    sdp_fatal("this sdp was built without CUDA: there are no CUDA GEMMs to choose for");
}

bool sdp_backend_cuda_entries(sdp_backend *t) {
    (void)t;
    return false;
}

bool sdp_backend_cuda_built(void) {
    return false;
}

bool sdp_backend_cuda_available(void) {
    return false;
}

int sdp_backend_cuda_devices(void) {
    return 0;
}
