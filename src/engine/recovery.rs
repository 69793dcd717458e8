//! Recovery at open: the interrupted operation redone from the intent
//! record, and the bucket tables read from their image or rebuilt.

use crate::error::{Error, Result};
use crate::format::hash::{key_fp, key_hash, tag_fp};
use crate::format::tag::{decode, SlotBytes};
use crate::format::{
    BlockAt, BlockMut, BlockRef, Half, Intent, IntentOp, Layout, SlotAddr, Superblock, BLOCK_SIZE,
    INTENT_BLOCK, INTENT_LEN, KIND_PRIMARY, KIND_SECONDARY, SLOTS_PER_BLOCK,
};
use crate::index::{Tables, TABLE_MAGIC, TABLE_MAGIC_1};
use crate::pager::MappedFile;
use foldhash::{HashMap, HashMapExt};

/// The blocks the operation recorded in the intent block leaves once
/// redone (`overlay`'s image of a block, when it has one, else the file's),
/// so that a tag interrupted mid-INSERT or mid-DELETE is wholly present or
/// wholly absent. Empty when no operation is recorded.
pub fn intent_redo(
    file: &MappedFile,
    overlay: &HashMap<u64, Box<[u8]>>,
    geo: &Layout,
    seed: u64,
) -> Result<Vec<(u64, Box<[u8]>)>> {
    let Some(intent) = Intent::decode(file.block(INTENT_BLOCK)?) else {
        return Ok(Vec::new());
    };
    if matches!(intent.op, IntentOp::Split | IntentOp::Bulk) {
        // Finished on the open store (`State::redo_split`, `State::redo_bulk`).
        return Ok(Vec::new());
    }
    let view = decode(&intent.tag)
        .ok_or_else(|| Error::corrupt("intent record (block 1) holds an undecodable tag"))?;
    let tfp = tag_fp(seed, &intent.tag);
    let total_blocks = file.len() / BLOCK_SIZE as u64;
    let mut out: Vec<(u64, Box<[u8]>)> = Vec::new();
    for (h, addr, (owner, ordinal)) in [
        (Half::Object, intent.object_slot, intent.object_identity),
        (Half::Subject, intent.subject_slot, intent.subject_identity),
    ] {
        if addr == SlotAddr::NONE {
            continue;
        }
        if addr.block < geo.primary_start(0)
            || addr.block >= total_blocks
            || addr.slot as usize >= SLOTS_PER_BLOCK
        {
            return Err(Error::corrupt(format!(
                "intent record names impossible slot {} of block {}",
                addr.slot, addr.block
            )));
        }
        let kind = match geo.block_at(addr.block) {
            BlockAt::Secondary { .. } => KIND_SECONDARY,
            _ => KIND_PRIMARY,
        };
        let kfp = key_fp(key_hash(seed, h, view.relationship, view.key_name(h)));
        let mut img: Box<[u8]> = match overlay.get(&addr.block) {
            Some(b) => b.clone(),
            None => file.block(addr.block)?.into(),
        };
        let mut b = BlockMut(&mut img);
        // A block that fails its checksum may have been killed inside its
        // first write, its identity half stored (the kind byte and no
        // owner): an INSERT's target block has exactly the identity the
        // record names, so it is rewritten with the slot.
        let torn = !b.as_ref().crc_ok();
        if b.as_ref().is_unwritten() || (torn && intent.op == IntentOp::Insert) {
            b.set_identity(kind, owner, ordinal);
        }
        match intent.op {
            IntentOp::Insert => b.put(addr.slot as usize, &intent.tag, kfp, tfp),
            IntentOp::Delete | IntentOp::Split | IntentOp::Bulk => b.clear(addr.slot as usize),
        }
        b.seal();
        out.push((addr.block, img));
    }
    // The record itself, cleared.
    let mut cleared: Box<[u8]> = file.block(INTENT_BLOCK)?.into();
    cleared[..INTENT_LEN].fill(0);
    out.push((INTENT_BLOCK, cleared));
    Ok(out)
}

