/* The batch loader, checked against a reference built here from the definition: sequences of
 * T+1 tokens at stride T inside each span, a Fisher-Yates order per epoch seeded by
 * (seed, epoch), and batch s of rank r taking positions [(s*world + r)*B, ... + B). Every token
 * in the test data is unique, so the first input of a row names the sequence it came from. */
#include "testutil.h"

#include "sdp/data.h"

enum { MAX_SPANS = 16 };

typedef struct {
    int k;    /* span */
    size_t p; /* offset of the first token in the span */
} seq_ref;

typedef struct {
    sdp_tokens tokens;
    sdp_token_span spans[MAX_SPANS];
    uint16_t *storage;
    int T;
    seq_ref *seqs; /* every valid sequence, in span order */
    size_t nseq;
    long *seq_starting_with; /* token value -> sequence index, or -1 */
} dataset;

/* Lengths include spans too short for a sequence (0, T and fewer), one exactly T+1, and ones
 * that do not end on a stride boundary. Tokens are 1, 2, 3, ... across all spans. */
static void make_dataset(dataset *d, const size_t *lens, int nspans, int T) {
    memset(d, 0, sizeof *d);
    assert_true(nspans <= MAX_SPANS);
    size_t total = 0;
    for (int k = 0; k < nspans; k++) total += lens[k];
    assert_true(total < 65535);
    d->storage = malloc((total + 1) * sizeof *d->storage);
    d->seq_starting_with = malloc(65536 * sizeof *d->seq_starting_with);
    d->seqs = malloc((total + 1) * sizeof *d->seqs);
    for (int v = 0; v < 65536; v++) d->seq_starting_with[v] = -1;
    d->T = T;
    size_t off = 0;
    for (int k = 0; k < nspans; k++) {
        d->spans[k] = (sdp_token_span){d->storage + off, lens[k]};
        for (size_t i = 0; i < lens[k]; i++) d->storage[off + i] = (uint16_t)(off + i + 1);
        for (size_t p = 0; p + (size_t)T < lens[k]; p += (size_t)T) {
            d->seq_starting_with[d->storage[off + p]] = (long)d->nseq;
            d->seqs[d->nseq++] = (seq_ref){k, p};
        }
        off += lens[k];
    }
    d->tokens = (sdp_tokens){.spans = d->spans, .nspans = nspans, .vocab = 65536, .ntokens = total};
}

static void free_dataset(dataset *d) {
    free(d->storage);
    free(d->seqs);
    free(d->seq_starting_with);
}

static const size_t LENS[] = {523, 4, 0, 6, 5, 317, 1, 9, 200, 5, 44};
enum { T_TEST = 5, NLENS = sizeof LENS / sizeof *LENS };

/* Checks that a row is a whole sequence inside one span, with targets the next tokens, and
 * returns its index. */
static size_t identify_row(const dataset *d, const int *inputs, const int *targets) {
    assert_true(inputs[0] >= 0 && inputs[0] < 65536);
    long j = d->seq_starting_with[inputs[0]];
    if (j < 0) {
        print_error("row starting with token %d is not a sequence at stride T in one span\n",
                    inputs[0]);
        fail();
    }
    seq_ref s = d->seqs[j];
    const uint16_t *tok = d->spans[s.k].tok + s.p;
    assert_true(s.p + (size_t)d->T < d->spans[s.k].n);
    for (int t = 0; t < d->T; t++) {
        assert_int_equal(inputs[t], tok[t]);
        assert_int_equal(targets[t], tok[t + 1]);
    }
    return (size_t)j;
}

/* Reads one batch and returns the sequence index of each row in ids[B]. */
static void next_ids(sdp_loader *L, const dataset *d, size_t *ids) {
    int *in = malloc((size_t)L->B * (size_t)L->T * sizeof *in);
    int *tg = malloc((size_t)L->B * (size_t)L->T * sizeof *tg);
    sdp_loader_next(L, in, tg);
    for (int b = 0; b < L->B; b++)
        ids[b] = identify_row(d, in + (size_t)b * (size_t)L->T, tg + (size_t)b * (size_t)L->T);
    free(in);
    free(tg);
}

