/*
 * What the MPI glue shares — the Open MPI coll component (ffi/ompi) and the LD_PRELOAD shim
 * (ffi/preload): the settings that decide, per broadcast, between pipecast and the MPI's own
 * broadcast; their agreement between the ranks; the decision itself; and the windowed tree
 * loop that moves mid-size broadcasts along pipecast's tree over the MPI's point-to-point layer.
 *
 * It includes no MPI header: each glue hands in its MPI's calls as functions (an allreduce, an
 * irecv/isend/waitall triple), so one source serves Open MPI's internals and any MPI's PMPI.
 *
 * Rules it keeps (README, "never a hang"): every rank reaches the same decision for the same
 * broadcast; a rank never skips a collective the others enter — one whose own step failed
 * (no memory, a setting that does not parse) still joins the agreement and votes pipecast off
 * there, with its reason, so every rank turns it off together.
 */
#ifndef PIPECAST_GLUE_H
#define PIPECAST_GLUE_H

#include <stddef.h>
#include <stdint.h>

#include "pipecast.h"

/* Most receives posted ahead on the point-to-point path (and sends in flight per child):
 * the bound pipecast_glue_settings_check keeps. */
#define PCG_WINDOW_MAX 16

/* The glue's own settings: the same at every rank, or pipecast stays off (pcg_agree). Read and
 * checked by pipecast (pipecast_glue_settings_from_env, pipecast_glue_settings_check in
 * pipecast.h): the glue parses no setting itself. */
typedef pipecast_glue_settings pcg_settings;

/* Why a rank votes pipecast off before any comparison (0: it does not). */
enum {
    PCG_VOTE_OK = 0,
    PCG_VOTE_BAD_SETTING = 1, /* a glue setting did not parse or is out of range */
    PCG_VOTE_NO_MEMORY = 2,   /* the glue could not allocate its state */
};

/* The MPI's allreduce with MAX over `n` 64-bit integers; 0 on success. Collective. */
typedef int (*pcg_allreduce_max_fn)(void *user, const int64_t *in, int64_t *out, int n);

/* Creates the pipecast communicator, collective and agreed: with `join` 0 the process's engine
 * (pipecast_comm_create[_with]); with `join` 1 a communicator on `engine` (the process's,
 * NULL when it has none) with id `id` when every member's engine can take it, else one of its
 * own (pipecast_comm_create_on). Every member passes the same `join` and `id`. */
typedef pipecast_result (*pcg_create_fn)(void *user, int join, const pipecast_comm *engine,
                                         uint32_t id, pipecast_comm **out);

/* One communicator as the glue sees it. */
typedef struct {
    pipecast_comm *pc;      /* a view of the process's engine (pcg_base_*), or a communicator
                             * of its own, made at the first broadcast pipecast takes */
    int agreed;             /* the settings were compared (at the first broadcast) */
    int disabled;           /* pipecast declined on this communicator, at every rank alike */
    int failed;             /* a pipecast broadcast failed: later ones fail, never fall back */
    int deferral_said;      /* verbose 1 said once why small broadcasts go to the MPI's own */
    int vote;               /* PCG_VOTE_*: this rank's own reason to vote pipecast off */
    /* Views (pcg_base_setup): whether the process's engine was ready when this communicator
     * was made (pcg_comm_made), the same at every member; its view id once known. */
    int base_at_creation;
    int has_id;
    uint32_t id;
    unsigned long handled;  /* broadcasts pipecast carried (blocking and nonblocking) */
    unsigned long handled_nb; /* of those, nonblocking */
    unsigned long over_p2p; /* of those, moved over the MPI's point-to-point layer */
    unsigned long fallback; /* broadcasts the MPI's own broadcast carried */
} pcg_comm;

/* What the glue needs of the MPI and of its caller to decide. */
typedef struct {
    const char *who;       /* the prefix of messages: "coll:pipecast", "pipecast-preload" */
    const char *comm_name; /* the communicator's name in messages, or NULL */
    int verbose;     /* 0 silent, 1 selection and summary, 2 every broadcast */
    int rank, size;
    pcg_allreduce_max_fn allreduce_max;
    pcg_create_fn create;
    void *user; /* passed to all three */
    /* This communicator's ranks as MPI_COMM_WORLD ranks (members[r] for rank r, `size` of
     * them); 0 when every one is in MPI_COMM_WORLD. Local. NULL: no views here. */
    int (*world_ranks)(void *user, int *members);
    /* An id the MPI itself gives this communicator, the same at every member and unique among
     * the process's live communicators (Open MPI's context id), or -1 when it has none: the
     * glue then agrees one at the first blocking broadcast. */
    int64_t mpi_id;
} pcg_host;

/* Where a broadcast goes. */
typedef enum {
    PCG_MPI,      /* the MPI's own broadcast */
    PCG_P2P,      /* pipecast's tree over the MPI's point-to-point layer (pcg_p2p_bcast) */
    PCG_PIPECAST, /* pipecast's transport (pipecast_ibcast_bytes) */
    PCG_FAILED,   /* an earlier pipecast broadcast failed: this one fails too */
} pcg_path;

