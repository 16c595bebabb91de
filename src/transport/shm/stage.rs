//! A writer's staging ring, shared by all its readers: the fan-out path of the shared-memory
//! link. The writer copies each chunk of a segment into the ring once, and every reader it
//! sends that chunk to copies it out of the same place, concurrently: 1 + k copies for k
//! readers, each a plain `memcpy` from a region small enough to stay in the shared cache,
//! instead of k cross-memory attaches that each pin the writer's pages (`process_vm_readv`
//! takes the writer's page-table lock and a reference on every page, per reader) and each read
//! the whole message from main memory at its own pace. It is also the two-copy fallback where
//! cross-memory attach is refused (`ring`): the same ring, then with one chunk per reader.
//!
//! Chunks live in the ring in position order; positions grow without bound (`u64`, the place
//! in the ring is `pos % size`) and a chunk never wraps (the writer skips to the next turn). A
//! chunk is known by its broadcast and its place in that broadcast's buffer ([`Key`]: a
//! broadcast's sequence number never repeats on a link, and the bytes a rank sends from its
//! buffer no longer change), so a second reader of the same segment is given the chunk
//! already written. A chunk counts the readers it was announced to that have not yet released
//! it; the writer reuses the oldest chunks' room only when no reader holds them, so a reader
//! never sees its bytes overwritten, and a chunk no reader holds stays available for later
//! readers until its room is needed.

use super::ring::Ring;
use std::collections::{BTreeMap, VecDeque};
use std::io;

/// Which bytes a chunk holds: `len` bytes at offset `at` of broadcast `seq`'s buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub seq: u64,
    pub at: usize,
    pub len: usize,
}

struct Chunk {
    pos: u64,
    key: Key,
    /// Readers that were announced this chunk and have not released it.
    holders: u32,
}

/// The writer's side of its staging ring.
pub struct Stage {
    ring: Ring,
    /// Next position to write.
    head: u64,
    /// Live chunks, oldest first.
    chunks: VecDeque<Chunk>,
    by_key: BTreeMap<Key, u64>,
    /// Bytes copied into the ring.
    written: u64,
}

impl Stage {
    pub fn create(size: usize) -> io::Result<Stage> {
        Ok(Stage {
            ring: Ring::create(size)?,
            head: 0,
            chunks: VecDeque::new(),
            by_key: BTreeMap::new(),
            written: 0,
        })
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    pub fn size(&self) -> usize {
        self.ring.size()
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// The position of chunk `key` for one more reader, copying `bytes` (its content, `key.len`
    /// long, at most the ring's size) into the ring unless it is there already; `None` while
    /// readers still hold the room it needs.
    pub fn place(&mut self, key: Key, bytes: &[u8]) -> Option<u64> {
        debug_assert_eq!(bytes.len(), key.len);
        if let Some(&pos) = self.by_key.get(&key) {
            let i = self.index(pos).expect("a keyed chunk is live");
            self.chunks[i].holders += 1;
            return Some(pos);
        }
        let size = self.ring.size() as u64;
        let len = bytes.len() as u64;
        if len > size {
            return None;
        }
        let off = self.head % size;
        let pos = if off + len > size {
            self.head + (size - off)
        } else {
            self.head
        };
        // Reclaim the oldest chunks nobody holds until the new one fits.
        loop {
            let tail = self.chunks.front().map_or(pos, |c| c.pos);
            if pos + len - tail <= size {
                break;
            }
            let oldest = self.chunks.front().expect("the ring is not empty");
            if oldest.holders > 0 {
                return None;
            }
            self.by_key.remove(&oldest.key);
            self.chunks.pop_front();
        }
        self.ring.populate();
        self.ring.write((pos % size) as usize, bytes);
        self.written += len;
        self.head = pos + len;
        self.chunks.push_back(Chunk {
            pos,
            key,
            holders: 1,
        });
        self.by_key.insert(key, pos);
        Some(pos)
    }

    /// One reader is done with the chunk at `pos`.
    pub fn release(&mut self, pos: u64) -> Result<(), String> {
        match self.index(pos) {
            Some(i) if self.chunks[i].holders > 0 => {
                self.chunks[i].holders -= 1;
                Ok(())
            }
            _ => Err(format!(
                "released ring position {pos}, which it does not hold"
            )),
        }
    }

    fn index(&self, pos: u64) -> Option<usize> {
        self.chunks.binary_search_by_key(&pos, |c| c.pos).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seq: u64, at: usize, len: usize) -> Key {
        Key { seq, at, len }
    }

    #[test]
    fn a_chunk_is_written_once_for_every_reader_and_its_room_reused_only_when_free() {
        let mut s = Stage::create(4096).unwrap();
        let a = [1u8; 1500];
        let p = s.place(key(1, 0, 1500), &a).unwrap();
        assert_eq!(
            s.place(key(1, 0, 1500), &a),
            Some(p),
            "second reader, same chunk"
        );
        assert_eq!(s.written(), 1500);
        let q = s.place(key(1, 1500, 1500), &a).unwrap();
        assert_eq!(q, 1500);
        // 3000 + 1500 > 4096: skips to the next turn, which needs the first chunk's room.
        assert_eq!(s.place(key(1, 3000, 1500), &a), None);
        s.release(p).unwrap();
        assert_eq!(
            s.place(key(1, 3000, 1500), &a),
            None,
            "one reader still holds it"
        );
        s.release(p).unwrap();
        assert!(s.release(p).is_err(), "released more often than announced");
        assert_eq!(s.place(key(1, 3000, 1500), &a), Some(4096));
        let mut out = [0u8; 1500];
        s.ring().read(0, &mut out, true).unwrap();
        assert_eq!(out, a);
        assert!(s.release(77).is_err());
        // A chunk nobody holds stays available until its room is needed.
        s.release(q).unwrap();
        assert_eq!(s.place(key(1, 1500, 1500), &a), Some(q));
        assert_eq!(s.written(), 4500);
        assert_eq!(
            s.place(key(2, 0, 5000), &[0u8; 5000]),
            None,
            "larger than the ring"
        );
    }
}
