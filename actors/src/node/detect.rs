//! What this machine offers by default: CPUs, memory, GPUs, and the address peers reach it at.

use ftdrive::Resources;
use std::net::{ToSocketAddrs, UdpSocket};

/// `cpu` = online CPUs, `memory_mb` from /proc/meminfo, `gpu` = NVIDIA devices in /dev.
pub fn machine_resources() -> Resources {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    Resources::units(&[("cpu", cpus), ("memory_mb", memory_mb()), ("gpu", gpu_count())])
}

fn memory_mb() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

fn gpu_count() -> u64 {
    let Ok(entries) = std::fs::read_dir("/dev") else { return 0 };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("nvidia"))
                .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()))
        })
        .count() as u64
}

/// The local address this machine uses to reach the head: what other ranks should dial.
pub fn address_towards(head_url: &str) -> String {
    let host_port = head_url.split("://").nth(1).unwrap_or(head_url).split('/').next().unwrap_or_default();
    let target = host_port.to_socket_addrs().ok().and_then(|mut a| a.next());
    let local = target.and_then(|t| {
        let socket = UdpSocket::bind(if t.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).ok()?;
        socket.connect(t).ok()?;
        socket.local_addr().ok()
    });
    local.map_or_else(|| "127.0.0.1".to_string(), |a| a.ip().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_something_sensible() {
        let r = machine_resources();
        assert!(r.milli("cpu") >= 1000);
        assert_eq!(address_towards("http://127.0.0.1:7380"), "127.0.0.1");
    }
}
