/* Just enough of CUDA to run a kernel file's device code on the CPU, for tests that check a
 * kernel's arithmetic where there is no GPU (tests/cuda_emu/test_flash_emulated.cpp).
 *
 * A block's threads are fibers (ucontext) that the launcher runs one after another, each until
 * it reaches a barrier (__syncthreads, __syncwarp, a shuffle) or ends; a barrier releases only
 * when every thread of the block has reached one of the same kind, so every warp must take every
 * barrier, as the kernels under test promise. Blocks run one at a time, so the one dynamic
 * shared array is a single buffer, filled with NaN before each block (reading what no thread
 * wrote poisons the result) and guarded past its end. wmma fragments hold their whole 16 x 16
 * tile in every lane; a load is a barrier of the warp, as the warp loads together, and checks
 * wmma's alignment rules; so do float4 loads (16 bytes). bf16 rounds to nearest even, or, with
 * emu_exact_bf16 set, keeps fp32, which makes a bf16 kernel an fp32 one that can be held to fp32
 * tolerances.
 *
 * What it cannot show: races between warps that real concurrency would expose, register and
 * shared-memory limits, the real fragment layouts, and speed. Those need a GPU (docs/cuda.md). */
#ifndef SDP_TESTS_CUDA_EMU_H
#define SDP_TESTS_CUDA_EMU_H

#define SDP_CUDA_EMU 1

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

namespace emu {

enum barrier { NONE, THREADS_BARRIER, WARP_BARRIER };

/* Set by the test: bf16 keeps fp32 (true) or rounds to nearest even (false). */
extern bool exact_bf16;

struct thread_state {
    dim3 tid;
    barrier waiting;
    bool done;
};
/* The thread whose fiber runs now. */
thread_state *current();
/* Every lane's shuffle value, indexed by thread. */
float *shuffle_slots();
/* Suspends the running thread until the block's threads all reach a barrier of this kind. */
void sync(barrier kind);
/* Fails the test with a message. */
[[noreturn]] void fail(const char *what);

} // namespace emu

extern dim3 blockIdx, blockDim, gridDim;
#define threadIdx (emu::current()->tid)

inline void __syncthreads() {
    emu::sync(emu::THREADS_BARRIER);
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask;
    emu::sync(emu::WARP_BARRIER);
}
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    (void)mask;
    float *slot = emu::shuffle_slots();
    const unsigned t = threadIdx.x;
    slot[t] = v;
    emu::sync(emu::WARP_BARRIER);
    const float got = slot[(t & ~31u) | ((t & 31u) ^ (unsigned)lane_mask)];
    emu::sync(emu::WARP_BARRIER);
    return got;
}

struct __nv_bfloat16 {
    float value;
};
inline float emu_round_bf16(float f) {
    if (emu::exact_bf16 || f != f) return f;
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16(float f) {
    return __nv_bfloat16{emu_round_bf16(f)};
}
inline float __bfloat162float(__nv_bfloat16 b) {
    return b.value;
}
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return __nv_bfloat162{__float2bfloat16(a), __float2bfloat16(b)};
}

struct float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) {
    return float4{x, y, z, w};
}
/* A vector load from device memory: the GPU faults on an address not aligned to 16 bytes. */
inline float4 __ldg(const float4 *p) {
    if ((uintptr_t)p % 16 != 0) emu::fail("float4 load: an address not aligned to 16 bytes");
    return *p;
}

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    float x[16 * 16]; /* the whole tile, row-major, in every lane */
};

template <typename Use, int M, int N, int K, typename T, typename L>
inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, float v) {
    for (float &e : f.x) e = v;
}

/* wmma's rules, on the GPU's sizes: pointers aligned to 32 bytes, ldm a multiple of 16 bytes.
 * An emulated bf16 takes 4 bytes where the GPU's takes 2, so its pointers are checked against 64:
 * the kernels' layouts scale with it (each piece a multiple of 64 bytes here, as of 32 there). */
template <typename T> inline void check_pointer(const T *p, unsigned ldm) {
    const size_t gpu_bytes = std::is_same<T, __nv_bfloat16>::value ? 2 : sizeof(T);
    if ((uintptr_t)p % (32 / gpu_bytes * sizeof(T)) != 0)
        emu::fail("wmma: a pointer not aligned to 32 bytes");
    if ((ldm * gpu_bytes) % 16 != 0) emu::fail("wmma: ldm not a multiple of 16 bytes");
}

template <typename Use, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f, const __nv_bfloat16 *p,
                             unsigned ldm) {
    check_pointer(p, ldm);
    const bool row = std::is_same<L, row_major>::value;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.x[r * 16 + c] = p[row ? r * ldm + c : c * ldm + r].value;
    emu::sync(emu::WARP_BARRIER); /* a warp's lanes load together: none stores before all read */
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t layout) {
    check_pointer(p, ldm);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = p[layout == mem_row_major ? r * ldm + c : c * ldm + r];
    emu::sync(emu::WARP_BARRIER);
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout) {
    check_pointer(p, ldm);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            p[layout == mem_row_major ? r * ldm + c : c * ldm + r] = f.x[r * 16 + c];
}

/* d = a b + c, accumulating in fp32 (the order of a tensor core's sums is not modelled). */
template <typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    float out[256];
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float s = c.x[r * 16 + n];
            for (int k = 0; k < 16; k++) s += a.x[r * 16 + k] * b.x[k * 16 + n];
            out[r * 16 + n] = s;
        }
    memcpy(d.x, out, sizeof out);
}

} // namespace wmma
} // namespace nvcuda

namespace emu {

/* Runs kernel(args) over grid x block threads with `smem_bytes` of dynamic shared memory at
 * `smem` (which holds at least smem_bytes + the guard). */
void launch(dim3 grid, dim3 block, unsigned char *smem, size_t smem_bytes,
            const std::function<void()> &kernel);

} // namespace emu

#endif
