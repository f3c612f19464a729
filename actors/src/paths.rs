//! Where things live on disk, and the two credentials (DESIGN §11): the *client token* opens
//! the client API and nothing else, the *agent token* opens the agent channel (and agents' log
//! servers) and nothing else. The head creates each in its state directory once (mode 0600, in
//! a 0700 directory) and reuses it at every start, unless `$FTDRIVE_TOKEN` /
//! `$FTDRIVE_AGENT_TOKEN` is set; clients and agents read the same places.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// `$FTDRIVE_STATE_DIR`, else `~/.ftdrive`.
pub fn default_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FTDRIVE_STATE_DIR") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".ftdrive")
}

pub fn token_file(state_dir: &Path) -> PathBuf {
    state_dir.join("token")
}

pub fn agent_token_file(state_dir: &Path) -> PathBuf {
    state_dir.join("agent-token")
}

/// The head's two credentials.
#[derive(Clone, Debug)]
pub struct Tokens {
    pub client: String,
    pub agent: String,
}

impl Tokens {
    /// Two fresh random tokens (an embedded cluster's, never written).
    pub fn random() -> std::io::Result<Tokens> {
        Ok(Tokens { client: random_token()?, agent: random_token()? })
    }
}

/// The tokens a head uses: each from its variable, else its file in `state_dir` — created on
/// the first start and the same at every start after, so that agents and clients keep working
/// across a head restart.
pub fn head_tokens(state_dir: &Path) -> std::io::Result<Tokens> {
    check_head_tokens(state_dir)?;
    let client = given("FTDRIVE_TOKEN").map_or_else(|| stored_token(&token_file(state_dir)), Ok)?;
    let agent = given("FTDRIVE_AGENT_TOKEN").map_or_else(|| stored_token(&agent_token_file(state_dir)), Ok)?;
    Ok(Tokens { client, agent })
}

/// Whether the head's tokens, as given or stored, would do — read without writing anything, so
/// that a head refused for its tokens changes no file (DESIGN §10). A token not there yet is
/// made later, at random, and cannot then equal the other.
pub fn check_head_tokens(state_dir: &Path) -> std::io::Result<()> {
    let client = given("FTDRIVE_TOKEN").map_or_else(|| existing_token(&token_file(state_dir)), |t| Ok(Some(t)))?;
    let agent =
        given("FTDRIVE_AGENT_TOKEN").map_or_else(|| existing_token(&agent_token_file(state_dir)), |t| Ok(Some(t)))?;
    if let (Some(client), Some(agent)) = (client, agent) {
        if constant_time_eq(client.as_bytes(), agent.as_bytes()) {
            // InvalidInput: the operator's to fix (exit 2), not a failing disk.
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the client token and the agent token are the same; give $FTDRIVE_AGENT_TOKEN another value",
            ));
        }
    }
    Ok(())
}

/// Where the head's tokens come from, for its log: each variable set in place of its file,
/// and said louder where that file holds another token (clients and agents reading the file
/// are refused).
pub fn token_sources(state_dir: &Path) -> Vec<(String, bool)> {
    let files = [("FTDRIVE_TOKEN", token_file(state_dir)), ("FTDRIVE_AGENT_TOKEN", agent_token_file(state_dir))];
    files
        .into_iter()
        .map(|(var, file)| match given(var) {
            None => (format!("{} in {}", token_kind(var), file.display()), false),
            Some(token) => match existing_token(&file) {
                Ok(Some(stored)) if !constant_time_eq(stored.as_bytes(), token.as_bytes()) => (
                    format!(
                        "{} from ${var}, which is not the one in {}: clients and agents that read that file are \
                         refused",
                        token_kind(var),
                        file.display()
                    ),
                    true,
                ),
                _ => (format!("{} from ${var} (no file written)", token_kind(var)), false),
            },
        })
        .collect()
}

fn token_kind(var: &str) -> &'static str {
    if var == "FTDRIVE_TOKEN" {
        "client token"
    } else {
        "agent token"
    }
}

fn given(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|t| !t.is_empty())
}

/// The token in `file` (inside a private state dir), created if there is none.
pub fn stored_token(file: &Path) -> std::io::Result<String> {
    if let Some(token) = existing_token(file)? {
        return Ok(token);
    }
    if let Some(dir) = file.parent() {
        private_dir(dir)?;
    }
    let token = random_token()?;
    create_private(file, token.as_bytes())?;
    Ok(token)
}

