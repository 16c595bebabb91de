//! The [`Driver`] over one rank's [`Endpoint`]: what the links ask of the layer above them,
//! answered by the engine, without I/O. The communicator's progress thread drives one;
//! `transport::drive` runs one broadcast over a link the same way, for tests and tools that
//! drive a link themselves. The links never see the endpoint (docs/engine.md, "Links").

use super::driver::{Broadcast, Driver, Landing, Memory, Outgoing};
use super::{DataHeader, Endpoint, Expected, Message, Route};
use std::ops::{Deref, DerefMut};
use std::time::Duration;

/// One rank's broadcasts in flight: its [`Endpoint`] (reached through `Deref`, to post,
/// finish and inspect broadcasts), and the [`Driver`] its links see.
#[derive(Debug, Default)]
pub struct Engine {
    endpoint: Endpoint,
}

impl Engine {
    pub fn new() -> Engine {
        Engine::default()
    }

    /// An engine whose broadcasts keep a window of `window` segments (`Config::window`,
    /// agreed): [`Endpoint::with_window`].
    pub fn with_window(window: u32) -> Engine {
        Engine {
            endpoint: Endpoint::with_window(window),
        }
    }
}

impl Deref for Engine {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl DerefMut for Engine {
    fn deref_mut(&mut self) -> &mut Endpoint {
        &mut self.endpoint
    }
}

impl Driver for Engine {
    fn next(&mut self, now: u64, serves: &dyn Fn(usize) -> bool) -> Option<Outgoing> {
        let (seq, t) = self.endpoint.poll_transmit_to(now, serves)?;
        Some(Outgoing {
            to: t.to,
            rail: self.endpoint.rail_of(&t.message),
            message: t.message,
            seq,
            payload: t.payload,
        })
    }

    fn header(&mut self, from: usize, h: &DataHeader) -> crate::Result<Landing> {
        Ok(match self.endpoint.route_data(from, h)? {
            Route::Into { seq, range } => Landing::Into { seq, range },
            Route::Hold => Landing::Hold,
            Route::Discard => Landing::Discard,
        })
    }

    fn landed(&mut self, now: u64, from: usize, message: &Message) -> crate::Result<()> {
        match message {
            Message::Data(h) => self.endpoint.handle_data(now, h),
            m => self.endpoint.handle_message(now, from, m)?,
        }
        Ok(())
    }

    fn held(
        &mut self,
        bufs: &mut dyn Memory,
        now: u64,
        from: usize,
        message: Message,
        payload: Vec<u8>,
    ) -> crate::Result<()> {
        self.endpoint
            .deliver(now, from, message, payload, |seq, range, payload| {
                super::copy_into(bufs.buffer(from, seq)?, range, payload)
                    .map_err(crate::Error::from)
            })
    }

    fn waiting_for(&self) -> Vec<usize> {
        self.endpoint.waiting_for()
    }

    fn talks_to(&self) -> Vec<usize> {
        self.endpoint.peers()
    }

    fn in_flight(&self) -> u64 {
        self.endpoint.changes()
    }

    fn expected(&self, serves: &dyn Fn(usize) -> bool) -> Vec<Expected> {
        self.endpoint.expected(serves)
    }

    fn broadcast(&self, seq: u64) -> Option<Broadcast<'_>> {
        let b = self.endpoint.get(seq)?;
        Some(Broadcast {
            seq,
            root: b.root_name(),
            layout: b.layout(),
        })
    }

    fn may_wait(&self, wait: Duration) -> Duration {
        round_wait(&self.endpoint, wait)
    }
}

/// The one "may I sleep" rule: how long a round may wait for the network. Not at all once a
/// broadcast in flight is over here (everything it needed arrived, or this round's sends
/// finished it): its driver must hand it back first.
pub fn round_wait(endpoint: &Endpoint, wait: Duration) -> Duration {
    if endpoint.any_done() {
        Duration::ZERO
    } else {
        wait
    }
}
