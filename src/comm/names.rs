//! Errors of a view in its own ranks ([`Names`]). The engine, the links and the progress
//! thread name peers by their process on the engine (the base communicator's rank, MPI's
//! WORLD rank); a broadcast that fails on a view names them again in the view's ranks, with
//! the communicator's id and the world rank: "rank 3 of communicator 0x80000001 (world rank
//! 7) closed its connection …". A process outside the view stays a world rank, said so.

use super::CommError;
use std::sync::Arc;

/// How a view names the engine's processes.
#[derive(Clone)]
pub(super) struct Names {
    /// The view's id on its engine.
    pub id: u32,
    /// `members[i]`: the engine's process of view rank i (`None`: rank i is process i).
    pub members: Option<Arc<Vec<usize>>>,
}

impl Names {
    /// `e` (an error of the engine) with the ranks its text names given in this view's
    /// ranks: a [`CommError::OnView`] holding `e`, or `e` itself where it names no rank.
    pub fn of(&self, e: crate::Error) -> crate::Error {
        let text = e.to_string();
        let detail = rename(&text, self.id, |p| self.view_rank(p));
        if detail == text {
            return e;
        }
        CommError::OnView {
            id: self.id,
            detail,
            source: Box::new(e),
        }
        .into()
    }

    /// The view's rank of the engine's process `p`, if it is a member.
    fn view_rank(&self, p: usize) -> Option<usize> {
        match &self.members {
            Some(m) => m.iter().position(|&q| q == p),
            None => Some(p),
        }
    }
}

/// `text` with every "rank P" and "ranks [P, Q]" (P, Q: the engine's processes) named in the
/// ranks of communicator `id`, whose rank of process P is `of(P)` (`None`: not a member).
fn rename(text: &str, id: u32, of: impl Fn(usize) -> Option<usize>) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 64);
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        // A word that starts here ("rank" inside "ranks" or "prank" is not one).
        let starts = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let named = if !starts {
            None
        } else if b[i..].starts_with(b"ranks [") {
            list(&b[i + 7..]).map(|(ps, len)| (7 + len, many(&ps, id, &of)))
        } else if b[i..].starts_with(b"rank ") {
            number(&b[i + 5..]).map(|(p, len)| (5 + len, one(p, id, &of)))
        } else {
            None
        };
        match named {
            Some((len, named)) => {
                // `i` is at an ASCII letter: a character boundary.
                out.push_str(&text[copied..i]);
                out.push_str(&named);
                i += len;
                copied = i;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

fn one(p: usize, id: u32, of: &impl Fn(usize) -> Option<usize>) -> String {
    match of(p) {
        Some(r) => format!("rank {r} of communicator {id:#x} (world rank {p})"),
        None => format!("world rank {p} (not in communicator {id:#x})"),
    }
}

fn many(ps: &[usize], id: u32, of: &impl Fn(usize) -> Option<usize>) -> String {
    match ps.iter().map(|&p| of(p)).collect::<Option<Vec<usize>>>() {
        Some(rs) => format!("ranks {rs:?} of communicator {id:#x} (world ranks {ps:?})"),
        None => format!("world ranks {ps:?} (not all in communicator {id:#x})"),
    }
}

/// The decimal number `b` starts with, and its length.
fn number(b: &[u8]) -> Option<(usize, usize)> {
    let len = b.iter().take_while(|c| c.is_ascii_digit()).count();
    let n = std::str::from_utf8(&b[..len]).ok()?.parse().ok()?;
    Some((n, len))
}

/// The list "P, Q]" (of at least one number) `b` starts with, and its length with the "]".
fn list(b: &[u8]) -> Option<(Vec<usize>, usize)> {
    let mut ps = Vec::new();
    let mut i = 0;
    loop {
        let (p, len) = number(&b[i..])?;
        ps.push(p);
        i += len;
        if b[i..].starts_with(b"]") {
            return Some((ps, i + 1));
        }
        if !b[i..].starts_with(b", ") {
            return None;
        }
        i += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::TransportError;

    /// View 0x80000001 of processes [9, 7, 2]: process 7 is its rank 1, process 4 no rank.
    fn names() -> Names {
        Names {
            id: 0x8000_0001,
            members: Some(Arc::new(vec![9, 7, 2])),
        }
    }

    #[test]
    fn a_peer_is_named_in_the_view_with_the_communicator_and_its_world_rank() {
        let e = names().of(TransportError::PeerGone { peer: 7, ms: 5000 }.into());
        let text = e.to_string();
        assert!(
            text.starts_with("rank 1 of communicator 0x80000001 (world rank 7) is gone: it answered nothing for 5000 ms"),
            "{text}"
        );
        // The engine's error is kept as the source.
        let source = std::error::Error::source(&e).map(|s| s.to_string());
        assert!(source.unwrap().starts_with("rank 7 is gone"));
        let e = names().of(TransportError::Closed { peer: 4 }.into());
        assert!(
            e.to_string()
                .starts_with("world rank 4 (not in communicator 0x80000001) closed its connection"),
            "{e}"
        );
        let e = names().of(TransportError::Io {
            peer: Some(2),
            error: "Connection reset by peer".into(),
        }
        .into());
        assert_eq!(
            e.to_string(),
            "I/O error with rank 2 of communicator 0x80000001 (world rank 2): Connection reset by peer"
        );
    }

    #[test]
    fn lists_words_and_texts_without_ranks() {
        let of = |p| names().view_rank(p);
        assert_eq!(
            rename("ranks [2, 9] did not connect", 5, of),
            "ranks [2, 0] of communicator 0x5 (world ranks [2, 9]) did not connect"
        );
        assert_eq!(
            rename("ranks [2, 4]: late", 5, of),
            "world ranks [2, 4] (not all in communicator 0x5): late"
        );
        // Not a rank: another word, no number, a list that is not one.
        for text in [
            "prank 7",
            "rank x",
            "this rank",
            "ranks [a]",
            "ranks [1, ",
            "rank ",
        ] {
            assert_eq!(rename(text, 5, of), text);
        }
        assert_eq!(
            rename("é rank 9, then rank 2.", 1, of),
            "é rank 0 of communicator 0x1 (world rank 9), then rank 2 of communicator 0x1 (world rank 2)."
        );
        // An error that names no rank is left as it is.
        let e = names().of(CommError::ProgressGone.into());
        assert!(matches!(e, crate::Error::Comm(CommError::ProgressGone)));
        // A view in the engine's order (a dup) names the same numbers, with its id.
        let dup = Names {
            id: 3,
            members: None,
        };
        let e = dup.of(TransportError::Closed { peer: 1 }.into());
        assert!(e
            .to_string()
            .starts_with("rank 1 of communicator 0x3 (world rank 1) closed"));
    }
}
