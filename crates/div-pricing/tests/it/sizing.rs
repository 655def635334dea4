use div_pricing::{Catalogue, SizeRequest, Sizing, SizingError, header_line};
use div_spec::{MemoryGib, Money, Sku};
use insta::assert_snapshot;

fn request(sku: Sku, gpus: u32, cpu: Option<u32>, memory: Option<u32>) -> SizeRequest {
    SizeRequest {
        sku,
        gpus,
        cpu,
        memory: memory.map(MemoryGib::new),
    }
}

fn size(req: SizeRequest) -> Result<Sizing, SizingError> {
    Catalogue::standard().size(&req)
}

/// The request gets `cores` and `gib`, at `rate`, labelled `label`.
fn check(req: SizeRequest, cores: u32, gib: u32, rate: &str, label: &str) {
    let sizing = size(req).expect("the request is sized");
    assert_eq!(
        (
            sizing.cores,
            sizing.memory_gib,
            sizing.rate.to_string(),
            sizing.label()
        ),
        (cores, gib, rate.to_owned(), label.to_owned()),
        "{req:?}"
    );
}

fn refused(req: SizeRequest) -> String {
    size(req).expect_err("the request is refused").to_string()
}

#[test]
fn spec_examples() {
    use Sku::*;
    check(request(H100, 1, None, None), 1, 8, "$4.95/h", "H100");
    check(request(H100, 8, None, None), 8, 64, "$39.60/h", "8× H100");
    check(
        request(H100, 1, Some(8), Some(64)),
        8,
        64,
        "$7.82/h",
        "H100 · 8 cores · 64 GiB",
    );
    check(request(H100, 4, None, None), 4, 32, "$19.80/h", "4× H100");
    check(request(B300, 1, None, None), 1, 8, "$8.95/h", "B300");
    check(request(H200, 1, None, None), 1, 8, "$5.95/h", "H200");
    check(request(Cpu, 1, None, None), 1, 2, "$0.30/h", "CPU");
    check(
        request(H200, 32, None, None),
        32,
        256,
        "$190.40/h",
        "32× H200",
    );
}

#[test]
fn what_a_container_gets() {
    use Sku::*;
    // Asking for less than comes with the SKU costs the same as asking for nothing.
    check(
        request(H100, 4, Some(2), Some(16)),
        4,
        32,
        "$19.80/h",
        "4× H100",
    );
    check(request(H100, 1, Some(1), Some(8)), 1, 8, "$4.95/h", "H100");
    check(
        request(H100, 1, Some(8), None),
        8,
        8,
        "$6.14/h",
        "H100 · 8 cores",
    );
    check(
        request(H100, 1, None, Some(64)),
        1,
        64,
        "$6.63/h",
        "H100 · 64 GiB",
    );
    check(
        request(Cpu, 1, Some(8), Some(64)),
        8,
        64,
        "$3.35/h",
        "CPU · 8 cores · 64 GiB",
    );
    check(request(Cpu, 0, None, None), 1, 2, "$0.30/h", "CPU");
    check(
        request(Cpu, 1, Some(64), Some(336)),
        64,
        336,
        "$21.03/h",
        "CPU · 64 cores · 336 GiB",
    );
    check(
        request(H100, 42, None, None),
        42,
        336,
        "$207.90/h",
        "42× H100",
    );
    check(
        request(H100, 8, Some(16), None),
        16,
        64,
        "$40.96/h",
        "8× H100 · 16 cores",
    );
    let cpu = size(request(Cpu, 1, None, None)).unwrap();
    assert_eq!(
        (cpu.gpus, cpu.included_cores, cpu.included_memory_gib),
        (0, 1, 2)
    );
}

