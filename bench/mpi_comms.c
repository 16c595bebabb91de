/*
 * Many communicators (bench/scale_comms.sh, docs/scale.md): after one MPI_Barrier on
 * MPI_COMM_WORLD, duplicates it NDUP times and broadcasts BYTES from rank 0 on each
 * (MPI_Bcast, or MPI_Ibcast + MPI_Wait with "ibcast"), the data checked at every rank. Times
 * the whole (creation + broadcast, the slowest rank: barrier before, max-reduce after) and
 * counts, per rank, pipecast's threads ("pipecast-*") and every thread, and open descriptors,
 * before the duplicates and after the broadcasts (the largest over ranks).
 *
 *   mpi_comms NDUP BYTES [ibcast]
 * Prints one JSON line at rank 0:
 *   {"ndup":64,"bytes":4194304,"op":"bcast","seconds":…,"threads":[before,after],
 *    "pipecast_threads":[before,after],"fds":[before,after],"wrong":0}
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/c/pc_check.h"

/* threads, pipecast threads, descriptors: the largest over ranks. */
static void census(int out[3])
{
    int mine[3];
    mine[0] = count_dir("/proc/self/task", NULL);
    mine[1] = count_dir("/proc/self/task", pipecast_thread);
    mine[2] = count_dir("/proc/self/fd", NULL);
    MPI_Allreduce(mine, out, 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: mpi_comms NDUP BYTES [ibcast]\n");
        MPI_Finalize();
        return 2;
    }
    int ndup = atoi(argv[1]);
    size_t bytes = (size_t)strtoull(argv[2], NULL, 10);
    int nonblocking = argc > 3 && strcmp(argv[3], "ibcast") == 0;
    if (ndup < 1 || bytes > (size_t)INT32_MAX) {
        if (rank == 0) fprintf(stderr, "mpi_comms: NDUP >= 1, BYTES < 2^31\n");
        MPI_Finalize();
        return 2;
    }
    unsigned char *buf = malloc(bytes > 0 ? bytes : 1);
    MPI_Comm *comms = malloc(sizeof *comms * (size_t)ndup);
    MPI_Barrier(MPI_COMM_WORLD);
    int before[3], after[3];
    census(before);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    long wrong = 0;
    for (int c = 0; c < ndup; c++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[c]);
        for (size_t i = 0; i < bytes; i++) buf[i] = rank == 0 ? pattern(i, (unsigned)c) : 0x5A;
        if (nonblocking) {
            MPI_Request req;
            MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, comms[c], &req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else {
            MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, comms[c]);
        }
        wrong += check(buf, bytes, (unsigned)c, rank, "dup");
    }
    double mine = MPI_Wtime() - t0, slowest = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    census(after);
    long all_wrong = 0;
    MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    for (int c = 0; c < ndup; c++) MPI_Comm_free(&comms[c]);
    if (rank == 0)
        printf("{\"ndup\":%d,\"bytes\":%zu,\"op\":\"%s\",\"seconds\":%.6f,\"threads\":[%d,%d],"
               "\"pipecast_threads\":[%d,%d],\"fds\":[%d,%d],\"wrong\":%ld}\n",
               ndup, bytes, nonblocking ? "ibcast" : "bcast", slowest, before[0], after[0],
               before[1], after[1], before[2], after[2], all_wrong);
    free(buf);
    free(comms);
    MPI_Finalize();
    return all_wrong != 0;
}
