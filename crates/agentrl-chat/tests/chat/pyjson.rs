//! The template's `tojson` filter and float repr against Python's `json.dumps` and
//! `repr`.

use std::collections::BTreeMap;

use agentrl_chat::template::{python_float_repr, ChatTemplate, TEMPLATE_NAME};
use minijinja::Value;

fn render_str(source: &str, ctx: serde_json::Value) -> String {
    let template = ChatTemplate::from_source(source.into(), BTreeMap::new(), "inline".into())
        .expect("template compiles");
    let tmpl = template
        .env()
        .get_template(TEMPLATE_NAME)
        .expect("template");
    tmpl.render(Value::from_serialize(&ctx)).expect("renders")
}

#[test]
fn tojson_matches_python_json_dumps() {
    let ctx = serde_json::json!({"x": {"b": [1, 2.5, true, null], "a": "é\"<>&\n\u{1}"}});
    // Python: json.dumps(x, ensure_ascii=False)
    assert_eq!(
        render_str("{{ x | tojson }}", ctx.clone()),
        r#"{"b": [1, 2.5, true, null], "a": "é\"<>&\n\u0001"}"#
    );
    // Python: json.dumps(x, ensure_ascii=True, sort_keys=True)
    assert_eq!(
        render_str(
            "{{ x | tojson(ensure_ascii=true, sort_keys=true) }}",
            ctx.clone()
        ),
        r#"{"a": "\u00e9\"<>&\n\u0001", "b": [1, 2.5, true, null]}"#
    );
    // Python: json.dumps(x, ensure_ascii=False, indent=2)
    assert_eq!(
        render_str("{{ x | tojson(indent=2) }}", ctx.clone()),
        "{\n  \"b\": [\n    1,\n    2.5,\n    true,\n    null\n  ],\n  \"a\": \"é\\\"<>&\\n\\u0001\"\n}"
    );
    assert_eq!(
        render_str("{{ x.b | tojson(separators=[',', ':']) }}", ctx),
        "[1,2.5,true,null]"
    );
    assert_eq!(
        render_str(
            "{{ e | tojson }}{{ m | tojson }}",
            serde_json::json!({"e": [], "m": {}})
        ),
        "[]{}"
    );
    assert_eq!(
        render_str("{{ '😀' | tojson(true) }}", serde_json::json!({})),
        r#""\ud83d\ude00""#
    );
}

#[test]
fn python_float_repr_matches_python() {
    // Values checked against CPython's repr().
    for (x, want) in [
        (1.0, "1.0"),
        (0.1, "0.1"),
        (-2.5, "-2.5"),
        (1e16, "1e+16"),
        (1.5e-5, "1.5e-05"),
        (0.0001, "0.0001"),
        (123456789012345.6, "123456789012345.6"),
        (1e22, "1e+22"),
        (f64::NAN, "NaN"),
        (-0.0, "-0.0"),
    ] {
        assert_eq!(python_float_repr(x), want, "repr of {x}");
    }
}
