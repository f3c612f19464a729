//! The head's durable state (DESIGN §10): an SQLite database in WAL mode at
//! `<state-dir>/state.db`, written by one thread with group commit — every batch of writes
//! waiting when a commit starts goes into that one transaction and shares its fsync — and a lock
//! file so that two heads never share a state dir. A lone write after a quiet spell is
//! committed on the caller's thread instead (`write_now`), sparing it two thread hand-offs.
//! The WAL is copied back into the database by a thread of its own (`checkpoint_loop`), mostly
//! off the commits' path: SQLite's automatic checkpoint ran inside the commit that passed
//! 1,000 pages, which then waited for 4 MB to be written and the database synced.
//!
//! | table | holds |
//! |---|---|
//! | `meta` | the schema version, and counters never handed out twice (job numbers, groups), written when a job is forgotten |
//! | `jobs` | keyed by the job's group number: its id, its spec (written once), its state, and its driver's state snapshot (placements, live attempts with their ports and rendezvous, cycles, budgets, timers) |
//! | `ledger` | one row per ended attempt, appended |
//! | `attempts` | one row per attempt started: key, node, rank, port, start time |
//! | `nodes` | every node the head knows, with its agent's address and incarnation |
//! | `identities` | a digest of the identity each node's agent last registered with (AI-1 holds across head restarts) |
//! | `log_urls` | the log and metrics server each node's agent last registered with: a DEAD node stays a scrape target, `up` 0, across head restarts |
//!
//! Each commit is synced, so its cost is the pages it touches: every table is keyed by what it
//! is looked up with and has no other index, so a submission writes one page and a start two.

use ftdrive::driver::{Driver, LedgerEntry};
use ftdrive::head::{Counters, DurableState, NodeRecord, StoredJob};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};

/// The schema this build writes; a database with a newer one is refused.
const SCHEMA_VERSION: i64 = 3;
pub const DATABASE: &str = "state.db";
/// WAL pages after which the checkpoint thread is woken (SQLite's own default threshold).
const CHECKPOINT_PAGES: i32 = 1000;

/// Test hook: the head dies (abort) right after this many commits, before answering — a crash
/// between a durable write and its acknowledgement.
const CRASH_AFTER_COMMITS: &str = "FTDRIVE_CRASH_AFTER_COMMITS";

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS jobs (
        pg INTEGER PRIMARY KEY, id TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
        submit_ms INTEGER NOT NULL, finished_ms INTEGER, driver TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS ledger (
        pg INTEGER NOT NULL, seq INTEGER NOT NULL, entry TEXT NOT NULL, PRIMARY KEY (pg, seq)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS attempts (
        pg INTEGER NOT NULL, actor INTEGER NOT NULL, attempt INTEGER NOT NULL, cycle INTEGER NOT NULL,
        node TEXT NOT NULL, rank INTEGER NOT NULL, port INTEGER NOT NULL, start_ms INTEGER NOT NULL,
        PRIMARY KEY (pg, actor, attempt)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS nodes (name TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS identities (name TEXT PRIMARY KEY, digest TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS log_urls (name TEXT PRIMARY KEY, url TEXT NOT NULL) WITHOUT ROWID;
";

/// Schema 1 keyed jobs by id with a second index on their group, and every other table by job
/// id: its rows move to schema 2's tables, keyed by group.
const MIGRATE_FROM_1: &str = "
    ALTER TABLE meta RENAME TO meta_1;
    ALTER TABLE jobs RENAME TO jobs_1;
    ALTER TABLE ledger RENAME TO ledger_1;
    ALTER TABLE attempts RENAME TO attempts_1;
    ALTER TABLE nodes RENAME TO nodes_1;
";
const COPY_FROM_1: &str = "
    INSERT INTO meta SELECT key, value FROM meta_1;
    INSERT INTO jobs SELECT pg, id, spec, state, submit_ms, finished_ms, driver FROM jobs_1;
    INSERT INTO ledger SELECT j.pg, l.seq, l.entry FROM ledger_1 l JOIN jobs_1 j ON j.id = l.job;
    INSERT INTO attempts SELECT j.pg, a.actor, a.attempt, a.cycle, a.node, a.rank, a.port, a.start_ms
        FROM attempts_1 a JOIN jobs_1 j ON j.id = a.job;
    INSERT INTO nodes SELECT name, record FROM nodes_1;
    DROP TABLE meta_1; DROP TABLE jobs_1; DROP TABLE ledger_1; DROP TABLE attempts_1; DROP TABLE nodes_1;
";

/// Why the state dir cannot be used. Each message names the file and the way out.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "another ftdrive head is using the state dir {0} (it holds the lock on {1}); one head per state dir: \
         stop it, or wait until a stopping one has exited"
    )]
    Locked(PathBuf, PathBuf),
    #[error(
        "cannot read the state database {0}: {1}. If it is damaged, move it aside to start with no jobs \
         (their history is then lost), or put back a copy of it"
    )]
    Unreadable(PathBuf, String),
    #[error(
        "the state database {0} was written by a newer ftdrive (schema {1}, this one knows {2}); run that version"
    )]
    Newer(PathBuf, i64, i64),
    #[error(
        "cannot bring the state database {0} from schema {1} to schema {2}: {3}. Nothing was changed (it is one \
         transaction); make the state dir writable, with room on its disk, and start again"
    )]
    Upgrade(PathBuf, i64, i64, String),
    #[error(
        "cannot prepare the state database {0} for use: {1}. Nothing was changed; make the state dir writable, \
         with room on its disk, and start again"
    )]
    Prepare(PathBuf, String),
    #[error("cannot use the state dir {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// One thing to write.
