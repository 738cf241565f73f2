//! The two statements of the DCGM ABI, compared fact by fact: the fake's own (`fake_dcgm::abi`,
//! literal numbers from NVIDIA's DCGM 4.x headers) and the exporter's (`dcgm-sys`, bindgen over
//! our header, and the exporter's field table in `dgx-pixels-dcgm`). Neither is derived from the
//! other, so a wrong size, offset, version, code or field id on either side fails here, naming
//! the fact.
#![allow(clippy::unwrap_used)]

use std::mem::{offset_of, size_of};

use dcgm_sys as sys;
use fake_dcgm::abi;

#[test]
fn struct_sizes_agree() {
    let pairs = [
        (
            "dcgmFieldValue_v1",
            size_of::<sys::dcgmFieldValue_v1>(),
            abi::FIELD_VALUE_V1_SIZE,
        ),
        (
            "dcgmFieldValue_v2",
            size_of::<sys::dcgmFieldValue_v2>(),
            size_of::<abi::FieldValueV2>(),
        ),
        (
            "dcgmGroupEntityPair_t",
            size_of::<sys::dcgmGroupEntityPair_t>(),
            size_of::<abi::GroupEntityPair>(),
        ),
        (
            "dcgmConnectV2Params_v2",
            size_of::<sys::dcgmConnectV2Params_v2>(),
            size_of::<abi::ConnectV2Params>(),
        ),
        (
            "dcgmProfMetricGroupInfo_v2",
            size_of::<sys::dcgmProfMetricGroupInfo_v2>(),
            size_of::<abi::ProfMetricGroupInfo>(),
        ),
        (
            "dcgmProfGetMetricGroups_v3",
            size_of::<sys::dcgmProfGetMetricGroups_v3>(),
            size_of::<abi::ProfGetMetricGroups>(),
        ),
    ];
    for (name, ours, fake) in pairs {
        assert_eq!(ours, fake, "sizeof({name}): dcgm-sys {ours}, fake {fake}");
    }
}

#[test]
fn field_value_offsets_agree() {
    let sys_v2 = [
        offset_of!(sys::dcgmFieldValue_v2, version),
        offset_of!(sys::dcgmFieldValue_v2, entityGroupId),
        offset_of!(sys::dcgmFieldValue_v2, entityId),
        offset_of!(sys::dcgmFieldValue_v2, fieldId),
        offset_of!(sys::dcgmFieldValue_v2, fieldType),
        offset_of!(sys::dcgmFieldValue_v2, status),
        offset_of!(sys::dcgmFieldValue_v2, unused),
        offset_of!(sys::dcgmFieldValue_v2, ts),
        offset_of!(sys::dcgmFieldValue_v2, value),
    ];
    for ((field, documented), ours) in abi::FIELD_VALUE_V2_OFFSETS.iter().zip(sys_v2) {
        assert_eq!(
            ours, *documented,
            "offset of dcgmFieldValue_v2.{field}: dcgm-sys {ours}, documented {documented}"
        );
    }
    assert_eq!(
        offset_of!(sys::dcgmFieldValue_v1, ts),
        abi::FIELD_VALUE_V1_TS_OFFSET
    );
    assert_eq!(
        offset_of!(sys::dcgmFieldValue_v1, value),
        abi::FIELD_VALUE_V1_VALUE_OFFSET
    );
    assert_eq!(
        offset_of!(sys::dcgmGroupEntityPair_t, entityId),
        offset_of!(abi::GroupEntityPair, entityId)
    );
    assert_eq!(
        offset_of!(sys::dcgmConnectV2Params_v2, addressIsUnixSocket),
        offset_of!(abi::ConnectV2Params, addressIsUnixSocket)
    );
    assert_eq!(
        offset_of!(sys::dcgmProfGetMetricGroups_v3, metricGroups),
        offset_of!(abi::ProfGetMetricGroups, metricGroups)
    );
    assert_eq!(
        offset_of!(sys::dcgmProfMetricGroupInfo_v2, fieldIds),
        offset_of!(abi::ProfMetricGroupInfo, fieldIds)
    );
}

