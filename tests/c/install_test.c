/*
 * The smallest real user of an installed pipecast (tests/install.rs builds it with
 * `pkg-config --cflags --libs pipecast`): two threads are the two ranks of a communicator, a
 * shared buffer and a barrier their allgather; each size goes from each root and every byte is
 * checked at both ranks.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipecast.h>

#define RANKS 2
#define MAX_BLOB 4096

static pthread_barrier_t barrier;
static unsigned char exchange[RANKS][MAX_BLOB];
static int failures[RANKS];

static int allgather(void *user, const void *mine, void *all, size_t len)
{
    int rank = *(int *)user;
    if (len > MAX_BLOB) return -1;
    memcpy(exchange[rank], mine, len);
    pthread_barrier_wait(&barrier);
    for (int r = 0; r < RANKS; r++) memcpy((char *)all + (size_t)r * len, exchange[r], len);
    pthread_barrier_wait(&barrier);
    return 0;
}

static unsigned char pattern(size_t i, unsigned seed)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    return (unsigned char)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

static void *rank_main(void *arg)
{
    int rank = *(int *)arg;
    pipecast_comm *comm = NULL;
    pipecast_result rc = pipecast_comm_create(rank, RANKS, allgather, arg, NULL, &comm);
    if (rc != PIPECAST_OK) {
        fprintf(stderr, "rank %d: create: %s\n", rank, pipecast_strerror(rc));
        failures[rank]++;
        return NULL;
    }
    const size_t sizes[] = {0, 1, 8193, (1u << 20) + 3};
    unsigned seed = 7;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int root = 0; root < RANKS; root++, seed++) {
            size_t n = sizes[s];
            unsigned char *buf = malloc(n + 1);
            for (size_t i = 0; i < n; i++) buf[i] = rank == root ? pattern(i, seed) : 0xEE;
            rc = pipecast_bcast_bytes(comm, n ? buf : NULL, n, root);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) bad += buf[i] != pattern(i, seed);
            if (rc != PIPECAST_OK || bad) {
                fprintf(stderr, "rank %d: %zu bytes from %d: %s, %zu wrong\n", rank, n, root,
                        pipecast_strerror(rc), bad);
                failures[rank]++;
            }
            free(buf);
        }
    }
    pipecast_comm_free(comm);
    return NULL;
}

int main(void)
{
    pthread_barrier_init(&barrier, NULL, RANKS);
    pthread_t threads[RANKS];
    int ranks[RANKS];
    for (int r = 0; r < RANKS; r++) {
        ranks[r] = r;
        pthread_create(&threads[r], NULL, rank_main, &ranks[r]);
    }
    for (int r = 0; r < RANKS; r++) pthread_join(threads[r], NULL);
    if (failures[0] + failures[1]) return 1;
    printf("install_test: pipecast %s ok\n", pipecast_version());
    return 0;
}
