//! The rules: each one a row (condition, verdict, action, how it clears, source), used by the
//! tracker and rendered into `docs/health.md`, so the documentation is the code's own table.

use dgx_pixels_xid::Action;

/// A GPU's health verdict. Ordered by severity; [`Verdict::Unknown`] is not a severity but the
/// absence of a verdict (the GPU cannot be read), and is never reported as healthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// No rule holds.
    Healthy,
    /// A rule holds whose action can wait for a convenient moment (an application to restart,
    /// a transient slowdown, a degraded link).
    Degraded,
    /// A rule holds that makes the GPU unfit for work until its action is taken.
    Unhealthy,
    /// The GPU's readings are missing (its source is down or does not report it).
    Unknown,
}

impl Verdict {
    /// Every verdict, in the order of the `state` series.
    pub const ALL: [Verdict; 4] = [
        Verdict::Healthy,
        Verdict::Degraded,
        Verdict::Unhealthy,
        Verdict::Unknown,
    ];

    /// The `state` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Healthy => "healthy",
            Verdict::Degraded => "degraded",
            Verdict::Unhealthy => "unhealthy",
            Verdict::Unknown => "unknown",
        }
    }
}

/// How a rule's condition stops counting against the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Clears {
    /// As soon as the reading no longer shows it (a level, such as a link that is down).
    WhenReadingClears,
    /// After the quiet period (`[health] clear_after`) without the condition recurring: a
    /// transient event, such as a thermal slowdown or an application fault.
    AfterQuietPeriod,
    /// When the GPU is seen reset: it answers again after the driver said it fell off the
    /// bus, or its counters since the last reset (volatile ECC, energy) started over. A missed
    /// poll (`gpu_up` 1, 0, 1 without either) is not a reset. A reboot restarts the exporter,
    /// which forgets everything.
    OnReset,
}

impl Clears {
    fn describe(self) -> &'static str {
        match self {
            Clears::WhenReadingClears => "when the reading no longer shows it",
            Clears::AfterQuietPeriod => "after `[health] clear_after` (default 5 min) without recurring",
            Clears::OnReset => "when the GPU is seen reset: it answers again after the driver said it fell off the bus (XID 79, or the kernel log's message), or its volatile ECC or energy counters start over; a GPU that only missed a poll was not reset",
        }
    }
}

/// What a rule concludes: fixed, or by the XID catalog's action for the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// This verdict and action.
    Fixed(Verdict, Action),
    /// Per XID code: the catalog's immediate action, see [`xid_outcome`].
    XidCatalog,
    /// The driver's own recovery action, see [`driver_outcome`].
    DriverAction,
}

/// One rule of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The `reason` label value (for the XID rule a prefix: `xid_<code>`).
    pub reason: &'static str,
    /// The condition, in words.
    pub condition: &'static str,
    /// Verdict and action while it holds.
    pub outcome: Outcome,
    /// How it clears (for the XID rule: by action, see [`xid_outcome`]).
    pub clears: Clears,
    /// The series it reads.
    pub source: &'static str,
}

/// The reason of an XID code that is not in the catalog: one value, so codes the driver invents
/// cannot grow the label's cardinality.
pub const XID_UNCATALOGUED: &str = "xid_uncatalogued";
/// The reason when no rule holds but nothing observes the GPU's XIDs: the XID rules cannot
/// be judged, so the verdict is unknown rather than healthy.
pub const XID_UNOBSERVED: &str = "xid_unobserved";
/// The reason when the GPU cannot be read.
pub const NO_READINGS: &str = "no_readings";
/// The reason when no rule holds.
pub const NONE: &str = "none";

/// Utilization above which a PCIe link below its maximum generation counts as trained down
/// (an idle link drops its generation to save power; that is not a fault).
pub const PCIE_BUSY_UTILIZATION: f64 = 0.1; // fact: health.pcie-busy-utilization

