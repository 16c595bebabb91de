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
