/*
 * LD_PRELOAD interposer: MPI_Bcast through pipecast for any MPI, built once per MPI ABI
 * (../shared/OMPI.md: an Open MPI build in an MPICH program aborts, the reverse segfaults).
 *
 * Only the standard MPI/PMPI interface is used: per-communicator state hangs on a communicator
 * attribute (freed by its delete callback when the communicator is freed), the address
 * exchange runs through PMPI_Allgather at the first large broadcast on each communicator, and
 * PMPI_Bcast carries everything pipecast does not handle. Configuration comes from PIPECAST_*
 * environment variables (pipecast_config_from_env) plus PIPECAST_MIN_BYTES and PIPECAST_VERBOSE.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecast.h"

typedef struct {
    MPI_Comm comm;
    pipecast_comm *pc;
    int disabled;
    unsigned long handled, fallback;
} comm_state;

static int keyval = MPI_KEYVAL_INVALID;
static long min_bytes = 65536;
static int verbose = 0;
static pipecast_config config;
static int config_ok = 0;

static int delete_state(MPI_Comm comm, int key, void *value, void *extra)
{
    (void)comm;
    (void)key;
    (void)extra;
    comm_state *s = value;
    if (verbose >= 1) {
        int rank = -1;
        PMPI_Comm_rank(s->comm, &rank);
        fprintf(stderr, "pipecast-preload: rank %d: %lu broadcasts by pipecast, %lu by MPI\n",
                rank, s->handled, s->fallback);
    }
    if (s->pc != NULL) pipecast_comm_free(s->pc);
    free(s);
    return MPI_SUCCESS;
}

static void setup(void)
{
    const char *v = getenv("PIPECAST_MIN_BYTES");
    if (v != NULL) min_bytes = atol(v);
    v = getenv("PIPECAST_VERBOSE");
    if (v != NULL) verbose = atoi(v);
    pipecast_result rc = pipecast_config_from_env(&config);
    config_ok = rc == PIPECAST_OK;
    if (!config_ok) {
        char detail[256];
        pipecast_last_error(detail, sizeof detail);
        fprintf(stderr, "pipecast-preload: bad PIPECAST_* configuration (%s): every MPI_Bcast "
                "goes to MPI\n", detail);
    }
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
    PMPI_Comm_set_attr(comm, keyval, s);
    return s;
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    int inter = 0, size = 0, type_size = 0;
    MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
    if (keyval == MPI_KEYVAL_INVALID || !config_ok || comm == MPI_COMM_NULL || count <= 0)
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    PMPI_Comm_test_inter(comm, &inter);
    PMPI_Comm_size(comm, &size);
    PMPI_Type_size(datatype, &type_size);
    PMPI_Type_get_extent(datatype, &lb, &extent);
    PMPI_Type_get_true_extent(datatype, &true_lb, &true_extent);
    /* Contiguous: no gaps inside an element and none between elements. */
    int contiguous = (MPI_Aint)type_size == true_extent && extent == true_extent;
    size_t bytes = (size_t)type_size * (size_t)count;
    comm_state *s = (inter || size < 2) ? NULL : state_of(comm);
    if (s == NULL || s->disabled || !contiguous || (long)bytes < min_bytes) {
        if (s != NULL) s->fallback++;
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    }
    int rank = 0;
    PMPI_Comm_rank(comm, &rank);
    pipecast_result rc = PIPECAST_OK;
    if (s->pc == NULL) rc = pipecast_comm_create(rank, size, allgather_cb, s, &config, &s->pc);
    if (rc == PIPECAST_OK) rc = pipecast_bcast_bytes(s->pc, (char *)buffer + true_lb, bytes, root);
    if (rc == PIPECAST_OK) {
        s->handled++;
        return MPI_SUCCESS;
    }
    char detail[256];
    pipecast_last_error(detail, sizeof detail);
    fprintf(stderr, "pipecast-preload: rank %d: %s (%s); MPI_Bcast falls back to MPI on this "
            "communicator\n", rank, pipecast_strerror(rc), detail);
    s->disabled = 1;
    s->fallback++;
    return PMPI_Bcast(buffer, count, datatype, root, comm);
}
