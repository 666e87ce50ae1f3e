// Run as the main.rs of a scratch cargo project with serde_json = "1",
// serde_path_to_error = "0.1" and serde (derive): typed states from owned JSON values,
// with and without path tracking, and from borrowed values. Medians of 200 rounds.
use serde::Deserialize;
use std::time::Instant;
#[derive(Deserialize)]
#[allow(dead_code)]
struct State { foo: String, bar: Vec<String>, messages: Vec<String> }
fn main() {
    let msgs: Vec<String> = (0..500).map(|i| format!("{:0>256}", i)).collect();
    let values: Vec<serde_json::Value> = (0..20).map(|k| serde_json::json!({"foo": "x", "bar": [], "messages": msgs[..480 + k].to_vec()})).collect();
    let (mut owned_tracked, mut owned_plain, mut borrowed_plain) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..200 {
        let vs = values.clone();
        let t = Instant::now();
        let s: Vec<State> = vs.into_iter().map(|v| serde_path_to_error::deserialize(v).unwrap()).collect();
        owned_tracked.push(t.elapsed().as_secs_f64() * 1e3); drop(s);
        let vs = values.clone();
        let t = Instant::now();
        let s: Vec<State> = vs.into_iter().map(|v| serde_json::from_value(v).unwrap()).collect();
        owned_plain.push(t.elapsed().as_secs_f64() * 1e3); drop(s);
        let vs = values.clone();
        let t = Instant::now();
        let s: Vec<State> = vs.iter().map(|v| State::deserialize(v).unwrap()).collect();
        drop(vs);
        borrowed_plain.push(t.elapsed().as_secs_f64() * 1e3); drop(s);
    }
    for v in [&mut owned_tracked, &mut owned_plain, &mut borrowed_plain] { v.sort_by(f64::total_cmp); }
    println!("20 states, medians: owned+tracked {:.3} ms, owned plain {:.3} ms, borrowed plain (+drop) {:.3} ms", owned_tracked[100], owned_plain[100], borrowed_plain[100]);
}