#[test]
fn versions_agree() {
    let pairs = [
        (
            "dcgmFieldValue_version1",
            sys::dcgmFieldValue_version1,
            abi::FIELD_VALUE_VERSION1,
        ),
        (
            "dcgmFieldValue_version2",
            sys::dcgmFieldValue_version2,
            abi::FIELD_VALUE_VERSION2,
        ),
        (
            "dcgmConnectV2Params_version2",
            sys::dcgmConnectV2Params_version2,
            abi::CONNECT_V2_PARAMS_VERSION2,
        ),
        (
            "dcgmProfGetMetricGroups_version3",
            sys::dcgmProfGetMetricGroups_version3,
            abi::PROF_GET_METRIC_GROUPS_VERSION3,
        ),
    ];
    for (name, ours, fake) in pairs {
        assert_eq!(ours, fake, "{name}: dcgm-sys {ours:#x}, fake {fake:#x}");
    }
}

#[test]
fn return_codes_agree() {
    let pairs: [(&str, i64, i32); 13] = [
        ("DCGM_ST_OK", sys::DCGM_ST_OK.into(), abi::code::OK),
        (
            "DCGM_ST_BADPARAM",
            sys::DCGM_ST_BADPARAM.into(),
            abi::code::BADPARAM,
        ),
        (
            "DCGM_ST_NOT_SUPPORTED",
            sys::DCGM_ST_NOT_SUPPORTED.into(),
            abi::code::NOT_SUPPORTED,
        ),
        (
            "DCGM_ST_UNINITIALIZED",
            sys::DCGM_ST_UNINITIALIZED.into(),
            abi::code::UNINITIALIZED,
        ),
        (
            "DCGM_ST_VER_MISMATCH",
            sys::DCGM_ST_VER_MISMATCH.into(),
            abi::code::VER_MISMATCH,
        ),
        (
            "DCGM_ST_NO_DATA",
            sys::DCGM_ST_NO_DATA.into(),
            abi::code::NO_DATA,
        ),
        (
            "DCGM_ST_STALE_DATA",
            sys::DCGM_ST_STALE_DATA.into(),
            abi::code::STALE_DATA,
        ),
        (
            "DCGM_ST_NOT_WATCHED",
            sys::DCGM_ST_NOT_WATCHED.into(),
            abi::code::NOT_WATCHED,
        ),
        (
            "DCGM_ST_CONNECTION_NOT_VALID",
            sys::DCGM_ST_CONNECTION_NOT_VALID.into(),
            abi::code::CONNECTION_NOT_VALID,
        ),
        (
            "DCGM_ST_REQUIRES_ROOT",
            sys::DCGM_ST_REQUIRES_ROOT.into(),
            abi::code::REQUIRES_ROOT,
        ),
        (
            "DCGM_ST_INSUFFICIENT_SIZE",
            sys::DCGM_ST_INSUFFICIENT_SIZE.into(),
            abi::code::INSUFFICIENT_SIZE,
        ),
        (
            "DCGM_ST_MODULE_NOT_LOADED",
            sys::DCGM_ST_MODULE_NOT_LOADED.into(),
            abi::code::MODULE_NOT_LOADED,
        ),
        (
            "DCGM_ST_PROFILING_NOT_SUPPORTED",
            sys::DCGM_ST_PROFILING_NOT_SUPPORTED.into(),
            abi::code::PROFILING_NOT_SUPPORTED,
        ),
    ];
    for (name, ours, fake) in pairs {
        assert_eq!(
            ours,
            i64::from(fake),
            "{name}: dcgm-sys {ours}, fake {fake}"
        );
    }
}

