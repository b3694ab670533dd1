//! `hopping-gateway`: parses flags, loads and validates the config, sets up logging, and calls
//! `internal::server::run` with SIGTERM/SIGINT as the shutdown signal (SPEC section 2), after
//! resolving its own path for upgrades and, when it is the new process of one, where its handover
//! channel is (SPEC section 13).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use internal::config::{self, Config, StoreKind};
use internal::logging::{self, LogFormat};
use internal::server::{self, Options};
use internal::upgrade::receive::Source;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnOff {
    On,
    Off,
}

/// A gateway whose connections hop to a healthy node when theirs dies, drains or is redeployed.
#[derive(Debug, Parser)]
#[command(name = "hopping-gateway", version)]
struct Cli {
    /// TOML config file (SPEC section 3); without it the Go-compatible defaults apply.
    #[arg(long, value_name = "FILE", env = "HOPGW_CONFIG")]
    config: Option<PathBuf>,
    /// Validate FILE, print every error with line and column, and exit (0 valid, 2 invalid);
    /// `--config` (or `HOPGW_CONFIG`) is ignored then.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,
    /// Data-plane listen address (overrides [server] listen).
    #[arg(long, value_name = "ADDR", env = "HOPGW_LISTEN")]
    listen: Option<SocketAddr>,
    /// Admin listen address (overrides [server] admin_listen).
    #[arg(long, value_name = "ADDR", env = "HOPGW_ADMIN_LISTEN")]
    admin_listen: Option<SocketAddr>,
    /// Replace the first cluster's nodes; repeatable.
    #[arg(long = "node", value_name = "ID=HOST:PORT")]
    nodes: Vec<String>,
    /// Use the Redis affinity store at URL.
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: Format,
    /// Access log on or off (overrides [server] access_log).
    #[arg(long, value_enum)]
    access_log: Option<OnOff>,
    /// Data-plane workers, each a thread with a single-threaded runtime and its own listener
    /// socket (`SO_REUSEPORT`) and node connection pools (default: the number of cores; 0 = 1).
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// Take over from a running gateway through its `[server] upgrade_socket` (SPEC section 13):
    /// for supervisors that start the new process of an upgrade themselves.
    #[arg(long, value_name = "SOCKET")]
    upgrade_from: Option<PathBuf>,
    /// The handover channel's descriptor, set by the old process of an upgrade (only `0`, standard
    /// input, is accepted).
    #[arg(long, hide = true, env = internal::upgrade::child::UPGRADE_FD_ENV)]
    upgrade_fd: Option<u32>,
    /// A tool instead of the gateway.
    #[command(subcommand)]
    tool: Option<Tool>,
}

#[derive(Debug, Subcommand)]
enum Tool {
    /// Make a throw-away CA, a server certificate and a client certificate (ECDSA P-256) for
    /// trying TLS: ca.pem, ca.key, gateway.pem, gateway.key, client.pem, client.key in --out.
    GenCert {
        /// Directory to write into (created if missing).
        #[arg(long, value_name = "DIR", default_value = "certs")]
        out: PathBuf,
        /// Name the server certificate is for (DNS name or IP); repeatable.
        #[arg(long = "name", value_name = "NAME", default_values_t = ["localhost".to_string(), "127.0.0.1".to_string()])]
        names: Vec<String>,
    },
}

fn main() -> ExitCode {
    // Before anything can change the working directory: the path upgrades start.
    let exe = internal::upgrade::child::SelfExe::at_start();
    let cli = Cli::parse();
    if let Some(Tool::GenCert { out, names }) = &cli.tool {
        return gen_cert(out, names);
    }
    if let Some(path) = &cli.check_config {
        // Certificate files are part of the config (SPEC section 10).
        let checked = config::load_path(path).and_then(|c| match &c.server.tls {
            Some(t) => internal::tls::certs::check(t),
            None => Ok(()),
        });
        return match checked {
            Ok(()) => {
                println!("{}: ok", path.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        };
    }
    logging::init(match cli.log_format {
        Format::Text => LogFormat::Text,
        Format::Json => LogFormat::Json,
    });
    let mut cfg = match &cli.config {
        Some(path) => match config::load_path(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        },
        None => Config::go_defaults(),
    };
    let overrides = overrides(&cli);
    let upgrade_from = match apply_checked(&cli, &mut cfg).and_then(|()| upgrade_source(&cli)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // Every worker is a current-thread runtime (internal::server's workers module): this thread's
    // is worker 0, which also runs the admin listener and the background tasks.
    let workers = cli.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let opts = Options {
        config: cfg,
        file: cli.config.clone(),
        overrides,
        workers,
        exe,
        upgrade_from,
    };
    match rt.block_on(server::run(opts, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hopping-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where this process's handover channel is when it is the new process of an upgrade (SPEC
/// section 13): `--upgrade-from`, or standard input as the old process says by `HOPGW_UPGRADE_FD`.
fn upgrade_source(cli: &Cli) -> Result<Option<Source>, String> {
    match (&cli.upgrade_from, cli.upgrade_fd) {
        (Some(path), _) => Ok(Some(Source::Socket(path.clone()))),
        (None, Some(0)) => Ok(Some(Source::Stdin)),
        (None, Some(fd)) => Err(format!(
            "{}: the handover channel must be descriptor 0, not {fd}",
            internal::upgrade::child::UPGRADE_FD_ENV
        )),
        (None, None) => Ok(None),
    }
}

/// `gen-cert`: writes a throw-away certificate set and says how to use it.
fn gen_cert(out: &std::path::Path, names: &[String]) -> ExitCode {
    let written = internal::tls::gen::generate(names)
        .map_err(|e| format!("cannot make certificates: {e}"))
        .and_then(|g| {
            internal::tls::gen::write(out, &g)
                .map_err(|e| format!("cannot write into {}: {e}", out.display()))
        });
    match written {
        Ok(files) => {
            for f in files {
                println!("wrote {}", f.display());
            }
            println!("server certificate for: {}", names.join(", "));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hopping-gateway gen-cert: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Applies the flags once, reporting a bad `--node`.
fn apply_checked(cli: &Cli, cfg: &mut Config) -> Result<(), String> {
    cfg.override_nodes(&cli.nodes)?;
    overrides(cli)(cfg);
    Ok(())
}

/// Flags as a function re-applied to every reloaded config ("flags override the file").
fn overrides(cli: &Cli) -> Box<dyn Fn(&mut Config) + Send + Sync> {
    let listen = cli.listen;
    let admin = cli.admin_listen;
    let nodes = cli.nodes.clone();
    let redis = cli.redis_url.clone();
    let access = cli.access_log;
    Box::new(move |c: &mut Config| {
        if let Some(a) = listen {
            c.server.listen = a;
        }
        if let Some(a) = admin {
            c.server.admin_listen = a;
        }
        // Validated at start-up by apply_checked; a reload keeps the same flags.
        let _ = c.override_nodes(&nodes);
        if let Some(url) = &redis {
            c.affinity.store = StoreKind::Redis { url: url.clone() };
        }
        if let Some(a) = access {
            c.server.access_log = matches!(a, OnOff::On);
        }
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
