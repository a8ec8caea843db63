//! Constructors for the contract's typed errors.

use crate::bindings::karpenter::provider::types::{
    CreateError, Error, InsufficientCapacity, OfferingRef, OtherError,
};

/// A failure the host may retry later (network, throttling, 5xx).
pub fn retryable(message: impl Into<String>) -> Error {
    Error::Other(OtherError {
        message: message.into(),
        retryable: true,
    })
}

/// A failure that will not go away by retrying (bad input, a bug).
pub fn fatal(message: impl Into<String>) -> Error {
    Error::Other(OtherError {
        message: message.into(),
        retryable: false,
    })
}

pub fn not_found(message: impl Into<String>) -> Error {
    Error::NotFound(message.into())
}

pub fn node_class_not_ready(message: impl Into<String>) -> Error {
    Error::NodeClassNotReady(message.into())
}

pub fn create_error(
    reason: impl Into<String>,
    message: impl Into<String>,
    retryable: bool,
) -> Error {
    Error::CreateError(CreateError {
        reason: reason.into(),
        message: message.into(),
        retryable,
    })
}

pub fn insufficient_capacity(message: impl Into<String>, offerings: Vec<OfferingRef>) -> Error {
    Error::InsufficientCapacity(InsufficientCapacity {
        message: message.into(),
        offerings,
    })
}

impl From<crate::http::HttpError> for Error {
    fn from(e: crate::http::HttpError) -> Self {
        retryable(e.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        fatal(format!("invalid JSON: {e}"))
    }
}
