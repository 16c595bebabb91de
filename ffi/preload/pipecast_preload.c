/*
 * LD_PRELOAD interposer: MPI_Bcast through pipecast for any MPI, built once per MPI ABI
 * (../shared/OMPI.md: an Open MPI build in an MPICH program aborts, the reverse segfaults).
 *
 * Only the standard MPI/PMPI interface is used: per-communicator state hangs on a communicator
 * attribute (freed by its delete callback when the communicator is freed), the address
 * exchange runs through PMPI_Allgather at the first large broadcast on each communicator, and
 * PMPI_Bcast carries everything pipecast does not handle. Configuration comes from PIPECAST_*
 * environment variables (pipecast_config_from_env) plus PIPECAST_MIN_BYTES, PIPECAST_PML_BELOW,
 * PIPECAST_PML_SEGMENT and PIPECAST_VERBOSE.
 *
 * As in the Open MPI component (docs/ompi.md), broadcasts below PIPECAST_PML_BELOW (512 KiB)
 * follow pipecast's tree but travel as PMPI_Isend/PMPI_Irecv segments on a private duplicate of
 * the communicator (so they never match the application's messages): the MPI's own per-message
 * latency is lower than pipecast's progress thread's for mid-size messages.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecast.h"

typedef struct {
    MPI_Comm comm;
    MPI_Comm p2p;   /* private duplicate for the point-to-point path (MPI_COMM_NULL until used) */
    pipecast_comm *pc;
    int agreed;   /* the glue settings were compared at the first bcast */
    int disabled; /* pipecast declined on this communicator, at every rank alike */
    int failed;   /* a pipecast broadcast failed: later ones fail too, never fall back */
    unsigned long handled, over_p2p, fallback;
} comm_state;

static int keyval = MPI_KEYVAL_INVALID;
static long min_bytes = 65536;
static long pml_below = 524288;
static long pml_segment = 16384;
static int verbose = 0;
/* Whether PIPECAST_MIN_BYTES & co. parsed: compared with the other ranks' (never decided alone). */
static long glue_ok = 1;

/* A whole number from the environment, or 0 and glue_ok = 0 when it does not parse. */
static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return dflt;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 0) {
        fprintf(stderr, "pipecast-preload: %s=%s is not a whole number: pipecast stays off (on every rank)\n",
                name, v);
        glue_ok = 0;
        return dflt;
    }
    return n;
}

static int delete_state(MPI_Comm comm, int key, void *value, void *extra)
{
    (void)comm;
    (void)key;
    (void)extra;
    comm_state *s = value;
    if (verbose >= 1) {
        int rank = -1;
        PMPI_Comm_rank(s->comm, &rank);
        fprintf(stderr, "pipecast-preload: rank %d: %lu broadcasts by pipecast (%lu of them over "
                "MPI point-to-point), %lu by MPI\n", rank, s->handled, s->over_p2p, s->fallback);
    }
    if (s->p2p != MPI_COMM_NULL) PMPI_Comm_free(&s->p2p);
    if (s->pc != NULL) pipecast_comm_free(s->pc);
    free(s);
    return MPI_SUCCESS;
}

static void setup(void)
{
    min_bytes = env_long("PIPECAST_MIN_BYTES", min_bytes);
    pml_below = env_long("PIPECAST_PML_BELOW", pml_below);
    long seg = env_long("PIPECAST_PML_SEGMENT", pml_segment);
    if (seg > 0) pml_segment = seg;
    verbose = (int)env_long("PIPECAST_VERBOSE", 0);
    /* The PIPECAST_* settings of pipecast itself are read by pipecast_comm_create, which
     * reports a bad one to every rank (all fall back together). */
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &keyval, NULL);
    if (verbose >= 1) fprintf(stderr, "pipecast-preload: active (pipecast %s)\n", pipecast_version());
}

int MPI_Init(int *argc, char ***argv)
{
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) setup();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) setup();
    return rc;
}

int MPI_Finalize(void)
{
    /* COMM_WORLD's attributes are not guaranteed to be deleted at finalize: do it here. */
    if (keyval != MPI_KEYVAL_INVALID) {
        PMPI_Comm_delete_attr(MPI_COMM_WORLD, keyval);
        PMPI_Comm_free_keyval(&keyval);
    }
    return PMPI_Finalize();
}

static int allgather_cb(void *user, const void *mine, void *all, size_t len)
{
    comm_state *s = user;
    return PMPI_Allgather((void *)mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, s->comm) ==
                   MPI_SUCCESS
               ? 0
               : -1;
}

static comm_state *state_of(MPI_Comm comm)
{
    comm_state *s = NULL;
    int found = 0;
    PMPI_Comm_get_attr(comm, keyval, &s, &found);
    if (found) return s;
    s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    s->comm = comm;
    s->p2p = MPI_COMM_NULL;
    PMPI_Comm_set_attr(comm, keyval, s);
    return s;
}

