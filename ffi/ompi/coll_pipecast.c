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
 *
 * MPI_Ibcast (coll_ibcast) takes pipecast's path on communicators an MPI_Bcast already set up;
 * its requests are completed from opal_progress (see pipecast_ibcast).
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
#include "ompi/mca/coll/base/coll_tags.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/mca/pml/pml.h"
#include "ompi/request/request.h"
#include "opal/runtime/opal_progress.h"
#include "opal/threads/mutex.h"
#include "opal/util/output.h"

#include "pipecast.h"

/* The release this component was compiled against: struct layouts are compiled in, nothing in
 * Open MPI checks them, so the component declines to run under any other release. */
#define PIPECAST_BUILT_FOR_MAJOR OMPI_MAJOR_VERSION
#define PIPECAST_BUILT_FOR_MINOR OMPI_MINOR_VERSION
#define PIPECAST_BUILT_FOR_RELEASE OMPI_RELEASE_VERSION
#define PIPECAST_STR_(x) #x
#define PIPECAST_STR(x) PIPECAST_STR_(x)

/* The same release as text in the file, for `pipecast doctor` to read without loading it. */
__attribute__((used)) static const char pipecast_built_for[] =
    "pipecast-built-for-open-mpi " PIPECAST_STR(OMPI_MAJOR_VERSION) "." PIPECAST_STR(
        OMPI_MINOR_VERSION) "." PIPECAST_STR(OMPI_RELEASE_VERSION);

typedef struct {
    mca_coll_base_component_2_0_0_t super;
    int priority;
    int min_bytes;
    int pml_below;
    int pml_segment_bytes;
    int pml_window;
    char *transport;
    char *tree;
    int segment_bytes;
    char *topology;
    char *profile;
    char *if_include;
    char *verbs_device;
    int verbs_port;
    int verbs_gid_index;
    int verbs_max_qps;
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
    mca_coll_base_module_ibcast_fn_t prev_ibcast;
    mca_coll_base_module_t *prev_ibcast_module;
    struct ompi_communicator_t *comm;
    pipecast_comm *pc;      /* created at the first large bcast */
    bool agreed;            /* the glue settings were compared at the first bcast */
    bool disabled;          /* pipecast declined on this communicator (at every rank alike) */
    bool failed;            /* a pipecast broadcast failed: later ones fail too, never fall back */
    bool deferral_said;     /* verbose 1 said once that small broadcasts go to Open MPI's own */
    unsigned long handled;  /* broadcasts pipecast carried */
    unsigned long over_pml; /* of those, moved over Open MPI's PML along pipecast's tree */
    unsigned long fallback; /* broadcasts passed to the previous module */
} mca_coll_pipecast_module_t;

static int pipecast_register(void);
static int pipecast_open(void);
static int pipecast_close(void);
static int pipecast_init_query(bool enable_progress_threads, bool enable_mpi_threads);
static mca_coll_base_module_t *pipecast_comm_query(struct ompi_communicator_t *comm, int *priority);

mca_coll_pipecast_component_t mca_coll_pipecast_component = {
    .super = {
        .collm_version = {
            MCA_COLL_BASE_VERSION_2_0_0,
            .mca_component_name = "pipecast",
            MCA_BASE_MAKE_VERSION(component, 0, 1, 0),
            .mca_open_component = pipecast_open,
            .mca_close_component = pipecast_close,
            .mca_register_component_params = pipecast_register,
        },
        .collm_data = {MCA_BASE_METADATA_PARAM_CHECKPOINT},
        .collm_init_query = pipecast_init_query,
        .collm_comm_query = pipecast_comm_query,
    },
};

#define C (&mca_coll_pipecast_component)

