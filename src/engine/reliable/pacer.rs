//! A token bucket that paces a link's sends (shared by every peer of the link).
//!
//! Why pacing: LAB.md, "Raw Ethernet frames": with a large send buffer, a sender that outruns
//! its link turns a downstream tbf into silent drops.

/// A token bucket: `rate` bytes per second, at most `burst` bytes at once.
///
/// A sender that is late (its thread not scheduled when the next send was due) loses the
/// time beyond the bucket for good. With a catch-up allowance ([`Pacer::set_catch_up`]) the
/// bucket holds up to `burst + catch_up` while the sender is backlogged, so a late sender
/// sends what it owes at once, that much at most; a sender with nothing to send says so
/// ([`Pacer::idle`]) and its bucket is back at `burst`: an idle sender never gathers more
/// than the bucket, only a late one.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate: Option<u64>,
    burst: u64,
    /// Tokens in byte-nanoseconds-per-second units (bytes × 1e9) to stay in integers.
    tokens: u128,
    last: u64,
    /// What a backlogged sender may hold beyond `burst` (bytes).
    catch_up: u64,
    /// Time the bucket overflowed while backlogged: the pace lost for good (ns).
    lost: u64,
    /// Time beyond the bucket a backlogged sender gathered into its catch-up allowance:
    /// the pace it was late by and may still send (ns).
    caught: u64,
}

const NS: u128 = 1_000_000_000;

impl Pacer {
    pub fn new(rate: Option<u64>, burst: u64, now: u64) -> Pacer {
        Pacer {
            rate: rate.filter(|r| *r > 0),
            burst: burst.max(1),
            tokens: u128::from(burst.max(1)) * NS,
            last: now,
            catch_up: 0,
            lost: 0,
            caught: 0,
        }
    }

    /// The most a backlogged sender's bucket holds (byte units × 1e9).
    fn cap(&self) -> u128 {
        u128::from(self.burst.saturating_add(self.catch_up)) * NS
    }

    fn refill(&mut self, now: u64) {
        if let Some(rate) = self.rate {
            let dt = u128::from(now.saturating_sub(self.last));
            let full = self.tokens + dt * u128::from(rate);
            let cap = self.cap();
            if full > cap {
                let over = (full - cap) / u128::from(rate);
                self.lost = self
                    .lost
                    .saturating_add(u64::try_from(over).unwrap_or(u64::MAX));
            }
            let kept = full.min(cap);
            let bucket = u128::from(self.burst) * NS;
            if kept > bucket.max(self.tokens) {
                let caught = (kept - bucket.max(self.tokens)) / u128::from(rate);
                self.caught = self
                    .caught
                    .saturating_add(u64::try_from(caught).unwrap_or(u64::MAX));
            }
            self.tokens = kept;
        }
        self.last = self.last.max(now);
    }

    /// The sender has nothing to send at `now` (all sent, or no credit): the bucket fills to
    /// `burst` at most, as an idle link's does, and no time counts as lost.
    pub fn idle(&mut self, now: u64) {
        if let Some(rate) = self.rate {
            let dt = u128::from(now.saturating_sub(self.last));
            self.tokens = (self.tokens + dt * u128::from(rate)).min(u128::from(self.burst) * NS);
        }
        self.last = self.last.max(now);
    }

    /// Lets a backlogged sender hold `bytes` beyond its bucket from `now` on: what it could
    /// not send while it was late, sent once it runs (0: none; the tokens beyond go).
    pub fn set_catch_up(&mut self, now: u64, bytes: u64) {
        self.refill(now);
        self.catch_up = bytes;
        self.clamp();
    }

    /// Drops the tokens beyond the cap: pace gathered to catch up and taken back is lost.
    fn clamp(&mut self) {
        let cap = self.cap();
        if self.tokens > cap {
            if let Some(rate) = self.rate {
                let ns = u64::try_from((self.tokens - cap) / u128::from(rate)).unwrap_or(u64::MAX);
                self.caught = self.caught.saturating_sub(ns);
                self.lost = self.lost.saturating_add(ns);
            }
            self.tokens = cap;
        }
    }

    /// What a backlogged sender may hold beyond its bucket (bytes).
    pub fn catch_up(&self) -> u64 {
        self.catch_up
    }

    /// How long the bucket overflowed while its sender was backlogged (ns): the pace it lost
    /// for good (a sender late by more than its bucket and catch-up hold).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// How long a backlogged sender was late beyond its bucket and kept that pace in its
    /// catch-up allowance (ns): the pace it caught up rather than lost.
    pub fn caught(&self) -> u64 {
        self.caught
    }

    /// Takes `bytes` tokens if there are enough (a frame larger than the bucket passes when
    /// the bucket is full).
    pub fn try_take(&mut self, now: u64, bytes: u64) -> bool {
        if self.rate.is_none() {
            return true;
        }
        self.refill(now);
        let need = u128::from(bytes.min(self.burst)) * NS;
        if self.tokens >= need {
            self.tokens -= need;
            true
        } else {
            false
        }
    }

    /// Paces at `rate` (bytes per second) from `now` on; the tokens gathered so far stay.
    pub fn set_rate(&mut self, now: u64, rate: Option<u64>) {
        self.refill(now);
        self.rate = rate.filter(|r| *r > 0);
    }

