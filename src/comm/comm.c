#include "sdp/comm.h"

#include "sdp/check.h"

#include <mpi.h>
#include <unistd.h>

void sdp_world_init(sdp_world *w, int *argc, char ***argv, int threads) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init(argc, argv);
    /* Errors on any rank must end the job, not leave other ranks waiting in a collective. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    sdp_fatal_all_init(); /* errors that every rank detects alike then end the job once */
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w->size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &w->local_rank);
    MPI_Comm_size(node, &w->local_size);
    MPI_Comm_free(&node);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    w->cores = cores > 0 ? (int)cores : 1;
    w->threads = threads > 0 ? threads : w->cores / w->local_size;
    if (w->threads < 1) w->threads = 1;
}

void sdp_world_finalize(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}
