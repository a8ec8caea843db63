//! Fixed-width bitsets over instance-type indexes (400 types fit in 7 words).

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub(crate) struct Bits(Vec<u64>);

impl Bits {
    pub(crate) fn empty(len: usize) -> Self {
        Bits(vec![0; len.div_ceil(64)])
    }

    #[cfg(test)]
    pub(crate) fn full(len: usize) -> Self {
        let mut b = Bits::empty(len);
        for i in 0..len {
            b.set(i);
        }
        b
    }

    pub(crate) fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    pub(crate) fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }

    pub(crate) fn and_with(&mut self, other: &Bits) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a &= *b;
        }
    }

    /// Copies `other` into `self` without reallocating.
    pub(crate) fn assign(&mut self, other: &Bits) {
        self.0.clone_from(&other.0);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    pub(crate) fn intersects(&self, other: &Bits) -> bool {
        self.0.iter().zip(&other.0).any(|(a, b)| a & b != 0)
    }

    pub(crate) fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub(crate) fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(wi, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let bit = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(wi * 64 + bit)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_iterate() {
        let mut b = Bits::empty(130);
        b.set(0);
        b.set(64);
        b.set(129);
        assert_eq!(b.ones().collect::<Vec<_>>(), vec![0, 64, 129]);
        assert_eq!(b.count(), 3);
        let mut f = Bits::full(130);
        f.and_with(&b);
        assert_eq!(f, b);
    }
}
