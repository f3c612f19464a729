//! The job spec (`job.json`, DESIGN §4): parsing, defaults, command-line overrides and
//! validation. Every error names the field and says how to fix it.

use crate::driver::Budget;
use crate::resources::{Labels, Resources};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Most command actors one job may ask for (`max_nodes`).
pub const MAX_NODES_PER_JOB: i64 = 10_000;
/// Most hot spares one job may ask for.
pub const MAX_HOT_SPARES: i64 = 1_024;
/// Most workers one command actor may run (`nproc_per_node`).
pub const MAX_NPROC_PER_NODE: i64 = 1_024;
/// Most retries any one budget may hold (`-1` means unlimited and is always allowed).
pub const MAX_BUDGET: i64 = 1_000_000;
/// Longest delay any `*_ms` field may hold: one day.
pub const MAX_DELAY_MS: u64 = 86_400_000;
/// Longest `run_timeout_ms`: a year (training runs for weeks; a limit is still a limit).
pub const MAX_RUN_TIMEOUT_MS: u64 = 366 * MAX_DELAY_MS;
const MAX_NAME_LEN: usize = 63;
const MAX_ARGS: usize = 1_024;
const MAX_ARG_BYTES: usize = 4_096;
const MAX_ENV_VARS: usize = 1_024;
/// Longest value of one `env` variable: every start of every attempt carries it.
pub const MAX_ENV_VALUE_BYTES: usize = 32 * 1024;
/// Most bytes of `env` in all, names and values.
pub const MAX_ENV_TOTAL_BYTES: usize = 256 * 1024;

/// How the bundles of one placement group are laid out over nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Strategy {
    /// One bundle per node, never two on one node.
    #[default]
    StrictSpread,
    /// One bundle per node while nodes last, then share.
    Spread,
    /// As few nodes as possible.
    Pack,
    /// All bundles on one node.
    StrictPack,
}

/// What a failure restarts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RestartMode {
    /// torchelastic: any failure restarts every rank in a new cycle.
    #[default]
    Gang,
    /// torchx: only the failed actor restarts, keeping its rank.
    Actor,
}

/// Exponential backoff between retries, in milliseconds. A field left out takes its default,
/// as the Python client's `Backoff` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Backoff {
    pub initial: u64,
    pub max: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { initial: 1_000, max: 30_000 }
    }
}

/// Retry budgets (DESIGN §6), written as counts with `-1` for unlimited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    pub user: Budget,
    pub system: Budget,
    pub preemption: Budget,
    pub single_budget: bool,
    pub non_retryable_exit_codes: Vec<i32>,
    pub backoff_ms: Backoff,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            user: Budget::Left(0),
            system: Budget::Left(3),
            preemption: Budget::Unlimited,
            single_budget: false,
            non_retryable_exit_codes: Vec::new(),
            backoff_ms: Backoff::default(),
        }
    }
}

/// A validated job spec: every field present, every value in range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawJobSpec")]
pub struct JobSpec {
    pub name: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub min_nodes: u32,
    pub max_nodes: u32,
    pub hot_spares: u32,
    /// Workers each command actor runs, as torchrun's `--nproc-per-node` (DESIGN §4).
    pub nproc_per_node: u32,
    pub bundle: Resources,
    pub strategy: Strategy,
    pub node_selector: Labels,
    pub pack_by: Option<String>,
    pub priority: i32,
    pub restart: RestartMode,
    pub retries: RetryPolicy,
    pub last_attempt_non_preemptible: bool,
    pub scale_up_delay_ms: u64,
    pub stop_grace_ms: u64,
    pub schedule_timeout_ms: Option<u64>,
    /// How long the job may run, counted from when it first ran and through every restart,
    /// before it is stopped and fails (Slurm's `--time`, a Kubernetes Job's
    /// `activeDeadlineSeconds`). `None`: no limit.
    pub run_timeout_ms: Option<u64>,
}

/// The spec as written: only `name`, `command`, `min_nodes` and `max_nodes` are required.
/// Counts are read as signed integers so that a negative one gets our own message.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJobSpec {
    pub name: Option<String>,
    pub command: Option<Vec<String>>,
    #[serde(default, deserialize_with = "unique_strings")]
    pub env: Option<BTreeMap<String, String>>,
    pub cwd: Option<String>,
    pub min_nodes: Option<i64>,
    pub max_nodes: Option<i64>,
    pub hot_spares: Option<i64>,
    pub nproc_per_node: Option<i64>,
    pub bundle: Option<Resources>,
    pub strategy: Option<Strategy>,
    #[serde(default, deserialize_with = "unique_strings")]
    pub node_selector: Option<Labels>,
    pub pack_by: Option<String>,
    pub priority: Option<i32>,
    pub restart: Option<RestartMode>,
    pub retries: Option<RawRetries>,
    pub last_attempt_non_preemptible: Option<bool>,
    pub scale_up_delay_ms: Option<u64>,
    pub stop_grace_ms: Option<u64>,
    pub schedule_timeout_ms: Option<u64>,
    pub run_timeout_ms: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetries {
    pub user: Option<i64>,
    pub system: Option<i64>,
    pub preemption: Option<i64>,
    pub single_budget: Option<bool>,
    pub non_retryable_exit_codes: Option<Vec<i32>>,
    pub backoff_ms: Option<Backoff>,
}

/// Command-line flags that override spec fields (`--min-nodes` and friends).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub name: Option<String>,
    pub min_nodes: Option<i64>,
    pub max_nodes: Option<i64>,
    pub hot_spares: Option<i64>,
    pub nproc_per_node: Option<i64>,
    pub priority: Option<i32>,
    pub run_timeout_ms: Option<u64>,
    pub cwd: Option<String>,
    /// Variables added to the spec's `env`, each replacing the spec's of its name.
    pub env: BTreeMap<String, String>,
}

/// A job spec that cannot be accepted, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("job spec field `{field}`: {message}")]
pub struct SpecError {
    /// Dotted path of the offending field (`retries.user`), or `(document)`.
    pub field: String,
    pub message: String,
}

