//! The /proc parsing over fixed text (what a kernel writes, names that break a naive split,
//! files cut short or garbled), the reader over a fixed directory, and the reader over this
//! test process's own /proc.

use super::*;

/// A /proc/PID/stat line as Linux 6.x writes it, with `comm` as the name: utime 250, stime
/// 50, starttime 6918013, vsize 3133440, rss 410.
fn stat_line(comm: &[u8]) -> Vec<u8> {
    let mut line = b"11905 (".to_vec();
    line.extend_from_slice(comm);
    line.extend_from_slice(
        b") R 11901 11901 5324 0 -1 4194304 98 0 0 0 250 50 0 0 20 0 1 0 6918013 3133440 410 \
          18446744073709551615 94403922833408 94403922853289 140722467388208 0 0 0 0 0 0 0 0 0 17 \
          0 0 0 0 0 0 94403922869296 94403922870912 94404609884160 140722467396322 \
          140722467396342 140722467396342 140722467397611 0\n",
    );
    line
}

const STAT: Stat = Stat {
    utime: 250,
    stime: 50,
    starttime: 6918013,
    vsize: 3133440,
    rss: 410,
};

const LIMITS: &str = "\
Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max file size             unlimited            unlimited            bytes     
Max stack size            8388608              unlimited            bytes     
Max processes             96362                96362                processes 
Max open files            20000                1048576              files     
Max locked memory         8388608              8388608              bytes     
Max address space         unlimited            unlimited            bytes     
Max nice priority         0                    0                    
Max realtime timeout      unlimited            unlimited            us        
";

#[test]
fn stat_reads_the_fields_of_a_plain_name() {
    assert_eq!(parse_stat(&stat_line(b"dgx-pixels-expo")), Some(STAT));
}

#[test]
fn stat_fields_start_after_the_last_parenthesis_of_the_name() {
    // prctl(PR_SET_NAME) takes any 15 bytes: spaces, parentheses, a fake state and fields.
    for comm in [
        &b"a b"[..],
        b"x) R 1 2 3",
        b"(x)",
        b") S 9 9 9 9 9 (",
        b"))))",
        b"((((",
        b"",
        b"tab\tand\nnl",
        b"\xff\xfe not utf-8",
    ] {
        assert_eq!(
            parse_stat(&stat_line(comm)),
            Some(STAT),
            "{}",
            String::from_utf8_lossy(comm)
        );
    }
}

#[test]
fn stat_cut_short_or_garbled_is_none() {
    let line = stat_line(b"dgx-pixels-expo");
    // Every cut up to where rss (field 24) starts loses a field or the name's end. A cut
    // inside its digits still parses (41 of 410), which is why a file over its bound is
    // refused whole (`read_bounded`) rather than read in part.
    let rss_start = String::from_utf8_lossy(&line).find(" 410 ").unwrap() + 1;
    for cut in 0..=rss_start {
        assert_eq!(parse_stat(&line[..cut]), None, "cut at {cut}");
    }
    // Fields 4 to 24, all 1 but field `n`, which is `v`.
    let fields = |n: usize, v: &str| -> String {
        let f: Vec<String> = (4..=24)
            .map(|i| if i == n { v.to_string() } else { "1".into() })
            .collect();
        f.join(" ")
    };
    let ones = fields(0, "");
    assert!(parse_stat(format!("11905 (name) R {ones}").as_bytes()).is_some());
    for bad in [
        String::new(),
        "\n".into(),
        format!("11905 (name R {ones}"),
        format!("11905 name) R {ones}"),
        format!("(name) R {ones}"),
        format!("x1 (name) R {ones}"),
        format!("11905(name) R {ones}"),
        format!("11905 (name)R {ones}"),
        format!("11905 (name) 7 {ones}"),
        format!("11905 (name) RR {ones}"),
        format!("11905 (name) R {}", fields(14, "x")),
        format!("11905 (name) R {}", fields(15, "1.5")),
        format!("11905 (name) R {}", fields(22, "-1")),
        format!("11905 (name) R {}", fields(23, "99999999999999999999")),
        format!("11905 (name) R {}", fields(24, "-1")),
        format!("11905 (name) R {}", fields(24, "")),
    ] {
        assert_eq!(parse_stat(bad.as_bytes()), None, "{bad}");
    }
    let mut not_utf8 = format!("11905 (name) R {ones}").into_bytes();
    not_utf8[2] = 0xff;
    assert_eq!(parse_stat(&not_utf8), None);
    let last = not_utf8.len() - 1;
    not_utf8[2] = b'9';
    not_utf8[last] = 0xff;
    assert_eq!(parse_stat(&not_utf8), None);
    // The fewest fields that hold rss parse.
    let shortest = b"1 (n) R 0 0 0 0 0 0 0 0 0 0 7 8 0 0 0 0 0 0 9 10 11";
    assert_eq!(
        parse_stat(shortest),
        Some(Stat {
            utime: 7,
            stime: 8,
            starttime: 9,
            vsize: 10,
            rss: 11
        })
    );
}