#[test]
fn constants_agree() {
    let pairs: [(&str, i128, i128); 26] = [
        (
            "DCGM_FE_NONE",
            sys::DCGM_FE_NONE.into(),
            abi::entity::NONE.into(),
        ),
        (
            "DCGM_FE_GPU",
            sys::DCGM_FE_GPU.into(),
            abi::entity::GPU.into(),
        ),
        (
            "DCGM_FE_VGPU",
            sys::DCGM_FE_VGPU.into(),
            abi::entity::VGPU.into(),
        ),
        (
            "DCGM_FE_SWITCH",
            sys::DCGM_FE_SWITCH.into(),
            abi::entity::SWITCH.into(),
        ),
        (
            "DCGM_FE_GPU_I",
            sys::DCGM_FE_GPU_I.into(),
            abi::entity::GPU_I.into(),
        ),
        (
            "DCGM_FE_GPU_CI",
            sys::DCGM_FE_GPU_CI.into(),
            abi::entity::GPU_CI.into(),
        ),
        (
            "DCGM_FE_LINK",
            sys::DCGM_FE_LINK.into(),
            abi::entity::LINK.into(),
        ),
        (
            "DCGM_FE_CPU",
            sys::DCGM_FE_CPU.into(),
            abi::entity::CPU.into(),
        ),
        (
            "DCGM_FE_CPU_CORE",
            sys::DCGM_FE_CPU_CORE.into(),
            abi::entity::CPU_CORE.into(),
        ),
        (
            "DCGM_FE_CONNECTX",
            sys::DCGM_FE_CONNECTX.into(),
            abi::entity::CONNECTX.into(),
        ),
        (
            "DCGM_OPERATION_MODE_AUTO",
            sys::DCGM_OPERATION_MODE_AUTO.into(),
            abi::OPERATION_MODE_AUTO.into(),
        ),
        (
            "DCGM_OPERATION_MODE_MANUAL",
            sys::DCGM_OPERATION_MODE_MANUAL.into(),
            abi::OPERATION_MODE_MANUAL.into(),
        ),
        (
            "DCGM_GROUP_DEFAULT",
            sys::DCGM_GROUP_DEFAULT.into(),
            abi::GROUP_DEFAULT.into(),
        ),
        (
            "DCGM_GROUP_EMPTY",
            sys::DCGM_GROUP_EMPTY.into(),
            abi::GROUP_EMPTY.into(),
        ),
        (
            "DCGM_GROUP_ALL_GPUS",
            sys::DCGM_GROUP_ALL_GPUS.into(),
            abi::GROUP_ALL_GPUS.into(),
        ),
        (
            "DCGM_GEGE_FLAG_ONLY_SUPPORTED",
            sys::DCGM_GEGE_FLAG_ONLY_SUPPORTED.into(),
            abi::GEGE_FLAG_ONLY_SUPPORTED.into(),
        ),
        (
            "DCGM_FV_FLAG_LIVE_DATA",
            sys::DCGM_FV_FLAG_LIVE_DATA.into(),
            abi::FV_FLAG_LIVE_DATA.into(),
        ),
        (
            "DCGM_MAX_NUM_DEVICES",
            sys::DCGM_MAX_NUM_DEVICES.into(),
            abi::MAX_NUM_DEVICES as i128,
        ),
        (
            "DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP",
            sys::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP.into(),
            abi::MAX_FIELD_IDS_PER_FIELD_GROUP as i128,
        ),
        (
            "DCGM_MAX_STR_LENGTH",
            sys::DCGM_MAX_STR_LENGTH.into(),
            abi::MAX_STR_LENGTH as i128,
        ),
        (
            "DCGM_MAX_BLOB_LENGTH",
            sys::DCGM_MAX_BLOB_LENGTH.into(),
            abi::MAX_BLOB_LENGTH as i128,
        ),
        (
            "DCGM_PROF_MAX_NUM_GROUPS_V2",
            sys::DCGM_PROF_MAX_NUM_GROUPS_V2.into(),
            abi::PROF_MAX_NUM_GROUPS_V2 as i128,
        ),
        (
            "DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2",
            sys::DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2.into(),
            abi::PROF_MAX_FIELD_IDS_PER_GROUP_V2 as i128,
        ),
        (
            "DCGM_INT32_BLANK",
            sys::DCGM_INT32_BLANK.into(),
            abi::INT32_BLANK.into(),
        ),
        (
            "DCGM_INT64_BLANK",
            sys::DCGM_INT64_BLANK.into(),
            abi::INT64_BLANK.into(),
        ),
        (
            "DCGM_FT_INT64",
            sys::DCGM_FT_INT64.into(),
            abi::field_type::INT64.into(),
        ),
    ];
    for (name, ours, fake) in pairs {
        assert_eq!(ours, fake, "{name}: dcgm-sys {ours}, fake {fake}");
    }
    let types: [(&str, i128, u8); 4] = [
        (
            "DCGM_FT_DOUBLE",
            sys::DCGM_FT_DOUBLE.into(),
            abi::field_type::DOUBLE,
        ),
        (
            "DCGM_FT_STRING",
            sys::DCGM_FT_STRING.into(),
            abi::field_type::STRING,
        ),
        (
            "DCGM_FT_BINARY",
            sys::DCGM_FT_BINARY.into(),
            abi::field_type::BINARY,
        ),
        (
            "DCGM_FT_TIMESTAMP",
            sys::DCGM_FT_TIMESTAMP.into(),
            abi::field_type::TIMESTAMP,
        ),
    ];
    for (name, ours, fake) in types {
        assert_eq!(ours, i128::from(fake), "{name}");
    }
    assert_eq!(
        sys::DCGM_FP64_BLANK.to_bits(),
        abi::FP64_BLANK.to_bits(),
        "DCGM_FP64_BLANK"
    );
    assert_eq!(
        &sys::DCGM_STR_BLANK[..sys::DCGM_STR_BLANK.len() - 1],
        abi::STR_BLANK.as_bytes(),
        "DCGM_STR_BLANK"
    );
}

