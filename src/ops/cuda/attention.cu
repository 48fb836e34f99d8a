/* Multi-head softmax attention, causal or not, forward and backward, in the layouts of the CPU
 * kernel: qkv [B, T, 3*D] (q heads, then k heads, then v heads), out [B, T, D], lse [B, H, T].
 *
 * In bf16, by default (sdp_backend_cuda_set_fused_attention turns them off) and at the head sizes
 * they are built for, the fused kernels of flash_attention.cuh run instead (fused() below): they
 * never write the score matrices, and on the H200 they measured the faster (docs/cuda.md). What
 * follows is the path that fp32 always takes, and bf16 where the fused kernels do not apply.
 *
 * Every product is a cuBLAS GEMM in the context's precision (bf16 tensor cores or plain fp32),
 * and the softmax is a small kernel between them. One sequence b at a time, each GEMM is strided-
 * batched over its H heads: head h of q starts at qkv + b*T*3D + h*hs, rows 3D apart, so the heads
 * are a batch of [T, hs] matrices hs floats apart (likewise k, v, out, and the gradients). The
 * score matrices of the sequence, [H, T, T], live in the caller's scratch
 * (sdp_cuda_attention_scratch_bytes) and are reused by the next sequence: a T x T matrix per head
 * of one sequence is the price of running the products on tensor cores, and the lse saved by the
 * forward spares storing any. The scratch is the model's, not the context's workspace, so that
 * it is allocated once, counted as scratch, and predicted by `sdp plan --device cuda`.
 *
 *   forward:  S = scale q k^T;  P = softmax(S) by rows (masked past the diagonal when causal),
 *             saving lse;  out = P v.
 *   backward: P again, from S and the saved lse;  dP = dO v^T;  dS = P * (dP - rowsum(dO * O));
 *             dq += scale dS k;  dk += scale dS^T q;  dv += P^T dO  (accumulating, as on the CPU).
 *
 * Under the causal mask the GEMMs still compute whole T x T matrices, as the model's FLOP count
 * assumes (sdp_tf_train_flops_per_token); the masked entries of P and dS are zero.
 *
 * Dropout on the probabilities (sdp_dropout, as the CPU kernel's): the forward turns P into
 * P' = M P / (1-p) in place after the softmax (lse stays that of P), and out = P' v. The backward
 * regenerates M from the same indices ((b*H + h)*T + i)*T + j: dP' = dO v^T, and
 * dS = P * (M dP' / (1-p) - rowsum(dO * O)), P' going to dv += P'^T dO.
 */
#include "ops/cuda/common.cuh"
#include "ops/cuda/flash_attention.cuh"
#include "sdp/cuda_scratch.h"

#include <initializer_list>
#include <limits.h>
#include <math.h>

enum { SOFTMAX_ROWS = 8 }; /* rows per block of the softmax kernel, one warp each */

/* The heads of one sequence as GEMM operands. Strides in floats. */
typedef struct {
    int T, H, hs;
    int ld_qkv, ld_out; /* row strides of qkv (3D) and of out, dout (D) */
    long long tt;       /* T*T: the stride between the heads' score matrices */
    float scale;
    bool causal;
} heads;

static heads make_heads(int T, int H, int hs, bool causal) {
    heads a;
    a.T = T;
    a.H = H;
    a.hs = hs;
    a.ld_out = H * hs;
    a.ld_qkv = 3 * a.ld_out;
    a.tt = (long long)T * T;
    a.scale = 1.0f / sqrtf((float)hs);
    a.causal = causal;
    return a;
}

/* scores[h] = scale q_h k_h^T, [T, T] per head: row i holds query i's scores over the keys. */
static void head_scores(sdp_cuda_ctx *ctx, float *scores, const float *q, const float *k,
                        const heads &a) {
    sdp_cuda_gemm_strided_batched(ctx, false, true, a.T, a.T, a.hs, a.scale, q, a.ld_qkv, a.hs, k,
                                  a.ld_qkv, a.hs, 0.0f, scores, a.T, a.tt, a.H);
}

/* ---- softmax kernels ------------------------------------------------------------------------ */

/* Keys that query i sees: 0..i under the causal mask, all T otherwise. */
__device__ __forceinline__ int keys_seen(int i, int T, bool causal) {
    return causal ? i + 1 : T;
}

