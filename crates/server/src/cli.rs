//! The command line of `workbench`: the service (`serve`, the default) and its admin
//! commands, with their arguments, as clap reads them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use domain::{Role, Scope};

use crate::config;

#[derive(Parser)]
#[command(
    name = "workbench",
    version,
    about = "Folders, Action Flows, webhooks and push notification platforms"
)]
pub struct Cli {
    /// A TOML configuration file; WORKBENCH_* environment variables override it.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the HTTP service (the default).
    Serve(ServeArgs),
    /// Apply pending database migrations and print `{"applied": [...], "current": "..."}`.
    Migrate {
        #[command(subcommand)]
        command: Option<MigrateCommand>,
    },
    /// Check the configuration and print it as the process would use it, secrets masked.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Manage environments.
    Env {
        #[command(subcommand)]
        command: EnvCommand,
    },
    /// Manage API keys.
    Key {
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Prune history past its retention now (contract §14): one pass, and print the rows
    /// removed per kind as JSON. A pass that another process holds the lease of waits for
    /// nothing: it prints `{"pruned": null}`.
    Prune {
        /// Count what would be removed, removing nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Ask the running service for a probe path; exit 0 on 200 (a container health check).
    ///
    /// The address is WORKBENCH_LISTEN's, on loopback when it is 0.0.0.0 or [::]. Prints
    /// {"url", "status"}; exits 1 on any other answer, or none within 3 s. The image has no
    /// shell or curl, so a container runtime's health check runs this.
    Probe {
        /// The path to ask for: /readyz (ready for traffic) or /healthz (the process runs).
        #[arg(default_value = "/readyz")]
        path: String,
    },
}

#[derive(Args, Default)]
pub struct ServeArgs {
    /// Never apply migrations: with pending ones, exit 2 naming them (as
    /// WORKBENCH_MIGRATE=false does). Run `workbench migrate` first.
    #[arg(long)]
    pub no_migrate: bool,
}

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Validate the settings (exit 2 naming a bad one) and print them by TOML key.
    Check,
}

#[derive(Subcommand)]
pub enum MigrateCommand {
    /// Print the applied and pending migrations, changing nothing.
    Status,
}

#[derive(Subcommand)]
pub enum EnvCommand {
    /// Create an environment (and the `default` organisation when there is none).
    Create {
        #[arg(long)]
        name: String,
    },
    /// List the environments of the `default` organisation, oldest first.
    List,
}

#[derive(Subcommand)]
pub enum KeyCommand {
    /// Create an API key and print its secret (shown once).
    Create(KeyArgs),
    /// List the keys (never a secret), revoked ones included, by client id.
    List {
        /// Only the keys that may use this environment.
        #[arg(long = "env", value_name = "ENV_ID")]
        env: Option<String>,
    },
    /// Revoke a key and its access tokens.
    Revoke {
        /// The key's client id (`key_...`).
        client_id: String,
    },
}

#[derive(Args)]
pub struct KeyArgs {
    /// An environment the key may use (repeatable).
    #[arg(
        long = "env",
        value_name = "ENV_ID",
        required_unless_present = "all_envs"
    )]
    pub envs: Vec<String>,
    /// Grant every environment of the organisation, present and future.
    #[arg(long, conflicts_with = "envs")]
    pub all_envs: bool,
    /// A legacy role: events, workbench or auth (repeatable).
    #[arg(long = "role", value_parser = parse_role)]
    pub roles: Vec<Role>,
    /// A fine-grained scope, e.g. workbench_folders:read (repeatable).
    #[arg(long = "scope", value_parser = parse_scope)]
    pub scopes: Vec<Scope>,
    /// A name to recognise the key by.
    #[arg(long)]
    pub name: Option<String>,
}

fn parse_role(s: &str) -> Result<Role, String> {
    s.parse()
}

fn parse_scope(s: &str) -> Result<Scope, String> {
    s.parse::<Scope>().map_err(|e| {
        let known: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
        format!("{e} (known: {})", known.join(", "))
    })
}

/// The command line, with every setting listed under `serve --help` (contract §17): its
/// variable, default and meaning, read from docs/configuration.md, so the two cannot differ.
pub fn cli() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let command = Cli::command().mut_subcommand("serve", |serve| {
        serve.after_long_help(config::settings_help())
    });
    let matches = command.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}
