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
//!
//! A run reads every old node before it changes anything, holds the
//! record's directory locked throughout, and saves the record before and
//! after each node's changes (the members being changed marked pending in
//! between), so an interrupted run leaves nothing the next copy cannot set
//! right.

use super::client::{Client, Reply, Window};
use super::config::Pool;
use super::ketama::Ring;
use super::load_pool;
use super::record::{self, Lock, Mark, Record, Sets, State};
use super::tools::{key, owned_keys, parse_key, spinner, Cluster, Common};
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
    /// Copy even when an old node has lost every member the record copied
    /// from it (as a `--remove` leaves it): your clients deleted them, and
    /// the copy deletes them from the new nodes too.
    #[arg(long, conflicts_with = "remove")]
    accept_deletes: bool,
    #[command(flatten)]
    common: Common,
}

/// Commands for one node, pipelined at the end of an old node's pass.
type Cmds = Vec<Vec<Vec<u8>>>;

/// Most bytes in one command: a node refuses a request over its
/// `--max-request-bytes` (8 MiB by default, said by its INFO) and closes
/// the connection, and a peak's members pass that (80,000 of 150 bytes).
const COMMAND_BYTES: usize = 1 << 20;

/// For each node of `c`, from one INFO: whether it keeps whole tags, the
/// bytes a command to it may take ([`COMMAND_BYTES`], or less when it
/// says it takes less), and its `run_id`.
fn node_facts(c: &mut Cluster) -> Result<Facts, String> {
    let mut f = Facts::default();
    for node in &mut c.nodes {
        let n = node.facts()?;
        f.whole.push(n.whole_tags);
        f.limits.push(
            n.max_request_bytes
                .map_or(COMMAND_BYTES, |n| n.min(COMMAND_BYTES)),
        );
        f.runs.push(n.run_id);
    }
    Ok(f)
}

/// What the nodes of one configuration said in their INFO, node by node.
#[derive(Default)]
struct Facts {
    /// The node keeps whole tags.
    whole: Vec<bool>,
    /// The most bytes a command to it may take.
    limits: Vec<usize>,
    /// Its `run_id`, if it gave one.
    runs: Vec<Option<String>>,
}

