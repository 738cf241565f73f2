//! Opening a file found by a listing: between the listing and the open, whoever writes to the
//! directory may put a FIFO there (an open would block the analysis thread for ever), a
//! symlink to `/dev/zero` or to a file the daemon may read but the writer may not. So a listed
//! file is opened with `O_NOFOLLOW | O_NONBLOCK` (no link followed, no wait on a FIFO), and the
//! open descriptor is checked to be a regular file with the device and inode the listing saw.

use std::fs::{File, Metadata, OpenOptions};
use std::path::Path;

use crate::TraceError;

/// Which file a listing saw: (device, inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileKey {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

impl FileKey {
    /// The key of `meta` (0, 0 where the platform has none).
    pub fn of(meta: &Metadata) -> FileKey {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            FileKey {
                dev: meta.dev(),
                ino: meta.ino(),
            }
        }
        #[cfg(not(unix))]
        {
            let _ = meta;
            FileKey { dev: 0, ino: 0 }
        }
    }
}

/// Opens `path` for reading. With `listed` (the daemon), a symlink is not followed, a FIFO
/// does not block, and the file must be the regular file listed ([`TraceError::Replaced`]
/// otherwise); without (the command line), the path is opened as given.
pub fn open_input(path: &Path, listed: Option<FileKey>) -> Result<File, TraceError> {
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let Some(listed) = listed else {
        return File::open(path).map_err(io);
    };
    let mut o = OpenOptions::new();
    o.read(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
    }
    let replaced = |message: String| TraceError::Replaced {
        path: path.to_path_buf(),
        message,
    };
    let file = match o.open(path) {
        Ok(f) => f,
        // O_NOFOLLOW on a symlink.
        #[cfg(target_os = "linux")]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(replaced("a symlink".into()))
        }
        Err(e) => return Err(io(e)),
    };
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(replaced(format!(
            "not a regular file ({:?})",
            meta.file_type()
        )));
    }
    if FileKey::of(&meta) != listed {
        return Err(replaced("another file (device and inode changed)".into()));
    }
    Ok(file)
}
