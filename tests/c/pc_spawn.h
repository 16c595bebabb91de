/*
 * What tests/c/mpi_spawn_test.c and bench/mpi_spawn_bench.c share: a job that spawns more of
 * its own program and merges the intercommunicator (issue 30, communicators with processes of
 * another job), SPAWNS times at the parents, once at each child. Included by a relative path
 * ("pc_spawn.h", "../tests/c/pc_spawn.h"), as pc_check.h is.
 */
#ifndef PC_SPAWN_H
#define PC_SPAWN_H

#include <mpi.h>

/* The most spawns a parent makes (a child's SPAWNS argument says which spawn made it). */
#define PC_MAX_SPAWNS 2

/* Spawn `s` merged: at the parents (no `parent`) `nchild` more of `prog` started with `args`
 * (NULL-terminated) and merged first; at a child its parent intercommunicator merged after
 * them. The intercommunicator is left in `*inter` for pc_spawn_free. */
static MPI_Comm pc_spawn_merged(MPI_Comm parent, char *prog, char **args, int nchild,
                                MPI_Comm *inter)
{
    MPI_Comm merged;
    if (parent == MPI_COMM_NULL) {
        MPI_Comm_spawn(prog, args, nchild, MPI_INFO_NULL, 0, MPI_COMM_WORLD, inter,
                       MPI_ERRCODES_IGNORE);
        MPI_Intercomm_merge(*inter, 0, &merged);
    } else {
        *inter = parent;
        MPI_Intercomm_merge(*inter, 1, &merged);
    }
    return merged;
}

/* Frees the `n` merged communicators and disconnects their intercommunicators. */
static void pc_spawn_free(int n, MPI_Comm *merged, MPI_Comm *inter)
{
    for (int s = 0; s < n; s++) {
        MPI_Comm_free(&merged[s]);
        MPI_Comm_disconnect(&inter[s]);
    }
}

#endif
