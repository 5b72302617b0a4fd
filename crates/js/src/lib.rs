//! Server-side JavaScript (`$where`, `$function`, `$accumulator`) on QuickJS, through
//! the `rquickjs` bindings. Implements the query crate's [`ScriptEngine`] interface.
//!
//! Each operation gets its own QuickJS runtime (a separate heap with a memory limit and
//! a C-stack limit); functions are compiled once per operation and kept in it. A running
//! script is stopped by QuickJS's interrupt handler when its operation is killed, reaches
//! its `maxTimeMS` deadline, or one call runs longer than [`CALL_TIMEOUT`] (mongod's
//! `internalQueryJavaScriptFnTimeoutMillis`). `sleep(ms)` waits on the operation, so it
//! wakes as soon as the operation is killed or expires.
//!
//! BSON values reach JavaScript as mongod's scope shows them (numbers, strings, Date,
//! ObjectId, NumberLong, ... see `prelude.js`) and results come back as BSON (a JS
//! number becomes a double, as in mongod).

mod convert;

use rquickjs::function::{Args, Opt};
use rquickjs::{CaughtError, Context, Ctx, Function, Object, Runtime, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tailstream_query::error::{codes, Error, Result};
use tailstream_query::script::{FunctionId, Operation, ScriptEngine, ScriptScope};

/// Heap of one operation's scripts.
pub const HEAP_LIMIT_BYTES: usize = 128 * 1024 * 1024;
/// C stack the interpreter may use (deep recursion fails with a RangeError).
pub const MAX_STACK_BYTES: usize = 1024 * 1024;
/// The longest one call of a script may run (mongod's default
/// `internalQueryJavaScriptFnTimeoutMillis`).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

const PRELUDE: &str = include_str!("prelude.js");
/// Hidden global array holding the functions compiled in a scope.
const COMPILED: &str = "__compiled";
/// Hidden global array where `emit(key, value)` appends key and value (mapReduce).
const EMITTED: &str = "__emitted";
/// `emit` and the Array helpers, installed with a scope's first map call.
const MAP_REDUCE_PRELUDE: &str = include_str!("map_reduce.js");

/// The QuickJS engine, installed with `tailstream_query::script::install`.
pub struct QuickJs {
    heap_limit: usize,
    call_timeout: Duration,
}

impl Default for QuickJs {
    fn default() -> Self {
        QuickJs {
            heap_limit: HEAP_LIMIT_BYTES,
            call_timeout: CALL_TIMEOUT,
        }
    }
}

impl QuickJs {
    pub fn new() -> Self {
        Self::default()
    }

    /// An engine with other limits (tests).
    pub fn with_limits(heap_limit: usize, call_timeout: Duration) -> Self {
        QuickJs {
            heap_limit,
            call_timeout,
        }
    }
}

impl ScriptEngine for QuickJs {
    fn new_scope(&self) -> Result<Box<dyn ScriptScope>> {
        Ok(Box::new(Scope::new(self.heap_limit, self.call_timeout)?))
    }
}

/// What the interrupt handler and `sleep` check during a call.
#[derive(Default)]
struct Watch {
    op: Option<Arc<Operation>>,
    /// End of the current call's time budget.
    call_deadline: Option<Instant>,
    /// The call ran out of its budget.
    timed_out: bool,
}

type SharedWatch = Arc<Mutex<Watch>>;

fn lock(w: &SharedWatch) -> std::sync::MutexGuard<'_, Watch> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

fn should_interrupt(w: &SharedWatch) -> bool {
    let mut g = lock(w);
    if g.op.as_ref().is_some_and(|op| op.interrupted()) {
        return true;
    }
    if g.call_deadline.is_some_and(|d| Instant::now() >= d) {
        g.timed_out = true;
        return true;
    }
    false
}

/// One operation's JavaScript: a QuickJS runtime and context.
struct Scope {
    // Field order is drop order: the context before its runtime.
    context: Context,
    runtime: Runtime,
    by_source: HashMap<String, FunctionId>,
    watch: SharedWatch,
    call_timeout: Duration,
}

impl Scope {
    fn new(heap_limit: usize, call_timeout: Duration) -> Result<Scope> {
        let runtime = Runtime::new().map_err(setup_error)?;
        runtime.set_memory_limit(heap_limit);
        runtime.set_max_stack_size(MAX_STACK_BYTES);
        let watch: SharedWatch = Arc::default();
        let w = watch.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || should_interrupt(&w))));
        let context = Context::full(&runtime).map_err(setup_error)?;
        context
            .with(|ctx| install_globals(&ctx, watch.clone()))
            .map_err(setup_error)?;
        Ok(Scope {
            context,
            runtime,
            by_source: HashMap::new(),
            watch,
            call_timeout,
        })
    }

    /// Arms the interrupt handler for one call of `op`.
    fn begin(&self, op: &Arc<Operation>) {
        let mut g = lock(&self.watch);
        g.op = Some(op.clone());
        g.call_deadline = Some(Instant::now() + self.call_timeout);
        g.timed_out = false;
    }

    fn end(&self) {
        let mut g = lock(&self.watch);
        g.op = None;
        g.call_deadline = None;
    }

    /// Runs `f` in the context for one call of `op`, turning a JavaScript failure into
    /// mongod's error; an operation killed meanwhile fails even if the script caught
    /// the interruption.
    fn run<T>(
        &self,
        op: &Arc<Operation>,
        f: impl for<'js> FnOnce(&Ctx<'js>) -> rquickjs::Result<T>,
    ) -> Result<T> {
        self.begin(op);
        let watch = &self.watch;
        let out = self.context.with(|ctx| {
            let r = f(&ctx);
            let r = r.map_err(|e| failure(&ctx, e, watch));
            if r.is_err() {
                // Nothing may stay pending for the next call.
                let _ = ctx.catch();
            }
            r
        });
        self.end();
        op.check()?;
        if out.is_err() && lock(&self.watch).timed_out {
            return Err(Error::new(
                codes::INTERRUPTED,
                "JavaScript execution interrupted",
            ));
        }
        // The heap may have filled up: collect before the next call rather than fail it.
        if out.is_err() {
            self.runtime.run_gc();
        }
        out
    }

    fn function<'js>(ctx: &Ctx<'js>, f: FunctionId) -> rquickjs::Result<Function<'js>> {
        let compiled: rquickjs::Array = ctx.globals().get(COMPILED)?;
        compiled.get(f.0)
    }
}