/* In place, one warp per row r < rows of scores [rows, T] (rows = H*T, query i = r % T):
 * P = exp(S - max) / sum over the keys seen, zero past them; lse[r] = max + log(sum). Each lane
 * keeps a running max and sum over its columns (rescaling the sum when its max grows), then the
 * warp combines them: two reads of the row, one write. */
__global__ void softmax_rows_kernel(float *scores, float *lse, int rows, int T, bool causal) {
    const int r = blockIdx.x * SOFTMAX_ROWS + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (r >= rows) return; /* a whole warp leaves together: r is the same across it */
    float *row = scores + (size_t)r * T;
    const int seen = keys_seen(r % T, T, causal);
    float m = -INFINITY, l = 0.0f;
    for (int j = lane; j < seen; j += WARP) {
        const float x = row[j];
        if (x > m) {
            l = l * expf(m - x) + 1.0f; /* expf(-inf) = 0 on a lane's first column */
            m = x;
        } else {
            l += expf(x - m);
        }
    }
    const float row_max = warp_max(m); /* finite: lane 0 saw key 0, which every query sees */
    const float sum = warp_sum(m == -INFINITY ? 0.0f : l * expf(m - row_max));
    const float inv = 1.0f / sum;
    for (int j = lane; j < T; j += WARP) row[j] = j < seen ? expf(row[j] - row_max) * inv : 0.0f;
    if (lane == 0) lse[r] = row_max + logf(sum);
}

/* Elementwise over [rows, T] (rows = H*T, query i = r % T): probs holds scores and becomes
 * P = exp(S - lse), zero past the keys seen; grads holds dP and becomes dS = P * (dP - rowdot). */
__global__ void softmax_grad_kernel(float *probs, float *grads, const float *lse,
                                    const float *rowdot, int rows, int T, bool causal) {
    const size_t n = (size_t)rows * T;
    FOR_EACH_INDEX(idx, n) {
        const int r = (int)(idx / T), j = (int)(idx % T);
        const float p = j < keys_seen(r % T, T, causal) ? expf(probs[idx] - lse[r]) : 0.0f;
        probs[idx] = p;
        grads[idx] = p * (grads[idx] - rowdot[r]);
    }
}

/* In place over one sequence's probabilities [rows, T]: P' = M P / (1-p), element idx being
 * element first + idx of the mask (first = b*H*T*T for sequence b). Entries past the keys seen
 * are 0 already and stay 0. */
__global__ void probs_dropout_kernel(float *probs, size_t n, uint64_t first, uint64_t key,
                                     uint32_t threshold, float keep_scale) {
    FOR_EACH_INDEX(idx, n) {
        probs[idx] =
            sdp_dropout_keeps(key, first + idx, threshold) ? keep_scale * probs[idx] : 0.0f;
    }
}

/* softmax_grad_kernel under dropout: grads holds dP' = dO v^T and becomes
 * dS = P * (M dP' / (1-p) - rowdot); probs holds scores and becomes P' = M P / (1-p) (for dv). */
__global__ void softmax_grad_dropout_kernel(float *probs, float *grads, const float *lse,
                                            const float *rowdot, int rows, int T, bool causal,
                                            uint64_t first, uint64_t key, uint32_t threshold,
                                            float keep_scale) {
    const size_t n = (size_t)rows * T;
    FOR_EACH_INDEX(idx, n) {
        const int r = (int)(idx / T), j = (int)(idx % T);
        const float p = j < keys_seen(r % T, T, causal) ? expf(probs[idx] - lse[r]) : 0.0f;
        const bool keep = sdp_dropout_keeps(key, first + idx, threshold);
        probs[idx] = keep ? keep_scale * p : 0.0f;
        grads[idx] = p * ((keep ? keep_scale * grads[idx] : 0.0f) - rowdot[r]);
    }
}

/* rowdot[r] = dout[b, t, head h] . out[b, t, head h] for the rows r = (b*H + h)*T + t, as lse; one
 * warp per row. */
__global__ void rowdot_kernel(float *rowdot, const float *dout, const float *out, int rows, int T,
                              int H, int hs) {
    const int r = blockIdx.x * SOFTMAX_ROWS + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (r >= rows) return;
    const int t = r % T, bh = r / T, b = bh / H, h = bh % H;
    const size_t at = ((size_t)b * T + t) * H * hs + (size_t)h * hs;
    float s = 0.0f;
    for (int d = lane; d < hs; d += WARP) s += dout[at + d] * out[at + d];
    s = warp_sum(s);
    if (lane == 0) rowdot[r] = s;
}

