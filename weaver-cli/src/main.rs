//! The `weaver` command: see the crate documentation of `weaver_cli`.

use std::io::Write;
use std::process::ExitCode;

/// Writes `text` to standard error; a closed or full standard error is no
/// reason to panic (there is nowhere left to say anything).
fn to_stderr(text: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().write_fmt(text);
}

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            to_stderr(format_args!(
                "weaver: cannot start the async runtime: {e}\n"
            ));
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    let env = |name: &str| std::env::var(name).ok();
    let outcome = runtime.block_on(weaver_cli::run(std::env::args_os(), &env, &mut out));
    // What was printed must reach standard output (a full disk, a closed
    // pipe): a failure to write it is a failure of the command, never a panic.
    let printed = |out: &mut std::io::StdoutLock<'_>, text: &str| {
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    };
    let failed_output = |e: std::io::Error| {
        to_stderr(format_args!("weaver: cannot write the output: {e}\n"));
        ExitCode::FAILURE
    };
    match outcome {
        Ok(weaver_cli::Outcome::Done) => match printed(&mut out, "") {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => failed_output(e),
        },
        Ok(weaver_cli::Outcome::Usage { text, ok: true }) => match printed(&mut out, &text) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => failed_output(e),
        },
        Ok(weaver_cli::Outcome::Usage { text, ok: false }) => {
            to_stderr(format_args!("{text}"));
            ExitCode::from(2)
        }
        Err(e) => {
            to_stderr(format_args!("weaver: {}\n", weaver_cli::error_text(&e)));
            ExitCode::FAILURE
        }
    }
}
