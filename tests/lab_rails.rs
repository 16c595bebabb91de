//! Machines with two NICs (issue 16): `pipecast lab up` on a topology with rails builds each
//! machine with `eth0` on rail 0's switches and `eth1` on rail 1's, and `multilane` over TCP,
//! and over raw Ethernet (one socket per NIC), sends lane i through NIC i. Every broadcast is verified at every rank (`pipecast bench`),
//! and the interface counters of the machines (`/sys/class/net/eth*/statistics`, read in
//! each machine's namespace) show which NIC the bytes left through. As root and, through
//! `setpriv`, as `nobody` (a lab in a user namespace).
//!
//! Lab tests need the lab's tools (and root for the `nobody` run); without them they print
//! why they skip. Every lab is removed by a guard, also when a test fails.

mod common;
mod lab;

use lab::{as_each_user, require_lab, text, Lab, User, EXE};

/// Two rails of two switches; the rails pair the machines differently (n0 shares a1 with n1
/// but b1 with n2), so the two lanes' chains differ.
const TOPOLOGY: &str = r#"{"switches": ["a1", "a2", "b1", "b2"],
 "links": [["a1", "a2"], ["b1", "b2"]],
 "machines": [
  {"name": "n0", "nics": [{"switch": "a1"}, {"switch": "b1"}]},
  {"name": "n1", "nics": [{"switch": "a1"}, {"switch": "b2"}]},
  {"name": "n2", "nics": [{"switch": "a2"}, {"switch": "b1"}]},
  {"name": "n3", "nics": [{"switch": "a2"}, {"switch": "b2"}]}]}"#;

const MACHINES: [&str; 4] = ["n0", "n1", "n2", "n3"];

impl Lab {
    /// Bytes sent so far through `dev` of every machine, summed.
    fn tx_bytes(&self, dev: &str) -> u64 {
        MACHINES
            .iter()
            .map(|m| {
                let path = format!("/sys/class/net/{dev}/statistics/tx_bytes");
                let out =
                    self.user()
                        .pipecast(&["lab", "exec", "--name", self.name(), m, "cat", &path]);
                assert!(out.status.success(), "{m} {path}: {}", text(&out));
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse::<u64>()
                    .unwrap_or_else(|e| panic!("{m} {path}: {e}: {}", text(&out)))
            })
            .sum()
    }

    /// `pipecast bench --json` over TCP with `tree` on every machine; checks that every row
    /// is verified and returns rank 0's report.
    fn bench(&self, tree: &str, sizes: &str) -> serde_json::Value {
        self.bench_on("tcp", "tcp:2rails", tree, sizes, &[])
    }

    /// After a 2-iteration `multilane` bench of `sizes` (`report`) that started with the
    /// NICs' counters at `before`: each NIC sent at least 40 % of the bytes moved, and in the
    /// link's own count, row `row`, rank 0 sent more than `least` bytes on each rail.
    fn each_nic_carried_its_lane(
        &self,
        before: (u64, u64),
        sizes: &[u64],
        report: &serde_json::Value,
        row: usize,
        least: u64,
    ) {
        let d0 = self.tx_bytes("eth0") - before.0;
        let d1 = self.tx_bytes("eth1") - before.1;
        let moved: u64 = sizes.iter().map(|s| 2 * 3 * s).sum();
        for (dev, d) in [("eth0", d0), ("eth1", d1)] {
            assert!(
                d * 10 >= moved * 4,
                "{dev} sent {d} bytes of the {moved} moved: a lane is not on its NIC"
            );
        }
        both_rails_sent(report, row, least);
    }

    /// [`Lab::bench`] over `transport`, which the report must name `describe`, with `env`
    /// set for every rank (`lab run` passes its environment on).
    fn bench_on(
        &self,
        transport: &str,
        describe: &str,
        tree: &str,
        sizes: &str,
        env: &[(&str, &str)],
    ) -> serde_json::Value {
        let topology = self.topology_file();
        let out = self
            .user()
            .command(EXE)
            .envs(env.iter().copied())
            .args(["lab", "run", "--name", self.name(), "--timeout", "30", "--"])
            .args([
                EXE,
                "bench",
                "--json",
                "--transport",
                transport,
                "--topology",
                topology.to_str().unwrap(),
                "--tree",
                tree,
                "--sizes",
                sizes,
                "--iters",
                "2",
            ])
            .output()
            .expect("runs pipecast");
        assert!(out.status.success(), "bench failed: {}", text(&out));
        let report = lab::rank0_json(&out);
        assert_eq!(report["transport"], describe, "{report}");
        let rows = report["results"].as_array().unwrap();
        assert_eq!(rows.len(), sizes.split(',').count(), "{report}");
        for row in rows {
            assert_eq!(row["verified"], true, "{row}");
            if tree != "auto" {
                assert_eq!(row["tree"], tree, "{row}");
            }
        }
        report
    }
}

