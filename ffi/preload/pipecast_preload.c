/*
 * LD_PRELOAD interposer: MPI_Bcast through pipecast for any MPI, built once per MPI ABI
 * (../shared/OMPI.md: an Open MPI build in an MPICH program aborts, the reverse segfaults).
 *
 * Only the standard MPI/PMPI interface is used: per-communicator state hangs on a communicator
 * attribute (freed by its delete callback when the communicator is freed), the address
 * exchange runs once, through PMPI_Allgather on MPI_COMM_WORLD at MPI_Init, where the
 * process's one pipecast engine is made; every communicator is a view of it (its id agreed by
 * the interposed MPI_Comm_dup/split/split_type/create/create_group, or at its first blocking
 * broadcast), and PMPI_Bcast carries everything pipecast does not handle. Configuration comes from PIPECAST_*
 * environment variables (pipecast_config_from_env) plus the glue's own PIPECAST_MIN_BYTES,
 * PIPECAST_PML_BELOW, PIPECAST_PML_SEGMENT (0: the cost model's), PIPECAST_PML_WINDOW and
 * PIPECAST_VERBOSE (read and checked by pipecast_glue_settings_from_env). What it decides
 * with, and the point-to-point tree loop, are the component's too (../common/pipecast_glue.c).
 *
 * As in the Open MPI component (docs/ompi.md), broadcasts below PIPECAST_PML_BELOW (512 KiB)
 * follow pipecast's tree but travel as PMPI_Isend/PMPI_Irecv segments on a private duplicate of
 * the communicator (so they never match the application's messages): the MPI's own per-message
 * latency is lower than pipecast's progress thread's for mid-size messages.
 *
 * MPI_Ibcast goes through pipecast_ibcast_bytes behind a generalized request; the MPI_Wait and
 * MPI_Test families are interposed to complete it (see "Nonblocking broadcasts" below).
 */
#define _GNU_SOURCE /* RTLD_NEXT, RTLD_DEFAULT */
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pipecast.h"
#include "pipecast_glue.h"

typedef struct {
    MPI_Comm comm;
    MPI_Comm p2p; /* private duplicate for the point-to-point path (MPI_COMM_NULL until used) */
    int rank, size;
    pcg_comm g;   /* what the glue decides with (ffi/common/pipecast_glue.h) */
} comm_state;

static int keyval = MPI_KEYVAL_INVALID;
/* A private duplicate of MPI_COMM_WORLD that carries no message: probing it drives the MPI's
 * progress (see let_mpi_progress). */
static MPI_Comm progress_comm = MPI_COMM_NULL;
static pcg_settings settings;
static int verbose = 0;
/* PCG_VOTE_BAD_SETTING when PIPECAST_MIN_BYTES & co. did not parse (pipecast reads and checks
 * them): this rank votes pipecast off at the agreement (never decided alone). */
static int settings_vote = PCG_VOTE_OK;
/* The state of a communicator whose own state could not be allocated: the agreement turned
 * pipecast off there at every rank (this rank voted so); never freed. */
static comm_state no_memory_state;

static void finish_all_of(comm_state *s);
static void world_engine(void);

static int delete_state(MPI_Comm comm, int key, void *value, void *extra)
{
    (void)comm;
    (void)key;
    (void)extra;
    comm_state *s = value;
    if (s == &no_memory_state) return MPI_SUCCESS;
    finish_all_of(s);
    if (verbose >= 1)
        fprintf(stderr, "pipecast-preload: rank %d: %lu broadcasts by pipecast (%lu of them over "
                "MPI point-to-point, %lu nonblocking), %lu by MPI\n", s->rank, s->g.handled,
                s->g.over_p2p, s->g.handled_nb, s->g.fallback);
    if (s->p2p != MPI_COMM_NULL) PMPI_Comm_free(&s->p2p);
    pcg_comm_free(&s->g);
    free(s);
    return MPI_SUCCESS;
}

static void setup(void)
{
    if (pipecast_glue_settings_from_env(&settings, &verbose) != PIPECAST_OK) {
        char why[256];
        pipecast_last_error(why, sizeof why);
        fprintf(stderr, "pipecast-preload: %s: pipecast stays off (on every rank)\n", why);
        settings_vote = PCG_VOTE_BAD_SETTING;
    }
    pcg_comm_init(&no_memory_state.g);
    no_memory_state.comm = MPI_COMM_NULL;
    no_memory_state.p2p = MPI_COMM_NULL;
    no_memory_state.g.agreed = 1;
    no_memory_state.g.disabled = 1;
    /* The PIPECAST_* settings of pipecast itself are read by pipecast_comm_create, which
     * reports a bad one to every rank (all fall back together). */
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &keyval, NULL);
    if (PMPI_Comm_dup(MPI_COMM_WORLD, &progress_comm) != MPI_SUCCESS) progress_comm = MPI_COMM_NULL;
    if (verbose >= 1) fprintf(stderr, "pipecast-preload: active (pipecast %s)\n", pipecast_version());
}

