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

/* Creates the pipecast communicator (pipecast_comm_create[_with]: collective and agreed). */
typedef pipecast_result (*pcg_create_fn)(void *user, pipecast_comm **out);

/* One communicator as the glue sees it. */
typedef struct {
    pipecast_comm *pc;      /* created at the first broadcast pipecast takes */
    int agreed;             /* the settings were compared (at the first broadcast) */
    int disabled;           /* pipecast declined on this communicator, at every rank alike */
    int failed;             /* a pipecast broadcast failed: later ones fail, never fall back */
    int deferral_said;      /* verbose 1 said once why small broadcasts go to the MPI's own */
    int vote;               /* PCG_VOTE_*: this rank's own reason to vote pipecast off */
    unsigned long handled;  /* broadcasts pipecast carried */
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
    void *user; /* passed to both */
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
 * pipecast takes the broadcast only on a communicator an earlier MPI_Bcast set up, and never
 * the point-to-point path (the MPI's own nonblocking broadcast is as good there). Counts the
 * fallbacks. The caller checks intercommunicators and sizes below 2 first. */
pcg_path pcg_decide(pcg_comm *c, const pcg_settings *s, const pcg_host *h, size_t bytes,
                    int blocking);

/* Frees c->pc. */
void pcg_comm_free(pcg_comm *c);

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
