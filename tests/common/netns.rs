//! Network namespaces for the tests that run links between them (tests/raweth_netns.rs,
//! tests/links.rs): hosts joined by a veth pair or on one bridge, deleted on drop, and the
//! shell helpers they use. Needs root and iproute2 (the tests check first).

// Each test binary compiles this module on its own and uses a part of it.
#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicUsize = AtomicUsize::new(0);

pub fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

pub fn sh_out(args: &[&str]) -> String {
    Command::new(args[0])
        .args(&args[1..])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Waits until `dev` in `ns` is operationally up and its qdisc is active. Until the kernel's
/// link watch has run (it may take up to a second after `ip link set up`), the device still
/// has the `noop` qdisc, which drops every frame it is given without an error.
pub fn wait_up(ns: &str, dev: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let link = sh_out(&["ip", "-n", ns, "-o", "link", "show", "dev", dev]);
        let qdisc = sh_out(&["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", dev]);
        if link.contains("state UP") && !qdisc.contains("noop") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{dev} in {ns} did not come up: {link} {qdisc}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Namespaces of one test, deleted on drop.
pub struct Lab {
    prefix: String,
    names: Vec<String>,
}

impl Lab {
    /// Namespaces named `TAG-<pid>-<n>-…`.
    pub fn new(tag: &str) -> Lab {
        Lab {
            prefix: format!(
                "{tag}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::SeqCst)
            ),
            names: Vec::new(),
        }
    }

    pub fn ns(&mut self, tag: &str) -> String {
        let name = format!("{}-{tag}", self.prefix);
        sh(&["ip", "netns", "add", &name]).unwrap();
        self.names.push(name.clone());
        sh(&["ip", "-n", &name, "link", "set", "lo", "up"]).unwrap();
        name
    }

    /// Two hosts joined by a veth pair (`eth0` in each), optionally with a tbf on both ends.
    pub fn pair(&mut self, mtu: u32, rate: Option<&str>) -> Vec<String> {
        let (a, b) = (self.ns("a"), self.ns("b"));
        sh(&[
            "ip", "-n", &a, "link", "add", "name", "eth0", "type", "veth", "peer", "name", "eth0",
            "netns", &b,
        ])
        .unwrap();
        for n in [&a, &b] {
            sh(&[
                "ip",
                "-n",
                n,
                "link",
                "set",
                "eth0",
                "mtu",
                &mtu.to_string(),
                "up",
            ])
            .unwrap();
            if let Some(rate) = rate {
                tbf(n, "eth0", rate);
            }
        }
        for n in [&a, &b] {
            wait_up(n, "eth0");
        }
        vec![a, b]
    }

    /// `hosts` hosts on one bridge (in its own namespace `sw`); returns the host namespaces.
    pub fn star(&mut self, hosts: usize) -> (String, Vec<String>) {
        let sw = self.ns("sw");
        sh(&[
            "ip",
            "-n",
            &sw,
            "link",
            "add",
            "name",
            "br0",
            "type",
            "bridge",
            "stp_state",
            "0",
            "mcast_snooping",
            "0",
        ])
        .unwrap();
        sh(&["ip", "-n", &sw, "link", "set", "br0", "up"]).unwrap();
        let mut names = Vec::new();
        for h in 0..hosts {
            let host = self.ns(&format!("h{h}"));
            let port = format!("p{h}");
            sh(&[
                "ip", "-n", &host, "link", "add", "name", "eth0", "type", "veth", "peer", "name",
                &port, "netns", &sw,
            ])
            .unwrap();
            sh(&["ip", "-n", &host, "link", "set", "eth0", "up"]).unwrap();
            sh(&["ip", "-n", &sw, "link", "set", &port, "master", "br0", "up"]).unwrap();
            names.push(host);
        }
        for (h, host) in names.iter().enumerate() {
            wait_up(host, "eth0");
            wait_up(&sw, &format!("p{h}"));
        }
        (sw, names)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for n in self.names.iter().rev() {
            let _ = sh(&["ip", "netns", "del", n]);
        }
    }
}

pub fn tbf(ns: &str, dev: &str, rate: &str) {
    sh(&[
        "ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
        rate, "burst", "65536", "limit", "262144",
    ])
    .unwrap();
}

/// Loads nftables `rules` in namespace `ns`.
pub fn nft(ns: &str, rules: &str) {
    let mut nft = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut nft.stdin.take().unwrap(), rules.as_bytes()).unwrap();
    let out = nft.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft: {}\n{rules}",
        String::from_utf8_lossy(&out.stderr)
    );
}