int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) {
        setup();
        world_engine();
    }
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) {
        setup();
        world_engine();
    }
    return rc;
}

/* Whether this is MPICH before 4.2 on its ch4:ucx device: its MPI_Finalize closes every UCX
 * endpoint with ucp_disconnect_nb, progresses until the closes complete, and only then meets
 * the other ranks in a blocking PMI barrier. UCX's TCP transport (1.13, Debian 12's) completes
 * the close of an endpoint that sent anything only when the peer acknowledges a flush, from the
 * peer's own progress; a peer already waiting in the PMI barrier never does, and the job hangs
 * in MPI_Finalize now and then (docs/results-mpich.md; MPICH removed that barrier in 4.2, pull
 * request 6596). */
static int mpich_ucx_before_4_2(void)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, major = 0, minor = 0;
    if (PMPI_Get_library_version(v, &len) != MPI_SUCCESS) return 0;
    v[len < (int)sizeof v ? len : (int)sizeof v - 1] = '\0';
    const char *ver = strstr(v, "MPICH Version:");
    if (ver == NULL || strstr(v, "ch4:ucx") == NULL) return 0;
    if (sscanf(ver + strlen("MPICH Version:"), " %d.%d", &major, &minor) != 2) return 0;
    return major < 4 || (major == 4 && minor < 2);
}

/* The PMI socket hydra gave this rank (PMI_FD), when MPICH's finalize needs the workaround
 * below (mpich_ucx_before_4_2); -1 otherwise. */
static int finalize_pmi_fd(void)
{
    const char *fd_text = getenv("PMI_FD");
    if (fd_text == NULL || !mpich_ucx_before_4_2()) return -1;
    char *end = NULL;
    long fd = strtol(fd_text, &end, 10);
    if (end == fd_text || *end != '\0' || fd < 0 || fd > 65535) return -1;
    return (int)fd;
}

#ifdef MPICH_VERSION
/* MPICH before 4.2 on ch4:ucx, part 2: UCX progress while MPICH waits for PMI in finalize.
 *
 * The barrier below makes every rank enter MPICH's finalize together, but cannot stop a rank
 * from completing its own closes while a peer's flush towards it still waits to be sent (a
 * flush the peer's TCP endpoint could not take at once waits in UCX's pending queue and leaves
 * from the peer's progress, possibly after the peer acknowledged ours): that rank then reads
 * PMI_FD in MPICH's barrier, never progresses UCX again, and the peer's flush is never
 * acknowledged (docs/results-mpich.md). MPICH 4.2 has no barrier there: the rank exits, which
 * fails the peer's flush at once (pull request 6596). Here the shim keeps
 * the rank's UCX worker progressing while MPICH's finalize waits on PMI_FD: `read` is
 * interposed and, only for that descriptor and only inside PMPI_Finalize, polls it and calls
 * ucp_worker_progress on MPICH's workers until the reply is there. The workers are the ones
 * MPICH made (ucp_worker_create, interposed to note them) and not yet destroyed
 * (ucp_worker_destroy, interposed to forget them), so no freed worker is ever progressed. The
 * rank's own endpoints are closed by then: progress only answers what the peers still send
 * (flushes) and MPICH's single thread is blocked in that read, so nothing else touches the
 * worker. */
#include <dlfcn.h>
#include <poll.h>
#include <sys/syscall.h>

#define MAX_UCX_WORKERS 64 /* MPICH 4.0 makes one per VCI: one unless MPIR_CVAR_CH4_NUM_VCIS */
static void *ucx_workers[MAX_UCX_WORKERS];
static int n_ucx_workers = 0;
static pthread_mutex_t ucx_workers_lock = PTHREAD_MUTEX_INITIALIZER;
static int progress_on_fd = -1;         /* PMI_FD while MPICH's finalize may wait on it */
static unsigned long finalize_events = 0; /* UCX events progressed meanwhile (verbose) */

