//! The daemon side of the probe worker: a [`Backend`] that runs every discovery and probe in a
//! short-lived worker process (the exporter's hidden `probe-worker` subcommand, which serves
//! [`dgx_pixels_probes::worker`]'s protocol), so the daemon never creates a CUDA context.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use dgx_pixels_probes::nccl::AllReduce;
use dgx_pixels_probes::storage::StorageRead;
use dgx_pixels_probes::worker::{
    NcclRequest, Peer, RunRequest, StorageRequest, WorkerReply, WorkerRequest, MAX_REPLY_BYTES,
};
use dgx_pixels_probes::{ProbeError, ProbeKind, ProbeSizes, WorkerFailure};
use dgx_pixels_worker::WorkerError;

use crate::{Backend, GpuId};

/// The daemon side: a [`Backend`] that runs every discovery and probe in a worker.
#[derive(Debug, Clone)]
pub struct WorkerBackend {
    /// The exporter binary.
    pub program: PathBuf,
    /// Arguments before the request (the hidden subcommand and its flags).
    pub args: Vec<OsString>,
    /// Workload sizes.
    pub sizes: ProbeSizes,
    /// Deadline of one worker, context creation and library loading included.
    pub timeout: Duration,
    /// Deadline of the `nccl_allreduce` worker (a context per GPU and NCCL's init).
    pub nccl_timeout: Duration,
    held: Option<Duration>,
    last: Option<WorkerCost>,
    /// Each configured storage path as it first resolved (see `read_storage`).
    resolved: std::collections::BTreeMap<PathBuf, PathBuf>,
}

/// What the last worker cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerCost {
    /// Wall time from spawn to exit.
    pub wall: Duration,
    /// Its peak resident set, bytes.
    pub peak_rss_bytes: u64,
}

impl WorkerBackend {
    /// Workers of `program args... ` with `sizes`, each killed after `timeout`.
    pub fn new(
        program: PathBuf,
        args: Vec<OsString>,
        sizes: ProbeSizes,
        timeout: Duration,
    ) -> WorkerBackend {
        WorkerBackend {
            program,
            args,
            sizes,
            timeout,
            nccl_timeout: timeout,
            held: None,
            last: None,
            resolved: std::collections::BTreeMap::new(),
        }
    }

    /// The same with `nccl_timeout` as the `nccl_allreduce` worker's deadline.
    pub fn with_nccl_timeout(mut self, nccl_timeout: Duration) -> WorkerBackend {
        self.nccl_timeout = nccl_timeout;
        self
    }

    /// What the last worker cost, if it exited on its own.
    pub fn last_cost(&self) -> Option<WorkerCost> {
        self.last
    }

    fn ask(&mut self, request: &WorkerRequest) -> Result<WorkerReply, ProbeError> {
        let input = serde_json::to_vec(request)
            .map_err(|e| ProbeError::Config(format!("probe worker request: {e}")))?;
        // NCCL's worker keeps off the network and away from the node's jobs.
        let env = match request {
            WorkerRequest::NcclAllReduce(_) => dgx_pixels_probes::nccl::WORKER_ENV
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect(),
            _ => Vec::new(),
        };
        let (timeout, max_cpu_seconds) = limits(request, self.timeout, self.nccl_timeout);
        let req = dgx_pixels_worker::Request {
            program: self.program.clone(),
            args: self.args.clone(),
            env,
            input,
            limits: dgx_pixels_worker::Limits {
                timeout,
                max_output_bytes: MAX_REPLY_BYTES,
                // No address-space limit: the CUDA driver reserves far more than it uses.
                max_address_space_bytes: None,
                max_cpu_seconds: Some(max_cpu_seconds),
                lowest_priority: false,
            },
        };
        self.last = None;
        let done = dgx_pixels_worker::run(&req).map_err(|e| ProbeError::Worker {
            kind: failure_of(&e),
            message: e.to_string(),
        })?;
        self.last = Some(WorkerCost {
            wall: done.wall,
            peak_rss_bytes: done.peak_rss_bytes,
        });
        serde_json::from_slice(&done.output).map_err(|e| ProbeError::Worker {
            kind: WorkerFailure::BadReply,
            message: format!(
                "the probe worker's reply is not understood: {e}; its {} bytes begin \"{}\"",
                done.output.len(),
                excerpt(&done.output)
            ),
        })
    }
}

/// What kind of failure a worker facility error is.
fn failure_of(e: &WorkerError) -> WorkerFailure {
    match e {
        WorkerError::Spawn { .. } => WorkerFailure::SpawnFailed,
        WorkerError::TimedOut(_) => WorkerFailure::Timeout,
        WorkerError::OutputTooLarge(_) => WorkerFailure::OutputTooLarge,
        WorkerError::Failed { .. } | WorkerError::Io(_) => WorkerFailure::Failed,
        WorkerError::Signalled { .. } => WorkerFailure::Crashed,
        WorkerError::Cancelled => WorkerFailure::Cancelled,
    }
}

