//! Cost of reading the kernel log per line: splitting lines alone (the baseline), and splitting
//! plus parsing the record and classifying its message, over a realistic mix (mostly lines
//! that are not GPU messages, some XIDs, SXids and continuation lines). docs/performance.md
//! records the results.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use dgx_pixels_kmsg::parse::{classify, parse_record};

/// 1,000 lines of a busy GPU node's kernel log.
fn corpus() -> Vec<u8> {
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
    for i in 0..1000usize {
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
