/*
 * Open MPI `coll` component "pipecast": MPI_Bcast through pipecast's contention-free pipelined
 * trees, everything else (and every case pipecast does not handle) through the module that was
 * in place before it.
 *
 * Facts this file relies on (../shared/OMPI.md): the loader looks for the data symbol
 * mca_coll_pipecast_component in mca_coll_pipecast.so; lower-priority modules are enabled first,
 * so at enable time comm->c_coll holds the functions we fall back to; nothing blocking may run at
 * enable (it deadlocks under MPI_THREAD_MULTIPLE), so the address exchange happens at the first
 * large broadcast on each communicator, through the saved allgather.
 */
#include "ompi_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"
#include "ompi/communicator/communicator.h"
#include "ompi/constants.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/mca/coll/base/base.h"
#include "ompi/mca/coll/coll.h"
#include "opal/util/output.h"

#include "pipecast.h"

/* The release this component was compiled against: struct layouts are compiled in, nothing in
 * Open MPI checks them, so the component declines to run under any other release. */
#define PIPECAST_BUILT_FOR_MAJOR OMPI_MAJOR_VERSION
#define PIPECAST_BUILT_FOR_MINOR OMPI_MINOR_VERSION
#define PIPECAST_BUILT_FOR_RELEASE OMPI_RELEASE_VERSION

typedef struct {
    mca_coll_base_component_2_0_0_t super;
    int priority;
    int min_bytes;
    char *transport;
    char *tree;
    int segment_bytes;
    char *topology;
    char *profile;
    char *if_include;
    int timeout_ms;
    int verbose;
    int output; /* opal_output stream for verbose messages */
    bool version_ok;
} mca_coll_pipecast_component_t;

typedef struct {
    mca_coll_base_module_t super;
    /* The previous bcast and allgather (retained at enable, released in the destructor). */
    mca_coll_base_module_bcast_fn_t prev_bcast;
    mca_coll_base_module_t *prev_bcast_module;
    mca_coll_base_module_allgather_fn_t prev_allgather;
    mca_coll_base_module_t *prev_allgather_module;
    struct ompi_communicator_t *comm;
    pipecast_comm *pc;      /* created at the first large bcast */
    bool disabled;          /* set after an error: everything falls back from then on */
    unsigned long handled;  /* broadcasts pipecast carried */
    unsigned long fallback; /* broadcasts passed to the previous module */
} mca_coll_pipecast_module_t;

static int pipecast_register(void);
static int pipecast_open(void);
static int pipecast_init_query(bool enable_progress_threads, bool enable_mpi_threads);
static mca_coll_base_module_t *pipecast_comm_query(struct ompi_communicator_t *comm, int *priority);

mca_coll_pipecast_component_t mca_coll_pipecast_component = {
    .super = {
        .collm_version = {
            MCA_COLL_BASE_VERSION_2_0_0,
            .mca_component_name = "pipecast",
            MCA_BASE_MAKE_VERSION(component, 0, 1, 0),
            .mca_open_component = pipecast_open,
            .mca_register_component_params = pipecast_register,
        },
        .collm_data = {MCA_BASE_METADATA_PARAM_CHECKPOINT},
        .collm_init_query = pipecast_init_query,
        .collm_comm_query = pipecast_comm_query,
    },
};

#define C (&mca_coll_pipecast_component)

static void say(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int level, const char *fmt, ...)
{
    if (C->verbose < level) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "coll:pipecast: %s\n", line);
}

static void reg_int(const char *name, const char *help, int *store, int dflt)
{
    *store = dflt;
    (void)mca_base_component_var_register(&C->super.collm_version, name, help, MCA_BASE_VAR_TYPE_INT,
                                          NULL, 0, 0, OPAL_INFO_LVL_9, MCA_BASE_VAR_SCOPE_READONLY, store);
}

static void reg_str(const char *name, const char *help, char **store, const char *dflt)
{
    *store = (char *)dflt;
    (void)mca_base_component_var_register(&C->super.collm_version, name, help,
                                          MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_9,
                                          MCA_BASE_VAR_SCOPE_READONLY, store);
}

