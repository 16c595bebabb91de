/*
 * Exercises the C ABI as a C program would (compiled and run by tests/capi.rs): RANKS threads
 * are the ranks of one communicator, their allgather a shared buffer and a barrier. Real TCP
 * broadcasts over loopback, verified byte for byte at every rank, plus the error paths.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecast.h"

#define RANKS 4
#define MAX_BLOB 4096

static pthread_barrier_t barrier;
static unsigned char exchange[RANKS][MAX_BLOB];
static int failures = 0;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            pthread_mutex_lock(&lock);                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            failures++;                                                    \
            pthread_mutex_unlock(&lock);                                   \
        }                                                                  \
    } while (0)

typedef struct {
    int rank;
} rank_ctx;

static int allgather(void *user, const void *mine, void *all, size_t len)
{
    rank_ctx *ctx = user;
    if (len > MAX_BLOB) return -1;
    memcpy(exchange[ctx->rank], mine, len);
    pthread_barrier_wait(&barrier);
    for (int r = 0; r < RANKS; r++) memcpy((char *)all + (size_t)r * len, exchange[r], len);
    pthread_barrier_wait(&barrier);
    return 0;
}

/* A one-rank allgather: a bad configuration is still reported through the (collective)
 * agreement, so the error cases below run as a communicator of one rank. */
static int allgather_self(void *user, const void *mine, void *all, size_t len)
{
    (void)user;
    memcpy(all, mine, len);
    return 0;
}

/* The seeded pattern every test broadcast carries. */
static unsigned char pattern(size_t i, unsigned seed)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    return (unsigned char)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

/* A stand-in for an MPI's progress engine: counts the calls. */
static void count_progress(void *arg)
{
    ++*(unsigned long *)arg;
}

static void *rank_main(void *arg)
{
    rank_ctx *ctx = arg;
    pipecast_config cfg;
    pipecast_config_default(&cfg);
    cfg.segment_bytes = 8192;
    cfg.timeout_ms = 10000;
    pipecast_comm *comm = NULL;
    pipecast_result rc = pipecast_comm_create(ctx->rank, RANKS, allgather, ctx, &cfg, &comm);
    CHECK(rc == PIPECAST_OK && comm != NULL, "rank %d: create: %s", ctx->rank, pipecast_strerror(rc));
    if (comm == NULL) return NULL;

    const size_t sizes[] = {0, 1, 7, 8191, 8193, (1u << 20) + 3};
    unsigned seed = 1;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int root = 0; root < RANKS; root++, seed++) {
            size_t n = sizes[s];
            unsigned char *buf = malloc(n + 1);
            for (size_t i = 0; i < n; i++) buf[i] = ctx->rank == root ? pattern(i, seed) : 0xEE;
            rc = pipecast_bcast_bytes(comm, n ? buf : NULL, n, root);
            CHECK(rc == PIPECAST_OK, "rank %d: bcast %zu from %d: %s", ctx->rank, n, root,
                  pipecast_strerror(rc));
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) bad += buf[i] != pattern(i, seed);
            CHECK(bad == 0, "rank %d: %zu of %zu bytes wrong (root %d)", ctx->rank, bad, n, root);
            free(buf);
        }
    }

    /* Nonblocking broadcasts, completed the three ways: pipecast_wait, a pipecast_test loop,
     * and pipecast_wait_progressing calling a progress function (an MPI's) between polls. */
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int way = 0; way < 3; way++, seed++) {
            size_t n = sizes[s];
            int root = (int)(s + (size_t)way) % RANKS;
            unsigned char *buf = malloc(n + 1);
            for (size_t i = 0; i < n; i++) buf[i] = ctx->rank == root ? pattern(i, seed) : 0xEE;
            pipecast_request *req = NULL;
            rc = pipecast_ibcast_bytes(comm, n ? buf : NULL, n, root, &req);
            CHECK(rc == PIPECAST_OK && req != NULL, "rank %d: ibcast %zu: %s", ctx->rank, n,
                  pipecast_strerror(rc));
            unsigned long progressed = 0; /* how often is timing: not checked */
            if (way == 0) {
                rc = pipecast_wait(req);
            } else if (way == 1) {
                for (int done = 0; rc == PIPECAST_OK && !done;) rc = pipecast_test(req, &done);
            } else {
                rc = pipecast_wait_progressing(req, count_progress, &progressed);
            }
            CHECK(rc == PIPECAST_OK, "rank %d: ibcast %zu from %d (way %d): %s", ctx->rank, n,
                  root, way, pipecast_strerror(rc));
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) bad += buf[i] != pattern(i, seed);
            CHECK(bad == 0, "rank %d: %zu of %zu bytes wrong (root %d, way %d)", ctx->rank, bad,
                  n, root, way);
            free(buf);
        }
    }
    CHECK(pipecast_wait_progressing(NULL, count_progress, NULL) == PIPECAST_ERR_NULL_ARGUMENT,
          "NULL request");

    /* Errors that are local, so every rank can try them without breaking the collective. */
    unsigned char byte = 0;
    rc = pipecast_bcast_bytes(comm, &byte, 1, RANKS);
    CHECK(rc == PIPECAST_ERR_INVALID_ARGUMENT, "bad root gave %d", rc);
    char msg[256];
    size_t full = pipecast_last_error(msg, sizeof msg);
    CHECK(full > 0 && strstr(msg, "root 4") != NULL, "last error for a bad root: %s", msg);
    rc = pipecast_bcast_bytes(comm, NULL, 5, 0);
    CHECK(rc == PIPECAST_ERR_NULL_ARGUMENT, "NULL buf gave %d", rc);
    rc = pipecast_bcast_bytes(NULL, &byte, 1, 0);
    CHECK(rc == PIPECAST_ERR_NULL_ARGUMENT, "NULL comm gave %d", rc);

    size_t needed = 0;
    rc = pipecast_plan_json(comm, 1, 1 << 20, NULL, 0, &needed);
    CHECK(rc == PIPECAST_OK && needed > 10, "plan length: rc %d needed %zu", rc, needed);
    char *json = malloc(needed + 1);
    rc = pipecast_plan_json(comm, 1, 1 << 20, json, needed + 1, NULL);
    CHECK(rc == PIPECAST_OK && json[0] == '{' && json[needed - 1] == '}' && strstr(json, "\"root\":1"),
          "plan json: %s", json);
    free(json);

    /* The links that run: ranks that are threads of one process share a host, so shared
     * memory (or TCP with PIPECAST_SHM=off). */
    char link[64];
    size_t link_len = pipecast_comm_link(comm, link, sizeof link);
    CHECK(link_len > 0 && link_len < sizeof link && (strncmp(link, "shm:", 4) == 0 || strcmp(link, "tcp") == 0),
          "rank %d: link %s (%zu)", ctx->rank, link, link_len);
    char tiny[3];
    CHECK(pipecast_comm_link(comm, tiny, sizeof tiny) == link_len && strlen(tiny) == 2, "truncated link");
    CHECK(pipecast_comm_link(NULL, tiny, sizeof tiny) == 0, "NULL comm link");

    pipecast_comm_free(comm);
    return NULL;
}

