//! A small RESP2 client for the cluster tools: connect with a timeout, send
//! commands (pipelined), read replies. Everything a node sends is checked;
//! nothing it sends can panic us.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Longest bulk string or array we accept from a node.
const MAX_LEN: i64 = 512 << 20;
/// How deep arrays may nest in a reply.
const MAX_DEPTH: usize = 8;

/// One RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

/// A connection to one node.
pub struct Client {
    addr: String,
    r: BufReader<TcpStream>,
    w: BufWriter<TcpStream>,
}

impl Client {
    /// Connects to `host:port`, waiting at most `timeout` for the connection
    /// and for each reply.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Client, String> {
        let err = |e: std::io::Error| format!("{addr}: {e}");
        let mut last = format!("{addr}: no address");
        for sa in addr.to_socket_addrs().map_err(err)? {
            match TcpStream::connect_timeout(&sa, timeout) {
                Ok(s) => {
                    s.set_read_timeout(Some(timeout)).map_err(err)?;
                    s.set_write_timeout(Some(timeout)).map_err(err)?;
                    let _ = s.set_nodelay(true);
                    let w = BufWriter::new(s.try_clone().map_err(err)?);
                    return Ok(Client {
                        addr: addr.to_owned(),
                        r: BufReader::new(s),
                        w,
                    });
                }
                Err(e) => last = err(e),
            }
        }
        Err(last)
    }

    /// How errors name the node: `node LABEL (host:port)`, or its address.
    pub fn label(&self) -> &str {
        &self.addr
    }

    /// Names the node in errors as `node LABEL (host:port)`.
    pub fn name(&mut self, label: &str) {
        self.addr = format!("node {label} ({})", self.addr);
    }
    /// Queues one command; `flush` or `reply` sends it.
    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<(), String> {
        let mut buf = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            let a = a.as_ref();
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&buf).map_err(|e| self.io(e))
    }

    fn io(&self, e: std::io::Error) -> String {
        format!("{}: {e}", self.addr)
    }

    /// Reads the next reply (flushing what was queued first).
    pub fn reply(&mut self) -> Result<Reply, String> {
        self.w.flush().map_err(|e| self.io(e))?;
        self.read(0)
    }

    /// Sends one command and reads its reply; an error reply is an error.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Reply, String> {
        self.send(args)?;
        match self.reply()? {
            Reply::Error(e) => Err(format!("{}: -{e}", self.addr)),
            r => Ok(r),
        }
    }

    /// Sends every command, then reads their replies in order, `depth`
    /// commands in flight at most; an error reply is an error.
    pub fn pipeline(&mut self, cmds: &[Vec<Vec<u8>>]) -> Result<Vec<Reply>, String> {
        const DEPTH: usize = 512;
        let mut out = Vec::with_capacity(cmds.len());
        for chunk in cmds.chunks(DEPTH) {
            for c in chunk {
                self.send(c)?;
            }
            for _ in chunk {
                match self.reply()? {
                    Reply::Error(e) => return Err(format!("{}: -{e}", self.addr)),
                    r => out.push(r),
                }
            }
        }
        Ok(out)
    }

    fn line(&mut self) -> Result<Vec<u8>, String> {
        let mut l = Vec::new();
        (&mut self.r)
            .take(64 << 10)
            .read_until(b'\n', &mut l)
            .map_err(|e| self.io(e))?;
        if !l.ends_with(b"\r\n") {
            return Err(format!(
                "{}: connection closed or bad reply line",
                self.addr
            ));
        }
        l.truncate(l.len() - 2);
        Ok(l)
    }

    fn read(&mut self, depth: usize) -> Result<Reply, String> {
        let l = self.line()?;
        let bad = || format!("{}: bad reply {:?}", self.addr, String::from_utf8_lossy(&l));
        let Some((&t, rest)) = l.split_first() else {
            return Err(bad());
        };
        let text = || String::from_utf8_lossy(rest).into_owned();
        let num = || {
            std::str::from_utf8(rest)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(bad)
        };
        Ok(match t {
            b'+' => Reply::Simple(text()),
            b'-' => Reply::Error(text()),
            b':' => Reply::Int(num()?),
            b'$' => {
                let n = num()?;
                if n < 0 {
                    return Ok(Reply::Bulk(None));
                }
                if n > MAX_LEN {
                    return Err(bad());
                }
                let mut b = vec![0; n as usize + 2];
                self.r.read_exact(&mut b).map_err(|e| self.io(e))?;
                if !b.ends_with(b"\r\n") {
                    return Err(bad());
                }
                b.truncate(n as usize);
                Reply::Bulk(Some(b))
            }
            b'*' => {
                let n = num()?;
                if n < 0 {
                    return Ok(Reply::Array(Vec::new()));
                }
                if n > MAX_LEN || depth >= MAX_DEPTH {
                    return Err(bad());
                }
                let mut v = Vec::with_capacity((n as usize).min(1 << 16));
                for _ in 0..n {
                    v.push(self.read(depth + 1)?);
                }
                Reply::Array(v)
            }
            _ => return Err(bad()),
        })
    }

    /// Every key the node holds matching `pattern`, by serve's `SCAN`
    /// extension (O(tags) on the node per page, so pages are large).
    pub fn scan_all(&mut self, pattern: &str) -> Result<Vec<String>, String> {
        let mut keys = Vec::new();
        let mut cursor = "0".to_owned();
        loop {
            let r = self.call(&["SCAN", cursor.as_str(), "MATCH", pattern, "COUNT", "100000"])?;
            let bad = || format!("{}: SCAN: unexpected reply", self.addr);
            let Reply::Array(mut page) = r else {
                return Err(bad());
            };
            let (Some(Reply::Array(items)), Some(Reply::Bulk(Some(next))), None) =
                (page.pop(), page.pop(), page.pop())
            else {
                return Err(bad());
            };
            for i in items {
                keys.push(utf8(i).ok_or_else(bad)?);
            }
            cursor = String::from_utf8(next).map_err(|_| bad())?;
            if cursor == "0" {
                return Ok(keys);
            }
        }
    }

    /// What the node's INFO says that the tools need (one INFO).
    pub fn facts(&mut self) -> Result<NodeFacts, String> {
        let info = utf8(self.call(&["INFO"])?)
            .ok_or_else(|| format!("{}: INFO: unexpected reply", self.addr))?;
        let field = |name: &str| {
            info.lines().find_map(|l| {
                l.trim_end()
                    .strip_prefix(name)
                    .and_then(|v| v.strip_prefix(':'))
            })
        };
        Ok(NodeFacts {
            whole_tags: field("half_only") == Some("0"),
            max_request_bytes: field("max_request_bytes").and_then(|v| v.parse().ok()),
            run_id: field("run_id").map(str::to_owned),
        })
    }

    /// Closes the node's TAGSTORE.CHANGES window and opens the next;
    /// `None` from a server without the command (an error reply).
    pub fn changes(&mut self) -> Result<Option<Window>, String> {
        self.send(&["TAGSTORE.CHANGES"])?;
        match self.reply()? {
            Reply::Error(_) => Ok(None),
            r => window(r)
                .map(Some)
                .ok_or_else(|| format!("{}: TAGSTORE.CHANGES: unexpected reply", self.addr)),
        }
    }

    /// The members of each key (pipelined SMEMBERS).
    pub fn members(&mut self, keys: &[String]) -> Result<Vec<Vec<String>>, String> {
        let cmds: Vec<Vec<Vec<u8>>> = keys
            .iter()
            .map(|k| vec![b"SMEMBERS".to_vec(), k.as_bytes().to_vec()])
            .collect();
        let addr = self.addr.clone();
        self.pipeline(&cmds)?
            .into_iter()
            .map(|r| match r {
                Reply::Array(items) => items
                    .into_iter()
                    .map(|i| utf8(i).ok_or_else(|| format!("{addr}: SMEMBERS: bad member")))
                    .collect(),
                _ => Err(format!("{addr}: SMEMBERS: unexpected reply")),
            })
            .collect()
    }
}

