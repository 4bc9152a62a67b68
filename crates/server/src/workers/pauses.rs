//! How the background loops pause: between polls, until a slot is freed, while idle, and
//! until what they claimed is saved.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Sleeps for `length`, or until the loops are to stop.
pub(super) async fn pause(stopping: &CancellationToken, length: Duration) {
    tokio::select! {
        () = tokio::time::sleep(length) => {}
        () = stopping.cancelled() => {}
    }
}

/// Sleeps for `length`, or until a saver frees a slot (`freed`), or the loops are to stop. A
/// claim loop whose slots are all taken goes on as soon as outcomes are saved, not a poll
/// later. `freed` holds one permit for a save made while nothing waited, so none is missed.
pub(super) async fn pause_until_freed(
    stopping: &CancellationToken,
    freed: &Notify,
    length: Duration,
) {
    tokio::select! {
        () = tokio::time::sleep(length) => {}
        () = freed.notified() => {}
        () = stopping.cancelled() => {}
    }
}

/// Polls every `length` until `unsaved` is zero: a claim loop that is to stop ends only once
/// the calls in flight have finished and their outcomes are saved.
pub(super) async fn until_saved(unsaved: &AtomicUsize, length: Duration) {
    while unsaved.load(Ordering::Acquire) > 0 {
        tokio::time::sleep(length).await;
    }
}

/// The pauses of a loop whose steps find nothing to do: `least` after the first, twice the
/// last after each next one, up to `most`; `least` again once a step finds work. A loop claims
/// as often as with a fixed pause of `least` while work comes, and rarely while none does.
pub(super) struct Idle {
    least: Duration,
    most: Duration,
    next: Duration,
}

impl Idle {
    pub(super) fn new(least: Duration, most: Duration) -> Self {
        Idle {
            least,
            most,
            next: least,
        }
    }

    /// A step found work: the next pause is the least again.
    pub(super) fn worked(&mut self) {
        self.next = self.least;
    }

    /// The length of the next pause; the one after is twice as long, up to `most`.
    fn next_length(&mut self) -> Duration {
        let length = self.next;
        self.next = self.next.saturating_mul(2).min(self.most);
        length
    }

    /// The next pause: `least` at least (a slot `freed`, or the loops' stop, ends it sooner),
    /// then, until work is `queued` in this process, up to its length in all. Work queued
    /// before the pause (a permit `queued` kept) ends it once its least has passed.
    pub(super) async fn pause(
        &mut self,
        stopping: &CancellationToken,
        queued: &Notify,
        freed: Option<&Notify>,
    ) {
        let length = self.next_length();
        let freed = async {
            match freed {
                Some(freed) => freed.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(freed);
        tokio::select! {
            () = tokio::time::sleep(self.least) => {}
            () = &mut freed => return,
            () = stopping.cancelled() => return,
        }
        let rest = length.saturating_sub(self.least);
        if rest.is_zero() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(rest) => {}
            () = queued.notified() => {}
            () = &mut freed => {}
            () = stopping.cancelled() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;
    use crate::workers::{DELIVERY_IDLE, IDLE, IDLE_MOST};

    /// The lengths of `idle`'s next pauses, in milliseconds.
    fn lengths(idle: &mut Idle, n: usize) -> Vec<u128> {
        (0..n).map(|_| idle.next_length().as_millis()).collect()
    }

    /// An idle loop pauses twice as long each time nothing is due, up to its most, and the
    /// least again once it finds work.
    #[test]
    fn an_idle_loop_pauses_longer_up_to_its_most_and_less_after_work() {
        let mut idle = Idle::new(DELIVERY_IDLE, IDLE_MOST);
        assert_eq!(lengths(&mut idle, 7), [10, 20, 40, 80, 160, 250, 250]);
        idle.worked();
        assert_eq!(lengths(&mut idle, 2), [10, 20]);
        let mut idle = Idle::new(IDLE, IDLE_MOST);
        assert_eq!(lengths(&mut idle, 5), [50, 100, 200, 250, 250]);
    }

    /// How long a pause of `idle` lasts when it is to last `length`.
    async fn timed(
        idle: &mut Idle,
        length: Duration,
        stopping: &CancellationToken,
        queued: &Notify,
        freed: Option<&Notify>,
    ) -> Duration {
        idle.next = length;
        let began = Instant::now();
        idle.pause(stopping, queued, freed).await;
        began.elapsed()
    }

    /// Runs `then` `ms` milliseconds from now.
    fn in_ms(ms: u64, then: impl FnOnce() + Send + 'static) {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            then();
        });
    }

    /// An idle pause lasts its least at least, even when work was queued before it; past
    /// that, it ends when work is queued, or at its length.
    #[tokio::test]
    async fn an_idle_pause_ends_when_work_is_queued_but_not_before_its_least() {
        let (stopping, queued) = (CancellationToken::new(), Arc::new(Notify::new()));
        let (least, long) = (Duration::from_millis(30), Duration::from_secs(5));
        let mut idle = Idle::new(least, long);
        queued.notify_one();
        let woken = timed(&mut idle, long, &stopping, &queued, None).await;
        assert!(
            woken >= least && woken < Duration::from_secs(4),
            "queued before the pause: it ends after its least ({woken:?})"
        );
        let later = queued.clone();
        in_ms(60, move || later.notify_one());
        let woken = timed(&mut idle, long, &stopping, &queued, None).await;
        assert!(
            woken >= Duration::from_millis(60) && woken < Duration::from_secs(4),
            "queued during the pause ({woken:?})"
        );
        let whole = Duration::from_millis(120);
        let woken = timed(&mut idle, whole, &stopping, &queued, None).await;
        assert!(woken >= whole, "nothing queued: its whole length");
    }

    /// A slot freed ends a pause at once, before or after its least; so does the loops' stop.
    #[tokio::test]
    async fn a_slot_freed_or_the_stop_ends_a_pause_at_once() {
        let (stopping, queued) = (CancellationToken::new(), Notify::new());
        let freed = Arc::new(Notify::new());
        let (least, long) = (Duration::from_millis(200), Duration::from_secs(5));
        let mut idle = Idle::new(least, long);
        freed.notify_one();
        let woken = timed(&mut idle, long, &stopping, &queued, Some(&freed)).await;
        assert!(woken < least, "freed before: within its least");
        let later = freed.clone();
        in_ms(300, move || later.notify_one());
        let woken = timed(&mut idle, long, &stopping, &queued, Some(&freed)).await;
        assert!(
            woken >= Duration::from_millis(300) && woken < Duration::from_secs(4),
            "freed past its least ({woken:?})"
        );
        let stop = stopping.clone();
        in_ms(300, move || stop.cancel());
        let woken = timed(&mut idle, long, &stopping, &queued, None).await;
        assert!(woken < Duration::from_secs(4), "the stop ends it");
    }
}
