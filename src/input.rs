//! Reading the files a user hands pipecast (topology, calibration profile, seed 004 platform,
//! Slurm topology.conf, lldpd dumps): with a size limit, so that `pipecast topo check /dev/zero`
//! or a runaway generator's output ends with a message instead of exhausting memory.
//!
//! This is the I/O edge of the pure parsers: [`crate::topology::parse_topology`],
//! [`crate::model::Profile::parse`] and [`crate::hetero::parse_platform`] take text; the readers
//! here open the file, refuse more than the limit they are given (the caller's
//! `PIPECAST_MAX_INPUT_BYTES`, read by `comm::Settings`, parsed by [`max_input_bytes`]) and wrap
//! errors with the path.

use crate::hetero::{parse_platform, HeteroError, Platform};
use crate::model::{ModelError, Profile};
use crate::topology::{parse_topology, Topology, TopologyError};
use std::io::Read;
use std::path::Path;

/// The environment variable that raises (or lowers) the input size limit, in bytes.
pub const MAX_INPUT_ENV: &str = "PIPECAST_MAX_INPUT_BYTES";

/// The default limit: 16 MiB holds a topology of ~300,000 machines (a 100,000-machine file is
/// ~5 MB), while a JSON value tree parsed from it stays within a few hundred MB.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 16 << 20;

/// The limit `value`, the text of `PIPECAST_MAX_INPUT_BYTES`, sets: a whole number of bytes,
/// optionally with a K/M/G suffix of powers of 1024; [`DEFAULT_MAX_INPUT_BYTES`] when unset
/// (`None`). `comm::settings::max_input_bytes` reads it from the environment.
pub fn max_input_bytes(value: Option<&str>) -> Result<u64, String> {
    match value {
        None => Ok(DEFAULT_MAX_INPUT_BYTES),
        Some(v) => parse_bytes(v).filter(|&n| n > 0).ok_or_else(|| {
            format!(
                "{MAX_INPUT_ENV}={v:?} is not a positive byte count: write e.g. 67108864 or 64M"
            )
        }),
    }
}

/// A size string: `65536`, `64K`, `64KB`, `64KiB`, `4M`, `1G` (binary multiples,
/// case-insensitive, surrounding blanks ignored); `None` for anything else or an overflow.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let lower = text.trim().to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let shift = match &lower[digits.len()..] {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return None,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// How a rate is written, for error messages: what [`parse_rate`] reads.
pub const RATE_SPELLING: &str = "a rate in bits per second as tc writes it (100mbit, 2.5gbit, \
10gbit; units bit, kbit, mbit, gbit, tbit, kibit … tibit; not tc's bps, kbps, …, which count \
bytes) or a bare number of Gbit/s (10)";

/// The longest rate text [`parse_rate`] reads (blanks around it not counted).
pub const MAX_RATE_CHARS: usize = 64;

