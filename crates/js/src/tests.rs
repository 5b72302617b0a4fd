use super::*;
use bson::{bson, doc, Bson};
use tailstream_query::script::ScriptScope;

fn scope() -> Box<dyn ScriptScope> {
    QuickJs::new().new_scope().unwrap()
}

fn call(source: &str, args: &[Bson]) -> Result<Bson> {
    let op = Operation::new(None);
    let mut s = scope();
    let f = s.compile(source, &op)?;
    s.call(f, None, args, &op)
}

fn predicate(source: &str, d: bson::Document) -> Result<bool> {
    let op = Operation::new(None);
    let mut s = scope();
    let f = s.compile(source, &op)?;
    s.call_predicate(f, &d, &op)
}

#[test]
fn where_forms_as_mongod_parses_them() {
    let d = doc! {"x": 2};
    assert!(predicate("this.x < 3", d.clone()).unwrap());
    assert!(!predicate("this.x > 3;  ", d.clone()).unwrap());
    assert!(predicate("obj.x == 2", d.clone()).unwrap());
    assert!(predicate("function() { return this.x == 2 }", d.clone()).unwrap());
    assert!(predicate("function f() { return obj.x == 2 }", d.clone()).unwrap());
    assert!(predicate("return this.x == 2", d.clone()).unwrap());
    assert!(predicate("var a = 2; this.x == a", d.clone()).unwrap());
    assert!(predicate("sleep(1) || true", d.clone()).unwrap());
    assert!(!predicate("this.x == 2 // a comment", doc! {"x": 1}).unwrap());
}

#[test]
fn function_calls_and_conversions() {
    assert_eq!(
        call("function(a, b) { return a + b }", &[bson!(1), bson!(2)]).unwrap(),
        Bson::Double(3.0)
    );
    let out = call(
        "function(d) { return {s: d.s.toUpperCase(), n: d.n, o: d.o, t: d.t instanceof Date, a: [1, 'x', null]} }",
        &[bson!({"s": "ab", "n": 5i64, "o": bson::oid::ObjectId::parse_str("5f0000000000000000000001").unwrap(), "t": bson::DateTime::from_millis(5)})],
    )
    .unwrap();
    assert_eq!(
        out,
        bson!({"s": "AB", "n": 5i64, "o": bson::oid::ObjectId::parse_str("5f0000000000000000000001").unwrap(), "t": true, "a": [1.0, "x", Bson::Null]})
    );
    let oid = bson::oid::ObjectId::parse_str("5f0000000000000000000001").unwrap();
    assert_eq!(
        call(
            "function(o, p) { return [o.str, o.toString(), o.equals(p)] }",
            &[Bson::ObjectId(oid), Bson::ObjectId(oid)]
        )
        .unwrap(),
        bson!([
            "5f0000000000000000000001",
            "ObjectId(\"5f0000000000000000000001\")",
            true
        ])
    );
    assert_eq!(
        call(
            "function(d) { return d }",
            &[Bson::DateTime(bson::DateTime::from_millis(1234))]
        )
        .unwrap(),
        Bson::DateTime(bson::DateTime::from_millis(1234))
    );
    assert_eq!(
        call("function() { return NumberInt(7) }", &[]).unwrap(),
        Bson::Int32(7)
    );
    assert_eq!(
        call(
            "function(b) { return b }",
            &[Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: vec![1, 2, 3, 250]
            })]
        )
        .unwrap(),
        Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: vec![1, 2, 3, 250]
        })
    );
}

#[test]
fn errors_have_mongods_shape() {
    let e = call("function() { throw new Error('boom') }", &[]).unwrap_err();
    assert_eq!(e.code, codes::JS_INTERPRETER_FAILURE);
    assert!(e.message.starts_with("Error: boom :\n"), "{}", e.message);
    let e = call("function() { return nosuch.x }", &[]).unwrap_err();
    assert!(e.message.starts_with("ReferenceError: "), "{}", e.message);
    let e = call("function( {", &[]).unwrap_err();
    assert_eq!(e.code, codes::JS_INTERPRETER_FAILURE);
    assert!(e.message.starts_with("SyntaxError: "), "{}", e.message);
    let e = call("function() { throw 'str' }", &[]).unwrap_err();
    assert_eq!(e.message, "uncaught exception: str");
}

#[test]
fn cycles_and_deep_values_are_refused() {
    let e = call("function() { var a = {}; a.self = a; return a }", &[]).unwrap_err();
    assert!(e.message.contains("nested objects"), "{}", e.message);
}

