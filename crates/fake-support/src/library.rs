//! Building, finding and installing the fake libraries for tests. `cargo test` builds no
//! member's `cdylib`, so the first test of a process that needs a fake builds all four with one
//! `cargo build` (later processes find them fresh: a no-op build), in the running test's profile.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// One of the fake driver libraries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fake {
    /// `libnvidia-ml` (crates/fake-nvml).
    Nvml,
    /// `libdcgm` (crates/fake-dcgm).
    Dcgm,
    /// `libcuda` and `libcublas` (crates/fake-cuda).
    Cuda,
    /// `libnccl` (crates/fake-nccl).
    Nccl,
}

impl Fake {
    /// Every fake, in the order they are built.
    pub const ALL: [Fake; 4] = [Fake::Nvml, Fake::Dcgm, Fake::Cuda, Fake::Nccl];

    /// Its cargo package.
    pub fn package(self) -> &'static str {
        match self {
            Fake::Nvml => "fake-nvml",
            Fake::Dcgm => "fake-dcgm",
            Fake::Cuda => "fake-cuda",
            Fake::Nccl => "fake-nccl",
        }
    }

    /// The file cargo builds: `libfake_nvml.so` and so on.
    pub fn file_name(self) -> &'static str {
        match self {
            Fake::Nvml => "libfake_nvml.so",
            Fake::Dcgm => "libfake_dcgm.so",
            Fake::Cuda => "libfake_cuda.so",
            Fake::Nccl => "libfake_nccl.so",
        }
    }

    /// Where cargo puts it for the running test's profile (`target/debug/libfake_nvml.so` for a
    /// debug test), whether it exists or not.
    pub fn path(self) -> io::Result<PathBuf> {
        Ok(profile_dir()?.join(self.file_name()))
    }

    /// Builds every fake once per process ([`build_all`]) and returns this one's [`Fake::path`].
    pub fn build(self) -> io::Result<PathBuf> {
        build_all()?;
        self.path()
    }
}

/// `<target>/<profile>` of the running test or binary: the directory holding it, or its parent
/// for a test binary in `<target>/<profile>/deps` (or an example).
pub fn profile_dir() -> io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| io::Error::other("the executable has no directory"))?;
    Ok(match dir.file_name() {
        Some(n) if n == "deps" || n == "examples" => dir.parent().unwrap_or(dir).to_path_buf(),
        _ => dir.to_path_buf(),
    })
}

/// Builds the four fakes with one `cargo build` (in release for a release test), once per
/// process, with the `cargo` that runs the tests (`$CARGO`); fails with cargo's status, or when
/// a library is not where [`Fake::path`] says (a `--target-dir` flag: use `CARGO_TARGET_DIR`).
pub fn build_all() -> io::Result<()> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "--quiet"]);
            for fake in Fake::ALL {
                cmd.args(["-p", fake.package()]);
            }
            let dir = profile_dir().map_err(|e| e.to_string())?;
            if dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let status = cmd.status().map_err(|e| format!("cargo: {e}"))?;
            if !status.success() {
                return Err(format!(
                    "cargo build of the fake libraries failed: {status}"
                ));
            }
            for fake in Fake::ALL {
                let path = dir.join(fake.file_name());
                if !path.exists() {
                    return Err(format!(
                        "{} missing after the build (a --target-dir flag? use CARGO_TARGET_DIR)",
                        path.display()
                    ));
                }
            }
            Ok(())
        })
        .clone()
        .map_err(io::Error::other)
}

/// Creates in `dir` a symlink to `so` for each of `names` (the names the real library is opened
/// by), replacing links of those names; put `dir` in `LD_LIBRARY_PATH` of the process that
/// should load the fake.
pub fn install(dir: &Path, so: &Path, names: &[&str]) -> io::Result<()> {
    let so = std::fs::canonicalize(so)?;
    std::fs::create_dir_all(dir)?;
    for name in names {
        let link = dir.join(name);
        match std::fs::remove_file(&link) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::os::unix::fs::symlink(&so, &link)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fake_is_built_where_path_says() {
        for fake in Fake::ALL {
            let path = fake.build().unwrap();
            assert!(path.is_file(), "{}", path.display());
            assert_eq!(path.file_name().unwrap(), fake.file_name());
            assert_eq!(path.parent().unwrap(), profile_dir().unwrap());
        }
    }

    #[test]
    fn install_links_every_name_and_replaces_old_links() {
        let dir = std::env::temp_dir().join(format!("fake-support-{}", std::process::id()));
        let a = dir.join("a.so");
        let b = dir.join("b.so");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&a, "a").unwrap();
        std::fs::write(&b, "b").unwrap();
        let links = dir.join("links");
        install(&links, &a, &["x.so.1", "y.so.2"]).unwrap();
        install(&links, &b, &["x.so.1", "y.so.2"]).unwrap();
        for name in ["x.so.1", "y.so.2"] {
            assert_eq!(std::fs::read_to_string(links.join(name)).unwrap(), "b");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
