//! A fresh MongoDB database per test, on the server at `MONGODB_URL`
//! (default `mongodb://127.0.0.1:27017`; `.ci/mongo.sh` starts one).

use mongodb::Client;
use mongodb::bson::doc;
use mongodb::options::ClientOptions;

/// Keeps the saver conformance suite and the lease tests apart on the
/// MongoDB test server. The suite's largest records (up to the record size
/// limit) hold the Python server for seconds, longer than the lease tests'
/// leases (300 ms in some, 5 s in others) run between two renewals: the
/// suite takes it exclusively ([`stalling`]), each lease test shared
/// ([`lease_timed`]), so lease tests still run beside each other.
static SERVER_STALLS: std::sync::LazyLock<tokio::sync::RwLock<()>> =
    std::sync::LazyLock::new(|| tokio::sync::RwLock::new(()));

/// Held while a test does what stalls the MongoDB test server for seconds.
pub async fn stalling() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    SERVER_STALLS.write().await
}

/// Held while a test whose leases must be renewed in time runs on the
/// MongoDB test server.
pub async fn lease_timed() -> tokio::sync::RwLockReadGuard<'static, ()> {
    SERVER_STALLS.read().await
}

/// The MongoDB server the tests use.
pub fn mongo_url() -> String {
    std::env::var("MONGODB_URL").unwrap_or_else(|_| "mongodb://127.0.0.1:27017".to_owned())
}

/// A database of its own, named uniquely; [`MongoDb::drop_db`] removes it.
pub struct MongoDb {
    /// A client connected to the server.
    pub client: Client,
    /// The database's name.
    pub name: String,
}

impl MongoDb {
    /// A fresh database; panics, saying how to start one, when no server
    /// answers.
    pub async fn new() -> MongoDb {
        let url = mongo_url();
        let mut options = ClientOptions::parse(&url)
            .await
            .unwrap_or_else(|e| panic!("MONGODB_URL `{url}` is not a MongoDB URI: {e}"));
        options.server_selection_timeout = Some(std::time::Duration::from_secs(5));
        let client = Client::with_options(options).unwrap();
        if let Err(e) = client
            .database("admin")
            .run_command(doc! { "ping": 1 })
            .await
        {
            panic!(
                "no MongoDB server answers at {url} ({e}): start one with `.ci/mongo.sh` \
                 (or set MONGODB_URL)"
            );
        }
        let name = format!("weaver_test_{}", uuid::Uuid::now_v7().simple());
        MongoDb { client, name }
    }

    /// Drops the database.
    pub async fn drop_db(&self) {
        self.client.database(&self.name).drop().await.unwrap();
    }
}
