//! The per-process fake library: configuration, the simulated node, connections with their
//! groups, field groups and watches, the scenario clock, and the guard every export runs under.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use dgx_pixels_sim::{GpuState, Node, Scenario};
use fake_support::CallStats;

use crate::abi::Return as dcgmReturn_t;
use crate::config::{Config, FromVars};

/// Return codes the fake answers, as [`crate::abi`] states them.
pub use crate::abi::code;

static LIBRARY: Mutex<Option<Library>> = Mutex::new(None);
/// DCGM calls served and the CPU time of the calling threads inside them, since load or the
/// last reset.
pub static CALLS: CallStats = CallStats::new();

/// Runs an export's body: counted, timed, and no panic crosses the C boundary (a panic
/// answers `DCGM_ST_GENERIC_ERROR`).
pub fn guard(body: impl FnOnce() -> Result<(), dcgmReturn_t>) -> dcgmReturn_t {
    CALLS.count();
    CALLS.guard(code::OK, code::GENERIC_ERROR, body)
}

/// Defines an exported DCGM function whose body returns `Result<(), dcgmReturn_t>`.
macro_rules! dcgm_fn {
    ($(#[$meta:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        ///
        /// # Safety
        ///
        /// Pointer arguments must be null or valid for the reads and writes DCGM documents.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::abi::Return {
            $crate::state::guard(move || -> Result<(), $crate::abi::Return> { $body })
        }
    };
}
pub(crate) use dcgm_fn;

/// One connection: the embedded host engine or a remote one.
#[derive(Debug, Default)]
pub struct Connection {
    /// Connected with `dcgmConnect_v2` (subject to injected connection loss).
    pub remote: bool,
    /// The host engine went away under this connection: it stays invalid.
    pub broken: bool,
    /// Entity groups: id to GPU ids.
    pub groups: HashMap<usize, Vec<u32>>,
    /// Field groups: id to field ids.
    pub field_groups: HashMap<usize, Vec<u16>>,
    /// Watched (GPU, field) pairs with their update interval in microseconds and when the
    /// watch was set.
    pub watches: HashMap<(u32, u16), (i64, std::time::SystemTime)>,
}

/// The loaded library.
pub struct Library {
    /// Settings read at the first `dcgmInit`.
    pub config: Config,
    /// The simulated node, read at the scenario time.
    pub node: Node,
    /// When `dcgmInit` loaded it.
    pub loaded_at: Instant,
    /// Open connections by handle.
    pub connections: HashMap<usize, Connection>,
    /// Next handle or group id.
    pub next_id: usize,
}

impl Library {
    fn load(config: Config) -> Result<Library, String> {
        let scenario = Scenario::load(&config.scenario).map_err(|e| e.to_string())?;
        let node = Node::new(scenario);
        Ok(Library {
            config,
            node,
            loaded_at: Instant::now(),
            connections: HashMap::new(),
            next_id: 1,
        })
    }

    /// Scenario time now.
    pub fn now(&self) -> Duration {
        self.config
            .frozen
            .unwrap_or_else(|| self.config.start + self.loaded_at.elapsed())
    }

    /// Whether the remote host engine is gone right now (injected loss window).
    pub fn host_engine_gone(&self) -> bool {
        let since = self.loaded_at.elapsed();
        self.config
            .connection_loss
            .is_some_and(|(from, to)| since >= from && since < to)
    }

    /// A fresh id for a handle or group.
    pub fn id(&mut self) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The connection behind `handle`, checked: a remote one during a loss is broken for good.
    pub fn connection(&mut self, handle: usize) -> Result<&mut Connection, dcgmReturn_t> {
        let gone = self.host_engine_gone();
        let c = self
            .connections
            .get_mut(&handle)
            .ok_or(code::CONNECTION_NOT_VALID)?;
        if c.remote && gone {
            c.broken = true;
        }
        if c.broken {
            return Err(code::CONNECTION_NOT_VALID);
        }
        Ok(c)
    }

    /// GPU `index`'s state now.
    pub fn gpu_state(&mut self, index: usize) -> Option<GpuState> {
        let t = self.now();
        self.node.reading(index, t)
    }
}

/// The library lock (a panic under it never makes later calls fail).
pub fn lock() -> MutexGuard<'static, Option<Library>> {
    LIBRARY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `dcgmInit`: loads the library from the environment once per process.
pub fn init() -> Result<(), dcgmReturn_t> {
    let mut guard = lock();
    if guard.is_none() {
        let loaded = Config::from_env()
            .map_err(|e| e.to_string())
            .and_then(Library::load)
            .map_err(|e| {
                eprintln!("fake-dcgm: {e}");
                code::GENERIC_ERROR
            })?;
        *guard = Some(loaded);
    }
    Ok(())
}

/// `dcgmShutdown`: forgets everything.
pub fn shutdown() {
    *lock() = None;
}

/// Runs `f` on the initialised library.
pub fn with<R>(f: impl FnOnce(&mut Library) -> Result<R, dcgmReturn_t>) -> Result<R, dcgmReturn_t> {
    let mut guard = lock();
    let lib = guard.as_mut().ok_or(code::UNINITIALIZED)?;
    f(lib)
}

/// Fields of `fields` the `watches` of a connection cover for `gpu`.
pub fn watched(c: &Connection, gpu: u32, field: u16) -> bool {
    c.watches.contains_key(&(gpu, field))
}

/// The distinct profiling fields among `fields`.
pub fn profiling_fields(fields: &[u16]) -> HashSet<u16> {
    fields
        .iter()
        .copied()
        .filter(|f| crate::fields::is_profiling(*f))
        .collect()
}
