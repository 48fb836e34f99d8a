/* The fused attention kernels of src/ops/cuda/flash_attention.cuh, run on the CPU by cuda_emu.h,
 * against a naive double-precision attention: forward (out, lse) and backward (dq, dk, dv added
 * into gradients that start non-zero), causal and not, without and with dropout on the
 * probabilities, over sequence lengths that fill no tile, one tile exactly, and several, and every
 * head size the kernels are built for.
 *
 * Two passes. With bf16 kept as fp32 (emu::exact_bf16) the kernels compute plain fp32
 * attention, so any slip in the tiling, the masks, the online softmax or the indexing shows
 * against the fp32 tolerance of tests/test_backend_ops.c (1e-4 of |ref| + rms(ref)). With bf16
 * rounding on, they must meet the bf16 tolerance of `test_backend_ops cuda-bf16` (normwise 2e-2).
 * On a GPU the same kernels are checked by `test_backend_ops cuda-bf16` (docs/cuda.md). */
#include "cuda_emu.h"

#include "ops/cuda/flash_attention.cuh"

#include <vector>

alignas(128) unsigned char flash::smem[(256 << 10) + 4096]; /* bf16 takes 4 bytes here */

namespace {

struct shape {
    int B, T, H, hs;
    bool causal;
    float drop; /* dropout on the probabilities */
};

const uint64_t DROP_KEY = 0xfeedfacecafebeefull;

/* The keep factor of probability (b*H + h, i, j) under s's dropout: 0 or 1 / (1-p). */
double keep_factor(const shape &s, int bh, int i, int j) {
    if (s.drop == 0.0f) return 1.0;
    const uint64_t at = ((uint64_t)bh * s.T + (uint64_t)i) * s.T + (uint64_t)j;
    return sdp_dropout_keeps(DROP_KEY, at, sdp_dropout_threshold(s.drop))
               ? (double)sdp_dropout_scale(s.drop)
               : 0.0;
}

struct tensors {
    std::vector<float> qkv, dout, out, lse, rowdot, dqkv, dqkv0;
};

float uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* The naive attention in double: out, lse, and the gradient of qkv for dout. */
void reference(const shape &s, const tensors &x, std::vector<double> &out, std::vector<double> &lse,
               std::vector<double> &dqkv) {
    const int T = s.T, H = s.H, hs = s.hs, D = H * hs;
    const double scale = 1.0 / sqrt((double)hs);
    out.assign((size_t)s.B * T * D, 0.0);
    lse.assign((size_t)s.B * H * T, 0.0);
    dqkv.assign((size_t)s.B * T * 3 * D, 0.0);
    std::vector<double> p(T), dp(T), keep(T);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < H; h++) {
            auto q = [&](int t, int d) {
                return (double)x.qkv[((size_t)b * T + t) * 3 * D + h * hs + d];
            };
            auto k = [&](int t, int d) { return q(t, D + d); };
            auto v = [&](int t, int d) { return q(t, 2 * D + d); };
            auto dq = [&](int t, int d) -> double & {
                return dqkv[((size_t)b * T + t) * 3 * D + h * hs + d];
            };
            auto dO = [&](int t, int d) {
                return (double)x.dout[((size_t)b * T + t) * D + h * hs + d];
            };
            for (int i = 0; i < T; i++) {
                const int seen = s.causal ? i + 1 : T;
                double m = -INFINITY;
                for (int j = 0; j < seen; j++) {
                    double dot = 0;
                    for (int d = 0; d < hs; d++) dot += q(i, d) * k(j, d);
                    p[j] = scale * dot;
                    m = fmax(m, p[j]);
                }
                double sum = 0;
                for (int j = 0; j < seen; j++) sum += exp(p[j] - m);
                lse[((size_t)b * H + h) * T + i] = m + log(sum);
                for (int j = 0; j < seen; j++) {
                    p[j] = exp(p[j] - m) / sum;
                    keep[j] = keep_factor(s, b * H + h, i, j);
                }
                /* out = P' v with P' = M P / (1-p); rowdot = dO . out */
                double rowdot = 0;
                for (int j = 0; j < seen; j++) {
                    dp[j] = 0;
                    for (int d = 0; d < hs; d++) dp[j] += dO(i, d) * v(j, d);
                    rowdot += keep[j] * p[j] * dp[j];
                }
                for (int d = 0; d < hs; d++) {
                    double o = 0;
                    for (int j = 0; j < seen; j++) o += keep[j] * p[j] * v(j, d);
                    out[((size_t)b * T + i) * D + h * hs + d] = o;
                }
                for (int j = 0; j < seen; j++) {
                    const double ds = p[j] * (keep[j] * dp[j] - rowdot);
                    for (int d = 0; d < hs; d++) {
                        dq(i, d) += scale * ds * k(j, d);
                        dq(j, D + d) += scale * ds * q(i, d);
                        dq(j, 2 * D + d) += keep[j] * p[j] * dO(i, d);
                    }
                }
            }
        }
}

/* max |got - ref| / (|ref| + rms(ref)): the elementwise error of tests/test_backend_ops.c. */
double elementwise_error(const std::vector<double> &got, const std::vector<double> &ref) {
    double sq = 0, worst = 0;
    for (double r : ref) sq += r * r;
    const double rms = sqrt(sq / (double)ref.size());
    for (size_t i = 0; i < ref.size(); i++)
        worst = fmax(worst, fabs(got[i] - ref[i]) / (fabs(ref[i]) + rms));
    return worst;
}

/* |got - ref|_2 / |ref|_2: the normwise error of the bf16 checks. */
double normwise_error(const std::vector<double> &got, const std::vector<double> &ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / fmax(den, 1e-300));
}