/* The next definition of `name` after this library's (libc's read, UCX's functions). */
static void *next_symbol(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

int ucp_worker_create(void *context, const void *params, void **worker)
{
    int (*real)(void *, const void *, void **);
    *(void **)&real = next_symbol("ucp_worker_create");
    if (real == NULL) return -22; /* UCS_ERR_UNSUPPORTED: no UCX below us */
    int status = real(context, params, worker);
    if (status == 0 && worker != NULL && *worker != NULL) {
        pthread_mutex_lock(&ucx_workers_lock);
        if (n_ucx_workers < MAX_UCX_WORKERS) ucx_workers[n_ucx_workers++] = *worker;
        pthread_mutex_unlock(&ucx_workers_lock);
    }
    return status;
}

void ucp_worker_destroy(void *worker)
{
    void (*real)(void *);
    pthread_mutex_lock(&ucx_workers_lock);
    for (int i = 0; i < n_ucx_workers; i++) {
        if (ucx_workers[i] == worker) {
            ucx_workers[i] = ucx_workers[--n_ucx_workers];
            break;
        }
    }
    pthread_mutex_unlock(&ucx_workers_lock);
    *(void **)&real = next_symbol("ucp_worker_destroy");
    if (real != NULL) real(worker);
}

/* Progresses the live UCX workers until `fd` is readable (or hung up, or poll fails: read()
 * then says what it is). Returns at once when there is no worker to progress. */
static void progress_until_readable(int fd)
{
    unsigned (*progress)(void *);
    *(void **)&progress = dlsym(RTLD_DEFAULT, "ucp_worker_progress");
    struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
    for (;;) {
        unsigned events = 0;
        pthread_mutex_lock(&ucx_workers_lock);
        int live = n_ucx_workers;
        for (int i = 0; i < live && progress != NULL; i++) events += progress(ucx_workers[i]);
        pthread_mutex_unlock(&ucx_workers_lock);
        finalize_events += events;
        if (live == 0 || progress == NULL) return;
        /* Idle: wait up to 1 ms for the reply rather than spin (8 ranks may share 2 cores). */
        if (poll(&p, 1, events > 0 ? 0 : 1) != 0) return;
    }
}

ssize_t read(int fd, void *buf, size_t count)
{
    static ssize_t (*real)(int, void *, size_t) = NULL;
    ssize_t (*r)(int, void *, size_t) = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (r == NULL) {
        *(void **)&r = next_symbol("read");
        __atomic_store_n(&real, r, __ATOMIC_RELEASE);
    }
    if (fd >= 0 && fd == __atomic_load_n(&progress_on_fd, __ATOMIC_ACQUIRE))
        progress_until_readable(fd);
    return r != NULL ? r(fd, buf, count) : syscall(SYS_read, fd, buf, count);
}

static void progress_while_reading(int fd)
{
    __atomic_store_n(&progress_on_fd, fd, __ATOMIC_RELEASE);
}
#else
static void progress_while_reading(int fd)
{
    (void)fd;
}
#endif

/* For mpich_ucx_before_4_2: every rank meets in a PMI barrier (hydra's PMI-1 wire protocol on
 * PMI_FD) before PMPI_Finalize, as MPICH 4.2's finalize does before it disconnects: no rank
 * closes an endpoint while a peer may still be inside an MPI call that needs it. Every rank
 * runs the shim (the same LD_PRELOAD everywhere), so all take part. */
static void pmi_barrier_before_finalize(int fd)
{
    static const char in[] = "cmd=barrier_in\n";
    if (write(fd, in, sizeof in - 1) != (ssize_t)(sizeof in - 1)) return;
    /* The reply, byte by byte: nothing past its newline is ours to read. */
    char line[64];
    size_t n = 0;
    while (n + 1 < sizeof line) {
        ssize_t r = read(fd, &line[n], 1);
        if (r < 0 && errno == EINTR) continue;
        if (r != 1 || line[n] == '\n') break;
        n++;
    }
    line[n] = '\0';
    if (verbose >= 1 || strncmp(line, "cmd=barrier_out", 15) != 0)
        fprintf(stderr, "pipecast-preload: PMI barrier before MPI_Finalize: %s\n",
                n > 0 ? line : "no reply");
}

int MPI_Finalize(void)
{
    /* COMM_WORLD's attributes are not guaranteed to be deleted at finalize: do it here. */
    if (keyval != MPI_KEYVAL_INVALID) {
        /* Only where it was set: deleting an attribute WORLD lacks (a program that never
         * broadcast on it) is an error, fatal by default. */
        void *state = NULL;
        int found = 0;
        PMPI_Comm_get_attr(MPI_COMM_WORLD, keyval, &state, &found);
        if (found) PMPI_Comm_delete_attr(MPI_COMM_WORLD, keyval);
        PMPI_Comm_free_keyval(&keyval);
    }
    if (progress_comm != MPI_COMM_NULL) PMPI_Comm_free(&progress_comm);
    pcg_base_free();
    int fd = finalize_pmi_fd();
    if (fd < 0) return PMPI_Finalize();
    pmi_barrier_before_finalize(fd);
    progress_while_reading(fd);
    int rc = PMPI_Finalize();
    progress_while_reading(-1);
#ifdef MPICH_VERSION
    if (verbose >= 1)
        fprintf(stderr, "pipecast-preload: UCX kept progressing while MPI_Finalize waited on PMI "
                "(%lu events)\n", finalize_events);
#endif
    return rc;
}

static int allgather_cb(void *user, const void *mine, void *all, size_t len)
{
    comm_state *s = user;
    return PMPI_Allgather((void *)mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, s->comm) ==
                   MPI_SUCCESS
               ? 0
               : -1;
}

static int allreduce_max(void *user, const int64_t *in, int64_t *out, int n)
{
    comm_state *s = user;
    return PMPI_Allreduce((void *)in, out, n, MPI_INT64_T, MPI_MAX, s->comm) == MPI_SUCCESS ? 0
                                                                                          : -1;
}

/* NULL config: the PIPECAST_* environment, agreed among the ranks. */
static pipecast_result create_pipecast(void *user, int join, const pipecast_comm *engine,
                                       uint32_t id, pipecast_comm **out)
{
    comm_state *s = user;
    if (join)
        return pipecast_comm_create_on(engine, id, s->rank, s->size, allgather_cb, s, NULL, NULL,
                                       out);
    return pipecast_comm_create(s->rank, s->size, allgather_cb, s, NULL, out);
}

/* The communicator's ranks as MPI_COMM_WORLD ranks (pcg_host.world_ranks). Local. */
static int world_ranks(void *user, int *members)
{
    comm_state *s = user;
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    int *ranks = malloc(sizeof *ranks * (size_t)s->size);
    int rc = ranks == NULL ? -1 : 0;
    if (rc == 0 && (PMPI_Comm_group(s->comm, &group) != MPI_SUCCESS ||
                    PMPI_Comm_group(MPI_COMM_WORLD, &world) != MPI_SUCCESS))
        rc = -1;
    for (int i = 0; rc == 0 && i < s->size; i++) ranks[i] = i;
    if (rc == 0 && PMPI_Group_translate_ranks(group, s->size, ranks, world, members) != MPI_SUCCESS)
        rc = -1;
    for (int i = 0; rc == 0 && i < s->size; i++)
        if (members[i] == MPI_UNDEFINED || members[i] < 0) rc = -1;
    if (group != MPI_GROUP_NULL) PMPI_Group_free(&group);
    if (world != MPI_GROUP_NULL) PMPI_Group_free(&world);
    free(ranks);
    return rc;
}

static pcg_host host_of(comm_state *s)
{
    pcg_host h = {.who = "pipecast-preload",
                  .comm_name = NULL,
                  .verbose = verbose,
                  .rank = s->rank,
                  .size = s->size,
                  .allreduce_max = allreduce_max,
                  .create = create_pipecast,
                  .user = s,
                  .world_ranks = world_ranks,
                  .mpi_id = s->comm == MPI_COMM_WORLD ? 0 : -1};
    return h;
}

/* MPI_COMM_WORLD's processes, for the process's engine. */
static comm_state world_state;

/* At MPI_Init, every process: the process's engine (pcg_base_setup), so that every
 * communicator is a view of it from its first broadcast, MPI_Ibcast included. */
static void world_engine(void)
{
    world_state.comm = MPI_COMM_WORLD;
    world_state.p2p = MPI_COMM_NULL;
    PMPI_Comm_rank(MPI_COMM_WORLD, &world_state.rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &world_state.size);
    pcg_comm_init(&world_state.g);
    if (world_state.size < 2) return;
    pcg_host h = host_of(&world_state);
    pcg_base_setup(&settings, settings_vote, &h);
}

/* The state of `comm`, made at its first broadcast. When it cannot be allocated, a blocking
 * broadcast (`may_agree`) still joins the agreement the other ranks enter, voting pipecast off
 * there, and the communicator keeps no_memory_state; a nonblocking one runs no collective and
 * falls back (so do the others: nothing was agreed yet). NULL: the MPI's own broadcast. */
static comm_state *state_of(MPI_Comm comm, int rank, int size, int may_agree)
{
    comm_state *s = NULL;
    int found = 0;
    PMPI_Comm_get_attr(comm, keyval, &s, &found);
    if (found) return s;
    s = calloc(1, sizeof *s);
    if (s == NULL) {
        if (!may_agree) return NULL;
        comm_state mine = {.comm = comm, .p2p = MPI_COMM_NULL, .rank = rank, .size = size};
        pcg_comm_init(&mine.g);
        mine.g.vote = PCG_VOTE_NO_MEMORY;
        pcg_host h = host_of(&mine);
        pcg_agree(&mine.g, &settings, &h);
        PMPI_Comm_set_attr(comm, keyval, &no_memory_state);
        return &no_memory_state;
    }
    s->comm = comm;
    s->p2p = MPI_COMM_NULL;
    s->rank = rank;
    s->size = size;
    pcg_comm_init(&s->g);
    s->g.vote = settings_vote;
    /* The engine is made at MPI_Init or never: ready now is ready at the creation. */
    pcg_comm_made(&s->g);
    PMPI_Comm_set_attr(comm, keyval, s);
    return s;
}

/* MPICH defines MPI_STATUSES_IGNORE as the sentinel pointer (MPI_Status *)1, which GCC 12's
 * access analysis takes for a 0-byte object that PMPI_Waitall would write 20-byte statuses to
 * (-Wstringop-overflow); the MPI never writes through the sentinel. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

#define P2P_TAG 0x5063 /* any tag: the private communicator carries nothing else */

static void p2p_null(void *req)
{
    *(MPI_Request *)req = MPI_REQUEST_NULL;
}

static int p2p_irecv(void *user, char *buf, int len, int peer, void *req)
{
    return PMPI_Irecv(buf, len, MPI_BYTE, peer, P2P_TAG, *(MPI_Comm *)user, (MPI_Request *)req);
}

static int p2p_isend(void *user, char *buf, int len, int peer, void *req)
{
    return PMPI_Isend(buf, len, MPI_BYTE, peer, P2P_TAG, *(MPI_Comm *)user, (MPI_Request *)req);
}

static int p2p_waitall(void *user, int n, void *reqs)
{
    (void)user;
    return n > 0 ? PMPI_Waitall(n, (MPI_Request *)reqs, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
}

/* The point-to-point path: pipecast plans, MPI moves (pcg_p2p_bcast), on a private duplicate
 * of the communicator so that its messages never match the application's. A planning error
 * is returned as a pipecast result (every rank sees the same); MPI's own code goes to *mpi_rc. */
static pipecast_result bcast_p2p(comm_state *s, char *buf, size_t bytes, int root, int *mpi_rc)
{
    if (s->p2p == MPI_COMM_NULL && PMPI_Comm_dup(s->comm, &s->p2p) != MPI_SUCCESS)
        return PIPECAST_ERR_OTHER;
    pcg_p2p_ops ops = {.req_size = sizeof(MPI_Request),
                       .set_null = p2p_null,
                       .irecv = p2p_irecv,
                       .isend = p2p_isend,
                       .waitall = p2p_waitall,
                       .no_memory = MPI_ERR_NO_MEM,
                       .user = &s->p2p};
    return pcg_p2p_bcast(&s->g, &settings, &ops, buf, bytes, root, s->size, mpi_rc);
}

/* A failed pipecast broadcast: the communicator's error handler decides (by default the job
 * ends); never a fallback, since other ranks may have finished it through pipecast. */
static int failed(comm_state *s, MPI_Comm comm, int rank, pipecast_result rc)
{
    char detail[512];
    pipecast_last_error(detail, sizeof detail);
    fprintf(stderr, "pipecast-preload: rank %d: broadcast failed: %s (%s)\n", rank,
            pipecast_strerror(rc), detail);
    s->g.failed = 1;
    PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
}

/* What a broadcast of `bytes` on `comm` takes (pcg_decide: the same at every rank): *path, and
 * the communicator's state unless the MPI's own broadcast runs (NULL). Without `blocking`
 * (MPI_Ibcast) nothing collective runs. Sets *err (and returns NULL) when an earlier pipecast
 * broadcast on `comm` failed. */
static comm_state *pipecast_for(MPI_Comm comm, size_t bytes, int blocking, int *rank, int *err,
                                pcg_path *path)
{
    int inter = 0, size = 0;
    *err = 0;
    *rank = 0;
    *path = PCG_MPI;
    if (keyval == MPI_KEYVAL_INVALID || comm == MPI_COMM_NULL) return NULL;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_size(comm, &size);
    if (inter || size < 2) return NULL;
    PMPI_Comm_rank(comm, rank);
    comm_state *s = state_of(comm, *rank, size, blocking);
    if (s == NULL) return NULL;
    pcg_host h = host_of(s);
    *path = pcg_decide(&s->g, &settings, &h, bytes, blocking);
    if (*path == PCG_FAILED) {
        *err = failed(s, comm, *rank, PIPECAST_ERR_OTHER);
        return NULL;
    }
    return *path == PCG_MPI ? NULL : s;
}

/* ---- Communicators made by the application ----
 *
 * Its constructors are collective over the new communicator's members, in one order at every
 * member: the shim agrees the new communicator's view id there (one small allreduce), so that
 * its first broadcast, MPI_Ibcast included, may take pipecast's engine (pipecast_glue.h, "One
 * engine per process"). A rank without memory for the state still joins and votes the id
 * off: the first blocking broadcast then agrees everything, as before. */
static void made(MPI_Comm comm)
{
    int inter = 0, size = 0, rank = 0;
    if (!pcg_base_ready() || keyval == MPI_KEYVAL_INVALID || comm == MPI_COMM_NULL) return;
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_size(comm, &size);
    if (inter || size < 2) return;
    PMPI_Comm_rank(comm, &rank);
    comm_state *s = state_of(comm, rank, size, 0);
    comm_state none = {.comm = comm, .p2p = MPI_COMM_NULL, .rank = rank, .size = size};
    pcg_comm_init(&none.g);
    none.g.vote = PCG_VOTE_NO_MEMORY;
    comm_state *at = s != NULL ? s : &none;
    pcg_host h = host_of(at);
    pcg_agree_id(&at->g, &h);
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_dup(comm, newcomm);
    if (rc == MPI_SUCCESS) made(*newcomm);
    return rc;
}

int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_dup_with_info(comm, info, newcomm);
    if (rc == MPI_SUCCESS) made(*newcomm);
    return rc;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_split(comm, color, key, newcomm);
    if (rc == MPI_SUCCESS) made(*newcomm);
    return rc;
}

int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_split_type(comm, split_type, key, info, newcomm);
    if (rc == MPI_SUCCESS) made(*newcomm);
    return rc;
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_create(comm, group, newcomm);
    if (rc == MPI_SUCCESS) made(*newcomm);
    return rc;
}

