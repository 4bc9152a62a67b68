//! A flow version's steps as its graph shows them (contract §21): per step, how many instances
//! reached it and how each ended, from the daily totals (kept for ever), and how many wait at
//! it now, from the instances of its invocations.

use std::collections::BTreeMap;

use super::{Total, STEPS};

/// What one step of a flow version did, over the version's life.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepTotals {
    /// Instances that reached it.
    pub reached: u64,
    /// Instances waiting at it now.
    pub waiting: u64,
    /// Instances for which it is done, by outcome (`elapsed`, `submitted`, `timeout`, …).
    pub outcomes: BTreeMap<String, u64>,
}

/// The step and metric a daily total's metric names: `steps.<id>.reached` is `(id, None)`,
/// `steps.<id>.outcome.<name>` is `(id, Some(name))`; anything else is none.
///
/// ```
/// use workbench_domain::stats::steps::step_metric;
/// assert_eq!(step_metric("steps.ask.reached"), Some(("ask", None)));
/// assert_eq!(step_metric("steps.a.b.outcome.timeout"), Some(("a.b", Some("timeout"))));
/// assert_eq!(step_metric("cards.created"), None);
/// ```
pub fn step_metric(metric: &str) -> Option<(&str, Option<&str>)> {
    let rest = metric.strip_prefix(STEPS)?;
    if let Some(step) = rest.strip_suffix(".reached") {
        return (!step.is_empty()).then_some((step, None));
    }
    // Outcome names have no dot, so the last `.outcome.` ends the step id.
    let at = rest.rfind(".outcome.")?;
    let (step, outcome) = (&rest[..at], &rest[at + ".outcome.".len()..]);
    (!step.is_empty() && !outcome.is_empty() && !outcome.contains('.'))
        .then_some((step, Some(outcome)))
}

/// Per step: `totals` (the daily totals of one version, any days) added up, with `waiting`
/// (step id, instances waiting there now).
pub fn step_totals(totals: &[Total], waiting: &[(String, u64)]) -> BTreeMap<String, StepTotals> {
    let mut steps: BTreeMap<String, StepTotals> = BTreeMap::new();
    for total in totals {
        let Some((step, outcome)) = step_metric(&total.metric) else {
            continue;
        };
        let entry = steps.entry(step.to_owned()).or_default();
        match outcome {
            None => entry.reached = entry.reached.saturating_add(total.n),
            Some(name) => {
                let n = entry.outcomes.entry(name.to_owned()).or_insert(0);
                *n = n.saturating_add(total.n);
            }
        }
    }
    for (step, n) in waiting {
        let entry = steps.entry(step.clone()).or_default();
        entry.waiting = entry.waiting.saturating_add(*n);
    }
    steps
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;

    use super::*;

    fn total(day: u32, metric: &str, n: u64) -> Total {
        Total {
            day: NaiveDate::from_ymd_opt(2026, 11, day).expect("day"),
            flow_version: 1,
            metric: metric.into(),
            n,
        }
    }

    #[test]
    fn the_days_add_up_per_step_with_the_waits_of_now() {
        let totals = [
            total(1, "steps.ask.reached", 3),
            total(2, "steps.ask.reached", 2),
            total(2, "steps.ask.outcome.submitted", 1),
            total(3, "steps.ask.outcome.timeout", 2),
            total(3, "steps.thanks.reached", 1),
            total(3, "cards.created", 9),
            total(3, "events.card-published", 9),
            total(3, "steps..reached", 7),
            total(3, "steps.x.outcome.", 7),
        ];
        let steps = step_totals(&totals, &[("ask".into(), 2), ("pause".into(), 4)]);
        assert_eq!(steps.len(), 3, "{steps:?}");
        let ask = &steps["ask"];
        assert_eq!((ask.reached, ask.waiting), (5, 2));
        assert_eq!(ask.outcomes["submitted"], 1);
        assert_eq!(ask.outcomes["timeout"], 2);
        assert_eq!(steps["thanks"].reached, 1);
        assert_eq!(steps["pause"].waiting, 4, "waiting with no total yet");
    }

    #[test]
    fn sums_saturate() {
        let totals = [
            total(1, "steps.a.reached", u64::MAX),
            total(2, "steps.a.reached", 5),
        ];
        assert_eq!(
            step_totals(&totals, &[("a".into(), u64::MAX)])["a"].reached,
            u64::MAX
        );
    }

    #[cfg(feature = "mock")]
    mod service {
        use std::sync::Arc;

        use crate::flow::MockFlowRepository;
        use crate::folder::MockFolderRepository;
        use crate::stats::{MockStatsRepository, StatsService};
        use crate::tenancy::{KeyAccess, Scope};
        use crate::testing::{caller, clock, t0};
        use crate::trigger::instances::MockInstanceRepository;
        use crate::trigger::Mode;
        use crate::{DomainError, Flow};

        use super::total;

        fn service(flow_exists: bool) -> StatsService {
            let mut flows = MockFlowRepository::new();
            flows.expect_get().returning(move |env, id| {
                Ok((flow_exists && env == "env" && id == "flw")
                    .then(|| Flow::new("flw", "env", "org_1", "F", t0())))
            });
            let mut totals = MockStatsRepository::new();
            totals
                .expect_flow_totals()
                .withf(|env, flow, range| {
                    env == "env"
                        && flow == "flw"
                        && range.version == Some(2)
                        && range.mode == Mode::Test
                        && range.from == t0().date_naive()
                        && range.to == t0().date_naive()
                })
                .returning(|_, _, _| Ok(vec![total(22, "steps.ask.reached", 4)]));
            let mut instances = MockInstanceRepository::new();
            instances
                .expect_waiting()
                .withf(|env, flow, version, mode| {
                    (env, flow, *version, *mode) == ("env", "flw", 2, Mode::Test)
                })
                .returning(|_, _, _, _| Ok(vec![("ask".into(), 3)]));
            StatsService::new(
                Arc::new(totals),
                Arc::new(flows),
                Arc::new(MockFolderRepository::new()),
                Arc::new(instances),
                clock(),
            )
        }

        #[tokio::test]
        async fn a_versions_steps_come_from_its_totals_and_its_waiting_instances() {
            let reader = caller("env", KeyAccess::Scopes(vec![Scope::ActionFlowsRead]));
            let steps = service(true)
                .steps(&reader, &"env".into(), &"flw".into(), 2, Mode::Test)
                .await
                .expect("steps");
            assert_eq!((steps["ask"].reached, steps["ask"].waiting), (4, 3));
            let missing = service(false)
                .steps(&reader, &"env".into(), &"flw".into(), 2, Mode::Test)
                .await;
            assert!(matches!(missing, Err(DomainError::NotFound(_))));
            let stranger = caller("env", KeyAccess::Scopes(vec![Scope::UsersRead]));
            let refused = service(true)
                .steps(&stranger, &"env".into(), &"flw".into(), 2, Mode::Test)
                .await;
            assert!(matches!(refused, Err(DomainError::Forbidden(_))));
        }
    }
}
