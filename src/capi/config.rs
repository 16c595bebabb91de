//! `pipecast_config`: the communicator configuration, from a struct or `PIPECAST_*` variables.

use super::{boundary, fail, pipecast_result};
use crate::comm::Settings;
use pipecast_result::*;
use std::ffi::{c_char, CStr, CString};
use std::sync::Mutex;

/// Communicator configuration. NULL strings and 0 numbers mean "the `PIPECAST_*` environment
/// variable, else the default"; set fields override the environment.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pipecast_config {
    /// "tcp" (default), "raweth", "raweth:IFACE" (e.g. "raweth:eth0") or "auto" (raweth when
    /// every rank can, else tcp). raweth needs CAP_NET_RAW and one NIC per rank
    /// (docs/raweth.md), hence not the default.
    pub transport: *const c_char,
    /// A tree name as `pipecast plan --tree` takes it; default "auto".
    pub tree: *const c_char,
    /// Segment size in bytes; 0 = chosen by the cost model.
    pub segment_bytes: u64,
    /// Topology file mapping ranks to machines; NULL = all ranks on one switch.
    pub topology: *const c_char,
    /// How long a peer may show no sign of life (its process dead, its connection closed, no
    /// answer to heartbeats) before a broadcast waiting for it fails; a rank that is merely
    /// late is waited for. 0 = `PIPECAST_TIMEOUT_MS`, else 5000.
    pub timeout_ms: u32,
    /// Calibration profile for the cost model: a file from `pipecast calibrate`, or
    /// "100mbit" / "1gbit" (seed 003 Table 2); NULL = "1gbit".
    pub profile: *const c_char,
    /// Where to listen: interface names or IPv4 subnets, comma-separated, like Open MPI's
    /// `btl_tcp_if_include` ("eth0", "198.18.0.0/16"). NULL = `PIPECAST_IFACE`, else the first
    /// interface that is up, not loopback and not named `mgmt*`, else 127.0.0.1.
    /// `PIPECAST_IP` (an address) overrides both.
    pub iface: *const c_char,
}

impl pipecast_config {
    /// Every field NULL or 0: "the default" throughout.
    pub(crate) fn empty() -> pipecast_config {
        pipecast_config {
            transport: std::ptr::null(),
            tree: std::ptr::null(),
            segment_bytes: 0,
            topology: std::ptr::null(),
            timeout_ms: 0,
            profile: std::ptr::null(),
            iface: std::ptr::null(),
        }
    }
}

/// The struct's settings as text (NULL strings and 0 numbers absent), to be laid over the
/// environment's ([`Settings::or`]). A string that is not UTF-8 is an error naming the field.
pub(crate) fn settings_from_c(cfg: &pipecast_config) -> Result<Settings, String> {
    let text = |ptr: *const c_char, what: &str| -> Result<Option<String>, String> {
        if ptr.is_null() {
            return Ok(None);
        }
        // SAFETY: the caller passes NULL or a NUL-terminated string that lives during the
        // call (documented on every function taking a config).
        let s = unsafe { CStr::from_ptr(ptr) };
        s.to_str()
            .map(|s| Some(s.to_string()).filter(|s| !s.trim().is_empty()))
            .map_err(|_| format!("config.{what} is not UTF-8"))
    };
    Ok(Settings {
        transport: text(cfg.transport, "transport")?,
        tree: text(cfg.tree, "tree")?,
        segment: (cfg.segment_bytes > 0).then(|| cfg.segment_bytes.to_string()),
        topology: text(cfg.topology, "topology")?,
        timeout_ms: (cfg.timeout_ms > 0).then(|| cfg.timeout_ms.to_string()),
        profile: text(cfg.profile, "profile")?,
        iface: text(cfg.iface, "iface")?,
        ..Settings::default()
    })
}

/// Checks `cfg` as communicator creation reads it (strings as UTF-8, then every setting
/// parsed and applied), without the environment and without creating anything: the fuzz
/// target `config` drives the C configuration through it.
///
/// # Safety
/// Every string field of `cfg` must be NULL or a NUL-terminated string that lives during the
/// call.
pub unsafe fn validate_config(cfg: &pipecast_config) -> Result<(), String> {
    let mut check = crate::comm::Config::default();
    settings_from_c(cfg)?
        .apply(&mut check)
        .map_err(|e| e.to_string())
}

/// Fills `config` with the defaults (everything NULL or 0).
///
/// # Safety
/// `config` must be NULL or point to a writable `pipecast_config`.
#[no_mangle]
pub unsafe extern "C" fn pipecast_config_default(config: *mut pipecast_config) {
    if config.is_null() {
        return;
    }
    // SAFETY: non-NULL and writable by the caller's contract.
    unsafe { config.write(pipecast_config::empty()) };
}

/// Strings handed out by [`pipecast_config_from_env`] live for the whole process.
static ENV_STRINGS: Mutex<Vec<CString>> = Mutex::new(Vec::new());