/* The order the brief specifies, written out independently. */
static void reference_order(size_t *order, size_t n, uint64_t seed, uint64_t epoch, bool shuffle) {
    for (size_t i = 0; i < n; i++) order[i] = i;
    if (!shuffle) return;
    sdp_rng r = sdp_rng_make(seed, epoch);
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)sdp_rng_below(&r, i + 1);
        size_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static void test_sequence_count(void **state) {
    (void)state;
    dataset d;
    make_dataset(&d, LENS, NLENS, T_TEST);
    /* Per span (n - 1) / T for n > T, spelled out for these lengths. */
    size_t expected = 104 + 0 + 0 + 1 + 0 + 63 + 0 + 1 + 39 + 0 + 8;
    assert_int_equal(d.nseq, expected);
    const int shapes[][2] = {{1, 1}, {1, 7}, {3, 4}, {4, 54}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        sdp_mem mem = {0};
        sdp_loader L;
        sdp_loader_init(&L, &d.tokens, shapes[i][1], T_TEST, 0, shapes[i][0], 1, true, &mem);
        assert_int_equal(L.nseq, expected);
        assert_int_equal(sdp_loader_steps_per_epoch(&L),
                         expected / (size_t)(shapes[i][0] * shapes[i][1]));
        sdp_loader_free(&L, &mem);
        assert_int_equal(mem.total_cur, 0);
    }
    free_dataset(&d);
}

/* Every batch of every rank over three epochs, shuffled or not, equals the reference order;
 * identify_row checks each row's tokens and targets against the data. */
static void check_against_reference(bool shuffle, int world, int B, uint64_t seed) {
    dataset d;
    make_dataset(&d, LENS, NLENS, T_TEST);
    size_t *order = malloc(d.nseq * sizeof *order);
    size_t *ids = malloc((size_t)B * sizeof *ids);
    for (int r = 0; r < world; r++) {
        sdp_mem mem = {0};
        sdp_loader L;
        sdp_loader_init(&L, &d.tokens, B, T_TEST, r, world, seed, shuffle, &mem);
        uint64_t steps = sdp_loader_steps_per_epoch(&L);
        for (uint64_t e = 0; e < 3; e++) {
            reference_order(order, d.nseq, seed, e, shuffle);
            for (uint64_t s = 0; s < steps; s++) {
                assert_int_equal(L.pos.epoch, e);
                assert_int_equal(L.pos.step, s);
                next_ids(&L, &d, ids);
                for (int b = 0; b < B; b++)
                    assert_int_equal(
                        ids[b],
                        order[(s * (uint64_t)world + (uint64_t)r) * (uint64_t)B + (uint64_t)b]);
            }
        }
        assert_int_equal(L.pos.epoch, 3);
        assert_int_equal(L.pos.step, 0);
        sdp_loader_free(&L, &mem);
        assert_int_equal(mem.total_cur, 0);
    }
    free(order);
    free(ids);
    free_dataset(&d);
}

static void test_sequential_without_shuffle(void **state) {
    (void)state;
    check_against_reference(false, 1, 3, 7);
    check_against_reference(false, 2, 5, 7);
}

static void test_shuffled_order(void **state) {
    (void)state;
    check_against_reference(true, 1, 1, 42);
    check_against_reference(true, 3, 4, 42);
    check_against_reference(true, 4, 54, 9);
}

