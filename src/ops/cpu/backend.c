/* What every backend shares: destruction. (The CUDA entry points are in src/ops/cuda/, or, for
 * programs built without CUDA, in src/ops/nocuda/.) */
#include "sdp/backend.h"
#include "sdp/check.h"

void sdp_backend_destroy(sdp_backend *be) {
    if (be) be->destroy(be);
}
