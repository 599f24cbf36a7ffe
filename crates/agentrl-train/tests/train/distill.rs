//! Distillation's check that the teacher and the student share a tokenizer.

use agentrl_train::config::ModelKind;
use agentrl_train::recipes::distill::check_shared_vocabulary;

#[test]
fn a_teacher_without_the_students_tokenizer_is_refused() {
    let tiny = agentrl_train::config::load_config(None, &[]).unwrap();
    check_shared_vocabulary(&tiny, 40, &tiny, 40).unwrap();
    let err = check_shared_vocabulary(&tiny, 40, &tiny, 41).unwrap_err();
    assert!(
        err.to_string().contains("do not share a tokenizer") && err.to_string().contains("41"),
        "{err}"
    );
    let mut qwen = tiny.clone();
    qwen.model.kind = ModelKind::Qwen3;
    let err = check_shared_vocabulary(&tiny, 40, &qwen, 40).unwrap_err();
    assert!(err.to_string().contains("model.kind"), "{err}");
}
