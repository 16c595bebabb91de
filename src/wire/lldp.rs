//! LLDP (IEEE 802.1AB-2016 §8): an LLDPDU is a sequence of TLVs, each a 16-bit header (7-bit
//! type, 9-bit length) and a value; chassis ID, port ID and TTL come first, End (type 0) last.
//!
//! pipecast reads LLDP to learn which switch and port each machine is plugged into (the
//! topology of seed 000 §3, `../shared/seeds/000_4ae1cf15394cd769.txt`, discovered rather than
//! written by hand). [`Tlv`] is a checked view of one TLV, [`TlvIter`] walks an LLDPDU keeping
//! unknown TLV types ([`TlvKind::Unknown`]), and [`LldpduRepr`] is the parsed LLDPDU.

use super::ethernet::{self, Address, EtherType};
use super::WireError;

/// TLV types (IEEE 802.1AB Table 8-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TlvKind {
    End,
    ChassisId,
    PortId,
    Ttl,
    PortDescription,
    SystemName,
    SystemDescription,
    SystemCapabilities,
    ManagementAddress,
    OrgSpecific,
    Unknown(u8),
}

impl From<u8> for TlvKind {
    fn from(v: u8) -> TlvKind {
        match v {
            0 => TlvKind::End,
            1 => TlvKind::ChassisId,
            2 => TlvKind::PortId,
            3 => TlvKind::Ttl,
            4 => TlvKind::PortDescription,
            5 => TlvKind::SystemName,
            6 => TlvKind::SystemDescription,
            7 => TlvKind::SystemCapabilities,
            8 => TlvKind::ManagementAddress,
            127 => TlvKind::OrgSpecific,
            other => TlvKind::Unknown(other),
        }
    }
}

impl From<TlvKind> for u8 {
    fn from(k: TlvKind) -> u8 {
        match k {
            TlvKind::End => 0,
            TlvKind::ChassisId => 1,
            TlvKind::PortId => 2,
            TlvKind::Ttl => 3,
            TlvKind::PortDescription => 4,
            TlvKind::SystemName => 5,
            TlvKind::SystemDescription => 6,
            TlvKind::SystemCapabilities => 7,
            TlvKind::ManagementAddress => 8,
            TlvKind::OrgSpecific => 127,
            TlvKind::Unknown(v) => v,
        }
    }
}

/// Chassis ID subtype "MAC address" (Table 8-2); the value is 6 bytes.
pub const CHASSIS_SUBTYPE_MAC: u8 = 4;
/// Chassis ID subtype "locally assigned" (what lldpd sends for `configure system chassisid`).
pub const CHASSIS_SUBTYPE_LOCAL: u8 = 7;
/// Port ID subtype "MAC address" (Table 8-3).
pub const PORT_SUBTYPE_MAC: u8 = 3;
/// Port ID subtype "interface name".
pub const PORT_SUBTYPE_IFNAME: u8 = 5;

/// Length of a TLV header.
pub const TLV_HEADER_LEN: usize = 2;
/// Largest value a 9-bit length can describe.
pub const MAX_VALUE_LEN: usize = 511;

/// A view of one TLV at the start of a buffer (the buffer may continue past it).
#[derive(Debug, Clone)]
pub struct Tlv<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Tlv<T> {
    /// Checks that the header and the whole value are present.
    pub fn new_checked(buffer: T) -> Result<Tlv<T>, WireError> {
        let got = buffer.as_ref().len();
        if got < TLV_HEADER_LEN {
            return Err(WireError::Truncated {
                need: TLV_HEADER_LEN,
                got,
            });
        }
        let tlv = Tlv { buffer };
        let need = tlv.total_len();
        if got < need {
            return Err(WireError::Truncated { need, got });
        }
        Ok(tlv)
    }
    fn header(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn kind(&self) -> TlvKind {
        TlvKind::from((self.header() >> 9) as u8)
    }
    pub fn value_len(&self) -> usize {
        (self.header() & 0x1ff) as usize
    }
    /// Header plus value.
    pub fn total_len(&self) -> usize {
        TLV_HEADER_LEN + self.value_len()
    }
    pub fn value(&self) -> &[u8] {
        &self.buffer.as_ref()[TLV_HEADER_LEN..self.total_len()]
    }
}

/// A chassis or port identifier: subtype and raw value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Id<'a> {
    pub subtype: u8,
    pub value: &'a [u8],
}

