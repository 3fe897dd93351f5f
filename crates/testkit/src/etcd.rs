//! A real etcd for the tests that need one (Debian's etcd-server, which
//! `.ci/run` installs): started on free ports in a temporary directory,
//! killed and its data removed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::free_port;

/// An etcd process, killed and its data removed on drop.
#[derive(Debug)]
pub struct EtcdProcess {
    child: Child,
    dir: PathBuf,
    client: u16,
    peer: u16,
    /// `host:port` of its client URL.
    pub endpoint: String,
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn etcd_binary() -> PathBuf {
    let fixed = PathBuf::from("/usr/bin/etcd");
    if fixed.exists() {
        return fixed;
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("etcd"))
                .find(|p| p.exists())
        })
        .expect("etcd not found: install Debian's etcd-server (.ci/run does)")
}

/// Starts etcd on free ports in a new temporary directory and waits until
/// it listens.
///
/// # Panics
///
/// If etcd is not installed, exits, or does not listen within 30 s (with
/// its log).
pub fn start_etcd() -> EtcdProcess {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("tollgate-etcd-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (client, peer) = (free_port(), free_port());
    let mut etcd = EtcdProcess {
        child: spawn_etcd(&dir, client, peer),
        dir,
        client,
        peer,
        endpoint: format!("127.0.0.1:{client}"),
    };
    etcd.wait_listening();
    etcd
}

fn spawn_etcd(dir: &std::path::Path, client: u16, peer: u16) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("etcd.log"))
        .unwrap();
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    Command::new(etcd_binary())
        .arg("--name=t")
        .arg(format!("--data-dir={}", dir.join("data").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=t={peer_url}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("etcd could not be started")
}

impl EtcdProcess {
    fn wait_listening(&mut self) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
                panic!("etcd exited with {status}: {log}");
            }
            if std::net::TcpStream::connect(&self.endpoint).is_ok() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd did not listen within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills etcd, as a crash would.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Starts a killed etcd again on the same ports and data.
    pub fn restart(&mut self) {
        self.child = spawn_etcd(&self.dir, self.client, self.peer);
        self.wait_listening();
    }
}
