//! Messages between the head and node agents, as data. The runtime carries them over a
//! socket and the simulator over its simulated network; both use these types, and both run
//! the same agent protocol (`agent.rs`) and head (`head/`) on them.

use crate::ids::{ActorIx, JobId, NodeId};
use crate::resources::{Devices, Labels, Resources};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Names one attempt of one command actor. Every message about a process carries it, so a
/// message from an older attempt or cycle can be recognised and ignored.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AttemptKey {
    pub job: JobId,
    pub actor: ActorIx,
    pub attempt: u32,
    pub cycle: u32,
}

impl fmt::Display for AttemptKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} attempt {} cycle {}", self.job, self.actor, self.attempt, self.cycle)
    }
}

/// Everything an agent needs to start one attempt: a group of `nproc_per_node` workers, each
/// `command` (argv, no shell) with `env` added to the agent's environment — worker 0's as it
/// is, every other worker's with its own variables (`worker_vars`) — in `cwd`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartSpec {
    pub key: AttemptKey,
    /// `<job>/<index>`.
    pub actor_name: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub stop_grace_ms: u64,
    #[serde(default = "one")]
    pub nproc_per_node: u32,
    /// The actor's rank in its cycle (`GROUP_RANK`).
    #[serde(default)]
    pub group_rank: u32,
}

fn one() -> u32 {
    1
}

impl StartSpec {
    /// What worker `local_rank` of this group has of its own (`RANK`, `LOCAL_RANK`, `ROLE_RANK`).
    pub fn worker_vars(&self, local_rank: u32) -> [(&'static str, String); 3] {
        crate::driver::env_worker_vars(self.group_rank, self.nproc_per_node, local_rank)
    }
}

/// How a process — or, for a group of workers, the first one to fail — ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The agent sent the signal that ended it (a stop request, or the agent shutting down).
    pub signalled_by_agent: bool,
    /// Of a group of several workers: the local rank of the worker this status is of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<u32>,
    /// The attempt's supervisor died without recording the end (killed outright), and the
    /// agent ended its workers: ftdrive's own failure, not the program's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub supervisor_lost: bool,
    /// What the program said of its failure, in its own words: the message a PyTorch program
    /// decorated with `@record` writes to `$TORCHELASTIC_ERROR_FILE` (such as `ValueError:
    /// loss is NaN`). At most `MAX_ERROR_CHARS` (`bounded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its supervisor ended it because no agent came back within the re-attach grace (with
    /// `signalled_by_agent`): its agent went and stayed away.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub orphaned: bool,
    /// Its agent stopped it after hearing nothing from the head for `ftdrive node
    /// --fence-after-ms` (AG-7; with `signalled_by_agent`): the node was cut off, not the
    /// program at fault. When that fence closed, on the agent's clock (ms, in 32 bits: it
    /// only tells one fence from another, and so fits where the flags leave room, keeping every
    /// message that holds a status as small as it was): the attempts one fence stops share it,
    /// and are one fault (FC-1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<std::num::NonZeroU32>,
    /// When the attempt ended, as its supervisor saw it (Unix ms): an end reported late (its
    /// agent or the head was away) is recorded when it happened, not when it was heard of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    /// Output the attempt's log never took, after the last of it that it did (a disk that
    /// stayed full to the end): no line in the log can say so, so its ledger entry does. At
    /// most `MAX_ERROR_CHARS` (`bounded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unlogged: Option<String>,
}

/// The most of a program's own error message that its attempt's record keeps: a sentence
/// for the ledger, not a traceback (that stays in the attempt's log).
pub const MAX_ERROR_CHARS: usize = 300;

/// The most of a spawn failure's message that a report carries and the ledger keeps.
pub const MAX_SPAWN_MESSAGE_CHARS: usize = 1_000;

/// Unicode's bidirectional formatting characters (marks, embeddings, overrides, isolates): one
/// left open in a job's text (a program's name, its error) reverses the sentence ftdrive writes
/// around it, in a terminal or the dashboard, as "Trojan Source" reorders code.
const BIDI_CONTROLS: [char; 12] = [
    '\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}',
    '\u{2067}', '\u{2068}', '\u{2069}',
];

/// A character no text ftdrive shows may hold as it is: a control character, or one that
/// reorders the text around it.
pub fn unprintable(c: char) -> bool {
    c.is_control() || BIDI_CONTROLS.contains(&c)
}

