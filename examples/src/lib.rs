//! Code the example programs share: the Redis adapter on weaver's small
//! storage contract ([`SnapshotAdapter`](weaver::checkpoint::SnapshotAdapter)).

pub mod redis_adapter;
