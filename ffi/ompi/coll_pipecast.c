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
 * One engine per process (pipecast_glue.h): WORLD's first MPI_Bcast or MPI_Barrier makes it,
 * and every communicator made after that is a view of it named by Open MPI's context id, so
 * MPI_Ibcast (coll_ibcast) takes pipecast's path from its first call there; elsewhere once an
 * MPI_Bcast set the communicator up. Its requests are completed from opal_progress (see
 * pipecast_ibcast).
 *
 * One source for Open MPI 4.1 (coll API 2.0.0) and 5.0 (coll API 2.4.0): the release comes from
 * the headers it is compiled against (OMPI_MAJOR_VERSION); `make -C ffi MPICC=…/bin/mpicc`
 * builds it for that install. What decides pipecast-or-Open-MPI per broadcast, the settings
 * agreement and the point-to-point tree loop are shared with the LD_PRELOAD shim
 * (../common/pipecast_glue.c).
 */
#include "ompi_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
#include "opal/util/output.h"
#if OMPI_MAJOR_VERSION >= 5
#include "opal/mca/threads/mutex.h"
#define PIPECAST_COLL_BASE_VERSION MCA_COLL_BASE_VERSION_2_4_0
#elif OMPI_MAJOR_VERSION == 4
#include "opal/threads/mutex.h"
#define PIPECAST_COLL_BASE_VERSION MCA_COLL_BASE_VERSION_2_0_0
#else
#error "the pipecast coll component is written for Open MPI 4.1 and 5.0"
#endif

#include "pipecast.h"
#include "pipecast_glue.h"

/* pipecast's release, the component's version in ompi_info (the Makefile passes it). */
#ifndef PIPECAST_VERSION_MAJOR
#define PIPECAST_VERSION_MAJOR 0
#define PIPECAST_VERSION_MINOR 0
#define PIPECAST_VERSION_RELEASE 0
#endif

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
    mca_coll_base_component_t super;
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
    char *host_min_bytes;
    char *shm;
    int poll_us;
    int window;
    char *log;
    int verbose;
    char *built_for; /* read-only: pipecast's release and the Open MPI it was built for */
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
    mca_coll_base_module_allreduce_fn_t prev_allreduce; /* the settings agreement's */
    mca_coll_base_module_t *prev_allreduce_module;
    /* MPI_COMM_WORLD only: its first MPI_Barrier makes the process's engine (pcg_base_setup). */
    mca_coll_base_module_barrier_fn_t prev_barrier;
    mca_coll_base_module_t *prev_barrier_module;
    struct ompi_communicator_t *comm;
    pcg_comm g; /* pipecast's communicator and what the glue decided (pipecast_glue.h) */
} mca_coll_pipecast_module_t;

static int pipecast_register(void);
static int pipecast_open(void);
static int pipecast_close(void);
static int pipecast_init_query(bool enable_progress_threads, bool enable_mpi_threads);
static mca_coll_base_module_t *pipecast_comm_query(struct ompi_communicator_t *comm, int *priority);

