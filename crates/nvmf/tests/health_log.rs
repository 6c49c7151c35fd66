//! The SMART / health log page reports what hosts really moved: data units
//! (thousands of 512-byte units, rounded up) and command counts, per
//! controller.

mod common;

use common::*;

/// SMART log page id.
const SMART: u8 = 0x02;

fn u128_at(page: &[u8], at: usize) -> u128 {
    u128::from_le_bytes(page[at..at + 16].try_into().unwrap())
}

#[test]
fn smart_log_counts_data_units_and_commands() {
    let t = target();
    let mut c = controller(t.addr, 1, NO_DIGESTS);
    let before = c.get_log_page(SMART, 512, 0).unwrap();
    assert_eq!(u128_at(&before, 32), 0, "data units read");
    assert_eq!(u128_at(&before, 48), 0, "data units written");
    assert_eq!(before[3], 100, "available spare");

    // 10 writes of 64 KiB and 3 reads of 1 MiB.
    let q = c.io(0);
    for i in 0..10u64 {
        q.write(1, i * 16, &pattern(i, 16 * BLOCK), false).unwrap();
    }
    for i in 0..3u64 {
        q.read(1, i * 256, 256).unwrap();
    }
    let page = c.get_log_page(SMART, 512, 0).unwrap();
    // 640 KiB written = 1280 units of 512 bytes = 2 data units (rounded up);
    // 3 MiB read = 6144 units = 7 data units.
    assert_eq!(u128_at(&page, 48), 2, "data units written");
    assert_eq!(u128_at(&page, 32), 7, "data units read");
    assert_eq!(u128_at(&page, 64), 3, "host read commands");
    assert_eq!(u128_at(&page, 80), 10, "host write commands");
}
