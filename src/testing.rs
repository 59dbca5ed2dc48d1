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

fn scratch() -> &'static Path {
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
