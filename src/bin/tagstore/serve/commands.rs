//! Command dispatch: one request's arguments in, its reply appended to the
//! connection's output.

use super::algebra;
use super::changes::Changes;
use super::handshake::{self, Facts};
use super::keys;
use super::multi::{self, Budget, Tx};
use super::pick;
use super::resp;
use super::sets::{del_command, scan_command, set_command};
use super::watch::{Watched, Watches};
use std::rc::Rc;
use tagstore::Store;

/// Bytes of the longest command name (`TAGSTORE.CHANGES`).
const NAME_MAX: usize = 16;

/// What a connection needs to run commands.
pub struct Context<'a> {
    pub store: &'a Store,
    /// `--requirepass`, if given.
    pub password: Option<&'a [u8]>,
    /// What INFO reports.
    pub facts: &'a Facts,
    /// Most bytes a transaction may queue (16 × `--max-request-bytes`).
    pub max_tx_bytes: usize,
    /// What every connection's transactions queue together, and its limit.
    pub tx_budget: Rc<Budget>,
    /// The versions of watched keys.
    pub watches: Rc<Watches>,
    /// The keys changed since the last TAGSTORE.CHANGES.
    pub changes: Changes,
}

/// One connection's state.
pub struct Session {
    /// AUTH succeeded (or no password is set).
    pub authed: bool,
    /// CLIENT ID.
    pub id: u64,
    /// CLIENT SETNAME.
    pub name: Option<Vec<u8>>,
    /// The transaction being queued (after MULTI).
    pub tx: Option<Tx>,
    /// `HELLO 3` chose RESP3: sets are sent as sets, nulls as `_`.
    pub resp3: bool,
    /// The keys WATCHed for the next EXEC.
    pub watched: Watched,
}

impl Session {
    /// A new connection's session, authenticated if `authed`.
    pub fn new(authed: bool) -> Session {
        Session {
            authed,
            id: handshake::next_client_id(),
            name: None,
            tx: None,
            resp3: false,
            watched: Watched::default(),
        }
    }
}

/// What running a command did besides replying.
#[derive(Clone, Copy, Debug, Default)]
pub struct Effect {
    /// The store may have changed (a commit is due in `on-sync`).
    pub wrote: bool,
    /// Close the connection after the reply (`QUIT`).
    pub close: bool,
}

