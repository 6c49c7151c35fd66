//! The stable arithmetic under placement: hashes and the straw2 draw.
//!
//! Everything here is part of the on-disk contract: a PG's acting set is a
//! function of these values, so changing any constant or any step moves
//! data. The draw uses a logarithm of our own built from IEEE-754 `+ - * /`
//! only (no platform `ln`, no fused multiply-add), so the same inputs give
//! bit-identical draws on every platform with IEEE double arithmetic
//! (x86-64 with SSE2, aarch64, ...).

use pontoon_types::{PoolId, mix64};

/// Multiplier spreading consecutive integers over all 64 bits before mixing
/// (2^64 / golden ratio, as in splitmix64).
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
/// Salt separating pool hashes from any other use of `mix64`.
const POOL_SALT: u64 = 0x706F_6E74_6F6F_6E50; // "pontoonP"
/// Salt separating OSD hashes from any other use of `mix64`.
const OSD_SALT: u64 = 0x706F_6E74_6F6F_6E4F; // "pontoonO"

/// The seed of one PG: every candidate's draw for this PG derives from it.
/// Different pools give unrelated seeds for the same PG index.
pub(crate) fn pg_seed(pool: PoolId, index: u32) -> u64 {
    let pool_hash = mix64(u64::from(pool.0).wrapping_mul(GOLDEN) ^ POOL_SALT);
    mix64(pool_hash ^ u64::from(index).wrapping_mul(GOLDEN))
}

/// A per-OSD salt, precomputed once per OSD by the placement map.
pub(crate) fn osd_salt(id: u32) -> u64 {
    mix64(u64::from(id).wrapping_mul(GOLDEN) ^ OSD_SALT)
}

/// The uniform variate of (PG, candidate) as an integer `k` in `1..=2^53`,
/// standing for `u = k / 2^53` in `(0, 1]`.
#[inline]
pub(crate) fn unit_k(seed: u64, salt: u64) -> u64 {
    (mix64(seed ^ salt) >> 11) + 1
}

/// `2^-53`: scales a [`unit_k`] integer into `(0, 1]` exactly.
const TWO_POW_M53: f64 = 1.0 / 9_007_199_254_740_992.0;

/// An upper bound on `ln(k / 2^53)` that costs one conversion and one
/// subtraction: `ln(u) <= u - 1` for every `u > 0`.
#[inline]
pub(crate) fn ln_unit_upper_bound(k: u64) -> f64 {
    (k as f64) * TWO_POW_M53 - 1.0
}

// Minimax coefficients for ln(1+f) = f - f²/2 + s·(f²/2 + R(s²)),
// s = f / (2 + f), as published with the classic fdlibm logarithm. Written
// as bit patterns so no decimal parser is involved.
const LG1: f64 = f64::from_bits(0x3FE5_5555_5555_5593);
const LG2: f64 = f64::from_bits(0x3FD9_9999_9997_FA04);
const LG3: f64 = f64::from_bits(0x3FD2_4924_9422_9359);
const LG4: f64 = f64::from_bits(0x3FCC_71C5_1D8E_78AF);
const LG5: f64 = f64::from_bits(0x3FC7_4664_96CB_03DE);
const LG6: f64 = f64::from_bits(0x3FC3_9A09_D078_C69F);
const LG7: f64 = f64::from_bits(0x3FC2_F112_DF3E_5244);
/// ln 2 split so that `e * LN2_HI` is exact for any exponent we produce.
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
/// Mantissas above √2 are halved so that `f = m - 1` stays in [-0.29, 0.41].
const SQRT_2: f64 = std::f64::consts::SQRT_2;
/// Bit pattern of 1.0: exponent field only.
const ONE_BITS: u64 = 0x3FF0_0000_0000_0000;
/// The 52 explicit mantissa bits of a double.
const MANTISSA_MASK: u64 = (1 << 52) - 1;

/// `ln(k / 2^53)` for `k` in `1..=2^53`: a value in `[-36.74, 0]`, accurate
/// to about one ulp, computed with basic IEEE operations only.
#[inline]
pub(crate) fn ln_unit(k: u64) -> f64 {
    debug_assert!((1..=1 << 53).contains(&k), "k out of range: {k}");
    // k = m * 2^top with m in [1, 2); u = k * 2^-53 = m * 2^(top - 53).
    let lz = k.leading_zeros();
    let top = 63 - lz as i32;
    let mut exp = top - 53;
    // Shift the leading one to bit 63, keep the next 52 bits as mantissa.
    // k has at most 53 significant bits, so nothing is lost.
    let mut m = f64::from_bits((((k << lz) >> 11) & MANTISSA_MASK) | ONE_BITS);
    if m > SQRT_2 {
        m *= 0.5; // exact
        exp += 1;
    }
    let f = m - 1.0; // exact (Sterbenz)
    let half_f2 = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    let r = t1 + t2;
    let e = f64::from(exp);
    e * LN2_HI - ((half_f2 - (s * (half_f2 + r) + e * LN2_LO)) - f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_unit_matches_platform_ln_to_an_ulp_or_two() {
        let mut worst = 0.0f64;
        let mut check = |k: u64| {
            let ours = ln_unit(k);
            let reference = ((k as f64) * TWO_POW_M53).ln();
            if reference == 0.0 {
                assert_eq!(ours, 0.0);
                return;
            }
            let rel = ((ours - reference) / reference).abs();
            worst = worst.max(rel);
            assert!(rel < 1e-15, "k={k} ours={ours} ref={reference}");
            assert!(ours <= ln_unit_upper_bound(k), "bound violated at k={k}");
        };
        for k in 1..5000u64 {
            check(k);
        }
        for k in ((1u64 << 53) - 5000)..=(1u64 << 53) {
            check(k);
        }
        let mut x = 12345u64;
        for _ in 0..200_000 {
            x = mix64(x.wrapping_add(GOLDEN));
            check((x >> 11) + 1);
        }
        assert!(worst < 1e-15, "worst relative error {worst}");
    }

    #[test]
    fn ln_unit_values_are_pinned() {
        // Bit-exact: these values decide placement and must never change.
        assert_eq!(ln_unit(1 << 53), 0.0);
        assert_eq!(
            ln_unit(1 << 52).to_bits(),
            (-std::f64::consts::LN_2).to_bits()
        );
        assert_eq!(ln_unit(1).to_bits(), 0xC042_5E4F_7B27_37FA);
        assert_eq!(ln_unit(3 << 50).to_bits(), 0xBFEF_62F4_0794_A7B8);
        assert_eq!(
            ln_unit(123_456_789_012_345).to_bits(),
            0xC011_28D8_76D6_B8A1
        );
    }

    #[test]
    fn hashes_are_pinned() {
        assert_eq!(pg_seed(PoolId(1), 0), 0x32F4_F3A3_57C3_5E29);
        assert_eq!(osd_salt(0), 0x3CC6_7DE6_5329_194E);
        assert_eq!(
            unit_k(pg_seed(PoolId(1), 0), osd_salt(0)),
            6_342_268_127_683_503
        );
        assert_ne!(pg_seed(PoolId(1), 0), pg_seed(PoolId(2), 0));
        assert_ne!(pg_seed(PoolId(1), 0), pg_seed(PoolId(1), 1));
    }
}
