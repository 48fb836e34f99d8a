/* The SDP plan: lists the units of a full-model layout, gives each exactly k owners out of N
 * workers, and groups units by owner set. Every rank builds the same plan from the same
 * options, so nothing here communicates.
 *
 * Cyclic assignment. Within a sequence of units (the droppable blocks, or the chunks of one
 * inner group of one block), unit u is owned by the window of workers (u + j) mod N, j < k,
 * for as many whole rounds of N units as the sequence holds. Taken alone, that formula
 * overloads some workers whenever the sequence length is not a multiple of N (5 workers, k = 3
 * and 3 chunks give worker 0 one chunk and worker 2 all three; 1024 workers, k = 512 and 32
 * chunks give worker 0 one chunk and worker 100 all 32). So the leftover units take back-to-back
 * windows instead, continuing round the ring from where the previous sequence's leftovers of
 * the same kind stopped. Each leftover slot then goes to the next worker in turn, which keeps
 * every worker's share within one unit of every other's, per sequence and over the model, and
 * every window still starts at one of N places, so there are at most N owner sets. When the
 * sequence length is a multiple of N (the default of one chunk per worker), this is exactly the
 * (u + j) mod N window.
 *
 * Random assignment composes that pattern with seeded permutations: of the worker ids, and of
 * the units within each sequence. Loads and the number of owners stay exactly as in cyclic.
 *
 * Each owner group then gets its publisher, the member that broadcasts the group's units under
 * backward masking, balancing the elements each worker publishes (see choose_publishers). */
#include "sdp/plan.h"

#include "sdp/check.h"
#include "sdp/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- listing units ------------------------------------------------------------------------ */

static sdp_unit *alloc_units(int n) {
    sdp_unit *u = sdp_xcalloc((size_t)(n > 0 ? n : 1), sizeof *u, "the SDP plan's units");
    return u;
}

/* One unit per droppable block; the other blocks are shared. Under plain data parallelism the
 * option is irrelevant, so a model without droppable blocks just has no units. */
static void list_block_units(sdp_plan *p, const sdp_layout *full) {
    int n = 0;
    for (int b = 0; b < full->nblocks; b++) n += full->blocks[b].droppable;
    SDP_CHECK_ALL(n > 0 || p->cfg.mask == SDP_MASK_NONE,
                  "block units need droppable blocks (identity-shortcut blocks); this model has "
                  "none: use --sdp-unit neuron");
    p->units = alloc_units(n);
    for (int b = 0; b < full->nblocks; b++) {
        if (!full->blocks[b].droppable) continue;
        /* group -1 means the whole block: every group at full width, so no atom range. */
        p->units[p->nunits++] = (sdp_unit){.block = b, .group = -1};
    }
}

/* "--sdp-chunks 5", or how the default produced the count, for error messages. */
static void describe_chunks(char *buf, size_t len, int requested, int chunks) {
    if (requested > 0)
        snprintf(buf, len, "--sdp-chunks %d", chunks);
    else
        snprintf(buf, len,
                 "the default of %d chunks (one per worker, or the next count that "
                 "splits every group)",
                 chunks);
}

/* One chunk per worker when that splits every inner group evenly (every worker then owns k/N of
 * each group); otherwise the smallest count above N that does, so that common shapes such as 6
 * heads on 4 workers run without flags (the leftover chunks take back-to-back windows, and
 * shares stay balanced within one chunk). N when no count up to the narrowest group works:
 * check_chunks_fit then explains. */
static int default_chunks(const sdp_layout *full, int world) {
    int narrowest = 0;
    for (int b = 0; b < full->nblocks; b++)
        for (int g = 0; g < full->blocks[b].ngroups; g++) {
            const int w = full->blocks[b].groups[g].width;
            if (narrowest == 0 || w < narrowest) narrowest = w;
        }
    for (int c = world; c <= narrowest; c++) {
        bool splits = true;
        for (int b = 0; b < full->nblocks && splits; b++)
            for (int g = 0; g < full->blocks[b].ngroups; g++)
                splits = splits && full->blocks[b].groups[g].width % c == 0;
        if (splits) return c;
    }
    return world;
}