/// A node's answer to TAGSTORE.CHANGES: the window it closed.
#[derive(Debug, PartialEq, Eq)]
pub struct Window {
    /// The serve instance (new at each start).
    pub instance: String,
    /// The window's number.
    pub number: u64,
    /// The keys changed in it, or `None`: not known (the node's first
    /// window, or more changed than it keeps).
    pub keys: Option<Vec<String>>,
}

/// [`Window`] of a TAGSTORE.CHANGES reply; `None` if malformed.
fn window(r: Reply) -> Option<Window> {
    let Reply::Array(items) = r else {
        return None;
    };
    let mut items = items.into_iter();
    let instance = utf8(items.next()?)?;
    let (Some(Reply::Int(number)), Some(Reply::Int(count))) = (items.next(), items.next()) else {
        return None;
    };
    let keys = match count {
        -1 => None,
        n => {
            let keys: Vec<String> = items.map(utf8).collect::<Option<_>>()?;
            (keys.len() as i64 == n).then_some(keys)?.into()
        }
    };
    Some(Window {
        instance,
        number: u64::try_from(number).ok()?,
        keys,
    })
}

/// What a node's INFO tells the cluster tools.
pub struct NodeFacts {
    /// The node stores whole tags (a `tagstore serve` node without
    /// `--half-only`, whose INFO says `half_only:0`): there a member added
    /// or removed under one key is added or removed under the tag's other
    /// key too. A half-only node, or any other server, keeps each set apart.
    pub whole_tags: bool,
    /// The largest request it takes, in bytes, if it says
    /// (`max_request_bytes`, a `tagstore serve` node's `--max-request-bytes`).
    pub max_request_bytes: Option<usize>,
    /// The server instance, if it says (`run_id`; a `tagstore serve`
    /// node's is new at each start).
    pub run_id: Option<String>,
}