static int pipecast_register(void)
{
    reg_int("priority", "Priority of the pipecast coll component (tuned is 30)", &C->priority, 40);
    reg_int("min_bytes", "Broadcasts smaller than this go to the previous module", &C->min_bytes, 65536);
    reg_str("transport", "Transport: tcp, raweth, raweth:IFACE, auto (raweth where every rank can) or verbs",
            &C->transport, "tcp");
    reg_str("tree", "Tree: auto, linear, binary, kary:K, kbinomial, multilane, flat, binomial, ...",
            &C->tree, "auto");
    reg_int("segment_bytes", "Segment size in bytes (0: chosen by the cost model)", &C->segment_bytes, 0);
    reg_str("topology", "Topology file mapping ranks to machines (empty: all ranks on one switch)",
            &C->topology, "");
    reg_str("profile", "Calibration profile (pipecast calibrate) or 100mbit/1gbit (empty: 1gbit)",
            &C->profile, "");
    reg_str("if_include",
            "Where pipecast listens: interface names or IPv4 subnets, comma-separated, like "
            "btl_tcp_if_include (empty: PIPECAST_IFACE, else the first up non-loopback interface "
            "not named mgmt*; PIPECAST_IP overrides)",
            &C->if_include, "");
    reg_int("timeout_ms", "A broadcast that makes no progress for this long fails at every rank",
            &C->timeout_ms, 5000);
    reg_int("verbose", "Verbosity: 0 silent, 1 selection and summary, 2 every broadcast", &C->verbose, 0);
    return OMPI_SUCCESS;
}

/* Parses "Open MPI v4.1.4..." from MPI_Get_library_version. */
static bool runtime_version_matches(char *seen, size_t len)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0, major = -1, minor = -1, release = -1;
    if (MPI_SUCCESS != MPI_Get_library_version(lib, &n)) return false;
    if (3 != sscanf(lib, "Open MPI v%d.%d.%d", &major, &minor, &release)) {
        snprintf(seen, len, "unparsable version string %.60s", lib);
        return false;
    }
    snprintf(seen, len, "%d.%d.%d", major, minor, release);
    return major == PIPECAST_BUILT_FOR_MAJOR && minor == PIPECAST_BUILT_FOR_MINOR &&
           release == PIPECAST_BUILT_FOR_RELEASE;
}

static int pipecast_open(void)
{
    char seen[96] = "";
    C->version_ok = runtime_version_matches(seen, sizeof seen);
    if (!C->version_ok) {
        fprintf(stderr,
                "coll:pipecast: built for Open MPI %d.%d.%d but running under %s: the component "
                "disables itself (rebuild it with `make -C ffi` against this Open MPI)\n",
                PIPECAST_BUILT_FOR_MAJOR, PIPECAST_BUILT_FOR_MINOR, PIPECAST_BUILT_FOR_RELEASE, seen);
    }
    return OMPI_SUCCESS;
}

static int pipecast_init_query(bool enable_progress_threads, bool enable_mpi_threads)
{
    (void)enable_progress_threads;
    (void)enable_mpi_threads;
    return C->version_ok ? OMPI_SUCCESS : OMPI_ERR_NOT_SUPPORTED;
}

static void module_construct(mca_coll_pipecast_module_t *m)
{
    m->prev_bcast = NULL;
    m->prev_bcast_module = NULL;
    m->prev_allgather = NULL;
    m->prev_allgather_module = NULL;
    m->comm = NULL;
    m->pc = NULL;
    m->disabled = false;
    m->handled = 0;
    m->fallback = 0;
}

static void module_destruct(mca_coll_pipecast_module_t *m)
{
    if (m->comm != NULL) {
        say(1, "rank %d comm %s: %lu broadcasts by pipecast, %lu by the previous module",
            ompi_comm_rank(m->comm), m->comm->c_name, m->handled, m->fallback);
    }
    if (m->pc != NULL) pipecast_comm_free(m->pc);
    if (m->prev_bcast_module != NULL) OBJ_RELEASE(m->prev_bcast_module);
    if (m->prev_allgather_module != NULL) OBJ_RELEASE(m->prev_allgather_module);
}

OBJ_CLASS_INSTANCE(mca_coll_pipecast_module_t, mca_coll_base_module_t, module_construct,
                   module_destruct);

static int pipecast_module_enable(mca_coll_base_module_t *module, struct ompi_communicator_t *comm)
{
    mca_coll_pipecast_module_t *m = (mca_coll_pipecast_module_t *)module;
    /* Nothing blocking here: see the file comment. */
    if (comm->c_coll->coll_bcast_module == NULL || comm->c_coll->coll_allgather_module == NULL) {
        fprintf(stderr, "coll:pipecast: no previous bcast/allgather module on %s\n", comm->c_name);
        return OMPI_ERR_NOT_FOUND;
    }
    m->prev_bcast = comm->c_coll->coll_bcast;
    m->prev_bcast_module = comm->c_coll->coll_bcast_module;
    OBJ_RETAIN(m->prev_bcast_module);
    m->prev_allgather = comm->c_coll->coll_allgather;
    m->prev_allgather_module = comm->c_coll->coll_allgather_module;
    OBJ_RETAIN(m->prev_allgather_module);
    m->comm = comm;
    return OMPI_SUCCESS;
}