/// Most bytes of a bad reply that its error message shows.
pub const REPLY_EXCERPT_BYTES: usize = 200;

/// The first [`REPLY_EXCERPT_BYTES`] of a reply for the log, printable ASCII kept and every
/// other byte escaped (`\n`, `\x1b`): what a worker printed can neither flood the log nor
/// forge a line of it.
fn excerpt(reply: &[u8]) -> String {
    let head = &reply[..reply.len().min(REPLY_EXCERPT_BYTES)];
    let mut text: String = head
        .iter()
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if reply.len() > head.len() {
        text.push_str("...");
    }
    text
}

/// The deadline and CPU-seconds cap of the worker for `request`. RLIMIT_CPU sums every thread
/// of the process: one GPU probe is one busy thread, but NCCL runs a proxy thread per GPU that
/// may spin beside the main thread for the whole run, so its cap scales with the GPU count.
fn limits(request: &WorkerRequest, timeout: Duration, nccl_timeout: Duration) -> (Duration, u64) {
    match request {
        WorkerRequest::NcclAllReduce(r) => {
            let threads = u64::try_from(r.gpus.len())
                .unwrap_or(u64::MAX)
                .saturating_add(1);
            let cpu = nccl_timeout.as_secs().saturating_mul(threads);
            (nccl_timeout, cpu.saturating_add(1))
        }
        _ => (timeout, timeout.as_secs().saturating_add(1)),
    }
}

/// The error a reply other than the expected ones stands for: the worker's CUDA failure, or a
/// reply that does not belong to the request.
fn unexpected(reply: WorkerReply, request: &str) -> ProbeError {
    match reply {
        WorkerReply::Failed {
            unavailable: true,
            message,
        } => ProbeError::Unavailable(message),
        WorkerReply::Failed { message, .. } => ProbeError::Cuda(message),
        other => ProbeError::Worker {
            kind: WorkerFailure::BadReply,
            message: format!("unexpected reply to {request}: {other:?}"),
        },
    }
}

impl Backend for WorkerBackend {
    fn discover(&mut self) -> Result<Vec<GpuId>, ProbeError> {
        match self.ask(&WorkerRequest::Discover)? {
            WorkerReply::Devices { gpus } => Ok(gpus
                .into_iter()
                .map(|(ordinal, uuid, model)| GpuId {
                    ordinal,
                    uuid,
                    model,
                })
                .collect()),
            other => Err(unexpected(other, "discovery")),
        }
    }

    fn run(&mut self, gpu: &GpuId, kind: ProbeKind) -> Result<Vec<f64>, ProbeError> {
        self.run_on(gpu, None, kind)
    }

    fn run_pair(
        &mut self,
        gpu: &GpuId,
        peer: &GpuId,
        kind: ProbeKind,
    ) -> Result<Vec<f64>, ProbeError> {
        self.run_on(gpu, Some(peer), kind)
    }

    fn read_storage(
        &mut self,
        path: &std::path::Path,
        allowed: &[std::path::PathBuf],
        bytes: u64,
    ) -> Result<StorageRead, ProbeError> {
        self.held = None;
        // The worker gets resolved paths only, pinned the first time each resolves: a link
        // swapped into a configured path later makes its runs fail instead of leading them
        // elsewhere (the worker refuses any link on the way).
        let mut pin = |p: &std::path::Path| -> Result<std::path::PathBuf, ProbeError> {
            if let Some(real) = self.resolved.get(p) {
                return Ok(real.clone());
            }
            let real = dgx_pixels_probes::storage::resolve(p)?;
            self.resolved.insert(p.to_path_buf(), real.clone());
            Ok(real)
        };
        let real = pin(path)?;
        let allowed: Vec<std::path::PathBuf> = allowed.iter().filter_map(|a| pin(a).ok()).collect();
        let request = WorkerRequest::StorageRead(StorageRequest {
            path: real,
            allowed,
            bytes,
        });
        match self.ask(&request)? {
            WorkerReply::Read {
                bytes,
                bytes_per_second,
                direct,
                held_ns,
            } => {
                self.held = Some(Duration::from_nanos(held_ns));
                Ok(StorageRead {
                    file: path.to_path_buf(),
                    bytes,
                    bytes_per_second,
                    direct,
                })
            }
            other => Err(unexpected(other, "a storage read")),
        }
    }