/* MPICH defines MPI_STATUSES_IGNORE as the sentinel pointer (MPI_Status *)1, which GCC 12's
 * access analysis takes for a 0-byte object that PMPI_Waitall would write 20-byte statuses to
 * (-Wstringop-overflow); the MPI never writes through the sentinel. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif

#define P2P_WINDOW 4
#define P2P_TAG 0x5063 /* any tag: the private communicator carries nothing else */

/* Moves `bytes` at `buf` through this rank's part of pipecast's tree (`parent` -1 at the root)
 * in `seg`-byte segments: receives posted P2P_WINDOW ahead, each segment forwarded to every
 * child as soon as it arrived (seed 001 §3.2's First-Packet-First-Served). */
static int p2p_tree_bcast(char *buf, size_t bytes, size_t seg, int parent, const int *children,
                          int nchildren, MPI_Comm comm)
{
    if (bytes == 0) return MPI_SUCCESS;
    if (seg == 0 || seg > (size_t)1 << 30) seg = (size_t)1 << 20;
    size_t nseg = (bytes + seg - 1) / seg;
    MPI_Request recvs[P2P_WINDOW];
    MPI_Request *sends = NULL;
    int rc = MPI_SUCCESS;
    for (int w = 0; w < P2P_WINDOW; w++) recvs[w] = MPI_REQUEST_NULL;
    if (nchildren > 0) {
        sends = malloc(sizeof *sends * P2P_WINDOW * (size_t)nchildren);
        if (sends == NULL) return MPI_ERR_NO_MEM;
        for (int i = 0; i < P2P_WINDOW * nchildren; i++) sends[i] = MPI_REQUEST_NULL;
    }
#define SEG_LEN(i) ((int)((i) + 1 < nseg ? seg : bytes - (i) * seg))
    for (size_t i = 0; parent >= 0 && i < nseg && i < P2P_WINDOW && rc == MPI_SUCCESS; i++)
        rc = PMPI_Irecv(buf + i * seg, SEG_LEN(i), MPI_BYTE, parent, P2P_TAG, comm, &recvs[i]);
    for (size_t i = 0; i < nseg && rc == MPI_SUCCESS; i++) {
        size_t slot = i % P2P_WINDOW;
        if (parent >= 0) {
            rc = PMPI_Wait(&recvs[slot], MPI_STATUS_IGNORE);
            size_t next = i + P2P_WINDOW;
            if (rc == MPI_SUCCESS && next < nseg)
                rc = PMPI_Irecv(buf + next * seg, SEG_LEN(next), MPI_BYTE, parent, P2P_TAG, comm,
                                &recvs[slot]);
        }
        if (rc != MPI_SUCCESS || nchildren == 0) continue;
        MPI_Request *mine = &sends[slot * (size_t)nchildren];
        rc = PMPI_Waitall(nchildren, mine, MPI_STATUSES_IGNORE); /* segment i - P2P_WINDOW */
        for (int c = 0; c < nchildren && rc == MPI_SUCCESS; c++)
            rc = PMPI_Isend(buf + i * seg, SEG_LEN(i), MPI_BYTE, children[c], P2P_TAG, comm,
                            &mine[c]);
    }
#undef SEG_LEN
    if (sends != NULL) {
        int wrc = PMPI_Waitall(P2P_WINDOW * nchildren, sends, MPI_STATUSES_IGNORE);
        if (rc == MPI_SUCCESS) rc = wrc;
        free(sends);
    }
    int wrc = PMPI_Waitall(P2P_WINDOW, recvs, MPI_STATUSES_IGNORE);
    return rc == MPI_SUCCESS ? wrc : rc;
}

/* The point-to-point path: pipecast plans, MPI moves. A planning error is returned as a
 * pipecast result (every rank sees the same); MPI's own code goes to *mpi_rc. */
static pipecast_result bcast_p2p(comm_state *s, char *buf, size_t bytes, int root, int size,
                                 int *mpi_rc)
{
    if (s->p2p == MPI_COMM_NULL && PMPI_Comm_dup(s->comm, &s->p2p) != MPI_SUCCESS)
        return PIPECAST_ERR_OTHER;
    int parent = -1;
    size_t nchildren = 0;
    uint64_t seg = 0;
    int *children = malloc(sizeof *children * (size_t)size);
    if (children == NULL) return PIPECAST_ERR_OTHER;
    pipecast_result rc = pipecast_tree_node(s->pc, root, bytes, &parent, children, (size_t)size,
                                            &nchildren, &seg);
    if (rc == PIPECAST_OK)
        *mpi_rc = p2p_tree_bcast(buf, bytes, (size_t)pml_segment, parent, children,
                                 (int)nchildren, s->p2p);
    free(children);
    return rc;
}

/* At the first broadcast of any size on a communicator (every rank reaches it), the ranks
 * compare the glue's settings: a rank with another PIPECAST_MIN_BYTES would decide alone and
 * hang the job. Different anywhere (or unparsable): pipecast is off there at every rank. */
