//! Helpers shared by the integration tests (each test file is its own
//! crate and includes this module with `mod common;`, using what it needs).
#![allow(dead_code)]

pub mod cli;
pub mod cluster;
pub mod crash;
pub mod edge;
pub mod prop;
pub mod store;
