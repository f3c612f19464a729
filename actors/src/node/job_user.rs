//! The Unix user an agent's jobs run as (`ftdrive node --run-jobs-as USER`), as Slurm runs a
//! job as its user and Kubernetes a container as its `runAsUser`: resolved once at the agent's
//! start, handed to each attempt's supervisor as `--run-as UID:GID:GROUPS`, and taken on by
//! each worker between its fork and its exec.
//!
//! - **JU-1 the agent's user is not the jobs'.** The agent and the supervisors keep theirs
//!   (root: nothing else may switch users); only the workers switch. A job then cannot signal,
//!   trace or read the memory of its supervisor or agent, cannot enter the agent's state dir
//!   (its token, its records, other attempts' logs), and cannot move its processes out of the
//!   cgroup the agent made for it. Root is refused as the jobs' user: it would give them all of
//!   that back.
//! - **JU-2 the switch is whole.** Supplementary groups first (the user's own, as `login` sets
//!   them: a `video` group may be what opens the GPUs), then the group, then the user; the
//!   working directory is entered again as that user, so that one it may not enter fails the
//!   start, naming the directory, instead of leaving the job in a directory it cannot read.
//! - **JU-3 the job writes where it may.** Its `$TORCHELASTIC_ERROR_FILE`s are in a directory
//!   of its own (the supervisor's, outside the agent's state dir, which the job cannot enter),
//!   read back refusing links and anything but a plain file of the job's user.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The label an agent with `--run-jobs-as` gives its node, the user's name as its value (unless
/// `--labels` sets it): a job may select such nodes, and `ftdrive nodes` shows it.
pub const JOBS_USER_LABEL: &str = "jobs.user";

/// What the workers take on (JU-2): the part a supervisor needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, the user's own (may be empty).
    pub groups: Vec<u32>,
}

/// The jobs' user as the agent resolved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobUser {
    pub name: String,
    pub home: PathBuf,
    pub credentials: Credentials,
}

/// The most supplementary groups taken from the user's database entry (Linux's own bound).
const MAX_GROUPS: usize = 65_536;

impl JobUser {
    /// `given` (a user name, or a numeric uid, which needs no entry in the user database, as
    /// in a container) as the jobs' user, for an agent whose effective uid is `agent_uid`.
    pub fn resolve(given: &str, agent_uid: u32) -> Result<JobUser, String> {
        let user = match lookup(given)? {
            Some(user) => user,
            None => match given.parse::<u32>() {
                Ok(uid) => JobUser {
                    name: uid.to_string(),
                    home: PathBuf::from("/"),
                    credentials: Credentials { uid, gid: uid, groups: Vec::new() },
                },
                Err(_) => {
                    return Err(format!(
                        "no user named {given:?} on this machine; create it (e.g. `useradd --system ftdrive-jobs`) \
                         or give a numeric uid"
                    ))
                }
            },
        };
        if user.credentials.uid == 0 {
            return Err(format!(
                "{given} is root, which would let jobs signal and trace their agent and read its state dir; \
                 give an unprivileged user"
            ));
        }
        if agent_uid != 0 {
            return Err(format!(
                "the agent runs as uid {agent_uid}, and only root may start processes as another user; start the \
                 agent as root (it keeps root, its jobs run as {given}), or leave out --run-jobs-as"
            ));
        }
        Ok(user)
    }

    /// What a login as this user would set: a job's own spec may set them otherwise.
    pub fn login_env(&self) -> [(&'static str, String); 3] {
        let home = self.home.to_string_lossy().into_owned();
        [("USER", self.name.clone()), ("LOGNAME", self.name.clone()), ("HOME", home)]
    }
}

impl Credentials {
    /// As the supervisor is given them: `UID:GID:G1,G2` (no groups: `UID:GID:`).
    pub fn to_arg(&self) -> String {
        let groups: Vec<String> = self.groups.iter().map(u32::to_string).collect();
        format!("{}:{}:{}", self.uid, self.gid, groups.join(","))
    }

    pub fn parse_arg(text: &str) -> Option<Credentials> {
        let mut parts = text.splitn(3, ':');
        let (uid, gid) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
        let groups = match parts.next()? {
            "" => Vec::new(),
            list => list.split(',').map(|g| g.parse().ok()).collect::<Option<Vec<u32>>>()?,
        };
        Some(Credentials { uid, gid, groups })
    }

    /// A new directory under `under` that only this user may enter (JU-3): made by `mkdtemp`
    /// (a name no one could have taken ahead, mode 0700), then given to the user.
    pub fn private_dir(&self, under: &Path) -> std::io::Result<PathBuf> {
        let template = under.join("ftdrive-attempt-XXXXXX");
        let mut template = CString::new(template.into_os_string().into_vec())?.into_bytes_with_nul();
        // SAFETY: mkdtemp rewrites the template's trailing Xs in place, within its length.
        if unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) }.is_null() {
            return Err(std::io::Error::last_os_error());
        }
        template.pop();
        let dir = PathBuf::from(std::ffi::OsString::from_vec(template));
        if let Err(e) = std::os::unix::fs::chown(&dir, Some(self.uid), Some(self.gid)) {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(dir)
    }