/* Collects the sequence ids rank by rank for one epoch of one seed. */
static size_t *epoch_ids(const dataset *d, int world, int B, uint64_t seed, uint64_t epoch,
                         size_t *count) {
    sdp_mem mem = {0};
    sdp_loader L;
    sdp_loader_init(&L, &d->tokens, B, d->T, 0, world, seed, true, &mem);
    uint64_t steps = sdp_loader_steps_per_epoch(&L);
    sdp_loader_free(&L, &mem);
    *count = (size_t)steps * (size_t)world * (size_t)B;
    size_t *ids = malloc(*count * sizeof *ids), n = 0;
    for (int r = 0; r < world; r++) {
        sdp_loader_init(&L, &d->tokens, B, d->T, r, world, seed, true, &mem);
        sdp_loader_seek(&L, (sdp_loader_pos){epoch, 0});
        for (uint64_t s = 0; s < steps; s++, n += (size_t)B) next_ids(&L, d, ids + n);
        sdp_loader_free(&L, &mem);
    }
    return ids;
}

/* Within an epoch the ranks together read steps*world*B distinct sequences; with world*B
 * dividing nseq that is every sequence exactly once. */
static void test_ranks_disjoint(void **state) {
    (void)state;
    dataset d;
    make_dataset(&d, LENS, NLENS, T_TEST);
    const int shapes[][2] = {{3, 4}, {2, 1}, {1, 1}, {4, 7}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        for (uint64_t epoch = 0; epoch < 2; epoch++) {
            size_t n;
            size_t *ids = epoch_ids(&d, shapes[i][0], shapes[i][1], 5, epoch, &n);
            assert_int_equal(n, d.nseq / (size_t)(shapes[i][0] * shapes[i][1]) *
                                    (size_t)(shapes[i][0] * shapes[i][1]));
            char *seen = calloc(d.nseq, 1);
            for (size_t j = 0; j < n; j++) {
                assert_true(ids[j] < d.nseq);
                assert_int_equal(seen[ids[j]], 0);
                seen[ids[j]] = 1;
            }
            if (shapes[i][0] * shapes[i][1] == 1)
                for (size_t j = 0; j < d.nseq; j++) assert_int_equal(seen[j], 1);
            free(seen);
            free(ids);
        }
    }
    free_dataset(&d);
}

/* Same seed, same stream; another seed or another epoch, another order. */
static void test_determinism(void **state) {
    (void)state;
    dataset d;
    make_dataset(&d, LENS, NLENS, T_TEST);
    size_t n;
    size_t *a = epoch_ids(&d, 2, 3, 1234, 0, &n);
    size_t *b = epoch_ids(&d, 2, 3, 1234, 0, &n);
    size_t *c = epoch_ids(&d, 2, 3, 1235, 0, &n);
    size_t *e1 = epoch_ids(&d, 2, 3, 1234, 1, &n);
    assert_memory_equal(a, b, n * sizeof *a);
    size_t same_seed = 0, same_epoch = 0, in_place = 0;
    for (size_t j = 0; j < n; j++) {
        same_seed += a[j] == c[j];
        same_epoch += a[j] == e1[j];
        in_place += a[j] == j;
    }
    /* A random permutation of ~200 items agrees with another in about one place. */
    assert_true(same_seed < n / 10);
    assert_true(same_epoch < n / 10);
    assert_true(in_place < n / 10);
    free(a);
    free(b);
    free(c);
    free(e1);
    free_dataset(&d);
}

/* Resuming from any saved position, including the last batch of an epoch, gives exactly the
 * batches the uninterrupted loader gave next. */
