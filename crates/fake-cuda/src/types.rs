//! The C types and constants of the CUDA driver API and cuBLAS that the fake uses. Enum
//! arguments are taken as plain integers (a value the fake does not know must not be
//! undefined behaviour); the values are checked against cudarc's bindings in the tests.

use std::ffi::{c_int, c_uint, c_void};

/// `CUresult`.
pub type CuResult = c_uint;
/// `CUdevice`: the ordinal.
pub type CuDevice = c_int;
/// `CUdeviceptr`.
pub type CuDevicePtr = u64;
/// Opaque handles (`CUcontext`, `CUstream`, `CUevent`, `CUmodule`, `CUfunction`,
/// `cublasHandle_t`).
pub type Handle = *mut c_void;
/// `cublasStatus_t`.
pub type BlasStatus = c_uint;

pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
pub const CUDA_ERROR_DEVICE_UNAVAILABLE: CuResult = 46;
pub const CUDA_ERROR_NO_DEVICE: CuResult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CuResult = 101;
pub const CUDA_ERROR_INVALID_IMAGE: CuResult = 200;
pub const CUDA_ERROR_INVALID_CONTEXT: CuResult = 201;
pub const CUDA_ERROR_NO_BINARY_FOR_GPU: CuResult = 209;
pub const CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: CuResult = 217;
pub const CUDA_ERROR_INVALID_PTX: CuResult = 218;
pub const CUDA_ERROR_INVALID_HANDLE: CuResult = 400;
pub const CUDA_ERROR_NOT_FOUND: CuResult = 500;
pub const CUDA_ERROR_NOT_READY: CuResult = 600;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CuResult = 700;
pub const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CuResult = 704;
pub const CUDA_ERROR_NOT_SUPPORTED: CuResult = 801;
pub const CUDA_ERROR_UNKNOWN: CuResult = 999;

/// Names and descriptions for `cuGetErrorName` / `cuGetErrorString` (NUL-terminated).
pub const ERRORS: &[(CuResult, &str, &str)] = &[
    (CUDA_SUCCESS, "CUDA_SUCCESS\0", "no error\0"),
    (
        CUDA_ERROR_INVALID_VALUE,
        "CUDA_ERROR_INVALID_VALUE\0",
        "invalid argument\0",
    ),
    (
        CUDA_ERROR_OUT_OF_MEMORY,
        "CUDA_ERROR_OUT_OF_MEMORY\0",
        "out of memory\0",
    ),
    (
        CUDA_ERROR_NOT_INITIALIZED,
        "CUDA_ERROR_NOT_INITIALIZED\0",
        "initialization error\0",
    ),
    (
        CUDA_ERROR_DEVICE_UNAVAILABLE,
        "CUDA_ERROR_DEVICE_UNAVAILABLE\0",
        "CUDA-capable device(s) is/are busy or unavailable\0",
    ),
    (
        CUDA_ERROR_NO_DEVICE,
        "CUDA_ERROR_NO_DEVICE\0",
        "no CUDA-capable device is detected\0",
    ),
    (
        CUDA_ERROR_INVALID_DEVICE,
        "CUDA_ERROR_INVALID_DEVICE\0",
        "invalid device ordinal\0",
    ),
    (
        CUDA_ERROR_INVALID_IMAGE,
        "CUDA_ERROR_INVALID_IMAGE\0",
        "device kernel image is invalid\0",
    ),
    (
        CUDA_ERROR_INVALID_CONTEXT,
        "CUDA_ERROR_INVALID_CONTEXT\0",
        "invalid device context\0",
    ),
    (
        CUDA_ERROR_NO_BINARY_FOR_GPU,
        "CUDA_ERROR_NO_BINARY_FOR_GPU\0",
        "no kernel image is available for execution on the device\0",
    ),
    (
        CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
        "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED\0",
        "peer access is not supported between these two devices\0",
    ),
    (
        CUDA_ERROR_INVALID_PTX,
        "CUDA_ERROR_INVALID_PTX\0",
        "a PTX JIT compilation failed\0",
    ),
    (
        CUDA_ERROR_INVALID_HANDLE,
        "CUDA_ERROR_INVALID_HANDLE\0",
        "invalid resource handle\0",
    ),
    (
        CUDA_ERROR_NOT_FOUND,
        "CUDA_ERROR_NOT_FOUND\0",
        "named symbol not found\0",
    ),
    (
        CUDA_ERROR_NOT_READY,
        "CUDA_ERROR_NOT_READY\0",
        "device not ready\0",
    ),
    (
        CUDA_ERROR_ILLEGAL_ADDRESS,
        "CUDA_ERROR_ILLEGAL_ADDRESS\0",
        "an illegal memory access was encountered\0",
    ),
    (
        CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
        "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED\0",
        "peer access is already enabled\0",
    ),
    (
        CUDA_ERROR_NOT_SUPPORTED,
        "CUDA_ERROR_NOT_SUPPORTED\0",
        "operation not supported\0",
    ),
    (
        CUDA_ERROR_UNKNOWN,
        "CUDA_ERROR_UNKNOWN\0",
        "unknown error\0",
    ),
];

// CUdevice_attribute values the fake answers.
pub const ATTR_MAX_THREADS_PER_BLOCK: c_int = 1;
pub const ATTR_WARP_SIZE: c_int = 10;
pub const ATTR_CLOCK_RATE: c_int = 13;
pub const ATTR_MULTIPROCESSOR_COUNT: c_int = 16;
pub const ATTR_MEMORY_CLOCK_RATE: c_int = 36;
pub const ATTR_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
pub const ATTR_COMPUTE_CAPABILITY_MINOR: c_int = 76;
pub const ATTR_MEMORY_POOLS_SUPPORTED: c_int = 115;

/// `CU_EVENT_DISABLE_TIMING`.
pub const EVENT_DISABLE_TIMING: c_uint = 2;

pub const CUBLAS_STATUS_SUCCESS: BlasStatus = 0;
pub const CUBLAS_STATUS_NOT_INITIALIZED: BlasStatus = 1;
pub const CUBLAS_STATUS_INVALID_VALUE: BlasStatus = 7;
pub const CUBLAS_STATUS_EXECUTION_FAILED: BlasStatus = 13;
pub const CUBLAS_STATUS_INTERNAL_ERROR: BlasStatus = 14;
pub const CUBLAS_STATUS_NOT_SUPPORTED: BlasStatus = 15;

// cudaDataType_t values.
pub const CUDA_R_32F: c_uint = 0;
pub const CUDA_R_64F: c_uint = 1;
pub const CUDA_R_16F: c_uint = 2;
pub const CUDA_R_16BF: c_uint = 14;

/// `CUBLAS_TF32_TENSOR_OP_MATH` (the low bits of `cublasMath_t`; the rest are flags).
pub const CUBLAS_TF32_TENSOR_OP_MATH: c_uint = 3;
/// `CUBLAS_COMPUTE_32F_FAST_TF32`.
pub const CUBLAS_COMPUTE_32F_FAST_TF32: c_uint = 77;
/// `CUBLAS_OP_N`, `CUBLAS_OP_T`, `CUBLAS_OP_C`.
pub const CUBLAS_OPS: [c_uint; 3] = [0, 1, 2];
