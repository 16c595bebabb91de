//! The topology file: the JSON contract of `../shared/DESIGN.md`.
//!
//! ```json
//! {"switches": ["s0", "s1"], "links": [["s0", "s1"]],
//!  "machines": [{"name": "n0", "switch": "s0"}, {"name": "n1", "switch": "s1"}]}
//! ```
//! A link may also be `{"a": "s0", "b": "s1", "gbps": 10}`. Machines may carry `site`, `mac`,
//! `port`, `host`, `gbps` and `ranks` (how many ranks run on the machine, default 1: rank order
//! fills the machines in file order, machine 0's ranks first; see [`super::hosts::expand`]).
//! A machine with several NICs (rails, seed 002 §2.1) is written with `nics` instead of
//! `switch`: `{"name": "n0", "nics": [{"switch": "a1"}, {"switch": "b1", "mac": "…", "port":
//! "…"}]}`, NIC i being on rail i (docs/topology.md). Unknown fields are ignored so that the
//! format can grow.

use super::{Link, Machine, Nic, Switch, Topology, TopologyError, MAX_NICS};
use serde_json::{json, Map, Value};

/// Parses and validates topology JSON text.
pub fn parse_topology(text: &str) -> Result<Topology, TopologyError> {
    let value = crate::json::parse(text).map_err(|e| TopologyError::Json(e.to_string()))?;
    let obj = value
        .as_object()
        .ok_or_else(|| TopologyError::Json("the top level must be an object".into()))?;
    let names = array(obj, "switches")?;
    let mut switches = Vec::with_capacity(names.len());
    for (i, v) in names.iter().enumerate() {
        let name = v
            .as_str()
            .ok_or_else(|| TopologyError::Json(format!("switches[{i}] must be a string")))?;
        switches.push(Switch { name: name.into() });
    }
    // By name, first occurrence (a repeated name is reported by `Topology::new`): one hash
    // lookup per link and machine, not a scan of the switches (100k switches took 20 s).
    let mut index = std::collections::HashMap::with_capacity(switches.len());
    for (i, s) in switches.iter().enumerate() {
        index.entry(s.name.as_str()).or_insert(i);
    }
    let lookup = |name: &str, context: String| -> Result<usize, TopologyError> {
        index
            .get(name)
            .copied()
            .ok_or_else(|| TopologyError::UnknownSwitch {
                name: name.into(),
                context,
            })
    };
    let mut links = Vec::new();
    if obj.contains_key("links") {
        for (i, v) in array(obj, "links")?.iter().enumerate() {
            let (a, b, gbps) = match v {
                Value::Array(pair) if pair.len() == 2 => {
                    let end = |k: usize| {
                        pair[k].as_str().ok_or_else(|| {
                            TopologyError::Json(format!("links[{i}][{k}] must be a switch name"))
                        })
                    };
                    (end(0)?, end(1)?, None)
                }
                Value::Object(o) => {
                    let end = |k: &str| {
                        o.get(k).and_then(Value::as_str).ok_or_else(|| {
                            TopologyError::Json(format!("links[{i}].{k} must be a switch name"))
                        })
                    };
                    (
                        end("a")?,
                        end("b")?,
                        number(o, "gbps", &format!("links[{i}]"))?,
                    )
                }
                _ => {
                    return Err(TopologyError::Json(format!(
                        "links[{i}] must be [\"sA\", \"sB\"] or {{\"a\": \"sA\", \"b\": \"sB\"}}"
                    )))
                }
            };
            let context = format!("link {a}-{b}");
            links.push(Link {
                a: lookup(a, context.clone())?,
                b: lookup(b, context)?,
                gbps,
            });
        }
    }
    let mut machines = Vec::new();
    for (i, v) in array(obj, "machines")?.iter().enumerate() {
        let o = v
            .as_object()
            .ok_or_else(|| TopologyError::Json(format!("machines[{i}] must be an object")))?;
        let text = |k: &str| -> Result<Option<String>, TopologyError> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(TopologyError::Json(format!(
                    "machines[{i}].{k} must be a string"
                ))),
            }
        };
        let name = text("name")?
            .ok_or_else(|| TopologyError::Json(format!("machines[{i}] has no \"name\"")))?;
        let mut nics = nics(o, &name, &lookup)?;
        let (switch, mut mac, mut port) = match (text("switch")?, nics.is_empty()) {
            (None, true) => {
                return Err(TopologyError::Json(format!(
                    "machine {name} has no \"switch\" (or \"nics\")"
                )))
            }
            (Some(switch_name), true) => {
                (lookup(&switch_name, format!("machine {name}"))?, None, None)
            }
            (switch_name, false) => {
                let first = nics.remove(0);
                if let Some(switch_name) = switch_name {
                    if lookup(&switch_name, format!("machine {name}"))? != first.switch {
                        return Err(TopologyError::Json(format!(
                            "machine {name}: \"switch\" {switch_name:?} is not the switch of its NIC 0: give one of them, or the same switch"
                        )));
                    }
                }
                (first.switch, first.mac, first.port)
            }
        };
        mac = mac.or(text("mac")?);
        port = port.or(text("port")?);
        let gbps = number(o, "gbps", &format!("machine {name}"))?;
        let ranks = match o.get("ranks") {
            None | Some(Value::Null) => 1,
            Some(v) => v
                .as_u64()
                .and_then(|k| usize::try_from(k).ok())
                .ok_or_else(|| TopologyError::BadRanks {
                    machine: name.clone(),
                    value: v.to_string(),
                })?,
        };
        machines.push(Machine {
            ranks,
            site: text("site")?,
            mac,
            port,
            host: text("host")?,
            gbps,
            name,
            switch,
            rails: nics,
        });
    }
    Topology::new(switches, links, machines)
}