/* ---- the fused kernels (flash_attention.cuh) ---------------------------------------------------
 */

/* Whether the code this build runs on the context's device has the fused kernels: they are
 * empty below sm_80 (a build for sm_75, or its PTX run on a newer card). Asked once. */
static bool fused_built(sdp_cuda_ctx *ctx) {
    if (ctx->fused_arch == 0) {
        cudaFuncAttributes attr;
        CUDA_CHECK(cudaFuncGetAttributes(&attr, flash::fwd_kernel<16>));
        ctx->fused_arch =
            attr.ptxVersion < attr.binaryVersion ? attr.ptxVersion : attr.binaryVersion;
    }
    return ctx->fused_arch >= 80;
}

/* Whether attention at these sizes runs the fused kernels: the rule `sdp plan --device cuda`
 * predicts by (sdp_cuda_attention_fused: bf16 products, the fused attention on, a head size they
 * are built for, a grid that fits), on code built for sm_80 or newer and a device with the shared
 * memory they need (sm_80 and sm_90 have it; some smaller cards lack it at hs = 128). fp32 keeps
 * the cuBLAS products, whose results equal the CPU's to rounding. The scratch is sized by this
 * (cuda_attention_scratch_bytes), so a call cannot change its mind at run time. */
static bool fused(sdp_cuda_ctx *ctx, int B, int H, int hs) {
    if (!sdp_cuda_attention_fused(ctx->precision, ctx->fused_attention, B, H, hs) ||
        !fused_built(ctx))
        return false;
    SDP_ASSERT(flash::supports(hs)); /* the kernels' list and the plan's agree */
    const size_t need = flash::with_head_size(hs, [](auto HS) {
        const size_t f = flash::sizes<HS>::fwd, kv = flash::sizes<HS>::dkdv;
        const size_t most = f > kv ? f : kv, q = flash::sizes<HS>::dq;
        return most > q ? most : q; /* the most any of the three kernels takes */
    });
    return need <= ctx->max_shared_bytes;
}

/* The fused kernels load their tiles as float4s: inputs must be 16-byte aligned (device
 * allocations and the models' offsets into them are). Others take the cuBLAS path, whose scratch
 * check then says what is wrong if the scratch was sized for the fused kernels. */
static bool aligned(std::initializer_list<const float *> reads) {
    for (const float *p : reads)
        if ((uintptr_t)p % 16 != 0) return false;
    return true;
}

static flash::args fused_args(const float *qkv, int T, int H, int hs, bool causal,
                              sdp_dropout drop) {
    flash::args a = {};
    a.qkv = qkv;
    a.T = T;
    a.H = H;
    a.scale = 1.0f / sqrtf((float)hs);
    a.causal = causal;
    a.dropout = drop.p > 0.0f;
    a.drop_key = drop.key;
    a.drop_threshold = sdp_dropout_threshold(drop.p);
    a.drop_scale = sdp_dropout_scale(drop.p);
    return a;
}

/* Launches kernel over (query or key tiles, B*H) with its shared memory, which is above the
 * default 48 KiB and so must be allowed first. */
template <typename K>
static void launch_fused(sdp_cuda_ctx *ctx, K kernel, size_t smem, int B, int T, int H,
                         const flash::args &a) {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid(ceil_div(T, flash::TILE), (unsigned)(B * H));
    kernel<<<grid, flash::THREADS, smem, ctx->stream>>>(a);
    LAUNCH_CHECK();
}

/* The forward, writing out and lse. */
static void fused_fwd(sdp_cuda_ctx *ctx, flash::args a, float *out, float *lse, int B, int hs) {
    a.o = out;
    a.lse_out = lse;
    flash::with_head_size(hs, [&](auto HS) {
        launch_fused(ctx, flash::fwd_kernel<HS>, flash::sizes<HS>::fwd, B, a.T, a.H, a);
    });
}

/* The backward: a with out, lse, dout, rowdot and dqkv set. */
static void fused_bwd(sdp_cuda_ctx *ctx, const flash::args &a, int B, int hs) {
    flash::with_head_size(hs, [&](auto HS) {
        launch_fused(ctx, flash::dkdv_kernel<HS>, flash::sizes<HS>::dkdv, B, a.T, a.H, a);
        launch_fused(ctx, flash::dq_kernel<HS>, flash::sizes<HS>::dq, B, a.T, a.H, a);
    });
}

/* ---- entry points --------------------------------------------------------------------------- */