#[test]
fn limits_reads_the_soft_limits_and_unlimited_is_rlim_infinity() {
    assert_eq!(
        parse_limits(LIMITS),
        Limits {
            open_files: Some(20000),
            address_space: Some(u64::MAX),
        }
    );
    let set = LIMITS.replace(
        "Max address space         unlimited",
        "Max address space         4294967296",
    );
    assert_eq!(parse_limits(&set).address_space, Some(4 << 30));
}

#[test]
fn limits_cut_short_or_garbled_leave_the_limit_out() {
    assert_eq!(parse_limits(""), Limits::default());
    assert_eq!(
        parse_limits(LIMITS.lines().next().unwrap()),
        Limits::default()
    );
    // Cut inside the open files line: before its soft limit, or inside it (a shorter number
    // parses, which is why `read_bounded` refuses a file over its bound).
    let at = LIMITS.find("Max open files").unwrap();
    for cut in at..at + "Max open files            ".len() {
        assert_eq!(
            parse_limits(&LIMITS[..cut]).open_files,
            None,
            "cut at {cut}"
        );
    }
    for bad in [
        "Max open files            lots                 1048576              files",
        "Max open files            -1                   1048576              files",
        "Max open files            1e6                  1048576              files",
        "Max open filesX           1024                 1048576              files",
        "Max open files",
        "max open files            1024                 1048576              files",
        "Max address space         unlimitedish         unlimited            bytes",
        "Max address space         18446744073709551616 unlimited            bytes",
    ] {
        assert_eq!(parse_limits(bad), Limits::default(), "{bad}");
    }
    // The first line of a name that parses counts.
    let twice = "Max open files  1024  4096  files\nMax open files  9  9  files\n";
    assert_eq!(parse_limits(twice).open_files, Some(1024));
}

#[test]
fn btime_is_its_line_of_proc_stat() {
    let text = "cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 12 0 3\nctxt 99\nbtime 1796235511\nprocesses 7\n";
    assert_eq!(parse_btime(text), Some(1796235511));
    assert_eq!(parse_btime("cpu 1\nprocesses 7\n"), None);
    assert_eq!(parse_btime("btime \n"), None);
    assert_eq!(parse_btime("btime 17962x\n"), None);
    assert_eq!(parse_btime("xbtime 1\n"), None);
    assert_eq!(parse_btime("btime 1796"), Some(1796));
}

#[test]
fn a_file_over_its_bound_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    fs::write(&path, [b'7'; 16]).unwrap();
    assert_eq!(read_bounded(&path, 16).unwrap().len(), 16);
    let e = read_bounded(&path, 15).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(read_bounded(&dir.path().join("missing"), 16).is_err());
}

/// A /proc/self of fixed files: `stat`, `limits`, an `fd` directory of `fds` entries, and
/// /proc/stat, at 100 ticks per second and 4 KiB pages.
fn fixture(stat: &[u8], limits: &str, fds: usize) -> (tempfile::TempDir, OwnProcess) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("self");
    fs::create_dir_all(dir.join("fd")).unwrap();
    fs::write(dir.join("stat"), stat).unwrap();
    fs::write(dir.join("limits"), limits).unwrap();
    for i in 0..fds {
        fs::write(dir.join("fd").join(i.to_string()), "").unwrap();
    }
    let proc_stat = root.path().join("stat");
    fs::write(&proc_stat, "cpu 1 2\nintr 5 0 0\nbtime 1796235511\n").unwrap();
    let own = OwnProcess {
        dir,
        proc_stat,
        procfs: false,
        ticks_per_second: Some(100.0),
        page_size: Some(4096.0),
        start_time: None,
    };
    (root, own)
}

fn values(samples: &[Sample]) -> Vec<(&'static str, f64)> {
    samples
        .iter()
        .map(|s| {
            assert!(s.labels.is_empty() && s.device.is_none());
            (s.metric.def().name, s.value)
        })
        .collect()
}

