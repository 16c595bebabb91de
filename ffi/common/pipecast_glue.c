/* The MPI glue's shared part: see pipecast_glue.h. */
#include "pipecast_glue.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void pcg_say(const pcg_host *h, int level, const char *fmt, ...)
{
    if (h->verbose < level) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* The whole message in one write: glibc (2.37 and later) prints to an unbuffered stderr
     * 128 bytes per write, and another rank's message forwarded between two of them splits
     * this one's line (Open MPI 5's mpirun), which the tests' summary reader then misses. */
    char out[1280];
    int n = h->comm_name != NULL
                ? snprintf(out, sizeof out, "%s: comm %s: %s\n", h->who, h->comm_name, line)
                : snprintf(out, sizeof out, "%s: %s\n", h->who, line);
    if (n < 0) return;
    if ((size_t)n >= sizeof out) {
        n = (int)sizeof out - 1;
        out[n - 1] = '\n';
    }
    fflush(stderr);
    if (write(2, out, (size_t)n) < 0) return;
}

void pcg_comm_init(pcg_comm *c)
{
    memset(c, 0, sizeof *c);
}

/* ---- The process's engine (pipecast_glue.h, "One engine per process") ---- */

enum { BASE_NONE = 0, BASE_READY = 1, BASE_OFF = 2 };

/* Ids the MPI gives (context ids + 1) are below this; ids the glue agrees on are from it. */
#define AGREED_IDS 0x80000000u

static struct {
    int state;         /* BASE_*: written once, by the one thread in MPI_COMM_WORLD's collective */
    pipecast_comm *pc; /* the engine: lives until the process ends */
    uint32_t next_id;  /* above every agreed id this process took (atomic) */
} base = {BASE_NONE, NULL, AGREED_IDS};

static pthread_mutex_t view_lock = PTHREAD_MUTEX_INITIALIZER;

int pcg_base_ready(void)
{
    return __atomic_load_n(&base.state, __ATOMIC_ACQUIRE) == BASE_READY;
}

void pcg_base_free(void)
{
    if (base.pc != NULL) pipecast_comm_free(base.pc);
    base.pc = NULL;
    __atomic_store_n(&base.state, BASE_OFF, __ATOMIC_RELEASE);
}

void pcg_comm_made(pcg_comm *c)
{
    c->base_at_creation = pcg_base_ready();
}

uint32_t pcg_next_id(void)
{
    return __atomic_load_n(&base.next_id, __ATOMIC_RELAXED);
}

