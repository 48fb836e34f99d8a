/* The distributed world: MPI processes, one worker each. The same binary runs with one process
 * and no launcher; under mpirun, mpiexec or srun, rank and size come from MPI. */
#ifndef SDP_COMM_H
#define SDP_COMM_H

typedef struct {
    int rank, size;             /* in MPI_COMM_WORLD */
    int local_rank, local_size; /* among the workers on this node */
    int cores;                  /* online CPUs on this node */
    int threads;                /* OpenMP/BLAS threads of this worker */
} sdp_world;

/* Initialises MPI and picks the thread count: `threads` if > 0, else the node's cores divided
 * by the workers on the node (at least 1), so workers never oversubscribe the cores. The caller
 * applies it to the kernels (sdp_set_threads of sdp/ops.h): the world knows nothing of them. */
void sdp_world_init(sdp_world *w, int *argc, char ***argv, int threads);
void sdp_world_finalize(void);

#endif
