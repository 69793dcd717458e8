//! Property-test runners: `TAGSTORE_PROPTEST_CASES` cases when set (a
//! longer soak), else the test's own default; no regression files.

use proptest::test_runner::{Config, TestRunner};

/// A runner of `TAGSTORE_PROPTEST_CASES` cases, or `default_cases`.
pub fn runner(default_cases: u32) -> TestRunner {
    let cases = std::env::var("TAGSTORE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}
