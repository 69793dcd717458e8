//! `tagstore ring` against a real nutcracker (twemproxy 0.5.0): start 4
//! backend nodes and the proxy on loopback, write 40,000+ keys through the
//! proxy, ask every node for the keys it holds, and check that each key sits
//! on the node `tagstore ring` predicted, and the count per node.
//!
//! Needs `nutcracker` and `redis-server` (Debian: `apt-get install
//! nutcracker redis-server`). Without them the tests print a skip message
//! and pass, unless the `CI` environment variable is set: then they fail.
//!
//! The backends are `tagstore serve` nodes, listed with serve's `SCAN`
//! extension; one run (the default hash) keeps redis-server backends, whose
//! keys need not follow tagstore's key scheme (`user:1`, `k7`, …).
//! [`start_node`] and [`node_keys`] are the only places that know the
//! backend.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use tagstore::tsv;

mod common;

use common::cluster::{
    create_store, free_port, have_tools, keep_if_up, spawn_nutcracker, spawn_serve, Conn, Kids,
    Reply, XorShift,
};

/// Keys written through the proxy per run.
const KEYS: usize = 40_000;

/// What serves the keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Redis,
    Serve,
}

/// Starts one backend node on a free loopback port and returns the port.
/// The one launcher.
fn start_node(kids: &mut Kids, dir: &Path, backend: Backend, n: usize) -> u16 {
    for _ in 0..5 {
        let port = free_port();
        let child = match backend {
            Backend::Redis => Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start a backend node"),
            Backend::Serve => {
                let store = dir.join(format!("node{n}.tags"));
                if !store.exists() {
                    create_store(&store, 50_000);
                }
                spawn_serve(&store, port)
            }
        };
        if keep_if_up(kids, port, child) {
            return port;
        }
    }
    panic!("no backend node started after 5 tries");
}

/// Every key a node holds. The one reader of a node's contents.
///
/// A serve node keeps whole tags, so `SADD o:…:X m` also makes the key
/// `s:…:m` on that node (and `SADD s:…:X m` the key `o:…:m`): those keys,
/// whose name is the member `m`, are not keys the test wrote, and are left
/// out.
fn node_keys(port: u16, backend: Backend) -> Vec<Vec<u8>> {
    let mut c = Conn::open(port).expect("connect to node");
    if backend == Backend::Serve {
        let mut keys = Vec::new();
        let mut cursor = b"0".to_vec();
        loop {
            c.send(&[b"SCAN", &cursor, b"COUNT", b"20000"]);
            let Reply::Array(mut page) = c.reply().expect("SCAN reply") else {
                panic!("SCAN answered no array");
            };
            assert_eq!(page.len(), 2, "SCAN replies [cursor, keys]");
            let (Reply::Array(items), Reply::Bulk(Some(next))) =
                (page.pop().unwrap(), page.pop().unwrap())
            else {
                panic!("SCAN reply shape");
            };
            for r in items {
                let Reply::Bulk(Some(k)) = r else {
                    panic!("SCAN item {r:?}");
                };
                if !k.ends_with(b":m") {
                    keys.push(k);
                }
            }
            if next == b"0" {
                return keys;
            }
            cursor = next;
        }
    }
    c.send(&[b"KEYS", b"*"]);
    match c.reply().expect("KEYS reply") {
        Reply::Array(items) => items
            .into_iter()
            .map(|r| match r {
                Reply::Bulk(Some(k)) => k,
                other => panic!("KEYS item {other:?}"),
            })
            .collect(),
        other => panic!("KEYS answered {other:?}"),
    }
}

/// Writes `conf` with `listen` filled in, starts nutcracker on it and
/// returns its port; retries on fresh ports if it does not come up.
fn start_proxy(kids: &mut Kids, dir: &Path, conf: &dyn Fn(u16) -> String) -> (u16, String) {
    let path = dir.join("nutcracker.yml");
    for _ in 0..5 {
        let port = free_port();
        let text = conf(port);
        fs::write(&path, &text).expect("write nutcracker.yml");
        let t = Command::new("nutcracker")
            .arg("-t")
            .arg("-c")
            .arg(&path)
            .output()
            .expect("nutcracker -t");
        assert!(
            t.status.success(),
            "nutcracker -t refuses the config:\n{text}\n{}",
            String::from_utf8_lossy(&t.stderr)
        );
        let child = spawn_nutcracker(&path, &dir.join("nutcracker.log"));
        if keep_if_up(kids, port, child) {
            return (port, text);
        }
    }
    let log = fs::read_to_string(dir.join("nutcracker.log")).unwrap_or_default();
    panic!("nutcracker did not come up after 5 tries; log:\n{log}");
}

