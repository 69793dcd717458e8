//! The intent record (block 1): the INSERT or DELETE in flight, redone by recovery.

use super::bytes::{rd32, rd64};
use super::tag::{SlotBytes, SLOT_SIZE};

/// Block holding the in-flight operation record.
pub const INTENT_BLOCK: u64 = 1;

/// Kind of operation recorded in the intent block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntentOp {
    /// A tag being inserted at the recorded slots.
    Insert = 1,
    /// A tag being deleted from the recorded slots.
    Delete = 2,
    /// A bucket split: `object_identity` = (bucket split, level before it).
    Split = 3,
    /// A bulk INSERT or DELETE writing a batch one half at a time (no slot
    /// recorded): recovery gives every tag stored in one half its other half.
    Bulk = 4,
}

/// Slot address: block number and slot index; block `u64::MAX` means none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotAddr {
    /// Absolute block number.
    pub block: u64,
    /// Slot index within the block.
    pub slot: u32,
}

impl SlotAddr {
    /// The "no slot" address.
    pub const NONE: SlotAddr = SlotAddr {
        block: u64::MAX,
        slot: 0,
    };
}

/// The in-flight operation record kept in block 1.
#[derive(Clone, Debug)]
pub struct Intent {
    /// Operation.
    pub op: IntentOp,
    /// Slot in the object half.
    pub object_slot: SlotAddr,
    /// Slot in the subject half.
    pub subject_slot: SlotAddr,
    /// Owner and chain position of the object-half block (for a first write).
    pub object_identity: (u32, u32),
    /// Owner and chain position of the subject-half block (for a first write).
    pub subject_identity: (u32, u32),
    /// Encoded tag.
    pub tag: SlotBytes,
}

const INTENT_MAGIC: &[u8; 4] = b"INTN";
/// Bytes of the intent record covered by its CRC.
pub const INTENT_LEN: usize = 56 + SLOT_SIZE;

impl Intent {
    /// Serialises into the first `INTENT_LEN` bytes of block 1.
    pub fn encode(&self) -> [u8; INTENT_LEN] {
        let mut b = [0u8; INTENT_LEN];
        b[4..8].copy_from_slice(INTENT_MAGIC);
        b[8] = self.op as u8;
        b[16..24].copy_from_slice(&self.object_slot.block.to_le_bytes());
        b[24..28].copy_from_slice(&self.object_slot.slot.to_le_bytes());
        b[28..32].copy_from_slice(&self.subject_slot.slot.to_le_bytes());
        b[32..40].copy_from_slice(&self.subject_slot.block.to_le_bytes());
        b[40..44].copy_from_slice(&self.object_identity.0.to_le_bytes());
        b[44..48].copy_from_slice(&self.object_identity.1.to_le_bytes());
        b[48..52].copy_from_slice(&self.subject_identity.0.to_le_bytes());
        b[52..56].copy_from_slice(&self.subject_identity.1.to_le_bytes());
        b[56..56 + SLOT_SIZE].copy_from_slice(&self.tag);
        let c = crc32fast::hash(&b[4..]);
        b[0..4].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Parses block 1; `None` if no valid operation is recorded.
    pub fn decode(b: &[u8]) -> Option<Intent> {
        if b.len() < INTENT_LEN || &b[4..8] != INTENT_MAGIC {
            return None;
        }
        if crc32fast::hash(&b[4..INTENT_LEN]) != rd32(b, 0) {
            return None;
        }
        let op = match b[8] {
            1 => IntentOp::Insert,
            2 => IntentOp::Delete,
            3 => IntentOp::Split,
            4 => IntentOp::Bulk,
            _ => return None,
        };
        let mut tag = [0u8; SLOT_SIZE];
        tag.copy_from_slice(&b[56..56 + SLOT_SIZE]);
        Some(Intent {
            op,
            object_slot: SlotAddr {
                block: rd64(b, 16),
                slot: rd32(b, 24),
            },
            subject_slot: SlotAddr {
                block: rd64(b, 32),
                slot: rd32(b, 28),
            },
            object_identity: (rd32(b, 40), rd32(b, 44)),
            subject_identity: (rd32(b, 48), rd32(b, 52)),
            tag,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intent_roundtrip() {
        let i = Intent {
            op: IntentOp::Delete,
            object_slot: SlotAddr { block: 9, slot: 3 },
            subject_slot: SlotAddr::NONE,
            object_identity: (4, 0),
            subject_identity: (0, 0),
            tag: [7u8; SLOT_SIZE],
        };
        let mut img = i.encode();
        let back = Intent::decode(&img).expect("valid");
        assert_eq!(back.op, IntentOp::Delete);
        assert_eq!(back.object_slot, i.object_slot);
        assert_eq!(back.subject_slot, SlotAddr::NONE);
        img[50] ^= 1;
        assert!(Intent::decode(&img).is_none());
    }
}
