//! Request bodies that must be JSON objects: serde's derived structs also take an array of
//! their fields in order (`[{…spec…}]` submitted a job), which no client means and the API
//! table does not offer.

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// `T`, read only from a JSON object; anything else is "invalid type: …, expected a JSON object".
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectVisitor(PhantomData)).map(Object)
    }
}

struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Body {
        spec: Option<Box<RawValue>>,
    }

    fn read(text: &str) -> Result<Body, String> {
        serde_json::from_str::<Object<Body>>(text).map(|o| o.0).map_err(|e| e.to_string())
    }

    #[test]
    fn an_object_reads_as_the_struct_and_keeps_its_raw_fields() {
        let body = read(r#"{"spec": {"name": "a", "n": [1, 2]}}"#).unwrap();
        assert_eq!(body.spec.unwrap().get(), r#"{"name": "a", "n": [1, 2]}"#);
        assert!(read("{}").unwrap().spec.is_none());
        let unknown = read(r#"{"spec": {}, "id": "j9"}"#).unwrap_err();
        assert!(unknown.starts_with("unknown field `id`, expected `spec`"), "{unknown}");
    }

    #[test]
    fn anything_but_an_object_is_refused_as_such() {
        for text in [r#"[{"name": "a"}]"#, "[]", "[1,2]", "null", r#""x""#, "3"] {
            let error = read(text).unwrap_err();
            assert!(error.contains("expected a JSON object"), "{text}: {error}");
        }
    }
}
