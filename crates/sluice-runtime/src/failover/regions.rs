//! Pipelined regions: the groups of tasks that must fail over together.
//!
//! In a streaming job every exchange is pipelined: a consumer reads what its producer writes
//! while both run, and nothing is kept to be read again. So when a task fails, every task it
//! exchanges records with (directly or through others) has lost data in flight and must restart
//! with it, from the same checkpoint. Those groups are the connected components of the task
//! graph, Flink's *pipelined regions* (`PipelinedRegionComputeUtil`; its region failover strategy
//! restarts only the failed task's region). Which tasks an exchange connects depends on its
//! partitioning:
//!
//! - pointwise (forward: subtask `i` to subtask `i`) joins each producer subtask with the one
//!   consumer subtask it feeds;
//! - all-to-all (rebalance, hash, broadcast, custom) joins every producer subtask with every
//!   consumer subtask, so both sides become one region.
//!
//! Chained operators share a task and so a region already. Tasks are numbered as deployment
//! numbers them: chain by chain, and within a chain by subtask.
//!
//! For example (unit test `worked_example`), three chains `a` (parallelism 2), `b` (2) and `c`
//! (2) with `a -> b` forward and two independent pipelines `a -> b` and `c`:
//!
//! ```text
//! tasks      a0=0 a1=1 | b0=2 b1=3 | c0=4 c1=5
//! a -> b forward         joins 0-2 and 1-3
//! regions    {0, 2} {1, 3} {4} {5}
//! ```
//!
//! With `a -> b` hashed instead, `{0, 1, 2, 3}` is one region; `c`'s subtasks stay apart.

use std::collections::BTreeMap;

/// How an exchange connects its producer's subtasks to its consumer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Connection {
    /// Subtask `i` feeds subtask `i` only (both sides have the same parallelism).
    Pointwise,
    /// Every producer subtask may feed every consumer subtask.
    AllToAll,
}

/// One exchange between two chains (indices into the chains' parallelisms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Exchange {
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) connection: Connection,
}

/// The pipelined regions of a job: each region's tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Regions {
    members: Vec<Vec<usize>>,
    /// The region of each task.
    region_of: Vec<usize>,
}

impl Regions {
    /// Computes the regions of chains with the given parallelisms connected by `exchanges`.
    /// Regions are numbered by their lowest task, and list their tasks in order.
    pub(crate) fn compute(parallelism: &[usize], exchanges: &[Exchange]) -> Regions {
        let first: Vec<usize> = parallelism
            .iter()
            .scan(0, |next, &p| {
                let at = *next;
                *next += p;
                Some(at)
            })
            .collect();
        let tasks: usize = parallelism.iter().sum();
        let mut sets = DisjointSets::new(tasks);
        for x in exchanges {
            let (pf, pt) = (parallelism[x.from], parallelism[x.to]);
            match x.connection {
                Connection::Pointwise => {
                    for s in 0..pf.min(pt) {
                        sets.union(first[x.from] + s, first[x.to] + s);
                    }
                }
                Connection::AllToAll => {
                    let producers = first[x.from]..first[x.from] + pf;
                    let consumers = first[x.to]..first[x.to] + pt;
                    if let Some(anchor) = producers.clone().next() {
                        for t in producers.chain(consumers) {
                            sets.union(anchor, t);
                        }
                    }
                }
            }
        }
        let mut numbering: BTreeMap<usize, usize> = BTreeMap::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut region_of = Vec::with_capacity(tasks);
        for t in 0..tasks {
            let root = sets.find(t);
            let region = *numbering.entry(root).or_insert_with(|| {
                members.push(Vec::new());
                members.len() - 1
            });
            members[region].push(t);
            region_of.push(region);
        }
        Regions { members, region_of }
    }

    /// The region `task` belongs to (`None` for an unknown task).
    pub(crate) fn region_of(&self, task: usize) -> Option<usize> {
        self.region_of.get(task).copied()
    }

    /// How many regions there are.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// The tasks of `region`, in order (empty for an unknown region).
    pub(crate) fn tasks(&self, region: usize) -> &[usize] {
        self.members.get(region).map_or(&[], Vec::as_slice)
    }
}

/// Union-find over task indices, with path halving and union by size.
struct DisjointSets {
    parent: Vec<usize>,
    size: Vec<usize>,
}

