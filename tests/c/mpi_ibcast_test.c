/*
 * Overlapping nonblocking broadcasts under pipecast (tests/ompi.rs, with the Open MPI
 * component and the preload shim under Open MPI and MPICH). Rounds of 8 MPI_Ibcasts of
 * different sizes (0, 1, odd, mid-size, >= 1 MiB + odd) and roots in flight at once on
 * MPI_COMM_WORLD, every byte checked at every rank ("WRONG DATA" on any difference):
 *   round 0, before any MPI_Bcast: the glue may not set pipecast up inside MPI_Ibcast (that
 *            would block), so the MPI's own ibcast carries it, at every rank alike;
 *   then one blocking MPI_Bcast of 1 MiB sets pipecast up on WORLD;
 *   rounds 1-4 (the large ones through pipecast) completed with MPI_Wait in reverse order,
 *            MPI_Waitall, an MPI_Testall loop and MPI_Waitany;
 *   a strided datatype (packed by the glue).
 * Rank 0 prints "mpi_ibcast_test: ok".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "pc_check.h"

#define N 8

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const size_t sizes[N] = {0, 1, 7, 65537, 600001, (1u << 20) + 3, (4u << 20) + 1, 2u << 20};
    int wrong = 0;
    for (int round = 0; round < 5; round++) {
        if (round == 1) {
            size_t len = 1u << 20;
            unsigned char *b = malloc(len);
            for (size_t i = 0; i < len; i++) b[i] = rank == 0 ? pattern(i, 999) : 0x5A;
            MPI_Bcast(b, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD);
            wrong += check(b, len, 999, rank, "blocking bcast");
            free(b);
        }
        unsigned char *bufs[N];
        MPI_Request reqs[N];
        MPI_Status statuses[N];
        for (int k = 0; k < N; k++) {
            int root = (k * 3 + round) % size;
            unsigned seed = 100u * (unsigned)round + (unsigned)k;
            bufs[k] = malloc(sizes[k] + 1);
            for (size_t i = 0; i < sizes[k]; i++) bufs[k][i] = rank == root ? pattern(i, seed) : 0x5A;
            MPI_Ibcast(bufs[k], (int)sizes[k], MPI_BYTE, root, MPI_COMM_WORLD, &reqs[k]);
        }
        if (round <= 1) {
            for (int k = N - 1; k >= 0; k--) MPI_Wait(&reqs[k], &statuses[k]);
        } else if (round == 2) {
            MPI_Waitall(N, reqs, statuses);
        } else if (round == 3) {
            /* Polling, as an application overlapping work would. */
            int all = 0;
            while (!all) MPI_Testall(N, reqs, &all, statuses);
        } else {
            for (int left = N; left > 0; left--) {
                int index = MPI_UNDEFINED;
                MPI_Waitany(N, reqs, &index, &statuses[0]);
                if (index == MPI_UNDEFINED || reqs[index] != MPI_REQUEST_NULL) {
                    fprintf(stderr, "WRONG DATA rank %d: MPI_Waitany returned %d\n", rank, index);
                    wrong++;
                    break;
                }
            }
        }
        for (int k = 0; k < N; k++) {
            char what[64];
            snprintf(what, sizeof what, "round %d ibcast %d", round, k);
            wrong += check(bufs[k], sizes[k], 100u * (unsigned)round + (unsigned)k, rank, what);
            free(bufs[k]);
        }
    }
    /* A strided datatype: every other int of 2 x 300000. */
    int count = 300000;
    MPI_Datatype strided;
    MPI_Type_vector(count, 1, 2, MPI_INT, &strided);
    MPI_Type_commit(&strided);
    int *v = malloc(sizeof(int) * 2 * (size_t)count);
    for (int i = 0; i < 2 * count; i++) v[i] = rank == 1 ? i * 7 : -1;
    MPI_Request r;
    MPI_Ibcast(v, 1, strided, 1, MPI_COMM_WORLD, &r);
    MPI_Type_free(&strided); /* legal: the request keeps it */
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    for (int i = 0; i < 2 * count; i++) {
        int want = (i % 2 == 0 || rank == 1) ? i * 7 : -1;
        if (v[i] != want) {
            fprintf(stderr, "WRONG DATA rank %d strided int %d: %d, want %d\n", rank, i, v[i], want);
            wrong++;
            break;
        }
    }
    free(v);
    int total = 0;
    MPI_Allreduce(&wrong, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(total == 0 ? "mpi_ibcast_test: ok\n" : "mpi_ibcast_test: %d wrong\n", total);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
