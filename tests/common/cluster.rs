//! Shared test helpers for the tests that run servers on loopback ports
//! (`tagstore serve` nodes, nutcracker, redis-server): free ports, the
//! kill-on-drop guard, the skip-unless-CI check, a small RESP2 client,
//! waiting for a server to answer PING, launchers, and a xorshift64*
//! generator.

use std::collections::BTreeSet;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// Child processes, killed when the test ends however it ends.
#[derive(Default)]
pub struct Kids(pub Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// True when every command of `tools` runs (`--version`); false (after a
/// skip message naming `test`) when one is missing, and a panic then if
/// `CI` is set.
pub fn have_tools(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|c| {
            Command::new(c)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_err()
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "{test}: {} not installed (apt-get install {})",
        missing.join(" and "),
        tools.join(" ")
    );
    if std::env::var_os("CI").is_some() {
        let them = if tools.len() == 1 { "it" } else { "them" };
        panic!("{msg}; CI must install {them} (.ci/run does)");
    }
    // Straight to stderr, past the test harness's capture, so a skip shows.
    let _ = writeln!(io::stderr(), "SKIPPED {msg}");
    false
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// A RESP2 reply.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

/// A connection speaking raw RESP2.
pub struct Conn {
    r: BufReader<TcpStream>,
    w: BufWriter<TcpStream>,
}

impl Conn {
    /// Connects to `127.0.0.1:port`, with a 30 s read timeout.
    pub fn open(port: u16) -> io::Result<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let w = BufWriter::new(s.try_clone()?);
        Ok(Conn {
            r: BufReader::new(s),
            w,
        })
    }

    /// Queues one command (flushed by `reply`).
    pub fn send(&mut self, args: &[&[u8]]) {
        write!(self.w, "*{}\r\n", args.len()).unwrap();
        for a in args {
            write!(self.w, "${}\r\n", a.len()).unwrap();
            self.w.write_all(a).unwrap();
            self.w.write_all(b"\r\n").unwrap();
        }
    }

    fn line(&mut self) -> io::Result<String> {
        let mut l = String::new();
        self.r.read_line(&mut l)?;
        if !l.ends_with("\r\n") {
            return Err(io::Error::other(format!("bad RESP line {l:?}")));
        }
        l.truncate(l.len() - 2);
        Ok(l)
    }

    /// Flushes what is queued and reads one reply.
    pub fn reply(&mut self) -> io::Result<Reply> {
        self.w.flush()?;
        let l = self.line()?;
        let (t, rest) = l.split_at(1);
        let num = || {
            rest.parse::<i64>()
                .map_err(|_| io::Error::other(format!("bad number in {l:?}")))
        };
        Ok(match t {
            "+" => Reply::Simple(rest.to_string()),
            "-" => Reply::Error(rest.to_string()),
            ":" => Reply::Int(num()?),
            "$" if num()? < 0 => Reply::Bulk(None),
            "$" => {
                let mut b = vec![0; num()? as usize + 2];
                self.r.read_exact(&mut b)?;
                b.truncate(b.len() - 2);
                Reply::Bulk(Some(b))
            }
            "*" => {
                let n = num()?;
                let mut v = Vec::with_capacity(n.max(0) as usize);
                for _ in 0..n {
                    v.push(self.reply()?);
                }
                Reply::Array(v)
            }
            _ => return Err(io::Error::other(format!("bad RESP reply {l:?}"))),
        })
    }

    /// SMEMBERS, sorted.
    pub fn smembers(&mut self, key: &str) -> io::Result<BTreeSet<String>> {
        self.send(&[b"SMEMBERS", key.as_bytes()]);
        match self.reply()? {
            Reply::Array(items) => Ok(items
                .into_iter()
                .map(|r| match r {
                    Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
                    other => panic!("SMEMBERS item {other:?}"),
                })
                .collect()),
            other => Err(io::Error::other(format!("SMEMBERS {key}: {other:?}"))),
        }
    }
}

/// Waits until `port` answers PING with +PONG, or `child` exits, or 10 s pass.
pub fn wait_ping(port: u16, child: &mut Child) -> bool {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok(mut c) = Conn::open(port) {
            c.send(&[b"PING"]);
            if let Ok(Reply::Simple(p)) = c.reply() {
                if p == "PONG" {
                    return true;
                }
            }
        }
        sleep(Duration::from_millis(20));
    }
    false
}

/// Keeps `child` in `kids` once it answers PING on `port` (true); kills and
/// reaps it if it exits or does not answer (false), so the caller can try
/// another port.
pub fn keep_if_up(kids: &mut Kids, port: u16, mut child: Child) -> bool {
    if wait_ping(port, &mut child) {
        kids.0.push(child);
        return true;
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// `tagstore create STORE --expected-tags N`, which must succeed.
pub fn create_store(store: &Path, expected_tags: u64) {
    let st = Command::new(env!("CARGO_BIN_EXE_tagstore"))
        .arg("create")
        .arg(store)
        .args(["--expected-tags", &expected_tags.to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("tagstore create");
    assert!(st.success(), "tagstore create {}", store.display());
}

/// Spawns `tagstore serve STORE --listen 127.0.0.1:PORT`, output discarded.
pub fn spawn_serve(store: &Path, port: u16) -> Child {
    spawn_serve_with(store, port, &[])
}

/// Spawns `tagstore serve STORE --listen 127.0.0.1:PORT EXTRA…`, output discarded.
pub fn spawn_serve_with(store: &Path, port: u16, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tagstore"))
        .arg("serve")
        .arg(store)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tagstore serve")
}

/// Spawns nutcracker on the config `conf`, its stats on another free
/// port, logging to `log`.
pub fn spawn_nutcracker(conf: &Path, log: &Path) -> Child {
    Command::new("nutcracker")
        .arg("-c")
        .arg(conf)
        .args(["-s", &free_port().to_string(), "-a", "127.0.0.1"])
        .arg("-o")
        .arg(log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nutcracker")
}

/// xorshift64*: a small deterministic generator, so no crate is needed.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// One of `xs`.
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}