/// `SADD`/`SREM key members…`, as many commands as keep each request
/// (framing counted generously) within `limit` bytes, appended to `cmds`.
/// A member too large for any command goes alone (the node refuses it).
fn push_commands(cmds: &mut Cmds, limit: usize, verb: &str, k: &str, members: &[&String]) {
    // Per argument: `$<len>\r\n…\r\n`, the length at most 10 digits.
    let cost = |len: usize| len + 16;
    let budget = limit.saturating_sub(16 + cost(verb.len()) + cost(k.len()));
    let mut rest = members;
    while !rest.is_empty() {
        let (mut n, mut bytes) = (0, 0);
        while n < rest.len() && (n == 0 || bytes + cost(rest[n].len()) <= budget) {
            bytes += cost(rest[n].len());
            n += 1;
        }
        let mut cmd = vec![verb.as_bytes().to_vec(), k.as_bytes().to_vec()];
        cmd.extend(rest[..n].iter().map(|m| m.as_bytes().to_vec()));
        cmds.push(cmd);
        rest = &rest[n..];
    }
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

/// The least evidence either check before a run's changes acts on: a
/// copy refuses when at least this many members it copied from one old
/// node, all that a `--remove` removes, are gone from it (a `--remove` has
/// run with another record, and the copy would delete them all from the
/// new nodes); a run refuses when a new node holds none of at least this
/// many keys copied to it.
const GONE_ALL: usize = 20;

/// `tagstore cluster reshard`.
pub fn reshard(a: &ReshardArgs, out: &mut Out) -> Result<(), String> {
    let old = load_pool(&a.old_config, a.common.pool.as_deref())?;
    let new = load_pool(&a.new_config, a.common.pool.as_deref())?;
    let path = a
        .record
        .clone()
        .unwrap_or_else(|| record::default_path(&a.new_config));
    let _lock = Lock::take(&path)?;
    let had_record = path.exists();
    let mut rec = open_record(a, &old, &new, &path)?;
    let bar = spinner();
    let mut c_old = Cluster::connect(&old, a.common.timeout, &bar)?;
    let mut c_new = Cluster::connect(&new, a.common.timeout, &bar)?;
    let Facts {
        whole: whole_old,
        limits: old_limits,
        ..
    } = node_facts(&mut c_old)?;
    let Facts {
        whole: whole_new,
        limits,
        runs: runs_new,
    } = node_facts(&mut c_new)?;
    if whole_old.iter().chain(&whole_new).any(|w| *w) {
        bar.suspend(|| {
            say_err!(
                "warning: some nodes keep whole tags (not started with --half-only): there a \
                 copy's SADD or SREM of one key also changes the tag's other key, which that \
                 node may own, so reads through the proxy may be wrong until the reshard ends, \
                 and it ends exact only with writes paused from the first copy until --remove \
                 has finished (README, \"Running a cluster\")"
            )
        });
    }
    if a.remove && !had_record {
        bar.suspend(|| {
            say_err!(
                "warning: no reshard record at {}: every moved key's members are copied again \
                 before they are removed (did the copies use --record?)",
                path.display()
            )
        });
    }
    // A node is the same node in both files when its address is.
    let addr = |p: &Pool, i: usize| format!("{}:{}", p.servers[i].host, p.servers[i].port);
    let new_index: BTreeMap<String, usize> =
        (0..new.servers.len()).map(|j| (addr(&new, j), j)).collect();
    // A new node that holds none of what was copied to it is refused (the
    // user re-created it); one that lost a part is sent it again.
    refuse_if_new_nodes_lost(&rec, &mut c_new, &path)?;
    let addrs: Vec<String> = (0..new.servers.len()).map(|j| addr(&new, j)).collect();
    let missing = missing_on_restarted(&rec, &mut c_new, &runs_new, &whole_new, &addrs)?;
    // At --remove: kept on their old nodes (key -> members), listed.
    let mut keep_missing: Sets = Sets::new();
    // ... and, on a node of whole tags, the same tags under their other
    // key (an SREM there would remove the kept member's tag too).
    let mut keep_other: Sets = Sets::new();
    if a.remove {
        keep_missing = missing.into_iter().map(|(_, k, m)| (k, m)).collect();
        for (k, ms) in &keep_missing {
            if let Some((half, rel, name)) = parse_key(k) {
                let other = if half == 'o' { 's' } else { 'o' };
                for m in ms {
                    keep_other
                        .entry(key(other, rel, m))
                        .or_default()
                        .insert(name.to_owned());
                }
            }
        }
    } else {
        let is_old: BTreeSet<String> = (0..old.servers.len()).map(|i| addr(&old, i)).collect();
        let changed = resend_missing(&mut rec, &c_new, missing);
        // The first copy notes the new nodes' run_ids too (saved with it).
        let noted = note_new_runs(&mut rec, &runs_new, &addrs, &is_old);
        if (noted || changed) && had_record {
            rec.save(&path)?;
        }
    }
    let mut kept_missing: Vec<(&str, String, String)> = Vec::new();
    // Every old node read before any is changed.
    let mut total = 0usize;
    let recorded = record_keys_by_node(&rec, &c_old);
    let heres: Vec<Option<usize>> = (0..old.servers.len())
        .map(|i| new_index.get(&addr(&old, i)).copied())
        .collect();
    // A copy reads again only the keys changed since the last, where the
    // node's change window follows on from the record's mark.
    let marks: Vec<Option<Mark>> = match a.remove {
        true => vec![None; old.servers.len()],
        false => (0..old.servers.len())
            .map(|i| rec.marks.get(&addr(&old, i)).cloned())
            .collect(),
    };
    let mut reads = Vec::with_capacity(old.servers.len());
    let mut next_marks = Vec::with_capacity(old.servers.len());
    let mut partial = 0usize;
    let copy = !a.remove;
    let all = read_all_moved(
        &mut c_old,
        &c_new,
        &heres,
        &recorded,
        &rec.pending,
        &marks,
        copy,
    )?;
    for (i, read) in all.into_iter().enumerate() {
        total += read.listed;
        partial += usize::from(read.partial);
        reads.push((heres[i], read.sets));
        next_marks.push(read.mark);
    }
    if !a.remove && !a.accept_deletes {
        refuse_if_removed(&rec, &reads, &recorded, &whole_old, &c_old, &c_new, &path)?;
    }
    // Before any node changes: a record that cannot be written stops here.
    if !had_record || (a.remove && rec.state == State::Copying) {
        // From here on (--remove) the old nodes lose members: no copy may
        // run again.
        if a.remove {
            rec.state = State::Removing;
        }
        rec.save(&path)?;
    } else {
        Record::check_writable(&path)?;
    }
    let mut moved = 0usize;
    // A node's new mark is in memory only (nothing to copy there, so no
    // save followed it).
    let mut marks_unsaved = false;
    // Per new node: keys moved in; per old node: moved out.
    let mut moved_in = vec![0usize; new.servers.len()];
    let mut moved_out = vec![0usize; old.servers.len()];
    let (mut added, mut deleted, mut removed, mut kept) = (0usize, 0usize, 0usize, 0usize);
    // Kept at --remove for a restarted new node's sake: the tags' other
    // halves on nodes of whole tags (the members themselves are listed).
    let mut kept_with = 0usize;
    // Pending members at --remove (the last copy failed), found on their
    // old node (copied now) or not (left as they are): (state, key, member).
    let mut unsure: Vec<(&str, String, String)> = Vec::new();
    let mut unsure_here: Vec<(&str, String, String)> = Vec::new();
    for (i, (here, sets)) in reads.into_iter().enumerate() {
        let mut srem_old: Cmds = Vec::new();
        let mut sadd: Vec<Cmds> = vec![Vec::new(); new.servers.len()];
        let mut srem_new: Vec<Cmds> = vec![Vec::new(); new.servers.len()];
        // Per key: members certainly on the new node, members changing.
        type During<'a> = (&'a String, BTreeSet<String>, BTreeSet<String>);
        let mut during: Vec<During> = Vec::new();
        let empty = BTreeSet::new();
        for (k, now) in &sets {
            let j = c_new.ring.locate(k.as_bytes());
            let before = rec.copied.get(k).unwrap_or(&empty);
            let pending = rec.pending.get(k).unwrap_or(&empty);
            let adds: Vec<&String> = now.difference(before).collect();
            // After the switch (--remove) a member missing on the old node
            // may have been added again on the new one: only adds apply.
            let dels: Vec<&String> = match a.remove {
                true => {
                    for m in pending {
                        let state = if now.contains(m) { "copied" } else { "left" };
                        unsure_here.push((state, k.clone(), m.clone()));
                    }
                    Vec::new()
                }
                false => before
                    .union(pending)
                    .filter(|m| !now.contains(*m))
                    .collect(),
            };
            added += adds.len();
            deleted += dels.len();
            if !a.remove {
                let sure: BTreeSet<String> = before.intersection(now).cloned().collect();
                let changing: BTreeSet<String> =
                    adds.iter().chain(&dels).map(|m| (*m).clone()).collect();
                during.push((k, sure, changing));
            }
            if !adds.is_empty() {
                push_commands(&mut sadd[j], limits[j], "SADD", k, &adds);
            }
            if !dels.is_empty() {
                push_commands(&mut srem_new[j], limits[j], "SREM", k, &dels);
            }
            // (A copy counts from its record at the end: it may have read
            // only the changed keys.)
            if a.remove && !now.is_empty() {
                moved += 1;
                moved_in[j] += 1;
                moved_out[i] += 1;
            }
            if a.remove {
                // A node that keeps whole tags removes the tag's other half
                // with a member, so the member stays when that other half's
                // key stays on this node under the new placement. A
                // half-only node keeps each half apart: every moved member
                // goes (kept, it would be a stale copy that a later
                // reshard or repair brings back after a delete).
                let missing = keep_missing.get(k);
                let other = keep_other.get(k).filter(|_| whole_old[i]);
                let mut gone: Vec<&String> = Vec::new();
                for m in now {
                    if missing.is_some_and(|s| s.contains(m)) {
                        kept_missing.push(("kept", k.clone(), m.clone()));
                    } else if !stays(whole_old[i], k, m, here, &c_new) {
                        if !other.is_some_and(|s| s.contains(m)) {
                            gone.push(m);
                            continue;
                        }
                        // The other half of a kept member's tag.
                        kept_with += 1;
                    }
                    kept += 1;
                }
                removed += gone.len();
                push_commands(&mut srem_old, old_limits[i], "SREM", k, &gone);
            }
        }
        let (copies, srems) = (
            sadd.iter().map(Vec::len).sum::<usize>(),
            srem_new.iter().map(Vec::len).sum::<usize>(),
        );
        if copies + srems > 0 && !a.remove {
            // Until they are made, the changed members are pending: an
            // interrupted run's next copy sets each of them as the old
            // node has it then.
            for (k, sure, changing) in &during {
                set_or_drop(&mut rec.copied, k, sure);
                set_or_drop(&mut rec.pending, k, changing);
            }
            rec.save(&path)?;
        }
        // Copies first, then removals: a key is never on neither node.
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
            c_old.step(
                i,
                &format!("removing the moved members ({} SREMs)", srem_old.len()),
            );
            c_old.nodes[i].pipeline(&srem_old)?;
            if !unsure_here.is_empty() {
                // Listed, then forgotten, node by node: a --remove run again
                // after a failure must not list this node's as left over.
                record::append_unsure(&record::unsure_path(&path), &unsure_here)?;
                for (_, k, _) in &unsure_here {
                    rec.pending.remove(k);
                }
                rec.save(&path)?;
                unsure.append(&mut unsure_here);
            }
        } else {
            drop(during);
            // Nothing sent: the record already holds this node's keys as
            // they are (a pending member is always sent again: added if
            // the old node has it, else deleted).
            let same = copies + srems == 0;
            for (k, now) in sets {
                rec.pending.remove(&k);
                set_or_drop(&mut rec.copied, &k, &now);
            }
            // The record now holds this node's moved keys as of its last
            // window's close.
            match next_marks[i].take() {
                Some(m) => rec.marks.insert(addr(&old, i), m),
                None => rec.marks.remove(&addr(&old, i)),
            };
            if same {
                marks_unsaved = true;
            } else {
                rec.save(&path)?;
                marks_unsaved = false;
            }
        }
    }
    if !a.remove {
        // The marks of nodes with nothing to copy since the last save
        // (saved once for all).
        if marks_unsaved {
            rec.save(&path)?;
        }
        // What has moved: every key the record holds (a copy that read
        // only the changed keys did not count the others).
        for k in rec.copied.keys() {
            moved += 1;
            moved_in[c_new.ring.locate(k.as_bytes())] += 1;
            moved_out[c_old.ring.locate(k.as_bytes())] += 1;
        }
    }
    bar.finish_and_clear();
    let share = if total == 0 {
        0.0
    } else {
        moved as f64 / total as f64
    };
    say!(out, "moved {moved} of {total} keys ({:.2}%)", 100.0 * share);
    if partial > 0 {
        say!(
            out,
            "read again only the keys changed since the last copy on {partial} of {} old nodes \
             (their key counts as of their last full read)",
            old.servers.len()
        );
    }
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
        if !kept_missing.is_empty() {
            record::append_unsure(&record::unsure_path(&path), &kept_missing)?;
            say_err!(
                "warning: a new node restarted since the last copy (or the record, from an \
                 older build, did not note it) and lacks {} members the copies sent it (lost \
                 in the restart, or deleted through the proxy since the switch): they were \
                 kept on their old nodes{}, and each is listed in {} (kept, key, member; \
                 TSV-escaped): SADD through the proxy those your clients did not delete",
                kept_missing.len(),
                match kept_with {
                    0 => String::new(),
                    n => format!(" (with {n} members of their tags' other keys)"),
                },
                record::unsure_path(&path).display()
            );
        }
        if !unsure.is_empty() {
            let left = unsure.iter().filter(|u| u.0 == "left").count();
            say_err!(
                "warning: the last copy before the switch did not finish: of the {} members it \
                 was changing, {} were on their old nodes and were copied again, {left} were \
                 not and may remain on the new nodes. Each is listed in {} (copied|left, key, \
                 member; TSV-escaped): a `copied` one your clients deleted after the switch is \
                 back, a `left` one they deleted before it may be; SREM those through the proxy",
                unsure.len(),
                unsure.len() - left,
                record::unsure_path(&path).display()
            );
        }
        say!(
            out,
            "new nodes: added {added} members written since the last copy"
        );
        // The kept count is the one it always was (the tag's other half
        // stays there); those kept for a restarted new node follow.
        let for_restart = kept_missing.len() + kept_with;
        let tail = match for_restart {
            0 => String::new(),
            n => format!("; kept {n} a restarted new node lacks"),
        };
        say!(
            out,
            "removed {removed} members from their old nodes; kept {} whose tag's other half stays there{tail}",
            kept - for_restart
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

/// How many keys a new node is asked about at most (SCARD) to tell that it
/// still holds what the record says was copied to it.
const NEW_NODE_SAMPLE: usize = 1000;

/// Refuses when a new node holds none of the keys the record says were
/// copied to it (at least [`GONE_ALL`]; up to [`NEW_NODE_SAMPLE`] asked): it
/// was re-created or restored since, a copy would not copy them again, and
/// `--remove` would then delete the only copy (a review lost a quarter of
/// a cluster so).
fn refuse_if_new_nodes_lost(rec: &Record, c_new: &mut Cluster, path: &Path) -> Result<(), String> {
    let by = copied_by_new_node(rec, c_new);
    for (j, keys) in by.iter().enumerate() {
        if keys.len() < GONE_ALL {
            continue;
        }
        let ask = scards(keys.iter().take(NEW_NODE_SAMPLE));
        c_new.step(j, "checking that it holds what was copied to it");
        let replies = c_new.nodes[j].pipeline(&ask)?;
        if replies.iter().all(|r| *r == Reply::Int(0)) {
            return Err(format!(
                "node {} holds none of the {} keys the record {} says were copied to it (asked \
                 {}): it was re-created or restored since. Nothing was changed; delete the \
                 record, and the next copy copies every moved key to it again",
                c_new.labels[j],
                keys.len(),
                path.display(),
                ask.len()
            ));
        }
    }
    Ok(())
}

/// The keys the record says were copied, by the new node they went to.
fn copied_by_new_node<'r>(rec: &'r Record, c_new: &Cluster) -> Vec<Vec<&'r String>> {
    let mut by = vec![Vec::new(); c_new.nodes.len()];
    for k in rec.copied.keys() {
        by[c_new.ring.locate(k.as_bytes())].push(k);
    }
    by
}