/// Every rule, in the order a tie between equally severe actions is broken.
pub const RULES: &[Rule] = &[
    Rule {
        reason: "gpu_lost",
        condition: "the GPU stopped answering (fell off the bus, XID 79, GPU_IS_LOST)",
        outcome: Outcome::Fixed(Verdict::Unhealthy, Action::Reboot),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_up` = 0",
    },
    Rule {
        reason: "row_remap_failure",
        condition: "a memory row remapping failed: no spare rows are left",
        outcome: Outcome::Fixed(Verdict::Unhealthy, Action::ContactSupport),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_remapped_rows_failure` = 1",
    },
    Rule {
        reason: "ecc_double_bit",
        condition: "uncorrectable (double-bit) ECC errors since the last reset",
        outcome: Outcome::Fixed(Verdict::Unhealthy, Action::ResetGpu),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_ecc_errors_total{error_type=\"uncorrected\",counter=\"volatile\"}` > 0 (a reset sets it back to 0)",
    },
    Rule {
        reason: "xid_<code>",
        condition: "an XID whose catalog action is not `none` occurred",
        outcome: Outcome::XidCatalog,
        clears: Clears::OnReset,
        source: "`dgx_pixels_gpu_xid_errors_total` grew (NVML, the kernel log, the simulated node), joined to the XID catalog (docs/xid.md)",
    },
    Rule {
        reason: "driver_recovery_action",
        condition: "the driver says the GPU needs a reset, a reboot or a drain (NVML's GPU recovery action field, where the driver has it)",
        outcome: Outcome::DriverAction,
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_recovery_action_info{action!=\"none\"}`",
    },
    Rule {
        reason: "row_remap_pending",
        condition: "a memory row remapping waits for the next GPU reset",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::ResetGpu),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_remapped_rows_pending` = 1",
    },
    Rule {
        reason: "retired_pages_pending",
        condition: "memory pages wait to be retired at the next reset",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::ResetGpu),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_retired_pages_pending` = 1",
    },
    Rule {
        reason: "fabric_not_ready",
        condition: "the GPU's registration with its NVLink fabric (an NVL72 rack's NVLink domain) has not completed, or completed with an error: jobs spanning the domain cannot use the GPU",
        outcome: Outcome::Fixed(Verdict::Unhealthy, Action::DrainP2p),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_fabric_state_info{state!=\"completed\"}` or `{status!=\"success\"}`",
    },
    Rule {
        reason: "fabric_unhealthy",
        condition: "the NVLink fabric reports the GPU's route unhealthy, an access timeout being recovered, or a wrong configuration",
        outcome: Outcome::Fixed(Verdict::Unhealthy, Action::DrainP2p),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_fabric_health{flag=~\"route_unhealthy|access_timeout_recovery|incorrect_configuration\"}` = 1",
    },
    Rule {
        reason: "fabric_degraded_bandwidth",
        condition: "the NVLink fabric reports the GPU's bandwidth degraded (links or switch ports lost)",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::CheckHardware),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_fabric_health{flag=\"degraded_bandwidth\"}` = 1",
    },
    Rule {
        reason: "rail_port_down",
        condition: "a port of the GPU's rail NIC (the InfiniBand / RoCE NIC paired with it by PCIe topology, ties on a shared switch in address order, or pinned by `[nvml.rails]`: \"Rail NICs\" below) is down: multi-node jobs on the GPU stall",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::CheckHardware),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_rail_port_up` = 0",
    },
    Rule {
        reason: "rail_port_slow",
        condition: "node level, per GPU: a port of the GPU's rail NIC is up at a lower rate than the node's fastest rail port up (a node's rails are bought alike; sysfs gives the rate a port trained to, not the most it could): its multi-node jobs run at the slowest rail's pace. A node whose every rail trained low is not seen",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::CheckHardware),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_rail_port_rate_bytes_per_second` (with `dgx_pixels_gpu_rail_port_up` = 1) < the node's highest",
    },
    Rule {
        reason: "clique_split",
        condition: "node level, per GPU: the NVLink fabric puts the GPU in another NVLink domain (cluster and clique) than most of the node's GPUs (ties: the domain of the lowest GPU index); the node's GPUs cannot reach each other over NVLink, so jobs spanning them fail or fall back to the network. Degraded, not unhealthy: the GPU still works within its own domain",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::DrainP2p),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_gpu_fabric_info{cluster_uuid,clique_id}` differs from most of the node's GPUs'",
    },
    Rule {
        reason: "nvlink_down",
        condition: "an NVLink link of the GPU is down",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::DrainP2p),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_nvlink_links_up` < `dgx_pixels_nvlink_links` (`dgx_pixels_nvlink_link_down` names the link)",
    },
    Rule {
        reason: "gpu_count_below_expected",
        condition: "node level: fewer GPUs are visible than `[health] expected_gpus` (a GPU that fell off the bus before the exporter started, or that the driver no longer enumerates, has no verdict of its own); served as `dgx_pixels_node_health_action_info`, only where `expected_gpus` is set. `expected_gpus = \"discover\"` takes the GPUs visible at the first start and keeps them in `[health] state_directory` (file `expected-gpus`) for the next starts: more visible later raise it, fewer never lower it; delete the file to discover again, and a file the exporter cannot read makes the node verdict `unknown` (reason `expected_gpus_unknown`; logged) until it is fixed or deleted. If a reboot does not bring the GPU back, check the hardware",
        outcome: Outcome::Fixed(Verdict::Unhealthy, Action::Reboot),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_node_gpus_visible` < `dgx_pixels_node_gpus_expected`",
    },
    Rule {
        reason: "nccl_bus_bandwidth_low",
        condition: "node level: the `nccl_allreduce` probe's last bus bandwidth at its largest message size is under half the ring figure expected of the node's GPUs (docs/probes.md, \"Expected NCCL bus bandwidth\": a measured figure, H100 and H200 only; other parts have none and this rule does not hold for them): the fabric carries far less than it should (a degraded NVLink or NVSwitch); served as `dgx_pixels_node_health_action_info`, where the probe has measured. The node's P2P worst peers and NVLink series say which GPU",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::CheckHardware),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_probe_nccl_largest_bus_bandwidth_bytes_per_second` < 0.5 x `dgx_pixels_probe_nccl_expected_bus_bandwidth_bytes_per_second`",
    },
    Rule {
        reason: "nvlink_errors",
        condition: "NVLink recovery or data CRC errors grew (a link retrained or corrupted data); on Blackwell (NVLink 5) failed link recoveries or errors left after forward error correction",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::CheckHardware),
        clears: Clears::AfterQuietPeriod,
        source: "`dgx_pixels_nvlink_errors_total{error_type=~\"recovery|crc_data|recovery_failed|effective\"}` (all links) grew",
    },
    Rule {
        reason: "pcie_width_degraded",
        condition: "the PCIe link runs narrower than the GPU and slot support",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::CheckHardware),
        clears: Clears::WhenReadingClears,
        source: "`dgx_pixels_pcie_link_width` < `dgx_pixels_pcie_link_max_width`",
    },
    Rule {
        reason: "pcie_generation_degraded",
        condition: "the PCIe link runs below its maximum generation while the GPU is busy (utilization over 10%; idle links slow down to save power)",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::CheckHardware),
        clears: Clears::AfterQuietPeriod,
        source: "`dgx_pixels_pcie_link_generation` < `dgx_pixels_pcie_link_max_generation` with `dgx_pixels_gpu_utilization_ratio` > 0.1",
    },
    Rule {
        reason: "hw_slowdown",
        condition: "the hardware is holding clocks down (HW slowdown or power brake: power supply or board fault)",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::CheckHardware),
        clears: Clears::AfterQuietPeriod,
        source: "`dgx_pixels_gpu_throttle_reason{reason=~\"hw_slowdown|hw_power_brake_slowdown\"}` = 1",
    },
    Rule {
        reason: "thermal_slowdown",
        condition: "clocks are held down because the GPU is too hot (cooling)",
        outcome: Outcome::Fixed(Verdict::Degraded, Action::CheckHardware),
        clears: Clears::AfterQuietPeriod,
        source: "`dgx_pixels_gpu_throttle_reason{reason=~\"hw_thermal_slowdown|sw_thermal_slowdown\"}` = 1",
    },
];

