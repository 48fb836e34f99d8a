/* Fused (flash) attention for the bf16 context: the score matrices never leave the chip.
 *
 * The GEMM path of attention.cu writes each sequence's [H, T, T] scores to device memory and reads
 * them back five times, which costs far more than the products themselves at T = 1024. Here one
 * block holds a tile of 64 queries (or keys) and walks the other side's tiles through shared
 * memory, keeping a running max and sum per row (the online softmax), so that device memory sees
 * only q, k, v, out and their gradients. The products run on bf16 tensor cores (wmma 16x16x16,
 * operands rounded to bf16 as cuBLAS's FAST_16BF does, fp32 accumulation), and every softmax step
 * is fp32, so its results carry the GEMM path's rounding and meet the same tolerances.
 *
 * Layouts as attention.cu: qkv [B, T, 3D] (q heads, then k, then v), out and dout [B, T, D],
 * lse and rowdot [B, H, T], D = H*HS. Four warps per block; warp w owns rows 16w..16w+15 of the
 * block's tile. Under the causal mask a block skips the tiles wholly past the diagonal.
 *
 *   forward (one block per 64 queries of one head): S = q k^T, P = exp(scale S - m) with m the
 *     running max, O = O e^(m_old - m) + P v, out = O / l, lse = m + log l (computed in base 2).
 *   backward, without atomics so that it is the same run to run:
 *     dk/dv (one block per 64 keys): over the query tiles, P^T = exp(scale k q^T - lse),
 *       dP^T = v dO^T, dS^T = P^T (dP^T - rowdot); dv += P^T dO, dk += scale dS^T q.
 *     dq (one block per 64 queries): over the key tiles, the same P and dS; dq += scale dS k.
 *   That recomputes q k^T and dO v^T once more than a backward with atomic dq would.
 *
 * Dropout on the probabilities, as the GEMM path's: P' = M P / (1-p) multiplies v (lse and the
 * running sum stay those of P), dv takes P', and dS = P (M dP' / (1-p) - rowdot), with M's
 * element ((b*H + h)*T + i)*T + j drawn by sdp_dropout_keeps, the bits of every other backend.
 *
 * This file is device code only, written so that tests/cuda_emu/ can also compile it for the CPU
 * (a block's threads as fibers, wmma as whole-tile loops): shared memory is the one dynamic
 * array, and every warp takes every barrier. Private to src/ops/cuda. */
#ifndef SDP_OPS_CUDA_FLASH_ATTENTION_CUH
#define SDP_OPS_CUDA_FLASH_ATTENTION_CUH

#ifndef SDP_CUDA_EMU
#include <cuda_bf16.h>
#include <mma.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif
#include "sdp/ops.h" /* sdp_dropout_keeps: the mask every backend draws */
#ifdef __cplusplus
}
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <type_traits>

/* wmma on bf16 needs sm_80: for older architectures the kernels are built empty, and
 * attention.cu never launches them there (it asks the built code's architecture). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define SDP_FLASH_BODY 1
#else
#define SDP_FLASH_BODY 0
#endif

namespace flash {

using bf16 = __nv_bfloat16;
using bf162 = __nv_bfloat162;
namespace wmma = nvcuda::wmma;

/* Loops over a thread's registers must unroll, or the arrays they index go to local memory. */
#ifdef __CUDACC__
#define FLASH_UNROLL _Pragma("unroll")
#else
#define FLASH_UNROLL
#endif

enum {
    TILE = 64,  /* queries or keys per block tile */
    WARPS = 4,  /* per block, 16 rows each */
    WROWS = 16, /* rows per warp: one wmma tile high */
    THREADS = WARPS * 32,
    FRAG = 16 /* wmma's m = n = k */
};

/* Head sizes the kernels are built for (one instantiation each); others take the GEMM path. The
 * backend asks sdp_cuda_fused_head_size (sdp/cuda_scratch.h), which `sdp plan` shares and which
 * must say the same; this copy keeps the emulated tests free of sdp's C headers. */
static inline bool supports(int hs) {
    return hs == 16 || hs == 32 || hs == 64 || hs == 128;
}