/* Nonblocking broadcasts in flight (see pipecast_ibcast), completed from opal_progress. */
struct pc_ibcast_s;
static struct pc_ibcast_s *pending = NULL;
static opal_mutex_t pending_lock;
static bool progress_registered = false;
static void pc_progress_stop(void);

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
    reg_int("pml_below",
            "Broadcasts from min_bytes up to (not including) this size travel pipecast's tree "
            "(single-lane, contention-free) over Open MPI's own point-to-point layer instead of "
            "pipecast's transport: lower latency per segment for mid-size messages (0: never)",
            &C->pml_below, 524288);
    reg_int("pml_segment_bytes",
            "Segment size on the point-to-point path (0: pipecast's model, whose profiles do not "
            "know Open MPI's per-message cost; 16 KiB measured best on the lab, "
            "docs/results-ompi.md)",
            &C->pml_segment_bytes, 16384);
    reg_int("pml_window",
            "Receives posted ahead, and sends in flight per child, on the point-to-point path "
            "(1-16)",
            &C->pml_window, 4);
    reg_str("transport", "Transport: tcp, raweth, raweth:IFACE, verbs or auto (verbs where every rank has an "
            "RDMA device, else raweth where every rank can, else tcp; verbose 1 says why a faster one "
            "was not taken); empty: PIPECAST_TRANSPORT, else tcp",
            &C->transport, "");
    reg_str("verbs_device", "RDMA device of the verbs transport, e.g. mlx5_0 (empty: PIPECAST_VERBS_DEVICE, "
            "else the first device)",
            &C->verbs_device, "");
    reg_int("verbs_port", "Port of the RDMA device (0: PIPECAST_VERBS_PORT, else 1)", &C->verbs_port, 0);
    reg_int("verbs_gid_index", "GID table index of the RDMA port: on RoCE v2 the entry of the wanted "
            "address and RoCE version, see show_gids (-1: PIPECAST_VERBS_GID_INDEX, else 0)",
            &C->verbs_gid_index, -1);
    reg_int("verbs_max_qps", "Queue pairs a rank of the verbs transport keeps before it closes idle "
            "ones, 1-2048; sizes its completion queue; the same at every rank "
            "(0: PIPECAST_VERBS_MAX_QPS, else 64)",
            &C->verbs_max_qps, 0);
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
    reg_int("timeout_ms", "How long a peer may show no sign of life (process dead, connection closed, "
            "no heartbeat answer) before a broadcast waiting for it fails; a late rank is waited for "
            "(0: PIPECAST_TIMEOUT_MS, else 5000)",
            &C->timeout_ms, 0);
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
    OBJ_CONSTRUCT(&pending_lock, opal_mutex_t);
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

static int pipecast_close(void)
{
    pc_progress_stop();
    OBJ_DESTRUCT(&pending_lock);
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
    m->prev_ibcast = NULL;
    m->prev_ibcast_module = NULL;
    m->comm = NULL;
    m->pc = NULL;
    m->agreed = false;
    m->disabled = false;
    m->deferral_said = false;
    m->failed = false;
    m->handled = 0;
    m->over_pml = 0;
    m->fallback = 0;
}

