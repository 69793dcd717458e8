//! `tagstore serve`: the real binary on a free loopback port, driven by a
//! small RESP client written here; set commands and DEL against a model,
//! both key forms, transactions, pipelining, errors, AUTH, limits, SSCAN
//! under concurrent writes, durability across SIGKILL and SIGTERM, a slow
//! reader, and redis-cli.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tagstore");

mod common;

use common::cluster::XorShift;

/// A reply as the client reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum R {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Arr(Vec<R>),
    /// RESP3 (after `HELLO 3`): a set, a map, a null.
    Set(Vec<R>),
    Map(Vec<(R, R)>),
    Null,
}

impl R {
    fn bulk(s: &str) -> R {
        R::Bulk(s.as_bytes().to_vec())
    }
    fn err_text(&self) -> &str {
        match self {
            R::Err(e) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }
    /// The members of an array of bulk strings, sorted.
    fn set(&self) -> BTreeSet<String> {
        self.list().into_iter().collect()
    }
    /// The members of an array of bulk strings, in order.
    fn list(&self) -> Vec<String> {
        match self {
            R::Arr(v) => v
                .iter()
                .map(|x| match x {
                    R::Bulk(b) => String::from_utf8(b.clone()).expect("UTF-8 member"),
                    other => panic!("expected a bulk string, got {other:?}"),
                })
                .collect(),
            other => panic!("expected an array, got {other:?}"),
        }
    }
}

/// A request as a client encodes it.
fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let w = TcpStream::connect(addr).expect("connect");
        // A hung server fails the test instead of hanging it.
        w.set_read_timeout(Some(Duration::from_secs(120)))
            .expect("timeout");
        let r = BufReader::new(w.try_clone().expect("clone"));
        Client { r, w }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).expect("send");
    }

    fn send(&mut self, args: &[&[u8]]) {
        self.send_raw(&encode(args));
    }

    fn call(&mut self, args: &[&str]) -> R {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&a);
        self.read().expect("reply")
    }

    fn line(&mut self) -> io::Result<String> {
        let mut l = String::new();
        if self.r.read_line(&mut l)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed"));
        }
        assert!(l.ends_with("\r\n"), "line without CRLF: {l:?}");
        l.truncate(l.len() - 2);
        Ok(l)
    }

    fn read(&mut self) -> io::Result<R> {
        let l = self.line()?;
        let (t, rest) = l.split_at(1);
        let num = || rest.parse::<i64>().expect("number");
        Ok(match t {
            "+" => R::Simple(rest.to_owned()),
            "-" => R::Err(rest.to_owned()),
            ":" => R::Int(num()),
            "$" if num() < 0 => R::Nil,
            "$" => {
                let mut b = vec![0; num() as usize + 2];
                self.r.read_exact(&mut b)?;
                assert_eq!(&b[b.len() - 2..], b"\r\n");
                b.truncate(b.len() - 2);
                R::Bulk(b)
            }
            "*" if num() < 0 => R::Nil,
            "*" => R::Arr((0..num()).map(|_| self.read()).collect::<io::Result<_>>()?),
            "~" => R::Set((0..num()).map(|_| self.read()).collect::<io::Result<_>>()?),
            "%" => R::Map(
                (0..num())
                    .map(|_| Ok((self.read()?, self.read()?)))
                    .collect::<io::Result<_>>()?,
            ),
            "_" => R::Null,
            _ => panic!("bad reply line {l:?}"),
        })
    }

    /// True when the server has closed the connection (after any replies).
    fn closed(&mut self) -> bool {
        let mut b = Vec::new();
        match self.r.read_to_end(&mut b) {
            Ok(_) => b.is_empty(),
            // A reset also ends the connection; a timeout does not.
            Err(e) => b.is_empty() && e.kind() == io::ErrorKind::ConnectionReset,
        }
    }
}

struct Server {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    addr: SocketAddr,
}

impl Server {
    fn start(store: &Path, extra: &[&str]) -> Server {
        Self::start_with(store, extra, None)
    }

    /// Starts the server, with its file-size limit (RLIMIT_FSIZE) at
    /// `fsize` bytes when given (SIGXFSZ at its default: the binary ignores
    /// it): a write past it fails
    /// with EFBIG, as a full disk fails with ENOSPC.
    fn start_with(store: &Path, extra: &[&str], fsize: Option<u64>) -> Server {
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg(store)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(limit) = fsize {
            common::edge::limit_file_size(&mut cmd, limit);
        }
        let mut child = cmd.spawn().expect("spawn tagstore serve");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("read the listening line");
        let addr = line
            .trim_end()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first line {line:?}"))
            .parse()
            .expect("an address");
        Server {
            child,
            _stdout: out,
            addr,
        }
    }

    fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// SIGTERM, then the exit status.
    fn term(mut self) -> ExitStatus {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: signalling our own child, which has not been reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        self.child.wait().expect("wait")
    }

