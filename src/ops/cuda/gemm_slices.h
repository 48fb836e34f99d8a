/* How a GEMM on bf16 copies of its operands is cut to fit a fixed buffer (gemm.cu): slices of the
 * inner dimension K, each copying a block of op(A) and one of op(B) and multiplying them. Plain
 * C++ with the copy and the product passed in, so that tests/cuda_emu/test_gemm_slices.cpp runs
 * this same code on the CPU against a plain GEMM.
 *
 * Row-major, as sdp_gemm: op(A) is M x K, op(B) is K x N. Slice [k0, k0 + k) of op(A) is rows
 * k0.. of A when A is transposed (stored K x M: a k x M block), else columns k0.. (an M x k
 * block); of op(B), columns k0.. of B when transposed (stored N x K: an N x k block), else rows
 * k0.. (a k x N block). Each block is copied whole into contiguous storage, so the copies keep
 * the transposition flags, with row strides M or k (A) and k or N (B), and read memory in
 * order. */
#ifndef SDP_OPS_CUDA_GEMM_SLICES_H
#define SDP_OPS_CUDA_GEMM_SLICES_H

#include <stddef.h>

namespace gemm_slices {

enum { ALIGN = 8 }; /* elements between the two copies' starts are a multiple of this */

inline size_t round_up(size_t n, size_t to) {
    return (n + to - 1) / to * to;
}

/* The widest slice of K whose copies (M x kc and kc x N) fit `room` elements: all of K when it
 * fits, else a multiple of 64 (of ALIGN when M + N is very wide); 0 when not even one column
 * does. */
inline int slice_width(size_t room, int M, int N, int K) {
    if (room <= (size_t)ALIGN) return 0;
    size_t kc = (room - ALIGN) / ((size_t)M + (size_t)N);
    if (kc >= (size_t)K) return K;
    return (int)(kc >= 64 ? kc / 64 * 64 : kc / ALIGN * ALIGN);
}

/* For each slice of K: cast(dst, src, rows, cols, ld) copies a block of a matrix as stored (row
 * stride ld) into contiguous dst, once for A and once for B, then
 * product(first, k, a, lda, b, ldb) multiplies op(a) (M x k) by op(b) (k x N), with the same
 * transposition flags, accumulating into C unless `first`. buf holds `room` elements. Returns
 * false, calling nothing, when not even a slice of one column fits (or K is 0: no slices). */
template <class E, class Cast, class Product>
bool run(E *buf, size_t room, bool ta, bool tb, int M, int N, int K, const float *A, int lda,
         const float *B, int ldb, Cast cast, Product product) {
    const int kc = K > 0 ? slice_width(room, M, N, K) : 0;
    if (kc <= 0) return false;
    E *a = buf, *b = buf + round_up((size_t)M * (size_t)kc, ALIGN);
    for (int k0 = 0; k0 < K; k0 += kc) {
        const int k = K - k0 < kc ? K - k0 : kc;
        if (ta)
            cast(a, A + (size_t)k0 * (size_t)lda, k, M, lda);
        else
            cast(a, A + k0, M, k, lda);
        if (tb)
            cast(b, B + k0, N, k, ldb);
        else
            cast(b, B + (size_t)k0 * (size_t)ldb, k, N, ldb);
        product(k0 == 0, k, a, ta ? M : k, b, tb ? k : N);
    }
    return true;
}

} // namespace gemm_slices

#endif