impl ScriptScope for Scope {
    fn compile(&mut self, source: &str, op: &Arc<Operation>) -> Result<FunctionId> {
        if let Some(id) = self.by_source.get(source) {
            return Ok(*id);
        }
        let id = self.run(op, |ctx| {
            let f = make_function(ctx, source)?;
            let compiled: rquickjs::Array = ctx.globals().get(COMPILED)?;
            let id = compiled.len();
            compiled.set(id, f)?;
            Ok(FunctionId(id))
        })?;
        self.by_source.insert(source.to_string(), id);
        Ok(id)
    }

    fn call(
        &mut self,
        f: FunctionId,
        this_doc: Option<&bson::Document>,
        args: &[bson::Bson],
        op: &Arc<Operation>,
    ) -> Result<bson::Bson> {
        let mut out = None;
        self.run(op, |ctx| {
            let func = Self::function(ctx, f)?;
            let types = convert::Types::new(ctx)?;
            let mut call = Args::new(ctx.clone(), args.len());
            if let Some(d) = this_doc {
                let this = types.document(ctx, d)?;
                ctx.globals().set("obj", this.clone())?;
                call.this(this)?;
            }
            for a in args {
                call.push_arg(types.to_js(ctx, a)?)?;
            }
            let value: Value = call.apply(&func)?;
            out = Some(types.from_js(&value));
            Ok(())
        })?;
        returned(out)
    }

    fn fold(
        &mut self,
        f: FunctionId,
        state: bson::Bson,
        calls: &[bson::Bson],
        op: &Arc<Operation>,
    ) -> Result<bson::Bson> {
        let mut out = None;
        self.run(op, |ctx| {
            let func = Self::function(ctx, f)?;
            let types = convert::Types::new(ctx)?;
            let mut state = types.to_js(ctx, &state)?;
            for c in calls {
                let extra: &[bson::Bson] = match c {
                    bson::Bson::Array(a) => a,
                    other => std::slice::from_ref(other),
                };
                let mut call = Args::new(ctx.clone(), extra.len() + 1);
                call.push_arg(state)?;
                for a in extra {
                    call.push_arg(types.to_js(ctx, a)?)?;
                }
                state = call.apply(&func)?;
            }
            out = Some(types.from_js(&state));
            Ok(())
        })?;
        returned(out)
    }

    fn call_predicate(
        &mut self,
        f: FunctionId,
        this_doc: &bson::Document,
        op: &Arc<Operation>,
    ) -> Result<bool> {
        self.run(op, |ctx| {
            let func = Self::function(ctx, f)?;
            let types = convert::Types::new(ctx)?;
            let this = types.document(ctx, this_doc)?;
            ctx.globals().set("obj", this.clone())?;
            let mut call = Args::new(ctx.clone(), 0);
            call.this(this)?;
            let value: Value = call.apply(&func)?;
            Ok(truthy(&value))
        })
    }