int main(void)
{
    CHECK(pipecast_version() != NULL && strlen(pipecast_version()) > 0, "version");
    CHECK(strcmp(pipecast_strerror(PIPECAST_OK), "success") == 0, "strerror(OK)");

    /* Argument errors before any communication. */
    pipecast_comm *comm = (pipecast_comm *)0x1;
    pipecast_result rc = pipecast_comm_create(0, 2, NULL, NULL, NULL, &comm);
    CHECK(rc == PIPECAST_ERR_NULL_ARGUMENT, "NULL allgather gave %d", rc);
    CHECK(comm == (pipecast_comm *)0x1, "out written on failure");
    rc = pipecast_comm_create(3, 2, allgather, NULL, NULL, &comm);
    CHECK(rc == PIPECAST_ERR_INVALID_ARGUMENT, "rank >= size gave %d", rc);
    pipecast_config cfg;
    pipecast_config_default(&cfg);
    cfg.transport = "carrier-pigeon";
    rc = pipecast_comm_create(0, 1, allgather_self, NULL, &cfg, &comm);
    CHECK(rc == PIPECAST_ERR_CONFIG, "bad transport gave %d", rc);
    char msg[256];
    pipecast_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "carrier-pigeon") != NULL, "config error names the value: %s", msg);
    cfg.transport = NULL;
    cfg.tree = "kary:0";
    rc = pipecast_comm_create(0, 1, allgather_self, NULL, &cfg, &comm);
    CHECK(rc == PIPECAST_ERR_CONFIG, "bad tree gave %d", rc);
    pipecast_comm_free(NULL);

    pthread_barrier_init(&barrier, NULL, RANKS);
    pthread_t threads[RANKS];
    rank_ctx ctx[RANKS];
    for (int r = 0; r < RANKS; r++) {
        ctx[r].rank = r;
        pthread_create(&threads[r], NULL, rank_main, &ctx[r]);
    }
    for (int r = 0; r < RANKS; r++) pthread_join(threads[r], NULL);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("capi_test: all checks passed\n");
    return 0;
}
