//! What client libraries send around their real work: HELLO, CLIENT,
//! SELECT, INFO, ECHO. Answered as Redis answers them, so that a client's
//! connection set-up (ioredis's ready check reads INFO; go-redis opens with
//! HELLO; redis-py and Jedis send CLIENT SETINFO) succeeds (DESIGN.md §15.7).

use super::commands::Session;
use super::resp;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tagstore::Store;

/// The protocol level INFO and HELLO report: the RESP2 commands served
/// behave as in this Redis version.
pub const REDIS_VERSION: &str = "7.0.0";

/// What INFO reports about the server.
pub struct Facts {
    /// When the server started.
    pub started: Instant,
    /// The port it listens on.
    pub port: u16,
    /// `--max-clients`.
    pub max_clients: usize,
    /// `--durability`, as given.
    pub durability: &'static str,
    /// `--max-request-bytes` (INFO says it, so the cluster tools size
    /// their commands to it).
    pub max_request_bytes: usize,
    /// Connections open now (the loop updates it every turn).
    pub clients: Cell<usize>,
    /// This server instance (new at each start), INFO's `run_id`: the
    /// cluster tools tell a restarted node by it.
    pub run_id: String,
}

/// A new connection's id (CLIENT ID, HELLO): 1, 2, 3, … per server.
pub fn next_client_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `ECHO message`.
pub fn echo(rest: &[&[u8]], out: &mut Vec<u8>) {
    resp::bulk(out, rest[0]);
}

/// `SELECT index`: only database 0 exists.
pub fn select(rest: &[&[u8]], out: &mut Vec<u8>) {
    match std::str::from_utf8(rest[0])
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
    {
        Some(0) => resp::simple(out, "OK"),
        Some(_) => resp::error(out, "ERR DB index is out of range"),
        None => resp::error(out, "ERR value is not an integer or out of range"),
    }
}

/// Why Redis refuses a `CLIENT` request before running it (an unknown
/// subcommand, a wrong number of arguments), if it does: inside MULTI
/// such a request is refused when queued, not inside EXEC's reply.
pub fn client_refusal(rest: &[&[u8]]) -> Option<String> {
    let sub = rest.first()?.to_ascii_lowercase();
    let n = rest.len() - 1;
    match sub.as_slice() {
        b"id" | b"getname" if n == 0 => None,
        b"setname" if n == 1 => None,
        b"setinfo" if n == 2 => None,
        b"id" | b"getname" | b"setname" | b"setinfo" => Some(format!(
            "ERR wrong number of arguments for 'client|{}' command",
            text(&sub)
        )),
        _ => Some(format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            text(rest[0]).escape_default()
        )),
    }
}

/// `CLIENT ID | GETNAME | SETNAME name | SETINFO attr value`.
pub fn client(session: &mut Session, rest: &[&[u8]], out: &mut Vec<u8>) {
    if let Some(why) = client_refusal(rest) {
        return resp::error(out, &why);
    }
    let sub = rest[0].to_ascii_lowercase();
    match (sub.as_slice(), &rest[1..]) {
        (b"id", []) => resp::int(out, i64::try_from(session.id).unwrap_or(i64::MAX)),
        (b"getname", []) => match &session.name {
            Some(n) => resp::bulk(out, n),
            None => resp::null(out, session.resp3),
        },
        (b"setname", [name]) if name_ok(name) => {
            rename(session, name);
            resp::simple(out, "OK");
        }
        (b"setname", [_]) => resp::error(out, BAD_NAME),
        (b"setinfo", [attr, _]) => {
            let attr = attr.to_ascii_lowercase();
            if attr == b"lib-name" || attr == b"lib-ver" {
                resp::simple(out, "OK");
            } else {
                resp::error(out, &format!("ERR Unrecognized option '{}'", text(&attr)));
            }
        }
        // Every other shape was refused above.
        _ => {}
    }
}

/// Redis's refusal of a client name.
pub const BAD_NAME: &str =
    "ERR Client names cannot contain spaces, newlines or special characters.";

/// True for a name Redis accepts: no spaces, newlines, control or
/// non-ASCII bytes.
pub fn name_ok(name: &[u8]) -> bool {
    !name.iter().any(|&c| c <= b' ' || c > b'~')
}

/// Names the connection (an empty name clears it); the caller checked it
/// with [`name_ok`].
pub fn rename(session: &mut Session, name: &[u8]) {
    session.name = (!name.is_empty()).then(|| name.to_vec());
}

/// What HELLO asks for: the protocol (2 or 3), AUTH and SETNAME.
pub struct Hello<'a> {
    /// The protocol version given, if any.
    pub proto: Option<u8>,
    /// `AUTH user password`.
    pub auth: Option<(&'a [u8], &'a [u8])>,
    /// `SETNAME name`.
    pub name: Option<&'a [u8]>,
}