    /// Waits (up to 30 s) for the server to exit on its own.
    fn child_wait(mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, and wait for it.
    fn kill(mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("wait");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn temp_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("s.tags");
    (dir, p)
}

/// `o:<len>:<rel>:<object>`, `s:<len>:<rel>:<subject>`.
fn okey(rel: &str, object: &str) -> String {
    format!("o:{}:{rel}:{object}", rel.len())
}
fn skey(rel: &str, subject: &str) -> String {
    format!("s:{}:{rel}:{subject}", rel.len())
}

/// The generator's seed (`SERVE_SEED`, else the clock), printed so a
/// failure can be replayed.
fn seed() -> u64 {
    let s = std::env::var("SERVE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    eprintln!("SERVE_SEED={s}");
    s
}

#[test]
fn set_commands_match_a_model() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &[]);
    let mut c = srv.client();
    let mut rng = XorShift(seed());
    let objects: Vec<String> = [
        "p1",
        "photo two",
        "ü\tß",
        "x".repeat(90).as_str(),
        "",
        "日本語の写真",
        // One byte more than a string may hold: every tag of it is refused.
        "o".repeat(65_537).as_str(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let rels: Vec<String> = ["photo", "a:b", "関係", "r\tel"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let subjects: Vec<String> = [
        "sunset",
        "beach 🏖",
        "tab\there",
        "y".repeat(70).as_str(),
        "s:5:x",
        // The most a string may hold: stored by reference, as are the long
        // strings of a tag longer than a slot (the 90- and 70-byte ones
        // together, with any relationship).
        "s".repeat(65_536).as_str(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut model: BTreeSet<(String, String, String)> = BTreeSet::new();
    // A tag is taken when each of its strings fits `MAX_STRING_BYTES`; the
    // error names the longest string's bytes.
    let fits = |o: &str, r: &str, s: &str| [o, r, s].iter().all(|x| x.len() <= 65_536);
    let refusal = |o: &str, r: &str, s: &str| {
        let needed = [o, r, s].iter().map(|x| x.len()).max().unwrap_or(0);
        format!(
            "a string of the tag has {needed} bytes; a tag's strings may hold at most 65536 bytes each"
        )
    };
    for step in 0..1500 {
        let (o, r, s) = (rng.pick(&objects), rng.pick(&rels), rng.pick(&subjects));
        let by_object = rng.below(2) == 0;
        let (key, member) = if by_object {
            (okey(r, o), s)
        } else {
            (skey(r, s), o)
        };
        let t = (o.to_owned(), r.to_owned(), s.to_owned());
        let ctx = format!("step {step}: {key:?} {member:?}");
        match rng.below(16) {
            0..=5 => {
                let got = c.call(&["SADD", &key, member]);
                if fits(o, r, s) {
                    assert_eq!(got, R::Int(i64::from(model.insert(t))), "{ctx}");
                } else {
                    let want = refusal(o, r, s);
                    assert!(got.err_text().contains(&want), "{ctx}: {got:?}");
                }
            }
            6..=8 => {
                let got = c.call(&["SREM", &key, member]);
                assert_eq!(got, R::Int(i64::from(model.remove(&t))), "{ctx}");
            }
            9 | 10 => {
                let got = c.call(&["SISMEMBER", &key, member]);
                assert_eq!(got, R::Int(i64::from(model.contains(&t))), "{ctx}");
            }
            11 | 12 => {
                let other = rng
                    .pick(if by_object { &subjects } else { &objects })
                    .to_owned();
                let t2 = if by_object {
                    (o.to_owned(), r.to_owned(), other.clone())
                } else {
                    (other.clone(), r.to_owned(), s.to_owned())
                };
                let got = c.call(&["SMISMEMBER", &key, member, &other]);
                let want = R::Arr(vec![
                    R::Int(i64::from(model.contains(&t))),
                    R::Int(i64::from(model.contains(&t2))),
                ]);
                assert_eq!(got, want, "{ctx}");
            }
            13 | 14 => {
                // A write and a read in one transaction: both replies in
                // EXEC's array, the read seeing the write.
                let queued = R::Simple("QUEUED".to_owned());
                assert_eq!(c.call(&["MULTI"]), R::Simple("OK".to_owned()), "{ctx}");
                assert_eq!(c.call(&["SADD", &key, member]), queued, "{ctx}");
                assert_eq!(c.call(&["SISMEMBER", &key, member]), queued, "{ctx}");
                let got = c.call(&["EXEC"]);
                let R::Arr(replies) = &got else {
                    panic!("{ctx}: EXEC replied {got:?}");
                };
                assert_eq!(replies.len(), 2, "{ctx}: {got:?}");
                if fits(o, r, s) {
                    assert_eq!(replies[0], R::Int(i64::from(model.insert(t))), "{ctx}");
                    assert_eq!(replies[1], R::Int(1), "{ctx}");
                } else {
                    let want = refusal(o, r, s);
                    assert!(replies[0].err_text().contains(&want), "{ctx}");
                    assert_eq!(replies[1], R::Int(0), "{ctx}");
                }
            }
            _ => {
                // DEL empties the key's set: every tag it names goes.
                let named = |t: &(String, String, String)| {
                    &t.1 == r && if by_object { &t.0 == o } else { &t.2 == s }
                };
                let before = model.len();
                model.retain(|t| !named(t));
                let got = c.call(&["DEL", &key]);
                assert_eq!(got, R::Int(i64::from(model.len() < before)), "{ctx}");
            }
        }
    }
    // Every set, both forms: SMEMBERS and SCARD equal the model's.
    let mut same_set = |key: String, want: BTreeSet<String>| {
        assert_eq!(c.call(&["SMEMBERS", &key]).set(), want, "{key:?}");
        assert_eq!(
            c.call(&["SCARD", &key]),
            R::Int(want.len() as i64),
            "{key:?}"
        );
    };
    for r in &rels {
        for o in &objects {
            let want = model.iter().filter(|t| &t.0 == o && &t.1 == r);
            same_set(okey(r, o), want.map(|t| t.2.clone()).collect());
        }
        for s in &subjects {
            let want = model.iter().filter(|t| &t.2 == s && &t.1 == r);
            same_set(skey(r, s), want.map(|t| t.0.clone()).collect());
        }
    }
    assert!(!model.is_empty());
    // Reads across sets, on keys of one form and mixed: the model's sets
    // combined.
    let set_of = |key: &(bool, &String, &String)| -> BTreeSet<String> {
        let (by_object, r, name) = *key;
        model
            .iter()
            .filter(|t| {
                &t.1 == r
                    && if by_object {
                        &t.0 == name
                    } else {
                        &t.2 == name
                    }
            })
            .map(|t| if by_object { t.2.clone() } else { t.0.clone() })
            .collect()
    };
    for step in 0..300 {
        let n = 1 + rng.below(3);
        let picked: Vec<(bool, &String, &String)> = (0..n)
            .map(|_| {
                let by_object = rng.below(2) == 0;
                let names = if by_object { &objects } else { &subjects };
                (by_object, rng.pick(&rels), rng.pick(names))
            })
            .collect();
        let names: Vec<String> = picked
            .iter()
            .map(|&(o, r, name)| if o { okey(r, name) } else { skey(r, name) })
            .collect();
        let sets: Vec<BTreeSet<String>> = picked.iter().map(set_of).collect();
        let ctx = format!("step {step}: {names:?}");
        let call = |c: &mut Client, cmd: &str, extra: &[&str]| {
            let mut a = vec![cmd];
            a.extend(extra);
            a.extend(names.iter().map(String::as_str));
            c.call(&a)
        };
        let inter: BTreeSet<String> = sets[0]
            .iter()
            .filter(|m| sets.iter().all(|s| s.contains(*m)))
            .cloned()
            .collect();
        let union: BTreeSet<String> = sets.iter().flatten().cloned().collect();
        let diff: BTreeSet<String> = sets[0]
            .iter()
            .filter(|m| sets[1..].iter().all(|s| !s.contains(*m)))
            .cloned()
            .collect();
        assert_eq!(call(&mut c, "SINTER", &[]).set(), inter, "{ctx}");
        assert_eq!(call(&mut c, "SUNION", &[]).set(), union, "{ctx}");
        assert_eq!(call(&mut c, "SDIFF", &[]).set(), diff, "{ctx}");
        let k = n.to_string();
        let card = call(&mut c, "SINTERCARD", &[&k]);
        assert_eq!(card, R::Int(inter.len() as i64), "{ctx}");
        let mut limited = vec![k.clone()];
        limited.extend(names.iter().cloned());
        limited.extend(["LIMIT".to_owned(), "1".to_owned()]);
        let a: Vec<&str> = std::iter::once("SINTERCARD")
            .chain(limited.iter().map(String::as_str))
            .collect();
        assert_eq!(c.call(&a), R::Int(inter.len().min(1) as i64), "{ctx}");
        let held = sets.iter().filter(|s| !s.is_empty()).count();
        assert_eq!(call(&mut c, "EXISTS", &[]), R::Int(held as i64), "{ctx}");
        let kind = if sets[0].is_empty() { "none" } else { "set" };
        let got = c.call(&["TYPE", &names[0]]);
        assert_eq!(got, R::Simple(kind.to_owned()), "{ctx}");
    }
    // A malformed key refuses the whole request.
    let got = c.call(&["SINTER", &okey("photo", "p1"), "nokey"]);
    assert!(got.err_text().contains("malformed key"), "{got:?}");
    let got = c.call(&["SINTERCARD", "3", &okey("photo", "p1")]);
    assert!(
        got.err_text().contains("greater than number of args"),
        "{got:?}"
    );
}

/// SRANDMEMBER, SPOP and SMOVE against a model of tags: what they return
/// is in the set (distinct unless the count is negative), SPOP and SMOVE
/// change the store as the model changes, through both key forms; an
/// SMOVE to a key whose string passes `MAX_STRING_BYTES` is refused before
/// any change, one to a key longer than a slot moves.
#[test]
fn pick_and_move_commands_match_a_model() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &[]);
    let mut c = srv.client();
    let mut rng = XorShift(seed());
    let names = ["a", "b", "c", "ü"];
    let mut model: BTreeSet<(String, String)> = BTreeSet::new(); // (object, subject)
    let set_of = |model: &BTreeSet<(String, String)>, by_object: bool, name: &str| {
        model
            .iter()
            .filter(|t| if by_object { t.0 == name } else { t.1 == name })
            .map(|t| if by_object { t.1.clone() } else { t.0.clone() })
            .collect::<BTreeSet<String>>()
    };
    let key = |by_object: bool, name: &str| {
        if by_object {
            okey("r", name)
        } else {
            skey("r", name)
        }
    };
    for step in 0..800 {
        let by_object = rng.below(2) == 0;
        let (k, m) = (*rng.pick(&names), *rng.pick(&names));
        let (kk, t) = (key(by_object, k), if by_object { (k, m) } else { (m, k) });
        let t = (t.0.to_owned(), t.1.to_owned());
        let before = set_of(&model, by_object, k);
        let ctx = format!("step {step}: {kk:?} {m:?}");
        match rng.below(6) {
            0 | 1 => {
                let got = c.call(&["SADD", &kk, m]);
                assert_eq!(got, R::Int(i64::from(model.insert(t))), "{ctx}");
            }
            2 => {
                let n = rng.below(7) as i64 - 3;
                let got = c.call(&["SRANDMEMBER", &kk, &n.to_string()]).list();
                let want = if before.is_empty() {
                    0
                } else if n < 0 {
                    (-n) as usize
                } else {
                    (n as usize).min(before.len())
                };
                assert_eq!(got.len(), want, "{ctx}: count {n}: {got:?}");
                assert!(got.iter().all(|g| before.contains(g)), "{ctx}: {got:?}");
                if n >= 0 {
                    let distinct: BTreeSet<&String> = got.iter().collect();
                    assert_eq!(distinct.len(), got.len(), "{ctx}: repeats {got:?}");
                }
            }
            3 => {
                let got = c.call(&["SPOP", &kk]);
                match (&got, before.is_empty()) {
                    (R::Nil, true) => {}
                    (R::Bulk(b), false) => {
                        let g = String::from_utf8(b.clone()).expect("UTF-8");
                        assert!(before.contains(&g), "{ctx}: {g:?}");
                        let gone = if by_object {
                            (k.to_owned(), g)
                        } else {
                            (g, k.to_owned())
                        };
                        assert!(model.remove(&gone), "{ctx}");
                    }
                    other => panic!("{ctx}: SPOP replied {other:?}"),
                }
            }
            4 => {
                let n = rng.below(3);
                let got = c.call(&["SPOP", &kk, &n.to_string()]).list();
                assert_eq!(got.len(), n.min(before.len()), "{ctx}");
                for g in got {
                    let gone = if by_object {
                        (k.to_owned(), g)
                    } else {
                        (g, k.to_owned())
                    };
                    assert!(model.remove(&gone), "{ctx}: {gone:?}");
                }
            }
            _ => {
                let to = *rng.pick(&names);
                let dst = key(by_object, to);
                let got = c.call(&["SMOVE", &kk, &dst, m]);
                let moved = before.contains(m);
                assert_eq!(got, R::Int(i64::from(moved)), "{ctx} -> {dst:?}");
                if moved {
                    model.remove(&t);
                    model.insert(if by_object {
                        (to.to_owned(), m.to_owned())
                    } else {
                        (m.to_owned(), to.to_owned())
                    });
                }
            }
        }
    }
    for by_object in [true, false] {
        for n in names {
            let k = key(by_object, n);
            assert_eq!(
                c.call(&["SMEMBERS", &k]).set(),
                set_of(&model, by_object, n),
                "{k:?}"
            );
        }
    }
    // Redis 7.0 answers SPOP's count that is not an integer as it answers
    // a negative one (SRANDMEMBER's, below, otherwise).
    for bad in ["-1", "abc"] {
        let got = c.call(&["SPOP", &okey("r", "a"), bad]);
        assert_eq!(
            got.err_text(),
            "ERR value is out of range, must be positive",
            "{bad}"
        );
    }
    let got = c.call(&["SRANDMEMBER", &okey("r", "a"), "x"]);
    assert_eq!(
        got.err_text(),
        "ERR value is not an integer or out of range"
    );
    // The one i64 Redis takes as no count (a review's, 2026-11-30).
    let got = c.call(&["SRANDMEMBER", &okey("r", "a"), "-9223372036854775808"]);
    assert_eq!(
        got.err_text(),
        "ERR value is out of range, value must between -9223372036854775807 and \
         9223372036854775807"
    );
    // A destination whose object passes `MAX_STRING_BYTES`: refused.
    let long = "x".repeat(65_537);
    assert_eq!(c.call(&["SADD", &okey("r", "a"), "m"]), R::Int(1));
    let got = c.call(&["SMOVE", &okey("r", "a"), &okey("r", &long), "m"]);
    assert!(
        got.err_text().contains(
            "a string of the tag has 65537 bytes; a tag's strings may hold at most 65536 bytes each"
        ),
        "{got:?}"
    );
    assert_eq!(
        c.call(&["SISMEMBER", &okey("r", "a"), "m"]),
        R::Int(1),
        "refused before any change"
    );
    // A member too large to be in the source is not there: 0, as Redis
    // answers (it was refused as too large).
    let huge = "h".repeat(70_000);
    assert_eq!(
        c.call(&["SMOVE", &okey("r", "a"), &okey("r", "b"), &huge]),
        R::Int(0)
    );
    // One longer than a slot (refused before long strings) moves.
    let wide = "x".repeat(157);
    let got = c.call(&["SMOVE", &okey("r", "a"), &okey("r", &wide), "m"]);
    assert_eq!(got, R::Int(1));
    assert_eq!(c.call(&["SISMEMBER", &okey("r", "a"), "m"]), R::Int(0));
    assert_eq!(
        c.call(&["SMEMBERS", &okey("r", &wide)]),
        R::Arr(vec![R::bulk("m")])
    );
    // Regression: a negative count repeats members without bound, so one
    // small request built a reply of any size (`SRANDMEMBER k -50000000`:
    // 350 MB); the reply is held to 16 x --max-request-bytes (1,024 here).
    let (_d2, path2) = temp_store();
    let small = Server::start(&path2, &["--max-request-bytes", "64"]);
    let mut c = small.client();
    let k = okey("r", "a");
    assert_eq!(c.call(&["SADD", &k, "m"]), R::Int(1));
    let m = R::Bulk(b"m".to_vec());
    // 100 elements of 7 bytes and the header: 705 bytes.
    assert_eq!(c.call(&["SRANDMEMBER", &k, "-100"]), R::Arr(vec![m; 100]));
    let got = c.call(&["SRANDMEMBER", &k, "-200"]);
    assert!(got.err_text().contains("would pass 1024 bytes"), "{got:?}");
    assert_eq!(
        c.call(&["PING"]),
        R::Simple("PONG".to_owned()),
        "still open"
    );
}

#[test]
fn both_key_forms_name_one_tag() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &[]);
    let mut c = srv.client();
    assert_eq!(c.call(&["SADD", "o:5:photo:p1", "sunset"]), R::Int(1));
    // The same tag through the other key: already there.
    assert_eq!(c.call(&["sadd", "s:5:photo:sunset", "p1"]), R::Int(0));
    assert_eq!(
        c.call(&["SMEMBERS", "s:5:photo:sunset"]),
        R::Arr(vec![R::bulk("p1")])
    );
    assert_eq!(c.call(&["SISMEMBER", "s:5:photo:sunset", "p1"]), R::Int(1));
    assert_eq!(c.call(&["SREM", "s:5:photo:sunset", "p1"]), R::Int(1));
    assert_eq!(c.call(&["SMEMBERS", "o:5:photo:p1"]), R::Arr(vec![]));
    assert_eq!(c.call(&["SCARD", "o:5:photo:p1"]), R::Int(0));
    // A SADD of several members counts those added.
    assert_eq!(c.call(&["SADD", "o:5:photo:p1", "a", "b", "a"]), R::Int(2));
    assert_eq!(c.call(&["SREM", "o:5:photo:p1", "a", "zz"]), R::Int(1));
    // Command names in any case; one longer than every command is unknown.
    assert_eq!(
        c.call(&["SMisMember", "o:5:photo:p1", "b", "a"]),
        R::Arr(vec![R::Int(1), R::Int(0)])
    );
    match c.call(&["SMISMEMBERS", "o:5:photo:p1", "b"]) {
        R::Err(m) => assert!(m.starts_with("ERR unknown command 'SMISMEMBERS'"), "{m}"),
        other => panic!("expected unknown command, got {other:?}"),
    }
    assert_eq!(c.call(&["PING"]), R::Simple("PONG".into()));
}

/// Case: a tag whose relationship held 1,000 bytes or more was stored, and
/// SCAN listed its keys, but every command refused them (`<len>` was held
/// to 3 digits), and the cluster tools stopped at the first such key.
#[test]
fn keys_of_a_relationship_of_a_thousand_bytes_or_more_work() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &[]);
    let mut c = srv.client();
    for n in [999, 1000, 65_536] {
        let rel = "r".repeat(n);
        let (o, s) = (okey(&rel, "obj"), skey(&rel, "subj"));
        assert_eq!(c.call(&["SADD", &o, "subj"]), R::Int(1), "{n}");
        assert_eq!(
            c.call(&["SMEMBERS", &s]),
            R::Arr(vec![R::bulk("obj")]),
            "{n}"
        );
        assert_eq!(c.call(&["SCARD", &o]), R::Int(1), "{n}");
        let pattern = format!("o:{n}:*");
        let listed = c.call(&["SCAN", "0", "MATCH", &pattern, "COUNT", "1000"]);
        let R::Arr(page) = listed else {
            panic!("SCAN: {listed:?}");
        };
        assert!(page[1].set().contains(&o), "{n}: SCAN lists {:?}", page[1]);
        assert_eq!(c.call(&["SREM", &s, "obj"]), R::Int(1), "{n}");
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &[]);
    let mut c = srv.client();
    let mut wire = Vec::new();
    let mut want = Vec::new();
    for i in 0..1000 {
        let m = format!("m{}", i / 3);
        let (args, reply): (Vec<String>, R) = match i % 3 {
            0 => (vec!["SADD".into(), "o:1:r:x".into(), m], R::Int(1)),
            1 => (
                vec!["SISMEMBER".into(), "s:1:r:".to_owned() + &m, "x".into()],
                R::Int(1),
            ),
            _ => (vec!["PING".into(), m.clone()], R::Bulk(m.into_bytes())),
        };
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        wire.extend_from_slice(&encode(&a));
        want.push(reply);
    }
    c.send_raw(&wire);
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&c.read().expect("reply"), w, "reply {i}");
    }
    assert_eq!(c.call(&["SCARD", "o:1:r:x"]), R::Int(334));
}