static void module_destruct(mca_coll_pipecast_module_t *m)
{
    if (m->comm != NULL) {
        say(1, "rank %d comm %s: %lu broadcasts by pipecast (%lu of them over Open MPI's "
            "point-to-point), %lu by the previous module",
            ompi_comm_rank(m->comm), m->comm->c_name, m->handled, m->over_pml, m->fallback);
    }
    if (m->pc != NULL) pipecast_comm_free(m->pc);
    if (m->prev_bcast_module != NULL) OBJ_RELEASE(m->prev_bcast_module);
    if (m->prev_allgather_module != NULL) OBJ_RELEASE(m->prev_allgather_module);
    if (m->prev_ibcast_module != NULL) OBJ_RELEASE(m->prev_ibcast_module);
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
    if (comm->c_coll->coll_ibcast_module != NULL) {
        m->prev_ibcast = comm->c_coll->coll_ibcast;
        m->prev_ibcast_module = comm->c_coll->coll_ibcast_module;
        OBJ_RETAIN(m->prev_ibcast_module);
    } else {
        /* Nothing to hand the rest to: leave MPI_Ibcast alone (the pointers are copied into
         * comm->c_coll after enable). */
        m->super.coll_ibcast = NULL;
    }
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
    /* Set MCA parameters override the PIPECAST_* environment; empty ones leave it. */
    pipecast_config cfg;
    pipecast_config_default(&cfg);
    cfg.transport = (C->transport != NULL && C->transport[0] != '\0') ? C->transport : NULL;
    cfg.tree = (C->tree != NULL && C->tree[0] != '\0' && strcmp(C->tree, "auto") != 0) ? C->tree : NULL;
    cfg.segment_bytes = C->segment_bytes > 0 ? (uint64_t)C->segment_bytes : 0;
    cfg.topology = (C->topology != NULL && C->topology[0] != '\0') ? C->topology : NULL;
    cfg.timeout_ms = C->timeout_ms > 0 ? (uint32_t)C->timeout_ms : 0;
    cfg.profile = (C->profile != NULL && C->profile[0] != '\0') ? C->profile : NULL;
    cfg.iface = (C->if_include != NULL && C->if_include[0] != '\0') ? C->if_include : NULL;
    /* Settings the config struct has no field for, as PIPECAST_NAME=value lines; a device name
     * with a newline or ';' in it makes the line unreadable and pipecast declines everywhere. */
    char settings[512];
    int n = 0;
    if (C->verbs_device != NULL && C->verbs_device[0] != '\0')
        n += snprintf(settings + n, sizeof settings - (size_t)n, "PIPECAST_VERBS_DEVICE=%s\n",
                      C->verbs_device);
    if (C->verbs_port > 0 && n >= 0 && (size_t)n < sizeof settings)
        n += snprintf(settings + n, sizeof settings - (size_t)n, "PIPECAST_VERBS_PORT=%d\n",
                      C->verbs_port);
    if (C->verbs_gid_index >= 0 && n >= 0 && (size_t)n < sizeof settings)
        n += snprintf(settings + n, sizeof settings - (size_t)n, "PIPECAST_VERBS_GID_INDEX=%d\n",
                      C->verbs_gid_index);
    if (C->verbs_max_qps != 0 && n >= 0 && (size_t)n < sizeof settings)
        n += snprintf(settings + n, sizeof settings - (size_t)n, "PIPECAST_VERBS_MAX_QPS=%d\n",
                      C->verbs_max_qps);
    if (n < 0 || (size_t)n >= sizeof settings) settings[0] = '\0';
    /* Collective and agreed: every rank gets the same result. */
    pipecast_result rc =
        pipecast_comm_create_with(ompi_comm_rank(m->comm), ompi_comm_size(m->comm),
                                  allgather_through_prev, m, &cfg, n > 0 ? settings : NULL, &m->pc);
    if (rc == PIPECAST_OK) {
        char link[128], why[512];
        pipecast_comm_link(m->pc, link, sizeof link);
        say(1, "rank %d comm %s (%d ranks): pipecast ready over %s", ompi_comm_rank(m->comm),
            m->comm->c_name, ompi_comm_size(m->comm), link);
        if (ompi_comm_rank(m->comm) == 0 && pipecast_comm_link_reason(m->pc, why, sizeof why) > 0)
            say(1, "comm %s: transport auto chose %s: %s", m->comm->c_name, link, why);
    } else if (ompi_comm_rank(m->comm) == 0) {
        char detail[512];
        pipecast_last_error(detail, sizeof detail);
        say(1, "comm %s: pipecast declined at every rank, Open MPI's own broadcast runs: %s (%s)",
            m->comm->c_name, pipecast_strerror(rc), detail);
    }
    return rc;
}

/* Most receives posted ahead from the parent on the point-to-point path (and sends in flight
 * per child): a small window keeps the pipeline full without queueing the whole message. */
#define PML_WINDOW_MAX 16

/* Moves `bytes` at `buf` through this rank's part of one of pipecast's trees in `seg`-byte
 * segments over Open MPI's PML (seed 003 §3.1's pipeline, First-Packet-First-Served as in
 * seed 001 §3.2): each segment is forwarded to every child as soon as it arrived. Every rank of
 * the tree calls it with the same (bytes, seg). Returns an OMPI error code. */
