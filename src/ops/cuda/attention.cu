/* Multi-head softmax attention, fp32, causal or not, forward and backward, in the layouts of the
 * CPU kernel: qkv [B, T, 3*D] (q heads, then k heads, then v heads), out [B, T, D], lse [B, H, T].
 *
 * Written for clarity first. A block serves one (batch, head) and ROWS consecutive rows, one warp
 * per row, and walks the other side of the score matrix in tiles of 32 rows staged in shared
 * memory, so that each tile read from global memory serves ROWS rows:
 *  - forward: a warp owns a query row; lane j scores key j of the tile and the warp keeps an
 *    online softmax (running max m, running sum l, output accumulator rescaled when m grows), so
 *    nothing of size T x T exists anywhere. It saves out and lse = m + log l.
 *  - backward, two kernels, each writing only rows it owns (no atomics, deterministic):
 *    dq: a warp owns a query row and walks the key tiles;
 *    dk, dv: a warp owns a key row and walks the query tiles.
 *    Both recompute P = exp(score - lse) from the saved lse, with
 *    dS = P * (dO.v - rowsum(dO * O)), dq = scale dS k, dk = scale dS^T q, dv = P^T dO.
 * Inside a warp, lane d holds output columns d, d + 32, ... (up to MAX_PER_LANE of them).
 * Rows of a tile that lanes read whole sit at an odd stride, so the 32 lanes hit 32 banks.
 */
#include "ops/cuda/common.cuh"

#include <limits.h>
#include <math.h>

enum {
    ROWS = 8,  /* rows (warps) per block */
    TILE = 32, /* rows of the other side per tile: one per lane */
    MAX_PER_LANE = SDP_CUDA_ATTENTION_MAX_HS / WARP,
    DEFAULT_SHARED_BYTES = 48 * 1024 /* more must be asked for, per kernel */
};

/* Shapes of one call. Row strides: qkv rows are 3*D floats, out and dout rows are D. */
typedef struct {
    int T, H, hs;
    int ld; /* stride of tile rows that one lane reads whole: hs, made odd */
    size_t D;
    float scale;
    bool causal;
} attn_dims;

static attn_dims make_dims(int T, int H, int hs, bool causal) {
    attn_dims a;
    a.T = T;
    a.H = H;
    a.hs = hs;
    a.ld = hs | 1;
    a.D = (size_t)H * hs;
    a.scale = 1.0f / sqrtf((float)hs);
    a.causal = causal;
    return a;
}

/* dst[r * ld_dst + d] = src[(r0 + r) * ld_src + d] for the TILE rows r, zero past row T.
 * Every thread of the block takes part. */
__device__ void load_tile(float *dst, int ld_dst, const float *src, size_t ld_src, int r0, int T,
                          int hs) {
    for (int idx = threadIdx.x; idx < TILE * hs; idx += blockDim.x) {
        int r = idx / hs, d = idx % hs;
        dst[r * ld_dst + d] = r0 + r < T ? src[(size_t)(r0 + r) * ld_src + d] : 0.0f;
    }
}

/* A row of hs floats into this warp's slot of shared memory, zero when the row is past T. */
__device__ void load_row(float *dst, const float *src, bool valid, int hs) {
    for (int d = threadIdx.x % WARP; d < hs; d += WARP) dst[d] = valid ? src[d] : 0.0f;
    __syncwarp();
}

__device__ float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

/* acc[jj] += sum over the tile's rows j of w_j * tile[j * ld + lane + 32 jj], where w_j is lane
 * j's w. Rows past T hold zeros and carry w = 0. */
__device__ void accumulate_rows(float acc[MAX_PER_LANE], float w, const float *tile, int ld,
                                int hs) {
    int lane = threadIdx.x % WARP;
    for (int j = 0; j < TILE; j++) {
        float wj = __shfl_sync(0xffffffffu, w, j);
#pragma unroll
        for (int jj = 0; jj < MAX_PER_LANE; jj++) {
            int d = lane + jj * WARP;
            if (d < hs) acc[jj] += wj * tile[j * ld + d];
        }
    }
}

/* Can query row t see key row s? */
__device__ bool visible(const attn_dims &a, int t, int s) {
    return t < a.T && s < a.T && (!a.causal || s <= t);
}

/* ---- forward ------------------------------------------------------------------------------- */