#[test]
fn the_catalogue() {
    let catalogue = Catalogue::standard();
    let table: Vec<String> = catalogue
        .skus
        .iter()
        .map(|p| {
            format!(
                "{} {} {} {}",
                p.sku, p.cents_per_hour, p.cores_per_unit, p.memory_gib_per_unit
            )
        })
        .collect();
    assert_eq!(
        table,
        ["b300 895 1 8", "h200 595 1 8", "h100 495 1 8", "cpu 30 1 2"]
    );
    assert_eq!(
        (
            catalogue.extra_core_cents_per_hour,
            catalogue.extra_gib_cents_per_hour,
            catalogue.max_cores,
            catalogue.max_memory_gib,
            catalogue.max_run_seconds
        ),
        (17, 3, 64, 336, 86_400)
    );
    assert_eq!(
        catalogue.price(Sku::H100).map(|p| p.cents_per_hour),
        Some(495)
    );
}

#[test]
fn header_lines() {
    let h100 = size(request(Sku::H100, 1, None, None)).unwrap();
    let big = size(request(Sku::H100, 1, Some(8), Some(64))).unwrap();
    let eight = size(request(Sku::H100, 8, None, None)).unwrap();
    let line = |sizing: &Sizing, ceiling: Option<i64>| {
        header_line("run-k4t9", sizing, ceiling.map(Money::from_cents))
    };
    assert_eq!(
        line(&h100, Some(500)),
        "run-k4t9  H100  $4.95/h  $5.00 buys 1h 0m"
    );
    assert_eq!(
        line(&big, None),
        "run-k4t9  H100 · 8 cores · 64 GiB  $7.82/h  no ceiling"
    );
    assert_eq!(line(&h100, None), "run-k4t9  H100  $4.95/h  no ceiling");
    assert_eq!(
        line(&h100, Some(333)),
        "run-k4t9  H100  $4.95/h  $3.33 buys 40m 21s"
    );
    assert_eq!(
        line(&eight, Some(1000)),
        "run-k4t9  8× H100  $39.60/h  $10.00 buys 15m 9s"
    );
    assert_eq!(
        line(&h100, Some(1)),
        "run-k4t9  H100  $4.95/h  $0.01 buys 7s"
    );
    assert_eq!(
        line(&h100, Some(50_000)),
        "run-k4t9  H100  $4.95/h  $500.00 buys 101h 0m; runs stop at 24h"
    );
}

#[test]
fn refusals() {
    use Sku::*;
    assert_snapshot!(refused(request(H100, 0, None, None)), @"`--gpus 0` asks for no GPUs; `--gpu h100` takes at least 1, and `--gpu cpu` runs without one");
    assert_snapshot!(refused(request(Cpu, 2, None, None)), @"`--gpus 2` counts GPUs, and the cpu SKU has none; ask for cores with `--cpu 2`");
    assert_snapshot!(refused(request(H100, 1, Some(0), None)), @"`--cpu 0` asks for no cores; a container has at least 1");
    assert_snapshot!(refused(request(H100, 1, Some(65), None)), @"`--cpu 65` is more than one container takes; the most is 64 cores");
    assert_snapshot!(refused(request(H100, 1, None, Some(337))), @"`--memory 337G` is more than one container takes; the most is 336 GiB");
    assert_snapshot!(refused(request(H100, 64, None, None)), @"`--gpus 64` of h100 comes with 64 cores and 512 GiB; the most one container takes is 64 cores and 336 GiB, so at most `--gpus 42`");
    assert_snapshot!(refused(request(H100, u32::MAX, None, None)), @"`--gpus 4294967295` of h100 comes with 4294967295 cores and 34359738360 GiB; the most one container takes is 64 cores and 336 GiB, so at most `--gpus 42`");
    let mut partial = Catalogue::standard();
    partial.skus.retain(|p| p.sku != B300);
    let not_offered = partial
        .size(&request(B300, 1, None, None))
        .unwrap_err()
        .to_string();
    assert_snapshot!(not_offered, @"unknown SKU `b300`; expected one of h200, h100, cpu");
}
