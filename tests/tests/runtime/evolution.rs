//! State and graph evolution on the in-memory saver: threads written by
//! the first release of a state, read by later releases (the shared suite
//! in `weaver_tests::evolution`).

use std::sync::Arc;

use weaver::{InMemorySaver, Saver};
use weaver_tests::evolution;

fn memory() -> Arc<dyn Saver> {
    Arc::new(InMemorySaver::new())
}

#[tokio::test]
async fn additive_changes_read_old_threads_in_memory() {
    evolution::additive_changes_read_old_threads(memory(), "t").await;
}

#[tokio::test]
async fn upcasters_rename_a_field_in_memory() {
    evolution::upcasters_rename_a_field(memory(), "t").await;
}

#[tokio::test]
async fn unreadable_changes_are_typed_errors_in_memory() {
    evolution::unreadable_changes_are_typed_errors(memory(), "t").await;
}

#[tokio::test]
async fn pending_writes_are_upcast_in_memory() {
    evolution::pending_writes_are_upcast(memory(), "t").await;
}

#[tokio::test]
async fn a_replayed_input_is_upcast_in_memory() {
    evolution::a_replayed_input_is_upcast(memory(), "t").await;
}

#[tokio::test]
async fn forks_read_old_checkpoints_in_memory() {
    evolution::forks_read_old_checkpoints(memory(), "t").await;
}

#[tokio::test]
async fn renamed_nodes_map_to_new_names_in_memory() {
    evolution::renamed_nodes_map_to_new_names(memory(), "t").await;
}

#[tokio::test]
async fn failing_upcasters_and_bad_versions_are_typed_errors_in_memory() {
    evolution::failing_upcasters_and_bad_versions_are_typed_errors(memory(), "t").await;
}

mod release_checks {
    //! `weaver::evolution::check_compatible` / `assert_compatible`: the
    //! state's schema against the previous release's snapshot.

    use serde::{Deserialize, Serialize};
    use weaver::evolution::{Severity, check_compatible, schema_snapshot};
    use weaver::prelude::*;
    use weaver_tests::evolution::{TicketGap, TicketRetyped, TicketV1, TicketV2, TicketV3};

    fn previous<S: StateSchema>() -> String {
        schema_snapshot::<S>().to_json()
    }

