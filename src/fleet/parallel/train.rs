//! The merge train of a `--parallel` run with a gate (`--verify`, `--holdout`): the tasks whose
//! loops ended done while the coordinator was busy (merging, gating) land together. Their
//! branches are merged one after another on the newest base (each merge's own checks — conflict
//! blocks, protected paths — on its commit), the gate runs once on the whole, and the base moves
//! once. When the whole fails the gate, the train is cut in halves, each half tried on top of
//! what passed, until the tasks that break it are found: the rest land together, those go back to
//! their agents with the gate's output.

use crate::error::fail;
use crate::git::{Merge, Repo};
use crate::model::Verification;
use crate::run::sandboxed;
use crate::storage::carry::Carried;
use crate::storage::tasks::Task;

use super::{Coordinator, Spawner};

/// A task in the train: its id, its task, its merge's message.
pub(super) struct Car {
    pub(super) id: String,
    pub(super) task: Task,
    pub(super) message: String,
}

/// Why a car left the train before the gate.
enum Aside {
    Conflict(Vec<String>),
    Refused(Verification),
    Failed(String),
}

/// What the integration worktree holds: the base's commit it was built on, and the cars merged
/// on it (index, merge commit, what was carried), in order.
struct Built {
    from: String,
    cars: Vec<(usize, String, Carried)>,
}

