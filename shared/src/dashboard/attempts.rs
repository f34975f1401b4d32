//! How many wrong tokens sign-in takes: at most [`WRONG_TOKENS`] in any [`WINDOW`], counted
//! across every connection. An attempt takes a place before its token is compared, so a burst
//! sent at once cannot all be compared before the first is counted; a right token gives its
//! place back. Past the limit an attempt is answered 429 without its token being looked at,
//! the right one included: guessing costs the operator a minute's wait, not the token.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Wrong tokens taken in one window.
pub const WRONG_TOKENS: usize = 10;
/// The window the limit counts over (a sliding one).
pub const WINDOW: Duration = Duration::from_secs(60);

/// When each counted attempt of the last [`WINDOW`] began, shared by every connection.
#[derive(Default)]
pub struct Attempts {
    taken: Mutex<Vec<Instant>>,
}

/// An attempt's place in the count; kept (the attempt counts) unless given back.
#[must_use]
pub struct Place(Instant);

impl Attempts {
    /// A place for an attempt starting `now`, or how long until one frees up.
    pub fn take(&self, now: Instant) -> Result<Place, Duration> {
        let mut taken = self.taken.lock().expect("attempts lock");
        taken.retain(|at| now.saturating_duration_since(*at) < WINDOW);
        if taken.len() >= WRONG_TOKENS {
            let oldest = taken.iter().min().copied().unwrap_or(now);
            return Err(WINDOW.saturating_sub(now.saturating_duration_since(oldest)));
        }
        taken.push(now);
        Ok(Place(now))
    }

    /// Un-counts the attempt: its token was right.
    pub fn give_back(&self, place: Place) {
        let mut taken = self.taken.lock().expect("attempts lock");
        if let Some(at) = taken.iter().rposition(|at| *at == place.0) {
            taken.swap_remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_counts_places_taken_not_answers_given() {
        let attempts = Attempts::default();
        let start = Instant::now();
        // Taken at once, none answered yet: the eleventh waits out the window.
        let places: Vec<Place> = (0..WRONG_TOKENS)
            .map(|_| attempts.take(start).ok().unwrap())
            .collect();
        assert_eq!(attempts.take(start).err(), Some(WINDOW));
        let later = start + Duration::from_secs(45);
        assert_eq!(attempts.take(later).err(), Some(Duration::from_secs(15)));
        // A right token gives its place back.
        let mut places = places.into_iter();
        attempts.give_back(places.next().unwrap());
        let again = attempts.take(later).ok().unwrap();
        assert!(attempts.take(later).is_err());
        // The first ones leave the window; the one taken later stays.
        let after = start + WINDOW;
        let free: Vec<Place> = (1..WRONG_TOKENS)
            .map(|_| attempts.take(after).ok().unwrap())
            .collect();
        assert!(attempts.take(after).is_err());
        drop((again, free));
    }
}
