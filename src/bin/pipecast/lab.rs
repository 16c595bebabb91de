//! `pipecast lab` — to be written.

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CliResult {
    Err("pipecast lab is not implemented yet".into())
}
