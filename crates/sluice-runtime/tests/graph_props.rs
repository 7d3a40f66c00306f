//! Property test: random small graphs of sources, map, filter, flat_map, key_by, rebalance,
//! forward, broadcast, union and fan-out, at random parallelism, batch size and channel capacity,
//! with one or two sinks, produce the same multiset of records as a sequential evaluation of the
//! same graph.

use proptest::prelude::*;
use sluice_runtime::prelude::*;

/// Records are kept below this, so arithmetic never overflows.
const MODULUS: u64 = 10_007;
/// Graphs whose sequential answer is bigger than this are skipped (broadcast and flat_map
/// multiply the records; the test is about shapes, not volume).
const MAX_OUTPUT: usize = 20_000;

#[derive(Clone, Debug)]
enum Edge {
    Default,
    Rebalance,
    Forward,
    Broadcast,
    KeyBy(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Map { mul: u64, add: u64 },
    Filter { modulus: u64, rem: u64 },
    FlatMap { copies: u64 },
}

#[derive(Clone, Debug)]
enum Graph {
    /// `from_iter(data)`.
    Collection { data: Vec<u64>, p: usize },
    /// A bounded generator of `n` records.
    Generated { n: u64, mul: u64, p: usize },
    /// A pipeline of operators, each after its edge: `(edge, op, parallelism)`.
    Steps {
        input: Box<Graph>,
        steps: Vec<(Edge, Op, usize)>,
    },
    /// Independent inputs merged by `union`.
    Union {
        inputs: Vec<(Graph, Edge)>,
        p: usize,
    },
    /// One stream read by several operators (a fan-out), whose outputs are unioned.
    Fork {
        input: Box<Graph>,
        branches: Vec<(Edge, Op, usize)>,
        p: usize,
    },
}

impl Graph {
    fn parallelism(&self) -> usize {
        match self {
            Graph::Collection { p, .. }
            | Graph::Generated { p, .. }
            | Graph::Union { p, .. }
            | Graph::Fork { p, .. } => *p,
            Graph::Steps { input, steps } => steps.last().map_or(input.parallelism(), |s| s.2),
        }
    }

    /// Makes the graph valid: a forward edge needs equal parallelism on both sides, and `union`
    /// takes plain streams (a keyed stream must be processed first).
    fn fix(self) -> Graph {
        match self {
            Graph::Steps { input, steps } => {
                let input = input.fix();
                let mut upstream_p = input.parallelism();
                let steps = steps
                    .into_iter()
                    .map(|(edge, op, p)| {
                        let p = if matches!(edge, Edge::Forward) {
                            upstream_p
                        } else {
                            p
                        };
                        upstream_p = p;
                        (edge, op, p)
                    })
                    .collect();
                Graph::Steps {
                    input: Box::new(input),
                    steps,
                }
            }
            Graph::Union { inputs, p } => Graph::Union {
                inputs: inputs
                    .into_iter()
                    .map(|(g, e)| {
                        let g = g.fix();
                        let e = match e {
                            Edge::Forward if g.parallelism() != p => Edge::Rebalance,
                            Edge::KeyBy(_) => Edge::Rebalance,
                            e => e,
                        };
                        (g, e)
                    })
                    .collect(),
                p,
            },
            Graph::Fork { input, branches, p } => {
                let input = input.fix();
                let branches = branches
                    .into_iter()
                    .map(|(e, op, pb)| {
                        let pb = if matches!(e, Edge::Forward) {
                            input.parallelism()
                        } else {
                            pb
                        };
                        (e, op, pb)
                    })
                    .collect();
                Graph::Fork {
                    input: Box::new(input),
                    branches,
                    p,
                }
            }
            leaf => leaf,
        }
    }
}

fn generated(i: u64, mul: u64) -> u64 {
    i * mul % MODULUS
}

fn apply_seq(op: &Op, input: Vec<u64>) -> Vec<u64> {
    match *op {
        Op::Map { mul, add } => input.into_iter().map(|x| map_fn(x, mul, add)).collect(),
        Op::Filter { modulus, rem } => input.into_iter().filter(|x| x % modulus != rem).collect(),
        Op::FlatMap { copies } => input
            .into_iter()
            .flat_map(|x| (0..copies).map(move |j| x + j))
            .collect(),
    }
}

fn map_fn(x: u64, mul: u64, add: u64) -> u64 {
    (x % MODULUS) * mul + add
}

/// Broadcast gives every consumer subtask its own copy; every other edge moves each record once.
fn cross_seq(input: Vec<u64>, edge: &Edge, consumer_p: usize) -> Vec<u64> {
    match edge {
        Edge::Broadcast => {
            let mut out = Vec::with_capacity(input.len() * consumer_p);
            for _ in 0..consumer_p {
                out.extend_from_slice(&input);
            }
            out
        }
        _ => input,
    }
}

/// The sequential answer.
fn eval(g: &Graph) -> Vec<u64> {
    match g {
        Graph::Collection { data, .. } => data.clone(),
        Graph::Generated { n, mul, .. } => (0..*n).map(|i| generated(i, *mul)).collect(),
        Graph::Steps { input, steps } => steps.iter().fold(eval(input), |records, (e, op, p)| {
            apply_seq(op, cross_seq(records, e, *p))
        }),
        Graph::Union { inputs, p } => inputs
            .iter()
            .flat_map(|(g, e)| cross_seq(eval(g), e, *p))
            .collect(),
        Graph::Fork {
            input, branches, ..
        } => {
            let base = eval(input);
            branches
                .iter()
                .flat_map(|(e, op, pb)| apply_seq(op, cross_seq(base.clone(), e, *pb)))
                .collect()
        }
    }
}

fn partition(s: &DataStream<u64>, e: &Edge) -> DataStream<u64> {
    match e {
        Edge::Default | Edge::KeyBy(_) => s.clone(),
        Edge::Rebalance => s.rebalance(),
        Edge::Forward => s.forward(),
        Edge::Broadcast => s.broadcast(),
    }
}

/// Adds `op` after `s` across `edge`.
fn step(s: &DataStream<u64>, edge: &Edge, op: &Op) -> DataStream<u64> {
    if let Edge::KeyBy(m) = *edge {
        let keyed = s.key_by(move |x: &u64| x % m);
        return match *op {
            Op::Map { mul, add } => keyed.map(move |x| map_fn(x, mul, add)),
            Op::Filter { modulus, rem } => keyed.filter(move |x| x % modulus != rem),
            Op::FlatMap { copies } => keyed.flat_map(move |x| (0..copies).map(move |j| x + j)),
        };
    }
    let s = partition(s, edge);
    match *op {
        Op::Map { mul, add } => s.map(move |x| map_fn(x, mul, add)),
        Op::Filter { modulus, rem } => s.filter(move |x| x % modulus != rem),
        Op::FlatMap { copies } => s.flat_map(move |x| (0..copies).map(move |j| x + j)),
    }
}

/// The same graph as a job.
fn build(env: &StreamEnvironment, g: &Graph) -> DataStream<u64> {
    match g {
        Graph::Collection { data, p } => env.from_iter(data.clone()).parallelism(*p),
        Graph::Generated { n, mul, p } => {
            let mul = *mul;
            env.from_generator(Generator::new(move |i| generated(i, mul)).take(*n))
                .parallelism(*p)
        }
        Graph::Steps { input, steps } => steps.iter().fold(build(env, input), |s, (e, op, p)| {
            step(&s, e, op).parallelism(*p)
        }),
        Graph::Union { inputs, p } => {
            let mut streams = inputs.iter().map(|(g, e)| partition(&build(env, g), e));
            let first = streams.next().expect("a union has inputs");
            first.union(streams.collect::<Vec<_>>()).parallelism(*p)
        }
        Graph::Fork { input, branches, p } => {
            let base = build(env, input);
            let mut outs = branches
                .iter()
                .map(|(e, op, pb)| step(&base, e, op).parallelism(*pb));
            let first = outs.next().expect("a fork has branches");
            first.union(outs.collect::<Vec<_>>()).parallelism(*p)
        }
    }
}

fn edge() -> impl Strategy<Value = Edge> {
    prop_oneof![
        Just(Edge::Default),
        Just(Edge::Rebalance),
        Just(Edge::Forward),
        Just(Edge::Broadcast),
        (1u64..20).prop_map(Edge::KeyBy),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u64..10, 0u64..100).prop_map(|(mul, add)| Op::Map { mul, add }),
        (2u64..5, 0u64..5).prop_map(|(modulus, rem)| Op::Filter { modulus, rem }),
        prop_oneof![4 => 1u64..=2, 1 => Just(0u64)].prop_map(|copies| Op::FlatMap { copies }),
    ]
}