/// `SCARD key` for each key.
fn scards<'k>(keys: impl Iterator<Item = &'k &'k String>) -> Cmds {
    keys.map(|k| vec![b"SCARD".to_vec(), k.as_bytes().to_vec()])
        .collect()
}

/// The members the record says were copied to a new node that restarted
/// since the last copy (its INFO `run_id` is not the one the record noted)
/// and that it does not hold now, as (node, key, members): it may have lost
/// them (a crash before they reached its disk), and a copy that trusted the
/// record would not send them again; `--remove` would then delete the only
/// copy. Each key the record says was copied there is counted (SCARD,
/// once per restart); those short of members are read (SMEMBERS). On a
/// node of whole tags (`whole`) every such key is read: another key's SADD
/// there adds to it too, so a count could make up for a loss.
fn missing_on_restarted(
    rec: &Record,
    c_new: &mut Cluster,
    runs: &[Option<String>],
    whole: &[bool],
    addrs: &[String],
) -> Result<Vec<(usize, String, BTreeSet<String>)>, String> {
    let by = copied_by_new_node(rec, c_new);
    let mut missing = Vec::new();
    for (j, keys) in by.iter().enumerate() {
        let Some(run) = &runs[j] else {
            continue;
        };
        if keys.is_empty() || rec.marks.get(&addrs[j]).is_some_and(|m| &m.instance == run) {
            continue;
        }
        let short: Vec<String> = if whole.get(j).copied().unwrap_or(true) {
            c_new.step(j, "restarted since the last copy: reading what it holds");
            keys.iter().map(|k| (*k).clone()).collect()
        } else {
            c_new.step(j, "restarted since the last copy: counting what it holds");
            let ask = scards(keys.iter());
            let counts = c_new.nodes[j].pipeline(&ask)?;
            keys.iter()
                .zip(counts)
                .filter(|(k, r)| {
                    let want = rec.copied.get(**k).map_or(0, BTreeSet::len);
                    !matches!(r, Reply::Int(n) if usize::try_from(*n).is_ok_and(|n| n >= want))
                })
                .map(|(k, _)| (*k).clone())
                .collect()
        };
        let held = c_new.nodes[j].members(&short)?;
        for (k, has) in short.into_iter().zip(held) {
            let has: BTreeSet<String> = has.into_iter().collect();
            let gone: BTreeSet<String> = rec
                .copied
                .get(&k)
                .map(|c| c.difference(&has).cloned().collect())
                .unwrap_or_default();
            if !gone.is_empty() {
                missing.push((j, k, gone));
            }
        }
    }
    Ok(missing)
}

