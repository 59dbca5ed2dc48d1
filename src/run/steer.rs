//! Steering a run of several loops (`--parallel`, `--worker`): what `ralph --add-context` adds
//! to the base's `.ralph/` is passed on to the running task loops, each of which reads the
//! `.ralph/` of its own worktree (see `storage::context::deliver`).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::event::Notice;
use crate::storage::RalphDir;
use crate::storage::context::{self, TaskLoop};

use super::sink::Sink;

/// How often a run of several loops looks for pending context to pass on.
pub(super) const EVERY: Duration = Duration::from_millis(200);

/// Passes the base's pending context on to the loops of running tasks, each in its worktree
/// `.ralph/worktrees/<id>`, and tells the user which loops got it (and, once, why it could not).
pub(super) struct Relay {
    base: RalphDir,
    /// Where the work tree sits in the repository (`sub/dir/`, or empty): the task loops work
    /// at the same place in their worktrees.
    prefix: String,
    last: Option<Instant>,
    warned: bool,
}

impl Relay {
    /// For the base `.ralph/` `base` of a repository whose work tree is at `prefix`.
    pub(super) fn new(base: &RalphDir, prefix: &str) -> Self {
        Self {
            base: base.clone(),
            prefix: prefix.to_owned(),
            last: None,
            warned: false,
        }
    }

    /// Passes the pending context on to the loops of `tasks` now.
    pub(super) fn pass_on(
        &mut self,
        tasks: impl IntoIterator<Item = impl AsRef<str>>,
        sink: &Sink,
    ) {
        self.last = Some(Instant::now());
        let loops: Vec<TaskLoop> = tasks
            .into_iter()
            .map(|id| TaskLoop {
                task: id.as_ref().to_owned(),
                dir: RalphDir::new(&self.base.worktree(id.as_ref()).join(&self.prefix)),
            })
            .collect();
        match context::deliver(&self.base, &loops) {
            Ok(reached) if !reached.is_empty() => sink.notice(Notice::ContextPassedOn(&reached)),
            Ok(_) => {}
            Err(err) if !self.warned => {
                self.warned = true;
                sink.notice(Notice::ContextNotPassedOn(&format!("{err:#}")));
            }
            Err(_) => {}
        }
    }

    /// [`Self::pass_on`], when [`EVERY`] has passed since the last time.
    pub(super) fn tick(&mut self, tasks: impl IntoIterator<Item = impl AsRef<str>>, sink: &Sink) {
        if self.last.is_none_or(|last| last.elapsed() >= EVERY) {
            self.pass_on(tasks, sink);
        }
    }

    /// The next message on `receiver`, passing pending context on to the loops of `tasks`
    /// every [`EVERY`] meanwhile; `None` when no sender is left.
    pub(super) fn wait<T, S: AsRef<str>>(
        &mut self,
        receiver: &mpsc::Receiver<T>,
        tasks: impl IntoIterator<Item = S> + Clone,
        sink: &Sink,
    ) -> Option<T> {
        loop {
            match receiver.recv_timeout(EVERY) {
                Ok(message) => return Some(message),
                Err(mpsc::RecvTimeoutError::Timeout) => self.pass_on(tasks.clone(), sink),
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink with no reporter: these tests look at the files.
    fn quiet() -> Sink {
        Sink::with(None, Vec::new(), crate::output::Voice::plain())
    }

    #[test]
    fn the_loops_of_running_tasks_get_the_base_context_in_their_worktrees() {
        let tmp = crate::testing::tempdir().unwrap();
        let base = RalphDir::new(tmp.path());
        let now = crate::model::now();
        context::append(&base, "use sqlite", None, now).unwrap();
        let mut relay = Relay::new(&base, "sub/");
        relay.tick(["alpha"], &quiet());
        let alpha = base.worktree("alpha").join("sub/.ralph/ralph-context.md");
        let text = std::fs::read_to_string(alpha).unwrap();
        assert!(text.contains("use sqlite"), "{text}");
        assert!(!base.context().exists());
    }

    #[test]
    fn waiting_passes_context_on_until_a_message_comes() {
        let tmp = crate::testing::tempdir().unwrap();
        let base = RalphDir::new(tmp.path());
        context::append(&base, "hint", None, crate::model::now()).unwrap();
        let (sender, receiver) = mpsc::channel();
        let mut relay = Relay::new(&base, "");
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(10);
                while base.context().exists() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                sender.send(7).unwrap();
            });
            assert_eq!(relay.wait(&receiver, ["beta"], &quiet()), Some(7));
        });
        assert!(!base.context().exists());
        let beta = RalphDir::new(&base.worktree("beta"));
        assert!(
            std::fs::read_to_string(beta.context())
                .unwrap()
                .contains("hint")
        );
    }
}
