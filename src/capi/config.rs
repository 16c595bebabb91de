//! `pipecast_config`: the communicator configuration, from a struct or `PIPECAST_*` variables.

use super::{boundary, fail, opt_str, pipecast_result};
use crate::plan::TreeKind;
use pipecast_result::*;
use std::ffi::{c_char, CString};
use std::path::PathBuf;
use std::sync::Mutex;

/// Communicator configuration. NULL strings and 0 numbers mean "the default".
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pipecast_config {
    /// "tcp" (default), "raweth", "raweth:IFACE" (e.g. "raweth:eth0"), "auto" (raweth when
    /// every rank can, else tcp) or "verbs". raweth needs CAP_NET_RAW and one NIC per rank
    /// (docs/raweth.md), hence not the default.
    pub transport: *const c_char,
    /// A tree name as `pipecast plan --tree` takes it; default "auto".
    pub tree: *const c_char,
    /// Segment size in bytes; 0 = chosen by the cost model.
    pub segment_bytes: u64,
    /// Topology file mapping ranks to machines; NULL = all ranks on one switch.
    pub topology: *const c_char,
    /// A broadcast that makes no progress for this long fails at every rank; 0 = 5000.
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

/// The configuration as Rust values, validated.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    pub transport: String,
    pub tree: TreeKind,
    pub segment_bytes: Option<u64>,
    pub topology: Option<PathBuf>,
    pub timeout_ms: u32,
    pub profile: Option<String>,
    pub iface: Option<String>,
}

pub(crate) const TRANSPORTS: [&str; 4] = ["auto", "tcp", "raweth", "verbs"];

impl Settings {
    pub(crate) fn from_c(cfg: &pipecast_config) -> Result<Settings, pipecast_result> {
        let transport = opt_str(cfg.transport, "config.transport")?.unwrap_or_else(|| "tcp".into());
        let named_iface = transport
            .strip_prefix("raweth:")
            .is_some_and(|iface| !iface.is_empty());
        if !TRANSPORTS.contains(&transport.as_str()) && !named_iface {
            return Err(fail(
                PIPECAST_ERR_CONFIG,
                format!(
                    "transport {transport:?}: use one of {} or raweth:IFACE",
                    TRANSPORTS.join(", ")
                ),
            ));
        }
        let tree = opt_str(cfg.tree, "config.tree")?.unwrap_or_else(|| "auto".into());
        let tree = tree
            .parse::<TreeKind>()
            .map_err(|e| fail(PIPECAST_ERR_CONFIG, e.to_string()))?;
        Ok(Settings {
            transport,
            tree,
            segment_bytes: (cfg.segment_bytes > 0).then_some(cfg.segment_bytes),
            topology: opt_str(cfg.topology, "config.topology")?.map(PathBuf::from),
            timeout_ms: if cfg.timeout_ms == 0 {
                5000
            } else {
                cfg.timeout_ms
            },
            profile: opt_str(cfg.profile, "config.profile")?,
            iface: opt_str(cfg.iface, "config.iface")?,
        })
    }
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

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Reads `PIPECAST_TRANSPORT`, `PIPECAST_TREE`, `PIPECAST_SEGMENT` (bytes, K/M suffixes),
/// `PIPECAST_TOPOLOGY`, `PIPECAST_TIMEOUT_MS`, `PIPECAST_PROFILE` and `PIPECAST_IFACE` into `config` (defaults for unset ones) and
/// validates the result; `config` is written only on success.
///
/// # Safety
/// `config` must be NULL or point to a writable `pipecast_config`.
#[no_mangle]
pub unsafe extern "C" fn pipecast_config_from_env(config: *mut pipecast_config) -> pipecast_result {
    boundary(|| {
        if config.is_null() {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "config is NULL");
        }
        let build = || -> Result<pipecast_config, pipecast_result> {
            let mut c = pipecast_config::empty();
            if let Some(v) = env("PIPECAST_PROFILE") {
                c.profile = keep(v)?;
            }
            if let Some(v) = env("PIPECAST_TRANSPORT") {
                c.transport = keep(v)?;
            }
            if let Some(v) = env("PIPECAST_IFACE") {
                c.iface = keep(v)?;
            }
            if let Some(v) = env("PIPECAST_TREE") {
                c.tree = keep(v)?;
            }
            if let Some(v) = env("PIPECAST_TOPOLOGY") {
                c.topology = keep(v)?;
            }
            if let Some(v) = env("PIPECAST_SEGMENT") {
                c.segment_bytes = parse_bytes(&v).ok_or_else(|| {
                    fail(
                        PIPECAST_ERR_CONFIG,
                        format!("PIPECAST_SEGMENT={v:?}: expected bytes such as 65536 or 64K"),
                    )
                })?;
            }
            if let Some(v) = env("PIPECAST_TIMEOUT_MS") {
                c.timeout_ms = v.parse().map_err(|_| {
                    fail(
                        PIPECAST_ERR_CONFIG,
                        format!("PIPECAST_TIMEOUT_MS={v:?}: expected milliseconds"),
                    )
                })?;
            }
            Settings::from_c(&c)?;
            Ok(c)
        };
        match build() {
            Ok(c) => {
                // SAFETY: non-NULL (checked) and writable by the caller's contract.
                unsafe { config.write(c) };
                PIPECAST_OK
            }
            Err(code) => code,
        }
    })
}

/// `65536`, `64K`, `4M`, `1G` (binary multiples).
pub(crate) fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'K' | 'k') => (&t[..i], 10),
        (i, 'M' | 'm') => (&t[..i], 20),
        (i, 'G' | 'g') => (&t[..i], 30),
        _ => (t, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_with_suffixes() {
        assert_eq!(parse_bytes("64K"), Some(65536));
        assert_eq!(parse_bytes("3"), Some(3));
        assert_eq!(parse_bytes("2M"), Some(2 << 20));
        assert_eq!(parse_bytes("x"), None);
        assert_eq!(parse_bytes(""), None);
    }

    #[test]
    fn settings_are_validated() {
        let tree = CString::new("binary").unwrap();
        let mut c = pipecast_config {
            tree: tree.as_ptr(),
            ..pipecast_config::empty()
        };
        let s = Settings::from_c(&c).unwrap();
        assert_eq!(s.tree, TreeKind::Binary);
        assert_eq!(s.timeout_ms, 5000);
        let named = CString::new("raweth:eth0").unwrap();
        c.transport = named.as_ptr();
        assert_eq!(Settings::from_c(&c).unwrap().transport, "raweth:eth0");
        for bad in ["carrier-pigeon", "raweth:", "tcp:eth0"] {
            let bad = CString::new(bad).unwrap();
            c.transport = bad.as_ptr();
            assert_eq!(Settings::from_c(&c), Err(PIPECAST_ERR_CONFIG));
        }
    }
}
