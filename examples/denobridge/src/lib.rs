//! An example terraform-provider-denobridge provider, run by `example-denobridge`.
//!
//! `example-denobridge STATE_DIR` is a RESOURCE provider that keeps each resource as the JSON
//! file `STATE_DIR/<id>.json` (`{"props": .., "state": {"version": n}}`). Ids are `r1`, `r2`,
//! … from a counter kept in `STATE_DIR/next-id`: no clock, no randomness, so a session
//! replays byte for byte.
//! - `create` needs a string `props.name` (else `-32000`); state starts at version 1.
//! - `read` of an id that is not `r<number>` is `-32602`; of a missing file, `{"exists": false}`.
//! - `update` bumps the version; of a missing resource it fails like a crashing Deno script: a
//!   bare `-32603 Internal error`, with the detail only on stderr.
//! - `delete` removes the file. `modifyPlan` (updates only): a changed `name` requires
//!   replacement, equal props are no change, anything else is planned as given with a warning.
//! - Deterministic out-of-order answers: a `create` whose props hold `"defer": true` is answered
//!   right after the next request's answer.
//!
//! `example-denobridge STATE_DIR action` is an ACTION provider instead: `invoke` sends the
//! progress messages `step 1 of 2` and `step 2 of 2`, then answers `{"done": true}`.

use std::io::{self, Write};
use std::path::PathBuf;

use sandpipe_guest::denobridge::{ActionProvider, Answer, ResourceProvider};
use sandpipe_guest::{Framed, GuestError};
use sandpipe_proto::denobridge::{
    CreateResult, DeleteParams, Diagnostic, DoneResult, ModifyPlanParams, ModifyPlanResult,
    PlanType, PropsParams, ReadFound, ReadParams, ReadResult, Request, UpdateParams, UpdateResult,
    internal_error,
};
use sandpipe_proto::jsonrpc::{ErrorObject, INVALID_PARAMS};
use serde_json::{Value, json};

/// The resource provider: one JSON file per resource under `dir`.
#[derive(Debug)]
pub struct FileStore {
    /// The state directory (a preopened directory under wasm).
    pub dir: PathBuf,
}

impl FileStore {
    fn path(&self, id: &str) -> Result<PathBuf, ErrorObject> {
        let valid = id
            .strip_prefix('r')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !valid {
            let detail = format!("resource id {id:?} is not r<number>");
            return Err(ErrorObject::new(INVALID_PARAMS, "Invalid params").with_data(detail.into()));
        }
        Ok(self.dir.join(format!("{id}.json")))
    }

    /// The stored record, `None` if the resource does not exist.
    fn load(&self, id: &str) -> Result<Option<Value>, ErrorObject> {
        match std::fs::read(self.path(id)?) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| fail(id, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(fail(id, e)),
        }
    }

    fn store(&self, id: &str, props: Value, version: u64) -> Result<Value, ErrorObject> {
        let state = json!({ "version": version });
        let record = json!({ "props": props, "state": state });
        std::fs::write(self.path(id)?, record.to_string()).map_err(|e| fail(id, e))?;
        Ok(state)
    }
}

/// A bare `-32603`, the detail only on stderr (what a failing Deno method does).
fn fail(what: &str, err: impl std::fmt::Display) -> ErrorObject {
    eprintln!("example-denobridge: {what}: {err}");
    internal_error()
}

impl ResourceProvider for FileStore {
    fn create(&mut self, p: PropsParams) -> Answer<CreateResult> {
        if !p.props.get("name").is_some_and(Value::is_string) {
            return Err(ErrorObject::new(-32000, "props.name must be a string"));
        }
        let counter = self.dir.join("next-id");
        let n: u64 = match std::fs::read_to_string(&counter) {
            Ok(text) => text.trim().parse().map_err(|e| fail("next-id", e))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => 1,
            Err(e) => return Err(fail("next-id", e)),
        };
        std::fs::write(&counter, (n + 1).to_string()).map_err(|e| fail("next-id", e))?;
        let id = format!("r{n}");
        let state = self.store(&id, p.props, 1)?;
        Ok(CreateResult {
            id,
            state,
            ..Default::default()
        })
    }

    fn read(&mut self, p: ReadParams) -> Answer<ReadResult> {
        Ok(match self.load(&p.id)? {
            None => ReadResult::Gone,
            Some(mut record) => ReadResult::Found(ReadFound {
                // `get_mut`, not `[..]`: a hand-edited file must not panic the plugin.
                props: record.get_mut("props").map(Value::take).unwrap_or_default(),
                state: record.get_mut("state").map(Value::take).unwrap_or_default(),
                ..Default::default()
            }),
        })
    }

    fn update(&mut self, p: UpdateParams) -> Answer<UpdateResult> {
        let Some(record) = self.load(&p.id)? else {
            return Err(fail(&p.id, "update of a resource that does not exist"));
        };
        let version = record["state"]["version"]
            .as_u64()
            .unwrap_or(0)
            .saturating_add(1);
        let state = self.store(&p.id, p.next_props, version)?;
        Ok(UpdateResult {
            state,
            ..Default::default()
        })
    }

    fn delete(&mut self, p: DeleteParams) -> Answer<DoneResult> {
        match std::fs::remove_file(self.path(&p.id)?) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(fail(&p.id, e)),
            _ => Ok(DoneResult::done()),
        }
    }

    fn modify_plan(&mut self, p: ModifyPlanParams) -> Answer<ModifyPlanResult> {
        let current = p.current_props.unwrap_or(Value::Null);
        Ok(match p.plan_type {
            PlanType::Update if p.next_props.get("name") != current.get("name") => {
                ModifyPlanResult::RequiresReplacement
            }
            PlanType::Update if p.next_props != current => ModifyPlanResult::Modified {
                modified_props: p.next_props,
                diagnostics: Some(vec![Diagnostic::warning(
                    "updated in place",
                    "name is unchanged",
                )]),
            },
            _ => ModifyPlanResult::NoChanges,
        })
    }

    fn answer_after_next(&self, request: &Request) -> bool {
        matches!(request, Request::Create(p) if p.props.get("defer") == Some(&Value::Bool(true)))
    }
}

/// The action provider: two progress messages, then done.
#[derive(Debug)]
pub struct TwoSteps;

impl ActionProvider for TwoSteps {
    fn invoke(&mut self, _p: PropsParams, progress: &mut dyn FnMut(String)) -> Answer<DoneResult> {
        for step in 1..=2 {
            progress(format!("step {step} of 2"));
        }
        Ok(DoneResult::done())
    }
}

/// The whole plugin minus stdio: `args` are `STATE_DIR [action]`.
pub fn main_with<R: sandpipe_guest::Input, W: Write>(
    io: &mut Framed<R, W>,
    args: &[String],
) -> Result<(), GuestError> {
    let usage = || {
        GuestError::Io(io::Error::other(
            "usage: example-denobridge STATE_DIR [action]",
        ))
    };
    match args {
        [dir] => sandpipe_guest::denobridge::serve_resource(io, &mut FileStore { dir: dir.into() }),
        [_, mode] if mode == "action" => {
            sandpipe_guest::denobridge::serve_action(io, &mut TwoSteps)
        }
        _ => Err(usage()),
    }
}
