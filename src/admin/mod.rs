//! Operator tools over the engine's API: `check`, `stats` and offline `maintain`.

mod check;
mod maintain;
mod sizing;
mod stats;

pub use check::CheckReport;
pub use maintain::{maintain_temp_path, MaintainOptions, MaintainReport};
#[cfg(feature = "test-hooks")]
pub use maintain::{planned_geometry, set_maintain_keep_max};
pub use stats::{Growth, Stats};