#[derive(Clone, Debug)]
pub enum Write {
    /// A job: its spec the first time, its state and snapshot always, new ledger entries.
    Job {
        id: String,
        pg: u64,
        spec: Option<String>,
        state: String,
        submit_ms: u64,
        finished_ms: Option<u64>,
        driver: String,
        ledger: Vec<(usize, String)>,
    },
    Attempt {
        pg: u64,
        actor: u32,
        attempt: u32,
        cycle: u32,
        node: String,
        rank: u32,
        port: u16,
        start_ms: u64,
    },
    Node {
        name: String,
        record: String,
        /// The digest of its agent's identity, when the head has one (AI-1).
        identity: Option<String>,
        /// Its agent's log server, when the head has one.
        log_url: Option<String>,
    },
    Forget {
        pg: u64,
    },
    /// A DEAD node the head forgot.
    ForgetNode {
        name: String,
    },
    Counters(Counters),
}

/// The writes of one head input, in order.
pub struct Batch {
    pub seq: u64,
    pub writes: Vec<Write>,
}

/// What became of the batches written so far.
#[derive(Debug)]
pub enum Commit {
    /// Every batch up to `upto` is durable; the commit took `took`.
    Done { upto: u64, took: std::time::Duration },
    /// A write failed; nothing after the last `Done` is durable, and nothing more will be.
    Failed { error: String },
}

pub struct Store {
    batches: Sender<Batch>,
    writer: Arc<Mutex<Writer>>,
    path: PathBuf,
    /// Made once with the database: what tells this head's cluster from one a head started on
    /// another (or an empty) state dir would make, for its agents (`ToAgent::Welcome`).
    cluster_id: String,
    /// Each node's agent identity digest as last written (AI-1), read once at open.
    identities: BTreeMap<String, String>,
    /// Each node's agent log server as last written, read once at open.
    log_urls: BTreeMap<String, String>,
    _lock: std::fs::File,
}

/// The connection and what is counted across commits, whichever thread commits.
struct Writer {
    conn: Connection,
    commits: u64,
    crash_after: Option<u64>,
}