static size_t fwd_shared_floats(const attn_dims &a) {
    return (size_t)TILE * a.ld + (size_t)TILE * a.hs + (size_t)ROWS * a.hs;
}

/* grid (row blocks, B*H). */
__global__ void attention_fwd_kernel(float *out, float *lse, const float *qkv, attn_dims a) {
    extern __shared__ float smem[];
    float *ks = smem, *vs = ks + TILE * a.ld, *qs = vs + TILE * a.hs;
    int bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int t = blockIdx.x * ROWS + warp;
    bool active = t < a.T;
    size_t ld_qkv = 3 * a.D;
    const float *base = qkv + (size_t)b * a.T * ld_qkv + (size_t)h * a.hs;
    float *q = qs + warp * a.hs;
    load_row(q, base + (size_t)t * ld_qkv, active, a.hs);

    float acc[MAX_PER_LANE];
#pragma unroll
    for (int jj = 0; jj < MAX_PER_LANE; jj++) acc[jj] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int last_row = min(a.T, (int)(blockIdx.x + 1) * ROWS) - 1;
    int key_end = a.causal ? last_row + 1 : a.T; /* the same for the whole block */
    for (int s0 = 0; s0 < key_end; s0 += TILE) {
        __syncthreads(); /* the previous tile is no longer read */
        load_tile(ks, a.ld, base + a.D, ld_qkv, s0, a.T, a.hs);
        load_tile(vs, a.hs, base + 2 * a.D, ld_qkv, s0, a.T, a.hs);
        __syncthreads();
        if (!active) continue;
        bool vis = visible(a, t, s0 + lane);
        float score = vis ? a.scale * dot(q, ks + lane * a.ld, a.hs) : -INFINITY;
        /* Key 0 is in the first tile and visible to every row, so m is finite from then on. */
        float m_new = fmaxf(m, warp_max(score));
        float p = vis ? expf(score - m_new) : 0.0f;
        float rescale = expf(m - m_new); /* 0 on the first tile, where m is -inf */
        l = l * rescale + warp_sum(p);
#pragma unroll
        for (int jj = 0; jj < MAX_PER_LANE; jj++) acc[jj] *= rescale;
        accumulate_rows(acc, p, vs, a.hs, a.hs);
        m = m_new;
    }
    if (!active) return;
    float inv = 1.0f / l;
    float *o = out + ((size_t)b * a.T + t) * a.D + (size_t)h * a.hs;
#pragma unroll
    for (int jj = 0; jj < MAX_PER_LANE; jj++) {
        int d = lane + jj * WARP;
        if (d < a.hs) o[d] = acc[jj] * inv;
    }
    if (lane == 0) lse[(size_t)bh * a.T + t] = m + logf(l);
}

/* ---- backward ------------------------------------------------------------------------------ */

/* rowdot[bh * T + t] = dout[b, t, head h] . out[b, t, head h], one warp per (bh, t). */
__global__ void attention_rowdot_kernel(float *rowdot, const float *dout, const float *out,
                                        attn_dims a, int rows) {
    int r = blockIdx.x * ROWS + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (r >= rows) return;
    int t = r % a.T, bh = r / a.T, b = bh / a.H, h = bh % a.H;
    size_t at = ((size_t)b * a.T + t) * a.D + (size_t)h * a.hs;
    float s = 0.0f;
    for (int d = lane; d < a.hs; d += WARP) s += dout[at + d] * out[at + d];
    s = warp_sum(s);
    if (lane == 0) rowdot[r] = s;
}

static size_t dq_shared_floats(const attn_dims &a) {
    return 2 * (size_t)TILE * a.ld + 2 * (size_t)ROWS * a.hs;
}

