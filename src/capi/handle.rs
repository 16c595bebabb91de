//! The communicator handle of the C ABI.

use super::config::settings_from_c;
use super::{boundary, fail, pipecast_config, pipecast_result};
use crate::comm::{Bootstrap, Comm, CommError, Config, ErrorClass, Settings};
use crate::Error;
use pipecast_result::*;
use std::ffi::{c_char, c_int, c_void, CStr};

/// An opaque pipecast communicator.
pub struct pipecast_comm {
    pub(crate) comm: Comm,
}

/// The host's allgather: every rank passes `len` bytes at `mine`; on return `all` holds
/// `size × len` bytes, rank r's at offset `r × len`. Returns 0 on success.
pub type pipecast_allgather_fn = Option<
    unsafe extern "C" fn(
        user: *mut c_void,
        mine: *const c_void,
        all: *mut c_void,
        len: usize,
    ) -> c_int,
>;

/// [`Bootstrap`] over the host's fixed-size allgather: one round for the lengths, one for the
/// blobs padded to the longest.
struct CallbackBootstrap {
    allgather: unsafe extern "C" fn(*mut c_void, *const c_void, *mut c_void, usize) -> c_int,
    user: *mut c_void,
    size: usize,
}

// SAFETY: the callback and its `user` pointer are only ever called from the thread that calls
// pipecast_comm_create / pipecast_bcast_bytes (the bootstrap stays on the Comm, never on the
// progress thread); the header documents that the host keeps `user` valid for the handle's life.
unsafe impl Send for CallbackBootstrap {}

impl CallbackBootstrap {
    fn round(&mut self, mine: &[u8]) -> Result<Vec<u8>, CommError> {
        let mut all = vec![0u8; mine.len() * self.size];
        // SAFETY: `mine` has `mine.len()` readable bytes and `all` has `size × len` writable
        // ones, which is what the callback contract asks for.
        let rc = unsafe {
            (self.allgather)(
                self.user,
                mine.as_ptr().cast(),
                all.as_mut_ptr().cast(),
                mine.len(),
            )
        };
        if rc != 0 {
            return Err(CommError::Bootstrap(format!(
                "the host's allgather returned {rc}"
            )));
        }
        Ok(all)
    }
}

impl Bootstrap for CallbackBootstrap {
    fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, CommError> {
        let lengths = self.round(&(mine.len() as u64).to_le_bytes())?;
        let lengths: Vec<usize> = lengths
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")) as usize)
            .collect();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        if longest > 1 << 20 {
            return Err(CommError::Bootstrap(format!(
                "a rank offered a {longest}-byte address blob: is every rank running pipecast?"
            )));
        }
        let mut padded = mine.to_vec();
        padded.resize(longest, 0);
        let all = self.round(&padded)?;
        Ok(lengths
            .iter()
            .enumerate()
            .map(|(r, &n)| all[r * longest..r * longest + n].to_vec())
            .collect())
    }
}

/// The result code for a crate error, with its message recorded for `pipecast_last_error`.
pub(crate) fn code_of(e: &Error) -> pipecast_result {
    // A view's error names its ranks; its class is the engine's error's.
    let class = match e {
        Error::Comm(CommError::OnView { source, .. }) => ErrorClass::of(source),
        e => ErrorClass::of(e),
    };
    let code = match class {
        ErrorClass::Config => PIPECAST_ERR_CONFIG,
        ErrorClass::Bootstrap => PIPECAST_ERR_BOOTSTRAP,
        ErrorClass::Transport => PIPECAST_ERR_TRANSPORT,
        ErrorClass::Timeout => PIPECAST_ERR_TIMEOUT,
        ErrorClass::Mismatch => PIPECAST_ERR_MISMATCH,
        ErrorClass::Unsupported => PIPECAST_ERR_UNSUPPORTED,
        ErrorClass::Other => PIPECAST_ERR_OTHER,
    };
    fail(code, e.to_string())
}

/// This rank's configuration: the `settings` assignments over the struct's fields over the
/// `PIPECAST_*` environment (read in `comm::Settings`, the one place). A bad value is a local
/// failure that the agreement of `Comm::join` reports to every rank.
fn local_config(
    config: Option<&pipecast_config>,
    settings: Option<&CStr>,
) -> crate::Result<Config> {
    let over = match config {
        Some(c) => settings_from_c(c).map_err(|problem| CommError::Env {
            name: "config",
            problem,
        })?,
        None => Settings::default(),
    };
    let assigned = match settings {
        Some(text) => text
            .to_str()
            .map_err(|_| "not UTF-8".to_string())
            .and_then(Settings::parse_assignments)
            .map_err(|problem| CommError::Env {
                name: "settings",
                problem,
            })?,
        None => Settings::default(),
    };
    let mut config = Config::default();
    assigned
        .or(over)
        .or(Settings::from_env())
        .apply(&mut config)?;
    Ok(config)
}

