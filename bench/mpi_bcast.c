/*
 * Times MPI_Bcast the way seed 003 Fig. 10 does (../shared/seeds/003_f72e5e0868946953.txt §5):
 *
 *     MPI_Barrier; start = MPI_Wtime();
 *     for (i = 0; i < ITER; i++) { MPI_Bcast(...); MPI_Barrier(...); }
 *     elapsed = MPI_Wtime() - start;          reported: elapsed / ITER
 *
 * and, in the same run, the point-to-point time T(msize) from the root to a peer (MPI_Send of
 * msize bytes answered by a 0-byte message, timed the same way), so results can be reported as
 * bcast / T(msize) — a ratio that does not depend on how fast this machine happens to be.
 *
 * Before the timed loop one untimed broadcast warms up (connections, pipecast's bootstrap);
 * receivers then clear their buffer, and after the loop every rank checks every byte against
 * the root's pattern. One JSON line per size on stdout (rank 0):
 *   {"label":"…","np":16,"bytes":65536,"iters":5,"bcast_s":…,"bcast_max_s":…,"p2p_s":…,
 *    "ratio":…,"iter_max_s":…,"iter_min_s":…,"memcpy_s":…,"ok":true}
 * bcast_s is the slowest rank's elapsed/ITER; iter_max_s and iter_min_s the longest and the
 * shortest single iteration (broadcast + barrier; the largest over ranks of each rank's own), so
 * a stall that the mean hides shows; p2p_s the round trip's elapsed/ITER, memcpy_s one
 * memcpy of the message at rank 0 (the limit inside one host), each measured in the same run.
 * Exit code 1 when any byte is wrong anywhere.
 *
 * Usage: mpi_bcast [--sizes 64K,1M,16M] [--iters N] [--budget SECONDS] [--root R]
 *                  [--peer P] [--no-p2p] [--pmpi] [--label TEXT] [--laps]
 * --laps prints every timed iteration at rank 0 on stderr, one line each:
 *   lap BYTES I START_US LAP_US      (START_US: wall clock, µs since the epoch, when the
 *   iteration's broadcast was called; LAP_US: broadcast + barrier), to line iterations up with
 *   pipecast's per-broadcast trace (PIPECAST_LOG=pipecast::comm::multicast=debug, whose
 *   `posted` is the same clock); and every rank's CPU over a size's timed iterations,
 *   cpu BYTES RANK ITERS USER_US SYS_US  (getrusage of the whole process: every thread).
 * --pmpi times PMPI_Bcast, the MPI's own broadcast, even under an LD_PRELOAD shim that
 * interposes MPI_Bcast (bench/lab_mpich.sh: MPICH's own with the shim loaded).
 * --budget caps the timed iterations per size at about SECONDS (from the warm-up's time; at
 * least 1 iteration). Build: mpicc -O2 -o mpi_bcast bench/mpi_bcast.c
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>

static long long cpu_us(int sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    struct timeval t = sys ? ru.ru_stime : ru.ru_utime;
    return (long long)t.tv_sec * 1000000 + t.tv_usec;
}

static long long wall_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000000 + tv.tv_usec;
}

static unsigned char pattern(size_t i, size_t bytes) { return (unsigned char)((i * 131u + bytes / 7u + 1u) & 0xff); }

static size_t parse_size(const char *s)
{
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return 0;
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    default: break;
    }
    return (size_t)v;
}

static void usage(int rank, const char *why)
{
    if (rank == 0)
        fprintf(stderr, "mpi_bcast: %s\nusage: mpi_bcast [--sizes 64K,1M,16M] [--iters N] [--budget S] "
                        "[--root R] [--peer P] [--no-p2p] [--pmpi] [--label TEXT] [--laps]\n", why);
    MPI_Finalize();
    exit(2);
}

/* Average time of `iters` point-to-point transfers root → peer of `bytes`, each answered by a
 * 0-byte message (so the next one starts only after the data arrived). */
static double p2p_time(unsigned char *buf, size_t bytes, int iters, int rank, int root, int peer)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (rank == root) {
            MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(NULL, 0, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == peer) {
            MPI_Recv(buf, (int)bytes, MPI_BYTE, root, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(NULL, 0, MPI_BYTE, root, 2, MPI_COMM_WORLD);
        }
    }
    double t = (MPI_Wtime() - start) / iters;
    MPI_Bcast(&t, 1, MPI_DOUBLE, root, MPI_COMM_WORLD);
    return t;
}

/* One memcpy of `bytes` from `buf` into another buffer (already touched), averaged over
 * `iters` copies: the physical limit of a broadcast inside one host. */
