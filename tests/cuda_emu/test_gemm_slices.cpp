/* The slicing of the CUDA GEMM's bf16-operand path (src/ops/cuda/gemm_slices.h), run on the CPU
 * with a plain copy for the cast and a plain product for cuBLAS: for every transposition, with
 * padded strides, whole and in slices of 64, of 8 and of a remainder, C must equal the plain
 * GEMM's alpha op(A) op(B) + beta C exactly (small integers, so every sum is exact in any order).
 * A buffer too small for one column, or K = 0, must leave everything to the caller. */
#include "ops/cuda/gemm_slices.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static int failures = 0;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL: " __VA_ARGS__);                                                          \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* op(X)[i][k] of a row-major X with row stride ld, transposed or not. */
static float at(const float *X, bool t, int ld, int i, int k) {
    return t ? X[(size_t)k * ld + i] : X[(size_t)i * ld + k];
}

/* C = alpha op(A) op(B) + beta C, M x N, row stride ldc: the reference, and the stand-in for
 * cuBLAS. */
static void plain_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float sum = 0;
            for (int k = 0; k < K; k++) sum += at(A, ta, lda, i, k) * at(B, tb, ldb, k, j);
            C[(size_t)i * ldc + j] = alpha * sum + beta * C[(size_t)i * ldc + j];
        }
}

static std::vector<float> small_integers(size_t n, unsigned seed) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (float)((int)((seed + i * 2654435761u) % 7) - 3);
    return v;
}

/* One product through gemm_slices::run with `room` elements of buffer; returns the slices taken
 * (0: it declined). */
static int check(bool ta, bool tb, int M, int N, int K, size_t room, const char *what) {
    const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 1;
    const std::vector<float> A = small_integers((size_t)(ta ? K : M) * lda, 1),
                             B = small_integers((size_t)(tb ? N : K) * ldb, 2);
    std::vector<float> C = small_integers((size_t)M * ldc, 3), want = C;
    const float alpha = 2.0f, beta = 0.5f;
    plain_gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
    std::vector<float> buf(room + 1, NAN);
    const float guard = 12345.0f;
    buf[room] = guard;
    int slices = 0, columns = 0;
    auto cast = [&](float *dst, const float *src, int rows, int cols, int ld) {
        EXPECT(dst >= buf.data() && dst + (size_t)rows * cols <= buf.data() + room,
               "%s: a copy of %d x %d leaves the buffer", what, rows, cols);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) dst[(size_t)r * cols + c] = src[(size_t)r * ld + c];
    };
    auto product = [&](bool first, int k, const float *a, int la, const float *b, int lb) {
        EXPECT(first == (slices == 0), "%s: slice %d says first = %d", what, slices, (int)first);
        plain_gemm(ta, tb, M, N, k, alpha, a, la, b, lb, first ? beta : 1.0f, C.data(), ldc);
        slices++;
        columns += k;
    };
    const bool ran = gemm_slices::run(buf.data(), room, ta, tb, M, N, K, A.data(), lda, B.data(),
                                      ldb, cast, product);
    EXPECT(buf[room] == guard, "%s: the guard past the buffer was written", what);
    if (!ran) {
        EXPECT(slices == 0, "%s: declined after %d slices", what, slices);
        return 0;
    }
    EXPECT(columns == K, "%s: the slices cover %d of K = %d", what, columns, K);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            EXPECT(C[(size_t)i * ldc + j] == want[(size_t)i * ldc + j],
                   "%s ta=%d tb=%d: C[%d][%d] = %g, want %g", what, (int)ta, (int)tb, i, j,
                   C[(size_t)i * ldc + j], want[(size_t)i * ldc + j]);
    for (int i = 0; i < M; i++) /* the padding of C untouched */
        EXPECT(C[(size_t)i * ldc + N] == small_integers((size_t)M * ldc, 3)[(size_t)i * ldc + N],
               "%s: C's padding in row %d was written", what, i);
    return slices;
}

int main(void) {
    enum { M = 5, N = 7, K = 150 };
    const size_t whole = 8 + (size_t)(M + N) * K;
    for (int t = 0; t < 4; t++) {
        const bool ta = t & 1, tb = t & 2;
        EXPECT(check(ta, tb, M, N, K, whole, "whole") == 1, "whole: not one slice");
        /* room for 70 columns: slices of 64 (64, 64, 22) */
        EXPECT(check(ta, tb, M, N, K, 8 + (size_t)(M + N) * 70, "slices of 64") == 3,
               "slices of 64: not 3 slices");
        /* room for 20 columns: slices of 16 (9 of 16 and one of 6) */
        EXPECT(check(ta, tb, M, N, K, 8 + (size_t)(M + N) * 20, "slices of 16") == 10,
               "slices of 16: not 10 slices");
        /* room for 7 columns: less than the alignment of 8, so none */
        EXPECT(check(ta, tb, M, N, K, 8 + (size_t)(M + N) * 7, "too small") == 0,
               "too small: it did not decline");
        EXPECT(check(ta, tb, M, N, 0, whole, "K = 0") == 0, "K = 0: it did not decline");
        EXPECT(check(ta, tb, 1, 1, 1, 64, "1 x 1 x 1") == 1, "1 x 1 x 1: not one slice");
    }
    EXPECT(gemm_slices::slice_width(8, M, N, K) == 0, "no room: a slice width");
    EXPECT(gemm_slices::slice_width(8 + 12 * 100000, M, N, K) == K, "ample room: not all of K");
    if (failures) {
        printf("%d failures\n", failures);
        return 1;
    }
    printf("ok: the bf16-operand GEMM's slices equal the plain GEMM for every transposition\n");
    return 0;
}
