/*
 * pipecast C ABI. Generated from src/capi by cbindgen (cbindgen.toml); do not edit by hand:
 * tests/capi_header.rs fails when this file and the code disagree.
 */

#ifndef PIPECAST_H
#define PIPECAST_H

#include <stddef.h>
#include <stdint.h>

// Outcome of a pipecast C call.
typedef enum {
  PIPECAST_OK = 0,
  // A required pointer argument was NULL.
  PIPECAST_ERR_NULL_ARGUMENT = 1,
  // An argument was out of range (rank, size, root, length).
  PIPECAST_ERR_INVALID_ARGUMENT = 2,
  // The configuration (struct or PIPECAST_* variables) is not valid.
  PIPECAST_ERR_CONFIG = 3,
  // The address exchange (allgather callback) or connection setup failed.
  PIPECAST_ERR_BOOTSTRAP = 4,
  // A transport error (socket, connection lost).
  PIPECAST_ERR_TRANSPORT = 5,
  // A peer made no progress within the timeout.
  PIPECAST_ERR_TIMEOUT = 6,
  // Ranks disagree on the broadcast (size or root).
  PIPECAST_ERR_MISMATCH = 7,
  // Not supported here (e.g. a transport not built in).
  PIPECAST_ERR_UNSUPPORTED = 8,
  // A bug: pipecast panicked; the panic was stopped at the C boundary.
  PIPECAST_ERR_PANIC = 9,
  // Any other error; see pipecast_last_error.
  PIPECAST_ERR_OTHER = 10,
} pipecast_result;

// An opaque pipecast communicator.
typedef struct pipecast_comm pipecast_comm;

// An opaque nonblocking broadcast in flight.
typedef struct pipecast_request pipecast_request;

// Communicator configuration. NULL strings and 0 numbers mean "the `PIPECAST_*` environment
// variable, else the default"; set fields override the environment.
typedef struct {
  // "tcp" (default), "raweth", "raweth:IFACE" (e.g. "raweth:eth0") or "auto" (raweth when
  // every rank can, else tcp). raweth needs CAP_NET_RAW and one NIC per rank
  // (docs/raweth.md), hence not the default.
  const char *transport;
  // A tree name as `pipecast plan --tree` takes it; default "auto".
  const char *tree;
  // Segment size in bytes; 0 = chosen by the cost model.
  uint64_t segment_bytes;
  // Topology file mapping ranks to machines; NULL = all ranks on one switch.
  const char *topology;
  // How long a peer may show no sign of life (its process dead, its connection closed, no
  // answer to heartbeats) before a broadcast waiting for it fails; a rank that is merely
  // late is waited for. 0 = `PIPECAST_TIMEOUT_MS`, else 5000.
  uint32_t timeout_ms;
  // Calibration profile for the cost model: a file from `pipecast calibrate`, or
  // "100mbit" / "1gbit" (seed 003 Table 2); NULL = "1gbit".
  const char *profile;
  // Where to listen: interface names or IPv4 subnets, comma-separated, like Open MPI's
  // `btl_tcp_if_include` ("eth0", "198.18.0.0/16"). NULL = `PIPECAST_IFACE`, else the first
  // interface that is up, not loopback and not named `mgmt*`, else 127.0.0.1.
  // `PIPECAST_IP` (an address) overrides both.
  const char *iface;
} pipecast_config;

// The MPI glue's settings: which broadcasts it gives pipecast and how its point-to-point path
// moves the mid-size ones. Every rank of a communicator must have the same (the glue compares
// them at its first broadcast, and turns pipecast off at every rank when they differ).
typedef struct {
  // Smaller broadcasts go to the MPI's own (`PIPECAST_MIN_BYTES`, default 65536).
  int64_t min_bytes;
  // From `min_bytes` up to this, pipecast's tree over the MPI's point-to-point layer
  // (`PIPECAST_PML_BELOW`, default 524288; 0: never).
  int64_t pml_below;
  // Its segment size (`PIPECAST_PML_SEGMENT`, default 16384; 0: the cost model's; at most
  // 2147483647).
  int64_t pml_segment;
  // Its receives posted ahead and sends in flight per child (`PIPECAST_PML_WINDOW`, 1 to 16,
  // default 4).
  int64_t pml_window;
} pipecast_glue_settings;