/// Creates a communicator of `size` ranks, this one being `rank`. Collective and agreed: every
/// rank calls it, it calls `allgather` the same number of times at every rank (four) whatever
/// happens locally, and every rank returns the same result — `PIPECAST_OK` everywhere, or the
/// same error everywhere, `pipecast_last_error` naming the ranks that failed and why (a bad
/// setting, an interface or topology file one host lacks, ranks with different settings). So
/// the caller can fall back to its own broadcast on every rank at once, never on one alone.
/// `config` NULL means the `PIPECAST_*` environment; a config's set fields override it. On
/// success `*out` receives the handle, to be released with `pipecast_comm_free`.
///
/// # Safety
/// `allgather` must follow its contract; `user` must stay valid until the handle is freed;
/// `config` must be NULL or point to a valid config whose strings are NUL-terminated; `out`
/// must point to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn pipecast_comm_create(
    rank: c_int,
    size: c_int,
    allgather: pipecast_allgather_fn,
    user: *mut c_void,
    config: *const pipecast_config,
    out: *mut *mut pipecast_comm,
) -> pipecast_result {
    // SAFETY: forwarded caller contract; no settings text.
    unsafe { pipecast_comm_create_with(rank, size, allgather, user, config, std::ptr::null(), out) }
}

/// [`pipecast_comm_create`] with `settings` laid over `config` and the environment:
/// `PIPECAST_NAME=value` assignments, one per line or separated by `;`, with the names and
/// values of the `PIPECAST_*` variables (README). The MPI glue passes its MCA parameters this
/// way (`coll_pipecast_verbs_device` becomes `PIPECAST_VERBS_DEVICE=…`), so a setting the
/// struct has no field for needs no change of the struct. NULL: none. An unknown name or a
/// bad value is a local failure that every rank reports, as for a bad config.
///
/// # Safety
/// As [`pipecast_comm_create`]; `settings` must be NULL or a NUL-terminated string that lives
/// during the call.
#[no_mangle]
pub unsafe extern "C" fn pipecast_comm_create_with(
    rank: c_int,
    size: c_int,
    allgather: pipecast_allgather_fn,
    user: *mut c_void,
    config: *const pipecast_config,
    settings: *const c_char,
    out: *mut *mut pipecast_comm,
) -> pipecast_result {
    // SAFETY: the caller's contract is `create`'s, which this function's documentation states.
    unsafe {
        create(
            rank,
            size,
            allgather,
            user,
            config,
            settings,
            out,
            Comm::join,
        )
    }
}

/// [`pipecast_comm_create_with`] for a communicator that may have processes this process's
/// engine has never seen (MPI's spawn + merge, connect/accept): collective and agreed, it runs
/// on `engine`'s engine (no thread, listener or descriptor more; the engine's table of
/// processes grows by the new ones) when every member's engine can take it (TCP on one rail,
/// the same settings, the same `id`), with id `id`: the same at every member and free on every
/// member's engine (as for [`pipecast_comm_view`]). Otherwise every member makes it with an
/// engine of its own, as [`pipecast_comm_create_with`] does (rank 0 says why at info).
/// `engine` may be NULL at a member that has no engine (every member then falls back). Such a
/// communicator runs its broadcasts on the trees (no multicast), and reaches the processes it
/// brought over TCP (docs/engine.md, "Communicators with new processes"). Every member must
/// call this function (not `pipecast_comm_create[_with]`) for the communicator.
///
/// # Safety
/// As [`pipecast_comm_create_with`]; `engine` must be NULL or a live handle that no other
/// thread frees or broadcasts on during the call (making views of it meanwhile is fine).
#[no_mangle]
pub unsafe extern "C" fn pipecast_comm_create_on(
    engine: *const pipecast_comm,
    id: u32,
    rank: c_int,
    size: c_int,
    allgather: pipecast_allgather_fn,
    user: *mut c_void,
    config: *const pipecast_config,
    settings: *const c_char,
    out: *mut *mut pipecast_comm,
) -> pipecast_result {
    // SAFETY: NULL or a live handle not freed or broadcast on during the call (the caller's
    // contract); the rest is `create`'s, as this function's documentation states.
    let engine = unsafe { engine.as_ref() }.map(|h| &h.comm);
    // SAFETY: as above.
    unsafe {
        create(
            rank,
            size,
            allgather,
            user,
            config,
            settings,
            out,
            |r, n, boot, c| Comm::join_on(engine, id, r, n, boot, c),
        )
    }
}