static void test_seek_resumes_exactly(void **state) {
    (void)state;
    dataset d;
    make_dataset(&d, LENS, NLENS, T_TEST);
    const int B = 4, world = 3, rank = 1;
    const size_t row = (size_t)B * T_TEST;
    sdp_mem mem = {0};
    sdp_loader L;
    sdp_loader_init(&L, &d.tokens, B, T_TEST, rank, world, 77, true, &mem);
    uint64_t steps = sdp_loader_steps_per_epoch(&L);
    size_t total = (size_t)(3 * steps);
    int *in = malloc(total * row * sizeof *in), *tg = malloc(total * row * sizeof *tg);
    sdp_loader_pos *pos = malloc(total * sizeof *pos);
    for (size_t i = 0; i < total; i++) {
        pos[i] = L.pos;
        sdp_loader_next(&L, in + i * row, tg + i * row);
    }
    sdp_loader_free(&L, &mem);

    const size_t starts[] = {
        0, 1, (size_t)steps - 1, (size_t)steps, (size_t)steps + 2, (size_t)(2 * steps) - 1};
    int *in2 = malloc(row * sizeof *in2), *tg2 = malloc(row * sizeof *tg2);
    for (size_t si = 0; si < sizeof starts / sizeof *starts; si++) {
        /* Start from a loader that has already moved elsewhere, as after a crash and restart
         * the caller may seek from any state. */
        sdp_loader_init(&L, &d.tokens, B, T_TEST, rank, world, 77, true, &mem);
        sdp_loader_seek(&L, (sdp_loader_pos){5, 1});
        sdp_loader_seek(&L, pos[starts[si]]);
        for (size_t i = starts[si]; i < total && i < starts[si] + (size_t)steps + 2; i++) {
            assert_int_equal(L.pos.epoch, pos[i].epoch);
            assert_int_equal(L.pos.step, pos[i].step);
            sdp_loader_next(&L, in2, tg2);
            assert_memory_equal(in2, in + i * row, row * sizeof *in2);
            assert_memory_equal(tg2, tg + i * row, row * sizeof *tg2);
        }
        sdp_loader_free(&L, &mem);
    }
    /* The end of an epoch is the start of the next. */
    sdp_loader_init(&L, &d.tokens, B, T_TEST, rank, world, 77, true, &mem);
    sdp_loader_seek(&L, (sdp_loader_pos){0, steps});
    assert_int_equal(L.pos.epoch, 1);
    assert_int_equal(L.pos.step, 0);
    sdp_loader_next(&L, in2, tg2);
    assert_memory_equal(in2, in + steps * row, row * sizeof *in2);
    sdp_loader_free(&L, &mem);
    assert_int_equal(mem.total_cur, 0);
    free(in);
    free(tg);
    free(in2);
    free(tg2);
    free(pos);
    free_dataset(&d);
}

/* A position saved by old workers, read by another number of them (sdp_loader_pos_rescale): the
 * new workers' next batches are the epoch's order from the first item the old ones had not
 * dealt, rounded up to a whole step of the new workers (so fewer than new*B items skipped, none
 * dealt twice), and a step past the new epoch's end starts the next epoch. Checked for every
 * saved step against the order built here from sdp_epoch_order. */
static void check_rescale(const dataset *d, int B, int old_world, int new_world) {
    const uint64_t seed = 91;
    sdp_mem mem = {0};
    const uint64_t old_steps = d->nseq / ((size_t)old_world * B);
    const uint64_t new_steps = d->nseq / ((size_t)new_world * B);
    uint32_t *order = malloc(d->nseq * sizeof *order);
    int *in = malloc((size_t)B * T_TEST * sizeof *in),
        *tg = malloc((size_t)B * T_TEST * sizeof *tg);
    for (uint64_t s = 0; s < old_steps; s++) {
        const sdp_loader_pos saved = {2, s};
        const sdp_loader_pos pos = sdp_loader_pos_rescale(saved, old_world, new_world, new_steps);
        const size_t dealt = (size_t)s * old_world * B; /* items the old workers took */
        size_t next = (size_t)pos.step * new_world * B; /* the first the new ones take */
        if (pos.epoch == saved.epoch) {
            assert_true(next >= dealt && next < dealt + (size_t)new_world * B);
        } else { /* what was left is less than a step of the new workers */
            assert_int_equal(pos.epoch, saved.epoch + 1);
            assert_int_equal(pos.step, 0);
            assert_true(dealt + (size_t)new_world * B > new_steps * new_world * B);
        }
        sdp_epoch_order(order, d->nseq, seed, pos.epoch, true);
        for (int r = 0; r < new_world; r++) {
            sdp_loader L;
            sdp_loader_init(&L, &d->tokens, B, T_TEST, r, new_world, seed, true, &mem);
            sdp_loader_seek(&L, pos);
            sdp_loader_next(&L, in, tg);
            for (int b = 0; b < B; b++)
                assert_int_equal(d->seq_starting_with[in[b * T_TEST]],
                                 order[next + (size_t)r * B + (size_t)b]);
            sdp_loader_free(&L, &mem);
        }
    }
    /* The same number of workers keeps the position as it is. */
    const sdp_loader_pos same = sdp_loader_pos_rescale((sdp_loader_pos){4, 3}, 3, 3, 100);
    assert_int_equal(same.epoch, 4);
    assert_int_equal(same.step, 3);
    assert_int_equal(mem.total_cur, 0);
    free(order);
    free(in);
    free(tg);
}