#[test]
fn errors_keep_the_connection_and_name_the_problem() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &[]);
    let mut c = srv.client();
    let e = c.call(&["GET", "foo"]);
    assert!(
        e.err_text().starts_with("ERR unknown command 'GET'"),
        "{e:?}"
    );
    let e = c.call(&["SADD", "o:5:photo:p1"]);
    assert_eq!(
        e.err_text(),
        "ERR wrong number of arguments for 'sadd' command"
    );
    let e = c.call(&["SMEMBERS"]);
    assert_eq!(
        e.err_text(),
        "ERR wrong number of arguments for 'smembers' command"
    );
    for (key, says) in [
        ("photo:p1", "must start with 'o:' or 's:'"),
        ("o:x:photo:p1", "not a decimal number"),
        ("o:05:photo:p1", "not a decimal number"),
        ("o:50:photo:p1", "does not fit in the rest of the key"),
        ("o:4:photo:p1", "no ':' after the 4-byte relationship"),
        ("o:5", "no ':' after the relationship length"),
    ] {
        let e = c.call(&["SADD", key, "m"]);
        assert!(
            e.err_text().starts_with("ERR malformed key") && e.err_text().contains(says),
            "{key}: {e:?}"
        );
        let e = c.call(&["SMEMBERS", key]);
        assert!(e.err_text().contains(says), "{key}: {e:?}");
    }
    c.send(&[b"SADD", b"o:5:photo:p\xff", b"m"]);
    assert!(c
        .read()
        .expect("reply")
        .err_text()
        .contains("object is not UTF-8"));
    c.send(&[b"SADD", b"o:5:photo:p1", b"ok", b"m\xfe"]);
    assert!(c
        .read()
        .expect("reply")
        .err_text()
        .contains("member is not UTF-8"));
    // Refused as a whole: "ok" was not added either.
    assert_eq!(c.call(&["SCARD", "o:5:photo:p1"]), R::Int(0));
    // A member or a key whose string passes `MAX_STRING_BYTES` is refused,
    // the whole command with it, naming the string's bytes and the limit.
    let too_long =
        "a string of the tag has 65537 bytes; a tag's strings may hold at most 65536 bytes each";
    let long = "z".repeat(65_537);
    let e = c.call(&["SADD", "o:5:photo:p1", "fine", &long]);
    assert!(e.err_text().contains(too_long), "{e:?}");
    assert_eq!(c.call(&["SCARD", "o:5:photo:p1"]), R::Int(0));
    let e = c.call(&["SADD", &okey("photo", &long), "m"]);
    assert!(e.err_text().contains(too_long), "{e:?}");
    assert_eq!(c.call(&["SCARD", &okey("photo", &long)]), R::Int(0));
    // A tag longer than a slot (refused before long strings) is taken.
    let wide = "z".repeat(200);
    let e = c.call(&["SADD", "o:5:photo:p1", "fine", &wide]);
    assert_eq!(e, R::Int(2));
    assert_eq!(
        c.call(&["SMEMBERS", "o:5:photo:p1"]).set(),
        ["fine".to_owned(), wide.clone()].into_iter().collect()
    );
    assert_eq!(c.call(&["SREM", "o:5:photo:p1", "fine", &wide]), R::Int(2));
    assert_eq!(c.call(&["SCARD", "o:5:photo:p1"]), R::Int(0));
    assert_eq!(
        c.call(&["SSCAN", "o:5:photo:p1", "x"]).err_text(),
        "ERR invalid cursor"
    );
    // A negative cursor reads as Redis's `strtoul` reads it (-1: the
    // largest), past every page: the scan ends, as redis-server answers.
    assert_eq!(c.call(&["SADD", "o:5:photo:p1", "m"]), R::Int(1));
    for cmd in [&["SSCAN", "o:5:photo:p1", "-1"][..], &["SCAN", "-1"][..]] {
        assert_eq!(
            c.call(cmd),
            R::Arr(vec![R::bulk("0"), R::Arr(vec![])]),
            "{cmd:?}"
        );
    }
    assert_eq!(c.call(&["SREM", "o:5:photo:p1", "m"]), R::Int(1));
    assert_eq!(
        c.call(&["SSCAN", "o:5:photo:p1", "0", "COUNT", "0"])
            .err_text(),
        "ERR syntax error"
    );
    assert_eq!(
        c.call(&["SSCAN", "o:5:photo:p1", "0", "BOGUS"]).err_text(),
        "ERR syntax error"
    );
    // Redis-cli's start-up calls, PING, inline commands.
    assert_eq!(c.call(&["COMMAND", "DOCS"]), R::Arr(vec![]));
    assert_eq!(c.call(&["COMMAND"]), R::Arr(vec![]));
    assert_eq!(c.call(&["ping"]), R::Simple("PONG".into()));
    c.send_raw(b"PING\r\n\r\nSADD o:5:photo:p1 \"a b\"\r\nSMEMBERS o:5:photo:p1\n");
    assert_eq!(c.read().expect("reply"), R::Simple("PONG".into()));
    assert_eq!(c.read().expect("reply"), R::Int(1));
    assert_eq!(c.read().expect("reply"), R::Arr(vec![R::bulk("a b")]));
    assert_eq!(c.call(&["QUIT"]), R::Simple("OK".into()));
    assert!(c.closed());
}

#[test]
fn protocol_errors_are_answered_then_the_connection_closes() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &["--max-request-bytes", "1000"]);
    for (bytes, says) in [
        (&b"*1\r\n+PING\r\n"[..], "expected '$'"),
        (b"*x\r\n", "invalid multibulk length"),
        (b"*1\r\n$-5\r\n", "invalid bulk length"),
        // Leading zeros, as redis-server refuses them.
        (b"*1\r\n$04\r\nPING\r\n", "invalid bulk length"),
        (b"*01\r\n$4\r\nPING\r\n", "invalid multibulk length"),
        (b"*1\r\n$4\r\nPINGxx", "not followed by CRLF"),
        // Refused from the header alone, before the body is sent.
        (
            b"*2\r\n$4\r\nSADD\r\n$5000\r\n",
            "larger than --max-request-bytes (1000 bytes)",
        ),
        (b"*100000\r\n", "larger than --max-request-bytes"),
        (b"PING \"unclosed\r\n", "unbalanced quotes"),
    ] {
        let mut c = srv.client();
        // A good request ahead of the bad one is still answered.
        let mut wire = encode(&[b"PING"]);
        wire.extend_from_slice(bytes);
        c.send_raw(&wire);
        assert_eq!(c.read().expect("reply"), R::Simple("PONG".into()));
        let e = c.read().expect("reply");
        assert!(
            e.err_text().starts_with("ERR Protocol error") && e.err_text().contains(says),
            "{e:?}"
        );
        assert!(c.closed(), "{says}");
    }
    // Just under the limit is served.
    let mut c = srv.client();
    let m = "m".repeat(100);
    assert_eq!(c.call(&["SADD", "o:1:r:x", &m]), R::Int(1));
    let big = "q".repeat(900);
    assert!(c.call(&["PING", &big]) == R::Bulk(big.into_bytes()));
}

