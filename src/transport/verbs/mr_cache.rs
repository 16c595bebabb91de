//! Memory registrations by address range, shared by every broadcast whose buffer they cover.
//!
//! Registering pins pages and costs a system call per region, so broadcasts in flight on the
//! same bytes (the sending and receiving side of one buffer, `ibcast`s on slices of one array,
//! a repeated broadcast of a buffer still registered) share one region: a request inside a
//! cached range takes a reference to it instead of registering again.
//!
//! Invalidation is safe by construction: a region lives exactly as long as some broadcast in
//! flight holds it, and is deregistered when the last one lets go (before the buffer goes back
//! to its owner). A region kept past that ("leave pinned") would be unsafe without hooking the
//! allocator: the owner may free the buffer and the same addresses may map other pages, which
//! the old registration would still point to: peers' writes would land in the wrong memory.
//! [`MrCache::invalidate`] also drops ranges on request: a range that some broadcast still
//! holds is no longer handed out, and goes when its last holder lets go.

use super::ops::{Mr, MrId, Verbs, VerbsError};
use std::collections::BTreeMap;

#[derive(Debug)]
struct Entry {
    mr: Mr,
    start: u64,
    end: u64,
    holders: usize,
    /// Invalidated while held: never handed out again.
    stale: bool,
}

/// Cached registrations, by region (few: at most a couple per broadcast in flight, so a
/// lookup by range scans them).
#[derive(Debug, Default)]
pub struct MrCache {
    entries: BTreeMap<MrId, Entry>,
    /// Registrations made, and requests a cached one answered.
    pub registered: u64,
    pub reused: u64,
}

impl MrCache {
    pub fn new() -> MrCache {
        MrCache::default()
    }

    /// A region covering `len` bytes at `addr` (a cached one, or a new registration), held
    /// until [`MrCache::release`].
    ///
    /// # Safety
    /// The bytes must stay allocated until the matching `release` (see [`Verbs::register`]).
    pub unsafe fn acquire<V: Verbs + ?Sized>(
        &mut self,
        verbs: &mut V,
        addr: *mut u8,
        len: usize,
    ) -> Result<Mr, VerbsError> {
        let (start, end) = (addr as u64, addr as u64 + len as u64);
        if let Some(e) = self
            .entries
            .values_mut()
            .find(|e| !e.stale && e.start <= start && end <= e.end)
        {
            e.holders += 1;
            self.reused += 1;
            return Ok(e.mr);
        }
        // SAFETY: the caller keeps the bytes allocated until the matching release, which
        // deregisters the region once no broadcast holds it.
        let mr = unsafe { verbs.register(addr, len) }?;
        self.registered += 1;
        self.entries.insert(
            mr.id,
            Entry {
                mr,
                start,
                end,
                holders: 1,
                stale: false,
            },
        );
        Ok(mr)
    }

    /// Lets go of region `id`; deregisters it when nobody holds it any more.
    pub fn release<V: Verbs + ?Sized>(&mut self, verbs: &mut V, id: MrId) {
        let Some(e) = self.entries.get_mut(&id) else {
            return;
        };
        e.holders -= 1;
        if e.holders == 0 {
            self.entries.remove(&id);
            verbs.deregister(id);
        }
    }

    /// Stops handing out regions that overlap `start..end`; they go once nobody holds them
    /// (and, held by nobody, at once).
    pub fn invalidate<V: Verbs + ?Sized>(&mut self, verbs: &mut V, start: u64, end: u64) {
        let overlapping: Vec<MrId> = self
            .entries
            .iter()
            .filter(|(_, e)| e.start < end && e.end > start)
            .map(|(id, _)| *id)
            .collect();
        for id in overlapping {
            let e = self.entries.get_mut(&id).expect("listed");
            e.stale = true;
            if e.holders == 0 {
                self.entries.remove(&id);
                verbs.deregister(id);
            }
        }
    }

    /// Regions registered now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
