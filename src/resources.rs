//! Resource quantities in integer milli-units (`cpu: 0.5` is 500), and node labels.
//!
//! Floats never reach the scheduler: a quantity is parsed once, at the edge, into milli-units,
//! so that fit checks are exact and placements do not depend on rounding.

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// Largest quantity of one resource a node or bundle may declare (in whole units).
pub const MAX_QUANTITY: f64 = 1e12;
/// Largest number of distinct resource names in one map.
pub const MAX_RESOURCE_NAMES: usize = 64;

/// Resource name → quantity in milli-units. Zero quantities are kept (a node may declare `gpu=0`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Resources(BTreeMap<String, u64>);

/// What was wrong with a resource quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error("resource `{name}` is {value}; quantities must be >= 0")]
    Negative { name: String, value: String },
    #[error("resource `{name}` is {value}; quantities must be finite and at most 1e12")]
    TooLarge { name: String, value: String },
    #[error("resource name `{0}` is not valid; use letters, digits, `_`, `-` or `.`")]
    BadName(String),
    #[error("`{0}` is not `name=quantity` (example: `cpu=8,gpu=1`)")]
    BadPair(String),
    #[error("`{name}={value}`: the quantity is not a number")]
    NotANumber { name: String, value: String },
    #[error("too many resource names (more than {MAX_RESOURCE_NAMES})")]
    TooMany,
    #[error("resource `{0}` is given twice; give it once")]
    Repeated(String),
}

impl Resources {
    /// These resources without one of them.
    pub fn without(&self, name: &str) -> Resources {
        let mut copy = self.clone();
        copy.0.remove(name);
        copy
    }

    pub fn new() -> Self {
        Resources(BTreeMap::new())
    }

    /// Builds from whole units; convenient in tests and examples.
    pub fn units(pairs: &[(&str, u64)]) -> Self {
        Resources(pairs.iter().map(|(n, q)| (n.to_string(), q * 1000)).collect())
    }

    /// Sets `name` to `milli` milli-units.
    pub fn with_milli(mut self, name: &str, milli: u64) -> Self {
        self.0.insert(name.to_string(), milli);
        self
    }

    pub fn milli(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(n, q)| (n.as_str(), *q))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every quantity multiplied by `n` (saturating).
    pub fn times(&self, n: u64) -> Resources {
        Resources(self.0.iter().map(|(k, v)| (k.clone(), v.saturating_mul(n))).collect())
    }

    /// Checks and converts one quantity given in whole units.
    pub fn quantity_to_milli(name: &str, value: f64) -> Result<u64, ResourceError> {
        if !valid_name(name) {
            return Err(ResourceError::BadName(name.to_string()));
        }
        if value.is_nan() || value > MAX_QUANTITY || value.is_infinite() {
            return Err(ResourceError::TooLarge { name: name.to_string(), value: shown(value) });
        }
        if value < 0.0 {
            return Err(ResourceError::Negative { name: name.to_string(), value: shown(value) });
        }
        Ok((value * 1000.0).round() as u64)
    }

    /// Parses `cpu=8,gpu=0.5` (the command-line form).
    pub fn parse_pairs(text: &str) -> Result<Resources, ResourceError> {
        let mut out = Resources::new();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').ok_or_else(|| ResourceError::BadPair(pair.into()))?;
            let (name, value) = (name.trim(), value.trim());
            let number: f64 =
                value.parse().map_err(|_| ResourceError::NotANumber { name: name.into(), value: value.into() })?;
            if out.0.contains_key(name) {
                return Err(ResourceError::Repeated(name.into()));
            }
            out.insert_checked(name, number)?;
        }
        Ok(out)
    }

    fn insert_checked(&mut self, name: &str, value: f64) -> Result<(), ResourceError> {
        let milli = Self::quantity_to_milli(name, value)?;
        if self.0.len() >= MAX_RESOURCE_NAMES && !self.0.contains_key(name) {
            return Err(ResourceError::TooMany);
        }
        self.0.insert(name.to_string(), milli);
        Ok(())
    }
}

/// A refused quantity as the user wrote it, about: `1e300` stays short (`1e300`, not 301 digits).
fn shown(value: f64) -> String {
    if value.abs() >= 1e15 {
        format!("{value:e}")
    } else {
        value.to_string()
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Prints a milli-unit quantity the way a user wrote it: `8`, `0.5`, `1.25`.
pub fn format_milli(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        let text = format!("{}.{:03}", milli / 1000, milli % 1000);
        text.trim_end_matches('0').to_string()
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(n, q)| format!("{n}={}", format_milli(*q))).collect();
        f.write_str(&parts.join(","))
    }
}

