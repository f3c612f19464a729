//! The command line's shape (clap types only; the commands live one per file beside this).

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// What an attempt log keeps on disk unless `ftdrive node --max-log-mb` says otherwise: as a
/// container runtime rotates a container's log, a job that prints without end must not fill
/// its node's disk.
pub const DEFAULT_MAX_LOG_MB: u64 = 1_024;
/// `ftdrive node --min-free-disk-mb`: room for a while of an attempt's output and its records,
/// as kubelet keeps free space before it reports DiskPressure and takes no new pods.
pub const DEFAULT_MIN_FREE_DISK_MB: u64 = 64;
/// `ftdrive node --start-timeout-ms`: a fork and an exec take milliseconds; a start still not
/// done after a minute is stuck (Ray's `worker_register_timeout_seconds` is 60 s too).
pub const DEFAULT_START_TIMEOUT_MS: u64 = 60_000;
/// `ftdrive node --keep-logs-hours`: as long as the head keeps a finished job by default.
pub const DEFAULT_KEEP_LOGS_HOURS: u64 = 168;

#[derive(Debug, Parser)]
#[command(name = "ftdrive", version, about = "Fault-tolerant placement-group runtime for multi-node jobs")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the head-node daemon.
    Head(HeadArgs),
    /// Run a node agent.
    Node(NodeArgs),
    /// Submit a job and follow it to its end.
    Submit(SubmitArgs),
    /// Show jobs, or one job with its attempt ledger.
    Status(StatusArgs),
    /// List the cluster's nodes.
    Nodes(OutputArgs),
    /// Show the output of a job's actors.
    Logs(LogsArgs),
    /// Stop a job.
    Stop(JobArg),
    /// Drain a node: its work moves elsewhere, and it takes no new work until `ftdrive undrain`.
    Drain(DrainArgs),
    /// Withdraw `ftdrive drain`: the node takes new work again.
    Undrain(NodeArg),
    /// Forget a DEAD node: it leaves `ftdrive nodes`, and a node registering in its name is new.
    Forget(NodeArg),
    /// Run a scenario in the deterministic simulator.
    Sim(SimArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or PowerShell.
    Completions(CompletionsArgs),
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell, e.g. `bash`: `source <(ftdrive completions bash)` in ~/.bashrc completes
    /// every command and flag after `ftdrive`.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// `json` prints the head's own objects, one document, for scripts.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    #[command(flatten)]
    pub head: HeadUrl,
}

#[derive(Debug, Args)]
pub struct HeadUrl {
    /// The head's URL (default: $FTDRIVE_HEAD).
    #[arg(long, env = "FTDRIVE_HEAD")]
    pub head: Option<String>,
    /// The CA certificate (PEM) that an https:// head's certificate is verified with (default:
    /// $FTDRIVE_CA_CERT, else the public roots).
    #[arg(long, env = "FTDRIVE_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
}

/// How a server of ours (the head, an agent's log server) speaks: HTTPS, or plain HTTP on
/// loopback only unless `--insecure-http`.
#[derive(Debug, Args)]
pub struct ServeTls {
    /// Serve HTTPS with this certificate chain (PEM, the server's own certificate first).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve plain HTTP even on an address other machines reach: tokens and logs cross the
    /// network in clear.
    #[arg(long, conflicts_with = "tls_cert")]
    pub insecure_http: bool,
}

