//! The `weaver` command: see the crate documentation of `weaver_cli`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weaver: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    let env = |name: &str| std::env::var(name).ok();
    match runtime.block_on(weaver_cli::run(std::env::args_os(), &env, &mut out)) {
        Ok(weaver_cli::Outcome::Done) => ExitCode::SUCCESS,
        Ok(weaver_cli::Outcome::Usage { text, ok: true }) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Ok(weaver_cli::Outcome::Usage { text, ok: false }) => {
            eprint!("{text}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("weaver: {e}");
            ExitCode::FAILURE
        }
    }
}