static int pml_tree_bcast(char *buf, size_t bytes, size_t seg, int parent, const int *children,
                          int nchildren, struct ompi_communicator_t *comm)
{
    if (bytes == 0) return OMPI_SUCCESS;
    if (seg == 0 || seg > (size_t)INT32_MAX) seg = (size_t)1 << 20;
    size_t nseg = (bytes + seg - 1) / seg;
    const size_t window = C->pml_window < 1 ? 1
                              : C->pml_window > PML_WINDOW_MAX ? PML_WINDOW_MAX
                                                               : (size_t)C->pml_window;
    ompi_request_t *recvs[PML_WINDOW_MAX];
    ompi_request_t **sends = NULL;
    int rc = OMPI_SUCCESS;
    for (size_t w = 0; w < window; w++) recvs[w] = MPI_REQUEST_NULL;
    if (nchildren > 0) {
        sends = malloc(sizeof *sends * window * (size_t)nchildren);
        if (sends == NULL) return OMPI_ERR_OUT_OF_RESOURCE;
        for (size_t i = 0; i < window * (size_t)nchildren; i++) sends[i] = MPI_REQUEST_NULL;
    }
#define SEG_LEN(i) ((int)((i) + 1 < nseg ? seg : bytes - (i) * seg))
    if (parent >= 0) {
        for (size_t i = 0; i < nseg && i < window && rc == OMPI_SUCCESS; i++) {
            rc = MCA_PML_CALL(irecv(buf + i * seg, SEG_LEN(i), MPI_BYTE, parent,
                                    MCA_COLL_BASE_TAG_BCAST, comm, &recvs[i]));
        }
    }
    for (size_t i = 0; i < nseg && rc == OMPI_SUCCESS; i++) {
        size_t slot = i % window;
        if (parent >= 0) {
            rc = ompi_request_wait(&recvs[slot], MPI_STATUS_IGNORE);
            if (rc != OMPI_SUCCESS) break;
            size_t next = i + window;
            if (next < nseg) {
                rc = MCA_PML_CALL(irecv(buf + next * seg, SEG_LEN(next), MPI_BYTE, parent,
                                        MCA_COLL_BASE_TAG_BCAST, comm, &recvs[slot]));
                if (rc != OMPI_SUCCESS) break;
            }
        }
        if (nchildren == 0) continue;
        ompi_request_t **mine = &sends[slot * (size_t)nchildren];
        /* The sends of segment i - window used this slot. */
        rc = ompi_request_wait_all(nchildren, mine, MPI_STATUSES_IGNORE);
        for (int c = 0; c < nchildren && rc == OMPI_SUCCESS; c++) {
            rc = MCA_PML_CALL(isend(buf + i * seg, SEG_LEN(i), MPI_BYTE, children[c],
                                    MCA_COLL_BASE_TAG_BCAST, MCA_PML_BASE_SEND_STANDARD, comm,
                                    &mine[c]));
        }
    }
#undef SEG_LEN
    if (sends != NULL) {
        int wrc = ompi_request_wait_all((int)window * nchildren, sends, MPI_STATUSES_IGNORE);
        if (rc == OMPI_SUCCESS) rc = wrc;
        free(sends);
    }
    for (size_t w = 0; w < window; w++) {
        if (recvs[w] != MPI_REQUEST_NULL) {
            int wrc = ompi_request_wait(&recvs[w], MPI_STATUS_IGNORE);
            if (rc == OMPI_SUCCESS) rc = wrc;
        }
    }
    return rc;
}

/* Broadcast of a mid-size message: pipecast plans the tree, Open MPI's PML moves the segments.
 * Returns a pipecast result for planning problems (every rank sees the same) and stores the
 * PML's code in *ompi_rc. */
static pipecast_result bcast_over_pml(mca_coll_pipecast_module_t *m, char *buf, size_t bytes,
                                      int root, int *ompi_rc)
{
    int size = ompi_comm_size(m->comm);
    int parent = -1;
    size_t nchildren = 0;
    uint64_t seg = 0;
    int *children = malloc(sizeof *children * (size_t)size);
    if (children == NULL) return PIPECAST_ERR_OTHER;
    pipecast_result rc = pipecast_tree_node(m->pc, root, bytes, &parent, children, (size_t)size,
                                            &nchildren, &seg);
    if (rc == PIPECAST_OK) {
        if (C->pml_segment_bytes > 0) seg = (uint64_t)C->pml_segment_bytes;
        *ompi_rc = pml_tree_bcast(buf, bytes, (size_t)seg, parent, children, (int)nchildren,
                                  m->comm);
    }
    free(children);
    return rc;
}

