//! [`SharedVec`]: a growable sequence whose clones share their items.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::iter::FusedIterator;
use std::marker::PhantomData;
use std::ops::Index;
use std::sync::Arc;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Items per chunk.
const CHUNK: usize = 64;

/// A growable sequence whose clones share their items, for long state fields
/// such as a conversation's messages.
///
/// The items live in reference-counted chunks of 64. Cloning a `SharedVec`
/// copies one pointer per chunk, not the items, and dropping a clone frees
/// nothing the original still holds. Pushing onto a clone copies at most the
/// last, partly filled chunk. Everything else reads like a `Vec`: it indexes,
/// iterates, compares, hashes and serializes as a sequence (a JSON array, with
/// the JSON Schema of `Vec<T>`).
///
/// A state history builds each snapshot by cloning the one before it and
/// appending what its checkpoint stored, so a `#[reducer(delta)]` field of
/// this type costs each snapshot a few pointers however long the field grows,
/// where a `Vec<T>` copies (or, with `Arc` items, counts) every item:
///
/// ```
/// use weaver::prelude::*;
/// use weaver::state::SharedVec;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// struct Chat {
///     #[reducer(delta)]
///     messages: SharedVec<String>,
/// }
///
/// let said: Vec<String> = (0..100).map(|i| format!("message {i}")).collect();
/// let mut chat = Chat::default();
/// chat.apply(vec![ChatUpdate::default().messages(said)]).unwrap();
/// let before = chat.clone();
/// chat.messages.push("one more".to_owned());
/// assert_eq!(before.messages.len(), 100);
/// assert_eq!(chat.messages.last().map(String::as_str), Some("one more"));
/// // The clone and the original share the first 64 items (a full chunk).
/// assert!(std::ptr::eq(&before.messages[0], &chat.messages[0]));
/// ```
pub struct SharedVec<T> {
    /// Full chunks of `CHUNK` items, the last one possibly partly filled;
    /// never an empty chunk.
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

impl<T> SharedVec<T> {
    /// An empty sequence.
    pub const fn new() -> Self {
        SharedVec {
            chunks: Vec::new(),
            len: 0,
        }
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no items.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The item at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&T> {
        self.chunks.get(index / CHUNK)?.get(index % CHUNK)
    }

    /// The first item.
    pub fn first(&self) -> Option<&T> {
        self.chunks.first()?.first()
    }

    /// The last item.
    pub fn last(&self) -> Option<&T> {
        self.chunks.last()?.last()
    }

    /// The items in order.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter {
            chunks: self.chunks.iter(),
            front: [].iter(),
            back: [].iter(),
            remaining: self.len,
        }
    }

    /// Appends `item`, copying the last chunk first if a clone shares it.
    pub fn push(&mut self, item: T)
    where
        T: Clone,
    {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => Arc::make_mut(last).push(item),
            _ => self.chunks.push(Arc::new(new_chunk(item))),
        }
        self.len += 1;
    }

    /// The items, copied into a `Vec`.
    pub fn to_vec(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.iter().cloned().collect()
    }
}

fn new_chunk<T>(first: T) -> Vec<T> {
    let mut chunk = Vec::with_capacity(CHUNK);
    chunk.push(first);
    chunk
}

/// Collects owned items into chunks, with no `Clone` bound.
struct Builder<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Builder<T> {
    fn new() -> Self {
        Builder {
            chunks: Vec::new(),
            len: 0,
        }
    }

    fn push(&mut self, item: T) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(item),
            _ => self.chunks.push(new_chunk(item)),
        }
        self.len += 1;
    }

    fn finish(self) -> SharedVec<T> {
        SharedVec {
            chunks: self.chunks.into_iter().map(Arc::new).collect(),
            len: self.len,
        }
    }
}

impl<T> Default for SharedVec<T> {
    fn default() -> Self {
        SharedVec::new()
    }
}

