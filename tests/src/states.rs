//! Hand-written states (no derive), so the runtime can be tested on its own.

use serde::{Deserialize, Serialize};
use weaver::channel::{ChannelKind, ChannelSpec, reduce};
use weaver::state::{GraphState, Update};

/// BeamWeaver's two-step example state: `foo` last value, `bar` appended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Steps {
    /// Last value wins.
    pub foo: String,
    /// Accumulates.
    pub bar: Vec<String>,
}

/// Partial update of [`Steps`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepsUpdate {
    /// New `foo`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "weaver::state::present"
    )]
    pub foo: Option<String>,
    /// Items to append to `bar`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "weaver::state::present"
    )]
    pub bar: Option<Vec<String>>,
}

impl StepsUpdate {
    /// Sets `foo`.
    pub fn foo(mut self, v: impl Into<String>) -> Self {
        self.foo = Some(v.into());
        self
    }
    /// Appends to `bar`.
    pub fn bar<I: IntoIterator<Item = T>, T: Into<String>>(mut self, v: I) -> Self {
        self.bar = Some(v.into_iter().map(Into::into).collect());
        self
    }
}

impl Update for StepsUpdate {}

impl From<Steps> for StepsUpdate {
    fn from(s: Steps) -> Self {
        StepsUpdate {
            foo: Some(s.foo),
            bar: Some(s.bar),
        }
    }
}

impl GraphState for Steps {
    type Update = StepsUpdate;
    const CHANNELS: &'static [ChannelSpec] = &[
        ChannelSpec::new("foo", ChannelKind::LastValue),
        ChannelSpec::new("bar", ChannelKind::Append),
    ];
    fn apply(&mut self, updates: Vec<StepsUpdate>) -> weaver::Result<()> {
        let mut foo_written = false;
        for u in updates {
            if let Some(v) = u.foo {
                reduce::last_value(&mut self.foo, v, &mut foo_written, "foo")?;
            }
            if let Some(v) = u.bar {
                reduce::append(&mut self.bar, v);
            }
        }
        Ok(())
    }
}

/// Like [`Steps`] but `bar` has no reducer: the last value wins.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LastSteps {
    /// Last value wins.
    pub foo: String,
    /// Last value wins too.
    pub bar: Vec<String>,
}

impl GraphState for LastSteps {
    type Update = StepsUpdate;
    const CHANNELS: &'static [ChannelSpec] = &[
        ChannelSpec::new("foo", ChannelKind::LastValue),
        ChannelSpec::new("bar", ChannelKind::LastValue),
    ];
    fn apply(&mut self, updates: Vec<StepsUpdate>) -> weaver::Result<()> {
        let (mut foo_written, mut bar_written) = (false, false);
        for u in updates {
            if let Some(v) = u.foo {
                reduce::last_value(&mut self.foo, v, &mut foo_written, "foo")?;
            }
            if let Some(v) = u.bar {
                reduce::last_value(&mut self.bar, v, &mut bar_written, "bar")?;
            }
        }
        Ok(())
    }
}

impl From<LastSteps> for StepsUpdate {
    fn from(s: LastSteps) -> Self {
        StepsUpdate {
            foo: Some(s.foo),
            bar: Some(s.bar),
        }
    }
}

impl From<StepsUpdate> for weaver::Input<Steps> {
    fn from(update: StepsUpdate) -> Self {
        weaver::Input::Update(update)
    }
}
