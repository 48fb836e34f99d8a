/* Collective costs on a network of hosts (include/sdp/netcost.h has the model). Each collective
 * is written out as the steps its library takes, and each step is priced by what crosses each
 * link and what each rank's transport moves. */
#include "sdp/netcost.h"

#include "sdp/mem.h"

#include <stdbool.h>
#include <string.h>

/* ---- one step -------------------------------------------------------------------------------- */

/* The bytes a step puts on each link direction and through each rank. */
typedef struct {
    const sdp_net *net;
    sdp_mem mem;
    double *out, *in; /* per host: bytes leaving it, bytes entering it */
    double *rank;     /* per rank: bytes sent plus bytes received */
    int nhosts;
    bool crosses;
} step_load;

static int host_of(const sdp_net *n, int r) {
    return r / n->ranks_per_host;
}

static bool crosses(const sdp_net *n, int src, int dst) {
    return host_of(n, src) != host_of(n, dst);
}

static void load_init(step_load *l, const sdp_net *net) {
    memset(l, 0, sizeof *l);
    l->net = net;
    l->nhosts = (net->world + net->ranks_per_host - 1) / net->ranks_per_host;
    const size_t n = 2 * (size_t)l->nhosts + (size_t)net->world;
    l->out = sdp_alloc(&l->mem, SDP_MEM_SCRATCH, n * sizeof(double));
    l->in = l->out + l->nhosts;
    l->rank = l->in + l->nhosts;
}

static void load_free(step_load *l) {
    sdp_free(&l->mem, l->out);
}

static void load_clear(step_load *l) {
    memset(l->out, 0, (2 * (size_t)l->nhosts + (size_t)l->net->world) * sizeof(double));
    l->crosses = false;
}

static void load_add(step_load *l, int src, int dst, double bytes) {
    l->rank[src] += bytes;
    l->rank[dst] += bytes;
    if (!crosses(l->net, src, dst)) return;
    l->out[host_of(l->net, src)] += bytes;
    l->in[host_of(l->net, dst)] += bytes;
    l->crosses = true;
}