/* Takes agreed id `id`: later proposals are above it. */
static void take_id(uint32_t id)
{
    uint32_t seen = __atomic_load_n(&base.next_id, __ATOMIC_RELAXED);
    while (seen <= id &&
           !__atomic_compare_exchange_n(&base.next_id, &seen, id + 1, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
}

void pcg_comm_free(pcg_comm *c)
{
    if (c->pc != NULL) pipecast_comm_free(c->pc);
    c->pc = NULL;
}

static const char *vote_reason(int64_t vote)
{
    switch (vote) {
    case PCG_VOTE_BAD_SETTING: return "has a glue setting that is unparsable or out of range";
    case PCG_VOTE_NO_MEMORY: return "could not allocate the glue's state (out of memory)";
    default: return "voted pipecast off";
    }
}

#define NSET 4
/* After the settings: whether some rank has no engine or lacks a member in it (1) or all have
 * (0); then the view id proposed (the highest wins: free at every rank). */
#define AT_VIEWS (1 + 2 * NSET)
#define NAGREE (AT_VIEWS + 2)

/* Whether every member of `c` is a process of this process's engine: this rank's answer. */
static int views_here(const pcg_host *h, int **members)
{
    *members = NULL;
    if (!pcg_base_ready() || h->world_ranks == NULL || h->size < 1) return 0;
    int *m = malloc(sizeof *m * (size_t)h->size);
    if (m == NULL) return 0;
    if (h->world_ranks(h->user, m) != 0) {
        free(m);
        return 0;
    }
    *members = m;
    return 1;
}

void pcg_agree(pcg_comm *c, const pcg_settings *mine, const pcg_host *h)
{
    static const char *const names[NSET] = {"min_bytes", "pml_below", "pml_segment", "pml_window"};
    const int64_t set[NSET] = {mine->min_bytes, mine->pml_below, mine->pml_segment,
                               mine->pml_window};
    /* One MAX-allreduce answers everything: the worst vote (with the highest rank casting it),
     * per setting its largest value and the negation of its smallest, whether every rank can
     * make a view, and the view id. Fixed size, on the stack: nothing here can fail before
     * the collective. */
    int64_t in[NAGREE], out[NAGREE];
    int vote = c->vote;
    if (vote == PCG_VOTE_OK && pipecast_glue_settings_check(mine) != PIPECAST_OK) {
        char why[256];
        pipecast_last_error(why, sizeof why);
        pcg_say(h, 1, "rank %d: %s: pipecast stays off (on every rank)", h->rank, why);
        vote = PCG_VOTE_BAD_SETTING;
    }
    in[0] = vote != PCG_VOTE_OK ? ((int64_t)vote << 32) | (int64_t)(uint32_t)h->rank : -1;
    for (int i = 0; i < NSET; i++) {
        int64_t v = set[i] < -INT64_MAX ? -INT64_MAX : set[i];
        in[1 + 2 * i] = v;
        in[2 + 2 * i] = -v;
    }
    int *members = NULL;
    in[AT_VIEWS] = views_here(h, &members) ? 0 : 1;
    free(members);
    in[AT_VIEWS + 1] = (int64_t)pcg_next_id();
    c->agreed = 1;
    if (h->allreduce_max(h->user, in, out, NAGREE) != 0) {
        /* Every rank calls the same allreduce: an error there is the MPI's own, and alike. */
        c->disabled = 1;
        if (h->rank == 0) pcg_say(h, 1, "the settings agreement failed: pipecast is off here");
        return;
    }
    if (out[0] >= 0) {
        c->disabled = 1;
        if (h->rank == 0)
            pcg_say(h, 1, "rank %lld %s: pipecast is off on this communicator at every rank",
                    (long long)(out[0] & 0xffffffff), vote_reason(out[0] >> 32));
        return;
    }
    for (int i = 0; i < NSET; i++) {
        if (out[1 + 2 * i] != -out[2 + 2 * i]) {
            c->disabled = 1;
            if (h->rank == 0)
                pcg_say(h, 1, "ranks differ in %s (from %lld to %lld; all of min_bytes/pml_below/"
                        "pml_segment/pml_window must match): pipecast is off on this "
                        "communicator at every rank",
                        names[i], (long long)-out[2 + 2 * i], (long long)out[1 + 2 * i]);
            return;
        }
    }
    if (out[AT_VIEWS] == 0 && out[AT_VIEWS + 1] >= (int64_t)AGREED_IDS &&
        out[AT_VIEWS + 1] <= (int64_t)UINT32_MAX - 1) {
        c->base_at_creation = 1; /* agreed: a view at every rank */
        if (!c->has_id) {
            c->has_id = 1;
            c->id = (uint32_t)out[AT_VIEWS + 1];
            take_id(c->id);
        }
    } else {
        /* Agreed: not a view at every rank. It joins the members' engines where all can take
         * it (pipecast_comm_create_on, at set_up), with this id unless it has one. */
        c->base_at_creation = 0;
        if (!c->has_id && out[AT_VIEWS + 1] >= (int64_t)AGREED_IDS &&
            out[AT_VIEWS + 1] <= (int64_t)UINT32_MAX - 1) {
            c->has_id = 1;
            c->id = (uint32_t)out[AT_VIEWS + 1];
            take_id(c->id);
        }
    }
}

int pcg_base_setup(const pcg_settings *s, int vote, const pcg_host *h)
{
    if (base.state != BASE_NONE) return base.state == BASE_READY;
    pcg_comm w;
    pcg_comm_init(&w);
    w.vote = vote;
    pcg_agree(&w, s, h);
    int state = BASE_OFF;
    if (!w.disabled) {
        pipecast_result rc = h->create(h->user, 0, NULL, 0, &base.pc);
        if (rc == PIPECAST_OK) {
            state = BASE_READY;
            char link[128];
            pipecast_comm_link(base.pc, link, sizeof link);
            pcg_say(h, 1, "pipecast ready over %s (rank %d of %d), one engine for every "
                    "communicator", link, h->rank, h->size);
            char why[512];
            if (h->rank == 0 && pipecast_comm_link_reason(base.pc, why, sizeof why) > 0)
                pcg_say(h, 1, "transport auto chose %s: %s", link, why);
        } else {
            base.pc = NULL;
            if (h->rank == 0) {
                char detail[512];
                pipecast_last_error(detail, sizeof detail);
                pcg_say(h, 1, "pipecast declined at every rank, the MPI's own broadcast runs: "
                        "%s (%s)", pipecast_strerror(rc), detail);
            }
        }
    }
    __atomic_store_n(&base.state, state, __ATOMIC_RELEASE);
    return state == BASE_READY;
}

int pcg_agree_id(pcg_comm *c, const pcg_host *h)
{
    /* The id proposed, and whether some rank votes against (no memory for its state). */
    int64_t in[2] = {(int64_t)pcg_next_id(), c->vote != PCG_VOTE_OK}, out[2] = {0, 1};
    if (h->allreduce_max(h->user, in, out, 2) != 0 || out[1] != 0 ||
        out[0] < (int64_t)AGREED_IDS || out[0] > (int64_t)UINT32_MAX - 1)
        return -1;
    c->has_id = 1;
    c->id = (uint32_t)out[0];
    take_id(c->id);
    return 0;
}

/* This rank's view of the engine for `c` (pipecast_comm_view). 0 when it has none: no id yet
 * (a nonblocking broadcast agrees none), or the members are not all the engine's. */
static int make_view(pcg_comm *c, const pcg_host *h, int blocking)
{
    if (!c->has_id) {
        if (h->mpi_id >= 0 && h->mpi_id + 1 < (int64_t)AGREED_IDS) {
            c->has_id = 1;
            c->id = (uint32_t)(h->mpi_id + 1);
        } else if (!blocking) {
            return 0;
        } else if (pcg_agree_id(c, h) != 0) {
            /* Only the id was missing (the engine was ready where `c` was made). */
            c->disabled = 1;
            return 0;
        }
    }
    int *members = NULL;
    if (!views_here(h, &members)) return 0;
    /* The engine's handle is shared: one thread at a time makes a view of it. */
    pthread_mutex_lock(&view_lock);
    pipecast_result rc = pipecast_comm_view(base.pc, c->id, h->size, members, &c->pc);
    pthread_mutex_unlock(&view_lock);
    free(members);
    if (rc != PIPECAST_OK) {
        /* Local (a duplicate id, no memory): never decided alone, so this broadcast fails. */
        char detail[512];
        pipecast_last_error(detail, sizeof detail);
        pcg_say(h, 0, "rank %d: no view of pipecast's engine (id %u): %s (%s)", h->rank, c->id,
                pipecast_strerror(rc), detail);
        c->pc = NULL;
        c->failed = 1;
        return 0;
    }
    pcg_say(h, 2, "rank %d: a view of pipecast's engine (id %u, %d ranks)", h->rank, c->id,
            h->size);
    return 1;
}

/* pipecast_comm_create at the first broadcast pipecast takes; agreed, so every rank gets the
 * same answer. */
static int set_up(pcg_comm *c, const pcg_host *h)
{
    /* On the process's engine when every member's can take it (a communicator with processes
     * of another job: spawn + merge, connect/accept), else one of its own: decided together
     * inside pipecast_comm_create_on. Without an id (the same at every member) it is one of
     * its own at every member. */
    pipecast_result rc = h->create(h->user, 1, pcg_base_ready() && c->has_id ? base.pc : NULL,
                                   c->has_id ? c->id : 0, &c->pc);
    if (rc != PIPECAST_OK) {
        c->pc = NULL;
        c->disabled = 1;
        if (h->rank == 0) {
            char detail[512];
            pipecast_last_error(detail, sizeof detail);
            pcg_say(h, 1, "pipecast declined at every rank, the MPI's own broadcast runs: %s (%s)",
                    pipecast_strerror(rc), detail);
        }
        return 0;
    }
    char link[128], why[512];
    pipecast_comm_link(c->pc, link, sizeof link);
    if (pcg_base_ready() && pipecast_comm_same_engine(c->pc, base.pc))
        pcg_say(h, 1, "pipecast ready over %s (rank %d of %d), on this process's engine "
                "(id %u)", link, h->rank, h->size, c->id);
    else
        pcg_say(h, 1, "pipecast ready over %s (rank %d of %d)", link, h->rank, h->size);
    if (h->rank == 0 && pipecast_comm_link_reason(c->pc, why, sizeof why) > 0)
        pcg_say(h, 1, "transport auto chose %s: %s", link, why);
    return 1;
}

pcg_path pcg_decide(pcg_comm *c, const pcg_settings *s, const pcg_host *h, size_t bytes,
                    int blocking)
{
    if (c->failed) return PCG_FAILED;
    if (!c->agreed) {
        if (c->base_at_creation && pcg_base_ready()) {
            /* Made where the engine was ready, at every member: the engine's agreement holds
             * (the glue's settings are the process's). */
            c->agreed = 1;
        } else if (!blocking) {
            c->fallback++;
            return PCG_MPI;
        } else {
            pcg_agree(c, s, h);
        }
    }
    uint64_t b = (uint64_t)bytes;
    if (c->disabled || b < (uint64_t)s->min_bytes || (!blocking && b < (uint64_t)s->pml_below)) {
        c->fallback++;
        return PCG_MPI;
    }
    if (c->pc == NULL) {
        int made = c->base_at_creation ? make_view(c, h, blocking)
                                       : blocking && set_up(c, h);
        if (c->failed) return PCG_FAILED;
        if (!made && c->base_at_creation && blocking && !c->disabled) {
            /* Its members are not all the engine's (the same at every member: a communicator
             * with processes of another job): one of its own, agreed first. */
            c->agreed = 0;
            c->base_at_creation = 0;
            pcg_agree(c, s, h);
            made = !c->disabled && set_up(c, h);
        }
        if (!made) {
            c->fallback++;
            return PCG_MPI;
        }
    }
    /* On one host (defers_below > 0) a nonblocking broadcast stays with the MPI's own:
     * osu_ibcast at 4 MiB, 4 ranks on 2 cores, measured pipecast's slower there (docs/scale.md). */
    uint64_t below = pipecast_defers_below(c->pc);
    if (b < below || (!blocking && below > 0)) {
        /* Where pipecast cannot win (every rank on one host: a small message, or more ranks
         * than the host's CPUs can carry) the MPI's own broadcast runs: the same answer at
         * every rank. */
        if (!c->deferral_said && h->rank == 0) {
            char why[512];
            pipecast_defer_reason(c->pc, why, sizeof why);
            pcg_say(h, 1, "%s", why);
        }
        c->deferral_said = 1;
        c->fallback++;
        return PCG_MPI;
    }
    return blocking && b < (uint64_t)s->pml_below ? PCG_P2P : PCG_PIPECAST;
}

#define REQ(reqs, i) ((char *)(reqs) + (size_t)(i) * ops->req_size)

/* This rank's part of the tree: see pcg_p2p_bcast. Returns the MPI's code. */
static int tree_loop(const pcg_p2p_ops *ops, char *buf, size_t bytes, size_t seg, size_t window,
                     int parent, const int *children, int nchildren)
{
    if (bytes == 0) return 0;
    size_t nseg = (bytes + seg - 1) / seg;
    /* recvs[window], then sends[window][nchildren]: slot i % window holds segment i's. */
    size_t nreq = window * (1 + (size_t)nchildren);
    char *reqs = malloc(nreq * ops->req_size);
    if (reqs == NULL) return ops->no_memory;
    for (size_t i = 0; i < nreq; i++) ops->set_null(REQ(reqs, i));
    char *recvs = reqs, *sends = REQ(reqs, window);
    int rc = 0;
#define SEG_LEN(i) ((int)((i) + 1 < nseg ? seg : bytes - (i) * seg))
    for (size_t i = 0; parent >= 0 && i < nseg && i < window && rc == 0; i++)
        rc = ops->irecv(ops->user, buf + i * seg, SEG_LEN(i), parent, REQ(recvs, i));
    for (size_t i = 0; i < nseg && rc == 0; i++) {
        size_t slot = i % window;
        if (parent >= 0) {
            rc = ops->waitall(ops->user, 1, REQ(recvs, slot));
            size_t next = i + window;
            if (rc == 0 && next < nseg)
                rc = ops->irecv(ops->user, buf + next * seg, SEG_LEN(next), parent,
                                REQ(recvs, slot));
        }
        if (rc != 0 || nchildren == 0) continue;
        char *mine = REQ(sends, slot * (size_t)nchildren);
        rc = ops->waitall(ops->user, nchildren, mine); /* segment i - window's */
        for (int k = 0; k < nchildren && rc == 0; k++)
            rc = ops->isend(ops->user, buf + i * seg, SEG_LEN(i), children[k], REQ(mine, k));
    }
#undef SEG_LEN
    /* Whatever happened, nothing stays posted into the buffer. */
    int wrc = ops->waitall(ops->user, (int)(window * (size_t)nchildren), sends);
    if (rc == 0) rc = wrc;
    wrc = ops->waitall(ops->user, (int)window, recvs);
    if (rc == 0) rc = wrc;
    free(reqs);
    return rc;
}

pipecast_result pcg_p2p_bcast(const pcg_comm *c, const pcg_settings *s, const pcg_p2p_ops *ops,
                              char *buf, size_t bytes, int root, int size, int *mpi_rc)
{
    int parent = -1;
    size_t nchildren = 0;
    uint64_t seg = 0;
    int *children = malloc(sizeof *children * (size_t)(size > 0 ? size : 1));
    if (children == NULL) {
        *mpi_rc = ops->no_memory;
        return PIPECAST_OK;
    }
    pipecast_result rc = pipecast_tree_node(c->pc, root, bytes, &parent, children, (size_t)size,
                                            &nchildren, &seg);
    if (rc == PIPECAST_OK) {
        /* The setting, else the model's segment; whole MPI messages (an int count). */
        if (s->pml_segment > 0) seg = (uint64_t)s->pml_segment;
        if (seg == 0 || seg > (uint64_t)INT32_MAX) seg = (uint64_t)1 << 20;
        size_t window = s->pml_window < 1                ? 1
                        : s->pml_window > PCG_WINDOW_MAX ? PCG_WINDOW_MAX
                                                         : (size_t)s->pml_window;
        *mpi_rc = tree_loop(ops, buf, bytes, (size_t)seg, window, parent, children,
                            (int)nchildren);
    }
    free(children);
    return rc;
}
