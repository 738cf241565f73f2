//! The probe worker (`probe-worker`, the child the probes collector spawns) through the real
//! binary against the fake libnvidia-ml: it refuses GPUs it must not touch before it creates a
//! CUDA context (exclusive or prohibited compute mode, MIG, another process), and its protocol
//! errors are clear. Runs that reach CUDA are tested against the fake CUDA driver in
//! probe_worker_cuda.rs.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::process::{Command, Output};

use common::{fake_nvml_library, BIN};
use dgx_pixels_probes::worker::{Peer, RunRequest, Skip, WorkerReply, WorkerRequest};
use dgx_pixels_probes::{ProbeKind, ProbeSizes};
use dgx_pixels_sim::{Node, Scenario};

const SCENARIO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/probe-node.toml");

fn uuid(scenario: &str, gpu: usize) -> String {
    Node::new(Scenario::load(scenario).unwrap())
        .gpu(gpu)
        .unwrap()
        .uuid
        .clone()
}

fn worker(input: &[u8], env: &[(&str, &str)]) -> Output {
    common::probe_worker(fake_nvml_library(), input, env)
}

fn run(scenario: &str, gpu: usize, env: &[(&str, &str)]) -> WorkerReply {
    let req = WorkerRequest::Run(RunRequest {
        ordinal: gpu,
        uuid: uuid(scenario, gpu),
        probe: ProbeKind::GemmBf16,
        sizes: ProbeSizes::default(),
        warmup: 1,
        iterations: 3,
        seed: 42,
        peer: None,
    });
    let mut all = vec![("FAKE_NVML_SCENARIO", scenario), ("FAKE_NVML_TIME", "30")];
    all.extend_from_slice(env);
    let out = worker(&serde_json::to_vec(&req).unwrap(), &all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn skip_of(reply: &WorkerReply) -> Option<Skip> {
    match reply {
        WorkerReply::Skipped { skip, .. } => Some(*skip),
        _ => None,
    }
}

#[test]
fn exclusive_and_prohibited_gpus_are_refused_before_cuda() {
    for mode in ["exclusive_process", "prohibited", "exclusive_thread"] {
        for gpu in [2usize, 3] {
            let spec = format!("{gpu}={mode}");
            let reply = run(SCENARIO, gpu, &[("FAKE_NVML_COMPUTE_MODE", &spec)]);
            assert_eq!(
                skip_of(&reply),
                Some(Skip::ComputeMode),
                "{mode}: {reply:?}"
            );
            let WorkerReply::Skipped { detail, .. } = reply else {
                unreachable!()
            };
            assert!(detail.contains(mode), "{detail}");
        }
    }
    // Another GPU's mode does not matter: GPU 3 gets as far as CUDA (absent here).
    let reply = run(
        SCENARIO,
        3,
        &[("FAKE_NVML_COMPUTE_MODE", "2=exclusive_process")],
    );
    assert!(
        matches!(
            reply,
            WorkerReply::Failed {
                unavailable: true,
                ..
            }
        ),
        "{reply:?}"
    );
}

#[test]
fn a_gpu_with_another_process_is_refused() {
    for gpu in [0usize, 1] {
        let reply = run(SCENARIO, gpu, &[]);
        assert_eq!(skip_of(&reply), Some(Skip::InUse), "{reply:?}");
    }
    // The built-in dgx-h100 at 60 s, in training (its first 35 s are between jobs).
    let reply = run("dgx-h100", 5, &[("FAKE_NVML_TIME", "60")]);
    assert_eq!(skip_of(&reply), Some(Skip::InUse), "{reply:?}");
}

#[test]
fn a_mig_gpu_is_refused() {
    let node = Node::new(Scenario::builtin("dgx-a100-mig").unwrap());
    let mig: Vec<usize> = (0..node.gpu_count())
        .filter(|i| node.gpu(*i).is_some_and(|g| g.mig.is_some()))
        .collect();
    assert!(!mig.is_empty());
    for gpu in mig {
        let reply = run("dgx-a100-mig", gpu, &[]);
        assert_eq!(skip_of(&reply), Some(Skip::Mig), "GPU {gpu}: {reply:?}");
    }
}

#[test]
fn an_idle_free_gpu_is_admitted_and_reaches_cuda() {
    for gpu in [2usize, 3] {
        let reply = run(SCENARIO, gpu, &[]);
        let WorkerReply::Failed {
            unavailable,
            message,
        } = reply
        else {
            panic!("{reply:?}")
        };
        assert!(unavailable && message.contains("libcuda"), "{message}");
    }
}

#[test]
fn a_pair_probe_whose_peer_is_busy_touches_neither_gpu() {
    // GPU 1 runs a job with a process of its own: as p2p_copy's peer it refuses the pair,
    // before a context on GPU 2 (no CUDA here: a context would fail as unavailable).
    let req = WorkerRequest::Run(RunRequest {
        ordinal: 2,
        uuid: uuid(SCENARIO, 2),
        probe: ProbeKind::P2pCopy,
        sizes: ProbeSizes::default(),
        warmup: 1,
        iterations: 3,
        seed: 42,
        peer: Some(Peer {
            ordinal: 1,
            uuid: uuid(SCENARIO, 1),
        }),
    });
    let out = worker(
        &serde_json::to_vec(&req).unwrap(),
        &[("FAKE_NVML_SCENARIO", SCENARIO), ("FAKE_NVML_TIME", "30")],
    );
    let reply: WorkerReply = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(skip_of(&reply), Some(Skip::InUse), "{reply:?}");
}

#[test]
fn an_unknown_gpu_is_not_touched() {
    let req = WorkerRequest::Run(RunRequest {
        ordinal: 0,
        uuid: "GPU-00000000-0000-0000-0000-000000000000".into(),
        probe: ProbeKind::GemmBf16,
        sizes: ProbeSizes::default(),
        warmup: 1,
        iterations: 3,
        seed: 42,
        peer: None,
    });
    let out = worker(
        &serde_json::to_vec(&req).unwrap(),
        &[("FAKE_NVML_SCENARIO", SCENARIO)],
    );
    let reply: WorkerReply = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(skip_of(&reply), Some(Skip::InUse), "{reply:?}");
}

#[test]
fn without_nvml_the_worker_refuses_to_run() {
    let req = WorkerRequest::Run(RunRequest {
        ordinal: 0,
        uuid: uuid(SCENARIO, 2),
        probe: ProbeKind::GemmBf16,
        sizes: ProbeSizes::default(),
        warmup: 1,
        iterations: 3,
        seed: 42,
        peer: None,
    });
    let out = common::probe_worker(
        "/nonexistent/libnvidia-ml.so.1",
        &serde_json::to_vec(&req).unwrap(),
        &[],
    );
    let reply: WorkerReply = serde_json::from_slice(&out.stdout).unwrap();
    match reply {
        WorkerReply::Failed {
            unavailable: false,
            message,
        } => assert!(
            message.contains("cannot check the GPU's other users"),
            "{message}"
        ),
        r => panic!("{r:?}"),
    }
}

#[test]
fn bad_requests_exit_2_with_a_message() {
    for input in [
        &b""[..],
        b"{",
        b"{\"op\":\"format_disk\"}",
        &[b'x'; 70_000][..],
    ] {
        let out = worker(input, &[]);
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("probe-worker: bad request"), "{err}");
    }
}

#[test]
fn the_worker_is_not_in_the_help() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(!help.contains("probe-worker"), "{help}");
}
