/* What a collective costs on a network of hosts: the communication half of the step-time model
 * (docs/network.md, "A step-time model").
 *
 * Topology. Rank r lives on host r / G (G ranks per host, filled in order as mpirun fills
 * slots). Each host has one full-duplex link of B bytes/s per direction to the others (a switch,
 * or the measured machine's veth pair). Every byte a rank sends or receives also passes through
 * its own transport at H bytes/s: the CPU's TCP stack on the measured machine; free for GPUs.
 *
 * A step is a set of transfers that run at once. It takes
 *     t = alpha [if any transfer crosses hosts]
 *       + max over link directions (bytes crossing it) / B
 *       + max over ranks (bytes it sends and receives) / H
 * The terms add: on the measured machine the wire and the copies do not overlap (DDP's sync time
 * is linear in 1/B with a fixed part that does not shrink as the link speeds up). A collective is
 * a sequence of such steps. */
#ifndef SDP_NETCOST_H
#define SDP_NETCOST_H

typedef struct {
    int world;          /* ranks, 0 .. world-1 */
    int ranks_per_host; /* G >= 1 */
    double link_Bps;    /* B: bytes/s per direction of each host's link */
    double latency_s;   /* alpha: added once to a step that crosses hosts */
    double host_Bps;    /* H: bytes/s through one rank's transport; 0 = free */
} sdp_net;

/* One collective over a group. */
typedef struct {
    const int *members; /* world ranks, ascending: member i is rank i of the group's communicator */
    int n;
    double bytes; /* the buffer each member contributes (all-reduce) or receives (broadcast) */
} sdp_coll;

/* A ring all-reduce (NCCL): 2(n-1) steps, each moving bytes/n along every edge of the ring
 * members[0] -> members[1] -> ... -> members[0]. Without hosts or a host rate it is
 * 2(n-1) alpha + 2(n-1)/n bytes/B. */
double sdp_net_ring_allreduce(const sdp_net *net, const sdp_coll *c);

/* Its two halves, each (n-1) of those steps: a ring reduce-scatter and a ring all-gather of
 * shards of bytes/n (NCCL's, and --zero 1's under NCCL). */
double sdp_net_ring_reduce_scatter(const sdp_net *net, const sdp_coll *c);
double sdp_net_ring_allgather(const sdp_net *net, const sdp_coll *c);

/* A pipelined ring broadcast (NCCL) from root to every world rank: each hop's latency that
 * crosses hosts, plus the message once through the links (bytes/B) and, at each relaying rank,
 * in and out (2 bytes/H). */
double sdp_net_ring_broadcast(const sdp_net *net, int root, double bytes);

/* Open MPI 4.1's blocking MPI_Bcast of a large message from root to every world rank. Below 8
 * ranks its fixed rules pick a chain without segments: root -> root+1 -> ... (mod world), one
 * whole hop after another. From 8 ranks the model uses a binomial tree (Open MPI picks linear,
 * scatter-allgather or k-nomial trees by size there; an approximation). */
double sdp_net_mpi_broadcast(const sdp_net *net, int root, double bytes);

/* Open MPI's in-place MPI_Iallreduce (libnbc: in place always means its binomial algorithm, a
 * reduce to group rank 0 followed by a binomial broadcast, 2 ceil(log2 n) steps of the whole
 * buffer) for n collectives started together. They advance in lock step: step j of every
 * collective runs at once and shares the links and the ranks' transports. ends[i] (may be NULL)
 * gets the time collective i finishes; returns when the last one does. */
double sdp_net_mpi_allreduce_together(const sdp_net *net, const sdp_coll *c, int n, double *ends);

/* Open MPI 4.1's blocking MPI_Allgatherv of shards of bytes/n (--zero 1's sharing of the updated
 * shards). Two members: each sends its shard to the other at once (its two_proc algorithm).
 * More: priced as a gather to group rank 0 (every member sends its shard at once) and a
 * broadcast of the whole buffer from it over the group, a chain below 8 members and a binomial
 * tree from 8, as sdp_net_mpi_broadcast. That is a fit to one measurement (4 ranks on 2 hosts,
 * docs/network.md), not Open MPI's own schedule, which it picks by size among neighbour
 * exchange, Bruck and ring. */
double sdp_net_mpi_allgather(const sdp_net *net, const sdp_coll *c);

/* The same for Open MPI's MPI_Ireduce_scatter (--zero 1's sync): libnbc reduces to group rank 0
 * by the binomial tree of the all-reduce's first half, then scatters: rank 0 sends every other
 * member its shard of bytes/n, all in one step. */
double sdp_net_mpi_reduce_scatter_together(const sdp_net *net, const sdp_coll *c, int n,
                                           double *ends);

#endif