impl<T> Clone for SharedVec<T> {
    fn clone(&self) -> Self {
        SharedVec {
            chunks: self.chunks.clone(),
            len: self.len,
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for SharedVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: PartialEq<U>, U> PartialEq<SharedVec<U>> for SharedVec<T> {
    fn eq(&self, other: &SharedVec<U>) -> bool {
        self.len == other.len && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl<T: Eq> Eq for SharedVec<T> {}

impl<T: PartialEq<U>, U> PartialEq<[U]> for SharedVec<T> {
    fn eq(&self, other: &[U]) -> bool {
        self.len == other.len() && self.iter().zip(other).all(|(a, b)| a == b)
    }
}

impl<T: PartialEq<U>, U, const N: usize> PartialEq<[U; N]> for SharedVec<T> {
    fn eq(&self, other: &[U; N]) -> bool {
        *self == other[..]
    }
}

impl<T: PartialEq<U>, U> PartialEq<Vec<U>> for SharedVec<T> {
    fn eq(&self, other: &Vec<U>) -> bool {
        *self == other[..]
    }
}

impl<T: Hash> Hash for SharedVec<T> {
    /// Hashes as a slice of the same items does.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.len);
        for item in self {
            item.hash(state);
        }
    }
}

impl<T> Index<usize> for SharedVec<T> {
    type Output = T;

    /// The item at `index`.
    ///
    /// # Panics
    ///
    /// If `index` is out of bounds, as a `Vec` does; [`get`](SharedVec::get)
    /// does not panic.
    fn index(&self, index: usize) -> &T {
        match self.get(index) {
            Some(item) => item,
            None => panic!(
                "index out of bounds: the len is {} but the index is {index}",
                self.len
            ),
        }
    }
}

impl<T> FromIterator<T> for SharedVec<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut b = Builder::new();
        for item in iter {
            b.push(item);
        }
        b.finish()
    }
}

impl<T> From<Vec<T>> for SharedVec<T> {
    fn from(items: Vec<T>) -> Self {
        items.into_iter().collect()
    }
}

impl<T: Clone> From<&[T]> for SharedVec<T> {
    fn from(items: &[T]) -> Self {
        items.iter().cloned().collect()
    }
}

impl<T: Clone> From<SharedVec<T>> for Vec<T> {
    fn from(items: SharedVec<T>) -> Self {
        items.into_iter().collect()
    }
}

impl<T: Clone> Extend<T> for SharedVec<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        for item in iter {
            self.push(item);
        }
    }
}

/// Borrowing iterator of a [`SharedVec`].
#[derive(Debug, Clone)]
pub struct Iter<'a, T> {
    chunks: std::slice::Iter<'a, Arc<Vec<T>>>,
    front: std::slice::Iter<'a, T>,
    back: std::slice::Iter<'a, T>,
    remaining: usize,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        loop {
            if let Some(item) = self.front.next() {
                self.remaining -= 1;
                return Some(item);
            }
            match self.chunks.next() {
                Some(chunk) => self.front = chunk.iter(),
                None => {
                    let item = self.back.next()?;
                    self.remaining -= 1;
                    return Some(item);
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<T> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(item) = self.back.next_back() {
                self.remaining -= 1;
                return Some(item);
            }
            match self.chunks.next_back() {
                Some(chunk) => self.back = chunk.iter(),
                None => {
                    let item = self.front.next_back()?;
                    self.remaining -= 1;
                    return Some(item);
                }
            }
        }
    }
}

impl<T> ExactSizeIterator for Iter<'_, T> {}

impl<T> FusedIterator for Iter<'_, T> {}

impl<'a, T> IntoIterator for &'a SharedVec<T> {
    type Item = &'a T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

/// Owning iterator of a [`SharedVec`]: moves the items of chunks no clone
/// shares, and clones the others.
#[derive(Debug)]
pub struct IntoIter<T> {
    chunks: std::vec::IntoIter<Arc<Vec<T>>>,
    current: std::vec::IntoIter<T>,
    remaining: usize,
}

impl<T: Clone> Iterator for IntoIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        loop {
            if let Some(item) = self.current.next() {
                self.remaining -= 1;
                return Some(item);
            }
            let chunk = self.chunks.next()?;
            self.current = Arc::try_unwrap(chunk)
                .unwrap_or_else(|shared| shared.as_ref().clone())
                .into_iter();
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<T: Clone> ExactSizeIterator for IntoIter<T> {}

impl<T: Clone> FusedIterator for IntoIter<T> {}

impl<T: Clone> IntoIterator for SharedVec<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    fn into_iter(self) -> IntoIter<T> {
        IntoIter {
            chunks: self.chunks.into_iter(),
            current: Vec::new().into_iter(),
            remaining: self.len,
        }
    }
}

impl<T: Serialize> Serialize for SharedVec<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for SharedVec<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Items<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for Items<T> {
            type Value = SharedVec<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut b = Builder::new();
                while let Some(item) = seq.next_element()? {
                    b.push(item);
                }
                Ok(b.finish())
            }
        }

        deserializer.deserialize_seq(Items(PhantomData))
    }
}

