//! A component's exported functions as MCP tools, sans-IO: tool names, input and output JSON
//! Schemas from WIT signatures, JSON arguments to component values and results back to a
//! tool result. The host (`sandpipe::exports::session`) calls the guest; this module
//! never does.
//!
//! ```text
//!   exported functions ─► Tools::new ─► tools/list: {name, description (the WIT signature),
//!                                                    inputSchema, outputSchema}
//!   tools/call {name, arguments} ─► Tools::find ─► ExportTool::arguments ─► [Value]
//!        ─► (host: the guest call) ─► [Value] ─► ExportTool::result ─► {content, structuredContent}
//! ```
//!
//! The mapping, written down (the JSON is what a model writes and reads, so it is plain):
//! - integers are JSON integers, range-checked (`minimum`/`maximum` in the schema); `f32`/`f64`
//!   JSON numbers (NaN and the infinities as the strings `"NaN"`, `"inf"`, `"-inf"`); `bool`
//!   a boolean; `string` a string; `char` a one-character string;
//! - `list<T>` an array; `tuple<…>` an array of exactly its length; `option<T>` the value or
//!   `null`, and an `option` parameter may be left out; `record` an object with every field
//!   (an `option` field may be left out), no others; `enum` one of its names; `flags` an array
//!   of its names; `variant` the case name for a case without payload, `{"case": payload}` for
//!   one with; `result<T, E>` `{"ok": T}` or `{"err": E}`.
//! - **Tool names**: a function's own name when no other export has it (`add`), else
//!   `INTERFACE.FUNCTION` (`math.pick`), else its full name with every character MCP does not
//!   allow in a name (`A-Za-z0-9_-.`) turned into `_`. A `tools/call` may also name a function by
//!   its full name (`ns:pkg/iface@1.0.0/func`).
//! - **Results**: the value as JSON is `structuredContent.result` (the `outputSchema` says so)
//!   and its text (a string result as itself) the one text content item. A function returning
//!   `result<T, E>` whose value is `err` is the tool failing: `isError: true`, the error's text,
//!   no structured content. Arguments that do not fit the schema are a tool error too
//!   (`isError`, "invalid arguments: …"), as revision 2025-11-25 asks, so the model can correct
//!   them; the guest is not entered.
//!
//! ```
//! use sandpipe_proto::mcp::exports::{ToolSource, Tools};
//! use sandpipe_proto::mcp::ToolFilter;
//! use sandpipe_proto::component::{Ty, Value};
//! use serde_json::json;
//!
//! let tools = Tools::new(vec![ToolSource {
//!     function: 0,
//!     full_name: "add".into(),
//!     signature: "func(a: u64, b: u64) -> u64".into(),
//!     params: vec![("a".into(), Ty::U64), ("b".into(), Ty::U64)],
//!     results: vec![Ty::U64],
//! }]);
//! let list = tools.list(&ToolFilter::default());
//! assert_eq!(list["tools"][0]["inputSchema"]["required"], json!(["a", "b"]));
//! let add = tools.find("add").unwrap();
//! let args = add.arguments(Some(&json!({"a": 1, "b": 2}))).unwrap();
//! assert_eq!(args, vec![Value::U64(1), Value::U64(2)]);
//! let result = add.result(vec![Value::U64(3)]);
//! assert_eq!(result["structuredContent"], json!({"result": 3}));
//! assert_eq!(result["content"][0]["text"], "3");
//! ```

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json, json};
use thiserror::Error;

use super::ToolFilter;
use crate::component::{Selectors, Ty, Value};

/// One exported function offered as a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSource {
    /// The host's index of the function (what it calls).
    pub function: usize,
    /// Its full name: the export path joined with `/`.
    pub full_name: String,
    /// Its WIT signature, the tool's description.
    pub signature: String,
    /// Its parameters, by name.
    pub params: Vec<(String, Ty)>,
    /// Its result types (zero or one in today's component model).
    pub results: Vec<Ty>,
}

