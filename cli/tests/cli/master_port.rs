//! The MASTER_PORT of `jitccl launch`: outside the kernel's ephemeral range, and held for
//! rank 0 from the launcher's choice on, so that neither another launch nor a socket the
//! kernel hands a port (bind to port 0, an outgoing connection) can take it before rank 0
//! serves it. Several launches run at once, as in the test suite.

use std::collections::HashSet;
use std::process::{Command, Stdio};

/// A rank: rank 0 checks that the port is held (an exclusive bind, which any other
/// launcher or port-0 bind is, is refused), that the socket it inherited is the port's,
/// and that it can serve the port itself with SO_REUSEADDR (as PyTorch's TCPStore does);
/// every rank checks the port against `ip_local_port_range`. Prints the port.
const RANK: &str = r#"
import errno, os, socket, sys
port = int(os.environ["MASTER_PORT"])
lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
assert not lo <= port <= hi, f"port {port} is in the ephemeral range {lo}-{hi}"
if os.environ["RANK"] != "0":
    assert "JITCCL_MASTER_FD" not in os.environ, "only rank 0 inherits the port"
    sys.exit(0)
held = socket.fromfd(int(os.environ["JITCCL_MASTER_FD"]), socket.AF_INET, socket.SOCK_STREAM)
assert held.getsockname() == ("127.0.0.1", port), held.getsockname()
other = socket.socket()
try:
    other.bind(("127.0.0.1", port))
    sys.exit(f"port {port} was free for another process to take")
except OSError as e:
    assert e.errno == errno.EADDRINUSE, e
server = socket.socket(socket.AF_INET6)
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("::", port))
server.listen()
print("port", port)
"#;

#[test]
fn launches_at_once_each_hold_their_own_port_outside_the_ephemeral_range() {
    super::procs::adopt_orphans();
    let launches: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_jitccl"))
                .args(["launch", "-n", "2", "--timeout", "60", "--", "python3", "-c", RANK])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start jitccl launch")
        })
        .collect();
    let mut ports = HashSet::new();
    for launch in launches {
        let out = launch.wait_with_output().expect("wait for jitccl launch");
        let stdout = super::text(&out.stdout);
        assert!(out.status.success(), "{}\n{stdout}{}", out.status, super::text(&out.stderr));
        let port = stdout.lines().find_map(|l| l.strip_prefix("[0] port ")).expect("rank 0 prints its port");
        assert!(ports.insert(port.to_string()), "two launches were given port {port}");
    }
}
