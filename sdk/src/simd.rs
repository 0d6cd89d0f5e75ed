//! Small vector helpers for per-node arithmetic. On `wasm32` with
//! `simd128` they use Wasm SIMD; elsewhere plain code that the native
//! compiler vectorises. Both sum in the same order, so a plugin scores the
//! same natively and in the component.

/// `a · b` over four lanes, summed as `(a0·b0 + a1·b1) + (a2·b2 + a3·b3)`.
#[inline(always)]
pub fn dot4(a: &[f32; 4], b: &[f32; 4]) -> f32 {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        use core::arch::wasm32::*;
        let p = f32x4_mul(f32x4(a[0], a[1], a[2], a[3]), f32x4(b[0], b[1], b[2], b[3]));
        (f32x4_extract_lane::<0>(p) + f32x4_extract_lane::<1>(p))
            + (f32x4_extract_lane::<2>(p) + f32x4_extract_lane::<3>(p))
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    {
        (a[0] * b[0] + a[1] * b[1]) + (a[2] * b[2] + a[3] * b[3])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dot4_sums_in_the_documented_order() {
        assert_eq!(super::dot4(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0]), 70.0);
    }
}