/// What [`pipecast_comm_create_with`] and [`pipecast_comm_create_on`] share: the arguments
/// checked, the local config read, the bootstrap over the callback, and `join` (the agreed
/// setup) run with them; the handle written to `out`.
///
/// # Safety
/// `config` NULL or valid, `settings` NULL or a NUL-terminated string, `out` NULL or writable,
/// `allgather` and `user` as [`pipecast_comm_create`] states; all during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn create(
    rank: c_int,
    size: c_int,
    allgather: pipecast_allgather_fn,
    user: *mut c_void,
    config: *const pipecast_config,
    settings: *const c_char,
    out: *mut *mut pipecast_comm,
    join: impl FnOnce(usize, usize, Box<dyn Bootstrap>, crate::Result<Config>) -> crate::Result<Comm>,
) -> pipecast_result {
    boundary(|| {
        super::init_log();
        let Some(allgather) = allgather else {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "allgather callback is NULL");
        };
        if out.is_null() {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "out is NULL");
        }
        if size < 1 || rank < 0 || rank >= size {
            return fail(
                PIPECAST_ERR_INVALID_ARGUMENT,
                format!("rank {rank} of size {size}: need 0 <= rank < size"),
            );
        }
        // SAFETY: NULL or a valid config, and NULL or a NUL-terminated settings string, by the
        // caller's contract.
        let config = local_config(unsafe { config.as_ref() }, unsafe {
            (!settings.is_null()).then(|| CStr::from_ptr(settings))
        });
        let bootstrap = CallbackBootstrap {
            allgather,
            user,
            size: size as usize,
        };
        match join(rank as usize, size as usize, Box::new(bootstrap), config) {
            Ok(comm) => {
                let handle = Box::into_raw(Box::new(pipecast_comm { comm }));
                // SAFETY: `out` is non-NULL (checked) and writable by the caller's contract.
                unsafe { out.write(handle) };
                PIPECAST_OK
            }
            Err(e) => code_of(&e),
        }
    })
}

/// 1 when `a` and `b` run on the same engine (one progress thread and set of links: views of
/// one another, or a communicator joined on the other's engine by
/// [`pipecast_comm_create_on`]), 0 when not or when either is NULL.
///
/// # Safety
/// `a` and `b` must be NULL or live handles.
#[no_mangle]
pub unsafe extern "C" fn pipecast_comm_same_engine(
    a: *const pipecast_comm,
    b: *const pipecast_comm,
) -> c_int {
    // SAFETY: NULL or live handles (caller contract); only read.
    match unsafe { (a.as_ref(), b.as_ref()) } {
        (Some(a), Some(b)) => c_int::from(a.comm.same_engine(&b.comm)),
        _ => 0,
    }
}

