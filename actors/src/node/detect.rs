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
pub fn listening_ports() -> Vec<u16> {
    use std::io::Read;
    let mut ports = std::collections::BTreeSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let mut text = String::new();
        if let Ok(file) = std::fs::File::open(table) {
            let _ = file.take(MAX_SOCKET_TABLE_BYTES).read_to_string(&mut text);
        }
        ports.extend(listening_in(&text));
    }
    ports.into_iter().take(ftdrive::protocol::MAX_LISTENING_PORTS).collect()
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
