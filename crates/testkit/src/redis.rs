//! A real `redis-server` (Debian's) for tests: started on 127.0.0.1 on a
//! free port with no persistence, killed when dropped. Tests that use it
//! fail, not skip, where it is not installed (`.ci/run` installs it).
//! One may serve TLS too ([`RedisServer::start_tls`]), with a throwaway
//! CA. A Cluster ([`RedisCluster`]) and a Sentinel ([`RedisSentinel`]) are
//! made of such servers. Shared by the Redis tests of every crate.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    /// Arguments beyond the port, the persistence and the directory.
    extra: Vec<String>,
    /// A Sentinel's first configuration (written to `sentinel.conf` in
    /// the directory, which Sentinel rewrites), or `None` for a server.
    sentinel: Option<String>,
    /// The TLS port, beside the plain one, when started with TLS.
    tls_port: Option<u16>,
}

impl RedisServer {
    /// Starts one on a free port and waits until it answers `PING`.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// As [`start`](Self::start), with more `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::launch(extra, None, false)
    }

    /// As [`start`](Self::start), also serving TLS on a second port
    /// ([`tls_url`](Self::tls_url)) with a certificate for `127.0.0.1`
    /// and `localhost` from a throwaway CA ([`ca_file`](Self::ca_file)).
    pub fn start_tls() -> RedisServer {
        RedisServer::launch(&[], None, true)
    }

    /// Starts a server (with TLS too if `tls`), or a Sentinel with this
    /// configuration.
    fn launch(extra: &[&str], sentinel: Option<String>, tls: bool) -> RedisServer {
        let mut dir = tempfile::tempdir().expect("a temporary directory");
        if tls {
            write_certificates(dir.path());
        }
        for _ in 0..5 {
            let mut server = RedisServer {
                child: None,
                port: free_port(),
                dir,
                extra: extra.iter().map(|a| a.to_string()).collect(),
                sentinel: sentinel.clone(),
                tls_port: tls.then(free_port),
            };
            if server.spawn() {
                return server;
            }
            dir = server.take_dir();
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    fn take_dir(mut self) -> tempfile::TempDir {
        self.kill();
        std::mem::replace(&mut self.dir, tempfile::tempdir().expect("a directory"))
    }

    /// Starts the server on this port; false if it exited (the port was
    /// taken meanwhile).
    fn spawn(&mut self) -> bool {
        let mut command = Command::new("redis-server");
        if let Some(config) = &self.sentinel {
            let path = self.dir.path().join("sentinel.conf");
            std::fs::write(&path, config).expect("a sentinel.conf");
            command.arg(path).arg("--sentinel");
        }
        if let Some(port) = self.tls_port {
            let file = |name: &str| self.dir.path().join(name);
            command
                .arg("--tls-port")
                .arg(port.to_string())
                .arg("--tls-cert-file")
                .arg(file("server.pem"))
                .arg("--tls-key-file")
                .arg(file("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(file("ca.pem"))
                .args(["--tls-auth-clients", "no"]);
        }
        let child = command
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run redis-server ({e}): install Debian's redis-server \
                     (`apt-get install redis-server`, as .ci/run does)"
                )
            });
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return false;
            }
            if self.ping() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "redis-server on port {} did not answer within 10 s",
            self.port
        );
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `rediss://127.0.0.1:PORT`, the TLS port of a server started with
    /// [`start_tls`](Self::start_tls).
    pub fn tls_url(&self) -> String {
        let port = self.tls_port.expect("a server started with start_tls");
        format!("rediss://127.0.0.1:{port}")
    }

    /// The CA (PEM) that a [`start_tls`](Self::start_tls) server's
    /// certificate chains to.
    pub fn ca_file(&self) -> PathBuf {
        assert!(self.tls_port.is_some(), "a server started with start_tls");
        self.dir.path().join("ca.pem")
    }

    /// Runs one command (`args[0]` and its arguments) on a connection of
    /// its own; the reply as `T`.
    ///
    /// # Panics
    ///
    /// Where the server cannot be reached or answers with an error.
    pub async fn query<T: ::redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let (name, rest) = args.split_first().expect("a command");
        let client = ::redis::Client::open(self.url()).expect("a url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("redis answers");
        ::redis::cmd(name)
            .arg(rest)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// The scripts the server has run: its `EVALSHA` and `EVAL` calls,
    /// less the failed ones (such as a first `EVALSHA` before the script
    /// is loaded), from `INFO commandstats`.
    pub async fn script_calls(&self) -> u64 {
        let info: String = self.query(&["INFO", "commandstats"]).await;
        info.lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .map(|l| field(l, "calls=") - field(l, "failed_calls="))
            .sum()
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server (SIGSTOP): its sockets stay open, unanswered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, which: &str) {
        let pid = self.child.as_ref().expect("a running server").id();
        let status = Command::new("kill")
            .arg(which)
            .arg(pid.to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {which} {pid}");
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "redis-server did not restart on port {}",
            self.port
        );
    }
}

