//! Tags longer than a slot, at the engine's edge: long strings go to the
//! strings file before a slot names them, and every string a user reads
//! comes back whole (DESIGN.md §3.7).

use super::state::State;
use crate::error::{Error, Result};
use crate::format::long::{forms, is_ref, marked, referenced, REF_LEN};
use crate::format::tag::{encode, SlotView};
use crate::format::{Half, SlotBytes, Tag, FLAG_STRINGS};
use crate::pager::SyncPoint;

impl State {
    /// Keeps the long strings of `tag` (stored as `stored`, its shrunk
    /// form; nothing when `shrink` lent the tag itself back) in the strings
    /// file before a slot names them. They are made durable by the next
    /// commit point ([`State::sync_strings`]), before the journal or the
    /// store file that could make the slot durable: one fdatasync per
    /// commit, not one per string.
    pub(super) fn hold_strings(&mut self, tag: &Tag, stored: &Tag) -> Result<()> {
        if std::ptr::eq(tag, stored) {
            // A tag that fits a slot (`shrink` lent it back): nothing to keep.
            return Ok(());
        }
        self.can_hold_strings()?;
        for s in referenced(tag, stored) {
            self.strings.intern(s)?;
        }
        self.mark_strings()
    }

    /// Makes every string appended so far durable: called before each
    /// commit, stage or flush, so that no slot is durable before the
    /// string it names.
    ///
    /// A failure poisons the handle: the slots naming the strings are
    /// pending, and after a failed fdatasync the kernel may report the
    /// pages clean, so a retry could commit them over lost strings.
    pub(crate) fn sync_strings(&mut self) -> Result<()> {
        match self.strings.sync() {
            Ok(true) => self.pager.sync_point(SyncPoint::StringsSynced),
            Ok(false) => {}
            Err(e) => {
                self.pager.poison();
                return Err(e);
            }
        }
        Ok(())
    }

    /// True when `s` is the reference of a string this store holds: its
    /// bytes in a slot stand for that string, never for `s` itself (a
    /// string of a reference's shape is stored by its own reference).
    pub(super) fn is_held_ref(&self, s: &str) -> bool {
        is_ref(s.as_bytes()) && self.strings.get(s.as_bytes()).is_some()
    }

    /// The slot a build before format 3 gave `tag`, where it differs from
    /// today's: a tag with a string starting with U+FFFF that fits a slot
    /// as it is (such a string is now stored by reference). None also when
    /// a string of the tag is the reference of a string the store holds:
    /// those bytes in a slot are another tag (a review, 2026-11-29: a
    /// DELETE of the tag made of another tag's references deleted that
    /// other tag).
    pub(super) fn legacy_slot_of(&self, tag: &Tag) -> Option<SlotBytes> {
        let strings = [&tag.object, &tag.relationship, &tag.subject];
        if !marked(tag) || strings.iter().any(|s| self.is_held_ref(s)) {
            return None;
        }
        encode(tag).ok()
    }

    /// Readies an INSERT of `tag` (stored as `stored`) into `half`: false
    /// when the tag is already stored as a build before format 3 stored
    /// it (nothing to insert), else true with its long strings held.
    pub(super) fn admits(&mut self, tag: &Tag, stored: &Tag, half: Half) -> Result<bool> {
        if self.holds_legacy(self.legacy_slot_of(tag).as_ref(), half)? {
            return Ok(false);
        }
        self.hold_strings(tag, stored)?;
        Ok(true)
    }

    /// Refuses a tag longer than a slot in a format-1 store (its
    /// superblock has no room for the strings flag): `maintain` upgrades it.
    fn can_hold_strings(&self) -> Result<()> {
        if self.sb.layout.version == 1 {
            return Err(Error::InvalidArgument(
                "a format-1 store holds tags of at most 156 bytes of strings; `tagstore maintain` upgrades it to a format that takes longer ones".into(),
            ));
        }
        Ok(())
    }

    /// True when the tag a stored `slot` would be is already stored as a
    /// build before format 3 stored it (`legacy`, a string starting with
    /// U+FFFF kept as it is), in `half`.
    pub(super) fn holds_legacy(&self, legacy: Option<&SlotBytes>, half: Half) -> Result<bool> {
        match legacy {
            Some(slot) => self.contains(slot, half),
            None => Ok(false),
        }
    }

    /// Sets the superblock's strings flag (format 3) once the store holds
    /// a long string, so that older builds refuse the file.
    pub(super) fn mark_strings(&mut self) -> Result<()> {
        if self.sb.flags & FLAG_STRINGS != 0 || self.strings.is_empty() {
            return Ok(());
        }
        // The strings first (once in a store's life): a flag that reached
        // the disk before them would, after a power cut in mode `none`,
        // name a strings file that is not there.
        self.sync_strings()?;
        let mut sb = self.sb.clone();
        sb.flags |= FLAG_STRINGS;
        self.pager.write_superblock(&sb)?;
        self.sb = sb;
        Ok(())
    }

    /// A stored string as the user wrote it.
    #[inline]
    pub(super) fn expand<'a>(&'a self, s: &'a str) -> Result<&'a str> {
        Ok(self.strings.whole(s.as_bytes())?.unwrap_or(s))
    }

    /// A stored slot's tag as the user wrote it.
    pub(super) fn expand_view(&self, v: &SlotView<'_>) -> Result<Tag> {
        Ok(Tag::new(
            self.expand(v.object)?,
            self.expand(v.relationship)?,
            self.expand(v.subject)?,
        ))
    }

    /// The stored forms of the key (`relationship`, `name`) that tags may
    /// hold besides the key as it is, when long strings make them
    /// possible: empty in the common case (no allocation, and no hashing
    /// while the store holds no long string).
    pub(super) fn other_key_forms(&self, relationship: &str, name: &str) -> Vec<(String, String)> {
        // The strings file lost or damaged while the store says it held
        // some: any reference may be stored, so every form is searched
        // (the key's tags are found; a result naming a lost string fails).
        let unsure = self.strings.unsure();
        if self.strings.is_empty() && !unsure {
            // No tag holds a reference (the key is not even read).
            return Vec::new();
        }
        let (ri, rr) = forms(relationship);
        let (ni, nr) = forms(name);
        // A reference form is searched when the file holds its string, or
        // when it is the string's only form (longer than a slot: one
        // search, as for any key, and a string lost from the file's tail
        // does not hide the key's tags).
        let held = |r: Option<[u8; REF_LEN]>, only: bool| {
            r.filter(|r| unsure || only || self.strings.get(r).is_some())
                .map(|r| String::from_utf8_lossy(&r).into_owned())
        };
        let (rr, nr) = (held(rr, ri.is_none()), held(nr, ni.is_none()));
        if rr.is_none() && nr.is_none() {
            return Vec::new();
        }
        let rels: Vec<(String, bool)> = ri
            .map(|r| (r.to_owned(), true))
            .into_iter()
            .chain(rr.map(|r| (r, false)))
            .collect();
        let names: Vec<(String, bool)> = ni
            .map(|n| (n.to_owned(), true))
            .into_iter()
            .chain(nr.map(|n| (n, false)))
            .collect();
        rels.iter()
            .flat_map(|r| names.iter().map(move |n| (r, n)))
            .filter(|((_, ri), (_, ni))| !(*ri && *ni))
            .map(|((r, _), (n, _))| (r.clone(), n.clone()))
            .collect()
    }
}
