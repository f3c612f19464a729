//! A TCP relay on loopback between agents and the head, to make their links die silently or
//! cut the head's network for a while; shared by the real-cluster tests and the chaos bench.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A TCP relay whose connections can be made to die silently or be cut for a while:
/// `go_stale` stops every connection made so far from passing anything, either way, while
/// leaving both of its sockets open (a NAT or load balancer that lost them), and connections
/// made afterwards pass; `cut(true)` holds what every connection carries, either way, until
/// `cut(false)` (a network partition shorter than TCP's retransmission timeout: nothing is
/// lost, it arrives late).
pub struct Relay {
    pub addr: SocketAddr,
    state: Arc<RelayState>,
}

#[derive(Default)]
struct RelayState {
    generation: AtomicU64,
    cut: AtomicBool,
}

impl Relay {
    /// A relay to `upstream` (`host:port`, or an `http://` URL), listening on a port of its own.
    pub fn to(upstream: &str) -> Relay {
        let upstream: SocketAddr = upstream.trim_start_matches("http://").parse().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(RelayState::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let (Ok(client), Ok(server)) = (client, TcpStream::connect(upstream)) else { continue };
                let born = shared.generation.load(Ordering::SeqCst);
                for (from, to) in [(client.try_clone().unwrap(), server.try_clone().unwrap()), (server, client)] {
                    let shared = shared.clone();
                    std::thread::spawn(move || Self::pump(from, to, born, &shared));
                }
            }
        });
        Relay { addr, state }
    }

    /// Copies `from` to `to` while its connection is current, holding each read while the
    /// relay is cut; past its generation, reads and drops.
    fn pump(mut from: TcpStream, mut to: TcpStream, born: u64, state: &RelayState) {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            while state.cut.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if state.generation.load(Ordering::SeqCst) == born && to.write_all(&buf[..n]).is_err() {
                return;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    }

    pub fn go_stale(&self) {
        self.state.generation.fetch_add(1, Ordering::SeqCst);
    }

    pub fn cut(&self, cut: bool) {
        self.state.cut.store(cut, Ordering::SeqCst);
    }
}