fn two_nics_carry_the_two_lanes(user: User) {
    let lab = Lab::up_as(user, "rl", TOPOLOGY, &["--rate", "100mbit"]);
    // Each machine got a second NIC on rail 1's network.
    let out = user.pipecast(&[
        "lab",
        "exec",
        "--name",
        lab.name(),
        "n3",
        "ip",
        "-4",
        "-o",
        "addr",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("10.1.0.4/16"),
        "{}",
        text(&out)
    );

    // One lane (linear, rail 0): NIC 1 carries nothing but connection setup.
    let (e0, e1) = (lab.tx_bytes("eth0"), lab.tx_bytes("eth1"));
    lab.bench("linear", "1M");
    let (d0, d1) = (lab.tx_bytes("eth0") - e0, lab.tx_bytes("eth1") - e1);
    // 2 iterations × 3 receivers × 1 MiB.
    let moved = 2 * 3 * (1u64 << 20);
    assert!(
        d0 >= moved,
        "eth0 sent {d0} bytes, less than the {moved} moved"
    );
    assert!(d1 < 64 << 10, "eth1 sent {d1} bytes for a one-lane tree");

    // Two lanes (multilane, lane i on rail i): each NIC carries about half. Sizes 0, 1, odd,
    // not a multiple of the segment, large; roots 0 and 1 (iteration i uses root i).
    let sizes = [0u64, 1, 7, 100_003, 4 << 20];
    let (e0, e1) = (lab.tx_bytes("eth0"), lab.tx_bytes("eth1"));
    let report = lab.bench("multilane", "0,1,7,100003,4M");
    lab.each_nic_carried_its_lane((e0, e1), &sizes, &report, 4, 0);

    // `auto` takes both rails for a large message when the link carries them, and plans on
    // rail 0 alone when it does not (one NIC named): lanes there would share NIC 0.
    let report = lab.bench("auto", "1,4M");
    assert_eq!(report["results"][1]["ran"], "multilane", "{report}");
    both_rails_sent(&report, 1, 1 << 20);
    let report = lab.bench_on("tcp", "tcp", "auto", "4M", &[("PIPECAST_IFACE", "eth0")]);
    let ran = report["results"][0]["ran"].as_str().unwrap_or_default();
    assert!(!ran.is_empty() && ran != "multilane", "{report}");
}

/// Raw Ethernet on two NICs: one socket per NIC, lane i's frames through NIC i, byte-exact
/// at every rank for sizes 0, 1, odd, not a multiple of the segment or of a frame's payload,
/// and large, from roots 0 and 1; the link's per-rail counters and the NICs' own counters
/// show both rails carried data.
fn raw_frames_take_both_nics(user: User) {
    let lab = Lab::up_as(user, "rr", TOPOLOGY, &["--rate", "100mbit"]);
    let sizes = [0u64, 1, 7, 100_003, 4 << 20];
    let (e0, e1) = (lab.tx_bytes("eth0"), lab.tx_bytes("eth1"));
    let report = lab.bench_on(
        "raweth",
        "raweth:eth0,eth1",
        "multilane",
        "0,1,7,100003,4M",
        &[],
    );
    lab.each_nic_carried_its_lane((e0, e1), &sizes, &report, 4, 1 << 20);
    // One lane (linear) over raw Ethernet stays on NIC 0: NIC 1 carries only heartbeats.
    let e1 = lab.tx_bytes("eth1");
    lab.bench_on("raweth", "raweth:eth0,eth1", "linear", "1M", &[]);
    let d1 = lab.tx_bytes("eth1") - e1;
    assert!(d1 < 64 << 10, "eth1 sent {d1} bytes for a one-lane tree");
    // Through a PACKET_MMAP receive ring per NIC, and with the rails' interfaces named.
    let report = lab.bench_on(
        "raweth:eth0,eth1",
        "raweth:eth0,eth1",
        "multilane",
        "1,100003,1M",
        &[("PIPECAST_RAWETH_RING", "4M")],
    );
    both_rails_sent(&report, 2, 1 << 18);
}

/// In the link's own count (`rail{i}.bytes_sent`), row `row` of `report`: rank 0 sent more
/// than `least` bytes on each rail.
fn both_rails_sent(report: &serde_json::Value, row: usize, least: u64) {
    let counters = &report["results"][row]["transport_counters"];
    for rail in ["rail0.bytes_sent", "rail1.bytes_sent"] {
        assert!(
            counters[rail].as_u64().is_some_and(|b| b > least),
            "{rail}: {report}"
        );
    }
}

#[test]
fn raw_ethernet_multilane_sends_each_lane_through_its_own_nic() {
    require_lab!();
    as_each_user(raw_frames_take_both_nics);
}

#[test]
fn multilane_sends_each_lane_through_its_own_nic() {
    require_lab!();
    as_each_user(two_nics_carry_the_two_lanes);
}
