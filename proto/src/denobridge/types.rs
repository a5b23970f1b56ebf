//! The typed params and results of every denobridge method (see the module docs).
//!
//! Field names follow the seed's camelCase. Every struct keeps members it does not know in
//! `extra`, so a newer plugin's additions survive a decode/encode round trip.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A diagnostic's severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// `"error"`.
    Error,
    /// `"warning"`.
    Warning,
}

/// A warning or error for the user, attached to most results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostic {
    /// How bad.
    pub severity: Severity,
    /// One line.
    pub summary: String,
    /// More context.
    pub detail: String,
    /// The property it is about, e.g. `["props", "name"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prop_path: Option<Vec<String>>,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Diagnostic {
    /// A warning without a property path.
    pub fn warning(summary: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            summary: summary.into(),
            detail: detail.into(),
            prop_path: None,
            extra: Map::new(),
        }
    }
}

/// `health` result: `{"ok": true}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HealthResult {
    /// Always true when the plugin answers.
    pub ok: bool,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Params holding only `props`: resource `create`, data source `read`, ephemeral `open`,
/// action `invoke`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PropsParams {
    /// User configuration.
    pub props: Value,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl PropsParams {
    /// Params with these props.
    pub fn new(props: Value) -> Self {
        Self {
            props,
            extra: Map::new(),
        }
    }
}

/// Resource `create` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateResult {
    /// The new resource's id.
    pub id: String,
    /// Computed state.
    pub state: Value,
    /// Computed state Terraform marks sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive_state: Option<Value>,
    /// Warnings or errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<Diagnostic>>,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Resource `read` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReadParams {
    /// The resource's id.
    pub id: String,
    /// Current configuration.
    pub props: Value,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Resource `read` result when the resource exists.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadFound {
    /// Refreshed configuration.
    pub props: Value,
    /// Refreshed computed state.
    pub state: Value,
    /// Refreshed sensitive state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive_state: Option<Value>,
    /// Warnings or errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<Diagnostic>>,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Resource `read` result: found, or `{"exists": false}`.
#[derive(Debug, Clone, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "messages are built once and moved a few times; boxing would burden every match"
)]
pub enum ReadResult {
    /// The resource exists.
    Found(ReadFound),
    /// `{"exists": false}`: the resource is gone.
    Gone,
}

impl Serialize for ReadResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ReadResult::Found(found) => found.serialize(s),
            ReadResult::Gone => serde_json::json!({"exists": false}).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ReadResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match v.get("exists") {
            Some(Value::Bool(false)) => Ok(ReadResult::Gone),
            Some(Value::Bool(true)) | None => serde_json::from_value(v)
                .map(ReadResult::Found)
                .map_err(D::Error::custom),
            Some(_) => Err(D::Error::custom("exists is not a boolean")),
        }
    }
}

/// Resource `update` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateParams {
    /// The resource's id.
    pub id: String,
    /// Desired configuration.
    pub next_props: Value,
    /// Configuration before the update.
    pub current_props: Value,
    /// Computed state before the update.
    pub current_state: Value,
    /// Sensitive state before the update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_sensitive_state: Option<Value>,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Resource `update` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateResult {
    /// Computed state after the update.
    pub state: Value,
    /// Sensitive state after the update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive_state: Option<Value>,
    /// Warnings or errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<Diagnostic>>,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Resource `delete` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteParams {
    /// The resource's id.
    pub id: String,
    /// Its configuration.
    pub props: Value,
    /// Its computed state.
    pub state: Value,
    /// Its sensitive state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive_state: Option<Value>,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{"done": true}` plus diagnostics: resource `delete`, ephemeral `close`, action `invoke`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DoneResult {
    /// Must be true on success.
    pub done: bool,
    /// Warnings or errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<Diagnostic>>,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl DoneResult {
    /// `{"done": true}`.
    pub fn done() -> Self {
        Self {
            done: true,
            ..Self::default()
        }
    }
}

/// What `modifyPlan` plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanType {
    /// A new resource: `id`, `currentProps` and `currentState` are null.
    Create,
    /// An existing resource changes.
    Update,
    /// The resource goes away: `nextProps` is null.
    Delete,
}