    fn run_nccl(&mut self, gpus: &[GpuId], max_bytes: u64) -> Result<AllReduce, ProbeError> {
        self.held = None;
        let request = WorkerRequest::NcclAllReduce(NcclRequest {
            gpus: gpus
                .iter()
                .map(|g| Peer {
                    ordinal: g.ordinal,
                    uuid: g.uuid.clone(),
                })
                .collect(),
            max_bytes,
            warmup: 1,
            iterations: 3,
            target_seconds: self.sizes.target_seconds,
        });
        match self.ask(&request)? {
            WorkerReply::AllReduce { result, held_ns } => {
                self.held = Some(Duration::from_nanos(held_ns));
                Ok(result)
            }
            WorkerReply::Contended { others, held_ns } => {
                self.held = Some(Duration::from_nanos(held_ns));
                Err(ProbeError::Contended(others))
            }
            WorkerReply::Skipped { skip, detail } => {
                self.held = Some(Duration::ZERO);
                Err(ProbeError::Skipped(skip, detail))
            }
            other => Err(unexpected(other, "an all-reduce")),
        }
    }

    fn held_for(&self) -> Option<Duration> {
        self.held
    }

    fn worker_peak_rss_bytes(&self) -> Option<u64> {
        self.last.map(|c| c.peak_rss_bytes)
    }
}