/// Before a copy: the members [`missing_on_restarted`] found become
/// pending, so this copy sets each as its old node has it (sends again
/// those it still has), with a warning. True if the record changed.
fn resend_missing(
    rec: &mut Record,
    c_new: &Cluster,
    missing: Vec<(usize, String, BTreeSet<String>)>,
) -> bool {
    let mut per_node: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let changed = !missing.is_empty();
    for (j, k, gone) in missing {
        let e = per_node.entry(j).or_default();
        e.0 += gone.len();
        e.1 += 1;
        if let Some(copied) = rec.copied.get_mut(&k) {
            for m in &gone {
                copied.remove(m);
            }
            if copied.is_empty() {
                rec.copied.remove(&k);
            }
        }
        rec.pending.entry(k).or_default().extend(gone);
    }
    for (j, (lost, keys)) in per_node {
        c_new.bar.suspend(|| {
            say_err!(
                "warning: new node {} restarted since the last copy and lost {lost} \
                 members of {keys} keys copied to it: this copy sends them again",
                c_new.labels[j]
            )
        });
    }
    changed
}

/// Notes the `run_id` of each new node that is not an old node (an old
/// node's is its change window's, noted by its read), so that the next run
/// tells whether it restarted. True if the record changed.
fn note_new_runs(
    rec: &mut Record,
    runs: &[Option<String>],
    addrs: &[String],
    is_old: &BTreeSet<String>,
) -> bool {
    let mut changed = false;
    for (j, run) in runs.iter().enumerate() {
        let Some(run) = run else {
            continue;
        };
        if is_old.contains(&addrs[j])
            || rec.marks.get(&addrs[j]).is_some_and(|m| &m.instance == run)
        {
            continue;
        }
        let mark = Mark {
            instance: run.clone(),
            next: 0,
            listed: 0,
        };
        rec.marks.insert(addrs[j].clone(), mark);
        changed = true;
    }
    changed
}

