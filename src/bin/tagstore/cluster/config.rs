//! nutcracker's YAML configuration, the subset its configs use: pools at
//! the top level, each a mapping of directives, `servers:` a list of
//! `host:port:weight [name]` strings (twemproxy `src/nc_conf.c`).
//!
//! Hand-written rather than a YAML crate: nutcracker's files are a two-level
//! block mapping with one block sequence, and errors name the line. Flow
//! collections (`[a, b]`, `{a: b}`), anchors and multi-line scalars are
//! refused with an error instead of being misread.

use super::hash::Hash;

/// How a pool spreads keys over its servers (`distribution:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    Ketama,
    Modula,
}

/// One `servers:` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    /// Host as written (before the port).
    pub host: String,
    /// Port as written (its digits are part of the ketama name).
    pub port: String,
    pub weight: u32,
    /// The optional name after the address.
    pub name: Option<String>,
    /// Line of the configuration file.
    pub line: usize,
}

impl Server {
    /// The string nutcracker hashes for this server's ring points: the name
    /// when given; otherwise `host:port`, or just `host` when the port is
    /// 11211 (libmemcached compatibility).
    pub fn ketama_name(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None if self.port.parse::<u32>() == Ok(11211) => self.host.clone(),
            None => format!("{}:{}", self.host, self.port),
        }
    }

    /// How `tagstore ring` prints the server: its name, else `host:port`.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => format!("{}:{}", self.host, self.port),
        }
    }
}

/// One pool: what placement needs, checked as nutcracker checks it.
#[derive(Clone, Debug)]
pub struct Pool {
    pub name: String,
    /// Where the proxy listens (for the cluster tools that talk through it).
    #[allow(dead_code)]
    pub listen: String,
    pub hash: Hash,
    /// No `hash:` line: nutcracker's default (fnv1a_64) applies.
    pub hash_defaulted: bool,
    pub distribution: Distribution,
    /// In nutcracker's order: sorted by ketama name (shorter first, then bytes).
    pub servers: Vec<Server>,
}

/// A parsed configuration file: its pools in file order.
#[derive(Clone, Debug)]
pub struct Config {
    pub pools: Vec<Pool>,
}