/* The divisors of w to suggest: all of them when few, else the ones nearest to `want`. */
static void suggest_divisors(char *buf, size_t len, int w, int want) {
    enum { SIDE = 4 };
    int divs[2 * SIDE], n = 0, total = 0;
    for (int d = 1; d <= w; d++) total += w % d == 0;
    const bool all = total <= 2 * SIDE;
    if (all) {
        for (int d = 1; d <= w; d++)
            if (w % d == 0) divs[n++] = d;
    } else {
        int below = 0; /* up to SIDE divisors under `want`, nearest first, stored ascending */
        for (int d = want - 1; d >= 1 && below < SIDE; d--)
            if (w % d == 0) below++;
        for (int d = want - 1, i = below - 1; i >= 0; d--)
            if (w % d == 0) divs[i--] = d;
        n = below;
        for (int d = want + 1; d <= w && n < below + SIDE; d++)
            if (w % d == 0) divs[n++] = d;
    }
    size_t used = (size_t)snprintf(buf, len, "%s", all ? "" : "e.g. ");
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%d",
                                 i == 0 ? "" : (i == n - 1 ? " or " : ", "), divs[i]);
}

static int gcd(int a, int b) {
    while (b) {
        const int t = a % b;
        a = b, b = t;
    }
    return a;
}

/* The largest width that divides every group's: the chunk counts that split them all divide it. */
static int common_width(const sdp_layout *full) {
    int common = 0;
    for (int b = 0; b < full->nblocks; b++)
        for (int g = 0; g < full->blocks[b].ngroups; g++)
            common = gcd(common, full->blocks[b].groups[g].width);
    return common;
}

/* common: common_width, so that the counts suggested split every group, not only this one. */
static void check_chunks_fit(const sdp_block *blk, const sdp_group *g, int requested, int chunks,
                             int common) {
    char what[96], divs[160];
    describe_chunks(what, sizeof what, requested, chunks);
    SDP_CHECK_ALL(chunks <= g->width,
                  "%s is more than the width of group %s in block %s (%d atoms): use --sdp-chunks "
                  "of at most %d, or --sdp-unit block",
                  what, g->name, blk->name, g->width, common);
    if (g->width % chunks == 0) return;
    suggest_divisors(divs, sizeof divs, common, chunks);
    if (common == g->width)
        sdp_fatal_all("%s does not split the width of group %s in block %s (%d atoms) into equal "
                      "chunks: use --sdp-chunks dividing %d (%s)",
                      what, g->name, blk->name, g->width, g->width, divs);
    sdp_fatal_all("%s does not split the width of group %s in block %s (%d atoms) into equal "
                  "chunks: use --sdp-chunks dividing %d, which divides every group's width (%s)",
                  what, g->name, blk->name, g->width, common, divs);
}

/* For every inner group of every block, `chunks` equal contiguous chunks, in (block, group,
 * chunk) order. Whole-block tensors (norms) and blocks without groups are shared. */
static void list_neuron_units(sdp_plan *p, const sdp_layout *full) {
    const int requested = p->cfg.chunks;
    SDP_CHECK_ALL(
        requested >= 0,
        "--sdp-chunks %d is negative: use a positive count, or 0 for one chunk per worker",
        requested);
    /* With everyone owning everything the split is irrelevant, and plain data parallelism must
     * run on any model with any number of workers: default to one chunk per group. */
    int chunks = requested > 0                  ? requested
                 : p->cfg.mask == SDP_MASK_NONE ? 1
                                                : default_chunks(full, p->cfg.world);
    p->cfg.chunks = chunks;
    const int common = common_width(full);
    int n = 0;
    for (int b = 0; b < full->nblocks; b++) {
        const sdp_block *blk = &full->blocks[b];
        SDP_ASSERT(blk->ngroups >= 0 && blk->ngroups <= SDP_MAX_GROUPS);
        for (int g = 0; g < blk->ngroups; g++) {
            SDP_ASSERT(blk->groups[g].width >= 1);
            check_chunks_fit(blk, &blk->groups[g], requested, chunks, common);
            n += chunks;
        }
    }
    p->units = alloc_units(n);
    for (int b = 0; b < full->nblocks; b++) {
        const sdp_block *blk = &full->blocks[b];
        for (int g = 0; g < blk->ngroups; g++) {
            int w = blk->groups[g].width / chunks;
            for (int c = 0; c < chunks; c++)
                p->units[p->nunits++] =
                    (sdp_unit){.block = b, .group = g, .chunk = c, .start = c * w, .width = w};
        }
    }
}