#[test]
fn field_ids_agree_with_the_exporters_field_table() {
    for (id, name) in abi::FIELD_NAMES {
        let known = dgx_pixels_dcgm::fields::by_name(name)
            .unwrap_or_else(|| panic!("{name} (fake: {id}) is not in the exporter's field table"));
        assert_eq!(
            known.id, *id,
            "{name}: the exporter's field table says {}, the fake {id}",
            known.id
        );
    }
    // And the other way: every field the exporter maps to a metric is one the fake serves, so
    // the fake-library tests cover every mapping.
    for f in dgx_pixels_dcgm::fields::KNOWN_FIELDS
        .iter()
        .filter(|f| f.mapping.is_some())
    {
        assert!(
            abi::FIELD_NAMES.contains(&(f.id, f.name)),
            "{} ({}) is mapped by the exporter but unknown to the fake",
            f.name,
            f.id
        );
    }
}

/// Compiles only when the fake's exported function and dcgm-sys's binding of the same symbol
/// have the same type (parameter and return types, `const`ness of pointers included).
fn same_prototype<F, E>(_fake: F, _binding: fn(&sys::DcgmLib) -> &Result<F, E>) {}

#[test]
fn exported_prototypes_agree() {
    use fake_dcgm as f;
    type H = abi::Handle;
    type R = abi::Return;
    type U = abi::Uint;
    use std::ffi::{c_char, c_int};
    same_prototype(f::dcgmInit as unsafe extern "C" fn() -> R, |l| &l.dcgmInit);
    same_prototype(f::dcgmShutdown as unsafe extern "C" fn() -> R, |l| {
        &l.dcgmShutdown
    });
    same_prototype(
        f::dcgmStartEmbedded as unsafe extern "C" fn(U, *mut H) -> R,
        |l| &l.dcgmStartEmbedded,
    );
    same_prototype(f::dcgmStopEmbedded as unsafe extern "C" fn(H) -> R, |l| {
        &l.dcgmStopEmbedded
    });
    same_prototype(f::dcgmDisconnect as unsafe extern "C" fn(H) -> R, |l| {
        &l.dcgmDisconnect
    });
    same_prototype(
        f::errorString as unsafe extern "C" fn(R) -> *const c_char,
        |l| &l.errorString,
    );
    same_prototype(
        f::dcgmGetEntityGroupEntities as unsafe extern "C" fn(H, U, *mut U, *mut c_int, U) -> R,
        |l| &l.dcgmGetEntityGroupEntities,
    );
    same_prototype(
        f::dcgmGroupCreate as unsafe extern "C" fn(H, U, *const c_char, *mut usize) -> R,
        |l| &l.dcgmGroupCreate,
    );
    same_prototype(
        f::dcgmGroupAddEntity as unsafe extern "C" fn(H, usize, U, U) -> R,
        |l| &l.dcgmGroupAddEntity,
    );
    same_prototype(
        f::dcgmGroupDestroy as unsafe extern "C" fn(H, usize) -> R,
        |l| &l.dcgmGroupDestroy,
    );
    // Upstream: `const unsigned short *fieldIds`.
    same_prototype(
        f::dcgmFieldGroupCreate
            as unsafe extern "C" fn(H, c_int, *const u16, *const c_char, *mut usize) -> R,
        |l| &l.dcgmFieldGroupCreate,
    );
    same_prototype(
        f::dcgmFieldGroupDestroy as unsafe extern "C" fn(H, usize) -> R,
        |l| &l.dcgmFieldGroupDestroy,
    );
    same_prototype(
        f::dcgmWatchFields as unsafe extern "C" fn(H, usize, usize, i64, f64, c_int) -> R,
        |l| &l.dcgmWatchFields,
    );
    same_prototype(
        f::dcgmUnwatchFields as unsafe extern "C" fn(H, usize, usize) -> R,
        |l| &l.dcgmUnwatchFields,
    );
    same_prototype(
        f::dcgmUpdateAllFields as unsafe extern "C" fn(H, c_int) -> R,
        |l| &l.dcgmUpdateAllFields,
    );
    // dcgmConnect_v2, dcgmEntitiesGetLatestValues and dcgmProfGetSupportedMetricGroups take
    // struct pointers, each side's own struct type, so they cannot be the same Rust type: the
    // structs themselves are compared above (sizes, offsets, versions).
}
