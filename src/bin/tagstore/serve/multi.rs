//! Transactions: `MULTI` queues a connection's requests, `EXEC` runs them
//! one after another, `DISCARD` drops them.
//!
//! The event loop runs one request at a time, so nothing of another
//! connection runs between the requests of an `EXEC`, and the turn's one
//! commit covers all of them (DESIGN.md §15.8). As in Redis, a request
//! refused while queueing (unknown, wrong number of arguments, too large)
//! makes `EXEC` discard the whole transaction; an error while running one
//! (a malformed key, say) is that request's reply inside `EXEC`'s array and
//! the others still run. If a key the connection WATCHed changed since,
//! `EXEC` runs nothing and answers a null array (`watch.rs`).

use super::commands::{execute, Context, Effect, Session};
use super::resp;
use std::cell::Cell;
use std::rc::Rc;

/// Bytes of bookkeeping per queued argument and per queued request (their
/// spans), counted with the arguments' own bytes against the limit.
const SPAN_BYTES: usize = 8;

/// The bytes every connection's transactions hold together, and their
/// limit (64 × `--max-request-bytes`): without it 1,024 connections could
/// each queue 16 × `--max-request-bytes`.
#[derive(Debug)]
pub struct Budget {
    held: Cell<usize>,
    limit: usize,
}

impl Budget {
    /// A budget of `limit` bytes, none held.
    pub fn new(limit: usize) -> Rc<Budget> {
        Rc::new(Budget {
            held: Cell::new(0),
            limit,
        })
    }
}

/// A transaction being queued: every argument's bytes in one buffer, so
/// that what it holds is what it counts.
#[derive(Debug)]
pub struct Tx {
    bytes: Vec<u8>,
    /// Each argument's end in `bytes`.
    ends: Vec<u32>,
    /// Each request's end in `ends`.
    requests: Vec<u32>,
    /// A request was refused while queueing: `EXEC` discards everything.
    failed: bool,
    /// The server's budget, and what this transaction counts in it
    /// (given back when the transaction ends, however it ends).
    budget: Rc<Budget>,
    counted: usize,
}

impl Drop for Tx {
    fn drop(&mut self) {
        let b = &self.budget;
        b.held.set(b.held.get().saturating_sub(self.counted));
    }
}

impl Tx {
    /// An empty transaction counted in `budget`.
    pub fn new(budget: Rc<Budget>) -> Tx {
        Tx {
            bytes: Vec::new(),
            ends: Vec::new(),
            requests: Vec::new(),
            failed: false,
            budget,
            counted: 0,
        }
    }

    /// Marks the transaction to be discarded at `EXEC`.
    pub fn fail(&mut self) {
        self.failed = true;
    }

    fn held(&self) -> usize {
        self.bytes.len() + SPAN_BYTES * (self.ends.len() + self.requests.len())
    }

    /// Queues a request and answers `QUEUED`, or refuses it (and fails the
    /// transaction) when the queue would pass `max_bytes`, or every
    /// connection's queues together their budget.
    pub fn queue(&mut self, args: &[&[u8]], max_bytes: usize, out: &mut Vec<u8>) {
        let adds: usize = args.iter().map(|a| a.len() + SPAN_BYTES).sum::<usize>() + SPAN_BYTES;
        let total = self.held().saturating_add(adds);
        if total > max_bytes || u32::try_from(self.bytes.len() + adds).is_err() {
            self.failed = true;
            return resp::error(
                out,
                &format!(
                    "ERR transaction too large: its queued requests would pass {max_bytes} bytes \
                     (16 x --max-request-bytes); EXEC will discard it"
                ),
            );
        }
        let b = &self.budget;
        let all = b.held.get().saturating_add(adds);
        if all > b.limit {
            self.failed = true;
            return resp::error(
                out,
                &format!(
                    "ERR transaction too large: the transactions every connection is queueing \
                     would pass {} bytes together (64 x --max-request-bytes); EXEC will discard it",
                    b.limit
                ),
            );
        }
        b.held.set(all);
        self.counted += adds;
        for a in args {
            self.bytes.extend_from_slice(a);
            self.ends.push(self.bytes.len() as u32);
        }
        self.requests.push(self.ends.len() as u32);
        resp::simple(out, "QUEUED");
    }

    /// The queued requests, each as its arguments.
    fn each(&self, mut f: impl FnMut(&[&[u8]])) {
        let (mut arg, mut at) = (0usize, 0usize);
        let mut args: Vec<&[u8]> = Vec::new();
        for &end in &self.requests {
            args.clear();
            while arg < end as usize {
                let e = self.ends[arg] as usize;
                args.push(&self.bytes[at..e]);
                (at, arg) = (e, arg + 1);
            }
            f(&args);
        }
    }
}

/// `MULTI`: starts queueing (not inside a transaction already).
pub fn multi(ctx: &Context<'_>, session: &mut Session, out: &mut Vec<u8>) {
    match session.tx {
        Some(_) => resp::error(out, "ERR MULTI calls can not be nested"),
        None => {
            session.tx = Some(Tx::new(ctx.tx_budget.clone()));
            resp::simple(out, "OK");
        }
    }
}

/// `DISCARD`: drops the queued requests.
pub fn discard(session: &mut Session, out: &mut Vec<u8>) {
    session.watched.clear();
    match session.tx.take() {
        Some(_) => resp::simple(out, "OK"),
        None => resp::error(out, "ERR DISCARD without MULTI"),
    }
}

/// `EXEC` given arguments inside a transaction: Redis ends the transaction
/// with `EXECABORT` and the reason.
pub fn exec_refused(session: &mut Session, out: &mut Vec<u8>) {
    session.tx = None;
    session.watched.clear();
    resp::error(
        out,
        "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command",
    );
}

/// `EXEC`: runs the queued requests in order, their replies in one array.
/// Replies past `ctx.max_tx_bytes` are not kept: the rest of the queue
/// still runs (a transaction runs whole), then the client is told, and
/// the connection closes, as Redis closes a client past its output limit.
pub fn exec(ctx: &Context<'_>, session: &mut Session, out: &mut Vec<u8>) -> Effect {
    let mut effect = Effect::default();
    let Some(tx) = session.tx.take() else {
        resp::error(out, "ERR EXEC without MULTI");
        return effect;
    };
    let broken = session.watched.broken();
    session.watched.clear();
    if tx.failed {
        resp::error(
            out,
            "EXECABORT Transaction discarded because of previous errors.",
        );
        return effect;
    }
    if broken {
        // A watched key changed: nothing runs, and the reply is null.
        resp::null_array(out, session.resp3);
        return effect;
    }
    let start = out.len();
    resp::array(out, tx.requests.len());
    let mut over = false;
    tx.each(|args| {
        // Each request appends exactly one reply, the array's next element.
        let at = out.len();
        let e = execute(ctx, session, args, out);
        effect.wrote |= e.wrote;
        effect.close |= e.close;
        if over || out.len() - start > ctx.max_tx_bytes {
            over = true;
            out.truncate(at);
        }
    });
    if over {
        out.truncate(start);
        resp::error(
            out,
            &format!(
                "ERR the transaction ran, but its replies passed {} bytes (16 x \
                 --max-request-bytes); the connection closes",
                ctx.max_tx_bytes
            ),
        );
        effect.close = true;
    }
    effect
}
