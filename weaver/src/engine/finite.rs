//! Refusing floats JSON cannot hold.
//!
//! `serde_json` writes NaN and the infinities as `null`, which no `f64`
//! field reads back: a state holding one would be stored, and every later
//! read of the thread would fail to decode it. [`check`] walks a value with a
//! serializer that does nothing but look at its floats, so such a value is
//! an encode error before anything is stored.

use std::fmt;

use serde::ser::{self, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::panics::caught;

/// `value` as JSON, refusing non-finite floats. `Serialize` is user code: a
/// panic in it is an [`Error::Encode`] of `what`, not an unwinding run.
pub(crate) fn encode_value<T: Serialize>(what: &str, value: &T) -> Result<Value> {
    caught("`Serialize`", || {
        check(value).map_err(|e| e.to_string())?;
        serde_json::to_value(value).map_err(|e| e.to_string())
    })
    .and_then(|encoded| encoded)
    .map_err(|e| Error::encode(what, e))
}

/// The error of [`check`]: the first non-finite float met.
#[derive(Debug)]
pub(crate) struct NonFinite(String);

impl fmt::Display for NonFinite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NonFinite {}

impl ser::Error for NonFinite {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        NonFinite(msg.to_string())
    }
}

/// `Ok` unless `value` serializes a NaN or an infinite float.
pub(crate) fn check<T: Serialize + ?Sized>(value: &T) -> Result<(), NonFinite> {
    value.serialize(Floats)
}

/// A serializer that only checks floats.
struct Floats;

fn float(v: f64) -> Result<(), NonFinite> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(NonFinite(format!(
            "{v} is not a JSON number (it would be stored as null and never read back)"
        )))
    }
}

impl ser::Serializer for Floats {
    type Ok = ();
    type Error = NonFinite;
    type SerializeSeq = Floats;
    type SerializeTuple = Floats;
    type SerializeTupleStruct = Floats;
    type SerializeTupleVariant = Floats;
    type SerializeMap = Floats;
    type SerializeStruct = Floats;
    type SerializeStructVariant = Floats;

    fn serialize_f32(self, v: f32) -> Result<(), NonFinite> {
        float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), NonFinite> {
        float(v)
    }
    fn serialize_bool(self, _: bool) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_i128(self, _: i128) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_u128(self, _: u128) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_char(self, _: char) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), NonFinite> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), NonFinite> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), NonFinite> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Result<(), NonFinite> {
        v.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Floats, NonFinite> {
        Ok(Floats)
    }
    fn serialize_tuple(self, _: usize) -> Result<Floats, NonFinite> {
        Ok(Floats)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Floats, NonFinite> {
        Ok(Floats)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Floats, NonFinite> {
        Ok(Floats)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Floats, NonFinite> {
        Ok(Floats)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Floats, NonFinite> {
        Ok(Floats)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Floats, NonFinite> {
        Ok(Floats)
    }
}

/// The compound serializers: each element is checked in turn.
macro_rules! elements {
    ($($trait:ident :: $method:ident),* $(,)?) => {$(
        impl ser::$trait for Floats {
            type Ok = ();
            type Error = NonFinite;
            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), NonFinite> {
                v.serialize(Floats)
            }
            fn end(self) -> Result<(), NonFinite> {
                Ok(())
            }
        }
    )*};
}

elements!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl ser::SerializeMap for Floats {
    type Ok = ();
    type Error = NonFinite;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), NonFinite> {
        k.serialize(Floats)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), NonFinite> {
        v.serialize(Floats)
    }
    fn end(self) -> Result<(), NonFinite> {
        Ok(())
    }
}

/// The struct serializers: each field is checked in turn.
macro_rules! fields {
    ($($trait:ident),* $(,)?) => {$(
        impl ser::$trait for Floats {
            type Ok = ();
            type Error = NonFinite;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                _: &'static str,
                v: &T,
            ) -> Result<(), NonFinite> {
                v.serialize(Floats)
            }
            fn end(self) -> Result<(), NonFinite> {
                Ok(())
            }
        }
    )*};
}

fields!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::check;

    #[test]
    fn only_non_finite_floats_are_refused() {
        assert!(check(&(1.5f64, "x", vec![Some(2.0f32)], BTreeMap::from([(1, 0.0)]))).is_ok());
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(check(&vec![(0, Some(bad))]).is_err());
            assert!(check(&BTreeMap::from([("k", bad)])).is_err());
        }
        assert!(check(&f32::NAN).is_err());
    }
}
