//! [`SharedVec`]: a growable sequence whose clones share their items.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::iter::FusedIterator;
use std::marker::PhantomData;
use std::ops::Index;
use std::sync::{Arc, OnceLock};

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Items per chunk.
const CHUNK: usize = 64;

/// A growable sequence whose clones share their items, for long state fields
/// such as a conversation's messages.
///
/// The items live in reference-counted chunks of 64 write-once slots.
/// Cloning a `SharedVec` copies one pointer per chunk, not the items, and
/// dropping a clone frees nothing the original still holds. Pushing onto a
/// clone writes the next slot of the shared chunk, which the original does
/// not see; only when two clones of the same sequence both push does the
/// second copy the items of the last chunk (at most 63) to a chunk of its own.
/// (An item a clone appended stays in its chunk until every sequence sharing
/// the chunk is dropped, even if that clone is dropped first.) Everything else
/// reads like a `Vec`: it indexes, iterates, compares, hashes and serializes
/// as a sequence (a JSON array, with the JSON Schema of `Vec<T>`).
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
/// // The clone and the original share their items.
/// assert!(std::ptr::eq(&before.messages[0], &chat.messages[0]));
/// ```
pub struct SharedVec<T> {
    /// Chunks of `CHUNK` write-once slots; this sequence's items are the
    /// first `len` slots in order, all set. Clones share chunks, so a slot
    /// past `len` may hold another clone's item.
    chunks: Vec<Chunk<T>>,
    len: usize,
}

/// `CHUNK` slots, each set at most once.
type Chunk<T> = Arc<[OnceLock<T>]>;

fn new_chunk<T>() -> Chunk<T> {
    (0..CHUNK).map(|_| OnceLock::new()).collect()
}

impl<T> SharedVec<T> {
    /// An empty sequence.
    ///
    /// ```
    /// use weaver::state::SharedVec;
    ///
    /// let mut items: SharedVec<u32> = SharedVec::new();
    /// items.push(1);
    /// assert_eq!(items.len(), 1);
    /// ```
    pub const fn new() -> Self {
        SharedVec {
            chunks: Vec::new(),
            len: 0,
        }
    }

    /// The number of items.
    ///
    /// ```
    /// use weaver::state::SharedVec;
    ///
    /// let mut items = SharedVec::new();
    /// items.push("a");
    /// let copy = items.clone();
    /// items.push("b");
    /// // The clone does not see what was pushed after it was made.
    /// assert_eq!((items.len(), copy.len()), (2, 1));
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no items.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The item at `index`, if there is one.
    ///
    /// ```
    /// use weaver::state::SharedVec;
    ///
    /// let mut items = SharedVec::new();
    /// items.push(10);
    /// items.push(20);
    /// assert_eq!(items.get(1), Some(&20));
    /// assert_eq!(items.get(2), None);
    /// assert_eq!(items[0], 10);
    /// ```
    pub fn get(&self, index: usize) -> Option<&T> {
        if index >= self.len {
            return None;
        }
        self.chunks.get(index / CHUNK)?.get(index % CHUNK)?.get()
    }

    /// The first item.
    pub fn first(&self) -> Option<&T> {
        self.get(0)
    }

    /// The last item.
    pub fn last(&self) -> Option<&T> {
        self.get(self.len.checked_sub(1)?)
    }

