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

/// Bytes a queued argument costs besides its own (its vector's header).
const ARG_OVERHEAD: usize = 24;

/// A transaction being queued.
#[derive(Debug, Default)]
pub struct Tx {
    queued: Vec<Vec<Vec<u8>>>,
    bytes: usize,
    /// A request was refused while queueing: `EXEC` discards everything.
    failed: bool,
}

impl Tx {
    /// Marks the transaction to be discarded at `EXEC`.
    pub fn fail(&mut self) {
        self.failed = true;
    }

    /// Queues a request and answers `QUEUED`, or refuses it (and fails the
    /// transaction) when the queue would pass `max_bytes`.
    pub fn queue(&mut self, args: &[&[u8]], max_bytes: usize, out: &mut Vec<u8>) {
        let bytes: usize = args.iter().map(|a| a.len() + ARG_OVERHEAD).sum();
        if self.bytes.saturating_add(bytes) > max_bytes {
            self.failed = true;
            return resp::error(
                out,
                &format!(
                    "ERR transaction too large: its queued requests would pass {max_bytes} bytes \
                     (16 x --max-request-bytes); EXEC will discard it"
                ),
            );
        }
        self.bytes += bytes;
        self.queued.push(args.iter().map(|a| a.to_vec()).collect());
        resp::simple(out, "QUEUED");
    }
}

/// `MULTI`: starts queueing (not inside a transaction already).
pub fn multi(session: &mut Session, out: &mut Vec<u8>) {
    match session.tx {
        Some(_) => resp::error(out, "ERR MULTI calls can not be nested"),
        None => {
            session.tx = Some(Tx::default());
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

/// `EXEC`: runs the queued requests in order, their replies in one array.
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
    resp::array(out, tx.queued.len());
    for request in &tx.queued {
        let args: Vec<&[u8]> = request.iter().map(Vec::as_slice).collect();
        // Each request appends exactly one reply, the array's next element.
        let e = execute(ctx, session, &args, out);
        effect.wrote |= e.wrote;
        effect.close |= e.close;
    }
    effect
}