/// The keys the record names (copied or pending) by their old node, each
/// placed once.
fn record_keys_by_node(rec: &Record, c_old: &Cluster) -> Vec<BTreeSet<String>> {
    let mut by = vec![BTreeSet::new(); c_old.nodes.len()];
    for k in rec.copied.keys().chain(rec.pending.keys()) {
        by[c_old.ring.locate(k.as_bytes())].insert(k.clone());
    }
    by
}

/// `sets[k] = members`, or no entry when `members` is empty.
fn set_or_drop(sets: &mut Sets, k: &str, members: &BTreeSet<String>) {
    if members.is_empty() {
        sets.remove(k);
    } else {
        sets.insert(k.to_owned(), members.clone());
    }
}

/// Whether `--remove` keeps member `m` of moved key `k` on its old node:
/// on a node that keeps whole tags (`whole`), when the tag's other key
/// stays on that node (`here`) under NEW, since removing the member would
/// remove that half too.
fn stays(whole: bool, k: &str, m: &str, here: Option<usize>, c_new: &Cluster) -> bool {
    whole
        && parse_key(k).is_some_and(|(half, rel, _)| {
            let other = key(if half == 'o' { 's' } else { 'o' }, rel, m);
            here == Some(c_new.ring.locate(other.as_bytes()))
        })
}

