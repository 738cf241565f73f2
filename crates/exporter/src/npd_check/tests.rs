use super::*;
use crate::cli::ProblemAt;

fn series(gpu: u32, state: &str, action: &str, reason: &str) -> String {
    format!(
        "dgx_pixels_gpu_health_state{{gpu=\"{gpu}\",uuid=\"GPU-{gpu}\",state=\"{state}\"}} 1\n\
         dgx_pixels_gpu_health_action_info{{gpu=\"{gpu}\",uuid=\"GPU-{gpu}\",action=\"{action}\",reason=\"{reason}\"}} 1\n"
    )
}

#[test]
fn verdicts_map_to_the_plugin_protocol() {
    let healthy = series(0, "healthy", "none", "none") + &series(1, "healthy", "none", "none");
    assert_eq!(
        judge(&healthy, ProblemAt::Unhealthy),
        Answer::new(0, "2 GPUs healthy")
    );
    let degraded =
        series(0, "healthy", "none", "none") + &series(10, "degraded", "restart_app", "xid_13");
    assert_eq!(
        judge(&degraded, ProblemAt::Unhealthy),
        Answer::new(0, "GPU 10 degraded: restart_app (xid_13)")
    );
    assert_eq!(judge(&degraded, ProblemAt::Degraded).status, 1);
    let bad = degraded.clone()
        + &series(2, "unknown", "unknown", "no_readings")
        + &series(3, "unhealthy", "reset_gpu", "xid_48")
        + &series(4, "unhealthy", "reboot", "gpu_lost");
    assert_eq!(
        judge(&bad, ProblemAt::Unhealthy),
        Answer::new(1, "GPU 3 unhealthy: reset_gpu (xid_48); 1 more of 5")
    );
    assert_eq!(
        judge(&bad, ProblemAt::Degraded).message,
        "GPU 3 unhealthy: reset_gpu (xid_48); 2 more of 5"
    );
    let unknown = degraded + &series(2, "unknown", "unknown", "xid_unobserved");
    assert_eq!(
        judge(&unknown, ProblemAt::Unhealthy),
        Answer::new(2, "GPU 2 unknown: unknown (xid_unobserved)")
    );
    assert_eq!(
        judge("dgx_pixels_gpu_up{gpu=\"0\"} 1\n", ProblemAt::Unhealthy).status,
        2
    );
}

#[test]
fn a_state_series_at_0_is_not_the_verdict_and_labels_match_whole_names() {
    let text = "dgx_pixels_gpu_health_state{gpu=\"0\",state=\"unhealthy\"} 0\n\
                dgx_pixels_gpu_health_state{xgpu=\"9\",gpu=\"0\",state=\"healthy\"} 1\n";
    assert_eq!(
        judge(text, ProblemAt::Unhealthy),
        Answer::new(0, "1 GPU healthy")
    );
}

#[test]
fn messages_are_one_bounded_line() {
    // NPD's default max_output_length is 80 bytes: written out here, not the constant
    // under test (issue 43: the test compared the constant with itself).
    const NPD_MAX_OUTPUT_LENGTH: usize = 80;
    let long = "é".repeat(100) + "\nsecond";
    let line = one_line(&long);
    // 38 two-byte characters (76 bytes: 77 would split one) and the ellipsis.
    assert_eq!(line, "é".repeat(38) + "...");
    assert!(line.len() <= NPD_MAX_OUTPUT_LENGTH);
    // A long ASCII message fills the line exactly; a short one is kept whole.
    let line = one_line(&format!("GPU 3: {}\tend", "x".repeat(200)));
    assert_eq!(line.len(), NPD_MAX_OUTPUT_LENGTH);
    assert_eq!(line, format!("GPU 3: {}...", "x".repeat(70)));
    let short = "x".repeat(NPD_MAX_OUTPUT_LENGTH);
    assert_eq!(one_line(&short), short);
    assert_eq!(one_line("a\nb"), "a b");
}

#[test]
fn basic_auth_encodes_as_the_rfc_says() {
    // RFC 7617's example.
    assert_eq!(
        basic_auth("Aladdin", "open sesame"),
        "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
    );
    assert_eq!(basic_auth("a", "b"), "Basic YTpi");
    assert_eq!(basic_auth("ab", "c"), "Basic YWI6Yw==");
}

fn node(state: &str, action: &str, reason: &str) -> String {
    format!(
        "dgx_pixels_node_health_action_info{{state=\"{state}\",action=\"{action}\",reason=\"{reason}\"}} 1\n"
    )
}

fn healthy(n: u32) -> String {
    (0..n)
        .map(|g| series(g, "healthy", "none", "none"))
        .collect()
}