/// Writes every key through the proxy, pipelined 1000 at a time. SADD rather
/// than SET: it is what a `tagstore serve` node will speak, and nutcracker
/// routes every single-key command by its key alike.
fn write_through_proxy(port: u16, keys: &[String]) {
    let mut c = Conn::open(port).expect("connect to proxy");
    for chunk in keys.chunks(1000) {
        for k in chunk {
            c.send(&[b"SADD", k.as_bytes(), b"m"]);
        }
        for k in chunk {
            match c.reply().expect("proxy reply") {
                Reply::Int(1) => {}
                Reply::Error(e) => panic!("SADD {k:?} through the proxy: -{e}"),
                other => panic!("SADD {k:?} through the proxy answered {other:?}"),
            }
        }
    }
}

/// 40,000+ distinct keys: ASCII, non-ASCII UTF-8, tagstore's
/// `o:<len>:<rel>:<obj>` / `s:…` scheme, and a few with tab, newline,
/// backslash and spaces (TSV escapes on the way to `tagstore ring`).
fn make_keys(seed: u64) -> Vec<String> {
    let mut r = XorShift(seed | 1);
    let rels = ["isa", "depends_on", "tagged", "タグ", "über"];
    let words = [
        "photo",
        "sunset",
        "libc6",
        "adduser",
        "héllo",
        "日本語",
        "ключ",
        "🏷️",
        "naïve",
        "x",
    ];
    let mut keys = Vec::with_capacity(KEYS + 100);
    for i in 0..KEYS {
        let w = r.pick(&words);
        let k = match i % 6 {
            0 => format!("user:{i}"),
            1 => format!("{w}{}", r.next() % 1_000_000),
            2 | 3 => {
                let rel = r.pick(&rels);
                let half = if i % 6 == 2 { 'o' } else { 's' };
                format!("{half}:{}:{rel}:{w}{i}", rel.len())
            }
            4 => format!("{w}-{}-{i}", r.pick(&words)),
            _ => format!("k{i}"),
        };
        keys.push(k);
    }
    keys.extend(
        [
            "a\tb",
            "line\nbreak",
            "back\\slash",
            "with space",
            "\\t literal",
            "é",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    keys.sort();
    keys.dedup();
    keys
}

/// The same keys in tagstore's key scheme (what a serve node accepts): each
/// becomes the name of an `o:` or `s:` key.
fn scheme_keys(seed: u64) -> Vec<String> {
    let rels = ["isa", "tagged", "タグ", "a:b"];
    let mut keys: Vec<String> = make_keys(seed)
        .into_iter()
        .enumerate()
        .map(|(i, k)| {
            let rel = rels[i % rels.len()];
            let half = if i % 2 == 0 { 'o' } else { 's' };
            format!("{half}:{}:{rel}:{k}", rel.len())
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// `tagstore ring CONF --file KEYS`: each key's predicted node label.
fn predict(dir: &Path, conf: &Path, keys: &[String]) -> Vec<String> {
    let file = dir.join("keys.txt");
    let mut text = String::new();
    for k in keys {
        text.push_str(&tsv::escape(k));
        text.push('\n');
    }
    fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tagstore"))
        .arg("ring")
        .arg(conf)
        .arg("--file")
        .arg(&file)
        .output()
        .expect("run tagstore ring");
    assert!(
        out.status.success(),
        "tagstore ring failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), keys.len(), "one line per key");
    lines
        .iter()
        .zip(keys)
        .map(|(l, k)| {
            let (key, node) = l.split_once('\t').expect("KEY<TAB>NODE");
            assert_eq!(&tsv::unescape(key).unwrap(), k, "keys come back in order");
            node.to_string()
        })
        .collect()
}

/// One server of a test pool: weight and optional name.
struct Srv {
    weight: u32,
    name: Option<&'static str>,
}

/// Runs the whole check for one pool layout, hash (`None`: no `hash:`
/// line, nutcracker's default) and distribution.
fn check_cluster(hash: Option<&str>, dist: &str, servers: &[Srv], seed: u64, backend: Backend) {
    if !have_tools("cluster_ring", &["nutcracker", "redis-server"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut kids = Kids::default();
    let ports: Vec<u16> = (0..servers.len())
        .map(|n| start_node(&mut kids, dir, backend, n))
        .collect();
    let labels: Vec<String> = servers
        .iter()
        .zip(&ports)
        .map(|(s, p)| s.name.map_or(format!("127.0.0.1:{p}"), str::to_string))
        .collect();
    let conf = |listen: u16| {
        let mut t = format!("ring:\n  listen: 127.0.0.1:{listen}\n");
        if let Some(h) = hash {
            t.push_str(&format!("  hash: {h}\n"));
        }
        t.push_str(&format!("  distribution: {dist}\n"));
        t.push_str("  auto_eject_hosts: false\n  redis: true\n");
        t.push_str("  servers:\n");
        for (s, p) in servers.iter().zip(&ports) {
            let name = s.name.map_or(String::new(), |n| format!(" {n}"));
            t.push_str(&format!("   - 127.0.0.1:{p}:{}{name}\n", s.weight));
        }
        t
    };
    let (proxy, text) = start_proxy(&mut kids, dir, &conf);
    let keys = match backend {
        Backend::Redis => make_keys(seed),
        Backend::Serve => scheme_keys(seed),
    };
    assert!(keys.len() >= KEYS, "{} keys", keys.len());
    let predicted = predict(dir, &dir.join("nutcracker.yml"), &keys);
    write_through_proxy(proxy, &keys);

    // Where each key really is.
    let mut actual: std::collections::HashMap<Vec<u8>, usize> = Default::default();
    for (i, &p) in ports.iter().enumerate() {
        for k in node_keys(p, backend) {
            if let Some(j) = actual.insert(k.clone(), i) {
                panic!(
                    "key {:?} on two nodes: {j} and {i}",
                    String::from_utf8_lossy(&k)
                );
            }
        }
    }
    assert_eq!(
        actual.len(),
        keys.len(),
        "every key written once, none extra"
    );
    let mut mismatches = Vec::new();
    let mut per_predicted = vec![0usize; ports.len()];
    let mut per_actual = vec![0usize; ports.len()];
    for (k, want) in keys.iter().zip(&predicted) {
        let got = actual[k.as_bytes()];
        per_actual[got] += 1;
        let w = labels
            .iter()
            .position(|l| l == want)
            .unwrap_or_else(|| panic!("predicted node {want:?} is not in {labels:?}"));
        per_predicted[w] += 1;
        if got != w {
            mismatches.push(format!("{k:?}: predicted {want}, on {}", labels[got]));
        }
    }
    eprintln!(
        "cluster_ring {backend:?} {:?} {dist}: {} keys, per node {:?} (predicted {:?}), {} mismatches",
        hash.unwrap_or("default"),
        keys.len(),
        per_actual,
        per_predicted,
        mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} of {} keys not where tagstore ring predicted, with config\n{text}\nfirst: {:#?}",
        mismatches.len(),
        keys.len(),
        &mismatches[..mismatches.len().min(10)]
    );
    assert_eq!(per_actual, per_predicted);
    assert!(
        per_actual.iter().all(|&n| n > 0),
        "every node got keys: {per_actual:?}"
    );
}

#[test]
fn md5_named_and_unnamed_servers_unequal_weights() {
    let servers = [
        Srv {
            weight: 3,
            name: Some("alpha"),
        },
        Srv {
            weight: 1,
            name: Some("beta"),
        },
        Srv {
            weight: 2,
            name: None,
        },
        Srv {
            weight: 1,
            name: Some("node-δ"),
        },
    ];
    check_cluster(Some("md5"), "ketama", &servers, 1, Backend::Serve);
}

#[test]
fn murmur_named_servers() {
    let servers = [
        Srv {
            weight: 1,
            name: Some("n1"),
        },
        Srv {
            weight: 2,
            name: Some("n2"),
        },
        Srv {
            weight: 1,
            name: Some("n3"),
        },
        Srv {
            weight: 5,
            name: Some("n4"),
        },
    ];
    check_cluster(Some("murmur"), "ketama", &servers, 2, Backend::Serve);
}

/// No `hash:` line: nutcracker's default fnv1a_64, which reads key bytes
/// through a signed char (the non-ASCII keys check that), unnamed servers;
/// redis-server backends, so keys outside tagstore's scheme are placed too.
#[test]
fn default_hash_unnamed_servers() {
    let servers = [
        Srv {
            weight: 1,
            name: None,
        },
        Srv {
            weight: 1,
            name: None,
        },
        Srv {
            weight: 2,
            name: None,
        },
        Srv {
            weight: 1,
            name: None,
        },
    ];
    check_cluster(None, "ketama", &servers, 3, Backend::Redis);
}

/// Modula depends on the server order: nutcracker's (sorted by name,
/// shorter names first), not the file's, which is deliberately different.
#[test]
fn modula_follows_nutcracker_server_order() {
    let servers = [
        Srv {
            weight: 2,
            name: Some("zz"),
        },
        Srv {
            weight: 1,
            name: Some("b"),
        },
        Srv {
            weight: 3,
            name: Some("aaa"),
        },
        Srv {
            weight: 1,
            name: None,
        },
    ];
    check_cluster(Some("crc32a"), "modula", &servers, 4, Backend::Serve);
}

/// Runs `tagstore ring` with `args`; (exit code, stdout, stderr).
fn ring(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tagstore"))
        .arg("ring")
        .args(args)
        .output()
        .unwrap();
    let s = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (o.status.code().unwrap_or(-1), s(o.stdout), s(o.stderr))
}

/// Refusals without any proxy: reasons, line numbers, exit codes.
#[test]
fn ring_refusals() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let base = "p:\n  listen: 127.0.0.1:1\n  hash: md5\n  servers:\n  - 127.0.0.1:2:1 a\n  - 127.0.0.1:3:1 b\n";
    let good = write("good.yml", base);
    let (code, out, _) = ring(&[&good, "o:3:isa:photo1", "a\tb"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("o:3:isa:photo1\t"), "{out}");
    assert!(lines[1].starts_with("a\\tb\t"), "escaped key: {out}");
    // No keys and no --file: a usage error.
    assert_eq!(ring(&[&good]).0, 2);
    let tag = write("tag.yml", &format!("{base}  hash_tag: \"{{}}\"\n"));
    let (code, _, err) = ring(&[&tag, "k"]);
    assert_eq!(code, 1);
    assert!(err.contains("line 7: hash_tag"), "{err}");
    let eject = write("eject.yml", &format!("{base}  auto_eject_hosts: true\n"));
    let (code, _, err) = ring(&[&eject, "k"]);
    assert!(
        code == 1 && err.contains("line 7: auto_eject_hosts"),
        "{err}"
    );
    let hsieh = write("hsieh.yml", &base.replace("md5", "hsieh"));
    let (code, _, err) = ring(&[&hsieh, "k"]);
    assert!(
        code == 1 && err.contains("line 3:") && err.contains("hsieh"),
        "{err}"
    );
    let two = write("two.yml", &format!("{base}{}", base.replace("p:", "q:")));
    let (code, _, err) = ring(&[&two, "k"]);
    assert!(code == 1 && err.contains("--pool"), "{err}");
    assert_eq!(ring(&[&two, "k", "--pool", "q"]).0, 0);
    let nohash = write("nohash.yml", &base.replace("  hash: md5\n", ""));
    let (code, _, err) = ring(&[&nohash, "k"]);
    assert!(
        code == 0 && err.contains("warning") && err.contains("fnv1a_64"),
        "{err}"
    );
    let keys = write("keys.txt", "x\n\ny\n");
    let (code, _, err) = ring(&[&good, "--file", &keys]);
    assert!(code == 1 && err.contains("line 2: blank line"), "{err}");
}