/// Parses `HELLO [protover [AUTH user password] [SETNAME name]]`; an
/// error reply if the protocol is not 2 or 3 or the options do not parse.
pub fn parse_hello<'a>(rest: &[&'a [u8]]) -> Result<Hello<'a>, String> {
    let mut h = Hello {
        proto: None,
        auth: None,
        name: None,
    };
    let Some((ver, mut opts)) = rest.split_first() else {
        return Ok(h);
    };
    match std::str::from_utf8(ver)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
    {
        Some(v @ (2 | 3)) => h.proto = Some(v as u8),
        Some(_) => return Err("NOPROTO unsupported protocol version".into()),
        None => return Err("ERR Protocol version is not an integer or out of range".into()),
    }
    loop {
        match opts {
            [] => return Ok(h),
            [opt, user, pass, more @ ..] if opt.eq_ignore_ascii_case(b"auth") => {
                h.auth = Some((user, pass));
                opts = more;
            }
            [opt, name, more @ ..] if opt.eq_ignore_ascii_case(b"setname") => {
                h.name = Some(name);
                opts = more;
            }
            [opt, ..] => return Err(format!("ERR Syntax error in HELLO option '{}'", text(opt))),
        }
    }
}

/// HELLO's reply: the server's facts, a map in RESP3, a flat array of
/// pairs in RESP2.
pub fn hello_reply(session: &Session, out: &mut Vec<u8>) {
    match session.resp3 {
        true => out.extend_from_slice(b"%7\r\n"),
        false => resp::array(out, 14),
    }
    for (k, v) in [("server", "redis"), ("version", REDIS_VERSION)] {
        resp::bulk(out, k.as_bytes());
        resp::bulk(out, v.as_bytes());
    }
    resp::bulk(out, b"proto");
    resp::int(out, if session.resp3 { 3 } else { 2 });
    resp::bulk(out, b"id");
    resp::int(out, i64::try_from(session.id).unwrap_or(i64::MAX));
    for (k, v) in [("mode", "standalone"), ("role", "master")] {
        resp::bulk(out, k.as_bytes());
        resp::bulk(out, v.as_bytes());
    }
    resp::bulk(out, b"modules");
    resp::array(out, 0);
}

/// `INFO [section …]`: server, clients, persistence, replication,
/// keyspace and tagstore sections (all of them for no section, `all`,
/// `default` or `everything`).
pub fn info(store: &Store, facts: &Facts, rest: &[&[u8]], resp3: bool, out: &mut Vec<u8>) {
    let asked: Vec<Vec<u8>> = rest.iter().map(|s| s.to_ascii_lowercase()).collect();
    let all = asked.is_empty()
        || asked
            .iter()
            .any(|s| matches!(s.as_slice(), b"all" | b"default" | b"everything"));
    let want = |s: &str| all || asked.iter().any(|a| a == s.as_bytes());
    let mut t = String::new();
    let mut section = |name: &str, lines: &[(&str, String)]| {
        if !want(&name.to_ascii_lowercase()) {
            return;
        }
        if !t.is_empty() {
            t.push_str("\r\n");
        }
        t.push_str(&format!("# {name}\r\n"));
        for (k, v) in lines {
            t.push_str(&format!("{k}:{v}\r\n"));
        }
    };
    section(
        "Server",
        &[
            ("redis_version", REDIS_VERSION.into()),
            ("tagstore_version", env!("CARGO_PKG_VERSION").into()),
            ("redis_mode", "standalone".into()),
            ("os", std::env::consts::OS.into()),
            ("arch_bits", (usize::BITS).to_string()),
            ("process_id", std::process::id().to_string()),
            ("run_id", facts.run_id.clone()),
            ("tcp_port", facts.port.to_string()),
            (
                "uptime_in_seconds",
                facts.started.elapsed().as_secs().to_string(),
            ),
        ],
    );
    section(
        "Clients",
        &[
            ("connected_clients", facts.clients.get().to_string()),
            ("maxclients", facts.max_clients.to_string()),
        ],
    );
    section(
        "Persistence",
        &[
            ("loading", "0".into()),
            ("tagstore_durability", facts.durability.into()),
        ],
    );
    section(
        "Replication",
        &[("role", "master".into()), ("connected_slaves", "0".into())],
    );
    section("Keyspace", &[]);
    // A half-only store counts halves.
    let count = match store.is_half_only() {
        true => "halves",
        false => "tags",
    };
    section(
        "Tagstore",
        &[
            (count, store.len().to_string()),
            ("half_only", u8::from(store.is_half_only()).to_string()),
            ("max_request_bytes", facts.max_request_bytes.to_string()),
        ],
    );
    match resp3 {
        true => resp::verbatim(out, t.as_bytes()),
        false => resp::bulk(out, t.as_bytes()),
    }
}