impl SpecError {
    fn new(field: &str, message: impl fmt::Display) -> Self {
        SpecError { field: field.to_string(), message: message.to_string() }
    }
}

impl JobSpec {
    /// Parses and validates `job.json` text, applying command-line overrides first.
    pub fn parse(text: &str, overrides: &Overrides) -> Result<JobSpec, SpecError> {
        let raw: RawJobSpec = parse_object(
            text,
            r#"{"name": "train", "command": ["python", "train.py"], "min_nodes": 1, "max_nodes": 1}"#,
        )
        .map_err(|(field, message)| SpecError::new(&field, message))?;
        let raw = raw.with_overrides(overrides);
        admission_checks(&raw)?;
        raw.validate()
    }

    /// The spec of a job given as a command line alone (`ftdrive submit -- python train.py`,
    /// as `ray job submit -- …` and `sbatch --wrap` take one): named after what it runs
    /// (`name_of_command`), on one node, or on `--min-nodes` of them when only that is given;
    /// the overrides set the rest and are checked as a file's are.
    pub fn from_command(command: Vec<String>, overrides: &Overrides) -> Result<JobSpec, SpecError> {
        let name = name_of_command(&command);
        let raw = RawJobSpec {
            name: Some(name),
            command: Some(command),
            min_nodes: Some(1),
            max_nodes: Some(overrides.min_nodes.unwrap_or(1).max(1)),
            ..RawJobSpec::default()
        };
        let raw = raw.with_overrides(overrides);
        admission_checks(&raw)?;
        raw.validate()
    }

    /// The spec of a minimal job, for tests and examples.
    pub fn minimal(name: &str, command: &[&str], min_nodes: u32, max_nodes: u32) -> JobSpec {
        RawJobSpec {
            name: Some(name.to_string()),
            command: Some(command.iter().map(|s| s.to_string()).collect()),
            min_nodes: Some(min_nodes.into()),
            max_nodes: Some(max_nodes.into()),
            ..RawJobSpec::default()
        }
        .validate()
        .expect("minimal spec is valid")
    }

    /// Stands in for a spec that is stored elsewhere until it is put back (a driver's state
    /// snapshot does not carry its spec).
    pub fn placeholder() -> JobSpec {
        JobSpec::minimal("placeholder", &["true"], 1, 1)
    }

    /// Number of command actors the driver creates: `max_nodes + hot_spares`.
    pub fn actor_count(&self) -> u32 {
        self.max_nodes + self.hot_spares
    }
}

/// A JSON document that must be an object, read with the place of any error. serde fills a
/// struct from an array by position, so a `[...]` (a list of jobs, say) would run as the
/// fields in declaration order: it is refused before it is read. `example` shows the object.
pub(crate) fn parse_object<T: serde::de::DeserializeOwned>(text: &str, example: &str) -> Result<T, (String, String)> {
    let found = match text.trim_start().chars().next() {
        Some('{') => None,
        None => Some("empty"),
        Some('[') => Some("a JSON array"),
        Some(_) => Some("not a JSON object"),
    };
    if let Some(found) = found {
        return Err(("(document)".to_string(), format!("is {found}; write one JSON object, such as {example}")));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut de).map_err(placed_error)?;
    // Two specs run together, or text left after the object, would otherwise run the first
    // alone without a word.
    de.end().map_err(|e| {
        ("(document)".to_string(), format!("has more after its one JSON object ({e}); a file holds one object"))
    })?;
    Ok(value)
}

/// An object of strings whose keys are each given once (or `null`): serde keeps the last of a
/// repeated key, and a user who wrote one twice meant one of them (`placed_error` names it).
fn unique_strings<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Unique(BTreeMap<String, String>);
    impl<'de> Deserialize<'de> for Unique {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_map(UniqueVisitor)
        }
    }
    struct UniqueVisitor;
    impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
        type Value = Unique;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object of strings")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((key, value)) = map.next_entry::<String, String>()? {
                if out.contains_key(&key) {
                    return Err(serde::de::Error::custom(format!("duplicate field `{key}`")));
                }
                out.insert(key, value);
            }
            Ok(Unique(out))
        }
    }
    Ok(Option::<Unique>::deserialize(d)?.map(|u| u.0))
}

/// Where a JSON document was refused, and why: the dotted path of the field at fault, or
/// `(document)`. Broken syntax (a missing brace, a trailing comma, an empty file) has no field
/// that means anything, so its line and column are kept: they are where to look.
pub(crate) fn placed_error(err: serde_path_to_error::Error<serde_json::Error>) -> (String, String) {
    let path = err.path().to_string();
    let inner = err.into_inner();
    if inner.is_syntax() || inner.is_eof() {
        return ("(document)".to_string(), format!("is not valid JSON: {inner}; fix the syntax there"));
    }
    let field = if path == "." || path.is_empty() { "(document)".to_string() } else { path };
    let message = inner.to_string();
    // serde names the object that holds a repeated key; the key is the field at fault.
    if let Some(key) = message.strip_prefix("duplicate field `").and_then(|rest| rest.split('`').next()) {
        let field = if field == "(document)" { key.to_string() } else { format!("{field}.{key}") };
        return (field, "is given twice; give it once".to_string());
    }
    let message = friendlier(&message);
    // A command line written as one string (Slurm's, a shell's) is split by nobody here: the
    // program and each argument are items of a list, as Kubernetes' `command` is.
    if field == "command" && message.starts_with("invalid type: string") {
        return (field, format!("{message}: the program and its arguments, each a string, such as [\"python3\", \"train.py\"], or [\"sh\", \"-c\", \"...\"] to run it through a shell"));
    }
    (field, message)
}

