/* The argument checks the ops' entry points share (ops.c, ops_vision.c): each fails with a
 * message that names the op and says what to change. */
#ifndef SDP_OPS_OP_ARGS_H
#define SDP_OPS_OP_ARGS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "sdp/check.h"

/* Fails unless p is given; the message names the argument. An expression, so that the checks of
 * one call's arguments read as one line. */
static inline void need(const char *op, const void *p, const char *name) {
    SDP_CHECK(p != NULL, "%s: %s is NULL: pass a buffer", op, name);
}
#define NEED(op, p) need(op, p, #p)

/* Fails unless the product of a and b (both >= 0) fits an int: the kernels index with ints. */
static inline void fits_int(const char *op, const char *what, int64_t a, int64_t b) {
    SDP_CHECK(a <= INT_MAX && (a == 0 || b <= INT_MAX / a),
              "%s: %s = %lld x %lld exceeds the int range: use smaller sizes", op, what,
              (long long)a, (long long)b);
}

static inline void rows_args(const char *op, const float *dst, size_t ld_dst, const float *src,
                             size_t ld_src, size_t rows, size_t cols) {
    SDP_CHECK(rows <= 1 || (cols <= ld_dst && cols <= ld_src),
              "%s: %zu columns exceed a row stride (ld_dst=%zu, ld_src=%zu): pass the strides of "
              "the matrices as stored",
              op, cols, ld_dst, ld_src);
    if (rows && cols) NEED(op, dst), NEED(op, src);
}

#endif