/* At the first broadcast of any size on a communicator (every rank reaches it), the ranks
 * compare the settings that decide "pipecast or not" for a message, so that no rank ever
 * decides alone (one rank with another min_bytes would hang the job). Different settings
 * anywhere: pipecast is off on this communicator at every rank. */
static void agree_on_settings(mca_coll_pipecast_module_t *m)
{
    int64_t mine[4] = {C->min_bytes, C->pml_below, C->pml_segment_bytes, C->pml_window};
    int size = ompi_comm_size(m->comm);
    int64_t *all = malloc(sizeof mine * (size_t)size);
    m->agreed = true;
    if (all == NULL ||
        m->prev_allgather(mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                          m->comm, m->prev_allgather_module) != OMPI_SUCCESS) {
        /* Every rank calls the same allgather; an error there is Open MPI's own and alike. */
        m->disabled = true;
        free(all);
        return;
    }
    for (int r = 0; r < size; r++) {
        if (memcmp(&all[4 * r], mine, sizeof mine) != 0) {
            m->disabled = true;
            if (ompi_comm_rank(m->comm) == 0)
                say(1, "comm %s: ranks differ in min_bytes/pml_below/pml_segment_bytes/pml_window "
                    "(rank %d has %lld/%lld/%lld/%lld): pipecast is off on it at every rank",
                    m->comm->c_name, r, (long long)all[4 * r], (long long)all[4 * r + 1],
                    (long long)all[4 * r + 2], (long long)all[4 * r + 3]);
            break;
        }
    }
    free(all);
}

/* Open MPI's progress, for pipecast_wait_progressing. MPI has no timeouts and a rank inside
 * MPI_Bcast is inside MPI: its pending point-to-point traffic must move. Over btl tcp a
 * rendezvous send moves only from the sender's opal_progress, so a rank that blocked in
 * pipecast's broadcast while its peer still waited in MPI_Recv for that send would never see
 * the peer join: each would wait for the other (tests/c/mpi_pending_send.c). */