#[test]
fn auth_gates_every_command() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &["--requirepass", "s3cret"]);
    let mut c = srv.client();
    assert_eq!(
        c.call(&["PING"]).err_text(),
        "NOAUTH Authentication required."
    );
    assert_eq!(
        c.call(&["SADD", "o:1:r:x", "y"]).err_text(),
        "NOAUTH Authentication required."
    );
    assert!(c
        .call(&["AUTH", "wrong"])
        .err_text()
        .starts_with("WRONGPASS"));
    assert!(c
        .call(&["AUTH", "someone", "s3cret"])
        .err_text()
        .starts_with("WRONGPASS"));
    assert_eq!(
        c.call(&["PING"]).err_text(),
        "NOAUTH Authentication required."
    );
    // Before AUTH a request is held to 10 arguments.
    let mut many = vec!["AUTH"];
    many.extend(std::iter::repeat_n("x", 11));
    assert!(c.call(&many).err_text().contains("Protocol error"));
    assert!(c.closed());
    // ... and to 16 KiB, and the error names that limit, not
    // --max-request-bytes (it did).
    let mut c = srv.client();
    let long = "p".repeat(20_000);
    let e = c.call(&["AUTH", &long]);
    assert!(
        e.err_text()
            .contains("larger than the limit before AUTH (16384 bytes)"),
        "{e:?}"
    );
    let mut c = srv.client();
    assert_eq!(c.call(&["AUTH", "s3cret"]), R::Simple("OK".into()));
    assert_eq!(c.call(&["SADD", "o:1:r:x", "y"]), R::Int(1));
    let mut c2 = srv.client();
    assert_eq!(
        c2.call(&["AUTH", "default", "s3cret"]),
        R::Simple("OK".into())
    );
    assert_eq!(
        c2.call(&["SMEMBERS", "s:1:r:y"]),
        R::Arr(vec![R::bulk("x")])
    );
    // With no password set, AUTH is an error (as Redis).
    let (_d2, path2) = temp_store();
    let open = Server::start(&path2, &[]);
    let e = open.client().call(&["AUTH", "x"]);
    assert!(
        e.err_text().contains("without any password configured"),
        "{e:?}"
    );
    // Regression (a review's): naming the default user with any password
    // is OK there, as in Redis 7 (a client set up with a user name failed
    // to connect to a node without --requirepass); another user is not.
    let mut c3 = open.client();
    assert_eq!(c3.call(&["AUTH", "default", "x"]), R::Simple("OK".into()));
    let e = c3.call(&["AUTH", "alice", "x"]);
    assert!(e.err_text().starts_with("WRONGPASS"), "{e:?}");
}

#[test]
fn max_clients_refuses_the_next_connection() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &["--max-clients", "2"]);
    let mut a = srv.client();
    let mut b = srv.client();
    assert_eq!(a.call(&["PING"]), R::Simple("PONG".into()));
    assert_eq!(b.call(&["PING"]), R::Simple("PONG".into()));
    let mut c = srv.client();
    assert_eq!(
        c.read().expect("reply").err_text(),
        "ERR max number of clients reached"
    );
    assert!(c.closed());
    // Once a client leaves, a new one is served (the server notices the
    // departure in its own time: retry for a while).
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut d = srv.client();
        d.send(&[b"PING"]);
        match d.read() {
            Ok(R::Simple(p)) if p == "PONG" => break,
            Ok(R::Err(e)) if e == "ERR max number of clients reached" => {}
            Err(_) => {}
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "the departed client's place was never freed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(a.call(&["PING"]), R::Simple("PONG".into()));
}

#[test]
fn sscan_returns_each_member_once_under_concurrent_writes() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &[]);
    let key = "s:3:tag:hot";
    let stable: BTreeSet<String> = (0..2000).map(|i| format!("stable-{i}")).collect();
    let mut c = srv.client();
    for chunk in stable.iter().collect::<Vec<_>>().chunks(500) {
        let mut args = vec!["SADD", key];
        args.extend(chunk.iter().map(|s| s.as_str()));
        assert_eq!(c.call(&args), R::Int(chunk.len() as i64));
    }
    // Another connection adds and removes other members of the same set
    // for the whole scan (and other sets, moving the store around).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, addr) = (stop.clone(), srv.addr);
        std::thread::spawn(move || {
            let mut w = Client::connect(addr);
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let m = format!("churn-{}", n % 500);
                let op = if (n / 500).is_multiple_of(2) {
                    "SADD"
                } else {
                    "SREM"
                };
                let r = w.call(&[op, key, &m]);
                assert!(matches!(r, R::Int(_)), "{r:?}");
                let r = w.call(&[op, &skey("tag", &format!("cold-{}", n % 97)), &m]);
                assert!(matches!(r, R::Int(_)), "{r:?}");
                n += 1;
            }
            n
        })
    };
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut cursor = "0".to_owned();
    let mut pages = 0;
    loop {
        let r = c.call(&["SSCAN", key, &cursor, "COUNT", "25"]);
        let R::Arr(v) = r else { panic!("{r:?}") };
        let [R::Bulk(next), members] = v.as_slice() else {
            panic!("{v:?}")
        };
        for m in members.set() {
            *seen.entry(m).or_default() += 1;
        }
        cursor = String::from_utf8(next.clone()).expect("cursor");
        pages += 1;
        if cursor == "0" {
            break;
        }
        assert!(pages < 100_000, "the scan does not end");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let writes = writer.join().expect("writer");
    assert!(writes > 0 && pages > 1, "writes {writes}, pages {pages}");
    for m in &stable {
        assert_eq!(seen.get(m), Some(&1), "{m} seen {:?} times", seen.get(m));
    }
    for (m, n) in &seen {
        assert_eq!(*n, 1, "{m} returned {n} times");
        assert!(stable.contains(m) || m.starts_with("churn-"), "{m}");
    }
    // MATCH filters; a full scan with a large COUNT is one page.
    let r = c.call(&["SSCAN", key, "0", "MATCH", "stable-1?", "COUNT", "100000"]);
    let R::Arr(v) = r else { panic!("{r:?}") };
    assert_eq!(v[0], R::bulk("0"));
    let want: BTreeSet<String> = (10..20).map(|i| format!("stable-{i}")).collect();
    assert_eq!(v[1].set(), want);
}

/// Writes `n` tags pipelined in one batch and checks every reply.
fn write_batch(c: &mut Client, prefix: &str, n: usize) {
    let mut wire = Vec::new();
    for i in 0..n {
        let m = format!("{prefix}-{i}");
        wire.extend_from_slice(&encode(&[b"SADD", b"o:1:r:obj", m.as_bytes()]));
    }
    c.send_raw(&wire);
    for i in 0..n {
        assert_eq!(c.read().expect("reply"), R::Int(1), "reply {i}");
    }
}

/// In both durable modes a reply is sent only after the commit of the
/// event-loop turn that ran its write: four connections pipeline 500 SADDs
/// each at once (their writes share commits), the server is killed the
/// moment the last reply is in, and every acknowledged member is there.
#[test]
fn durable_replies_come_after_the_commit_so_sigkill_loses_nothing_acknowledged() {
    for mode in ["on-sync", "immediate"] {
        let (_d, path) = temp_store();
        for round in 0..3 {
            let srv = Server::start(&path, &["--durability", mode]);
            let mut clients: Vec<Client> = (0..4).map(|_| srv.client()).collect();
            std::thread::scope(|s| {
                for (i, c) in clients.iter_mut().enumerate() {
                    s.spawn(move || write_batch(c, &format!("round{round}-c{i}"), 500));
                }
            });
            // A transaction's writes and a DEL, each alone in its turn:
            // acknowledged, so committed too (each is the last write
            // before the kill in some round: no later commit covers it).
            let c = &mut clients[0];
            let (gone, tx) = (format!("o:1:r:gone{round}"), format!("m{round}"));
            assert_eq!(c.call(&["SADD", &gone, "a", "b"]), R::Int(2));
            assert_eq!(c.call(&["SADD", "o:1:r:del", "x"]), R::Int(1));
            let del = |c: &mut Client| assert_eq!(c.call(&["DEL", "o:1:r:del"]), R::Int(1));
            if round % 2 == 0 {
                del(c);
            }
            assert_eq!(c.call(&["MULTI"]), R::Simple("OK".into()));
            assert_eq!(
                c.call(&["SADD", "o:1:r:tx", &tx]),
                R::Simple("QUEUED".into())
            );
            assert_eq!(c.call(&["DEL", &gone]), R::Simple("QUEUED".into()));
            assert_eq!(c.call(&["EXEC"]), R::Arr(vec![R::Int(1), R::Int(1)]));
            if round % 2 == 1 {
                del(c);
            }
            // Killed the moment the replies are in: what they acknowledged
            // was committed (uncommitted changes live in memory only).
            srv.kill();
        }
        let srv = Server::start(&path, &["--durability", mode]);
        let mut c = srv.client();
        assert_eq!(c.call(&["SCARD", "o:1:r:obj"]), R::Int(6000), "{mode}");
        assert_eq!(c.call(&["SCARD", "o:1:r:tx"]), R::Int(3), "{mode}");
        let deleted = ["o:1:r:gone0", "o:1:r:gone1", "o:1:r:gone2", "o:1:r:del"];
        assert_eq!(
            c.call(&["EXISTS", deleted[0], deleted[1], deleted[2], deleted[3]]),
            R::Int(0),
            "{mode}"
        );
        for i in 0..4 {
            let m = format!("s:1:r:round2-c{i}-499");
            assert_eq!(c.call(&["SISMEMBER", &m, "obj"]), R::Int(1), "{mode} {m}");
        }
    }
}

#[test]
fn sigterm_closes_the_store_cleanly() {
    let (_d, path) = temp_store();
    for mode in ["immediate", "none"] {
        let srv = Server::start(&path, &["--durability", mode]);
        let mut c = srv.client();
        write_batch(&mut c, mode, 200);
        // An idle second connection does not hold up the stop.
        let mut idle = srv.client();
        assert_eq!(idle.call(&["PING"]), R::Simple("PONG".into()));
        let status = srv.term();
        assert!(status.success(), "{mode}: {status:?}");
        assert!(idle.closed());
        let store = tagstore::Store::open(&path).expect("open");
        assert!(
            !store.recovered_on_open(),
            "{mode}: the store was not closed cleanly"
        );
        assert_eq!(
            store.find_subjects("obj", "r").count(),
            if mode == "none" { 400 } else { 200 }
        );
        store.close().expect("close");
    }
}