// The host's allgather: every rank passes `len` bytes at `mine`; on return `all` holds
// `size × len` bytes, rank r's at offset `r × len`. Returns 0 on success.
typedef int (*pipecast_allgather_fn)(void *user, const void *mine, void *all, size_t len);

// A progress function of the caller's MPI (`opal_progress`, an `MPI_Iprobe`), called with
// its argument.
typedef void (*pipecast_progress_fn)(void *arg);

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// The library version, a static NUL-terminated string such as `"0.1.0"`.
const char *pipecast_version(void);

// A static NUL-terminated description of a result code.
const char *pipecast_strerror(pipecast_result result);

// Copies the calling thread's last error message into `buf` (NUL-terminated, truncated to
// `len` bytes) and returns the message's full length. `buf` may be NULL when `len` is 0.
//
// # Safety
// `buf` must be NULL or point to `len` writable bytes.
size_t pipecast_last_error(char *buf, size_t len);

// Fills `config` with the defaults (everything NULL or 0).
//
// # Safety
// `config` must be NULL or point to a writable `pipecast_config`.
void pipecast_config_default(pipecast_config *config);

// Reads `PIPECAST_TRANSPORT`, `PIPECAST_TREE`, `PIPECAST_SEGMENT` (bytes, K/M suffixes),
// `PIPECAST_TOPOLOGY`, `PIPECAST_TIMEOUT_MS`, `PIPECAST_PROFILE` and `PIPECAST_IFACE` into `config` (defaults for unset ones) and
// validates every `PIPECAST_*` setting; `config` is written only on success. The variables
// are read and parsed by `comm::Settings`, as `pipecast_comm_create` reads them: a value one
// accepts the other accepts.
//
// # Safety
// `config` must be NULL or point to a writable `pipecast_config`.
pipecast_result pipecast_config_from_env(pipecast_config *config);

// Fills `settings` with the defaults.
//
// # Safety
// `settings` must be NULL or point to a writable `pipecast_glue_settings`.
void pipecast_glue_settings_default(pipecast_glue_settings *settings);

// Reads `PIPECAST_MIN_BYTES`, `PIPECAST_PML_BELOW`, `PIPECAST_PML_SEGMENT` (bytes, K/M/G
// suffixes), `PIPECAST_PML_WINDOW` and `PIPECAST_VERBOSE` (0 silent, 1 selection and summary,
// 2 every broadcast; more counts as 9) as every `PIPECAST_*` variable is read: blanks around a
// value ignored, an empty one unset. Unlike other calls, both out-parameters are written even
// on failure: every value that parsed, the default for one that did not, so that a rank with a
// bad value still joins the glue's agreement (where it votes pipecast off) and says why at its
// verbosity. A bad value returns `PIPECAST_ERR_CONFIG`, and `pipecast_last_error` names the
// variable, its value and what it expected.
//
// # Safety
// `settings` and `verbose` must each be NULL or point to a writable object of their type.
pipecast_result pipecast_glue_settings_from_env(pipecast_glue_settings *settings, int32_t *verbose);

// `PIPECAST_OK` when `settings` are usable (each from 0, `pml_segment` at most 2147483647,
// `pml_window` from 1 to 16), else `PIPECAST_ERR_CONFIG` with the reason in
// `pipecast_last_error`: the Open MPI component checks its MCA parameters here.
//
// # Safety
// `settings` must be NULL or point to a readable `pipecast_glue_settings`.
pipecast_result pipecast_glue_settings_check(const pipecast_glue_settings *settings);

// Creates a communicator of `size` ranks, this one being `rank`. Collective and agreed: every
// rank calls it, it calls `allgather` the same number of times at every rank (four) whatever
// happens locally, and every rank returns the same result — `PIPECAST_OK` everywhere, or the
// same error everywhere, `pipecast_last_error` naming the ranks that failed and why (a bad
// setting, an interface or topology file one host lacks, ranks with different settings). So
// the caller can fall back to its own broadcast on every rank at once, never on one alone.
// `config` NULL means the `PIPECAST_*` environment; a config's set fields override it. On
// success `*out` receives the handle, to be released with `pipecast_comm_free`.
//
// # Safety
// `allgather` must follow its contract; `user` must stay valid until the handle is freed;
// `config` must be NULL or point to a valid config whose strings are NUL-terminated; `out`
// must point to writable storage for a pointer.
pipecast_result pipecast_comm_create(int rank,
                                     int size,
                                     pipecast_allgather_fn allgather,
                                     void *user,
                                     const pipecast_config *config,
                                     pipecast_comm **out);