/// Repairs the blocks a bucket split killed mid-write may have left torn
/// (mapped mode: a slot or a zeroing written, the checksum not yet): a slot
/// is kept only when it is marked occupied, decodes and hashes to its
/// fingerprint; a block whose header was zeroed is zeroed whole, and so is
/// a block killed inside its first write before its identity was whole
/// (no kind, a kind its place in the file does not have, an owner other
/// than its primary bucket, no chain position in a secondary bucket):
/// sealing that would make a block the rebuild rejects. Its tag is still
/// where it was moving from. The split is then finished
/// (`State::redo_split`): a tag dropped here from one chain is still in the
/// other. Returns the blocks repaired.
pub fn repair_split(file: &mut MappedFile, geo: &Layout, seed: u64, blocks: u64) -> Result<u64> {
    let fixed = repaired_split_images(file, geo, seed, blocks)?;
    for (b, img) in &fixed {
        file.block_mut(*b)?.copy_from_slice(img);
    }
    Ok(fixed.len() as u64)
}

/// The images [`repair_split`] writes, of the blocks it repairs (a
/// read-only open keeps them in memory).
pub fn repaired_split_images(
    file: &MappedFile,
    geo: &Layout,
    seed: u64,
    blocks: u64,
) -> Result<Vec<(u64, Box<[u8]>)>> {
    let mut fixed = Vec::new();
    for b in INTENT_BLOCK + 1..blocks {
        let raw = file.block(b)?;
        let r = BlockRef(raw);
        let zero_header = r.is_unwritten();
        if r.crc_ok() || (zero_header && raw.iter().all(|&x| x == 0)) {
            continue;
        }
        let mut img: Box<[u8]> = raw.into();
        let mut m = BlockMut(&mut img);
        if zero_header || !identity_fits(&r, geo, b) {
            m.0.fill(0);
        } else {
            let half = geo.half_of(m.as_ref().owner());
            for i in 0..SLOTS_PER_BLOCK {
                if !key_sound(&m.as_ref(), i, seed, half) {
                    m.clear(i);
                }
            }
            m.seal();
        }
        fixed.push((b, img));
    }
    Ok(fixed)
}

/// A salvage's image of block `b`, which fails its checksum: zeros when
/// its header is gone or names an identity its place in the file does not
/// have; otherwise only the slots that are marked occupied, decode, and
/// match both their fingerprints (the key's and the whole tag's), sealed.
pub fn salvaged_image(raw: &[u8], geo: &Layout, seed: u64, b: u64) -> Box<[u8]> {
    let r = BlockRef(raw);
    let mut img: Box<[u8]> = raw.into();
    let mut m = BlockMut(&mut img);
    if r.is_unwritten() || !identity_fits(&r, geo, b) {
        m.0.fill(0);
        return img;
    }
    let half = geo.half_of(r.owner());
    for i in 0..SLOTS_PER_BLOCK {
        let blk = m.as_ref();
        let keep = key_sound(&blk, i, seed, half)
            && <&SlotBytes>::try_from(blk.slot(i)).is_ok_and(|s| tag_fp(seed, s) == blk.tag_fp(i));
        if !keep {
            m.clear(i);
        }
    }
    m.mask_bitmap();
    m.seal();
    img
}

/// The bucket blocks of `file` (up to block `end`) that fail their
/// checksum, with a salvage's image of each (`overlay`'s images, from a
/// journal, are whole and left alone).
pub fn salvage_scan(
    file: &MappedFile,
    overlay: &HashMap<u64, Box<[u8]>>,
    geo: &Layout,
    seed: u64,
    end: u64,
) -> Result<Vec<(u64, Box<[u8]>)>> {
    let mut out = Vec::new();
    let last = end.min(file.len() / BLOCK_SIZE as u64);
    // Positioned reads that skip holes, not page faults: a read error (a
    // bad sector) is an error here, never a SIGBUS through the map.
    let mut reader = crate::pager::SeqReader::new(file);
    for b in INTENT_BLOCK + 1..last {
        if overlay.contains_key(&b) {
            continue;
        }
        let raw = reader.block(b)?;
        let r = BlockRef(raw);
        if r.crc_ok() || r.is_zero() {
            continue;
        }
        out.push((b, salvaged_image(raw, geo, seed, b)));
    }
    Ok(out)
}