/// Refuses a copy when some old node looks as a `--remove` leaves it: every
/// member the record copied from it that `--remove` removes (at least
/// [`GONE_ALL`]) is gone. The copy would delete them all from the new
/// nodes.
fn refuse_if_removed(
    rec: &Record,
    reads: &[(Option<usize>, Sets)],
    recorded: &[BTreeSet<String>],
    whole_old: &[bool],
    c_old: &Cluster,
    c_new: &Cluster,
    path: &Path,
) -> Result<(), String> {
    for (i, (here, sets)) in reads.iter().enumerate() {
        let mut removable = 0usize;
        // Any such member still there, and the node is not as --remove
        // leaves it (the usual case, found at once).
        let mut present = false;
        'keys: for k in &recorded[i] {
            // Only keys read (a copy that reads the changed keys only has
            // nothing to say of the others; a full read lists every
            // recorded key, emptied ones too).
            let (Some(copied), Some(now)) = (rec.copied.get(k), sets.get(k)) else {
                continue;
            };
            for m in copied {
                if !stays(whole_old[i], k, m, *here, c_new) {
                    removable += 1;
                    if now.contains(m) {
                        present = true;
                        break 'keys;
                    }
                }
            }
        }
        if removable >= GONE_ALL && !present {
            return Err(format!(
                "every one of the {removable} members the record {} says were copied from node \
                 {} is gone from it: a --remove has run (with another record?), and this copy \
                 would delete them from the new nodes. Nothing was changed. If your clients \
                 deleted them, run again with --accept-deletes (deleting the record instead \
                 would bring them back)",
                path.display(),
                c_old.labels[i]
            ));
        }
    }
    Ok(())
}