/* ---- owners ------------------------------------------------------------------------------- */

static void fisher_yates(int *perm, int n, sdp_rng *r) {
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)sdp_rng_below(r, (uint64_t)i + 1);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* Window starts for a sequence of n units (see the top of the file). `carry` is where the
 * previous leftovers of this kind of sequence stopped, and is advanced past this one's. */
static void cyclic_starts(int n, int N, int k, int *carry, int *starts) {
    int whole = n - n % N;
    for (int u = 0; u < whole; u++) starts[u] = u % N;
    for (int u = whole; u < n; u++) {
        starts[u] = *carry;
        *carry = (int)(((long)*carry + k) % N);
    }
}

typedef struct {
    int N, k;
    const int *worker; /* worker permutation (identity for cyclic) */
    unsigned char *mark;
    int *starts, *order;
} assigner;

/* Owners of the window [start, start + k) mapped through the worker permutation, ascending. */
static void set_owners(const assigner *a, sdp_unit *u, int start) {
    memset(a->mark, 0, (size_t)a->N);
    for (int j = 0; j < a->k; j++) a->mark[a->worker[(start + j) % a->N]] = 1;
    int n = 0;
    for (int w = 0; w < a->N; w++)
        if (a->mark[w]) u->owners[n++] = w;
    SDP_ASSERT(n == a->k);
}

/* Assigns the n units at `first` as one sequence. With a random assignment, unit i takes the
 * window of position order[i]. */
static void assign_sequence(const assigner *a, sdp_unit *first, int n, int *carry,
                            sdp_rng *shuffle) {
    cyclic_starts(n, a->N, a->k, carry, a->starts);
    if (shuffle)
        fisher_yates(a->order, n, shuffle);
    else
        for (int i = 0; i < n; i++) a->order[i] = i;
    for (int i = 0; i < n; i++) set_owners(a, &first[i], a->starts[a->order[i]]);
}

static void assign_owners(sdp_plan *p) {
    const int N = p->cfg.world, k = p->cfg.owners, U = p->nunits;
    const bool random = p->cfg.assign == SDP_ASSIGN_RANDOM;
    if (U == 0) return;
    const char *what = "assigning the SDP plan's owners";
    /* all owner lists, one block */
    int *pool = sdp_xmalloc((size_t)U * (size_t)k * sizeof *pool, what);
    int *worker = sdp_xmalloc((size_t)N * sizeof *worker, what);
    assigner a = {N,
                  k,
                  worker,
                  sdp_xmalloc((size_t)N, what),
                  sdp_xmalloc((size_t)U * sizeof(int), what),
                  sdp_xmalloc((size_t)U * sizeof(int), what)};
    for (int i = 0; i < U; i++) p->units[i].owners = pool + (size_t)i * (size_t)k;
    if (random) {
        sdp_rng r = sdp_rng_make(p->cfg.seed, 0x5d9);
        fisher_yates(worker, N, &r);
    } else {
        for (int w = 0; w < N; w++) worker[w] = w;
    }
    if (p->cfg.unit == SDP_UNIT_BLOCK) {
        int carry = 0;
        sdp_rng r = sdp_rng_make(p->cfg.seed, 0);
        assign_sequence(&a, p->units, U, &carry, random ? &r : NULL);
    } else {
        /* One sequence per (block, group); leftovers continue per group slot, so that e.g. the
         * attention chunks spread over all workers across blocks, and so do the MLP chunks. */
        int carry[SDP_MAX_GROUPS] = {0};
        for (int i = 0; i < U; i += p->cfg.chunks) {
            const sdp_unit *u = &p->units[i];
            sdp_rng r = sdp_rng_make(p->cfg.seed,
                                     1 + (uint64_t)u->block * SDP_MAX_GROUPS + (uint64_t)u->group);
            assign_sequence(&a, &p->units[i], p->cfg.chunks, &carry[u->group], random ? &r : NULL);
        }
    }
    free(worker);
    free(a.mark);
    free(a.starts);
    free(a.order);
}

/* ---- owner groups ------------------------------------------------------------------------- */

typedef struct {
    const int *owners;
    int k, unit;
} owner_key;

