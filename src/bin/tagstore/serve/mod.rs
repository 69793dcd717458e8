//! `tagstore serve`: a store over the Redis protocol (RESP2, RESP3), each
//! key a set (DESIGN.md §15).
//!
//! * `resp.rs`: request parser and reply encoders;
//! * `keys.rs`: the key scheme, and the one function mapping a set write to
//!   a store write;
//! * `commands.rs`: command dispatch, arity, AUTH and HELLO; `sets.rs`:
//!   the set commands and DEL; `algebra.rs`: SINTER and the like;
//!   `pick.rs`: SRANDMEMBER, SPOP, SMOVE; `multi.rs` and `watch.rs`:
//!   transactions; `handshake.rs`: what clients send when they connect;
//!   `sscan.rs`: the SSCAN cursor and glob; `scan.rs`: SCAN, the keys a
//!   store's tags make (an extension); `changes.rs`: TAGSTORE.CHANGES,
//!   the keys changed since the last call (an extension, for `cluster
//!   reshard`);
//! * `conn.rs`: one connection's buffers and the steps of a turn;
//! * `server.rs`: the event loop (poll, one commit per turn), client
//!   limit, signals.
//!
//! Nothing a client sends may panic the server: no `unwrap` or `expect`
//! outside tests.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod algebra;
mod changes;
mod commands;
mod conn;
mod handshake;
mod keys;
mod multi;
mod pick;
mod resp;
#[cfg(test)]
mod resp_fuzz;
mod scan;
mod server;
mod sets;
mod sscan;
mod watch;

use crate::{open_rw, DurabilityArg, Fail, WaitArg};
use clap::Args;
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;
use tagstore::{CreateOptions, Error, Store};

/// Arguments of `tagstore serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Store file (created with default options if it does not exist).
    store: PathBuf,
    /// Address to listen on; port 0 picks a free port. The address bound
    /// is printed on stdout as `listening on ADDR`.
    #[arg(long, default_value = "127.0.0.1:6390")]
    listen: String,
    /// Require `AUTH` with this password before any other command.
    #[arg(long)]
    requirepass: Option<String>,
    /// Connections served at once; one more is told
    /// `-ERR max number of clients reached` and closed.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    max_clients: u64,
    /// Largest request in bytes, framing included (8 MiB: a SADD of some
    /// 50,000 members of 150 bytes, or 127 of the largest size, 65,536
    /// bytes). A larger one is a protocol
    /// error that closes the connection. A MULTI transaction queues at
    /// most 16 times this, all connections' transactions 64 times it.
    #[arg(long, default_value_t = 8 << 20, value_parser = clap::value_parser!(u64).range(64..=1 << 30))]
    max_request_bytes: u64,
    /// When writes become durable: `immediate` or `on-sync` (before their
    /// replies: one commit per turn of the event loop, shared by every
    /// connection), or `none` (at close; survives kill -9, not power loss).
    #[arg(long, value_enum, default_value_t = DurabilityArg::None)]
    durability: DurabilityArg,
    /// Drop a client that has not read its replies for this long (seconds).
    #[arg(long, value_name = "SECONDS", default_value = "60")]
    write_timeout: WaitArg,
    /// Keep the store's tag counters current while serving (for `tagstore
    /// count` and `cloud` on this store). Off by default: no command of the
    /// protocol reads them, and counters of millions of distinct subjects
    /// take memory and pause writes while they merge; off, they are rebuilt
    /// from the tags on their next use.
    #[arg(long)]
    counts: bool,
    /// Create the store half-only (when it does not exist): each write
    /// stores only the half its key names, as a node behind a proxy that
    /// routes a tag's `o:` and `s:` keys to different nodes needs. A store
    /// made half-only is always served so.
    #[arg(long)]
    half_only: bool,
    /// Memory for copies of hot sets' members, in bytes: a set of 256 or
    /// more members read whole (SMEMBERS and the other commands that read
    /// a set whole) three times since it was last written is answered from
    /// a packed copy until its next write (DESIGN.md §5.3.2); 0 keeps none.
    #[arg(long, default_value_t = 32 << 20)]
    hot_bytes: u64,
}

/// Most arguments in one request (the command name included).
const MAX_ARGS: usize = 1024 * 1024;