impl WorkerBackend {
    /// One worker run of `kind` on `gpu` (and `peer`, for a pair probe).
    fn run_on(
        &mut self,
        gpu: &GpuId,
        peer: Option<&GpuId>,
        kind: ProbeKind,
    ) -> Result<Vec<f64>, ProbeError> {
        self.held = None;
        let request = WorkerRequest::Run(RunRequest {
            ordinal: gpu.ordinal,
            uuid: gpu.uuid.clone(),
            probe: kind,
            sizes: self.sizes.clone(),
            warmup: 1,
            iterations: 3,
            seed: 42,
            peer: peer.map(|p| Peer {
                ordinal: p.ordinal,
                uuid: p.uuid.clone(),
            }),
        });
        match self.ask(&request)? {
            WorkerReply::Measured { values, held_ns } => {
                self.held = Some(Duration::from_nanos(held_ns));
                Ok(values)
            }
            WorkerReply::Contended { others, held_ns } => {
                self.held = Some(Duration::from_nanos(held_ns));
                Err(ProbeError::Contended(others))
            }
            WorkerReply::Skipped { skip, detail } => {
                self.held = Some(Duration::ZERO);
                Err(ProbeError::Skipped(skip, detail))
            }
            other => Err(unexpected(other, "a run")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgx_pixels_probes::worker::Skip;

    fn sh(script: &str, timeout: Duration) -> WorkerBackend {
        WorkerBackend::new(
            "/bin/sh".into(),
            vec!["-c".into(), script.into()],
            ProbeSizes::default(),
            timeout,
        )
    }

    fn gpu() -> GpuId {
        GpuId {
            ordinal: 0,
            uuid: "GPU-a".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
        }
    }

    #[test]
    fn a_worker_that_prints_garbage_hangs_or_crashes_is_an_error_of_its_kind() {
        let second = Duration::from_secs(5);
        for (script, kind) in [
            ("cat >/dev/null; echo 'not json'", "bad_reply"),
            (
                "cat >/dev/null; printf '{\"reply\":\"devices\"}'",
                "bad_reply",
            ),
            ("cat >/dev/null; kill -SEGV $$", "crashed"),
            ("cat >/dev/null; exit 3", "failed"),
            (
                "cat >/dev/null; head -c 200000 /dev/zero",
                "output_too_large",
            ),
        ] {
            let mut b = sh(script, second);
            match b.run(&gpu(), ProbeKind::GemmBf16) {
                Err(ProbeError::Worker { kind: k, message }) => {
                    assert_eq!(k.as_str(), kind, "{script}");
                    if script.contains("not json") {
                        // The log shows what was printed, escaped.
                        assert!(message.contains("begin \"not json\\n\""), "{message}");
                    }
                }
                other => panic!("{script}: {other:?}"),
            }
            assert!(b.held_for().is_none(), "{script}: no GPU time claimed");
        }
        let mut b = sh("sleep 30", Duration::from_millis(200));
        let t0 = std::time::Instant::now();
        match b.discover() {
            Err(ProbeError::Worker {
                kind: WorkerFailure::Timeout,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_bad_reply_is_logged_by_its_first_bytes_bounded_and_escaped() {
        // A forged log line and a terminal escape, then 10 kB (under the reply bound).
        let script = "cat >/dev/null; printf 'x\\n2024 ERROR forged\\033[2J'; head -c 10000 /dev/zero | tr '\\0' y";
        let mut b = sh(script, Duration::from_secs(5));
        let Err(ProbeError::Worker {
            kind: WorkerFailure::BadReply,
            message,
        }) = b.discover()
        else {
            panic!("not a bad reply")
        };
        assert!(
            message.contains("10023 bytes begin \"x\\n2024 ERROR forged\\x1b[2Jyyy"),
            "{message}"
        );
        assert!(!message.contains('\n') && !message.contains('\u{1b}'));
        assert!(message.ends_with("yyy...\""), "{message}");
        assert!(message.len() < 200 + 200, "{}", message.len());
    }

    #[test]
    fn the_nccl_worker_has_its_own_deadline_and_a_cpu_cap_per_gpu() {
        // A 1 s GPU-probe deadline would kill this worker; the NCCL deadline lets it answer.
        let script = "cat >/dev/null; sleep 1.5; echo 'not json'";
        let mut b = sh(script, Duration::from_secs(1)).with_nccl_timeout(Duration::from_secs(10));
        let gpus = [gpu(), gpu()];
        match b.run_nccl(&gpus, 1 << 20) {
            Err(ProbeError::Worker { kind, .. }) => assert_eq!(kind, WorkerFailure::BadReply),
            other => panic!("{other:?}"),
        }
        let nccl = WorkerRequest::NcclAllReduce(NcclRequest {
            gpus: (0..8)
                .map(|i| Peer {
                    ordinal: i,
                    uuid: format!("GPU-{i}"),
                })
                .collect(),
            max_bytes: 1 << 20,
            warmup: 1,
            iterations: 3,
            target_seconds: 0.02,
        });
        let (t, cpu) = limits(&nccl, Duration::from_secs(20), Duration::from_secs(25));
        assert_eq!((t, cpu), (Duration::from_secs(25), 25 * 9 + 1));
        let run = WorkerRequest::Discover;
        assert_eq!(
            limits(&run, Duration::from_secs(20), Duration::from_secs(25)),
            (Duration::from_secs(20), 21)
        );
    }

    #[test]
    fn replies_map_to_results_and_outcomes() {
        let reply = |r: &WorkerReply| {
            format!(
                "cat >/dev/null; printf '%s' '{}'",
                serde_json::to_string(r).unwrap()
            )
        };
        let second = Duration::from_secs(5);
        let mut b = sh(
            &reply(&WorkerReply::Measured {
                values: vec![1.0, 2.0],
                held_ns: 7_000,
            }),
            second,
        );
        assert_eq!(b.run(&gpu(), ProbeKind::CopyD2D).unwrap(), vec![1.0, 2.0]);
        assert_eq!(b.held_for(), Some(Duration::from_micros(7)));
        assert!(b.worker_peak_rss_bytes().is_some_and(|r| r > 0));
        let mut b = sh(
            &reply(&WorkerReply::Contended {
                others: 2,
                held_ns: 5,
            }),
            second,
        );
        assert_eq!(
            b.run(&gpu(), ProbeKind::CopyD2D),
            Err(ProbeError::Contended(2))
        );
        let mut b = sh(
            &reply(&WorkerReply::Failed {
                unavailable: true,
                message: "no libcuda".into(),
            }),
            second,
        );
        assert!(matches!(b.discover(), Err(ProbeError::Unavailable(m)) if m == "no libcuda"));
    }

    #[test]
    fn skip_outcomes_are_distinct_labels() {
        let all = [Skip::InUse, Skip::ComputeMode, Skip::Mig].map(Skip::outcome);
        for o in all {
            assert!(crate::OUTCOMES.iter().any(|x| x.as_str() == o), "{o}");
        }
        assert_eq!(
            all.iter().collect::<std::collections::BTreeSet<_>>().len(),
            3
        );
    }

    #[test]
    fn worker_failures_keep_the_facility_kind_names() {
        let errors = [
            WorkerError::Spawn {
                program: "x".into(),
                source: std::io::Error::other("no"),
            },
            WorkerError::TimedOut(Duration::from_secs(1)),
            WorkerError::OutputTooLarge(1),
            WorkerError::Failed {
                code: 3,
                stderr: String::new(),
            },
            WorkerError::Io(std::io::Error::other("no")),
            WorkerError::Signalled {
                signal: 11,
                stderr: String::new(),
            },
            WorkerError::Cancelled,
        ];
        for e in &errors {
            assert_eq!(failure_of(e).as_str(), e.kind(), "{e}");
        }
        let names: std::collections::BTreeSet<_> = WorkerFailure::ALL
            .iter()
            .map(WorkerFailure::as_str)
            .collect();
        assert_eq!(names.len(), WorkerFailure::ALL.len());
    }
}
