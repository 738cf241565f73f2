//! The cuBLAS exports: handles, stream and math mode, and the GEMMs the probes run.

use std::ffi::{c_int, c_uint, c_void};

use dgx_pixels_sim::{Benchmark, Precision};

use crate::state::{self, blas_fn, handle, id_of, with_blas, Blas, Kind, RateError};
use crate::types::*;

blas_fn! {
    /// Creates a handle in the current context (none current: `NOT_INITIALIZED`).
    fn cublasCreate_v2(out: *mut Handle) {
        // SAFETY: cuBLAS contract for out-parameters.
        let p = unsafe { out.as_mut() }.ok_or(CUBLAS_STATUS_INVALID_VALUE)?;
        *p = with_blas(|d| {
            let gpu = d.current().map_err(|_| CUBLAS_STATUS_NOT_INITIALIZED)?;
            let id = d.next_id();
            d.blas.insert(id, Blas { gpu, stream: 0, math: 0 });
            Ok(handle(Kind::Blas, id))
        })?;
        Ok(())
    }
}

/// Runs `f` on the handle's state.
fn with_handle<R>(
    h: Handle,
    f: impl FnOnce(&mut Blas) -> Result<R, BlasStatus>,
) -> Result<R, BlasStatus> {
    let id = id_of(h, Kind::Blas).ok_or(CUBLAS_STATUS_NOT_INITIALIZED)?;
    with_blas(|d| f(d.blas.get_mut(&id).ok_or(CUBLAS_STATUS_NOT_INITIALIZED)?))
}

blas_fn! {
    /// Destroys a handle.
    fn cublasDestroy_v2(h: Handle) {
        let id = id_of(h, Kind::Blas).ok_or(CUBLAS_STATUS_NOT_INITIALIZED)?;
        with_blas(|d| d.blas.remove(&id).map(|_| ()).ok_or(CUBLAS_STATUS_NOT_INITIALIZED))
    }
}

blas_fn! {
    /// Sets the stream the handle's work goes to.
    fn cublasSetStream_v2(h: Handle, stream: Handle) {
        with_handle(h, |b| {
            b.stream = stream as usize;
            Ok(())
        })
    }
}

blas_fn! {
    /// Sets the math mode (`CUBLAS_TF32_TENSOR_OP_MATH` makes fp32 GEMMs run as TF32).
    fn cublasSetMathMode(h: Handle, mode: c_uint) {
        with_handle(h, |b| {
            b.math = mode;
            Ok(())
        })
    }
}

blas_fn! {
    /// The math mode.
    fn cublasGetMathMode(h: Handle, mode: *mut c_uint) {
        // SAFETY: cuBLAS contract for out-parameters.
        let p = unsafe { mode.as_mut() }.ok_or(CUBLAS_STATUS_INVALID_VALUE)?;
        *p = with_handle(h, |b| Ok(b.math))?;
        Ok(())
    }
}

/// The shape and operands of one GEMM.
struct Gemm {
    transa: c_uint,
    transb: c_uint,
    m: c_int,
    n: c_int,
    k: c_int,
    lda: c_int,
    ldb: c_int,
    ldc: c_int,
    a: u64,
    b: u64,
    c: u64,
    /// Bytes per element of A, B and C.
    elem: u64,
    scalars_present: bool,
}

/// Elements a column-major `rows` x `cols` matrix with leading dimension `ld` spans.
fn span(rows: u64, cols: u64, ld: u64) -> u64 {
    if rows == 0 || cols == 0 {
        0
    } else {
        ld.saturating_mul(cols - 1).saturating_add(rows)
    }
}