/// Issue 42, item 3: the node's verdict changes the exit and names the node reason (before,
/// every one of these was "8 GPUs healthy", exit 0).
#[test]
fn node_verdicts_change_the_exit_and_the_message() {
    let at = ProblemAt::Unhealthy;
    let text = healthy(8) + &node("unhealthy", "reboot", "gpu_count_below_expected");
    assert_eq!(
        judge(&text, at),
        Answer::new(1, "node unhealthy: reboot (gpu_count_below_expected)")
    );
    let text = healthy(8) + &node("unknown", "unknown", "expected_gpus_unknown");
    assert_eq!(
        judge(&text, at),
        Answer::new(2, "node unknown: unknown (expected_gpus_unknown)")
    );
    let text = healthy(8) + &node("degraded", "check_hardware", "nccl_bus_bandwidth_low");
    assert_eq!(
        judge(&text, at),
        Answer::new(0, "node degraded: check_hardware (nccl_bus_bandwidth_low)")
    );
    assert_eq!(judge(&text, ProblemAt::Degraded).status, 1);
    // A healthy node verdict leaves the answer as the GPUs make it.
    let text = healthy(8) + &node("healthy", "none", "none");
    assert_eq!(judge(&text, at), Answer::new(0, "8 GPUs healthy"));
    // The node and a GPU unhealthy: the node named, the GPU counted.
    let text = healthy(1)
        + &series(1, "unhealthy", "reset_gpu", "xid_48")
        + &node("unhealthy", "reboot", "gpu_count_below_expected");
    assert_eq!(
        judge(&text, at).message,
        "node unhealthy: reboot (gpu_count_below_expected); 1 of 2 GPUs too"
    );
    // A GPU unhealthy, the node degraded, from degraded on: the GPU first, the node said.
    let text = healthy(1)
        + &series(1, "unhealthy", "reset_gpu", "xid_48")
        + &node("degraded", "check_hardware", "nccl_bus_bandwidth_low");
    assert_eq!(
        judge(&text, ProblemAt::Degraded).message,
        "GPU 1 unhealthy: reset_gpu (xid_48); the node too"
    );
    // Every GPU gone and the node says so: a problem, not "no verdict".
    let text = node("unhealthy", "reboot", "gpu_count_below_expected");
    assert_eq!(judge(&text, at).status, 1);
    // A node verdict alone otherwise: still no GPU verdict, unknown.
    assert_eq!(judge(&node("healthy", "none", "none"), at).status, 2);
}

/// Issue 42, smaller: two verdict sets under one index are two GPUs (by uuid), the worse
/// decides, in either order (before, the later line won: one order said healthy).
#[test]
fn verdicts_are_keyed_by_uuid_not_decided_by_order() {
    let other = "dgx_pixels_gpu_health_state{gpu=\"3\",uuid=\"GPU-other\",state=\"unhealthy\"} 1\n\
                 dgx_pixels_gpu_health_action_info{gpu=\"3\",uuid=\"GPU-other\",action=\"reboot\",reason=\"gpu_lost\"} 1\n";
    for text in [healthy(8) + other, other.to_string() + &healthy(8)] {
        assert_eq!(
            judge(&text, ProblemAt::Unhealthy),
            Answer::new(1, "GPU 3 unhealthy: reboot (gpu_lost)"),
            "{text}"
        );
    }
    // Without uuid, by index: two states at 1 for one GPU, the worse holds in either order.
    let a = "dgx_pixels_gpu_health_state{gpu=\"0\",state=\"unhealthy\"} 1\n";
    let b = "dgx_pixels_gpu_health_state{gpu=\"0\",state=\"healthy\",x=\"1\"} 1\n";
    for text in [format!("{a}{b}"), format!("{b}{a}")] {
        assert_eq!(judge(&text, ProblemAt::Unhealthy).status, 1, "{text}");
    }
}

/// Issue 42, smaller: label values are read as the text format writes them, `,` `"` and `\`
/// escapes included (before, a `,` in a value split it, and a forged `state` inside a uuid
/// was read as the state: exit 0).
#[test]
fn label_values_are_parsed_with_their_escapes() {
    let text = healthy(1)
        + "dgx_pixels_gpu_health_state{gpu=\"1\",uuid=\"GPU-1,state=\\\"healthy\\\"\",state=\"unhealthy\"} 1\n\
           dgx_pixels_gpu_health_action_info{gpu=\"1\",uuid=\"GPU-1,state=\\\"healthy\\\"\",action=\"reset_gpu\",reason=\"a,b\\\\c\\\"d\"} 1\n";
    assert_eq!(
        judge(&text, ProblemAt::Unhealthy),
        Answer::new(1, "GPU 1 unhealthy: reset_gpu (a,b\\c\"d)")
    );
}

#[test]
fn a_malformed_exposition_is_unknown() {
    for text in [
        healthy(2) + "dgx_pixels_gpu_health_state{gpu=\"2\",state=\"healthy} 1\n",
        healthy(2) + "garbage here\n",
        healthy(2) + &series(1, "healthy", "none", "none"),
    ] {
        let a = judge(&text, ProblemAt::Unhealthy);
        assert_eq!(a.status, 2, "{text}: {a:?}");
        assert!(
            a.message.starts_with("the exporter's answer is malformed"),
            "{a:?}"
        );
    }
}
