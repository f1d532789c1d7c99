//! A chunk's JSON opened only where the guard looks. Objects and arrays on the path to a text
//! (the chunk, its choices, a delta, its tool calls, their functions) are read into members, in
//! the one pass over the chunk; every other value stays the slice of the chunk it came as and is
//! written back verbatim. serde_json does all the reading and writing: a chunk costs one scan and
//! one write instead of a `serde_json::Value` tree built, edited and serialized again.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::value::RawValue;

/// A value: as it came, or opened, or set by the guard.
#[derive(Debug)]
pub(super) enum Json<'a> {
    Raw(&'a RawValue),
    Object(Obj<'a>),
    Array(Vec<Json<'a>>),
    Text(String),
    U64(u64),
    Null,
    /// A scalar where the path expected an object or array, as read.
    Other(serde_json::Value),
}

/// Which object on the path to the texts: what its members open into.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Chunk,
    Choice,
    Delta,
    ToolCall,
    /// An object whose members all stay as they came (`function`, `custom`, `audio`, ...).
    Leaf,
}

/// What a member on the path is expected to be.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Object(Shape),
    ArrayOf(Shape),
}

impl Shape {
    fn member(self, key: &str) -> Option<Expect> {
        match (self, key) {
            (Shape::Chunk, "choices") => Some(Expect::ArrayOf(Shape::Choice)),
            (Shape::Choice, "delta") => Some(Expect::Object(Shape::Delta)),
            (Shape::Delta, "tool_calls") => Some(Expect::ArrayOf(Shape::ToolCall)),
            (Shape::Delta, "function_call" | "audio") | (Shape::ToolCall, "function" | "custom") => {
                Some(Expect::Object(Shape::Leaf))
            }
            _ => None,
        }
    }
}

/// An object's members in their order, each key once (a repeated key keeps its last value, as
/// every JSON reader the client may use does: the guard must check what the client will see).
#[derive(Debug, Default)]
pub(super) struct Obj<'a>(Vec<(Cow<'a, str>, Json<'a>)>);

/// Up to this many members, a repeated key is looked for by a scan; past it, through an index
/// (an upstream's chunk is untrusted input, and a scan per member would be quadratic).
const SCAN_MEMBERS: usize = 16;

impl<'a> Obj<'a> {
    /// The chunk `json` is, if it is an object: the path to its texts opened.
    pub(super) fn parse(json: &'a str) -> Option<Self> {
        let mut de = serde_json::Deserializer::from_str(json);
        let obj = de.deserialize_map(ObjVisitor(Shape::Chunk, std::marker::PhantomData)).ok()?;
        de.end().ok()?;
        Some(obj)
    }

