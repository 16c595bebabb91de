//! The crate's error: one variant per layer.

/// Any pipecast error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Topology(#[from] crate::topology::TopologyError),
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    #[error(transparent)]
    Hetero(#[from] crate::hetero::HeteroError),
    #[error(transparent)]
    Wire(#[from] crate::wire::WireError),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error(transparent)]
    Transport(#[from] crate::transport::TransportError),
    #[error(transparent)]
    Comm(#[from] crate::comm::CommError),
    #[error(transparent)]
    Lab(#[from] crate::lab::LabError),
    #[error(transparent)]
    Discover(#[from] crate::topology::discover::DiscoverError),
}

/// Result with the crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
