//! Operator tools over the engine's API: `check`, `stats` and offline `maintain`.

mod check;
mod maintain;
mod sizing;
mod stats;

pub use check::CheckReport;
pub use maintain::{maintain_temp_path, planned_geometry, MaintainOptions, MaintainReport};
pub use stats::{Growth, Stats};
