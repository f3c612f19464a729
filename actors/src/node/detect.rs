//! What this machine offers by default: CPUs, memory, NVIDIA GPUs (which devices, which
//! model), the address peers reach it at, whose ports its processes share, and which of them
//! something listens on.

use ftdrive::resources::Devices;
use ftdrive::Resources;
use std::net::{ToSocketAddrs, UdpSocket};
use std::path::Path;

/// Where the NVIDIA kernel driver lists its GPUs, one directory per PCI bus id.
const NVIDIA_PROC_DIR: &str = "/proc/driver/nvidia/gpus";

/// The label a node's GPU model is published under (as Kubernetes GPU feature discovery's
/// `nvidia.com/gpu.product`: the model with spaces as dashes).
pub const GPU_MODEL_LABEL: &str = "gpu.model";

/// `cpu` = online CPUs, `memory_mb` from /proc/meminfo (`gpu` is set from [`Gpus`]).
pub fn machine_resources() -> Resources {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    Resources::units(&[("cpu", cpus), ("memory_mb", memory_mb())])
}

fn memory_mb() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// The GPUs a node offers: device indices as `CUDA_VISIBLE_DEVICES` numbers them (PCI bus
/// order, which is `nvidia-smi`'s order; the agent sets `CUDA_DEVICE_ORDER=PCI_BUS_ID` so that
/// CUDA agrees), and their model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gpus {
    pub devices: Devices,
    pub model: Option<String>,
}

/// `--gpus` naming devices this machine does not show: allowed (the driver's `/proc` entries
/// and `nvidia-smi` may be out of reach where the devices are not, in some containers), but
/// said, since jobs given them would find no such GPU.
fn warn_of_unseen(given: Devices, seen: Devices) {
    if seen.contains_all(given) {
        return;
    }
    let list = |d: Devices| d.indices().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let shown = if seen.is_empty() { "no NVIDIA GPU".to_string() } else { format!("GPUs {}", list(seen)) };
    tracing::warn!(
        "--gpus {}: this machine shows {shown} (in {NVIDIA_PROC_DIR} or `nvidia-smi -L`); jobs given a device it \
         does not have will not find it",
        list(given)
    );
}

impl Gpus {
    /// The NVIDIA GPUs of this machine: from the kernel driver's `/proc` entries, or else from
    /// `nvidia-smi -L`; none when neither is there.
    pub fn detect() -> Gpus {
        let from_proc = from_proc_dir(Path::new(NVIDIA_PROC_DIR));
        if !from_proc.devices.is_empty() {
            return from_proc;
        }
        let listed = std::process::Command::new("nvidia-smi").arg("-L").output();
        match listed {
            Ok(out) if out.status.success() => from_smi_list(&String::from_utf8_lossy(&out.stdout)),
            _ => Gpus::default(),
        }
    }

    /// `--gpus`: `none`, or device indices `0,1,...`; the model is detected.
    pub fn parse_flag(text: &str) -> Result<Gpus, String> {
        if text.trim() == "none" {
            return Ok(Gpus::default());
        }
        let indices = text
            .split(',')
            .map(|i| i.trim().parse::<u32>().map_err(|_| format!("`{i}` is not a device index")))
            .collect::<Result<Vec<u32>, String>>()?;
        let devices = Devices::from_indices(&indices)?;
        if devices.count() as usize != indices.len() {
            return Err(format!("`{text}` names a device twice"));
        }
        let detected = Gpus::detect();
        warn_of_unseen(devices, detected.devices);
        Ok(Gpus { devices, model: detected.model })
    }

    /// The `gpu.model` label value: the model with spaces as dashes.
    pub fn model_label(&self) -> Option<String> {
        self.model.as_ref().map(|m| m.split_whitespace().collect::<Vec<_>>().join("-"))
    }
}

/// One `information` file per GPU under the driver's directory, whose entries are named by PCI
/// bus id: sorted by it, their positions are the device indices.
fn from_proc_dir(dir: &Path) -> Gpus {
    let Ok(entries) = std::fs::read_dir(dir) else { return Gpus::default() };
    let mut buses: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    buses.sort();
    let models: Vec<Option<String>> = buses
        .iter()
        .map(|bus| std::fs::read_to_string(bus.join("information")).ok().and_then(|text| field(&text, "Model")))
        .collect();
    let count = models.len() as u32;
    Gpus { devices: Devices::first(count), model: models.into_iter().flatten().next() }
}

fn field(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == name).then(|| value.trim().to_string())
    })
}

