//! The event loop: one thread polls the listener and every connection,
//! runs what each sent, commits once per turn, then sends the replies; the
//! client limit; a clean stop on SIGTERM or SIGINT.

use super::commands::Context;
use super::conn::Conn;
use super::handshake::Facts;
use super::multi::Budget;
use super::resp::Limits;
use std::cell::Cell;
use std::io::{self, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tagstore::Store;

/// The server's settings.
pub struct Config {
    /// `--requirepass`.
    pub password: Option<Vec<u8>>,
    /// `--max-request-bytes` and the argument limit.
    pub limits: Limits,
    /// `--durability on-sync` or `immediate`: one commit per turn, before
    /// the replies that acknowledge its writes.
    pub commit: bool,
    /// `--max-clients`.
    pub max_clients: usize,
    /// How long a reply may wait for the client to read before the client is dropped.
    pub write_timeout: Duration,
    /// `--durability`, as given (INFO reports it).
    pub durability: &'static str,
}

/// Set by SIGTERM and SIGINT.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handler, without `SA_RESTART`, so that a signal also wakes
/// the loop's `poll` at once. Called before `listening on` is printed: a
/// SIGTERM sent as soon as that line is read must stop the server cleanly.
pub fn install_signals() -> io::Result<()> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: a zeroed sigaction with an empty mask and a handler that
        // only stores to an atomic is a valid, async-signal-safe action.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Longest wait in `poll` between looks at the stop flag and the write timeouts.
const TICK_MS: i32 = 200;
/// How long the listener rests after an accept error.
const ACCEPT_REST: Duration = Duration::from_millis(100);
/// How long a stopping server keeps sending replies before it closes anyway.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Serves until SIGTERM or SIGINT, then stops reading, answers (and
/// commits) what was read, and returns once every connection has ended.
pub fn run(listener: TcpListener, store: &Store, cfg: &Config) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let changes = super::changes::Changes::default();
    let facts = Facts {
        started: Instant::now(),
        port: listener.local_addr().map_or(0, |a| a.port()),
        max_clients: cfg.max_clients,
        durability: cfg.durability,
        max_request_bytes: cfg.limits.max_request_bytes,
        clients: Cell::new(0),
        run_id: changes.instance_hex(),
    };
    let ctx = Context {
        store,
        password: cfg.password.as_deref(),
        facts: &facts,
        max_tx_bytes: cfg.limits.max_request_bytes.saturating_mul(16),
        tx_budget: Budget::new(cfg.limits.max_request_bytes.saturating_mul(64)),
        watches: Default::default(),
        changes,
    };
    let mut listener = Some(listener);
    let mut conns: Vec<Conn> = Vec::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut stopping: Option<Instant> = None;
    let mut failed: Option<String> = None;
    // After an accept error (out of descriptors), the listener rests a while:
    // the connection stays queued, and polling it again at once would spin.
    let mut accept_rest: Option<Instant> = None;
    loop {
        facts.clients.set(conns.len());
        if stopping.is_none() && STOP.load(Ordering::SeqCst) {
            stopping = Some(Instant::now());
            listener = None;
            conns.iter_mut().for_each(Conn::stop_reading);
        }
        if let Some(t) = stopping {
            if conns.is_empty() || t.elapsed() > STOP_GRACE {
                return match failed {
                    Some(why) => Err(io::Error::other(format!("a commit failed: {why}"))),
                    None => Ok(()),
                };
            }
        }
        // Wait for something to do.
        fds.clear();
        if accept_rest.is_some_and(|t| t.elapsed() >= ACCEPT_REST) {
            accept_rest = None;
        }
        let listening = listener.as_ref().filter(|_| accept_rest.is_none());
        if let Some(l) = listening {
            fds.push(pollfd(l.as_raw_fd(), libc::POLLIN));
        }
        let first = fds.len();
        for c in &conns {
            let mut ev = 0;
            if c.wants_read() {
                ev |= libc::POLLIN;
            }
            if c.wants_write() {
                ev |= libc::POLLOUT;
            }
            fds.push(pollfd(c.stream.as_raw_fd(), ev));
        }
        let wait = if conns.iter().any(Conn::runnable) {
            0
        } else if accept_rest.is_some() {
            ACCEPT_REST.as_millis() as i32
        } else {
            TICK_MS
        };
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds for the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        // Read from every connection that has bytes (or an end) for us.
        for (c, fd) in conns.iter_mut().zip(&fds[first..]) {
            if fd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                c.read(&mut chunk);
            }
        }
        // Run what they sent, in order per connection; one commit for all.
        let mut wrote = false;
        for c in &mut conns {
            wrote |= c.run(&ctx, cfg);
        }
        // The commit comes before any reply of the turn is sent.
        if wrote && cfg.commit {
            if let Err(e) = store.sync() {
                // The handle is unusable now (reopen recovers what is
                // durable): answer nothing more from it, and stop.
                let why = e.to_string();
                say_err!("tagstore serve: a commit failed, stopping: {why}");
                conns.iter_mut().for_each(|c| c.commit_failed(&why));
                failed = Some(why);
                STOP.store(true, Ordering::SeqCst);
            }
        }
        for c in &mut conns {
            c.send();
        }
        let now = Instant::now();
        conns.retain(|c| !c.finished(cfg, now));
        // New connections join the next turn.
        if first == 1 && fds[0].revents & libc::POLLIN != 0 {
            if let Some(l) = &listener {
                if !accept_all(l, &mut conns, cfg) {
                    accept_rest = Some(Instant::now());
                }
            }
        }
    }
}

fn pollfd(fd: libc::c_int, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Accepts every waiting connection, refusing those past the client limit;
/// false after an error (out of descriptors and the like), said on stderr.
fn accept_all(listener: &TcpListener, conns: &mut Vec<Conn>, cfg: &Config) -> bool {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) => {
                say_err!("tagstore serve: accept: {e}");
                return false;
            }
        };
        if conns.len() >= cfg.max_clients {
            refuse(stream, "max number of clients reached");
            continue;
        }
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        let _ = stream.set_nodelay(true);
        conns.push(Conn::new(stream, cfg));
    }
}

/// Tells a client it cannot be served, and closes its connection.
fn refuse(mut stream: TcpStream, why: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = stream.write_all(format!("-ERR {why}\r\n").as_bytes());
}
