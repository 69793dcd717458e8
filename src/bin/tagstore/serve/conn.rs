//! One client connection, on its own thread: read what the client sent,
//! run every whole request in it, commit once (`on-sync`), then send the
//! replies in order.

use super::commands::{self, Context, Session};
use super::resp::{self, Limits, Parsed, ProtocolError};
use super::server::Config;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use tagstore::Store;

/// Bytes asked for per read.
const READ_CHUNK: usize = 64 * 1024;
/// Replies held back before they are sent mid-batch (after a commit).
const FLUSH_AT: usize = 1 << 20;
/// Before AUTH (with a password set) a request is held to what AUTH needs,
/// as Redis does: at most 10 arguments and 16 KiB.
const BEFORE_AUTH: Limits = Limits {
    max_request_bytes: 16 * 1024,
    max_args: 10,
};

/// Serves one client until it leaves, sends `QUIT` or a malformed request,
/// stops reading its replies for longer than the write timeout, or the
/// server stops (its reading side is shut down). Takes the store by value
/// so that the handle is released before the connection is deregistered.
pub fn serve(mut stream: TcpStream, store: Arc<Store>, cfg: &Config) {
    let _ = stream.set_nodelay(true);
    if stream.set_write_timeout(Some(cfg.write_timeout)).is_err() {
        return;
    }
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    let ctx = Context {
        store: &store,
        password: cfg.password.as_deref(),
    };
    let mut session = Session {
        authed: cfg.password.is_none(),
    };
    let mut conn = Conn {
        stream: &mut stream,
        store: &store,
        commit_batches: cfg.commit_batches,
        out: Vec::new(),
        pending: false,
    };
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let n = match conn.stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut used = 0;
        let mut close = false;
        // Held from the batch's first write to its end (never while the
        // socket is written): see `Config::write_gate`.
        let mut gate = None;
        while !close {
            let lim = if session.authed {
                &cfg.limits
            } else {
                &BEFORE_AUTH
            };
            match resp::parse(&buf[used..], lim) {
                Ok(Parsed::Incomplete) => break,
                Ok(Parsed::Skip(k)) => used += k,
                Ok(Parsed::Request(args, k)) => {
                    used += k;
                    if gate.is_none() && commands::writes(&args) {
                        gate = Some(cfg.write_gate.lock().unwrap_or_else(|p| p.into_inner()));
                    }
                    let e = commands::execute(&ctx, &mut session, &args, &mut conn.out);
                    conn.pending |= e.wrote;
                    close = e.close;
                    if conn.out.len() >= FLUSH_AT {
                        gate = None;
                        if !conn.flush(&peer, cfg) {
                            return;
                        }
                    }
                }
                Err(ProtocolError(m)) => {
                    resp::error(&mut conn.out, &format!("ERR {m}"));
                    close = true;
                }
            }
        }
        drop(gate);
        buf.drain(..used);
        if !conn.flush(&peer, cfg) || close {
            return;
        }
    }
}

/// The writing side of a connection: replies not yet sent, and whether
/// they acknowledge writes not yet committed.
struct Conn<'a> {
    stream: &'a mut TcpStream,
    store: &'a Store,
    /// `on-sync`: commit before any reply that follows a write.
    commit_batches: bool,
    out: Vec<u8>,
    /// Writes since the last commit.
    pending: bool,
}

impl Conn<'_> {
    /// Commits the batch's writes (`on-sync`), then sends the replies; false
    /// when the connection is to be dropped.
    fn flush(&mut self, peer: &str, cfg: &Config) -> bool {
        if self.pending && self.commit_batches {
            self.pending = false;
            if let Err(e) = self.store.sync() {
                // The replies would acknowledge writes that are not durable:
                // send none of them, say why, and close.
                self.out.clear();
                resp::error(
                    &mut self.out,
                    &format!("ERR commit failed, the writes of this batch may be lost: {e}"),
                );
                let _ = self.stream.write_all(&self.out);
                return false;
            }
        }
        if self.out.is_empty() {
            return true;
        }
        let r = self.stream.write_all(&self.out);
        self.out.clear();
        match r {
            Ok(()) => true,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                eprintln!(
                    "tagstore serve: dropped client {peer}: it read no reply for {} s",
                    cfg.write_timeout.as_secs_f64()
                );
                false
            }
            Err(_) => false,
        }
    }
}
