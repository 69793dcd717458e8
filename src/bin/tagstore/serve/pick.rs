//! Set commands that pick or move members: SRANDMEMBER, SPOP, SMOVE, with
//! Redis 7.0's replies (RESP2 and RESP3).

use super::commands::Context;
use super::keys::{self, Change};
use super::resp;
use super::sets::{touched, Failure};

/// The optional count of SRANDMEMBER and SPOP: `None` when absent.
fn count(rest: &[&[u8]]) -> Result<Option<i64>, Failure> {
    match rest.get(1) {
        None => Ok(None),
        Some(c) => std::str::from_utf8(c)
            .ok()
            .and_then(|c| c.parse::<i64>().ok())
            .map(Some)
            .ok_or_else(|| "value is not an integer or out of range".to_owned().into()),
    }
}

/// A small generator for picking members, seeded once per server.
fn next_random() -> u64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let mut b = [0u8; 8];
            let _ = getrandom::fill(&mut b);
            u64::from_le_bytes(b) | 1
        });
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x
    })
}

/// Moves `k` members picked at random to the front of `members`.
fn shuffle_front(members: &mut [String], k: usize) {
    let n = members.len();
    for i in 0..k.min(n) {
        let j = i + (next_random() % (n - i) as u64) as usize;
        members.swap(i, j);
    }
}

/// `SRANDMEMBER key [count]`: a member, or `count` distinct ones (with
/// repeats when `count` is negative), none removed. A negative count is
/// bounded by nothing the set holds, so its reply is held to
/// `ctx.max_tx_bytes`, as `EXEC`'s replies are: past it the reply is
/// dropped and an error sent instead (nothing of it was sent yet).
pub fn srandmember(
    ctx: &Context<'_>,
    rest: &[&[u8]],
    resp3: bool,
    out: &mut Vec<u8>,
) -> Result<(), Failure> {
    let key = keys::parse_key(rest[0])?;
    let n = count(rest)?;
    if n == Some(i64::MIN) {
        // Redis takes the count in [-i64::MAX, i64::MAX].
        return Err(
            "value is out of range, value must between -9223372036854775807 and \
                    9223372036854775807"
                .to_owned()
                .into(),
        );
    }
    let mut members = keys::member_list(ctx.store, &key)?;
    match n {
        None => match members.is_empty() {
            true => resp::null(out, resp3),
            false => {
                shuffle_front(&mut members, 1);
                resp::bulk(out, members[0].as_bytes());
            }
        },
        Some(n) if n >= 0 => {
            let k = usize::try_from(n).unwrap_or(usize::MAX).min(members.len());
            shuffle_front(&mut members, k);
            resp::array(out, k);
            for m in &members[..k] {
                resp::bulk(out, m.as_bytes());
            }
        }
        Some(n) => {
            // Repeats allowed: each pick from the whole set.
            let k = if members.is_empty() {
                0
            } else {
                n.unsigned_abs()
            };
            let k = usize::try_from(k).map_err(|_| "value is out of range".to_owned())?;
            let start = out.len();
            resp::array(out, k);
            for _ in 0..k {
                let i = (next_random() % members.len() as u64) as usize;
                resp::bulk(out, members[i].as_bytes());
                if out.len() - start > ctx.max_tx_bytes {
                    out.truncate(start);
                    return Err(format!(
                        "the reply would pass {} bytes (16 x --max-request-bytes): ask for \
                         fewer members",
                        ctx.max_tx_bytes
                    )
                    .into());
                }
            }
        }
    }
    Ok(())
}

/// `SPOP key [count]`: removes and returns a member, or up to `count`.
pub fn spop(
    ctx: &Context<'_>,
    rest: &[&[u8]],
    resp3: bool,
    out: &mut Vec<u8>,
) -> Result<(), Failure> {
    let key = keys::parse_key(rest[0])?;
    // Redis 7.0 answers a count that is no integer as one below zero.
    const NOT_POSITIVE: &str = "value is out of range, must be positive";
    let n = count(rest).map_err(|_| Failure::from(NOT_POSITIVE.to_owned()))?;
    if n.is_some_and(|n| n < 0) {
        return Err(NOT_POSITIVE.to_owned().into());
    }
    let mut members = keys::member_list(ctx.store, &key)?;
    let k = match n {
        None => members.len().min(1),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX).min(members.len()),
    };
    shuffle_front(&mut members, k);
    members.truncate(k);
    for m in &members {
        keys::with_tag(&key, m, |t| {
            keys::apply(ctx.store, key.half, t, Change::Remove)
        })?;
        touched(ctx, &key, rest[0], m);
    }
    match (n, members.first()) {
        (None, None) => resp::null(out, resp3),
        (None, Some(m)) => resp::bulk(out, m.as_bytes()),
        (Some(_), _) => {
            resp::set(out, members.len(), resp3);
            for m in &members {
                resp::bulk(out, m.as_bytes());
            }
        }
    }
    Ok(())
}

/// `SMOVE source destination member`: the tag `source` and `member` name
/// goes, the tag `destination` and `member` name comes (refused before
/// any change if a string of it is longer than a store takes); 1 if
/// `member` was in `source`.
pub fn smove(ctx: &Context<'_>, rest: &[&[u8]], out: &mut Vec<u8>) -> Result<(), Failure> {
    let (src, dst) = (keys::parse_key(rest[0])?, keys::parse_key(rest[1])?);
    let m = keys::member(rest[2])?;
    let store = ctx.store;
    // A member the source lacks (one too large to be stored, say) is not
    // moved: 0, as Redis answers; one it holds must fit the destination.
    let present = keys::contains(store, &src, m)?;
    if present {
        keys::check_fits(&dst, m)?;
    }
    if present && src != dst {
        // Each key noted as its change is made: a store error at the add
        // must not leave the source's change unnoted (a review's finding:
        // a reshard's next copy would not read the key again).
        keys::apply(store, src.half, &keys::tag(&src, m), Change::Remove)?;
        touched(ctx, &src, rest[0], m);
        keys::apply(store, dst.half, &keys::tag(&dst, m), Change::Add)?;
        touched(ctx, &dst, rest[1], m);
    }
    resp::int(out, i64::from(present));
    Ok(())
}