#[derive(Debug, Args)]
pub struct HeadArgs {
    /// Address to serve the API, the agents and the dashboard on (port 0: any free port; the
    /// URL is written to `head.url` in the state dir).
    #[arg(long, default_value = "127.0.0.1:7380")]
    pub listen: String,
    /// State database, lock and API token (default: $FTDRIVE_STATE_DIR or ~/.ftdrive).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// How often agents heartbeat.
    #[arg(long, default_value_t = 1_000)]
    pub heartbeat_interval_ms: u64,
    /// A node not heard from for this long is dead (at least 2.5 heartbeat intervals).
    #[arg(long, default_value_t = 3_000)]
    pub node_timeout_ms: u64,
    /// How long a blocked queue item lets lower items backfill.
    #[arg(long, default_value_t = 60_000)]
    pub starvation_ms: u64,
    /// While the head hears from no node at all (more likely its own network cut than every
    /// machine dead), it declares none DEAD for up to this long; 0 turns the hold off.
    #[arg(long, default_value_t = 300_000)]
    pub disruption_hold_ms: u64,
    /// Finished jobs kept for `status`; older ones are forgotten, in memory and on disk.
    #[arg(long, default_value_t = 1_000)]
    pub retain_finished: usize,
    /// How long a finished job is kept, in hours.
    #[arg(long, default_value_t = 168)]
    pub retain_finished_hours: u64,
    /// DEAD nodes kept in `ftdrive nodes` (and ready to return); the longest dead beyond this
    /// are forgotten, except those drained with `ftdrive drain`. `ftdrive forget NODE` forgets
    /// one at once.
    #[arg(long, default_value_t = 1_000)]
    pub retain_dead_nodes: usize,
    /// The first rendezvous port (`MASTER_PORT`) handed out on each machine; bundles take
    /// ports from here up, lowest free first. Choose one whose ports are free on every agent's
    /// machine.
    #[arg(long, default_value_t = 29_500)]
    pub master_port_base: u16,
    /// The most bundles one node holds, each with a rendezvous port of its own. A machine's
    /// agents share its ports from --master-port-base to 65535, this many each as they join,
    /// so at the defaults 36 agents on one machine take work and later ones get none: lower it
    /// to run more agents per machine.
    #[arg(long, default_value_t = ftdrive::config::DEFAULT_PORTS_PER_NODE)]
    pub ports_per_node: u16,
    /// An event stream with nothing to say gets a blank line this often, so that a proxy's idle
    /// timeout keeps it open and a follower can tell a quiet head from a vanished one (it gives
    /// up after three intervals of silence). 100 to 3,600,000.
    #[arg(long, default_value_t = crate::head::EVENTS_KEEPALIVE_MS,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub events_keepalive_ms: u64,
    #[command(flatten)]
    pub tls: ServeTls,
    /// The CA certificate (PEM) that agents' https:// log servers are verified with (default:
    /// $FTDRIVE_CA_CERT, else the public roots).
    #[arg(long, env = "FTDRIVE_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct NodeArgs {
    /// The head's URL (default: $FTDRIVE_HEAD).
    #[arg(long, env = "FTDRIVE_HEAD")]
    pub head: String,
    /// Node name (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// e.g. `cpu=8,memory_mb=65536` (default: detected from this machine).
    #[arg(long)]
    pub resources: Option<String>,
    /// GPU devices this node offers, e.g. `0,1,2,3`, or `none` (default: the NVIDIA devices
    /// detected). Sets the `gpu` resource to their count.
    #[arg(long)]
    pub gpus: Option<String>,
    /// e.g. `zone=a,preemptible=true`.
    #[arg(long)]
    pub labels: Option<String>,
    /// Address other ranks reach this node at (default: the one that reaches the head).
    #[arg(long)]
    pub addr: Option<String>,
    /// Logs and the token file (default: $FTDRIVE_STATE_DIR or ~/.ftdrive).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// The port of this agent's log and metrics server, on --addr (default: one the system
    /// picks at every start; the head learns it when the agent registers). A fixed port is what
    /// a firewall rule or a Prometheus static target needs.
    #[arg(long, default_value_t = 0)]
    pub log_port: u16,
    /// Read the agent token from standard input, opened by whoever starts the agent on a file
    /// its user cannot read (systemd's `StandardInput=file:PATH`): its jobs, which run as its
    /// user, then find it nowhere (docs/security.md).
    #[arg(long)]
    pub agent_token_stdin: bool,
    /// Working directory of attempts whose spec sets no `cwd` (default: the current one).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Run attempts as this user (a name, or a numeric uid) rather than the agent's: its jobs
    /// then cannot signal or trace the agent, enter its state dir or leave their cgroups. The
    /// agent must run as root; root is refused as the jobs' user (docs/security.md).
    #[arg(long, value_name = "USER")]
    pub run_jobs_as: Option<String>,
    /// On SIGTERM, how long the head gets to move this node's work before the agent exits
    /// (at most a day).
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(..=ftdrive::spec::MAX_DELAY_MS))]
    pub drain_deadline_ms: u64,
    /// How long attempts outlive this agent waiting for it to restart (default, and at most:
    /// the head's node timeout less a heartbeat interval; the head runs them elsewhere a node
    /// timeout after the agent's last heartbeat).
    #[arg(long)]
    pub reattach_grace_ms: Option<u64>,
    /// Stop every attempt here after hearing nothing from the head for this long (a network
    /// cut, or a head down that long), so that no rank runs twice once the head has placed it
    /// elsewhere; charged `node_lost` (system). Default: keep them however long the head is
    /// silent. Below the head's node timeout less a heartbeat interval and each job's
    /// `stop_grace_ms`, nothing runs twice (`docs/runtime.md`).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(100..=ftdrive::spec::MAX_DELAY_MS))]
    pub fence_after_ms: Option<u64>,
    /// Each attempt log keeps its last this many MiB on disk, or about (the start is dropped,
    /// and `ftdrive logs` says so); 0 keeps everything.
    #[arg(long, default_value_t = DEFAULT_MAX_LOG_MB)]
    pub max_log_mb: u64,
    /// The node takes no new work while the disk of its state dir has less than this many MiB
    /// free (`ftdrive nodes` says so): an attempt started there could keep no log. 0: only a
    /// disk that takes no write at all.
    #[arg(long, default_value_t = DEFAULT_MIN_FREE_DISK_MB)]
    pub min_free_disk_mb: u64,
    /// An attempt whose workers have not started this long after its start was asked for
    /// (a hung disk or mount, a fork that never returns) is killed and reported as this node's
    /// failure (`node_lost`, system budget): the rank runs elsewhere, and this node takes no new
    /// work for a while, as Ray kills a worker that does not register in time. 0: no bound.
    #[arg(long, default_value_t = DEFAULT_START_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(..=ftdrive::spec::MAX_DELAY_MS))]
    pub start_timeout_ms: u64,
    /// The logs of an attempt that ended are deleted once nothing was written to them for this
    /// many hours (its end counts as a write); 0 keeps them. The head forgets finished jobs
    /// after its --retain-finished-hours, 168 too.
    #[arg(long, default_value_t = DEFAULT_KEEP_LOGS_HOURS)]
    pub keep_logs_hours: u64,
    /// Where each attempt gets a cgroup of its own, which its processes do not leave by changing
    /// session, process group or parent: `auto`
    /// (`ftdrive` under this agent's cgroup, where cgroup v2 is mounted and writable; else
    /// none), `off`, or a directory on a cgroup v2 mount (e.g. one delegated to this agent).
    #[arg(long, default_value = "auto", value_name = "auto|off|DIR")]
    pub cgroup_parent: String,
    // How this agent's log server, which binds --addr, speaks.
    #[command(flatten)]
    pub tls: ServeTls,
    /// The CA certificate (PEM) that an https:// head's certificate is verified with (default:
    /// $FTDRIVE_CA_CERT, else the public roots).
    #[arg(long, env = "FTDRIVE_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The job spec, a JSON file (docs/jobspec.md; examples/jobs/ has two); or, instead, the
    /// job's command after `--`.
    pub job: Option<PathBuf>,
    /// A job given as its command line alone, after `--` (`ftdrive submit --nproc-per-node 2
    /// -- python3 train.py`): named after what it runs (`train.py`), on one node unless the flags say more.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    #[command(flatten)]
    pub head: HeadUrl,
    /// The job's name (overrides the spec's `name`; a command's default is its script's, `train.py`, or its program's).
    #[arg(long)]
    pub name: Option<String>,
    /// Nodes the job needs to run (overrides the spec's `min_nodes`).
    #[arg(long)]
    pub min_nodes: Option<i64>,
    /// Nodes the job grows to when they are free (overrides the spec's `max_nodes`).
    #[arg(long)]
    pub max_nodes: Option<i64>,
    /// Idle standby nodes that take over a lost node's rank at once (overrides `hot_spares`).
    #[arg(long)]
    pub hot_spares: Option<i64>,
    /// Workers each command actor runs (torchrun's `--nproc-per-node`).
    #[arg(long)]
    pub nproc_per_node: Option<i64>,
    /// Pending jobs are placed higher priority first (overrides the spec's `priority`, 0).
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// Stop the job and fail it once it has run this long, counted from its first RUNNING
    /// through every restart, as Slurm's `--time` (overrides the spec's `run_timeout_ms`).
    #[arg(long)]
    pub run_timeout_ms: Option<u64>,
    /// The working directory of every process of the job (overrides the spec's `cwd`); a
    /// relative one is taken under each agent's `--work-dir`, as Slurm's `--chdir`.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// A variable for every process of the job, added to the spec's `env` (replacing its
    /// variable of that name); repeat for more, e.g. `--env NCCL_DEBUG=INFO`.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = env_var)]
    pub env: Vec<(String, String)>,
    /// Return once the job is accepted instead of following it.
    #[arg(long)]
    pub no_wait: bool,
    /// Print every attempt's output too, as it is written, each line prefixed with its actor
    /// (`[j1/0] `), beside the job's events; the job's end waits until its last lines are read.
    /// `--logs=0,8`: only the output of those global ranks, whoever holds them, each line
    /// prefixed `[rankR] ` (torchrun's `--local-ranks-filter`, job-wide).
    #[arg(long, value_name = "RANKS", num_args = 0.., value_delimiter = ',', require_equals = true, conflicts_with = "no_wait")]
    pub logs: Option<Vec<u32>>,
    /// Check the job and print its whole spec as the head would take it (every field, the
    /// defaults and the flags' overrides in place), then exit: nothing is submitted, and no
    /// head is needed. Its output is a spec file: `-- python3 train.py` makes one to edit.
    #[arg(long, conflicts_with_all = ["no_wait", "logs", "local_nodes", "output"])]
    pub dry_run: bool,
    /// Agents of the embedded local cluster, used when no head is configured (default 3).
    #[arg(long)]
    pub local_nodes: Option<u32>,
    /// `json`: the job as JSON on stdout once it ended (with --no-wait: once accepted).
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// A job id, e.g. `j1` (default: every job, one line each).
    #[arg(value_parser = name)]
    pub job: Option<String>,
    /// Follow the job to its end, as `submit` does, and exit with its outcome (0 SUCCEEDED, 1
    /// FAILED, 3 STOPPED); Ctrl-C stops following, not the job.
    #[arg(short, long, requires = "job")]
    pub follow: bool,
    /// While following, print every attempt's output too, as it is written, each line
    /// prefixed with its actor (`[j1/0] `); `--logs=0,8`, only those global ranks' (`[rankR] `).
    #[arg(long, value_name = "RANKS", num_args = 0.., value_delimiter = ',', require_equals = true, requires = "follow")]
    pub logs: Option<Vec<u32>>,
    /// Only jobs in these states, e.g. `--state PENDING,RUNNING` (default: any).
    #[arg(long, value_delimiter = ',', value_parser = job_state, conflicts_with = "job")]
    pub state: Vec<ftdrive::driver::JobState>,
    /// Only the newest N of them (the head keeps up to `--retain-finished` finished jobs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "job")]
    pub limit: Option<u64>,
    /// Only jobs submitted before this one, e.g. `--before j40` (with `--limit`, the next page
    /// of older jobs; the listing says which `--before` comes next).
    #[arg(long, value_parser = job_id, conflicts_with = "job")]
    pub before: Option<String>,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// A job id, e.g. `j1`.
    #[arg(value_parser = name)]
    pub job: String,
    /// `j1/2` or `2` (default: every actor that ran).
    #[arg(long)]
    pub actor: Option<String>,
    /// A global rank (torchrun's `RANK`): the output of the attempt that holds it in the
    /// latest cycle that had it, or held it last; with several workers per actor, that
    /// worker's alone. Ranks move between actors as a job re-forms after a failure.
    #[arg(long, conflicts_with_all = ["actor", "attempt", "local_rank"])]
    pub rank: Option<u32>,
    /// Which attempt (default: the latest).
    #[arg(long)]
    pub attempt: Option<u32>,
    /// One worker's output (default: the group's lines interleaved, each prefixed with its
    /// global rank).
    #[arg(long)]
    pub local_rank: Option<u32>,
    /// Only the last N lines of each log (with `--follow`, then what comes after them).
    #[arg(long, value_name = "N")]
    pub tail: Option<u32>,
    /// Keep printing as the attempt writes, until it ends.
    #[arg(short, long)]
    pub follow: bool,
    #[command(flatten)]
    pub head: HeadUrl,
}