    /// The pace (bytes per second; `None`: unpaced).
    pub fn rate(&self) -> Option<u64> {
        self.rate
    }

    /// A bucket `burst` bytes deep from `now` on (the tokens beyond it go).
    pub fn set_burst(&mut self, now: u64, burst: u64) {
        self.refill(now);
        self.burst = burst.max(1);
        self.clamp();
    }

    /// The bucket's depth (bytes).
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// A bucket that holds `tokens` bytes at `now` (at most its depth) rather than a full one:
    /// what a bucket that paced an earlier stream gathered since.
    pub fn with_tokens(mut self, now: u64, tokens: u64) -> Pacer {
        self.tokens = u128::from(tokens.min(self.burst)) * NS;
        self.last = now;
        self
    }

    /// The bytes in the bucket at `now`, its depth at most (the depth when unpaced): what an
    /// idle sender's bucket holds then.
    pub fn level(&self, now: u64) -> u64 {
        if self.rate.is_none() {
            return self.burst;
        }
        let dt = u128::from(now.saturating_sub(self.last));
        let rate = u128::from(self.rate.unwrap_or(0));
        let have = (self.tokens + dt * rate).min(u128::from(self.burst) * NS);
        (have / NS) as u64
    }

    /// When `bytes` tokens will be there.
    pub fn ready_at(&self, now: u64, bytes: u64) -> u64 {
        let Some(rate) = self.rate else { return now };
        let need = u128::from(bytes.min(self.burst)) * NS;
        let dt = u128::from(now.saturating_sub(self.last));
        let have = (self.tokens + dt * u128::from(rate)).min(self.cap());
        if have >= need {
            now
        } else {
            now + ((need - have).div_ceil(u128::from(rate))) as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_bucket_started_below_full_fills_at_the_rate_up_to_its_depth() {
        // 1000 B/s: a byte per ms; a bucket of 100 bytes holding 10.
        let p = Pacer::new(Some(1000), 100, 0).with_tokens(0, 10);
        assert_eq!(p.level(0), 10);
        assert_eq!(p.level(5 * MS), 15);
        assert_eq!(p.level(1000 * MS), 100, "never above its depth");
        assert_eq!(p.ready_at(0, 20), 10 * MS);
        let mut p = p;
        assert!(!p.try_take(0, 20));
        assert!(p.try_take(10 * MS, 20));
        assert_eq!(p.level(10 * MS), 0);
        // More than the depth asked: the depth.
        assert_eq!(
            Pacer::new(Some(1000), 100, 0).with_tokens(0, 500).level(0),
            100
        );
        // Unpaced: always full.
        assert_eq!(Pacer::new(None, 100, 0).with_tokens(0, 1).level(0), 100);
    }

    /// Takes byte by byte at `now` until the bucket is empty: how many it held.
    fn drain(p: &mut Pacer, now: u64) -> u64 {
        let mut n = 0;
        while p.try_take(now, 1) {
            n += 1;
        }
        n
    }

    #[test]
    fn a_late_backlogged_sender_catches_up_what_it_owes_up_to_its_allowance() {
        // 1000 B/s, a bucket of 10 bytes, 30 more for a late sender.
        let mut p = Pacer::new(Some(1000), 10, 0);
        p.set_catch_up(0, 30);
        assert_eq!(drain(&mut p, 0), 10);
        // On time: one byte a ms.
        assert!(p.try_take(MS, 1));
        assert_eq!(p.lost(), 0);
        // 25 ms late: 25 bytes at once (more than the bucket), nothing lost, 15 ms of it
        // beyond the bucket caught up.
        assert_eq!(drain(&mut p, 26 * MS), 25);
        assert_eq!(p.lost(), 0);
        assert_eq!(p.caught(), 15 * MS);
        // 100 ms late: 40 bytes (bucket and allowance), 60 ms lost for good, 30 caught up.
        assert_eq!(drain(&mut p, 126 * MS), 40);
        assert_eq!(p.lost(), 60 * MS);
        assert_eq!(p.caught(), 45 * MS);
        assert_eq!(p.ready_at(126 * MS, 5), 131 * MS);
        // Idle for 100 ms (nothing to send): the bucket only, and nothing counts as lost.
        p.idle(226 * MS);
        assert_eq!(p.level(226 * MS), 10);
        assert_eq!(drain(&mut p, 226 * MS), 10);
        assert_eq!(p.lost(), 60 * MS);
        // Without the allowance (under loss): the bucket, the rest lost.
        p.set_catch_up(226 * MS, 0);
        assert_eq!(drain(&mut p, 246 * MS), 10);
        assert_eq!(p.lost(), 70 * MS);
        // A shrunk allowance drops the tokens beyond it; the level never shows more than
        // the bucket (what the next stream starts with).
        let mut q = Pacer::new(Some(1000), 10, 0);
        q.set_catch_up(0, 30);
        q.refill(40 * MS);
        assert_eq!(q.level(40 * MS), 10);
        let (lost, caught) = (q.lost(), q.caught());
        q.set_catch_up(40 * MS, 5);
        assert_eq!(drain(&mut q, 40 * MS), 15);
        // What it had gathered beyond the new cap counts as lost, not caught up.
        assert_eq!(q.lost(), lost + 25 * MS);
        assert_eq!(q.caught(), caught - 25 * MS);
    }
}