    fn call_emitting(
        &mut self,
        f: FunctionId,
        this_doc: &bson::Document,
        op: &Arc<Operation>,
    ) -> Result<Vec<(bson::Bson, bson::Bson)>> {
        let mut out = None;
        self.run(op, |ctx| {
            if !ctx.globals().contains_key("emit")? {
                ctx.eval_with_options::<(), _>(MAP_REDUCE_PRELUDE, sloppy())?;
            }
            let emitted = rquickjs::Array::new(ctx.clone())?;
            ctx.globals().set(EMITTED, emitted.clone())?;
            let func = Self::function(ctx, f)?;
            let types = convert::Types::new(ctx)?;
            let this = types.document(ctx, this_doc)?;
            ctx.globals().set("obj", this.clone())?;
            let mut call = Args::new(ctx.clone(), 0);
            call.this(this)?;
            call.apply::<Value>(&func)?;
            let values: Vec<Value> = emitted.iter().collect::<rquickjs::Result<_>>()?;
            out = Some(
                values
                    .chunks(2)
                    .map(|kv| Ok((types.from_js(&kv[0])?, types.from_js(&kv[1])?)))
                    .collect::<Result<Vec<_>>>(),
            );
            Ok(())
        })?;
        out.unwrap_or_else(|| Err(Error::internal("JavaScript call returned nothing")))
    }

    fn set_globals(&mut self, vars: &bson::Document, op: &Arc<Operation>) -> Result<()> {
        self.run(op, |ctx| {
            let types = convert::Types::new(ctx)?;
            for (name, value) in vars {
                ctx.globals().set(name.as_str(), types.to_js(ctx, value)?)?;
            }
            Ok(())
        })
    }
}

/// JavaScript truthiness.
fn truthy(v: &Value) -> bool {
    if let Some(b) = v.as_bool() {
        return b;
    }
    if let Some(n) = v.as_number() {
        return n != 0.0 && !n.is_nan();
    }
    if let Some(s) = v.as_string() {
        return s.to_string().map(|s| !s.is_empty()).unwrap_or(true);
    }
    !(v.is_null() || v.is_undefined())
}

fn setup_error(e: rquickjs::Error) -> Error {
    Error::new(
        codes::JS_INTERPRETER_FAILURE,
        format!("could not start the JavaScript engine: {e}"),
    )
}

fn install_globals<'js>(ctx: &Ctx<'js>, watch: SharedWatch) -> rquickjs::Result<()> {
    ctx.eval_with_options::<(), _>(PRELUDE, sloppy())?;
    let compiled = rquickjs::Array::new(ctx.clone())?;
    ctx.globals().set(COMPILED, compiled)?;
    let sleep = Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, ms: Opt<Value<'js>>| -> rquickjs::Result<()> {
            sleep(&ctx, &watch, ms.0)
        },
    )?;
    ctx.globals().set("sleep", sleep)?;
    Ok(())
}

/// `sleep(ms)`: waits on the operation, so a kill or its deadline ends the wait (and the
/// script, with the operation's error).
fn sleep(ctx: &Ctx<'_>, watch: &SharedWatch, ms: Option<Value<'_>>) -> rquickjs::Result<()> {
    let ms = ms.and_then(|v| v.as_number()).unwrap_or(0.0);
    let ms = if ms.is_nan() || ms < 0.0 {
        0.0
    } else {
        ms.min(1e12)
    };
    let (op, call_deadline) = {
        let g = lock(watch);
        (g.op.clone(), g.call_deadline)
    };
    let op = op.unwrap_or_else(|| Operation::new(None));
    let mut wanted = Duration::from_secs_f64(ms / 1000.0);
    let mut past_budget = false;
    if let Some(d) = call_deadline {
        let left = d.saturating_duration_since(Instant::now());
        if left < wanted {
            wanted = left;
            past_budget = true;
        }
    }
    if let Err(e) = op.sleep(wanted) {
        return Err(rquickjs::Exception::throw_internal(ctx, &e.message));
    }
    if past_budget {
        lock(watch).timed_out = true;
        return Err(rquickjs::Exception::throw_internal(
            ctx,
            "JavaScript execution interrupted",
        ));
    }
    Ok(())
}

fn sloppy() -> rquickjs::context::EvalOptions {
    let mut o = rquickjs::context::EvalOptions::default();
    o.strict = false;
    o.filename = Some(String::new());
    o
}