template <int HS> void run_kernels(const shape &s, tensors &x) {
    const int T = s.T, D = s.H * HS;
    const unsigned tiles = (unsigned)((T + flash::TILE - 1) / flash::TILE);
    flash::args a = {};
    a.qkv = x.qkv.data();
    a.dout = x.dout.data();
    a.o = x.out.data();
    a.lse_out = x.lse.data();
    a.T = T;
    a.H = s.H;
    a.scale = 1.0f / sqrtf((float)HS);
    a.causal = s.causal;
    a.dropout = s.drop > 0.0f;
    a.drop_key = DROP_KEY;
    a.drop_threshold = sdp_dropout_threshold(s.drop);
    a.drop_scale = sdp_dropout_scale(s.drop);
    const dim3 grid{tiles, (unsigned)(s.B * s.H), 1}, block{flash::THREADS, 1, 1};
    emu::launch(grid, block, flash::smem, flash::sizes<HS>::fwd, [&] { flash::fwd_kernel<HS>(a); });

    /* rowdot = dO . out per row, from the forward's out, as attention.cu's rowdot_kernel does */
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.H; h++)
            for (int t = 0; t < T; t++) {
                float dot = 0;
                for (int d = 0; d < HS; d++) {
                    const size_t at = ((size_t)b * T + t) * D + h * HS + d;
                    dot += x.dout[at] * x.out[at];
                }
                x.rowdot[((size_t)b * s.H + h) * T + t] = dot;
            }
    a.out = x.out.data();
    a.lse = x.lse.data();
    a.rowdot = x.rowdot.data();
    a.dqkv = x.dqkv.data();
    emu::launch(grid, block, flash::smem, flash::sizes<HS>::dkdv,
                [&] { flash::dkdv_kernel<HS>(a); });
    emu::launch(grid, block, flash::smem, flash::sizes<HS>::dq, [&] { flash::dq_kernel<HS>(a); });
}

/* Runs one shape; returns whether every result is within tolerance. */
bool check(const shape &s, bool exact) {
    emu::exact_bf16 = exact;
    const int D = s.H * s.hs;
    const size_t rows = (size_t)s.B * s.T;
    tensors x;
    uint64_t state = 1234567u + (uint64_t)s.T * 31u + (uint64_t)s.hs;
    x.qkv.resize(rows * 3 * D);
    x.dout.resize(rows * D);
    x.dqkv0.resize(rows * 3 * D);
    for (float &f : x.qkv) f = 1.5f * uniform(&state);
    for (float &f : x.dout) f = uniform(&state);
    for (float &f : x.dqkv0) f = 0.5f * uniform(&state);
    x.dqkv = x.dqkv0;
    x.out.assign(rows * D, NAN);
    x.lse.assign((size_t)s.B * s.H * s.T, NAN);
    x.rowdot.assign(x.lse.size(), 0.0f);
    if (!flash::supports(s.hs)) emu::fail("no kernel for this head size");
    flash::with_head_size(s.hs, [&](auto HS) { run_kernels<HS>(s, x); });

    std::vector<double> out, lse, dqkv;
    reference(s, x, out, lse, dqkv);
    std::vector<double> got_out(x.out.begin(), x.out.end()), got_lse(x.lse.begin(), x.lse.end());
    std::vector<double> got_grad(dqkv.size());
    for (size_t i = 0; i < got_grad.size(); i++) got_grad[i] = (double)x.dqkv[i] - x.dqkv0[i];

    const double e_out = exact ? elementwise_error(got_out, out) : normwise_error(got_out, out);
    const double e_lse = exact ? elementwise_error(got_lse, lse) : normwise_error(got_lse, lse);
    const double e_grad =
        exact ? elementwise_error(got_grad, dqkv) : normwise_error(got_grad, dqkv);
    const double tol = exact ? 1e-4 : 2e-2;
    const bool ok = e_out <= tol && e_lse <= tol && e_grad <= tol; /* NaN fails too */
    printf("%-4s B=%d T=%3d H=%d hs=%3d %-6s drop %.2f  out %.1e  lse %.1e  dqkv %.1e  "
           "(tolerance %.0e, %s)  %s\n",
           exact ? "fp32" : "bf16", s.B, s.T, s.H, s.hs, s.causal ? "causal" : "full", s.drop,
           e_out, e_lse, e_grad, tol, exact ? "elementwise" : "normwise", ok ? "ok" : "FAILED");
    return ok;
}

} // namespace

int main() {
    const shape shapes[] = {
        {2, 5, 2, 16, true, 0.0f},
        {2, 5, 2, 16, false, 0.0f},
        {1, 33, 2, 32, true, 0.0f},
        {1, 33, 1, 32, false, 0.0f},
        {1, 64, 2, 64, true, 0.0f},
        {1, 130, 2, 64, true, 0.0f},
        {2, 130, 1, 64, false, 0.0f},
        {1, 97, 1, 128, true, 0.0f},
        {1, 70, 1, 128, false, 0.0f},
        {2, 37, 2, 32, true, 0.25f},
        {1, 130, 1, 64, false, 0.25f},
        {1, 70, 2, 16, true, 0.5f},
        /* T one short of two tiles: the last key tile's last row is the first past T */
        {1, 127, 1, 16, false, 0.0f},
        {1, 127, 1, 16, true, 0.0f},
    };
    int failed = 0, checked = 0;
    for (bool exact : {true, false})
        for (const shape &s : shapes) {
            failed += !check(s, exact);
            checked++;
        }
    printf("%d of %d checks within tolerance\n", checked - failed, checked);
    return failed ? 1 : 0;
}
