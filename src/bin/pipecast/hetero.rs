//! `pipecast hetero` — to be written.

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CliResult {
    Err("pipecast hetero is not implemented yet".into())
}
