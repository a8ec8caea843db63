//! Logging into the host's structured logs.

use crate::bindings::karpenter::provider::log::{Level, log};

pub fn debug(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Debug, message, fields)
}

pub fn info(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Info, message, fields)
}

pub fn warn(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Warn, message, fields)
}

pub fn error(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Error, message, fields)
}

fn emit(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    log(level, message, &fields);
}