impl Writer {
    /// One transaction for `batches`, synced when it returns.
    fn commit(&mut self, batches: &[Batch]) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        for write in batches.iter().flat_map(|b| &b.writes) {
            apply(&tx, write)?;
        }
        tx.commit()?;
        self.commits += 1;
        if self.crash_after == Some(self.commits) {
            std::process::abort();
        }
        Ok(())
    }
}

impl Store {
    /// Locks the state dir, opens (or creates) the database, checks it and reads it back.
    /// Commit outcomes of `write` are reported to `on_commit`, from the writer thread.
    pub fn open(
        state_dir: &Path,
        on_commit: impl Fn(Commit) + Send + 'static,
    ) -> Result<(Store, DurableState), StoreError> {
        if !state_dir.exists() {
            crate::paths::private_dir(state_dir).map_err(|e| StoreError::Io(state_dir.to_path_buf(), e))?;
        }
        let path = state_dir.join(DATABASE);
        let lock = lock(state_dir, &path)?;
        let unreadable = |e: rusqlite::Error| StoreError::Unreadable(path.clone(), e.to_string());
        let conn = Connection::open(&path).map_err(unreadable)?;
        prepare(&conn, &path)?;
        let state = load(&conn).map_err(|e| StoreError::Unreadable(path.clone(), e))?;
        let cluster_id = load_cluster_id(&conn).map_err(|e| StoreError::Unreadable(path.clone(), e))?;
        let identities = load_pairs(&conn, "SELECT name, digest FROM identities")
            .map_err(|e| StoreError::Unreadable(path.clone(), e))?;
        let log_urls =
            load_pairs(&conn, "SELECT name, url FROM log_urls").map_err(|e| StoreError::Unreadable(path.clone(), e))?;
        let (batches, incoming) = channel::<Batch>();
        #[allow(clippy::disallowed_methods)]
        let crash_after = std::env::var(CRASH_AFTER_COMMITS).ok().and_then(|n| n.parse().ok());
        let writer = Arc::new(Mutex::new(Writer { conn, commits: 0, crash_after }));
        checkpoint_elsewhere(&writer, &path).map_err(|e| StoreError::Io(path.clone(), e))?;
        let thread_writer = writer.clone();
        std::thread::Builder::new()
            .name("ftdrive-store".into())
            .spawn(move || write_loop(&thread_writer, incoming, on_commit))
            .map_err(|e| StoreError::Io(path.clone(), e))?;
        Ok((Store { batches, writer, path, cluster_id, identities, log_urls, _lock: lock }, state))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Each node's agent identity digest as the database held it at open.
    pub fn identities(&self) -> &BTreeMap<String, String> {
        &self.identities
    }

    /// Each node's agent log server as the database held it at open.
    pub fn log_urls(&self) -> &BTreeMap<String, String> {
        &self.log_urls
    }

    /// Queues a batch for the writer thread; its commit is reported in order.
    pub fn write(&self, batch: Batch) {
        // If the writer is gone it has reported the failure already.
        let _ = self.batches.send(batch);
    }

    /// Copies the whole WAL into the database and empties it, waiting for a commit under way:
    /// for a head that is stopping, so that `state.db` alone holds everything (a copy of the
    /// file taken while the head is down is complete) and the next start has no WAL to read.
    /// The process exits with the store's threads still holding their connections, so SQLite's
    /// own checkpoint at the last close never runs.
    pub fn checkpoint_all(&self) -> Result<(), String> {
        let writer = self.writer.lock().map_err(|_| "the store's writer panicked".to_string())?;
        let (busy, wal_pages, copied): (i64, i64, i64) = writer
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| e.to_string())?;
        if busy != 0 {
            return Err(format!("the database was busy: {copied} of {wal_pages} WAL pages copied"));
        }
        Ok(())
    }

    /// Commits a batch on the calling thread, synced when this returns. Only for a caller
    /// with nothing queued or being written: batches commit in order.
    pub fn write_now(&self, batch: Batch) -> Result<(), String> {
        let mut writer = self.writer.lock().map_err(|_| "the store's writer panicked".to_string())?;
        writer.commit(std::slice::from_ref(&batch)).map_err(|e| e.to_string())
    }
}