/// Makes `*out` a communicator of `size` ranks of `base`: `members[i]` is the rank in `base`
/// of the new communicator's rank i (distinct, `0 <= members[i] < size of base`, this rank
/// among them). Local: no communication, and no thread, connection or descriptor of its own
/// (it runs on `base`'s engine). `id` names it at every member — the same value at each,
/// different from every other live communicator's on this process's engine (`base`'s
/// engine's first communicator is 0); the MPI glue passes the communicator's context id. An
/// id may be used again once the communicator that had it was freed at every member and its
/// broadcasts completed. A view of a view is a view of the same engine. Broadcasts of
/// different communicators may be posted in any interleaving, and in different ones at
/// different ranks (MPI's rule: collectives are ordered per communicator). Free it with
/// `pipecast_comm_free`; the engine lives until the last communicator on it is freed, in any
/// order. NULL pointers, a size below 1 or above `base`'s, a negative or out-of-range or
/// repeated member, a list without this rank, or an id in use:
/// `PIPECAST_ERR_NULL_ARGUMENT` or `PIPECAST_ERR_INVALID_ARGUMENT` (`*out` untouched).
///
/// # Safety
/// `base` must be a live handle not used by another thread during the call; `members` must
/// point to `size` readable ints; `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn pipecast_comm_view(
    base: *const pipecast_comm,
    id: u32,
    size: c_int,
    members: *const c_int,
    out: *mut *mut pipecast_comm,
) -> pipecast_result {
    boundary(|| {
        // SAFETY: a live handle, not used by another thread during the call (caller contract).
        let Some(handle) = (unsafe { base.as_ref() }) else {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "base is NULL");
        };
        if members.is_null() || out.is_null() {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "members or out is NULL");
        }
        let ranks = handle.comm.size();
        if size < 1 || size as usize > ranks {
            return fail(
                PIPECAST_ERR_INVALID_ARGUMENT,
                format!("a view of {size} ranks: need 1 to {ranks}, the base's size"),
            );
        }
        // SAFETY: `members` points to `size` readable ints (caller contract), non-NULL.
        let list = unsafe { std::slice::from_raw_parts(members, size as usize) };
        if let Some((i, m)) = list.iter().enumerate().find(|(_, &m)| m < 0) {
            return fail(
                PIPECAST_ERR_INVALID_ARGUMENT,
                format!("members[{i}] is {m}, not a rank"),
            );
        }
        let list: Vec<usize> = list.iter().map(|&m| m as usize).collect();
        match handle.comm.view(id, &list) {
            Ok(comm) => {
                let view = Box::into_raw(Box::new(pipecast_comm { comm }));
                // SAFETY: `out` is non-NULL (checked) and writable by the caller's contract.
                unsafe { out.write(view) };
                PIPECAST_OK
            }
            Err(e @ Error::Comm(CommError::Usage(_))) => {
                fail(PIPECAST_ERR_INVALID_ARGUMENT, e.to_string())
            }
            Err(e) => code_of(&e),
        }
    })
}

/// `root` is a rank of the communicator, else `PIPECAST_ERR_INVALID_ARGUMENT` (recorded).
pub(crate) fn check_root(handle: &pipecast_comm, root: c_int) -> Result<(), pipecast_result> {
    if root < 0 || root as usize >= handle.comm.size() {
        return Err(fail(
            PIPECAST_ERR_INVALID_ARGUMENT,
            format!(
                "root {root} is not a rank of this {}-rank communicator",
                handle.comm.size()
            ),
        ));
    }
    Ok(())
}

/// Broadcasts `len` bytes at `buf` from `root`. Collective over the communicator's ranks, in
/// the same order everywhere. `buf` may be NULL only when `len` is 0.
///
/// # Safety
/// `comm` must be a live handle used by one thread at a time; `buf` must point to `len`
/// writable bytes not touched by anyone else during the call.
#[no_mangle]
pub unsafe extern "C" fn pipecast_bcast_bytes(
    comm: *mut pipecast_comm,
    buf: *mut c_void,
    len: usize,
    root: c_int,
) -> pipecast_result {
    boundary(|| {
        // SAFETY: a live handle from pipecast_comm_create, used by one thread (caller contract).
        let Some(handle) = (unsafe { comm.as_mut() }) else {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "comm is NULL");
        };
        if buf.is_null() && len > 0 {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "buf is NULL but len is not 0");
        }
        if let Err(code) = check_root(handle, root) {
            return code;
        }
        let data: &mut [u8] = if len == 0 {
            &mut []
        } else {
            // SAFETY: `buf` points to `len` writable bytes that nobody else touches during the
            // call (caller contract), and is non-NULL (checked above).
            unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) }
        };
        match handle.comm.bcast(data, root as usize) {
            Ok(()) => PIPECAST_OK,
            Err(e) => code_of(&e),
        }
    })
}

