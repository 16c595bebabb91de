//! `pipecast_glue_settings`: the MPI glue's own settings (`ffi/common/pipecast_glue.h`), read and
//! checked by [`GlueSettings`] so that the C glue reads no environment variable of its own.

use super::{boundary, fail, pipecast_result};
use crate::comm::settings::GlueSettings;
use pipecast_result::*;

/// The MPI glue's settings: which broadcasts it gives pipecast and how its point-to-point path
/// moves the mid-size ones. Every rank of a communicator must have the same (the glue compares
/// them at its first broadcast, and turns pipecast off at every rank when they differ).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct pipecast_glue_settings {
    /// Smaller broadcasts go to the MPI's own (`PIPECAST_MIN_BYTES`, default 65536).
    pub min_bytes: i64,
    /// From `min_bytes` up to this, pipecast's tree over the MPI's point-to-point layer
    /// (`PIPECAST_PML_BELOW`, default 524288; 0: never).
    pub pml_below: i64,
    /// Its segment size (`PIPECAST_PML_SEGMENT`, default 16384; 0: the cost model's; at most
    /// 2147483647).
    pub pml_segment: i64,
    /// Its receives posted ahead and sends in flight per child (`PIPECAST_PML_WINDOW`, 1 to 16,
    /// default 4).
    pub pml_window: i64,
}

impl From<GlueSettings> for pipecast_glue_settings {
    fn from(s: GlueSettings) -> pipecast_glue_settings {
        // GlueSettings keeps every value below i64::MAX.
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        pipecast_glue_settings {
            min_bytes: i(s.min_bytes),
            pml_below: i(s.pml_below),
            pml_segment: i(s.pml_segment),
            pml_window: i(s.pml_window),
        }
    }
}

/// Fills `settings` with the defaults.
///
/// # Safety
/// `settings` must be NULL or point to a writable `pipecast_glue_settings`.
#[no_mangle]
pub unsafe extern "C" fn pipecast_glue_settings_default(settings: *mut pipecast_glue_settings) {
    if settings.is_null() {
        return;
    }
    // SAFETY: non-NULL and writable by the caller's contract.
    unsafe { settings.write(GlueSettings::default().into()) };
}

/// Reads `PIPECAST_MIN_BYTES`, `PIPECAST_PML_BELOW`, `PIPECAST_PML_SEGMENT` (bytes, K/M/G
/// suffixes), `PIPECAST_PML_WINDOW` and `PIPECAST_VERBOSE` (0 silent, 1 selection and summary,
/// 2 every broadcast; more counts as 9) as every `PIPECAST_*` variable is read: blanks around a
/// value ignored, an empty one unset. Unlike other calls, both out-parameters are written even
/// on failure: every value that parsed, the default for one that did not, so that a rank with a
/// bad value still joins the glue's agreement (where it votes pipecast off) and says why at its
/// verbosity. A bad value returns `PIPECAST_ERR_CONFIG`, and `pipecast_last_error` names the
/// variable, its value and what it expected.
///
/// # Safety
/// `settings` and `verbose` must each be NULL or point to a writable object of their type.
#[no_mangle]
pub unsafe extern "C" fn pipecast_glue_settings_from_env(
    settings: *mut pipecast_glue_settings,
    verbose: *mut i32,
) -> pipecast_result {
    boundary(|| {
        if settings.is_null() || verbose.is_null() {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "settings or verbose is NULL");
        }
        let (read, level, outcome) = GlueSettings::from_env();
        // SAFETY: both non-NULL (checked) and writable by the caller's contract.
        unsafe {
            settings.write(read.into());
            verbose.write(i32::try_from(level).unwrap_or(i32::MAX));
        }
        match outcome {
            Ok(()) => PIPECAST_OK,
            Err(e) => fail(PIPECAST_ERR_CONFIG, e.to_string()),
        }
    })
}

