//! Loads the built `libfake_dcgm.so` through our dcgm-sys bindings, exactly as the exporter
//! loads the real library, and checks the DCGM semantics the exporter relies on.
//!
//! The fake is per-process state configured from the environment at `dcgmInit`, so each test
//! runs its body in a child process (this test binary again, filtered to that test).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use dcgm_sys::*;

const CHILD: &str = "FAKE_DCGM_TEST_CHILD";

/// The fake, built once per test process (fake-support; `cargo test` builds no cdylib).
fn lib_path() -> String {
    fake_support::Fake::Dcgm
        .build()
        .unwrap()
        .display()
        .to_string()
}

/// Runs `body` in a child process with `env`.
fn in_child(test: &str, env: &[(&str, &str)], body: impl FnOnce(&DcgmLib)) {
    if fake_support::child::is_child(CHILD) {
        let lib = open(&std::env::var("FAKE_DCGM_LIB").unwrap()).unwrap();
        assert_eq!(unsafe { lib.dcgmInit() }, OK);
        body(&lib);
        return;
    }
    let lib = lib_path();
    fake_support::child::run_alone(CHILD, test, &[], |c| {
        c.env("FAKE_DCGM_LIB", lib).envs(env.iter().copied());
    });
}

fn embedded(lib: &DcgmLib) -> dcgmHandle_t {
    let mut h = 0;
    assert_eq!(
        unsafe { lib.dcgmStartEmbedded(DCGM_OPERATION_MODE_AUTO, &mut h) },
        OK
    );
    h
}

fn watch(lib: &DcgmLib, h: dcgmHandle_t, ids: &[u16], us: i64) -> dcgmReturn_t {
    let (mut g, mut fg) = (0, 0);
    unsafe {
        assert_eq!(
            lib.dcgmGroupCreate(h, DCGM_GROUP_DEFAULT, c"g".as_ptr(), &mut g),
            OK
        );
        assert_eq!(
            lib.dcgmFieldGroupCreate(h, ids.len() as i32, ids.as_ptr(), c"f".as_ptr(), &mut fg),
            OK
        );
        lib.dcgmWatchFields(h, g, fg, us, 1.0, 2)
    }
}

fn read(
    lib: &DcgmLib,
    h: dcgmHandle_t,
    gpu: u32,
    ids: &[u16],
    version: u32,
) -> (dcgmReturn_t, Vec<dcgmFieldValue_v2>) {
    let mut pair = dcgmGroupEntityPair_t {
        entityGroupId: DCGM_FE_GPU,
        entityId: gpu,
    };
    let mut ids = ids.to_vec();
    let mut values: Vec<dcgmFieldValue_v2> = vec![unsafe { std::mem::zeroed() }; ids.len()];
    for v in &mut values {
        v.version = version;
    }
    let rc = unsafe {
        lib.dcgmEntitiesGetLatestValues(
            h,
            &mut pair,
            1,
            ids.as_mut_ptr(),
            ids.len() as u32,
            0,
            values.as_mut_ptr(),
        )
    };
    (rc, values)
}