/// A machine's `nics` (empty when the field is absent): each an object with a `switch` and
/// optional `mac` and `port` strings; 1 to [`MAX_NICS`] of them.
fn nics(
    o: &Map<String, Value>,
    name: &str,
    lookup: &dyn Fn(&str, String) -> Result<usize, TopologyError>,
) -> Result<Vec<Nic>, TopologyError> {
    let list = match o.get("nics") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => {
            return Err(TopologyError::Json(format!(
                "machine {name}: \"nics\" must be an array of {{\"switch\": \"…\"}} objects"
            )))
        }
    };
    if list.is_empty() || list.len() > MAX_NICS {
        return Err(TopologyError::BadNicCount {
            machine: name.into(),
            nics: list.len(),
        });
    }
    let mut out = Vec::with_capacity(list.len());
    for (k, nic) in list.iter().enumerate() {
        let what = format!("machine {name}: nics[{k}]");
        let nic = nic
            .as_object()
            .ok_or_else(|| TopologyError::Json(format!("{what} must be an object")))?;
        let text = |key: &str| match nic.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(TopologyError::Json(format!(
                "{what}.{key} must be a string"
            ))),
        };
        let switch = text("switch")?
            .ok_or_else(|| TopologyError::Json(format!("{what} has no \"switch\"")))?;
        out.push(Nic {
            switch: lookup(&switch, format!("machine {name} (NIC {k})"))?,
            mac: text("mac")?,
            port: text("port")?,
        });
    }
    Ok(out)
}

fn array<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a Vec<Value>, TopologyError> {
    match obj.get(key) {
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(TopologyError::Json(format!("\"{key}\" must be an array"))),
        None => Err(TopologyError::Json(format!("missing \"{key}\""))),
    }
}

fn number(obj: &Map<String, Value>, key: &str, what: &str) -> Result<Option<f64>, TopologyError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(g) if g.is_finite() && g > 0.0 => Ok(Some(g)),
            _ => Err(TopologyError::Json(format!(
                "{what}: \"{key}\" must be a positive number, got {v}"
            ))),
        },
    }
}