void pcg_comm_init(pcg_comm *c);

/* Collective: the ranks compare `mine` and their votes with one allreduce, which every rank
 * joins whatever its vote. A rank whose `mine` fails pipecast_glue_settings_check votes
 * PCG_VOTE_BAD_SETTING (verbose 1 says why there). Sets c->agreed, and c->disabled at every
 * rank when any rank voted pipecast off or the settings differ anywhere (verbose 1 says why,
 * once, at rank 0). */
void pcg_agree(pcg_comm *c, const pcg_settings *mine, const pcg_host *h);

/* Where a broadcast of `bytes` on `c` goes; the same at every rank, from the type signature's
 * size, the agreed settings and pipecast's own agreed answers only. `blocking` (MPI_Bcast) may
 * run collectives: the agreement at the first broadcast, pipecast_comm_create at the first one
 * pipecast takes. Without it (MPI_Ibcast, which must not block) nothing collective runs:
 * pipecast takes the broadcast only on a view of the engine that needs no agreement (the
 * engine was ready where the communicator was made, and its id is known: the MPI's, or agreed
 * as it was made) or on a communicator an earlier MPI_Bcast set up, and never the
 * point-to-point path (the MPI's own nonblocking broadcast is as good there). Counts the
 * fallbacks. The caller checks intercommunicators and sizes below 2 first. */
pcg_path pcg_decide(pcg_comm *c, const pcg_settings *s, const pcg_host *h, size_t bytes,
                    int blocking);

/* Frees c->pc. */
void pcg_comm_free(pcg_comm *c);

/* ---- One engine per process ----
 *
 * The process's pipecast engine is a pipecast communicator over every process of
 * MPI_COMM_WORLD in its rank order, made once by pcg_base_setup at a collective every process
 * joins (the shim: MPI_Init; the component: the first MPI_Bcast or MPI_Barrier on
 * MPI_COMM_WORLD). Every communicator whose processes it knows is then a view of it
 * (pipecast_comm_view: no collective, no connection, no thread), so MPI_Ibcast takes pipecast
 * from its first call there. A view needs an id that every member gives it: the MPI's own
 * (pcg_host.mpi_id) or one the members agree at the first blocking broadcast (the lowest id
 * free at all of them, as MPI agrees on context ids).
 *
 * Every rank decides alike: a communicator uses a view from its first broadcast only when the
 * engine was ready where it was made (pcg_comm_made, called as it is made: two blocking
 * collectives that involve two ranks run in one order at both, or the program could deadlock,
 * so the answer is the same at every member); otherwise its first blocking broadcast asks
 * every member (one allreduce, with the settings agreement). */

/* Collective over MPI_COMM_WORLD (h describes it): agrees the glue's settings (`vote`: this
 * rank's PCG_VOTE_*) and makes the engine. Runs once; later calls return at once. Returns 1
 * when the engine is ready. */
int pcg_base_setup(const pcg_settings *s, int vote, const pcg_host *h);

/* Frees the engine once no communicator uses it (at finalize; its views were freed). */
void pcg_base_free(void);

/* Whether the engine is ready. */
int pcg_base_ready(void);

/* Records, as `c` is made, whether the engine was ready then. */
void pcg_comm_made(pcg_comm *c);

/* The id the ranks propose at an agreement: above every id this process used. */
uint32_t pcg_next_id(void);

/* Collective over `c` (one allreduce): agrees its view id, free at every member. The shim
 * runs it as a communicator is made, so that its first MPI_Ibcast may take pipecast.
 * 0 on success (the same answer at every member). */
int pcg_agree_id(pcg_comm *c, const pcg_host *h);

/* The MPI's point-to-point calls for pcg_p2p_bcast, on a communicator (or tag) that carries
 * nothing else. Requests are opaque `req_size`-byte handles; every call returns the MPI's code
 * (0: success). */
typedef struct {
    size_t req_size;
    void (*set_null)(void *req);
    int (*irecv)(void *user, char *buf, int len, int peer, void *req);
    int (*isend)(void *user, char *buf, int len, int peer, void *req);
    int (*waitall)(void *user, int n, void *reqs); /* completes n consecutive requests */
    int no_memory;                                 /* the MPI's code for "out of memory" */
    void *user;
} pcg_p2p_ops;

/* A broadcast of `bytes` at `buf` from `root` along pipecast's single-lane tree, in segments
 * of the setting pml_segment (0: the model's), moved by `ops`: receives posted pml_window
 * ahead, every segment forwarded to each child as soon as it arrived (seed 001 §3.2's
 * First-Packet-First-Served). Returns a pipecast result for planning problems (the same at
 * every rank) and puts the MPI's code in *mpi_rc. */
pipecast_result pcg_p2p_bcast(const pcg_comm *c, const pcg_settings *s, const pcg_p2p_ops *ops,
                              char *buf, size_t bytes, int root, int size, int *mpi_rc);

/* A message at verbose `level` and above, prefixed with h->who. */
void pcg_say(const pcg_host *h, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* PIPECAST_GLUE_H */