int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm)
{
    int rc = PMPI_Comm_create_group(comm, group, tag, newcomm);
    if (rc == MPI_SUCCESS) made(*newcomm);
    return rc;
}

/* The contiguous bytes pipecast moves for (buffer, count, datatype): the buffer itself, or a
 * packed copy (*packed, to be freed; filled at the root). Layouts may differ between ranks
 * (same type signature): packing keeps every rank on pipecast's path. NULL on failure. */
static char *contiguous_bytes(void *buffer, int count, MPI_Datatype datatype, size_t bytes,
                              int root, int rank, MPI_Comm comm, char **packed)
{
    MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
    int type_size = 0;
    PMPI_Type_size(datatype, &type_size);
    PMPI_Type_get_extent(datatype, &lb, &extent);
    PMPI_Type_get_true_extent(datatype, &true_lb, &true_extent);
    *packed = NULL;
    if ((MPI_Aint)type_size == true_extent && extent == true_extent)
        return (char *)buffer + true_lb;
    char *p = malloc(bytes > 0 ? bytes : 1);
    if (p == NULL) return NULL;
    int position = 0;
    if (rank == root && (PMPI_Pack(buffer, count, datatype, p, (int)bytes, &position, comm) !=
                             MPI_SUCCESS ||
                         (size_t)position != bytes)) {
        free(p);
        return NULL;
    }
    *packed = p;
    return p;
}

