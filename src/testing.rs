//! Helpers for the unit tests.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A temporary directory for a test, on a memory file system when there is one with room
/// (`/dev/shm`): the tests make and delete thousands of small files (git repositories), which
/// cost far more on a disk file system. `RALPH_TEST_TMPDIR` chooses another place.
pub(crate) fn tempdir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("ralph-unit")
        .tempdir_in(scratch())
}

/// Where the tests' temporary directories go: `RALPH_TEST_TMPDIR` if set, else `/dev/shm` when
/// it is a writable memory file system with room to spare, else the system's temporary directory.
/// Every test creates and deletes thousands of small files (git objects, atomic writes); on a
/// disk file system the kernel's bookkeeping for them costs more than the tests themselves.
/// The integration tests use it too.
pub(crate) fn scratch() -> &'static Path {
    static SCRATCH: OnceLock<PathBuf> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        if let Some(dir) = std::env::var_os("RALPH_TEST_TMPDIR") {
            return PathBuf::from(dir);
        }
        let shm = Path::new("/dev/shm");
        let roomy = nix::sys::statvfs::statvfs(shm)
            .is_ok_and(|fs| fs.blocks_available().saturating_mul(fs.fragment_size()) >= 2 << 30);
        if roomy && tempfile::tempdir_in(shm).is_ok() {
            shm.to_owned()
        } else {
            std::env::temp_dir()
        }
    })
}

/// `git ARGS` in `dir` with no user or system configuration and a fixed identity: whether it
/// succeeded.
pub(crate) fn git(dir: &Path, args: &[&str]) -> bool {
    std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .is_ok_and(|output| output.status.success())
}
