//! The receiving half of the per-peer reliability from one peer: duplicate suppression, the
//! cumulative + selective acknowledgement and credit to return, the repaired echo.

use super::Config;
use std::collections::BTreeSet;

/// What the receiver makes of an arriving sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// First arrival: deliver it.
    Fresh,
    /// Seen before: drop it (but acknowledge again).
    Duplicate,
    /// Beyond the advertised credit: drop it unacknowledged.
    OutOfWindow,
}

/// The receiving half from one peer.
#[derive(Debug, Clone)]
pub struct Receiver {
    window: u64,
    /// Every number below this one arrived.
    cum: u64,
    ahead: BTreeSet<u64>,
    ack_due: bool,
    /// A retransmitted frame that arrived as new, to echo: (number, copy).
    repaired: Option<(u64, u8)>,
    pub duplicates: u64,
}

impl Receiver {
    pub fn new(config: Config) -> Receiver {
        Receiver {
            window: u64::from(config.window.max(1)),
            cum: 1,
            ahead: BTreeSet::new(),
            ack_due: false,
            repaired: None,
            duplicates: 0,
        }
    }

    /// Whether `seq` would be accepted as new, without recording it.
    pub fn would_accept(&self, seq: u64) -> Accept {
        if seq < self.cum || self.ahead.contains(&seq) {
            Accept::Duplicate
        } else if seq >= self.cum + self.window {
            Accept::OutOfWindow
        } else {
            Accept::Fresh
        }
    }

    /// Records an arriving sequence number (0 is "not sequenced" and never accepted).
    pub fn accept(&mut self, seq: u64) -> Accept {
        if seq == 0 {
            return Accept::OutOfWindow;
        }
        let verdict = self.would_accept(seq);
        match verdict {
            Accept::Fresh => {
                self.ahead.insert(seq);
                while self.ahead.remove(&self.cum) {
                    self.cum += 1;
                }
                self.ack_due = true;
            }
            Accept::Duplicate => {
                self.duplicates += 1;
                self.ack_due = true;
            }
            Accept::OutOfWindow => {}
        }
        verdict
    }

    /// The acknowledgement to send: (cumulative, selective bitmap, credit).
    pub fn ack(&self) -> (u64, u64, u32) {
        let mut sack = 0u64;
        for &s in self.ahead.range(self.cum + 1..self.cum + 65) {
            sack |= 1 << (s - self.cum - 1);
        }
        (self.cum, sack, self.window as u32)
    }

    /// One line of state for a failure report.
    pub fn describe(&self) -> String {
        format!(
            "cum {} ahead {} (first {:?}) ack_due {}",
            self.cum,
            self.ahead.len(),
            self.ahead.iter().next(),
            self.ack_due
        )
    }

    /// Notes that `seq`, just accepted as new, was a retransmission (copy number `copy`): the
    /// next bare acknowledgement echoes it ([`Receiver::take_repaired`]).
    pub fn repaired(&mut self, seq: u64, copy: u8) {
        self.repaired = Some((seq, copy));
    }

    /// The retransmitted frame to echo, once.
    pub fn take_repaired(&mut self) -> Option<(u64, u8)> {
        self.repaired.take()
    }

    /// Whether something arrived since the last [`Receiver::acked`], or an echo is owed
    /// (which only a bare acknowledgement carries).
    pub fn ack_due(&self) -> bool {
        self.ack_due || self.repaired.is_some()
    }

    /// An acknowledgement went out (piggybacked or alone).
    pub fn acked(&mut self) {
        self.ack_due = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::reliable::Sender;

    #[test]
    fn receiver_sack_and_credit() {
        let mut rx = Receiver::new(Config {
            window: 8,
            ..Config::default()
        });
        assert_eq!(rx.accept(2), Accept::Fresh);
        assert_eq!(rx.accept(4), Accept::Fresh);
        assert_eq!(rx.ack(), (1, 0b101, 8));
        assert_eq!(rx.accept(1), Accept::Fresh);
        assert_eq!(rx.ack(), (3, 0b1, 8));
        assert_eq!(rx.accept(2), Accept::Duplicate);
        assert_eq!(rx.accept(11), Accept::OutOfWindow);
        assert_eq!(rx.accept(0), Accept::OutOfWindow);
        let mut tx: Sender<u8> = Sender::new(Config::default());
        for i in 0..5 {
            let s = tx.push(0, i);
            tx.sent(s, 0);
        }
        assert_eq!(tx.on_ack(10, 3, 0b1, 8, None), 3);
        assert_eq!(tx.in_flight(), 2);
    }
}
