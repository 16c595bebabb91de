//! What the crate's own tests and its integration tests (`tests/common`) share; not part of the
//! API (hidden from the documentation).

/// `len` bytes of the seeded pattern a broadcast test sends (a different one per `seed`: say,
/// per root or per broadcast), so that a byte landed at the wrong offset, or from another
/// broadcast, shows. The `i / 977` term keeps it from repeating every 256 bytes.
pub fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(131) + seed.wrapping_mul(17) + i / 977) as u8)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::pattern;

    #[test]
    fn seeds_and_offsets_differ() {
        assert!(pattern(0, 1).is_empty());
        assert_ne!(pattern(4096, 1), pattern(4096, 2));
        let p = pattern(1 << 16, 0);
        assert_ne!(p[..977], p[256..256 + 977], "not periodic in 256");
        assert_eq!(pattern(100, 3), pattern(1000, 3)[..100]);
    }
}
