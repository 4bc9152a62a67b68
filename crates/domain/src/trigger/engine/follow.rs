//! Following a fan-out within one engine step: its next batches read and built while the
//! ones before are being written, the saves under way taken in oldest first, and a step that
//! ends with none of them left running.

use std::future::Future;
use std::pin::Pin;

use futures_util::stream::{FuturesOrdered, StreamExt};

use super::{refused, settled, Engine, StepReads};
use crate::trigger::invocation::{
    BatchResult, Invocation, InvocationStatus, SaveTurn, FOLLOW_BATCHES,
};
use crate::unit;
use crate::StorageError;

impl Engine {
    /// Follows the fan-out `invocation` for up to [`FOLLOW_BATCHES`] more batches, its claim
    /// kept by each save (`lease_until`): `batches`, the step's (those of `claimed`), are
    /// saved first, and each next batch is read and built while the one before is written.
    /// True, as [`Engine::step`] answers, once every save under way has ended.
    pub(super) async fn follow(
        &self,
        mut invocation: Invocation,
        batches: Vec<BatchResult>,
        claimed: Vec<Invocation>,
        reads: &mut StepReads,
    ) -> Result<bool, StorageError> {
        // The saves under way, oldest first. Each next one waits for the turn of the one
        // before it to write its progress, and at most `saves_in_flight` are under way.
        let mut turn = SaveTurn::default();
        let mut saving = FuturesOrdered::new();
        saving.push_back(Self::follow_save(
            self.invocations.save_batches(batches),
            turn.clone(),
            claimed,
            1,
        ));
        let mut round = 1;
        loop {
            let now = self.clock.now();
            let build = self.run_guarded(&invocation, now, reads);
            let (next, saved) = build_while_saving(build, &mut saving).await;
            let next = settled(next, &invocation, now);
            if !self.settle(saved, &mut saving, reads).await? {
                return Ok(true);
            }
            let mut next = match next {
                Ok(next) => next,
                Err(e) => {
                    self.drain(&mut saving, false).await;
                    return Err(e);
                }
            };
            let more = round < FOLLOW_BATCHES
                && next.status == InvocationStatus::Running
                && next.cursor.is_some();
            if !more {
                self.save_last(next, &invocation, &mut saving, reads)
                    .await?;
                return Ok(true);
            }
            next.lease_until = Some(now + self.lease);
            let from = invocation.clone();
            invocation.cursor = next.cursor.clone();
            round += 1;
            if !self.make_room(&mut saving, reads).await? {
                return Ok(true);
            }
            let after = std::mem::take(&mut turn);
            saving.push_back(Self::follow_save(
                self.invocations.save_after(next, after),
                turn.clone(),
                vec![from],
                round,
            ));
        }
    }

    /// The fan-out's last batch of this step, saved on its own once every save before it has
    /// ended without stopping the fan-out.
    async fn save_last(
        &self,
        last: BatchResult,
        invocation: &Invocation,
        saving: &mut FuturesOrdered<impl Future<Output = FollowSaved>>,
        reads: &mut StepReads,
    ) -> Result<(), StorageError> {
        let rest = saving.by_ref().collect().await;
        if self.settle(rest, saving, reads).await? {
            self.save(vec![last], std::slice::from_ref(invocation), reads)
                .await?;
        }
        Ok(())
    }

