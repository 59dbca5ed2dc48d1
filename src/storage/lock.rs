//! Every OS lock ralph takes under `.ralph/`:
//! - `ralph.lock`: held by the running loop for its whole life (and by `--reset`); commands test
//!   it with a shared lock for an instant to tell a running loop from a crashed one.
//! - `ralph-context.lock`, `ralph-tasks.lock`: held while the context or the task file is edited.
//!
//! Lock files are never deleted (deleting a lock file races).

use std::fs::{self, File, TryLockError};
use std::os::unix::fs::OpenOptionsExt as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{LOCK_FILE, RalphDir};

/// Opens (creating if needed) a lock file under `.ralph/`.
fn open(dir: &RalphDir, name: &str) -> anyhow::Result<File> {
    dir.ensure()?;
    let path = dir.file(name);
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .read(true)
        .mode(0o600)
        .open(&path)
        .map_err(|err| {
            let hint = if err.kind() == std::io::ErrorKind::PermissionDenied {
                format!(
                    " (make `{}` writable: chmod u+w {})",
                    dir.root().display(),
                    dir.root().display()
                )
            } else {
                String::new()
            };
            anyhow::Error::new(err).context(format!("failed to open `{}`{hint}", path.display()))
        })
}

/// Waits for and takes the exclusive lock `name` (released when the file is dropped).
pub(crate) fn exclusive(dir: &RalphDir, name: &str) -> anyhow::Result<File> {
    let file = open(dir, name)?;
    file.lock()
        .with_context(|| format!("failed to lock `{}`", dir.file(name).display()))?;
    Ok(file)
}

/// Takes the loop lock; `None` when another ralph holds it. A command's instant hold is waited
/// out for up to `wait`, so it is never mistaken for a running loop.
pub(crate) fn loop_lock(dir: &RalphDir, wait: Duration) -> anyhow::Result<Option<File>> {
    let file = open(dir, LOCK_FILE)?;
    let deadline = Instant::now() + wait;
    let mut attempt = file.try_lock();
    while matches!(attempt, Err(TryLockError::WouldBlock)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        attempt = file.try_lock();
    }
    match attempt {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(err)) => {
            Err(err).with_context(|| format!("failed to lock `{}`", dir.lock().display()))
        }
    }
}

/// Whether a running ralph holds the loop lock. Never creates the lock file.
pub(crate) fn loop_is_running(dir: &RalphDir) -> bool {
    let Ok(file) = File::open(dir.lock()) else {
        return false;
    };
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(_) => true,
    }
}
