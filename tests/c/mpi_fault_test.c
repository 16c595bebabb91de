/*
 * Faults under pipecast (component or preload shim), run by tests/ompi_faults.rs. Loops
 * broadcasts of 4 MiB + 3 bytes (pipecast's transport) and 200 KiB (pipecast's tree over the
 * MPI's point-to-point layer) with rotating roots; every rank checks every byte of a seeded
 * pattern and prints "WRONG DATA" on any difference. Modes (argv[1]):
 *   plain  just the loop (used with one rank's settings broken, MPMD);
 *   late   rank 2 sleeps PIPECAST_TEST_SLEEP seconds (default 20) before iteration 3:
 *          late, not gone, so every broadcast must still succeed;
 *   kill   rank 2 SIGKILLs itself 30 ms into iteration 3's broadcast: the job must end,
 *          and no rank may report a broadcast as successful with wrong data. Errors are
 *          returned (MPI_ERRORS_RETURN) so that the ranks see them: a failed broadcast prints
 *          "broadcast error", and the later ones must fail too (never succeed with wrong data).
 *   stop   rank 2 is SIGSTOPped 30 ms into iteration 3's broadcast, every thread of it (the
 *          progress thread too), for PIPECAST_TEST_SLEEP seconds (default 20); a child
 *          process it forked sends the SIGCONT. Stopped, not gone: every broadcast must
 *          still succeed.
 *   ilate, ikill  the same with MPI_Ibcast + MPI_Wait from iteration 1 on (iteration 0, a
 *          blocking MPI_Bcast, sets pipecast up: an MPI_Ibcast never does), late or killed
 *          at iteration 4 (a 4 MiB MPI_Ibcast, which pipecast carries).
 *   layouts  after the loop, broadcasts whose datatype layout differs between ranks (same
 *          type signature, legal in MPI): odd ranks see every other int of a strided vector,
 *          even ranks contiguous ints; every rank must still take the same path.
 * Rank 0 prints "mpi_fault_test: ok" when every rank saw the right bytes.
 */
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pc_check.h"

static void *kill_soon(void *arg)
{
    (void)arg;
    usleep(30000);
    raise(SIGKILL);
    return NULL;
}

static int stop_s = 20;

static void *stop_soon(void *arg)
{
    (void)arg;
    usleep(30000);
    pid_t me = getpid();
    pid_t child = fork();
    if (child == 0) {
        sleep((unsigned)stop_s);
        kill(me, SIGCONT);
        _exit(0);
    }
    if (child > 0) raise(SIGSTOP);
    return NULL;
}

/* `count` ints from `root`, contiguous at even ranks, every other int of a strided vector at
 * odd ones (the same type signature). Returns 1 on wrong data. */
static int mixed_layouts(int count, int root, int rank)
{
    int *v = malloc(sizeof(int) * 2 * (size_t)count);
    MPI_Datatype type = MPI_INT;
    int n = count;
    int stride = 1;
    if (rank % 2 == 1) {
        MPI_Type_vector(count, 1, 2, MPI_INT, &type);
        MPI_Type_commit(&type);
        n = 1;
        stride = 2;
    }
    for (int i = 0; i < 2 * count; i++) v[i] = -1;
    for (int i = 0; i < count && rank == root; i++) v[i * stride] = i * 13 + root;
    int rc = MPI_Bcast(v, n, type, root, MPI_COMM_WORLD);
    int bad = 0;
    for (int i = 0; i < count; i++) bad += v[i * stride] != i * 13 + root;
    if (stride == 2)
        for (int i = 0; i < count; i++) bad += v[2 * i + 1] != -1;
    if (bad)
        fprintf(stderr, "WRONG DATA rank %d mixed layouts (%d ints from %d): %d wrong (rc %d)\n",
                rank, count, root, bad, rc);
    if (type != MPI_INT) MPI_Type_free(&type);
    free(v);
    return bad != 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    const char *mode = argc > 1 ? argv[1] : "plain";
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int nonblocking = mode[0] == 'i';
    if (nonblocking) mode++;
    if (strcmp(mode, "kill") == 0) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const char *sleep_env = getenv("PIPECAST_TEST_SLEEP");
    int late_s = sleep_env != NULL ? atoi(sleep_env) : 20;
    stop_s = late_s;
    const size_t sizes[] = {(4u << 20) + 3, 200 * 1024};
    size_t cap = sizes[0];
    unsigned char *buf = malloc(cap);
    int wrong = 0;
    for (int it = 0; it < 8; it++) {
        size_t n = sizes[it % 2];
        int root = it % size;
        unsigned seed = 77 + (unsigned)it;
        /* Nonblocking: at iteration 4, a pipecast MPI_Ibcast (200 KiB ones go to the MPI's). */
        const int at = nonblocking ? 4 : 3;
        if (it == at && rank == 2 && strcmp(mode, "late") == 0) sleep((unsigned)late_s);
        if (it == at && rank == 2 && strcmp(mode, "kill") == 0) {
            pthread_t t;
            pthread_create(&t, NULL, kill_soon, NULL);
        }
        if (it == at && rank == 2 && strcmp(mode, "stop") == 0) {
            pthread_t t;
            pthread_create(&t, NULL, stop_soon, NULL);
        }
        for (size_t i = 0; i < n; i++) buf[i] = rank == root ? pattern(i, seed) : 0x5A;
        int rc;
        if (nonblocking && it > 0) {
            MPI_Request req;
            rc = MPI_Ibcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD, &req);
            if (rc == MPI_SUCCESS) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else {
            rc = MPI_Bcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
        }
        if (rc != MPI_SUCCESS) {
            fprintf(stderr, "rank %d iteration %d: broadcast error %d\n", rank, it, rc);
            wrong++;
            continue;
        }
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += buf[i] != pattern(i, seed);
        if (bad) {
            fprintf(stderr, "WRONG DATA rank %d iteration %d: %zu of %zu bytes (MPI_Bcast returned %d)\n",
                    rank, it, bad, n, rc);
            wrong++;
        }
    }
    if (strcmp(mode, "layouts") == 0) {
        /* 400 KB (pipecast's tree over the MPI's point-to-point) and 4 MB (its transport). */
        for (int root = 0; root < size; root++) {
            wrong += mixed_layouts(100000, root, rank);
            wrong += mixed_layouts(1000000, root, rank);
        }
    }
    int total = 0;
    MPI_Allreduce(&wrong, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf(total == 0 ? "mpi_fault_test: ok\n" : "mpi_fault_test: %d wrong\n", total);
    free(buf);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