static double max_of(const double *x, int n) {
    double m = 0;
    for (int i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

/* alpha if anything crosses, the busiest link direction over B, the busiest rank over H. */
static double load_time(const step_load *l) {
    const sdp_net *n = l->net;
    double t = 0;
    if (l->crosses) {
        const double out = max_of(l->out, l->nhosts), in = max_of(l->in, l->nhosts);
        t += n->latency_s + (out > in ? out : in) / n->link_Bps;
    }
    if (n->host_Bps > 0) t += max_of(l->rank, n->world) / n->host_Bps;
    return t;
}

/* A step of one transfer, without the per-host tallies. */
static double transfer_time(const sdp_net *n, int src, int dst, double bytes) {
    double t = n->host_Bps > 0 ? bytes / n->host_Bps : 0;
    if (crosses(n, src, dst)) t += n->latency_s + bytes / n->link_Bps;
    return t;
}

static int ceil_log2(int n) {
    int m = 0;
    while ((1 << m) < n) m++;
    return m;
}

/* ---- NCCL ------------------------------------------------------------------------------------ */

/* One step of a ring over the group: bytes/n along every edge. Every step of a ring's
 * reduce-scatter and all-gather moves the same. */
static double ring_step(const sdp_net *net, const sdp_coll *c) {
    step_load l;
    load_init(&l, net);
    for (int i = 0; i < c->n; i++)
        load_add(&l, c->members[i], c->members[(i + 1) % c->n], c->bytes / c->n);
    const double step = load_time(&l);
    load_free(&l);
    return step;
}

double sdp_net_ring_reduce_scatter(const sdp_net *net, const sdp_coll *c) {
    if (c->n <= 1 || c->bytes <= 0) return 0;
    return (c->n - 1) * ring_step(net, c);
}

double sdp_net_ring_allgather(const sdp_net *net, const sdp_coll *c) {
    return sdp_net_ring_reduce_scatter(net, c); /* the same steps, the other way round */
}

double sdp_net_ring_allreduce(const sdp_net *net, const sdp_coll *c) {
    return sdp_net_ring_reduce_scatter(net, c) + sdp_net_ring_allgather(net, c);
}

double sdp_net_ring_broadcast(const sdp_net *net, int root, double bytes) {
    const int W = net->world;
    if (W <= 1 || bytes <= 0) return 0;
    int hops_across = 0;
    for (int h = 0; h + 1 < W; h++) hops_across += crosses(net, (root + h) % W, (root + h + 1) % W);
    /* Pipelined: the message crosses each link once, and a relaying rank both receives and sends
     * it (with two ranks there is no relay). */
    double t = hops_across * net->latency_s + (hops_across ? bytes / net->link_Bps : 0);
    if (net->host_Bps > 0) t += (W > 2 ? 2 : 1) * bytes / net->host_Bps;
    return t;
}

/* ---- Open MPI -------------------------------------------------------------------------------- */

/* Broadcasts over a group: the i-th rank from the root is members[(root + i) % n] (without
 * members, the world's ranks in order). */
static int member_from(const sdp_coll *g, int root, int i) {
    const int v = (root + i) % g->n;
    return g->members ? g->members[v] : v;
}

static double chain_broadcast(const sdp_net *net, const sdp_coll *g, int root, double bytes) {
    double t = 0;
    for (int h = 0; h + 1 < g->n; h++)
        t += transfer_time(net, member_from(g, root, h), member_from(g, root, h + 1), bytes);
    return t;
}

/* Round k: every rank that has the message (virtual ranks below 2^k, counted from the root)
 * sends it to the one 2^k further on. */
static double binomial_broadcast(const sdp_net *net, const sdp_coll *g, int root, double bytes) {
    step_load l;
    load_init(&l, net);
    double t = 0;
    for (int k = 0; k < ceil_log2(g->n); k++) {
        load_clear(&l);
        for (int v = 0; v < (1 << k) && v + (1 << k) < g->n; v++)
            load_add(&l, member_from(g, root, v), member_from(g, root, v + (1 << k)), bytes);
        t += load_time(&l);
    }
    load_free(&l);
    return t;
}

/* Open MPI's choice for a large message: group rank root broadcasts to the group. */
static double group_broadcast(const sdp_net *net, const sdp_coll *g, int root, double bytes) {
    if (g->n <= 1 || bytes <= 0) return 0;
    return g->n < 8 ? chain_broadcast(net, g, root, bytes)
                    : binomial_broadcast(net, g, root, bytes);
}

double sdp_net_mpi_broadcast(const sdp_net *net, int root, double bytes) {
    const sdp_coll world = {NULL, net->world, bytes};
    return group_broadcast(net, &world, root, bytes);
}

double sdp_net_mpi_allgather(const sdp_net *net, const sdp_coll *c) {
    if (c->n <= 1 || c->bytes <= 0) return 0;
    step_load l;
    load_init(&l, net);
    double t;
    if (c->n == 2) { /* two_proc: each sends its shard to the other, at once */
        load_add(&l, c->members[0], c->members[1], c->bytes / 2);
        load_add(&l, c->members[1], c->members[0], c->bytes / 2);
        t = load_time(&l);
    } else {
        for (int v = 1; v < c->n; v++) load_add(&l, c->members[v], c->members[0], c->bytes / c->n);
        t = load_time(&l) + group_broadcast(net, c, 0, c->bytes);
    }
    load_free(&l);
    return t;
}

/* libnbc's schedules, as steps of the whole group: the all-reduce's binomial reduce then binomial
 * broadcast (2 ceil(log2 n) steps), or the reduce-scatter's binomial reduce then one scatter. */
typedef enum { MPI_ALLREDUCE, MPI_REDUCE_SCATTER } mpi_coll_kind;

static int coll_steps(const sdp_coll *c, mpi_coll_kind kind) {
    if (c->n <= 1 || c->bytes <= 0) return 0;
    return kind == MPI_ALLREDUCE ? 2 * ceil_log2(c->n) : ceil_log2(c->n) + 1;
}

/* Step j (group ranks v, root 0). Reduce steps j < log: the ranks v = 2^j (mod 2^(j+1)) send
 * their partial sums to v - 2^j. All-reduce, broadcast steps r = j - log: ranks v in
 * [2^r, 2^(r+1)) receive the result from v - 2^r. Reduce-scatter, step log: rank 0 sends each
 * other rank its shard. */
static void add_coll_step(step_load *l, const sdp_coll *c, int j, mpi_coll_kind kind) {
    const int log = ceil_log2(c->n);
    if (j < log) {
        const int half = 1 << j;
        for (int v = half; v < c->n; v += 2 * half)
            load_add(l, c->members[v], c->members[v - half], c->bytes);
        return;
    }
    if (kind == MPI_REDUCE_SCATTER) {
        for (int v = 1; v < c->n; v++) load_add(l, c->members[0], c->members[v], c->bytes / c->n);
        return;
    }
    const int lo = 1 << (j - log);
    for (int v = lo; v < 2 * lo && v < c->n; v++)
        load_add(l, c->members[v - lo], c->members[v], c->bytes);
}

static double mpi_together(const sdp_net *net, const sdp_coll *c, int n, double *ends,
                           mpi_coll_kind kind) {
    int steps = 0;
    for (int i = 0; i < n; i++) {
        if (coll_steps(&c[i], kind) > steps) steps = coll_steps(&c[i], kind);
        if (ends) ends[i] = 0;
    }
    step_load l;
    load_init(&l, net);
    double t = 0;
    for (int j = 0; j < steps; j++) {
        load_clear(&l);
        for (int i = 0; i < n; i++)
            if (j < coll_steps(&c[i], kind)) add_coll_step(&l, &c[i], j, kind);
        t += load_time(&l);
        for (int i = 0; i < n; i++)
            if (ends && j == coll_steps(&c[i], kind) - 1) ends[i] = t;
    }
    load_free(&l);
    return t;
}

double sdp_net_mpi_allreduce_together(const sdp_net *net, const sdp_coll *c, int n, double *ends) {
    return mpi_together(net, c, n, ends, MPI_ALLREDUCE);
}

double sdp_net_mpi_reduce_scatter_together(const sdp_net *net, const sdp_coll *c, int n,
                                           double *ends) {
    return mpi_together(net, c, n, ends, MPI_REDUCE_SCATTER);
}
