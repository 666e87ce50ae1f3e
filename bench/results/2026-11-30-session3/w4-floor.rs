// Run as the main.rs of a scratch cargo project whose only dependency is
// serde_json = "1" (cargo run --release): prints the medians of 200 rounds.
// The least work a history(limit 20) of W2's thread can do in Rust: 20 states of
// 480 to 499 messages of 256 bytes (W2 ends at 500), as owned Strings.
use std::time::Instant;
fn main() {
    let msgs: Vec<String> = (0..500).map(|i| format!("{:0>256}", i)).collect();
    let states: Vec<Vec<String>> = (0..20).map(|k| msgs[..480 + k].to_vec()).collect();
    let json: Vec<Vec<u8>> = states.iter().map(|s| serde_json::to_vec(s).unwrap()).collect();
    let total: usize = json.iter().map(|j| j.len()).sum();
    let mut clone_t = Vec::new();
    let mut parse_t = Vec::new();
    let mut value_t = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let c: Vec<Vec<String>> = states.iter().map(|s| s.clone()).collect();
        clone_t.push(t.elapsed().as_secs_f64() * 1e3);
        drop(c);
        let t = Instant::now();
        let p: Vec<Vec<String>> = json.iter().map(|j| serde_json::from_slice(j).unwrap()).collect();
        parse_t.push(t.elapsed().as_secs_f64() * 1e3);
        drop(p);
        let t = Instant::now();
        let v: Vec<serde_json::Value> = json.iter().map(|j| serde_json::from_slice(j).unwrap()).collect();
        value_t.push(t.elapsed().as_secs_f64() * 1e3);
        drop(v);
    }
    for v in [&mut clone_t, &mut parse_t, &mut value_t] { v.sort_by(f64::total_cmp); }
    println!("{} bytes of JSON; medians: clone 20 states {:.3} ms, parse JSON into Vec<String> {:.3} ms, parse into serde_json::Value {:.3} ms",
        total, clone_t[100], parse_t[100], value_t[100]);
}
