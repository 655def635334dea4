use div_spec::MemoryGib;
use insta::assert_snapshot;

use crate::refused;

fn check(typed: &str, gib: u32) {
    let memory: MemoryGib = typed.parse().unwrap_or_else(|e| panic!("`{typed}`: {e}"));
    assert_eq!(memory.gib(), gib, "`{typed}`");
}

#[test]
fn parses_whole_gib() {
    check("64", 64);
    check("64G", 64);
    check("64GiB", 64);
    check("64g", 64);
    check("64gib", 64);
    check("64GIB", 64);
    check("336G", 336);
    check("1", 1);
}

#[test]
fn displays_as_g_and_round_trips() {
    assert_eq!(MemoryGib::new(64).to_string(), "64G");
    assert_eq!("64G".parse::<MemoryGib>().unwrap().to_string(), "64G");
}

#[test]
fn refusals() {
    assert_snapshot!(refused::<MemoryGib>("512M"), @"`512M` is not a whole number of GiB; memory is given in whole GiB, like `64G`, and is not rounded up");
    assert_snapshot!(refused::<MemoryGib>("64GB"), @"`64GB` is 64×10^9 bytes, not a whole number of GiB; write `64G` for 64 GiB");
    assert_snapshot!(refused::<MemoryGib>("1.5G"), @"`1.5G` is not a whole number of GiB; memory is given in whole GiB, like `64G`");
    assert_snapshot!(refused::<MemoryGib>("0"), @"`0` is no memory at all; write whole GiB like `64G`");
    assert_snapshot!(refused::<MemoryGib>("0G"), @"`0G` is no memory at all; write whole GiB like `64G`");
    assert_snapshot!(refused::<MemoryGib>(""), @"the memory size is empty; write whole GiB like `64G`");
    assert_snapshot!(refused::<MemoryGib>("1T"), @"`1T` is in a unit larger than GiB; write it in GiB, like `1024G`");
    assert_snapshot!(refused::<MemoryGib>("64 G"), @"`64 G` is not a memory size; write whole GiB like `64`, `64G` or `64GiB`");
    assert_snapshot!(refused::<MemoryGib>("lots"), @"`lots` is not a memory size; write whole GiB like `64`, `64G` or `64GiB`");
    assert_snapshot!(refused::<MemoryGib>("-4G"), @"`-4G` is not a memory size; write whole GiB like `64`, `64G` or `64GiB`");
    assert_snapshot!(refused::<MemoryGib>("99999999999G"), @"`99999999999G` is too large a memory size");
}
