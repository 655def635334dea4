//! The OpenAPI document is the truth: every route the client calls is in it and nothing
//! else, and every model's fields match its schema both ways.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::{Value, json};

fn document() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api/openapi.yaml");
    let text = std::fs::read_to_string(path).expect("docs/api/openapi.yaml is in the repo");
    serde_yaml_ng::from_str(&text).expect("the OpenAPI document is YAML")
}

#[test]
fn routes_match_the_client() {
    let doc = document();
    let mut in_doc = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths is a map") {
        for method in ["get", "post", "put", "delete", "patch"] {
            if item.get(method).is_some() {
                in_doc.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let declared: BTreeSet<(String, String)> = div_api::ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(in_doc, declared);
}

fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.trim_start_matches("#/components/schemas/");
            &doc["components"]["schemas"][name]
        }
        None => schema,
    }
}

/// Every key of `value` is a property of `schema`, every required one is there, and (for
/// a fully populated value) every property is there; recursively.
fn check(doc: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    match value {
        Value::Object(map) if schema.get("properties").is_some() => {
            let props = schema["properties"]
                .as_object()
                .expect("properties is a map");
            for key in map.keys() {
                if !props.contains_key(key) {
                    errors.push(format!("{at}.{key} is not in the schema"));
                }
            }
            for key in props.keys() {
                if !map.contains_key(key) {
                    errors.push(format!("{at}.{key} is in the schema but not the model"));
                }
            }
            for req in schema["required"].as_array().into_iter().flatten() {
                let req = req.as_str().expect("required names are strings");
                if !props.contains_key(req) {
                    errors.push(format!("{at}: required `{req}` is not a property"));
                }
            }
            for (key, v) in map {
                if let Some(p) = props.get(key) {
                    check(doc, p, v, &format!("{at}.{key}"), errors);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    check(doc, item_schema, v, &format!("{at}[{i}]"), errors);
                }
            }
        }
        Value::String(s) => {
            if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
                && !allowed.iter().any(|a| a.as_str() == Some(s))
            {
                errors.push(format!("{at}: `{s}` is not in the schema's enum"));
            }
        }
        _ => {}
    }
}

/// An object holding only the schema's required properties.
fn minimal(doc: &Value, schema: &Value) -> Value {
    let schema = resolve(doc, schema);
    let mut out = serde_json::Map::new();
    for req in schema["required"].as_array().into_iter().flatten() {
        let key = req.as_str().expect("required names are strings");
        let prop = resolve(doc, &schema["properties"][key]);
        let v = match prop["type"].as_str() {
            Some("integer") => json!(1),
            Some("boolean") => json!(true),
            Some("array") => json!([]),
            Some("object") => minimal(doc, prop),
            _ => match prop.get("enum").and_then(|e| e.get(0)) {
                Some(first) => first.clone(),
                None => json!("x"),
            },
        };
        out.insert(key.to_owned(), v);
    }
    Value::Object(out)
}

fn check_model<T: Serialize + serde::de::DeserializeOwned>(name: &str, example: &T) -> Vec<String> {
    let doc = document();
    let schema = &doc["components"]["schemas"][name];
    if schema.is_null() {
        return vec![format!("no schema `{name}`")];
    }
    let mut errors = Vec::new();
    let value = serde_json::to_value(example).expect("the models serialize");
    check(&doc, schema, &value, name, &mut errors);
    let min = minimal(&doc, schema);
    if let Err(e) = serde_json::from_value::<T>(min.clone()) {
        errors.push(format!(
            "{name}: the schema's required fields alone do not make one: {e} ({min})"
        ));
    }
    errors
}

#[test]
fn models_match_their_schemas() {
    use crate::models::examples as ex;
    let mut errors = Vec::new();
    errors.extend(check_model("Health", &ex::health()));
    errors.extend(check_model("Catalogue", &ex::catalogue()));
    errors.extend(check_model("Volume", &ex::volume()));
    errors.extend(check_model(
        "CreateVolume",
        &div_api::CreateVolume { name: "v".into() },
    ));
    errors.extend(check_model(
        "MissingBlobsRequest",
        &div_api::MissingBlobsRequest {
            hashes: vec!["h".into()],
        },
    ));
    errors.extend(check_model("MissingBlobs", &ex::missing_blobs()));
    errors.extend(check_model("CommitTree", &ex::commit_tree()));
    errors.extend(check_model("CommittedTree", &ex::committed_tree()));
    errors.extend(check_model("VolumeEntry", &ex::volume_entry()));
    errors.extend(check_model("CreateRun", &ex::create_run()));
    errors.extend(check_model("Run", &ex::run()));
    errors.extend(check_model("RunList", &ex::run_list()));
    errors.extend(check_model("RunResult", &ex::run_result()));
    errors.extend(check_model("Telemetry", &ex::telemetry()));
    errors.extend(check_model(
        "SetSecret",
        &div_api::SetSecret { value: "s".into() },
    ));
    errors.extend(check_model("SecretInfo", &ex::secret()));
    errors.extend(check_model("Error", &ex::error_body()));
    assert!(
        errors.is_empty(),
        "drift between the models and the OpenAPI document:\n{}",
        errors.join("\n")
    );
}