impl Serialize for Resources {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, milli) in &self.0 {
            if milli % 1000 == 0 {
                map.serialize_entry(name, &(milli / 1000))?;
            } else {
                map.serialize_entry(name, &(*milli as f64 / 1000.0))?;
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Resources {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ResourcesVisitor;
        impl<'de> Visitor<'de> for ResourcesVisitor {
            type Value = Resources;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of resource name to number, like {\"cpu\": 8, \"gpu\": 1}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Resources, A::Error> {
                let mut out = Resources::new();
                while let Some((name, value)) = map.next_entry::<String, f64>()? {
                    // serde keeps the last of a repeated key; one written twice meant one of them.
                    if out.0.contains_key(&name) {
                        return Err(de::Error::custom(format!("duplicate field `{name}`")));
                    }
                    out.insert_checked(&name, value).map_err(de::Error::custom)?;
                }
                Ok(out)
            }
        }
        deserializer.deserialize_map(ResourcesVisitor)
    }
}

/// Node labels, `key=value`.
pub type Labels = BTreeMap<String, String>;

/// Most labels a node or a selector may carry.
pub const MAX_LABELS: usize = 64;
/// Longest label key or value, in bytes (a DNS name's length).
pub const MAX_LABEL_BYTES: usize = 253;
/// Most resource kinds a node or a bundle may name.
pub const MAX_RESOURCE_KINDS: usize = 32;

/// Whether `labels` are within the bounds; the error names the bound broken.
pub fn check_labels(labels: &Labels) -> Result<(), String> {
    if labels.len() > MAX_LABELS {
        return Err(format!("has {} labels; at most {MAX_LABELS} are allowed", labels.len()));
    }
    let control = |text: &str| text.chars().any(crate::protocol::unprintable);
    let bad = |(k, v): &(&String, &String)| {
        k.is_empty() || k.len() > MAX_LABEL_BYTES || v.len() > MAX_LABEL_BYTES || control(k) || control(v)
    };
    match labels.iter().find(bad) {
        Some((key, _)) => Err(format!(
            "label `{}` has an empty or over-long key, an over-long value, or a control or bidirectional \
             formatting character; keys are 1 to {MAX_LABEL_BYTES} bytes, values at most {MAX_LABEL_BYTES}, both \
             printable",
            key.chars().take(40).collect::<String>().escape_debug()
        )),
        None => Ok(()),
    }
}

/// Whether `resources` name few enough kinds.
pub fn check_kinds(resources: &Resources) -> Result<(), String> {
    let kinds = resources.iter().count();
    if kinds > MAX_RESOURCE_KINDS {
        return Err(format!("names {kinds} resource kinds; at most {MAX_RESOURCE_KINDS} are allowed"));
    }
    Ok(())
}

/// Parses `zone=a,preemptible=true` (the command-line form).
pub fn parse_labels(text: &str) -> Result<Labels, String> {
    let mut labels = Labels::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("label `{pair}` is not `key=value` (example: `zone=a,rack=r1`)"))?;
        if key.trim().is_empty() {
            return Err(format!("label `{pair}` has an empty key"));
        }
        if labels.insert(key.trim().to_string(), value.trim().to_string()).is_some() {
            return Err(format!("label `{}` is given twice; give it once", key.trim()));
        }
    }
    Ok(labels)
}

/// Is this node labelled `preemptible=true`?
pub fn is_preemptible(labels: &Labels) -> bool {
    labels.get("preemptible").map(String::as_str) == Some("true")
}

/// A set of GPU device indices (0..64): the devices a node has, or a bundle holds. GPUs are a
/// resource with identity — a bundle with `gpu: 2` holds two particular devices, which no other
/// bundle holds, and its processes see them as `CUDA_VISIBLE_DEVICES`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Devices(u64);

/// Device indices run 0..`MAX_DEVICES`.
pub const MAX_DEVICES: u32 = 64;

impl Devices {
    pub const NONE: Devices = Devices(0);

    /// Devices `0..count` (a node that declares `gpu = count` without naming its devices).
    pub fn first(count: u32) -> Devices {
        Devices(if count >= MAX_DEVICES { u64::MAX } else { (1u64 << count) - 1 })
    }

    pub fn from_indices(indices: &[u32]) -> Result<Devices, String> {
        let mut set = 0u64;
        for &i in indices {
            if i >= MAX_DEVICES {
                return Err(format!("device {i} is out of range; devices are numbered 0 to {}", MAX_DEVICES - 1));
            }
            set |= 1 << i;
        }
        Ok(Devices(set))
    }

    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    pub fn indices(self) -> impl Iterator<Item = u32> {
        (0..MAX_DEVICES).filter(move |i| self.0 & (1 << i) != 0)
    }

    /// The `count` lowest devices of this set, or `None` if it has fewer.
    pub fn lowest(self, count: u32) -> Option<Devices> {
        let mut taken = Devices::NONE;
        for i in self.indices().take(count as usize) {
            taken.0 |= 1 << i;
        }
        (taken.count() == count).then_some(taken)
    }