static void probe_mpi_progress(void *arg);

/* A broadcast over pipecast's own transport that keeps the MPI progressing until it ends.
 * Sends this rank completed just before (MPI_Wait returned: the buffer is free) may still sit
 * in the MPI's own queues — MPICH over UCX's TCP transport keeps what the socket did not take
 * and writes it from its progress engine — and a peer waiting for them would never join this
 * broadcast if this rank stopped calling the MPI meanwhile: each would wait for the other. */
static pipecast_result bcast_progressing(pipecast_comm *pc, char *data, size_t bytes, int root)
{
    pipecast_request *pr = NULL;
    pipecast_result rc = pipecast_ibcast_bytes(pc, data, bytes, root, &pr);
    return rc == PIPECAST_OK ? pipecast_wait_progressing(pr, probe_mpi_progress, NULL) : rc;
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    int type_size = 0, rank = 0, err = 0;
    if (count < 0 || datatype == MPI_DATATYPE_NULL)
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    PMPI_Type_size(datatype, &type_size);
    size_t bytes = (size_t)type_size * (size_t)count;
    pcg_path path;
    comm_state *s = pipecast_for(comm, bytes, 1, &rank, &err, &path);
    if (err != 0) return err;
    if (s == NULL) return PMPI_Bcast(buffer, count, datatype, root, comm);
    char *packed = NULL;
    char *data = contiguous_bytes(buffer, count, datatype, bytes, root, rank, comm, &packed);
    if (data == NULL) return failed(s, comm, rank, PIPECAST_ERR_OTHER);
    int mpi_rc = MPI_SUCCESS;
    pipecast_result rc;
    if (path == PCG_P2P) {
        rc = bcast_p2p(s, data, bytes, root, &mpi_rc);
        if (rc == PIPECAST_OK) s->g.over_p2p++;
    } else {
        rc = bcast_progressing(s->g.pc, data, bytes, root);
    }
    if (rc != PIPECAST_OK) {
        free(packed);
        return failed(s, comm, rank, rc);
    }
    s->g.handled++;
    if (mpi_rc == MPI_SUCCESS && packed != NULL && rank != root) {
        int position = 0;
        mpi_rc = PMPI_Unpack(packed, (int)bytes, &position, buffer, count, datatype, comm);
    }
    free(packed);
    return mpi_rc;
}