/* f(std::integral_constant<int, HS>{}) for the head size hs, one that supports() allows: the
 * one place a run-time head size becomes a kernel's template argument. */
template <class F> inline auto with_head_size(int hs, F &&f) {
    switch (hs) {
    case 16:
        return f(std::integral_constant<int, 16>{});
    case 32:
        return f(std::integral_constant<int, 32>{});
    case 64:
        return f(std::integral_constant<int, 64>{});
    default:
        return f(std::integral_constant<int, 128>{});
    }
}

typedef wmma::fragment<wmma::matrix_a, FRAG, FRAG, FRAG, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, bf16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, bf16, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float> frag_acc;

/* Everything a kernel needs, by value. */
struct args {
    const float *qkv, *out, *dout, *lse, *rowdot;
    float *o, *lse_out, *dqkv;
    int T, H;
    float scale;
    bool causal;
    bool dropout; /* on the probabilities, drawn from drop_key: keep with 1 - p, then 1/(1-p) */
    uint64_t drop_key;
    uint32_t drop_threshold;
    float drop_scale;
};

/* ---- shared memory ---------------------------------------------------------------------------
 * Every kernel carves one dynamic array into bf16 tiles [TILE][HS], fp32 per-row values [TILE],
 * and per-warp blocks of [WROWS][TILE] (scores and their kin). Rows are padded (by 16 bytes for
 * bf16, 16 for fp32) so that the rows a wmma load reads fall in different banks; each piece and
 * each warp's share stay multiples of 32 bytes, as wmma's pointers need. */

template <int HS> struct sizes {
    /* Whether the next tiles' loads are issued before this tile's products, to overlap them: two
     * fp32 tiles in flight take TILE*HS/64 registers a thread, too many at HS = 128 beside the
     * backward's accumulators, so there each tile is loaded when it is needed. */
    static constexpr bool ahead = HS <= 64;
    static constexpr int LDT = HS + 8;   /* bf16 tiles q, k, v, dO */
    static constexpr int LDS = TILE + 4; /* fp32 per-warp blocks: S, dP */
    static constexpr int LDP = TILE + 8; /* bf16 per-warp blocks: P, dS */
    static constexpr int LDO = HS + 4;   /* fp32 per-warp output rows */
    static constexpr size_t tile = (size_t)TILE * LDT * sizeof(bf16);
    static constexpr size_t rows = (size_t)TILE * sizeof(float);
    static constexpr size_t warp_f32 = (size_t)WARPS * WROWS * LDS * sizeof(float);
    static constexpr size_t warp_bf16 = (size_t)WARPS * WROWS * LDP * sizeof(bf16);
    static constexpr size_t warp_out = (size_t)WARPS * WROWS * LDO * sizeof(float);
    /* q, k, v tiles; S and O in fp32, P in bf16, per warp */
    static constexpr size_t fwd = 3 * tile + warp_f32 + warp_bf16 + warp_out;
    /* k, v, q, dO tiles; lse and rowdot; S and dP in fp32, P and dS in bf16, per warp */
    static constexpr size_t dkdv = 4 * tile + 2 * rows + 2 * warp_f32 + 2 * warp_bf16;
    /* q, dO, k, v tiles; lse and rowdot; S and dP in fp32, dS in bf16, per warp */
    static constexpr size_t dq = 4 * tile + 2 * rows + 2 * warp_f32 + warp_bf16;
    static_assert(tile % 32 == 0 && rows % 32 == 0 && warp_f32 % 32 == 0 && warp_bf16 % 32 == 0 &&
                      warp_out % 32 == 0,
                  "each piece of shared memory keeps the next one aligned for wmma");
    static_assert(WROWS * LDS * sizeof(float) % 32 == 0 && WROWS * LDP * sizeof(bf16) % 32 == 0 &&
                      WROWS * LDO * sizeof(float) % 32 == 0,
                  "each warp's share keeps the next warp's aligned for wmma");
};

