//! Go Doorman's flag names, read by `serve` (those of Go's
//! `doorman_server`) and `lease` (those of Go's `doorman_client`), as Go's
//! `flag` package writes them: one dash or two, `-name value` or
//! `-name=value`.
//!
//! ```text
//! tollgate serve -port 15001 -debug_port=15051 -config doorman.yaml
//! tollgate serve --port 15001 --debug-port=15051 --config doorman.yaml
//! ```
//!
//! # Implementation notes
//!
//! The arguments are rewritten before clap parses them: a Go name with an
//! equivalent becomes that flag, one without is refused with a line that
//! says what to do instead, and every other argument is left as it is
//! (values, tollgate's own flags, anything after `--`). Other subcommands
//! are not touched.

use std::ffi::OsString;

/// What one Go flag becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Go {
    /// tollgate's flag of this name, with the same value.
    Flag(&'static str),
    /// A boolean: `-name` and `-name=true` become this flag,
    /// `-name=false` nothing.
    Switch(&'static str),
    /// The value becomes a positional argument (`-resource api`: `api`).
    Positional,
    /// Nothing: what it asks for is what tollgate always does
    /// (`-logtostderr`).
    Ignored,
    /// No equivalent: refused with this advice.
    Refused(&'static str),
}

/// glog's flags, which every Go Doorman command takes.
const GLOG: &[(&str, Go)] = &[
    ("logtostderr", Go::Ignored),
    ("alsologtostderr", Go::Ignored),
    (
        "v",
        Go::Refused("set the log level with RUST_LOG instead, e.g. RUST_LOG=debug"),
    ),
    (
        "vmodule",
        Go::Refused(
            "set the log level per module with RUST_LOG instead, e.g. \
             RUST_LOG=info,tollgate_doorman=debug",
        ),
    ),
    (
        "stderrthreshold",
        Go::Refused("every log line goes to stderr; RUST_LOG sets the level, e.g. RUST_LOG=warn"),
    ),
    (
        "log_dir",
        Go::Refused("logs go to stderr; redirect it to a file (2>>FILE)"),
    ),
    (
        "log_backtrace_at",
        Go::Refused("tollgate logs no backtraces: drop it"),
    ),
];

/// Go's `doorman_server` flags, for `serve`.
const SERVE: &[(&str, Go)] = &[
    ("port", Go::Flag("--port")),
    ("debug_port", Go::Flag("--debug-port")),
    ("config", Go::Flag("--config")),
    ("parent", Go::Flag("--parent")),
    ("hostname", Go::Flag("--hostname")),
    ("etcd_endpoints", Go::Flag("--etcd-endpoints")),
    ("master_election_lock", Go::Flag("--election-key")),
    ("master_delay", Go::Flag("--election-ttl")),
    ("tls", Go::Switch("--tls")),
    ("cert_file", Go::Flag("--tls-cert")),
    ("key_file", Go::Flag("--tls-key")),
    (
        "server_role",
        Go::Refused("a server with --parent is an intermediate, one without is the root: drop it"),
    ),
    (
        "doorman_rpc_dial_timeout",
        Go::Refused("the parent is dialled with a fixed 5s timeout, Go's default: drop it"),
    ),
    (
        "doorman_minimum_refresh_interval",
        Go::Refused(
            "how often this server asks its parent is the refresh_interval of the parent's \
             answers: drop it",
        ),
    ),
];

/// Go's `doorman_client` flags, for `lease`.
const LEASE: &[(&str, Go)] = &[
    ("server", Go::Flag("--server")),
    ("resource", Go::Positional),
    ("wants", Go::Flag("--wants")),
    ("client_id", Go::Flag("--id")),
    ("ca_file", Go::Flag("--tls-ca")),
    ("tls", Go::Switch("--tls")),
];

/// The Go flag `arg` names, if it names one of `table`'s (or glog's), with
/// its `=value` if it has one.
fn lookup<'a>(table: &[(&str, Go)], arg: &'a str) -> Option<(&'a str, Go, Option<&'a str>)> {
    let bare = arg
        .strip_prefix("--")
        .or_else(|| arg.strip_prefix('-'))
        .filter(|b| !b.is_empty() && !b.starts_with('-'))?;
    let (name, value) = match bare.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (bare, None),
    };
    let go = table
        .iter()
        .chain(GLOG)
        .find(|(n, _)| *n == name)
        .map(|&(_, go)| go)?;
    Some((name, go, value))
}

