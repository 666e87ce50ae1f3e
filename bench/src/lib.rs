//! What the benchmark binaries share.

use std::future::Future;

/// Runs `fut` to completion on a current-thread tokio runtime and returns
/// its value; if the runtime cannot start or `fut` fails, prints the error
/// after `program` on standard error and exits with status 1.
pub fn block_on_or_exit<T>(program: &str, fut: impl Future<Output = weaver::Result<T>>) -> T {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{program}: tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    match rt.block_on(fut) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{program}: {e}");
            std::process::exit(1);
        }
    }
}