/* Hands out consecutive pieces of the shared array. */
struct carver {
    unsigned char *at;
    template <typename T> __device__ T *take(size_t bytes) {
        T *p = (T *)at;
        at += bytes;
        return p;
    }
};

extern __shared__ __align__(128) unsigned char smem[];

/* ---- tile moves ------------------------------------------------------------------------------ */

/* A [TILE][HS] tile of fp32 rows in device memory moves to a bf16 tile of shared memory (row
 * stride LDT) in float4s: the thread's n-th float4 is element c..c+3 of tile row r. Rows past T
 * read as zero, so that padding rows contribute nothing to any product. Rows start 16 bytes
 * aligned: HS, D and 3D are multiples of 4, and attention.cu checks the pointers. */
template <int HS> struct tile_regs {
    static constexpr int N = TILE * HS / 4 / THREADS;
    float4 v[N];
};

template <int HS> __device__ inline int slot_row(int n) {
    return (n * THREADS + (int)threadIdx.x) / (HS / 4);
}
template <int HS> __device__ inline int slot_col(int n) {
    return (n * THREADS + (int)threadIdx.x) % (HS / 4) * 4;
}

template <int HS>
__device__ inline float4 fetch_slot(int n, const float *src, size_t ld, int row0, int T) {
    const int t = row0 + slot_row<HS>(n);
    return t < T ? __ldg((const float4 *)(src + (size_t)t * ld + slot_col<HS>(n)))
                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

template <int HS> __device__ inline void put_slot(bf16 *dst, int n, float4 v) {
    bf16 *d = dst + slot_row<HS>(n) * sizes<HS>::LDT + slot_col<HS>(n);
    *(bf162 *)d = __floats2bfloat162_rn(v.x, v.y);
    *(bf162 *)(d + 2) = __floats2bfloat162_rn(v.z, v.w);
}

/* Issues the loads of a tile into registers, for put_tile after the next barrier. */
template <int HS>
__device__ void fetch_tile(tile_regs<HS> &f, const float *src, size_t ld, int row0, int T) {
    FLASH_UNROLL
    for (int n = 0; n < tile_regs<HS>::N; n++) f.v[n] = fetch_slot<HS>(n, src, ld, row0, T);
}

template <int HS> __device__ void put_tile(bf16 *dst, const tile_regs<HS> &f) {
    FLASH_UNROLL
    for (int n = 0; n < tile_regs<HS>::N; n++) put_slot<HS>(dst, n, f.v[n]);
}

/* Loads a tile straight into shared memory: where no registers are spared for fetch_tile. */
template <int HS>
__device__ void load_tile(bf16 *dst, const float *src, size_t ld, int row0, int T) {
    for (int n = 0; n < tile_regs<HS>::N; n++)
        put_slot<HS>(dst, n, fetch_slot<HS>(n, src, ld, row0, T));
}

/* Thread r < TILE's value of the per-row array src for rows from row0: src[row0 + r] below T, 0
 * past it (threads from TILE on hold 0); put_row stores it at dst[r]. */
__device__ inline float fetch_row(const float *src, int row0, int T) {
    const int r = (int)threadIdx.x;
    return r < TILE && row0 + r < T ? src[row0 + r] : 0.0f;
}
__device__ inline void put_row(float *dst, float v) {
    if ((int)threadIdx.x < TILE) dst[threadIdx.x] = v;
}

/* Two tiles of the same rows (k and v, or q and dO), with optionally two per-row arrays (lse and
 * rowdot), on their way to shared memory. With sizes<HS>::ahead, fetch issues the loads of the
 * next rows into registers before the products of this tile, and put stores them after the
 * barrier that frees shared memory, so that the loads overlap the products; without, put loads
 * them itself. */
template <int HS> struct tile_pair {
    const float *a, *b;
    size_t lda, ldb;
    int T;
    const float *rows_a, *rows_b;
    tile_regs<HS> ra, rb;
    float va = 0.0f, vb = 0.0f;

    __device__ tile_pair(const float *a_, const float *b_, size_t lda_, size_t ldb_, int T_,
                         const float *rows_a_ = NULL, const float *rows_b_ = NULL)
        : a(a_), b(b_), lda(lda_), ldb(ldb_), T(T_), rows_a(rows_a_), rows_b(rows_b_) {}

    __device__ void fetch(int row0) {
        if constexpr (sizes<HS>::ahead) {
            fetch_tile<HS>(ra, a, lda, row0, T);
            fetch_tile<HS>(rb, b, ldb, row0, T);
            if (rows_a) va = fetch_row(rows_a, row0, T), vb = fetch_row(rows_b, row0, T);
        }
    }

    /* The rows from row0 into sa and sb (and srows_a, srows_b): fetched, or loaded now. */
    __device__ void put(bf16 *sa, bf16 *sb, float *srows_a, float *srows_b, int row0) {
        if constexpr (sizes<HS>::ahead) {
            put_tile<HS>(sa, ra);
            put_tile<HS>(sb, rb);
        } else {
            load_tile<HS>(sa, a, lda, row0, T);
            load_tile<HS>(sb, b, ldb, row0, T);
            if (rows_a) va = fetch_row(rows_a, row0, T), vb = fetch_row(rows_b, row0, T);
        }
        if (rows_a) put_row(srows_a, va), put_row(srows_b, vb);
    }
};

/* The column that lane visits at its j-th step (j < 32) of the warp's [WROWS][TILE] block, where
 * lanes 2i and 2i+1 own row i, each one half of its columns: skewed by the lane, so that the 32
 * lanes of a step hit 32 different banks. */
__device__ inline int lane_column(int j, int lane) {
    return (lane % 2) * 32 + (j + lane) % 32;
}

/* One warp: out[WROWS][TILE] (fp32, stride LDS) = a[WROWS][HS] b[TILE][HS]^T, a and b bf16 tiles
 * (stride LDT): the scores of 16 rows against a tile. */
template <int HS> __device__ void rows_times_tile_t(float *out, const bf16 *a, const bf16 *b) {
    constexpr int LDT = sizes<HS>::LDT;
    for (int n = 0; n < TILE / FRAG; n++) {
        frag_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < HS; k += FRAG) {
            frag_a fa;
            frag_b_col fb; /* b^T read column-major is b read row-major */
            wmma::load_matrix_sync(fa, a + k, LDT);
            wmma::load_matrix_sync(fb, b + n * FRAG * LDT + k, LDT);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(out + n * FRAG, acc, sizes<HS>::LDS, wmma::mem_row_major);
    }
}

/* One warp: acc[n] += p[WROWS][TILE] (bf16, stride LDP) b[TILE][HS] (a bf16 tile, stride LDT),
 * acc[n] holding columns 16n..16n+15 of the [WROWS][HS] result. */
template <int HS>
__device__ void accumulate_rows_times_tile(frag_acc (&acc)[HS / FRAG], const bf16 *p,
                                           const bf16 *b) {
    for (int k = 0; k < TILE; k += FRAG) {
        frag_a fa;
        wmma::load_matrix_sync(fa, p + k, sizes<HS>::LDP);
        for (int n = 0; n < HS / FRAG; n++) {
            frag_b_row fb;
            wmma::load_matrix_sync(fb, b + k * sizes<HS>::LDT + n * FRAG, sizes<HS>::LDT);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* One warp: dst[(row0 + r) * ld + c] += alpha acc[n](r, c - 16n) for the rows below T; stage is
 * WROWS x FRAG floats of the warp's shared memory. */
template <int HS>
__device__ void add_rows_to(float *dst, size_t ld, int row0, int T, float alpha,
                            frag_acc (&acc)[HS / FRAG], float *stage) {
    const int lane = threadIdx.x % 32;
    for (int n = 0; n < HS / FRAG; n++) {
        wmma::store_matrix_sync(stage, acc[n], FRAG, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < WROWS * FRAG; e += 32) {
            const int r = e / FRAG, c = e % FRAG;
            if (row0 + r < T) dst[(size_t)(row0 + r) * ld + n * FRAG + c] += alpha * stage[e];
        }
        __syncwarp();
    }
}

/* What a block reads and writes of its head (blockIdx.y = b*H + h): q, k and v rows 3D apart,
 * out and dO rows D apart, and where the head's dq, dk and dv go in dqkv (rows 3D apart); the
 * pointers a kernel does not use are NULL. */
template <int HS> struct head {
    int T, D, bh;
    size_t ld; /* 3D */
    const float *q, *k, *v, *dout;
    float *out, *dq, *dk, *dv;
};

template <int HS> __device__ head<HS> head_of(const args &a) {
    head<HS> h;
    h.T = a.T;
    h.D = a.H * HS;
    h.bh = blockIdx.y;
    h.ld = 3 * (size_t)h.D;
    const int b = h.bh / a.H, at = h.bh % a.H * HS;
    const size_t first = (size_t)b * h.T * h.ld + at, first_out = (size_t)b * h.T * h.D + at;
    h.q = a.qkv + first, h.k = h.q + h.D, h.v = h.k + h.D;
    h.dout = a.dout ? a.dout + first_out : NULL;
    h.out = a.o ? a.o + first_out : NULL;
    h.dq = a.dqkv ? a.dqkv + first : NULL, h.dk = h.dq ? h.dq + h.D : NULL;
    h.dv = h.dk ? h.dk + h.D : NULL;
    return h;
}

/* Whether query i sees key j. */
__device__ inline bool sees(int i, int j, int T, bool causal) {
    return j < T && (!causal || j <= i);
}

/* Whether queries [q_first, q_last] all see every key up to k_last, and all lie below T: then a
 * block of scores needs no per-element mask, which is so for all but the diagonal and last
 * tiles. */
__device__ inline bool all_seen(int q_first, int q_last, int k_last, int T, bool causal) {
    return q_last < T && k_last < T && (!causal || k_last <= q_first);
}

/* The softmax runs in base 2 (exp2f is a few instructions where expf is many): scores are scaled
 * by scale * log2(e), and lse converts at the ends. */
#define FLASH_LOG2E 1.4426950408889634f
#define FLASH_LN2   0.6931471805599453f

/* p as the product with v takes it: M p / (1-p) under dropout, for query i and key j of head bh. */
__device__ inline float dropped(const args &a, int bh, int i, int j, float p) {
    if (!a.dropout) return p;
    const uint64_t at = ((uint64_t)bh * a.T + (uint64_t)i) * a.T + (uint64_t)j;
    return sdp_dropout_keeps(a.drop_key, at, a.drop_threshold) ? a.drop_scale * p : 0.0f;
}

/* Key tiles that query tile qt needs: those up to the diagonal under the causal mask. */
__device__ inline int key_tiles(int qt, int T, bool causal) {
    const int all = (T + TILE - 1) / TILE;
    return causal && qt + 1 < all ? qt + 1 : all;
}

/* ---- forward --------------------------------------------------------------------------------- */

/* grid (query tiles, B*H), THREADS threads, sizes<HS>::fwd bytes of shared memory. Writes
 * a.o [B, T, D] and a.lse_out [B, H, T]. */
template <int HS> __global__ void __launch_bounds__(THREADS) fwd_kernel(args a) {
#if SDP_FLASH_BODY
    constexpr int LDT = sizes<HS>::LDT, LDS = sizes<HS>::LDS, LDP = sizes<HS>::LDP,
                  LDO = sizes<HS>::LDO;
    const head<HS> hd = head_of<HS>(a);
    const int T = hd.T, bh = hd.bh, qt = blockIdx.x, q0 = qt * TILE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    carver sm{smem};
    bf16 *sq = sm.take<bf16>(sizes<HS>::tile), *sk = sm.take<bf16>(sizes<HS>::tile),
         *sv = sm.take<bf16>(sizes<HS>::tile);
    float *ws = sm.take<float>(sizes<HS>::warp_f32) + warp * WROWS * LDS;
    bf16 *wp = sm.take<bf16>(sizes<HS>::warp_bf16) + warp * WROWS * LDP;
    float *wo = sm.take<float>(sizes<HS>::warp_out) + warp * WROWS * LDO;

    const int tiles = key_tiles(qt, T, a.causal);
    tile_pair<HS> kv{hd.k, hd.v, hd.ld, hd.ld, T};
    kv.fetch(0);
    load_tile<HS>(sq, hd.q, hd.ld, q0, T);
    for (int e = lane; e < WROWS * LDO; e += 32) wo[e] = 0.0f;
    /* Lanes 2i and 2i+1 own row i of the warp (lane_column). */
    const int i = lane / 2, half = lane % 2, qi = q0 + warp * WROWS + i;
    float m = -INFINITY, l = 0.0f; /* the running max (of scale2 S) and sum */
    const float scale2 = a.scale * FLASH_LOG2E;

    for (int kt = 0; kt < tiles; kt++) {
        __syncthreads(); /* every warp is done with the last k and v tiles */
        kv.put(sk, sv, NULL, NULL, kt * TILE);
        __syncthreads();
        if (kt + 1 < tiles) kv.fetch((kt + 1) * TILE);
        rows_times_tile_t<HS>(ws, sq + warp * WROWS * LDT, sk);
        __syncwarp();

        const int q_first = q0 + warp * WROWS;
        const bool whole = all_seen(q_first, q_first, kt * TILE + TILE - 1, T, a.causal);
        float tile_max = -INFINITY;
        for (int j = 0; j < 32; j++) {
            const int c = lane_column(j, lane);
            if (whole || sees(qi, kt * TILE + c, T, a.causal))
                tile_max = fmaxf(tile_max, scale2 * ws[i * LDS + c]);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        const float m_new = fmaxf(m, tile_max);
        /* m_new is finite from the first tile on: every query sees key 0. */
        const float rescale = m == -INFINITY ? 0.0f : exp2f(m - m_new);
        float sum = 0.0f;
        for (int j = 0; j < 32; j++) {
            const int c = lane_column(j, lane);
            const float p = whole || sees(qi, kt * TILE + c, T, a.causal)
                                ? exp2f(scale2 * ws[i * LDS + c] - m_new)
                                : 0.0f;
            wp[i * LDP + c] = __float2bfloat16(dropped(a, bh, qi, kt * TILE + c, p));
            sum += p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * rescale + sum;
        m = m_new;
        for (int j = 0; j < HS / 2; j++)
            wo[i * LDO + half * (HS / 2) + (j + lane) % (HS / 2)] *= rescale;
        __syncwarp();

        frag_acc acc[HS / FRAG];
        for (int n = 0; n < HS / FRAG; n++)
            wmma::load_matrix_sync(acc[n], wo + n * FRAG, LDO, wmma::mem_row_major);
        accumulate_rows_times_tile<HS>(acc, wp, sv);
        for (int n = 0; n < HS / FRAG; n++)
            wmma::store_matrix_sync(wo + n * FRAG, acc[n], LDO, wmma::mem_row_major);
        __syncwarp();
    }

    if (qi < T) {
        float *o = hd.out + (size_t)qi * hd.D;
        const float inv = 1.0f / l;
        for (int d = half * (HS / 2); d < (half + 1) * (HS / 2); d++) o[d] = wo[i * LDO + d] * inv;
        if (half == 0) a.lse_out[(size_t)bh * T + qi] = (m + log2f(l)) * FLASH_LN2;
    }
#else
    (void)a;
#endif
}

/* ---- backward -------------------------------------------------------------------------------- */

/* The softmax gradient of one warp's [WROWS][TILE] block (lane_column's order) of head bh: P from
 * the scores s (fp32, stride LDS) and lse, dS = P (dP - rowdot), both rounded to bf16 (stride
 * LDP) for the products that follow (under dropout p gets P' and dS takes M dP' / (1-p)); p may
 * be NULL when only dS is needed. transposed: rows are keys and columns queries (the dk/dv
 * kernel), else rows are queries. row0 and col0 are the first row's and column's positions in
 * the sequence; lse and rowdot are per query, from the tile's first. */
template <int HS>
__device__ void softmax_grad_block(bf16 *p, bf16 *ds, const float *s, const float *dp,
                                   const float *lse, const float *rowdot, int row0, int col0,
                                   bool transposed, int T, int bh, const args &a) {
    constexpr int LDS = sizes<HS>::LDS, LDP = sizes<HS>::LDP;
    const int lane = threadIdx.x % 32, i = lane / 2;
    const int row_last = row0 + WROWS - 1, col_last = col0 + TILE - 1;
    const bool whole = transposed ? all_seen(col0, col_last, row_last, T, a.causal)
                                  : all_seen(row0, row_last, col_last, T, a.causal);
    const float scale2 = a.scale * FLASH_LOG2E;
    for (int j = 0; j < 32; j++) {
        const int c = lane_column(j, lane);
        const int qi = transposed ? col0 + c : row0 + i, kj = transposed ? row0 + i : col0 + c;
        const int qr = transposed ? c : i; /* the query's index into lse and rowdot */
        const float pv = whole || (qi < T && sees(qi, kj, T, a.causal))
                             ? exp2f(scale2 * s[i * LDS + c] - lse[qr] * FLASH_LOG2E)
                             : 0.0f;
        const float keep = dropped(a, bh, qi, kj, 1.0f); /* 0, or 1 / (1-p) */
        if (p) p[i * LDP + c] = __float2bfloat16(keep * pv);
        ds[i * LDP + c] = __float2bfloat16(pv * (keep * dp[i * LDS + c] - rowdot[qr]));
    }
}

/* grid (key tiles, B*H), THREADS threads, sizes<HS>::dkdv bytes of shared memory. Adds the
 * gradients of k and v into a.dqkv. */
template <int HS> __global__ void __launch_bounds__(THREADS) dkdv_kernel(args a) {
#if SDP_FLASH_BODY
    constexpr int LDT = sizes<HS>::LDT, LDS = sizes<HS>::LDS, LDP = sizes<HS>::LDP;
    const head<HS> hd = head_of<HS>(a);
    const int T = hd.T, bh = hd.bh, kt = blockIdx.x, k0 = kt * TILE, warp = threadIdx.x / 32;
    const float *lse = a.lse + (size_t)bh * T, *rowdot = a.rowdot + (size_t)bh * T;

    carver sm{smem};
    bf16 *sk = sm.take<bf16>(sizes<HS>::tile), *sv = sm.take<bf16>(sizes<HS>::tile),
         *sq = sm.take<bf16>(sizes<HS>::tile), *sdo = sm.take<bf16>(sizes<HS>::tile);
    float *slse = sm.take<float>(sizes<HS>::rows), *srowdot = sm.take<float>(sizes<HS>::rows);
    float *ws = sm.take<float>(sizes<HS>::warp_f32) + warp * WROWS * LDS;
    float *wdp = sm.take<float>(sizes<HS>::warp_f32) + warp * WROWS * LDS;
    bf16 *wp = sm.take<bf16>(sizes<HS>::warp_bf16) + warp * WROWS * LDP;
    bf16 *wds = sm.take<bf16>(sizes<HS>::warp_bf16) + warp * WROWS * LDP;

    const int tiles = (T + TILE - 1) / TILE, first = a.causal ? kt : 0;
    tile_pair<HS> qdo{hd.q, hd.dout, hd.ld, (size_t)hd.D, T, lse, rowdot};
    qdo.fetch(first * TILE);
    load_tile<HS>(sk, hd.k, hd.ld, k0, T);
    load_tile<HS>(sv, hd.v, hd.ld, k0, T);
    frag_acc dk[HS / FRAG], dv[HS / FRAG];
    for (int n = 0; n < HS / FRAG; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    for (int qt = first; qt < tiles; qt++) {
        __syncthreads(); /* every warp is done with the last q and dO tiles */
        qdo.put(sq, sdo, slse, srowdot, qt * TILE);
        __syncthreads();
        if (qt + 1 < tiles) qdo.fetch((qt + 1) * TILE);
        rows_times_tile_t<HS>(ws, sk + warp * WROWS * LDT, sq);   /* S^T = k q^T */
        rows_times_tile_t<HS>(wdp, sv + warp * WROWS * LDT, sdo); /* dP^T = v dO^T */
        __syncwarp();
        softmax_grad_block<HS>(wp, wds, ws, wdp, slse, srowdot, k0 + warp * WROWS, qt * TILE, true,
                               T, bh, a);
        __syncwarp();
        accumulate_rows_times_tile<HS>(dv, wp, sdo); /* dv += P^T dO */
        accumulate_rows_times_tile<HS>(dk, wds, sq); /* dk += dS^T q (scaled below) */
    }
    add_rows_to<HS>(hd.dk, hd.ld, k0 + warp * WROWS, T, a.scale, dk, ws);
    add_rows_to<HS>(hd.dv, hd.ld, k0 + warp * WROWS, T, 1.0f, dv, ws);
#else
    (void)a;
#endif
}

/* grid (query tiles, B*H), THREADS threads, sizes<HS>::dq bytes of shared memory. Adds the
 * gradient of q into a.dqkv. */
template <int HS> __global__ void __launch_bounds__(THREADS) dq_kernel(args a) {
#if SDP_FLASH_BODY
    constexpr int LDT = sizes<HS>::LDT, LDS = sizes<HS>::LDS, LDP = sizes<HS>::LDP;
    const head<HS> hd = head_of<HS>(a);
    const int T = hd.T, bh = hd.bh, qt = blockIdx.x, q0 = qt * TILE, warp = threadIdx.x / 32;

    carver sm{smem};
    bf16 *sq = sm.take<bf16>(sizes<HS>::tile), *sdo = sm.take<bf16>(sizes<HS>::tile),
         *sk = sm.take<bf16>(sizes<HS>::tile), *sv = sm.take<bf16>(sizes<HS>::tile);
    float *slse = sm.take<float>(sizes<HS>::rows), *srowdot = sm.take<float>(sizes<HS>::rows);
    float *ws = sm.take<float>(sizes<HS>::warp_f32) + warp * WROWS * LDS;
    float *wdp = sm.take<float>(sizes<HS>::warp_f32) + warp * WROWS * LDS;
    bf16 *wds = sm.take<bf16>(sizes<HS>::warp_bf16) + warp * WROWS * LDP;

    const int tiles = key_tiles(qt, T, a.causal);
    tile_pair<HS> kv{hd.k, hd.v, hd.ld, hd.ld, T};
    kv.fetch(0);
    load_tile<HS>(sq, hd.q, hd.ld, q0, T);
    load_tile<HS>(sdo, hd.dout, hd.D, q0, T);
    put_row(slse, fetch_row(a.lse + (size_t)bh * T, q0, T));
    put_row(srowdot, fetch_row(a.rowdot + (size_t)bh * T, q0, T));
    frag_acc dq[HS / FRAG];
    for (int n = 0; n < HS / FRAG; n++) wmma::fill_fragment(dq[n], 0.0f);
    for (int kt = 0; kt < tiles; kt++) {
        __syncthreads(); /* every warp is done with the last k and v tiles */
        kv.put(sk, sv, NULL, NULL, kt * TILE);
        __syncthreads();
        if (kt + 1 < tiles) kv.fetch((kt + 1) * TILE);
        rows_times_tile_t<HS>(ws, sq + warp * WROWS * LDT, sk);   /* S = q k^T */
        rows_times_tile_t<HS>(wdp, sdo + warp * WROWS * LDT, sv); /* dP = dO v^T */
        __syncwarp();
        softmax_grad_block<HS>(NULL, wds, ws, wdp, slse + warp * WROWS, srowdot + warp * WROWS,
                               q0 + warp * WROWS, kt * TILE, false, T, bh, a);
        __syncwarp();
        accumulate_rows_times_tile<HS>(dq, wds, sk); /* dq += dS k (scaled below) */
    }
    add_rows_to<HS>(hd.dq, hd.ld, q0 + warp * WROWS, T, a.scale, dq, ws);
#else
    (void)a;
#endif
}

} /* namespace flash */

#endif