/// `PIPECAST_OK` when `settings` are usable (each from 0, `pml_segment` at most 2147483647,
/// `pml_window` from 1 to 16), else `PIPECAST_ERR_CONFIG` with the reason in
/// `pipecast_last_error`: the Open MPI component checks its MCA parameters here.
///
/// # Safety
/// `settings` must be NULL or point to a readable `pipecast_glue_settings`.
#[no_mangle]
pub unsafe extern "C" fn pipecast_glue_settings_check(
    settings: *const pipecast_glue_settings,
) -> pipecast_result {
    boundary(|| {
        if settings.is_null() {
            return fail(PIPECAST_ERR_NULL_ARGUMENT, "settings is NULL");
        }
        // SAFETY: non-NULL (checked) and readable by the caller's contract.
        let s = unsafe { settings.read() };
        match GlueSettings::check(s.min_bytes, s.pml_below, s.pml_segment, s.pml_window) {
            Ok(_) => PIPECAST_OK,
            Err(why) => fail(PIPECAST_ERR_CONFIG, why),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        super::super::LAST_ERROR.with(|e| e.borrow().clone())
    }

    /// The defaults pass the check; each bound fails it with its reason; NULL is refused.
    #[test]
    fn check_bounds_each_setting() {
        let mut s = pipecast_glue_settings {
            min_bytes: -5,
            pml_below: 0,
            pml_segment: 0,
            pml_window: 0,
        };
        // SAFETY: a live local.
        unsafe { pipecast_glue_settings_default(&mut s) };
        assert_eq!(s, GlueSettings::default().into());
        assert_eq!((s.min_bytes, s.pml_window), (65536, 4));
        // SAFETY: a live local.
        assert_eq!(unsafe { pipecast_glue_settings_check(&s) }, PIPECAST_OK);
        for (mutate, says) in [
            (
                (|s: &mut pipecast_glue_settings| s.min_bytes = -1) as fn(&mut _),
                "must be from 0",
            ),
            (|s| s.pml_below = i64::MIN, "must be from 0"),
            (|s| s.pml_segment = 1 << 31, "pml_segment 2147483648"),
            (|s| s.pml_window = 0, "pml_window 0 is not from 1 to 16"),
            (|s| s.pml_window = 17, "pml_window 17 is not from 1 to 16"),
        ] {
            let mut bad = s;
            mutate(&mut bad);
            // SAFETY: a live local.
            assert_eq!(
                unsafe { pipecast_glue_settings_check(&bad) },
                PIPECAST_ERR_CONFIG
            );
            assert!(last_error().contains(says), "{bad:?}: {}", last_error());
        }
        // SAFETY: NULL is allowed and refused.
        unsafe {
            assert_eq!(
                pipecast_glue_settings_check(std::ptr::null()),
                PIPECAST_ERR_NULL_ARGUMENT
            );
            assert_eq!(
                pipecast_glue_settings_from_env(std::ptr::null_mut(), std::ptr::null_mut()),
                PIPECAST_ERR_NULL_ARGUMENT
            );
            pipecast_glue_settings_default(std::ptr::null_mut());
        }
    }

    /// The environment read through the C call: blanks ignored, byte suffixes, the verbosity
    /// capped; a bad value is PIPECAST_ERR_CONFIG naming it, with both outputs still written
    /// (the other values read, the bad one at its default). The only test reading these
    /// variables, so setting them here races with nothing.
    #[test]
    fn from_env_reads_writes_and_names_the_bad_value() {
        let set = |pairs: &[(&str, &str)]| {
            for name in crate::comm::settings::GLUE_VARIABLES {
                std::env::remove_var(name);
            }
            for (n, v) in pairs {
                std::env::set_var(n, v);
            }
        };
        let run = || {
            let mut s = pipecast_glue_settings {
                min_bytes: -1,
                pml_below: -1,
                pml_segment: -1,
                pml_window: -1,
            };
            let mut verbose = -1;
            // SAFETY: live locals.
            let rc = unsafe { pipecast_glue_settings_from_env(&mut s, &mut verbose) };
            (rc, s, verbose)
        };
        set(&[]);
        assert_eq!(run(), (PIPECAST_OK, GlueSettings::default().into(), 0));
        set(&[
            ("PIPECAST_MIN_BYTES", " 64K "),
            ("PIPECAST_PML_BELOW", "\t0"),
            ("PIPECAST_PML_SEGMENT", "  "),
            ("PIPECAST_PML_WINDOW", "1 "),
            ("PIPECAST_VERBOSE", "100"),
        ]);
        let (rc, s, verbose) = run();
        assert_eq!((rc, verbose), (PIPECAST_OK, 9));
        assert_eq!(
            (s.min_bytes, s.pml_below, s.pml_segment, s.pml_window),
            (65536, 0, 16384, 1)
        );
        set(&[
            ("PIPECAST_PML_BELOW", "lots"),
            ("PIPECAST_VERBOSE", "1"),
            ("PIPECAST_PML_WINDOW", "2"),
        ]);
        let (rc, s, verbose) = run();
        assert_eq!(
            (rc, verbose, s.pml_below, s.pml_window),
            (PIPECAST_ERR_CONFIG, 1, 524288, 2)
        );
        assert!(
            last_error().contains("PIPECAST_PML_BELOW") && last_error().contains("lots"),
            "{}",
            last_error()
        );
        set(&[("PIPECAST_PML_WINDOW", "99")]);
        assert_eq!(run().0, PIPECAST_ERR_CONFIG);
        assert!(last_error().contains("from 1 to 16"), "{}", last_error());
        set(&[]);
    }
}