    fn report<S: StateSchema>(prev: &str) -> Vec<(Severity, String, String)> {
        check_compatible::<S>(prev)
            .unwrap()
            .changes
            .into_iter()
            .map(|c| (c.severity, c.path, c.message))
            .collect()
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Counts {
        small: u32,
        big: u64,
        name: String,
        profile: Profile,
    }

    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Profile {
        age: u32,
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct CountsChanged {
        small: u64,
        big: u32,
        name: Option<String>,
        profile: ProfileChanged,
    }

    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct ProfileChanged {
        age: u32,
        email: String,
        #[serde(default)]
        phone: String,
    }

    /// `title` renamed `subject` in place, without a version or upcaster.
    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Renamed {
        subject: String,
        priority: u32,
        legacy: String,
        #[reducer(delta)]
        log: Vec<String>,
    }

    #[test]
    fn additive_changes_pass_with_notes_only() {
        let got = report::<TicketV2>(&previous::<TicketV1>());
        assert!(got.iter().all(|(s, ..)| *s == Severity::Info), "{got:?}");
        assert!(
            got.iter()
                .any(|(_, p, m)| p == "legacy" && m.contains("ignored")),
            "{got:?}"
        );
        assert!(
            got.iter()
                .any(|(_, p, m)| p == "count" && m.contains("default")),
            "{got:?}"
        );
        // Nothing changed at all.
        assert!(report::<TicketV1>(&previous::<TicketV1>()).is_empty());
    }

    #[test]
    fn a_rename_without_an_upcaster_fails_and_with_one_passes() {
        let got = report::<Renamed>(&previous::<TicketV1>());
        let (sev, path, msg) = &got[0];
        assert_eq!(
            (*sev, path.as_str()),
            (Severity::Failure, "subject"),
            "{got:?}"
        );
        assert!(msg.contains("rename") && msg.contains("`title`"), "{msg}");
        // TicketV3 is version 2 with an upcaster from 1.
        let report = check_compatible::<TicketV3>(&previous::<TicketV1>()).unwrap();
        assert!(report.is_compatible(), "{report}");
        assert!(
            report
                .changes
                .iter()
                .any(|c| c.path == "subject" && c.message.contains("covered by the upcasters")),
            "{report}"
        );
        let rollback: Vec<_> = report.warnings().collect();
        assert_eq!(rollback.len(), 1, "{report}");
        assert!(
            rollback[0]
                .message
                .contains("refused by the previous release"),
            "{report}"
        );
    }

    #[test]
    fn a_type_change_or_a_version_gap_fails_naming_it() {
        let got = report::<TicketRetyped>(&previous::<TicketV1>());
        let failure = got
            .iter()
            .find(|(s, ..)| *s == Severity::Failure)
            .expect("a failure");
        assert_eq!(failure.1, "priority");
        assert!(failure.2.contains("type changed"), "{}", failure.2);
        let gap = check_compatible::<TicketGap>(&previous::<TicketV1>()).unwrap();
        let first = gap.failures().next().expect("a failure");
        assert!(
            first
                .message
                .contains("no upcaster goes from version 1 to 2"),
            "{first}"
        );
        // The version going down.
        let down = check_compatible::<TicketV1>(&previous::<TicketV3>()).unwrap();
        assert!(
            down.failures()
                .any(|c| c.message.contains("went down from 2 to 1")),
            "{down}"
        );
    }

    #[test]
    fn narrowing_fails_widening_warns_and_nested_required_fields_fail() {
        let got = report::<CountsChanged>(&previous::<Counts>());
        let find = |path: &str| {
            got.iter()
                .find(|(_, p, _)| p == path)
                .unwrap_or_else(|| panic!("no change at {path}: {got:?}"))
        };
        assert_eq!(find("big").0, Severity::Failure, "u64 to u32");
        assert_eq!(find("small").0, Severity::Warning, "u32 to u64");
        assert_eq!(
            find("name").0,
            Severity::Warning,
            "String to Option<String>"
        );
        let email = find("profile.email");
        assert_eq!(email.0, Severity::Failure);
        assert!(email.2.contains("#[serde(default)]"), "{}", email.2);
        assert!(
            got.iter().all(|(_, p, _)| p != "profile.phone"),
            "a field with a default: {got:?}"
        );
        // Most severe first.
        assert!(got.windows(2).all(|w| w[0].0 >= w[1].0), "{got:?}");
    }

    /// A recursive type: its schema refers to itself.
    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Tree {
        label: String,
        children: Vec<Tree>,
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Forest {
        root: Tree,
        spare: Option<Box<Tree>>,
    }

    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct TreeRetyped {
        label: u32,
        children: Vec<TreeRetyped>,
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct ForestRetyped {
        root: TreeRetyped,
        spare: Option<Box<TreeRetyped>>,
    }

    #[test]
    fn recursive_types_are_compared_without_end() {
        assert!(report::<Forest>(&previous::<Forest>()).is_empty());
        let got = report::<ForestRetyped>(&previous::<Forest>());
        // The retyped label is found at each path the type is met by.
        for path in ["root.label", "spare.label"] {
            assert!(
                got.iter()
                    .any(|(s, p, _)| *s == Severity::Failure && p == path),
                "{path}: {got:?}"
            );
        }
    }

    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    enum Step {
        #[default]
        Idle,
        Ask {
            question: String,
        },
        Wait {
            seconds: u64,
        },
    }

    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    enum StepRetyped {
        #[default]
        Idle,
        Ask {
            question: u32,
        },
        Wait {
            seconds: u64,
        },
    }

    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[serde(tag = "kind")]
    enum Event {
        #[default]
        Idle,
        Ask {
            question: String,
        },
        Wait {
            seconds: u64,
        },
    }

    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[serde(tag = "kind")]
    enum EventChanged {
        #[default]
        Idle,
        Ask {
            question: String,
        },
        Wait {
            seconds: u32,
        },
    }

    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[serde(tag = "kind")]
    enum EventShrunk {
        #[default]
        Idle,
        Ask {
            question: String,
        },
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Flow {
        step: Step,
        event: Event,
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct FlowChanged {
        step: StepRetyped,
        event: EventChanged,
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct FlowShrunk {
        step: Step,
        event: EventShrunk,
    }

    #[test]
    fn fields_inside_enum_variants_are_compared() {
        assert!(report::<Flow>(&previous::<Flow>()).is_empty());
        let got = report::<FlowChanged>(&previous::<Flow>());
        let find = |path: &str| {
            got.iter()
                .find(|(_, p, _)| p == path)
                .unwrap_or_else(|| panic!("no change at {path}: {got:?}"))
        };
        // Externally tagged: `Ask { question: String }` to `u32`.
        assert_eq!(find("step.Ask.question").0, Severity::Failure);
        // Internally tagged: `Wait { seconds: u64 }` to `u32`.
        assert_eq!(find("event.Wait.seconds").0, Severity::Failure);
        // A variant of an internally tagged enum removed.
        let shrunk = check_compatible::<FlowShrunk>(&previous::<Flow>()).unwrap();
        assert!(shrunk.failures().any(|c| c.path == "event"), "{shrunk}");
        // And added back: a rollback could not read it.
        let grown = check_compatible::<Flow>(&previous::<FlowShrunk>()).unwrap();
        assert!(grown.is_compatible(), "{grown}");
        assert!(grown.warnings().any(|c| c.path == "event"), "{grown}");
    }

    /// Two releases keeping every type name: `Profile.age` narrows inside
    /// an enum variant (whose schema text, a `$ref`, stays the same), and
    /// inside a tuple; a map becomes a struct; an enum becomes a string.
    mod kept_names {
        pub mod r1 {
            use serde::{Deserialize, Serialize};
            use std::collections::BTreeMap;
            use weaver::prelude::*;

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Profile {
                pub age: u64,
            }

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub enum Event {
                #[default]
                Idle,
                Ask {
                    profile: Profile,
                },
                Wait {
                    seconds: u64,
                },
            }

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub enum Mood {
                #[default]
                Happy,
                Sad,
            }

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub event: Event,
                pub pair: (u64, String),
                pub extra: BTreeMap<String, u32>,
                pub mood: Mood,
            }
        }

        pub mod r2 {
            use serde::{Deserialize, Serialize};
            use weaver::prelude::*;

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Profile {
                pub age: u32,
            }

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub enum Event {
                #[default]
                Idle,
                Ask {
                    profile: Profile,
                },
                Wait {
                    seconds: u64,
                },
            }

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Extra {
                pub age: u32,
            }

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub event: Event,
                pub pair: (u32, String),
                pub extra: Extra,
                pub mood: String,
            }
        }
    }

    /// An internally tagged enum whose variants hold structs (newtype
    /// variants: schemars writes each as the struct's `$ref` beside the tag).
    mod tagged_newtypes {
        pub mod r1 {
            use serde::{Deserialize, Serialize};
            use weaver::prelude::*;

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct AskData {
                pub question: String,
            }

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct TellData {
                pub text: String,
            }

            #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
            #[serde(tag = "kind")]
            pub enum Step {
                Ask(AskData),
                Tell(TellData),
            }

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub step: Option<Step>,
            }
        }

        /// `Tell` removed.
        pub mod r2 {
            use serde::{Deserialize, Serialize};
            use weaver::prelude::*;

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct AskData {
                pub question: String,
            }

            #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
            #[serde(tag = "kind")]
            pub enum Step {
                Ask(AskData),
            }

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub step: Option<Step>,
            }
        }

        /// `AskData.question` retyped.
        pub mod r3 {
            use serde::{Deserialize, Serialize};
            use weaver::prelude::*;

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct AskData {
                pub question: u32,
            }

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct TellData {
                pub text: String,
            }

            #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
            #[serde(tag = "kind")]
            pub enum Step {
                Ask(AskData),
                Tell(TellData),
            }

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub step: Option<Step>,
            }
        }
    }

    /// Internally tagged newtype variants are paired by their tag: a removed
    /// variant, and a field retyped inside one, fail. (The tag beside the
    /// payload's `$ref` was dropped, so every variant read as a plain
    /// object and nothing was found.)
    #[test]
    fn internally_tagged_newtype_variants_are_paired_by_tag() {
        use tagged_newtypes::{r1, r2, r3};
        assert!(report::<r1::Flow>(&previous::<r1::Flow>()).is_empty());
        let removed = check_compatible::<r2::Flow>(&previous::<r1::Flow>()).unwrap();
        assert!(removed.failures().next().is_some(), "{removed}");
        let retyped = check_compatible::<r3::Flow>(&previous::<r1::Flow>()).unwrap();
        assert!(
            retyped.failures().any(|c| c.path.contains("question")),
            "{retyped}"
        );
    }

    /// An untagged enum with two branches that hold itself, and maps of any
    /// values.
    pub mod cyclic {
        use serde::{Deserialize, Serialize};
        use weaver::prelude::*;

        #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
        #[serde(untagged)]
        pub enum Twice {
            A(Box<Twice>),
            B(Box<Twice>),
            N(u64),
        }

        #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
        pub struct Flow {
            pub twice: Option<Twice>,
            pub any: std::collections::HashMap<String, serde_json::Value>,
        }

        /// `any` keyed by integers.
        #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
        pub struct Keyed {
            pub twice: Option<Twice>,
            pub any: std::collections::HashMap<u64, serde_json::Value>,
        }
    }

    /// A value no branch of a twice self-referring enum takes is reported
    /// at once (the scan tried every branch at every level, without end),
    /// and a map of any values keyed by integers instead of text fails (it
    /// was not taken for a map).
    #[tokio::test]
    async fn self_referring_branches_end_and_maps_of_any_values_are_compared() {
        use weaver::evolution::scan_stored;
        assert!(report::<cyclic::Flow>(&previous::<cyclic::Flow>()).is_empty());
        let keyed = check_compatible::<cyclic::Keyed>(&previous::<cyclic::Flow>()).unwrap();
        assert!(keyed.failures().any(|c| c.path == "any"), "{keyed}");
        let saver = InMemorySaver::new();
        put_values(&saver, "t", serde_json::json!({"twice": "x", "any": {}})).await;
        let report = scan_stored(&saver, &schema_snapshot::<cyclic::Flow>(), 10, &mut |_| {})
            .await
            .unwrap();
        assert_eq!(report.unreadable, 1, "{report:?}");
    }

    /// Internally tagged enums that hold each other through newtype
    /// variants (the payload's `$ref` beside each tag; schemars itself
    /// cannot write this for Rust types, a snapshot may hold it) are
    /// compared without end. (Merging each payload into its tag recursed
    /// forever.)
    #[test]
    fn tagged_payloads_that_hold_each_other_are_merged_once_per_path() {
        use weaver::evolution::{SchemaSnapshot, compare};
        let text = serde_json::json!({
            "type": "object",
            "properties": {"outer": {"$ref": "#/$defs/Outer"}},
            "$defs": {
                "Outer": {"oneOf": [
                    {"$ref": "#/$defs/Inner", "type": "object",
                     "properties": {"op": {"const": "In"}}, "required": ["op"]},
                    {"type": "object", "properties": {"op": {"const": "Stop"}},
                     "required": ["op"]}
                ]},
                "Inner": {"oneOf": [
                    {"$ref": "#/$defs/Outer", "type": "object",
                     "properties": {"kind": {"const": "Back"}}, "required": ["kind"]},
                    {"type": "object", "properties": {"kind": {"const": "Leaf"}, "x": {"type": "integer"}},
                     "required": ["kind", "x"]}
                ]}
            }
        })
        .to_string();
        let snapshot = SchemaSnapshot::parse(&text).unwrap();
        let report = compare(&snapshot, &snapshot, &[]);
        assert!(report.is_compatible(), "{report}");
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Numbers {
        ratio: f64,
        count: i32,
        pair: (u64, String),
    }

    #[derive(GraphState, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    struct NumbersNarrowed {
        ratio: f32,
        count: std::num::NonZeroI32,
        pair: Vec<u64>,
    }

    impl Default for NumbersNarrowed {
        fn default() -> Self {
            NumbersNarrowed {
                ratio: 0.0,
                count: std::num::NonZeroI32::MIN,
                pair: Vec::new(),
            }
        }
    }

    /// `f64` to `f32`, `i32` to `NonZeroI32` and a tuple that became a list
    /// whose items do not take every place fail; the reverse warns. (All
    /// three passed: the float format and `not` were not read, and a tuple
    /// became a list with only an item count warning.)
    #[test]
    fn floats_excluded_values_and_tuples_become_lists_are_compared() {
        let got = check_compatible::<NumbersNarrowed>(&previous::<Numbers>()).unwrap();
        for path in ["ratio", "count", "pair[1]"] {
            assert!(got.failures().any(|c| c.path == path), "{path}: {got}");
        }
        let back = check_compatible::<Numbers>(&previous::<NumbersNarrowed>()).unwrap();
        for path in ["ratio", "count"] {
            assert!(
                back.changes
                    .iter()
                    .any(|c| c.severity == Severity::Warning && c.path == path),
                "{path}: {back}"
            );
        }
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Integers {
        big: u64,
        signed: i64,
        small: u32,
        exact: i32,
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Floats {
        big: f64,
        signed: f64,
        small: f32,
        exact: f64,
    }

    /// Integers that became floats fail where the float does not hold every
    /// stored value exactly (`u64` and `i64` as `f64`, `u32` as `f32`: large
    /// values read rounded) and only warn where it does (`i32` as `f64`).
    /// (All four only warned.)
    #[test]
    fn integers_that_became_floats_fail_where_values_would_round() {
        let got = check_compatible::<Floats>(&previous::<Integers>()).unwrap();
        for path in ["big", "signed", "small"] {
            assert!(got.failures().any(|c| c.path == path), "{path}: {got}");
        }
        assert!(!got.failures().any(|c| c.path == "exact"), "{got}");
    }

    /// An externally tagged enum that became a struct.
    mod enum_to_struct {
        pub mod r1 {
            use serde::{Deserialize, Serialize};
            use weaver::prelude::*;

            #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
            pub enum Shape {
                Circle { r: f64 },
                Square { side: f64 },
            }

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub shape: Option<Shape>,
            }
        }

        pub mod r2 {
            use serde::{Deserialize, Serialize};
            use weaver::prelude::*;

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Shape {
                pub r: f64,
            }

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub shape: Option<Shape>,
            }
        }
    }

    /// The same enum, kept readable by a fallback branch, and a struct that
    /// refuses unknown fields.
    mod enum_to_struct_more {
        pub mod r3 {
            use serde::{Deserialize, Serialize};
            use weaver::prelude::*;

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Round {
                pub r: f64,
            }

            #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
            #[serde(untagged)]
            pub enum Shape {
                New(Round),
                Old(serde_json::Value),
            }

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub shape: Option<Shape>,
            }
        }

        pub mod r4 {
            use serde::{Deserialize, Serialize};
            use weaver::prelude::*;

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            #[serde(deny_unknown_fields)]
            pub struct Shape {
                #[serde(default)]
                pub r: f64,
            }

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub shape: Option<Shape>,
            }
        }
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Ids32 {
        id: Option<std::num::NonZeroU32>,
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Ids64 {
        id: Option<std::num::NonZeroI64>,
    }

    /// An externally tagged enum that became a struct with a required
    /// field fails: a stored `{"Circle": {"r": 1}}` lacks `r`; so does one
    /// that refuses unknown fields. (It was only a widening warning: a
    /// plain object was taken to read every variant.) One with a fallback
    /// branch that reads any value passes, and so does a `NonZeroU32` that
    /// became a `NonZeroI64` (0 was never stored).
    #[test]
    fn an_enum_that_became_a_struct_fails() {
        use enum_to_struct::{r1, r2};
        use enum_to_struct_more::{r3, r4};
        let got = check_compatible::<r2::Flow>(&previous::<r1::Flow>()).unwrap();
        assert!(got.failures().any(|c| c.path == "shape"), "{got}");
        let closed = check_compatible::<r4::Flow>(&previous::<r1::Flow>()).unwrap();
        assert!(closed.failures().any(|c| c.path == "shape"), "{closed}");
        let fallback = check_compatible::<r3::Flow>(&previous::<r1::Flow>()).unwrap();
        assert!(fallback.failures().next().is_none(), "{fallback}");
        let wider = check_compatible::<Ids64>(&previous::<Ids32>()).unwrap();
        assert!(wider.failures().next().is_none(), "{wider}");
    }

    /// Maps by key type, and a named type inside an `Option`.
    mod keyed {
        pub mod r1 {
            use serde::{Deserialize, Serialize};
            use std::collections::HashMap;
            use weaver::prelude::*;

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Ids(pub Vec<u64>);

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub by_name: HashMap<String, u64>,
                pub by_id: HashMap<u32, u64>,
                pub signed: HashMap<i32, u64>,
                pub ids: Option<Ids>,
            }
        }

        pub mod r2 {
            use serde::{Deserialize, Serialize};
            use std::collections::HashMap;
            use weaver::prelude::*;

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Ids(pub Vec<u32>);

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub by_name: HashMap<u32, u64>,
                pub by_id: HashMap<u32, u32>,
                pub signed: HashMap<u32, u64>,
                pub ids: Option<Ids>,
            }
        }
    }

