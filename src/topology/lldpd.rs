//! Reading lldpd's neighbour tables: the output of `lldpcli -f json0 show neighbors`.
//!
//! `json0` is lldpd's regular JSON shape: every object is in a list, even when there is one
//! (plain `json` changes shape when a port has two neighbours, LAB.md). A switch's dump says
//! which neighbour switch sits behind each of its ports — the switch layer of seed 000 §3's
//! tree; a host's dump says which switch and port the host is plugged into.

use serde_json::Value;

/// One neighbour seen on one local interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbor {
    /// The local interface the neighbour was seen on.
    pub interface: String,
    pub chassis_id: String,
    pub system_name: Option<String>,
    pub port_id: String,
    pub port_description: Option<String>,
    /// Whether the neighbour advertises the Bridge capability (as enabled).
    pub bridge: bool,
}

impl Neighbor {
    /// The neighbour's name: its system name, else its chassis ID.
    pub fn chassis_name(&self) -> String {
        self.system_name
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.chassis_id.clone())
    }
}

/// What is wrong with an lldpd dump.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum LldpdError {
    #[error("not lldpcli JSON ({0}): produce it with `lldpcli -f json0 show neighbors`")]
    Json(String),
    #[error("unexpected lldpcli output: {0} (expected `lldpcli -f json0 show neighbors`; plain `-f json` has another shape)")]
    Shape(String),
}

/// The first element of a json0 list field, e.g. `"name": [{"value": "s0"}]`.
fn first<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v.get(key)? {
        Value::Array(items) => items.first(),
        other => Some(other),
    }
}

fn value_text(v: &Value, key: &str) -> Option<String> {
    let item = first(v, key)?;
    item.get("value")
        .and_then(Value::as_str)
        .or_else(|| item.as_str())
        .map(str::to_string)
}

/// Parses `lldpcli -f json0 show neighbors`, in output order.
pub fn parse_neighbors(text: &str) -> Result<Vec<Neighbor>, LldpdError> {
    let root = crate::json::parse(text).map_err(|e| LldpdError::Json(e.to_string()))?;
    let Some(lldp) = root.get("lldp") else {
        return Err(LldpdError::Shape("no \"lldp\" key at the top level".into()));
    };
    let sections: Vec<&Value> = match lldp {
        Value::Array(a) => a.iter().collect(),
        Value::Object(_) => vec![lldp],
        _ => {
            return Err(LldpdError::Shape(
                "\"lldp\" is neither a list nor an object".into(),
            ))
        }
    };
    let mut out = Vec::new();
    for section in sections {
        let interfaces: Vec<&Value> = match section.get("interface") {
            None => continue,
            Some(Value::Array(a)) => a.iter().collect(),
            Some(v @ Value::Object(_)) => vec![v],
            Some(_) => return Err(LldpdError::Shape("\"interface\" is not a list".into())),
        };
        for iface in interfaces {
            let interface = iface
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| LldpdError::Shape("an interface has no \"name\"".into()))?
                .to_string();
            let chassis = first(iface, "chassis").ok_or_else(|| {
                LldpdError::Shape(format!("interface {interface} has no \"chassis\""))
            })?;
            let chassis_id = value_text(chassis, "id").ok_or_else(|| {
                LldpdError::Shape(format!("interface {interface}: chassis without \"id\""))
            })?;
            let system_name = value_text(chassis, "name");
            let bridge = chassis
                .get("capability")
                .and_then(Value::as_array)
                .is_some_and(|caps| {
                    caps.iter().any(|c| {
                        c.get("type").and_then(Value::as_str) == Some("Bridge")
                            && c.get("enabled").and_then(Value::as_bool) == Some(true)
                    })
                });
            let port = first(iface, "port").ok_or_else(|| {
                LldpdError::Shape(format!("interface {interface} has no \"port\""))
            })?;
            let port_id = value_text(port, "id").ok_or_else(|| {
                LldpdError::Shape(format!("interface {interface}: port without \"id\""))
            })?;
            out.push(Neighbor {
                interface,
                chassis_id,
                system_name,
                port_id,
                port_description: value_text(port, "descr"),
                bridge,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from a real `lldpcli -f json0 show neighbors` of switch s0 in the lab: the
    /// `lldpd_json` fuzz target's seed (`tests/fuzz_seeds.rs` writes it).
    const S0: &str = include_str!("../../fuzz/seeds/lldpd_json/lldpcli");

    #[test]
    fn parses_a_switch_dump() {
        let n = parse_neighbors(S0).unwrap();
        assert_eq!(n.len(), 2);
        assert_eq!(n[0].interface, "s1");
        assert_eq!(n[0].chassis_name(), "s1");
        assert_eq!(n[0].port_id, "s0");
        assert!(n[0].bridge);
        assert_eq!(n[1].chassis_name(), "aa:bb:cc:dd:ee:ff");
        assert!(!n[1].bridge);
    }

    #[test]
    fn empty_tables_and_bad_input() {
        assert!(parse_neighbors(r#"{"lldp": [{}]}"#).unwrap().is_empty());
        assert!(parse_neighbors(r#"{"lldp": {}}"#).unwrap().is_empty());
        assert!(matches!(parse_neighbors("nope"), Err(LldpdError::Json(_))));
        assert!(matches!(parse_neighbors("{}"), Err(LldpdError::Shape(_))));
        let e = parse_neighbors(r#"{"lldp": [{"interface": [{"name": "x"}]}]}"#).unwrap_err();
        assert!(e.to_string().contains("interface x"), "{e}");
    }
}