impl Config {
    /// The pool called `name`, or the only pool when `name` is `None`.
    pub fn pool(&self, name: Option<&str>) -> Result<&Pool, String> {
        let names = || {
            self.pools
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match name {
            Some(n) => self
                .pools
                .iter()
                .find(|p| p.name == n)
                .ok_or_else(|| format!("no pool {n:?} (pools: {})", names())),
            None if self.pools.len() == 1 => Ok(&self.pools[0]),
            None => Err(format!(
                "the configuration has {} pools ({}): choose one with --pool",
                self.pools.len(),
                names()
            )),
        }
    }
}

/// The directives nutcracker 0.5.0 knows (`conf_commands` in nc_conf.c).
const DIRECTIVES: &[&str] = &[
    "listen",
    "hash",
    "hash_tag",
    "distribution",
    "timeout",
    "backlog",
    "client_connections",
    "redis",
    "tcpkeepalive",
    "redis_auth",
    "redis_db",
    "preconnect",
    "auto_eject_hosts",
    "server_connections",
    "server_retry_timeout",
    "server_failure_limit",
    "servers",
];

const BOOLEANS: &[&str] = &["redis", "tcpkeepalive", "preconnect", "auto_eject_hosts"];

/// A pool being read: directives as (name, value, line), servers as (text, line).
struct RawPool {
    name: String,
    line: usize,
    key_indent: Option<usize>,
    directives: Vec<(String, String, usize)>,
    servers: Option<Vec<(String, usize)>>,
}

/// Parses a configuration file's text. Errors read `line N: …`.
pub fn parse(text: &str) -> Result<Config, String> {
    let mut raw: Vec<RawPool> = Vec::new();
    // Indentation of the `servers:` key while its list is being read.
    let mut in_servers: Option<usize> = None;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (i, l) in text.lines().enumerate() {
        let n = i + 1;
        let err = |m: String| format!("line {n}: {m}");
        let l = strip_comment(l).trim_end();
        let body = l.trim_start_matches(' ');
        let indent = l.len() - body.len();
        if body.is_empty() || (indent == 0 && (body == "---" || body == "...")) {
            continue;
        }
        if body.starts_with('\t') {
            return Err(err("a tab in indentation (YAML allows only spaces)".into()));
        }
        if indent == 0 {
            in_servers = None;
            let (k, v) = split_key(body).ok_or_else(|| {
                err(format!(
                    "expected a pool name followed by ':', found {body:?}"
                ))
            })?;
            if !v.is_empty() {
                return Err(err(format!(
                    "pool {k:?} must be a mapping of directives on the lines below, not {v:?}"
                )));
            }
            if raw.iter().any(|p| p.name == k) {
                return Err(err(format!("pool {k:?} is defined twice")));
            }
            raw.push(RawPool {
                name: k,
                line: n,
                key_indent: None,
                directives: Vec::new(),
                servers: None,
            });
            continue;
        }
        let pool = raw
            .last_mut()
            .ok_or_else(|| err("indented line before any pool name".into()))?;
        if let Some(item) = body
            .strip_prefix('-')
            .filter(|r| r.is_empty() || r.starts_with(' '))
        {
            if in_servers.is_none_or(|k| indent < k) {
                return Err(err("a list item outside the servers: list".into()));
            }
            let v = scalar(item.trim()).map_err(err)?;
            if v.is_empty() {
                return Err(err("an empty servers: entry".into()));
            }
            pool.servers.get_or_insert_with(Vec::new).push((v, n));
            continue;
        }
        let ki = *pool.key_indent.get_or_insert(indent);
        if indent != ki {
            return Err(err(format!(
                "indented by {indent} spaces where this pool's directives use {ki}"
            )));
        }
        in_servers = None;
        let (k, v) = split_key(body)
            .ok_or_else(|| err(format!("expected 'directive: value', found {body:?}")))?;
        if !DIRECTIVES.contains(&k.as_str()) {
            return Err(err(format!(
                "unknown directive {k:?} in pool {:?}",
                pool.name
            )));
        }
        if pool.directives.iter().any(|d| d.0 == k) || (k == "servers" && pool.servers.is_some()) {
            return Err(err(format!("directive {k:?} is a duplicate")));
        }
        if k == "servers" {
            if !v.is_empty() {
                return Err(err(
                    "servers: must be followed by a list of '- host:port:weight [name]' lines"
                        .into(),
                ));
            }
            in_servers = Some(indent);
            pool.servers = Some(Vec::new());
            continue;
        }
        let v = scalar(&v).map_err(err)?;
        pool.directives.push((k, v, n));
    }
    if raw.is_empty() {
        return Err("the configuration defines no pool".into());
    }
    let pools = raw
        .into_iter()
        .map(check_pool)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Config { pools })
}