/// Runs one request and appends its reply to `out`.
pub fn execute(
    ctx: &Context<'_>,
    session: &mut Session,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> Effect {
    let mut effect = Effect::default();
    let Some((name, rest)) = args.split_first() else {
        return effect;
    };
    let raw_name = name;
    // Lowercased on the stack (no allocation per request); a name longer
    // than any command, or not ASCII, is unknown.
    let mut buf = [0u8; NAME_MAX];
    let name = match buf.get_mut(..raw_name.len()) {
        Some(b) if raw_name.is_ascii() => {
            b.copy_from_slice(raw_name);
            b.make_ascii_lowercase();
            std::str::from_utf8(b).unwrap_or("")
        }
        _ => "",
    };
    // Commands that need no AUTH (inside a transaction AUTH and HELLO
    // are queued, as Redis does; QUIT is answered at once).
    let in_tx = session.tx.is_some();
    match name {
        "auth" if !in_tx => {
            auth(ctx, session, rest, out);
            return effect;
        }
        "quit" => {
            resp::simple(out, "OK");
            effect.close = true;
            return effect;
        }
        "hello" if !in_tx => {
            hello(ctx, session, rest, out);
            return effect;
        }
        _ => {}
    }
    if !session.authed {
        resp::error(out, "NOAUTH Authentication required.");
        return effect;
    }
    let known = arity(name, rest.len());
    if in_tx && name == "exec" && known == Some(false) {
        multi::exec_refused(session, out);
        return effect;
    }
    let refused = match known {
        None => {
            unknown(raw_name, rest, out);
            true
        }
        Some(false) => {
            resp::error(
                out,
                &format!("ERR wrong number of arguments for '{name}' command"),
            );
            true
        }
        Some(true) => false,
    };
    if in_tx {
        // CLIENT's subcommand is checked when queued, as Redis does.
        let why = match name {
            "client" if !refused => handshake::client_refusal(rest),
            _ => None,
        };
        if let Some(why) = &why {
            resp::error(out, why);
        }
        match name {
            _ if refused || why.is_some() => {
                if let Some(tx) = session.tx.as_mut() {
                    tx.fail();
                }
            }
            "exec" => return multi::exec(ctx, session, out),
            "discard" => multi::discard(session, out),
            "multi" => multi::multi(ctx, session, out),
            "watch" => resp::error(out, "ERR WATCH inside MULTI is not allowed"),
            _ => {
                if let Some(tx) = session.tx.as_mut() {
                    tx.queue(args, ctx.max_tx_bytes, out);
                }
            }
        }
        return effect;
    }
    if refused {
        return effect;
    }
    match name {
        "ping" => match rest.first() {
            None => resp::simple(out, "PONG"),
            Some(m) => resp::bulk(out, m),
        },
        // No command table: an empty array satisfies redis-cli's `COMMAND DOCS`.
        "command" => match rest.first() {
            // RESP3's reply to COMMAND DOCS is a map.
            Some(sub) if session.resp3 && sub.eq_ignore_ascii_case(b"docs") => {
                out.extend_from_slice(b"%0\r\n")
            }
            _ => resp::array(out, 0),
        },
        "echo" => handshake::echo(rest, out),
        "select" => handshake::select(rest, out),
        "client" => handshake::client(session, rest, out),
        "info" => handshake::info(ctx.store, ctx.facts, rest, session.resp3, out),
        "tagstore.changes" => ctx.changes.call(out),
        "sinter" | "sunion" | "sdiff" | "sintercard" | "exists" | "type" => {
            let r = match name {
                "sintercard" => algebra::intercard(ctx.store, rest, out),
                "exists" => algebra::exists_command(ctx.store, rest, out),
                "type" => algebra::type_command(ctx.store, rest[0], out),
                _ => algebra::combine(ctx.store, name, rest, session.resp3, out),
            };
            if let Err(e) = r {
                resp::error(out, &format!("ERR {e}"));
            }
        }
        "scan" => {
            if let Err(e) = scan_command(ctx.store, rest, out) {
                resp::error(out, &format!("ERR {e}"));
            }
        }
        "multi" => multi::multi(ctx, session, out),
        "exec" => return multi::exec(ctx, session, out),
        "discard" => multi::discard(session, out),
        "watch" => match rest.iter().try_for_each(|k| keys::parse_key(k).map(drop)) {
            Ok(()) => {
                for k in rest {
                    session.watched.add(&ctx.watches, k);
                }
                resp::simple(out, "OK");
            }
            Err(e) => resp::error(out, &format!("ERR {e}")),
        },
        "unwatch" => {
            session.watched.clear();
            resp::simple(out, "OK");
        }
        "srandmember" | "spop" | "smove" => {
            effect.wrote = name != "srandmember";
            let r = match name {
                "srandmember" => pick::srandmember(ctx, rest, session.resp3, out),
                "spop" => pick::spop(ctx, rest, session.resp3, out),
                _ => pick::smove(ctx, rest, out),
            };
            if let Err(e) = r {
                resp::error(out, &format!("ERR {e}"));
            }
        }
        "del" | "unlink" => {
            effect.wrote = true;
            if let Err(e) = del_command(ctx, rest, out) {
                resp::error(out, &format!("ERR {e}"));
            }
        }
        _ => {
            effect.wrote = matches!(name, "sadd" | "srem");
            if let Err(e) = set_command(ctx, name, rest, session.resp3, out) {
                resp::error(out, &format!("ERR {e}"));
            }
        }
    }
    effect
}

/// Whether `n` arguments (the name not counted) suit command `name`;
/// `None` for a command tagstore does not know.
fn arity(name: &str, n: usize) -> Option<bool> {
    Some(match name {
        "hello" | "command" | "info" => true,
        "ping" => n <= 1,
        "multi" | "exec" | "discard" | "unwatch" | "tagstore.changes" => n == 0,
        "auth" => n >= 1,
        "echo" | "select" | "type" | "smembers" | "scard" => n == 1,
        "client" | "exists" | "sinter" | "sunion" | "sdiff" | "scan" | "watch" | "del"
        | "unlink" => n >= 1,
        "sismember" => n == 2,
        "srandmember" | "spop" => (1..=2).contains(&n),
        "smove" => n == 3,
        "sintercard" | "sadd" | "srem" | "smismember" | "sscan" => n >= 2,
        _ => return None,
    })
}

/// `AUTH password` or `AUTH default password`.
fn auth(ctx: &Context<'_>, session: &mut Session, rest: &[&[u8]], out: &mut Vec<u8>) {
    let given = match rest {
        [p] => p,
        [user, p] if *user == b"default" => p,
        [_, _] => {
            resp::error(
                out,
                "WRONGPASS invalid username-password pair or user is disabled.",
            );
            return;
        }
        [] => {
            resp::error(out, "ERR wrong number of arguments for 'auth' command");
            return;
        }
        _ => {
            resp::error(out, "ERR syntax error");
            return;
        }
    };
    match ctx.password {
        // Redis 6 and later: the default user without a password takes
        // any password when named (as HELLO's AUTH does here), while the
        // one-argument form is the old `requirepass` check.
        None if rest.len() == 2 => resp::simple(out, "OK"),
        None => resp::error(
            out,
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ),
        Some(p) if same(p, given) => {
            session.authed = true;
            resp::simple(out, "OK");
        }
        Some(_) => resp::error(
            out,
            "WRONGPASS invalid username-password pair or user is disabled.",
        ),
    }
}

/// `HELLO [2|3 [AUTH user password] [SETNAME name]]`: switches the
/// connection to RESP2 or RESP3 (other versions get `NOPROTO`).
fn hello(ctx: &Context<'_>, session: &mut Session, rest: &[&[u8]], out: &mut Vec<u8>) {
    let h = match handshake::parse_hello(rest) {
        Ok(h) => h,
        Err(e) => return resp::error(out, &e),
    };
    // Checked before AUTH takes effect, as Redis does.
    if h.name.is_some_and(|n| !handshake::name_ok(n)) {
        return resp::error(out, handshake::BAD_NAME);
    }
    match h.auth {
        Some((user, given)) => {
            let ok = user == b"default" && ctx.password.is_none_or(|p| same(p, given));
            if !ok {
                return resp::error(
                    out,
                    "WRONGPASS invalid username-password pair or user is disabled.",
                );
            }
            session.authed = true;
        }
        None if !session.authed => {
            return resp::error(
                out,
                "NOAUTH HELLO must be called with the client already authenticated, otherwise \
                 the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the \
                 client and select the RESP protocol version at the same time",
            )
        }
        None => {}
    }
    if let Some(name) = h.name {
        handshake::rename(session, name);
    }
    if let Some(p) = h.proto {
        session.resp3 = p == 3;
    }
    handshake::hello_reply(session, out);
}

/// Compares without stopping at the first differing byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// `-ERR unknown command 'name', with args beginning with: 'a' 'b' `, as
/// Redis words it; client bytes are shown escaped and cut short.
fn unknown(name: &[u8], rest: &[&[u8]], out: &mut Vec<u8>) {
    let show = |b: &[u8]| -> String {
        let s: String = String::from_utf8_lossy(b).escape_default().collect();
        s.chars().take(128).collect()
    };
    let mut m = format!(
        "ERR unknown command '{}', with args beginning with: ",
        show(name)
    );
    for a in rest.iter().take(8) {
        m.push_str(&format!("'{}' ", show(a)));
    }
    resp::error(out, &m);
}