static int compare_owner_keys(const void *pa, const void *pb) {
    const owner_key *a = pa, *b = pb;
    for (int i = 0; i < a->k; i++)
        if (a->owners[i] != b->owners[i]) return a->owners[i] < b->owners[i] ? -1 : 1;
    return a->unit < b->unit ? -1 : a->unit > b->unit;
}

/* Distinct owner sets in lexicographic order, and each unit's index among them. */
static void build_owner_groups(sdp_plan *p) {
    const int U = p->nunits, k = p->cfg.owners;
    if (U == 0) return;
    owner_key *keys = sdp_xmalloc((size_t)U * sizeof *keys, "the SDP plan's owner sets");
    for (int i = 0; i < U; i++) keys[i] = (owner_key){p->units[i].owners, k, i};
    qsort(keys, (size_t)U, sizeof *keys, compare_owner_keys);
    int ngroups = 0;
    for (int i = 0; i < U; i++)
        ngroups += i == 0 || memcmp(keys[i].owners, keys[i - 1].owners, (size_t)k * sizeof(int));
    p->groups = sdp_xcalloc((size_t)ngroups, sizeof *p->groups, "the SDP plan's owner groups");
    int *pool = sdp_xmalloc((size_t)ngroups * (size_t)k * sizeof *pool,
                            "the SDP plan's owner groups"); /* all member lists */
    for (int i = 0; i < U; i++) {
        if (i == 0 || memcmp(keys[i].owners, keys[i - 1].owners, (size_t)k * sizeof(int))) {
            sdp_owner_group *g = &p->groups[p->ngroups++];
            g->nmembers = k;
            g->members = pool + (size_t)(p->ngroups - 1) * (size_t)k;
            memcpy(g->members, keys[i].owners, (size_t)k * sizeof(int));
        }
        p->units[keys[i].unit].owner_group = p->ngroups - 1;
    }
    free(keys);
}

/* ---- publishers --------------------------------------------------------------------------- */

typedef struct {
    size_t elems;
    int group;
} sized_group;

static int by_elems_descending(const void *pa, const void *pb) {
    const sized_group *a = pa, *b = pb;
    if (a->elems != b->elems) return a->elems < b->elems ? 1 : -1;
    return (a->group > b->group) - (a->group < b->group);
}

static void count_group_elems(sdp_plan *p, const sdp_layout *full) {
    size_t *unit_elems =
        sdp_xcalloc((size_t)p->nunits + 1, sizeof *unit_elems, "sizing the SDP plan's groups");
    sdp_plan_unit_elems(p, full, false, unit_elems, NULL);
    for (int u = 0; u < p->nunits; u++) p->groups[p->units[u].owner_group].elems += unit_elems[u];
    free(unit_elems);
}

/* Elements each worker publishes, and the state of a search for a chain of hand-overs: a group
 * passes from its publisher to a fellow member, who may pass on another group, and so on. */
typedef struct {
    sdp_plan *p;
    size_t *load;    /* per worker: elements it publishes */
    int *via;        /* per worker reached: the group it receives (push) or gives (pull) */
    int *toward;     /* per worker reached by a pull: the worker its group goes to */
    size_t *carried; /* per worker reached: elements of that group */
    int *queue;
} balancer;

enum { UNREACHED = -2, CHAIN_END = -1 };

static bool movable(const sdp_owner_group *g, int N) {
    return g->nmembers < N && g->elems > 0;
}

/* The index of x in the ascending a[0, n), or -1. */
static int find_ascending(const int *a, int n, int x) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && a[lo] == x ? lo : -1;
}

int sdp_owner_group_index(const sdp_owner_group *g, int rank) {
    return find_ascending(g->members, g->nmembers, rank); /* members ascend */
}

static bool has_member(const sdp_owner_group *g, int rank) {
    return sdp_owner_group_index(g, rank) >= 0;
}

static void move_group(balancer *b, int group, int to) {
    sdp_owner_group *g = &b->p->groups[group];
    b->load[g->publisher] -= g->elems;
    b->load[to] += g->elems;
    g->publisher = to;
}

static int start_search(balancer *b, int from) {
    for (int w = 0; w < b->p->cfg.world; w++) b->via[w] = UNREACHED;
    b->via[from] = CHAIN_END;
    b->carried[from] = 0;
    b->queue[0] = from;
    return 1;
}

