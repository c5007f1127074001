//! The command line (DESIGN §9). State-changing commands go through the running gateway's
//! admin API when there is one, and open the store directly when there is none.

/// `println!` for command output: a reader that went away (`switchboard cron list | head`)
/// ends the command quietly with 141, as SIGPIPE would, instead of a panic. Control
/// characters other than new lines and tabs are shown as escapes ([`show::text`]); a field
/// from elsewhere (a name, a key) goes through [`show::field`] too, so it stays on its line.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!($($arg)*);
        if let Err(e) = writeln!(std::io::stdout(), "{}", $crate::cli::show::text(&line)) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(141);
            }
        }
    }};
}

mod admin_client;
mod chat;
mod commands;
mod doctor;
mod show;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{self, ConfigError, Loaded};

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "switchboard",
    version,
    about = "One AI assistant across Telegram, Discord, Slack and HTTP."
)]
pub struct Cli {
    /// Config file (default: $SWITCHBOARD_CONFIG, else ./config.toml, else built-in defaults).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the gateway (the default).
    Run,
    /// Talk to the agent from the terminal (key cli:local); without MESSAGE, a prompt.
    Chat { message: Option<String> },
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Check config, data dir, workspace, LLM reachability and channel credentials.
    Doctor,
    /// Approve or revoke senders who asked for access.
    Pairing {
        #[command(subcommand)]
        action: PairingAction,
    },
    /// Conversation sessions.
    Sessions {
        #[command(subcommand)]
        action: SessionsAction,
    },
    /// Scheduled jobs and reminders.
    Cron {
        #[command(subcommand)]
        action: CronAction,
    },
    /// Bundled and workspace skills.
    Skills {
        #[command(subcommand)]
        action: SkillsAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum CronAction {
    /// Every job (or one chat's) with its next run.
    List {
        /// Only this chat's jobs.
        #[arg(long)]
        key: Option<String>,
    },
    /// Add a job: exactly one of --at, --every, --cron.
    Add {
        /// The chat the job belongs to (`telegram:123456`).
        #[arg(long)]
        key: String,
        /// Once: RFC 3339, `in 10m`, `2026-11-22 09:00`, `tomorrow 09:00`.
        #[arg(long, group = "when")]
        at: Option<String>,
        /// Repeatedly: `30s`, `1h`.
        #[arg(long, group = "when")]
        every: Option<String>,
        /// Crontab: `0 9 * * MON-FRI` (5 fields) or 6 with seconds.
        #[arg(long, group = "when")]
        cron: Option<String>,
        /// IANA timezone for --at/--cron (default: gateway.timezone); an --every job
        /// repeats at its interval whatever the timezone, so it takes none.
        #[arg(long, conflicts_with = "every")]
        tz: Option<String>,
        /// What the job is about; the agent turns it into the message.
        #[arg(long)]
        message: String,
    },
    /// Remove a job.
    Remove { id: String },
    /// Run a job now (with no gateway running: queued for its start).
    Run { id: String },
}

#[derive(Debug, Subcommand)]
pub enum SkillsAction {
    /// Every skill with its status: available, or what it is missing.
    List,
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Validate the config; exit 0, or non-zero with the error.
    Check,
}

#[derive(Debug, Subcommand)]
pub enum PairingAction {
    /// Pending codes and approved senders.
    List,
    /// Approve a pending code: `pairing approve telegram ABCD2345`.
    Approve { channel: String, code: String },
    /// Revoke an approved sender by id or username.
    Revoke { channel: String, user: String },
}

#[derive(Debug, Subcommand)]
pub enum SessionsAction {
    /// Every stored session with its size.
    List,
    /// One session's messages.
    Show { key: String },
    /// Forget a session's history.
    Reset { key: String },
}

/// Which config file to read: `--config`, `$SWITCHBOARD_CONFIG`, or `./config.toml`.
pub fn config_path(cli: &Cli) -> Option<PathBuf> {
    cli.config
        .clone()
        .or_else(|| {
            // Set but empty counts as unset, as for the other variables.
            std::env::var_os("SWITCHBOARD_CONFIG")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| {
            let p = PathBuf::from("config.toml");
            p.exists().then_some(p)
        })
}

/// Load the config the CLI points at (built-in defaults when there is no file).
pub fn load_config(cli: &Cli) -> Result<Loaded, ConfigError> {
    match config_path(cli) {
        Some(p) => config::load(&p),
        None => config::load_str("", &std::env::current_dir().unwrap_or_default()),
    }
}

/// Run the parsed command line; returns the process exit code.
pub async fn main(cli: Cli) -> ExitCode {
    let loaded = match load_config(&cli) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // `config check` and `doctor` list them in their own output, once.
    if !matches!(cli.command, Some(Command::Config { .. } | Command::Doctor)) {
        for w in &loaded.warnings {
            tracing::warn!("{w}");
        }
    }
    let command = cli.command.unwrap_or(Command::Run);
    name_store_holder(&command);
    let result = match command {
        Command::Run => commands::run(&loaded).await,
        Command::Chat { message } => chat::chat(&loaded, message).await,
        Command::Config {
            action: ConfigAction::Check,
        } => commands::config_check(&loaded),
        Command::Doctor => doctor::doctor(&loaded).await,
        Command::Pairing { action } => commands::pairing(&loaded, action).await,
        Command::Sessions { action } => commands::sessions(&loaded, action).await,
        Command::Cron { action } => commands::cron(&loaded, action).await,
        Command::Skills {
            action: SkillsAction::List,
        } => commands::skills_list(&loaded),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // As a shell reports a command its signal ended: 130 for Ctrl-C.
        Err(e) => match e.downcast_ref::<chat::Interrupted>() {
            Some(chat::Interrupted(signal)) => {
                ExitCode::from(u8::try_from(128 + signal).unwrap_or(130))
            }
            None => {
                eprintln!("error: {}", show::text(&format!("{e:#}")));
                ExitCode::FAILURE
            }
        },
    }
}

/// What this process says it is, should another one find the store it holds: a gateway,
/// or a command, with what to do about it (see `store::holder`).
fn name_store_holder(command: &Command) {
    let (role, hint) = match command {
        Command::Run => (crate::store::holder::GATEWAY, ""),
        Command::Chat { .. } => (
            "switchboard chat",
            "close it, or run the gateway and use chat through it",
        ),
        Command::Doctor => ("switchboard doctor", "try again when it is done"),
        Command::Pairing { .. } => ("switchboard pairing", "try again when it is done"),
        Command::Sessions { .. } => ("switchboard sessions", "try again when it is done"),
        Command::Cron { .. } => ("switchboard cron", "try again when it is done"),
        Command::Config { .. } | Command::Skills { .. } => return,
    };
    crate::store::holder::set_role(role, hint);
}
