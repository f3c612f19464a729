//! The simulator's event queue: a calendar wheel of one-millisecond buckets for events due
//! within `WINDOW_MS`, and a heap for later ones. Pops come in exact (time, sequence) order,
//! as from a heap, at a fraction of the cost when most events are due soon (heartbeats,
//! deliveries): most pushes append to a bucket, most pops take from one.

use crate::time::Instant;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

const WINDOW_MS: u64 = 8_192;

/// One queued item: due time, sequence number (ties in push order), and the payload, kept
/// inline: buckets are read in time order, so payloads come in sequentially.
#[derive(Clone, Debug)]
pub struct Entry<T> {
    pub at: Instant,
    pub seq: u64,
    pub payload: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

pub struct EventQueue<T> {
    /// Bucket `t % WINDOW_MS` holds the entries due at `t`, for `t` in `[base, base + WINDOW_MS)`,
    /// each bucket in sequence order. Every entry before `base` has been popped.
    wheel: Vec<VecDeque<Entry<T>>>,
    base: u64,
    in_wheel: usize,
    /// Entries due at `base + WINDOW_MS` or later.
    later: BinaryHeap<Reverse<Entry<T>>>,
    /// The earliest key, once found (pushes keep it right; pops forget it).
    next: Option<(Instant, u64)>,
    /// One bit per bucket, set while it holds entries: the next entry is found by scanning
    /// 128 words, not 8,192 buckets (a sparse run would walk every empty millisecond).
    occupied: [u64; (WINDOW_MS / 64) as usize],
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        EventQueue {
            wheel: (0..WINDOW_MS).map(|_| VecDeque::new()).collect(),
            base: 0,
            in_wheel: 0,
            later: BinaryHeap::new(),
            next: None,
            occupied: [0; (WINDOW_MS / 64) as usize],
        }
    }
}

impl<T> EventQueue<T> {
    pub fn push(&mut self, entry: Entry<T>) {
        let at = entry.at.as_ms();
        assert!(at >= self.base, "event scheduled in the past ({at} < {})", self.base);
        if self.next.is_some_and(|next| (entry.at, entry.seq) < next) {
            self.next = Some((entry.at, entry.seq));
        }
        if at < self.base + WINDOW_MS {
            self.insert_in_wheel(entry);
        } else {
            self.later.push(Reverse(entry));
        }
    }

    /// Keeps each bucket in sequence order (an entry arriving from `later` may be older).
    fn insert_in_wheel(&mut self, entry: Entry<T>) {
        let index = (entry.at.as_ms() % WINDOW_MS) as usize;
        self.occupied[index / 64] |= 1 << (index % 64);
        let bucket = &mut self.wheel[index];
        if bucket.back().is_none_or(|last| last.seq < entry.seq) {
            bucket.push_back(entry);
        } else {
            let at = bucket.partition_point(|e| e.seq < entry.seq);
            bucket.insert(at, entry);
        }
        self.in_wheel += 1;
    }

    /// (time, sequence) of the earliest entry. Looking changes nothing but a cache.
    pub fn peek_key(&mut self) -> Option<(Instant, u64)> {
        if self.next.is_none() {
            self.next = self.find_next();
        }
        self.next
    }

    fn find_next(&self) -> Option<(Instant, u64)> {
        if self.in_wheel > 0 {
            let index = self.next_occupied((self.base % WINDOW_MS) as usize);
            let e = self.wheel[index].front().expect("an occupied bucket has entries");
            return Some((e.at, e.seq));
        }
        self.later.peek().map(|Reverse(e)| (e.at, e.seq))
    }

    /// The first occupied bucket at or after `start`, wrapping around the wheel.
    fn next_occupied(&self, start: usize) -> usize {
        let words = self.occupied.len();
        let (first_word, first_bit) = (start / 64, start % 64);
        let head = self.occupied[first_word] & (!0u64 << first_bit);
        if head != 0 {
            return first_word * 64 + head.trailing_zeros() as usize;
        }
        for step in 1..=words {
            let w = (first_word + step) % words;
            let bits = if w == first_word { self.occupied[w] & !(!0u64 << first_bit) } else { self.occupied[w] };
            if bits != 0 {
                return w * 64 + bits.trailing_zeros() as usize;
            }
        }
        unreachable!("in_wheel counts a queued entry")
    }