fn keep(value: String) -> Result<*const c_char, pipecast_result> {
    let c = CString::new(value).map_err(|_| {
        fail(
            PIPECAST_ERR_CONFIG,
            "a PIPECAST_* variable contains a NUL byte",
        )
    })?;
    let ptr = c.as_ptr();
    ENV_STRINGS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(c);
    Ok(ptr)
}

/// Reads `PIPECAST_TRANSPORT`, `PIPECAST_TREE`, `PIPECAST_SEGMENT` (bytes, K/M suffixes),
/// `PIPECAST_TOPOLOGY`, `PIPECAST_TIMEOUT_MS`, `PIPECAST_PROFILE` and `PIPECAST_IFACE` into `config` (defaults for unset ones) and
/// validates every `PIPECAST_*` setting; `config` is written only on success. The variables
/// are read and parsed by `comm::Settings`, as `pipecast_comm_create` reads them: a value one
/// accepts the other accepts.
///
/// # Safety
/// `config` must be NULL or point to a writable `pipecast_config`.
#[no_mangle]
pub unsafe extern "C" fn pipecast_config_from_env(config: *mut pipecast_config) -> pipecast_result {
    boundary(|| {
        if config.is_null() {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "config is NULL");
        }
        match config_of(&Settings::from_env()) {
            Ok(c) => {
                // SAFETY: non-NULL (checked) and writable by the caller's contract.
                unsafe { config.write(c) };
                PIPECAST_OK
            }
            Err(code) => code,
        }
    })
}

/// The C struct of `settings`, every one of them checked (the error names the variable).
fn config_of(settings: &Settings) -> Result<pipecast_config, pipecast_result> {
    let mut parsed = crate::comm::Config::default();
    settings
        .apply(&mut parsed)
        .map_err(|e| fail(PIPECAST_ERR_CONFIG, e.to_string()))?;
    let text = |v: &Option<String>| v.clone().map_or(Ok(std::ptr::null()), keep);
    Ok(pipecast_config {
        transport: text(&settings.transport)?,
        tree: text(&settings.tree)?,
        segment_bytes: parsed.segment.unwrap_or(0),
        topology: text(&settings.topology)?,
        timeout_ms: match settings.timeout_ms {
            // Settings bounds it to u32 milliseconds.
            Some(_) => u32::try_from(parsed.timeout.as_millis()).unwrap_or(u32::MAX),
            None => 0,
        },
        profile: text(&settings.profile)?,
        iface: text(&settings.iface)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_fields_become_settings() {
        let tree = CString::new("binary").unwrap();
        let bad = [0xffu8, 0];
        let mut c = pipecast_config {
            tree: tree.as_ptr(),
            segment_bytes: 4096,
            ..pipecast_config::empty()
        };
        let s = settings_from_c(&c).unwrap();
        assert_eq!(s.tree.as_deref(), Some("binary"));
        assert_eq!(s.segment.as_deref(), Some("4096"));
        assert_eq!(s.timeout_ms, None);
        c.iface = bad.as_ptr().cast();
        assert!(settings_from_c(&c).unwrap_err().contains("config.iface"));
    }

    /// `pipecast_config_from_env` parses as `pipecast_comm_create` does (blanks around a value
    /// ignored), and the struct it gives reads back as the same settings.
    #[test]
    fn the_environment_struct_is_the_settings() {
        let s = Settings::parse_assignments(
            "PIPECAST_TIMEOUT_MS= 5000 ;PIPECAST_SEGMENT=64K;PIPECAST_TREE=binary",
        )
        .unwrap();
        let c = config_of(&s).unwrap();
        assert_eq!((c.timeout_ms, c.segment_bytes), (5000, 65536));
        let back = settings_from_c(&c).unwrap();
        assert_eq!(back.tree.as_deref(), Some("binary"));
        let (mut a, mut b) = (
            crate::comm::Config::default(),
            crate::comm::Config::default(),
        );
        s.apply(&mut a).unwrap();
        back.apply(&mut b).unwrap();
        assert_eq!((a.timeout, a.segment), (b.timeout, b.segment));
        for bad in [
            "PIPECAST_TIMEOUT_MS=0",
            "PIPECAST_TIMEOUT_MS=4294967296",
            "PIPECAST_SEGMENT=lots",
            "PIPECAST_IO_URING=maybe",
            "PIPECAST_MACHINE=a b",
        ] {
            let s = Settings::parse_assignments(bad).unwrap();
            assert_eq!(config_of(&s).unwrap_err(), PIPECAST_ERR_CONFIG, "{bad}");
            let detail = super::super::LAST_ERROR.with(|e| e.borrow().clone());
            assert!(
                detail.contains(bad.split('=').next().unwrap()),
                "{bad}: {detail}"
            );
        }
    }
}