/* ---- Nonblocking broadcasts ----
 *
 * MPI_Ibcast at or above PIPECAST_PML_BELOW goes to pipecast_ibcast_bytes (smaller ones to
 * PMPI_Ibcast, whose per-message cost is lower) and hands the application a generalized
 * request, from its first call on WORLD and on every communicator made by a constructor the shim
 * interposes (views of the engine made at MPI_Init, their ids agreed as they are made); on
 * others once an MPI_Bcast set them up (MPI_Ibcast must not block, and setting up is
 * collective; see pipecast_for). MPI_Grequest_complete must run on an MPI thread, never on pipecast's progress
 * thread, so the shim also interposes the MPI_Wait and MPI_Test families: before the MPI's
 * own version runs, they complete the pipecast broadcasts among the requests (pipecast_test;
 * the blocking ones keep polling, driving the MPI's progress in between so that other
 * requests, and other ranks waiting on this one, move on). MPI_Request_get_status reports such
 * a request as running until a wait/test call (or MPI_Request_free) of the shim saw it end. */
typedef struct pending_ibcast {
    MPI_Request greq;
    pipecast_request *pr;
    comm_state *s;
    MPI_Comm comm;
    int rank;
    char *packed;         /* a non-contiguous datatype: the packed bytes ... */
    void *buffer;         /* ... unpacked here at the end */
    int count;
    MPI_Datatype dtype;   /* a duplicate of the application's (it may free its own) */
    size_t bytes;
    int unpack;
    int rc;               /* the MPI code the request reports */
    struct pending_ibcast *next;
} pending_ibcast;