/* dq += scale * sum over keys s of dS[t, s] k[s]: a warp per query row t. grid (row blocks, B*H) */
__global__ void attention_dq_kernel(float *dqkv, const float *dout, const float *qkv,
                                    const float *lse, const float *rowdot, attn_dims a) {
    extern __shared__ float smem[];
    float *ks = smem, *vs = ks + TILE * a.ld, *qs = vs + TILE * a.ld, *dos = qs + ROWS * a.hs;
    int bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int t = blockIdx.x * ROWS + warp;
    bool active = t < a.T;
    size_t ld_qkv = 3 * a.D;
    const float *base = qkv + (size_t)b * a.T * ld_qkv + (size_t)h * a.hs;
    float *q = qs + warp * a.hs, *d_o = dos + warp * a.hs;
    load_row(q, base + (size_t)t * ld_qkv, active, a.hs);
    load_row(d_o, dout + ((size_t)b * a.T + t) * a.D + (size_t)h * a.hs, active, a.hs);
    float lse_t = active ? lse[(size_t)bh * a.T + t] : 0.0f;
    float rowdot_t = active ? rowdot[(size_t)bh * a.T + t] : 0.0f;

    float acc[MAX_PER_LANE];
#pragma unroll
    for (int jj = 0; jj < MAX_PER_LANE; jj++) acc[jj] = 0.0f;
    int last_row = min(a.T, (int)(blockIdx.x + 1) * ROWS) - 1;
    int key_end = a.causal ? last_row + 1 : a.T;
    for (int s0 = 0; s0 < key_end; s0 += TILE) {
        __syncthreads();
        load_tile(ks, a.ld, base + a.D, ld_qkv, s0, a.T, a.hs);
        load_tile(vs, a.ld, base + 2 * a.D, ld_qkv, s0, a.T, a.hs);
        __syncthreads();
        if (!active) continue;
        float ds = 0.0f;
        if (visible(a, t, s0 + lane)) {
            float p = expf(a.scale * dot(q, ks + lane * a.ld, a.hs) - lse_t);
            ds = p * (dot(d_o, vs + lane * a.ld, a.hs) - rowdot_t);
        }
        accumulate_rows(acc, ds, ks, a.ld, a.hs);
    }
    if (!active) return;
    float *dq = dqkv + ((size_t)b * a.T + t) * ld_qkv + (size_t)h * a.hs;
#pragma unroll
    for (int jj = 0; jj < MAX_PER_LANE; jj++) {
        int d = lane + jj * WARP;
        if (d < a.hs) dq[d] += a.scale * acc[jj];
    }
}

static size_t dkv_shared_floats(const attn_dims &a) {
    return 2 * (size_t)TILE * a.ld + 2 * (size_t)TILE + 2 * (size_t)ROWS * a.hs;
}

/* dk += scale * sum over queries t of dS[t, s] q[t] and dv += sum over t of P[t, s] dO[t]: a warp
 * per key row s. grid (row blocks, B*H) */
__global__ void attention_dkv_kernel(float *dqkv, const float *dout, const float *qkv,
                                     const float *lse, const float *rowdot, attn_dims a) {
    extern __shared__ float smem[];
    float *qt = smem, *dot_t = qt + TILE * a.ld; /* query tile: q rows and dout rows */
    float *lse_t = dot_t + TILE * a.ld, *rowdot_t = lse_t + TILE;
    float *krows = rowdot_t + TILE, *vrows = krows + ROWS * a.hs;
    int bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int s = blockIdx.x * ROWS + warp;
    bool active = s < a.T;
    size_t ld_qkv = 3 * a.D;
    const float *base = qkv + (size_t)b * a.T * ld_qkv + (size_t)h * a.hs;
    const float *dout_base = dout + (size_t)b * a.T * a.D + (size_t)h * a.hs;
    float *k = krows + warp * a.hs, *v = vrows + warp * a.hs;
    load_row(k, base + (size_t)s * ld_qkv + a.D, active, a.hs);
    load_row(v, base + (size_t)s * ld_qkv + 2 * a.D, active, a.hs);

    float dk[MAX_PER_LANE], dv[MAX_PER_LANE];
#pragma unroll
    for (int jj = 0; jj < MAX_PER_LANE; jj++) dk[jj] = dv[jj] = 0.0f;
    /* Under the causal mask no query before the block's first key sees any of its keys. */
    int query_begin = a.causal ? (int)blockIdx.x * ROWS : 0;
    for (int t0 = query_begin; t0 < a.T; t0 += TILE) {
        __syncthreads();
        load_tile(qt, a.ld, base, ld_qkv, t0, a.T, a.hs);
        load_tile(dot_t, a.ld, dout_base, a.D, t0, a.T, a.hs);
        for (int r = threadIdx.x; r < TILE; r += blockDim.x) {
            bool in = t0 + r < a.T;
            lse_t[r] = in ? lse[(size_t)bh * a.T + t0 + r] : 0.0f;
            rowdot_t[r] = in ? rowdot[(size_t)bh * a.T + t0 + r] : 0.0f;
        }
        __syncthreads();
        if (!active) continue;
        float p = 0.0f, ds = 0.0f;
        if (visible(a, t0 + lane, s)) {
            p = expf(a.scale * dot(qt + lane * a.ld, k, a.hs) - lse_t[lane]);
            ds = p * (dot(dot_t + lane * a.ld, v, a.hs) - rowdot_t[lane]);
        }
        accumulate_rows(dv, p, dot_t, a.ld, a.hs);
        accumulate_rows(dk, ds, qt, a.ld, a.hs);
    }
    if (!active) return;
    float *dk_row = dqkv + ((size_t)b * a.T + s) * ld_qkv + a.D + (size_t)h * a.hs;
    float *dv_row = dk_row + a.D;
#pragma unroll
    for (int jj = 0; jj < MAX_PER_LANE; jj++) {
        int d = lane + jj * WARP;
        if (d < a.hs) {
            dk_row[d] += a.scale * dk[jj];
            dv_row[d] += dv[jj];
        }
    }
}

