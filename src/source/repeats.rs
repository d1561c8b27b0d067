//! Which audit events were seen already, to process an event logged more
//! than once (a file given twice, rotated logs that overlap, an
//! `audit.log*` glob) once: `replay` and the offline commands read several
//! files merged by time through it.

use std::time::{Duration, SystemTime};

/// How long, in log time, a fed event's key is kept to recognise its
/// copies: the files are merged by time, so a copy (a file given twice,
/// overlapping rotations) comes where its original does, give or take a
/// file's own disorder.
const REPEAT_HORIZON: Duration = Duration::from_secs(600);
/// Keys kept at most (about 24 bytes each): past that the oldest go first.
const MAX_REPEAT_KEYS: usize = 1 << 21;

/// The events fed already, by
/// [`AuditEvent::once_key`](crate::flow::AuditEvent::once_key), for
/// [`REPEAT_HORIZON`] of log time and at most [`MAX_REPEAT_KEYS`]: bounded
/// whatever the length of the logs, the keys let go counted.
pub(crate) struct Repeats {
    keys: crate::model::FastHashSet<u64>,
    /// Keys by the time of their event, oldest first.
    order: std::collections::VecDeque<(SystemTime, u64)>,
    newest: SystemTime,
    horizon: Duration,
    max: usize,
    forgotten: u64,
}

impl Repeats {
    pub(crate) fn new(horizon: Duration, max: usize) -> Self {
        Repeats {
            keys: Default::default(),
            order: Default::default(),
            newest: SystemTime::UNIX_EPOCH,
            horizon,
            max: max.max(1),
            forgotten: 0,
        }
    }

    /// True the first time `key` (an event's `once_key`, the event at
    /// `at`) is given, within the horizon.
    pub(crate) fn first_time(&mut self, key: u64, at: SystemTime) -> bool {
        self.newest = self.newest.max(at);
        let horizon = self.newest.checked_sub(self.horizon);
        while let Some(&(t, old)) = self.order.front() {
            let expired = horizon.is_some_and(|h| t < h);
            if !expired && self.order.len() < self.max {
                break;
            }
            self.order.pop_front();
            self.keys.remove(&old);
            // Past the horizon a copy is not expected; forced out, it
            // would be replayed again.
            if !expired {
                self.forgotten += 1;
            }
        }
        if !self.keys.insert(key) {
            return false;
        }
        self.order.push_back((at, key));
        true
    }

    /// Keys let go before their horizon (at the cap).
    pub(crate) fn forgotten(&self) -> u64 {
        self.forgotten
    }

    /// Says on stderr (a warning) how many keys were let go at the cap.
    pub(crate) fn warn_if_forgotten(&self) {
        if self.forgotten > 0 {
            tracing::warn!(
                forgotten = self.forgotten,
                kept = self.max,
                "more audit events within {} of log time than the repeat filter keeps: the oldest were let go, and a copy of one of them logged later (a file given twice) was processed again",
                humantime::format_duration(self.horizon)
            );
        }
    }
}

impl Default for Repeats {
    fn default() -> Self {
        Self::new(REPEAT_HORIZON, MAX_REPEAT_KEYS)
    }
}

#[cfg(test)]
mod tests {
    use super::Repeats;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_copy_within_the_horizon_is_a_repeat_and_keys_past_it_are_let_go_uncounted() {
        let mut r = Repeats::new(Duration::from_secs(60), 1000);
        assert!(r.first_time(1, at(100)));
        assert!(!r.first_time(1, at(100)), "a copy");
        assert!(r.first_time(2, at(150)));
        assert!(!r.first_time(1, at(155)), "55 s later: still known");
        // Log time moves past the first key's horizon: it is let go, as
        // expected (no copy comes that late), and not counted.
        assert!(r.first_time(3, at(161)));
        assert_eq!(r.keys.len(), 2);
        assert_eq!(r.forgotten, 0);
    }

    #[test]
    fn at_its_cap_the_oldest_key_goes_and_is_counted() {
        let mut r = Repeats::new(Duration::from_secs(600), 3);
        for k in 1..=5 {
            assert!(r.first_time(k, at(100)));
        }
        assert_eq!(r.keys.len(), 3);
        assert_eq!(r.forgotten, 2);
        // Forgotten: a copy of the first passes again.
        assert!(r.first_time(1, at(100)));
        assert!(!r.first_time(5, at(100)));
    }
}