/// Holds an exclusive `flock` on the database file for the life of the head.
fn lock(state_dir: &Path, path: &Path) -> Result<std::fs::File, StoreError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| StoreError::Io(path.to_path_buf(), e))?;
    // SAFETY: flock on a descriptor we own; released when the file is closed at exit.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(StoreError::Locked(state_dir.to_path_buf(), path.to_path_buf()));
    }
    Ok(file)
}

/// WAL with a full sync at every commit (a commit is durable when it returns), the schema
/// created or checked, the file checked for damage.
fn prepare(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let unreadable = |e: rusqlite::Error| StoreError::Unreadable(path.to_path_buf(), e.to_string());
    let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(unreadable)?;
    if check != "ok" {
        return Err(StoreError::Unreadable(path.to_path_buf(), format!("integrity check: {check}")));
    }
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(unreadable)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Newer(path.to_path_buf(), version, SCHEMA_VERSION));
    }
    conn.pragma_update(None, "journal_mode", "WAL").map_err(unreadable)?;
    conn.pragma_update(None, "synchronous", "FULL").map_err(unreadable)?;
    let migrate = if version == 1 { MIGRATE_FROM_1.to_string() + SCHEMA + COPY_FROM_1 } else { SCHEMA.to_string() };
    // The cluster id is made once, with the database (or its first start under this version).
    let upgrade = format!("BEGIN; {migrate} {MAKE_CLUSTER_ID} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;");
    conn.execute_batch(&upgrade).map_err(|e| match version {
        SCHEMA_VERSION => StoreError::Prepare(path.to_path_buf(), e.to_string()),
        _ => StoreError::Upgrade(path.to_path_buf(), version, SCHEMA_VERSION, e.to_string()),
    })?;
    Ok(())
}

/// A random non-negative 63-bit number, kept for the life of the database.
const MAKE_CLUSTER_ID: &str =
    "INSERT OR IGNORE INTO meta (key, value) VALUES ('cluster_id', random() & 9223372036854775807);";

fn load_cluster_id(conn: &Connection) -> Result<String, String> {
    let id: i64 = conn
        .query_row("SELECT value FROM meta WHERE key = 'cluster_id'", [], |r| r.get(0))
        .map_err(|e| e.to_string())?;
    Ok(format!("{id:016x}"))
}

/// A table of node names and one text each, by `select`.
fn load_pairs(conn: &Connection, select: &str) -> Result<BTreeMap<String, String>, String> {
    let mut rows = conn.prepare(select).map_err(|e| e.to_string())?;
    let pairs = rows.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| e.to_string())?;
    pairs.collect::<Result<_, _>>().map_err(|e| e.to_string())
}

fn load(conn: &Connection) -> Result<DurableState, String> {
    let meta = |key: &str| -> Result<u64, String> {
        let value: Option<i64> = conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(|e| e.to_string())?;
        Ok(value.unwrap_or(0) as u64)
    };
    let counters = Counters {
        next_job_number: meta("next_job_number")?,
        next_pg: meta("next_pg")?,
        grace_bound_ms: meta("grace_bound_ms")?,
    };
    let mut nodes = Vec::new();
    let mut rows = conn.prepare("SELECT name, record FROM nodes ORDER BY name").map_err(|e| e.to_string())?;
    for row in
        rows.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))).map_err(|e| e.to_string())?
    {
        let (name, record) = row.map_err(|e| e.to_string())?;
        let record: NodeRecord = serde_json::from_str(&record).map_err(|e| format!("node {name}: {e}"))?;
        nodes.push(record);
    }
    Ok(DurableState { counters, nodes, jobs: load_jobs(conn)? })
}