/// Checks a GEMM as cuBLAS does, then enqueues its modeled duration on the handle's stream.
/// Operands outside live allocations fail as the kernel would (`EXECUTION_FAILED`).
fn run(h: Handle, g: Gemm, precision: impl FnOnce(c_uint) -> Precision) -> Result<(), BlasStatus> {
    if !CUBLAS_OPS.contains(&g.transa) || !CUBLAS_OPS.contains(&g.transb) || !g.scalars_present {
        return Err(CUBLAS_STATUS_INVALID_VALUE);
    }
    let dim = |v: c_int| u64::try_from(v).map_err(|_| CUBLAS_STATUS_INVALID_VALUE);
    let (m, n, k) = (dim(g.m)?, dim(g.n)?, dim(g.k)?);
    let (lda, ldb, ldc) = (dim(g.lda)?, dim(g.ldb)?, dim(g.ldc)?);
    let (rows_a, cols_a) = if g.transa == 0 { (m, k) } else { (k, m) };
    let (rows_b, cols_b) = if g.transb == 0 { (k, n) } else { (n, k) };
    if lda < rows_a.max(1) || ldb < rows_b.max(1) || ldc < m.max(1) {
        return Err(CUBLAS_STATUS_INVALID_VALUE);
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let id = id_of(h, Kind::Blas).ok_or(CUBLAS_STATUS_NOT_INITIALIZED)?;
    with_blas(|d| {
        let b = d.blas.get(&id).ok_or(CUBLAS_STATUS_NOT_INITIALIZED)?;
        let (gpu, stream, math) = (b.gpu, b.stream, b.math);
        let bytes = |rows, cols, ld| span(rows, cols, ld).saturating_mul(g.elem);
        if !d.check_range(gpu, g.a, bytes(rows_a, cols_a, lda))
            || !d.check_range(gpu, g.b, bytes(rows_b, cols_b, ldb))
            || !d.check_range(gpu, g.c, bytes(m, n, ldc))
        {
            return Err(CUBLAS_STATUS_EXECUTION_FAILED);
        }
        state::crash_point(d);
        let rate = d
            .rate(gpu, Benchmark::Gemm(precision(math)))
            .map_err(|e| match e {
                RateError::Unavailable => CUBLAS_STATUS_EXECUTION_FAILED,
                RateError::Unsupported => CUBLAS_STATUS_NOT_SUPPORTED,
            })?;
        let flop = 2.0 * m as f64 * n as f64 * k as f64;
        let seconds = flop / rate * d.jitter(gpu);
        d.enqueue(gpu, stream as Handle, seconds)
            .map_err(|_| CUBLAS_STATUS_EXECUTION_FAILED)
    })
}

/// fp32 GEMMs: TF32 where the math mode (or compute type) allows it.
fn fp32(math: c_uint) -> Precision {
    if math & 0xF == CUBLAS_TF32_TENSOR_OP_MATH {
        Precision::Tf32
    } else {
        Precision::Fp32
    }
}

blas_fn! {
    /// fp32 GEMM (TF32 in `CUBLAS_TF32_TENSOR_OP_MATH`).
    fn cublasSgemm_v2(
        h: Handle, transa: c_uint, transb: c_uint, m: c_int, n: c_int, k: c_int,
        alpha: *const f32, a: *const f32, lda: c_int, b: *const f32, ldb: c_int,
        beta: *const f32, c: *mut f32, ldc: c_int,
    ) {
        let g = Gemm {
            transa, transb, m, n, k, lda, ldb, ldc,
            a: a as u64, b: b as u64, c: c as u64, elem: 4,
            scalars_present: !alpha.is_null() && !beta.is_null(),
        };
        run(h, g, fp32)
    }
}

blas_fn! {
    /// fp64 GEMM.
    fn cublasDgemm_v2(
        h: Handle, transa: c_uint, transb: c_uint, m: c_int, n: c_int, k: c_int,
        alpha: *const f64, a: *const f64, lda: c_int, b: *const f64, ldb: c_int,
        beta: *const f64, c: *mut f64, ldc: c_int,
    ) {
        let g = Gemm {
            transa, transb, m, n, k, lda, ldb, ldc,
            a: a as u64, b: b as u64, c: c as u64, elem: 8,
            scalars_present: !alpha.is_null() && !beta.is_null(),
        };
        run(h, g, |_| Precision::Fp64)
    }
}

blas_fn! {
    /// Mixed-precision GEMM: bf16 and fp16 (tensor cores, fp32 accumulation), fp32 and fp64;
    /// A, B and C of one type. Other combinations answer `NOT_SUPPORTED`.
    fn cublasGemmEx(
        h: Handle, transa: c_uint, transb: c_uint, m: c_int, n: c_int, k: c_int,
        alpha: *const c_void, a: *const c_void, a_type: c_uint, lda: c_int,
        b: *const c_void, b_type: c_uint, ldb: c_int, beta: *const c_void,
        c: *mut c_void, c_type: c_uint, ldc: c_int, compute_type: c_uint, algo: c_int,
    ) {
        let _ = algo;
        if a_type != b_type || a_type != c_type {
            return Err(CUBLAS_STATUS_NOT_SUPPORTED);
        }
        let (elem, precision): (u64, fn(c_uint) -> Precision) = match a_type {
            CUDA_R_16BF => (2, |_| Precision::Bf16),
            CUDA_R_16F => (2, |_| Precision::Fp16),
            CUDA_R_32F if compute_type == CUBLAS_COMPUTE_32F_FAST_TF32 => {
                (4, |_| Precision::Tf32)
            }
            CUDA_R_32F => (4, fp32),
            CUDA_R_64F => (8, |_| Precision::Fp64),
            _ => return Err(CUBLAS_STATUS_NOT_SUPPORTED),
        };
        let g = Gemm {
            transa, transb, m, n, k, lda, ldb, ldc,
            a: a as u64, b: b as u64, c: c as u64, elem,
            scalars_present: !alpha.is_null() && !beta.is_null(),
        };
        run(h, g, precision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_the_last_column_only_up_to_its_rows() {
        assert_eq!(span(4, 3, 4), 12);
        assert_eq!(span(4, 3, 10), 24);
        assert_eq!(span(0, 3, 10), 0);
    }

    #[test]
    fn fp32_math_modes() {
        assert_eq!(fp32(0), Precision::Fp32);
        assert_eq!(fp32(3), Precision::Tf32);
        // CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION is a flag on top of the mode.
        assert_eq!(fp32(3 | 16), Precision::Tf32);
        assert_eq!(fp32(1), Precision::Fp32);
    }
}
