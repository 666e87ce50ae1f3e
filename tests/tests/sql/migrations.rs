//! Migrations: v1 → v2 upgrade with data, down/up round trips, concurrent `up`.
