//! The accept loop: a thread per connection, the client limit, and a clean
//! stop on SIGTERM or SIGINT.

use super::conn;
use super::resp::Limits;
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;
use tagstore::Store;

/// The server's settings.
pub struct Config {
    /// `--requirepass`.
    pub password: Option<Vec<u8>>,
    /// `--max-request-bytes` and the argument limit.
    pub limits: Limits,
    /// `--durability on-sync`: one commit per batch, before its replies.
    pub commit_batches: bool,
    /// `--max-clients`.
    pub max_clients: usize,
    /// How long a reply may wait for the client to read before the client is dropped.
    pub write_timeout: Duration,
    /// Taken by a connection for the writes of one batch: the store
    /// serialises writers anyway, and contending for its lock once per batch
    /// instead of once per write spares dozens of threads a sleep and a
    /// wake-up per request (DESIGN.md §15.2).
    pub write_gate: Mutex<()>,
}

/// Set by SIGTERM and SIGINT.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handler, without `SA_RESTART`, so that a signal also wakes
/// the accept loop's `poll` at once.
fn install_signals() -> io::Result<()> {
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

/// Waits up to `ms` for a connection to accept (or a signal).
fn wait_readable(listener: &TcpListener, ms: i32) {
    let mut fd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut fd, 1, ms) };
}

/// The open connections: a handle on each to stop its reading, and a
/// signal when one ends.
#[derive(Default)]
struct Clients {
    open: Mutex<HashMap<u64, TcpStream>>,
    ended: Condvar,
}

impl Clients {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Removes its connection from [`Clients`] when the connection's thread ends.
struct Registration {
    clients: Arc<Clients>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.clients.lock().remove(&self.id);
        self.clients.ended.notify_all();
    }
}

/// Accepts connections until SIGTERM or SIGINT, then stops every
/// connection's reading (each finishes and answers the batch in hand) and
/// returns once all have ended and released the store.
pub fn run(listener: TcpListener, store: &Arc<Store>, cfg: &Arc<Config>) -> io::Result<()> {
    install_signals()?;
    listener.set_nonblocking(true)?;
    let clients = Arc::new(Clients::default());
    let mut next_id = 0u64;
    while !STOP.load(Ordering::SeqCst) {
        wait_readable(&listener, 200);
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                // Out of descriptors and the like: say so, and back off.
                eprintln!("tagstore serve: accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        next_id += 1;
        admit(stream, next_id, &clients, store, cfg);
    }
    drop(listener);
    stop_all(&clients);
    Ok(())
}

/// Starts a connection's thread, or refuses it when the server is full.
fn admit(
    mut stream: TcpStream,
    id: u64,
    clients: &Arc<Clients>,
    store: &Arc<Store>,
    cfg: &Arc<Config>,
) {
    let refuse = |stream: &mut TcpStream, why: &str| {
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = stream.write_all(format!("-ERR {why}\r\n").as_bytes());
    };
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    {
        let mut open = clients.lock();
        if open.len() >= cfg.max_clients {
            drop(open);
            return refuse(&mut stream, "max number of clients reached");
        }
        match stream.try_clone() {
            Ok(handle) => open.insert(id, handle),
            Err(_) => return,
        };
    }
    let registration = Registration {
        clients: Arc::clone(clients),
        id,
    };
    let (store, cfg2) = (Arc::clone(store), Arc::clone(cfg));
    let mut spare = stream.try_clone().ok();
    let spawned = std::thread::Builder::new()
        .name(format!("client-{id}"))
        .spawn(move || {
            let _registration = registration;
            conn::serve(stream, store, &cfg2);
        });
    if let (Err(e), Some(s)) = (spawned, spare.as_mut()) {
        // The closure (and its registration) was dropped with the error.
        refuse(s, &format!("cannot start a thread for this client: {e}"));
    }
}

/// Shuts down every connection's reading side, so each ends after
/// answering what it has read; after 5 s, also their writing side.
fn stop_all(clients: &Clients) {
    let mut open = clients.lock();
    for s in open.values() {
        let _ = s.shutdown(Shutdown::Read);
    }
    let mut forced = false;
    while !open.is_empty() {
        let (guard, timeout) = clients
            .ended
            .wait_timeout(open, Duration::from_secs(5))
            .unwrap_or_else(|p| p.into_inner());
        open = guard;
        if timeout.timed_out() && !forced {
            forced = true;
            for s in open.values() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}