    /// A map's key type narrowed (text or signed integers to unsigned), a
    /// value narrowed under integer keys, and a named array narrowed inside
    /// an `Option` fail; the keys widened back warn. (None was found: the
    /// key patterns, and what an `Option` of a named type holds, were not
    /// read.)
    #[test]
    fn map_keys_and_what_an_option_holds_are_compared() {
        use keyed::{r1, r2};
        assert!(report::<r1::Flow>(&previous::<r1::Flow>()).is_empty());
        let got = check_compatible::<r2::Flow>(&previous::<r1::Flow>()).unwrap();
        for path in ["by_name", "by_id{}", "signed", "ids[]"] {
            assert!(got.failures().any(|c| c.path == path), "{path}: {got}");
        }
        let back = check_compatible::<r1::Flow>(&previous::<r2::Flow>()).unwrap();
        assert!(back.failures().next().is_none(), "{back}");
        for path in ["by_name", "signed"] {
            assert!(
                back.changes
                    .iter()
                    .any(|c| c.severity == Severity::Warning && c.path == path),
                "{path}: {back}"
            );
        }
    }

    #[test]
    fn changes_under_kept_type_names_tuples_and_maps_are_found() {
        use kept_names::{r1, r2};
        assert!(report::<r1::Flow>(&previous::<r1::Flow>()).is_empty());
        let got = check_compatible::<r2::Flow>(&previous::<r1::Flow>()).unwrap();
        for path in ["event.Ask.profile.age", "pair[0]", "extra"] {
            assert!(got.failures().any(|c| c.path == path), "{path}: {got}");
        }
        // An enum's values are strings: a `String` reads every one.
        assert!(!got.failures().any(|c| c.path == "mood"), "{got}");
    }

