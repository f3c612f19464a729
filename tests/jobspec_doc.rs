//! `docs/jobspec.md` against the parser it documents: its examples are accepted, and its
//! tables name every field the parser knows and no field it does not.

use ftdrive::spec::{JobSpec, Overrides};
use std::collections::BTreeSet;

const DOC: &str = include_str!("../docs/jobspec.md");

/// The JSON blocks of the document, in order.
fn json_blocks() -> Vec<&'static str> {
    DOC.split("```json\n").skip(1).map(|rest| rest.split("```").next().expect("a closed block")).collect()
}

/// The fields the parser knows, as its own unknown-field error lists them (`retries.` ones
/// prefixed).
fn known_fields() -> BTreeSet<String> {
    let listed = |text: &str, prefix: &str| -> Vec<String> {
        let error = JobSpec::parse(text, &Overrides::default()).expect_err("an unknown field is refused");
        let expected = error.message.split("expected ").nth(1).expect("the error lists the fields");
        expected.split('`').skip(1).step_by(2).map(|field| format!("{prefix}{field}")).collect()
    };
    let mut fields: BTreeSet<String> = listed(r#"{"zzz": 1}"#, "").into_iter().collect();
    let base = r#""name": "t", "command": ["x"], "min_nodes": 1, "max_nodes": 1"#;
    fields.extend(listed(&format!(r#"{{{base}, "retries": {{"zzz": 1}}}}"#), "retries."));
    fields.remove("retries");
    fields
}

/// The first column of every table row: the fields the document describes.
fn documented_fields() -> BTreeSet<String> {
    DOC.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .map(|rest| rest.split('`').next().expect("a closed code span").to_string())
        .collect()
}

#[test]
fn every_example_in_the_document_is_a_valid_spec() {
    let blocks = json_blocks();
    assert_eq!(blocks.len(), 2, "the minimal and the complete example");
    for block in blocks {
        JobSpec::parse(block, &Overrides::default()).unwrap_or_else(|e| panic!("{e}:\n{block}"));
    }
}

#[test]
fn the_complete_example_sets_every_field() {
    let complete = json_blocks()[1];
    for field in known_fields() {
        let key = field.rsplit('.').next().expect("a name");
        assert!(complete.contains(&format!("\"{key}\":")), "the complete example lacks `{field}`");
    }
}

#[test]
fn the_tables_describe_exactly_the_fields_the_parser_knows() {
    assert_eq!(documented_fields(), known_fields());
}

/// The second column of a field's row.
fn documented_default(field: &str) -> &'static str {
    let line = DOC.lines().find(|l| l.starts_with(&format!("| `{field}` |"))).expect("a row");
    line.split(" | ").nth(1).expect("a default column")
}

#[test]
fn the_documented_defaults_are_the_parsers() {
    let minimal = JobSpec::parse(json_blocks()[0], &Overrides::default()).expect("valid");
    let parsed = serde_json::to_value(&minimal).expect("specs serialize");
    let mut checked = 0;
    for field in documented_fields() {
        let text = documented_default(&field);
        // A default written as a value: 5000, false, `{"cpu": 1}`, `STRICT_SPREAD`; the others
        // ("required", "the agent's --work-dir") are words.
        let documented = match text.strip_prefix('`').and_then(|t| t.strip_suffix('`')) {
            Some(code) => serde_json::from_str(code).unwrap_or_else(|_| serde_json::Value::from(code)),
            None => match serde_json::from_str(text) {
                Ok(value) => value,
                Err(_) => continue,
            },
        };
        let actual = field.split('.').fold(&parsed, |v, key| &v[key]);
        assert_eq!(&documented, actual, "the default of `{field}`");
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} defaults were checked");
}