/// Writes a topology in the file format (links with a bandwidth as objects).
pub fn to_json(t: &Topology) -> Value {
    let sw = |s: usize| t.switches()[s].name.clone();
    let links: Vec<Value> = t
        .links()
        .iter()
        .map(|l| match l.gbps {
            Some(g) => json!({"a": sw(l.a), "b": sw(l.b), "gbps": g}),
            None => json!([sw(l.a), sw(l.b)]),
        })
        .collect();
    let machines: Vec<Value> = t
        .machines()
        .iter()
        .map(|m| {
            let mut o = Map::new();
            o.insert("name".into(), json!(m.name));
            o.insert("switch".into(), json!(sw(m.switch)));
            for (k, v) in [
                ("site", &m.site),
                ("mac", &m.mac),
                ("port", &m.port),
                ("host", &m.host),
            ] {
                if let Some(v) = v {
                    o.insert(k.into(), json!(v));
                }
            }
            if let Some(g) = m.gbps {
                o.insert("gbps".into(), json!(g));
            }
            if m.ranks != 1 {
                o.insert("ranks".into(), json!(m.ranks));
            }
            if !m.rails.is_empty() {
                // NIC 0 is also `switch` (and `mac`, `port`): readers of the one-NIC form see
                // rail 0.
                let nic = |switch: usize, mac: &Option<String>, port: &Option<String>| {
                    let mut n = Map::new();
                    n.insert("switch".into(), json!(sw(switch)));
                    if let Some(mac) = mac {
                        n.insert("mac".into(), json!(mac));
                    }
                    if let Some(port) = port {
                        n.insert("port".into(), json!(port));
                    }
                    Value::Object(n)
                };
                let mut list = vec![nic(m.switch, &m.mac, &m.port)];
                list.extend(m.rails.iter().map(|n| nic(n.switch, &n.mac, &n.port)));
                o.insert("nics".into(), Value::Array(list));
            }
            Value::Object(o)
        })
        .collect();
    json!({
        "switches": t.switches().iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
        "links": links,
        "machines": machines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_contract_example() {
        let t = parse_topology(
            r#"{"switches": ["s0", "s1", "s2"], "links": [["s0", "s1"], {"a": "s1", "b": "s2", "gbps": 10}],
                "machines": [{"name": "n0", "switch": "s0"}, {"name": "n1", "switch": "s2", "site": "A"}]}"#,
        )
        .unwrap();
        assert_eq!(t.size(), 2);
        assert_eq!(t.switch_of(1), 2);
        assert_eq!(t.links()[1].gbps, Some(10.0));
        assert_eq!(t.machines()[1].site.as_deref(), Some("A"));
        let again = parse_topology(&to_json(&t).to_string()).unwrap();
        assert_eq!(again.machines(), t.machines());
        assert_eq!(again.links(), t.links());
    }

    fn err(text: &str) -> String {
        parse_topology(text).unwrap_err().to_string()
    }

    #[test]
    fn every_validation_error_names_the_items() {
        let m = r#""machines": [{"name": "n0", "switch": "s0"}]"#;
        let e = err(&format!(
            r#"{{"switches": ["s0","s1","s2"], "links": [["s0","s1"],["s1","s2"],["s2","s0"]], {m}}}"#
        ));
        assert!(
            e.contains("cycle") && e.contains("s0") && e.contains("s1") && e.contains("s2"),
            "{e}"
        );
        let e = err(&format!(
            r#"{{"switches": ["s0","s1","s2"], "links": [["s0","s1"]], {m}}}"#
        ));
        assert!(e.contains("s2 is not connected"), "{e}");
        let e = err(&format!(
            r#"{{"switches": ["s0"], "links": [["s0","s9"]], {m}}}"#
        ));
        assert!(
            e.contains("unknown switch \"s9\"") && e.contains("link s0-s9"),
            "{e}"
        );
        let e = err(r#"{"switches": ["s0"], "machines": [{"name": "n0", "switch": "s4"}]}"#);
        assert!(e.contains("machine n0 names unknown switch \"s4\""), "{e}");
        let e = err(
            r#"{"switches": ["s0"], "machines": [{"name": "n0", "switch": "s0"}, {"name": "n0", "switch": "s0"}]}"#,
        );
        assert!(e.contains("machine name \"n0\" is used twice"), "{e}");
        let e = err(&format!(r#"{{"switches": ["s0","s0"], {m}}}"#));
        assert!(e.contains("switch name \"s0\" is used twice"), "{e}");
        let e = err(r#"{"switches": ["s0"], "machines": []}"#);
        assert!(e.contains("no machines"), "{e}");
        let e = err(&format!(r#"{{"switches": [], {m}}}"#));
        assert!(
            e.contains("unknown switch") || e.contains("no switches"),
            "{e}"
        );
        let e = err(&format!(
            r#"{{"switches": ["s0","s1"], "links": [["s0","s1"],["s1","s0"]], {m}}}"#
        ));
        assert!(e.contains("linked twice"), "{e}");
        let e = err(&format!(
            r#"{{"switches": ["s0"], "links": [["s0","s0"]], {m}}}"#
        ));
        assert!(e.contains("s0 is linked to itself"), "{e}");
        let e = err(&format!(
            r#"{{"switches": ["s0","s1"], "links": [{{"a":"s0","b":"s1","gbps":-1}}], {m}}}"#
        ));
        assert!(e.contains("positive"), "{e}");
        let e = err("[1, 2]");
        assert!(e.contains("object"), "{e}");
        let e = err("{not json");
        assert!(e.contains("not a topology file"), "{e}");
        let e = err(r#"{"switches": ["s0"]}"#);
        assert!(e.contains("missing \"machines\""), "{e}");
        for bad in ["0", "-1", "2.5", "\"4\"", "1025", "99999999999999999999"] {
            let e = err(&format!(
                r#"{{"switches": ["s0"], "machines": [{{"name": "n0", "switch": "s0"}}, {{"name": "n7", "switch": "s0", "ranks": {bad}}}]}}"#
            ));
            assert!(
                e.contains("machine n7: \"ranks\" must be a whole number from 1 to 1024"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn ranks_per_machine_parse_and_round_trip() {
        let t = parse_topology(
            r#"{"switches": ["s0"], "machines": [{"name": "n0", "switch": "s0", "ranks": 3},
                {"name": "n1", "switch": "s0"}, {"name": "n2", "switch": "s0", "ranks": null}]}"#,
        )
        .unwrap();
        let ranks: Vec<usize> = t.machines().iter().map(|m| m.ranks).collect();
        assert_eq!(ranks, [3, 1, 1]);
        assert_eq!((t.size(), t.ranks()), (3, 5));
        let text = to_json(&t).to_string();
        assert_eq!(text.matches("\"ranks\"").count(), 1, "{text}");
        let again = parse_topology(&text).unwrap();
        assert_eq!(again.machines(), t.machines());
    }

    #[test]
    fn nics_form_parses_round_trips_and_keeps_the_switch_form() {
        let text = r#"{"switches": ["a0", "a1", "b0"], "links": [["a0", "a1"]], "machines": [
            {"name": "n0", "nics": [{"switch": "a0", "mac": "02:00:00:00:00:01"}, {"switch": "b0", "port": "p7"}]},
            {"name": "n1", "switch": "a1", "nics": [{"switch": "a1"}, {"switch": "b0"}]}]}"#;
        let t = parse_topology(text).unwrap();
        assert_eq!(t.rails(), 2);
        assert_eq!(t.nic_switch(0, 1), 2);
        assert_eq!(t.machines()[0].mac.as_deref(), Some("02:00:00:00:00:01"));
        assert_eq!(t.machines()[0].rails[0].port.as_deref(), Some("p7"));
        let names: Vec<String> = t.path_on(1, 0, 1).iter().map(|&e| t.edge_name(e)).collect();
        assert_eq!(names, ["n0#1->b0", "b0->n1#1"]);
        let written = to_json(&t).to_string();
        let again = parse_topology(&written).unwrap();
        assert_eq!(again.machines(), t.machines());
        // One NIC in the `nics` form is the `switch` form.
        let one = parse_topology(
            r#"{"switches": ["s0"], "machines": [{"name": "n0", "nics": [{"switch": "s0"}]}]}"#,
        )
        .unwrap();
        assert_eq!((one.rails(), one.switch_of(0)), (1, 0));
        assert!(!to_json(&one).to_string().contains("nics"));
    }

    #[test]
    fn bad_nics_are_named() {
        let sw = r#""switches": ["a0", "b0", "c0"], "links": [["a0", "c0"]]"#;
        let cases = [
            (
                r#"{"name": "n0", "nics": []}"#,
                "\"nics\" lists 0 NICs: give 1 to 16",
            ),
            (
                r#"{"name": "n0", "nics": "a0"}"#,
                "\"nics\" must be an array",
            ),
            (
                r#"{"name": "n0", "nics": [7]}"#,
                "nics[0] must be an object",
            ),
            (
                r#"{"name": "n0", "nics": [{"port": "x"}]}"#,
                "nics[0] has no \"switch\"",
            ),
            (
                r#"{"name": "n0", "nics": [{"switch": 3}]}"#,
                "nics[0].switch must be a string",
            ),
            (
                r#"{"name": "n0", "nics": [{"switch": "z9"}]}"#,
                "machine n0 (NIC 0) names unknown switch \"z9\"",
            ),
            (
                r#"{"name": "n0", "switch": "b0", "nics": [{"switch": "a0"}]}"#,
                "is not the switch of its NIC 0",
            ),
            (
                r#"{"name": "n0"}"#,
                "machine n0 has no \"switch\" (or \"nics\")",
            ),
        ];
        for (machine, want) in cases {
            let e = err(&format!(r#"{{{sw}, "machines": [{machine}]}}"#));
            assert!(e.contains(want), "{machine}: {e}");
        }
        let many = vec![r#"{"switch": "a0"}"#; 17].join(",");
        let e = err(&format!(
            r#"{{{sw}, "machines": [{{"name": "n0", "nics": [{many}]}}]}}"#
        ));
        assert!(e.contains("lists 17 NICs"), "{e}");
        let e = err(&format!(
            r#"{{{sw}, "machines": [{{"name": "n0", "nics": [{{"switch": "a0"}}, {{"switch": "b0"}}]}}, {{"name": "n1", "switch": "a0"}}]}}"#
        ));
        assert!(
            e.contains("machine n1 has 1 NIC(s), machine n0 has 2"),
            "{e}"
        );
        // n1's NIC 1 is on the rail-0 tree while n0's is on b0's.
        let e = err(&format!(
            r#"{{{sw}, "machines": [{{"name": "n0", "nics": [{{"switch": "a0"}}, {{"switch": "b0"}}]}}, {{"name": "n1", "nics": [{{"switch": "a0"}}, {{"switch": "c0"}}]}}]}}"#
        ));
        assert!(
            e.contains(
                "rail 1: NIC 1 of machine n1 is on switch c0, which is not connected to switch b0"
            ),
            "{e}"
        );
        // A tree no NIC reaches.
        let e = err(
            r#"{"switches": ["a0", "b0", "x0"], "machines": [{"name": "n0", "nics": [{"switch": "a0"}, {"switch": "b0"}]}]}"#,
        );
        assert!(e.contains("switch x0 is in no rail's switch tree"), "{e}");
        // Without rails a second tree is still an error.
        let e = err(r#"{"switches": ["a0", "b0"], "machines": [{"name": "n0", "switch": "a0"}]}"#);
        assert!(e.contains("b0 is not connected"), "{e}");
    }
}