/// The token in `file`, or `None` if there is no such file; an empty one is an error.
fn existing_token(file: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(file) {
        Ok(token) if !token.trim().is_empty() => Ok(Some(token.trim().to_string())),
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is empty; remove it to have a new token made", file.display()),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A state directory only its owner can enter.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // Only when it is not so already: a chmod on a read-only disk fails even when it would
    // change nothing, and an agent restarted there must still start, to re-attach (AG-6).
    if std::fs::metadata(dir)?.permissions().mode() & 0o777 == 0o700 {
        return Ok(());
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Whether `dir` takes a write that reaches its disk: a state dir on a full or read-only disk
/// fails here, with its path named by the caller, not later in the middle of an attempt.
pub fn check_writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(".write-check");
    let written = std::fs::File::create(&probe).and_then(|mut f| {
        f.write_all(&[0u8; 4096])?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&probe);
    written
}

/// Creates a file only its owner can read; refuses to replace one, or to follow a link.
pub fn create_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all(contents)?;
    file.sync_all()?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// A secret: given (in the environment), read from standard input at start, or read from a
/// file at every use, so that a file re-created meanwhile is picked up.
#[derive(Clone, Debug)]
pub enum Credential {
    Given(String),
    Stdin(String),
    File(PathBuf),
}

impl Credential {
    /// `$var` when set, else `file`.
    pub fn from_env_or_file(var: &str, file: PathBuf) -> Credential {
        match std::env::var(var).ok().filter(|t| !t.is_empty()) {
            Some(token) => Credential::Given(token),
            None => Credential::File(file),
        }
    }

    /// Where the secret comes from, for a message that says which one to fix.
    pub fn source(&self, var: &str) -> String {
        match self {
            Credential::Given(_) => format!("${var}"),
            Credential::Stdin(_) => "standard input".to_string(),
            Credential::File(file) => file.display().to_string(),
        }
    }

    pub fn read(&self) -> Result<String, String> {
        match self {
            Credential::Given(token) | Credential::Stdin(token) => Ok(token.clone()),
            Credential::File(file) => std::fs::read_to_string(file).map(|t| t.trim().to_string()).map_err(|e| {
                format!(
                    "cannot read the credential file {} ({e}); the head creates it in its state dir at its first \
                     start: give this process the head's --state-dir, or the file's contents in \
                     $FTDRIVE_AGENT_TOKEN",
                    file.display()
                )
            }),
        }
    }
}

/// The longest token read from standard input (the head's are 64 characters).
const MAX_TOKEN_BYTES: u64 = 4096;

/// A token given on standard input (`ftdrive node --agent-token-stdin`): a file its user cannot
/// read, opened by whoever started the process (systemd's `StandardInput=file:`), so that the
/// secret is nowhere a job of that user can look, not even while the process starts. Standard
/// input is then `/dev/null`.
pub fn token_from_stdin() -> Result<Credential, String> {
    use std::io::Read;
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_TOKEN_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the agent token from standard input: {e}"))?;
    let token = text.trim();
    let what = if token.is_empty() {
        "nothing"
    } else if token.len() as u64 >= MAX_TOKEN_BYTES || token.contains(char::is_whitespace) {
        "more than one token (a token is one word, of fewer than 4096 bytes)"
    } else {
        ""
    };
    if !what.is_empty() {
        return Err(format!(
            "standard input holds {what}, not an agent token: give it the `agent-token` file of the head's \
             state dir (e.g. `ftdrive node --agent-token-stdin < agent-token`)"
        ));
    }
    let null = std::fs::File::open("/dev/null").map_err(|e| format!("cannot open /dev/null: {e}"))?;
    // SAFETY: dup2 onto descriptor 0, which this process owns; `null` stays valid throughout.
    if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 0) } < 0 {
        return Err(format!("cannot close standard input: {}", std::io::Error::last_os_error()));
    }
    Ok(Credential::Stdin(token.to_string()))
}

/// The credential an agent presents: `$FTDRIVE_AGENT_TOKEN`, or the head's agent token file.
pub fn agent_credential(state_dir: &Path) -> Credential {
    Credential::from_env_or_file("FTDRIVE_AGENT_TOKEN", agent_token_file(state_dir))
}

/// How `client_token` names a token taken from the environment rather than a file.
pub const CLIENT_TOKEN_VAR: &str = "$FTDRIVE_TOKEN";

/// The token a client presents, `$FTDRIVE_TOKEN` or the head's token file, and which of the
/// two it came from (so that a refusal can say which one to fix).
pub fn client_token(state_dir: &Path) -> Result<(String, String), String> {
    let (token, from) = match given("FTDRIVE_TOKEN") {
        Some(token) => (token, CLIENT_TOKEN_VAR.to_string()),
        None => {
            let file = token_file(state_dir);
            let token = std::fs::read_to_string(&file).map_err(|e| {
                format!(
                    "no API token: set $FTDRIVE_TOKEN or make {} readable ({e}); the head writes it at start",
                    file.display()
                )
            })?;
            (token.trim().to_string(), file.display().to_string())
        }
    };
    // It goes into an HTTP header: a newline or a space (a copy and paste of two lines) was
    // told as a head that cannot be reached.
    if let Some(bad) = token.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!(
            "the token from {from} holds {bad:?}, which no token has: give the contents of the head's `token` file, \
             one line"
        ));
    }
    Ok((token, from))
}