static double memcpy_time(const unsigned char *buf, size_t bytes, int iters)
{
    unsigned char *dst = malloc(bytes);
    if (dst == NULL) return 0;
    memcpy(dst, buf, bytes);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        memcpy(dst, buf, bytes);
        __asm__ __volatile__("" : : "r"(dst) : "memory");
    }
    double t = (MPI_Wtime() - start) / iters;
    free(dst);
    return t;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    const char *sizes_arg = "64K,256K,1M,4M,16M";
    const char *label = "";
    int iters = 5, root = 0, peer = -1, p2p = 1, laps = 0;
    int (*bcast)(void *, int, MPI_Datatype, int, MPI_Comm) = MPI_Bcast;
    double budget = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-p2p")) { p2p = 0; continue; }
        if (!strcmp(a, "--laps")) { laps = 1; continue; }
        if (!strcmp(a, "--pmpi")) { bcast = PMPI_Bcast; continue; }
        if (v == NULL) usage(rank, "an option is missing its value");
        if (!strcmp(a, "--sizes")) sizes_arg = v;
        else if (!strcmp(a, "--iters")) iters = atoi(v);
        else if (!strcmp(a, "--budget")) budget = atof(v);
        else if (!strcmp(a, "--root")) root = atoi(v);
        else if (!strcmp(a, "--peer")) peer = atoi(v);
        else if (!strcmp(a, "--label")) label = v;
        else usage(rank, "unknown option");
        i++;
    }
    if (peer < 0) peer = root == np - 1 ? 0 : np - 1;
    if (np < 2 || iters < 1 || root < 0 || root >= np || peer < 0 || peer >= np || peer == root)
        usage(rank, "need at least 2 ranks, --iters >= 1, and root and peer distinct ranks of the job");

    int all_ok = 1;
    char *list = strdup(sizes_arg);
    for (char *tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
        size_t bytes = parse_size(tok);
        if (bytes == 0 || bytes > (size_t)INT32_MAX) usage(rank, "a size is 0, unreadable or above 2 GiB");
        unsigned char *buf = malloc(bytes);
        if (buf == NULL) { fprintf(stderr, "rank %d: out of memory for %zu bytes\n", rank, bytes); MPI_Abort(MPI_COMM_WORLD, 3); }
        if (rank == root) for (size_t i = 0; i < bytes; i++) buf[i] = pattern(i, bytes);
        else memset(buf, 0, bytes);

        /* Warm-up (untimed except to size the iteration count). */
        MPI_Barrier(MPI_COMM_WORLD);
        double w = MPI_Wtime();
        bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        w = MPI_Wtime() - w;
        int n = iters;
        if (budget > 0 && w > 0 && budget / w < n) n = (int)(budget / w) < 1 ? 1 : (int)(budget / w);
        MPI_Bcast(&n, 1, MPI_INT, root, MPI_COMM_WORLD);
        if (rank != root) memset(buf, 0, bytes);

        /* Seed 003 Fig. 10. */
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime(), lap = start, longest = 0, shortest = 0;
        long long user0 = laps ? cpu_us(0) : 0, sys0 = laps ? cpu_us(1) : 0;
        for (int i = 0; i < n; i++) {
            long long called = laps ? wall_us() : 0;
            bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
            double now = MPI_Wtime(), d = now - lap;
            lap = now;
            if (laps && rank == 0)
                fprintf(stderr, "lap %zu %d %lld %.0f\n", bytes, i, called, d * 1e6);
            if (d > longest) longest = d;
            if (i == 0 || d < shortest) shortest = d;
        }
        if (laps)
            fprintf(stderr, "cpu %zu %d %d %lld %lld\n", bytes, rank, n, cpu_us(0) - user0, cpu_us(1) - sys0);
        double mine = (lap - start) / n, slowest = 0, at_root = mine, spread[2] = {longest, shortest}, worst[2] = {0, 0};
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(spread, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Bcast(&at_root, 1, MPI_DOUBLE, root, MPI_COMM_WORLD);

        int ok = 1;
        for (size_t i = 0; i < bytes; i++)
            if (buf[i] != pattern(i, bytes)) {
                fprintf(stderr, "rank %d: %zu-byte bcast: byte %zu is %u, want %u\n", rank, bytes, i,
                        buf[i], pattern(i, bytes));
                ok = 0;
                break;
            }
        int every = 0;
        MPI_Allreduce(&ok, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        all_ok &= every;

        double t = p2p ? p2p_time(buf, bytes, n, rank, root, peer) : 0;
        double copy = rank == 0 ? memcpy_time(buf, bytes, n) : 0;
        if (rank == 0) {
            printf("{\"label\":\"%s\",\"np\":%d,\"root\":%d,\"bytes\":%zu,\"iters\":%d,\"bcast_s\":%.6f,"
                   "\"bcast_root_s\":%.6f,\"p2p_s\":%.6f,\"p2p_peer\":%d,\"ratio\":%.4f,"
                   "\"iter_max_s\":%.6f,\"iter_min_s\":%.6f,\"memcpy_s\":%.9f,\"ok\":%s}\n",
                   label, np, root, bytes, n, slowest, at_root, t, peer, t > 0 ? slowest / t : 0,
                   worst[0], worst[1], copy, every ? "true" : "false");
            fflush(stdout);
        }
        free(buf);
    }
    free(list);
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
