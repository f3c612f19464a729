//! Helpers the daemon and fleet benchmarks share: waiting for a file the head writes, and
//! reading sorted timings.

use std::path::Path;
use std::time::{Duration, Instant};

/// The text of `path` once it exists (the head writes `head.url` once it listens).
pub fn wait_for_file(path: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The `p` quantile of `sorted` timings; zero when there are none.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted.get(((sorted.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or_default()
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