/// Holds `path` locked for as long as the returned file is open (and no longer: the lock
/// goes with the process, however it ends). Fails at once if another process holds it.
pub fn lock_exclusive(path: &Path) -> std::io::Result<std::fs::File> {
    lock(path, libc::LOCK_EX | libc::LOCK_NB)
}

/// As `lock_exclusive`, but waits for whoever holds the lock to let go.
pub fn lock_in_turn(path: &Path) -> std::io::Result<std::fs::File> {
    lock(path, libc::LOCK_EX)
}

fn lock(path: &Path, operation: libc::c_int) -> std::io::Result<std::fs::File> {
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    let file = match opened {
        // A lock file made before the disk turned read-only locks as well read-only: flock
        // does not ask for write access.
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?
        }
        opened => opened?,
    };
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), operation) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// The token of a request's `Authorization: Bearer TOKEN` header. The scheme's name is
/// case-insensitive (RFC 9110 §11.1), as clients such as curl's `--oauth2-bearer` and
/// Python's libraries may spell it.
pub fn bearer_token(headers: &actix_web::http::header::HeaderMap) -> Option<&str> {
    let value = headers.get(actix_web::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim_start_matches(' '))
}

/// Compares secrets in time that does not depend on where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An agent incarnation: larger for every later start (milliseconds since the epoch, with
/// random low bits so that two agents started in the same millisecond still differ).
pub fn incarnation() -> u64 {
    (unix_ms() << 12) | (random_u64() & 0xfff)
}

/// This machine's wall clock, in milliseconds since the epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// 32 random bytes from the OS, hex-encoded.
pub fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(hex(&bytes))
}

/// Lower-case hex of `bytes` (tokens, identity digests).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A random 64-bit number from the OS (agent incarnations).
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    read.map(|_| u64::from_le_bytes(bytes)).unwrap_or_else(|_| u64::from(std::process::id()) << 32 | 1)
}

/// Writes a file only its owner can read, replacing it atomically.
pub fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    replace(path, contents, |tmp| {
        let file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(tmp)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        Ok(file)
    })
}

/// Writes a file atomically (temporary file, fsync, rename).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    replace(path, contents, |tmp| std::fs::File::create(tmp))
}

/// Replaces `path` with `contents` through a temporary file made by `create`, synced, then
/// renamed; one that fails leaves no half-written temporary file (a full disk left empty ones).
fn replace(
    path: &Path,
    contents: &[u8],
    create: impl FnOnce(&Path) -> std::io::Result<std::fs::File>,
) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let written = create(&tmp).and_then(|mut file| {
        file.write_all(contents)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_is_read_whatever_the_case_of_its_scheme() {
        let token_of = |value: &str| {
            let mut headers = actix_web::http::header::HeaderMap::new();
            headers.insert(actix_web::http::header::AUTHORIZATION, value.parse().unwrap());
            bearer_token(&headers).map(str::to_string)
        };
        assert_eq!(token_of("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(token_of("bearer abc").as_deref(), Some("abc"));
        assert_eq!(token_of("BEARER  abc").as_deref(), Some("abc"));
        assert_eq!(token_of("Basic abc"), None);
        assert_eq!(token_of("Bearerabc"), None);
        assert_eq!(bearer_token(&actix_web::http::header::HeaderMap::new()), None);
    }

    #[test]
    fn a_write_that_fails_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("record");
        std::fs::create_dir(&target).unwrap(); // the rename onto it fails
        assert!(write_atomic(&target, b"{}").is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from("record")]);
    }

    #[test]
    fn a_dir_that_takes_no_write_is_found_out_and_a_good_one_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        check_writable(dir.path()).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the probe is gone");
        assert!(check_writable(Path::new("/proc")).is_err(), "procfs takes no new file");
    }

    #[test]
    fn a_head_token_is_made_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let first = stored_token(&token_file(&state)).unwrap();
        assert_eq!(stored_token(&token_file(&state)).unwrap(), first, "the same token at the next start");
        let agent = stored_token(&agent_token_file(&state)).unwrap();
        assert_ne!(agent, first, "two credentials");
        let file_mode = std::fs::metadata(agent_token_file(&state)).unwrap().permissions().mode() & 0o777;
        assert_eq!(file_mode, 0o600);
        let mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(create_private(&token_file(&state), b"x").is_err(), "never replaced");
    }

    #[test]
    fn token_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let file = token_file(dir.path());
        write_private(&file, b"secret").unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(random_token().unwrap().len(), 64);
    }
}