/// `argv` with Go Doorman's flags after a `serve` or `lease` subcommand
/// rewritten to tollgate's ([`SERVE`], [`LEASE`], and glog's).
///
/// # Errors
///
/// A Go flag without an equivalent, as one line naming it and what to do
/// instead.
pub(crate) fn go_flags(argv: impl IntoIterator<Item = OsString>) -> Result<Vec<OsString>, String> {
    let argv: Vec<OsString> = argv.into_iter().collect();
    // The subcommand: the first argument that is neither a flag nor the
    // value of the global --log-format.
    let mut at = 1;
    while let Some(arg) = argv.get(at) {
        match arg.to_str() {
            Some("--log-format") => at += 2,
            Some(a) if a.starts_with('-') => at += 1,
            _ => break,
        }
    }
    let (sub, table) = match argv.get(at).and_then(|a| a.to_str()) {
        Some("serve") => ("serve", SERVE),
        Some("lease") => ("lease", LEASE),
        _ => return Ok(argv),
    };
    let mut out: Vec<OsString> = argv[..=at].to_vec();
    let mut rest = argv[at + 1..].iter();
    while let Some(arg) = rest.next() {
        let Some(text) = arg.to_str() else {
            out.push(arg.clone());
            continue;
        };
        if text == "--" {
            out.push(arg.clone());
            out.extend(rest.cloned());
            break;
        }
        let Some((name, go, value)) = lookup(table, text) else {
            out.push(arg.clone());
            continue;
        };
        match go {
            Go::Flag(flag) => out.push(match value {
                Some(value) => format!("{flag}={value}").into(),
                None => flag.into(),
            }),
            Go::Switch(flag) => match value {
                None | Some("true" | "1" | "t" | "T" | "TRUE" | "True") => out.push(flag.into()),
                Some("false" | "0" | "f" | "F" | "FALSE" | "False") => {}
                Some(other) => {
                    return Err(format!(
                        "-{name}={other}: Go Doorman's -{name} is true or false ({flag} in \
                         tollgate {sub})"
                    ))
                }
            },
            Go::Positional => match value {
                Some(value) => out.push(value.into()),
                None => {
                    if let Some(value) = rest.next() {
                        out.push(value.clone());
                    }
                }
            },
            Go::Ignored => {}
            Go::Refused(advice) => {
                return Err(format!(
                    "-{name} is Go Doorman's flag, which tollgate {sub} does not have: {advice}"
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::go_flags;

    fn rewrite(args: &[&str]) -> Result<Vec<String>, String> {
        go_flags(args.iter().map(|a| a.into()))
            .map(|argv| argv.into_iter().map(|a| a.into_string().unwrap()).collect())
    }

    #[test]
    fn go_server_flags_become_serves() {
        assert_eq!(
            rewrite(&[
                "tollgate",
                "serve",
                "-port",
                "15001",
                "-debug_port=15051",
                "-config",
                "etcd:/doorman/config",
                "--etcd_endpoints=10.0.0.9:2379",
                "-master_election_lock",
                "/doorman/master",
                "-master_delay=5s",
                "-hostname",
                "doorman-1.example",
                "-parent",
                "root.example:15000",
                "-logtostderr",
            ])
            .unwrap(),
            [
                "tollgate",
                "serve",
                "--port",
                "15001",
                "--debug-port=15051",
                "--config",
                "etcd:/doorman/config",
                "--etcd-endpoints=10.0.0.9:2379",
                "--election-key",
                "/doorman/master",
                "--election-ttl=5s",
                "--hostname",
                "doorman-1.example",
                "--parent",
                "root.example:15000",
            ]
        );
        assert_eq!(
            rewrite(&[
                "tollgate",
                "serve",
                "-tls",
                "-cert_file=s.pem",
                "-key_file",
                "s.key"
            ])
            .unwrap(),
            [
                "tollgate",
                "serve",
                "--tls",
                "--tls-cert=s.pem",
                "--tls-key",
                "s.key"
            ]
        );
        assert_eq!(
            rewrite(&["tollgate", "serve", "-tls=false", "-alsologtostderr=true"]).unwrap(),
            ["tollgate", "serve"]
        );
    }

    #[test]
    fn go_client_flags_become_leases() {
        assert_eq!(
            rewrite(&[
                "tollgate",
                "--log-format",
                "json",
                "lease",
                "-server=localhost:15000",
                "-resource",
                "api",
                "-wants=100",
                "-client_id",
                "foo",
                "-ca_file",
                "ca.pem",
            ])
            .unwrap(),
            [
                "tollgate",
                "--log-format",
                "json",
                "lease",
                "--server=localhost:15000",
                "api",
                "--wants=100",
                "--id",
                "foo",
                "--tls-ca",
                "ca.pem",
            ]
        );
    }

    #[test]
    fn go_flags_without_an_equivalent_say_what_to_do() {
        assert_eq!(
            rewrite(&["tollgate", "serve", "-server_role", "intermediate"]),
            Err(
                "-server_role is Go Doorman's flag, which tollgate serve does not have: \
                 a server with --parent is an intermediate, one without is the root: drop it"
                    .to_owned()
            )
        );
        assert_eq!(
            rewrite(&["tollgate", "lease", "a", "-v=2"]),
            Err(
                "-v is Go Doorman's flag, which tollgate lease does not have: set the log \
                 level with RUST_LOG instead, e.g. RUST_LOG=debug"
                    .to_owned()
            )
        );
        assert_eq!(
            rewrite(&["tollgate", "serve", "-tls=yes"]),
            Err(
                "-tls=yes: Go Doorman's -tls is true or false (--tls in tollgate serve)".to_owned()
            )
        );
    }

    #[test]
    fn nothing_else_changes() {
        let unchanged: [&[&str]; 7] = [
            &["tollgate", "quota", "-tls", "-port", "c"],
            &[
                "tollgate",
                "serve",
                "--tls",
                "--tls-cert",
                "c",
                "--port",
                "1",
            ],
            &["tollgate", "serve", "-tlsx", "-cert_filename=c", "-t"],
            &["tollgate", "lease", "r", "--", "-tls", "-v"],
            &["tollgate", "lease", "r", "--priority", "-3"],
            &["tollgate", "pace", "-t", "4", "-d", "1s"],
            &["tollgate"],
        ];
        for args in unchanged {
            assert_eq!(rewrite(args).unwrap(), args);
        }
    }
}
