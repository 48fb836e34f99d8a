/* Averaging the gradients over each bucket's owners, overlapped with the backward pass: all-reduce,
 * --zero 1 reduce-scatter, --zero 2 piece by piece and micro-batch by micro-batch, and the
 * global gradient norm. */
#include "sync_internal.h"

#include "sdp/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A ring pass (a reduce-scatter or an all-gather) moves (k - 1) / k of the buffer each way; an
 * all-reduce is two passes. sdp plan counts them alike (memplan.c). */
static void count_ring(sdp_sync *s, size_t elems, int members, int passes) {
    uint64_t bytes =
        (uint64_t)((double)passes * (members - 1) / members * (double)elems * sizeof(float));
    s->bytes.sent += bytes;
    s->bytes.recv += bytes;
}

void sync_count_ring_allreduce(sdp_sync *s, size_t elems, int members) {
    count_ring(s, elems, members, 2);
}

/* MPI counts are ints: very large buckets go in pieces. */
static void start_bucket(sdp_sync *s, sdp_bucket *b, float *grads) {
    if (b->started || !sync_reduced(b) || sync_staged(s, b)) return;
    b->started = true;
    /* --zero 1: a ring reduce-scatter and, after the update, a ring all-gather each move
     * (k - 1) / k of the bucket each way, together what one ring all-reduce moves: counted here
     * once for both, so the bytes sdp plan predicts are the same with and without it. */
    sync_count_ring_allreduce(s, b->count, b->nmembers);
    if (s->zero && b->dev) { /* the member's sum lands at its own shard's place */
        s->be->reduce_scatter_start(s->be, b->dev, grads + b->start, b->shard_counts,
                                    b->shard_displs);
        return;
    }
    if (s->zero) {
        MPI_Ireduce_scatter(MPI_IN_PLACE, grads + b->start, b->shard_counts, MPI_FLOAT, MPI_SUM,
                            b->comm, &b->reqs[b->nreq++]);
        return;
    }
    if (b->dev) {
        s->be->allreduce_start(s->be, b->dev, grads + b->start, b->count);
        return;
    }
    for (size_t off = 0; off < b->count; off += SYNC_MAX_PIECE) {
        size_t len = b->count - off < SYNC_MAX_PIECE ? b->count - off : SYNC_MAX_PIECE;
        MPI_Iallreduce(MPI_IN_PLACE, grads + b->start + off, (int)len, MPI_FLOAT, MPI_SUM, b->comm,
                       &b->reqs[b->nreq++]);
    }
}

/* Device memory, no device communicator: down to the host, all-reduced by MPI, and back. The
 * reduction is start_bucket's (MPI_Iallreduce, piece by piece), not MPI_Allreduce, whose
 * algorithm may add a group of three or more in another order: staged gradients then equal host
 * ones bit for bit. */
static void reduce_staged(sdp_sync *s, sdp_bucket *b, float *grads) {
    b->started = true;
    sync_count_ring_allreduce(s, b->count, b->nmembers);
    sync_to_host(s, s->stage, grads + b->start, b->count);
    for (size_t off = 0; off < b->count; off += SYNC_MAX_PIECE) {
        size_t len = b->count - off < SYNC_MAX_PIECE ? b->count - off : SYNC_MAX_PIECE;
        MPI_Iallreduce(MPI_IN_PLACE, s->stage + off, (int)len, MPI_FLOAT, MPI_SUM, b->comm,
                       &b->reqs[b->nreq++]);
    }
    MPI_Waitall(b->nreq, b->reqs, MPI_STATUSES_IGNORE);
    b->nreq = 0;
    sync_from_host(s, grads + b->start, s->stage, b->count);
}

/* A device's x[0, n) down to the host stage, reduce-scattered there as host memory is (the
 * non-blocking call, whose additions match it bit for bit), and this member's sum, `mine`
 * elements, back up to `to`. */