// [`pipecast_comm_create`] with `settings` laid over `config` and the environment:
// `PIPECAST_NAME=value` assignments, one per line or separated by `;`, with the names and
// values of the `PIPECAST_*` variables (README). The MPI glue passes its MCA parameters this
// way (`coll_pipecast_verbs_device` becomes `PIPECAST_VERBS_DEVICE=…`), so a setting the
// struct has no field for needs no change of the struct. NULL: none. An unknown name or a
// bad value is a local failure that every rank reports, as for a bad config.
//
// # Safety
// As [`pipecast_comm_create`]; `settings` must be NULL or a NUL-terminated string that lives
// during the call.
pipecast_result pipecast_comm_create_with(int rank,
                                          int size,
                                          pipecast_allgather_fn allgather,
                                          void *user,
                                          const pipecast_config *config,
                                          const char *settings,
                                          pipecast_comm **out);

// [`pipecast_comm_create_with`] for a communicator that may have processes this process's
// engine has never seen (MPI's spawn + merge, connect/accept): collective and agreed, it runs
// on `engine`'s engine (no thread, listener or descriptor more; the engine's table of
// processes grows by the new ones) when every member's engine can take it (TCP on one rail,
// the same settings, the same `id`), with id `id`: the same at every member and free on every
// member's engine (as for [`pipecast_comm_view`]). Otherwise every member makes it with an
// engine of its own, as [`pipecast_comm_create_with`] does (rank 0 says why at info).
// `engine` may be NULL at a member that has no engine (every member then falls back). Such a
// communicator runs its broadcasts on the trees (no multicast), and reaches the processes it
// brought over TCP (docs/engine.md, "Communicators with new processes"). Every member must
// call this function (not `pipecast_comm_create[_with]`) for the communicator.
//
// # Safety
// As [`pipecast_comm_create_with`]; `engine` must be NULL or a live handle that no other
// thread frees or broadcasts on during the call (making views of it meanwhile is fine).
pipecast_result pipecast_comm_create_on(const pipecast_comm *engine,
                                        uint32_t id,
                                        int rank,
                                        int size,
                                        pipecast_allgather_fn allgather,
                                        void *user,
                                        const pipecast_config *config,
                                        const char *settings,
                                        pipecast_comm **out);

// 1 when `a` and `b` run on the same engine (one progress thread and set of links: views of
// one another, or a communicator joined on the other's engine by
// [`pipecast_comm_create_on`]), 0 when not or when either is NULL.
//
// # Safety
// `a` and `b` must be NULL or live handles.
int pipecast_comm_same_engine(const pipecast_comm *a, const pipecast_comm *b);

// Makes `*out` a communicator of `size` ranks of `base`: `members[i]` is the rank in `base`
// of the new communicator's rank i (distinct, `0 <= members[i] < size of base`, this rank
// among them). Local: no communication, and no thread, connection or descriptor of its own
// (it runs on `base`'s engine). `id` names it at every member — the same value at each,
// different from every other live communicator's on this process's engine (`base`'s
// engine's first communicator is 0); the MPI glue passes the communicator's context id. An
// id may be used again once the communicator that had it was freed at every member and its
// broadcasts completed. A view of a view is a view of the same engine. Broadcasts of
// different communicators may be posted in any interleaving, and in different ones at
// different ranks (MPI's rule: collectives are ordered per communicator). Free it with
// `pipecast_comm_free`; the engine lives until the last communicator on it is freed, in any
// order. NULL pointers, a size below 1 or above `base`'s, a negative or out-of-range or
// repeated member, a list without this rank, or an id in use:
// `PIPECAST_ERR_NULL_ARGUMENT` or `PIPECAST_ERR_INVALID_ARGUMENT` (`*out` untouched).
//
// # Safety
// `base` must be a live handle not used by another thread during the call; `members` must
// point to `size` readable ints; `out` must be writable.
pipecast_result pipecast_comm_view(const pipecast_comm *base,
                                   uint32_t id,
                                   int size,
                                   const int *members,
                                   pipecast_comm **out);

