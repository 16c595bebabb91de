/*
 * A send still pending while its sender enters a broadcast that pipecast carries: rank 0 starts
 * MPI_Isend of 4 MiB to rank 1 and calls MPI_Bcast before waiting for it; rank 1 receives
 * first, then joins the broadcast. Legal MPI (the sender is inside an MPI call, so its send must
 * progress), and it ends only if the shim keeps the MPI progressing while pipecast's broadcast
 * runs: otherwise rank 1 waits for the send and rank 0 for rank 1. Every byte is checked;
 * rank 0 prints "mpi_pending_send: ok".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG (4u << 20)
#define BCAST ((1u << 20) + 3)

static unsigned char pattern(size_t i, unsigned seed) { return (unsigned char)(i * 131 + seed * 7 + 1); }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned char *big = malloc(BIG), *b = malloc(BCAST);
    for (unsigned round = 0; round < 3; round++) {
        for (size_t i = 0; i < BCAST; i++) b[i] = rank == 0 ? pattern(i, round) : 0;
        /* round 0 sets pipecast up (collective calls that progress the MPI by themselves) */
        if (round > 0 && rank == 0) {
            MPI_Request req;
            for (size_t i = 0; i < BIG; i++) big[i] = pattern(i, 100 + round);
            MPI_Isend(big, BIG, MPI_BYTE, 1, 7, MPI_COMM_WORLD, &req);
            MPI_Bcast(b, BCAST, MPI_BYTE, 0, MPI_COMM_WORLD);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else if (round > 0 && rank == 1) {
            MPI_Recv(big, BIG, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < BIG; i++) bad += big[i] != pattern(i, 100 + round);
            MPI_Bcast(b, BCAST, MPI_BYTE, 0, MPI_COMM_WORLD);
        } else {
            MPI_Bcast(b, BCAST, MPI_BYTE, 0, MPI_COMM_WORLD);
        }
        for (size_t i = 0; i < BCAST; i++) bad += b[i] != pattern(i, round);
    }
    int total = 0;
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(total == 0 ? "mpi_pending_send: ok\n" : "mpi_pending_send: %d bytes wrong\n", total);
    free(big);
    free(b);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
