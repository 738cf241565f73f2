//! The worker's whole process tree: found by parent links in `/proc`, killed in rounds until
//! none is left; orphans adopted by a subreaper daemon, swept after each run and on exit.

use super::*;

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): a worker descendant that
/// outlives the worker (a `setsid()`, a double fork) is handed to this process instead of init,
/// where [`run`] finds and kills it after each worker and [`kill_all`] on exit. Call it once,
/// early, in a process that starts child processes only through this crate (the daemon): every
/// other child it has is taken for such an orphan, killed and reaped.
pub fn adopt_orphans() -> std::io::Result<()> {
    // SAFETY: prctl on integers.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    ADOPTING.store(true, Ordering::SeqCst);
    Ok(())
}

/// Kills every live worker with all its descendants, and every orphan adopted by this process
/// (see [`adopt_orphans`]): for the daemon's exit, so nothing it started outlives it. The
/// threads running those workers see them end and reap them if the process lives on.
pub fn kill_all() {
    for pid in live_pids() {
        kill_tree(pid);
    }
    sweep_orphans();
}

/// How long one kill of a tree may go on against a tree that keeps forking.
pub(crate) const SWEEP_LIMIT: Duration = Duration::from_secs(2);

/// Kills `root` (a live, unreaped worker) and every descendant of it. The worker is stopped
/// first, so it forks no more, and stays alive while its descendants are killed: as a
/// subreaper it holds their orphans, so each round of the `/proc` scan sees the whole tree.
/// Rounds repeat until a scan finds no live descendant not yet sent SIGKILL (one in the
/// kernel, uninterruptible, dies when its call returns), or after [`SWEEP_LIMIT`].
pub(crate) fn kill_tree(root: u32) {
    let root = root as libc::pid_t;
    // SAFETY: kill takes no pointers; `root` is unreaped, so the pid is still the worker.
    unsafe {
        libc::kill(root, libc::SIGSTOP);
    }
    kill_descendants(&[root], &BTreeSet::new());
    kill_group(root as u32);
    // The worker may have left its group (setsid): killed by pid too.
    // SAFETY: as above.
    unsafe {
        libc::kill(root, libc::SIGKILL);
    }
}

/// SIGKILLs every live descendant of `roots` (not the roots), skipping the subtrees of `spare`,
/// in rounds as [`kill_tree`] says. Returns the pids signalled.
pub(crate) fn kill_descendants(
    roots: &[libc::pid_t],
    spare: &BTreeSet<libc::pid_t>,
) -> BTreeSet<libc::pid_t> {
    let until = Instant::now() + SWEEP_LIMIT;
    let mut signalled = BTreeSet::new();
    loop {
        let table = proc_table();
        let live: Vec<libc::pid_t> = descendants(&table, roots, spare)
            .into_iter()
            .filter(|p| !table.get(p).is_some_and(|e| e.zombie))
            .collect();
        let mut fresh = false;
        for &p in &live {
            fresh |= signalled.insert(p);
            // SAFETY: kill takes no pointers. The pid was a live descendant a moment ago; a
            // process that died since stays a zombie until its subreaper parent reaps it.
            unsafe {
                libc::kill(p, libc::SIGKILL);
            }
        }
        if !fresh || Instant::now() >= until {
            return signalled;
        }
    }
}

/// Kills and reaps the orphans this process adopted (see [`adopt_orphans`]): its children that
/// are not live workers, with their whole trees. Nothing unless [`adopt_orphans`] was called.
pub(crate) fn sweep_orphans() {
    if !ADOPTING.load(Ordering::SeqCst) {
        return;
    }
    let _spawning = SPAWN.lock().unwrap_or_else(PoisonError::into_inner);
    // SAFETY: getpid takes no arguments.
    let me = unsafe { libc::getpid() };
    let live: BTreeSet<libc::pid_t> = live_pids().into_iter().map(|p| p as libc::pid_t).collect();
    // Orphans of orphans are adopted too; each round sees them as new children.
    let signalled = kill_descendants(&[me], &live);
    // Reap what died (a SIGKILLed process takes a moment to become a zombie).
    let until = Instant::now() + Duration::from_millis(200);
    let mut left: BTreeSet<libc::pid_t> = signalled;
    for (pid, e) in proc_table() {
        if e.ppid == me && e.zombie && !live.contains(&pid) {
            left.insert(pid);
        }
    }
    while !left.is_empty() && Instant::now() < until {
        left.retain(|&p| {
            let mut status = 0;
            // SAFETY: waitpid on one pid with a valid status pointer, never blocking. A pid
            // that is not our child (a grandchild) answers ECHILD and is dropped: its own
            // parent reaps it, or it is adopted and swept next time.
            let r = unsafe { libc::waitpid(p, &mut status, libc::WNOHANG) };
            r == 0
        });
        if !left.is_empty() {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// One process in `/proc`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProcEntry {
    ppid: libc::pid_t,
    zombie: bool,
}

/// Every process of this PID namespace by pid, from `/proc/PID/stat` (the kernel's, each read
/// bounded).
pub(crate) fn proc_table() -> std::collections::BTreeMap<libc::pid_t, ProcEntry> {
    let mut table = std::collections::BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return table;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let mut buf = Vec::with_capacity(512);
        let read = std::fs::File::open(format!("/proc/{pid}/stat"))
            .and_then(|f| f.take(4096).read_to_end(&mut buf));
        if read.is_err() {
            continue;
        }
        if let Some(e) = parse_stat(&buf) {
            table.insert(pid, e);
        }
    }
    table
}

/// State and parent from a `/proc/PID/stat` line: `pid (comm) state ppid ...`, where the
/// command name may hold spaces and parentheses (so the fields start after the last `)`).
pub(crate) fn parse_stat(line: &[u8]) -> Option<ProcEntry> {
    let close = line.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(line.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(ProcEntry {
        ppid,
        zombie: state == "Z" || state == "X",
    })
}

/// The descendants of `roots` in `table` (parent links), without those of `spare` nor `spare`.
pub(crate) fn descendants(
    table: &std::collections::BTreeMap<libc::pid_t, ProcEntry>,
    roots: &[libc::pid_t],
    spare: &BTreeSet<libc::pid_t>,
) -> Vec<libc::pid_t> {
    let mut children: std::collections::BTreeMap<libc::pid_t, Vec<libc::pid_t>> =
        std::collections::BTreeMap::new();
    for (&pid, e) in table {
        children.entry(e.ppid).or_default().push(pid);
    }
    let mut found = Vec::new();
    let mut queue: Vec<libc::pid_t> = roots.to_vec();
    let mut seen: BTreeSet<libc::pid_t> = roots.iter().copied().collect();
    while let Some(p) = queue.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            if !spare.contains(&c) && seen.insert(c) {
                found.push(c);
                queue.push(c);
            }
        }
    }
    found
}

pub(crate) fn kill_group(pid: u32) {
    // SAFETY: kill takes no pointers. The group id is the worker's pid (setpgid in the
    // child), which stays reserved until we reap the worker.
    unsafe {
        libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
    }
}