/// serde's messages say `i64`/`u32`/`struct HeadConfig`; users think in integers and objects.
/// A misspelt field is told the field it was probably meant to be. Scenario files get the same
/// wording.
pub(crate) fn friendlier(message: &str) -> String {
    let mut message = message.to_string();
    for (rust, json) in [
        ("i64", "an integer"),
        ("i32", "an integer from -2147483648 to 2147483647"),
        ("u64", "a non-negative integer"),
        ("u32", "an integer from 0 to 4294967295"),
        ("u16", "an integer from 0 to 65535"),
        ("f64", "a number"),
        ("a sequence", "a JSON array"),
        ("a map", "a JSON object"),
    ] {
        message = message.replace(&format!("expected {rust}"), &format!("expected {json}"));
    }
    // serde_json reads an integer too large for 64 bits as a float, and names the float.
    if let Some(rest) = message.strip_prefix("invalid type: floating point `") {
        if let Some((float, expected)) = rest.split_once("`, ") {
            message = format!("{float} is not a whole number, or too large for one; {expected}");
        }
    }
    const STRUCT: &str = "expected struct ";
    if let Some(at) = message.find(STRUCT) {
        let name = at + STRUCT.len();
        let end = message[name..].find(|c: char| !c.is_alphanumeric()).map_or(message.len(), |len| name + len);
        message.replace_range(at..end, "expected a JSON object");
    }
    let message = match message.find(" at line ") {
        Some(cut) => message[..cut].to_string(),
        None => message,
    };
    with_suggestion(message)
}

/// Most edits between a misspelt field and the known one suggested for it.
const MAX_SUGGESTION_EDITS: usize = 2;

/// serde's "unknown field `prority`, expected one of `name`, …" gains "did you mean
/// `priority`?" when a known field is at most `MAX_SUGGESTION_EDITS` edits away (the nearest;
/// ties by name; case aside); so does an unknown variant (`"strategy": "strict_spread"`).
fn with_suggestion(message: String) -> String {
    let Some((what, rest)) = ["field", "variant"]
        .iter()
        .find_map(|what| message.strip_prefix(&format!("unknown {what} `")).map(|rest| (*what, rest)))
    else {
        return message;
    };
    let Some((unknown, expected)) = rest.split_once("`, expected ") else { return message };
    let known = expected.split('`').skip(1).step_by(2);
    match nearest(unknown, known) {
        Some(name) => format!("unknown {what} `{unknown}`; did you mean `{name}`? (expected {expected})"),
        None => message,
    }
}

/// The known name `unknown` was probably meant to be: the nearest at most
/// `MAX_SUGGESTION_EDITS` edits away (ties by name; case aside), if any.
pub(crate) fn nearest<'a>(unknown: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let lowered = unknown.to_lowercase();
    known
        .map(|name| (edit_distance(&lowered, &name.to_lowercase()), name))
        .min()
        .filter(|(edits, _)| *edits <= MAX_SUGGESTION_EDITS)
        .map(|(_, name)| name)
}

/// Levenshtein distance: insertions, deletions and substitutions of characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

