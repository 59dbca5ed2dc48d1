//! Examples of the events of an agent's questions.

use crate::event::LoopEvent;

/// A question with options, its answer, and a question nobody answered.
pub(super) fn question_events() -> Vec<LoopEvent> {
    vec![
        LoopEvent::QuestionAsked {
            id: "q1a2b3".to_owned(),
            iteration: 2,
            question: "Which database should the API use?".to_owned(),
            options: vec!["SQLite".to_owned(), "Postgres".to_owned()],
            urgency: Some("high".to_owned()),
            timeout_ms: 900_000,
        },
        LoopEvent::QuestionAnswered {
            id: "q1a2b3".to_owned(),
            iteration: 2,
            status: "answered".to_owned(),
            answer: Some("Postgres".to_owned()),
            by: Some("page".to_owned()),
            waited_ms: 65_000,
        },
        LoopEvent::QuestionAsked {
            id: "q4c5d6".to_owned(),
            iteration: 3,
            question: "Where is the staging API key?".to_owned(),
            options: Vec::new(),
            urgency: None,
            timeout_ms: 900_000,
        },
        LoopEvent::QuestionAnswered {
            id: "q4c5d6".to_owned(),
            iteration: 3,
            status: "timed_out".to_owned(),
            answer: None,
            by: None,
            waited_ms: 900_000,
        },
        LoopEvent::QuestionAnswered {
            id: "q7e8f9".to_owned(),
            iteration: 3,
            status: "cancelled".to_owned(),
            answer: None,
            by: None,
            waited_ms: 2_000,
        },
    ]
}
