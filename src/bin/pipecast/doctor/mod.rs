//! `pipecast doctor`: checks what a site needs for pipecast and says how to fix each problem.
//!
//! ```text
//! pipecast doctor                      # table on stdout
//! pipecast doctor --json --iface eth1  # one JSON object
//! ```
//! Every check ends `ok`, `warn` (pipecast works, with a fallback or without a feature) or
//! `fail` (something a site relies on is broken), with the fix. Exit status: 0 when no check
//! failed (warnings allowed), 1 when one did (the report is still printed in full, and
//! `--json` output stays one parsable object), 2 for a usage error. The probes are real
//! system calls, in the tool and in `pipecast::transport`; nothing here needs root, and as an
//! ordinary user the checks that need a privilege say so.

mod checks;
mod component;

use crate::CliResult;
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// The data interface (default: the one of the default route, else the first Ethernet
    /// interface that is up).
    #[arg(long)]
    iface: Option<String>,
    /// How long to listen for an LLDPDU when the host's lldpd cannot answer (switches send one
    /// every 30 s by default; 0 skips listening).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=300))]
    lldp_seconds: u64,
    /// The Open MPI component to check (default: mca_coll_pipecast.so in the directories Open
    /// MPI searches).
    #[arg(long)]
    component: Option<std::path::PathBuf>,
}

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One check's outcome: what was found, and the fix when it is not `ok`.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }
    pub fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
    pub fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

pub fn run(args: Args) -> CliResult {
    let iface = checks::data_interface(args.iface.as_deref());
    let report = checks::all(&iface, args.lldp_seconds, args.component.as_deref());
    let failed = report.iter().filter(|c| c.status == Status::Fail).count();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(iface.name(), &report))?
        );
    } else {
        print!("{}", render(iface.name(), &report));
    }
    match failed {
        0 => Ok(()),
        1 => Err("1 check failed (see its fix above)".into()),
        n => Err(format!("{n} checks failed (see their fixes above)").into()),
    }
}

/// The report as one JSON object: `interface`, `checks` (name, status, detail, fix or null)
/// and `summary` (counts per status).
fn to_json(iface: Option<&str>, report: &[Check]) -> serde_json::Value {
    let count = |s: Status| report.iter().filter(|c| c.status == s).count();
    json!({
        "interface": iface,
        "checks": report.iter().map(|c| json!({
            "name": c.name,
            "status": c.status.as_str(),
            "detail": c.detail,
            "fix": c.fix,
        })).collect::<Vec<_>>(),
        "summary": {"ok": count(Status::Ok), "warn": count(Status::Warn), "fail": count(Status::Fail)},
    })
}

/// The report for people: one line per check, its fix indented below.
fn render(iface: Option<&str>, report: &[Check]) -> String {
    let mut out = format!(
        "pipecast doctor: data interface {}\n",
        iface.unwrap_or("(none found)")
    );
    let width = report.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in report {
        out += &format!("{:4}  {:width$}  {}\n", c.status.as_str(), c.name, c.detail);
        if let Some(fix) = &c.fix {
            out += &format!("      {:width$}  fix: {fix}\n", "");
        }
    }
    let count = |s: Status| report.iter().filter(|c| c.status == s).count();
    out += &format!(
        "{} ok, {} warn, {} fail\n",
        count(Status::Ok),
        count(Status::Warn),
        count(Status::Fail)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_renders_for_people_and_machines() {
        let report = vec![
            Check::ok("mtu", "eth0: 1500"),
            Check::warn(
                "io-uring",
                "disabled",
                "sysctl -w kernel.io_uring_disabled=0",
            ),
            Check::fail("open-mpi", "built for 4.1.4, here 5.0.3", "make -C ffi"),
        ];
        let text = render(Some("eth0"), &report);
        assert!(text.contains("fail  open-mpi  built for 4.1.4"), "{text}");
        assert!(text.contains("fix: make -C ffi"), "{text}");
        assert!(text.ends_with("1 ok, 1 warn, 1 fail\n"), "{text}");
        let v = to_json(None, &report);
        assert_eq!(v["checks"][1]["status"], "warn");
        assert_eq!(v["checks"][0]["fix"], serde_json::Value::Null);
        assert_eq!(v["summary"]["fail"], 1);
        assert_eq!(v["interface"], serde_json::Value::Null);
    }
}