static void check_dims(int B, int T, int H, int hs) {
    SDP_CHECK(B > 0 && T > 0 && H > 0 && hs > 0,
              "attention needs positive sizes, got B=%d T=%d H=%d hs=%d: check the model config", B,
              T, H, hs);
    SDP_CHECK((long long)3 * H * hs <= INT_MAX && (long long)B * H * T <= INT_MAX,
              "CUDA attention: B=%d, T=%d and %d heads of %d overflow its int sizes: use a "
              "smaller batch, sequence or model",
              B, T, H, hs);
}

/* The scratch attention_fwd and _bwd take: sdp_cuda_attention_scratch_bytes (sdp/cuda_scratch.h),
 * which `sdp plan --device cuda` predicts by too; the score matrices only where the cuBLAS path
 * will run. */
static size_t cuda_attention_scratch_bytes(const sdp_backend *be, int B, int T, int H, int hs) {
    return sdp_cuda_attention_scratch_bytes(fused(cuda_ctx(be), B, H, hs), B, T, H);
}

/* The cuBLAS path writes whole score matrices into the scratch, which is too small for them when
 * it was sized for the fused kernels and they do not run after all (turned off since, or inputs
 * not 16-byte aligned): fail, rather than write past it. */
static void check_gemm_scratch(sdp_cuda_ctx *ctx, const float *scratch, int B, int T, int H) {
    const size_t need = sdp_cuda_attention_scratch_bytes(false, B, T, H);
    const size_t room = sdp_cuda_bytes_from(ctx, scratch);
    SDP_CHECK(room >= need,
              "CUDA attention: the scratch holds %zu bytes where the cuBLAS path needs %zu (it was "
              "sized for the fused kernels, which are now off or were given inputs not 16-byte "
              "aligned): choose the attention path (sdp_backend_cuda_set_fused_attention) before "
              "sizing the scratch with sdp_attention_scratch_bytes, and pass aligned inputs",
              room, need);
}

/* Layouts as sdp_attention_fwd: qkv [B, T, 3*D], out [B, T, D], lse [B, H, T], D = H*hs, scale
 * 1/sqrt(hs). causal: query t sees keys 0..t; otherwise every key (bidirectional, as in ViT).
 * The products (scores, P V and the five of the backward) are cuBLAS GEMMs in the context's
 * precision, batched over the heads of one sequence at a time. scratch is device memory of
 * cuda_attention_scratch_bytes(B, T, H, hs) bytes (sdp/cuda_scratch.h): on this path, the score
 * matrices of one sequence and the backward's row sums. */
static void cuda_attention_fwd(const sdp_backend *be, float *out, float *lse, const float *qkv,
                               int B, int T, int H, int hs, bool causal, sdp_dropout drop,
                               float *scratch) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    check_dims(B, T, H, hs);
    SDP_ASSERT(scratch); /* cuda_attention_scratch_bytes(B, T, H, hs) bytes of device memory */
    if (fused(ctx, B, H, hs) && aligned({qkv})) {
        fused_fwd(ctx, fused_args(qkv, T, H, hs, causal, drop), out, lse, B, hs);
        return;
    }
    check_gemm_scratch(ctx, scratch, B, T, H);
    const heads a = make_heads(T, H, hs, causal);
    const int rows = H * T; /* score rows of one sequence */
    float *scores = scratch;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * a.ld_qkv, *k = q + a.ld_out, *v = k + a.ld_out;
        head_scores(ctx, scores, q, k, a);
        softmax_rows_kernel<<<ceil_div(rows, SOFTMAX_ROWS), SOFTMAX_ROWS * WARP, 0, ctx->stream>>>(
            scores, lse + (size_t)b * rows, rows, T, causal);
        LAUNCH_CHECK();
        if (drop.p > 0.0f) {
            const size_t per_seq = (size_t)rows * T;
            probs_dropout_kernel<<<elementwise_blocks(per_seq), ELEMENTWISE_THREADS, 0,
                                   ctx->stream>>>(scores, per_seq, (uint64_t)b * per_seq, drop.key,
                                                  sdp_dropout_threshold(drop.p),
                                                  sdp_dropout_scale(drop.p));
            LAUNCH_CHECK();
        }
        /* out_h = P_h v_h: [T, hs] per head, rows D apart */
        sdp_cuda_gemm_strided_batched(ctx, false, false, T, hs, T, 1.0f, scores, T, a.tt, v,
                                      a.ld_qkv, hs, 0.0f, out + (size_t)b * T * a.ld_out, a.ld_out,
                                      hs, H);
    }
}

