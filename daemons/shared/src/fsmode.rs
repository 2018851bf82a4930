//! Private folders (0700) and files (0600): every daemon's data is readable
//! by its own user only, whatever the umask says. A folder that holds a
//! daemon's files but may be passed through by another user (chatd's data
//! folder, on the way to `homes/` for hostexecd's `run_as` user) keeps the
//! search bits an administrator gave it: see [`private_dir_passable`].

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Creates `dir` and its missing parents with mode 0700, and tightens an
/// existing `dir` to 0700.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Like [`private_dir`], but an existing `dir` keeps the search (x) bits an
/// administrator gave group or others: chatd's data folder is passed
/// through by hostexecd's `run_as` user to reach `homes/` (0711). Read and
/// write bits for others are always taken away. Every opening of a file in
/// a folder of its own (the SQLite files, the keys) goes through this, so
/// no start takes such an `o+x` away again.
pub fn private_dir_passable(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mode = fs::metadata(dir)?.permissions().mode() & 0o777;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700 | (mode & 0o011)))
}

/// Writes `contents` to a new file at `path` with mode 0600 (never wider,
/// even for a moment), replacing nothing: an existing file is an error.
pub fn write_private_new(path: &Path, contents: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

/// Sets an existing file to mode 0600.
pub fn private_file(path: &Path) -> io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
}

/// The permission bits of `path` (for checks and tests).
pub fn mode_of(path: &Path) -> io::Result<u32> {
    Ok(fs::metadata(path)?.permissions().mode() & 0o777)
}

#[cfg(test)]
mod passable_tests {
    use super::*;

    #[test]
    fn a_passable_folder_keeps_only_its_search_bits() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("chat");
        private_dir_passable(&data).unwrap();
        assert_eq!(mode_of(&data).unwrap(), 0o700);
        fs::set_permissions(&data, fs::Permissions::from_mode(0o777)).unwrap();
        private_dir_passable(&data).unwrap();
        assert_eq!(mode_of(&data).unwrap(), 0o711);
        fs::set_permissions(&data, fs::Permissions::from_mode(0o751)).unwrap();
        private_dir_passable(&data).unwrap();
        assert_eq!(mode_of(&data).unwrap(), 0o711);
    }
}
