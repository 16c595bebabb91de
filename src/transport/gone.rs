//! Why a peer is gone, as a link with per-peer setup records it (TCP, shared memory): the
//! error every broadcast that needs the peer fails with. Only a gone peer is an error; a late
//! one is waited for.

use super::TransportError;

#[derive(Debug, Clone)]
pub enum Gone {
    /// Its stream ended without a goodbye, or was reset (its process died or failed).
    Closed,
    /// Its listener refused this rank's connection (it no longer exists); `what` names the
    /// connection, e.g. "connect to rank 3 at 10.0.0.4:47800".
    Refused { what: String, error: String },
    /// Its setup did not finish within the connect timeout.
    Timeout { ms: u64 },
}

impl Gone {
    pub fn error(&self, peer: usize) -> TransportError {
        match self {
            Gone::Closed => TransportError::Closed { peer },
            Gone::Refused { what, error } => TransportError::Setup {
                what: what.clone(),
                error: format!("{error}: it died or failed (see its own error)"),
            },
            Gone::Timeout { ms } => TransportError::ConnectTimeout {
                waiting: vec![peer],
                ms: *ms,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_names_the_peer_or_the_connection() {
        let r = Gone::Refused {
            what: "connect to rank 3 at 10.0.0.4:47800".into(),
            error: "Connection refused".into(),
        };
        let e = r.error(3).to_string();
        assert!(
            e.contains("rank 3 at 10.0.0.4:47800") && e.contains("died or failed"),
            "{e}"
        );
        assert!(matches!(
            Gone::Closed.error(2),
            TransportError::Closed { peer: 2 }
        ));
        assert!(matches!(
            Gone::Timeout { ms: 60_000 }.error(5),
            TransportError::ConnectTimeout { ms: 60_000, .. }
        ));
    }
}