static void drive_opal_progress(void *arg)
{
    (void)arg;
    opal_progress();
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
    if (!m->agreed) agree_on_settings(m);
    if (m->failed) {
        /* A broadcast failed before (a peer is gone): never go on alone. */
        return OMPI_ERROR;
    }
    /* Every rank computes the same answer from the same (type signature size, comm) and the
     * agreed settings. A non-contiguous datatype is packed and unpacked around the broadcast,
     * so layouts that differ between ranks (legal in MPI) still take one path everywhere. */
    bool ours = !m->disabled && !OMPI_COMM_IS_INTER(comm) && ompi_comm_size(comm) >= 2 &&
                bytes >= (size_t)C->min_bytes;
    if (!ours) {
        m->fallback++;
        return m->prev_bcast(buff, count, datatype, root, comm, m->prev_bcast_module);
    }
    pipecast_result rc = ensure_pipecast(m);
    if (rc != PIPECAST_OK) {
        /* Declined at every rank alike (pipecast_comm_create is agreed). */
        m->disabled = true;
        m->fallback++;
        return m->prev_bcast(buff, count, datatype, root, comm, m->prev_bcast_module);
    }
    if (bytes < pipecast_defers_below(m->pc)) {
        /* Where pipecast cannot win (all ranks on one host: a small message, or more ranks
         * than the host's CPUs can carry), Open MPI's own broadcast runs: the same answer at
         * every rank. */
        if (!m->deferral_said && ompi_comm_rank(comm) == 0) {
            char why[512];
            pipecast_defer_reason(m->pc, why, sizeof why);
            say(1, "comm %s: %s", comm->c_name, why);
        }
        m->deferral_said = true;
        m->fallback++;
        return m->prev_bcast(buff, count, datatype, root, comm, m->prev_bcast_module);
    }
    bool contiguous = ompi_datatype_is_contiguous_memory_layout(datatype, count);
    char *data = (char *)buff + lb;
    char *packed = NULL;
    if (!contiguous) {
        packed = malloc(bytes);
        if (packed == NULL) return OMPI_ERR_OUT_OF_RESOURCE;
        int position = 0;
        if (ompi_comm_rank(comm) == root &&
            (MPI_Pack(buff, count, datatype, packed, (int)bytes, &position, comm) != MPI_SUCCESS ||
             (size_t)position != bytes)) {
            free(packed);
            return OMPI_ERROR;
        }
        data = packed;
    }
    int ompi_rc = OMPI_SUCCESS;
    if (bytes < (size_t)(C->pml_below > 0 ? C->pml_below : 0)) {
        rc = bcast_over_pml(m, data, bytes, root, &ompi_rc);
        if (rc == PIPECAST_OK) {
            m->handled++;
            m->over_pml++;
            say(2, "rank %d comm %s: bcast %zu bytes from %d along pipecast's tree over the PML",
                ompi_comm_rank(comm), comm->c_name, bytes, root);
        }
    } else {
        pipecast_request *pr = NULL;
        rc = pipecast_ibcast_bytes(m->pc, data, bytes, root, &pr);
        if (rc == PIPECAST_OK) rc = pipecast_wait_progressing(pr, drive_opal_progress, NULL);
        if (rc == PIPECAST_OK) {
            m->handled++;
            say(2, "rank %d comm %s: bcast %zu bytes from %d by pipecast", ompi_comm_rank(comm),
                comm->c_name, bytes, root);
        }
    }
    if (rc != PIPECAST_OK) {
        /* A peer is gone or the ranks disagree on this broadcast: the error goes to the
         * communicator's error handler (by default it ends the job). Never a fallback here:
         * other ranks may have finished this broadcast through pipecast. */
        char detail[512];
        pipecast_last_error(detail, sizeof detail);
        fprintf(stderr, "coll:pipecast: rank %d comm %s: broadcast failed: %s (%s)\n",
                ompi_comm_rank(comm), comm->c_name, pipecast_strerror(rc), detail);
        m->failed = true;
        free(packed);
        return OMPI_ERROR;
    }
    if (ompi_rc == OMPI_SUCCESS && packed != NULL && ompi_comm_rank(comm) != root) {
        int position = 0;
        if (MPI_Unpack(packed, (int)bytes, &position, buff, count, datatype, comm) != MPI_SUCCESS)
            ompi_rc = OMPI_ERROR;
    }
    free(packed);
    /* A PML error is Open MPI's own, reported as for any of its collectives. */
    return ompi_rc;
}

/* Nonblocking broadcasts: pipecast's progress thread moves the bytes; a callback registered
 * with opal_progress polls pipecast_test and completes the MPI request, so only MPI's own
 * threads ever touch Open MPI's request machinery.
 *
 * The request must be an ompi_coll_base_nbc_request_t: MPI_Ibcast (ompi_coll_base_retain_
 * datatypes) keeps a derived datatype alive through its fields. Its header
 * (ompi/mca/coll/base/coll_base_util.h) includes op.h, which needs Fortran headers Debian does
 * not ship, so here it is field for field as in 4.1.4 (retain writes 8-byte words at 160..184,
 * right after the 160-byte ompi_request_t; the release check at open refuses other releases). */
typedef struct {
    ompi_request_t super;
    union {
        ompi_request_complete_fn_t req_complete_cb;
        ompi_request_free_fn_t req_free;
    } cb;
    void *req_complete_cb_data;
    union {
        struct {
            void *first, *second;
        } pair;
    } data;
} ompi_coll_base_nbc_request_t;
OMPI_DECLSPEC extern opal_class_t ompi_coll_base_nbc_request_t_class;
_Static_assert(sizeof(ompi_coll_base_nbc_request_t) == sizeof(ompi_request_t) + 32,
               "ompi_coll_base_nbc_request_t as in Open MPI 4.1");

typedef struct pc_ibcast_s {
    ompi_coll_base_nbc_request_t super;
    pipecast_request *pr; /* NULL once pipecast_test reported the end (and freed it) */
    mca_coll_pipecast_module_t *m;
    /* A non-contiguous datatype: the packed bytes, unpacked into the user's buffer at the end
     * (MPI_Ibcast keeps the datatype alive until the request completes). */
    char *packed;
    void *buff;
    int count;
    struct ompi_datatype_t *datatype;
    size_t bytes;
    bool unpack;
    pipecast_result result;
    struct pc_ibcast_s *next;
} pc_ibcast_t;