#[test]
fn a_client_that_stops_reading_is_dropped_and_others_are_served() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &["--write-timeout", "1", "--max-clients", "2"]);
    let mut c = srv.client();
    // A set whose SMEMBERS reply is about 14 KB.
    let members: Vec<String> = (0..100)
        .map(|i| format!("{i:03}{}", "m".repeat(137)))
        .collect();
    let mut args = vec!["SADD", "o:1:r:big"];
    args.extend(members.iter().map(|s| s.as_str()));
    assert_eq!(c.call(&args), R::Int(100));
    // 2,000 of them (28 MB of replies), never read: more than the socket
    // buffers hold, so the server's writes block.
    let mut stuck = srv.client();
    let mut wire = Vec::new();
    for _ in 0..2000 {
        wire.extend_from_slice(&encode(&[b"SMEMBERS", b"o:1:r:big"]));
    }
    stuck.send_raw(&wire);
    // Meanwhile the other client is served.
    for _ in 0..20 {
        assert_eq!(c.call(&["SCARD", "o:1:r:big"]), R::Int(100));
    }
    // With two clients allowed, a third is admitted only once the stuck
    // one has been dropped.
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut d = srv.client();
        d.send(&[b"PING"]);
        match d.read() {
            Ok(R::Simple(p)) if p == "PONG" => {
                // Two places: the stuck client may hold one; try once more.
                let mut e = srv.client();
                e.send(&[b"PING"]);
                if matches!(e.read(), Ok(R::Simple(_))) {
                    break;
                }
            }
            Ok(R::Err(_)) | Err(_) => {}
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "the stuck client was never dropped"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(stuck);
}

/// Regression: each connection could queue 16 × `--max-request-bytes` in
/// MULTI, so 1,024 connections could hold 16,384 of them; the queues of
/// all connections now stop at 64 × `--max-request-bytes` together, and a
/// transaction gives its share back however it ends (EXEC, DISCARD, its
/// connection closing).
#[test]
fn transactions_of_all_connections_share_one_budget() {
    const ABORT: &str = "EXECABORT Transaction discarded because of previous errors.";
    let (_d, path) = temp_store();
    // 1,024 bytes a transaction, 4,096 for all of them.
    let srv = Server::start(&path, &["--max-request-bytes", "64"]);
    let ok = R::Simple("OK".to_owned());
    let queued = R::Simple("QUEUED".to_owned());
    let a = okey("r", "a");
    let srem = ["SREM", a.as_str(), "x"];
    // Each SREM counts 44 bytes (as in the test above): 23 fill a
    // transaction (1,012 bytes), four such fill 4,048 of the 4,096.
    let fill = |c: &mut Client| {
        assert_eq!(c.call(&["MULTI"]), ok);
        for i in 0..23 {
            assert_eq!(c.call(&srem), queued, "request {i}");
        }
    };
    let mut full: Vec<Client> = (0..4).map(|_| srv.client()).collect();
    for c in &mut full {
        fill(c);
    }
    let mut e = srv.client();
    assert_eq!(e.call(&["MULTI"]), ok);
    assert_eq!(e.call(&srem), queued, "4,092 bytes held: still within");
    let got = e.call(&srem);
    assert!(got.err_text().contains("every connection"), "{got:?}");
    assert_eq!(e.call(&["EXEC"]).err_text(), ABORT);
    // DISCARD gives a share back: a whole transaction fits again, and runs.
    assert_eq!(full[0].call(&["DISCARD"]), ok);
    fill(&mut e);
    let got = e.call(&["EXEC"]);
    assert_eq!(got, R::Arr(vec![R::Int(0); 23]), "{got:?}");
    // So does EXEC (above) and a connection that closes mid-transaction.
    fill(&mut e);
    drop(full.remove(1));
    let mut f = srv.client();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert_eq!(f.call(&["MULTI"]), ok);
        assert_eq!(f.call(&srem), queued);
        if f.call(&srem) == queued {
            break;
        }
        assert_eq!(f.call(&["EXEC"]).err_text(), ABORT);
        assert!(
            Instant::now() < deadline,
            "the closed connection's share never came back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// MULTI/EXEC/DISCARD answer as Redis 7.0 answers the same requests: the
/// queued requests run in order at EXEC, each reply an element of its
/// array; a request refused while queueing (unknown, wrong number of
/// arguments, past the transaction's size limit) makes EXEC discard them
/// all; an error while running one is its element and the others run;
/// DISCARD drops the queue; QUIT closes at once; after a WATCHed key
/// changes (through either key of a tag) EXEC runs nothing and answers null.
#[test]
fn transactions_queue_then_run_at_exec_as_redis_does() {
    const ABORT: &str = "EXECABORT Transaction discarded because of previous errors.";
    let (_d, path) = temp_store();
    // The smallest request limit: a transaction queues 16 × 64 bytes at most.
    let srv = Server::start(&path, &["--max-request-bytes", "64"]);
    let mut c = srv.client();
    let mut other = srv.client();
    let ok = R::Simple("OK".to_owned());
    let queued = R::Simple("QUEUED".to_owned());
    let a = okey("r", "a");
    assert_eq!(c.call(&["EXEC"]).err_text(), "ERR EXEC without MULTI");
    assert_eq!(c.call(&["DISCARD"]).err_text(), "ERR DISCARD without MULTI");
    assert_eq!(c.call(&["MULTI"]), ok);
    let nested = c.call(&["MULTI"]);
    assert_eq!(nested.err_text(), "ERR MULTI calls can not be nested");
    assert_eq!(c.call(&["SADD", &a, "x", "y"]), queued);
    assert_eq!(c.call(&["SADD", "badkey", "m"]), queued);
    assert_eq!(c.call(&["SCARD", &a]), queued);
    assert_eq!(other.call(&["SCARD", &a]), R::Int(0), "queued, not run");
    let got = c.call(&["EXEC"]);
    let R::Arr(replies) = &got else {
        panic!("EXEC replied {got:?}");
    };
    assert_eq!(replies.len(), 3, "{got:?}");
    assert_eq!(replies[0], R::Int(2));
    assert!(replies[1].err_text().contains("malformed key"), "{got:?}");
    assert_eq!(replies[2], R::Int(2), "the read sees the write before it");
    assert_eq!(other.call(&["SCARD", &a]), R::Int(2));
    // Refused while queueing: EXEC runs none of it.
    for bad in [&["FOO", "x"][..], &["SADD", &a]] {
        assert_eq!(c.call(&["MULTI"]), ok);
        assert_eq!(c.call(&["SREM", &a, "x"]), queued);
        let e = c.call(bad);
        assert!(e.err_text().starts_with("ERR "), "{bad:?}: {e:?}");
        assert_eq!(c.call(&["EXEC"]).err_text(), ABORT, "{bad:?}");
    }
    assert_eq!(c.call(&["SCARD", &a]), R::Int(2), "nothing aborted ran");
    // Too large: the queue refuses a request past 1,024 bytes, and EXEC
    // discards the transaction.
    assert_eq!(c.call(&["MULTI"]), ok);
    let refused = (0..100)
        .map(|i| (i, c.call(&["SREM", &a, "x"])))
        .find(|(_, got)| *got != queued);
    let (i, got) = refused.expect("the queue refuses a request at some point");
    // Each SREM counts its 12 bytes of arguments, 8 per argument and 8
    // for the request: 44; 23 of them fit in 1,024.
    assert_eq!(i, 23, "refused after {i} requests: {got:?}");
    assert!(got.err_text().contains("transaction too large"), "{got:?}");
    assert_eq!(c.call(&["EXEC"]).err_text(), ABORT);
    assert_eq!(c.call(&["SCARD", &a]), R::Int(2));
    // DISCARD drops the queue; an empty transaction is an empty array.
    assert_eq!(c.call(&["MULTI"]), ok);
    assert_eq!(c.call(&["DEL", &a]), queued);
    assert_eq!(c.call(&["DISCARD"]), ok);
    assert_eq!(c.call(&["SCARD", &a]), R::Int(2));
    assert_eq!(c.call(&["MULTI"]), ok);
    assert_eq!(c.call(&["EXEC"]), R::Arr(vec![]));
    // WATCH: a watched key that changes, here through the other key of
    // one of its tags, makes EXEC run nothing and answer null.
    let sx = skey("r", "x");
    assert_eq!(c.call(&["WATCH", &a, &skey("r", "q")]), ok);
    assert_eq!(other.call(&["SADD", &sx, "a"]), R::Int(0), "no change");
    assert_eq!(c.call(&["MULTI"]), ok);
    assert_eq!(c.call(&["SADD", &a, "w"]), queued);
    assert_eq!(
        c.call(&["EXEC"]),
        R::Arr(vec![R::Int(1)]),
        "unchanged: runs"
    );
    assert_eq!(c.call(&["WATCH", &a]), ok);
    assert_eq!(other.call(&["SREM", &sx, "a"]), R::Int(1));
    assert_eq!(c.call(&["MULTI"]), ok);
    assert_eq!(c.call(&["SADD", &a, "v"]), queued);
    assert_eq!(c.call(&["EXEC"]), R::Nil, "a watched key changed");
    assert_eq!(c.call(&["SISMEMBER", &a, "v"]), R::Int(0));
    // EXEC unwatched it: the next transaction runs.
    assert_eq!(other.call(&["SADD", &a, "x"]), R::Int(1));
    assert_eq!(c.call(&["MULTI"]), ok);
    assert_eq!(c.call(&["SCARD", &a]), queued);
    assert_eq!(c.call(&["EXEC"]), R::Arr(vec![R::Int(3)]));
    // DEL touches; UNWATCH forgets; a malformed key is refused.
    assert_eq!(c.call(&["WATCH", &a]), ok);
    assert_eq!(c.call(&["UNWATCH"]), ok);
    assert_eq!(other.call(&["SADD", &a, "u"]), R::Int(1));
    assert_eq!(c.call(&["WATCH", &sx]), ok);
    assert_eq!(other.call(&["DEL", &a]), R::Int(1));
    assert_eq!(c.call(&["MULTI"]), ok);
    let got = c.call(&["WATCH", &a]);
    assert_eq!(got.err_text(), "ERR WATCH inside MULTI is not allowed");
    assert_eq!(c.call(&["EXEC"]), R::Nil, "DEL changed the watched s: key");
    assert!(c
        .call(&["WATCH", "nokey"])
        .err_text()
        .contains("malformed key"));
    assert_eq!(c.call(&["MULTI"]), ok);
    assert_eq!(c.call(&["SADD", &a, "t"]), queued);
    assert_eq!(c.call(&["EXEC"]), R::Arr(vec![R::Int(1)]));
    assert_eq!(c.call(&["DEL", &a]), R::Int(1));
    assert_eq!(other.call(&["SCARD", &a]), R::Int(0));
    // HELLO and AUTH are queued, as Redis queues them; HELLO 3 inside
    // switches the protocol for the rest of EXEC's array and after it.
    assert_eq!(c.call(&["MULTI"]), ok);
    assert_eq!(c.call(&["HELLO", "3"]), queued);
    assert_eq!(c.call(&["AUTH", "pw"]), queued);
    assert_eq!(c.call(&["SMEMBERS", &a]), queued);
    let got = c.call(&["EXEC"]);
    let R::Arr(replies) = &got else {
        panic!("EXEC replied {got:?}")
    };
    assert!(matches!(&replies[0], R::Map(p) if p.len() == 7), "{got:?}");
    assert!(
        replies[1].err_text().contains("without any password"),
        "{got:?}"
    );
    assert_eq!(replies[2], R::Set(vec![]), "{got:?}");
    assert!(matches!(c.call(&["HELLO", "2"]), R::Arr(_)));
    // CLIENT's subcommand is checked when queued, as Redis checks it.
    assert_eq!(c.call(&["MULTI"]), ok);
    let got = c.call(&["CLIENT", "GETNAME", "x"]);
    assert_eq!(
        got.err_text(),
        "ERR wrong number of arguments for 'client|getname' command"
    );
    assert_eq!(c.call(&["EXEC"]).err_text(), ABORT);
    // EXEC with arguments ends the transaction, as Redis does.
    assert_eq!(c.call(&["MULTI"]), ok);
    assert_eq!(c.call(&["SADD", &a, "q"]), queued);
    let got = c.call(&["EXEC", "now"]);
    assert_eq!(
        got.err_text(),
        "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command"
    );
    assert_eq!(
        c.call(&["SISMEMBER", &a, "q"]),
        R::Int(0),
        "not queued: ran now"
    );
    // Replies past the limit (16 × 64 bytes here) are not kept: the
    // transaction runs whole, the client is told, the connection closes.
    let big = okey("r", "big");
    for i in 0..30 {
        assert_eq!(
            other.call(&["SADD", &big, &format!("member-{i:02}")]),
            R::Int(1)
        );
    }
    let mut t = srv.client();
    assert_eq!(t.call(&["MULTI"]), ok);
    for _ in 0..3 {
        assert_eq!(t.call(&["SMEMBERS", &big]), queued);
    }
    assert_eq!(t.call(&["SADD", &a, "after"]), queued);
    let got = t.call(&["EXEC"]);
    assert!(
        got.err_text().contains("replies passed 1024 bytes"),
        "{got:?}"
    );
    assert!(t.closed());
    assert_eq!(other.call(&["SISMEMBER", &a, "after"]), R::Int(1), "it ran");
    assert_eq!(other.call(&["SREM", &a, "after"]), R::Int(1));
    // QUIT inside a transaction: answered, closed, the queue never runs.
    assert_eq!(c.call(&["MULTI"]), ok);
    assert_eq!(c.call(&["SADD", &a, "z"]), queued);
    assert_eq!(c.call(&["QUIT"]), ok);
    assert!(c.closed());
    assert_eq!(other.call(&["SCARD", &a]), R::Int(0));
}

/// What client libraries send when they connect (HELLO, CLIENT, SELECT,
/// INFO, ECHO) is answered as Redis answers it, behind AUTH as in Redis.
#[test]
fn client_set_up_commands_answer_as_redis_does() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &["--requirepass", "pw"]);
    let mut c = srv.client();
    // Before AUTH: HELLO without AUTH is refused; INFO, like the set
    // commands, needs AUTH.
    assert!(c.call(&["HELLO", "2"]).err_text().starts_with("NOAUTH"));
    assert!(c.call(&["INFO"]).err_text().starts_with("NOAUTH"));
    assert!(c
        .call(&["HELLO", "2", "AUTH", "default", "wrong"])
        .err_text()
        .starts_with("WRONGPASS"));
    // HELLO 2 AUTH authenticates and names the connection.
    let hello = c.call(&["HELLO", "2", "AUTH", "default", "pw", "SETNAME", "app"]);
    let R::Arr(pairs) = &hello else {
        panic!("HELLO: {hello:?}")
    };
    assert_eq!(pairs.len(), 14, "{hello:?}");
    assert_eq!(pairs[0], R::bulk("server"));
    assert_eq!(&pairs[4..6], &[R::bulk("proto"), R::Int(2)]);
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), R::bulk("app"));
    assert_eq!(c.call(&["SADD", "o:5:photo:p1", "sunset"]), R::Int(1));
    // A version other than 2 or 3 is refused; the connection stays usable.
    assert!(c.call(&["HELLO", "4"]).err_text().starts_with("NOPROTO"));
    assert!(c
        .call(&["HELLO", "x"])
        .err_text()
        .contains("not an integer"));
    assert!(c
        .call(&["HELLO", "2", "BOGUS"])
        .err_text()
        .contains("Syntax error"));
    let bad_name = c.call(&["HELLO", "2", "SETNAME", "a b"]);
    assert!(bad_name.err_text().contains("spaces"), "{bad_name:?}");
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), R::bulk("app"), "unchanged");
    // RESP3, as redis-py 8 opens (HELLO 3, no fall back): HELLO's reply is
    // a map, sets come as sets and a null as `_`, as Redis 7 sends them;
    // HELLO 2 goes back to RESP2.
    let hello = c.call(&["HELLO", "3"]);
    let R::Map(pairs) = &hello else {
        panic!("HELLO 3: {hello:?}")
    };
    assert_eq!(pairs.len(), 7, "{hello:?}");
    assert_eq!(pairs[2], (R::bulk("proto"), R::Int(3)), "{hello:?}");
    let sunset = vec![R::bulk("sunset")];
    assert_eq!(
        c.call(&["SMEMBERS", "o:5:photo:p1"]),
        R::Set(sunset.clone())
    );
    assert_eq!(c.call(&["SUNION", "o:5:photo:p1"]), R::Set(sunset.clone()));
    assert_eq!(c.call(&["SCARD", "o:5:photo:p1"]), R::Int(1));
    assert_eq!(c.call(&["CLIENT", "SETNAME", ""]), R::Simple("OK".into()));
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), R::Null);
    let R::Arr(pairs) = c.call(&["HELLO", "2"]) else {
        panic!("HELLO 2")
    };
    assert_eq!(&pairs[4..6], &[R::bulk("proto"), R::Int(2)]);
    assert_eq!(c.call(&["SMEMBERS", "o:5:photo:p1"]), R::Arr(sunset));
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), R::Nil);
    // CLIENT.
    let R::Int(id) = c.call(&["CLIENT", "ID"]) else {
        panic!("CLIENT ID")
    };
    assert_eq!(
        c.call(&["CLIENT", "SETNAME", "worker-1"]),
        R::Simple("OK".into())
    );
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), R::bulk("worker-1"));
    assert!(c
        .call(&["CLIENT", "SETNAME", "a b"])
        .err_text()
        .contains("spaces"));
    let lib = c.call(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]);
    assert_eq!(lib, R::Simple("OK".into()));
    assert!(c
        .call(&["CLIENT", "KILL", "x"])
        .err_text()
        .contains("unknown subcommand"));
    let mut other = srv.client();
    assert!(other.call(&["AUTH", "pw"]) == R::Simple("OK".into()));
    assert_eq!(
        other.call(&["CLIENT", "GETNAME"]),
        R::Nil,
        "names are per connection"
    );
    let R::Int(id2) = other.call(&["CLIENT", "ID"]) else {
        panic!("CLIENT ID")
    };
    assert_ne!(id, id2, "ids are per connection");
    // SELECT, ECHO.
    assert_eq!(c.call(&["SELECT", "0"]), R::Simple("OK".into()));
    assert!(c.call(&["SELECT", "1"]).err_text().contains("out of range"));
    assert!(c
        .call(&["SELECT", "x"])
        .err_text()
        .contains("not an integer"));
    assert_eq!(c.call(&["ECHO", "héllo"]), R::bulk("héllo"));
    // INFO: every section, or those asked for.
    let R::Bulk(all) = c.call(&["INFO"]) else {
        panic!("INFO")
    };
    let all = String::from_utf8(all).expect("UTF-8");
    for line in [
        "redis_version:",
        "loading:0",
        "connected_clients:2",
        "role:master",
        "tags:1",
        &format!("tcp_port:{}", srv.addr.port()),
    ] {
        assert!(all.contains(line), "{line:?} in {all:?}");
    }
    let R::Bulk(one) = c.call(&["INFO", "tagstore"]) else {
        panic!("INFO tagstore")
    };
    let one = String::from_utf8(one).expect("UTF-8");
    assert!(one.starts_with("# Tagstore\r\ntags:1\r\n"), "{one:?}");
    assert!(!one.contains("redis_version"), "{one:?}");
}