/// Text a job wrote, made fit for the ledger and a terminal: whitespace runs made one space,
/// other control characters (a terminal's escape sequences: erasing a line, writing the
/// clipboard) and bidirectional overrides shown as `?`, and cut to `max_chars` (the last one
/// then `…`).
pub fn one_line(text: &str, max_chars: usize) -> String {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() {
            line.push(' ');
        }
        line.extend(word.chars().map(|c| if unprintable(c) { '?' } else { c }));
    }
    if let Some((cut, _)) = line.char_indices().nth(max_chars.saturating_sub(1)) {
        line.truncate(cut);
        line.push('…');
    }
    line
}

impl ExitStatus {
    /// When the attempt ended: as reported, kept between its start and when the head `heard`
    /// of the end (a machine's clock may be off), else when the head heard of it.
    pub fn ended_at(&self, started: Instant, heard: Instant) -> Instant {
        self.ended_ms.map_or(heard, |ms| Instant::from_ms(ms).clamp(started, heard.max(started)))
    }

    pub fn code(code: i32) -> Self {
        ExitStatus {
            code: Some(code),
            signal: None,
            signalled_by_agent: false,
            worker: None,
            supervisor_lost: false,
            error: None,
            orphaned: false,
            fence: None,
            ended_ms: None,
            unlogged: None,
        }
    }

    pub fn signal(signal: i32, by_agent: bool) -> Self {
        ExitStatus {
            code: None,
            signal: Some(signal),
            signalled_by_agent: by_agent,
            worker: None,
            supervisor_lost: false,
            error: None,
            orphaned: false,
            fence: None,
            ended_ms: None,
            unlogged: None,
        }
    }

    /// What an agent reports when told to stop an attempt it never started: the process never
    /// existed, and a start that arrives later will be ignored.
    pub fn never_started() -> Self {
        ExitStatus { code: None, signal: None, signalled_by_agent: true, ..ExitStatus::code(0) }
    }

    /// Whether this is an agent's report that it never started the attempt.
    pub fn is_never_started(&self) -> bool {
        *self == ExitStatus::never_started()
    }

    /// What the agent reports for an attempt whose supervisor died without a record: its
    /// workers were SIGKILLed by the agent. (`signalled_by_agent` is the agent core's to set,
    /// from whether it had asked for a stop.)
    pub fn supervisor_lost() -> Self {
        ExitStatus { supervisor_lost: true, ..ExitStatus::signal(9, false) }
    }

    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// With the program's own words on its failure, as `one_line` makes them; nothing for an
    /// empty message.
    pub fn with_error(self, said: &str) -> Self {
        let error = one_line(said, MAX_ERROR_CHARS);
        ExitStatus { error: (!error.is_empty()).then_some(error), ..self }
    }

    /// As received from an agent, which the head trusts with no more than `MAX_ERROR_CHARS`
    /// in each of its texts.
    pub fn bounded(mut self) -> Self {
        self.unlogged = self.unlogged.map(|note| one_line(&note, MAX_ERROR_CHARS));
        match self.error.take() {
            Some(error) => self.with_error(&error),
            None => self,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exited with code {code}"),
            (None, Some(sig)) if self.signalled_by_agent => write!(f, "was killed by signal {sig} sent by the agent"),
            (None, Some(sig)) => write!(f, "was killed by signal {sig} (not sent by the agent)"),
            (None, None) if self.signalled_by_agent => f.write_str("never started (stopped before it ran)"),
            (None, None) => f.write_str("ended without an exit status"),
        }
    }
}

/// Head → agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToAgent {
    /// The registration was accepted; heartbeat this often. A node not heard from for
    /// `node_timeout_ms` is declared dead (an agent's supervisors wait as long for it).
    Welcome {
        heartbeat_interval_ms: u64,
        #[serde(default)]
        node_timeout_ms: u64,
        /// What the head will present to this agent's log server for this session (DESIGN
        /// §11): not the agent token, which whoever took over the log server's port (a job
        /// that killed its agent) would then hold. Made by the head's runtime.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        log_token: Option<String>,
        /// The head's cluster (made with its database; the runtime's): an agent that ran
        /// another's attempts forgets those it remembers, whose ids this head hands out anew.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        cluster: String,
    },
    /// A message was refused. `register_again`: the head does not know this agent (declared
    /// dead, or the registration was lost) and it should register again.
    Refused { reason: String, register_again: bool },
    /// The registration was refused: another agent, alive, holds this node name (DESIGN §11).
    /// The agent exits rather than retry: two machines under one name would run work twice.
    NameInUse { reason: String },
    /// Start this attempt unless it is already running or finished (the head may resend).
    /// Shared with the head's record of the attempt, which keeps it to send again: a start's
    /// environment is dozens of strings, not copied for every start.
    Start(Arc<StartSpec>),
    /// Stop this attempt: SIGTERM, then SIGKILL after `grace_ms`. An attempt the agent never
    /// started is reported as `ExitStatus::never_started()` and never starts afterwards.
    Stop { key: AttemptKey, grace_ms: u64 },
    /// The head has recorded this attempt's exit; the agent may forget it.
    AckExit { key: AttemptKey },
}

