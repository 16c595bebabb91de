/*
 * MPI_Bcast correctness under pipecast (component or preload shim), run by tests/ompi.rs:
 * MPI_COMM_WORLD, a dup and a split; sizes around the threshold and segment boundaries; every
 * root; contiguous datatypes (pipecast's path) and a strided vector (the fallback path). Every
 * rank checks every byte of a seeded pattern; rank 0 prints "mpi_bcast_test: ok" at the end.
 * Argument "multiple" initializes with MPI_THREAD_MULTIPLE (as mpi4py does).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pc_check.h"

static int failures = 0;

static void bytes_case(MPI_Comm comm, const char *name, size_t n, int root, unsigned seed)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    unsigned char *buf = malloc(n + 1);
    for (size_t i = 0; i < n; i++) buf[i] = rank == root ? pattern(i, seed) : 0x5A;
    MPI_Bcast(buf, (int)n, MPI_BYTE, root, comm);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += buf[i] != pattern(i, seed);
    if (bad) {
        fprintf(stderr, "FAIL %s rank %d: %zu of %zu bytes wrong (root %d)\n", name, rank, bad, n, root);
        failures++;
    }
    free(buf);
}

static void int_case(MPI_Comm comm, const char *name, int count, int root, unsigned seed)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    int *buf = malloc(sizeof(int) * (size_t)count + 1);
    for (int i = 0; i < count; i++) buf[i] = rank == root ? (int)(i * 2654435761u + seed) : -1;
    MPI_Bcast(buf, count, MPI_INT, root, comm);
    for (int i = 0; i < count; i++) {
        if (buf[i] != (int)(i * 2654435761u + seed)) {
            fprintf(stderr, "FAIL %s rank %d: int %d wrong (root %d)\n", name, rank, i, root);
            failures++;
            break;
        }
    }
    free(buf);
}

/* Every other int of 2*count: non-contiguous, so pipecast must hand it to the fallback. */
static void vector_case(MPI_Comm comm, const char *name, int count, int root, unsigned seed)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    MPI_Datatype strided;
    MPI_Type_vector(count, 1, 2, MPI_INT, &strided);
    MPI_Type_commit(&strided);
    int *buf = malloc(sizeof(int) * 2 * (size_t)count);
    for (int i = 0; i < 2 * count; i++) buf[i] = rank == root ? (int)(i + seed) : -7;
    MPI_Bcast(buf, 1, strided, root, comm);
    for (int i = 0; i < 2 * count; i++) {
        int want = (i % 2 == 0 || rank == root) ? (int)(i + seed) : -7;
        if (buf[i] != want) {
            fprintf(stderr, "FAIL %s rank %d: strided int %d is %d, want %d\n", name, rank, i, buf[i], want);
            failures++;
            break;
        }
    }
    free(buf);
    MPI_Type_free(&strided);
}

static void run_all(MPI_Comm comm, const char *name, unsigned *seed)
{
    int size;
    MPI_Comm_size(comm, &size);
    const size_t sizes[] = {0, 1, 7, 65535, 65536, 65537, 200003, (1u << 20) + 3, 4u << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int root = 0; root < size; root++) bytes_case(comm, name, sizes[s], root, (*seed)++);
    for (int root = 0; root < size; root++) int_case(comm, name, 300001, root, (*seed)++);
    vector_case(comm, name, 100000, size - 1, (*seed)++);
}

int main(int argc, char **argv)
{
    int provided = 0;
    if (argc > 1 && strcmp(argv[1], "multiple") == 0) {
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
    }
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    unsigned seed = 1;
    run_all(MPI_COMM_WORLD, "world", &seed);

    MPI_Comm dup, split;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    run_all(dup, "dup", &seed);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &split); /* reversed rank order */
    run_all(split, "split", &seed);
    MPI_Comm_free(&split);
    MPI_Comm_free(&dup);

    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total == 0) printf("mpi_bcast_test: ok\n");
        else printf("mpi_bcast_test: %d failures\n", total);
    }
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