static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static pending_ibcast *pending = NULL; /* started and not yet completed */

static int ibcast_query(void *extra, MPI_Status *status)
{
    pending_ibcast *ib = extra;
    PMPI_Status_set_elements(status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    return ib->rc;
}

static int ibcast_free(void *extra)
{
    free(extra);
    return MPI_SUCCESS;
}

static int ibcast_cancel(void *extra, int complete)
{
    (void)extra;
    (void)complete;
    return MPI_SUCCESS; /* a broadcast cannot be cancelled: it completes normally */
}

/* Takes the pending broadcast behind `req` off the list (NULL when it is not one of ours). */
static pending_ibcast *claim(MPI_Request req)
{
    if (req == MPI_REQUEST_NULL) return NULL;
    pthread_mutex_lock(&pending_lock);
    pending_ibcast **at = &pending;
    while (*at != NULL && (*at)->greq != req) at = &(*at)->next;
    pending_ibcast *ib = *at;
    if (ib != NULL) *at = ib->next;
    pthread_mutex_unlock(&pending_lock);
    return ib;
}

static void unclaim(pending_ibcast *ib)
{
    pthread_mutex_lock(&pending_lock);
    ib->next = pending;
    pending = ib;
    pthread_mutex_unlock(&pending_lock);
}

/* Runs the MPI's progress engine once (its own requests, and the ones other ranks wait on):
 * a probe that finds nothing does. On MPI_COMM_SELF MPICH's ch4 does not (MPID_Iprobe answers
 * from its self queue alone), hence the private communicator where nothing is ever sent. */
static void probe_mpi_progress(void *arg)
{
    (void)arg;
    int flag = 0;
    PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG,
                progress_comm != MPI_COMM_NULL ? progress_comm : MPI_COMM_SELF, &flag,
                MPI_STATUS_IGNORE);
}

/* Lets the MPI progress while this rank waits for pipecast, without taking the CPU from
 * pipecast's progress thread: as pipecast_wait_progressing paces its polls. */