    pub fn contains_all(self, other: Devices) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn intersects(self, other: Devices) -> bool {
        self.0 & other.0 != 0
    }

    pub fn union(self, other: Devices) -> Devices {
        Devices(self.0 | other.0)
    }

    pub fn without(self, other: Devices) -> Devices {
        Devices(self.0 & !other.0)
    }
}

/// `0,1,3`, as `CUDA_VISIBLE_DEVICES` and `--gpus` write them.
impl fmt::Display for Devices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.indices().map(|i| i.to_string()).collect();
        f.write_str(&parts.join(","))
    }
}

impl Serialize for Devices {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.indices())
    }
}

impl<'de> Deserialize<'de> for Devices {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let indices = Vec::<u32>::deserialize(deserializer)?;
        Devices::from_indices(&indices).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_quantity_is_named_short_and_a_repeated_one_refused() {
        let err = Resources::quantity_to_milli("cpu", 1e300).unwrap_err().to_string();
        assert_eq!(err, "resource `cpu` is 1e300; quantities must be finite and at most 1e12");
        let err = Resources::quantity_to_milli("cpu", 2e12).unwrap_err().to_string();
        assert!(err.contains("is 2000000000000;"), "{err}");
        let twice = serde_json::from_str::<Resources>(r#"{"cpu": 1, "cpu": 2}"#).unwrap_err().to_string();
        assert!(twice.starts_with("duplicate field `cpu`"), "{twice}");
    }

    #[test]
    fn devices_are_sets_of_indices() {
        let node = Devices::from_indices(&[0, 1, 3, 5]).unwrap();
        let two = node.lowest(2).unwrap();
        assert_eq!(two.to_string(), "0,1");
        assert_eq!(node.without(two).lowest(2).unwrap().to_string(), "3,5");
        assert_eq!(node.without(two).lowest(3), None);
        assert_eq!(Devices::first(4).to_string(), "0,1,2,3");
        assert_eq!(serde_json::to_string(&node).unwrap(), "[0,1,3,5]");
        assert!(Devices::from_indices(&[64]).is_err());
    }

    #[test]
    fn json_round_trip_keeps_fractions() {
        let r: Resources = serde_json::from_str(r#"{"cpu": 0.5, "gpu": 8, "memory_mb": 1024}"#).unwrap();
        assert_eq!(r.milli("cpu"), 500);
        assert_eq!(r.milli("gpu"), 8000);
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"cpu":0.5,"gpu":8,"memory_mb":1024}"#);
    }

    #[test]
    fn negative_and_wrong_types_are_errors() {
        let err = serde_json::from_str::<Resources>(r#"{"cpu": -1}"#).unwrap_err();
        assert!(err.to_string().contains("resource `cpu` is -1"), "{err}");
        assert!(serde_json::from_str::<Resources>(r#"{"cpu": "8"}"#).is_err());
    }

    #[test]
    fn pairs_parse_and_print() {
        let r = Resources::parse_pairs("cpu=8, gpu=0.25").unwrap();
        assert_eq!(r.to_string(), "cpu=8,gpu=0.25");
        assert!(matches!(Resources::parse_pairs("cpu"), Err(ResourceError::BadPair(_))));
        assert!(matches!(Resources::parse_pairs("cpu=x"), Err(ResourceError::NotANumber { .. })));
        assert!(matches!(Resources::parse_pairs("c pu=1"), Err(ResourceError::BadName(_))));
        let twice = Resources::parse_pairs("foo=1,cpu=1,cpu=2").unwrap_err();
        assert_eq!(twice.to_string(), "resource `cpu` is given twice; give it once", "not the last one silently");
        assert_eq!(parse_labels("zone=a,zone=b").unwrap_err(), "label `zone` is given twice; give it once");
    }

    #[test]
    fn labels_parse() {
        let l = parse_labels("zone=a,preemptible=true").unwrap();
        assert!(is_preemptible(&l));
        assert!(parse_labels("zone").is_err());
    }

    #[test]
    fn a_label_with_a_control_character_is_refused() {
        assert!(check_labels(&parse_labels("zone=a").unwrap()).is_ok());
        let bell = Labels::from([("zone".to_string(), "a\u{1}".to_string())]);
        let said = check_labels(&bell).unwrap_err();
        assert!(said.contains("a control or bidirectional formatting character"), "{said}");
        let reversing = Labels::from([("zone".to_string(), "\u{202E}evil".to_string())]);
        assert!(check_labels(&reversing).is_err(), "a right-to-left override is no printable value");
    }

    #[test]
    fn milli_formatting() {
        assert_eq!(format_milli(8000), "8");
        assert_eq!(format_milli(500), "0.5");
        assert_eq!(format_milli(1250), "1.25");
        assert_eq!(format_milli(1), "0.001");
    }
}
