//! The OpenAPI document is the truth: the route table (`div_api::routes`) holds its routes
//! and nothing else, with their bodies and answers, and every model's fields match its
//! schema both ways.

use std::collections::BTreeSet;

use div_api::Route;
use div_api::routes::RouteTable;
use serde::Serialize;
use serde_json::{Value, json};

fn document() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api/openapi.yaml");
    let text = std::fs::read_to_string(path).expect("docs/api/openapi.yaml is in the repo");
    serde_yaml_ng::from_str(&text).expect("the OpenAPI document is YAML")
}

/// The route table is the document's: the same routes, and for each the request body and
/// the answers the table says (a model's schema by name, or the media type of bytes, the log
/// or lines of JSON).
#[test]
fn the_route_table_is_the_document() {
    let doc = document();
    let mut in_doc = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths is a map") {
        for method in ["get", "post", "put", "delete", "patch"] {
            if item.get(method).is_some() {
                in_doc.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let declared: BTreeSet<(String, String)> = Route::ALL
        .iter()
        .map(|r| (r.method().to_owned(), r.template().to_owned()))
        .collect();
    assert_eq!(in_doc, declared);

    let mut errors = Vec::new();
    for &route in Route::ALL {
        let at = format!("{} {}", route.method(), route.template());
        let op = &doc["paths"][route.template()][route.method().to_lowercase()];
        let request = RouteTable::request(route);
        let body = &op["requestBody"]["content"];
        let said = match request {
            "Nothing" => body.is_null().then_some(()),
            "Octets" => body.get("application/octet-stream").map(drop),
            model => {
                (schema_name(&body["application/json"]["schema"]) == Some(model)).then_some(())
            }
        };
        if said.is_none() {
            errors.push(format!(
                "{at}: the table's request is `{request}`, the document's {body}"
            ));
        }
        let response = RouteTable::response(route).replace(' ', "");
        let answers: Vec<(&String, &Value)> = op["responses"]
            .as_object()
            .expect("responses is a map")
            .iter()
            .filter(|(status, _)| status.starts_with('2'))
            .collect();
        if answers.is_empty() {
            errors.push(format!("{at}: no success in the document"));
        }
        for (status, answer) in answers {
            let content = &answer["content"];
            let ok = match response.as_str() {
                "Nothing" => content.is_null(),
                "Octets" => content.get("application/octet-stream").is_some(),
                "LogFrames" => content.get("application/vnd.div.log").is_some(),
                r if r.starts_with("Ndjson<") => {
                    let item = r.trim_start_matches("Ndjson<").trim_end_matches('>');
                    schema_name(&content["application/x-ndjson"]["schema"]) == Some(item)
                }
                model => schema_name(&content["application/json"]["schema"]) == Some(model),
            };
            if !ok {
                errors.push(format!(
                    "{at}: the table answers `{response}`, the document's {status} {content}"
                ));
            }
        }
    }
    assert!(
        errors.is_empty(),
        "the route table and the OpenAPI document differ:\n{}",
        errors.join("\n")
    );
}

/// The schema a `$ref` names.
fn schema_name(schema: &Value) -> Option<&str> {
    schema["$ref"]
        .as_str()?
        .strip_prefix("#/components/schemas/")
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
    errors.extend(check_model("RunModel", &ex::run_model()));
    errors.extend(check_model("ModelVersion", &ex::model_version()));
    errors.extend(check_model("Evaluation", &ex::evaluation()));
    errors.extend(check_model(
        "PushModel",
        &div_api::PushModel {
            volume: "div-models".into(),
            path: "code/mask-rcnn/9f31c2ab".into(),
            extra: Default::default(),
        },
    ));
    errors.extend(check_model(
        "ModelList",
        &div_api::ModelList {
            models: vec![div_api::ModelSummary {
                name: "mask-rcnn".into(),
                versions: 3,
                latest: Some(ex::model_version()),
                extra: Default::default(),
            }],
            extra: Default::default(),
        },
    ));
    errors.extend(check_model(
        "Model",
        &div_api::Model {
            name: "mask-rcnn".into(),
            versions: vec![ex::model_version()],
            evaluations: vec![ex::evaluation()],
            extra: Default::default(),
        },
    ));
    errors.extend(check_model(
        "EvaluationList",
        &div_api::EvaluationList {
            evaluations: vec![ex::evaluation()],
            extra: Default::default(),
        },
    ));
    errors.extend(check_model("RunList", &ex::run_list()));
    errors.extend(check_model("RunResult", &ex::run_result()));
    errors.extend(check_model("Telemetry", &ex::telemetry()));
    errors.extend(check_model(
        "SetSecret",
        &div_api::SetSecret { value: "s".into() },
    ));
    errors.extend(check_model("SecretInfo", &ex::secret()));
    errors.extend(check_model("Error", &ex::error_body()));
    errors.extend(check_model(
        "VolumeList",
        &div_api::VolumeList {
            volumes: vec![ex::volume()],
        },
    ));
    errors.extend(check_model(
        "VolumeEntryList",
        &div_api::VolumeEntryList {
            entries: vec![ex::volume_entry()],
        },
    ));
    errors.extend(check_model(
        "SecretList",
        &div_api::SecretList {
            secrets: vec![ex::secret()],
        },
    ));
    errors.extend(check_model(
        "PackStored",
        &div_api::PackStored { stored: 2, held: 1 },
    ));
    errors.extend(check_model(
        "RunValidated",
        &div_api::RunValidated {
            valid: true,
            extra: Default::default(),
        },
    ));
    errors.extend(check_model(
        "PullImage",
        &div_api::PullImage {
            image: "busybox".into(),
            pull: Some(div_api::PullPolicy::Never),
        },
    ));
    errors.extend(check_model("ImageCache", &ex::image_cache()));
    errors.extend(check_model("PruneImages", &div_api::PruneImages::default()));
    errors.extend(check_model("PrunedImages", &ex::pruned_images()));
    errors.extend(check_model(
        "DashboardLink",
        &div_api::DashboardLink {
            url: "http://127.0.0.1:1/?token=t".into(),
            address: "127.0.0.1:1".into(),
        },
    ));
    errors.extend(team_models_match_their_schemas());
    assert!(
        errors.is_empty(),
        "drift between the models and the OpenAPI document:\n{}",
        errors.join("\n")
    );
}

/// The team's models (`docs/team.md`).
fn team_models_match_their_schemas() -> Vec<String> {
    use crate::models::examples as ex;
    use div_api::*;
    let mut errors = Vec::new();
    errors.extend(check_model("Member", &ex::member()));
    errors.extend(check_model(
        "MemberList",
        &MemberList {
            members: vec![ex::member()],
        },
    ));
    errors.extend(check_model(
        "CreateMember",
        &CreateMember {
            name: "ci".into(),
            role: Role::Member,
            kind: MemberKind::Service,
            slurm_account: Some("vision".into()),
        },
    ));
    errors.extend(check_model(
        "MemberCreated",
        &MemberCreated {
            member: ex::member(),
            token: "div_x".into(),
        },
    ));
    errors.extend(check_model(
        "MemberLimit",
        &MemberLimit {
            monthly_limit_cents: Some(5000),
        },
    ));
    errors.extend(check_model(
        "MemberSlurmAccount",
        &MemberSlurmAccount {
            slurm_account: Some("vision".into()),
        },
    ));
    errors.extend(check_model(
        "OrgLimit",
        &OrgLimit {
            monthly_limit_cents: None,
        },
    ));
    errors.extend(check_model(
        "WhoAmI",
        &WhoAmI {
            name: "alice".into(),
            role: Role::Viewer,
            extra: Default::default(),
        },
    ));
    errors.extend(check_model("AuditEntry", &ex::audit_entry()));
    errors.extend(check_model(
        "AuditList",
        &AuditList {
            entries: vec![ex::audit_entry()],
            next_cursor: Some("3".into()),
        },
    ));
    errors
}