    /// Whether this user may enter `dir` (JU-2): tried in a child that takes the user on, as a
    /// worker will. Its error, if not.
    pub fn try_enter(&self, dir: &Path) -> std::io::Result<()> {
        let dir = CString::new(dir.as_os_str().as_bytes())?;
        // SAFETY: the child makes only async-signal-safe calls on memory allocated before the
        // fork, then exits; the parent reaps it.
        unsafe {
            match libc::fork() {
                -1 => Err(std::io::Error::last_os_error()),
                0 => {
                    let code = match self.take_on(&dir) {
                        Ok(()) => 0,
                        Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
                    };
                    libc::_exit(code)
                }
                child => {
                    let mut status = 0;
                    if libc::waitpid(child, &mut status, 0) != child {
                        return Err(std::io::Error::last_os_error());
                    }
                    match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
                        Some(0) => Ok(()),
                        Some(errno) => Err(std::io::Error::from_raw_os_error(errno)),
                        None => Err(std::io::Error::other("the probe did not exit")),
                    }
                }
            }
        }
    }

    /// Takes them on (JU-2), then enters `cwd` as the new user. Called between fork and exec:
    /// only async-signal-safe calls, on what was allocated before the fork.
    pub fn take_on(&self, cwd: &CStr) -> std::io::Result<()> {
        // SAFETY: plain system calls on memory that outlives them.
        let failed = unsafe {
            libc::setgroups(self.groups.len(), self.groups.as_ptr()) != 0
                || libc::setgid(self.gid) != 0
                || libc::setuid(self.uid) != 0
                || libc::chdir(cwd.as_ptr()) != 0
        };
        if failed {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// `given`'s entry in the user database (`getpwnam`, then `getpwuid` for a number); `None` when
/// there is none.
fn lookup(given: &str) -> Result<Option<JobUser>, String> {
    let name = CString::new(given).map_err(|_| format!("{given:?} holds a NUL byte"))?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value for getpw*_r to fill in.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, the buffer's length is its own.
    let rc = unsafe {
        match given.parse::<u32>() {
            Ok(uid) => libc::getpwuid_r(uid, &mut entry, buf.as_mut_ptr().cast(), buf.len(), &mut found),
            Err(_) => libc::getpwnam_r(name.as_ptr(), &mut entry, buf.as_mut_ptr().cast(), buf.len(), &mut found),
        }
    };
    if rc != 0 {
        return Err(format!("cannot look up user {given}: {}", std::io::Error::from_raw_os_error(rc)));
    }
    if found.is_null() {
        return Ok(None);
    }
    // SAFETY: on success the entry's strings point into `buf`, which is still alive.
    let (user_name, home) = unsafe { (CStr::from_ptr(entry.pw_name), CStr::from_ptr(entry.pw_dir)) };
    let user_name = user_name.to_string_lossy().into_owned();
    let home = PathBuf::from(home.to_string_lossy().into_owned());
    let groups = supplementary_groups(&user_name, entry.pw_gid)?;
    Ok(Some(JobUser {
        name: user_name,
        home,
        credentials: Credentials { uid: entry.pw_uid, gid: entry.pw_gid, groups },
    }))
}

/// The groups `user` is a member of (`getgrouplist`), its own `gid` among them.
fn supplementary_groups(user: &str, gid: u32) -> Result<Vec<u32>, String> {
    let name = CString::new(user).map_err(|_| format!("{user:?} holds a NUL byte"))?;
    let mut count: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; count as usize];
        let asked = count;
        // SAFETY: `groups` holds `count` entries; getgrouplist writes at most that many and
        // sets `count` to how many there are.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(count as usize);
            return Ok(groups);
        }
        if count <= asked || count as usize > MAX_GROUPS {
            return Err(format!("cannot list the groups of user {user}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_travel_to_the_supervisor_unchanged() {
        for credentials in [
            Credentials { uid: 65534, gid: 65534, groups: Vec::new() },
            Credentials { uid: 1000, gid: 100, groups: vec![100, 44, 27] },
        ] {
            assert_eq!(Credentials::parse_arg(&credentials.to_arg()), Some(credentials));
        }
        for bad in ["", "1000", "1000:", "x:1:", "1:2:a", "1:2:3,,4"] {
            assert_eq!(Credentials::parse_arg(bad), None, "{bad}");
        }
    }

    #[test]
    fn root_and_unknown_users_are_refused_naming_what_to_give() {
        let root = JobUser::resolve("root", 0).unwrap_err();
        assert!(root.contains("root is root") && root.contains("unprivileged user"), "{root}");
        assert!(JobUser::resolve("0", 0).unwrap_err().contains("is root"));
        let unknown = JobUser::resolve("no-such-user-ftdrive", 0).unwrap_err();
        assert!(unknown.contains("no user named \"no-such-user-ftdrive\""), "{unknown}");
    }

    #[test]
    fn only_a_root_agent_may_run_jobs_as_another_user() {
        let refused = JobUser::resolve("nobody", 1000).unwrap_err();
        assert!(refused.contains("the agent runs as uid 1000") && refused.contains("start the agent as root"));
        let nobody = JobUser::resolve("nobody", 0).unwrap();
        assert_eq!((nobody.name.as_str(), nobody.credentials.uid), ("nobody", 65534));
        assert!(nobody.credentials.groups.contains(&nobody.credentials.gid), "{nobody:?}");
        let numeric = JobUser::resolve("4242", 0).unwrap();
        assert_eq!(numeric.credentials, Credentials { uid: 4242, gid: 4242, groups: Vec::new() });
    }

    /// Tried as the user: run as root, a directory only root may enter is refused to nobody, and
    /// `/` is not (JU-2).
    #[test]
    fn a_directory_is_tried_as_the_jobs_user() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return; // only root may take another user on; resolve refuses the rest (above)
        }
        let nobody = JobUser::resolve("nobody", 0).unwrap().credentials;
        nobody.try_enter(Path::new("/")).unwrap();
        let private = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let refused = nobody.try_enter(private.path()).unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::EACCES), "{refused}");
    }
}