#[test]
fn redis_cli_talks_to_a_node() {
    let found = Command::new("redis-cli")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-cli is missing, and CI must have it (.ci/run installs redis-tools)"
        );
        eprintln!("skipped: redis-cli is not installed (apt-get install redis-tools)");
        return;
    }
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &["--requirepass", "pw"]);
    let port = srv.addr.port().to_string();
    // How redis-cli reaches the node.
    let to_node = [
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-a",
        "pw",
        "--no-auth-warning",
    ];
    let cli = |args: &[&str]| -> String {
        let o = Command::new("redis-cli")
            .args(to_node)
            .args(args)
            .output()
            .expect("run redis-cli");
        assert!(o.status.success(), "{args:?}: {o:?}");
        String::from_utf8(o.stdout).expect("UTF-8")
    };
    assert_eq!(cli(&["PING"]), "PONG\n");
    assert_eq!(cli(&["SADD", "o:5:photo:p1", "sunset", "beach"]), "2\n");
    assert_eq!(cli(&["SADD", "o:5:photo:p2", "sunset"]), "1\n");
    let mut objects: Vec<String> = cli(&["SMEMBERS", "s:5:photo:sunset"])
        .lines()
        .map(str::to_owned)
        .collect();
    objects.sort();
    assert_eq!(objects, ["p1", "p2"]);
    assert_eq!(cli(&["SCARD", "o:5:photo:p1"]), "2\n");
    assert_eq!(cli(&["SISMEMBER", "s:5:photo:beach", "p1"]), "1\n");
    let scan = cli(&["SSCAN", "o:5:photo:p1", "0"]);
    let mut lines: Vec<&str> = scan.lines().collect();
    lines.sort();
    assert_eq!(lines, ["0", "beach", "sunset"]);
    assert!(cli(&["GET", "x"]).contains("unknown command"));
    assert!(cli(&["INFO", "server"]).contains("redis_version:"));
    assert_eq!(cli(&["SINTER", "o:5:photo:p1", "o:5:photo:p2"]), "sunset\n");
    // Interactive mode (it calls COMMAND DOCS first), commands on stdin.
    let mut child = Command::new("redis-cli")
        .args(to_node)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"SREM o:5:photo:p1 beach\nSMEMBERS o:5:photo:p1\n")
        .expect("write");
    let o = child.wait_with_output().expect("wait");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1\nsunset\n");
}