/// What a run read of one old node.
struct Read {
    /// Keys the node owns (as of its last full read, for a partial one).
    listed: usize,
    /// Moved keys read, with their members.
    sets: Sets,
    /// The node's change window after this read, for the record.
    mark: Option<Mark>,
    /// Only the keys changed since the last copy were read.
    partial: bool,
}

/// How many keys old node `i` owns, and the members of those that move
/// (node `here` under NEW is this one), and of every key the record names
/// (`recorded`: emptied since, such a key is not listed). Only moved keys'
/// members are read: about a quarter of them for a fourth node. A copy
/// (`copy`) first closes the node's change window: when it follows on
/// from `mark`, only the moved keys it names and those with `pending`
/// members are read; the record holds the others as they are.
#[allow(clippy::too_many_arguments)]
fn read_moved(
    node: &mut Client,
    i: usize,
    old: &Ring,
    new: &Ring,
    here: Option<usize>,
    recorded: &BTreeSet<String>,
    pending: &Sets,
    mark: Option<&Mark>,
    copy: bool,
) -> Result<Read, String> {
    let window = if copy { node.changes()? } else { None };
    let moves = |k: &String| here != Some(new.locate(k.as_bytes()));
    let follows =
        |w: &&Window| mark.is_some_and(|m| m.instance == w.instance && m.next == w.number);
    let changed = window
        .as_ref()
        .filter(follows)
        .and_then(|w| w.keys.as_ref());
    let (listed, keys, partial) = match changed {
        Some(changed) => {
            let mut keys: BTreeSet<String> = changed
                .iter()
                .filter(|k| old.locate(k.as_bytes()) == i && moves(k))
                .cloned()
                .collect();
            keys.extend(
                recorded
                    .iter()
                    .filter(|k| pending.contains_key(*k))
                    .cloned(),
            );
            (
                mark.map_or(0, |m| m.listed),
                keys.into_iter().collect(),
                true,
            )
        }
        None => {
            let owned = owned_keys(node, i, old, "*")?;
            let listed = owned.len();
            let mut keys: Vec<String> = owned.into_iter().filter(|k| moves(k)).collect();
            let seen: BTreeSet<&String> = keys.iter().collect();
            let gone: Vec<String> = recorded
                .iter()
                .filter(|k| !seen.contains(k))
                .cloned()
                .collect();
            keys.extend(gone);
            (listed, keys, false)
        }
    };
    let members = node.members(&keys)?;
    let sets = keys
        .into_iter()
        .zip(members)
        .map(|(k, m)| (k, m.into_iter().collect()))
        .collect();
    let mark = window.map(|w| Mark {
        instance: w.instance,
        next: w.number + 1,
        listed,
    });
    Ok(Read {
        listed,
        sets,
        mark,
        partial,
    })
}