    pub(super) fn get(&self, key: &str) -> Option<&Json<'a>> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub(super) fn get_mut(&mut self, key: &str) -> Option<&mut Json<'a>> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key`, in its place if the object has it, else last.
    pub(super) fn insert(&mut self, key: &'static str, value: Json<'a>) {
        match self.get_mut(key) {
            Some(v) => *v = value,
            None => self.0.push((Cow::Borrowed(key), value)),
        }
    }

    /// `key`'s value, `Null` put in last if the object has no such key.
    pub(super) fn entry(&mut self, key: &'static str) -> &mut Json<'a> {
        let at = match self.0.iter().position(|(k, _)| k == key) {
            Some(at) => at,
            None => {
                self.0.push((Cow::Borrowed(key), Json::Null));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    /// `key`'s value as an object, made one if it is not (always `Some`).
    pub(super) fn object_at(&mut self, key: &'static str) -> Option<&mut Obj<'a>> {
        self.entry(key).make_object()
    }

    /// The members but those named in `skip`.
    pub(super) fn members_but<'s>(&'s self, skip: &'s [&str]) -> impl Iterator<Item = (&'s str, &'s Json<'a>)> {
        self.0.iter().filter(|(k, _)| !skip.contains(&k.as_ref())).map(|(k, v)| (k.as_ref(), v))
    }

    pub(super) fn push(&mut self, key: Cow<'a, str>, value: Json<'a>) {
        self.0.push((key, value));
    }
}

impl<'a> Json<'a> {
    /// The value as an object (objects on the path came opened).
    pub(super) fn object(&mut self) -> Option<&mut Obj<'a>> {
        match self {
            Json::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The value as an object; anything else is replaced by an empty one (always `Some`).
    pub(super) fn make_object(&mut self) -> Option<&mut Obj<'a>> {
        if self.object().is_none() {
            *self = Json::Object(Obj::default());
        }
        self.object()
    }

    /// The value as an array (arrays on the path came opened).
    pub(super) fn array(&mut self) -> Option<&mut Vec<Json<'a>>> {
        match self {
            Json::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The value as an array; anything else is replaced by an empty one (always `Some`).
    pub(super) fn make_array(&mut self) -> Option<&mut Vec<Json<'a>>> {
        if self.array().is_none() {
            *self = Json::Array(Vec::new());
        }
        self.array()
    }

    /// The string the value is, unescaped.
    pub(super) fn string(&self) -> Option<Cow<'_, str>> {
        match self {
            Json::Raw(r) if r.get().starts_with('"') => {
                let mut de = serde_json::Deserializer::from_str(r.get());
                de.deserialize_str(StrVisitor).ok()
            }
            Json::Text(s) => Some(Cow::Borrowed(s)),
            _ => None,
        }
    }

    /// Whether the value is an array with at least one element.
    pub(super) fn is_nonempty_array(&mut self) -> bool {
        self.array().is_some_and(|a| !a.is_empty())
    }

    pub(super) fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Raw(r) => serde_json::from_str(r.get()).ok(),
            Json::U64(n) => Some(*n),
            _ => None,
        }
    }

    pub(super) fn is_null(&self) -> bool {
        match self {
            Json::Raw(r) => r.get() == "null",
            Json::Null => true,
            _ => false,
        }
    }
}

impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Raw(r) => r.serialize(s),
            Json::Object(o) => o.serialize(s),
            Json::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Text(t) => s.serialize_str(t),
            Json::U64(n) => s.serialize_u64(*n),
            Json::Null => s.serialize_unit(),
            Json::Other(v) => v.serialize(s),
        }
    }
}

impl Serialize for Obj<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k.as_ref(), v)?;
        }
        map.end()
    }
}

struct ObjVisitor<'a>(Shape, std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for ObjVisitor<'a> {
    type Value = Obj<'a>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Obj<'a>, M::Error> {
        let mut members: Vec<(Cow<'a, str>, Json<'a>)> = Vec::new();
        let mut index: Option<HashMap<Cow<'a, str>, usize>> = None;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value = match self.0.member(&key) {
                Some(expect) => map.next_value_seed(ValueSeed(expect, std::marker::PhantomData))?,
                None => Json::Raw(map.next_value::<&'a RawValue>()?),
            };
            let seen = match index.as_mut() {
                Some(ix) => ix.get(&key).copied(),
                None => members.iter().position(|(k, _)| *k == key),
            };
            match seen {
                Some(at) => members[at].1 = value,
                None => {
                    if let Some(ix) = index.as_mut() {
                        ix.insert(key.clone(), members.len());
                    }
                    members.push((key, value));
                    if index.is_none() && members.len() > SCAN_MEMBERS {
                        index = Some(members.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect());
                    }
                }
            }
        }
        Ok(Obj(members))
    }
}

/// A member on the path: opened as what it should be, or kept as read when it is something else.
struct ValueSeed<'a>(Expect, std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> DeserializeSeed<'de> for ValueSeed<'a> {
    type Value = Json<'a>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Json<'a>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for ValueSeed<'a> {
    type Value = Json<'a>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Json<'a>, M::Error> {
        let shape = match self.0 {
            Expect::Object(shape) => shape,
            Expect::ArrayOf(_) => Shape::Leaf,
        };
        ObjVisitor(shape, self.1).visit_map(map).map(Json::Object)
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Json<'a>, S::Error> {
        let mut items = Vec::new();
        match self.0 {
            Expect::ArrayOf(shape) => {
                while let Some(item) = seq.next_element_seed(ValueSeed(Expect::Object(shape), self.1))? {
                    items.push(item);
                }
            }
            Expect::Object(_) => {
                while let Some(item) = seq.next_element::<&'a RawValue>()? {
                    items.push(Json::Raw(item));
                }
            }
        }
        Ok(Json::Array(items))
    }

    fn visit_unit<E>(self) -> Result<Json<'a>, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json<'a>, E> {
        Ok(Json::Other(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Json<'a>, E> {
        Ok(Json::U64(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Json<'a>, E> {
        Ok(Json::Other(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Json<'a>, E> {
        Ok(Json::Other(v.into()))
    }

    fn visit_str<E>(self, v: &str) -> Result<Json<'a>, E> {
        Ok(Json::Text(v.to_owned()))
    }
}

/// A key, borrowed from the chunk unless it holds escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(StrVisitor)
    }
}

struct StrVisitor;

impl<'de> Visitor<'de> for StrVisitor {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(json: &str) -> String {
        let obj = Obj::parse(json).unwrap();
        serde_json::to_string(&obj).unwrap()
    }

    #[test]
    fn untouched_members_go_back_as_they_came() {
        let json = r#"{"b":1.50,"a":{"z":[1, 2],"y":"\u0041"},"c":"x\ny"}"#;
        assert_eq!(round_trip(json), json);
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_like_any_reader() {
        assert_eq!(round_trip(r#"{"content":"safe","x":1,"content":"leak"}"#), r#"{"content":"leak","x":1}"#);
        let mut obj = Obj::parse(r#"{"con\u0074ent":"a","content":"b"}"#).unwrap();
        assert_eq!(obj.get_mut("content").and_then(|v| v.string()).as_deref(), Some("b"));
        // Past the scan limit, through the index.
        let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        let json = format!("{{{},\"k3\":\"last\"}}", many.join(","));
        let obj = Obj::parse(&json).unwrap();
        assert_eq!(obj.0.len(), 40);
        assert_eq!(obj.get("k3").and_then(Json::string).as_deref(), Some("last"));
    }

    #[test]
    fn only_objects_parse_and_trailing_text_is_refused() {
        assert!(Obj::parse("[1]").is_none());
        assert!(Obj::parse("\"s\"").is_none());
        assert!(Obj::parse(r#"{"a":1} x"#).is_none());
        assert!(Obj::parse(r#"{"a":1"#).is_none());
        assert!(Obj::parse(r#" {"a":1} "#).is_some());
    }

    #[test]
    fn edits_open_only_their_path() {
        let json = r#"{"choices":[{"index":2,"delta":{"content":"hi"},"logprobs":{"content":[]}}],"usage":null}"#;
        let mut obj = Obj::parse(json).unwrap();
        let Some(choices) = obj.get_mut("choices").and_then(Json::array) else { panic!("choices") };
        let Some(choice) = choices[0].object() else { panic!("choice") };
        assert_eq!(choice.get("index").and_then(Json::as_u64), Some(2));
        choice.insert("logprobs", Json::Null);
        let delta = choice.object_at("delta").unwrap();
        let text = delta.get("content").and_then(Json::string).map(|s| s.to_uppercase());
        delta.insert("content", Json::Text(text.unwrap_or_default()));
        delta.object_at("audio").unwrap().insert("transcript", Json::Text("t".into()));
        assert_eq!(
            serde_json::to_string(&obj).unwrap(),
            r#"{"choices":[{"index":2,"delta":{"content":"HI","audio":{"transcript":"t"}},"logprobs":null}],"usage":null}"#
        );
        assert!(obj.get("usage").is_some_and(Json::is_null));
    }

    #[test]
    fn a_member_of_another_kind_is_replaced_when_made_an_object_or_array() {
        let mut obj = Obj::parse(r#"{"function_call":"x","tool_calls":7}"#).unwrap();
        obj.object_at("function_call").unwrap().insert("arguments", Json::Text("a".into()));
        obj.entry("tool_calls").make_array().unwrap().push(Json::U64(1));
        assert_eq!(serde_json::to_string(&obj).unwrap(), r#"{"function_call":{"arguments":"a"},"tool_calls":[1]}"#);
    }
}