mca_coll_pipecast_component_t mca_coll_pipecast_component = {
    .super = {
        .collm_version = {
            PIPECAST_COLL_BASE_VERSION,
            .mca_component_name = "pipecast",
            MCA_BASE_MAKE_VERSION(component, PIPECAST_VERSION_MAJOR, PIPECAST_VERSION_MINOR,
                                  PIPECAST_VERSION_RELEASE),
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

/* A message at verbose `level` and above, prefixed "coll:pipecast: " (the glue's pcg_say). */
#define say(level, ...) \
    pcg_say(&(pcg_host){.who = "coll:pipecast", .verbose = C->verbose}, (level), __VA_ARGS__)

/* Open MPI's levels: 1-3 are the user's (1 basic, 2 detail, 3 all), 9 the developer's;
 * `ompi_info --param coll pipecast` shows level 1, `--level 3` all of ours. */
static void reg_int(const char *name, int level, const char *help, int *store, int dflt)
{
    *store = dflt;
    (void)mca_base_component_var_register(&C->super.collm_version, name, help, MCA_BASE_VAR_TYPE_INT,
                                          NULL, 0, 0, (mca_base_var_info_lvl_t)(OPAL_INFO_LVL_1 + level - 1),
                                          MCA_BASE_VAR_SCOPE_READONLY, store);
}

static void reg_str(const char *name, int level, const char *help, char **store, const char *dflt)
{
    *store = (char *)dflt;
    (void)mca_base_component_var_register(&C->super.collm_version, name, help,
                                          MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0,
                                          (mca_base_var_info_lvl_t)(OPAL_INFO_LVL_1 + level - 1),
                                          MCA_BASE_VAR_SCOPE_READONLY, store);
}

static int pipecast_register(void)
{
    static char built_for[128];
    snprintf(built_for, sizeof built_for, "pipecast %d.%d.%d for Open MPI %d.%d.%d",
             PIPECAST_VERSION_MAJOR, PIPECAST_VERSION_MINOR, PIPECAST_VERSION_RELEASE,
             OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
    C->built_for = built_for;
    (void)mca_base_component_var_register(&C->super.collm_version, "built_for",
                                          "The pipecast release of this component and the Open MPI "
                                          "release it was built for (read-only; it disables itself "
                                          "under any other)",
                                          MCA_BASE_VAR_TYPE_STRING, NULL, 0,
                                          MCA_BASE_VAR_FLAG_DEFAULT_ONLY, OPAL_INFO_LVL_1,
                                          MCA_BASE_VAR_SCOPE_CONSTANT, &C->built_for);
    reg_int("priority", 2, "Priority of the pipecast coll component (tuned is 30, han 35)",
            &C->priority, 40);
    reg_int("min_bytes", 1, "Broadcasts smaller than this go to the previous module",
            &C->min_bytes, 65536);
    reg_int("pml_below", 3,
            "Broadcasts from min_bytes up to (not including) this size travel pipecast's tree "
            "(single-lane, contention-free) over Open MPI's own point-to-point layer instead of "
            "pipecast's transport: lower latency per segment for mid-size messages (0: never)",
            &C->pml_below, 524288);
    reg_int("pml_segment_bytes", 3,
            "Segment size on the point-to-point path (0: pipecast's model, whose profiles do not "
            "know Open MPI's per-message cost; 16 KiB measured best on the lab, "
            "docs/results-ompi.md)",
            &C->pml_segment_bytes, 16384);
    reg_int("pml_window", 3,
            "Receives posted ahead, and sends in flight per child, on the point-to-point path "
            "(1-16)",
            &C->pml_window, 4);
    reg_str("transport", 1, "Transport: tcp, raweth, raweth:IFACE, verbs or auto (verbs where every rank has an "
            "RDMA device, else raweth where every rank can, else tcp; verbose 1 says why a faster one "
            "was not taken); empty: PIPECAST_TRANSPORT, else tcp",
            &C->transport, "");
    reg_str("verbs_device", 2, "RDMA device of the verbs transport, e.g. mlx5_0 (empty: PIPECAST_VERBS_DEVICE, "
            "else the first device)",
            &C->verbs_device, "");
    reg_int("verbs_port", 3, "Port of the RDMA device (0: PIPECAST_VERBS_PORT, else 1)", &C->verbs_port, 0);
    reg_int("verbs_gid_index", 3, "GID table index of the RDMA port: on RoCE v2 the entry of the wanted "
            "address and RoCE version, see show_gids (-1: PIPECAST_VERBS_GID_INDEX, else 0)",
            &C->verbs_gid_index, -1);
    reg_int("verbs_max_qps", 3, "Queue pairs a rank of the verbs transport keeps before it closes idle "
            "ones, 1-2048; sizes its completion queue; the same at every rank "
            "(0: PIPECAST_VERBS_MAX_QPS, else 64)",
            &C->verbs_max_qps, 0);
    reg_str("tree", 2, "Tree: auto, linear, binary, kary:K, kbinomial, multilane, flat, binomial, ...",
            &C->tree, "auto");
    reg_int("segment_bytes", 2, "Segment size in bytes (0: chosen by the cost model)", &C->segment_bytes, 0);
    reg_str("topology", 1, "Topology file mapping ranks to machines (empty: all ranks on one switch)",
            &C->topology, "");
    reg_str("profile", 1, "Calibration profile (pipecast calibrate) or 100mbit/1gbit (empty: 1gbit)",
            &C->profile, "");
    reg_str("if_include", 1,
            "Where pipecast listens: interface names or IPv4 subnets, comma-separated, like "
            "btl_tcp_if_include (empty: PIPECAST_IFACE, else the first up non-loopback interface "
            "not named mgmt*; PIPECAST_IP overrides)",
            &C->if_include, "");
    reg_int("timeout_ms", 2, "How long a peer may show no sign of life (process dead, connection closed, "
            "no heartbeat answer) before a broadcast waiting for it fails; a late rank is waited for "
            "(0: PIPECAST_TIMEOUT_MS, else 5000)",
            &C->timeout_ms, 0);
    reg_str("host_min_bytes", 2,
            "With every rank on one host, broadcasts below this many bytes (K/M suffixes) go to "
            "the previous module, where pipecast cannot win (empty: PIPECAST_HOST_MIN_BYTES, else "
            "4M; two and three ranks defer below 32M and 64M)",
            &C->host_min_bytes, "");
    reg_str("shm", 2, "How ranks on one host move segments: auto, cma, ring or off (empty: "
            "PIPECAST_SHM, else auto)", &C->shm, "");
    reg_int("poll_us", 3, "How long a waiting thread polls before it sleeps, 0-1000000 "
            "microseconds (-1: PIPECAST_POLL_US, else pipecast's default)", &C->poll_us, -1);
    reg_int("window", 3, "Most segments in flight to one child on pipecast's transport "
            "(0: PIPECAST_WINDOW, else pipecast's default)", &C->window, 0);
    reg_str("log", 3, "pipecast's log filter on stderr, as PIPECAST_LOG: info, debug, "
            "pipecast=trace, ... (empty: PIPECAST_LOG, else none)", &C->log, "");
    reg_int("verbose", 1, "Verbosity: 0 silent, 1 selection and summary, 2 every broadcast",
            &C->verbose, 0);
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
    /* pipecast reads its log filter from PIPECAST_LOG when the first communicator is made. */
    if (C->log != NULL && C->log[0] != '\0') setenv("PIPECAST_LOG", C->log, 1);
    return OMPI_SUCCESS;
}

static int pipecast_close(void)
{
    pc_progress_stop();
    pcg_base_free();
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
    m->prev_allreduce = NULL;
    m->prev_allreduce_module = NULL;
    m->prev_barrier = NULL;
    m->prev_barrier_module = NULL;
    m->comm = NULL;
    pcg_comm_init(&m->g);
}

static void module_destruct(mca_coll_pipecast_module_t *m)
{
    if (m->comm != NULL) {
        say(1, "rank %d comm %s: %lu broadcasts by pipecast (%lu of them over Open MPI's "
            "point-to-point, %lu nonblocking), %lu by the previous module",
            ompi_comm_rank(m->comm), m->comm->c_name, m->g.handled, m->g.over_p2p,
            m->g.handled_nb, m->g.fallback);
    }
    pcg_comm_free(&m->g);
    if (m->prev_bcast_module != NULL) OBJ_RELEASE(m->prev_bcast_module);
    if (m->prev_allgather_module != NULL) OBJ_RELEASE(m->prev_allgather_module);
    if (m->prev_ibcast_module != NULL) OBJ_RELEASE(m->prev_ibcast_module);
    if (m->prev_allreduce_module != NULL) OBJ_RELEASE(m->prev_allreduce_module);
    if (m->prev_barrier_module != NULL) OBJ_RELEASE(m->prev_barrier_module);
}

OBJ_CLASS_INSTANCE(mca_coll_pipecast_module_t, mca_coll_base_module_t, module_construct,
                   module_destruct);

static int pipecast_module_enable(mca_coll_base_module_t *module, struct ompi_communicator_t *comm)
{
    mca_coll_pipecast_module_t *m = (mca_coll_pipecast_module_t *)module;
    /* Nothing blocking here: see the file comment. */
    if (comm->c_coll->coll_bcast_module == NULL || comm->c_coll->coll_allgather_module == NULL ||
        comm->c_coll->coll_allreduce_module == NULL) {
        fprintf(stderr, "coll:pipecast: no previous bcast/allgather/allreduce module on %s\n",
                comm->c_name);
        return OMPI_ERR_NOT_FOUND;
    }
    m->prev_bcast = comm->c_coll->coll_bcast;
    m->prev_bcast_module = comm->c_coll->coll_bcast_module;
    OBJ_RETAIN(m->prev_bcast_module);
    m->prev_allgather = comm->c_coll->coll_allgather;
    m->prev_allgather_module = comm->c_coll->coll_allgather_module;
    OBJ_RETAIN(m->prev_allgather_module);
    m->prev_allreduce = comm->c_coll->coll_allreduce;
    m->prev_allreduce_module = comm->c_coll->coll_allreduce_module;
    OBJ_RETAIN(m->prev_allreduce_module);
    if (comm->c_coll->coll_ibcast_module != NULL) {
        m->prev_ibcast = comm->c_coll->coll_ibcast;
        m->prev_ibcast_module = comm->c_coll->coll_ibcast_module;
        OBJ_RETAIN(m->prev_ibcast_module);
    } else {
        /* Nothing to hand the rest to: leave MPI_Ibcast alone (the pointers are copied into
         * comm->c_coll after enable). */
        m->super.coll_ibcast = NULL;
    }
    if (m->super.coll_barrier != NULL) {
        if (comm->c_coll->coll_barrier_module == NULL) {
            m->super.coll_barrier = NULL;
        } else {
            m->prev_barrier = comm->c_coll->coll_barrier;
            m->prev_barrier_module = comm->c_coll->coll_barrier_module;
            OBJ_RETAIN(m->prev_barrier_module);
        }
    }
    m->comm = comm;
    /* Whether the process's engine is ready as this communicator is made: then it is a view
     * of it from its first broadcast (pipecast_glue.h, "One engine per process"). */
    pcg_comm_made(&m->g);
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

/* The settings agreement's allreduce (pcg_agree), over the saved allreduce. */
static int allreduce_max_through_prev(void *user, const int64_t *in, int64_t *out, int n)
{
    mca_coll_pipecast_module_t *m = user;
    int rc = m->prev_allreduce((void *)in, out, n, MPI_INT64_T, MPI_MAX, m->comm,
                               m->prev_allreduce_module);
    return rc == OMPI_SUCCESS ? 0 : -1;
}

/* Appends PIPECAST_NAME=value to the settings text (nothing when value is NULL or empty). */
static void add_setting(char *text, size_t cap, int *n, const char *name, const char *value)
{
    if (value == NULL || value[0] == '\0' || *n < 0 || (size_t)*n >= cap) return;
    *n += snprintf(text + *n, cap - (size_t)*n, "%s=%s\n", name, value);
}

static void add_int_setting(char *text, size_t cap, int *n, const char *name, int value)
{
    char v[24];
    snprintf(v, sizeof v, "%d", value);
    add_setting(text, cap, n, name, v);
}

/* pipecast_comm_create (pcg_create_fn): set MCA parameters override the PIPECAST_*
 * environment; empty ones leave it. Collective and agreed: every rank gets the same result. */
static pipecast_result create_pipecast(void *user, int join, const pipecast_comm *engine,
                                       uint32_t id, pipecast_comm **out)
{
    mca_coll_pipecast_module_t *m = user;
    pipecast_config cfg;
    pipecast_config_default(&cfg);
    cfg.transport = (C->transport != NULL && C->transport[0] != '\0') ? C->transport : NULL;
    cfg.tree = (C->tree != NULL && C->tree[0] != '\0' && strcmp(C->tree, "auto") != 0) ? C->tree : NULL;
    cfg.segment_bytes = C->segment_bytes > 0 ? (uint64_t)C->segment_bytes : 0;
    cfg.topology = (C->topology != NULL && C->topology[0] != '\0') ? C->topology : NULL;
    cfg.timeout_ms = C->timeout_ms > 0 ? (uint32_t)C->timeout_ms : 0;
    cfg.profile = (C->profile != NULL && C->profile[0] != '\0') ? C->profile : NULL;
    cfg.iface = (C->if_include != NULL && C->if_include[0] != '\0') ? C->if_include : NULL;
    /* Settings the config struct has no field for, as PIPECAST_NAME=value lines (pipecast
     * parses and checks them: a bad value, or a device name with a newline or ';' in it,
     * makes pipecast decline at every rank, saying why). */
    char settings[1024];
    int n = 0;
    settings[0] = '\0';
    add_setting(settings, sizeof settings, &n, "PIPECAST_VERBS_DEVICE", C->verbs_device);
    if (C->verbs_port > 0)
        add_int_setting(settings, sizeof settings, &n, "PIPECAST_VERBS_PORT", C->verbs_port);
    if (C->verbs_gid_index >= 0)
        add_int_setting(settings, sizeof settings, &n, "PIPECAST_VERBS_GID_INDEX", C->verbs_gid_index);
    if (C->verbs_max_qps != 0)
        add_int_setting(settings, sizeof settings, &n, "PIPECAST_VERBS_MAX_QPS", C->verbs_max_qps);
    add_setting(settings, sizeof settings, &n, "PIPECAST_HOST_MIN_BYTES", C->host_min_bytes);
    add_setting(settings, sizeof settings, &n, "PIPECAST_SHM", C->shm);
    if (C->poll_us >= 0 || C->poll_us < -1)
        add_int_setting(settings, sizeof settings, &n, "PIPECAST_POLL_US", C->poll_us);
    if (C->window != 0) add_int_setting(settings, sizeof settings, &n, "PIPECAST_WINDOW", C->window);
    /* Too long to pass whole: an unknown name makes pipecast decline everywhere, saying so. */
    if (n < 0 || (size_t)n >= sizeof settings)
        snprintf(settings, sizeof settings, "PIPECAST_MCA_SETTINGS_TOO_LONG=1");
    if (join)
        return pipecast_comm_create_on(engine, id, ompi_comm_rank(m->comm),
                                       ompi_comm_size(m->comm), allgather_through_prev, m, &cfg,
                                       settings[0] != '\0' ? settings : NULL, out);
    return pipecast_comm_create_with(ompi_comm_rank(m->comm), ompi_comm_size(m->comm),
                                     allgather_through_prev, m, &cfg,
                                     settings[0] != '\0' ? settings : NULL, out);
}

/* The glue's settings, from the MCA parameters. */
static pcg_settings settings_of(void)
{
    pcg_settings s = {.min_bytes = C->min_bytes,
                      .pml_below = C->pml_below,
                      .pml_segment = C->pml_segment_bytes,
                      .pml_window = C->pml_window};
    return s;
}

/* The communicator's ranks as MPI_COMM_WORLD ranks (pcg_host.world_ranks). Local. */
static int world_ranks_of(void *user, int *members)
{
    mca_coll_pipecast_module_t *m = user;
    int n = ompi_comm_size(m->comm);
    int *ranks = n > 0 ? malloc(sizeof *ranks * (size_t)n) : NULL;
    if (ranks == NULL) return -1;
    for (int i = 0; i < n; i++) ranks[i] = i;
    int rc = ompi_group_translate_ranks(m->comm->c_local_group, n, ranks,
                                        ompi_mpi_comm_world.comm.c_local_group, members);
    free(ranks);
    if (rc != OMPI_SUCCESS) return -1;
    for (int i = 0; i < n; i++)
        if (members[i] == MPI_UNDEFINED || members[i] < 0) return -1;
    return 0;
}

/* Open MPI's own id for the communicator, when it is the same at every member: 4.1's context
 * id always, 5.0's index only where it is global (with extended context ids it is local). */
static int64_t mpi_id_of(struct ompi_communicator_t *comm)
{
#if OMPI_MAJOR_VERSION >= 5
    return OMPI_COMM_IS_GLOBAL_INDEX(comm) ? (int64_t)comm->c_index : -1;
#else
    return (int64_t)comm->c_contextid;
#endif
}

static pcg_host host_of(mca_coll_pipecast_module_t *m)
{
    pcg_host h = {.who = "coll:pipecast",
                  .comm_name = m->comm->c_name,
                  .verbose = C->verbose,
                  .rank = ompi_comm_rank(m->comm),
                  .size = ompi_comm_size(m->comm),
                  .allreduce_max = allreduce_max_through_prev,
                  .create = create_pipecast,
                  .user = m,
                  .world_ranks = world_ranks_of,
                  .mpi_id = mpi_id_of(m->comm)};
    return h;
}

/* MPI_COMM_WORLD's first MPI_Bcast or MPI_Barrier makes the process's engine, every process
 * alike (pcg_base_setup); MPI_COMM_WORLD is a view of it from then on. */
static void world_engine(mca_coll_pipecast_module_t *m)
{
    if (m->comm != &ompi_mpi_comm_world.comm || m->g.agreed || m->g.base_at_creation) return;
    pcg_settings s = settings_of();
    pcg_host h = host_of(m);
    m->g.base_at_creation = pcg_base_setup(&s, PCG_VOTE_OK, &h);
    if (!m->g.base_at_creation) m->g.agreed = m->g.disabled = 1;
}

static int pipecast_barrier(struct ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_pipecast_module_t *m = (mca_coll_pipecast_module_t *)module;
    world_engine(m);
    return m->prev_barrier(comm, m->prev_barrier_module);
}

/* The point-to-point path's calls (pcg_p2p_bcast) over Open MPI's PML, with the broadcast's
 * own tag: collectives on a communicator are ordered, so nothing else is matched. */
static void pml_null(void *req)
{
    *(ompi_request_t **)req = MPI_REQUEST_NULL;
}

static int pml_irecv(void *user, char *buf, int len, int peer, void *req)
{
    return MCA_PML_CALL(irecv(buf, len, MPI_BYTE, peer, MCA_COLL_BASE_TAG_BCAST,
                              (struct ompi_communicator_t *)user, (ompi_request_t **)req));
}

static int pml_isend(void *user, char *buf, int len, int peer, void *req)
{
    return MCA_PML_CALL(isend(buf, len, MPI_BYTE, peer, MCA_COLL_BASE_TAG_BCAST,
                              MCA_PML_BASE_SEND_STANDARD, (struct ompi_communicator_t *)user,
                              (ompi_request_t **)req));
}

static int pml_waitall(void *user, int n, void *reqs)
{
    (void)user;
    return n > 0 ? ompi_request_wait_all((size_t)n, (ompi_request_t **)reqs, MPI_STATUSES_IGNORE)
                 : OMPI_SUCCESS;
}

/* Broadcast of a mid-size message: pipecast plans the tree, Open MPI's PML moves the segments.
 * Returns a pipecast result for planning problems (every rank sees the same) and stores the
 * PML's code in *ompi_rc. */
static pipecast_result bcast_over_pml(mca_coll_pipecast_module_t *m, char *buf, size_t bytes,
                                      int root, int *ompi_rc)
{
    pcg_settings s = settings_of();
    pcg_p2p_ops ops = {.req_size = sizeof(ompi_request_t *),
                       .set_null = pml_null,
                       .irecv = pml_irecv,
                       .isend = pml_isend,
                       .waitall = pml_waitall,
                       .no_memory = OMPI_ERR_OUT_OF_RESOURCE,
                       .user = m->comm};
    return pcg_p2p_bcast(&m->g, &s, &ops, buf, bytes, root, ompi_comm_size(m->comm), ompi_rc);
}

/* A pipecast broadcast that failed (a peer is gone, the ranks disagree on it, its data could
 * not be packed): this communicator's later broadcasts fail too, and the error goes to the
 * communicator's error handler (MPI_Bcast/MPI_Ibcast pass the code to it; by default it ends
 * the job). Never a fallback: other ranks may have finished this broadcast through pipecast. */
static int broadcast_failed(mca_coll_pipecast_module_t *m, const char *what, pipecast_result rc)
{
    char detail[512] = "";
    if (rc != PIPECAST_OK) pipecast_last_error(detail, sizeof detail);
    fprintf(stderr, "coll:pipecast: rank %d comm %s: %s failed: %s (%s)\n", ompi_comm_rank(m->comm),
            m->comm->c_name, what, rc != PIPECAST_OK ? pipecast_strerror(rc) : "packing its data",
            detail);
    m->g.failed = 1;
    return OMPI_ERROR;
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
    if (OMPI_COMM_IS_INTER(comm) || ompi_comm_size(comm) < 2) {
        m->g.fallback++;
        return m->prev_bcast(buff, count, datatype, root, comm, m->prev_bcast_module);
    }
    /* Every rank computes the same answer from the same (type signature size, comm) and the
     * agreed settings (the first broadcast of any size agrees on them). A non-contiguous
     * datatype is packed and unpacked around the broadcast, so layouts that differ between
     * ranks (legal in MPI) still take one path everywhere. */
    world_engine(m);
    pcg_settings s = settings_of();
    pcg_host h = host_of(m);
    pcg_path path = pcg_decide(&m->g, &s, &h, bytes, 1);
    if (path == PCG_FAILED) return OMPI_ERROR; /* an earlier one failed: never go on alone */
    if (path == PCG_MPI) return m->prev_bcast(buff, count, datatype, root, comm, m->prev_bcast_module);
    bool contiguous = ompi_datatype_is_contiguous_memory_layout(datatype, count);
    char *data = (char *)buff + lb;
    char *packed = NULL;
    if (!contiguous) {
        packed = malloc(bytes > 0 ? bytes : 1);
        int position = 0;
        if (packed == NULL ||
            (ompi_comm_rank(comm) == root &&
             (MPI_Pack(buff, count, datatype, packed, (int)bytes, &position, comm) != MPI_SUCCESS ||
              (size_t)position != bytes))) {
            free(packed);
            return broadcast_failed(m, "broadcast", PIPECAST_OK);
        }
        data = packed;
    }
    int ompi_rc = OMPI_SUCCESS;
    pipecast_result rc;
    if (path == PCG_P2P) {
        rc = bcast_over_pml(m, data, bytes, root, &ompi_rc);
        if (rc == PIPECAST_OK) {
            m->g.handled++;
            m->g.over_p2p++;
            say(2, "rank %d comm %s: bcast %zu bytes from %d along pipecast's tree over the PML",
                ompi_comm_rank(comm), comm->c_name, bytes, root);
        }
    } else {
        pipecast_request *pr = NULL;
        rc = pipecast_ibcast_bytes(m->g.pc, data, bytes, root, &pr);
        if (rc == PIPECAST_OK) rc = pipecast_wait_progressing(pr, drive_opal_progress, NULL);
        if (rc == PIPECAST_OK) {
            m->g.handled++;
            say(2, "rank %d comm %s: bcast %zu bytes from %d by pipecast", ompi_comm_rank(comm),
                comm->c_name, bytes, root);
        }
    }
    if (rc != PIPECAST_OK) {
        free(packed);
        return broadcast_failed(m, "broadcast", rc);
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
 * not ship (4.1 and 5.0 alike), so here it is field for field as in 4.1.4 and 5.0.7 (retain
 * writes 8-byte words right after the ompi_request_t; the release check at open refuses other
 * releases). */
typedef struct {
    ompi_request_t super;
    union {
        ompi_request_complete_fn_t req_complete_cb;
        ompi_request_free_fn_t req_free;
    } cb;
    void *req_complete_cb_data;
#if OMPI_MAJOR_VERSION == 4
    union {
        struct {
            void *first, *second;
        } pair;
    } data;
#else
    struct {
        union {
            struct {
                void *first, *second;
            } pair;
            struct {
                void *const *stypes, *const *rtypes;
                int scount, rcount;
            } vecs;
        } refcounted;
        void *release_arrays[7]; /* OMPI_REQ_NB_RELEASE_ARRAYS */
    } data;
#endif
} ompi_coll_base_nbc_request_t;
OMPI_DECLSPEC extern opal_class_t ompi_coll_base_nbc_request_t_class;
#if OMPI_MAJOR_VERSION == 4
_Static_assert(sizeof(ompi_coll_base_nbc_request_t) == sizeof(ompi_request_t) + 32,
               "ompi_coll_base_nbc_request_t as in Open MPI 4.1");
#else
_Static_assert(sizeof(ompi_coll_base_nbc_request_t) == sizeof(ompi_request_t) + 96,
               "ompi_coll_base_nbc_request_t as in Open MPI 5.0");
#endif

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

/* Naps while MPI waits. Open MPI's MPI_Wait on a nonblocking broadcast spins on
 * opal_progress (yielding, never sleeping), so with ranks sharing cores the spinning ranks
 * starve the threads that move the bytes: on the 16-machine lab (16 processes, 2 cores) a
 * multicast root's progress thread was woken up to 108 ms late and osu_ibcast took 2.3-5.5 x
 * osu_bcast's time (docs/multicast.md, "Checked with OSU under loss"). As pipecast's blocking
 * wait does (pipecast_wait_progressing): after NAP_AFTER calls in a row that found broadcasts
 * pending and none finished, with this thread doing nothing else in between (under
 * NAP_BUSY_NS of its CPU time since the last call returned: spinning in a wait, not
 * computing between MPI_Test calls), each call waits for the oldest broadcast up to
 * NAP_FIRST_US, doubling up to NAP_LONGEST_US; its end wakes it at once. Only where MPI runs
 * one thread (opal_using_threads() false): elsewhere another thread may wait for the lock. */
#define NAP_AFTER 64
#define NAP_FIRST_US 20u
#define NAP_LONGEST_US 500u
#define NAP_BUSY_NS 20000LL
static unsigned idle_calls = 0;
static unsigned nap_us = 0;
static long long cpu_at_return = -1;

/* This thread's CPU time, ns (-1 if unknown). */
static long long thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* How long this call to pc_progress may wait for the oldest broadcast, µs (0: not at all). */
static unsigned nap_now(void)
{
    long long now = thread_cpu_ns();
    if (now < 0 || cpu_at_return < 0 || now - cpu_at_return > NAP_BUSY_NS) {
        idle_calls = 0; /* the caller did something else: not spinning in a wait */
        nap_us = 0;
        return 0;
    }
    if (++idle_calls <= NAP_AFTER) return 0;
    nap_us = nap_us == 0 ? NAP_FIRST_US : (nap_us * 2 > NAP_LONGEST_US ? NAP_LONGEST_US : nap_us * 2);
    return nap_us;
}

/* Completes the pipecast broadcasts that finished: called by opal_progress, so always on a
 * thread inside MPI. The finished ones leave the list under the lock and are completed after
 * it (completion runs callbacks, which must not find the lock held). The list is newest
 * first: a nap (above) waits on its last, the oldest. */
static int pc_progress(void)
{
    if (pending == NULL) return 0;
    bool single = !opal_using_threads();
    unsigned nap = single ? nap_now() : 0;
    pc_ibcast_t *finished = NULL;
    OPAL_THREAD_LOCK(&pending_lock);
    pc_ibcast_t **at = (pc_ibcast_t **)&pending;
    while (*at != NULL) {
        pc_ibcast_t *r = *at;
        int done = 0;
        if (nap != 0 && r->next == NULL && finished == NULL)
            r->result = pipecast_test_within(r->pr, nap, &done);
        else
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
            (void)broadcast_failed(r->m, "nonblocking broadcast", r->result);
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
    if (single && completed > 0) {
        idle_calls = 0;
        nap_us = 0;
    }
    if (single) cpu_at_return = thread_cpu_ns();
    return completed;
}

/* Before the component is unloaded: no progress callback may point into it. */
static void pc_progress_stop(void)
{
    if (progress_registered) opal_progress_unregister(pc_progress);
    progress_registered = false;
}

/* MPI_Ibcast. Open MPI also calls it from inside its progress engine (communicator creation
 * agrees on a context id with ibcasts), where nothing may block: so an ibcast never runs a
 * collective. It takes pipecast's path on a view of the process's engine made with no
 * agreement (the engine was ready when the communicator was made, and Open MPI's context id
 * is the same at every member: 4.1 always, 5.0 where the index is global), or on a
 * communicator that an earlier MPI_Bcast set up — the same at every rank, since every rank
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
    pcg_path path = PCG_MPI;
    if (!OMPI_COMM_IS_INTER(comm) && ompi_comm_size(comm) >= 2) {
        pcg_settings s = settings_of();
        pcg_host h = host_of(m);
        path = pcg_decide(&m->g, &s, &h, bytes, 0);
    } else {
        m->g.fallback++;
    }
    if (path == PCG_FAILED) return OMPI_ERROR;
    if (path != PCG_PIPECAST) {
        if (m->prev_ibcast == NULL) return OMPI_ERR_NOT_SUPPORTED;
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
            return broadcast_failed(m, "nonblocking broadcast", PIPECAST_OK);
        }
        r->unpack = ompi_comm_rank(comm) != root;
        data = r->packed;
    }
    pipecast_result rc = pipecast_ibcast_bytes(m->g.pc, data, bytes, root, &r->pr);
    if (rc != PIPECAST_OK) {
        free(r->packed);
        r->packed = NULL;
        OBJ_RELEASE(r);
        return broadcast_failed(m, "nonblocking broadcast", rc);
    }
    m->g.handled++;
    m->g.handled_nb++;
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
    if (comm == &ompi_mpi_comm_world.comm) m->super.coll_barrier = pipecast_barrier;
    say(1, "rank %d comm %s: selected with priority %d", ompi_comm_rank(comm), comm->c_name,
        C->priority);
    return &m->super;
}