static void reduce_scatter_through_stage(sdp_sync *s, MPI_Comm comm, const float *x, size_t n,
                                         const int *counts, float *to, size_t mine) {
    sync_to_host(s, s->stage, x, n);
    MPI_Request req;
    MPI_Ireduce_scatter(MPI_IN_PLACE, s->stage, counts, MPI_FLOAT, MPI_SUM, comm, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    sync_from_host(s, to, s->stage, mine);
}

/* --zero 1 on a device without a communicator: the member's summed shard goes to its place. */
static void reduce_scatter_staged(sdp_sync *s, sdp_bucket *b, float *grads) {
    b->started = true;
    sync_count_ring_allreduce(s, b->count, b->nmembers); /* with the all-gather, as start_bucket */
    reduce_scatter_through_stage(s, b->comm, grads + b->start, b->count, b->shard_counts,
                                 grads + b->start + b->shard_lo, b->shard_hi - b->shard_lo);
}

static void scale(const sdp_sync *s, float *x, size_t n, float by) {
    sdp_scale(s->be, x, n, by);
}

static double sumsq(const sdp_sync *s, const float *x, size_t n) {
    return sdp_sumsq(s->be, x, n);
}

static void start_piece(sdp_sync *s, sdp_piece *p, float *grads) {
    if (p->started) return;
    p->started = true;
    const sdp_bucket *b = &s->buckets[p->bucket];
    if (!sync_reduced(b)) return;
    /* An early micro-batch's reduce-scatter has no all-gather to follow it. */
    count_ring(s, p->hi - p->lo, b->nmembers, s->early_micro_batch ? 1 : 2); /* as start_bucket */
    float *x = grads + p->store;
    if (b->dev) { /* the member's sum lands at its own part of the piece */
        s->be->reduce_scatter_start(s->be, b->dev, x, p->counts, p->displs);
        return;
    }
    if (!sync_staged(s, b)) {
        MPI_Ireduce_scatter(MPI_IN_PLACE, x, p->counts, MPI_FLOAT, MPI_SUM, b->comm, &p->req);
        return;
    }
    /* Staged: at once, through the one stage, leaving the sum at the piece's start as host
     * memory's in-place reduce-scatter does. */
    reduce_scatter_through_stage(s, b->comm, x, p->hi - p->lo, p->counts, x,
                                 p->shard_hi - p->shard_lo);
}

/* dst = src, or dst += src, in the gradients' memory (host or the backend's). */
static void grads_put(const sdp_sync *s, float *dst, const float *src, size_t n, bool add) {
    if (n == 0) return;
    if (sync_on_device(s) && add)
        s->be->add_rows(s->be, dst, n, src, n, 1, n);
    else if (sync_on_device(s))
        sync_device_copy(s, dst, src, n);
    else if (add)
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
    else
        memcpy(dst, src, n * sizeof(float));
}

static void grads_clear(const sdp_sync *s, float *x, size_t n) {
    if (sync_on_device(s))
        s->be->zero(s->be, x, n * sizeof(float));
    else
        memset(x, 0, n * sizeof(float));
}

/* Waits for a piece's reduce-scatter, copies this worker's part of its shard to the shards' area
 * (adds it, for a layer's piece after an earlier micro-batch of the step put its own there) and
 * clears the piece's place for the next layer that uses it. */
static void finish_piece(sdp_sync *s, sdp_piece *p, float *grads) {
    if (!p->started || p->done) return;
    p->done = true;
    const sdp_bucket *b = &s->buckets[p->bucket];
    /* An in-place MPI reduce-scatter (or a staged one) leaves this member's sum at the piece's
     * start, a device communicator's at its own part; with one member the piece is its shard. */
    size_t at = p->store;
    if (sync_reduced(b) && b->dev) {
        s->be->allreduce_wait(s->be);
        at += p->shard_lo - p->lo;
    } else if (sync_reduced(b) && !sync_staged(s, b)) {
        MPI_Wait(&p->req, MPI_STATUS_IGNORE);
    }
    grads_put(s, grads + p->state_start, grads + at, p->shard_hi - p->shard_lo,
              p->layer >= 0 && s->micro_batches_in > 0);
    grads_clear(s, grads + p->store, p->hi - p->lo);
}

static void progress_pieces(sdp_sync *s) {
    for (int i = 0; i < s->npieces; i++) {
        int flag; /* lets the library progress outstanding reductions */
        if (s->pieces[i].started && !s->pieces[i].done && s->pieces[i].req != MPI_REQUEST_NULL)
            MPI_Test(&s->pieces[i].req, &flag, MPI_STATUS_IGNORE);
    }
}

/* After layer l's backward: its pieces start, and the pieces in the slot layer l - 1 is about to
 * use (those of layer l + 1) finish. */
static void layer_done_pieces(sdp_sync *s, float *grads, int layer) {
    for (int i = 0; i < s->npieces; i++)
        if (s->pieces[i].layer == layer) start_piece(s, &s->pieces[i], grads);
    for (int i = 0; i < s->npieces; i++) {
        sdp_piece *p = &s->pieces[i];
        if (p->layer >= 0 && (p->layer & 1) != (layer & 1)) finish_piece(s, p, grads);
    }
    progress_pieces(s);
}

static void grads_end_pieces(sdp_sync *s, float *grads) {
    for (int i = 0; i < s->npieces; i++) {
        sdp_piece *p = &s->pieces[i];
        SDP_CHECK(p->layer < 0 || p->started,
                  "--zero 2: layer %d's gradients were never handed over (the backward pass must "
                  "call layer_done after every layer); this is a bug in sdp, please report it",
                  p->layer);
        start_piece(s, p, grads);
    }
    for (int i = 0; i < s->npieces; i++) {
        const sdp_piece *p = &s->pieces[i];
        finish_piece(s, &s->pieces[i], grads);
        scale(s, grads + p->state_start, p->shard_hi - p->shard_lo,
              1.0f / (float)s->buckets[p->bucket].nmembers);
    }
    s->micro_batches_in = 0;
}

static void reset_reductions(sdp_sync *s) {
    for (int b = 0; b < s->nbuckets; b++) {
        s->buckets[b].started = false;
        s->buckets[b].nreq = 0;
    }
    for (int i = 0; i < s->npieces; i++) {
        s->pieces[i].started = s->pieces[i].done = false;
        s->pieces[i].req = MPI_REQUEST_NULL;
    }
}

void sdp_sync_grads_begin(sdp_sync *s) {
    reset_reductions(s);
    s->early_micro_batch = false;
}

bool sdp_sync_reduces_every_micro_batch(const sdp_sync *s) {
    return s->zero2;
}

void sdp_sync_micro_batch_begin(sdp_sync *s) {
    SDP_CHECK(s->zero2, "sdp_sync_micro_batch_begin is for --zero 2 only; this is a bug in sdp, "
                        "please report it");
    reset_reductions(s);
    s->early_micro_batch = true;
}

/* The layers' pieces go into the shards now: the next micro-batch's backward refills the slots.
 * The stem's and head's pieces, held whole, keep accumulating until the last micro-batch. */
void sdp_sync_micro_batch_end(sdp_sync *s, float *grads) {
    for (int i = 0; i < s->npieces; i++) {
        sdp_piece *p = &s->pieces[i];
        if (p->layer < 0) continue;
        SDP_CHECK(p->started,
                  "--zero 2: layer %d's gradients were never handed over (the backward pass must "
                  "call layer_done after every layer); this is a bug in sdp, please report it",
                  p->layer);
        finish_piece(s, p, grads);
    }
    s->micro_batches_in++;
    s->early_micro_batch = false;
}

void sdp_sync_layer_done(sdp_sync *s, float *grads, int layer) {
    if (s->zero2) {
        layer_done_pieces(s, grads, layer);
        return;
    }
    for (int b = 0; b < s->nbuckets; b++) {
        sdp_bucket *bk = &s->buckets[b];
        if (bk->ready_after == layer) start_bucket(s, bk, grads);
        int flag; /* lets the library progress outstanding reductions */
        if (bk->nreq > 0) MPI_Testall(bk->nreq, bk->reqs, &flag, MPI_STATUSES_IGNORE);
    }
}

void sdp_sync_grads_end(sdp_sync *s, float *grads) {
    if (s->zero2) {
        grads_end_pieces(s, grads);
        return;
    }
    bool device_comms = false;
    for (int b = 0; b < s->nbuckets; b++) {
        start_bucket(s, &s->buckets[b], grads);
        device_comms |= s->buckets[b].dev != NULL;
    }
    if (device_comms) s->be->allreduce_wait(s->be);
    for (int b = 0; b < s->nbuckets; b++) {
        sdp_bucket *bk = &s->buckets[b];
        if (!sync_reduced(bk)) continue;
        if (sync_staged(s, bk)) (s->zero ? reduce_scatter_staged : reduce_staged)(s, bk, grads);
        if (bk->nreq > 0) MPI_Waitall(bk->nreq, bk->reqs, MPI_STATUSES_IGNORE);
        bk->nreq = 0;
        float *own = grads + bk->start + bk->shard_lo;
        const size_t n = bk->shard_hi - bk->shard_lo;
        /* An in-place MPI reduce-scatter leaves a member's sum at the start of the region (staged
         * or on a device communicator, it is at its place already). */
        if (s->zero && !sync_on_device(s)) memmove(own, grads + bk->start, n * sizeof(float));
        scale(s, own, n, 1.0f / (float)bk->nmembers);
    }
}

void sdp_sync_grads(sdp_sync *s, float *grads) {
    sdp_sync_grads_begin(s);
    sdp_sync_grads_end(s, grads);
}

double sdp_sync_grad_norm(sdp_sync *s, const float *grads) {
    double local = 0;
    for (int i = 0; s->zero2 && i < s->npieces; i++) /* each element lies in one piece's shard */
        local += sumsq(s, grads + s->pieces[i].state_start,
                       s->pieces[i].shard_hi - s->pieces[i].shard_lo);
    for (int b = 0; !s->zero2 && b < s->nbuckets; b++) {
        const sdp_bucket *bk = &s->buckets[b];
        if (s->zero) /* each element lies in one owner's shard */
            local += sumsq(s, grads + bk->start + bk->shard_lo, bk->shard_hi - bk->shard_lo);
        else /* each of the group's owners holds the same gradient */
            local += sumsq(s, grads + bk->start, bk->count) / bk->nmembers;
    }
    /* Gather and add in rank order so every rank computes the bitwise same norm. */
    double *all = sdp_xmalloc(sizeof(double) * (size_t)s->world, "every rank's gradient norm");
    MPI_Allgather(&local, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    double total = 0;
    for (int r = 0; r < s->world; r++) total += all[r];
    free(all);
    return sqrt(total);
}