impl ToAgent {
    /// The attempt this message is about, if any.
    pub fn key(&self) -> Option<&AttemptKey> {
        match self {
            ToAgent::Start(spec) => Some(&spec.key),
            ToAgent::Stop { key, .. } | ToAgent::AckExit { key } => Some(key),
            ToAgent::Welcome { .. } | ToAgent::Refused { .. } | ToAgent::NameInUse { .. } => None,
        }
    }
}

/// An agent's registration. `running`: the attempts it has processes for (re-attached ones
/// included); `ended`: attempts whose end it has not had acknowledged — their reports follow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub node: NodeId,
    pub incarnation: u64,
    pub resources: Resources,
    pub labels: Labels,
    /// Where other ranks reach this node (`MASTER_ADDR`).
    pub addr: String,
    /// Its GPU devices, when it names them (else `gpu` devices numbered from 0).
    #[serde(default)]
    pub devices: Option<Devices>,
    /// The ports it listens on, as a key shared by every agent on the same machine's ports
    /// (machine and network namespace): nodes with one key draw rendezvous ports from one pool,
    /// so no two of their bundles get the same `MASTER_PORT`. Empty: a pool of its own.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub port_space: String,
    /// The TCP ports listening on its machine as it registers (as `ToHead::Listening` says of
    /// later changes): in the registration itself, so that work waiting for this node is not
    /// placed on a busy port before the head hears of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listening: Vec<u16>,
    /// Base URL of this agent's log server (the runtime's; the core ignores it).
    #[serde(default)]
    pub log_url: String,
    /// A secret the agent keeps with its state (the runtime's; the core ignores it): while a
    /// session of this node is alive, only a registration with the same identity may take
    /// the name over — the same agent reconnecting, not a second machine under its name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub identity: String,
    /// The cluster (a head's database) whose attempts this agent ran last, as a welcome named
    /// it; empty before any did. A head of another cluster refuses an agent that runs or owes
    /// the end of attempts (they are not its jobs), and never stops them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    /// What keeps the node from starting work, as `ToHead::Health` says of later changes: in
    /// the registration, so that a restarted head places nothing there meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    #[serde(default)]
    pub running: Vec<AttemptKey>,
    #[serde(default)]
    pub ended: Vec<AttemptKey>,
}

/// What a node that could not start an attempt says of its health (AG-6), from the failure.
pub fn cannot_start(message: &str) -> String {
    format!("cannot start attempts: {message}")
}

/// Most listening ports an agent reports (`ToHead::Listening`), the lowest.
pub const MAX_LISTENING_PORTS: usize = 4_096;

/// Agent → head: everything an agent may say. The runtime carries it over a WebSocket, the
/// simulator over its simulated network; nothing else an agent sends is accepted (it cannot,
/// say, submit or stop a job).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToHead {
    /// The agent (re)connects (boxed: rare, and large beside a heartbeat).
    Register(Box<Registration>),
    /// `problem`: what keeps the node from starting work, while anything does (AG-6): health
    /// is state, said again with every heartbeat, as a lost `Health` would leave it wrong.
    Heartbeat {
        node: NodeId,
        incarnation: u64,
        seq: u64,
        running: Vec<AttemptKey>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        problem: Option<String>,
    },
    /// The attempt's command runs, under this agent run (`incarnation`).
    Started {
        node: NodeId,
        incarnation: u64,
        key: AttemptKey,
    },
    Exited {
        node: NodeId,
        key: AttemptKey,
        status: ExitStatus,
    },
    /// The attempt did not start. `node_fault`: the node could not start it (its agent's
    /// state dir took no write, a fork failed), not the program — charged as `node_lost`, and
    /// the agent says it is unhealthy (`Health`) before it sends this.
    SpawnFailed {
        node: NodeId,
        key: AttemptKey,
        message: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        node_fault: bool,
    },
    /// What keeps the node from starting work (`problem`: its state dir takes no write), or
    /// that nothing does any more (`None`). An unhealthy node keeps what runs there and is
    /// given nothing new (docs/semantics.md), as a Kubernetes node under DiskPressure or a
    /// Slurm node drained for a failed launch.
    Health {
        node: NodeId,
        incarnation: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        problem: Option<String>,
    },
    /// The TCP ports listening on this node's machine (its network namespace), 1024 and up,
    /// when they changed since the agent last said (its registration included). The head hands
    /// out rendezvous ports that no process listens on, where it has any (cluster.rs, PS-3).
    Listening {
        node: NodeId,
        incarnation: u64,
        ports: Vec<u16>,
    },
    /// This machine goes away within `deadline_ms`, says agent run `incarnation` (absent from
    /// agents older than it: taken as the current run's).
    PreemptionNotice {
        node: NodeId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        incarnation: Option<u64>,
        deadline_ms: u64,
    },
}