impl Id<'_> {
    /// The identifier as text: a MAC address when the subtype says so (`mac_subtype`),
    /// otherwise the bytes as (lossy) UTF-8.
    fn text(&self, mac_subtype: u8) -> String {
        if self.subtype == mac_subtype && self.value.len() == 6 {
            let mut a = [0u8; 6];
            a.copy_from_slice(self.value);
            Address(a).to_string()
        } else {
            String::from_utf8_lossy(self.value).into_owned()
        }
    }
}

/// The management address TLV (§8.5.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManagementAddress<'a> {
    /// IANA address family (1 IPv4, 2 IPv6, 6 802 MAC).
    pub family: u8,
    pub address: &'a [u8],
    pub interface_subtype: u8,
    pub interface_number: u32,
    pub oid: &'a [u8],
}

impl ManagementAddress<'_> {
    fn value_len(&self) -> usize {
        1 + 1 + self.address.len() + 1 + 4 + 1 + self.oid.len()
    }
    /// The address as text (dotted IPv4, IPv6, MAC), or hex for other families.
    pub fn address_text(&self) -> String {
        match (self.family, self.address.len()) {
            (1, 4) => {
                let a = self.address;
                std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_string()
            }
            (2, 16) => {
                let mut a = [0u8; 16];
                a.copy_from_slice(self.address);
                std::net::Ipv6Addr::from(a).to_string()
            }
            (6, 6) => Id {
                subtype: 0,
                value: self.address,
            }
            .text(0),
            _ => self.address.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

/// One parsed TLV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlvRepr<'a> {
    End,
    ChassisId(Id<'a>),
    PortId(Id<'a>),
    /// Seconds the receiver may keep the information.
    Ttl(u16),
    PortDescription(&'a [u8]),
    SystemName(&'a [u8]),
    SystemDescription(&'a [u8]),
    SystemCapabilities {
        system: u16,
        enabled: u16,
    },
    ManagementAddress(ManagementAddress<'a>),
    OrgSpecific {
        oui: [u8; 3],
        subtype: u8,
        info: &'a [u8],
    },
    /// A TLV type this parser does not know, kept as is.
    Unknown {
        kind: u8,
        value: &'a [u8],
    },
}

impl<'a> TlvRepr<'a> {
    /// Parses a checked TLV found at byte `offset` of the LLDPDU (for error messages).
    pub fn parse(tlv: &Tlv<&'a [u8]>, offset: usize) -> Result<TlvRepr<'a>, WireError> {
        let kind = tlv.kind();
        let raw_kind = u8::from(kind);
        let value: &'a [u8] = &tlv.buffer[TLV_HEADER_LEN..tlv.total_len()];
        let bad = |reason: &'static str| WireError::BadTlv {
            kind: raw_kind,
            offset,
            reason,
        };
        let id = |value: &'a [u8]| -> Result<Id<'a>, WireError> {
            if !(2..=256).contains(&value.len()) {
                return Err(bad("an ID TLV must hold a subtype and 1 to 255 bytes"));
            }
            Ok(Id {
                subtype: value[0],
                value: &value[1..],
            })
        };
        let string = |value: &'a [u8]| -> Result<&'a [u8], WireError> {
            if value.len() > 255 {
                return Err(bad("a string TLV holds at most 255 bytes"));
            }
            Ok(value)
        };
        Ok(match kind {
            TlvKind::End if value.is_empty() => TlvRepr::End,
            TlvKind::End => return Err(bad("the End TLV must have length 0")),
            TlvKind::ChassisId => TlvRepr::ChassisId(id(value)?),
            TlvKind::PortId => TlvRepr::PortId(id(value)?),
            TlvKind::Ttl => match value {
                [a, b] => TlvRepr::Ttl(u16::from_be_bytes([*a, *b])),
                _ => return Err(bad("the TTL TLV must have length 2")),
            },
            TlvKind::PortDescription => TlvRepr::PortDescription(string(value)?),
            TlvKind::SystemName => TlvRepr::SystemName(string(value)?),
            TlvKind::SystemDescription => TlvRepr::SystemDescription(string(value)?),
            TlvKind::SystemCapabilities => match value {
                [a, b, c, d] => TlvRepr::SystemCapabilities {
                    system: u16::from_be_bytes([*a, *b]),
                    enabled: u16::from_be_bytes([*c, *d]),
                },
                _ => return Err(bad("the system capabilities TLV must have length 4")),
            },
            TlvKind::ManagementAddress => {
                let addr_len = *value
                    .first()
                    .ok_or_else(|| bad("empty management address TLV"))?
                    as usize;
                if !(2..=32).contains(&addr_len) {
                    return Err(bad("management address string length must be 2 to 32"));
                }
                // addr_len covers the family byte and the address.
                let rest = value
                    .get(1 + addr_len..)
                    .ok_or_else(|| bad("management address runs past the TLV"))?;
                let [if_subtype, n0, n1, n2, n3, oid_len, oid @ ..] = rest else {
                    return Err(bad("management address TLV lacks the interface fields"));
                };
                if oid.len() != *oid_len as usize || oid.len() > 128 {
                    return Err(bad("management address OID length does not match the TLV"));
                }
                TlvRepr::ManagementAddress(ManagementAddress {
                    family: value[1],
                    address: &value[2..1 + addr_len],
                    interface_subtype: *if_subtype,
                    interface_number: u32::from_be_bytes([*n0, *n1, *n2, *n3]),
                    oid,
                })
            }
            TlvKind::OrgSpecific => match value {
                [a, b, c, subtype, info @ ..] => TlvRepr::OrgSpecific {
                    oui: [*a, *b, *c],
                    subtype: *subtype,
                    info,
                },
                _ => {
                    return Err(bad(
                        "an organisationally specific TLV needs OUI and subtype",
                    ))
                }
            },
            TlvKind::Unknown(kind) => TlvRepr::Unknown { kind, value },
        })
    }

    pub fn kind(&self) -> TlvKind {
        match self {
            TlvRepr::End => TlvKind::End,
            TlvRepr::ChassisId(_) => TlvKind::ChassisId,
            TlvRepr::PortId(_) => TlvKind::PortId,
            TlvRepr::Ttl(_) => TlvKind::Ttl,
            TlvRepr::PortDescription(_) => TlvKind::PortDescription,
            TlvRepr::SystemName(_) => TlvKind::SystemName,
            TlvRepr::SystemDescription(_) => TlvKind::SystemDescription,
            TlvRepr::SystemCapabilities { .. } => TlvKind::SystemCapabilities,
            TlvRepr::ManagementAddress(_) => TlvKind::ManagementAddress,
            TlvRepr::OrgSpecific { .. } => TlvKind::OrgSpecific,
            TlvRepr::Unknown { kind, .. } => TlvKind::from(*kind),
        }
    }

    fn value_len(&self) -> usize {
        match self {
            TlvRepr::End => 0,
            TlvRepr::ChassisId(id) | TlvRepr::PortId(id) => 1 + id.value.len(),
            TlvRepr::Ttl(_) => 2,
            TlvRepr::PortDescription(s)
            | TlvRepr::SystemName(s)
            | TlvRepr::SystemDescription(s) => s.len(),
            TlvRepr::SystemCapabilities { .. } => 4,
            TlvRepr::ManagementAddress(m) => m.value_len(),
            TlvRepr::OrgSpecific { info, .. } => 4 + info.len(),
            TlvRepr::Unknown { value, .. } => value.len(),
        }
    }

    /// Header plus value.
    pub fn buffer_len(&self) -> usize {
        TLV_HEADER_LEN + self.value_len()
    }

    /// Writes the TLV at the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = self.value_len();
        if len > MAX_VALUE_LEN {
            return Err(WireError::TooLong {
                what: "a TLV value",
                len,
                max: MAX_VALUE_LEN,
            });
        }
        if let TlvRepr::ManagementAddress(m) = self {
            if !(1..=31).contains(&m.address.len()) || m.oid.len() > 128 {
                return Err(WireError::TooLong {
                    what: "the management address or OID",
                    len: m.address.len().max(m.oid.len()),
                    max: 31,
                });
            }
        }
        let need = self.buffer_len();
        if buf.len() < need {
            return Err(WireError::BufferTooSmall {
                need,
                got: buf.len(),
            });
        }
        let header = (u16::from(u8::from(self.kind()) & 0x7f) << 9) | len as u16;
        buf[..2].copy_from_slice(&header.to_be_bytes());
        let v = &mut buf[2..need];
        match self {
            TlvRepr::End => {}
            TlvRepr::ChassisId(id) | TlvRepr::PortId(id) => {
                v[0] = id.subtype;
                v[1..].copy_from_slice(id.value);
            }
            TlvRepr::Ttl(t) => v.copy_from_slice(&t.to_be_bytes()),
            TlvRepr::PortDescription(s)
            | TlvRepr::SystemName(s)
            | TlvRepr::SystemDescription(s)
            | TlvRepr::Unknown { value: s, .. } => v.copy_from_slice(s),
            TlvRepr::SystemCapabilities { system, enabled } => {
                v[..2].copy_from_slice(&system.to_be_bytes());
                v[2..].copy_from_slice(&enabled.to_be_bytes());
            }
            TlvRepr::ManagementAddress(m) => {
                let a = m.address.len();
                v[0] = (a + 1) as u8;
                v[1] = m.family;
                v[2..2 + a].copy_from_slice(m.address);
                v[2 + a] = m.interface_subtype;
                v[3 + a..7 + a].copy_from_slice(&m.interface_number.to_be_bytes());
                v[7 + a] = m.oid.len() as u8;
                v[8 + a..].copy_from_slice(m.oid);
            }
            TlvRepr::OrgSpecific { oui, subtype, info } => {
                v[..3].copy_from_slice(oui);
                v[3] = *subtype;
                v[4..].copy_from_slice(info);
            }
        }
        Ok(need)
    }
}

/// Walks the TLVs of an LLDPDU (the Ethernet payload). Yields each TLV, unknown types
/// included; stops after the End TLV or at the end of the data (some senders omit End and
/// minimum-size padding follows End). After an error it yields nothing more.
#[derive(Debug, Clone)]
pub struct TlvIter<'a> {
    data: &'a [u8],
    offset: usize,
    done: bool,
}

impl<'a> TlvIter<'a> {
    pub fn new(lldpdu: &'a [u8]) -> TlvIter<'a> {
        TlvIter {
            data: lldpdu,
            offset: 0,
            done: false,
        }
    }
}

impl<'a> Iterator for TlvIter<'a> {
    type Item = Result<TlvRepr<'a>, WireError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.offset >= self.data.len() {
            return None;
        }
        let offset = self.offset;
        let item = Tlv::new_checked(&self.data[offset..]).and_then(|tlv| {
            self.offset += tlv.total_len();
            TlvRepr::parse(&tlv, offset)
        });
        self.done = matches!(item, Err(_) | Ok(TlvRepr::End));
        Some(item)
    }
}

/// The parsed LLDPDU: the three mandatory TLVs and the optional ones pipecast uses (the first
/// of each kind). Other TLVs stay reachable through [`TlvIter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LldpduRepr<'a> {
    pub chassis_id: Id<'a>,
    pub port_id: Id<'a>,
    pub ttl: u16,
    pub port_description: Option<&'a [u8]>,
    pub system_name: Option<&'a [u8]>,
    pub management_address: Option<ManagementAddress<'a>>,
}

impl<'a> LldpduRepr<'a> {
    /// Parses an LLDPDU (the payload of an EtherType 0x88cc frame). Every TLV must be well
    /// formed; chassis ID, port ID and TTL must come first, in that order.
    pub fn parse(lldpdu: &'a [u8]) -> Result<LldpduRepr<'a>, WireError> {
        let mut tlvs = TlvIter::new(lldpdu);
        let mut next = |what: &'static str| match tlvs.next() {
            Some(Ok(t)) => Ok(t),
            Some(Err(e)) => Err(e),
            None => Err(WireError::MissingTlv(what)),
        };
        let TlvRepr::ChassisId(chassis_id) = next("chassis ID")? else {
            return Err(WireError::MissingTlv("chassis ID"));
        };
        let TlvRepr::PortId(port_id) = next("port ID")? else {
            return Err(WireError::MissingTlv("port ID"));
        };
        let TlvRepr::Ttl(ttl) = next("TTL")? else {
            return Err(WireError::MissingTlv("TTL"));
        };
        let mut repr = LldpduRepr {
            chassis_id,
            port_id,
            ttl,
            port_description: None,
            system_name: None,
            management_address: None,
        };
        for tlv in tlvs {
            match tlv? {
                TlvRepr::PortDescription(s) => {
                    repr.port_description.get_or_insert(s);
                }
                TlvRepr::SystemName(s) => {
                    repr.system_name.get_or_insert(s);
                }
                TlvRepr::ManagementAddress(m) => {
                    repr.management_address.get_or_insert(m);
                }
                _ => {}
            }
        }
        Ok(repr)
    }

    /// The chassis ID as text (a MAC address for subtype 4, else UTF-8).
    pub fn chassis_text(&self) -> String {
        self.chassis_id.text(CHASSIS_SUBTYPE_MAC)
    }
    /// The port ID as text (a MAC address for subtype 3, else UTF-8).
    pub fn port_text(&self) -> String {
        self.port_id.text(PORT_SUBTYPE_MAC)
    }
    /// The system name, if sent.
    pub fn system_name_text(&self) -> Option<String> {
        self.system_name
            .map(|s| String::from_utf8_lossy(s).into_owned())
    }
    /// The name of the sending switch: its system name, else its chassis ID.
    pub fn switch_name(&self) -> String {
        self.system_name_text()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| self.chassis_text())
    }

    fn tlvs(&self) -> impl Iterator<Item = TlvRepr<'a>> {
        [
            Some(TlvRepr::ChassisId(self.chassis_id)),
            Some(TlvRepr::PortId(self.port_id)),
            Some(TlvRepr::Ttl(self.ttl)),
            self.port_description.map(TlvRepr::PortDescription),
            self.system_name.map(TlvRepr::SystemName),
            self.management_address.map(TlvRepr::ManagementAddress),
            Some(TlvRepr::End),
        ]
        .into_iter()
        .flatten()
    }

    pub fn buffer_len(&self) -> usize {
        self.tlvs().map(|t| t.buffer_len()).sum()
    }

    /// Writes the LLDPDU (ending with End) at the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let need = self.buffer_len();
        if buf.len() < need {
            return Err(WireError::BufferTooSmall {
                need,
                got: buf.len(),
            });
        }
        let mut at = 0;
        for tlv in self.tlvs() {
            at += tlv.emit(&mut buf[at..])?;
        }
        Ok(at)
    }
}

