//! Compile-time behaviour of `#[derive(GraphState)]` and `graph!`: one file
//! and one committed `.stderr` per error class, plus `pass/` cases.
//!
//! The cases live in this crate, not in `weaver-tests`, because trybuild
//! builds them with the dev-dependencies of the crate that runs them: here
//! that is weaver without features, serde and schemars, not the SQL and
//! MongoDB drivers.
//!
//! The pass and the compile-fail cases are two tests: trybuild checks a
//! batch of compile-fail cases in one `cargo check` only when no pass case is
//! in it (otherwise it runs one cargo per case).
//!
//! Re-bless after a compiler upgrade with `TRYBUILD=overwrite cargo test -p
//! weaver-macros --test ui`, and review the diff in one commit.

#[test]
fn compile_fail() {
    trybuild::TestCases::new().compile_fail("tests/ui/fail/*/*.rs");
}

#[test]
fn pass() {
    trybuild::TestCases::new().pass("tests/ui/pass/*.rs");
}
