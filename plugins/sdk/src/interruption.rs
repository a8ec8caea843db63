//! Interruption signals (contract 0.1.3): every SDK provider exports them.
//! By default there are none: the cloud gives no notice before it takes an
//! instance away, and a vanished instance is found by `get`.

use crate::bindings::exports::karpenter::provider::interruption::Guest as InterruptionGuest;
pub use crate::bindings::exports::karpenter::provider::interruption::InterruptionSignal;
use crate::bindings::exports::karpenter::provider::provider::Guest;
use crate::bindings::karpenter::provider::types::OfferingRef;

/// How a provider answers `interruption.interruption-signals`. `impl
/// Interruption for MyCloud {}` keeps the default: none.
pub trait Interruption: Guest {
    fn interruption_signals() -> Vec<InterruptionSignal> {
        Vec::new()
    }

    /// Keep `offering` out of `create` for `seconds`. A provider without
    /// signals is never told.
    fn offering_interrupted(_offering: OfferingRef, _seconds: u64) {}
}

impl<T: Interruption> InterruptionGuest for T {
    fn interruption_signals() -> Vec<InterruptionSignal> {
        <T as Interruption>::interruption_signals()
    }

    fn offering_interrupted(offering: OfferingRef, seconds: u64) {
        <T as Interruption>::offering_interrupted(offering, seconds)
    }
}
