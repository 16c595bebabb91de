/* 4 MiB MPI_Bcast from rank 0, timed between barriers, result checked on every rank.
 * mpicc -O2 -o /tmp/bcast bench/lab_mpi_bcast.c
 * pipecast lab mpirun --name N -- --mca coll_tuned_use_dynamic_rules 1 \
 *     --mca coll_tuned_bcast_algorithm 3 --mca coll_tuned_bcast_algorithm_segmentsize 65536 /tmp/bcast */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int n = 4 << 20; char *buf = malloc(n);
  for (int i = 0; i < n; i++) buf[i] = rank == 0 ? (char)i : 0;
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  MPI_Bcast(buf, n, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  t = MPI_Wtime() - t;
  int ok = 1; for (int i = 0; i < n; i++) if (buf[i] != (char)i) ok = 0;
  if (rank == 0 || !ok) printf("rank %d: 4 MiB bcast %.3f s %s\n", rank, t, ok ? "ok" : "WRONG");
  MPI_Finalize(); return 0;
}
