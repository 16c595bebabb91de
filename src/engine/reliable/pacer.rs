//! A token bucket that paces a link's sends (shared by every peer of the link).
//!
//! Why pacing: LAB.md, "Raw Ethernet frames": with a large send buffer, a sender that outruns
//! its link turns a downstream tbf into silent drops.

/// A token bucket: `rate` bytes per second, at most `burst` bytes at once.
#[derive(Debug, Clone)]
pub struct Pacer {
    rate: Option<u64>,
    burst: u64,
    /// Tokens in byte-nanoseconds-per-second units (bytes × 1e9) to stay in integers.
    tokens: u128,
    last: u64,
}

const NS: u128 = 1_000_000_000;

impl Pacer {
    pub fn new(rate: Option<u64>, burst: u64, now: u64) -> Pacer {
        Pacer {
            rate: rate.filter(|r| *r > 0),
            burst: burst.max(1),
            tokens: u128::from(burst.max(1)) * NS,
            last: now,
        }
    }

    fn refill(&mut self, now: u64) {
        if let Some(rate) = self.rate {
            let dt = u128::from(now.saturating_sub(self.last));
            self.tokens = (self.tokens + dt * u128::from(rate)).min(u128::from(self.burst) * NS);
        }
        self.last = self.last.max(now);
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
        self.tokens = self.tokens.min(u128::from(self.burst) * NS);
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

    /// The bytes in the bucket at `now` (the depth when unpaced).
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
        let have = (self.tokens + dt * u128::from(rate)).min(u128::from(self.burst) * NS);
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
}
