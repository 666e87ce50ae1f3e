//! Store benchmark: puts 10,000 items on each backend and times searches at
//! limit 10 in a prefix of fixed size (200 items) while the number of items
//! *outside* the prefix grows 0 → 800 → 9,800. Search latency should stay
//! flat (the prefix is an index range), while a search over the whole store
//! grows with it.
//!
//! Run: `cargo run --release -p weaver-bench --bin store_bench`
//! (PostgreSQL at `DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`;
//! `--skip-postgres` to leave it out).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::store::{InMemoryStore, Op, PostgresStore, Search, SqliteStore, Store};

const TARGET_ITEMS: usize = 200;
const TOTAL_ITEMS: usize = 10_000;
const OUTSIDE_STEPS: [usize; 3] = [0, 800, TOTAL_ITEMS - TARGET_ITEMS];
const RUNS: usize = 30;
const BATCH: usize = 100;
const TARGET: [&str; 3] = ["bench", "target", "memories"];

const WORDS: [&str; 24] = [
    "pizza", "pasta", "jazz", "rock", "piano", "guitar", "coffee", "tea", "running", "chess",
    "paris", "rome", "oslo", "kyoto", "summer", "winter", "cats", "dogs", "books", "films",
    "sushi", "salad", "hiking", "sailing",
];

/// A deterministic pseudo-random sentence of 8 words.
fn sentence(seed: usize) -> String {
    let mut x = (seed as u64)
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..8)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            WORDS[(x >> 33) as usize % WORDS.len()]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn item(seed: usize) -> serde_json::Value {
    json!({"memory": sentence(seed), "rank": seed % 100})
}

async fn put_range(
    store: &dyn Store,
    ns: &[String],
    from: usize,
    to: usize,
) -> weaver::Result<Duration> {
    let started = Instant::now();
    let mut i = from;
    while i < to {
        let end = (i + BATCH).min(to);
        let ops = (i..end)
            .map(|k| Op::put(ns, format!("k{k:05}"), item(k)))
            .collect();
        store.batch(ops).await?;
        i = end;
    }
    Ok(started.elapsed())
}

/// Median and 95th percentile of `RUNS` runs of `search`, in microseconds.
async fn time_search(
    store: &dyn Store,
    prefix: &[&str],
    search: &Search,
) -> weaver::Result<(u128, u128, usize)> {
    let mut took = Vec::with_capacity(RUNS);
    let mut n = 0;
    for _ in 0..RUNS {
        let started = Instant::now();
        n = store.search(prefix, search.clone()).await?.len();
        took.push(started.elapsed().as_micros());
    }
    took.sort_unstable();
    Ok((took[RUNS / 2], took[RUNS * 95 / 100], n))
}

async fn run(name: &str, store: Arc<dyn Store>) -> weaver::Result<()> {
    println!("\n== {name} ==");
    let target: Vec<String> = TARGET.iter().map(|s| s.to_string()).collect();
    let took = put_range(store.as_ref(), &target, 0, TARGET_ITEMS).await?;
    println!("put {TARGET_ITEMS} target items (batches of {BATCH}): {took:?}");
    let started = Instant::now();
    for k in 0..100 {
        store
            .put(&["bench", "single"], &format!("s{k}"), item(k))
            .await?;
    }
    let single = started.elapsed() / 100;
    println!("single put: {} µs each (100 puts)", single.as_micros());
    store
        .batch(
            (0..100)
                .map(|k| Op::delete(&["bench", "single"], format!("s{k}")))
                .collect(),
        )
        .await?;

    let searches = [
        ("query 'pizza jazz'", Search::query("pizza jazz").limit(10)),
        ("no query (ns/key order)", Search::new().limit(10)),
        (
            "filter rank>=50",
            Search::new()
                .filter(json!({"rank": {"$gte": 50}}))
                .limit(10),
        ),
    ];
    println!(
        "{:>8} {:>8} | {:<26} {:>10} {:>10} | {:>22}",
        "outside",
        "total",
        "search in prefix (200)",
        "median µs",
        "p95 µs",
        "whole store: median µs"
    );
    let mut outside = 0;
    for step in OUTSIDE_STEPS {
        // Items outside the prefix: 49 other users' memories per 50, and
        // siblings sharing the prefix's first labels.
        let mut k = outside;
        while k < step {
            let end = (k + 1_000).min(step);
            let user = format!("user-{:04}", k / 50);
            let ns: Vec<String> = ["bench".to_owned(), user, "memories".to_owned()].into();
            put_range(store.as_ref(), &ns, TARGET_ITEMS + k, TARGET_ITEMS + end).await?;
            k = end;
        }
        outside = step;
        for (label, search) in &searches {
            let (median, p95, n) = time_search(store.as_ref(), &TARGET, search).await?;
            assert!(n <= 10);
            let (whole, _, _) = time_search(store.as_ref(), &["bench"], search).await?;
            println!(
                "{outside:>8} {:>8} | {label:<26} {median:>10} {p95:>10} | {whole:>22}",
                outside + TARGET_ITEMS
            );
        }
    }
    let started = Instant::now();
    let all = store.search(&["bench"], Search::new().limit(10)).await?;
    assert_eq!(all.len(), 10);
    println!(
        "total {} items; plain whole-store page: {:?}",
        outside + TARGET_ITEMS,
        started.elapsed()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let skip_pg = std::env::args().any(|a| a == "--skip-postgres");
    run("in-memory", Arc::new(InMemoryStore::new())).await?;

    let path = std::env::temp_dir().join(format!("weaver-store-bench-{}.db", std::process::id()));
    let pool = SqlitePoolOptions::new()
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true),
        )
        .await?;
    migrate::up(&pool, &[Adapter::Store], None).await?;
    run(
        &format!("SQLite ({})", path.display()),
        Arc::new(SqliteStore::new(pool.clone())),
    )
    .await?;
    pool.close().await;
    let _ = std::fs::remove_file(&path);

    if !skip_pg {
        let url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect(&url)
            .await
            .map_err(|e| format!("PostgreSQL is unreachable at {url}: {e}"))?;
        let schema = format!("weaver_store_bench_{}", std::process::id());
        migrate::up(&PgSchema::new(&pool, &schema)?, &[Adapter::Store], None).await?;
        let store = PostgresStore::new(pool.clone()).with_prefix(&schema)?;
        let result = run(&format!("PostgreSQL (schema {schema})"), Arc::new(store)).await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA \"{schema}\" CASCADE"
        )))
        .execute(&pool)
        .await?;
        result?;
    }
    Ok(())
}
