//! Shared test helpers for running the `tagstore` command line.