/// `GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`, one line per device.
fn from_smi_list(text: &str) -> Gpus {
    let mut indices = Vec::new();
    let mut model = None;
    for line in text.lines() {
        let Some((head, rest)) = line.strip_prefix("GPU ").and_then(|l| l.split_once(':')) else { continue };
        let Ok(index) = head.trim().parse::<u32>() else { continue };
        indices.push(index);
        let name = rest.split(" (UUID").next().unwrap_or(rest).trim();
        if model.is_none() && !name.is_empty() {
            model = Some(name.to_string());
        }
    }
    Gpus { devices: Devices::from_indices(&indices).unwrap_or_default(), model }
}

/// The port space this agent's processes listen in (`Registration::port_space`): the kernel's
/// boot id, which every container on a machine shares and which each boot renews, with the
/// network namespace, which decides whether two listeners on one port collide. Agents with one
/// key draw rendezvous ports from one pool (several agents on a machine, an embedded cluster).
/// Empty when the boot id cannot be read: the network namespace alone does not tell machines
/// apart (every machine's first one has the same inode), so the node keeps a pool of its own.
pub fn port_space() -> String {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok();
    let netns = std::fs::read_link("/proc/self/ns/net").ok().map(|p| p.to_string_lossy().into_owned());
    port_space_from(boot_id.as_deref(), netns.as_deref())
}

/// Most of `/proc/net/tcp{,6}` read each time: a machine with a million sockets is cut short
/// rather than read whole every heartbeat.
const MAX_SOCKET_TABLE_BYTES: u64 = 8 << 20;

/// The TCP ports something listens on in this network namespace, 1024 and up, lowest first,
/// at most `MAX_LISTENING_PORTS` (`ToHead::Listening`): the head passes over them when it hands
/// out rendezvous ports.
///
/// Each family is asked of the kernel's socket diagnostics (netlink `sock_diag`, as `ss -lnt`
/// asks), which look at the listening sockets alone; its `/proc/net/tcp` table is read where
/// that is refused (IPv6 turned off, say, leaves IPv4 asked the fast way). The kernel makes that
/// file by walking the whole established-connection table, whose buckets scale with the
/// machine's memory, and restarts the walk for every 4 KiB read: about 4 ms of CPU per
/// heartbeat on a 23 GiB machine with 9 sockets, 87% of an idle agent's time.
pub fn listening_ports() -> Vec<u16> {
    let mut ports = std::collections::BTreeSet::new();
    for (family, table) in [(libc::AF_INET, "/proc/net/tcp"), (libc::AF_INET6, "/proc/net/tcp6")] {
        match sock_diag::listening(family as u8) {
            Ok(found) => ports.extend(found.into_iter().filter(|p| *p >= ftdrive::config::FIRST_UNPRIVILEGED_PORT)),
            Err(_) => ports.extend(listening_in(&read_socket_table(table))),
        }
    }
    ports.into_iter().take(ftdrive::protocol::MAX_LISTENING_PORTS).collect()
}

/// One `/proc/net/tcp{,6}` table, at most `MAX_SOCKET_TABLE_BYTES` of it; empty if unreadable.
fn read_socket_table(table: &str) -> String {
    use std::io::Read;
    let mut text = String::new();
    if let Ok(file) = std::fs::File::open(table) {
        let _ = file.take(MAX_SOCKET_TABLE_BYTES).read_to_string(&mut text);
    }
    text
}

/// The kernel's TCP socket diagnostics over netlink (`linux/inet_diag.h`), for the LISTEN
/// state alone.
mod sock_diag {
    use std::io::{Error, Result};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 0x1;
    const NLM_F_DUMP: u16 = 0x300;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    const TCP_LISTEN: u32 = 10;
    const HEADER_BYTES: usize = 16;
    /// `nlmsghdr`, then `inet_diag_req_v2`: family, protocol, extensions, pad, states, and a
    /// 48-byte socket id left zero.
    const REQUEST_BYTES: usize = HEADER_BYTES + 56;
    /// Bounds the answer read, as `MAX_SOCKET_TABLE_BYTES` bounds the file.
    const MAX_ANSWER_BYTES: usize = 8 << 20;

