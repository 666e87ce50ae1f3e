use std::collections::{BTreeMap, HashMap, HashSet};

use weaver::channel::ChannelKind;
use weaver::prelude::*;

fn longest(current: &mut String, update: String) {
    if update.len() > current.len() {
        *current = update;
    }
}

mod reducers {
    pub fn max(current: &mut u64, update: u64) {
        *current = (*current).max(update);
    }
}

/// Every supported field form.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Everything {
    /// Last value.
    pub topic: String,
    /// Optional last value.
    pub note: Option<String>,
    #[reducer(replace)]
    pub status: String,
    #[reducer(append)]
    pub log: Vec<String>,
    #[reducer(append)]
    pub tags: HashSet<String>,
    #[reducer(delta)]
    pub messages: Vec<String>,
    #[reducer(delta)]
    pub events: std::collections::VecDeque<u32>,
    #[reducer(add)]
    pub count: i64,
    #[reducer(add)]
    pub cost: f64,
    #[reducer(merge)]
    pub scores: HashMap<String, i64>,
    #[reducer(merge)]
    pub meta: BTreeMap<String, serde_json::Value>,
    #[reducer(self::longest)]
    pub longest: String,
    #[reducer(reducers::max)]
    pub peak: u64,
    pub r#type: u8,
}

fn main() {
    let update = EverythingUpdate::default()
        .topic("t")
        .note(Some("n".to_owned()))
        .log(vec!["x".to_owned()])
        .messages(vec!["m".to_owned()])
        .count(2)
        .r#type(1u8);
    let mut state = Everything::default();
    state.apply(vec![update.clone(), EverythingUpdate::default().count(3)]).unwrap();
    assert_eq!(state.count, 5);
    assert_eq!(state.messages, ["m"]);
    assert_eq!(
        Everything::CHANNELS.iter().find(|c| c.name == "messages").map(|c| c.kind),
        Some(ChannelKind::Delta)
    );
    assert_eq!(EverythingChannel::Type.name(), "type");
    assert_eq!(EverythingChannel::ALL.len(), Everything::CHANNELS.len());
    let _: EverythingUpdate = state.into();
}
