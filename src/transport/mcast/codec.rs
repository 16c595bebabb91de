//! The protocol's messages (`engine::multicast::Msg`) as multicast frames (`wire::mcast`) and
//! back: the frame names the broadcast (cookie, sequence number, root, message and segment
//! size) so that ranks that disagree see it ([`Ident::matches`]).

use crate::engine::multicast::{Msg, Out, To};
use crate::wire::mcast::{flags, Kind, Repr, GROUP};

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
    /// The header of `out` (`payload_len`: a data frame's bytes).
    pub fn encode(&self, out: &Out, payload_len: usize) -> Repr {
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
            Msg::Data { index, repair } => {
                r.kind = Kind::Data;
                r.index = index;
                r.count = payload_len as u32;
                if repair {
                    r.flags |= flags::REPAIR;
                }
            }
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
        r
    }

    /// Whether `r` names the same broadcast as this rank's (root, sizes); its cookie and
    /// sequence number were matched already.
    pub fn matches(&self, r: &Repr) -> bool {
        r.root as usize == self.root && r.msize == self.msize && r.segment == self.segment
    }
}

/// The message a frame carries (`None`: a probe, not part of a broadcast).
pub fn decode(r: &Repr) -> Option<Msg> {
    let ping = r.flags & flags::PING != 0;
    Some(match r.kind {
        Kind::Data => Msg::Data {
            index: r.index,
            repair: r.flags & flags::REPAIR != 0,
        },
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
        Kind::Probe => return None,
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
                assert_eq!(r.from, 4);
            }
        }
    }
}