/// The node-level verdict for `visible` GPUs when `expected` are configured: the expected and
/// visible counts and the verdict series (`state`, `action`, `reason`); nothing when no count
/// is configured.
pub fn node_samples(expected: Option<u32>, visible: usize) -> Vec<dgx_pixels_metrics::Sample> {
    use dgx_pixels_metrics::{Metric, Sample};
    let Some(expected) = expected else {
        return Vec::new();
    };
    const REASON: &str = "gpu_count_below_expected";
    let labels: [&str; 3] = match rule(REASON).map(|r| r.outcome) {
        Some(Outcome::Fixed(v, a)) if visible < expected as usize => {
            [v.as_str(), a.as_str(), REASON]
        }
        _ => [Verdict::Healthy.as_str(), Action::None.as_str(), NONE],
    };
    vec![
        Sample::new(
            Metric::NodeGpusExpected,
            [] as [&str; 0],
            f64::from(expected),
        ),
        Sample::new(Metric::NodeGpusVisible, [] as [&str; 0], visible as f64),
        Sample::new(Metric::NodeHealthAction, labels, 1.0),
    ]
}

/// The node verdict's reason when `expected_gpus = "discover"` is set but its state file cannot
/// be read: the count, and so the node's verdict, is unknown.
pub const EXPECTED_GPUS_UNKNOWN: &str = "expected_gpus_unknown";