/* The busiest worker hands a group to a fellow member, who may hand on one of its own, and so on,
 * with every worker involved ending below the busiest's old load: the busiest load falls or
 * fewer workers carry it. */
static bool push_chain(balancer *b, int busiest) {
    const sdp_plan *p = b->p;
    const size_t top = b->load[busiest];
    for (int head = 0, tail = start_search(b, busiest); head < tail; head++) {
        const int u = b->queue[head];
        for (int g = 0; g < p->ngroups; g++) {
            const sdp_owner_group *og = &p->groups[g];
            if (og->publisher != u || !movable(og, p->cfg.world) ||
                b->load[u] + b->carried[u] - og->elems >= top)
                continue;
            for (int j = 0; j < og->nmembers; j++) {
                int v = og->members[j];
                if (b->via[v] != UNREACHED) continue;
                b->via[v] = g;
                b->carried[v] = og->elems;
                b->queue[tail++] = v;
                if (b->load[v] + og->elems >= top) continue; /* v must hand something on */
                while (v != busiest) { /* apply the chain, from its end back to the busiest */
                    const int from = p->groups[b->via[v]].publisher;
                    move_group(b, b->via[v], v);
                    v = from;
                }
                return true;
            }
        }
    }
    return false;
}

/* The idlest worker takes a group from a fellow member, who may take one from another, and so on,
 * with every worker involved ending above the idlest's old load and below the busiest load: the
 * idlest load rises or fewer workers carry it, and the busiest load and the number carrying it do
 * not grow. */
static bool pull_chain(balancer *b, int idlest, size_t top) {
    const sdp_plan *p = b->p;
    const size_t bottom = b->load[idlest];
    for (int head = 0, tail = start_search(b, idlest); head < tail; head++) {
        const int v = b->queue[head];
        for (int g = 0; g < p->ngroups; g++) {
            const sdp_owner_group *og = &p->groups[g];
            int u = og->publisher;
            if (b->via[u] != UNREACHED || !movable(og, p->cfg.world) || !has_member(og, v))
                continue;
            const size_t v_after = b->load[v] + og->elems - b->carried[v];
            if (v_after <= bottom || v_after >= top) continue;
            b->via[u] = g;
            b->toward[u] = v;
            b->carried[u] = og->elems;
            b->queue[tail++] = u;
            if (b->load[u] - og->elems <= bottom) continue; /* u must take something in */
            while (u != idlest) { /* apply the chain, from its start to the idlest */
                const int to = b->toward[u];
                move_group(b, b->via[u], to);
                u = to;
            }
            return true;
        }
    }
    return false;
}

/* Greedy by elements, largest group first, each to the member that has published the fewest
 * elements so far (ties: the lowest rank). Taking turns by group index instead left some workers
 * two groups and others none, so the busiest sent as much as under data parallelism. */
static void greedy_publishers(balancer *b) {
    sdp_plan *p = b->p;
    sized_group *order =
        sdp_xmalloc(sizeof *order * (size_t)(p->ngroups + 1), "choosing the SDP plan's publishers");
    int n = 0;
    for (int g = 0; g < p->ngroups; g++) {
        sdp_owner_group *og = &p->groups[g];
        og->publisher = og->members[0]; /* groups of all N workers: rank 0, nothing to send */
        if (og->nmembers < p->cfg.world) order[n++] = (sized_group){og->elems, g};
    }
    qsort(order, (size_t)n, sizeof *order, by_elems_descending);
    for (int i = 0; i < n; i++) {
        sdp_owner_group *og = &p->groups[order[i].group];
        int best = og->members[0]; /* members ascend, so ties go to the lowest rank */
        for (int j = 1; j < og->nmembers; j++)
            if (b->load[og->members[j]] < b->load[best]) best = og->members[j];
        og->publisher = best;
        b->load[best] += og->elems;
    }
    free(order);
}

/* Greedy alone can strand a worker: each group may go only to its own members, so a worker whose
 * groups were all taken by others publishes nothing while another publishes two (3 workers,
 * 2 owners, random block units on a 5-block GPT). Chains of hand-overs repair that, and in every
 * plan tried (N up to 128, every k) leave loads differing by at most the largest group. Each
 * chain lowers the busiest load or the number of workers carrying it, or else raises the idlest
 * load or lowers the number carrying that, so the loop ends. */