static void let_mpi_progress(unsigned spins)
{
    probe_mpi_progress(NULL);
    if (spins < 64) {
        sched_yield();
    } else {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

/* Completes the generalized request of a finished pipecast broadcast. */
static void complete_ibcast(pending_ibcast *ib, pipecast_result rc)
{
    ib->pr = NULL; /* freed by pipecast_test or pipecast_wait_progressing */
    if (rc != PIPECAST_OK) {
        char detail[512];
        pipecast_last_error(detail, sizeof detail);
        fprintf(stderr, "pipecast-preload: rank %d: nonblocking broadcast failed: %s (%s)\n",
                ib->rank, pipecast_strerror(rc), detail);
        ib->s->g.failed = 1;
        ib->rc = MPI_ERR_OTHER;
        PMPI_Comm_call_errhandler(ib->comm, MPI_ERR_OTHER);
    } else if (ib->unpack) {
        int position = 0;
        ib->rc = PMPI_Unpack(ib->packed, (int)ib->bytes, &position, ib->buffer, ib->count,
                             ib->dtype, ib->comm);
    }
    if (ib->dtype != MPI_DATATYPE_NULL) PMPI_Type_free(&ib->dtype);
    free(ib->packed);
    ib->packed = NULL;
    PMPI_Grequest_complete(ib->greq);
}

/* If `req` is one of pipecast's broadcasts: completes it when it has finished (with `block`,
 * once it has). Returns whether it is one of ours still running. */
static int finish(MPI_Request req, int block)
{
    if (pending == NULL) return 0;
    pending_ibcast *ib = claim(req);
    if (ib == NULL) return 0;
    if (block) {
        /* Sleeps on the broadcast's end between the MPI's progress calls (frees the request). */
        complete_ibcast(ib, pipecast_wait_progressing(ib->pr, probe_mpi_progress, NULL));
        return 0;
    }
    int done = 0;
    pipecast_result rc = pipecast_test(ib->pr, &done);
    if (done || rc != PIPECAST_OK) {
        complete_ibcast(ib, rc);
        return 0;
    }
    unclaim(ib);
    return 1;
}

static int any_ours(int n, const MPI_Request *reqs)
{
    if (pending == NULL) return 0;
    int found = 0;
    pthread_mutex_lock(&pending_lock);
    for (pending_ibcast *ib = pending; ib != NULL && !found; ib = ib->next)
        for (int i = 0; i < n && !found; i++) found = reqs[i] == ib->greq;
    pthread_mutex_unlock(&pending_lock);
    return found;
}

/* Before a communicator's state goes: its broadcasts in flight finish first. */
static void finish_all_of(comm_state *s)
{
    for (;;) {
        MPI_Request req = MPI_REQUEST_NULL;
        pthread_mutex_lock(&pending_lock);
        for (pending_ibcast *ib = pending; ib != NULL; ib = ib->next)
            if (ib->s == s) req = ib->greq;
        pthread_mutex_unlock(&pending_lock);
        if (req == MPI_REQUEST_NULL) return;
        finish(req, 1);
    }
}

int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
               MPI_Request *request)
{
    int type_size = 0, rank = 0, err = 0;
    if (count < 0 || datatype == MPI_DATATYPE_NULL)
        return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
    PMPI_Type_size(datatype, &type_size);
    size_t bytes = (size_t)type_size * (size_t)count;
    pcg_path path;
    comm_state *s = pipecast_for(comm, bytes, 0, &rank, &err, &path);
    if (err != 0) return err;
    if (s == NULL) return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
    pending_ibcast *ib = calloc(1, sizeof *ib);
    if (ib == NULL) return failed(s, comm, rank, PIPECAST_ERR_OTHER);
    ib->s = s;
    ib->comm = comm;
    ib->rank = rank;
    ib->buffer = buffer;
    ib->count = count;
    ib->bytes = bytes;
    ib->dtype = MPI_DATATYPE_NULL;
    ib->rc = MPI_SUCCESS;
    char *data = contiguous_bytes(buffer, count, datatype, bytes, root, rank, comm, &ib->packed);
    if (data == NULL) {
        free(ib);
        return failed(s, comm, rank, PIPECAST_ERR_OTHER);
    }
    if (ib->packed != NULL && rank != root) {
        ib->unpack = 1;
        PMPI_Type_dup(datatype, &ib->dtype);
    }
    pipecast_result rc = pipecast_ibcast_bytes(s->g.pc, data, bytes, root, &ib->pr);
    if (rc != PIPECAST_OK) {
        if (ib->dtype != MPI_DATATYPE_NULL) PMPI_Type_free(&ib->dtype);
        free(ib->packed);
        free(ib);
        return failed(s, comm, rank, rc);
    }
    PMPI_Grequest_start(ibcast_query, ibcast_free, ibcast_cancel, ib, &ib->greq);
    *request = ib->greq;
    s->g.handled++;
    s->g.handled_nb++;
    unclaim(ib);
    return MPI_SUCCESS;
}

int MPI_Wait(MPI_Request *request, MPI_Status *status)
{
    finish(*request, 1);
    return PMPI_Wait(request, status);
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status)
{
    finish(*request, 0);
    return PMPI_Test(request, flag, status);
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    if (any_ours(count, requests))
        for (int i = 0; i < count; i++) finish(requests[i], 1);
    return PMPI_Waitall(count, requests, statuses);
}

int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[])
{
    for (int i = 0; pending != NULL && i < count; i++) finish(requests[i], 0);
    return PMPI_Testall(count, requests, flag, statuses);
}

int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status)
{
    for (int i = 0; pending != NULL && i < count; i++) finish(requests[i], 0);
    return PMPI_Testany(count, requests, index, flag, status);
}

int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[])
{
    for (int i = 0; pending != NULL && i < incount; i++) finish(requests[i], 0);
    return PMPI_Testsome(incount, requests, outcount, indices, statuses);
}

/* Freeing an active request is legal: the broadcast still runs to its end, so it is waited
 * for here (its buffer must stay valid anyway), and its generalized request completed. */
int MPI_Request_free(MPI_Request *request)
{
    finish(*request, 1);
    return PMPI_Request_free(request);
}

/* Waitany/Waitsome over pipecast's requests: test everything until something completed. */
int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status)
{
    if (!any_ours(count, requests)) return PMPI_Waitany(count, requests, index, status);
    for (unsigned spins = 0;; spins++) {
        int flag = 0;
        int rc = MPI_Testany(count, requests, index, &flag, status);
        if (rc != MPI_SUCCESS || flag) return rc;
        let_mpi_progress(spins);
    }
}

int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[])
{
    if (!any_ours(incount, requests))
        return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
    for (unsigned spins = 0;; spins++) {
        int rc = MPI_Testsome(incount, requests, outcount, indices, statuses);
        if (rc != MPI_SUCCESS || *outcount != 0) return rc;
        let_mpi_progress(spins);
    }
}