fn load_jobs(conn: &Connection) -> Result<Vec<StoredJob>, String> {
    let mut jobs = Vec::new();
    let mut rows = conn.prepare("SELECT id, pg, spec, driver FROM jobs ORDER BY pg").map_err(|e| e.to_string())?;
    let mut ids = std::collections::BTreeSet::new();
    let read = |r: &rusqlite::Row| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?, r.get(3)?));
    for row in rows.query_map([], read).map_err(|e| e.to_string())? {
        let (id, pg, spec, driver): (String, i64, String, String) = row.map_err(|e| e.to_string())?;
        if !ids.insert(id.clone()) {
            return Err(format!("job {id} is stored twice"));
        }
        let spec = serde_json::from_str(&spec).map_err(|e| format!("job {id}'s spec: {e}"))?;
        let driver: Driver = serde_json::from_str(&driver).map_err(|e| format!("job {id}'s state: {e}"))?;
        jobs.push(StoredJob { pg: pg as u64, spec, driver, ledger: load_ledger(conn, &id, pg)? });
    }
    Ok(jobs)
}

fn load_ledger(conn: &Connection, job: &str, pg: i64) -> Result<Vec<LedgerEntry>, String> {
    let mut rows =
        conn.prepare_cached("SELECT entry FROM ledger WHERE pg = ?1 ORDER BY seq").map_err(|e| e.to_string())?;
    let entries = rows.query_map([pg], |r| r.get::<_, String>(0)).map_err(|e| e.to_string())?;
    entries
        .map(|e| {
            let text = e.map_err(|e| e.to_string())?;
            serde_json::from_str(&text).map_err(|e| format!("job {job}'s ledger: {e}"))
        })
        .collect()
}

/// Replaces SQLite's automatic checkpoint on the writer's connection (done by the commit that
/// passes `CHECKPOINT_PAGES`, which then waited for the WAL to be copied and the database
/// synced) with `checkpoint_loop` on a thread of its own, woken by that commit.
fn checkpoint_elsewhere(writer: &Arc<Mutex<Writer>>, path: &Path) -> std::io::Result<()> {
    let own = Connection::open(path).map_err(std::io::Error::other)?;
    own.pragma_update(None, "synchronous", "FULL").map_err(std::io::Error::other)?;
    let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
    let mut locked = writer.lock().map_err(|_| std::io::Error::other("the store's writer panicked"))?;
    // Setting the hook turns SQLite's automatic checkpoint off (it is a hook of its own).
    locked
        .conn
        .wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: std::os::raw::c_int| {
            if pages >= CHECKPOINT_PAGES {
                let _ = wake.try_send(()); // one wake-up waiting is enough
            }
            Ok(())
        }))
        .map_err(std::io::Error::other)?;
    drop(locked);
    let writer = writer.clone();
    std::thread::Builder::new()
        .name("ftdrive-checkpoint".into())
        .spawn(move || checkpoint_loop(&own, &writer, &woken))?;
    Ok(())
}

/// Each wake-up copies the WAL back in two steps. First on this thread's own connection, with
/// commits going on: a PASSIVE checkpoint takes no lock a writer waits for, and this step
/// copies nearly everything and syncs the database. Then, holding the writer, the few pages
/// committed meanwhile: the WAL is then all copied when the next commit begins, and that
/// commit starts it again from its start. Without the second step a checkpoint always ran a
/// commit behind the writer, and under steady commits the WAL grew without end.
fn checkpoint_loop(own: &Connection, writer: &Mutex<Writer>, woken: &std::sync::mpsc::Receiver<()>) {
    while woken.recv().is_ok() {
        let done = passive_checkpoint(own).and_then(|_| match writer.lock() {
            Ok(writer) => passive_checkpoint(&writer.conn),
            Err(_) => Ok((0, 0)), // the writer panicked: the head is stopping
        });
        match done {
            Ok((wal_pages, copied)) => tracing::debug!("checkpoint: {copied} of {wal_pages} WAL pages copied"),
            // The WAL only grows meanwhile; the next commit wakes this again.
            Err(e) => tracing::warn!("cannot checkpoint the state database: {e}"),
        }
    }
}

