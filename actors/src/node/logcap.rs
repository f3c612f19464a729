//! A bound on what an attempt's logs keep on disk (`ftdrive node --max-log-mb`): a job that
//! prints without end must not fill its node's disk and take every other job there down with
//! it. Each log keeps its last `max_bytes` at most, or about: the supervisor looks at its logs
//! ten times a second and, past the bound, frees the oldest part (all but the last half of the
//! bound) by punching a hole in the file, and once more when the output has all been copied,
//! so that what stays on disk after the attempt is within the bound (looked at once a second,
//! and not at the end, a log written at a gigabyte a second kept 874 MB under a bound of 50). The workers write on at their offsets, unaware (the
//! logs are append-only), and a reader's offsets stay valid; the log server says how much was
//! dropped where a read meets a hole (`read_from`). Where the file system cannot punch holes
//! the log grows unbounded, as before, and the supervisor says so once in the log itself.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the supervisor looks at the size of its logs: a look is one `fstat` a log.
const CHECK_EVERY: Duration = Duration::from_millis(100);
/// Holes are punched in whole blocks of this size.
const BLOCK_BYTES: u64 = 4096;

/// The bound on one attempt's logs, and how far each is dropped already.
pub struct LogCap {
    max_bytes: u64,
    logs: std::sync::Mutex<Vec<CappedLog>>,
}

/// One log under the bound: opened once it exists and kept open, so that a look is an
/// `fstat`, not an open (ten looks a second, for each worker's log).
struct CappedLog {
    path: PathBuf,
    file: Option<File>,
    dropped: u64,
}

impl LogCap {
    /// Bounds each of `logs` to about `max_bytes`.
    pub fn new(logs: Vec<PathBuf>, max_bytes: u64) -> std::sync::Arc<LogCap> {
        let logs = logs.into_iter().map(|path| CappedLog { path, file: None, dropped: 0 }).collect();
        std::sync::Arc::new(LogCap { max_bytes, logs: std::sync::Mutex::new(logs) })
    }

    /// Looks at the logs every `CHECK_EVERY` for as long as the supervisor lives (its thread
    /// ends with the process).
    pub fn watch(self: &std::sync::Arc<Self>) {
        let cap = self.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(CHECK_EVERY);
            cap.apply();
        });
    }

    /// Frees what each log holds past the bound, now. Where the file system cannot punch
    /// holes, the first log that finds out says so and the logs are left to grow.
    pub fn apply(&self) {
        let mut logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        for log in logs.iter_mut() {
            if log.file.is_none() {
                log.file = std::fs::OpenOptions::new().write(true).open(&log.path).ok();
            }
            let Some(file) = &log.file else { continue };
            match bound(file, log.dropped, self.max_bytes) {
                Ok(now) => log.dropped = now,
                Err(e) => {
                    say_unbounded(&log.path, &e);
                    logs.clear();
                    return;
                }
            }
        }
    }
}

/// Frees the part of `file` past the bound, if any: returns how far the file is dropped now.
fn bound(file: &File, dropped: u64, max_bytes: u64) -> std::io::Result<u64> {
    let len = file.metadata()?.len();
    if len.saturating_sub(dropped) <= max_bytes {
        return Ok(dropped);
    }
    let upto = (len - max_bytes / 2) / BLOCK_BYTES * BLOCK_BYTES;
    if upto <= dropped {
        return Ok(dropped);
    }
    punch_hole(file, dropped, upto - dropped)?;
    Ok(upto)
}

fn punch_hole(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate only changes the blocks of a file this process opened for writing.
    let done = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset as libc::off_t, len as libc::off_t) };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn say_unbounded(log: &Path, error: &std::io::Error) {
    if let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(log) {
        let _ =
            writeln!(file, "[ftdrive: this log cannot be bounded on this file system ({error}); it grows as written]");
    }
}

