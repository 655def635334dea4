use div_pricing::{Catalogue, Rate, SizeRequest};
use div_spec::{MemoryGib, Money, Sku};
use proptest::prelude::*;

fn sku() -> impl Strategy<Value = Sku> {
    prop::sample::select(Sku::ALL.to_vec())
}

fn request() -> impl Strategy<Value = SizeRequest> {
    (
        sku(),
        1u32..=42,
        prop::option::of(1u32..=64),
        prop::option::of(1u32..=336),
    )
        .prop_map(|(sku, gpus, cpu, memory)| SizeRequest {
            sku,
            gpus: if sku.is_gpu() { gpus } else { 1 },
            cpu,
            memory: memory.map(MemoryGib::new),
        })
}

proptest! {
    /// A container never gets less than it asked for, nor less than comes with its SKU.
    #[test]
    fn proptest_sizing_never_gives_less(req in request()) {
        let catalogue = Catalogue::standard();
        let sizing = catalogue.size(&req).expect("within the limits");
        let price = catalogue.price(req.sku).expect("standard SKU");
        let units = if req.sku.is_gpu() { req.gpus } else { 1 };
        prop_assert!(sizing.cores >= req.cpu.unwrap_or(0));
        prop_assert!(sizing.memory_gib >= req.memory.map_or(0, MemoryGib::gib));
        prop_assert!(sizing.cores >= units * price.cores_per_unit);
        prop_assert!(sizing.memory_gib >= units * price.memory_gib_per_unit);
        prop_assert!(sizing.cores <= catalogue.max_cores);
        prop_assert!(sizing.memory_gib <= catalogue.max_memory_gib);
    }

    /// More cores, more memory or more GPUs never cost less.
    #[test]
    fn proptest_cost_is_monotone(req in request(), more in 1u32..8) {
        let catalogue = Catalogue::standard();
        let base = catalogue.size(&req).expect("within the limits").rate;
        let cores = SizeRequest { cpu: Some(req.cpu.unwrap_or(1).saturating_add(more).min(64)), ..req };
        let memory = SizeRequest {
            memory: Some(MemoryGib::new(req.memory.map_or(1, MemoryGib::gib).saturating_add(more).min(336))),
            ..req
        };
        prop_assert!(catalogue.size(&cores).expect("within the limits").rate >= base);
        prop_assert!(catalogue.size(&memory).expect("within the limits").rate >= base);
        if req.sku.is_gpu() && req.gpus + more <= 42 {
            let gpus = SizeRequest { gpus: req.gpus + more, ..req };
            prop_assert!(catalogue.size(&gpus).expect("within the limits").rate > base);
        }
    }

    /// Up to the moment the meter says the ceiling is reached, the spend never exceeds it;
    /// at that moment the charge is the ceiling itself.
    #[test]
    fn proptest_spend_never_exceeds_ceiling_when_reached(cents_per_hour in 1i64..100_000, ceiling in 1i64..10_000_000) {
        let rate = Rate::from_cents_per_hour(cents_per_hour);
        let ceiling = Money::from_cents(ceiling);
        let at = rate.ceiling_reached_at(ceiling).expect("a positive rate reaches it");
        prop_assert!(rate.ceiling_reached(ceiling, at));
        prop_assert!(at == 0 || !rate.ceiling_reached(ceiling, at - 1));
        prop_assert!(at == 0 || rate.spend_after(at - 1) <= ceiling);
        prop_assert_eq!(rate.charge(at, Some(ceiling)), ceiling);
        prop_assert!(rate.ceiling_buys(ceiling) <= at);
        prop_assert!(rate.spend_after(rate.ceiling_buys(ceiling)) <= ceiling);
    }

    /// Spend grows with time.
    #[test]
    fn proptest_spend_is_monotone(cents_per_hour in 0i64..1_000_000, a in 0u64..10_000_000, b in 0u64..10_000_000) {
        let rate = Rate::from_cents_per_hour(cents_per_hour);
        let (lo, hi) = (a.min(b), a.max(b));
        prop_assert!(rate.spend_after(lo) <= rate.spend_after(hi));
    }
}