#[test]
fn runaway_scripts_stop() {
    // An endless loop ends at the call's time budget.
    let engine = QuickJs::with_limits(HEAP_LIMIT_BYTES, Duration::from_millis(50));
    let mut s = engine.new_scope().unwrap();
    let op = Operation::new(None);
    let f = s.compile("function() { while (true) {} }", &op).unwrap();
    let e = s.call(f, None, &[], &op).unwrap_err();
    assert_eq!(e.code, codes::INTERRUPTED);
    // The scope still works afterwards.
    let g = s.compile("function() { return 1 }", &op).unwrap();
    assert_eq!(s.call(g, None, &[], &op).unwrap(), Bson::Double(1.0));

    // A killed operation stops a sleeping script with the kill's error.
    let op = Operation::new(None);
    let killer = op.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        killer.kill(codes::CLIENT_DISCONNECT);
    });
    let mut s = scope();
    let f = s
        .compile(
            "function() { try { sleep(100000) } catch (e) {} return true }",
            &op,
        )
        .unwrap();
    assert_eq!(
        s.call(f, None, &[], &op).unwrap_err().code,
        codes::CLIENT_DISCONNECT
    );
    t.join().unwrap();

    // An expired deadline stops an endless loop.
    let op = Operation::new(Some(Instant::now() + Duration::from_millis(20)));
    let mut s = scope();
    let f = s.compile("while (true) {}", &op).unwrap();
    assert_eq!(
        s.call_predicate(f, &doc! {}, &op).unwrap_err().code,
        codes::MAX_TIME_MS_EXPIRED
    );
}

#[test]
fn memory_is_bounded() {
    let engine = QuickJs::with_limits(8 * 1024 * 1024, CALL_TIMEOUT);
    let mut s = engine.new_scope().unwrap();
    let op = Operation::new(None);
    let f = s
        .compile(
            "function() { var a = []; while (true) a.push('x'.repeat(1000) + a.length) }",
            &op,
        )
        .unwrap();
    let e = s.call(f, None, &[], &op).unwrap_err();
    assert_eq!(e.code, codes::JS_INTERPRETER_FAILURE, "{}", e.message);
}

#[test]
fn fold_keeps_the_state_in_javascript() {
    let op = Operation::new(None);
    let mut s = scope();
    let f = s
        .compile(
            "function(state, x, y) { state.n += x * y; return state }",
            &op,
        )
        .unwrap();
    let out = s
        .fold(f, bson!({"n": 0}), &[bson!([1, 2]), bson!([3, 4])], &op)
        .unwrap();
    assert_eq!(out, bson!({"n": 14.0}));
}

#[test]
fn base64_round_trips() {
    for bytes in [&b""[..], b"a", b"ab", b"abc", b"abcd", &[0, 255, 128, 7, 9]] {
        let e = convert::base64_encode(bytes);
        assert_eq!(convert::base64_decode(&e).unwrap(), bytes);
    }
    assert_eq!(convert::base64_encode(b"hello"), "aGVsbG8=");
}

#[test]
fn map_functions_emit_key_value_pairs() {
    let op = Operation::new(None);
    let mut s = scope();
    s.set_globals(&doc! {"factor": 10}, &op).unwrap();
    let f = s
        .compile(
            "function() { for (var i = 0; i < this.n; i++) emit(this.k, i * factor); }",
            &op,
        )
        .unwrap();
    let emits = s.call_emitting(f, &doc! {"k": "a", "n": 3}, &op).unwrap();
    assert_eq!(
        emits,
        vec![
            (bson!("a"), bson!(0.0)),
            (bson!("a"), bson!(10.0)),
            (bson!("a"), bson!(20.0))
        ]
    );
    // Each call starts with nothing emitted.
    assert!(s
        .call_emitting(f, &doc! {"k": "b", "n": 0}, &op)
        .unwrap()
        .is_empty());
    let bad = s.compile("function() { emit(1); }", &op).unwrap();
    let err = s.call_emitting(bad, &doc! {}, &op).unwrap_err();
    assert_eq!(err.code, codes::JS_INTERPRETER_FAILURE);
    assert!(err.message.contains("emit takes 2 args"), "{}", err.message);
}

#[test]
fn map_reduce_scopes_have_mongods_array_helpers() {
    let op = Operation::new(None);
    let mut s = scope();
    let map = s
        .compile("function() { emit(Array.sum(this.a), [Array.avg(this.a), Array.contains(this.a, 2), Array.unique([1, 1, 2]), Array.sum([])]) }", &op)
        .unwrap();
    assert_eq!(
        s.call_emitting(map, &doc! {"a": [1, 2, 3]}, &op).unwrap(),
        vec![(bson!(6.0), bson!([2.0, true, [1.0, 2.0], Bson::Null]))]
    );
}