    /// The items in order.
    ///
    /// ```
    /// use weaver::state::SharedVec;
    ///
    /// let mut items = SharedVec::new();
    /// for word in ["to", "be"] {
    ///     items.push(word.to_owned());
    /// }
    /// let joined: Vec<&str> = items.iter().map(String::as_str).collect();
    /// assert_eq!(joined, ["to", "be"]);
    /// ```
    pub fn iter(&self) -> Iter<'_, T> {
        Iter {
            items: self,
            front: 0,
            back: self.len,
        }
    }

    /// Appends `item`. The slot after the last item is written in place,
    /// even in a chunk that clones share (they do not see it); only if a
    /// clone has already appended there does this copy the items of the
    /// last chunk first.
    ///
    /// ```
    /// use weaver::state::SharedVec;
    ///
    /// let mut a = SharedVec::new();
    /// a.push(1);
    /// let mut b = a.clone();
    /// a.push(2);
    /// b.push(3); // both push after the same item: each keeps its own
    /// assert_eq!(a.iter().copied().collect::<Vec<_>>(), [1, 2]);
    /// assert_eq!(b.iter().copied().collect::<Vec<_>>(), [1, 3]);
    /// ```
    pub fn push(&mut self, item: T)
    where
        T: Clone,
    {
        let at = self.len % CHUNK;
        if at == 0 {
            self.chunks.push(new_chunk());
        }
        if let Some(last) = self.chunks.last_mut()
            && let Err(item) = last[at].set(item)
        {
            let copy = new_chunk();
            for (to, from) in copy.iter().zip(&last[..at]) {
                if let Some(v) = from.get() {
                    let _ = to.set(v.clone());
                }
            }
            let _ = copy[at].set(item);
            *last = copy;
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

/// Collects owned items into fresh chunks, with no `Clone` bound.
struct Builder<T> {
    items: SharedVec<T>,
}

impl<T> Builder<T> {
    fn new() -> Self {
        Builder {
            items: SharedVec::new(),
        }
    }

    fn push(&mut self, item: T) {
        let v = &mut self.items;
        let at = v.len % CHUNK;
        if at == 0 {
            v.chunks.push(new_chunk());
        }
        // The chunks are this builder's own: every slot from `len` on is
        // empty, so the item is always stored.
        if let Some(last) = v.chunks.last() {
            let _ = last[at].set(item);
            v.len += 1;
        }
    }

    fn finish(self) -> SharedVec<T> {
        self.items
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
    /// Hashes the length, then each item in order: equal vectors hash
    /// alike (not necessarily as a slice does; `SharedVec` is not
    /// `Borrow<[T]>`).
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
pub struct Iter<'a, T> {
    items: &'a SharedVec<T>,
    front: usize,
    back: usize,
}

impl<T> Clone for Iter<'_, T> {
    fn clone(&self) -> Self {
        Iter { ..*self }
    }
}

impl<T: fmt::Debug> fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.clone()).finish()
    }
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        if self.front >= self.back {
            return None;
        }
        self.front += 1;
        self.items.get(self.front - 1)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.front;
        (n, Some(n))
    }
}

impl<T> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        self.back -= 1;
        self.items.get(self.back)
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
    chunks: std::vec::IntoIter<Chunk<T>>,
    current: Option<Chunk<T>>,
    /// The next slot of `current`.
    slot: usize,
    remaining: usize,
}

impl<T: Clone> Iterator for IntoIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.remaining == 0 {
            return None;
        }
        if self.slot == CHUNK || self.current.is_none() {
            self.current = Some(self.chunks.next()?);
            self.slot = 0;
        }
        let chunk = self.current.as_mut()?;
        let i = self.slot;
        self.slot += 1;
        self.remaining -= 1;
        match Arc::get_mut(chunk) {
            Some(slots) => slots[i].take(),
            None => chunk[i].get().cloned(),
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
            current: None,
            slot: 0,
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
        let n = 2 * CHUNK + 3;
        let original = numbers(n);
        let mut copy = original.clone();
        assert!(std::ptr::eq(&original[0], &copy[0]));
        assert!(std::ptr::eq(&original[n - 1], &copy[n - 1]));
        // The copy appends in the shared last chunk; the original does not
        // see it.
        copy.push("new".into());
        copy.extend(["newer".to_owned()]);
        assert_eq!(original, numbers(n));
        assert_eq!(original.get(n), None);
        assert_eq!(copy.len(), n + 2);
        assert_eq!(copy[n], "new");
        assert_eq!(copy.last().map(String::as_str), Some("newer"));
        assert!(std::ptr::eq(&original[n - 1], &copy[n - 1]));
        // The original appends where the copy already did: it moves to a
        // chunk of its own, and neither sees the other's item.
        let mut original = original;
        original.push("other".into());
        assert_eq!(original[n], "other");
        assert_eq!(copy[n], "new");
        assert_eq!(original.len(), n + 1);
        assert!(!std::ptr::eq(&original[n - 1], &copy[n - 1]));
        assert!(std::ptr::eq(&original[CHUNK], &copy[CHUNK]));
        let mut want = numbers(n).to_vec();
        want.push("other".into());
        assert_eq!(original, want);
        // Owned iteration of a shared sequence clones; the copy is whole.
        let owned: Vec<String> = original.clone().into_iter().collect();
        assert_eq!(owned, want);
        let alone: Vec<String> = numbers(n).into_iter().collect();
        assert_eq!(alone.len(), n);
        assert_eq!(copy.len(), n + 2);
    }

    #[test]
    fn clones_pushing_from_several_threads_each_keep_their_own_items() {
        let base = numbers(CHUNK + 10);
        let results: Vec<SharedVec<String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let mut mine = base.clone();
                    scope.spawn(move || {
                        for i in 0..100 {
                            mine.push(format!("t{t}-{i}"));
                        }
                        mine
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        assert_eq!(results.len(), 4);
        for (t, mine) in results.iter().enumerate() {
            assert_eq!(mine.len(), CHUNK + 110);
            assert_eq!(
                mine.iter().take(CHUNK + 10).cloned().collect::<Vec<_>>(),
                base.to_vec()
            );
            for i in 0..100 {
                assert_eq!(mine[CHUNK + 10 + i], format!("t{t}-{i}"));
            }
        }
        assert_eq!(base, numbers(CHUNK + 10));
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
