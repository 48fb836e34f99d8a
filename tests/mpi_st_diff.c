/* Compares two safetensors files tensor by tensor: the same names, dtypes and shapes, and F32
 * values within |a - b| <= atol + rtol * |b|. It uses no MPI; it is built with the MPI programs
 * so that the shell tests get its path ($SDP_mpi_st_diff). Files are read with sdp_st_read,
 * which validates the header and the CRC32, so `mpi_st_diff FILE` alone checks one file.
 *
 * usage: mpi_st_diff A [B ATOL RTOL]
 * Prints the largest difference and where; exit status 0 when every value is within tolerance. */
#include "sdp/check.h"
#include "sdp/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float value_at(const sdp_st_entry *e, size_t i) {
    float x;
    memcpy(&x, (const char *)e->data + i * sizeof x, sizeof x); /* data may be unaligned */
    return x;
}

static bool same_shape(const sdp_st_entry *a, const sdp_st_entry *b) {
    if (a->ndim != b->ndim || a->nbytes != b->nbytes || strcmp(a->dtype, b->dtype) != 0)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

int main(int argc, char **argv) {
    SDP_CHECK(argc == 2 || argc == 5, "usage: mpi_st_diff A [B ATOL RTOL]");
    sdp_mem mem = {0};
    sdp_st_file a, b;
    sdp_st_read(&a, argv[1], &mem);
    if (argc == 2) {
        printf("%s: %d tensors, checksum and header valid\n", argv[1], a.n);
        sdp_st_close(&a, &mem);
        return 0;
    }
    sdp_st_read(&b, argv[2], &mem);
    const double atol = atof(argv[3]), rtol = atof(argv[4]);
    int bad = 0;
    double worst = 0, max_abs = 0, max_val = 0;
    const char *worst_at = "", *max_at = "";
    size_t compared = 0;
    SDP_CHECK(a.n == b.n, "%s has %d tensors, %s has %d", argv[1], a.n, argv[2], b.n);
    for (int t = 0; t < a.n; t++) {
        const sdp_st_entry *ea = &a.entries[t], *eb = sdp_st_find(&b, ea->name);
        if (!eb || !same_shape(ea, eb)) {
            printf("tensor %s: missing from %s or of another dtype or shape\n", ea->name, argv[2]);
            bad++;
            continue;
        }
        SDP_CHECK(strcmp(ea->dtype, "F32") == 0, "tensor %s is %s, not F32", ea->name, ea->dtype);
        for (size_t i = 0; i < ea->nbytes / sizeof(float); i++) {
            const double x = value_at(ea, i), y = value_at(eb, i), d = fabs(x - y);
            const double ratio = d / (atol + rtol * fabs(y));
            max_val = fmax(max_val, fabs(y));
            if (d > max_abs) {
                max_abs = d;
                max_at = ea->name;
            }
            if (ratio > worst || isnan(ratio)) {
                worst = isnan(ratio) ? INFINITY : ratio;
                worst_at = ea->name;
            }
            compared++;
        }
    }
    printf("%zu values in %d tensors: max |a-b| %.3g (in %s; largest |b| %.3g); worst error %.3g "
           "of the tolerance (in %s)\n",
           compared, a.n, max_abs, max_at, max_val, worst, worst_at);
    sdp_st_close(&a, &mem);
    sdp_st_close(&b, &mem);
    return bad == 0 && worst <= 1 ? 0 : 1;
}