static void test_rescale_to_another_world(void **state) {
    (void)state;
    dataset d;
    make_dataset(&d, LENS, NLENS, T_TEST);
    check_rescale(&d, 2, 3, 2);
    check_rescale(&d, 2, 2, 3);
    check_rescale(&d, 3, 4, 1);
    check_rescale(&d, 3, 1, 4);
    check_rescale(&d, 1, 5, 3);
    free_dataset(&d);
}

typedef struct {
    const sdp_tokens *tokens;
    int B, T, world;
} init_args;

static void init_loader(void *ctx) {
    init_args *a = ctx;
    sdp_mem mem = {0};
    sdp_loader L;
    sdp_loader_init(&L, a->tokens, a->B, a->T, 0, a->world, 1, true, &mem);
}

static void test_too_small(void **state) {
    (void)state;
    const size_t lens[] = {31, 5, 6};
    dataset d;
    make_dataset(&d, lens, 3, T_TEST);
    assert_int_equal(d.nseq, 7);
    /* The count callers check first, to name the data in their error: the loader's own. */
    assert_int_equal(sdp_loader_count(&d.tokens, T_TEST), 7);
    assert_int_equal(sdp_loader_count(&d.tokens, 30), 1);
    assert_int_equal(sdp_loader_count(&d.tokens, 31), 0);
    init_args a = {&d.tokens, 4, T_TEST, 2};
    tu_expect_fatal(init_loader, &a,
                    "dataset has 7 sequences of T+1 = 6 tokens; need at least world*B = 2*4 = 8");
    tu_expect_fatal(init_loader, &a, "use a smaller batch or sequence length or more data");
    /* 7 sequences are enough for B = 7 on one rank. */
    a = (init_args){&d.tokens, 7, T_TEST, 1};
    sdp_mem mem = {0};
    sdp_loader L;
    sdp_loader_init(&L, a.tokens, a.B, a.T, 0, a.world, 1, true, &mem);
    assert_int_equal(sdp_loader_steps_per_epoch(&L), 1);
    sdp_loader_free(&L, &mem);
    /* A sequence length as long as the data leaves no sequence at all. */
    a = (init_args){&d.tokens, 1, 31, 1};
    tu_expect_fatal(init_loader, &a, "dataset has 0 sequences of T+1 = 32 tokens");
    a = (init_args){&d.tokens, 0, T_TEST, 1};
    tu_expect_fatal(init_loader, &a, "batch size 0 and sequence length 5 must both be at least 1");
    free_dataset(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequence_count),
        cmocka_unit_test(test_sequential_without_shuffle),
        cmocka_unit_test(test_shuffled_order),
        cmocka_unit_test(test_ranks_disjoint),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_seek_resumes_exactly),
        cmocka_unit_test(test_rescale_to_another_world),
        cmocka_unit_test(test_too_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
