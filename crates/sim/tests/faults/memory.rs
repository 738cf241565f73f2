//! Memory errors and a GPU reset: ECC counters, row remapping and page retirement.

use super::{gpu, hopper, ok};

#[test]
fn a_reset_starts_the_volatile_ecc_counters_over_and_applies_a_pending_remap() {
    let mut n = hopper(
        "[[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 10\ncorrected = 3\nuncorrected = 1\n\
         [[faults]]\nkind = \"reset\"\ngpu = 0\nat_s = 20\n\
         [[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 30\ncorrected = 1\n",
    );
    let before = ok(&mut n, 0, 19.9);
    let ecc = before.ecc.unwrap();
    assert_eq!(
        (ecc.volatile_corrected, ecc.volatile_uncorrected),
        (3.0, 1.0)
    );
    let rows = before.remapped_rows.unwrap();
    assert!(rows.pending && !rows.failure);
    assert_eq!(rows.uncorrectable, 1.0);

    let after = ok(&mut n, 0, 20.0);
    let ecc = after.ecc.unwrap();
    assert_eq!(
        (ecc.volatile_corrected, ecc.volatile_uncorrected),
        (0.0, 0.0)
    );
    assert_eq!(
        (ecc.aggregate_corrected, ecc.aggregate_uncorrected),
        (3.0, 1.0)
    );
    let rows = after.remapped_rows.unwrap();
    assert!(!rows.pending, "the reset applied the remap");
    assert_eq!(rows.uncorrectable, 1.0, "the remapped row stays remapped");
    // Energy is counted since the driver loaded: a reset does not start it over.
    assert!(after.energy_joules > before.energy_joules);

    let later = ok(&mut n, 0, 30.0).ecc.unwrap();
    assert_eq!(
        (later.volatile_corrected, later.aggregate_corrected),
        (1.0, 4.0)
    );
}

#[test]
fn a_row_retired_after_corrected_errors_is_a_pending_correctable_remap() {
    let mut n = hopper(
        "[[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 10\ncorrected = 2\nrows_retired = 1\n\
         [[faults]]\nkind = \"reset\"\ngpu = 0\nat_s = 20\n",
    );
    let rows = ok(&mut n, 0, 15.0).remapped_rows.unwrap();
    assert_eq!((rows.correctable, rows.uncorrectable), (1.0, 0.0));
    assert!(rows.pending && !rows.failure);
    assert_eq!(ok(&mut n, 0, 15.0).ecc.unwrap().volatile_uncorrected, 0.0);
    let rows = ok(&mut n, 0, 20.0).remapped_rows.unwrap();
    assert_eq!(rows.correctable, 1.0);
    assert!(!rows.pending);
}

#[test]
fn a_failed_remap_outlasts_a_reset() {
    let mut n = hopper(
        "[[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 10\nuncorrected = 513\n\
         [[faults]]\nkind = \"reset\"\ngpu = 0\nat_s = 20\n",
    );
    let rows = ok(&mut n, 0, 15.0).remapped_rows.unwrap();
    assert!(rows.failure && rows.pending);
    assert_eq!(rows.uncorrectable, 512.0);
    let after = ok(&mut n, 0, 20.0);
    let rows = after.remapped_rows.unwrap();
    assert!(rows.failure && !rows.pending);
    assert_eq!(after.ecc.unwrap().volatile_uncorrected, 0.0);
}

#[test]
fn parts_before_ampere_retire_a_page_per_uncorrected_error_pending_until_reset() {
    let mut n = gpu(
        "Volta",
        "[[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 10\nuncorrected = 1\n\
         [[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 12\ncorrected = 4\nrows_retired = 2\n\
         [[faults]]\nkind = \"reset\"\ngpu = 0\nat_s = 20\n\
         [[faults]]\nkind = \"ecc\"\ngpu = 0\nat_s = 30\nuncorrected = 100\n",
    );
    let r = ok(&mut n, 0, 5.0);
    assert_eq!(r.remapped_rows, None);
    assert_eq!(r.retired_pages, Some(Default::default()));
    let pages = ok(&mut n, 0, 15.0).retired_pages.unwrap();
    assert_eq!((pages.double_bit_ecc, pages.single_bit_ecc), (1.0, 2.0));
    assert!(pages.pending);
    let pages = ok(&mut n, 0, 20.0).retired_pages.unwrap();
    assert_eq!((pages.double_bit_ecc, pages.single_bit_ecc), (1.0, 2.0));
    assert!(!pages.pending, "the reset retired them");
    // A part retires at most 64 pages.
    let pages = ok(&mut n, 0, 30.0).retired_pages.unwrap();
    assert_eq!(pages.double_bit_ecc + pages.single_bit_ecc, 64.0);
    assert!(pages.pending);
    // Volta links are Gen3.
    assert_eq!(n.gpu(0).unwrap().pcie_link.map(|l| l.generation), Some(3));
}