/// A node keeps no tag counters unless started with `--counts`; either way
/// `Store::count` on the store afterwards is exact (rebuilt from the tags
/// when the node did not keep them).
#[test]
fn counts_are_exact_after_serving_with_or_without_counters() {
    for extra in [&[][..], &["--counts"][..]] {
        let (_d, path) = temp_store();
        let srv = Server::start(&path, extra);
        let mut c = srv.client();
        for i in 0..120 {
            let o = format!("o:3:isa:obj{i}");
            let subject = if i % 3 == 0 { "sunset" } else { "dawn" };
            assert_eq!(c.call(&["SADD", &o, subject]), R::Int(1));
        }
        assert_eq!(c.call(&["SREM", "o:3:isa:obj0", "sunset"]), R::Int(1));
        assert!(srv.term().success(), "{extra:?}");
        let store = tagstore::Store::open(&path).expect("open");
        assert_eq!(
            store.count("sunset", "isa").expect("count"),
            39,
            "{extra:?}"
        );
        assert_eq!(store.count("dawn", "isa").expect("count"), 80, "{extra:?}");
        store.close().expect("close");
    }
}

/// `--half-only`: each write stores only the half its key names, so the
/// other key of the tag stays empty on this node until its own write
/// arrives; SCAN lists only the keys the node holds; a store that keeps
/// whole tags is refused with `--half-only`.
#[test]
fn half_only_nodes_store_the_half_their_key_names() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &["--half-only"]);
    let mut c = srv.client();
    let bulk = |s: &str| R::Bulk(s.as_bytes().to_vec());
    assert_eq!(c.call(&["SADD", "o:3:isa:p1", "sunset"]), R::Int(1));
    assert_eq!(
        c.call(&["SMEMBERS", "o:3:isa:p1"]),
        R::Arr(vec![bulk("sunset")])
    );
    assert_eq!(c.call(&["SMEMBERS", "s:3:isa:sunset"]), R::Arr(vec![]));
    assert_eq!(c.call(&["SISMEMBER", "s:3:isa:sunset", "p1"]), R::Int(0));
    assert_eq!(
        c.call(&["SCAN", "0"]),
        R::Arr(vec![bulk("0"), R::Arr(vec![bulk("o:3:isa:p1")])])
    );
    assert_eq!(c.call(&["SADD", "s:3:isa:sunset", "p1"]), R::Int(1));
    assert_eq!(c.call(&["SISMEMBER", "s:3:isa:sunset", "p1"]), R::Int(1));
    assert_eq!(c.call(&["SREM", "o:3:isa:p1", "sunset"]), R::Int(1));
    assert_eq!(c.call(&["SMEMBERS", "o:3:isa:p1"]), R::Arr(vec![]));
    assert_eq!(
        c.call(&["SMEMBERS", "s:3:isa:sunset"]),
        R::Arr(vec![bulk("p1")])
    );
    // DEL empties the key's half only: the other half of the same tag,
    // written through its own key, stays.
    assert_eq!(c.call(&["SADD", "o:3:isa:p2", "sunset", "dawn"]), R::Int(2));
    assert_eq!(c.call(&["SADD", "s:3:isa:sunset", "p2"]), R::Int(1));
    assert_eq!(c.call(&["DEL", "o:3:isa:p2"]), R::Int(1));
    assert_eq!(c.call(&["SCARD", "o:3:isa:p2"]), R::Int(0));
    assert_eq!(c.call(&["SISMEMBER", "s:3:isa:sunset", "p2"]), R::Int(1));
    assert_eq!(c.call(&["SREM", "s:3:isa:sunset", "p2"]), R::Int(1));
    assert!(srv.term().success());
    let s = tagstore::Store::open(&path).expect("open");
    assert!(s.is_half_only());
    assert_eq!(s.len(), 1, "one half stored");
    s.close().expect("close");
    // A store that keeps whole tags is not served as half-only.
    let (_d2, whole) = temp_store();
    tagstore::Store::create(&whole, &Default::default())
        .expect("create")
        .close()
        .expect("close");
    let out = Command::new(BIN)
        .arg("serve")
        .arg(&whole)
        .args(["--listen", "127.0.0.1:0", "--half-only"])
        .output()
        .expect("run serve");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--half-only"));
}

/// The server is one event loop: a client sending a large request in small
/// pieces (parsed as they come, resuming where the last parse stopped)
/// must not hold up the others. While one client trickles a SADD of 2,000
/// members in 400 pieces, another is answered after every piece, and the
/// trickled request, once whole, is answered and applied exactly.
#[test]
fn a_request_sent_in_pieces_does_not_hold_up_other_clients() {
    let (_d, path) = temp_store();
    let srv = Server::start(&path, &[]);
    let mut slow = srv.client();
    let mut other = srv.client();
    let members: Vec<String> = (0..2000).map(|i| format!("member-{i:05}")).collect();
    let mut args: Vec<&[u8]> = vec![b"SADD", b"o:1:r:slow"];
    args.extend(members.iter().map(|m| m.as_bytes()));
    let wire = encode(&args);
    let piece = wire.len().div_ceil(400);
    for (k, chunk) in wire.chunks(piece).enumerate() {
        slow.send_raw(chunk);
        // Whatever part of the request has arrived, the other client is served.
        assert_eq!(
            other.call(&["SISMEMBER", "o:1:r:other", "x"]),
            R::Int(0),
            "piece {k}"
        );
    }
    assert_eq!(slow.read().expect("reply"), R::Int(2000));
    assert_eq!(other.call(&["SCARD", "o:1:r:slow"]), R::Int(2000));
    assert_eq!(
        other.call(&["SISMEMBER", "s:1:r:member-01999", "slow"]),
        R::Int(1)
    );
}

/// A store holding `<kept, r, before>`, written through a server that
/// stopped cleanly; its path and size.
fn store_with_one_tag() -> (tempfile::TempDir, PathBuf, u64) {
    let (d, path) = temp_store();
    {
        let srv = Server::start(&path, &[]);
        let mut c = srv.client();
        assert_eq!(c.call(&["SADD", "o:1:r:kept", "before"]), R::Int(1));
        assert_eq!(srv.term().code(), Some(0));
    }
    let size = std::fs::metadata(&path).expect("store").len();
    (d, path, size)
}

/// A commit that fails (here the journal cannot grow: a file-size limit
/// past its first write-ahead step, which the server writes at start, and
/// short of its second, as a full disk would) leaves the server's store
/// handle unusable: the writing client is told the commit failed and is
/// disconnected, the server exits with status 1 instead of serving on, and
/// the store reopens consistent, as the last acknowledged write left it.
#[test]
fn a_failed_commit_answers_nothing_of_its_turn_and_stops_the_server() {
    let (_d, path, size) = store_with_one_tag();
    // The first write-ahead step is 256 KiB and a page; the second doubles it.
    let srv = Server::start_with(
        &path,
        &["--durability", "immediate"],
        Some(size.max(260 * 1024) + 64 * 1024),
    );
    let mut w = srv.client();
    // The same tag added and removed: the journal grows, the store does not.
    let mut failed = None;
    for i in 0..20_000u32 {
        let cmd: &[u8] = if i % 2 == 0 { b"SADD" } else { b"SREM" };
        w.send(&[
            cmd,
            b"o:1:r:churn",
            b"a-member-long-enough-to-fill-the-journal-sooner",
        ]);
        match w.read() {
            Ok(R::Int(1)) => {}
            Ok(R::Err(m)) => {
                assert!(m.starts_with("ERR commit failed"), "{m}");
                failed = Some(i);
                break;
            }
            other => panic!("request {i}: expected 1 or the commit error, got {other:?}"),
        }
    }
    let failed = failed.expect("the journal outgrew the file-size limit");
    assert!(w.closed(), "the writer's connection stays open");
    let status = srv.child_wait();
    assert_eq!(status.code(), Some(1), "{status:?}");
    let store = tagstore::Store::open(&path).expect("reopen");
    assert_eq!(store.find_subjects("kept", "r").count(), 1);
    // The failed request's change is not there: an SADD failed, the tag is
    // absent (the last acknowledged request removed it); an SREM, present.
    assert_eq!(
        store.find_subjects("churn", "r").count(),
        usize::from(failed % 2 == 1),
        "request {failed} failed, yet its change (or a lost one) shows"
    );
    assert!(store.check().expect("check").ok());
    store.close().expect("close");
}

/// A journal that cannot be made (a file-size limit below its first
/// write-ahead step) refuses `--durability immediate` at start, with the
/// journal named, instead of failing the first write a client sends.
#[test]
fn a_journal_that_cannot_be_made_refuses_the_mode_at_start() {
    let (_d, path, size) = store_with_one_tag();
    assert!(size < 128 * 1024, "a small store: {size} bytes");
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg(&path)
        .args(["--listen", "127.0.0.1:0", "--durability", "immediate"])
        .stdin(Stdio::null());
    common::edge::limit_file_size(&mut cmd, 128 * 1024);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tagstore serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started serving without a journal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(".journal"), "the journal is named: {err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening"));
    let store = tagstore::Store::open(&path).expect("reopen");
    assert_eq!(store.find_subjects("kept", "r").count(), 1);
    assert!(store.check().expect("check").ok());
    store.close().expect("close");
}

/// Regression (a review's): an SADD that met a store error midway (here
/// the file cannot grow: a file-size limit, as a full disk) answered only
/// the store's error, so a client took it for nothing done, yet the
/// members before it stayed stored, durably. The error now says where the
/// command stopped and how many members it changed; SCARD agrees.
#[test]
fn an_sadd_stopped_by_the_store_says_how_many_members_stay() {
    let (_d, path, size) = store_with_one_tag();
    let srv = Server::start_with(&path, &[], Some(size + (2 << 20)));
    let mut c = srv.client();
    let mut acked = 0i64;
    let mut said = None;
    for batch in 0..200 {
        let members: Vec<String> = (0..1000).map(|i| format!("m{batch}-{i:0>60}")).collect();
        let mut args: Vec<&str> = vec!["SADD", "o:1:r:k"];
        args.extend(members.iter().map(String::as_str));
        match c.call(&args) {
            R::Int(n) => acked += n,
            R::Err(m) => {
                said = Some(m);
                break;
            }
            other => panic!("batch {batch}: {other:?}"),
        }
    }
    let said = said.expect("the store outgrew the file-size limit");
    let stayed: i64 = said
        .rsplit_once(": the ")
        .and_then(|(_, r)| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {said:?}"));
    assert!(said.contains("SADD stopped at member"), "{said}");
    assert!(stayed > 0 && stayed < 1000, "{said}");
    assert_eq!(
        c.call(&["SCARD", "o:1:r:k"]),
        R::Int(acked + stayed),
        "{said}"
    );
}

/// `tagstore serve STORE` on a free port, its stderr to `stderr`, once it
/// says it listens: the child (stdout taken) and its address.
fn serve_on_any_port(path: &Path, stderr: Stdio) -> (std::process::Child, SocketAddr) {
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg(path)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn tagstore serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the listening line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("not `listening on ADDR`: {line:?}"));
    (child, addr)
}

