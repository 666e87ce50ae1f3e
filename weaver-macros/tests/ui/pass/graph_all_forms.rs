use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    #[reducer(append)]
    log: Vec<String>,
    route: String,
}

fn start(_: &State) -> StateUpdate {
    StateUpdate::default().log(vec!["start".to_owned()])
}

async fn fetch(_: &State) -> StateUpdate {
    StateUpdate::default().log(vec!["fetch".to_owned()])
}

fn search(_: &State, _: &Runtime) -> Result<StateUpdate, NodeError> {
    Ok(StateUpdate::default().log(vec!["search".to_owned()]))
}

mod nodes {
    use super::*;

    pub fn join(_: &State) -> Command<StateUpdate> {
        Command::update(StateUpdate::default().log(vec!["join".to_owned()]))
    }
}

fn route(state: &State) -> String {
    state.route.clone()
}

fn main() {
    let _graph: Graph<State> = graph! {
        name: "AllForms",
        state: State,
        nodes: [
            start,
            fetch,
            search,
            nodes::join,
            review = |_: &State| StateUpdate::default(),
            again = fetch,
        ],
        edges: [
            START -> start -> [fetch, search],
            [fetch, search] -> join,
            again -> END,
        ],
        // A router may use `?` itself: the last one before the targets splits.
        conditional: [
            join => route ? [review, again, END],
            review => |s: &State| s.log.last()?.strip_prefix("go:").map(|_| "again") ? [again],
        ],
        goto: [join -> [again, END], start -> fetch],
        interrupt_before: [review],
        interrupt_after: [join],
    };
}