static void agree_on_settings(comm_state *s, int rank, int size)
{
    long mine[4] = {min_bytes, pml_below, pml_segment, glue_ok};
    long *all = malloc(sizeof mine * (size_t)size);
    s->agreed = 1;
    if (all == NULL || PMPI_Allgather(mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine,
                                      MPI_BYTE, s->comm) != MPI_SUCCESS) {
        s->disabled = 1;
        free(all);
        return;
    }
    for (int r = 0; r < size; r++) {
        if (memcmp(&all[4 * r], mine, sizeof mine) != 0 || all[4 * r + 3] == 0) {
            s->disabled = 1;
            if (rank == 0 && verbose >= 1)
                fprintf(stderr, "pipecast-preload: ranks differ in PIPECAST_MIN_BYTES/PML_BELOW/"
                        "PML_SEGMENT (rank %d: %ld/%ld/%ld%s): MPI's own broadcast runs\n", r,
                        all[4 * r], all[4 * r + 1], all[4 * r + 2],
                        all[4 * r + 3] ? "" : ", unparsable");
            break;
        }
    }
    free(all);
}

/* A failed pipecast broadcast: the communicator's error handler decides (by default the job
 * ends); never a fallback, since other ranks may have finished it through pipecast. */
static int failed(comm_state *s, MPI_Comm comm, int rank, pipecast_result rc)
{
    char detail[512];
    pipecast_last_error(detail, sizeof detail);
    fprintf(stderr, "pipecast-preload: rank %d: broadcast failed: %s (%s)\n", rank,
            pipecast_strerror(rc), detail);
    s->failed = 1;
    PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    int inter = 0, size = 0, type_size = 0;
    if (keyval == MPI_KEYVAL_INVALID || comm == MPI_COMM_NULL || count < 0)
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_size(comm, &size);
    PMPI_Type_size(datatype, &type_size);
    size_t bytes = (size_t)type_size * (size_t)count;
    comm_state *s = (inter || size < 2) ? NULL : state_of(comm);
    int rank = 0;
    PMPI_Comm_rank(comm, &rank);
    if (s != NULL && !s->agreed) agree_on_settings(s, rank, size);
    if (s != NULL && s->failed) return failed(s, comm, rank, PIPECAST_ERR_OTHER);
    /* Every rank decides alike: from the type signature's size and agreed settings only. */
    if (s == NULL || s->disabled || (long)bytes < min_bytes) {
        if (s != NULL) s->fallback++;
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    }
    pipecast_result rc = PIPECAST_OK;
    if (s->pc == NULL) {
        /* NULL config: the PIPECAST_* environment, agreed among the ranks. */
        rc = pipecast_comm_create(rank, size, allgather_cb, s, NULL, &s->pc);
        if (rc != PIPECAST_OK) {
            if (rank == 0 && verbose >= 1) {
                char detail[512];
                pipecast_last_error(detail, sizeof detail);
                fprintf(stderr, "pipecast-preload: pipecast declined at every rank, MPI's own "
                        "broadcast runs: %s (%s)\n", pipecast_strerror(rc), detail);
            }
            s->disabled = 1;
            s->fallback++;
            return PMPI_Bcast(buffer, count, datatype, root, comm);
        }
    }
    /* Layouts may differ between ranks (same type signature): a non-contiguous one is packed
     * around the broadcast, so every rank still takes pipecast's path. */
    MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
    PMPI_Type_get_extent(datatype, &lb, &extent);
    PMPI_Type_get_true_extent(datatype, &true_lb, &true_extent);
    int contiguous = (MPI_Aint)type_size == true_extent && extent == true_extent;
    char *data = (char *)buffer + true_lb;
    char *packed = NULL;
    if (!contiguous) {
        packed = malloc(bytes > 0 ? bytes : 1);
        if (packed == NULL) return failed(s, comm, rank, PIPECAST_ERR_OTHER);
        int position = 0;
        if (rank == root && (PMPI_Pack(buffer, count, datatype, packed, (int)bytes, &position,
                                       comm) != MPI_SUCCESS || (size_t)position != bytes)) {
            free(packed);
            return failed(s, comm, rank, PIPECAST_ERR_OTHER);
        }
        data = packed;
    }
    int mpi_rc = MPI_SUCCESS;
    if ((long)bytes < pml_below) {
        rc = bcast_p2p(s, data, bytes, root, size, &mpi_rc);
        if (rc == PIPECAST_OK) s->over_p2p++;
    } else {
        rc = pipecast_bcast_bytes(s->pc, data, bytes, root);
    }
    if (rc != PIPECAST_OK) {
        free(packed);
        return failed(s, comm, rank, rc);
    }
    s->handled++;
    if (mpi_rc == MPI_SUCCESS && packed != NULL && rank != root) {
        int position = 0;
        mpi_rc = PMPI_Unpack(packed, (int)bytes, &position, buffer, count, datatype, comm);
    }
    free(packed);
    return mpi_rc;
}
