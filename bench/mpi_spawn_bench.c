/*
 * Broadcast times on a communicator with processes of another job (docs/scale.md,
 * "Communicators with processes of another job"): mpirun -n P starts this program, which spawns
 * NCHILD more of itself and merges the intercommunicator; on the merged communicator, for each
 * size, WARM untimed then ITERS timed broadcasts from root 0, each between barriers, every byte
 * checked at every rank. Per size merged rank 0 prints
 * "spawn_bench BYTES mean_us max_us" (the slowest rank's time of each broadcast, its mean and
 * max over the iterations).
 *
 *   mpi_spawn_bench [NCHILD [ITERS]]      (default 2 20)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int nchild = argc > 1 ? atoi(argv[1]) : 2;
    int iters = argc > 2 ? atoi(argv[2]) : 20;
    if (nchild < 1) nchild = 1;
    if (iters < 1) iters = 1;
    MPI_Comm parent, inter, merged;
    MPI_Comm_get_parent(&parent);
    MPI_Barrier(MPI_COMM_WORLD);
    if (parent == MPI_COMM_NULL) {
        char *args[] = {argc > 1 ? argv[1] : "2", argc > 2 ? argv[2] : "20", NULL};
        MPI_Comm_spawn(argv[0], args, nchild, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                       MPI_ERRCODES_IGNORE);
        MPI_Intercomm_merge(inter, 0, &merged);
    } else {
        inter = parent;
        MPI_Intercomm_merge(inter, 1, &merged);
    }
    int rank;
    MPI_Comm_rank(merged, &rank);
    static const size_t sizes[] = {64u << 10, 1u << 20, 4u << 20, 16u << 20};
    unsigned char *buf = malloc(16u << 20);
    int wrong = 0;
    for (int k = 0; k < 4; k++) {
        size_t len = sizes[k];
        double sum = 0, max = 0;
        for (int it = -3; it < iters; it++) {
            unsigned char v = (unsigned char)(k * 31 + it * 7 + 1);
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
        if (rank == 0) printf("spawn_bench %zu %.0f %.0f\n", len, sum / iters * 1e6, max * 1e6);
    }
    int any = 0;
    MPI_Allreduce(&wrong, &any, 1, MPI_INT, MPI_MAX, merged);
    if (rank == 0) printf(any ? "spawn_bench: WRONG DATA\n" : "spawn_bench: ok\n");
    fflush(stdout);
    free(buf);
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);
    MPI_Finalize();
    return any;
}
