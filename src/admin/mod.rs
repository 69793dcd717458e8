//! Operator tools over the engine's API: `check`, `stats` and offline `maintain`.

mod check;
mod maintain;
mod sizing;
mod stats;

pub use check::CheckReport;
#[cfg(feature = "test-hooks")]
pub use maintain::planned_geometry;
pub use maintain::{maintain_temp_path, MaintainOptions, MaintainReport};
pub use stats::{Growth, Stats};