    mod enum_keys {
        pub mod r1 {
            use serde::{Deserialize, Serialize};
            use std::collections::BTreeMap;
            use weaver::prelude::*;

            #[derive(
                Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
            )]
            pub enum Kind {
                A,
                B,
                C,
            }

            #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Shape {
                pub age: u32,
            }

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub by_kind: BTreeMap<Kind, u64>,
                pub by_text: BTreeMap<String, u64>,
                pub shape: Shape,
            }
        }

        pub mod r2 {
            use serde::{Deserialize, Serialize};
            use std::collections::BTreeMap;
            use weaver::prelude::*;

            #[derive(
                Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
            )]
            pub enum Kind {
                A,
                B,
            }

            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub struct Flow {
                pub by_kind: BTreeMap<Kind, u64>,
                pub by_text: BTreeMap<Kind, u64>,
                pub shape: BTreeMap<u32, u32>,
            }
        }
    }

    /// A map keyed by an enum: a key variant removed, and text keys
    /// narrowed to an enum's, fail (stored keys do not decode); the reverse
    /// warns (the previous release cannot read the new keys). A struct read
    /// as an integer-keyed map fails on its field names.
    #[test]
    fn enum_keyed_maps_are_compared_by_their_keys() {
        use enum_keys::{r1, r2};
        assert!(report::<r1::Flow>(&previous::<r1::Flow>()).is_empty());
        let got = check_compatible::<r2::Flow>(&previous::<r1::Flow>()).unwrap();
        for path in ["by_kind", "by_text", "shape"] {
            assert!(
                got.failures().any(|c| c.path.starts_with(path)),
                "{path}: {got}"
            );
        }
        let back = check_compatible::<r1::Flow>(&previous::<r2::Flow>()).unwrap();
        // A map read as a struct with a required field: a failure already.
        assert!(back.failures().all(|c| c.path == "shape"), "{back}");
        for path in ["by_kind", "by_text"] {
            assert!(
                back.warnings().any(|c| c.path.starts_with(path)),
                "{path}: {back}"
            );
        }
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Loose {
        initial: String,
        scores: Vec<u32>,
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Tight {
        initial: char,
        scores: [u32; 3],
    }

    #[test]
    fn narrowed_strings_and_arrays_fail_and_widened_ones_warn() {
        let got = report::<Tight>(&previous::<Loose>());
        for path in ["initial", "scores"] {
            assert!(
                got.iter()
                    .any(|(s, p, _)| *s == Severity::Failure && p == path),
                "{path}: {got:?}"
            );
        }
        let back = check_compatible::<Loose>(&previous::<Tight>()).unwrap();
        assert!(back.is_compatible(), "{back}");
        for path in ["initial", "scores"] {
            assert!(back.warnings().any(|c| c.path == path), "{path}: {back}");
        }
    }

    #[test]
    fn assert_compatible_panics_on_failures_and_bad_snapshots() {
        let ok = weaver::evolution::assert_compatible::<TicketV2>(&previous::<TicketV1>());
        assert!(ok.is_compatible());
        let failed = std::panic::catch_unwind(|| {
            weaver::evolution::assert_compatible::<TicketRetyped>(&previous::<TicketV1>())
        });
        let message = *failed.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("priority"), "{message}");
        assert!(check_compatible::<TicketV1>("{\"type\": \"string\"}").is_err());
        // A bare schema, or `StateSchema::schemas()`, reads as version 1.
        let bare = TicketV1::state_schema().to_string();
        assert!(check_compatible::<TicketV2>(&bare).unwrap().is_compatible());
        let both = TicketV1::schemas().to_string();
        assert!(check_compatible::<TicketV2>(&both).unwrap().is_compatible());
    }

    /// Stores `values` as thread `thread`'s one checkpoint, as written.
    async fn put_values(saver: &InMemorySaver, thread: &str, values: serde_json::Value) {
        use weaver::checkpoint::{Checkpoint, CheckpointMetadata, CheckpointSource, NewCheckpoint};
        let mut checkpoint = Checkpoint::empty();
        checkpoint.id = format!("c-{thread}");
        for (k, v) in values.as_object().unwrap() {
            checkpoint.channel_values.insert(k.clone(), v.clone());
            checkpoint.channel_versions.insert(k.clone(), 1);
        }
        saver
            .put(NewCheckpoint {
                thread_id: thread.into(),
                checkpoint_ns: String::new(),
                parent_id: None,
                checkpoint,
                metadata: CheckpointMetadata::new(CheckpointSource::Loop, 0),
                commit_order: Some(1),
            })
            .await
            .unwrap();
    }

    /// An untagged enum that holds itself: its schema is `A = number | A`.
    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[serde(untagged)]
    pub enum Nest {
        N(f64),
        W(Box<Nest>),
    }

    /// A state with a self-referring untagged enum and an integer-keyed map.
    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct Odd {
        pub nest: Option<Nest>,
        pub by_id: std::collections::HashMap<u32, u64>,
    }

    /// A schema whose `anyOf` refers back to itself is compared, and
    /// checked, without end. (The check overflowed the stack and aborted
    /// the process.)
    #[test]
    fn a_schema_whose_branches_refer_to_itself_is_compared_without_end() {
        assert!(report::<Odd>(&previous::<Odd>()).is_empty());
    }

    /// A state field named with leading underscores.
    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct Dunder {
        pub __note: u32,
    }

    /// A pending write to a state field whose name starts with `__` is
    /// checked as the state's (such writes were all taken for the runtime's
    /// own and skipped).
    #[tokio::test]
    async fn the_scan_checks_writes_to_fields_named_with_underscores() {
        use weaver::checkpoint::{CheckpointRef, PendingWrite};
        use weaver::evolution::scan_stored;
        let saver = InMemorySaver::new();
        put_values(&saver, "t", serde_json::json!({"__note": 1})).await;
        let target = CheckpointRef::latest("t").at("c-t");
        let write = PendingWrite {
            task_id: "task".into(),
            idx: 0,
            channel: "__note".into(),
            value: serde_json::json!("not a number"),
            task_path: String::new(),
        };
        saver.put_writes(&target, vec![write]).await.unwrap();
        let report = scan_stored(&saver, &schema_snapshot::<Dunder>(), 10, &mut |_| {})
            .await
            .unwrap();
        let failing: Vec<(&str, Option<&str>)> = report
            .failing
            .iter()
            .map(|f| (f.path.as_str(), f.task_id.as_deref()))
            .collect();
        assert_eq!(failing, [("__note", Some("task"))], "{report:?}");
    }

    /// The scan reads an integer-keyed map by its key pattern, and stops at
    /// a value a self-referring `anyOf` never matches, with a reason. (The
    /// map's keys were reported as unknown fields; the value overflowed
    /// the stack.)
    #[tokio::test]
    async fn the_scan_reads_integer_keyed_maps_and_self_referring_schemas() {
        use weaver::evolution::scan_stored;
        let saver = InMemorySaver::new();
        for (thread, values) in [
            (
                "good",
                serde_json::json!({"nest": 1.5, "by_id": {"7": 1, "12": 2}}),
            ),
            (
                "bad-key",
                serde_json::json!({"nest": null, "by_id": {"x": 1}}),
            ),
            ("bad-nest", serde_json::json!({"nest": "x", "by_id": {}})),
        ] {
            put_values(&saver, thread, values).await;
        }
        let report = scan_stored(&saver, &schema_snapshot::<Odd>(), 10, &mut |_| {})
            .await
            .unwrap();
        let mut failing: Vec<(&str, &str)> = report
            .failing
            .iter()
            .map(|f| (f.thread_id.as_str(), f.path.as_str()))
            .collect();
        failing.sort();
        assert_eq!(
            failing,
            [("bad-key", "by_id.x"), ("bad-nest", "nest")],
            "{report:?}"
        );
    }
}

