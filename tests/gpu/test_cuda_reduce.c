/* The CUDA reductions behind the gradient norm, clipping and averaging (src/ops/cuda/reduce.cu),
 * through the CUDA backend against the CPU backend's sdp_sumsq and sdp_scale, and the device
 * communicator's refusal of a single rank (src/ops/cuda/comm_nccl.c; reductions among GPUs need a
 * GPU per rank, which a one-GPU machine cannot test: tests/gpu/test_cuda_train.sh covers the staged
 * path instead).
 *
 * sumsq: both sides accumulate float squares in double, in different orders, so they agree to
 * about n double epsilons relative (tolerance 1e-12), and the device gives the bitwise same sum
 * twice. scale: one float product per element on both sides, so bitwise equal.
 *
 * Exits 77 (skipped, for ctest) when there is no CUDA device or no driver. */
#include "../testutil.h"

#include "sdp/backend.h"

static const size_t SIZES[] = {1, 31, 256, 1000, 262147, 5000011};

static float *random_floats(size_t n, uint64_t seed) {
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    sdp_rng rng = sdp_rng_make(seed, 0);
    tu_fill(x, n, &rng, 3.0f);
    return x;
}

static float *to_device(const sdp_backend *be, const float *x, size_t n) {
    float *d = be->alloc(be, SDP_MEM_GRADS, n * sizeof *x);
    be->upload(be, d, x, n * sizeof *x);
    return d;
}

static void test_sumsq(void **state) {
    const sdp_backend *be = *state;
    for (size_t i = 0; i < sizeof SIZES / sizeof *SIZES; i++) {
        const size_t n = SIZES[i];
        float *x = random_floats(n, 40 + i);
        float *d = to_device(be, x, n);
        const double want = sdp_sumsq(tu_cpu(SDP_GEMM_DNNL), x, n), got = sdp_sumsq(be, d, n);
        const double again = sdp_sumsq(be, d, n), rel = fabs(got - want) / want;
        printf("  sumsq n=%-8zu cpu %.17g cuda %.17g rel %.2e\n", n, want, got, rel);
        assert_true(rel <= 1e-12);
        assert_true(memcmp(&got, &again, sizeof got) == 0);
        be->free(be, d);
        free(x);
    }
    assert_true(sdp_sumsq(be, NULL, 0) == 0);
}

static void test_scale(void **state) {
    const sdp_backend *be = *state;
    const float factors[] = {0.25f, 1.0f, -3.5f, 0.1f};
    for (size_t i = 0; i < sizeof SIZES / sizeof *SIZES; i++)
        for (size_t f = 0; f < sizeof factors / sizeof *factors; f++) {
            const size_t n = SIZES[i];
            float *x = random_floats(n, 70 + i), *got = malloc(n * sizeof *got);
            assert_non_null(got);
            float *d = to_device(be, x, n);
            sdp_scale(be, d, n, factors[f]);
            be->download(be, got, d, n * sizeof *got);
            sdp_scale(tu_cpu(SDP_GEMM_DNNL), x, n, factors[f]);
            assert_memory_equal(got, x, n * sizeof *x);
            be->free(be, d);
            free(x);
            free(got);
        }
    printf("  scale: bitwise equal to sdp_scale for %zu sizes and 4 factors\n",
           sizeof SIZES / sizeof *SIZES);
}

/* One rank has no one to reduce with: no device communicator, and nothing to wait for. */
static void test_single_rank_comm(void **state) {
    const sdp_backend *be = *state;
    assert_null(be->comm_open(be, MPI_COMM_SELF));
    be->allreduce_wait(be);
    be->sync(be);
}

static int create_ctx(void **state) {
    *state = sdp_backend_cuda(0, SDP_PRECISION_FP32);
    return 0;
}

static int destroy_ctx(void **state) {
    sdp_backend_destroy(*state);
    return 0;
}

int main(int argc, char **argv) {
    if (!sdp_backend_cuda_available()) {
        printf("test_cuda_reduce: skipped: no CUDA device\n");
        return 77;
    }
    MPI_Init(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sumsq),
        cmocka_unit_test(test_scale),
        cmocka_unit_test(test_single_rank_comm),
    };
    const int failed = cmocka_run_group_tests(tests, create_ctx, destroy_ctx);
    MPI_Finalize();
    return failed;
}