fn graph() -> impl Strategy<Value = Graph> {
    let leaf = prop_oneof![
        (proptest::collection::vec(0u64..MODULUS, 1..120), 1usize..=4)
            .prop_map(|(data, p)| Graph::Collection { data, p }),
        (1u64..300, 1u64..50, 1usize..=4).prop_map(|(n, mul, p)| Graph::Generated { n, mul, p }),
    ];
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            2 => (inner.clone(), proptest::collection::vec((edge(), op(), 1usize..=4), 1..=4))
                .prop_map(|(input, steps)| Graph::Steps { input: Box::new(input), steps }),
            1 => (proptest::collection::vec((inner.clone(), edge()), 2..=3), 1usize..=4)
                .prop_map(|(inputs, p)| Graph::Union { inputs, p }),
            1 => (inner, proptest::collection::vec((edge(), op(), 1usize..=4), 2..=3), 1usize..=4)
                .prop_map(|(input, branches, p)| Graph::Fork { input: Box::new(input), branches, p }),
        ]
    })
    .prop_map(Graph::fix)
    .prop_filter("too many output records", |g| eval(g).len() <= MAX_OUTPUT)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_graphs_produce_the_sequential_multiset(
        g in graph(),
        sink_p in 1usize..=4,
        batch_size in prop_oneof![Just(1usize), 2usize..8, Just(64), Just(1024)],
        channel_capacity in 1usize..=3,
        second_sink in any::<bool>(),
    ) {
        let mut expected = eval(&g);
        expected.sort_unstable();

        let env = StreamEnvironment::new();
        env.set_parallelism(sink_p)
            .set_batch_size(batch_size)
            .set_channel_capacity(channel_capacity);
        let stream = build(&env, &g);
        let out = stream.collect();
        // Optionally a second consumer of the same stream, ending in its own sink.
        let also = second_sink.then(|| stream.rebalance().map(|x| x).collect());
        env.execute_blocking("random graph").unwrap();
        let mut got = out.take();
        got.sort_unstable();
        prop_assert_eq!(&got, &expected);
        if let Some(also) = also {
            let mut got = also.take();
            got.sort_unstable();
            prop_assert_eq!(got, expected);
        }
    }
}