/// Sends SIGTERM to `child`.
fn sigterm(child: &std::process::Child) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: signalling our own child, which has not been reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
}

/// Regression (a review's): a store whose strings file was lost started
/// serving without a word, and the first sign was a client's failed SCAN.
/// The server now warns on stderr as it starts; a sound store gets no
/// such warning.
#[test]
fn a_lost_strings_file_is_said_at_start() {
    let (_d, path) = temp_store();
    {
        let s =
            tagstore::Store::create(&path, &tagstore::CreateOptions::default()).expect("create");
        s.insert(&tagstore::Tag::new("o", "r", "long".repeat(100)))
            .expect("insert");
        s.close().expect("close");
    }
    let start = |path: &Path| {
        let (mut child, _) = serve_on_any_port(path, Stdio::piped());
        child.kill().expect("kill");
        let out = child.wait_with_output().expect("wait");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = start(&path);
    assert!(!said.contains("warning"), "{said}");
    std::fs::remove_file(tagstore::strings_path(&path)).expect("remove the strings file");
    let said = start(&path);
    assert!(
        said.contains("is lost or damaged") && said.contains("tagstore check"),
        "{said}"
    );
}

/// A review found a large server busy for a while after SIGTERM without a
/// word: it now says it stopped serving and is closing the store, and when
/// the store is closed.
#[test]
fn sigterm_says_the_store_is_closing_and_closed() {
    let (_d, path) = temp_store();
    let (child, _) = serve_on_any_port(&path, Stdio::piped());
    sigterm(&child);
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{:?}", out.status);
    let err = String::from_utf8_lossy(&out.stderr);
    let name = path.display().to_string();
    let closing = err.find(&format!("stopped serving; closing {name}"));
    let closed = err.find(&format!("closed {name} in "));
    assert!(closing.is_some() && closed > closing, "{err}");
}

/// Regression (a review's, 2026-11-30): with a stderr that cannot be
/// written (`2>/dev/full`), the stop message panicked and the server
/// exited 101 before closing its store; it stops cleanly now.
#[test]
fn sigterm_with_an_unwritable_stderr_still_closes_cleanly() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        return;
    };
    let (_d, path) = temp_store();
    let (mut child, addr) = serve_on_any_port(&path, Stdio::from(full));
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&["SADD", "o:1:r:obj", "subj"]), R::Int(1));
    drop(c);
    sigterm(&child);
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status:?}");
    let store = tagstore::Store::open(&path).expect("open");
    assert!(
        !store.recovered_on_open(),
        "the store was not closed cleanly"
    );
    assert_eq!(store.find_subjects("obj", "r").count(), 1);
    store.close().expect("close");
}

/// Hot sets (DESIGN.md §5.3.2): a set of 256 members or more read whole
/// three times is answered from a copy, which every write to it (SADD,
/// SREM, SMOVE in and out, DEL, SPOP) must drop; whole-tag and half-only
/// nodes, against a model, and `--hot-bytes 0` answering the same.
#[test]
fn hot_sets_follow_every_write() {
    for args in [&[][..], &["--half-only"][..], &["--hot-bytes", "0"][..]] {
        let (_d, path) = temp_store();
        let srv = Server::start(&path, args);
        let mut c = srv.client();
        let mut rng = XorShift(seed());
        let keys: Vec<String> = ["hot", "夕日", "other"]
            .iter()
            .map(|s| skey("r", s))
            .collect();
        let mut model: Vec<BTreeSet<String>> = vec![BTreeSet::new(); keys.len()];
        for (k, m) in keys.iter().zip(model.iter_mut()) {
            for i in 0..300 {
                let member = format!("o{i}\t日");
                assert_eq!(c.call(&["SADD", k, &member]), R::Int(1));
                m.insert(member);
            }
        }
        for step in 0..300 {
            let (a, b) = (rng.below(3), rng.below(3));
            if model[a].len() < 270 {
                // Back past 256 members (many in one SADD).
                let more: Vec<String> = (0..40)
                    .map(|_| format!("o{}\t日", rng.below(320)))
                    .collect();
                let mut call = vec!["SADD", keys[a].as_str()];
                call.extend(more.iter().map(String::as_str));
                let new = more
                    .iter()
                    .filter(|m| model[a].insert((*m).clone()))
                    .count();
                assert_eq!(c.call(&call), R::Int(new as i64), "{args:?} step {step}");
            }
            for _ in 0..3 {
                assert_eq!(
                    c.call(&["SMEMBERS", &keys[a]]).set(),
                    model[a],
                    "{args:?} step {step}"
                );
            }
            let member = format!("o{}\t日", rng.below(320));
            let ctx = format!("{args:?} step {step}: {member:?}");
            match rng.below(10) {
                0..=3 => {
                    let got = c.call(&["SADD", &keys[a], &member]);
                    assert_eq!(got, R::Int(i64::from(model[a].insert(member))), "{ctx}");
                }
                4..=6 => {
                    let got = c.call(&["SREM", &keys[a], &member]);
                    assert_eq!(got, R::Int(i64::from(model[a].remove(&member))), "{ctx}");
                }
                7 | 8 if a != b => {
                    let got = c.call(&["SMOVE", &keys[a], &keys[b], &member]);
                    let moved = model[a].remove(&member);
                    if moved {
                        model[b].insert(member);
                    }
                    assert_eq!(got, R::Int(i64::from(moved)), "{ctx}");
                }
                9 if model[b].len() < 275 => {
                    let got = c.call(&["DEL", &keys[b]]);
                    assert_eq!(got, R::Int(i64::from(!model[b].is_empty())), "{ctx}");
                    model[b].clear();
                }
                _ => {
                    let got = c.call(&["SPOP", &keys[a]]);
                    match got {
                        R::Bulk(m) => {
                            let m = String::from_utf8(m).expect("UTF-8 member");
                            assert!(model[a].remove(&m), "{ctx}: SPOP gave {m:?}");
                        }
                        R::Nil => assert!(model[a].is_empty(), "{ctx}"),
                        other => panic!("{ctx}: SPOP answered {other:?}"),
                    }
                }
            }
            assert_eq!(
                c.call(&["SCARD", &keys[a]]),
                R::Int(model[a].len() as i64),
                "{ctx}"
            );
        }
        for (k, m) in keys.iter().zip(&model) {
            assert_eq!(c.call(&["SMEMBERS", k]).set(), *m, "{args:?} at the end");
        }
    }
}

/// The keys one `TAGSTORE.CHANGES` window names.
fn window_keys(c: &mut Client) -> BTreeSet<String> {
    let R::Arr(items) = c.call(&["TAGSTORE.CHANGES"]) else {
        panic!("TAGSTORE.CHANGES: not an array");
    };
    assert!(
        matches!(items.get(2), Some(R::Int(n)) if *n >= 0),
        "the window lost count: {items:?}"
    );
    items[3..]
        .iter()
        .map(|k| match k {
            R::Bulk(b) => String::from_utf8(b.clone()).expect("UTF-8 key"),
            other => panic!("a key: {other:?}"),
        })
        .collect()
}

/// A review's leftover (2026-11-30): that SMOVE, DEL and SPOP name every
/// key they change in the window a reshard copy reads (`TAGSTORE.CHANGES`,
/// DESIGN.md §17) was untested; a key left out would keep a stale copy on
/// its new node. On a node of whole tags a change to one key changes the
/// tag's other key too, and both are named; on a half-only node only the
/// key written.
#[test]
fn changes_name_every_key_smove_del_and_spop_change() {
    for half_only in [false, true] {
        let (_d, path) = temp_store();
        let extra: &[&str] = if half_only { &["--half-only"] } else { &[] };
        let srv = Server::start(&path, extra);
        let mut c = srv.client();
        let other = |k: &str, m: &str| -> Vec<String> {
            match half_only {
                true => Vec::new(),
                false if k.starts_with("o:") => vec![skey("r", m)],
                false => vec![okey("r", m)],
            }
        };
        let (a, b, x) = (okey("r", "a"), okey("r", "b"), okey("r", "x"));
        // The first call opens the first window (it says it knows nothing).
        c.call(&["TAGSTORE.CHANGES"]);
        for (k, m) in [(&a, "m1"), (&a, "m2"), (&x, "p"), (&x, "q")] {
            assert_eq!(c.call(&["SADD", k, m]), R::Int(1));
        }
        window_keys(&mut c);
        let ctx = format!("half_only {half_only}");
        // SMOVE: source and destination (and the tag's other key in each).
        assert_eq!(c.call(&["SMOVE", &a, &b, "m1"]), R::Int(1), "{ctx}");
        let mut want: BTreeSet<String> = [a.clone(), b.clone()].into();
        want.extend(other(&a, "m1"));
        let got = window_keys(&mut c);
        assert!(
            got.is_superset(&want),
            "{ctx}: SMOVE named {got:?}, not all of {want:?}"
        );
        // SPOP: the key and the popped member's other key.
        let R::Bulk(popped) = c.call(&["SPOP", &x]) else {
            panic!("{ctx}: SPOP");
        };
        let popped = String::from_utf8(popped).expect("UTF-8 member");
        let mut want: BTreeSet<String> = [x.clone()].into();
        want.extend(other(&x, &popped));
        let got = window_keys(&mut c);
        assert!(
            got.is_superset(&want),
            "{ctx}: SPOP named {got:?}, not all of {want:?}"
        );
        // DEL: each key, and each member's other key.
        assert_eq!(c.call(&["DEL", &a, &x]), R::Int(2), "{ctx}");
        let left = if popped == "p" { "q" } else { "p" };
        let mut want: BTreeSet<String> = [a.clone(), x.clone()].into();
        want.extend(other(&a, "m2"));
        want.extend(other(&x, left));
        let got = window_keys(&mut c);
        assert!(
            got.is_superset(&want),
            "{ctx}: DEL named {got:?}, not all of {want:?}"
        );
        // A window with no writes names nothing.
        assert!(window_keys(&mut c).is_empty(), "{ctx}");
    }
}
