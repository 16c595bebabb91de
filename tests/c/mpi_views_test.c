/*
 * Many communicators on one pipecast engine per process (tests/ompi.rs, tests/ompi5.rs: the
 * Open MPI component and the preload shim under Open MPI and MPICH). After one MPI_Barrier on
 * MPI_COMM_WORLD (where the component makes the process's engine; the shim made it at
 * MPI_Init), the program makes NDUP duplicates of MPI_COMM_WORLD, a split into halves and a
 * communicator of the odd ranks (MPI_Comm_create), and on them:
 *   rounds 0-1: only MPI_Ibcast, the first call on every communicator nonblocking, one
 *               broadcast per communicator in flight at once, posted in opposite orders at
 *               even and odd ranks (legal: different communicators), every root in turn;
 *   round 2:    on each communicator an MPI_Ibcast and a blocking MPI_Bcast in flight
 *               together.
 * Sizes 0, 1, 7, 600001, 1 MiB + 3 and 4 MiB + 1; every byte checked at every rank ("WRONG
 * DATA" on any difference). Each rank prints how many broadcasts of at least the glue's
 * pml_below (512 KiB) it made ("expects N": those pipecast carries), and its pipecast threads
 * and open descriptors once the engine exists and again after every broadcast (they must not
 * grow with the number of communicators). Rank 0 prints "mpi_views_test: ok".
 *
 *   mpi_views_test [NDUP]      (default 64)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "pc_check.h"

#define NSIZES 6
static const size_t sizes[NSIZES] = {0, 1, 7, 600001, (1u << 20) + 3, (4u << 20) + 1};
#define PML_BELOW (512u << 10)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int ndup = argc > 1 ? atoi(argv[1]) : 64;
    if (ndup < 1) ndup = 1;
    MPI_Barrier(MPI_COMM_WORLD);
    int threads0 = count_dir("/proc/self/task", pipecast_thread);
    int fds0 = count_dir("/proc/self/fd", NULL);

    int ncomm = ndup + 2;
    MPI_Comm *comms = malloc(sizeof *comms * (size_t)ncomm);
    for (int c = 0; c < ndup; c++) MPI_Comm_dup(MPI_COMM_WORLD, &comms[c]);
    MPI_Comm_split(MPI_COMM_WORLD, rank < size / 2, rank, &comms[ndup]);
    MPI_Group world, odd;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int nodd = size / 2, *odds = malloc(sizeof *odds * (size_t)(nodd > 0 ? nodd : 1));
    for (int i = 0; i < nodd; i++) odds[i] = 2 * i + 1;
    MPI_Group_incl(world, nodd, odds, &odd);
    MPI_Comm_create(MPI_COMM_WORLD, odd, &comms[ndup + 1]);
    MPI_Group_free(&odd);
    MPI_Group_free(&world);
    free(odds);

    int wrong = 0;
    long expects = 0;
    unsigned char **bufs = calloc((size_t)ncomm, sizeof *bufs);
    MPI_Request *reqs = malloc(sizeof *reqs * (size_t)ncomm);
    MPI_Status *statuses = malloc(sizeof *statuses * (size_t)ncomm);
    for (int round = 0; round < 3; round++) {
        /* Even ranks post in communicator order, odd ranks in the opposite order. */
        for (int k = 0; k < ncomm; k++) {
            int c = rank % 2 == 0 ? k : ncomm - 1 - k;
            reqs[c] = MPI_REQUEST_NULL;
            if (comms[c] == MPI_COMM_NULL) continue;
            int crank, csize;
            MPI_Comm_rank(comms[c], &crank);
            MPI_Comm_size(comms[c], &csize);
            size_t len = sizes[(c + round) % NSIZES];
            int root = (c + round) % csize;
            unsigned seed = 1000u * (unsigned)round + (unsigned)c;
            bufs[c] = malloc(len > 0 ? len : 1);
            for (size_t i = 0; i < len; i++) bufs[c][i] = crank == root ? pattern(i, seed) : 0x5A;
            MPI_Ibcast(bufs[c], (int)len, MPI_BYTE, root, comms[c], &reqs[c]);
            expects += csize > 1 && len >= PML_BELOW;
        }
        if (round == 2) {
            /* A blocking broadcast on every communicator while its ibcast is in flight. */
            for (int c = 0; c < ncomm; c++) {
                if (comms[c] == MPI_COMM_NULL) continue;
                int crank, csize;
                MPI_Comm_rank(comms[c], &crank);
                MPI_Comm_size(comms[c], &csize);
                size_t len = sizes[(c + 4) % NSIZES];
                int root = (c + 1) % csize;
                unsigned seed = 7000u + (unsigned)c;
                unsigned char *b = malloc(len > 0 ? len : 1);
                for (size_t i = 0; i < len; i++) b[i] = crank == root ? pattern(i, seed) : 0x5A;
                MPI_Bcast(b, (int)len, MPI_BYTE, root, comms[c]);
                wrong += check(b, len, seed, rank, "blocking bcast");
                expects += csize > 1 && len >= (64u << 10);
                free(b);
            }
        }
        MPI_Waitall(ncomm, reqs, statuses);
        for (int c = 0; c < ncomm; c++) {
            if (comms[c] == MPI_COMM_NULL) continue;
            char what[64];
            snprintf(what, sizeof what, "round %d comm %d", round, c);
            wrong += check(bufs[c], sizes[(c + round) % NSIZES], 1000u * (unsigned)round +
                           (unsigned)c, rank, what);
            free(bufs[c]);
        }
    }
    int threads1 = count_dir("/proc/self/task", pipecast_thread);
    int fds1 = count_dir("/proc/self/fd", NULL);
    for (int c = 0; c < ncomm; c++)
        if (comms[c] != MPI_COMM_NULL) MPI_Comm_free(&comms[c]);
    free(comms);
    free(bufs);
    free(reqs);
    free(statuses);
    fprintf(stderr, "mpi_views_test: rank %d expects %ld, pipecast threads %d then %d, "
            "descriptors %d then %d (%d communicators)\n", rank, expects, threads0, threads1,
            fds0, fds1, ncomm);
    int all = 0;
    MPI_Allreduce(&wrong, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0) printf("mpi_views_test: ok\n");
    MPI_Finalize();
    return all != 0;
}
