//! New NodeClaims ordered by pod count, fewest first, with O(1) updates.
//!
//! Claims sit in one array grouped in buckets by pod count; adding a pod moves
//! a claim to the front of the next bucket by one swap.

#[derive(Debug, Clone, Default)]
pub(crate) struct ClaimOrder {
    order: Vec<u32>,
    pos: Vec<u32>,
    count: Vec<u32>,
    /// `start[k]`: first position of the bucket holding claims with `k` pods.
    /// Has `max count + 2` entries; the last is `order.len()`.
    start: Vec<u32>,
}

impl ClaimOrder {
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// The claim at position `i`, fewest pods first.
    pub(crate) fn at(&self, i: usize) -> u32 {
        self.order[i]
    }

    /// Where claim `c` stands in the order.
    pub(crate) fn position(&self, c: u32) -> u32 {
        self.pos[c as usize]
    }

    /// Adds claim `c` (ids are dense, in creation order) holding one pod.
    pub(crate) fn push(&mut self, c: u32) {
        debug_assert_eq!(c as usize, self.pos.len());
        if self.start.len() < 3 {
            self.start = vec![0, 0, 0];
        }
        self.order.push(c);
        self.pos.push(self.order.len() as u32 - 1);
        self.count.push(1);
        // Open a slot at the end of bucket 1 by rotating every later bucket.
        let mut free = self.order.len() as u32 - 1;
        for k in (2..self.start.len() - 1).rev() {
            let first = self.start[k];
            if first < free {
                self.swap(first, free);
            }
            free = first;
            self.start[k] += 1;
        }
        let last = self.start.len() - 1;
        self.start[last] = self.order.len() as u32;
        if free != self.pos[c as usize] {
            self.swap(free, self.pos[c as usize]);
        }
    }

    fn swap(&mut self, i: u32, j: u32) {
        self.order.swap(i as usize, j as usize);
        self.pos[self.order[i as usize] as usize] = i;
        self.pos[self.order[j as usize] as usize] = j;
    }

    /// Claim `c` got one more pod.
    pub(crate) fn increment(&mut self, c: u32) {
        let k = self.count[c as usize] as usize;
        if k + 2 >= self.start.len() {
            let n = self.order.len() as u32;
            self.start.push(n);
        }
        // Last position of bucket k; swap c there, then shrink bucket k.
        let last = self.start[k + 1] - 1;
        self.swap(self.pos[c as usize], last);
        self.start[k + 1] -= 1;
        self.count[c as usize] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(o: &ClaimOrder) -> Vec<u32> {
        (0..o.len()).map(|i| o.count[o.at(i) as usize]).collect()
    }

    #[test]
    fn stays_sorted_by_count() {
        let mut o = ClaimOrder::default();
        o.push(0);
        o.increment(0);
        o.increment(0);
        o.push(1);
        o.push(2);
        o.increment(2);
        o.push(3);
        let c = counts(&o);
        assert!(c.windows(2).all(|w| w[0] <= w[1]), "{c:?}");
        assert_eq!(c, vec![1, 1, 2, 3]);
        for i in 0..o.len() {
            assert_eq!(o.pos[o.at(i) as usize] as usize, i);
        }
    }
}
