//! The protocol's messages (`engine::multicast::Msg`) as multicast frames (`wire::mcast`) and
//! back: a frame names its broadcast (cookie, sequence number, root, message and segment size;
//! a data frame the cookie's tag and the last three as a 16-bit check) so that ranks that
//! disagree see it ([`Ident::matches`]).

use crate::engine::multicast::{Msg, Out, To};
use crate::wire::mcast::{cookie_tag, flags, ident_check, Data, Header, Kind, Repr, GROUP};

/// Which broadcast of which job a frame belongs to, and who sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ident {
    pub cookie: u64,
    pub bseq: u64,
    pub root: usize,
    pub msize: u64,
    pub segment: u32,
    /// The sending rank.
    pub me: usize,
}

impl Ident {
    /// What a data frame carries of the root and sizes ([`ident_check`]).
    pub fn check(&self) -> u16 {
        ident_check(self.root as u32, self.msize, self.segment)
    }

    /// The header of `out` (`payload_len`: a data frame's bytes, at most
    /// [`MAX_PAYLOAD`](crate::wire::mcast::MAX_PAYLOAD): a longer one gets a count that does
    /// not match its payload, and [`Header::emit`] refuses it).
    pub fn encode(&self, out: &Out, payload_len: usize) -> Header {
        if let Msg::Data { index, repair } = out.msg {
            return Header::Data(Data {
                flags: if repair { flags::REPAIR } else { 0 },
                from: self.me as u32,
                tag: cookie_tag(self.cookie),
                bseq: self.bseq,
                index,
                count: u16::try_from(payload_len).unwrap_or(u16::MAX),
                check: self.check(),
            });
        }
        let mut r = Repr {
            kind: Kind::Sync,
            flags: 0,
            from: self.me as u32,
            cookie: self.cookie,
            bseq: self.bseq,
            msize: self.msize,
            segment: self.segment,
            index: 0,
            count: 0,
            root: self.root as u32,
            value: 0,
            to: match out.to {
                To::Group => GROUP,
                To::Rank(r) => r as u32,
            },
        };
        match out.msg {
            Msg::Data { .. } => {}
            Msg::Nack { index, count } => {
                r.kind = Kind::Nack;
                r.index = index;
                r.count = count;
            }
            Msg::Ack { value, ping } => {
                r.kind = Kind::Ack;
                r.value = value;
                if ping {
                    r.flags |= flags::PING;
                }
            }
            Msg::Sync { sent, answer } => {
                r.value = sent;
                if answer {
                    r.flags |= flags::PING;
                }
            }
            Msg::Abort { gone } => {
                r.kind = Kind::Abort;
                r.value = gone as u64;
            }
        }
        Header::Control(r)
    }

    /// Whether `h` names the same broadcast as this rank's (root, sizes; a data frame: their
    /// check); its cookie and sequence number were matched already.
    pub fn matches(&self, h: &Header) -> bool {
        self.mismatch(h).is_none()
    }

    /// What `h` says differently from this rank about its broadcast: what, ours, theirs.
    pub fn mismatch(&self, h: &Header) -> Option<(&'static str, u64, u64)> {
        match h {
            Header::Data(d) => (d.check != self.check()).then_some((
                "root or sizes (a data frame's check of them)",
                u64::from(self.check()),
                u64::from(d.check),
            )),
            Header::Control(r) => {
                if r.root as usize != self.root {
                    Some(("root", self.root as u64, u64::from(r.root)))
                } else if r.msize != self.msize {
                    Some(("message size", self.msize, r.msize))
                } else if r.segment != self.segment {
                    Some((
                        "multicast segment size",
                        u64::from(self.segment),
                        u64::from(r.segment),
                    ))
                } else {
                    None
                }
            }
        }
    }
}

/// The message a frame carries (`None`: a probe, not part of a broadcast).
pub fn decode(h: &Header) -> Option<Msg> {
    let r = match h {
        Header::Data(d) => {
            return Some(Msg::Data {
                index: d.index,
                repair: d.flags & flags::REPAIR != 0,
            })
        }
        Header::Control(r) => r,
    };
    let ping = r.flags & flags::PING != 0;
    Some(match r.kind {
        // A control header of kind data is never parsed (`Header::parse`).
        Kind::Data | Kind::Probe => return None,
        Kind::Nack => Msg::Nack {
            index: r.index,
            count: r.count,
        },
        Kind::Ack => Msg::Ack {
            value: r.value,
            ping,
        },
        Kind::Sync => Msg::Sync {
            sent: r.value,
            answer: ping,
        },
        Kind::Abort => Msg::Abort {
            gone: usize::try_from(r.value).unwrap_or(usize::MAX),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips() {
        let id = Ident {
            cookie: 7,
            bseq: 3,
            root: 1,
            msize: 1000,
            segment: 100,
            me: 4,
        };
        let msgs = [
            Msg::Data {
                index: 9,
                repair: true,
            },
            Msg::Data {
                index: 0,
                repair: false,
            },
            Msg::Nack { index: 2, count: 5 },
            Msg::Ack {
                value: 6,
                ping: true,
            },
            Msg::Ack {
                value: 10,
                ping: false,
            },
            Msg::Sync {
                sent: 4,
                answer: false,
            },
            Msg::Sync {
                sent: 4,
                answer: true,
            },
            Msg::Abort { gone: 3 },
        ];
        for msg in msgs {
            for to in [To::Group, To::Rank(2)] {
                let r = id.encode(&Out { to, msg }, 100);
                assert_eq!(decode(&r), Some(msg));
                assert!(id.matches(&r));
                assert_eq!(r.from(), 4);
                assert_eq!(r.bseq(), 3);
                assert!(r.of_job(7) && !r.of_job(8));
                // Through the bytes and back.
                let payload = vec![5u8; if r.kind() == Kind::Data { 100 } else { 0 }];
                let b = r.to_bytes(&payload).unwrap();
                let f =
                    crate::wire::mcast::Frame::new_checked([&b[..], &payload].concat()).unwrap();
                assert!(f.checksum_ok());
                assert_eq!(Header::parse(&f), r);
                // Another root or size is seen, in data frames too.
                for other in [
                    Ident { root: 2, ..id },
                    Ident { msize: 1001, ..id },
                    Ident { segment: 101, ..id },
                ] {
                    assert!(!other.matches(&r), "{other:?} {msg:?}");
                }
            }
        }
    }
}
