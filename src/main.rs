//! The `switchboard` binary: parse arguments, set up logging, hand over to the library.

use std::process::ExitCode;

use clap::Parser;
use switchboard::cli::{self, Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The gateway logs at info; one-shot commands only warn, so their output stays clean.
    let default = match cli.command {
        None | Some(Command::Run) => "info",
        _ => "warn",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colours only on a terminal: a log file, journald or `docker logs` gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| RedactedStderr)
        .with_ansi(ansi);
    match cli.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human => builder.init(),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(cli::main(cli))
}

/// Standard error with every registered secret blotted out: the last guard for log lines
/// whose text comes from client crates (a URL, an answer quoted in an error). The
/// formatter hands over one whole event per `write`.
struct RedactedStderr;

impl std::io::Write for RedactedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(switchboard_channel::redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