impl<'a> Coordinator<'a> {
    /// Lands the tasks `ids`, whose loops ended done: as a train when the run has a gate and
    /// there are several, else one at a time.
    pub(super) fn land_ready<'s>(
        &mut self,
        ids: Vec<String>,
        spawner: &Spawner<'s, '_>,
    ) -> anyhow::Result<()>
    where
        'a: 's,
    {
        let options = &self.config.options;
        let gated = !(options.verify.is_empty() && options.holdout.is_empty());
        if ids.len() < 2 || !gated {
            for id in ids {
                if let Err(err) = self.merge(&id, spawner) {
                    self.give_up(&id, &format!("{err:#}"));
                }
            }
            return Ok(());
        }
        // In the list's order, whatever order their loops ended in.
        let list = self.base_list()?;
        let order = crate::storage::tasks::task_ids(&list);
        let mut ids = ids;
        ids.sort_by_key(|id| order.iter().position(|other| other == id));
        let mut cars = Vec::new();
        for id in ids {
            if let Some((task, message)) = self.ready_to_merge(&id)? {
                cars.push(Car { id, task, message });
            }
        }
        match cars.len() {
            0 => Ok(()),
            1 => {
                let car = &cars[0];
                self.merge_ready(&car.id, &car.task, &car.message, spawner)
            }
            _ => self.run_train(&cars, spawner),
        }
    }

    /// Merges `cars` together on the base, gates the whole once (bisecting when it fails),
    /// lands what passes in one move of the base and sends the rest back.
    fn run_train<'s>(&mut self, cars: &[Car], spawner: &Spawner<'s, '_>) -> anyhow::Result<()>
    where
        'a: 's,
    {
        let from = (self.repo.resolve("HEAD")).ok_or_else(|| fail("the base has no commit"))?;
        let tree = self.integration_tree(&from)?;
        // The merge commits run the repository's hooks: inside the run's sandbox.
        let (tree, _sandbox) = sandboxed::merging_in(self.config, tree, self.dir)?;
        let mut built = Built {
            from: from.clone(),
            cars: Vec::new(),
        };
        let mut aside = Vec::new();
        for (at, car) in cars.iter().enumerate() {
            match self.add_car(&tree, car, built.cars.is_empty()) {
                Ok((hash, carried)) => built.cars.push((at, hash, carried)),
                Err(why) => aside.push((at, why)),
            }
        }
        let merged: Vec<usize> = built.cars.iter().map(|(at, _, _)| *at).collect();
        let mut good = Vec::new();
        let mut broke = Vec::new();
        if !merged.is_empty() {
            let label = label(cars, &merged);
            match self.gate_of().run_checks(&label, &tree, spawner.stop) {
                None => good.clone_from(&merged),
                // A stop came: the tasks stay done, merged by the next run.
                Some(_) if spawner.stop.is_stopping() => return Ok(()),
                Some(check) if merged.len() == 1 => broke.push((merged[0], check)),
                Some(check) => {
                    let mut train = Train {
                        tree: &tree,
                        cars,
                        built: &mut built,
                        good: &mut good,
                        broke: &mut broke,
                    };
                    self.bisect(&mut train, (&merged, check), spawner)?;
                }
            }
        }
        if !good.is_empty() {
            self.land_good(&tree, cars, &good, &mut built)?;
        }
        for (at, check) in broke {
            let car = &cars[at];
            self.send_back(&car.id, &car.task, &check, spawner)?;
        }
        for (at, why) in aside {
            let car = &cars[at];
            match why {
                Aside::Conflict(files) => self.conflicted(&car.id, &car.task, files, spawner)?,
                Aside::Refused(check) => self.send_back(&car.id, &car.task, &check, spawner)?,
                Aside::Failed(why) => self.give_up(&car.id, &format!("its merge failed: {why}")),
            }
        }
        Ok(())
    }

    /// Merges `car` on top of what `tree` holds (`first`: on the base's commit) and runs the
    /// merge's own checks; a merge that fails them is undone.
    fn add_car(&self, tree: &Repo, car: &Car, first: bool) -> Result<(String, Carried), Aside> {
        let own = self.own_files();
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let before = tree.resolve("HEAD").unwrap_or_default();
        match self.merge_one(tree, &car.id, &car.message, &own, first) {
            Ok((Merge::Done(hash), carried)) => match self.gate_of().merge_check(&car.id, tree) {
                None => Ok((hash, carried)),
                Some(check) => {
                    let path = self.dir.integration_worktree();
                    self.repo
                        .detached_worktree(&path, &before)
                        .map_err(Aside::Failed)?;
                    Err(Aside::Refused(check))
                }
            },
            Ok((Merge::Conflict(files), _)) => Err(Aside::Conflict(files)),
            Err(why) => Err(Aside::Failed(why)),
        }
    }

    /// The integration worktree rebuilt to hold exactly the cars `set` (in order) on the base's
    /// commit; the failed check of a car that no longer merges, if one does not.
    fn build(&self, train: &mut Train<'_, '_>, set: &[usize]) -> Option<Verification> {
        let held: Vec<usize> = train.built.cars.iter().map(|(at, _, _)| *at).collect();
        if held == set {
            return None;
        }
        let path = self.dir.integration_worktree();
        if let Err(why) = self.repo.detached_worktree(&path, &train.built.from) {
            return Some(failed_merge(&why));
        }
        train.built.cars.clear();
        for &at in set {
            let first = train.built.cars.is_empty();
            match self.add_car(train.tree, &train.cars[at], first) {
                Ok((hash, carried)) => train.built.cars.push((at, hash, carried)),
                Err(Aside::Refused(check)) => return Some(check),
                Err(Aside::Conflict(files)) => {
                    return Some(failed_merge(&format!("conflict in {}", files.join(", "))));
                }
                Err(Aside::Failed(why)) => return Some(failed_merge(&why)),
            }
        }
        None
    }

    /// `pending` failed the gate on top of `train.good` (with `failed`): tries each half on top
    /// of what passed, down to the cars that break it. When the first half passes whole, the
    /// second is known to fail as the whole did, untried.
    fn bisect<'s>(
        &self,
        train: &mut Train<'_, '_>,
        (pending, failed): (&[usize], Verification),
        spawner: &Spawner<'s, '_>,
    ) -> anyhow::Result<()>
    where
        'a: 's,
    {
        let (left, right) = pending.split_at(pending.len() / 2);
        let good_before = train.good.len();
        for half in [left, right] {
            let mut set = train.good.clone();
            set.extend_from_slice(half);
            let left_passed = train.good.len() == good_before + left.len();
            let known = (half == right && left_passed).then(|| failed.clone());
            let failed = known.or_else(|| {
                self.build(train, &set).or_else(|| {
                    let label = label(train.cars, &set);
                    self.gate_of().run_checks(&label, train.tree, spawner.stop)
                })
            });
            match failed {
                None => train.good.extend_from_slice(half),
                Some(_) if spawner.stop.is_stopping() => return Ok(()),
                Some(check) if half.len() == 1 => train.broke.push((half[0], check)),
                Some(check) => self.bisect(train, (half, check), spawner)?,
            }
        }
        Ok(())
    }

    /// Lands the cars `good` in one move of the base (the integration worktree rebuilt to hold
    /// them when it holds more), each said merged.
    fn land_good(
        &mut self,
        tree: &Repo,
        cars: &[Car],
        good: &[usize],
        built: &mut Built,
    ) -> anyhow::Result<()> {
        let mut train = Train {
            tree,
            cars,
            built,
            good: &mut Vec::new(),
            broke: &mut Vec::new(),
        };
        if self.build(&mut train, good).is_some() {
            // What passed a moment ago no longer merges: each is merged again on its own.
            for &at in good {
                self.blocked.insert(cars[at].id.clone());
            }
            return Ok(());
        }
        let ids: Vec<&str> = good.iter().map(|&at| cars[at].id.as_str()).collect();
        let from = built.from.clone();
        match self.land(&ids, from, tree) {
            Ok(true) => {
                for (at, hash, carried) in std::mem::take(&mut built.cars) {
                    self.landed(&cars[at].id, &hash, carried);
                }
            }
            Ok(false) => {}
            Err(why) => {
                for id in ids {
                    self.give_up(id, &format!("its merge failed: {why}"));
                }
            }
        }
        Ok(())
    }
}

/// A train being bisected: the integration worktree, the cars, what it holds, and what is known.
struct Train<'t, 'c> {
    tree: &'t Repo,
    cars: &'c [Car],
    built: &'t mut Built,
    good: &'t mut Vec<usize>,
    broke: &'t mut Vec<(usize, Verification)>,
}

/// How the gate's records name a set of cars: `a+b+c`.
fn label(cars: &[Car], set: &[usize]) -> String {
    let ids: Vec<&str> = set.iter().map(|&at| cars[at].id.as_str()).collect();
    ids.join("+")
}

/// A merge that could not be made again, as a failed check.
fn failed_merge(why: &str) -> Verification {
    Verification {
        command: "merge the train again".to_owned(),
        output_tail: why.to_owned(),
        ..Verification::default()
    }
}
