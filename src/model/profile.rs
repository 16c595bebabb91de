//! The calibration profile: L(m) and g(m) of seed 003 §4.2 measured at a few message sizes
//! (`../shared/seeds/003_f72e5e0868946953.txt` §5.1, Table 2). JSON contract of DESIGN.md:
//!
//! ```json
//! { "points": [ {"bytes": 256, "L_us": 110.0, "g_us": 30.0}, {"bytes": 512, "L_us": 156.0, "g_us": 51.0} ] }
//! ```
//!
//! The profile's sizes are the model's candidate segment sizes. For other sizes (whole-message
//! baselines, a last short segment) [`Profile::cost`] interpolates linearly between points; below
//! the smallest point it holds that point's values; above the largest it extrapolates g linearly
//! from the last two points (g grows with the bytes on the wire) and holds L at its last value
//! (L is a latency; extrapolating it can turn negative, as seed 003's 1 Gbit/s L(m) falls from
//! 8 KB on).
//!
//! An optional `"memcpy_GB_s"` (10⁹ bytes/s, default [`DEFAULT_MEMCPY_GB_S`]) is the copy
//! bandwidth of one rank reading a segment from its host leader's buffer, the in-host stage of
//! two-level plans (`model::two_level`). Profiles without it load as before.
//!
//! An optional `"segment_cpu_us"` is the CPU time a rank spends on each network segment it
//! sends or receives (seed 003 §4.2's o_s(m), o_r(m)). A profile that states it has the model
//! charge it on one NIC too (a round costs at least a rank's ends times it, `model::predict`);
//! one that does not is seed 003's model on one NIC, whose g(m) already covers the overheads
//! (g ≥ o_s, o_r), and only plans on several NICs at once, sharing the rank's CPU, are charged
//! [`DEFAULT_SEGMENT_CPU_US`] ([`Profile::stated_segment_cpu_us`], [`Profile::segment_cpu_us`]).

use super::ModelError;
use serde::{Deserialize, Serialize};

/// One measured size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Message size in bytes.
    pub bytes: u64,
    /// L(m) in microseconds: end-to-end latency (RTT/2 − g).
    #[serde(rename = "L_us")]
    pub l_us: f64,
    /// g(m) in microseconds: the gap between consecutive messages of this size.
    pub g_us: f64,
}

/// L and g for one message size, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    pub l_us: f64,
    pub g_us: f64,
}

/// Copy bandwidth of the in-host stage when a profile gives none, in GB/s (10⁹ bytes/s): a
/// conservative single-thread `memcpy`/`process_vm_readv` of cache-cold segments on a current
/// server (one core streams 5–15 GB/s; several local ranks copy at once and share the bus).
pub const DEFAULT_MEMCPY_GB_S: f64 = 5.0;

/// What each in-host segment costs besides its bytes: the writer's record on the pair's
/// socket, the reader's wake-up, its `process_vm_readv` call and its share of a credit
/// (about 10 µs on this project's machines). Without it the model would cut a message on one
/// host into the smallest segments (measured: 256-byte segments made 16 MiB 47× slower than
/// one whole-message copy per rank).
pub const COPY_OVERHEAD_US: f64 = 10.0;

/// CPU time of one rank per network segment it sends or receives, in µs, charged to plans on
/// several NICs when a profile gives none (`"segment_cpu_us"`; on one NIC such a profile's g(m)
/// covers it, seed 003 §4.2): 12 µs, measured on this project's machines — 10 broadcasts of
/// 4 MiB over TCP in 4 KiB segments (`linear` on the 16-machine lab) cost 4.0 s of CPU over all
/// ranks (docs/results-lab.md), 4.0 s / (10 × 1024 segments × 16 ranks × 2 ends) ≈ 12 µs.
pub const DEFAULT_SEGMENT_CPU_US: f64 = 12.0;

/// A calibration profile: at least one point, sizes strictly increasing, every size and g
/// positive, every L non-negative and finite, the copy bandwidth (if given) positive.
/// Deserializing validates; a profile built by hand can be checked with [`Profile::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawProfile")]
pub struct Profile {
    pub points: Vec<Point>,
    /// In-host copy bandwidth in GB/s (`"memcpy_GB_s"`); `None`: [`DEFAULT_MEMCPY_GB_S`].
    #[serde(
        rename = "memcpy_GB_s",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub memcpy_gb_s: Option<f64>,
    /// CPU µs per network segment sent or received (`"segment_cpu_us"`); `None`: not stated,
    /// g(m) covers it on one NIC and [`DEFAULT_SEGMENT_CPU_US`] is charged on several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_cpu_us: Option<f64>,
}

