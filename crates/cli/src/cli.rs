//! What every subcommand shares: the logging setup, the runtime the
//! servers and load generators run on, and the value grammars (durations,
//! counts) of its flags.
//!
//! # Implementation notes
//!
//! Logs go to stderr, always, so that stdout carries only a command's
//! results; colour is used only when stderr is a terminal and `NO_COLOR`
//! is unset. `RUST_LOG` overrides each subcommand's default level.
//!
//! Every duration flag reads humantime (`5s`, `250ms`, `1m30s`). clap
//! would take `-5s` for a flag, so duration flags allow hyphen values and
//! this parser refuses the sign with a message of its own.

use std::io::IsTerminal as _;
use std::time::Duration;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the process's logger: stderr, `RUST_LOG` or `default` as the
/// filter, colour only on a terminal.
pub(crate) fn init_logging(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => {
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            builder.with_ansi(colour).init();
        }
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// A duration flag: humantime, not negative.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err("a duration cannot be negative".to_owned());
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{e} (durations read like 5s, 250ms or 1m30s)"))
}

/// A duration flag that must be more than zero.
pub(crate) fn positive_duration(text: &str) -> Result<Duration, String> {
    match duration(text)? {
        Duration::ZERO => Err("must be more than zero".to_owned()),
        d => Ok(d),
    }
}

/// A count flag (threads, clients, connections): at least 1.
pub(crate) fn positive<T>(text: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialEq + Default,
    T::Err: std::fmt::Display,
{
    let text = text.trim();
    if text.starts_with('-') {
        return Err("must be at least 1".to_owned());
    }
    match text.parse::<T>() {
        Ok(n) if n == T::default() => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A `--host` flag: an IP address, or a name resolved to one (`localhost`
/// is 127.0.0.1); a name with IPv4 and IPv6 addresses listens on the
/// first IPv4 one, as clients dialling the name most often try it first.
pub(crate) fn host(text: &str) -> Result<std::net::IpAddr, String> {
    use std::net::ToSocketAddrs as _;
    let text = text.trim();
    if let Ok(ip) = text.trim_start_matches('[').trim_end_matches(']').parse() {
        return Ok(ip);
    }
    if text.is_empty() {
        return Err("give an IP address or a host name".to_owned());
    }
    let addrs: Vec<std::net::IpAddr> = (text, 0)
        .to_socket_addrs()
        .map_err(|e| format!("{text:?} is not an IP address, and resolving it failed: {e}"))?
        .map(|a| a.ip())
        .collect();
    addrs
        .iter()
        .find(|ip| ip.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

/// This machine's cores (1 if unknown): the default thread count.
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Runs `main` to completion on a multi-threaded runtime with `threads`
/// workers (tokio's default, one per core, when `None`).
///
/// # Errors
///
/// When the runtime cannot be built, and whatever `main` returns.
pub(crate) fn block_on<T>(
    threads: Option<usize>,
    main: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        rt.worker_threads(n);
    }
    rt.enable_all().build()?.block_on(main)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{duration, positive, positive_duration};

    #[test]
    fn durations_read_humantime_and_refuse_a_sign() {
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("0s"), Ok(Duration::ZERO));
        assert_eq!(
            duration("-1s"),
            Err("a duration cannot be negative".to_owned())
        );
        assert!(duration("5").unwrap_err().contains("5s, 250ms"));
        assert!(positive_duration("0ms").is_err());
        assert_eq!(positive_duration("2s"), Ok(Duration::from_secs(2)));
    }

    #[test]
    fn a_host_is_an_address_or_a_name_that_resolves() {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        assert_eq!(
            super::host("0.0.0.0"),
            Ok(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        );
        assert_eq!(super::host("::1"), Ok(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        assert_eq!(super::host("[::1]"), Ok(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        assert_eq!(
            super::host("localhost"),
            Ok(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert!(super::host("").is_err());
        let e = super::host("no-such-host.invalid").unwrap_err();
        assert!(
            e.starts_with("\"no-such-host.invalid\" is not an IP address"),
            "{e}"
        );
    }

    #[test]
    fn counts_start_at_one() {
        assert_eq!(positive::<usize>("3"), Ok(3));
        assert!(positive::<usize>("0").is_err());
        assert!(positive::<u64>("-2").is_err());
        assert!(positive::<u64>("x").is_err());
    }
}

/// A server's TLS flags; Go Doorman's `--tls`, `--cert_file` and
/// `--key_file` are accepted too (and with one dash, see
/// [`crate::go_flags`]).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServerTlsArgs {
    /// Serve over TLS (needs --tls-cert and --tls-key; giving them is
    /// enough).
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    tls: bool,
    /// The server's certificate chain (PEM).
    #[arg(long, alias = "cert_file", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The server's private key (PEM).
    #[arg(long, alias = "key_file", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Require client certificates signed by this CA (PEM): mutual TLS.
    #[arg(long, requires = "tls_cert")]
    tls_client_ca: Option<std::path::PathBuf>,
}

impl ServerTlsArgs {
    /// The TLS setup, when TLS is on.
    pub(crate) fn tls(&self) -> Option<tollgate_service::ServerTls> {
        let (cert, key) = (self.tls_cert.clone()?, self.tls_key.clone()?);
        let tls = tollgate_service::ServerTls::new(cert, key);
        Some(match &self.tls_client_ca {
            Some(ca) => tls.client_ca(ca),
            None => tls,
        })
    }

    /// Whether client certificates are required.
    pub(crate) fn mutual(&self) -> bool {
        self.tls_client_ca.is_some()
    }
}

/// A client's TLS flags; Go Doorman's `--tls` and `--ca_file` are
/// accepted too (and with one dash, see [`crate::go_flags`]).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ClientTlsArgs {
    /// Dial the server over TLS (needs --tls-ca; giving it is enough).
    #[arg(long, requires = "tls_ca")]
    tls: bool,
    /// The CA that signed the server's certificate (PEM).
    #[arg(long, alias = "ca_file")]
    tls_ca: Option<std::path::PathBuf>,
    /// This client's certificate (PEM), for servers that require one.
    #[arg(long, requires_all = ["tls_ca", "tls_key"])]
    tls_cert: Option<std::path::PathBuf>,
    /// This client's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// The name the server's certificate must carry (default: the host
    /// dialled).
    #[arg(long, requires = "tls_ca")]
    tls_server_name: Option<String>,
}

impl ClientTlsArgs {
    /// The TLS setup, when TLS is on.
    pub(crate) fn tls(&self) -> Option<tollgate_service::ClientTls> {
        let mut tls = tollgate_service::ClientTls::new(self.tls_ca.clone()?);
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            tls = tls.identity(cert, key);
        }
        if let Some(name) = &self.tls_server_name {
            tls = tls.domain(name.clone());
        }
        Some(tls)
    }
}
