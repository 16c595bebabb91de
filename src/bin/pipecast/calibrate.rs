//! `pipecast calibrate` — to be written.

use crate::CliResult;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CliResult {
    Err("pipecast calibrate is not implemented yet".into())
}
