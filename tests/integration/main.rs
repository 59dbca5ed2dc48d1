//! ralph's integration tests: the built binary, fake agents on PATH, a temporary git repository,
//! and a clean environment for every test.

mod fleet;
mod support;

mod acp;
mod asking;
mod asking_fixture;
mod audit;
mod cli;
mod columns;
mod commands;
mod event_stream;
mod gates;
mod git_commit;
mod git_preconditions;
mod import;
mod json_mode;
mod kills;
mod limits;
mod mcp;
mod mock_model;
mod observe;
mod parallel;
mod planning;
mod protect;
mod protect_fixture;
mod real_agents;
mod real_agents_support;
mod report;
mod rough_edges;
mod run_loop;
mod sandbox;
mod serve;
mod settings;
mod signals;
mod state_files;
mod task_loops;
mod tasks_mode;
mod watch;