/// The WAL's pages, and how many of them are in the database now.
fn passive_checkpoint(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get(1)?, r.get(2)?)))
}

/// Group commit: every batch waiting when a transaction starts goes into it.
fn write_loop(writer: &Mutex<Writer>, incoming: std::sync::mpsc::Receiver<Batch>, on_commit: impl Fn(Commit)) {
    while let Ok(first) = incoming.recv() {
        let mut batches = vec![first];
        batches.extend(incoming.try_iter());
        let upto = batches.last().map_or(0, |b| b.seq);
        let started = std::time::Instant::now();
        let done = match writer.lock() {
            Ok(mut writer) => writer.commit(&batches).map_err(|e| e.to_string()),
            Err(_) => Err("the store's writer panicked".to_string()),
        };
        match done {
            Ok(()) => on_commit(Commit::Done { upto, took: started.elapsed() }),
            Err(error) => {
                on_commit(Commit::Failed { error });
                return;
            }
        }
    }
}

fn apply(tx: &rusqlite::Transaction, write: &Write) -> rusqlite::Result<()> {
    match write {
        Write::Job { id, pg, spec, state, submit_ms, finished_ms, driver, ledger } => {
            if let Some(spec) = spec {
                tx.prepare_cached(
                    "INSERT INTO jobs (pg, id, spec, state, submit_ms, finished_ms, driver) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )?
                .execute(params![*pg as i64, id, spec, state, *submit_ms as i64, finished_ms.map(|t| t as i64), driver])?;
            } else {
                tx.prepare_cached("UPDATE jobs SET state = ?2, finished_ms = ?3, driver = ?4 WHERE pg = ?1")?
                    .execute(params![*pg as i64, state, finished_ms.map(|t| t as i64), driver])?;
            }
            for (seq, entry) in ledger {
                tx.prepare_cached("INSERT INTO ledger (pg, seq, entry) VALUES (?1, ?2, ?3)")?.execute(params![
                    *pg as i64,
                    *seq as i64,
                    entry
                ])?;
            }
        }
        Write::Attempt { pg, actor, attempt, cycle, node, rank, port, start_ms } => {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO attempts (pg, actor, attempt, cycle, node, rank, port, start_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![*pg as i64, actor, attempt, cycle, node, rank, port, *start_ms as i64])?;
        }
        Write::Node { name, record, identity, log_url } => {
            tx.prepare_cached("INSERT OR REPLACE INTO nodes (name, record) VALUES (?1, ?2)")?
                .execute(params![name, record])?;
            if let Some(digest) = identity {
                tx.prepare_cached("INSERT OR REPLACE INTO identities (name, digest) VALUES (?1, ?2)")?
                    .execute(params![name, digest])?;
            }
            if let Some(url) = log_url {
                tx.prepare_cached("INSERT OR REPLACE INTO log_urls (name, url) VALUES (?1, ?2)")?
                    .execute(params![name, url])?;
            }
        }
        Write::Forget { pg } => {
            for table in [
                "DELETE FROM jobs WHERE pg = ?1",
                "DELETE FROM ledger WHERE pg = ?1",
                "DELETE FROM attempts WHERE pg = ?1",
            ] {
                tx.prepare_cached(table)?.execute([*pg as i64])?;
            }
        }
        Write::ForgetNode { name } => {
            tx.prepare_cached("DELETE FROM nodes WHERE name = ?1")?.execute([name])?;
            tx.prepare_cached("DELETE FROM identities WHERE name = ?1")?.execute([name])?;
            tx.prepare_cached("DELETE FROM log_urls WHERE name = ?1")?.execute([name])?;
        }
        Write::Counters(c) => {
            let set = "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)";
            tx.prepare_cached(set)?.execute(params!["next_job_number", c.next_job_number as i64])?;
            tx.prepare_cached(set)?.execute(params!["next_pg", c.next_pg as i64])?;
            tx.prepare_cached(set)?.execute(params!["grace_bound_ms", c.grace_bound_ms as i64])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftdrive::driver::{BudgetKind, Cause};
    use ftdrive::ids::{ActorId, JobId};
    use ftdrive::spec::JobSpec;
    use ftdrive::Instant;

    /// The tables as schema 1 made them.
    const SCHEMA_1: &str = "
        CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
        CREATE TABLE jobs (
            id TEXT PRIMARY KEY, pg INTEGER NOT NULL UNIQUE, spec TEXT NOT NULL, state TEXT NOT NULL,
            submit_ms INTEGER NOT NULL, finished_ms INTEGER, driver TEXT NOT NULL);
        CREATE TABLE ledger (job TEXT NOT NULL, seq INTEGER NOT NULL, entry TEXT NOT NULL, PRIMARY KEY (job, seq));
        CREATE TABLE attempts (
            job TEXT NOT NULL, actor INTEGER NOT NULL, attempt INTEGER NOT NULL, cycle INTEGER NOT NULL,
            node TEXT NOT NULL, rank INTEGER NOT NULL, port INTEGER NOT NULL, start_ms INTEGER NOT NULL,
            PRIMARY KEY (job, actor, attempt));
        CREATE TABLE nodes (name TEXT PRIMARY KEY, record TEXT NOT NULL);
        PRAGMA user_version = 1;
    ";

    fn entry(driver: &Driver) -> LedgerEntry {
        LedgerEntry {
            actor: ActorId::new(driver.id().clone(), 0),
            rank: Some(0),
            attempt: 1,
            cycle: 1,
            node: "n1".into(),
            start_ms: 1,
            end_ms: 2,
            exit_code: Some(1),
            signal: None,
            cause: Cause::UserError,
            evidence: "exited with code 1".into(),
            budget: BudgetKind::User,
            remaining: driver.remaining(),
        }
    }

    /// A state dir written by schema 1 opens with every job, its ledger and the counters.
    #[test]
    fn a_schema_1_database_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let spec = JobSpec::minimal("old", &["true"], 1, 1);
        let driver = Driver::new(JobId::new("j7"), spec.clone(), Instant::from_ms(5), 1, 3000);
        let conn = Connection::open(dir.path().join(DATABASE)).unwrap();
        conn.execute_batch(SCHEMA_1).unwrap();
        let (spec_text, driver_text) = (serde_json::to_string(&spec).unwrap(), serde_json::to_string(&driver).unwrap());
        conn.execute("INSERT INTO jobs VALUES ('j7', 7, ?1, 'PENDING', 5, NULL, ?2)", params![spec_text, driver_text])
            .unwrap();
        let entry_text = serde_json::to_string(&entry(&driver)).unwrap();
        conn.execute("INSERT INTO ledger VALUES ('j7', 0, ?1)", [entry_text]).unwrap();
        conn.execute("INSERT INTO attempts VALUES ('j7', 0, 1, 1, 'n1', 0, 29500, 1)", []).unwrap();
        conn.execute("INSERT INTO meta VALUES ('next_job_number', 9), ('next_pg', 9)", []).unwrap();
        drop(conn);

        let (store, state) = Store::open(dir.path(), |_| {}).unwrap();
        assert_eq!(state.counters, Counters { next_job_number: 9, next_pg: 9, grace_bound_ms: 0 });
        assert_eq!(state.jobs.len(), 1);
        let job = &state.jobs[0];
        assert_eq!((job.pg, job.driver.id().as_str()), (7, "j7"));
        assert_eq!(job.ledger, vec![entry(&driver)]);
        drop(store);

        let conn = Connection::open(dir.path().join(DATABASE)).unwrap();
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        let attempts: i64 = conn.query_row("SELECT count(*) FROM attempts WHERE pg = 7", [], |r| r.get(0)).unwrap();
        let left: i64 =
            conn.query_row("SELECT count(*) FROM sqlite_master WHERE name LIKE '%_1'", [], |r| r.get(0)).unwrap();
        assert_eq!((version, attempts, left), (SCHEMA_VERSION, 1, 0));
    }

    /// The WAL is copied back and starts again while commits go on, so it stays bounded,
    /// though no commit checkpoints (SQLite's own checkpoint is off with the hook in place).
    #[test]
    fn the_wal_is_checkpointed_off_the_commits_and_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path(), |_| {}).unwrap();
        let record = "x".repeat(40 * 1024);
        let wal = dir.path().join(format!("{DATABASE}-wal"));
        let mut largest_wal = 0;
        for n in 0..600 {
            let write = Write::Node { name: format!("n{n}"), record: record.clone(), identity: None, log_url: None };
            store.write_now(Batch { seq: n, writes: vec![write] }).unwrap();
            largest_wal = largest_wal.max(std::fs::metadata(&wal).unwrap().len());
        }
        let written = 600 * record.len() as u64;
        assert!(largest_wal < written / 2, "the WAL grew to {largest_wal} bytes of {written} written");
        let database = std::fs::metadata(dir.path().join(DATABASE)).unwrap().len();
        assert!(database > written / 2, "the database holds {database} bytes of {written} written");
    }

    /// AI-1 across restarts: each node's last identity digest (and log server) is read back
    /// at open, a forgotten node's goes with it, and a schema 2 database gains the table, empty.
    #[test]
    fn identities_are_kept_until_their_node_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path(), |_| {}).unwrap();
        let node = |name: &str, identity: Option<&str>| Write::Node {
            name: name.into(),
            record: format!(
                r#"{{"name":"{name}","resources":{{}},"labels":{{}},"addr":"a","incarnation":1,"state":"ALIVE"}}"#
            ),
            identity: identity.map(str::to_string),
            log_url: identity.map(|digest| format!("http://{digest}")),
        };
        let writes = vec![node("n1", Some("d1")), node("n2", Some("d2")), node("n1", None), node("n3", None)];
        store.write_now(Batch { seq: 1, writes }).unwrap();
        store.write_now(Batch { seq: 2, writes: vec![Write::ForgetNode { name: "n2".into() }] }).unwrap();
        drop(store);
        let (store, _) = Store::open(dir.path(), |_| {}).unwrap();
        let kept: Vec<_> = store.identities().iter().map(|(n, d)| (n.as_str(), d.as_str())).collect();
        assert_eq!(kept, [("n1", "d1")], "a write without a digest keeps the last one");
        let urls: Vec<_> = store.log_urls().iter().map(|(n, u)| (n.as_str(), u.as_str())).collect();
        assert_eq!(urls, [("n1", "http://d1")], "and without a log server, the last one");
        drop(store);
        let conn = Connection::open(dir.path().join(DATABASE)).unwrap();
        conn.execute_batch("DROP TABLE identities; DROP TABLE log_urls; PRAGMA user_version = 2;").unwrap();
        drop(conn);
        let (store, _) = Store::open(dir.path(), |_| {}).unwrap();
        assert!(store.identities().is_empty() && store.log_urls().is_empty());
    }

    /// An upgrade that fails names the file and changes nothing.
    #[test]
    fn a_failed_upgrade_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join(DATABASE)).unwrap();
        conn.execute_batch(SCHEMA_1).unwrap();
        conn.execute_batch("DROP TABLE nodes").unwrap();
        drop(conn);
        let error = Store::open(dir.path(), |_| {}).err().expect("refused");
        let message = error.to_string();
        assert!(matches!(error, StoreError::Upgrade(_, 1, SCHEMA_VERSION, _)), "{message}");
        assert!(message.contains(DATABASE) && message.contains("Nothing was changed"), "{message}");
        let conn = Connection::open(dir.path().join(DATABASE)).unwrap();
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        let jobs_1: i64 = conn.query_row("SELECT count(*) FROM jobs_1", [], |r| r.get(0)).unwrap_or(-1);
        assert_eq!((version, jobs_1), (1, -1), "still schema 1, no table renamed");
    }
}
