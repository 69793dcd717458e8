//! Shared test helpers for the edge-case tests (paths, odd files, locks, read-only views).