/// Parses a whole Ethernet frame carrying LLDP: the Ethernet header and the LLDPDU.
pub fn parse_frame(frame: &[u8]) -> Result<(ethernet::Repr, LldpduRepr<'_>), WireError> {
    let eth = ethernet::Frame::new_checked(frame)?;
    let header = ethernet::Repr::parse(&eth);
    if header.ethertype != EtherType::Lldp {
        return Err(WireError::NotLldp(header.ethertype.into()));
    }
    let payload = &frame[ethernet::HEADER_LEN..];
    Ok((header, LldpduRepr::parse(payload)?))
}

/// Writes a whole LLDP frame (Ethernet header to the nearest-bridge address, then the
/// LLDPDU) into `buf`; returns the frame length (without padding to 60 bytes).
pub fn emit_frame(
    src: Address,
    lldpdu: &LldpduRepr<'_>,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    let need = ethernet::HEADER_LEN + lldpdu.buffer_len();
    if buf.len() < need {
        return Err(WireError::BufferTooSmall {
            need,
            got: buf.len(),
        });
    }
    let header = ethernet::Repr {
        src_addr: src,
        dst_addr: Address::LLDP_NEAREST_BRIDGE,
        ethertype: EtherType::Lldp,
    };
    header.emit(&mut ethernet::Frame::new_unchecked(&mut buf[..need]));
    Ok(ethernet::HEADER_LEN + lldpdu.emit(&mut buf[ethernet::HEADER_LEN..need])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LldpduRepr<'static> {
        LldpduRepr {
            chassis_id: Id {
                subtype: CHASSIS_SUBTYPE_LOCAL,
                value: b"s0",
            },
            port_id: Id {
                subtype: PORT_SUBTYPE_IFNAME,
                value: b"n3",
            },
            ttl: 120,
            port_description: Some(b"n3"),
            system_name: Some(b"s0"),
            management_address: Some(ManagementAddress {
                family: 1,
                address: &[198, 18, 0, 1],
                interface_subtype: 2,
                interface_number: 7,
                oid: &[],
            }),
        }
    }

    #[test]
    fn emit_then_parse_round_trips() {
        let repr = sample();
        let mut buf = [0u8; 128];
        let n = emit_frame(Address([2, 0, 0, 0, 0, 1]), &repr, &mut buf).unwrap();
        assert_eq!(n, ethernet::HEADER_LEN + repr.buffer_len());
        let (eth, back) = parse_frame(&buf[..n]).unwrap();
        assert_eq!(eth.dst_addr, Address::LLDP_NEAREST_BRIDGE);
        assert_eq!(back, repr);
        assert_eq!(back.switch_name(), "s0");
        assert_eq!(back.port_text(), "n3");
        assert_eq!(
            back.management_address.unwrap().address_text(),
            "198.18.0.1"
        );
    }

    #[test]
    fn tlv_header_bytes_follow_the_standard() {
        // Chassis ID (type 1) with 3-byte value: 0x02 0x03.
        let mut buf = [0u8; 8];
        let n = TlvRepr::ChassisId(Id {
            subtype: 7,
            value: b"s0",
        })
        .emit(&mut buf)
        .unwrap();
        assert_eq!(&buf[..n], &[0x02, 0x03, 7, b's', b'0']);
        // A 300-byte unknown TLV uses the ninth length bit.
        let value = [0xabu8; 300];
        let mut big = [0u8; 302];
        TlvRepr::Unknown {
            kind: 100,
            value: &value,
        }
        .emit(&mut big)
        .unwrap();
        assert_eq!(&big[..2], &[(100 << 1) | 1, (300 - 256) as u8]);
    }

    #[test]
    fn unknown_and_org_tlvs_are_kept() {
        let bytes = [
            0x02, 0x03, 7, b's', b'0', // chassis
            0x04, 0x03, 5, b'p', b'1', // port
            0x06, 0x02, 0, 120, // ttl
            0xc8, 0x02, 9, 9, // type 100, 2 bytes
            0xfe, 0x05, 0x00, 0x12, 0x0f, 3, 1, // org specific
            0x00, 0x00, // end
            0xff, 0xff, // padding after End is ignored
        ];
        let kinds: Vec<TlvKind> = TlvIter::new(&bytes).map(|t| t.unwrap().kind()).collect();
        assert_eq!(
            kinds,
            [
                TlvKind::ChassisId,
                TlvKind::PortId,
                TlvKind::Ttl,
                TlvKind::Unknown(100),
                TlvKind::OrgSpecific,
                TlvKind::End
            ]
        );
        let repr = LldpduRepr::parse(&bytes).unwrap();
        assert_eq!(repr.port_text(), "p1");
        assert_eq!(repr.switch_name(), "s0", "falls back to the chassis ID");
    }

    #[test]
    fn malformed_lldpdus_are_errors() {
        // Value runs past the end.
        assert_eq!(
            LldpduRepr::parse(&[0x02, 0x09, 7, b's']).unwrap_err(),
            WireError::Truncated { need: 11, got: 4 }
        );
        // Port ID first.
        assert_eq!(
            LldpduRepr::parse(&[0x04, 0x03, 5, b'p', b'1']).unwrap_err(),
            WireError::MissingTlv("chassis ID")
        );
        // TTL of the wrong length.
        let e = LldpduRepr::parse(&[0x02, 0x02, 7, b's', 0x04, 0x02, 5, b'p', 0x06, 0x01, 9])
            .unwrap_err();
        assert!(
            matches!(
                e,
                WireError::BadTlv {
                    kind: 3,
                    offset: 8,
                    ..
                }
            ),
            "{e:?}"
        );
        // Empty chassis ID.
        let e = LldpduRepr::parse(&[0x02, 0x01, 7]).unwrap_err();
        assert!(matches!(e, WireError::BadTlv { kind: 1, .. }), "{e}");
        // Stops early.
        assert_eq!(
            LldpduRepr::parse(&[0x02, 0x02, 7, b's']).unwrap_err(),
            WireError::MissingTlv("port ID")
        );
        // Not LLDP.
        let mut frame = [0u8; 20];
        frame[12] = 0x08;
        assert_eq!(parse_frame(&frame).unwrap_err(), WireError::NotLldp(0x0800));
    }

    #[test]
    fn emit_refuses_small_buffers() {
        let mut buf = [0u8; 10];
        assert!(matches!(
            sample().emit(&mut buf),
            Err(WireError::BufferTooSmall { .. })
        ));
    }
}
