//! One binding's pace: at most one edit (progress, stream, the answer that
//! replaces them) each `gap`, across all its chats, so a fast agent never
//! runs into the platform's flood limits.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

pub struct Pacer {
    gap: Duration,
    next: Mutex<Instant>,
}

impl Pacer {
    pub fn new(gap: Duration) -> Pacer {
        Pacer {
            gap,
            next: Mutex::new(Instant::now()),
        }
    }

    /// Takes the turn when it is free now; else when it will be.
    pub fn try_turn(&self) -> Result<(), Instant> {
        let mut next = tandem_shared::sync::lock(&self.next);
        let now = Instant::now();
        if *next <= now {
            *next = now + self.gap;
            Ok(())
        } else {
            Err(*next)
        }
    }

    /// Waits for the turn and takes it.
    pub async fn turn(&self) {
        while let Err(at) = self.try_turn() {
            tokio::time::sleep_until(at).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn turns_come_a_gap_apart() {
        let pacer = Pacer::new(Duration::from_millis(400));
        let start = Instant::now();
        let mut times = Vec::new();
        for _ in 0..5 {
            pacer.turn().await;
            times.push(start.elapsed());
        }
        for pair in times.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(400), "{times:?}");
        }
        assert!(pacer.try_turn().is_err(), "a turn just taken is not free");
    }
}
