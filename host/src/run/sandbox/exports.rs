//! Components that export functions (Cairo `wasm:` oracles): one instance whose exported
//! functions are called with dynamic values, under the session machinery's limits.
//!
//! ```text
//!   load: walk the component type's exports ─► [ExportedFunc] (full name, WIT signature,
//!                                                codec types) + export indices
//!   ExportsRunner::instantiate ─► ExportInstance { Store { WasiCtx (no preopens, env or
//!        network unless granted; stdin empty; stdout/stderr drained, never to the engine),
//!        Limiter, OpenFiles }, the exported Funcs }
//!   ExportInstance::call(i, args, timeout): fuel re-armed (per-call budget), epoch deadline
//!        and an outer timer; Func::call_async; Val ⇄ proto Value
//!        └─ failure ─► Exit (OutOfFuel | DeadlineExceeded | MemoryLimit | Trap …); the caller
//!                      must then `close` the instance (its store may be mid-call)
//! ```

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandpipe_proto::component::{CodecError, MAX_TYPE_DEPTH, Ty, Value};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, Func, InstancePre, Type, Val};
use wasmtime::{Engine, Store, UpdateDeadline};

use super::{
    DeadlineHit, Limiter, Limits, Metering, PIPE_BYTES, State2, classify, instantiate_err, stdio,
    wasi_builder,
};
use crate::error::{Exit, HostError};
use crate::net::Resolver;
use crate::policy::{Fuel, Policy};
use crate::run::stderr::{StderrMode, StderrTail};
use crate::run::transport::Meter;

/// One function a component exports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedFunc {
    /// The full name: the export path joined with `/` (`add`, `ns:pkg/iface@1.0.0/add`).
    pub name: String,
    /// Its WIT signature, e.g. `func(a: u64, b: u64) -> u64`.
    pub signature: String,
    /// Parameter names, in order.
    pub param_names: Vec<String>,
    /// Parameter types, or why one cannot be called with (a resource, a stream, …). The Cairo
    /// codec carries fewer ([`check_supported`](sandpipe_proto::component::check_supported)).
    pub params: Result<Vec<Ty>, CodecError>,
    /// Result types, or why the codec cannot carry one.
    pub results: Result<Vec<Ty>, CodecError>,
}

