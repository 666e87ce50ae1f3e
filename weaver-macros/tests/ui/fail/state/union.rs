use weaver::prelude::*;

#[derive(GraphState)]
union State {
    a: u32,
    b: f32,
}

fn main() {}