/// Up to `max` bytes of `path` from `offset`, and the offset to read from next. A read that
/// starts in a dropped part (a hole) gets a line saying how many bytes were dropped there in
/// their place, then what follows them.
pub fn read_from(path: &Path, offset: u64, max: u64) -> std::io::Result<(Vec<u8>, u64)> {
    let mut file = File::open(path)?;
    let Some(data) = next_data(&file, offset) else { return Ok((Vec::new(), offset)) };
    file.seek(SeekFrom::Start(data))?;
    let mut kept = Vec::new();
    let read = file.take(max).read_to_end(&mut kept)? as u64;
    if data == offset {
        return Ok((kept, data + read));
    }
    // Holes are punched in whole blocks, mid-line: the rest of the cut line goes with the
    // dropped part, so that what follows the note starts a line, as a rotated log does.
    let cut_line = kept.iter().take(MAX_CUT_LINE_BYTES).position(|b| *b == b'\n').map_or(0, |at| at + 1);
    let mut bytes = dropped_note(data - offset + cut_line as u64);
    bytes.extend_from_slice(&kept[cut_line..]);
    Ok((bytes, data + read))
}

/// The last `lines` lines of `path` (`ftdrive logs --tail`), from at most its last `max`
/// bytes, and the offset to read from next: the end of what was read. What is answered starts
/// a line; a tail that reaches back into a dropped part starts with the note `read_from`
/// gives there.
pub fn read_tail(path: &Path, lines: u32, max: u64) -> std::io::Result<(Vec<u8>, u64)> {
    let mut file = File::open(path)?;
    let end = file.metadata()?.len();
    let kept = next_data(&file, 0).unwrap_or(end);
    let from = end.saturating_sub(max).max(kept);
    // One byte before the window, where there is one to read, says whether it starts a line.
    let before = if from > kept { from - 1 } else { from };
    file.seek(SeekFrom::Start(before))?;
    let mut window = Vec::new();
    file.take(end - before).read_to_end(&mut window)?;
    let next = before + window.len() as u64;
    let (start, whole) = tail_start(&window, lines, before > 0);
    if whole || before != kept || kept == 0 {
        return Ok((window[start..].to_vec(), next));
    }
    let mut bytes = dropped_note(kept + start as u64);
    bytes.extend_from_slice(&window[start..]);
    Ok((bytes, next))
}

/// Where the last `lines` lines of `window` start, and whether there were that many. A last
/// line not ended yet counts as one. Short of them, a window that starts mid-line (`cut_first`:
/// it starts past the log's start) goes from its first whole line.
fn tail_start(window: &[u8], lines: u32, cut_first: bool) -> (usize, bool) {
    if lines == 0 {
        return (window.len(), true);
    }
    let body = window.strip_suffix(b"\n").unwrap_or(window);
    let mut ends = body.iter().enumerate().rev().filter(|(_, b)| **b == b'\n').map(|(at, _)| at + 1);
    if let Some(start) = ends.nth(lines as usize - 1) {
        return (start, true);
    }
    let first_whole = if cut_first { window.iter().position(|b| *b == b'\n').map_or(0, |at| at + 1) } else { 0 };
    (first_whole, false)
}

/// The line a reader gets in place of `bytes` dropped from a log.
fn dropped_note(bytes: u64) -> Vec<u8> {
    format!("[ftdrive: {bytes} bytes of this log were dropped here: it passed its node's --max-log-mb]\n").into_bytes()
}

/// The longest end of a cut line dropped with the hole before it; a longer one is kept as is.
const MAX_CUT_LINE_BYTES: usize = 64 * 1024;

