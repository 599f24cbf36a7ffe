//! The SVG charts: round tick values, NaN gaps, escaped text and the empty chart.

use agentrl_monitor::plot::{nice_ticks, Chart, Line, Scale};

#[test]
fn ticks_are_round_numbers_inside_the_range() {
    assert_eq!(
        nice_ticks(0.0, 1.0, 5),
        [0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
    );
    let t = nice_ticks(3.0, 58.0, 6);
    assert_eq!(t, [10.0, 20.0, 30.0, 40.0, 50.0]);
}

#[test]
fn a_nan_breaks_the_line_and_text_is_escaped() {
    let chart = Chart {
        title: "a <b>".into(),
        y_label: "nats".into(),
        scale: Scale::Linear,
        lines: vec![Line {
            label: "x".into(),
            color: "#f00".into(),
            dash: String::new(),
            points: vec![(1.0, 1.0), (2.0, 2.0), (3.0, f64::NAN), (4.0, 1.0)],
        }],
        y_include: vec![],
        legend: vec![],
    };
    let svg = chart.to_svg();
    assert!(svg.contains("a &lt;b&gt;"));
    let path = svg.split("<path d=\"").nth(1).unwrap();
    let d = &path[..path.find('"').unwrap()];
    assert_eq!(d.matches('M').count(), 2, "{d}");
    assert_eq!(svg.matches("<circle").count(), 1, "the lone last point");
}

#[test]
fn an_empty_chart_says_so() {
    let chart = Chart {
        title: "t".into(),
        y_label: "y".into(),
        scale: Scale::Log,
        lines: vec![],
        y_include: vec![],
        legend: vec![],
    };
    assert!(chart.to_svg().contains("not recorded"));
}
