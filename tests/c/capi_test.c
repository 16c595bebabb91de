/*
 * Exercises the C ABI as a C program would (compiled and run by tests/capi.rs): RANKS threads
 * are the ranks of one communicator, their allgather a shared buffer and a barrier. Real TCP
 * broadcasts over loopback, verified byte for byte at every rank, plus the error paths, and
 * communicators made as views of it (pipecast_comm_view).
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

static const size_t sizes[] = {0, 1, 7, 8191, 8193, (1u << 20) + 3};

/* A blocking broadcast of every size in `sizes` from every root on `comm` (of RANKS ranks,
 * this one `mine` in it), seeds from *seed on, each checked byte for byte. */
static void every_root_and_size(pipecast_comm *comm, int rank, int mine, const char *what,
                                unsigned *seed)
{
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int root = 0; root < RANKS; root++, ++*seed) {
            size_t n = sizes[s];
            unsigned char *buf = malloc(n + 1);
            for (size_t i = 0; i < n; i++) buf[i] = mine == root ? pattern(i, *seed) : 0xEE;
            pipecast_result rc = pipecast_bcast_bytes(comm, n ? buf : NULL, n, root);
            CHECK(rc == PIPECAST_OK, "rank %d: %s bcast %zu from %d: %s", rank, what, n, root,
                  pipecast_strerror(rc));
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) bad += buf[i] != pattern(i, *seed);
            CHECK(bad == 0, "rank %d: %s: %zu of %zu bytes wrong (root %d)", rank, what, bad, n,
                  root);
            free(buf);
        }
    }
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

    unsigned seed = 1;
    every_root_and_size(comm, ctx->rank, ctx->rank, "base", &seed);

    /* Nonblocking broadcasts, completed the four ways: pipecast_wait, a pipecast_test loop,
     * pipecast_wait_progressing calling a progress function (an MPI's) between polls, and a
     * loop of pipecast_test_within (naps of 1, 2, 4, ... µs, up to 500). */
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (int way = 0; way < 4; way++, seed++) {
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
            } else if (way == 2) {
                rc = pipecast_wait_progressing(req, count_progress, &progressed);
            } else {
                unsigned nap = 1;
                for (int done = 0; rc == PIPECAST_OK && !done; nap = nap < 500 ? nap * 2 : 500)
                    rc = pipecast_test_within(req, nap, &done);
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
    int done_flag = 0;
    CHECK(pipecast_test_within(NULL, 10, &done_flag) == PIPECAST_ERR_NULL_ARGUMENT,
          "NULL request (test_within)");

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

    /* Views (issue 30): communicators of some ranks of this one, made locally. The whole in
     * reverse at every rank, the odd ranks at odd ranks; bad arguments are errors. */
    int reversed[RANKS];
    for (int r = 0; r < RANKS; r++) reversed[r] = RANKS - 1 - r;
    pipecast_comm *rev = NULL, *odd = NULL;
    rc = pipecast_comm_view(comm, 7, RANKS, reversed, &rev);
    CHECK(rc == PIPECAST_OK && rev != NULL, "rank %d: view: %s", ctx->rank, pipecast_strerror(rc));
    if (ctx->rank % 2 == 1) {
        const int odds[] = {1, 3};
        rc = pipecast_comm_view(comm, 8, 2, odds, &odd);
        CHECK(rc == PIPECAST_OK && odd != NULL, "rank %d: odd view: %s", ctx->rank,
              pipecast_strerror(rc));
    }
    pipecast_comm *untouched = (pipecast_comm *)0x1;
    const int me[] = {ctx->rank}, twice[] = {ctx->rank, ctx->rank}, negative[] = {-1},
              beyond[] = {RANKS}, other[] = {(ctx->rank + 1) % RANKS};
    CHECK(pipecast_comm_view(NULL, 9, 1, me, &untouched) == PIPECAST_ERR_NULL_ARGUMENT, "NULL base");
    CHECK(pipecast_comm_view(comm, 9, 1, NULL, &untouched) == PIPECAST_ERR_NULL_ARGUMENT, "NULL members");
    CHECK(pipecast_comm_view(comm, 9, 1, me, NULL) == PIPECAST_ERR_NULL_ARGUMENT, "NULL out");
    CHECK(pipecast_comm_view(comm, 9, 0, me, &untouched) == PIPECAST_ERR_INVALID_ARGUMENT, "size 0");
    CHECK(pipecast_comm_view(comm, 9, -3, me, &untouched) == PIPECAST_ERR_INVALID_ARGUMENT, "size -3");
    CHECK(pipecast_comm_view(comm, 9, RANKS + 1, reversed, &untouched) == PIPECAST_ERR_INVALID_ARGUMENT,
          "size above the base's");
    CHECK(pipecast_comm_view(comm, 9, 1, negative, &untouched) == PIPECAST_ERR_INVALID_ARGUMENT, "negative");
    CHECK(pipecast_comm_view(comm, 9, 1, beyond, &untouched) == PIPECAST_ERR_INVALID_ARGUMENT, "beyond");
    CHECK(pipecast_comm_view(comm, 9, 2, twice, &untouched) == PIPECAST_ERR_INVALID_ARGUMENT, "twice");
    pipecast_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "twice") != NULL, "repeated member: %s", msg);
    CHECK(pipecast_comm_view(comm, 9, 1, other, &untouched) == PIPECAST_ERR_INVALID_ARGUMENT, "not a member");
    pipecast_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "not among") != NULL, "this rank missing: %s", msg);
    CHECK(pipecast_comm_view(comm, 7, 1, me, &untouched) == PIPECAST_ERR_INVALID_ARGUMENT, "id in use");
    pipecast_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "in use") != NULL, "id in use: %s", msg);
    CHECK(untouched == (pipecast_comm *)0x1, "out written on failure");

    /* Every root and size on the reversed view; at odd ranks, a nonblocking broadcast on the
     * odd view in flight meanwhile (its other ranks post nothing in between). The base is
     * freed first: the views keep its engine. */
    pipecast_request *pending = NULL;
    size_t odd_n = (1u << 20) + 3;
    unsigned char *odd_buf = NULL;
    unsigned odd_seed = 9999;
    if (odd != NULL) {
        odd_buf = malloc(odd_n);
        for (size_t i = 0; i < odd_n; i++) odd_buf[i] = ctx->rank == 3 ? pattern(i, odd_seed) : 0xEE;
        rc = pipecast_ibcast_bytes(odd, odd_buf, odd_n, 1, &pending);
        CHECK(rc == PIPECAST_OK, "rank %d: ibcast on the odd view: %s", ctx->rank, pipecast_strerror(rc));
    }
    pipecast_comm_free(comm);
    /* view rank r is process RANKS - 1 - r */
    every_root_and_size(rev, ctx->rank, RANKS - 1 - ctx->rank, "view", &seed);
    if (pending != NULL) {
        rc = pipecast_wait(pending);
        CHECK(rc == PIPECAST_OK, "rank %d: odd view wait: %s", ctx->rank, pipecast_strerror(rc));
        size_t bad = 0;
        for (size_t i = 0; i < odd_n; i++) bad += odd_buf[i] != pattern(i, odd_seed);
        CHECK(bad == 0, "rank %d: odd view: %zu bytes wrong", ctx->rank, bad);
    }
    free(odd_buf);
    pipecast_comm_free(odd);
    pipecast_comm_free(rev);
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
