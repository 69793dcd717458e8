//! Shared test helpers for crash, recovery and full-disk tests.