/// Share of the expected NCCL bus bandwidth under which a node's fabric measures far below
/// expected (`nccl_bus_bandwidth_low`); the alert DgxPixelsNcclBusBandwidthLow warns at 0.8.
pub const FABRIC_FAR_BELOW_RATIO: f64 = 0.5; // fact: health.fabric-far-below

/// [`node_samples`] with the node's fabric measurement: `fabric_ratio` is the NCCL bus
/// bandwidth over its expected figure, where the probe has measured both. The verdict series is
/// served when either input is; the GPU count rule (unhealthy) settles a fabric that is also
/// low.
///
/// `count_unknown`: a count is configured (discovered) but cannot be established now (its state
/// file is unreadable): the node's verdict is `unknown`, never `healthy`, whatever the fabric.
pub fn node_samples_with_fabric(
    expected: Option<u32>,
    count_unknown: bool,
    visible: usize,
    fabric_ratio: Option<f64>,
) -> Vec<dgx_pixels_metrics::Sample> {
    use dgx_pixels_metrics::{Metric, Sample};
    if count_unknown {
        let labels = [
            Verdict::Unknown.as_str(),
            Action::Unknown.as_str(),
            EXPECTED_GPUS_UNKNOWN,
        ];
        return vec![
            Sample::new(Metric::NodeGpusVisible, [] as [&str; 0], visible as f64),
            Sample::new(Metric::NodeHealthAction, labels, 1.0),
        ];
    }
    let mut out = node_samples(expected, visible);
    let Some(ratio) = fabric_ratio.filter(|r| r.is_finite()) else {
        return out;
    };
    let count_holds = out
        .iter()
        .any(|s| s.metric == Metric::NodeHealthAction && s.label("reason") != Some(NONE));
    if count_holds {
        return out;
    }
    const REASON: &str = "nccl_bus_bandwidth_low";
    let labels: [&str; 3] = match rule(REASON).map(|r| r.outcome) {
        Some(Outcome::Fixed(v, a)) if ratio.is_finite() && ratio < FABRIC_FAR_BELOW_RATIO => {
            [v.as_str(), a.as_str(), REASON]
        }
        _ => [Verdict::Healthy.as_str(), Action::None.as_str(), NONE],
    };
    out.retain(|s| s.metric != Metric::NodeHealthAction);
    out.push(Sample::new(Metric::NodeHealthAction, labels, 1.0));
    out
}

/// The rule with `reason` (the XID rule under `xid_<code>`).
pub fn rule(reason: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.reason == reason)
}