#[test]
fn versions_watches_blanks_and_sizes() {
    in_child(
        "versions_watches_blanks_and_sizes",
        &[("FAKE_DCGM_TIME", "60")],
        |lib| {
            let h = embedded(lib);
            // GPU list: too small a buffer answers the size needed.
            let mut ids = [0u32; 4];
            let mut n = 4;
            let rc = unsafe {
                lib.dcgmGetEntityGroupEntities(h, DCGM_FE_GPU, ids.as_mut_ptr(), &mut n, 0)
            };
            assert_eq!((rc, n), (DCGM_ST_INSUFFICIENT_SIZE, 8));
            // Profiling watches need 100 ms or more.
            assert_eq!(watch(lib, h, &[1002], 50_000), DCGM_ST_BADPARAM);
            assert_eq!(watch(lib, h, &[1002, 191, 203], 100_000), OK);
            // A wrong struct version is refused as a whole.
            let (rc, _) = read(lib, h, 0, &[1002], 0x0100_1018);
            assert_eq!(rc, DCGM_ST_VER_MISMATCH);
            let (rc, v) = read(lib, h, 0, &[1002, 191, 203, 150], dcgmFieldValue_version2);
            assert_eq!(rc, OK);
            assert_eq!(v[0].fieldType, u16::from(b'd'));
            let sm = unsafe { v[0].value.dbl };
            assert!((0.0..=1.0).contains(&sm), "{sm}");
            // H100 SXM has no fan: blank (not supported), never 0.
            assert_eq!(v[1].status, OK);
            assert!(int64_is_blank(unsafe { v[1].value.i64_ }));
            assert_eq!(unsafe { v[1].value.i64_ }, DCGM_INT64_BLANK as i64 + 2);
            assert!(!int64_is_blank(unsafe { v[2].value.i64_ }));
            // Not watched: status says so.
            assert_eq!(v[3].status, DCGM_ST_NOT_WATCHED);
            // Profiling groups.
            let mut g: dcgmProfGetMetricGroups_t = unsafe { std::mem::zeroed() };
            g.version = dcgmProfGetMetricGroups_version3;
            assert_eq!(
                unsafe { lib.dcgmProfGetSupportedMetricGroups(h, &mut g) },
                OK
            );
            assert_eq!(g.numMetricGroups, 5);
            g.version = 1;
            assert_eq!(
                unsafe { lib.dcgmProfGetSupportedMetricGroups(h, &mut g) },
                DCGM_ST_VER_MISMATCH
            );
            assert!(lib.error_string(DCGM_ST_VER_MISMATCH).contains("version"));
        },
    );
}

#[test]
fn a_lost_host_engine_breaks_remote_connections_for_good() {
    in_child(
        "a_lost_host_engine_breaks_remote_connections_for_good",
        &[
            ("FAKE_DCGM_CONNECTION_LOSS", "0.3:0.8"),
            ("FAKE_DCGM_HOSTENGINE", "/run/he.sock"),
        ],
        |lib| {
            let connect = |unix: bool, addr: &std::ffi::CStr| {
                let mut p = dcgmConnectV2Params_t {
                    version: dcgmConnectV2Params_version2,
                    persistAfterDisconnect: 0,
                    timeoutMs: 100,
                    addressIsUnixSocket: u32::from(unix),
                };
                let mut h = 0;
                let rc = unsafe { lib.dcgmConnect_v2(addr.as_ptr(), &mut p, &mut h) };
                (rc, h)
            };
            assert_eq!(
                connect(false, c"/run/he.sock").0,
                DCGM_ST_CONNECTION_NOT_VALID
            );
            let (rc, h) = connect(true, c"/run/he.sock");
            assert_eq!(rc, OK);
            assert_eq!(watch(lib, h, &[203], 1_000_000), OK);
            assert_eq!(read(lib, h, 0, &[203], dcgmFieldValue_version2).0, OK);
            std::thread::sleep(Duration::from_millis(400));
            assert_eq!(
                read(lib, h, 0, &[203], dcgmFieldValue_version2).0,
                DCGM_ST_CONNECTION_NOT_VALID
            );
            assert_eq!(
                connect(true, c"/run/he.sock").0,
                DCGM_ST_CONNECTION_NOT_VALID
            );
            std::thread::sleep(Duration::from_millis(500));
            // Back, but the old connection (and its watches) stays gone.
            assert_eq!(
                read(lib, h, 0, &[203], dcgmFieldValue_version2).0,
                DCGM_ST_CONNECTION_NOT_VALID
            );
            let (rc, h2) = connect(true, c"/run/he.sock");
            assert_eq!(rc, OK);
            let (rc, v) = read(lib, h2, 0, &[203], dcgmFieldValue_version2);
            assert_eq!((rc, v[0].status), (OK, DCGM_ST_NOT_WATCHED));
        },
    );
}
