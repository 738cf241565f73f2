//! The exporter's integration tests, one test binary (one link, one process) over the real
//! daemon binary, the fake libraries and the simulator: each file is the module of one subject,
//! run as `cargo test -p dgx-pixels-exporter --test exporter MODULE::` (e.g. `pinned::`).

mod common;

mod allocated_idle;
mod attribution;
mod daemon;
mod dcgm_base_units;
mod dcgm_fake;
mod docs_claims;
mod facts;
mod faults;
mod hardening;
mod health;
mod kmsg;
mod lean_profile;
mod lean_rules;
mod npd_check;
mod nvml_dcgm;
mod nvml_fake;
mod nvml_gpm;
mod nvml_gpm_mig;
mod own_process;
mod pinned;
mod pod_labels;
mod power;
mod probe_worker;
mod probe_worker_cuda;
mod probe_worker_nccl;
mod probe_worker_p2p;
mod probe_worker_storage;
mod probes;
mod process_activity;
mod readme_tour;
mod reload;
mod series_budget;
mod simulated;
mod simulated_traces;
mod status_page;
mod trace_cli;
mod trace_real_fsdp2;
mod trace_source;
mod trace_worker;
mod xid_policy;