    /// The local ports of `family`'s listening TCP sockets in this network namespace.
    pub fn listening(family: u8) -> Result<Vec<u16>> {
        // SAFETY: a new socket, owned from here on.
        let fd =
            unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, libc::NETLINK_SOCK_DIAG) };
        if fd < 0 {
            return Err(Error::last_os_error());
        }
        // SAFETY: `fd` is a descriptor this function just opened.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        set_receive_timeout(&socket)?;
        send(&socket, &request(family))?;
        receive(&socket)
    }

    fn request(family: u8) -> [u8; REQUEST_BYTES] {
        let mut bytes = [0u8; REQUEST_BYTES];
        bytes[0..4].copy_from_slice(&(REQUEST_BYTES as u32).to_ne_bytes());
        bytes[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        bytes[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
        bytes[8..12].copy_from_slice(&1u32.to_ne_bytes());
        bytes[HEADER_BYTES] = family;
        bytes[HEADER_BYTES + 1] = libc::IPPROTO_TCP as u8;
        bytes[HEADER_BYTES + 4..HEADER_BYTES + 8].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
        bytes
    }

    /// A dump that does not answer within a second is taken as refused.
    fn set_receive_timeout(socket: &OwnedFd) -> Result<()> {
        let timeout = libc::timeval { tv_sec: 1, tv_usec: 0 };
        let size = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
        let value = (&timeout as *const libc::timeval).cast();
        // SAFETY: a valid option value of the size given, on an open socket.
        let set = unsafe { libc::setsockopt(socket.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, value, size) };
        if set != 0 {
            return Err(Error::last_os_error());
        }
        Ok(())
    }

    fn send(socket: &OwnedFd, bytes: &[u8]) -> Result<()> {
        // SAFETY: an all-zero sockaddr_nl is the kernel's address; the family is set below.
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let address = (&kernel as *const libc::sockaddr_nl).cast();
        let size = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: the buffer and address outlive the call, with the sizes given.
        let sent = unsafe { libc::sendto(socket.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), 0, address, size) };
        if sent != bytes.len() as isize {
            return Err(Error::last_os_error());
        }
        Ok(())
    }

    /// Reads the dump's messages until its end; each holds one socket's `inet_diag_msg`.
    fn receive(socket: &OwnedFd) -> Result<Vec<u16>> {
        let (mut ports, mut buffer, mut read) = (Vec::new(), vec![0u8; 64 * 1024], 0usize);
        while read < MAX_ANSWER_BYTES {
            // SAFETY: the buffer outlives the call, with its length given.
            let got = unsafe { libc::recv(socket.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len(), 0) };
            if got < 0 {
                return Err(Error::last_os_error());
            }
            read += got as usize;
            if parse(&buffer[..got as usize], &mut ports)? {
                return Ok(ports);
            }
        }
        Err(Error::other("the socket dump is larger than the bound"))
    }

    /// The ports of one datagram's messages; true once the dump's end is in it.
    fn parse(datagram: &[u8], ports: &mut Vec<u16>) -> Result<bool> {
        let mut at = 0;
        while at + HEADER_BYTES <= datagram.len() {
            let field = |from: usize, bytes: usize| &datagram[at + from..at + from + bytes];
            let length = u32::from_ne_bytes(field(0, 4).try_into().expect("4 bytes")) as usize;
            let kind = u16::from_ne_bytes(field(4, 2).try_into().expect("2 bytes"));
            if length < HEADER_BYTES || at + length > datagram.len() {
                return Err(Error::other("a malformed netlink message"));
            }
            match kind {
                NLMSG_DONE => return Ok(true),
                NLMSG_ERROR => {
                    let code = i32::from_ne_bytes(field(HEADER_BYTES, 4).try_into().expect("4 bytes"));
                    return Err(Error::from_raw_os_error(-code));
                }
                // `inet_diag_msg`: family, state, timer, retransmits, then the source port.
                _ if length >= HEADER_BYTES + 6 && u32::from(datagram[at + HEADER_BYTES + 1]) == TCP_LISTEN => {
                    ports.push(u16::from_be_bytes(field(HEADER_BYTES + 4, 2).try_into().expect("2 bytes")));
                }
                _ => {}
            }
            at += (length + 3) & !3;
        }
        Ok(false)
    }
}

/// The local ports of the LISTEN (`0A`) sockets in one `/proc/net/tcp` table.
fn listening_in(table: &str) -> impl Iterator<Item = u16> + '_ {
    table.lines().skip(1).filter_map(|line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1)?;
        let state = fields.nth(1)?;
        let port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
        (state == "0A" && port >= ftdrive::config::FIRST_UNPRIVILEGED_PORT).then_some(port)
    })
}

