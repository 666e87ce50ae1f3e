//! NUL characters, which PostgreSQL's text and JSONB cannot hold, get the
//! same answer from every saver: stripped from checkpoint metadata, an
//! `Error::InvalidArgument` in an identifier or a metadata filter value.

use serde_json::json;
use weaver::checkpoint::{CheckpointRef, ListFilter, PendingWrite};
use weaver::prelude::*;
use weaver_tests::states::Steps;

use super::common::{EverySaver, cp, two_step};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_run_metadata_or_a_configurable_value_is_stripped_on_every_saver() {
    let every = EverySaver::new().await;
    let mut failures = Vec::new();
    for (name, saver) in &every.savers {
        let graph = two_step(saver.clone());
        let config = RunConfig::thread("t")
            .metadata("no\0te", json!({"deep": ["a\0b"]}))
            .configurable("user", "x\0y");
        if let Err(e) = graph.invoke(Steps::default(), &config).await {
            failures.push(format!("{name}: invoke failed: {e}"));
            continue;
        }
        let head = saver.get_tuple(&CheckpointRef::latest("t")).await.unwrap();
        let extra = head.map(|t| t.metadata.extra).unwrap_or_default();
        if extra.get("note") != Some(&json!({"deep": ["ab"]}))
            || extra.get("user") != Some(&json!("xy"))
        {
            failures.push(format!("{name}: metadata stored as {extra:?}"));
        }
        // A saver called directly strips them the same way.
        let mut new = cp("direct", "c1", None, None);
        new.metadata.extra.insert("k".into(), json!("\0v\0"));
        saver.put(new).await.unwrap();
        let got = saver
            .get_tuple(&CheckpointRef::latest("direct"))
            .await
            .unwrap();
        if got.map(|t| t.metadata.extra["k"].clone()) != Some(json!("v")) {
            failures.push(format!("{name}: a direct put kept the NULs"));
        }
    }
    every.done().await;
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_an_identifier_or_a_filter_value_is_an_invalid_argument_on_every_saver() {
    let every = EverySaver::new().await;
    let mut failures = Vec::new();
    for (name, saver) in &every.savers {
        saver.put(cp("t", "c1", None, None)).await.unwrap();
        let bad = "a\0b";
        let write = |task: &str| PendingWrite {
            task_id: task.to_owned(),
            task_path: "node".into(),
            idx: 0,
            channel: "foo".into(),
            value: json!(1),
        };
        let mut results: Vec<(&str, weaver::Result<()>)> = vec![
            (
                "put thread",
                saver.put(cp(bad, "c1", None, None)).await.map(drop),
            ),
            (
                "put id",
                saver.put(cp("t2", bad, None, None)).await.map(drop),
            ),
            (
                "get_tuple",
                saver.get_tuple(&CheckpointRef::latest(bad)).await.map(drop),
            ),
            (
                "list thread",
                saver.list(&ListFilter::thread(bad)).await.map(drop),
            ),
            (
                "list filter value",
                saver
                    .list(&ListFilter::thread("t").metadata("writer", bad))
                    .await
                    .map(drop),
            ),
            (
                "list nested filter value",
                saver
                    .list(&ListFilter::default().metadata("writer", json!({"k": [bad]})))
                    .await
                    .map(drop),
            ),
            (
                "put_writes task",
                saver
                    .put_writes(&CheckpointRef::latest("t").at("c1"), vec![write(bad)])
                    .await,
            ),
            ("delete_thread", saver.delete_thread(bad).await),
            ("copy_thread", saver.copy_thread("t", bad).await),
            ("thread_info", saver.thread_info(bad).await.map(drop)),
        ];
        let graph = two_step(saver.clone());
        results.push((
            "invoke",
            graph
                .invoke(Steps::default(), &RunConfig::thread(bad))
                .await
                .map(drop),
        ));
        results.push((
            "get_state",
            graph.get_state(&RunConfig::thread(bad)).await.map(drop),
        ));
        for (case, r) in results {
            if !matches!(r, Err(weaver::Error::InvalidArgument { .. })) {
                failures.push(format!("{name}: {case}: {r:?}"));
            }
        }
        // Nothing was written, and the saver still serves.
        let threads = saver.list_threads(None, 0).await.unwrap();
        if threads.len() != 1 || threads[0].thread_id != "t" {
            failures.push(format!("{name}: threads after the refusals: {threads:?}"));
        }
    }
    every.done().await;
    assert!(failures.is_empty(), "{failures:#?}");
}
