/*
 * A communicator with processes of another job on one pipecast engine per process
 * (tests/ompi.rs, `spawned_processes_join_the_engines`). The parents (mpirun -n 2) make their
 * engine at MPI_COMM_WORLD's first barrier, spawn NCHILD children of this program (which make
 * theirs the same way in their own MPI_COMM_WORLD) and merge the intercommunicator. On the
 * merged communicator and on each job's MPI_COMM_WORLD, interleaved: broadcasts of 0, 1, 7,
 * 600001, 1 MiB + 3 and 4 MiB + 1 bytes from every root; every byte checked at every rank
 * ("WRONG DATA" on any difference). Each process prints its pipecast threads once its engine
 * exists and after every broadcast ("mpi_spawn_test: rank R threads T0 T1", R its merged
 * rank): with the merged communicator on the engines, at most 2. Merged rank 0 prints
 * "mpi_spawn_test: ok".
 *
 *   mpi_spawn_test [NCHILD]      (default 2)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pc_check.h"

#define NSIZES 6
static const size_t sizes[NSIZES] = {0, 1, 7, 600001, (1u << 20) + 3, (4u << 20) + 1};

/* Every root and size on `comm`, each followed by one on `other` (interleaved). */
static int every_root(MPI_Comm comm, MPI_Comm other, unsigned tag, unsigned char *buf)
{
    int rank, size, orank, osize, wrong = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(other, &orank);
    MPI_Comm_size(other, &osize);
    for (int root = 0; root < size; root++) {
        for (int k = 0; k < NSIZES; k++) {
            size_t len = sizes[k];
            unsigned seed = tag * 1000 + (unsigned)(k * 10 + root);
            for (size_t i = 0; i < len; i++) buf[i] = rank == root ? pattern(i, seed) : 0xee;
            MPI_Bcast(buf, (int)len, MPI_BYTE, root, comm);
            wrong |= check(buf, len, seed, rank, "merged");
            int oroot = (root + k) % osize;
            seed = (tag + 1) * 1000 + (unsigned)(k * 10 + oroot);
            for (size_t i = 0; i < len; i++) buf[i] = orank == oroot ? pattern(i, seed) : 0xee;
            MPI_Bcast(buf, (int)len, MPI_BYTE, oroot, other);
            wrong |= check(buf, len, seed, orank, "world");
        }
    }
    return wrong;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int nchild = argc > 1 ? atoi(argv[1]) : 2;
    if (nchild < 1) nchild = 1;
    MPI_Comm parent, inter, merged;
    MPI_Comm_get_parent(&parent);
    /* The process's engine: WORLD's first barrier makes it (the component). */
    MPI_Barrier(MPI_COMM_WORLD);
    int threads0 = count_dir("/proc/self/task", pipecast_thread);
    if (parent == MPI_COMM_NULL) {
        char *args[] = {argv[1] != NULL ? argv[1] : "2", NULL};
        MPI_Comm_spawn(argv[0], args, nchild, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                       MPI_ERRCODES_IGNORE);
        MPI_Intercomm_merge(inter, 0, &merged);
    } else {
        inter = parent;
        MPI_Intercomm_merge(inter, 1, &merged);
    }
    int rank;
    MPI_Comm_rank(merged, &rank);
    unsigned char *buf = malloc(sizes[NSIZES - 1]);
    int wrong = every_root(merged, MPI_COMM_WORLD, 1, buf);
    wrong |= every_root(merged, MPI_COMM_WORLD, 3, buf);
    int threads1 = count_dir("/proc/self/task", pipecast_thread);
    fprintf(stderr, "mpi_spawn_test: rank %d threads %d %d\n", rank, threads0, threads1);
    int any = 0;
    MPI_Allreduce(&wrong, &any, 1, MPI_INT, MPI_MAX, merged);
    if (rank == 0 && !any) fprintf(stderr, "mpi_spawn_test: ok\n");
    free(buf);
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);
    MPI_Finalize();
    return any;
}