    /// Waits until fewer than `saves_in_flight` saves are under way: false when one of those
    /// that ended meanwhile stops the fan-out.
    async fn make_room(
        &self,
        saving: &mut FuturesOrdered<impl Future<Output = FollowSaved>>,
        reads: &mut StepReads,
    ) -> Result<bool, StorageError> {
        while saving.len() >= self.saves_in_flight {
            let oldest = saving.next().await.into_iter().collect();
            if !self.settle(oldest, saving, reads).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// A save of a followed fan-out's batches: its outcome, once `save` has ended, and `turn`
    /// with it; `turn` also ends when this is dropped, polled or not.
    fn follow_save(
        save: SaveFuture<'_>,
        turn: SaveTurn,
        from: Vec<Invocation>,
        round: u32,
    ) -> impl Future<Output = FollowSaved> + Send + '_ {
        struct Ends(SaveTurn);
        impl Drop for Ends {
            fn drop(&mut self) {
                self.0.end();
            }
        }
        let ends = Ends(turn);
        async move {
            let outcome = refused(unit::catch(save).await);
            drop(ends);
            FollowSaved {
                outcome,
                from,
                round,
            }
        }
    }

    /// Takes in the outcomes of a followed fan-out's saves, oldest first: false when the
    /// fan-out is to stop, with every save still under way ended first. A save that failed
    /// unexpectedly is run and saved again invocation by invocation from where it started
    /// ([`Engine::one_by_one`]): the ones after it were refused, their batch before not saved.
    /// A batch after the first found stale means the invocation was taken over (its lease had
    /// run out): the next batch would start from a cursor that is no longer its. An error
    /// that waiting cures (an unreachable database) ends the step with it, once the saves
    /// under way have ended.
    async fn settle(
        &self,
        saved: Vec<FollowSaved>,
        saving: &mut FuturesOrdered<impl Future<Output = FollowSaved>>,
        reads: &mut StepReads,
    ) -> Result<bool, StorageError> {
        let mut saved = saved.into_iter();
        while let Some(one) = saved.next() {
            match one.outcome {
                Ok(Ok(stale)) => {
                    self.stale.add(stale);
                    if stale > 0 && one.round > 1 {
                        self.later(saved, true);
                        self.drain(saving, true).await;
                        return Ok(false);
                    }
                }
                Ok(Err(cause)) => {
                    self.later(saved, false);
                    self.drain(saving, false).await;
                    self.one_by_one(&one.from, cause, reads).await?;
                    return Ok(false);
                }
                Err(e) => {
                    self.later(saved, false);
                    self.drain(saving, false).await;
                    return Err(e);
                }
            }
        }
        Ok(true)
    }

    /// Takes in the outcomes of saves given after the one that stopped a followed fan-out:
    /// those found stale are counted with `count` (the fan-out was taken over), not after a
    /// save before them failed (they were refused for that); a failure is logged, since no
    /// one runs their batches again but the invocation's next claim.
    fn later(&self, saved: impl IntoIterator<Item = FollowSaved>, count: bool) {
        for later in saved {
            match later.outcome {
                Ok(Ok(stale)) if count => self.stale.add(stale),
                Ok(Ok(_)) => {}
                Ok(Err(cause)) => {
                    tracing::warn!(round = later.round, cause = %cause,
                        "a fan-out's save given after one that stopped it failed; its batch waits \
                            for the next claim")
                }
                Err(e) => {
                    tracing::warn!(round = later.round, error = %e,
                        "a fan-out's save given after one that stopped it failed; its batch waits \
                            for the next claim")
                }
            }
        }
    }

    /// Waits for the saves still under way to end, so that none outlives the step, and takes
    /// in their outcomes ([`Engine::later`]).
    async fn drain(
        &self,
        saving: &mut FuturesOrdered<impl Future<Output = FollowSaved>>,
        count: bool,
    ) {
        while let Some(later) = saving.next().await {
            self.later([later], count);
        }
    }
}

/// A save, as the repository's port gives it.
type SaveFuture<'a> = Pin<Box<dyn Future<Output = Result<u64, StorageError>> + Send + 'a>>;

/// The outcome of one save of a followed fan-out ([`Engine::step`]), with what it saved as it
/// was before (to be run again should the save fail) and its round (1 for the step's first).
struct FollowSaved {
    outcome: Result<Result<u64, String>, StorageError>,
    from: Vec<Invocation>,
    round: u32,
}

/// Runs `build` to its end while the saves under way go on (so that each one's turn ends as
/// soon as it does): its output, and the outcomes of the saves that ended meanwhile, oldest
/// first.
async fn build_while_saving<T, S>(
    build: impl Future<Output = T>,
    saving: &mut FuturesOrdered<S>,
) -> (T, Vec<S::Output>)
where
    S: Future,
{
    let mut build = std::pin::pin!(build);
    let mut saved = Vec::new();
    loop {
        match futures_util::future::select(build.as_mut(), saving.next()).await {
            futures_util::future::Either::Left((built, _)) => return (built, saved),
            futures_util::future::Either::Right((Some(done), _)) => saved.push(done),
            futures_util::future::Either::Right((None, _)) => return (build.await, saved),
        }
    }
}