impl RawJobSpec {
    pub fn with_overrides(mut self, o: &Overrides) -> Self {
        self.name = o.name.clone().or(self.name);
        self.min_nodes = o.min_nodes.or(self.min_nodes);
        self.max_nodes = o.max_nodes.or(self.max_nodes);
        self.hot_spares = o.hot_spares.or(self.hot_spares);
        self.nproc_per_node = o.nproc_per_node.or(self.nproc_per_node);
        self.priority = o.priority.or(self.priority);
        self.run_timeout_ms = o.run_timeout_ms.or(self.run_timeout_ms);
        self.cwd = o.cwd.clone().or(self.cwd);
        if !o.env.is_empty() {
            let env = self.env.get_or_insert_with(BTreeMap::new);
            env.extend(o.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        self
    }

    pub fn validate(self) -> Result<JobSpec, SpecError> {
        let name = required(self.name, "name", "\"name\": \"my-job\"")?;
        check_name(&name)?;
        let command = required(self.command, "command", "\"command\": [\"python3\", \"train.py\"]")?;
        check_command(&command)?;
        let env = self.env.unwrap_or_default();
        check_env(&env)?;
        let min_nodes = required(self.min_nodes, "min_nodes", "\"min_nodes\": 1")?;
        let max_nodes = required(self.max_nodes, "max_nodes", "\"max_nodes\": 1")?;
        check_nodes(min_nodes, max_nodes)?;
        let hot_spares = self.hot_spares.unwrap_or(0);
        check_range("hot_spares", hot_spares, 0, MAX_HOT_SPARES)?;
        let nproc_per_node = self.nproc_per_node.unwrap_or(1);
        check_range("nproc_per_node", nproc_per_node, 1, MAX_NPROC_PER_NODE)?;
        let bundle = self.bundle.unwrap_or_else(|| Resources::units(&[("cpu", 1)]));
        if bundle.iter().all(|(_, amount)| amount == 0) {
            // As Ray refuses an empty bundle: it would fit everywhere, any number of times.
            return Err(SpecError::new("bundle", "asks for nothing; give what one node's share needs, such as {\"cpu\": 1}, or leave it out for that default"));
        }
        check_whole_gpus(&bundle)?;
        crate::resources::check_kinds(&bundle).map_err(|e| SpecError::new("bundle", e))?;
        if let Some(selector) = &self.node_selector {
            crate::resources::check_labels(selector).map_err(|e| SpecError::new("node_selector", e))?;
        }
        if self.cwd.as_deref() == Some("") {
            return Err(SpecError::new(
                "cwd",
                "is empty; give a directory that exists on every node, or leave it out for the agent's --work-dir",
            ));
        }
        if self.pack_by.as_deref() == Some("") {
            return Err(SpecError::new("pack_by", "is empty; give a label key such as \"rack\", or null"));
        }
        let retries = self.retries.unwrap_or_default().validate()?;
        let scale_up_delay_ms = check_delay("scale_up_delay_ms", self.scale_up_delay_ms.unwrap_or(5_000))?;
        let stop_grace_ms = check_delay("stop_grace_ms", self.stop_grace_ms.unwrap_or(10_000))?;
        let schedule_timeout_ms = check_timeout("schedule_timeout_ms", self.schedule_timeout_ms, MAX_DELAY_MS)?;
        let run_timeout_ms = check_timeout("run_timeout_ms", self.run_timeout_ms, MAX_RUN_TIMEOUT_MS)?;
        Ok(JobSpec {
            name,
            command,
            env,
            cwd: self.cwd,
            min_nodes: min_nodes as u32,
            max_nodes: max_nodes as u32,
            hot_spares: hot_spares as u32,
            nproc_per_node: nproc_per_node as u32,
            bundle,
            strategy: self.strategy.unwrap_or_default(),
            node_selector: self.node_selector.unwrap_or_default(),
            pack_by: self.pack_by,
            priority: self.priority.unwrap_or(0),
            restart: self.restart.unwrap_or_default(),
            retries,
            last_attempt_non_preemptible: self.last_attempt_non_preemptible.unwrap_or(false),
            scale_up_delay_ms,
            stop_grace_ms,
            schedule_timeout_ms,
            run_timeout_ms,
        })
    }
}

impl TryFrom<RawJobSpec> for JobSpec {
    type Error = SpecError;
    fn try_from(raw: RawJobSpec) -> Result<Self, SpecError> {
        raw.validate()
    }
}

impl RawRetries {
    fn validate(self) -> Result<RetryPolicy, SpecError> {
        let defaults = RetryPolicy::default();
        let user = check_budget("retries.user", self.user, defaults.user)?;
        let system = check_budget("retries.system", self.system, defaults.system)?;
        let preemption = check_budget("retries.preemption", self.preemption, defaults.preemption)?;
        let mut codes = self.non_retryable_exit_codes.unwrap_or_default();
        if let Some(bad) = codes.iter().find(|c| !(1..=255).contains(*c)) {
            return Err(SpecError::new(
                "retries.non_retryable_exit_codes",
                format!("contains {bad}; exit codes that can fail a process are 1..=255"),
            ));
        }
        // A set: at most 255 codes are kept, however often a list names them.
        codes.sort_unstable();
        codes.dedup();
        let backoff = self.backoff_ms.unwrap_or_default();
        check_delay("retries.backoff_ms.max", backoff.max)?;
        if backoff.initial > backoff.max {
            return Err(SpecError::new(
                "retries.backoff_ms.initial",
                format!("is {} but max is {}; initial must not exceed max", backoff.initial, backoff.max),
            ));
        }
        Ok(RetryPolicy {
            user,
            system,
            preemption,
            single_budget: self.single_budget.unwrap_or(false),
            non_retryable_exit_codes: codes,
            backoff_ms: backoff,
        })
    }
}

fn required<T>(value: Option<T>, field: &str, example: &str) -> Result<T, SpecError> {
    value.ok_or_else(|| SpecError::new(field, format!("is required; add it, for example {example}")))
}

/// Why `rank` names no global rank of `job`, if it names none: a job has `max_nodes` ×
/// `nproc_per_node` ranks at most (torchrun's largest `WORLD_SIZE`). One wording for the CLI's
/// `--rank` and `--logs=R`, and the log API's `rank=`.
pub fn no_such_rank(job: impl fmt::Display, rank: u32, max_nodes: u32, nproc_per_node: u32) -> Option<String> {
    let ranks = max_nodes.saturating_mul(nproc_per_node.max(1));
    (rank >= ranks).then(|| format!("{job} has ranks 0 to {}", ranks.saturating_sub(1)))
}

/// File name endings of scripts an interpreter or launcher is given to run.
const SCRIPT_EXTENSIONS: [&str; 12] = ["py", "sh", "bash", "zsh", "js", "mjs", "ts", "rb", "pl", "r", "jl", "lua"];

/// The name of a job given as a command line: what it runs, as a user would call it, as
/// `sbatch` names a job after its script. The first argument that is a script by its ending
/// (`python3 -u train.py`, `torchrun train.py`, `uv run train.py` → `train.py`) or a module
/// after `-m` (`python3 -m pkg.train --config c.py` → `pkg.train`); with neither, the
/// program's own file name (`./run.sh` → `run.sh`, `python3 -c …` → `python3`).
fn name_of_command(command: &[String]) -> String {
    let args = command.get(1..).unwrap_or_default();
    let module = |at: usize| (args[at] == "-m").then(|| args.get(at + 1)).flatten();
    let run = (0..args.len()).find_map(|at| module(at).or(is_script(&args[at]).then_some(&args[at])));
    name_of_file(run.or(command.first()).map_or("", String::as_str))
}

/// Whether an argument names a script file: not an option nor a line of code (`sh -c '…'`),
/// and one of `SCRIPT_EXTENSIONS` last.
fn is_script(arg: &str) -> bool {
    let file = arg.rsplit('/').next().unwrap_or_default();
    let extension = file.rsplit_once('.').filter(|(stem, _)| !stem.is_empty()).map(|(_, ext)| ext.to_ascii_lowercase());
    let path_alone = !arg.starts_with('-') && !arg.contains(char::is_whitespace);
    path_alone && extension.is_some_and(|ext| SCRIPT_EXTENSIONS.contains(&ext.as_str()))
}

/// A valid job name made of a path's file name (`/usr/bin/python3` → `python3`): what a
/// name may not hold becomes `-`, and it is cut to the longest a name may be.
fn name_of_file(program: &str) -> String {
    let file = program.rsplit('/').find(|part| !part.is_empty()).unwrap_or_default();
    let name: String = file.chars().map(|c| if in_a_name(c) { c } else { '-' }).take(MAX_NAME_LEN).collect();
    if name.is_empty() {
        "job".to_string()
    } else {
        name
    }
}

/// What a job name may hold.
fn in_a_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

fn check_name(name: &str) -> Result<(), SpecError> {
    let valid_chars = name.chars().all(in_a_name);
    if name.is_empty() || name.len() > MAX_NAME_LEN || !valid_chars {
        return Err(SpecError::new(
            "name",
            format!("`{name}` is not a valid name; use 1 to {MAX_NAME_LEN} letters, digits, `-`, `_` or `.`"),
        ));
    }
    Ok(())
}

fn check_command(command: &[String]) -> Result<(), SpecError> {
    if command.is_empty() || command[0].is_empty() {
        return Err(SpecError::new(
            "command",
            "is empty; give the program and its arguments, e.g. [\"python3\", \"train.py\"]",
        ));
    }
    if command.len() > MAX_ARGS {
        return Err(SpecError::new(
            "command",
            format!("has {} arguments; at most {MAX_ARGS} are allowed", command.len()),
        ));
    }
    if let Some(arg) = command.iter().find(|a| a.len() > MAX_ARG_BYTES || a.contains('\0')) {
        let shown: String = arg.chars().take(20).collect();
        return Err(SpecError::new(
            "command",
            format!("argument starting `{shown}` is over {MAX_ARG_BYTES} bytes or contains a NUL byte"),
        ));
    }
    Ok(())
}

fn bad_env_name(key: &str) -> SpecError {
    SpecError::new(
        // A NUL or a newline in the name, printed as such, would garble the message.
        &format!("env.{}", key.escape_debug()),
        "is not a valid variable; names are non-empty, without `=` or control characters, and no NUL bytes anywhere",
    )
}

/// Rules added after specs were first stored: checked when a spec is submitted, never when a
/// stored one is read back, so that a head upgraded over a database holding a job such a rule
/// refuses still starts, and runs that job.
fn admission_checks(raw: &RawJobSpec) -> Result<(), SpecError> {
    // A control character in a name (an escape sequence, a newline) makes a variable that no
    // shell can name and that `env` prints as two lines; Kubernetes refuses it too.
    let env = raw.env.iter().flatten();
    match env.map(|(key, _)| key).find(|key| key.chars().any(char::is_control)) {
        Some(key) => Err(bad_env_name(key)),
        None => Ok(()),
    }
}

fn check_env(env: &BTreeMap<String, String>) -> Result<(), SpecError> {
    if env.len() > MAX_ENV_VARS {
        return Err(SpecError::new("env", format!("has {} variables; at most {MAX_ENV_VARS} are allowed", env.len())));
    }
    for (key, value) in env {
        if key.is_empty() || key.contains('=') || key.contains('\0') || value.contains('\0') {
            return Err(bad_env_name(key));
        }
        if key.len() + value.len() > MAX_ENV_VALUE_BYTES {
            let shown: String = key.chars().take(40).collect();
            return Err(SpecError::new(
                &format!("env.{shown}"),
                format!("is {} bytes; a variable may have at most {MAX_ENV_VALUE_BYTES}", key.len() + value.len()),
            ));
        }
    }
    let total: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_ENV_TOTAL_BYTES {
        return Err(SpecError::new(
            "env",
            format!("is {total} bytes in all; at most {MAX_ENV_TOTAL_BYTES} are allowed"),
        ));
    }
    Ok(())
}

fn check_nodes(min_nodes: i64, max_nodes: i64) -> Result<(), SpecError> {
    if min_nodes < 1 {
        return Err(SpecError::new(
            "min_nodes",
            format!("is {min_nodes}; a job needs at least 1 node: give 1 or more"),
        ));
    }
    check_range("max_nodes", max_nodes, 1, MAX_NODES_PER_JOB)?;
    if min_nodes > max_nodes {
        return Err(SpecError::new(
            "min_nodes",
            format!("is {min_nodes}, more than max_nodes ({max_nodes}); set min_nodes <= max_nodes"),
        ));
    }
    Ok(())
}

fn check_range(field: &str, value: i64, low: i64, high: i64) -> Result<(), SpecError> {
    if value < low || value > high {
        return Err(SpecError::new(field, format!("is {value}; it must be between {low} and {high}")));
    }
    Ok(())
}

fn check_budget(field: &str, value: Option<i64>, default: Budget) -> Result<Budget, SpecError> {
    let Some(value) = value else { return Ok(default) };
    if value < -1 {
        return Err(SpecError::new(field, format!("is {value}; use a count >= 0, or -1 for unlimited")));
    }
    if value > MAX_BUDGET {
        return Err(SpecError::new(field, format!("is {value}; use at most {MAX_BUDGET}, or -1 for unlimited")));
    }
    Ok(Budget::from_i64(value).expect("-1..=MAX_BUDGET is a budget"))
}

/// GPUs are devices a bundle holds whole (never shared between bundles).
fn check_whole_gpus(bundle: &Resources) -> Result<(), SpecError> {
    let gpu = bundle.milli("gpu");
    if !gpu.is_multiple_of(1000) {
        let shown = crate::resources::format_milli(gpu);
        return Err(SpecError::new("bundle.gpu", format!("is {shown}; GPUs are whole devices, ask for 1 or more")));
    }
    Ok(())
}

/// A timeout that may be left out (`null`: none), else from 1 ms to `most_ms`.
fn check_timeout(field: &str, ms: Option<u64>, most_ms: u64) -> Result<Option<u64>, SpecError> {
    match ms {
        Some(0) => Err(SpecError::new(field, "is 0; use null for no limit, or a positive number of milliseconds")),
        Some(ms) if ms > most_ms => {
            let days = most_ms / MAX_DELAY_MS;
            let span = if days == 1 { "one day".to_string() } else { format!("{days} days") };
            Err(SpecError::new(field, format!("is {ms} ms; at most {most_ms} ({span}) is allowed")))
        }
        ms => Ok(ms),
    }
}

fn check_delay(field: &str, ms: u64) -> Result<u64, SpecError> {
    match delay_too_long(ms) {
        Some(why) => Err(SpecError::new(field, why)),
        None => Ok(ms),
    }
}

/// The one bound on a delay or deadline anywhere (a spec's `*_ms`, a drain's deadline): why
/// `ms` is too long, if it is.
pub fn delay_too_long(ms: u64) -> Option<String> {
    (ms > MAX_DELAY_MS).then(|| format!("is {ms} ms; at most {MAX_DELAY_MS} (one day) is allowed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<JobSpec, SpecError> {
        JobSpec::parse(text, &Overrides::default())
    }

    #[test]
    fn broken_json_is_placed_by_line_and_column_not_by_a_field() {
        for (text, at) in [
            ("{\"name\": \"t\",\n", "EOF while parsing a value at line 2 column 0"),
            ("{\"name\": \"t\",}", "trailing comma at line 1 column 14"),
        ] {
            let err = parse(text).unwrap_err();
            assert_eq!(err.field, "(document)", "{text:?}");
            assert_eq!(err.message, format!("is not valid JSON: {at}; fix the syntax there"), "{text:?}");
        }
        let wrong_type = parse(r#"{"name": "t", "command": "true"}"#).unwrap_err();
        assert_eq!(
            wrong_type.message,
            "invalid type: string \"true\", expected a JSON array: the program and its arguments, each a string, \
             such as [\"python3\", \"train.py\"], or [\"sh\", \"-c\", \"...\"] to run it through a shell"
        );
        assert_eq!(wrong_type.field, "command");
        assert!(!wrong_type.message.contains("line"), "a field's error needs no position: {}", wrong_type.message);
    }

    #[test]
    fn a_spec_file_holds_one_object_and_nothing_after_it() {
        let one = r#"{"name": "t", "command": ["true"], "min_nodes": 1, "max_nodes": 1}"#;
        assert!(parse(&format!("{one}\n\n")).is_ok(), "whitespace after it is fine");
        for text in [format!("{one}{one}"), format!("{one} trailing garbage"), format!("{one}\n>>>>>>> main")] {
            let err = parse(&text).unwrap_err();
            assert_eq!(err.field, "(document)", "{text}");
            assert!(
                err.message.starts_with("has more after its one JSON object (trailing characters at line"),
                "{}",
                err.message
            );
        }
    }

    #[test]
    fn only_an_object_is_a_spec_not_an_array_read_by_position() {
        let positional = r#"["t", ["true"], {}, null, 1, 1]"#;
        let err = parse(positional).unwrap_err();
        assert_eq!(err.field, "(document)");
        assert!(
            err.message.starts_with("is a JSON array; write one JSON object, such as {\"name\""),
            "{}",
            err.message
        );
        assert!(parse(" 42").unwrap_err().message.starts_with("is not a JSON object;"));
        for empty in ["", " \n"] {
            let err = parse(empty).unwrap_err();
            assert!(
                err.message.starts_with("is empty; write one JSON object, such as {"),
                "{empty:?}: {}",
                err.message
            );
        }
        let nested = parse(r#"{"name": "t", "command": ["true"], "min_nodes": 1, "max_nodes": 1, "retries": 3}"#);
        assert_eq!(nested.unwrap_err().message, "invalid type: integer `3`, expected a JSON object");
        let priority = parse(r#"{"name": "t", "command": ["true"], "min_nodes": 1, "max_nodes": 1, "priority": "hi"}"#);
        let expected = "expected an integer from -2147483648 to 2147483647";
        assert_eq!(priority.unwrap_err().message, format!("invalid type: string \"hi\", {expected}"));
    }

    /// A rule added later refuses a new submission, not a job the head already stored.
    #[test]
    fn an_admission_rule_refuses_submissions_but_not_a_stored_spec() {
        let text = r#"{"name": "a", "command": ["true"], "min_nodes": 1, "max_nodes": 1, "env": {"X\u001b": "1"}}"#;
        assert_eq!(JobSpec::parse(text, &Overrides::default()).unwrap_err().field, "env.X\\u{1b}");
        let mut stored = JobSpec::minimal("a", &["true"], 1, 1);
        stored.env.insert("X\u{1b}".into(), "1".into());
        let read: JobSpec = serde_json::from_str(&serde_json::to_string(&stored).unwrap()).expect("read back");
        assert_eq!(read, stored);
    }

    /// What serde says in Rust's terms is said in the spec's: the range a number must be in, a
    /// number too large for an integer, a key given twice (named, not its object).
    #[test]
    fn number_and_key_errors_say_what_the_spec_allows() {
        let base = r#""name": "t", "command": ["true"], "min_nodes": 1"#;
        let cases = [
            (
                r#""max_nodes": 1, "priority": 9999999999"#,
                "priority",
                "invalid value: integer `9999999999`, expected an integer from -2147483648 to 2147483647",
            ),
            (
                r#""max_nodes": 99999999999999999999"#,
                "max_nodes",
                "1e+20 is not a whole number, or too large for one; expected an integer",
            ),
            (
                r#""max_nodes": 1, "bundle": {"cpu": "1"}"#,
                "bundle.cpu",
                "invalid type: string \"1\", expected a number",
            ),
            (r#""max_nodes": 1, "max_nodes": 2"#, "max_nodes", "is given twice; give it once"),
            (r#""max_nodes": 1, "retries": {"user": 1, "user": 2}"#, "retries.user", "is given twice; give it once"),
            (r#""max_nodes": 1, "env": {"A": "1", "A": "2"}"#, "env.A", "is given twice; give it once"),
            (
                r#""max_nodes": 1, "node_selector": {"z": "a", "z": "b"}"#,
                "node_selector.z",
                "is given twice; give it once",
            ),
            (r#""max_nodes": 1, "bundle": {"cpu": 1, "cpu": 2}"#, "bundle.cpu", "is given twice; give it once"),
            (r#""max_nodes": 1, "env": {"A": 1}"#, "env.A", "invalid type: integer `1`, expected a string"),
            (r#""max_nodes": 1, "env": []"#, "env", "invalid type: sequence, expected an object of strings"),
            (
                r#""max_nodes": 1, "env": {"A\u0000B": "1"}"#,
                "env.A\\0B",
                "is not a valid variable; names are non-empty, without `=` or control characters, and no NUL bytes \
                 anywhere",
            ),
            (
                r#""max_nodes": 1, "env": {"RANK\n": "1"}"#,
                "env.RANK\\n",
                "is not a valid variable; names are non-empty, without `=` or control characters, and no NUL bytes \
                 anywhere",
            ),
            (
                r#""max_nodes": 1, "env": {"X\u001b[31m": "1"}"#,
                "env.X\\u{1b}[31m",
                "is not a valid variable; names are non-empty, without `=` or control characters, and no NUL bytes \
                 anywhere",
            ),
        ];
        for (rest, field, message) in cases {
            let err = parse(&format!("{{{base}, {rest}}}")).unwrap_err();
            assert_eq!((err.field.as_str(), err.message.as_str()), (field, message), "{rest}");
        }
        let nulls = parse(&format!(r#"{{{base}, "max_nodes": 1, "env": null, "node_selector": null}}"#));
        assert!(nulls.is_ok(), "null is no env and no selector, as before: {nulls:?}");
    }

    /// A bundle that asks for nothing would fit any node any number of times, and an empty
    /// `cwd` names no directory: both are refused at submission, not at the first start.
    #[test]
    fn an_empty_bundle_or_cwd_is_refused() {
        let base = r#""name": "t", "command": ["true"], "min_nodes": 1, "max_nodes": 1"#;
        for (rest, field, starts) in [
            (r#""bundle": {}"#, "bundle", "asks for nothing; give what one node's share needs"),
            (r#""bundle": {"cpu": 0}"#, "bundle", "asks for nothing"),
            (r#""cwd": """#, "cwd", "is empty; give a directory that exists on every node"),
        ] {
            let err = parse(&format!("{{{base}, {rest}}}")).unwrap_err();
            assert_eq!(err.field, field, "{rest}");
            assert!(err.message.starts_with(starts), "{rest}: {}", err.message);
        }
    }

    #[test]
    fn minimal_spec_gets_documented_defaults() {
        let spec = parse(r#"{"name": "t", "command": ["true"], "min_nodes": 1, "max_nodes": 2}"#).unwrap();
        assert_eq!(spec.bundle, Resources::units(&[("cpu", 1)]));
        assert_eq!(spec.strategy, Strategy::StrictSpread);
        assert_eq!(spec.restart, RestartMode::Gang);
        assert_eq!(spec.retries, RetryPolicy::default());
        assert_eq!((spec.scale_up_delay_ms, spec.stop_grace_ms, spec.schedule_timeout_ms), (5_000, 10_000, None));
        assert_eq!(spec.actor_count(), 2);
    }

    #[test]
    fn a_backoff_given_in_part_takes_the_default_for_the_rest() {
        let base = r#""name": "t", "command": ["true"], "min_nodes": 1, "max_nodes": 1"#;
        let spec = parse(&format!(r#"{{{base}, "retries": {{"backoff_ms": {{"initial": 1}}}}}}"#)).unwrap();
        assert_eq!(spec.retries.backoff_ms, Backoff { initial: 1, max: Backoff::default().max });
        let spec = parse(&format!(r#"{{{base}, "retries": {{"backoff_ms": {{"max": 5000}}}}}}"#)).unwrap();
        assert_eq!(spec.retries.backoff_ms, Backoff { initial: Backoff::default().initial, max: 5000 });
    }

    #[test]
    fn full_design_example_parses() {
        let text = r#"{
          "name": "ddp-train", "command": ["python3", "train.py", "--ckpt", "/shared/ckpt"],
          "env": {"NCCL_DEBUG": "WARN"}, "cwd": "/srv/train", "min_nodes": 3, "max_nodes": 8,
          "hot_spares": 1, "bundle": {"cpu": 8, "gpu": 8}, "strategy": "STRICT_SPREAD",
          "node_selector": {"zone": "a"}, "pack_by": null, "priority": 0, "restart": "gang",
          "retries": {"user": 3, "system": 5, "preemption": -1, "single_budget": false,
                      "non_retryable_exit_codes": [2], "backoff_ms": {"initial": 1000, "max": 30000}},
          "last_attempt_non_preemptible": true, "scale_up_delay_ms": 5000, "stop_grace_ms": 10000,
          "schedule_timeout_ms": null}"#;
        let spec = parse(text).unwrap();
        assert_eq!(spec.actor_count(), 9);
        assert_eq!(spec.retries.non_retryable_exit_codes, vec![2]);
        let repeated = r#"{"name": "r", "command": ["x"], "min_nodes": 1, "max_nodes": 1,
                          "retries": {"non_retryable_exit_codes": [3, 2, 3, 3, 2]}}"#;
        let spec = JobSpec::parse(repeated, &Overrides::default()).unwrap();
        assert_eq!(spec.retries.non_retryable_exit_codes, vec![2, 3], "kept as a set");
        let again: JobSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(again, spec);
    }

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("priority", "priority"), 0);
        assert_eq!(edit_distance("prority", "priority"), 1);
        assert_eq!(edit_distance("min_node", "min_nodes"), 1);
        assert_eq!(edit_distance("max_nodes", "min_nodes"), 2);
        assert_eq!(edit_distance("", "cwd"), 3);
        assert_eq!(edit_distance("colour", "cwd"), 5);
    }

    #[test]
    fn errors_name_the_field_and_the_fix() {
        let cases = [
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"colour":1}"#,
                "colour",
                "unknown field `colour`",
            ),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"prority":1}"#,
                "prority",
                "unknown field `prority`; did you mean `priority`? (expected one of `name`,",
            ),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"retries":{"sytem":1}}"#,
                "retries.sytem",
                "did you mean `system`?",
            ),
            (r#"{"name":"t","command":["x"],"min_nodes":"3","max_nodes":1}"#, "min_nodes", "expected an integer"),
            (r#"{"name":"t","command":["x"],"min_nodes":0,"max_nodes":1}"#, "min_nodes", "at least 1"),
            (r#"{"name":"t","command":["x"],"min_nodes":3,"max_nodes":2}"#, "min_nodes", "min_nodes <= max_nodes"),
            (r#"{"name":"t","command":[],"min_nodes":1,"max_nodes":1}"#, "command", "is empty"),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"run_timeout_ms":0}"#,
                "run_timeout_ms",
                "is 0; use null for no limit",
            ),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"run_timeout_ms":31622400001}"#,
                "run_timeout_ms",
                "is 31622400001 ms; at most 31622400000 (366 days) is allowed",
            ),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"bundle":{"cpu":-2}}"#,
                "bundle",
                "must be >= 0",
            ),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"retries":{"user":-2}}"#,
                "retries.user",
                "-1 for unlimited",
            ),
            (r#"{"name":"t","command":["x"],"min_nodes":1}"#, "max_nodes", "is required"),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"strategy":"WIDE"}"#,
                "strategy",
                "unknown variant",
            ),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"restart":"gnag"}"#,
                "restart",
                "unknown variant `gnag`; did you mean `gang`?",
            ),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"strategy":"strict_spread"}"#,
                "strategy",
                "unknown variant `strict_spread`; did you mean `STRICT_SPREAD`?",
            ),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"retries":{"backoff_ms":{"initial":5,"max":1}}}"#,
                "retries.backoff_ms.initial",
                "must not exceed max",
            ),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"nproc_per_node":0}"#,
                "nproc_per_node",
                "between 1 and",
            ),
            (
                r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"bundle":{"gpu":0.5}}"#,
                "bundle.gpu",
                "whole devices",
            ),
        ];
        for (text, field, fragment) in cases {
            let err = parse(text).unwrap_err();
            assert_eq!(err.field, field, "{text}: {err}");
            assert!(err.message.contains(fragment), "{text}: {err}");
        }
    }

