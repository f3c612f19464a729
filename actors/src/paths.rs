//! Where things live on disk, and the API token: the head writes a fresh token into its state
//! directory (mode 0600) unless `$FTDRIVE_TOKEN` is set; clients read the same places.

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

/// The token a head uses: `$FTDRIVE_TOKEN`, or a new random one written to `<state_dir>/token`.
pub fn head_token(state_dir: &Path) -> std::io::Result<String> {
    if let Some(token) = std::env::var("FTDRIVE_TOKEN").ok().filter(|t| !t.is_empty()) {
        return Ok(token);
    }
    let token = random_token()?;
    std::fs::create_dir_all(state_dir)?;
    write_private(&token_file(state_dir), token.as_bytes())?;
    Ok(token)
}

/// The token a client presents: `$FTDRIVE_TOKEN`, or the head's token file.
pub fn client_token(state_dir: &Path) -> Result<String, String> {
    if let Some(token) = std::env::var("FTDRIVE_TOKEN").ok().filter(|t| !t.is_empty()) {
        return Ok(token);
    }
    let file = token_file(state_dir);
    std::fs::read_to_string(&file).map(|t| t.trim().to_string()).map_err(|e| {
        format!(
            "no API token: set $FTDRIVE_TOKEN or make {} readable ({e}); the head writes it at start",
            file.display()
        )
    })
}

/// 32 random bytes from the OS, hex-encoded.
pub fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A random 64-bit number from the OS (agent incarnations).
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    read.map(|_| u64::from_le_bytes(bytes)).unwrap_or_else(|_| u64::from(std::process::id()) << 32 | 1)
}

/// Writes a file only its owner can read, replacing it atomically.
pub fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(contents)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Writes a file atomically (temporary file, fsync, rename).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

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