/// Resource `modifyPlan` params. The seed sends `null` (not an absent member) for what does
/// not apply to the plan type, so `None` encodes as `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModifyPlanParams {
    /// The resource's id; null for create.
    #[serde(default)]
    pub id: Option<String>,
    /// What is planned.
    pub plan_type: PlanType,
    /// Proposed configuration; `Value::Null` for delete.
    #[serde(default)]
    pub next_props: Value,
    /// Current configuration; null for create.
    #[serde(default)]
    pub current_props: Option<Value>,
    /// Current state; null for create.
    #[serde(default)]
    pub current_state: Option<Value>,
    /// Current sensitive state; null for create.
    #[serde(default)]
    pub current_sensitive_state: Option<Value>,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Resource `modifyPlan` result (one of three shapes).
#[derive(Debug, Clone, PartialEq)]
pub enum ModifyPlanResult {
    /// `{"noChanges": true}`.
    NoChanges,
    /// `{"modifiedProps": {...}, "diagnostics": [...]}`.
    Modified {
        /// The props Terraform should plan with.
        modified_props: Value,
        /// Warnings or errors.
        diagnostics: Option<Vec<Diagnostic>>,
    },
    /// `{"requiresReplacement": true}`.
    RequiresReplacement,
}

impl Serialize for ModifyPlanResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = Map::new();
        match self {
            ModifyPlanResult::NoChanges => {
                m.insert("noChanges".into(), Value::Bool(true));
            }
            ModifyPlanResult::Modified {
                modified_props,
                diagnostics,
            } => {
                m.insert("modifiedProps".into(), modified_props.clone());
                if let Some(d) = diagnostics {
                    m.insert(
                        "diagnostics".into(),
                        serde_json::to_value(d).map_err(serde::ser::Error::custom)?,
                    );
                }
            }
            ModifyPlanResult::RequiresReplacement => {
                m.insert("requiresReplacement".into(), Value::Bool(true));
            }
        }
        Value::Object(m).serialize(s)
    }
}

impl<'de> Deserialize<'de> for ModifyPlanResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut v = Value::deserialize(d)?;
        if v.get("requiresReplacement") == Some(&Value::Bool(true)) {
            return Ok(ModifyPlanResult::RequiresReplacement);
        }
        if let Some(props) = v.get_mut("modifiedProps").map(Value::take) {
            let diagnostics = match v.get_mut("diagnostics").map(Value::take) {
                None | Some(Value::Null) => None,
                Some(d) => Some(serde_json::from_value(d).map_err(D::Error::custom)?),
            };
            return Ok(ModifyPlanResult::Modified {
                modified_props: props,
                diagnostics,
            });
        }
        // `{"noChanges": true}`, and `{"requiresReplacement": false}` means the same.
        if v.get("noChanges") == Some(&Value::Bool(true))
            || v.get("requiresReplacement") == Some(&Value::Bool(false))
        {
            return Ok(ModifyPlanResult::NoChanges);
        }
        Err(D::Error::custom(
            "expected noChanges, modifiedProps or requiresReplacement",
        ))
    }
}

/// Data source `read` result, ephemeral `open` result (with its extra fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataResult {
    /// The data.
    pub result: Value,
    /// Data Terraform marks sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive_result: Option<Value>,
    /// Warnings or errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<Diagnostic>>,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Ephemeral `open` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenResult {
    /// The ephemeral data.
    pub result: Value,
    /// Data Terraform marks sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive_result: Option<Value>,
    /// When to renew (the seed's examples are Unix milliseconds, its text says seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<i64>,
    /// Passed back to `renew`/`close`, never shown to Terraform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_data: Option<Value>,
    /// Warnings or errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<Diagnostic>>,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Ephemeral `renew` and `close` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrivateParams {
    /// What `open` or the last `renew` returned.
    pub private_data: Value,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Ephemeral `renew` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenewResult {
    /// When to renew next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<i64>,
    /// Updated private data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_data: Option<Value>,
    /// Warnings or errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Vec<Diagnostic>>,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `invokeProgress` notification params (plugin → host during `invoke`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InvokeProgress {
    /// The text to show.
    pub message: String,
    /// Members this crate does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