    #[test]
    fn overrides_win_and_are_validated() {
        let text = r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":2}"#;
        let o = Overrides {
            name: None,
            min_nodes: Some(3),
            max_nodes: Some(8),
            hot_spares: Some(1),
            nproc_per_node: Some(8),
            priority: Some(5),
            run_timeout_ms: Some(60_000),
            cwd: None,
            env: [("NCCL_DEBUG".to_string(), "INFO".to_string())].into(),
        };
        let spec = JobSpec::parse(text, &o).unwrap();
        assert_eq!((spec.min_nodes, spec.max_nodes, spec.hot_spares, spec.priority), (3, 8, 1, 5));
        assert_eq!((spec.nproc_per_node, spec.run_timeout_ms), (8, Some(60_000)));
        assert_eq!(spec.env, [("NCCL_DEBUG".to_string(), "INFO".to_string())].into());
        let with_env = r#"{"name":"t","command":["x"],"min_nodes":1,"max_nodes":1,"env":{"A":"file","B":"file"}}"#;
        let spec = JobSpec::parse(with_env, &o).unwrap();
        let names: Vec<(&str, &str)> = spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(names, [("A", "file"), ("B", "file"), ("NCCL_DEBUG", "INFO")]);
        let a = Overrides { env: [("A".to_string(), "flag".to_string())].into(), ..Overrides::default() };
        assert_eq!(JobSpec::parse(with_env, &a).unwrap().env["A"], "flag", "a flag's variable wins");
        let bad = Overrides { env: [("BAD\u{1b}".to_string(), "1".to_string())].into(), ..Overrides::default() };
        assert_eq!(JobSpec::parse(text, &bad).unwrap_err().field, "env.BAD\\u{1b}", "checked as the file's are");
        let bad = Overrides { min_nodes: Some(4), ..Overrides::default() };
        assert_eq!(JobSpec::parse(text, &bad).unwrap_err().field, "min_nodes");
        let zero = Overrides { run_timeout_ms: Some(0), ..Overrides::default() };
        assert_eq!(JobSpec::parse(text, &zero).unwrap_err().field, "run_timeout_ms");
        let moved = Overrides { cwd: Some("/srv/train".into()), ..Overrides::default() };
        assert_eq!(JobSpec::parse(text, &moved).unwrap().cwd.as_deref(), Some("/srv/train"));
        let empty = Overrides { cwd: Some(String::new()), ..Overrides::default() };
        assert_eq!(JobSpec::parse(text, &empty).unwrap_err().field, "cwd");
        let named = Overrides { name: Some("renamed".into()), ..Overrides::default() };
        assert_eq!(JobSpec::parse(text, &named).unwrap().name, "renamed");
        let bad = Overrides { name: Some("a b".into()), ..Overrides::default() };
        assert_eq!(JobSpec::parse(text, &bad).unwrap_err().field, "name");
    }