/// A link rate in bits per second (tc(8), "RATES"): a decimal number (`100`, `2.5`, `.5`) and
/// a unit — `bit` (bits per second), `kbit`, `mbit`, `gbit`, `tbit` (10³ … 10¹²) or `kibit`,
/// `mibit`, `gibit`, `tibit` (2¹⁰ … 2⁴⁰) — so `100mbit`, `2.5gbit`, `10gbit`; or a bare number of
/// Gbit/s (`10`, `0.1`: what `pipecast sim --link-rate` took before it took units; tc itself
/// reads a bare number as bit/s). Case-insensitive; blanks around the text and before the unit
/// are ignored; the rate is rounded to a whole bit/s.
///
/// `None` for anything else: no digits, a sign or an exponent, more than [`MAX_RATE_CHARS`]
/// characters, a rate that rounds to 0 or does not fit in a `u64`, and tc's byte rates (`bps`,
/// `kbps`, `mbps`, `gbps`, `tbps` are bytes per second to tc but read as bits per second
/// elsewhere — a topology's `gbps` is Gbit/s — so neither reading would be safe). Callers say
/// what they accept with [`RATE_SPELLING`]; [`rate_name`] writes a rate back.
pub fn parse_rate(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.len() > MAX_RATE_CHARS {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    let number = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let scale: u128 = match &lower[number.len()..] {
        "" => 1_000_000_000,
        "bit" => 1,
        "kbit" => 1_000,
        "mbit" => 1_000_000,
        "gbit" => 1_000_000_000,
        "tbit" => 1_000_000_000_000,
        "kibit" => 1 << 10,
        "mibit" => 1 << 20,
        "gibit" => 1 << 30,
        "tibit" => 1 << 40,
        _ => return None,
    };
    let number = number.trim_end();
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = || whole.bytes().chain(fraction.bytes());
    if digits().next().is_none() || !digits().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Exactly, in integers: 2.5gbit = 25 × 10⁹ / 10.
    let mantissa = digits().try_fold(0u128, |n, b| {
        n.checked_mul(10)?.checked_add(u128::from(b - b'0'))
    })?;
    let divisor = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
    let bits = mantissa.checked_mul(scale)?.checked_add(divisor / 2)? / divisor;
    u64::try_from(bits).ok().filter(|&b| b > 0)
}

/// A rate of `bits_per_s` (positive) as tc writes it, in the largest SI unit that divides it
/// (`100mbit`, `2500mbit`, `10gbit`, `1234bit`); [`parse_rate`] reads it back.
pub fn rate_name(bits_per_s: u64) -> String {
    for (unit, scale) in [
        ("tbit", 1_000_000_000_000),
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
    ] {
        if bits_per_s >= scale && bits_per_s % scale == 0 {
            return format!("{}{unit}", bits_per_s / scale);
        }
    }
    format!("{bits_per_s}bit")
}

/// Reads a UTF-8 text file of at most `limit` bytes (see [`max_input_bytes`]). The error says
/// which limit was passed and how to raise it; it never reads more than one byte past the
/// limit.
pub fn read_text(path: &Path, limit: u64) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "larger than the input limit of {limit} bytes: set {MAX_INPUT_ENV}=BYTES (e.g. 256M) to read a larger file"
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// Reads and validates a topology file of at most `limit` bytes; errors carry the file name.
pub fn read_topology(path: &Path, limit: u64) -> Result<Topology, TopologyError> {
    let wrap = |e: TopologyError| TopologyError::File {
        path: path.display().to_string(),
        source: Box::new(e),
    };
    let text = read_text(path, limit).map_err(|e| wrap(TopologyError::Io(e)))?;
    parse_topology(&text).map_err(wrap)
}

/// Reads a calibration profile file of at most `limit` bytes; errors carry the path.
pub fn read_profile(path: &Path, limit: u64) -> Result<Profile, ModelError> {
    let wrap = |e: ModelError| ModelError::ProfileFile {
        path: path.display().to_string(),
        source: Box::new(e),
    };
    let text = read_text(path, limit)
        .map_err(|e| wrap(ModelError::ProfileJson(format!("cannot read: {e}"))))?;
    Profile::parse(&text).map_err(wrap)
}

/// A built-in profile name ([`crate::model::profile::BUILTIN_NAMES`]) or else a file path (of
/// at most `limit` bytes).
pub fn load_profile(spec: &str, limit: u64) -> Result<Profile, ModelError> {
    match Profile::builtin(spec) {
        Some(p) => Ok(p),
        None => read_profile(Path::new(spec), limit),
    }
}

/// Reads and parses a seed 004 platform file of at most `limit` bytes; errors name the file.
pub fn read_platform(path: &Path, limit: u64) -> Result<Platform, HeteroError> {
    let text = read_text(path, limit)
        .map_err(|e| HeteroError::Platform(format!("platform file {}: {e}", path.display())))?;
    parse_platform(&text).map_err(|e| match e {
        HeteroError::Platform(m) => {
            HeteroError::Platform(format!("platform file {}: {m}", path.display()))
        }
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_in_tc_spelling_or_bare_gbit() {
        for (text, bits) in [
            ("100mbit", 100_000_000),
            ("10gbit", 10_000_000_000),
            ("10Gbit", 10_000_000_000),
            (" 2.5gbit ", 2_500_000_000),
            ("500kbit", 500_000),
            ("1000000bit", 1_000_000),
            ("1tbit", 1_000_000_000_000),
            ("100 mbit", 100_000_000),
            ("1mibit", 1 << 20),
            ("2kibit", 2048),
            (".5gbit", 500_000_000),
            ("1.5bit", 2), // rounded to a whole bit/s
            // A bare number is Gbit/s (`sim --link-rate` before units).
            ("10", 10_000_000_000),
            ("0.1", 100_000_000),
            ("1.", 1_000_000_000),
            ("18446744073709551615bit", u64::MAX),
        ] {
            assert_eq!(parse_rate(text), Some(bits), "{text}");
            assert_eq!(parse_rate(&rate_name(bits)), Some(bits), "{text}");
        }
        for bad in [
            "",
            " ",
            "mbit",
            ".",
            "1.2.3gbit",
            "fast",
            "-1gbit",
            "+1gbit",
            "1e3",
            "1e3bit",
            "nan",
            "inf",
            "infgbit",
            "0",
            "0mbit",
            "0.0000000001bit",
            "10gbps", // tc: 10 GB/s; a topology's gbps: Gbit/s
            "100mbps",
            "1bps",
            "100mb",
            "100m",
            "18446744073709551616bit",
            "20000000000gbit",
            "1gbit1",
            "1 0gbit",
            "1٠gbit",
            "１gbit",
        ] {
            assert_eq!(parse_rate(bad), None, "{bad:?}");
        }
        // Bounded: long text is refused before any arithmetic.
        assert_eq!(parse_rate(&"9".repeat(1 << 20)), None);
        assert_eq!(parse_rate(&format!("0.{}1gbit", "0".repeat(40))), None);
        assert_eq!(
            parse_rate(&format!("{}1gbit", "0".repeat(50))),
            Some(1_000_000_000)
        );
        assert_eq!(rate_name(100_000_000), "100mbit");
        assert_eq!(rate_name(2_500_000_000), "2500mbit");
        assert_eq!(rate_name(1234), "1234bit");
        assert_eq!(rate_name(3 << 20), "3145728bit");
    }

    #[test]
    fn file_errors_carry_the_path() {
        let limit = DEFAULT_MAX_INPUT_BYTES;
        let e = read_topology(Path::new("/nonexistent/t.json"), limit)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/nonexistent/t.json: cannot read"), "{e}");
        let e = read_profile(Path::new("/nonexistent/p.json"), limit).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/p.json"), "{e}");
        let e = read_platform(Path::new("/nonexistent/q.json"), limit).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/q.json"), "{e}");
    }

    #[test]
    fn an_endless_file_is_refused_at_the_limit() {
        let e = read_text(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(
            e.contains("1048576 bytes") && e.contains(MAX_INPUT_ENV),
            "{e}"
        );
    }

    #[test]
    fn the_limit_setting() {
        assert_eq!(max_input_bytes(None), Ok(DEFAULT_MAX_INPUT_BYTES));
        assert_eq!(max_input_bytes(Some(" 64M")), Ok(64 << 20));
        for bad in ["0", "lots", "-1"] {
            let e = max_input_bytes(Some(bad)).unwrap_err();
            assert!(e.contains(&format!("{MAX_INPUT_ENV}={bad:?}")), "{e}");
        }
    }

    #[test]
    fn a_file_at_the_limit_is_read() {
        let dir = std::env::temp_dir().join(format!("pipecast-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.txt");
        std::fs::write(&path, "abcd").unwrap();
        assert_eq!(read_text(&path, 4).unwrap(), "abcd");
        assert!(read_text(&path, 3).is_err());
        std::fs::write(&path, [0xffu8, 0xfe]).unwrap();
        assert!(read_text(&path, 4).unwrap_err().contains("UTF-8"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("64M"), Some(64 << 20));
        assert_eq!(parse_bytes(" 1000 "), Some(1000));
        assert_eq!(parse_bytes("2g"), Some(2 << 30));
        assert_eq!(parse_bytes("64KiB"), Some(65536));
        assert_eq!(parse_bytes("64kb"), Some(65536));
        assert_eq!(parse_bytes("0"), Some(0));
        for bad in ["", "M", "-1", "+1", "1.5M", "12X", "99999999999999G", "1 M"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
    }
}