// Broadcasts `len` bytes at `buf` from `root`. Collective over the communicator's ranks, in
// the same order everywhere. `buf` may be NULL only when `len` is 0.
//
// # Safety
// `comm` must be a live handle used by one thread at a time; `buf` must point to `len`
// writable bytes not touched by anyone else during the call.
pipecast_result pipecast_bcast_bytes(pipecast_comm *comm, void *buf, size_t len, int root);

// Writes the plan this communicator uses for a broadcast of `msize` bytes from `root` as JSON
// — the segment size is the one the broadcast really uses (whole frames on raw Ethernet)
// (the `pipecast plan --json` shape) into `buf` (NUL-terminated, truncated to `len` bytes),
// and its full length (without the NUL) to `*needed` when `needed` is not NULL. Local: no
// communication.
//
// # Safety
// `comm` must be a live handle used by one thread at a time; `buf` must be NULL or point to
// `len` writable bytes; `needed` must be NULL or writable.
pipecast_result pipecast_plan_json(pipecast_comm *comm,
                                   int root,
                                   size_t msize,
                                   char *buf,
                                   size_t len,
                                   size_t *needed);

// This rank's place in the single-lane tree pipecast plans for a broadcast of `msize` bytes
// from `root` — the configured tree resolved by the cost model, or `linear` when that has
// several lanes — for callers that move the segments over their own point-to-point layer
// (the Open MPI component does for mid-size messages). Writes the parent (-1 at the root),
// up to `cap` children in send order, their count and the model's segment size; all
// out-params are written only on success, and a `cap` below the child count is
// `PIPECAST_ERR_INVALID_ARGUMENT`. Local: no communication (plans are cached).
//
// # Safety
// `comm` must be a live handle used by one thread at a time; `parent`, `nchildren` and
// `segment_bytes` must be writable; `children` must point to `cap` writable ints (or be NULL
// when `cap` is 0).
pipecast_result pipecast_tree_node(pipecast_comm *comm,
                                   int root,
                                   size_t msize,
                                   int *parent,
                                   int *children,
                                   size_t cap,
                                   size_t *nchildren,
                                   uint64_t *segment_bytes);

// Below how many bytes the MPI glue should leave a broadcast on this communicator to the
// MPI's own broadcast, because pipecast cannot win there (0: it never defers; UINT64_MAX: it
// always defers). Today: a communicator whose ranks all share one host: below 32 MiB with two
// ranks and 64 MiB with three, else below `PIPECAST_HOST_MIN_BYTES` (default 4 MiB: measured
// in docs/results-ompi.md), or below 16 MiB
// when its ranks outnumber the host's CPUs by more than 2 (also measured there; the
// CPUs are agreed through the bootstrap). [`pipecast_defer_reason`] says which. The same
// value at every rank. Local: no communication. NULL gives 0.
//
// # Safety
// `comm` must be NULL or a live handle.
uint64_t pipecast_defers_below(const pipecast_comm *comm);

// Copies into `buf` (NUL-terminated, truncated to `len` bytes) why
// [`pipecast_defers_below`] says what it says, in words for the MPI glue's verbose 1, and
// returns its full length (0: it never defers). For example: "every rank on one host, 8
// ranks on 2 CPUs (more than 2 per CPU): broadcasts below 16777216 bytes go to the MPI's own
// broadcast, …".
// Local: no communication. NULL `comm` gives 0 and writes nothing.
//
// # Safety
// `comm` must be NULL or a live handle; `buf` must be NULL or point to `len` writable bytes.
size_t pipecast_defer_reason(const pipecast_comm *comm, char *buf, size_t len);

// Copies the description of the links this rank's broadcasts run over into `buf`
// (NUL-terminated, truncated to `len` bytes) and returns its full length: for example
// `tcp`, `raweth:eth1`, `shm:cma` (every peer on this host, single copy), `shm:ring` or
// `tcp+shm:cma` (TCP to other hosts, shared memory on this one). For the MPI glue's verbose
// output. Local: no communication. NULL `comm` gives 0 and writes nothing.
//
// # Safety
// `comm` must be NULL or a live handle; `buf` must be NULL or point to `len` writable bytes.
size_t pipecast_comm_link(const pipecast_comm *comm, char *buf, size_t len);

