/* Copies and sums of row blocks between matrices of different row strides: the slices of a
 * gradient or a parameter that SDP moves between whole and compact buffers. */
#include "ops/cpu/cpu_ops.h"

#include <string.h>

static void copy_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                      size_t ld_src, size_t rows, size_t cols) {
    (void)be;
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * ld_dst, src + r * ld_src, cols * sizeof(float));
}

static void add_rows(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                     size_t ld_src, size_t rows, size_t cols) {
    (void)be;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[r * ld_dst + c] += src[r * ld_src + c];
}

void cpu_ops_rows(sdp_backend *t) {
    t->copy_rows = copy_rows;
    t->add_rows = add_rows;
}