/// Verdict and clearing of an XID by its catalog action: the actions that take the GPU out of
/// service (reset, reboot, drain, hardware, support) make it unhealthy until it is seen reset;
/// the others (restart the application, update software, evaluate, no action given) degrade it
/// until the quiet period passes without the code. `None` for an XID that needs no action.
pub fn xid_outcome(action: Action) -> Option<(Verdict, Clears)> {
    match action {
        Action::None => None,
        Action::ResetGpu
        | Action::Reboot
        | Action::RestartVm
        | Action::DrainP2p
        | Action::DrainAndReset
        | Action::CheckHardware
        | Action::ContactSupport => Some((Verdict::Unhealthy, Clears::OnReset)),
        Action::RestartApp | Action::UpdateSoftware | Action::Evaluate | Action::Unknown => {
            Some((Verdict::Degraded, Clears::AfterQuietPeriod))
        }
    }
}

/// Verdict and action of the driver's recovery action (the `action` label of
/// `dgx_pixels_gpu_recovery_action_info`): a drain of peer-to-peer traffic degrades the GPU, a
/// reset or reboot makes it unhealthy; `None` for "none" (or a value this build does not know).
pub fn driver_outcome(action: &str) -> Option<(Verdict, Action)> {
    match Action::from_str_opt(action)? {
        Action::None => None,
        Action::DrainP2p => Some((Verdict::Degraded, Action::DrainP2p)),
        a @ (Action::ResetGpu | Action::Reboot | Action::DrainAndReset) => {
            Some((Verdict::Unhealthy, a))
        }
        _ => None,
    }
}

/// How disruptive an action is, for choosing the one to report when several are pending: the
/// most disruptive also settles the others (a reboot resets the GPU; a reset restarts its
/// applications). Contacting support ranks highest: it is what remains after the rest failed.
pub fn action_rank(action: Action) -> u8 {
    match action {
        Action::None => 0,
        Action::Unknown => 1,
        Action::Evaluate => 2,
        Action::UpdateSoftware => 3,
        Action::RestartApp => 4,
        Action::CheckHardware => 5,
        Action::DrainP2p => 6,
        Action::ResetGpu => 7,
        Action::DrainAndReset => 8,
        Action::RestartVm => 9,
        Action::Reboot => 10,
        Action::ContactSupport => 11,
    }
}