#[test]
fn the_reader_serves_client_golangs_values() {
    let (_root, mut own) = fixture(&stat_line(b"a (b) c"), LIMITS, 12);
    let want = vec![
        ("process_cpu_seconds_total", 3.0),
        ("process_open_fds", 12.0),
        ("process_max_fds", 20000.0),
        ("process_virtual_memory_bytes", 3133440.0),
        ("process_virtual_memory_max_bytes", 18446744073709551615.0),
        ("process_resident_memory_bytes", 410.0 * 4096.0),
        ("process_start_time_seconds", 1796235511.0 + 69180.13),
    ];
    assert_eq!(values(&own.samples()), want);
    // The start time is kept: /proc/stat is not read again.
    fs::remove_file(&own.proc_stat).unwrap();
    assert_eq!(values(&own.samples()), want);
}

#[test]
fn the_largest_readings_do_not_overflow() {
    let max = u64::MAX.to_string();
    let fields: Vec<&str> = (4..=24).map(|_| max.as_str()).collect();
    let line = format!("1 (n) R {}\n", fields.join(" "));
    let (_root, mut own) = fixture(line.as_bytes(), LIMITS, 1);
    let got = values(&own.samples());
    assert_eq!(
        got[0],
        ("process_cpu_seconds_total", 2.0 * u64::MAX as f64 / 100.0)
    );
    assert!(got.iter().all(|(_, v)| v.is_finite()), "{got:?}");
}

#[test]
fn the_fd_walk_stops_past_the_soft_limit() {
    let (_root, own) = fixture(&stat_line(b"x"), LIMITS, 10);
    assert_eq!(own.open_fds(Some(3)), Some(4.0));
    assert_eq!(own.open_fds(Some(9)), Some(10.0));
    assert_eq!(own.open_fds(Some(10)), Some(10.0));
    assert_eq!(own.open_fds(None), Some(10.0));
    assert_eq!(own.open_fds(Some(u64::MAX)), Some(10.0));
    assert_eq!(
        count_entries(&own.dir.join("fd"), FD_WALK_CEILING + 1).unwrap(),
        10
    );
    assert!(count_entries(&own.dir.join("nowhere"), 5).is_err());
}

#[test]
fn a_reading_that_fails_is_left_out_not_zero() {
    // A garbled stat: CPU, memory and start time are left out; the limits and fds stay.
    let (_root, mut own) = fixture(b"11905 (x) R 1 2", LIMITS, 2);
    assert_eq!(
        values(&own.samples()),
        vec![
            ("process_open_fds", 2.0),
            ("process_max_fds", 20000.0),
            ("process_virtual_memory_max_bytes", 18446744073709551615.0),
        ]
    );
    // Garbled limits, no fd directory, no /proc/stat: the stat readings only.
    let (_root, mut own) = fixture(&stat_line(b"x"), "Max open files lots", 0);
    fs::remove_dir(own.dir.join("fd")).unwrap();
    fs::remove_file(&own.proc_stat).unwrap();
    assert_eq!(
        values(&own.samples()),
        vec![
            ("process_cpu_seconds_total", 3.0),
            ("process_virtual_memory_bytes", 3133440.0),
            ("process_resident_memory_bytes", 410.0 * 4096.0),
        ]
    );
    // Without the clock tick and the page size (sysconf failed): neither CPU, start time nor
    // resident memory.
    let (_root, mut own) = fixture(&stat_line(b"x"), LIMITS, 1);
    own.ticks_per_second = None;
    own.page_size = None;
    let names: Vec<_> = values(&own.samples()).into_iter().map(|v| v.0).collect();
    assert_eq!(
        names,
        [
            "process_open_fds",
            "process_max_fds",
            "process_virtual_memory_bytes",
            "process_virtual_memory_max_bytes"
        ]
    );
}

/// This test process's own /proc: every family, with plausible values.
#[test]
fn the_reader_reads_this_process() {
    let mut own = OwnProcess::new();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let got = values(&own.samples());
    let names: Vec<_> = got.iter().map(|v| v.0).collect();
    assert_eq!(names, dgx_pixels_metrics::catalog::STANDARD_PROCESS_NAMES);
    let value = |name| got.iter().find(|v| v.0 == name).unwrap().1;
    assert!(value("process_cpu_seconds_total") >= 0.0);
    let (open, max) = (value("process_open_fds"), value("process_max_fds"));
    assert!(open >= 3.0 && open <= max, "{open} of {max}");
    assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
    assert!(value("process_resident_memory_bytes") > 1e6);
    let start = value("process_start_time_seconds");
    assert!(start <= before + 1.0 && start > before - 3600.0, "{start}");
    // The walk of an older kernel agrees with the kernel's count (less the walk's own
    // descriptor), give or take what the other tests of this process open meanwhile.
    let by_walk = count_entries(Path::new("/proc/self/fd"), FD_WALK_CEILING).unwrap() as f64 - 1.0;
    assert!(
        (by_walk - open).abs() < 64.0,
        "walk {by_walk}, kernel {open}"
    );
}
