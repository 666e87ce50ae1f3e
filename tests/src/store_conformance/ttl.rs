//! The suite's TTL checks, sound on a slow server: each check that an item
//! is still alive is made only when the time measured since its write (or
//! its refresh) proves it must be; when an operation took too long for
//! that, the check runs again on a fresh store with every TTL and pause
//! scaled up, and fails only when even the slowest scale was too slow.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use weaver::store::{ListNamespaces, PutOptions, Search, Store, StoreConfig};

use super::keys;

/// The scales TTLs and pauses are tried at, in turn.
const SCALES: [u32; 3] = [1, 4, 16];

/// A check could not decide: an operation took longer than its window.
#[derive(Debug)]
pub(super) struct TooSlow(&'static str);

/// Asserts that a read made within `window` of `since` found the item, or
/// reports [`TooSlow`] when the read ended after the window (the item may
/// rightly have expired by then).
fn alive(found: bool, since: Instant, window: Duration, what: &'static str) -> Result<(), TooSlow> {
    if found {
        return Ok(());
    }
    if since.elapsed() >= window {
        return Err(TooSlow(what));
    }
    panic!("{what}: the item expired before its TTL");
}

/// Runs `check` at each scale (each run on a fresh store of its own)
/// until one run decides; panics when none does.
pub(super) async fn at_some_scale(what: &str, check: impl AsyncFn(u32) -> Result<(), TooSlow>) {
    let mut slow = Vec::new();
    for scale in SCALES {
        match check(scale).await {
            Ok(()) => return,
            Err(TooSlow(step)) => {
                eprintln!(
                    "{what}: `{step}` was too slow to decide at scale {scale}; again, slower"
                );
                slow.push(step);
            }
        }
    }
    panic!("{what}: the store was too slow to check TTLs at any scale: {slow:?}");
}

fn ms(millis: u64, scale: u32) -> Duration {
    Duration::from_millis(millis * u64::from(scale))
}

pub(super) async fn ttl_and_sweep(store: &dyn Store, scale: u32) -> Result<(), TooSlow> {
    let ns = ["ttl"];
    let (ttl, pause) = (ms(300, scale), ms(400, scale));
    let short = PutOptions::new().ttl(ttl);
    let written = Instant::now();
    store
        .put_with(&ns, "a", json!({"t": "pizza"}), short.clone())
        .await
        .unwrap();
    store
        .put_with(&["ttl", "x"], "b", json!({"t": "pizza"}), short.clone())
        .await
        .unwrap();
    store
        .put_with(&["ttl2"], "c", json!({}), short.clone())
        .await
        .unwrap();
    store
        .put(&ns, "forever", json!({"t": "pizza"}))
        .await
        .unwrap();
    let found = store.get(&ns, "a").await.unwrap().is_some();
    alive(found, written, ttl, "alive before its TTL")?;
    tokio::time::sleep(pause).await;
    assert!(
        store.get(&ns, "a").await.unwrap().is_none(),
        "expired: invisible to get"
    );
    let found = store
        .search(&["ttl"], Search::query("pizza"))
        .await
        .unwrap();
    assert_eq!(
        keys(&found),
        ["ttl/forever"],
        "expired: invisible to search"
    );
    assert_eq!(
        store.list_namespaces(ListNamespaces::new()).await.unwrap(),
        vec![vec!["ttl".to_owned()]],
        "expired: invisible to list_namespaces"
    );
    // Whatever lazy deletion already removed, the sweep removes the rest and
    // nothing live.
    let swept = store.sweep().await.unwrap();
    assert!(swept <= 3, "swept {swept}");
    assert_eq!(store.sweep().await.unwrap(), 0);
    assert!(store.get(&ns, "forever").await.unwrap().is_some());

    // A put over an expired item starts a new item (new created_at).
    let written = Instant::now();
    store
        .put_with(&ns, "d", json!(1), short.clone())
        .await
        .unwrap();
    let old = store.get(&ns, "d").await.unwrap();
    alive(old.is_some(), written, ttl, "a fresh item is alive")?;
    let old = old.unwrap();
    tokio::time::sleep(pause).await;
    let put = store.put(&ns, "d", json!(2)).await.unwrap();
    let new = store.get(&ns, "d").await.unwrap().unwrap();
    assert!(new.created_at > old.created_at);
    assert_eq!(put.created_at, put.updated_at, "a put over an expired item");
    assert_eq!(put, new);
    // Overwriting without a TTL makes it permanent.
    tokio::time::sleep(pause).await;
    assert!(store.get(&ns, "d").await.unwrap().is_some());

    // Sweep with nothing expired only reports expired rows.
    store.put_with(&ns, "e", json!(1), short).await.unwrap();
    tokio::time::sleep(pause).await;
    assert_eq!(store.sweep().await.unwrap(), 1);
    Ok(())
}

pub(super) async fn refresh_on_read(store: &dyn Store, scale: u32) -> Result<(), TooSlow> {
    let ns = ["refresh"];
    let (life, pause) = (ms(1_000, scale), ms(600, scale));
    let ttl = PutOptions::new().ttl(life);
    let written = Instant::now();
    for k in ["by_get", "by_search", "untouched", "read_plain"] {
        store
            .put_with(&ns, k, json!({"k": k}), ttl.clone())
            .await
            .unwrap();
    }
    tokio::time::sleep(pause).await;
    let got_at = Instant::now();
    let by_get = store.get_with(&ns, "by_get", Some(true)).await.unwrap();
    alive(by_get.is_some(), written, life, "a get restarting the TTL")?;
    let plain = store.get(&ns, "read_plain").await.unwrap();
    alive(plain.is_some(), written, life, "a plain get")?;
    let searched_at = Instant::now();
    let hit = store
        .search(
            &ns,
            Search::new()
                .filter(json!({"k": "by_search"}))
                .refresh_ttl(true),
        )
        .await
        .unwrap();
    alive(hit.len() == 1, written, life, "a search restarting TTLs")?;
    tokio::time::sleep(pause).await;
    let by_get = store.get(&ns, "by_get").await.unwrap();
    alive(by_get.is_some(), got_at, life, "get refreshed the TTL")?;
    let by_search = store.get(&ns, "by_search").await.unwrap();
    alive(
        by_search.is_some(),
        searched_at,
        life,
        "search refreshed the TTL",
    )?;
    assert!(store.get(&ns, "untouched").await.unwrap().is_none());
    assert!(
        store.get(&ns, "read_plain").await.unwrap().is_none(),
        "plain reads do not refresh"
    );
    Ok(())
}

/// The store's default TTL and refresh-on-read, from its config.
pub(super) async fn configured<F, Fut>(make: &F, scale: u32) -> Result<(), TooSlow>
where
    F: Fn(StoreConfig) -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    let (life, pause) = (ms(1_000, scale), ms(600, scale));
    let store = make(StoreConfig::new().default_ttl(life).refresh_on_read(true)).await;
    let written = Instant::now();
    store.put(&["cfg"], "read", json!(1)).await.unwrap();
    store.put(&["cfg"], "unread", json!(1)).await.unwrap();
    store
        .put_with(
            &["cfg"],
            "long",
            json!(1),
            PutOptions::new().ttl(Duration::from_secs(600)),
        )
        .await
        .unwrap();
    tokio::time::sleep(pause).await;
    let read_at = Instant::now();
    let read = store.get(&["cfg"], "read").await.unwrap();
    alive(read.is_some(), written, life, "a get under the default TTL")?;
    let unread = store
        .get_with(&["cfg"], "unread", Some(false))
        .await
        .unwrap();
    alive(unread.is_some(), written, life, "a get not refreshing")?;
    tokio::time::sleep(pause).await;
    let read = store.get(&["cfg"], "read").await.unwrap();
    alive(read.is_some(), read_at, life, "refreshed by default")?;
    assert!(
        store.get(&["cfg"], "unread").await.unwrap().is_none(),
        "default TTL applies"
    );
    assert!(
        store.get(&["cfg"], "long").await.unwrap().is_some(),
        "explicit TTL wins"
    );
    Ok(())
}
