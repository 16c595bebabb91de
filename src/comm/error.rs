//! What went wrong in a communicator.

use super::ErrorClass;

/// What went wrong in a communicator.
#[derive(Debug, thiserror::Error)]
pub enum CommError {
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    #[error("rank {rank} is not below the job size {size}")]
    BadRank { rank: usize, size: usize },
    #[error("environment variable {name}: {problem}")]
    Env { name: &'static str, problem: String },
    #[error("the topology has {machines} machines but the job has {size} ranks: rank r is machine r, so they must match")]
    TopologySize { machines: usize, size: usize },
    #[error("the topology has {machines} machines, the job {size} ranks, and these ranks' hosts are not machines of it (by `host` or `name`): {missing}; name the hosts in the file or set PIPECAST_MACHINE")]
    TopologyHosts {
        machines: usize,
        size: usize,
        missing: String,
    },
    #[error("pipecast failed earlier in this process ({0}): no communicator on its engine (this one included) can be used any more")]
    Failed(String),
    /// Some rank could not set up (or ranks disagree): every rank returns this same error.
    #[error("pipecast is not used on this communicator: {detail}")]
    Agreement { class: ErrorClass, detail: String },
    /// A call the communicator cannot take: bad view members, an id in use, a communicator
    /// that ran out of sequence numbers.
    #[error("{0}")]
    Usage(String),
    #[error("the progress thread is gone (it panicked)")]
    ProgressGone,
    /// A broadcast on view `id` failed: `source`, the engine's error (which names peers by
    /// their world rank, the engine's process), named in the view's ranks (`detail`).
    #[error("{detail}")]
    OnView {
        id: u32,
        detail: String,
        source: Box<crate::Error>,
    },
}
