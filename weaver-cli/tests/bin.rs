//! The `weaver` binary: exit codes and where it prints (no database needed).

use std::process::Command;

fn weaver(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weaver"))
        .args(args)
        .env_remove("WEAVER_DB")
        .output()
        .unwrap()
}

#[test]
fn help_succeeds_on_stdout() {
    let out = weaver(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for command in ["threads", "history", "show", "diff", "prune", "migrate"] {
        assert!(text.contains(command), "{command} missing from\n{text}");
    }
}

#[test]
fn a_usage_error_exits_2_on_stderr() {
    let out = weaver(&["--db", "sqlite://x.db", "bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8(out.stderr).unwrap().contains("bogus"));
    // `--db` is required (or WEAVER_DB).
    assert_eq!(weaver(&["threads"]).status.code(), Some(2));
}

#[test]
fn a_failure_exits_1_naming_the_error() {
    let dir = std::env::temp_dir().join(format!("weaver-cli-{}", std::process::id()));
    let url = format!("sqlite://{}/none.db", dir.display());
    let out = weaver(&["--db", &url, "threads"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("weaver: storage failure"), "{err}");
    assert!(!dir.exists(), "nothing was created");
}

#[test]
fn migrate_down_takes_its_version_after_the_adapter() {
    // A missing file: the command line parses (not 2), the database fails (1).
    let dir = std::env::temp_dir().join(format!("weaver-cli-down-{}", std::process::id()));
    let url = format!("sqlite://{}/none.db", dir.display());
    for args in [
        &["migrate", "down", "--adapter", "store", "1"][..],
        &["migrate", "down", "1", "--adapter", "store"][..],
        &["migrate", "down", "--adapter", "checkpoint,store", "1"][..],
        &[
            "migrate",
            "down",
            "--adapter",
            "store",
            "--adapter",
            "checkpoint",
            "1",
        ][..],
    ] {
        let args: Vec<&str> = ["--db", url.as_str()].iter().chain(args).copied().collect();
        let out = weaver(&args);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with("weaver: storage failure"),
            "{args:?}: {err}"
        );
    }
    let out = weaver(&["migrate", "down", "--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("migrate down --adapter store 1"), "{help}");
}

/// `/dev/full` as standard output: every write fails (ENOSPC).
#[cfg(target_os = "linux")]
fn to_full_disk(args: &[&str]) -> std::process::Output {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    Command::new(env!("CARGO_BIN_EXE_weaver"))
        .args(args)
        .env_remove("WEAVER_DB")
        .stdout(full)
        .output()
        .unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn output_that_cannot_be_written_fails_with_1_not_a_panic() {
    for args in [&["--help"][..], &["--version"][..]] {
        let out = to_full_disk(args);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.starts_with("weaver: cannot write the output"), "{err}");
    }
}

#[test]
fn help_never_prints_the_password_of_weaver_db() {
    for args in [&["--help"][..], &["migrate", "--help"][..], &["-h"][..]] {
        let out = Command::new(env!("CARGO_BIN_EXE_weaver"))
            .args(args)
            .env("WEAVER_DB", "postgres://app:s3cr3t-pw@db.internal/prod")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(!text.contains("s3cr3t-pw"), "{args:?}: {text}");
        if args[0] != "migrate" {
            assert!(text.contains("WEAVER_DB"), "{args:?}: {text}");
        }
    }
}
