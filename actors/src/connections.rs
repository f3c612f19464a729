//! How many connections a server of ftdrive's (the head's API, an agent's log server) takes at
//! once: bounded by the process's open-file limit, so that whoever holds connections open
//! (a client, a scanner, a flood) makes later ones wait to be accepted instead of taking the
//! descriptors the daemon's own work needs (the head's store, an attempt's log and pipes);
//! and the open-file limit a daemon raises to at start.

/// Descriptors kept back from connections for the daemon's own files, pipes and outgoing
/// connections.
pub const RESERVED_FDS: u64 = 256;

/// Connections one of `workers` HTTP workers takes at once, out of `limit` open files, at
/// most `most` in all (actix's own default, 25,000 a worker, is over most limits).
pub fn per_worker(limit: u64, workers: usize, most: usize) -> usize {
    let workers = workers.max(1) as u64;
    let room = limit.saturating_sub(RESERVED_FDS) / workers;
    (room.min((most as u64) / workers)).max(1) as usize
}

/// The process's open-file soft limit now (after a daemon raised it to the hard one).
pub fn open_file_limit() -> u64 {
    limits().map_or(1_024, |limit| limit.rlim_cur)
}

/// A daemon takes the hard limit of open files as its soft one, as servers do: the usual soft
/// limit (1,024) is what a few hundred connections use up. `beyond` says what running out does.
pub fn raise_open_file_limit(beyond: &str) {
    let Some(mut limit) = limits().filter(|l| l.rlim_cur < l.rlim_max) else { return };
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: setrlimit on this process with a valid struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        tracing::warn!("cannot raise the open-file limit to {}: {beyond}", limit.rlim_max);
    }
}

fn limits() -> Option<libc::rlimit> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit on this process with a valid struct.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_leave_the_reserve_and_share_the_rest_among_workers() {
        assert_eq!(per_worker(1_024, 2, usize::MAX), 384);
        assert_eq!(per_worker(1_024, 1, 256), 256, "at most `most`");
        assert_eq!(per_worker(1_048_576, 2, 50_000), 25_000);
        assert_eq!(per_worker(100, 1, 256), 1, "a limit under the reserve still serves one");
    }
}
