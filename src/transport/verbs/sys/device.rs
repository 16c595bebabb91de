//! The device context: the opened RDMA device (`ibv_open_device`) and its port.

use super::super::ops::{PortAddr, VerbsError};
pub use super::super::DeviceConfig;
use rdma_sys as ib;
use std::ffi::CStr;

/// An opened device; everything else holds it alive (`Arc<Context>`).
pub struct Context {
    pub(super) ptr: *mut ib::ibv_context,
    pub name: String,
}

// SAFETY: libibverbs contexts are thread-safe (rdma-core documents every verb as callable
// from any thread); the pointer is only closed in `Drop`.
unsafe impl Send for Context {}
// SAFETY: as above: shared use goes through thread-safe verbs.
unsafe impl Sync for Context {}

/// The errno text of the last failed call.
pub(super) fn errno() -> String {
    std::io::Error::last_os_error().to_string()
}

impl Context {
    /// Opens `config.device`, or the first device.
    pub fn open(config: &DeviceConfig) -> Result<Context, VerbsError> {
        let mut n: libc::c_int = 0;
        // SAFETY: `n` is a valid out-parameter; the list is freed below.
        let list = unsafe { ib::ibv_get_device_list(&mut n) };
        if list.is_null() || n <= 0 {
            let why = std::io::Error::last_os_error();
            if !list.is_null() {
                // SAFETY: a list returned by ibv_get_device_list, freed once.
                unsafe { ib::ibv_free_device_list(list) };
            }
            return Err(VerbsError::NoDevice(match why.raw_os_error() {
                Some(0) | None => String::new(),
                Some(_) => {
                    format!(" ({why}: does this host have an RDMA NIC and its kernel driver?)")
                }
            }));
        }
        // SAFETY: `list` holds `n` valid device pointers until it is freed.
        let devices: Vec<*mut ib::ibv_device> =
            (0..n as usize).map(|i| unsafe { *list.add(i) }).collect();
        let names: Vec<String> = devices
            .iter()
            // SAFETY: each device has a NUL-terminated name while the list lives.
            .map(|&d| unsafe { CStr::from_ptr(ib::ibv_get_device_name(d)) })
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        let pick = match &config.device {
            None => Some(0),
            Some(want) => names.iter().position(|n| n == want),
        };
        let result = match pick {
            None => Err(VerbsError::Call {
                call: "ibv_get_device_list",
                detail: format!(
                    "no RDMA device named {:?}: this host has {}",
                    config.device.as_deref().unwrap_or(""),
                    names.join(", ")
                ),
            }),
            Some(i) => {
                // SAFETY: a device of the live list.
                let ptr = unsafe { ib::ibv_open_device(devices[i]) };
                if ptr.is_null() {
                    Err(VerbsError::Call {
                        call: "ibv_open_device",
                        detail: format!("{}: {}", names[i], errno()),
                    })
                } else {
                    Ok(Context {
                        ptr,
                        name: names[i].clone(),
                    })
                }
            }
        };
        // SAFETY: freed once; the opened context does not need the list.
        unsafe { ib::ibv_free_device_list(list) };
        result
    }

    /// The port's address (LID, GID at the index) and active MTU; fails unless it is up.
    pub fn port(&self, config: &DeviceConfig) -> Result<(PortAddr, u32), VerbsError> {
        let port = config.port.max(1);
        // SAFETY: zeroed is a valid ibv_port_attr (plain integers).
        let mut attr: ib::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and a valid out-parameter.
        let rc = unsafe { ib::___ibv_query_port(self.ptr, port, &mut attr) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_query_port",
                detail: format!(
                    "{} port {port}: {}",
                    self.name,
                    std::io::Error::from_raw_os_error(rc)
                ),
            });
        }
        if attr.state != ib::ibv_port_state::IBV_PORT_ACTIVE {
            return Err(VerbsError::Call {
                call: "ibv_query_port",
                detail: format!(
                    "{} port {port} is not active (state {})",
                    self.name, attr.state
                ),
            });
        }
        // SAFETY: zeroed is a valid ibv_gid (bytes).
        let mut gid: ib::ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and a valid out-parameter.
        let rc =
            unsafe { ib::ibv_query_gid(self.ptr, port, i32::from(config.gid_index), &mut gid) };
        if rc != 0 {
            return Err(VerbsError::Call {
                call: "ibv_query_gid",
                detail: format!(
                    "{} port {port} GID index {}: {}",
                    self.name,
                    config.gid_index,
                    errno()
                ),
            });
        }
        // SAFETY: every bit pattern of the union is a valid byte array.
        let raw = unsafe { gid.raw };
        let addr = PortAddr {
            port,
            gid_index: config.gid_index,
            lid: attr.lid,
            gid: raw,
            mtu: attr.active_mtu as u8,
        };
        Ok((addr, attr.max_msg_sz))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: opened in `open`, closed once; every child object holds an `Arc<Context>`,
        // so none is alive any more.
        unsafe { ib::ibv_close_device(self.ptr) };
    }
}
