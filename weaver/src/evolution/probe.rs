//! Helpers of the code `#[derive(GraphState)]` generates for versioned
//! states; not a public API.

use std::marker::PhantomData;

use serde_json::{Map, Value};

use crate::error::BoxError;

/// Stands for a state type, to ask whether it implements `JsonSchema`.
#[derive(Debug)]
pub struct Probe<T>(PhantomData<T>);

impl<T> Probe<T> {
    /// The probe of `T`.
    pub fn new() -> Self {
        Probe(PhantomData)
    }
}

impl<T> Default for Probe<T> {
    fn default() -> Self {
        Probe::new()
    }
}

/// Picked for a state that implements `JsonSchema`: its schema's fingerprint.
pub trait ViaSchema {
    /// The fingerprint.
    fn fingerprint(&self) -> Option<String>;
}

impl<T: schemars::JsonSchema> ViaSchema for &Probe<T> {
    fn fingerprint(&self) -> Option<String> {
        Some(super::fingerprint(&schemars::schema_for!(T).to_value()))
    }
}

/// Picked for any other state: no fingerprint.
pub trait NoSchema {
    /// No fingerprint.
    fn fingerprint(&self) -> Option<String>;
}

impl<T> NoSchema for Probe<T> {
    fn fingerprint(&self) -> Option<String> {
        None
    }
}

/// The type of an upcaster: channel values of one version to the next.
pub type Upcaster<E> = fn(Map<String, Value>) -> Result<Map<String, Value>, E>;

/// Calls a user's upcaster, boxing its error.
pub fn upcast_with<E: Into<BoxError>>(
    f: Upcaster<E>,
    values: Map<String, Value>,
) -> Result<Map<String, Value>, BoxError> {
    f(values).map_err(Into::into)
}
