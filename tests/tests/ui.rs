//! Compile-time behaviour of `#[derive(GraphState)]` and `graph!`: one file
//! and one committed `.stderr` per error class, plus `pass/` cases.
//!
//! Re-bless after a compiler upgrade with `TRYBUILD=overwrite cargo test -p
//! weaver-tests --test ui`, and review the diff in one commit.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*/*.rs");
}