static void pc_ibcast_construct(pc_ibcast_t *r)
{
    r->pr = NULL;
    r->packed = NULL;
    r->next = NULL;
}

OBJ_CLASS_INSTANCE(pc_ibcast_t, ompi_coll_base_nbc_request_t, pc_ibcast_construct, NULL);

static int pc_ibcast_free(ompi_request_t **req)
{
    /* MPI frees a request only once it completed. */
    OMPI_REQUEST_FINI(*req);
    OBJ_RELEASE(*req);
    *req = MPI_REQUEST_NULL;
    return OMPI_SUCCESS;
}

static int pc_ibcast_cancel(ompi_request_t *req, int complete)
{
    (void)req;
    (void)complete;
    return OMPI_SUCCESS; /* a broadcast in flight cannot be cancelled: it completes normally */
}

/* Completes the pipecast broadcasts that finished: called by opal_progress, so always on a
 * thread inside MPI. The finished ones leave the list under the lock and are completed after
 * it (completion runs callbacks, which must not find the lock held). */
static int pc_progress(void)
{
    if (pending == NULL) return 0;
    pc_ibcast_t *finished = NULL;
    OPAL_THREAD_LOCK(&pending_lock);
    pc_ibcast_t **at = (pc_ibcast_t **)&pending;
    while (*at != NULL) {
        pc_ibcast_t *r = *at;
        int done = 0;
        r->result = pipecast_test(r->pr, &done);
        if (!done && r->result == PIPECAST_OK) {
            at = &r->next;
            continue;
        }
        r->pr = NULL;
        *at = r->next;
        r->next = finished;
        finished = r;
    }
    OPAL_THREAD_UNLOCK(&pending_lock);
    int completed = 0;
    while (finished != NULL) {
        pc_ibcast_t *r = finished;
        finished = r->next;
        r->next = NULL;
        int mpi_rc = MPI_SUCCESS;
        if (r->result != PIPECAST_OK) {
            /* As for a blocking broadcast: the error goes to the request (and so to the
             * communicator's error handler); never a fallback. */
            char detail[512];
            pipecast_last_error(detail, sizeof detail);
            fprintf(stderr, "coll:pipecast: rank %d comm %s: nonblocking broadcast failed: %s (%s)\n",
                    ompi_comm_rank(r->m->comm), r->m->comm->c_name, pipecast_strerror(r->result),
                    detail);
            r->m->failed = true;
            mpi_rc = MPI_ERR_OTHER;
        } else if (r->unpack) {
            int position = 0;
            if (MPI_Unpack(r->packed, (int)r->bytes, &position, r->buff, r->count, r->datatype,
                           r->m->comm) != MPI_SUCCESS)
                mpi_rc = MPI_ERR_OTHER;
        }
        free(r->packed);
        r->packed = NULL;
        r->super.super.req_status.MPI_ERROR = mpi_rc;
        ompi_request_complete(&r->super.super, true);
        completed++;
    }
    return completed;
}

/* Before the component is unloaded: no progress callback may point into it. */
static void pc_progress_stop(void)
{
    if (progress_registered) opal_progress_unregister(pc_progress);
    progress_registered = false;
}

/* MPI_Ibcast. Open MPI also calls it from inside its progress engine (communicator creation
 * agrees on a context id with ibcasts), where nothing may block: so an ibcast never sets
 * pipecast up. It takes pipecast's path only on a communicator that an earlier MPI_Bcast set
 * up (settings agreed, pipecast_comm_create done) — the same at every rank, since every rank
 * calls the same collectives in the same order — and only from pml_below (the previous
 * module's per-message cost is lower below). Everything else goes to the previous ibcast. */
