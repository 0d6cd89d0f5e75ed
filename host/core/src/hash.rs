//! Stable hashes: the same value on every machine, process and version
//! (std's hashers are randomly keyed per process).

/// FNV-1a, 64 bits, of `bytes`.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// A stable draw from `bytes`: [`fnv1a`] with its bits mixed
/// (splitmix64's finaliser), for taking `% n` or a share of. FNV-1a's low
/// bits depend only on the inputs' low bits (its prime is odd), so
/// `fnv1a(..) % 4` of `"42/x/7"` and `"46/x/7"` agree: two seeds, one
/// draw, and successive numbers in a cycle.
pub fn draw(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut z = fnv1a(bytes);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_the_published_test_vectors() {
        assert_eq!(super::fnv1a(*b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a(*b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(super::fnv1a(*b"foobar"), 0x8594_4171_f739_67e8);
    }

    /// Draws `% 4` over job numbers, as `bench jobs` gives jobs queues:
    /// seeds a multiple of 4 apart give other draws (FNV-1a alone gives
    /// the same), each queue gets about a quarter, and the sequence is
    /// not FNV-1a's cycle.
    #[test]
    fn draws_modulo_a_power_of_two_depend_on_every_bit() {
        let queues =
            |seed: u32| -> Vec<u64> { (0..400).map(|i| super::draw(format!("{seed}/t/{i}").bytes()) % 4).collect() };
        let plain =
            |seed: u32| -> Vec<u64> { (0..400).map(|i| super::fnv1a(format!("{seed}/t/{i}").bytes()) % 4).collect() };
        assert_eq!(plain(42), plain(46), "the weakness this guards against");
        let (a, b) = (queues(42), queues(46));
        let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
        assert!((60..140).contains(&same), "two seeds' draws agree about a quarter of the time: {same}");
        for q in 0..4 {
            let n = a.iter().filter(|&&x| x == q).count();
            assert!((70..130).contains(&n), "queue {q}: {n} of 400");
        }
        // FNV-1a's draw repeats with period 4 over single digits; this one does not.
        assert_ne!(&a[0..4], &a[4..8]);
    }
}