/// The exported functions of `component`, in export order, with their export indices.
pub(crate) fn functions(
    component: &Component,
    engine: &Engine,
) -> (Vec<ExportedFunc>, Vec<ComponentExportIndex>) {
    let mut funcs = Vec::new();
    let mut indices = Vec::new();
    let mut stack: Vec<(Vec<String>, ComponentItem)> = component
        .component_type()
        .exports(engine)
        .map(|(name, item)| (vec![name.to_owned()], item.ty))
        .collect();
    stack.reverse();
    while let Some((path, item)) = stack.pop() {
        match item {
            ComponentItem::ComponentFunc(f) => {
                let index =
                    path.iter()
                        .try_fold(None, |parent: Option<ComponentExportIndex>, name| {
                            component.get_export_index(parent.as_ref(), name).map(Some)
                        });
                let Some(Some(index)) = index else { continue };
                let params: Vec<(String, Type)> =
                    f.params().map(|(n, t)| (n.to_owned(), t)).collect();
                let results: Vec<Type> = f.results().collect();
                let signature = format!(
                    "func({}){}",
                    params
                        .iter()
                        .map(|(n, t)| format!("{n}: {}", wit_name(t)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    match results.as_slice() {
                        [] => String::new(),
                        [one] => format!(" -> {}", wit_name(one)),
                        many => format!(
                            " -> tuple<{}>",
                            many.iter().map(wit_name).collect::<Vec<_>>().join(", ")
                        ),
                    }
                );
                funcs.push(ExportedFunc {
                    name: path.join("/"),
                    signature,
                    param_names: params.iter().map(|(n, _)| n.clone()).collect(),
                    params: params.iter().map(|(_, t)| ty_of(t, 1)).collect(),
                    results: results.iter().map(|t| ty_of(t, 1)).collect(),
                });
                indices.push(index);
            }
            ComponentItem::ComponentInstance(i) => {
                descend(&mut stack, &path, i.exports(engine).map(|(n, e)| (n, e.ty)));
            }
            ComponentItem::Component(c) => {
                descend(&mut stack, &path, c.exports(engine).map(|(n, e)| (n, e.ty)));
            }
            _ => {}
        }
    }
    (funcs, indices)
}

fn unsupported(name: &str) -> CodecError {
    CodecError::UnsupportedType {
        ty: name.to_owned(),
    }
}

/// The codec's view of a component type (names of unsupported types as Scarb's codec gives
/// them).
fn ty_of(t: &Type, depth: usize) -> Result<Ty, CodecError> {
    if depth > MAX_TYPE_DEPTH {
        return Err(CodecError::TooDeep {
            depth,
            limit: MAX_TYPE_DEPTH,
        });
    }
    let inner = |t: &Type| ty_of(t, depth + 1).map(Box::new);
    Ok(match t {
        Type::Bool => Ty::Bool,
        Type::S8 => Ty::S8,
        Type::U8 => Ty::U8,
        Type::S16 => Ty::S16,
        Type::U16 => Ty::U16,
        Type::S32 => Ty::S32,
        Type::U32 => Ty::U32,
        Type::S64 => Ty::S64,
        Type::U64 => Ty::U64,
        Type::Char => Ty::Char,
        Type::String => Ty::String,
        Type::List(l) => Ty::List(inner(&l.ty())?),
        Type::Tuple(tu) => Ty::Tuple(
            tu.types()
                .map(|t| ty_of(&t, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Type::Option(o) => Ty::Option(inner(&o.ty())?),
        Type::Result(r) => Ty::Result {
            ok: r.ok().map(|t| inner(&t)).transpose()?,
            err: r.err().map(|t| inner(&t)).transpose()?,
        },
        Type::Float32 => Ty::F32,
        Type::Float64 => Ty::F64,
        Type::Record(r) => Ty::Record(
            r.fields()
                .map(|f| Ok((f.name.to_owned(), ty_of(&f.ty, depth + 1)?)))
                .collect::<Result<_, CodecError>>()?,
        ),
        Type::Variant(v) => Ty::Variant(
            v.cases()
                .map(|c| {
                    Ok((
                        c.name.to_owned(),
                        c.ty.map(|t| ty_of(&t, depth + 1)).transpose()?,
                    ))
                })
                .collect::<Result<_, CodecError>>()?,
        ),
        Type::Enum(e) => Ty::Enum(e.names().map(str::to_owned).collect()),
        Type::Flags(f) => Ty::Flags(f.names().map(str::to_owned).collect()),
        Type::Own(_) => return Err(unsupported("own")),
        Type::Borrow(_) => return Err(unsupported("borrow")),
        Type::Future(_) => return Err(unsupported("future")),
        Type::Stream(_) => return Err(unsupported("stream")),
        Type::ErrorContext => return Err(unsupported("error-context")),
        _ => return Err(unsupported("this component-model type")),
    })
}

/// Push an instance's or nested component's exports under `path` onto the walk's stack, so
/// they are visited in declaration order.
fn descend<'a>(
    stack: &mut Vec<(Vec<String>, ComponentItem)>,
    path: &[String],
    children: impl Iterator<Item = (&'a str, ComponentItem)>,
) {
    let start = stack.len();
    stack.extend(children.map(|(name, item)| {
        let mut p = path.to_vec();
        p.push(name.to_owned());
        (p, item)
    }));
    stack[start..].reverse();
}

/// A type in WIT syntax, for signatures.
fn wit_name(t: &Type) -> String {
    match ty_of(t, 1) {
        Ok(ty) => ty.to_string(),
        Err(_) => match t {
            Type::Float32 => "f32".into(),
            Type::Float64 => "f64".into(),
            Type::List(l) => format!("list<{}>", wit_name(&l.ty())),
            Type::Option(o) => format!("option<{}>", wit_name(&o.ty())),
            Type::Tuple(tu) => format!(
                "tuple<{}>",
                tu.types()
                    .map(|t| wit_name(&t))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Type::Result(r) => format!(
                "result<{}, {}>",
                r.ok().map(|t| wit_name(&t)).unwrap_or_else(|| "_".into()),
                r.err().map(|t| wit_name(&t)).unwrap_or_else(|| "_".into())
            ),
            Type::Record(_) => "record".into(),
            Type::Variant(_) => "variant".into(),
            Type::Enum(_) => "enum".into(),
            Type::Flags(_) => "flags".into(),
            Type::Own(_) => "own<resource>".into(),
            Type::Borrow(_) => "borrow<resource>".into(),
            Type::Future(_) => "future".into(),
            Type::Stream(_) => "stream".into(),
            Type::ErrorContext => "error-context".into(),
            _ => "unsupported".into(),
        },
    }
}

fn to_val(v: &Value) -> Val {
    match v {
        Value::Bool(b) => Val::Bool(*b),
        Value::S8(n) => Val::S8(*n),
        Value::U8(n) => Val::U8(*n),
        Value::S16(n) => Val::S16(*n),
        Value::U16(n) => Val::U16(*n),
        Value::S32(n) => Val::S32(*n),
        Value::U32(n) => Val::U32(*n),
        Value::S64(n) => Val::S64(*n),
        Value::U64(n) => Val::U64(*n),
        Value::Char(c) => Val::Char(*c),
        Value::String(s) => Val::String(s.clone()),
        Value::List(items) => Val::List(items.iter().map(to_val).collect()),
        Value::Tuple(items) => Val::Tuple(items.iter().map(to_val).collect()),
        Value::Option(o) => Val::Option(o.as_ref().map(|v| Box::new(to_val(v)))),
        Value::Result(r) => Val::Result(match r {
            Ok(p) => Ok(p.as_ref().map(|v| Box::new(to_val(v)))),
            Err(p) => Err(p.as_ref().map(|v| Box::new(to_val(v)))),
        }),
        Value::F32(f) => Val::Float32(*f),
        Value::F64(f) => Val::Float64(*f),
        Value::Record(fields) => {
            Val::Record(fields.iter().map(|(n, v)| (n.clone(), to_val(v))).collect())
        }
        Value::Enum(name) => Val::Enum(name.clone()),
        Value::Variant(name, p) => {
            Val::Variant(name.clone(), p.as_ref().map(|v| Box::new(to_val(v))))
        }
        Value::Flags(names) => Val::Flags(names.clone()),
    }
}

fn of_val(v: Val) -> Result<Value, CodecError> {
    let boxed = |v: Option<Box<Val>>| -> Result<Option<Box<Value>>, CodecError> {
        v.map(|v| of_val(*v).map(Box::new)).transpose()
    };
    Ok(match v {
        Val::Bool(b) => Value::Bool(b),
        Val::S8(n) => Value::S8(n),
        Val::U8(n) => Value::U8(n),
        Val::S16(n) => Value::S16(n),
        Val::U16(n) => Value::U16(n),
        Val::S32(n) => Value::S32(n),
        Val::U32(n) => Value::U32(n),
        Val::S64(n) => Value::S64(n),
        Val::U64(n) => Value::U64(n),
        Val::Char(c) => Value::Char(c),
        Val::String(s) => Value::String(s),
        Val::List(items) => Value::List(items.into_iter().map(of_val).collect::<Result<_, _>>()?),
        Val::Tuple(items) => Value::Tuple(items.into_iter().map(of_val).collect::<Result<_, _>>()?),
        Val::Option(o) => Value::Option(boxed(o)?),
        Val::Result(Ok(p)) => Value::Result(Ok(boxed(p)?)),
        Val::Result(Err(p)) => Value::Result(Err(boxed(p)?)),
        Val::Float32(f) => Value::F32(f),
        Val::Float64(f) => Value::F64(f),
        Val::Record(fields) => Value::Record(
            fields
                .into_iter()
                .map(|(n, v)| Ok((n, of_val(v)?)))
                .collect::<Result<_, CodecError>>()?,
        ),
        Val::Variant(name, p) => Value::Variant(name, boxed(p)?),
        Val::Enum(name) => Value::Enum(name),
        Val::Flags(names) => Value::Flags(names),
        Val::Resource(_) => return Err(unsupported("own/borrow")),
        _ => return Err(unsupported("this component-model value")),
    })
}

/// What it takes to start export instances of one component.
#[derive(Clone)]
pub(crate) struct ExportsRunner {
    pub(crate) pre: InstancePre<State2>,
    pub(crate) indices: Arc<Vec<ComponentExportIndex>>,
    pub(crate) metering: Metering,
}

impl std::fmt::Debug for ExportsRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportsRunner")
            .field("functions", &self.indices.len())
            .finish_non_exhaustive()
    }
}

/// Why a call did not return values.
#[derive(Debug)]
pub(crate) enum CallFailure {
    /// The guest was stopped or crashed; the instance must be closed.
    Stopped(Exit),
    /// A result value the codec cannot carry (the instance is fine).
    Results(CodecError),
}

/// One live instance of an export-calling component.
pub(crate) struct ExportInstance {
    store: Store<State2>,
    funcs: Vec<Option<Func>>,
    deadline: Arc<Mutex<Option<Instant>>>,
    denied: Arc<AtomicBool>,
    meter: Arc<Meter>,
    stderr: StderrTail,
    drains: Vec<tokio::task::JoinHandle<()>>,
    fuel: Fuel,
    max_memory: Option<u64>,
}

impl std::fmt::Debug for ExportInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportInstance").finish_non_exhaustive()
    }
}

impl ExportsRunner {
    /// Start a fresh instance under `policy`. Its stdin is empty; its stdout and stderr are
    /// drained where `mode` says (never to sandpipe's stdout), keeping `tail_lines` of stderr.
    pub(crate) async fn instantiate(
        &self,
        policy: &Policy,
        label: &str,
        mode: StderrMode,
        tail_lines: usize,
    ) -> Result<ExportInstance, HostError> {
        let (host_in, guest_in) = stdio::stdin_pipe(PIPE_BYTES);
        drop(host_in); // the guest reads EOF
        let (guest_out, host_out) = stdio::stdout_pipe(PIPE_BYTES);
        let (guest_err, host_err) = stdio::stdout_pipe(PIPE_BYTES);
        let resolver = Arc::new(
            Resolver::new(policy.net.clone(), policy.audit.clone()).with_tape(policy.tape.clone()),
        );
        let mut builder = wasi_builder(policy, label, guest_in, guest_out, guest_err, &resolver)?;
        let meter = Arc::new(Meter::default());
        let denied = Arc::new(AtomicBool::new(false));
        let stderr = StderrTail::new(tail_lines);
        let drains = vec![
            tokio::spawn(stderr.clone().drain(host_err, mode, label.to_owned())),
            tokio::spawn(StderrTail::new(0).drain(host_out, mode, label.to_owned())),
        ];
        let state = State2::new(
            policy,
            builder.build(),
            Limiter::new(policy, denied.clone(), meter.clone()),
            resolver,
        );
        let mut store = Store::new(self.pre.engine(), state);
        store.limiter(|s| &mut s.limiter);
        let fuel = policy.fuel;
        if self.metering.fuel {
            store
                .set_fuel(fuel.limit().unwrap_or(u64::MAX))
                .map_err(super::engine_err)?;
        } else if fuel != Fuel::Unlimited {
            return Err(super::engine_err(
                "a fuel limit needs fuel metering, which this host's engine has off",
            ));
        }
        let deadline: Arc<Mutex<Option<Instant>>> = Arc::default();
        if self.metering.epochs {
            let at = deadline.clone();
            store.epoch_deadline_callback(move |_| {
                let due = *at.lock().unwrap_or_else(|p| p.into_inner());
                match due {
                    Some(due) if Instant::now() >= due => Err(wasmtime::Error::new(DeadlineHit)),
                    _ => Ok(UpdateDeadline::Yield(1)),
                }
            });
            store.set_epoch_deadline(1);
        }
        let instance = self
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(instantiate_err)?;
        let funcs = self
            .indices
            .iter()
            .map(|i| instance.get_func(&mut store, i))
            .collect();
        Ok(ExportInstance {
            store,
            funcs,
            deadline,
            denied,
            meter,
            stderr,
            drains,
            fuel,
            max_memory: policy.max_memory,
        })
    }
}

impl ExportInstance {
    /// Linear memory in use, in bytes.
    pub(crate) fn memory_in_use(&self) -> u64 {
        self.meter.memory.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The instance's meter (linear memory, live), for the session it stands behind.
    pub(crate) fn meter(&self) -> Arc<Meter> {
        self.meter.clone()
    }

    /// Where the guest's last stderr lines are kept.
    pub(crate) fn stderr(&self) -> StderrTail {
        self.stderr.clone()
    }

    /// Close an instance a call stopped with `exit`: the exit (a trap's with the whole stderr
    /// tail, drained) and the tail.
    pub(crate) async fn close_stopped(self, exit: Exit) -> (Exit, Vec<String>) {
        let stderr_tail = self.close().await;
        let exit = match exit {
            Exit::Trap { message, .. } => Exit::Trap {
                message,
                stderr_tail: stderr_tail.clone(),
            },
            other => other,
        };
        (exit, stderr_tail)
    }

    /// Call function `index` with `args` (already checked against its types), within
    /// `timeout` of wall-clock time and the per-call fuel budget.
    pub(crate) async fn call(
        &mut self,
        index: usize,
        args: &[Value],
        results: usize,
        timeout: Option<Duration>,
    ) -> Result<Vec<Value>, CallFailure> {
        let Some(Some(func)) = self.funcs.get(index).cloned() else {
            return Err(CallFailure::Stopped(Exit::Trap {
                message: format!("export {index} is not a function of this instance"),
                stderr_tail: Vec::new(),
            }));
        };
        if let Fuel::PerRequest(budget) = self.fuel {
            // The engine has fuel on whenever a budget is set (checked at instantiation).
            let _ = self.store.set_fuel(budget);
        }
        let params: Vec<Val> = args.iter().map(to_val).collect();
        let mut out = vec![Val::Bool(false); results];
        let started = Instant::now();
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) = timeout.map(|d| started + d);
        let limits = Limits {
            fuel: self.fuel,
            meter: self.meter.clone(),
            max_memory: self.max_memory,
            deadline: timeout.map(|d| (started + d, d)),
            denied: self.denied.clone(),
        };
        let call = func.call_async(&mut self.store, &params, &mut out);
        // The outer timer covers a guest blocked in a host call (a sleep), where no epoch
        // check runs. Dropping the call mid-way leaves the store unusable: the caller closes it.
        let r = match timeout {
            Some(d) => match tokio::time::timeout(d, call).await {
                Ok(r) => r,
                Err(_) => Err(wasmtime::Error::new(DeadlineHit)),
            },
            None => call.await,
        };
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) = None;
        match r {
            Ok(()) => out
                .into_iter()
                .map(of_val)
                .collect::<Result<_, _>>()
                .map_err(CallFailure::Results),
            Err(e) => Err(CallFailure::Stopped(classify(
                Err(e),
                &limits,
                &self.stderr,
            ))),
        }
    }

    /// Drop the instance and return the guest's last stderr lines, once every byte it wrote
    /// has been drained.
    pub(crate) async fn close(self) -> Vec<String> {
        let ExportInstance {
            store,
            drains,
            stderr,
            ..
        } = self;
        drop(store); // closes the guest's pipe ends: the drains reach EOF
        for d in drains {
            let _ = tokio::time::timeout(Duration::from_secs(1), d).await;
        }
        stderr.lines()
    }
}
