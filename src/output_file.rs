//! Files kascade writes for its user (OTLP/JSON, change logs, reports,
//! plots): owner-only (0600), as the spool is, since they can hold what
//! audit events carry.

use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

const OWNER_ONLY: u32 = 0o600;

/// Creates (truncates) `path`, readable and writable by its owner only. A
/// regular file that existed keeps its mode through `open`: it is narrowed
/// too. Anything else (`/dev/stdout`, a pipe) is written as it is.
pub(crate) fn create(path: &Path) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(OWNER_ONLY)
        .open(path)?;
    if file.metadata()?.is_file() {
        file.set_permissions(Permissions::from_mode(OWNER_ONLY))?;
    }
    Ok(file)
}

/// Writes `contents` to `path` as [`create`] makes it.
pub(crate) fn write(path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    create(path)?.write_all(contents.as_ref())
}

/// Narrows a regular file another library wrote to owner-only.
pub(crate) fn restrict(path: &Path) -> std::io::Result<()> {
    if std::fs::metadata(path)?.is_file() {
        std::fs::set_permissions(path, Permissions::from_mode(OWNER_ONLY))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn new_and_existing_files_are_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("new.jsonl");
        write(&new, "x").unwrap();
        assert_eq!(mode(&new), 0o600);
        let old = dir.path().join("old.jsonl");
        std::fs::write(&old, "before").unwrap();
        std::fs::set_permissions(&old, Permissions::from_mode(0o644)).unwrap();
        write(&old, "after").unwrap();
        assert_eq!(mode(&old), 0o600);
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "after");
        let plot = dir.path().join("plot.png");
        std::fs::write(&plot, "png").unwrap();
        restrict(&plot).unwrap();
        assert_eq!(mode(&plot), 0o600);
    }
}