#[test]
fn unusable_node_renames_are_refused_at_compile() {
    use weaver::{Compile, Error, GraphError};
    let cases = [
        (("ask", "nowhere"), "the new name is not a node"),
        (("write", "confirm"), "the old name is still a node"),
        (("__start__", "confirm"), "never renamed"),
    ];
    for ((old, new), reason) in cases {
        let got = evolution::graph_v2_with(Compile::new().rename_node(old, new));
        match got {
            Err(Error::InvalidGraph(GraphError::InvalidRename { reason: r, .. })) => {
                assert!(r.contains(reason), "{old} -> {new}: {r}")
            }
            other => panic!(
                "{old} -> {new}: expected InvalidRename, got {:?}",
                other.err()
            ),
        }
    }
    let twice = Compile::new()
        .rename_node("old", "confirm")
        .rename_node("old", "write");
    match evolution::graph_v2_with(twice) {
        Err(Error::InvalidGraph(GraphError::InvalidRename { reason, .. })) => {
            assert!(reason.contains("twice"), "{reason}")
        }
        other => panic!("expected InvalidRename, got {:?}", other.err()),
    }
}

#[tokio::test]
async fn newer_writes_on_an_older_checkpoint_are_not_upcast_again_in_memory() {
    weaver_tests::evolution::newer_writes_on_an_older_checkpoint_are_not_upcast_again(
        memory(),
        "t",
    )
    .await;
}