/// Writes the plan this communicator uses for a broadcast of `msize` bytes from `root` as JSON
/// — the segment size is the one the broadcast really uses (whole frames on raw Ethernet)
/// (the `pipecast plan --json` shape) into `buf` (NUL-terminated, truncated to `len` bytes),
/// and its full length (without the NUL) to `*needed` when `needed` is not NULL. Local: no
/// communication.
///
/// # Safety
/// `comm` must be a live handle used by one thread at a time; `buf` must be NULL or point to
/// `len` writable bytes; `needed` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn pipecast_plan_json(
    comm: *mut pipecast_comm,
    root: c_int,
    msize: usize,
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> pipecast_result {
    boundary(|| {
        // SAFETY: a live handle used by one thread at a time (caller contract).
        let Some(handle) = (unsafe { comm.as_mut() }) else {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "comm is NULL");
        };
        if let Err(code) = check_root(handle, root) {
            return code;
        }
        let (algorithm, segment, lanes) = match handle.comm.plan(root as usize, msize as u64) {
            Ok(p) => p,
            Err(e) => return code_of(&e),
        };
        let text = crate::comm::plan_json(&crate::comm::PlanReport {
            tree: algorithm.to_string(),
            root: root as usize,
            lanes: &lanes,
            rails: &[],
            topology: handle.comm.topology(),
            priced: Some((segment, None)),
            throughput: None,
        });
        let text = text.trim_end();
        if !needed.is_null() {
            // SAFETY: non-NULL and writable (caller contract).
            unsafe { needed.write(text.len()) };
        }
        if !buf.is_null() && len > 0 {
            let n = text.len().min(len - 1);
            // SAFETY: `buf` has `len` writable bytes and `n + 1 <= len`.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        PIPECAST_OK
    })
}

/// This rank's place in the single-lane tree pipecast plans for a broadcast of `msize` bytes
/// from `root` — the configured tree resolved by the cost model, or `linear` when that has
/// several lanes — for callers that move the segments over their own point-to-point layer
/// (the Open MPI component does for mid-size messages). Writes the parent (-1 at the root),
/// up to `cap` children in send order, their count and the model's segment size; all
/// out-params are written only on success, and a `cap` below the child count is
/// `PIPECAST_ERR_INVALID_ARGUMENT`. Local: no communication (plans are cached).
///
/// # Safety
/// `comm` must be a live handle used by one thread at a time; `parent`, `nchildren` and
/// `segment_bytes` must be writable; `children` must point to `cap` writable ints (or be NULL
/// when `cap` is 0).
#[no_mangle]
pub unsafe extern "C" fn pipecast_tree_node(
    comm: *mut pipecast_comm,
    root: c_int,
    msize: usize,
    parent: *mut c_int,
    children: *mut c_int,
    cap: usize,
    nchildren: *mut usize,
    segment_bytes: *mut u64,
) -> pipecast_result {
    boundary(|| {
        // SAFETY: a live handle used by one thread (caller contract).
        let Some(handle) = (unsafe { comm.as_mut() }) else {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "comm is NULL");
        };
        if parent.is_null() || nchildren.is_null() || segment_bytes.is_null() {
            return fail(
                PIPECAST_ERR_NULL_ARGUMENT,
                "parent, nchildren and segment_bytes must not be NULL",
            );
        }
        if children.is_null() && cap > 0 {
            return fail(
                PIPECAST_ERR_NULL_ARGUMENT,
                "children is NULL but cap is not 0",
            );
        }
        if let Err(code) = check_root(handle, root) {
            return code;
        }
        let node = match handle.comm.tree_node(root as usize, msize as u64) {
            Ok(n) => n,
            Err(e) => return code_of(&e),
        };
        if node.children.len() > cap {
            return fail(
                PIPECAST_ERR_INVALID_ARGUMENT,
                format!(
                    "rank {} has {} children in the {} tree but cap is {cap}",
                    handle.comm.rank(),
                    node.children.len(),
                    node.tree
                ),
            );
        }
        // SAFETY: the pointers are non-NULL (checked) and writable, `children` has `cap >=
        // node.children.len()` ints (caller contract); ranks fit in c_int (the size did).
        unsafe {
            parent.write(node.parent.map_or(-1, |p| p as c_int));
            for (i, &c) in node.children.iter().enumerate() {
                children.add(i).write(c as c_int);
            }
            nchildren.write(node.children.len());
            segment_bytes.write(node.segment);
        }
        PIPECAST_OK
    })
}

/// Below how many bytes the MPI glue should leave a broadcast on this communicator to the
/// MPI's own broadcast, because pipecast cannot win there (0: it never defers; UINT64_MAX: it
/// always defers). Today: a communicator whose ranks all share one host: below 32 MiB with two
/// ranks and 64 MiB with three, else below `PIPECAST_HOST_MIN_BYTES` (default 4 MiB: measured
/// in docs/results-ompi.md), or below 16 MiB
/// when its ranks outnumber the host's CPUs by more than 2 (also measured there; the
/// CPUs are agreed through the bootstrap). [`pipecast_defer_reason`] says which. The same
/// value at every rank. Local: no communication. NULL gives 0.
///
/// # Safety
/// `comm` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn pipecast_defers_below(comm: *const pipecast_comm) -> u64 {
    // SAFETY: NULL or a live handle (caller contract); only read.
    match unsafe { comm.as_ref() } {
        Some(handle) => handle.comm.defers_below(),
        None => 0,
    }
}

