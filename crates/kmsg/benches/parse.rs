//! Cost of reading the kernel log per line: splitting lines alone (the baseline), splitting
//! plus parsing the record and classifying its message, and the whole source (a poll reading
//! 1,000 new records appended to a file, XIDs recorded in the ledger) against reading the same
//! bytes with `read(2)` alone, over a realistic mix (mostly lines that are not GPU messages,
//! some XIDs, SXids and continuation lines). docs/performance.md records the results.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use dgx_pixels_kmsg::parse::{classify, parse_record, PciAddress};
use dgx_pixels_kmsg::{GpuDirectory, KmsgOptions, KmsgSource, KnownGpu};
use dgx_pixels_metrics::{Source, XidLedger};

struct Gpus;

impl GpuDirectory for Gpus {
    fn gpus(&self) -> Option<Vec<KnownGpu>> {
        Some(
            ["0000:1b:00", "0000:4b:00"]
                .iter()
                .enumerate()
                .map(|(i, a)| KnownGpu {
                    pci: PciAddress::parse(a).unwrap_or(PciAddress {
                        domain: 0,
                        bus: 0,
                        device: 0,
                    }),
                    index: i as u32,
                    uuid: format!("GPU-{i}"),
                })
                .collect(),
        )
    }
}

/// 1,000 records of a busy GPU node's kernel log.
fn corpus() -> Vec<u8> {
    corpus_from(0)
}

/// 1,000 records with sequence numbers from `first`.
fn corpus_from(first: usize) -> Vec<u8> {
    let kinds = [
        "6,{},{},-;usb 1-1: new high-speed USB device number 2 using xhci_hcd",
        "4,{},{},-;EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
        "3,{},{},-;NVRM: Xid (PCI:0000:1b:00): 13, pid=1797828, name=pt_main_thread, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
        "6,{},{},-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
        "4,{},{},-;nvidia-nvswitch3: SXid (PCI:0000:c6:00.0): 20034, Fatal, Link 60 LTSSM Fault Up",
        "6,{},{},-;audit: type=1400 audit(1700000000.123:456): apparmor=\"STATUS\" operation=\"profile_load\"",
        "3,{},{},-;NVRM: Xid (PCI:0000:4b:00 GPU-I:05): 43, pid=77, name=train, Ch 00000008",
        "6,{},{},-;NVRM: GPU at PCI:0000:00:05: GPU-efbdfde9-5798-a6e7-4c46-12518fa15375",
    ];
    let mut out = Vec::new();
    for i in first..first + 1000 {
        let line = kinds[i % kinds.len()]
            .replacen("{}", &i.to_string(), 1)
            .replacen("{}", &(i * 1000 + 17).to_string(), 1);
        out.extend(line.as_bytes());
        out.push(b'\n');
        if i % 10 == 0 {
            out.extend(b" SUBSYSTEM=pci\n DEVICE=+pci:0000:1b:00.0\n");
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let text = corpus();
    let lines = text.split(|&b| b == b'\n').count() as u64;
    let mut g = c.benchmark_group("kmsg_1000_records");
    g.throughput(Throughput::Elements(lines));
    g.bench_function("split_lines_only", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for line in black_box(&text).split(|&b| b == b'\n') {
                n += line.len();
            }
            n
        })
    });
    g.bench_function("split_parse_classify", |b| {
        b.iter(|| {
            let mut events = 0usize;
            for line in black_box(&text).split(|&b| b == b'\n') {
                if line.first() == Some(&b' ') {
                    continue;
                }
                if let Ok(r) = parse_record(line) {
                    if let Ok(Some(_)) = classify(r.message) {
                        events += 1;
                    }
                }
            }
            events
        })
    });
    g.finish();

    // The whole source over a file: each iteration appends 1,000 records, then one poll reads
    // them (the reader, the parser, the GPU lookup, the ledger). The baseline reads the same
    // bytes from the same kind of file with read(2) and nothing else.
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("kmsg");
    let boot = dir.path().join("boot_id");
    std::fs::write(&log, "").expect("log");
    std::fs::write(&boot, "bench-boot\n").expect("boot id");
    let mut source = KmsgSource::new(
        KmsgOptions {
            path: log.clone(),
            state_directory: Some(dir.path().join("state")),
            boot_id_path: boot,
        },
        Arc::new(XidLedger::default()),
        Box::new(Gpus),
        Default::default(),
    );
    let _ = source.poll();
    let mut next = 0usize;
    let mut g = c.benchmark_group("kmsg_poll_1000_records");
    g.throughput(Throughput::Elements(lines));
    g.bench_function("read_only_baseline", |b| {
        let path = dir.path().join("plain");
        std::fs::write(&path, corpus()).expect("plain");
        let mut f = std::fs::File::open(&path).expect("open");
        let mut buf = vec![0u8; 16 << 10];
        b.iter(|| {
            f.seek(SeekFrom::Start(0)).expect("seek");
            let mut n = 0;
            while let Ok(k) = f.read(&mut buf) {
                if k == 0 {
                    break;
                }
                n += k;
            }
            n
        })
    });
    g.bench_function("source_poll", |b| {
        b.iter_batched(
            || {
                let text = corpus_from(next);
                next += 1000;
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&log)
                    .expect("append");
                // Keep the file small: truncated every 100 batches (the reader starts over,
                // and the sequence numbers go on growing).
                if next % 100_000 == 0 {
                    f.set_len(0).expect("truncate");
                }
                f.write_all(&text).expect("write");
            },
            |()| source.poll().map(|o| o.samples.len()),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
