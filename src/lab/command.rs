//! Running the system tools the lab is made of (`ip`, `tc`, `lldpd`, `lldpcli`).

use super::LabError;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Tools the lab calls and the Debian packages that provide them.
const TOOLS: [(&str, &str); 4] = [
    ("ip", "iproute2"),
    ("tc", "iproute2"),
    ("lldpd", "lldpd"),
    ("lldpcli", "lldpd"),
];

/// Whether this process runs with effective uid 0 (read from /proc, no libc call needed).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Finds `tool` in PATH or the sbin directories.
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|dir| PathBuf::from(dir).join(tool))
        .find(|p| p.is_file());
    found
}

/// Checks root and every tool, naming the missing package.
pub fn require_tools() -> Result<(), LabError> {
    if !is_root() {
        return Err(LabError::NotRoot);
    }
    for (tool, package) in TOOLS {
        if find_tool(tool).is_none() {
            return Err(LabError::MissingTool {
                tool: tool.into(),
                package: package.into(),
            });
        }
    }
    Ok(())
}

/// Runs a tool to completion; a non-zero exit is an error quoting the command and its stderr.
pub fn run(tool: &str, args: &[&str]) -> Result<String, LabError> {
    let path = find_tool(tool).ok_or_else(|| LabError::MissingTool {
        tool: tool.into(),
        package: TOOLS
            .iter()
            .find(|(t, _)| *t == tool)
            .map_or("(unknown)", |(_, p)| p)
            .into(),
    })?;
    tracing::debug!("{tool} {}", args.join(" "));
    let out = Command::new(path)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Command(format!("cannot run {tool}: {e}")))?;
    if !out.status.success() {
        return Err(LabError::Command(format!(
            "`{tool} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip <args>`.
pub fn ip(args: &[&str]) -> Result<String, LabError> {
    run("ip", args)
}

/// `ip netns exec <ns> <tool> <args>`.
pub fn in_netns(ns: &str, tool: &str, args: &[&str]) -> Result<String, LabError> {
    let mut all = vec!["netns", "exec", ns, tool];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// Names of the network namespaces that exist.
pub fn netns_list() -> Result<Vec<String>, LabError> {
    Ok(ip(&["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect())
}

/// Pids of the processes inside namespace `ns` (empty if it does not exist).
pub fn netns_pids(ns: &str) -> Vec<u32> {
    ip(&["netns", "pids", ns])
        .map(|out| out.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Sends `signal` to the given pids with kill(1) (no libc call in this layer).
pub fn kill(pids: &[u32], signal: &str) {
    if pids.is_empty() {
        return;
    }
    let mut args = vec![format!("-{signal}"), "--".into()];
    args.extend(pids.iter().map(u32::to_string));
    let _ = Command::new("kill")
        .args(&args)
        .stderr(Stdio::null())
        .status();
}
