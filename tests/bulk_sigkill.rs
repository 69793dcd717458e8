//! Real-process crashes in bulk rounds: a child bulk-inserting batches of
//! 20,000 tags is killed with SIGKILL at random moments, again and again
//! on the same store.
//!
//! Its own test binary: a store file another test thread held open could
//! otherwise be inherited, still locked, by a child between its fork and
//! its exec (a read-only open in `bulk_load.rs` failed that way once while
//! this test ran beside it).

mod common;

use common::crash::{hub_tags, whole};
use common::store::assert_check_ok;
use std::collections::BTreeSet;
use tagstore::{CreateOptions, Store, Tag};

const KILL_CHILD_ENV: &str = "TAGSTORE_BULK_KILL_CHILD";

/// Batch `b` of the SIGKILL test: 20,000 tags, a third of them on one
/// subject (a peak whose chain grows in every batch).
fn kill_batch(b: u32) -> Vec<Tag> {
    hub_tags(&format!("b{b}"), 20_000)
}

#[test]
#[ignore = "child process of bulk_batches_survive_sigkill, started by it"]
fn bulk_kill_child() {
    let Some(path) = std::env::var_os(KILL_CHILD_ENV) else {
        return;
    };
    let start: u32 = std::env::var("TAGSTORE_BULK_KILL_START")
        .expect("start")
        .parse()
        .expect("start batch");
    let store = Store::open(&path).expect("child: open");
    let mut out = std::io::stdout().lock();
    for b in start..start + 10_000 {
        store
            .insert_batch(&kill_batch(b))
            .1
            .expect("child: bulk insert");
        use std::io::Write;
        if writeln!(out, "\n@@ack {b}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
    }
}

/// A child process bulk-inserting batches of 20,000 tags is killed with
/// SIGKILL at random moments, again and again on the same store (each
/// child first recovers what the last kill left). After every kill: the
/// store opens, every acknowledged batch is whole, every tag of the batch
/// in flight is in both halves or neither, nothing else is stored, and
/// `check()` is clean.
#[test]
fn bulk_batches_survive_sigkill() {
    use std::io::{BufRead, BufReader};
    let _one = common::crash::serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("killed.tags");
    drop(Store::create(&path, &CreateOptions::default()).expect("create"));
    let mut rng = common::crash::Rng::new(0xB01C);
    let mut acked = 0u32;
    let mut partial = 0;
    for kill in 0..8 {
        let mut child = common::crash::self_child("bulk_kill_child")
            .env(KILL_CHILD_ENV, &path)
            .env("TAGSTORE_BULK_KILL_START", acked.to_string())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let waits = rng.below(2);
        let mut lines = BufReader::new(stdout).lines();
        for _ in 0..waits {
            match lines.next() {
                Some(Ok(l)) if l.starts_with("@@ack") => {}
                Some(Ok(_)) => continue,
                _ => break,
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(rng.below(120)));
        child.kill().expect("kill");
        let _ = child.wait();
        for l in lines.map_while(|l| l.ok()) {
            if let Some(b) = l.strip_prefix("@@ack ") {
                acked = acked.max(b.parse::<u32>().expect("ack") + 1);
            }
        }
        let when = format!("kill {kill}");
        let s = Store::open(&path).unwrap_or_else(|e| panic!("{when}: open: {e}"));
        let got: BTreeSet<Tag> = s.tags().collect::<Result<_, _>>().expect("export");
        let mut want: BTreeSet<Tag> = (0..acked).flat_map(kill_batch).collect();
        let lost = want.difference(&got).count();
        assert_eq!(lost, 0, "{when}: {lost} tags of acknowledged batches lost");
        let flight = kill_batch(acked);
        let kept: Vec<&Tag> = flight.iter().filter(|t| got.contains(*t)).collect();
        for t in flight.iter().step_by(13) {
            whole(&s, t, &when);
        }
        if !kept.is_empty() && kept.len() < flight.len() {
            partial += 1;
        }
        want.extend(kept.into_iter().cloned());
        assert_eq!(got, want, "{when}: stored tags other than the batches'");
        assert_eq!(s.len(), want.len() as u64, "{when}: len()");
        assert_check_ok(&s, &when);
        if got.len() as u64 == (acked as u64 + 1) * 20_000 {
            acked += 1;
        }
        drop(s);
    }
    eprintln!(
        "bulk SIGKILL: {acked} batches acknowledged, {partial} kills left a batch partly stored"
    );
}