/// A node renamed onto a node whose task also ran at the thread's paused
/// checkpoint is refused with a decode error naming both: their writes
/// would be taken for one task's (the paused node was taken as finished,
/// and never ran again).
#[tokio::test]
async fn a_rename_onto_a_node_that_also_ran_is_refused() {
    use weaver::prelude::*;
    use weaver_tests::states::{Steps, StepsUpdate};
    let saver = memory();
    let first = Graph::<Steps>::new("r1")
        .add_node("draft", |_: &Steps| StepsUpdate::default().bar(["drafted"]))
        .add_node("review", |_: &Steps, rt: &Runtime| {
            let answer = rt.interrupt("ok?")?;
            Ok::<_, NodeError>(StepsUpdate::default().foo(answer.to_string()))
        })
        .add_edge(START, "draft")
        .add_edge(START, "review")
        .add_edge("draft", END)
        .add_edge("review", END)
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("t");
    let out = first.invoke(Steps::default(), &config).await.unwrap();
    assert_eq!(out.interrupts().len(), 1);
    let second = Graph::<Steps>::new("r2")
        .add_node("review", |_: &Steps, rt: &Runtime| {
            let answer = rt.interrupt("ok?")?;
            Ok::<_, NodeError>(StepsUpdate::default().foo(answer.to_string()))
        })
        .add_edge(START, "review")
        .add_edge("review", END)
        .compile(
            Compile::new()
                .checkpointer_arc(saver)
                .rename_node("draft", "review"),
        )
        .unwrap();
    let resumed = second.resume(serde_json::json!("yes"), &config).await;
    match resumed {
        Err(e @ weaver::Error::Decode { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("`draft`") && text.contains("`review`"),
                "{text}"
            );
        }
        other => panic!("expected a decode error, got {other:?}"),
    }
}

