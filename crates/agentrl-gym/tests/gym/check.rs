//! Python literals and expectations: reprs parse like Python's, and each `Expect` kind (value,
//! approx, unordered, set, data, raises) accepts what it should and refuses lookalikes.

use agentrl_gym::check::{parse_literal, Actual, Expect, Value, DEFAULT_ABS};
use serde_json::json;

fn returned(v: Value) -> Actual {
    Actual::Returned(v)
}

#[test]
fn literals_parse_like_python_reprs() {
    let cases = [
        ("1.5", Value::Float(1.5)),
        ("-3", Value::Int("-3".into())),
        (
            "123456789012345678901234567890",
            Value::Int("123456789012345678901234567890".into()),
        ),
        ("'it\\'s'", Value::Str("it's".into())),
        ("\"a\\nb\\x41\\u00e9\"", Value::Str("a\nbAé".into())),
        ("(1,)", Value::Tuple(vec![Value::Int("1".into())])),
        ("()", Value::Tuple(vec![])),
        (
            "[None, True, -inf]",
            Value::List(vec![
                Value::None,
                Value::Bool(true),
                Value::Float(f64::NEG_INFINITY),
            ]),
        ),
        (
            "{'a': [1, 2]}",
            Value::Dict(vec![(
                Value::Str("a".into()),
                Value::List(vec![Value::Int("1".into()), Value::Int("2".into())]),
            )]),
        ),
        (
            "{1, 2}",
            Value::Set(vec![Value::Int("1".into()), Value::Int("2".into())]),
        ),
        ("set()", Value::Set(vec![])),
        (
            "frozenset({3})",
            Value::FrozenSet(vec![Value::Int("3".into())]),
        ),
        ("b'a\\x00'", Value::Bytes(vec![b'a', 0])),
        ("1e-05", Value::Float(1e-5)),
    ];
    for (text, want) in cases {
        assert_eq!(parse_literal(text), Some(want), "{text}");
    }
    for text in [
        "Point(x=1)",
        "<object at 0x1>",
        "1j",
        "[1, 2",
        "None x",
        "Nonesuch",
    ] {
        assert_eq!(parse_literal(text), None, "{text}");
    }
}

#[test]
fn value_is_typed_and_structural() {
    let e = Expect::Value("{'b': 2, 'a': [1, 2.0]}".into());
    let got = Value::Dict(vec![
        (
            Value::Str("a".into()),
            Value::List(vec![Value::Int("1".into()), Value::Float(2.0)]),
        ),
        (Value::Str("b".into()), Value::Int("2".into())),
    ]);
    assert!(
        e.check(&returned(got)).is_ok(),
        "dict order does not matter"
    );
    assert!(Expect::Value("1.0".into())
        .check(&returned(Value::Int("1".into())))
        .is_err());
    assert!(Expect::Value("[1]".into())
        .check(&returned(Value::Tuple(vec![Value::Int("1".into())])))
        .is_err());
    assert!(Expect::Value("nan".into())
        .check(&returned(Value::Float(f64::NAN)))
        .is_ok());
    // A non-literal expected repr is compared in full with the reported repr.
    let long = format!("Blob({})", "x".repeat(5000));
    let other = |repr: &str| Value::Other {
        type_name: "Blob".into(),
        repr: Some(repr.into()),
    };
    assert!(Expect::Value(long.clone())
        .check(&returned(other(&long)))
        .is_ok());
    let mut cut = long.clone();
    cut.pop();
    cut.push('y');
    assert!(Expect::Value(long).check(&returned(other(&cut))).is_err());
    // An object never equals a literal, whatever its repr says.
    assert!(Expect::Value("1.5".into())
        .check(&returned(other("1.5")))
        .is_err());
}

#[test]
fn approx_unordered_set_and_data() {
    let approx = Expect::Approx {
        expected: json!([1.2345, {"k": 2}]),
        rel: 1e-3,
        abs: 0.0,
    };
    let close = Value::List(vec![
        Value::Float(1.23456789),
        Value::Dict(vec![(Value::Str("k".into()), Value::Float(2.0001))]),
    ]);
    assert!(approx.check(&returned(close)).is_ok());
    let far = Value::List(vec![
        Value::Float(1.5),
        Value::Dict(vec![(Value::Str("k".into()), Value::Int("2".into()))]),
    ]);
    assert!(approx.check(&returned(far)).is_err());
    let unordered = Expect::Unordered(json!([1, 2, 2]));
    let ints = |xs: &[i64]| {
        xs.iter()
            .map(|x| Value::Int(x.to_string()))
            .collect::<Vec<_>>()
    };
    assert!(unordered
        .check(&returned(Value::List(ints(&[2, 1, 2]))))
        .is_ok());
    assert!(unordered
        .check(&returned(Value::List(ints(&[2, 1, 1]))))
        .is_err());
    let set = Expect::Set(json!(["a", "b"]));
    let strs = |xs: &[&str]| {
        xs.iter()
            .map(|x| Value::Str(x.to_string()))
            .collect::<Vec<_>>()
    };
    assert!(set.check(&returned(Value::Set(strs(&["b", "a"])))).is_ok());
    assert!(set.check(&returned(Value::Set(strs(&["a"])))).is_err());
    let data = Expect::Data(json!({"xs": [1, 2.5], "ok": true}));
    let got = Value::Dict(vec![
        (Value::Str("ok".into()), Value::Bool(true)),
        (
            Value::Str("xs".into()),
            Value::Tuple(vec![Value::Float(1.0), Value::Float(2.5)]),
        ),
    ]);
    assert!(data.check(&returned(got)).is_ok());
    assert!(Expect::Data(json!(1))
        .check(&returned(Value::Bool(true)))
        .is_err());
}

#[test]
fn raises_refuses_lookalikes_and_hidden_json_kinds_parse() {
    let e = Expect::Raises("ZeroDivisionError".into());
    let raised = |lookalike| Actual::Raised {
        name: "ZeroDivisionError".into(),
        lookalike,
    };
    assert!(e.check(&raised(false)).is_ok());
    assert!(e.check(&raised(true)).is_err());
    let parsed: Expect = serde_json::from_value(json!({"approx": 1.5, "rel": 0.01})).unwrap();
    assert_eq!(
        parsed,
        Expect::Approx {
            expected: json!(1.5),
            rel: 0.01,
            abs: DEFAULT_ABS
        }
    );
    for bad in [
        json!({}),
        json!({"value": "1", "raises": "E"}),
        json!({"set": 1}),
        json!({"value": "1", "rel": 0.1}),
        json!({"nope": 1}),
    ] {
        assert!(
            serde_json::from_value::<Expect>(bad.clone()).is_err(),
            "{bad}"
        );
    }
    let round = serde_json::to_value(Expect::Value("2".into())).unwrap();
    assert_eq!(round, json!({"value": "2"}));
}