impl DisjointSets {
    fn new(n: usize) -> Self {
        DisjointSets {
            parent: (0..n).collect(),
            size: vec![1; n],
        }
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    fn union(&mut self, a: usize, b: usize) {
        let (mut a, mut b) = (self.find(a), self.find(b));
        if a == b {
            return;
        }
        if self.size[a] < self.size[b] {
            std::mem::swap(&mut a, &mut b);
        }
        self.parent[b] = a;
        self.size[a] += self.size[b];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exchange(from: usize, to: usize, connection: Connection) -> Exchange {
        Exchange {
            from,
            to,
            connection,
        }
    }

    fn all(r: &Regions) -> Vec<Vec<usize>> {
        (0..r.len()).map(|i| r.tasks(i).to_vec()).collect()
    }

    fn region_of(r: &Regions, task: usize) -> Option<usize> {
        let found = (0..r.len()).find(|&i| r.tasks(i).contains(&task));
        assert_eq!(
            found,
            r.region_of(task),
            "the index agrees with the members"
        );
        found
    }

    #[test]
    fn worked_example() {
        let forward = Regions::compute(&[2, 2, 2], &[exchange(0, 1, Connection::Pointwise)]);
        assert_eq!(
            all(&forward),
            vec![vec![0, 2], vec![1, 3], vec![4], vec![5]]
        );
        assert_eq!(region_of(&forward, 3), Some(1));
        assert_eq!(region_of(&forward, 6), None);

        let hashed = Regions::compute(&[2, 2, 2], &[exchange(0, 1, Connection::AllToAll)]);
        assert_eq!(all(&hashed), vec![vec![0, 1, 2, 3], vec![4], vec![5]]);
    }

    #[test]
    fn a_keyed_job_is_one_region_and_independent_pipelines_are_apart() {
        // source (2) -hash-> count (3) -forward-> sink (3); and source2 (1) -> sink2 (1).
        let r = Regions::compute(
            &[2, 3, 3, 1, 1],
            &[
                exchange(0, 1, Connection::AllToAll),
                exchange(1, 2, Connection::Pointwise),
                exchange(3, 4, Connection::AllToAll),
            ],
        );
        assert_eq!(all(&r), vec![(0..8).collect(), vec![8, 9]]);
    }

    #[test]
    fn a_union_of_two_forward_inputs_joins_their_subtasks_pairwise() {
        // a (2) and b (2) both forward into u (2): a_i, b_i and u_i are one region per i.
        let r = Regions::compute(
            &[2, 2, 2],
            &[
                exchange(0, 2, Connection::Pointwise),
                exchange(1, 2, Connection::Pointwise),
            ],
        );
        assert_eq!(all(&r), vec![vec![0, 2, 4], vec![1, 3, 5]]);
    }

    #[test]
    fn a_job_with_no_exchange_has_one_region_per_task() {
        let r = Regions::compute(&[3], &[]);
        assert_eq!(all(&r), vec![vec![0], vec![1], vec![2]]);
        assert_eq!(Regions::compute(&[], &[]).len(), 0);
    }

    proptest! {
        /// Every task is in exactly one region; the two ends of every connection share one.
        #[test]
        fn regions_partition_the_tasks_and_respect_every_connection(
            parallelism in prop::collection::vec(1usize..4, 1..6),
            raw in prop::collection::vec((0usize..6, 0usize..6, any::<bool>()), 0..8),
        ) {
            let n = parallelism.len();
            let exchanges: Vec<Exchange> = raw
                .into_iter()
                .map(|(a, b, pointwise)| {
                    let (from, to) = (a % n, b % n);
                    let pointwise = pointwise && parallelism[from] == parallelism[to];
                    let connection = if pointwise { Connection::Pointwise } else { Connection::AllToAll };
                    exchange(from, to, connection)
                })
                .collect();
            let r = Regions::compute(&parallelism, &exchanges);
            let tasks: usize = parallelism.iter().sum();
            let mut seen: Vec<usize> = (0..r.len()).flat_map(|i| r.tasks(i).to_vec()).collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..tasks).collect::<Vec<_>>());
            let first: Vec<usize> = parallelism.iter().scan(0, |s, &p| { let a = *s; *s += p; Some(a) }).collect();
            for x in &exchanges {
                for s in 0..parallelism[x.from] {
                    for t in 0..parallelism[x.to] {
                        let joined = x.connection == Connection::AllToAll || s == t;
                        if joined {
                            prop_assert_eq!(
                                region_of(&r, first[x.from] + s),
                                region_of(&r, first[x.to] + t)
                            );
                        }
                    }
                }
            }
        }
    }
}