/* dqkv += gradient w.r.t. qkv; out and lse are those saved by the forward with the same causal
 * and drop. */
static void cuda_attention_bwd(const sdp_backend *be, float *dqkv, const float *dout,
                               const float *qkv, const float *out, const float *lse, int B, int T,
                               int H, int hs, bool causal, sdp_dropout drop, float *scratch) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (!dqkv) return;
    check_dims(B, T, H, hs);
    SDP_ASSERT(scratch); /* laid out as cuda_attention_scratch_bytes(B, T, H, hs) describes */
    const heads a = make_heads(T, H, hs, causal);
    const int rows = H * T;
    const size_t per_seq = (size_t)H * a.tt, all_rows = (size_t)B * rows;
    float *probs = scratch;
    float *grads = probs + per_seq, *rowdot = grads + per_seq;
    const bool run_fused = fused(ctx, B, H, hs) && aligned({qkv, dout});
    if (run_fused)
        rowdot = scratch; /* the fused kernels need only the row sums */
    else
        check_gemm_scratch(ctx, scratch, B, T, H);
    rowdot_kernel<<<ceil_div(all_rows, SOFTMAX_ROWS), SOFTMAX_ROWS * WARP, 0, ctx->stream>>>(
        rowdot, dout, out, (int)all_rows, T, H, hs);
    LAUNCH_CHECK();
    if (run_fused) {
        flash::args f = fused_args(qkv, T, H, hs, causal, drop);
        f.out = out;
        f.dout = dout;
        f.lse = lse;
        f.rowdot = rowdot;
        f.dqkv = dqkv;
        fused_bwd(ctx, f, B, hs);
        return;
    }
    for (int b = 0; b < B; b++) {
        const size_t row0 = (size_t)b * T;
        const float *q = qkv + row0 * a.ld_qkv, *k = q + a.ld_out, *v = k + a.ld_out;
        float *dq = dqkv + row0 * a.ld_qkv, *dk = dq + a.ld_out, *dv = dk + a.ld_out;
        const float *d_o = dout + row0 * a.ld_out;
        head_scores(ctx, probs, q, k, a);
        /* dP_h = dO_h v_h^T: [T, T] per head */
        sdp_cuda_gemm_strided_batched(ctx, false, true, T, T, hs, 1.0f, d_o, a.ld_out, hs, v,
                                      a.ld_qkv, hs, 0.0f, grads, T, a.tt, H);
        if (drop.p > 0.0f)
            softmax_grad_dropout_kernel<<<elementwise_blocks(per_seq), ELEMENTWISE_THREADS, 0,
                                          ctx->stream>>>(
                probs, grads, lse + (size_t)b * rows, rowdot + (size_t)b * rows, rows, T, causal,
                (uint64_t)b * per_seq, drop.key, sdp_dropout_threshold(drop.p),
                sdp_dropout_scale(drop.p));
        else
            softmax_grad_kernel<<<elementwise_blocks(per_seq), ELEMENTWISE_THREADS, 0,
                                  ctx->stream>>>(probs, grads, lse + (size_t)b * rows,
                                                 rowdot + (size_t)b * rows, rows, T, causal);
        LAUNCH_CHECK();
        /* dq_h += scale dS_h k_h;  dk_h += scale dS_h^T q_h;  dv_h += P_h^T dO_h (P'_h^T dO_h) */
        sdp_cuda_gemm_strided_batched(ctx, false, false, T, hs, T, a.scale, grads, T, a.tt, k,
                                      a.ld_qkv, hs, 1.0f, dq, a.ld_qkv, hs, H);
        sdp_cuda_gemm_strided_batched(ctx, true, false, T, hs, T, a.scale, grads, T, a.tt, q,
                                      a.ld_qkv, hs, 1.0f, dk, a.ld_qkv, hs, H);
        sdp_cuda_gemm_strided_batched(ctx, true, false, T, hs, T, 1.0f, probs, T, a.tt, d_o,
                                      a.ld_out, hs, 1.0f, dv, a.ld_qkv, hs, H);
    }
}

void cuda_ops_attention(sdp_backend *t) {
    t->attention_scratch_bytes = cuda_attention_scratch_bytes;
    t->attention_fwd = cuda_attention_fwd;
    t->attention_bwd = cuda_attention_bwd;
}