/// A bulk string reply as UTF-8 text.
pub fn utf8(r: Reply) -> Option<String> {
    match r {
        Reply::Bulk(Some(b)) => String::from_utf8(b).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(Some(s.as_bytes().to_vec()))
    }

    /// A TAGSTORE.CHANGES reply is read only when whole and consistent: a
    /// window taken for more or fewer keys than it names would make a copy
    /// skip keys that changed.
    #[test]
    fn a_changes_reply_is_read_only_when_consistent() {
        let reply = |items: Vec<Reply>| window(Reply::Array(items));
        let w = reply(vec![
            bulk("ab"),
            Reply::Int(3),
            Reply::Int(2),
            bulk("k1"),
            bulk("k2"),
        ]);
        let keys = Some(vec!["k1".to_owned(), "k2".to_owned()]);
        let want = Window {
            instance: "ab".into(),
            number: 3,
            keys,
        };
        assert_eq!(w, Some(want));
        let unknown = reply(vec![bulk("ab"), Reply::Int(0), Reply::Int(-1)]);
        assert_eq!(unknown.and_then(|w| w.keys), None);
        for bad in [
            vec![bulk("ab"), Reply::Int(3), Reply::Int(2), bulk("k1")],
            vec![bulk("ab"), Reply::Int(3), Reply::Int(0), bulk("k1")],
            vec![bulk("ab"), Reply::Int(-2), Reply::Int(0)],
            vec![bulk("ab"), Reply::Int(3), Reply::Int(1), Reply::Int(7)],
            vec![Reply::Int(1), Reply::Int(3), Reply::Int(0)],
            vec![bulk("ab"), Reply::Int(3)],
        ] {
            assert_eq!(reply(bad.clone()), None, "{bad:?}");
        }
        assert_eq!(window(Reply::Error("ERR".into())), None);
    }
}