/// The JSON shape before validation.
#[derive(Deserialize)]
struct RawProfile {
    points: Vec<Point>,
    #[serde(rename = "memcpy_GB_s", default)]
    memcpy_gb_s: Option<f64>,
    #[serde(default)]
    segment_cpu_us: Option<f64>,
}

impl TryFrom<RawProfile> for Profile {
    type Error = ModelError;
    fn try_from(raw: RawProfile) -> Result<Profile, ModelError> {
        let profile = Profile {
            points: raw.points,
            memcpy_gb_s: raw.memcpy_gb_s,
            segment_cpu_us: raw.segment_cpu_us,
        };
        profile.validate()?;
        Ok(profile)
    }
}

/// The largest L or g a profile accepts, in microseconds (1000 s): far above any network's, far
/// enough below `f64::MAX` that the model's sums over segments and ranks stay finite (a g of
/// 1e308 made every cost infinite and `bench` pick 1-byte segments).
pub const MAX_US: f64 = 1e9;

/// Names accepted by [`Profile::builtin`].
pub const BUILTIN_NAMES: &str = "100mbit, 1gbit";

const TABLE2_100MBIT: &str = include_str!("../../profiles/table2-100mbit.json");
const TABLE2_1GBIT: &str = include_str!("../../profiles/table2-1gbit.json");

impl Profile {
    /// A profile from points, validated.
    pub fn new(points: Vec<Point>) -> Result<Profile, ModelError> {
        let profile = Profile {
            points,
            memcpy_gb_s: None,
            segment_cpu_us: None,
        };
        profile.validate()?;
        Ok(profile)
    }