/// Runs the server until SIGTERM or SIGINT, then closes the store cleanly.
pub fn run(a: ServeArgs) -> Result<ExitCode, Fail> {
    if a.write_timeout.0.is_zero() {
        return Err(Fail::Usage(
            "serve",
            "--write-timeout must be more than 0".into(),
        ));
    }
    let listener = TcpListener::bind(&a.listen)
        .map_err(|e| Fail::Error(format!("cannot listen on {}: {e}", a.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Fail::Error(format!("listening socket: {e}")))?;
    let store = open_or_create(&a.store, a.half_only)?;
    if store.strings_unsure() {
        // Said once at start, not first by a client's failed SCAN.
        say_err!(
            "tagstore serve: warning: {} is lost or damaged while the store held tags longer \
             than a slot: those tags may be unreadable (SCAN and reads of them fail); `tagstore \
             check` names them, `tagstore export --salvage` saves the rest",
            tagstore::strings_path(&a.store).display()
        );
    }
    store.set_counting(a.counts);
    store.set_hot_bytes(usize::try_from(a.hot_bytes).unwrap_or(usize::MAX));
    // The loop commits once per turn, before any reply that acknowledges a
    // write of that turn: `immediate` and `on-sync` both run the store in
    // `OnSync` (DESIGN.md §15.3).
    let mode = match a.durability {
        DurabilityArg::None => tagstore::Durability::None,
        DurabilityArg::Immediate | DurabilityArg::OnSync => tagstore::Durability::OnSync,
    };
    if let Err(e) = store.set_durability(mode) {
        let _ = store.close();
        return Err(e.into());
    }
    let cfg = server::Config {
        password: a.requirepass.map(String::into_bytes),
        limits: resp::Limits {
            max_request_bytes: usize::try_from(a.max_request_bytes).unwrap_or(usize::MAX),
            max_args: MAX_ARGS,
            name: "--max-request-bytes",
        },
        commit: !matches!(a.durability, DurabilityArg::None),
        max_clients: usize::try_from(a.max_clients).unwrap_or(usize::MAX),
        write_timeout: a.write_timeout.0,
        durability: match a.durability {
            DurabilityArg::None => "none",
            DurabilityArg::Immediate => "immediate",
            DurabilityArg::OnSync => "on-sync",
        },
    };
    if let Err(e) = server::install_signals() {
        let _ = store.close();
        return Err(Fail::Error(format!("installing the SIGTERM handler: {e}")));
    }
    let mut stdout = std::io::stdout();
    if let Err(e) = writeln!(stdout, "listening on {addr}").and_then(|()| stdout.flush()) {
        let _ = store.close();
        return Err(Fail::Error(format!("writing to stdout: {e}")));
    }
    let served = server::run(listener, &store, &cfg);
    // Closing writes what is not on the disk yet: seconds for a large
    // store in durability `none`, so it is said.
    say_err!(
        "tagstore serve: stopped serving; closing {}",
        a.store.display()
    );
    let t = std::time::Instant::now();
    let closed = store.close();
    if closed.is_ok() {
        say_err!(
            "tagstore serve: closed {} in {:.1} s",
            a.store.display(),
            t.elapsed().as_secs_f64()
        );
    }
    served.map_err(|e| Fail::Error(format!("serving: {e}")))?;
    closed.map_err(|e| {
        Fail::Error(format!(
            "{}: closing the store: {e} (the next open recovers it)",
            a.store.display()
        ))
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Opens the store for writing, or creates it with default options
/// (half-only with `half_only`, which an existing store must then be).
fn open_or_create(path: &std::path::Path, half_only: bool) -> Result<Store, Fail> {
    let create = || {
        if half_only {
            Store::create_half_only(path, &CreateOptions::default())
        } else {
            Store::create(path, &CreateOptions::default())
        }
    };
    let store = match open_rw(path) {
        Err(Error::NotFound(_)) => match create() {
            Ok(s) => {
                say_err!("tagstore serve: created {}", path.display());
                s
            }
            // Someone else created it meanwhile.
            Err(Error::AlreadyExists(_)) => open_rw(path)?,
            Err(e) => return Err(e.into()),
        },
        r => r?,
    };
    if half_only && !store.is_half_only() {
        let _ = store.close();
        return Err(Fail::Error(format!(
            "{}: --half-only, but the store exists and keeps whole tags; serve it without --half-only, or give a new path",
            path.display()
        )));
    }
    Ok(store)
}
