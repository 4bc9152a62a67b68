//! The words a configuration's steps are made of: the step types, the variable types a wait or
//! a condition reads, the outcomes a step ends with, the keys of a `wait-for-card`'s `on`, and
//! the limits of a configuration.

use chrono::Duration;

/// Step types a configuration may use (contract §21). Adding a step type means adding a
/// variant here, its definition and validation in [`crate::flow::steps`], and its execution in the
/// engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StepType {
    /// `create-card`: creates a card for each targeted user from the card template its
    /// `properties.cardTemplateId` names.
    CreateCard,
    /// `wait`: pauses its path for a duration, until an instant, or until a date variable's
    /// instant moved by an offset.
    Wait,
    /// `wait-for-card`: listens to the card an earlier `create-card` step made and goes on by
    /// how it closed, or by its timeout.
    WaitForCard,
    /// `branch`: goes on with the steps of the first condition that holds, else `otherwise`.
    Branch,
}

crate::spelling::spelled!(StepType {
    CreateCard => "create-card",
    Wait => "wait",
    WaitForCard => "wait-for-card",
    Branch => "branch",
});

/// The most steps a configuration may hold.
pub const MAX_STEPS: usize = 50;
/// The most conditions a `branch` step may hold.
pub const MAX_CONDITIONS: usize = 10;
/// How deep conditions may nest: a comparison alone is 1, each `all`, `any` or `not` around it
/// adds 1.
pub const MAX_CONDITION_DEPTH: usize = 5;
/// The shortest wait and the shortest `wait-for-card` timeout.
pub const MIN_WAIT: Duration = Duration::seconds(1);
/// The longest wait and the longest `wait-for-card` timeout; also how far a `wait`'s `offset`
/// may move its date, either way, and how far ahead a deadline may be before it is capped.
pub const MAX_WAIT: Duration = Duration::days(365);

/// The declared type of a flow variable (`config.variables.<name>.type`): what a condition's
/// value must be, and how the evaluator reads the variable's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VariableType {
    /// A JSON number, or a string that reads as a finite number.
    Number,
    /// A string, compared exactly.
    String,
    /// An RFC 3339 timestamp, compared as an instant.
    Date,
    /// `true` or `false` (or those strings).
    Boolean,
}

crate::spelling::spelled!(VariableType {
    Number => "number",
    String => "string",
    Date => "date",
    Boolean => "boolean",
});

/// How a step ended: what `done` records, what `steps.<id>.outcome` reads, and what the
/// per-step counts are kept by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// A `create-card` step made its card.
    Created,
    /// A `wait` step's deadline came.
    Elapsed,
    /// A `wait` step's deadline had passed when it started: it ended at once.
    Past,
    /// A `wait` step's deadline was more than [`MAX_WAIT`] ahead when it started: it ended at
    /// once rather than wait that long.
    Capped,
    /// The card a `wait-for-card` step listens to was submitted.
    Submitted,
    /// That card was dismissed.
    Dismissed,
    /// That card expired.
    Expired,
    /// That card was cancelled.
    Cancelled,
    /// The `wait-for-card` step's timeout passed while the card was open.
    Timeout,
    /// A `branch` step's condition held (which one,
    /// [`StepData::Condition`](crate::flow::steps::StepData::Condition) says).
    Matched,
    /// No condition of a `branch` step held and it has `otherwise`.
    Otherwise,
    /// No condition of a `branch` step held and it has no `otherwise`: the path ends.
    Unmatched,
}

crate::spelling::spelled!(Outcome {
    Created => "created",
    Elapsed => "elapsed",
    Past => "past",
    Capped => "capped",
    Submitted => "submitted",
    Dismissed => "dismissed",
    Expired => "expired",
    Cancelled => "cancelled",
    Timeout => "timeout",
    Matched => "matched",
    Otherwise => "otherwise",
    Unmatched => "unmatched",
});

/// The outcomes a `wait` step can record.
pub const WAIT_OUTCOMES: [Outcome; 3] = [Outcome::Elapsed, Outcome::Past, Outcome::Capped];
/// The outcomes a `wait-for-card` step can record.
pub const CARD_OUTCOMES: [Outcome; 5] = [
    Outcome::Submitted,
    Outcome::Dismissed,
    Outcome::Expired,
    Outcome::Cancelled,
    Outcome::Timeout,
];

impl Outcome {
    /// The outcomes a step of `step_type` can record, for checking a condition's value against
    /// them; empty for steps whose outcome a condition may not read.
    pub fn possible(step_type: StepType) -> &'static [Outcome] {
        match step_type {
            StepType::Wait => &WAIT_OUTCOMES,
            StepType::WaitForCard => &CARD_OUTCOMES,
            StepType::CreateCard | StepType::Branch => &[],
        }
    }
}

/// A key of a `wait-for-card` step's `properties.on`: an outcome, or `closed` for every way
/// the card can close that is not named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OnKey {
    /// The card was submitted.
    Submitted,
    /// The card was dismissed.
    Dismissed,
    /// The card expired.
    Expired,
    /// The card was cancelled.
    Cancelled,
    /// The timeout passed while the card was open (`closed` does not cover it).
    Timeout,
    /// Every closed state not named by its own key.
    Closed,
}

crate::spelling::spelled!(OnKey {
    Submitted => "submitted",
    Dismissed => "dismissed",
    Expired => "expired",
    Cancelled => "cancelled",
    Timeout => "timeout",
    Closed => "closed",
});
