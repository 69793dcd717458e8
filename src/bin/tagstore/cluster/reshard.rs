//! `tagstore cluster reshard OLD NEW [--remove]`: copies the keys whose node
//! changes to their new node while writes go on, then (`--remove`, once
//! nutcracker runs on NEW) deletes them from their old node.
//!
//! Each copy run records what it copied of every moved key (`record.rs`),
//! and applies to the new node only what changed on the old node since:
//! the members added there, and the members deleted there. So a tag
//! deleted on the old node between two copies is deleted on the new one
//! too, instead of coming back. `--remove` applies the adds only (after the
//! switch the new node takes writes, and a member it was asked to add again
//! looks the same as one never touched), then removes.

use super::config::Pool;
use super::load_pool;
use super::record::{self, Record, State};
use super::tools::{key, parse_key, spinner, Cluster, Common};
use crate::out::{say, Out};
use clap::Args;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use tagstore::tsv;

#[derive(Args)]
pub struct ReshardArgs {
    /// The configuration nutcracker runs now.
    old_config: PathBuf,
    /// The configuration with the new node(s).
    new_config: PathBuf,
    /// Delete the moved keys from their old nodes (run once nutcracker runs
    /// on NEW_CONFIG).
    #[arg(long)]
    remove: bool,
    /// Where to keep what the copies copied [default: NEW_CONFIG.reshard].
    #[arg(long)]
    record: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

/// Commands for one node, pipelined at the end of an old node's pass.
type Cmds = Vec<Vec<Vec<u8>>>;

/// `SADD`/`SREM key members…`.
fn command(verb: &str, k: &str, members: &[&String]) -> Vec<Vec<u8>> {
    let mut cmd = vec![verb.as_bytes().to_vec(), k.as_bytes().to_vec()];
    cmd.extend(members.iter().map(|m| m.as_bytes().to_vec()));
    cmd
}

/// Opens the record of this pair of configurations, or starts one.
fn open_record(a: &ReshardArgs, old: &Pool, new: &Pool, path: &Path) -> Result<Record, String> {
    let Some(r) = Record::load(path)? else {
        return Ok(Record::new(old, new));
    };
    if r.old != record::fingerprint(old) || r.new != record::fingerprint(new) {
        return Err(format!(
            "the reshard record {} belongs to a reshard between other configurations than {} and {}: \
             finish that one, or delete the record to start this one afresh",
            path.display(),
            a.old_config.display(),
            a.new_config.display()
        ));
    }
    if r.state == State::Removing && !a.remove {
        return Err(format!(
            "--remove of this reshard has started (record {}): the old nodes have lost members a \
             copy would now delete from the new nodes; run it again with --remove to finish",
            path.display()
        ));
    }
    Ok(r)
}

/// `tagstore cluster reshard`.
pub fn reshard(a: &ReshardArgs, out: &mut Out) -> Result<(), String> {
    let old = load_pool(&a.old_config, a.common.pool.as_deref())?;
    let new = load_pool(&a.new_config, a.common.pool.as_deref())?;
    let path = a
        .record
        .clone()
        .unwrap_or_else(|| record::default_path(&a.new_config));
    let mut rec = open_record(a, &old, &new, &path)?;
    let bar = spinner();
    let mut c_old = Cluster::connect(&old, a.common.timeout, &bar)?;
    let mut c_new = Cluster::connect(&new, a.common.timeout, &bar)?;
    if a.remove {
        // From here on the old nodes lose members: no copy may run again.
        rec.state = State::Removing;
    }
    // Before any node changes: a record that cannot be written stops here.
    rec.save(&path)?;
    // A node is the same node in both files when its address is.
    let addr = |p: &Pool, i: usize| format!("{}:{}", p.servers[i].host, p.servers[i].port);
    let new_index: BTreeMap<String, usize> =
        (0..new.servers.len()).map(|j| (addr(&new, j), j)).collect();
    let (mut total, mut moved) = (0usize, 0usize);
    // Per new node: keys moved in; per old node: moved out.
    let mut moved_in = vec![0usize; new.servers.len()];
    let mut moved_out = vec![0usize; old.servers.len()];
    let (mut added, mut deleted, mut removed, mut kept) = (0usize, 0usize, 0usize, 0usize);
    for (i, out_i) in moved_out.iter_mut().enumerate() {
        let here = new_index.get(&addr(&old, i)).copied();
        let whole = a.remove && c_old.nodes[i].keeps_whole_tags()?;
        let (listed, sets) = c_old.moved_sets_of(i, &c_new, here, &rec)?;
        total += listed;
        let mut srem_old: Cmds = Vec::new();
        let mut sadd: Vec<Cmds> = vec![Vec::new(); new.servers.len()];
        let mut srem_new: Vec<Cmds> = vec![Vec::new(); new.servers.len()];
        for (k, now) in sets {
            let j = c_new.ring.locate(k.as_bytes());
            let empty = BTreeSet::new();
            let before = rec.copied.get(&k).unwrap_or(&empty);
            let adds: Vec<&String> = now.difference(before).collect();
            // After the switch (--remove) a member missing on the old node
            // may have been added again on the new one: only adds apply.
            let dels: Vec<&String> = match a.remove {
                true => Vec::new(),
                false => before.difference(&now).collect(),
            };
            added += adds.len();
            deleted += dels.len();
            if !adds.is_empty() {
                sadd[j].push(command("SADD", &k, &adds));
            }
            if !dels.is_empty() {
                srem_new[j].push(command("SREM", &k, &dels));
            }
            if !now.is_empty() {
                moved += 1;
                moved_in[j] += 1;
                *out_i += 1;
            }
            if a.remove {
                // A node that keeps whole tags removes the tag's other half
                // with a member, so the member stays when that other half's
                // key stays on this node under the new placement. A
                // half-only node keeps each half apart: every moved member
                // goes (kept, it would be a stale copy that a later
                // reshard or repair brings back after a delete).
                let parsed = parse_key(&k).filter(|_| whole);
                for m in &now {
                    let stays = parsed.is_some_and(|(half, rel, _)| {
                        let other = key(if half == 'o' { 's' } else { 'o' }, rel, m);
                        here == Some(c_new.ring.locate(other.as_bytes()))
                    });
                    if stays {
                        kept += 1;
                    } else {
                        removed += 1;
                        srem_old.push(command("SREM", &k, &[m]));
                    }
                }
            } else if now.is_empty() {
                rec.copied.remove(&k);
            } else {
                rec.copied.insert(k, now);
            }
        }
        // Copies first, then removals: a key is never on neither node.
        let (copies, srems) = (
            sadd.iter().map(Vec::len).sum::<usize>(),
            srem_new.iter().map(Vec::len).sum::<usize>(),
        );
        c_old.step(
            i,
            &format!("copying: {copies} SADDs, {srems} SREMs on the new nodes"),
        );
        for (j, cmds) in sadd.iter().enumerate() {
            c_new.nodes[j].pipeline(cmds)?;
        }
        for (j, cmds) in srem_new.iter().enumerate() {
            c_new.nodes[j].pipeline(cmds)?;
        }
        if a.remove {
            c_old.step(i, &format!("removing {} moved members", srem_old.len()));
        }
        c_old.nodes[i].pipeline(&srem_old)?;
        if !a.remove {
            rec.save(&path)?;
        }
    }
    bar.finish_and_clear();
    let share = if total == 0 {
        0.0
    } else {
        moved as f64 / total as f64
    };
    say!(out, "moved {moved} of {total} keys ({:.2}%)", 100.0 * share);
    say!(out, "node\tmoved_out\tmoved_in");
    for (j, s) in new.servers.iter().enumerate() {
        let out_n = (0..old.servers.len())
            .find(|&i| addr(&old, i) == addr(&new, j))
            .map_or(0, |i| moved_out[i]);
        say!(
            out,
            "{}\t{}\t{}",
            tsv::escape(&s.label()),
            out_n,
            moved_in[j]
        );
    }
    if a.remove {
        say!(
            out,
            "new nodes: added {added} members written since the last copy"
        );
        say!(
            out,
            "removed {removed} members from their old nodes; kept {kept} whose tag's other half stays there"
        );
        Record::remove(&path)?;
    } else {
        say!(
            out,
            "new nodes: added {added} members, deleted {deleted} the old nodes lost since the last copy (record {})",
            path.display()
        );
    }
    Ok(())
}

impl Cluster {
    /// How many keys old node `i` owns, and the members of those that move
    /// (node `here` under NEW is this one), and of every key the record
    /// says was copied from it (emptied since, such a key is not listed).
    /// Only moved keys' members are read: about a quarter of them for a
    /// fourth node.
    fn moved_sets_of(
        &mut self,
        i: usize,
        new: &Cluster,
        here: Option<usize>,
        rec: &Record,
    ) -> Result<(usize, BTreeMap<String, BTreeSet<String>>), String> {
        let owned = self.owned(i, "*")?;
        let listed = owned.len();
        let moves = |k: &String| here != Some(new.ring.locate(k.as_bytes()));
        let mut keys: Vec<String> = owned.into_iter().filter(|k| moves(k)).collect();
        let seen: BTreeSet<&String> = keys.iter().collect();
        let gone: Vec<String> = rec
            .copied
            .keys()
            .filter(|k| !seen.contains(k))
            .filter(|k| self.ring.locate(k.as_bytes()) == i && moves(k))
            .cloned()
            .collect();
        keys.extend(gone);
        let members = self.members(i, &keys)?;
        let sets = keys
            .into_iter()
            .zip(members)
            .map(|(k, m)| (k, m.into_iter().collect()))
            .collect();
        Ok((listed, sets))
    }
}
