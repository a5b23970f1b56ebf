//! An example Orchard provider, runnable in memory by tests and as `example-orchard`.
//!
//! Actions:
//! - `echo`: the outputs are the attrs, unchanged.
//! - `sum`: `{"values": [numbers]}` → `{"sum": n}` (an integer when every value is one);
//!   a missing list or a non-number is `validation_failed`, an integer overflow `execute_failed`.
//!
//! `configure` refuses `{"fail": true}` with `configure_failed`. Any execute whose attrs hold
//! `"defer": true` is answered only after the next request has been answered (see
//! [`sandpipe_guest::orchard::Provider::defer`]), which makes answers arrive out of order.

use std::io::Write;

use sandpipe_guest::orchard::{
    ActionSchema, AttributeSchema, Provider, ProviderError, ProviderSchema, run,
};
use sandpipe_guest::{Framed, GuestError};
use serde_json::{Value, json};

/// The provider; it keeps no state.
#[derive(Debug, Default)]
pub struct Example;

impl Provider for Example {
    fn schema(&self) -> ProviderSchema {
        let defer = || AttributeSchema::new("bool", false);
        ProviderSchema::new("example-orchard")
            .with_action(
                "echo",
                ActionSchema::new("return the attrs as outputs").with_attribute("defer", defer()),
            )
            .with_action(
                "sum",
                ActionSchema::new("add up a list of numbers")
                    .with_attribute("values", AttributeSchema::new("list(number)", true))
                    .with_attribute("defer", defer()),
            )
    }

    fn configure(&mut self, config: Value) -> Result<(), ProviderError> {
        if config.get("fail") == Some(&Value::Bool(true)) {
            return Err(ProviderError::configure_failed("configuration rejected")
                .with_detail("config.fail is true"));
        }
        Ok(())
    }

    fn execute(&mut self, action: &str, attrs: Value) -> Result<Value, ProviderError> {
        match action {
            "sum" => sum(&attrs),
            _ => Ok(attrs),
        }
    }

    fn defer(&self, _action: &str, attrs: &Value) -> bool {
        attrs.get("defer") == Some(&Value::Bool(true))
    }
}

fn sum(attrs: &Value) -> Result<Value, ProviderError> {
    let Some(values) = attrs.get("values").and_then(Value::as_array) else {
        return Err(ProviderError::validation_failed(
            "values must be a list of numbers",
        ));
    };
    let mut int: Option<i64> = Some(0);
    let mut float = 0.0;
    for (i, v) in values.iter().enumerate() {
        let Some(f) = v.as_f64() else {
            return Err(
                ProviderError::validation_failed(format!("values[{i}] is not a number"))
                    .with_detail(format!("got {v}")),
            );
        };
        float += f;
        int = match (int, v.as_i64()) {
            (Some(acc), Some(n)) => Some(
                acc.checked_add(n)
                    .ok_or_else(|| ProviderError::execute_failed("integer overflow"))?,
            ),
            _ => None,
        };
    }
    Ok(json!({ "sum": int.map_or(json!(float), Value::from) }))
}

/// The whole plugin minus stdio: `args == ["schema"]` prints the schema, otherwise serve.
pub fn main_with<R: sandpipe_guest::Input, W: Write>(
    io: &mut Framed<R, W>,
    args: &[String],
) -> Result<(), GuestError> {
    run(io, &mut Example, args)
}
