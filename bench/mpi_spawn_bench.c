/*
 * Broadcast times on a communicator with processes of another job (docs/scale.md,
 * "Communicators with processes of another job"): mpirun -n P starts this program, which spawns
 * NCHILD more of itself and merges the intercommunicator; with SPAWNS 2 it then spawns NCHILD
 * more and merges again, keeping the first merged communicator (the parents' third
 * communicator: WORLD, the first merged, the second). On each merged communicator, for each
 * size, WARM untimed then ITERS timed broadcasts from root 0, each between barriers, every byte
 * checked at every rank. Per merged communicator and size merged rank 0 (parent 0) prints
 * "spawn_bench BYTES mean_us max_us spawn S" (the slowest rank's time of each broadcast, its
 * mean and max over the iterations; S 1 or 2).
 *
 *   mpi_spawn_bench [NCHILD [ITERS [SPAWNS]]]      (default 2 20 1; a child's SPAWNS: which
 *                                                 spawn made it)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/c/pc_spawn.h"

/* The timed broadcasts on `merged`; whether any rank saw a wrong byte. */
static int timed(MPI_Comm merged, int iters, int label, unsigned char *buf)
{
    int rank;
    MPI_Comm_rank(merged, &rank);
    static const size_t sizes[] = {64u << 10, 1u << 20, 4u << 20, 16u << 20};
    int wrong = 0;
    for (int k = 0; k < 4; k++) {
        size_t len = sizes[k];
        double sum = 0, max = 0;
        for (int it = -3; it < iters; it++) {
            unsigned char v = (unsigned char)(k * 31 + it * 7 + label);
            if (rank == 0) memset(buf, v, len);
            else memset(buf, 0xee, len);
            MPI_Barrier(merged);
            double t0 = MPI_Wtime();
            MPI_Bcast(buf, (int)len, MPI_BYTE, 0, merged);
            double dt = MPI_Wtime() - t0, slowest;
            for (size_t i = 0; i < len; i++)
                if (buf[i] != v) { wrong = 1; break; }
            MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, merged);
            if (it >= 0) { sum += slowest; if (slowest > max) max = slowest; }
        }
        if (rank == 0)
            printf("spawn_bench %zu %.0f %.0f spawn %d\n", len, sum / iters * 1e6, max * 1e6,
                   label);
    }
    fflush(stdout);
    int any = 0;
    MPI_Allreduce(&wrong, &any, 1, MPI_INT, MPI_MAX, merged);
    return any;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int nchild = argc > 1 ? atoi(argv[1]) : 2;
    int iters = argc > 2 ? atoi(argv[2]) : 20;
    int spawns = argc > 3 ? atoi(argv[3]) : 1;
    if (nchild < 1) nchild = 1;
    if (iters < 1) iters = 1;
    if (spawns < 1) spawns = 1;
    if (spawns > PC_MAX_SPAWNS) spawns = PC_MAX_SPAWNS;
    MPI_Comm parent, inter[PC_MAX_SPAWNS], merged[PC_MAX_SPAWNS];
    MPI_Comm_get_parent(&parent);
    MPI_Barrier(MPI_COMM_WORLD);
    unsigned char *buf = malloc(16u << 20);
    int any = 0, rank = 0, n = parent == MPI_COMM_NULL ? spawns : 1;
    for (int s = 0; s < n; s++) {
        int label = parent == MPI_COMM_NULL ? s + 1 : spawns;
        char *args[] = {argc > 1 ? argv[1] : "2", argc > 2 ? argv[2] : "20",
                        s == 0 ? "1" : "2", NULL};
        merged[s] = pc_spawn_merged(parent, argv[0], args, nchild, &inter[s]);
        int r;
        MPI_Comm_rank(merged[s], &r);
        if (s == 0) rank = r;
        any |= timed(merged[s], iters, label, buf);
    }
    if (rank == 0) printf(any ? "spawn_bench: WRONG DATA\n" : "spawn_bench: ok\n");
    fflush(stdout);
    free(buf);
    pc_spawn_free(n, merged, inter);
    MPI_Finalize();
    return any;
}
