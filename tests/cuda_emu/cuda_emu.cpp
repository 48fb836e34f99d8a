/* The fibers behind cuda_emu.h: one per thread of a block, run in turns by launch() until each
 * reaches a barrier, then released together. */
#include "cuda_emu.h"

#include <ucontext.h>

#include <vector>

dim3 blockIdx, blockDim, gridDim;

namespace emu {

bool exact_bf16 = false;

enum { STACK_BYTES = 256 << 10, GUARD_BYTES = 4096, GUARD = 0xa5 };

struct fiber {
    ucontext_t ctx;
    std::vector<unsigned char> stack;
    thread_state state;
};

/* The launch in progress: one at a time, on one OS thread. */
static std::vector<fiber> fibers;
static std::vector<float> slots;
static ucontext_t scheduler;
static size_t running;
static const std::function<void()> *body;

thread_state *current() {
    return &fibers[running].state;
}

float *shuffle_slots() {
    return slots.data();
}

void fail(const char *what) {
    fprintf(stderr, "cuda_emu: %s (block %u,%u thread %u)\n", what, blockIdx.x, blockIdx.y,
            fibers.empty() ? 0u : fibers[running].state.tid.x);
    exit(1);
}

void sync(barrier kind) {
    fibers[running].state.waiting = kind;
    swapcontext(&fibers[running].ctx, &scheduler);
}

static void entry() {
    (*body)();
    fibers[running].state.done = true; /* uc_link returns to the scheduler */
}

/* Runs the block's threads until all have ended; fails on a barrier that some thread skips. */
static void run_block() {
    for (;;) {
        size_t done = 0, waiting = 0;
        barrier kind = NONE;
        for (running = 0; running < fibers.size(); running++) {
            fiber &f = fibers[running];
            if (f.state.done) continue;
            f.state.waiting = NONE;
            swapcontext(&scheduler, &f.ctx);
            if (f.state.done) {
                done++;
                continue;
            }
            if (kind != NONE && f.state.waiting != kind)
                fail("threads wait at barriers of different kinds");
            kind = f.state.waiting;
            waiting++;
        }
        if (waiting == 0) return;
        size_t ended = 0;
        for (const fiber &f : fibers) ended += f.state.done;
        if (ended > 0) fail("a thread ended while others wait at a barrier");
        (void)done;
    }
}

void launch(dim3 grid, dim3 block, unsigned char *smem, size_t smem_bytes,
            const std::function<void()> &kernel) {
    const size_t n = (size_t)block.x * block.y * block.z;
    if (block.y != 1 || block.z != 1) fail("launch: only one-dimensional blocks");
    fibers.resize(n);
    slots.assign(n, 0.0f);
    body = &kernel;
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx.x = x;
                blockIdx.y = y;
                blockIdx.z = z;
                memset(smem, 0xff, smem_bytes); /* NaN, in fp32 and in bf16 */
                memset(smem + smem_bytes, GUARD, GUARD_BYTES);
                for (size_t t = 0; t < n; t++) {
                    fiber &f = fibers[t];
                    f.stack.resize(STACK_BYTES);
                    f.state = thread_state{};
                    f.state.tid.x = (unsigned)t;
                    getcontext(&f.ctx);
                    f.ctx.uc_stack.ss_sp = f.stack.data();
                    f.ctx.uc_stack.ss_size = f.stack.size();
                    f.ctx.uc_link = &scheduler;
                    makecontext(&f.ctx, entry, 0);
                }
                run_block();
                for (size_t i = 0; i < GUARD_BYTES; i++)
                    if (smem[smem_bytes + i] != GUARD) fail("a write past the shared memory");
            }
}

} // namespace emu
