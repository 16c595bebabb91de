/*
 * A communicator with processes of another job on one pipecast engine per process
 * (tests/ompi.rs, `spawned_processes_join_the_engines`). The parents (mpirun -n 2) make their
 * engine at MPI_COMM_WORLD's first barrier, spawn NCHILD children of this program (which make
 * theirs the same way in their own MPI_COMM_WORLD) and merge the intercommunicator; with
 * SPAWNS 2 they do it again (a second spawn, merged apart), keeping the first merged
 * communicator. On each merged communicator and on each job's MPI_COMM_WORLD, interleaved:
 * broadcasts of 0, 1, 7, 600001, 1 MiB + 3 and 4 MiB + 1 bytes from every root; every byte
 * checked at every rank ("WRONG DATA" on any difference). Each process prints its pipecast
 * threads once its engine exists and after every merged communicator's broadcasts
 * ("mpi_spawn_test: rank R threads T0 T1 spawn S", R its rank in that merged communicator, S
 * the spawn: 1 or 2, the parents print one line per spawn): at most 2 (issue 30). Merged rank
 * 0 (parent 0) prints "mpi_spawn_test: ok" when every merged communicator was byte-exact.
 *
 *   mpi_spawn_test [NCHILD [SPAWNS]]      (default 2 1; a child's SPAWNS: which spawn made it)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pc_check.h"
#include "pc_spawn.h"

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

/* The parents' spawn `s` (1, 2, ...) merged, or the children's merged communicator; its
 * broadcasts checked, this process's threads reported. Returns whether any was wrong (at any
 * rank of `merged`). */
static int on_merged(MPI_Comm merged, int s, int threads0, unsigned char *buf)
{
    int rank;
    MPI_Comm_rank(merged, &rank);
    int wrong = every_root(merged, MPI_COMM_WORLD, 10 * (unsigned)s + 1, buf);
    wrong |= every_root(merged, MPI_COMM_WORLD, 10 * (unsigned)s + 3, buf);
    int threads1 = count_dir("/proc/self/task", pipecast_thread);
    fprintf(stderr, "mpi_spawn_test: rank %d threads %d %d spawn %d\n", rank, threads0, threads1,
            s);
    int any = 0;
    MPI_Allreduce(&wrong, &any, 1, MPI_INT, MPI_MAX, merged);
    return any;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int nchild = argc > 1 ? atoi(argv[1]) : 2;
    int spawns = argc > 2 ? atoi(argv[2]) : 1;
    if (nchild < 1) nchild = 1;
    if (spawns < 1) spawns = 1;
    if (spawns > PC_MAX_SPAWNS) spawns = PC_MAX_SPAWNS; /* a child's: which spawn made it */
    MPI_Comm parent, inter[PC_MAX_SPAWNS], merged[PC_MAX_SPAWNS];
    MPI_Comm_get_parent(&parent);
    /* The process's engine: WORLD's first barrier makes it (the component). */
    MPI_Barrier(MPI_COMM_WORLD);
    int threads0 = count_dir("/proc/self/task", pipecast_thread);
    unsigned char *buf = malloc(sizes[NSIZES - 1]);
    int any = 0, rank = 0, n = parent == MPI_COMM_NULL ? spawns : 1;
    for (int s = 0; s < n; s++) {
        /* Which spawn this is: the children are told it (their SPAWNS argument). */
        int label = parent == MPI_COMM_NULL ? s + 1 : spawns;
        char *args[] = {argc > 1 ? argv[1] : "2", s == 0 ? "1" : "2", NULL};
        merged[s] = pc_spawn_merged(parent, argv[0], args, nchild, &inter[s]);
        /* The parents keep the first merged communicator (and its engine, if it has one of its
         * own) while the second spawn's is made. */
        int r;
        MPI_Comm_rank(merged[s], &r);
        if (s == 0) rank = r;
        any |= on_merged(merged[s], label, threads0, buf);
    }
    if (rank == 0 && !any) fprintf(stderr, "mpi_spawn_test: ok\n");
    free(buf);
    pc_spawn_free(n, merged, inter);
    MPI_Finalize();
    return any;
}