/// The rules as the Markdown of `docs/health.md`.
pub fn markdown() -> String {
    let mut out = String::from(
        "# GPU health: verdicts and recommended actions\n\n\
         <!-- Generated from crates/health/src/rules.rs by \
         `cargo run -p dgx-pixels-exporter -- docs health > docs/health.md`; a test fails when \
         this file is out of date. -->\n\n\
         The `health` collector (on by default, also with `--simulate`) reads the series every \
         other source serves, applies the rules below to each GPU, and serves:\n\n\
         - `dgx_pixels_gpu_health_state{gpu,uuid,state}`: one series per state (`healthy`, \
         `degraded`, `unhealthy`, `unknown`), 1 for the current one. `unknown` means the GPU \
         cannot be read (its source is down, or no source serves `dgx_pixels_gpu_up` for it): \
         a verdict we cannot establish is never reported as healthy.\n\
         - `dgx_pixels_gpu_health_action_info{gpu,uuid,action,reason}` (value 1): the most \
         severe action pending and the rule behind it (`none`/`none` when healthy, \
         `unknown`/`no_readings` when unknown).\n\n\
         A verdict also says what it cannot see: where no origin observes a GPU's XIDs (NVML's \
         event set refused the GPU, `dgx_pixels_gpu_xid_observed` 0, and the kmsg collector is \
         off), the XID rules cannot hold, so a GPU no other rule finds at fault is `unknown` \
         with action `unknown` and reason `xid_unobserved`, never `healthy`.\n\n\
         When several rules hold, the state is the most severe verdict and the action the most \
         disruptive one, since it settles the others: contact_support > reboot > restart_vm > \
         drain_and_reset > reset_gpu > drain_p2p > check_hardware > restart_app > \
         update_software > evaluate > unknown > none. Ties go to the rule listed first.\n\n\
         The state lives in the exporter: a restart forgets conditions that clear on reset or \
         after a quiet period (a reboot clears them anyway; XID counters also start over); a \
         reload of the config (SIGHUP) keeps them.\n\n\
         ## Rules\n\n\
         | Reason | Condition | Verdict | Action | Clears | Reads |\n\
         |---|---|---|---|---|---|\n",
    );
    for r in RULES {
        let (verdict, action, clears) = match r.outcome {
            Outcome::Fixed(v, a) => (v.as_str(), a.as_str(), r.clears.describe()),
            Outcome::XidCatalog => (
                "by the catalog action: unhealthy for reset_gpu, reboot, restart_vm, drain_p2p, drain_and_reset, check_hardware, contact_support; degraded for restart_app, update_software, evaluate, unknown",
                "the catalog's immediate action for the code",
                "unhealthy ones when the GPU is seen reset (it answers again after the driver said it fell off the bus, XID 79 or the kernel log's message, or its volatile ECC or energy counters start over; a GPU that only missed a poll, `gpu_up` 1, 0, 1, was not reset); degraded ones after `[health] clear_after` without the code",
            ),
            Outcome::DriverAction => (
                "unhealthy for reset_gpu, reboot, drain_and_reset; degraded for drain_p2p",
                "the driver's",
                r.clears.describe(),
            ),
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            r.reason, r.condition, verdict, action, clears, r.source
        ));
    }
    out.push_str(&format!(
        "\nAn XID code the catalog lacks is reported as `{XID_UNCATALOGUED}` (verdict degraded, \
         action unknown), so unexpected codes cannot add label values. XIDs whose catalog \
         action is `none` (for example 63, a row remapping recorded) do not change the verdict; \
         their consequences have rules of their own (`row_remap_pending`).\n"
    ));
    out.push_str(
        "\n## XID policy\n\n\
         By default every XID code takes its catalog verdict on its first occurrence. \
         `[health.xid_policy]` changes that per code or code range, for the codes an operator \
         knows to be noise on their fleet or wants seen several times before acting on:\n\n\
         ```toml\n\
         [health.xid_policy]\n\
         \"13\" = \"ignore\"                              # never changes the verdict\n\
         \"31-32\" = { count = 3, window = \"10m\" }    # 3 occurrences within 10 min first\n\
         ```\n\n\
         - `\"ignore\"`: the code never changes the verdict. It is still counted and served \
         (`dgx_pixels_gpu_xid_errors_total`, `dgx_pixels_gpu_xid_info`), and the rules that \
         read other series still hold: ignoring XID 79 does not hide `gpu_lost`.\n\
         - `{ count = N, window = \"D\" }`: the catalog's verdict and action (reason \
         `xid_<code>`) apply once N occurrences of the entry's codes, together for a range, \
         fall within D on one GPU; from then on the condition clears on the catalog's terms \
         (above). A GPU seen reset starts its counts over. N is 1 to 1000, D 1 s to 30 days; \
         a storm of occurrences within one poll counts them all.\n\n\
         A code the XID catalog (docs/xid.md) lacks, a range running backwards, a code given \
         twice (a range overlapping another entry) or a treatment out of bounds is refused \
         with the file, the line and the key. The policy is reloadable (SIGHUP): the verdicts \
         and the counts towards a threshold live on across the reload (unlike a restart), a \
         code now ignored loses its condition at once, and a code newly under a threshold \
         keeps a condition already latched until it clears. The policy in force is served as \
         `dgx_pixels_exporter_xid_policy_info{codes,policy}` (one series per entry, none \
         without a policy) and shown on the status page.\n",
    );
    out.push_str(
        "\n## Rail NICs\n\n\
         Each GPU's rail NIC (`rail_port_down`, `rail_port_slow`) is read from sysfs \
         (`[nvml] sysfs`): the InfiniBand / RoCE NIC under `class/infiniband` whose PCI path \
         shares the longest prefix with the GPU's, past the PCI root (a NIC under another root \
         complex is no rail of the GPU). Where several NICs share that longest prefix (DGX A100: \
         two GPUs and two NICs behind one PCIe switch, `nvidia-smi topo -m` showing GPU0 and \
         GPU1 PXB to both mlx5_0 and mlx5_1), the GPUs under that switch that tie on the same \
         NICs are paired with them in order: the k-th GPU by PCI address with the k-th NIC by \
         PCI address (with m GPUs and n NICs, GPU k gets NIC k x n / m; NICs beyond the GPUs \
         belong to none). GPUs are told from other functions by their `class` (display or 3D \
         controller) and `vendor` (0x10de) files; where one of the switch's functions does not \
         answer, the tied GPUs get no rail series rather than maybe another GPU's NIC. One NIC \
         per GPU on its own switch (DGX H100) needs no tie. Where the PCIe topology \
         pairs nothing (GB200: the GPUs hang off Grace, the NICs off other root complexes) or \
         pairs wrongly, `[nvml.rails]` pins GPUs to NICs by name, which wins over the topology:\n\n\
         ```toml\n\
         [nvml.rails]\n\
         \"0000:07:00.0\" = \"mlx5_0\"   # the GPU's PCI address (NVML's 00000000:07:00.0 too)\n\
         \"0000:0f:00.0\" = \"mlx5_1\"\n\
         ```\n\n\
         At most 64 pins; an address that is not one, a GPU pinned twice or a NIC name that is \
         not one (1 to 64 letters, digits, `_`, `-`, `.`) is refused at start with the file and \
         the key. A pinned NIC that does not exist gives the GPU no rail series.\n",
    );
    out.push_str(
        "\n## Allocated but idle\n\n\
         With pod or job attribution on (`--collector.kubernetes`, `--hpc.job-mapping-dir`), \
         every GPU a pod or job holds gets two counters labelled with its holder (`namespace`, \
         `pod`, `container` or `hpc_job`, as the holder was when the time was counted; a GPU \
         shared by several holders gets none, `dgx_pixels_gpu_pod_info` names them):\n\n\
         - `dgx_pixels_gpu_allocated_idle_seconds_total`: time the GPU stayed under \
         `[health] idle_utilization` (default 0.05; and SM activity under it too where DCGM \
         profiling reads it) for longer than `[health] idle_after` (default 10 min). Once the \
         grace period is exceeded the whole idle stretch counts, so the counter is the real \
         idle time; a short pause between two steps never counts.\n\
         - `dgx_pixels_gpu_allocated_idle_energy_joules_total`: the energy the GPU drew during \
         that time.\n\n\
         Each holder's series starts from 0, so `increase()` sums the waste per pod or job. The \
         recording rules `pod:dgx_pixels_gpu_allocated_idle_hours:increase1h` and \
         `pod:dgx_pixels_gpu_allocated_idle_cost:increase1h` (with a `[cost]` table) turn them \
         into wasted GPU-hours and money per pod and job; the alert `DgxPixelsGpuAllocatedIdle` \
         names the pod or job that has held an idle GPU for 30 minutes.\n\n\
         On a simulated node the demo scenarios' training job is an HPC job (the scenario's \
         `hpc_job_id`, a new id each cycle) that holds every GPU from the job's start, as a Slurm \
         prolog's job files would say, and `idle_after` defaults to 10 s: the rank that joins \
         late (GPU 7 of `dgx-h100` idles from 30 to 50 s) shows as waste within the first \
         minute.\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_unique_and_label_safe() {
        let mut reasons: Vec<&str> = RULES.iter().map(|r| r.reason).collect();
        reasons.sort_unstable();
        reasons.dedup();
        assert_eq!(reasons.len(), RULES.len());
        for r in RULES {
            assert!(r
                .reason
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c == '<' || c == '>'));
        }
    }

    #[test]
    fn every_action_has_its_own_rank() {
        let mut ranks: Vec<u8> = Action::ALL.iter().map(|a| action_rank(*a)).collect();
        ranks.sort_unstable();
        ranks.dedup();
        assert_eq!(ranks.len(), Action::ALL.len());
        assert!(action_rank(Action::Reboot) > action_rank(Action::ResetGpu));
        assert!(action_rank(Action::ResetGpu) > action_rank(Action::RestartApp));
    }

    #[test]
    fn xid_actions_map_to_verdicts() {
        assert_eq!(xid_outcome(Action::None), None);
        assert_eq!(
            xid_outcome(Action::Reboot),
            Some((Verdict::Unhealthy, Clears::OnReset))
        );
        assert_eq!(
            xid_outcome(Action::RestartApp),
            Some((Verdict::Degraded, Clears::AfterQuietPeriod))
        );
        for a in Action::ALL {
            // Every action is decided: none is the only one without a verdict.
            assert_eq!(xid_outcome(a).is_none(), a == Action::None);
        }
    }

    #[test]
    fn fewer_gpus_than_expected_is_an_unhealthy_node() {
        use dgx_pixels_metrics::Metric;
        assert!(node_samples(None, 3).is_empty());
        let verdict = |expected, visible| {
            let out = node_samples(Some(expected), visible);
            let v = out
                .iter()
                .find(|s| s.metric == Metric::NodeHealthAction)
                .unwrap();
            assert_eq!(out.len(), 3);
            (
                v.label("state").unwrap().to_string(),
                v.label("action").unwrap().to_string(),
                v.label("reason").unwrap().to_string(),
            )
        };
        let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        assert_eq!(verdict(8, 8), s("healthy", "none", "none"));
        assert_eq!(verdict(8, 9), s("healthy", "none", "none"));
        assert_eq!(
            verdict(8, 7),
            s("unhealthy", "reboot", "gpu_count_below_expected")
        );
        assert_eq!(
            verdict(4, 0),
            s("unhealthy", "reboot", "gpu_count_below_expected")
        );
    }

    #[test]
    fn a_fabric_far_below_expected_is_a_degraded_node_unless_gpus_are_missing() {
        use dgx_pixels_metrics::Metric;
        let verdict = |expected: Option<u32>, visible, ratio| {
            let out = node_samples_with_fabric(expected, false, visible, ratio);
            let v: Vec<_> = out
                .iter()
                .filter(|s| s.metric == Metric::NodeHealthAction)
                .collect();
            assert!(v.len() <= 1, "{out:?}");
            v.first().map(|v| {
                (
                    v.label("state").unwrap().to_string(),
                    v.label("reason").unwrap().to_string(),
                )
            })
        };
        let s = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
        assert_eq!(verdict(None, 8, None), None);
        assert_eq!(verdict(None, 8, Some(0.9)), s("healthy", "none"));
        // Under the alert's 0.8 but not far below: healthy here, the alert warns.
        assert_eq!(verdict(None, 8, Some(0.6)), s("healthy", "none"));
        assert_eq!(
            verdict(None, 8, Some(0.4)),
            s("degraded", "nccl_bus_bandwidth_low")
        );
        assert_eq!(
            verdict(Some(8), 8, Some(0.4)),
            s("degraded", "nccl_bus_bandwidth_low")
        );
        assert_eq!(
            verdict(Some(8), 7, Some(0.4)),
            s("unhealthy", "gpu_count_below_expected")
        );
        // A ratio that is not a number is no measurement.
        assert_eq!(verdict(None, 8, Some(f64::NAN)), None);
        // The counts stay with the count rule's configuration.
        assert_eq!(node_samples_with_fabric(None, false, 8, Some(0.4)).len(), 1);
        assert_eq!(
            node_samples_with_fabric(Some(8), false, 8, Some(0.4)).len(),
            3
        );
    }

    #[test]
    fn a_count_that_cannot_be_established_is_an_unknown_node_whatever_the_fabric() {
        use dgx_pixels_metrics::Metric;
        for ratio in [None, Some(0.95), Some(0.3)] {
            let out = node_samples_with_fabric(None, true, 7, ratio);
            let v: Vec<_> = out
                .iter()
                .filter(|s| s.metric == Metric::NodeHealthAction)
                .map(|s| (s.label("state"), s.label("reason")))
                .collect();
            assert_eq!(
                v,
                [(Some("unknown"), Some(EXPECTED_GPUS_UNKNOWN))],
                "{ratio:?}"
            );
            assert!(!out.iter().any(|s| s.metric == Metric::NodeGpusExpected));
        }
    }

    #[test]
    fn the_markdown_has_a_row_per_rule() {
        let md = markdown();
        for r in RULES {
            assert!(md.contains(&format!("| `{}` |", r.reason)), "{}", r.reason);
        }
    }
}