/// True when slot `i` of `blk` (a block of `half`) is marked occupied,
/// decodes, and its key hashes to the key fingerprint of the header.
fn key_sound(blk: &BlockRef<'_>, i: usize, seed: u64, half: Half) -> bool {
    blk.occupied(i)
        && decode(blk.slot(i)).is_some_and(|v| {
            key_fp(key_hash(seed, half, v.relationship, v.key_name(half))) == blk.key_fp(i)
        })
}

/// True when block `b`'s header names a whole identity that fits its
/// place: a primary block of bucket `g` says primary, owner `g`, position
/// 0; a secondary block says secondary, an existing owner, a position
/// from 1. A first write killed before its identity was whole fails this
/// (the block was all zeros before it).
fn identity_fits(blk: &BlockRef<'_>, geo: &Layout, b: u64) -> bool {
    match geo.block_at(b) {
        BlockAt::Primary { g, .. } => {
            blk.kind() == KIND_PRIMARY && blk.owner() == g && blk.ordinal() == 0
        }
        BlockAt::Secondary { .. } => {
            blk.kind() == KIND_SECONDARY
                && blk.owner() < geo.primary_buckets()
                && blk.ordinal() != 0
        }
        BlockAt::Meta => true,
    }
}

/// Redoes the recorded operation in the file and clears the intent record.
pub fn recover_intent(file: &mut MappedFile, geo: &Layout, seed: u64) -> Result<()> {
    // The cleared record comes last: the tag's blocks are whole before it goes.
    for (n, img) in intent_redo(file, &HashMap::new(), geo, seed)? {
        file.reserve(n * BLOCK_SIZE as u64, BLOCK_SIZE as u64)?;
        file.block_mut(n)?.copy_from_slice(&img);
    }
    Ok(())
}

/// The tables image written by the last clean close, if it is intact.
pub fn read_tables(file: &MappedFile, sb: &Superblock) -> Option<Tables> {
    let geo = sb.layout;
    let off = geo.file_len(sb.secondary_count);
    if sb.table_offset != off || off.checked_add(sb.table_len)? > file.len() {
        return None;
    }
    let bytes = file
        .bytes()
        .get(off as usize..(off + sb.table_len) as usize)?;
    if crc32fast::hash(bytes) != sb.table_crc {
        return None;
    }
    Tables::decode(bytes, &geo, sb.secondary_count).ok()
}

/// Secondary buckets an unclean file holds: where its blocks end.
pub fn secondary_count(file: &MappedFile, sb: &Superblock, blocks: u64) -> u32 {
    let geo = sb.layout;
    let len = (blocks * BLOCK_SIZE as u64).max(file.len());
    let by_len = geo.secondary_in(len / BLOCK_SIZE as u64);
    // An unclean superblock with a table offset was written by an
    // interrupted close: the blocks end exactly there.
    let closing = sb.table_offset != 0 && sb.table_offset == geo.file_len(sb.secondary_count);
    if sb.clean() || closing {
        return sb.secondary_count.min(by_len);
    }
    // Older or torn closes: a table image is never a bucket (its magic is
    // no block kind), so stop counting there.
    (sb.secondary_count.min(by_len)..by_len)
        .find(|&s| {
            file.block(geo.secondary_start(s))
                .is_ok_and(|b| b.starts_with(TABLE_MAGIC) || b.starts_with(TABLE_MAGIC_1))
        })
        .unwrap_or(by_len)
}
