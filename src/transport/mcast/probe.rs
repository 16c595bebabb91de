//! The setup probe: does the job's group reach every rank? At setup the root multicasts a
//! probe (a frame of kind `probe` carrying a nonce) every few milliseconds for a while, and
//! every other rank says whether one arrived ([`probe`]). A rank that hears it answers the root
//! by unicast, so that the root stops as soon as every rank answered ([`ProbeConfig::answers`]):
//! on a network where multicast works the probe costs a round trip, not its whole duration;
//! a rank that hears nothing waits the whole duration. A switch that snoops IGMP without a
//! join, a filtering switch or a cloud network without multicast makes some rank say no. No
//! rank decides alone: the caller gathers every rank's answer (an allgather) and every rank
//! applies [`agree`] to the same answers, so all take multicast or none does.

use super::{accept, Carrier, To};
use crate::transport::raweth::socket::poll_fds;
use crate::wire::mcast::{Header, Kind, Repr, GROUP};
use std::io;
use std::time::{Duration, Instant};

/// How long the root multicasts its probe and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeConfig {
    /// The root sends for this long; the others wait as long for one probe.
    pub duration: Duration,
    pub every: Duration,
    /// The root stops once this many ranks answered (0: it sends for the whole duration).
    pub answers: usize,
}

impl Default for ProbeConfig {
    fn default() -> ProbeConfig {
        ProbeConfig {
            duration: Duration::from_millis(200),
            every: Duration::from_millis(10),
            answers: 0,
        }
    }
}

/// Rank `me`'s part in the probe of the job with `cookie` from `root`: the root multicasts
/// probes carrying `nonce` for the configured time (and returns true); another rank returns
/// whether one of them arrived within that time. Frames that are not this probe are read and
/// dropped. Call it at every rank at about the same moment (after a collective).
pub fn probe(
    carrier: &mut dyn Carrier,
    me: usize,
    root: usize,
    cookie: u64,
    nonce: u64,
    config: ProbeConfig,
) -> io::Result<bool> {
    let start = Instant::now();
    let deadline = start + config.duration;
    let repr = Repr {
        kind: Kind::Probe,
        from: me as u32,
        cookie,
        root: root as u32,
        value: nonce,
        to: GROUP,
        ..Repr::default()
    };
    let header = Header::Control(repr)
        .to_bytes(&[])
        .map_err(io::Error::other)?;
    let answer = Header::Control(Repr {
        to: root as u32,
        ..repr
    })
    .to_bytes(&[])
    .map_err(io::Error::other)?;
    let mut answered = std::collections::BTreeSet::new();
    let mut next_send = start;
    let mut buf = vec![0u8; 65_536];
    loop {
        let now = Instant::now();
        if me == root && now >= next_send {
            carrier.send(To::Group, &header, &[])?;
            next_send = now + config.every;
        }
        while let Some((source, n)) = carrier.recv(&mut buf)? {
            let is_rank = |r: usize, s: &super::Source| carrier.is_rank(r, s);
            if let Ok((Header::Control(r), _)) = accept(&buf[..n], &source, me, cookie, &is_rank) {
                let probe = r.kind == Kind::Probe && r.value == nonce;
                if probe && me != root && r.from as usize == root && r.to == GROUP {
                    // Best effort: a lost answer only makes the root wait the whole duration.
                    carrier.send(To::Rank(root), &answer, &[])?;
                    return Ok(true);
                }
                if probe && me == root && r.to as usize == root && r.from as usize != root {
                    answered.insert(r.from);
                    if config.answers > 0 && answered.len() >= config.answers {
                        return Ok(true);
                    }
                }
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(me == root);
        }
        let until = if me == root {
            next_send.min(deadline)
        } else {
            deadline
        };
        let wait = until
            .saturating_duration_since(now)
            .clamp(Duration::from_millis(1), Duration::from_secs(1));
        let fds: Vec<_> = carrier.fds().into_iter().map(|fd| (fd, false)).collect();
        poll_fds(&fds, wait, None)?;
    }
}

/// What every rank concludes from every rank's answer (`received[r]`, the same vector at
/// every rank): `Ok` when the group reached every rank, else the ranks it did not reach.
pub fn agree(received: &[bool]) -> Result<(), Vec<usize>> {
    let missed: Vec<usize> = (0..received.len()).filter(|&r| !received[r]).collect();
    if missed.is_empty() {
        Ok(())
    } else {
        Err(missed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_must_have_heard_the_probe() {
        assert_eq!(agree(&[true, true, true]), Ok(()));
        assert_eq!(agree(&[true, false, true, false]), Err(vec![1, 3]));
        assert_eq!(agree(&[]), Ok(()));
    }
}
