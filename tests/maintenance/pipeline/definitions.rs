//! Definition errors name the culprit.

use super::{open, seed_def};
use oncelake::pipeline::{cell, Attempt, Pipeline, PipelineDef, PipelineError};

#[test]
fn definition_errors_name_the_culprit() {
    let cases: &[(&str, &str)] = &[
        (
            "[stage.a]\ncode_version = 1\nupstream = [\"c\"]\n[stage.b]\ncode_version = 1\nupstream = [\"a\"]\n[stage.c]\ncode_version = 1\nupstream = [\"b\"]\n",
            "the stages form a cycle: a -> b -> c -> a",
        ),
        (
            "[stage.a]\ncode_version = 1\nupstream = [\"ghost\"]\n",
            "stage \"a\" lists unknown upstream stage \"ghost\"",
        ),
        (
            "[stage.a]\ncode_version = 1\n[stage.a]\ncode_version = 1\n",
            "stage \"a\" is defined twice",
        ),
        ("[stage.]\ncode_version = 1\n", "stage name \"\" is invalid: it is empty"),
        ("[stage.a]\nupstream = []\n", "stage \"a\" has no code_version"),
        ("", "defines no stages"),
    ];
    for (text, want) in cases {
        let msg = PipelineDef::parse(text).unwrap_err().to_string();
        assert!(msg.contains(want), "{text:?}: {msg}");
    }
    assert!(matches!(
        PipelineDef::builder()
            .stage("x", 1, &[])
            .stage("x", 2, &[])
            .build(),
        Err(PipelineError::DuplicateStage(n)) if n == "x"
    ));
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let p = Pipeline::new(seed_def());
    let too_long = "u".repeat(cell::MAX_PIPELINE_UNIT_LEN + 1);
    assert!(p.set_source_version(&store, &too_long, 1, b"").is_err());
    assert!(p.explain(&store, "bad\nunit").is_err());
    assert!(p
        .complete(
            &store,
            &Attempt {
                unit: "u".into(),
                stage: "nope".into(),
                source_version: 1,
                worker: "w".into(),
                token: None
            },
            b""
        )
        .unwrap_err()
        .to_string()
        .contains("no stage \"nope\""));
}
