//! The Ethernet II header: destination, source, EtherType (IEEE 802.3 §3.1.1).
//! No 802.1Q tag handling: a tagged frame shows EtherType 0x8100.

use super::WireError;
use std::fmt;

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Address(pub [u8; 6]);

impl Address {
    /// The nearest-bridge group address LLDP is sent to (IEEE 802.1AB §7.1).
    pub const LLDP_NEAREST_BRIDGE: Address = Address([0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e]);
    pub const BROADCAST: Address = Address([0xff; 6]);

    /// Reads an address from the first 6 bytes of `bytes` (callers check the length).
    fn from_slice(bytes: &[u8]) -> Address {
        let mut a = [0u8; 6];
        a.copy_from_slice(&bytes[..6]);
        Address(a)
    }
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl std::str::FromStr for Address {
    type Err = String;
    /// Parses `aa:bb:cc:dd:ee:ff` (also with `-`).
    fn from_str(s: &str) -> Result<Address, String> {
        let parts: Vec<&str> = s.trim().split([':', '-']).collect();
        let bad = || format!("{s:?} is not a MAC address (write aa:bb:cc:dd:ee:ff)");
        if parts.len() != 6 {
            return Err(bad());
        }
        let mut a = [0u8; 6];
        for (byte, part) in a.iter_mut().zip(parts) {
            if part.len() != 2 {
                return Err(bad());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
        }
        Ok(Address(a))
    }
}

/// EtherType values pipecast cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EtherType {
    Ipv4,
    Arp,
    Ipv6,
    Lldp,
    /// IEEE 802 local experimental EtherType 1, used by pipecast's raw frames.
    Pipecast,
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> EtherType {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            0x88cc => EtherType::Lldp,
            0x88b5 => EtherType::Pipecast,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(t: EtherType) -> u16 {
        match t {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Lldp => 0x88cc,
            EtherType::Pipecast => 0x88b5,
            EtherType::Unknown(v) => v,
        }
    }
}

mod field {
    use std::ops::{Range, RangeFrom};
    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const PAYLOAD: RangeFrom<usize> = 14..;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// A view of an Ethernet II frame over a byte buffer.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking it; field accessors may then panic on a short buffer.
    pub fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }
    /// Wraps a buffer that holds at least the 14-byte header.
    pub fn new_checked(buffer: T) -> Result<Frame<T>, WireError> {
        let got = buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                got,
            });
        }
        Ok(Frame { buffer })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    pub fn dst_addr(&self) -> Address {
        Address::from_slice(&self.buffer.as_ref()[field::DESTINATION])
    }
    pub fn src_addr(&self) -> Address {
        Address::from_slice(&self.buffer.as_ref()[field::SOURCE])
    }
    pub fn ethertype(&self) -> EtherType {
        let b = &self.buffer.as_ref()[field::ETHERTYPE];
        EtherType::from(u16::from_be_bytes([b[0], b[1]]))
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_dst_addr(&mut self, a: Address) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&a.0);
    }
    pub fn set_src_addr(&mut self, a: Address) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&a.0);
    }
    pub fn set_ethertype(&mut self, t: EtherType) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&u16::from(t).to_be_bytes());
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// The parsed Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_addr: Address,
    pub dst_addr: Address,
    pub ethertype: EtherType,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Repr {
        Repr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
        }
    }
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header into a frame whose buffer holds at least [`HEADER_LEN`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        frame.set_src_addr(self.src_addr);
        frame.set_dst_addr(self.dst_addr);
        frame.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 18] = [
        0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e, 0x62, 0x0f, 0x75, 0x67, 0x13, 0xa0, 0x88, 0xcc, 1, 2,
        3, 4,
    ];

    #[test]
    fn parses_and_emits_the_header() {
        let frame = Frame::new_checked(&BYTES[..]).unwrap();
        let repr = Repr::parse(&frame);
        assert_eq!(repr.dst_addr, Address::LLDP_NEAREST_BRIDGE);
        assert_eq!(repr.src_addr.to_string(), "62:0f:75:67:13:a0");
        assert_eq!(repr.ethertype, EtherType::Lldp);
        assert_eq!(frame.payload(), &[1, 2, 3, 4]);
        let mut out = [0u8; 18];
        let mut f = Frame::new_checked(&mut out[..]).unwrap();
        repr.emit(&mut f);
        f.payload_mut().copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(out, BYTES);
    }

    #[test]
    fn short_buffers_are_errors() {
        assert_eq!(
            Frame::new_checked(&BYTES[..13]).unwrap_err(),
            WireError::Truncated { need: 14, got: 13 }
        );
    }

    #[test]
    fn addresses_round_trip_through_text() {
        let a: Address = "62:0f:75:67:13:a0".parse().unwrap();
        assert_eq!(a.to_string(), "62:0f:75:67:13:a0");
        assert!("62:0f:75".parse::<Address>().is_err());
        assert!("zz:0f:75:67:13:a0".parse::<Address>().is_err());
        assert!(Address::LLDP_NEAREST_BRIDGE.is_multicast());
        assert_eq!(EtherType::from(0x1234), EtherType::Unknown(0x1234));
        assert_eq!(u16::from(EtherType::from(0x1234)), 0x1234);
    }
}