/* ---- launches ------------------------------------------------------------------------------ */

static void check_dims(int B, int T, int H, int hs) {
    SDP_CHECK(B > 0 && T > 0 && H > 0 && hs > 0,
              "attention needs positive sizes, got B=%d T=%d H=%d hs=%d: check the model config", B,
              T, H, hs);
    SDP_CHECK(hs <= SDP_CUDA_ATTENTION_MAX_HS,
              "CUDA attention supports head sizes up to %d, got %d: use more heads or the CPU",
              SDP_CUDA_ATTENTION_MAX_HS, hs);
    SDP_CHECK((long)B * H <= 65535,
              "CUDA attention supports B*H up to 65535, got %ld: use a smaller batch", (long)B * H);
    SDP_CHECK((long)B * H * T <= INT_MAX,
              "CUDA attention supports B*H*T up to %d rows, got %ld: use a smaller batch", INT_MAX,
              (long)B * H * T);
}

/* Kernels with more than the default 48 KiB of dynamic shared memory must say so first. */
template <class Kernel> static void allow_shared(Kernel *kernel, size_t bytes) {
    if (bytes > DEFAULT_SHARED_BYTES)
        CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

void sdp_cuda_attention_fwd(sdp_cuda_ctx *ctx, float *out, float *lse, const float *qkv, int B,
                            int T, int H, int hs, bool causal) {
    check_dims(B, T, H, hs);
    attn_dims a = make_dims(T, H, hs, causal);
    size_t shared = fwd_shared_floats(a) * sizeof(float);
    allow_shared(attention_fwd_kernel, shared);
    dim3 grid(ceil_div(T, ROWS), B * H);
    attention_fwd_kernel<<<grid, ROWS * WARP, shared, ctx->stream>>>(out, lse, qkv, a);
    LAUNCH_CHECK();
}

void sdp_cuda_attention_bwd(sdp_cuda_ctx *ctx, float *dqkv, const float *dout, const float *qkv,
                            const float *out, const float *lse, int B, int T, int H, int hs,
                            bool causal) {
    if (!dqkv) return;
    check_dims(B, T, H, hs);
    attn_dims a = make_dims(T, H, hs, causal);
    int rows = B * H * T;
    float *rowdot = (float *)sdp_cuda_workspace(ctx, (size_t)rows * sizeof(float));
    attention_rowdot_kernel<<<ceil_div(rows, ROWS), ROWS * WARP, 0, ctx->stream>>>(rowdot, dout,
                                                                                   out, a, rows);
    LAUNCH_CHECK();

    dim3 grid(ceil_div(T, ROWS), B * H);
    size_t dq_shared = dq_shared_floats(a) * sizeof(float);
    allow_shared(attention_dq_kernel, dq_shared);
    attention_dq_kernel<<<grid, ROWS * WARP, dq_shared, ctx->stream>>>(dqkv, dout, qkv, lse, rowdot,
                                                                       a);
    LAUNCH_CHECK();
    size_t dkv_shared = dkv_shared_floats(a) * sizeof(float);
    allow_shared(attention_dkv_kernel, dkv_shared);
    attention_dkv_kernel<<<grid, ROWS * WARP, dkv_shared, ctx->stream>>>(dqkv, dout, qkv, lse,
                                                                         rowdot, a);
    LAUNCH_CHECK();
}
