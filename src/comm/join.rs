//! Joining a job: a communicator's collective creation, in agreement at every rank
//! ([`Comm::join`]), from a bootstrap or from the environment ([`Comm::from_env`]).

use super::setup::Local;
use super::shared::{Known, Shared, Table};
use super::TcpRendezvous;
use super::{
    agree, hosts, multicast_setup, settings, tree_dump, Bootstrap, Comm, CommError, Config,
    Settings,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

impl Comm {
    /// Joins the job through `bootstrap`: see [`Comm::join`].
    pub fn new(
        rank: usize,
        size: usize,
        bootstrap: Box<dyn Bootstrap>,
        config: Config,
    ) -> crate::Result<Comm> {
        Comm::join(rank, size, bootstrap, Ok(config))
    }

    /// Joins the job through `bootstrap`, collectively and in agreement: every rank runs the
    /// same two allgathers whatever happens locally, and every rank returns the same outcome.
    ///
    /// 1. Local setup (`config` may already be a local failure: a bad setting): listen, open
    ///    the raw socket. The blob (`wire::bootstrap`) says ready, or failed and why.
    /// 2. First allgather: if any rank failed, or ranks disagree on the settings that decide
    ///    plans and links, every rank returns [`CommError::Agreement`] naming them.
    /// 3. Setup from everybody's blobs (topology, link, connections), then a second allgather
    ///    of "ready": a failure at any rank fails every rank.
    ///
    /// So a rank never falls back to the MPI's own broadcast alone (which hung the job).
    pub fn join(
        rank: usize,
        size: usize,
        mut bootstrap: Box<dyn Bootstrap>,
        config: crate::Result<Config>,
    ) -> crate::Result<Comm> {
        if rank >= size {
            return Err(CommError::BadRank { rank, size }.into());
        }
        let _span = tracing::info_span!("comm_setup", rank, size).entered();
        let host = hosts::host_name(config.as_ref().ok().and_then(|c| c.machine.as_deref()));
        let local = config.and_then(|config| Local::open(rank, size, config));
        let mine = match &local {
            Ok(l) => l.blob(&host),
            Err(e) => {
                tracing::info!(rank, error = %e, "local setup failed: telling the other ranks");
                agree::failed_blob(e, &host)
            }
        };
        let blobs = bootstrap.allgather(&mine).and_then(|blobs| {
            if blobs.len() == size {
                Ok(blobs)
            } else {
                Err(CommError::Bootstrap(format!(
                    "allgather returned {} blobs for {size} ranks",
                    blobs.len()
                )))
            }
        });
        // When the exchange itself fails, this rank's own failure (if any) is the news.
        let blobs = match (blobs, local) {
            (Err(_), Err(e)) => return Err(e),
            (Err(e), Ok(_)) => return Err(e.into()),
            (Ok(b), local) => (b, local),
        };
        let (blobs, local) = blobs;
        let peers = agree::decide(&blobs)?;
        // Every rank is ready and agrees: the rest depends on everybody's blobs only, except
        // for rare local failures (a thread, a connection), which the second round shares.
        let local = local.expect("a failed rank fails the agreement");
        let finished = local.finish(rank, size, &peers);
        let mut ready = agree::ready_blob(finished.as_ref().err());
        if let Ok(f) = &finished {
            ready.extend(multicast_setup::blob(f.mcast.as_ref()));
        }
        let all = bootstrap.allgather(&ready)?;
        agree::all_ready(&all)?;
        let mut f = finished.expect("a failed rank fails the second round");
        // Every rank has a carrier result here or none has (agreed settings and hosts).
        let multicast = match f.mcast.take() {
            Some(mine) => match multicast_setup::agree(
                &multicast_setup::Job {
                    rank,
                    size,
                    cookie: peers.cookie,
                    config: &f.config,
                    topology: &f.topology,
                    rate_bps: f.link_bps,
                },
                bootstrap.as_mut(),
                mine,
                &all,
            )? {
                Ok(agreed) => {
                    let segment = agreed.segment;
                    let m = super::multicast::Multicast::new(rank, agreed);
                    f.ops
                        .send(super::progress::Op::Multicast(Box::new(m)))
                        .map_err(|_| CommError::ProgressGone)?;
                    f.wake.notify();
                    Ok(segment)
                }
                Err(why) => {
                    tracing::info!(rank, "multicast off, every rank uses the trees: {why}");
                    Err(why)
                }
            },
            None => Err(if f.config.multicast == super::MulticastMode::Off {
                "PIPECAST_MULTICAST=off".to_string()
            } else {
                "the ranks are on one host".to_string()
            }),
        };
        let dump = f
            .config
            .tree_dump
            .as_deref()
            .map(|dir| tree_dump::TreeDump::new(dir, rank));
        let known = Known {
            rank,
            size,
            topology: f.topology.clone(),
            link: f.link,
            why_not: f.why_not.join("; "),
            frame_payload: f.frame_payload,
            network: f.network,
            me: (peers.cookie, rank as u64),
            addr: peers.addrs[rank],
            settings: f.settings,
            grows: f.grows,
            multicast,
        };
        let table = Table {
            ids: (0..size as u64).map(|r| (peers.cookie, r)).collect(),
            host_of: f.host_of,
            host_keys: f.host_keys,
            cpus: f.cpus,
        };
        let engine = Shared::new(f.ops, f.wake, f.progress, known, table);
        Ok(Comm {
            rank,
            size,
            id: 0,
            members: None,
            topology: f.topology,
            config: f.config,
            bootstrap: Some(bootstrap),
            plans: BTreeMap::new(),
            choices: BTreeMap::new(),
            seq: 0,
            engine: Arc::new(engine),
            failed: None,
            hosts: f.hosts,
            host_ranks: f.host_ranks,
            host_cpus: f.host_cpus,
            dump,
            joined: false,
            link: None,
        })
    }

    /// Joins the job described by `PIPECAST_RANK`, `PIPECAST_SIZE`, `PIPECAST_RENDEZVOUS`
    /// (`host:port` where rank 0 listens), with the other `PIPECAST_*` settings
    /// ([`Settings`]) over `config`. A bad setting is reported to every rank (see
    /// [`Comm::join`]).
    pub fn from_env(config: Config) -> crate::Result<Comm> {
        let Some(settings::Job {
            rank,
            size,
            rendezvous,
        }) = settings::Job::from_env()?
        else {
            return Err(CommError::Env {
                name: "PIPECAST_RANK",
                problem: "not set: launch ranks with `pipecast bench --local N` or set PIPECAST_RANK, PIPECAST_SIZE and PIPECAST_RENDEZVOUS=host:port".into(),
            }
            .into());
        };
        let mut config = config;
        let applied = Settings::from_env().apply(&mut config);
        let boot = TcpRendezvous::new(
            rank,
            size,
            &rendezvous,
            config.timeout.max(Duration::from_secs(30)),
        )?;
        if config.ip.is_none() && config.iface.is_none() {
            config.ip = boot.local_ip().map(|ip| ip.to_string());
        }
        Comm::join(
            rank,
            size,
            Box::new(boot),
            applied.map(|()| config).map_err(Into::into),
        )
    }
}