impl<T: JsonSchema> JsonSchema for SharedVec<T> {
    fn inline_schema() -> bool {
        <Vec<T>>::inline_schema()
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        <Vec<T>>::schema_name()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        <Vec<T>>::schema_id()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        <Vec<T>>::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::{CHUNK, SharedVec};

    fn numbers(n: usize) -> SharedVec<String> {
        (0..n).map(|i| i.to_string()).collect()
    }

    #[test]
    fn reads_like_the_vec_it_was_built_from_at_every_length() {
        for n in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5] {
            let want: Vec<String> = (0..n).map(|i| i.to_string()).collect();
            let built = numbers(n);
            let mut pushed = SharedVec::new();
            for s in &want {
                pushed.push(s.clone());
            }
            for v in [&built, &pushed] {
                assert_eq!(v.len(), n);
                assert_eq!(v.is_empty(), n == 0);
                assert_eq!(*v, want);
                assert_eq!(
                    v.iter().rev().cloned().collect::<Vec<_>>(),
                    want.iter().rev().cloned().collect::<Vec<_>>()
                );
                assert_eq!(v.iter().len(), n);
                assert_eq!(v.first(), want.first());
                assert_eq!(v.last(), want.last());
                assert_eq!(v.get(n), None);
                assert_eq!(v.to_vec(), want);
                assert_eq!(Vec::from(v.clone()), want);
                assert_eq!(serde_json::to_value(v).unwrap(), serde_json::json!(want));
            }
            // Both ends at once meet in the middle without repeating an item.
            let mut it = built.iter();
            let mut seen = Vec::new();
            while let (Some(a), b) = (it.next(), it.next_back()) {
                seen.push(a.clone());
                seen.extend(b.cloned());
            }
            assert_eq!(seen.len(), n);
            let back: SharedVec<String> = serde_json::from_value(serde_json::json!(want)).unwrap();
            assert_eq!(back, built);
        }
    }

    #[test]
    fn clones_share_items_and_pushing_onto_one_leaves_the_other() {
        let original = numbers(2 * CHUNK + 3);
        let mut copy = original.clone();
        assert!(std::ptr::eq(&original[0], &copy[0]));
        assert!(std::ptr::eq(&original[2 * CHUNK + 2], &copy[2 * CHUNK + 2]));
        copy.push("new".into());
        copy.extend(["newer".to_owned()]);
        assert_eq!(original.len(), 2 * CHUNK + 3);
        assert_eq!(original.last().map(String::as_str), Some("130"));
        assert_eq!(copy.len(), 2 * CHUNK + 5);
        assert_eq!(copy.last().map(String::as_str), Some("newer"));
        // Full chunks stay shared; only the partial last one was copied.
        assert!(std::ptr::eq(&original[CHUNK], &copy[CHUNK]));
        assert!(!std::ptr::eq(&original[2 * CHUNK], &copy[2 * CHUNK]));
        // Owned iteration of a shared sequence clones; the original is whole.
        let owned: Vec<String> = copy.clone().into_iter().collect();
        assert_eq!(owned.len(), copy.len());
        assert_eq!(original, numbers(2 * CHUNK + 3));
    }

    #[test]
    fn a_non_sequence_is_a_decode_error_and_out_of_bounds_get_is_none() {
        assert!(serde_json::from_value::<SharedVec<String>>(serde_json::json!({"a": 1})).is_err());
        assert!(serde_json::from_value::<SharedVec<u8>>(serde_json::json!([1, "x"])).is_err());
        assert_eq!(numbers(3).get(usize::MAX), None);
    }

    #[test]
    fn hashes_and_describes_itself_as_the_same_vec_does() {
        use std::hash::{BuildHasher, RandomState};
        let s = RandomState::new();
        let v: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        assert_eq!(s.hash_one(numbers(100)), s.hash_one(&v));
        assert_eq!(
            format!("{:?}", numbers(3)),
            format!("{:?}", ["0", "1", "2"])
        );
        let mut g = schemars::SchemaGenerator::default();
        assert_eq!(
            g.subschema_for::<SharedVec<String>>(),
            g.subschema_for::<Vec<String>>()
        );
    }
}