static void choose_publishers(sdp_plan *p) {
    const int N = p->cfg.world;
    const char *what = "choosing the SDP plan's publishers";
    balancer b = {p,
                  sdp_xcalloc((size_t)N, sizeof(size_t), what),
                  sdp_xmalloc((size_t)N * sizeof(int), what),
                  sdp_xmalloc((size_t)N * sizeof(int), what),
                  sdp_xmalloc((size_t)N * sizeof(size_t), what),
                  sdp_xmalloc((size_t)N * sizeof(int), what)};
    greedy_publishers(&b);
    for (;;) {
        int busiest = 0, idlest = 0;
        for (int w = 1; w < N; w++) {
            if (b.load[w] > b.load[busiest]) busiest = w;
            if (b.load[w] < b.load[idlest]) idlest = w;
        }
        if (b.load[busiest] == b.load[idlest]) break;
        if (!push_chain(&b, busiest) && !pull_chain(&b, idlest, b.load[busiest])) break;
    }
    free(b.load);
    free(b.via);
    free(b.toward);
    free(b.carried);
    free(b.queue);
}

/* ---- public ------------------------------------------------------------------------------- */

int sdp_owners_from_coverage_or_0(double coverage, int world) {
    if (world < 1 || !(coverage > 0 && coverage <= 1)) return 0;
    const double kn = coverage * world, k = round(kn);
    return k >= 1 && fabs(kn - k) <= 1e-4 * k ? (int)k : 0;
}

int sdp_owners_from_coverage(double coverage, int world) {
    SDP_ASSERT(world >= 1);
    SDP_CHECK_ALL(coverage > 0 && coverage <= 1,
                  "--sdp-coverage must be in (0, 1], got %g: it is the fraction C = k/N of the "
                  "workers that own each unit (or give k itself with --sdp-owners k)",
                  coverage);
    /* A coverage typed as a rounded fraction (0.6666667 for 2/3) means the nearest k. */
    const int k = sdp_owners_from_coverage_or_0(coverage, world);
    if (k) return k;
    const double kn = coverage * world;
    const int below = (int)floor(kn), above = below + 1; /* kn <= world, so above <= world */
    if (below < 1)
        sdp_fatal_all("--sdp-coverage %g with %d workers gives k = %g owners per unit, fewer than "
                      "one: use --sdp-coverage %.6g (k = 1 of N = %d) or more, or give k itself "
                      "with --sdp-owners k",
                      coverage, world, kn, 1.0 / world, world);
    sdp_fatal_all("--sdp-coverage %g with %d workers gives k = %g owners per unit, which is not a "
                  "whole number: use --sdp-coverage %.6g or %.6g (k = %d or %d of N = %d), or give "
                  "k itself with --sdp-owners k",
                  coverage, world, kn, (double)below / world, (double)above / world, below, above,
                  world);
}

void sdp_plan_build(sdp_plan *p, const sdp_plan_cfg *cfg, const sdp_layout *full) {
    memset(p, 0, sizeof *p);
    SDP_ASSERT(cfg->world >= 1);
    SDP_ASSERT(cfg->unit == SDP_UNIT_BLOCK || cfg->unit == SDP_UNIT_NEURON);
    SDP_ASSERT(cfg->assign == SDP_ASSIGN_CYCLIC || cfg->assign == SDP_ASSIGN_RANDOM);
    p->cfg = *cfg;
    const int N = cfg->world;
    if (cfg->mask == SDP_MASK_NONE) p->cfg.owners = N;
    const int k = p->cfg.owners;
    SDP_CHECK_ALL(k >= 1 && k <= N,
                  "--sdp-owners %d is impossible with %d workers: choose 1 <= k <= %d (k = N is "
                  "plain data parallelism)",
                  k, N, N);
    if (cfg->unit == SDP_UNIT_BLOCK)
        list_block_units(p, full);
    else
        list_neuron_units(p, full);
    assign_owners(p);
    build_owner_groups(p);
    count_group_elems(p, full);
    choose_publishers(p);
}

