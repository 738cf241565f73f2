//! The event model: the serde field types of one Kineto event (lenient, as pandas reads
//! them) and the builder that keeps, of each event, only the compact records of
//! [`crate::model`].
//!
//! Separate because it is where HTA's reading rules live (which rows are GPU rows, launches
//! or annotations, how numbers are coerced), apart from how the bytes are read.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use serde::de::{self, IgnoredAny, Visitor};
use serde::Deserialize;

use super::MAX_NELEMS;
use crate::classify::{kernel_class, profiler_step};
use crate::model::{Annotation, Aux, CpuCorr, FirstRow, GpuKind, GpuRow, RankTrace};

/// Largest |timestamp| taken, in µs (2^53, about 285 years after 1970: a real trace's epoch
/// times are near 2^51); a row beyond is counted in `bad_timestamps` and dropped.
const MAX_TS_US: f64 = (1u64 << 53) as f64;
/// Longest duration taken, in µs (2^36, about 19 hours; a profiler trace covers seconds);
/// longer ones are clamped and counted in `bad_durations`, so a sum of even 50 million rows
/// fits an i64.
const MAX_DUR_US: f64 = (1u64 << 36) as f64;

/// A string field that borrows from the input when it can (and takes numbers as text).
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Str(Cow::Borrowed("")))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Str(Cow::Borrowed("")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A number as pandas' `to_numeric(errors="coerce")` sees it: JSON numbers and numeric strings;
/// anything else is "not a number" (`value` NaN).
#[derive(Debug, Clone, Copy)]
pub(super) struct Lenient {
    value: f64,
    /// The exact integer, when the value is one that fits an i64.
    pub(super) int: Option<i64>,
    /// Whether JSON wrote it as a float (with '.' or an exponent).
    float: bool,
}

impl Lenient {
    const NAN: Lenient = Lenient {
        value: f64::NAN,
        int: None,
        float: false,
    };

    fn from_str(s: &str) -> Lenient {
        let t = s.trim();
        if let Ok(i) = t.parse::<i64>() {
            return Lenient {
                value: i as f64,
                int: Some(i),
                float: false,
            };
        }
        match t.parse::<f64>() {
            Ok(v) => Lenient {
                value: v,
                int: None,
                float: true,
            },
            Err(_) => Lenient::NAN,
        }
    }

    /// pandas' `astype(int)` of the coerced value, with −1 for NaN.
    fn as_int_or_minus_one(&self) -> i64 {
        match self.int {
            Some(i) => i,
            None if self.value.is_finite() => self.value.trunc() as i64,
            None => -1,
        }
    }

    fn as_count(&self) -> Option<u64> {
        match self.int {
            Some(i) if i >= 0 => Some(i as u64),
            Some(_) => None,
            None if self.value.is_finite() && self.value >= 0.0 => Some(self.value as u64),
            None => None,
        }
    }
}

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Lenient;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Lenient, E> {
                Ok(Lenient {
                    value: v as f64,
                    int: i64::try_from(v).ok(),
                    float: false,
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Lenient, E> {
                Ok(Lenient {
                    value: v as f64,
                    int: Some(v),
                    float: false,
                })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Lenient, E> {
                Ok(Lenient {
                    value: v,
                    int: None,
                    float: true,
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Lenient, E> {
                Ok(Lenient::from_str(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Lenient, E> {
                Ok(Lenient {
                    value: f64::from(u8::from(v)),
                    int: Some(i64::from(v)),
                    float: false,
                })
            }
            fn visit_unit<E: de::Error>(self) -> Result<Lenient, E> {
                Ok(Lenient::NAN)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Lenient, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Lenient::NAN)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Lenient, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Lenient::NAN)
            }
        }
        d.deserialize_any(V)
    }
}

/// `pid`/`tid`: integers or strings.
#[derive(Debug, Clone, Copy)]
struct Id(i64);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Str::deserialize(d)?;
        Ok(Id(match s.0.parse::<i64>() {
            Ok(i) => i,
            Err(_) => {
                // FNV-1a of the string, so different names stay apart.
                let mut h: u64 = 0xcbf29ce484222325;
                for b in s.0.bytes() {
                    h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
                }
                (h >> 1) as i64 | i64::MIN
            }
        }))
    }
}

#[derive(Deserialize)]
pub(super) struct RawEvent<'a> {
    #[serde(default, borrow)]
    cat: Option<Str<'a>>,
    #[serde(default, borrow)]
    name: Option<Str<'a>>,
    #[serde(default)]
    ts: Option<Lenient>,
    #[serde(default)]
    dur: Option<Lenient>,
    #[serde(default)]
    pid: Option<Id>,
    #[serde(default)]
    tid: Option<Id>,
    #[serde(default, borrow)]
    args: Option<RawArgs<'a>>,
}

#[derive(Deserialize, Default)]
struct RawArgs<'a> {
    #[serde(default)]
    stream: Option<Lenient>,
    #[serde(default)]
    correlation: Option<Lenient>,
    #[serde(default, borrow, rename = "Collective name")]
    collective: Option<Str<'a>>,
    #[serde(default, rename = "In msg nelems")]
    in_nelems: Option<Lenient>,
    #[serde(default, rename = "Out msg nelems")]
    out_nelems: Option<Lenient>,
    #[serde(default, rename = "Group size")]
    group_size: Option<Lenient>,
    #[serde(default, borrow)]
    dtype: Option<Str<'a>>,
    #[serde(default, borrow, rename = "Process Group Name")]
    pg_name: Option<Str<'a>>,
    #[serde(default)]
    bytes: Option<Lenient>,
}

pub(super) struct Builder {
    pub(super) out: RankTrace,
    intern: HashMap<String, u32>,
    first: bool,
}

impl Builder {
    pub(super) fn new(path: &Path) -> Builder {
        Builder {
            out: RankTrace {
                path: path.to_path_buf(),
                ..RankTrace::default()
            },
            intern: HashMap::new(),
            first: true,
        }
    }

    fn name_id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.intern.get(name) {
            return i;
        }
        let i = u32::try_from(self.out.names.len()).unwrap_or(u32::MAX);
        self.out.names.push(name.to_string());
        self.intern.insert(name.to_string(), i);
        i
    }

    pub(super) fn distributed_info(&mut self, v: &serde_json::Value) {
        let int = |v: Option<&serde_json::Value>| -> Option<i64> {
            match v? {
                serde_json::Value::Number(n) => n.as_i64(),
                serde_json::Value::String(s) => s.trim().parse().ok(),
                _ => None,
            }
        };
        self.out.rank = int(v.get("rank"));
        self.out.world_size = int(v.get("world_size")).and_then(|w| u64::try_from(w).ok());
    }

    pub(super) fn event(&mut self, ev: RawEvent<'_>) {
        let first = std::mem::replace(&mut self.first, false);
        let st = &mut self.out.stats;
        st.events += 1;
        // HTA rounds every row when the ts column is not all integers (a float or a gap).
        match &ev.ts {
            Some(t) if !t.float && t.int.is_some() => {}
            _ => self.out.round = true,
        }
        let (Some(cat), Some(dur)) = (&ev.cat, &ev.dur) else {
            return;
        };
        if cat.0 == "Trace" || dur.value.is_nan() {
            return;
        }
        let Some(ts) = self.bounded_ts(ev.ts) else {
            return;
        };
        self.out.stats.rows += 1;
        let end = ts + self.bounded_dur(dur.value);
        let name = ev.name.as_ref().map(|n| n.0.as_ref()).unwrap_or("");
        let args = ev.args.unwrap_or_default();
        let stream = args.stream.map(|s| s.as_int_or_minus_one()).unwrap_or(-1);
        let correlation = args
            .correlation
            .map(|c| c.as_int_or_minus_one())
            .unwrap_or(-1);
        let sync_name = name == "Context Sync" || name == "Event Sync";
        let row = Row {
            ts,
            end,
            name,
            stream,
            correlation,
            filter_gpu: (stream >= 0 && correlation >= 0) || sync_name,
        };
        self.out.min_ts = Some(self.out.min_ts.map_or(ts, |m| m.min(ts)));
        if first {
            self.out.first_row = Some(FirstRow {
                ts,
                filter_gpu: row.filter_gpu,
                correlation,
            });
        }
        let is_step = profiler_step(name).is_some();
        if is_step {
            self.out.step_names.insert(name.to_string());
        }
        if stream != -1 {
            self.gpu_row(&row, &cat.0, args);
        }
        if !row.filter_gpu {
            self.host_row(&row, &cat.0, is_step, ev.pid, ev.tid);
        }
    }

    /// The row's timestamp, or None (counted in `bad_timestamps`) past [`MAX_TS_US`].
    ///
    /// Bounded so that every difference and sum of times the analyses take in i64 stays far
    /// from overflow (a hostile ts near +-9e18 wrapped, turning counters negative).
    fn bounded_ts(&mut self, ts: Option<Lenient>) -> Option<f64> {
        match ts {
            Some(t) if t.value.is_finite() && t.value.abs() <= MAX_TS_US => Some(t.value),
            _ => {
                self.out.stats.bad_timestamps += 1;
                None
            }
        }
    }

    /// The row's duration: 0 when negative or not finite, at most [`MAX_DUR_US`] (both
    /// counted in `bad_durations`).
    fn bounded_dur(&mut self, d: f64) -> f64 {
        if !(d >= 0.0 && d.is_finite()) {
            self.out.stats.bad_durations += 1;
            0.0
        } else if d > MAX_DUR_US {
            self.out.stats.bad_durations += 1;
            MAX_DUR_US
        } else {
            d
        }
    }

    /// A row with a stream: a GPU row, with its NCCL and copy args if any.
    fn gpu_row(&mut self, row: &Row<'_>, cat: &str, args: RawArgs<'_>) {
        let kind = match cat {
            "kernel" | "Kernel" => GpuKind::Kernel,
            "gpu_memcpy" | "Memcpy" => GpuKind::Memcpy,
            "gpu_memset" | "Memset" => GpuKind::Memset,
            "cuda_sync" => GpuKind::Sync,
            _ => GpuKind::Other,
        };
        let aux_idx = self.aux(args);
        let name_idx = self.name_id(row.name);
        self.out.stats.gpu_rows += 1;
        self.out.gpu.push(GpuRow {
            ts: row.ts,
            end: row.end,
            stream: row.stream,
            correlation: row.correlation,
            name: name_idx,
            aux: aux_idx,
            kind,
            class: kernel_class(row.name),
            filter_gpu: row.filter_gpu,
        });
    }

    /// The index of a GPU row's [`Aux`] record (1-based), or 0 when it has none.
    fn aux(&mut self, args: RawArgs<'_>) -> u32 {
        let st = &mut self.out.stats;
        let aux = Aux {
            collective: args.collective.map(|c| c.0.into_owned()),
            in_nelems: clamped_count(args.in_nelems, st),
            out_nelems: clamped_count(args.out_nelems, st),
            group_size: args.group_size.and_then(|g| g.as_count()),
            dtype: args.dtype.map(|d| d.0.into_owned()),
            pg_name: args.pg_name.map(|p| p.0.into_owned()),
            bytes: args.bytes.and_then(|b| b.as_count()),
        };
        if aux == Aux::default() {
            0
        } else {
            self.out.aux.push(aux);
            u32::try_from(self.out.aux.len()).unwrap_or(u32::MAX)
        }
    }

    /// A host row (not kept as a GPU row): a launch when it has a correlation, and an
    /// annotation when it has no stream and is a step, a `user_annotation` or named like one.
    fn host_row(
        &mut self,
        row: &Row<'_>,
        cat: &str,
        is_step: bool,
        pid: Option<Id>,
        tid: Option<Id>,
    ) {
        if row.correlation != -1 {
            // A launch runs on the host: its pid is the training process's (GPU rows
            // carry the device ordinal there instead). Strings hash to negative ids.
            if self.out.host_pid.is_none() {
                self.out.host_pid = pid.and_then(|p| u32::try_from(p.0).ok()).filter(|p| *p > 0);
            }
            let name_idx = self.name_id(row.name);
            self.out.stats.cpu_launch_rows += 1;
            self.out.cpu_corr.push(CpuCorr {
                ts: row.ts,
                end: row.end,
                correlation: row.correlation,
                name: name_idx,
                no_stream: row.stream == -1,
            });
        } else {
            self.out.cpu_nocorr_min_ts =
                Some(self.out.cpu_nocorr_min_ts.map_or(row.ts, |m| m.min(row.ts)));
        }
        let name = row.name;
        if row.stream == -1
            && (is_step
                || cat == "user_annotation"
                || name.starts_with("Optimizer.")
                || name.starts_with("## ")
                // FSDP2's copy-in/copy-out custom ops (cpu_op rows).
                || name.starts_with("fsdp::"))
        {
            let name_idx = self.name_id(name);
            self.out.stats.annotations += 1;
            self.out.annotations.push(Annotation {
                ts: row.ts,
                end: row.end,
                name: name_idx,
                tid: tid.map_or(0, |t| t.0),
            });
        }
    }

    pub(super) fn finish(self) -> RankTrace {
        self.out
    }
}

/// What every record of one kept row shares.
struct Row<'e> {
    ts: f64,
    end: f64,
    name: &'e str,
    /// −1 without one.
    stream: i64,
    /// −1 without one.
    correlation: i64,
    /// HTA's GPU-row filter: a stream and a correlation, or a sync by name.
    filter_gpu: bool,
}

/// An NCCL element count, clamped to [`MAX_NELEMS`] (counted in `clamped_counts`).
fn clamped_count(v: Option<Lenient>, st: &mut crate::model::ParseStats) -> Option<u64> {
    v.and_then(|v| v.as_count()).map(|c| {
        if c > MAX_NELEMS {
            st.clamped_counts += 1;
            MAX_NELEMS
        } else {
            c
        }
    })
}