/// Checks a pool as nutcracker does, and refuses what placement cannot follow.
fn check_pool(p: RawPool) -> Result<Pool, String> {
    let get = |k: &str| p.directives.iter().find(|d| d.0 == k);
    for (k, v, n) in &p.directives {
        if BOOLEANS.contains(&k.as_str()) && v != "true" && v != "false" {
            return Err(format!("line {n}: {k}: {v:?} is not \"true\" or \"false\""));
        }
    }
    if let Some((_, v, n)) = get("hash_tag") {
        return Err(format!(
            "line {n}: hash_tag: {v:?}: tagstore clusters do not use hash tags: a tag's \
             object and subject keys must be placed by the whole key (a hash tag would \
             pile every key sharing the tagged part onto one node); remove the line"
        ));
    }
    if let Some((_, v, n)) = get("auto_eject_hosts") {
        if v == "true" {
            return Err(format!(
                "line {n}: auto_eject_hosts: true: an ejected node's keys would be written \
                 to another node while it is away, and be lost to reads when it comes back; \
                 set auto_eject_hosts: false"
            ));
        }
    }
    let listen = match get("listen") {
        Some((_, v, _)) => v.clone(),
        None => return Err(format!("line {}: pool {:?} has no listen:", p.line, p.name)),
    };
    let (hash, hash_defaulted) = match get("hash") {
        Some((_, v, n)) => (
            Hash::from_name(v).map_err(|e| format!("line {n}: {e}"))?,
            false,
        ),
        None => (Hash::Fnv1a64, true),
    };
    let distribution = match get("distribution").map(|d| (d.1.as_str(), d.2)) {
        None | Some(("ketama", _)) => Distribution::Ketama,
        Some(("modula", _)) => Distribution::Modula,
        Some(("random", n)) => {
            return Err(format!(
                "line {n}: distribution: random places each request at random; no key has \
                 a node to predict (use ketama)"
            ))
        }
        Some((v, n)) => {
            return Err(format!(
                "line {n}: distribution: {v:?} is not ketama, modula or random"
            ))
        }
    };
    let raw_servers = p.servers.unwrap_or_default();
    if raw_servers.is_empty() {
        return Err(format!("line {}: pool {:?} has no servers", p.line, p.name));
    }
    let mut servers = raw_servers
        .iter()
        .map(|(s, n)| {
            parse_server(s)
                .map_err(|e| format!("line {n}: server {s:?}: {e}"))
                .map(|mut s| {
                    s.line = *n;
                    s
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // nutcracker sorts the servers by name (conf_validate_server): the
    // ring's ties and modula's slots follow this order, not the file's.
    servers.sort_by(|a, b| {
        let (x, y) = (a.ketama_name(), b.ketama_name());
        x.len()
            .cmp(&y.len())
            .then_with(|| x.as_bytes().cmp(y.as_bytes()))
    });
    for w in servers.windows(2) {
        if w[0].ketama_name() == w[1].ketama_name() {
            return Err(format!(
                "line {}: pool {:?} has two servers named {:?} (lines {} and {})",
                w[1].line.max(w[0].line),
                p.name,
                w[0].ketama_name(),
                w[0].line.min(w[1].line),
                w[0].line.max(w[1].line)
            ));
        }
    }
    if servers.iter().map(|s| u64::from(s.weight)).sum::<u64>() > u64::from(u32::MAX) {
        return Err(format!(
            "line {}: pool {:?}: the weights add up past 2^32",
            p.line, p.name
        ));
    }
    Ok(Pool {
        name: p.name,
        listen,
        hash,
        hash_defaulted,
        distribution,
        servers,
    })
}

/// Parses `host:port:weight [name]` from the end, as `conf_add_server` does:
/// the name follows the last space, the weight the last ':' before it, the
/// port the ':' before that; the host is everything earlier.
pub fn parse_server(s: &str) -> Result<Server, String> {
    if s.starts_with('/') {
        return Err("unix-socket servers are not supported (tagstore nodes listen on TCP)".into());
    }
    let (addr, name) = match s.rsplit_once(' ') {
        Some((a, n)) => (a, Some(n)),
        None => (s, None),
    };
    let format = "expected \"host:port:weight [name]\"";
    let (rest, weight) = addr.rsplit_once(':').ok_or(format)?;
    let (host, port) = rest.rsplit_once(':').ok_or(format)?;
    let weight = digits(weight)
        .filter(|&w| w <= i32::MAX as u64)
        .ok_or_else(|| format!("invalid weight {weight:?}"))?;
    if weight == 0 {
        return Err("a zero weight".into());
    }
    digits(port)
        .filter(|p| (1..=65535).contains(p))
        .ok_or_else(|| format!("invalid port {port:?}"))?;
    if let Some(n) = name {
        if n.is_empty() {
            return Err("an empty name after the space".into());
        }
    }
    Ok(Server {
        host: host.to_string(),
        port: port.to_string(),
        weight: weight as u32,
        name: name.map(str::to_string),
        line: 0,
    })
}

/// A run of ASCII digits as a number (nutcracker's `nc_atoi`: no sign, no space).
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `key: value` or `key:` (value empty); `None` when there is no `: `.
fn split_key(body: &str) -> Option<(String, String)> {
    let (k, v) = if let Some(k) = body.strip_suffix(':') {
        (k, "")
    } else {
        let i = body.find(": ")?;
        (&body[..i], &body[i + 2..])
    };
    let k = k.trim();
    if k.is_empty() || k.contains(": ") {
        return None;
    }
    let k = scalar(k).ok()?;
    Some((k, v.trim().to_string()))
}

/// A plain, 'single' or "double" quoted scalar; flow collections and other
/// YAML this parser does not read are refused.
fn scalar(v: &str) -> Result<String, String> {
    let v = v.trim();
    if let Some(inner) = v.strip_prefix('\'') {
        let inner = inner
            .strip_suffix('\'')
            .ok_or_else(|| format!("unterminated quote in {v:?}"))?;
        return Ok(inner.replace("''", "'"));
    }
    if let Some(inner) = v.strip_prefix('"') {
        let inner = inner
            .strip_suffix('"')
            .ok_or_else(|| format!("unterminated quote in {v:?}"))?;
        let mut out = String::new();
        let mut it = inner.chars();
        while let Some(c) = it.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match it.next() {
                Some('\\') => out.push('\\'),
                Some('"') => out.push('"'),
                Some('t') => out.push('\t'),
                Some('n') => out.push('\n'),
                other => {
                    return Err(format!(
                        "unsupported escape \\{} in {v:?}",
                        other.unwrap_or(' ')
                    ))
                }
            }
        }
        return Ok(out);
    }
    if let Some(c) = v.chars().next().filter(|c| "[{&*!|>%@`".contains(*c)) {
        return Err(format!(
            "{v:?}: YAML starting with {c:?} (flow collections, anchors, tags, block \
             scalars) is not supported here; write plain values and '- ' list items"
        ));
    }
    Ok(v.to_string())
}

/// The line without a comment: `#` at its start or after a space, outside quotes.
fn strip_comment(l: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for (i, c) in l.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '#' && (prev == ' ' || prev == '\t') => return &l[..i],
            None if (c == '\'' || c == '"') && (prev == ' ' || prev == '-') => quote = Some(c),
            None => {}
        }
        prev = c;
    }
    l
}

/// The one pool of a config whose pool has `hash` and these `servers`
/// lines (`host:port:weight [name]`): for the tests of the ring and of
/// key moves.
#[cfg(test)]
pub fn test_pool(hash: &str, servers: &[&str]) -> Pool {
    let mut t = format!("p:\n  listen: 127.0.0.1:1\n  hash: {hash}\n  servers:\n");
    for s in servers {
        t.push_str(&format!("  - {s}\n"));
    }
    parse(&t).unwrap().pools.remove(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
# a cluster of tagstore nodes
tags:
  listen: 127.0.0.1:22121
  hash: md5            # not fnv1a_64
  distribution: ketama
  auto_eject_hosts: false
  redis: true
  servers:
   - 127.0.0.1:6390:2 alpha
   - 127.0.0.1:6391:1 beta
   - \"127.0.0.1:6392:1\"
  - 127.0.0.1:11211:1
other:
  listen: 127.0.0.1:22122
  hash: murmur
  distribution: modula
  servers:
    - 10.0.0.1:7000:1
";

    #[test]
    fn parses_pools_servers_and_names() {
        let c = parse(SAMPLE).unwrap();
        assert_eq!(c.pools.len(), 2);
        let p = c.pool(Some("tags")).unwrap();
        assert_eq!(p.listen, "127.0.0.1:22121");
        assert_eq!(p.hash, Hash::Md5);
        assert!(!p.hash_defaulted);
        assert_eq!(p.distribution, Distribution::Ketama);
        // Sorted as nutcracker sorts them: shorter names first.
        let names: Vec<String> = p.servers.iter().map(Server::ketama_name).collect();
        assert_eq!(names, ["beta", "alpha", "127.0.0.1", "127.0.0.1:6392"]);
        let labels: Vec<String> = p.servers.iter().map(Server::label).collect();
        assert_eq!(
            labels,
            ["beta", "alpha", "127.0.0.1:11211", "127.0.0.1:6392"]
        );
        assert_eq!(p.servers[1].weight, 2);
        assert_eq!(p.servers[1].line, 9);
        assert_eq!(
            c.pool(Some("other")).unwrap().distribution,
            Distribution::Modula
        );
        assert!(c.pool(None).unwrap_err().contains("--pool"));
        assert!(c.pool(Some("nope")).unwrap_err().contains("tags, other"));
    }

    #[test]
    fn byte_order_mark_and_crlf() {
        let c =
            parse("\u{feff}p:\r\n  listen: 127.0.0.1:1\r\n  servers:\r\n  - a:1:1 n\r\n").unwrap();
        assert_eq!(c.pools[0].name, "p");
        assert_eq!(c.pools[0].servers[0].ketama_name(), "n");
    }

    #[test]
    fn defaults_follow_nutcracker() {
        let c = parse("p:\n  listen: 127.0.0.1:1\n  servers:\n  - a:1:1\n").unwrap();
        let p = c.pool(None).unwrap();
        assert_eq!(p.hash, Hash::Fnv1a64);
        assert!(p.hash_defaulted);
        assert_eq!(p.distribution, Distribution::Ketama);
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err()
    }

    #[test]
    fn refusals_name_the_line_and_the_reason() {
        let base = "p:\n  listen: 127.0.0.1:1\n  servers:\n  - a:1:1\n";
        let e = err(&format!("{base}  hash_tag: \"{{}}\"\n"));
        assert!(
            e.starts_with("line 5: hash_tag") && e.contains("remove"),
            "{e}"
        );
        let e = err(&format!("{base}  auto_eject_hosts: true\n"));
        assert!(
            e.starts_with("line 5: auto_eject_hosts") && e.contains("false"),
            "{e}"
        );
        assert!(parse(&format!("{base}  auto_eject_hosts: false\n")).is_ok());
        let e = err(&format!("{base}  hash: hsieh\n"));
        assert!(e.starts_with("line 5:") && e.contains("hsieh"), "{e}");
        let e = err(&format!("{base}  distribution: random\n"));
        assert!(e.starts_with("line 5:") && e.contains("random"), "{e}");
        let e = err(&format!("{base}  hashh: md5\n"));
        assert!(e.contains("unknown directive \"hashh\""), "{e}");
        let e = err(&format!("{base}  redis: yes\n"));
        assert!(e.contains("\"true\" or \"false\""), "{e}");
        let e = err(&format!("{base}  listen: 127.0.0.1:2\n"));
        assert!(e.starts_with("line 5:") && e.contains("duplicate"), "{e}");
        let e = err("p:\n  listen: x:1\n  servers:\n  - a:1:1 n\n  - b:2:1 n\n");
        assert!(
            e.contains("two servers named \"n\"") && e.contains("lines 4 and 5"),
            "{e}"
        );
        let e = err("p:\n  servers:\n  - a:1:1\n");
        assert!(e.contains("no listen"), "{e}");
        let e = err("p:\n  listen: x:1\n  servers: [a:1:1]\n");
        assert!(e.starts_with("line 3:"), "{e}");
        let e = err("p:\n  listen: x:1\n\tservers:\n");
        assert!(e.starts_with("line 3:") && e.contains("tab"), "{e}");
        let e = err("p:\n  listen: x:1\n   hash: md5\n");
        assert!(e.starts_with("line 3:") && e.contains("indented"), "{e}");
        assert!(err("").contains("no pool"));
        assert!(err("  - a:1:1\n").starts_with("line 1:"));
    }

    #[test]
    fn server_strings_parse_from_the_end() {
        let s = parse_server("127.0.0.1:6379:10 node-a").unwrap();
        assert_eq!(
            (s.host.as_str(), s.port.as_str(), s.weight),
            ("127.0.0.1", "6379", 10)
        );
        assert_eq!(s.ketama_name(), "node-a");
        // The port's text, as written, is part of an unnamed server's ring name.
        assert_eq!(parse_server("h:06379:1").unwrap().ketama_name(), "h:06379");
        assert_eq!(parse_server("h:011211:1").unwrap().ketama_name(), "h");
        for bad in [
            "h:6379",
            "h:6379:0",
            "h:0:1",
            "h:65536:1",
            "h:1:x",
            "h:1:1 ",
            "h:1: 1",
            "/tmp/s:1",
        ] {
            assert!(parse_server(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn comments_and_quotes() {
        assert_eq!(strip_comment("a: b # c"), "a: b ");
        assert_eq!(strip_comment("a: 'b # c'"), "a: 'b # c'");
        assert_eq!(strip_comment("a: b#c"), "a: b#c");
        assert_eq!(scalar("'it''s'").unwrap(), "it's");
        assert_eq!(scalar("\"a\\tb\"").unwrap(), "a\tb");
    }
}