/// Where data starts at or after `offset`; `None` past the end. A file system that does not
/// track holes answers `offset` itself.
fn next_data(file: &File, offset: u64) -> Option<u64> {
    // SAFETY: lseek only moves this process's offset of a descriptor it holds.
    let at = unsafe { libc::lseek(file.as_raw_fd(), offset as libc::off_t, libc::SEEK_DATA) };
    if at >= 0 {
        return Some(at as u64);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENXIO) => None,
        _ => Some(offset),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_past_its_bound_keeps_its_end_and_says_what_was_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("attempt-1.log");
        let mut writer = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let line = format!("{}\n", "x".repeat(99));
        for _ in 0..1_000 {
            writer.write_all(line.as_bytes()).unwrap();
        }
        let capped = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
        let dropped = bound(&capped, 0, 40_000).unwrap();
        assert_eq!(dropped, (100_000 - 20_000) / BLOCK_BYTES * BLOCK_BYTES);
        writer.write_all(b"the end\n").unwrap();
        let (bytes, next) = read_from(&log, 0, 1 << 20).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        // The hole ends mid-line: the rest of that line is dropped with it.
        let to_line_end = dropped.div_ceil(100) * 100;
        let said = format!(
            "[ftdrive: {to_line_end} bytes of this log were dropped here: it passed its node's --max-log-mb]\n{line}"
        );
        assert!(text.starts_with(&said), "{}", &text[..200]);
        assert!(text.ends_with("x\nthe end\n"));
        assert_eq!(next, 100_008, "offsets stay those of the whole log");
        let (rest, same) = read_from(&log, next, 1 << 20).unwrap();
        assert_eq!((rest.len(), same), (0, next));
        let blocks = std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&log).unwrap());
        assert!(blocks * 512 < 40_000, "the dropped part takes no disk: {blocks} blocks");
        assert_eq!(bound(&capped, dropped, 40_000).unwrap(), dropped, "within the bound again");
    }

    #[test]
    fn a_tail_is_the_last_lines_and_says_where_the_log_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("attempt-1.log");
        std::fs::write(&log, b"a\nb\nc\n").unwrap();
        assert_eq!(read_tail(&log, 2, 1 << 20).unwrap(), (b"b\nc\n".to_vec(), 6));
        assert_eq!(read_tail(&log, 0, 1 << 20).unwrap(), (Vec::new(), 6), "none, from the end on");
        assert_eq!(read_tail(&log, 9, 1 << 20).unwrap(), (b"a\nb\nc\n".to_vec(), 6), "all there is");
        std::fs::write(&log, b"a\nb\nc").unwrap();
        assert_eq!(read_tail(&log, 1, 1 << 20).unwrap(), (b"c".to_vec(), 5), "an unfinished line counts");
        assert_eq!(read_tail(&log, 2, 1 << 20).unwrap(), (b"b\nc".to_vec(), 5));
        std::fs::write(&log, b"").unwrap();
        assert_eq!(read_tail(&log, 3, 1 << 20).unwrap(), (Vec::new(), 0));
    }

    #[test]
    fn a_tail_past_its_bound_in_bytes_starts_at_a_whole_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("attempt-1.log");
        let lines: String = (0..1_000).map(|i| format!("{i:099}\n")).collect();
        std::fs::write(&log, &lines).unwrap();
        for max in [1_000, 1_050, 1_099] {
            let (bytes, next) = read_tail(&log, 50, max).unwrap();
            assert_eq!(next, 100_000);
            let text = String::from_utf8(bytes).unwrap();
            let kept = (max / 100) as usize;
            assert_eq!(text.lines().count(), kept, "max {max}: the whole lines within it");
            assert!(text.starts_with(&format!("{:099}\n", 1_000 - kept)), "max {max}: {}", &text[..120]);
        }
        let (bytes, _) = read_tail(&log, 3, 1_000).unwrap();
        assert_eq!(bytes, &lines.as_bytes()[99_700..]);
    }

    #[test]
    fn a_tail_that_reaches_a_dropped_part_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("attempt-1.log");
        let line = format!("{}\n", "x".repeat(99));
        std::fs::write(&log, line.repeat(1_000)).unwrap();
        let capped = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
        let dropped = bound(&capped, 0, 40_000).unwrap();
        let (bytes, next) = read_tail(&log, 3, 1 << 20).unwrap();
        assert_eq!((bytes, next), (line.repeat(3).into_bytes(), 100_000), "within the kept part: no note");
        let (bytes, _) = read_tail(&log, 1_000, 1 << 20).unwrap();
        let to_line_end = dropped.div_ceil(100) * 100;
        let said = format!(
            "[ftdrive: {to_line_end} bytes of this log were dropped here: it passed its node's --max-log-mb]\n"
        );
        let kept = (100_000 - to_line_end) as usize / 100;
        assert_eq!(String::from_utf8(bytes).unwrap(), said + &line.repeat(kept));
    }

    #[test]
    fn a_read_within_the_kept_part_is_the_bytes_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("attempt-1.log");
        std::fs::write(&log, b"hello\nworld\n").unwrap();
        assert_eq!(read_from(&log, 6, 3).unwrap(), (b"wor".to_vec(), 9));
        assert_eq!(read_from(&log, 12, 3).unwrap(), (Vec::new(), 12));
    }
}