/// The number after `name` in an `INFO` line.
fn field(line: &str, name: &str) -> u64 {
    let rest = &line[line.find(name).expect("the field") + name.len()..];
    rest[..rest.find(',').unwrap_or(rest.len())]
        .parse()
        .expect("a count")
}

/// A key prefix, starting with `tag`, that no other caller in this
/// process has had: servers given one start with no state, as in-memory
/// ones do, on a Redis that other tests share.
pub fn fresh_prefix(tag: &str) -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    // Relaxed: a counter; only its uniqueness matters.
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{tag}{n}:")
}

/// The error a Redis store's start-up ends with, as one line: `connecting`
/// must fail within 30 s (its own connect timeout is shorter), with a
/// message of one line beginning with `start`.
///
/// # Panics
///
/// Where it connects, takes longer, or says something else.
pub async fn start_up_error<T, E: std::fmt::Display>(
    connecting: impl std::future::Future<Output = Result<T, E>>,
    start: &str,
) -> String {
    let outcome = tokio::time::timeout(Duration::from_secs(30), connecting)
        .await
        .expect("start-up does not wait forever");
    let Err(e) = outcome else {
        panic!("connected, where starting should fail with \"{start}...\"");
    };
    let line = e.to_string();
    assert!(!line.contains('\n'), "{line}");
    assert!(line.starts_with(start), "{line}");
    line
}

/// A port free on 127.0.0.1 now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A throwaway CA (`ca.pem`) and a certificate it signs for `127.0.0.1`
/// and `localhost` (`server.pem`, `server.key`), written to `dir`.
fn write_certificates(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).expect("a CA certificate");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("a server key");
    let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let cert = CertificateParams::new(names)
        .expect("server parameters")
        .signed_by(&key, &issuer)
        .expect("a server certificate");
    for (name, pem) in [
        ("ca.pem", ca_cert.pem()),
        ("server.pem", cert.pem()),
        ("server.key", key.serialize_pem()),
    ] {
        std::fs::write(dir.join(name), pem).expect("a certificate file");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster of `redis-server`s on 127.0.0.1, one master each and no
/// replicas, its slots spread by `redis-cli --cluster create`.
#[derive(Debug)]
pub struct RedisCluster {
    /// The nodes, in the order they were started.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `n` (at least 3) nodes and waits until the cluster is ok.
    pub fn start(n: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..n)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "5000",
                ])
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs (Debian's redis-tools, with redis-server)");
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = RedisCluster { nodes };
        let start = Instant::now();
        while !cluster.nodes.iter().all(|n| n.cluster_ok()) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the cluster was not ok within 20 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// Every node's `redis://` URL: the seed list.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

impl RedisServer {
    fn cluster_ok(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        if s.write_all(b"CLUSTER INFO\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).contains("cluster_state:ok")
    }
}

/// One master and one `redis-server --sentinel` watching it, each on a
/// free port of 127.0.0.1, the Sentinel's configuration written to its
/// temporary directory.
#[derive(Debug)]
pub struct RedisSentinel {
    /// The master the Sentinel names [`MASTER`](Self::MASTER).
    pub master: RedisServer,
    /// The Sentinel.
    pub sentinel: RedisServer,
}

impl RedisSentinel {
    /// The name the Sentinel knows the master by.
    pub const MASTER: &'static str = "tollgate";

    /// Starts the master, then the Sentinel (quorum 1), and waits until
    /// both answer `PING`.
    pub fn start() -> RedisSentinel {
        let master = RedisServer::start();
        let config = format!(
            "sentinel monitor {} 127.0.0.1 {} 1\n",
            RedisSentinel::MASTER,
            master.port
        );
        let sentinel = RedisServer::launch(&[], Some(config), false);
        RedisSentinel { master, sentinel }
    }

    /// `redis+sentinel://127.0.0.1:PORT/tollgate`: the master through
    /// the Sentinel.
    pub fn url(&self) -> String {
        self.url_of(RedisSentinel::MASTER)
    }

    /// `redis+sentinel://127.0.0.1:PORT/MASTER`, for any master name.
    pub fn url_of(&self, master: &str) -> String {
        format!("redis+sentinel://127.0.0.1:{}/{master}", self.sentinel.port)
    }
}