// Copies into `buf` (NUL-terminated, truncated to `len` bytes) why transport `auto` did not
// take a faster link than the one [`pipecast_comm_link`] names, and returns its full length
// (0: none was missed, or the transport was named). For example `not verbs at rank 0: no RDMA
// device: ibv_get_device_list returned none; not raweth at rank 0: raw Ethernet needs the
// CAP_NET_RAW capability …`. For the MPI glue's verbose 1. Local: no communication. NULL
// `comm` gives 0 and writes nothing.
//
// # Safety
// `comm` must be NULL or a live handle; `buf` must be NULL or point to `len` writable bytes.
size_t pipecast_comm_link_reason(const pipecast_comm *comm, char *buf, size_t len);

// Frees a communicator (NULL is ignored). Local: no communication. Its nonblocking
// broadcasts still in flight complete (their requests stay valid). The engine of its
// process lives on while another communicator on it (a view, or the one it is a view of)
// lives: the last one freed, in any order, stops its thread and closes its connections.
//
// # Safety
// `comm` must be NULL or a handle from pipecast_comm_create or pipecast_comm_view not freed
// before.
void pipecast_comm_free(pipecast_comm *comm);

// Starts broadcasting `len` bytes at `buf` from `root` and returns at once; `*out` receives
// the request, to be completed by `pipecast_test` or `pipecast_wait`. Collective: blocking
// and nonblocking broadcasts on a communicator must be posted in the same order at every
// rank; several may be in flight. The broadcast runs on pipecast's progress thread (it
// overlaps with the caller's computation). `buf` may be NULL only when `len` is 0.
//
// # Safety
// `comm` must be a live handle used by one thread at a time; `buf` must point to `len`
// writable bytes that nobody else touches until the request completes; `out` must be
// writable.
pipecast_result pipecast_ibcast_bytes(pipecast_comm *comm,
                                      void *buf,
                                      size_t len,
                                      int root,
                                      pipecast_request **out);

// Whether `req` has completed: `*done` = 1 and the broadcast's result returned — the request
// is then freed and must not be used again — or `*done` = 0 and `PIPECAST_OK` (still
// running). Never blocks; may be called from any thread (one at a time per request).
//
// # Safety
// `req` must be a live request from `pipecast_ibcast_bytes`; `done` must be writable.
pipecast_result pipecast_test(pipecast_request *req, int *done);

// As `pipecast_test`, but waits up to `usec` microseconds for `req` to complete (its
// completion ends the wait at once): for an MPI layer whose own wait spins on its progress
// engine, so that ranks sharing a core leave it to the threads moving the bytes (Open MPI's
// component naps so while `MPI_Wait` spins on a nonblocking broadcast).
//
// # Safety
// As `pipecast_test`.
pipecast_result pipecast_test_within(pipecast_request *req, uint32_t usec, int *done);

// Waits until `req` completes, frees it and returns the broadcast's result.
//
// # Safety
// `req` must be a live request from `pipecast_ibcast_bytes`, not used again afterwards.
pipecast_result pipecast_wait(pipecast_request *req);

// Waits until `req` completes, calling `progress(arg)` between polls, then frees it and
// returns the broadcast's result. The way for an MPI layer to block in a broadcast: MPI has
// no timeouts and a rank inside `MPI_Bcast` is inside MPI, so its own pending traffic must
// keep moving (a rendezvous send of Open MPI's `btl tcp` or of MPICH over UCX moves only from
// the sender's progress engine; a peer waiting for it would otherwise never join this
// broadcast). Between polls the thread yields the CPU; after 64 polls it sleeps until the
// broadcast ends or 20 µs pass, doubling up to 500 µs, so that ranks sharing a core leave
// it to the threads moving the bytes (the end of the broadcast wakes it at once).
// `progress` may be NULL.
//
// # Safety
// `req` must be a live request from `pipecast_ibcast_bytes`, not used again afterwards;
// `progress`, when not NULL, must be safe to call with `arg` from this thread.
pipecast_result pipecast_wait_progressing(pipecast_request *req,
                                          pipecast_progress_fn progress,
                                          void *arg);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* PIPECAST_H */
