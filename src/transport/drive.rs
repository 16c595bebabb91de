//! [`drive`]: one broadcast over one link, the loop of the communicator's progress thread
//! for a single broadcast, for tests and tools that drive a link themselves.

use super::{Buffers, Link};
use crate::engine::drive::Engine;
use crate::engine::driver::Driver;
use std::time::Duration;

/// Runs broadcast `seq` (posted on `engine`, its buffer in `bufs`) over `link` until it is
/// done here, then removes it: the loop of the communicator's progress thread for one
/// broadcast, for tests and tools that drive a link themselves.
pub fn drive(
    link: &mut dyn Link,
    bufs: &mut Buffers,
    engine: &mut Engine,
    seq: u64,
    clock: &dyn Fn() -> u64,
) -> crate::Result<()> {
    while !engine.is_done(seq) {
        engine.handle_timeout(clock())?;
        let wait = engine.may_wait(Duration::from_millis(5));
        link.progress(bufs, engine, clock, wait)?;
    }
    engine.finish(seq);
    Ok(())
}
