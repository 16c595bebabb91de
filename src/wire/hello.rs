//! The 24-byte hello that opens a pipecast TCP connection: an 8-byte magic naming the protocol,
//! then two little-endian u64 words. The rendezvous (`comm::bootstrap`) sends
//! `"pcrendez"`, rank, job size; the TCP transport (`transport::tcp`) sends `"pipecast"`, job
//! cookie, rank. A connection whose first bytes are anything else (`GET / HTTP/1.0`, a port
//! scanner) is dropped.
//!
//! The TCP transport's connections carry both directions between two ranks. Each rank's
//! direction on a stream begins with a [`start`] record numbering it and ends with a
//! [`goodbye`]: records as long as an engine header
//! ([`message::HEADER`](super::message::HEADER)) that begin with `"pcbegins"` and
//! `"pcgoodby"` (an engine header begins with `"PC"`). After its goodbye a rank sends nothing
//! more on the stream and shuts its side; the end of a stream after a goodbye is orderly,
//! without one its sender is gone.

/// Bytes of a hello.
pub const LEN: usize = 24;
/// The rendezvous's magic: words are the rank and the job size.
pub const RENDEZVOUS: [u8; 8] = *b"pcrendez";
/// The TCP transport's magic: words are the job cookie and the rank.
pub const TCP_LINK: [u8; 8] = *b"pipecast";

/// The magic of the TCP transport's goodbye record.
pub const GOODBYE: [u8; 8] = *b"pcgoodby";

/// The magic of the TCP transport's start record: a rank's direction on a stream begins with
/// it, and its word numbers the directions that rank opened to that peer (0, 1, 2, …).
pub const START: [u8; 8] = *b"pcbegins";

/// The start record of direction number `epoch`: [`START`], the number (little-endian), then
/// zeros, as long as an engine header.
pub fn start(epoch: u64) -> [u8; super::message::HEADER] {
    let mut b = [0u8; super::message::HEADER];
    b[..8].copy_from_slice(&START);
    b[8..16].copy_from_slice(&epoch.to_le_bytes());
    b
}

/// The direction number of a start record; `None` for anything else.
pub fn parse_start(b: &[u8]) -> Option<u64> {
    if b.len() != super::message::HEADER || b[..8] != START || b[16..].iter().any(|&x| x != 0) {
        return None;
    }
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[8..16]);
    Some(u64::from_le_bytes(w))
}

/// The goodbye record: [`GOODBYE`], then zeros, as long as an engine header.
pub fn goodbye() -> [u8; super::message::HEADER] {
    let mut b = [0u8; super::message::HEADER];
    b[..8].copy_from_slice(&GOODBYE);
    b
}

/// Whether an engine-header-sized record is a goodbye.
pub fn is_goodbye(b: &[u8]) -> bool {
    b.len() == super::message::HEADER && b[..8] == GOODBYE && b[8..].iter().all(|&x| x == 0)
}

/// A hello with `magic` and the two words.
pub fn emit(magic: [u8; 8], first: u64, second: u64) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[..8].copy_from_slice(&magic);
    b[8..16].copy_from_slice(&first.to_le_bytes());
    b[16..].copy_from_slice(&second.to_le_bytes());
    b
}

/// The two words of a hello that carries `magic`; `None` for any other bytes (too short, or
/// another protocol's).
pub fn parse(magic: [u8; 8], b: &[u8]) -> Option<(u64, u64)> {
    if b.len() != LEN || b[..8] != magic {
        return None;
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(w)
    };
    Some((word(8), word(16)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_strangers() {
        let b = emit(RENDEZVOUS, 3, 8);
        assert_eq!(parse(RENDEZVOUS, &b), Some((3, 8)));
        assert_eq!(parse(TCP_LINK, &b), None);
        assert_eq!(parse(RENDEZVOUS, &b[..23]), None);
        assert_eq!(parse(TCP_LINK, b"GET / HTTP/1.0\r\n\r\n\0\0\0\0\0\0"), None);
    }

    #[test]
    fn a_goodbye_is_no_engine_header() {
        let b = goodbye();
        assert!(is_goodbye(&b));
        assert!(super::super::message::parse(&b).is_err());
        let mut other = b;
        other[20] = 1;
        assert!(!is_goodbye(&other));
        assert!(!is_goodbye(&b[..24]));
        let s = start(7);
        assert_eq!(parse_start(&s), Some(7));
        assert_eq!(parse_start(&b), None);
        assert!(!is_goodbye(&s));
        assert!(super::super::message::parse(&s).is_err());
    }
}
