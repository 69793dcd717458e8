//! One client connection of the event loop: the bytes read and not yet run,
//! the replies not yet sent, and the steps of a turn (read, run, send;
//! the loop commits between the last two).

use super::commands::{self, Context, Session};
use super::resp::{self, Limits, Parsed, Progress, ProtocolError};
use super::server::Config;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

/// Most bytes read from one connection in one turn (others get their turn).
const READ_PER_TURN: usize = 1 << 20;
/// Unsent replies at which a connection's requests wait for the client to
/// read (and the connection is not read from meanwhile).
pub const FLUSH_AT: usize = 1 << 20;
/// Before AUTH (with a password set) a request is held to what AUTH needs,
/// as Redis does: at most 10 arguments and 16 KiB.
const BEFORE_AUTH: Limits = Limits {
    max_request_bytes: 16 * 1024,
    max_args: 10,
    name: "the limit before AUTH",
};

/// A client's connection and its buffers.
pub struct Conn {
    pub stream: TcpStream,
    peer: String,
    session: Session,
    /// Bytes read and not yet run (at most the start of one request, unless
    /// `backlog`).
    input: Vec<u8>,
    /// Where parsing the incomplete request at the front of `input` stopped.
    parsed: Progress,
    /// Replies; `out[sent..]` is not yet written to the socket.
    out: Vec<u8>,
    sent: usize,
    /// Where this turn's replies start in `out`.
    turn_start: usize,
    /// Whole requests wait in `input` because the replies reached `FLUSH_AT`.
    backlog: bool,
    /// Nothing more is read: the client closed its side, or the server stops.
    eof: bool,
    /// Close once the replies are sent (`QUIT`, a protocol error, a failed commit).
    closing: bool,
    /// The socket failed: drop without sending.
    dead: bool,
    /// When replies last made progress (or became pending).
    progress: Instant,
}

/// Arguments of a request kept on the stack; a request with more takes a vector.
const FEW_ARGS: usize = 8;

impl Conn {
    /// A new connection, authenticated when no password is set.
    pub fn new(stream: TcpStream, cfg: &Config) -> Conn {
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "?".to_owned(), |a| a.to_string());
        Conn {
            stream,
            peer,
            session: Session::new(cfg.password.is_none()),
            input: Vec::new(),
            parsed: Progress::default(),
            out: Vec::new(),
            sent: 0,
            turn_start: 0,
            backlog: false,
            eof: false,
            closing: false,
            dead: false,
            progress: Instant::now(),
        }
    }

    fn unsent(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Wants to read: open, and not held back by unsent replies or a backlog.
    pub fn wants_read(&self) -> bool {
        !(self.eof || self.closing || self.dead || self.backlog) && self.unsent() < FLUSH_AT
    }

    /// Has replies waiting for the socket to take them.
    pub fn wants_write(&self) -> bool {
        !self.dead && self.unsent() > 0
    }

    /// Has whole requests to run as soon as its replies drain.
    pub fn runnable(&self) -> bool {
        self.backlog && !self.closing && self.unsent() < FLUSH_AT
    }

    /// Stops reading (the server stops): what was read is still answered.
    pub fn stop_reading(&mut self) {
        self.eof = true;
    }

    /// Reads what the socket has, up to `READ_PER_TURN`.
    pub fn read(&mut self, chunk: &mut [u8]) {
        let mut got = 0;
        while got < READ_PER_TURN && self.wants_read() {
            match self.stream.read(chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.input.extend_from_slice(&chunk[..n]);
                    got += n;
                    if n < chunk.len() {
                        // Most likely all there was; `poll` says if more comes.
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.dead = true;
                    return;
                }
            }
        }
    }

    /// Runs every whole request read, in order, appending replies; true if
    /// one of them wrote to the store. The loop commits the turn's writes
    /// before it sends any reply (`send`).
    pub fn run(&mut self, ctx: &Context<'_>, cfg: &Config) -> bool {
        self.backlog = false;
        self.turn_start = self.out.len();
        if self.closing || self.dead {
            return false;
        }
        let was_idle = self.unsent() == 0;
        let mut used = 0;
        let mut wrote = false;
        while !self.closing {
            if self.unsent() >= FLUSH_AT {
                self.backlog = used < self.input.len();
                break;
            }
            let lim = if self.session.authed {
                &cfg.limits
            } else {
                &BEFORE_AUTH
            };
            match resp::parse_resume(&self.input[used..], lim, &mut self.parsed) {
                Ok(Parsed::Incomplete) => break,
                Ok(Parsed::Skip(k)) => used += k,
                Ok(Parsed::Request(args, k)) => {
                    used += k;
                    let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                    let e = commands::execute(ctx, &mut self.session, &args, &mut self.out);
                    wrote |= e.wrote;
                    self.closing = e.close;
                }
                Ok(Parsed::Multi(k)) => {
                    // The arguments stay in the input buffer: on the stack
                    // when few (every set command but a long SADD), no
                    // allocation at all.
                    let buf = &self.input[used..used + k];
                    let mut few: [&[u8]; FEW_ARGS] = [&[]; FEW_ARGS];
                    let mut many = Vec::new();
                    let mut n = 0;
                    for a in self.parsed.args(buf) {
                        match few.get_mut(n) {
                            Some(slot) => *slot = a,
                            None => {
                                if many.is_empty() {
                                    many.extend_from_slice(&few);
                                }
                                many.push(a);
                            }
                        }
                        n += 1;
                    }
                    let args = if many.is_empty() {
                        &few[..n]
                    } else {
                        &many[..]
                    };
                    let e = commands::execute(ctx, &mut self.session, args, &mut self.out);
                    used += k;
                    wrote |= e.wrote;
                    self.closing = e.close;
                }
                Err(ProtocolError(m)) => {
                    resp::error(&mut self.out, &format!("ERR {m}"));
                    self.closing = true;
                }
            }
        }
        self.input.drain(..used);
        if was_idle && self.unsent() > 0 {
            self.progress = Instant::now();
        }
        if self.closing {
            self.input = Vec::new();
        }
        wrote
    }

    /// The turn's commit failed (the server stops): none of this turn's
    /// replies is sent, since a read may have seen a write that is not
    /// durable; the client is told why, and the connection closes.
    pub fn commit_failed(&mut self, why: &str) {
        self.out.truncate(self.turn_start.max(self.sent));
        resp::error(
            &mut self.out,
            &format!(
                "ERR commit failed, the writes of this batch may be lost; the server stops: {why}"
            ),
        );
        self.closing = true;
        self.input = Vec::new();
    }

    /// Writes what the socket takes of the replies.
    pub fn send(&mut self) {
        if self.dead {
            return;
        }
        while self.unsent() > 0 {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => {
                    self.dead = true;
                    return;
                }
                Ok(n) => {
                    self.sent += n;
                    self.progress = Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.dead = true;
                    return;
                }
            }
        }
        self.out.clear();
        self.sent = 0;
        self.progress = Instant::now();
    }

    /// Done: failed, or closing or at its end with every reply sent.
    /// A client whose replies made no progress for the write timeout is
    /// dropped (and said so on stderr).
    pub fn finished(&self, cfg: &Config, now: Instant) -> bool {
        if self.dead {
            return true;
        }
        if self.unsent() > 0 {
            let stuck = now.duration_since(self.progress) > cfg.write_timeout;
            if stuck {
                say_err!(
                    "tagstore serve: dropped client {}: it read no reply for {} s",
                    self.peer,
                    cfg.write_timeout.as_secs_f64()
                );
            }
            return stuck;
        }
        self.closing || (self.eof && !self.backlog)
    }
}
