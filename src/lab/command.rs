//! Running the system tools the lab is made of (`ip`, `tc`, `lldpd`, `lldpcli`), in the
//! namespaces of the lab's [`Owner`] (the machine's own, or a user namespace without root).

use super::userns::{self, Owner};
use super::LabError;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Tools the lab calls and the Debian packages that provide them (root).
const TOOLS: [(&str, &str); 4] = [
    ("ip", "iproute2"),
    ("tc", "iproute2"),
    ("lldpd", "lldpd"),
    ("lldpcli", "lldpd"),
];

/// Tools a lab without root calls (no lldpd there: [`userns::NO_LLDPD`]).
const ROOTLESS_TOOLS: [(&str, &str); 4] = [
    ("ip", "iproute2"),
    ("tc", "iproute2"),
    ("unshare", "util-linux"),
    ("nsenter", "util-linux"),
];

/// This process's real and effective uid (read from /proc, no libc call needed).
fn uids() -> Option<(u32, u32)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    let mut ids = line.split_whitespace().skip(1).map(|v| v.parse().ok());
    Some((ids.next()??, ids.next()??))
}

/// Whether this process runs with effective uid 0.
pub fn is_root() -> bool {
    uids().is_some_and(|(_, effective)| effective == 0)
}

/// This process's real uid.
pub fn uid() -> u32 {
    uids().map_or(u32::MAX, |(real, _)| real)
}

/// Finds `tool` in PATH or the sbin directories.
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    // Not a pipecast setting (comm::settings lists the exceptions): where commands are.
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|dir| PathBuf::from(dir).join(tool))
        .find(|p| p.is_file());
    found
}

/// Checks every tool, naming the missing package, and without root that this machine lets an
/// ordinary user have a user namespace (naming the setting that refuses it).
pub fn require_tools() -> Result<(), LabError> {
    let tools = if is_root() { TOOLS } else { ROOTLESS_TOOLS };
    for (tool, package) in tools {
        if find_tool(tool).is_none() {
            return Err(LabError::MissingTool {
                tool: tool.into(),
                package: package.into(),
            });
        }
    }
    if !is_root() {
        if let Some(why) = userns::refusal() {
            return Err(LabError::UserNamespaces(why));
        }
    }
    Ok(())
}

/// Runs a tool to completion; a non-zero exit is an error quoting the command and its stderr.
pub fn run(owner: &Owner, tool: &str, args: &[&str]) -> Result<String, LabError> {
    tracing::debug!("{tool} {}", args.join(" "));
    let out = command(owner, tool)?
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

/// A command running `tool` (found in PATH or sbin) in the namespaces of `owner`.
pub fn command(owner: &Owner, tool: &str) -> Result<Command, LabError> {
    let path = find_tool(tool).ok_or_else(|| LabError::MissingTool {
        tool: tool.into(),
        package: TOOLS
            .iter()
            .chain(&ROOTLESS_TOOLS)
            .find(|(t, _)| *t == tool)
            .map_or("(unknown)", |(_, p)| p)
            .into(),
    })?;
    Ok(owner.command(&path))
}

/// `ip <args>`.
pub fn ip(owner: &Owner, args: &[&str]) -> Result<String, LabError> {
    run(owner, "ip", args)
}

/// `ip netns exec <ns> <tool> <args>`.
pub fn in_netns(owner: &Owner, ns: &str, tool: &str, args: &[&str]) -> Result<String, LabError> {
    let mut all = vec!["netns", "exec", ns, tool];
    all.extend_from_slice(args);
    run(owner, "ip", &all)
}

/// Names of the network namespaces that exist.
pub fn netns_list(owner: &Owner) -> Result<Vec<String>, LabError> {
    Ok(ip(owner, &["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect())
}

/// Pids of the processes inside namespace `ns` (empty if it does not exist).
pub fn netns_pids(owner: &Owner, ns: &str) -> Vec<u32> {
    ip(owner, &["netns", "pids", ns])
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
