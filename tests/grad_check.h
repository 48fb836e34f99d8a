/* Gradient check shared by the kernel tests. The kernels ACCUMULATE, so each analytic gradient is
 * computed into a buffer pre-filled with `before`, and got - before is compared with central
 * differences (tu_fd_grad) of a double-precision reference loss.
 *
 * The loss reads all its inputs through ctx (x is one of them), which lets the differences be
 * taken at a spread-out sample of coordinates when a full sweep over a large input would be too
 * slow: tu_fd_grad is simply pointed at one coordinate at a time. */
#ifndef SDP_GRAD_CHECK_H
#define SDP_GRAD_CHECK_H

#include "testutil.h"

/* Returns max over checked coordinates of |got - (before + fd)| / (atol + rtol |fd|); <= 1 passes.
 * Checks every coordinate when n <= max_samples, else max_samples of them spread over x. */
static inline double gc_grad_err(const char *what, const float *got, const float *before,
                                 tu_scalar_fn loss, double *x, size_t n, void *ctx,
                                 size_t max_samples, double h, double atol, double rtol) {
    size_t samples = n < max_samples ? n : max_samples;
    double worst = 0;
    for (size_t k = 0; k < samples; k++) {
        size_t i = (samples == n || samples < 2) ? k : (k * (n - 1)) / (samples - 1);
        double fd;
        tu_fd_grad(loss, x + i, 1, ctx, h, &fd);
        double analytic = (double)got[i] - (double)before[i];
        double e = fabs(analytic - fd) / (atol + rtol * fabs(fd));
        if (isnan(e)) e = INFINITY;
        if (e > 1 && e > worst)
            print_message("%s[%zu]: analytic %.8g, finite differences %.8g\n", what, i, analytic,
                          fd);
        if (e > worst) worst = e;
    }
    return worst;
}

#endif