#[derive(Debug, Args)]
pub struct JobArg {
    /// A job id, e.g. `j1`.
    #[arg(value_parser = name)]
    pub job: String,
    /// `json` prints the head's answer, one document, for scripts.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    #[command(flatten)]
    pub head: HeadUrl,
}

#[derive(Debug, Args)]
pub struct DrainArgs {
    /// The node's name, as `ftdrive nodes` lists it; a DEAD node may be drained too, and comes
    /// back DRAINING.
    #[arg(value_parser = name)]
    pub node: String,
    /// How long the node's work has to stop: its processes get SIGTERM at once and SIGKILL after
    /// the lesser of the job's `stop_grace_ms` and this; each is charged to the preemption budget
    /// and re-placed elsewhere. At most a day.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(..=ftdrive::spec::MAX_DELAY_MS))]
    pub deadline_ms: u64,
    /// `json` prints the head's answer, one document, for scripts.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    #[command(flatten)]
    pub head: HeadUrl,
}

#[derive(Debug, Args)]
pub struct NodeArg {
    /// The node's name, as `ftdrive nodes` lists it.
    #[arg(value_parser = name)]
    pub node: String,
    /// `json` prints the head's answer, one document, for scripts.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    #[command(flatten)]
    pub head: HeadUrl,
}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// A scenario file (tests/scenarios/ has one per behaviour). Not with --swarm.
    #[arg(required_unless_present = "swarm", conflicts_with = "swarm")]
    pub scenario: Option<PathBuf>,
    /// Seed for the run (default: the scenario's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write one JSON line per transition and placement to this file (with --swarm: the last seed's).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    /// Generate random clusters, jobs and faults, one case per seed.
    #[arg(long)]
    pub swarm: bool,
    /// How many seeds the swarm runs [default: 100].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: Option<u64>,
    /// First seed of the swarm [default: 0].
    #[arg(long)]
    pub start_seed: Option<u64>,
    /// Run each seed twice and compare the hashes of the traces.
    #[arg(long)]
    pub check_determinism: bool,
    /// Print the seed's generated scenario as a scenario file (to replay or edit it; with
    /// `--seeds 1`).
    #[arg(long)]
    pub print_scenario: bool,
}

/// A job state for `status --state`, named as `status` prints it (in any case).
fn job_state(text: &str) -> Result<ftdrive::driver::JobState, String> {
    use ftdrive::driver::JobState;
    JobState::parse(text).ok_or_else(|| format!("no job state is called `{text}`: use {}", JobState::names()))
}

/// A job id as `--before` takes it: a minted one (`j40`), since ids are numbered in
/// submission order.
fn job_id(text: &str) -> Result<String, String> {
    match ftdrive::JobId::new(text).number() {
        Some(_) => Ok(text.to_string()),
        None => Err(format!("`{text}` is no job id: give one such as `j40`")),
    }
}

/// `NAME=VALUE`, split at its first `=` (a value may hold more), as `env` and `docker run
/// --env` take it; the name is checked with the spec's.
fn env_var(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("takes NAME=VALUE, e.g. NCCL_DEBUG=INFO, not `{}`", text.escape_debug())),
    }
}

/// A job id or node name, refused here by the head's own rule before anything is asked of it
/// (an empty or `a/b` name would otherwise reach the head as another route).
fn name(text: &str) -> Result<String, String> {
    ftdrive::head::check_name(text).map(|()| text.to_string()).map_err(|e| e.to_string())
}