fn port_space_from(boot_id: Option<&str>, netns: Option<&str>) -> String {
    match (boot_id.map(str::trim).filter(|b| !b.is_empty()), netns) {
        (None, _) => String::new(),
        // Without the namespace, the whole machine is one space: sharing a pool too widely
        // costs nothing but higher port numbers.
        (Some(boot), None) => boot.to_string(),
        (Some(boot), Some(netns)) => format!("{boot}/{netns}"),
    }
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

    #[test]
    fn the_port_space_is_the_boot_and_the_network_namespace() {
        let here = port_space();
        assert!(here.contains("/net:["), "{here}");
        assert_eq!(port_space(), here, "the same for every agent started here");
        let boot = "6b1c1bd4-6c26-4c4e-9a55-0b8f6a3b2f1e\n";
        let key = port_space_from(Some(boot), Some("net:[4026532288]"));
        assert_eq!(key, "6b1c1bd4-6c26-4c4e-9a55-0b8f6a3b2f1e/net:[4026532288]");
        assert_eq!(port_space_from(Some(boot), None), "6b1c1bd4-6c26-4c4e-9a55-0b8f6a3b2f1e");
        assert_eq!(port_space_from(None, Some("net:[4026531840]")), "", "not a machine's key on its own");
    }

    #[test]
    fn listening_ports_are_the_listen_sockets_from_1024_up() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:733C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
   2: 0100007F:733D 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
   3: 00000000000000000000000000000000:1CE8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 4 1";
        assert_eq!(listening_in(table).collect::<Vec<_>>(), [29_500, 7_400], "not port 22, not a connection");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listening_ports().contains(&port), "this test's own listener on {port}");
    }

    /// The kernel's socket diagnostics find what `/proc/net/tcp{,6}` shows, listeners alone:
    /// this test's own, over IPv4 and (where the machine has it) IPv6, and not a connection.
    #[test]
    fn socket_diagnostics_find_the_listeners_proc_shows() {
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let v6 = std::net::TcpListener::bind("[::1]:0").ok();
        let connected = std::net::TcpStream::connect(v4.local_addr().unwrap()).unwrap();
        let (v4_port, client_port) = (v4.local_addr().unwrap().port(), connected.local_addr().unwrap().port());
        let by_diag = sock_diag::listening(libc::AF_INET as u8).expect("sock_diag answers here");
        assert!(by_diag.contains(&v4_port) && !by_diag.contains(&client_port), "{by_diag:?}");
        let in_proc = |table: &str| listening_in(&read_socket_table(table)).collect::<Vec<u16>>();
        assert!(in_proc("/proc/net/tcp").contains(&v4_port));
        if let Some(v6) = v6 {
            let v6_port = v6.local_addr().unwrap().port();
            assert!(sock_diag::listening(libc::AF_INET6 as u8).unwrap().contains(&v6_port));
            assert!(listening_ports().contains(&v6_port) && in_proc("/proc/net/tcp6").contains(&v6_port));
        }
    }

    #[test]
    fn reads_the_drivers_proc_entries_in_bus_order() {
        let dir = tempfile::tempdir().unwrap();
        for bus in ["0000:c1:00.0", "0000:41:00.0"] {
            std::fs::create_dir(dir.path().join(bus)).unwrap();
            let info = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nDevice Minor: \t 1\n";
            std::fs::write(dir.path().join(bus).join("information"), info).unwrap();
        }
        let gpus = from_proc_dir(dir.path());
        assert_eq!(gpus.devices.to_string(), "0,1");
        assert_eq!(gpus.model.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(gpus.model_label().as_deref(), Some("NVIDIA-H100-80GB-HBM3"));
        assert_eq!(from_proc_dir(&dir.path().join("absent")), Gpus::default());
    }

    #[test]
    fn reads_nvidia_smi_listing() {
        let text = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1b2c)\nGPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-3d4e)\n";
        let gpus = from_smi_list(text);
        assert_eq!(gpus.devices.to_string(), "0,1");
        assert_eq!(gpus.model.as_deref(), Some("NVIDIA A100-SXM4-40GB"));
        assert_eq!(from_smi_list("No devices were found\n"), Gpus::default());
    }

    #[test]
    fn gpus_flag_takes_indices_or_none() {
        assert_eq!(Gpus::parse_flag("0,1,2,3").unwrap().devices.to_string(), "0,1,2,3");
        assert!(Gpus::parse_flag("none").unwrap().devices.is_empty());
        assert!(Gpus::parse_flag("0,x").unwrap_err().contains("`x` is not a device index"));
        assert!(Gpus::parse_flag("1,1").unwrap_err().contains("twice"));
        assert!(Gpus::parse_flag("64").unwrap_err().contains("out of range"));
    }
}
