//! Increments: the batches of count changes a writer ships, and what a merge reports.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Identifies an increment: the writer that produced it and its sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IncrementId {
    /// Random id of the producing store handle (fresh at every open).
    pub writer: u64,
    /// Sequence number within that writer, from 0.
    pub seq: u64,
}

/// A batch of count changes: `(relationship, subject) -> delta` since the last one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Increment {
    /// Unique id; a collector merges each id once.
    pub id: IncrementId,
    /// Count changes, sorted by (relationship, subject), no zero deltas.
    pub deltas: Vec<(String, String, i64)>,
}

impl Increment {
    /// Serialises the increment for shipping to a collector (bincode 2).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        bincode::serde::encode_to_vec(self, bincode::config::standard())
            .map_err(|e| Error::InvalidArgument(format!("encoding increment: {e}")))
    }

    /// Parses bytes made by [`Increment::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<Increment> {
        let (inc, used): (Increment, usize) =
            bincode::serde::decode_from_slice(b, bincode::config::standard())
                .map_err(|e| Error::InvalidArgument(format!("not an increment: {e}")))?;
        if used != b.len() {
            return Err(Error::InvalidArgument(format!(
                "increment has {} trailing bytes",
                b.len() - used
            )));
        }
        Ok(inc)
    }
}

/// One subject of a tag cloud.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CloudEntry {
    /// The subject.
    pub subject: String,
    /// Objects carrying it under the relationship.
    pub count: u64,
    /// Weight in 1.0..=10.0, log-scaled between the least and most used shown (for font sizes).
    pub weight: f64,
}

/// What a merge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MergeOutcome {
    /// Counts version after the merge (unchanged if nothing merged).
    pub version: u64,
    /// Increments merged.
    pub merged: usize,
    /// Increments discarded as duplicates or already merged.
    pub discarded: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increment_bytes_roundtrip_and_reject() {
        let inc = Increment {
            id: IncrementId { writer: 3, seq: 9 },
            deltas: vec![("isa".into(), "sunset".into(), 2)],
        };
        let b = inc.to_bytes().expect("encode");
        assert_eq!(Increment::from_bytes(&b).expect("decode"), inc);
        assert!(Increment::from_bytes(&b[..b.len() - 1]).is_err());
        let mut long = b.clone();
        long.push(0);
        assert!(Increment::from_bytes(&long).is_err());
    }
}