static int pipecast_ibcast(void *buff, int count, struct ompi_datatype_t *datatype, int root,
                           struct ompi_communicator_t *comm, ompi_request_t **request,
                           mca_coll_base_module_t *module)
{
    mca_coll_pipecast_module_t *m = (mca_coll_pipecast_module_t *)module;
    size_t type_size = 0;
    ptrdiff_t lb = 0, extent = 0;
    ompi_datatype_type_size(datatype, &type_size);
    ompi_datatype_get_true_extent(datatype, &lb, &extent);
    size_t bytes = type_size * (size_t)(count < 0 ? 0 : count);
    if (m->failed) return OMPI_ERROR;
    bool ours = m->agreed && m->pc != NULL && !m->disabled && !OMPI_COMM_IS_INTER(comm) &&
                ompi_comm_size(comm) >= 2 && bytes >= (size_t)C->min_bytes &&
                bytes >= (size_t)(C->pml_below > 0 ? C->pml_below : 0) &&
                bytes >= pipecast_defers_below(m->pc);
    if (!ours) {
        if (m->prev_ibcast == NULL) return OMPI_ERR_NOT_SUPPORTED;
        m->fallback++;
        return m->prev_ibcast(buff, count, datatype, root, comm, request, m->prev_ibcast_module);
    }
    pc_ibcast_t *r = OBJ_NEW(pc_ibcast_t);
    if (r == NULL) return OMPI_ERR_OUT_OF_RESOURCE;
    OMPI_REQUEST_INIT(&r->super.super, false);
    r->super.super.req_type = OMPI_REQUEST_COLL;
    r->super.super.req_state = OMPI_REQUEST_ACTIVE;
    r->super.super.req_free = pc_ibcast_free;
    r->super.super.req_cancel = pc_ibcast_cancel;
    r->super.super.req_mpi_object.comm = comm;
    r->super.super.req_status = ompi_status_empty;
    r->m = m;
    r->buff = buff;
    r->count = count;
    r->datatype = datatype;
    r->bytes = bytes;
    r->unpack = false;
    char *data = (char *)buff + lb;
    if (!ompi_datatype_is_contiguous_memory_layout(datatype, count)) {
        /* Layouts may differ between ranks: pack, so every rank takes the same path. */
        r->packed = malloc(bytes > 0 ? bytes : 1);
        int position = 0;
        if (r->packed == NULL ||
            (ompi_comm_rank(comm) == root &&
             (MPI_Pack(buff, count, datatype, r->packed, (int)bytes, &position, comm) != MPI_SUCCESS ||
              (size_t)position != bytes))) {
            free(r->packed);
            r->packed = NULL;
            OBJ_RELEASE(r);
            m->failed = true;
            return OMPI_ERROR;
        }
        r->unpack = ompi_comm_rank(comm) != root;
        data = r->packed;
    }
    pipecast_result rc = pipecast_ibcast_bytes(m->pc, data, bytes, root, &r->pr);
    if (rc != PIPECAST_OK) {
        char detail[512];
        pipecast_last_error(detail, sizeof detail);
        fprintf(stderr, "coll:pipecast: rank %d comm %s: nonblocking broadcast failed: %s (%s)\n",
                ompi_comm_rank(comm), comm->c_name, pipecast_strerror(rc), detail);
        m->failed = true;
        free(r->packed);
        r->packed = NULL;
        OBJ_RELEASE(r);
        return OMPI_ERROR;
    }
    m->handled++;
    OPAL_THREAD_LOCK(&pending_lock);
    if (!progress_registered) {
        opal_progress_register(pc_progress);
        progress_registered = true;
    }
    r->next = (pc_ibcast_t *)pending;
    pending = (struct pc_ibcast_s *)r;
    OPAL_THREAD_UNLOCK(&pending_lock);
    *request = &r->super.super;
    return OMPI_SUCCESS;
}

static mca_coll_base_module_t *pipecast_comm_query(struct ompi_communicator_t *comm, int *priority)
{
    if (OMPI_COMM_IS_INTER(comm) || ompi_comm_size(comm) < 2 || C->priority < 0) return NULL;
    mca_coll_pipecast_module_t *m = OBJ_NEW(mca_coll_pipecast_module_t);
    if (m == NULL) return NULL;
    *priority = C->priority;
    m->super.coll_module_enable = pipecast_module_enable;
    m->super.coll_bcast = pipecast_bcast;
    m->super.coll_ibcast = pipecast_ibcast;
    say(1, "rank %d comm %s: selected with priority %d", ompi_comm_rank(comm), comm->c_name,
        C->priority);
    return &m->super;
}