impl ToHead {
    pub fn node(&self) -> &NodeId {
        match self {
            ToHead::Register(r) => &r.node,
            ToHead::Heartbeat { node, .. }
            | ToHead::Started { node, .. }
            | ToHead::Exited { node, .. }
            | ToHead::SpawnFailed { node, .. }
            | ToHead::Health { node, .. }
            | ToHead::Listening { node, .. }
            | ToHead::PreemptionNotice { node, .. } => node,
        }
    }

    /// The attempt this message reports on, if it reports on one.
    pub fn attempt(&self) -> Option<&AttemptKey> {
        match self {
            ToHead::Started { key, .. } | ToHead::Exited { key, .. } | ToHead::SpawnFailed { key, .. } => Some(key),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_end_is_kept_between_the_start_and_when_it_was_heard_of() {
        let (started, heard) = (Instant::from_ms(1_000), Instant::from_ms(5_000));
        let at = |ms| ExitStatus { ended_ms: ms, ..ExitStatus::code(1) }.ended_at(started, heard).as_ms();
        assert_eq!(at(Some(2_500)), 2_500, "as reported");
        assert_eq!(at(None), 5_000, "when heard of");
        assert_eq!(at(Some(10)), 1_000, "a clock behind: not before the start");
        assert_eq!(at(Some(9_000)), 5_000, "a clock ahead: not after it was heard of");
    }

    #[test]
    fn a_programs_words_are_one_line_of_bounded_length() {
        let said = ExitStatus::code(1).with_error("Traceback:\n  boom\t\n\nValueError:   x  ");
        assert_eq!(said.error.as_deref(), Some("Traceback: boom ValueError: x"));
        let long = ExitStatus::code(1).with_error(&"é".repeat(5 * MAX_ERROR_CHARS));
        let kept = long.error.clone().unwrap();
        assert_eq!(kept.chars().count(), MAX_ERROR_CHARS, "cut on a character, not a byte");
        assert!(kept.ends_with("é…"));
        assert_eq!(long.clone().bounded(), long, "a bounded message stays as it is");
        assert_eq!(ExitStatus::code(1).with_error(" \n "), ExitStatus::code(1), "nothing said, nothing kept");
        let sent = ExitStatus { error: Some("x ".repeat(MAX_ERROR_CHARS)), ..ExitStatus::code(1) };
        assert_eq!(sent.bounded().error.unwrap().chars().count(), MAX_ERROR_CHARS, "an agent's report is cut too");
    }

    /// A job's text reaches terminals (`ftdrive status`): no escape sequence gets through.
    #[test]
    fn a_programs_words_carry_no_terminal_control() {
        let said = ExitStatus::code(1).with_error("\x1b[2K\x1b[1G fake row \x1b]52;c;ZWNobw==\x07\u{9b}31m");
        assert_eq!(said.error.as_deref(), Some("?[2K?[1G fake row ?]52;c;ZWNobw==??31m"));
        // Nor a bidirectional override left open, which reversed the sentence written around it.
        let said = ExitStatus::code(1).with_error("no such file \u{202E}txt.exe\u{2066}x\u{200F}");
        assert_eq!(said.error.as_deref(), Some("no such file ?txt.exe?x?"));
        assert_eq!(one_line("שלום عربي 🙂", 50), "שלום عربي 🙂", "right-to-left text itself stays");
    }

    /// Statuses with nothing said read and write as they did before there was anything to say:
    /// old agents, records and simulator traces stay valid.
    #[test]
    fn a_status_without_words_has_no_error_field() {
        let json = serde_json::to_string(&ExitStatus::code(1)).unwrap();
        assert!(!json.contains("error"), "{json}");
        let read: ExitStatus = serde_json::from_str(r#"{"code":1,"signal":null,"signalled_by_agent":false}"#).unwrap();
        assert_eq!(read, ExitStatus::code(1));
    }
}
