#include "sdp/data.h"

#include "sdp/check.h"
#include "sdp/rng.h"

#include <string.h>

/* Sequences are numbered globally in span order: sequence j of span k is number
 * seq_span[k] + j and covers tokens [j*T, j*T + T] of that span, so no sequence crosses the
 * boundary between two shards (or two splits). */
size_t sdp_loader_count(const sdp_tokens *src, int T) {
    size_t total = 0;
    for (int k = 0; k < src->nspans; k++)
        if (src->spans[k].n > (size_t)T) total += (src->spans[k].n - 1) / (size_t)T;
    return total;
}

static void count_sequences(sdp_loader *L, sdp_mem *mem) {
    const sdp_tokens *src = L->src;
    L->seq_span = sdp_alloc(mem, SDP_MEM_DATA, (size_t)(src->nspans + 1) * sizeof *L->seq_span);
    size_t total = 0;
    for (int k = 0; k < src->nspans; k++) {
        L->seq_span[k] = total;
        size_t n = src->spans[k].n;
        if (n > (size_t)L->T) total += (n - 1) / (size_t)L->T;
    }
    L->seq_span[src->nspans] = total;
    L->nseq = total;
}

/* The permutation depends only on (seed, epoch), so any rank can rebuild any epoch's order
 * on its own: that is what makes the streams disjoint without communication and resumable. */
static void build_permutation(sdp_loader *L) {
    sdp_epoch_order(L->perm, L->nseq, L->seed, L->pos.epoch, L->shuffle);
}

void sdp_loader_init(sdp_loader *L, const sdp_tokens *src, int B, int T, int rank, int world,
                     uint64_t seed, bool shuffle, sdp_mem *mem) {
    SDP_CHECK_ALL(B >= 1 && T >= 1,
                  "batch size %d and sequence length %d must both be at least 1: "
                  "fix the batch or sequence length",
                  B, T);
    SDP_CHECK_ALL(world >= 1 && rank >= 0 && rank < world,
                  "rank %d is outside a world of %d ranks: launch with a consistent world size",
                  rank, world);
    memset(L, 0, sizeof *L);
    L->src = src;
    L->B = B;
    L->T = T;
    L->rank = rank;
    L->world = world;
    L->seed = seed;
    L->shuffle = shuffle;
    count_sequences(L, mem);
    size_t need = (size_t)world * (size_t)B;
    SDP_CHECK_ALL(
        L->nseq >= need,
        "dataset has %zu sequences of T+1 = %d tokens; need at least world*B = %d*%d = %zu: "
        "use a smaller batch or sequence length or more data",
        L->nseq, T + 1, world, B, need);
    SDP_CHECK_ALL(L->nseq <= UINT32_MAX,
                  "dataset has %zu sequences of %d tokens, more than 2^32: use a longer sequence "
                  "length or fewer shards",
                  L->nseq, T + 1);
    L->perm = sdp_alloc(mem, SDP_MEM_DATA, L->nseq * sizeof *L->perm);
    build_permutation(L);
}

void sdp_loader_free(sdp_loader *L, sdp_mem *mem) {
    sdp_free(mem, L->perm);
    sdp_free(mem, L->seq_span);
    memset(L, 0, sizeof *L);
}

uint64_t sdp_loader_steps_per_epoch(const sdp_loader *L) {
    return L->nseq / ((uint64_t)L->world * (uint64_t)L->B);
}

/* The span holding global sequence `seq`: the last k with seq_span[k] <= seq. Spans too short
 * for any sequence share their start with the next span, and "last" skips past them. */
static int span_of(const sdp_loader *L, size_t seq) {
    int lo = 0, hi = L->src->nspans - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (L->seq_span[mid] <= seq)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static void copy_sequence(const sdp_loader *L, size_t seq, int *inputs, int *targets) {
    int k = span_of(L, seq);
    SDP_ASSERT(seq >= L->seq_span[k] && seq < L->seq_span[k + 1]);
    const uint16_t *tok = L->src->spans[k].tok + (seq - L->seq_span[k]) * (size_t)L->T;
    for (int t = 0; t < L->T; t++) {
        inputs[t] = tok[t];
        targets[t] = tok[t + 1];
    }
}

void sdp_loader_next(sdp_loader *L, int *inputs, int *targets) {
    size_t first = ((size_t)L->pos.step * (size_t)L->world + (size_t)L->rank) * (size_t)L->B;
    for (int b = 0; b < L->B; b++) {
        size_t off = (size_t)b * (size_t)L->T;
        copy_sequence(L, L->perm[first + (size_t)b], inputs + off, targets + off);
    }
    if (sdp_loader_pos_advance(&L->pos, sdp_loader_steps_per_epoch(L))) build_permutation(L);
}

void sdp_loader_seek(sdp_loader *L, sdp_loader_pos pos) {
    pos = sdp_loader_pos_normalize(pos, sdp_loader_steps_per_epoch(L));
    bool same_epoch = pos.epoch == L->pos.epoch;
    L->pos = pos;
    if (!same_epoch) build_permutation(L);
}
