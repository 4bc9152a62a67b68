//! `workbench`: the service (`serve`, the default) and its admin commands.

mod admin;
mod app;
mod bootstrap;
mod cli;
mod clock;
mod config;
mod files;
mod probe;
mod serve;
mod startup;
mod storage;
mod telemetry;
mod workers;

use crate::cli::{Command, ConfigCommand, EnvCommand, KeyCommand, MigrateCommand, ServeArgs};
use crate::config::Settings;
use crate::startup::StartRefused;

/// mimalloc rather than glibc's allocator: the engine and the CSV hand-over allocate many small
/// short-lived values (JSON, ids, rows), and glibc's `malloc`/`free` took a large share of the
/// server's CPU in profiles.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off for this process. mimalloc's heap is one reserved region, and
/// with huge pages each page the process touches in it takes 2 MiB: an idle process held many
/// times the memory of its values, against the idle-RSS goal (docs/benchmarks.md). Without,
/// `/start` and the feed read are level (A/B measured). The `no_thp` build of mimalloc stops it
/// asking for them; this stops a kernel whose setting is `always` from giving them anyway.
fn without_huge_pages() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    rustix::thread::disable_transparent_huge_pages(true)?;
    Ok(())
}

/// Reads the configuration, starts the log writer, runs the command on actix's runtime, and
/// prints the command's error last. The log writer outlives the runtime, so that what the
/// runtime's threads log while they end is written too.
fn main() -> std::process::ExitCode {
    let huge_pages = without_huge_pages();
    let cli = cli::cli();
    let settings = match Settings::load(cli.config.as_deref(), config::variables()) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("workbench: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    let log_writer = telemetry::init(settings.log_format, &settings.log_filter);
    let runtime = actix_web::rt::System::new();
    let ended = runtime.block_on(run(cli, settings, huge_pages));
    drop(runtime);
    // The log lines still waiting are written before the last word.
    drop(log_writer);
    match ended {
        Ended::Exit(code) => code,
        Ended::Done(Ok(())) => std::process::ExitCode::SUCCESS,
        Ended::Done(Err(e)) => {
            eprintln!("workbench: {e:#}");
            if e.downcast_ref::<StartRefused>().is_some() {
                std::process::ExitCode::from(2)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}

/// How a command ended: with its outcome, or with an exit code of its own (`probe`).
enum Ended {
    Done(anyhow::Result<()>),
    Exit(std::process::ExitCode),
}

async fn run(cli: cli::Cli, settings: Settings, huge_pages: std::io::Result<()>) -> Ended {
    if let Err(e) = huge_pages {
        tracing::warn!(error = %e, "transparent huge pages stay as the kernel sets them");
    }
    warn_unknown_variables(&settings.unknown_variables);
    let result = match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => {
            let mut settings = settings;
            if args.no_migrate {
                settings.migrate = false;
            }
            serve::serve(settings).await
        }
        Command::Config {
            command: ConfigCommand::Check,
        } => {
            println!("{}", settings.effective());
            Ok(())
        }
        Command::Migrate { command: None } => admin::migrate(settings).await,
        Command::Migrate {
            command: Some(MigrateCommand::Status),
        } => admin::migrate_status(settings).await,
        Command::Env {
            command: EnvCommand::Create { name },
        } => admin::create_env(settings, &name).await,
        Command::Env {
            command: EnvCommand::List,
        } => admin::list_envs(settings).await,
        Command::Key {
            command: KeyCommand::Create(args),
        } => admin::create_key(settings, args).await,
        Command::Key {
            command: KeyCommand::List { env },
        } => admin::list_keys(settings, env).await,
        Command::Key {
            command: KeyCommand::Revoke { client_id },
        } => admin::revoke_key(settings, &client_id).await,
        Command::Prune { dry_run } => admin::prune(settings, dry_run).await,
        Command::Probe { path } => return Ended::Exit(admin::run_probe(&settings, &path)),
    };
    Ended::Done(result)
}

/// The `WORKBENCH_*` variables that are not settings, each logged with the setting it most
/// likely meant.
fn warn_unknown_variables(variables: &[String]) {
    for variable in variables {
        match config::closest_setting(variable) {
            Some(meant) => tracing::warn!(
                %variable,
                did_you_mean = %meant,
                "not a setting, ignored: did you mean {meant}? (docs/configuration.md lists the \
                    WORKBENCH_* variables)"
            ),
            None => tracing::warn!(
                %variable,
                "not a setting, ignored (docs/configuration.md lists the WORKBENCH_* variables)"
            ),
        }
    }
}