    #[test]
    fn a_command_line_alone_is_a_job_named_after_what_it_runs() {
        let command = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<String>>();
        let none = Overrides::default();
        let spec =
            JobSpec::from_command(command(&["/usr/bin/python3", "-u", "src/train.py", "--lr=1"]), &none).unwrap();
        assert_eq!((spec.name.as_str(), spec.min_nodes, spec.max_nodes), ("train.py", 1, 1));
        assert_eq!(spec.command, ["/usr/bin/python3", "-u", "src/train.py", "--lr=1"]);
        let named = |args: &[&str]| JobSpec::from_command(command(args), &none).unwrap().name;
        assert_eq!(named(&["torchrun", "--nproc-per-node", "2", "Train.PY"]), "Train.PY", "a launcher's script");
        assert_eq!(named(&["python3", "-m", "pkg.train", "--config", "c.py"]), "pkg.train", "a module");
        assert_eq!(named(&["python3", "-X", "dev", "t.py", "-m", "x"]), "t.py", "the first of the two");
        assert_eq!(named(&["python3", "-c", "print(1)"]), "python3", "code alone: the program");
        assert_eq!(named(&["sh", "--init-file=a.sh", ".py", "-m"]), "sh", "options, a bare ending, a last -m");
        assert_eq!(named(&["sh", "-c", "python3 t.py"]), "sh", "a line of code");
        let wide = Overrides { min_nodes: Some(3), ..Overrides::default() };
        let spec = JobSpec::from_command(command(&["./run me.sh"]), &wide).unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.min_nodes, spec.max_nodes),
            ("run-me.sh", 3, 3),
            "only --min-nodes: that many"
        );
        let elastic = Overrides { max_nodes: Some(4), name: Some("t".into()), ..Overrides::default() };
        let spec = JobSpec::from_command(command(&["x"]), &elastic).unwrap();
        assert_eq!((spec.name.as_str(), spec.min_nodes, spec.max_nodes), ("t", 1, 4));
        let long = "p".repeat(100);
        assert_eq!(JobSpec::from_command(command(&[&long]), &none).unwrap().name.len(), MAX_NAME_LEN);
        assert_eq!(JobSpec::from_command(command(&["/"]), &none).unwrap().name, "job");
        assert_eq!(JobSpec::from_command(command(&[""]), &none).unwrap_err().field, "command", "checked as a file's");
        assert_eq!(JobSpec::from_command(Vec::new(), &none).unwrap_err().field, "command");
        let negative = Overrides { min_nodes: Some(-2), ..Overrides::default() };
        assert_eq!(JobSpec::from_command(command(&["x"]), &negative).unwrap_err().field, "min_nodes");
    }
}