/// [`read_moved`] of every old node, all at once (one thread each: the
/// nodes are other machines, and a copy's pause is this read).
fn read_all_moved(
    c_old: &mut Cluster,
    c_new: &Cluster,
    heres: &[Option<usize>],
    recorded: &[BTreeSet<String>],
    pending: &Sets,
    marks: &[Option<Mark>],
    copy: bool,
) -> Result<Vec<Read>, String> {
    let n = c_old.nodes.len();
    c_old.bar.set_message(format!(
        "reading the keys of {n} old nodes and the members of those that move"
    ));
    let new = &c_new.ring;
    c_old.each_node(|i, node, old| {
        let mark = marks[i].as_ref();
        read_moved(
            node,
            i,
            old,
            new,
            heres[i],
            &recorded[i],
            pending,
            mark,
            copy,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peak's members were sent in one SADD, which a node refuses past
    /// its `--max-request-bytes` (8 MiB), closing the connection.
    #[test]
    fn a_peak_is_sent_in_commands_of_bounded_size() {
        let members: Vec<String> = (0..100_000).map(|i| format!("{i:0>140}")).collect();
        let refs: Vec<&String> = members.iter().collect();
        let mut cmds = Cmds::new();
        push_commands(&mut cmds, COMMAND_BYTES, "SADD", "s:1:r:peak", &refs);
        assert!(cmds.len() > 1);
        let mut sent = Vec::new();
        for c in &cmds {
            assert_eq!(
                (c[0].as_slice(), c[1].as_slice()),
                (&b"SADD"[..], &b"s:1:r:peak"[..])
            );
            let bytes: usize = c.iter().map(|m| m.len() + 16).sum::<usize>() + 16;
            assert!(bytes <= COMMAND_BYTES, "{bytes}");
            sent.extend(c[2..].iter().cloned());
        }
        let want: Vec<Vec<u8>> = members.iter().map(|m| m.clone().into_bytes()).collect();
        assert_eq!(sent, want);
        // A member larger than the bound still goes, alone.
        let big = "x".repeat(COMMAND_BYTES + 1);
        let mut cmds = Cmds::new();
        push_commands(&mut cmds, COMMAND_BYTES, "SREM", "k", &[&big, &big]);
        assert_eq!(cmds.len(), 2);
        let mut none = Cmds::new();
        push_commands(&mut none, COMMAND_BYTES, "SADD", "k", &[]);
        assert!(none.is_empty());
        // A node that takes less: every request within its limit.
        let mut small = Cmds::new();
        push_commands(&mut small, 4096, "SADD", "s:1:r:peak", &refs[..1000]);
        assert!(small.len() > 30);
        for c in &small {
            let request: usize = c.iter().map(|m| m.len() + 16).sum::<usize>() + 16;
            assert!(request <= 4096, "{request}");
        }
    }
}
