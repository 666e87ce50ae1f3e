//! Codecs and encryption.