void sdp_plan_free(sdp_plan *p) {
    if (p->nunits) free(p->units[0].owners); /* the pool of every unit's owners */
    if (p->ngroups) free(p->groups[0].members);
    free(p->units);
    free(p->groups);
    memset(p, 0, sizeof *p);
}

bool sdp_plan_owns(const sdp_plan *p, int unit, int rank) {
    SDP_ASSERT(unit >= 0 && unit < p->nunits);
    return find_ascending(p->units[unit].owners, p->cfg.owners, rank) >= 0; /* owners ascend */
}

/* Units are listed in (block, group) order, so the first unit of a (block, group) is found by
 * binary search; a group's chunks follow it in order and have equal widths. */
static int first_unit_of(const sdp_plan *p, int block, int group) {
    int lo = 0, hi = p->nunits;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const sdp_unit *u = &p->units[mid];
        if (u->block < block || (u->block == block && u->group < group))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == p->nunits || p->units[lo].block != block || p->units[lo].group != group) return -1;
    return lo;
}

int sdp_plan_unit_of(const sdp_plan *p, int block, int group, int atom) {
    if (block < 0) return -1; /* stem and head */
    if (p->cfg.unit == SDP_UNIT_BLOCK) return first_unit_of(p, block, -1);
    if (group < 0) return -1; /* whole-block tensors */
    int first = first_unit_of(p, block, group);
    if (first < 0) return -1;
    int w = p->units[first].width;
    SDP_ASSERT(atom >= 0 && atom < w * p->cfg.chunks);
    return first + atom / w;
}

int sdp_plan_shared_unit(const sdp_plan *p, const sdp_layout *full, int i) {
    if (p->cfg.mask != SDP_MASK_BACKWARD || p->cfg.unit != SDP_UNIT_BLOCK ||
        !sdp_param_is_stem(full, i))
        return -1;
    for (int b = 0; b < full->nblocks; b++) {
        int u = sdp_plan_unit_of(p, b, -1, 0);
        if (u >= 0) return u;
    }
    return -1;
}

/* A group's tensors hold the same number of elements per atom, so a chunk of w atoms holds w
 * times that. */
void sdp_plan_unit_elems(const sdp_plan *p, const sdp_layout *full, bool trained_only,
                         size_t *unit_elems, size_t *shared) {
    const size_t nb = (size_t)full->nblocks + 1;
    const char *what = "sizing the SDP plan's units";
    size_t *per_atom = sdp_xcalloc(nb * SDP_MAX_GROUPS, sizeof(size_t), what);
    size_t *all = sdp_xcalloc(nb, sizeof(size_t), what); /* per block: every tensor */
    size_t *stem = sdp_xcalloc((size_t)p->nunits + 1, sizeof(size_t), what);
    size_t total = 0;
    for (int i = 0; i < full->nparams; i++) {
        const sdp_param *t = &full->params[i];
        if (trained_only && t->buffer) continue;
        total += t->numel;
        if (t->block < 0) {
            int u = sdp_plan_shared_unit(p, full, i);
            if (u >= 0) stem[u] += t->numel;
            continue;
        }
        all[t->block] += t->numel;
        if (t->group >= 0)
            per_atom[(size_t)t->block * SDP_MAX_GROUPS + (size_t)t->group] +=
                t->numel / (size_t)full->blocks[t->block].groups[t->group].width;
    }
    size_t in_units = 0;
    for (int u = 0; u < p->nunits; u++) {
        const sdp_unit *un = &p->units[u];
        unit_elems[u] = un->group < 0
                            ? all[un->block]
                            : per_atom[(size_t)un->block * SDP_MAX_GROUPS + (size_t)un->group] *
                                  (size_t)un->width;
        unit_elems[u] += stem[u];
        in_units += unit_elems[u];
    }
    if (shared) *shared = total - in_units;
    free(per_atom);
    free(all);
    free(stem);
}

double sdp_plan_coverage(const sdp_plan *p) {
    return (double)p->cfg.owners / p->cfg.world;
}

int *sdp_plan_units_per_worker(const sdp_plan *p) {
    int *count = sdp_xcalloc((size_t)p->cfg.world, sizeof *count, "counting the SDP plan's units");
    for (int u = 0; u < p->nunits; u++)
        for (int j = 0; j < p->cfg.owners; j++) count[p->units[u].owners[j]]++;
    return count;
}