/// A tool made of an exported function.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportTool {
    /// The name `tools/list` gives and `tools/call` takes.
    pub name: String,
    /// Where it came from.
    pub source: ToolSource,
}

/// Why a `tools/call`'s arguments do not fit the function. `at` is the argument's path
/// (`person.title`, `items[2]`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ArgError {
    /// `arguments` is not an object.
    #[error("arguments must be an object")]
    NotAnObject,
    /// A required argument or record field is absent.
    #[error("missing argument {at}")]
    Missing {
        /// Its path.
        at: String,
    },
    /// An argument or field the function does not have.
    #[error("unknown argument {at}")]
    Unknown {
        /// Its path.
        at: String,
    },
    /// A value of the wrong JSON type, or not one of the allowed names.
    #[error("argument {at}: expected {expected}")]
    Type {
        /// Its path.
        at: String,
        /// What fits, in words.
        expected: String,
    },
    /// An integer outside its type's range.
    #[error("argument {at}: {got} is out of range for {ty}")]
    OutOfRange {
        /// Its path.
        at: String,
        /// The WIT type.
        ty: String,
        /// The number sent.
        got: String,
    },
}

/// The tools of one component.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tools {
    tools: Vec<ExportTool>,
}

/// The interface name in a full name (`ns:pkg/math@1.0.0/pick` → `math`), if any.
fn interface_of(full: &str) -> Option<&str> {
    let (path, _) = full.rsplit_once('/')?;
    let iface = path.rsplit('/').next()?;
    let iface = iface.split('@').next()?;
    Some(iface.rsplit(':').next().unwrap_or(iface))
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl Tools {
    /// Name each function (see the module docs for the rule), in the order given.
    pub fn new(sources: Vec<ToolSource>) -> Tools {
        let mut count: BTreeMap<String, usize> = BTreeMap::new();
        let short = |s: &ToolSource| Selectors::short_name(&s.full_name).to_owned();
        let qualified = |s: &ToolSource| match interface_of(&s.full_name) {
            Some(i) => format!("{i}.{}", Selectors::short_name(&s.full_name)),
            None => short(s),
        };
        for s in &sources {
            *count.entry(short(s)).or_default() += 1;
        }
        let mut qcount: BTreeMap<String, usize> = BTreeMap::new();
        for s in &sources {
            if count[&short(s)] > 1 {
                *qcount.entry(qualified(s)).or_default() += 1;
            }
        }
        let tools = sources
            .into_iter()
            .map(|s| {
                let name = if count[&short(&s)] == 1 {
                    short(&s)
                } else if qcount[&qualified(&s)] == 1 {
                    qualified(&s)
                } else {
                    sanitize(&s.full_name)
                };
                ExportTool { name, source: s }
            })
            .collect();
        Tools { tools }
    }

    /// Every tool.
    pub fn tools(&self) -> &[ExportTool] {
        &self.tools
    }

    /// The tool `name` names: its tool name, or its function's full name.
    pub fn find(&self, name: &str) -> Option<&ExportTool> {
        self.tools
            .iter()
            .find(|t| t.name == name)
            .or_else(|| self.tools.iter().find(|t| t.source.full_name == name))
    }

    /// The `tools/list` result: every tool `filter` permits.
    pub fn list(&self, filter: &ToolFilter) -> Json {
        let tools: Vec<Json> = self
            .tools
            .iter()
            .filter(|t| filter.permits(&t.name))
            .map(ExportTool::describe)
            .collect();
        json!({ "tools": tools })
    }
}

impl ExportTool {
    /// Its `tools/list` entry.
    pub fn describe(&self) -> Json {
        let mut tool = json!({
            "name": self.name,
            "description": format!("{}: {}", self.source.full_name, self.source.signature),
            "inputSchema": input_schema(&self.source.params),
        });
        if let Some(ty) = self.result_ty() {
            tool["outputSchema"] = json!({
                "type": "object",
                "properties": {"result": schema(&ty, true)},
                "required": ["result"],
            });
        }
        tool
    }

    /// The type of `structuredContent.result`: a `result`'s `ok` side, else the result type.
    fn result_ty(&self) -> Option<Ty> {
        match self.source.results.as_slice() {
            [] => None,
            [Ty::Result { ok, .. }] => Some(ok.as_deref().cloned().unwrap_or(Ty::Tuple(vec![]))),
            [one] => Some(one.clone()),
            many => Some(Ty::Tuple(many.to_vec())),
        }
    }

    /// The component values of `arguments` (absent means `{}`), in parameter order.
    pub fn arguments(&self, arguments: Option<&Json>) -> Result<Vec<Value>, ArgError> {
        let empty = Map::new();
        let args = match arguments {
            None | Some(Json::Null) => &empty,
            Some(Json::Object(m)) => m,
            Some(_) => return Err(ArgError::NotAnObject),
        };
        fields(&self.source.params, args, "")
    }

    /// The `tools/call` result for what the function returned.
    pub fn result(&self, values: Vec<Value>) -> Json {
        let value = match values.len() {
            0 => return json!({"content": [], "isError": false}),
            1 => values.into_iter().next().unwrap_or(Value::Tuple(vec![])),
            _ => Value::Tuple(values),
        };
        let ok = match value {
            Value::Result(Err(e)) => {
                let text = e.map_or_else(|| "error".to_owned(), |e| text_of(&to_json(&e)));
                return tool_error(&text);
            }
            Value::Result(Ok(p)) if matches!(self.source.results[..], [Ty::Result { .. }]) => {
                p.map_or(json!([]), |v| to_json(&v))
            }
            other => to_json(&other),
        };
        json!({
            "content": [{"type": "text", "text": text_of(&ok)}],
            "structuredContent": {"result": ok},
            "isError": false,
        })
    }
}

/// A tool result with `isError: true` and `text`.
pub fn tool_error(text: &str) -> Json {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

fn text_of(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `inputSchema` of a function's parameters: an object with one property each.
pub fn input_schema(params: &[(String, Ty)]) -> Json {
    object_schema(params, false)
}

fn object_schema(fields: &[(String, Ty)], output: bool) -> Json {
    let properties: Map<String, Json> = fields
        .iter()
        .map(|(n, t)| (n.clone(), schema(t, output)))
        .collect();
    let required: Vec<&str> = fields
        .iter()
        .filter(|(_, t)| !matches!(t, Ty::Option(_)))
        .map(|(n, _)| n.as_str())
        .collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn int(min: i128, max: i128) -> Json {
    json!({"type": "integer", "minimum": min, "maximum": max})
}

/// The JSON Schema of `ty`'s JSON form (`output`: a value the guest returned).
pub fn schema(ty: &Ty, output: bool) -> Json {
    match ty {
        Ty::Bool => json!({"type": "boolean"}),
        Ty::U8 => int(0, u8::MAX.into()),
        Ty::U16 => int(0, u16::MAX.into()),
        Ty::U32 => int(0, u32::MAX.into()),
        Ty::U64 => int(0, u64::MAX.into()),
        Ty::S8 => int(i8::MIN.into(), i8::MAX.into()),
        Ty::S16 => int(i16::MIN.into(), i16::MAX.into()),
        Ty::S32 => int(i32::MIN.into(), i32::MAX.into()),
        Ty::S64 => int(i64::MIN.into(), i64::MAX.into()),
        Ty::F32 | Ty::F64 => json!({"anyOf": [
            {"type": "number"},
            {"type": "string", "enum": ["NaN", "inf", "-inf"]},
        ]}),
        Ty::Char => json!({"type": "string", "minLength": 1, "maxLength": 1}),
        Ty::String => json!({"type": "string"}),
        Ty::List(t) => json!({"type": "array", "items": schema(t, output)}),
        Ty::Tuple(ts) => json!({
            "type": "array",
            "prefixItems": ts.iter().map(|t| schema(t, output)).collect::<Vec<_>>(),
            "items": false,
            "minItems": ts.len(),
            "maxItems": ts.len(),
        }),
        Ty::Option(t) => json!({"anyOf": [schema(t, output), {"type": "null"}]}),
        Ty::Result { ok, err } => {
            let side = |name: &str, t: &Option<Box<Ty>>| {
                json!({
                    "type": "object",
                    "properties": {name: t.as_ref().map_or(json!({"type": "null"}), |t| schema(t, output))},
                    "required": [name],
                    "additionalProperties": false,
                })
            };
            json!({"oneOf": [side("ok", ok), side("err", err)]})
        }
        Ty::Record(fields) => object_schema(fields, output),
        Ty::Enum(names) => json!({"type": "string", "enum": names}),
        Ty::Flags(names) => json!({
            "type": "array",
            "items": {"type": "string", "enum": names},
            "uniqueItems": true,
        }),
        Ty::Variant(cases) => {
            let one = |(n, t): &(String, Option<Ty>)| match t {
                None => json!({"const": n}),
                Some(t) => json!({
                    "type": "object",
                    "properties": {n.clone(): schema(t, output)},
                    "required": [n],
                    "additionalProperties": false,
                }),
            };
            json!({"oneOf": cases.iter().map(one).collect::<Vec<_>>()})
        }
    }
}

fn path(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_owned()
    } else {
        format!("{base}.{name}")
    }
}

fn fields(
    fields: &[(String, Ty)],
    obj: &Map<String, Json>,
    at: &str,
) -> Result<Vec<Value>, ArgError> {
    if let Some(unknown) = obj.keys().find(|k| !fields.iter().any(|(n, _)| n == *k)) {
        return Err(ArgError::Unknown {
            at: path(at, unknown),
        });
    }
    fields
        .iter()
        .map(|(n, t)| match (obj.get(n), t) {
            (Some(v), _) => from_json(t, v, &path(at, n)),
            (None, Ty::Option(_)) => Ok(Value::Option(None)),
            (None, _) => Err(ArgError::Missing { at: path(at, n) }),
        })
        .collect()
}

fn expected(at: &str, what: impl Into<String>) -> ArgError {
    ArgError::Type {
        at: at.to_owned(),
        expected: what.into(),
    }
}

fn integer<T: TryFrom<i128>>(ty: &Ty, v: &Json, at: &str) -> Result<T, ArgError> {
    let n = v
        .as_i64()
        .map(i128::from)
        .or_else(|| v.as_u64().map(i128::from))
        .ok_or_else(|| expected(at, format!("an integer ({ty})")))?;
    T::try_from(n).map_err(|_| ArgError::OutOfRange {
        at: at.to_owned(),
        ty: ty.to_string(),
        got: n.to_string(),
    })
}

fn float(v: &Json, at: &str) -> Result<f64, ArgError> {
    match v {
        Json::Number(n) => n.as_f64().ok_or_else(|| expected(at, "a number")),
        Json::String(s) if s == "NaN" => Ok(f64::NAN),
        Json::String(s) if s == "inf" => Ok(f64::INFINITY),
        Json::String(s) if s == "-inf" => Ok(f64::NEG_INFINITY),
        _ => Err(expected(at, "a number")),
    }
}

/// The component value of `v` as a `ty` (the recursion follows `ty`, whose depth the host
/// caps when it reads the signature).
pub fn from_json(ty: &Ty, v: &Json, at: &str) -> Result<Value, ArgError> {
    Ok(match ty {
        Ty::Bool => Value::Bool(v.as_bool().ok_or_else(|| expected(at, "a boolean"))?),
        Ty::U8 => Value::U8(integer(ty, v, at)?),
        Ty::U16 => Value::U16(integer(ty, v, at)?),
        Ty::U32 => Value::U32(integer(ty, v, at)?),
        Ty::U64 => Value::U64(integer(ty, v, at)?),
        Ty::S8 => Value::S8(integer(ty, v, at)?),
        Ty::S16 => Value::S16(integer(ty, v, at)?),
        Ty::S32 => Value::S32(integer(ty, v, at)?),
        Ty::S64 => Value::S64(integer(ty, v, at)?),
        // An f32 argument is the nearest f32 to the number sent.
        Ty::F32 => Value::F32(float(v, at)? as f32),
        Ty::F64 => Value::F64(float(v, at)?),
        Ty::Char => {
            let s = v.as_str().unwrap_or_default();
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Value::Char(c),
                _ => return Err(expected(at, "a string of one character")),
            }
        }
        Ty::String => Value::String(
            v.as_str()
                .ok_or_else(|| expected(at, "a string"))?
                .to_owned(),
        ),
        Ty::List(t) => {
            let items = v.as_array().ok_or_else(|| expected(at, "an array"))?;
            Value::List(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| from_json(t, item, &format!("{at}[{i}]")))
                    .collect::<Result<_, _>>()?,
            )
        }
        Ty::Tuple(ts) => {
            let items = v
                .as_array()
                .filter(|a| a.len() == ts.len())
                .ok_or_else(|| expected(at, format!("an array of {} items", ts.len())))?;
            Value::Tuple(
                ts.iter()
                    .zip(items)
                    .enumerate()
                    .map(|(i, (t, item))| from_json(t, item, &format!("{at}[{i}]")))
                    .collect::<Result<_, _>>()?,
            )
        }
        Ty::Option(t) => match v {
            Json::Null => Value::Option(None),
            v => Value::Option(Some(Box::new(from_json(t, v, at)?))),
        },
        Ty::Result { ok, err } => {
            let (is_ok, payload) = match v.as_object() {
                Some(o) if o.len() == 1 && o.contains_key("ok") => (true, &o["ok"]),
                Some(o) if o.len() == 1 && o.contains_key("err") => (false, &o["err"]),
                _ => return Err(expected(at, r#"{"ok": ...} or {"err": ...}"#)),
            };
            let side = if is_ok { ok } else { err };
            let payload = match side {
                Some(t) => Some(Box::new(from_json(t, payload, at)?)),
                None if payload.is_null() => None,
                None => return Err(expected(at, "null (this side has no payload)")),
            };
            Value::Result(if is_ok { Ok(payload) } else { Err(payload) })
        }
        Ty::Record(fs) => {
            let obj = v.as_object().ok_or_else(|| expected(at, "an object"))?;
            let values = fields(fs, obj, at)?;
            Value::Record(fs.iter().map(|(n, _)| n.clone()).zip(values).collect())
        }
        Ty::Enum(names) => match v.as_str() {
            Some(s) if names.iter().any(|n| n == s) => Value::Enum(s.to_owned()),
            _ => return Err(expected(at, format!("one of {}", names.join(", ")))),
        },
        Ty::Flags(names) => {
            let items = v.as_array().ok_or_else(|| expected(at, "an array"))?;
            let mut set = Vec::new();
            for item in items {
                match item.as_str() {
                    Some(s) if names.iter().any(|n| n == s) => {
                        if !set.iter().any(|x| x == s) {
                            set.push(s.to_owned());
                        }
                    }
                    _ => return Err(expected(at, format!("flags among {}", names.join(", ")))),
                }
            }
            Value::Flags(set)
        }
        Ty::Variant(cases) => {
            let (name, payload) = match v {
                Json::String(s) => (s.as_str(), None),
                Json::Object(o) if o.len() == 1 => {
                    let (k, p) = o
                        .iter()
                        .next()
                        .map(|(k, p)| (k.as_str(), p))
                        .unwrap_or_default();
                    (k, Some(p))
                }
                _ => ("", None),
            };
            let case = cases.iter().find(|(n, _)| n == name).ok_or_else(|| {
                let names: Vec<&str> = cases.iter().map(|(n, _)| n.as_str()).collect();
                expected(at, format!("one of the cases {}", names.join(", ")))
            })?;
            let payload = match (&case.1, payload) {
                (Some(t), Some(p)) => Some(Box::new(from_json(t, p, &path(at, name))?)),
                (Some(_), None) => {
                    return Err(expected(at, format!("{{\"{name}\": payload}}")));
                }
                (None, None | Some(Json::Null)) => None,
                (None, Some(_)) => return Err(expected(at, format!("\"{name}\" (no payload)"))),
            };
            Value::Variant(name.to_owned(), payload)
        }
    })
}

fn float_json(f: f64) -> Json {
    if f.is_nan() {
        json!("NaN")
    } else if f.is_infinite() {
        json!(if f > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(f)
    }
}

/// The JSON form of a component value (see the module docs).
pub fn to_json(v: &Value) -> Json {
    match v {
        Value::Bool(b) => json!(b),
        Value::S8(n) => json!(n),
        Value::U8(n) => json!(n),
        Value::S16(n) => json!(n),
        Value::U16(n) => json!(n),
        Value::S32(n) => json!(n),
        Value::U32(n) => json!(n),
        Value::S64(n) => json!(n),
        Value::U64(n) => json!(n),
        Value::F32(f) => float_json(f64::from(*f)),
        Value::F64(f) => float_json(*f),
        Value::Char(c) => json!(c.to_string()),
        Value::String(s) => json!(s),
        Value::List(items) | Value::Tuple(items) => {
            Json::Array(items.iter().map(to_json).collect())
        }
        Value::Option(o) => o.as_ref().map_or(Json::Null, |v| to_json(v)),
        Value::Result(Ok(p)) => json!({"ok": p.as_ref().map_or(Json::Null, |v| to_json(v))}),
        Value::Result(Err(p)) => json!({"err": p.as_ref().map_or(Json::Null, |v| to_json(v))}),
        Value::Record(fields) => Json::Object(
            fields
                .iter()
                .map(|(n, v)| (n.clone(), to_json(v)))
                .collect(),
        ),
        Value::Enum(name) => json!(name),
        Value::Flags(names) => json!(names),
        Value::Variant(name, None) => json!(name),
        Value::Variant(name, Some(p)) => json!({ name.clone(): to_json(p) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(full: &str, params: Vec<(&str, Ty)>, results: Vec<Ty>) -> ToolSource {
        ToolSource {
            function: 0,
            full_name: full.into(),
            signature: String::new(),
            params: params.into_iter().map(|(n, t)| (n.into(), t)).collect(),
            results,
        }
    }

    #[test]
    fn names_are_short_then_interface_qualified_then_sanitized() {
        let tools = Tools::new(vec![
            source("add", vec![], vec![]),
            source("a:b/math@0.1.0/pick", vec![], vec![]),
            source("a:b/words@0.1.0/pick", vec![], vec![]),
            source("a:b/x@1.0.0/f", vec![], vec![]),
            source("c:d/x@2.0.0/f", vec![], vec![]),
        ]);
        let names: Vec<&str> = tools.tools().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "add",
                "math.pick",
                "words.pick",
                "a_b_x_1.0.0_f",
                "c_d_x_2.0.0_f"
            ]
        );
        assert_eq!(
            tools.find("c:d/x@2.0.0/f").map(|t| t.name.as_str()),
            Some("c_d_x_2.0.0_f")
        );
        let filter = ToolFilter {
            allow: vec![],
            deny: vec!["add".into()],
        };
        assert_eq!(
            tools.list(&filter)["tools"].as_array().map(Vec::len),
            Some(4)
        );
    }

    #[test]
    fn every_type_round_trips_through_json_and_fits_its_schema_shape() {
        let point = Ty::Record(vec![
            ("x".into(), Ty::F64),
            ("label".into(), Ty::Option(Box::new(Ty::String))),
        ]);
        let shape = Ty::Variant(vec![("dot".into(), None), ("circle".into(), Some(Ty::F32))]);
        let cases: Vec<(Ty, Json)> = vec![
            (Ty::Bool, json!(true)),
            (Ty::S8, json!(-128)),
            (Ty::U64, json!(u64::MAX)),
            (Ty::S64, json!(i64::MIN)),
            (Ty::F64, json!(1.5)),
            (Ty::F64, json!("NaN")),
            (Ty::Char, json!("é")),
            (Ty::String, json!("hi")),
            (Ty::List(Box::new(Ty::U8)), json!([1, 2])),
            (Ty::Tuple(vec![Ty::U8, Ty::String]), json!([1, "a"])),
            (Ty::Option(Box::new(Ty::U8)), json!(null)),
            (Ty::Option(Box::new(Ty::U8)), json!(7)),
            (
                Ty::Result {
                    ok: Some(Box::new(Ty::U8)),
                    err: None,
                },
                json!({"err": null}),
            ),
            (point.clone(), json!({"x": 2.0, "label": "p"})),
            (Ty::Enum(vec!["red".into(), "blue".into()]), json!("blue")),
            (Ty::Flags(vec!["r".into(), "w".into()]), json!(["w"])),
            (shape.clone(), json!("dot")),
            (shape.clone(), json!({"circle": 0.5})),
        ];
        for (ty, j) in cases {
            let v = from_json(&ty, &j, "a").unwrap_or_else(|e| panic!("{ty}: {e}"));
            assert_eq!(to_json(&v), j, "{ty}");
        }
        // A left-out option field is none; its JSON form is null.
        let v = from_json(&point, &json!({"x": 1}), "p").expect("fits");
        assert_eq!(to_json(&v), json!({"x": 1.0, "label": null}));
    }

    #[test]
    fn arguments_that_do_not_fit_are_typed_errors() {
        let tool = Tools::new(vec![source(
            "f",
            vec![
                ("n", Ty::U8),
                ("c", Ty::Enum(vec!["a".into()])),
                ("o", Ty::Option(Box::new(Ty::S32))),
            ],
            vec![],
        )]);
        let f = tool.find("f").expect("f");
        let cases = [
            (json!([1]), ArgError::NotAnObject),
            (json!({"c": "a"}), ArgError::Missing { at: "n".into() }),
            (
                json!({"n": 1, "c": "a", "z": 0}),
                ArgError::Unknown { at: "z".into() },
            ),
            (
                json!({"n": 256, "c": "a"}),
                ArgError::OutOfRange {
                    at: "n".into(),
                    ty: "u8".into(),
                    got: "256".into(),
                },
            ),
            (
                json!({"n": 1.5, "c": "a"}),
                ArgError::Type {
                    at: "n".into(),
                    expected: "an integer (u8)".into(),
                },
            ),
            (
                json!({"n": 1, "c": "b"}),
                ArgError::Type {
                    at: "c".into(),
                    expected: "one of a".into(),
                },
            ),
        ];
        for (args, want) in cases {
            assert_eq!(f.arguments(Some(&args)), Err(want), "{args}");
        }
        assert_eq!(
            f.arguments(Some(&json!({"n": 1, "c": "a"}))),
            Ok(vec![
                Value::U8(1),
                Value::Enum("a".into()),
                Value::Option(None)
            ])
        );
        let schema = f.describe()["inputSchema"].clone();
        assert_eq!(schema["required"], json!(["n", "c"]));
        assert_eq!(schema["properties"]["n"]["maximum"], 255);
    }

    #[test]
    fn an_err_result_is_a_tool_error_and_an_ok_one_structured_content() {
        let ty = Ty::Result {
            ok: Some(Box::new(Ty::F64)),
            err: Some(Box::new(Ty::String)),
        };
        let tools = Tools::new(vec![source("div", vec![], vec![ty])]);
        let div = tools.find("div").expect("div");
        assert_eq!(
            div.describe()["outputSchema"]["properties"]["result"],
            schema(&Ty::F64, true)
        );
        let ok = div.result(vec![Value::Result(Ok(Some(Box::new(Value::F64(0.5)))))]);
        assert_eq!(ok["structuredContent"], json!({"result": 0.5}));
        assert_eq!(ok["isError"], false);
        let err = div.result(vec![Value::Result(Err(Some(Box::new(Value::String(
            "division by zero".into(),
        )))))]);
        assert_eq!(err, tool_error("division by zero"));
    }
}