    /// Time has reached `now`: nothing earlier is queued, so the window may start there.
    pub fn advance_to(&mut self, now: Instant) {
        if now.as_ms() > self.base {
            debug_assert!(self.peek_key().is_none_or(|(t, _)| t >= now), "advancing past a queued entry");
            self.slide_to(now.as_ms());
        }
    }

    pub fn pop(&mut self) -> Option<Entry<T>> {
        let (at, _) = self.peek_key()?;
        self.next = None;
        self.slide_to(at.as_ms().max(self.base));
        if self.in_wheel > 0 {
            let index = (self.base % WINDOW_MS) as usize;
            let bucket = &mut self.wheel[index];
            let entry = bucket.pop_front().expect("the earliest entry is here");
            if bucket.is_empty() {
                self.occupied[index / 64] &= !(1 << (index % 64));
            }
            self.in_wheel -= 1;
            return Some(entry);
        }
        self.later.pop().map(|Reverse(e)| e)
    }

    /// Moves the window's start to `base`, pulling in `later` entries that now fall inside.
    fn slide_to(&mut self, base: u64) {
        self.base = base;
        while let Some(Reverse(e)) = self.later.peek() {
            if e.at.as_ms() >= self.base + WINDOW_MS {
                break;
            }
            let Reverse(e) = self.later.pop().expect("peeked");
            self.insert_in_wheel(e);
        }
    }
}

/// Timers that all repeat with one period (heartbeats): a FIFO stays sorted by itself when
/// each fired timer is pushed back one period later, so push and pop touch only the two ends
/// of one ring buffer. Inserting a first timer (a boot) keeps the order by searching.
#[derive(Default)]
pub struct PeriodicTimers {
    due: VecDeque<(Instant, u64, u32)>,
}

impl PeriodicTimers {
    pub fn insert(&mut self, at: Instant, seq: u64, owner: u32) {
        let pos = self.due.partition_point(|(t, s, _)| (*t, *s) < (at, seq));
        self.due.insert(pos, (at, seq, owner));
    }

    /// A timer that fired goes back one period later: at the end, unless a boot inserted one
    /// later still.
    pub fn insert_last(&mut self, at: Instant, seq: u64, owner: u32) {
        match self.due.back() {
            Some(&(t, s, _)) if (t, s) > (at, seq) => self.insert(at, seq, owner),
            _ => self.due.push_back((at, seq, owner)),
        }
    }

    pub fn peek_key(&self) -> Option<(Instant, u64)> {
        self.due.front().map(|(t, s, _)| (*t, *s))
    }

    pub fn pop(&mut self) -> Option<(Instant, u64, u32)> {
        self.due.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Against a plain heap: same entries, same order, whatever the mix of near and far.
    #[test]
    fn pops_in_the_same_order_as_a_heap() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut wheel: EventQueue<u32> = EventQueue::default();
        let mut heap = BinaryHeap::new();
        let (mut now, mut seq) = (0u64, 0u64);
        for round in 0..200_000u32 {
            if rng.next_u64() % 3 != 0 || heap.is_empty() {
                seq += 1;
                let ahead = match rng.next_u64() % 4 {
                    0 => 0,
                    1 => rng.next_u64() % 10,
                    2 => rng.next_u64() % 2_000,
                    _ => rng.next_u64() % 50_000,
                };
                let entry = Entry { at: Instant::from_ms(now + ahead), seq, payload: round };
                wheel.push(entry.clone());
                heap.push(Reverse(entry));
            } else {
                let Reverse(expected) = heap.pop().unwrap();
                assert_eq!(wheel.peek_key(), Some((expected.at, expected.seq)));
                if round % 7 == 0 {
                    wheel.advance_to(expected.at);
                }
                assert_eq!(
                    wheel.pop().map(|e| (e.at, e.seq, e.payload)),
                    Some((expected.at, expected.seq, expected.payload))
                );
                now = expected.at.as_ms();
            }
        }
        while let Some(Reverse(expected)) = heap.pop() {
            assert_eq!(wheel.pop().map(|e| e.payload), Some(expected.payload));
        }
        assert!(wheel.pop().is_none());
    }
}
