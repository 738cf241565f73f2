//! Reading a file (config, certificate, checkpoint, state) without trusting what kind of file
//! it is.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Largest config, certificate, key or CA file read (they are a few KiB).
pub const MAX_CONFIG_FILE_BYTES: u64 = 1 << 20;

/// Reads a regular file of at most `max` bytes.
///
/// Opened non-blocking, so a FIFO (or a device whose open waits) put where a config file was
/// expected makes this return an error at once instead of hanging the reload (and with it the
/// shutdown that waits for the reload) or a poll. Anything but a regular file is refused, and a file over
/// `max` bytes is refused without being read whole.
pub fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let mut file = fs::OpenOptions::new()
        .read(true)
        // Open never waits (FIFOs), and a terminal never becomes ours.
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if meta.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} bytes is over the {max} byte limit", meta.len()),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&mut file).take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("grew over the {max} byte limit while being read"),
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn fifos_directories_and_big_files_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("web.yml");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        // A blocking open would wait here for a writer forever.
        let e = read_regular(&fifo, 1024).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
        assert!(read_regular(dir.path(), 1024).is_err());
        let big = dir.path().join("big.yml");
        std::fs::write(&big, vec![b'#'; 2048]).unwrap();
        assert!(read_regular(&big, 1024)
            .unwrap_err()
            .to_string()
            .contains("over the 1024 byte limit"));
        std::fs::write(&big, b"a: 1\n").unwrap();
        assert_eq!(read_regular(&big, 1024).unwrap(), b"a: 1\n");
    }
}