/// A text about `comm` copied out as the C text getters do: NUL-terminated into `buf`,
/// truncated to `len` bytes, its full length returned; NULL `comm` gives 0 and writes nothing.
///
/// # Safety
/// `comm` must be NULL or a live handle; `buf` must be NULL or point to `len` writable bytes.
unsafe fn comm_text(
    comm: *const pipecast_comm,
    buf: *mut c_char,
    len: usize,
    text: impl FnOnce(&Comm) -> std::borrow::Cow<'_, str>,
) -> usize {
    // SAFETY: NULL or a live handle (caller contract); only read.
    match unsafe { comm.as_ref() } {
        // SAFETY: forwarded caller contract for `buf`.
        Some(handle) => unsafe { super::copy_out(&text(&handle.comm), buf, len) },
        None => 0,
    }
}

/// Copies into `buf` (NUL-terminated, truncated to `len` bytes) why
/// [`pipecast_defers_below`] says what it says, in words for the MPI glue's verbose 1, and
/// returns its full length (0: it never defers). For example: "every rank on one host, 8
/// ranks on 2 CPUs (more than 2 per CPU): broadcasts below 16777216 bytes go to the MPI's own
/// broadcast, …".
/// Local: no communication. NULL `comm` gives 0 and writes nothing.
///
/// # Safety
/// `comm` must be NULL or a live handle; `buf` must be NULL or point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pipecast_defer_reason(
    comm: *const pipecast_comm,
    buf: *mut c_char,
    len: usize,
) -> usize {
    // SAFETY: forwarded caller contract for `comm` and `buf`.
    unsafe { comm_text(comm, buf, len, |c| c.deferral_reason().into()) }
}

/// Copies the description of the links this rank's broadcasts run over into `buf`
/// (NUL-terminated, truncated to `len` bytes) and returns its full length: for example
/// `tcp`, `raweth:eth1`, `shm:cma` (every peer on this host, single copy), `shm:ring` or
/// `tcp+shm:cma` (TCP to other hosts, shared memory on this one). For the MPI glue's verbose
/// output. Local: no communication. NULL `comm` gives 0 and writes nothing.
///
/// # Safety
/// `comm` must be NULL or a live handle; `buf` must be NULL or point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pipecast_comm_link(
    comm: *const pipecast_comm,
    buf: *mut c_char,
    len: usize,
) -> usize {
    // SAFETY: forwarded caller contract for `comm` and `buf`.
    unsafe { comm_text(comm, buf, len, |c| c.transport().into()) }
}

/// Copies into `buf` (NUL-terminated, truncated to `len` bytes) why transport `auto` did not
/// take a faster link than the one [`pipecast_comm_link`] names, and returns its full length
/// (0: none was missed, or the transport was named). For example `not verbs at rank 0: no RDMA
/// device: ibv_get_device_list returned none; not raweth at rank 0: raw Ethernet needs the
/// CAP_NET_RAW capability …`. For the MPI glue's verbose 1. Local: no communication. NULL
/// `comm` gives 0 and writes nothing.
///
/// # Safety
/// `comm` must be NULL or a live handle; `buf` must be NULL or point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pipecast_comm_link_reason(
    comm: *const pipecast_comm,
    buf: *mut c_char,
    len: usize,
) -> usize {
    // SAFETY: forwarded caller contract for `comm` and `buf`.
    unsafe { comm_text(comm, buf, len, |c| c.link_reason().into()) }
}

/// Frees a communicator (NULL is ignored). Local: no communication. Its nonblocking
/// broadcasts still in flight complete (their requests stay valid). The engine of its
/// process lives on while another communicator on it (a view, or the one it is a view of)
/// lives: the last one freed, in any order, stops its thread and closes its connections.
///
/// # Safety
/// `comm` must be NULL or a handle from pipecast_comm_create or pipecast_comm_view not freed
/// before.
#[no_mangle]
pub unsafe extern "C" fn pipecast_comm_free(comm: *mut pipecast_comm) {
    if comm.is_null() {
        return;
    }
    let _ = boundary(|| {
        // SAFETY: a handle from Box::into_raw in pipecast_comm_create, freed once (contract).
        drop(unsafe { Box::from_raw(comm) });
        PIPECAST_OK
    });
}