    /// Checks the invariants; errors name the offending point.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.points.is_empty() {
            return Err(ModelError::EmptyProfile);
        }
        if let Some(bw) = self.memcpy_gb_s {
            if !(1e-6..=1e6).contains(&bw) {
                return Err(ModelError::Profile(format!(
                    "memcpy_GB_s is {bw}, it must be a number of GB/s (10^9 bytes/s) from 1e-6 to 1e6"
                )));
            }
        }
        if let Some(cpu) = self.segment_cpu_us {
            if !(0.0..=MAX_US).contains(&cpu) {
                return Err(ModelError::Profile(format!(
                    "segment_cpu_us is {cpu}, it must be a non-negative number of microseconds, at most 1e9 (1000 s)"
                )));
            }
        }
        for (index, p) in self.points.iter().enumerate() {
            let bad = |field: &'static str, value: f64, need: &'static str| ModelError::BadPoint {
                index,
                bytes: p.bytes,
                field,
                value,
                need,
            };
            if p.bytes == 0 {
                return Err(bad("bytes", 0.0, "a positive size"));
            }
            if !(p.g_us > 0.0 && p.g_us <= MAX_US) {
                return Err(bad(
                    "g_us",
                    p.g_us,
                    "a positive number of microseconds, at most 1e9 (1000 s)",
                ));
            }
            if !(0.0..=MAX_US).contains(&p.l_us) {
                return Err(bad(
                    "L_us",
                    p.l_us,
                    "a non-negative number of microseconds, at most 1e9 (1000 s)",
                ));
            }
            if index > 0 && p.bytes <= self.points[index - 1].bytes {
                return Err(ModelError::UnsortedProfile {
                    index,
                    bytes: p.bytes,
                    previous: self.points[index - 1].bytes,
                });
            }
        }
        Ok(())
    }

    /// Parses and validates profile JSON.
    pub fn parse(text: &str) -> Result<Profile, ModelError> {
        let raw: RawProfile =
            serde_json::from_str(text).map_err(|e| ModelError::ProfileJson(e.to_string()))?;
        Profile::try_from(raw)
    }

    /// Seed 003 Table 2: `"100mbit"` (Fast Ethernet) or `"1gbit"` (Gigabit Ethernet) columns.
    pub fn builtin(name: &str) -> Option<Profile> {
        let text = match name {
            "100mbit" => TABLE2_100MBIT,
            "1gbit" => TABLE2_1GBIT,
            _ => return None,
        };
        Some(Profile::parse(text).expect("the shipped Table 2 profiles are valid"))
    }

    /// Pretty JSON in the contract's shape.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile serializes")
    }

    /// Microseconds for one local rank to copy `bytes` from its leader's buffer.
    pub fn copy_us(&self, bytes: u64) -> f64 {
        COPY_OVERHEAD_US + bytes as f64 / (self.memcpy_gb_s.unwrap_or(DEFAULT_MEMCPY_GB_S) * 1000.0)
    }

    /// CPU µs of one rank per network segment it sends or receives, if the profile states it
    /// (`"segment_cpu_us"`, or a measurement of this host). `None`: the profile is seed 003's,
    /// whose g(m) already covers the overheads on one NIC (§4.2).
    pub fn stated_segment_cpu_us(&self) -> Option<f64> {
        self.segment_cpu_us
    }

    /// CPU µs of one rank per network segment it sends or receives: the stated cost, else
    /// [`DEFAULT_SEGMENT_CPU_US`] (what plans on several NICs are charged; on one NIC the model
    /// charges only a stated cost, [`Profile::stated_segment_cpu_us`]).
    pub fn segment_cpu_us(&self) -> f64 {
        self.stated_segment_cpu_us()
            .unwrap_or(DEFAULT_SEGMENT_CPU_US)
    }

    /// The candidate segment sizes.
    pub fn sizes(&self) -> impl Iterator<Item = u64> + '_ {
        self.points.iter().map(|p| p.bytes)
    }

    /// L(m) and g(m) for any size (see the module doc for inter- and extrapolation).
    pub fn cost(&self, bytes: u64) -> Cost {
        let pts = &self.points;
        let Some(&first) = pts.first() else {
            return Cost {
                l_us: 0.0,
                g_us: 0.0,
            }; // an unvalidated empty profile: nothing is known
        };
        let last = pts[pts.len() - 1];
        let at = |p: Point| Cost {
            l_us: p.l_us,
            g_us: p.g_us,
        };
        if bytes <= first.bytes {
            return at(first);
        }
        if bytes >= last.bytes {
            let slope = if pts.len() >= 2 {
                let prev = pts[pts.len() - 2];
                (last.g_us - prev.g_us) / (last.bytes - prev.bytes) as f64
            } else {
                last.g_us / last.bytes as f64
            };
            let g = last.g_us + slope * (bytes - last.bytes) as f64;
            return Cost {
                l_us: last.l_us,
                g_us: g.max(last.g_us),
            };
        }
        let i = pts.partition_point(|p| p.bytes <= bytes);
        let (a, b) = (pts[i - 1], pts[i]);
        let t = (bytes - a.bytes) as f64 / (b.bytes - a.bytes) as f64;
        Cost {
            l_us: a.l_us + t * (b.l_us - a.l_us),
            g_us: a.g_us + t * (b.g_us - a.g_us),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_table2() {
        let p = Profile::builtin("100mbit").unwrap();
        assert_eq!(p.points.len(), 8);
        assert_eq!(
            p.points[0],
            Point {
                bytes: 256,
                l_us: 110.0,
                g_us: 30.0
            }
        );
        let g = Profile::builtin("1gbit").unwrap();
        assert_eq!(g.points[7].bytes, 32768);
        assert_eq!(g.points[7].g_us, 541.0);
        assert!(Profile::builtin("10gbit").is_none());
    }

    #[test]
    fn json_round_trip_uses_contract_names() {
        let text = r#"{"points":[{"bytes":256,"L_us":110.0,"g_us":30.0},{"bytes":512,"L_us":156.0,"g_us":51.0}]}"#;
        let p = Profile::parse(text).unwrap();
        assert_eq!(p.points[1].l_us, 156.0);
        let again = Profile::parse(&p.to_json()).unwrap();
        assert_eq!(again, p);
        assert!(p.to_json().contains("\"L_us\""));
    }

    #[test]
    fn validation_names_the_point() {
        let err = Profile::parse(r#"{"points":[]}"#).unwrap_err();
        assert!(matches!(err, ModelError::EmptyProfile), "{err}");
        let err = Profile::parse(
            r#"{"points":[{"bytes":256,"L_us":1,"g_us":2},{"bytes":512,"L_us":1,"g_us":0}]}"#,
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                ModelError::BadPoint {
                    index: 1,
                    field: "g_us",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("512"), "{err}");
        let err = Profile::parse(r#"{"points":[{"bytes":0,"L_us":1,"g_us":2}]}"#).unwrap_err();
        assert!(matches!(err, ModelError::BadPoint { field: "bytes", .. }));
        let err = Profile::parse(r#"{"points":[{"bytes":8,"L_us":-1,"g_us":2}]}"#).unwrap_err();
        assert!(matches!(err, ModelError::BadPoint { field: "L_us", .. }));
        // Issue 14: an L or g of 1e308 made every cost infinite (bench chose 1-byte segments).
        for (l, g, field) in [
            ("1e308", "2", "L_us"),
            ("1", "1e308", "g_us"),
            ("1", "1e10", "g_us"),
        ] {
            let text = format!(r#"{{"points":[{{"bytes":8,"L_us":{l},"g_us":{g}}}]}}"#);
            let err = Profile::parse(&text).unwrap_err();
            assert!(
                matches!(err, ModelError::BadPoint { field: f, .. } if f == field),
                "{err}"
            );
            assert!(err.to_string().contains("at most 1e9"), "{err}");
        }
        let ok = r#"{"points":[{"bytes":8,"L_us":1e9,"g_us":1e9}], "memcpy_GB_s": 10}"#;
        assert!(Profile::parse(ok).is_ok());
        let err =
            Profile::parse(r#"{"points":[{"bytes":8,"L_us":1,"g_us":1}], "memcpy_GB_s": 1e300}"#)
                .unwrap_err();
        assert!(err.to_string().contains("memcpy_GB_s"), "{err}");
        for bad in ["-1", "1e300"] {
            let err = Profile::parse(&format!(
                r#"{{"points":[{{"bytes":8,"L_us":1,"g_us":1}}], "segment_cpu_us": {bad}}}"#
            ))
            .unwrap_err();
            assert!(err.to_string().contains("segment_cpu_us"), "{err}");
        }
        let p =
            Profile::parse(r#"{"points":[{"bytes":8,"L_us":1,"g_us":1}], "segment_cpu_us": 90}"#)
                .unwrap();
        assert_eq!(p.segment_cpu_us(), 90.0);
        assert_eq!(p.stated_segment_cpu_us(), Some(90.0));
        assert_eq!(Profile::parse(&p.to_json()).unwrap(), p);
        // Seed 003's Table 2 states none: g(m) covers it on one NIC, rails get the default.
        let table2 = Profile::builtin("100mbit").unwrap();
        assert_eq!(table2.stated_segment_cpu_us(), None);
        assert_eq!(table2.segment_cpu_us(), DEFAULT_SEGMENT_CPU_US);
        let err = Profile::parse(
            r#"{"points":[{"bytes":512,"L_us":1,"g_us":2},{"bytes":512,"L_us":1,"g_us":3}]}"#,
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                ModelError::UnsortedProfile {
                    index: 1,
                    bytes: 512,
                    previous: 512
                }
            ),
            "{err}"
        );
        let err = Profile::parse(r#"{"points":[{"bytes":8,"g_us":2}]}"#).unwrap_err();
        assert!(matches!(err, ModelError::ProfileJson(_)), "{err}");
        // Plain serde deserialization validates too.
        let err = serde_json::from_str::<Profile>(r#"{"points":[]}"#).unwrap_err();
        assert!(err.to_string().contains("no points"), "{err}");
        let empty = Profile {
            points: vec![],
            memcpy_gb_s: None,
            segment_cpu_us: None,
        };
        assert_eq!(empty.cost(1000).g_us, 0.0);
    }

    #[test]
    fn memcpy_bandwidth_is_optional() {
        let p = Profile::builtin("1gbit").unwrap();
        assert_eq!(p.memcpy_gb_s, None);
        assert_eq!(p.copy_us(5000), COPY_OVERHEAD_US + 1.0); // 5 GB/s = 5000 B/µs
        assert!(!p.to_json().contains("memcpy"));
        let text = r#"{"points":[{"bytes":256,"L_us":1,"g_us":2}],"memcpy_GB_s":20}"#;
        let fast = Profile::parse(text).unwrap();
        assert_eq!(fast.copy_us(20_000), COPY_OVERHEAD_US + 1.0);
        assert_eq!(Profile::parse(&fast.to_json()).unwrap(), fast);
        for bad in ["0", "-3", "null"] {
            let text =
                format!(r#"{{"points":[{{"bytes":256,"L_us":1,"g_us":2}}],"memcpy_GB_s":{bad}}}"#);
            let r = Profile::parse(&text);
            if bad == "null" {
                assert_eq!(r.unwrap().memcpy_gb_s, None);
            } else {
                let e = r.unwrap_err().to_string();
                assert!(e.contains("memcpy_GB_s"), "{e}");
            }
        }
    }

    #[test]
    fn cost_interpolates_and_extrapolates() {
        let p = Profile::builtin("100mbit").unwrap();
        assert_eq!(p.cost(256).g_us, 30.0);
        assert_eq!(p.cost(100).g_us, 30.0); // held below the first point
        let mid = p.cost(384);
        assert!((mid.g_us - 40.5).abs() < 1e-9 && (mid.l_us - 133.0).abs() < 1e-9);
        // Above the table: g continues the last slope, L is held.
        let big = p.cost(65536);
        assert!((big.g_us - (2781.0 + (2781.0 - 1389.0) * 2.0)).abs() < 1e-6);
        assert_eq!(big.l_us, 323.0);
        let g = Profile::builtin("1gbit").unwrap();
        assert!(g.cost(1 << 30).l_us >= 0.0);
    }
}
