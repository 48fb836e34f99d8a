/* What every backend shares: destruction, and the CUDA entry points of a build without CUDA
 * (with CUDA they are in src/ops/cuda/backend_cuda.c, in the sdp_cuda library). */
#include "sdp/backend.h"
#include "sdp/check.h"

void sdp_backend_destroy(sdp_backend *be) {
    if (be) be->destroy(be);
}

#ifndef SDP_HAVE_CUDA
sdp_backend *sdp_backend_cuda(int device) {
    (void)device;
    sdp_fatal("sdp was built without CUDA: install nvcc (CUDA 12 or 13) and rebuild");
}

bool sdp_backend_cuda_available(void) {
    return false;
}
#endif