/* The bootstrap allgather pipecast asks for: fixed-size blobs over the saved allgather. */
static int allgather_through_prev(void *user, const void *mine, void *all, size_t len)
{
    mca_coll_pipecast_module_t *m = user;
    int rc = m->prev_allgather((void *)mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, m->comm,
                               m->prev_allgather_module);
    return rc == OMPI_SUCCESS ? 0 : -1;
}

static pipecast_result ensure_pipecast(mca_coll_pipecast_module_t *m)
{
    if (m->pc != NULL) return PIPECAST_OK;
    pipecast_config cfg;
    pipecast_config_default(&cfg);
    cfg.transport = C->transport;
    cfg.tree = C->tree;
    cfg.segment_bytes = C->segment_bytes > 0 ? (uint64_t)C->segment_bytes : 0;
    cfg.topology = (C->topology != NULL && C->topology[0] != '\0') ? C->topology : NULL;
    cfg.timeout_ms = C->timeout_ms > 0 ? (uint32_t)C->timeout_ms : 5000;
    cfg.profile = (C->profile != NULL && C->profile[0] != '\0') ? C->profile : NULL;
    cfg.iface = (C->if_include != NULL && C->if_include[0] != '\0') ? C->if_include : NULL;
    pipecast_result rc = pipecast_comm_create(ompi_comm_rank(m->comm), ompi_comm_size(m->comm),
                                              allgather_through_prev, m, &cfg, &m->pc);
    if (rc == PIPECAST_OK) {
        say(1, "rank %d comm %s (%d ranks): pipecast ready", ompi_comm_rank(m->comm),
            m->comm->c_name, ompi_comm_size(m->comm));
    }
    return rc;
}

static int pipecast_bcast(void *buff, int count, struct ompi_datatype_t *datatype, int root,
                          struct ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_pipecast_module_t *m = (mca_coll_pipecast_module_t *)module;
    size_t type_size = 0;
    ptrdiff_t lb = 0, extent = 0;
    ompi_datatype_type_size(datatype, &type_size);
    ompi_datatype_get_true_extent(datatype, &lb, &extent);
    size_t bytes = type_size * (size_t)(count < 0 ? 0 : count);
    /* Every rank computes the same answer from the same (count, datatype signature, comm). */
    bool ours = !m->disabled && !OMPI_COMM_IS_INTER(comm) && ompi_comm_size(comm) >= 2 &&
                bytes >= (size_t)C->min_bytes &&
                ompi_datatype_is_contiguous_memory_layout(datatype, count);
    if (!ours) {
        m->fallback++;
        return m->prev_bcast(buff, count, datatype, root, comm, m->prev_bcast_module);
    }
    pipecast_result rc = ensure_pipecast(m);
    if (rc == PIPECAST_OK) {
        rc = pipecast_bcast_bytes(m->pc, (char *)buff + lb, bytes, root);
    }
    if (rc == PIPECAST_OK) {
        m->handled++;
        say(2, "rank %d comm %s: bcast %zu bytes from %d by pipecast", ompi_comm_rank(comm),
            comm->c_name, bytes, root);
        return OMPI_SUCCESS;
    }
    /* pipecast fails at every rank (a dead or stuck peer times out everywhere), so every rank
     * takes this path and the previous module redoes the broadcast. */
    char detail[256];
    pipecast_last_error(detail, sizeof detail);
    fprintf(stderr, "coll:pipecast: rank %d comm %s: %s (%s); falling back to the previous bcast "
            "module for this communicator\n", ompi_comm_rank(comm), comm->c_name,
            pipecast_strerror(rc), detail);
    m->disabled = true;
    m->fallback++;
    return m->prev_bcast(buff, count, datatype, root, comm, m->prev_bcast_module);
}

static mca_coll_base_module_t *pipecast_comm_query(struct ompi_communicator_t *comm, int *priority)
{
    if (OMPI_COMM_IS_INTER(comm) || ompi_comm_size(comm) < 2 || C->priority < 0) return NULL;
    mca_coll_pipecast_module_t *m = OBJ_NEW(mca_coll_pipecast_module_t);
    if (m == NULL) return NULL;
    *priority = C->priority;
    m->super.coll_module_enable = pipecast_module_enable;
    m->super.coll_bcast = pipecast_bcast;
    say(1, "rank %d comm %s: selected with priority %d", ompi_comm_rank(comm), comm->c_name,
        C->priority);
    return &m->super;
}