/// A removed node mapped onto a node that ran after it, on a thread that
/// finished, leaves nothing to run: the mapped node is pending only if one
/// of the two names had work left. (The node that took over ran again.)
#[tokio::test]
async fn a_node_mapped_onto_one_that_ran_after_it_does_not_run_again() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use weaver::prelude::*;
    use weaver_tests::states::{Steps, StepsUpdate};
    let saver = memory();
    let first = Graph::<Steps>::new("r1")
        .add_node("draft", |_: &Steps| StepsUpdate::default().bar(["drafted"]))
        .add_node("review", |_: &Steps| {
            StepsUpdate::default().bar(["reviewed"])
        })
        .add_sequence([START, "draft", "review", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("t");
    first.invoke(Steps::default(), &config).await.unwrap();
    let reviews = Arc::new(AtomicUsize::new(0));
    let counted = reviews.clone();
    let second = Graph::<Steps>::new("r2")
        .add_node("review", move |_: &Steps| {
            counted.fetch_add(1, Ordering::SeqCst);
            StepsUpdate::default().bar(["reviewed"])
        })
        .add_sequence([START, "review", END])
        .compile(
            Compile::new()
                .checkpointer_arc(saver)
                .rename_node("draft", "review"),
        )
        .unwrap();
    let state = second.get_state(&config).await.unwrap();
    assert!(state.next.is_empty(), "{:?}", state.next);
    let done = second.continue_run(&config).await.unwrap();
    assert_eq!(done.complete().unwrap().bar, ["drafted", "reviewed"]);
    assert_eq!(reviews.load(Ordering::SeqCst), 0);
}