/// Turns `source` into a function as mongod's `parseJSFunctionOrExpression` does: a
/// function stays one; statements or an expression become a function's body whose
/// last expression is returned.
fn make_function<'js>(ctx: &Ctx<'js>, source: &str) -> rquickjs::Result<Function<'js>> {
    let mut s = source.trim_end();
    while let Some(rest) = s.strip_suffix(';') {
        s = rest.trim_end();
    }
    let s = s.trim_start();
    let eval = |code: String| -> rquickjs::Result<Value<'js>> {
        let r = ctx.eval_with_options::<Value, _>(code, sloppy());
        if r.is_err() {
            // Keep the exception for the caller only if this was the last attempt.
            let caught = ctx.catch();
            return Err(ctx.throw(caught));
        }
        r
    };
    let attempt = |code: String| -> Option<Function<'js>> {
        match eval(code) {
            Ok(v) => v.into_function(),
            Err(_) => {
                let _ = ctx.catch();
                None
            }
        }
    };
    // `function (...) {...}` (mongod's hasFunctionIdentifier).
    if s.starts_with("function") && matches!(s.as_bytes().get(8), Some(b' ' | b'(')) {
        if let Some(f) = attempt(format!("(\n{s}\n)")) {
            return Ok(f);
        }
    }
    // An expression: its value is returned.
    if let Some(f) = attempt(format!("(function() {{ return (\n{s}\n); }})")) {
        return Ok(f);
    }
    // Statements without a top-level `return` (a class static block refuses `return`, and
    // is only compiled here, never run): the value of the last one is returned.
    if attempt(format!(
        "(function() {{ class __where {{ static {{\n{s}\n}} }} }})"
    ))
    .is_some()
    {
        let quoted = convert::js_string_literal(s);
        if let Some(f) = attempt(format!("(function() {{ return eval({quoted}); }})")) {
            return Ok(f);
        }
    }
    // A function body with `return`.
    match eval(format!("(function() {{\n{s}\n}})"))?.into_function() {
        Some(f) => Ok(f),
        None => Err(rquickjs::Exception::throw_type(ctx, "not a function")),
    }
}

/// mongod's error for a failed call: JSInterpreterFailure with "<Error>: <message> :\n
/// <stack>" (a thrown non-object: "uncaught exception: <value>").
fn failure(ctx: &Ctx<'_>, e: rquickjs::Error, watch: &SharedWatch) -> Error {
    if lock(watch)
        .op
        .as_ref()
        .and_then(|op| op.check().err())
        .is_some()
    {
        // Reported by `run` from the operation itself.
        return Error::new(codes::INTERRUPTED, "operation was interrupted");
    }
    match CaughtError::from_error(ctx, e) {
        CaughtError::Exception(ex) => {
            let obj: &Object = ex.as_object();
            let name: Option<String> = obj.get("name").ok();
            let message = ex.message().unwrap_or_default();
            if message.contains("out of memory") {
                return Error::new(codes::JS_INTERPRETER_FAILURE, "Out of memory");
            }
            let head = match name {
                Some(n) if !n.is_empty() => format!("{n}: {message}"),
                _ => message,
            };
            let stack = ex.stack().map(|s| mozilla_stack(&s)).unwrap_or_default();
            Error::new(codes::JS_INTERPRETER_FAILURE, format!("{head} :\n{stack}"))
        }
        CaughtError::Value(v) => {
            let text = convert::display(&v);
            Error::new(8, format!("uncaught exception: {text}"))
        }
        CaughtError::Error(e) => Error::new(codes::JS_INTERPRETER_FAILURE, e.to_string()),
    }
}

/// QuickJS's "    at f (file:1:5)" frames in SpiderMonkey's "f@file:1:5" form, as
/// mongod reports them.
fn mozilla_stack(stack: &str) -> String {
    let mut out = String::new();
    for line in stack.lines() {
        let line = line.trim();
        let Some(frame) = line.strip_prefix("at ") else {
            continue;
        };
        let (name, place) = match frame.rsplit_once(" (") {
            Some((n, p)) => (n, p.trim_end_matches(')')),
            None => ("", frame),
        };
        let name = if name.starts_with('<') { "" } else { name };
        out.push_str(name);
        out.push('@');
        out.push_str(place);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;

/// What a call gave back: its value converted to BSON, or the conversion's error.
fn returned(out: Option<Result<bson::Bson>>) -> Result<bson::Bson> {
    out.unwrap_or_else(|| Err(Error::internal("JavaScript call returned nothing")))
}
